/* server_backend.c — see server_backend.h. */
#include "serve/server_backend.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/common.h"
#include "cache/expert_cache.h"
#include "gguf/gguf.h"
#include "run/ctx_plan.h"
#include "run/session.h"
#include "run/statefile.h"
#include "serve/slot_plan.h"

void srv_backend_free(srv_backend *b) {
    if (b && b->free) b->free(b->ud);
}

/* Which stop string ended the text: the one that starts right where the emitted text ends in
 * the raw text (earliest in the list on ties, as the stopper scans them). -1 if none. */
static int stop_which(const char *raw, size_t n_raw, size_t emitted, const char *const *stops, int n) {
    for (int i = 0; i < n; i++) {
        size_t l = strlen(stops[i]);
        if (l && emitted + l <= n_raw && !memcmp(raw + emitted, stops[i], l)) return i;
    }
    return -1;
}

/* ---- script backend (test only) -------------------------------------------------------------- */
typedef struct {
    srv_backend b;
    tokenizer *tok;
    tok_ids *answers;
    int n_answers, next;
    int delay_ms;
    tok_ids history; /* what a real session would hold, for the reuse figures */
} script_be;

static void script_free(void *ud) {
    script_be *s = ud;
    for (int i = 0; i < s->n_answers; i++) tok_ids_free(&s->answers[i]);
    free(s->answers);
    tok_ids_free(&s->history);
    tokenizer_free(s->tok);
    free(s);
}

static int script_generate(void *ud, int slot, const srv_gen *g, srv_result *r) {
    script_be *s = ud;
    (void)slot; /* one slot */
    double t0 = rl_now();
    /* prefix reuse as the session reports it: the longest held prefix, the last token always
     * evaluated */
    size_t k = 0;
    while (k < s->history.n && k < (size_t)g->n_prompt && s->history.ids[k] == g->prompt[k]) k++;
    if (k == (size_t)g->n_prompt) k--;
    r->n_prompt = g->n_prompt;
    r->n_reused = (int)k;
    r->stop_index = -1;
    s->history.n = 0;
    for (int i = 0; i < g->n_prompt; i++)
        if (tok_ids_push(&s->history, g->prompt[i])) return rl_seterr("out of memory");
    r->t_prompt = rl_now() - t0;
    if (g->on_prompt) g->on_prompt(g->ud, r->n_reused);
    const tok_ids *a = &s->answers[s->next];
    s->next = (s->next + 1) % s->n_answers;
    stopper st;
    if (stopper_init(&st, g->stops, g->n_stops)) return rl_seterr("out of memory");
    tokdec d;
    tokdec_init(&d, s->tok, TOK_DECODE_REPLACE);
    chat_buf raw = {0};
    size_t emitted = 0;
    double t1 = rl_now();
    r->reason = SRV_EOG;
    for (size_t i = 0;; i++) {
        if (g->cancel && *g->cancel) {
            r->reason = SRV_CANCELLED;
            break;
        }
        if (i == a->n) break; /* the script ends: as an end-of-generation token */
        if (g->n_predict >= 0 && r->n_gen >= g->n_predict) {
            r->reason = SRV_LENGTH;
            break;
        }
        if (g->n_prompt + r->n_gen >= s->b.n_ctx) {
            r->reason = SRV_CONTEXT;
            break;
        }
        int32_t id = a->ids[i];
        if (tokenizer_is_eog(s->tok, id)) break;
        if (s->delay_ms > 0) {
            struct timespec ts = {s->delay_ms / 1000, (long)(s->delay_ms % 1000) * 1000000L};
            nanosleep(&ts, NULL);
        }
        r->n_gen++;
        tok_ids_push(&s->history, id);
        size_t n;
        const char *piece = tokdec_push(&d, id, &n);
        if (!piece) {
            r->reason = SRV_ERROR;
            snprintf(r->error, sizeof r->error, "out of memory");
            break;
        }
        chat_buf_put(&raw, piece, n);
        const char *out;
        size_t out_n;
        bool hit = stopper_push(&st, piece, n, &out, &out_n);
        emitted += out_n;
        if (out_n && g->on_text(g->ud, out, out_n)) {
            r->reason = SRV_CANCELLED;
            break;
        }
        if (hit) {
            r->reason = SRV_STOP;
            r->stop_index = stop_which(raw.p, raw.n, emitted, g->stops, g->n_stops);
            break;
        }
    }
    if (r->reason == SRV_EOG || r->reason == SRV_LENGTH || r->reason == SRV_CONTEXT) {
        size_t n;
        const char *tail = tokdec_flush(&d, &n), *out;
        size_t out_n;
        if (tail && n)
            stopper_push(&st, tail, n, &out, &out_n), out_n ? (void)g->on_text(g->ud, out, out_n) : (void)0;
        stopper_flush(&st, &out, &out_n);
        if (out_n) g->on_text(g->ud, out, out_n);
    }
    r->t_gen = rl_now() - t1;
    chat_buf_free(&raw);
    tokdec_free(&d);
    stopper_free(&st);
    return 0;
}

