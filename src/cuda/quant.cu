// quant.cu — error reporting, the device copies of the IQ grids, and the row gather
// (embedding lookup, and the dequantisation oracle test of tests/cuda).
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cuda/quant.cuh"

extern "C" {
#include "gguf/quant_tables.h"
}

extern "C" int cu_fail(cudaError_t e, const char *what, const char *file, int line) {
    (void)cudaGetLastError(); // clear a non-sticky error so the next call starts clean
    const char *base = strrchr(file, '/');
    return rl_seterr("CUDA error %s (%s) in %s at %s:%d", cudaGetErrorName(e), cudaGetErrorString(e), what,
                     base ? base + 1 : file, line);
}

// One copy of the grids per device (a kernel reads the copy on its own GPU: device memory of another
// GPU is not addressable without peer access), made by cu_tables_init on the current device and kept
// for the life of the process (a few KB each).
static cu_qtabs g_tabs[CU_MAX_DEVICES];
static bool g_tabs_ready[CU_MAX_DEVICES];
static pthread_mutex_t g_tabs_lock = PTHREAD_MUTEX_INITIALIZER;

const cu_qtabs &cu_qtabs_get(const cu_dev *d) { return g_tabs[d->ordinal]; }

template <typename T> static int upload(const T *src, size_t n, const T **dst, uint8_t **cursor) {
    *dst = (const T *)*cursor;
    if (CU_CHECK(cudaMemcpy(*cursor, src, n * sizeof(T), cudaMemcpyHostToDevice))) return -1;
    *cursor += (n * sizeof(T) + 255) & ~(size_t)255;
    return 0;
}

static int tables_upload(cu_qtabs *tb) {
    size_t total = 0;
    size_t sizes[] = {sizeof iq2xxs_grid,  sizeof iq2xs_grid,    sizeof iq2s_grid,
                      sizeof iq1s_grid,    sizeof iq3xxs_grid,   sizeof iq3s_grid,
                      sizeof ksigns_iq2xs, sizeof kvalues_iq4nl, sizeof kvalues_mxfp4};
    for (size_t s : sizes) total += (s + 255) & ~(size_t)255;
    uint8_t *base = NULL;
    if (CU_CHECK(cudaMalloc(&base, total))) return -1;
    uint8_t *cur = base;
    if (upload(iq2xxs_grid, 256, &tb->iq2xxs, &cur) || upload(iq2xs_grid, 512, &tb->iq2xs, &cur) ||
        upload(iq2s_grid, 1024, &tb->iq2s, &cur) || upload(iq1s_grid, 2048, &tb->iq1s, &cur) ||
        upload(iq3xxs_grid, 256, &tb->iq3xxs, &cur) || upload(iq3s_grid, 512, &tb->iq3s, &cur) ||
        upload(ksigns_iq2xs, 128, &tb->ksigns, &cur) || upload(kvalues_iq4nl, 16, &tb->kvalues, &cur) ||
        upload(kvalues_mxfp4, 16, &tb->kvalues_mx, &cur)) {
        cudaFree(base);
        return -1;
    }
    return 0;
}

extern "C" int cu_tables_init(void) {
    int dev = 0;
    if (CU_CHECK(cudaGetDevice(&dev))) return -1;
    if (dev < 0 || dev >= CU_MAX_DEVICES)
        return rl_seterr("CUDA device %d: at most %d devices are supported", dev, CU_MAX_DEVICES);
    pthread_mutex_lock(&g_tabs_lock); // two contexts may be made at once by two threads
    int rc = g_tabs_ready[dev] ? 0 : tables_upload(&g_tabs[dev]);
    if (!rc) g_tabs_ready[dev] = true;
    pthread_mutex_unlock(&g_tabs_lock);
    return rc;
}

extern "C" bool cu_type_supported(uint32_t type) {
    switch (type) {
#define X(T) case T:
        CU_FOR_TYPES(X)
#undef X
        return true;
    default: return false;
    }
}

// One thread per unit of 8 values.
template <int TYPE>
__global__ void k_get_rows(cu_qtabs tb, const uint8_t *__restrict__ w, size_t row_bytes, int n_in,
                           const int32_t *__restrict__ rows, float *__restrict__ out, int ldo) {
    pdl_enter();
    const int t = blockIdx.y, u = blockIdx.x * blockDim.x + threadIdx.x;
    if (u >= n_in / 8) return;
    int sub;
    const uint8_t *blk = unit_block<TYPE>(w + (size_t)rows[t] * row_bytes, u, sub);
    float v[8];
    deq8<TYPE>(tb, blk, sub, v);
    float *o = out + (size_t)t * ldo + 8 * u;
#pragma unroll
    for (int i = 0; i < 8; i++) o[i] = v[i];
}

extern "C" int cu_get_rows(uint32_t type, const uint8_t *w, size_t row_bytes, int n_in, const int32_t *rows,
                           int T, float *out, int ldo, cu_stream s) {
    if (n_in % 8 || T <= 0) return rl_seterr("cu_get_rows: n_in %d must be a multiple of 8", n_in);
    dim3 grid((n_in / 8 + 127) / 128, T);
    switch (type) {
#define X(TY)                                                                                                \
    case TY:                                                                                                 \
        cu_go(k_get_rows<TY>, grid, 128, 0, s, cu_qtabs_get(s.dev), w, row_bytes, n_in, rows, out, ldo);     \
        break;
        CU_FOR_TYPES(X)
#undef X
    default: return rl_seterr("CUDA backend: no kernel for tensor type %u", type);
    }
    CU_LAUNCHED("k_get_rows");
    return 0;
}
