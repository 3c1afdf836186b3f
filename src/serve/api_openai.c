/* api_openai.c — see api_openai.h. Streaming follows OpenAI's wire format: one
 * "data: {chat.completion.chunk}\n\n" per delta (first the role, then content or tool_calls
 * deltas, then an empty delta with finish_reason, then the usage chunk when
 * stream_options.include_usage), ending with "data: [DONE]\n\n". */
#include "serve/api_openai.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/common.h"
#include "serve/api_grammar.h"
#include "serve/api_out.h"

cJSON *api_openai_error(const srv_error *e) {
    cJSON *o = cJSON_CreateObject(), *err = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(err, "message", e->msg);
    cJSON_AddStringToObject(err, "type", e->type[0] ? e->type : "invalid_request_error");
    if (e->param[0]) cJSON_AddStringToObject(err, "param", e->param);
    else cJSON_AddNullToObject(err, "param");
    if (e->code[0]) cJSON_AddStringToObject(err, "code", e->code);
    else cJSON_AddNullToObject(err, "code");
    return o;
}

/* A model entry: OpenAI's fields plus the context window under the names clients look for
 * (vLLM's max_model_len, OpenRouter/LiteLLM-style context_length / context_window, llama.cpp's
 * meta.n_ctx / n_ctx_train) and the default answer cap. */
static cJSON *model_obj(const srv_info *in, const char *id) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)time(NULL));
    cJSON_AddStringToObject(m, "owned_by", "redlite");
    cJSON_AddNumberToObject(m, "context_length", in->n_ctx);
    cJSON_AddNumberToObject(m, "context_window", in->n_ctx);
    cJSON_AddNumberToObject(m, "max_model_len", in->n_ctx);
    long long cap = in->max_tokens > 0 ? in->max_tokens : srv_default_max_tokens(in->n_ctx);
    cJSON_AddNumberToObject(m, "max_output_tokens", (double)(cap < in->n_ctx ? cap : in->n_ctx - 1));
    cJSON *meta = cJSON_AddObjectToObject(m, "meta");
    cJSON_AddNumberToObject(meta, "n_ctx", in->n_ctx);
    if (in->n_ctx_train > 0) cJSON_AddNumberToObject(meta, "n_ctx_train", in->n_ctx_train);
    return m;
}

int api_openai_models(const srv_info *in, const cJSON *body, srv_request *rq, srv_reply *rep, srv_error *e) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), model_obj(in, in->model_id));
    return srv_reply_json(rep, 200, o) ? srv_fail(e, 500, "server_error", NULL, "out of memory") : 0;
}

/* GET /v1/models/{id}: the server answers every request with its one model whatever `model`
 * says, so any id is that model (under the id asked for, as the answers carry it too). */
int api_openai_model(const srv_info *in, const cJSON *body, srv_request *rq, srv_reply *rep, srv_error *e) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(body, "id");
    cJSON *m = model_obj(in, cJSON_IsString(id) ? id->valuestring : in->model_id);
    return srv_reply_json(rep, 200, m) ? srv_fail(e, 500, "server_error", NULL, "out of memory") : 0;
}

int api_openai_stops(const cJSON *stop, const char *name, srv_request *rq, srv_error *e) {
    if (!stop || cJSON_IsNull(stop)) return 0;
    if (cJSON_IsString(stop)) {
        if (srv_request_add_stop(rq, stop->valuestring))
            return srv_fail(e, 400, NULL, name, "%s", rl_lasterr());
        return 0;
    }
    if (!cJSON_IsArray(stop))
        return srv_fail(e, 400, NULL, name, "'%s' must be a string or an array of strings", name);
    const cJSON *s;
    cJSON_ArrayForEach(s, stop) {
        if (!cJSON_IsString(s))
            return srv_fail(e, 400, NULL, name, "'%s' must be a string or an array of strings", name);
        if (srv_request_add_stop(rq, s->valuestring))
            return srv_fail(e, 400, NULL, name, "'%s': %s", name, rl_lasterr());
    }
    return 0;
}

