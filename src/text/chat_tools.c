/* chat_tools.c — parsing tool calls out of generated text (contract in chat.h).
 *
 * Two layers: parse_body() turns the text of one call block into (name, arguments) pairs,
 * repairing the slips quantised models make; chat_parser finds the blocks in a stream of text
 * chunks, holding back partial tags and the whitespace that belongs to the template. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/chat.h"
#include "base/common.h"

typedef struct {
    const char *p;
    size_t n;
} span;

static bool ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static span trim(span s) {
    while (s.n && ws(s.p[0])) s.p++, s.n--;
    while (s.n && ws(s.p[s.n - 1])) s.n--;
    return s;
}

static bool all_ws(span s) { return trim(s).n == 0; }

static const char *find(span h, size_t from, const char *needle) {
    size_t m = strlen(needle);
    if (from > h.n || h.n - from < m) return NULL;
    return memmem(h.p + from, h.n - from, needle, m);
}

static bool at(span s, size_t i, const char *lit) {
    size_t m = strlen(lit);
    return i <= s.n && s.n - i >= m && memcmp(s.p + i, lit, m) == 0;
}

static char *span_dup(span s) {
    char *d = malloc(s.n + 1);
    if (!d) return NULL;
    memcpy(d, s.p, s.n);
    d[s.n] = 0;
    return d;
}

/* ---- calls found in a body ------------------------------------------------------------- */

typedef struct {
    char *name, *args;
} found_call;

typedef struct {
    found_call *v;
    int n;
    bool oom;
} call_list;

static void calls_free(call_list *l) {
    for (int i = 0; i < l->n; i++) free(l->v[i].name), free(l->v[i].args);
    free(l->v);
    memset(l, 0, sizeof *l);
}

static void calls_add(call_list *l, span name, const cJSON *args) {
    if (l->oom) return;
    found_call *v = realloc(l->v, sizeof *v * (size_t)(l->n + 1));
    chat_buf b = {0};
    if (args) chat_json_dumps(args, &b);
    else chat_buf_puts(&b, "{}");
    char *a = chat_buf_take(&b, NULL), *nm = span_dup(name);
    if (!v || !a || !nm) {
        if (v) l->v = v;
        free(a);
        free(nm);
        l->oom = true;
        return;
    }
    l->v = v;
    l->v[l->n++] = (found_call){nm, a};
}

/* ---- schema lookup --------------------------------------------------------------------- */

static const cJSON *get(const cJSON *o, const char *k) {
    return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
}

/* properties object of the tool named `name`, or NULL. */
static const cJSON *tool_props(const cJSON *tools, span name) {
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *fn = get(t, "function");
        if (!fn) fn = t;
        const cJSON *nm = get(fn, "name");
        if (cJSON_IsString(nm) && strlen(nm->valuestring) == name.n &&
            !memcmp(nm->valuestring, name.p, name.n))
            return get(get(fn, "parameters"), "properties");
    }
    return NULL;
}

static const cJSON *prop_schema(const cJSON *props, span key) {
    const cJSON *p;
    cJSON_ArrayForEach(p, props) {
        if (p->string && strlen(p->string) == key.n && !memcmp(p->string, key.p, key.n)) return p;
    }
    return NULL;
}

/* Collect the schema's type names in order (type string, type list, anyOf/oneOf members). */
static int schema_types(const cJSON *s, const char **out, int max) {
    int n = 0;
    const cJSON *ty = get(s, "type");
    if (cJSON_IsString(ty) && n < max) out[n++] = ty->valuestring;
    else if (cJSON_IsArray(ty)) {
        const cJSON *e;
        cJSON_ArrayForEach(e, ty) if (cJSON_IsString(e) && n < max) out[n++] = e->valuestring;
    }
    const char *alts[] = {"anyOf", "oneOf"};
    for (int a = 0; a < 2; a++) {
        const cJSON *e, *arr = get(s, alts[a]);
        cJSON_ArrayForEach(e, arr) n += schema_types(e, out + n, max - n);
    }
    return n;
}

