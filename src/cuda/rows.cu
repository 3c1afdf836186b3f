// rows.cu — kernels of forward_rows (rows.h): the inputs of a captured rows graph, and the decode
// DeltaNet of several sequences' rows in one launch (row r on its own state, the single row's device
// functions: the same bits).
#include "cuda/deltanet.cuh"
#include "cuda/matmul.cuh" // conv_channel
#include "cuda/rows.h"

static_assert(CU_ROWS_MAX <= 32, "k_rows_inputs: one lane per row");

// One warp: lane i < n moves row i's token and position (the pointers are the graph's, baked in).
__global__ void k_rows_inputs(const int32_t *in, int n, int32_t *tok, cu_rows_dst dst) {
    pdl_enter();
    const int i = threadIdx.x;
    if (i < n) {
        tok[i] = in[i];
        *dst.pos[i] = in[n + i];
    }
}

extern "C" int cu_rows_inputs(const int32_t *in, int n, int32_t *tok, const cu_rows_dst *dst, cu_stream s) {
    if (n < 1 || n > CU_ROWS_MAX) return rl_seterr("cu_rows_inputs: %d rows (1..%d)", n, CU_ROWS_MAX);
    cu_go(k_rows_inputs, 1, 32, 0, s, in, n, tok, *dst);
    CU_LAUNCHED("k_rows_inputs");
    return 0;
}

// ---- DeltaNet: conv and step of n rows ------------------------------------------------------

// Thread per channel c, blockIdx.y = row: the decode conv of one token (conv_channel: k_dn_conv's sum
// and shift for T = 1, the qkv epilogue's too).
__global__ void k_rows_dn_conv(cu_dn_dims d, const float *__restrict__ in, int ldi, float *u,
                               cu_rows_ptrs st) {
    pdl_enter();
    const int c = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y;
    if (c >= d.C) return;
    u[(size_t)r * d.C + c] =
        conv_channel(d.conv_w + (size_t)c * d.kw, st.p[r], d.C, c, d.kw, in[(size_t)r * ldi + c]);
}

extern "C" int cu_rows_dn_conv(const cu_dn_dims *d, const float *in, int ldi, float *u,
                               const cu_rows_ptrs *state, int n, cu_stream s) {
    if (n < 1 || n > CU_ROWS_MAX) return rl_seterr("cu_rows_dn_conv: %d rows (1..%d)", n, CU_ROWS_MAX);
    if (d->kw < 1 || d->kw > 5)
        return rl_seterr("CUDA DeltaNet: conv kernel width %d is not supported", d->kw);
    cu_go(k_rows_dn_conv, dim3((d->C + 127) / 128, n), 128, 0, s, *d, in, ldi, u, *state);
    CU_LAUNCHED("k_rows_dn_conv");
    return 0;
}

// Value head blockIdx.x, its part blockIdx.y, row blockIdx.z: k_dn_step's body on row r's slices of u, ba,
// z and o, its state and its counters.
template <int KPL, int DPL, int SPLIT, bool Q35>
__global__ void __launch_bounds__(STEP_WARPS * 32 / SPLIT)
    k_rows_dn_step(cu_dn_dims d, const float *__restrict__ u, const float *__restrict__ ba,
                   const float *__restrict__ z, cu_rows_ptrs ssm, float *o, unsigned *ctr) {
    pdl_enter();
    const size_t r = blockIdx.z, inner = (size_t)d.hv * d.dv;
    dn_step_body<KPL, DPL, SPLIT, Q35>(d, u + r * d.C, ba + r * 2 * d.hv, z + r * inner, ssm.p[r],
                                       o + r * inner, ctr ? ctr + r * d.hv : nullptr, blockIdx.x, blockIdx.y);
}

template <int KPL, int DPL, bool Q35>
static void rows_step_go(const cu_dn_dims *d, const float *u, const float *ba, const float *z,
                         const cu_rows_ptrs *ssm, float *o, unsigned *ctr, int n, cu_stream s) {
    if (ctr) /* the blocks per head of cu_dn_step (the same bits either way) */
        cu_go(k_rows_dn_step<KPL, DPL, 4, Q35>, dim3(d->hv, 4, n), STEP_WARPS * 32 / 4, 0, s, *d, u, ba, z,
              *ssm, o, ctr);
    else
        cu_go(k_rows_dn_step<KPL, DPL, 1, Q35>, dim3(d->hv, 1, n), STEP_WARPS * 32, 0, s, *d, u, ba, z, *ssm,
              o, (unsigned *)nullptr);
}

template <int KPL, bool Q35>
static void rows_step_kpl(const cu_dn_dims *d, const float *u, const float *ba, const float *z,
                          const cu_rows_ptrs *ssm, float *o, unsigned *ctr, int n, cu_stream s) {
    BY_PL(d->dv, (rows_step_go<KPL, 1, Q35>(d, u, ba, z, ssm, o, ctr, n, s)),
          (rows_step_go<KPL, 2, Q35>(d, u, ba, z, ssm, o, ctr, n, s)),
          (rows_step_go<KPL, 4, Q35>(d, u, ba, z, ssm, o, ctr, n, s)));
}

template <bool Q35>
static void rows_step_layout(const cu_dn_dims *d, const float *u, const float *ba, const float *z,
                             const cu_rows_ptrs *ssm, float *o, unsigned *ctr, int n, cu_stream s) {
    BY_PL(d->dk, (rows_step_kpl<1, Q35>(d, u, ba, z, ssm, o, ctr, n, s)),
          (rows_step_kpl<2, Q35>(d, u, ba, z, ssm, o, ctr, n, s)),
          (rows_step_kpl<4, Q35>(d, u, ba, z, ssm, o, ctr, n, s)));
}

extern "C" int cu_rows_dn_step(const cu_dn_dims *d, const float *u, const float *ba, const float *z,
                               const cu_rows_ptrs *ssm, float *o, unsigned *ctr, int n, cu_stream s) {
    if (n < 1 || n > CU_ROWS_MAX) return rl_seterr("cu_rows_dn_step: %d rows (1..%d)", n, CU_ROWS_MAX);
    const int q35 = dn_layout(d);
    if (q35 < 0) return -1;
    if (q35) rows_step_layout<true>(d, u, ba, z, ssm, o, ctr, n, s);
    else rows_step_layout<false>(d, u, ba, z, ssm, o, ctr, n, s);
    CU_LAUNCHED("k_rows_dn_step");
    return 0;
}
