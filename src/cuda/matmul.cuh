// matmul.cuh — the one matmul kernel: dequantise-on-the-fly, any weight type, dense or
// grouped by expert, optional gate/up (silu(g)*u) and conv epilogues.
//
// Work split (the batch-invariance rule of cuda_ops.h): a warp owns NR weight rows and a tile
// of TT tokens; the input dimension is cut into units of 8 values and lane L takes units
// L, L+32, L+64, ... For each (row, token) the lane accumulates its units in order with fmaf,
// then one butterfly sums the 32 lanes. That sequence is the same for every (NR, TT), so a
// decode GEMV (NR=1, TT=1) and a prefill tile (NR=8, TT=8) give bit-identical outputs.
// Block: 4 warps. grid.x: row blocks of all segments; grid.y: token tiles (dense) or plan
// tiles (grouped; blocks past *n_tiles exit at once).
#pragma once

#include <cuda_pipeline.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/quant.cuh"
#include "cuda/rowops.cuh"

#define MM_WARPS 4
// Decode / small-batch launches stage each warp's weight rows in shared memory first (below):
// at most this many bytes per warp per chunk of the row.
#define MM_STAGE_WARP_BYTES 8192

struct mm_launch {
    cu_seg seg[3];
    int nseg;
    int seg_start[4]; // first grid.x block of each segment (+ total)
    const float *x;
    int ldx, T, n_in;
    cu_group g;
    bool grouped;
    bool small; // dense T <= CU_SMALL_T: decode-shaped warps (1 row, 2 for gate/up) x tiles of tt tokens
    cu_conv conv;
    int st_units, st_row; // staged variants: units per chunk (a multiple of 32), smem bytes per row
    cu_tail tail;         // one-row dense launches: the last block's extra step (cuda_ops.h)
    bool q8;              // the integer path (mmq.cuh) for this launch's K-quant type
    cu_qtabs tb;          // the integer path of the IQ types: the grids
    const uint8_t *xq;    // prefill tiles of the integer path: scratch of the quantised input rows (or NULL)
    int xq_rows;          // rows of x quantised into it
    bool lane;            // one-token launches of the integer path: k_mmq_lane (mmq_lane.cuh)
    cu_stream s;
};

// Copy n bytes (n even) from global src to shared dst (16-byte aligned) with the warp's lanes:
// asynchronous 16-, 8- or 4-byte copies (cp.async) when src and n allow, else 2-byte loads.
// The caller waits (__pipeline_wait_prior) and syncs the warp before reading.
__device__ __forceinline__ void stage_copy(uint8_t *dst, const uint8_t *src, int n, int lane) {
    const unsigned al = (unsigned)((uintptr_t)src | (uintptr_t)n);
    if (!(al & 15))
        for (int o = lane * 16; o < n; o += 32 * 16) __pipeline_memcpy_async(dst + o, src + o, 16);
    else if (!(al & 7))
        for (int o = lane * 8; o < n; o += 32 * 8) __pipeline_memcpy_async(dst + o, src + o, 8);
    else if (!(al & 3))
        for (int o = lane * 4; o < n; o += 32 * 4) __pipeline_memcpy_async(dst + o, src + o, 4);
    else
        for (int o = lane * 2; o < n; o += 32 * 2) *(uint16_t *)(dst + o) = *(const uint16_t *)(src + o);
}

// CPU ops_conv_step for one channel: double sum over the window, then the state shift.
__device__ __forceinline__ float conv_channel(const float *__restrict__ w, float *state, int C, int c, int kw,
                                              float x) {
    double s = 0;
    for (int j = 0; j < kw - 1; j++) s += (double)w[j] * (double)state[(size_t)j * C + c];
    s += (double)w[kw - 1] * (double)x;
    for (int j = 0; j + 1 < kw - 1; j++) state[(size_t)j * C + c] = state[(size_t)(j + 1) * C + c];
    if (kw > 1) state[(size_t)(kw - 2) * C + c] = x;
    return silu_f((float)s);
}

