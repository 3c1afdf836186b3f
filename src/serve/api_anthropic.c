/* api_anthropic.c — see api_anthropic.h.
 *
 * Conversation mapping onto the chat template: the system prompt becomes the system message;
 * a user message's tool_result blocks become tool messages (in order) and its text blocks a
 * user message; an assistant message's text, thinking and tool_use blocks become one
 * assistant message with content, reasoning and calls (arguments = json.dumps of input).
 *
 * Usage follows Anthropic's meaning: input_tokens counts the prompt tokens evaluated now,
 * cache_read_input_tokens the ones reused from the held sequence or a checkpoint. */
#include "serve/api_anthropic.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "serve/api_grammar.h"
#include "serve/api_out.h"

cJSON *api_anthropic_error(const srv_error *e) {
    const char *t = e->type;
    switch (e->status) {
    case 401: t = "authentication_error"; break;
    case 403: t = "permission_error"; break;
    case 404: t = "not_found_error"; break;
    case 413: t = "request_too_large"; break;
    case 429: t = "rate_limit_error"; break;
    case 503:
    case 529: t = "overloaded_error"; break;
    default:
        if (e->status >= 500) t = "api_error";
        else if (!t[0] || strcmp(t, "invalid_request_error")) t = "invalid_request_error";
    }
    cJSON *o = cJSON_CreateObject(), *err;
    cJSON_AddStringToObject(o, "type", "error");
    err = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(err, "type", t);
    cJSON_AddStringToObject(err, "message", e->msg);
    return o;
}

#define OOM(e) srv_fail(e, 500, "api_error", NULL, "out of memory")

/* Text of a string or an array of text blocks (other block types: 400). */
static int blocks_text(const cJSON *v, const char *where, chat_buf *out, srv_error *e) {
    if (cJSON_IsString(v)) {
        chat_buf_puts(out, v->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(v))
        return srv_fail(e, 400, NULL, where, "%s must be a string or an array of text blocks", where);
    const cJSON *b;
    cJSON_ArrayForEach(b, v) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(b, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(b, "text");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(text))
            return srv_fail(e, 400, NULL, where,
                            "%s: only text blocks are supported here (this model reads text only)", where);
        chat_buf_puts(out, text->valuestring);
    }
    return 0;
}

static int add_msg(chat_conv *c, chat_role role, chat_buf *text, srv_error *e) {
    int mi = chat_conv_add(c, role, NULL);
    if (mi < 0) return OOM(e);
    chat_buf_puts(text, "");
    if (!(c->msgs[mi].content = chat_buf_take(text, NULL))) return OOM(e);
    return mi;
}

/* The "type" of a content block ("" when absent or not a string). */
static const char *block_type(const cJSON *b) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(b, "type");
    return cJSON_IsString(type) ? type->valuestring : "";
}

/* A text block's "text" appended to out: 0, or -1 with a 400 in e when it is not a string. */
static int text_block(const cJSON *b, const char *where, chat_buf *out, srv_error *e) {
    const cJSON *tx = cJSON_GetObjectItemCaseSensitive(b, "text");
    if (!cJSON_IsString(tx))
        return srv_fail(e, 400, NULL, "messages", "%s: a text block needs a string 'text'", where);
    chat_buf_puts(out, tx->valuestring);
    return 0;
}

