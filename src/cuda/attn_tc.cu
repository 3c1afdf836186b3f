// attn_tc.cu — attention on tensor cores (cu_attn_dims.tc: the CUDA backend's default with the f16 KV
// cache and query groups of at most 16 heads; RL_CUDA_ATTN_TC=0 turns it off). mma.sync m16n8k16 on
// f16 operands with f32 accumulation, under its own numerics contract, which the split decode kernel
// and the prefill walk share so that their rows stay bit-identical (verify == steps == prefill rows):
//   scores  s[r][p] = (sum over the head dims of f16(q[r][d]) * k[p][d], accumulated by HD / 16 mmas
//           in dim order from 0) * scale; -inf where row r does not see position p;
//   softmax per chunk of CH positions, one warp per row with the FP32 kernels' lane mapping (lane L:
//           positions 32 i + L): m = the max, e = f16(expf(s - m)) (masked: 0), l = the sum of the
//           e as floats (per lane over i, then warp_sum), so the weights applied are the ones summed;
//   values  acc[r][d] = sum over the chunk's positions of e[r][p] * v[p][d], accumulated by mmas of
//           16 positions in position order from the chunk's first;
//   merge   the FP32 kernels' merge_ab / merge_o in chunk order, then attn_out (attn.cuh).
// An element of an mma's result depends only on its own row of A, its own column of B and its own
// accumulator, so which rows share a tile does not change it (prefill: 64 (position, head) rows per
// block; decode: the G heads of one position, padded to 16). Positions past the rows' end have
// e = 0 and their staged V rows are zeroed, so a 16-position step holding only such positions adds
// exact zeros: decode skips it, prefill (whose rows end at different positions) may run it; the
// accumulators are the same (test_cuda_ops: test_attention_tc).
// Against the FP32 kernels the differences are the f16 rounding of q and of the weights (2^-11
// relative each) and the tensor cores' accumulation: test_attention_tc derives its bound from them.
#include "cuda/attn.cuh"

#define TC_THREADS 256 // 8 warps
#define TC_SL 128      // positions per staged K or V slice

// Shared memory of a block of R = 16 MT rows: the f16 queries, one staged K or V slice, the f32 scores
// of a chunk (each row's f16 weights then overwrite the first half of its scores), the chunk's m and l
// and the positions each row sees. Staged rows of LD halves: consecutive rows start 16 bytes apart
// modulo 128, so the 8 row addresses of an ldmatrix hit distinct banks; score rows of SLD floats
// likewise (1040 bytes).
// NB staged slices: 1 for the prefill walk and the single-buffered split kernel, 2 for the
// double-buffered split kernel (tc_chunk2).
template <int HD, int MT, int NB = 1> struct tc_smem {
    static constexpr int R = 16 * MT, LD = HD + 8, SLD = CH + 4;
    static constexpr size_t q = (size_t)R * LD * 2, kv = (size_t)NB * TC_SL * LD * 2, s = (size_t)R * SLD * 4;
    static constexpr size_t bytes = q + kv + s + 3 * (size_t)R * 4;
};

__device__ __forceinline__ unsigned smem_u32(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p))
                 : "memory");
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p))
                 : "memory");
}
__device__ __forceinline__ void ldsm_x2_t(uint32_t (&r)[2], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(smem_u32(p))
                 : "memory");
}
// d += a * b: a 16 x 16 (row), b 16 x 8 (col), f16 operands, f32 accumulators.
__device__ __forceinline__ void mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Rows b0 .. b0 + n - 1 of one head's V into dst (stage_kv_issue: one group of this thread, not waited
// for; an empty one for n <= 0) and rows n .. upto - 1 zeroed with plain stores: the 16-position steps
// must not meet stale values.
template <int HD>
__device__ __forceinline__ void tc_stage_v(__half *dst, const __half *src, size_t kvw, int b0, int n,
                                           int upto) {
    constexpr int LD = HD + 8;
    if (n > 0)
        for (int i = n * (HD / 8) + (int)threadIdx.x; i < upto * (HD / 8); i += TC_THREADS)
            *(uint4 *)(dst + (size_t)(i / (HD / 8)) * LD + 8 * (i % (HD / 8))) = make_uint4(0u, 0u, 0u, 0u);
    stage_kv_issue<__half, HD, TC_THREADS>(dst, LD, src, kvw, b0, n);
}

