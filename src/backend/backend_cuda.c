/* backend_cuda.c — the CUDA backend: full residency (every tensor uploaded once, raw
 * quantised blocks), the sequence state on the device, the forward pass as a sequence of
 * kernel launches on one stream (plus a side stream for the shared expert), and the decode
 * step captured as one CUDA graph.
 *
 * Shape of a forward (T rows; kernels in src/cuda, contract in src/cuda/cuda_ops.h):
 *   embedding gather -> per layer: [mixer] -> x += y, xn = norm -> router -> plan ->
 *   expert gate/up, down (grouped by expert) || shared expert -> combine (+ next norm) -> head.
 * Decode (T = 1, no debug hooks) is captured once per context into a graph that reads the
 * token id and position from device memory; RL_CUDA_GRAPHS=0 runs the same launches directly.
 * The only host round trip of a step is the final copy of the logits and hidden state.
 * Debug hooks (dump, route, row_state) are served by synchronous copies (slow, exact).
 *
 * The KV cache format comes from --kv (engine_ctx_params.kv; the old RL_CUDA_KV switch is gone).
 * Attention: with the f16 cache (the default) on tensor cores (attn_tc.cu: its own numerics, shared by
 * decode, verify and prefill; RL_CUDA_ATTN_TC=0 turns it off), with the f32 cache the FP32 kernels.
 * Environment: RL_CUDA_GRAPHS=0 (no graphs), RL_CUDA_ATTN=per-warp (the previous decode attention
 * split kernel, for A/B timing: same bits), RL_CUDA_ATTN_PF=staged|unstaged (the previous prefill
 * attention kernels, same bits: `staged` stages each K/V slice in shared memory once per block,
 * `unstaged` reads K/V from global memory per warp; the default is the register-tiled kernel:
 * 12-layer Q4_K_M prompt 32K 1.60x over staged on the H200, bench/results/2026-12-02-cuda-tiled-h200.md),
 * RL_CUDA_DN_SPLIT=0 (the decode DeltaNet step of a value head in one block; the default spreads
 * it over 4 blocks, same bits: 12-layer decode +1 % CF2, +3 % Q4_K_M on the H200; docs/TUNING.md),
 * RL_CUDA_VERBOSE=1 (upload time and memory on stderr), RL_CUDA_DEVICE=N; tuning of the small-batch
 * (verify) shapes, same bits whatever the value:
 * RL_CUDA_SMALL_MOE=N (batches of up to N rows run the MoE as one tile per (row, expert) pair, larger ones
 * grouped by expert; 1..16, default 16), RL_CUDA_SMALL_TT=2|4|8 (largest token tile of a small dense batch,
 * default 4). Measured in bench/results/2026-12-01-spec-cuda-h200.md. Decode kernels, same bits
 * whatever the value: RL_CUDA_MM_STAGE=iq|1|0 (weights staged in shared memory: IQ types, the
 * default; all; none), RL_CUDA_FUSE=0|all|combine,norm,router (last-block tails; default none),
 * measured in bench/results/2026-12-01-cuda-decode-h200.md.
 *
 * Files: backend_cuda.c (this one: the context, its device memory and state, the VRAM tier's
 * set-up, the backend_ops table), backend_cuda_model.c (the model upload),
 * backend_cuda_forward.c (the forward pass, graphs, speculative decoding), backend_cuda_int.h
 * (what they share).
 */
#ifdef RL_CUDA
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_cuda_int.h"
#include "cache/vram_plan.h"
#include "kern/kern.h"

/* ---- context -------------------------------------------------------------------------- */

static bool cuda_available(const char **why) {
    static char buf[160];
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n <= 0) {
        snprintf(buf, sizeof buf, "no CUDA device (%s)",
                 e != cudaSuccess ? cudaGetErrorName(e) : "0 devices");
        (void)cudaGetLastError();
        if (why) *why = buf;
        return false;
    }
    return true;
}

static size_t al(size_t n) { return (n + 255) & ~(size_t)255; }

/* Make c's device current on the calling thread (and leave it so). The current device is a property of
 * the host thread, a launch, event record or graph launch on a stream of another device fails, and the
 * engine drives a context from threads other than the one that made it (the server's slot threads):
 * so every entry point of this backend that touches the GPU starts here, and contexts on different
 * devices live in one process. Costs one cudaGetDevice where the device is already current. */
