/* tokenizer.h — byte-level BPE (GGUF `tokenizer.ggml.model` = "gpt2", `pre` = "qwen2" or "qwen35").
 *
 * Built from the GGUF metadata: tokenizer.ggml.{tokens,token_type,merges,eos_token_id,
 * bos_token_id,padding_token_id,eot_token_id,eom_token_id}. The tokenizer copies what it
 * needs, so the gguf_file may be closed after tokenizer_load. A loaded tokenizer is
 * immutable: every function below taking a `const tokenizer *` is thread-safe.
 *
 * Encoding pipeline (matches HF `tokenizers` with Qwen's tokenizer.json bit for bit; see
 * docs/TOKENIZER.md for the decisions):
 *   1. added-token pass (TOK_PARSE_SPECIAL): the raw text is split on the longest occurrence
 *      of any CONTROL (3) or USER_DEFINED (4) token text; each occurrence becomes its id;
 *   2. every remaining span is NFC-normalised (utf8proc; invalid UTF-8 bytes pass through);
 *   3. the span is cut into pre-tokens by a hand-written matcher for the qwen2 split regex
 *      (qwen35: the same with combining marks joined to letters);
 *   4. each pre-token's bytes are BPE-merged by merge rank into token ids.
 * Invalid UTF-8 input is accepted: each byte that is not part of a well-formed sequence is
 * one "other" (punctuation-class) character, and is byte-level encoded like any byte, so
 * decode(encode(s)) == s for any NFC-stable byte string s.
 */
#ifndef RL_TOKENIZER_H
#define RL_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"

/* tokenizer.ggml.token_type values (llama.cpp's enum). */
enum {
    TOK_TYPE_UNDEFINED = 0,
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER_DEFINED = 4,
    TOK_TYPE_UNUSED = 5,
    TOK_TYPE_BYTE = 6,
};

typedef struct tokenizer tokenizer;

/* Build the tokenizer from a GGUF's metadata. NULL on failure (rl_lasterr says why:
 * missing keys, unsupported model/pre-tokenizer, vocab without the 256 byte tokens, ...). */
tokenizer *tokenizer_load(const gguf_file *f);
/* Convenience: open `path`, load, close. */
tokenizer *tokenizer_load_file(const char *path);
void tokenizer_free(tokenizer *t);

/* ---- encoding ------------------------------------------------------------------------ */

/* Growable id vector. Zero-initialise it ({0}); encode appends; free with tok_ids_free. */
typedef struct {
    int32_t *ids;
    size_t n, cap;
} tok_ids;
void tok_ids_free(tok_ids *v);
/* Append one id; 0 ok, -1 out of memory. */
int tok_ids_push(tok_ids *v, int32_t id);

/* Encode flags. */
#define TOK_PARSE_SPECIAL                                                                                    \
    1u /* match added tokens (control + user-defined) in the text; off:                                      \
          their text is encoded as plain text like everything else */

/* Append the ids of text[0..len) to `out`. No BOS/EOS is added (Qwen: add_bos_token=false).
 * `text` may contain NUL bytes and invalid UTF-8. Returns 0, or -1 on out of memory (out
 * keeps whatever had been appended). */
int tokenizer_encode(const tokenizer *t, const char *text, size_t len, unsigned flags, tok_ids *out);
/* Like TOK_PARSE_SPECIAL, except that no added token is matched where it would overlap one of
 * the byte ranges [plain[2i], plain[2i+1]) (sorted, disjoint): text there stays text, as
 * llama.cpp's parse_special=false, so a chat message containing "<|im_start|>" cannot open a
 * turn. Text between added tokens is still encoded as one span across the range edges, so
 * without such strings the ids equal TOK_PARSE_SPECIAL's. 0, or -1 (oom, bad ranges). */
int tokenizer_encode_plain(const tokenizer *t, const char *text, size_t len, const size_t *plain,
                           size_t n_plain, tok_ids *out);

/* ---- vocabulary ---------------------------------------------------------------------- */

int32_t tokenizer_n_vocab(const tokenizer *t);
/* Token text exactly as stored in the GGUF (byte-level alphabet for normal tokens, e.g.
 * "Ġworld"; raw text for added tokens, e.g. "<|im_end|>"). NOT NUL terminated: *len is set.
 * NULL for an out-of-range id. */
