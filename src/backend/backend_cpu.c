/* backend_cpu.c — the CPU backend: the reference forward pass of qwen3next_forward.c with its
 * state in host memory. */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu_forward.h"
#include "base/common.h"
#include "kern/kern.h"

struct backend_ctx {
    const q3n_model *m;
    q3n_state st;
    q3n_run run;
    float *lrows; /* cpu_forward_rows: the output projection of a batch's rows (grown on use) */
    int lrows_n;  /* rows it holds */
};

static bool cpu_available(const char **why) {
    (void)why;
    return true;
}

/* The recurrent state of one DeltaNet layer (and its uncommitted copy): 2 MiB a layer at the 80B
 * geometry, read and written whole by every decode step and every prompt row. States of 1 MiB or
 * more live in huge pages (rl_huge_alloc: one TLB entry instead of 512): on a 2-vCPU Intel Xeon VM,
 * 4-layer Q4_K_M, 2 threads, the recurrence went 0.47-0.51 -> 0.43-0.44 ms a decode token
 * and 0.25 -> 0.22 ms a prompt row (the KV cache, read once a token, gained nothing measurable the
 * same way). Zeroed; state_free releases either kind. */
static bool state_huge(size_t floats) { return floats * sizeof(float) >= RL_HUGE_PAGE / 2; }
static float *state_alloc(size_t floats, const char *what) {
    return state_huge(floats) ? rl_huge_alloc(floats * sizeof(float), what)
                              : rl_calloc(floats, sizeof(float), what);
}
static void state_free(float *p, size_t floats) {
    if (state_huge(floats)) rl_huge_free(p, floats * sizeof(float));
    else free(p);
}

static void cpu_ctx_free(backend_ctx *c) {
    if (!c) return;
    for (int il = 0; il < c->m->hp.n_layer + c->m->hp.n_nextn; il++) {
        if (c->st.k_cache) free(c->st.k_cache[il]);
        if (c->st.v_cache) free(c->st.v_cache[il]);
        if (c->st.conv) free(c->st.conv[il]);
        if (c->st.ssm) state_free(c->st.ssm[il], q3n_ssm_floats(&c->m->hp));
        if (c->st.conv_next) free(c->st.conv_next[il]);
        if (c->st.ssm_next) state_free(c->st.ssm_next[il], q3n_ssm_floats(&c->m->hp));
    }
    free(c->st.k_cache);
    free(c->st.v_cache);
    free(c->st.conv);
    free(c->st.ssm);
    free(c->st.conv_next);
    free(c->st.ssm_next);
    free(c->run.scratch);
    free(c->run.actq);
    free(c->lrows);
    free(c);
}

static backend_ctx *cpu_ctx_new(const q3n_model *m, pool *p, int n_ctx, int n_batch, backend_kv kv) {
    const q3n_hparams *hp = &m->hp;
    backend_ctx *c = rl_calloc(1, sizeof *c, "context");
    if (!c) return NULL;
    c->m = m;
    int nl = hp->n_layer + hp->n_nextn; /* the MTP layer keeps a KV cache of its own */
    q3n_state *st = &c->st;
    st->n_ctx = n_ctx;
    st->kv_f16 = kv == BACKEND_KV_F16;
    st->k_cache = rl_calloc((size_t)nl, sizeof(void *), "KV cache");
    st->v_cache = rl_calloc((size_t)nl, sizeof(void *), "KV cache");
    st->conv = rl_calloc((size_t)nl, sizeof(float *), "conv state");
    st->ssm = rl_calloc((size_t)nl, sizeof(float *), "recurrent state");
    st->conv_next = rl_calloc((size_t)nl, sizeof(float *), "conv state");
    st->ssm_next = rl_calloc((size_t)nl, sizeof(float *), "recurrent state");
    if (!st->k_cache || !st->v_cache || !st->conv || !st->ssm || !st->conv_next || !st->ssm_next) goto fail;
    size_t kv_row = (st->kv_f16 ? sizeof(uint16_t) : sizeof(float)) * (size_t)hp->n_head_kv * hp->head_dim;
    for (int il = 0; il < nl; il++) {
        if (hp->is_attn[il]) {
            st->k_cache[il] = rl_malloc(kv_row * (size_t)n_ctx, "KV cache (lower --ctx or use --kv f16)");
            st->v_cache[il] = rl_malloc(kv_row * (size_t)n_ctx, "KV cache (lower --ctx or use --kv f16)");
            if (!st->k_cache[il] || !st->v_cache[il]) goto fail;
        } else {
            st->conv[il] = rl_calloc(q3n_conv_floats(hp), sizeof(float), "conv state");
            st->ssm[il] = state_alloc(q3n_ssm_floats(hp), "recurrent state");
            /* the uncommitted copy a step writes (see q3n_state): a failed step loses nothing */
            st->conv_next[il] = rl_calloc(q3n_conv_floats(hp), sizeof(float), "conv state");
            st->ssm_next[il] = state_alloc(q3n_ssm_floats(hp), "recurrent state");
            if (!st->conv[il] || !st->ssm[il] || !st->conv_next[il] || !st->ssm_next[il]) goto fail;
        }
    }
    c->run.m = m;
    c->run.pool = p;
    c->run.st = st;
    c->run.max_rows = n_batch;
    c->run.scratch = rl_aligned_alloc(sizeof(float) * q3n_scratch_floats(hp, n_batch), "scratch");
    c->run.actq = rl_aligned_alloc(q3n_actq_bytes(hp, n_batch), "activation buffer");
    c->run.fast = true;
    if (!c->run.scratch || !c->run.actq) goto fail;
    return c;
fail:
    cpu_ctx_free(c);
    return NULL;
}