// The value dims tiles of 8 a warp owns: HD / 8 split over the 8 / MT warps of one row tile.
template <int HD, int MT> struct tc_nv { static constexpr int n = HD / 8 / (8 / MT); };

// The pieces of a chunk partial (tc_chunk, tc_chunk2), for the block's 16 MT rows: f16 queries Qs
// and the positions each row sees, Nk, in shared memory; S the chunk's scores, then its weights.
//
// The scores of slice sl (positions p0 + sl TC_SL .., n of them staged at KVs; n <= 0: none) into S:
// this warp's NS tiles of 8 positions (positions past n: stale or unwritten rows, masked here).
template <int HD, int MT>
__device__ __forceinline__ void tc_scores(const __half *Qs, const __half *KVs, float *S, const int *Nk,
                                          int p0, int sl, int n, float scale) {
    constexpr int LD = HD + 8, SLD = CH + 4, NP = 8 / MT, NS = TC_SL / 8 / NP;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, mt = w % MT, np = w / MT, g = lane >> 2,
              t = lane & 3;
    float d[NS][4];
#pragma unroll
    for (int j = 0; j < NS; j++) d[j][0] = d[j][1] = d[j][2] = d[j][3] = 0.0f;
    if (n > 0) {
#pragma unroll 2
        for (int ks = 0; ks < HD / 16; ks++) {
            uint32_t a[4];
            ldsm_x4(a, Qs + (size_t)(16 * mt + (lane & 15)) * LD + 16 * ks + 8 * (lane >> 4));
#pragma unroll
            for (int j = 0; j < NS; j += 2) {
                uint32_t b[4]; // tiles j, j + 1: positions n0 + (lane & 7) + 8 (lane >> 4), dims 16 ks + 8
                               // ((lane >> 3) & 1)
                const int n0 = 8 * (np * NS + j);
                ldsm_x4(b, KVs + (size_t)(n0 + (lane & 7) + 8 * (lane >> 4)) * LD + 16 * ks +
                               8 * ((lane >> 3) & 1));
                mma_f16(d[j], a, b[0], b[1]);
                mma_f16(d[j + 1], a, b[2], b[3]);
            }
        }
    }
#pragma unroll
    for (int j = 0; j < NS; j++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const int r = 16 * mt + g + 8 * hh, p = sl * TC_SL + 8 * (np * NS + j) + 2 * t, nk = Nk[r];
            float2 v;
            v.x = p0 + p < nk ? d[j][2 * hh] * scale : -INFINITY;
            v.y = p0 + p + 1 < nk ? d[j][2 * hh + 1] * scale : -INFINITY;
            *(float2 *)(S + (size_t)r * SLD + p) = v;
        }
}

// Softmax statistics and the f16 weights of the chunk (every score of S written and visible), one warp
// per row: m and l per row into Mc / Lc, each row's weights over the first half of its scores.
template <int MT> __device__ __forceinline__ void tc_softmax(float *S, float *Mc, float *Lc) {
    constexpr int R = 16 * MT, SLD = CH + 4;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
#pragma unroll
    for (int rr = 0; rr < R / 8; rr++) {
        const int r = (R / 8) * w + rr;
        float sv[CH / 32], mx = -INFINITY;
#pragma unroll
        for (int i = 0; i < CH / 32; i++) {
            sv[i] = S[(size_t)r * SLD + 32 * i + lane];
            mx = fmaxf(mx, sv[i]);
        }
        const float m = warp_max(mx);
        float ls = 0.0f;
        __half e[CH / 32];
#pragma unroll
        for (int i = 0; i < CH / 32; i++) {
            e[i] = sv[i] == -INFINITY ? __float2half_rn(0.0f) : __float2half_rn(expf(sv[i] - m));
            ls += __half2float(e[i]);
        }
        const float l = warp_sum(ls);
        __syncwarp(); // every lane has read the row's scores
        __half *Pr = (__half *)(S + (size_t)r * SLD);
#pragma unroll
        for (int i = 0; i < CH / 32; i++) Pr[32 * i + lane] = e[i];
        if (lane == 0) {
            Mc[r] = m;
            Lc[r] = l;
        }
    }
}

