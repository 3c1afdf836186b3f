/* api_grammar.h — structured outputs for the API modules: the request fields that constrain the
 * output (OpenAI response_format, Responses text.format, tool_choice required / named, Anthropic
 * tool_choice any / tool, strict tool schemas) turned into the request's grammar
 * (srv_request.grammar, text/grammar.h), and log-probabilities in the OpenAI format.
 *
 * The grammar is built after the prompt is rendered: when the prompt opened a <think> block
 * (rq->think == 2) the output must close it first ("...</think>" and up to two newlines), when
 * the model may open one (rq->think == 1) an optional "<think>...</think>" comes first; then the
 * JSON value or the tool call. See docs/SERVER.md "Structured outputs". */
#ifndef RL_API_GRAMMAR_H
#define RL_API_GRAMMAR_H

#include <cjson/cJSON.h>

#include "serve/server.h"

/* response_format (chat) / text.format (Responses: `flat`, the schema's fields sit in the format
 * object itself). 0: no constraint (absent, null or "text"), 1: rq->grammar set, -1: e (400)
 * names the field and, for a schema, the unsupported keyword. `param`: the field's name. */
int api_grammar_format(const srv_info *in, const cJSON *fmt, bool flat, const char *param, srv_request *rq,
                       srv_error *e);

/* A forced tool call: `tools` the conversation's chat-form tools (may be NULL), `req_tools` the
 * request's own tools array (Responses / Anthropic: their "strict": true marks are read from
 * it; NULL for chat, whose function.strict is in `tools`), `name` the one tool to call or NULL for
 * any. 1 (rq->grammar set) or -1 (e: 400, e.g. the name is not a declared tool). */
int api_grammar_tool_call(const srv_info *in, const cJSON *tools, const cJSON *req_tools, const char *name,
                          srv_request *rq, srv_error *e);

/* OpenAI tool_choice (chat and Responses): 0 no forcing (absent, "auto", "none"), 1 forced
 * ("required" -> *name NULL; {"type": "function", "function": {"name"}} or {"type": "function",
 * "name"} -> *name), -1 bad (e). */
int api_grammar_openai_choice(const cJSON *tool_choice, const char **name, srv_error *e);
/* Anthropic tool_choice: {"type": "any"} -> 1 (*name NULL), {"type": "tool", "name"} -> 1,
 * auto / none / absent -> 0, -1 bad (e). */
int api_grammar_anthropic_choice(const cJSON *tool_choice, const char **name, srv_error *e);

/* One OpenAI logprobs "content" entry: {"token", "logprob", "bytes", "top_logprobs": [...]}. */
cJSON *api_grammar_logprob_entry(const tokenizer *tok, const sampler_logprobs *lp, int n_top);

#endif
