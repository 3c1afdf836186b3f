// deltanet.cu — Gated DeltaNet: causal conv (prefill; decode does it in the qkv matmul's
// epilogue), q/k l2norm + gates, the delta rule, the gated RMSNorm.
//
// Prefill runs three kernels over the T rows (prep, scan, gnorm); decode one fused kernel.
// Both call the same device functions with the same lane mapping (lane owns dims
// lane*DPL.. of a head; the recurrent state column c of value head h is held by one warp,
// 4 keys per lane), so a row's result does not depend on T.
#include "cuda/deltanet.cuh"
#include "cuda/matmul.cuh" // conv_channel

// ---- conv (prefill) -----------------------------------------------------------------------

// Thread per channel and chunk of DN_CONV_ROWS rows (the chunks run in parallel: the window at a
// chunk's start is the input rows before it, or the state before row 0); the arithmetic is
// conv_channel's (the decode epilogue), so every row gives the same bits whatever the chunking.
// snap (optional): row t's window after its shift also goes to snap + row_slot[t] * stride (a
// verify row's snapshot slot; row_slot[t] < 0: none). The new state (the last kw - 1 inputs) is
// written by chunk 0's thread, the only reader of the old one.
#define DN_CONV_ROWS 64
template <int KW>
__global__ void k_dn_conv(cu_dn_dims d, const float *__restrict__ in, int ldi, float *u, float *state, int T,
                          float *snap, size_t stride, const int *row_slot) {
    pdl_enter();
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= d.C) return;
    const int t0 = blockIdx.y * DN_CONV_ROWS, t1 = min(T, t0 + DN_CONV_ROWS);
    const float *w = d.conv_w + (size_t)c * KW;
    float win[KW > 1 ? KW - 1 : 1], wk[KW];
#pragma unroll
    for (int j = 0; j < KW; j++) wk[j] = w[j];
#pragma unroll
    for (int j = 0; j < KW - 1; j++) { // input row t0 - (KW - 1) + j; before row 0: state slot t0 + j
        const int r = t0 - (KW - 1) + j;
        win[j] = r >= 0 ? in[(size_t)r * ldi + c] : state[(size_t)(t0 + j) * d.C + c];
    }
    float x = t0 < t1 ? in[(size_t)t0 * ldi + c] : 0.0f;
    for (int t = t0; t < t1; t++) {
        const float xn = t + 1 < t1 ? in[(size_t)(t + 1) * ldi + c] : 0.0f;
        double s = 0;
#pragma unroll
        for (int j = 0; j < KW - 1; j++) s += (double)wk[j] * (double)win[j];
        s += (double)wk[KW - 1] * (double)x;
#pragma unroll
        for (int j = 0; j + 1 < KW - 1; j++) win[j] = win[j + 1];
        if (KW > 1) win[KW - 2] = x;
        u[(size_t)t * d.C + c] = silu_f((float)s);
        x = xn;
        if (row_slot && row_slot[t] >= 0) {
            float *sn = snap + (size_t)row_slot[t] * stride;
#pragma unroll
            for (int j = 0; j < KW - 1; j++) sn[(size_t)j * d.C + c] = win[j];
        }
    }
    if (blockIdx.y) return;
    if (t1 < T) { // several chunks (T > DN_CONV_ROWS >= KW - 1): the last KW - 1 input rows
#pragma unroll
        for (int j = 0; j < KW - 1; j++) win[j] = in[(size_t)(T - (KW - 1) + j) * ldi + c];
    }
#pragma unroll
    for (int j = 0; j < KW - 1; j++) state[(size_t)j * d.C + c] = win[j];
}

extern "C" int cu_dn_conv_snap(const cu_dn_dims *d, const float *in, int ldi, float *u, float *state, int T,
                               float *snap, size_t stride, const int *row_slot, cu_stream s) {
    const dim3 blocks((d->C + 127) / 128, T > 0 ? (T + DN_CONV_ROWS - 1) / DN_CONV_ROWS : 1);
    switch (d->kw) {
    case 2: cu_go(k_dn_conv<2>, blocks, 128, 0, s, *d, in, ldi, u, state, T, snap, stride, row_slot); break;
    case 3: cu_go(k_dn_conv<3>, blocks, 128, 0, s, *d, in, ldi, u, state, T, snap, stride, row_slot); break;
    case 4: cu_go(k_dn_conv<4>, blocks, 128, 0, s, *d, in, ldi, u, state, T, snap, stride, row_slot); break;
    case 5: cu_go(k_dn_conv<5>, blocks, 128, 0, s, *d, in, ldi, u, state, T, snap, stride, row_slot); break;
    default: return rl_seterr("CUDA DeltaNet: conv kernel width %d is not supported (2..5)", d->kw);
    }
    CU_LAUNCHED("k_dn_conv");
    return 0;
}

