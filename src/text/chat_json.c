/* chat_json.c — JSON as Python sees it: parsing with cJSON while keeping number lexemes, and
 * serialising like json.dumps(ensure_ascii=False), str() and repr(). Contract in chat.h. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "text/chat.h"
#include "base/common.h"

/* ---- chat_buf -------------------------------------------------------------------------- */

void chat_buf_put(chat_buf *b, const char *s, size_t n) {
    if (b->oom || n == 0) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void chat_buf_puts(chat_buf *b, const char *s) { chat_buf_put(b, s, strlen(s)); }
void chat_buf_putc(chat_buf *b, char c) { chat_buf_put(b, &c, 1); }

void chat_buf_free(chat_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

char *chat_buf_take(chat_buf *b, size_t *len) {
    if (b->oom) {
        chat_buf_free(b);
        return NULL;
    }
    char *p = b->p ? b->p : calloc(1, 1);
    if (len) *len = b->n;
    memset(b, 0, sizeof *b);
    return p;
}

/* ---- parsing --------------------------------------------------------------------------- */

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static bool is_num_char(char c) {
    return (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.' || c == 'e' || c == 'E';
}

/* Attach number lexemes (in document order) to the number nodes of the tree (pre-order). */
typedef struct {
    const char *s;
    size_t n, i;
} lex_scan;

static bool next_number(lex_scan *L, const char **start, size_t *len) {
    while (L->i < L->n) {
        char c = L->s[L->i];
        if (c == '"') {
            L->i++;
            while (L->i < L->n && L->s[L->i] != '"') L->i += L->s[L->i] == '\\' ? 2 : 1;
            L->i++;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            size_t b = L->i;
            while (L->i < L->n && is_num_char(L->s[L->i])) L->i++;
            *start = L->s + b;
            *len = L->i - b;
            return true;
        } else {
            L->i++;
        }
    }
    return false;
}

static int attach_lexemes(cJSON *v, lex_scan *L) {
    for (; v; v = v->next) {
        if (cJSON_IsNumber(v)) {
            const char *st;
            size_t len;
            if (!next_number(L, &st, &len)) return -1;
            char *lx = malloc(len + 1);
            if (!lx) return rl_seterr("out of memory (JSON number)");
            memcpy(lx, st, len);
            lx[len] = 0;
            free(v->valuestring);
            v->valuestring = lx;
        } else if (v->child && attach_lexemes(v->child, L)) {
            return -1;
        }
    }
    return 0;
}

cJSON *chat_json_parse(const char *s, size_t n) {
    const char *end = NULL;
    if (n == 0) {
        rl_seterr("JSON: empty text");
        return NULL;
    }
    cJSON *v = cJSON_ParseWithLengthOpts(s, n, &end, 0);
    if (!v) {
        size_t at = end && end >= s ? (size_t)(end - s) : 0;
        rl_seterr("JSON: syntax error at byte %zu", at);
        return NULL;
    }
    size_t used = (size_t)(end - s);
    for (size_t i = used; i < n; i++)
        if (!is_ws(s[i]) && s[i] != 0) {
            cJSON_Delete(v);
            rl_seterr("JSON: unexpected text after the value at byte %zu", i);
            return NULL;
        }
    lex_scan L = {s, used, 0};
    if (attach_lexemes(v, &L)) { /* v->next is NULL: the top value is a list of one */
        cJSON_Delete(v);
        if (!rl_lasterr()[0]) rl_seterr("JSON: number scan mismatch");
        return NULL;
    }
    return v;
}

cJSON *chat_json_parse_lenient(const char *s, size_t n, size_t *used) {
    size_t i = 0;
    while (i < n && is_ws(s[i])) i++;
    if (i == n) {
        rl_seterr("JSON: empty text");
        return NULL;
    }
    if (s[i] != '{' && s[i] != '[') { /* scalar: strict, but allow trailing text */
        const char *end = NULL;
        cJSON *v = cJSON_ParseWithLengthOpts(s + i, n - i, &end, 0);
        if (!v) {
            rl_seterr("JSON: syntax error");
            return NULL;
        }
        size_t u = (size_t)(end - s);
        cJSON_Delete(v);
        if (used) *used = u;
        return chat_json_parse(s + i, u - i);
    }
    chat_buf b = {0};
    char stack[256];
    int sp = 0;
    bool in_str = false, done = false;
    size_t j = i;
    for (; j < n && !done; j++) {
        char c = s[j];
        if (in_str) {
            chat_buf_putc(&b, c);
            if (c == '\\' && j + 1 < n) chat_buf_putc(&b, s[++j]);
            else if (c == '"') in_str = false;
        } else if (c == '"') {
            in_str = true;
            chat_buf_putc(&b, c);
        } else if (c == '{' || c == '[') {
            if (sp == (int)sizeof stack) break;
            stack[sp++] = c;
            chat_buf_putc(&b, c);
        } else if (c == '}' || c == ']') {
            char want = stack[--sp] == '{' ? '}' : ']';
            chat_buf_putc(&b, want);
            if (sp == 0) done = true;
        } else {
            chat_buf_putc(&b, c);
        }
    }
    if (!done) {
        if (in_str) chat_buf_putc(&b, '"');
        while (b.n && !b.oom && (is_ws(b.p[b.n - 1]) || b.p[b.n - 1] == ',')) b.p[--b.n] = 0;
        while (sp > 0) chat_buf_putc(&b, stack[--sp] == '{' ? '}' : ']');
    }
    if (b.oom) {
        chat_buf_free(&b);
        rl_seterr("out of memory (JSON repair)");
        return NULL;
    }
    cJSON *v = chat_json_parse(b.p, b.n);
    chat_buf_free(&b);
    if (v && used) *used = j;
    return v;
}

/* ---- Python number formatting ---------------------------------------------------------- */

void chat_py_float_repr(double v, char out[40]) {
    if (isnan(v)) {
        strcpy(out, "nan");
        return;
    }
    if (isinf(v)) {
        strcpy(out, v < 0 ? "-inf" : "inf");
        return;
    }
    char e[40];
    for (int prec = 1; prec <= 17; prec++) { /* shortest digits that round-trip */
        snprintf(e, sizeof e, "%.*e", prec - 1, v);
        if (strtod(e, NULL) == v) break;
    }
    /* e = [-]d[.ddd]e[+-]XX */
    char digits[20] = {0}; /* %e writes at least one digit; zeroed for the analysers */
    int nd = 0, neg = 0;
    const char *p = e;
    if (*p == '-') {
        neg = 1;
        p++;
    }
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    int exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--; /* %e pads with zeros only when exact */
    int decpt = exp10 + 1;                        /* value = 0.DIGITS * 10^decpt */
    char *o = out;
    if (neg) *o++ = '-';
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            *o++ = '0';
            *o++ = '.';
            for (int k = 0; k < -decpt; k++) *o++ = '0';
            for (int k = 0; k < nd; k++) *o++ = digits[k];
        } else if (decpt >= nd) {
            for (int k = 0; k < nd; k++) *o++ = digits[k];
            for (int k = nd; k < decpt; k++) *o++ = '0';
            *o++ = '.';
            *o++ = '0';
        } else {
            for (int k = 0; k < nd; k++) {
                if (k == decpt) *o++ = '.';
                *o++ = digits[k];
            }
        }
        *o = 0;
    } else {
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            for (int k = 1; k < nd; k++) *o++ = digits[k];
        }
        snprintf(o, 16, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    }
}

static bool lexeme_is_int(const char *lx) {
    for (const char *p = lx; *p; p++)
        if (*p == '.' || *p == 'e' || *p == 'E') return false;
    return true;
}

/* Python's text of a JSON number (json flag: inf/nan as json.dumps writes them). */
static void put_number(chat_buf *b, const cJSON *v, bool json) {
    const char *lx = v->valuestring;
    if (lx && lexeme_is_int(lx)) {
        const char *p = lx;
        bool neg = *p == '-';
        if (neg || *p == '+') p++;
        while (p[0] == '0' && p[1]) p++;
        if (neg && strcmp(p, "0") != 0) chat_buf_putc(b, '-');
        chat_buf_puts(b, p);
        return;
    }
    double d = lx ? strtod(lx, NULL) : v->valuedouble;
    if (!lx && d == floor(d) && fabs(d) < 9.2e18) {
        char t[32];
        snprintf(t, sizeof t, "%lld", (long long)d);
        chat_buf_puts(b, t);
        return;
    }
    if (json && (isinf(d) || isnan(d))) {
        chat_buf_puts(b, isnan(d) ? "NaN" : d < 0 ? "-Infinity" : "Infinity");
        return;
    }
    char t[40];
    chat_py_float_repr(d, t);
    chat_buf_puts(b, t);
}

/* ---- json.dumps ------------------------------------------------------------------------- */

static void put_json_string(chat_buf *b, const char *s) {
    static const char hex[] = "0123456789abcdef";
    chat_buf_putc(b, '"');
    const char *run = s;
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        chat_buf_put(b, run, (size_t)(p - run));
        run = p + 1;
        switch (c) {
        case '"': chat_buf_puts(b, "\\\""); break;
        case '\\': chat_buf_puts(b, "\\\\"); break;
        case '\n': chat_buf_puts(b, "\\n"); break;
        case '\r': chat_buf_puts(b, "\\r"); break;
        case '\t': chat_buf_puts(b, "\\t"); break;
        case '\b': chat_buf_puts(b, "\\b"); break;
        case '\f': chat_buf_puts(b, "\\f"); break;
        default: {
            char u[7] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15], 0};
            chat_buf_puts(b, u);
        }
        }
    }
    chat_buf_puts(b, run);
    chat_buf_putc(b, '"');
}

