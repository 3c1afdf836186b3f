/* sampler.c — llama.cpp-compatible sampling chain and stop strings (contract in sampler.h).
 *
 * The candidate list mirrors llama.cpp's llama_token_data_array: an array in id order at the
 * start, a `sorted` flag that the stages set or clear exactly where llama.cpp's do, and float
 * arithmetic in the same order, so the same draw selects the same candidate. */
#include "text/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/common.h"

/* ---- mt19937 ----------------------------------------------------------------------------- */

enum { MT_N = 624, MT_M = 397 };

void rl_mt19937_seed(rl_mt19937 *m, uint32_t seed) {
    m->mt[0] = seed;
    for (int i = 1; i < MT_N; i++)
        m->mt[i] = 1812433253u * (m->mt[i - 1] ^ (m->mt[i - 1] >> 30)) + (uint32_t)i;
    m->idx = MT_N;
}

static void mt_twist(rl_mt19937 *m) {
    for (int i = 0; i < MT_N; i++) {
        uint32_t y = (m->mt[i] & 0x80000000u) | (m->mt[(i + 1) % MT_N] & 0x7fffffffu);
        uint32_t v = m->mt[(i + MT_M) % MT_N] ^ (y >> 1);
        if (y & 1) v ^= 0x9908b0dfu;
        m->mt[i] = v;
    }
    m->idx = 0;
}

