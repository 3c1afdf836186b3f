/* api_anthropic.h — the Anthropic Messages API (/v1/messages, /v1/messages/count_tokens) on the
 * server core (server.h), as Claude Code uses it: system prompts (string or text blocks),
 * text / tool_use / tool_result / thinking content blocks, tools with input_schema,
 * stop_sequences, streaming events (message_start, content_block_start/delta/stop with
 * text_delta and input_json_delta, message_delta, message_stop) and errors shaped
 * {"type": "error", "error": {"type", "message"}}. */
#ifndef RL_API_ANTHROPIC_H
#define RL_API_ANTHROPIC_H

#include "serve/server.h"

int api_anthropic_messages(const srv_info *in, const cJSON *body, srv_request *rq, srv_reply *rep,
                           srv_error *e);
int api_anthropic_count_tokens(const srv_info *in, const cJSON *body, srv_request *rq, srv_reply *rep,
                               srv_error *e);
cJSON *api_anthropic_error(const srv_error *e);
#endif
