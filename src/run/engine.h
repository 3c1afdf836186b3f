/* engine.h — the public inference API that the CLI and the server build on.
 *
 * An `engine` is an opened model (weights, read-only, shareable); an `engine_ctx` is one
 * sequence: its state (KV cache of the full-attention layers, conv + recurrent state of the
 * DeltaNet layers, position) and scratch. All calls on one context come from one thread at a
 * time. Different contexts of one engine may be driven from different threads (the server's
 * slots): the engine runs their backend work one turn at a time, first come first served (a
 * prompt chunk, a verify, a snapshot), and the decode steps that wait together run as the rows
 * of one forward (engine_step) — each row computed as a single step would be, so a context's
 * results never depend on what runs beside it.
 *
 * Exactness contract: evaluating tokens one at a time (engine_step), as a prompt
 * (engine_prefill) or as a multi-row verify (engine_verify) gives bit-identical logits for
 * each row, because every row's arithmetic is the same whatever the batch.
 *
 * Snapshots hold the recurrent state and the position; the KV cache is append-only and is
 * not copied, so a snapshot stays valid as long as the tokens before its position are not
 * rewritten (true for rewinding speculative drafts and for prefix reuse).
 */
#ifndef RL_ENGINE_H
#define RL_ENGINE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "gguf/gguf.h"
#include "backend/backend.h"
#include "model/qwen3next.h"
#include "run/tuning.h"

typedef struct engine engine;
typedef struct engine_ctx engine_ctx;
typedef struct engine_snapshot engine_snapshot;

typedef struct {
    int n_threads;           /* 0 = all online CPUs */
    const char *backend;     /* "cpu", "cuda" or "auto" (NULL = "cpu") */
    bool reference;          /* CPU: double-precision reference arithmetic (the oracle) instead
                                of the fast SIMD kernels with quantised activations */
    bool iq_repack;          /* CPU: routed IQ2_XXS/IQ2_XS/IQ1_M experts repacked at load into a lookup-free
                                layout in memory (src/cache/expert_repack.h; same results, 1.9-2.5x their bytes) */
    bool map_weights;        /* CPU: serve every matrix from the file mapping; by default the dense ones are
                                copied into huge-page memory at open (src/backend/resident.h: same results, faster
                                streaming) and the experts too where every expert stays resident
                                (engine_copy_experts) */
    const rl_tuning *tuning; /* the tuning switches (tuning.h, docs/TUNING.md); NULL: tuning_from_env() */
} engine_params;

/* The tuning switches the engine was opened with (engine_params.tuning or the environment's). */
const rl_tuning *engine_tuning(const engine *e);
/* What the engine's CPU kernels run: "scalar", "avx2", "avx512" or "avx512 + AMX tiles" (its own
 * kernel configuration, from engine_params.tuning). */
const char *engine_cpu_kernels(const engine *e);
/* The level alone: "scalar", "avx2" or "avx512". */
const char *engine_cpu_level(const engine *e);
/* The CPU features this process detected (what the run-time dispatch picks from, not what the
 * build compiled in), without opening an engine (`redlite version`). best: the level the kernels
 * run at by default, "scalar", "avx2" or "avx512". */
typedef struct {
    bool avx2, avx512, amx;
    const char *best;
} engine_cpu_info;
engine_cpu_info engine_cpu_features(void);
/* The CPU products' profile of this engine (ops.h ops_prof_*; bench --profile): between begin and
 * end, its products and pool jobs are timed; print writes the table, times per `per`. */
void engine_prof_begin(engine *e);
void engine_prof_end(engine *e);
void engine_prof_print(const engine *e, FILE *f, const char *title, double per);
/* The shadow check of this engine's fast products (ops.h; dump --check-fast). */
void engine_fast_check(engine *e, bool on);
void engine_fast_check_report(const engine *e, long *checked, long *bad, double *worst);

/* Open a model. NULL on failure with rl_lasterr() set (one line naming the file). */
engine *engine_open(const char *path, const engine_params *p);
void engine_close(engine *e);
const q3n_hparams *engine_hparams(const engine *e);
const q3n_model *engine_model(const engine *e);
gguf_file *engine_gguf(const engine *e);
/* Name of the backend in use ("cpu", "cuda"). */
const char *engine_backend_name(const engine *e);
/* The --iq-repack summary line (expert_repack_describe) into buf, or false when the experts were
 * not repacked. */
bool engine_repack_describe(const engine *e, char *buf, size_t n);
/* The routed experts copied into huge-page memory (resident.h), for a caller that keeps every
 * expert resident (the session, when the expert plan is full residency): 0 (also when already
 * done), or -1 with rl_lasterr saying why they stay in the mapping (not the CPU backend,
 * map_weights, --iq-repack, out of memory, a read error; the model is then unchanged). Call it
 * before any context of the engine runs a forward pass. */
