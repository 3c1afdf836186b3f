// moe.cu — the MoE pieces around the expert matmuls (matmul.cuh): router softmax / top-k /
// renormalise, the grouping plan of a chunk's (row, slot) pairs by expert, and the combine
// (weighted sum + gated shared expert + residual + the next RMSNorm).
#include "cuda/rowops.cuh"

// One warp per row (rowops.cuh: router_row, shared with the router tail of the decode matmul).
template <bool PACKED, int NV>
__global__ void k_router(const float *__restrict__ logits, int E, int K, int T, int32_t *ids, float *wout,
                         float *pout, cu_tile *tiles, int *n_tiles, int32_t *pair_in, int32_t *pair_out) {
    pdl_enter();
    const int t = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (t >= T) return;
    router_row<PACKED, NV>(logits + (size_t)t * E, E, K, t, T, ids, wout, pout, tiles, n_tiles, pair_in,
                           pair_out);
}

extern "C" int cu_router(const float *logits, int E, int K, int T, int32_t *ids, float *w, float *p,
                         cu_tile *tiles, int *n_tiles, int32_t *pair_in, int32_t *pair_out, cu_stream s) {
    if (E > ROUTER_MAXE || K > 32 || K > E)
        return rl_seterr("cu_router: %d experts / top-%d not supported (at most %d / 32)", E, K, ROUTER_MAXE);
    // packed-key picks (two single-instruction warp reductions per pick): the same selection as the
    // butterfly picks the matmul tail keeps (test_tail_router compares them bit for bit) and faster
    // (docs/TUNING.md, deleted variants: RL_CUDA_ROUTER_TOPK=butterfly)
    auto k = ROUTER_NV(E) == 16 ? k_router<true, 16> : k_router<true, 32>;
    cu_go(k, (T + 3) / 4, 128, 0, s, logits, E, K, T, ids, w, p, tiles, n_tiles, pair_in, pair_out);
    CU_LAUNCHED("k_router");
    return 0;
}

// One block: counts per expert, pair offsets, tiles of <= tt pairs. The order of pairs
// inside an expert is not fixed (atomics) and does not matter: each pair's arithmetic is
// independent of its tile neighbours.
__global__ void __launch_bounds__(1024)
    k_moe_plan(const int32_t *__restrict__ ids, int n, int K, int E, int tt, cu_tile *tiles, int *n_tiles,
               int32_t *pair_in, int32_t *pair_out, int *counts) {
    pdl_enter();
    extern __shared__ int sm[]; // cnt[E], off[E], toff[E]
    int *cnt = sm, *off = sm + E, *toff = sm + 2 * E;
    for (int e = threadIdx.x; e < E; e += blockDim.x) cnt[e] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) atomicAdd(&cnt[ids[i]], 1);
    __syncthreads();
    if (threadIdx.x == 0) {
        int o = 0, to = 0;
        for (int e = 0; e < E; e++) {
            off[e] = o;
            toff[e] = to;
            o += cnt[e];
            to += (cnt[e] + tt - 1) / tt;
        }
        *n_tiles = to;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        counts[e] = 0;
        for (int m = 0; m * tt < cnt[e]; m++)
            tiles[toff[e] + m] = cu_tile{e, off[e] + m * tt, min(tt, cnt[e] - m * tt), 0};
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const int e = ids[i], p = off[e] + atomicAdd(&counts[e], 1);
        pair_in[p] = i / K;
        pair_out[p] = i;
    }
}

extern "C" int cu_moe_plan(const int32_t *ids, int T, int K, int E, int tt, cu_tile *tiles, int *n_tiles,
                           int32_t *pair_in, int32_t *pair_out, int *counts, cu_stream s) {
    cu_go(k_moe_plan, 1, 1024, 3 * E * sizeof(int), s, ids, T * K, K, E, tt, tiles, n_tiles, pair_in,
          pair_out, counts);
    CU_LAUNCHED("k_moe_plan");
    return 0;
}