static int load_user(const cJSON *content, const char *where, chat_conv *c, srv_error *e) {
    chat_buf text = {0};
    if (cJSON_IsString(content)) {
        chat_buf_puts(&text, content->valuestring);
        return add_msg(c, CHAT_USER, &text, e) < 0 ? -1 : 0;
    }
    bool have_text = false;
    const cJSON *b;
    cJSON_ArrayForEach(b, content) {
        const char *t = block_type(b);
        if (!strcmp(t, "text")) {
            if (text_block(b, where, &text, e)) goto fail;
            have_text = true;
        } else if (!strcmp(t, "tool_result")) {
            if (have_text) { /* text before a result: keep the order */
                if (add_msg(c, CHAT_USER, &text, e) < 0) goto fail;
                have_text = false;
            }
            chat_buf r = {0};
            const cJSON *rc = cJSON_GetObjectItemCaseSensitive(b, "content");
            if (rc && !cJSON_IsNull(rc) && blocks_text(rc, "tool_result.content", &r, e)) {
                chat_buf_free(&r);
                goto fail;
            }
            int mi = add_msg(c, CHAT_TOOL, &r, e);
            if (mi < 0) goto fail;
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(b, "tool_use_id");
            if (cJSON_IsString(id) && !(c->msgs[mi].tool_call_id = srv_strdup(id->valuestring))) goto oom;
        } else {
            srv_fail(e, 400, NULL, "messages",
                     "%s: content blocks of type '%s' are not supported (text and tool_result only)", where,
                     t);
            goto fail;
        }
    }
    if (have_text && add_msg(c, CHAT_USER, &text, e) < 0) goto fail;
    chat_buf_free(&text);
    return 0;
oom:
    OOM(e);
fail:
    chat_buf_free(&text);
    return -1;
}

static int load_assistant(const cJSON *content, const char *where, chat_conv *c, srv_error *e) {
    chat_buf text = {0}, think = {0};
    int mi = -1;
    if (cJSON_IsString(content)) {
        chat_buf_puts(&text, content->valuestring);
        return add_msg(c, CHAT_ASSISTANT, &text, e) < 0 ? -1 : 0;
    }
    if ((mi = chat_conv_add(c, CHAT_ASSISTANT, NULL)) < 0) return OOM(e);
    const cJSON *b;
    cJSON_ArrayForEach(b, content) {
        const char *t = block_type(b);
        if (!strcmp(t, "text")) {
            if (text_block(b, where, &text, e)) goto fail;
        } else if (!strcmp(t, "thinking")) {
            const cJSON *tx = cJSON_GetObjectItemCaseSensitive(b, "thinking");
            if (cJSON_IsString(tx)) chat_buf_puts(&think, tx->valuestring);
        } else if (!strcmp(t, "redacted_thinking")) {
            continue;
        } else if (!strcmp(t, "tool_use")) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(b, "name");
            const cJSON *input = cJSON_GetObjectItemCaseSensitive(b, "input");
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(b, "id");
            if (!cJSON_IsString(name) || (input && !cJSON_IsObject(input))) {
                srv_fail(e, 400, NULL, "messages",
                         "%s: a tool_use block needs a string 'name' and an object 'input'", where);
                goto fail;
            }
            chat_buf a = {0};
            if (input) chat_json_dumps(input, &a);
            else chat_buf_puts(&a, "{}");
            int rc = a.oom ? -1
                           : chat_conv_add_call(c, mi, name->valuestring, a.p,
                                                cJSON_IsString(id) ? id->valuestring : NULL);
            chat_buf_free(&a);
            if (rc) {
                OOM(e);
                goto fail;
            }
        } else {
            srv_fail(e, 400, NULL, "messages",
                     "%s: content blocks of type '%s' are not supported in assistant turns", where, t);
            goto fail;
        }
    }
    chat_buf_puts(&text, "");
    if (!(c->msgs[mi].content = chat_buf_take(&text, NULL))) goto oom;
    if (think.n && !(c->msgs[mi].reasoning = chat_buf_take(&think, NULL))) goto oom;
    chat_buf_free(&think);
    return 0;
oom:
    OOM(e);
fail:
    chat_buf_free(&text);
    chat_buf_free(&think);
    return -1;
}

