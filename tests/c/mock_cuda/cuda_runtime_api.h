/* A stand-in for the CUDA runtime's host API, for tests/c/test_vram_gtab.c only (the Makefile puts
 * this folder on that test's include path in the CPU build; a CUDA build finds the real header first
 * and the test skips). It declares the few types and calls src/cache/vram_gtab.c and the headers it
 * includes use; the test implements them over host memory: "device" memory is host memory, a copy
 * on a stream runs when an event recorded after it is waited for (or the stream is), so a table that
 * points at a slot before its copy ran reads stale bytes, as a kernel would. Never part of a real build. */
#ifndef RL_MOCK_CUDA_RUNTIME_API_H
#define RL_MOCK_CUDA_RUNTIME_API_H
#include <stddef.h>

typedef enum { cudaSuccess = 0, cudaErrorMemoryAllocation = 2, cudaErrorNotReady = 600 } cudaError_t;
typedef enum {
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3
} cudaMemcpyKind;
typedef struct mock_stream *cudaStream_t;
typedef struct mock_event *cudaEvent_t;
#define cudaEventDisableTiming 0x02u

cudaError_t cudaMallocHost(void **p, size_t n);
cudaError_t cudaMalloc(void **p, size_t n);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaFree(void *p);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind k, cudaStream_t s);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind k);
cudaError_t cudaMemset(void *p, int v, size_t n);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
const char *cudaGetErrorString(cudaError_t e);
#endif
