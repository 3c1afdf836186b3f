/* json.c — streaming JSON writer (contract in json.h). Test: tests/c/test_json.c. */
#include "base/json.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void json_init(json_writer *j, FILE *out, int indent) {
    memset(j, 0, sizeof *j);
    j->out = out;
    j->indent = indent < 0 ? 0 : indent;
}

static void newline_indent(json_writer *j) {
    if (!j->indent) return;
    fputc('\n', j->out);
    for (int i = 0; i < j->depth * j->indent; i++) fputc(' ', j->out);
}

/* Called before every value or key: validates the position and writes the separator. */
static bool pre_value(json_writer *j) {
    if (j->done) {
        j->misuse = true;
        return false;
    }
    if (j->depth == 0) return true;
    if (j->in_obj[j->depth - 1]) { /* inside an object only after a key */
        if (!j->want_value) {
            j->misuse = true;
            return false;
        }
        j->want_value = false;
        return true;
    }
    if (j->has_item[j->depth - 1]) fputc(',', j->out);
    j->has_item[j->depth - 1] = true;
    newline_indent(j);
    return true;
}

static void post_value(json_writer *j) {
    if (j->depth == 0) j->done = true;
}

void json_key(json_writer *j, const char *key) {
    if (j->depth == 0 || !j->in_obj[j->depth - 1] || j->want_value || j->done) {
        j->misuse = true;
        return;
    }
    if (j->has_item[j->depth - 1]) fputc(',', j->out);
    j->has_item[j->depth - 1] = true;
    newline_indent(j);
    json_write_escaped(j->out, key, strlen(key));
    fputs(j->indent ? ": " : ":", j->out);
    j->want_value = true;
}

static void begin(json_writer *j, bool obj) {
    if (!pre_value(j)) return;
    if (j->depth >= JSON_MAX_DEPTH) {
        j->misuse = true;
        return;
    }
    fputc(obj ? '{' : '[', j->out);
    j->in_obj[j->depth] = obj;
    j->has_item[j->depth] = false;
    j->depth++;
}

static void end(json_writer *j, bool obj) {
    if (j->depth == 0 || j->in_obj[j->depth - 1] != obj || j->want_value) {
        j->misuse = true;
        return;
    }
    bool had = j->has_item[j->depth - 1];
    j->depth--;
    if (had) newline_indent(j);
    fputc(obj ? '}' : ']', j->out);
    post_value(j);
}

void json_obj_begin(json_writer *j) { begin(j, true); }
void json_obj_end(json_writer *j) { end(j, true); }
void json_arr_begin(json_writer *j) { begin(j, false); }
void json_arr_end(json_writer *j) { end(j, false); }

/* Length of the valid UTF-8 sequence at s (n bytes available), 0 if invalid. Rejects
 * overlongs, surrogates and code points above U+10FFFF. */
static size_t utf8_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t len;
    unsigned cp;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) len = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef) len = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4) len = 4, cp = c & 0x07;
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return len;
}

void json_write_escaped(FILE *out, const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    fputc('"', out);
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        if (c == '"' || c == '\\') {
            fputc('\\', out), fputc((int)c, out), i++;
        } else if (c < 0x20) {
            switch (c) {
            case '\n': fputs("\\n", out); break;
            case '\r': fputs("\\r", out); break;
            case '\t': fputs("\\t", out); break;
            case '\b': fputs("\\b", out); break;
            case '\f': fputs("\\f", out); break;
            default: fprintf(out, "\\u%04x", c);
            }
            i++;
        } else if (c < 0x80) {
            fputc((int)c, out), i++;
        } else {
            size_t len = utf8_len(s + i, n - i);
            if (len) {
                fwrite(s + i, 1, len, out);
                i += len;
            } else {
                fputs("\\ufffd", out); /* one replacement per invalid byte */
                i++;
            }
        }
    }
    fputc('"', out);
}

void json_strn(json_writer *j, const char *s, size_t n) {
    if (!pre_value(j)) return;
    json_write_escaped(j->out, s, n);
    post_value(j);
}

void json_str(json_writer *j, const char *s) {
    if (!s) {
        json_null(j);
        return;
    }
    json_strn(j, s, strlen(s));
}

void json_int(json_writer *j, int64_t v) {
    if (!pre_value(j)) return;
    fprintf(j->out, "%" PRId64, v);
    post_value(j);
}

void json_uint(json_writer *j, uint64_t v) {
    if (!pre_value(j)) return;
    fprintf(j->out, "%" PRIu64, v);
    post_value(j);
}

void json_num(json_writer *j, double v) {
    if (!pre_value(j)) return;
    if (!isfinite(v)) {
        fputs("null", j->out);
    } else {
        /* the shortest of %.15g..%.17g that reads back exactly */
        char buf[40];
        for (int prec = 15; prec <= 17; prec++) {
            snprintf(buf, sizeof buf, "%.*g", prec, v);
            if (strtod(buf, NULL) == v) break;
        }
        fputs(buf, j->out);
    }
    post_value(j);
}

void json_bool(json_writer *j, bool v) {
    if (!pre_value(j)) return;
    fputs(v ? "true" : "false", j->out);
    post_value(j);
}

void json_null(json_writer *j) {
    if (!pre_value(j)) return;
    fputs("null", j->out);
    post_value(j);
}

void json_kv_str(json_writer *j, const char *key, const char *s) { json_key(j, key), json_str(j, s); }
void json_kv_int(json_writer *j, const char *key, int64_t v) { json_key(j, key), json_int(j, v); }
void json_kv_uint(json_writer *j, const char *key, uint64_t v) { json_key(j, key), json_uint(j, v); }
void json_kv_num(json_writer *j, const char *key, double v) { json_key(j, key), json_num(j, v); }
void json_kv_bool(json_writer *j, const char *key, bool v) { json_key(j, key), json_bool(j, v); }

int json_finish(json_writer *j) {
    if (j->indent && j->done) fputc('\n', j->out);
    fflush(j->out);
    return j->misuse || !j->done || j->depth != 0 || ferror(j->out) ? -1 : 0;
}
