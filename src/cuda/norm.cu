// norm.cu — residual add + RMSNorm (one block per row; fixed-order double reduction).
#include "cuda/rowops.cuh"

#define NORM_THREADS 256

// One block per row: rowops.cuh's add_rmsnorm_row (CPU ops_rmsnorm's formula; the reduction
// order of 256 threads, shared with the fused kernels).
__global__ void __launch_bounds__(NORM_THREADS)
    k_add_rmsnorm(float *x, const float *y, const float *__restrict__ w, float *out, int n, float eps) {
    pdl_enter();
    __shared__ double sh[32];
    const size_t r = (size_t)blockIdx.x * n;
    static_assert(NORM_THREADS == NORM_VT, "add_rmsnorm_row_regs: one thread per virtual thread");
    if (n <= 8 * NORM_VT) add_rmsnorm_row_regs(x + r, y ? y + r : NULL, w, out ? out + r : NULL, n, eps, sh);
    else add_rmsnorm_row(x + r, y ? y + r : NULL, w, out ? out + r : NULL, n, eps, sh);
}

extern "C" int cu_add_rmsnorm(float *x, const float *y, const float *w, float *out, int n, int T, float eps,
                              cu_stream s) {
    cu_go(k_add_rmsnorm, T, NORM_THREADS, 0, s, x, y, w, out, n, eps);
    CU_LAUNCHED("k_add_rmsnorm");
    return 0;
}
