/* api_responses.h — the OpenAI Responses API (POST /v1/responses) as Codex CLI uses it, on the
 * server core (server.h): `input` as a string or items (messages with input_text/output_text
 * parts, function_call, function_call_output; reasoning items ignored), `instructions`,
 * function tools (other tool types such as web_search are ignored), max_output_tokens, and the
 * streamed events (response.created, response.in_progress, response.output_item.added,
 * response.content_part.added, response.output_text.delta/done, response.content_part.done,
 * response.function_call_arguments.delta/done, response.output_item.done, response.completed
 * or response.incomplete). Stateless: previous_response_id is refused with a clear 400. */
#ifndef RL_API_RESPONSES_H
#define RL_API_RESPONSES_H

#include "serve/server.h"

int api_responses_create(const srv_info *in, const cJSON *body, srv_request *rq, srv_reply *rep,
                         srv_error *e);
#endif
