/* grammar.c — grammar nodes and the incremental byte matcher (contract in grammar.h).
 *
 * A thread is a stack of frames; the top frame gets each byte and answers one of: consumed,
 * consumed and finished (pop), not mine but I am complete (pop and give the byte to the frame
 * below: how a number ends), push a child for this byte (a value starts), or reject. A frame
 * that pushes a child has already moved to the state it is in after the child (an object to
 * "after a value"), so a popped child leaves its parent ready. anyOf forks the thread, one copy
 * per alternative whose first-byte set holds the byte; copies that reject die, duplicates are
 * merged. The bytes still needed to finish a thread are the sum of its frames' own remainders
 * (each exact, given the frame above it finishes), so gstate_min_remaining is the exact minimum. */
#include "text/grammar_int.h"

#include <stdlib.h>
#include <string.h>

#include "base/common.h"

/* ---- building ------------------------------------------------------------------------------- */

static int grow_arr(void **p, int *cap, int need, size_t elem) {
    if (need <= *cap) return 0;
    int nc = *cap ? *cap * 2 : 16;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, (size_t)nc * elem);
    if (!q) return rl_seterr("out of memory (grammar)");
    *p = q;
    *cap = nc;
    return 0;
}

static int32_t pool_add(grammar *g, const char *s, size_t n) {
    if (g->n_pool + n + 1 > g->cap_pool) {
        size_t nc = g->cap_pool ? g->cap_pool * 2 : 1024;
        while (nc < g->n_pool + n + 1) nc *= 2;
        char *q = realloc(g->pool, nc);
        if (!q) return rl_seterr("out of memory (grammar)");
        g->pool = q;
        g->cap_pool = nc;
    }
    if (g->n_pool + n > 0x7fffffff) return rl_seterr("grammar too large");
    int32_t off = (int32_t)g->n_pool;
    memcpy(g->pool + off, s, n);
    g->n_pool += n;
    g->pool[g->n_pool] = 0;
    return off;
}

static int node_new(grammar *g, int kind) {
    if (g->finished) return rl_seterr("grammar: already finished");
    if (grow_arr((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof(gnode))) return -1;
    gnode *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof *n);
    n->kind = (uint8_t)kind;
    n->extra = -1;
    n->max = -1;
    return g->n_nodes++;
}

static int list_add(grammar *g, const int32_t *v, int n) {
    if (grow_arr((void **)&g->list, &g->cap_list, g->n_list + n, sizeof(int32_t))) return -1;
    int off = g->n_list;
    if (n) memcpy(g->list + off, v, sizeof(int32_t) * (size_t)n);
    g->n_list += n;
    return off;
}

grammar *grammar_new(void) {
    grammar *g = rl_calloc(1, sizeof *g, "grammar");
    if (!g) return NULL;
    g->root = g->any = g->any_obj = g->any_arr = g->any_str = g->any_num = g->any_lit = -1;
    return g;
}

void grammar_free(grammar *g) {
    if (!g) return;
    free(g->nodes);
    free(g->props);
    free(g->lits);
    free(g->list);
    free(g->pool);
    free(g);
}

int grammar_reserve(grammar *g) { return node_new(g, K_UNDEF); }

static bool valid_id(const grammar *g, int id) { return id >= 0 && id < g->n_nodes; }

int grammar_define(grammar *g, int dst, int src) {
    if (!valid_id(g, dst) || !valid_id(g, src) || g->nodes[dst].kind != K_UNDEF || dst == src)
        return rl_seterr("grammar_define: bad node ids %d <- %d", dst, src);
    g->nodes[dst].kind = K_ALIAS;
    g->nodes[dst].extra = src;
    return 0;
}

/* JSON string content of raw UTF-8 text (", \ and control characters escaped). */
static int32_t pool_add_json(grammar *g, const char *s, size_t n, int32_t *len) {
    char *b = malloc(n * 6 + 1);
    if (!b) return rl_seterr("out of memory (grammar)");
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') b[k++] = '\\', b[k++] = (char)c;
        else if (c == '\n') b[k++] = '\\', b[k++] = 'n';
        else if (c == '\t') b[k++] = '\\', b[k++] = 't';
        else if (c == '\r') b[k++] = '\\', b[k++] = 'r';
        else if (c < 0x20) k += (size_t)snprintf(b + k, 7, "\\u%04x", c);
        else b[k++] = (char)c;
    }
    int32_t off = k > 0xffff ? rl_seterr("grammar: a key of %zu bytes is too long", k) : pool_add(g, b, k);
    free(b);
    *len = (int32_t)k;
    return off;
}

/* Byte strings of g's pool in lexicographic order (the grammar is passed, never kept in a static:
 * two grammars may be built at once by two server slots). */
static int bytes_cmp(const grammar *g, int32_t ao, int32_t al, int32_t bo, int32_t bl) {
    int32_t m = al < bl ? al : bl;
    int c = memcmp(g->pool + ao, g->pool + bo, (size_t)m);
    return c ? c : (al > bl) - (al < bl);
}
static int prop_cmp(const grammar *g, const gprop *x, const gprop *y) {
    return bytes_cmp(g, x->off, x->len, y->off, y->len);
}
static int lit_cmp(const void *a, const void *b, void *g) {
    const glit *x = a, *y = b;
    return bytes_cmp(g, x->off, x->len, y->off, y->len);
}