int api_openai_tools(const cJSON *tools, const cJSON *tool_choice, chat_conv *conv, srv_error *e) {
    if (tool_choice && !cJSON_IsNull(tool_choice)) {
        if (cJSON_IsString(tool_choice)) {
            const char *t = tool_choice->valuestring;
            if (strcmp(t, "none") && strcmp(t, "auto") && strcmp(t, "required"))
                return srv_fail(e, 400, NULL, "tool_choice",
                                "'tool_choice' must be none, auto, required or an object");
            if (!strcmp(t, "none")) return 0; /* the model is not told about the tools */
        } else if (!cJSON_IsObject(tool_choice)) {
            return srv_fail(e, 400, NULL, "tool_choice", "'tool_choice' must be a string or an object");
        }
    }
    if (!tools || cJSON_IsNull(tools)) return 0;
    if (!cJSON_IsArray(tools)) return srv_fail(e, 400, NULL, "tools", "'tools' must be an array");
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (!cJSON_IsObject(t) || !cJSON_IsString(type) || strcmp(type->valuestring, "function"))
            return srv_fail(
                e, 400, NULL, "tools",
                "tools[%d]: only {\"type\": \"function\", \"function\": {...}} tools are supported", i);
        if (!cJSON_IsObject(fn) || !cJSON_IsString(name) || !*name->valuestring)
            return srv_fail(e, 400, NULL, "tools", "tools[%d].function.name must be a non-empty string", i);
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        if (params && !cJSON_IsObject(params) && !cJSON_IsNull(params))
            return srv_fail(e, 400, NULL, "tools",
                            "tools[%d].function.parameters must be a JSON schema object", i);
        i++;
    }
    if (i == 0) return 0;
    if (!(conv->tools = cJSON_Duplicate(tools, 1)))
        return srv_fail(e, 500, "server_error", NULL, "out of memory");
    return 0;
}

/* ---- messages ---------------------------------------------------------------------------- */
static int content_text(const cJSON *v, const char *where, char **out, srv_error *e) {
    *out = NULL;
    if (!v || cJSON_IsNull(v)) return 0;
    if (cJSON_IsString(v))
        return (*out = srv_strdup(v->valuestring)) ? 0
                                                   : srv_fail(e, 500, "server_error", NULL, "out of memory");
    if (!cJSON_IsArray(v))
        return srv_fail(e, 400, NULL, "messages",
                        "%s.content must be a string, null or an array of text parts", where);
    chat_buf b = {0};
    chat_buf_puts(&b, "");
    const cJSON *p;
    cJSON_ArrayForEach(p, v) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(p, "text");
        if (!cJSON_IsString(type) ||
            (strcmp(type->valuestring, "text") && strcmp(type->valuestring, "input_text") &&
             strcmp(type->valuestring, "output_text")) ||
            !cJSON_IsString(text)) {
            chat_buf_free(&b);
            return srv_fail(e, 400, NULL, "messages",
                            "%s.content: only text parts are supported (this model reads text only)", where);
        }
        chat_buf_puts(&b, text->valuestring);
    }
    if (!(*out = chat_buf_take(&b, NULL))) return srv_fail(e, 500, "server_error", NULL, "out of memory");
    return 0;
}

