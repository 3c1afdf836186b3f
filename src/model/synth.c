/* synth.c — synthetic full-size Qwen3-Next GGUF files (API and presets in synth.h).
 *
 * Sections: geometry (defaults, --geometry parsing, checks) · per-tensor type tables of the
 * presets · the tensor plan (names, shapes, file order) · metadata and vocabulary · the streaming
 * write. The random bytes (block templates per quant type, vector tensors, routers) are
 * synth_gen.c's; the types both share are in synth_int.h.
 *
 * Test: tests/test_synth.py (tiny preset: gguf-py reads it, types match the table, the engine
 * runs it with finite logits and varied routing, same seed -> same bytes).
 */
#include "model/synth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/common.h"
#include "gguf/gguf.h"
#include "base/pool.h"
#include "gguf/quant.h"
#include "gguf/quant_impl.h"
#include "model/qwen3next.h"
#include "model/synth_int.h"

/* The type mixes the presets name (pick_type) and the geometry each starts from (synth_geom_default). */
typedef enum { MIX_CF2, MIX_IQ2_XXS, MIX_Q4_K_M, MIX_UD_IQ2, MIX_UD_IQ3 } mix;
typedef enum { GEO_80B, GEO_TINY, GEO_35B, GEO_122B, GEO_397B } geo;

static const struct {
    const char *name;
    mix mix;
    geo geo;
} presets[SYNTH_N_PRESETS] = {
    [SYNTH_CF2] = {"cf2", MIX_CF2, GEO_80B},
    [SYNTH_IQ2_XXS] = {"iq2_xxs", MIX_IQ2_XXS, GEO_80B},
    [SYNTH_Q4_K_M] = {"q4_k_m", MIX_Q4_K_M, GEO_80B},
    [SYNTH_TINY] = {"tiny", MIX_CF2, GEO_TINY},
    [SYNTH_35B_Q4_K_M] = {"35b-a3b-q4_k_m", MIX_Q4_K_M, GEO_35B},
    [SYNTH_35B_UD_IQ2] = {"35b-a3b-ud-iq2_xxs", MIX_UD_IQ2, GEO_35B},
    [SYNTH_35B_UD_IQ3] = {"35b-a3b-ud-iq3_xxs", MIX_UD_IQ3, GEO_35B},
    [SYNTH_122B_Q4_K_M] = {"122b-a10b-q4_k_m", MIX_Q4_K_M, GEO_122B},
    [SYNTH_122B_UD_IQ2] = {"122b-a10b-ud-iq2_xxs", MIX_UD_IQ2, GEO_122B},
    [SYNTH_122B_UD_IQ3] = {"122b-a10b-ud-iq3_xxs", MIX_UD_IQ3, GEO_122B},
    [SYNTH_397B_Q4_K_M] = {"397b-a17b-q4_k_m", MIX_Q4_K_M, GEO_397B},
    [SYNTH_397B_UD_IQ2] = {"397b-a17b-ud-iq2_xxs", MIX_UD_IQ2, GEO_397B},
    [SYNTH_397B_UD_IQ3] = {"397b-a17b-ud-iq3_xxs", MIX_UD_IQ3, GEO_397B},
};

int synth_preset_find(const char *name, synth_preset *out) {
    for (int i = 0; i < SYNTH_N_PRESETS; i++)
        if (!strcmp(name, presets[i].name)) {
            *out = (synth_preset)i;
            return 0;
        }
    char known[512] = "";
    for (int i = 0; i < SYNTH_N_PRESETS; i++)
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "", presets[i].name);
    return rl_seterr("unknown preset '%s' (choose %s)", name, known);
}

const char *synth_preset_name(synth_preset p) {
    return (unsigned)p < SYNTH_N_PRESETS ? presets[p].name : "?";
}

static const char *const routing_names[SYNTH_N_ROUTING] = {"uniform", "calibrated", "skewed"};

int synth_routing_find(const char *name, synth_routing *out) {
    for (int i = 0; i < SYNTH_N_ROUTING; i++)
        if (!strcmp(name, routing_names[i])) {
            *out = (synth_routing)i;
            return 0;
        }
    return rl_seterr("unknown routing '%s' (choose uniform, calibrated or skewed)", name);
}

const char *synth_routing_name(synth_routing r) {
    return (unsigned)r < SYNTH_N_ROUTING ? routing_names[r] : "?";
}

/* ---- geometry ---------------------------------------------------------------------------- */

