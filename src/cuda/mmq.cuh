// mmq.cuh — the integer path of the K-quant and IQ matmuls (the types' operands: mmq_k.cuh,
// mmq_iq.cuh; the 32-value types: mmq_b32.cuh); part of matmul.cuh (included there only, after
// mm_launch and mm_tail).
//
// Arithmetic (the same for every shape, so decode == verify == prefill bit for bit):
//   - each activation row is quantised per 256 values to Q8_K exactly as quant_from_float_q8_k
//     (max = the value of largest |x|, the first on ties; iscale = -127 / max; q = min(127,
//     round-half-even(iscale * x)); d = 1 / iscale; an all-zero block gives q = 0, d = 0);
//   - per super-block the integer sums of the CPU's vec_dot (per type: mmq_k.cuh, mmq_iq.cuh) —
//     integers, exact in any order;
//   - the float epilogue of the type's vec_dot per super-block (mmq_term), evaluated without
//     contraction (-fmad=false): (yd*d)*isum - (yd*dmin)*summs, or (d*yd)*isum, ...;
//   - the super-block terms summed in order from 0.0f, as the CPU's `sumf += ...`.
// So every output equals quant_traits.vec_dot(row, q8_K(x)) — the CPU backend's own value —
// bit for bit (test_cuda_ops checks it), whether the integer sums come from dp4a (k_mmq_vec:
// decode, verify and direct expert tiles) or from int8 tensor-core MMAs (k_mmq_mma: prefill
// tiles of 8 or 16 tokens, dense or grouped by expert). Both quantise the activations on the fly,
// once per block into shared memory (no scratch buffer and no extra launch in the decode graph).
#pragma once

#include "cuda/mmq_iq.cuh"

// The weight types of the integer path (matmul.cu asks at run time, mm_launch_type at compile time):
// the K-quants and the 32-value types (mmq_b32.cuh), and with cu_matmul_set_int8(2) the IQ types of
// mmq_iq.cuh.
__host__ __device__ constexpr bool mmq_k(uint32_t type) {
    return type == T_Q2_K || type == T_Q3_K || type == T_Q4_K || type == T_Q5_K || type == T_Q6_K;
}
// The K-quants with 16 scales per super-block (a weight per 16-value half of each 32-value sub-block):
// Q2_K, Q3_K, Q6_K.
__host__ __device__ constexpr bool mmq_k16(uint32_t type) {
    return type == T_Q2_K || type == T_Q3_K || type == T_Q6_K;
}
// The K-quants with mins (a second sum, min * sum of the activation codes, per 32 values for Q4_K /
// Q5_K, per 16 for Q2_K; the CPU's `- dmin * summs`).
__host__ __device__ constexpr bool mmq_kmin(uint32_t type) {
    return type == T_Q2_K || type == T_Q4_K || type == T_Q5_K;
}
// The 32-value block types (mmq_b32.cuh: Q8_0 / Q8_1 activations, one integer dot per block).
__host__ __device__ constexpr bool mmq_b32(uint32_t type) {
    return type == T_Q8_0 || type == T_Q4_0 || type == T_Q4_1 || type == T_Q5_0 || type == T_Q5_1 ||
           type == T_IQ4_NL || type == T_MXFP4;
}
__host__ __device__ constexpr bool mmq_type(uint32_t type) {
    return mmq_k(type) || mmq_iq(type) || mmq_b32(type);
}
#define MMQ_MMA_ROWS 32 // output rows per warp of k_mmq_mma (16 for gate/up: a gate and an up tile)
#define MMQ_MAX_TT 16 // the largest tile of tokens a block quantises (k_mmq_mma with 2 token tiles per warp)
#define MMQ_MAX_SMEM                                                                                         \
    (200u << 10) // the shared memory of that tile must stay below (H100/H200 opt-in: 227 KiB)

// ---- Q8_K quantisation ------------------------------------------------------------------------

// The block's max as one 64-bit key: |x| bits, then 255 - index, then the sign bit. The largest key
// is the CPU's choice (the first-strictly-greater scan: largest |x|, lowest index on ties) in any
// reduction order; NaN gets key 0 (the CPU's `>` never picks it); |x| = 0 for every value means an
// all-zero block.
__device__ __forceinline__ uint64_t q8_key(float v, int i) {
    const uint32_t b = __float_as_uint(v), a = b & 0x7fffffffu;
    return a > 0x7f800000u ? 0ull : (uint64_t)a << 32 | (uint32_t)(255 - i) << 1 | b >> 31;
}
__device__ __forceinline__ uint64_t q8_key4(float4 f, int i, uint64_t m) {
    m = max(m, q8_key(f.x, i));
    m = max(m, q8_key(f.y, i + 1));
    m = max(m, q8_key(f.z, i + 2));
    return max(m, q8_key(f.w, i + 3));
}
__device__ __forceinline__ uint64_t q8_key_xor(uint64_t m, int o) {
    return max(m, __shfl_xor_sync(FULL_MASK, m, o));
}
// iscale of the block (0 for an all-zero block) and the block scale d = 1 / iscale.
__device__ __forceinline__ void q8_scale(uint64_t key, float &is, float &d) {
    const uint32_t a = (uint32_t)(key >> 32);
    if (a == 0) {
        is = 0.0f;
        d = 0.0f;
    } else {
        is = -127.0f / __uint_as_float(a | (uint32_t)(key & 1) << 31);
        d = 1.0f / is;
    }
}
__device__ __forceinline__ int q8_one(float is, float x) {
    const int v = __float2int_rn(__fmul_rn(is, x));
    return v < 127 ? v : 127;
}
__device__ __forceinline__ int q8_pack(float is, float4 f) {
    return (q8_one(is, f.x) & 255) | (q8_one(is, f.y) & 255) << 8 | (q8_one(is, f.z) & 255) << 16 |
           (q8_one(is, f.w) & 255) << 24;
}

// The CPU's float epilogue of one super-block.
template <int TYPE>
__device__ __forceinline__ float mmq_term(float yd, float d, float dmin, int isum, int summs) {
    if constexpr (mmq_iq1(TYPE)) return d * yd * ((float)isum + 0.125f * (float)summs);
    else if constexpr (mmq_kmin(TYPE)) return yd * d * (float)isum - yd * dmin * (float)summs;
    else return d * yd * (float)isum;
}

template <int MT, int NT> __device__ __forceinline__ void mmq_zero(float (&acc)[MT][NT][4]) {
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[mt][nt][i] = 0.0f;
}

// ---- weights: the K-quants' operands ----------------------------------------------------------

#include "cuda/mmq_k.cuh"

// ---- where a warp works (segment, rows, token tile), as mm_body ------------------------------

