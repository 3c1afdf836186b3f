/* grammar.h — constrained decoding: a compiled JSON-shaped grammar, an incremental byte matcher
 * over it, and the token mask the sampler applies (sampler.h: sampler_mask).
 *
 * The grammar is a graph of value nodes, not a general CFG: objects (declared properties in any
 * order, each at most once, required ones before the closing brace, optional extra keys), arrays
 * (items, min/max count), strings (min/max length in code points), numbers / integers, literal
 * sets (enum, const, true/false/null, fixed markup), anyOf, sequences and "free text up to a
 * terminator" (a <think> block). jsonschema.h compiles JSON Schema to it; a caller may build
 * nodes by hand (the tool-call markup). Recursion (a $ref back to an ancestor) is allowed: the
 * graph is walked with a stack.
 *
 * Matching: the state is a small set of threads (one per live anyOf alternative), each a stack
 * of frames. Feeding a byte advances every thread and drops the ones that reject it; the state
 * is empty = the byte sequence is not a prefix of any sentence. JSON whitespace is accepted
 * between tokens (at most GRAMMAR_WS_MAX bytes per gap), never before the root or after it.
 * Numbers are bounded (16 integer digits, 16 fraction digits, 3 exponent digits) and nesting to
 * GRAMMAR_MAX_DEPTH, so every accepted prefix can be completed and a runaway model cannot grow
 * the state.
 *
 * Tokens: a gvocab holds every token's bytes (the tokenizer's pieces; control tokens have
 * none and are never allowed, end-of-generation tokens are allowed exactly when the text so far
 * is a complete sentence) and a trie of them in depth-first order, so the full mask of a state
 * costs one byte step per trie node whose prefix is still alive, not one per token.
 *
 * Budget: gmatch_set_budget(L) says at most L more tokens will be sampled. A token is then
 * allowed only if the bytes still needed to complete the sentence afterwards (the exact minimum
 * over the grammar, gmatch_min_remaining) fit in the L - 1 tokens left (every byte has a
 * single-byte token in a byte-level BPE vocabulary), or, when they never fit, only if it brings
 * the end closer. So a sentence that can be finished within max_tokens is finished: the model
 * is steered to close strings, arrays and objects as the limit comes near.
 *
 * Threads: a grammar and a gvocab are immutable once built and may be shared; a gmatch belongs
 * to one generation (one thread). */
#ifndef RL_GRAMMAR_H
#define RL_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "text/sampler.h"
#include "text/tokenizer.h"

#define GRAMMAR_WS_MAX 24     /* whitespace bytes per gap between JSON tokens */
#define GRAMMAR_MAX_DEPTH 24  /* frames per thread (nesting depth of values, plus markup) */
#define GRAMMAR_MAX_THREADS 8 /* live anyOf alternatives (extra ones are dropped, in order) */
#define GRAMMAR_MAX_PROPS 64  /* declared properties per object */

typedef struct grammar grammar;

/* ---- building ---------------------------------------------------------------------------
 * Every constructor returns the new node's id (>= 0) or -1 (rl_lasterr: out of memory, or a
 * bad argument). Node ids given as arguments may be reserved ones not yet defined. */
grammar *grammar_new(void);
void grammar_free(grammar *g);
/* A placeholder to define later with grammar_define (for recursive references). */
int grammar_reserve(grammar *g);
/* Make `dst` (a reserved id) the same node as `src`. 0 or -1. */
int grammar_define(grammar *g, int dst, int src);
/* Any JSON value / any JSON object (the nodes are made once per grammar). */
int grammar_any(grammar *g);
int grammar_any_object(grammar *g);
/* Object: n properties (names as their raw UTF-8 text; JSON escaping is done here), value nodes,
 * required flags; `extra`: the node of values of undeclared keys, or -1 (none allowed). */
int grammar_object(grammar *g, int n, const char *const *names, const int *nodes, const bool *required,
                   int extra);
/* Array of `item`, min..max items (max < 0: unbounded). */
int grammar_array(grammar *g, int item, int min, int max);
/* String of min..max code points (max < 0: unbounded). */
int grammar_string(grammar *g, int min, int max);
int grammar_number(grammar *g, bool integer);
/* One of n byte strings (exact bytes, e.g. "\"red\"", "true", "12"); conts[i]: a node that must
 * follow string i, or -1 (conts may be NULL). Duplicates are merged. */
int grammar_literals(grammar *g, int n, const char *const *lits, const size_t *lens, const int *conts);
int grammar_literal(grammar *g, const char *lit); /* one NUL-terminated string */
int grammar_anyof(grammar *g, int n, const int *alts);
int grammar_seq(grammar *g, int n, const int *items);
/* Any bytes up to and including the first occurrence of `term` (e.g. "</think>"). */
int grammar_until(grammar *g, const char *term);
/* Freeze with `root` as the start symbol: checks that every node is defined and admits at least
 * one finite sentence, computes minimum lengths. 0 or -1 (rl_lasterr names the problem). */
int grammar_finish(grammar *g, int root);
/* Bytes of the shortest sentence of the grammar (after grammar_finish). */
long grammar_min_len(const grammar *g);

/* ---- tokens ------------------------------------------------------------------------------ */
typedef struct gvocab gvocab;
gvocab *gvocab_new(const tokenizer *t);
void gvocab_free(gvocab *v);
int32_t gvocab_n_vocab(const gvocab *v);

/* ---- matching ---------------------------------------------------------------------------- */
typedef struct gmatch gmatch;
/* g must be finished; v may be NULL (byte feeding only). */
gmatch *gmatch_new(const grammar *g, const gvocab *v);
void gmatch_free(gmatch *m);
/* Back to the start symbol (budget: unlimited). */
void gmatch_reset(gmatch *m);
/* Feed bytes; 0, or -1 when they are not a prefix of a sentence (the state is then unchanged). */
int gmatch_feed(gmatch *m, const char *s, size_t n);
/* Is the text so far a complete sentence (end of generation allowed)? */
bool gmatch_complete(const gmatch *m);
/* Complete and nothing may follow: generation is over. */
bool gmatch_done(const gmatch *m);
/* Fewest bytes that complete the text so far (0 when complete; -1 if the state is dead). */
long gmatch_min_remaining(const gmatch *m);
/* At most `left` more tokens will be sampled (< 0: no limit). */
void gmatch_set_budget(gmatch *m, long long left);
/* May this token come next (bytes, end of generation, budget)? */
bool gmatch_allows(gmatch *m, int32_t token);
/* Advance over a token (end-of-generation tokens: only when complete). 0 or -1 (not allowed:
 * the state is unchanged). Budget: decremented by one. */
int gmatch_accept(gmatch *m, int32_t token);
/* Full mask: bits[id / 32] bit id % 32 set for every allowed token; returns their count. bits
 * holds (n_vocab + 31) / 32 words. */
size_t gmatch_fill(gmatch *m, uint32_t *bits);
/* How many of toks[0..n) are allowed in sequence from the current state (the state and budget
 * are not changed). */
int gmatch_prefix(gmatch *m, const int32_t *toks, int n);
/* The sampler hook (allow / fill / prefix over this matcher). */
sampler_mask gmatch_sampler_mask(gmatch *m);

/* Statistics (bench, tests): tokens tested one by one, full masks made, trie nodes stepped. */
typedef struct {
    uint64_t tests, fills, fill_nodes;
} gmatch_stats;
void gmatch_get_stats(const gmatch *m, gmatch_stats *st);

#endif
