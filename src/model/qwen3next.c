/* qwen3next.c — the Qwen3-Next architecture file: the model description (the one tensor table,
 * activation names, dimensions), hyperparameters, tensor binding. The CPU reference forward pass
 * is in qwen3next_forward.c. See qwen3next.h for the contract and the shared spec for the op
 * order (§A), tensor names of both GGUF generations (§B) and MTP (§F).
 */
#include "model/qwen3next.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "gguf/quant.h"

/* ---- the model description ---------------------------------------------------------- */

#define LF(f) (int)offsetof(q3n_layer, f)
#define MF(f) (int)offsetof(q3n_model, f)
#define NO Q3N_DIM_NONE
/* The one table of Qwen3-Next tensor names (contract in qwen3next.h). */
static const q3n_tensor_desc TENSORS[Q3N_T_COUNT] = {
    [Q3N_T_TOKEN_EMBD] = {"token_embd.weight", "token embedding (row lookup)", Q3N_KIND_GLOBAL,
                          {Q3N_DIM_D, Q3N_DIM_VOCAB, NO}, Q3N_REQUIRED, false, false, MF(tok_embd)},
    [Q3N_T_ATTN_NORM] = {"blk.%d.attn_norm.weight", "mixer input RMSNorm", Q3N_KIND_BLOCK, {Q3N_DIM_D, NO, NO},
                         Q3N_REQUIRED, true, false, LF(attn_norm)},
    [Q3N_T_ATTN_Q] = {"blk.%d.attn_q.weight", "attention query + output gate", Q3N_KIND_ATTN,
                      {Q3N_DIM_D, Q3N_DIM_Q_GATE, NO}, Q3N_REQUIRED, false, false, LF(wq)},
    [Q3N_T_ATTN_K] = {"blk.%d.attn_k.weight", "attention key", Q3N_KIND_ATTN, {Q3N_DIM_D, Q3N_DIM_KV, NO},
                      Q3N_REQUIRED, false, false, LF(wk)},
    [Q3N_T_ATTN_V] = {"blk.%d.attn_v.weight", "attention value", Q3N_KIND_ATTN, {Q3N_DIM_D, Q3N_DIM_KV, NO},
                      Q3N_REQUIRED, false, false, LF(wv)},
    [Q3N_T_ATTN_OUTPUT] = {"blk.%d.attn_output.weight", "attention output", Q3N_KIND_ATTN,
                           {Q3N_DIM_ATT, Q3N_DIM_D, NO}, Q3N_REQUIRED, false, false, LF(wo)},
    [Q3N_T_ATTN_Q_NORM] = {"blk.%d.attn_q_norm.weight", "query head RMSNorm", Q3N_KIND_ATTN, {Q3N_DIM_HD, NO, NO},
                           Q3N_REQUIRED, true, false, LF(q_norm)},
    [Q3N_T_ATTN_K_NORM] = {"blk.%d.attn_k_norm.weight", "key head RMSNorm", Q3N_KIND_ATTN, {Q3N_DIM_HD, NO, NO},
                           Q3N_REQUIRED, true, false, LF(k_norm)},
    /* split generation; the older files hold ssm_in instead of these two */
    [Q3N_T_SSM_QKV] = {"blk.%d.attn_qkv.weight", "DeltaNet q|k|v projection", Q3N_KIND_DELTANET,
                       {Q3N_DIM_D, Q3N_DIM_CONV, NO}, Q3N_REQUIRED, false, false, LF(wqkv)},
    [Q3N_T_SSM_GATE] = {"blk.%d.attn_gate.weight", "DeltaNet output gate z", Q3N_KIND_DELTANET,
                        {Q3N_DIM_D, Q3N_DIM_INNER, NO}, Q3N_REQUIRED, false, false, LF(wgate)},
    [Q3N_T_SSM_IN] = {"blk.%d.ssm_in.weight", "DeltaNet fused qkvz (older GGUFs, de-interleaved at load)",
                      Q3N_KIND_DELTANET, {Q3N_DIM_D, Q3N_DIM_SSM_IN, NO}, Q3N_ALTERNATIVE, false, false, -1},
    [Q3N_T_SSM_BA] = {"blk.%d.ssm_ba.weight", "DeltaNet beta|alpha per key head", Q3N_KIND_DELTANET,
                      {Q3N_DIM_D, Q3N_DIM_2HV, NO}, Q3N_REQUIRED, false, false, LF(wba)},
    [Q3N_T_SSM_CONV] = {"blk.%d.ssm_conv1d.weight", "DeltaNet causal conv", Q3N_KIND_DELTANET,
                        {Q3N_DIM_KW, Q3N_DIM_CONV, NO}, Q3N_REQUIRED, true, false, LF(conv_w)},
    [Q3N_T_SSM_DT] = {"blk.%d.ssm_dt.bias", "DeltaNet dt bias", Q3N_KIND_DELTANET, {Q3N_DIM_HV, NO, NO},
                      Q3N_REQUIRED, true, false, LF(dt_bias)},
    [Q3N_T_SSM_A] = {"blk.%d.ssm_a", "DeltaNet decay -exp(A_log)", Q3N_KIND_DELTANET, {Q3N_DIM_HV, NO, NO},
                     Q3N_REQUIRED, true, false, LF(ssm_a)},
    [Q3N_T_SSM_NORM] = {"blk.%d.ssm_norm.weight", "DeltaNet gated RMSNorm", Q3N_KIND_DELTANET,
                        {Q3N_DIM_DV, NO, NO}, Q3N_REQUIRED, true, false, LF(ssm_norm)},
    [Q3N_T_SSM_OUT] = {"blk.%d.ssm_out.weight", "DeltaNet output", Q3N_KIND_DELTANET,
                       {Q3N_DIM_INNER, Q3N_DIM_D, NO}, Q3N_REQUIRED, false, false, LF(wout)},
    [Q3N_T_POST_NORM] = {"blk.%d.post_attention_norm.weight", "MoE input RMSNorm", Q3N_KIND_MOE,
                         {Q3N_DIM_D, NO, NO}, Q3N_REQUIRED, true, false, LF(post_norm)},
    [Q3N_T_ROUTER] = {"blk.%d.ffn_gate_inp.weight", "router", Q3N_KIND_MOE, {Q3N_DIM_D, Q3N_DIM_E, NO},
                      Q3N_REQUIRED, false, false, LF(router)},
    /* separate gate/up slabs, or one fused gate_up slab (gate rows first per expert) */
    [Q3N_T_GATE_EXPS] = {"blk.%d.ffn_gate_exps.weight", "routed experts' gate", Q3N_KIND_MOE,
                         {Q3N_DIM_D, Q3N_DIM_FF, Q3N_DIM_E}, Q3N_REQUIRED, false, true, LF(gate_exps)},
    [Q3N_T_UP_EXPS] = {"blk.%d.ffn_up_exps.weight", "routed experts' up", Q3N_KIND_MOE,
                       {Q3N_DIM_D, Q3N_DIM_FF, Q3N_DIM_E}, Q3N_REQUIRED, false, true, LF(up_exps)},
    [Q3N_T_GATE_UP_EXPS] = {"blk.%d.ffn_gate_up_exps.weight", "routed experts' fused gate|up", Q3N_KIND_MOE,
                            {Q3N_DIM_D, Q3N_DIM_2FF, Q3N_DIM_E}, Q3N_ALTERNATIVE, false, true, LF(gate_exps)},
    [Q3N_T_DOWN_EXPS] = {"blk.%d.ffn_down_exps.weight", "routed experts' down", Q3N_KIND_MOE,
                         {Q3N_DIM_FF, Q3N_DIM_D, Q3N_DIM_E}, Q3N_REQUIRED, false, true, LF(down_exps)},
    [Q3N_T_SH_GATE] = {"blk.%d.ffn_gate_inp_shexp.weight", "shared expert's sigmoid gate", Q3N_KIND_MOE,
                       {Q3N_DIM_D, NO, NO}, Q3N_OPTIONAL, true, false, LF(sh_gate)},
    [Q3N_T_GATE_SH] = {"blk.%d.ffn_gate_shexp.weight", "shared expert's gate", Q3N_KIND_MOE,
                       {Q3N_DIM_D, Q3N_DIM_FF_SH, NO}, Q3N_OPTIONAL, false, false, LF(gate_sh)},
    [Q3N_T_UP_SH] = {"blk.%d.ffn_up_shexp.weight", "shared expert's up", Q3N_KIND_MOE,
                     {Q3N_DIM_D, Q3N_DIM_FF_SH, NO}, Q3N_OPTIONAL, false, false, LF(up_sh)},
    [Q3N_T_DOWN_SH] = {"blk.%d.ffn_down_shexp.weight", "shared expert's down", Q3N_KIND_MOE,
                       {Q3N_DIM_FF_SH, Q3N_DIM_D, NO}, Q3N_OPTIONAL, false, false, LF(down_sh)},
    /* MTP head, llama.cpp converter names (spec §F.3) */
    [Q3N_T_EH_PROJ] = {"blk.%d.nextn.eh_proj.weight", "MTP [embedding ; hidden] projection", Q3N_KIND_MTP,
                       {Q3N_DIM_2D, Q3N_DIM_D, NO}, Q3N_REQUIRED, false, false, LF(eh_proj)},
    [Q3N_T_ENORM] = {"blk.%d.nextn.enorm.weight", "MTP embedding RMSNorm", Q3N_KIND_MTP, {Q3N_DIM_D, NO, NO},
                     Q3N_REQUIRED, true, false, LF(enorm)},
    [Q3N_T_HNORM] = {"blk.%d.nextn.hnorm.weight", "MTP hidden RMSNorm", Q3N_KIND_MTP, {Q3N_DIM_D, NO, NO},
                     Q3N_REQUIRED, true, false, LF(hnorm)},
    [Q3N_T_SHARED_HEAD_NORM] = {"blk.%d.nextn.shared_head_norm.weight", "MTP output RMSNorm", Q3N_KIND_MTP,
                                {Q3N_DIM_D, NO, NO}, Q3N_REQUIRED, true, false, LF(shared_head_norm)},
    [Q3N_T_OUTPUT_NORM] = {"output_norm.weight", "final RMSNorm", Q3N_KIND_GLOBAL, {Q3N_DIM_D, NO, NO},
                           Q3N_REQUIRED, true, false, MF(output_norm)},
    [Q3N_T_OUTPUT] = {"output.weight", "output head (absent: tied to token_embd)", Q3N_KIND_GLOBAL,
                      {Q3N_DIM_D, Q3N_DIM_VOCAB, NO}, Q3N_OPTIONAL, false, false, MF(output)},
};
#undef NO

