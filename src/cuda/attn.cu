// attn.cu — gated full attention: per-head q/k RMSNorm + partial NeoX RoPE + KV-cache store,
// and causal GQA attention with the sigmoid output gate.
//
// The positions 0..pos of a row are cut into chunks of CU_ATTN_CHUNK. A chunk partial
// (m = max score, l = sum of exp, acc = sum of exp * v) is computed by attn_chunk(), and the
// partials are merged in chunk order by merge_step(). Decode (few rows) computes all chunk
// partials in parallel blocks and merges them in a second kernel; prefill walks the chunks
// inside one block per (row tile, KV head) and merges as it goes: the same operations in the
// same order, so both paths give the same bits (the backend's batch-invariance contract).
//
// Decode has two split kernels with the same bits: the grouped one (default) stages each
// 32-position slice of K, then of V, in shared memory with coalesced 16-byte loads by the whole
// block, once for the G query heads of the KV group (attn_chunk_staged: attn_chunk's arithmetic,
// operation for operation, reading the rows from shared memory); the per-warp one (RL_CUDA_ATTN=
// per-warp, cu_attn_dims.split_per_warp) lets each head's warp read the rows itself, lane per row.
#include "cuda/attn.cuh"

#define NI (CH / 32)
#define PF_RT 4 // query rows per prefill block

__device__ __forceinline__ float ldkv(const float *p) { return *p; }
__device__ __forceinline__ float ldkv(const __half *p) { return __half2float(*p); }
__device__ __forceinline__ float4 ldkv4(const float *p) { return *(const float4 *)p; }
__device__ __forceinline__ float4 ldkv4(const __half *p) {
    const uint2 r = *(const uint2 *)p;
    const float2 a = __half22float2(*(const __half2 *)&r.x), b = __half22float2(*(const __half2 *)&r.y);
    return make_float4(a.x, a.y, b.x, b.y);
}

// A lane's DPL values of a K or V row as floats (16-byte loads where DPL allows).
template <int DPL, typename KV> __device__ __forceinline__ void load_row(const KV *vr, float (&vv)[DPL]) {
    if constexpr (DPL % 4 == 0) {
#pragma unroll
        for (int d = 0; d < DPL; d += 4) {
            const float4 v4 = ldkv4(vr + d);
            vv[d] = v4.x;
            vv[d + 1] = v4.y;
            vv[d + 2] = v4.z;
            vv[d + 3] = v4.w;
        }
    } else {
#pragma unroll
        for (int d = 0; d < DPL; d++) vv[d] = ldkv(vr + d);
    }
}

// ---- q/k norm + RoPE + store ------------------------------------------------------------------

// One warp per head vector: warps [0, H) query heads, [H, H+Hkv) key heads (which also copy v).
template <int DPL, typename KV>
__global__ void k_qk_norm_rope(cu_attn_dims a, float *qg, float *k, const float *__restrict__ v,
                               const float *__restrict__ qn, const float *__restrict__ kn, const int *pos0,
                               KV *kc, KV *vc) {
    pdl_enter();
    constexpr int HD = DPL * 32;
    __shared__ float buf[32][HD];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, t = blockIdx.x;
    if (wid >= a.H + a.Hkv) return;
    const bool isq = wid < a.H;
    const int h = isq ? wid : wid - a.H;
    const size_t kvw = (size_t)a.Hkv * HD;
    float *x =
        isq ? qg + (size_t)t * a.H * 2 * HD + (size_t)h * 2 * HD : k + (size_t)t * kvw + (size_t)h * HD;
    const float *nw = isq ? qn : kn;
    float r[DPL];
    double ss = 0;
#pragma unroll
    for (int d = 0; d < DPL; d++) {
        r[d] = x[lane * DPL + d];
        ss += (double)r[d] * (double)r[d];
    }
    ss = warp_sumd(ss);
    const float scale = (float)(1.0 / sqrt(ss / HD + (double)a.eps));
#pragma unroll
    for (int d = 0; d < DPL; d++) buf[wid][lane * DPL + d] = (r[d] * scale) * nw[lane * DPL + d];
    __syncwarp();
    const int pos = *pos0 + t, half = a.n_rot / 2;
    for (int i = lane; i < half; i += 32) {
        const float theta = (float)(pos + a.rope_delta) * a.inv_freq[i];
        const float c = (float)cos((double)theta), s = (float)sin((double)theta);
        const float p = buf[wid][i], q = buf[wid][i + half];
        buf[wid][i] = p * c - q * s;
        buf[wid][i + half] = q * c + p * s;
    }
    __syncwarp();
#pragma unroll
    for (int d = 0; d < DPL; d++) {
        const int j = lane * DPL + d;
        x[j] = buf[wid][j];
        if (!isq) {
            const size_t o = (size_t)pos * kvw + (size_t)h * HD + j;
            kc[o] = (KV)buf[wid][j];
            vc[o] = (KV)v[(size_t)t * kvw + (size_t)h * HD + j];
        }
    }
}