int grammar_object(grammar *g, int n, const char *const *names, const int *nodes, const bool *required,
                   int extra) {
    if (n < 0 || n > GRAMMAR_MAX_PROPS)
        return rl_seterr("an object with %d properties: at most %d are supported", n, GRAMMAR_MAX_PROPS);
    if (grow_arr((void **)&g->props, &g->cap_props, g->n_props + n, sizeof(gprop))) return -1;
    int id = node_new(g, K_OBJECT);
    if (id < 0) return -1;
    gprop *p = g->props + g->n_props;
    bool req[GRAMMAR_MAX_PROPS];
    for (int i = 0; i < n; i++) {
        if (!valid_id(g, nodes[i])) return rl_seterr("grammar_object: bad node id");
        int32_t len = 0, off = pool_add_json(g, names[i], strlen(names[i]), &len);
        if (off < 0) return -1;
        p[i] = (gprop){off, len, nodes[i]};
        req[i] = required && required[i];
    }
    /* sort by key bytes, carrying the required flags along (insertion sort: n <= 64) */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && prop_cmp(g, &p[j - 1], &p[j]) > 0; j--) {
            gprop t = p[j];
            p[j] = p[j - 1], p[j - 1] = t;
            bool r = req[j];
            req[j] = req[j - 1], req[j - 1] = r;
        }
    for (int i = 1; i < n; i++)
        if (!prop_cmp(g, &p[i - 1], &p[i]))
            return rl_seterr("an object declares the property \"%s\" twice", g->pool + p[i].off);
    gnode *o = &g->nodes[id];
    o->off = g->n_props;
    o->n = n;
    o->extra = extra;
    for (int i = 0; i < n; i++)
        if (req[i]) o->req |= 1ull << i;
    g->n_props += n;
    return id;
}

int grammar_array(grammar *g, int item, int min, int max) {
    if (!valid_id(g, item)) return rl_seterr("grammar_array: bad node id");
    if (min < 0 || (max >= 0 && max < min))
        return rl_seterr("an array with minItems %d > maxItems %d admits nothing", min, max);
    int id = node_new(g, K_ARRAY);
    if (id < 0) return -1;
    g->nodes[id].extra = item, g->nodes[id].min = min, g->nodes[id].max = max;
    return id;
}

int grammar_string(grammar *g, int min, int max) {
    if (min < 0 || (max >= 0 && max < min))
        return rl_seterr("a string with minLength %d > maxLength %d admits nothing", min, max);
    int id = node_new(g, K_STRING);
    if (id < 0) return -1;
    g->nodes[id].min = min, g->nodes[id].max = max;
    return id;
}

int grammar_number(grammar *g, bool integer) {
    int id = node_new(g, K_NUMBER);
    if (id >= 0) g->nodes[id].integer = integer;
    return id;
}

int grammar_literals(grammar *g, int n, const char *const *lits, const size_t *lens, const int *conts) {
    if (n <= 0) return rl_seterr("an empty set of literals (enum []) admits nothing");
    if (grow_arr((void **)&g->lits, &g->cap_lits, g->n_lits + n, sizeof(glit))) return -1;
    int id = node_new(g, K_LITS);
    if (id < 0) return -1;
    glit *l = g->lits + g->n_lits;
    for (int i = 0; i < n; i++) {
        if (lens[i] > 0xffff) return rl_seterr("grammar: a literal of %zu bytes is too long", lens[i]);
        int32_t off = pool_add(g, lits[i], lens[i]);
        if (off < 0) return -1;
        l[i] = (glit){off, (int32_t)lens[i], conts ? conts[i] : -1};
    }
    qsort_r(l, (size_t)n, sizeof *l, lit_cmp, g);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (m == 0 || lit_cmp(&l[m - 1], &l[i], g)) l[m++] = l[i];
    g->nodes[id].off = g->n_lits;
    g->nodes[id].n = m;
    g->n_lits += m;
    return id;
}

int grammar_literal(grammar *g, const char *lit) {
    size_t n = strlen(lit);
    return grammar_literals(g, 1, &lit, &n, NULL);
}

static int list_node(grammar *g, int kind, int n, const int *v) {
    for (int i = 0; i < n; i++)
        if (!valid_id(g, v[i])) return rl_seterr("grammar: bad node id");
    if (kind == K_ANYOF && n == 0) return rl_seterr("anyOf [] admits nothing");
    int32_t tmp[256];
    if (n > 256) return rl_seterr("grammar: more than 256 alternatives or items");
    for (int i = 0; i < n; i++) tmp[i] = v[i];
    int off = list_add(g, tmp, n);
    if (off < 0) return -1;
    int id = node_new(g, kind);
    if (id < 0) return -1;
    g->nodes[id].off = off, g->nodes[id].n = n;
    return id;
}
int grammar_anyof(grammar *g, int n, const int *alts) { return list_node(g, K_ANYOF, n, alts); }
int grammar_seq(grammar *g, int n, const int *items) { return list_node(g, K_SEQ, n, items); }