srv_backend *srv_backend_script(const srv_script_params *p) {
    script_be *s = calloc(1, sizeof *s);
    if (!s) {
        rl_seterr("out of memory");
        return NULL;
    }
    gguf_file *f = gguf_open(p->model_path);
    if (!f) goto fail;
    s->tok = tokenizer_load(f);
    s->b.fmt = chat_format_from_gguf(f);
    uint32_t train = 0;
    char key[96];
    char *arch = gguf_get_str_dup(f, "general.architecture");
    snprintf(key, sizeof key, "%s.context_length", arch ? arch : "qwen3next");
    free(arch);
    if (gguf_get_u32(f, key, &train)) s->b.n_ctx_train = (int)train;
    gguf_close(f);
    if (!s->tok) goto fail;
    /* split the script into answers at lines "---" */
    const char *t = p->script ? p->script : "";
    for (;;) {
        const char *sep = strstr(t, "\n---\n");
        size_t n = sep ? (size_t)(sep - t) : strlen(t);
        tok_ids *na = realloc(s->answers, sizeof *na * (size_t)(s->n_answers + 1));
        if (!na) goto oom;
        s->answers = na;
        s->answers[s->n_answers] = (tok_ids){0};
        if (tokenizer_encode(s->tok, t, n, TOK_PARSE_SPECIAL, &s->answers[s->n_answers++])) goto oom;
        if (!sep) break;
        t = sep + 5;
    }
    s->delay_ms = p->delay_ms;
    s->b.ud = s;
    s->b.name = "script (test only)";
    s->b.tok = s->tok;
    s->b.n_ctx = p->n_ctx > 0 ? p->n_ctx : 32768; /* nothing to plan: no model memory */
    s->b.n_slots = 1;
    s->b.generate = script_generate;
    s->b.free = script_free;
    return &s->b;
oom:
    rl_seterr("out of memory (script)");
fail:
    script_free(s);
    return NULL;
}

/* ---- session backend --------------------------------------------------------------------------
 * Slots: n_slots sessions of one opened model (the weights and the routed-expert cache shared,
 * each with its own KV cache, recurrent state and in-memory checkpoints), each driven by one of
 * the server's inference threads; the engine runs their forwards in turns and their decode steps
 * as rows of shared forwards, with the results each would have alone (engine.h).
 *
 * Prompt ingestion, in a slot: the session reuses the held sequence and its in-memory
 * checkpoints (session_match tells the server's router how much, for every idle slot). Two more
 * sources can hold a longer prefix, and are imported first when they do (then adopted):
 *   - the RAM tier: when a slot is handed a prompt that does not continue its conversation, that
 *     conversation's resume point (below) is exported (engine_state_export_snapshot: its KV rows
 *     and recurrent state) to memory before the new prompt overwrites the rows, so it can
 *     continue in any slot later without re-reading it; the tier keeps ram_max states of
 *     ram_max_bytes in all at most, least recently used first out;
 *   - a state directory (disk checkpoints, statefile.h), e.g. after a restart.
 *
 * The resume point of a request is the state after its prompt minus the last token: a prefix of
 * the next turn's prompt (which repeats this prompt and appends the answer as the template renders
 * it, whatever tokens the model generated), and of a re-sent identical prompt. The prompt is fed
 * in two steps (all but the last token, then the last one; bit-identical by the exactness
 * contract), a snapshot is taken in between. With a state directory its file is written after the
 * answer (the KV rows of the prompt are unchanged by decoding), when at least state_min_tokens
 * tokens were evaluated since the last save, so the save never delays the first token. */
