/* cmd_info.c — `redlite info MODEL.gguf [--json]`: describe a Qwen3-Next GGUF without
 * loading it: hyperparameters, layer map (Gated DeltaNet / full attention / MTP, classified from
 * tensor names), converter generation, tensor-type histogram, dense vs routed-expert bytes,
 * the bytes of one expert per layer, MTP block and tokenizer summary.
 *
 * Only the GGUF reader is used (no model binding), so it also describes files the engine would
 * refuse. Test: tests/test_info.py.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/opts.h"
#include "base/common.h"
#include "gguf/gguf.h"
#include "backend/backend.h"
#include "run/engine.h"
#include "base/json.h"
#include "gguf/quant.h"
#include "model/qwen3next.h"
#include "backend/cpu_forward.h"
#include "serve/slot_plan.h"
#include "cache/expert_cache.h"
#ifdef RL_CUDA
#include "cuda/cuda_ops.h"
#endif

static const char *CMD = "info";
#define MAX_LAYERS 4096 /* tensors named blk.N beyond this are not mapped */

static const opts_cmd INFO = {
    "info", CMD_INFO, "redlite info MODEL.gguf [--ctx N] [--batch N] [--json]",
    "Describe a GGUF model without loading it: hyperparameters, which layers are full\n"
    "attention / Gated DeltaNet / MTP, the converter generation, tensor types and sizes,\n"
    "dense vs routed-expert bytes, one expert's bytes per layer, the tokenizer, and the\n"
    "memory a context needs: weights, KV cache per token and at --ctx (f32 and f16),\n"
    "DeltaNet state and scratch, on the CPU and on a CUDA device (what the CUDA backend\n"
    "allocates; its scratch is sized by CUDA builds only).\n"
    "The first line is the verdict: where the model runs (cpu, cuda, both) or the one thing\n"
    "that stops it; the exit status is 0 only when it runs.\n"
    "For a split model give the first part (NAME-00001-of-0000N.gguf).",
    NULL};

/* Hyperparameters: JSON name and key suffix after "<arch>.". */
static const struct {
    const char *name, *suffix;
} HP[] = {
    {"context_length", "context_length"},
    {"embedding_length", "embedding_length"},
    {"block_count", "block_count"},
    {"feed_forward_length", "feed_forward_length"},
    {"head_count", "attention.head_count"},
    {"head_count_kv", "attention.head_count_kv"},
    {"key_length", "attention.key_length"},
    {"value_length", "attention.value_length"},
    {"rms_norm_eps", "attention.layer_norm_rms_epsilon"},
    {"rope_freq_base", "rope.freq_base"},
    {"rope_dimension_count", "rope.dimension_count"},
    {"expert_count", "expert_count"},
    {"expert_used_count", "expert_used_count"},
    {"expert_feed_forward_length", "expert_feed_forward_length"},
    {"expert_shared_feed_forward_length", "expert_shared_feed_forward_length"},
    {"ssm_conv_kernel", "ssm.conv_kernel"},
    {"ssm_state_size", "ssm.state_size"},
    {"ssm_group_count", "ssm.group_count"},
    {"ssm_time_step_rank", "ssm.time_step_rank"},
    {"ssm_inner_size", "ssm.inner_size"},
    {"full_attention_interval", "full_attention_interval"},
    {"nextn_predict_layers", "nextn_predict_layers"},
};
#define N_HP (sizeof HP / sizeof HP[0])

typedef struct {
    uint32_t type;
    uint64_t bytes; /* one expert */
    bool present;
} exp_part;

typedef struct {
    bool any; /* some tensor names this layer */
    bool nextn, ssm, ssm_in, gate, qkv, attn;
    exp_part gate_e, up_e, down_e, gate_up_e; /* routed-expert slabs */
    int64_t n_expert;
    uint64_t n_tensors, bytes;
} layer_info;

enum { K_UNKNOWN, K_DELTANET, K_ATTENTION, K_MTP };
static const char *const KIND_NAME[] = {"unknown", "deltanet", "attention", "mtp"};
static const char KIND_CHAR[] = {'?', 'D', 'A', 'M'};

typedef struct {
    gguf_file *f;
    char arch[64]; /* key prefix: general.architecture, "qwen3next" if absent */
    bool arch_present;
    uint64_t file_size;
    /* hyperparameters as found (NULL if absent) */
    const gguf_kv *hp[N_HP];
    uint32_t interval;
    bool interval_default;
    int n_layer, n_main;
    layer_info *layers;
    int *kind;
    int n_kind[4];
    const char *generation;
    uint64_t type_count[QT_COUNT], type_bytes[QT_COUNT];
    uint64_t total_bytes, routed_bytes, mtp_bytes, mtp_tensors;
    bool has_active;
    uint64_t active_bytes;
    uint64_t cache_min; /* smallest bounded expert cache (0: no routed experts) */
    /* memory a context needs (mem.ok: the hyperparameters were read) */
    struct {
        bool ok, cuda_ok;
        int n_ctx, n_batch, n_attn, n_mtp_attn, n_dn;
        uint64_t kv_token[2];     /* per position, main attention layers: [0] f32, [1] f16 */
        uint64_t kv_token_mtp[2]; /* the MTP layer's own cache */
        uint64_t state;           /* DeltaNet conv + recurrent state, one copy */
        uint64_t cpu_scratch;     /* activations + quantised activations of n_batch rows */
        uint64_t cuda_ctx[2];     /* the CUDA context allocation (KV + state + scratch), per format */
    } mem;
    /* the verdict: where the model runs, or the one thing that stops it (verdict_compute) */
    struct {
        bool runs, cpu, cuda;
        char line[640];
    } verdict;
} info;

/* What a context needs (see docs/ENGINE.md, "Memory"): the KV cache holds K and V rows of
 * Hkv*hd elements per attention layer and position (the MTP layer has a cache of its own); a
 * DeltaNet layer keeps (kw-1)*conv_dim conv floats and hv*dv*dk recurrent floats, twice on the
 * CPU (committed + the uncommitted copy a step writes); scratch is sized by the backends' own
 * functions, so these figures are the allocations, not a model of them. */
