// mmq_launch.cuh — the host side of the integer path (mmq.cuh): tuning switches, launch shapes and
// the choice of kernel per launch; part of matmul.cuh (included there only, after mmq.cuh).
#pragma once

#include "cuda/mmq.cuh"
#include "cuda/mmq_lane.cuh"

// ---- launch ------------------------------------------------------------------------------------

// The switches below are the context's (cu_dev.tune, parsed once in src/backend/cuda_tune.c); the shared
// memory a launch shape needs is checked against the device's (cu_dev.smem_max): where the fast shape
// does not fit, the launch takes a smaller one with the same bits (fewer tokens per tile, no staged
// weights), so a 99 KiB GPU (sm_86 / sm_89 / sm_120) runs every path a 227 KiB one (sm_90) does.

// Whether a launch without the staged tiles runs the dp4a kernel: decode rows, small batches, and
// the IQ types' prefill tiles without a scratch. k_mmq_mma takes the K-quants only: its IQ outputs
// were wrong on the H200 (IQ2_XS all zeros, the others far off). The cause, found in
// its PTX afterwards: nvcc 13.0 dropped the loop that filled the MMA B operands, the `#pragma
// unroll` loop after an unbraced `if constexpr (!mmq_iq(TYPE)) #pragma unroll for (...) {...}`
// (false for the IQ types), leaving undefined registers; tests/test_cuda_source.py now refuses
// that shape. Giving k_mmq_mma the IQ types again waits for a GPU run.
__host__ __device__ constexpr bool mmq_vec_tiles(uint32_t type, int tt, bool small) {
    return tt == 1 || small || mmq_iq(type);
}
// Row sets per warp of a decode launch (k_mmq_vec's RS) for rows of n_in columns: 4 for rows of 1 or 2
// super-blocks (each lane group walks a 2-super-block row's two blocks), else 1; the same bits either
// way. 4 sets halve the blocks of a grouped expert down projection (2,048 rows x 10 experts, 96
// registers: 5 blocks of 4 warps per SM), which then fits the H200 in one wave instead of two: 12-layer
// calibrated decode CF2 855-862 -> 889-901 tok/s, Q4_K_M 899-919 -> 923-949 (over 2 sets for 2
// super-blocks, now gone with 1 set everywhere: bench/results/2026-12-06-cuda-variants-removed.md).
static inline int mmq_vec_rs(int n_in) {
    const int nsb = n_in / 256;
    return nsb == 1 || nsb == 2 ? 4 : 1;
}
// One-token launches with a lane per (row, super-block) (k_mmq_lane, mmq_lane.cuh): the default,
// RL_CUDA_MMQ_LANE=0 keeps k_mmq_vec (same bits). Rows of more than MQL_MAX_NSB super-blocks and the
// fused tails (RL_CUDA_FUSE) keep k_mmq_vec.
static inline bool mmq_lane_ok(const cu_dev *d, uint32_t type, int tt, int n_in, size_t row_bytes,
                               bool gateup, bool tail) {
    // (its one-block-per-row-block shape must fit the device; the streamed one is checked at launch)
    return tt == 1 && !tail && n_in / 256 <= MQL_MAX_NSB && d->tune.mmq_lane &&
           cu_dev_fits(d, mql_smem(row_bytes, n_in / 256, gateup, false));
}
// Rows per block of the integer path (host side; matmul_go's segment layout); tc: k_mmq_tc; lane:
// k_mmq_lane.
static inline int mmq_rows_per_block(const cu_dev *d, uint32_t type, bool gateup, int tt, bool small, bool tc,
                                     bool lane, int n_in) {
    if (lane) return MM_WARPS * mql_rpw(n_in / 256);
    if (tc) return gateup ? MMQ_TC_ROWS / 2 : MMQ_TC_ROWS;
    if (!mmq_vec_tiles(type, tt, small)) return MM_WARPS * (gateup ? MMQ_MMA_ROWS / 2 : MMQ_MMA_ROWS);
    return MM_WARPS * MMQ_VEC_NR * (tt == 1 ? mmq_vec_rs(n_in) : 1);
}