typedef struct {
    session *s;
    long long unsaved;     /* tokens evaluated since the last disk save */
    engine_snapshot *snap; /* the resume point: the state at snap_n ... */
    int32_t *snap_toks;    /* ... after these tokens (NULL: none) */
    int snap_n;
    bool pending; /* the resume point is still to be written to disk */
} sess_slot;

typedef struct {
    int32_t *toks;
    int n;
    void *blob;
    size_t bytes;
    uint64_t used;
} ram_state;

typedef struct {
    srv_backend b;
    session_model *m;
    sess_slot *slot;
    int n_slots;
    statefile_dir *sd;
    pthread_mutex_t mu; /* sd and the RAM tier (slots run on different threads) */
    ram_state *ram;     /* [ram_max] */
    int ram_max;
    uint64_t ram_max_bytes; /* their total bytes at most (0: no cap) */
    uint64_t tick;
    long long ram_saves, ram_restores;
    int min_tokens;
    spec_mode spec;
    int draft_max;
    bool verbose;
} sess_be;

static void ram_drop(ram_state *r) {
    free(r->toks);
    free(r->blob);
    memset(r, 0, sizeof *r);
}

static void sess_free(void *ud) {
    sess_be *s = ud;
    for (int i = 0; s->slot && i < s->n_slots; i++) {
        engine_snapshot_free(s->slot[i].snap);
        free(s->slot[i].snap_toks);
    }
    for (int i = 0; s->ram && i < s->ram_max; i++) ram_drop(&s->ram[i]);
    free(s->ram);
    statefile_close(s->sd);
    /* the first slot owns the shared expert cache: free it last */
    for (int i = s->n_slots - 1; s->slot && i >= 0; i--) session_free(s->slot[i].s);
    free(s->slot);
    session_model_close(s->m);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static int sess_on_text(void *ud, int32_t token, const char *text, size_t n) {
    const srv_gen *g = ud;
    return n ? g->on_text(g->ud, text, n) : 0;
}

/* session_feed's progress -> the server's; `base` counts the tokens an earlier feed of the same
 * prompt evaluated (the state-dir path feeds all but the last token, then the last one) */
typedef struct {
    const srv_gen *g;
    int base, extra;
} sess_prog;

static void sess_progress(void *ud, int done, int total, double seconds) {
    sess_prog *p = ud;
    p->g->on_progress(p->g->ud, p->base + done, p->base + total + p->extra);
}

static void sess_on_logprobs(void *ud, const sampler_logprobs *lp) {
    const srv_gen *g = ud;
    g->on_logprobs(g->ud, lp);
}

static void sess_save(sess_be *s, sess_slot *sl) {
    if (!s->sd || !sl->pending) return;
    double t0 = rl_now();
    pthread_mutex_lock(&s->mu);
    int rc = statefile_save(s->sd, session_ctx(sl->s), sl->snap, sl->snap_toks, sl->snap_n);
    pthread_mutex_unlock(&s->mu);
    if (rc) fprintf(stderr, "redlite serve: checkpoint not saved: %s\n", rl_lasterr());
    else if (s->verbose)
        fprintf(stderr, "serve: checkpoint of %d tokens saved in %.3f s\n", sl->snap_n, rl_now() - t0);
    sl->pending = false;
    sl->unsaved = 0;
}

/* The slot is about to take a prompt that does not continue its conversation: export the
 * conversation's resume point (its KV rows are still those of the snapshot) into *out, to go to
 * the RAM tier once the new prompt's own state was imported (so that with one slot two
 * alternating conversations swap through one RAM entry). */
static void ram_evict(sess_be *s, sess_slot *sl, const int32_t *prompt, int n, ram_state *out) {
    memset(out, 0, sizeof *out);
    if (!s->ram_max || !sl->snap_toks || sl->snap_n < 1) return;
    if (sl->snap_n <= n && !memcmp(sl->snap_toks, prompt, sizeof(int32_t) * (size_t)sl->snap_n))
        return; /* continues */
    engine_ctx *c = session_ctx(sl->s);
    size_t bytes = engine_state_bytes(c, sl->snap_n);
    if (s->ram_max_bytes && bytes > s->ram_max_bytes) { /* never fits: not worth the export */
        if (s->verbose)
            fprintf(stderr, "serve: evicted conversation of %d tokens (%.1f MiB) exceeds --ram-states-mib\n",
                    sl->snap_n, bytes / 1048576.0);
        return;
    }
    void *blob = bytes ? malloc(bytes) : NULL;
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)sl->snap_n);
    if (!blob || !toks || engine_state_export_snapshot(c, sl->snap, blob, bytes)) {
        if (s->verbose)
            fprintf(stderr, "serve: no RAM checkpoint of an evicted conversation (%s)\n",
                    blob && toks ? rl_lasterr() : "out of memory");
        free(blob), free(toks);
        return;
    }
    memcpy(toks, sl->snap_toks, sizeof(int32_t) * (size_t)sl->snap_n);
    *out = (ram_state){.toks = toks, .n = sl->snap_n, .blob = blob, .bytes = bytes};
    free(sl->snap_toks); /* given up with the KV rows */
    sl->snap_toks = NULL;
    sl->pending = false;
}

