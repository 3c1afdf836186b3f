/* tokenizer.c — byte-level BPE with the qwen2 / qwen35 pre-tokenizers (see tokenizer.h and
 * docs/TOKENIZER.md). The Unicode side (UTF-8, regex character classes, NFC) is in
 * tokenizer_unicode.c.
 *
 * Data layout: token texts and decoded pieces live in two arenas with offset tables; a
 * text -> id hash (open addressing) serves tokenizer_find and merge loading; merges live in
 * a (left id, right id) -> (rank, merged id) hash so BPE runs entirely on ids. Added tokens
 * are bucketed by first byte, longest first, for the leftmost-longest special-token pass.
 *
 * Test: tests/c/test_tokenizer.c (streaming decoder, invalid UTF-8, special switch) and
 * tests/test_tokenizer.py (bit-exact ids against HF `tokenizers` on a 1000+ string corpus).
 */
#include "text/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "text/tokenizer_impl.h"

#define NO_RANK INT32_MAX
#define MERGE_EMPTY UINT64_MAX

typedef struct {
    uint64_t key; /* (left << 32) | right, MERGE_EMPTY when free */
    int32_t rank;
    int32_t id;
} merge_slot;

struct tokenizer {
    int32_t n_vocab;
    char *text;         /* all token texts, back to back */
    uint32_t *text_off; /* n_vocab + 1 offsets */
    char *piece;        /* decoded bytes of each token */
    uint32_t *piece_off;
    uint8_t *type;

    int32_t *thash; /* text -> id, -1 empty */
    uint64_t thash_mask;
    int32_t *phash; /* piece bytes -> id, for normal tokens that BPE maps to themselves */
    uint64_t phash_mask;

    merge_slot *merges;
    uint64_t merge_mask;
    int merge_bits;
    bool dup_results; /* two merges produce the same token: always use the heap BPE */

    int32_t byte_id[256];

    int32_t *added; /* added-token ids grouped by first byte, longest first */
    uint32_t added_start[257];

    int32_t eos, bos, pad;
    bool add_bos;
    bool marks; /* pre-tokenizer 'qwen35': \p{M} joins letter runs; 'qwen2': a mark is "other" */
    int32_t eog[16];
    size_t n_eog;
};

/* ---- byte-level alphabet (GPT-2): printable bytes map to themselves, the other 68 bytes
 * map in increasing order to U+0100, U+0101, ... ---------------------------------------- */

static bool byte_is_printable(int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
}

static uint32_t byte_to_cp(int b) {
    if (byte_is_printable(b)) return (uint32_t)b;
    uint32_t k = 0;
    for (int x = 0; x < b; x++) k += !byte_is_printable(x);
    return 0x100 + k;
}

/* Inverse: code point -> byte, or -1 if the code point is not in the alphabet. */
static int cp_to_byte(uint32_t cp) {
    if (cp < 0x100) return byte_is_printable((int)cp) ? (int)cp : -1;
    if (cp >= 0x100 + 68) return -1;
    uint32_t k = cp - 0x100;
    for (int x = 0; x < 256; x++)
        if (!byte_is_printable(x) && k-- == 0) return x;
    return -1;
}

/* ---- hashing -------------------------------------------------------------------------- */

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

static inline uint64_t merge_key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }

static inline uint64_t merge_hash(uint64_t key, int bits) {
    return (key * 0x9E3779B97F4A7C15ull) >> (64 - bits);
}

/* Rank of merging (a, b), NO_RANK if none; *id gets the merged token. */
static inline int32_t merge_find(const tokenizer *t, int32_t a, int32_t b, int32_t *id) {
    uint64_t key = merge_key(a, b);
    for (uint64_t h = merge_hash(key, t->merge_bits);; h = (h + 1) & t->merge_mask) {
        const merge_slot *s = &t->merges[h];
        if (s->key == key) {
            *id = s->id;
            return s->rank;
        }
        if (s->key == MERGE_EMPTY) return NO_RANK;
    }
}

int32_t tokenizer_find(const tokenizer *t, const char *text, size_t len) {
    for (uint64_t h = hash_bytes(text, len) & t->thash_mask;; h = (h + 1) & t->thash_mask) {
        int32_t id = t->thash[h];
        if (id < 0) return -1;
        uint32_t a = t->text_off[id], b = t->text_off[id + 1];
        if (b - a == len && memcmp(t->text + a, text, len) == 0) return id;
    }
}

/* ---- loading -------------------------------------------------------------------------- */

void tokenizer_free(tokenizer *t) {
    if (!t) return;
    free(t->text);
    free(t->text_off);
    free(t->piece);
    free(t->piece_off);
    free(t->type);
    free(t->thash);
    free(t->phash);
    free(t->merges);
    free(t->added);
    free(t);
}

static int32_t meta_id(const gguf_file *f, const char *key, int32_t n_vocab) {
    int64_t v;
    if (!gguf_get_i64(f, key, &v) || v < 0 || v >= n_vocab) return -1;
    return (int32_t)v;
}

