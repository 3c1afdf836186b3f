// mmq_b32.cuh — the integer path of the 32-value block types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL,
// MXFP4); part of matmul.cuh (included there only, after mmq_launch.cuh).
//
// The CPU (quant.c) computes these types against activations quantised per 32 values to Q8_0 (Q8_1
// for Q4_1 / Q5_1) with one integer dot per block and a float epilogue per block, the terms summed in
// block order from 0.0f. This path does the same arithmetic in every shape:
//   - each activation row is quantised per 32 values exactly as q8_0_from_float / q8_1_from_float
//     (amax = fmaxf over |x| from 0; d = amax / 127; id = 1 / d, or 0 for d == 0; q =
//     roundf(x * id), halves away from zero; the scales stored as fp16: d, and for Q8_1 s =
//     fp16((float)sum(q) * d) with the float d, not its fp16 value);
//   - per block the integer sum of the CPU's vec_dot (sumi: codes - 8 for Q4_0, - 16 for Q5_0, the
//     raw 4 / 5-bit codes for Q4_1 / Q5_1, the int8 codes for Q8_0, the codebook values for IQ4_NL and
//     MXFP4) — an integer, exact in any order;
//   - the CPU's float epilogue of that block, each operation rounded on its own (__fmul_rn / __fadd_rn,
//     and the file is built with -fmad=false anyway): (float)sumi * (d_w * d_a), plus m_w * s_a for
//     Q4_1 / Q5_1; MXFP4's d_w is its E8M0 scale halved (quant_e8m0_half);
//   - the block terms added in block order from 0.0f, as the CPU's `sumf += ...`.
// So every output equals quant_traits.vec_dot(row, q8_0(x) or q8_1(x)) bit for bit, whether the
// integer sums come from dp4a (k_mmqb_vec: decode, verify rows, small batches) or from int8
// tensor-core MMAs (k_mmqb_mma: prefill tiles of 8 or 16 tokens, dense or grouped by expert; one
// m16n8k32 MMA is exactly one 32-value block). Both quantise their tokens once per block into shared
// memory with the same function (b32_quantise_tile), which cu_quantise_q8 (the tests' check of the
// quantiser against the CPU's from_float, byte for byte: k_q8b_tile) runs too.
#pragma once

__host__ __device__ constexpr bool b32_q81(uint32_t type) { return type == T_Q4_1 || type == T_Q5_1; }

// ---- Q8_0 / Q8_1 quantisation --------------------------------------------------------------------

// The CPU's (int8_t)roundf(v): nearest integer, halves away from zero (truncation, then the exact
// fraction v - trunc(v) decides). Out of int range (+-inf where 1 / d overflows, NaN) x86's truncating
// conversion gives INT_MIN, so code 0: the same here.
__device__ __forceinline__ int b32_round(float v) {
    const float r = truncf(v), f = __fsub_rn(v, r);
    const float o = fabsf(f) >= 0.5f ? __fadd_rn(r, copysignf(1.0f, v)) : r;
    return fabsf(o) < 2147483648.0f ? __float2int_rz(o) : (int)0x80000000u;
}
// v rounded to fp16 (round to nearest even, as rl_fp32_to_fp16), its bits into h, its value returned.
__device__ __forceinline__ float b32_half(float v, uint16_t &h) {
    h = __half_as_ushort(__float2half_rn(v));
    return h2f(h);
}

