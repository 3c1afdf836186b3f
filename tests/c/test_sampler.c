/* test_sampler.c — unit tests of src/text/sampler.c: mt19937 reference values, chain edge cases,
 * penalty history, stop strings. The distribution tests are in tests/test_sampler.py. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "base/common.h"
#include "text/sampler.h"

static void test_mt19937(void) {
    rl_mt19937 m;
    rl_mt19937_seed(&m, 5489u); /* std::mt19937's default seed */
    uint32_t first = rl_mt19937_next(&m), v = first;
    for (int i = 1; i < 10000; i++) v = rl_mt19937_next(&m);
    CHECK(first == 3499211612u, "first output %u", first);
    CHECK(v == 4123659995u, "10000th output %u (C++ [rand.predef])", v);
    rl_mt19937_seed(&m, 42);
    for (int i = 0; i < 100000; i++) {
        double u = rl_mt19937_uniform(&m);
        if (!(u >= 0.0 && u < 1.0)) {
            CHECK(0, "uniform out of range: %.17g", u);
            break;
        }
    }
}

static void test_chain(void) {
    float lg[6] = {1.0f, 5.0f, 4.0f, -2.0f, 5.0f, 0.0f};
    sampler_params p = sampler_default_params();
    p.temp = 0;
    sampler *s = sampler_new(&p, 6);
    CHECK(sampler_sample(s, lg) == 1, "greedy picks the lowest id of a tie");
    sampler_free(s);

    p = sampler_default_params();
    p.top_k = 1;
    p.seed = 7;
    s = sampler_new(&p, 6);
    for (int i = 0; i < 50; i++) {
        int32_t t = sampler_sample(s, lg);
        if (t != 1) {
            CHECK(0, "top-k 1 gave %d", t);
            break;
        }
    }
    CHECK(sampler_seed(s) == 7, "seed kept");
    sampler_free(s);

    /* min-p keeps only tokens within a factor of the best */
    p = sampler_default_params();
    p.top_k = 0;
    p.top_p = 1;
    p.min_p = 0.5f; /* exp(-0.69): 5 and 5 stay, 4 (e^-1 = 0.37) goes */
    s = sampler_new(&p, 6);
    const sampler_cand *c;
    size_t n = sampler_candidates(s, lg, &c);
    CHECK(n == 2 && c[0].id == 1 && c[1].id == 4, "min-p: n=%zu", n);
    CHECK(n == 2 && c[0].p > 0.49f && c[0].p < 0.51f, "min-p probabilities");
    sampler_free(s);

    /* ties are ordered by ascending id, whatever sort is used (qsort for short lists, radix for
     * long ones) */
    {
        enum { NV = 1000 };
        static float flat[NV];
        for (int i = 0; i < NV; i++) flat[i] = (i % 3 == 0) ? 1.0f : 0.5f;
        sampler_params q = sampler_default_params();
        q.top_k = 0;
        q.min_p = 0;
        q.top_p = 0.5f;
        q.temp = 1;
        sampler *t = sampler_new(&q, NV);
        const sampler_cand *cc;
        size_t m = sampler_candidates(t, flat, &cc);
        bool ok = m > 1;
        for (size_t j = 1; j < m; j++)
            if (!(cc[j - 1].logit > cc[j].logit ||
                  (cc[j - 1].logit == cc[j].logit && cc[j - 1].id < cc[j].id)))
                ok = false;
        CHECK(ok && cc[0].id == 0 && cc[1].id == 3, "tie order (n=%zu)", m);
        q.top_k = 300;
        q.top_p = 1;
        sampler_free(t);
        t = sampler_new(&q, NV);
        m = sampler_candidates(t, flat, &cc);
        CHECK(m == 300 && cc[0].id == 0 && cc[299].id == 897, "top-k ties by id (n=%zu, last %d)", m,
              m ? cc[m - 1].id : -1);
        sampler_free(t);
    }

    /* repetition penalty over the last N tokens only */
    p = sampler_default_params();
    p.temp = 0;
    p.repeat_penalty = 2.0f;
    p.repeat_last_n = 2;
    s = sampler_new(&p, 6);
    sampler_accept(s, 1);
    sampler_accept(s, 4); /* both 5.0 tokens penalised to 2.5: 4.0 wins */
    CHECK(sampler_sample(s, lg) == 2, "penalised");
    sampler_accept(s, 0);
    sampler_accept(s, 0); /* 1 and 4 left the window */
    CHECK(sampler_sample(s, lg) == 1, "window slid");
    sampler_reset(s);
    CHECK(sampler_sample(s, lg) == 1, "reset");
    sampler_free(s);

    /* presence / frequency penalties (OpenAI form) */
    p = sampler_default_params();
    p.temp = 0;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.3f;
    s = sampler_new(&p, 6);
    sampler_accept(s, 1);
    sampler_accept(s, 4);
    sampler_accept(s, 4); /* 1: 5 - 0.8 = 4.2; 4: 5 - 1.1 = 3.9 */
    CHECK(sampler_sample(s, lg) == 1, "presence/frequency");
    sampler_free(s);
}

static char *push_all(stopper *st, const char *const *chunks, int n, bool *hit) {
    static char out[256];
    size_t len = 0;
    *hit = false;
    for (int i = 0; i < n && !*hit; i++) {
        const char *o;
        size_t ol;
        *hit = stopper_push(st, chunks[i], strlen(chunks[i]), &o, &ol);
        memcpy(out + len, o, ol);
        len += ol;
    }
    if (!*hit) {
        const char *o;
        size_t ol;
        stopper_flush(st, &o, &ol);
        memcpy(out + len, o, ol);
        len += ol;
    }
    out[len] = 0;
    return out;
}

static void test_stop(void) {
    const char *stops[] = {"</s>", "STOP", ""};
    stopper st;
    bool hit;
    CHECK(stopper_init(&st, stops, 3) == 0, "init");
    const char *a[] = {"hello <", "/", "s> world"};
    CHECK(!strcmp(push_all(&st, a, 3, &hit), "hello ") && hit, "split stop");
    stopper_free(&st);

    stopper_init(&st, stops, 3);
    const char *b[] = {"a </x> S", "TO", "N", "E"};
    CHECK(!strcmp(push_all(&st, b, 4, &hit), "a </x> STONE") && !hit, "near misses released");
    stopper_free(&st);

    stopper_init(&st, stops, 3);
    const char *c[] = {"ends with ST"};
    CHECK(!strcmp(push_all(&st, c, 1, &hit), "ends with ST") && !hit, "flush held");
    stopper_free(&st);

    /* held text is released as soon as it cannot match */
    stopper_init(&st, stops, 3);
    const char *o;
    size_t ol;
    stopper_push(&st, "x</", 3, &o, &ol);
    CHECK(ol == 1 && o[0] == 'x', "partial held: %zu", ol);
    stopper_push(&st, "y", 1, &o, &ol);
    CHECK(ol == 3 && !memcmp(o, "</y", 3), "released: %zu", ol);
    stopper_free(&st);

    stopper_init(&st, NULL, 0);
    stopper_push(&st, "abc", 3, &o, &ol);
    CHECK(ol == 3, "no stops: passthrough");
    stopper_free(&st);
}

int main(void) {
    test_mt19937();
    test_chain();
    test_stop();
    return check_done("test_sampler");
}