// ---- the chunk partial and the merge --------------------------------------------------------

// The scores of one key row kr against the RT query rows (sequential fmaf over the head dims).
template <int DPL, int RT, typename KV>
__device__ __forceinline__ void qk_dots(const float *qs, const KV *kr, float (&dot)[RT]) {
    constexpr int HD = DPL * 32;
    for (int j = 0; j < HD; j += 4) {
        const float4 k4 = ldkv4(kr + j);
#pragma unroll
        for (int r = 0; r < RT; r++) {
            const float4 q4 = *(const float4 *)(qs + r * HD + j);
            dot[r] = fmaf(q4.x, k4.x, dot[r]);
            dot[r] = fmaf(q4.y, k4.y, dot[r]);
            dot[r] = fmaf(q4.z, k4.z, dot[r]);
            dot[r] = fmaf(q4.w, k4.w, dot[r]);
        }
    }
}

// This lane's position p of slice i (key row kr, read only if p < nmax) against the RT rows:
// s[r][i] = its scaled score, or -inf where row r does not see p.
template <int DPL, int RT, typename KV>
__device__ __forceinline__ void slice_scores(const float *qs, const KV *kr, int p, int nmax, const int *nkv,
                                             float scale, float (&s)[RT][NI], int i) {
    float dot[RT];
#pragma unroll
    for (int r = 0; r < RT; r++) dot[r] = 0.0f;
    if (p < nmax) qk_dots<DPL, RT>(qs, kr, dot);
#pragma unroll
    for (int r = 0; r < RT; r++) s[r][i] = p < nkv[r] ? dot[r] * scale : -INFINITY;
}

// One row's chunk scores (lane L holds positions 32 i + L) -> the max m, exp(s - m) in place (masked:
// 0) and their sum l, reduced over the warp.
__device__ __forceinline__ void row_exp(float (&s)[NI], float &m, float &l) {
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < NI; i++) mx = fmaxf(mx, s[i]);
    m = warp_max(mx);
    float ls = 0.0f;
#pragma unroll
    for (int i = 0; i < NI; i++) {
        s[i] = s[i] == -INFINITY ? 0.0f : expf(s[i] - m);
        ls += s[i];
    }
    l = warp_sum(ls);
}

// row_exp for the RT rows of a chunk; the value sums acc zeroed.
template <int DPL, int RT>
__device__ __forceinline__ void chunk_exp(float (&s)[RT][NI], float *m, float *l, float (*acc)[DPL]) {
#pragma unroll
    for (int r = 0; r < RT; r++) {
        row_exp(s[r], m[r], l[r]);
#pragma unroll
        for (int d = 0; d < DPL; d++) acc[r][d] = 0.0f;
    }
}

// The positions row r < RT of a tile sees at most: max nkv[r].
template <int RT> __device__ __forceinline__ int rows_nmax(const int *nkv) {
    int nmax = 0;
#pragma unroll
    for (int r = 0; r < RT; r++) nmax = max(nmax, nkv[r]);
    return nmax;
}

// One value row vv (this lane's DPL dims of position 32 i + src) into the RT rows' sums, each weighted
// by that position's exp, which lane src holds in s[r][i].
template <int DPL, int RT>
__device__ __forceinline__ void value_step(const float (&s)[RT][NI], int i, int src, const float (&vv)[DPL],
                                           float (*acc)[DPL]) {
#pragma unroll
    for (int r = 0; r < RT; r++) {
        const float e = __shfl_sync(FULL_MASK, s[r][i], src);
#pragma unroll
        for (int d = 0; d < DPL; d++) acc[r][d] = fmaf(e, vv[d], acc[r][d]);
    }
}

// Rows r < RT (query vectors qs[r][HD] in shared memory) against positions p0.. of this chunk;
// row r sees positions < nkv[r]. Lane-per-position scores (sequential fmaf over the head dims),
// then lane-per-dims values. Masked positions contribute exact zeros.
template <int DPL, int RT, typename KV>
__device__ __forceinline__ void attn_chunk(const float *qs, const KV *K, const KV *V, size_t kvw, int p0,
                                           const int *nkv, float scale, float *m, float *l,
                                           float (*acc)[DPL]) {
    const int lane = threadIdx.x & 31, nmax = rows_nmax<RT>(nkv);
    float s[RT][NI];
#pragma unroll
    for (int i = 0; i < NI; i++) {
        const int p = p0 + 32 * i + lane;
        slice_scores<DPL, RT>(qs, K + (size_t)p * kvw, p, nmax, nkv, scale, s, i);
    }
    chunk_exp<DPL, RT>(s, m, l, acc);
#pragma unroll
    for (int i = 0; i < NI; i++) {
        if (p0 + 32 * i >= nmax) break;
        for (int src = 0; src < 32; src++) {
            const int p = p0 + 32 * i + src;
            if (p >= nmax) break;
            float vv[DPL];
            load_row<DPL>(V + (size_t)p * kvw + lane * DPL, vv);
            value_step<DPL, RT>(s, i, src, vv, acc);
        }
    }
}

