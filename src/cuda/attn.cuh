// attn.cuh — what the attention kernels share (attn.cu: the FP32 kernels, attn_tc.cu: the tensor-core
// ones): the chunk length, the in-order merge of chunk partials, the output gate, the decode merge
// kernel and the shared-memory opt-in. A chunk partial of a row is (m = max score, l = sum of exp,
// acc = sum of exp * v); merging them in chunk order with merge_ab / merge_o is what makes the split
// decode and the prefill walk give the same bits, whatever kernel made the partials.
#pragma once

#include "cuda/common.cuh"

#include <cuda_pipeline.h>

#define CH CU_ATTN_CHUNK

// Merge a chunk partial (m, l) into a row's running (M, L); a scales the running sums O, b the
// chunk's acc (merge_o).
__device__ __forceinline__ void merge_ab(float &M, float &L, float m, float l, float &a, float &b) {
    const float Mn = fmaxf(M, m);
    a = expf(M - Mn);
    b = expf(m - Mn);
    L = L * a + l * b;
    M = Mn;
}
__device__ __forceinline__ float merge_o(float O, float acc, float a, float b) { return O * a + acc * b; }

template <int DPL>
__device__ __forceinline__ void merge_step(float &M, float &L, float *O, float m, float l, const float *acc) {
    float a, b;
    merge_ab(M, L, m, l, a, b);
#pragma unroll
    for (int d = 0; d < DPL; d++) O[d] = merge_o(O[d], acc[d], a, b);
}

// One output value: O / L times the sigmoid gate.
__device__ __forceinline__ float attn_out(float O, float L, float gate) { return (O / L) * sigmoid_f(gate); }

// A row's output dims j0 .. j0 + DPL - 1 (default: this lane's).
template <int DPL>
__device__ __forceinline__ void attn_finish(const float *O, float L, const float *gate, float *out,
                                            int j0 = (threadIdx.x & 31) * DPL) {
#pragma unroll
    for (int d = 0; d < DPL; d++) out[j0 + d] = attn_out(O[d], L, gate[j0 + d]);
}

// Decode: the partials part[t][h][chunk][HD + 2] of chunks 0 .. (pos0 + t) / CH merged in order, one
// block per (row, query head) of HD / PT threads, PT output dims per thread: each thread runs the
// row's (M, L) chain itself (merge_step's operations, so the same values in every thread) and its
// dims' O chains. The chains are serial, their loads are not: PF partials are loaded before they are
// merged. The operations and their order are merge_step's whatever PT and PF, so every shape gives
// the same bits. A warp per (row, head) (PT = DPL) with 8 partials in flight (H200, 12-layer Q4_K_M,
// decode at 32K depth: 603 -> 615-629 tok/s over one at a time) still took ~27 us per layer, as long
// as the split kernel (16 warps on the GPU); hence a thread per dim (PT = 1: 12-layer decode at 32K depth
// CF2 596-605 -> 608-609, Q4_K_M 615-625 -> 626-634 tok/s), with 64 partials in flight (the warp shape,
// fewer partials in flight and a merge with its factors made in parallel measured slower and are gone:
// bench/results/2026-12-06-cuda-variants-removed.md).
// Partials c0 .. c0 + PF - 1 (those < n) of a row merged into (M, L, O): all loaded, then merged in
// order. FULL (c0 + PF <= n): no bound checks, so the batch is straight-line code and the exps of a step
// (which need only the running max) are computed ahead of the L and O chains; the same operations.
template <int HD, int PT, int PF, bool FULL>
__device__ __forceinline__ void merge_batch(const float *base, int d0, int c0, int n, float &M, float &L,
                                            float *O) {
    float pm[PF], pl[PF], pa[PF][PT];
#pragma unroll
    for (int k = 0; k < PF; k++) {
        if (!FULL && c0 + k >= n) break;
        const float *pp = base + (size_t)(c0 + k) * (HD + 2);
        pm[k] = pp[0];
        pl[k] = pp[1];
#pragma unroll
        for (int d = 0; d < PT; d++) pa[k][d] = pp[2 + d0 + d];
    }
#pragma unroll
    for (int k = 0; k < PF; k++) {
        if (!FULL && c0 + k >= n) break;
        merge_step<PT>(M, L, O, pm[k], pl[k], pa[k]);
    }
}