static void mem_compute(info *in, const q3n_hparams *hp, int n_ctx, int n_batch) {
    in->mem.n_ctx = n_ctx > 0 ? n_ctx : hp->n_ctx_train > 0 ? hp->n_ctx_train : 4096;
    in->mem.n_batch = n_batch;
    for (int il = 0; il < hp->n_layer + hp->n_nextn; il++) {
        if (il >= hp->n_layer) in->mem.n_mtp_attn += hp->is_attn[il];
        else if (hp->is_attn[il]) in->mem.n_attn++;
        else in->mem.n_dn++;
    }
    uint64_t row = (uint64_t)hp->n_head_kv * (uint64_t)hp->head_dim;
    for (int f = 0; f < 2; f++) {
        uint64_t el = f ? 2 : 4;
        in->mem.kv_token[f] = 2 * row * el * (uint64_t)in->mem.n_attn;
        in->mem.kv_token_mtp[f] = 2 * row * el * (uint64_t)in->mem.n_mtp_attn;
    }
    in->mem.state = (uint64_t)in->mem.n_dn * sizeof(float) * (q3n_conv_floats(hp) + q3n_ssm_floats(hp));
    in->mem.cpu_scratch = sizeof(float) * q3n_scratch_floats(hp, n_batch) + q3n_actq_bytes(hp, n_batch);
#ifdef RL_CUDA
    in->mem.cuda_ok = true;
    for (int f = 0; f < 2; f++)
        in->mem.cuda_ctx[f] =
            backend_cuda_ctx_bytes(hp, in->mem.n_ctx, n_batch, f ? BACKEND_KV_F16 : BACKEND_KV_F32);
#endif
    in->mem.ok = true;
}

/* "blk.N.rest" -> N and rest; -1 if the name is not a block tensor. */
static int block_of(const char *name, const char **rest) {
    if (strncmp(name, "blk.", 4) != 0) return -1;
    const char *p = name + 4;
    long n = 0;
    if (*p < '0' || *p > '9') return -1;
    while (*p >= '0' && *p <= '9') {
        n = n * 10 + (*p++ - '0');
        if (n >= MAX_LAYERS) return -1;
    }
    if (*p != '.') return -1;
    *rest = p + 1;
    return (int)n;
}

/* "blk.%d.attn_qkv.weight" -> "attn_qkv" */
static void short_name(q3n_tensor_id id, char *buf, size_t n) {
    const char *s = q3n_tensor(id)->name, *dot;
    if (!strncmp(s, "blk.%d.", 7)) s += 7;
    dot = strrchr(s, '.');
    snprintf(buf, n, "%.*s", (int)(dot ? dot - s : (long)strlen(s)), s);
}

static bool is_routed(int id) { return id >= 0 && q3n_tensor((q3n_tensor_id)id)->routed; }

static void note_expert(exp_part *e, const gguf_tensor *t, int64_t *n_expert) {
    int64_t ne2 = t->n_dims >= 3 ? t->ne[2] : 1;
    e->present = true;
    e->type = t->type;
    e->bytes = t->nbytes / (uint64_t)ne2;
    *n_expert = ne2;
}

static bool hp_u64(const info *in, const char *name, uint64_t *out) {
    for (size_t i = 0; i < N_HP; i++) {
        if (strcmp(HP[i].name, name) != 0 || !in->hp[i]) continue;
        const gguf_value *v = &in->hp[i]->val;
        if (v->type == GGUF_TYPE_UINT8 || v->type == GGUF_TYPE_UINT16 || v->type == GGUF_TYPE_UINT32 ||
            v->type == GGUF_TYPE_UINT64) {
            *out = v->v.u64;
            return true;
        }
        if ((v->type == GGUF_TYPE_INT8 || v->type == GGUF_TYPE_INT16 || v->type == GGUF_TYPE_INT32 ||
             v->type == GGUF_TYPE_INT64) &&
            v->v.i64 >= 0) {
            *out = (uint64_t)v->v.i64;
            return true;
        }
    }
    return false;
}

