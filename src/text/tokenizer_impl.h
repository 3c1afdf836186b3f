/* tokenizer_impl.h — internals shared by tokenizer.c and tokenizer_unicode.c (not a public
 * API): UTF-8 helpers, the character classes of the qwen2 split regex, and NFC as the HF
 * oracle computes it. See docs/TOKENIZER.md for why each table exists. */
#ifndef RL_TOKENIZER_IMPL_H
#define RL_TOKENIZER_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- UTF-8 ------------------------------------------------------------------------------ */

/* Scan the sequence at s[0..n) (n >= 1). Returns the length of its maximal subpart: the
 * longest prefix that can start a well-formed sequence. *need is the full length the lead
 * byte announces (0 for a byte that cannot lead). Well-formed iff return == *need. */
static inline size_t tok_utf8_scan(const uint8_t *s, size_t n, size_t *need) {
    uint8_t b = s[0], lo = 0x80, hi = 0xBF;
    size_t len;
    if (b < 0x80) {
        *need = 1;
        return 1;
    }
    if (b >= 0xC2 && b <= 0xDF) {
        len = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
        len = 3;
        if (b == 0xE0) lo = 0xA0;
        if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        len = 4;
        if (b == 0xF0) lo = 0x90;
        if (b == 0xF4) hi = 0x8F;
    } else {
        *need = 0;
        return 1;
    }
    *need = len;
    if (n < 2) return 1;
    if (s[1] < lo || s[1] > hi) return 1;
    size_t k = 2;
    while (k < len && k < n && (s[k] & 0xC0) == 0x80) k++;
    return k;
}

/* Code point of a well-formed sequence of `len` bytes. */
static inline uint32_t tok_utf8_decode(const uint8_t *s, size_t len) {
    switch (len) {
    case 1: return s[0];
    case 2: return ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
    case 3: return ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    default:
        return ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
               ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    }
}

/* Encode cp (<= U+10FFFF) into o[0..4); returns the length. */
size_t tok_utf8_encode(uint32_t cp, uint8_t *o);

/* ---- character classes of the split regex -------------------------------------------- */

/* letter, number, \s but CR/LF, CR/LF, other, combining mark (\p{M}: Mn, Mc, Me). The qwen2
 * regex has no \p{M}, so its matcher sees a mark as "other" (tokenizer.c maps M to P there);
 * the qwen35 regex joins marks to the letter runs. */
enum { TOK_C_L, TOK_C_N, TOK_C_WS, TOK_C_NL, TOK_C_P, TOK_C_M };

uint8_t tok_class_nonascii(uint32_t cp);

static inline uint8_t tok_class(uint32_t cp) {
    if (cp >= 0x80) return tok_class_nonascii(cp);
    if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return TOK_C_L;
    if (cp >= '0' && cp <= '9') return TOK_C_N;
    if (cp == '\n' || cp == '\r') return TOK_C_NL;
    if ((cp >= 0x09 && cp <= 0x0D) || cp == 0x20) return TOK_C_WS;
    return TOK_C_P;
}

/* ---- NFC --------------------------------------------------------------------------------- */

typedef struct {
    uint8_t *p;
    size_t len, cap;
} tok_buf;

/* out = NFC(s[0..n)) as the oracle computes it (Unicode 9.0 normalisation data; ill-formed
 * bytes copied through). out->len is reset first. 0, or -1 on out of memory. */
int tok_nfc(const uint8_t *s, size_t n, tok_buf *out);

#endif