int engine_copy_experts(engine *e, bool progress);
/* The experts stay in the file mapping by the plan's choice (ec_plan.mapped): the weights line
 * says why (no-op when they were copied already, e.g. by an earlier session of the model). */
void engine_note_experts_mapped(engine *e, const char *why);
/* The weight copies as lines (resident_describe; "dense weights: in the file mapping (why)" when
 * there is none) into buf, or false on a backend other than the CPU's. */
bool engine_weights_describe(const engine *e, char *buf, size_t n);
/* Those lines on f, each after `prefix` (nothing on other backends). */
void engine_weights_print(const engine *e, FILE *f, const char *prefix);

/* The KV cache format a context gets when engine_ctx_params.kv is NULL: f16 on the fast paths
 * (CPU SIMD, CUDA), f32 under engine_params.reference (the oracle stays f32). The numbers behind
 * the choice: docs/ENGINE.md, "KV cache format", and bench/results/2026-12-01-kv-f16.md. */
#define ENGINE_KV_DEFAULT_HELP "f16; f32 with the reference arithmetic"

typedef struct {
    int n_ctx;             /* maximum positions (KV cache size); 0 = 4096 */
    int n_batch;           /* rows per forward chunk for prefill/verify (<= ENGINE_BATCH_MAX); 0 = under a
                              VRAM tier vram_prompt_batch's, else the backend's prompt batch
                              (backend_ops.prompt_batch), else ENGINE_BATCH_DEFAULT */
    const char *kv;        /* KV cache elements: "f32" or "f16" (half the memory); NULL = the default above */
    const char *vram_spec; /* VRAM expert tier (--vram-mib auto|full|MiB; CUDA): NULL = every
                              weight resident on the device (docs/EXPERT_CACHE.md) */
    const char *vram_pin;  /* with vram_spec: --vram-pin auto|on|off (NULL: auto; vram_plan.h) */
    const char *vram_miss; /* with vram_spec: --vram-miss copy|cpu|auto (NULL: auto; every mode exact) */
    bool host_snapshots;   /* verify snapshots through host copies even where the backend keeps
                              them on the device (tests of both paths; normally false) */
} engine_ctx_params;

/* "f32" / "f16" -> 0 with *out set; -1 with rl_lasterr naming the choices otherwise. */
int engine_kv_parse(const char *name, int *out);

engine_ctx *engine_ctx_new(engine *e, const engine_ctx_params *p);
void engine_ctx_free(engine_ctx *c);
int engine_pos(const engine_ctx *c);
int engine_n_ctx(const engine_ctx *c);
/* Rows one prefill chunk / verify may hold (engine_ctx_params.n_batch after defaults). */
int engine_n_batch(const engine_ctx *c);
#define ENGINE_BATCH_DEFAULT 512 /* rows per prompt chunk where the backend states none */
#define ENGINE_BATCH_MAX 4096
/* The n_batch a context of this engine gets for n_batch 0 (the backend's choice for the model). */
int engine_default_batch(const engine *e);
/* The context's KV cache format: "f32" or "f16". */
const char *engine_kv_format(const engine_ctx *c);

/* 0, or -1 (rl_lasterr set) when the backend does not report. */
int engine_mem_info(const engine_ctx *c, engine_mem *out);
/* Clear the sequence (position 0, zero state). */
void engine_reset(engine_ctx *c);

/* One token at the current position; logits (n_vocab floats, may be NULL). 0 or -1.
 * A call that fails (e.g. an expert read error with a bounded cache) leaves the context as it
 * was (CPU backend: position, recurrent state and hidden state unchanged), so it can be retried. */
int engine_step(engine_ctx *c, int32_t token, float *logits);
/* Steps of different contexts that wait together run as rows of one forward (the CPU backend's
 * forward_rows: dense weights, shared experts and the union of the routed experts read once
 * for all rows; other backends run them one after another), at most this many. */
#define ENGINE_ROWS_MAX 64
/* The context is in a decode loop (on) or left it (off): while two or more contexts are, a step
 * waits up to 2 ms for the others' steps so that they share a forward. */
void engine_ctx_decoding(engine_ctx *c, bool on);
/* Forwards engine_step ran and the rows they held (rows / forwards = the mean batch). */
void engine_batch_stats(engine *e, long long *forwards, long long *rows);
/* n tokens in chunks of n_batch; logits of the last token only (may be NULL). On failure the
 * chunks that completed stay committed (engine_pos says how far) and the failed one left no trace. */
