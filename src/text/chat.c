/* chat.c — conversations, template detection and rendering (contract in chat.h).
 *
 * The renderers below are hand translations of the two Qwen template families, emulating
 * what jinja2 produces under Hugging Face's apply_chat_template. Python string semantics used
 * by the templates (split, strip('\n'), |trim, str(), tojson) are reproduced by the helpers in
 * this file and in chat_json.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "text/chat.h"
#include "base/common.h"

/* ---- small string helpers -------------------------------------------------------------- */

typedef struct {
    const char *p;
    size_t n;
} span;

static span sp_of(const char *s) { return (span){s ? s : "", s ? strlen(s) : 0}; }

static void put_span(chat_buf *b, span s) { chat_buf_put(b, s.p, s.n); }

static char *dup_or_null(const char *s) {
    if (!s) return NULL;
    char *d = strdup(s);
    if (!d) rl_seterr("out of memory (chat message)");
    return d;
}

static const char *find_mem(span h, const char *needle) {
    size_t m = strlen(needle);
    if (m == 0) return h.p;
    if (h.n < m) return NULL;
    return memmem(h.p, h.n, needle, m);
}

static bool starts_with(span s, const char *pre) {
    size_t m = strlen(pre);
    return s.n >= m && memcmp(s.p, pre, m) == 0;
}
static bool ends_with(span s, const char *suf) {
    size_t m = strlen(suf);
    return s.n >= m && memcmp(s.p + s.n - m, suf, m) == 0;
}

static span lstrip_nl(span s) {
    while (s.n && s.p[0] == '\n') s.p++, s.n--;
    return s;
}
static span rstrip_nl(span s) {
    while (s.n && s.p[s.n - 1] == '\n') s.n--;
    return s;
}

/* Python str.isspace() code points. */
static bool py_space(utf8proc_int32_t c) {
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
           c == 0x3000;
}

/* Python str.strip() (Jinja's |trim). */
static span py_trim(span s) {
    for (;;) { /* leading */
        utf8proc_int32_t cp;
        utf8proc_ssize_t l = utf8proc_iterate((const uint8_t *)s.p, (utf8proc_ssize_t)s.n, &cp);
        if (l <= 0 || !py_space(cp)) break;
        s.p += l;
        s.n -= (size_t)l;
    }
    while (s.n) { /* trailing: find the start of the last character */
        size_t k = s.n - 1;
        while (k > 0 && ((uint8_t)s.p[k] & 0xC0) == 0x80 && s.n - k < 4) k--;
        utf8proc_int32_t cp;
        utf8proc_ssize_t l = utf8proc_iterate((const uint8_t *)s.p + k, (utf8proc_ssize_t)(s.n - k), &cp);
        if (l <= 0 || (size_t)l != s.n - k || !py_space(cp)) break;
        s.n = k;
    }
    return s;
}

/* ---- conversation ---------------------------------------------------------------------- */

static const char *const ROLE_NAMES[] = {"system", "user", "assistant", "tool"};

const char *chat_role_name(chat_role r) { return (unsigned)r < 4 ? ROLE_NAMES[r] : "?"; }

int chat_role_parse(const char *s) {
    for (int i = 0; i < 4; i++)
        if (s && !strcmp(s, ROLE_NAMES[i])) return i;
    return -1;
}

void chat_conv_init(chat_conv *c) { memset(c, 0, sizeof *c); }

static void msg_free(chat_msg *m) {
    free(m->content);
    free(m->reasoning);
    free(m->tool_call_id);
    for (int i = 0; i < m->n_calls; i++) {
        free(m->calls[i].id);
        free(m->calls[i].name);
        free(m->calls[i].arguments);
    }
    free(m->calls);
    memset(m, 0, sizeof *m);
}

void chat_conv_free(chat_conv *c) {
    for (int i = 0; i < c->n; i++) msg_free(&c->msgs[i]);
    free(c->msgs);
    cJSON_Delete(c->tools);
    memset(c, 0, sizeof *c);
}

void chat_conv_truncate(chat_conv *c, int from) {
    if (from < 0) from = 0;
    while (c->n > from) msg_free(&c->msgs[--c->n]);
}