/* Put an evicted conversation's state into the RAM tier: it supersedes the entries it extends,
 * then takes a free entry or the least recently used one; with a byte cap, the least recently
 * used others then go until the total fits (the new one alone always does: ram_evict). */
static void ram_insert(sess_be *s, ram_state *e) {
    if (!e->toks) return;
    pthread_mutex_lock(&s->mu);
    int v = 0;
    for (int i = 0; i < s->ram_max; i++) {
        ram_state *r = &s->ram[i];
        if (r->toks && r->n <= e->n && !memcmp(r->toks, e->toks, sizeof(int32_t) * (size_t)r->n)) ram_drop(r);
        if (!r->toks) v = i;
    }
    for (int i = 0; i < s->ram_max && s->ram[v].toks; i++)
        if (s->ram[i].used < s->ram[v].used) v = i;
    ram_drop(&s->ram[v]);
    e->used = ++s->tick;
    s->ram[v] = *e;
    s->ram_saves++;
    for (;;) {
        uint64_t total = 0;
        int lru = -1;
        for (int i = 0; i < s->ram_max; i++) {
            if (!s->ram[i].toks) continue;
            total += s->ram[i].bytes;
            if (i != v && (lru < 0 || s->ram[i].used < s->ram[lru].used)) lru = i;
        }
        if (!s->ram_max_bytes || total <= s->ram_max_bytes || lru < 0) break;
        ram_drop(&s->ram[lru]);
    }
    pthread_mutex_unlock(&s->mu);
    if (s->verbose)
        fprintf(stderr, "serve: evicted conversation of %d tokens kept in RAM (%.1f MiB)\n", e->n,
                e->bytes / 1048576.0);
    memset(e, 0, sizeof *e);
}

/* Import the longest RAM or disk state that is a prefix of the prompt and longer than what the
 * slot holds (L). Returns the tokens restored (0: none). */
