// deltanet.cuh — the Gated DeltaNet device functions shared by deltanet.cu (prefill and the decode step)
// and rows.cu (the decode step of several sequences' rows in one launch): the head-vector l2norm, the
// gates, one token of the delta rule, the gated RMSNorm, and the whole decode step of one value head
// (dn_step_body: the kernel k_dn_step's body; its comment in deltanet.cu). Included by .cu files only.
#pragma once

#include "cuda/common.cuh"

#define STEP_WARPS 32 // warps of the one-block decode step of a value head

// Run F<KPL>() for KPL = n/32 in {1, 2, 4}.
#define BY_PL(n, CALL1, CALL2, CALL4)                                                                        \
    do {                                                                                                     \
        if ((n) == 32) {                                                                                     \
            CALL1;                                                                                           \
        } else if ((n) == 64) {                                                                              \
            CALL2;                                                                                           \
        } else {                                                                                             \
            CALL4;                                                                                           \
        }                                                                                                    \
    } while (0)

// l2norm of a head vector held DPL per lane (CPU ops_l2norm: double ss, scale in float).
template <int DPL> __device__ __forceinline__ void l2norm_lanes(float *v, float eps) {
    double ss = 0;
#pragma unroll
    for (int d = 0; d < DPL; d++) ss += (double)v[d] * (double)v[d];
    ss = warp_sumd(ss);
    const float scale = (float)(1.0 / sqrt(ss + (double)eps));
#pragma unroll
    for (int d = 0; d < DPL; d++) v[d] *= scale;
}

// The two head layouts of the family, a template parameter Q35 of every kernel that reads them (so the
// qwen3next kernels compile to the code they had before the Qwen3.5 layouts existed: the run-time
// switches cost CF2 prompts 4.6 %, issue 44). Q35 false: value head h reads key head h / (hv / hk)
// (grouped) and a row of ba is per key head [b x r | a x r] (the fused ssm_ba), qwen3next; true: h % hk
// (tiled, cu_dn_dims.v_tiled) and [b x hv | a x hv] (ssm_beta, ssm_alpha: ba_split), qwen35moe and qwen35.
// dn_dims_check: 0 when the head dimensions are ones every DeltaNet kernel has instances for, else -1
// (rl_seterr). dn_layout: that check, then the layout instance for d (0 or 1), or -1 (rl_seterr) for a
// mix no architecture has.
static inline int dn_dims_check(const cu_dn_dims *d) {
    const bool ok =
        (d->dk == 32 || d->dk == 64 || d->dk == 128) && (d->dv == 32 || d->dv == 64 || d->dv == 128);
    if (!ok || d->hv % d->hk || d->C != 2 * d->hk * d->dk + d->hv * d->dv)
        return rl_seterr("CUDA DeltaNet: head dims %d/%d with %d/%d heads are not supported (32, 64 or 128)",
                         d->dk, d->dv, d->hk, d->hv);
    return 0;
}
static inline int dn_layout(const cu_dn_dims *d) {
    if (dn_dims_check(d)) return -1;
    if (!d->v_tiled != !d->ba_split)
        return rl_seterr(
            "CUDA DeltaNet: v_tiled %d with ba_split %d is no layout of the family (both 1: Qwen3.5, "
            "both 0: Qwen3-Next)",
            d->v_tiled, d->ba_split);
    return d->v_tiled ? 1 : 0;
}

// The key head value head h reads: tiled (h % hk) or grouped (h / (hv / hk)) order (q3n_key_head).
template <bool Q35> __device__ __forceinline__ int dn_key_head(const cu_dn_dims &d, int h) {
    if constexpr (Q35) return h % d.hk;
    else return h / (d.hv / d.hk);
}

// beta = sigmoid(b), alpha = exp(ssm_a * softplus(a + dt_bias)) for value head h of a row: b and a
// from the split layout [b x hv | a x hv] (Q35) or the fused one, per key head [b x r | a x r].
template <bool Q35>
__device__ __forceinline__ void dn_gates(const cu_dn_dims &d, const float *ba, int h, float &alpha,
                                         float &beta) {
    float b, a;
    if constexpr (Q35) {
        b = ba[h], a = ba[d.hv + h];
    } else {
        const int r = d.hv / d.hk, g = h / r, e = h % r;
        b = ba[g * 2 * r + e], a = ba[g * 2 * r + r + e];
    }
    beta = sigmoid_f(b);
    alpha = expf(d.ssm_a[h] * softplus_f(a + d.dt_bias[h]));
}

// One token of the delta rule for state column s (DK = 32*KPL keys, KPL per lane):
// S *= alpha; m = S.k; delta = beta (v - m); S += k delta; returns this lane's part of S.q (its KPL
// keys, in double); delta_col below sums the lanes   (CPU ops_delta_step)
template <int KPL>
__device__ __forceinline__ double delta_col_o(float *s, const float *q, const float *k, float v, float alpha,
                                              float beta) {
    double m = 0;
#pragma unroll
    for (int i = 0; i < KPL; i++) {
        s[i] = s[i] * alpha;
        m += (double)s[i] * (double)k[i];
    }
    m = warp_sumd(m);
    const float delta = beta * (v - (float)m);
    double o = 0;
#pragma unroll
    for (int i = 0; i < KPL; i++) {
        s[i] = s[i] + k[i] * delta;
        o += (double)s[i] * (double)q[i];
    }
    return o;
}
template <int KPL>
__device__ __forceinline__ float delta_col(float *s, const float *q, const float *k, float v, float alpha,
                                           float beta) {
    return (float)warp_sumd(delta_col_o<KPL>(s, q, k, v, alpha, beta));
}

