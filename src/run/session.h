/* session.h — one opened model and one sequence, and everything that turns tokens into text:
 * the layer that `generate`, `chat`, `bench`, `perplexity`, speculation and `serve` share.
 *
 * Arrows run one way: cli/server -> session -> engine (+ expert_cache, tokenizer, sampler,
 * spec) -> backends -> ops/kern -> quant/gguf. Nothing below the session includes this header.
 *
 * Ownership: a session owns its engine, its context, its tokenizer and its routed-expert source
 * (the bounded cache, full residency or the mapping, as `cache_spec` plans it). There is no
 * global table: a second sequence (a second server slot) is a second session_new on the same
 * session_model; each sequence owns its state, the model (weights, tokenizer) is shared.
 *
 * Threads: every call on one session comes from one thread at a time. Sessions of one model
 * may run on different threads at once (the server's slots): the engine takes their forwards in
 * turns and runs their decode steps as rows of shared forwards (engine.h), with the same results
 * as alone. `cancel` flags may be set from any thread or a signal handler.
 *
 * Sequence and prefix reuse: the session remembers the tokens its context holds (`history`).
 * session_feed(tokens) brings the context to exactly `tokens`: when the history is a prefix of
 * them only the new tokens are evaluated; otherwise it restores the longest in-memory checkpoint
 * (engine snapshot + position, taken at prefill-chunk boundaries and at the end of each feed)
 * whose tokens are a prefix, and evaluates the rest. A restore gives bit-identical logits to a
 * cold run (the engine's exactness contract: prefill rows == single steps).
 *
 * Errors: -1 / NULL with rl_lasterr() set to one line that says what is wrong and what to do.
 */
#ifndef RL_SESSION_H
#define RL_SESSION_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "run/engine.h"
#include "text/grammar.h"
#include "text/sampler.h"
#include "text/tokenizer.h"

typedef struct session_model session_model;
typedef struct session session;

/* ---- opening ----------------------------------------------------------------------------- */
typedef struct {
    const char *model_path;
    const char *backend; /* "cpu" | "cuda" | "auto" (NULL = "cpu") */
    int n_threads;       /* 0 = all online CPUs */
    bool reference;      /* CPU double-precision reference arithmetic (the oracle) */
    bool iq_repack;      /* CPU: IQ2/IQ1_M experts in the lookup-free layout (engine_params.iq_repack);
                            every session then runs without the expert cache */
    bool map_weights;    /* CPU: matrices served from the file mapping, no huge-page copies
                            (engine_params.map_weights) */
} session_model_params;

typedef struct {
    int n_ctx;               /* positions (KV cache); 0 = 4096 */
    int n_batch;             /* rows per prefill/verify chunk; 0 = the backend's (engine_default_batch) */
    const char *kv;          /* KV cache format "f32" | "f16" (NULL = the engine's default) */
    const char *cache_spec;  /* routed experts: NULL/"auto", "full", "mmap" or MiB ("4096") */
    const char *vram_spec;   /* VRAM expert tier (GPU backends): NULL = every weight on the device,
                                "auto", "full" or MiB; the RAM tier (cache_spec) feeds its slots */
    const char *vram_pin;    /* --vram-pin auto|on|off (NULL: auto) */
    const char *vram_miss;   /* --vram-miss copy|cpu|auto (NULL: auto; every mode bit-identical) */
    float route_bias;        /* > 0: cache-aware routing (changes outputs; refused with spec) */
    const char *route_trace; /* JSON-lines trace of every row's expert choices (or NULL) */
    bool verbose;            /* one-line plan of the expert cache and similar notes on stderr */
    bool progress;           /* progress bars of long work (the experts' preload) on stderr when it
                                is a terminal */
    int max_checkpoints;     /* in-memory prefix checkpoints kept (0 = 8, -1 = none; count-capped
                                LRU). Each holds a copy of the DeltaNet state: ~76 MB on the 80B
                                model, so a one-shot command takes none */
    const struct session *share_experts; /* another session of the same model whose routed-expert
                                source (bounded cache, full residency) this one uses too, instead
                                of planning its own (cache_spec is then ignored): the server's
                                slots share one budget. It must outlive this session. */
} session_params;

