// mmq_launch.cuh — the host side of the integer path (mmq.cuh): tuning switches, launch shapes and
// the choice of kernel per launch; part of matmul.cuh (included there only, after mmq.cuh).
#pragma once

#include "cuda/mmq.cuh"
#include "cuda/mmq_lane.cuh"

// ---- launch ------------------------------------------------------------------------------------

// Output rows per warp of the dp4a kernel: RL_CUDA_MMQ_NR=1|2 (default 2). Tuning only: both
// give the same bits (test_cuda_ops and the engine tests passed with each on the H200). H200 decode,
// Q4_K_M: 1 row 183.4, 2 rows 196.8 tok/s (the float GEMV 197.1); CF2: 188.9 / 193.8-195.3 (196-198).
// mmq_env12: a tuning variable that is 1 or 2 (unset or anything else: dflt), read once by the caller.
static inline int mmq_env12(const char *name, int dflt = 2) {
    const int v = cu_env_int(name, dflt);
    return v == 1 || v == 2 ? v : dflt;
}
static inline int mmq_vec_nr() {
    static const int nr = mmq_env12("RL_CUDA_MMQ_NR");
    return nr;
}

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
// super-blocks (the default, RL_CUDA_MMQ_RS=2: each lane group walks a 2-super-block row's two blocks),
// RL_CUDA_MMQ_RS=1: 2 for 2 super-blocks, 4 for 1; RL_CUDA_MMQ_RS=0: one row set; the same bits
// whatever the value. 4 sets halve the blocks of a grouped expert down projection (2,048 rows x 10
// experts, 96 registers: 5 blocks of 4 warps per SM), which then fits the H200 in one wave instead of
// two: 12-layer calibrated decode CF2 855-862 -> 889-901 tok/s, Q4_K_M 899-919 -> 923-949.
static inline int mmq_vec_rs(int n_in) {
    static const int mode = cu_env_int("RL_CUDA_MMQ_RS", 2);
    const int nsb = n_in / 256;
    if (mode < 1 || (nsb != 1 && nsb != 2)) return 1;
    return mode == 2 ? 4 : 4 / nsb;
}
// One-token launches with a lane per (row, super-block) (k_mmq_lane, mmq_lane.cuh): the default,
// RL_CUDA_MMQ_LANE=0 keeps k_mmq_vec (same bits). Rows of more than MQL_MAX_NSB super-blocks and the
// fused tails (RL_CUDA_FUSE) keep k_mmq_vec.
static inline bool mmq_lane_on() {
    static const bool v = cu_env_int("RL_CUDA_MMQ_LANE", 1) == 1;
    return v;
}
static inline bool mmq_lane_ok(int tt, int n_in, bool tail) {
    return tt == 1 && !tail && n_in / 256 <= MQL_MAX_NSB && mmq_lane_on();
}
// Lanes per super-block of k_mmq_lane (1 or 2; tuning, the same bits): RL_CUDA_MQL_SPL_K for the
// K-quants, RL_CUDA_MQL_SPL_IQ for the IQ types, halved while a row does not fit a warp. Default 1 for
// both: H200, 12-layer calibrated decode, medians of 3 interleaved rounds, CF2:
// SPL_IQ 1 / 2 / 4 = 1,032.0 / 1,016.7 / 940.1 tok/s, SPL_K 1 / 2 / 4 = 1,016.7 / 955.7 / 896.3;
// Q4_K_M: SPL_K 1 / 2 / 4 = 1,125.8 / 1,001.2 / 878.8 (more lanes per super-block only add shuffles
// and smaller row groups; the IQ lookups' longer chains did not need them). 4 lanes, the slowest
// everywhere, is no longer built (compile time).
static inline int mql_spl(uint32_t type, int nsb) {
    static const int k = mmq_env12("RL_CUDA_MQL_SPL_K", 1), iq = mmq_env12("RL_CUDA_MQL_SPL_IQ", 1);
    int s = mmq_iq(type) ? iq : k;
    while (s > 1 && !mql_rpw(nsb, s)) s >>= 1;
    return s;
}
// Rows per block of the integer path (host side; matmul_go's segment layout); tc: k_mmq_tc; lane:
// k_mmq_lane.
static inline int mmq_rows_per_block(uint32_t type, bool gateup, int tt, bool small, bool tc, bool lane,
                                     int n_in) {
    if (lane) return MM_WARPS * mql_rpw(n_in / 256, mql_spl(type, n_in / 256));
    if (tc) return gateup ? MMQ_TC_ROWS / 2 : MMQ_TC_ROWS;
    if (!mmq_vec_tiles(type, tt, small)) return MM_WARPS * (gateup ? MMQ_MMA_ROWS / 2 : MMQ_MMA_ROWS);
    return MM_WARPS * mmq_vec_nr() * (tt == 1 ? mmq_vec_rs(n_in) : 1);
}

