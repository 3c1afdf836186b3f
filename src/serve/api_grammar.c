/* api_grammar.c — structured outputs and logprobs for the API modules (contract in api_grammar.h). */
#include "serve/api_grammar.h"

#include <string.h>

#include "base/common.h"
#include "text/jsonschema.h"

/* the output's <think> part (see the header), then body */
static int wrap_think(grammar *g, int body, int think) {
    if (think != 1 && think != 2) return body;
    const char *ws[3] = {"", "\n", "\n\n"};
    size_t wl[3] = {0, 1, 2};
    int w = grammar_literals(g, 3, ws, wl, NULL), until = grammar_until(g, "</think>");
    if (w < 0 || until < 0) return -1;
    if (think == 2) {
        int seq[3] = {until, w, body};
        return grammar_seq(g, 3, seq);
    }
    int open = grammar_literal(g, "<think>");
    if (open < 0) return -1;
    int seq[4] = {open, until, w, body};
    int alts[2] = {grammar_seq(g, 4, seq), body};
    return alts[0] < 0 ? -1 : grammar_anyof(g, 2, alts);
}

/* finish g with root (wrapped for thinking) and hand it to the request */
static int install(grammar *g, int body, srv_request *rq, const char *param, srv_error *e) {
    int root = body < 0 ? -1 : wrap_think(g, body, rq->think);
    if (root < 0 || grammar_finish(g, root)) {
        srv_fail(e, 400, NULL, param, "%s: %s", param, rl_lasterr());
        grammar_free(g);
        return -1;
    }
    grammar_free(rq->grammar);
    rq->grammar = g;
    return 1;
}

int api_grammar_format(const srv_info *in, const cJSON *fmt, bool flat, const char *param, srv_request *rq,
                       srv_error *e) {
    (void)in;
    if (!fmt || cJSON_IsNull(fmt)) return 0;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(fmt, "type");
    if (!cJSON_IsObject(fmt) || !cJSON_IsString(t))
        return srv_fail(e, 400, NULL, param,
                        "'%s' must be an object with a 'type' (text, json_object or json_schema)", param);
    if (!strcmp(t->valuestring, "text")) return 0;
    bool schema_mode = !strcmp(t->valuestring, "json_schema");
    if (!schema_mode && strcmp(t->valuestring, "json_object"))
        return srv_fail(e, 400, NULL, param,
                        "%s type '%s' is not supported: use text, json_object or json_schema", param,
                        t->valuestring);
    const cJSON *schema = NULL;
    if (schema_mode) {
        const cJSON *js = flat ? fmt : cJSON_GetObjectItemCaseSensitive(fmt, "json_schema");
        if (!cJSON_IsObject(js))
            return srv_fail(e, 400, NULL, param,
                            "%s: type json_schema needs a 'json_schema' object with the 'schema'", param);
        schema = cJSON_GetObjectItemCaseSensitive(js, "schema");
        if (schema && !cJSON_IsObject(schema) && !cJSON_IsBool(schema))
            return srv_fail(e, 400, NULL, param, "%s: 'schema' must be a JSON Schema object", param);
    }
    grammar *g = grammar_new();
    if (!g) return srv_fail(e, 500, "server_error", NULL, "out of memory");
    int body;
    if (schema) {
        char err[480];
        body = jsonschema_compile(g, schema, err, sizeof err);
        if (body < 0) {
            grammar_free(g);
            return srv_fail(e, 400, NULL, param, "%s schema: %s", param, err);
        }
    } else {
        body = grammar_any_object(g);
    }
    return install(g, body, rq, param, e);
}

int api_grammar_tool_call(const srv_info *in, const cJSON *tools, const cJSON *req_tools, const char *name,
                          srv_request *rq, srv_error *e) {
    (void)in;
    if (!tools || !cJSON_GetArraySize(tools))
        return srv_fail(e, 400, NULL, "tool_choice",
                        "tool_choice asks for a tool call but the request declares no function tools");
    cJSON *dup = cJSON_Duplicate(tools, 1);
    grammar *g = grammar_new();
    if (!dup || !g) {
        cJSON_Delete(dup);
        grammar_free(g);
        return srv_fail(e, 500, "server_error", NULL, "out of memory");
    }
    /* strict marks of flat tools (Responses, Anthropic) onto the chat-form copy */
    const cJSON *rt;
    cJSON_ArrayForEach(rt, req_tools) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(rt, "name");
        if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rt, "strict")) || !cJSON_IsString(nm)) continue;
        cJSON *t;
        cJSON_ArrayForEach(t, dup) {
            cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
            const cJSON *fnm = cJSON_GetObjectItemCaseSensitive(fn, "name");
            if (cJSON_IsString(fnm) && !strcmp(fnm->valuestring, nm->valuestring)) {
                cJSON_DeleteItemFromObjectCaseSensitive(fn, "strict");
                cJSON_AddTrueToObject(fn, "strict");
            }
        }
    }
    char err[480];
    int body = jsonschema_tool_call(g, dup, name, false, err, sizeof err);
    cJSON_Delete(dup);
    if (body < 0) {
        grammar_free(g);
        return srv_fail(e, 400, NULL, strstr(err, "tool_choice") ? "tool_choice" : "tools", "%s", err);
    }
    return install(g, body, rq, "tool_choice", e);
}