// acc += the weights of slice sl (in S) times its V rows staged at KVs, nks steps of 16 positions in
// order: this warp's part of acc (rows 16 (w % MT) .., value dims 8 NV (w / MT) ..).
template <int HD, int MT>
__device__ __forceinline__ void tc_values(const float *S, const __half *KVs, int sl, int nks,
                                          float (&acc)[tc_nv<HD, MT>::n][4]) {
    constexpr int LD = HD + 8, SLD = CH + 4, NV = tc_nv<HD, MT>::n;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, mt = w % MT, np = w / MT;
    for (int ks = 0; ks < nks; ks++) {
        uint32_t a[4];
        ldsm_x4(a, (const __half *)(S + (size_t)(16 * mt + (lane & 15)) * SLD) + sl * TC_SL + 16 * ks +
                       8 * (lane >> 4));
        // tiles j, j + 1: positions 16 ks + (lane & 7) + 8 ((lane >> 3) & 1), dims d0 + 8 (lane >> 4)
        const __half *vb =
            KVs + (size_t)(16 * ks + (lane & 7) + 8 * ((lane >> 3) & 1)) * LD + 8 * (lane >> 4);
        if constexpr (NV == 1) {
            uint32_t b[2];
            ldsm_x2_t(b, vb + 8 * np);
            mma_f16(acc[0], a, b[0], b[1]);
        } else {
#pragma unroll
            for (int j = 0; j < NV; j += 2) {
                uint32_t b[4];
                ldsm_x4_t(b, vb + 8 * (np * NV + j));
                mma_f16(acc[j], a, b[0], b[1]);
                mma_f16(acc[j + 1], a, b[2], b[3]);
            }
        }
    }
}