/* Python dicts keep one entry per key: the first position, the last value. */
static const cJSON *first_with_key(const cJSON *obj, const cJSON *item) {
    for (const cJSON *c = obj->child; c && c != item; c = c->next)
        if (c->string && item->string && !strcmp(c->string, item->string)) return c;
    return NULL;
}
static const cJSON *last_with_key(const cJSON *item) {
    const cJSON *last = item;
    for (const cJSON *c = item->next; c; c = c->next)
        if (c->string && item->string && !strcmp(c->string, item->string)) last = c;
    return last;
}

static void dumps(chat_buf *b, const cJSON *v, int depth) {
    if (depth > 512) { /* cJSON caps nesting at 1000; stay well inside the C stack */
        chat_buf_puts(b, "null");
        return;
    }
    if (cJSON_IsNull(v)) chat_buf_puts(b, "null");
    else if (cJSON_IsTrue(v)) chat_buf_puts(b, "true");
    else if (cJSON_IsFalse(v)) chat_buf_puts(b, "false");
    else if (cJSON_IsNumber(v)) put_number(b, v, true);
    else if (cJSON_IsString(v)) put_json_string(b, v->valuestring ? v->valuestring : "");
    else if (cJSON_IsRaw(v)) chat_buf_puts(b, v->valuestring ? v->valuestring : "null");
    else if (cJSON_IsArray(v)) {
        chat_buf_putc(b, '[');
        for (const cJSON *c = v->child; c; c = c->next) {
            if (c != v->child) chat_buf_puts(b, ", ");
            dumps(b, c, depth + 1);
        }
        chat_buf_putc(b, ']');
    } else if (cJSON_IsObject(v)) {
        chat_buf_putc(b, '{');
        bool first = true;
        for (const cJSON *c = v->child; c; c = c->next) {
            if (first_with_key(v, c)) continue;
            if (!first) chat_buf_puts(b, ", ");
            first = false;
            put_json_string(b, c->string ? c->string : "");
            chat_buf_puts(b, ": ");
            dumps(b, last_with_key(c), depth + 1);
        }
        chat_buf_putc(b, '}');
    } else {
        chat_buf_puts(b, "null");
    }
}