/* Gather everything printed; false (error set) on out of memory. */
static bool analyse(info *in) {
    gguf_file *f = in->f;
    gguf_str a;
    snprintf(in->arch, sizeof in->arch, "qwen3next");
    if (gguf_get_str(f, "general.architecture", &a) && a.n > 0 && a.n < sizeof in->arch) {
        memcpy(in->arch, a.p, a.n);
        in->arch[a.n] = 0;
        in->arch_present = true;
    }
    for (size_t i = 0; i < N_HP; i++) {
        char key[160];
        snprintf(key, sizeof key, "%s.%s", in->arch, HP[i].suffix);
        in->hp[i] = gguf_find_kv(f, key);
    }
    for (int i = 0; i < f->n_parts; i++) in->file_size += f->parts[i].size;
    uint64_t v;
    in->interval = 4;
    in->interval_default = !hp_u64(in, "full_attention_interval", &v) || v == 0 || v > MAX_LAYERS;
    if (!in->interval_default) in->interval = (uint32_t)v;

    /* layers: block_count, extended by any higher blk.N seen */
    uint64_t bc = 0;
    hp_u64(in, "block_count", &bc);
    int n_layer = bc < MAX_LAYERS ? (int)bc : MAX_LAYERS;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const char *rest;
        int b = block_of(f->tensors[i].name, &rest);
        if (b >= n_layer) n_layer = b + 1;
    }
    in->n_layer = n_layer;
    in->layers = rl_calloc((size_t)n_layer + 1, sizeof *in->layers, "layer table");
    in->kind = rl_calloc((size_t)n_layer + 1, sizeof *in->kind, "layer kinds");
    if (!in->layers || !in->kind) return false;

    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        in->type_count[t->type]++;
        in->type_bytes[t->type] += t->nbytes;
        in->total_bytes += t->nbytes;
        int tb, id = q3n_tensor_lookup(t->name, &tb); /* the model's tensor table */
        if (is_routed(id)) in->routed_bytes += t->nbytes;
        const char *r;
        int b = block_of(t->name, &r);
        if (b < 0) continue;
        layer_info *L = &in->layers[b];
        L->any = true;
        L->n_tensors++;
        L->bytes += t->nbytes;
        if (id < 0) continue; /* a name the model does not know: counted, not classified */
        const q3n_tensor_desc *d = q3n_tensor((q3n_tensor_id)id);
        if (d->kind == Q3N_KIND_MTP) L->nextn = true;
        else if (id == Q3N_T_SSM_IN) L->ssm = L->ssm_in = true;
        else if (id == Q3N_T_SSM_GATE) L->gate = true;
        else if (id == Q3N_T_SSM_QKV) L->qkv = true; /* a fused qkv alone would be attention */
        else if (d->kind == Q3N_KIND_DELTANET) L->ssm = true;
        else if (d->kind == Q3N_KIND_ATTN && id != Q3N_T_ATTN_Q_NORM && id != Q3N_T_ATTN_K_NORM)
            L->attn = true;
        else if (id == Q3N_T_GATE_EXPS) note_expert(&L->gate_e, t, &L->n_expert);
        else if (id == Q3N_T_UP_EXPS) note_expert(&L->up_e, t, &L->n_expert);
        else if (id == Q3N_T_DOWN_EXPS) note_expert(&L->down_e, t, &L->n_expert);
        else if (id == Q3N_T_GATE_UP_EXPS) note_expert(&L->gate_up_e, t, &L->n_expert);
    }

    /* classify (kinds from the tensor table): MTP extras mark the MTP block; DeltaNet tensors
     * (the split q|k|v + gate, or the fused projection) mark Gated DeltaNet; the attention
     * projections, or a fused q|k|v alone, mark full attention. */
    bool split = false, legacy = false;
    for (int i = 0; i < n_layer; i++) {
        const layer_info *L = &in->layers[i];
        int k = K_UNKNOWN;
        if (L->nextn) k = K_MTP;
        else if (L->ssm || L->gate) k = K_DELTANET;
        else if (L->attn || L->qkv) k = K_ATTENTION;
        in->kind[i] = k;
        in->n_kind[k]++;
        if (k == K_DELTANET && (L->gate || L->qkv)) split = true;
        if (k == K_DELTANET && L->ssm_in) legacy = true;
        if (k == K_MTP) {
            in->mtp_bytes += L->bytes;
            in->mtp_tensors += L->n_tensors;
        }
    }
    in->generation = split && legacy ? "mixed" : split ? "split" : legacy ? "legacy" : "unknown";
    uint64_t nextn = 0;
    in->n_main = n_layer - in->n_kind[K_MTP];
    if (hp_u64(in, "nextn_predict_layers", &nextn) && nextn < (uint64_t)n_layer && in->n_kind[K_MTP] == 0)
        in->n_main = n_layer - (int)nextn;

    uint64_t n_exp = 0, n_used = 0;
    if (hp_u64(in, "expert_count", &n_exp) && hp_u64(in, "expert_used_count", &n_used) && n_exp > 0 &&
        n_used <= n_exp) {
        in->has_active = true; /* main model only: the MTP block runs once per drafted token */
        uint64_t routed_main = 0, dense_main = 0;
        for (uint64_t i = 0; i < f->n_tensors; i++) {
            const char *r;
            int b = block_of(f->tensors[i].name, &r);
            if (b >= 0 && in->kind[b] == K_MTP) continue;
            if (is_routed(q3n_tensor_lookup(f->tensors[i].name, NULL))) routed_main += f->tensors[i].nbytes;
            else dense_main += f->tensors[i].nbytes;
        }
        /* token_embd is a row lookup, not a matmul: count one row at most; keep it simple and
         * exclude it entirely (its row is negligible). */
        const gguf_tensor *emb = gguf_find_tensor(f, q3n_tensor(Q3N_T_TOKEN_EMBD)->name);
        if (emb && dense_main >= emb->nbytes) dense_main -= emb->nbytes;
        in->active_bytes = dense_main + (uint64_t)((double)routed_main * (double)n_used / (double)n_exp);
        /* the expert cache's smallest budget (expert_cache_min_budget with O_DIRECT reads, the
         * default where the file system has them, which is the larger): n_expert + max(n_expert
         * / 8, top_k) slots of the largest layer's triplet, each part 4 KiB aligned plus 4 KiB */
        uint64_t slot = 0;
        for (int il = 0; il < n_layer; il++) {
            const layer_info *L = &in->layers[il];
            const exp_part *pt[4] = {&L->gate_e, &L->up_e, &L->down_e, &L->gate_up_e};
            uint64_t b = 0;
            for (int k = 0; k < 4; k++)
                if (pt[k]->present) b += (pt[k]->bytes + 4095) / 4096 * 4096 + 4096;
            b = (b + 4095) / 4096 * 4096;
            if (b > slot) slot = b;
        }
        uint64_t margin = n_exp / 8 > n_used ? n_exp / 8 : n_used;
        in->cache_min = (n_exp + margin) * slot;
    }
    return true;
}

/* Expected layer kind from the interval (main layers only). */
static int expected_kind(const info *in, int i) {
    if (i >= in->n_main) return K_MTP;
    return (i + 1) % (int)in->interval == 0 ? K_ATTENTION : K_DELTANET;
}

/* ---- output helpers -------------------------------------------------------------------- */

static const char *human_bytes(uint64_t b, char *buf, size_t n) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double x = (double)b;
    int k = 0;
    while (x >= 1024 && k < 4) x /= 1024, k++;
    if (k == 0) snprintf(buf, n, "%llu B", (unsigned long long)b);
    else snprintf(buf, n, "%.2f %s", x, u[k]);
    return buf;
}

/* Print a GGUF string to a text stream with control bytes as '?', at most `max` bytes. */
static void put_text(FILE *o, const char *s, uint64_t n, uint64_t max) {
    for (uint64_t i = 0; i < n && i < max; i++) fputc((unsigned char)s[i] < 0x20 ? '?' : s[i], o);
    if (n > max) fputs("...", o);
}

static void json_kv_value(json_writer *j, const char *name, const gguf_kv *kv) {
    json_key(j, name);
    if (!kv) return json_null(j);
    const gguf_value *v = &kv->val;
    switch (v->type) {
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_UINT16:
    case GGUF_TYPE_UINT32:
    case GGUF_TYPE_UINT64: json_uint(j, v->v.u64); break;
    case GGUF_TYPE_INT8:
    case GGUF_TYPE_INT16:
    case GGUF_TYPE_INT32:
    case GGUF_TYPE_INT64: json_int(j, v->v.i64); break;
    case GGUF_TYPE_FLOAT32:
    case GGUF_TYPE_FLOAT64: json_num(j, v->v.f64); break;
    case GGUF_TYPE_BOOL: json_bool(j, v->v.u64 != 0); break;
    case GGUF_TYPE_STRING: json_strn(j, v->v.str.p, (size_t)v->v.str.n); break;
    default: json_null(j); break; /* arrays are not hyperparameters */
    }
}

static void text_value(FILE *o, const gguf_kv *kv) {
    if (!kv) return (void)fputs("-", o);
    const gguf_value *v = &kv->val;
    switch (v->type) {
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_UINT16:
    case GGUF_TYPE_UINT32:
    case GGUF_TYPE_UINT64:
    case GGUF_TYPE_BOOL: fprintf(o, "%llu", (unsigned long long)v->v.u64); break;
    case GGUF_TYPE_INT8:
    case GGUF_TYPE_INT16:
    case GGUF_TYPE_INT32:
    case GGUF_TYPE_INT64: fprintf(o, "%lld", (long long)v->v.i64); break;
    case GGUF_TYPE_FLOAT32:
    case GGUF_TYPE_FLOAT64: fprintf(o, "%g", v->v.f64); break;
    case GGUF_TYPE_STRING: put_text(o, v->v.str.p, v->v.str.n, 80); break;
    default: fprintf(o, "(%s)", gguf_type_name(v->type)); break;
    }
}

