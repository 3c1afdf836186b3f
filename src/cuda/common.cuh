// common.cuh — shared device helpers of the CUDA kernels: launch checks, warp/block
// reductions with a fixed order (batch invariance, see cuda_ops.h), fp16/bf16 loads, the
// float helpers that mirror the CPU reference (ops.c).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>

#include "cuda/cuda_ops.h"
// swiglu(): the experts' silu(gate) * up of every gate/up epilogue, the function the CPU runs for the
// VRAM tier's CPU-computed experts (the same bits: the exact hybrid, --vram-miss cpu|auto)
#include "base/swiglu.h"

// After a launch: report a launch error (bad configuration, no device, ...).
#define CU_LAUNCHED(what)                                                                                    \
    do {                                                                                                     \
        cudaError_t e_ = cudaGetLastError();                                                                 \
        if (e_ != cudaSuccess) return cu_fail(e_, what, __FILE__, __LINE__);                                 \
    } while (0)

#define FULL_MASK 0xffffffffu

// ---- programmatic dependent launch (PDL, sm_90) --------------------------------------------------
//
// By default on sm_90 and later (RL_CUDA_PDL=0 turns it off; cu_dev.pdl) every kernel is launched (cu_go)
// with programmatic stream serialisation, so the next kernel of the stream may be launched before this one
// ends: its blocks become resident as this one's leave, do what needs no result of the kernels before them (a
// dense GEMV copies its weight rows) and wait in pdl_enter until the previous grid has completed and its
// stores are visible. The contract, for every kernel: pdl_enter runs before the first read of anything a
// kernel before it wrote and before the first store to global memory; before it, only weights (written once
// at load) may be read. tests/test_cuda_source.py checks that every kernel calls it. pdl_enter also lets the
// next kernel launch (launch_dependents) once every block of this one has passed it; a kernel launched
// without the attribute, or with no kernel before it, returns from the wait at once. Same arithmetic either
// way: same bits.
__device__ __forceinline__ void pdl_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Launch kern<<<grid, block, sm, s.s>>>(args...), with the PDL attribute when the device takes it
// (cu_dev.pdl: RL_CUDA_PDL, compute capability >= 9.0; H200, 12-layer calibrated files, decode:
// Q4_K_M +4 % (+10-15 % at 8K), CF2 and IQ2_XXS within the noise, bench/results/2026-12-04-*); errors
// are left for cudaGetLastError (CU_LAUNCHED) as with <<< >>>.
template <typename... P, typename... A>
static inline void cu_go(void (*kern)(P...), dim3 grid, dim3 block, size_t sm, cu_stream s, A... args) {
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = sm;
    cfg.stream = s.s;
    cfg.attrs = at;
    cfg.numAttrs = s.dev->pdl ? 1 : 0;
    (void)cudaLaunchKernelEx(&cfg, kern, args...);
}

// ---- per-kernel launch state in the device struct (cuda_dev.cu) ---------------------------------------

// The slot of kernel fn in d's table (NULL when full: the callers then ask the runtime every time).
cu_fn_slot *cu_dev_slot(cu_dev *d, const void *fn);
// Blocks of fn (threads per block, smem bytes of dynamic shared memory, opted in already) resident on
// the whole GPU at once into *n; the answer kept in fn's slot for the next launch of the same size.
int cu_dev_resident(cu_dev *d, const void *fn, int threads, size_t smem, unsigned *n);
// cu_dev_smem for a kernel of any signature.
template <typename K> static inline int cu_smem(cu_stream s, K kern, size_t smem, const char *what) {
    return cu_dev_smem(s.dev, (const void *)kern, smem, what);
}

// Butterfly sums: every lane ends with the same value, summed in one fixed tree.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}
__device__ __forceinline__ double warp_sumd(double v) {
#pragma unroll
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
    return v;
}

// Block sum in double (blockDim.x a multiple of 32, <= 1024): warp butterflies, then warp 0
// sums the per-warp values. sh: 32 doubles of shared memory. All threads get the result.
__device__ __forceinline__ double block_sumd(double v, double *sh) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sumd(v);
    __syncthreads();
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    if (wid == 0) {
        double t = lane < nw ? sh[lane] : 0.0;
        t = warp_sumd(t);
        if (lane == 0) sh[0] = t;
    }
    __syncthreads();
    return sh[0];
}

// Whether this block is the last of n blocks to count itself on counter (zeroed; the last block puts
// it back after its extra step, ready for the next launch). Every thread of the block calls it after
// its stores; the last block then sees the stores of all n (fences before the count and after it).
__device__ __forceinline__ bool block_last(unsigned *counter, unsigned n) {
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(counter, 1u) == n - 1;
    __syncthreads();
    if (last) __threadfence();
    return last;
}

__device__ __forceinline__ float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ float bf2f(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

// CPU reference helpers (ops.c), float math with the same formulas.
__device__ __forceinline__ float silu_f(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float softplus_f(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// Unaligned little-endian loads from a byte pointer (2-byte aligned blocks: Q8_0, Q6_K, IQ*).
__device__ __forceinline__ uint16_t ld16(const uint8_t *p) { return *(const uint16_t *)p; }
__device__ __forceinline__ uint32_t ld32_2(const uint8_t *p) { // p 2-byte aligned
    return (uint32_t)ld16(p) | ((uint32_t)ld16(p + 2) << 16);
}
__device__ __forceinline__ uint32_t ld32_b(const uint8_t *p) { // any alignment
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