/* system, messages, tools, tool_choice, thinking -> conversation. *think = enable_thinking. */
static int load_conv(const cJSON *b, chat_conv *c, int *think, srv_error *e) {
    const cJSON *sys = cJSON_GetObjectItemCaseSensitive(b, "system");
    if (sys && !cJSON_IsNull(sys)) {
        chat_buf t = {0};
        if (blocks_text(sys, "system", &t, e)) {
            chat_buf_free(&t);
            return -1;
        }
        if (add_msg(c, CHAT_SYSTEM, &t, e) < 0) return -1;
    }
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(b, "messages");
    if (!cJSON_IsArray(msgs))
        return srv_fail(e, 400, NULL, "messages", "'messages' is required and must be an array");
    if (!msgs->child)
        return srv_fail(e, 400, NULL, "messages", "'messages' is empty: send at least one user message");
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        char where[40];
        snprintf(where, sizeof where, "messages[%d]", i++);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role))
            return srv_fail(e, 400, NULL, "messages", "%s must be an object with a 'role'", where);
        if (!cJSON_IsString(content) && !cJSON_IsArray(content))
            return srv_fail(e, 400, NULL, "messages",
                            "%s.content must be a string or an array of content blocks", where);
        if (!strcmp(role->valuestring, "user")) {
            if (load_user(content, where, c, e)) return -1;
        } else if (!strcmp(role->valuestring, "assistant")) {
            if (load_assistant(content, where, c, e)) return -1;
        } else if (!strcmp(role->valuestring, "system")) {
            /* not in Anthropic's API, but clients send it (Claude Code's reminders): a system
             * turn where it stands, as the chat template renders one (docs/SERVER.md) */
            chat_buf t = {0};
            if (blocks_text(content, "messages", &t, e)) {
                chat_buf_free(&t);
                return -1;
            }
            if (add_msg(c, CHAT_SYSTEM, &t, e) < 0) return -1;
        } else {
            return srv_fail(e, 400, NULL, "messages", "%s.role must be user, assistant or system", where);
        }
    }
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(b, "tools");
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(b, "tool_choice");
    bool none = false;
    if (tc && !cJSON_IsNull(tc)) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(tc, "type");
        if (!cJSON_IsObject(tc) || !cJSON_IsString(t))
            return srv_fail(e, 400, NULL, "tool_choice",
                            "'tool_choice' must be an object with a 'type' (auto, any, tool, none)");
        none = !strcmp(t->valuestring, "none");
    }
    if (tools && !cJSON_IsNull(tools) && !none) {
        if (!cJSON_IsArray(tools)) return srv_fail(e, 400, NULL, "tools", "'tools' must be an array");
        cJSON *arr = cJSON_CreateArray();
        int k = 0;
        const cJSON *t;
        cJSON_ArrayForEach(t, tools) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
            const cJSON *desc = cJSON_GetObjectItemCaseSensitive(t, "description");
            const cJSON *schema = cJSON_GetObjectItemCaseSensitive(t, "input_schema");
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
            if (cJSON_IsString(type) && strcmp(type->valuestring, "custom"))
                continue; /* server tools: not ours */
            if (!cJSON_IsString(name) || !*name->valuestring || (schema && !cJSON_IsObject(schema))) {
                cJSON_Delete(arr);
                return srv_fail(e, 400, NULL, "tools",
                                "tools[%d] needs a non-empty 'name' and an object 'input_schema'", k);
            }
            cJSON *f = cJSON_CreateObject(), *fn;
            cJSON_AddStringToObject(f, "type", "function");
            fn = cJSON_AddObjectToObject(f, "function");
            cJSON_AddStringToObject(fn, "name", name->valuestring);
            if (cJSON_IsString(desc)) cJSON_AddStringToObject(fn, "description", desc->valuestring);
            if (schema) cJSON_AddItemToObject(fn, "parameters", cJSON_Duplicate(schema, 1));
            cJSON_AddItemToArray(arr, f);
            k++;
        }
        if (k) c->tools = arr;
        else cJSON_Delete(arr);
    }
    *think = -1;
    const cJSON *th = cJSON_GetObjectItemCaseSensitive(b, "thinking");
    if (th && !cJSON_IsNull(th)) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(th, "type");
        if (!cJSON_IsObject(th) || !cJSON_IsString(t))
            return srv_fail(e, 400, NULL, "thinking",
                            "'thinking' must be an object with a 'type' (enabled or disabled)");
        /* enabled / disabled; other kinds (adaptive, ...) leave the template's default */
        if (!strcmp(t->valuestring, "enabled")) *think = 1;
        else if (!strcmp(t->valuestring, "disabled")) *think = 0;
    }
    return 0;
}

