/* api_responses.c — see api_responses.h. The whole response object is built in both modes
 * (streaming sends it in response.created / response.completed); items are appended to
 * `output` as they complete. */
#include "serve/api_responses.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve/api_openai.h"
#include "base/common.h"
#include "serve/api_grammar.h"
#include "serve/api_out.h"

#define OOM(e) srv_fail(e, 500, "server_error", NULL, "out of memory")

/* ---- input items -> conversation ------------------------------------------------------------ */
static int item_text(const cJSON *content, const char *where, chat_buf *out, srv_error *e) {
    if (cJSON_IsString(content)) {
        chat_buf_puts(out, content->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(content))
        return srv_fail(e, 400, NULL, "input", "%s.content must be a string or an array of parts", where);
    const cJSON *p;
    cJSON_ArrayForEach(p, content) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(p, "text");
        const char *t = cJSON_IsString(type) ? type->valuestring : "";
        if ((strcmp(t, "input_text") && strcmp(t, "output_text") && strcmp(t, "text")) ||
            !cJSON_IsString(text))
            return srv_fail(e, 400, NULL, "input", "%s: parts of type '%s' are not supported (text only)",
                            where, t);
        chat_buf_puts(out, text->valuestring);
    }
    return 0;
}

static int add_text_msg(chat_conv *c, chat_role role, chat_buf *t, srv_error *e) {
    chat_buf_puts(t, "");
    int mi = chat_conv_add(c, role, NULL);
    if (mi < 0 || t->oom || !(c->msgs[mi].content = chat_buf_take(t, NULL))) {
        chat_buf_free(t);
        return OOM(e);
    }
    return mi;
}

static int load_input(const cJSON *b, chat_conv *c, srv_error *e) {
    const cJSON *ins = cJSON_GetObjectItemCaseSensitive(b, "instructions");
    if (ins && !cJSON_IsNull(ins)) {
        if (!cJSON_IsString(ins))
            return srv_fail(e, 400, NULL, "instructions", "'instructions' must be a string");
        chat_buf t = {0};
        chat_buf_puts(&t, ins->valuestring);
        if (add_text_msg(c, CHAT_SYSTEM, &t, e) < 0) return -1;
    }
    const cJSON *input = cJSON_GetObjectItemCaseSensitive(b, "input");
    if (cJSON_IsString(input)) {
        chat_buf t = {0};
        chat_buf_puts(&t, input->valuestring);
        return add_text_msg(c, CHAT_USER, &t, e) < 0 ? -1 : 0;
    }
    if (!cJSON_IsArray(input))
        return srv_fail(e, 400, NULL, "input", "'input' is required: a string or an array of items");
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, input) {
        char where[32];
        snprintf(where, sizeof where, "input[%d]", i++);
        if (!cJSON_IsObject(it)) return srv_fail(e, 400, NULL, "input", "%s must be an object", where);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(it, "type");
        const char *t = cJSON_IsString(type) ? type->valuestring : "message";
        if (!strcmp(t, "message")) {
            const cJSON *role = cJSON_GetObjectItemCaseSensitive(it, "role");
            const char *r = cJSON_IsString(role) ? role->valuestring : "";
            chat_role cr;
            if (!strcmp(r, "user")) cr = CHAT_USER;
            else if (!strcmp(r, "assistant")) cr = CHAT_ASSISTANT;
            else if (!strcmp(r, "system") || !strcmp(r, "developer")) cr = CHAT_SYSTEM;
            else
                return srv_fail(e, 400, NULL, "input", "%s.role must be user, assistant, system or developer",
                                where);
            chat_buf txt = {0};
            if (item_text(cJSON_GetObjectItemCaseSensitive(it, "content"), where, &txt, e)) {
                chat_buf_free(&txt);
                return -1;
            }
            if (add_text_msg(c, cr, &txt, e) < 0) return -1;
        } else if (!strcmp(t, "function_call")) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "name");
            const cJSON *args = cJSON_GetObjectItemCaseSensitive(it, "arguments");
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "call_id");
            if (!cJSON_IsString(name) || (args && !cJSON_IsString(args)))
                return srv_fail(e, 400, NULL, "input",
                                "%s: a function_call needs a string 'name' and string 'arguments'", where);
            int mi = c->n - 1;
            if (mi < 0 || c->msgs[mi].role != CHAT_ASSISTANT) {
                chat_buf empty = {0};
                if ((mi = add_text_msg(c, CHAT_ASSISTANT, &empty, e)) < 0) return -1;
            }
            if (chat_conv_add_call(c, mi, name->valuestring, args ? args->valuestring : "{}",
                                   cJSON_IsString(id) ? id->valuestring : NULL))
                return OOM(e);
        } else if (!strcmp(t, "function_call_output")) {
            const cJSON *out = cJSON_GetObjectItemCaseSensitive(it, "output");
            chat_buf txt = {0};
            if (item_text(out, where, &txt, e)) {
                chat_buf_free(&txt);
                return -1;
            }
            int mi = add_text_msg(c, CHAT_TOOL, &txt, e);
            if (mi < 0) return -1;
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "call_id");
            if (cJSON_IsString(id) && !(c->msgs[mi].tool_call_id = srv_strdup(id->valuestring)))
                return OOM(e);
        } else if (!strcmp(t, "reasoning")) {
            continue; /* our own reasoning is not re-sent to the template */
        } else {
            return srv_fail(e, 400, NULL, "input", "%s: items of type '%s' are not supported", where, t);
        }
    }
    return 0;
}