static int ctx_use(const backend_ctx *c) {
    int cur = -1;
    if (cudaGetDevice(&cur) == cudaSuccess && cur == c->cd.ordinal) return 0;
    return CU_CHECK(cudaSetDevice(c->cd.ordinal));
}

/* Carve the device allocation; base NULL only sizes it. */
static size_t carve(backend_ctx *c, uint8_t *base) {
    const q3n_hparams *hp = c->hp;
    size_t T = (size_t)c->n_batch, D = hp->n_embd, hd = hp->head_dim, H = hp->n_head, Hkv = hp->n_head_kv;
    size_t C = hp->ssm_conv_dim, inner = (size_t)hp->ssm_hv * hp->ssm_dv, E = hp->n_expert,
           K = hp->n_expert_used;
    /* ffs: the shared expert's width, or the dense FFN's (it runs in the shared expert's buffers) */
    size_t ff = hp->n_ff_exp, ffs = hp->moe ? hp->n_ff_shexp : hp->n_ff, V = hp->n_vocab, kvw = Hkv * hd;
    size_t kv_el = c->kv_f16 ? 2 : 4, off = 0;
#define TAKE(ptr, bytes)                                                                                     \
    do {                                                                                                     \
        if (base) ptr = (void *)(base + off);                                                                \
        off += al(bytes);                                                                                    \
    } while (0)
    for (int il = 0; il < hp->n_layer; il++) { /* the recurrent states first, as one block */
        if (hp->is_attn[il]) continue;
        TAKE(c->conv[il], sizeof(float) * q3n_conv_floats(hp));
        TAKE(c->ssm[il], sizeof(float) * q3n_ssm_floats(hp));
    }
    c->state_floats = off / sizeof(float);
    if (base) c->state = (float *)base;
    for (int il = 0; il < hp->n_layer + hp->n_nextn; il++) { /* KV caches, the MTP layer's too */
        if (!hp->is_attn[il]) continue;
        TAKE(c->kc[il], kv_el * kvw * (size_t)c->n_ctx);
        TAKE(c->vc[il], kv_el * kvw * (size_t)c->n_ctx);
    }
    size_t big = 2 * H * hd > C ? 2 * H * hd : C, kvb = 2 * kvw > inner ? 2 * kvw : inner;
    size_t ow = H * hd > inner ? H * hd : inner;
    cu_attn_dims ad = {.H = (int)H, .Hkv = (int)Hkv, .hd = (int)hd, .n_ctx = c->n_ctx};
    size_t tsplit = T < CU_ATTN_SPLIT_MAX_T ? T : CU_ATTN_SPLIT_MAX_T;
    TAKE(c->x, 4 * T * D);
    TAKE(c->xn, 4 * T * D);
    TAKE(c->y, 4 * T * D);
    TAKE(c->big, 4 * T * big);
    TAKE(c->kvb, 4 * T * kvb);
    TAKE(c->ba, 4 * T * 2 * hp->ssm_hv);
    TAKE(c->ab, 4 * T * 2 * hp->ssm_hv);
    TAKE(c->o, 4 * T * ow);
    TAKE(c->u, 4 * T * C);
    TAKE(c->rl, 4 * T * E);
    TAKE(c->wts, 4 * T * K);
    TAKE(c->probs, 4 * T * K);
    TAKE(c->h, 4 * T * K * ff);
    TAKE(c->eo, 4 * T * K * D);
    TAKE(c->hs, 4 * T * (ffs ? ffs : 1));
    TAKE(c->sh, 4 * T * D);
    TAKE(c->shg, 4 * T);
    TAKE(c->part, 4 * cu_attn_part_floats(&ad, (int)tsplit));
    TAKE(c->logits, 4 * (size_t)c->logit_rows * V);
    TAKE(c->tok, 4 * T);
    TAKE(c->ids, 4 * T * K);
    TAKE(c->pair_in, 4 * T * K);
    TAKE(c->pair_out, 4 * T * K);
    TAKE(c->pos0, 4);
    TAKE(c->n_tiles, 4);
    TAKE(c->counts, 4 * E);
    TAKE(c->tiles, sizeof(cu_tile) * (size_t)c->max_tiles);
    TAKE(c->row_slot, 4 * T);
    TAKE(c->mcat, 4 * T * 2 * D);
    TAKE(c->ctr, 4 * (CU_CTR_DN + (size_t)hp->ssm_hv));
    { /* the largest input of a matmul on each stream (mixer/MTP inputs, expert downs; the shared expert) */
        size_t w1 = cu_matmul_ws_bytes((int)D, (int)T), w2 = w1;
        const size_t cand[4] = {
            cu_matmul_ws_bytes((int)inner, (int)T), cu_matmul_ws_bytes((int)(H * hd), (int)T),
            cu_matmul_ws_bytes((int)(2 * D), (int)T), cu_matmul_ws_bytes((int)ff, (int)(T * K))};
        for (int i = 0; i < 4; i++) w1 = cand[i] > w1 ? cand[i] : w1;
        if (ffs && cu_matmul_ws_bytes((int)ffs, (int)T) > w2) w2 = cu_matmul_ws_bytes((int)ffs, (int)T);
        if (!hp->moe && cu_matmul_ws_bytes((int)ffs, (int)T) > w1)
            w1 = cu_matmul_ws_bytes((int)ffs, (int)T); /* dense FFN down, main stream */
        TAKE(c->ws, w1);
        TAKE(c->ws2, w2);
    }
#undef TAKE
    return off;
}