// Gated RMSNorm of one value head (DPL per lane): o = (o * scale) * w, then * silu(z).
template <int DPL>
__device__ __forceinline__ void gnorm_lanes(float *o, const float *w, const float *z, float eps) {
    const int lane = threadIdx.x & 31;
    double ss = 0;
#pragma unroll
    for (int d = 0; d < DPL; d++) ss += (double)o[d] * (double)o[d];
    ss = warp_sumd(ss);
    const float scale = (float)(1.0 / sqrt(ss / (DPL * 32) + (double)eps));
#pragma unroll
    for (int d = 0; d < DPL; d++) {
        const int j = lane * DPL + d;
        o[d] = (o[d] * scale) * w[j];
        o[d] *= silu_f(z[j]);
    }
}

// ---- the decode step of value head h (part `by` of SPLIT, layout Q35; deltanet.cu's k_dn_step) ----

template <int KPL, int DPL, int SPLIT, bool Q35>
__device__ __forceinline__ void dn_step_body(const cu_dn_dims &d, const float *__restrict__ u,
                                             const float *__restrict__ ba, const float *__restrict__ z,
                                             float *ssm, float *o, unsigned *ctr, int h, int by) {
    __shared__ float qk[2][KPL * 32];
    __shared__ float ov[SPLIT == 1 ? DPL * 32 : 1];
    __shared__ float gates[2];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int cw = SPLIT == 1 ? w : by * (STEP_WARPS / SPLIT) + w; // the warp of the one-block kernel
    const int g = dn_key_head<Q35>(d, h);
    // this warp's state columns cw, cw+32, ... (DPL of them when dv = 32*DPL): loaded first, so they
    // are in flight while q, k and the gates are computed (the same values: the same bits)
    float s[DPL][KPL];
#pragma unroll
    for (int j = 0; j < DPL; j++) {
        const float *S = ssm + ((size_t)h * d.dv + cw + STEP_WARPS * j) * d.dk + lane * KPL;
#pragma unroll
        for (int i = 0; i < KPL; i++) s[j][i] = S[i];
    }
    if (w < 2) { // q (w = 0) or k (w = 1) of key head g, as k_dn_prep
        float v[KPL];
        const float *x = u + (size_t)(w == 0 ? g : d.hk + g) * d.dk + lane * KPL;
#pragma unroll
        for (int i = 0; i < KPL; i++) v[i] = x[i];
        l2norm_lanes<KPL>(v, d.eps);
        if (w == 0) {
            const float qscale = 1.0f / sqrtf((float)d.dk);
#pragma unroll
            for (int i = 0; i < KPL; i++) v[i] *= qscale;
        }
#pragma unroll
        for (int i = 0; i < KPL; i++) qk[w][lane * KPL + i] = v[i];
    } else if (w == 2 && lane == 0) {
        dn_gates<Q35>(d, ba, h, gates[0], gates[1]);
    }
    __syncthreads();
    float q[KPL], k[KPL];
#pragma unroll
    for (int i = 0; i < KPL; i++) {
        q[i] = qk[0][lane * KPL + i];
        k[i] = qk[1][lane * KPL + i];
    }
    const float alpha = gates[0], beta = gates[1];
#pragma unroll
    for (int j = 0; j < DPL; j++) {
        const int c = cw + STEP_WARPS * j;
        const float out =
            delta_col<KPL>(s[j], q, k, u[(size_t)2 * d.hk * d.dk + (size_t)h * d.dv + c], alpha, beta);
        float *S = ssm + ((size_t)h * d.dv + c) * d.dk + lane * KPL;
#pragma unroll
        for (int i = 0; i < KPL; i++) S[i] = s[j][i];
        if (lane == 0) {
            if constexpr (SPLIT == 1) ov[c] = out;
            else o[(size_t)h * d.dv + c] = out;
        }
    }
    if constexpr (SPLIT > 1) { // the head's last block normalises its outputs
        if (!block_last(ctr + h, SPLIT)) return;
        if (w == 0) {
            float v[DPL];
#pragma unroll
            for (int i = 0; i < DPL; i++) v[i] = __ldcg(o + (size_t)h * d.dv + lane * DPL + i);
            gnorm_lanes<DPL>(v, d.ssm_norm, z + (size_t)h * d.dv, d.eps);
#pragma unroll
            for (int i = 0; i < DPL; i++) o[(size_t)h * d.dv + lane * DPL + i] = v[i];
            if (lane == 0) ctr[h] = 0; // ready for the next launch (graph replays)
        }
        return;
    }
    __syncthreads();
    if (w == 0) {
        float v[DPL];
#pragma unroll
        for (int i = 0; i < DPL; i++) v[i] = ov[lane * DPL + i];
        gnorm_lanes<DPL>(v, d.ssm_norm, z + (size_t)h * d.dv, d.eps);
#pragma unroll
        for (int i = 0; i < DPL; i++) o[(size_t)h * d.dv + lane * DPL + i] = v[i];
    }
}
