/* ctx_plan.c — see ctx_plan.h. */
#include "run/ctx_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "cache/expert_cache.h"
#include "model/qwen3next.h"

#define GiB (1024.0 * 1024.0 * 1024.0)
#define STEP 1024
#define NO_TRAIN_CAP 32768 /* a file that does not say its trained length */

int ctx_plan_choose(const ctx_plan_in *in, ctx_plan *out) {
    memset(out, 0, sizeof *out);
    if (!in->kv_per_pos) return rl_seterr("context plan: no KV bytes per position");
    int train = in->n_ctx_train > 0 ? in->n_ctx_train : NO_TRAIN_CAP;
    int floor_n = train < CTX_PLAN_MIN ? train : CTX_PLAN_MIN;
    double budget;
    const char *how;
    if (in->device) {
        budget = 0.9 * (double)in->mem - (double)in->state - (double)CTX_PLAN_RESERVE;
        how = "90% of the free device memory";
    } else {
        double limit = EC_RAM_SHARE * (double)in->mem;
        double fixed = (double)in->dense + (double)in->state + (double)CTX_PLAN_RESERVE;
        budget = limit - fixed - (double)in->experts;
        how = "70% of RAM after the weights";
        double want = (double)in->kv_per_pos * CTX_PLAN_WANT;
        if (budget <
            want) { /* tight: up to CTX_PLAN_WANT positions from a quarter, the cache gets the rest */
            double quarter = (limit - fixed) / 4;
            budget = quarter < want ? quarter : want;
            how = "a quarter of 70% of RAM after the dense weights, at most the 32768 positions agents need "
                  "(the expert cache gets the rest)";
        }
    }
    double fit = budget > 0 ? budget / (double)in->kv_per_pos : 0;
    long long n = fit >= (double)train ? train : (long long)fit / STEP * STEP;
    if (n < floor_n) n = floor_n;
    out->n_ctx = (int)n;
    out->limited = n < train;
    if (out->limited)
        snprintf(out->reason, sizeof out->reason,
                 "context %d of the model's trained %d: its KV cache (%.1f KiB per position) fits in %s "
                 "(%.2f GiB); --ctx N sets another",
                 out->n_ctx, train, (double)in->kv_per_pos / 1024, how, budget > 0 ? budget / GiB : 0.0);
    else
        snprintf(
            out->reason, sizeof out->reason,
            "context %d = the model's trained length%s (KV cache %.2f GiB, within %s); --ctx N sets another",
            out->n_ctx, in->n_ctx_train > 0 ? "" : " (unknown: capped)",
            (double)in->kv_per_pos * (double)n / GiB, how);
    return 0;
}

/* KV bytes per position of every attention layer (MTP included) in format kv, and the
 * recurrent state of the DeltaNet layers (two copies: committed + the one a step writes). */
static void model_costs(const q3n_hparams *hp, int kv, uint64_t *per_pos, uint64_t *state) {
    uint64_t elt = kv == BACKEND_KV_F16 ? 2 : 4, p = 0, s = 0;
    for (int il = 0; il < hp->n_layer + hp->n_nextn && il < Q3N_MAX_LAYERS; il++) {
        if (hp->is_attn[il]) p += 2ull * (uint64_t)hp->n_head_kv * (uint64_t)hp->head_dim * elt;
        else s += (uint64_t)(q3n_conv_floats(hp) + q3n_ssm_floats(hp)) * sizeof(float);
    }
    *per_pos = p;
    *state = 2 * s;
}

/* Routed-expert bytes the cache plan keeps in RAM for a --cache-mib spec. */
static uint64_t experts_kept(const q3n_model *m, const char *spec) {
    if (!spec || !*spec || !strcmp(spec, "auto") || !strcmp(spec, "full")) return m->bytes_experts;
    if (!strcmp(spec, "mmap")) return 0;
    double mib = strtod(spec, NULL);
    uint64_t b = mib > 0 ? (uint64_t)(mib * 1048576.0) : 0;
    return b < m->bytes_experts ? b : m->bytes_experts;
}

session *ctx_plan_session_new(session_model *m, const session_params *sp, ctx_plan *plan) {
    engine *e = session_model_engine(m);
    const q3n_model *md = engine_model(e);
    int kv;
    if (engine_kv_parse(sp->kv ? sp->kv : "f16", &kv)) return NULL;
    ctx_plan_in in = {.n_ctx_train = md->hp.n_ctx_train};
    model_costs(&md->hp, kv, &in.kv_per_pos, &in.state);
    session_params p = *sp;
    const char *ram_env = getenv("RL_CTX_RAM_MIB"); /* tests: the RAM the plan assumes */
    uint64_t ram = ram_env && atoll(ram_env) > 0 ? (uint64_t)atoll(ram_env) << 20 : rl_total_ram();
    if (!strcmp(engine_backend_name(e), "cpu")) {
        in.mem = ram;
        in.dense = md->bytes_dense;
        in.experts = experts_kept(md, sp->cache_spec);
    } else { /* measure: a probe context, then its memory figures */
        p.n_ctx = in.n_ctx_train > 0 && in.n_ctx_train < CTX_PLAN_MIN ? in.n_ctx_train : CTX_PLAN_MIN;
        session *probe = session_new(m, &p);
        if (!probe) return NULL;
        engine_mem em;
        int rc = engine_mem_info(session_ctx(probe), &em);
        session_free(probe);
        if (rc) return NULL;
        in.device = em.device;
        in.mem = em.dev_free_after_ctx + em.kv_bytes + em.state_bytes +
                 em.scratch_bytes; /* free after the weights */
        in.state = em.state_bytes + em.scratch_bytes;
        if (em.kv_bytes) in.kv_per_pos = em.kv_bytes / (uint64_t)p.n_ctx;
        if (!em.device) { /* a host backend that reports: plan in RAM */
            in.mem = ram;
            in.dense = md->bytes_dense;
            in.experts = experts_kept(md, sp->cache_spec);
        }
    }
    if (ctx_plan_choose(&in, plan)) return NULL;
    p.n_ctx = plan->n_ctx;
    return session_new(m, &p);
}
