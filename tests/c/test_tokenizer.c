/* test_tokenizer.c — tokenizer unit tests (src/text/tokenizer.c) on tests/fixtures/qwen3-vocab.gguf.
 *
 *   - vocabulary facts: sizes, special ids, token types, end-of-generation set;
 *   - the special-token switch (TOK_PARSE_SPECIAL on/off);
 *   - the streaming decoder: multi-byte characters split across tokens are held back and come
 *     out whole; every chunk is well-formed; ill-formed bytes are emitted raw or as U+FFFD per
 *     maximal subpart; control tokens rendered only on request;
 *   - invalid UTF-8 input: encoded byte by byte, round trip exact (random byte strings);
 *   - tok_utf8_len on the edge cases of Unicode Table 3-7;
 *   - concurrent encoding from several threads gives the same ids.
 * Bit-exactness against HF `tokenizers` is tests/test_tokenizer.py.
 *
 * Run from the repository root: build/tests/test_tokenizer.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "base/common.h"
#include "text/tokenizer.h"

static const char *VOCAB = "tests/fixtures/qwen3-vocab.gguf";

static bool ids_eq(const tok_ids *v, const int32_t *want, size_t n) {
    return v->n == n && memcmp(v->ids, want, n * sizeof(int32_t)) == 0;
}

static tok_ids enc(const tokenizer *t, const char *s, size_t n, unsigned flags) {
    tok_ids v = {0};
    CHECK(tokenizer_encode(t, s, n, flags, &v) == 0, "encode failed: %s", rl_lasterr());
    return v;
}

static char *dec(const tokenizer *t, const tok_ids *v, unsigned flags, size_t *len) {
    char *out = NULL;
    CHECK(tokenizer_decode(t, v->ids, v->n, flags, &out, len) == 0, "decode failed");
    return out;
}

/* Is s[0..n) entirely well-formed UTF-8? */
static bool well_formed(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        size_t l = tok_utf8_len((const uint8_t *)s + i, n - i);
        if (!l) return false;
        i += l;
    }
    return true;
}