/* JSON number lexeme? */
static bool is_json_number(span t) {
    size_t i = 0;
    if (i < t.n && t.p[i] == '-') i++;
    if (i >= t.n) return false;
    if (t.p[i] == '0') i++;
    else if (t.p[i] >= '1' && t.p[i] <= '9')
        while (i < t.n && t.p[i] >= '0' && t.p[i] <= '9') i++;
    else return false;
    if (i < t.n && t.p[i] == '.') {
        size_t d = ++i;
        while (i < t.n && t.p[i] >= '0' && t.p[i] <= '9') i++;
        if (i == d) return false;
    }
    if (i < t.n && (t.p[i] == 'e' || t.p[i] == 'E')) {
        i++;
        if (i < t.n && (t.p[i] == '+' || t.p[i] == '-')) i++;
        size_t d = i;
        while (i < t.n && t.p[i] >= '0' && t.p[i] <= '9') i++;
        if (i == d) return false;
    }
    return i == t.n;
}

static bool eq_any(span t, const char *a, const char *b, const char *c) {
    const char *v[3] = {a, b, c};
    for (int i = 0; i < 3; i++)
        if (v[i] && strlen(v[i]) == t.n && !memcmp(v[i], t.p, t.n)) return true;
    return false;
}

/* Typed value of an XML parameter. NULL only on oom. */
static cJSON *typed_value(const cJSON *schema, span raw) {
    const char *types[16];
    int nt = schema ? schema_types(schema, types, 16) : 0;
    span t = trim(raw);
    for (int i = 0; i < nt; i++) {
        const char *ty = types[i];
        if (!strcmp(ty, "string")) break;
        if ((!strcmp(ty, "integer") || !strcmp(ty, "number")) && is_json_number(t)) {
            char *lx = span_dup(t);
            cJSON *v = lx ? cJSON_CreateNumber(strtod(lx, NULL)) : NULL;
            if (!v) {
                free(lx);
                return NULL;
            }
            v->valuestring = lx;
            return v;
        }
        if (!strcmp(ty, "boolean")) {
            if (eq_any(t, "true", "True", "TRUE")) return cJSON_CreateTrue();
            if (eq_any(t, "false", "False", "FALSE")) return cJSON_CreateFalse();
        }
        if (!strcmp(ty, "null") && eq_any(t, "null", "None", NULL)) return cJSON_CreateNull();
        if ((!strcmp(ty, "object") || !strcmp(ty, "array")) && t.n && (t.p[0] == '{' || t.p[0] == '[')) {
            size_t used = 0;
            cJSON *v = chat_json_parse_lenient(t.p, t.n, &used);
            rl_clearerr();
            if (v && all_ws((span){t.p + used, t.n - used}) &&
                (!strcmp(ty, "object") ? cJSON_IsObject(v) : cJSON_IsArray(v)))
                return v;
            cJSON_Delete(v);
        }
    }
    char *s = span_dup(raw);
    cJSON *v = s ? cJSON_CreateString(s) : NULL;
    free(s);
    return v;
}

/* ---- XML bodies ------------------------------------------------------------------------ */

static bool ident_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
}

/* Is there a `<KEY>` tag at s[i] (KEY an identifier, not one of the format's own tags)?
 * Returns the key length, 0 if not. */
static size_t slip_tag(span s, size_t i) {
    if (!at(s, i, "<")) return 0;
    size_t k = i + 1;
    while (k < s.n && ident_char(s.p[k])) k++;
    if (k == i + 1 || k >= s.n || s.p[k] != '>') return 0;
    span key = {s.p + i + 1, k - i - 1};
    if (eq_any(key, "parameter", "function", "tool_call")) return 0;
    return key.n;
}

/* Where does a value starting at s[from] end? Returns the end offset; *close = length of the
 * closing tag found there (to skip), 0 if the value ends at another opening tag. */