struct mmq_at {
    int si, r0, start, count;
    const uint8_t *w, *w2; // this tile's expert (or the matrix) for gate (or plain) and up rows
};
// rows: output rows per warp. Returns 0 if the block's tile does not exist (grouped launches: the
// whole block exits), 1 if the tile exists but this warp has no rows (it still helps quantise the
// tile), 2 if the warp has work.
// bx: the block's index along the rows (blockIdx.x; a streaming launch's virtual block).
__device__ __forceinline__ int mmq_locate(const mm_launch &a, int rows, int tt, mmq_at &at, int bx) {
    const int warp = threadIdx.x >> 5;
    int si = 0;
    while (si + 1 < a.nseg && bx >= a.seg_start[si + 1]) si++;
    const cu_seg &sg = a.seg[si];
    int expert = 0;
    if (a.grouped) {
        if ((int)blockIdx.y >= *a.g.n_tiles) return 0;
        const cu_tile t = a.g.tiles[blockIdx.y];
        at.start = t.start;
        at.count = t.count;
        expert = t.expert;
    } else {
        at.start = blockIdx.y * tt;
        at.count = min(tt, a.T - at.start);
    }
    at.si = si;
    at.r0 = (bx - a.seg_start[si]) * (MM_WARPS * rows) + warp * rows;
    at.w = sg.wt ? sg.wt[expert] : sg.w + (size_t)expert * sg.expert_stride;
    at.w2 = sg.wt2 ? sg.wt2[expert] : sg.w2 ? sg.w2 + (size_t)expert * sg.expert_stride : nullptr;
    return at.r0 < sg.n_out ? 2 : 1;
}
__device__ __forceinline__ int mmq_locate(const mm_launch &a, int rows, int tt, mmq_at &at) {
    return mmq_locate(a, rows, tt, at, (int)blockIdx.x);
}

/* 32 int8 values of a quantised input row (two 16-byte loads from shared memory) as 8 packed words
 * for __dp4a. */
__device__ __forceinline__ void mmq_load_q8x32(const uint4 *src, int xq[8]) {
    const uint4 u0 = src[0], u1 = src[1];
    xq[0] = (int)u0.x;
    xq[1] = (int)u0.y;
    xq[2] = (int)u0.z;
    xq[3] = (int)u0.w;
    xq[4] = (int)u1.x;
    xq[5] = (int)u1.y;
    xq[6] = (int)u1.z;
    xq[7] = (int)u1.w;
}

/* The __dp4a sums of a 32-value sub-block's 8 code words a against b: values 0..15 (lo), 16..31 (hi). */
__device__ __forceinline__ void mmq_dot_halves(const int a[8], const int b[8], int &lo, int &hi) {
    lo = hi = 0;
#pragma unroll
    for (int w = 0; w < 4; w++) lo = __dp4a(a[w], b[w], lo);
#pragma unroll
    for (int w = 4; w < 8; w++) hi = __dp4a(a[w], b[w], hi);
}
/* The sums of the 32 int8 values xq over values 0..15 (lo) and 16..31 (hi): Q2_K's min terms. */
__device__ __forceinline__ void mmq_sum_halves(const int xq[8], int &lo, int &hi) {
    const int ones[8] = {0x01010101, 0x01010101, 0x01010101, 0x01010101,
                         0x01010101, 0x01010101, 0x01010101, 0x01010101};
    mmq_dot_halves(xq, ones, lo, hi);
}

// The weight rows a thread reads in the mma tiles: tile mt, half h -> row r0 + g + 8h (+ 16 mt for a
// plain launch; gate/up: tile 0 the gate rows, tile 1 the up rows of the same index). Rows past n_out
// read the last row (their results are never stored).
template <int MT, bool GU>
__device__ __forceinline__ void mmq_weight_rows(const mmq_at &at, const cu_seg &sg, int g,
                                                const uint8_t *(&wr)[MT][2]) {
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int r = min(at.r0 + (GU ? 0 : 16 * mt) + g + 8 * h, sg.n_out - 1);
            wr[mt][h] = (GU && mt ? at.w2 : at.w) + (size_t)r * sg.row_bytes;
        }
}
__device__ __forceinline__ const float *mmq_xrow(const mm_launch &a, int p) {
    return a.x + (size_t)(a.g.pair_in ? a.g.pair_in[p] : p) * a.ldx;
}
__device__ __forceinline__ void mmq_store(const mm_launch &a, const cu_seg &sg, int r, int p, float val) {
    const int orow = a.g.pair_out ? a.g.pair_out[p] : p;
    if (sg.epi == CU_EPI_CONV)
        val = conv_channel(a.conv.w + (size_t)r * a.conv.kw, a.conv.state, a.conv.C, r, a.conv.kw, val);
    sg.y[(size_t)orow * sg.ldy + r] = val;
}

// ---- the block's tokens, quantised once into shared memory ---------------------------------------
//
// Rows of n_in + 16 bytes (the 16 keep the 8 token rows of an MMA B load on distinct banks), then
// the block scales [tt][n_in / 256] as floats. Groups of 8 lanes take one (token, super-block) task
// at a time, lane j its 32 values; the tile's missing tokens (t >= count) repeat token 0.
__host__ __device__ constexpr int mmq_row(int n_in) { return n_in + 16; } // bytes per quantised token row
static inline size_t mmq_smem(int n_in, int tt) {
    return (size_t)tt * mmq_row(n_in) + (size_t)tt * (n_in / 256) * 4;
}
// the block scales of a tile of tt tokens in the shared memory at sm
__device__ __forceinline__ float *mmq_scales_of(uint8_t *sm, int n_in, int tt) {
    return (float *)(sm + (size_t)tt * mmq_row(n_in));
}

// ST launches (k_mmq_vec): the warps' weight slices start after the tile, 16-byte aligned; their size
// per block, 0 if the rows do not allow staging (more than MMQ_ST_MAX bytes: the direct loads).
#define MMQ_ST_MAX (96u << 10)
__host__ __device__ constexpr size_t mmq_vec_st_off(int n_in, int tt) {
    return ((size_t)tt * mmq_row(n_in) + (size_t)tt * (n_in / 256) * 4 + 15) & ~(size_t)15;
}
__host__ __device__ constexpr size_t mmq_vec_st_slice(size_t row_bytes,
                                                      int rows) { // one matrix's rows of a warp
    return ((size_t)rows * row_bytes + 15) & ~(size_t)15;
}
static inline size_t mmq_vec_st_bytes(size_t row_bytes, int rows_per_warp, bool gateup) {
    const size_t b = (size_t)MM_WARPS * mmq_vec_st_slice(row_bytes, rows_per_warp) * (gateup ? 2 : 1);
    return b <= MMQ_ST_MAX ? b : 0;
}

