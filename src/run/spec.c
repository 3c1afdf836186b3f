/* spec.c — draft sources and the speculative loop (contract in spec.h; design in
 * docs/SPECULATION.md). */
#include "run/spec.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/common.h"

#define LOOKUP_MATCH_MAX 16 /* how far back a match is measured */
#define LOOKUP_LONG 8       /* auto: a lookup match this long beats the MTP head */
#define MTP_PEND_MAX 64     /* (hidden, next token) pairs waiting for the MTP head */

/* ---- cost-aware K ---------------------------------------------------------------------------
 * A verify of n rows costs c(n) (measured in CPU time: the median of the last COST_RING forwards
 * of n rows, kept across runs, and no more than the prior's 1 + COST_PRIOR_SLOPE (n - 1) steps
 * until COST_TRUST were seen; unmeasured sizes interpolated between measured ones, or
 * extrapolated from a step and the largest measured size, at the prior slope before any; the
 * curve made non-decreasing in n), plus
 * the restore after a rejection and, for MTP, the drafting itself. A draft source's drafts are
 * accepted with probability p each while the previous one was (a geometric run: p is the
 * decayed count of accepted drafts over accepted + rejected, per source and, for lookup, per
 * match-length bucket). K drafts then give E(K) = 1 + p + ... + p^K tokens for c(K + 1) + ...,
 * and a plain step 1 token for c(1): the loop takes the K (0 = a plain step) with the most
 * tokens per second. A source whose best K is 0 is probed with its best K > 0 every
 * PROBE_MIN tokens, doubling to PROBE_MAX while probes fail, so its estimate can recover. */
#define COST_RING 16
#define COST_PRIOR_SLOPE                                                                                     \
    0.35 /* extra rows cost 0.35 steps each until measured (optimistic: a size                               \
            that is never tried is never measured) */
#define COST_TRUST                                                                                           \
    4                   /* samples before a size's own estimate replaces the prior's if                      \
                           higher (1-3 noisy runs can overstate the cost) */
#define ACC_DECAY 0.85  /* weight of the past per verify of a bucket (window ~7) */
#define ACC_PRIOR_W 2.0 /* prior weight (pseudo-drafts) of a bucket's prior p (bucket_prior) */
#define PROBE_MIN 8
#define PROBE_MAX 128
#define STEP_PROBE 16 /* with fewer than 2 steps measured, a plain step after this many verifies */
enum { B_MTP = 0, B_LOOKUP = 1, N_LOOKUP_BUCKETS = 4, N_BUCKETS = 1 + N_LOOKUP_BUCKETS };

typedef struct {
    double a, r;        /* decayed accepted drafts, rejections */
    int skipped, probe; /* tokens since this bucket last drafted (while it had drafts); probe interval */
} acc_bucket;

typedef struct {
    double t[SPEC_DRAFT_MAX + 2][COST_RING]; /* [rows][ring] seconds */
    int n[SPEC_DRAFT_MAX + 2];
    double restore[COST_RING], mtp[COST_RING]; /* a restore; one MTP draft */
    int n_restore, n_mtp;
    acc_bucket b[N_BUCKETS];
} spec_costs;

static void ring_add(double *ring, int *n, double v) { ring[(*n)++ % COST_RING] = v; }

/* On the CPU backend costs are process CPU seconds (all threads), not wall time: on a machine
 * shared with other work, wall time measures the neighbours (a 2-CPU machine at load 12 showed
 * steps of 5 and 15 ms minutes apart, and a verify size timed in a busy spell looked 3x dearer
 * than it is), while the CPU time of a compute-bound forward is its work. Waiting is not counted:
 * where a bounded expert cache reads misses from disk, a verify's extra reads are underestimated.
 * A GPU backend's work is not host CPU time (the host may sleep in a synchronise): wall time. */