// Sum N values over the 32 lanes with the butterfly's tree (warp_sum: at offset o a lane adds
// its partner's value), but scattering: while a lane holds n >= 2 values, at offset o it keeps
// one half (the upper one if its lane bit o is set) and adds the partner's copy of that half.
// Every partial sum is the butterfly's (same operands, same order), so the result is bit-identical
// to warp_sum on each value, with ~N shuffles instead of 5N. Afterwards the lane holds
// max(N/32, 1) sums in v[0..), flat indices off.. (returned); for N < 32 the 32/N lanes of a
// group hold the same sums.
template <int K, int NR, int TT> struct rs_level { // level K: offset 16 >> K, N >> K values held
    static __device__ __forceinline__ void run(float (&a)[NR][TT], int lane, int &off) {
        constexpr int N = NR * TT, o = 16 >> K, n = N >> K;
        if constexpr (n >= 2) {
            constexpr int half = n / 2;
            const bool up = lane & o;
#pragma unroll
            for (int j = 0; j < half; j++) {
                const float send = up ? a[j / TT][j % TT] : a[(j + half) / TT][(j + half) % TT];
                const float keep = up ? a[(j + half) / TT][(j + half) % TT] : a[j / TT][j % TT];
                a[j / TT][j % TT] = keep + __shfl_xor_sync(FULL_MASK, send, o);
            }
            off += up ? half : 0;
        } else {
            a[0][0] += __shfl_xor_sync(FULL_MASK, a[0][0], o);
        }
        if constexpr (K < 4) rs_level<K + 1, NR, TT>::run(a, lane, off);
    }
};
template <int NR, int TT> __device__ __forceinline__ int warp_reduce_scatter(float (&a)[NR][TT], int lane) {
    int off = 0;
    rs_level<0, NR, TT>::run(a, lane, off);
    return off;
}

// One unit u of every row (weights at rows[i], unit index uu within them) times the TT tokens.
template <int TYPE, int NR, int TT>
__device__ __forceinline__ void mm_unit(const cu_qtabs &tb, const uint8_t *const (&rows)[NR], int uu, int u,
                                        const float *const (&xr)[TT], float (&acc)[NR][TT]) {
    // all rows' weights of this unit first, then stream the tokens through them
    float wv[NR][8];
#pragma unroll
    for (int i = 0; i < NR; i++) {
        int sub;
        const uint8_t *blk = unit_block<TYPE>(rows[i], uu, sub);
        deq8<TYPE>(tb, blk, sub, wv[i]);
    }
#pragma unroll
    for (int j = 0; j < TT; j++) {
        const float4 p0 = __ldg((const float4 *)(xr[j] + 8 * u)),
                     p1 = __ldg((const float4 *)(xr[j] + 8 * u + 4));
        const float xv[8] = {p0.x, p0.y, p0.z, p0.w, p1.x, p1.y, p1.z, p1.w};
#pragma unroll
        for (int i = 0; i < NR; i++)
#pragma unroll
            for (int e = 0; e < 8; e++) acc[i][j] = fmaf(wv[i][e], xv[e], acc[i][j]);
    }
}