extern "C" int cu_dn_conv(const cu_dn_dims *d, const float *in, int ldi, float *u, float *state, int T,
                          cu_stream s) {
    return cu_dn_conv_snap(d, in, ldi, u, state, T, NULL, 0, NULL, s);
}

// ---- prep: one block per row; warps over the 2*hk q/k head vectors, then the gates -------

template <int KPL, bool Q35>
__global__ void k_dn_prep(cu_dn_dims d, float *u, const float *__restrict__ ba, float *ab) {
    pdl_enter();
    const int t = blockIdx.x, lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    float *ut = u + (size_t)t * d.C;
    for (int vi = w; vi < 2 * d.hk; vi += nw) {
        float *x = ut + (size_t)vi * d.dk + lane * KPL; // q heads then k heads
        float v[KPL];
#pragma unroll
        for (int i = 0; i < KPL; i++) v[i] = x[i];
        l2norm_lanes<KPL>(v, d.eps);
        if (vi < d.hk) {
            const float qscale = 1.0f / sqrtf((float)d.dk);
#pragma unroll
            for (int i = 0; i < KPL; i++) v[i] *= qscale;
        }
#pragma unroll
        for (int i = 0; i < KPL; i++) x[i] = v[i];
    }
    for (int h = threadIdx.x; h < d.hv; h += blockDim.x) {
        float alpha, beta;
        dn_gates<Q35>(d, ba + (size_t)t * 2 * d.hv, h, alpha, beta);
        ab[(size_t)t * 2 * d.hv + h] = alpha;
        ab[(size_t)t * 2 * d.hv + d.hv + h] = beta;
    }
}