/* ---- output -------------------------------------------------------------------------------- */
typedef struct {
    api_out out; /* first (api_out.h): the job, stream flags, <think> split and tool-call parser */
    char id[64];
    char *model;
    int n_blocks;   /* content blocks started */
    bool text_open; /* streaming: a text block is open */
    cJSON *content; /* non-streaming: the blocks */
    chat_buf text;  /* non-streaming: the current text block */
    int n_calls;
    const srv_request *rq;
    char *stops[16]; /* copies, to name the stop_sequence hit */
    int n_stops;
    bool think_open;   /* streaming: a thinking block is open */
    chat_buf thinking; /* non-streaming */
} ant_st;
_Static_assert(offsetof(ant_st, out) == 0, "api_out must be the first member (api_out.h)");

static void ant_free(void *p) {
    ant_st *s = p;
    api_out_free(&s->out);
    cJSON_Delete(s->content);
    chat_buf_free(&s->text);
    chat_buf_free(&s->thinking);
    for (int i = 0; i < s->n_stops; i++) free(s->stops[i]);
    free(s->model);
    free(s);
}

static cJSON *ev(const char *type) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    return o;
}

/* End the content block of `type` ("text" or "thinking", whose field has the same name).
 * Streaming: content_block_stop when *open says it is open. Otherwise the text buffered in buf
 * becomes a block of the content array (a thinking block with an empty signature). */
static void close_block(ant_st *s, bool *open, chat_buf *buf, const char *type) {
    if (s->out.stream) {
        if (!*open) return;
        cJSON *o = ev("content_block_stop");
        cJSON_AddNumberToObject(o, "index", s->n_blocks - 1);
        srv_job_sse(s->out.j, "content_block_stop", o);
        *open = false;
        return;
    }
    if (!buf->n) return;
    chat_buf_puts(buf, "");
    cJSON *b = ev(type);
    cJSON_AddStringToObject(b, type, buf->p);
    if (!strcmp(type, "thinking")) cJSON_AddStringToObject(b, "signature", "");
    cJSON_AddItemToArray(s->content, b);
    buf->n = 0;
}

/* The thinking block ends where the first text or tool call begins. */
static void close_thinking(ant_st *s) { close_block(s, &s->think_open, &s->thinking, "thinking"); }

/* Streaming: n bytes of t as a delta of the open content block of `type` ("text" or "thinking",
 * whose field has the same name), opening the block first (content_block_start) when *open is
 * false. A thinking block starts with an empty signature. */
static void stream_block(ant_st *s, bool *open, const char *type, const char *t, size_t n) {
    if (!*open) {
        cJSON *o = ev("content_block_start"), *b = ev(type);
        cJSON_AddNumberToObject(o, "index", s->n_blocks++);
        cJSON_AddStringToObject(b, type, "");
        if (!strcmp(type, "thinking")) cJSON_AddStringToObject(b, "signature", "");
        cJSON_AddItemToObject(o, "content_block", b);
        srv_job_sse(s->out.j, "content_block_start", o);
        *open = true;
    }
    char dtype[32];
    snprintf(dtype, sizeof dtype, "%s_delta", type);
    cJSON *o = ev("content_block_delta"), *d = ev(dtype);
    cJSON_AddNumberToObject(o, "index", s->n_blocks - 1);
    char *c = strndup(t, n);
    cJSON_AddStringToObject(d, type, c ? c : "");
    free(c);
    cJSON_AddItemToObject(o, "delta", d);
    srv_job_sse(s->out.j, "content_block_delta", o);
}