// One Q8_K block (256 values at src, lane j of an 8-lane group its 32 values src[32j..32j+31]) into
// dst (the block's 256 codes; lane j writes 32j..) and *yd (lane 0); with bs, also the sum of its 32
// codes into bs[j] (the Q4_K / Q5_K mins' term in k_mmq_lane). Every lane of the warp calls it
// (the max key meets across the group by shuffles); lanes with on == false load zeros, store nothing.
__device__ __forceinline__ void mmq_q8_group(const float *src, bool on, int j, uint8_t *dst, float *yd,
                                             int *bs = nullptr) {
    float4 xv[8];
    uint64_t key = 0;
#pragma unroll
    for (int w = 0; w < 8; w++) {
        xv[w] = on ? __ldg((const float4 *)(src + 32 * j + 4 * w)) : make_float4(0, 0, 0, 0);
        key = q8_key4(xv[w], 32 * j + 4 * w, key);
    }
    key = q8_key_xor(key, 1);
    key = q8_key_xor(key, 2);
    key = q8_key_xor(key, 4);
    float is, d;
    q8_scale(key, is, d);
    if (on) {
        int q[8];
#pragma unroll
        for (int w = 0; w < 8; w++) q[w] = q8_pack(is, xv[w]);
        uint4 *o = (uint4 *)(dst + 32 * j);
        o[0] = make_uint4((unsigned)q[0], (unsigned)q[1], (unsigned)q[2], (unsigned)q[3]);
        o[1] = make_uint4((unsigned)q[4], (unsigned)q[5], (unsigned)q[6], (unsigned)q[7]);
        if (j == 0) *yd = d;
        if (bs) {
            int sum = 0;
#pragma unroll
            for (int w = 0; w < 8; w++) sum = __dp4a(q[w], 0x01010101, sum);
            bs[j] = sum;
        }
    }
}

__device__ __forceinline__ void mmq_quantise_tile(const mm_launch &a, int start, int count, int tt,
                                                  uint8_t *sm) {
    const int nsb = a.n_in / 256, xs = mmq_row(a.n_in), lane = threadIdx.x & 31;
    float *syd = mmq_scales_of(sm, a.n_in, tt);
    const int ng = blockDim.x >> 3, ntask = tt * nsb; // groups per block; the loop is uniform per warp
    for (int base = ((int)threadIdx.x >> 5) * 4; base < ntask; base += ng) {
        const int task = base + (lane >> 3);
        const bool on = task < ntask;
        const int n = on ? task / nsb : 0, ib = on ? task % nsb : 0;
        mmq_q8_group(mmq_xrow(a, start + (n < count ? n : 0)) + (size_t)256 * ib, on, lane & 7,
                     sm + (size_t)n * xs + 256 * ib, syd + n * nsb + ib);
    }
}

// ---- dp4a: NR output rows per warp (two weight rows each for gate/up), TT tokens ---------------

#define MMQ_VEC_NR 2 // output rows per warp of k_mmq_vec (1 row measured slower and is gone)

// One lane's share of one super-block of its warp's NW weight rows (mmq_vec_body): codes, scales,
// mins and block scales; zeros past the row.
template <int TYPE, int NW> struct mmq_wset {
    int wq[NW][8], sc[NW][2], mn[NW][2], mq[mmq_iq1(TYPE) ? NW : 1][8]; // mn: the two halves' mins
    float dd[NW], dm[NW];
};

// ws = lane j's 32 values (and scales) of super-block ib of the rows wr; zeros when ib >= nsb
template <int TYPE, int NW>
__device__ __forceinline__ void mmq_vec_load_w(mmq_wset<TYPE, NW> &ws, const uint8_t *const (&wr)[NW], int ib,
                                               int nsb, int j, const cu_qtabs &tb) {
    constexpr bool IQ = mmq_iq(TYPE);
    constexpr int BB = qtraits<TYPE>::bytes;
    auto &wq = ws.wq;
    auto &sc = ws.sc;
    auto &mn = ws.mn;
    auto &mq = ws.mq;
    auto &dd = ws.dd;
    auto &dm = ws.dm;
#pragma unroll
    for (int i = 0; i < NW; i++) {
        mn[i][0] = mn[i][1] = 0;
        dd[i] = dm[i] = 0.0f;
        sc[i][0] = sc[i][1] = 0;
#pragma unroll
        for (int w = 0; w < 8; w++) wq[i][w] = 0;
        if (ib < nsb) {
            const uint8_t *b = wr[i] + (size_t)ib * BB;
            if constexpr (IQ) {
#pragma unroll
                for (int w = 0; w < 8; w++) wq[i][w] = mmq_iq_a4<TYPE>(tb, b, j, 4 * w);
                if constexpr (mmq_iq1(TYPE)) { // braces: see mmq_vec_tiles
#pragma unroll
                    for (int w = 0; w < 8; w++) mq[i][w] = mmq_iq_m4<TYPE>(b, j, 4 * w);
                }
                mmq_iq_w<TYPE>(b, j, sc[i][0], sc[i][1]);
                dd[i] = mmq_iq_d<TYPE>(b);
                continue;
            }
            mmq_codes32<TYPE>(b, j, wq[i]);
            if constexpr (mmq_k16(TYPE)) mmq_k16_w<TYPE>(b, j, sc[i], mn[i]);
            else k4_scale_min(b + 4, j, sc[i][0], mn[i][0]);
            mmq_d<TYPE>(b, dd[i], dm[i]);
        }
    }
}