// ---- the grouped decode chunk: staged K/V slices ----------------------------------------------

// A staged row is HD elements + 4 of padding: lane-per-row vector reads (16 bytes of f32, 8 of
// f16) then hit distinct banks, and every row start stays 8-byte aligned.
template <int DPL, typename KV> struct stage_ld {
    static constexpr int HD = DPL * 32, LD = HD + 4;
    static constexpr size_t bytes = 32 * (size_t)LD * sizeof(KV);
};

// Rows b0..b0+n-1 (n <= 32) of a cache (row stride kvw elements, head offset applied) into stg,
// 8-byte pieces by every thread of the block (consecutive threads take consecutive pieces of a
// row: coalesced).
template <int DPL, typename KV>
__device__ __forceinline__ void stage_rows(KV *stg, const KV *src, size_t kvw, int b0, int n) {
    constexpr int HD = DPL * 32, LD = stage_ld<DPL, KV>::LD, PPR = HD * (int)sizeof(KV) / 8; // pieces per row
    for (int idx = threadIdx.x; idx < n * PPR; idx += blockDim.x) {
        const int r = idx / PPR, c = idx % PPR;
        const uint2 v = __ldg((const uint2 *)(src + (size_t)(b0 + r) * kvw) + c);
        *((uint2 *)(stg + (size_t)r * LD) + c) = v;
    }
}

// attn_chunk<DPL, RT> with the K and V rows staged in shared memory by the whole block, every warp
// of the block on the same positions (one KV head, the same RT rows: nkv is uniform in the block;
// decode: one row, prefill: a tile of PF_RT rows). Called by all threads (it synchronises the
// block). The scores, max, exp-sum and value sums are the same operations in the same order as
// attn_chunk's, so the partial has the same bits; only the rows come from shared memory.
template <int DPL, int RT, typename KV>
__device__ __forceinline__ void attn_chunk_staged(const float *qs, const KV *K, const KV *V, size_t kvw,
                                                  int p0, const int *nkv, float scale, float *m, float *l,
                                                  float (*acc)[DPL], KV *stg) {
    constexpr int LD = stage_ld<DPL, KV>::LD;
    const int lane = threadIdx.x & 31, nmax = rows_nmax<RT>(nkv);
    float s[RT][NI];
#pragma unroll
    for (int i = 0; i < NI; i++) {
        const int b0 = p0 + 32 * i, n = min(32, nmax - b0);
        __syncthreads(); // the previous slice is consumed
        if (n > 0) stage_rows<DPL, KV>(stg, K, kvw, b0, n);
        __syncthreads();
        slice_scores<DPL, RT>(qs, stg + (size_t)lane * LD, b0 + lane, nmax, nkv, scale, s, i);
    }
    chunk_exp<DPL, RT>(s, m, l, acc);
#pragma unroll
    for (int i = 0; i < NI; i++) {
        const int b0 = p0 + 32 * i;
        if (b0 >= nmax) break; // uniform in the block
        const int n = min(32, nmax - b0);
        __syncthreads();
        stage_rows<DPL, KV>(stg, V, kvw, b0, n);
        __syncthreads();
        for (int src = 0; src < n; src++) {
            float vv[DPL];
            load_row<DPL>(stg + (size_t)src * LD + lane * DPL, vv);
            value_step<DPL, RT>(s, i, src, vv, acc);
        }
    }
}

// ---- decode: split over chunks, then merge ----------------------------------------------------

template <int DPL, typename KV>
__global__ void k_attn_split(cu_attn_dims a, const float *__restrict__ qg, const KV *__restrict__ kc,
                             const KV *__restrict__ vc, const int *pos0, float *part, int nch) {
    pdl_enter();
    constexpr int HD = DPL * 32;
    extern __shared__ float qsm[]; // [G][HD]
    const int c = blockIdx.x, kvh = blockIdx.y, t = blockIdx.z;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, G = a.H / a.Hkv, h = kvh * G + w;
    const int nkv = *pos0 + t + 1, p0 = c * CH;
    if (p0 >= nkv) return;
    float *qs = qsm + w * HD;
    const float *q = qg + (size_t)t * a.H * 2 * HD + (size_t)h * 2 * HD;
    for (int j = lane; j < HD; j += 32) qs[j] = q[j];
    __syncwarp();
    const size_t kvw = (size_t)a.Hkv * HD;
    float m, l, acc[1][DPL];
    attn_chunk<DPL, 1>(qs, kc + (size_t)kvh * HD, vc + (size_t)kvh * HD, kvw, p0, &nkv, a.scale, &m, &l, acc);
    float *pp = part + (((size_t)t * a.H + h) * nch + c) * (HD + 2);
    if (lane == 0) {
        pp[0] = m;
        pp[1] = l;
    }
#pragma unroll
    for (int d = 0; d < DPL; d++) pp[2 + lane * DPL + d] = acc[0][d];
}