static int import_best(sess_be *s, sess_slot *sl, const srv_gen *g, int L) {
    engine_ctx *c = session_ctx(sl->s);
    int n = g->n_prompt, k = 0;
    pthread_mutex_lock(&s->mu);
    ram_state *best = NULL;
    for (int i = 0; i < s->ram_max; i++) {
        ram_state *r = &s->ram[i];
        if (r->toks && r->n > L && r->n <= n - 1 && (!best || r->n > best->n) &&
            !memcmp(r->toks, g->prompt, sizeof(int32_t) * (size_t)r->n))
            best = r;
    }
    int disk = s->sd ? statefile_best(s->sd, g->prompt, n, best ? best->n : L, n - 1) : 0;
    if (disk > 0) k = statefile_restore(s->sd, c, g->prompt, n, best ? best->n : L, n - 1);
    if (k == 0 && best) { /* (also when the disk file was removed by another server meanwhile) */
        k = engine_state_import(c, best->n, best->blob, best->bytes) ? -1 : best->n;
        if (k > 0) ram_drop(best), s->ram_restores++; /* moved into the slot (it comes back when evicted) */
    }
    pthread_mutex_unlock(&s->mu);
    if (k > 0 && session_adopt(sl->s, g->prompt, k) == 0) return k;
    if (k != 0) { /* the context was reset: the session forgets its history */
        fprintf(stderr, "redlite serve: %s\n", rl_lasterr());
        session_reset(sl->s);
    }
    return 0;
}

static int sess_match(void *ud, int slot, const int32_t *prompt, int n) {
    sess_be *s = ud;
    return session_match(s->slot[slot].s, prompt, n);
}

static int sess_generate(void *ud, int slot, const srv_gen *g, srv_result *r) {
    sess_be *s = ud;
    sess_slot *sl = &s->slot[slot];
    r->n_prompt = g->n_prompt;
    r->stop_index = -1;
    double t0 = rl_now();
    ram_state ev;
    ram_evict(s, sl, g->prompt, g->n_prompt, &ev);
    int restored = 0, L = session_match(sl->s, g->prompt, g->n_prompt);
    if (s->sd || s->ram_max) restored = import_best(s, sl, g, L);
    ram_insert(s, &ev);
    session_feed_stats fs, fs1;
    session_feed_opts fo = {.cancel = g->cancel};
    sess_prog prog = {.g = g};
    if (g->on_progress) {
        fo.progress = sess_progress;
        fo.ud = &prog;
    }
    int n = g->n_prompt, rc1 = 0;
    int hn;
    const int32_t *h = session_history(sl->s, &hn);
    bool at_last = hn == n - 1 && n >= 2 && !memcmp(h, g->prompt, sizeof(int32_t) * (size_t)(n - 1));
    bool resume = (s->sd || s->ram_max) && n >= 2;
    if (resume && !at_last) { /* all but the last token, the resume point, then the last one */
        prog.extra = 1;
        rc1 = session_feed(sl->s, g->prompt, n - 1, &fo, &fs);
        prog.base = fs.n_evaluated;
        prog.extra = 0;
        if (!rc1 && (sl->snap || (sl->snap = engine_snapshot_new(session_ctx(sl->s))))) {
            free(sl->snap_toks);
            sl->snap_toks = NULL;
            sl->pending = false;
            if (!engine_snapshot_save(session_ctx(sl->s), sl->snap) &&
                (sl->snap_toks = malloc(sizeof(int32_t) * (size_t)(n - 1)))) {
                memcpy(sl->snap_toks, g->prompt, sizeof(int32_t) * (size_t)(n - 1));
                sl->snap_n = n - 1;
                sl->pending = s->sd && sl->unsaved + fs.n_evaluated >= s->min_tokens;
            }
        }
        if (!rc1) {
            rc1 = session_feed(sl->s, g->prompt, n, &fo, &fs1);
            fs.n_evaluated += fs1.n_evaluated;
        }
    } else {
        rc1 = session_feed(sl->s, g->prompt, n, &fo, &fs);
    }
    if (rc1) {
        r->t_prompt = rl_now() - t0;
        r->reason = g->cancel && *g->cancel ? SRV_CANCELLED : SRV_ERROR;
        snprintf(r->error, sizeof r->error, "%s", rl_lasterr());
        return 0;
    }
    sl->unsaved += fs.n_evaluated;
    r->n_reused = fs.n_reused; /* restored tokens count here: the session held them */
    r->t_prompt = rl_now() - t0;
    if (s->verbose && restored)
        fprintf(stderr, "serve: slot %d: %d prompt tokens restored\n", slot, restored);
    if (g->on_prompt) g->on_prompt(g->ud, r->n_reused);
    session_gen_params gp = {
        .sp = g->sp,
        .n_predict = g->n_predict,
        .stops = g->stops,
        .n_stops = g->n_stops,
        .decode_flags = TOK_DECODE_REPLACE,
        .on_text = sess_on_text,
        .ud = (void *)g,
        .cancel = g->cancel,
        .spec = s->spec,
        .draft_max = s->draft_max,
        .grammar = g->grammar,
        .top_logprobs = g->top_logprobs,
        .on_logprobs = g->on_logprobs ? sess_on_logprobs : NULL,
    };
    session_gen_result out;
    int rc = session_generate(sl->s, &gp, &out);
    r->n_gen = (int)out.ids.n;
    r->t_gen = out.seconds;
    r->n_drafted = out.n_drafted;
    r->n_accepted = out.n_accepted;
    static const srv_reason map[] = {SRV_EOG, SRV_LENGTH, SRV_STOP, SRV_CONTEXT, SRV_CANCELLED, SRV_ERROR};
    r->reason = rc ? SRV_ERROR : map[out.reason];
    if (rc) snprintf(r->error, sizeof r->error, "%s", rl_lasterr());
    if (r->reason == SRV_STOP && g->n_stops) {
        char *full = NULL;
        size_t n_full = 0;
        if (!tokenizer_decode(s->b.tok, out.ids.ids, out.ids.n, TOK_DECODE_REPLACE, &full, &n_full))
            r->stop_index = stop_which(full, n_full, out.text_len, g->stops, g->n_stops);
        free(full);
    }
    session_gen_result_free(&out);
    sess_save(s, sl); /* the prompt's state, if one is pending */
    return 0;
}

