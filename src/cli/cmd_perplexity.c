/* cmd_perplexity.c — `redlite perplexity`: perplexity of a model on a text file, with llama.cpp's
 * definition (tools/perplexity, the default mode), so the two tools' numbers are comparable.
 *
 * Definition (what llama-perplexity does, and what this command reproduces):
 *   - the file is read whole, one trailing '\n' dropped (llama.cpp's -f does that), and tokenised
 *     as plain text: special tokens written in the text are NOT parsed (common_tokenize with
 *     parse_special = false);
 *   - the tokens are cut into n_chunk = floor(n_tokens / ctx) non-overlapping windows of ctx
 *     tokens (the tail is dropped; --chunks N keeps the first N); at least 2*ctx tokens needed;
 *   - each window is evaluated from an empty state; when the vocabulary asks for BOS
 *     (tokenizer.ggml.add_bos_token; Qwen: no) the window's first token is REPLACED by BOS;
 *   - with first = ctx/2, the logits of positions first .. ctx-2 are scored against the next
 *     token (ctx - first - 1 tokens per window): PPL = exp(mean NLL over all scored tokens),
 *     the ± is llama.cpp's: stddev(NLL) / sqrt(count - 1) * PPL.
 *
 * The logits come from engine_verify rows, chunked by --batch; the rows are bit-identical to
 * single steps (the engine's exactness contract), so the batch never changes the result. The
 * context half of a window needs no logits and goes through engine_prefill. The session layer
 * opens the model, its tokenizer and the routed-expert source; the windows drive the session's
 * engine context directly (session_reset, then engine calls), because every scored row's logits
 * are needed and session_feed keeps only the last one.
 *
 * Also reported for every scored position r (predicting token r+1): the trunk's top-1 accuracy
 * (argmax of row r == the text's token). --mtp-accept (models with an MTP head) runs the MTP head
 * teacher-forced along every window: the pair (hidden of r-1, token r) drafts token r+1; the
 * draft is "accepted" when it equals the trunk's greedy token (argmax of row r) — what
 * speculative decoding with greedy verification accepts for a first draft — and also compared
 * with the text's token. --tokens-out writes these per-position values as JSON lines.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "base/common.h"
#include "run/engine.h"
#include "cli/opts.h"
#include "base/json.h"
#include "text/sampler.h"
#include "run/session.h"
#include "text/tokenizer.h"

static const char *CMD = "perplexity";

static const opts_cmd PERPLEXITY = {
    "perplexity", CMD_PERPLEXITY, "redlite perplexity -m MODEL -f FILE [options]",
    "Perplexity of MODEL on the text of FILE, as llama.cpp's llama-perplexity defines it:\n"
    "non-overlapping windows of --ctx tokens, each from an empty state, the second half of\n"
    "each window scored; PPL = exp(mean negative log-likelihood). The batch and the expert\n"
    "cache never change the result.",
    "Progress per window goes to stderr when it is a terminal.\n"};

typedef struct {
    int start; /* first token of the window in the file's token list */
    int n_scored;
    double nll; /* sum over the window's scored tokens */
    double seconds;
} ppl_window;

typedef struct {
    long long n_top1;       /* scored positions whose trunk argmax is the text's next token */
    long long n_accept;     /* --mtp-accept: draft == the trunk's greedy token */
    long long n_draft_text; /* draft == the text's token */
} top_stats;

/* log p(tok) under softmax(logits[0..n)), in double: max-shifted log-sum-exp. */
static double log_prob(const float *logits, int n, int tok) {
    float mx = logits[0];
    for (int i = 1; i < n; i++)
        if (logits[i] > mx) mx = logits[i];
    double s = 0;
    for (int i = 0; i < n; i++) s += exp((double)logits[i] - mx);
    /* s >= 1: the largest logit's term is exp(0) */
    // cppcheck-suppress invalidFunctionArg
    return (double)logits[tok] - mx - log(s);
}

/* Everything one run needs; freed by ppl_free. */
typedef struct {
    session *s;
    engine_ctx *c; /* session_ctx(s) */
    int V, D, ctx, batch, first;
    bool mtp;
    float *logits;     /* [batch][V] */
    float *mtp_logits; /* [batch][V] (mtp) */
    float *hid;        /* [batch][D] (mtp) */
    int *top;          /* [ctx] argmax of the trunk's logits at each scored row */
    int *draft;        /* [ctx] MTP draft from pair p = (hidden p, token p+1), for token p+2 */
    double *nll_row;   /* [ctx] NLL of each scored row */
    int32_t *win;      /* [ctx] the window's tokens (BOS substituted) */
    FILE *tokens_out;  /* --tokens-out, or NULL */
} ppl_run;

