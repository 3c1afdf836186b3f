/* api_openai.h — OpenAI Chat Completions (/v1/chat/completions), legacy Completions
 * (/v1/completions), /v1/models and the OpenAI error shape, on the server core (server.h).
 *
 * Handlers run on the HTTP threads: they validate the request (types and ranges give 400 with
 * {"error": {"message", "type", "param", "code"}}; unknown fields are ignored unless
 * --strict-fields), render and tokenise the
 * prompt, and return 1 with a queued request, 0 with a synchronous reply, or -1 with e set. */
#ifndef RL_API_OPENAI_H
#define RL_API_OPENAI_H

#include "serve/server.h"

int api_openai_chat(const srv_info *in, const cJSON *body, srv_request *rq, srv_reply *rep, srv_error *e);
int api_openai_completions(const srv_info *in, const cJSON *body, srv_request *rq, srv_reply *rep,
                           srv_error *e);
int api_openai_models(const srv_info *in, const cJSON *body, srv_request *rq, srv_reply *rep, srv_error *e);
/* GET /v1/models/{id} (body: {"id": ...}, made by the router). */
int api_openai_model(const srv_info *in, const cJSON *body, srv_request *rq, srv_reply *rep, srv_error *e);
/* {"error": {...}} for e. */
cJSON *api_openai_error(const srv_error *e);

/* Shared with the Responses API: OpenAI function tools ({"type":"function","function":{...}})
 * checked and copied into conv->tools; tool_choice "none" drops them. 0 or -1. */
int api_openai_tools(const cJSON *tools, const cJSON *tool_choice, chat_conv *conv, srv_error *e);
/* "stop": a string or an array of strings. 0 or -1. */
int api_openai_stops(const cJSON *stop, const char *name, srv_request *rq, srv_error *e);
#endif