static int load_messages(const cJSON *msgs, chat_conv *conv, srv_error *e) {
    if (!cJSON_IsArray(msgs))
        return srv_fail(e, 400, NULL, "messages", "'messages' must be an array of message objects");
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        char where[40];
        snprintf(where, sizeof where, "messages[%d]", i++);
        if (!cJSON_IsObject(m)) return srv_fail(e, 400, NULL, "messages", "%s must be an object", where);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const char *rs = cJSON_IsString(role) ? role->valuestring : "";
        int r = !strcmp(rs, "developer") ? CHAT_SYSTEM : chat_role_parse(rs);
        if (r < 0)
            return srv_fail(e, 400, NULL, "messages",
                            "%s.role must be system, developer, user, assistant or tool", where);
        char *content;
        if (content_text(cJSON_GetObjectItemCaseSensitive(m, "content"), where, &content, e)) return -1;
        int mi = chat_conv_add(conv, (chat_role)r, NULL);
        if (mi < 0) {
            free(content);
            return srv_fail(e, 500, "server_error", NULL, "out of memory");
        }
        conv->msgs[mi].content = content;
        const cJSON *rc = cJSON_GetObjectItemCaseSensitive(m, "reasoning_content");
        if (cJSON_IsString(rc) && !(conv->msgs[mi].reasoning = srv_strdup(rc->valuestring))) return -1;
        const cJSON *tcid = cJSON_GetObjectItemCaseSensitive(m, "tool_call_id");
        if (cJSON_IsString(tcid) && !(conv->msgs[mi].tool_call_id = srv_strdup(tcid->valuestring))) return -1;
        const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
        if (calls && !cJSON_IsNull(calls)) {
            if (!cJSON_IsArray(calls) || r != CHAT_ASSISTANT)
                return srv_fail(e, 400, NULL, "messages",
                                "%s.tool_calls must be an array (assistant messages only)", where);
            const cJSON *tc;
            cJSON_ArrayForEach(tc, calls) {
                const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
                const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
                const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
                const cJSON *id = cJSON_GetObjectItemCaseSensitive(tc, "id");
                if (!cJSON_IsString(name))
                    return srv_fail(e, 400, NULL, "messages", "%s.tool_calls: each call needs function.name",
                                    where);
                char *a = NULL;
                if (cJSON_IsString(args)) a = srv_strdup(args->valuestring);
                else if (args && !cJSON_IsNull(args)) {
                    chat_buf b = {0};
                    chat_json_dumps(args, &b);
                    a = chat_buf_take(&b, NULL);
                } else a = srv_strdup("{}");
                int rc2 = a ? chat_conv_add_call(conv, mi, name->valuestring, a,
                                                 cJSON_IsString(id) ? id->valuestring : NULL)
                            : -1;
                free(a);
                if (rc2) return srv_fail(e, 500, "server_error", NULL, "out of memory");
            }
        }
    }
    return 0;
}

/* ---- output state ------------------------------------------------------------------------ */
typedef struct {
    api_out out; /* first (api_out.h): the job, stream flags, <think> split and tool-call parser */
    bool chat;   /* chat.completion vs text_completion */
    bool include_usage;
    char id[64];
    char *model;
    long created;
    chat_buf text; /* non-streaming: content */
    cJSON *calls;  /* non-streaming: tool_calls array */
    int n_calls;
    char *echo;         /* completions: echo the prompt */
    chat_buf reasoning; /* non-streaming: reasoning_content */
    bool logprobs;      /* chat: logprobs asked for ... */
    int top_logprobs;
    const tokenizer *tok;
    cJSON *lp; /* ... entries not yet sent (streaming) or all of them */
} oai_st;
_Static_assert(offsetof(oai_st, out) == 0, "api_out must be the first member (api_out.h)");

static void oai_free(void *p) {
    oai_st *s = p;
    api_out_free(&s->out);
    cJSON_Delete(s->calls);
    chat_buf_free(&s->text);
    chat_buf_free(&s->reasoning);
    free(s->model);
    free(s->echo);
    cJSON_Delete(s->lp);
    free(s);
}

/* ---- logprobs and structured outputs (api_grammar.h) --------------------------------------- */
static void oai_logprobs(srv_job *j, void *st, const sampler_logprobs *lp) {
    oai_st *s = st;
    if (!s->lp && !(s->lp = cJSON_CreateArray())) return;
    cJSON_AddItemToArray(s->lp, api_grammar_logprob_entry(s->tok, lp, s->top_logprobs));
}

