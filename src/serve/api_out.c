/* api_out.c — see api_out.h. */
#include "serve/api_out.h"

/* <think>'s content: through the tool-call parser when the request has tools. */
static void content(void *ud, const char *t, size_t n) {
    api_out *o = ud;
    if (o->parser) chat_parser_feed(o->parser, t, n);
    else o->ops->text(ud, t, n);
}

void api_out_init(api_out *o, const api_out_ops *ops) {
    o->ops = ops;
    srv_think_init(&o->think, 0, ops->reasoning, content, o);
}

int api_out_ready(api_out *o, int think_mode, chat_conv *conv) {
    srv_think_init(&o->think, think_mode, o->ops->reasoning, content, o);
    if (!conv->tools) return 0;
    o->tools = conv->tools;
    conv->tools = NULL;
    chat_parser_cb cb = {o->ops->text, o->ops->call, o};
    return (o->parser = chat_parser_new(o->tools, &cb)) ? 0 : -1;
}

void api_out_free(api_out *o) {
    chat_parser_free(o->parser);
    cJSON_Delete(o->tools);
    srv_think_free(&o->think);
}

bool api_out_open(api_out *o, srv_job *j) {
    o->j = j;
    o->started = true;
    return o->stream;
}

void api_out_start(srv_job *j, void *st, int n_prompt, int n_reused) {
    api_out *o = st;
    o->j = j;
    if (!o->started) o->ops->open(j, st, n_prompt);
}

int api_out_text(srv_job *j, void *st, const char *t, size_t n) {
    api_out *o = st;
    o->j = j;
    srv_think_feed(&o->think, t, n);
    return 0;
}

bool api_out_finish(void *st, srv_job *j, const srv_result *r) {
    api_out *o = st;
    o->j = j;
    srv_think_finish(&o->think);
    if (o->parser) chat_parser_finish_cut(o->parser, r->reason != SRV_EOG);
    if (r->reason != SRV_ERROR && r->reason != SRV_CANCELLED) return false;
    /* a cut answer is never reported as finished: a 5xx to retry, or an error in the stream */
    srv_error e;
    if (r->reason == SRV_ERROR)
        srv_fail(&e, 500, o->ops->error_type, NULL, "generation failed: %s", r->error);
    else
        srv_fail(&e, 503, o->ops->cancel_type, NULL,
                 "the answer was cancelled (the server is shutting down or the client left): retry");
    if (!o->stream || !o->started) srv_job_body_json(j, e.status, o->ops->error_json(&e));
    else o->ops->stream_error(st, r, &e);
    return true;
}
