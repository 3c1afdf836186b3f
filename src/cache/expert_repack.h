/* expert_repack.h — --iq-repack: the IQ matrices in a lookup-free layout, made at load.
 *
 * When asked (engine_params.iq_repack, off by default), every routed-expert tensor of the model
 * (ffn_{gate,up,down,gate_up}_exps of every layer, MTP layer included) whose type has a
 * lookup-free form (quant_repack.h: IQ2_XXS, IQ2_XS -> IQ2_LF; IQ1_M -> IQ1_LF) is repacked into an
 * anonymous copy, and so are the dense projections of those types (attention, DeltaNet, shared
 * expert, router, MTP eh_proj, output head; not the token embedding, whose rows are only
 * dequantised one at a time): in the IQ2_XXS mix they carry as many weights per decoded token as
 * the routed experts, for ~2 % of the model's bytes. RL_REPACK_DENSE=0 repacks the experts only.
 * The model's matrix views (type, row_bytes, data) are pointed at the copies. The file is never
 * changed; the mapping's pages of each repacked expert tensor are released (madvise DONTNEED)
 * once read. Every later use of those matrices goes through the views: the engine's default
 * expert source (the mapped one) serves the repacked rows, the kernels dispatch on the new type,
 * and results are bit-identical to the original layout (quant_repack.h), so the exactness
 * contract holds unchanged. Tensors of other types stay in the mapping.
 *
 * Memory: the repacked matrices are resident (full residency, an anonymous copy instead of the
 * mapping). The repack is refused, with a one-line error, when the weights after it (repacked
 * copies + everything else) would exceed EXPERT_REPACK_RAM_SHARE of physical RAM
 * (RL_REPACK_RAM_MIB overrides the RAM size, for tests). The bounded expert cache reads the
 * file's layout into its slots, so a repacked model runs without it (session.c refuses
 * --cache-mib N with --iq-repack); repacking inside the cache's slot fill is not done yet.
 */
#ifndef RL_EXPERT_REPACK_H
#define RL_EXPERT_REPACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/pool.h"
#include "model/qwen3next.h"

#define EXPERT_REPACK_RAM_SHARE 0.70 /* the expert planner's share (EC_RAM_SHARE) */

typedef struct expert_repack expert_repack;

typedef struct {
    int n_tensors;                  /* tensors repacked */
    int n_dense;                    /* ... of which dense (not routed experts) */
    uint64_t bytes_file;            /* their bytes in the file */
    uint64_t bytes_mem;             /* their bytes repacked (anonymous memory) */
    uint64_t dense_file, dense_mem; /* the dense tensors' share of those */
    uint64_t bytes_kept;            /* routed-expert bytes left in the file's layout (no lookup-free form) */
    double seconds;                 /* wall time of the repack */
    char types[96];                 /* "IQ2_XXS->IQ2_LF" or "IQ1_M->IQ1_LF, IQ2_XS->IQ2_LF" */
} expert_repack_info;

/* The repack's switches (run/tuning.c: RL_REPACK_DENSE, RL_REPACK_RAM_MIB; docs/TUNING.md). */
typedef struct {
    bool experts_only; /* the routed experts alone, not the dense IQ matrices (measurements) */
    uint64_t ram;      /* the RAM to plan against (tests); 0: the machine's */
} expert_repack_opts;

/* Repack m's routed experts in place (see above), rows split over p's threads; progress bar on
 * stderr when `progress` and stderr is a terminal; o NULL: the defaults. NULL with rl_lasterr set
 * when it would not fit in RAM or memory runs out (m is then unchanged), or when nothing in m can
 * be repacked. */
expert_repack *expert_repack_model(q3n_model *m, pool *p, bool progress, const expert_repack_opts *o);
/* Frees the repacked copies: after the model's last use. NULL is fine. */
void expert_repack_free(expert_repack *r);
void expert_repack_get_info(const expert_repack *r, expert_repack_info *out);
/* One line: "iq-repack: 144 expert tensors (IQ2_XXS->IQ2_LF), 1.23 GiB in the file -> 2.57 GiB in memory
 * (+1.34 GiB, 2.09x), 0.8 s" */
void expert_repack_describe(const expert_repack *r, char *buf, size_t n);

#endif
