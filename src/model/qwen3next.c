/* qwen3next.c — the Qwen3-Next family's architecture file: the model description (the table of
 * architectures, the one tensor table, activation names, dimensions), hyperparameters, tensor binding. The
 * CPU reference forward pass is in qwen3next_forward.c. See qwen3next.h for the contract and the shared spec
 * for the op order (§A), tensor names of both GGUF generations (§B) and MTP (§F).
 */
#include "model/qwen3next.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "gguf/quant.h"

/* ---- the model description ---------------------------------------------------------- */

/* The family, one row per architecture (facts and sources: docs/QWEN35.md). */
static const q3n_arch_desc ARCHS[Q3N_ARCH_COUNT] = {
    [Q3N_ARCH_QWEN3NEXT] = {"qwen3next", "Qwen3-Next (MoE)", true, false, false, false},
    [Q3N_ARCH_QWEN35MOE] = {"qwen35moe", "Qwen3.5/3.6 MoE", true, true, true, true},
    [Q3N_ARCH_QWEN35] = {"qwen35", "Qwen3.5/3.6 dense", false, true, true, true},
};

const q3n_arch_desc *q3n_arch_get(q3n_arch a) { return (unsigned)a < Q3N_ARCH_COUNT ? &ARCHS[a] : NULL; }

int q3n_arch_find(const char *name) {
    for (int a = 0; a < Q3N_ARCH_COUNT; a++)
        if (!strcmp(name, ARCHS[a].name)) return a;
    return -1;
}

#define A_NEXT (1u << Q3N_ARCH_QWEN3NEXT)
#define A_35 (1u << Q3N_ARCH_QWEN35MOE | 1u << Q3N_ARCH_QWEN35)

