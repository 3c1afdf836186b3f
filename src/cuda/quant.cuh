// quant.cuh — device dequantisation of ggml blocks, 8 values ("one unit") at a time.
//
// deq8<TYPE>(tabs, blk, sub, w) writes the 8 values sub*8 .. sub*8+7 of the block at blk.
// Every formula is the CPU's (quant.c, quant_k.c, quant_iq.c) with the same float operations
// in the same order, so the values are bit-identical (files compiled with -fmad=false; see
// quant_*.c for the layouts). Float types use a pseudo-block of 8 values (blk = the unit).
// Alignment: F32/F16/BF16 units and Q4_K/Q5_K blocks are 16-byte aligned (rows are, see
// backend_cuda_model.c); Q2_K blocks 4-byte; Q8_0/Q3_K/Q6_K/IQ*/Q4_0/Q4_1/Q5_0/Q5_1 blocks only
// 2-byte aligned; MXFP4 blocks (17 bytes) not at all: they are read a byte at a time.
#pragma once

#include "cuda/common.cuh"

// QT_* ids (quant.h; the .cu files include no project header).
enum {
    T_F32 = 0,
    T_F16 = 1,
    T_Q4_0 = 2,
    T_Q4_1 = 3,
    T_Q5_0 = 6,
    T_Q5_1 = 7,
    T_Q8_0 = 8,
    T_Q2_K = 10,
    T_Q3_K = 11,
    T_Q4_K = 12,
    T_Q5_K = 13,
    T_Q6_K = 14,
    T_IQ2_XXS = 16,
    T_IQ2_XS = 17,
    T_IQ3_XXS = 18,
    T_IQ1_S = 19,
    T_IQ4_NL = 20,
    T_IQ3_S = 21,
    T_IQ2_S = 22,
    T_IQ4_XS = 23,
    T_IQ1_M = 29,
    T_BF16 = 30,
    T_MXFP4 = 39
};

// Device copies of the lookup grids (quant_tables.c), passed by value to kernels.
struct cu_qtabs {
    const uint64_t *iq2xxs, *iq2xs, *iq2s, *iq1s;
    const uint32_t *iq3xxs, *iq3s;
    const uint8_t *ksigns;
    const int8_t *kvalues;    // IQ4_NL / IQ4_XS codebook
    const int8_t *kvalues_mx; // MXFP4: the E2M1 values doubled (kvalues_mxfp4)
};
const cu_qtabs &cu_qtabs_get(const cu_dev *d); // d's device's copy, made by cu_tables_init (quant.cu)

// Values per block (8 for float types: the unit) and bytes per block.
template <int T> struct qtraits;
#define QTR(T, V, B)                                                                                         \
    template <> struct qtraits<T> { static constexpr int vals = V, bytes = B; };
// clang-format off (a list of macro expansions: one per line)
QTR(T_F32, 8, 32)
QTR(T_F16, 8, 16)
QTR(T_BF16, 8, 16)
QTR(T_Q4_0, 32, 18)
QTR(T_Q4_1, 32, 20)
QTR(T_Q5_0, 32, 22)
QTR(T_Q5_1, 32, 24)
QTR(T_Q8_0, 32, 34)
QTR(T_IQ4_NL, 32, 18)
QTR(T_Q2_K, 256, 84)
QTR(T_Q3_K, 256, 110)
QTR(T_Q4_K, 256, 144)
QTR(T_Q5_K, 256, 176)
QTR(T_Q6_K, 256, 210)
QTR(T_IQ2_XXS, 256, 66)
QTR(T_IQ2_XS, 256, 74)
QTR(T_IQ2_S, 256, 82)
QTR(T_IQ3_XXS, 256, 98)
QTR(T_IQ3_S, 256, 110)
QTR(T_IQ1_S, 256, 50)
QTR(T_IQ1_M, 256, 56)
QTR(T_IQ4_XS, 256, 136)
QTR(T_MXFP4, 32, 17)
// clang-format on
#undef QTR

__device__ __forceinline__ float sgnf(uint8_t s, int j) { return (s >> j) & 1 ? -1.0f : 1.0f; }
__device__ __forceinline__ int g8(uint64_t g, int j) { return (int)(uint8_t)(g >> (8 * j)); }
__device__ __forceinline__ int g8s(uint64_t g, int j) { return (int)(int8_t)(g >> (8 * j)); }
__device__ __forceinline__ int g4(uint32_t g, int j) { return (int)(uint8_t)(g >> (8 * j)); }