static const char *const ACTS[Q3N_ACT_COUNT] = {
    [Q3N_ACT_INP_EMBD] = "inp_embd", [Q3N_ACT_ATTN_NORM] = "attn_norm",   [Q3N_ACT_DN_CONV] = "dn_conv",
    [Q3N_ACT_DN_GATED] = "dn_gated", [Q3N_ACT_ATTN_GATED] = "attn_gated", [Q3N_ACT_ATTN_OUT] = "attn_out",
    [Q3N_ACT_FFN_INP] = "ffn_inp",   [Q3N_ACT_FFN_NORM] = "ffn_norm",     [Q3N_ACT_FFN_OUT] = "ffn_out",
    [Q3N_ACT_L_OUT] = "l_out",       [Q3N_ACT_RESULT_NORM] = "result_norm"};

const q3n_tensor_desc *q3n_tensor(q3n_tensor_id id) {
    return (unsigned)id < Q3N_T_COUNT ? &TENSORS[id] : NULL;
}

const char *q3n_tensor_name(q3n_tensor_id id, int il, char *buf, size_t n) {
    if (TENSORS[id].kind == Q3N_KIND_GLOBAL) snprintf(buf, n, "%s", TENSORS[id].name);
    else snprintf(buf, n, TENSORS[id].name, il);
    return buf;
}

