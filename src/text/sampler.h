/* sampler.h — token sampling with llama.cpp's default chain and arithmetic, and stop strings.
 *
 * Chain (llama.cpp common_sampler with its default sampler order, where the disabled stages
 * DRY, top-n-sigma, typical-p and XTC are no-ops):
 *
 *   penalties -> top-k -> top-p -> min-p -> temperature -> dist
 *
 *   penalties  over the last `repeat_last_n` accepted tokens (sampler_accept; the CLI accepts
 *              the prompt tokens too, as llama-cli does). For a token seen `count` times:
 *              logit <= 0 ? logit *= repeat : logit /= repeat; then
 *              logit -= count * frequency + (count > 0) * presence.
 *   top-k      k <= 0: off. Keeps the k largest logits, sorted descending (before any softmax).
 *   top-p      p >= 1: off. Softmax (float, at temperature 1, summed in the current order),
 *              sort descending, keep the shortest prefix whose float running sum reaches p.
 *   min-p      p <= 0: off. Keeps logits >= max_logit + logf(p), i.e. probability >= p times the
 *              most likely token's, measured before temperature. An unsorted list keeps its order.
 *   temperature  logits /= temp. temp <= 0 means greedy: the largest penalised logit wins
 *              (lowest id among exact ties) and no random number is drawn.
 *   dist       p_i = expf(logit_i - max) in float, summed in double; u = a double in [0,1) from
 *              std::mt19937(seed) through libstdc++'s generate_canonical<double, 53> (two 32-bit
 *              outputs); the first candidate whose double running sum reaches u * sum wins.
 *              A single candidate still consumes one draw.
 *
 * Same seed + same logits + same settings give the same token as llama.cpp (built with
 * libstdc++ and glibc's expf) whenever the logits that matter have no exact ties; ties are
 * ordered by ascending id here, while llama.cpp's sort leaves their order unspecified. See
 * docs/CHAT.md. seed SAMPLER_SEED_RANDOM (0xFFFFFFFF, llama.cpp's LLAMA_DEFAULT_SEED) picks a
 * seed from the clock. */
#ifndef RL_SAMPLER_H
#define RL_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SAMPLER_SEED_RANDOM 0xFFFFFFFFu

typedef struct {
    float temp;              /* <= 0: greedy */
    int32_t top_k;           /* <= 0: off */
    float top_p;             /* >= 1: off */
    float min_p;             /* <= 0: off */
    float repeat_penalty;    /* 1: off */
    int32_t repeat_last_n;   /* history length for the penalties; 0: off */
    float presence_penalty;  /* 0: off */
    float frequency_penalty; /* 0: off */
    uint32_t seed;           /* SAMPLER_SEED_RANDOM: from the clock */
    int32_t min_keep;        /* top-p / min-p keep at least this many (0) */
} sampler_params;

/* Greedy, penalties off, top-k 40, top-p 0.95, min-p 0.05 (llama.cpp's values, used when a
 * temperature is set), repeat_last_n 64, random seed. */
sampler_params sampler_default_params(void);

/* std::mt19937 (Matsumoto & Nishimura 1998 parameters, as the C++ standard specifies). */
typedef struct {
    uint32_t mt[624];
    int idx;
} rl_mt19937;
void rl_mt19937_seed(rl_mt19937 *m, uint32_t seed);
uint32_t rl_mt19937_next(rl_mt19937 *m);
/* std::uniform_real_distribution<double>(0, 1)(m) as libstdc++ computes it. */
double rl_mt19937_uniform(rl_mt19937 *m);

typedef struct {
    int32_t id;
    float logit;
    float p;
} sampler_cand;

typedef struct sampler sampler;

/* A token mask (constrained decoding, text/grammar.h): tokens it refuses are removed before the
 * chain, as if their logits were -inf, so every stage (top-k, top-p, min-p, the draw) sees only
 * allowed tokens. It is applied lazily: the candidates are tested in the chain's order (the
 * largest logits first) and testing stops when the chain has what it needs (greedy: the first
 * allowed token; top-k: k of them, within the best max(4k, 256)); only when that is not enough
 * (top-k off, or too few allowed near the top) the full mask is made (`fill`). Both ways give
 * the same candidates. When nothing is allowed the sampler returns -1. */