// Launch kernel K (named `what` in errors) with sm bytes of dynamic shared memory (opted in on the
// context's device as needed).
template <typename K> static int mmq_go(K kern, dim3 grid, const mm_launch &L, size_t sm, const char *what) {
    if (cu_smem(L.s, kern, sm, what)) return -1;
    cu_go(kern, grid, MM_WARPS * 32, sm, L.s, L);
    return 0;
}
// Launch kern with sm bytes of shared memory; streaming (SM): only as many blocks as fit on the GPU
// at once (at most grid.x; the occupancy answer kept in the device struct, per kernel).
template <typename K>
static int mmq_go_fit(K kern, dim3 grid, const mm_launch &L, size_t sm, bool streaming, const char *what) {
    if (streaming) {
        unsigned resident = 0;
        if (cu_smem(L.s, kern, sm, what) ||
            cu_dev_resident(L.s.dev, (const void *)kern, MM_WARPS * 32, sm, &resident))
            return -1;
        grid.x = grid.x < resident ? grid.x : resident;
    }
    return mmq_go(kern, grid, L, sm, what);
}
// A k_mmq_vec launch. SM (streaming: dense, one token): only the blocks that fit on the GPU at once
// (at most the virtual blocks), each walking the virtual blocks with two staged slices per warp.
template <int TYPE, int TT, bool GU, int RS, bool ST = false, bool SM = false>
static int mmq_go_vec(dim3 grid, const mm_launch &L) {
    auto kern = k_mmq_vec<TYPE, TT, GU, RS, ST, SM>;
    const size_t sm = ST || SM ? mmq_vec_st_off(L.n_in, TT) +
                                     (SM ? 2 : 1) * mmq_vec_st_bytes(L.seg[0].row_bytes, MMQ_VEC_NR * RS, GU)
                               : mmq_smem(L.n_in, TT);
    return mmq_go_fit(kern, grid, L, sm, SM, "k_mmq_vec");
}
// A k_mmq_lane launch; SM (dense one-token launches, RL_CUDA_MMQ_SM as k_mmq_vec's): only the blocks
// that fit on the GPU at once, each walking the row blocks.
template <int TYPE, bool GU, bool SM> static int mql_go(dim3 grid, const mm_launch &L) {
    auto kern = k_mmq_lane<TYPE, GU, SM>;
    const size_t sm = mql_smem(L.seg[0].row_bytes, L.n_in / 256, GU, SM);
    return mmq_go_fit(kern, grid, L, sm, SM, "k_mmq_lane");
}
static inline bool mmq_vec_sm(const cu_dev *d);
template <int TYPE> static int mql_launch(dim3 grid, const mm_launch &L, bool gateup) {
    // streamed where its two slices per warp fit the device (else one block per row block: same bits)
    if (mmq_vec_sm(L.s.dev) && !L.grouped && L.T == 1 &&
        cu_dev_fits(L.s.dev, mql_smem(L.seg[0].row_bytes, L.n_in / 256, gateup, true)))
        return gateup ? mql_go<TYPE, true, true>(grid, L) : mql_go<TYPE, false, true>(grid, L);
    return gateup ? mql_go<TYPE, true, false>(grid, L) : mql_go<TYPE, false, false>(grid, L);
}
// Decode rows staged in shared memory (k_mmq_vec's ST): the default, RL_CUDA_MMQ_ST=0 loads them
// directly (same bits). H200, 12-layer calibrated decode: CF2 691-695 -> 798-804 tok/s,
// Q4_K_M 720-732 -> 822-838, Q4_K_M at 32K depth 654 -> 743; the Q5_K output head 186 -> 136 us.
static inline bool mmq_vec_st(const cu_dev *d) { return d->tune.mmq_st; }
// Dense one-token launches streamed (k_mmq_vec's SM): the default, RL_CUDA_MMQ_SM=0 gives one
// block per row block (same bits). H200, 12-layer calibrated decode: CF2
// 810 -> 837-839 tok/s, Q4_K_M 829-848 -> 875; with the split DeltaNet step 844-847 / 900-904.
static inline bool mmq_vec_sm(const cu_dev *d) { return d->tune.mmq_sm; }
// The launch of an (RS, ST, SM) variant with its gate/up instance.
template <int TYPE, int TT, int RS, bool ST = false, bool SM = false>
static int mmq_go_vec_gu(dim3 grid, const mm_launch &L, bool gateup) {
    return gateup ? mmq_go_vec<TYPE, TT, true, RS, ST, SM>(grid, L)
                  : mmq_go_vec<TYPE, TT, false, RS, ST, SM>(grid, L);
}
template <int TYPE, int TT> static int mmq_go_vec(dim3 grid, const mm_launch &L, bool gateup) {
    if constexpr (TT == 1) {
        const cu_dev *d = L.s.dev;
        const int rs = mmq_vec_rs(L.n_in);
        const size_t stb = mmq_vec_st_bytes(L.seg[0].row_bytes, MMQ_VEC_NR * rs, gateup),
                     off = mmq_vec_st_off(L.n_in, 1);
        // the staged shapes where their slices fit the device (else the direct loads: the same bits)
        if (mmq_vec_sm(d) && !L.grouped && L.T == 1 && stb && 2 * stb <= MMQ_ST_MAX &&
            cu_dev_fits(d, off + 2 * stb)) {
            if (rs == 4) return mmq_go_vec_gu<TYPE, 1, 4, true, true>(grid, L, gateup);
            return mmq_go_vec_gu<TYPE, 1, 1, true, true>(grid, L, gateup);
        }
        if (mmq_vec_st(d) && stb && cu_dev_fits(d, off + stb)) {
            if (rs == 4) return mmq_go_vec_gu<TYPE, 1, 4, true>(grid, L, gateup);
            return mmq_go_vec_gu<TYPE, 1, 1, true>(grid, L, gateup);
        }
        if (rs == 4) return mmq_go_vec_gu<TYPE, 1, 4>(grid, L, gateup);
    }
    return mmq_go_vec_gu<TYPE, TT, 1>(grid, L, gateup);
}
// Token tiles per warp of dense prefill launches: RL_CUDA_MMQ_NT=1|2 (default 2; same bits). H200,
// Q4_K_M prompt 2048: 1 tile 4,667 tok/s, 2 tiles 5,049 (bench/results/2026-12-01-cuda-mmq-h200.md).
// Two tiles only where their 16 quantised token rows fit the device (matmul_go takes the integer path
// only where one tile of 8 does).
static inline int mmq_mma_nt(const cu_dev *d, int n_in) {
    return d->tune.mmq_nt == 1 || !cu_dev_fits(d, mmq_smem(n_in, MMQ_MAX_TT)) ? 1 : 2;
}
template <int TYPE, bool GU, int NT> static int mmq_go_mma(dim3 grid, const mm_launch &L) {
    return mmq_go(k_mmq_mma<TYPE, GU, NT>, grid, L, mmq_smem(L.n_in, 8 * NT), "k_mmq_mma");
}
template <int TYPE, bool GU> static int mmq_go_mma(dim3 grid, const mm_launch &L) {
    if (L.grouped || mmq_mma_nt(L.s.dev, L.n_in) == 1) return mmq_go_mma<TYPE, GU, 1>(grid, L);
    grid.y = (L.T + MMQ_MAX_TT - 1) / MMQ_MAX_TT;
    return mmq_go_mma<TYPE, GU, MMQ_MAX_TT / 8>(grid, L);
}