// ST (staged): the warp first copies its rows' bytes of a chunk of units into shared memory with
// wide asynchronous copies, all in flight at once (the whole row of a decode GEMV when it fits
// MM_STAGE_WARP_BYTES), then every lane decodes its units from there. The lane -> unit mapping
// and the order of the fmaf chain are unchanged: staged and unstaged launches give the same bits.
template <int TYPE, int NR, int TT, bool GU, bool ST>
__device__ __forceinline__ void mm_body(const cu_qtabs &tb, const mm_launch &a) {
    constexpr int ROWS = GU ? NR / 2 : NR; // output rows per warp
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    // segment and first row
    int si = 0;
    while (si + 1 < a.nseg && (int)blockIdx.x >= a.seg_start[si + 1]) si++;
    const cu_seg &sg = a.seg[si];
    const int r0 = ((int)blockIdx.x - a.seg_start[si]) * (MM_WARPS * ROWS) + warp * ROWS;
    if (r0 >= sg.n_out) return;
    // token tile
    int start, count, expert = 0;
    if (a.grouped) {
        if ((int)blockIdx.y >= *a.g.n_tiles) return;
        const cu_tile t = a.g.tiles[blockIdx.y];
        start = t.start;
        count = t.count;
        expert = t.expert;
    } else {
        start = blockIdx.y * TT;
        count = min(TT, a.T - start);
    }
    const uint8_t *wbase = sg.wt ? sg.wt[expert] : sg.w + (size_t)expert * sg.expert_stride;
    const uint8_t *wbase2 = !GU      ? nullptr
                            : sg.wt2 ? sg.wt2[expert]
                                     : sg.w2 + (size_t)expert * sg.expert_stride;
    const uint8_t *wr[NR];
#pragma unroll
    for (int i = 0; i < ROWS; i++) {
        const int r = min(r0 + i, sg.n_out - 1);
        wr[i] = wbase + (size_t)r * sg.row_bytes;
        if constexpr (GU) wr[ROWS + i] = wbase2 + (size_t)r * sg.row_bytes;
    }
    const float *xr[TT];
#pragma unroll
    for (int j = 0; j < TT; j++) {
        const int p = start + (j < count ? j : 0);
        const int in = a.g.pair_in ? a.g.pair_in[p] : p;
        xr[j] = a.x + (size_t)in * a.ldx;
    }
    float acc[NR][TT];
#pragma unroll
    for (int i = 0; i < NR; i++)
#pragma unroll
        for (int j = 0; j < TT; j++) acc[i][j] = 0.0f;

    const int nunits = a.n_in >> 3;
    if constexpr (ST) {
        extern __shared__ __align__(16) uint8_t mm_stage[];
        constexpr int UPB = qtraits<TYPE>::vals / 8, BB = qtraits<TYPE>::bytes;
        const uint8_t *sr[NR];
#pragma unroll
        for (int i = 0; i < NR; i++) sr[i] = mm_stage + (size_t)(warp * NR + i) * a.st_row;
        for (int u0 = 0; u0 < nunits; u0 += a.st_units) {
            const int u1 = min(nunits, u0 + a.st_units);
            const size_t b0 = (size_t)(u0 / UPB) * BB;
            const int nb = ((u1 - 1) / UPB + 1 - u0 / UPB) * BB;
#pragma unroll
            for (int i = 0; i < NR; i++) stage_copy((uint8_t *)sr[i], wr[i] + b0, nb, lane);
            __pipeline_commit();
            __pipeline_wait_prior(0);
            __syncwarp();
#pragma unroll(TT == 1 ? 4 : 1)
            for (int u = u0 + lane; u < u1; u += 32) mm_unit<TYPE, NR, TT>(tb, sr, u - u0, u, xr, acc);
            __syncwarp(); // the next chunk overwrites the buffer
        }
    } else {
#pragma unroll(TT == 1 ? 4 : 1)
        for (int u = lane; u < nunits; u += 32) mm_unit<TYPE, NR, TT>(tb, wr, u, u, xr, acc);
    }
    // lane sums; flat index f = i*TT + j (for gate/up the up rows are the upper half, f + N/2)
    constexpr int N = NR * TT, NV = N >= 32 ? N / 32 : 1, GRP = N >= 32 ? 1 : 32 / N;
    const int off = warp_reduce_scatter<NR, TT>(acc, lane);
    float upv[NV];
#pragma unroll
    for (int q = 0; q < NV; q++) upv[q] = GU ? __shfl_xor_sync(FULL_MASK, acc[q / TT][q % TT], 16) : 0.0f;
    if (lane % GRP) return;
#pragma unroll
    for (int q = 0; q < NV; q++) {
        const int f = off + q;
        if (GU && f >= N / 2) continue; // up values: stored with their gate by lane ^ 16
        const int i = f / TT, j = f % TT, r = r0 + i;
        if (r >= sg.n_out || j >= count) continue;
        float val = acc[q / TT][q % TT];
        if constexpr (GU) val = swiglu(val, upv[q]);
        const int p = start + j;
        const int orow = a.g.pair_out ? a.g.pair_out[p] : p;
        if (sg.epi == CU_EPI_CONV)
            val = conv_channel(a.conv.w + (size_t)r * a.conv.kw, a.conv.state, a.conv.C, r, a.conv.kw, val);
        sg.y[(size_t)orow * sg.ldy + r] = val;
    }
}