static void ppl_free(ppl_run *r) {
    free(r->logits);
    free(r->mtp_logits);
    free(r->hid);
    free(r->top);
    free(r->draft);
    free(r->nll_row);
    free(r->win);
}

/* Evaluate window number wi (tokens w[0..ctx)) from an empty state; adds its NLLs to pw and
 * *nll2 and its top-1 / MTP counts to *ts. 0 or -1 (rl_lasterr). */
static int ppl_window_eval(ppl_run *r, int wi, const int32_t *w, ppl_window *pw, double *nll2,
                           top_stats *ts) {
    session_reset(r->s); /* empty state: position 0, zero recurrent state, empty MTP cache */
    const int ctx = r->ctx, first = r->first;
    int pos = 0;
    if (!r->mtp && first > 0) {
        /* the context half: no logits needed (prefill rows == verify rows, bit for bit) */
        if (engine_prefill(r->c, w, first, NULL)) return -1;
        pos = first;
    }
    while (pos < ctx) {
        int n = ctx - pos < r->batch ? ctx - pos : r->batch;
        if (engine_verify(r->c, w + pos, n, r->logits, NULL)) return -1;
        for (int i = 0; i < n; i++) {
            int p = pos + i;
            if (p < first || p > ctx - 2) continue;
            const float *lg = r->logits + (size_t)i * r->V;
            r->nll_row[p] = -log_prob(lg, r->V, w[p + 1]);
            r->top[p] = sampler_argmax(lg, r->V);
        }
        if (r->mtp) {
            /* pairs (hidden p, token p+1) for p in [pos, pos+n); the last position has no p+1 */
            int m = pos + n == ctx ? n - 1 : n;
            for (int i = 0; i < m; i++) {
                const float *h = engine_last_hidden(r->c, i);
                if (!h) return rl_seterr("the engine kept no hidden state of row %d for MTP", i);
                memcpy(r->hid + (size_t)i * r->D, h, sizeof(float) * (size_t)r->D);
            }
            if (m > 0 && engine_mtp(r->c, r->hid, w + pos + 1, m, r->mtp_logits, NULL)) return -1;
            for (int i = 0; i < m; i++)
                r->draft[pos + i] = sampler_argmax(r->mtp_logits + (size_t)i * r->V, r->V);
        }
        pos += n;
    }
    for (int p = first; p <= ctx - 2; p++) {
        /* row p predicts token p+1; the MTP draft for p+1 came from pair p-1 */
        double l = r->nll_row[p];
        pw->nll += l;
        *nll2 += l * l;
        pw->n_scored++;
        ts->n_top1 += r->top[p] == w[p + 1];
        int d = r->mtp ? r->draft[p - 1] : -1;
        if (r->mtp) {
            ts->n_accept += d == r->top[p];
            ts->n_draft_text += d == w[p + 1];
        }
        if (r->tokens_out) {
            fprintf(r->tokens_out, "{\"w\":%d,\"p\":%d,\"tok\":%d,\"nll\":%.9g,\"top\":%d", wi, p, w[p + 1],
                    l, r->top[p]);
            if (r->mtp) fprintf(r->tokens_out, ",\"draft\":%d", d);
            fputs("}\n", r->tokens_out);
        }
    }
    return 0;
}

/* One perplexity command's state, shared by its set-up, run and report pieces. */
typedef struct {
    cli_opts o;
    char *text; /* -f FILE's text */
    size_t tlen;
    session_model *sm;
    engine *e;
    const tokenizer *tok;
    tok_ids ids; /* the text's tokens */
    ppl_run r;
    ppl_window *wins; /* [n_win] */
    int n_win, n_win_max;
    bool add_bos;
    double t0, t1, secs; /* load start, windows start, windows' seconds */
    double nll, nll2;    /* sums of the scored tokens' NLL and its square */
    long long count;     /* scored tokens */
    top_stats ts;
} ppl_cmd;

/* Set-up after the options: the model, the text's tokens, the windows, the session and its buffers.
 * 0; -1 (rl_lasterr, reported by the caller); or an exit status already reported. */
