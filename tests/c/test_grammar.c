/* test_grammar.c — unit tests of the grammar engine (src/text/grammar*.c, jsonschema.c):
 * hand-worked accept / reject cases per keyword, byte-by-byte feeding (every prefix of a valid
 * text is accepted, the state never dies early), the exact bytes-to-completion, poisoned texts
 * (control characters, bad UTF-8, duplicate keys, trailing bytes, tokens the grammar cannot
 * take), and, with the tokenizers of models/default.gguf and tests/fixtures/qwen3-vocab.gguf: token-by-token
 * feeding, the trie mask equal to testing every token, the sampler's lazy mask equal to the full mask, and
 * the budget rule finishing every random walk within its token limit. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "base/common.h"
#include "text/grammar.h"
#include "text/jsonschema.h"
#include "text/sampler.h"
#include "text/tokenizer.h"

static grammar *compile(const char *schema, char *err, size_t cap) {
    cJSON *s = cJSON_Parse(schema);
    if (!s) {
        snprintf(err, cap, "bad test JSON");
        return NULL;
    }
    grammar *g = grammar_new();
    int root = jsonschema_compile(g, s, err, cap);
    cJSON_Delete(s);
    if (root < 0 || grammar_finish(g, root)) {
        if (root >= 0) snprintf(err, cap, "%s", rl_lasterr());
        grammar_free(g);
        return NULL;
    }
    return g;
}

/* 1: the whole text is a sentence (fed byte by byte: every prefix alive), 0: rejected at some byte
 * or incomplete at the end */
static int matches(const grammar *g, const char *text) {
    gmatch *m = gmatch_new(g, NULL);
    int ok = 1;
    for (size_t i = 0; text[i] && ok; i++) ok = gmatch_feed(m, text + i, 1) == 0;
    if (ok) ok = gmatch_complete(m);
    gmatch_free(m);
    return ok;
}

#define ACCEPT(schema, text)                                                                                 \
    do {                                                                                                     \
        char err_[256];                                                                                      \
        grammar *g_ = compile(schema, err_, sizeof err_);                                                    \
        CHECK(g_ != NULL, "compile %s: %s", schema, err_);                                                   \
        if (g_) CHECK(matches(g_, text), "%s should accept %s", schema, text);                               \
        grammar_free(g_);                                                                                    \
    } while (0)
#define REJECT(schema, text)                                                                                 \
    do {                                                                                                     \
        char err_[256];                                                                                      \
        grammar *g_ = compile(schema, err_, sizeof err_);                                                    \
        CHECK(g_ != NULL, "compile %s: %s", schema, err_);                                                   \
        if (g_) CHECK(!matches(g_, text), "%s should reject %s", schema, text);                              \
        grammar_free(g_);                                                                                    \
    } while (0)
#define REFUSED(schema, word)                                                                                \
    do {                                                                                                     \
        char err_[256] = "";                                                                                 \
        grammar *g_ = compile(schema, err_, sizeof err_);                                                    \
        CHECK(g_ == NULL && strstr(err_, word), "%s should be refused naming %s (got: %s)", schema, word,    \
              err_);                                                                                         \
        grammar_free(g_);                                                                                    \
    } while (0)