/* a choice's "logprobs": {"content": [the entries so far], "refusal": null}, or null when not asked */
static void add_logprobs(oai_st *s, cJSON *choice) {
    if (!s->logprobs) {
        cJSON_AddNullToObject(choice, "logprobs");
        return;
    }
    cJSON *o = cJSON_AddObjectToObject(choice, "logprobs");
    cJSON_AddItemToObject(o, "content", s->lp ? s->lp : cJSON_CreateArray());
    cJSON_AddNullToObject(o, "refusal");
    s->lp = NULL;
}

/* logprobs (chat: a boolean, with top_logprobs 0..20) / (completions: an integer, refused) */
static int oai_logprob_fields(const cJSON *b, const srv_info *in, oai_st *s, srv_request *rq, srv_error *e) {
    const cJSON *lp = cJSON_GetObjectItemCaseSensitive(b, "logprobs");
    long long top = 0;
    int r = srv_get_int(b, "top_logprobs", 0, 20, &top, e);
    if (r < 0) return -1;
    if (!lp || cJSON_IsNull(lp)) {
        if (r && s->chat)
            return srv_fail(e, 400, NULL, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
        return 0;
    }
    if (s->chat) {
        if (!cJSON_IsBool(lp)) return srv_fail(e, 400, NULL, "logprobs", "'logprobs' must be a boolean");
        if (r && !cJSON_IsTrue(lp))
            return srv_fail(e, 400, NULL, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
        s->logprobs = rq->logprobs = cJSON_IsTrue(lp);
        s->top_logprobs = rq->top_logprobs = (int)top;
        s->tok = in->tok;
        return 0;
    }
    if (!cJSON_IsBool(lp) && !cJSON_IsNumber(lp))
        return srv_fail(e, 400, NULL, "logprobs", "'logprobs' must be an integer (completions)");
    if (cJSON_IsTrue(lp) || (cJSON_IsNumber(lp) && lp->valuedouble > 0))
        return srv_fail(e, 400, NULL, "logprobs", "'logprobs' is supported on /v1/chat/completions only");
    return 0;
}

/* response_format and a forced tool_choice (it wins over response_format) -> rq->grammar */
static int oai_constrain(const srv_info *in, const cJSON *b, oai_st *s, srv_request *rq, srv_error *e) {
    const char *name;
    int r = api_grammar_openai_choice(cJSON_GetObjectItemCaseSensitive(b, "tool_choice"), &name, e);
    if (r < 0) return -1;
    if (r) return api_grammar_tool_call(in, s->out.tools, NULL, name, rq, e) < 0 ? -1 : 0;
    return api_grammar_format(in, cJSON_GetObjectItemCaseSensitive(b, "response_format"), false,
                              "response_format", rq, e) < 0
               ? -1
               : 0;
}

static cJSON *chunk_new(oai_st *s) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", s->id);
    cJSON_AddStringToObject(o, "object", s->chat ? "chat.completion.chunk" : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)s->created);
    cJSON_AddStringToObject(o, "model", s->model);
    cJSON_AddStringToObject(o, "system_fingerprint", "redlite-" RL_VERSION);
    return o;
}

/* One chunk with one choice: delta (chat) or text (completions). */
static void send_delta(oai_st *s, cJSON *delta, const char *text, size_t n, const char *finish) {
    cJSON *o = chunk_new(s), *ch = cJSON_CreateObject();
    cJSON_AddNumberToObject(ch, "index", 0);
    if (s->chat) cJSON_AddItemToObject(ch, "delta", delta ? delta : cJSON_CreateObject());
    else {
        char *t = strndup(text ? text : "", n);
        cJSON_AddStringToObject(ch, "text", t ? t : "");
        free(t);
    }
    add_logprobs(s, ch);
    if (finish) cJSON_AddStringToObject(ch, "finish_reason", finish);
    else cJSON_AddNullToObject(ch, "finish_reason");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), ch);
    if (s->include_usage) cJSON_AddNullToObject(o, "usage");
    srv_job_sse(s->out.j, NULL, o);
}