static double cost_clock(bool cpu) {
    if (!cpu) return rl_now();
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The cost estimate of a ring: its median. (Not the minimum: the process CPU clock credits another
 * thread's time up to a scheduler tick late, so single readings of a 5 ms forward swing by a few
 * ms both ways and the least of them is an outlier; the median is not.) */
static double ring_est(const double *ring, int n) {
    RL_ASSERT(n > 0); /* callers ask only for a ring that has a sample */
    double v[COST_RING];
    int m = n < COST_RING ? n : COST_RING;
    for (int i = 0; i < m; i++) { /* insertion sort of <= COST_RING values */
        double x = ring[i];
        int j = i;
        for (; j > 0 && v[j - 1] > x; j--) v[j] = v[j - 1];
        v[j] = x;
    }
    /* v[0..m) is sorted and m >= 1; cppcheck does not track the insertion sort's writes */
    // cppcheck-suppress uninitvar
    return m % 2 ? v[m / 2] : 0.5 * (v[m / 2 - 1] + v[m / 2]);
}

/* c(1): measured, else from the smallest measured verify and the prior slope, else 1 (all costs
 * then in steps) */
static double cost_step(const spec_costs *cm) {
    if (cm->n[1]) return ring_est(cm->t[1], cm->n[1]);
    for (int m = 2; m <= SPEC_DRAFT_MAX + 1; m++)
        if (cm->n[m]) return ring_est(cm->t[m], cm->n[m]) / (1 + COST_PRIOR_SLOPE * (m - 1));
    return 1.0;
}

/* a measured size's estimate: its ring, capped by the prior until COST_TRUST samples */
static double size_est(const spec_costs *cm, int rows, double c1) {
    RL_ASSERT(rows >= 1 && rows <= SPEC_DRAFT_MAX + 1);
    double m = ring_est(cm->t[rows], cm->n[rows]), prior = c1 * (1 + COST_PRIOR_SLOPE * (rows - 1));
    return rows > 1 && cm->n[rows] < COST_TRUST && prior < m ? prior : m;
}

/* c(rows), in the unit of cost_step */
static double cost_rows(const spec_costs *cm, int rows) {
    double c1 = cost_step(cm);
    if (cm->n[rows]) return size_est(cm, rows, c1);
    int lo = 1, hi = 0;
    for (int m = rows - 1; m > 1; m--)
        if (cm->n[m]) {
            lo = m;
            break;
        }
    for (int m = rows + 1; m <= SPEC_DRAFT_MAX + 1; m++)
        if (cm->n[m]) {
            hi = m;
            break;
        }
    double clo = lo == 1 ? c1 : size_est(cm, lo, c1);
    if (hi) return clo + (size_est(cm, hi, c1) - clo) * (rows - lo) / (hi - lo);
    double slope = COST_PRIOR_SLOPE * c1;
    if (lo > 1 && clo > c1) slope = (clo - c1) / (lo - 1);
    return clo + slope * (rows - lo);
}

double spec_rate(const double *cost, int K, double p, double draft_cost, double restore_cost) {
    double e = 1, pk = 1;
    for (int i = 1; i <= K; i++) pk *= p, e += pk;
    return e / (cost[K + 1] + draft_cost * K + (K > 0 ? (1 - pk) * restore_cost : 0));
}

int spec_best_k(const double *cost, int kmin, int kmax, double p, double draft_cost, double restore_cost) {
    int best = kmin;
    double br = spec_rate(cost, kmin, p, draft_cost, restore_cost);
    for (int k = kmin + 1; k <= kmax; k++) {
        double r = spec_rate(cost, k, p, draft_cost, restore_cost);
        if (r > br) best = k, br = r;
    }
    return best;
}

/* Prior p per bucket before its drafts were seen: MTP 0.5; lookup by match length (a longer match
 * is more likely a copy): <= 2 tokens 0.4, 3-5 0.55, 6-11 0.7, >= 12 0.85 */
static const double bucket_prior[N_BUCKETS] = {0.5, 0.4, 0.55, 0.7, 0.85};

static double bucket_p(const acc_bucket *b, int bi) {
    return (b->a + ACC_PRIOR_W * bucket_prior[bi]) / (b->a + b->r + ACC_PRIOR_W);
}

static void bucket_update(acc_bucket *b, int K, int acc) {
    b->a = b->a * ACC_DECAY + acc;
    b->r = b->r * ACC_DECAY + (acc < K);
    b->skipped = 0;
    if (acc > 0) b->probe = PROBE_MIN;
    else b->probe = b->probe * 2 < PROBE_MAX ? b->probe * 2 : PROBE_MAX;
}

static int lookup_bucket(int match) {
    return B_LOOKUP + (match <= 2 ? 0 : match <= 5 ? 1 : match <= 11 ? 2 : 3);
}

/* The best K for bucket b with at most kmax drafts (at least kmin when it drafts at all);
 * *rate: its tokens per second (per step before a step was measured). A bucket whose best is 0
 * drafts anyway (a probe) once it has skipped `probe` tokens. */
static int choose_k(spec_costs *cm, int bi, int kmin, int kmax, double *rate) {
    RL_ASSERT(kmax >= 0 && kmax <= SPEC_DRAFT_MAX); /* spec_check bounds draft_max: cost[1..kmax + 1] */
    double cost[SPEC_DRAFT_MAX + 2];
    for (int n = 1; n <= kmax + 1; n++) {
        cost[n] = cost_rows(cm, n);
        if (n > 1 && cost[n] < cost[n - 1]) cost[n] = cost[n - 1]; /* more rows never cost less */
    }
    double c1 = cost[1]; /* seconds, or 1 (step units) before a step was measured */
    double dc = bi == B_MTP ? (cm->n_mtp ? ring_est(cm->mtp, cm->n_mtp) : 0.2 * c1) : 0;
    double rc = cm->n_restore ? ring_est(cm->restore, cm->n_restore) : 0.02 * c1;
    acc_bucket *b = &cm->b[bi];
    double p = bucket_p(b, bi);
    int k = spec_best_k(cost, 0, kmax, p, dc, rc);
    if (k < kmin && kmin <= kmax) k = kmin;
    if (k == 0 && kmax > 0 && ++b->skipped >= b->probe) k = spec_best_k(cost, 1, kmax, p, dc, rc);
    *rate = spec_rate(cost, k, p, dc, rc);
    return k;
}

const char *spec_mode_name(int mode) {
    static const char *const n[] = {"none", "lookup", "mtp", "auto"};
    return mode >= 0 && mode < 4 ? n[mode] : "?";
}

int spec_mode_parse(const char *s) {
    for (int m = 0; m < 4; m++)
        if (s && !strcmp(s, spec_mode_name(m))) return m;
    return -1;
}

/* ---- prompt lookup index ------------------------------------------------------------------ */
/* Open addressing, linear probing; key 0 = empty. An n-gram's key packs its tokens 21 bits
 * each (+1, so never 0); tokens >= 2^21 - 1 are not indexed (no vocabulary is that large). */
typedef struct {
    uint64_t *key;
    int32_t *val; /* index of the n-gram's last token in the sequence */
    uint32_t cap, n;
} ngram_map;

struct spec_lookup {
    int32_t *tok;
    int len, cap;
    ngram_map m2, m3;
    uint64_t probes;
};

#define TOK_BITS 21
#define TOK_LIMIT ((1 << TOK_BITS) - 1)

static uint32_t map_slot(uint64_t key, uint32_t cap) {
    return (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & (cap - 1);
}

static int map_put(ngram_map *m, uint64_t key, int32_t val) {
    if (2 * (m->n + 1) > m->cap) {
        uint32_t nc = m->cap ? 2 * m->cap : 1024;
        uint64_t *nk = rl_calloc(nc, sizeof *nk, "lookup index");
        int32_t *nv = rl_malloc(sizeof *nv * nc, "lookup index");
        if (!nk || !nv) {
            free(nk);
            free(nv);
            return -1;
        }
        for (uint32_t i = 0; i < m->cap; i++) {
            if (!m->key[i]) continue;
            uint32_t j = map_slot(m->key[i], nc);
            while (nk[j]) j = (j + 1) & (nc - 1);
            nk[j] = m->key[i];
            nv[j] = m->val[i];
        }
        free(m->key);
        free(m->val);
        m->key = nk, m->val = nv, m->cap = nc;
    }
    uint32_t j = map_slot(key, m->cap);
    while (m->key[j] && m->key[j] != key) j = (j + 1) & (m->cap - 1);
    if (!m->key[j]) m->n++;
    m->key[j] = key;
    m->val[j] = val;
    return 0;
}

static int32_t map_get(const ngram_map *m, uint64_t key, uint64_t *probes) {
    if (!m->cap) return -1;
    uint32_t j = map_slot(key, m->cap);
    for (;;) {
        ++*probes;
        if (!m->key[j]) return -1;
        if (m->key[j] == key) return m->val[j];
        j = (j + 1) & (m->cap - 1);
    }
}

/* key of the n tokens ending at index end; 0 if one cannot be indexed */
static uint64_t ngram_key(const int32_t *t, int end, int n) {
    uint64_t k = 0;
    for (int i = end - n + 1; i <= end; i++) {
        if (t[i] < 0 || t[i] >= TOK_LIMIT) return 0;
        k = (k << TOK_BITS) | (uint64_t)(t[i] + 1);
    }
    return k;
}

spec_lookup *spec_lookup_new(void) { return rl_calloc(1, sizeof(spec_lookup), "lookup index"); }

void spec_lookup_free(spec_lookup *l) {
    if (!l) return;
    free(l->tok);
    free(l->m2.key);
    free(l->m2.val);
    free(l->m3.key);
    free(l->m3.val);
    free(l);
}

void spec_lookup_clear(spec_lookup *l) {
    l->len = 0;
    if (l->m2.cap) memset(l->m2.key, 0, sizeof(uint64_t) * l->m2.cap);
    if (l->m3.cap) memset(l->m3.key, 0, sizeof(uint64_t) * l->m3.cap);
    l->m2.n = l->m3.n = 0;
}

int spec_lookup_len(const spec_lookup *l) { return l->len; }
uint64_t spec_lookup_probes(const spec_lookup *l) { return l->probes; }

int spec_lookup_push(spec_lookup *l, int32_t token) {
    if (l->len == l->cap) {
        int nc = l->cap ? 2 * l->cap : 4096;
        int32_t *t = realloc(l->tok, sizeof(int32_t) * (size_t)nc);
        if (!t) return rl_seterr("out of memory (lookup index)");
        l->tok = t;
        l->cap = nc;
    }
    l->tok[l->len++] = token;
    /* the n-grams that end just before the new token now have a continuation */
    int end = l->len - 2;
    for (int n = 2; n <= 3; n++) {
        if (end - n + 1 < 0) continue;
        uint64_t k = ngram_key(l->tok, end, n);
        if (k && map_put(n == 2 ? &l->m2 : &l->m3, k, end)) return -1;
    }
    return 0;
}

int spec_lookup_draft(const spec_lookup *l, int k, int32_t *out, int *match) {
    if (match) *match = 0;
    int L = l->len;
    int32_t j = -1;
    uint64_t probes = 0;
    for (int n = 3; n >= 2 && j < 0; n--) {
        if (L < n + 1) continue;
        uint64_t key = ngram_key(l->tok, L - 1, n);
        if (key) j = map_get(n == 2 ? &l->m2 : &l->m3, key, &probes);
    }
    ((spec_lookup *)l)->probes += probes; /* statistics only */
    if (j < 0) return 0;
    RL_ASSERT(j < L - 1);
    for (int i = 0; i < k; i++) {
        int v = j + 1 + i; /* in the sequence extended by the drafts: v < L + i */
        out[i] = v < L ? l->tok[v] : out[v - L];
    }
    if (match) {
        int m = 0;
        while (m < LOOKUP_MATCH_MAX && j - m >= 0 && l->tok[j - m] == l->tok[L - 1 - m]) m++;
        *match = m;
    }
    return k;
}

/* ---- the loop ------------------------------------------------------------------------------ */
struct spec {
    engine *e;
    engine_ctx *c;
    int V, D, n_batch;
    spec_lookup *lk;
    engine_snapshot *snaps[SPEC_DRAFT_MAX]; /* row i's state (the last row needs none) */
    float *vlogits;                         /* (K+1) x V verify rows */
    float *vhid;                            /* (K+1) x D their hidden states (for the MTP head) */
    float *mlogits;                         /* V: an MTP draft distribution */
    float *mh;                              /* 2 x D: MTP hidden in/out of a chained draft */
    float *ph;     /* MTP_PEND_MAX x D: pairs (hidden of position q, token at q+1) ... */
    int32_t *ptok; /* ... not yet fed to the head */
    int np;
    float *lasth; /* D: hidden of the last token the context holds */
    bool have_lasth;
    bool cpu_clock; /* costs in process CPU time (the CPU backend) or wall time */
    spec_costs cm;  /* measured forward costs (kept across runs: same context and backend) and
                       acceptance (reset per run) */
};

spec *spec_new(engine *e, engine_ctx *c) {
    spec *s = rl_calloc(1, sizeof *s, "speculation state");
    if (!s) return NULL;
    s->e = e;
    s->c = c;
    s->V = engine_hparams(e)->n_vocab;
    s->D = engine_hparams(e)->n_embd;
    s->n_batch = engine_n_batch(c);
    s->cpu_clock = !strcmp(engine_backend_name(e), "cpu");
    size_t V = (size_t)s->V, D = (size_t)s->D, R = SPEC_DRAFT_MAX + 1;
    s->lk = spec_lookup_new();
    s->vlogits = rl_malloc(sizeof(float) * R * V, "verify logits");
    s->vhid = rl_malloc(sizeof(float) * R * D, "verify hidden states");
    s->mlogits = rl_malloc(sizeof(float) * V, "MTP logits");
    s->mh = rl_malloc(sizeof(float) * 2 * D, "MTP hidden");
    s->ph = rl_malloc(sizeof(float) * MTP_PEND_MAX * D, "MTP pairs");
    s->ptok = rl_malloc(sizeof(int32_t) * MTP_PEND_MAX, "MTP pairs");
    s->lasth = rl_malloc(sizeof(float) * D, "MTP hidden");
    if (!s->lk || !s->vlogits || !s->vhid || !s->mlogits || !s->mh || !s->ph || !s->ptok || !s->lasth) {
        spec_free(s);
        return NULL;
    }
    return s;
}

void spec_free(spec *s) {
    if (!s) return;
    spec_lookup_free(s->lk);
    for (int i = 0; i < SPEC_DRAFT_MAX; i++) engine_snapshot_free(s->snaps[i]);
    free(s->vlogits);
    free(s->vhid);
    free(s->mlogits);
    free(s->mh);
    free(s->ph);
    free(s->ptok);
    free(s->lasth);
    free(s);
}

int spec_check(const spec *s, int mode, int draft_max) {
    if (mode < SPEC_DRAFT_NONE || mode > SPEC_DRAFT_AUTO)
        return rl_seterr("unknown speculation mode %d", mode);
    if (draft_max < 0 || draft_max > SPEC_DRAFT_MAX)
        return rl_seterr("--draft-max %d is out of range: use 1..%d", draft_max, SPEC_DRAFT_MAX);
    if (mode == SPEC_DRAFT_MTP && !engine_has_mtp(s->e)) {
        if (engine_hparams(s->e)->n_nextn > 0)
            return rl_seterr(
                "the %s backend has no MTP head forward yet: use --spec lookup or auto, or --backend cpu",
                engine_backend_name(s->e));
        return rl_seterr("this model has no MTP head (no blk.N.nextn.* tensors): use --spec lookup or auto");
    }
    return 0;
}

/* The draft from an MTP distribution: the sampler's most likely candidate after its whole
 * chain (penalties, top-k, ...; no draw), so a penalty or filter that plain decoding applies
 * also shapes the guess. Only speed depends on it (the history lacks the drafts before it). */
static int32_t mtp_pick(sampler *smp, const float *lg) {
    const sampler_cand *cd;
    size_t n = sampler_candidates(smp, lg, &cd);
    int32_t b = n ? cd[0].id : 0;
    float bp = n ? cd[0].p : 0;
    for (size_t i = 1; i < n; i++)
        if (cd[i].p > bp || (cd[i].p == bp && cd[i].id < b)) b = cd[i].id, bp = cd[i].p;
    return b;
}

static void pend_push(spec *s, const float *h, int32_t tok) {
    size_t D = (size_t)s->D;
    if (s->np == MTP_PEND_MAX) { /* the oldest pair goes: only draft quality depends on it */
        memmove(s->ph, s->ph + D, sizeof(float) * D * (MTP_PEND_MAX - 1));
        memmove(s->ptok, s->ptok + 1, sizeof(int32_t) * (MTP_PEND_MAX - 1));
        s->np--;
    }
    memcpy(s->ph + (size_t)s->np * D, h, sizeof(float) * D);
    s->ptok[s->np++] = tok;
}

/* Feed the waiting pairs to the MTP head, then chain k drafts (each draft's hidden output and
 * token are the next pair). The chained pairs are speculative: *committed is the head's
 * position after the real pairs, to rewind to after the verify. Returns the drafts made; on an
 * engine error the head is switched off for the run (drafts only cost speed). */
static int mtp_draft(spec *s, sampler *smp, int k, int32_t *out, int *committed, bool *use_mtp) {
    size_t D = (size_t)s->D;
    if (s->np == 0 || k <= 0) return 0;
    engine_ctx *c = s->c;
    if (s->np > 1 && engine_mtp(c, s->ph, s->ptok, s->np - 1, NULL, NULL)) goto fail;
    if (engine_mtp(c, s->ph + (size_t)(s->np - 1) * D, s->ptok + s->np - 1, 1, s->mlogits, s->mh)) goto fail;
    s->np = 0;
    *committed = engine_mtp_pos(c);
    out[0] = mtp_pick(smp, s->mlogits);
    for (int i = 1; i < k; i++) {
        float *hin = s->mh + (size_t)((i - 1) & 1) * D, *hout = s->mh + (size_t)(i & 1) * D;
        if (engine_mtp(c, hin, &out[i - 1], 1, s->mlogits, hout)) {
            engine_mtp_rewind(c, *committed);
            return i; /* the drafts so far stand */
        }
        out[i] = mtp_pick(smp, s->mlogits);
    }
    return k;
fail:
    *use_mtp = false;
    s->np = 0;
    return 0;
}

/* Sample the token at position pos from lg and give it to the sink: 0 go on, 1 stop, -1 error. */
static int emit_one(spec *s, sampler *smp, const float *lg, int pos, const spec_sink *sk, spec_result *r,
                    int32_t *tok) {
    int32_t t = sampler_sample(smp, lg);
    *tok = t;
    r->n_sampled++;
    int code = sk->emit(sk->ud, t, pos);
    if (code < 0) return -1;
    if (code > 0) {
        r->sink_code = code;
        return 1;
    }
    if (spec_lookup_push(s->lk, t)) spec_lookup_clear(s->lk); /* oom: lookup finds nothing */
    return 0;
}

static int min_i(int a, int b) { return a < b ? a : b; }

/* One spec_run's loop state, shared by its set-up, choose-draft, verify and accept pieces. */
typedef struct {
    spec *s;
    sampler *smp;
    float *logits; /* the caller's logits: those of the last evaluated row */
    const spec_params *p;
    const spec_sink *sk;
    spec_result *r;
    int dmax, dmin;           /* draft lengths allowed */
    bool use_mtp, use_lookup; /* the draft sources in play (the MTP head may switch off) */
    int k_last, verifies_since_step;
    long long n_go;                   /* tokens the sink took with 0 */
    int32_t rows[SPEC_DRAFT_MAX + 1]; /* the rows of one evaluation: u, then the drafts */
    int32_t u;                        /* the token emitted and not yet evaluated */
    int st;                           /* the last emit_one: 0 go on, 1 stop, -1 error */
} spec_loop;

/* One draft: nd tokens at rows + 1 from src, the MTP head's position to rewind to, its bucket. */
typedef struct {
    int nd, src, committed, bucket;
} spec_draft;

/* Set-up: the draft sources the mode and engine allow, the lookup table of the history, the
 * verify snapshots, the MTP head's last hidden state, the cost model's buckets. 0 or -1. */
static int spec_run_begin(spec_loop *L, const int32_t *history, int n_hist) {
    spec *s = L->s;
    const spec_params *p = L->p;
    engine_ctx *c = s->c;
    size_t D = (size_t)s->D;
    memset(L->r, 0, sizeof *L->r);
    if (spec_check(s, p->mode, p->draft_max)) return -1;
    int dmax = p->draft_max > 0 ? p->draft_max : SPEC_DRAFT_MAX;
    if (dmax > s->n_batch - 1) dmax = s->n_batch - 1;
    bool use_mtp =
        (p->mode == SPEC_DRAFT_MTP || p->mode == SPEC_DRAFT_AUTO) && engine_has_mtp(s->e) && dmax > 0;
    bool use_lookup = (p->mode == SPEC_DRAFT_LOOKUP || p->mode == SPEC_DRAFT_AUTO) && dmax > 0;
    spec_lookup_clear(s->lk);
    if (use_lookup)
        for (int i = 0; i < n_hist; i++)
            if (spec_lookup_push(s->lk, history[i])) return -1;
    for (int i = 0; (use_lookup || use_mtp) && i < dmax; i++)
        if (!s->snaps[i] && !(s->snaps[i] = engine_snapshot_new(c))) return -1;
    s->np = 0;
    s->have_lasth = false;
    if (use_mtp) { /* the head's KV holds this run's pairs only (compact positions) */
        engine_mtp_rewind(c, 0);
        int rows = engine_last_rows(c);
        const float *h = rows > 0 ? engine_last_hidden(c, rows - 1) : NULL;
        if (h) memcpy(s->lasth, h, sizeof(float) * D), s->have_lasth = true;
    }
    int dmin = p->draft_min < dmax ? p->draft_min : dmax;
    if (dmin < 0) dmin = 0;
    for (int b = 0; b < N_BUCKETS; b++) s->cm.b[b] = (acc_bucket){.probe = PROBE_MIN};
    L->dmax = dmax, L->dmin = dmin, L->use_mtp = use_mtp, L->use_lookup = use_lookup;
    return 0;
}

/* Choose-draft for at most kcap drafts behind L->u: fills dr (dr->nd == 0: a plain step). */
static void spec_run_choose(spec_loop *L, int kcap, spec_draft *dr) {
    spec *s = L->s;
    sampler *smp = L->smp;
    const spec_params *p = L->p;
    engine_ctx *c = s->c;
    const int dmin = L->dmin;
    int nd = 0, src = SPEC_DRAFT_NONE, committed = 0, match = 0, bucket = -1;
    int32_t *d = L->rows + 1;
    /* the candidates: lookup's drafts (free: drafted first, then cut to its K) and the MTP
     * head (drafted only when chosen); the one with more tokens per second, if it beats a
     * plain step (auto: a long lookup match wins outright, a copy beats a guess) */
    int k_l = 0, k_m = 0;
    double r_l = 0, r_m = 0;
    if (kcap > 0 && L->use_lookup) {
        nd = spec_lookup_draft(s->lk, kcap, d, &match);
        if (nd) nd = sampler_mask_prefix(smp, d, nd); /* grammar: a refused draft ends the draft */
        if (nd) k_l = choose_k(&s->cm, lookup_bucket(match), dmin, nd, &r_l);
    }
    if (kcap > 0 && L->use_mtp && (nd == 0 || (p->mode == SPEC_DRAFT_AUTO && match < LOOKUP_LONG)))
        k_m = choose_k(&s->cm, B_MTP, dmin, kcap, &r_m);
    if (dmin == 0 && s->cm.n[1] < 2 && k_l + k_m > 0 &&
        ++L->verifies_since_step > STEP_PROBE) /* measure c(1) */
        k_l = k_m = 0, L->verifies_since_step = 0;
    if (k_m > 0 && (k_l == 0 || r_m > r_l)) {
        double t0 = cost_clock(s->cpu_clock);
        nd = mtp_draft(s, smp, k_m, d, &committed, &L->use_mtp);
        if (nd) ring_add(s->cm.mtp, &s->cm.n_mtp, (cost_clock(s->cpu_clock) - t0) / nd);
        int keep = nd ? sampler_mask_prefix(smp, d, nd) : 0; /* grammar: a refused draft ends the draft */
        if (nd && !keep) engine_mtp_rewind(c, committed);
        nd = keep;
        src = nd ? SPEC_DRAFT_MTP : SPEC_DRAFT_NONE;
        bucket = B_MTP;
    } else if (k_l > 0) {
        nd = k_l;
        src = SPEC_DRAFT_LOOKUP;
        bucket = lookup_bucket(match);
    } else {
        nd = 0;
    }
    *dr = (spec_draft){nd, src, committed, bucket};
}

/* A plain step of L->u at P (into a scratch row: a failed step keeps `logits` valid), then the
 * next token. 0 or -1. */
static int spec_run_step(spec_loop *L, int P) {
    spec *s = L->s;
    engine_ctx *c = s->c;
    const spec_sink *sk = L->sk;
    spec_result *r = L->r;
    double t0 = cost_clock(s->cpu_clock);
    if (engine_step(c, L->u, s->vlogits)) return -1;
    ring_add(s->cm.t[1], &s->cm.n[1], cost_clock(s->cpu_clock) - t0);
    memcpy(L->logits, s->vlogits, sizeof(float) * (size_t)s->V);
    r->n_steps++;
    r->n_evaluated++;
    if (sk->kept && sk->kept(sk->ud, &L->u, 1)) return -1;
    if (L->use_mtp) {
        const float *h = engine_last_hidden(c, 0);
        if (h) memcpy(s->lasth, h, sizeof(float) * (size_t)s->D), s->have_lasth = true;
    }
    L->st = emit_one(s, L->smp, L->logits, P + 1, sk, r, &L->u);
    return 0;
}

/* Verify L->u and the dr->nd drafts behind it in one pass, a snapshot after each draft row;
 * the rows' hidden states kept for the MTP head. 0 or -1. */
static int spec_run_verify(spec_loop *L, const spec_draft *dr) {
    spec *s = L->s;
    engine_ctx *c = s->c;
    spec_result *r = L->r;
    size_t D = (size_t)s->D;
    int K = dr->nd;
    engine_snapshot *sn[SPEC_DRAFT_MAX + 1];
    memcpy(sn, s->snaps, sizeof(engine_snapshot *) * (size_t)K);
    sn[K] = NULL; /* keeping every row is the state the verify ends in */
    double t0 = cost_clock(s->cpu_clock);
    if (engine_verify(c, L->rows, K + 1, s->vlogits, sn)) {
        if (dr->src == SPEC_DRAFT_MTP) engine_mtp_rewind(c, dr->committed);
        return -1;
    }
    ring_add(s->cm.t[K + 1], &s->cm.n[K + 1], cost_clock(s->cpu_clock) - t0);
    r->n_verifies++;
    r->n_drafted += K;
    if (dr->src == SPEC_DRAFT_MTP) r->n_drafted_mtp += K;
    else r->n_drafted_lookup += K;
    if (L->use_mtp)
        for (int i = 0; i <= K; i++) {
            const float *h = engine_last_hidden(c, i);
            RL_ASSERT(h);
            memcpy(s->vhid + (size_t)i * D, h, sizeof(float) * D);
        }
    return 0;
}

/* Accept after a verify at P: row i's logits give the token at P + i + 1; the context keeps rows
 * 0..last (the snapshot of row last restored where a draft was refused). 0 or -1. */
static int spec_run_accept(spec_loop *L, const spec_draft *dr, int P) {
    spec *s = L->s;
    engine_ctx *c = s->c;
    const spec_sink *sk = L->sk;
    spec_result *r = L->r;
    size_t V = (size_t)s->V, D = (size_t)s->D;
    const int K = dr->nd, src = dr->src;
    const int32_t *d = L->rows + 1;
    int last = 0, acc = 0;
    for (int i = 0;; i++) {
        int32_t t;
        L->st = emit_one(s, L->smp, s->vlogits + (size_t)i * V, P + i + 1, sk, r, &t);
        last = i;
        bool match_d = i < K && t == d[i];
        if (L->st == 0 && match_d) {
            acc++;
            L->n_go++;
            continue;
        }
        L->u = t;
        break;
    }
    r->n_accepted += acc;
    if (src == SPEC_DRAFT_MTP) r->n_accepted_mtp += acc;
    else r->n_accepted_lookup += acc;
    double t0 = cost_clock(s->cpu_clock);
    if (last < K && engine_snapshot_restore(c, s->snaps[last])) {
        rl_seterr("speculative decoding: restoring a verify snapshot failed (%s); reset the sequence",
                  rl_lasterr());
        return -1;
    }
    if (last < K) ring_add(s->cm.restore, &s->cm.n_restore, cost_clock(s->cpu_clock) - t0);
    r->n_evaluated += last + 1;
    memcpy(L->logits, s->vlogits + (size_t)last * V, sizeof(float) * V);
    if (sk->kept && sk->kept(sk->ud, L->rows, last + 1)) return -1;
    if (L->use_mtp) {
        if (src == SPEC_DRAFT_MTP) engine_mtp_rewind(c, dr->committed);
        for (int i = 0; i < last; i++) pend_push(s, s->vhid + (size_t)i * D, d[i]);
        memcpy(s->lasth, s->vhid + (size_t)last * D, sizeof(float) * D);
        s->have_lasth = true;
    }
    if (L->st == 0) bucket_update(&s->cm.b[dr->bucket], K, acc);
    return 0;
}

int spec_run(spec *s, sampler *smp, float *logits, const int32_t *history, int n_hist, const spec_params *p,
             const spec_sink *sk, spec_result *r) {
    spec_loop L = {.s = s, .smp = smp, .logits = logits, .p = p, .sk = sk, .r = r};
    if (spec_run_begin(&L, history, n_hist)) return -1;
    engine_ctx *c = s->c;
    /* the first token comes from the caller's logits */
    L.st = emit_one(s, smp, logits, engine_pos(c), sk, r, &L.u);
    while (L.st == 0) {
        L.n_go++;
        /* u is emitted and must now be evaluated (at P), possibly with drafts behind it */
        int P = engine_pos(c);
        int kcap = min_i(L.dmax, engine_n_ctx(c) - P - 1);
        /* rows 0..K give K + 1 tokens: no draft past the n_predict-th */
        if (p->n_predict >= 0 && p->n_predict - L.n_go - 1 < kcap) kcap = (int)(p->n_predict - L.n_go - 1);
        if (L.use_mtp && s->have_lasth) pend_push(s, s->lasth, L.u);
        spec_draft dr;
        spec_run_choose(&L, kcap, &dr);
        L.k_last = dr.nd;
        L.rows[0] = L.u;
        if (sk->will_write) sk->will_write(sk->ud, P, L.rows, dr.nd + 1);
        if (dr.nd == 0) {
            if (spec_run_step(&L, P)) goto fail;
        } else if (spec_run_verify(&L, &dr) || spec_run_accept(&L, &dr, P)) {
            goto fail;
        }
    }
    r->k_final = L.k_last;
    return L.st < 0 ? -1 : 0;
fail:
    r->k_final = L.k_last;
    r->sink_code = 0;
    return -1;
}
