// mmq_k.cuh — the K-quants of the integer path (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K): their 4-code A operands,
// sub-block scales and mins, super-block scales; part of mmq.cuh (included there after its type
// predicates mmq_k / mmq_k16 / mmq_kmin).
//
// Their CPU vec_dots (quant_k.c): per super-block integer sums against the Q8_K activations,
//   Q4_K, Q5_K  isum = sum_k sc_k * dot_k over the 32-value sub-blocks, summs = sum_k m_k * sum(q8 of k);
//   Q6_K, Q3_K  isum = sum_k sc_k * dot_k over the 16-value halves (codes - 32 / codes - 4);
//   Q2_K        isum as Q6_K with 4-bit scales and codes 0..3, summs = sum_k m_k * sum(q8 of half k);
// then (yd*d)*isum - (yd*dmin)*summs (mins) or (d*yd)*isum (mmq_term).
#pragma once

// 4 consecutive bytes at b + o, o a multiple of 4 (Q4_K/Q5_K blocks are 16-byte aligned, Q3_K and
// Q6_K blocks only 2-byte: quant.cuh).
template <int TYPE> __device__ __forceinline__ uint32_t mmq_ld4(const uint8_t *b, int o) {
    if constexpr (mmq_k16(TYPE)) return ld32_2(b + o);
    else return *(const uint32_t *)(b + o);
}

// Super-block scales: d, dmin (Q2_K, Q4_K/Q5_K; Q3_K, Q6_K: dmin unused).
template <int TYPE> __device__ __forceinline__ void mmq_d(const uint8_t *b, float &d, float &dmin) {
    if constexpr (TYPE == T_Q2_K) { // | scales[16] | qs[64] | d | dmin |
        d = h2f(ld16(b + 80));
        dmin = h2f(ld16(b + 82));
    } else if constexpr (mmq_k16(TYPE)) {
        d = h2f(ld16(b + (TYPE == T_Q3_K ? 108 : 208)));
        dmin = 0.0f;
    } else {
        d = h2f(ld16(b));
        dmin = h2f(ld16(b + 2));
    }
}

// Q4_K/Q5_K: 4 codes of sub-block s from the loaded qs word q (low nibbles for even s, high for odd)
// and, for Q5_K, the qh word h (bit s of each byte is the fifth bit).
template <int TYPE> __device__ __forceinline__ int mmq_k45_word(uint32_t q, uint32_t h, int s) {
    const uint32_t lo = (q >> (4 * (s & 1))) & 0x0F0F0F0Fu;
    if constexpr (TYPE == T_Q5_K) return (int)(lo | ((h >> s) & 0x01010101u) << 4);
    else return (int)lo;
}

// 4 codes (signed bytes, the type's integer unit: Q6_K code - 32, Q3_K code - 4, Q2_K code) of values
// 32*s + k .. +3 of the super-block at b, k = 0..28 in steps of 4.
template <int TYPE> __device__ __forceinline__ int mmq_codes4(const uint8_t *b, int s, int k) {
    if constexpr (TYPE == T_Q4_K || TYPE == T_Q5_K) {
        const uint32_t q = mmq_ld4<TYPE>(b, (TYPE == T_Q4_K ? 16 : 48) + 32 * (s >> 1) + k);
        return mmq_k45_word<TYPE>(q, TYPE == T_Q5_K ? mmq_ld4<TYPE>(b, 16 + k) : 0u, s);
    } else if constexpr (TYPE == T_Q2_K) {
        // value 128 h + 32 j + l: bits 2 j + 1..2 j of qs[32 h + l] (0..3)
        return (int)((mmq_ld4<TYPE>(b, 16 + 32 * (s >> 2) + k) >> (2 * (s & 3))) & 0x03030303u);
    } else if constexpr (TYPE == T_Q3_K) {
        // value 128 h + 32 j + l: 2 bits of qs[32 h + l], bit 4 h + j of hmask[l]
        const int h = s >> 2, j = s & 3;
        const uint32_t lo = (mmq_ld4<TYPE>(b, 32 + 32 * h + k) >> (2 * j)) & 0x03030303u;
        const uint32_t hb = (mmq_ld4<TYPE>(b, k) >> (4 * h + j)) & 0x01010101u;
        return (int)__vsub4(lo | hb << 2, 0x04040404u);
    } else {
        const int h = s >> 2, r = s & 3;
        const uint32_t lo = (mmq_ld4<TYPE>(b, 64 * h + 32 * (r & 1) + k) >> (4 * (r >> 1))) & 0x0F0F0F0Fu;
        const uint32_t hi = (mmq_ld4<TYPE>(b, 128 + 32 * h + k) >> (2 * r)) & 0x03030303u;
        return (int)__vsub4(lo | hi << 4, 0x20202020u);
    }
}