/* Responses tools are flat ({"type":"function","name",...}); the template wants the chat form. */
static int load_tools(const cJSON *b, chat_conv *c, srv_error *e) {
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(b, "tools");
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(b, "tool_choice");
    if (cJSON_IsString(tc) && !strcmp(tc->valuestring, "none")) return 0;
    if (!tools || cJSON_IsNull(tools)) return 0;
    if (!cJSON_IsArray(tools)) return srv_fail(e, 400, NULL, "tools", "'tools' must be an array");
    cJSON *arr = cJSON_CreateArray();
    const cJSON *t;
    int k = 0;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "function"))
            continue; /* web_search, ...: ignored */
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(t, "parameters");
        const cJSON *desc = cJSON_GetObjectItemCaseSensitive(t, "description");
        if (!cJSON_IsString(name) || !*name->valuestring ||
            (params && !cJSON_IsObject(params) && !cJSON_IsNull(params))) {
            cJSON_Delete(arr);
            return srv_fail(e, 400, NULL, "tools",
                            "tools[%d]: a function tool needs a non-empty 'name' and object 'parameters'", k);
        }
        cJSON *f = cJSON_CreateObject(), *fn;
        cJSON_AddStringToObject(f, "type", "function");
        fn = cJSON_AddObjectToObject(f, "function");
        cJSON_AddStringToObject(fn, "name", name->valuestring);
        if (cJSON_IsString(desc)) cJSON_AddStringToObject(fn, "description", desc->valuestring);
        if (cJSON_IsObject(params)) cJSON_AddItemToObject(fn, "parameters", cJSON_Duplicate(params, 1));
        cJSON_AddItemToArray(arr, f);
        k++;
    }
    if (k) c->tools = arr;
    else cJSON_Delete(arr);
    return 0;
}

/* ---- output ---------------------------------------------------------------------------------- */
typedef struct {
    api_out out; /* first (api_out.h): the job, stream flags, <think> split and tool-call parser */
    char id[64], msg_id[64];
    char *model;
    long created;
    double temp, top_p;
    cJSON *req_tools; /* the request's tools as sent (echoed in the response object) */
    int seq;          /* sequence_number of events */
    cJSON *output;    /* finished items */
    chat_buf text;    /* the open message's text */
    bool text_open;
    int n_calls;
    chat_buf rtext; /* the open reasoning item's text */
    bool r_open;
    char rs_id[64];
} rsp_st;
_Static_assert(offsetof(rsp_st, out) == 0, "api_out must be the first member (api_out.h)");