static void on_thinking(void *ud, const char *t, size_t n) {
    ant_st *s = ud;
    if (!s->out.stream) {
        chat_buf_put(&s->thinking, t, n);
        return;
    }
    stream_block(s, &s->think_open, "thinking", t, n);
}

static void close_text(ant_st *s) {
    close_thinking(s);
    close_block(s, &s->text_open, &s->text, "text");
}

static void on_text_piece(void *ud, const char *t, size_t n) {
    ant_st *s = ud;
    if (!n) return;
    close_thinking(s);
    if (!s->out.stream) {
        chat_buf_put(&s->text, t, n);
        return;
    }
    stream_block(s, &s->text_open, "text", t, n);
}

static void on_call(void *ud, const char *name, const char *args) {
    ant_st *s = ud;
    char id[48];
    srv_new_id(id, sizeof id, "toolu_");
    s->n_calls++;
    close_text(s);
    if (!s->out.stream) {
        cJSON *b = ev("tool_use");
        cJSON_AddStringToObject(b, "id", id);
        cJSON_AddStringToObject(b, "name", name);
        cJSON *in = chat_json_parse(args, strlen(args));
        cJSON_AddItemToObject(b, "input", in ? in : cJSON_CreateObject());
        cJSON_AddItemToArray(s->content, b);
        return;
    }
    int idx = s->n_blocks++;
    cJSON *o = ev("content_block_start"), *b = ev("tool_use");
    cJSON_AddNumberToObject(o, "index", idx);
    cJSON_AddStringToObject(b, "id", id);
    cJSON_AddStringToObject(b, "name", name);
    cJSON_AddObjectToObject(b, "input");
    cJSON_AddItemToObject(o, "content_block", b);
    srv_job_sse(s->out.j, "content_block_start", o);
    o = ev("content_block_delta");
    cJSON *d = ev("input_json_delta");
    cJSON_AddNumberToObject(o, "index", idx);
    cJSON_AddStringToObject(d, "partial_json", args);
    cJSON_AddItemToObject(o, "delta", d);
    srv_job_sse(s->out.j, "content_block_delta", o);
    o = ev("content_block_stop");
    cJSON_AddNumberToObject(o, "index", idx);
    srv_job_sse(s->out.j, "content_block_stop", o);
}

static cJSON *usage(int n_prompt, int n_reused, int n_out) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "input_tokens", n_prompt - n_reused);
    cJSON_AddNumberToObject(u, "cache_creation_input_tokens", 0);
    cJSON_AddNumberToObject(u, "cache_read_input_tokens", n_reused);
    cJSON_AddNumberToObject(u, "output_tokens", n_out);
    return u;
}

static cJSON *message_obj(ant_st *s) {
    cJSON *m = ev("message");
    cJSON_AddStringToObject(m, "id", s->id);
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON_AddStringToObject(m, "model", s->model);
    return m;
}

/* message_start, sent when the request is accepted: the prompt's size is known, its reuse not
 * yet, so input_tokens counts the whole prompt here; message_delta's usage has the split. */
static void ant_open(srv_job *j, void *st, int n_prompt) {
    ant_st *s = st;
    if (!api_out_open(&s->out, j)) return;
    cJSON *o = ev("message_start"), *m = message_obj(s);
    cJSON_AddArrayToObject(m, "content");
    cJSON_AddNullToObject(m, "stop_reason");
    cJSON_AddNullToObject(m, "stop_sequence");
    cJSON_AddItemToObject(m, "usage", usage(n_prompt, 0, 0));
    cJSON_AddItemToObject(o, "message", m);
    srv_job_sse(j, "message_start", o);
    srv_job_sse(j, "ping", ev("ping"));
}

