/* synth.h — full-size synthetic Qwen3-Next GGUF files (`redlite synth`).
 *
 * A synthetic model has the real geometry (80B-A3B: hidden 2048, 48 layers, 512 experts top-10,
 * ...) and the per-tensor quantisation types of a named preset, filled with random but valid
 * blocks whose dequantised values have the spread of a trained layer (std ~ 0.02*sqrt(2048/n_in)),
 * so the engine produces finite logits and non-degenerate routing. It exists to benchmark and
 * test at full size without downloading 19 GB, and to run scaling studies (--geometry).
 *
 * Presets (type tables are in synth.c, `redlite synth --list` prints them):
 *   cf2       the Red Lite CF2 recipe: dense Q4_K (attn_k/attn_v/ffn_down_shexp Q6_K, ssm_ba Q8_0),
 *             routed experts IQ2_XS on the last n_layer/6 layers (40..47) and IQ1_M elsewhere,
 *             Q2_K token_embd, Q5_K output, F32 routers and vectors;
 *   iq2_xxs   llama.cpp's stock IQ2_XXS mix for this model (spec §D.4);
 *   q4_k_m    llama.cpp's stock Q4_K_M mix (Q6_K on output, some attn_v and ffn_down*; F16 routers);
 *   tiny      the cf2 types on a small geometry for CI (hidden 256, 4 layers, 16 experts top-4);
 *   35b-a3b-*, 122b-a10b-*, 397b-a17b-*   Qwen3.5 MoE geometries (arch qwen35moe, vocabulary
 *             248,320) in three mixes each: q4_k_m, ud-iq2_xxs, ud-iq3_xxs (MXFP4 experts:
 *             --expert-type MXFP4 on any of them).
 *
 * Determinism: the bytes depend only on (preset, geometry, seed, vocabulary): every tensor byte
 * is a function of its absolute position, so chunking and thread count never change the file.
 * Generation: one small template of valid blocks per (type, std), then per block the quant-index
 * bytes are XORed with counter-based random bits (scale fields untouched, so they stay valid).
 */
#ifndef RL_SYNTH_H
#define RL_SYNTH_H

#include <stdbool.h>
#include <stdint.h>

typedef enum {
    SYNTH_CF2,
    SYNTH_IQ2_XXS,
    SYNTH_Q4_K_M,
    SYNTH_TINY,
    /* Qwen3.5 MoE (qwen35moe) geometries x the mixes users download (synth.c says where every
     * size comes from): llama.cpp's Q4_K_M, and Unsloth-Dynamic-style IQ2_XXS / IQ3_XXS mixes
     * (low-bit routed experts, attention / DeltaNet / shared expert kept at 4-8 bits) */
    SYNTH_35B_Q4_K_M,
    SYNTH_35B_UD_IQ2,
    SYNTH_35B_UD_IQ3,
    SYNTH_122B_Q4_K_M,
    SYNTH_122B_UD_IQ2,
    SYNTH_122B_UD_IQ3,
    SYNTH_397B_Q4_K_M,
    SYNTH_397B_UD_IQ2,
    SYNTH_397B_UD_IQ3,
    SYNTH_N_PRESETS
} synth_preset;

/* Geometry; field names follow q3n_hparams. Keys for synth_geom_parse in brackets. */
typedef struct {
    int n_embd;        /* [hidden] 2048 */
    int n_layer;       /* [layers] 48 main decoder layers (MTP layer extra) */
    int n_vocab;       /* [vocab] 151936; replaced by the vocabulary file's size if one is given */
    int n_ctx;         /* [ctx] 262144 (context_length metadata) */
    int n_ff;          /* [ff] 5120 (feed_forward_length, unused by the model) */
    int n_head;        /* [heads] 16 */
    int n_head_kv;     /* [kv_heads] 2 */
    int head_dim;      /* [head_dim] 256 */
    int n_rot;         /* [rope_dims] 64 */
    float rope_base;   /* [rope_base] 1e7 (Qwen3-Coder-Next: 5e6) */
    float rms_eps;     /* [eps] 1e-6 */
    int n_expert;      /* [experts] 512 */
    int n_expert_used; /* [top_k] 10 */
    int n_ff_exp;      /* [expert_ff] 512 */
    int n_ff_shexp;    /* [shared_ff] 512 */
    int ssm_kw;        /* [conv] 4 */
    int ssm_dk;        /* [state] 128 (key head dim) */
    int ssm_hk;        /* [groups] 16 (key heads) */
    int ssm_hv;        /* [dt_rank] 32 (value heads) */
    int ssm_inner;     /* [inner] 4096 (value heads x value head dim) */
    int attn_interval; /* [interval] 4: layer i is full attention iff (i+1) % interval == 0 */
    int n_precise;     /* [precise] cf2/tiny: the last n_precise layers get IQ2_XS experts (8);
                          follows layers (n_layer/6, at least 1) unless given */
    int arch;          /* [arch] q3n_arch: qwen3next (default), qwen35moe, or qwen35 (dense: the
                          FFN is n_ff wide; the expert fields are unused) */
} synth_geom;