#define LF(f) (int)offsetof(q3n_layer, f)
#define MF(f) (int)offsetof(q3n_model, f)
#define NO Q3N_DIM_NONE
/* The one table of the family's tensor names (contract in qwen3next.h). */
static const q3n_tensor_desc TENSORS[Q3N_T_COUNT] = {
    [Q3N_T_TOKEN_EMBD] = {"token_embd.weight",
                          "token embedding (row lookup)",
                          Q3N_KIND_GLOBAL,
                          {Q3N_DIM_D, Q3N_DIM_VOCAB, NO},
                          Q3N_REQUIRED,
                          false,
                          false,
                          MF(tok_embd)},
    [Q3N_T_ATTN_NORM] = {"blk.%d.attn_norm.weight",
                         "mixer input RMSNorm",
                         Q3N_KIND_BLOCK,
                         {Q3N_DIM_D, NO, NO},
                         Q3N_REQUIRED,
                         true,
                         false,
                         LF(attn_norm)},
    [Q3N_T_ATTN_Q] = {"blk.%d.attn_q.weight",
                      "attention query + output gate",
                      Q3N_KIND_ATTN,
                      {Q3N_DIM_D, Q3N_DIM_Q_GATE, NO},
                      Q3N_REQUIRED,
                      false,
                      false,
                      LF(wq)},
    [Q3N_T_ATTN_K] = {"blk.%d.attn_k.weight",
                      "attention key",
                      Q3N_KIND_ATTN,
                      {Q3N_DIM_D, Q3N_DIM_KV, NO},
                      Q3N_REQUIRED,
                      false,
                      false,
                      LF(wk)},
    [Q3N_T_ATTN_V] = {"blk.%d.attn_v.weight",
                      "attention value",
                      Q3N_KIND_ATTN,
                      {Q3N_DIM_D, Q3N_DIM_KV, NO},
                      Q3N_REQUIRED,
                      false,
                      false,
                      LF(wv)},
    [Q3N_T_ATTN_OUTPUT] = {"blk.%d.attn_output.weight",
                           "attention output",
                           Q3N_KIND_ATTN,
                           {Q3N_DIM_ATT, Q3N_DIM_D, NO},
                           Q3N_REQUIRED,
                           false,
                           false,
                           LF(wo)},
    [Q3N_T_ATTN_Q_NORM] = {"blk.%d.attn_q_norm.weight",
                           "query head RMSNorm",
                           Q3N_KIND_ATTN,
                           {Q3N_DIM_HD, NO, NO},
                           Q3N_REQUIRED,
                           true,
                           false,
                           LF(q_norm)},
    [Q3N_T_ATTN_K_NORM] = {"blk.%d.attn_k_norm.weight",
                           "key head RMSNorm",
                           Q3N_KIND_ATTN,
                           {Q3N_DIM_HD, NO, NO},
                           Q3N_REQUIRED,
                           true,
                           false,
                           LF(k_norm)},
    /* split generation; the older files hold ssm_in instead of these two */
    [Q3N_T_SSM_QKV] = {"blk.%d.attn_qkv.weight",
                       "DeltaNet q|k|v projection",
                       Q3N_KIND_DELTANET,
                       {Q3N_DIM_D, Q3N_DIM_CONV, NO},
                       Q3N_REQUIRED,
                       false,
                       false,
                       LF(wqkv)},
    [Q3N_T_SSM_GATE] = {"blk.%d.attn_gate.weight",
                        "DeltaNet output gate z",
                        Q3N_KIND_DELTANET,
                        {Q3N_DIM_D, Q3N_DIM_INNER, NO},
                        Q3N_REQUIRED,
                        false,
                        false,
                        LF(wgate)},
    [Q3N_T_SSM_IN] = {"blk.%d.ssm_in.weight",
                      "DeltaNet fused qkvz (older GGUFs, de-interleaved at load)",
                      Q3N_KIND_DELTANET,
                      {Q3N_DIM_D, Q3N_DIM_SSM_IN, NO},
                      Q3N_ALTERNATIVE,
                      false,
                      false,
                      -1,
                      A_NEXT},
    [Q3N_T_SSM_BA] = {"blk.%d.ssm_ba.weight",
                      "DeltaNet beta|alpha per key head",
                      Q3N_KIND_DELTANET,
                      {Q3N_DIM_D, Q3N_DIM_2HV, NO},
                      Q3N_REQUIRED,
                      false,
                      false,
                      LF(wba),
                      A_NEXT},
    /* Qwen3.5: beta and alpha as two matrices */
    [Q3N_T_SSM_BETA] = {"blk.%d.ssm_beta.weight",
                        "DeltaNet beta",
                        Q3N_KIND_DELTANET,
                        {Q3N_DIM_D, Q3N_DIM_HV, NO},
                        Q3N_REQUIRED,
                        false,
                        false,
                        LF(wbeta),
                        A_35},
    [Q3N_T_SSM_ALPHA] = {"blk.%d.ssm_alpha.weight",
                         "DeltaNet alpha (decay input)",
                         Q3N_KIND_DELTANET,
                         {Q3N_DIM_D, Q3N_DIM_HV, NO},
                         Q3N_REQUIRED,
                         false,
                         false,
                         LF(walpha),
                         A_35},
    [Q3N_T_SSM_CONV] = {"blk.%d.ssm_conv1d.weight",
                        "DeltaNet causal conv",
                        Q3N_KIND_DELTANET,
                        {Q3N_DIM_KW, Q3N_DIM_CONV, NO},
                        Q3N_REQUIRED,
                        true,
                        false,
                        LF(conv_w)},
    [Q3N_T_SSM_DT] = {"blk.%d.ssm_dt.bias",
                      "DeltaNet dt bias",
                      Q3N_KIND_DELTANET,
                      {Q3N_DIM_HV, NO, NO},
                      Q3N_REQUIRED,
                      true,
                      false,
                      LF(dt_bias)},
    [Q3N_T_SSM_A] = {"blk.%d.ssm_a",
                     "DeltaNet decay -exp(A_log)",
                     Q3N_KIND_DELTANET,
                     {Q3N_DIM_HV, NO, NO},
                     Q3N_REQUIRED,
                     true,
                     false,
                     LF(ssm_a)},
    [Q3N_T_SSM_NORM] = {"blk.%d.ssm_norm.weight",
                        "DeltaNet gated RMSNorm",
                        Q3N_KIND_DELTANET,
                        {Q3N_DIM_DV, NO, NO},
                        Q3N_REQUIRED,
                        true,
                        false,
                        LF(ssm_norm)},
    [Q3N_T_SSM_OUT] = {"blk.%d.ssm_out.weight",
                       "DeltaNet output",
                       Q3N_KIND_DELTANET,
                       {Q3N_DIM_INNER, Q3N_DIM_D, NO},
                       Q3N_REQUIRED,
                       false,
                       false,
                       LF(wout)},
    [Q3N_T_POST_NORM] = {"blk.%d.post_attention_norm.weight",
                         "FFN input RMSNorm",
                         Q3N_KIND_BLOCK,
                         {Q3N_DIM_D, NO, NO},
                         Q3N_REQUIRED,
                         true,
                         false,
                         LF(post_norm)},
    [Q3N_T_ROUTER] = {"blk.%d.ffn_gate_inp.weight",
                      "router",
                      Q3N_KIND_MOE,
                      {Q3N_DIM_D, Q3N_DIM_E, NO},
                      Q3N_REQUIRED,
                      false,
                      false,
                      LF(router)},
    /* separate gate/up slabs, or one fused gate_up slab (gate rows first per expert) */
    [Q3N_T_GATE_EXPS] = {"blk.%d.ffn_gate_exps.weight",
                         "routed experts' gate",
                         Q3N_KIND_MOE,
                         {Q3N_DIM_D, Q3N_DIM_FF, Q3N_DIM_E},
                         Q3N_REQUIRED,
                         false,
                         true,
                         LF(gate_exps)},
    [Q3N_T_UP_EXPS] = {"blk.%d.ffn_up_exps.weight",
                       "routed experts' up",
                       Q3N_KIND_MOE,
                       {Q3N_DIM_D, Q3N_DIM_FF, Q3N_DIM_E},
                       Q3N_REQUIRED,
                       false,
                       true,
                       LF(up_exps)},
    [Q3N_T_GATE_UP_EXPS] = {"blk.%d.ffn_gate_up_exps.weight",
                            "routed experts' fused gate|up",
                            Q3N_KIND_MOE,
                            {Q3N_DIM_D, Q3N_DIM_2FF, Q3N_DIM_E},
                            Q3N_ALTERNATIVE,
                            false,
                            true,
                            LF(gate_exps)},
    [Q3N_T_DOWN_EXPS] = {"blk.%d.ffn_down_exps.weight",
                         "routed experts' down",
                         Q3N_KIND_MOE,
                         {Q3N_DIM_FF, Q3N_DIM_D, Q3N_DIM_E},
                         Q3N_REQUIRED,
                         false,
                         true,
                         LF(down_exps)},
    [Q3N_T_SH_GATE] = {"blk.%d.ffn_gate_inp_shexp.weight",
                       "shared expert's sigmoid gate",
                       Q3N_KIND_MOE,
                       {Q3N_DIM_D, NO, NO},
                       Q3N_OPTIONAL,
                       true,
                       false,
                       LF(sh_gate)},
    [Q3N_T_GATE_SH] = {"blk.%d.ffn_gate_shexp.weight",
                       "shared expert's gate",
                       Q3N_KIND_MOE,
                       {Q3N_DIM_D, Q3N_DIM_FF_SH, NO},
                       Q3N_OPTIONAL,
                       false,
                       false,
                       LF(gate_sh)},
    [Q3N_T_UP_SH] = {"blk.%d.ffn_up_shexp.weight",
                     "shared expert's up",
                     Q3N_KIND_MOE,
                     {Q3N_DIM_D, Q3N_DIM_FF_SH, NO},
                     Q3N_OPTIONAL,
                     false,
                     false,
                     LF(up_sh)},
    [Q3N_T_DOWN_SH] = {"blk.%d.ffn_down_shexp.weight",
                       "shared expert's down",
                       Q3N_KIND_MOE,
                       {Q3N_DIM_FF_SH, Q3N_DIM_D, NO},
                       Q3N_OPTIONAL,
                       false,
                       false,
                       LF(down_sh)},
    /* dense architectures: one SwiGLU FFN per block */
    [Q3N_T_FFN_GATE] = {"blk.%d.ffn_gate.weight",
                        "FFN gate",
                        Q3N_KIND_FFN,
                        {Q3N_DIM_D, Q3N_DIM_N_FF, NO},
                        Q3N_REQUIRED,
                        false,
                        false,
                        LF(ffn_gate)},
    [Q3N_T_FFN_UP] = {"blk.%d.ffn_up.weight",
                      "FFN up",
                      Q3N_KIND_FFN,
                      {Q3N_DIM_D, Q3N_DIM_N_FF, NO},
                      Q3N_REQUIRED,
                      false,
                      false,
                      LF(ffn_up)},
    [Q3N_T_FFN_DOWN] = {"blk.%d.ffn_down.weight",
                        "FFN down",
                        Q3N_KIND_FFN,
                        {Q3N_DIM_N_FF, Q3N_DIM_D, NO},
                        Q3N_REQUIRED,
                        false,
                        false,
                        LF(ffn_down)},
    /* MTP head, llama.cpp converter names (spec §F.3) */
    [Q3N_T_EH_PROJ] = {"blk.%d.nextn.eh_proj.weight",
                       "MTP [embedding ; hidden] projection",
                       Q3N_KIND_MTP,
                       {Q3N_DIM_2D, Q3N_DIM_D, NO},
                       Q3N_REQUIRED,
                       false,
                       false,
                       LF(eh_proj)},
    [Q3N_T_ENORM] = {"blk.%d.nextn.enorm.weight",
                     "MTP embedding RMSNorm",
                     Q3N_KIND_MTP,
                     {Q3N_DIM_D, NO, NO},
                     Q3N_REQUIRED,
                     true,
                     false,
                     LF(enorm)},
    [Q3N_T_HNORM] = {"blk.%d.nextn.hnorm.weight",
                     "MTP hidden RMSNorm",
                     Q3N_KIND_MTP,
                     {Q3N_DIM_D, NO, NO},
                     Q3N_REQUIRED,
                     true,
                     false,
                     LF(hnorm)},
    [Q3N_T_SHARED_HEAD_NORM] = {"blk.%d.nextn.shared_head_norm.weight",
                                "MTP output RMSNorm (absent: output_norm)",
                                Q3N_KIND_MTP,
                                {Q3N_DIM_D, NO, NO},
                                Q3N_OPTIONAL,
                                true,
                                false,
                                LF(shared_head_norm)},
    [Q3N_T_OUTPUT_NORM] = {"output_norm.weight",
                           "final RMSNorm",
                           Q3N_KIND_GLOBAL,
                           {Q3N_DIM_D, NO, NO},
                           Q3N_REQUIRED,
                           true,
                           false,
                           MF(output_norm)},
    [Q3N_T_OUTPUT] = {"output.weight",
                      "output head (absent: tied to token_embd)",
                      Q3N_KIND_GLOBAL,
                      {Q3N_DIM_D, Q3N_DIM_VOCAB, NO},
                      Q3N_OPTIONAL,
                      false,
                      false,
                      MF(output)},
};
#undef NO