/* Qwen3.5 MoE geometries. Sources (read 2026-12-06 with the search tool; HF config.json itself was
 * not reachable, so each number is from a page quoting the model card or config):
 *   35B-A3B  [MC36] Qwen3.6-35B-A3B model card (mera.a-ai.ru submission 181; same architecture and
 *            model_type as Qwen3.5-35B-A3B per transformers' qwen3_5_moe docs): hidden 2048, 40
 *            layers = 10 x (3 DeltaNet + 1 attention), DeltaNet 32 V / 16 QK heads of 128,
 *            attention 16 Q / 2 KV heads of 256, RoPE dims 64, 256 experts, 8 routed + 1 shared,
 *            expert FFN 512, vocabulary 248,320. [TF] transformers 5.25 Qwen3_5MoeTextConfig
 *            defaults (docs/QWEN35.md) are the same numbers plus shared expert FFN 512, rms eps
 *            1e-6, partial rotary 0.25; rope_theta 1e7 from the miles recipe (--rotary-base
 *            10000000, radixark.com) and [AX].
 *   122B-A10B [AX] apxml.com/models/qwen35-122b-a10b and awesomeagents.ai: hidden 3072, 48 layers,
 *            32 Q / 2 KV heads of 256, rope_theta 1e7, 256 experts, 8 routed + 1 shared, expert
 *            FFN 1024, vocabulary 248,320, context 262,144. NOT SOURCED: the DeltaNet heads
 *            (64 V / 16 QK of 128) and the shared expert FFN (1024): chosen because with them the
 *            parameter count is 122.1 B, the "122.11B" a llama.cpp run of Unsloth's GGUF reports
 *            (llmgarage.ai); 32 V heads would give 120.7 B.
 *   397B-A17B [MLX] mlx-community/Qwen3.5-397B-A17B-4bit card (adapted from Qwen's): hidden 4096,
 *            60 layers = 15 x (3 + 1), 512 experts, 10 routed + 1 shared, expert FFN 1024, 32 Q /
 *            2 KV heads of 256, DeltaNet 16 QK / 64 V heads of 128, context 262,144, vocabulary
 *            248,320. NOT SOURCED: shared expert FFN (1024, = expert FFN as in the other sizes);
 *            rope_theta 1e7 as the family.
 * Everything else (conv 4, key head dim 128, rms eps 1e-6, RoPE dims 64 = 0.25 x 256,
 * full_attention_interval 4) is the family's [TF]. */
static void geom_qwen35moe(geo which, synth_geom *g) {
    *g = (synth_geom){.n_embd = 2048,
                      .n_layer = 40,
                      .n_vocab = 248320,
                      .n_ctx = 262144,
                      .n_ff = 512,
                      .n_head = 16,
                      .n_head_kv = 2,
                      .head_dim = 256,
                      .n_rot = 64,
                      .rope_base = 1e7f,
                      .rms_eps = 1e-6f,
                      .n_expert = 256,
                      .n_expert_used = 8,
                      .n_ff_exp = 512,
                      .n_ff_shexp = 512,
                      .ssm_kw = 4,
                      .ssm_dk = 128,
                      .ssm_hk = 16,
                      .ssm_hv = 32,
                      .ssm_inner = 32 * 128,
                      .attn_interval = 4,
                      .n_precise = 40 / 6,
                      .arch = Q3N_ARCH_QWEN35MOE};
    if (which == GEO_122B) {
        g->n_embd = 3072, g->n_layer = 48, g->n_head = 32, g->n_ff_exp = g->n_ff_shexp = g->n_ff = 1024;
        g->ssm_hv = 64, g->ssm_inner = 64 * 128, g->n_precise = 48 / 6;
    } else if (which == GEO_397B) {
        g->n_embd = 4096, g->n_layer = 60, g->n_head = 32, g->n_ff_exp = g->n_ff_shexp = g->n_ff = 1024;
        g->n_expert = 512, g->n_expert_used = 10, g->ssm_hv = 64, g->ssm_inner = 64 * 128,
        g->n_precise = 60 / 6;
    }
}

void synth_geom_default(synth_preset p, synth_geom *g) {
    geo which = (unsigned)p < SYNTH_N_PRESETS ? presets[p].geo : GEO_80B;
    if (which == GEO_35B || which == GEO_122B || which == GEO_397B) {
        geom_qwen35moe(which, g);
        return;
    }
    /* Qwen3-Next-80B-A3B (spec §A.1) */
    *g = (synth_geom){.n_embd = 2048,
                      .n_layer = 48,
                      .n_vocab = 151936,
                      .n_ctx = 262144,
                      .n_ff = 5120,
                      .n_head = 16,
                      .n_head_kv = 2,
                      .head_dim = 256,
                      .n_rot = 64,
                      .rope_base = 1e7f,
                      .rms_eps = 1e-6f,
                      .n_expert = 512,
                      .n_expert_used = 10,
                      .n_ff_exp = 512,
                      .n_ff_shexp = 512,
                      .ssm_kw = 4,
                      .ssm_dk = 128,
                      .ssm_hk = 16,
                      .ssm_hv = 32,
                      .ssm_inner = 4096,
                      .attn_interval = 4,
                      .n_precise = 8};
    if (which == GEO_TINY) {
        /* every quantised row length a multiple of 256 (K and IQ super-blocks) */
        *g = (synth_geom){.n_embd = 256,
                          .n_layer = 4,
                          .n_vocab = 4096,
                          .n_ctx = 4096,
                          .n_ff = 640,
                          .n_head = 4,
                          .n_head_kv = 2,
                          .head_dim = 64,
                          .n_rot = 16,
                          .rope_base = 1e7f,
                          .rms_eps = 1e-6f,
                          .n_expert = 16,
                          .n_expert_used = 4,
                          .n_ff_exp = 256,
                          .n_ff_shexp = 256,
                          .ssm_kw = 4,
                          .ssm_dk = 64,
                          .ssm_hk = 2,
                          .ssm_hv = 4,
                          .ssm_inner = 256,
                          .attn_interval = 4,
                          .n_precise = 1};
    }
}