// MXFP4's E8M0 byte as the halved scale 2^(e-128), built from its bits (quant_e8m0_half: exact;
// e < 2 gives a subnormal, kept: the .cu files are built without -ftz).
__device__ __forceinline__ float e8m0_half(int e) {
    return __uint_as_float(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23);
}

// Q4_K/Q5_K 6-bit scale and min of 32-value sub-block k (quant_k4_scale_min).
__device__ __forceinline__ void k4_scale_min(const uint8_t *b, int k, int &sc, int &m) {
    if (k < 4) {
        sc = b[k] & 63;
        m = b[k + 4] & 63;
    } else {
        sc = (b[k + 4] & 15) | ((b[k - 4] >> 6) << 4);
        m = (b[k + 4] >> 4) | ((b[k] >> 6) << 4);
    }
}

// Load 8 consecutive bytes (p 2-byte aligned) as two words.
__device__ __forceinline__ void ld8_2(const uint8_t *p, uint32_t &a, uint32_t &b) {
    a = ld32_2(p);
    b = ld32_2(p + 4);
}
__device__ __forceinline__ int byte_of(uint32_t a, uint32_t b, int i) {
    return (int)(((i < 4 ? a : b) >> (8 * (i & 3))) & 255);
}

// Scale decoders shared by deq8 and the integer path (mmq_k.cuh, mmq_iq.cuh): one definition of each
// block layout's bit positions.
// Q3_K's signed 6-bit scale k (0..15) of the super-block at b: | hmask[32] | qs[64] | scales[12] | d |,
// the low nibbles of bytes 0..7 for scales 0..7, their high nibbles for 8..15, bits 5..4 in bytes 8..11.
__device__ __forceinline__ int q3k_sc(const uint8_t *b, int k) {
    const uint8_t *sc = b + 96;
    const int lo = k < 8 ? (sc[k] & 15) : (sc[k - 8] >> 4);
    return (lo | ((sc[8 + (k & 3)] >> (2 * (k >> 2))) & 3) << 4) - 32;
}

// IQ1_M: the 4-bit nibble of group l of 32-value block ib (index bits 10..8, delta sign) and the
// group's odd scale 2 s + 1.
__device__ __forceinline__ int iq1m_nib(const uint8_t *b, int ib, int l) {
    return (b[32 + 2 * ib + l / 2] >> (4 * (l & 1))) & 15;
}
__device__ __forceinline__ int iq1m_ls(const uint8_t *b, int ib, int l) {
    const int t = ld16(b + 48 + 2 * (ib / 2));
    return 2 * ((t >> (6 * (ib % 2) + 3 * (l / 2))) & 7) + 1;
}
// IQ4_XS: the signed 6-bit scale of sub-block ib.
__device__ __forceinline__ int iq4xs_ls(const uint8_t *b, int ib) {
    return (((b[4 + ib / 2] >> (4 * (ib % 2))) & 15) | (((ld16(b + 2) >> (2 * ib)) & 3) << 4)) - 32;
}
// IQ1_S: block ib's 16-bit qh word h (bits 3l+2..3l: group l's grid index bits 10..8; 14..12: the scale s;
// 15: the delta sign), the odd scale 2 s + 1 and group l's grid index.
__device__ __forceinline__ int iq1s_qh(const uint8_t *b, int ib) { return ld16(b + 34 + 2 * ib); }
__device__ __forceinline__ int iq1s_ls(int h) { return 2 * ((h >> 12) & 7) + 1; }
__device__ __forceinline__ int iq1s_idx(const uint8_t *b, int ib, int l, int h) {
    return b[2 + 4 * ib + l] | (((h >> (3 * l)) & 7) << 8);
}

