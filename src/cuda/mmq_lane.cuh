// mmq_lane.cuh — one-token launches of the integer path with a lane per (row, super-block)
// (k_mmq_lane); part of matmul.cuh (included by mmq_launch.cuh, after mmq.cuh).
//
// Why: k_mmq_vec gives a super-block to 8 lanes of 32 values each, so every (row, super-block) pays
// a 3-level shuffle reduction of its integer sums, a broadcast of its term and the scale decoding in
// all 8 lanes: ~70 warp instructions per (row, super-block) of Q4_K. Nsight Compute on the H200
// (12-layer CF2 decode): the dense Q4_K decode GEMVs issue-bound (IPC 1.9 at 28 %
// occupancy) at 17 % of DRAM bandwidth, the IQ1_M expert launches at 6 %.
//
// Here one lane owns a whole super-block of one row. Its integer sums are those of k_mmq_vec
// (the same per-sub-block integers, added in another order: integers, exact), its float term is
// mmq_term on the same values, and the row's terms are added in super-block order from 0.0f, each
// fetched from its lane by a shuffle: the operations of k_mmq_vec on the same values, so the same
// bits, and decode == verify == prefill still holds (test_cuda_ops compares one-token launches with
// the multi-token ones and with the CPU's vec_dot).
//
// Layout: a row takes LPR lanes (the power of two >= its nsb super-blocks, nsb <= 32), a warp 32 /
// LPR rows; lane l: row l / LPR, super-block l % LPR (idle past nsb). The warp's rows are staged in
// shared memory with cp.async (as k_mmq_vec's ST) while the block quantises its token into shared
// memory with super-blocks MQL_XS bytes apart (the 8 lanes of a quarter warp read 8 super-blocks on
// distinct banks) and, for Q4_K / Q5_K, the sums of each 32 codes (the mins' term, the CPU's bsums).
// SM (dense launches): as many blocks as fit on the GPU, each quantising once and walking the row
// blocks bx, bx + gridDim.x, ... with two staged slices per warp (k_mmq_vec's streaming).
#pragma once

#define MQL_XS 272     // bytes per quantised super-block of the token (256 codes + 16: bank spread)
#define MQL_MAX_NSB 32 // longest rows: 32 super-blocks (n_in 8192) at one lane per super-block

__host__ __device__ constexpr int mql_lpr(int nsb) {
    return nsb <= 1 ? 1 : nsb <= 2 ? 2 : nsb <= 4 ? 4 : nsb <= 8 ? 8 : nsb <= 16 ? 16 : 32;
}
// rows per warp
__host__ __device__ constexpr int mql_rpw(int nsb) { return 32 / mql_lpr(nsb); }
// the token in shared memory: codes [nsb][MQL_XS], scales [nsb], 32-value sums [nsb][8]; then the
// warps' slices (16-byte aligned)
__host__ __device__ constexpr size_t mql_tile_bytes(int nsb) {
    return ((size_t)nsb * (MQL_XS + 4 + 32) + 15) & ~(size_t)15;
}
// one matrix's rows of a warp (rpw rows of row_bytes), 16-byte aligned
__host__ __device__ constexpr size_t mql_slice(size_t row_bytes, int nsb) {
    return ((size_t)mql_rpw(nsb) * row_bytes + 15) & ~(size_t)15;
}
static inline size_t mql_smem(size_t row_bytes, int nsb, bool gateup, bool sm) {
    return mql_tile_bytes(nsb) +
           (size_t)MM_WARPS * mql_slice(row_bytes, nsb) * (gateup ? 2 : 1) * (sm ? 2 : 1);
}