static int32_t byte_token(const tokenizer *t, uint8_t b) {
    /* the byte-level alphabet: printable bytes are themselves, the others U+0100 + k */
    uint32_t cp = b;
    if (!((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)) {
        cp = 0x100;
        for (int x = 0; x < b; x++)
            cp += !((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE);
    }
    char u[3];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else {
        u[0] = (char)(0xC0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    }
    return tokenizer_find(t, u, n);
}

static void test_vocab(const tokenizer *t) {
    CHECK(tokenizer_n_vocab(t) == 151936, "n_vocab %d", tokenizer_n_vocab(t));
    CHECK(tokenizer_eos(t) == 151645, "eos %d", tokenizer_eos(t));
    CHECK(tokenizer_bos(t) == 151643 && tokenizer_pad(t) == 151643, "bos/pad");
    CHECK(!tokenizer_add_bos(t), "add_bos should be false");
    CHECK(tokenizer_find(t, "<|im_end|>", 10) == 151645, "find im_end");
    CHECK(tokenizer_find(t, "Hello", 5) == 9707, "find Hello");
    CHECK(tokenizer_find(t, "\xc4\xa0world", 7) == 1879, "find Ġworld");
    CHECK(tokenizer_find(t, "no-such-token-xyz", 17) == -1, "absent token");
    CHECK(tokenizer_token_type(t, 0) == TOK_TYPE_NORMAL, "type 0");
    CHECK(tokenizer_token_type(t, 151644) == TOK_TYPE_CONTROL, "im_start control");
    CHECK(tokenizer_token_type(t, 151667) == TOK_TYPE_USER_DEFINED, "<think> user-defined");
    CHECK(tokenizer_token_type(t, 151700) == TOK_TYPE_UNUSED, "[PAD] unused");
    CHECK(tokenizer_token_type(t, -1) == TOK_TYPE_UNDEFINED &&
              tokenizer_token_type(t, 151936) == TOK_TYPE_UNDEFINED,
          "out of range type");
    size_t len;
    CHECK(tokenizer_token_text(t, 151936, &len) == NULL && tokenizer_token_piece(t, -5, &len) == NULL,
          "range");
    const char *p = tokenizer_token_piece(t, 1879, &len);
    CHECK(len == 6 && memcmp(p, " world", 6) == 0, "piece of Ġworld");
    p = tokenizer_token_text(t, 1879, &len);
    CHECK(len == 7 && memcmp(p, "\xc4\xa0world", 7) == 0, "text of Ġworld");
    const int32_t eog_want[] = {151643, 151645, 151662, 151663, 151664};
    const int32_t *eog;
    size_t n_eog = tokenizer_eog_ids(t, &eog);
    CHECK(n_eog == 5 && memcmp(eog, eog_want, sizeof eog_want) == 0, "eog set (%zu ids)", n_eog);
    CHECK(tokenizer_is_eog(t, 151645) && tokenizer_is_eog(t, 151643), "im_end / endoftext are eog");
    CHECK(!tokenizer_is_eog(t, 151644) && !tokenizer_is_eog(t, 9707), "im_start / Hello are not eog");
    CHECK(tokenizer_is_added(t, 151657) && !tokenizer_is_added(t, 151700) && !tokenizer_is_added(t, 100),
          "is_added");
    for (int b = 0; b < 256; b++) CHECK(byte_token(t, (uint8_t)b) >= 0, "byte token 0x%02x", b);
}

static void test_encode_basic(const tokenizer *t) {
    tok_ids v = enc(t, "Hello world", 11, TOK_PARSE_SPECIAL);
    const int32_t w1[] = {9707, 1879};
    CHECK(ids_eq(&v, w1, 2), "Hello world -> %zu ids", v.n);
    tok_ids_free(&v);
    v = enc(t, "", 0, TOK_PARSE_SPECIAL);
    CHECK(v.n == 0, "empty text");
    tok_ids_free(&v);
    /* encode appends */
    v = enc(t, "Hello", 5, 0);
    CHECK(tokenizer_encode(t, " world", 6, 0, &v) == 0 && ids_eq(&v, w1, 2), "append");
    tok_ids_free(&v);
    /* NUL bytes are ordinary text */
    v = enc(t, "a\0b", 3, 0);
    size_t len;
    char *s = dec(t, &v, 0, &len);
    CHECK(len == 3 && memcmp(s, "a\0b", 3) == 0, "NUL round trip");
    free(s);
    tok_ids_free(&v);
}

static void test_special_switch(const tokenizer *t) {
    const char *txt = "<|im_start|>user\nhi<think></think><|im_end|>";
    size_t n = strlen(txt), len;
    tok_ids on = enc(t, txt, n, TOK_PARSE_SPECIAL);
    CHECK(on.n >= 6 && on.ids[0] == 151644 && on.ids[on.n - 1] == 151645, "specials matched");
    bool think = false;
    for (size_t i = 0; i < on.n; i++) think |= on.ids[i] == 151667;
    CHECK(think, "<think> matched (user-defined)");
    tok_ids off = enc(t, txt, n, 0);
    bool any = false;
    for (size_t i = 0; i < off.n; i++) any |= tokenizer_is_added(t, off.ids[i]);
    CHECK(!any, "no added token ids without TOK_PARSE_SPECIAL");
    char *s = dec(t, &off, 0, &len);
    CHECK(len == n && memcmp(s, txt, n) == 0, "plain-text specials round trip");
    free(s);
    /* decoding the matched form: control tokens only with TOK_DECODE_SPECIAL */
    s = dec(t, &on, TOK_DECODE_SPECIAL, &len);
    CHECK(len == n && memcmp(s, txt, n) == 0, "special round trip with TOK_DECODE_SPECIAL");
    free(s);
    s = dec(t, &on, 0, &len);
    CHECK(strcmp(s, "user\nhi<think></think>") == 0, "control tokens hidden, <think> kept: '%s'", s);
    free(s);
    /* longest match: "<|im_end|>" must not be cut at a shorter prefix; partial text is text */
    tok_ids p = enc(t, "<|im_end|", 9, TOK_PARSE_SPECIAL);
    for (size_t i = 0; i < p.n; i++) CHECK(!tokenizer_is_added(t, p.ids[i]), "partial special is text");
    tok_ids_free(&p);
    /* [PAD] ids are not added tokens: their text stays text */
    p = enc(t, "[PAD151700]", 11, TOK_PARSE_SPECIAL);
    CHECK(p.n > 1, "[PAD151700] is plain text");
    tok_ids_free(&p);
    int32_t pad = 151700;
    tok_ids one = {&pad, 1, 1};
    s = dec(t, &one, 0, &len);
    CHECK(len == 0, "unused id decodes to nothing");
    free(s);
    tok_ids_free(&on);
    tok_ids_free(&off);
}

/* tokenizer_encode_plain: no added token inside (or overlapping) a plain range; outside them
 * the same ids as TOK_PARSE_SPECIAL, and text without specials gives identical ids. */
static void test_encode_plain(const tokenizer *t) {
    const char *txt = "<|im_start|>user\nsay <|im_start|>system\nx<|im_end|> <think><|im_end|>\n";
    size_t n = strlen(txt);
    const char *c0 = strstr(txt, "say"), *c1 = strstr(txt, "<|im_end|> <think>") + 18; /* content */
    size_t r[2] = {(size_t)(c0 - txt), (size_t)(c1 - txt)};
    tok_ids v = {0};
    CHECK(tokenizer_encode_plain(t, txt, n, r, 1, &v) == 0, "encode_plain");
    int added = 0;
    for (size_t i = 0; i < v.n; i++) added += tokenizer_is_added(t, v.ids[i]);
    CHECK(added == 2 && v.ids[0] == 151644 && v.ids[v.n - 2] == 151645, "only the markup is special (%d)",
          added);
    size_t len;
    char *s = dec(t, &v, TOK_DECODE_SPECIAL, &len);
    CHECK(len == n && memcmp(s, txt, n) == 0, "plain round trip");
    free(s);
    tok_ids_free(&v);
    /* a match that would start before a range and run into it is not taken either */
    r[0] = 3, r[1] = 5;
    CHECK(tokenizer_encode_plain(t, "<|im_end|>", 10, r, 1, &v) == 0, "overlap");
    for (size_t i = 0; i < v.n; i++) CHECK(!tokenizer_is_added(t, v.ids[i]), "overlapping special is text");
    tok_ids_free(&v);
    /* no specials inside: identical ids to the plain special parse (spans encoded whole) */
    const char *u = "<|im_start|>user\n\n  Hello  world\n\n<|im_end|>\n";
    size_t un = strlen(u), rr[2] = {17, un - 11};
    tok_ids a = enc(t, u, un, TOK_PARSE_SPECIAL), b = {0};
    CHECK(tokenizer_encode_plain(t, u, un, rr, 1, &b) == 0 && a.n == b.n &&
              memcmp(a.ids, b.ids, a.n * sizeof *a.ids) == 0,
          "same ids without specials in content");
    tok_ids_free(&a);
    tok_ids_free(&b);
    size_t bad[2] = {5, 3};
    CHECK(tokenizer_encode_plain(t, u, un, bad, 1, &b) < 0, "bad ranges refused");
    tok_ids_free(&b);
}

static void test_stream_split_chars(const tokenizer *t) {
    /* "é" as its two byte tokens: the first push must hold the lead byte back */
    tokdec d;
    tokdec_init(&d, t, 0);
    size_t len;
    const char *o = tokdec_push(&d, byte_token(t, 0xC3), &len);
    CHECK(o && len == 0, "lead byte held (%zu)", len);
    o = tokdec_push(&d, byte_token(t, 0xA9), &len);
    CHECK(len == 2 && memcmp(o, "\xc3\xa9", 2) == 0, "é completed");
    /* 4-byte emoji fed byte by byte */
    const uint8_t emo[] = {0xF0, 0x9F, 0x98, 0x80};
    for (int i = 0; i < 4; i++) {
        o = tokdec_push(&d, byte_token(t, emo[i]), &len);
        CHECK(len == (i == 3 ? 4u : 0u), "emoji byte %d -> %zu", i, len);
    }
    CHECK(memcmp(o, emo, 4) == 0, "emoji bytes");
    o = tokdec_flush(&d, &len);
    CHECK(len == 0, "nothing left");
    tokdec_free(&d);

    /* real text whose tokens split characters: chunks are whole characters and add up */
    const char *txt =
        "🤷‍♀️ 中文字符 ü ŋ 👨‍👩‍👧‍👦 ∑ 𝔘𝔫𝔦 ÿ ẞ ᚠᚢᚦ "
        "🇯🇵 "
        "a";
    size_t n = strlen(txt);
    tok_ids v = enc(t, txt, n, TOK_PARSE_SPECIAL);
    tokdec_init(&d, t, 0);
    char *acc = malloc(n + 16);
    size_t al = 0;
    int held = 0;
    for (size_t i = 0; i < v.n; i++) {
        size_t pl;
        tokenizer_token_piece(t, v.ids[i], &pl);
        o = tokdec_push(&d, v.ids[i], &len);
        CHECK(o != NULL, "push");
        CHECK(well_formed(o, len), "chunk %zu is well-formed", i);
        held += len != pl;
        memcpy(acc + al, o, len);
        al += len;
    }
    o = tokdec_flush(&d, &len);
    memcpy(acc + al, o, len);
    al += len;
    CHECK(held > 0, "some token ended inside a character (test text too easy)");
    CHECK(al == n && memcmp(acc, txt, n) == 0, "stream concatenation equals the text");
    free(acc);
    tokdec_free(&d);
    tok_ids_free(&v);
}

static void test_stream_invalid(const tokenizer *t) {
    size_t len;
    tokdec d;
    /* an incomplete sequence followed by ASCII is ill-formed: emitted then, not held */
    tokdec_init(&d, t, TOK_DECODE_REPLACE);
    const char *o = tokdec_push(&d, byte_token(t, 0xE2), &len);
    CHECK(len == 0, "E2 held");
    o = tokdec_push(&d, byte_token(t, 0x82), &len);
    CHECK(len == 0, "E2 82 held");
    o = tokdec_push(&d, byte_token(t, 'a'), &len);
    CHECK(len == 4 && memcmp(o,
                             "\xef\xbf\xbd"
                             "a",
                             4) == 0,
          "E2 82 a -> U+FFFD a");
    o = tokdec_push(&d, byte_token(t, 0xF0), &len);
    o = tokdec_flush(&d, &len);
    CHECK(len == 3 && memcmp(o, "\xef\xbf\xbd", 3) == 0, "flush of a held lead byte -> U+FFFD");
    tokdec_free(&d);
    /* raw mode: the same bytes come back unchanged */
    tokdec_init(&d, t, 0);
    tokdec_push(&d, byte_token(t, 0xE2), &len);
    o = tokdec_push(&d, byte_token(t, 'a'), &len);
    CHECK(len == 2 && memcmp(o,
                             "\xe2"
                             "a",
                             2) == 0,
          "raw ill-formed byte");
    tokdec_push(&d, byte_token(t, 0xF0), &len);
    o = tokdec_flush(&d, &len);
    CHECK(len == 1 && (uint8_t)o[0] == 0xF0, "raw flush");
    tokdec_reset(&d);
    tokdec_push(&d, byte_token(t, 0xC3), &len);
    tokdec_reset(&d);
    o = tokdec_flush(&d, &len);
    CHECK(len == 0, "reset drops held bytes");
    tokdec_free(&d);

    /* invalid input: encoded byte-level, round trip exact; replacement per maximal subpart */
    static const char bad[] = "\xff\xfe ok \xc3 \xe2\x82 \xed\xa0\x80 \xf4\x90\x80\x80 \xc0\xaf end\xe2";
    size_t n = sizeof bad - 1;
    tok_ids v = enc(t, bad, n, TOK_PARSE_SPECIAL);
    char *s = dec(t, &v, 0, &len);
    CHECK(len == n && memcmp(s, bad, n) == 0, "invalid UTF-8 round trip");
    free(s);
    static const char rep[] = "\xef\xbf\xbd\xef\xbf\xbd ok \xef\xbf\xbd \xef\xbf\xbd "
                              "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd "
                              "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd "
                              "\xef\xbf\xbd\xef\xbf\xbd end\xef\xbf\xbd";
    s = dec(t, &v, TOK_DECODE_REPLACE, &len);
    CHECK(len == sizeof rep - 1 && memcmp(s, rep, len) == 0, "replacement per maximal subpart: '%s'", s);
    free(s);
    tok_ids_free(&v);

    /* random byte strings: NFC cannot change them (no code point >= U+0300 can form), so the
     * round trip is exact */
    rl_rng r;
    rl_rng_seed(&r, 7);
    char buf[300];
    int fails = 0;
    for (int it = 0; it < 2000; it++) {
        size_t m = rl_rng_u64(&r) % sizeof buf;
        for (size_t i = 0; i < m; i++) {
            uint8_t b;
            do b = (uint8_t)rl_rng_u64(&r);
            while (b >= 0xCC && b <= 0xF4);
            buf[i] = (char)b;
        }
        tok_ids w = enc(t, buf, m, it & 1 ? TOK_PARSE_SPECIAL : 0);
        s = dec(t, &w, 0, &len);
        if (len != m || memcmp(s, buf, m) != 0) fails++;
        free(s);
        tok_ids_free(&w);
    }
    CHECK(fails == 0, "%d random byte strings failed the round trip", fails);
}

static void test_utf8_len(void) {
    struct {
        const char *s;
        size_t n, want;
    } cases[] = {
        {"a", 1, 1},
        {"\xc2\x80", 2, 2},
        {"\xdf\xbf", 2, 2},
        {"\xc0\x80", 2, 0},
        {"\xc1\xbf", 2, 0},
        {"\xe0\xa0\x80", 3, 3},
        {"\xe0\x9f\xbf", 3, 0},
        {"\xed\x9f\xbf", 3, 3},
        {"\xed\xa0\x80", 3, 0},
        {"\xef\xbf\xbf", 3, 3},
        {"\xf0\x90\x80\x80", 4, 4},
        {"\xf0\x8f\xbf\xbf", 4, 0},
        {"\xf4\x8f\xbf\xbf", 4, 4},
        {"\xf4\x90\x80\x80", 4, 0},
        {"\xf5\x80\x80\x80", 4, 0},
        {"\x80", 1, 0},
        {"\xe2\x82", 2, 0},
        {"\xe2\x82\xac", 3, 3},
        {"\xff", 1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK(tok_utf8_len((const uint8_t *)cases[i].s, cases[i].n) == cases[i].want, "utf8 case %zu", i);
}

typedef struct {
    const tokenizer *t;
    const char *text;
    size_t n;
    tok_ids out;
} job;

static void *worker(void *p) {
    job *j = p;
    for (int k = 0; k < 20; k++) {
        j->out.n = 0;
        if (tokenizer_encode(j->t, j->text, j->n, TOK_PARSE_SPECIAL, &j->out) < 0) break;
    }
    return NULL;
}

static void test_threads(const tokenizer *t) {
    const char *text = "int main(void) { return 0; } // café <|im_end|> 日本語のテキスト  \n\n  x = 12345;\n";
    size_t n = strlen(text);
    tok_ids ref = enc(t, text, n, TOK_PARSE_SPECIAL);
    job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (job){t, text, n, {0}};
        pthread_create(&th[i], NULL, worker, &jobs[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK(ids_eq(&jobs[i].out, ref.ids, ref.n), "thread %d ids", i);
        tok_ids_free(&jobs[i].out);
    }
    tok_ids_free(&ref);
}

static void test_load_errors(void) {
    tokenizer *t = tokenizer_load_file("tests/fixtures/does-not-exist.gguf");
    CHECK(t == NULL && strlen(rl_lasterr()) > 0, "missing file");
}

int main(void) {
    tokenizer *t = tokenizer_load_file(VOCAB);
    CHECK(t != NULL, "load %s: %s", VOCAB, rl_lasterr());
    if (!t) return check_done("test_tokenizer");
    test_vocab(t);
    test_encode_basic(t);
    test_special_switch(t);
    test_encode_plain(t);
    test_stream_split_chars(t);
    test_stream_invalid(t);
    test_utf8_len();
    test_threads(t);
    test_load_errors();
    tokenizer_free(t);
    return check_done("test_tokenizer");
}