// The tail of a one-row dense launch (cuda_ops.h, cu_tail): every block counts itself done after
// its stores; the last one runs the per-row step on segment 0's output row.
__device__ __forceinline__ void mm_tail(const mm_launch &a) {
    __shared__ double red[32];
    if (!block_last(a.tail.counter, gridDim.x * gridDim.y)) return;
    const cu_seg &s0 = a.seg[0];
    if (a.tail.kind == CU_TAIL_ADD_NORM) {
        add_rmsnorm_row(a.tail.x, s0.y, a.tail.w, a.tail.out, s0.n_out, a.tail.eps, red);
    } else if (threadIdx.x < 32) {
        if (ROUTER_NV(s0.n_out) == 16)
            router_row<false, 16>(s0.y, s0.n_out, a.tail.K, 0, 1, a.tail.ids, a.tail.wts, a.tail.probs,
                                  a.tail.tiles, a.tail.n_tiles, a.tail.pair_in, a.tail.pair_out);
        else
            router_row<false, 32>(s0.y, s0.n_out, a.tail.K, 0, 1, a.tail.ids, a.tail.wts, a.tail.probs,
                                  a.tail.tiles, a.tail.n_tiles, a.tail.pair_in, a.tail.pair_out);
    }
    if (threadIdx.x == 0) *a.tail.counter = 0; // ready for the next launch (graph replays)
}

template <int TYPE, int NR, int TT, bool GU, bool ST>
__global__ void __launch_bounds__(MM_WARPS * 32) k_mm(cu_qtabs tb, mm_launch a) {
    pdl_enter();
    mm_body<TYPE, NR, TT, GU, ST>(tb, a);
    if constexpr (TT == 1 && !GU)
        if (a.tail.kind != CU_TAIL_NONE) mm_tail(a);
}

// Staged weights (mm_body's ST) for decode and small-batch launches, RL_CUDA_MM_STAGE: "iq" (the
// default: the IQ types, whose grid lookups lengthen the per-unit load chain), "1" every type, "0"
// none (the previous kernels). Same bits whatever the setting. H200, cf2 decode (
// bench/results/2026-12-01-cuda-decode-h200.md): IQ types only 197.0 tok/s, none 191.7, every
// type 179.4 (ncu: the IQ1_M expert launches 9-10 % faster; the dense K-quant GEMVs, whose loads
// are already all in flight, only pay the copy and the wait).
template <int TYPE> static inline bool mm_stage_on(const cu_dev *d) {
    // MXFP4 rows can start at odd addresses (17-byte blocks), which stage_copy cannot read: never staged
    if constexpr (TYPE == T_MXFP4) { return false; }
    constexpr bool iq = TYPE == T_IQ2_XXS || TYPE == T_IQ2_XS || TYPE == T_IQ2_S || TYPE == T_IQ3_XXS ||
                        TYPE == T_IQ3_S || TYPE == T_IQ1_S || TYPE == T_IQ1_M;
    const int m = d->tune.mm_stage;
    return m == 1 || (m == 2 && iq);
}

// The staging plan of a launch with NR rows per warp: chunks of whole 32-unit iterations (256
// values) of at most MM_STAGE_WARP_BYTES per warp (at least one iteration); returns the dynamic
// shared memory of a block.
template <int TYPE, int NR> static size_t mm_stage_plan(mm_launch &L) {
    constexpr int UPB = qtraits<TYPE>::vals / 8,
                  B256 = 32 / UPB * qtraits<TYPE>::bytes; // bytes of 256 values
    const int iters = (L.n_in / 8 + 31) / 32;
    int ipc = MM_STAGE_WARP_BYTES / (NR * B256);
    ipc = ipc < 1 ? 1 : ipc > iters ? iters : ipc;
    L.st_units = 32 * ipc;
    L.st_row = (ipc * B256 + 15) & ~15;
    return (size_t)MM_WARPS * NR * L.st_row;
}