static void rsp_free(void *p) {
    rsp_st *s = p;
    api_out_free(&s->out);
    cJSON_Delete(s->req_tools);
    cJSON_Delete(s->output);
    chat_buf_free(&s->text);
    chat_buf_free(&s->rtext);
    free(s->model);
    free(s);
}

static void event(rsp_st *s, const char *type, cJSON *o) {
    if (!s->out.stream) {
        cJSON_Delete(o);
        return;
    }
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "type", type);
    cJSON_AddNumberToObject(e, "sequence_number", s->seq++);
    cJSON *c = o ? o->child : NULL;
    while (c) { /* move members of o into e */
        cJSON *next = c->next;
        cJSON_AddItemToObject(e, c->string, cJSON_DetachItemViaPointer(o, c));
        c = next;
    }
    cJSON_Delete(o);
    srv_job_sse(s->out.j, type, e);
}

static cJSON *response_obj(rsp_st *s, const char *status, const srv_result *r) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", s->id);
    cJSON_AddStringToObject(o, "object", "response");
    cJSON_AddNumberToObject(o, "created_at", (double)s->created);
    cJSON_AddStringToObject(o, "status", status);
    cJSON_AddNullToObject(o, "error");
    if (r && (r->reason == SRV_LENGTH || r->reason == SRV_CONTEXT))
        cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "incomplete_details"), "reason",
                                "max_output_tokens");
    else cJSON_AddNullToObject(o, "incomplete_details");
    cJSON_AddNullToObject(o, "instructions");
    cJSON_AddStringToObject(o, "model", s->model);
    cJSON_AddItemToObject(o, "output", r ? cJSON_Duplicate(s->output, 1) : cJSON_CreateArray());
    cJSON_AddBoolToObject(o, "parallel_tool_calls", true);
    cJSON_AddNumberToObject(o, "temperature", s->temp);
    cJSON_AddNumberToObject(o, "top_p", s->top_p);
    cJSON_AddStringToObject(o, "tool_choice", "auto");
    cJSON_AddItemToObject(o, "tools", s->req_tools ? cJSON_Duplicate(s->req_tools, 1) : cJSON_CreateArray());
    cJSON_AddStringToObject(cJSON_AddObjectToObject(cJSON_AddObjectToObject(o, "text"), "format"), "type",
                            "text");
    if (r) {
        cJSON *u = cJSON_AddObjectToObject(o, "usage");
        cJSON_AddNumberToObject(u, "input_tokens", r->n_prompt);
        cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "input_tokens_details"), "cached_tokens",
                                r->n_reused);
        cJSON_AddNumberToObject(u, "output_tokens", r->n_gen);
        cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "output_tokens_details"), "reasoning_tokens", 0);
        cJSON_AddNumberToObject(u, "total_tokens", r->n_prompt + r->n_gen);
    } else {
        cJSON_AddNullToObject(o, "usage");
    }
    return o;
}

static cJSON *text_part(const char *t) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", "output_text");
    cJSON_AddStringToObject(p, "text", t);
    cJSON_AddArrayToObject(p, "annotations");
    return p;
}

static cJSON *msg_item(rsp_st *s, const char *status, const char *text) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", s->msg_id);
    cJSON_AddStringToObject(m, "type", "message");
    cJSON_AddStringToObject(m, "status", status);
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON *c = cJSON_AddArrayToObject(m, "content");
    if (text) cJSON_AddItemToArray(c, text_part(text));
    return m;
}

static cJSON *idx_obj(rsp_st *s, bool content) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "item_id", s->msg_id);
    cJSON_AddNumberToObject(o, "output_index", cJSON_GetArraySize(s->output));
    if (content) cJSON_AddNumberToObject(o, "content_index", 0);
    return o;
}

