/* tool_sampler.c — test bridge for tests/test_sampler.py.
 *
 * Each stdin line is a JSON object:
 *   {"logits": [...], "temp": T, "top_k": K, "top_p": P, "min_p": M, "repeat_penalty": R,
 *    "repeat_last_n": N, "presence_penalty": A, "frequency_penalty": F, "seed": S,
 *    "history": [ids accepted before sampling], "mode": "draws" | "counts" | "cands",
 *    "n": number of draws, "accept_drawn": bool}
 * and gets one JSON line back:
 *   draws:  {"ids": [...]}                 the n sampled ids, in order
 *   counts: {"counts": [...]}              histogram over the vocabulary of n draws
 *   cands:  {"ids": [...], "p": [...]}     the final draw's candidates and probabilities
 *   uniform: {"u": [...]}                  n doubles of std::uniform_real_distribution<double>
 *                                          over std::mt19937(seed) (no logits needed)
 * Missing settings default to "off" (temp 1, no truncation, no penalties, seed 0). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/common.h"
#include "text/sampler.h"

static double num(const cJSON *o, const char *k, double def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : def;
}

int main(void) {
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, stdin)) > 0) {
        cJSON *o = cJSON_ParseWithLength(line, (size_t)len);
        const cJSON *lg = cJSON_GetObjectItemCaseSensitive(o, "logits");
        const cJSON *md = cJSON_GetObjectItemCaseSensitive(o, "mode");
        if (cJSON_IsString(md) && !strcmp(md->valuestring, "uniform")) {
            rl_mt19937 r;
            rl_mt19937_seed(&r, (uint32_t)num(o, "seed", 0));
            long n = (long)num(o, "n", 1);
            printf("{\"u\": [");
            for (long j = 0; j < n; j++) printf("%s%.17g", j ? ", " : "", rl_mt19937_uniform(&r));
            printf("]}\n");
            cJSON_Delete(o);
            continue;
        }
        if (!cJSON_IsArray(lg)) {
            puts("{\"error\": \"no logits\"}");
            cJSON_Delete(o);
            continue;
        }
        int V = cJSON_GetArraySize(lg);
        float *logits = malloc(sizeof(float) * (size_t)V);
        int i = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, lg) logits[i++] = (float)e->valuedouble;
        sampler_params p = {
            .temp = (float)num(o, "temp", 1.0),
            .top_k = (int32_t)num(o, "top_k", 0),
            .top_p = (float)num(o, "top_p", 1.0),
            .min_p = (float)num(o, "min_p", 0.0),
            .repeat_penalty = (float)num(o, "repeat_penalty", 1.0),
            .repeat_last_n = (int32_t)num(o, "repeat_last_n", 64),
            .presence_penalty = (float)num(o, "presence_penalty", 0.0),
            .frequency_penalty = (float)num(o, "frequency_penalty", 0.0),
            .seed = (uint32_t)num(o, "seed", 0),
            .min_keep = (int32_t)num(o, "min_keep", 0),
        };
        sampler *s = sampler_new(&p, V);
        const cJSON *hist = cJSON_GetObjectItemCaseSensitive(o, "history");
        cJSON_ArrayForEach(e, hist) sampler_accept(s, (int32_t)e->valuedouble);
        const cJSON *mode = cJSON_GetObjectItemCaseSensitive(o, "mode");
        const char *m = cJSON_IsString(mode) ? mode->valuestring : "draws";
        long n = (long)num(o, "n", 1);
        bool accept = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "accept_drawn"));
        if (!strcmp(m, "cands")) {
            const sampler_cand *c;
            size_t k = sampler_candidates(s, logits, &c);
            printf("{\"ids\": [");
            for (size_t j = 0; j < k; j++) printf("%s%d", j ? ", " : "", c[j].id);
            printf("], \"p\": [");
            for (size_t j = 0; j < k; j++) printf("%s%.9g", j ? ", " : "", c[j].p);
            printf("]}\n");
        } else if (!strcmp(m, "counts")) {
            long *cnt = calloc((size_t)V, sizeof *cnt);
            for (long j = 0; j < n; j++) {
                int32_t t = sampler_sample(s, logits);
                if (t >= 0 && t < V) cnt[t]++;
                if (accept) sampler_accept(s, t);
            }
            printf("{\"counts\": [");
            for (int j = 0; j < V; j++) printf("%s%ld", j ? ", " : "", cnt[j]);
            printf("]}\n");
            free(cnt);
        } else {
            printf("{\"ids\": [");
            for (long j = 0; j < n; j++) {
                int32_t t = sampler_sample(s, logits);
                if (accept) sampler_accept(s, t);
                printf("%s%d", j ? ", " : "", t);
            }
            printf("]}\n");
        }
        fflush(stdout);
        sampler_free(s);
        free(logits);
        cJSON_Delete(o);
    }
    free(line);
    return 0;
}