static int load_vocab(tokenizer *t, const gguf_file *f) {
    const gguf_value *tok = gguf_get_arr(f, "tokenizer.ggml.tokens");
    if (!tok || tok->v.arr.elem != GGUF_TYPE_STRING)
        return rl_seterr("%s: tokenizer.ggml.tokens is missing or not a string array", f->path);
    if (tok->v.arr.n < 256 || tok->v.arr.n > (1u << 30))
        return rl_seterr("%s: tokenizer.ggml.tokens has %llu entries (need 256 .. 2^30)", f->path,
                         (unsigned long long)tok->v.arr.n);
    int32_t n = (int32_t)tok->v.arr.n;
    t->n_vocab = n;
    const gguf_value *ty = gguf_get_arr(f, "tokenizer.ggml.token_type");
    if (ty && (ty->v.arr.n != (uint64_t)n || ty->v.arr.elem == GGUF_TYPE_STRING ||
               ty->v.arr.elem == GGUF_TYPE_ARRAY))
        return rl_seterr("%s: tokenizer.ggml.token_type must be an integer array with one entry per token",
                         f->path);

    uint64_t total = 0;
    for (int32_t i = 0; i < n; i++) total += gguf_arr_str(tok, (uint64_t)i).n;
    if (total >= UINT32_MAX) return rl_seterr("%s: token texts too large", f->path);
    t->text = rl_malloc(total + 1, "token texts");
    t->piece = rl_malloc(total + 1, "token pieces");
    t->text_off = rl_malloc(((size_t)n + 1) * sizeof(uint32_t), "token offsets");
    t->piece_off = rl_malloc(((size_t)n + 1) * sizeof(uint32_t), "token offsets");
    t->type = rl_malloc((size_t)n, "token types");
    if (!t->text || !t->piece || !t->text_off || !t->piece_off || !t->type) return -1;

    uint32_t to = 0, po = 0;
    for (int32_t i = 0; i < n; i++) {
        gguf_str s = gguf_arr_str(tok, (uint64_t)i);
        int64_t ty_i = ty ? gguf_arr_i64(ty, (uint64_t)i) : TOK_TYPE_NORMAL;
        t->type[i] = (uint8_t)(ty_i >= 0 && ty_i <= TOK_TYPE_BYTE ? ty_i : TOK_TYPE_NORMAL);
        t->text_off[i] = to;
        t->piece_off[i] = po;
        memcpy(t->text + to, s.p, s.n);
        to += (uint32_t)s.n;
        if (t->type[i] == TOK_TYPE_NORMAL || t->type[i] == TOK_TYPE_UNKNOWN || t->type[i] == TOK_TYPE_BYTE) {
            /* byte-level text -> bytes; characters outside the alphabet are kept as UTF-8 */
            const uint8_t *p = (const uint8_t *)s.p;
            size_t k = 0;
            while (k < s.n) {
                size_t need, m = tok_utf8_scan(p + k, s.n - k, &need);
                int b = m == need ? cp_to_byte(tok_utf8_decode(p + k, m)) : -1;
                if (b >= 0) {
                    t->piece[po++] = (char)b;
                } else {
                    memcpy(t->piece + po, p + k, m);
                    po += (uint32_t)m;
                }
                k += m;
            }
        } else {
            memcpy(t->piece + po, s.p, s.n);
            po += (uint32_t)s.n;
        }
    }
    t->text_off[n] = to;
    t->piece_off[n] = po;

    uint64_t cap = 1;
    while (cap < (uint64_t)n * 2) cap <<= 1;
    t->thash = rl_malloc(cap * sizeof(int32_t), "token hash");
    if (!t->thash) return -1;
    memset(t->thash, 0xFF, cap * sizeof(int32_t));
    t->thash_mask = cap - 1;
    for (int32_t i = 0; i < n; i++) {
        const char *s = t->text + t->text_off[i];
        size_t len = t->text_off[i + 1] - t->text_off[i];
        uint64_t h = hash_bytes(s, len) & t->thash_mask;
        bool dup = false;
        for (; t->thash[h] >= 0; h = (h + 1) & t->thash_mask) {
            int32_t o = t->thash[h];
            if (t->text_off[o + 1] - t->text_off[o] == len && memcmp(t->text + t->text_off[o], s, len) == 0) {
                dup = true; /* keep the lowest id for a duplicated text */
                break;
            }
        }
        if (!dup) t->thash[h] = i;
    }

    for (int b = 0; b < 256; b++) {
        uint8_t u[4];
        size_t len = tok_utf8_encode(byte_to_cp(b), u);
        t->byte_id[b] = tokenizer_find(t, (const char *)u, len);
        if (t->byte_id[b] < 0)
            return rl_seterr(
                "%s: the vocab lacks the byte-level token for byte 0x%02X (not a gpt2 BPE vocab?)", f->path,
                b);
    }
    return 0;
}