session_model *session_model_open(const session_model_params *p);
void session_model_close(session_model *m); /* after every session of it is freed */
engine *session_model_engine(const session_model *m);
/* NULL (rl_lasterr says why) when the file has no tokenizer: token ids still work (feed,
 * bench, perplexity over ids); session_generate refuses. */
const tokenizer *session_model_tokenizer(const session_model *m);
/* The tokens' bytes and trie for grammar masks (text/grammar.h), built on first use (thread-safe;
 * NULL with rl_lasterr when there is no tokenizer or no memory). */
const gvocab *session_model_gvocab(session_model *m);

session *session_new(session_model *m, const session_params *p);
void session_free(session *s);

engine_ctx *session_ctx(const session *s);
const tokenizer *session_tokenizer(const session *s); /* NULL: see session_model_tokenizer */
const q3n_hparams *session_hparams(const session *s);
int session_n_ctx(const session *s);
int session_n_batch(const session *s); /* rows per prefill/verify chunk (after defaults) */
/* The session's routed-expert cache (its q3n_expert_src is expert_cache_src), or NULL when the
 * engine serves the experts itself (a backend that holds them all, e.g. CUDA). */
typedef struct expert_cache expert_cache;
expert_cache *session_expert_cache(const session *s);

/* ---- the sequence ------------------------------------------------------------------------ */
/* Tokens the context holds (valid until the next call that changes the sequence). */
const int32_t *session_history(const session *s, int *n);
/* Logits (n_vocab) of the last evaluated token, or NULL when the sequence is empty. */
const float *session_logits(const session *s);
/* Prompt tokens a session_feed of tokens[0..n) would not evaluate now: the held sequence when
 * it is a prefix, or the longest checkpoint that is one (at most n - 1). Reads only. */
int session_match(const session *s, const int32_t *tokens, int n);
/* Forget the sequence (position 0). Checkpoints are kept (they stay valid: see above). */
void session_reset(session *s);
/* The context was brought to tokens[0..n) from outside the session (engine_state_import of a
 * disk checkpoint, see statefile.h): take them as the history. Checkpoints whose tokens disagree
 * with them are dropped (the KV rows they relied on were rewritten). No logits until the next
 * feed. 0 or -1 (n out of range, or oom: the sequence is then reset). */
int session_adopt(session *s, const int32_t *tokens, int n);

typedef struct {
    /* progress while a prompt is evaluated: once before the first chunk (done 0; total = tokens
     * to evaluate, the reused ones excluded) and after each chunk; or NULL */
    void (*progress)(void *ud, int done, int total, double seconds);
    void *ud;
    atomic_int *cancel; /* set to stop between chunks: -1, rl_lasterr "cancelled" */
} session_feed_opts;

typedef struct {
    int n_tokens;    /* tokens asked for */
    int n_reused;    /* of those, not evaluated (held prefix or restored checkpoint) */
    int n_evaluated; /* evaluated now */
    double seconds;  /* wall time */
} session_feed_stats;

/* Bring the context to exactly tokens[0..n) (see the header comment). n >= 1 and
 * n <= n_ctx. The last token is always evaluated so that session_logits is its row.
 * Checkpoints: at the end of each feed, before its last chunk (a re-run of the same prompt
 * restarts there) and every max(512, n_batch) tokens of a long feed at a chunk boundary.
 * On failure or cancel the history holds the chunks that completed; session_logits is NULL. */
int session_feed(session *s, const int32_t *tokens, int n, const session_feed_opts *o,
                 session_feed_stats *st);