int chat_conv_add(chat_conv *c, chat_role role, const char *content) {
    if (c->n == c->cap) {
        int cap = c->cap ? c->cap * 2 : 8;
        chat_msg *m = realloc(c->msgs, sizeof *m * (size_t)cap);
        if (!m) return rl_seterr("out of memory (chat messages)");
        c->msgs = m;
        c->cap = cap;
    }
    chat_msg *m = &c->msgs[c->n];
    memset(m, 0, sizeof *m);
    m->role = role;
    if (content && !(m->content = dup_or_null(content))) return -1;
    return c->n++;
}

int chat_conv_add_call(chat_conv *c, int msg, const char *name, const char *args_json, const char *id) {
    RL_ASSERT(msg >= 0 && msg < c->n);
    chat_msg *m = &c->msgs[msg];
    chat_call *k = realloc(m->calls, sizeof *k * (size_t)(m->n_calls + 1));
    if (!k) return rl_seterr("out of memory (tool calls)");
    m->calls = k;
    chat_call *t = &k[m->n_calls];
    memset(t, 0, sizeof *t);
    t->name = dup_or_null(name ? name : "");
    t->arguments = dup_or_null(args_json ? args_json : "{}");
    t->id = id ? dup_or_null(id) : NULL;
    if (!t->name || !t->arguments || (id && !t->id)) {
        free(t->name);
        free(t->arguments);
        free(t->id);
        return rl_seterr("out of memory (tool calls)");
    }
    m->n_calls++;
    return 0;
}

int chat_conv_set_tools_json(chat_conv *c, const char *json, size_t len) {
    cJSON_Delete(c->tools);
    c->tools = NULL;
    if (!json || len == 0) return 0;
    cJSON *t = chat_json_parse(json, len);
    if (!t) return -1;
    if (!cJSON_IsArray(t)) {
        cJSON_Delete(t);
        return rl_seterr("tools: expected a JSON array of tool definitions");
    }
    c->tools = t;
    return 0;
}

/* Message content: string, null, or a list of text parts. *out malloc'd or NULL. */
static int content_text(const cJSON *v, char **out, int idx) {
    *out = NULL;
    if (!v || cJSON_IsNull(v)) return 0;
    if (cJSON_IsString(v)) return (*out = dup_or_null(v->valuestring)) ? 0 : -1;
    if (cJSON_IsArray(v)) {
        chat_buf b = {0};
        chat_buf_puts(&b, "");
        const cJSON *part;
        cJSON_ArrayForEach(part, v) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
            if (cJSON_IsString(part)) chat_buf_puts(&b, part->valuestring);
            else if (cJSON_IsString(t)) chat_buf_puts(&b, t->valuestring);
            else {
                chat_buf_free(&b);
                return rl_seterr("messages[%d].content: only text parts are supported", idx);
            }
        }
        if (!(*out = chat_buf_take(&b, NULL))) return rl_seterr("out of memory (chat message)");
        return 0;
    }
    return rl_seterr("messages[%d].content: expected a string, null or a list of text parts", idx);
}

static int load_call(chat_conv *c, int mi, const cJSON *tc, int idx) {
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
    if (!cJSON_IsObject(fn)) fn = tc;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(tc, "id");
    if (!cJSON_IsString(name)) return rl_seterr("messages[%d].tool_calls: a call without a name", idx);
    char *a = NULL;
    if (cJSON_IsString(args)) {
        a = dup_or_null(args->valuestring);
    } else if (args) {
        chat_buf b = {0};
        chat_json_dumps(args, &b);
        a = chat_buf_take(&b, NULL);
    } else {
        a = dup_or_null("{}");
    }
    if (!a) return rl_seterr("out of memory (tool calls)");
    int rc = chat_conv_add_call(c, mi, name->valuestring, a, cJSON_IsString(id) ? id->valuestring : NULL);
    free(a);
    return rc;
}