static void ctx_geometry(backend_ctx *c, const q3n_hparams *hp, int n_ctx, int n_batch, backend_kv kv) {
    c->hp = hp;
    c->n_ctx = n_ctx;
    c->n_batch = n_batch;
    c->kv_f16 = kv == BACKEND_KV_F16; /* --kv (engine_ctx_params.kv); RL_CUDA_KV is gone */
    c->logit_rows = n_batch < 64 ? n_batch : 64;
    c->max_tiles = n_batch * hp->n_expert_used / CU_TT + hp->n_expert + 1;
    if (c->max_tiles < hp->n_expert_used) c->max_tiles = hp->n_expert_used;
    if (c->max_tiles <
        (n_batch < CU_SMALL_T ? n_batch : CU_SMALL_T) * hp->n_expert_used) /* one tile per pair */
        c->max_tiles = (n_batch < CU_SMALL_T ? n_batch : CU_SMALL_T) * hp->n_expert_used;
}

size_t backend_cuda_ctx_bytes(const q3n_hparams *hp, int n_ctx, int n_batch, backend_kv kv) {
    backend_ctx c = {0};
    ctx_geometry(&c, hp, n_ctx, n_batch, kv);
    return carve(&c, NULL);
}

/* ---- VRAM expert tier (vram_plan.h, vram_tier.h): set-up, stats (the state rollback of a tier
 * forward: state_backup, backend_cuda_forward.c) ---------------------------------------------- */

/* Bytes of every DeltaNet layer's conv + recurrent state (the rollback copy of a tier forward). */
static size_t state_bytes(const q3n_hparams *hp) {
    size_t n = 0;
    for (int il = 0; il < hp->n_layer; il++)
        if (!hp->is_attn[il])
            n += al(sizeof(float) * q3n_conv_floats(hp)) + al(sizeof(float) * q3n_ssm_floats(hp));
    return n ? n : 256;
}

/* Whether the CPU computes layer L's routed experts with the GPU's bits (the exact hybrid,
 * --vram-miss cpu|auto): each expert matrix takes CUDA's integer path on this device, so its products
 * are the scalar vec_dot's, and its type's CPU kernels are vec_dot's bits too (kern_type_exact: the K
 * and IQ types); the activations are quantised to Q8_K by the same rule on both sides and SiLU * up is
 * swiglu() on both (src/base/swiglu.h). The 32-value types and the types CUDA runs on its float path
 * are copied instead. */
static bool experts_exact(const backend_ctx *c, const q3n_layer *L) {
    const q3n_hparams *hp = &c->m->hp;
    const int D = hp->n_embd, ff = hp->n_ff_exp;
    const ops_mat *up = L->fused_gate_up ? &L->gate_exps : &L->up_exps;
    return kern_type_exact(L->gate_exps.type) && kern_type_exact(up->type) &&
           kern_type_exact(L->down_exps.type) &&
           cu_matmul_integer(&c->cd, L->gate_exps.type, D, L->fused_gate_up ? 2 * ff : ff) &&
           cu_matmul_integer(&c->cd, up->type, D, ff) && cu_matmul_integer(&c->cd, L->down_exps.type, ff, D);
}

/* Plan the tier for --vram-mib spec (c's sizes set, nothing allocated yet); *tier: slots are
 * used (false: every expert fits, the plain resident path). */