static void test_types(void) {
    ACCEPT("{\"type\":\"string\"}", "\"hello \\\"w\\u00e9\\n\"");
    ACCEPT("{\"type\":\"string\"}", "\"caf\xc3\xa9 \xf0\x9f\x98\x80\"");
    REJECT("{\"type\":\"string\"}", "\"bad\x01\"");      /* unescaped control character */
    REJECT("{\"type\":\"string\"}", "\"\xc0\xaf\"");     /* overlong UTF-8 */
    REJECT("{\"type\":\"string\"}", "\"\xed\xa0\x80\""); /* a surrogate in UTF-8 */
    REJECT("{\"type\":\"string\"}", "\"\\x\"");          /* bad escape */
    REJECT("{\"type\":\"string\"}", "\"\\u12g4\"");
    REJECT("{\"type\":\"string\"}", "\"open");
    REJECT("{\"type\":\"string\"}", "\"a\" "); /* nothing after the root */
    ACCEPT("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"\xc3\xa9\\n\"");
    REJECT("{\"type\":\"string\",\"minLength\":2}", "\"a\"");
    REJECT("{\"type\":\"string\",\"maxLength\":3}", "\"abcd\"");
    ACCEPT("{\"type\":\"integer\"}", "-120");
    ACCEPT("{\"type\":\"integer\"}", "0");
    REJECT("{\"type\":\"integer\"}", "1.5");
    REJECT("{\"type\":\"integer\"}", "012");
    REJECT("{\"type\":\"integer\"}", "-");
    ACCEPT("{\"type\":\"number\"}", "-0.25e+10");
    ACCEPT("{\"type\":\"number\"}", "3E7");
    REJECT("{\"type\":\"number\"}", "1.");
    REJECT("{\"type\":\"number\"}", ".5");
    REJECT("{\"type\":\"number\"}", "1e");
    REJECT("{\"type\":\"number\"}", "12345678901234567"); /* more than 16 digits */
    ACCEPT("{\"type\":\"boolean\"}", "false");
    REJECT("{\"type\":\"boolean\"}", "fals");
    REJECT("{\"type\":\"boolean\"}", "True");
    ACCEPT("{\"type\":\"null\"}", "null");
    ACCEPT("{\"type\":[\"string\",\"null\"]}", "null");
    ACCEPT("{\"type\":[\"string\",\"null\"]}", "\"x\"");
    REJECT("{\"type\":[\"string\",\"null\"]}", "1");
    ACCEPT("true", "[1,{\"a\":[null]},\"s\"]");
    ACCEPT("{}", "{\"any\": {\"nested\": [true, false, -1.5e3]}}");
}

static void test_objects(void) {
    const char *s =
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"},"
        "\"nick\":{\"type\":\"string\"}},\"required\":[\"name\",\"age\"],\"additionalProperties\":false}";
    ACCEPT(s, "{\"name\":\"Ann\",\"age\":7}");
    ACCEPT(s, "{\"age\":7,\"name\":\"Ann\",\"nick\":\"A\"}");                     /* any order */
    ACCEPT(s, "{ \"name\" : \"Ann\" ,\n  \"age\" :7 }");                          /* whitespace */
    REJECT(s, "{\"name\":\"Ann\"}");                                              /* missing required */
    REJECT(s, "{\"name\":\"Ann\",\"age\":7,\"name\":\"B\"}");                     /* duplicate key */
    REJECT(s, "{\"name\":\"Ann\",\"age\":7,\"other\":1}");                        /* undeclared key */
    REJECT(s, "{\"name\":\"Ann\",\"age\":\"7\"}");                                /* wrong type */
    REJECT(s, "{\"name\":\"Ann\",\"age\":7,}");                                   /* trailing comma */
    REJECT(s, "{\"name\":\"Ann\",\"age\":7}}");                                   /* trailing byte */
    REJECT(s, "{\"name\":\"Ann\",                                   \"age\":7}"); /* > 24 whitespace bytes */
    const char *extra =
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":"
        "{\"type\":\"boolean\"}}";
    ACCEPT(extra, "{\"a\":1,\"ab\":true,\"\":false}");
    REJECT(extra, "{\"ab\":1}");   /* extra values are booleans */
    REJECT(extra, "{\"a\":true}"); /* a is declared: an integer */
    ACCEPT("{\"type\":\"object\"}", "{\"x\":[1,2],\"y\":{}}");
    REJECT("{\"type\":\"object\",\"properties\":{}}", "{\"x\":1}");
    ACCEPT("{\"type\":\"object\",\"properties\":{}}", "{}");
    /* keys with characters that JSON escapes */
    ACCEPT(
        "{\"properties\":{\"a\\\"b\":{\"type\":\"null\"},\"c\\nd\":{\"const\":1}},\"required\":[\"a\\\"b\"]}",
        "{\"c\\nd\":1,\"a\\\"b\":null}");
}