// The chunk partial of the block's 16 MT rows for positions p0 .. p0 + CH - 1, of which those < nmax
// (the most any row sees) are read: m and l per row into Mc / Lc, and this warp's part of acc in the
// mma's accumulator layout. One staged slice at a time (load, wait, use). Called by all threads.
template <int HD, int MT>
__device__ __forceinline__ void tc_chunk(const __half *K, const __half *V, size_t kvw, int p0, int nmax,
                                         float scale, uint8_t *sm, float (&acc)[tc_nv<HD, MT>::n][4]) {
    using P = tc_smem<HD, MT>;
    constexpr int R = P::R, LD = P::LD, SLD = P::SLD, NV = tc_nv<HD, MT>::n;
    const __half *Qs = (const __half *)sm;
    __half *KVs = (__half *)(sm + P::q);
    float *S = (float *)(sm + P::q + P::kv), *Mc = S + R * SLD, *Lc = Mc + R;
    const int *Nk = (const int *)(Lc + R);
    for (int sl = 0; sl < CH / TC_SL; sl++) {
        const int b0 = p0 + sl * TC_SL, n = min(TC_SL, nmax - b0);
        __syncthreads(); // KVs free; at the first slice also: Qs and Nk written
        if (n > 0) stage_kv_async<__half, HD, TC_THREADS>(KVs, LD, K, kvw, b0, n);
        __syncthreads();
        tc_scores<HD, MT>(Qs, KVs, S, Nk, p0, sl, n, scale);
    }
    __syncthreads();
    tc_softmax<MT>(S, Mc, Lc);
#pragma unroll
    for (int j = 0; j < NV; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    for (int sl = 0; sl < CH / TC_SL; sl++) {
        const int b0 = p0 + sl * TC_SL, n = min(TC_SL, nmax - b0);
        if (n <= 0) break; // uniform in the block
        const int nks = (n + 15) / 16;
        __syncthreads(); // KVs: the scores' reads are done; the weights are written
        tc_stage_v<HD>(KVs, V, kvw, b0, n, 16 * nks);
        __pipeline_wait_prior(0);
        __syncthreads();
        tc_values<HD, MT>(S, KVs, sl, nks, acc);
    }
}

// tc_chunk for the split kernel's one row tile (MT = 1) with two staged slices, so that loads run
// while the block computes: K of both slices first; each slice's V goes into its buffer as soon as
// that slice's scores are done (and runs under the other slice's scores and the softmax). The same
// tc_scores / tc_softmax / tc_values on the same values in the same order: the same bits as tc_chunk.
template <int HD>
__device__ __forceinline__ void tc_chunk2(const __half *K, const __half *V, size_t kvw, int p0, int nmax,
                                          float scale, uint8_t *sm, float (&acc)[tc_nv<HD, 1>::n][4]) {
    using P = tc_smem<HD, 1, 2>;
    static_assert(CH == 2 * TC_SL, "a chunk is two staged slices");
    constexpr int R = P::R, LD = P::LD, SLD = P::SLD, NV = tc_nv<HD, 1>::n;
    const __half *Qs = (const __half *)sm;
    __half *const buf[2] = {(__half *)(sm + P::q), (__half *)(sm + P::q) + (size_t)TC_SL * LD};
    float *S = (float *)(sm + P::q + P::kv), *Mc = S + R * SLD, *Lc = Mc + R;
    const int *Nk = (const int *)(Lc + R);
    int n[2], nks[2];
#pragma unroll
    for (int sl = 0; sl < 2; sl++) {
        n[sl] = min(TC_SL, nmax - (p0 + sl * TC_SL));
        nks[sl] = n[sl] > 0 ? (n[sl] + 15) / 16 : 0;
    }
    // this thread's groups, in order: K0, K1, V0, V1
    stage_kv_issue<__half, HD, TC_THREADS>(buf[0], LD, K, kvw, p0, n[0]);
    stage_kv_issue<__half, HD, TC_THREADS>(buf[1], LD, K, kvw, p0 + TC_SL, n[1]);
#pragma unroll
    for (int sl = 0; sl < 2; sl++) {
        __pipeline_wait_prior(1); // K sl (sl 0: K1 may be in flight; sl 1: V0 may)
        __syncthreads();          // every thread's copies of K sl; at sl 0 also Qs and Nk written
        tc_scores<HD, 1>(Qs, buf[sl], S, Nk, p0, sl, n[sl], scale);
        __syncthreads(); // every warp is done with K sl
        tc_stage_v<HD>(buf[sl], V, kvw, p0 + sl * TC_SL, n[sl], 16 * nks[sl]);
    }
    tc_softmax<1>(S, Mc, Lc); // every score written: the barrier after slice 1's scores
#pragma unroll
    for (int j = 0; j < NV; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
#pragma unroll
    for (int sl = 0; sl < 2; sl++) {
        if (n[sl] <= 0) break;                 // uniform in the block
        if (sl == 0) __pipeline_wait_prior(1); // V0 (V1 may be in flight)
        else __pipeline_wait_prior(0);
        __syncthreads(); // every thread's copies and zeros of V sl; the weights written
        tc_values<HD, 1>(S, buf[sl], sl, nks[sl], acc);
    }
    __pipeline_wait_prior(0); // nothing left in flight when the block's shared memory is released
}

// The block's queries as f16 (row r: query head q_head(r) of position q_pos(r); rows with nk(r) = 0
// zeroed) and the positions each row sees.
template <int HD, int MT, int NB = 1, typename F>
__device__ __forceinline__ void tc_load_q(const float *qg, int H, F row, uint8_t *sm) {
    using P = tc_smem<HD, MT, NB>;
    __half *Qs = (__half *)sm;
    int *Nk = (int *)(sm + P::q + P::kv + P::s + 2 * (size_t)P::R * 4);
    for (int i = threadIdx.x; i < P::R * HD / 4; i += TC_THREADS) {
        const int r = i / (HD / 4), c = 4 * (i % (HD / 4));
        int t, h, nk;
        row(r, t, h, nk);
        float4 q = make_float4(0.f, 0.f, 0.f, 0.f);
        if (nk) q = *(const float4 *)(qg + ((size_t)t * H + h) * 2 * HD + c);
        __half2 *d = (__half2 *)(Qs + (size_t)r * P::LD + c);
        d[0] = __floats2half2_rn(q.x, q.y);
        d[1] = __floats2half2_rn(q.z, q.w);
        if (c == 0) Nk[r] = nk;
    }
}

// Decode / verify: block (chunk, KV head, row t) computes the chunk partial of the G query heads of
// row t into part (k_attn_split's layout); k_attn_merge merges them. NB 2: tc_chunk2 (the default),
// 1: tc_chunk (RL_CUDA_ATTN_DB=0); the same bits.
template <int HD, int NB>
__global__ void __launch_bounds__(TC_THREADS)
    k_attn_tc_split(cu_attn_dims a, const float *__restrict__ qg, const __half *__restrict__ kc,
                    const __half *__restrict__ vc, const int *pos0, float *part, int nch) {
    pdl_enter();
    using P = tc_smem<HD, 1, NB>;
    constexpr int NV = tc_nv<HD, 1>::n;
    extern __shared__ __align__(16) uint8_t tc_sm[];
    const int c = blockIdx.x, kvh = blockIdx.y, t = blockIdx.z, G = a.H / a.Hkv;
    const int nkv = *pos0 + t + 1, p0 = c * CH;
    if (p0 >= nkv) return; // the whole block
    tc_load_q<HD, 1, NB>(
        qg, a.H,
        [&](int r, int &tt, int &h, int &nk) {
            tt = t;
            h = kvh * G + r;
            nk = r < G ? nkv : 0;
        },
        tc_sm);
    const size_t kvw = (size_t)a.Hkv * HD;
    float acc[NV][4];
    if constexpr (NB == 2)
        tc_chunk2<HD>(kc + (size_t)kvh * HD, vc + (size_t)kvh * HD, kvw, p0, nkv, a.scale, tc_sm, acc);
    else tc_chunk<HD, 1>(kc + (size_t)kvh * HD, vc + (size_t)kvh * HD, kvw, p0, nkv, a.scale, tc_sm, acc);
    const float *Mc = (const float *)(tc_sm + P::q + P::kv + P::s), *Lc = Mc + P::R;
    const int lane = threadIdx.x & 31, np = threadIdx.x >> 5, g = lane >> 2, tq = lane & 3;
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        const int r = g + 8 * hh;
        if (r >= G) continue;
        float *pp = part + (((size_t)t * a.H + kvh * G + r) * nch + c) * (HD + 2);
        if (np == 0 && tq == 0) {
            pp[0] = Mc[r];
            pp[1] = Lc[r];
        }
#pragma unroll
        for (int j = 0; j < NV; j++) {
            const int d = 8 * (np * NV + j) + 2 * tq;
            pp[2 + d] = acc[j][2 * hh];
            pp[3 + d] = acc[j][2 * hh + 1];
        }
    }
}

// Prefill: block (tile of 16 MT / G positions, KV head) owns 16 MT (position, head) rows and walks the
// chunks in order, merging as it goes; the blocks with the last positions (the longest rows) first.
// MT = TC_MT (64 rows) where its shared memory fits the device, else 2 or 1 (hd 256: 165 / 115 / 91 KB;
// a row's arithmetic does not depend on MT: the split kernel runs it with MT = 1, the same bits).
#define TC_MT 4
template <int HD, int MT>
__global__ void __launch_bounds__(TC_THREADS, 1)
    k_attn_tc_prefill(cu_attn_dims a, const float *__restrict__ qg, const __half *__restrict__ kc,
                      const __half *__restrict__ vc, const int *pos0p, int T, float *o) {
    pdl_enter();
    using P = tc_smem<HD, MT>;
    constexpr int NV = tc_nv<HD, MT>::n;
    extern __shared__ __align__(16) uint8_t tc_sm[];
    const int kvh = blockIdx.y, G = a.H / a.Hkv, rtq = P::R / G, pos0 = *pos0p;
    const int t0 = ((int)gridDim.x - 1 - (int)blockIdx.x) * rtq;
    auto row = [&](int r, int &t, int &h, int &nk) {
        t = t0 + r / G;
        h = kvh * G + r % G;
        nk = r < rtq * G && t < T ? pos0 + t + 1 : 0;
    };
    tc_load_q<HD, MT>(qg, a.H, row, tc_sm);
    const size_t kvw = (size_t)a.Hkv * HD;
    const int nmax = pos0 + min(t0 + rtq, T);
    const float *Mc = (const float *)(tc_sm + P::q + P::kv + P::s), *Lc = Mc + P::R;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, mt = w % MT, np = w / MT, g = lane >> 2,
              tq = lane & 3;
    int rt[2], rh[2], nk[2];
    float M[2], L[2], O[NV][4];
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        row(16 * mt + g + 8 * hh, rt[hh], rh[hh], nk[hh]);
        M[hh] = -INFINITY;
        L[hh] = 0.0f;
    }
#pragma unroll
    for (int j = 0; j < NV; j++) O[j][0] = O[j][1] = O[j][2] = O[j][3] = 0.0f;
    for (int p0 = 0; p0 < nmax; p0 += CH) {
        float acc[NV][4];
        tc_chunk<HD, MT>(kc + (size_t)kvh * HD, vc + (size_t)kvh * HD, kvw, p0, nmax, a.scale, tc_sm, acc);
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            if (p0 >= nk[hh]) continue;
            const int r = 16 * mt + g + 8 * hh;
            float fa, fb;
            merge_ab(M[hh], L[hh], Mc[r], Lc[r], fa, fb);
#pragma unroll
            for (int j = 0; j < NV; j++) {
                O[j][2 * hh] = merge_o(O[j][2 * hh], acc[j][2 * hh], fa, fb);
                O[j][2 * hh + 1] = merge_o(O[j][2 * hh + 1], acc[j][2 * hh + 1], fa, fb);
            }
        }
    }
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        if (!nk[hh]) continue;
        const float *gate = qg + ((size_t)rt[hh] * a.H + rh[hh]) * 2 * HD + HD;
        float *out = o + ((size_t)rt[hh] * a.H + rh[hh]) * HD;