typedef struct {
    bool (*allow)(void *ud, int32_t token);
    /* set bit id % 32 of bits[id / 32] for every allowed id (the words are zeroed first);
     * returns the count */
    size_t (*fill)(void *ud, uint32_t *bits);
    /* how many of toks[0..n) are allowed in sequence from the current state (drafts) */
    int (*prefix)(void *ud, const int32_t *toks, int n);
    void *ud;
} sampler_mask;

sampler *sampler_new(const sampler_params *p, int32_t n_vocab);
/* Install a mask (NULL: none). The mask's state is the caller's: it advances it after each
 * emitted token. */
void sampler_set_mask(sampler *s, const sampler_mask *m);
/* The mask's prefix (n when no mask is set). */
int sampler_mask_prefix(sampler *s, const int32_t *toks, int n);
/* Mask work so far: applications and the thread CPU nanoseconds spent in them (bench). */
void sampler_mask_stats(const sampler *s, uint64_t *calls, uint64_t *ns);
/* Log-probabilities of the last sampled token's distribution: after sampler_set_logprobs(s, n)
 * (n = 0..20, -1 off), every sampler_sample also records the log-softmax over the whole
 * vocabulary of the logits after the penalties (temperature 1, before top-k / top-p / min-p and
 * the mask: the model's own distribution, as llama.cpp's server reports it), the chosen token's
 * value and the n most likely tokens (descending, ties by id). */
typedef struct {
    int32_t token;
    float logprob;
    int n_top;
    int32_t top_id[20];
    float top_logprob[20];
} sampler_logprobs;
void sampler_set_logprobs(sampler *s, int n);
const sampler_logprobs *sampler_last_logprobs(const sampler *s); /* NULL when off */
void sampler_free(sampler *s);
const sampler_params *sampler_get_params(const sampler *s);
/* The seed actually used (resolved when SAMPLER_SEED_RANDOM was asked for). */
uint32_t sampler_seed(const sampler *s);
/* Record a token in the penalty history (prompt tokens and generated ones). */
void sampler_accept(sampler *s, int32_t token);
/* Forget the penalty history (the random stream continues). */
void sampler_reset(sampler *s);
/* The greedy choice over n logits: the largest, the lowest id among exact ties (what
 * sampler_sample picks at temperature 0 without penalties). */
int32_t sampler_argmax(const float *logits, int32_t n);
/* Pick the next token from n_vocab logits (not modified). */
int32_t sampler_sample(sampler *s, const float *logits);
/* The candidates the final draw chooses from, in the order it scans them, with their
 * normalised probabilities; does not draw. For greedy: the one winner with p = 1. The array is
 * owned by the sampler (valid until the next call). Returns the count. */
size_t sampler_candidates(sampler *s, const float *logits, const sampler_cand **out);

/* ---- stop strings -----------------------------------------------------------------------
 * Text is pushed as it is generated; what cannot be the start of a stop string is released at
 * once, a possible partial match is held back until it is decided. */
typedef struct {
    char **stops;
    int n_stops;
    size_t max_len;
    char *held;
    size_t n_held, cap;
    bool hit;
} stopper;

/* 0, -1 on oom. Empty strings are ignored. */
int stopper_init(stopper *s, const char *const *stops, int n);
void stopper_free(stopper *s);
/* Push generated text. *out / *out_len: text that is final now (valid until the next call).
 * Returns true when a stop string was completed: *out is then the text before it, and the stop
 * string and anything after it are dropped. */
bool stopper_push(stopper *s, const char *text, size_t n, const char **out, size_t *out_len);
/* End of generation without a stop: the held text. */
void stopper_flush(stopper *s, const char **out, size_t *out_len);

#endif