/* A cut answer in an opened stream: an error event (never end_turn; api_out_finish). */
static void ant_stream_error(void *st, const srv_result *r, const srv_error *e) {
    ant_st *s = st;
    srv_job_sse(s->out.j, "error", api_anthropic_error(e));
}

static void ant_finish(srv_job *j, void *st, const srv_result *r) {
    ant_st *s = st;
    if (api_out_finish(st, j, r)) return;
    close_text(s);
    const char *reason = "end_turn", *seq = NULL;
    if (r->reason == SRV_LENGTH || r->reason == SRV_CONTEXT) reason = "max_tokens";
    else if (s->n_calls) reason = "tool_use";
    else if (r->reason == SRV_STOP) {
        reason = "stop_sequence";
        if (r->stop_index >= 0 && r->stop_index < s->n_stops) seq = s->stops[r->stop_index];
    }
    if (s->out.stream) {
        cJSON *o = ev("message_delta"), *d = cJSON_AddObjectToObject(o, "delta");
        cJSON_AddStringToObject(d, "stop_reason", reason);
        if (seq) cJSON_AddStringToObject(d, "stop_sequence", seq);
        else cJSON_AddNullToObject(d, "stop_sequence");
        cJSON_AddItemToObject(o, "usage", usage(r->n_prompt, r->n_reused, r->n_gen));
        srv_job_sse(j, "message_delta", o);
        srv_job_sse(j, "message_stop", ev("message_stop"));
        return;
    }
    cJSON *m = message_obj(s);
    cJSON_AddItemToObject(m, "content", s->content);
    s->content = NULL;
    cJSON_AddStringToObject(m, "stop_reason", reason);
    if (seq) cJSON_AddStringToObject(m, "stop_sequence", seq);
    else cJSON_AddNullToObject(m, "stop_sequence");
    cJSON_AddItemToObject(m, "usage", usage(r->n_prompt, r->n_reused, r->n_gen));
    srv_job_body_json(j, 200, m);
}

static const srv_api MESSAGES_API = {"messages", api_out_start, api_out_text, ant_finish,
                                     ant_free,   ant_open,      NULL};
static const api_out_ops ANT_OUT = {on_thinking,        on_text_piece,       on_call,
                                    ant_open,           api_anthropic_error, "api_error",
                                    "overloaded_error", ant_stream_error};

/* The overflow error in the words of Anthropic's API, which Claude Code's auto-compaction
 * matches ("prompt is too long: N tokens > M maximum"); M is the longest prompt that can
 * still be answered. */
static int overflow_words(const srv_info *in, srv_error *e) {
    if (strcmp(e->code, "context_length_exceeded")) return -1;
    snprintf(e->msg, sizeof e->msg, "prompt is too long: %lld tokens > %d maximum", e->n_prompt,
             in->n_ctx - 1);
    return -1;
}

/* Fields Claude Code and the SDKs send that change nothing here (still refused with
 * --strict-fields when not listed). */
#define ANT_TOLERATED                                                                                        \
    "metadata", "service_tier", "context_management", "output_config", "betas", "container", "mcp_servers",  \
        "anthropic_version", "anthropic_beta", "store", "parallel_tool_calls", "inference_geo"

/* tool_choice {"type": "any"} / {"type": "tool", "name"}: the answer is forced to be a tool call
 * (api_grammar.h); the tools' own "strict": true makes their input follow input_schema */
static int ant_constrain(const srv_info *in, const cJSON *b, const cJSON *tools, srv_request *rq,
                         srv_error *e) {
    const char *name;
    int r = api_grammar_anthropic_choice(cJSON_GetObjectItemCaseSensitive(b, "tool_choice"), &name, e);
    if (r <= 0) return r;
    return api_grammar_tool_call(in, tools, cJSON_GetObjectItemCaseSensitive(b, "tools"), name, rq, e) < 0
               ? -1
               : 0;
}