int chat_conv_from_json(chat_conv *c, const char *json, size_t len) {
    cJSON *root = chat_json_parse(json, len);
    if (!root) return -1;
    const cJSON *msgs = root, *tools = NULL;
    int rc = -1;
    if (cJSON_IsObject(root)) {
        msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
        tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    }
    if (!cJSON_IsArray(msgs)) {
        rl_seterr("chat JSON: expected {\"messages\": [...]} or a messages array");
        goto out;
    }
    if (tools && !cJSON_IsNull(tools)) {
        if (!cJSON_IsArray(tools)) {
            rl_seterr("chat JSON: \"tools\" must be an array");
            goto out;
        }
        cJSON_Delete(c->tools);
        if (!(c->tools = cJSON_Duplicate(tools, 1))) {
            rl_seterr("out of memory (tools)");
            goto out;
        }
    }
    int idx = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        int r = cJSON_IsString(role) ? chat_role_parse(role->valuestring) : -1;
        if (r < 0) {
            rl_seterr("messages[%d]: role must be system, user, assistant or tool", idx);
            goto out;
        }
        char *content;
        if (content_text(cJSON_GetObjectItemCaseSensitive(m, "content"), &content, idx)) goto out;
        int mi = chat_conv_add(c, (chat_role)r, NULL);
        if (mi < 0) {
            free(content);
            goto out;
        }
        chat_msg *msg = &c->msgs[mi];
        msg->content = content;
        const cJSON *rc_ = cJSON_GetObjectItemCaseSensitive(m, "reasoning_content");
        if (cJSON_IsString(rc_) && !(msg->reasoning = dup_or_null(rc_->valuestring))) goto out;
        const cJSON *tcid = cJSON_GetObjectItemCaseSensitive(m, "tool_call_id");
        if (cJSON_IsString(tcid) && !(msg->tool_call_id = dup_or_null(tcid->valuestring))) goto out;
        const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
        if (cJSON_IsArray(calls)) {
            const cJSON *tc;
            cJSON_ArrayForEach(tc, calls) if (load_call(c, mi, tc, idx)) goto out;
        }
        idx++;
    }
    rc = 0;
out:
    cJSON_Delete(root);
    return rc;
}

/* ---- detection ------------------------------------------------------------------------- */

const char *chat_family_name(chat_family f) {
    switch (f) {
    case CHAT_FAMILY_HERMES: return "hermes";
    case CHAT_FAMILY_CODER: return "coder";
    case CHAT_FAMILY_QWEN35: return "qwen35";
    default: return "chatml";
    }
}

chat_format chat_format_detect(const char *t) {
    chat_format f = {CHAT_FAMILY_CHATML, false, false};
    if (!t || !strstr(t, "<|im_start|>")) return f;
    if (strstr(t, "<function=") && strstr(t, "<parameter=")) {
        /* Qwen3.5 has Qwen3-Coder's call form plus the thinking switch (Coder has none) */
        bool q35 = strstr(t, "enable_thinking") && strstr(t, "<think>");
        f.family = q35 ? CHAT_FAMILY_QWEN35 : CHAT_FAMILY_CODER;
        f.think = q35;
        f.known = true;
    } else if (strstr(t, "<tool_call>") && strstr(t, "\"arguments\"") && strstr(t, "<tools>")) {
        f.family = CHAT_FAMILY_HERMES;
        f.known = true;
        f.think = strstr(t, "reasoning_content") != NULL;
    }
    return f;
}

chat_format chat_format_from_gguf(const gguf_file *g) {
    static int warned;
    char *t = g ? gguf_get_str_dup(g, "tokenizer.chat_template") : NULL;
    chat_format f = chat_format_detect(t);
    char *arch = !f.known && g ? gguf_get_str_dup(g, "general.architecture") : NULL;
    if (arch && (!strcmp(arch, "qwen35") || !strcmp(arch, "qwen35moe")))
        f = (chat_format){CHAT_FAMILY_QWEN35, true, true};
    free(arch);
    if (!f.known && !warned) {
        warned = 1;
        fprintf(stderr, "redlite: %s; using plain ChatML (tool calls in Qwen3 JSON form)\n",
                t ? "the model's chat template is not a known Qwen3 / Qwen3-Coder template"
                  : "the model has no chat template");
    }
    free(t);
    return f;
}

/* ---- rendering ------------------------------------------------------------------------- */

static const char HERMES_TOOLS_HEAD[] =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
static const char HERMES_TOOLS_TAIL[] =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
    "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";

static const char CODER_DEFAULT_SYSTEM[] =
    "You are Qwen, a helpful AI assistant that can interact with a computer to solve tasks.";
