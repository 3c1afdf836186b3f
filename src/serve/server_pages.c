/* server_pages.c — see server_int.h: the /slots (JSON) and /metrics (Prometheus text) pages,
 * read under the server's lock from the queue, the slots and the counters the inference threads
 * keep, plus the connection guard's own counts. */
#include "serve/server_int.h"

#include <stdio.h>
#include <string.h>

#include "base/common.h"

static bool phase_has_deadline(int k) { return k != CG_WORK; }

void srv_pages_slots(server *s, chat_buf *o) {
    char tmp[512];
    double now = rl_now();
    pthread_mutex_lock(&s->mu);
    chat_buf_puts(o, "{\"slots\":[");
    for (int i = 0; i < s->n_slots; i++) {
        const srv_job *j = s->slots ? s->slots[i].job : NULL;
        if (j && j->t_started)
            snprintf(tmp, sizeof tmp,
                     "%s{\"id\":%d,\"state\":\"%s\",\"api\":\"%s\",\"n_prompt\":%zu,\"stream\":%s,"
                     "\"queue_wait_s\":%.3f,\"running_s\":%.3f,\"n_ctx\":%d}",
                     i ? "," : "", i, j->prefilling ? "prefill" : "decode", j->rq.api ? j->rq.api->name : "?",
                     j->rq.prompt.n, j->rq.stream ? "true" : "false", j->t_started - j->t_queued,
                     now - j->t_started, s->b->n_ctx);
        else /* idle, or assigned and not yet taken by its thread */
            snprintf(tmp, sizeof tmp, "%s{\"id\":%d,\"state\":\"idle\",\"n_ctx\":%d}", i ? "," : "", i,
                     s->b->n_ctx);
        chat_buf_puts(o, tmp);
    }
    snprintf(tmp, sizeof tmp, "]");
    chat_buf_puts(o, tmp);
    double oldest = 0;
    for (srv_job *q = s->head; q; q = q->next)
        if (now - q->t_queued > oldest) oldest = now - q->t_queued;
    snprintf(tmp, sizeof tmp,
             ",\"queue\":{\"waiting\":%d,\"capacity\":%d,\"oldest_wait_s\":%.3f},\"draining\":%s",
             s->n_waiting, s->p.queue, oldest, s->draining ? "true" : "false");
    chat_buf_puts(o, tmp);
    pthread_mutex_unlock(&s->mu);
    cg_stats cs;
    conn_guard_get_stats(s->g, &cs);
    snprintf(tmp, sizeof tmp, ",\"connections\":{\"open\":%d", cs.open);
    chat_buf_puts(o, tmp);
    for (int k = 0; k < CG_NPHASE; k++) {
        snprintf(tmp, sizeof tmp, ",\"%s\":%d", conn_guard_phase_name((cg_phase)k), cs.by_phase[k]);
        chat_buf_puts(o, tmp);
    }
    chat_buf_puts(o, "}}");
}