// One block of 32 values, lane j (0..7) of an 8-lane group holding values 4j..4j+3 in x: returns the
// lane's 4 codes (bytes, value 4j in the low one); d (the float scale) and sum (the 32 codes' sum) in
// every lane of the group. Every lane of the warp calls it (the group meets by shuffles).
__device__ __forceinline__ int b32_q8_group(float4 x, float &d, int &sum) {
    float amax = fmaxf(fmaxf(fmaxf(fmaxf(0.0f, fabsf(x.x)), fabsf(x.y)), fabsf(x.z)), fabsf(x.w));
    amax = fmaxf(amax, __shfl_xor_sync(FULL_MASK, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(FULL_MASK, amax, 2));
    amax = fmaxf(amax, __shfl_xor_sync(FULL_MASK, amax, 4));
    d = __fdiv_rn(amax, 127.0f);
    const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
    const int q0 = b32_round(__fmul_rn(x.x, id)), q1 = b32_round(__fmul_rn(x.y, id)),
              q2 = b32_round(__fmul_rn(x.z, id)), q3 = b32_round(__fmul_rn(x.w, id));
    // the CPU sums the stored int8 codes: the same values (|q| <= 127 for finite inputs)
    sum = (int)(int8_t)q0 + (int)(int8_t)q1 + (int)(int8_t)q2 + (int)(int8_t)q3;
    sum += __shfl_xor_sync(FULL_MASK, sum, 1);
    sum += __shfl_xor_sync(FULL_MASK, sum, 2);
    sum += __shfl_xor_sync(FULL_MASK, sum, 4);
    return (q0 & 255) | (q1 & 255) << 8 | (q2 & 255) << 16 | (q3 & 255) << 24;
}

// The tile of TT tokens in shared memory: codes [tt][n_in + 16] (the 16 spread the 8 token rows of an
// MMA B load over the banks), then d_a [tt][n_in / 32] and, for Q8_1, s_a [tt][n_in / 32], as floats
// (the fp16 values). mmqb_tile: its bytes, 16-byte aligned.
__host__ __device__ constexpr int mmqb_row(int n_in) { return n_in + 16; }
__host__ __device__ constexpr size_t mmqb_tile(uint32_t type, int n_in, int tt) {
    return ((size_t)tt * mmqb_row(n_in) + (size_t)tt * (n_in / 32) * 4 * (b32_q81(type) ? 2 : 1) + 15) &
           ~(size_t)15;
}

// The block's tokens start .. start + count - 1 (the missing ones of a tile repeat token 0), quantised
// into the tile at sm: groups of 8 lanes take one (token, block) task at a time.
template <bool S>
__device__ __forceinline__ void b32_quantise_tile(const mm_launch &a, int start, int count, int tt,
                                                  uint8_t *sm) {
    const int nb = a.n_in / 32, xs = mmqb_row(a.n_in), lane = threadIdx.x & 31, j = lane & 7;
    float *dy = (float *)(sm + (size_t)tt * xs), *sy = dy + tt * nb;
    const int ng = blockDim.x >> 3, ntask = tt * nb; // groups per block; the loop is uniform per warp
    for (int base = ((int)threadIdx.x >> 5) * 4; base < ntask; base += ng) {
        const int task = base + (lane >> 3);
        const bool on = task < ntask;
        const int n = on ? task / nb : 0, ib = on ? task % nb : 0;
        const float *src = mmq_xrow(a, start + (n < count ? n : 0)) + 32 * ib + 4 * j;
        const float4 x = on ? __ldg((const float4 *)src) : make_float4(0, 0, 0, 0);
        float d;
        int sum;
        const int q = b32_q8_group(x, d, sum);
        if (on) {
            *(int *)(sm + (size_t)n * xs + 32 * ib + 4 * j) = q;
            if (j == 0) {
                uint16_t h;
                dy[n * nb + ib] = b32_half(d, h);
                if constexpr (S) sy[n * nb + ib] = b32_half(__fmul_rn((float)sum, d), h);
            }
        }
    }
}

// The tests' check of the quantiser the matmuls run (cu_quantise_q8): rows start.. of a.x (stride
// a.ldx, a.n_in values each) through b32_quantise_tile, the same function, row addressing, task mapping
// and block shape (MM_WARPS warps) as k_mmqb_vec / k_mmqb_mma, in tiles of 8 tokens; then the tile copied
// out in the CPU's block layout, Q8_0 | d | qs[32] | or Q8_1 | d | s | qs[32] |, rows of n_in / 32
// blocks (d and s are fp16 values in the tile, so their bits come back exactly).
template <bool S> __global__ void __launch_bounds__(MM_WARPS * 32) k_q8b_tile(mm_launch a, uint8_t *dst) {
    pdl_enter();
    constexpr int TT = 8, HB = S ? 4 : 2;
    extern __shared__ __align__(16) uint8_t mmq_sm[];
    const int start = (int)blockIdx.y * TT, count = min(TT, a.T - start), nb = a.n_in / 32,
              xs = mmqb_row(a.n_in);
    b32_quantise_tile<S>(a, start, count, TT, mmq_sm);
    __syncthreads();
    const float *dy = (const float *)(mmq_sm + (size_t)TT * xs), *sy = dy + TT * nb;
    for (int k = threadIdx.x; k < count * nb; k += blockDim.x) {
        const int n = k / nb, ib = k % nb;
        uint8_t *b = dst + ((size_t)(start + n) * nb + ib) * (32 + HB);
        // d (and s) as 16-bit stores: blocks are 34 / 36 bytes from a cudaMalloc'd base, so 2-byte
        // aligned. Not `b[0] = (uint8_t)hd`: nvcc 13 (sm_90, -O3) lowered that byte of the half's bits to
        // F2I.U8.F16, the half's value converted to an integer (0 for every |d| < 1), which is what the
        // H100 run saw (every low byte 0).
        *(uint16_t *)b = __half_as_ushort(__float2half_rn(dy[n * nb + ib]));
        if constexpr (S) *(uint16_t *)(b + 2) = __half_as_ushort(__float2half_rn(sy[n * nb + ib]));
        const uint8_t *q = mmq_sm + (size_t)n * xs + 32 * ib;
        for (int e = 0; e < 32; e++) b[HB + e] = q[e];
    }
}

// ---- weights -----------------------------------------------------------------------------------------

// IQ4_NL / MXFP4: the 16 int8 values of the codebook (the device table) as 4 words.
template <int TYPE> __device__ __forceinline__ void b32_tab(const cu_qtabs &tb, uint32_t (&tab)[4]) {
    if constexpr (TYPE == T_IQ4_NL || TYPE == T_MXFP4) {
        const uint4 v = __ldg((const uint4 *)(TYPE == T_IQ4_NL ? tb.kvalues : tb.kvalues_mx)); // 256-aligned
        tab[0] = v.x;
        tab[1] = v.y;
        tab[2] = v.z;
        tab[3] = v.w;
    } else {
        tab[0] = tab[1] = tab[2] = tab[3] = 0;
    }
}
// 4 codes (a nibble in each byte of q) through the codebook: byte_perm picks each byte from entries
// 0..7 and from 8..15 by the nibble's low 3 bits, its bit 3 chooses between the two.
__device__ __forceinline__ int b32_lut4(uint32_t q, const uint32_t (&tab)[4]) {
    const uint32_t sel = (q & 7u) | ((q >> 4) & 0x70u) | ((q >> 8) & 0x700u) | ((q >> 12) & 0x7000u);
    const uint32_t lo = __byte_perm(tab[0], tab[1], sel), hi = __byte_perm(tab[2], tab[3], sel);
    const uint32_t m = ((q >> 3) & 0x01010101u) * 0xFFu;
    return (int)((lo & ~m) | (hi & m));
}
// bit i of the 4-bit v into bit 0 of byte i
__device__ __forceinline__ uint32_t b32_bits4(uint32_t v) { return (v * 0x00204081u) & 0x01010101u; }

// The codes of values 4t..4t+3 (lo) and 16+4t..16+4t+3 (hi) of the block at b (t = 0..3; blocks are
// 2-byte aligned, MXFP4's not at all) as signed bytes: the integers the type's vec_dot multiplies by
// the Q8 codes.
template <int TYPE>
__device__ __forceinline__ void b32_codes(const uint8_t *b, int t, const uint32_t (&tab)[4], int &lo,
                                          int &hi) {
    if constexpr (TYPE == T_Q8_0) {
        lo = (int)ld32_2(b + 2 + 4 * t);
        hi = (int)ld32_2(b + 18 + 4 * t);
    } else if constexpr (TYPE == T_MXFP4) {
        const uint8_t *p = b + 1 + 4 * t;
        const uint32_t q = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        lo = b32_lut4(q & 0x0F0F0F0Fu, tab);
        hi = b32_lut4((q >> 4) & 0x0F0F0F0Fu, tab);
    } else {
        constexpr int QS = TYPE == T_Q4_0 || TYPE == T_IQ4_NL ? 2
                           : TYPE == T_Q4_1                   ? 4
                           : TYPE == T_Q5_0                   ? 6
                                                              : 8;
        const uint32_t q = ld32_2(b + QS + 4 * t);
        uint32_t l = q & 0x0F0F0F0Fu, h = (q >> 4) & 0x0F0F0F0Fu;
        if constexpr (TYPE == T_Q5_0 || TYPE == T_Q5_1) { // bit j of the LE u32 qh: bit 4 of value j
            const uint32_t qh = ld32_2(b + (TYPE == T_Q5_0 ? 2 : 4));
            l |= b32_bits4((qh >> (4 * t)) & 15u) << 4;
            h |= b32_bits4((qh >> (16 + 4 * t)) & 15u) << 4;
        }
        if constexpr (TYPE == T_IQ4_NL) {
            lo = b32_lut4(l, tab);
            hi = b32_lut4(h, tab);
        } else if constexpr (TYPE == T_Q4_0) {
            lo = (int)__vsub4(l, 0x08080808u);
            hi = (int)__vsub4(h, 0x08080808u);
        } else if constexpr (TYPE == T_Q5_0) {
            lo = (int)__vsub4(l, 0x10101010u);
            hi = (int)__vsub4(h, 0x10101010u);
        } else { // Q4_1, Q5_1: the codes themselves (0..31)
            lo = (int)l;
            hi = (int)h;
        }
    }
}
// The block's scale d_w and (Q4_1 / Q5_1) min m_w.
template <int TYPE> __device__ __forceinline__ float b32_d(const uint8_t *b) {
    if constexpr (TYPE == T_MXFP4) return e8m0_half(b[0]);
    else return h2f(ld16(b));
}
template <int TYPE> __device__ __forceinline__ float b32_m(const uint8_t *b) {
    if constexpr (b32_q81(TYPE)) return h2f(ld16(b + 2));
    else return 0.0f;
}
// The CPU's float epilogue of one block (dx, mx: the weight block's; dy, sy: the activation block's).
template <int TYPE>
__device__ __forceinline__ float b32_term(int sumi, float dx, float mx, float dy, float sy) {
    const float t = __fmul_rn((float)sumi, __fmul_rn(dx, dy));
    if constexpr (b32_q81(TYPE)) return __fadd_rn(t, __fmul_rn(mx, sy));
    else return t;
}

// ---- dp4a: MMQB_NR output rows per warp (two weight rows each for gate/up), TT tokens ----------------
//
// The block quantises its TT tokens (b32_quantise_tile), then each warp walks its rows' blocks 32 at a
// time, lane l taking block c + l of every row: its codes, scales and, per token, the dp4a integer sum
// and the block's term, written to the warp's [NW * TT][33] float slice of shared memory. Lane q < NW *
// TT then adds the 32 terms of output q (row q / TT, token q % TT) in block order to its accumulator.
#define MMQB_NR 2
template <int TYPE, int TT, bool GU> __host__ __device__ constexpr int mmqb_red_floats() {
    return (GU ? 2 * MMQB_NR : MMQB_NR) * TT * 33; // per warp
}
template <int TYPE, int TT, bool GU> static inline size_t mmqb_vec_smem(int n_in) {
    return mmqb_tile(TYPE, n_in, TT) + (size_t)MM_WARPS * mmqb_red_floats<TYPE, TT, GU>() * 4;
}

template <int TYPE, int TT, bool GU> __device__ __forceinline__ void mmqb_vec_body(const mm_launch &a) {
    constexpr int NR = MMQB_NR, NW = GU ? 2 * NR : NR, BB = qtraits<TYPE>::bytes, NQ = NW * TT;
    static_assert(NQ <= 32, "one output per lane");
    constexpr bool S = b32_q81(TYPE);
    extern __shared__ __align__(16) uint8_t mmq_sm[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nb = a.n_in / 32, xs = mmqb_row(a.n_in);
    mmq_at at;
    const int where = mmq_locate(a, NR, TT, at);
    if (!where) return; // the whole block
    uint32_t tab[4];
    b32_tab<TYPE>(a.tb, tab);
    b32_quantise_tile<S>(a, at.start, at.count, TT, mmq_sm);
    __syncthreads();
    if (where < 2) return;
    const cu_seg &sg = a.seg[at.si];
    const float *dy = (const float *)(mmq_sm + (size_t)TT * xs), *sy = dy + TT * nb;
    float *red = (float *)(mmq_sm + mmqb_tile(TYPE, a.n_in, TT)) + warp * mmqb_red_floats<TYPE, TT, GU>();
    const uint8_t *wr[NW]; // plain: rows r0 + i; gate/up: gate rows i < NR, up rows NR + i
#pragma unroll
    for (int i = 0; i < NR; i++) {
        const size_t off = (size_t)min(at.r0 + i, sg.n_out - 1) * sg.row_bytes;
        wr[i] = at.w + off;
        if constexpr (GU) wr[NR + i] = at.w2 + off;
    }
    float acc = 0.0f; // lane q < NQ: output q
    for (int c = 0; c < nb; c += 32) {
        const int ib = c + lane;
        const bool on = ib < nb;
        int wq[NW][8];
        float dx[NW], mx[NW];
#pragma unroll
        for (int i = 0; i < NW; i++) {
            dx[i] = mx[i] = 0.0f;
#pragma unroll
            for (int w = 0; w < 8; w++) wq[i][w] = 0;
            if (on) {
                const uint8_t *b = wr[i] + (size_t)ib * BB;
#pragma unroll
                for (int t4 = 0; t4 < 4; t4++) b32_codes<TYPE>(b, t4, tab, wq[i][t4], wq[i][4 + t4]);
                dx[i] = b32_d<TYPE>(b);
                mx[i] = b32_m<TYPE>(b);
            }
        }
#pragma unroll
        for (int t = 0; t < TT; t++) {
            int xq[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            float yd = 0.0f, ys = 0.0f;
            if (on) {
                const uint4 *src = (const uint4 *)(mmq_sm + (size_t)t * xs + 32 * ib);
                mmq_load_q8x32(src, xq);
                yd = dy[t * nb + ib];
                if constexpr (S) ys = sy[t * nb + ib];
            }
#pragma unroll
            for (int i = 0; i < NW; i++) {
                int sumi = 0;
#pragma unroll
                for (int w = 0; w < 8; w++) sumi = __dp4a(wq[i][w], xq[w], sumi);
                red[(i * TT + t) * 33 + lane] = b32_term<TYPE>(sumi, dx[i], mx[i], yd, ys);
            }
        }
        __syncwarp();
        if (lane < NQ) {
            const int n = min(32, nb - c);
            for (int k = 0; k < n; k++) acc = __fadd_rn(acc, red[lane * 33 + k]);
        }
        __syncwarp(); // the next chunk overwrites the slice
    }
    // lane q = i * TT + t holds row i, token t; gate/up: the up row NR + i is lane q + NR * TT
    const float up = __shfl_sync(FULL_MASK, acc, (lane + NR * TT) & 31);
    if (lane >= NR * TT) return;
    const int i = lane / TT, t = lane % TT, r = at.r0 + i;
    if (r >= sg.n_out || t >= at.count) return;
    mmq_store(a, sg, r, at.start + t, GU ? swiglu(acc, up) : acc);
}

template <int TYPE, int TT, bool GU>
__global__ void __launch_bounds__(MM_WARPS * 32) k_mmqb_vec(mm_launch a) {
    pdl_enter();
    mmqb_vec_body<TYPE, TT, GU>(a);
    if constexpr (TT == 1 && !GU)
        if (a.tail.kind != CU_TAIL_NONE) mm_tail(a);
}

// ---- int8 tensor cores: 32 weight rows (a gate and an up tile of 16 for gate/up) x 8 NT tokens -----
//
// k_mmq_mma's fragments (mma_k32; g = lane / 4, t = lane % 4): per block, the A registers are the codes
// of rows g and g + 8 at values 4t.. and 16 + 4t.. (b32_codes' lo and hi), the B registers the token's
// codes there; the MMA's s32 result for (row, token) is the block's sumi, turned into its term and
// added to the output's accumulator in block order.
template <int TYPE, bool GU, int NT>
__global__ void __launch_bounds__(MM_WARPS * 32) k_mmqb_mma(mm_launch a) {
    pdl_enter();
    constexpr int MT = 2, BB = qtraits<TYPE>::bytes, TTK = 8 * NT;
    constexpr bool S = b32_q81(TYPE);
    extern __shared__ __align__(16) uint8_t mmq_sm[];
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int nb = a.n_in / 32, xs = mmqb_row(a.n_in);
    mmq_at at;
    const int where = mmq_locate(a, GU ? 16 : 32, TTK, at);
    if (!where) return; // the whole block
    uint32_t tab[4];
    b32_tab<TYPE>(a.tb, tab);
    b32_quantise_tile<S>(a, at.start, at.count, TTK, mmq_sm);
    __syncthreads();
    if (where < 2) return;
    const cu_seg &sg = a.seg[at.si];
    const float *dy = (const float *)(mmq_sm + (size_t)TTK * xs), *sy = dy + TTK * nb;
    const uint8_t *wr[MT][2];
    mmq_weight_rows<MT, GU>(at, sg, g, wr);
    float acc[MT][NT][4];
    mmq_zero(acc);
    for (int ib = 0; ib < nb; ib++) {
        int bq[NT][2];
        float yd[NT][2], ys[NT][2];
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            const uint8_t *xg = mmq_sm + (size_t)(8 * nt + g) * xs + 32 * ib + 4 * t;
            bq[nt][0] = *(const int *)xg;
            bq[nt][1] = *(const int *)(xg + 16);
#pragma unroll
            for (int e = 0; e < 2; e++) {
                yd[nt][e] = dy[(8 * nt + 2 * t + e) * nb + ib];
                ys[nt][e] = S ? sy[(8 * nt + 2 * t + e) * nb + ib] : 0.0f;
            }
        }
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            int a0, a1, a2, a3;
            const uint8_t *b0 = wr[mt][0] + (size_t)ib * BB, *b1 = wr[mt][1] + (size_t)ib * BB;
            b32_codes<TYPE>(b0, t, tab, a0, a2);
            b32_codes<TYPE>(b1, t, tab, a1, a3);
            const float dx[2] = {b32_d<TYPE>(b0), b32_d<TYPE>(b1)},
                        mx[2] = {b32_m<TYPE>(b0), b32_m<TYPE>(b1)};
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                int c[4] = {0, 0, 0, 0};
                mma_k32(c, a0, a1, a2, a3, bq[nt][0], bq[nt][1]);
#pragma unroll
                for (int i = 0; i < 4; i++)
                    acc[mt][nt][i] = __fadd_rn(acc[mt][nt][i], b32_term<TYPE>(c[i], dx[i >> 1], mx[i >> 1],
                                                                              yd[nt][i & 1], ys[nt][i & 1]));
            }
        }
    }
    mmq_store_tile<TYPE, GU>(a, sg, at, acc);
}