/* ---- generation -------------------------------------------------------------------------- */
typedef enum {
    SESSION_EOG,       /* the model produced an end-of-generation token (not emitted) */
    SESSION_LENGTH,    /* n_predict tokens */
    SESSION_STOP,      /* a stop string (not emitted, nor anything after it) */
    SESSION_CONTEXT,   /* the context is full */
    SESSION_CANCELLED, /* *cancel was set, or on_text asked to stop */
    SESSION_ERROR,     /* engine or memory failure (rl_lasterr) */
} session_reason;
const char *session_reason_name(session_reason r); /* "eog" "length" "stop" "context" ... */

typedef enum { SPEC_NONE = 0, SPEC_LOOKUP, SPEC_MTP, SPEC_AUTO } spec_mode;

typedef struct {
    sampler_params sp;        /* used when smp is NULL (a sampler made for this call) */
    sampler *smp;             /* or the caller's sampler (its random stream continues
                                 across calls, e.g. the turns of a chat) */
    long long n_predict;      /* < 0: until end of generation or the context end */
    const char *const *stops; /* stop strings (n_stops) */
    int n_stops;
    unsigned decode_flags; /* TOK_DECODE_* for the text */
    /* Streaming: called for each emitted token with the text that became final with it (may
     * be empty: an incomplete UTF-8 sequence or a possible stop-string prefix is held back),
     * and once more with token -1 for text released at the end (never empty then).
     * Return non-zero to stop (reason SESSION_CANCELLED). May be NULL. */
    int (*on_text)(void *ud, int32_t token, const char *text, size_t n);
    void *ud;
    atomic_int *cancel; /* checked between tokens */
    spec_mode spec;     /* speculative decoding (never changes the tokens) */
    int draft_max;      /* K upper bound, 1..8 (0 = 8) */
    int draft_min;      /* 0: cost-aware K; N: at least N drafts when a source has some */
    /* Constrained decoding: the output is a sentence of this grammar (text/grammar.h; NULL: off).
     * The sampler's candidates are masked, end of generation is allowed only once the sentence is
     * complete, a sentence that nothing may follow ends generation (reason SESSION_EOG), and the
     * model is steered to finish within n_predict / the context end. Speculation stays exact:
     * drafts the grammar refuses end the draft, and every token is sampled from the masked
     * distribution in order, as without speculation. */
    const grammar *grammar;
    /* Log-probabilities (sampler_set_logprobs): when on_logprobs is set it is called for each
     * emitted token, before its on_text, with top_logprobs (0..20) alternatives. */
    int top_logprobs;
    void (*on_logprobs)(void *ud, const sampler_logprobs *lp);
} session_gen_params;

typedef struct {
    tok_ids ids; /* emitted tokens (EOG excluded); free with session_gen_result_free */
    char *text;  /* emitted text, NUL terminated */
    size_t text_len;
    session_reason reason;
    double seconds;      /* decoding wall time */
    long long n_drafted; /* speculation: drafted tokens, of which accepted */
    long long n_accepted;
    long long n_verifies; /* engine_verify calls */
    uint32_t seed;        /* the sampler's seed (resolved when a random one was asked for) */
} session_gen_result;

/* Sample from session_logits(), emit, evaluate, until a stop condition. 0, or -1 with
 * rl_lasterr set (out->reason SESSION_ERROR; out holds what was emitted before the failure,
 * free it either way). spec != SPEC_NONE: -1 "not available yet" until the speculative loop
 * lands. Every emitted token except the last is evaluated into the sequence (history grows accordingly). The
 * sampler's random stream is consumed once per emitted token, in order, so speculation never changes the
 * result for a given seed. The sampler's penalty history is the session's history. */
int session_generate(session *s, const session_gen_params *gp, session_gen_result *out);
void session_gen_result_free(session_gen_result *r);

/* ---- statistics -------------------------------------------------------------------------- */
/* Where the weights live ("weights: ..." lines, engine_weights_describe; CPU backend) when weights is
 * set (bench prints them in its own table and passes false), then the expert cache's lines (hits,
 * misses/token, MiB read/token, prefetch) on f, if any. */
void session_print_cache_stats(const session *s, FILE *f, bool weights);

#endif
