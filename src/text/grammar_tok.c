/* grammar_tok.c — token bytes, the token trie and the matcher's token-level calls (contract in
 * grammar.h). */
#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "text/grammar_int.h"

/* ---- the vocabulary ------------------------------------------------------------------------- */

static int tok_cmp(const void *a, const void *b, void *ctx) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    const gvocab *v = ctx;
    int m = v->len[x] < v->len[y] ? v->len[x] : v->len[y];
    int c = memcmp(v->pool + v->off[x], v->pool + v->off[y], (size_t)m);
    if (c) return c;
    if (v->len[x] != v->len[y]) return v->len[x] < v->len[y] ? -1 : 1;
    return (x > y) - (x < y);
}

void gvocab_free(gvocab *v) {
    if (!v) return;
    free(v->off);
    free(v->len);
    free(v->kind);
    free(v->pool);
    free(v->tbyte);
    free(v->tdepth);
    free(v->ttok);
    free(v->tend);
    free(v);
}

int32_t gvocab_n_vocab(const gvocab *v) { return v->n_vocab; }

/* The trie of the byte tokens in depth-first order (see grammar_int.h), from the ids sorted by
 * their bytes: each token opens nodes from its common prefix with the previous one down to its
 * last byte (a token whose bytes equal the previous one's gets a leaf of its own). */
static int build_trie(gvocab *v, const int32_t *ord, int n, size_t total) {
    v->tbyte = malloc(total ? total : 1);
    v->tdepth = malloc(sizeof(uint16_t) * (total ? total : 1));
    v->ttok = malloc(sizeof(int32_t) * (total ? total : 1));
    v->tend = malloc(sizeof(uint32_t) * (total ? total : 1));
    uint32_t *open = malloc(sizeof(uint32_t) * (size_t)(v->max_len + 1));
    if (!v->tbyte || !v->tdepth || !v->ttok || !v->tend || !open) {
        free(open);
        return rl_seterr("out of memory (token trie)");
    }
    uint32_t nn = 0;
    int depth = 0, plen = 0;
    const uint8_t *prev = NULL;
    for (int k = 0; k < n; k++) {
        int32_t id = ord[k];
        const uint8_t *b = (const uint8_t *)v->pool + v->off[id];
        int len = v->len[id], l = 0;
        while (prev && l < len && l < plen && prev[l] == b[l]) l++;
        if (l >= len) l = len - 1;
        for (int d = l; d < depth; d++) v->tend[open[d]] = nn;
        for (int d = l; d < len; d++) {
            v->tbyte[nn] = b[d];
            v->tdepth[nn] = (uint16_t)d;
            v->ttok[nn] = -1;
            open[d] = nn++;
        }
        v->ttok[nn - 1] = id;
        depth = len;
        prev = b, plen = len;
    }
    for (int d = 0; d < depth; d++) v->tend[open[d]] = nn;
    v->n_nodes = nn;
    free(open);
    return 0;
}

gvocab *gvocab_new(const tokenizer *t) {
    gvocab *v = rl_calloc(1, sizeof *v, "grammar vocabulary");
    if (!v) return NULL;
    int32_t n = tokenizer_n_vocab(t);
    v->n_vocab = n;
    v->off = malloc(sizeof(uint32_t) * (size_t)n);
    v->len = malloc(sizeof(uint16_t) * (size_t)n);
    v->kind = malloc((size_t)n);
    int32_t *ord = malloc(sizeof(int32_t) * (size_t)n);
    if (!v->off || !v->len || !v->kind || !ord) goto oom;
    size_t total = 0;
    for (int32_t id = 0; id < n; id++) {
        size_t len = 0;
        int ty = tokenizer_token_type(t, id);
        const char *p = tokenizer_token_piece(t, id, &len);
        if (tokenizer_is_eog(t, id)) v->kind[id] = TK_EOG;
        else if (!p || len == 0 || len > 0xffff ||
                 (ty != TOK_TYPE_NORMAL && ty != TOK_TYPE_USER_DEFINED && ty != TOK_TYPE_BYTE))
            v->kind[id] = TK_NEVER;
        else v->kind[id] = TK_BYTES, total += len;
    }
    if (!(v->pool = malloc(total ? total : 1))) goto oom;
    size_t at = 0;
    int nb = 0;
    for (int32_t id = 0; id < n; id++) {
        v->off[id] = (uint32_t)at, v->len[id] = 0;
        if (v->kind[id] != TK_BYTES) continue;
        size_t len;
        const char *p = tokenizer_token_piece(t, id, &len);
        memcpy(v->pool + at, p, len);
        v->len[id] = (uint16_t)len;
        at += len;
        if ((int)len > v->max_len) v->max_len = (int)len;
        ord[nb++] = id;
    }
    qsort_r(ord, (size_t)nb, sizeof *ord, tok_cmp, v);
    if (build_trie(v, ord, nb, total)) goto fail;
    free(ord);
    return v;
oom:
    rl_seterr("out of memory (grammar vocabulary)");
fail:
    free(ord);
    gvocab_free(v);
    return NULL;
}

