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

/* One device pointer per row (row i's context's buffer). */
typedef struct {
    float *p[CU_ROWS_MAX];
} cu_rows_ptrs;

/* in [2n]: n token ids, then n positions; tok[i] = in[i], *dst->pos[i] = in[n + i]. 1 <= n <= CU_ROWS_MAX. */
int cu_rows_inputs(const int32_t *in, int n, int32_t *tok, const cu_rows_dst *dst, cu_stream s);

/* The decode DeltaNet of n rows in one launch each, row r on its own state, with the arithmetic of
 * cu_dn_conv / cu_dn_step on that row alone (the same device functions: the same bits):
 * conv: u[r][0..C) = conv + SiLU of in[r * ldi ..] over state->p[r] (conv_channel, the decode epilogue's
 * and k_dn_conv's arithmetic), the state shifted;
 * step: u [n][C], ba [n][2 hv], z [n][hv dv] -> o [n][hv dv], ssm->p[r] updated (dn_step_body);
 * ctr: n * hv counters (zeroed; each launch puts them back): each head over the split step's blocks, as
 * cu_dn_step with counters; NULL: one block per head (the same bits). 1 <= n <= CU_ROWS_MAX. */
int cu_rows_dn_conv(const cu_dn_dims *d, const float *in, int ldi, float *u, const cu_rows_ptrs *state, int n,
                    cu_stream s);
int cu_rows_dn_step(const cu_dn_dims *d, const float *u, const float *ba, const float *z,
                    const cu_rows_ptrs *ssm, float *o, unsigned *ctr, int n, cu_stream s);

#ifdef __cplusplus
}
#endif
#endif