#pragma unroll
        for (int j = 0; j < NV; j++) {
            const int d = 8 * (np * NV + j) + 2 * tq;
            out[d] = attn_out(O[j][2 * hh], L[hh], gate[d]);
            out[d + 1] = attn_out(O[j][2 * hh + 1], L[hh], gate[d + 1]);
        }
    }
}

template <int HD, int MT>
static int tc_prefill(const cu_attn_dims *a, const float *qg, const __half *kc, const __half *vc,
                      const int *pos0, int T, float *o, cu_stream s) {
    using P = tc_smem<HD, MT>;
    const int rtq = P::R / (a->H / a->Hkv);
    if (cu_smem(s, k_attn_tc_prefill<HD, MT>, P::bytes, "k_attn_tc_prefill")) return -1;
    cu_go(k_attn_tc_prefill<HD, MT>, dim3((T + rtq - 1) / rtq, a->Hkv), TC_THREADS, P::bytes, s, *a, qg, kc,
          vc, pos0, T, o);
    CU_LAUNCHED("k_attn_tc_prefill");
    return 0;
}

// The split kernel double-buffered (a->split_db) where its two slices fit the device (hd 256: 157 KB),
// else single-buffered (91 KB); the prefill kernel with the most rows per block that fit. The same bits
// either way.
template <int HD>
static int tc_launch(const cu_attn_dims *a, const float *qg, const __half *kc, const __half *vc,
                     const int *pos0, int T, bool split, float *part, float *o, cu_stream s) {
    const cu_dev *d = s.dev;
    if (split) {
        const int nch = (a->n_ctx + CH - 1) / CH;
        if (a->split_db && cu_dev_fits(d, tc_smem<HD, 1, 2>::bytes)) {
            using P = tc_smem<HD, 1, 2>;
            if (cu_smem(s, k_attn_tc_split<HD, 2>, P::bytes, "k_attn_tc_split")) return -1;
            cu_go(k_attn_tc_split<HD, 2>, dim3(nch, a->Hkv, T), TC_THREADS, P::bytes, s, *a, qg, kc, vc, pos0,
                  part, nch);
        } else {
            using P = tc_smem<HD, 1>;
            if (cu_smem(s, k_attn_tc_split<HD, 1>, P::bytes, "k_attn_tc_split")) return -1;
            cu_go(k_attn_tc_split<HD, 1>, dim3(nch, a->Hkv, T), TC_THREADS, P::bytes, s, *a, qg, kc, vc, pos0,
                  part, nch);
        }
        CU_LAUNCHED("k_attn_tc_split");
        if (attn_merge_launch<HD / 32>(a, qg, pos0, part, nch, T, o, s)) return -1;
        return 0;
    }
    if (cu_dev_fits(d, tc_smem<HD, TC_MT>::bytes)) return tc_prefill<HD, TC_MT>(a, qg, kc, vc, pos0, T, o, s);
    if (cu_dev_fits(d, tc_smem<HD, 2>::bytes)) return tc_prefill<HD, 2>(a, qg, kc, vc, pos0, T, o, s);
    return tc_prefill<HD, 1>(a, qg, kc, vc, pos0, T, o, s); /* too large: cu_dev_smem's one-line error */
}

int attn_tc(const cu_attn_dims *a, const float *qg, const void *kc, const void *vc, const int *pos0, int T,
            bool split, float *part, float *o, cu_stream s) {
    if (!a->kv_f16 || a->H / a->Hkv > 16)
        return rl_seterr(
            "CUDA attention on tensor cores: needs the f16 KV cache and at most 16 query heads per KV "
            "head (have %s, %d)",
            a->kv_f16 ? "f16" : "f32", a->H / a->Hkv);
    const __half *k = (const __half *)kc, *v = (const __half *)vc;
    switch (a->hd) {
    case 64: return tc_launch<64>(a, qg, k, v, pos0, T, split, part, o, s);
    case 128: return tc_launch<128>(a, qg, k, v, pos0, T, split, part, o, s);
    default: return tc_launch<256>(a, qg, k, v, pos0, T, split, part, o, s);
    }
}
