/* experts.c — see experts.h. */
#include "model/experts.h"

q3n_expert_slice q3n_expert_slice_of(const q3n_hparams *hp, const q3n_layer *L, int e) {
    const uint64_t ff = (uint64_t)hp->n_ff_exp, D = (uint64_t)hp->n_embd, E = (uint64_t)e;
    q3n_expert_slice s = {.fused = L->fused_gate_up};
    s.gate_bytes = ff * L->gate_exps.row_bytes;
    s.down_bytes = D * L->down_exps.row_bytes;
    s.down_stride = s.down_bytes;
    s.down_off = E * s.down_stride;
    if (s.fused) { /* one slab: [gate rows | up rows] per expert, one type */
        s.up_bytes = s.gate_bytes;
        s.gate_stride = s.up_stride = s.gate_bytes + s.up_bytes;
        s.gate_off = E * s.gate_stride;
        s.up_off = s.gate_off + s.gate_bytes;
    } else {
        s.up_bytes = ff * L->up_exps.row_bytes;
        s.gate_stride = s.gate_bytes;
        s.up_stride = s.up_bytes;
        s.gate_off = E * s.gate_stride;
        s.up_off = E * s.up_stride;
    }
    return s;
}

void q3n_expert_rows(const q3n_hparams *hp, const q3n_layer *L, int e, const uint8_t **gate,
                     const uint8_t **up, const uint8_t **down) {
    const q3n_expert_slice s = q3n_expert_slice_of(hp, L, e);
    *gate = L->gate_exps.data + s.gate_off;
    *up = (s.fused ? L->gate_exps.data : L->up_exps.data) + s.up_off;
    *down = L->down_exps.data + s.down_off;
}
