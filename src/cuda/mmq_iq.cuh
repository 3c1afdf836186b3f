// mmq_iq.cuh — the IQ types of the integer path (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S,
// IQ4_XS); part of mmq.cuh.
//
// Their CPU vec_dots (quant_iq.c) have the K-quants' shape: integer sums per super-block against the
// Q8_K activations, then one float epilogue per super-block, the terms summed in order:
//   IQ2_XXS  bsum = sum_ib (2 s_ib + 1) * dot(grid * sign, q8) over the 32 values of ib;
//            term = d * yd * bsum; the result is 0.125 * sum of terms
//   IQ2_XS,  bsum = sum_ib (2 s_lo + 1) * dot over values 0..15 + (2 s_hi + 1) * dot over 16..31;
//   IQ2_S    as IQ2_XXS otherwise
//   IQ3_XXS  as IQ2_XXS (one scale per 32 values), the result 0.25 * sum of terms
//   IQ3_S    bsum = sum_ib (2 s_ib + 1) * dot; term = d * yd * bsum, summed as they are
//   IQ4_XS   bsum = sum_ib (s_ib - 32) * dot(kvalues, q8); as IQ3_S otherwise
//   IQ1_S,   sumi1 = sum over 8-value groups ls * dot(grid, q8), grid in {-1, 0, 1}, ls = 2 s + 1;
//   IQ1_M    sumi2 = sum ls * (+-sum(q8)) (the delta sign: IQ1_S per 32 values, IQ1_M per group);
//            term = d * yd * (sumi1 + 0.125 sumi2)
// The A operand of the MMAs / dp4a is 4 signed codes of values k..k+3 of a 32-value sub-block: the
// grid bytes with their signs (IQ2: |code| <= 43, IQ3: <= 62), the codebook values (IQ4_XS: -127..113),
// or for IQ1 the grid value times ls (|code| <= 15), so its first sum needs no per-group weight; its
// second sum uses mmq_iq_m4 (the group's +-ls in all 4 bytes). Grids come from the device tables
// (cu_qtabs, L1-cached loads). Blocks are read at 2-byte alignment (IQ4_XS: 8, its 136-byte blocks).
#pragma once

__host__ __device__ constexpr bool mmq_iq(uint32_t type) {
    return type == T_IQ2_XXS || type == T_IQ2_XS || type == T_IQ2_S || type == T_IQ3_XXS || type == T_IQ3_S ||
           type == T_IQ4_XS || type == T_IQ1_S || type == T_IQ1_M;
}
// The IQ types with a second sum (the IQ1 deltas).
__host__ __device__ constexpr bool mmq_iq1(uint32_t type) { return type == T_IQ1_S || type == T_IQ1_M; }
// The IQ types whose two 16-value halves of a sub-block have their own weight.
__host__ __device__ constexpr bool mmq_iq_halves(uint32_t type) {
    return type == T_IQ2_XS || type == T_IQ2_S;
}

// 4 bits (bit i: negate byte i) as a byte mask: 0xFF in the negated bytes.
__device__ __forceinline__ uint32_t mmq_sign_mask(uint32_t bits4) {
    return ((bits4 * 0x00204081u) & 0x01010101u) * 0xFFu;
}
__device__ __forceinline__ int mmq_apply_signs(uint32_t v, uint32_t m) { return (int)__vsub4(v ^ m, m); }

// IQ1: 4 codes from half `half` of grid entry g (bytes 0xFF / 0 / 1 for -1 / 0 / 1) times the scale ls.
__device__ __forceinline__ int iq1_codes4(uint64_t g, int half, int ls) {
    const uint32_t v = (uint32_t)(g >> (32 * half));
    return mmq_apply_signs((v & 0x01010101u) * (uint32_t)ls, ((v & 0x80808080u) >> 7) * 0xFFu);
}