static cJSON *reasoning_item(rsp_st *s, const char *text) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", s->rs_id);
    cJSON_AddStringToObject(m, "type", "reasoning");
    cJSON_AddArrayToObject(m, "summary");
    cJSON *c = cJSON_AddArrayToObject(m, "content");
    if (text) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "type", "reasoning_text");
        cJSON_AddStringToObject(p, "text", text);
        cJSON_AddItemToArray(c, p);
    }
    return m;
}

static void close_reasoning(rsp_st *s) {
    if (!s->r_open) return;
    chat_buf_puts(&s->rtext, "");
    const char *t = s->rtext.p ? s->rtext.p : "";
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "item_id", s->rs_id);
    cJSON_AddNumberToObject(o, "output_index", cJSON_GetArraySize(s->output));
    cJSON_AddNumberToObject(o, "content_index", 0);
    cJSON_AddStringToObject(o, "text", t);
    event(s, "response.reasoning_text.done", o);
    o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "output_index", cJSON_GetArraySize(s->output));
    cJSON_AddItemToObject(o, "item", reasoning_item(s, t));
    event(s, "response.output_item.done", o);
    cJSON_AddItemToArray(s->output, reasoning_item(s, t));
    s->rtext.n = 0;
    s->r_open = false;
}

static void on_reasoning(void *ud, const char *t, size_t n) {
    rsp_st *s = ud;
    if (!s->r_open) {
        s->r_open = true;
        srv_new_id(s->rs_id, sizeof s->rs_id, "rs_");
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "output_index", cJSON_GetArraySize(s->output));
        cJSON_AddItemToObject(o, "item", reasoning_item(s, NULL));
        event(s, "response.output_item.added", o);
    }
    chat_buf_put(&s->rtext, t, n);
    if (s->out.stream) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "item_id", s->rs_id);
        cJSON_AddNumberToObject(o, "output_index", cJSON_GetArraySize(s->output));
        cJSON_AddNumberToObject(o, "content_index", 0);
        char *c = strndup(t, n);
        cJSON_AddStringToObject(o, "delta", c ? c : "");
        free(c);
        event(s, "response.reasoning_text.delta", o);
    }
}

static void close_text(rsp_st *s) {
    close_reasoning(s);
    if (!s->text_open) return;
    chat_buf_puts(&s->text, "");
    const char *t = s->text.p ? s->text.p : "";
    cJSON *o = idx_obj(s, true);
    cJSON_AddStringToObject(o, "text", t);
    event(s, "response.output_text.done", o);
    o = idx_obj(s, true);
    cJSON_AddItemToObject(o, "part", text_part(t));
    event(s, "response.content_part.done", o);
    o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "output_index", cJSON_GetArraySize(s->output));
    cJSON_AddItemToObject(o, "item", msg_item(s, "completed", t));
    event(s, "response.output_item.done", o);
    cJSON_AddItemToArray(s->output, msg_item(s, "completed", t));
    s->text.n = 0;
    s->text_open = false;
}

static void on_text_piece(void *ud, const char *t, size_t n) {
    rsp_st *s = ud;
    if (!n) return;
    close_reasoning(s);
    if (!s->text_open) {
        s->text_open = true;
        srv_new_id(s->msg_id, sizeof s->msg_id, "msg_");
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "output_index", cJSON_GetArraySize(s->output));
        cJSON_AddItemToObject(o, "item", msg_item(s, "in_progress", NULL));
        event(s, "response.output_item.added", o);
        o = idx_obj(s, true);
        cJSON_AddItemToObject(o, "part", text_part(""));
        event(s, "response.content_part.added", o);
    }
    chat_buf_put(&s->text, t, n);
    if (s->out.stream) {
        cJSON *o = idx_obj(s, true);
        char *c = strndup(t, n);
        cJSON_AddStringToObject(o, "delta", c ? c : "");
        free(c);
        cJSON_AddArrayToObject(o, "logprobs");
        event(s, "response.output_text.delta", o);
    }
}