static const char *const ACTS[Q3N_ACT_COUNT] = {
    [Q3N_ACT_INP_EMBD] = "inp_embd", [Q3N_ACT_ATTN_NORM] = "attn_norm",    [Q3N_ACT_DN_CONV] = "dn_conv",
    [Q3N_ACT_DN_GATED] = "dn_gated", [Q3N_ACT_ATTN_GATED] = "attn_gated",  [Q3N_ACT_ATTN_OUT] = "attn_out",
    [Q3N_ACT_FFN_INP] = "ffn_inp",   [Q3N_ACT_FFN_NORM] = "ffn_norm",      [Q3N_ACT_FFN_OUT] = "ffn_out",
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
    case Q3N_DIM_N_FF: return hp->n_ff;
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
    case Q3N_KIND_BLOCK: return true;
    case Q3N_KIND_MOE: return hp->moe;
    case Q3N_KIND_FFN: return !hp->moe;
    case Q3N_KIND_DELTANET: return !q3n_block_is_attn(hp, il);
    case Q3N_KIND_ATTN: return q3n_block_is_attn(hp, il);
    case Q3N_KIND_MTP: return il >= hp->n_layer;
    default: return false;
    }
}

bool q3n_tensor_in_block(const q3n_hparams *hp, q3n_tensor_id id, int il) {
    const q3n_tensor_desc *d = &TENSORS[id];
    return (!d->archs || d->archs & 1u << hp->arch) && q3n_kind_in_block(hp, d->kind, il);
}