static int load_merges(tokenizer *t, const gguf_file *f) {
    const gguf_value *m = gguf_get_arr(f, "tokenizer.ggml.merges");
    if (!m || m->v.arr.elem != GGUF_TYPE_STRING)
        return rl_seterr("%s: tokenizer.ggml.merges is missing or not a string array", f->path);
    if (m->v.arr.n >= (uint64_t)INT32_MAX) return rl_seterr("%s: too many merges", f->path);
    uint64_t n = m->v.arr.n, cap = 16;
    int bits = 4;
    while (cap < n * 2) cap <<= 1, bits++;
    t->merges = rl_malloc(cap * sizeof(merge_slot), "merge table");
    if (!t->merges) return -1;
    for (uint64_t i = 0; i < cap; i++) t->merges[i].key = MERGE_EMPTY;
    t->merge_mask = cap - 1;
    t->merge_bits = bits;

    uint8_t *produced = rl_calloc((size_t)t->n_vocab, 1, "merge bookkeeping");
    char *cat = NULL;
    size_t cat_cap = 0;
    if (!produced) return -1;
    for (uint64_t r = 0; r < n; r++) {
        gguf_str s = gguf_arr_str(m, r);
        const char *sp = memchr(s.p, ' ', s.n);
        if (!sp || sp == s.p) continue;
        size_t la = (size_t)(sp - s.p), lb = s.n - la - 1;
        int32_t a = tokenizer_find(t, s.p, la), b = tokenizer_find(t, sp + 1, lb);
        if (la + lb > cat_cap) {
            cat_cap = (la + lb) * 2;
            char *nc = realloc(cat, cat_cap);
            if (!nc) {
                free(cat);
                free(produced);
                return rl_seterr("out of memory loading merges");
            }
            cat = nc;
        }
        memcpy(cat, s.p, la);
        memcpy(cat + la, sp + 1, lb);
        int32_t c = tokenizer_find(t, cat, la + lb);
        if (a < 0 || b < 0 || c < 0) continue; /* unusable merge: skipped */
        uint64_t key = merge_key(a, b), h = merge_hash(key, bits);
        while (t->merges[h].key != MERGE_EMPTY && t->merges[h].key != key) h = (h + 1) & t->merge_mask;
        if (t->merges[h].key == key) continue; /* duplicate pair: the lower rank wins */
        t->merges[h] = (merge_slot){key, (int32_t)r, c};
        if (produced[c]) t->dup_results = true;
        produced[c] = 1;
    }
    free(cat);
    free(produced);
    return 0;
}

static int load_added(tokenizer *t) {
    size_t cnt[256] = {0}, total = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        if (!tokenizer_is_added(t, i) || t->text_off[i + 1] == t->text_off[i]) continue;
        cnt[(uint8_t)t->text[t->text_off[i]]]++;
        total++;
    }
    t->added = rl_malloc((total ? total : 1) * sizeof(int32_t), "added tokens");
    if (!t->added) return -1;
    t->added_start[0] = 0;
    for (int b = 0; b < 256; b++) t->added_start[b + 1] = t->added_start[b] + (uint32_t)cnt[b];
    uint32_t fill[256];
    memcpy(fill, t->added_start, sizeof fill);
    for (int32_t i = 0; i < t->n_vocab; i++) {
        if (!tokenizer_is_added(t, i) || t->text_off[i + 1] == t->text_off[i]) continue;
        uint8_t b = (uint8_t)t->text[t->text_off[i]];
        /* insertion sort into the bucket: longest first, then lowest id */
        uint32_t j = fill[b]++;
        uint32_t len = t->text_off[i + 1] - t->text_off[i];
        while (j > t->added_start[b]) {
            int32_t o = t->added[j - 1];
            if (t->text_off[o + 1] - t->text_off[o] >= len) break;
            t->added[j] = o;
            j--;
        }
        t->added[j] = i;
    }
    return 0;
}