// The 32 codes of sub-block (Q6_K: 32-value slice) s as 8 words: mmq_codes4 for k = 0, 4, .., 28,
// with 16-byte loads where the block's alignment allows (Q4_K, Q5_K).
template <int TYPE> __device__ __forceinline__ void mmq_codes32(const uint8_t *b, int s, int (&w)[8]) {
    if constexpr (TYPE == T_Q4_K || TYPE == T_Q5_K) {
        const uint4 *q = (const uint4 *)(b + (TYPE == T_Q4_K ? 16 : 48) + 32 * (s >> 1));
        const uint4 q0 = q[0], q1 = q[1];
        const uint32_t v[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
        uint4 h0 = make_uint4(0, 0, 0, 0), h1 = h0;
        if constexpr (TYPE == T_Q5_K) {
            h0 = ((const uint4 *)(b + 16))[0];
            h1 = ((const uint4 *)(b + 16))[1];
        }
        const uint32_t h[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
#pragma unroll
        for (int i = 0; i < 8; i++) w[i] = mmq_k45_word<TYPE>(v[i], h[i], s);
    } else {
#pragma unroll
        for (int i = 0; i < 8; i++) w[i] = mmq_codes4<TYPE>(b, s, 4 * i);
    }
}

// Sub-block scales of the super-block: Q4_K/Q5_K sc[0..8), m[0..8) (6-bit); Q6_K sc[0..16) (int8);
// Q3_K sc[0..16) (signed 6-bit); Q2_K sc[0..16), m[0..16) (4-bit).
template <int TYPE> __device__ __forceinline__ void mmq_scales(const uint8_t *b, int *sc, int *m) {
    if constexpr (TYPE == T_Q2_K) {
#pragma unroll
        for (int k = 0; k < 16; k++) {
            sc[k] = b[k] & 15;
            m[k] = b[k] >> 4;
        }
    } else if constexpr (TYPE == T_Q3_K) {
#pragma unroll
        for (int k = 0; k < 16; k++) sc[k] = q3k_sc(b, k);
    } else if constexpr (TYPE == T_Q6_K) {
#pragma unroll
        for (int w = 0; w < 4; w++) {
            const uint32_t v = mmq_ld4<TYPE>(b, 192 + 4 * w);
#pragma unroll
            for (int e = 0; e < 4; e++) sc[4 * w + e] = (int)(int8_t)(v >> (8 * e));
        }
    } else {
        uint8_t s[12];
#pragma unroll
        for (int w = 0; w < 3; w++) {
            const uint32_t v = mmq_ld4<TYPE>(b, 4 + 4 * w);
#pragma unroll
            for (int e = 0; e < 4; e++) s[4 * w + e] = (uint8_t)(v >> (8 * e));
        }
#pragma unroll
        for (int k = 0; k < 8; k++) k4_scale_min(s, k, sc[k], m[k]);
    }
}

// The weights of sub-block s's two 16-value halves for the K-quants with 16 scales (kw: Q6_K's int8
// scales, Q3_K's signed 6-bit ones, Q2_K's 4-bit ones) and Q2_K's mins (km; 0 for the others).
template <int TYPE>
__device__ __forceinline__ void mmq_k16_w(const uint8_t *b, int s, int (&kw)[2], int (&km)[2]) {
    if constexpr (TYPE == T_Q6_K) {
        kw[0] = (int8_t)b[192 + 2 * s];
        kw[1] = (int8_t)b[193 + 2 * s];
        km[0] = km[1] = 0;
    } else if constexpr (TYPE == T_Q3_K) {
        kw[0] = q3k_sc(b, 2 * s);
        kw[1] = q3k_sc(b, 2 * s + 1);
        km[0] = km[1] = 0;
    } else { // Q2_K: scale | min << 4 per half
        kw[0] = b[2 * s] & 15;
        kw[1] = b[2 * s + 1] & 15;
        km[0] = b[2 * s] >> 4;
        km[1] = b[2 * s + 1] >> 4;
    }
}