typedef struct {
    const char *key;
    size_t off;
    bool is_float;
} geom_key;

#define GK(k, f)                                                                                             \
    { k, offsetof(synth_geom, f), false }
#define GKF(k, f)                                                                                            \
    { k, offsetof(synth_geom, f), true }
static const geom_key geom_keys[] = {
    GK("hidden", n_embd),
    GK("layers", n_layer),
    GK("vocab", n_vocab),
    GK("ctx", n_ctx),
    GK("ff", n_ff),
    GK("heads", n_head),
    GK("kv_heads", n_head_kv),
    GK("head_dim", head_dim),
    GK("rope_dims", n_rot),
    GKF("rope_base", rope_base),
    GKF("eps", rms_eps),
    GK("experts", n_expert),
    GK("top_k", n_expert_used),
    GK("expert_ff", n_ff_exp),
    GK("shared_ff", n_ff_shexp),
    GK("conv", ssm_kw),
    GK("state", ssm_dk),
    GK("groups", ssm_hk),
    GK("dt_rank", ssm_hv),
    GK("inner", ssm_inner),
    GK("interval", attn_interval),
    GK("precise", n_precise),
};

int synth_geom_parse(synth_geom *g, const char *spec) {
    char buf[1024];
    if (strlen(spec) >= sizeof buf) return rl_seterr("--geometry: specification too long");
    strcpy(buf, spec);
    bool layers_set = false, precise_set = false;
    for (char *save = NULL, *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (!eq) return rl_seterr("--geometry: '%s' is not key=value", item);
        *eq = 0;
        if (!strcmp(item, "arch")) { /* the architecture of the family, by its GGUF name */
            int a = q3n_arch_find(eq + 1);
            if (a < 0)
                return rl_seterr("--geometry: arch '%s' is not one of qwen3next, qwen35moe, qwen35", eq + 1);
            g->arch = a;
            continue;
        }
        const geom_key *k = NULL;
        for (size_t i = 0; i < sizeof geom_keys / sizeof geom_keys[0]; i++)
            if (!strcmp(item, geom_keys[i].key)) k = &geom_keys[i];
        if (!k) {
            char known[512] = "";
            for (size_t i = 0; i < sizeof geom_keys / sizeof geom_keys[0]; i++)
                snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? "," : "",
                         geom_keys[i].key);
            return rl_seterr("--geometry: unknown key '%s' (known: arch,%s)", item, known);
        }
        char *end;
        if (k->is_float) {
            double v = strtod(eq + 1, &end);
            if (!eq[1] || *end || !(v > 0)) return rl_seterr("--geometry: %s needs a positive number", item);
            *(float *)((char *)g + k->off) = (float)v;
        } else {
            long v = strtol(eq + 1, &end, 10);
            if (!eq[1] || *end || v < 0 || v > (1L << 30))
                return rl_seterr("--geometry: %s needs a non-negative integer, got '%s'", item, eq + 1);
            *(int *)((char *)g + k->off) = (int)v;
        }
        layers_set |= k->off == offsetof(synth_geom, n_layer);
        precise_set |= k->off == offsetof(synth_geom, n_precise);
    }
    /* CF2 keeps its precise experts on the last sixth of the layers (8 of 48) unless told */
    if (layers_set && !precise_set) g->n_precise = g->n_layer / 6 > 0 ? g->n_layer / 6 : 1;
    return 0;
}

int synth_geom_check(const synth_params *p) {
    const synth_geom *g = &p->g;
    const int *fields[] = {&g->n_embd,    &g->n_layer,  &g->n_vocab,       &g->n_ctx,     &g->n_head,
                           &g->n_head_kv, &g->head_dim, &g->n_rot,         &g->n_expert,  &g->n_expert_used,
                           &g->n_ff_exp,  &g->ssm_kw,   &g->ssm_dk,        &g->ssm_hk,    &g->ssm_hv,
                           &g->ssm_inner, &g->n_ff,     &g->attn_interval, &g->n_ff_shexp};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (*fields[i] <= 0) return rl_seterr("geometry: every size must be positive");
    if (g->n_layer + (p->mtp ? 1 : 0) > 127) return rl_seterr("geometry: at most 127 layers");
    if (g->n_head % g->n_head_kv) return rl_seterr("geometry: heads must be a multiple of kv_heads");
    if (g->n_rot > g->head_dim || g->n_rot % 2)
        return rl_seterr("geometry: rope_dims must be even and <= head_dim");
    if (g->ssm_hv % g->ssm_hk)
        return rl_seterr("geometry: dt_rank (value heads) must be a multiple of groups");
    if (g->ssm_inner % g->ssm_hv) return rl_seterr("geometry: inner must be a multiple of dt_rank");
    if (g->n_expert_used > g->n_expert) return rl_seterr("geometry: top_k exceeds experts");
    if (g->ssm_kw < 2) return rl_seterr("geometry: conv must be at least 2");
    if (g->n_vocab < 260) return rl_seterr("geometry: vocab must be at least 260 (256 bytes + specials)");
    if (g->n_precise < 0 || g->n_precise > g->n_layer)
        return rl_seterr("geometry: precise must be 0..layers");
    if (p->expert_type && !synth_gen_has(p->expert_type)) {
        char have[256];
        synth_gen_names(have, sizeof have);
        return rl_seterr("expert type %s: synth has no block generator for it (it has %s)",
                         quant_name(p->expert_type), have);
    }
    return 0; /* block-size multiples are checked per tensor by synth_plan */
}