// The integer sums of the 8 sub-blocks of one super-block: weights at b (shared memory), the token's
// codes at xs and 32-value code sums bs. The per-sub-block integers are k_mmq_vec's (lane j of its
// group computes sub-block j's).
template <int TYPE>
__device__ __forceinline__ void mql_sums(const cu_qtabs &tb, const uint8_t *b, const uint8_t *xs,
                                         const int *bs, int &isum, int &summs) {
    constexpr bool IQ = mmq_iq(TYPE);
    int sc[mmq_k16(TYPE) ? 16 : 8], mn[mmq_k16(TYPE) ? 16 : 8];
    if constexpr (!IQ) mmq_scales<TYPE>(b, sc, mn);
    isum = summs = 0;
#pragma unroll
    for (int s = 0; s < 8; s++) {
        const uint4 u0 = *(const uint4 *)(xs + 32 * s), u1 = *(const uint4 *)(xs + 32 * s + 16);
        const int xq[8] = {(int)u0.x, (int)u0.y, (int)u0.z, (int)u0.w,
                           (int)u1.x, (int)u1.y, (int)u1.z, (int)u1.w};
        int wq[8];
        if constexpr (IQ) {
#pragma unroll
            for (int w = 0; w < 8; w++) wq[w] = mmq_iq_a4<TYPE>(tb, b, s, 4 * w);
        } else {
            mmq_codes32<TYPE>(b, s, wq);
        }
        int lo, hi;
        mmq_dot_halves(wq, xq, lo, hi);
        if constexpr (mmq_k16(TYPE)) {
            isum += sc[2 * s] * lo + sc[2 * s + 1] * hi;
            if constexpr (TYPE == T_Q2_K) { // the halves' mins times their code sums
                int slo, shi;
                mmq_sum_halves(xq, slo, shi);
                summs += mn[2 * s] * slo + mn[2 * s + 1] * shi;
            }
        } else if constexpr (IQ) {
            int wlo, whi;
            mmq_iq_w<TYPE>(b, s, wlo, whi);
            isum += wlo * lo + whi * hi;
            if constexpr (mmq_iq1(TYPE)) { // braces: see mmq_vec_tiles
#pragma unroll
                for (int w = 0; w < 8; w++) summs = __dp4a(mmq_iq_m4<TYPE>(b, s, 4 * w), xq[w], summs);
            }
        } else {
            isum += sc[s] * (lo + hi);
            summs += mn[s] * bs[s];
        }
    }
}
// The super-block's term from its integer sums (the CPU's float epilogue).
template <int TYPE>
__device__ __forceinline__ float mql_fin(const uint8_t *b, float yd, int isum, int summs) {
    float d, dmin = 0.0f;
    if constexpr (mmq_iq(TYPE)) d = mmq_iq_d<TYPE>(b);
    else mmq_d<TYPE>(b, d, dmin);
    return mmq_term<TYPE>(yd, d, dmin, isum, summs);
}

// The block's token (pair p of the launch) quantised into the tile at sm: 8-lane groups, a
// super-block each (mmq_q8_group: the same bits as every other quantisation of the path).
__device__ __forceinline__ void mql_quantise(const mm_launch &a, int p, uint8_t *sm, bool sums) {
    const int nsb = a.n_in / 256, lane = threadIdx.x & 31;
    float *yd = (float *)(sm + (size_t)nsb * MQL_XS);
    int *bs = (int *)(yd + nsb);
    const float *x = mmq_xrow(a, p);
    for (int base = ((int)threadIdx.x >> 5) * 4; base < nsb;
         base += (int)blockDim.x >> 3) { // uniform per warp
        const int ib = base + (lane >> 3);
        const bool on = ib < nsb;
        mmq_q8_group(x + (size_t)256 * (on ? ib : 0), on, lane & 7, sm + (size_t)ib * MQL_XS, yd + ib,
                     sums ? bs + 8 * ib : nullptr);
    }
}