int api_grammar_openai_choice(const cJSON *tc, const char **name, srv_error *e) {
    *name = NULL;
    if (!tc || cJSON_IsNull(tc)) return 0;
    if (cJSON_IsString(tc)) return !strcmp(tc->valuestring, "required");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(tc, "type");
    if (!cJSON_IsObject(tc) || !cJSON_IsString(type))
        return srv_fail(e, 400, NULL, "tool_choice",
                        "'tool_choice' must be none, auto, required or {\"type\": \"function\", ...}");
    if (!strcmp(type->valuestring, "auto") || !strcmp(type->valuestring, "none")) return 0;
    if (strcmp(type->valuestring, "function"))
        return srv_fail(e, 400, NULL, "tool_choice", "tool_choice type '%s' is not supported (use function)",
                        type->valuestring);
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(fn ? fn : tc, "name");
    if (!cJSON_IsString(nm) || !*nm->valuestring)
        return srv_fail(e, 400, NULL, "tool_choice",
                        "tool_choice {\"type\": \"function\"} needs the function's 'name'");
    *name = nm->valuestring;
    return 1;
}

int api_grammar_anthropic_choice(const cJSON *tc, const char **name, srv_error *e) {
    *name = NULL;
    if (!tc || cJSON_IsNull(tc)) return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(tc, "type");
    if (!cJSON_IsObject(tc) || !cJSON_IsString(type))
        return srv_fail(e, 400, NULL, "tool_choice",
                        "'tool_choice' must be an object with a 'type' (auto, any, tool, none)");
    if (!strcmp(type->valuestring, "any")) return 1;
    if (strcmp(type->valuestring, "tool")) return 0;
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(tc, "name");
    if (!cJSON_IsString(nm) || !*nm->valuestring)
        return srv_fail(e, 400, NULL, "tool_choice",
                        "tool_choice {\"type\": \"tool\"} needs the tool's 'name'");
    *name = nm->valuestring;
    return 1;
}

/* {"token", "logprob", "bytes"}: the token text as valid UTF-8 (ill-formed bytes as U+FFFD; the
 * exact bytes are in "bytes") */
static cJSON *token_obj(const tokenizer *tok, int32_t id, float lp) {
    size_t n = 0;
    const char *p = tokenizer_token_piece(tok, id, &n);
    if (!p) p = "", n = 0;
    chat_buf t = {0};
    cJSON *o = cJSON_CreateObject(), *bytes = cJSON_CreateArray();
    for (size_t i = 0; i < n;) {
        size_t k = tok_utf8_len((const uint8_t *)p + i, n - i);
        if (k) chat_buf_put(&t, p + i, k), i += k;
        else chat_buf_puts(&t, "\xEF\xBF\xBD"), i++;
    }
    chat_buf_puts(&t, "");
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(bytes, cJSON_CreateNumber((unsigned char)p[i]));
    cJSON_AddStringToObject(o, "token", t.p ? t.p : "");
    cJSON_AddNumberToObject(o, "logprob", lp);
    cJSON_AddItemToObject(o, "bytes", bytes);
    chat_buf_free(&t);
    return o;
}

cJSON *api_grammar_logprob_entry(const tokenizer *tok, const sampler_logprobs *lp, int n_top) {
    cJSON *o = token_obj(tok, lp->token, lp->logprob), *top = cJSON_AddArrayToObject(o, "top_logprobs");
    for (int i = 0; i < n_top && i < lp->n_top; i++)
        cJSON_AddItemToArray(top, token_obj(tok, lp->top_id[i], lp->top_logprob[i]));
    return o;
}