int synth_resolve_vocab(synth_params *p) {
    if (!p->vocab_path) return 0;
    gguf_file *f = gguf_open(p->vocab_path);
    if (!f) return -1;
    const gguf_value *tok = gguf_get_arr(f, "tokenizer.ggml.tokens");
    if (!tok || tok->v.arr.elem != GGUF_TYPE_STRING || tok->v.arr.n < 260 || tok->v.arr.n > (1u << 30)) {
        gguf_close(f);
        return rl_seterr("%s: no usable tokenizer.ggml.tokens array (need a vocab GGUF)", p->vocab_path);
    }
    p->g.n_vocab = (int)tok->v.arr.n;
    gguf_close(f);
    return 0;
}

/* ---- tensor roles and the presets' type tables ---------------------------------------------- */

static bool is_vector(role r) { return r >= R_NORM; }

typedef struct {
    int i_ffn_down, n_blocks; /* ffn_down* tensors seen so far; decoder blocks incl. MTP */
    int i_attn_v, n_attn_v;   /* attn_v tensors seen so far; attention layers incl. MTP */
} pick_state;

/* llama.cpp's use_more_bits(): first and last eighth, and every third layer in between. */
static bool more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

/* Unsloth-Dynamic-style mixes, our reading of how those files are described (not a census of a
 * downloaded file): the routed experts carry the low-bit type (down projections one step up),
 * the tensors the Qwen3.5 KL studies call sensitive stay high: attention Q8_0 (K/V) / Q6_K, the
 * DeltaNet output projection Q6_K (Q2_K there "does dramatically worse"), the other DeltaNet
 * and shared-expert projections Q5_K / Q4_K, embedding Q4_K, output Q6_K, routers F32. */
static uint32_t pick_ud(bool iq3, role r) {
    switch (r) {
    case R_TOKEN_EMBD: return QT_Q4_K;
    case R_OUTPUT:
    case R_SSM_OUT:
    case R_Q:
    case R_O: return QT_Q6_K;
    case R_K:
    case R_V:
    case R_BA: return QT_Q8_0;
    case R_ROUTER: return QT_F32;
    case R_QKV:
    case R_GATE:
    case R_DOWN_SH: return QT_Q5_K;
    case R_GATE_EXPS:
    case R_UP_EXPS: return iq3 ? QT_IQ3_XXS : QT_IQ2_XXS;
    case R_DOWN_EXPS: return iq3 ? QT_Q4_K : QT_IQ3_XXS;
    default: return QT_Q4_K;
    }
}

static uint32_t pick_type(const synth_params *p, pick_state *s, role r, int il) {
    if (is_vector(r)) return QT_F32;
    if (p->expert_type && (r == R_GATE_EXPS || r == R_UP_EXPS || r == R_DOWN_EXPS)) return p->expert_type;
    switch (presets[p->preset].mix) {
    case MIX_CF2:
        /* Red Lite CF2 (reference §3): Bartowski's IQ2_XXS types with every IQ2_XXS dense
         * projection raised to Q4_K. attn_k/attn_v and ffn_down_shexp as Q6_K is our reading: with
         * them the file size matches the published 19,319,619,264 B to a few KB (all-Q4_K would be
         * 19.4 MB short). */
        switch (r) {
        case R_TOKEN_EMBD: return QT_Q2_K;
        case R_OUTPUT: return QT_Q5_K;
        case R_ROUTER: return QT_F32;
        case R_K:
        case R_V:
        case R_DOWN_SH: return QT_Q6_K;
        case R_BA: return QT_Q8_0;
        case R_GATE_EXPS:
        case R_UP_EXPS:
        case R_DOWN_EXPS: return il >= p->g.n_layer - p->g.n_precise ? QT_IQ2_XS : QT_IQ1_M;
        default: return QT_Q4_K;
        }
    case MIX_IQ2_XXS: /* llama.cpp IQ2_XXS mix (spec §D.4) */
        switch (r) {
        case R_TOKEN_EMBD: return QT_Q2_K;
        case R_OUTPUT: return QT_Q5_K;
        case R_ROUTER: return QT_F16;
        case R_V:
        case R_QKV: return QT_Q4_K;
        case R_DOWN_EXPS:
        case R_DOWN_SH: return s->i_ffn_down++ < s->n_blocks / 8 ? QT_Q2_K : QT_IQ2_XXS;
        default: return QT_IQ2_XXS;
        }
    case MIX_Q4_K_M: /* llama.cpp Q4_K_M mix: census 55 Q6_K (output, 6 attn_v, 48 ffn_down*) */
        switch (r) {
        case R_OUTPUT: return QT_Q6_K;
        case R_ROUTER: return QT_F16;
        case R_V: return more_bits(s->i_attn_v++, s->n_attn_v) ? QT_Q6_K : QT_Q4_K;
        case R_DOWN_EXPS:
        case R_DOWN_SH: return more_bits(il, s->n_blocks) ? QT_Q6_K : QT_Q4_K;
        default: return QT_Q4_K;
        }
    case MIX_UD_IQ2:
    case MIX_UD_IQ3: return pick_ud(presets[p->preset].mix == MIX_UD_IQ3, r);
    default: return QT_F32;
    }
}