static size_t value_end(span s, size_t from, span key, bool slip, const cJSON *props, size_t *close) {
    size_t best = s.n;
    *close = 0;
    const char *q;
    if ((q = find(s, from, "</parameter>")) && (size_t)(q - s.p) < best)
        best = (size_t)(q - s.p), *close = 12;
    if (slip) {
        char tag[160];
        if (key.n < sizeof tag - 4) {
            snprintf(tag, sizeof tag, "</%.*s>", (int)key.n, key.p);
            if ((q = find(s, from, tag)) && (size_t)(q - s.p) < best)
                best = (size_t)(q - s.p), *close = strlen(tag);
        }
    }
    if ((q = find(s, from, "<parameter=")) && (size_t)(q - s.p) < best) best = (size_t)(q - s.p), *close = 0;
    /* a missing close before a known parameter written the slip way, at a line start */
    const cJSON *p;
    cJSON_ArrayForEach(p, props) {
        if (!p->string) continue;
        char tag[160];
        if (strlen(p->string) > sizeof tag - 4) continue;
        snprintf(tag, sizeof tag, "\n<%s>", p->string);
        if ((q = find(s, from, tag)) && (size_t)(q - s.p) + 1 < best)
            best = (size_t)(q - s.p) + 1, *close = 0;
    }
    return best;
}

/* Parameters of one function block s (text after "<function=NAME>" up to its end). */
static cJSON *parse_params(span s, const cJSON *props) {
    cJSON *obj = cJSON_CreateObject();
    size_t i = 0;
    while (obj) {
        while (i < s.n && ws(s.p[i])) i++;
        if (i >= s.n) break;
        span key;
        bool slip = false;
        size_t vstart;
        if (at(s, i, "<parameter=")) {
            const char *gt = find(s, i, ">");
            if (!gt) goto fail;
            key = trim((span){s.p + i + 11, (size_t)(gt - s.p) - i - 11});
            vstart = (size_t)(gt - s.p) + 1;
        } else {
            size_t kl = slip_tag(s, i);
            if (!kl) goto fail;
            key = (span){s.p + i + 1, kl};
            slip = true;
            vstart = i + kl + 2;
        }
        if (key.n == 0) goto fail;
        size_t close;
        size_t vend = value_end(s, vstart, key, slip, props, &close);
        span v = {s.p + vstart, vend - vstart};
        if (v.n && v.p[0] == '\n') v.p++, v.n--;
        if (v.n && v.p[v.n - 1] == '\n') v.n--;
        cJSON *val = typed_value(prop_schema(props, key), v);
        char *k = span_dup(key);
        if (!val || !k) {
            cJSON_Delete(val);
            free(k);
            goto fail;
        }
        if (cJSON_GetObjectItemCaseSensitive(obj, k)) cJSON_ReplaceItemInObjectCaseSensitive(obj, k, val);
        else cJSON_AddItemToObject(obj, k, val);
        free(k);
        i = vend + close;
    }
    return obj;
fail:
    cJSON_Delete(obj);
    return NULL;
}

static int parse_xml(const cJSON *tools, span body, call_list *out) {
    size_t pos = 0;
    int found = 0;
    const char *fs;
    while ((fs = find(body, pos, "<function="))) {
        size_t f = (size_t)(fs - body.p);
        if (!all_ws((span){body.p + pos, f - pos})) return 0;
        const char *gt = find(body, f, ">");
        if (!gt) return 0;
        span name = trim((span){fs + 10, (size_t)(gt - fs) - 10});
        if (!name.n || memchr(name.p, '\n', name.n) || memchr(name.p, '<', name.n)) return 0;
        size_t q = (size_t)(gt - body.p) + 1;
        const char *fe = find(body, q, "</function>"), *nf = find(body, q, "<function=");
        size_t send, next;
        if (nf && (!fe || nf < fe)) send = next = (size_t)(nf - body.p);
        else if (fe) send = (size_t)(fe - body.p), next = send + 11;
        else send = next = body.n;
        cJSON *args = parse_params((span){body.p + q, send - q}, tool_props(tools, name));
        if (!args) return 0;
        calls_add(out, name, args);
        cJSON_Delete(args);
        found++;
        pos = next;
    }
    if (!found || !all_ws((span){body.p + pos, body.n - pos})) return 0;
    return found;
}

/* ---- JSON bodies ----------------------------------------------------------------------- */