template <int TYPE>
__device__ __forceinline__ void deq8(const cu_qtabs &tb, const uint8_t *__restrict__ b, int sub, float *w) {
    if constexpr (TYPE == T_F32) {
        float4 a = *(const float4 *)b, c = *(const float4 *)(b + 16);
        w[0] = a.x;
        w[1] = a.y;
        w[2] = a.z;
        w[3] = a.w;
        w[4] = c.x;
        w[5] = c.y;
        w[6] = c.z;
        w[7] = c.w;
    } else if constexpr (TYPE == T_F16 || TYPE == T_BF16) {
        uint4 a = *(const uint4 *)b;
        uint32_t v[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            uint16_t lo = (uint16_t)(v[i] & 0xffff), hi = (uint16_t)(v[i] >> 16);
            w[2 * i] = TYPE == T_F16 ? h2f(lo) : bf2f(lo);
            w[2 * i + 1] = TYPE == T_F16 ? h2f(hi) : bf2f(hi);
        }
    } else if constexpr (TYPE == T_Q8_0) {
        const float d = h2f(ld16(b));
        uint32_t x0, x1;
        ld8_2(b + 2 + 8 * sub, x0, x1);
#pragma unroll
        for (int i = 0; i < 8; i++) w[i] = (float)(int8_t)byte_of(x0, x1, i) * d;
    } else if constexpr (TYPE == T_Q4_0 || TYPE == T_Q4_1 || TYPE == T_IQ4_NL) {
        const int off = TYPE == T_Q4_1 ? 4 : 2;
        const float d = h2f(ld16(b));
        uint32_t x0, x1;
        ld8_2(b + off + 8 * (sub & 1), x0, x1);
        const int sh = sub >= 2 ? 4 : 0;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            int q = (byte_of(x0, x1, i) >> sh) & 15;
            if constexpr (TYPE == T_Q4_0) w[i] = (float)(q - 8) * d;
            else if constexpr (TYPE == T_Q4_1) w[i] = (float)q * d + h2f(ld16(b + 2));
            else w[i] = d * (float)tb.kvalues[q];
        }
    } else if constexpr (TYPE == T_MXFP4) {
        const float d = e8m0_half(b[0]);
        const uint8_t *q = b + 1 + 8 * (sub & 1);
        const int sh = sub >= 2 ? 4 : 0;
#pragma unroll
        for (int i = 0; i < 8; i++) w[i] = d * (float)tb.kvalues_mx[(q[i] >> sh) & 15];
    } else if constexpr (TYPE == T_Q5_0 || TYPE == T_Q5_1) {
        const int qh_off = TYPE == T_Q5_1 ? 4 : 2, qs_off = qh_off + 4;
        const float d = h2f(ld16(b));
        const uint32_t qh = ld32_2(b + qh_off);
        uint32_t x0, x1;
        ld8_2(b + qs_off + 8 * (sub & 1), x0, x1);
        const int sh = sub >= 2 ? 4 : 0;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            int j = 8 * sub + i;
            int q = ((byte_of(x0, x1, i) >> sh) & 15) | (int)(((qh >> j) & 1) << 4);
            if constexpr (TYPE == T_Q5_0) w[i] = (float)(q - 16) * d;
            else w[i] = (float)q * d + h2f(ld16(b + 2));
        }
    } else if constexpr (TYPE == T_Q2_K) {
        const int h = sub >> 4, jj = (sub >> 2) & 3, l0 = (sub & 3) * 8, k = sub >> 1;
        const float d = h2f(ld16(b + 80)), dmin = h2f(ld16(b + 82));
        const int sc = b[k];
        const float dl = d * (float)(sc & 15), ml = dmin * (float)(sc >> 4);
        const uint32_t x0 = *(const uint32_t *)(b + 16 + 32 * h + l0),
                       x1 = *(const uint32_t *)(b + 20 + 32 * h + l0);
#pragma unroll
        for (int i = 0; i < 8; i++) w[i] = dl * (float)((byte_of(x0, x1, i) >> (2 * jj)) & 3) - ml;
    } else if constexpr (TYPE == T_Q3_K) {
        const int h = sub >> 4, j = (sub >> 2) & 3, l0 = (sub & 3) * 8, k = sub >> 1;
        const float dl = h2f(ld16(b + 108)) * (float)q3k_sc(b, k);
        uint32_t q0, q1, m0, m1;
        ld8_2(b + 32 + 32 * h + l0, q0, q1);
        ld8_2(b + l0, m0, m1);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            int low = (byte_of(q0, q1, i) >> (2 * j)) & 3;
            int code = low - ((byte_of(m0, m1, i) >> (4 * h + j)) & 1 ? 0 : 4);
            w[i] = dl * (float)code;
        }
    } else if constexpr (TYPE == T_Q4_K || TYPE == T_Q5_K) {
        const int k = sub >> 2, c = k >> 1, sh = (k & 1) * 4, l0 = (sub & 3) * 8;
        const float d = h2f(ld16(b)), dmin = h2f(ld16(b + 2));
        int sc, m;
        k4_scale_min(b + 4, k, sc, m);
        const float d1 = d * (float)sc, m1 = dmin * (float)m;
        const uint8_t *qs = b + (TYPE == T_Q4_K ? 16 : 48);
        const uint2 x = *(const uint2 *)(qs + 32 * c + l0);
        uint2 hb = make_uint2(0, 0);
        if constexpr (TYPE == T_Q5_K) hb = *(const uint2 *)(b + 16 + l0);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            int q = (byte_of(x.x, x.y, i) >> sh) & 15;
            if constexpr (TYPE == T_Q5_K) q |= ((byte_of(hb.x, hb.y, i) >> k) & 1) << 4;
            w[i] = d1 * (float)q - m1;
        }
    } else if constexpr (TYPE == T_Q6_K) {
        const int h = sub >> 4, r = (sub >> 2) & 3, l0 = (sub & 3) * 8, k = sub >> 1;
        const float dl = h2f(ld16(b + 208)) * (float)(int8_t)b[192 + k];
        uint32_t l_0, l_1, h_0, h_1;
        ld8_2(b + 64 * h + l0 + 32 * (r & 1), l_0, l_1);
        ld8_2(b + 128 + 32 * h + l0, h_0, h_1);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            int L = byte_of(l_0, l_1, i);
            int low = (r & 2) ? L >> 4 : L & 15;
            int code = (low | (((byte_of(h_0, h_1, i) >> (2 * r)) & 3) << 4)) - 32;
            w[i] = dl * (float)code;
        }
    } else if constexpr (TYPE == T_IQ2_XXS) {
        const int ib = sub >> 2, l = sub & 3;
        const float d = h2f(ld16(b));
        const uint32_t w0 = ld32_2(b + 2 + 8 * ib), w1 = ld32_2(b + 6 + 8 * ib);
        const float db = d * (0.5f + (float)(w1 >> 28)) * 0.25f;
        const uint64_t g = __ldg(tb.iq2xxs + ((w0 >> (8 * l)) & 255));
        const uint8_t s = __ldg(tb.ksigns + ((w1 >> (7 * l)) & 127));
#pragma unroll
        for (int j = 0; j < 8; j++) w[j] = db * (float)g8(g, j) * sgnf(s, j);
    } else if constexpr (TYPE == T_IQ2_XS || TYPE == T_IQ2_S) {
        const int ib = sub >> 2, l = sub & 3;
        const float d = h2f(ld16(b));
        const int sc = b[(TYPE == T_IQ2_XS ? 66 : 74) + ib];
        const float db = d * (0.5f + (float)((sc >> (4 * (l >> 1))) & 15)) * 0.25f;
        uint64_t g;
        uint8_t s;
        if constexpr (TYPE == T_IQ2_XS) {
            const uint16_t e = ld16(b + 2 + 2 * (4 * ib + l));
            g = __ldg(tb.iq2xs + (e & 511));
            s = __ldg(tb.ksigns + (e >> 9));
        } else {
            g = __ldg(tb.iq2s + (b[2 + 4 * ib + l] | (((b[66 + ib] >> (2 * l)) & 3) << 8)));
            s = b[2 + 32 + 4 * ib + l];
        }
#pragma unroll
        for (int j = 0; j < 8; j++) w[j] = db * (float)g8(g, j) * sgnf(s, j);
    } else if constexpr (TYPE == T_IQ3_XXS || TYPE == T_IQ3_S) {
        const int ib = sub >> 2, l = sub & 3;
        const float d = h2f(ld16(b));
        float db;
        uint8_t s;
        uint32_t g1, g2;
        if constexpr (TYPE == T_IQ3_XXS) {
            const uint32_t aux = ld32_2(b + 2 + 64 + 4 * ib);
            db = d * (0.5f + (float)(aux >> 28)) * 0.5f;
            s = __ldg(tb.ksigns + ((aux >> (7 * l)) & 127));
            g1 = __ldg(tb.iq3xxs + b[2 + 8 * ib + 2 * l]);
            g2 = __ldg(tb.iq3xxs + b[2 + 8 * ib + 2 * l + 1]);
        } else {
            db = d * (float)(1 + 2 * ((b[106 + ib / 2] >> (4 * (ib % 2))) & 15));
            s = b[74 + 4 * ib + l];
            const int qh = b[66 + ib];
            g1 = __ldg(tb.iq3s + (b[2 + 8 * ib + 2 * l] | (((qh >> (2 * l)) & 1) << 8)));
            g2 = __ldg(tb.iq3s + (b[2 + 8 * ib + 2 * l + 1] | (((qh >> (2 * l + 1)) & 1) << 8)));
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
            w[j] = db * (float)g4(g1, j) * sgnf(s, j);
            w[j + 4] = db * (float)g4(g2, j) * sgnf(s, j + 4);
        }
    } else if constexpr (TYPE == T_IQ1_S) {
        const int ib = sub >> 2, l = sub & 3;
        const float d = h2f(ld16(b));
        const int h = iq1s_qh(b, ib);
        const float dl = d * (float)iq1s_ls(h);
        const float delta = (h & 0x8000) ? -0.125f : 0.125f;
        const uint64_t g = __ldg(tb.iq1s + iq1s_idx(b, ib, l, h));
#pragma unroll
        for (int j = 0; j < 8; j++) w[j] = dl * ((float)g8s(g, j) + delta);
    } else if constexpr (TYPE == T_IQ1_M) {
        const int ib = sub >> 2, l = sub & 3;
        const uint16_t s0 = ld16(b + 48), s1 = ld16(b + 50), s2 = ld16(b + 52), s3 = ld16(b + 54);
        const uint16_t bits =
            (uint16_t)((s0 >> 12) | ((s1 >> 8) & 0x00f0) | ((s2 >> 4) & 0x0f00) | (s3 & 0xf000));
        const float d = h2f(bits);
        const float dl = d * (float)iq1m_ls(b, ib, l);
        const int nib = iq1m_nib(b, ib, l);
        const float delta = (nib & 8) ? -0.125f : 0.125f;
        const uint64_t g = __ldg(tb.iq1s + (b[4 * ib + l] | ((nib & 7) << 8)));
#pragma unroll
        for (int j = 0; j < 8; j++) w[j] = dl * ((float)g8s(g, j) + delta);
    } else if constexpr (TYPE == T_IQ4_XS) {
        const int ib = sub >> 2, part = sub & 3;
        const float d = h2f(ld16(b));
        const float dl = d * (float)iq4xs_ls(b, ib);
        const uint2 x = *(const uint2 *)(b + 8 + 16 * ib + 8 * (part & 1));
        const int sh = part >= 2 ? 4 : 0;
#pragma unroll
        for (int i = 0; i < 8; i++) w[i] = dl * (float)tb.kvalues[(byte_of(x.x, x.y, i) >> sh) & 15];
    }
}

