// rowops.cuh — per-row device functions shared by a stand-alone kernel and a fused one, so both
// give the same bits: the residual add + RMSNorm of a row (norm.cu's k_add_rmsnorm, the combine
// of moe.cu, the add+norm tail of a decode matmul) and the router's softmax / top-k of a row
// (moe.cu's k_router, the router tail of a decode matmul). Their reads of the row's inputs go
// through L2 (__ldcg): inside a fused kernel they were written by other blocks of the same launch
// (L1 is not coherent between SMs).
#pragma once

#include "cuda/common.cuh"

#define NORM_VT 256      // the reduction order of a row norm: that of 256 threads (see add_rmsnorm_row)
#define ROUTER_MAXE 1024 // experts per lane-array: E <= 1024 (32 per lane)
#define ROUTER_NV(E) ((E) <= 512 ? 16 : 32) // values per lane of router_row for E experts

// The scale of a row norm from the NORM_VT / 32 virtual-warp sums in sh[0 ..]: one more butterfly
// (zeros above them), then (float)(1 / sqrt(ss / n + eps)). Every thread of the block calls it.
__device__ __forceinline__ float row_norm_scale(double *sh, int n, float eps) {
    const int lane = threadIdx.x & 31;
    __syncthreads();
    if (threadIdx.x < 32) {
        double t = lane < NORM_VT / 32 ? sh[lane] : 0.0;
        t = warp_sumd(t);
        if (lane == 0) sh[NORM_VT / 32] = t;
    }
    __syncthreads();
    return (float)(1.0 / sqrt(sh[NORM_VT / 32] / n + (double)eps));
}

// Per row: if yr: xr += yr (float adds, in place); if o: o = rmsnorm(xr) * w (CPU ops_rmsnorm:
// ss in double, scale = (float)(1/sqrt(ss/n + eps)), (x*scale)*w). The sum of squares is taken in
// the order of 256 virtual threads whatever blockDim.x (32, 64, 128 or 256): virtual thread v sums
// elements v, v+256, ... in order, each virtual warp is summed by the butterfly, and the 8 warp
// sums by one more butterfly (zeros above 8) — block_sumd's order at 256 threads, so the bits do
// not depend on the block size of the caller. sh: 32 doubles of shared memory. Every thread of
// the block must call it (barriers inside).
__device__ __forceinline__ void add_rmsnorm_row(float *xr, const float *yr, const float *__restrict__ w,
                                                float *o, int n, float eps, double *sh) {
    constexpr int B = 8; // values loaded before any is stored: one memory round trip per 8, not per value
    const int nt = blockDim.x, lane = threadIdx.x & 31;
    for (int v0 = 0; v0 < NORM_VT; v0 += nt) {
        const int v = v0 + (int)threadIdx.x;
        double ss = 0;
        for (int i0 = v; i0 < n; i0 += B * NORM_VT) {
            float xs[B], ys[B];
#pragma unroll
            for (int j = 0; j < B; j++) {
                const int i = i0 + j * NORM_VT;
                xs[j] = i < n ? __ldcg(xr + i) : 0.0f;
                ys[j] = yr && i < n ? __ldcg(yr + i) : 0.0f;
            }
#pragma unroll
            for (int j = 0; j < B; j++) {
                const int i = i0 + j * NORM_VT;
                if (i >= n) break;
                float x = xs[j];
                if (yr) {
                    x = x + ys[j];
                    xr[i] = x;
                }
                ss += (double)x * (double)x;
            }
        }
        ss = warp_sumd(ss);
        if (lane == 0) sh[v >> 5] = ss;
    }
    if (!o) return;
    const float scale = row_norm_scale(sh, n, eps);
    // element i was written above by virtual thread i % 256, i.e. by thread i % nt: this thread
    for (int i0 = threadIdx.x; i0 < n; i0 += B * nt) {
        float xs[B], ws[B];
#pragma unroll
        for (int j = 0; j < B; j++) {
            const int i = i0 + j * nt;
            xs[j] = i < n ? __ldcg(xr + i) : 0.0f;
            ws[j] = w && i < n ? w[i] : 1.0f;
        }
#pragma unroll
        for (int j = 0; j < B; j++) {
            const int i = i0 + j * nt;
            if (i < n) o[i] = w ? (xs[j] * scale) * ws[j] : xs[j] * scale;
        }
    }
}

// add_rmsnorm_row for a block of NORM_VT threads and n <= NORM_VT * B (B = 8: hidden sizes up to 2,048):
// each thread's values and norm weights stay in registers between the sum of squares and the output,
// so the row is read once (x, y and w in one round trip) instead of twice. The same operations in the
// same order as add_rmsnorm_row (virtual thread v = this thread, one chunk of B): the same bits.
__device__ __forceinline__ void add_rmsnorm_row_regs(float *xr, const float *yr, const float *__restrict__ w,
                                                     float *o, int n, float eps, double *sh) {
    constexpr int B = 8;
    const int v = threadIdx.x, lane = threadIdx.x & 31;
    float xs[B], ys[B], ws[B];
#pragma unroll
    for (int j = 0; j < B; j++) {
        const int i = v + j * NORM_VT;
        xs[j] = i < n ? __ldcg(xr + i) : 0.0f;
        ys[j] = yr && i < n ? __ldcg(yr + i) : 0.0f;
        ws[j] = w && i < n ? w[i] : 1.0f;
    }
    double ss = 0;
#pragma unroll
    for (int j = 0; j < B; j++) {
        const int i = v + j * NORM_VT;
        if (i >= n) break;
        if (yr) {
            xs[j] = xs[j] + ys[j];
            xr[i] = xs[j];
        }
        ss += (double)xs[j] * (double)xs[j];
    }
    ss = warp_sumd(ss);
    if (lane == 0) sh[v >> 5] = ss;
    if (!o) return;
    const float scale = row_norm_scale(sh, n, eps);
#pragma unroll
    for (int j = 0; j < B; j++) {
        const int i = v + j * NORM_VT;
        if (i < n) o[i] = w ? (xs[j] * scale) * ws[j] : xs[j] * scale;
    }
}