/* ---- the matcher ------------------------------------------------------------------------------ */

struct gmatch {
    const grammar *g;
    const gvocab *v;
    gstate cur;
    gstate tmp[2]; /* a token's bytes, stepped alternately */
    gstate save;   /* gmatch_prefix */
    gstate *stk;   /* the trie walk: the state after each depth (v->max_len of them, lazily) */
    long long left;
    long rest; /* gstate_min_remaining(cur), -2 = not computed */
    gmatch_stats st;
};

gmatch *gmatch_new(const grammar *g, const gvocab *v) {
    if (!g->finished) {
        rl_seterr("gmatch_new: the grammar is not finished");
        return NULL;
    }
    gmatch *m = rl_calloc(1, sizeof *m, "grammar matcher");
    if (!m) return NULL;
    m->g = g;
    m->v = v;
    gmatch_reset(m);
    return m;
}

void gmatch_free(gmatch *m) {
    if (!m) return;
    free(m->stk);
    free(m);
}

void gmatch_reset(gmatch *m) {
    gstate_init(m->g, &m->cur);
    m->left = -1;
    m->rest = -2;
}

static long cur_rest(gmatch *m) {
    if (m->rest == -2) m->rest = gstate_min_remaining(m->g, &m->cur);
    return m->rest;
}

/* the state after bytes b[0..n) from `in` (one of tmp), NULL if rejected */
static const gstate *run_bytes(gmatch *m, const gstate *in, const uint8_t *b, size_t n) {
    const gstate *s = in;
    for (size_t i = 0; i < n; i++) {
        gstate *o = &m->tmp[i & 1];
        gstate_step(m->g, s, b[i], o);
        if (o->n == 0) return NULL;
        s = o;
    }
    return s;
}

int gmatch_feed(gmatch *m, const char *s, size_t n) {
    if (n == 0) return 0;
    const gstate *r = run_bytes(m, &m->cur, (const uint8_t *)s, n);
    if (!r) return -1;
    gstate_copy(&m->cur, r);
    m->rest = -2;
    return 0;
}

long gmatch_min_remaining(const gmatch *m) { return gstate_min_remaining(m->g, &m->cur); }
bool gmatch_complete(const gmatch *m) { return gstate_min_remaining(m->g, &m->cur) == 0; }
bool gmatch_done(const gmatch *m) { return gstate_done(&m->cur); }
void gmatch_set_budget(gmatch *m, long long left) { m->left = left; }

/* Budget rule (grammar.h): after a token of nb bytes, the bytes still needed must fit in the
 * tokens left after it, or, when they did not fit before it either, have shrunk. A byte adds at
 * most g->grow to them, so a token far from the limit passes without computing them. */
static bool budget_ok(gmatch *m, const gstate *after, size_t nb) {
    if (m->left < 0) return true;
    long d0 = cur_rest(m);
    long long lim = m->left - 1;
    if (d0 - 1 > lim) lim = d0 - 1;
    if ((long long)d0 + (long long)nb * m->g->grow <= lim) return true;
    return gstate_min_remaining(m->g, after) <= lim;
}

