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

#include "run/engine.h"
#include "text/sampler.h"

#define SPEC_DRAFT_MAX 8 /* K: drafts per verify (rows = K + 1) */

/* Draft sources; the values are those of session.h's spec_mode. */
enum { SPEC_DRAFT_NONE = 0, SPEC_DRAFT_LOOKUP = 1, SPEC_DRAFT_MTP = 2, SPEC_DRAFT_AUTO = 3 };
const char *spec_mode_name(int mode); /* "none" "lookup" "mtp" "auto" */
int spec_mode_parse(const char *s);   /* -1 if unknown */

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
/* What the caller does with tokens: the SAME path plain decoding uses. */
typedef struct {
    /* A sampled token, to take through the caller's whole emit path: end-of-generation (not
     * emitted), sampler_accept (the loop never touches the penalty history), output, stop
     * strings, n_predict, the context end (pos: the position the token would be evaluated
     * at; pos >= n_ctx means full), cancellation. Return 0 to go on (the loop evaluates it),
     * > 0 to end generation here (the token is not evaluated; the value is kept in
     * spec_result.sink_code), < 0 on error (rl_lasterr). Required. */
    int (*emit)(void *ud, int32_t token, int pos);
    /* (optional) KV rows [pos, pos + n) are about to be written with these tokens (a step, or
     * a verify with its drafts): a caller that keeps prefix checkpoints drops the ones these
     * rows overwrite. */
    void (*will_write)(void *ud, int pos, const int32_t *tokens, int n);
    /* (optional) these tokens are now in the context, in order (after a step, or the kept rows
     * of a verify). 0, or < 0 on error (rl_lasterr). */
    int (*kept)(void *ud, const int32_t *tokens, int n);
    void *ud;
} spec_sink;

typedef struct {
    int mode;            /* SPEC_DRAFT_*; AUTO: MTP when the engine has a head (lookup when it
                            has a long match), lookup otherwise */
    int draft_max;       /* K upper bound 1..8 (0 = 8); capped by n_batch - 1, by the context
                            end and by n_predict */
    int draft_min;       /* 0: cost-aware K (below), which may draft nothing; N > 0: a source
                            that has drafts drafts at least N (tests: every path runs) */
    long long n_predict; /* the most tokens the sink will take (< 0: no limit); only caps drafts */
} spec_params;

typedef struct {
    int sink_code;                   /* the sink's stop value (0 after an error) */
    long long n_sampled;             /* tokens given to the sink */
    long long n_evaluated;           /* tokens that entered the context */
    long long n_drafted, n_accepted; /* all sources */
    long long n_drafted_lookup, n_accepted_lookup, n_drafted_mtp, n_accepted_mtp;
    long long n_verifies, n_steps; /* engine_verify / engine_step calls */
    int k_final;                   /* the drafts of the last verify (0: the last was a plain step) */
} spec_result;

/* Cost-aware K. For each draft source the loop measures what a forward of n rows costs this
 * context (c(n), seconds, the median of the last few; unmeasured sizes interpolated) and how
 * often its drafts are accepted (p: the chance that a draft is accepted when the one before it
 * was, decayed so it follows the text; lookup keeps one per match-length bucket), and drafts
 * the K that maximises tokens per second,
 *     rate(K) = (1 + p + ... + p^K) / (c(K+1) + K * draft + (1 - p^K) * restore),
 * K = 0 being a plain step (rate 1 / c(1)): so drafts that do not pay on this machine are not
 * made, and the loop is never slower than plain decoding by more than the occasional probe
 * (a source whose best K is 0 is tried again every 8 tokens, doubling to 128 while it fails).
 * spec_rate / spec_best_k are that rule (cost[1..kmax+1]; exported for the tests). */
double spec_rate(const double *cost, int K, double p, double draft_cost, double restore_cost);
int spec_best_k(const double *cost, int kmin, int kmax, double p, double draft_cost, double restore_cost);

typedef struct spec spec;
/* Per-sequence state (lookup index, snapshots, buffers); reusable across runs. */
spec *spec_new(engine *e, engine_ctx *c);
void spec_free(spec *s);
/* Can `mode` run on this context? 0, or -1 with a one-line reason (MTP on a model without a
 * head or on a backend without the MTP forward, draft_max out of range, ...). */
int spec_check(const spec *s, int mode, int draft_max);

/* Decode from `logits` (n_vocab, in/out: those of the last evaluated token; on return, also
 * after an error, those of the last token the context holds). history[0..n_hist) are the tokens
 * the context holds (the lookup index is built from them). Returns 0 when the sink ended
 * generation, -1 on an engine or sink error (rl_lasterr). Either way the context holds exactly
 * what plain decoding would hold after the same tokens: every token the sink took with 0, none
 * after (a failed verify or step leaves the context as it was before it). */
int spec_run(spec *s, sampler *smp, float *logits, const int32_t *history, int n_hist, const spec_params *p,
             const spec_sink *sink, spec_result *out);
#endif