int grammar_until(grammar *g, const char *term) {
    int32_t m = (int32_t)strlen(term);
    if (m == 0 || m > 255) return rl_seterr("grammar_until: the terminator must be 1..255 bytes");
    int32_t off = pool_add(g, term, (size_t)m), fail[256];
    if (off < 0) return -1;
    fail[0] = 0; /* KMP: fail[i] = longest proper border of term[0..i] */
    for (int i = 1, k = 0; i < m; i++) {
        while (k > 0 && term[i] != term[k]) k = fail[k - 1];
        if (term[i] == term[k]) k++;
        fail[i] = k;
    }
    int kmp = list_add(g, fail, m);
    if (kmp < 0) return -1;
    int id = node_new(g, K_UNTIL);
    if (id < 0) return -1;
    g->nodes[id].off = off, g->nodes[id].n = m, g->nodes[id].kmp = kmp;
    return id;
}

int grammar_any_object(grammar *g) {
    if (grammar_any(g) < 0) return -1;
    return g->any_obj;
}

int grammar_any(grammar *g) {
    if (g->any >= 0) return g->any;
    int any = node_new(g, K_ANY);
    if (any < 0) return -1;
    const char *lits[3] = {"true", "false", "null"};
    size_t lens[3] = {4, 5, 4};
    if ((g->any_obj = grammar_object(g, 0, NULL, NULL, NULL, any)) < 0 ||
        (g->any_arr = grammar_array(g, any, 0, -1)) < 0 || (g->any_str = grammar_string(g, 0, -1)) < 0 ||
        (g->any_num = grammar_number(g, false)) < 0 ||
        (g->any_lit = grammar_literals(g, 3, lits, lens, NULL)) < 0)
        return -1;
    return g->any = any;
}

/* ---- finishing ------------------------------------------------------------------------------ */

static int resolve(const grammar *g, int id) {
    for (int hops = 0; g->nodes[id].kind == K_ALIAS && hops < 1000; hops++) id = g->nodes[id].extra;
    return id;
}

static long sat_add(long a, long b) { return a + b >= G_INF ? G_INF : a + b; }
static long sat_mul(long a, long b) { return b && a >= G_INF / b ? G_INF : a * b; }

static long node_minlen(const grammar *g, const gnode *n) {
    const gnode *N = g->nodes;
    long v = 0;
    switch (n->kind) {
    case K_OBJECT: {
        v = 2;
        int nr = 0;
        for (int i = 0; i < n->n; i++)
            if (n->req >> i & 1) {
                const gprop *p = &g->props[n->off + i];
                v = sat_add(v, sat_add(3 + p->len, N[p->node].minlen)), nr++;
            }
        return sat_add(v, nr > 1 ? nr - 1 : 0);
    }
    case K_ARRAY:
        return sat_add(2, sat_add(sat_mul(N[n->extra].minlen, n->min), n->min > 1 ? n->min - 1 : 0));
    case K_STRING: return 2 + n->min;
    case K_NUMBER: return 1;
    case K_ANY: return 1;
    case K_LITS:
        v = G_INF;
        for (int i = 0; i < n->n; i++)
            if (g->lits[n->off + i].len < v) v = g->lits[n->off + i].len;
        return v;
    case K_ANYOF:
        v = G_INF;
        for (int i = 0; i < n->n; i++)
            if (N[g->list[n->off + i]].minlen < v) v = N[g->list[n->off + i]].minlen;
        return v;
    case K_SEQ:
        for (int i = 0; i < n->n; i++) v = sat_add(v, N[g->list[n->off + i]].minlen);
        return v;
    case K_UNTIL: return n->n;
    case K_ALIAS: return N[n->extra].minlen;
    default: return G_INF;
    }
}

static void set_all(uint32_t *f) { memset(f, 0xff, 32); }
static void set_bit(uint32_t *f, unsigned c) { f[c >> 5] |= 1u << (c & 31); }
static bool or_into(uint32_t *d, const uint32_t *s) {
    bool ch = false;
    for (int i = 0; i < 8; i++)
        if ((d[i] | s[i]) != d[i]) d[i] |= s[i], ch = true;
    return ch;
}

/* first-byte sets (supersets: a nullable part lets every byte through) */
static bool node_first(grammar *g, gnode *n) {
    uint32_t f[8] = {0};
    const gnode *N = g->nodes;
    switch (n->kind) {
    case K_OBJECT: set_bit(f, '{'); break;
    case K_ARRAY: set_bit(f, '['); break;
    case K_STRING: set_bit(f, '"'); break;
    case K_NUMBER:
        set_bit(f, '-');
        for (int c = '0'; c <= '9'; c++) set_bit(f, (unsigned)c);
        break;
    case K_LITS:
        for (int i = 0; i < n->n; i++) {
            const glit *l = &g->lits[n->off + i];
            if (l->len == 0) set_all(f);
            else set_bit(f, (unsigned char)g->pool[l->off]);
        }
        break;
    case K_ANYOF:
        for (int i = 0; i < n->n; i++) or_into(f, N[g->list[n->off + i]].first);
        break;
    case K_SEQ:
        if (n->n == 0 || N[g->list[n->off]].minlen == 0) set_all(f);
        else or_into(f, N[g->list[n->off]].first);
        break;
    case K_ALIAS: or_into(f, N[n->extra].first); break;
    default: set_all(f); break; /* ANY (all of its kinds' starts), UNTIL */
    }
    return or_into(n->first, f);
}

