// prefetch.cu — L2 prefetch of weights a later launch will read (cu_l2_prefetch, cu_l2_prefetch_experts).
//
// Why: a decode token's GEMVs stream their weights at 35-40 % of the H200's bandwidth and between
// them run light kernels (norms, the DeltaNet step, the router, the combine) during which HBM idles
// (~30 % of a token, bench/results/2026-12-03-cuda-session17-ncu.txt). Launched on a side stream
// beside those light kernels, these kernels ask the L2 to fetch the next GEMV's weights in that
// idle time, so the GEMV then reads them from L2.
//
// Contract: a prefetch is a hint. It reads nothing into registers, writes nothing, and changes no
// result: every output is the same bits with or without it (the engine tests compare decode,
// verify and prefill rows with it on). Ranges are weights (written once at load), so the kernels
// may run at any time relative to the stream they were forked from.
//
// How: cp.async.bulk.prefetch.L2 (sm_90: the SM's bulk-copy unit fetches a range of up to 4 GiB
// into the L2 without holding registers or shared memory), one instruction per PF_CHUNK bytes, the
// chunks spread over the threads of a small grid so that the requests start from many SMs.
#include "common.cuh"

#define PF_CHUNK (32u << 10) // bytes per bulk prefetch instruction
#define PF_THREADS 128

__device__ __forceinline__ void pf_range(const uint8_t *p, size_t n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // whole 16-byte chunks: the start rounded down, the end up (inside the aligned 16 bytes that
    // hold the last byte, so never into another page)
    const uintptr_t a = (uintptr_t)p & ~(uintptr_t)15, e = ((uintptr_t)p + n + 15) & ~(uintptr_t)15;
    const size_t len = e - a;
    const size_t nch = (len + PF_CHUNK - 1) / PF_CHUNK;
    for (size_t c = blockIdx.x * (size_t)blockDim.x + threadIdx.x; c < nch; c += (size_t)gridDim.x * blockDim.x) {
        const uintptr_t q = a + c * PF_CHUNK;
        const unsigned sz = (unsigned)(e - q < PF_CHUNK ? e - q : PF_CHUNK);
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(q), "r"(sz) : "memory");
    }
#endif
}

static __global__ void k_l2_prefetch(cu_pf_ranges r) {
    for (int i = 0; i < r.n; i++) pf_range((const uint8_t *)r.p[i], r.bytes[i]);
    pdl_enter(); // after the weights only (see the contract): nothing before it was read from a launch
}

// The routed experts of one decode row: ids[0..K) (written by the router), expert e's range of
// matrix m at base[m] + e * stride[m], bytes[m] long. pdl_enter first: ids come from the router.
static __global__ void k_l2_prefetch_experts(const int32_t *ids, int K, cu_pf_experts x) {
    pdl_enter();
    for (int k = 0; k < K; k++) {
        const int e = ids[k];
        for (int m = 0; m < x.n; m++) pf_range((const uint8_t *)x.base[m] + (size_t)e * x.stride[m], x.bytes[m]);
    }
}

static unsigned pf_blocks(size_t total) {
    const size_t ch = total / PF_CHUNK + 1, b = (ch + PF_THREADS - 1) / PF_THREADS;
    return (unsigned)(b < 1 ? 1 : b > 64 ? 64 : b);
}

extern "C" int cu_l2_prefetch(const cu_pf_ranges *r, cudaStream_t s) {
    if (r->n <= 0) return 0;
    size_t total = 0;
    for (int i = 0; i < r->n; i++) total += r->bytes[i];
    cu_go(k_l2_prefetch, pf_blocks(total), PF_THREADS, 0, s, *r);
    CU_LAUNCHED("k_l2_prefetch");
    return 0;
}

extern "C" int cu_l2_prefetch_experts(const int32_t *ids, int K, const cu_pf_experts *x, cudaStream_t s) {
    if (x->n <= 0 || K <= 0) return 0;
    size_t total = 0;
    for (int i = 0; i < x->n; i++) total += x->bytes[i];
    cu_go(k_l2_prefetch_experts, pf_blocks(total), PF_THREADS, 0, s, ids, K, *x);
    CU_LAUNCHED("k_l2_prefetch_experts");
    return 0;
}
