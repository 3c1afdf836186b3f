/* spec.h — speculative decoding that never changes the answer: draft sources (prompt lookup,
 * the model's MTP head) and the draft -> verify -> accept loop, written against the engine, the
 * sampler and a token sink so that the session layer (and tests) drive it.
 *
 * The promise: for any sampler settings and seed, the emitted tokens, the final context state
 * (position, recurrent state, KV rows that count, MTP position aside) and the sampler's state are
 * exactly those of plain decoding (sample, emit, engine_step, repeat). It rests on three facts:
 *   - engine_verify rows are bit-identical to engine_step (the engine's exactness contract);
 *   - row i's logits are sampled with the real sampler, in order, one draw per EMITTED token
 *     (plus the draw that yields an end-of-generation token, as plain decoding makes), and the
 *     sampler's penalty history gets exactly the emitted tokens, so drafts never touch it;
 *   - the state is rolled back to the per-row snapshot of the last row whose token stays.
 * Drafts only decide how many rows a verify has, i.e. the speed.
 *
 * Plain decoding is this loop with no drafts (mode SPEC_DRAFT_NONE: one engine_step per token),
 * so a caller has one emit path for both.
 */
#ifndef RL_SPEC_H
#define RL_SPEC_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine.h"
#include "sampler.h"

#define SPEC_DRAFT_MAX 8 /* K: drafts per verify (rows = K + 1) */

/* Draft sources; the values are those of session.h's spec_mode. */
enum { SPEC_DRAFT_NONE = 0, SPEC_DRAFT_LOOKUP = 1, SPEC_DRAFT_MTP = 2, SPEC_DRAFT_AUTO = 3 };
const char *spec_mode_name(int mode);         /* "none" "lookup" "mtp" "auto" */
int spec_mode_parse(const char *s);           /* -1 if unknown */

/* ---- prompt lookup ------------------------------------------------------------------------
 * Over the sequence (prompt + generated text): find the latest EARLIER occurrence of the last 3
 * tokens, else of the last 2, and draft the tokens that followed it. An index maps each n-gram
 * (n = 2, 3) to the end of its latest occurrence, updated as tokens arrive (an n-gram enters
 * the index once a token follows it, so a lookup never finds the sequence's own tail): one hash
 * probe sequence per draft, whatever the length. Draft i is the token after position j + i of
 * the sequence extended by the drafts themselves, so a match near the end still yields K
 * tokens (a repeating pattern continues). */
typedef struct spec_lookup spec_lookup;
spec_lookup *spec_lookup_new(void);
void spec_lookup_free(spec_lookup *l);
void spec_lookup_clear(spec_lookup *l);
int spec_lookup_push(spec_lookup *l, int32_t token); /* 0, -1 on oom (rl_lasterr) */
int spec_lookup_len(const spec_lookup *l);
/* Up to k drafts into out; returns their count (0 = no match). *match (optional): length of
 * the match behind the found occurrence, counted back up to 16 tokens. */
int spec_lookup_draft(const spec_lookup *l, int k, int32_t *out, int *match);
/* Hash slots inspected since creation (tests: bounded per draft at any length). */
uint64_t spec_lookup_probes(const spec_lookup *l);

/* ---- the speculative loop ---------------------------------------------------------------- */
typedef enum {
    SPEC_END_EOG,       /* an end-of-generation token was sampled (not emitted, not evaluated) */
    SPEC_END_LENGTH,    /* n_predict tokens emitted */
    SPEC_END_SINK,      /* the sink's emit returned non-zero (stop string, client gone, ...) */
    SPEC_END_CONTEXT,   /* the context is full */
    SPEC_END_CANCELLED, /* *cancel was set */
    SPEC_END_ERROR,     /* engine failure (rl_lasterr): the last emitted token is not evaluated */
} spec_end;

typedef struct {
    /* end-of-generation test (required) */
    bool (*is_eog)(void *ud, int32_t token);
    /* one emitted token, in order, already in the sampler's history; return 0 to go on or a
     * non-zero code (kept in spec_result.sink_code) to stop after it */
    int (*emit)(void *ud, int32_t token);
    void *ud;
    volatile sig_atomic_t *cancel; /* checked after each emitted token (may be NULL) */
} spec_sink;

typedef struct {
    int mode;            /* SPEC_DRAFT_*; AUTO: MTP when the engine has a head (lookup when it
                            has a long match), lookup otherwise */
    int draft_max;       /* K upper bound 1..8 (0 = 8); capped by n_batch - 1 and by what
                            n_predict and the context still allow */
    long long n_predict; /* < 0: no limit */
} spec_params;

typedef struct {
    spec_end end;
    int sink_code;
    long long n_emitted;   /* tokens given to the sink */
    long long n_evaluated; /* of those, entered into the context (all, or all but the last) */
    long long n_drafted, n_accepted; /* all sources */
    long long n_drafted_lookup, n_accepted_lookup, n_drafted_mtp, n_accepted_mtp;
    long long n_verifies, n_steps;   /* engine_verify / engine_step calls */
    int k_final;           /* adaptive K at the end */
} spec_result;

typedef struct spec spec;
/* Per-sequence state (lookup index, snapshots, buffers); reusable across runs. */
spec *spec_new(engine *e, engine_ctx *c);
void spec_free(spec *s);
/* Can `mode` run on this context? 0, or -1 with a one-line reason (MTP on a model without a
 * head or on a backend without the MTP forward, draft_max out of range, ...). */
int spec_check(const spec *s, int mode, int draft_max);

/* Decode from `logits` (n_vocab, in/out: those of the last evaluated token; on return those of
 * the last token the context holds). history[0..n_hist) are the tokens the context holds (the
 * lookup index is built from them). Returns 0 (out->end says why it stopped) or -1 on engine
 * failure (out->end = SPEC_END_ERROR, rl_lasterr); either way out->n_evaluated says which of
 * the emitted tokens are in the context, and the context is exactly that of plain decoding
 * after those tokens. */
int spec_run(spec *s, sampler *smp, float *logits, const int32_t *history, int n_hist, const spec_params *p,
             const spec_sink *sink, spec_result *out);
#endif