int q3n_tensor_lookup(const char *name, int *il) {
    static const char blk[] = "blk.%d.";
    const char *rest = NULL;
    long b = -1;
    if (!strncmp(name, "blk.", 4) && name[4] >= '0' && name[4] <= '9') {
        char *end;
        b = strtol(name + 4, &end, 10);
        if (*end != '.' || b > (1L << 30)) return -1;
        rest = end + 1;
    }
    for (int id = 0; id < Q3N_T_COUNT; id++) {
        const q3n_tensor_desc *d = &TENSORS[id];
        bool global = d->kind == Q3N_KIND_GLOBAL;
        if (global ? !rest && !strcmp(name, d->name) : rest && !strcmp(rest, d->name + sizeof blk - 1)) {
            if (il) *il = global ? -1 : (int)b;
            return id;
        }
    }
    return -1;
}

bool q3n_tensor_is_routed(const char *name) {
    int id = q3n_tensor_lookup(name, NULL);
    return id >= 0 && TENSORS[id].routed;
}

const char *q3n_act_name(q3n_act a) { return (unsigned)a < Q3N_ACT_COUNT ? ACTS[a] : "?"; }

int q3n_act_find(const char *name) {
    for (int a = 0; a < Q3N_ACT_COUNT; a++)
        if (!strcmp(name, ACTS[a])) return a;
    return -1;
}

