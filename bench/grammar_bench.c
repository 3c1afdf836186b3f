/* grammar_bench.c — what the grammar mask costs per sampled token (bench/grammar_bench.sh builds and
 * runs it; docs/SERVER.md "Structured outputs" quotes it).
 *
 * For a tokenizer (a GGUF with one: models/default.gguf, tests/fixtures/qwen3-vocab.gguf = the 80B
 * models' 151,936-token vocabulary) and a few schemas, it samples whole outputs with the real
 * sampler and a grammar mask, from synthetic logits, two ways:
 *   - "agree": a model that mostly wants what the grammar allows (one allowed token, picked at
 *     random, gets +12 over N(0, 2) noise; its bytes are not timed) — a trained model's case, where
 *     the first candidate tested is usually allowed;
 *   - "ignore": N(0, 2) noise only — a model that ignores the grammar, so the top candidates are
 *     mostly refused and the sampler falls back to the full mask (the trie walk): the worst case.
 * with the server's default sampling (temperature 0.7, top-k 20, top-p 0.8) and greedy. It reports
 * the mask's nanoseconds per token (sampler_mask_stats: the lazy tests plus any full masks), the
 * sampler's own time without a mask for scale, and the share of tokens that needed a full mask.
 * Usage: grammar_bench GGUF [tokens per schema (400)] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/common.h"
#include "text/grammar.h"
#include "text/jsonschema.h"
#include "text/sampler.h"
#include "text/tokenizer.h"

static const char *SCHEMAS[][2] = {
    {"person", "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"},"
               "\"email\":{\"type\":\"string\"},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}},"
               "\"required\":[\"name\",\"age\",\"email\",\"tags\"],\"additionalProperties\":false}"},
    {"json_object", "{\"type\":\"object\"}"},
    {"enums+anyOf", "{\"type\":\"object\",\"properties\":{\"kind\":{\"enum\":[\"alpha\",\"beta\",\"gamma\"]},\"v\":{\"anyOf\":"
                    "[{\"type\":\"number\"},{\"type\":\"boolean\"},{\"type\":\"null\"}]},\"xs\":{\"type\":\"array\",\"items\":"
                    "{\"type\":\"integer\"},\"maxItems\":8}},\"required\":[\"kind\",\"v\",\"xs\"],\"additionalProperties\":false}"},
};

static uint64_t rs = 88172645463325252ull;
static double urand(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (double)(rs >> 11) / 9007199254740992.0;
}
static float gauss(void) { return (float)(sqrt(-2 * log(urand() + 1e-300)) * cos(6.283185307179586 * urand())); }

/* thread CPU time: this machine may be shared, and the work is one thread's */
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct {
    double mask_ns, chain_ns, masked_ns; /* per token: inside the mask; the sampler without / with it */
    long tokens, fills;
    double nodes_per_fill;
} result;

static result run(const grammar *g, const gvocab *v, int32_t nv, int tokens, bool agree, bool greedy) {
    result r = {0};
    sampler_params p = sampler_default_params();
    p.temp = greedy ? 0.0f : 0.7f, p.top_k = 20, p.top_p = 0.8f, p.min_p = 0.0f, p.seed = 7;
    sampler *s = sampler_new(&p, nv), *plain = sampler_new(&p, nv);
    gmatch *m = gmatch_new(g, v);
    sampler_mask mk = gmatch_sampler_mask(m);
    sampler_set_mask(s, &mk);
    float *lg = malloc(sizeof(float) * (size_t)nv);
    uint32_t *bits = malloc(sizeof(uint32_t) * (size_t)((nv + 31) / 32));
    gmatch_stats st0, st1;
    gmatch_get_stats(m, &st0);
    double chain = 0, masked = 0;
    while (r.tokens < tokens) {
        if (gmatch_done(m)) gmatch_reset(m);
        for (int32_t i = 0; i < nv; i++) lg[i] = 2.0f * gauss();
        if (agree) { /* one allowed token stands out (untimed) */
            size_t n = gmatch_fill(m, bits), pick = (size_t)(urand() * (double)n), k = 0;
            for (int32_t i = 0; i < nv && n; i++)
                if (bits[i >> 5] >> (i & 31) & 1 && k++ == pick) lg[i] += 12.0f;
        }
        gmatch_get_stats(m, &st1);
        long fills_before = (long)st1.fills;
        double t0 = now();
        (void)sampler_sample(plain, lg);
        chain += now() - t0;
        t0 = now();
        int32_t t = sampler_sample(s, lg);
        masked += now() - t0;
        gmatch_get_stats(m, &st1);
        r.fills += (long)st1.fills - fills_before;
        if (t < 0 || gmatch_accept(m, t)) gmatch_reset(m); /* end of generation: the next output */
        r.tokens++;
    }
    uint64_t calls, ns;
    sampler_mask_stats(s, &calls, &ns);
    r.mask_ns = (double)ns / (double)r.tokens;
    r.chain_ns = chain * 1e9 / (double)r.tokens;
    r.masked_ns = masked * 1e9 / (double)r.tokens;
    (void)st0;
    free(lg);
    free(bits);
    gmatch_free(m);
    sampler_free(s);
    sampler_free(plain);
    return r;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: grammar_bench GGUF [tokens per schema]\n");
        return 2;
    }
    int tokens = argc > 2 ? atoi(argv[2]) : 400;
    tokenizer *tok = tokenizer_load_file(argv[1]);
    if (!tok) {
        fprintf(stderr, "grammar_bench: %s\n", rl_lasterr());
        return 1;
    }
    double t0 = now();
    gvocab *v = gvocab_new(tok);
    double tv = now() - t0;
    int32_t nv = gvocab_n_vocab(v);
    printf("# grammar mask cost: %s (%d tokens; token trie built in %.1f ms)\n\n", argv[1], nv, tv * 1e3);
    printf("| schema | model | sampling | sampler, no mask us/token | sampler + mask us/token | mask overhead us/token | "
           "of which in the mask | tokens needing a full mask |\n|---|---|---|---:|---:|---:|---:|---:|\n");
    for (size_t i = 0; i < sizeof SCHEMAS / sizeof SCHEMAS[0]; i++) {
        cJSON *js = cJSON_Parse(SCHEMAS[i][1]);
        grammar *g = grammar_new();
        char err[256];
        int root = jsonschema_compile(g, js, err, sizeof err);
        cJSON_Delete(js);
        if (root < 0 || grammar_finish(g, root)) {
            fprintf(stderr, "grammar_bench: %s: %s\n", SCHEMAS[i][0], root < 0 ? err : rl_lasterr());
            return 1;
        }
        for (int agree = 1; agree >= 0; agree--)
            for (int greedy = 0; greedy <= 1; greedy++) {
                result r = run(g, v, nv, tokens, agree, greedy);
                printf("| %s | %s | %s | %.1f | %.1f | %.1f | %.1f | %.1f %% |\n", SCHEMAS[i][0], agree ? "agree" : "ignore",
                       greedy ? "greedy" : "t0.7 k20 p0.8", r.chain_ns / 1e3, r.masked_ns / 1e3,
                       (r.masked_ns - r.chain_ns) / 1e3, r.mask_ns / 1e3, 100.0 * (double)r.fills / (double)r.tokens);
                fflush(stdout);
            }
        grammar_free(g);
    }
    gvocab_free(v);
    tokenizer_free(tok);
    return 0;
}