/* The expert row of layer i as comparable text (for run-length grouping) or "" if none. */
static void expert_desc(const info *in, int i, char *buf, size_t n) {
    const layer_info *L = &in->layers[i];
    char b1[32], b2[32], b3[32], b4[32];
    buf[0] = 0;
    if (L->gate_up_e.present && L->down_e.present)
        snprintf(buf, n, "gate_up %s %s + down %s %s = %s", quant_name(L->gate_up_e.type),
                 human_bytes(L->gate_up_e.bytes, b1, 32), quant_name(L->down_e.type),
                 human_bytes(L->down_e.bytes, b2, 32),
                 human_bytes(L->gate_up_e.bytes + L->down_e.bytes, b4, 32));
    else if (L->gate_e.present || L->up_e.present || L->down_e.present)
        snprintf(buf, n, "gate %s %s + up %s %s + down %s %s = %s",
                 L->gate_e.present ? quant_name(L->gate_e.type) : "-", human_bytes(L->gate_e.bytes, b1, 32),
                 L->up_e.present ? quant_name(L->up_e.type) : "-", human_bytes(L->up_e.bytes, b2, 32),
                 L->down_e.present ? quant_name(L->down_e.type) : "-", human_bytes(L->down_e.bytes, b3, 32),
                 human_bytes(L->gate_e.bytes + L->up_e.bytes + L->down_e.bytes, b4, 32));
}

static void tok_text(FILE *o, const gguf_file *f) {
    gguf_str s;
    const gguf_value *tok = gguf_get_arr(f, "tokenizer.ggml.tokens");
    const gguf_value *mer = gguf_get_arr(f, "tokenizer.ggml.merges");
    fprintf(o, "tokenizer          ");
    if (gguf_get_str(f, "tokenizer.ggml.model", &s)) put_text(o, s.p, s.n, 40);
    else fputs("-", o);
    fputs(" / ", o);
    if (gguf_get_str(f, "tokenizer.ggml.pre", &s)) put_text(o, s.p, s.n, 40);
    else fputs("-", o);
    fprintf(o, ", %llu tokens, %llu merges\n", tok ? (unsigned long long)tok->v.arr.n : 0ull,
            mer ? (unsigned long long)mer->v.arr.n : 0ull);
    const char *ids[3] = {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.bos_token_id",
                          "tokenizer.ggml.padding_token_id"};
    fprintf(o, "  eos/bos/pad      ");
    for (int i = 0; i < 3; i++) {
        uint64_t v;
        if (i) fputs(" / ", o);
        if (gguf_get_u64(f, ids[i], &v)) fprintf(o, "%llu", (unsigned long long)v);
        else fputs("-", o);
    }
    bool has = gguf_get_str(f, "tokenizer.chat_template", &s);
    fprintf(o, "\n  chat template    ");
    if (has) fprintf(o, "yes (%llu bytes)\n", (unsigned long long)s.n);
    else fprintf(o, "no\n");
}

static uint64_t mem_cpu_total(const info *in, int f) {
    uint64_t n = (uint64_t)in->mem.n_ctx;
    return in->total_bytes + (in->mem.kv_token[f] + in->mem.kv_token_mtp[f]) * n + 2 * in->mem.state +
           in->mem.cpu_scratch;
}

/* What a `redlite serve` slot costs at --ctx with the default f16 KV cache and 8 in-memory
 * checkpoints (slot_plan.h, the estimate --parallel auto uses): on the CPU the context as
 * mem_cpu_total counts it without the weights; on a CUDA device (cuda) the device context. How
 * many fit: 80 % of MemAvailable less the weights (as if all were resident) and the first slot. */
static void slots_cost(const info *in, bool cuda, slot_cost *sc, int *fit, uint64_t *avail) {
    uint64_t n = (uint64_t)in->mem.n_ctx;
    *sc = (slot_cost){.ctx_bytes = cuda ? in->mem.cuda_ctx[1] : mem_cpu_total(in, 1) - in->total_bytes,
                      .rec_bytes = in->mem.state,
                      .ram_bytes = in->mem.kv_token[1] * n + in->mem.state,
                      .max_checkpoints = 8,
                      .device = cuda};
    uint64_t first = slot_plan_host_bytes(sc) + in->total_bytes;
    *avail = rl_mem_available();
    *fit = cuda ? 0 : slot_plan_fit(sc, *avail > first ? *avail - first : 0, 0);
}

static void mem_text(const info *in, FILE *o) {
    char a[32], b[32], c[32], d[32], e[32];
    uint64_t n = (uint64_t)in->mem.n_ctx;
    fprintf(o,
            "\nmemory             context %d, batch %d (--ctx, --batch); f16 is the KV default of the fast "
            "paths\n",
            in->mem.n_ctx, in->mem.n_batch);
    fprintf(o, "  weights          %s (dense %s, routed experts %s)\n", human_bytes(in->total_bytes, a, 32),
            human_bytes(in->total_bytes - in->routed_bytes, b, 32), human_bytes(in->routed_bytes, c, 32));
    fprintf(o, "  KV / token       f16 %s, f32 %s  (%d attention layers x K+V)",
            human_bytes(in->mem.kv_token[1], a, 32), human_bytes(in->mem.kv_token[0], b, 32), in->mem.n_attn);
    if (in->mem.n_mtp_attn)
        fprintf(o, "; MTP layer +%s / +%s (its own cache)", human_bytes(in->mem.kv_token_mtp[1], c, 32),
                human_bytes(in->mem.kv_token_mtp[0], d, 32));
    fprintf(o, "\n  KV at %-10d f16 %s, f32 %s\n", in->mem.n_ctx, human_bytes(in->mem.kv_token[1] * n, a, 32),
            human_bytes(in->mem.kv_token[0] * n, b, 32));
    fprintf(o, "  DeltaNet state   %s (%d layers: conv + recurrent; the CPU keeps 2 copies)\n",
            human_bytes(in->mem.state, a, 32), in->mem.n_dn);
    fprintf(o,
            "  CPU              scratch %s; total with the weights f16 %s, f32 %s (weights are mapped:\n"
            "                   resident as far as the expert cache plan keeps them)\n",
            human_bytes(in->mem.cpu_scratch, a, 32), human_bytes(mem_cpu_total(in, 1), b, 32),
            human_bytes(mem_cpu_total(in, 0), c, 32));
    if (in->cache_min)
        fprintf(o,
                "  bounded cache    f16 %s with the smallest expert cache (dense %s + context + cache %s:\n"
                "                   one layer's experts + prefetch margin; --cache-mib sets a larger one)\n",
                human_bytes(mem_cpu_total(in, 1) - in->routed_bytes + in->cache_min, a, 32),
                human_bytes(in->total_bytes - in->routed_bytes, b, 32), human_bytes(in->cache_min, c, 32));
    if (in->mem.cuda_ok)
        fprintf(o,
                "  CUDA device      weights %s + context f16 %s / f32 %s (KV + state + scratch) = f16 %s, "
                "f32 %s\n",
                human_bytes(in->total_bytes, a, 32), human_bytes(in->mem.cuda_ctx[1], b, 32),
                human_bytes(in->mem.cuda_ctx[0], c, 32),
                human_bytes(in->total_bytes + in->mem.cuda_ctx[1], d, 32),
                human_bytes(in->total_bytes + in->mem.cuda_ctx[0], e, 32));
    else
        fprintf(
            o,
            "  CUDA device      weights %s + KV + state + scratch (the scratch is sized by a CUDA build:\n"
            "                   make CUDA=1; redlite bench --backend cuda --json measures the allocation)\n",
            human_bytes(in->total_bytes, a, 32));
    slot_cost sc;
    int fit;
    uint64_t avail;
    slots_cost(in, false, &sc, &fit, &avail);
    fprintf(
        o,
        "  serve slots      %d fit here (--parallel auto, at most %d): %s each on the CPU (context,\n"
        "                   %d checkpoints, a RAM-tier state), 80 %% of MemAvailable %s less the weights\n",
        fit, SLOT_PLAN_AUTO_MAX, human_bytes(slot_plan_bytes(&sc), a, 32), sc.max_checkpoints,
        human_bytes(avail, b, 32));
    if (in->mem.cuda_ok) {
        slots_cost(in, true, &sc, &fit, &avail);
        fprintf(o, "                   CUDA: %s of device memory + %s of host memory each\n",
                human_bytes(sc.ctx_bytes, a, 32), human_bytes(slot_plan_host_bytes(&sc), b, 32));
    }
}