int chat_json_dumps(const cJSON *v, chat_buf *out) {
    dumps(out, v, 0);
    return out->oom ? -1 : 0;
}

/* ---- str() / repr() ------------------------------------------------------------------- */

static bool py_printable(utf8proc_int32_t cp) {
    if (cp == ' ') return true;
    switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS: return false;
    default: return true;
    }
}

static void put_py_repr_str(chat_buf *b, const char *s) {
    char q = '\'';
    if (strchr(s, '\'') && !strchr(s, '"')) q = '"';
    chat_buf_putc(b, q);
    const uint8_t *p = (const uint8_t *)s;
    size_t n = strlen(s);
    char t[16];
    for (size_t i = 0; i < n;) {
        uint8_t c = p[i];
        if (c < 0x80) {
            if (c == (uint8_t)q || c == '\\') {
                chat_buf_putc(b, '\\');
                chat_buf_putc(b, (char)c);
            } else if (c == '\t') chat_buf_puts(b, "\\t");
            else if (c == '\n') chat_buf_puts(b, "\\n");
            else if (c == '\r') chat_buf_puts(b, "\\r");
            else if (c < 0x20 || c == 0x7f) {
                snprintf(t, sizeof t, "\\x%02x", c);
                chat_buf_puts(b, t);
            } else chat_buf_putc(b, (char)c);
            i++;
            continue;
        }
        utf8proc_int32_t cp;
        utf8proc_ssize_t len = utf8proc_iterate(p + i, (utf8proc_ssize_t)(n - i), &cp);
        if (len <= 0) { /* not UTF-8: pass the byte through */
            chat_buf_putc(b, (char)c);
            i++;
            continue;
        }
        if (py_printable(cp)) {
            chat_buf_put(b, (const char *)p + i, (size_t)len);
        } else {
            if (cp <= 0xff) snprintf(t, sizeof t, "\\x%02x", (unsigned)cp);
            else if (cp <= 0xffff) snprintf(t, sizeof t, "\\u%04x", (unsigned)cp);
            else snprintf(t, sizeof t, "\\U%08x", (unsigned)cp);
            chat_buf_puts(b, t);
        }
        i += (size_t)len;
    }
    chat_buf_putc(b, q);
}