static bool allows(gmatch *m, int32_t tok, const gstate **after) {
    *after = NULL;
    if (!m->v || tok < 0 || tok >= m->v->n_vocab) return false;
    m->st.tests++;
    switch (m->v->kind[tok]) {
    case TK_EOG: return cur_rest(m) == 0;
    case TK_BYTES: {
        const gstate *r = run_bytes(m, &m->cur, (const uint8_t *)m->v->pool + m->v->off[tok], m->v->len[tok]);
        if (!r || !budget_ok(m, r, m->v->len[tok])) return false;
        *after = r;
        return true;
    }
    default: return false;
    }
}

bool gmatch_allows(gmatch *m, int32_t tok) {
    const gstate *r;
    return allows(m, tok, &r);
}

int gmatch_accept(gmatch *m, int32_t tok) {
    if (!m->v || tok < 0 || tok >= m->v->n_vocab)
        return rl_seterr("grammar: token %d is outside the vocabulary", tok);
    if (m->v->kind[tok] == TK_EOG) {
        if (cur_rest(m) != 0) return rl_seterr("grammar: end of generation before the output is complete");
    } else if (m->v->kind[tok] == TK_BYTES) {
        const gstate *r = run_bytes(m, &m->cur, (const uint8_t *)m->v->pool + m->v->off[tok], m->v->len[tok]);
        if (!r) return rl_seterr("grammar: token %d does not continue the output", tok);
        gstate_copy(&m->cur, r);
        m->rest = -2;
    } else {
        return rl_seterr("grammar: token %d (a control token) is not allowed", tok);
    }
    if (m->left > 0) m->left--;
    return 0;
}

size_t gmatch_fill(gmatch *m, uint32_t *bits) {
    const gvocab *v = m->v;
    if (!v) return 0;
    memset(bits, 0, sizeof(uint32_t) * (size_t)((v->n_vocab + 31) / 32));
    if (!m->stk && !(m->stk = calloc((size_t)v->max_len + 1, sizeof(gstate)))) return 0;
    m->st.fills++;
    size_t count = 0;
    for (uint32_t i = 0; i < v->n_nodes;) {
        int d = v->tdepth[i];
        const gstate *in = d ? &m->stk[d - 1] : &m->cur;
        gstate *out = &m->stk[d];
        gstate_step(m->g, in, v->tbyte[i], out);
        m->st.fill_nodes++;
        if (out->n == 0) { /* no token under this prefix */
            i = v->tend[i];
            continue;
        }
        int32_t tok = v->ttok[i];
        if (tok >= 0 && budget_ok(m, out, (size_t)d + 1)) bits[tok >> 5] |= 1u << (tok & 31), count++;
        i++;
    }
    if (cur_rest(m) == 0)
        for (int32_t id = 0; id < v->n_vocab; id++)
            if (v->kind[id] == TK_EOG) bits[id >> 5] |= 1u << (id & 31), count++;
    return count;
}

int gmatch_prefix(gmatch *m, const int32_t *toks, int n) {
    gstate_copy(&m->save, &m->cur);
    long long left = m->left;
    long rest = m->rest;
    int k = 0;
    for (; k < n; k++) {
        if (!gmatch_allows(m, toks[k])) break;
        bool eog = m->v->kind[toks[k]] == TK_EOG;
        if (gmatch_accept(m, toks[k])) break;
        if (eog) { /* nothing comes after it */
            k++;
            break;
        }
    }
    gstate_copy(&m->cur, &m->save);
    m->left = left;
    m->rest = rest;
    return k;
}

void gmatch_get_stats(const gmatch *m, gmatch_stats *st) { *st = m->st; }

static bool mask_allow(void *ud, int32_t tok) { return gmatch_allows(ud, tok); }
static size_t mask_fill(void *ud, uint32_t *bits) { return gmatch_fill(ud, bits); }
static int mask_prefix(void *ud, const int32_t *t, int n) { return gmatch_prefix(ud, t, n); }

sampler_mask gmatch_sampler_mask(gmatch *m) {
    return (sampler_mask){.allow = mask_allow, .fill = mask_fill, .prefix = mask_prefix, .ud = m};
}