/* ---- hyperparameters ------------------------------------------------------------------ */

/* File-derived limits. Every value that sizes a buffer, a loop or a kernel's work comes from the
 * file, so each is checked here, once, when the model is opened: a value out of range is refused
 * with one line naming the file, the key and the value (never an assert later). The bounds are the
 * code's real limits (named where they come from), far above Qwen3-Next's own values (in the
 * comments). */
typedef struct {
    const char *key; /* after "<arch>." */
    int off;         /* offset of the int in q3n_hparams; -1: read into *extra */
    int dflt;        /* 0: required */
    int lo, hi;
    int only; /* 0: every architecture; HP_MOE / HP_DENSE: only those (absent elsewhere) */
} hp_key;

enum { HP_ALL, HP_MOE, HP_DENSE };
#define HO(f) (int)offsetof(q3n_hparams, f)
static const hp_key HP_KEYS[] = {
    {"embedding_length", HO(n_embd), 0, 1, OPS_MAX_ROW / 2, HP_ALL},         /* 2048; MTP eh_proj reads 2D */
    {"attention.head_count", HO(n_head), 0, 1, 1024, HP_ALL},                /* 16 */
    {"attention.head_count_kv", HO(n_head_kv), 0, 1, 1024, HP_ALL},          /* 2 */
    {"attention.key_length", HO(head_dim), 0, 2, Q3N_MAX_HEAD_DIM, HP_ALL},  /* 256 */
    {"rope.dimension_count", HO(n_rot), 0, 2, Q3N_MAX_HEAD_DIM, HP_ALL},     /* 64 */
    {"expert_count", HO(n_expert), 0, 1, Q3N_MAX_EXPERTS, HP_MOE},           /* 512 (qwen35moe: 256) */
    {"expert_used_count", HO(n_expert_used), 0, 1, Q3N_MAX_EXPERTS, HP_MOE}, /* 10 (qwen35moe: 8) */
    {"expert_feed_forward_length", HO(n_ff_exp), 0, 1, OPS_MAX_ROW, HP_MOE}, /* 512 */
    {"expert_shared_feed_forward_length", HO(n_ff_shexp), -1, 1, OPS_MAX_ROW,
     HP_MOE},                                                       /* 512; default n_ff_exp */
    {"feed_forward_length", HO(n_ff), 0, 1, OPS_MAX_ROW, HP_DENSE}, /* dense qwen35: 12288 (9B) */
    {"ssm.conv_kernel", HO(ssm_kw), 0, 2, 64, HP_ALL},              /* 4 */
    {"ssm.state_size", HO(ssm_dk), 0, 1, Q3N_MAX_HEAD_DIM, HP_ALL}, /* 128 */
    {"ssm.group_count", HO(ssm_hk), 0, 1, 1024, HP_ALL},            /* 16 */
    {"ssm.time_step_rank", HO(ssm_hv), 0, 1, 1024, HP_ALL},         /* 32 */
    {"ssm.inner_size", -1, 0, 1, OPS_MAX_ROW, HP_ALL},              /* 4096 */
    {"full_attention_interval", HO(full_attn_interval), 4, 1, Q3N_MAX_LAYERS, HP_ALL}, /* 4 */
    {"nextn_predict_layers", HO(n_nextn), -2, 0, 1, HP_ALL},         /* 0 or 1 (-2: default 0) */
    {"context_length", HO(n_ctx_train), 262144, 1, 1 << 30, HP_ALL}, /* 262144 */
    {"block_count", -2, 0, 1, Q3N_MAX_LAYERS, HP_ALL},               /* 48 (+1 with MTP) */
};
#undef HO