// ---- launch ------------------------------------------------------------------------------------------

// Rows per block: the dp4a kernel (one-token launches, small batches) or the MMA tiles.
static inline int mmqb_rows_per_block(bool gateup, int tt, bool small) {
    return tt == 1 || small ? MM_WARPS * MMQB_NR : MM_WARPS * (gateup ? MMQ_MMA_ROWS / 2 : MMQ_MMA_ROWS);
}
// Whether a matrix of `type` with n_in columns takes the integer path on d: its largest tile (16
// tokens) within MMQ_MAX_SMEM and every launch shape of the matrix within the device's shared memory
// (a condition on the matrix, not on T: every shape of a matrix takes the same path).
static inline bool mmqb_ok(const cu_dev *d, uint32_t type, int n_in) {
    const size_t vec = mmqb_tile(type, n_in, 8) + (size_t)MM_WARPS * 4 * 33 * 4 * 8; // k_mmqb_vec, TT 8, GU
    return n_in % 32 == 0 && mmqb_tile(type, n_in, MMQ_MAX_TT) <= MMQ_MAX_SMEM && cu_dev_fits(d, vec) &&
           cu_dev_fits(d, mmqb_tile(type, n_in, 8));
}
template <int TYPE, int TT> static int mmqb_go_vec(dim3 grid, const mm_launch &L, bool gateup) {
    if (gateup)
        return mmq_go(k_mmqb_vec<TYPE, TT, true>, grid, L, mmqb_vec_smem<TYPE, TT, true>(L.n_in),
                      "k_mmqb_vec");
    return mmq_go(k_mmqb_vec<TYPE, TT, false>, grid, L, mmqb_vec_smem<TYPE, TT, false>(L.n_in), "k_mmqb_vec");
}
template <int TYPE, int NT> static int mmqb_go_mma(dim3 grid, const mm_launch &L, bool gateup) {
    const size_t sm = mmqb_tile(TYPE, L.n_in, 8 * NT);
    if (gateup) return mmq_go(k_mmqb_mma<TYPE, true, NT>, grid, L, sm, "k_mmqb_mma");
    return mmq_go(k_mmqb_mma<TYPE, false, NT>, grid, L, sm, "k_mmqb_mma");
}
template <int TYPE> static int mmqb_launch_type(const mm_launch &L, bool gateup, int tt) {
    dim3 grid(L.seg_start[L.nseg], L.grouped ? L.g.max_tiles : (L.T + tt - 1) / tt);
    int rc;
    if (tt == 1) rc = mmqb_go_vec<TYPE, 1>(grid, L, gateup);
    else if (L.small && tt == 2) rc = mmqb_go_vec<TYPE, 2>(grid, L, gateup);
    else if (L.small && tt == 4) rc = mmqb_go_vec<TYPE, 4>(grid, L, gateup);
    else if (L.small) rc = mmqb_go_vec<TYPE, 8>(grid, L, gateup);
    else if (!L.grouped && L.s.dev->tune.mmq_nt != 1 && cu_dev_fits(L.s.dev, mmqb_tile(TYPE, L.n_in, 16))) {
        grid.y = (L.T + 15) / 16; // dense prefill: two token tiles per warp (RL_CUDA_MMQ_NT, as k_mmq_mma)
        rc = mmqb_go_mma<TYPE, 2>(grid, L, gateup);
    } else {
        rc = mmqb_go_mma<TYPE, 1>(grid, L, gateup);
    }
    if (rc) return rc;
    CU_LAUNCHED("k_mmqb");
    return 0;
}