static int vram_setup(backend_ctx *c, const backend_ctx_opts *o, bool *tier, pool *p) {
    const q3n_hparams *hp = c->hp;
    const char *spec = o->vram_spec;
    vram_geom g;
    size_t fr = 0, tot = 0;
    *tier = false;
    vram_pin_mode pin;
    vram_miss_mode miss;
    const int pin_env = c->tune.vram_pin; /* RL_VRAM_PIN, the older switch: 1 = on, 0 = off */
    const char *pin_s = o->vram_pin ? o->vram_pin : pin_env == 1 ? "on" : pin_env == 0 ? "off" : NULL;
    if (vram_pin_parse(pin_s, &pin) || vram_miss_parse(o->vram_miss, &miss)) return -1;
    if (vram_geom_of(c->m, &g) || CU_CHECK(cudaMemGetInfo(&fr, &tot))) return -1;
    const size_t TK = (size_t)c->n_batch * hp->n_expert_used;
    g.dev_free = fr;
    g.dev_total = tot;
    g.dense = dmodel_bytes(c->m, false);
    if (!g.dense) return -1;
    /* context + rollback copy + the tier's plan buffers (and slack for their alignment) */
    g.ctx = carve(c, NULL) + state_bytes(hp) + sizeof(cu_tile) * (TK + (size_t)hp->n_expert + 1) + 24 * TK +
            ((size_t)4 << 20);
    vram_plan plan;
    if (vram_plan_make(&g, spec, &plan)) return -1;
    const int force = c->tune.vram_slots; /* RL_VRAM_SLOTS (tests): N slots per layer whatever the budget */
    if (force > 0) {
        int n = force < hp->n_expert_used ? hp->n_expert_used : force;
        n = n > hp->n_expert ? hp->n_expert : n;
        plan.full = false;
        for (int il = 0; il < hp->n_layer; il++) plan.slots[il] = n;
        plan.min_slots = plan.max_slots = n;
        snprintf(plan.reason, sizeof plan.reason, "%d of %d expert slots per layer (RL_VRAM_SLOTS=%d)", n,
                 hp->n_expert, force);
    }
    snprintf(c->vram_msg, sizeof c->vram_msg, "%s", plan.reason);
    if (plan.full) return 0;
    vram_tier_opts vo = {.prefetch = c->tune.vram_prefetch,
                         .overlap = c->tune.vram_overlap,
                         .graph = c->tune.vram_graph,
                         .warm = c->tune.vram_warm,
                         .stream = c->tune.vram_stream,
                         .graph_mib = c->tune.vram_graph_mib,
                         .fault_at = c->tune.vram_fault,
                         .link_gbs = c->tune.vram_link};
    for (int il = 0; il < hp->n_layer; il++) vo.cpu_exact[il] = experts_exact(c, &c->m->layers[il]);
    if (!(c->vt = vram_tier_new(c->m, &plan, c->n_batch, p, pin, miss, &vo))) return -1;
    *tier = true;
    return 0;
}

static int cuda_set_host_src(backend_ctx *c, const q3n_expert_src *src) {
    if (!c->vt) return 1; /* every expert fit: nothing to feed */
    TRY(ctx_use(c));      /* the tier syncs its copy stream and page-locks the source for this device */
    vram_tier_set_host_src(c->vt, src);
    if (c->gexec) { /* a decode graph may hold the old source's tables (vram_gtab.h): capture again */
        cudaGraphExecDestroy(c->gexec);
        c->gexec = NULL;
    }
    c->gtried = false;
    cuda_verify_graphs_drop(c); /* so may the verify graphs (RL_VRAM_GRAPH_VERIFY) */
    return 0;
}

static void cuda_print_stats(backend_ctx *c, FILE *f) {
    if (c->vt) vram_tier_print(c->vt, f);
    else if (c->vram_msg[0]) fprintf(f, "vram tier: %s\n", c->vram_msg);
}