// One lane per super-block (2 or 4 lanes, each with a share of the sub-blocks, measured slower for every
// type and are gone: bench/results/2026-12-06-cuda-variants-removed.md).
template <int TYPE, bool GU, bool SM>
__global__ void __launch_bounds__(MM_WARPS * 32) k_mmq_lane(mm_launch a) {
    constexpr int BB = qtraits<TYPE>::bytes;
    constexpr bool SUMS = TYPE == T_Q4_K || TYPE == T_Q5_K;
    extern __shared__ __align__(16) uint8_t mmq_sm[];
    const int lane = threadIdx.x & 31, nsb = a.n_in / 256, lpr = mql_lpr(nsb), rpw = mql_rpw(nsb);
    const int lr = lane / lpr, k = lane & (lpr - 1), base = lane & ~(lpr - 1);
    const size_t rbytes = a.seg[0].row_bytes, wb = mql_slice(rbytes, nsb), wslice = wb * (GU ? 2 : 1);
    uint8_t *const mine = mmq_sm + mql_tile_bytes(nsb) + (size_t)(threadIdx.x >> 5) * wslice * (SM ? 2 : 1);
    const float *yd = (const float *)(mmq_sm + (size_t)nsb * MQL_XS);
    const int *bs = (const int *)(yd + nsb);
    // copy the warp's rows at t (where == 2) into dst (and the up rows after wb); one commit group either way
    auto stage = [&](const mmq_at &t, int where, uint8_t *dst) {
        if (where == 2) {
            const int nv = min(rpw, a.seg[t.si].n_out - t.r0);
            stage_copy(dst, t.w + (size_t)t.r0 * rbytes, nv * (int)rbytes, lane);
            if constexpr (GU) stage_copy(dst + wb, t.w2 + (size_t)t.r0 * rbytes, nv * (int)rbytes, lane);
        }
        __pipeline_commit();
    };
    // this warp's rows at t, staged at buf: every lane group its super-block's sums, then its term,
    // the row's first lane the sum of the terms
    auto rows = [&](const mmq_at &t, const uint8_t *buf) {
        const cu_seg &sg = a.seg[t.si];
        const int r = t.r0 + lr;
        const bool on = k < nsb && r < sg.n_out; // uniform in a lane group
        const uint8_t *xs = mmq_sm + (size_t)k * MQL_XS, *b = buf + (size_t)lr * rbytes + (size_t)k * BB;
        int ig = 0, mg = 0, iu = 0, mu = 0;
        if (on) {
            mql_sums<TYPE>(a.tb, b, xs, bs + 8 * k, ig, mg);
            if constexpr (GU) mql_sums<TYPE>(a.tb, b + wb, xs, bs + 8 * k, iu, mu);
        }
        float tg = 0.0f, tu = 0.0f;
        if (on) {
            tg = mql_fin<TYPE>(b, yd[k], ig, mg);
            if constexpr (GU) tu = mql_fin<TYPE>(b + wb, yd[k], iu, mu);
        }
        float ag = 0.0f, au = 0.0f; // the row's terms in super-block order, from 0.0f (k_mmq_vec's acc)
        for (int s = 0; s < nsb; s++) {
            ag = ag + __shfl_sync(FULL_MASK, tg, base + s);
            if constexpr (GU) au = au + __shfl_sync(FULL_MASK, tu, base + s);
        }
        if (k == 0 && r < sg.n_out)
            mmq_store(a, sg, r, t.start,
                      GU ? swiglu(mmq_out<TYPE>(ag), mmq_out<TYPE>(au)) : mmq_out<TYPE>(ag));
    };
    mmq_at at;
    if constexpr (!SM) {
        if (a.grouped) pdl_enter(); // the tiles and the expert come from the router
        const int where = mmq_locate(a, rpw, 1, at);
        if (!where) return; // the whole block
        stage(at, where, mine);
        if (!a.grouped) pdl_enter();
        mql_quantise(a, at.start, mmq_sm, SUMS);
        __pipeline_wait_prior(0);
        __syncthreads();
        if (where == 2) rows(at, mine);
    } else {
        const int nvb = a.seg_start[a.nseg];
        mmq_at nx;
        stage(nx, mmq_locate(a, rpw, 1, nx, (int)blockIdx.x), mine);
        pdl_enter();
        mql_quantise(a, 0, mmq_sm, SUMS);
        __syncthreads();
        int kb = 0;
        for (int bx = blockIdx.x; bx < nvb; bx += gridDim.x, kb ^= 1) {
            const int bn = bx + (int)gridDim.x;
            stage(nx, bn < nvb ? mmq_locate(a, rpw, 1, nx, bn) : 0, mine + (kb ^ 1) * wslice);
            __pipeline_wait_prior(1); // this thread's copies of bx
            __syncwarp();             // and the warp's
            if (mmq_locate(a, rpw, 1, at, bx) == 2) rows(at, mine + kb * wslice);
            __syncwarp(); // every lane is done with the slice before it is staged again
        }
    }
}