static void test_arrays_enums_anyof_refs(void) {
    const char *a = "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}";
    ACCEPT(a, "[1,2]");
    ACCEPT(a, "[ 1 , 2 , 3 ]");
    REJECT(a, "[1]");
    REJECT(a, "[1,2,3,4]");
    REJECT(a, "[1,\"2\"]");
    ACCEPT("{\"type\":\"array\"}", "[]");
    REJECT("{\"type\":\"array\",\"maxItems\":0}", "[1]");
    const char *e = "{\"enum\":[\"red\",\"green\",1,12,null,{\"k\":[1]}]}";
    ACCEPT(e, "\"red\"");
    ACCEPT(e, "1");
    ACCEPT(e, "12");
    ACCEPT(e, "{\"k\":[1]}");
    ACCEPT(e, "null");
    REJECT(e, "\"re\"");
    REJECT(e, "2");
    REJECT(e, "123");
    ACCEPT("{\"const\":\"x\"}", "\"x\"");
    REJECT("{\"const\":\"x\"}", "\"y\"");
    ACCEPT("{\"type\":\"string\",\"nullable\":true}", "null");
    const char *any =
        "{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}"
        ","
        "{\"type\":\"object\",\"properties\":{\"b\":{\"type\":\"string\"}},\"required\":[\"b\"]},"
        "{\"type\":\"number\"}]}";
    ACCEPT(any, "{\"a\":1}");
    ACCEPT(any, "{\"b\":\"x\"}");
    ACCEPT(any, "2.5");
    REJECT(any, "{\"a\":\"x\"}");
    REJECT(any, "{\"a\":1,\"b\":\"x\"}");
    const char *ref =
        "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
        "\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/node\"},{\"type\":\"null\"}]}},"
        "\"required\":[\"v\",\"next\"],\"additionalProperties\":false}},\"$ref\":\"#/$defs/node\"}";
    ACCEPT(ref, "{\"v\":1,\"next\":{\"v\":2,\"next\":null}}");
    REJECT(ref, "{\"v\":1,\"next\":{\"v\":2}}");
    ACCEPT("{\"definitions\":{\"x\":{\"type\":\"boolean\"}},\"type\":\"array\",\"items\":{\"$ref\":\"#/"
           "definitions/x\"}}",
           "[true,false]");
}

static void test_refused(void) {
    REFUSED("{\"type\":\"string\",\"pattern\":\"^a\"}", "'pattern'");
    REFUSED("{\"type\":\"string\",\"format\":\"date\"}", "'format'");
    REFUSED("{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":0}}}", "'minimum'");
    REFUSED("{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":0}}}",
            "#/properties/n");
    REFUSED("{\"type\":\"array\",\"prefixItems\":[]}", "'prefixItems'");
    REFUSED("{\"type\":\"array\",\"uniqueItems\":true}", "'uniqueItems'");
    REFUSED("{\"not\":{}}", "'not'");
    REFUSED("{\"allOf\":[{},{}]}", "'allOf'");
    REFUSED("{\"$ref\":\"#/nowhere\"}", "'$ref'");
    REFUSED("{\"$ref\":\"http://x/y\"}", "'$ref'");
    REFUSED("{\"type\":\"strin\"}", "unknown type");
    REFUSED("{\"enum\":[]}", "enum");
    REFUSED("false", "false");
    REFUSED("{\"type\":\"array\",\"minItems\":3,\"maxItems\":1}", "minItems");
    /* recursion with no finite value: a node that requires itself */
    REFUSED("{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"n\":{\"$ref\":\"#/$defs/"
            "n\"}},\"required\":[\"n\"]}},"
            "\"$ref\":\"#/$defs/n\"}",
            "finite");
}

/* the exact bytes still needed */
static void test_min_remaining(void) {
    char err[256];
    grammar *g =
        compile("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"},\"bb\":{\"type\":\"array\","
                "\"items\":{\"type\":\"integer\"},\"minItems\":2},\"c\":{\"type\":\"number\"}},"
                "\"required\":[\"a\",\"bb\"]}",
                err, sizeof err);
    CHECK(g, "compile: %s", err);
    if (!g) return;
    /* shortest: {"a":"","bb":[0,0]} = 19 bytes */
    CHECK(grammar_min_len(g) == 19, "min len %ld", grammar_min_len(g));
    gmatch *m = gmatch_new(g, NULL);
    static const struct {
        const char *feed;
        long rest;
    } steps[] = {{"{", 18}, {"\"", 17},  {"b", 16}, /* after {"b: b":[0,0],"a":""} */
                 {"b", 15}, {"\":", 13}, {"[", 12},  {"5", 11}, {"7", 11},   {",", 10}, {"1", 9},
                 {"]", 8},  {",", 7},    {"\"a", 5}, {"\"", 4}, {":\"x", 2}, {"\"", 1}, {"}", 0}};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        CHECK(gmatch_feed(m, steps[i].feed, strlen(steps[i].feed)) == 0, "feed %s", steps[i].feed);
        long r = gmatch_min_remaining(m);
        CHECK(r == steps[i].rest, "after %s: %ld bytes needed, expected %ld", steps[i].feed, r,
              steps[i].rest);
    }
    CHECK(gmatch_done(m), "the object is closed");
    CHECK(gmatch_feed(m, " ", 1) < 0, "nothing after the root");
    gmatch_free(m);
    grammar_free(g);
}

