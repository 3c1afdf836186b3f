/* api_out.h — the output side the API modules share (api_openai.c, api_responses.c,
 * api_anthropic.c): the job being answered, the stream flags, the <think> split (api_think.h),
 * the tool-call parser, and the one sequence that ends an answer cut short (an engine error or a
 * cancel) — each API keeps its own wire format through api_out_ops.
 *
 * An API's request state begins with an api_out (its first member, checked by a static assert
 * there), so api_out_start / api_out_text stand in srv_api directly and every callback in
 * api_out_ops gets the API's own state as its first argument. */
#ifndef RL_API_OUT_H
#define RL_API_OUT_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "serve/api_think.h"
#include "serve/server.h"
#include "text/chat.h"

/* What differs per API (a static const table each). */
typedef struct {
    srv_text_fn reasoning; /* text inside <think> (reasoning_content, thinking blocks, ...) */
    srv_text_fn text;      /* answer text outside tool calls */
    void (*call)(void *st, const char *name, const char *args_json); /* a parsed tool call */
    void (*open)(srv_job *j, void *st, int n_prompt);                /* srv_api.open */
    cJSON *(*error_json)(const srv_error *e);                        /* the API's error object */
    const char *error_type, *cancel_type; /* srv_error.type of a failed / a cancelled answer */
    /* end an opened stream with e (an error event, response.failed, ...); r: what ran */
    void (*stream_error)(void *st, const srv_result *r, const srv_error *e);
} api_out_ops;

typedef struct {
    const api_out_ops *ops;
    srv_job *j;          /* valid during hooks */
    bool stream;         /* the request asked for a stream */
    bool started;        /* the opening events were sent (or, not streaming, the job started) */
    srv_think think;     /* <think> blocks -> ops->reasoning, the rest -> content */
    cJSON *tools;        /* the request's tools (owned, for the parser); NULL: no parsing */
    chat_parser *parser; /* tool calls -> ops->call, text -> ops->text; NULL without tools */
} api_out;

/* Set up o (the first member of the API's state): no <think> split, no parser yet. */
void api_out_init(api_out *o, const api_out_ops *ops);
/* After the prompt is rendered: the <think> mode the template chose (srv_request.think), and
 * the conversation's tools (taken from conv, which then holds none) for a tool-call parser.
 * 0, or -1 out of memory. */
int api_out_ready(api_out *o, int think_mode, chat_conv *conv);
void api_out_free(api_out *o);

/* The start of every srv_api.open: the answer counts as started (a cut one now ends the
 * stream rather than answering 5xx). true when the API sends its opening events (streaming). */
bool api_out_open(api_out *o, srv_job *j);
/* srv_api.start: open the answer now unless a stream opened it when it was accepted. */
void api_out_start(srv_job *j, void *st, int n_prompt, int n_reused);
/* srv_api.text: generated text through the <think> split (and the parser). 0 */
int api_out_text(srv_job *j, void *st, const char *t, size_t n);
/* The start of every srv_api.finish: flush the <think> split and the parser (a call whose
 * closing tag was not generated is text when the answer was cut). false: the answer completed
 * (end of generation, a stop, the length or the context): the API writes its last events or
 * its body. true: it was cut (SRV_ERROR: 500, SRV_CANCELLED: 503) and is answered here, never
 * as finished: the API's error body when nothing was sent yet, else ops->stream_error. */
bool api_out_finish(void *st, srv_job *j, const srv_result *r);

#endif