static void add_eog(tokenizer *t, int32_t id) {
    if (id < 0 || t->n_eog >= sizeof t->eog / sizeof t->eog[0]) return;
    for (size_t i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return;
    size_t j = t->n_eog++;
    while (j > 0 && t->eog[j - 1] > id) {
        t->eog[j] = t->eog[j - 1];
        j--;
    }
    t->eog[j] = id;
}

static int build_piece_hash(tokenizer *t);

tokenizer *tokenizer_load(const gguf_file *f) {
    char *model = gguf_get_str_dup(f, "tokenizer.ggml.model");
    if (!model) {
        rl_seterr("%s: no tokenizer.ggml.model key (not a model GGUF with a vocab?)", f->path);
        return NULL;
    }
    if (strcmp(model, "gpt2") != 0) {
        rl_seterr("%s: tokenizer model '%s' is not supported (Red Lite implements byte-level BPE, 'gpt2')",
                  f->path, model);
        free(model);
        return NULL;
    }
    free(model);
    /* 'qwen2' (Qwen2/3, Qwen3-Next) and 'qwen35' (Qwen3.5/3.6: the same regex with \p{M}
     * joined to the letter classes); a file without the key is taken as qwen2. */
    char *pre = gguf_get_str_dup(f, "tokenizer.ggml.pre");
    bool marks = pre && strcmp(pre, "qwen35") == 0;
    if (pre && !marks && strcmp(pre, "qwen2") != 0) {
        rl_seterr("%s: pre-tokenizer '%s' is not supported (Red Lite implements 'qwen2' and 'qwen35')",
                  f->path, pre);
        free(pre);
        return NULL;
    }
    free(pre);

    tokenizer *t = rl_calloc(1, sizeof *t, "tokenizer");
    if (!t) return NULL;
    t->marks = marks;
    if (load_vocab(t, f) < 0 || load_merges(t, f) < 0 || load_added(t) < 0 || build_piece_hash(t) < 0) {
        tokenizer_free(t);
        return NULL;
    }
    t->eos = meta_id(f, "tokenizer.ggml.eos_token_id", t->n_vocab);
    t->bos = meta_id(f, "tokenizer.ggml.bos_token_id", t->n_vocab);
    t->pad = meta_id(f, "tokenizer.ggml.padding_token_id", t->n_vocab);
    t->add_bos = false;
    gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &t->add_bos);

    add_eog(t, t->eos);
    add_eog(t, meta_id(f, "tokenizer.ggml.eot_token_id", t->n_vocab));
    add_eog(t, meta_id(f, "tokenizer.ggml.eom_token_id", t->n_vocab));
    static const char *const eog_texts[] = {"<|im_end|>",   "<|endoftext|>", "<|fim_pad|>", "<|repo_name|>",
                                            "<|file_sep|>", "<|eot_id|>",    "<|end|>",     "<end_of_turn>"};
    for (size_t i = 0; i < sizeof eog_texts / sizeof eog_texts[0]; i++) {
        int32_t id = tokenizer_find(t, eog_texts[i], strlen(eog_texts[i]));
        if (id >= 0 && tokenizer_is_added(t, id)) add_eog(t, id);
    }
    return t;
}

tokenizer *tokenizer_load_file(const char *path) {
    gguf_file *f = gguf_open(path);
    if (!f) return NULL;
    tokenizer *t = tokenizer_load(f);
    gguf_close(f);
    return t;
}

/* ---- accessors ------------------------------------------------------------------------ */

int32_t tokenizer_n_vocab(const tokenizer *t) { return t->n_vocab; }

const char *tokenizer_token_text(const tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_vocab) return NULL;
    *len = t->text_off[id + 1] - t->text_off[id];
    return t->text + t->text_off[id];
}

const char *tokenizer_token_piece(const tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_vocab) return NULL;
    *len = t->piece_off[id + 1] - t->piece_off[id];
    return t->piece + t->piece_off[id];
}

int tokenizer_token_type(const tokenizer *t, int32_t id) {
    return id < 0 || id >= t->n_vocab ? TOK_TYPE_UNDEFINED : t->type[id];
}

int32_t tokenizer_eos(const tokenizer *t) { return t->eos; }
int32_t tokenizer_bos(const tokenizer *t) { return t->bos; }
int32_t tokenizer_pad(const tokenizer *t) { return t->pad; }
bool tokenizer_add_bos(const tokenizer *t) { return t->add_bos; }

bool tokenizer_is_eog(const tokenizer *t, int32_t id) {
    for (size_t i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return true;
    return false;
}

size_t tokenizer_eog_ids(const tokenizer *t, const int32_t **ids) {
    *ids = t->eog;
    return t->n_eog;
}

bool tokenizer_is_added(const tokenizer *t, int32_t id) {
    int ty = tokenizer_token_type(t, id);
    return ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_USER_DEFINED;
}

/* ---- encoding ------------------------------------------------------------------------- */

void tok_ids_free(tok_ids *v) {
    free(v->ids);
    v->ids = NULL;
    v->n = v->cap = 0;
}

static int ids_reserve(tok_ids *v, size_t extra) {
    if (v->n + extra <= v->cap) return 0;
    size_t cap = v->cap ? v->cap : 64;
    while (cap < v->n + extra) cap *= 2;
    int32_t *p = realloc(v->ids, cap * sizeof(int32_t));
    if (!p) return rl_seterr("out of memory growing a token list to %zu ids", cap);
    v->ids = p;
    v->cap = cap;
    return 0;
}

int tok_ids_push(tok_ids *v, int32_t id) {
    if (ids_reserve(v, 1) < 0) return -1;
    v->ids[v->n++] = id;
    return 0;
}

/* Per-call scratch (so a tokenizer can be shared between threads). */
typedef struct {
    tok_buf norm;  /* NFC output */
    uint32_t *cp;  /* per character: code point (UINT32_MAX for an invalid byte) */
    uint32_t *off; /* byte offset of each character, plus one past the end */
    uint8_t *cls;
    size_t ch_cap;
    int32_t *bpe; /* heap BPE work arrays */
    size_t bpe_cap;
} enc_ctx;

static void ctx_free(enc_ctx *c) {
    free(c->norm.p);
    free(c->cp);
    free(c->off);
    free(c->cls);
    free(c->bpe);
}

/* Room for `need` elements in *p (capacity *cap). On success *p is never NULL, even for need 0
 * (callers index it without a check). */
static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap && *p) return 0;
    size_t n = *cap ? *cap : 256;
    while (n < need) n *= 2;
    void *q = realloc(*p, n * elem);
    if (!q) return rl_seterr("out of memory in the tokenizer (%zu bytes)", n * elem);
    *p = q;
    *cap = n;
    return 0;
}