// The grouped split kernel: block (chunk, KV head, row), one warp per query head of the group;
// the same partials as k_attn_split.
template <int DPL, typename KV>
__global__ void k_attn_split_grouped(cu_attn_dims a, const float *__restrict__ qg, const KV *__restrict__ kc,
                                     const KV *__restrict__ vc, const int *pos0, float *part, int nch) {
    pdl_enter();
    constexpr int HD = DPL * 32;
    extern __shared__ float smg[]; // [G][HD] queries, then the staged slice
    const int c = blockIdx.x, kvh = blockIdx.y, t = blockIdx.z;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, G = a.H / a.Hkv, h = kvh * G + w;
    const int nkv = *pos0 + t + 1, p0 = c * CH;
    if (p0 >= nkv) return; // the whole block
    float *qs = smg + w * HD;
    const float *q = qg + (size_t)t * a.H * 2 * HD + (size_t)h * 2 * HD;
    for (int j = lane; j < HD; j += 32) qs[j] = q[j];
    __syncwarp();
    KV *stg = (KV *)(smg + (size_t)G * HD);
    const size_t kvw = (size_t)a.Hkv * HD;
    float m, l, acc[1][DPL];
    attn_chunk_staged<DPL, 1, KV>(qs, kc + (size_t)kvh * HD, vc + (size_t)kvh * HD, kvw, p0, &nkv, a.scale,
                                  &m, &l, acc, stg);
    float *pp = part + (((size_t)t * a.H + h) * nch + c) * (HD + 2);
    if (lane == 0) {
        pp[0] = m;
        pp[1] = l;
    }
#pragma unroll
    for (int d = 0; d < DPL; d++) pp[2 + lane * DPL + d] = acc[0][d];
}

// ---- prefill: one block per (tile of PF_RT rows, KV head, sub-group of <= PF_HEADS query heads),
// chunks in order. Each warp owns one query head and touches only its own shared-memory slice
// (no block-wide barrier), so how the heads of a group are cut into blocks changes no bits; the cut
// keeps a block's registers (PF_RT rows of O per lane) within what one SM gives a block: 24 heads
// in one 768-thread block ran out of resources at head dim 256.
// STAGED (cu_attn_dims.prefill_staged): the block copies each 32-position slice of K, then of V,
// into shared memory once for its warps (attn_chunk_staged, the decode kernel's staging; the same
// bits), instead of every warp reading the rows itself; warps past the group's heads then stay for
// the barriers and store nothing.
#define PF_HEADS 8

template <int DPL, typename KV, bool STAGED>
__global__ void k_attn_prefill(cu_attn_dims a, const float *__restrict__ qg, const KV *__restrict__ kc,
                               const KV *__restrict__ vc, const int *pos0, int T, float *o) {
    pdl_enter();
    constexpr int HD = DPL * 32;
    extern __shared__ float qsm[]; // [warps][PF_RT][HD] (STAGED: then the staged slice)
    const int kvh = blockIdx.y, t0 = blockIdx.x * PF_RT;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, G = a.H / a.Hkv;
    const int hg = blockIdx.z * (blockDim.x >> 5) + w; // head within the group
    if (!STAGED && hg >= G) return;                    // the last sub-group may be partial
    const bool own = hg < G;
    const int h = kvh * G + (own ? hg : 0);
    float *qs = qsm + (size_t)w * PF_RT * HD;
    int nkv[PF_RT];
#pragma unroll
    for (int r = 0; r < PF_RT; r++) {
        const int t = t0 + r;
        nkv[r] = t < T ? *pos0 + t + 1 : 0;
        const float *q = qg + (size_t)min(t, T - 1) * a.H * 2 * HD + (size_t)h * 2 * HD;
        for (int j = lane; j < HD; j += 32) qs[r * HD + j] = q[j];
    }
    __syncwarp();
    const size_t kvw = (size_t)a.Hkv * HD;
    const int nmax = rows_nmax<PF_RT>(nkv);
    float M[PF_RT], L[PF_RT], O[PF_RT][DPL];
#pragma unroll
    for (int r = 0; r < PF_RT; r++) {
        M[r] = -INFINITY;
        L[r] = 0.0f;
#pragma unroll
        for (int d = 0; d < DPL; d++) O[r][d] = 0.0f;
    }
    for (int p0 = 0; p0 < nmax; p0 += CH) {
        float m[PF_RT], l[PF_RT], acc[PF_RT][DPL];
        if constexpr (STAGED)
            attn_chunk_staged<DPL, PF_RT, KV>(qs, kc + (size_t)kvh * HD, vc + (size_t)kvh * HD, kvw, p0, nkv,
                                              a.scale, m, l, acc,
                                              (KV *)(qsm + (size_t)(blockDim.x >> 5) * PF_RT * HD));
        else
            attn_chunk<DPL, PF_RT>(qs, kc + (size_t)kvh * HD, vc + (size_t)kvh * HD, kvw, p0, nkv, a.scale, m,
                                   l, acc);
#pragma unroll
        for (int r = 0; r < PF_RT; r++)
            if (p0 < nkv[r]) merge_step<DPL>(M[r], L[r], O[r], m[r], l[r], acc[r]);
    }
    if (!own) return;
#pragma unroll
    for (int r = 0; r < PF_RT; r++) {
        const int t = t0 + r;
        if (t >= T) break;
        attn_finish<DPL>(O[r], L[r], qg + (size_t)t * a.H * 2 * HD + (size_t)h * 2 * HD + HD,
                         o + (size_t)t * a.H * HD + (size_t)h * HD);
    }
}