static void sess_flush(void *ud) {
    sess_be *s = ud;
    for (int i = 0; i < s->n_slots; i++) sess_save(s, &s->slot[i]);
}

static void sess_metrics(void *ud, chat_buf *o) {
    sess_be *s = ud;
    char line[512];
    /* the counters of the shared cache (read while other slots may run: plain counters) */
    expert_cache *ec = session_expert_cache(s->slot[0].s);
    if (ec) {
        ec_stats st;
        expert_cache_get_stats(ec, &st);
        const uint64_t hits = st.hits + st.hits_inflight;
        snprintf(line, sizeof line,
                 "# TYPE redlite_expert_cache_hits_total counter\nredlite_expert_cache_hits_total %llu\n"
                 "# TYPE redlite_expert_cache_misses_total counter\nredlite_expert_cache_misses_total %llu\n",
                 (unsigned long long)hits, (unsigned long long)st.misses);
        chat_buf_puts(o, line);
    }
    long long fw, rows;
    engine_batch_stats(session_model_engine(s->m), &fw, &rows);
    pthread_mutex_lock(&s->mu);
    int n_ram = 0;
    unsigned long long ram_bytes = 0;
    for (int i = 0; i < s->ram_max; i++)
        if (s->ram[i].toks) n_ram++, ram_bytes += s->ram[i].bytes;
    snprintf(line, sizeof line,
             "# TYPE redlite_decode_forwards_total counter\nredlite_decode_forwards_total %lld\n"
             "# TYPE redlite_decode_rows_total counter\nredlite_decode_rows_total %lld\n"
             "# TYPE redlite_ram_checkpoints gauge\nredlite_ram_checkpoints %d\n"
             "# TYPE redlite_ram_checkpoint_bytes gauge\nredlite_ram_checkpoint_bytes %llu\n",
             fw, rows, n_ram, ram_bytes);
    chat_buf_puts(o, line);
    snprintf(
        line, sizeof line,
        "# TYPE redlite_ram_checkpoint_saves_total counter\nredlite_ram_checkpoint_saves_total %lld\n"
        "# TYPE redlite_ram_checkpoint_restores_total counter\nredlite_ram_checkpoint_restores_total %lld\n",
        s->ram_saves, s->ram_restores);
    chat_buf_puts(o, line);
    if (s->sd) {
        statefile_stats st;
        statefile_get_stats(s->sd, &st);
        snprintf(line, sizeof line,
                 "# TYPE redlite_disk_checkpoints gauge\nredlite_disk_checkpoints %d\n"
                 "# TYPE redlite_disk_checkpoint_bytes gauge\nredlite_disk_checkpoint_bytes %llu\n",
                 st.n_files, (unsigned long long)st.bytes);
        chat_buf_puts(o, line);
        snprintf(
            line, sizeof line,
            "# TYPE redlite_disk_checkpoint_saves_total counter\nredlite_disk_checkpoint_saves_total %lld\n"
            "# TYPE redlite_disk_checkpoint_restores_total counter\nredlite_disk_checkpoint_restores_total "
            "%lld\n"
            "# TYPE redlite_disk_checkpoint_rejected_total counter\nredlite_disk_checkpoint_rejected_total "
            "%lld\n",
            st.saves, st.restores, st.rejected);
        chat_buf_puts(o, line);
    }
    pthread_mutex_unlock(&s->mu);
}