/* End (character index) of the pre-token starting at character i, per the qwen2 regex
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|
 *   \s*[\r\n]+|\s+(?!\S)|\s+
 * or the qwen35 regex, which is the same with [\p{L}\p{M}]+ in the second alternative and
 * [^\s\p{L}\p{M}\p{N}] in the fourth. One matcher serves both: for qwen2 the caller classes
 * marks as TOK_C_P, so TOK_C_M never occurs and the mark branches below are dead. Regex engine
 * semantics: the first alternative that matches wins; greedy quantifiers backtrack. Every
 * character belongs to exactly one of L, N, M, \s, other, so some alternative always matches
 * at least one character. */
static inline bool is_lm(uint8_t c) { return c == TOK_C_L || c == TOK_C_M; }

static size_t pretok_end(const uint32_t *cp, const uint8_t *cls, size_t i, size_t n) {
    /* 1: contractions, case-insensitive (the oracle's case folding also maps U+017F to s) */
    if (cp[i] == '\'' && i + 1 < n) {
        uint32_t a = cp[i + 1];
        if (a == 0x17F) return i + 2;
        if (a < 0x80) {
            a |= 0x20;
            if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
            if (i + 2 < n && cp[i + 2] < 0x80) {
                uint32_t b = cp[i + 2] | 0x20;
                if (((a == 'r' || a == 'v') && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
            }
        }
    }
    uint8_t c = cls[i];
    /* 2: [^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+ — the optional lead is \s but CR/LF, other, or a
     * mark; a lead that is itself a letter or mark just starts the run */
    if ((c == TOK_C_WS || c == TOK_C_P) && i + 1 < n && is_lm(cls[i + 1])) {
        size_t j = i + 2;
        while (j < n && is_lm(cls[j])) j++;
        return j;
    }
    if (is_lm(c)) {
        size_t j = i + 1;
        while (j < n && is_lm(cls[j])) j++;
        return j;
    }
    /* 3: \p{N} (one digit per pre-token) */
    if (c == TOK_C_N) return i + 1;
    /* 4: ' '?[^\s\p{L}\p{N}]+[\r\n]* */
    size_t s = (cp[i] == ' ' && i + 1 < n && cls[i + 1] == TOK_C_P) ? i + 1 : i;
    if (cls[s] == TOK_C_P) {
        size_t j = s + 1;
        while (j < n && cls[j] == TOK_C_P) j++;
        while (j < n && cls[j] == TOK_C_NL) j++;
        return j;
    }
    /* c is whitespace from here on. j = end of the whitespace run. */
    size_t j = i, last_nl = SIZE_MAX;
    while (j < n && (cls[j] == TOK_C_WS || cls[j] == TOK_C_NL)) {
        if (cls[j] == TOK_C_NL) last_nl = j;
        j++;
    }
    /* 5: \s*[\r\n]+ — \s* backs off to the last CR/LF of the run */
    if (last_nl != SIZE_MAX) return last_nl + 1;
    /* 6: \s+(?!\S) — the whole run at the end of the text, else all but its last character */
    if (j == n) return j;
    if (j - i >= 2) return j - 1;
    /* 7: \s+ */
    return j;
}

#define BPE_SMALL 48

/* BPE of one pre-token p[0..m) (m >= 1): append its ids. */
static int bpe(const tokenizer *t, enc_ctx *c, const uint8_t *p, size_t m, tok_ids *out) {
    if (ids_reserve(out, m) < 0) return -1;
    if (m == 1) {
        out->ids[out->n++] = t->byte_id[p[0]];
        return 0;
    }
    if (m <= BPE_SMALL && !t->dup_results) {
        /* lowest rank first, leftmost among equal ranks (equal rank = same pair) */
        int32_t sym[BPE_SMALL], rk[BPE_SMALL], nid[BPE_SMALL];
        size_t n = m;
        for (size_t k = 0; k < n; k++) sym[k] = t->byte_id[p[k]];
        for (size_t k = 0; k + 1 < n; k++) rk[k] = merge_find(t, sym[k], sym[k + 1], &nid[k]);
        while (n > 1) {
            size_t best = 0;
            for (size_t k = 1; k + 1 < n; k++)
                if (rk[k] < rk[best]) best = k;
            if (rk[best] == NO_RANK) break;
            sym[best] = nid[best];
            memmove(sym + best + 1, sym + best + 2, (n - best - 2) * sizeof(int32_t));
            if (n - best >= 3) {
                memmove(rk + best + 1, rk + best + 2, (n - best - 3) * sizeof(int32_t));
                memmove(nid + best + 1, nid + best + 2, (n - best - 3) * sizeof(int32_t));
            }
            n--;
            if (best > 0) rk[best - 1] = merge_find(t, sym[best - 1], sym[best], &nid[best - 1]);
            if (best + 1 < n) rk[best] = merge_find(t, sym[best], sym[best + 1], &nid[best]);
        }
        memcpy(out->ids + out->n, sym, n * sizeof(int32_t));
        out->n += n;
        return 0;
    }
    /* Long pre-token: linked list of symbols + binary heap of candidate merges ordered by
     * (rank, position); a popped candidate is applied only if the pair now at its position
     * still merges into the same token. */
    size_t need = m * 3 + (m * 3) * 4; /* id/prev/next + heap entries of 4 ints */
    if (grow((void **)&c->bpe, &c->bpe_cap, need, sizeof(int32_t)) < 0) return -1;
    int32_t *id = c->bpe, *prev = id + m, *next = prev + m;
    int32_t(*heap)[4] = (int32_t(*)[4])(next + m); /* rank, pos, new id, unused */
    size_t hn = 0;
#define HLESS(x, y) (heap[x][0] < heap[y][0] || (heap[x][0] == heap[y][0] && heap[x][1] < heap[y][1]))
#define HSWAP(x, y)                                                                                          \
    do {                                                                                                     \
        int32_t tmp_[4];                                                                                     \
        memcpy(tmp_, heap[x], sizeof tmp_);                                                                  \
        memcpy(heap[x], heap[y], sizeof tmp_);                                                               \
        memcpy(heap[y], tmp_, sizeof tmp_);                                                                  \
    } while (0)
#define HPUSH(r_, pos_, nid_)                                                                                \
    do {                                                                                                     \
        size_t k_ = hn++;                                                                                    \
        heap[k_][0] = (r_), heap[k_][1] = (int32_t)(pos_), heap[k_][2] = (nid_), heap[k_][3] = 0;            \
        while (k_ > 0 && HLESS(k_, (k_ - 1) / 2)) {                                                          \
            HSWAP(k_, (k_ - 1) / 2);                                                                         \
            k_ = (k_ - 1) / 2;                                                                               \
        }                                                                                                    \
    } while (0)
    for (size_t k = 0; k < m; k++) {
        id[k] = t->byte_id[p[k]];
        prev[k] = (int32_t)k - 1;
        next[k] = k + 1 < m ? (int32_t)k + 1 : -1;
    }
    for (size_t k = 0; k + 1 < m; k++) {
        int32_t nw, r = merge_find(t, id[k], id[k + 1], &nw);
        if (r != NO_RANK) HPUSH(r, k, nw);
    }
    while (hn > 0) {
        int32_t r = heap[0][0], pos = heap[0][1], nw = heap[0][2];
        (void)r;
        heap[0][0] = heap[hn - 1][0], heap[0][1] = heap[hn - 1][1], heap[0][2] = heap[hn - 1][2];
        hn--;
        for (size_t k = 0;;) {
            size_t l = 2 * k + 1, s = k;
            if (l < hn && HLESS(l, s)) s = l;
            if (l + 1 < hn && HLESS(l + 1, s)) s = l + 1;
            if (s == k) break;
            HSWAP(k, s);
            k = s;
        }
        if (id[pos] < 0 || next[pos] < 0) continue;
        int32_t q = next[pos], cur;
        if (merge_find(t, id[pos], id[q], &cur) == NO_RANK || cur != nw) continue;
        id[pos] = nw;
        id[q] = -1;
        next[pos] = next[q];
        if (next[q] >= 0) prev[next[q]] = pos;
        if (prev[pos] >= 0) {
            int32_t w, r2 = merge_find(t, id[prev[pos]], id[pos], &w);
            if (r2 != NO_RANK) HPUSH(r2, prev[pos], w);
        }
        if (next[pos] >= 0) {
            int32_t w, r2 = merge_find(t, id[pos], id[next[pos]], &w);
            if (r2 != NO_RANK) HPUSH(r2, pos, w);
        }
    }
#undef HLESS
#undef HSWAP
#undef HPUSH
    for (int32_t k = 0; k >= 0; k = next[k]) out->ids[out->n++] = id[k];
    return 0;
}

/* Shortcut table: the piece bytes of every normal token whose own BPE is that token alone
 * (checked here by running BPE on it), so a pre-token equal to such a piece needs one lookup
 * instead of a merge loop. Exact by construction: BPE is a function of the bytes. */
#define PIECE_SHORTCUT_MAX 64

static int build_piece_hash(tokenizer *t) {
    uint64_t cap = 1;
    while (cap < (uint64_t)t->n_vocab * 2) cap <<= 1;
    t->phash = rl_malloc(cap * sizeof(int32_t), "piece hash");
    if (!t->phash) return -1;
    memset(t->phash, 0xFF, cap * sizeof(int32_t));
    t->phash_mask = cap - 1;
    enc_ctx c = {0};
    tok_ids v = {0};
    int rc = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        uint32_t a = t->piece_off[id], len = t->piece_off[id + 1] - a;
        if (t->type[id] != TOK_TYPE_NORMAL || len < 2 || len > PIECE_SHORTCUT_MAX) continue;
        v.n = 0;
        if (bpe(t, &c, (const uint8_t *)t->piece + a, len, &v) < 0) {
            rc = -1;
            break;
        }
        if (v.n != 1 || v.ids[0] != id) continue;
        uint64_t h = hash_bytes(t->piece + a, len) & t->phash_mask;
        bool dup = false;
        for (; t->phash[h] >= 0; h = (h + 1) & t->phash_mask) {
            int32_t o = t->phash[h];
            if (t->piece_off[o + 1] - t->piece_off[o] == len &&
                !memcmp(t->piece + t->piece_off[o], t->piece + a, len)) {
                dup = true;
                break;
            }
        }
        if (!dup) t->phash[h] = id;
    }
    ctx_free(&c);
    tok_ids_free(&v);
    return rc;
}

static inline int32_t piece_find(const tokenizer *t, const uint8_t *s, size_t len) {
    for (uint64_t h = hash_bytes((const char *)s, len) & t->phash_mask;; h = (h + 1) & t->phash_mask) {
        int32_t id = t->phash[h];
        if (id < 0) return -1;
        uint32_t a = t->piece_off[id];
        if (t->piece_off[id + 1] - a == len && memcmp(t->piece + a, s, len) == 0) return id;
    }
}

/* One span of text between added tokens: NFC, pre-tokenise, BPE. */
static int encode_span(const tokenizer *t, enc_ctx *c, const uint8_t *s, size_t n, tok_ids *out) {
    if (n == 0) return 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] >= 0xCC) {
            if (tok_nfc(s, n, &c->norm) < 0) return -1;
            s = c->norm.p;
            n = c->norm.len;
            break;
        }
    }
    size_t cap = c->ch_cap;
    if (grow((void **)&c->cp, &cap, n + 1, sizeof(uint32_t)) < 0) return -1;
    cap = c->ch_cap;
    if (grow((void **)&c->off, &cap, n + 1, sizeof(uint32_t)) < 0) return -1;
    cap = c->ch_cap;
    if (grow((void **)&c->cls, &cap, n + 1, 1) < 0) return -1;
    c->ch_cap = cap;
    size_t nch = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t len = 1;
        if (s[i] < 0x80) {
            cp = s[i];
        } else {
            len = tok_utf8_len(s + i, n - i);
            if (len) {
                cp = tok_utf8_decode(s + i, len);
            } else {
                cp = UINT32_MAX;
                len = 1;
            }
        }
        c->cp[nch] = cp;
        uint8_t k = cp == UINT32_MAX ? TOK_C_P : tok_class(cp);
        c->cls[nch] = k == TOK_C_M && !t->marks ? TOK_C_P : k;
        c->off[nch] = (uint32_t)i;
        nch++;
        i += len;
    }
    c->off[nch] = (uint32_t)n;
    for (size_t i = 0; i < nch;) {
        size_t j = pretok_end(c->cp, c->cls, i, nch);
        const uint8_t *w = s + c->off[i];
        size_t wl = c->off[j] - c->off[i];
        int32_t id = wl >= 2 && wl <= PIECE_SHORTCUT_MAX ? piece_find(t, w, wl) : -1;
        if (id >= 0) {
            if (tok_ids_push(out, id) < 0) return -1;
        } else if (bpe(t, c, w, wl, out) < 0) {
            return -1;
        }
        i = j;
    }
    return 0;
}