static bool json_call(const cJSON *v, call_list *out) {
    const cJSON *name = get(v, "name");
    if (!cJSON_IsString(name) || !name->valuestring[0]) return false;
    const cJSON *args = get(v, "arguments");
    if (!args) args = get(v, "parameters");
    cJSON *parsed = NULL;
    if (cJSON_IsString(args)) {
        size_t n = strlen(args->valuestring), used = 0;
        if (trim((span){args->valuestring, n}).n == 0) {
            args = NULL;
        } else {
            parsed = chat_json_parse_lenient(args->valuestring, n, &used);
            rl_clearerr();
            if (!cJSON_IsObject(parsed) || !all_ws((span){args->valuestring + used, n - used})) {
                cJSON_Delete(parsed);
                return false;
            }
            args = parsed;
        }
    } else if (args && !cJSON_IsObject(args) && !cJSON_IsNull(args)) {
        return false;
    }
    if (cJSON_IsNull(args)) args = NULL;
    calls_add(out, (span){name->valuestring, strlen(name->valuestring)}, args);
    cJSON_Delete(parsed);
    return true;
}

static int parse_json(span body, call_list *out) {
    size_t used = 0;
    cJSON *v = chat_json_parse_lenient(body.p, body.n, &used);
    rl_clearerr();
    if (!v) return 0;
    /* what follows the value may only be stray closers / commas / whitespace */
    for (size_t i = used; i < body.n; i++) {
        char c = body.p[i];
        if (!ws(c) && c != '}' && c != ']' && c != ',') {
            cJSON_Delete(v);
            return 0;
        }
    }
    int found = 0;
    if (cJSON_IsObject(v)) {
        found = json_call(v, out) ? 1 : 0;
    } else if (cJSON_IsArray(v) && cJSON_GetArraySize(v) > 0) {
        const cJSON *e;
        cJSON_ArrayForEach(e, v) {
            if (!json_call(e, out)) {
                found = 0;
                break;
            }
            found++;
        }
    }
    cJSON_Delete(v);
    return found;
}

/* Returns the number of calls appended to out (0: not a call). */
static int parse_body(const cJSON *tools, span body, call_list *out) {
    int before = out->n;
    span t = trim(body);
    int k = 0;
    if (t.n && (t.p[0] == '{' || t.p[0] == '[')) k = parse_json(t, out);
    else if (find(t, 0, "<function=")) k = parse_xml(tools, t, out);
    if (k <= 0) { /* drop partial results */
        while (out->n > before) {
            out->n--;
            free(out->v[out->n].name);
            free(out->v[out->n].args);
        }
        return 0;
    }
    return k;
}

int chat_parse_call_body(const cJSON *tools, const char *body, size_t n, chat_conv *c, int msg) {
    call_list l = {0};
    int k = parse_body(tools, (span){body, n}, &l);
    if (l.oom) k = -1;
    for (int i = 0; k > 0 && i < l.n; i++)
        if (chat_conv_add_call(c, msg, l.v[i].name, l.v[i].args, NULL)) k = -1;
    calls_free(&l);
    return k < 0 ? rl_seterr("out of memory (tool calls)") : k;
}

/* ---- checking a call against the declared tools ------------------------------------------ */

/* The function object of the tool named `name` ({"type":"function","function":{...}} or a bare
 * function object), or NULL. */
static const cJSON *tool_fn(const cJSON *tools, const char *name) {
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *fn = get(t, "function");
        if (!fn) fn = t;
        const cJSON *nm = get(fn, "name");
        if (cJSON_IsString(nm) && !strcmp(nm->valuestring, name)) return fn;
    }
    return NULL;
}

static bool value_has_type(const cJSON *v, const char *ty) {
    if (!strcmp(ty, "string")) return cJSON_IsString(v);
    if (!strcmp(ty, "number")) return cJSON_IsNumber(v);
    if (!strcmp(ty, "integer")) {
        if (!cJSON_IsNumber(v)) return false;
        const char *lx = v->valuestring; /* the lexeme (chat_json_parse keeps it): 3, not 3.0 */
        return lx ? !strpbrk(lx, ".eE") : v->valuedouble == (double)(long long)v->valuedouble;
    }
    if (!strcmp(ty, "boolean")) return cJSON_IsBool(v);
    if (!strcmp(ty, "null")) return cJSON_IsNull(v);
    if (!strcmp(ty, "object")) return cJSON_IsObject(v);
    if (!strcmp(ty, "array")) return cJSON_IsArray(v);
    return true; /* a type this check does not know: not held against the call */
}