static int ppl_setup(ppl_cmd *pc) {
    const cli_opts *o = &pc->o;
    ppl_run *r = &pc->r;
    long long ctx = o->n_ctx, batch = o->batch, chunks = o->chunks;
    bool mtp = o->mtp_accept;
    pc->t0 = rl_now();
    pc->sm = session_model_open(&(session_model_params){.model_path = o->model,
                                                        .backend = o->backend,
                                                        .n_threads = (int)o->threads,
                                                        .reference = o->reference,
                                                        .iq_repack = o->iq_repack,
                                                        .map_weights = cli_map_weights(o)});
    if (!pc->sm) return -1;
    engine *e = pc->e = session_model_engine(pc->sm);
    const tokenizer *tok = pc->tok = session_model_tokenizer(pc->sm);
    tok_ids *ids = &pc->ids;
    if (mtp && !engine_has_mtp(e))
        return cli_fail(CMD, 2, "--mtp-accept: %s has no MTP head (no blk.N.nextn.* tensors)", o->model);
    if (tokenizer_encode(tok, pc->text, pc->tlen, 0, ids)) {
        rl_seterr("out of memory (tokenizing %s)", o->file);
        return -1;
    }
    if ((long long)ids->n < 2 * ctx)
        return cli_fail(CMD, 2,
                        "%s tokenizes to %zu tokens; a window of %lld needs at least %lld (lower --ctx)",
                        o->file, ids->n, ctx, 2 * ctx);
    pc->n_win_max = (int)(ids->n / (size_t)ctx);
    pc->n_win = chunks <= 0 || chunks > pc->n_win_max ? pc->n_win_max : (int)chunks;
    const q3n_hparams *hp = engine_hparams(e);
    r->V = hp->n_vocab;
    r->D = hp->n_embd;
    r->ctx = (int)ctx;
    if (batch == 0) batch = engine_default_batch(e); /* -b auto */
    r->batch = (int)(batch < ctx ? batch : ctx);
    r->first = (int)(ctx / 2);
    r->mtp = mtp;
    for (size_t i = 0; i < ids->n; i++)
        if (ids->ids[i] < 0 || ids->ids[i] >= r->V) {
            rl_seterr("token id %d is outside the model's vocabulary (%d rows)", ids->ids[i], r->V);
            return -1;
        }
    pc->add_bos = tokenizer_add_bos(tok) && tokenizer_bos(tok) >= 0;
    r->s = session_new(pc->sm, &(session_params){.n_ctx = r->ctx,
                                                 .n_batch = r->batch,
                                                 .kv = o->kv,
                                                 .cache_spec = o->cache_spec,
                                                 .vram_spec = o->vram_spec,
                                                 .vram_pin = o->vram_pin,
                                                 .vram_miss = o->vram_miss,
                                                 .route_bias = o->route_bias,
                                                 .route_trace = o->route_trace,
                                                 .verbose = !o->json});
    if (!r->s) return -1;
    r->c = session_ctx(r->s);
    r->logits = rl_malloc(sizeof(float) * (size_t)r->batch * r->V, "logits");
    r->win = rl_malloc(sizeof(int32_t) * (size_t)r->ctx, "window");
    r->top = rl_malloc(sizeof(int) * (size_t)r->ctx, "argmax");
    r->nll_row = rl_malloc(sizeof(double) * (size_t)r->ctx, "NLL");
    pc->wins = rl_calloc((size_t)pc->n_win, sizeof *pc->wins, "windows");
    if (!r->logits || !r->win || !r->top || !r->nll_row || !pc->wins) return -1;
    if (mtp) {
        r->mtp_logits = rl_malloc(sizeof(float) * (size_t)r->batch * r->V, "MTP logits");
        r->hid = rl_malloc(sizeof(float) * (size_t)r->batch * r->D, "hidden");
        r->draft = rl_malloc(sizeof(int) * (size_t)r->ctx, "drafts");
        if (!r->mtp_logits || !r->hid || !r->draft) return -1;
    }
    if (o->tokens_out && !(r->tokens_out = fopen(o->tokens_out, "w"))) {
        rl_seterr("cannot create %s: %s", o->tokens_out, strerror(errno));
        return -1;
    }
    return 0;
}