int64_t q3n_dim_value(const q3n_hparams *hp, q3n_dim d) {
    int64_t hd = hp->head_dim, inner = (int64_t)hp->ssm_hv * hp->ssm_dv;
    switch (d) {
    case Q3N_DIM_NONE: return 0;
    case Q3N_DIM_D: return hp->n_embd;
    case Q3N_DIM_2D: return 2 * (int64_t)hp->n_embd;
    case Q3N_DIM_VOCAB: return hp->n_vocab;
    case Q3N_DIM_E: return hp->n_expert;
    case Q3N_DIM_FF: return hp->n_ff_exp;
    case Q3N_DIM_2FF: return 2 * (int64_t)hp->n_ff_exp;
    case Q3N_DIM_FF_SH: return hp->n_ff_shexp;
    case Q3N_DIM_HD: return hd;
    case Q3N_DIM_Q_GATE: return 2 * hd * hp->n_head;
    case Q3N_DIM_KV: return hd * hp->n_head_kv;
    case Q3N_DIM_ATT: return hd * hp->n_head;
    case Q3N_DIM_CONV: return hp->ssm_conv_dim;
    case Q3N_DIM_INNER: return inner;
    case Q3N_DIM_SSM_IN: return hp->ssm_conv_dim + inner;
    case Q3N_DIM_HV: return hp->ssm_hv;
    case Q3N_DIM_2HV: return 2 * (int64_t)hp->ssm_hv;
    case Q3N_DIM_DV: return hp->ssm_dv;
    case Q3N_DIM_KW: return hp->ssm_kw;
    default: return 0;
    }
}

size_t q3n_conv_floats(const q3n_hparams *hp) { return (size_t)(hp->ssm_kw - 1) * hp->ssm_conv_dim; }
size_t q3n_ssm_floats(const q3n_hparams *hp) { return (size_t)hp->ssm_hv * hp->ssm_dv * hp->ssm_dk; }

bool q3n_block_is_attn(const q3n_hparams *hp, int il) {
    return il >= hp->n_layer || (il + 1) % hp->full_attn_interval == 0;
}

bool q3n_kind_in_block(const q3n_hparams *hp, q3n_kind k, int il) {
    if (il < 0 || il >= hp->n_layer + hp->n_nextn) return false;
    switch (k) {
    case Q3N_KIND_BLOCK:
    case Q3N_KIND_MOE: return true;
    case Q3N_KIND_DELTANET: return !q3n_block_is_attn(hp, il);
    case Q3N_KIND_ATTN: return q3n_block_is_attn(hp, il);
    case Q3N_KIND_MTP: return il >= hp->n_layer;
    default: return false;
    }
}

/* ---- hyperparameters ------------------------------------------------------------------ */

/* File-derived limits. Every value that sizes a buffer, a loop or a kernel's work comes from the
 * file, so each is checked here, once, when the model is opened: a value out of range is refused
 * with one line naming the file, the key and the value (never an assert later). The bounds are the
 * code's real limits (named where they come from), far above Qwen3-Next's own values (in the
 * comments). */
typedef struct {
    const char *key; /* after "qwen3next." */
    int off;         /* offset of the int in q3n_hparams; -1: read into *extra */
    int dflt;        /* 0: required */
    int lo, hi;
} hp_key;

