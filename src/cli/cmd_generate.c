/* cmd_generate.c — `redlite generate`: one-shot completion of a prompt.
 *
 * With --raw the prompt is completed as is; otherwise it becomes the user turn of a
 * conversation rendered with the model's chat template (src/text/chat.h; optional --system). The
 * text is tokenised with special-token parsing on (so "<|im_start|>" written in the prompt is
 * the control token), evaluated with a chunked prefill, then tokens are sampled (greedy by
 * default; sampler flags as llama.cpp) until -n, an end-of-generation token, a --stop string or
 * the context end. Output streams to stdout as whole UTF-8 characters. --json prints one
 * object instead: prompt ids, generated ids, text, stop reason and timings. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "text/chat.h"
#include "cli/cli.h"
#include "base/common.h"
#include "cli/opts.h"
#include "base/json.h"
#include "text/tokenizer.h"

static const char *CMD = "generate";

static const opts_cmd GENERATE = {
    "generate", CMD_GENERATE, "redlite generate -m MODEL (-p TEXT | -f FILE) [options]",
    "Complete a prompt once and exit. Without --raw the prompt is the user turn of a\n"
    "conversation rendered with the model's chat template. The answer streams to stdout.",
    "Defaults: greedy (--temp 0: the answer is the same on every run, which the oracle tests and\n"
    "the README's examples rely on); with --temp > 0 the sampling defaults of chat and serve:\n"
    "top-k 20, top-p 0.8, min-p 0 (Qwen's recommended values; chat and serve use --temp 0.7).\n"};

static void json_ids(json_writer *j, const char *key, const int32_t *ids, size_t n) {
    json_key(j, key);
    json_arr_begin(j);
    for (size_t i = 0; i < n; i++) json_int(j, ids[i]);
    json_arr_end(j);
}

/* process CPU seconds (all threads): decode work measured apart from other load (spec_bench) */
static double decode_cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int cmd_generate(int argc, char **argv) {
    cli_opts o;
    opts_defaults(&o);
    o.sp.temp = 0;      /* greedy; the other sampling defaults are chat's and serve's */
    o.checkpoints = -1; /* one feed: a checkpoint would only copy the state */
    int r = opts_parse(&GENERATE, argc, argv, &o);
    if (r) return r == OPTS_HELP ? 0 : r;
    const char *prompt = o.prompt, *file = o.file, *system = o.system;
    long long n_predict = o.n_predict, n_ctx = o.n_ctx, batch = o.batch;
    bool raw = o.raw, json = o.json, stats = o.stats;
    if (!prompt && !file) return cli_fail(CMD, 2, "need -p TEXT or -f FILE (see redlite generate --help)");
    if (prompt && file) return cli_fail(CMD, 2, "give either -p or -f, not both");
    if (raw && system) return cli_fail(CMD, 2, "--system needs the chat template (drop --raw)");
    size_t plen = 0;
    char *owned = NULL;
    if (file) {
        if (!(owned = cli_read_file(file, &plen))) return cli_fail(CMD, 1, "%s", rl_lasterr());
        prompt = owned;
    } else {
        plen = strlen(prompt);
    }

    int rc = 1;
    double t0 = rl_now();
    session_model *sm = cli_model_open(&o);
    const tokenizer *tok = NULL;
    session *S = NULL;
    tok_ids ids = {0};
    session_gen_result g = {0};
    chat_conv conv;
    chat_conv_init(&conv);
    chat_buf text = {0};
    if (!sm) goto fail;
    if (!(tok = session_model_tokenizer(sm))) goto fail;
    if (raw) {
        chat_buf_put(&text, prompt, plen);
    } else {
        chat_format fmt = chat_format_from_gguf(engine_gguf(session_model_engine(sm)));
        if ((system && chat_conv_add(&conv, CHAT_SYSTEM, system) < 0) ||
            chat_conv_add(&conv, CHAT_USER, prompt) < 0 || chat_render(&fmt, &conv, NULL, &text))
            goto fail;
    }
    if (text.oom || tokenizer_encode(tok, text.p ? text.p : "", text.n, TOK_PARSE_SPECIAL, &ids)) {
        rl_seterr("out of memory (prompt)");
        goto fail;
    }
    if (ids.n == 0) {
        rc = cli_fail(CMD, 2, "the prompt is empty");
        goto done;
    }
    if (n_ctx == 0) {
        long long want = (long long)ids.n + (n_predict < 0 ? 4096 : n_predict);
        n_ctx = want < 4096 ? 4096 : want;
    }
    if ((long long)ids.n >= n_ctx) {
        rc = cli_fail(CMD, 2, "the prompt has %zu tokens, more than the context (%lld); raise --ctx", ids.n,
                      n_ctx);
        goto done;
    }
    if ((rc = cli_spec_check(CMD, &o, sm))) goto done;
    rc = 1;
    if (!(S = cli_session_new(&o, sm, (int)n_ctx, (int)batch))) goto fail;
    double t1 = rl_now();
    cli_warn_ctx_train(CMD, S, (int)ids.n, NULL);
    session_feed_stats fst;
    cli_progress prog;
    session_feed_opts fo = cli_feed_opts(&prog, &o, NULL);
    int fr = session_feed(S, ids.ids, (int)ids.n, &fo, &fst);
    cli_feed_done(&prog);
    if (fr) goto fail;
    double t2 = rl_now(), c2 = decode_cpu_now();
    session_gen_params gp = {.sp = o.sp,
                             .n_predict = n_predict,
                             .stops = o.stops,
                             .n_stops = o.n_stops,
                             .on_text = json ? NULL : cli_emit_stdout,
                             .spec = o.spec,
                             .draft_max = o.draft_max,
                             .draft_min = o.draft_min};
    if (session_generate(S, &gp, &g)) goto fail;
    double decode_cpu = decode_cpu_now() - c2;
    double pp = (double)ids.n / (t2 - t1 > 0 ? t2 - t1 : 1e-9);
    double tg = g.ids.n / (g.seconds > 0 ? g.seconds : 1e-9);
    if (json) {
        json_writer j;
        cli_json_begin(&j);
        json_ids(&j, "prompt_ids", ids.ids, ids.n);
        json_ids(&j, "generated_ids", g.ids.ids, g.ids.n);
        json_key(&j, "text");
        json_strn(&j, g.text, g.text_len);
        json_kv_int(&j, "n_prompt", (int64_t)ids.n);
        json_kv_int(&j, "n_generated", (int64_t)g.ids.n);
        json_kv_str(&j, "stop_reason", session_reason_name(g.reason));
        json_kv_uint(&j, "seed", g.seed);
        json_kv_num(&j, "load_s", t1 - t0);
        json_kv_num(&j, "prompt_s", t2 - t1);
        json_kv_num(&j, "decode_s", g.seconds);
        json_kv_num(&j, "prompt_tok_s", pp);
        json_kv_num(&j, "decode_tok_s", tg);
        json_kv_num(&j, "decode_cpu_s", decode_cpu); /* all threads: the work, whatever else runs */
        json_kv_str(&j, "spec", o.spec_name);
        json_kv_int(&j, "n_drafted", g.n_drafted);
        json_kv_int(&j, "n_accepted", g.n_accepted);
        json_kv_int(&j, "n_verifies", g.n_verifies);
        if (cli_json_end(&j)) goto fail;
    } else {
        fputc('\n', stdout);
    }
    if (stats) session_print_cache_stats(S, stderr, true);
    if (stats && o.spec != SPEC_NONE)
        fprintf(stderr, "redlite: speculation %s: %lld of %lld drafts accepted (%.0f%%), %lld verifies\n",
                o.spec_name, g.n_accepted, g.n_drafted,
                g.n_drafted ? 100.0 * (double)g.n_accepted / (double)g.n_drafted : 0.0, g.n_verifies);
    if (stats)
        fprintf(stderr,
                "redlite: load %.2f s | prompt %zu tok %.1f tok/s | decode %zu tok %.2f tok/s | stop: %s | "
                "peak RSS %.0f MiB\n",
                t1 - t0, ids.n, pp, g.ids.n, tg, session_reason_name(g.reason), rl_peak_rss() / 1048576.0);
    rc = 0;
    goto done;
fail:
    rc = cli_fail(CMD, 1, "%s", rl_lasterr()[0] ? rl_lasterr() : "out of memory");
done:
    session_gen_result_free(&g);
    chat_buf_free(&text);
    chat_conv_free(&conv);
    free(owned);
    tok_ids_free(&ids);
    session_free(S);
    session_model_close(sm);
    return rc;
}