static void cuda_ctx_free(backend_ctx *c) {
    if (!c) return;
    (void)ctx_use(c); /* the context's streams, graphs and memory are destroyed on its own device */
    if (c->st) cudaStreamSynchronize(c->st);
    if (c->gexec) cudaGraphExecDestroy(c->gexec);
    cuda_rows_free(c);
    for (int t = 0; t <= CU_SMALL_T; t++)
        if (c->vexec[t]) cudaGraphExecDestroy(c->vexec[t]);
    for (int i = 0; i < 2; i++)
        if (c->mexec[i]) cudaGraphExecDestroy(c->mexec[i]);
    if (c->slots) cudaFree(c->slots);
    if (c->dev) cudaFree(c->dev);
    if (c->h_tok) cudaFreeHost(c->h_tok);
    if (c->h_logits) cudaFreeHost(c->h_logits);
    if (c->h_hidden) cudaFreeHost(c->h_hidden);
    if (c->h_tmp) cudaFreeHost(c->h_tmp);
    if (c->ev_fork) cudaEventDestroy(c->ev_fork);
    if (c->ev_join) cudaEventDestroy(c->ev_join);
    if (c->st2) cudaStreamDestroy(c->st2);
    vram_tier_free(c->vt);
    if (c->bk) cudaFree(c->bk);
    if (c->st) cudaStreamDestroy(c->st);
    if (c->dm) dmodel_put(c->dm);
    free(c);
}

static int vram_setup(backend_ctx *c, const backend_ctx_opts *o, bool *tier, pool *p);

