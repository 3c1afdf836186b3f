/* grammar_int.h — the grammar's internals shared by grammar.c (nodes, byte matcher) and
 * grammar_tok.c (tokens, masks). Not for other modules. */
#ifndef RL_GRAMMAR_INT_H
#define RL_GRAMMAR_INT_H

#include "text/grammar.h"

#define G_INF 0x3fffffffL  /* "no finite sentence" (lengths saturate here) */
#define G_STATE_THREADS 16 /* slots while a byte is stepped (forks), trimmed to GRAMMAR_MAX_THREADS */

enum { K_UNDEF, K_OBJECT, K_ARRAY, K_STRING, K_NUMBER, K_LITS, K_ANYOF, K_SEQ, K_UNTIL, K_ANY, K_ALIAS };

typedef struct {
    uint8_t kind;
    bool integer;      /* K_NUMBER */
    int32_t off, n;    /* OBJECT: props; LITS: lits; ANYOF/SEQ: list; UNTIL: pool bytes + kmp in list */
    int32_t extra;     /* OBJECT: node of undeclared keys' values (-1: none); ARRAY: item; ALIAS: target */
    int32_t min, max;  /* ARRAY: items; STRING: code points (max < 0: unbounded) */
    int32_t kmp;       /* UNTIL: failure table offset in list */
    uint64_t req;      /* OBJECT: required properties (bit = index in the sorted props) */
    long minlen;       /* bytes of the shortest value (grammar_finish) */
    uint32_t first[8]; /* bytes a value may start with (a superset; grammar_finish) */
} gnode;

typedef struct {
    int32_t off, len, node; /* the key's JSON-escaped bytes (no quotes) in the pool */
} gprop;

typedef struct {
    int32_t off, len, cont; /* literal bytes in the pool; node that follows (-1) */
} glit;

struct grammar {
    gnode *nodes;
    int n_nodes, cap_nodes;
    gprop *props;
    int n_props, cap_props;
    glit *lits;
    int n_lits, cap_lits;
    int32_t *list;
    int n_list, cap_list;
    char *pool;
    size_t n_pool, cap_pool;
    int root, any, any_obj, any_arr, any_str, any_num, any_lit;
    bool finished;
    long grow; /* most a byte can add to the bytes still needed (budget shortcut) */
};

/* One frame of a thread's stack: a node and where the match is inside it. */
typedef struct {
    int32_t node;
    uint8_t st;     /* kind-specific state */
    uint8_t sub;    /* string lexer state, or whitespace bytes in the current gap */
    uint16_t pos;   /* bytes matched of a key / literal; digits of a number part */
    int32_t lo, hi; /* candidate keys / literals (sorted, sharing the first pos bytes) */
    int32_t cnt;    /* array items, string code points, chosen property, sequence index, terminator bytes */
    int32_t zero;   /* padding kept 0 (threads are compared with memcmp) */
    uint64_t seen;  /* object: declared properties given */
} gframe;

typedef struct {
    int depth; /* -1: dead slot */
    gframe f[GRAMMAR_MAX_DEPTH];
} gthread;

typedef struct {
    int n;
    gthread t[G_STATE_THREADS];
} gstate;

/* grammar.c: the byte matcher */
void gstate_init(const grammar *g, gstate *s);
void gstate_copy(gstate *dst, const gstate *src);
/* out = in after byte c (out->n == 0: rejected). in != out. */
void gstate_step(const grammar *g, const gstate *in, uint8_t c, gstate *out);
long gstate_min_remaining(const grammar *g, const gstate *s);
bool gstate_done(const gstate *s);

struct gvocab {
    int32_t n_vocab;
    uint32_t *off; /* token bytes in pool */
    uint16_t *len;
    uint8_t *kind; /* TK_BYTES, TK_EOG, TK_NEVER */
    char *pool;
    int max_len;
    /* trie of the byte tokens in depth-first order: node i is byte tbyte[i] at depth tdepth[i]
     * (0 = first byte), its subtree ends before tend[i], ttok[i] the token ending there or -1 */
    uint32_t n_nodes;
    uint8_t *tbyte;
    uint16_t *tdepth;
    int32_t *ttok;
    uint32_t *tend;
};
enum { TK_BYTES = 0, TK_EOG = 1, TK_NEVER = 2 };

#endif