// The warp's NR rows (NW with the up rows) times the quantised tile in sm, cur holding super-block 0
// (mmq_vec_body); the first lane of each row set stores its rows' outputs.
template <int TYPE, int TT, bool GU, int RS, int NW>
__device__ __forceinline__ void mmq_vec_rows(const mm_launch &a, const cu_seg &sg, const mmq_at &at,
                                             const uint8_t *const (&wr)[NW], mmq_wset<TYPE, NW> &cur,
                                             uint8_t *sm, int rb0, int lane, int j, int rs, int qq, int nsb,
                                             int xs) {
    constexpr int NR = MMQ_VEC_NR, GPR = 4 / RS;
    constexpr bool IQ = mmq_iq(TYPE),
                   M2 = mmq_kmin(TYPE) || mmq_iq1(TYPE); // M2: a second sum
    const float *syd = mmq_scales_of(sm, a.n_in, TT);
    float acc[NW][TT];
#pragma unroll
    for (int i = 0; i < NW; i++)
#pragma unroll
        for (int t = 0; t < TT; t++) acc[i][t] = 0.0f;
    for (int ib0 = 0; ib0 < nsb; ib0 += GPR) {
        const int ib = ib0 + qq;
        const bool on = ib < nsb;
        if (ib0) mmq_vec_load_w<TYPE, NW>(cur, wr, ib0 + qq, nsb, j, a.tb);
        const auto &wq = cur.wq;
        const auto &sc = cur.sc;
        const auto &mn = cur.mn;
        const auto &mq = cur.mq;
        const auto &dd = cur.dd;
        const auto &dm = cur.dm;
#pragma unroll
        for (int t = 0; t < TT; t++) {
            int xq[8] = {0, 0, 0, 0, 0, 0, 0, 0}, qlo = 0, qhi = 0; // the halves' code sums
            float yd = 0.0f;
            if (on) {
                const uint4 *src = (const uint4 *)(sm + (size_t)t * xs + 256 * ib + 32 * j);
                mmq_load_q8x32(src, xq);
                yd = syd[t * nsb + ib];
            }
            mmq_sum_halves(xq, qlo, qhi);
#pragma unroll
            for (int i = 0; i < NW; i++) {
                int lo, hi;
                mmq_dot_halves(wq[i], xq, lo, hi);
                int isum = mmq_k16(TYPE) || IQ ? sc[i][0] * lo + sc[i][1] * hi : sc[i][0] * (lo + hi);
                int summs = TYPE == T_Q2_K ? mn[i][0] * qlo + mn[i][1] * qhi : mn[i][0] * (qlo + qhi);
                if constexpr (mmq_iq1(TYPE)) {
                    summs = 0;
#pragma unroll
                    for (int w = 0; w < 8; w++) summs = __dp4a(mq[i][w], xq[w], summs);
                }
#pragma unroll
                for (int o = 1; o < 8; o <<= 1) {
                    isum += __shfl_xor_sync(FULL_MASK, isum, o);
                    if constexpr (M2) summs += __shfl_xor_sync(FULL_MASK, summs, o);
                }
                const float term = mmq_term<TYPE>(yd, dd[i], dm[i], isum, summs);
#pragma unroll
                for (int g = 0; g < GPR; g++) {
                    const float tg = __shfl_sync(FULL_MASK, term, 8 * (rs * GPR + g));
                    if (ib0 + g < nsb) acc[i][t] = acc[i][t] + tg;
                }
            }
        }
    }
    if (RS == 1 ? lane != 0 : j || qq) return; // the first lane of each row set stores its rows
#pragma unroll
    for (int i = 0; i < NR; i++) {
        if (rb0 + i >= sg.n_out) break;
#pragma unroll
        for (int t = 0; t < TT; t++) {
            if (t >= at.count) break;
            const float val = GU ? swiglu(mmq_out<TYPE>(acc[i][t]), mmq_out<TYPE>(acc[GU ? NR + i : i][t]))
                                 : mmq_out<TYPE>(acc[i][t]);
            mmq_store(a, sg, rb0 + i, at.start + t, val);
        }
    }
}

//
// The block quantises its TT tokens into shared memory first (mmq_quantise_tile: once for its 4
// warps and their rows), then lanes 8q .. 8q+7 of a warp take super-block ib0 + q (four per step; with
// RS row sets, k_mmq_vec, lane group q takes super-block ib0 + q % GPR of row set q / GPR),
// lane j of the group its 32 values (sub-block j: Q6_K sub-blocks 2j, 2j+1). Integer sums meet in
// the group (xor 1, 2, 4); the four groups' terms are added in super-block order by every lane.
//
// ST (staged, decode rows only): each warp first copies its NR * RS weight rows (and the up rows) into
// its slice of shared memory after the quantised tile (mmq_vec_st_off) with 16-byte cp.async, all
// at once, then reads them from there: the block's whole share of the matrix is in flight while the
// tile is quantised, with no registers held for it (the direct loads keep one super-block per lane in
// flight and 4 blocks per SM, register-bound, move ~1.1 TB/s on the H200). The same bytes reach the
// same arithmetic, so the same bits (test_cuda_ops / engine / verify on the H200; staged decode is 13-16 %
// faster on 12-layer CF2 and Q4_K_M files). SM (streaming: dense one-token launches, the default;
// RL_CUDA_MMQ_SM=0 off; ST's copies, two slices per warp): a grid of only the blocks that fit on the GPU;
// each quantises its input once and walks the row blocks bx, bx + gridDim.x, ..., copying the next block's
// rows into one slice while multiplying the other's. Each row block's arithmetic is ST's, so the same bits
// (test_cuda_ops / engine on the H200).
template <int TYPE, int TT, bool GU, int RS, bool ST, bool SM>
__device__ __forceinline__ void mmq_vec_body(const mm_launch &a) {
    constexpr int NR = MMQ_VEC_NR, NW = GU ? 2 * NR : NR,
                  GPR = 4 / RS; // GPR: lane groups per row set
    extern __shared__ __align__(16) uint8_t mmq_sm[];
    const int lane = threadIdx.x & 31, q = lane >> 3, j = lane & 7;
    const int rs = RS == 1 ? 0 : q / GPR, qq = RS == 1 ? q : q % GPR; // (RS 1: the plain mapping)
    mmq_at at;
    // PDL (common.cuh): a grouped launch's tiles and expert rows come from the router, so it waits
    // first; a dense launch's rows are weights, copied (ST, SM) or loaded before it waits
    if (!SM && a.grouped) pdl_enter();
    int where = SM ? 2 : mmq_locate(a, NR * RS, TT, at);
    if (!where) return; // the whole block
    const cu_seg *sgp = SM ? a.seg : a.seg + at.si;
    int rb0 = SM ? 0 : at.r0 + rs * NR; // this lane's row set: rows rb0 .. rb0 + NR - 1
    const uint8_t *wr[NW];              // plain: rows rb0 + i; gate/up: gate rows i < NR, up rows NR + i
    // the warp's staged rows (ST, SM): wb bytes of one matrix's rows, wslice with the up rows (gate/up),
    // and the warp's part of shared memory (SM: two slices)
    const size_t wb = ST || SM ? mmq_vec_st_slice(sgp->row_bytes, NR * RS) : 0, wslice = wb * (GU ? 2 : 1);
    uint8_t *const mine =
        mmq_sm + mmq_vec_st_off(a.n_in, TT) + (size_t)(threadIdx.x >> 5) * wslice * (SM ? 2 : 1);
    // copy the rows of the warp at t (where == 2) into the slice at dst, one commit group either way
    auto stage = [&](const mmq_at &t, int w2, uint8_t *dst) {
        if (w2 == 2) {
            const cu_seg &g = a.seg[t.si];
            const int nv = min(NR * RS, g.n_out - t.r0); // rows of the warp (>= 1)
            stage_copy(dst, t.w + (size_t)t.r0 * g.row_bytes, nv * g.row_bytes, lane);
            if constexpr (GU) stage_copy(dst + wb, t.w2 + (size_t)t.r0 * g.row_bytes, nv * g.row_bytes, lane);
        }
        __pipeline_commit();
    };
    // the row pointers of this lane's row set from the rows at base (gate / plain) and base2 (up),
    // whose first row is rbase
    auto point = [&](const uint8_t *base, const uint8_t *base2, int rbase) {
#pragma unroll
        for (int i = 0; i < NR; i++) {
            const size_t off = (size_t)(min(rb0 + i, sgp->n_out - 1) - rbase) * sgp->row_bytes;
            wr[i] = base + off;
            if constexpr (GU) wr[NR + i] = base2 + off;
        }
    };
    if constexpr (!SM) {
        if constexpr (ST) {
            stage(at, where, mine);
            point(mine, mine + wb, at.r0);
        } else {
            point(at.w, at.w2, 0);
        }
    }
    const int nsb = a.n_in / 256, xs = mmq_row(a.n_in);
    mmq_wset<TYPE, NW> cur; // this lane's weights of super-block ib0 + qq
    auto load_w = [&](int ib0) { mmq_vec_load_w<TYPE, NW>(cur, wr, ib0 + qq, nsb, j, a.tb); };
    auto rows = [&]() {
        mmq_vec_rows<TYPE, TT, GU, RS, NW>(a, *sgp, at, wr, cur, mmq_sm, rb0, lane, j, rs, qq, nsb, xs);
    };
    if constexpr (!SM) {
        if (!ST && where == 2) load_w(0); // in flight while the tile is quantised (ST: the copies are)
        if (!a.grouped) pdl_enter();
        mmq_quantise_tile(a, at.start, at.count, TT, mmq_sm);
        if constexpr (ST) __pipeline_wait_prior(0);
        __syncthreads();
        if (where < 2) return;
        if (ST) load_w(0);
        rows();
    } else {
        // streaming (dense one-token launches): the block's virtual blocks bx, bx + gridDim.x, ..., each
        // staged into one of the warp's two slices while the previous one is multiplied; the tile is
        // quantised once for all of them
        const int nvb = a.seg_start[a.nseg];
        mmq_at nx;
        stage(nx, mmq_locate(a, NR * RS, TT, nx, (int)blockIdx.x), mine);
        pdl_enter();
        mmq_quantise_tile(a, 0, 1, TT, mmq_sm);
        __syncthreads();
        int k = 0;
        for (int bx = blockIdx.x; bx < nvb; bx += gridDim.x, k ^= 1) {
            const int bn = bx + (int)gridDim.x;
            stage(nx, bn < nvb ? mmq_locate(a, NR * RS, TT, nx, bn) : 0, mine + (k ^ 1) * wslice);
            __pipeline_wait_prior(1); // this thread's copies of bx
            __syncwarp();             // and the warp's
            where = mmq_locate(a, NR * RS, TT, at, bx);
            if (where == 2) {
                sgp = a.seg + at.si;
                rb0 = at.r0 + rs * NR;
                uint8_t *const buf = mine + k * wslice;
                point(buf, buf + wb, at.r0);
                load_w(0);
                rows();
            }
            __syncwarp(); // every lane is done with the slice before it is staged again
        }
    }
}