static backend_ctx *cuda_ctx_new_opts(const q3n_model *m, pool *p, int n_ctx, int n_batch,
                                      const backend_ctx_opts *o) {
    const backend_kv kv = o ? o->kv : BACKEND_KV_F32;
    const q3n_hparams *hp = &m->hp;
    const char *why = NULL;
    if (!cuda_available(&why)) {
        rl_seterr("CUDA backend: %s", why);
        return NULL;
    }
    /* refused here, in one line, rather than at the first forward's attention launch */
    if (cu_attn_check(hp->head_dim, hp->n_head, hp->n_head_kv, hp->n_rot)) return NULL;
    cuda_tune tune;
    int ordinal = 0;
    if (cuda_tune_from_env(&tune)) return NULL; /* every RL_CUDA_* / RL_VRAM_* switch, once */
    if (tune.device >= 0) { /* RL_CUDA_DEVICE=N; else the calling thread's current device (0 by default) */
        int n_dev = 0;
        if (CU_CHECK(cudaGetDeviceCount(&n_dev))) return NULL;
        if (tune.device >= n_dev) {
            rl_seterr("RL_CUDA_DEVICE=%d: this machine has %d CUDA device%s (0 to %d)", tune.device, n_dev,
                      n_dev == 1 ? "" : "s", n_dev - 1);
            return NULL;
        }
        if (CU_CHECK(cudaSetDevice(tune.device))) return NULL;
    }
    if (CU_CHECK(cudaGetDevice(&ordinal))) return NULL;
    if (ordinal >= CU_MAX_DEVICES) {
        rl_seterr("CUDA device %d: at most %d devices are supported", ordinal, CU_MAX_DEVICES);
        return NULL;
    }
    if (hp->n_expert > 1024 || hp->n_expert_used > 32 || n_batch * hp->n_expert_used > 65536) {
        rl_seterr("CUDA backend: %d experts / top-%d with batch %d is not supported", hp->n_expert,
                  hp->n_expert_used, n_batch);
        return NULL;
    }
    if (cu_tables_init()) return NULL;
    backend_ctx *c = rl_calloc(1, sizeof *c, "CUDA context");
    if (!c) return NULL;
    c->m = m;
    c->tune = tune;
    c->cd.ordinal = ordinal; /* what ctx_use (cuda_ctx_free too) makes current, before anything fails */
    if (cu_dev_init(&c->cd, ordinal, &tune.k)) goto fail;
    ctx_geometry(c, hp, n_ctx, n_batch, kv);
    c->graphs = tune.graphs;
    c->attn_per_warp = tune.attn_per_warp;
    c->attn_pf_staged = tune.attn_pf_staged;
    c->attn_pf_tiled = tune.attn_pf_tiled;
    /* the tensor-core attention where it applies: the f16 cache, at most 16 query heads per KV head */
    c->attn_tc = tune.attn_tc && c->kv_f16 && hp->n_head / hp->n_head_kv <= 16;
    c->attn_db = tune.attn_db;
    c->dn_split = tune.dn_split;
    c->fuse = tune.fuse;
    c->small_moe = tune.small_moe < 1 || tune.small_moe > CU_SMALL_T ? CU_SMALL_T : tune.small_moe;
    size_t mfree = 0;
    (void)cudaMemGetInfo(&mfree, &c->mem_total); /* for engine_mem_info; a failure leaves zeros */
    (void)cudaGetLastError();
    c->mem_free0 = mfree;
    bool tier = false;
    if (o && o->vram_spec && hp->moe && vram_setup(c, o, &tier, p)) goto fail; /* dense: no experts to tier */
    if (!(c->dm = dmodel_get(m, !tier, ordinal, tune.verbose))) goto fail;
    (void)cudaMemGetInfo(&c->mem_free1, &c->mem_total);
    (void)cudaGetLastError();
    if (CU_CHECK(cudaStreamCreateWithFlags(&c->st, cudaStreamNonBlocking)) ||
        CU_CHECK(cudaStreamCreateWithFlags(&c->st2, cudaStreamNonBlocking)) ||
        CU_CHECK(cudaEventCreateWithFlags(&c->ev_fork, cudaEventDisableTiming)) ||
        CU_CHECK(cudaEventCreateWithFlags(&c->ev_join, cudaEventDisableTiming)))
        goto fail;
    c->ks = (cu_stream){c->st, &c->cd};
    c->ks2 = (cu_stream){c->st2, &c->cd};
    c->dev_bytes = carve(c, NULL);
    if (CU_CHECK(cudaMalloc((void **)&c->dev, c->dev_bytes))) {
        rl_seterr("cannot allocate %.2f GiB of GPU memory for the context (lower --ctx or --batch): %s",
                  c->dev_bytes / 1073741824.0, rl_lasterr());
        goto fail;
    }
    carve(c, c->dev);
    size_t V = hp->n_vocab, D = hp->n_embd;
    { /* host staging of the debug hooks: 3 dumped buffers of the widest activation, the
       * route triples, or one layer's state */
        size_t w = D, K3 = 3 * (size_t)hp->n_expert_used;
        size_t cand[] = {(size_t)hp->ssm_conv_dim, (size_t)hp->ssm_hv * hp->ssm_dv,
                         (size_t)hp->n_head * hp->head_dim, K3};
        for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++) w = cand[i] > w ? cand[i] : w;
        c->h_tmp_floats = 3 * (size_t)n_batch * w;
        if (c->h_tmp_floats < q3n_ssm_floats(hp) + q3n_conv_floats(hp))
            c->h_tmp_floats = q3n_ssm_floats(hp) + q3n_conv_floats(hp);
    }
    if (CU_CHECK(cudaMallocHost((void **)&c->h_tok,
                                sizeof(int32_t) * (2 * (size_t)n_batch + 1))) || /* + row slots */
        CU_CHECK(cudaMallocHost((void **)&c->h_logits, sizeof(float) * (size_t)c->logit_rows * V)) ||
        CU_CHECK(cudaMallocHost((void **)&c->h_hidden, sizeof(float) * (size_t)n_batch * D)) ||
        CU_CHECK(cudaMallocHost((void **)&c->h_tmp, sizeof(float) * c->h_tmp_floats)))
        goto fail;
    if (CU_CHECK(cudaMemsetAsync(c->dev, 0, c->dev_bytes, c->st)) || CU_CHECK(cudaStreamSynchronize(c->st)))
        goto fail;
    (void)cudaMemGetInfo(&c->mem_free2, &c->mem_total);
    (void)cudaGetLastError();
    if (tune.verbose)
        fprintf(stderr,
                "redlite cuda: context %d positions x %d rows: %.2f GiB (KV %s); device %d sm_%d, %d SMs, "
                "%zu KiB shared memory per block (%zu opt-in), PDL %s\n",
                n_ctx, n_batch, c->dev_bytes / 1073741824.0, c->kv_f16 ? "f16" : "f32", c->cd.ordinal,
                c->cd.cc, c->cd.n_sm, c->cd.smem_max >> 10, c->cd.smem_optin >> 10, c->cd.pdl ? "on" : "off");
    if (tier) {
        const vram_plan *vp = vram_tier_plan(c->vt);
        if (CU_CHECK(cudaMalloc((void **)&c->bk, sizeof(float) * (c->state_floats ? c->state_floats : 1))))
            goto fail;
        /* the host picks the slots per layer: no decode or verify graph (forward_run); the MTP
         * head's graph stays (its layer's experts are resident) */
        if (tune.verbose) fprintf(stderr, "redlite cuda: vram tier: %s\n", vp->reason);
    }
    return c;
fail:
    cuda_ctx_free(c);
    return NULL;
}

static backend_ctx *cuda_ctx_new(const q3n_model *m, pool *p, int n_ctx, int n_batch, backend_kv kv) {
    return cuda_ctx_new_opts(m, p, n_ctx, n_batch, &(backend_ctx_opts){.kv = kv});
}