#define COMB_THREADS 256

// The row's shared-expert gate sigmoid(sh_gate . xn[t]): a fixed-order double sum (each thread its
// strided part, then block_sumd over COMB_THREADS threads), the same in k_moe_sh_gate and in the
// combine that computes it itself: the same bits.
__device__ __forceinline__ float sh_gate_row(const float *__restrict__ sh_gate, const float *__restrict__ xn,
                                             int D, int t, double *red) {
    double d = 0;
#pragma unroll 8
    for (int j = threadIdx.x; j < D; j += COMB_THREADS)
        d += (double)sh_gate[j] * (double)xn[(size_t)t * D + j];
    d = block_sumd(d, red);
    return sigmoid_f((float)d);
}

// y = sum_k w_k eo_k + gate * sh, x += y for element i of row t (none if i >= D). The gate: g[t] when
// the shared-expert branch made it (k_moe_sh_gate on the side stream, off the critical path), else
// sh_gate_row here. The experts' sum (and the loads of sh and x) come before the gate's block
// reduction, so they are in flight during it; the sum is the same (in k order, then + gate * sh):
// the same bits either way.
__device__ __forceinline__ void combine_row(const float *__restrict__ eo, const float *__restrict__ w, int K,
                                            const float *__restrict__ sh, const float *__restrict__ sh_gate,
                                            const float *__restrict__ g, const float *__restrict__ xn,
                                            float *y, float *x, int D, int t, int i, double *red) {
    const bool on = i < D;
    double acc = 0;
    float shv = 0.0f, xv = 0.0f;
    if (on) {
#pragma unroll 8 // the loads ahead of the (ordered) sum
        for (int k = 0; k < K; k++)
            acc += (double)w[(size_t)t * K + k] * (double)eo[((size_t)t * K + k) * D + i];
        if (sh) shv = sh[(size_t)t * D + i];
        xv = x[(size_t)t * D + i];
    }
    float gate = 1.0f;
    if (sh && g) gate = g[t];
    else if (sh && sh_gate) gate = sh_gate_row(sh_gate, xn, D, t, red);
    if (!on) return;
    if (sh) acc += (double)gate * (double)shv;
    const float yv = (float)acc;
    y[(size_t)t * D + i] = yv;
    x[(size_t)t * D + i] = xv + yv;
}

// grid (D / COMB_THREADS, T): every block takes the row's shared-expert gate (g, or the same
// fixed-order sum recomputed), then its slice of y and x += y (no norm after it).
__global__ void __launch_bounds__(COMB_THREADS)
    k_moe_combine(const float *__restrict__ eo, const float *__restrict__ w, int K,
                  const float *__restrict__ sh, const float *__restrict__ sh_gate,
                  const float *__restrict__ g, const float *__restrict__ xn, float *y, float *x, int D) {
    pdl_enter();
    __shared__ double red[32];
    const int i = blockIdx.x * COMB_THREADS + threadIdx.x;
    combine_row(eo, w, K, sh, sh_gate, g, xn, y, x, D, blockIdx.y, i, red);
}

// Decode (T = 1): the same combine blocks, and the block that finishes last (counter) runs the
// next RMSNorm of the row (add_rmsnorm_row: the bits of k_add_rmsnorm), one launch instead of
// two. out may alias xn: a block that reduces the gate itself (g NULL) reads xn before it counts itself done.
__global__ void __launch_bounds__(COMB_THREADS)
    k_moe_combine_norm1(const float *__restrict__ eo, const float *__restrict__ w, int K,
                        const float *__restrict__ sh, const float *__restrict__ sh_gate,
                        const float *__restrict__ g, const float *xn, float *y, float *x, int D,
                        const float *__restrict__ w_next, float *out, float eps, unsigned *counter) {
    pdl_enter();
    __shared__ double red[32];
    const int i = blockIdx.x * COMB_THREADS + threadIdx.x;
    combine_row(eo, w, K, sh, sh_gate, g, xn, y, x, D, 0, i, red);
    if (!block_last(counter, gridDim.x)) return;
    add_rmsnorm_row(x, NULL, w_next, out, D, eps, red);
    if (threadIdx.x == 0) *counter = 0; // ready for the next launch (graph replays)
}