template <int TYPE, int NR, int TT, bool GU> static void mm_go(const cu_qtabs &tb, dim3 grid, mm_launch L) {
    if (mm_stage_on<TYPE>(L.s.dev)) { // (at most MM_STAGE_WARP_BYTES per warp: under 48 KiB, any GPU)
        const size_t sm = mm_stage_plan<TYPE, NR>(L);
        cu_go(k_mm<TYPE, NR, TT, GU, true>, grid, MM_WARPS * 32, sm, L.s, tb, L);
    } else {
        cu_go(k_mm<TYPE, NR, TT, GU, false>, grid, MM_WARPS * 32, 0, L.s, tb, L);
    }
}

// Decode (TT = 1) and small batches (verify rows, tiles of TT = 2, 4 or 8 tokens): one weight row per
// warp (a gate and an up row for gate/up). The GEMVs are latency-bound: more, smaller warps keep more
// loads in flight than more rows per warp (H200, cf2 decode, unstaged: 1 row 169.7 tok/s, 2 161.7, 4 151,
// 8 120; the 2, 4 and 8-row decode launches are gone: bench/results/2026-12-06-cuda-variants-removed.md).
// Any rows per warp give the same bits (the batch-invariance rule above).
template <int TYPE, int TT>
static void mm_launch_small(const cu_qtabs &tb, dim3 grid, const mm_launch &L, bool gateup) {
    if (gateup) mm_go<TYPE, 2, TT, true>(tb, grid, L);
    else mm_go<TYPE, 1, TT, false>(tb, grid, L);
}

#include "cuda/mmq.cuh"
#include "cuda/mmq_launch.cuh"
#include "cuda/mmq_b32.cuh"

template <int TYPE> static int mm_launch_type(const mm_launch &L, bool gateup, int tt) {
    if constexpr (mmq_b32(TYPE)) {
        if (L.q8) return mmqb_launch_type<TYPE>(L, gateup, tt);
    } else if constexpr (mmq_type(TYPE)) {
        if (L.q8) return mmq_launch_type<TYPE>(L, gateup, tt);
    }
    const cu_qtabs &tb = cu_qtabs_get(L.s.dev);
    dim3 grid(L.seg_start[L.nseg], L.grouped ? L.g.max_tiles : (L.T + tt - 1) / tt);
    if (tt == 1) mm_launch_small<TYPE, 1>(tb, grid, L, gateup);
    else if (L.small) {
        if (tt == 2) mm_launch_small<TYPE, 2>(tb, grid, L, gateup);
        else if (tt == 4) mm_launch_small<TYPE, 4>(tb, grid, L, gateup);
        else mm_launch_small<TYPE, 8>(tb, grid, L, gateup);
    } else {
        if (gateup) cu_go(k_mm<TYPE, 8, CU_TT, true, false>, grid, MM_WARPS * 32, 0, L.s, tb, L);
        else cu_go(k_mm<TYPE, 8, CU_TT, false, false>, grid, MM_WARPS * 32, 0, L.s, tb, L);
    }
    CU_LAUNCHED("k_mm");
    return 0;
}

// Rows per block for a variant (host side).
static inline int mm_rows_per_block(const cu_dev *d, bool gateup, int tt, bool small) {
    return MM_WARPS * (tt == 1 || small ? (gateup ? 2 : 1) : 8) / (gateup ? 2 : 1);
}

// One instance file per type (mm_<type>.cu): int mm_run_<name>(launch, gateup, tt).
#define MM_INSTANCE(T, n)                                                                                    \
    int mm_run_##n(const mm_launch &L, bool gateup, int tt) { return mm_launch_type<T>(L, gateup, tt); }
