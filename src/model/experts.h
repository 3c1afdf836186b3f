/* experts.h — where routed expert e of a layer lives: the one addressing function for every user
 * (the CPU forward's mapped source, the RAM expert cache, the VRAM tier).
 *
 * A layer's routed experts are stacked tensors (spec §B): gate_exps and up_exps hold n_ff rows per
 * expert, down_exps n_embd rows, expert e's rows contiguous after expert e-1's; or one fused
 * gate_up_exps with 2 * n_ff rows per expert, gate rows first. Each tensor has its own type, so
 * each has its own row bytes: gate, up and down may all differ (a mixed quantisation), and every
 * offset below is computed from the row bytes of the tensor it indexes.
 */
#ifndef RL_EXPERTS_H
#define RL_EXPERTS_H

#include <stdint.h>

#include "model/qwen3next.h"

typedef struct {
    /* byte offsets of expert e's rows from the start of the tensor each lives in: gate in
     * gate_exps (or gate_up_exps), up in up_exps (or, fused, in gate_up_exps after the gate rows),
     * down in down_exps */
    uint64_t gate_off, up_off, down_off;
    /* bytes of each matrix of one expert: n_ff * its row bytes (gate, up), n_embd * row bytes (down) */
    uint64_t gate_bytes, up_bytes, down_bytes;
    /* bytes from one expert to the next in each tensor (fused: gate and up share 2 * gate_bytes) */
    uint64_t gate_stride, up_stride, down_stride;
    bool fused; /* up lives in the gate tensor, at gate_off + gate_bytes */
} q3n_expert_slice;

/* The slice of expert e of layer L (hp: n_ff_exp, n_embd). */
q3n_expert_slice q3n_expert_slice_of(const q3n_hparams *hp, const q3n_layer *L, int e);
/* Pointers to expert e's gate / up / down rows in L's bound tensors (the file mapping, or the copies
 * resident.h made: the same layout). */
void q3n_expert_rows(const q3n_hparams *hp, const q3n_layer *L, int e, const uint8_t **gate,
                     const uint8_t **up, const uint8_t **down);

#endif