static cJSON *call_item(const char *id, const char *call_id, const char *name, const char *args,
                        const char *status) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "id", id);
    cJSON_AddStringToObject(c, "type", "function_call");
    cJSON_AddStringToObject(c, "status", status);
    cJSON_AddStringToObject(c, "arguments", args);
    cJSON_AddStringToObject(c, "call_id", call_id);
    cJSON_AddStringToObject(c, "name", name);
    return c;
}

static void on_call(void *ud, const char *name, const char *args) {
    rsp_st *s = ud;
    close_text(s);
    char id[48], call_id[48];
    srv_new_id(id, sizeof id, "fc_");
    srv_new_id(call_id, sizeof call_id, "call_");
    s->n_calls++;
    int idx = cJSON_GetArraySize(s->output);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "output_index", idx);
    cJSON_AddItemToObject(o, "item", call_item(id, call_id, name, "", "in_progress"));
    event(s, "response.output_item.added", o);
    o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "item_id", id);
    cJSON_AddNumberToObject(o, "output_index", idx);
    cJSON_AddStringToObject(o, "delta", args);
    event(s, "response.function_call_arguments.delta", o);
    o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "item_id", id);
    cJSON_AddNumberToObject(o, "output_index", idx);
    cJSON_AddStringToObject(o, "arguments", args);
    event(s, "response.function_call_arguments.done", o);
    o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "output_index", idx);
    cJSON_AddItemToObject(o, "item", call_item(id, call_id, name, args, "completed"));
    event(s, "response.output_item.done", o);
    cJSON_AddItemToArray(s->output, call_item(id, call_id, name, args, "completed"));
}

static void rsp_open(srv_job *j, void *st, int n_prompt) {
    rsp_st *s = st;
    if (!api_out_open(&s->out, j)) return;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "response", response_obj(s, "in_progress", NULL));
    event(s, "response.created", o);
    o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "response", response_obj(s, "in_progress", NULL));
    event(s, "response.in_progress", o);
}

/* A cut answer in an opened stream: response.failed (never "completed"; api_out_finish). */
static void rsp_stream_error(void *st, const srv_result *r, const srv_error *e) {
    rsp_st *s = st;
    close_text(s);
    cJSON *resp = response_obj(s, "failed", r), *err = cJSON_CreateObject();
    cJSON_AddStringToObject(err, "code", "server_error");
    cJSON_AddStringToObject(err, "message", e->msg);
    cJSON_ReplaceItemInObjectCaseSensitive(resp, "error", err);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "response", resp);
    event(s, "response.failed", o);
}

static void rsp_finish(srv_job *j, void *st, const srv_result *r) {
    rsp_st *s = st;
    if (api_out_finish(st, j, r)) return;
    close_text(s);
    bool incomplete = r->reason == SRV_LENGTH || r->reason == SRV_CONTEXT;
    const char *status = incomplete ? "incomplete" : "completed";
    if (s->out.stream) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "response", response_obj(s, status, r));
        event(s, incomplete ? "response.incomplete" : "response.completed", o);
        return;
    }
    srv_job_body_json(j, 200, response_obj(s, status, r));
}

static const srv_api RESPONSES_API = {"responses", api_out_start, api_out_text, rsp_finish,
                                      rsp_free,    rsp_open,      NULL};
static const api_out_ops RSP_OUT = {on_reasoning,     on_text_piece,  on_call,        rsp_open,
                                    api_openai_error, "server_error", "server_error", rsp_stream_error};

/* tool_choice required / {"type": "function", "name"} forces a tool call (strict tools: their
 * parameters schema); otherwise text.format json_object / json_schema (api_grammar.h) */