// ---- scan: warp per state column, the T rows in order, state in registers ------------------
//
// A block's SCAN_NC warps hold SCAN_NC columns of one value head, so they read the same q, k and
// gates: the block copies chunks of SCAN_ROWS rows of them (and its columns' v) into shared memory
// with cp.async, the next chunk in flight while the warps step through the current one (the scan is
// a chain of dependent steps: loads from global memory in that chain cost more than the math). The
// per-column arithmetic is delta_col's, as in the fused decode step. dn_dims_check() holds dv to 32, 64 or
// 128 and C to a multiple of 32, so every block's SCAN_NC columns lie in one head and every copied
// piece is 16-byte aligned.
//
// A step is bound by its dependent chain (2 or 4 columns per warp, whatever the block
// shape, ran 1-17 % slower prompts, bench/results/2026-12-03-cuda-session18-h200.md; that variant is
// gone): two double butterflies of 5 levels per step. The output's butterfly is mostly taken off the
// chain (the reduction on the chain ran prompts 2-3 % slower and is gone: bench/results/
// 2026-12-06-cuda-variants-removed.md), since the next step does not need o: after its levels 16 and 8 the
// warp's lanes 0..7 hold the 8 distinct partial sums b_0..b_7, which go to shared memory; after each staged
// chunk lane r finishes row r's levels 4, 2, 1 as ((b0 + b4) + (b2 + b6)) + ((b1 + b5) + (b3 + b7)) — the
// tree the butterfly forms at lane 0 (IEEE addition is commutative, so every lane's butterfly is that tree):
// the same bits as delta_col (every CUDA test passed under both; prompt +2-3 %,
// bench/results/2026-12-03-cuda-session19-h200.md).
#define SCAN_NC 8 // state columns (warps) per block
#define SCAN_ROWS 16
template <int KPL>
struct scan_row { // one staged row: q, k of the head group, v of the block's columns, gates
    float q[32 * KPL], k[32 * KPL], v[SCAN_NC], alpha, beta, pad[2];
};
template <int KPL, bool Q35>
__global__ void __launch_bounds__(SCAN_NC * 32)
    k_dn_scan(cu_dn_dims d, const float *__restrict__ u, const float *__restrict__ ab, float *ssm, float *o,
              int T, float *snap, size_t stride, const int *row_slot) {
    pdl_enter();
    __shared__ __align__(16) scan_row<KPL> rows[2][SCAN_ROWS];
    __shared__ double part[SCAN_NC][SCAN_ROWS][8]; // b_0..b_7 per warp and row
    const int lane = threadIdx.x & 31, h = blockIdx.x, c0 = blockIdx.y * SCAN_NC, w = threadIdx.x >> 5,
              c = c0 + w;
    const int g = dn_key_head<Q35>(d, h), dk = 32 * KPL;
    float s[KPL];
    {
        const float *S = ssm + ((size_t)h * d.dv + c) * d.dk + lane * KPL;
#pragma unroll
        for (int i = 0; i < KPL; i++) s[i] = S[i];
    }
    // copy rows t0 .. t0 + n - 1 into buffer b: q, k as 16-byte chunks (dk / 4 each), v, gates
    auto load = [&](int t0, int b) {
        const int n = min(SCAN_ROWS, T - t0), per = dk / 4; // chunks of q (and of k) per row
        for (int e = threadIdx.x; e < n * 2 * per; e += SCAN_NC * 32) {
            const int r = e / (2 * per), k2 = e % (2 * per), which = k2 / per, i = k2 % per;
            const float *src = u + (size_t)(t0 + r) * d.C + (size_t)(which ? d.hk + g : g) * dk + 4 * i;
            __pipeline_memcpy_async((which ? rows[b][r].k : rows[b][r].q) + 4 * i, src, 16);
        }
        if (threadIdx.x < n) {
            const int r = threadIdx.x;
            const float *ut = u + (size_t)(t0 + r) * d.C + (size_t)2 * d.hk * dk + (size_t)h * d.dv + c0;
            for (int j = 0; j < SCAN_NC; j += 4) __pipeline_memcpy_async(rows[b][r].v + j, ut + j, 16);
            rows[b][r].alpha = ab[(size_t)(t0 + r) * 2 * d.hv + h];
            rows[b][r].beta = ab[(size_t)(t0 + r) * 2 * d.hv + d.hv + h];
        }
        __pipeline_commit();
    };
    if (T > 0) load(0, 0);
    for (int t0 = 0, b = 0; t0 < T; t0 += SCAN_ROWS, b ^= 1) {
        __pipeline_wait_prior(0);
        __syncthreads(); // chunk t0 is in; every warp is done with the previous chunk's buffer
        if (t0 + SCAN_ROWS < T) load(t0 + SCAN_ROWS, b ^ 1);
        const int n = min(SCAN_ROWS, T - t0);
        for (int r = 0; r < n; r++) {
            const scan_row<KPL> &R = rows[b][r];
            float q[KPL], k[KPL];
#pragma unroll
            for (int i = 0; i < KPL; i++) {
                q[i] = R.q[lane * KPL + i];
                k[i] = R.k[lane * KPL + i];
            }
            const int t = t0 + r;
            double p = delta_col_o<KPL>(s, q, k, R.v[w], R.alpha, R.beta);
            p += __shfl_xor_sync(FULL_MASK, p, 16); // warp_sumd's first two levels
            p += __shfl_xor_sync(FULL_MASK, p, 8);
            if (lane < 8) part[w][r][lane] = p;
            if (row_slot && row_slot[t] >= 0) { // this row's state into its snapshot slot
                float *sn = snap + (size_t)row_slot[t] * stride + ((size_t)h * d.dv + c) * d.dk + lane * KPL;
#pragma unroll
                for (int i = 0; i < KPL; i++) sn[i] = s[i];
            }
        }
        // the chunk's outputs: warp_sumd's levels 4, 2, 1 of each row
        __syncwarp();
        if (lane < n) {
            const double *pb = part[w][lane];
            const double e = ((pb[0] + pb[4]) + (pb[2] + pb[6])) + ((pb[1] + pb[5]) + (pb[3] + pb[7]));
            o[(size_t)(t0 + lane) * d.hv * d.dv + (size_t)h * d.dv + c] = (float)e;
        }
        __syncwarp(); // part is rewritten by the next chunk
    }
    float *S = ssm + ((size_t)h * d.dv + c) * d.dk + lane * KPL;
#pragma unroll
    for (int i = 0; i < KPL; i++) S[i] = s[i];
}