// RS: row sets per warp (1 or 4: 4 for rows of 2 / 1 super-blocks, decode rows only; see
// mmq_vec_rs): the warp's four lane groups take GPR = 4 / RS super-blocks of RS sets
// of NR rows each, so short rows (the expert down projections, 512 columns) keep every lane busy and a
// warp has RS NR rows; each row's terms are still added in super-block order, so the same bits (H200,
// 12-layer calibrated decode: CF2 662-665 -> 700-704 tok/s, Q4_K_M 677-689 -> 732-734;
// test_cuda_ops / engine / verify bit-identical).
template <int TYPE, int TT, bool GU, int RS = 1, bool ST = false, bool SM = false>
__global__ void __launch_bounds__(MM_WARPS * 32) k_mmq_vec(mm_launch a) {
    mmq_vec_body<TYPE, TT, GU, RS, ST, SM>(a);
    if constexpr (TT == 1 && !GU)
        if (a.tail.kind != CU_TAIL_NONE) mm_tail(a);
}

// ---- int8 tensor cores: 32 weight rows (a gate and an up tile of 16 for gate/up) x 8 NT tokens -----
//
// mma.sync m16n8k32 (Q6_K: two m16n8k16, one per 16-value sub-block) on s8 operands, s32
// accumulators. Fragments (PTX ISA, integer mma): g = lane / 4, t = lane % 4; A regs 0/2 hold row g,
// 1/3 row g + 8, at k = 4t..4t+3 (regs 0, 1) and 16 + 4t.. (regs 2, 3); B regs 0/1 hold token (column)
// g at the same k; C regs 0..3 are (row g, token 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1).
// The block first quantises its 8 NT tokens' rows into shared memory (mmq_quantise_tile), then every
// warp walks the super-blocks.
__device__ __forceinline__ void mma_k32(int (&c)[4], int a0, int a1, int a2, int a3, int b0, int b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_k16(int (&c)[4], int a0, int a1, int b0) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a0), "r"(a1), "r"(b0));
}