#define HO(f) (int)offsetof(q3n_hparams, f)
static const hp_key HP_KEYS[] = {
    {"embedding_length", HO(n_embd), 0, 1, OPS_MAX_ROW / 2},              /* 2048; MTP eh_proj reads 2D */
    {"attention.head_count", HO(n_head), 0, 1, 1024},                     /* 16 */
    {"attention.head_count_kv", HO(n_head_kv), 0, 1, 1024},               /* 2 */
    {"attention.key_length", HO(head_dim), 0, 2, Q3N_MAX_HEAD_DIM},       /* 256 */
    {"rope.dimension_count", HO(n_rot), 0, 2, Q3N_MAX_HEAD_DIM},          /* 64 */
    {"expert_count", HO(n_expert), 0, 1, Q3N_MAX_EXPERTS},                /* 512 */
    {"expert_used_count", HO(n_expert_used), 0, 1, Q3N_MAX_EXPERTS},      /* 10 */
    {"expert_feed_forward_length", HO(n_ff_exp), 0, 1, OPS_MAX_ROW},      /* 512 */
    {"expert_shared_feed_forward_length", HO(n_ff_shexp), -1, 1, OPS_MAX_ROW}, /* 512; default n_ff_exp */
    {"ssm.conv_kernel", HO(ssm_kw), 0, 2, 64},                            /* 4 */
    {"ssm.state_size", HO(ssm_dk), 0, 1, Q3N_MAX_HEAD_DIM},               /* 128 */
    {"ssm.group_count", HO(ssm_hk), 0, 1, 1024},                          /* 16 */
    {"ssm.time_step_rank", HO(ssm_hv), 0, 1, 1024},                       /* 32 */
    {"ssm.inner_size", -1, 0, 1, OPS_MAX_ROW},                            /* 4096 */
    {"full_attention_interval", HO(full_attn_interval), 4, 1, Q3N_MAX_LAYERS}, /* 4 */
    {"nextn_predict_layers", HO(n_nextn), -2, 0, 1},                      /* 0 or 1 (-2: default 0) */
    {"context_length", HO(n_ctx_train), 262144, 1, 1 << 30},             /* 262144 */
    {"block_count", -2, 0, 1, Q3N_MAX_LAYERS},                            /* 48 (+1 with MTP) */
};
#undef HO

static int hp_fail(gguf_file *f, const char *what, long long v, const char *why) {
    return rl_seterr("%s: %s = %lld %s", f->path, what, v, why);
}

/* Reads and checks the hyperparameters; returns 0, -1 (missing keys: not a Qwen3-Next GGUF) or -2
 * (a value out of range or inconsistent), with rl_lasterr set. */