/* ---- the plan ------------------------------------------------------------------------------- */

typedef struct {
    stensor *t;
    int n, cap;
    pick_state ps;
    const synth_params *p;
} plan;

static uint64_t name_key(uint64_t seed, const char *name) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (const char *c = name; *c; c++) h = (h ^ (uint8_t)*c) * 0x100000001b3ull;
    return synth_mix64(h ^ synth_mix64(seed + 0x9e3779b97f4a7c15ull));
}

/* Add a tensor: ne = {n_in, n_out, n_exp} (unused trailing dims 0). */
static int add(plan *pl, role r, int il, const char *name, int64_t n_in, int64_t n_out, int64_t n_exp) {
    if (pl->n == pl->cap) {
        int nc = pl->cap ? 2 * pl->cap : 1024;
        stensor *nt = realloc(pl->t, sizeof *nt * (size_t)nc);
        if (!nt) return rl_seterr("out of memory building the tensor plan");
        pl->t = nt;
        pl->cap = nc;
    }
    stensor *t = &pl->t[pl->n];
    memset(t, 0, sizeof *t);
    snprintf(t->info.name, sizeof t->info.name, "%s", name);
    t->r = r;
    t->layer = il;
    t->info.type = pick_type(pl->p, &pl->ps, r, il);
    int64_t ne[3] = {n_in, n_out, n_exp};
    t->info.n_dims = n_exp ? 3 : n_out ? 2 : 1;
    for (int d = 0; d < 4; d++) t->info.ne[d] = d < (int)t->info.n_dims ? ne[d] : 1;
    size_t rb = quant_row_size(t->info.type, n_in);
    if (!rb)
        return rl_seterr("geometry: %s has rows of %lld values, not a multiple of the %s block size %d",
                         t->info.name, (long long)n_in, quant_name(t->info.type),
                         quant_get(t->info.type)->blck);
    t->info.nbytes = (uint64_t)rb * (uint64_t)t->info.ne[1] * (uint64_t)t->info.ne[2];
    t->sigma = 0.02f * sqrtf(2048.0f / (float)n_in); /* trained-layer spread, Xavier-like in n_in */
    t->key = name_key(pl->p->seed, t->info.name);
    pl->n++;
    return 0;
}

/* The synth role of each entry of the model's tensor table (the type tables key on roles);
 * entries of the older GGUF generation (Q3N_ALTERNATIVE) are not written. */
static const role ROLE_OF[Q3N_T_COUNT] = {[Q3N_T_TOKEN_EMBD] = R_TOKEN_EMBD,
                                          [Q3N_T_ATTN_NORM] = R_NORM,
                                          [Q3N_T_ATTN_Q] = R_Q,
                                          [Q3N_T_ATTN_K] = R_K,
                                          [Q3N_T_ATTN_V] = R_V,
                                          [Q3N_T_ATTN_OUTPUT] = R_O,
                                          [Q3N_T_ATTN_Q_NORM] = R_NORM,
                                          [Q3N_T_ATTN_K_NORM] = R_NORM,
                                          [Q3N_T_SSM_QKV] = R_QKV,
                                          [Q3N_T_SSM_GATE] = R_GATE,
                                          [Q3N_T_SSM_BA] = R_BA,
                                          [Q3N_T_SSM_CONV] = R_CONV,
                                          [Q3N_T_SSM_BETA] = R_BA,
                                          [Q3N_T_SSM_ALPHA] = R_BA,
                                          [Q3N_T_FFN_GATE] = R_GATE_SH,
                                          [Q3N_T_FFN_UP] = R_UP_SH,
                                          [Q3N_T_FFN_DOWN] = R_DOWN_SH,
                                          [Q3N_T_SSM_DT] = R_DT,
                                          [Q3N_T_SSM_A] = R_A,
                                          [Q3N_T_SSM_NORM] = R_NORM,
                                          [Q3N_T_SSM_OUT] = R_SSM_OUT,
                                          [Q3N_T_POST_NORM] = R_NORM,
                                          [Q3N_T_ROUTER] = R_ROUTER,
                                          [Q3N_T_GATE_EXPS] = R_GATE_EXPS,
                                          [Q3N_T_UP_EXPS] = R_UP_EXPS,
                                          [Q3N_T_DOWN_EXPS] = R_DOWN_EXPS,
                                          [Q3N_T_SH_GATE] = R_SH_GATE_INP,
                                          [Q3N_T_GATE_SH] = R_GATE_SH,
                                          [Q3N_T_UP_SH] = R_UP_SH,
                                          [Q3N_T_DOWN_SH] = R_DOWN_SH,
                                          [Q3N_T_EH_PROJ] = R_EH_PROJ,
                                          [Q3N_T_ENORM] = R_NORM,
                                          [Q3N_T_HNORM] = R_NORM,
                                          [Q3N_T_SHARED_HEAD_NORM] = R_NORM,
                                          [Q3N_T_OUTPUT_NORM] = R_NORM,
                                          [Q3N_T_OUTPUT] = R_OUTPUT};