static void print_text(const info *in, FILE *o) {
    const gguf_file *f = in->f;
    char b1[32], b2[32], b3[32];
    gguf_str s;
    fprintf(o, "verdict            %s\n", in->verdict.line);
    fprintf(o, "file               %s (%d part%s, %s, GGUF v%u, alignment %u)\n", f->path, f->n_parts,
            f->n_parts > 1 ? "s" : "", human_bytes(in->file_size, b1, 32), f->version, f->alignment);
    fprintf(o, "architecture       %s%s", in->arch, in->arch_present ? "" : " (general.architecture absent)");
    if (gguf_get_str(f, "general.name", &s)) fputs("  (", o), put_text(o, s.p, s.n, 80), fputs(")", o);
    const int ai = q3n_arch_find(in->arch); /* the model family's row (src/model/qwen3next.h) */
    if (ai >= 0) {
        const q3n_arch_desc *ad = q3n_arch_get((q3n_arch)ai);
        fprintf(o, "\nfamily             %s: %s, DeltaNet beta/alpha %s, value heads %s", ad->family,
                ad->moe ? "routed experts + shared expert" : "dense FFN", ad->ba_split ? "separate" : "fused",
                ad->v_tiled ? "tiled" : "grouped");
        if (ad->rope_sections) fprintf(o, ", multi-section RoPE (text: plain partial RoPE)");
    } else if (!strcmp(in->arch, "clip")) {
        fprintf(
            o,
            "\nfamily             a vision projector (mmproj): Red Lite runs text only and does not load it");
    }
    fprintf(o, "\ntensors            %llu (%llu metadata keys)\n\nhyperparameters\n",
            (unsigned long long)f->n_tensors, (unsigned long long)f->n_kv);
    for (size_t i = 0; i < N_HP; i++) {
        fprintf(o, "  %-36s", HP[i].name);
        if (!strcmp(HP[i].name, "full_attention_interval") && in->interval_default)
            fprintf(o, "%u (default: key absent or invalid)", in->interval);
        else text_value(o, in->hp[i]);
        fputc('\n', o);
    }
    fprintf(o, "\nlayers             %d: %d Gated DeltaNet, %d full attention, %d MTP", in->n_layer,
            in->n_kind[K_DELTANET], in->n_kind[K_ATTENTION], in->n_kind[K_MTP]);
    if (in->n_kind[K_UNKNOWN]) fprintf(o, ", %d unclassified", in->n_kind[K_UNKNOWN]);
    fprintf(o, "\n  map              ");
    for (int i = 0; i < in->n_layer; i++) {
        if (i && i % 4 == 0) fputc(' ', o);
        if (i && i % 32 == 0) fputs("\n                   ", o);
        fputc(KIND_CHAR[in->kind[i]], o);
    }
    fprintf(o, in->n_layer ? "   (D DeltaNet, A attention, M MTP)\n" : "(no block tensors)\n");
    int mism = 0;
    for (int i = 0; i < in->n_layer; i++) mism += in->kind[i] != expected_kind(in, i);
    if (mism)
        fprintf(o, "  warning          %d layer(s) disagree with full_attention_interval %u\n", mism,
                in->interval);
    char gen_desc[160], qkv[32], gate[32], in_[32]; /* tensor names from the model's table */
    short_name(Q3N_T_SSM_QKV, qkv, sizeof qkv), short_name(Q3N_T_SSM_GATE, gate, sizeof gate);
    short_name(Q3N_T_SSM_IN, in_, sizeof in_);
    if (!strcmp(in->generation, "split"))
        snprintf(gen_desc, sizeof gen_desc, "split %s + %s (current converter)", qkv, gate);
    else if (!strcmp(in->generation, "legacy"))
        snprintf(gen_desc, sizeof gen_desc, "legacy fused %s (Nov-2025 converter)", in_);
    else if (!strcmp(in->generation, "mixed"))
        snprintf(gen_desc, sizeof gen_desc, "mixed (both %s and %s/%s)", in_, qkv, gate);
    else snprintf(gen_desc, sizeof gen_desc, "unknown (no Gated DeltaNet layers)");
    fprintf(o, "  generation       %s\n\ntensor types\n", gen_desc);
    for (int t = 0; t < QT_COUNT; t++)
        if (in->type_count[t])
            fprintf(o, "  %-8s %6llu tensors  %12s\n", quant_name((uint32_t)t),
                    (unsigned long long)in->type_count[t], human_bytes(in->type_bytes[t], b1, 32));
    fprintf(o, "\nweights            %s: dense %s, routed experts %s (%.1f %%)\n",
            human_bytes(in->total_bytes, b1, 32), human_bytes(in->total_bytes - in->routed_bytes, b2, 32),
            human_bytes(in->routed_bytes, b3, 32),
            in->total_bytes ? 100.0 * (double)in->routed_bytes / (double)in->total_bytes : 0.0);
    if (in->has_active)
        fprintf(o, "  active/token     %s (dense without token_embd + used/total of the routed experts)\n",
                human_bytes(in->active_bytes, b1, 32));
    fprintf(o, "\nexperts (bytes of one expert)\n");
    int any = 0;
    for (int i = 0; i < in->n_layer;) {
        char d[256], d2[256];
        expert_desc(in, i, d, sizeof d);
        int j = i + 1;
        while (j < in->n_layer && (expert_desc(in, j, d2, sizeof d2), !strcmp(d, d2))) j++;
        if (d[0]) {
            char r[32];
            snprintf(r, sizeof r, j - 1 > i ? "layers %d-%d" : "layer %d", i, j - 1);
            fprintf(o, "  %-16s %s\n", r, d);
            any = 1;
        }
        i = j;
    }
    if (!any) fprintf(o, "  (no routed-expert tensors)\n");
    fprintf(o, "\nmtp                ");
    if (in->n_kind[K_MTP]) {
        fprintf(o, "present: layer");
        for (int i = 0; i < in->n_layer; i++)
            if (in->kind[i] == K_MTP) fprintf(o, " %d", i);
        fprintf(o, ", %llu tensors, %s\n", (unsigned long long)in->mtp_tensors,
                human_bytes(in->mtp_bytes, b1, 32));
    } else {
        fprintf(o, "absent\n");
    }
    if (in->mem.ok) mem_text(in, o);
    fputc('\n', o);
    tok_text(o, f);
}