int grammar_finish(grammar *g, int root) {
    if (!valid_id(g, root)) return rl_seterr("grammar_finish: bad root");
    for (int i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].kind == K_UNDEF)
            return rl_seterr("grammar: node %d was reserved but never defined", i);
        g->nodes[i].minlen = G_INF;
    }
    for (int i = 0; i < g->n_nodes; i++) /* aliases point at their final node */
        if (g->nodes[i].kind == K_ALIAS) {
            int r = resolve(g, i);
            if (g->nodes[r].kind == K_ALIAS) return rl_seterr("grammar: a reference refers to itself");
            g->nodes[i].extra = r;
        }
    /* least fixed point of the minimum lengths (recursion converges from "infinite") */
    for (bool ch = true; ch;) {
        ch = false;
        for (int i = 0; i < g->n_nodes; i++) {
            long v = node_minlen(g, &g->nodes[i]);
            if (v < g->nodes[i].minlen) g->nodes[i].minlen = v, ch = true;
        }
    }
    for (bool ch = true; ch;) {
        ch = false;
        for (int i = 0; i < g->n_nodes; i++) ch |= node_first(g, &g->nodes[i]);
    }
    long maxmin = 0, maxkey = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const gnode *n = &g->nodes[i];
        if (n->minlen >= G_INF) {
            if (i == root || resolve(g, root) == i) return rl_seterr("the schema admits no finite value");
            continue; /* an unusable alternative: checked where it is required, below */
        }
        if (n->minlen > maxmin) maxmin = n->minlen;
    }
    for (int i = 0; i < g->n_props; i++)
        if (g->props[i].len > maxkey) maxkey = g->props[i].len;
    for (int i = 0; i < g->n_nodes; i++) { /* optional parts with no finite value must not be enterable */
        const gnode *n = &g->nodes[i];
        if (n->kind == K_OBJECT && n->extra >= 0 && g->nodes[n->extra].minlen >= G_INF)
            return rl_seterr("additionalProperties admits no finite value");
        if (n->kind == K_ARRAY && g->nodes[n->extra].minlen >= G_INF && (n->max != 0))
            return rl_seterr("array items admit no finite value (set maxItems 0 or fix the items schema)");
        if (n->kind == K_OBJECT)
            for (int k = 0; k < n->n; k++)
                if (g->nodes[g->props[n->off + k].node].minlen >= G_INF)
                    return rl_seterr("the property \"%s\" admits no finite value",
                                     g->pool + g->props[n->off + k].off);
    }
    g->grow = sat_add(sat_mul(maxmin, 2), maxkey + 8);
    g->root = root;
    g->finished = true;
    return 0;
}

long grammar_min_len(const grammar *g) { return g->finished ? g->nodes[g->root].minlen : -1; }

/* ---- the byte matcher ----------------------------------------------------------------------- */

enum { O_START, O_FIRST, O_KEY, O_COLON, O_VALUE, O_AFTER, O_NEXT };
enum { A_START, A_FIRST, A_AFTER, A_NEXT };
enum { S_START, S_BODY };
enum { N_START, N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };
enum { R_REJECT, R_CONSUMED, R_POP, R_PASS, R_PUSH, R_REPLACE, R_SWAP };

