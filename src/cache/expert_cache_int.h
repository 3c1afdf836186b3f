/* expert_cache_int.h — private structures shared by expert_cache.c (slots, classes, the
 * slot policy's use, planner) and expert_io.c (the I/O thread pool that fills slots). Not a public API. */
#ifndef RL_EXPERT_CACHE_INT_H
#define RL_EXPERT_CACHE_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "cache/expert_cache.h"
#include "cache/slot_policy.h"
#include "base/pool.h"

#define EC_ALIGN 4096u  /* slot and O_DIRECT alignment */
#define EC_MAX_SEL 1024 /* largest union one acquire may ask for (moe_layer's limit) */

/* One contiguous slice per expert of a stacked *_exps tensor. */
typedef struct {
    int part;        /* GGUF part holding the tensor */
    uint64_t base;   /* absolute file offset of expert 0's slice */
    uint64_t stride; /* bytes per expert (= slice length) */
    uint32_t dst;    /* offset of this region inside a slot */
} ec_range;

typedef struct {
    int cls;      /* size class of this layer's slots */
    int n_ranges; /* 3 (gate, up, down) or 2 (fused gate_up, down) */
    ec_range r[3];
    uint64_t up_off; /* fused: bytes from the gate pointer to the up rows */
    uint64_t slot_bytes;
} ec_layer;

enum { EC_S_FREE = 0, EC_S_LOADING, EC_S_VALID, EC_S_FAILED };

/* A slot's storage and load state. Which key it holds, its pins, its place in the LRU order and
 * its prefetch mark are the slot policy's (sp: slot_policy_key / _pins / _prefetched). */
typedef struct {
    uint8_t *mem;
    uint8_t state;  /* EC_S_* (written by I/O threads under mu); FREE <=> the policy has no key */
    uint8_t queued; /* waiting in a job ring (cleared when an I/O thread takes it) */
    uint8_t in_qd;  /* ... in the demand ring (else the prefetch ring) */
    uint8_t ext;    /* LOADING by a faster tier's copy (q3n_expert_src.keep), not by an I/O thread */
    int io_err;     /* errno of a failed load, or -1 for an unexpected end of file */
    int io_range;   /* which range failed */
} ec_slot;

/* A size class = one pool of the slot policy (pool c owns the slots [first, first + n)). */
typedef struct {
    uint64_t slot_bytes;
    int first, n; /* slots [first, first + n) */
    int n_layers; /* layers using this class */
} ec_class;

struct expert_cache {
    const q3n_model *m;
    gguf_file *f;
    ec_mode mode;
    ec_params p;
    bool direct;       /* O_DIRECT reads (p.io resolved) */
    int pk;            /* predictions per row to prefetch */
    int n_layer, E, K; /* layers with experts (main + MTP), experts, experts per token */
    ec_layer *layers;
    ec_class *cls;
    int n_cls;
    ec_slot *slots;
    int n_slots;
    uint8_t **arenas; /* mmap'd slot memory */
    uint64_t *arena_len;
    int n_arenas;
    slot_policy *sp; /* key (layer * E + expert) -> slot, LRU, pins, prefetch protection (under mu) */
    int32_t *pinned; /* [n_layer * E] slots pinned by the layer's acquire */
    int *n_pinned;   /* [n_layer] */

    /* I/O pool (expert_io.c) */
    pthread_mutex_t mu;
    pthread_cond_t cv_job, cv_done;
    pthread_t *io;
    int n_io;
    bool quit, io_started;
    int32_t *qd, *qp; /* demand / prefetch job rings of n_slots entries */
    int qd_head, qd_n, qp_head, qp_n;
    int *dfd; /* per part: our own read descriptor (O_DIRECT with direct_io) */
    atomic_uint_fast64_t reads;
    ec_fault fault;
    uint64_t fault_n;

    /* pre-gated prefetch */
    pool *pool;  /* router matmul of the hint */
    float *rbuf; /* [rows][E] router logits */
    int rbuf_rows;
    int32_t *topk;
    void *actq; /* quantised activations for the SIMD router product */
    size_t actq_bytes;
    uint8_t *pred;      /* [n_layer * E] predicted for that layer by the previous hint */
    uint64_t *read_fwd; /* [n_layer * E] the forward that last read the key from disk (0: none) */
    uint8_t *has_pred;  /* [n_layer] */
    int32_t *pf_ids;    /* [E] scratch of ec_prefetch: the new predictions in the given order */

    ec_stats st;
    FILE *trace;
    uint64_t fwd; /* forward counter (trace; read_fwd: which forward read a key) */
    int rows;     /* rows of the current forward (from the hint) */
};

static inline int ec_layer_of(const expert_cache *ec, int32_t key) { return key / ec->E; }
static inline int ec_expert_of(const expert_cache *ec, int32_t key) { return key % ec->E; }
/* Offset of expert e's bytes inside its region (direct I/O reads whole aligned blocks). */
static inline uint64_t ec_pad(const expert_cache *ec, const ec_range *r, int e) {
    return ec->direct ? (r->base + (uint64_t)e * r->stride) % EC_ALIGN : 0;
}

/* expert_io.c */
int ec_io_start(expert_cache *ec); /* threads + direct descriptors; -1 (rl_lasterr) */
void ec_io_stop(expert_cache *ec);
void ec_io_submit(expert_cache *ec, int32_t slot, bool demand); /* caller holds mu */
/* A prefetch still waiting in its ring that an acquire now needs: move it to the demand ring. */
void ec_io_promote(expert_cache *ec, int32_t slot);
/* Can part files be read with O_DIRECT here (open + one aligned read)? */
bool ec_io_probe_direct(gguf_file *f);
/* Format the error of a failed slot load into rl_seterr. Caller holds mu. */
int ec_io_error(expert_cache *ec, int32_t slot);

#endif