// ---- prefill, register-tiled (cu_attn_dims.prefill_tiled) ------------------------------------
//
// The same chunk partials and merges as k_attn_prefill, bit for bit, with far fewer shared-memory
// reads per multiply-add: a block owns PT_ROWS (position, head) rows — PT_ROWS / G consecutive
// positions times the G query heads of one KV head — and 256 threads. Per chunk:
//   scores  K staged PT_SL positions at a time; a thread holds 4 rows x 4 positions and walks the
//           head dims in order (score = fmaf chain over d = 0, 1, .., HD - 1 from 0, then * scale:
//           qk_dots' order), 8 shared loads per 64 multiply-adds instead of 5 per 16;
//   softmax one warp per row with attn_chunk's lane mapping (lane L: positions 32 i + L) through
//           the same row_exp: the max, exp(s - m) (masked: 0), the per-lane sums over i, warp_sum;
//   values  V staged the same way; a thread holds 4 rows x DPL dims and walks the positions in order
//           (acc = fmaf(e, v, acc) for p = p0 .. min(p0 + CH, nmax) - 1: attn_chunk's order);
//   merge   merge_step per row in chunk order (every thread of a row computes the same M, L).
// The block's last position can lie past a row's own: those positions have e = 0, whose fmaf leaves
// acc unchanged, as in k_attn_prefill's 4-row tiles and the split kernels' single rows. Blocks are
// issued last positions first (the longest rows), so the causal tail is short.
#define PT_ROWS 32
#define PT_SL 128
#define PT_THREADS 256

template <int DPL, typename KV> struct pt_smem {
    static constexpr int HD = DPL * 32, QLD = HD + 4, KLD = HD + 16 / (int)sizeof(KV), SLD = CH + 1;
    // row strides of 4 mod 32 words: the 4 rows / 8 positions a warp reads at one d hit distinct banks
    static constexpr size_t q = (size_t)PT_ROWS * QLD * 4, k = (size_t)PT_SL * KLD * sizeof(KV),
                            sc = (size_t)PT_ROWS * SLD * 4, bytes = q + k + sc + 2 * PT_ROWS * 4;
};

// Row r of a block: its position t (t0 + r / G) and head; nkv = positions it sees (0: no row).
__device__ __forceinline__ int pt_nkv(int r, int G, int rtq, int t0, int T, int pos0) {
    const int t = t0 + r / G;
    return r < rtq * G && t < T ? pos0 + t + 1 : 0;
}

