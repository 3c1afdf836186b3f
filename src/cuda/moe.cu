// moe.cu — the MoE pieces around the expert matmuls (matmul.cuh): router softmax / top-k /
// renormalise, the grouping plan of a chunk's (row, slot) pairs by expert, and the combine
// (weighted sum + gated shared expert + residual + the next RMSNorm).
#include "common.cuh"

#define ROUTER_MAXE 1024 // experts per lane-array: E <= 1024 (32 per lane)

// One warp per row. CPU: ops_softmax (max, expf, double sum, inv = (float)(1/s)), ops_topk
// (descending, ties -> lower id), weights p / sum (double, clamped at 6.1035e-5).
__global__ void k_router(const float *__restrict__ logits, int E, int K, int T, int32_t *ids, float *wout,
                         float *pout, cu_tile *tiles, int *n_tiles, int32_t *pair_in, int32_t *pair_out) {
    const int lane = threadIdx.x & 31, t = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (t >= T) return;
    const float *x = logits + (size_t)t * E;
    float v[ROUTER_MAXE / 32];
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < ROUTER_MAXE / 32; i++) {
        const int e = i * 32 + lane;
        v[i] = e < E ? x[e] : -INFINITY;
        mx = fmaxf(mx, v[i]);
    }
    mx = warp_max(mx);
    double s = 0;
#pragma unroll
    for (int i = 0; i < ROUTER_MAXE / 32; i++) {
        if (i * 32 + lane < E) {
            v[i] = expf(v[i] - mx);
            s += (double)v[i];
        }
    }
    s = warp_sumd(s);
    const float inv = (float)(1.0 / s);
#pragma unroll
    for (int i = 0; i < ROUTER_MAXE / 32; i++) v[i] = i * 32 + lane < E ? v[i] * inv : -1.0f; // p >= 0
    uint32_t taken = 0;
    double sum = 0;
    int my_id = -1;
    float my_p = 0;
    for (int k = 0; k < K; k++) {
        float bv = -2.0f;
        int bi = 0x7fffffff;
#pragma unroll
        for (int i = 0; i < ROUTER_MAXE / 32; i++)
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

extern "C" int cu_router(const float *logits, int E, int K, int T, int32_t *ids, float *w, float *p, cu_tile *tiles,
                         int *n_tiles, int32_t *pair_in, int32_t *pair_out, cudaStream_t s) {
    if (E > ROUTER_MAXE || K > 32 || K > E)
        return rl_seterr("cu_router: %d experts / top-%d not supported (at most %d / 32)", E, K, ROUTER_MAXE);
    k_router<<<(T + 3) / 4, 128, 0, s>>>(logits, E, K, T, ids, w, p, tiles, n_tiles, pair_in, pair_out);
    CU_LAUNCHED("k_router");
    return 0;
}

// One block: counts per expert, pair offsets, tiles of <= tt pairs. The order of pairs
// inside an expert is not fixed (atomics) and does not matter: each pair's arithmetic is
// independent of its tile neighbours.
__global__ void __launch_bounds__(1024) k_moe_plan(const int32_t *__restrict__ ids, int n, int K, int E, int tt,
                                                   cu_tile *tiles, int *n_tiles, int32_t *pair_in,
                                                   int32_t *pair_out, int *counts) {
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
                           int32_t *pair_in, int32_t *pair_out, int *counts, cudaStream_t s) {
    k_moe_plan<<<1, 1024, 3 * E * sizeof(int), s>>>(ids, T * K, K, E, tt, tiles, n_tiles, pair_in, pair_out, counts);
    CU_LAUNCHED("k_moe_plan");
    return 0;
}

#define COMB_THREADS 256

// grid (D / COMB_THREADS, T): every block recomputes the row's shared-expert gate (the same
// fixed-order sum), then its slice of y = sum_k w_k eo_k + gate * sh and x += y. The next
// RMSNorm needs the whole row: cu_add_rmsnorm afterwards.
__global__ void __launch_bounds__(COMB_THREADS)
    k_moe_combine(const float *__restrict__ eo, const float *__restrict__ w, int K, const float *__restrict__ sh,
                  const float *__restrict__ sh_gate, const float *__restrict__ xn, float *y, float *x, int D) {
    __shared__ double red[32];
    const int t = blockIdx.y, i = blockIdx.x * COMB_THREADS + threadIdx.x;
    float gate = 1.0f;
    if (sh && sh_gate) {
        double d = 0;
        for (int j = threadIdx.x; j < D; j += COMB_THREADS) d += (double)sh_gate[j] * (double)xn[(size_t)t * D + j];
        d = block_sumd(d, red);
        gate = sigmoid_f((float)d);
    }
    if (i >= D) return;
    double acc = 0;
    for (int k = 0; k < K; k++) acc += (double)w[(size_t)t * K + k] * (double)eo[((size_t)t * K + k) * D + i];
    if (sh) acc += (double)gate * (double)sh[(size_t)t * D + i];
    const float yv = (float)acc;
    y[(size_t)t * D + i] = yv;
    x[(size_t)t * D + i] = x[(size_t)t * D + i] + yv;
}

extern "C" int cu_moe_combine(const float *eo, const float *w, int K, const float *sh, const float *sh_gate,
                              const float *xn, float *y, float *x, const float *w_next, float *out, int D, int T,
                              float eps, cudaStream_t s) {
    k_moe_combine<<<dim3((D + COMB_THREADS - 1) / COMB_THREADS, T), COMB_THREADS, 0, s>>>(eo, w, K, sh, sh_gate, xn, y,
                                                                                          x, D);
    CU_LAUNCHED("k_moe_combine");
    return out ? cu_add_rmsnorm(x, NULL, w_next, out, D, T, eps, s) : 0;
}