/* The added-token pass skips matches that overlap a plain range (ranges sorted, disjoint):
 * the text there is encoded like any text, and the spans between added tokens are encoded
 * whole, across range edges, so text without added-token strings gives the same ids as a
 * plain TOK_PARSE_SPECIAL encode. */
static int encode_ranges(const tokenizer *t, const char *text, size_t len, unsigned flags,
                         const size_t *plain, size_t n_plain, tok_ids *out) {
    if (len >= UINT32_MAX / 2) return rl_seterr("text too long to tokenize in one call (%zu bytes)", len);
    const uint8_t *s = (const uint8_t *)text;
    enc_ctx c = {0};
    int rc = 0;
    size_t start = 0, r = 0;
    if (flags & TOK_PARSE_SPECIAL) {
        for (size_t i = 0; i < len;) {
            while (r < n_plain && plain[2 * r + 1] <= i) r++;
            if (r < n_plain && plain[2 * r] <= i) { /* inside a plain range: jump to its end */
                i = plain[2 * r + 1];
                continue;
            }
            size_t lim = r < n_plain ? plain[2 * r] - i : len - i; /* a match may not reach the range */
            uint32_t a = t->added_start[s[i]], b = t->added_start[s[i] + 1];
            int32_t hit = -1;
            size_t hit_len = 0;
            for (uint32_t k = a; k < b; k++) {
                int32_t id = t->added[k];
                size_t tl = t->text_off[id + 1] - t->text_off[id];
                if (tl <= lim && memcmp(s + i, t->text + t->text_off[id], tl) == 0) {
                    hit = id;
                    hit_len = tl;
                    break; /* bucket is sorted longest first */
                }
            }
            if (hit < 0) {
                i++;
                continue;
            }
            if (encode_span(t, &c, s + start, i - start, out) < 0 || tok_ids_push(out, hit) < 0) {
                rc = -1;
                goto done;
            }
            i += hit_len;
            start = i;
        }
    }
    rc = encode_span(t, &c, s + start, len - start, out);
done:
    ctx_free(&c);
    return rc;
}

