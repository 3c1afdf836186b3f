/* ctx_plan.h — the default context length of a long-lived server (`redlite serve` without
 * --ctx): the model's trained length (GGUF context_length), unless the memory plan cannot hold
 * its KV cache, then the most positions that fit, in steps of 1024, never below 4096 (or the
 * trained length when that is smaller).
 *
 * The memory plan (numbers from the model's hyperparameters, not guesses):
 *   - RAM (CPU backend): the expert cache's rule (cache/expert_cache.h) gets first call, because
 *     a context that pushes the experts out of full residency costs far more (every token reads
 *     experts from disk) than a shorter window. Budget = EC_RAM_SHARE of physical RAM - dense
 *     weights - the routed experts the cache plan keeps (all of them, --cache-mib N MiB, none
 *     for mmap) - the recurrent state (two copies) - CTX_PLAN_RESERVE (scratch, tokenizer,
 *     slack). When that leaves fewer than CTX_PLAN_WANT positions (the prompt of a coding agent
 *     alone is 10-20K tokens), the context gets up to CTX_PLAN_WANT positions out of a quarter of
 *     what the dense weights and the state leave, and the expert cache the rest. More memory
 *     never gives a shorter context.
 *   - device (CUDA): 90 % of the device memory that is free once the weights are in (measured
 *     with a small probe context), minus the context's state and scratch and CTX_PLAN_RESERVE.
 * Positions cost the KV cache of every attention layer (the MTP layer's included) in the
 * context's format (f16 by default: 24 KiB per position on the 80B).
 */
#ifndef RL_CTX_PLAN_H
#define RL_CTX_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "run/session.h"

#define CTX_PLAN_MIN 4096             /* the least a planned context gets (unless trained shorter) */
#define CTX_PLAN_WANT 32768           /* what the plan gives before the experts' full residency */
#define CTX_PLAN_RESERVE (1ull << 30) /* scratch (up to ~1.1 GiB at 2048 prompt rows) and slack */

typedef struct {
    int n_ctx_train;     /* the model's context_length (0: unknown, then capped at 32768) */
    uint64_t kv_per_pos; /* KV-cache bytes per position */
    uint64_t state;      /* bytes that do not grow with the context: recurrent state, all copies */
    bool device;         /* the context lives in device memory */
    uint64_t mem;        /* RAM: physical bytes; device: free bytes once the weights are in */
    uint64_t dense;      /* RAM: dense weight bytes */
    uint64_t experts;    /* RAM: routed-expert bytes the cache plan keeps in memory */
} ctx_plan_in;

typedef struct {
    int n_ctx;
    bool limited;     /* memory, not the trained length, set it */
    char reason[320]; /* one line: what was chosen and why */
} ctx_plan;

/* Pure arithmetic on in (testable without a model). 0, or -1 with rl_lasterr when kv_per_pos is 0. */
int ctx_plan_choose(const ctx_plan_in *in, ctx_plan *out);

/* A session on m whose context length is planned (RAM figure: $RL_CTX_RAM_MIB for tests, else
 * the machine's) (sp->n_ctx must be 0; everything else of sp is
 * used as given). CPU: planned before the context exists. Device backends: a probe context of
 * CTX_PLAN_MIN positions measures the memory, then the real one replaces it. NULL with rl_lasterr
 * set on failure; *plan says what was chosen. */
session *ctx_plan_session_new(session_model *m, const session_params *sp, ctx_plan *plan);

#endif