static void mem_json(const info *in, json_writer *j) {
    uint64_t n = (uint64_t)in->mem.n_ctx;
    static const char *const FMT[2] = {"f32", "f16"};
    json_key(j, "memory");
    json_obj_begin(j);
    json_kv_int(j, "n_ctx", in->mem.n_ctx);
    json_kv_int(j, "n_batch", in->mem.n_batch);
    json_kv_int(j, "n_attention_layers", in->mem.n_attn);
    json_kv_int(j, "n_mtp_attention_layers", in->mem.n_mtp_attn);
    json_kv_int(j, "n_deltanet_layers", in->mem.n_dn);
    json_kv_uint(j, "weights_bytes", in->total_bytes);
    json_kv_uint(j, "weights_dense_bytes", in->total_bytes - in->routed_bytes);
    json_kv_uint(j, "weights_routed_bytes", in->routed_bytes);
    if (in->cache_min) {
        json_kv_uint(j, "expert_cache_min_bytes", in->cache_min);
        json_kv_uint(j, "bounded_min_bytes_f16", mem_cpu_total(in, 1) - in->routed_bytes + in->cache_min);
    }
    json_key(j, "kv_bytes_per_token");
    json_obj_begin(j);
    for (int f = 0; f < 2; f++) json_kv_uint(j, FMT[f], in->mem.kv_token[f]);
    json_obj_end(j);
    json_key(j, "kv_bytes_per_token_mtp");
    json_obj_begin(j);
    for (int f = 0; f < 2; f++) json_kv_uint(j, FMT[f], in->mem.kv_token_mtp[f]);
    json_obj_end(j);
    json_key(j, "kv_bytes");
    json_obj_begin(j);
    for (int f = 0; f < 2; f++) json_kv_uint(j, FMT[f], in->mem.kv_token[f] * n);
    json_obj_end(j);
    json_kv_uint(j, "deltanet_state_bytes", in->mem.state);
    json_key(j, "cpu");
    json_obj_begin(j);
    json_kv_uint(j, "scratch_bytes", in->mem.cpu_scratch);
    json_kv_uint(j, "state_bytes", 2 * in->mem.state);
    json_key(j, "total_bytes");
    json_obj_begin(j);
    for (int f = 0; f < 2; f++) json_kv_uint(j, FMT[f], mem_cpu_total(in, f));
    json_obj_end(j);
    json_obj_end(j);
    json_key(j, "cuda");
    json_obj_begin(j);
    json_kv_bool(j, "sized", in->mem.cuda_ok); /* false: a CPU-only build cannot size the scratch */
    if (in->mem.cuda_ok) {
        json_key(j, "context_bytes");
        json_obj_begin(j);
        for (int f = 0; f < 2; f++) json_kv_uint(j, FMT[f], in->mem.cuda_ctx[f]);
        json_obj_end(j);
        json_key(j, "total_bytes");
        json_obj_begin(j);
        for (int f = 0; f < 2; f++) json_kv_uint(j, FMT[f], in->total_bytes + in->mem.cuda_ctx[f]);
        json_obj_end(j);
    }
    json_obj_end(j);
    slot_cost sc;
    int fit;
    uint64_t avail;
    slots_cost(in, false, &sc, &fit, &avail);
    json_key(j, "serve_slots");
    json_obj_begin(j);
    json_kv_int(j, "fit", fit);
    json_kv_int(j, "auto_max", SLOT_PLAN_AUTO_MAX);
    json_kv_uint(j, "mem_available_bytes", avail);
    json_kv_uint(j, "weights_bytes", in->total_bytes);
    json_kv_uint(j, "bytes_per_slot", slot_plan_bytes(&sc));
    json_kv_uint(j, "context_bytes", sc.ctx_bytes);
    json_kv_int(j, "checkpoints", sc.max_checkpoints);
    json_kv_uint(j, "checkpoint_bytes", sc.rec_bytes);
    json_kv_uint(j, "ram_state_bytes", sc.ram_bytes);
    if (in->mem.cuda_ok) {
        slots_cost(in, true, &sc, &fit, &avail);
        json_kv_uint(j, "cuda_device_bytes_per_slot", sc.ctx_bytes);
        json_kv_uint(j, "cuda_host_bytes_per_slot", slot_plan_host_bytes(&sc));
    }
    json_obj_end(j);
    json_obj_end(j);
}

/* The "experts" array of the JSON report: per layer with routed experts, each part's type and bytes. */
static void experts_json(const info *in, json_writer *j) {
    json_key(j, "experts");
    json_arr_begin(j);
    for (int i = 0; i < in->n_layer; i++) {
        const layer_info *L = &in->layers[i];
        if (!(L->gate_e.present || L->up_e.present || L->down_e.present || L->gate_up_e.present)) continue;
        json_obj_begin(j);
        json_kv_int(j, "layer", i);
        json_kv_int(j, "n_expert", L->n_expert);
        json_kv_bool(j, "fused_gate_up", L->gate_up_e.present);
        const char *nm[4] = {"gate", "up", "down", "gate_up"};
        const exp_part *ep[4] = {&L->gate_e, &L->up_e, &L->down_e, &L->gate_up_e};
        uint64_t sum = 0;
        for (int k = 0; k < 4; k++) {
            json_key(j, nm[k]);
            if (!ep[k]->present) {
                json_null(j);
                continue;
            }
            json_obj_begin(j);
            json_kv_str(j, "type", quant_name(ep[k]->type));
            json_kv_uint(j, "bytes", ep[k]->bytes);
            json_obj_end(j);
            sum += ep[k]->bytes;
        }
        json_kv_uint(j, "expert_bytes", sum);
        json_obj_end(j);
    }
    json_arr_end(j);
}