static void pyfmt(chat_buf *b, const cJSON *v, bool repr, int depth) {
    if (depth > 512) {
        chat_buf_puts(b, "None");
        return;
    }
    if (cJSON_IsNull(v)) chat_buf_puts(b, "None");
    else if (cJSON_IsTrue(v)) chat_buf_puts(b, "True");
    else if (cJSON_IsFalse(v)) chat_buf_puts(b, "False");
    else if (cJSON_IsNumber(v)) put_number(b, v, false);
    else if (cJSON_IsString(v)) {
        if (repr) put_py_repr_str(b, v->valuestring ? v->valuestring : "");
        else chat_buf_puts(b, v->valuestring ? v->valuestring : "");
    } else if (cJSON_IsArray(v)) {
        chat_buf_putc(b, '[');
        for (const cJSON *c = v->child; c; c = c->next) {
            if (c != v->child) chat_buf_puts(b, ", ");
            pyfmt(b, c, true, depth + 1);
        }
        chat_buf_putc(b, ']');
    } else if (cJSON_IsObject(v)) {
        chat_buf_putc(b, '{');
        bool first = true;
        for (const cJSON *c = v->child; c; c = c->next) {
            if (first_with_key(v, c)) continue;
            if (!first) chat_buf_puts(b, ", ");
            first = false;
            put_py_repr_str(b, c->string ? c->string : "");
            chat_buf_puts(b, ": ");
            pyfmt(b, last_with_key(c), true, depth + 1);
        }
        chat_buf_putc(b, '}');
    } else {
        chat_buf_puts(b, "None");
    }
}

int chat_json_pystr(const cJSON *v, chat_buf *out) {
    pyfmt(out, v, false, 0);
    return out->oom ? -1 : 0;
}