/* Chat streaming: a delta whose one string member `field` holds t[0..n). */
static void send_str_delta(oai_st *s, const char *field, const char *t, size_t n) {
    cJSON *d = cJSON_CreateObject();
    char *c = strndup(t, n);
    cJSON_AddStringToObject(d, field, c ? c : "");
    free(c);
    send_delta(s, d, NULL, 0, NULL);
}

static void on_parser_text(void *ud, const char *t, size_t n) {
    oai_st *s = ud;
    if (!n) return;
    if (!s->out.stream) {
        chat_buf_put(&s->text, t, n);
        return;
    }
    if (!s->chat) {
        send_delta(s, NULL, t, n, NULL);
        return;
    }
    send_str_delta(s, "content", t, n);
}

static cJSON *call_obj(const char *id, const char *name, const char *args) {
    cJSON *c = cJSON_CreateObject(), *f;
    cJSON_AddStringToObject(c, "id", id);
    cJSON_AddStringToObject(c, "type", "function");
    f = cJSON_AddObjectToObject(c, "function");
    cJSON_AddStringToObject(f, "name", name);
    cJSON_AddStringToObject(f, "arguments", args);
    return c;
}

static void on_parser_call(void *ud, const char *name, const char *args) {
    oai_st *s = ud;
    char id[48];
    srv_new_id(id, sizeof id, "call_");
    int idx = s->n_calls++;
    if (!s->out.stream) {
        if (!s->calls) s->calls = cJSON_CreateArray();
        cJSON_AddItemToArray(s->calls, call_obj(id, name, args));
        return;
    }
    /* as OpenAI streams it: the call's id, type and name with empty arguments, then arguments */
    cJSON *d = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(d, "tool_calls"),
          *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", idx);
    cJSON *full = call_obj(id, name, ""), *it;
    while ((it = full->child)) cJSON_AddItemToObject(c, it->string, cJSON_DetachItemViaPointer(full, it));
    cJSON_Delete(full);
    cJSON_AddItemToArray(arr, c);
    send_delta(s, d, NULL, 0, NULL);
    d = cJSON_CreateObject();
    arr = cJSON_AddArrayToObject(d, "tool_calls");
    c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", idx);
    cJSON_AddStringToObject(cJSON_AddObjectToObject(c, "function"), "arguments", args);
    cJSON_AddItemToArray(arr, c);
    send_delta(s, d, NULL, 0, NULL);
}

static void oai_open(srv_job *j, void *st, int n_prompt) {
    oai_st *s = st;
    if (!api_out_open(&s->out, j)) return;
    if (s->chat) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "role", "assistant");
        cJSON_AddStringToObject(d, "content", "");
        send_delta(s, d, NULL, 0, NULL);
    } else if (s->echo) {
        send_delta(s, NULL, s->echo, strlen(s->echo), NULL);
    }
}

static void oai_reasoning(void *ud, const char *t, size_t n) {
    oai_st *s = ud;
    if (!s->out.stream) {
        chat_buf_put(&s->reasoning, t, n);
        return;
    }
    send_str_delta(s, "reasoning_content", t, n);
}

static cJSON *usage_obj(const srv_result *r) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", r->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", r->n_gen);
    cJSON_AddNumberToObject(u, "total_tokens", r->n_prompt + r->n_gen);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "prompt_tokens_details"), "cached_tokens",
                            r->n_reused);
    return u;
}

static const char *finish_reason(const oai_st *s, const srv_result *r) {
    if (r->reason == SRV_LENGTH || r->reason == SRV_CONTEXT) return "length";
    return s->n_calls ? "tool_calls" : "stop";
}

