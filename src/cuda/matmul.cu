// matmul.cu — the entry point cu_matmul: segment layout, variant choice, dispatch to the
// per-type instance files mm_<type>.cu.
#include "cuda/matmul.cuh"

#define MM_DECL(n) int mm_run_##n(const mm_launch &L, bool gateup, int tt);
MM_DECL(f32)
MM_DECL(f16)
MM_DECL(bf16)
MM_DECL(q8_0)
MM_DECL(q2_k)
MM_DECL(q3_k)
MM_DECL(q4_k)
MM_DECL(q5_k)
MM_DECL(q6_k)
MM_DECL(iq2_xxs)
MM_DECL(iq2_xs)
MM_DECL(iq2_s)
MM_DECL(iq3_xxs)
MM_DECL(iq3_s)
MM_DECL(iq1_s)
MM_DECL(iq1_m)
MM_DECL(iq4_xs)
MM_DECL(q4_0)
MM_DECL(q4_1)
MM_DECL(q5_0)
MM_DECL(q5_1)
MM_DECL(iq4_nl)
MM_DECL(mxfp4)

// Largest token tile of the small-batch shape: d->tune.small_tt = RL_CUDA_SMALL_TT=2|4|8 (default 4: 6
// rows run as two tiles of 4, not one of 8). Tuning only: every shape gives the same bits. H200, cf2
// (full size), verify of 5 / 7 / 9 rows: 14.7 / 17.7 / 24.0 ms with tiles of 8, 14.1 / 16.7 / 21.8 ms
// with tiles of 4 (a step 5.7 ms); 2-4 rows unchanged.
static int small_tt_max(const cu_dev *d) { return d->tune.small_tt; }

// The integer path (mmq.cuh): per device struct, d->int8 = RL_CUDA_MMQ=0|1|2 at context creation (default
// 2: the K-quants, the 32-value types of mmq_b32.cuh and the IQ types of mmq_iq.cuh; 1: the
// K-quants and the 32-value types; 0: the float path for every type), cu_dev_set_int8() after.
// H200, full CF2 file (bench/results/2026-12-02-cuda-iq-h200.md): mode 2 vs 1, prompt 2048 3,422 -> 7,395
// tok/s, 32K 1,851 -> 2,612, decode 194.6 -> 184.3 (the dp4a IQ decode is 5 % slower than the float
// GEMV: the price of decode == prefill bits). A context must not see it change between its prefill
// and its steps (the two arithmetics give different bits).
// Whether launches of `type` take the integer path (the mode and the type).
static bool q8_type(const cu_dev *d, uint32_t type) {
    return mmq_k(type) || mmq_b32(type) ? d->int8 >= 1 : mmq_iq(type) && d->int8 == 2;
}

// The staged tensor-core tiles when the caller gives a scratch: RL_CUDA_MMQ_TC=0|1 (default 1;
// 0: k_mmq_mma, which quantises in every block) where they fit the device. Same bits either way.
static bool mmq_tc_on(const cu_dev *d, uint32_t type) { return d->tune.mmq_tc && mmq_tc_fits(d, type); }

// Pairs per tile of the grouped prefill launches of `type` (the MoE plan's tile size): 2 * CU_TT
// where the staged integer tiles run them (same bits as CU_TT; H200, 12-layer Q4_K_M prompt 2048: 16
// pairs 1.10x, 8192 1.06x; bench/results/2026-12-02-cuda-iq-h200.md), else CU_TT.
extern "C" int cu_matmul_group_tt(const cu_dev *d, uint32_t type) {
    return q8_type(d, type) && mmq_tc_on(d, type) ? 2 * CU_TT : CU_TT;
}

