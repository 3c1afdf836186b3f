// rows.cu — kernels of forward_rows (rows.h): the inputs of a captured rows graph.
#include "cuda/common.cuh"
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

extern "C" int cu_rows_inputs(const int32_t *in, int n, int32_t *tok, const cu_rows_dst *dst,
                              cudaStream_t s) {
    if (n < 1 || n > CU_ROWS_MAX) return rl_seterr("cu_rows_inputs: %d rows (1..%d)", n, CU_ROWS_MAX);
    cu_go(k_rows_inputs, 1, 32, 0, s, in, n, tok, *dst);
    CU_LAUNCHED("k_rows_inputs");
    return 0;
}