/* what: the full key, or (with pfx) the key after "<arch>." */
static int hp_failp(gguf_file *f, const char *pfx, const char *what, long long v, const char *why) {
    return pfx ? rl_seterr("%s: %s.%s = %lld %s", f->path, pfx, what, v, why)
               : rl_seterr("%s: %s = %lld %s", f->path, what, v, why);
}
#define hp_fail(f, what, v, why) hp_failp(f, NULL, what, v, why)

/* The architecture of f: its row of the family, or -1 with one line saying why the file is not a
 * model this runtime runs (a vision projector, another architecture). */
static int read_arch(gguf_file *f) {
    char *arch = gguf_get_str_dup(f, "general.architecture");
    if (!arch) return rl_seterr("%s: no general.architecture key (not a model GGUF?)", f->path);
    int a = q3n_arch_find(arch);
    if (!strcmp(arch, "clip"))
        rl_seterr("%s: this is a vision projector (mmproj, architecture 'clip'): Red Lite runs text only; "
                  "pass the language model's GGUF instead",
                  f->path);
    else if (a < 0)
        rl_seterr(
            "%s: architecture '%s' is not supported (Red Lite runs qwen3next, qwen35moe and qwen35 models)",
            f->path, arch);
    free(arch);
    if (a < 0) return -1;
    /* a text model file never holds a vision tower (llama.cpp's converter writes it to an mmproj file) */
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const char *n = f->tensors[i].name;
        if (!strncmp(n, "v.", 2) || !strncmp(n, "mm.", 3))
            return rl_seterr(
                "%s: tensor %s belongs to a vision tower: Red Lite runs text only (use a text-only "
                "GGUF of this model)",
                f->path, n);
    }
    return a;
}