template <int DPL, typename KV>
__global__ void __launch_bounds__(PT_THREADS, 1)
    k_attn_prefill_tiled(cu_attn_dims a, const float *__restrict__ qg, const KV *__restrict__ kc,
                         const KV *__restrict__ vc, const int *pos0p, int T, float *o) {
    pdl_enter();
    using P = pt_smem<DPL, KV>;
    constexpr int HD = P::HD, QLD = P::QLD, KLD = P::KLD, SLD = P::SLD;
    extern __shared__ __align__(16) uint8_t pt_sm[];
    float *Qs = (float *)pt_sm, *S = (float *)(pt_sm + P::q + P::k), *Mc = S + PT_ROWS * SLD,
          *Lc = Mc + PT_ROWS;
    KV *Ks = (KV *)(pt_sm + P::q);
    const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31, kvh = blockIdx.y;
    const int G = a.H / a.Hkv, rtq = PT_ROWS / G, pos0 = *pos0p;
    const int t0 = ((int)gridDim.x - 1 - (int)blockIdx.x) * rtq; // the longest rows first
    const size_t kvw = (size_t)a.Hkv * HD;
    const KV *K = kc + (size_t)kvh * HD, *V = vc + (size_t)kvh * HD;
    for (int i = tid; i < PT_ROWS * HD / 4; i += PT_THREADS) { // the block's queries
        const int r = i / (HD / 4), c = 4 * (i % (HD / 4)), t = min(t0 + r / G, T - 1);
        const float *q = qg + (size_t)t * a.H * 2 * HD + (size_t)(kvh * G + r % G) * 2 * HD;
        *(float4 *)(Qs + r * QLD + c) =
            r < rtq * G ? *(const float4 *)(q + c) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    const int nmax = pos0 + min(t0 + rtq, T);
    // this thread's rows in the value phase and after: lr + 8 kk; its dims dbase .. dbase + DPL - 1
    const int lr = lane >> 2, dbase = w * (HD / 8) + (lane & 3) * DPL;
    int nkv[4];
    float M[4], L[4], O[4][DPL];
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        nkv[kk] = pt_nkv(lr + 8 * kk, G, rtq, t0, T, pos0);
        M[kk] = -INFINITY;
        L[kk] = 0.0f;
#pragma unroll
        for (int d = 0; d < DPL; d++) O[kk][d] = 0.0f;
    }
    for (int p0 = 0; p0 < nmax; p0 += CH) {
        { // scores: rows 16 rh + lr4 + 4 kk, positions 32 pg + lp + 8 j of each slice
            const int rh = w & 1, pg = w >> 1, lr4 = lane >> 3, lp = lane & 7;
            for (int sl = 0; sl < CH / PT_SL; sl++) {
                const int b0 = p0 + sl * PT_SL, n = min(PT_SL, nmax - b0);
                __syncthreads(); // Ks is free; at the first slice also: Qs is written
                if (n > 0) stage_kv_async<KV, HD, PT_THREADS>(Ks, KLD, K, kvw, b0, n);
                __syncthreads();
                float dot[4][4];
#pragma unroll
                for (int kk = 0; kk < 4; kk++)
#pragma unroll
                    for (int j = 0; j < 4; j++) dot[kk][j] = 0.0f;
                if (n > 0) {
#pragma unroll 2
                    for (int d = 0; d < HD; d += 4) {
                        float4 q4[4], k4[4];
#pragma unroll
                        for (int kk = 0; kk < 4; kk++)
                            q4[kk] = *(const float4 *)(Qs + (16 * rh + lr4 + 4 * kk) * QLD + d);
#pragma unroll
                        for (int j = 0; j < 4; j++)
                            k4[j] = ldkv4(Ks + (size_t)(32 * pg + lp + 8 * j) * KLD + d);
#pragma unroll
                        for (int kk = 0; kk < 4; kk++)
#pragma unroll
                            for (int j = 0; j < 4; j++) {
                                dot[kk][j] = fmaf(q4[kk].x, k4[j].x, dot[kk][j]);
                                dot[kk][j] = fmaf(q4[kk].y, k4[j].y, dot[kk][j]);
                                dot[kk][j] = fmaf(q4[kk].z, k4[j].z, dot[kk][j]);
                                dot[kk][j] = fmaf(q4[kk].w, k4[j].w, dot[kk][j]);
                            }
                    }
                }
#pragma unroll
                for (int kk = 0; kk < 4; kk++) {
                    const int r = 16 * rh + lr4 + 4 * kk, nk = pt_nkv(r, G, rtq, t0, T, pos0);
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        const int pos = 32 * pg + lp + 8 * j;
                        S[r * SLD + sl * PT_SL + pos] = b0 + pos < nk ? dot[kk][j] * a.scale : -INFINITY;
                    }
                }
            }
        }
        __syncthreads();
        // softmax statistics: warp w, rows 4 w .. 4 w + 3 (row_exp, with attn_chunk's lane mapping)
#pragma unroll
        for (int rr = 0; rr < PT_ROWS / 8; rr++) {
            const int r = (PT_ROWS / 8) * w + rr;
            float sv[NI], m, l;
#pragma unroll
            for (int i = 0; i < NI; i++) sv[i] = S[r * SLD + 32 * i + lane];
            row_exp(sv, m, l);
#pragma unroll
            for (int i = 0; i < NI; i++) S[r * SLD + 32 * i + lane] = sv[i];
            if (lane == 0) {
                Mc[r] = m;
                Lc[r] = l;
            }
        }
        // values: rows lr + 8 kk, dims dbase..; positions in order
        float acc[4][DPL];
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
#pragma unroll
            for (int d = 0; d < DPL; d++) acc[kk][d] = 0.0f;
        for (int sl = 0; sl < CH / PT_SL; sl++) {
            const int b0 = p0 + sl * PT_SL, n = min(PT_SL, nmax - b0);
            if (n <= 0) break; // uniform in the block
            __syncthreads();   // the scores' (or the previous slice's) Ks reads and S, Mc, Lc are done
            stage_kv_async<KV, HD, PT_THREADS>(Ks, KLD, V, kvw, b0, n);
            __syncthreads();
            for (int pp = 0; pp < n; pp++) {
                float vv[DPL];
                load_row<DPL>(Ks + (size_t)pp * KLD + dbase, vv);
#pragma unroll
                for (int kk = 0; kk < 4; kk++) {
                    const float e = S[(lr + 8 * kk) * SLD + sl * PT_SL + pp];
#pragma unroll
                    for (int d = 0; d < DPL; d++) acc[kk][d] = fmaf(e, vv[d], acc[kk][d]);
                }
            }
        }
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
            if (p0 < nkv[kk]) merge_step<DPL>(M[kk], L[kk], O[kk], Mc[lr + 8 * kk], Lc[lr + 8 * kk], acc[kk]);
    }
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        const int r = lr + 8 * kk;
        if (!nkv[kk]) continue;
        const int t = t0 + r / G, h = kvh * G + r % G;
        attn_finish<DPL>(O[kk], L[kk], qg + (size_t)t * a.H * 2 * HD + (size_t)h * 2 * HD + HD,
                         o + (size_t)t * a.H * HD + (size_t)h * HD, dbase);
    }
}