// The MMAs of 32-value sub-block s of a 16-row tile (b0: the super-block of row g, b1: of row g + 8)
// against NT token tiles (bq[nt]: the B fragments of values 4t.. and 16 + 4t.. of the sub-block),
// added to the integer sums of the 4 outputs per tile this thread holds. kw/km: the K-quants'
// weights of the sub-block for rows g (h = 0) and g + 8 (h = 1) — Q4_K/Q5_K: kw[h][0] = sc,
// km[h][0] = km[h][1] = m; Q3_K, Q6_K: kw[h] = the scales of its two 16-value halves; Q2_K: those and
// km[h] their mins; the IQ types read theirs here.
template <int TYPE, int NT>
__device__ __forceinline__ void mmq_sub(const cu_qtabs &tb, const uint8_t *b0, const uint8_t *b1, int s,
                                        int t, const int (&kw)[2][2], const int (&km)[2][2],
                                        const int (&bq)[NT][2], int (&isum)[NT][4], int (&summs)[NT][4]) {
    int a0, a1, a2, a3, w[2][2];
    if constexpr (mmq_iq(TYPE)) {
        a0 = mmq_iq_a4<TYPE>(tb, b0, s, 4 * t);
        a1 = mmq_iq_a4<TYPE>(tb, b1, s, 4 * t);
        a2 = mmq_iq_a4<TYPE>(tb, b0, s, 16 + 4 * t);
        a3 = mmq_iq_a4<TYPE>(tb, b1, s, 16 + 4 * t);
        mmq_iq_w<TYPE>(b0, s, w[0][0], w[0][1]);
        mmq_iq_w<TYPE>(b1, s, w[1][0], w[1][1]);
    } else {
        a0 = mmq_codes4<TYPE>(b0, s, 4 * t);
        a1 = mmq_codes4<TYPE>(b1, s, 4 * t);
        a2 = mmq_codes4<TYPE>(b0, s, 16 + 4 * t);
        a3 = mmq_codes4<TYPE>(b1, s, 16 + 4 * t);
#pragma unroll
        for (int h = 0; h < 2; h++) w[h][0] = kw[h][0], w[h][1] = kw[h][1];
    }
    // the K-quants' mins as the second sum's A fragment: the min of row g's (m0) and g + 8's (m1) first
    // 16 values, then of their second 16 (m2, m3); one min per 32 values (Q4_K, Q5_K): the same twice
    const int m0 = km[0][0] * 0x01010101, m1 = km[1][0] * 0x01010101, m2 = km[0][1] * 0x01010101,
              m3 = km[1][1] * 0x01010101;
    if constexpr (mmq_k16(TYPE) || mmq_iq_halves(TYPE)) { // two 16-value halves, each its own weight
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            int lo[4] = {0, 0, 0, 0}, hi[4] = {0, 0, 0, 0};
            mma_k16(lo, a0, a1, bq[nt][0]);
            mma_k16(hi, a2, a3, bq[nt][1]);
#pragma unroll
            for (int i = 0; i < 4; i++) isum[nt][i] += w[i >> 1][0] * lo[i] + w[i >> 1][1] * hi[i];
            if constexpr (TYPE == T_Q2_K) mma_k32(summs[nt], m0, m1, m2, m3, bq[nt][0], bq[nt][1]);
        }
    } else {
        int d0 = m0, d1 = m1, d2 = m2, d3 = m3; // the second sum's A fragment (Q4_K/Q5_K mins, IQ1 deltas)
        if constexpr (mmq_iq1(TYPE)) {
            d0 = mmq_iq_m4<TYPE>(b0, s, 4 * t);
            d1 = mmq_iq_m4<TYPE>(b1, s, 4 * t);
            d2 = mmq_iq_m4<TYPE>(b0, s, 16 + 4 * t);
            d3 = mmq_iq_m4<TYPE>(b1, s, 16 + 4 * t);
        }
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            int c[4] = {0, 0, 0, 0};
            mma_k32(c, a0, a1, a2, a3, bq[nt][0], bq[nt][1]);
#pragma unroll
            for (int i = 0; i < 4; i++) isum[nt][i] += w[i >> 1][0] * c[i];
            if constexpr (mmq_kmin(TYPE) || mmq_iq1(TYPE))
                mma_k32(summs[nt], d0, d1, d2, d3, bq[nt][0], bq[nt][1]);
        }
    }
}

// A warp's MMA accumulators (2 row tiles x NT token tiles, C-fragment layout) to the outputs: the
// type's final factor, silu(gate) * up for gate/up (tile 0 gate, tile 1 up), rows past n_out and
// tokens past the tile's count skipped.
template <int TYPE, bool GU, int NT>
__device__ __forceinline__ void mmq_store_tile(const mm_launch &a, const cu_seg &sg, const mmq_at &at,
                                               const float (&acc)[2][NT][4]) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int n = 8 * nt + 2 * t + (i & 1);
            if (n >= at.count) continue;
#pragma unroll
            for (int mt = 0; mt < (GU ? 1 : 2); mt++) {
                const int r = at.r0 + 16 * mt + g + 8 * (i >> 1);
                if (r >= sg.n_out) continue;
                const float val = GU ? swiglu(mmq_out<TYPE>(acc[0][nt][i]), mmq_out<TYPE>(acc[1][nt][i]))
                                     : mmq_out<TYPE>(acc[mt][nt][i]);
                mmq_store(a, sg, r, at.start + n, val);
            }
        }
}

// NT token tiles of 8 per warp (dense launches: 2, so each decoded A fragment serves 16 tokens;
// grouped launches: 1, the plan's tiles of CU_TT pairs). The per-output arithmetic does not depend on NT.
template <int TYPE, bool GU, int NT> __global__ void __launch_bounds__(MM_WARPS * 32) k_mmq_mma(mm_launch a) {
    pdl_enter();
    static_assert(mmq_k(TYPE), "k_mmq_mma: the K-quants only (mmq_vec_tiles)");
    constexpr int MT = 2, BB = qtraits<TYPE>::bytes, NSC = mmq_k16(TYPE) ? 16 : 8, TTK = 8 * NT;
    extern __shared__ __align__(16) uint8_t mmq_sm[];
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int nsb = a.n_in / 256, xs = mmq_row(a.n_in);
    const float *syd = mmq_scales_of(mmq_sm, a.n_in, TTK);
    mmq_at at;
    const int where = mmq_locate(a, GU ? 16 : 32, TTK, at);
    if (!where) return; // the whole block
    mmq_quantise_tile(a, at.start, at.count, TTK, mmq_sm);
    __syncthreads();
    if (where < 2) return;
    const cu_seg &sg = a.seg[at.si];
    const uint8_t *wr[MT][2];
    mmq_weight_rows<MT, GU>(at, sg, g, wr);
    float acc[MT][NT][4];
    mmq_zero(acc);
    for (int ib = 0; ib < nsb; ib++) {
        int bq[NT][16];
        float yc[NT][2];
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            const uint8_t *xg = mmq_sm + (size_t)(8 * nt + g) * xs + 4 * t + 256 * ib;
#pragma unroll
            for (int v = 0; v < 16; v++) bq[nt][v] = *(const int *)(xg + 32 * (v >> 1) + 16 * (v & 1));
            yc[nt][0] = syd[(8 * nt + 2 * t) * nsb + ib];
            yc[nt][1] = syd[(8 * nt + 2 * t + 1) * nsb + ib];
        }
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            int sc[2][NSC], mn[2][NSC];
            float dd[2], dm[2];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const uint8_t *b = wr[mt][h] + (size_t)ib * BB;
                mmq_scales<TYPE>(b, sc[h], mn[h]);
                mmq_d<TYPE>(b, dd[h], dm[h]);
            }
            int isum[NT][4], summs[NT][4];
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int i = 0; i < 4; i++) isum[nt][i] = summs[nt][i] = 0;
            const uint8_t *b0 = wr[mt][0] + (size_t)ib * BB, *b1 = wr[mt][1] + (size_t)ib * BB;