static const char CODER_TOOLS_HEAD[] = "\n\n# Tools\n\nYou have access to the following tools:\n\n<tools>";
static const char CODER_TOOLS_TAIL[] =
    "\n</tools>\n\nIf you choose to call a tool ONLY reply in the following format with NO suffix:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n"
    "</parameter>\n<parameter=example_parameter_2>\nvalue_2\n</parameter>\n</function>\n</tool_call>\n\n"
    "<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified format: the tool calling block "
    "MUST begin with an opening <tool_call> tag and end with a closing </tool_call> tag.\n"
    "- Required parameters MUST be specified\n- You may provide optional reasoning for your function "
    "call in natural language BEFORE the function call, but NOT after\n- If there is no function call "
    "available, answer the question like normal with your current knowledge and do not tell the user "
    "about function calls\n</IMPORTANT>";

static bool has_tools(const chat_conv *c) { return c->tools && cJSON_GetArraySize(c->tools) > 0; }

/* Client text: appended like any text, its byte range recorded in sp (when given). */
static void plain_mark(chat_spans *sp, size_t a, size_t z) {
    if (!sp || a >= z || sp->oom) return;
    if (sp->n && sp->v[2 * sp->n - 1] == a) { /* adjacent: extend the last range */
        sp->v[2 * sp->n - 1] = z;
        return;
    }
    if (sp->n == sp->cap) {
        size_t cap = sp->cap ? sp->cap * 2 : 16;
        size_t *v = realloc(sp->v, cap * 2 * sizeof *v);
        if (!v) {
            sp->oom = true;
            return;
        }
        sp->v = v, sp->cap = cap;
    }
    sp->v[2 * sp->n] = a, sp->v[2 * sp->n + 1] = z;
    sp->n++;
}

static void put_plain(chat_buf *b, span s, chat_spans *sp) {
    size_t a = b->n;
    put_span(b, s);
    plain_mark(sp, a, b->n);
}

void chat_spans_free(chat_spans *sp) {
    free(sp->v);
    memset(sp, 0, sizeof *sp);
}

static span content_of(const chat_msg *m) { return sp_of(m->content); }

/* The last user message that is not a bare <tool_response> block, its content read by `content`
 * (the templates differ: Qwen3's as given, Qwen3.5's trimmed); n - 1 when there is none. */
static int last_query_of(const chat_msg *M, int n, span (*content)(const chat_msg *)) {
    for (int i = n - 1; i >= 0; i--) {
        span s = content(&M[i]);
        if (M[i].role == CHAT_USER &&
            !(starts_with(s, "<tool_response>") && ends_with(s, "</tool_response>")))
            return i;
    }
    return n - 1;
}

/* sp: where the content's range is recorded (NULL: the content is not client text) */
static void put_turn(chat_buf *b, const char *role, span content, chat_spans *sp) {
    chat_buf_puts(b, "<|im_start|>");
    chat_buf_puts(b, role);
    chat_buf_putc(b, '\n');
    put_plain(b, content, sp);
    chat_buf_puts(b, "<|im_end|>\n");
}

/* Hermes call arguments: json.dumps of the parsed value; text that is not JSON as is. */
static void put_args_json(chat_buf *b, const char *args) {
    cJSON *v = chat_json_parse(args, strlen(args));
    if (v) chat_json_dumps(v, b);
    else chat_buf_puts(b, args);
    cJSON_Delete(v);
    rl_clearerr();
}