int tokenizer_encode(const tokenizer *t, const char *text, size_t len, unsigned flags, tok_ids *out) {
    return encode_ranges(t, text, len, flags, NULL, 0, out);
}

int tokenizer_encode_plain(const tokenizer *t, const char *text, size_t len, const size_t *plain,
                           size_t n_plain, tok_ids *out) {
    for (size_t i = 0; i < n_plain; i++)
        if (plain[2 * i] > plain[2 * i + 1] || plain[2 * i + 1] > len ||
            (i && plain[2 * i] < plain[2 * i - 1]))
            return rl_seterr("tokenizer_encode_plain: ranges must be sorted, disjoint and inside the text");
    return encode_ranges(t, text, len, TOK_PARSE_SPECIAL, plain, n_plain, out);
}

/* ---- decoding ------------------------------------------------------------------------- */

void tokdec_init(tokdec *d, const tokenizer *t, unsigned flags) {
    memset(d, 0, sizeof *d);
    d->tok = t;
    d->flags = flags;
}

void tokdec_reset(tokdec *d) { d->npend = 0; }

void tokdec_free(tokdec *d) {
    free(d->buf);
    free(d->work);
    d->buf = d->work = NULL;
    d->cap = d->work_cap = 0;
}

static const char REPLACEMENT[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

/* Move the complete part of work[0..n) to d->buf; keep a trailing incomplete sequence
 * in d->pend unless `final`. */
static const char *tokdec_emit(tokdec *d, const uint8_t *w, size_t n, bool final, size_t *len) {
    if (grow((void **)&d->buf, &d->cap, n * 3 + 4, 1) < 0) return NULL;
    size_t o = 0;
    d->npend = 0;
    for (size_t i = 0; i < n;) {
        if (w[i] < 0x80) {
            d->buf[o++] = (char)w[i++];
            continue;
        }
        size_t need, k = tok_utf8_scan(w + i, n - i, &need);
        if (k == need) {
            memcpy(d->buf + o, w + i, k);
            o += k;
        } else if (i + k == n && need && !final) {
            memcpy(d->pend, w + i, k); /* incomplete: wait for the next token */
            d->npend = (int)k;
        } else if (d->flags & TOK_DECODE_REPLACE) {
            memcpy(d->buf + o, REPLACEMENT, 3);
            o += 3;
        } else {
            memcpy(d->buf + o, w + i, k);
            o += k;
        }
        i += k;
    }
    d->len = o;
    *len = o;
    return d->buf ? d->buf : "";
}

const char *tokdec_push(tokdec *d, int32_t id, size_t *len) {
    const tokenizer *t = d->tok;
    size_t plen = 0;
    const char *piece = tokenizer_token_piece(t, id, &plen);
    int ty = tokenizer_token_type(t, id);
    if (!piece || ((ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_UNUSED) && !(d->flags & TOK_DECODE_SPECIAL)))
        plen = 0;
    if (grow((void **)&d->work, &d->work_cap, (size_t)d->npend + plen + 1, 1) < 0) return NULL;
    memcpy(d->work, d->pend, (size_t)d->npend);
    if (plen) memcpy(d->work + d->npend, piece, plen);
    return tokdec_emit(d, (const uint8_t *)d->work, (size_t)d->npend + plen, false, len);
}

const char *tokdec_flush(tokdec *d, size_t *len) {
    uint8_t tmp[4];
    size_t n = (size_t)d->npend;
    memcpy(tmp, d->pend, n);
    return tokdec_emit(d, tmp, n, true, len);
}

int tokenizer_decode(const tokenizer *t, const int32_t *ids, size_t n, unsigned flags, char **out,
                     size_t *out_len) {
    tokdec d;
    tokdec_init(&d, t, flags);
    char *res = NULL;
    size_t rl = 0, rc = 0;
    for (size_t i = 0; i <= n; i++) {
        size_t len;
        const char *p = i < n ? tokdec_push(&d, ids[i], &len) : tokdec_flush(&d, &len);
        if (!p || grow((void **)&res, &rc, rl + len + 1, 1) < 0) {
            free(res);
            tokdec_free(&d);
            return -1;
        }
        memcpy(res + rl, p, len);
        rl += len;
    }
    res[rl] = 0;
    tokdec_free(&d);
    *out = res;
    *out_len = rl;
    return 0;
}