/* Every window in turn, with the progress line; the totals into pc. 0 or -1 (rl_lasterr). */
static int ppl_windows(ppl_cmd *pc) {
    ppl_run *r = &pc->r;
    const int n_win = pc->n_win;
    ppl_window *wins = pc->wins;
    bool json = pc->o.json;
    bool tty = !json && isatty(fileno(stderr));
    if (!json)
        fprintf(stderr, "redlite perplexity: %zu tokens, %d windows of %d (%d scored each), batch %d%s\n",
                pc->ids.n, n_win, r->ctx, r->ctx - r->first - 1, r->batch, pc->add_bos ? ", BOS first" : "");
    double t1 = rl_now(), nll = 0, nll2 = 0;
    long long count = 0;
    top_stats ts = {0};
    cli_progress pg; /* log lines where stderr is not a terminal (the live line is below) */
    progress_begin(&pg, "perplexity", "window", "windows", !tty && !isatty(fileno(stderr)));
    for (int w = 0; w < n_win; w++) {
        double tw = rl_now();
        wins[w].start = w * r->ctx;
        memcpy(r->win, pc->ids.ids + wins[w].start, sizeof(int32_t) * (size_t)r->ctx);
        if (pc->add_bos) r->win[0] = tokenizer_bos(pc->tok);
        if (ppl_window_eval(r, w, r->win, &wins[w], &nll2, &ts)) return -1;
        wins[w].seconds = rl_now() - tw;
        nll += wins[w].nll;
        count += wins[w].n_scored;
        progress_update(&pg, w + 1, n_win);
        if (tty) {
            double el = rl_now() - t1;
            fprintf(stderr, "\r  window %d/%d  ppl %.4f  %.2f s/window  ETA %.0f s   ", w + 1, n_win,
                    exp(nll / (double)count), el / (w + 1), el / (w + 1) * (n_win - w - 1));
            fflush(stderr);
        }
    }
    if (tty) fputc('\n', stderr);
    pc->secs = rl_now() - t1;
    pc->t1 = t1, pc->nll = nll, pc->nll2 = nll2, pc->count = count, pc->ts = ts;
    return 0;
}

/* The totals: mean NLL, PPL, llama.cpp's ± of the mean NLL, tokens evaluated per second. */
static void ppl_stats(const ppl_cmd *pc, double *mean, double *ppl, double *sd, double *tok_s) {
    const long long count = pc->count;
    *mean = pc->nll / (double)count, *ppl = exp(*mean);
    double var = pc->nll2 / (double)count - *mean * *mean;
    *sd = var > 0 && count > 1 ? sqrt(var / (double)(count - 1)) : 0; /* llama.cpp's ± */
    *tok_s = (double)pc->n_win * pc->r.ctx / (pc->secs > 0 ? pc->secs : 1e-9);
}

/* The JSON report on stdout. 0 or -1 (rl_lasterr). */
static int ppl_report_json(const ppl_cmd *pc) {
    const ppl_run *r = &pc->r;
    const ppl_window *wins = pc->wins;
    const long long count = pc->count;
    const top_stats ts = pc->ts;
    double mean, ppl, sd, tok_s;
    ppl_stats(pc, &mean, &ppl, &sd, &tok_s);
    json_writer j;
    cli_json_begin(&j);
    json_kv_str(&j, "model", pc->o.model);
    json_kv_str(&j, "file", pc->o.file);
    json_kv_str(&j, "backend", engine_backend_name(pc->e));
    json_kv_bool(&j, "reference", pc->o.reference);
    json_kv_int(&j, "n_tokens", (int64_t)pc->ids.n);
    json_kv_int(&j, "n_ctx", r->ctx);
    json_kv_int(&j, "n_batch", r->batch);
    json_kv_int(&j, "first", r->first);
    json_kv_bool(&j, "add_bos", pc->add_bos);
    json_kv_int(&j, "n_windows", pc->n_win);
    json_kv_int(&j, "n_windows_max", pc->n_win_max);
    json_kv_int(&j, "n_scored", count);
    json_kv_num(&j, "nll", mean);
    json_kv_num(&j, "ppl", ppl);
    json_kv_num(&j, "ppl_err", sd * ppl);
    json_kv_num(&j, "load_s", pc->t1 - pc->t0);
    json_kv_num(&j, "seconds", pc->secs);
    json_kv_num(&j, "tok_s", tok_s);
    json_key(&j, "windows");
    json_arr_begin(&j);
    for (int w = 0; w < pc->n_win; w++) {
        json_obj_begin(&j);
        json_kv_int(&j, "start", wins[w].start);
        json_kv_int(&j, "n_scored", wins[w].n_scored);
        json_kv_num(&j, "nll_sum", wins[w].nll);
        json_kv_num(&j, "nll", wins[w].nll / wins[w].n_scored);
        json_kv_num(&j, "ppl", exp(wins[w].nll / wins[w].n_scored));
        json_kv_num(&j, "seconds", wins[w].seconds);
        json_obj_end(&j);
    }
    json_arr_end(&j);
    json_kv_int(&j, "n_top1", ts.n_top1);
    json_kv_num(&j, "top1", (double)ts.n_top1 / (double)count);
    if (pc->o.mtp_accept) {
        json_key(&j, "mtp");
        json_obj_begin(&j);
        json_kv_int(&j, "n_drafts", count);
        json_kv_int(&j, "n_accepted", ts.n_accept);
        json_kv_num(&j, "accept_rate", (double)ts.n_accept / (double)count);
        json_kv_int(&j, "n_text_match", ts.n_draft_text);
        json_kv_num(&j, "text_match_rate", (double)ts.n_draft_text / (double)count);
        json_obj_end(&j);
    }
    return cli_json_end(&j) ? -1 : 0;
}