/* Is the call one the client can run: a declared tool (when tools were declared), arguments a
 * JSON object with every `required` key, and each argument of a type its property schema
 * allows (type, type list, anyOf/oneOf members; properties without types: anything)? */
static bool call_fits(const cJSON *tools, const char *name, const char *args) {
    if (!tools) return true;
    const cJSON *fn = tool_fn(tools, name);
    if (!fn) return false;
    cJSON *a = chat_json_parse(args, strlen(args));
    rl_clearerr();
    bool ok = cJSON_IsObject(a);
    const cJSON *params = get(fn, "parameters"), *props = get(params, "properties"),
                *req = get(params, "required"), *k;
    cJSON_ArrayForEach(k, req) {
        if (ok && cJSON_IsString(k) && !cJSON_GetObjectItemCaseSensitive(a, k->valuestring)) ok = false;
    }
    const cJSON *v, *checked = ok ? a : NULL;
    cJSON_ArrayForEach(v, checked) {
        const cJSON *ps = props && v->string ? cJSON_GetObjectItemCaseSensitive(props, v->string) : NULL;
        const char *types[16];
        int nt = ps ? schema_types(ps, types, 16) : 0;
        bool any = nt == 0;
        for (int i = 0; i < nt && !any; i++) any = value_has_type(v, types[i]);
        if (!any) ok = false;
    }
    cJSON_Delete(a);
    return ok;
}

/* ---- streaming parser ------------------------------------------------------------------ */

static const char TAG_OPEN[] = "<tool_call>";
static const char TAG_CLOSE[] = "</tool_call>";
static const char TAG_FN[] = "<function=";
static const char TAG_FN_END[] = "</function>";

struct chat_parser {
    const cJSON *tools;
    chat_parser_cb cb;
    chat_buf buf;  /* bytes not yet emitted */
    chat_buf held; /* trailing whitespace of the text emitted so far */
    bool in_call, implicit;
    bool cut; /* the output was cut short: a block without its closing tag is text */
    int n_calls, n_failed;
    bool oom;
};

chat_parser *chat_parser_new(const cJSON *tools, const chat_parser_cb *cb) {
    chat_parser *p = rl_calloc(1, sizeof *p, "tool-call parser");
    if (!p) return NULL;
    p->tools = tools;
    if (cb) p->cb = *cb;
    return p;
}

void chat_parser_free(chat_parser *p) {
    if (!p) return;
    chat_buf_free(&p->buf);
    chat_buf_free(&p->held);
    free(p);
}

bool chat_parser_in_call(const chat_parser *p) { return p->in_call; }
int chat_parser_n_calls(const chat_parser *p) { return p->n_calls; }
int chat_parser_n_failed(const chat_parser *p) { return p->n_failed; }

static void out_text(chat_parser *p, const char *s, size_t n) {
    if (n && p->cb.text) p->cb.text(p->cb.ud, s, n);
}

/* Emit text, holding its trailing whitespace back (it is dropped if a call follows). */
static void emit_text(chat_parser *p, const char *s, size_t n) {
    size_t k = n;
    while (k && ws(s[k - 1])) k--;
    if (k) {
        out_text(p, p->held.p, p->held.n);
        p->held.n = 0;
        out_text(p, s, k);
    }
    chat_buf_put(&p->held, s + k, n - k);
}

static void drop_front(chat_buf *b, size_t n) {
    if (!b->p) return; /* empty, never allocated (n is 0) */
    memmove(b->p, b->p + n, b->n - n);
    b->n -= n;
    if (b->p) b->p[b->n] = 0;
}

/* A call block buf[0..raw) with body buf[b0..b1) is complete: emit its calls, or its text.
 * closed: its closing markup was generated (a cut output's unclosed block is only text). */
