/* json.h — a small streaming JSON writer to a FILE* (commands' --json output, the server's
 * responses via open_memstream).
 *
 * The writer tracks nesting and inserts commas itself, so callers just emit in order:
 *
 *   json_writer j;
 *   json_init(&j, stdout, 2);            // indent 2 (0 = compact, one line)
 *   json_obj_begin(&j);
 *   json_kv_str(&j, "arch", "qwen3next");
 *   json_key(&j, "layers"); json_arr_begin(&j); json_int(&j, 3); json_arr_end(&j);
 *   json_obj_end(&j);
 *   if (json_finish(&j) != 0) ...        // unbalanced, misuse, or a write error
 *
 * Strings are escaped per RFC 8259 ("\\", '"', control characters); bytes that are not valid
 * UTF-8 are replaced by U+FFFD so the output is always valid JSON/UTF-8. Non-finite numbers are
 * written as null. Misuse (a value where a key is required, too deep nesting) is recorded and
 * reported by json_finish rather than asserted, so a bug never aborts a server thread.
 */
#ifndef RL_JSON_H
#define RL_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define JSON_MAX_DEPTH 64

typedef struct {
    FILE *out;
    int indent;                    /* spaces per level; 0 = compact */
    int depth;                     /* current nesting depth */
    bool in_obj[JSON_MAX_DEPTH];   /* per level: object (true) or array (false) */
    bool has_item[JSON_MAX_DEPTH]; /* per level: something already written (comma needed) */
    bool want_value;               /* a key was written, its value comes next */
    bool done;                     /* the top-level value is complete */
    bool misuse;                   /* API misuse seen (reported by json_finish) */
} json_writer;

void json_init(json_writer *j, FILE *out, int indent);

void json_obj_begin(json_writer *j);
void json_obj_end(json_writer *j);
void json_arr_begin(json_writer *j);
void json_arr_end(json_writer *j);
/* Object member name; must be followed by exactly one value (or begin of obj/arr). */
void json_key(json_writer *j, const char *key);

void json_str(json_writer *j, const char *s);            /* NULL writes null */
void json_strn(json_writer *j, const char *s, size_t n); /* n bytes, may contain NUL */
void json_int(json_writer *j, int64_t v);
void json_uint(json_writer *j, uint64_t v);
void json_num(json_writer *j, double v); /* shortest round-trip form (%.17g) */
void json_bool(json_writer *j, bool v);
void json_null(json_writer *j);

/* key + value shorthands */
void json_kv_str(json_writer *j, const char *key, const char *s);
void json_kv_int(json_writer *j, const char *key, int64_t v);
void json_kv_uint(json_writer *j, const char *key, uint64_t v);
void json_kv_num(json_writer *j, const char *key, double v);
void json_kv_bool(json_writer *j, const char *key, bool v);

/* Write the escaped, quoted form of s[0..n) (no comma logic): for callers that build JSON by
 * hand, e.g. the server's SSE lines. */
void json_write_escaped(FILE *out, const char *s, size_t n);

/* After the top-level value: writes a newline (pretty mode) and flushes. Returns 0 if the
 * document is complete and well formed and the FILE has no error, else -1. */
int json_finish(json_writer *j);

#endif