static int mm_dispatch(uint32_t type, const mm_launch &L, bool gateup, int tt) {
    switch (type) {
    case T_F32: return mm_run_f32(L, gateup, tt);
    case T_F16: return mm_run_f16(L, gateup, tt);
    case T_BF16: return mm_run_bf16(L, gateup, tt);
    case T_Q8_0: return mm_run_q8_0(L, gateup, tt);
    case T_Q2_K: return mm_run_q2_k(L, gateup, tt);
    case T_Q3_K: return mm_run_q3_k(L, gateup, tt);
    case T_Q4_K: return mm_run_q4_k(L, gateup, tt);
    case T_Q5_K: return mm_run_q5_k(L, gateup, tt);
    case T_Q6_K: return mm_run_q6_k(L, gateup, tt);
    case T_IQ2_XXS: return mm_run_iq2_xxs(L, gateup, tt);
    case T_IQ2_XS: return mm_run_iq2_xs(L, gateup, tt);
    case T_IQ2_S: return mm_run_iq2_s(L, gateup, tt);
    case T_IQ3_XXS: return mm_run_iq3_xxs(L, gateup, tt);
    case T_IQ3_S: return mm_run_iq3_s(L, gateup, tt);
    case T_IQ1_S: return mm_run_iq1_s(L, gateup, tt);
    case T_IQ1_M: return mm_run_iq1_m(L, gateup, tt);
    case T_IQ4_XS: return mm_run_iq4_xs(L, gateup, tt);
    case T_Q4_0: return mm_run_q4_0(L, gateup, tt);
    case T_Q4_1: return mm_run_q4_1(L, gateup, tt);
    case T_Q5_0: return mm_run_q5_0(L, gateup, tt);
    case T_Q5_1: return mm_run_q5_1(L, gateup, tt);
    case T_IQ4_NL: return mm_run_iq4_nl(L, gateup, tt);
    case T_MXFP4: return mm_run_mxfp4(L, gateup, tt);
    default: return rl_seterr("CUDA backend: no matmul kernel for tensor type %u", type);
    }
}

/* The output rows of a launch (a matrix's own, the same for every T). */
static int launch_rows(const cu_seg *segs, int nseg) {
    int n = 0;
    for (int i = 0; i < nseg; i++) n += segs[i].n_out;
    return n;
}

extern "C" bool cu_matmul_integer(const cu_dev *d, uint32_t type, int n_in, int rows) {
    return q8_type(d, type) &&
           (mmq_b32(type) ? rows >= d->tune.mmqb_rows && mmqb_ok(d, type, n_in)
                          : mmq_smem(n_in, MMQ_MAX_TT) <= MMQ_MAX_SMEM && cu_dev_fits(d, mmq_smem(n_in, 8)));
}

static int matmul_go(uint32_t type, int n_in, const cu_seg *segs, int nseg, const float *x, int ldx, int T,
                     const cu_group *g, bool gateup, const cu_conv *conv, const cu_tail *tail, void *ws,
                     cu_stream s) {
    if (nseg < 1 || nseg > 3 || n_in % 8 || ldx % 4 || T < 1)
        return rl_seterr("cu_matmul: bad arguments (nseg %d, n_in %d, ldx %d, T %d)", nseg, n_in, ldx, T);
    mm_launch L = {};
    const bool small = !g && T > 1 && T <= CU_SMALL_T;
    const cu_dev *d = s.dev;
    const int tmax = small_tt_max(d);
    const int tt = g        ? g->tt
                   : T == 1 ? 1
                   : small  ? (T <= 2 || tmax == 2   ? 2
                               : T <= 4 || tmax == 4 ? 4
                                                     : 8)
                            : CU_TT;
    /* the integer path when its largest tile of tokens fits the shared memory of a block: a condition
     * on the matrix (and the device), not on T, so every shape of a matrix takes the same path
     * (Qwen3-Next: n_in <= 4096, 66 KiB). On a device that cannot hold that tile but holds the
     * smallest (8 tokens: k_mmq_mma with one token tile per warp, the same bits) the path stays. */
    L.q8 = cu_matmul_integer(d, type, n_in, launch_rows(segs, nseg));
    if (L.q8) L.tb = cu_qtabs_get(d);
    /* prefill tiles with a scratch: one quantisation, staged tiles (k_mmq_tc; same bits) */
    if (L.q8 && ws && tt != 1 && !small && (!g || g->x_rows > 0) && mmq_tc_on(d, type)) {
        L.xq = (const uint8_t *)ws;
        L.xq_rows = g ? g->x_rows : T;
    }
    if (tt != 1 && tt != CU_TT && !small && !(g && tt == 2 * CU_TT && L.xq))
        return rl_seterr("cu_matmul: tiles of %d tokens are not supported here", tt);
    L.lane = L.q8 && !L.xq && !mmq_b32(type) &&
             mmq_lane_ok(d, type, tt, n_in, segs[0].row_bytes, gateup, tail && tail->kind != CU_TAIL_NONE);
    const int rpb = L.q8 && mmq_b32(type) ? mmqb_rows_per_block(gateup, tt, small)
                    : L.q8 ? mmq_rows_per_block(d, type, gateup, tt, small, L.xq != NULL, L.lane, n_in)
                           : mm_rows_per_block(d, gateup, tt, small);
    L.small = small;
    L.nseg = nseg;
    for (int i = 0; i < nseg; i++) {
        L.seg[i] = segs[i];
        if (segs[i].epi == CU_EPI_CONV && (T != 1 || !conv || g))
            return rl_seterr("cu_matmul: the conv epilogue needs one dense row and cu_conv");
        if (gateup && !segs[i].w2 && !segs[i].wt2) return rl_seterr("cu_matmul: gate/up needs w2");
        if ((segs[i].wt || segs[i].wt2) && !g)
            return rl_seterr("cu_matmul: expert tables need a grouped launch");
        L.seg_start[i + 1] = L.seg_start[i] + (segs[i].n_out + rpb - 1) / rpb;
    }
    L.x = x;
    L.ldx = ldx;
    L.T = T;
    L.n_in = n_in;
    L.grouped = g != NULL;
    if (g) L.g = *g;
    if (conv) L.conv = *conv;
    if (tail) L.tail = *tail;
    L.s = s;
    return mm_dispatch(type, L, gateup, tt);
}