static void render_hermes(const chat_format *f, const chat_conv *c, const chat_render_opts *o, chat_buf *b,
                          chat_spans *sp) {
    const chat_msg *M = c->msgs;
    int n = c->n;
    if (has_tools(c)) {
        chat_buf_puts(b, "<|im_start|>system\n");
        if (n > 0 && M[0].role == CHAT_SYSTEM) {
            put_plain(b, content_of(&M[0]), sp);
            chat_buf_puts(b, "\n\n");
        }
        chat_buf_puts(b, HERMES_TOOLS_HEAD);
        const cJSON *t;
        cJSON_ArrayForEach(t, c->tools) {
            chat_buf_putc(b, '\n');
            size_t a = b->n;
            chat_json_dumps(t, b);
            plain_mark(sp, a, b->n);
        }
        chat_buf_puts(b, HERMES_TOOLS_TAIL);
    } else if (n > 0 && M[0].role == CHAT_SYSTEM) {
        put_turn(b, "system", content_of(&M[0]), sp);
    }
    int last_query = last_query_of(M, n, content_of);
    for (int i = 0; i < n; i++) {
        const chat_msg *m = &M[i];
        if (m->role == CHAT_USER || (m->role == CHAT_SYSTEM && i != 0)) {
            put_turn(b, chat_role_name(m->role), content_of(m), sp);
        } else if (m->role == CHAT_ASSISTANT) {
            span content = content_of(m), reasoning = {"", 0};
            bool think_block = false;
            if (f->think) {
                const char *et;
                if (m->reasoning) {
                    reasoning = sp_of(m->reasoning);
                } else if ((et = find_mem(content, "</think>"))) {
                    /* content.split('</think>')[-1].lstrip('\n') */
                    const char *q;
                    span rest = {et + 8, (size_t)(content.p + content.n - (et + 8))};
                    while ((q = find_mem(rest, "</think>")))
                        rest = (span){q + 8, (size_t)(content.p + content.n - (q + 8))};
                    /* split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
                    span first = rstrip_nl((span){content.p, (size_t)(et - content.p)});
                    span r = first;
                    const char *tq;
                    while ((tq = find_mem(r, "<think>"))) r = (span){tq + 7, (size_t)(r.p + r.n - (tq + 7))};
                    reasoning = lstrip_nl(r);
                    content = lstrip_nl(rest);
                }
                if (i > last_query && (i == n - 1 || reasoning.n > 0)) think_block = true;
            }
            chat_buf_puts(b, "<|im_start|>assistant\n");
            if (think_block) {
                chat_buf_puts(b, "<think>\n");
                put_span(b, rstrip_nl(lstrip_nl(reasoning)));
                chat_buf_puts(b, "\n</think>\n\n");
                put_span(b, lstrip_nl(content));
            } else {
                put_span(b, content);
            }
            for (int k = 0; k < m->n_calls; k++) {
                if ((k == 0 && content.n > 0) || k > 0) chat_buf_putc(b, '\n');
                chat_buf_puts(b, "<tool_call>\n{\"name\": \"");
                chat_buf_puts(b, m->calls[k].name);
                chat_buf_puts(b, "\", \"arguments\": ");
                put_args_json(b, m->calls[k].arguments);
                chat_buf_puts(b, "}\n</tool_call>");
            }
            chat_buf_puts(b, "<|im_end|>\n");
        } else if (m->role == CHAT_TOOL) {
            if (i == 0 || M[i - 1].role != CHAT_TOOL) chat_buf_puts(b, "<|im_start|>user");
            chat_buf_puts(b, "\n<tool_response>\n");
            put_plain(b, content_of(m), sp);
            chat_buf_puts(b, "\n</tool_response>");
            if (i == n - 1 || M[i + 1].role != CHAT_TOOL) chat_buf_puts(b, "<|im_end|>\n");
        }
    }
    if (o->add_generation_prompt) {
        chat_buf_puts(b, "<|im_start|>assistant\n");
        if (f->think && o->enable_thinking == 0) chat_buf_puts(b, "<think>\n\n</think>\n\n");
    }
}

/* Iterate an object's keys as a Python dict would: first position, last value. */
static const cJSON *dict_next(const cJSON *obj, const cJSON *prev, const cJSON **value) {
    for (const cJSON *c = prev ? prev->next : obj->child; c; c = c->next) {
        bool seen = false;
        for (const cJSON *d = obj->child; d != c; d = d->next)
            if (d->string && c->string && !strcmp(d->string, c->string)) seen = true;
        if (seen) continue;
        const cJSON *last = c;
        for (const cJSON *d = c->next; d; d = d->next)
            if (d->string && c->string && !strcmp(d->string, c->string)) last = d;
        *value = last;
        return c;
    }
    return NULL;
}

static const cJSON *dict_get(const cJSON *obj, const char *key) {
    if (!cJSON_IsObject(obj)) return NULL;
    const cJSON *found = NULL;
    for (const cJSON *c = obj->child; c; c = c->next)
        if (c->string && !strcmp(c->string, key)) found = c; /* last wins */
    return found;
}

static bool is_container(const cJSON *v) { return cJSON_IsObject(v) || cJSON_IsArray(v); }

/* value | tojson if mapping/list else value | string */
static void put_xml_value(chat_buf *b, const cJSON *v) {
    if (is_container(v)) chat_json_dumps(v, b);
    else chat_json_pystr(v, b);
}

static void put_trimmed_pystr(chat_buf *b, const cJSON *v) {
    chat_buf t = {0};
    chat_json_pystr(v, &t);
    if (t.oom) b->oom = true;
    else put_span(b, py_trim((span){t.p ? t.p : "", t.n}));
    chat_buf_free(&t);
}

static void render_extra_keys(chat_buf *b, const cJSON *d, const char *const *handled, int nh) {
    if (!cJSON_IsObject(d)) return;
    const cJSON *k = NULL, *v;
    while ((k = dict_next(d, k, &v))) {
        bool skip = false;
        for (int i = 0; i < nh; i++)
            if (!strcmp(k->string, handled[i])) skip = true;
        if (skip) continue;
        chat_buf_puts(b, "\n<");
        chat_buf_puts(b, k->string);
        chat_buf_putc(b, '>');
        put_xml_value(b, v);
        chat_buf_puts(b, "</");
        chat_buf_puts(b, k->string);
        chat_buf_putc(b, '>');
    }
}

static void render_coder_tools(const chat_conv *c, chat_buf *b, chat_spans *sp) {
    static const char *const H_PARAM[] = {"name", "type", "description"};
    static const char *const H_PARAMS[] = {"type", "properties"};
    static const char *const H_FN[] = {"type", "name", "description", "parameters"};
    chat_buf_puts(b, CODER_TOOLS_HEAD);
    size_t a = b->n; /* the tool descriptions are client text (the tags around them are not special) */
    const cJSON *tool;
    cJSON_ArrayForEach(tool, c->tools) {
        const cJSON *fn = dict_get(tool, "function");
        if (!fn) fn = tool;
        const cJSON *name = dict_get(fn, "name"), *desc = dict_get(fn, "description");
        const cJSON *params = dict_get(fn, "parameters");
        chat_buf_puts(b, "\n<function>\n<name>");
        if (name) chat_json_pystr(name, b);
        chat_buf_puts(b, "</name>");
        if (desc) {
            chat_buf_puts(b, "\n<description>");
            put_trimmed_pystr(b, desc);
            chat_buf_puts(b, "</description>");
        }
        chat_buf_puts(b, "\n<parameters>");
        const cJSON *props = dict_get(params, "properties");
        if (cJSON_IsObject(params) && cJSON_IsObject(props)) {
            const cJSON *k = NULL, *pf;
            while ((k = dict_next(props, k, &pf))) {
                chat_buf_puts(b, "\n<parameter>\n<name>");
                chat_buf_puts(b, k->string);
                chat_buf_puts(b, "</name>");
                const cJSON *ty = dict_get(pf, "type"), *pd = dict_get(pf, "description");
                if (ty) {
                    chat_buf_puts(b, "\n<type>");
                    chat_json_pystr(ty, b);
                    chat_buf_puts(b, "</type>");
                }
                if (pd) {
                    chat_buf_puts(b, "\n<description>");
                    put_trimmed_pystr(b, pd);
                    chat_buf_puts(b, "</description>");
                }
                render_extra_keys(b, pf, H_PARAM, 3);
                chat_buf_puts(b, "\n</parameter>");
            }
        }
        render_extra_keys(b, params, H_PARAMS, 2);
        chat_buf_puts(b, "\n</parameters>");
        render_extra_keys(b, fn, H_FN, 4);
        chat_buf_puts(b, "\n</function>");
    }
    plain_mark(sp, a, b->n);
    chat_buf_puts(b, CODER_TOOLS_TAIL);
}

static void render_coder(const chat_conv *c, const chat_render_opts *o, chat_buf *b, chat_spans *sp) {
    const chat_msg *M = c->msgs;
    int n = c->n, first = 0;
    bool sys = n > 0 && M[0].role == CHAT_SYSTEM, tools = has_tools(c);
    if (sys) {
        chat_buf_puts(b, "<|im_start|>system\n");
        put_plain(b, content_of(&M[0]), sp);
        first = 1;
    } else if (tools) {
        chat_buf_puts(b, "<|im_start|>system\n");
        chat_buf_puts(b, CODER_DEFAULT_SYSTEM);
    }
    if (tools) render_coder_tools(c, b, sp);
    if (sys || tools) chat_buf_puts(b, "<|im_end|>\n");
    for (int i = first; i < n; i++) {
        const chat_msg *m = &M[i];
        if (m->role == CHAT_ASSISTANT && m->n_calls > 0) {
            chat_buf_puts(b, "<|im_start|>assistant");
            span t = py_trim(content_of(m));
            if (m->content && t.n > 0) {
                chat_buf_putc(b, '\n');
                put_span(b, t);
                chat_buf_putc(b, '\n');
            }
            for (int k = 0; k < m->n_calls; k++) {
                chat_buf_puts(b, "\n<tool_call>\n<function=");
                chat_buf_puts(b, m->calls[k].name);
                chat_buf_puts(b, ">\n");
                const char *a = m->calls[k].arguments;
                cJSON *args = chat_json_parse(a, strlen(a));
                rl_clearerr();
                if (cJSON_IsObject(args)) {
                    const cJSON *key = NULL, *v;
                    while ((key = dict_next(args, key, &v))) {
                        chat_buf_puts(b, "<parameter=");
                        chat_buf_puts(b, key->string);
                        chat_buf_puts(b, ">\n");
                        put_xml_value(b, v);
                        chat_buf_puts(b, "\n</parameter>\n");
                    }
                }
                cJSON_Delete(args);
                chat_buf_puts(b, "</function>\n</tool_call>");
            }
            chat_buf_puts(b, "<|im_end|>\n");
        } else if (m->role == CHAT_TOOL) {
            if (i > first && M[i - 1].role != CHAT_TOOL) chat_buf_puts(b, "<|im_start|>user\n");
            chat_buf_puts(b, "<tool_response>\n");
            put_plain(b, content_of(m), sp);
            chat_buf_puts(b, "\n</tool_response>\n");
            if (i == n - 1 || M[i + 1].role != CHAT_TOOL) chat_buf_puts(b, "<|im_end|>\n");
        } else {
            put_turn(b, chat_role_name(m->role), content_of(m), m->role == CHAT_ASSISTANT ? NULL : sp);
        }
    }
    if (o->add_generation_prompt) chat_buf_puts(b, "<|im_start|>assistant\n");
}

/* ---- Qwen3.5 / Qwen3.6 ------------------------------------------------------------------ */

static const char QWEN35_TOOLS_HEAD[] = "# Tools\n\nYou have access to the following functions:\n\n<tools>";
static const char QWEN35_TOOLS_TAIL[] =
    "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
    "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple "
    "lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow "
    "the specified format: an inner <function=...></function> block must be nested within "
    "<tool_call></tool_call> XML tags\n- Required parameters MUST be specified\n- You may provide optional "
    "reasoning for your function call in natural language BEFORE the function call, but NOT after\n- If "
    "there is no function call available, answer the question like normal with your current knowledge and "
    "do not tell the user about function calls\n</IMPORTANT>";

static span trimmed_content(const chat_msg *m) { return py_trim(content_of(m)); }

/* One call in the XML form: <tool_call>\n<function=N>\n<parameter=K>\nV\n</parameter>\n...
 * (V = json.dumps for objects/arrays, Python str() otherwise; arguments that are not a JSON
 * object render no parameters). */
static void put_xml_call(chat_buf *b, const chat_call *call) {
    chat_buf_puts(b, "<tool_call>\n<function=");
    chat_buf_puts(b, call->name);
    chat_buf_puts(b, ">\n");
    cJSON *args = chat_json_parse(call->arguments, strlen(call->arguments));
    rl_clearerr();
    if (cJSON_IsObject(args)) {
        const cJSON *key = NULL, *v;
        while ((key = dict_next(args, key, &v))) {
            chat_buf_puts(b, "<parameter=");
            chat_buf_puts(b, key->string);
            chat_buf_puts(b, ">\n");
            put_xml_value(b, v);
            chat_buf_puts(b, "\n</parameter>\n");
        }
    }
    cJSON_Delete(args);
    chat_buf_puts(b, "</function>\n</tool_call>");
}

/* An assistant turn; think: it comes after the last user query (the block is always written). */
static void render_qwen35_assistant(const chat_msg *m, bool think, chat_buf *b) {
    span content = trimmed_content(m), reasoning = {"", 0};
    const char *et;
    if (m->reasoning) {
        reasoning = sp_of(m->reasoning);
    } else if ((et = find_mem(content, "</think>"))) {
        /* reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n');
         * content = content.split('</think>')[-1].lstrip('\n') */
        const char *q, *tq;
        span rest = {et + 8, (size_t)(content.p + content.n - (et + 8))};
        while ((q = find_mem(rest, "</think>")))
            rest = (span){q + 8, (size_t)(content.p + content.n - (q + 8))};
        span r = rstrip_nl((span){content.p, (size_t)(et - content.p)});
        while ((tq = find_mem(r, "<think>"))) r = (span){tq + 7, (size_t)(r.p + r.n - (tq + 7))};
        reasoning = lstrip_nl(r);
        content = lstrip_nl(rest);
    }
    chat_buf_puts(b, "<|im_start|>assistant\n");
    if (think) {
        chat_buf_puts(b, "<think>\n");
        put_span(b, py_trim(reasoning));
        chat_buf_puts(b, "\n</think>\n\n");
    }
    put_span(b, content);
    for (int k = 0; k < m->n_calls; k++) {
        if (k > 0) chat_buf_putc(b, '\n');
        else if (py_trim(content).n > 0) chat_buf_puts(b, "\n\n");
        put_xml_call(b, &m->calls[k]);
    }
    chat_buf_puts(b, "<|im_end|>\n");
}

static void render_qwen35(const chat_conv *c, const chat_render_opts *o, chat_buf *b, chat_spans *sp) {
    const chat_msg *M = c->msgs;
    int n = c->n;
    bool sys = n > 0 && M[0].role == CHAT_SYSTEM;
    if (has_tools(c)) {
        chat_buf_puts(b, "<|im_start|>system\n");
        chat_buf_puts(b, QWEN35_TOOLS_HEAD);
        const cJSON *t;
        cJSON_ArrayForEach(t, c->tools) {
            chat_buf_putc(b, '\n');
            size_t a = b->n;
            chat_json_dumps(t, b);
            plain_mark(sp, a, b->n);
        }
        chat_buf_puts(b, QWEN35_TOOLS_TAIL);
        if (sys && trimmed_content(&M[0]).n > 0) {
            chat_buf_puts(b, "\n\n");
            put_plain(b, trimmed_content(&M[0]), sp);
        }
        chat_buf_puts(b, "<|im_end|>\n");
    } else if (sys) {
        put_turn(b, "system", trimmed_content(&M[0]), sp);
    }
    /* (the template refuses a conversation without a query; we render it with every assistant turn
     * before the query) */
    int last_query = last_query_of(M, n, trimmed_content);
    for (int i = 0; i < n; i++) {
        const chat_msg *m = &M[i];
        if (m->role == CHAT_USER || (m->role == CHAT_SYSTEM && i > 0)) {
            put_turn(b, chat_role_name(m->role), trimmed_content(m), sp);
        } else if (m->role == CHAT_ASSISTANT) {
            render_qwen35_assistant(m, i > last_query, b);
        } else if (m->role == CHAT_TOOL) {
            if (i > 0 && M[i - 1].role != CHAT_TOOL) chat_buf_puts(b, "<|im_start|>user");
            chat_buf_puts(b, "\n<tool_response>\n");
            put_plain(b, trimmed_content(m), sp);
            chat_buf_puts(b, "\n</tool_response>");
            if (i == n - 1 || M[i + 1].role != CHAT_TOOL) chat_buf_puts(b, "<|im_end|>\n");
        }
    }
    if (o->add_generation_prompt)
        chat_buf_puts(b, o->enable_thinking == 0 ? "<|im_start|>assistant\n<think>\n\n</think>\n\n"
                                                 : "<|im_start|>assistant\n<think>\n");
}

int chat_render_spans(const chat_format *fmt, const chat_conv *c, const chat_render_opts *opts, chat_buf *out,
                      chat_spans *plain) {
    chat_render_opts o =
        opts ? *opts : (chat_render_opts){.add_generation_prompt = true, .enable_thinking = -1};
    chat_format f = fmt ? *fmt : (chat_format){CHAT_FAMILY_CHATML, false, false};
    if (f.family == CHAT_FAMILY_CODER) render_coder(c, &o, out, plain);
    else if (f.family == CHAT_FAMILY_QWEN35) render_qwen35(c, &o, out, plain);
    else {
        if (f.family == CHAT_FAMILY_CHATML) f.think = false;
        render_hermes(&f, c, &o, out, plain);
    }
    if (out->oom || (plain && plain->oom)) return rl_seterr("out of memory (rendering the chat)");
    return 0;
}

int chat_render(const chat_format *fmt, const chat_conv *c, const chat_render_opts *opts, chat_buf *out) {
    return chat_render_spans(fmt, c, opts, out, NULL);
}