// Let kernel K take sm bytes of dynamic shared memory (opting in above 48 KiB, again whenever a
// launch of this kernel needs more than before: long rows).
template <typename K> static int mmq_optin(K kern, size_t sm, size_t &opted) {
    if (sm > opted) {
        if (CU_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm)))
            return -1;
        opted = sm;
    }
    return 0;
}
// Launch kernel K with sm bytes of dynamic shared memory.
template <typename K> static int mmq_go(K kern, dim3 grid, const mm_launch &L, size_t sm, size_t &opted) {
    if (mmq_optin(kern, sm, opted)) return -1;
    cu_go(kern, grid, MM_WARPS * 32, sm, L.s, L);
    return 0;
}
// How many blocks of kern with sm bytes of shared memory fit on the GPU at once (opted in already):
// the occupancy query, answered from (last_sm, last_n) — the caller's, one pair per kernel — when sm
// is the one asked last (a kernel serves few row widths).
template <typename K> static int mmq_resident(K kern, size_t sm, size_t &last_sm, unsigned &last_n) {
    static int nsm = 0; // the device's SMs
    if (sm != last_sm) {
        int dev = 0, per_sm = 0;
        if (!nsm && (CU_CHECK(cudaGetDevice(&dev)) ||
                     CU_CHECK(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev))))
            return -1;
        if (CU_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, MM_WARPS * 32, sm)))
            return -1;
        last_n = (unsigned)(nsm * (per_sm > 0 ? per_sm : 1));
        last_sm = sm;
    }
    return 0;
}
// Launch kern with sm bytes of shared memory; streaming (SM): only as many blocks as fit on the GPU
// at once (at most grid.x; the occupancy answer cached in occ_sm / resident, the caller's per kernel).
template <typename K>
static int mmq_go_fit(K kern, dim3 grid, const mm_launch &L, size_t sm, bool streaming, size_t &opted,
                      size_t &occ_sm, unsigned &resident) {
    if (streaming) {
        if (mmq_optin(kern, sm, opted) || mmq_resident(kern, sm, occ_sm, resident)) return -1;
        grid.x = grid.x < resident ? grid.x : resident;
    }
    return mmq_go(kern, grid, L, sm, opted);
}
// A k_mmq_vec launch. SM (streaming: dense, one token): only the blocks that fit on the GPU at once
// (at most the virtual blocks), each walking the virtual blocks with two staged slices per warp.
template <int TYPE, int TT, bool GU, int NR, bool PF, int RS, bool ST = false, bool SM = false>
static int mmq_go_vec(dim3 grid, const mm_launch &L) {
    static size_t opted = 48 << 10;
    auto kern = k_mmq_vec<TYPE, TT, GU, NR, PF, RS, ST, SM>;
    const size_t sm = ST || SM ? mmq_vec_st_off(L.n_in, TT) +
                                     (SM ? 2 : 1) * mmq_vec_st_bytes(L.seg[0].row_bytes, NR * RS, GU)
                               : mmq_smem(L.n_in, TT);
    static size_t occ_sm = 0;
    static unsigned resident = 0;
    return mmq_go_fit(kern, grid, L, sm, SM, opted, occ_sm, resident);
}
// A k_mmq_lane launch; SM (dense one-token launches, RL_CUDA_MMQ_SM as k_mmq_vec's): only the blocks
// that fit on the GPU at once, each walking the row blocks.
template <int TYPE, bool GU, bool SM, int SPL> static int mql_go(dim3 grid, const mm_launch &L) {
    static size_t opted = 48 << 10;
    auto kern = k_mmq_lane<TYPE, GU, SM, SPL>;
    const size_t sm = mql_smem(L.seg[0].row_bytes, L.n_in / 256, SPL, GU, SM);
    static size_t occ_sm = 0;
    static unsigned resident = 0;
    return mmq_go_fit(kern, grid, L, sm, SM, opted, occ_sm, resident);
}
static inline bool mmq_vec_sm();
template <int TYPE, int SPL> static int mql_launch(dim3 grid, const mm_launch &L, bool gateup) {
    if (mmq_vec_sm() && !L.grouped && L.T == 1)
        return gateup ? mql_go<TYPE, true, true, SPL>(grid, L) : mql_go<TYPE, false, true, SPL>(grid, L);
    return gateup ? mql_go<TYPE, true, false, SPL>(grid, L) : mql_go<TYPE, false, false, SPL>(grid, L);
}
template <int TYPE> static int mql_launch(dim3 grid, const mm_launch &L, bool gateup) {
    switch (mql_spl(TYPE, L.n_in / 256)) {
    case 2: return mql_launch<TYPE, 2>(grid, L, gateup);
    default: return mql_launch<TYPE, 1>(grid, L, gateup);
    }
}
// Decode rows with the next step's weights in flight: RL_CUDA_MMQ_PF=1 (default 0; same bits).
static inline bool mmq_vec_pf() {
    static const bool pf = cu_env_int("RL_CUDA_MMQ_PF", 0) == 1;
    return pf;
}
// Decode rows staged in shared memory (k_mmq_vec's ST): the default, RL_CUDA_MMQ_ST=0 loads them
// directly (same bits). H200, 12-layer calibrated decode: CF2 691-695 -> 798-804 tok/s,
// Q4_K_M 720-732 -> 822-838, Q4_K_M at 32K depth 654 -> 743; the Q5_K output head 186 -> 136 us.
static inline bool mmq_vec_st() {
    static const bool st = cu_env_int("RL_CUDA_MMQ_ST", 1) == 1;
    return st;
}
// Dense one-token launches streamed (k_mmq_vec's SM): the default, RL_CUDA_MMQ_SM=0 gives one
// block per row block (same bits). H200, 12-layer calibrated decode: CF2
// 810 -> 837-839 tok/s, Q4_K_M 829-848 -> 875; with the split DeltaNet step 844-847 / 900-904.
static inline bool mmq_vec_sm() {
    static const bool sm = cu_env_int("RL_CUDA_MMQ_SM", 1) == 1;
    return sm;
}
// The launch of a (PF, RS, ST, SM) variant with the NR (RL_CUDA_MMQ_NR) and gate/up instance.
template <int TYPE, int TT, bool PF, int RS, bool ST = false, bool SM = false>
static int mmq_go_vec_nr(dim3 grid, const mm_launch &L, bool gateup) {
    if (mmq_vec_nr() == 1)
        return gateup ? mmq_go_vec<TYPE, TT, true, 1, PF, RS, ST, SM>(grid, L)
                      : mmq_go_vec<TYPE, TT, false, 1, PF, RS, ST, SM>(grid, L);
    return gateup ? mmq_go_vec<TYPE, TT, true, 2, PF, RS, ST, SM>(grid, L)
                  : mmq_go_vec<TYPE, TT, false, 2, PF, RS, ST, SM>(grid, L);
}
template <int TYPE, int TT> static int mmq_go_vec(dim3 grid, const mm_launch &L, bool gateup) {
    if constexpr (TT == 1) {
        const int rs = mmq_vec_rs(L.n_in);
        const size_t stb = mmq_vec_st_bytes(L.seg[0].row_bytes, mmq_vec_nr() * rs, gateup);
        if (mmq_vec_sm() && !L.grouped && L.T == 1 && stb && 2 * stb <= MMQ_ST_MAX) {
            if (rs == 2) return mmq_go_vec_nr<TYPE, 1, false, 2, true, true>(grid, L, gateup);
            if (rs == 4) return mmq_go_vec_nr<TYPE, 1, false, 4, true, true>(grid, L, gateup);
            return mmq_go_vec_nr<TYPE, 1, false, 1, true, true>(grid, L, gateup);
        }
        if (mmq_vec_st() && stb) {
            if (rs == 2) return mmq_go_vec_nr<TYPE, 1, false, 2, true>(grid, L, gateup);
            if (rs == 4) return mmq_go_vec_nr<TYPE, 1, false, 4, true>(grid, L, gateup);
            return mmq_go_vec_nr<TYPE, 1, false, 1, true>(grid, L, gateup);
        }
        if (rs == 2) return mmq_go_vec_nr<TYPE, 1, false, 2>(grid, L, gateup);
        if (rs == 4) return mmq_go_vec_nr<TYPE, 1, false, 4>(grid, L, gateup);
        if (mmq_vec_pf()) return mmq_go_vec_nr<TYPE, 1, true, 1>(grid, L, gateup);
    }
    return mmq_go_vec_nr<TYPE, TT, false, 1>(grid, L, gateup);
}
// Token tiles per warp of dense prefill launches: RL_CUDA_MMQ_NT=1|2 (default 2; same bits). H200,
// Q4_K_M prompt 2048: 1 tile 4,667 tok/s, 2 tiles 5,049 (bench/results/2026-12-01-cuda-mmq-h200.md).
static inline int mmq_mma_nt() {
    static const int nt = mmq_env12("RL_CUDA_MMQ_NT");
    return nt;
}
template <int TYPE, bool GU, int NT> static int mmq_go_mma(dim3 grid, const mm_launch &L) {
    static size_t opted = 48 << 10;
    return mmq_go(k_mmq_mma<TYPE, GU, NT>, grid, L, mmq_smem(L.n_in, 8 * NT), opted);
}
template <int TYPE, bool GU> static int mmq_go_mma(dim3 grid, const mm_launch &L) {
    if (L.grouped || mmq_mma_nt() == 1) return mmq_go_mma<TYPE, GU, 1>(grid, L);
    grid.y = (L.T + MMQ_MAX_TT - 1) / MMQ_MAX_TT;
    return mmq_go_mma<TYPE, GU, MMQ_MAX_TT / 8>(grid, L);
}

// Tokens of a dense staged tile: RL_CUDA_MMQ_TC_TT=16|32 (default 32; tuning: 16 takes fewer
// registers and stages the weights twice as often; the same bits).
static inline int mmq_tc_dense_tt() {
    static const int tt = cu_env_int("RL_CUDA_MMQ_TC_TT", MMQ_TC_DENSE_TT) == 16 ? 16 : MMQ_TC_DENSE_TT;
    return tt;
}
// Staged tensor-core tiles (k_mmq_tc) after one quantisation of the launch's input rows into L.xq.
template <int TYPE, bool GU, int NT> static int mmq_go_tc(dim3 grid, const mm_launch &L) {
    static size_t opted = 48 << 10;
    return mmq_go(k_mmq_tc<TYPE, GU, NT>, grid, L, mmq_tc_smem<TYPE, NT>(), opted);
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
    const int tt = L.grouped ? L.g.tt : mmq_tc_dense_tt();
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