/* The "tokenizer" object of the JSON report: model, pre-tokenizer, sizes, special ids, template. */
static void tokenizer_json(const gguf_file *f, json_writer *j) {
    gguf_str s;
    json_key(j, "tokenizer");
    json_obj_begin(j);
    json_key(j, "model");
    if (gguf_get_str(f, "tokenizer.ggml.model", &s)) json_strn(j, s.p, (size_t)s.n);
    else json_null(j);
    json_key(j, "pre");
    if (gguf_get_str(f, "tokenizer.ggml.pre", &s)) json_strn(j, s.p, (size_t)s.n);
    else json_null(j);
    const gguf_value *tok = gguf_get_arr(f, "tokenizer.ggml.tokens");
    const gguf_value *mer = gguf_get_arr(f, "tokenizer.ggml.merges");
    json_key(j, "vocab_size");
    if (tok) json_uint(j, tok->v.arr.n);
    else json_null(j);
    json_key(j, "merges");
    if (mer) json_uint(j, mer->v.arr.n);
    else json_null(j);
    json_kv_value(j, "eos_token_id", gguf_find_kv(f, "tokenizer.ggml.eos_token_id"));
    json_kv_value(j, "bos_token_id", gguf_find_kv(f, "tokenizer.ggml.bos_token_id"));
    json_kv_value(j, "padding_token_id", gguf_find_kv(f, "tokenizer.ggml.padding_token_id"));
    json_kv_value(j, "add_bos_token", gguf_find_kv(f, "tokenizer.ggml.add_bos_token"));
    bool has = gguf_get_str(f, "tokenizer.chat_template", &s);
    json_kv_bool(j, "chat_template", has);
    json_kv_uint(j, "chat_template_bytes", has ? s.n : 0);
    json_obj_end(j);
}

static void print_json(const info *in, FILE *o) {
    const gguf_file *f = in->f;
    json_writer jw, *j = &jw;
    gguf_str s;
    json_init(j, o, 2);
    json_obj_begin(j);
    json_key(j, "verdict");
    json_obj_begin(j);
    json_kv_bool(j, "runs", in->verdict.runs);
    json_key(j, "backends");
    json_arr_begin(j);
    if (in->verdict.cpu) json_str(j, "cpu");
    if (in->verdict.cuda) json_str(j, "cuda");
    json_arr_end(j);
    json_kv_str(j, "line", in->verdict.line);
    json_obj_end(j);
    json_key(j, "file");
    json_obj_begin(j);
    json_kv_str(j, "path", f->path);
    json_kv_int(j, "parts", f->n_parts);
    json_kv_uint(j, "size_bytes", in->file_size);
    json_kv_uint(j, "gguf_version", f->version);
    json_kv_uint(j, "alignment", f->alignment);
    json_kv_uint(j, "n_tensors", f->n_tensors);
    json_kv_uint(j, "n_kv", f->n_kv);
    json_obj_end(j);
    json_kv_str(j, "architecture", in->arch_present ? in->arch : NULL);
    json_key(j, "name");
    if (gguf_get_str(f, "general.name", &s)) json_strn(j, s.p, (size_t)s.n);
    else json_null(j);
    json_kv_value(j, "file_type", gguf_find_kv(f, "general.file_type"));

    json_key(j, "hparams");
    json_obj_begin(j);
    for (size_t i = 0; i < N_HP; i++) {
        if (!strcmp(HP[i].name, "full_attention_interval")) json_kv_uint(j, HP[i].name, in->interval);
        else json_kv_value(j, HP[i].name, in->hp[i]);
    }
    json_obj_end(j);
    json_kv_bool(j, "full_attention_interval_default", in->interval_default);

    json_key(j, "layers");
    json_obj_begin(j);
    json_kv_int(j, "n_layer", in->n_layer);
    json_kv_int(j, "n_main", in->n_main);
    json_kv_int(j, "n_deltanet", in->n_kind[K_DELTANET]);
    json_kv_int(j, "n_attention", in->n_kind[K_ATTENTION]);
    json_kv_int(j, "n_mtp", in->n_kind[K_MTP]);
    json_kv_int(j, "n_unknown", in->n_kind[K_UNKNOWN]);
    json_key(j, "kinds");
    json_arr_begin(j);
    for (int i = 0; i < in->n_layer; i++) json_str(j, KIND_NAME[in->kind[i]]);
    json_arr_end(j);
    json_key(j, "attention_layers");
    json_arr_begin(j);
    for (int i = 0; i < in->n_layer; i++)
        if (in->kind[i] == K_ATTENTION) json_int(j, i);
    json_arr_end(j);
    json_key(j, "interval_mismatch");
    json_arr_begin(j);
    for (int i = 0; i < in->n_layer; i++)
        if (in->kind[i] != expected_kind(in, i)) json_int(j, i);
    json_arr_end(j);
    json_obj_end(j);
    json_kv_str(j, "generation", in->generation);

    json_key(j, "tensor_types");
    json_arr_begin(j);
    for (int t = 0; t < QT_COUNT; t++) {
        if (!in->type_count[t]) continue;
        json_obj_begin(j);
        json_kv_str(j, "type", quant_name((uint32_t)t));
        json_kv_int(j, "id", t);
        json_kv_uint(j, "count", in->type_count[t]);
        json_kv_uint(j, "bytes", in->type_bytes[t]);
        json_obj_end(j);
    }
    json_arr_end(j);

    json_key(j, "bytes");
    json_obj_begin(j);
    json_kv_uint(j, "total", in->total_bytes);
    json_kv_uint(j, "dense", in->total_bytes - in->routed_bytes);
    json_kv_uint(j, "routed_experts", in->routed_bytes);
    json_key(j, "active_per_token");
    if (in->has_active) json_uint(j, in->active_bytes);
    else json_null(j);
    json_obj_end(j);

    experts_json(in, j);

    json_key(j, "mtp");
    json_obj_begin(j);
    json_kv_bool(j, "present", in->n_kind[K_MTP] > 0);
    json_key(j, "layers");
    json_arr_begin(j);
    for (int i = 0; i < in->n_layer; i++)
        if (in->kind[i] == K_MTP) json_int(j, i);
    json_arr_end(j);
    json_kv_uint(j, "n_tensors", in->mtp_tensors);
    json_kv_uint(j, "bytes", in->mtp_bytes);
    json_obj_end(j);

    tokenizer_json(f, j);
    if (in->mem.ok) mem_json(in, j);
    json_obj_end(j);
    json_finish(j);
}