static bool is_ws(uint8_t c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
static bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
static bool is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

/* JSON string lexer (inside the quotes): 0 normal, 1 after '\', 2..5 \u with 4..1 hex digits
 * to go, 6/7/8 1/2/3 UTF-8 continuation bytes to go, 9..12 the restricted second byte after
 * E0 / ED / F0 / F4 (Unicode Table 3-7: no overlongs, no surrogates, <= U+10FFFF).
 * Returns the new state, -1 to reject. Closing quote: the caller's. */
static int lex(int st, uint8_t c) {
    switch (st) {
    case 0:
        if (c < 0x20) return -1;
        if (c == '\\') return 1;
        if (c < 0x80) return 0;
        if (c >= 0xC2 && c <= 0xDF) return 6;
        if (c == 0xE0) return 9;
        if (c == 0xED) return 10;
        if (c >= 0xE1 && c <= 0xEF) return 7;
        if (c == 0xF0) return 11;
        if (c >= 0xF1 && c <= 0xF3) return 8;
        if (c == 0xF4) return 12;
        return -1;
    case 1: return strchr("\"\\/bfnrt", c) && c ? 0 : c == 'u' ? 2 : -1;
    case 2:
    case 3:
    case 4: return is_hex(c) ? st + 1 : -1;
    case 5: return is_hex(c) ? 0 : -1;
    case 6: return c >= 0x80 && c <= 0xBF ? 0 : -1;
    case 7: return c >= 0x80 && c <= 0xBF ? 6 : -1;
    case 8: return c >= 0x80 && c <= 0xBF ? 7 : -1;
    case 9: return c >= 0xA0 && c <= 0xBF ? 6 : -1;
    case 10: return c >= 0x80 && c <= 0x9F ? 6 : -1;
    case 11: return c >= 0x90 && c <= 0xBF ? 7 : -1;
    case 12: return c >= 0x80 && c <= 0x8F ? 7 : -1;
    default: return -1;
    }
}
/* bytes that finish the character being lexed */
static int lex_pending(int st) {
    static const int p[13] = {0, 1, 4, 3, 2, 1, 1, 2, 3, 2, 2, 3, 3};
    return st >= 0 && st < 13 ? p[st] : 0;
}

static void frame_init(const grammar *g, gframe *f, int node) {
    memset(f, 0, sizeof *f);
    f->node = node;
    const gnode *n = &g->nodes[node];
    if (n->kind == K_LITS) f->lo = 0, f->hi = n->n;
}

static const gprop *prop_at(const grammar *g, const gnode *n, int i) { return &g->props[n->off + i]; }

static bool obj_can_add(const grammar *g, const gnode *n, const gframe *f) {
    if (n->extra >= 0) return true;
    uint64_t all = n->n == 64 ? ~0ull : (1ull << n->n) - 1;
    return (f->seen & all) != all;
}

/* narrow the candidate keys [lo, hi) (sharing pos bytes) by byte c at pos; false when none is
 * left that is not yet given (`seen` may be 0 for literal sets) */
static bool narrow(const grammar *g, const char *pool, const int32_t *offs, const int32_t *lens,
                   size_t stride, gframe *f, uint8_t c, uint64_t seen) {
    int lo = -1, hi = -1;
    bool fresh = false;
    for (int i = f->lo; i < f->hi; i++) {
        int32_t off = *(const int32_t *)((const char *)offs + stride * (size_t)i);
        int32_t len = *(const int32_t *)((const char *)lens + stride * (size_t)i);
        if (len > f->pos && (uint8_t)pool[off + f->pos] == c) {
            if (lo < 0) lo = i;
            hi = i + 1;
            if (!(seen >> i & 1)) fresh = true;
        } else if (lo >= 0) {
            break; /* sorted: the matches are contiguous */
        }
    }
    if (lo < 0 || !fresh) return false;
    f->lo = lo, f->hi = hi;
    return true;
}

static int step_object(const grammar *g, const gnode *n, gframe *f, uint8_t c, int *push) {
    const gprop *P = &g->props[n->off];
    switch (f->st) {
    case O_START:
        if (c != '{') return R_REJECT;
        f->st = O_FIRST, f->sub = 0;
        return R_CONSUMED;
    case O_KEY: {
        /* the closing quote: a free key closes at an unescaped quote; a declared-only key when a
         * name not yet given ends here (a quote inside a name is escaped, so narrowing handles it) */
        bool exact = f->lo < f->hi && P[f->lo].len == f->pos;
        bool closing = c == '"' && (n->extra >= 0 ? f->sub == 0 : exact && !(f->seen >> f->lo & 1));
        if (closing) {
            if (exact && (f->seen >> f->lo & 1)) return R_REJECT; /* a duplicate key */
            if (exact) f->cnt = f->lo, f->seen |= 1ull << f->lo;
            else f->cnt = -1;
            f->st = O_COLON, f->sub = 0;
            return R_CONSUMED;
        }
        if (f->pos == 0xffff) return R_REJECT;
        if (n->extra < 0) {
            if (!narrow(g, g->pool, &P[0].off, &P[0].len, sizeof(gprop), f, c, f->seen)) return R_REJECT;
        } else {
            int s = lex(f->sub, c);
            if (s < 0) return R_REJECT;
            f->sub = (uint8_t)s;
            if (f->lo < f->hi && !narrow(g, g->pool, &P[0].off, &P[0].len, sizeof(gprop), f, c, 0))
                f->lo = f->hi = 0;
        }
        f->pos++;
        return R_CONSUMED;
    }
    default: break;
    }
    if (is_ws(c)) {
        if (f->sub >= GRAMMAR_WS_MAX) return R_REJECT;
        f->sub++;
        return R_CONSUMED;
    }
    switch (f->st) {
    case O_FIRST:
    case O_NEXT:
        if (c == '"' && obj_can_add(g, n, f)) {
            f->st = O_KEY, f->sub = 0, f->pos = 0, f->lo = 0, f->hi = n->n;
            return R_CONSUMED;
        }
        if (c == '}' && f->st == O_FIRST && (n->req & ~f->seen) == 0) return R_POP;
        return R_REJECT;
    case O_COLON:
        if (c != ':') return R_REJECT;
        f->st = O_VALUE, f->sub = 0;
        return R_CONSUMED;
    case O_VALUE:
        *push = f->cnt >= 0 ? P[f->cnt].node : n->extra;
        f->st = O_AFTER, f->sub = 0;
        return R_PUSH;
    case O_AFTER:
        if (c == ',' && obj_can_add(g, n, f)) {
            f->st = O_NEXT, f->sub = 0;
            return R_CONSUMED;
        }
        if (c == '}' && (n->req & ~f->seen) == 0) return R_POP;
        return R_REJECT;
    default: return R_REJECT;
    }
}

static int step_array(const gnode *n, gframe *f, uint8_t c, int *push) {
    if (f->st == A_START) {
        if (c != '[') return R_REJECT;
        f->st = A_FIRST, f->sub = 0;
        return R_CONSUMED;
    }
    if (is_ws(c)) {
        if (f->sub >= GRAMMAR_WS_MAX) return R_REJECT;
        f->sub++;
        return R_CONSUMED;
    }
    switch (f->st) {
    case A_FIRST:
        if (c == ']') return n->min == 0 ? R_POP : R_REJECT;
        if (n->max == 0) return R_REJECT;
        f->cnt = 1, f->st = A_AFTER, f->sub = 0, *push = n->extra;
        return R_PUSH;
    case A_AFTER:
        if (c == ',' && (n->max < 0 || f->cnt < n->max)) {
            f->st = A_NEXT, f->sub = 0;
            return R_CONSUMED;
        }
        if (c == ']' && f->cnt >= n->min) return R_POP;
        return R_REJECT;
    case A_NEXT: f->cnt++, f->st = A_AFTER, f->sub = 0, *push = n->extra; return R_PUSH;
    default: return R_REJECT;
    }
}

static int step_string(const gnode *n, gframe *f, uint8_t c) {
    if (f->st == S_START) {
        if (c != '"') return R_REJECT;
        f->st = S_BODY, f->sub = 0, f->cnt = 0;
        return R_CONSUMED;
    }
    if (f->sub == 0 && c == '"') return f->cnt >= n->min ? R_POP : R_REJECT;
    if (f->sub == 0) { /* a new code point */
        if (n->max >= 0 && f->cnt >= n->max) return R_REJECT;
        if (f->cnt < 0x7fffffff) f->cnt++;
    }
    int s = lex(f->sub, c);
    if (s < 0) return R_REJECT;
    f->sub = (uint8_t)s;
    return R_CONSUMED;
}

#define NUM_INT_DIGITS 16
#define NUM_FRAC_DIGITS 16
#define NUM_EXP_DIGITS 3

static int step_number(const gnode *n, gframe *f, uint8_t c) {
    bool fl = !n->integer;
    switch (f->st) {
    case N_START:
        if (c == '-') return f->st = N_MINUS, R_CONSUMED;
        /* fall through */
    case N_MINUS:
        if (c == '0') return f->st = N_ZERO, R_CONSUMED;
        if (c >= '1' && c <= '9') return f->st = N_INT, f->pos = 1, R_CONSUMED;
        return R_REJECT;
    case N_ZERO:
    case N_INT:
        if (f->st == N_INT && is_digit(c)) return f->pos < NUM_INT_DIGITS ? (f->pos++, R_CONSUMED) : R_REJECT;
        if (fl && c == '.') return f->st = N_DOT, R_CONSUMED;
        if (fl && (c == 'e' || c == 'E')) return f->st = N_E, R_CONSUMED;
        return is_digit(c) ? R_REJECT : R_PASS;
    case N_DOT: return is_digit(c) ? (f->st = N_FRAC, f->pos = 1, R_CONSUMED) : R_REJECT;
    case N_FRAC:
        if (is_digit(c)) return f->pos < NUM_FRAC_DIGITS ? (f->pos++, R_CONSUMED) : R_REJECT;
        if (c == 'e' || c == 'E') return f->st = N_E, R_CONSUMED;
        return R_PASS;
    case N_E:
        if (c == '+' || c == '-') return f->st = N_ESIGN, R_CONSUMED;
        /* fall through */
    case N_ESIGN: return is_digit(c) ? (f->st = N_EXP, f->pos = 1, R_CONSUMED) : R_REJECT;
    case N_EXP:
        if (is_digit(c)) return f->pos < NUM_EXP_DIGITS ? (f->pos++, R_CONSUMED) : R_REJECT;
        return R_PASS;
    default: return R_REJECT;
    }
}

static int step_lits(const grammar *g, const gnode *n, gframe *f, uint8_t c, int *push) {
    const glit *L = &g->lits[n->off];
    int32_t lo = f->lo, hi = f->hi;
    bool complete = L[lo].len == f->pos;
    int cont = complete ? L[lo].cont : -1;
    if (f->pos < 0xffff && narrow(g, g->pool, &L[0].off, &L[0].len, sizeof(glit), f, c, 0)) {
        f->pos++;
        if (f->hi - f->lo == 1 && L[f->lo].len == f->pos) { /* finished */
            if (L[f->lo].cont >= 0) return *push = L[f->lo].cont, R_REPLACE;
            return R_POP;
        }
        return R_CONSUMED;
    }
    f->lo = lo, f->hi = hi;
    if (!complete) return R_REJECT;
    if (cont >= 0) return *push = cont, R_SWAP;
    return R_PASS;
}

static int step_until(const grammar *g, const gnode *n, gframe *f, uint8_t c) {
    const char *t = g->pool + n->off;
    const int32_t *fail = g->list + n->kmp;
    int k = f->cnt;
    while (k > 0 && (uint8_t)t[k] != c) k = fail[k - 1];
    if ((uint8_t)t[k] == c) k++;
    f->cnt = k;
    return k == n->n ? R_POP : R_CONSUMED;
}

/* a frame that is complete and can take no more bytes */
static bool frame_finished(const grammar *g, const gframe *f) {
    const gnode *n = &g->nodes[f->node];
    if (n->kind == K_SEQ) return f->cnt == n->n;
    if (n->kind == K_LITS)
        return f->hi - f->lo == 1 && g->lits[n->off + f->lo].len == f->pos &&
               g->lits[n->off + f->lo].cont < 0;
    return false;
}

typedef struct {
    const grammar *g;
    gstate *out;
} stepper;

static void drive(stepper *x, int ti, uint8_t c);

static int clone_thread(gstate *s, int ti) {
    if (s->n >= G_STATE_THREADS) return -1;
    gthread *d = &s->t[s->n], *t = &s->t[ti];
    d->depth = t->depth;
    memcpy(d->f, t->f, sizeof(gframe) * (size_t)t->depth);
    return s->n++;
}

static void push_frame(stepper *x, int ti, int node, uint8_t c, bool feed) {
    const grammar *g = x->g;
    gthread *t = &x->out->t[ti];
    node = resolve(g, node);
    const gnode *n = &g->nodes[node];
    if (feed && !(n->first[c >> 5] >> (c & 31) & 1)) { /* cannot start with c */
        if (n->minlen == 0) { /* nullable: skip it (a nullable sequence part, an empty literal) */
            drive(x, ti, c);
            return;
        }
        t->depth = -1;
        return;
    }
    if (feed && n->kind == K_ANY) {
        node = c == '{'                             ? g->any_obj
               : c == '['                           ? g->any_arr
               : c == '"'                           ? g->any_str
               : (c == '-' || is_digit(c))          ? g->any_num
               : (c == 't' || c == 'f' || c == 'n') ? g->any_lit
                                                    : -1;
        if (node < 0) {
            t->depth = -1;
            return;
        }
        n = &g->nodes[node];
    }
    if (feed && n->kind == K_ANYOF) {
        /* one thread per alternative that may start with c, in order (the first keeps ti) */
        int last = -1;
        for (int i = n->n - 1; i >= 0; i--) {
            const gnode *a = &g->nodes[resolve(g, g->list[n->off + i])];
            if ((a->first[c >> 5] >> (c & 31) & 1) || a->minlen == 0) {
                last = i;
                break;
            }
        }
        if (last < 0) {
            t->depth = -1;
            return;
        }
        for (int i = 0; i <= last; i++) {
            int alt = g->list[n->off + i];
            const gnode *a = &g->nodes[resolve(g, alt)];
            if (!(a->first[c >> 5] >> (c & 31) & 1) && a->minlen != 0) continue;
            int tj = i == last ? ti : clone_thread(x->out, ti);
            if (tj >= 0) push_frame(x, tj, alt, c, true);
        }
        return;
    }
    if (t->depth >= GRAMMAR_MAX_DEPTH) {
        t->depth = -1;
        return;
    }
    frame_init(g, &t->f[t->depth++], node);
    if (feed) drive(x, ti, c);
}

/* pop every finished frame */
static void settle(const grammar *g, gthread *t) {
    while (t->depth > 0 && frame_finished(g, &t->f[t->depth - 1])) t->depth--;
}

/* Feed c to thread ti of x->out (in place; forks append threads; a rejecting thread's depth
 * becomes -1). */
static void drive(stepper *x, int ti, uint8_t c) {
    const grammar *g = x->g;
    for (;;) {
        gthread *t = &x->out->t[ti];
        if (t->depth <= 0) { /* the sentence is over: nothing may follow */
            t->depth = -1;
            return;
        }
        gframe *f = &t->f[t->depth - 1];
        const gnode *n = &g->nodes[f->node];
        int push = -1, r;
        switch (n->kind) {
        case K_ANY:
        case K_ANYOF:
            t->depth--;
            push_frame(x, ti, f->node, c, true);
            return;
        case K_OBJECT: r = step_object(g, n, f, c, &push); break;
        case K_ARRAY: r = step_array(n, f, c, &push); break;
        case K_STRING: r = step_string(n, f, c); break;
        case K_NUMBER: r = step_number(n, f, c); break;
        case K_LITS: r = step_lits(g, n, f, c, &push); break;
        case K_UNTIL: r = step_until(g, n, f, c); break;
        case K_SEQ:
            if (f->cnt == n->n) r = R_PASS;
            else r = R_PUSH, push = g->list[n->off + f->cnt++];
            break;
        default: r = R_REJECT; break;
        }
        switch (r) {
        case R_CONSUMED: settle(g, t); return;
        case R_POP: t->depth--, settle(g, t); return;
        case R_PASS: t->depth--; continue;
        case R_PUSH: push_frame(x, ti, push, c, true); return;
        case R_REPLACE:
            t->depth--;
            push_frame(x, ti, push, c, false);
            settle(g, &x->out->t[ti]);
            return;
        case R_SWAP: t->depth--, push_frame(x, ti, push, c, true); return;
        default: t->depth = -1; return;
        }
    }
}

void gstate_init(const grammar *g, gstate *s) {
    s->n = 1;
    s->t[0].depth = 0;
    stepper x = {g, s};
    push_frame(&x, 0, g->root, 0, false);
}

static void thread_copy(gthread *d, const gthread *s) {
    d->depth = s->depth;
    memcpy(d->f, s->f, sizeof(gframe) * (size_t)s->depth);
}

void gstate_copy(gstate *dst, const gstate *src) {
    dst->n = src->n;
    for (int i = 0; i < src->n; i++) thread_copy(&dst->t[i], &src->t[i]);
}

static bool thread_eq(const gthread *a, const gthread *b) {
    return a->depth == b->depth && !memcmp(a->f, b->f, sizeof(gframe) * (size_t)a->depth);
}

void gstate_step(const grammar *g, const gstate *in, uint8_t c, gstate *out) {
    out->n = 0;
    stepper x = {g, out};
    for (int i = 0; i < in->n; i++) {
        int ti = out->n;
        if (ti >= G_STATE_THREADS) break;
        thread_copy(&out->t[ti], &in->t[i]);
        out->n++;
        drive(&x, ti, c);
    }
    /* drop dead and duplicate threads, keep the first GRAMMAR_MAX_THREADS */
    int m = 0;
    for (int i = 0; i < out->n; i++) {
        if (out->t[i].depth < 0) continue;
        bool dup = false;
        for (int j = 0; j < m && !dup; j++) dup = thread_eq(&out->t[j], &out->t[i]);
        if (dup) continue;
        if (m >= GRAMMAR_MAX_THREADS) break;
        if (m != i) thread_copy(&out->t[m], &out->t[i]);
        m++;
    }
    out->n = m;
}

bool gstate_done(const gstate *s) {
    for (int i = 0; i < s->n; i++)
        if (s->t[i].depth != 0) return false;
    return s->n > 0;
}

/* ---- bytes still needed ----------------------------------------------------------------------- */

/* bytes to add the missing required properties of an object (given seen) and close it; `need_one`:
 * after a comma, at least one member must come */
static long obj_rest(const grammar *g, const gnode *n, uint64_t seen, bool has_member, bool need_one) {
    long sum = 0;
    int miss = 0;
    for (int i = 0; i < n->n; i++)
        if ((n->req >> i & 1) && !(seen >> i & 1)) {
            const gprop *p = prop_at(g, n, i);
            sum = sat_add(sum, sat_add(3 + p->len, g->nodes[p->node].minlen)), miss++;
        }
    if (miss) return sat_add(sum, (has_member ? miss : miss - 1) + 1);
    if (!need_one) return 1;
    long best = G_INF; /* the cheapest member that may still come */
    for (int i = 0; i < n->n; i++)
        if (!(seen >> i & 1)) {
            const gprop *p = prop_at(g, n, i);
            long v = sat_add(3 + p->len, g->nodes[p->node].minlen);
            if (v < best) best = v;
        }
    if (n->extra >= 0 && sat_add(3, g->nodes[n->extra].minlen) < best)
        best = sat_add(3, g->nodes[n->extra].minlen);
    return sat_add(best, 1);
}

static long frame_rest(const grammar *g, const gframe *f) {
    const gnode *n = &g->nodes[f->node];
    switch (n->kind) {
    case K_OBJECT:
        switch (f->st) {
        case O_START: return n->minlen;
        case O_FIRST: return obj_rest(g, n, f->seen, false, false);
        case O_AFTER: return obj_rest(g, n, f->seen, true, false);
        case O_NEXT: return obj_rest(g, n, f->seen, false, true); /* the next member needs no comma */
        case O_COLON:
        case O_VALUE: {
            long v = g->nodes[f->cnt >= 0 ? prop_at(g, n, f->cnt)->node : n->extra].minlen;
            return sat_add(sat_add(v, f->st == O_COLON), obj_rest(g, n, f->seen, true, false));
        }
        case O_KEY: {
            long best = G_INF;
            for (int i = f->lo; i < f->hi; i++) {
                if (f->seen >> i & 1) continue;
                const gprop *p = prop_at(g, n, i);
                long v = sat_add(p->len - f->pos + 2, g->nodes[p->node].minlen);
                v = sat_add(v, obj_rest(g, n, f->seen | 1ull << i, true, false));
                if (v < best) best = v;
            }
            if (n->extra >= 0) {
                bool dup = f->sub == 0 && f->lo < f->hi && prop_at(g, n, f->lo)->len == f->pos &&
                           (f->seen >> f->lo & 1);
                long v = sat_add(lex_pending(f->sub) + 2 + dup, g->nodes[n->extra].minlen);
                v = sat_add(v, obj_rest(g, n, f->seen, true, false));
                if (v < best) best = v;
            }
            return best;
        }
        default: return G_INF;
        }
    case K_ARRAY: {
        long ml = g->nodes[n->extra].minlen;
        long need = n->min - f->cnt;
        switch (f->st) {
        case A_START: return n->minlen;
        case A_FIRST: return n->min > 0 ? sat_add(sat_add(sat_mul(ml, n->min), n->min - 1), 1) : 1;
        case A_AFTER: return need > 0 ? sat_add(sat_mul(ml + 1, need), 1) : 1;
        case A_NEXT:
            if (need < 1) need = 1;
            return sat_add(sat_add(sat_mul(ml, need), need - 1), 1);
        default: return G_INF;
        }
    }
    case K_STRING:
        if (f->st == S_START) return n->minlen;
        return lex_pending(f->sub) + (f->cnt < n->min ? n->min - f->cnt : 0) + 1;
    case K_NUMBER: return (f->st == N_ZERO || f->st == N_INT || f->st == N_FRAC || f->st == N_EXP) ? 0 : 1;
    case K_LITS: {
        long best = G_INF;
        for (int i = f->lo; i < f->hi; i++) {
            long v = g->lits[n->off + i].len - f->pos;
            if (g->lits[n->off + i].cont >= 0) v = sat_add(v, g->nodes[g->lits[n->off + i].cont].minlen);
            if (v < best) best = v;
        }
        return best;
    }
    case K_SEQ: {
        long v = 0;
        for (int i = f->cnt; i < n->n; i++) v = sat_add(v, g->nodes[g->list[n->off + i]].minlen);
        return v;
    }
    case K_UNTIL: return n->n - f->cnt;
    default: return n->minlen; /* ANY / ANYOF not yet started */
    }
}

long gstate_min_remaining(const grammar *g, const gstate *s) {
    long best = G_INF;
    for (int i = 0; i < s->n; i++) {
        long v = 0;
        for (int d = 0; d < s->t[i].depth && v < best; d++) v = sat_add(v, frame_rest(g, &s->t[i].f[d]));
        if (v < best) best = v;
    }
    return s->n ? best : -1;
}