static int load_hparams(q3n_hparams *hp, gguf_file *f) {
    memset(hp, 0, sizeof *hp);
    char *arch = gguf_get_str_dup(f, "general.architecture");
    if (!arch) return rl_seterr("%s: no general.architecture key (not a model GGUF?)", f->path);
    if (strcmp(arch, "qwen3next") != 0) {
        rl_seterr("%s: architecture '%s' is not supported (Red Lite runs qwen3next models)", f->path, arch);
        free(arch);
        return -1;
    }
    free(arch);
    int inner = 0, block_count = 0;
    for (size_t i = 0; i < sizeof HP_KEYS / sizeof HP_KEYS[0]; i++) {
        const hp_key *k = &HP_KEYS[i];
        char key[96];
        snprintf(key, sizeof key, "qwen3next.%s", k->key);
        int *dst = k->off >= 0 ? (int *)((char *)hp + k->off) : k->off == -1 ? &inner : &block_count;
        uint32_t v;
        if (!gguf_get_u32(f, key, &v)) {
            if (!k->dflt)
                return rl_seterr("%s: missing or invalid metadata key %s (not a qwen3next GGUF?)", f->path, key);
            *dst = k->dflt == -1 ? hp->n_ff_exp : k->dflt == -2 ? 0 : k->dflt;
            continue;
        }
        if ((int64_t)v < k->lo || (int64_t)v > k->hi) {
            rl_seterr("%s: metadata %s = %u is out of range (%d..%d)", f->path, key, v, k->lo, k->hi);
            return -2;
        }
        *dst = (int)v;
    }
    if (!gguf_get_f32(f, "qwen3next.rope.freq_base", &hp->rope_base)) hp->rope_base = 10000000.0f;
    if (!gguf_get_f32(f, "qwen3next.attention.layer_norm_rms_epsilon", &hp->rms_eps)) hp->rms_eps = 1e-6f;
    int rc = 0;
    hp->n_layer = block_count - hp->n_nextn;
    if (!(hp->rope_base > 0 && hp->rope_base < 1e30f))
        rc = rl_seterr("%s: metadata qwen3next.rope.freq_base = %g must be positive and finite", f->path,
                       (double)hp->rope_base);
    else if (!(hp->rms_eps >= 0 && hp->rms_eps < 1.0f))
        rc = rl_seterr("%s: metadata qwen3next.attention.layer_norm_rms_epsilon = %g must be in [0, 1)", f->path,
                       (double)hp->rms_eps);
    else if (hp->n_layer < 1)
        rc = hp_fail(f, "qwen3next.block_count", block_count, "leaves no decoder layer beside the MTP block");
    else if (hp->n_head % hp->n_head_kv)
        rc = hp_fail(f, "qwen3next.attention.head_count", hp->n_head, "is not a multiple of head_count_kv");
    else if (hp->ssm_hv % hp->ssm_hk)
        rc = hp_fail(f, "qwen3next.ssm.time_step_rank", hp->ssm_hv, "is not a multiple of ssm.group_count");
    else if (inner % hp->ssm_hv)
        rc = hp_fail(f, "qwen3next.ssm.inner_size", inner, "is not a multiple of ssm.time_step_rank");
    else if (hp->n_rot > hp->head_dim || hp->n_rot % 2)
        rc = hp_fail(f, "qwen3next.rope.dimension_count", hp->n_rot, "must be even and at most key_length");
    else if (hp->head_dim % 2)
        rc = hp_fail(f, "qwen3next.attention.key_length", hp->head_dim, "must be even (rotary halves)");
    else if (hp->n_expert_used > hp->n_expert)
        rc = hp_fail(f, "qwen3next.expert_used_count", hp->n_expert_used, "exceeds expert_count");
    if (rc) return -2;
    hp->ssm_dv = inner / hp->ssm_hv;
    hp->ssm_conv_dim = 2 * hp->ssm_hk * hp->ssm_dk + inner;
    for (int i = 0; i < block_count; i++) hp->is_attn[i] = q3n_block_is_attn(hp, i);
    /* every matrix's rows must fit the kernels' row buffers (ops.h OPS_MAX_ROW) */
    for (int id = 0; id < Q3N_T_COUNT; id++) {
        const q3n_tensor_desc *d = &TENSORS[id];
        int64_t n_in = q3n_dim_value(hp, d->ne[0]);
        if (d->vec || d->ne[0] == Q3N_DIM_VOCAB || n_in <= OPS_MAX_ROW) continue;
        if (d->kind == Q3N_KIND_MTP && hp->n_nextn == 0) continue;
        rl_seterr("%s: tensor %s would have rows of %lld values, more than the kernels' %d", f->path,
                  d->kind == Q3N_KIND_GLOBAL ? d->name : d->name + strlen("blk.%d."), (long long)n_in, OPS_MAX_ROW);
        return -2;
    }
    return 0;
}

int q3n_read_hparams(gguf_file *f, q3n_hparams *hp) { return load_hparams(hp, f); }

int q3n_check_tokens(const int32_t *tokens, int T, int n_vocab) {
    for (int t = 0; t < T; t++)
        if (tokens[t] < 0 || tokens[t] >= n_vocab)
            return rl_seterr("token id %d is outside the vocabulary (0..%d)", tokens[t], n_vocab - 1);
    return 0;
}

/* ---- tensor binding ------------------------------------------------------------------- */

static const gguf_tensor *find(gguf_file *f, q3n_tensor_id id, int il) {
    char name[128];
    return gguf_find_tensor(f, q3n_tensor_name(id, il, name, sizeof name));
}

/* Bind matrix `id` of block il with the table's shape {n_in, n_out(, n_expert)}. */
static int bind_mat(gguf_file *f, ops_mat *m, q3n_tensor_id id, int il, const q3n_hparams *hp, bool required) {
    const q3n_tensor_desc *d = q3n_tensor(id);
    char name[128];
    q3n_tensor_name(id, il, name, sizeof name);
    const gguf_tensor *t = gguf_find_tensor(f, name);
    memset(m, 0, sizeof *m);
    if (!t) return required ? rl_seterr("%s: missing tensor %s", f->path, name) : 0;
    const quant_traits *qt = quant_get(t->type);
    if (!qt || !qt->to_float)
        return rl_seterr("%s: tensor %s has unsupported type %s (%u)", f->path, name, quant_name(t->type), t->type);
    int64_t n_in = q3n_dim_value(hp, d->ne[0]), n_out = q3n_dim_value(hp, d->ne[1]);
    int64_t want2 = d->ne[2] != Q3N_DIM_NONE ? q3n_dim_value(hp, d->ne[2]) : 1;
    if (t->ne[0] != n_in || t->ne[1] != n_out || t->ne[2] != want2 || t->ne[3] != 1)
        return rl_seterr("%s: tensor %s has shape {%lld,%lld,%lld}, expected {%lld,%lld,%lld}", f->path, name,
                         (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)n_in,
                         (long long)n_out, (long long)want2);
    if (n_in % qt->blck)
        return rl_seterr("%s: tensor %s has rows of %lld values, not a multiple of the %s block (%d)", f->path, name,
                         (long long)n_in, quant_name(t->type), qt->blck);
    m->name = t->name;
    m->type = t->type;
    m->n_in = n_in;
    m->n_out = n_out * want2;
    m->row_bytes = quant_row_size(t->type, n_in);
    m->data = t->data;
    return 0;
}

