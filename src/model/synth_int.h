/* synth_int.h — private to the synthetic-model writer (synth.c: presets, geometry, the tensor
 * plan, metadata and the streaming write; synth_gen.c: block templates and the random bytes of
 * every tensor). Not part of the public API in synth.h. */
#ifndef RL_SYNTH_INT_H
#define RL_SYNTH_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "model/synth.h"

/* Tensor roles: the presets' type tables and the generators key on them. */
typedef enum {
    R_TOKEN_EMBD,
    R_OUTPUT,
    R_ROUTER,
    /* matrices of a layer */
    R_Q,
    R_K,
    R_V,
    R_O,
    R_QKV,
    R_GATE,
    R_BA,
    R_SSM_OUT,
    R_GATE_EXPS,
    R_UP_EXPS,
    R_DOWN_EXPS,
    R_GATE_SH,
    R_UP_SH,
    R_DOWN_SH,
    R_EH_PROJ,
    /* float vectors (always F32) */
    R_NORM,
    R_CONV,
    R_DT,
    R_A,
    R_SH_GATE_INP,
} role;

/* A block template (synth_gen.c): valid blocks of one type with dequantised std sigma, and the
 * mask of the bits that may take any value. */
typedef struct tmpl {
    uint32_t type;
    float sigma;
    uint8_t *bytes, *mask;
    uint64_t nbytes;
} tmpl;

/* One tensor of the plan. */
typedef struct {
    synth_tensor_info info;
    role r;
    int layer;      /* -1 for global tensors */
    float sigma;    /* target std of the dequantised values (matrices) */
    uint64_t key;   /* per-tensor random key */
    const tmpl *tp; /* matrices: block template */
    float *vec;     /* vectors: owned data */
    uint8_t *raw;   /* routers of a non-uniform routing model: owned bytes in the tensor's type */
} stensor;

/* splitmix64 finaliser: the mixing step of every key and counter-based random stream. */
static inline uint64_t synth_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Build template t for (type, sigma): 0, or -1 with the error set (t's buffers are the caller's
 * to free either way). */
int synth_gen_tmpl(tmpl *t, uint32_t type, float sigma, uint64_t seed);
/* Whether synth_gen_tmpl has a block generator for this quantised type (--expert-type). */
bool synth_gen_has(uint32_t type);
/* The types synth_gen_has answers yes for, ", "-separated, into buf[n] (for error messages). */
void synth_gen_names(char *buf, size_t n);
/* Tensor bytes [off, off + n) into dst: a pure function of (template, key, offset). */
void synth_gen_bytes(const tmpl *tp, uint64_t key, uint8_t *dst, uint64_t off, uint64_t n);
/* A vector tensor's values (t->vec, owned by t). 0, or -1 with the error set. */
int synth_gen_vector(stensor *t);
/* The router bytes of a non-uniform routing model (t->raw, owned by t). 0, or -1 with the error set. */
int synth_gen_router(stensor *t, synth_routing routing);

#endif
