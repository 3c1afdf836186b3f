// mmq_iq.cuh — the IQ types of the integer path (IQ2_XXS, IQ2_XS, IQ1_M); part of mmq.cuh.
//
// Their CPU vec_dots (quant_iq.c) have the K-quants' shape: integer sums per super-block against the
// Q8_K activations, then one float epilogue per super-block, the terms summed in order:
//   IQ2_XXS  bsum = sum_ib (2 s_ib + 1) * dot(grid * sign, q8) over the 32 values of ib;
//            term = d * yd * bsum; the result is 0.125 * sum of terms
//   IQ2_XS   bsum = sum_ib (2 s_lo + 1) * dot over values 0..15 + (2 s_hi + 1) * dot over 16..31;
//            as IQ2_XXS otherwise
//   IQ1_M    sumi1 = sum over 8-value groups ls * dot(grid, q8), grid in {-1, 0, 1}, ls = 2 s + 1;
//            sumi2 = sum ls * (+-sum(q8)) (the group's delta sign); term = d * yd * (sumi1 + 0.125 sumi2)
// The A operand of the MMAs / dp4a is 4 signed codes of values k..k+3 of a 32-value sub-block: the
// grid bytes with their signs (IQ2: |code| <= 43), or for IQ1_M the grid value times ls (|code| <=
// 15), so its first sum needs no per-group weight; its second sum uses mmq_iq_m4 (the group's
// +-ls in all 4 bytes). Grids come from the device tables (cu_qtabs, L1-cached loads).
#pragma once

__host__ __device__ constexpr bool mmq_iq(uint32_t type) {
    return type == T_IQ2_XXS || type == T_IQ2_XS || type == T_IQ1_M;
}

// 4 bits (bit i: negate byte i) as a byte mask: 0xFF in the negated bytes.
__device__ __forceinline__ uint32_t mmq_sign_mask(uint32_t bits4) {
    return ((bits4 * 0x00204081u) & 0x01010101u) * 0xFFu;
}
__device__ __forceinline__ int mmq_apply_signs(uint32_t v, uint32_t m) { return (int)__vsub4(v ^ m, m); }

// IQ1_M: the 4-bit nibble of group l of 32-value block ib (index bits 10..8, delta sign) and the
// group's odd scale 2 s + 1.
__device__ __forceinline__ int iq1m_nib(const uint8_t *b, int ib, int l) {
    return (b[32 + 2 * ib + l / 2] >> (4 * (l & 1))) & 15;
}
__device__ __forceinline__ int iq1m_ls(const uint8_t *b, int ib, int l) {
    const int t = ld16(b + 48 + 2 * (ib / 2));
    return 2 * ((t >> (6 * (ib % 2) + 3 * (l / 2))) & 7) + 1;
}

// Codes of values k..k+3 (k = 0, 4, .., 28) of sub-block s of the super-block at b (2-byte aligned).
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
    } else { // IQ1_M: grid bytes 0xFF / 0 / 1 times ls
        const int nib = iq1m_nib(b, s, l);
        const uint64_t g = __ldg(tb.iq1s + (b[4 * s + l] | (nib & 7) << 8));
        const uint32_t v = (uint32_t)(g >> (32 * half));
        const uint32_t neg = ((v & 0x80808080u) >> 7) * 0xFFu,
                       mag = (v & 0x01010101u) * (uint32_t)iq1m_ls(b, s, l);
        return mmq_apply_signs(mag, neg);
    }
}

// IQ1_M's second operand at values k..k+3 of sub-block s: the group's -ls (delta sign set) or +ls.
__device__ __forceinline__ int mmq_iq1m_m4(const uint8_t *b, int s, int k) {
    const int l = k >> 3, ls = iq1m_ls(b, s, l), v = (iq1m_nib(b, s, l) & 8) ? -ls : ls;
    return (int)((uint32_t)(v & 255) * 0x01010101u);
}

// Integer weights of sub-block s's two 16-value halves (IQ2_XXS: one scale; IQ1_M: folded into codes).
template <int TYPE> __device__ __forceinline__ void mmq_iq_w(const uint8_t *b, int s, int &wlo, int &whi) {
    if constexpr (TYPE == T_IQ2_XXS) {
        wlo = whi = 2 * (int)(ld32_2(b + 6 + 8 * s) >> 28) + 1;
    } else if constexpr (TYPE == T_IQ2_XS) {
        const int sc = b[66 + s];
        wlo = 2 * (sc & 15) + 1;
        whi = 2 * (sc >> 4) + 1;
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
    if constexpr (TYPE == T_IQ2_XXS || TYPE == T_IQ2_XS) return 0.125f * acc;
    else return acc;
}