/* hand-built nodes: a think block, a literal with continuation (the tool-call shape) */
static void test_markup(void) {
    grammar *g = grammar_new();
    int body = grammar_any_object(g);
    int ws_lits[1] = {0};
    const char *ws[3] = {"", "\n", "\n\n"};
    size_t wl[3] = {0, 1, 2};
    int w = grammar_literals(g, 3, ws, wl, NULL);
    int think = grammar_until(g, "</think>");
    int seq[3] = {think, w, body};
    int root = grammar_seq(g, 3, seq);
    (void)ws_lits;
    CHECK(root >= 0 && grammar_finish(g, root) == 0, "finish: %s", rl_lasterr());
    CHECK(matches(g, "I think </thin </think>\n\n{\"a\":1}"), "think then an object");
    CHECK(matches(g, "</think>{}"), "empty think, no newline");
    CHECK(!matches(g, "</think>\n\n\n{}"), "three newlines");
    CHECK(!matches(g, "{}"), "the think block must close first");
    grammar_free(g);

    g = grammar_new();
    char err[256];
    cJSON *tools =
        cJSON_Parse("[{\"type\":\"function\",\"function\":{\"name\":\"get\",\"strict\":true,\"parameters\":"
                    "{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"integer\"}},\"required\":[\"k\"],"
                    "\"additionalProperties\":false}}},"
                    "{\"type\":\"function\",\"function\":{\"name\":\"get_all\",\"parameters\":{}}}]");
    root = jsonschema_tool_call(g, tools, NULL, false, err, sizeof err);
    CHECK(root >= 0 && grammar_finish(g, root) == 0, "tool call grammar: %s", err);
    CHECK(matches(g, "<tool_call>\n{\"name\": \"get\", \"arguments\": {\"k\": 3}}\n</tool_call>"),
          "strict call");
    CHECK(!matches(g, "<tool_call>\n{\"name\": \"get\", \"arguments\": {\"k\": \"3\"}}\n</tool_call>"),
          "strict types");
    CHECK(matches(g, "<tool_call>\n{\"name\": \"get_all\", \"arguments\": {\"z\": [1]}}\n</tool_call>"),
          "non-strict: any object");
    CHECK(!matches(g, "<tool_call>\n{\"name\": \"put\", \"arguments\": {}}\n</tool_call>"), "unknown tool");
    CHECK(!matches(g, "<tool_call>\n{\"name\": \"get\", \"arguments\": {\"k\": 3}}\n"),
          "cut before the closing tag");
    grammar_free(g);
    g = grammar_new();
    root = jsonschema_tool_call(g, tools, "get_all", false, err, sizeof err);
    CHECK(root >= 0 && grammar_finish(g, root) == 0, "named tool: %s", err);
    CHECK(!matches(g, "<tool_call>\n{\"name\": \"get\", \"arguments\": {\"k\": 3}}\n</tool_call>"),
          "only the named tool");
    grammar_free(g);
    g = grammar_new();
    CHECK(jsonschema_tool_call(g, tools, "nope", false, err, sizeof err) < 0 && strstr(err, "nope"),
          "unknown name: %s", err);
    grammar_free(g);
    cJSON_Delete(tools);
}