// Byte address of unit u (8 values) of a row: its block and the unit within the block.
template <int TYPE>
__device__ __forceinline__ const uint8_t *unit_block(const uint8_t *row, int u, int &sub) {
    constexpr int upb = qtraits<TYPE>::vals / 8;
    sub = u % upb;
    return row + (size_t)(u / upb) * qtraits<TYPE>::bytes;
}

// The types with kernels (run-time dispatch lists): every type of the published Qwen3-Next files,
// including llama-quantize's 32-value fallbacks (Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL) and MXFP4 experts.
// clang-format off (one type per line)
#define CU_FOR_TYPES(X)                                                                                      \
    X(T_F32)                                                                                                 \
    X(T_F16)                                                                                                 \
    X(T_BF16)                                                                                                \
    X(T_Q8_0)                                                                                                \
    X(T_Q2_K)                                                                                                \
    X(T_Q3_K)                                                                                                \
    X(T_Q4_K)                                                                                                \
    X(T_Q5_K)                                                                                                \
    X(T_Q6_K)                                                                                                \
    X(T_IQ2_XXS)                                                                                             \
    X(T_IQ2_XS)                                                                                              \
    X(T_IQ2_S)                                                                                               \
    X(T_IQ3_XXS)                                                                                             \
    X(T_IQ3_S)                                                                                               \
    X(T_IQ1_S)                                                                                               \
    X(T_IQ1_M)                                                                                               \
    X(T_IQ4_XS)                                                                                              \
    X(T_Q4_0)                                                                                                \
    X(T_Q4_1)                                                                                                \
    X(T_Q5_0)                                                                                                \
    X(T_Q5_1)                                                                                                \
    X(T_IQ4_NL)                                                                                              \
    X(T_MXFP4)
// clang-format on