/* The text report: the result on stdout, the timing on stderr. */
static void ppl_report_text(const ppl_cmd *pc) {
    const long long count = pc->count;
    const top_stats ts = pc->ts;
    double mean, ppl, sd, tok_s;
    ppl_stats(pc, &mean, &ppl, &sd, &tok_s);
    printf("perplexity: PPL = %.4f +/- %.5f  (mean NLL %.6f nats over %lld tokens: %d windows of %d)\n", ppl,
           sd * ppl, mean, count, pc->n_win, pc->r.ctx);
    printf("top-1: %.2f %% of the scored tokens are the model's argmax\n",
           100.0 * (double)ts.n_top1 / (double)count);
    if (pc->o.mtp_accept)
        printf(
            "mtp: %lld / %lld drafts accepted (%.2f %%: draft = the trunk's greedy token); %.2f %% equal the "
            "text's token\n",
            ts.n_accept, count, 100.0 * (double)ts.n_accept / (double)count,
            100.0 * (double)ts.n_draft_text / (double)count);
    fprintf(stderr, "redlite perplexity: %.2f s (%.1f tok/s evaluated), load %.2f s\n", pc->secs, tok_s,
            pc->t1 - pc->t0);
}

/* Release everything; rc, or 1 where --tokens-out could not be written out. */
static int ppl_cmd_free(ppl_cmd *pc, int rc) {
    if (pc->r.tokens_out && fclose(pc->r.tokens_out) && rc == 0)
        rc = cli_fail(CMD, 1, "cannot write %s: %s", pc->o.tokens_out, strerror(errno));
    free(pc->wins);
    ppl_free(&pc->r);
    session_free(pc->r.s);
    tok_ids_free(&pc->ids);
    session_model_close(pc->sm);
    free(pc->text);
    return rc;
}

int cmd_perplexity(int argc, char **argv) {
    ppl_cmd pc = {0};
    cli_opts *o = &pc.o;
    opts_defaults(o);
    o->n_ctx = 512;
    o->chunks = 0; /* all windows */
    o->batch = 64; /* every row's logits are kept: batch x n_vocab floats */
    int pr = opts_parse(&PERPLEXITY, argc, argv, o);
    if (pr) return pr == OPTS_HELP ? 0 : pr;
    if (!o->file)
        return cli_fail(CMD, 2, "need -f FILE with the text to score (see redlite perplexity --help)");
    if (o->reference && o->backend && strcmp(o->backend, "cpu"))
        return cli_fail(CMD, 2, "--reference is the CPU reference; drop --backend %s", o->backend);

    pc.text = cli_read_file(o->file, &pc.tlen);
    if (!pc.text) return cli_fail(CMD, 1, "%s", rl_lasterr());
    if (pc.tlen > 0 && pc.text[pc.tlen - 1] == '\n') pc.text[--pc.tlen] = 0; /* as llama.cpp's -f */

    int rc = ppl_setup(&pc);
    if (!rc) rc = ppl_windows(&pc);
    if (!rc && o->json) rc = ppl_report_json(&pc);
    else if (!rc) ppl_report_text(&pc);
    if (rc < 0) rc = cli_fail(CMD, 1, "%s", rl_lasterr()[0] ? rl_lasterr() : "out of memory");
    return ppl_cmd_free(&pc, rc);
}
