/* tuning.h — the engine's tuning switches: every RL_* environment variable, parsed in one place.
 *
 * docs/TUNING.md is the table (name, default, what it trades). Each switch lands in the options
 * struct of the layer that uses it (kern_opts for the CPU kernels, ...); the engine takes one
 * rl_tuning at open (engine_params.tuning, or tuning_from_env when none is given) and passes the
 * parts down. The CUDA backend's RL_CUDA_* / RL_VRAM_* switches are the one other parse site
 * (src/backend/cuda_tune.c, when a CUDA context is created: the backend_ops interface carries no
 * tuning); nothing else below this module reads the environment for a tuning switch.
 */
#ifndef RL_TUNING_H
#define RL_TUNING_H

#include "cache/expert_cache.h"
#include "cache/expert_repack.h"
#include "kern/kern.h"

typedef struct {
    kern_opts kern;            /* RL_KERN, RL_KERN_MM, RL_KERN_AMX, RL_KERN_AMX_ROWS, RL_KERN_IQ_MV */
    int vec_level;             /* RL_VEC: the vector table's widest level (KERN_*), -1: the kernel level's */
    ec_params cache;           /* the bounded cache's switches: io_threads (RL_CACHE_IO_THREADS), no_prefetch
                                  (RL_CACHE_PREFETCH=0), prefetch_k (RL_CACHE_PREFETCH_K), io (RL_CACHE_DIRECT),
                                  uniform (RL_CACHE_CLASSES=0), trace_path (RL_ROUTE_TRACE), fault
                                  (RL_CACHE_FAULT); the session adds the budget and its own options */
    expert_repack_opts repack; /* --iq-repack: RL_REPACK_DENSE=0 (experts_only), RL_REPACK_RAM_MIB */
} rl_tuning;

/* The defaults (every switch unset). */
rl_tuning tuning_default(void);
/* The defaults with the RL_* variables of the environment applied: 0, or -1 with rl_lasterr one
 * line naming the variable, its value and what it takes. */
int tuning_from_env(rl_tuning *t);

#endif