/* ---- with the real tokenizer ----------------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

static const char *SCHEMAS[] = {
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":20},\"age\":{\"type\":"
    "\"integer\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"bc\",\"def\"]},\"maxItems\":4}},\"required\":["
    "\"name\",\"age\","
    "\"tags\"],\"additionalProperties\":false}",
    "{\"type\":\"object\"}",
    "{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\"}},\"required\":[\"x\"]},{"
    "\"type\":\"array\","
    "\"items\":{\"type\":\"boolean\"},\"minItems\":1}]}",
};

/* the trie mask equals testing every token; token-by-token feeding of a tokenised text */
static void test_tokens(const tokenizer *tok, const gvocab *v) {
    char err[256];
    int32_t nv = gvocab_n_vocab(v);
    uint32_t *bits = malloc(sizeof(uint32_t) * (size_t)((nv + 31) / 32));
    for (size_t si = 0; si < sizeof SCHEMAS / sizeof SCHEMAS[0]; si++) {
        grammar *g = compile(SCHEMAS[si], err, sizeof err);
        CHECK(g, "compile: %s", err);
        if (!g) continue;
        gmatch *m = gmatch_new(g, v);
        uint64_t rs = 0x9E3779B97F4A7C15ull + si;
        /* a random walk over allowed tokens; at a few states compare fill with one-by-one tests */
        for (int step = 0; step < 60 && !gmatch_done(m); step++) {
            size_t cnt = gmatch_fill(m, bits);
            if (step % 12 == 0) {
                size_t agree = 0, n_ok = 0;
                for (int32_t id = 0; id < nv; id++) {
                    bool a = gmatch_allows(m, id), b = bits[id >> 5] >> (id & 31) & 1;
                    agree += a == b;
                    n_ok += a;
                }
                CHECK(agree == (size_t)nv && n_ok == cnt,
                      "schema %zu step %d: fill and allows disagree (%zu of %d, %zu vs %zu)", si, step, agree,
                      nv, n_ok, cnt);
            }
            CHECK(cnt > 0, "schema %zu step %d: dead end", si, step);
            if (!cnt) break;
            size_t pick = rng_next(&rs) % cnt, seen = 0;
            for (int32_t id = 0; id < nv; id++)
                if (bits[id >> 5] >> (id & 31) & 1 && seen++ == pick) {
                    CHECK(gmatch_accept(m, id) == 0, "accept an allowed token");
                    break;
                }
        }
        gmatch_free(m);
        grammar_free(g);
    }
    /* tokenised valid text, fed token by token */
    grammar *g = compile(SCHEMAS[0], err, sizeof err);
    if (g) {
        const char *text =
            "{\"tags\": [\"def\", \"a\"], \"name\": \"Zo\\u00eb \xc3\xa9t\xc3\xa9\", \"age\": -42}";
        tok_ids ids = {0};
        tokenizer_encode(tok, text, strlen(text), 0, &ids);
        gmatch *m = gmatch_new(g, v);
        size_t ok = 0;
        for (size_t i = 0; i < ids.n; i++)
            ok += gmatch_allows(m, ids.ids[i]) && gmatch_accept(m, ids.ids[i]) == 0;
        CHECK(ok == ids.n && gmatch_done(m), "token-by-token feeding (%zu of %zu)", ok, ids.n);
        /* poisoned: a control token, an end-of-generation token mid-object, a token after the end */
        gmatch_reset(m);
        int32_t imstart = tokenizer_find(tok, "<|im_start|>", 12);
        int32_t eos = tokenizer_eos(tok);
        CHECK(imstart < 0 || !gmatch_allows(m, imstart), "control token refused");
        gmatch_feed(m, "{\"name\":", 8);
        CHECK(eos < 0 || !gmatch_allows(m, eos), "end of generation refused mid-object");
        CHECK(gmatch_prefix(m, ids.ids, (int)ids.n) == 0, "a draft that does not continue is cut at once");
        gmatch_reset(m);
        int k = gmatch_prefix(m, ids.ids, (int)ids.n);
        CHECK(k == (int)ids.n, "a valid draft passes whole (%d of %zu)", k, ids.n);
        CHECK(gmatch_min_remaining(m) == grammar_min_len(g), "prefix leaves the state as it was");
        tok_ids_free(&ids);
        gmatch_free(m);
        grammar_free(g);
    }
    free(bits);
}