// Codes of values k..k+3 (k = 0, 4, .., 28) of sub-block s of the super-block at b.
template <int TYPE>
__device__ __forceinline__ int mmq_iq_a4(const cu_qtabs &tb, const uint8_t *b, int s, int k) {
    const int l = k >> 3, half = (k >> 2) & 1;
    if constexpr (TYPE == T_IQ2_XXS) {
        const uint32_t w0 = ld32_2(b + 2 + 8 * s), w1 = ld32_2(b + 6 + 8 * s);
        const uint64_t g = __ldg(tb.iq2xxs + ((w0 >> (8 * l)) & 255));
        const uint32_t sg = __ldg(tb.ksigns + ((w1 >> (7 * l)) & 127));
        return mmq_apply_signs((uint32_t)(g >> (32 * half)), mmq_sign_mask((sg >> (4 * half)) & 15));
    } else if constexpr (TYPE == T_IQ2_XS) {
        const uint32_t e = ld16(b + 2 + 2 * (4 * s + l));
        const uint64_t g = __ldg(tb.iq2xs + (e & 511));
        const uint32_t sg = __ldg(tb.ksigns + (e >> 9));
        return mmq_apply_signs((uint32_t)(g >> (32 * half)), mmq_sign_mask((sg >> (4 * half)) & 15));
    } else if constexpr (TYPE == T_IQ2_S) { // | d | qs[32] | signs[32] | qh[8] | scales[8] |
        const uint64_t g = __ldg(tb.iq2s + (b[2 + 4 * s + l] | (((b[66 + s] >> (2 * l)) & 3) << 8)));
        const uint32_t sg = b[34 + 4 * s + l];
        return mmq_apply_signs((uint32_t)(g >> (32 * half)), mmq_sign_mask((sg >> (4 * half)) & 15));
    } else if constexpr (TYPE == T_IQ3_XXS) { // | d | idx[64] | 8 x (signs, scale) u32 |
        const uint32_t aux = ld32_2(b + 66 + 4 * s);
        const uint32_t g = __ldg(tb.iq3xxs + b[2 + 8 * s + 2 * l + half]);
        const uint32_t sg = __ldg(tb.ksigns + ((aux >> (7 * l)) & 127));
        return mmq_apply_signs(g, mmq_sign_mask((sg >> (4 * half)) & 15));
    } else if constexpr (TYPE == T_IQ3_S) { // | d | qs[64] | qh[8] | signs[32] | scales[4] |
        const int h = 2 * l + half;
        const uint32_t g = __ldg(tb.iq3s + (b[2 + 8 * s + h] | (((b[66 + s] >> h) & 1) << 8)));
        const uint32_t sg = b[74 + 4 * s + l];
        return mmq_apply_signs(g, mmq_sign_mask((sg >> (4 * half)) & 15));
    } else if constexpr (TYPE == T_IQ4_XS) { // | d | scales_h u16 | scales_l[4] | qs[128] |
        // values 0..15 of the sub-block: low nibbles of its 16 bytes, 16..31: the high ones
        const uint32_t q = *(const uint32_t *)(b + 8 + 16 * s + (k & 15)), sh = k >= 16 ? 4 : 0;
        uint32_t v = 0;
#pragma unroll
        for (int i = 0; i < 4; i++)
            v |= (uint32_t)(uint8_t)__ldg(tb.kvalues + ((q >> (8 * i + sh)) & 15)) << (8 * i);
        return (int)v;
    } else if constexpr (TYPE == T_IQ1_S) { // | d | qs[32] | qh[8] u16 |
        const int h = iq1s_qh(b, s);
        return iq1_codes4(__ldg(tb.iq1s + iq1s_idx(b, s, l, h)), half, iq1s_ls(h));
    } else { // IQ1_M
        return iq1_codes4(__ldg(tb.iq1s + (b[4 * s + l] | (iq1m_nib(b, s, l) & 7) << 8)), half,
                          iq1m_ls(b, s, l));
    }
}

// The IQ1 types' second operand at values k..k+3 of sub-block s: -ls (delta sign set) or +ls in
// every byte (IQ1_S: one scale and sign per 32 values; IQ1_M: per 8-value group).
template <int TYPE> __device__ __forceinline__ int mmq_iq_m4(const uint8_t *b, int s, int k) {
    int v;
    if constexpr (TYPE == T_IQ1_S) {
        const int h = iq1s_qh(b, s);
        v = (h & 0x8000) ? -iq1s_ls(h) : iq1s_ls(h);
    } else {
        const int l = k >> 3, ls = iq1m_ls(b, s, l);
        v = (iq1m_nib(b, s, l) & 8) ? -ls : ls;
    }
    return (int)((uint32_t)(v & 255) * 0x01010101u);
}

// Integer weights of sub-block s's two 16-value halves (one scale: both the same; IQ1: folded into
// the codes).
template <int TYPE> __device__ __forceinline__ void mmq_iq_w(const uint8_t *b, int s, int &wlo, int &whi) {
    if constexpr (TYPE == T_IQ2_XXS) {
        wlo = whi = 2 * (int)(ld32_2(b + 6 + 8 * s) >> 28) + 1;
    } else if constexpr (TYPE == T_IQ2_XS || TYPE == T_IQ2_S) {
        const int sc = b[(TYPE == T_IQ2_XS ? 66 : 74) + s];
        wlo = 2 * (sc & 15) + 1;
        whi = 2 * (sc >> 4) + 1;
    } else if constexpr (TYPE == T_IQ3_XXS) {
        wlo = whi = 2 * (int)(ld32_2(b + 66 + 4 * s) >> 28) + 1;
    } else if constexpr (TYPE == T_IQ3_S) {
        wlo = whi = 2 * ((b[106 + s / 2] >> (4 * (s % 2))) & 15) + 1;
    } else if constexpr (TYPE == T_IQ4_XS) {
        wlo = whi = iq4xs_ls(b, s);
    } else {
        wlo = whi = 1;
    }
}

// The super-block scale d.
template <int TYPE> __device__ __forceinline__ float mmq_iq_d(const uint8_t *b) {
    if constexpr (TYPE == T_IQ1_M) {
        const uint32_t s0 = ld16(b + 48), s1 = ld16(b + 50), s2 = ld16(b + 52), s3 = ld16(b + 54);
        return h2f((uint16_t)((s0 >> 12) | ((s1 >> 8) & 0x00f0) | ((s2 >> 4) & 0x0f00) | (s3 & 0xf000)));
    } else {
        return h2f(ld16(b));
    }
}

// The factor applied to the sum of the super-block terms (the CPU's `return 0.125f * sumf`).
template <int TYPE> __device__ __forceinline__ float mmq_out(float acc) {
    if constexpr (TYPE == T_IQ2_XXS || TYPE == T_IQ2_XS || TYPE == T_IQ2_S) return 0.125f * acc;
    else if constexpr (TYPE == T_IQ3_XXS) return 0.25f * acc;
    else return acc;
}