/* Copy float vector `id` of block il (any float type, any dims whose product is the table's
 * shape) into an owned float array. */
static int bind_vec(gguf_file *f, float **out, q3n_tensor_id id, int il, const q3n_hparams *hp, bool required) {
    const q3n_tensor_desc *d = q3n_tensor(id);
    char name[128];
    q3n_tensor_name(id, il, name, sizeof name);
    const gguf_tensor *t = gguf_find_tensor(f, name);
    *out = NULL;
    if (!t) return required ? rl_seterr("%s: missing tensor %s", f->path, name) : 0;
    int64_t n = 1;
    for (int k = 0; k < 3; k++)
        if (d->ne[k] != Q3N_DIM_NONE) n *= q3n_dim_value(hp, d->ne[k]);
    int64_t total = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    const quant_traits *qt = quant_get(t->type);
    if (total != n || !qt || !qt->to_float || n % qt->blck)
        return rl_seterr("%s: tensor %s has %lld values of type %s, expected %lld floats", f->path, name,
                         (long long)total, quant_name(t->type), (long long)n);
    *out = rl_malloc(sizeof(float) * (size_t)n, name);
    if (!*out) return -1;
    qt->to_float(t->data, *out, n);
    return 0;
}

/* Bind one table entry into its field of base (a q3n_layer or the q3n_model). */
static int bind_entry(gguf_file *f, void *base, q3n_tensor_id id, int il, const q3n_hparams *hp) {
    const q3n_tensor_desc *d = q3n_tensor(id);
    bool required = d->need != Q3N_OPTIONAL;
    void *field = (char *)base + d->field;
    return d->vec ? bind_vec(f, (float **)field, id, il, hp, required)
                  : bind_mat(f, (ops_mat *)field, id, il, hp, required);
}

/* Older GGUFs store the raw HF in_proj_qkvz (per key head g: [q_g | k_g | v of the r value
 * heads | z of the r value heads]); rebuild the split [q all | k all | v all] and z rows. */
static int deinterleave_ssm_in(gguf_file *f, q3n_layer *L, const q3n_hparams *hp, int il) {
    ops_mat in;
    int r = hp->ssm_hv / hp->ssm_hk, dk = hp->ssm_dk, dv = hp->ssm_dv, hk = hp->ssm_hk;
    int64_t group = 2 * dk + 2 * (int64_t)r * dv;
    if (bind_mat(f, &in, Q3N_T_SSM_IN, il, hp, true)) return -1;
    RL_ASSERT(in.n_out == group * hk); /* the table's SSM_IN dimension */
    size_t rb = in.row_bytes;
    uint8_t *buf = rl_malloc(rb * (size_t)(group * hk), "legacy ssm_in");
    if (!buf) return -1;
    uint8_t *qkv = buf, *z = buf + rb * (size_t)hp->ssm_conv_dim;
    for (int g = 0; g < hk; g++) {
        const uint8_t *src = in.data + rb * (size_t)(g * group);
        memcpy(qkv + rb * (size_t)(g * dk), src, rb * dk);                                  /* q_g */
        memcpy(qkv + rb * (size_t)(hk * dk + g * dk), src + rb * dk, rb * dk);              /* k_g */
        memcpy(qkv + rb * (size_t)(2 * hk * dk + g * r * dv), src + rb * 2 * dk, rb * r * dv); /* v */
        memcpy(z + rb * (size_t)(g * r * dv), src + rb * (2 * dk + r * dv), rb * r * dv);   /* z */
    }
    L->owned = buf;
    L->wqkv = (ops_mat){in.name, in.type, hp->n_embd, hp->ssm_conv_dim, rb, qkv};
    L->wgate = (ops_mat){in.name, in.type, hp->n_embd, (int64_t)hp->ssm_hv * dv, rb, z};
    return 0;
}