static void cuda_reset(backend_ctx *c) {
    const q3n_hparams *hp = c->hp;
    if (ctx_use(c)) return; /* reset has no error return; a failed switch leaves the error set */
    for (int il = 0; il < hp->n_layer; il++) {
        if (hp->is_attn[il]) continue;
        CU_CHECK(cudaMemsetAsync(c->conv[il], 0, sizeof(float) * q3n_conv_floats(hp), c->st));
        CU_CHECK(cudaMemsetAsync(c->ssm[il], 0, sizeof(float) * q3n_ssm_floats(hp), c->st));
    }
    CU_CHECK(cudaStreamSynchronize(c->st));
}

static int cuda_state_get(backend_ctx *c, int il, float *conv, float *ssm) {
    TRY(ctx_use(c));
    if (il < 0 || il >= c->hp->n_layer || !c->conv[il])
        return rl_seterr("layer %d has no recurrent state", il);
    TRY(CU_CHECK(cudaMemcpyAsync(conv, c->conv[il], sizeof(float) * q3n_conv_floats(c->hp),
                                 cudaMemcpyDeviceToHost, c->st)));
    TRY(CU_CHECK(cudaMemcpyAsync(ssm, c->ssm[il], sizeof(float) * q3n_ssm_floats(c->hp),
                                 cudaMemcpyDeviceToHost, c->st)));
    return CU_CHECK(cudaStreamSynchronize(c->st));
}

static int cuda_state_set(backend_ctx *c, int il, const float *conv, const float *ssm) {
    TRY(ctx_use(c));
    if (il < 0 || il >= c->hp->n_layer || !c->conv[il])
        return rl_seterr("layer %d has no recurrent state", il);
    TRY(CU_CHECK(cudaMemcpyAsync(c->conv[il], conv, sizeof(float) * q3n_conv_floats(c->hp),
                                 cudaMemcpyHostToDevice, c->st)));
    TRY(CU_CHECK(cudaMemcpyAsync(c->ssm[il], ssm, sizeof(float) * q3n_ssm_floats(c->hp),
                                 cudaMemcpyHostToDevice, c->st)));
    return CU_CHECK(cudaStreamSynchronize(c->st));
}

static size_t cuda_kv_row_bytes(backend_ctx *c) {
    return (c->kv_f16 ? 2 : 4) * (size_t)c->hp->n_head_kv * (size_t)c->hp->head_dim;
}

/* The state format's KV part: the layout, and "-tc" where attention runs on tensor cores (its K/V rows
 * of later layers differ from the FP32 kernels', so a state is only restored under the arithmetic
 * that wrote it; "f16" stays the FP32 kernels' name, as written before the tensor cores came). */
static const char *cuda_kv_format(backend_ctx *c) {
    return !c->kv_f16 ? "f32" : c->attn_tc ? "f16-tc" : "f16";
}

static void cuda_mem_info(backend_ctx *c, engine_mem *out) {
    const q3n_hparams *hp = c->hp;
    for (int il = 0; il < hp->n_layer + hp->n_nextn; il++) { /* the MTP layer's KV cache too */
        if (hp->is_attn[il]) out->kv_bytes += 2 * cuda_kv_row_bytes(c) * (size_t)c->n_ctx;
        else if (il < hp->n_layer)
            out->state_bytes += sizeof(float) * (q3n_conv_floats(hp) + q3n_ssm_floats(hp));
    }
    out->scratch_bytes =
        c->dev_bytes - out->kv_bytes - out->state_bytes; /* carve's alignment padding included */
    out->device = true;
    out->dev_total = c->mem_total;
    /* a model already uploaded by another context: mem_free0 == mem_free1 says nothing of the weights */
    out->dev_free_before_weights = c->mem_free0 > c->mem_free1 ? c->mem_free0 : 0;
    out->dev_free_after_weights = c->mem_free1;
    out->dev_free_after_ctx = c->mem_free2;
    out->decode_graph_nodes = c->graph_nodes;
    out->decode_graph_kernels = c->graph_kernels;
    if (c->vt) {
        vram_link_stats l;
        vram_tier_link_stats(c->vt, &l);
        out->h2d = true;
        out->h2d_bytes = l.bytes;
        out->h2d_seconds = l.seconds;
        out->h2d_cap_gbs = l.cap_gbs;
        out->h2d_raw_gbs = l.raw_gbs;
    }
}