// Tokens of a dense staged tile: RL_CUDA_MMQ_TC_TT=16|32 (default 32; tuning: 16 takes fewer
// registers and stages the weights twice as often; the same bits).
static inline int mmq_tc_dense_tt(const cu_dev *d) { return d->tune.mmq_tc_tt == 16 ? 16 : MMQ_TC_DENSE_TT; }
// Whether k_mmq_tc's largest tile (32 tokens) of `type` fits the device (matmul_go and the MoE plan's
// tile size take the staged tiles only then; k_mmq_mma and k_mmq_vec give the same bits).
static inline bool mmq_tc_fits(const cu_dev *d, uint32_t type) {
    switch (type) {
    case T_Q2_K: return cu_dev_fits(d, mmq_tc_smem<T_Q2_K, 4>());
    case T_Q3_K: return cu_dev_fits(d, mmq_tc_smem<T_Q3_K, 4>());
    case T_Q4_K: return cu_dev_fits(d, mmq_tc_smem<T_Q4_K, 4>());
    case T_Q5_K: return cu_dev_fits(d, mmq_tc_smem<T_Q5_K, 4>());
    case T_Q6_K: return cu_dev_fits(d, mmq_tc_smem<T_Q6_K, 4>());
    case T_IQ2_XXS: return cu_dev_fits(d, mmq_tc_smem<T_IQ2_XXS, 4>());
    case T_IQ2_XS: return cu_dev_fits(d, mmq_tc_smem<T_IQ2_XS, 4>());
    case T_IQ2_S: return cu_dev_fits(d, mmq_tc_smem<T_IQ2_S, 4>());
    case T_IQ3_XXS: return cu_dev_fits(d, mmq_tc_smem<T_IQ3_XXS, 4>());
    case T_IQ3_S: return cu_dev_fits(d, mmq_tc_smem<T_IQ3_S, 4>());
    case T_IQ4_XS: return cu_dev_fits(d, mmq_tc_smem<T_IQ4_XS, 4>());
    case T_IQ1_S: return cu_dev_fits(d, mmq_tc_smem<T_IQ1_S, 4>());
    case T_IQ1_M: return cu_dev_fits(d, mmq_tc_smem<T_IQ1_M, 4>());
    default: return false;
    }
}
// Staged tensor-core tiles (k_mmq_tc) after one quantisation of the launch's input rows into L.xq.
template <int TYPE, bool GU, int NT> static int mmq_go_tc(dim3 grid, const mm_launch &L) {
    return mmq_go(k_mmq_tc<TYPE, GU, NT>, grid, L, mmq_tc_smem<TYPE, NT>(), "k_mmq_tc");
}
template <int TYPE, int NT> static int mmq_go_tc(dim3 grid, const mm_launch &L, bool gateup) {
    return gateup ? mmq_go_tc<TYPE, true, NT>(grid, L) : mmq_go_tc<TYPE, false, NT>(grid, L);
}
template <int TYPE> static int mmq_launch_tc(const mm_launch &L, bool gateup) {
    const long tasks = (long)L.xq_rows * (L.n_in / 256);
    cu_go(k_q8k_rows, (unsigned)((tasks * 8 + 255) / 256), 256, 0, L.s, L.x, L.ldx, L.xq_rows, L.n_in,
          (uint8_t *)L.xq);
    CU_LAUNCHED("k_q8k_rows");
    // tokens per block: grouped, the plan's tile (CU_TT, or 2 CU_TT from cu_matmul_group_tt); dense, 32 or 16
    const int tt = L.grouped ? L.g.tt : mmq_tc_dense_tt(L.s.dev);
    const dim3 grid(L.seg_start[L.nseg], L.grouped ? L.g.max_tiles : (L.T + tt - 1) / tt);
    switch (tt / 8) {
    case 1: return mmq_go_tc<TYPE, 1>(grid, L, gateup);
    case 2: return mmq_go_tc<TYPE, 2>(grid, L, gateup);
    default: return mmq_go_tc<TYPE, 4>(grid, L, gateup);
    }
}

template <int TYPE> static int mmq_launch_type(const mm_launch &L, bool gateup, int tt) {
    dim3 grid(L.seg_start[L.nseg], L.grouped ? L.g.max_tiles : (L.T + tt - 1) / tt);
    int rc = 0;
    if (L.xq) rc = mmq_launch_tc<TYPE>(L, gateup);
    else if (tt == 1) rc = L.lane ? mql_launch<TYPE>(grid, L, gateup) : mmq_go_vec<TYPE, 1>(grid, L, gateup);
    else if (L.small && tt == 2) rc = mmq_go_vec<TYPE, 2>(grid, L, gateup);
    else if (L.small && tt == 4) rc = mmq_go_vec<TYPE, 4>(grid, L, gateup);
    else if (mmq_vec_tiles(TYPE, tt, L.small)) rc = mmq_go_vec<TYPE, 8>(grid, L, gateup);
    else if constexpr (!mmq_iq(TYPE))
        rc = gateup ? mmq_go_mma<TYPE, true>(grid, L) : mmq_go_mma<TYPE, false>(grid, L);
    if (rc) return rc;
    CU_LAUNCHED("k_mmq");
    return 0;
}