// ---- launchers -------------------------------------------------------------------------------

extern "C" int cu_attn_check(int hd, int H, int Hkv, int n_rot) {
    if ((hd != 64 && hd != 128 && hd != 256) || Hkv < 1 || H % Hkv || H / Hkv > 32 || H + Hkv > 32 ||
        n_rot > hd)
        return rl_seterr(
            "CUDA attention: head_dim %d with %d query + %d KV heads is not supported (head_dim "
            "64/128/256, at most 32 heads in all: k_qk_norm_rope runs one block of a warp per head); "
            "--backend cpu runs this model",
            hd, H, Hkv);
    return 0;
}

static int check_dims(const cu_attn_dims *a) { return cu_attn_check(a->hd, a->H, a->Hkv, a->n_rot); }

template <int DPL>
static int qk_launch(const cu_attn_dims *a, float *qg, float *k, const float *v, const float *qn,
                     const float *kn, const int *pos0, int T, void *kc, void *vc, cu_stream s) {
    const int threads = 32 * (a->H + a->Hkv);
    if (a->kv_f16)
        cu_go(k_qk_norm_rope<DPL, __half>, T, threads, 0, s, *a, qg, k, v, qn, kn, pos0, (__half *)kc,
              (__half *)vc);
    else
        cu_go(k_qk_norm_rope<DPL, float>, T, threads, 0, s, *a, qg, k, v, qn, kn, pos0, (float *)kc,
              (float *)vc);
    CU_LAUNCHED("k_qk_norm_rope");
    return 0;
}

extern "C" int cu_qk_norm_rope_store(const cu_attn_dims *a, float *qg, float *k, const float *v,
                                     const float *qn, const float *kn, const int *pos0, int T, void *kc,
                                     void *vc, cu_stream s) {
    if (check_dims(a)) return -1;
    switch (a->hd) {
    case 64: return qk_launch<2>(a, qg, k, v, qn, kn, pos0, T, kc, vc, s);
    case 128: return qk_launch<4>(a, qg, k, v, qn, kn, pos0, T, kc, vc, s);
    default: return qk_launch<8>(a, qg, k, v, qn, kn, pos0, T, kc, vc, s);
    }
}

extern "C" size_t cu_attn_part_floats(const cu_attn_dims *a, int T) {
    const size_t nch = ((size_t)a->n_ctx + CH - 1) / CH;
    return (size_t)T * a->H * nch * (a->hd + 2);
}

// k_attn_prefill with gs warps (query heads) per block and smem bytes of shared memory.
template <int DPL, typename KV, bool STAGED>
static int pf_launch(const cu_attn_dims *a, dim3 grid, int gs, size_t smem, const float *qg, const void *kc,
                     const void *vc, const int *pos0, int T, float *o, cu_stream s) {
    if (cu_smem(s, k_attn_prefill<DPL, KV, STAGED>, smem, "k_attn_prefill")) return -1;
    cu_go(k_attn_prefill<DPL, KV, STAGED>, grid, 32 * gs, smem, s, *a, qg, (const KV *)kc, (const KV *)vc,
          pos0, T, o);
    CU_LAUNCHED("k_attn_prefill");
    return 0;
}