// ---- gated norm: warp per (row, value head) ------------------------------------------------

template <int DPL>
__global__ void k_dn_gnorm(cu_dn_dims d, float *o, const float *__restrict__ z, int ldz, int T) {
    pdl_enter();
    const int lane = threadIdx.x & 31, wi = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (wi >= T * d.hv) return;
    const int t = wi / d.hv, h = wi % d.hv;
    float *x = o + (size_t)t * d.hv * d.dv + (size_t)h * d.dv;
    float v[DPL];
#pragma unroll
    for (int i = 0; i < DPL; i++) v[i] = x[lane * DPL + i];
    gnorm_lanes<DPL>(v, d.ssm_norm, z + (size_t)t * ldz + (size_t)h * d.dv, d.eps);
#pragma unroll
    for (int i = 0; i < DPL; i++) x[lane * DPL + i] = v[i];
}

// ---- decode: everything of one value head in one block -------------------------------------
//
// SPLIT 1: one block of STEP_WARPS warps per value head (hv blocks: 32 of the H200's 132 SMs for
// the 80B). SPLIT > 1 (cu_dn_step with counters, the default; RL_CUDA_DN_SPLIT=0 one block): the head's warps
// spread over SPLIT blocks, each block the warps blockIdx.y * STEP_WARPS / SPLIT .. of the one-block kernel
// with their columns (the same per-column arithmetic; q, k and the gates computed again in every block, the
// same operations); the columns' outputs go to o, and the head's last block (a counter per head, put back to
// 0 by it) runs the gated norm on them as the one-block kernel's warp 0 does. So both give the same bits
// (test_cuda_ops compares them).
// STEP_WARPS: deltanet.cuh. Value head blockIdx.x, its part blockIdx.y (deltanet.cuh: dn_step_body)
template <int KPL, int DPL, int SPLIT, bool Q35>
__global__ void __launch_bounds__(STEP_WARPS * 32 / SPLIT)
    k_dn_step(cu_dn_dims d, const float *__restrict__ u, const float *__restrict__ ba,
              const float *__restrict__ z, float *ssm, float *o, unsigned *ctr) {
    pdl_enter();
    dn_step_body<KPL, DPL, SPLIT, Q35>(d, u, ba, z, ssm, o, ctr, blockIdx.x, blockIdx.y);
}

// ---- launchers ---------------------------------------------------------------------------------

template <bool Q35>
static void prep_go(const cu_dn_dims *d, float *u, const float *ba, float *ab, int T, cu_stream s) {
    const int threads = 32 * min(32, 2 * d->hk);
    BY_PL(d->dk, (cu_go(k_dn_prep<1, Q35>, T, threads, 0, s, *d, u, ba, ab)),
          (cu_go(k_dn_prep<2, Q35>, T, threads, 0, s, *d, u, ba, ab)),
          (cu_go(k_dn_prep<4, Q35>, T, threads, 0, s, *d, u, ba, ab)));
}

extern "C" int cu_dn_prep(const cu_dn_dims *d, float *u, const float *ba, float *ab, int T, cu_stream s) {
    const int q35 = dn_layout(d);
    if (q35 < 0) return -1;
    if (q35) prep_go<true>(d, u, ba, ab, T, s);
    else prep_go<false>(d, u, ba, ab, T, s);
    CU_LAUNCHED("k_dn_prep");
    return 0;
}

template <bool Q35>
static void scan_go(const cu_dn_dims *d, const float *u, const float *ab, float *ssm, float *o, int T,
                    float *snap, size_t stride, const int *row_slot, cu_stream s) {
    const dim3 grid(d->hv, d->dv / SCAN_NC);
    BY_PL(d->dk,
          (cu_go(k_dn_scan<1, Q35>, grid, SCAN_NC * 32, 0, s, *d, u, ab, ssm, o, T, snap, stride, row_slot)),
          (cu_go(k_dn_scan<2, Q35>, grid, SCAN_NC * 32, 0, s, *d, u, ab, ssm, o, T, snap, stride, row_slot)),
          (cu_go(k_dn_scan<4, Q35>, grid, SCAN_NC * 32, 0, s, *d, u, ab, ssm, o, T, snap, stride, row_slot)));
}