static void cpu_reset(backend_ctx *c) {
    const q3n_hparams *hp = &c->m->hp;
    for (int il = 0; il < hp->n_layer; il++) {
        if (c->st.conv[il]) memset(c->st.conv[il], 0, sizeof(float) * q3n_conv_floats(hp));
        if (c->st.ssm[il]) memset(c->st.ssm[il], 0, sizeof(float) * q3n_ssm_floats(hp));
    }
}

static int cpu_forward(backend_ctx *c, const int32_t *tokens, int T, int pos, float *logits, bool all_logits,
                       float *hidden, const backend_hooks *h) {
    c->run.dump = h ? h->dump : NULL;
    c->run.route = h ? h->route : NULL;
    c->run.row_state = h ? h->row_state : NULL;
    c->run.row_dst = h ? h->row_dst : NULL;
    c->run.hook_ud = h ? h->ud : NULL;
    return q3n_forward(&c->run, tokens, T, pos, logits, all_logits, hidden);
}

/* Rows of several contexts in one forward (backend.h), on the first context's scratch, pool and
 * expert source: the others must read their experts from the same source (a server's slots
 * share one expert cache), else 1 (run one by one). */
static int cpu_forward_rows(backend_ctx *const *cs, const int32_t *tokens, const int *pos, int n,
                            float *const *logits, float *const *hidden) {
    backend_ctx *c = cs[0];
    q3n_state *st[64];
    if (n > 64 || n > c->run.max_rows) return 1;
    for (int i = 0; i < n; i++) {
        const q3n_expert_src *a = &c->run.experts, *b = &cs[i]->run.experts;
        if (cs[i]->m != c->m || a->acquire != b->acquire || a->ud != b->ud || cs[i]->run.fast != c->run.fast)
            return 1;
        st[i] = &cs[i]->st;
    }
    if (c->lrows_n < n) {
        float *p = rl_malloc(sizeof(float) * (size_t)n * (size_t)c->m->hp.n_vocab, "logits of a batch");
        if (!p) return -1;
        free(c->lrows);
        c->lrows = p;
        c->lrows_n = n;
    }
    return q3n_forward_rows(&c->run, st, tokens, pos, n, logits, hidden, c->lrows);
}

static int cpu_mtp_forward(backend_ctx *c, const float *hidden, const int32_t *next_tokens, int T, int slot,
                           float *logits, float *hidden_out) {
    c->run.dump = NULL;
    c->run.route = NULL;
    c->run.row_state = NULL;
    c->run.row_dst = NULL;
    return q3n_mtp_forward(&c->run, hidden, next_tokens, T, slot, logits, hidden_out);
}

static int cpu_state_get(backend_ctx *c, int il, float *conv, float *ssm) {
    const q3n_hparams *hp = &c->m->hp;
    if (!c->st.conv[il]) return rl_seterr("layer %d has no recurrent state", il);
    memcpy(conv, c->st.conv[il], sizeof(float) * q3n_conv_floats(hp));
    memcpy(ssm, c->st.ssm[il], sizeof(float) * q3n_ssm_floats(hp));
    return 0;
}

static int cpu_state_set(backend_ctx *c, int il, const float *conv, const float *ssm) {
    const q3n_hparams *hp = &c->m->hp;
    if (!c->st.conv[il]) return rl_seterr("layer %d has no recurrent state", il);
    memcpy(c->st.conv[il], conv, sizeof(float) * q3n_conv_floats(hp));
    memcpy(c->st.ssm[il], ssm, sizeof(float) * q3n_ssm_floats(hp));
    return 0;
}

static size_t cpu_kv_row_bytes(backend_ctx *c) {
    return (c->st.kv_f16 ? sizeof(uint16_t) : sizeof(float)) * (size_t)c->m->hp.n_head_kv *
           (size_t)c->m->hp.head_dim;
}

static const char *cpu_kv_format(backend_ctx *c) { return c->st.kv_f16 ? "f16" : "f32"; }