/* ---- metrics --------------------------------------------------------------------------------- */
void srv_pages_metrics(server *s, chat_buf *o) {
    char line[256];
#define PUT(...)                                                                                             \
    do {                                                                                                     \
        snprintf(line, sizeof line, __VA_ARGS__);                                                            \
        chat_buf_puts(o, line);                                                                              \
    } while (0)
    pthread_mutex_lock(&s->mu);
    srv_metrics *m = &s->m;
    static const char *const api[] = {"chat", "completions", "responses", "messages"};
    PUT("# HELP redlite_requests_total Generation requests served, by API.\n# TYPE redlite_requests_total "
        "counter\n");
    for (int i = 0; i < 4; i++) PUT("redlite_requests_total{api=\"%s\"} %lld\n", api[i], m->requests[i]);
    PUT("# HELP redlite_http_responses_total HTTP responses by status code.\n"
        "# TYPE redlite_http_responses_total counter\n");
    for (int i = 100; i < 600; i++)
        if (m->status[i]) PUT("redlite_http_responses_total{code=\"%d\"} %lld\n", i, m->status[i]);
    PUT("# TYPE redlite_requests_rejected_total counter\nredlite_requests_rejected_total %lld\n",
        m->rejected);
    PUT("# TYPE redlite_requests_cancelled_total counter\nredlite_requests_cancelled_total %lld\n",
        m->cancelled);
    PUT("# TYPE redlite_requests_failed_total counter\nredlite_requests_failed_total %lld\n", m->errors);
    PUT("# HELP redlite_prompts_beyond_trained_total Prompts longer than the model's trained context.\n"
        "# TYPE redlite_prompts_beyond_trained_total counter\nredlite_prompts_beyond_trained_total %lld\n",
        m->beyond_train);
    PUT("# HELP redlite_prompt_tokens_total Prompt tokens of all requests.\n"
        "# TYPE redlite_prompt_tokens_total counter\nredlite_prompt_tokens_total %lld\n",
        m->prompt_tokens);
    PUT("# HELP redlite_prompt_tokens_reused_total Prompt tokens not evaluated (held prefix or checkpoint).\n"
        "# TYPE redlite_prompt_tokens_reused_total counter\nredlite_prompt_tokens_reused_total %lld\n",
        m->prompt_reused);
    PUT("# TYPE redlite_prompt_tokens_evaluated_total counter\nredlite_prompt_tokens_evaluated_total %lld\n",
        m->prompt_tokens - m->prompt_reused);
    PUT("# TYPE redlite_generated_tokens_total counter\nredlite_generated_tokens_total %lld\n",
        m->gen_tokens);
    PUT("# TYPE redlite_prompt_seconds_total counter\nredlite_prompt_seconds_total %.6f\n", m->prompt_s);
    PUT("# TYPE redlite_decode_seconds_total counter\nredlite_decode_seconds_total %.6f\n", m->gen_s);
    PUT("# HELP redlite_decode_tokens_per_second Decode speed of the last request.\n"
        "# TYPE redlite_decode_tokens_per_second gauge\nredlite_decode_tokens_per_second %.3f\n",
        m->last_decode_tps);
    PUT("# TYPE redlite_prompt_tokens_per_second gauge\nredlite_prompt_tokens_per_second %.3f\n",
        m->last_prompt_tps);
    PUT("# TYPE redlite_queue_depth gauge\nredlite_queue_depth %d\n", s->n_waiting);
    PUT("# TYPE redlite_requests_running gauge\nredlite_requests_running %d\n", s->n_running);
    PUT("# TYPE redlite_slots gauge\nredlite_slots %d\n", s->n_slots);
    size_t pf_tokens = 0;               /* summed over the slots whose request is still in its prefill */
    double pf_s = 0.0;                  /* the longest prefill running so far */
    long long pf_done = 0, pf_left = 0; /* their progress (session_feed, chunk by chunk) */
    for (int i = 0; s->slots && i < s->n_slots; i++) {
        const srv_job *rj = s->slots[i].job;
        if (!rj || !rj->prefilling) continue;
        pf_tokens += rj->rq.prompt.n;
        pf_done += rj->pf_done;
        pf_left += rj->pf_total - rj->pf_done;
        if (rl_now() - rj->t_run > pf_s) pf_s = rl_now() - rj->t_run;
    }
    PUT("# HELP redlite_prefill_tokens Prompt tokens of the requests whose prefill runs now (0 otherwise).\n"
        "# TYPE redlite_prefill_tokens gauge\nredlite_prefill_tokens %zu\n",
        pf_tokens);
    PUT("# HELP redlite_prefill_seconds How long the longest running prefill has taken so far (0: none "
        "running).\n"
        "# TYPE redlite_prefill_seconds gauge\nredlite_prefill_seconds %.3f\n",
        pf_s);
    PUT("# HELP redlite_prefill_evaluated_tokens Tokens the running prefills have evaluated so far (0: none "
        "running).\n"
        "# TYPE redlite_prefill_evaluated_tokens gauge\nredlite_prefill_evaluated_tokens %lld\n",
        pf_done);
    PUT("# HELP redlite_prefill_remaining_tokens Tokens the running prefills have still to evaluate (reused "
        "ones "
        "excluded; 0: none running).\n# TYPE redlite_prefill_remaining_tokens gauge\n"
        "redlite_prefill_remaining_tokens %lld\n",
        pf_left);
    pthread_mutex_lock(&s->fields.mu);
    PUT("# HELP redlite_unknown_fields_total Request fields the server does not know, ignored "
        "(--strict-fields "
        "refuses them).\n# TYPE redlite_unknown_fields_total counter\n");
    for (int i = 0; i < s->fields.n; i++)
        PUT("redlite_unknown_fields_total{field=\"%s\"} %lld\n", s->fields.v[i].name, s->fields.v[i].n);
    if (s->fields.other) PUT("redlite_unknown_fields_total{field=\"(other)\"} %lld\n", s->fields.other);
    pthread_mutex_unlock(&s->fields.mu);
    PUT("# TYPE redlite_spec_drafted_tokens_total counter\nredlite_spec_drafted_tokens_total %lld\n",
        m->drafted);
    PUT("# TYPE redlite_spec_accepted_tokens_total counter\nredlite_spec_accepted_tokens_total %lld\n",
        m->accepted);
    PUT("# TYPE redlite_spec_acceptance_ratio gauge\nredlite_spec_acceptance_ratio %.4f\n",
        m->drafted ? (double)m->accepted / (double)m->drafted : 0.0);
    PUT("# HELP redlite_requests_abandoned_total Queued requests whose client left (dropped at once).\n"
        "# TYPE redlite_requests_abandoned_total counter\nredlite_requests_abandoned_total %lld\n",
        m->abandoned);
    PUT("# HELP redlite_queue_wait_seconds Time requests waited in the queue before running.\n"
        "# TYPE redlite_queue_wait_seconds summary\nredlite_queue_wait_seconds_sum %.6f\n"
        "redlite_queue_wait_seconds_count %lld\n",
        m->queue_wait_s, m->queue_waits);
    /* each slot's state (idle, prefill: the prompt is being read, decode) */
    PUT("# HELP redlite_slot_state State of each inference slot (1 = in that state).\n# TYPE "
        "redlite_slot_state gauge\n");
    for (int i = 0; s->slots && i < s->n_slots; i++) {
        const srv_job *sj = s->slots[i].job;
        const char *slot_state = !sj || !sj->t_started ? "idle" : sj->prefilling ? "prefill" : "decode";
        for (int k = 0; k < 3; k++) {
            static const char *const st[] = {"idle", "prefill", "decode"};
            PUT("redlite_slot_state{slot=\"%d\",state=\"%s\"} %d\n", i, st[k], !strcmp(st[k], slot_state));
        }
    }
    PUT("# TYPE redlite_request_body_bytes_inflight gauge\nredlite_request_body_bytes_inflight %zu\n",
        s->body_inflight);
    if (m->backend_lines) chat_buf_puts(o, m->backend_lines);
    pthread_mutex_unlock(&s->mu);
    cg_stats cs;
    conn_guard_get_stats(s->g, &cs);
    PUT("# HELP redlite_connections Open HTTP connections by phase.\n# TYPE redlite_connections gauge\n");
    for (int k = 0; k < CG_NPHASE; k++)
        PUT("redlite_connections{phase=\"%s\"} %d\n", conn_guard_phase_name((cg_phase)k), cs.by_phase[k]);
    PUT("# TYPE redlite_connections_accepted_total counter\nredlite_connections_accepted_total %lld\n",
        cs.accepted);
    PUT("# HELP redlite_connections_refused_total New connections refused at a cap (no idle one to evict).\n"
        "# TYPE redlite_connections_refused_total counter\nredlite_connections_refused_total %lld\n",
        cs.refused);
    PUT("# HELP redlite_connections_evicted_total Idle connections closed to admit a new one at a cap.\n"
        "# TYPE redlite_connections_evicted_total counter\nredlite_connections_evicted_total %lld\n",
        cs.evicted);
    PUT("# HELP redlite_connections_timeouts_total Connections closed at a deadline, by phase.\n"
        "# TYPE redlite_connections_timeouts_total counter\n");
    for (int k = 0; k < CG_NPHASE; k++)
        if (phase_has_deadline(k))
            PUT("redlite_connections_timeouts_total{phase=\"%s\"} %lld\n", conn_guard_phase_name((cg_phase)k),
                cs.timeouts[k]);
    PUT("# TYPE redlite_resident_memory_bytes gauge\nredlite_resident_memory_bytes %llu\n",
        (unsigned long long)rl_cur_rss());
    PUT("# TYPE redlite_peak_resident_memory_bytes gauge\nredlite_peak_resident_memory_bytes %llu\n",
        (unsigned long long)rl_peak_rss());
    PUT("# TYPE redlite_uptime_seconds gauge\nredlite_uptime_seconds %.1f\n", rl_now() - s->t_start);
#undef PUT
}