#pragma unroll
            for (int s = 0; s < 8; s++) {
                int kw[2][2], km[2][2], bs[NT][2];
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    kw[h][0] = mmq_k16(TYPE) ? sc[h][2 * s] : sc[h][s];
                    kw[h][1] = mmq_k16(TYPE) ? sc[h][2 * s + 1] : sc[h][s];
                    km[h][0] = !mmq_kmin(TYPE) ? 0 : mmq_k16(TYPE) ? mn[h][2 * s] : mn[h][s];
                    km[h][1] = !mmq_kmin(TYPE) ? 0 : mmq_k16(TYPE) ? mn[h][2 * s + 1] : mn[h][s];
                }
#pragma unroll
                for (int nt = 0; nt < NT; nt++) bs[nt][0] = bq[nt][2 * s], bs[nt][1] = bq[nt][2 * s + 1];
                mmq_sub<TYPE, NT>(a.tb, b0, b1, s, t, kw, km, bs, isum, summs);
            }
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int i = 0; i < 4; i++)
                    acc[mt][nt][i] = acc[mt][nt][i] + mmq_term<TYPE>(yc[nt][i & 1], dd[i >> 1], dm[i >> 1],
                                                                     isum[nt][i], summs[nt][i]);
        }
    }
    mmq_store_tile<TYPE, GU>(a, sg, at, acc);
}

// ---- prefill tiles from a once-quantised input, staged through shared memory (k_mmq_tc) ---------
//
// The launch's input rows are first quantised once (k_q8k_rows) into the caller's scratch, in the
// layout mmq_ws: codes [rows][n_in] int8, then the block scales [rows][n_in / 256] float; the same
// mmq_q8_group as the in-block quantisation, so the same bits. Then a block of 4 warps owns 128
// weight rows (gate/up: 64 gate + 64 up rows, 64 outputs) and a tile of 8 NT tokens; per
// super-block the raw weight blocks of its rows and the token codes are copied into shared memory
// with cp.async (16-byte chunks; double-buffered: super-block ib + 1 is in flight while ib is
// multiplied), the Q4_K/Q5_K 6-bit scales are unpacked there once for the block, and each warp runs
// k_mmq_mma's MMAs for its 32 rows x 8 NT tokens out of shared memory. The integer sums and the
// per-super-block float epilogue are k_mmq_mma's, so the outputs are the same bits.
__host__ __device__ constexpr size_t mmq_ws(int n_in, int rows) {
    return (size_t)rows * n_in + (size_t)rows * (n_in / 256) * 4;
}

static __global__ void k_q8k_rows(const float *x, int ldx, int rows, int n_in, uint8_t *ws) {
    pdl_enter();
    const int nsb = n_in / 256, lane = threadIdx.x & 31;
    const int task =
        (int)((blockIdx.x * blockDim.x + threadIdx.x) >> 3); // one (row, super-block) per 8 lanes
    const bool on = task < rows * nsb;
    const int r = on ? task / nsb : 0, ib = on ? task % nsb : 0;
    float *yd = (float *)(ws + (size_t)rows * n_in);
    mmq_q8_group(x + (size_t)r * ldx + 256 * ib, on, lane & 7, ws + (size_t)r * n_in + 256 * ib,
                 yd + (size_t)r * nsb + ib);
}

#define MMQ_TC_ROWS 128    // weight rows a block stages (4 warps x 32)
#define MMQ_TC_DENSE_TT 32 // tokens of a dense tile (grouped: the plan's tile, CU_TT or 2 CU_TT)
// Bytes of a staged weight block: Q4_K/Q5_K as stored (16-byte aligned); the other types (Q6_K 210
// bytes, Q2_K 84, Q3_K 110, IQ1_S 50, IQ2_XXS 66, IQ2_XS 74, IQ2_S 82, IQ3_XXS 98, IQ3_S 110: 2-byte aligned;
// IQ1_M 56, IQ4_XS 136: 8-byte aligned) as the 16-byte-aligned window that holds them, at offset p & 15,
// copying only the chunks that hold a byte of the block: the last one may reach up to 15 bytes past a
// tensor's last block, inside the aligned 16-byte chunk that holds that block's last byte (so never into
// another page). Slot sizes keep the 8 rows of an A-fragment load on distinct banks (row strides of 20, 28,
// 36, 44 or 60 words).
template <int TYPE> struct mmq_tc_t {
    static constexpr int BB = qtraits<TYPE>::bytes;
    static constexpr bool WIN = TYPE != T_Q4_K && TYPE != T_Q5_K;  // staged as an aligned window
    static constexpr int CH = WIN ? (BB + 15 + 15) / 16 : BB / 16; // chunks per row, at most
    static constexpr int SLOT = TYPE == T_Q6_K                                           ? 240
                                : TYPE == T_IQ4_XS                                       ? 176
                                : TYPE == T_IQ3_XXS || TYPE == T_IQ3_S || TYPE == T_Q3_K ? 144
                                : TYPE == T_IQ2_XS || TYPE == T_IQ2_S || TYPE == T_Q2_K  ? 112
                                : WIN                                                    ? 80
                                      : BB; // bytes per staged row
    static constexpr int XS = 272;          // bytes per staged token row
    static constexpr bool K45 = !WIN;
};
template <int TYPE, int NT> __host__ __device__ constexpr int mmq_tc_stage() { // bytes of one stage
    return MMQ_TC_ROWS * mmq_tc_t<TYPE>::SLOT + 8 * NT * (mmq_tc_t<TYPE>::XS + 4) + MMQ_TC_ROWS;
}
template <int TYPE, int NT> __host__ __device__ constexpr int mmq_tc_smem() { // + unpacked scales (Q4_K/Q5_K)
    return 2 * mmq_tc_stage<TYPE, NT>() + (mmq_tc_t<TYPE>::K45 ? MMQ_TC_ROWS * (8 + 2) * 4 : 0);
}