// The launch shape follows the switches (cu_attn_dims) and then the device: a shape whose shared memory
// does not fit (cu_dev.smem_max) gives way to the next one of the same bits — the register-tiled prefill
// (hd 256: 199 KB with an f32 cache, 134 KB with f16) to the staged one, the staged to the unstaged, the
// grouped split kernel to the per-warp one.
template <int DPL, typename KV>
static int attn_launch(const cu_attn_dims *a, const float *qg, const void *kc, const void *vc,
                       const int *pos0, int T, bool split, float *part, float *o, cu_stream s) {
    constexpr int HD = DPL * 32;
    const int G = a->H / a->Hkv;
    const cu_dev *d = s.dev;
    const size_t gsm = G * HD * sizeof(float) + stage_ld<DPL, KV>::bytes;
    if (split && !a->split_per_warp && cu_dev_fits(d, gsm)) {
        const int nch = (a->n_ctx + CH - 1) / CH;
        if (cu_smem(s, k_attn_split_grouped<DPL, KV>, gsm, "k_attn_split_grouped")) return -1;
        cu_go(k_attn_split_grouped<DPL, KV>, dim3(nch, a->Hkv, T), 32 * G, gsm, s, *a, qg, (const KV *)kc,
              (const KV *)vc, pos0, part, nch);
        CU_LAUNCHED("k_attn_split_grouped");
        if (attn_merge_launch<DPL>(a, qg, pos0, part, nch, T, o, s)) return -1;
    } else if (split) {
        const int nch = (a->n_ctx + CH - 1) / CH;
        const size_t sm = G * HD * sizeof(float);
        if (cu_smem(s, k_attn_split<DPL, KV>, sm, "k_attn_split")) return -1;
        cu_go(k_attn_split<DPL, KV>, dim3(nch, a->Hkv, T), 32 * G, sm, s, *a, qg, (const KV *)kc,
              (const KV *)vc, pos0, part, nch);
        CU_LAUNCHED("k_attn_split");
        if (attn_merge_launch<DPL>(a, qg, pos0, part, nch, T, o, s)) return -1;
    } else if (a->prefill_tiled && cu_dev_fits(d, pt_smem<DPL, KV>::bytes)) {
        using P = pt_smem<DPL, KV>;
        if (cu_smem(s, k_attn_prefill_tiled<DPL, KV>, P::bytes, "k_attn_prefill_tiled")) return -1;
        const int rtq = PT_ROWS / G;
        cu_go(k_attn_prefill_tiled<DPL, KV>, dim3((T + rtq - 1) / rtq, a->Hkv), PT_THREADS, P::bytes, s, *a,
              qg, (const KV *)kc, (const KV *)vc, pos0, T, o);
        CU_LAUNCHED("k_attn_prefill_tiled");
    } else {
        const int gs = G < PF_HEADS ? G : PF_HEADS; /* query heads (warps) per block */
        const dim3 grid((T + PF_RT - 1) / PF_RT, a->Hkv, (G + gs - 1) / gs);
        const size_t smem = gs * PF_RT * HD * sizeof(float), staged = smem + stage_ld<DPL, KV>::bytes;
        if (a->prefill_staged && cu_dev_fits(d, staged)
                ? pf_launch<DPL, KV, true>(a, grid, gs, staged, qg, kc, vc, pos0, T, o, s)
                : pf_launch<DPL, KV, false>(a, grid, gs, smem, qg, kc, vc, pos0, T, o, s))
            return -1;
    }
    return 0;
}

template <int DPL>
static int attn_kv(const cu_attn_dims *a, const float *qg, const void *kc, const void *vc, const int *pos0,
                   int T, bool split, float *part, float *o, cu_stream s) {
    return a->kv_f16 ? attn_launch<DPL, __half>(a, qg, kc, vc, pos0, T, split, part, o, s)
                     : attn_launch<DPL, float>(a, qg, kc, vc, pos0, T, split, part, o, s);
}

extern "C" int cu_attention(const cu_attn_dims *a, const float *qg, const void *kc, const void *vc,
                            const int *pos0, int T, bool split, float *part, float *o, cu_stream s) {
    if (check_dims(a)) return -1;
    if (split && T > CU_ATTN_SPLIT_MAX_T) return rl_seterr("cu_attention: split path with %d rows", T);
    if (a->tc) return attn_tc(a, qg, kc, vc, pos0, T, split, part, o, s);
    switch (a->hd) {
    case 64: return attn_kv<2>(a, qg, kc, vc, pos0, T, split, part, o, s);
    case 128: return attn_kv<4>(a, qg, kc, vc, pos0, T, split, part, o, s);
    default: return attn_kv<8>(a, qg, kc, vc, pos0, T, split, part, o, s);
    }
}