/* budget: random walks with a token limit always finish a sentence within the limit */
static void test_budget(const gvocab *v) {
    char err[256];
    int32_t nv = gvocab_n_vocab(v);
    uint32_t *bits = malloc(sizeof(uint32_t) * (size_t)((nv + 31) / 32));
    int finished = 0, runs = 0;
    for (size_t si = 0; si < sizeof SCHEMAS / sizeof SCHEMAS[0]; si++) {
        grammar *g = compile(SCHEMAS[si], err, sizeof err);
        if (!g) continue;
        for (int seed = 1; seed <= 6; seed++) {
            long long limit = grammar_min_len(g) + 3 * seed; /* tight limits */
            gmatch *m = gmatch_new(g, v);
            gmatch_set_budget(m, limit);
            uint64_t rs = (uint64_t)seed * 7919 + si;
            long long used = 0;
            while (!gmatch_done(m) && used < limit) {
                size_t cnt = gmatch_fill(m, bits);
                if (!cnt) break;
                size_t pick = rng_next(&rs) % cnt, seen = 0;
                for (int32_t id = 0; id < nv; id++)
                    if (bits[id >> 5] >> (id & 31) & 1 && seen++ == pick) {
                        gmatch_accept(m, id);
                        break;
                    }
                used++;
                if (gmatch_complete(m) && !gmatch_done(m))
                    break; /* a number at the end: the model may stop */
            }
            runs++;
            finished += gmatch_complete(m);
            CHECK(gmatch_complete(m), "schema %zu seed %d: not complete after %lld of %lld tokens", si, seed,
                  used, limit);
            gmatch_free(m);
        }
        grammar_free(g);
    }
    CHECK(finished == runs, "%d of %d walks finished", finished, runs);
    free(bits);
}

/* the sampler's lazy mask (top candidates tested in order) gives the same token as masking the
 * whole vocabulary first, greedy and with top-k / top-p */
static void test_sampler_mask(const gvocab *v) {
    char err[256];
    grammar *g = compile(SCHEMAS[0], err, sizeof err);
    if (!g) return;
    int32_t nv = gvocab_n_vocab(v);
    float *lg = malloc(sizeof(float) * (size_t)nv), *ml = malloc(sizeof(float) * (size_t)nv);
    uint32_t *bits = malloc(sizeof(uint32_t) * (size_t)((nv + 31) / 32));
    gmatch *m = gmatch_new(g, v);
    sampler_mask mk = gmatch_sampler_mask(m);
    uint64_t rs = 12345;
    int same = 0, total = 0;
    for (int cfg = 0; cfg < 3; cfg++) {
        sampler_params p = sampler_default_params();
        p.temp = cfg == 0 ? 0.0f : 0.9f;
        p.top_k = cfg == 2 ? 0 : 40;
        p.seed = 99;
        sampler *a = sampler_new(&p, nv), *b = sampler_new(&p, nv);
        sampler_set_mask(a, &mk);
        gmatch_reset(m);
        for (int step = 0; step < 40 && !gmatch_done(m); step++) {
            for (int32_t i = 0; i < nv; i++) lg[i] = (float)(rng_next(&rs) % 20000) / 1000.0f;
            size_t cnt = gmatch_fill(m, bits);
            for (int32_t i = 0; i < nv; i++) ml[i] = bits[i >> 5] >> (i & 31) & 1 ? lg[i] : -INFINITY;
            int32_t ta = sampler_sample(a, lg), tb = sampler_sample(b, ml);
            total++;
            same += ta == tb;
            CHECK(ta == tb, "cfg %d step %d: lazy mask %d, full mask %d (%zu allowed)", cfg, step, ta, tb,
                  cnt);
            if (ta < 0 || gmatch_accept(m, ta)) break;
        }
        sampler_free(a);
        sampler_free(b);
    }
    CHECK(same == total && total > 60, "%d of %d samples equal", same, total);
    gmatch_free(m);
    grammar_free(g);
    free(lg);
    free(ml);
    free(bits);
}

int main(void) {
    test_types();
    test_objects();
    test_arrays_enums_anyof_refs();
    test_refused();
    test_min_remaining();
    test_markup();
    /* the default model's vocabulary and the 80B models' (151,936 tokens) */
    static const char *const files[] = {"models/default.gguf", "tests/fixtures/qwen3-vocab.gguf"};
    for (int f = 0; f < 2; f++) {
        tokenizer *tok = tokenizer_load_file(files[f]);
        if (!tok) {
            printf("test_grammar: token tests on %s skipped: %s\n", files[f], rl_lasterr());
            continue;
        }
        gvocab *v = gvocab_new(tok);
        CHECK(v, "gvocab: %s", rl_lasterr());
        if (v) {
            test_tokens(tok, v);
            test_budget(v);
            test_sampler_mask(v);
        }
        gvocab_free(v);
        tokenizer_free(tok);
    }
    return check_done("test_grammar");
}