static void cpu_mem_info(backend_ctx *c, engine_mem *out) {
    const q3n_hparams *hp = &c->m->hp;
    for (int il = 0; il < hp->n_layer + hp->n_nextn; il++) {
        if (c->st.k_cache[il]) out->kv_bytes += 2 * cpu_kv_row_bytes(c) * (size_t)c->st.n_ctx;
        if (c->st.conv[il])
            out->state_bytes += 2 * sizeof(float) * (q3n_conv_floats(hp) + q3n_ssm_floats(hp));
    }
    out->scratch_bytes =
        sizeof(float) * q3n_scratch_floats(hp, c->run.max_rows) + q3n_actq_bytes(hp, c->run.max_rows);
}

static int cpu_kv_get(backend_ctx *c, int il, int n, void *k, void *v) {
    if (il < 0 || il >= c->m->hp.n_layer || !c->st.k_cache[il])
        return rl_seterr("layer %d has no KV cache", il);
    if (n < 0 || n > c->st.n_ctx) return rl_seterr("KV rows %d: beyond the context (%d)", n, c->st.n_ctx);
    memcpy(k, c->st.k_cache[il], cpu_kv_row_bytes(c) * (size_t)n);
    memcpy(v, c->st.v_cache[il], cpu_kv_row_bytes(c) * (size_t)n);
    return 0;
}

static int cpu_kv_set(backend_ctx *c, int il, int n, const void *k, const void *v) {
    if (il < 0 || il >= c->m->hp.n_layer || !c->st.k_cache[il])
        return rl_seterr("layer %d has no KV cache", il);
    if (n < 0 || n > c->st.n_ctx) return rl_seterr("KV rows %d: beyond the context (%d)", n, c->st.n_ctx);
    memcpy(c->st.k_cache[il], k, cpu_kv_row_bytes(c) * (size_t)n);
    memcpy(c->st.v_cache[il], v, cpu_kv_row_bytes(c) * (size_t)n);
    return 0;
}

static void cpu_set_reference(backend_ctx *c, bool reference) { c->run.fast = !reference; }

static void cpu_set_expert_src(backend_ctx *c, const q3n_expert_src *src) {
    if (src) c->run.experts = *src;
    else memset(&c->run.experts, 0, sizeof c->run.experts);
}

/* Prompt rows per forward: 512, doubled (up to 2048) while an average routed expert would see
 * fewer rows (T * n_expert_used / n_expert) than the AMX tiles pay from (32 for most types,
 * kern_table.amx_min). Measured on the H200 host (AMX, 8 threads, IQ2_XXS, pp2048): 2048 rows
 * +12-16 % over 512; without tiles the 512-bit core gained nothing from more rows (Zen 4 VM).
 * Scratch grows with the rows (~0.6 MB per row at the 80B geometry; redlite info --batch). */
static int cpu_prompt_batch(const q3n_model *m, const pool *p) {
    int b = 512, E = m->hp.n_expert, K = m->hp.n_expert_used;
    const kern_cfg *kc = ops_kern(p);
    if (kc->level == KERN_AVX512 && kc->amx == KERN_AMX_ON && E > 0 && K > 0)
        while (b < 2048 && (long)b * K < 32L * E) b *= 2;
    return b;
}

const backend_ops backend_cpu = {
    .name = "cpu",
    .available = cpu_available,
    .ctx_new = cpu_ctx_new,
    .ctx_free = cpu_ctx_free,
    .reset = cpu_reset,
    .forward = cpu_forward,
    .forward_rows = cpu_forward_rows,
    .state_get = cpu_state_get,
    .state_set = cpu_state_set,
    .set_reference = cpu_set_reference,
    .mtp_forward = cpu_mtp_forward,
    .kv_row_bytes = cpu_kv_row_bytes,
    .kv_format = cpu_kv_format,
    .mem_info = cpu_mem_info,
    .kv_get = cpu_kv_get,
    .kv_set = cpu_kv_set,
    .set_expert_src = cpu_set_expert_src,
    .prompt_batch = cpu_prompt_batch,
};

const backend_ops *backend_find(const char *name) {
    const backend_ops *all[] = {
#ifdef RL_CUDA
        &backend_cuda,
#endif
        &backend_cpu,
    };
    const char *why = NULL;
    if (!name || !strcmp(name, "auto")) {
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            if (all[i]->available(&why)) return all[i];
        return &backend_cpu;
    }
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (strcmp(all[i]->name, name) != 0) continue;
        if (!all[i]->available(&why)) {
            rl_seterr("backend %s is not available here: %s", name, why ? why : "unknown reason");
            return NULL;
        }
        return all[i];
    }
    rl_seterr("unknown backend '%s' (this build has: cpu%s)", name,
#ifdef RL_CUDA
              ", cuda"
#else
              ""
#endif
    );
    return NULL;
}