/* The geometry as the model's hyperparameters (what the table's shapes are written in). */
static void geom_hparams(const synth_params *p, q3n_hparams *hp) {
    const synth_geom *g = &p->g;
    memset(hp, 0, sizeof *hp);
    hp->n_vocab = g->n_vocab, hp->n_embd = g->n_embd, hp->n_layer = g->n_layer, hp->n_nextn = p->mtp ? 1 : 0;
    hp->n_head = g->n_head, hp->n_head_kv = g->n_head_kv, hp->head_dim = g->head_dim, hp->n_rot = g->n_rot;
    hp->n_expert = g->n_expert, hp->n_expert_used = g->n_expert_used;
    hp->n_ff_exp = g->n_ff_exp, hp->n_ff_shexp = g->n_ff_shexp;
    hp->ssm_kw = g->ssm_kw, hp->ssm_dk = g->ssm_dk, hp->ssm_hk = g->ssm_hk, hp->ssm_hv = g->ssm_hv;
    hp->ssm_dv = g->ssm_inner / g->ssm_hv;
    hp->ssm_conv_dim = 2 * g->ssm_hk * g->ssm_dk + g->ssm_inner;
    hp->full_attn_interval = g->attn_interval;
    const q3n_arch_desc *ad = q3n_arch_get((q3n_arch)g->arch);
    hp->arch = (q3n_arch)g->arch, hp->moe = ad->moe, hp->ba_split = ad->ba_split, hp->v_tiled = ad->v_tiled;
    if (!ad->moe) hp->n_ff = g->n_ff;
}

static int add_entry(plan *pl, const q3n_hparams *hp, q3n_tensor_id id, int il) {
    const q3n_tensor_desc *d = q3n_tensor(id);
    char name[96];
    return add(pl, ROLE_OF[id], il, q3n_tensor_name(id, il, name, sizeof name), q3n_dim_value(hp, d->ne[0]),
               q3n_dim_value(hp, d->ne[1]), q3n_dim_value(hp, d->ne[2]));
}

/* File order = table order: the global tensors before the block entries, every block's entries
 * (those of its kinds), then the global tensors after them. */
static int build_plan(plan *pl, const synth_params *p) {
    q3n_hparams hp;
    geom_hparams(p, &hp);
    int nb = hp.n_layer + hp.n_nextn;
    memset(pl, 0, sizeof *pl);
    pl->p = p;
    pl->ps.n_blocks = nb;
    for (int il = 0; il < nb; il++)
        if (q3n_block_is_attn(&hp, il)) pl->ps.n_attn_v++;
    int rc = 0;
    for (int id = 0; id < Q3N_T_COUNT && !rc; id++) {
        const q3n_tensor_desc *d = q3n_tensor((q3n_tensor_id)id);
        if (d->kind == Q3N_KIND_GLOBAL) {
            rc = add_entry(pl, &hp, (q3n_tensor_id)id, -1);
            continue;
        }
        int last = id; /* the block entries are contiguous in the table */
        while (last + 1 < Q3N_T_COUNT && q3n_tensor((q3n_tensor_id)(last + 1))->kind != Q3N_KIND_GLOBAL)
            last++;
        for (int il = 0; il < nb && !rc; il++)
            for (int j = id; j <= last && !rc; j++) {
                const q3n_tensor_desc *e = q3n_tensor((q3n_tensor_id)j);
                if (e->need != Q3N_ALTERNATIVE && q3n_tensor_in_block(&hp, (q3n_tensor_id)j, il))
                    rc = add_entry(pl, &hp, (q3n_tensor_id)j, il);
            }
        id = last;
    }
    if (rc) { /* an empty plan (synth_write's clean-up walks pl->t by pl->n) */
        free(pl->t);
        pl->t = NULL;
        pl->n = pl->cap = 0;
        return -1;
    }
    for (int i = 0; i < pl->n; i++) {
        stensor *t = &pl->t[i];
        if (t->r == R_TOKEN_EMBD || t->r == R_OUTPUT) t->sigma = 0.02f;
    }
    return 0;
}

synth_tensor_info *synth_plan(const synth_params *p, int *n) {
    if (synth_geom_check(p)) return NULL;
    plan pl;
    if (build_plan(&pl, p)) return NULL;
    synth_tensor_info *out = rl_malloc(sizeof *out * (size_t)pl.n, "tensor plan");
    if (out)
        for (int i = 0; i < pl.n; i++) out[i] = pl.t[i].info;
    *n = pl.n;
    free(pl.t);
    return out;
}

/* ---- metadata and vocabulary ------------------------------------------------------------- */

/* GPT-2 byte-level alphabet: printable bytes map to themselves, the rest to U+0100.. in order. */
static int byte_token(int b, char *out) {
    int cp = b;
    if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))) {
        int k = 0;
        for (int x = 0; x < b; x++)
            if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) k++;
        cp = 256 + k;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xc0 | cp >> 6);
    out[1] = (char)(0x80 | (cp & 63));
    return 2;
}