const char *tokenizer_token_text(const tokenizer *t, int32_t id, size_t *len);
/* The bytes the token stands for (normal tokens: byte-level decoded, may be a partial UTF-8
 * sequence; added tokens and [PAD] ids: their text). NULL for an out-of-range id. */
const char *tokenizer_token_piece(const tokenizer *t, int32_t id, size_t *len);
/* TOK_TYPE_* of the id (TOK_TYPE_UNDEFINED for an out-of-range id). */
int tokenizer_token_type(const tokenizer *t, int32_t id);
/* Id of the token whose stored text is exactly text[0..len), or -1. */
int32_t tokenizer_find(const tokenizer *t, const char *text, size_t len);

/* Special ids from metadata, -1 when absent. */
int32_t tokenizer_eos(const tokenizer *t);
int32_t tokenizer_bos(const tokenizer *t);
int32_t tokenizer_pad(const tokenizer *t);
bool tokenizer_add_bos(const tokenizer *t);
/* End-of-generation: eos/eot/eom ids from metadata plus the added tokens <|im_end|>,
 * <|endoftext|>, <|fim_pad|>, <|repo_name|>, <|file_sep|> (and a few other families'
 * end-of-turn tokens) when present in the vocab. */
bool tokenizer_is_eog(const tokenizer *t, int32_t id);
/* All end-of-generation ids (sorted ascending); returns the count. */
size_t tokenizer_eog_ids(const tokenizer *t, const int32_t **ids);
/* True for CONTROL / USER_DEFINED ids (the ones TOK_PARSE_SPECIAL matches in text). */
bool tokenizer_is_added(const tokenizer *t, int32_t id);

/* ---- decoding ------------------------------------------------------------------------ */

/* Decode flags. */
#define TOK_DECODE_SPECIAL                                                                                   \
    1u /* emit the text of CONTROL and UNUSED tokens (default: nothing);                                     \
          USER_DEFINED tokens such as <think> are always emitted */
#define TOK_DECODE_REPLACE                                                                                   \
    2u /* replace ill-formed UTF-8 with U+FFFD, one per maximal                                              \
          subpart (HF's errors="replace"); default: raw bytes */

/* Decode ids into a malloc'd NUL-terminated buffer (*out, *out_len excludes the NUL).
 * Out-of-range ids are skipped. Returns 0, or -1 on out of memory. */
int tokenizer_decode(const tokenizer *t, const int32_t *ids, size_t n, unsigned flags, char **out,
                     size_t *out_len);

/* Streaming decoder: feed ids one at a time, get back the bytes that are ready. A UTF-8
 * sequence split across tokens is held back until complete, so every chunk returned ends on
 * a character boundary (unless the stream itself holds ill-formed bytes, which are emitted
 * raw or, with TOK_DECODE_REPLACE, as U+FFFD as soon as they are known to be ill-formed). */
typedef struct {
    const tokenizer *tok;
    unsigned flags;
    uint8_t pend[4]; /* bytes of an incomplete UTF-8 sequence */
    int npend;
    char *buf; /* output of the last call */
    size_t len, cap;
    char *work; /* held bytes + the new piece */
    size_t work_cap;
} tokdec;

void tokdec_init(tokdec *d, const tokenizer *t, unsigned flags);
/* Bytes ready after `id` (*len may be 0). The pointer stays valid until the next call.
 * Returns NULL only on out of memory. */
const char *tokdec_push(tokdec *d, int32_t id, size_t *len);
/* End of stream: whatever is still held (an incomplete sequence, emitted raw or as U+FFFD). */
const char *tokdec_flush(tokdec *d, size_t *len);
/* Drop held bytes (e.g. after a rollback) without emitting them. */
void tokdec_reset(tokdec *d);
void tokdec_free(tokdec *d);

/* ---- helpers (exposed for tests and tools) ------------------------------------------- */

/* Length of the well-formed UTF-8 sequence at s[0..n), or 0 if s starts with an ill-formed
 * or truncated sequence. Well-formed = Unicode Table 3-7 (no overlongs, no surrogates,
 * <= U+10FFFF). */
size_t tok_utf8_len(const uint8_t *s, size_t n);

#endif