/* rope.dimension_sections (multi-section RoPE of qwen35*): four counts of rotary pairs. For text the
 * t/h/w streams all carry the token position, so sections 0..2 give the plain partial RoPE whatever
 * their split; a fourth section would take llama.cpp's extra position stream, which text does not
 * define, so it must be 0 (docs/QWEN35.md). */
static int read_rope_sections(gguf_file *f, const char *prefix, q3n_hparams *hp) {
    char key[96];
    snprintf(key, sizeof key, "%s.rope.dimension_sections", prefix);
    const gguf_value *a = gguf_get_arr(f, key);
    if (!a) return rl_seterr("%s: missing metadata key %s (required for %s files)", f->path, key, prefix);
    if (a->v.arr.n < 3 || a->v.arr.n > 4 || a->v.arr.elem == GGUF_TYPE_STRING ||
        a->v.arr.elem == GGUF_TYPE_ARRAY)
        return rl_seterr("%s: metadata %s must be an array of 3 or 4 integers", f->path, key);
    int64_t sum = 0;
    for (uint64_t i = 0; i < a->v.arr.n; i++) {
        int64_t v = gguf_arr_i64(a, i);
        if (v < 0 || v > Q3N_MAX_HEAD_DIM) return hp_fail(f, key, v, "is not a section size (0..head dim)");
        hp->rope_sections[i] = (int)v;
        sum += v;
    }
    if (hp->rope_sections[3])
        return hp_fail(f, key, hp->rope_sections[3],
                       "in its 4th section: a position stream text does not define (only 0 is supported)");
    if (sum > hp->n_rot / 2)
        return hp_fail(f, key, sum, "in all: more rotary pairs than rope.dimension_count / 2");
    return 0;
}

/* attention.recurrent_layers, when the file has it, must say what full_attention_interval says (the
 * layer pattern this runtime derives everywhere from the interval). */
static int check_recurrent_layers(gguf_file *f, const char *prefix, const q3n_hparams *hp) {
    char key[96];
    snprintf(key, sizeof key, "%s.attention.recurrent_layers", prefix);
    const gguf_value *a = gguf_get_arr(f, key);
    if (!a) return 0;
    int nb = hp->n_layer + hp->n_nextn;
    if (a->v.arr.elem == GGUF_TYPE_STRING || a->v.arr.elem == GGUF_TYPE_ARRAY || a->v.arr.n != (uint64_t)nb)
        return rl_seterr("%s: metadata %s must hold one flag per block (%d)", f->path, key, nb);
    for (int i = 0; i < nb; i++)
        if ((gguf_arr_i64(a, (uint64_t)i) != 0) == q3n_block_is_attn(hp, i))
            return rl_seterr("%s: metadata %s marks block %d %s, but full_attention_interval %d makes it %s; "
                             "layer patterns other than every interval-th block are not supported",
                             f->path, key, i, gguf_arr_i64(a, (uint64_t)i) ? "recurrent" : "attention",
                             hp->full_attn_interval, q3n_block_is_attn(hp, i) ? "attention" : "recurrent");
    return 0;
}

/* Reads and checks the hyperparameters; returns 0, -1 (missing keys: not a model of the family) or -2
 * (a value out of range or inconsistent), with rl_lasterr set. */