int api_anthropic_messages(const srv_info *in, const cJSON *b, srv_request *rq, srv_reply *rep,
                           srv_error *e) {
    static const char *const known[] = {
        "model", "max_tokens", "messages", "system",      "stop_sequences", "stream",      "temperature",
        "top_p", "top_k",      "tools",    "tool_choice", "thinking",       ANT_TOLERATED, NULL};
    if (srv_check_fields(in, b, known, NULL, e)) return -1;
    ant_st *s = calloc(1, sizeof *s);
    if (!s) return OOM(e);
    rq->api = &MESSAGES_API;
    rq->st = s;
    api_out_init(&s->out, &ANT_OUT);
    s->content = cJSON_CreateArray();
    srv_new_id(s->id, sizeof s->id, "msg_");
    const char *model = NULL;
    if (srv_get_str(b, "model", &model, e) < 0) return -1;
    if (!model) return srv_fail(e, 400, NULL, "model", "'model' is required");
    if (!(s->model = srv_strdup(model))) return OOM(e);
    long long mt;
    int r = srv_get_int(b, "max_tokens", 1, 1LL << 40, &mt, e);
    if (r < 0) return -1;
    if (!r) return srv_fail(e, 400, NULL, "max_tokens", "'max_tokens' is required");
    rq->n_predict = mt;
    if (srv_get_bool(b, "stream", &s->out.stream, e) < 0) return -1;
    rq->stream = s->out.stream;
    double t;
    if (srv_get_num(b, "temperature", 0, 1, &t, e) < 0) return -1;
    if (srv_parse_sampling(b, in, &rq->sp, e)) return -1;
    const cJSON *ss = cJSON_GetObjectItemCaseSensitive(b, "stop_sequences");
    if (ss && !cJSON_IsNull(ss)) {
        if (!cJSON_IsArray(ss))
            return srv_fail(e, 400, NULL, "stop_sequences", "'stop_sequences' must be an array of strings");
        const cJSON *x;
        cJSON_ArrayForEach(x, ss) {
            if (!cJSON_IsString(x))
                return srv_fail(e, 400, NULL, "stop_sequences",
                                "'stop_sequences' must be an array of strings");
            if (!*x->valuestring) continue;
            if (srv_request_add_stop(rq, x->valuestring))
                return srv_fail(e, 400, NULL, "stop_sequences", "%s", rl_lasterr());
            if (!(s->stops[s->n_stops++] = srv_strdup(x->valuestring))) return OOM(e);
        }
    }
    chat_conv conv;
    chat_conv_init(&conv);
    int think, rc = -1;
    if (load_conv(b, &conv, &think, e)) goto out;
    if (srv_render_prompt(in, &conv, think, rq, e)) {
        overflow_words(in, e);
        goto out;
    }
    if (api_out_ready(&s->out, rq->think, &conv)) {
        OOM(e);
        goto out;
    }
    if (ant_constrain(in, b, s->out.tools, rq, e)) goto out;
    rc = 1;
out:
    chat_conv_free(&conv);
    return rc;
}

int api_anthropic_count_tokens(const srv_info *in, const cJSON *b, srv_request *rq, srv_reply *rep,
                               srv_error *e) {
    static const char *const known[] = {"model",       "messages", "system",      "tools",
                                        "tool_choice", "thinking", ANT_TOLERATED, NULL};
    if (srv_check_fields(in, b, known, NULL, e)) return -1;
    chat_conv conv;
    chat_conv_init(&conv);
    int think;
    srv_request tmp = {0};
    if (load_conv(b, &conv, &think, e) ||
        (srv_render_prompt(in, &conv, think, &tmp, e) && strcmp(e->code, "context_length_exceeded"))) {
        chat_conv_free(&conv);
        srv_request_free(&tmp);
        return -1;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "input_tokens", (double)tmp.prompt.n);
    chat_conv_free(&conv);
    srv_request_free(&tmp);
    return srv_reply_json(rep, 200, o) ? OOM(e) : 0;
}