// grid T: g[t] = the shared-expert gate of row t (sh_gate_row), for the combine to take instead of
// reducing it on the critical path.
__global__ void __launch_bounds__(COMB_THREADS)
    k_moe_sh_gate(const float *__restrict__ sh_gate, const float *__restrict__ xn, float *g, int D) {
    pdl_enter();
    __shared__ double red[32];
    const float v = sh_gate_row(sh_gate, xn, D, blockIdx.x, red);
    if (threadIdx.x == 0) g[blockIdx.x] = v;
}

extern "C" int cu_moe_sh_gate(const float *sh_gate, const float *xn, float *g, int D, int T, cu_stream s) {
    cu_go(k_moe_sh_gate, T, COMB_THREADS, 0, s, sh_gate, xn, g, D);
    CU_LAUNCHED("k_moe_sh_gate");
    return 0;
}

extern "C" int cu_moe_combine_norm1(const float *eo, const float *w, int K, const float *sh,
                                    const float *sh_gate, const float *g, const float *xn, float *y, float *x,
                                    const float *w_next, float *out, int D, float eps, unsigned *counter,
                                    cu_stream s) {
    cu_go(k_moe_combine_norm1, (D + COMB_THREADS - 1) / COMB_THREADS, COMB_THREADS, 0, s, eo, w, K, sh,
          sh_gate, g, xn, y, x, D, w_next, out, eps, counter);
    CU_LAUNCHED("k_moe_combine_norm1");
    return 0;
}

extern "C" int cu_moe_combine(const float *eo, const float *w, int K, const float *sh, const float *sh_gate,
                              const float *g, const float *xn, float *y, float *x, const float *w_next,
                              float *out, int D, int T, float eps, cu_stream s) {
    cu_go(k_moe_combine, dim3((D + COMB_THREADS - 1) / COMB_THREADS, T), COMB_THREADS, 0, s, eo, w, K, sh,
          sh_gate, g, xn, y, x, D);
    CU_LAUNCHED("k_moe_combine");
    return out ? cu_add_rmsnorm(x, NULL, w_next, out, D, T, eps, s) : 0;
}

// The emulated link's hold (cuda_ops.h): the device's global nanosecond timer, from this kernel's start
// (the expert launches before it are complete: pdl_enter) to the held time.
__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void k_link_hold(const int32_t *__restrict__ ids, int K, const uint8_t *const *__restrict__ tab,
                            const uint8_t *lo, size_t span, double ns_per_expert, unsigned long long *acc) {
    pdl_enter();
    const unsigned long long t0 = global_ns();
    int n = 0;
    for (int k = 0; k < K; k++) n += (size_t)((uintptr_t)tab[ids[k]] - (uintptr_t)lo) < span;
    const unsigned long long until = t0 + (unsigned long long)(n * ns_per_expert);
    unsigned long long t = t0;
    while (t < until) {
        __nanosleep(256);
        t = global_ns();
    }
    atomicAdd(&acc[0], (unsigned long long)n);
    atomicAdd(&acc[1], until - t0);
    atomicAdd(&acc[2], t - t0);
}

extern "C" int cu_link_hold(const int32_t *ids, int K, const uint8_t *const *tab, const uint8_t *lo,
                            size_t span, double ns_per_expert, unsigned long long *acc, cu_stream s) {
    cu_go(k_link_hold, 1, 1, 0, s, ids, K, tab, lo, span, ns_per_expert, acc);
    CU_LAUNCHED("k_link_hold");
    return 0;
}