/* A cut answer in an opened stream: an error chunk, then [DONE] (never a finish_reason). */
static void oai_stream_error(void *st, const srv_result *r, const srv_error *e) {
    oai_st *s = st;
    srv_job_sse(s->out.j, NULL, api_openai_error(e));
    srv_job_send(s->out.j, "data: [DONE]\n\n", 14);
}

static void oai_finish(srv_job *j, void *st, const srv_result *r) {
    oai_st *s = st;
    if (api_out_finish(st, j, r)) return;
    const char *fin = finish_reason(s, r);
    if (s->out.stream) {
        send_delta(s, s->chat ? cJSON_CreateObject() : NULL, "", 0, fin);
        if (s->include_usage) {
            cJSON *o = chunk_new(s);
            cJSON_AddArrayToObject(o, "choices");
            cJSON_AddItemToObject(o, "usage", usage_obj(r));
            srv_job_sse(j, NULL, o);
        }
        srv_job_send(j, "data: [DONE]\n\n", 14);
        return;
    }
    cJSON *o = cJSON_CreateObject(), *ch = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", s->id);
    cJSON_AddStringToObject(o, "object", s->chat ? "chat.completion" : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)s->created);
    cJSON_AddStringToObject(o, "model", s->model);
    cJSON_AddStringToObject(o, "system_fingerprint", "redlite-" RL_VERSION);
    cJSON_AddNumberToObject(ch, "index", 0);
    chat_buf_puts(&s->text, "");
    if (s->chat) {
        cJSON *m = cJSON_AddObjectToObject(ch, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        if (s->n_calls && s->text.n == 0) cJSON_AddNullToObject(m, "content");
        else cJSON_AddStringToObject(m, "content", s->text.p ? s->text.p : "");
        if (s->reasoning.n) {
            chat_buf_puts(&s->reasoning, "");
            cJSON_AddStringToObject(m, "reasoning_content", s->reasoning.p);
        }
        if (s->calls) {
            cJSON_AddItemToObject(m, "tool_calls", s->calls);
            s->calls = NULL;
        }
    } else {
        chat_buf t = {0};
        if (s->echo) chat_buf_puts(&t, s->echo);
        chat_buf_put(&t, s->text.p ? s->text.p : "", s->text.n);
        chat_buf_puts(&t, "");
        cJSON_AddStringToObject(ch, "text", t.p ? t.p : "");
        chat_buf_free(&t);
    }
    add_logprobs(s, ch);
    cJSON_AddStringToObject(ch, "finish_reason", fin);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), ch);
    cJSON_AddItemToObject(o, "usage", usage_obj(r));
    srv_job_body_json(j, 200, o);
}

static const srv_api CHAT_API = {"chat",   api_out_start, api_out_text, oai_finish,
                                 oai_free, oai_open,      oai_logprobs};
static const srv_api COMPL_API = {"completions", api_out_start, api_out_text, oai_finish,
                                  oai_free,      oai_open,      NULL};
static const api_out_ops OAI_OUT = {oai_reasoning,    on_parser_text, on_parser_call, oai_open,
                                    api_openai_error, "server_error", "server_error", oai_stream_error};