/* A minimal byte-level vocabulary of n tokens: 256 bytes, [PAD<i>] fillers, three specials. */
static int synth_vocab(gguf_writer *w, int n) {
    char **toks = rl_calloc((size_t)n, sizeof(char *), "synthetic vocabulary");
    int32_t *types = rl_malloc(sizeof(int32_t) * (size_t)n, "synthetic vocabulary");
    char *pool_buf = rl_malloc((size_t)n * 24, "synthetic vocabulary");
    int rc = -1;
    if (!toks || !types || !pool_buf) goto out;
    static const char *const specials[3] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    for (int i = 0; i < n; i++) {
        char *s = toks[i] = pool_buf + (size_t)i * 24;
        types[i] = 1;
        if (i < 256) {
            s[byte_token(i, s)] = 0;
        } else if (i >= n - 3) {
            strcpy(s, specials[i - (n - 3)]);
            types[i] = 3;
        } else {
            snprintf(s, 24, "[PAD%d]", i);
        }
    }
    rc = gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2") |
         gguf_writer_set_str(w, "tokenizer.ggml.pre", "qwen2") |
         gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)toks, (uint64_t)n) |
         gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, (uint64_t)n) |
         gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", NULL, 0) |
         gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)n - 1) |
         gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)n - 3) |
         gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)n - 3) |
         gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", false);
out:
    free(toks);
    free(types);
    free(pool_buf);
    return rc ? -1 : 0;
}

static int set_metadata(gguf_writer *w, const synth_params *p, gguf_file *vocab) {
    const synth_geom *g = &p->g;
    char name[128];
    if (p->routing == SYNTH_ROUTING_UNIFORM) /* the original name: uniform files keep their bytes */
        snprintf(name, sizeof name, "Red Lite synthetic %s (seed %llu)", synth_preset_name(p->preset),
                 (unsigned long long)p->seed);
    else
        snprintf(name, sizeof name, "Red Lite synthetic %s (seed %llu, %s routing)",
                 synth_preset_name(p->preset), (unsigned long long)p->seed, synth_routing_name(p->routing));
    const q3n_arch_desc *ad = q3n_arch_get((q3n_arch)g->arch);
    char key[96];
    int rc = gguf_writer_set_str(w, "general.architecture", ad->name) |
             gguf_writer_set_str(w, "general.name", name) |
             gguf_writer_set_u32(w, "general.quantization_version", 2) |
             gguf_writer_set_str(w, "redlite.synth.preset", synth_preset_name(p->preset)) |
             gguf_writer_set_u64(w, "redlite.synth.seed", p->seed);
    if (p->routing != SYNTH_ROUTING_UNIFORM) /* absent = uniform (files written before the option) */
        rc |= gguf_writer_set_str(w, "redlite.synth.routing", synth_routing_name(p->routing));
    if (presets[p->preset].mix == MIX_IQ2_XXS || presets[p->preset].mix == MIX_UD_IQ2)
        rc |= gguf_writer_set_u32(w, "general.file_type", 19); /* LLAMA_FTYPE_MOSTLY_IQ2_XXS */
    if (presets[p->preset].mix == MIX_UD_IQ3)
        rc |= gguf_writer_set_u32(w, "general.file_type", 23); /* LLAMA_FTYPE_MOSTLY_IQ3_XXS */
    if (presets[p->preset].mix == MIX_Q4_K_M)
        rc |= gguf_writer_set_u32(w, "general.file_type", 15); /* LLAMA_FTYPE_MOSTLY_Q4_K_M */
#define U(k, v)                                                                                              \
    (snprintf(key, sizeof key, "%s.%s", ad->name, k), rc |= gguf_writer_set_u32(w, key, (uint32_t)(v)))
    U("context_length", g->n_ctx);
    U("embedding_length", g->n_embd);
    U("block_count", g->n_layer + (p->mtp ? 1 : 0));
    U("feed_forward_length", g->n_ff);
    U("attention.head_count", g->n_head);
    U("attention.head_count_kv", g->n_head_kv);
    U("attention.key_length", g->head_dim);
    U("attention.value_length", g->head_dim);
    U("rope.dimension_count", g->n_rot);
    if (ad->moe) {
        U("expert_count", g->n_expert);
        U("expert_used_count", g->n_expert_used);
        U("expert_feed_forward_length", g->n_ff_exp);
        U("expert_shared_feed_forward_length", g->n_ff_shexp);
    }
    U("ssm.conv_kernel", g->ssm_kw);
    U("ssm.state_size", g->ssm_dk);
    U("ssm.group_count", g->ssm_hk);
    U("ssm.time_step_rank", g->ssm_hv);
    U("ssm.inner_size", g->ssm_inner);
    U("full_attention_interval", g->attn_interval);
    if (p->mtp) U("nextn_predict_layers", 1);
#undef U
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", ad->name);
    rc |= gguf_writer_set_f32(w, key, g->rms_eps);
    snprintf(key, sizeof key, "%s.rope.freq_base", ad->name);
    rc |= gguf_writer_set_f32(w, key, g->rope_base);
    if (ad->rope_sections) { /* the rotary pairs split t/h/w as Qwen3.5's [11, 11, 10, 0] splits 32 */
        const int half = g->n_rot / 2, a = (half + 2) / 3;
        const int32_t sec[4] = {half >= 3 ? a : half, half >= 3 ? a : 0, half >= 3 ? half - 2 * a : 0, 0};
        snprintf(key, sizeof key, "%s.rope.dimension_sections", ad->name);
        rc |= gguf_writer_set_arr(w, key, GGUF_TYPE_INT32, sec, 4);
    }
    if (rc) return -1;
    if (!vocab) return synth_vocab(w, g->n_vocab);
    for (uint64_t i = 0; i < vocab->n_kv; i++) {
        const gguf_kv *kv = &vocab->kv[i];
        if (kv->key.n > 10 && !memcmp(kv->key.p, "tokenizer.", 10) && gguf_writer_copy_kv(w, kv)) return -1;
    }
    return 0;
}