static void finish_block(chat_parser *p, size_t b0, size_t b1, size_t raw, bool closed) {
    call_list l = {0};
    int k = closed || !p->cut ? parse_body(p->tools, (span){p->buf.p + b0, b1 - b0}, &l) : 0;
    if (l.oom) p->oom = true;
    for (int i = 0; k > 0 && i < l.n; i++)
        if (!call_fits(p->tools, l.v[i].name, l.v[i].args)) k = 0; /* the whole block stays text */
    if (k > 0) {
        p->held.n = 0;
        for (int i = 0; i < l.n; i++)
            if (p->cb.call) p->cb.call(p->cb.ud, l.v[i].name, l.v[i].args);
        p->n_calls += k;
    } else {
        p->n_failed++;
        emit_text(p, p->buf.p, raw);
    }
    calls_free(&l);
    drop_front(&p->buf, raw);
    p->in_call = false;
}

/* Length of the longest suffix of s that is a proper prefix of tag. */
static size_t partial_suffix(span s, const char *tag) {
    size_t m = strlen(tag);
    for (size_t k = m - 1 < s.n ? m - 1 : s.n; k > 0; k--)
        if (!memcmp(s.p + s.n - k, tag, k)) return k;
    return 0;
}

static void process(chat_parser *p, bool final) {
    while (!p->oom && !p->buf.oom) {
        RL_ASSERT(p->buf.p || p->buf.n == 0); /* never allocated: empty (chat_buf's contract) */
        span s = {p->buf.p ? p->buf.p : "", p->buf.n};
        if (!p->in_call) {
            const char *a = find(s, 0, TAG_OPEN), *f = find(s, 0, TAG_FN);
            const char *st = a && (!f || a < f) ? a : f;
            if (st) {
                emit_text(p, s.p, (size_t)(st - s.p)); /* its trailing whitespace stays held */
                drop_front(&p->buf, (size_t)(st - s.p));
                p->in_call = true;
                p->implicit = st == f;
                continue;
            }
            size_t hold = 0;
            if (!final) {
                size_t h1 = partial_suffix(s, TAG_OPEN), h2 = partial_suffix(s, TAG_FN);
                hold = h1 > h2 ? h1 : h2;
            }
            emit_text(p, s.p, s.n - hold);
            drop_front(&p->buf, s.n - hold);
            return;
        }
        /* in a block: the buffer starts with its opening tag (the text before it was dropped) */
        RL_ASSERT(s.n >= (p->implicit ? sizeof TAG_FN : sizeof TAG_OPEN) - 1);
        if (!p->implicit) {
            size_t b0 = sizeof TAG_OPEN - 1;
            const char *e = find(s, b0, TAG_CLOSE), *again = find(s, b0, TAG_OPEN);
            if (again && (!e || again < e)) {
                finish_block(p, b0, (size_t)(again - s.p), (size_t)(again - s.p), true);
            } else if (e) {
                size_t end = (size_t)(e - s.p);
                finish_block(p, b0, end, end + sizeof TAG_CLOSE - 1, true);
            } else if (final) {
                finish_block(p, b0, s.n, s.n, false);
            } else {
                return;
            }
            continue;
        }
        const char *e = find(s, 0, TAG_FN_END);
        if (!e) {
            if (final) finish_block(p, 0, s.n, s.n, false);
            else return;
            continue;
        }
        size_t body_end = (size_t)(e - s.p) + sizeof TAG_FN_END - 1, raw = body_end, j = body_end;
        while (j < s.n && ws(s.p[j])) j++;
        span rest = {s.p + j, s.n - j};
        if (at(rest, 0, TAG_CLOSE)) raw = j + sizeof TAG_CLOSE - 1;
        else if (!final && rest.n < sizeof TAG_CLOSE - 1 && !memcmp(rest.p, TAG_CLOSE, rest.n)) return;
        finish_block(p, 0, body_end, raw, true);
    }
}

int chat_parser_feed(chat_parser *p, const char *s, size_t n) {
    chat_buf_put(&p->buf, s, n);
    process(p, false);
    if (p->oom || p->buf.oom || p->held.oom) return rl_seterr("out of memory (tool-call parser)");
    return 0;
}

int chat_parser_finish_cut(chat_parser *p, bool cut) {
    p->cut = cut;
    return chat_parser_finish(p);
}

int chat_parser_finish(chat_parser *p) {
    process(p, true);
    if (p->n_calls == 0) out_text(p, p->held.p, p->held.n);
    p->held.n = 0;
    if (p->oom || p->buf.oom || p->held.oom) return rl_seterr("out of memory (tool-call parser)");
    return 0;
}