/* Fields both endpoints share, checked here; the rest is per endpoint. */
static int common_fields(const cJSON *b, const srv_info *in, srv_request *rq, oai_st *s, srv_error *e) {
    const char *model = NULL;
    if (srv_get_str(b, "model", &model, e) < 0) return -1;
    if (!(s->model = srv_strdup(model ? model : in->model_id)))
        return srv_fail(e, 500, "server_error", NULL, "out of memory");
    s->created = (long)time(NULL);
    if (srv_get_bool(b, "stream", &s->out.stream, e) < 0) return -1;
    rq->stream = s->out.stream;
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(b, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so))
            return srv_fail(e, 400, NULL, "stream_options", "'stream_options' must be an object");
        if (srv_get_bool(so, "include_usage", &s->include_usage, e) < 0) return -1;
    }
    long long n = 1;
    if (srv_get_int(b, "n", 1, 1, &n, e) < 0)
        return srv_fail(e, 400, NULL, "n", "'n' must be 1: this server returns one choice");
    if (oai_logprob_fields(b, in, s, rq, e)) return -1;
    const cJSON *lb = cJSON_GetObjectItemCaseSensitive(b, "logit_bias");
    if (lb && !cJSON_IsNull(lb) && (!cJSON_IsObject(lb) || lb->child))
        return srv_fail(e, 400, NULL, "logit_bias", "'logit_bias' is not supported by this server");
    if (srv_parse_sampling(b, in, &rq->sp, e)) return -1;
    rq->n_predict = in->max_tokens;
    long long mt;
    int r = srv_get_int(b, "max_completion_tokens", 1, 1LL << 40, &mt, e);
    if (r < 0) return -1;
    if (!r && (r = srv_get_int(b, "max_tokens", 1, 1LL << 40, &mt, e)) < 0) return -1;
    if (r) rq->n_predict = mt;
    if (api_openai_stops(cJSON_GetObjectItemCaseSensitive(b, "stop"), "stop", rq, e)) return -1;
    srv_new_id(s->id, sizeof s->id, s->chat ? "chatcmpl-" : "cmpl-");
    return 0;
}