/* ---- writing -------------------------------------------------------------------------------- */

typedef struct {
    plan pl;
    tmpl tmpls[32];
    int n_tmpl;
    pool *pool;
    rl_progress prog;
    uint64_t done, total;
    /* the chunk being generated */
    const stensor *cur;
    uint8_t *dst;
    uint64_t off, n;
} wctx;

static const tmpl *get_tmpl(wctx *c, uint32_t type, float sigma, uint64_t seed) {
    for (int i = 0; i < c->n_tmpl; i++)
        if (c->tmpls[i].type == type && c->tmpls[i].sigma == sigma) return &c->tmpls[i];
    if (c->n_tmpl == (int)(sizeof c->tmpls / sizeof c->tmpls[0])) {
        rl_seterr("synth: too many distinct (type, std) templates");
        return NULL;
    }
    tmpl *t = &c->tmpls[c->n_tmpl++];
    return synth_gen_tmpl(t, type, sigma, seed) ? NULL : t;
}

static void fill_worker(void *arg, int ith, int nth) {
    wctx *c = arg;
    long lo, hi;
    pool_range((long)c->n, ith, nth, &lo, &hi);
    if (hi > lo)
        synth_gen_bytes(c->cur->tp, c->cur->key, c->dst + lo, c->off + (uint64_t)lo, (uint64_t)(hi - lo));
}

static int fill(void *ctx, int ti, void *dst, uint64_t off, uint64_t n) {
    wctx *c = ctx;
    c->cur = &c->pl.t[ti];
    c->dst = dst;
    c->off = off;
    c->n = n;
    if (n < (1u << 16) || pool_size(c->pool) == 1) fill_worker(c, 0, 1);
    else pool_run(c->pool, fill_worker, c);
    c->done += n;
    rl_progress_update(&c->prog, c->done);
    return 0;
}

int synth_write(const synth_params *p, const char *path, synth_stats *st) {
    double t0 = rl_now();
    if (synth_geom_check(p)) return -1;
    wctx c;
    memset(&c, 0, sizeof c);
    gguf_file *vocab = NULL;
    gguf_writer *w = NULL;
    int rc = -1;
    if (p->vocab_path) {
        if (!(vocab = gguf_open(p->vocab_path))) return -1;
        const gguf_value *tok = gguf_get_arr(vocab, "tokenizer.ggml.tokens");
        if (!tok || tok->v.arr.n != (uint64_t)p->g.n_vocab) {
            rl_seterr(
                "%s: its vocabulary has %llu tokens but the geometry says %d (call synth_resolve_vocab)",
                p->vocab_path, tok ? (unsigned long long)tok->v.arr.n : 0ull, p->g.n_vocab);
            goto out;
        }
    }
    if (build_plan(&c.pl, p)) goto out;
    if (!(c.pool = pool_new(p->n_threads)) || !(w = gguf_writer_new())) goto out;
    if (set_metadata(w, p, vocab)) goto out;
    for (int i = 0; i < c.pl.n; i++) {
        stensor *t = &c.pl.t[i];
        if (is_vector(t->r)) {
            if (synth_gen_vector(t)) goto out;
        } else if (t->r == R_ROUTER && p->routing != SYNTH_ROUTING_UNIFORM) {
            if (synth_gen_router(t, p->routing)) goto out;
        } else {
            if (!(t->tp = get_tmpl(&c, t->info.type, t->sigma, p->seed))) goto out;
            c.total += t->info.nbytes;
        }
        const void *data = t->raw ? (const void *)t->raw : (const void *)t->vec;
        if (gguf_writer_add_tensor(w, t->info.name, t->info.type, t->info.n_dims, t->info.ne, data) != i)
            goto out;
    }
    gguf_writer_set_fill(w, fill, &c);
    c.prog.enabled = false;
    if (p->progress) rl_progress_start(&c.prog, "synth", c.total);
    rc = gguf_writer_write(w, path);
    if (p->progress) rl_progress_end(&c.prog);
    if (rc == 0 && st) {
        struct stat sb;
        /* a device (/dev/null: generation speed alone) has no size: count the generated bytes */
        st->file_bytes = stat(path, &sb) == 0 && S_ISREG(sb.st_mode) ? (uint64_t)sb.st_size : c.total;
        st->n_tensors = c.pl.n;
        st->seconds = rl_now() - t0;
    }
out:
    gguf_writer_free(w);
    if (vocab) gguf_close(vocab);
    if (c.pool) pool_free(c.pool);
    for (int i = 0; i < c.n_tmpl; i++) {
        free(c.tmpls[i].bytes);
        free(c.tmpls[i].mask);
    }
    for (int i = 0; i < c.pl.n; i++) {
        free(c.pl.t[i].vec);
        free(c.pl.t[i].raw);
    }
    free(c.pl.t);
    return rc;
}