int engine_prefill(engine_ctx *c, const int32_t *tokens, int n, float *logits_last);
/* Multi-row verify: n tokens (n <= n_batch) in one pass; logits: n x n_vocab (each row
 * identical to single steps); snaps (optional, n entries from engine_snapshot_new): snaps[i]
 * receives the state after token i (position and MTP position included), so a verifier can
 * roll back to any accepted prefix. A NULL entry skips that row's copy (a speculative loop
 * never needs the last row's: keeping every row is the state the verify ends in). */
int engine_verify(engine_ctx *c, const int32_t *tokens, int n, float *logits, engine_snapshot **snaps);
/* Final-norm hidden states of the last forward's rows are kept for MTP drafting:
 * returns a pointer to row `row` (D floats) of the last call, or NULL. */
const float *engine_last_hidden(const engine_ctx *c, int row);
/* Rows of the last forward whose hidden states engine_last_hidden serves (0 after a restore). */
int engine_last_rows(const engine_ctx *c);

/* MTP drafting (models with a blk.N.nextn.* block): run the MTP head on n pairs
 * (hidden[i], next_tokens[i]) — hidden[i] the final-norm state of position p (engine_last_hidden),
 * next_tokens[i] the token at p+1 — appending them to the head's own KV cache (its position
 * is engine_mtp_pos). logits: n x n_vocab, the draft distribution for position p+2;
 * hidden_out (optional): n x n_embd, to chain a further draft. 0 or -1 (rl_lasterr). */
int engine_mtp(engine_ctx *c, const float *hidden, const int32_t *next_tokens, int n, float *logits,
               float *hidden_out);
int engine_mtp_pos(const engine_ctx *c);
/* Drop MTP pairs after position pos (e.g. rejected drafts). */
void engine_mtp_rewind(engine_ctx *c, int pos);
bool engine_has_mtp(const engine *e);

engine_snapshot *engine_snapshot_new(engine_ctx *c);
int engine_snapshot_save(engine_ctx *c, engine_snapshot *s);
int engine_snapshot_restore(engine_ctx *c, const engine_snapshot *s);
int engine_snapshot_pos(const engine_snapshot *s);
void engine_snapshot_free(engine_snapshot *s);

/* ---- state export / import (disk checkpoints) -----------------------------------------
 * The sequence state at position pos is every DeltaNet layer's conv + recurrent state and the
 * first pos K/V rows of every attention layer, as one byte blob in the backend's layout.
 * engine_state_format names that layout ("cpu/f32", "cuda/f16", "cuda/f16-tc", ...): a blob is only
 * meaningful for the same model and format, and restoring it continues exactly as the exported context would
 * (bit-identical logits, by the exactness contract). The MTP head's cache is not part of it (after an import
 * the head starts empty). */
size_t engine_state_bytes(const engine_ctx *c, int pos);
const char *engine_state_format(const engine_ctx *c);
/* Write the state at the current position: n must be engine_state_bytes(c, engine_pos(c)). */
int engine_state_export(engine_ctx *c, void *buf, size_t n);
/* The same for the state saved in snapshot s (taken from this context): its recurrent state,
 * and KV rows [0, engine_snapshot_pos(s)) read from the context — valid while those rows are
 * unchanged (true after decoding past the snapshot: the KV cache is append-only). n must be
 * engine_state_bytes(c, engine_snapshot_pos(s)). */
int engine_state_export_snapshot(engine_ctx *c, const engine_snapshot *s, void *buf, size_t n);
/* Replace the context's state by a blob of n = engine_state_bytes(c, pos) bytes; the position
 * becomes pos. On failure the context is reset (position 0). 0 or -1 (rl_lasterr). */
int engine_state_import(engine_ctx *c, int pos, const void *buf, size_t n);

/* Debug observers (NULL to disable): named activations and router choices. */
void engine_set_hooks(engine_ctx *c, q3n_dump_fn dump, q3n_route_fn route, void *ud);
/* Replace the routed-expert source (the session installs its expert cache here; NULL = the
 * mapped file). 0, or -1 with rl_lasterr set on a backend that holds every expert itself
 * (engine_can_set_expert_src false: CUDA). */
int engine_set_expert_src(engine_ctx *c, const q3n_expert_src *src);
bool engine_can_set_expert_src(const engine *e);
/* VRAM expert tier: the host source its device slots are filled from (the session's RAM
 * cache; NULL = the mapped file). 0; 1 if the context has no tier (every expert fit on the
 * device: the source is not used); -1 (rl_lasterr) if the backend has no VRAM tier at all. */
int engine_set_host_expert_src(engine_ctx *c, const q3n_expert_src *src);
/* The backend's own statistics (the VRAM tier's plan and counters), if any. */
void engine_print_backend_stats(engine_ctx *c, FILE *f);
#endif
