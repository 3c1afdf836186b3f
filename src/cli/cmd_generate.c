/* cmd_generate.c — `redlite generate`: one-shot completion of a prompt.
 *
 * With --raw the prompt is completed as is; otherwise it becomes the user turn of a
 * conversation rendered with the model's chat template (src/chat.h; optional --system). The
 * text is tokenised with special-token parsing on (so "<|im_start|>" written in the prompt is
 * the control token), evaluated with a chunked prefill, then tokens are sampled (greedy by
 * default; sampler flags as llama.cpp) until -n, an end-of-generation token, a --stop string or
 * the context end. Output streams to stdout as whole UTF-8 characters. --json prints one
 * object instead: prompt ids, generated ids, text, stop reason and timings. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "cli.h"
#include "common.h"
#include "gen.h"
#include "json.h"
#include "spec.h"
#include "tokenizer.h"

static const char *CMD = "generate";

static void usage(FILE *out) {
    fprintf(out,
            "usage: redlite generate -m MODEL (-p TEXT | -f FILE) [options]\n"
            "\n"
            "Complete a prompt once and exit.\n"
            "\n"
            "  -m, --model FILE     GGUF model (qwen3next)\n"
            "  -p, --prompt TEXT    prompt text (special tokens like <|im_start|> are parsed)\n"
            "  -f, --file FILE      read the prompt from FILE (\"-\" = stdin)\n"
            "  -n, --n-predict N    tokens to generate (default 128; -1 = until the end of the answer)\n"
            "  --raw                no chat template: complete the text as is\n"
            "  --system TEXT        system message (chat template mode)\n"
            "  --stats              print timings to stderr\n"
            "  --json               print one JSON object instead of streaming text\n"
            "  -h, --help           this help\n"
            "\n%s\n%s"
            "\nDefaults: greedy (--temp 0); with --temp > 0: top-k 40, top-p 0.95, min-p 0.05.\n",
            GEN_FLAGS_HELP, GEN_MODEL_HELP);
}

static int emit_stdout(void *ud, int32_t token, const char *s, size_t n) {
    (void)ud;
    (void)token;
    if (n) {
        fwrite(s, 1, n, stdout);
        fflush(stdout);
    }
    return 0;
}

static void json_ids(json_writer *j, const char *key, const int32_t *ids, size_t n) {
    json_key(j, key);
    json_arr_begin(j);
    for (size_t i = 0; i < n; i++) json_int(j, ids[i]);
    json_arr_end(j);
}

int cmd_generate(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL, *file = NULL, *system = NULL;
    long long n_predict = 128, n_ctx = 0, batch = 64;
    bool raw = false, json = false, stats = false;
    gen_flags gf;
    gen_model_flags mf = {0};
    gen_flags_init(&gf, false);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int r = gen_flags_parse(CMD, argc, argv, &i, &gf);
        if (r == 0) r = gen_model_flags_parse(CMD, argc, argv, &i, &mf);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (cli_is_help(a)) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(model = cli_need_value(CMD, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            if (!(prompt = cli_need_value(CMD, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            if (!(file = cli_need_value(CMD, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--system")) {
            if (!(system = cli_need_value(CMD, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict") || !strcmp(a, "--max-tokens")) {
            if (!(v = cli_need_value(CMD, argc, argv, &i)) || !cli_parse_int(CMD, a, v, -1, 1 << 24, &n_predict))
                return 2;
        } else if (!strcmp(a, "--raw")) {
            raw = true;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--stats")) {
            stats = true;
        } else {
            return cli_fail(CMD, 2, "unknown option '%s' (see redlite generate --help)", a);
        }
    }
    if (!model) return cli_fail(CMD, 2, "need -m MODEL (see redlite generate --help)");
    if (mf.n_ctx) n_ctx = mf.n_ctx;
    if (mf.batch) batch = mf.batch;
    if (!prompt && !file) return cli_fail(CMD, 2, "need -p TEXT or -f FILE (see redlite generate --help)");
    if (prompt && file) return cli_fail(CMD, 2, "give either -p or -f, not both");
    if (raw && system) return cli_fail(CMD, 2, "--system needs the chat template (drop --raw)");
    size_t plen = 0;
    char *owned = NULL;
    if (file) {
        if (!(owned = gen_read_file(file, &plen))) return cli_fail(CMD, 1, "%s", rl_lasterr());
        prompt = owned;
    } else {
        plen = strlen(prompt);
    }

    int rc = 1;
    double t0 = rl_now();
    session_model *sm = gen_model_open(&mf, model);
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
        if ((system && chat_conv_add(&conv, CHAT_SYSTEM, system) < 0) || chat_conv_add(&conv, CHAT_USER, prompt) < 0 ||
            chat_render(&fmt, &conv, NULL, &text))
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
        rc = cli_fail(CMD, 2, "the prompt has %zu tokens, more than the context (%lld); raise --ctx", ids.n, n_ctx);
        goto done;
    }
    if ((rc = gen_spec_check(CMD, &gf, &mf, sm))) goto done;
    rc = 1;
    if (!(S = gen_session_new(&mf, sm, (int)n_ctx, (int)batch, !json))) goto fail;
    double t1 = rl_now();
    session_feed_stats fst;
    if (session_feed(S, ids.ids, (int)ids.n, NULL, &fst)) goto fail;
    double t2 = rl_now();
    session_gen_params gp = {.sp = gf.sp, .n_predict = n_predict, .stops = gf.stops, .n_stops = gf.n_stops,
                             .on_text = json ? NULL : emit_stdout, .spec = gf.spec, .draft_max = gf.draft_max};
    if (session_generate(S, &gp, &g)) goto fail;
    double pp = (double)ids.n / (t2 - t1 > 0 ? t2 - t1 : 1e-9);
    double tg = g.ids.n / (g.seconds > 0 ? g.seconds : 1e-9);
    if (json) {
        json_writer j;
        json_init(&j, stdout, 0);
        json_obj_begin(&j);
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
        json_kv_str(&j, "spec", spec_mode_name(gf.spec));
        json_kv_int(&j, "n_drafted", g.n_drafted);
        json_kv_int(&j, "n_accepted", g.n_accepted);
        json_kv_int(&j, "n_verifies", g.n_verifies);
        json_obj_end(&j);
        fputc('\n', stdout);
        if (json_finish(&j)) {
            rl_seterr("cannot write the JSON output");
            goto fail;
        }
    } else {
        fputc('\n', stdout);
    }
    if (stats) session_print_cache_stats(S, stderr);
    if (stats && gf.spec != SPEC_NONE)
        fprintf(stderr, "redlite: speculation %s: %lld of %lld drafts accepted (%.0f%%), %lld verifies\n",
                spec_mode_name(gf.spec), g.n_accepted, g.n_drafted,
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