/* --parallel auto: the first slot's context says what a slot costs (slot_plan.h: the same
 * estimate `redlite info` prints); host memory free now and, on a device backend, device memory
 * free after this context bound the number. */
static int auto_slots(const sess_be *s, int max_ck, uint64_t *per_slot) {
    engine_ctx *c = session_ctx(s->slot[0].s);
    engine_mem mem;
    if (engine_mem_info(c, &mem)) return 1;
    const q3n_hparams *hp = session_hparams(s->slot[0].s);
    slot_cost sc = {.ctx_bytes = mem.kv_bytes + mem.state_bytes + mem.scratch_bytes,
                    .ram_bytes = engine_state_bytes(c, engine_n_ctx(c)),
                    .max_checkpoints = max_ck,
                    .device = mem.device};
    for (int il = 0; il < hp->n_layer; il++)
        if (!hp->is_attn[il]) sc.rec_bytes += sizeof(float) * (q3n_conv_floats(hp) + q3n_ssm_floats(hp));
    *per_slot = slot_plan_bytes(&sc);
    return slot_plan_fit(&sc, rl_mem_available(), mem.dev_free_after_ctx);
}

srv_backend *srv_backend_session(const srv_session_params *p) {
    sess_be *s = calloc(1, sizeof *s);
    if (!s) {
        rl_seterr("out of memory");
        return NULL;
    }
    pthread_mutex_init(&s->mu, NULL);
    session_model_params mp = {.model_path = p->model_path,
                               .backend = p->backend,
                               .n_threads = p->n_threads,
                               .iq_repack = p->iq_repack,
                               .map_weights = p->map_weights};
    if (!(s->m = session_model_open(&mp))) goto fail;
    session_params sp = {.n_ctx = p->n_ctx,
                         .n_batch = p->n_batch,
                         .kv = p->kv,
                         .cache_spec = p->cache_spec,
                         .vram_spec = p->vram_spec,
                         .vram_pin = p->vram_pin,
                         .vram_miss = p->vram_miss,
                         .route_bias = p->route_bias,
                         .route_trace = p->route_trace,
                         .verbose = p->verbose,
                         .max_checkpoints = p->max_checkpoints};
    if (!session_model_tokenizer(s->m)) {
        rl_seterr("%s has no tokenizer: serve needs one to read and write text", p->model_path);
        goto fail;
    }
    if (p->n_slots > 1 && (p->route_bias > 0 || p->route_trace)) {
        rl_seterr("--route-bias / --route-trace follow one sequence: use --parallel 1 with them");
        goto fail;
    }
    int want = p->n_slots > 0 ? p->n_slots : 1;
    if (!(s->slot = calloc((size_t)(want > SLOT_PLAN_AUTO_MAX ? want : SLOT_PLAN_AUTO_MAX), sizeof *s->slot)))
        goto oom;
    if (p->n_ctx > 0) s->slot[0].s = session_new(s->m, &sp);
    else { /* the default: from the trained length and the memory plan (ctx_plan.h), for one slot */
        ctx_plan plan;
        if ((s->slot[0].s = ctx_plan_session_new(s->m, &sp, &plan)))
            fprintf(stderr, "redlite serve: %s\n", plan.reason);
    }
    if (!s->slot[0].s) goto fail;
    sp.n_ctx = session_n_ctx(s->slot[0].s); /* every slot gets the same window */
    s->n_slots = 1;
    if (p->n_slots <= 0) {
        uint64_t per = 0;
        want = auto_slots(s, p->max_checkpoints > 0 ? p->max_checkpoints : 8, &per);
        if (p->verbose)
            fprintf(
                stderr,
                "serve: --parallel auto: %d slot%s (%.1f MiB = %llu bytes each: KV cache, recurrent state, "
                "checkpoints, RAM tier share)\n",
                want, want == 1 ? "" : "s", per / 1048576.0, (unsigned long long)per);
    }
    sp.share_experts = s->slot[0].s; /* one expert cache for every slot */
    for (; s->n_slots < want; s->n_slots++)
        if (!(s->slot[s->n_slots].s = session_new(s->m, &sp))) goto fail;
    if (p->spec == SPEC_MTP && !engine_has_mtp(session_model_engine(s->m))) {
        rl_seterr("--spec mtp: this model or backend has no MTP head forward; use --spec lookup or auto");
        goto fail;
    }
    s->spec = (spec_mode)p->spec;
    s->draft_max = p->draft_max;
    /* a byte cap without a count: as many entries as the bytes hold (the flag's largest count) */
    s->ram_max = p->ram_states >= 0 ? p->ram_states : p->ram_max_bytes ? 1024 : s->n_slots;
    s->ram_max_bytes = p->ram_max_bytes;
    if (s->ram_max && !(s->ram = calloc((size_t)s->ram_max, sizeof *s->ram))) goto oom;
    if (p->state_dir) {
        engine *e = session_model_engine(s->m);
        uint64_t fp =
            statefile_model_fingerprint(engine_gguf(e), p->state_dir); /* weights hashed once, cached */
        if (!fp || !(s->sd = statefile_open(p->state_dir, p->state_max_bytes, fp,
                                            engine_state_format(session_ctx(s->slot[0].s)))))
            goto fail;
    }
    s->min_tokens = p->state_min_tokens > 0 ? p->state_min_tokens : 1;
    s->verbose = p->verbose;
    s->b.ud = s;
    s->b.name = "session";
    s->b.tok = session_model_tokenizer(s->m);
    s->b.fmt = chat_format_from_gguf(engine_gguf(session_model_engine(s->m)));
    s->b.n_ctx = session_n_ctx(s->slot[0].s);
    s->b.n_slots = s->n_slots;
    s->b.match = sess_match;
    s->b.n_ctx_train = session_hparams(s->slot[0].s)->n_ctx_train;
    s->b.generate = sess_generate;
    s->b.metrics = sess_metrics;
    s->b.flush = sess_flush;
    s->b.free = sess_free;
    return &s->b;
oom:
    rl_seterr("out of memory (server slots)");
fail:
    sess_free(s);
    return NULL;
}