extern "C" int cu_dn_scan_snap(const cu_dn_dims *d, const float *u, const float *ab, float *ssm, float *o,
                               int T, float *snap, size_t stride, const int *row_slot, cu_stream s) {
    const int q35 = dn_layout(d);
    if (q35 < 0) return -1;
    if (q35) scan_go<true>(d, u, ab, ssm, o, T, snap, stride, row_slot, s);
    else scan_go<false>(d, u, ab, ssm, o, T, snap, stride, row_slot, s);
    CU_LAUNCHED("k_dn_scan");
    return 0;
}

extern "C" int cu_dn_scan(const cu_dn_dims *d, const float *u, const float *ab, float *ssm, float *o, int T,
                          cu_stream s) {
    return cu_dn_scan_snap(d, u, ab, ssm, o, T, NULL, 0, NULL, s);
}

extern "C" int cu_dn_gnorm(const cu_dn_dims *d, float *o, const float *z, int ldz, int T, cu_stream s) {
    if (dn_dims_check(d)) return -1;
    const int blocks = (T * d->hv + 7) / 8;
    BY_PL(d->dv, (cu_go(k_dn_gnorm<1>, blocks, 256, 0, s, *d, o, z, ldz, T)),
          (cu_go(k_dn_gnorm<2>, blocks, 256, 0, s, *d, o, z, ldz, T)),
          (cu_go(k_dn_gnorm<4>, blocks, 256, 0, s, *d, o, z, ldz, T)));
    CU_LAUNCHED("k_dn_gnorm");
    return 0;
}

// The split step runs 4 blocks per value head (8 warps each); 8 blocks of 4 warps measured a wash and
// is gone (bench/results/2026-12-06-cuda-variants-removed.md).
template <int KPL, int DPL, bool Q35>
static void step_go(const cu_dn_dims *d, const float *u, const float *ba, const float *z, float *ssm,
                    float *o, unsigned *ctr, cu_stream s) {
    if (ctr)
        cu_go(k_dn_step<KPL, DPL, 4, Q35>, dim3(d->hv, 4), STEP_WARPS * 32 / 4, 0, s, *d, u, ba, z, ssm, o,
              ctr);
    else cu_go(k_dn_step<KPL, DPL, 1, Q35>, d->hv, STEP_WARPS * 32, 0, s, *d, u, ba, z, ssm, o, nullptr);
}
template <int KPL, bool Q35>
static void step_kpl(const cu_dn_dims *d, const float *u, const float *ba, const float *z, float *ssm,
                     float *o, unsigned *ctr, cu_stream s) {
    BY_PL(d->dv, (step_go<KPL, 1, Q35>(d, u, ba, z, ssm, o, ctr, s)),
          (step_go<KPL, 2, Q35>(d, u, ba, z, ssm, o, ctr, s)),
          (step_go<KPL, 4, Q35>(d, u, ba, z, ssm, o, ctr, s)));
}
template <bool Q35>
static void step_layout(const cu_dn_dims *d, const float *u, const float *ba, const float *z, float *ssm,
                        float *o, unsigned *ctr, cu_stream s) {
    BY_PL(d->dk, (step_kpl<1, Q35>(d, u, ba, z, ssm, o, ctr, s)),
          (step_kpl<2, Q35>(d, u, ba, z, ssm, o, ctr, s)), (step_kpl<4, Q35>(d, u, ba, z, ssm, o, ctr, s)));
}

extern "C" int cu_dn_step(const cu_dn_dims *d, const float *u, const float *ba, const float *z, float *ssm,
                          float *o, unsigned *ctr, cu_stream s) {
    const int q35 = dn_layout(d);
    if (q35 < 0) return -1;
    if (q35) step_layout<true>(d, u, ba, z, ssm, o, ctr, s);
    else step_layout<false>(d, u, ba, z, ssm, o, ctr, s);
    CU_LAUNCHED("k_dn_step");
    return 0;
}