int api_openai_chat(const srv_info *in, const cJSON *b, srv_request *rq, srv_reply *rep, srv_error *e) {
    static const char *const known[] = {"model",
                                        "messages",
                                        "stream",
                                        "stream_options",
                                        "max_tokens",
                                        "max_completion_tokens",
                                        "temperature",
                                        "top_p",
                                        "top_k",
                                        "min_p",
                                        "presence_penalty",
                                        "frequency_penalty",
                                        "repetition_penalty",
                                        "seed",
                                        "stop",
                                        "tools",
                                        "tool_choice",
                                        "parallel_tool_calls",
                                        "response_format",
                                        "n",
                                        "user",
                                        "logprobs",
                                        "top_logprobs",
                                        "logit_bias",
                                        "metadata",
                                        "store",
                                        "service_tier",
                                        "reasoning_effort",
                                        "chat_template_kwargs",
                                        "cache_prompt",
                                        "prediction",
                                        "modalities",
                                        "audio",
                                        "web_search_options",
                                        "prompt_cache_key",
                                        "safety_identifier",
                                        "verbosity",
                                        "functions",
                                        "function_call",
                                        NULL};
    if (srv_check_fields(in, b, known, NULL, e)) return -1;
    oai_st *s = calloc(1, sizeof *s);
    if (!s) return srv_fail(e, 500, "server_error", NULL, "out of memory");
    s->chat = true;
    api_out_init(&s->out, &OAI_OUT);
    rq->api = &CHAT_API;
    rq->st = s;
    if (common_fields(b, in, rq, s, e)) return -1;
    int think = -1;
    const cJSON *kw = cJSON_GetObjectItemCaseSensitive(b, "chat_template_kwargs");
    if (kw && !cJSON_IsNull(kw)) {
        if (!cJSON_IsObject(kw))
            return srv_fail(e, 400, NULL, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
        bool et;
        int r = srv_get_bool(kw, "enable_thinking", &et, e);
        if (r < 0) return -1;
        if (r) think = et;
    }
    chat_conv conv;
    chat_conv_init(&conv);
    int rc = -1;
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(b, "messages");
    if (!msgs) {
        srv_fail(e, 400, NULL, "messages", "'messages' is required");
        goto out;
    }
    if (load_messages(msgs, &conv, e)) goto out;
    if (api_openai_tools(cJSON_GetObjectItemCaseSensitive(b, "tools"),
                         cJSON_GetObjectItemCaseSensitive(b, "tool_choice"), &conv, e))
        goto out;
    if (srv_render_prompt(in, &conv, think, rq, e)) goto out;
    if (api_out_ready(&s->out, rq->think, &conv)) {
        srv_fail(e, 500, "server_error", NULL, "out of memory");
        goto out;
    }
    if (oai_constrain(in, b, s, rq, e)) goto out;
    rc = 1;
out:
    chat_conv_free(&conv);
    return rc;
}

int api_openai_completions(const srv_info *in, const cJSON *b, srv_request *rq, srv_reply *rep,
                           srv_error *e) {
    static const char *const known[] = {"model",
                                        "prompt",
                                        "stream",
                                        "stream_options",
                                        "max_tokens",
                                        "temperature",
                                        "top_p",
                                        "top_k",
                                        "min_p",
                                        "presence_penalty",
                                        "frequency_penalty",
                                        "repetition_penalty",
                                        "seed",
                                        "stop",
                                        "n",
                                        "best_of",
                                        "user",
                                        "logprobs",
                                        "logit_bias",
                                        "echo",
                                        "suffix",
                                        "cache_prompt",
                                        NULL};
    if (srv_check_fields(in, b, known, NULL, e)) return -1;
    oai_st *s = calloc(1, sizeof *s);
    if (!s) return srv_fail(e, 500, "server_error", NULL, "out of memory");
    rq->api = &COMPL_API;
    rq->st = s;
    api_out_init(&s->out, &OAI_OUT);
    long long best_of = 1;
    if (srv_get_int(b, "best_of", 1, 1, &best_of, e) < 0) return -1;
    const char *suffix = NULL;
    if (srv_get_str(b, "suffix", &suffix, e) < 0) return -1;
    if (suffix && *suffix)
        return srv_fail(e, 400, NULL, "suffix", "'suffix' (fill-in-the-middle) is not supported yet");
    /* the legacy API's default length is 16 tokens */
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(b, "max_tokens");
    if (common_fields(b, in, rq, s, e)) return -1;
    if (!mt || cJSON_IsNull(mt)) rq->n_predict = 16;
    bool echo = false;
    if (srv_get_bool(b, "echo", &echo, e) < 0) return -1;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(b, "prompt");
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && cJSON_IsString(p->child)) p = p->child;
    if (cJSON_IsString(p)) {
        if (echo && !(s->echo = srv_strdup(p->valuestring)))
            return srv_fail(e, 500, "server_error", NULL, "out of memory");
        if (!srv_tokenize_prompt(in, p->valuestring, strlen(p->valuestring), NULL, 0, rq, e)) return 1;
        if (!strcmp(e->code, "context_length_exceeded")) snprintf(e->param, sizeof e->param, "prompt");
        return -1;
    }
    if (cJSON_IsArray(p) && p->child && cJSON_IsNumber(p->child)) {
        const cJSON *t;
        int32_t nv = tokenizer_n_vocab(in->tok);
        cJSON_ArrayForEach(t, p) {
            if (!cJSON_IsNumber(t) || t->valuedouble < 0 || t->valuedouble >= nv ||
                t->valuedouble != (int32_t)t->valuedouble)
                return srv_fail(e, 400, NULL, "prompt", "'prompt' token ids must be integers in [0, %d)", nv);
            if (tok_ids_push(&rq->prompt, (int32_t)t->valuedouble))
                return srv_fail(e, 500, "server_error", NULL, "out of memory");
        }
        if (srv_check_context(in, (long long)rq->prompt.n, "prompt", e)) return -1;
        if (echo) {
            char *t2 = NULL;
            size_t n2;
            if (tokenizer_decode(in->tok, rq->prompt.ids, rq->prompt.n, TOK_DECODE_REPLACE, &t2, &n2))
                return srv_fail(e, 500, "server_error", NULL, "out of memory");
            s->echo = t2;
        }
        return 1;
    }
    return srv_fail(e, 400, NULL, "prompt",
                    "'prompt' must be a string, a one-string array or an array of token ids");
}
