/* rows.h — kernels of forward_rows (continuous batching: the decode steps of several sequences as the
 * rows of one forward, backend_cuda_rows.c), beside cuda_ops.h and under its conventions (device
 * pointers, every launcher enqueues on `s` and returns 0 or -1 with rl_lasterr set).
 *
 * A captured rows graph bakes every row's state, KV cache and position pointer into its kernels; what
 * changes from one replay to the next (each row's token and position) is uploaded as one small array
 * and spread by cu_rows_inputs, the graph's first kernel. */
#ifndef RL_CUDA_ROWS_H
#define RL_CUDA_ROWS_H

#include "cuda/cuda_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CU_ROWS_MAX CU_SMALL_T /* rows of a captured rows forward (the direct MoE plan up to here) */

/* Where row i's position goes: its context's pos0 (one int of device memory). */
typedef struct {
    int *pos[CU_ROWS_MAX];
} cu_rows_dst;

/* in [2n]: n token ids, then n positions; tok[i] = in[i], *dst->pos[i] = in[n + i]. 1 <= n <= CU_ROWS_MAX. */
int cu_rows_inputs(const int32_t *in, int n, int32_t *tok, const cu_rows_dst *dst, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