static int rsp_constrain(const srv_info *in, const cJSON *b, const cJSON *tools, srv_request *rq,
                         srv_error *e) {
    const char *name;
    int r = api_grammar_openai_choice(cJSON_GetObjectItemCaseSensitive(b, "tool_choice"), &name, e);
    if (r < 0) return -1;
    if (r)
        return api_grammar_tool_call(in, tools, cJSON_GetObjectItemCaseSensitive(b, "tools"), name, rq, e) < 0
                   ? -1
                   : 0;
    const cJSON *tf = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(b, "text"), "format");
    return api_grammar_format(in, tf, true, "text.format", rq, e) < 0 ? -1 : 0;
}

int api_responses_create(const srv_info *in, const cJSON *b, srv_request *rq, srv_reply *rep, srv_error *e) {
    static const char *const known[] = {"model",
                                        "input",
                                        "instructions",
                                        "tools",
                                        "tool_choice",
                                        "parallel_tool_calls",
                                        "stream",
                                        "store",
                                        "include",
                                        "reasoning",
                                        "max_output_tokens",
                                        "temperature",
                                        "top_p",
                                        "top_k",
                                        "min_p",
                                        "text",
                                        "client_metadata",
                                        "prompt_cache_key",
                                        "metadata",
                                        "user",
                                        "previous_response_id",
                                        "service_tier",
                                        "truncation",
                                        "seed",
                                        "safety_identifier",
                                        "stream_options",
                                        "presence_penalty",
                                        "frequency_penalty",
                                        "background",
                                        "max_tool_calls",
                                        "top_logprobs",
                                        "prompt",
                                        "conversation",
                                        "context_management",
                                        NULL};
    if (srv_check_fields(in, b, known, NULL, e)) return -1;
    const cJSON *prev = cJSON_GetObjectItemCaseSensitive(b, "previous_response_id");
    if (prev && !cJSON_IsNull(prev))
        return srv_fail(
            e, 400, NULL, "previous_response_id",
            "previous_response_id is not supported: this server stores no responses; send the whole "
            "conversation in 'input' (Codex: store = false)");
    rsp_st *s = calloc(1, sizeof *s);
    if (!s) return OOM(e);
    rq->api = &RESPONSES_API;
    rq->st = s;
    api_out_init(&s->out, &RSP_OUT);
    s->output = cJSON_CreateArray();
    s->created = (long)time(NULL);
    srv_new_id(s->id, sizeof s->id, "resp_");
    const char *model = NULL;
    if (srv_get_str(b, "model", &model, e) < 0) return -1;
    if (!(s->model = srv_strdup(model ? model : in->model_id))) return OOM(e);
    if (srv_get_bool(b, "stream", &s->out.stream, e) < 0) return -1;
    rq->stream = s->out.stream;
    if (srv_parse_sampling(b, in, &rq->sp, e)) return -1;
    s->temp = rq->sp.temp;
    s->top_p = rq->sp.top_p;
    rq->n_predict = in->max_tokens;
    long long mt;
    int r = srv_get_int(b, "max_output_tokens", 1, 1LL << 40, &mt, e);
    if (r < 0) return -1;
    if (r) rq->n_predict = mt;
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(b, "tools");
    if (cJSON_IsArray(tools) && !(s->req_tools = cJSON_Duplicate(tools, 1))) return OOM(e);
    chat_conv conv;
    chat_conv_init(&conv);
    int rc = -1;
    if (load_input(b, &conv, e) || load_tools(b, &conv, e)) goto out;
    if (srv_render_prompt(in, &conv, -1, rq, e)) {
        if (!strcmp(e->code, "context_length_exceeded")) snprintf(e->param, sizeof e->param, "input");
        goto out;
    }
    if (api_out_ready(&s->out, rq->think, &conv)) {
        OOM(e);
        goto out;
    }
    if (rsp_constrain(in, b, s->out.tools, rq, e)) goto out;
    rc = 1;
out:
    chat_conv_free(&conv);
    return rc;
}