uint32_t rl_mt19937_next(rl_mt19937 *m) {
    if (m->idx >= MT_N) mt_twist(m);
    uint32_t y = m->mt[m->idx++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

double rl_mt19937_uniform(rl_mt19937 *m) {
    /* generate_canonical<double, 53>: k = 2 draws, sum = g1 + g2 * 2^32 (rounded to double),
     * divided by 2^64, clamped below 1. */
    double sum = (double)rl_mt19937_next(m);
    sum += (double)rl_mt19937_next(m) * 4294967296.0;
    double r = sum / 18446744073709551616.0;
    if (r >= 1.0) r = nextafter(1.0, 0.0);
    return r;
}

/* ---- sampler ------------------------------------------------------------------------------ */

struct sampler {
    sampler_params p;
    int32_t n_vocab;
    rl_mt19937 rng;
    uint32_t seed;
    /* penalty history: ring of the last repeat_last_n tokens + per-id counts */
    int32_t *ring;
    int ring_n, ring_pos;
    int32_t *count;
    /* candidates */
    sampler_cand *cand, *tmp, *tmp2;
    size_t size;
    bool sorted;
    /* token mask (sampler_set_mask) */
    sampler_mask mask;
    bool has_mask;
    uint32_t *bits;
    uint64_t mask_calls, mask_ns;
    /* log-probabilities (sampler_set_logprobs): the penalised logits of the last draw */
    int lp_n;
    float *lp_logits;
    double lp_logz;
    sampler_logprobs lp;
};

sampler_params sampler_default_params(void) {
    return (sampler_params){
        .temp = 0.8f,
        .top_k = 40,
        .top_p = 0.95f,
        .min_p = 0.05f,
        .repeat_penalty = 1.0f,
        .repeat_last_n = 64,
        .presence_penalty = 0.0f,
        .frequency_penalty = 0.0f,
        .seed = SAMPLER_SEED_RANDOM,
        .min_keep = 0,
    };
}

sampler *sampler_new(const sampler_params *p, int32_t n_vocab) {
    if (n_vocab <= 0) {
        rl_seterr("sampler: bad vocabulary size %d", n_vocab);
        return NULL;
    }
    sampler *s = rl_calloc(1, sizeof *s, "sampler");
    if (!s) return NULL;
    s->p = *p;
    if (s->p.repeat_last_n < 0) s->p.repeat_last_n = 0;
    if (s->p.min_keep < 0) s->p.min_keep = 0;
    s->n_vocab = n_vocab;
    s->lp_n = -1;
    s->seed = p->seed;
    if (s->seed == SAMPLER_SEED_RANDOM) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        s->seed = (uint32_t)((uint64_t)ts.tv_sec * 1000000007u + (uint64_t)ts.tv_nsec);
        if (s->seed == SAMPLER_SEED_RANDOM) s->seed = 0;
    }
    rl_mt19937_seed(&s->rng, s->seed);
    s->cand = rl_malloc(sizeof *s->cand * (size_t)n_vocab, "sampler candidates");
    s->tmp = rl_malloc(sizeof *s->tmp * (size_t)n_vocab, "sampler candidates");
    s->tmp2 = rl_malloc(sizeof *s->tmp2 * (size_t)n_vocab, "sampler candidates");
    s->count = rl_calloc((size_t)n_vocab, sizeof *s->count, "sampler history");
    if (s->p.repeat_last_n > 0)
        s->ring = rl_malloc(sizeof *s->ring * (size_t)s->p.repeat_last_n, "sampler history");
    if (!s->cand || !s->tmp || !s->tmp2 || !s->count || (s->p.repeat_last_n > 0 && !s->ring)) {
        sampler_free(s);
        return NULL;
    }
    return s;
}

void sampler_free(sampler *s) {
    if (!s) return;
    free(s->ring);
    free(s->count);
    free(s->cand);
    free(s->tmp);
    free(s->tmp2);
    free(s->bits);
    free(s->lp_logits);
    free(s);
}

void sampler_set_mask(sampler *s, const sampler_mask *m) {
    s->has_mask = m != NULL;
    if (m) s->mask = *m;
}

int sampler_mask_prefix(sampler *s, const int32_t *toks, int n) {
    return s->has_mask && s->mask.prefix ? s->mask.prefix(s->mask.ud, toks, n) : n;
}

void sampler_mask_stats(const sampler *s, uint64_t *calls, uint64_t *ns) {
    *calls = s->mask_calls;
    *ns = s->mask_ns;
}

void sampler_set_logprobs(sampler *s, int n) {
    s->lp_n = n < 0 ? -1 : n > 20 ? 20 : n;
    if (s->lp_n >= 0 && !s->lp_logits)
        s->lp_logits = rl_malloc(sizeof(float) * (size_t)s->n_vocab, "logprobs");
    if (!s->lp_logits) s->lp_n = -1;
}

const sampler_logprobs *sampler_last_logprobs(const sampler *s) { return s->lp_n >= 0 ? &s->lp : NULL; }

const sampler_params *sampler_get_params(const sampler *s) { return &s->p; }
uint32_t sampler_seed(const sampler *s) { return s->seed; }

void sampler_accept(sampler *s, int32_t token) {
    int N = s->p.repeat_last_n;
    if (N == 0 || token < 0 || token >= s->n_vocab) return;
    if (s->ring_n == N) { /* full: the oldest leaves */
        int32_t old = s->ring[s->ring_pos];
        s->count[old]--;
    } else {
        s->ring_n++;
    }
    s->ring[s->ring_pos] = token;
    s->ring_pos = (s->ring_pos + 1) % N;
    s->count[token]++;
}

void sampler_reset(sampler *s) {
    for (int i = 0; i < s->ring_n; i++) s->count[s->ring[i]] = 0;
    s->ring_n = s->ring_pos = 0;
}

static bool penalties_off(const sampler_params *p) {
    return p->repeat_last_n == 0 ||
           (p->repeat_penalty == 1.0f && p->frequency_penalty == 0.0f && p->presence_penalty == 0.0f);
}

/* Descending logit; ties by ascending id (llama.cpp leaves tie order unspecified). */
static int cand_cmp(const void *a, const void *b) {
    const sampler_cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static bool cand_before(const sampler_cand *x, const sampler_cand *y) { return cand_cmp(x, y) < 0; }

/* Order key: ascending key = descending logit (the float's bits made monotonic, inverted). */
static inline uint32_t desc_key(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u); /* ascending with f */
    return ~u;
}

/* Stable LSD radix sort (3 passes of 11 bits) of c[0..n) by `by_id` ? id : descending logit,
 * using tmp[0..n) as scratch. Stability makes equal logits keep their (id) order. */
static void radix_sort(sampler_cand *c, size_t n, sampler_cand *tmp, bool by_id) {
    sampler_cand *src = c, *dst = tmp;
    for (int pass = 0; pass < 3; pass++) {
        int shift = pass * 11;
        size_t cnt[2048] = {0};
        for (size_t i = 0; i < n; i++) {
            uint32_t k = by_id ? (uint32_t)src[i].id : desc_key(src[i].logit);
            cnt[(k >> shift) & 2047]++;
        }
        size_t sum = 0;
        for (int b = 0; b < 2048; b++) {
            size_t t = cnt[b];
            cnt[b] = sum;
            sum += t;
        }
        for (size_t i = 0; i < n; i++) {
            uint32_t k = by_id ? (uint32_t)src[i].id : desc_key(src[i].logit);
            dst[cnt[(k >> shift) & 2047]++] = src[i];
        }
        sampler_cand *t = src;
        src = dst;
        dst = t;
    }
    if (src != c) memcpy(c, src, sizeof *c * n); /* 3 passes end in tmp */
}

/* Sort c[0..n) descending by logit, ties by ascending id (cand_cmp order). `in_id_order`: the
 * list is already ordered by id, so one stable pass suffices. */
static void sort_desc(sampler_cand *c, size_t n, sampler_cand *tmp, bool in_id_order) {
    if (n < 64 || !tmp) {
        qsort(c, n, sizeof *c, cand_cmp);
        return;
    }
    if (!in_id_order) radix_sort(c, n, tmp, true);
    radix_sort(c, n, tmp, false);
}

/* The k best of c[0..n) in descending order into out[0..k): a bounded min-heap (the heap root
 * is the worst kept candidate), then a sort of the k. */
static void top_k_select(const sampler_cand *c, size_t n, size_t k, sampler_cand *out,
                         sampler_cand *scratch) {
    size_t h = 0;
    for (size_t i = 0; i < n; i++) {
        if (h < k) { /* sift up */
            size_t j = h++;
            out[j] = c[i];
            while (j > 0) {
                size_t parent = (j - 1) / 2;
                if (!cand_before(&out[parent], &out[j])) break;
                sampler_cand t = out[parent];
                out[parent] = out[j];
                out[j] = t;
                j = parent;
            }
        } else if (cand_before(&c[i], &out[0])) { /* replace the worst, sift down */
            out[0] = c[i];
            size_t j = 0;
            for (;;) {
                size_t l = 2 * j + 1, r = l + 1, w = j;
                if (l < h && cand_before(&out[w], &out[l])) w = l;
                if (r < h && cand_before(&out[w], &out[r])) w = r;
                if (w == j) break;
                sampler_cand t = out[w];
                out[w] = out[j];
                out[j] = t;
                j = w;
            }
        }
    }
    sort_desc(out, h, scratch, false);
}

/* Keep the best k, sorted (llama_token_data_array_partial_sort_inplace). */
static void sort_prefix(sampler *s, size_t k) {
    if (k >= s->size) {
        sort_desc(s->cand, s->size, s->tmp, true); /* unsorted lists are in id order */
    } else {
        top_k_select(s->cand, s->size, k, s->tmp, s->tmp2);
        memcpy(s->cand, s->tmp, sizeof *s->cand * k);
    }
    s->size = k;
    s->sorted = true;
}

/* The largest candidate logit (the first one when the candidates are sorted). */
static float max_logit(const sampler *s) {
    float max_l = s->cand[0].logit;
    if (!s->sorted)
        for (size_t i = 1; i < s->size; i++) max_l = fmaxf(max_l, s->cand[i].logit);
    return max_l;
}

/* llama_sampler_softmax_impl(cur_p, do_sort = false) */
static void softmax_inplace(sampler *s) {
    const float max_l = max_logit(s);
    float cum = 0.0f;
    for (size_t i = 0; i < s->size; i++) {
        float p = expf(s->cand[i].logit - max_l);
        s->cand[i].p = p;
        cum += p;
    }
    for (size_t i = 0; i < s->size; i++) s->cand[i].p /= cum;
}

static void apply_penalties(sampler *s) {
    if (penalties_off(&s->p)) return;
    /* the list is still in id order here (penalties run first) */
    for (int i = 0; i < s->ring_n; i++) {
        int32_t id = s->ring[i];
        int count = s->count[id];
        if (count <= 0) continue;
        s->count[id] = -count; /* mark done (a token can sit in the ring several times) */
        sampler_cand *c = &s->cand[id];
        if (c->logit <= 0) c->logit *= s->p.repeat_penalty;
        else c->logit /= s->p.repeat_penalty;
        c->logit -= (float)count * s->p.frequency_penalty + (float)(count > 0) * s->p.presence_penalty;
    }
    for (int i = 0; i < s->ring_n; i++)
        if (s->count[s->ring[i]] < 0) s->count[s->ring[i]] = -s->count[s->ring[i]];
    s->sorted = false;
}

static void apply_top_p(sampler *s) {
    float p = s->p.top_p;
    if (p >= 1.0f) return;
    softmax_inplace(s);
    if (!s->sorted) {
        /* llama.cpp sorts the best 256 first and the rest only if needed; the resulting prefix
         * is the same as a full descending sort's */
        size_t k = s->size > 1024 ? 256 : s->size;
        float cum = 0.0f;
        if (k < s->size) {
            top_k_select(s->cand, s->size, k, s->tmp, s->tmp2);
            for (size_t i = 0; i < k; i++) {
                cum += s->tmp[i].p;
                if (cum >= p && i + 1 >= (size_t)s->p.min_keep) {
                    memcpy(s->cand, s->tmp, sizeof *s->cand * (i + 1));
                    s->size = i + 1;
                    s->sorted = true;
                    return;
                }
            }
        }
        sort_desc(s->cand, s->size, s->tmp, true); /* unsorted lists are in id order */
        s->sorted = true;
    }
    float cum = 0.0f;
    size_t last = s->size;
    for (size_t i = 0; i < s->size; i++) {
        cum += s->cand[i].p;
        if (cum >= p && i + 1 >= (size_t)s->p.min_keep) {
            last = i + 1;
            break;
        }
    }
    s->size = last;
}

static void apply_min_p(sampler *s) {
    float p = s->p.min_p;
    if (p <= 0.0f || s->size == 0) return;
    if (!s->sorted) {
        float max_l = -3.40282347e38f;
        for (size_t i = 0; i < s->size; i++) max_l = fmaxf(max_l, s->cand[i].logit);
        const float min_l = max_l + logf(p);
        size_t n = 0;
        for (size_t i = 0; i < s->size; i++)
            if (s->cand[i].logit >= min_l) s->tmp[n++] = s->cand[i];
        if (n > 0 && n >= (size_t)s->p.min_keep) {
            memcpy(s->cand, s->tmp, sizeof *s->cand * n);
            s->size = n;
            return;
        }
        sort_prefix(s, s->size);
    }
    const float min_l = s->cand[0].logit + logf(p);
    size_t i = 1;
    for (; i < s->size; i++)
        if (s->cand[i].logit < min_l && i >= (size_t)s->p.min_keep) break;
    s->size = i;
}

int32_t sampler_argmax(const float *logits, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (logits[i] > logits[b]) b = i;
    return b;
}

/* the calling thread's CPU time: the mask is single-threaded work, and on a shared machine wall
 * time would also count the time slices other processes took */
static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The mask over the penalised candidates (id order, unsorted): the allowed ones the chain needs,
 * found in the chain's order (sampler_mask in sampler.h). Leaves either the best `want` allowed
 * candidates sorted (greedy: 1, top-k: k), or every allowed candidate in id order. */
static void apply_mask(sampler *s, bool greedy) {
    uint64_t t0 = now_ns();
    const sampler_mask *m = &s->mask;
    size_t want = greedy ? 1 : s->p.top_k > 0 ? (size_t)s->p.top_k : 0;
    if (want > s->size) want = s->size;
    if (greedy && s->size) { /* the argmax first: the model usually wants an allowed token */
        size_t best = 0;
        for (size_t i = 1; i < s->size; i++)
            if (s->cand[i].logit > s->cand[best].logit) best = i;
        if (m->allow(m->ud, s->cand[best].id)) {
            s->cand[0] = s->cand[best];
            s->size = 1;
            s->sorted = true;
            goto out;
        }
    }
    if (want > 0) {
        size_t N = want * 4 > 256 ? want * 4 : 256, got = 0;
        if (N > s->size) N = s->size;
        top_k_select(s->cand, s->size, N, s->tmp, s->tmp2);
        for (size_t i = 0; i < N && got < want; i++)
            if (m->allow(m->ud, s->tmp[i].id)) s->tmp2[got++] = s->tmp[i];
        if (got == want || N == s->size) {
            memcpy(s->cand, s->tmp2, sizeof *s->cand * got);
            s->size = got;
            s->sorted = true;
            goto out;
        }
    }
    if (!s->bits &&
        !(s->bits = rl_malloc(sizeof(uint32_t) * (size_t)((s->n_vocab + 31) / 32), "token mask"))) {
        s->size = 0;
        goto out;
    }
    memset(s->bits, 0, sizeof(uint32_t) * (size_t)((s->n_vocab + 31) / 32));
    m->fill(m->ud, s->bits);
    size_t n = 0;
    for (size_t i = 0; i < s->size; i++) {
        int32_t id = s->cand[i].id;
        if (s->bits[id >> 5] >> (id & 31) & 1) s->cand[n++] = s->cand[i];
    }
    s->size = n;
    s->sorted = false;
out:
    s->mask_calls++;
    s->mask_ns += now_ns() - t0;
}

/* log-softmax bookkeeping of the penalised logits (sampler_set_logprobs) */
static void record_logprobs(sampler *s) {
    float mx = s->cand[0].logit;
    for (size_t i = 0; i < s->size; i++) {
        s->lp_logits[i] = s->cand[i].logit;
        if (s->cand[i].logit > mx) mx = s->cand[i].logit;
    }
    double sum = 0;
    for (size_t i = 0; i < s->size; i++) sum += exp((double)s->cand[i].logit - mx);
    /* sum >= 1: the largest logit's term is exp(0) (size is the whole vocabulary here) */
    // cppcheck-suppress invalidFunctionArg
    s->lp_logz = mx + log(sum);
    int n = 0, k = s->lp_n;
    for (size_t i = 0; i < s->size && k > 0; i++) { /* the k best, insertion into a sorted list */
        float l = s->cand[i].logit;
        if (n == k && !(l > s->lp.top_logprob[n - 1])) continue;
        int j = n < k ? n++ : k - 1;
        while (j > 0 && l > s->lp.top_logprob[j - 1]) {
            s->lp.top_logprob[j] = s->lp.top_logprob[j - 1];
            s->lp.top_id[j] = s->lp.top_id[j - 1];
            j--;
        }
        s->lp.top_logprob[j] = l;
        s->lp.top_id[j] = s->cand[i].id;
    }
    s->lp.n_top = n;
    for (int i = 0; i < n; i++) s->lp.top_logprob[i] = (float)(s->lp.top_logprob[i] - s->lp_logz);
}

static void set_logprob_token(sampler *s, int32_t id) {
    s->lp.token = id;
    s->lp.logprob = id >= 0 && id < s->n_vocab ? (float)(s->lp_logits[id] - s->lp_logz) : 0.0f;
}

/* Run the chain up to (not including) the draw. Returns false for greedy (winner in cand[0],
 * or size 0 when the mask allowed nothing). `lp`: record the log-probabilities. */
static bool run_chain(sampler *s, const float *logits, bool lp) {
    for (int32_t i = 0; i < s->n_vocab; i++) s->cand[i] = (sampler_cand){i, logits[i], 0.0f};
    s->size = (size_t)s->n_vocab;
    s->sorted = false;
    apply_penalties(s);
    if (lp && s->lp_n >= 0) record_logprobs(s);
    if (s->has_mask) apply_mask(s, s->p.temp <= 0.0f);
    if (s->size == 0) return false;
    if (s->p.temp <= 0.0f) {
        size_t best = 0;
        for (size_t i = 1; i < s->size && !s->sorted; i++)
            if (s->cand[i].logit > s->cand[best].logit) best = i;
        s->cand[0] = s->cand[best];
        s->cand[0].p = 1.0f;
        s->size = 1;
        return false;
    }
    if (s->p.top_k > 0) {
        size_t k = (size_t)s->p.top_k < s->size ? (size_t)s->p.top_k : s->size;
        if (!s->sorted) sort_prefix(s, k);
        s->size = k;
    }
    apply_top_p(s);
    apply_min_p(s);
    for (size_t i = 0; i < s->size; i++) s->cand[i].logit /= s->p.temp;
    return true;
}

/* dist: probabilities in float, sums in double (llama_sampler_dist_apply). */
static size_t dist_probs(sampler *s, double *sum_out) {
    const float max_l = max_logit(s);
    double sum = 0.0;
    for (size_t i = 0; i < s->size; i++) {
        float p = expf(s->cand[i].logit - max_l);
        s->cand[i].p = p;
        sum += p;
    }
    *sum_out = sum;
    return s->size;
}

static int32_t draw(sampler *s, const float *logits) {
    if (!run_chain(s, logits, true)) return s->size ? s->cand[0].id : -1;
    if (s->size == 0) return -1;
    if (s->size == 1) {
        (void)rl_mt19937_uniform(&s->rng);
        return s->cand[0].id;
    }
    double sum;
    dist_probs(s, &sum);
    const double target = sum * rl_mt19937_uniform(&s->rng);
    double run = 0.0;
    for (size_t i = 0; i < s->size; i++) {
        run += s->cand[i].p;
        if (run >= target) return s->cand[i].id;
    }
    return s->cand[s->size - 1].id;
}

int32_t sampler_sample(sampler *s, const float *logits) {
    int32_t t = draw(s, logits);
    if (s->lp_n >= 0) set_logprob_token(s, t);
    return t;
}

size_t sampler_candidates(sampler *s, const float *logits, const sampler_cand **out) {
    *out = s->cand;
    if (!run_chain(s, logits, false)) return s->size ? 1 : 0;
    if (s->size == 1) {
        s->cand[0].p = 1.0f;
        return 1;
    }
    double sum;
    dist_probs(s, &sum);
    for (size_t i = 0; i < s->size; i++) s->cand[i].p = (float)(s->cand[i].p / sum);
    return s->size;
}

/* ---- stop strings ------------------------------------------------------------------------ */

int stopper_init(stopper *s, const char *const *stops, int n) {
    memset(s, 0, sizeof *s);
    if (n <= 0) return 0;
    s->stops = rl_calloc((size_t)n, sizeof *s->stops, "stop strings");
    if (!s->stops) return -1;
    for (int i = 0; i < n; i++) {
        if (!stops[i] || !stops[i][0]) continue;
        if (!(s->stops[s->n_stops] = strdup(stops[i]))) {
            stopper_free(s);
            return rl_seterr("out of memory (stop strings)");
        }
        size_t l = strlen(stops[i]);
        if (l > s->max_len) s->max_len = l;
        s->n_stops++;
    }
    return 0;
}

void stopper_free(stopper *s) {
    for (int i = 0; i < s->n_stops; i++) free(s->stops[i]);
    free(s->stops);
    free(s->held);
    memset(s, 0, sizeof *s);
}

bool stopper_push(stopper *s, const char *text, size_t n, const char **out, size_t *out_len) {
    *out = text;
    *out_len = n;
    if (s->n_stops == 0 || s->hit) {
        if (s->hit) *out_len = 0;
        return false;
    }
    if (s->n_held + n + 1 > s->cap) {
        size_t cap = (s->n_held + n + 1) * 2;
        char *h = realloc(s->held, cap);
        if (!h) { /* cannot hold: release everything unchecked rather than lose text */
            return false;
        }
        s->held = h;
        s->cap = cap;
    }
    memcpy(s->held + s->n_held, text, n);
    s->n_held += n;
    /* earliest complete stop string */
    size_t first = SIZE_MAX;
    for (int i = 0; i < s->n_stops; i++) {
        const char *m = memmem(s->held, s->n_held, s->stops[i], strlen(s->stops[i]));
        if (m && (size_t)(m - s->held) < first) first = (size_t)(m - s->held);
    }
    *out = s->held;
    if (first != SIZE_MAX) {
        *out_len = first;
        s->n_held = 0;
        s->hit = true;
        return true;
    }
    /* hold the longest suffix that is a prefix of some stop string */
    size_t hold = 0;
    for (int i = 0; i < s->n_stops; i++) {
        size_t l = strlen(s->stops[i]);
        for (size_t k = (l - 1 < s->n_held ? l - 1 : s->n_held); k > hold; k--)
            if (!memcmp(s->held + s->n_held - k, s->stops[i], k)) {
                hold = k;
                break;
            }
    }
    size_t emit = s->n_held - hold;
    /* the caller reads out[0..emit) before the next push; move the held tail to the front then */
    *out_len = emit;
    if (emit) {
        /* copy the emitted part aside: shift after returning is not possible, so emit from a
         * second region at the end of the buffer */
        if (s->cap < 2 * s->n_held + 1) {
            char *h = realloc(s->held, 2 * s->n_held + 1);
            if (!h) return false;
            s->held = h;
            s->cap = 2 * s->n_held + 1;
        }
        char *o = s->held + s->n_held;
        memcpy(o, s->held, emit);
        memmove(s->held, s->held + emit, hold);
        s->n_held = hold;
        *out = o;
    }
    return false;
}

void stopper_flush(stopper *s, const char **out, size_t *out_len) {
    *out = s->held ? s->held : "";
    *out_len = s->hit ? 0 : s->n_held;
    s->n_held = 0;
}