extern "C" int cu_matmul(uint32_t type, int n_in, const cu_seg *segs, int nseg, const float *x, int ldx,
                         int T, const cu_group *g, bool gateup, const cu_conv *conv, void *ws, cu_stream s) {
    return matmul_go(type, n_in, segs, nseg, x, ldx, T, g, gateup, conv, NULL, ws, s);
}

extern "C" size_t cu_matmul_ws_bytes(int n_in, int rows) { return mmq_ws(n_in, rows); }

extern "C" int cu_matmul_tail(uint32_t type, int n_in, const cu_seg *segs, int nseg, const float *x,
                              const cu_tail *tail, cu_stream s) {
    if (!tail || !tail->counter || nseg != 1 ||
        (tail->kind != CU_TAIL_ADD_NORM && tail->kind != CU_TAIL_ROUTER) || segs[0].epi != CU_EPI_STORE)
        return rl_seterr("cu_matmul_tail: one plain segment and a tail with a counter are needed");
    if (tail->kind == CU_TAIL_ROUTER &&
        (segs[0].n_out > ROUTER_MAXE || tail->K > 32 || tail->K > segs[0].n_out))
        return rl_seterr("cu_matmul_tail: %d experts / top-%d not supported (at most %d / 32)", segs[0].n_out,
                         tail->K, ROUTER_MAXE);
    return matmul_go(type, n_in, segs, nseg, x, n_in, 1, NULL, false, NULL, tail, NULL, s);
}

/* The quantiser of the 32-value types' integer path (mmq_b32.cuh: k_q8b_tile runs b32_quantise_tile, the
 * matmuls' own function and block shape) on T rows of n_in values (stride ldx) into dst: T rows of
 * quant_row_size(type, n_in) bytes in the CPU's Q8_0 / Q8_1 block layout. */
extern "C" int cu_quantise_q8(uint32_t type, const float *x, int ldx, int T, int n_in, void *dst,
                              cu_stream s) {
    if ((type != 8 && type != 9) || n_in % 32 || n_in <= 0 || T < 0 || ldx < n_in || ldx % 4)
        return rl_seterr("cu_quantise_q8: type %u (Q8_0 = 8, Q8_1 = 9 only), n_in %d (a positive multiple of "
                         "32), ldx %d (>= n_in, a multiple of 4)",
                         type, n_in, ldx);
    if (T == 0) return 0;
    mm_launch L = {};
    L.x = x;
    L.ldx = ldx;
    L.T = T;
    L.n_in = n_in;
    L.s = s;
    /* the tile of the weight type whose activations these are (Q8_1: Q4_1's, with the s_a floats);
     * mmqb_tile(Q8_1) would leave them out and the kernel would write past its shared memory */
    const size_t sm = mmqb_tile(type == 9 ? T_Q4_1 : T_Q4_0, n_in, 8);
    const dim3 grid(1, (unsigned)((T + 7) / 8));
    if (type == 9) {
        if (cu_smem(s, k_q8b_tile<true>, sm, "k_q8b_tile")) return -1;
        cu_go(k_q8b_tile<true>, grid, MM_WARPS * 32, sm, s, L, (uint8_t *)dst);
    } else {
        if (cu_smem(s, k_q8b_tile<false>, sm, "k_q8b_tile")) return -1;
        cu_go(k_q8b_tile<false>, grid, MM_WARPS * 32, sm, s, L, (uint8_t *)dst);
    }
    CU_LAUNCHED("k_q8b_tile");
    return 0;
}