/* rl_lasterr without a leading "PATH: " (the verdict names the file once, above). */
static const char *err_text(const char *path) {
    const char *e = rl_lasterr();
    size_t n = strlen(path);
    return !strncmp(e, path, n) && !strncmp(e + n, ": ", 2) ? e + n + 2 : e;
}

#ifdef RL_CUDA
/* The first matrix whose type the CUDA kernels do not decode (NULL: none). */
static const gguf_tensor *cuda_blocker(const gguf_file *f) {
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (f->tensors[i].n_dims >= 2 && !cu_type_supported(f->tensors[i].type)) return &f->tensors[i];
    return NULL;
}
#endif

/* Where the model runs, judged as the engine and the expert-cache planner would on a machine of
 * ram_mib MiB (0: this one) at n_ctx positions: the architecture and every tensor are bound as
 * engine_open binds them (q3n_load: names, types, shapes; nothing large is read), then the
 * planner's rule: dense weights + context state + the smallest expert cache must fit in RAM. */
static void verdict_compute(info *in, int n_ctx, uint64_t ram_mib) {
    char *v = in->verdict.line;
    size_t vn = sizeof in->verdict.line;
    const gguf_file *f = in->f;
    if (f->n_tensors == 0) {
        snprintf(
            v, vn,
            "does not run: the file has no tensors (a vocabulary-only GGUF: redlite tokenize -m takes it)");
        return;
    }
    q3n_model m;
    if (q3n_load(&m, in->f)) {
        snprintf(v, vn, "does not run: %s", err_text(f->path));
        q3n_free(&m);
        return;
    }
    uint64_t ram = ram_mib ? ram_mib << 20 : rl_total_ram();
    const char *ram_is = !ram_mib && ram < rl_phys_ram() ? "RAM (this process's control group limit)" : "RAM";
    uint64_t state = expert_cache_state_bytes(&m, n_ctx), minb = expert_cache_min_budget(&m, true);
    uint64_t reserve = 512ull << 20, need = m.bytes_dense + state + minb + reserve;
    ec_plan plan;
    int prc = expert_cache_plan(&m, ram, ram_mib ? ram : 0, n_ctx, 0, "auto", EC_IO_AUTO, false, &plan);
    char b1[32], b2[32], b3[32], b4[32], b5[32], b6[32];
    if (prc || need > ram) {
        uint64_t fixed = m.bytes_dense + state + reserve;
        snprintf(
            v, vn,
            "does not run: too large for this machine even with the expert cache: dense weights %s + context "
            "%s + a reserve of %s leave %s of the %s of %s for the expert cache, which needs at least %s",
            human_bytes(m.bytes_dense, b1, 32), human_bytes(state, b2, 32), human_bytes(reserve, b3, 32),
            human_bytes(ram > fixed ? ram - fixed : 0, b4, 32), human_bytes(ram, b5, 32), ram_is,
            human_bytes(minb, b6, 32));
        q3n_free(&m);
        return;
    }
    in->verdict.runs = in->verdict.cpu = true;
    char cpu[256];
    if (plan.mode == EC_FULL)
        snprintf(cpu, sizeof cpu, "every expert resident (%s of weights, %s of %s%s)",
                 human_bytes(m.bytes_dense + m.bytes_experts, b1, 32), human_bytes(ram, b2, 32), ram_is,
                 plan.mapped ? "; the experts in the page cache: the file nearly fills it" : "");
    else
        snprintf(cpu, sizeof cpu,
                 "a bounded expert cache of %s for the %s of experts (same output, slower; "
                 "--cache-mib)",
                 human_bytes(plan.budget, b1, 32), human_bytes(m.bytes_experts, b2, 32));
    const char *cuda = "this build has no CUDA backend: make CUDA=1";
    char cbuf[320];
#ifdef RL_CUDA
    const gguf_tensor *bt = cuda_blocker(in->f);
    if (bt) {
        snprintf(cbuf, sizeof cbuf,
                 "not on cuda: tensor %s has type %s, which the CUDA kernels do not decode", bt->name,
                 quant_name(bt->type));
        cuda = cbuf;
    } else if (cu_attn_check(m.hp.head_dim, m.hp.n_head, m.hp.n_head_kv, m.hp.n_rot)) {
        snprintf(cbuf, sizeof cbuf, "not on cuda: %s", rl_lasterr());
        rl_clearerr();
        cuda = cbuf;
    } else {
        in->verdict.cuda = true;
    }
#else
    (void)cbuf;
#endif
    if (in->verdict.cuda)
        snprintf(v, vn, "runs on both cpu and cuda (cpu: %s; cuda: --vram-mib bounds the GPU memory)", cpu);
    else snprintf(v, vn, "runs on cpu: %s (%s)", cpu, cuda);
    q3n_free(&m);
}

int cmd_info(int argc, char **argv) {
    cli_opts o;
    opts_defaults(&o);
    o.batch = ENGINE_BATCH_DEFAULT;
    int r = opts_parse(&INFO, argc, argv, &o);
    if (r) return r == OPTS_HELP ? 0 : r;
    const char *path = o.model;
    bool as_json = o.json;
    long long n_ctx = o.n_ctx, n_batch = o.batch;
    info in = {0};
    in.f = gguf_open(path);
    if (!in.f) return cli_fail(CMD, 1, "%s", rl_lasterr());
    int rc = 0;
    q3n_hparams hp; /* values out of the model's limits: refused as the engine would; missing keys
                       (another architecture, a partial file) are still described */
    int hrc = q3n_read_hparams(in.f, &hp);
    if (hrc == -2) rc = cli_fail(CMD, 1, "%s", rl_lasterr());
    else if (!analyse(&in)) rc = cli_fail(CMD, 1, "%s", rl_lasterr());
    if (!rc && hrc == 0) mem_compute(&in, &hp, (int)n_ctx, (int)n_batch);
    if (!rc) verdict_compute(&in, hrc == 0 ? in.mem.n_ctx : (int)n_ctx, (uint64_t)o.ram_mib);
    if (rc) {
    } else if (as_json) print_json(&in, stdout);
    else print_text(&in, stdout);
    if (!rc && (fflush(stdout) != 0 || ferror(stdout))) rc = cli_fail(CMD, 1, "writing the output failed");
    if (!rc && !in.verdict.runs) rc = cli_fail(CMD, 1, "%s", in.verdict.line); /* exit 0 only when it runs */
    free(in.layers);
    free(in.kind);
    gguf_close(in.f);
    return rc;
}