template <int DPL>
__global__ void __launch_bounds__(DPL * 32)
    k_attn_merge(cu_attn_dims a, const float *__restrict__ qg, const int *pos0,
                 const float *__restrict__ part, int nch, float *o) {
    pdl_enter();
    constexpr int HD = DPL * 32, PT = 1, PF = 64;
    const int t = blockIdx.x, h = blockIdx.y, d0 = threadIdx.x * PT;
    const int n = (*pos0 + t) / CH + 1;
    const float *base = part + ((size_t)t * a.H + h) * nch * (HD + 2);
    float M = -INFINITY, L = 0.0f, O[PT];
#pragma unroll
    for (int d = 0; d < PT; d++) O[d] = 0.0f;
    int c0 = 0;
    for (; c0 + PF <= n; c0 += PF) merge_batch<HD, PT, PF, true>(base, d0, c0, n, M, L, O);
    if (c0 < n) merge_batch<HD, PT, PF, false>(base, d0, c0, n, M, L, O);
    attn_finish<PT>(O, L, qg + (size_t)t * a.H * 2 * HD + (size_t)h * 2 * HD + HD,
                    o + (size_t)t * a.H * HD + (size_t)h * HD, d0);
}

// The decode merge of T rows x H heads: a block of HD threads per (row, head). 64 partials in flight: at
// 32K positions a row has 129 partials, so 3 load round trips on the chain, and whole batches
// (merge_batch FULL) let the exps run ahead of the L / O chains (Nsight Compute, H200, 12-layer CF2 at
// 32K: 17.0 us with 16 a batch -> 11.2 us).
template <int DPL>
static int attn_merge_launch(const cu_attn_dims *a, const float *qg, const int *pos0, const float *part,
                             int nch, int T, float *o, cu_stream s) {
    cu_go(k_attn_merge<DPL>, dim3(T, a->H), DPL * 32, 0, s, *a, qg, pos0, part, nch, o);
    CU_LAUNCHED("k_attn_merge");
    return 0;
}

// Rows b0 .. b0 + n - 1 of one head's K or V (row stride kvw elements) into dst (row stride ld elements),
// 16-byte cp.async copies by the block's NTHREADS threads, committed as one group of this thread (an
// empty one for n <= 0) and not waited for.
template <typename KV, int HD, int NTHREADS>
__device__ __forceinline__ void stage_kv_issue(KV *dst, int ld, const KV *src, size_t kvw, int b0, int n) {
    constexpr int EPC = 16 / (int)sizeof(KV), PPR = HD / EPC; // elements per copy, copies per row
    for (int i = threadIdx.x; i < n * PPR; i += NTHREADS) {
        const int r = i / PPR, c = i % PPR;
        __pipeline_memcpy_async(dst + (size_t)r * ld + c * EPC, src + (size_t)(b0 + r) * kvw + c * EPC, 16);
    }
    __pipeline_commit();
}
// The same, returning when this thread's copies have landed (the caller synchronises the block before
// reading them).
template <typename KV, int HD, int NTHREADS>
__device__ __forceinline__ void stage_kv_async(KV *dst, int ld, const KV *src, size_t kvw, int b0, int n) {
    stage_kv_issue<KV, HD, NTHREADS>(dst, ld, src, kvw, b0, n);
    __pipeline_wait_prior(0);
}

// The tensor-core kernels (attn_tc.cu) for cu_attention when a->tc: 0 or -1 (error set).
int attn_tc(const cu_attn_dims *a, const float *qg, const void *kc, const void *vc, const int *pos0, int T,
            bool split, float *part, float *o, cu_stream s);