template <int TYPE, bool GU, int NT> __global__ void __launch_bounds__(MM_WARPS * 32) k_mmq_tc(mm_launch a) {
    pdl_enter();
    using P = mmq_tc_t<TYPE>;
    constexpr int MT = 2, BT = 8 * NT, STAGE = mmq_tc_stage<TYPE, NT>();
    extern __shared__ __align__(16) uint8_t mmq_sm[];
    __shared__ int srow[BT];                     // the scratch row of each token of the tile
    __shared__ const uint8_t *wrow[MMQ_TC_ROWS]; // the global start of each staged weight row
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int nsb = a.n_in / 256;
    // the block: segment, first output row, tile of tokens (grouped: the plan's tile); every warp
    // stages, also one past the last output row
    mmq_at at;
    if (!mmq_locate(a, GU ? 16 : 32, BT, at)) return; // the whole block
    const cu_seg &sg = a.seg[at.si];
    const int r0 = at.r0 - warp * (GU ? 16 : 32); // the block's first output row
    if (tid < BT) {
        const int p = at.start + min(tid, at.count - 1);
        srow[tid] = a.grouped && a.g.pair_in ? a.g.pair_in[p] : p;
    }
    {
        const int h = GU ? MMQ_TC_ROWS / 2 : MMQ_TC_ROWS, j = tid; // one staged row per thread
        wrow[j] = (GU && j >= h ? at.w2 : at.w) + (size_t)min(r0 + (j % h), sg.n_out - 1) * sg.row_bytes;
    }
    __syncthreads();
    const uint8_t *xq = a.xq;
    const float *xyd = (const float *)(a.xq + (size_t)a.xq_rows * a.n_in);
    // stage ib into buffer b: weight blocks, token codes, token scales, window offsets (P::WIN)
    auto load = [&](int ib, int b) {
        uint8_t *A = mmq_sm + b * STAGE, *X = A + MMQ_TC_ROWS * P::SLOT;
        float *Y = (float *)(X + BT * P::XS);
        uint8_t *O = (uint8_t *)(Y + BT);
        for (int c = tid; c < MMQ_TC_ROWS * P::CH; c += MM_WARPS * 32) {
            const int j = c / P::CH, k = c % P::CH;
            const uint8_t *p = wrow[j] + (size_t)ib * P::BB;
            if constexpr (P::WIN) {
                const int o = (int)((uintptr_t)p & 15);
                if (k == 0) O[j] = (uint8_t)o;
                if (16 * k >= o + P::BB) continue; // no byte of the block in this chunk
                p = (const uint8_t *)((uintptr_t)p & ~(uintptr_t)15);
            }
            __pipeline_memcpy_async(A + j * P::SLOT + 16 * k, p + 16 * k, 16);
        }
        for (int c = tid; c < BT * 16; c += MM_WARPS * 32) {
            const int n = c >> 4, k = c & 15;
            __pipeline_memcpy_async(X + n * P::XS + 16 * k, xq + (size_t)srow[n] * a.n_in + 256 * ib + 16 * k,
                                    16);
        }
        if (tid < BT) __pipeline_memcpy_async(Y + tid, xyd + (size_t)srow[tid] * nsb + ib, 4);
        __pipeline_commit();
    };
    int *scm = (int *)(mmq_sm + 2 * STAGE); // Q4_K/Q5_K: [8][128] sc | m << 8, then d[128], dmin[128]
    float *sd = (float *)(scm + 8 * MMQ_TC_ROWS), *sdm = sd + MMQ_TC_ROWS;
    // this warp's staged rows: tile mt, half h -> row (plain) 32 warp + 16 mt + g + 8 h; (gate/up)
    // mt 0 gate rows 16 warp + g + 8 h, mt 1 the up rows 64 + the same
    int rr[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++)
            rr[mt][h] = GU ? 64 * mt + 16 * warp + g + 8 * h : 32 * warp + 16 * mt + g + 8 * h;
    float acc[MT][NT][4];
    mmq_zero(acc);
    load(0, 0);
    for (int ib = 0; ib < nsb; ib++) {
        const int b = ib & 1;
        __pipeline_wait_prior(0);
        __syncthreads(); // stage ib is in; every warp is done with ib - 1 (its buffer and the scales)
        if (ib + 1 < nsb) load(ib + 1, b ^ 1);
        const uint8_t *A = mmq_sm + b * STAGE, *X = A + MMQ_TC_ROWS * P::SLOT;
        const float *Y = (const float *)(X + BT * P::XS);
        const uint8_t *O = (const uint8_t *)(Y + BT);
        if constexpr (P::K45) { // unpack the 6-bit scales once for the block
            for (int e = tid; e < 8 * MMQ_TC_ROWS; e += MM_WARPS * 32) {
                const int j = e & (MMQ_TC_ROWS - 1), s = e / MMQ_TC_ROWS;
                int sc, m;
                k4_scale_min(A + j * P::SLOT + 4, s, sc, m);
                scm[s * MMQ_TC_ROWS + j] = sc | m << 8;
            }
            sd[tid] = h2f(ld16(A + tid * P::SLOT));
            sdm[tid] = h2f(ld16(A + tid * P::SLOT + 2));
            __syncthreads();
        }
        // every (mt, h) row's scales of this super-block; then per 32-value slice s the B fragments
        // of the NT token tiles once for both row tiles
        const uint8_t *wb[MT][2];
        float dd[MT][2], dm[MT][2];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                wb[mt][h] = A + rr[mt][h] * P::SLOT + (P::K45 ? 0 : O[rr[mt][h]]);
                if constexpr (P::K45) {
                    dd[mt][h] = sd[rr[mt][h]];
                    dm[mt][h] = sdm[rr[mt][h]];
                } else if constexpr (mmq_iq(TYPE)) {
                    dd[mt][h] = mmq_iq_d<TYPE>(wb[mt][h]);
                    dm[mt][h] = 0.0f;
                } else {
                    mmq_d<TYPE>(wb[mt][h], dd[mt][h], dm[mt][h]);
                }
            }
        int isum[MT][NT][4], summs[MT][NT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int i = 0; i < 4; i++) isum[mt][nt][i] = summs[mt][nt][i] = 0;
#pragma unroll
        for (int s = 0; s < 8; s++) {
            int bq[NT][2];
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                const uint8_t *xg = X + (8 * nt + g) * P::XS + 32 * s + 4 * t;
                bq[nt][0] = *(const int *)xg;
                bq[nt][1] = *(const int *)(xg + 16);
            }
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                int kw[2][2] = {{0, 0}, {0, 0}}, km[2][2] = {{0, 0}, {0, 0}};
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    if constexpr (mmq_k16(TYPE)) { // the scales (and mins) of the slice's two 16-value halves
                        mmq_k16_w<TYPE>(wb[mt][h], s, kw[h], km[h]);
                    } else if constexpr (P::K45) {
                        const int v = scm[s * MMQ_TC_ROWS + rr[mt][h]];
                        kw[h][0] = kw[h][1] = v & 255;
                        km[h][0] = km[h][1] = v >> 8;
                    }
                }
                mmq_sub<TYPE, NT>(a.tb, wb[mt][0], wb[mt][1], s, t, kw, km, bq, isum[mt], summs[mt]);
            }
        }
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int i = 0; i < 4; i++)
                    acc[mt][nt][i] =
                        acc[mt][nt][i] + mmq_term<TYPE>(Y[8 * nt + 2 * t + (i & 1)], dd[mt][i >> 1],
                                                        dm[mt][i >> 1], isum[mt][nt][i], summs[mt][nt][i]);
    }
    mmq_store_tile<TYPE, GU>(a, sg, at, acc);
}