/* Every table entry of block il's kinds. Two GGUF generations: the DeltaNet projections split
 * (attn_qkv + attn_gate) or fused (ssm_in, de-interleaved here); expert gate and up separate or
 * fused (gate_up_exps). */
static int bind_layer(q3n_model *m, gguf_file *f, int il) {
    const q3n_hparams *hp = &m->hp;
    q3n_layer *L = &m->layers[il];
    L->is_attn = hp->is_attn[il];
    bool legacy = !L->is_attn && !find(f, Q3N_T_SSM_QKV, il) && find(f, Q3N_T_SSM_IN, il);
    L->fused_gate_up = find(f, Q3N_T_GATE_UP_EXPS, il) != NULL;
    for (int i = 0; i < Q3N_T_COUNT; i++) {
        q3n_tensor_id id = (q3n_tensor_id)i;
        const q3n_tensor_desc *d = q3n_tensor(id);
        if (d->kind == Q3N_KIND_GLOBAL || !q3n_kind_in_block(hp, d->kind, il)) continue;
        if (id == Q3N_T_SSM_IN) {
            if (legacy) {
                m->hp.legacy_ssm_in = true;
                if (deinterleave_ssm_in(f, L, hp, il)) return -1;
            }
            continue;
        }
        if (legacy && (id == Q3N_T_SSM_QKV || id == Q3N_T_SSM_GATE)) continue;
        if (id == Q3N_T_GATE_UP_EXPS && !L->fused_gate_up) continue;
        if (L->fused_gate_up && (id == Q3N_T_GATE_EXPS || id == Q3N_T_UP_EXPS)) continue;
        if (bind_entry(f, L, id, il, hp)) return -1;
        if (id == Q3N_T_GATE_UP_EXPS) L->up_exps = L->gate_exps;
    }
    return 0;
}

int q3n_load(q3n_model *m, gguf_file *f) {
    memset(m, 0, sizeof *m);
    m->gguf = f;
    if (load_hparams(&m->hp, f)) return -1;
    if (m->hp.n_layer + m->hp.n_nextn > Q3N_MAX_LAYERS) /* block_count's bound covers it */
        return rl_seterr("%s: %d blocks exceed %d", f->path, m->hp.n_layer + m->hp.n_nextn, Q3N_MAX_LAYERS);
    const gguf_tensor *te = find(f, Q3N_T_TOKEN_EMBD, -1);
    if (!te) return rl_seterr("%s: missing tensor %s", f->path, q3n_tensor(Q3N_T_TOKEN_EMBD)->name);
    if (te->ne[1] < 1 || te->ne[1] > Q3N_MAX_VOCAB)
        return rl_seterr("%s: tensor %s has %lld rows: the vocabulary must have 1..%d tokens", f->path, te->name,
                         (long long)te->ne[1], Q3N_MAX_VOCAB);
    m->hp.n_vocab = (int)te->ne[1];
    if (bind_entry(f, m, Q3N_T_TOKEN_EMBD, -1, &m->hp) || bind_entry(f, m, Q3N_T_OUTPUT_NORM, -1, &m->hp) ||
        bind_entry(f, m, Q3N_T_OUTPUT, -1, &m->hp))
        return -1;
    if (!m->output.data) m->output = m->tok_embd; /* tied fallback */
    for (int il = 0; il < m->hp.n_layer + m->hp.n_nextn; il++)
        if (bind_layer(m, f, il)) return -1;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (q3n_tensor_is_routed(t->name)) m->bytes_experts += t->nbytes;
        else m->bytes_dense += t->nbytes;
    }
    return 0;
}

void q3n_free(q3n_model *m) {
    free(m->output_norm);
    for (int il = 0; il < Q3N_MAX_LAYERS; il++) {
        q3n_layer *L = &m->layers[il];
        float *vecs[] = {L->attn_norm, L->post_norm, L->q_norm,  L->k_norm, L->conv_w,          L->dt_bias, L->ssm_a,
                         L->ssm_norm,  L->sh_gate,   L->enorm,   L->hnorm,  L->shared_head_norm};
        for (size_t i = 0; i < sizeof vecs / sizeof vecs[0]; i++) free(vecs[i]);
        free(L->owned);
    }
    memset(m, 0, sizeof *m);
}