static int cuda_kv_get(backend_ctx *c, int il, int n, void *k, void *v) {
    TRY(ctx_use(c));
    if (il < 0 || il >= c->hp->n_layer || !c->hp->is_attn[il])
        return rl_seterr("layer %d has no KV cache", il);
    if (n < 0 || n > c->n_ctx) return rl_seterr("KV rows %d: beyond the context (%d)", n, c->n_ctx);
    size_t b = cuda_kv_row_bytes(c) * (size_t)n;
    TRY(CU_CHECK(cudaMemcpyAsync(k, c->kc[il], b, cudaMemcpyDeviceToHost, c->st)));
    TRY(CU_CHECK(cudaMemcpyAsync(v, c->vc[il], b, cudaMemcpyDeviceToHost, c->st)));
    return CU_CHECK(cudaStreamSynchronize(c->st));
}

static int cuda_kv_set(backend_ctx *c, int il, int n, const void *k, const void *v) {
    TRY(ctx_use(c));
    if (il < 0 || il >= c->hp->n_layer || !c->hp->is_attn[il])
        return rl_seterr("layer %d has no KV cache", il);
    if (n < 0 || n > c->n_ctx) return rl_seterr("KV rows %d: beyond the context (%d)", n, c->n_ctx);
    size_t b = cuda_kv_row_bytes(c) * (size_t)n;
    TRY(CU_CHECK(cudaMemcpyAsync(c->kc[il], k, b, cudaMemcpyHostToDevice, c->st)));
    TRY(CU_CHECK(cudaMemcpyAsync(c->vc[il], v, b, cudaMemcpyHostToDevice, c->st)));
    return CU_CHECK(cudaStreamSynchronize(c->st));
}

/* The entry points of backend_cuda_forward.c, each on its context's device (ctx_use). forward_rows:
 * contexts of different devices have different uploads (dmodel_get), which cuda_forward_rows already
 * answers with 1 (the engine then runs the steps one by one, each on its own device). */
static int cuda_forward_dev(backend_ctx *c, const int32_t *tokens, int T, int pos, float *logits,
                            bool all_logits, float *hidden, const backend_hooks *hooks) {
    TRY(ctx_use(c));
    return cuda_forward(c, tokens, T, pos, logits, all_logits, hidden, hooks);
}

static int cuda_forward_rows_dev(backend_ctx *const *cs, const int32_t *tokens, const int *pos, int n,
                                 float *const *logits, float *const *hidden) {
    if (n >= 1) TRY(ctx_use(cs[0]));
    return cuda_forward_rows(cs, tokens, pos, n, logits, hidden);
}

static int cuda_mtp_forward_dev(backend_ctx *c, const float *hidden, const int32_t *next_tokens, int T,
                                int slot, float *logits, float *hidden_out) {
    TRY(ctx_use(c));
    return cuda_mtp_forward(c, hidden, next_tokens, T, slot, logits, hidden_out);
}

static int cuda_slot_restore_dev(backend_ctx *c, int slot) {
    TRY(ctx_use(c));
    return cuda_slot_restore(c, slot);
}

static int cuda_slot_get_dev(backend_ctx *c, int slot, int il, float *conv, float *ssm) {
    TRY(ctx_use(c));
    return cuda_slot_get(c, slot, il, conv, ssm);
}

const backend_ops backend_cuda = {
    .name = "cuda",
    .available = cuda_available,
    .ctx_new = cuda_ctx_new,
    .ctx_free = cuda_ctx_free,
    .reset = cuda_reset,
    .forward = cuda_forward_dev,
    .forward_rows = cuda_forward_rows_dev,
    .state_get = cuda_state_get,
    .state_set = cuda_state_set,
    .set_reference = NULL, /* no double-precision mode: the CPU backend is the oracle */
    .mtp_forward = cuda_mtp_forward_dev,
    .slot_restore = cuda_slot_restore_dev,
    .slot_get = cuda_slot_get_dev,
    .kv_row_bytes = cuda_kv_row_bytes,
    .kv_format = cuda_kv_format,
    .mem_info = cuda_mem_info,
    .kv_get = cuda_kv_get,
    .kv_set = cuda_kv_set,
    .set_expert_src = NULL, /* full residency, or the VRAM tier's slots fed by set_host_src */
    .ctx_new_opts = cuda_ctx_new_opts,
    .set_host_src = cuda_set_host_src,
    .print_stats = cuda_print_stats,
};
#else
typedef int backend_cuda_unused; /* ISO C wants a declaration in every translation unit */
#endif