static int load_hparams(q3n_hparams *hp, gguf_file *f) {
    memset(hp, 0, sizeof *hp);
    int arch = read_arch(f);
    if (arch < 0) return -1;
    const q3n_arch_desc *ad = &ARCHS[arch];
    const char *pfx = ad->name;
    hp->arch = (q3n_arch)arch;
    hp->moe = ad->moe, hp->ba_split = ad->ba_split, hp->v_tiled = ad->v_tiled;
    int inner = 0, block_count = 0;
    for (size_t i = 0; i < sizeof HP_KEYS / sizeof HP_KEYS[0]; i++) {
        const hp_key *k = &HP_KEYS[i];
        if ((k->only == HP_MOE && !ad->moe) || (k->only == HP_DENSE && ad->moe)) continue;
        char key[96];
        snprintf(key, sizeof key, "%s.%s", pfx, k->key);
        int *dst = k->off >= 0 ? (int *)((char *)hp + k->off) : k->off == -1 ? &inner : &block_count;
        uint32_t v;
        if (!gguf_get_u32(f, key, &v)) {
            if (!k->dflt)
                return rl_seterr("%s: missing or invalid metadata key %s (not a %s GGUF?)", f->path, key,
                                 pfx);
            *dst = k->dflt == -1 ? hp->n_ff_exp : k->dflt == -2 ? 0 : k->dflt;
            continue;
        }
        if ((int64_t)v < k->lo || (int64_t)v > k->hi) {
            rl_seterr("%s: metadata %s = %u is out of range (%d..%d)", f->path, key, v, k->lo, k->hi);
            return -2;
        }
        *dst = (int)v;
    }
    char key[96];
    snprintf(key, sizeof key, "%s.rope.freq_base", pfx);
    if (!gguf_get_f32(f, key, &hp->rope_base)) hp->rope_base = 10000000.0f;
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", pfx);
    if (!gguf_get_f32(f, key, &hp->rms_eps)) hp->rms_eps = 1e-6f;
    int rc = 0;
    hp->n_layer = block_count - hp->n_nextn;
    if (!(hp->rope_base > 0 && hp->rope_base < 1e30f))
        rc = rl_seterr("%s: metadata %s.rope.freq_base = %g must be positive and finite", f->path, pfx,
                       (double)hp->rope_base);
    else if (!(hp->rms_eps >= 0 && hp->rms_eps < 1.0f))
        rc = rl_seterr("%s: metadata %s.attention.layer_norm_rms_epsilon = %g must be in [0, 1)", f->path,
                       pfx, (double)hp->rms_eps);
    else if (hp->n_layer < 1)
        rc = hp_failp(f, pfx, "block_count", block_count, "leaves no decoder layer beside the MTP block");
    else if (hp->n_head % hp->n_head_kv)
        rc = hp_failp(f, pfx, "attention.head_count", hp->n_head, "is not a multiple of head_count_kv");
    else if (hp->ssm_hv % hp->ssm_hk)
        rc = hp_failp(f, pfx, "ssm.time_step_rank", hp->ssm_hv, "is not a multiple of ssm.group_count");
    else if (inner % hp->ssm_hv)
        rc = hp_failp(f, pfx, "ssm.inner_size", inner, "is not a multiple of ssm.time_step_rank");
    else if (hp->n_rot > hp->head_dim || hp->n_rot % 2)
        rc = hp_failp(f, pfx, "rope.dimension_count", hp->n_rot, "must be even and at most key_length");
    else if (hp->head_dim % 2)
        rc = hp_failp(f, pfx, "attention.key_length", hp->head_dim, "must be even (rotary halves)");
    else if (hp->n_expert_used > hp->n_expert)
        rc = hp_failp(f, pfx, "expert_used_count", hp->n_expert_used, "exceeds expert_count");
    else if (ad->rope_sections && read_rope_sections(f, pfx, hp)) rc = -1;
    else if (check_recurrent_layers(f, pfx, hp)) rc = -1;
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
                  d->kind == Q3N_KIND_GLOBAL ? d->name : d->name + strlen("blk.%d."), (long long)n_in,
                  OPS_MAX_ROW);
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
static int bind_mat(gguf_file *f, ops_mat *m, q3n_tensor_id id, int il, const q3n_hparams *hp,
                    bool required) {
    const q3n_tensor_desc *d = q3n_tensor(id);
    char name[128];
    q3n_tensor_name(id, il, name, sizeof name);
    const gguf_tensor *t = gguf_find_tensor(f, name);
    memset(m, 0, sizeof *m);
    if (!t) return required ? rl_seterr("%s: missing tensor %s", f->path, name) : 0;
    const quant_traits *qt = quant_get(t->type);
    if (!qt || !qt->to_float)
        return rl_seterr("%s: tensor %s has unsupported type %s (%u)", f->path, name, quant_name(t->type),
                         t->type);
    int64_t n_in = q3n_dim_value(hp, d->ne[0]), n_out = q3n_dim_value(hp, d->ne[1]);
    int64_t want2 = d->ne[2] != Q3N_DIM_NONE ? q3n_dim_value(hp, d->ne[2]) : 1;
    if (t->ne[0] != n_in || t->ne[1] != n_out || t->ne[2] != want2 || t->ne[3] != 1)
        return rl_seterr("%s: tensor %s has shape {%lld,%lld,%lld}, expected {%lld,%lld,%lld}", f->path, name,
                         (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)n_in,
                         (long long)n_out, (long long)want2);
    if (n_in % qt->blck)
        return rl_seterr("%s: tensor %s has rows of %lld values, not a multiple of the %s block (%d)",
                         f->path, name, (long long)n_in, quant_name(t->type), qt->blck);
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
static int bind_vec(gguf_file *f, float **out, q3n_tensor_id id, int il, const q3n_hparams *hp,
                    bool required) {
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
        memcpy(qkv + rb * (size_t)(g * dk), src, rb * dk);                                     /* q_g */
        memcpy(qkv + rb * (size_t)(hk * dk + g * dk), src + rb * dk, rb * dk);                 /* k_g */
        memcpy(qkv + rb * (size_t)(2 * hk * dk + g * r * dv), src + rb * 2 * dk, rb * r * dv); /* v */
        memcpy(z + rb * (size_t)(g * r * dv), src + rb * (2 * dk + r * dv), rb * r * dv);      /* z */
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
    bool legacy =
        q3n_tensor_in_block(hp, Q3N_T_SSM_IN, il) && !find(f, Q3N_T_SSM_QKV, il) && find(f, Q3N_T_SSM_IN, il);
    L->fused_gate_up = find(f, Q3N_T_GATE_UP_EXPS, il) != NULL;
    for (int i = 0; i < Q3N_T_COUNT; i++) {
        q3n_tensor_id id = (q3n_tensor_id)i;
        const q3n_tensor_desc *d = q3n_tensor(id);
        if (d->kind == Q3N_KIND_GLOBAL || !q3n_tensor_in_block(hp, id, il)) continue;
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
    if (il < hp->n_layer) return 0;
    /* the MTP block: its own embedding / output head (llama.cpp's optional nextn.embed_tokens and
     * nextn.shared_head_head) would replace the shared ones, which this runtime always uses */
    static const char *const own[] = {"blk.%d.nextn.embed_tokens.weight",
                                      "blk.%d.nextn.shared_head_head.weight"};
    for (int i = 0; i < 2; i++) {
        char name[128];
        snprintf(name, sizeof name, own[i], il);
        if (gguf_find_tensor(f, name))
            return rl_seterr("%s: the MTP block has its own %s, which Red Lite does not support (convert the "
                             "model without it, or drop the MTP block)",
                             f->path, name);
    }
    if (!L->shared_head_norm) { /* absent: the model's output_norm (as llama.cpp does) */
        L->shared_head_norm = rl_malloc(sizeof(float) * (size_t)hp->n_embd, "MTP output norm");
        if (!L->shared_head_norm) return -1;
        memcpy(L->shared_head_norm, m->output_norm, sizeof(float) * (size_t)hp->n_embd);
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
        return rl_seterr("%s: tensor %s has %lld rows: the vocabulary must have 1..%d tokens", f->path,
                         te->name, (long long)te->ne[1], Q3N_MAX_VOCAB);
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
        float *vecs[] = {L->attn_norm, L->post_norm, L->q_norm,  L->k_norm, L->conv_w, L->dt_bias,
                         L->ssm_a,     L->ssm_norm,  L->sh_gate, L->enorm,  L->hnorm,  L->shared_head_norm};
        for (size_t i = 0; i < sizeof vecs / sizeof vecs[0]; i++) free(vecs[i]);
        free(L->owned);
    }
    memset(m, 0, sizeof *m);
}