// The router of row t, by one warp; NV = values per lane (E <= 32 NV; ROUTER_NV picks 16 for E <= 512, the
// Qwen3-Next routers, so their loops are half as long as with ROUTER_MAXE / 32 = 32: the same operations on
// the same values, lanes past E held at -inf / key 0 either way, so the same outputs).
// CPU: ops_softmax (max, expf, double sum, inv = (float)(1/s)), ops_topk (descending, ties -> lower id),
// weights p / sum (double, clamped at 6.1035e-5).
// ids/wout/pout: [T][K]; tiles (may be NULL): the decode plan, one tile per (row, slot) pair.
// PACKED (k_router's default; RL_CUDA_ROUTER_TOPK=butterfly selects the other; the matmul tail keeps the
// butterfly): the same selection with two single-instruction warp reductions per pick instead of five
// two-value butterfly rounds: a candidate's key is its probability's bits + 1 (p >= 0, so the bits order as
// the values; 0 marks taken / absent), __reduce_max_sync gives the largest key, __reduce_min_sync the lowest
// id holding it (each lane offers its lowest such id: ids ascend with i). The same ids in the same
// order, the same p: the same outputs.
template <bool PACKED, int NV>
__device__ __forceinline__ void router_row(const float *x, int E, int K, int t, int T, int32_t *ids,
                                           float *wout, float *pout, cu_tile *tiles, int *n_tiles,
                                           int32_t *pair_in, int32_t *pair_out) {
    const int lane = threadIdx.x & 31;
    float v[NV];
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < NV; i++) {
        const int e = i * 32 + lane;
        v[i] = e < E ? __ldcg(x + e) : -INFINITY;
        mx = fmaxf(mx, v[i]);
    }
    mx = warp_max(mx);
    double s = 0;
#pragma unroll
    for (int i = 0; i < NV; i++) {
        if (i * 32 + lane < E) {
            v[i] = expf(v[i] - mx);
            s += (double)v[i];
        }
    }
    s = warp_sumd(s);
    const float inv = (float)(1.0 / s);
#pragma unroll
    for (int i = 0; i < NV; i++) v[i] = i * 32 + lane < E ? v[i] * inv : -1.0f; // p >= 0
    double sum = 0;
    int my_id = -1;
    float my_p = 0;
    if constexpr (PACKED) {
        uint32_t key[NV];
#pragma unroll
        for (int i = 0; i < NV; i++) key[i] = i * 32 + lane < E ? __float_as_uint(v[i]) + 1u : 0u;
        for (int k = 0; k < K; k++) {
            uint32_t lm = 0;
#pragma unroll
            for (int i = 0; i < NV; i++) lm = max(lm, key[i]);
            const uint32_t m = __reduce_max_sync(FULL_MASK, lm);
            uint32_t ci = 0xffffffffu;
#pragma unroll
            for (int i = NV - 1; i >= 0; i--) // the lowest i holding m wins
                if (key[i] == m) ci = (uint32_t)(i * 32 + lane);
            const int bi = (int)__reduce_min_sync(FULL_MASK, ci);
            const float bv = __uint_as_float(m - 1u);
#pragma unroll
            for (int i = 0; i < NV; i++)
                if (bi == i * 32 + lane) key[i] = 0u; // taken
            sum += (double)bv;                        // selection order, as the CPU
            if (lane == k) {
                my_id = bi;
                my_p = bv;
            }
        }
    } else {
        uint32_t taken = 0;
        for (int k = 0; k < K; k++) {
            float bv = -2.0f;
            int bi = 0x7fffffff;
#pragma unroll
            for (int i = 0; i < NV; i++)
                if (!((taken >> i) & 1) && v[i] > bv) { // ascending ids per lane: first max wins ties
                    bv = v[i];
                    bi = i * 32 + lane;
                }
#pragma unroll
            for (int o = 16; o; o >>= 1) {
                float ov = __shfl_xor_sync(FULL_MASK, bv, o);
                int oi = __shfl_xor_sync(FULL_MASK, bi, o);
                if (ov > bv || (ov == bv && oi < bi)) {
                    bv = ov;
                    bi = oi;
                }
            }
            if ((bi & 31) == lane) taken |= 1u << (bi >> 5);
            sum += (double)bv; // same order as the CPU: selection order
            if (lane == k) {
                my_id = bi;
                my_p = bv;
            }
        }
    }
    if (sum < 6.103515625e-5) sum = 6.103515625e-5;
    if (lane < K) {
        const size_t o = (size_t)t * K + lane;
        ids[o] = my_id;
        wout[o] = (float)((double)my_p / sum);
        if (pout) pout[o] = my_p;
        if (tiles) { // decode plan: one tile per (row, selected expert) pair
            tiles[o] = cu_tile{my_id, (int32_t)o, 1, 0};
            pair_in[o] = t;
            pair_out[o] = (int32_t)o;
            if (t == 0 && lane == 0) *n_tiles = T * K;
        }
    }
}