/* Routing model of the router weights (ffn_gate_inp), see docs/EXPERT_CACHE.md "Synthetic routing".
 * uniform     every router element i.i.d. normal (the original bytes): near-uniform routing;
 * calibrated  each expert's router row scaled by a lognormal popularity exp(beta*g - beta^2),
 *             beta = SYNTH_BETA_CALIBRATED, tuned so per-layer LRU-64/128 hit rates land near the
 *             published 67 % / 81 % of a 512-expert top-10 model (hits from static popularity:
 *             a random model's hidden states carry no temporal locality to exploit);
 * skewed      the same with beta = SYNTH_BETA_SKEWED: a small hot set (like the other generator). */
typedef enum {
    SYNTH_ROUTING_UNIFORM,
    SYNTH_ROUTING_CALIBRATED,
    SYNTH_ROUTING_SKEWED,
    SYNTH_N_ROUTING
} synth_routing;
#define SYNTH_BETA_CALIBRATED 0.65f
#define SYNTH_BETA_SKEWED 1.5f

typedef struct {
    synth_preset preset;
    synth_geom g;
    uint64_t seed;
    bool mtp;               /* append the MTP block (blk.<n_layer>.*, nextn_predict_layers = 1) */
    const char *vocab_path; /* tokenizer.* keys copied from this GGUF; NULL = synthetic byte vocab */
    int n_threads;          /* generator threads; 0 = all CPUs */
    bool progress;          /* progress bar on stderr */
    synth_routing routing;  /* router weights' routing model (default uniform: unchanged bytes) */
    uint32_t
        expert_type; /* routed experts' ggml type instead of the preset's (e.g. QT_MXFP4); 0: the preset's */
} synth_params;

/* One tensor of the plan, in file order. */
typedef struct {
    char name[96];
    uint32_t type; /* ggml type id */
    uint32_t n_dims;
    int64_t ne[4];
    uint64_t nbytes;
} synth_tensor_info;

typedef struct {
    uint64_t file_bytes; /* size of the written file */
    int n_tensors;
    double seconds; /* wall time of the whole write */
} synth_stats;

/* "cf2" etc. -> preset; -1 with the error set if unknown. */
int synth_preset_find(const char *name, synth_preset *out);
const char *synth_preset_name(synth_preset p);
/* "uniform" | "calibrated" | "skewed" -> routing; -1 with the error set if unknown. */
int synth_routing_find(const char *name, synth_routing *out);
const char *synth_routing_name(synth_routing r);
/* The preset's default geometry. */
void synth_geom_default(synth_preset p, synth_geom *g);
/* Apply "key=val,key=val" overrides (keys above). 0, or -1 with the error set. */
int synth_geom_parse(synth_geom *g, const char *spec);
/* Consistency checks (head/group divisibility, block-size multiples for the preset's types). */
int synth_geom_check(const synth_params *p);
/* Set p->g.n_vocab from p->vocab_path's tokenizer.ggml.tokens (no-op without a path). */
int synth_resolve_vocab(synth_params *p);

/* The tensor list with types and shapes (malloc'd; *n set), or NULL with the error set. */
synth_tensor_info *synth_plan(const synth_params *p, int *n);
/* Write the model to path (removed again on failure). 0, or -1 with the error set. */
int synth_write(const synth_params *p, const char *path, synth_stats *st);

#endif
