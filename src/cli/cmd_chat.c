/* cmd_chat.c — `redlite chat`: interactive, streaming, multi-turn chat in the terminal.
 *
 * Each turn renders the whole conversation with the model's chat template (src/text/chat.h),
 * tokenises it and hands it to the session (src/run/session.h), which evaluates only what its
 * context does not hold yet. When the re-tokenised history differs from what was generated
 * (BPE can spell the same text differently), the session restores its checkpoint taken after
 * the previous prompt, so only the last answer is evaluated again.
 *
 * Ctrl-C stops an answer (a SIGINT handler sets a flag the decoding loop checks between
 * tokens); Ctrl-C at the prompt exits with status 130, Ctrl-D (end of input) with 0. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "text/chat.h"
#include "cli/cli.h"
#include "base/common.h"
#include "cli/opts.h"
#include "text/tokenizer.h"

static const char *CMD = "chat";

static const opts_cmd CHAT = {
    "chat", CMD_CHAT, "redlite chat -m MODEL [options]",
    "Chat with the model in the terminal. Answers stream as they are generated; the\n"
    "context is kept between turns, so only each new turn is evaluated.",
    "In the chat: /reset starts over, /help lists commands, /quit (or Ctrl-D) exits.\n"
    "Ctrl-C stops an answer; at the prompt it exits (status 130). A line ending in \\\n"
    "continues on the next line. A turn that no longer fits the context, or a --history\n"
    "file that cannot be written, makes the exit status 1 (with -p: at once).\n"};

static atomic_int g_interrupt; /* set by the SIGINT handler (a lock-free atomic: async-signal-safe) */
static void on_sigint(int sig) {
    (void)sig;
    g_interrupt = 1;
}

/* The conversation; the session holds the tokens, the context and its checkpoints. */
typedef struct {
    session_model *m;
    session *s;
    const tokenizer *tok;
    sampler *smp;           /* one random stream across the turns */
    chat_format fmt;
    chat_conv conv;
    int n_sys;              /* 1 when conv starts with the system prompt */
    cli_opts o;
    long long n_predict;
    const char *history;
    bool failed;            /* a turn was refused or the history not written: exit 1 */
    bool warned;            /* the trained-context warning was shown */
} chat_state;

/* ---- history file ------------------------------------------------------------------------ */

static void hist_write_escaped(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '\n') fputs("\\n", f);
        else if (*s == '\\') fputs("\\\\", f);
        else fputc(*s, f);
    }
}

/* 0, or -1 after printing why (the turn is lost from the file, not from the chat). */
static int hist_append(const chat_state *S, const char *user, const char *answer) {
    if (!S->history) return 0;
    FILE *f = fopen(S->history, "a");
    if (!f) return cli_fail(CMD, -1, "cannot append to %s: %s", S->history, strerror(errno));
    fputs("user: ", f);
    hist_write_escaped(f, user);
    fputs("\nassistant: ", f);
    hist_write_escaped(f, answer);
    fputc('\n', f);
    bool err = ferror(f) != 0;
    if (fclose(f) || err) return cli_fail(CMD, -1, "error writing %s (disk full?)", S->history);
    return 0;
}

/* Load "user: ..." / "assistant: ..." lines; other lines are ignored. Returns turns or -1. */
static int hist_load(chat_state *S) {
    FILE *f = fopen(S->history, "r");
    if (!f) return errno == ENOENT ? 0 : rl_seterr("cannot read %s: %s", S->history, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int n = 0, rc = 0;
    while ((len = getline(&line, &cap, f)) > 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        chat_role role;
        const char *t;
        if (!strncmp(line, "user: ", 6)) role = CHAT_USER, t = line + 6;
        else if (!strncmp(line, "assistant: ", 11)) role = CHAT_ASSISTANT, t = line + 11;
        else continue;
        char *u = malloc(strlen(t) + 1), *o = u;
        if (!u) {
            rc = rl_seterr("out of memory (history)");
            break;
        }
        for (; *t; t++) {
            if (*t == '\\' && t[1] == 'n') *o++ = '\n', t++;
            else if (*t == '\\' && t[1] == '\\') *o++ = '\\', t++;
            else *o++ = *t;
        }
        *o = 0;
        int r = chat_conv_add(&S->conv, role, u);
        free(u);
        if (r < 0) {
            rc = -1;
            break;
        }
        n += role == CHAT_USER;
    }
    free(line);
    fclose(f);
    return rc < 0 ? -1 : n;
}

/* ---- one turn ---------------------------------------------------------------------------- */

static void reset_conversation(chat_state *S) {
    chat_conv_truncate(&S->conv, S->n_sys);
    session_reset(S->s);
}

/* 0 ok (including an interrupted turn), 1 refused (does not fit the context) or not written
 * to --history (the message is printed), -1 fatal. The session reuses what its
 * context holds: only the new tail of the rendered conversation is evaluated (or, when the
 * re-tokenised history differs from what was generated, the tail after the last checkpoint
 * that is a prefix: bit-identical to evaluating it all). */
static int turn(chat_state *S, const char *user) {
    int mi = chat_conv_add(&S->conv, CHAT_USER, user);
    if (mi < 0) return -1;
    chat_buf text = {0};
    tok_ids ids = {0};
    session_gen_result g = {0};
    int rc = -1;
    if (chat_render(&S->fmt, &S->conv, NULL, &text) ||
        tokenizer_encode(S->tok, text.p ? text.p : "", text.n, TOK_PARSE_SPECIAL, &ids)) {
        if (!rl_lasterr()[0]) rl_seterr("out of memory (prompt)");
        goto out;
    }
    int n_ctx = session_n_ctx(S->s);
    if ((long long)ids.n + 1 >= n_ctx) {
        fprintf(stderr, "redlite chat: the conversation (%zu tokens) no longer fits the context (%d): "
                        "/reset, or restart with a larger --ctx\n", ids.n, n_ctx);
        chat_conv_truncate(&S->conv, mi);
        rc = 1;
        goto out;
    }
    cli_warn_ctx_train(CMD, S->s, (int)ids.n, &S->warned);
    session_feed_stats st;
    cli_progress prog;
    session_feed_opts fo = cli_feed_opts(&prog, &S->o, &g_interrupt);
    int fr = session_feed(S->s, ids.ids, (int)ids.n, &fo, &st);
    cli_feed_done(&prog);
    if (fr) {
        if (!g_interrupt) goto out;
        fprintf(stderr, "[stopped]\n"); /* Ctrl-C while the prompt was evaluated */
        chat_conv_truncate(&S->conv, mi);
        rc = 0;
        goto out;
    }
    session_gen_params gp = {.smp = S->smp, .n_predict = S->n_predict, .stops = S->o.stops, .n_stops = S->o.n_stops,
                             .cancel = &g_interrupt, .on_text = cli_emit_stdout, .decode_flags = TOK_DECODE_REPLACE,
                             .spec = S->o.spec, .draft_max = S->o.draft_max,
                             .draft_min = S->o.draft_min};
    if (session_generate(S->s, &gp, &g)) goto out;
    if (chat_conv_add(&S->conv, CHAT_ASSISTANT, g.text) < 0) goto out;
    fputc('\n', stdout);
    fflush(stdout);
    if (g.reason == SESSION_CANCELLED) fprintf(stderr, "[stopped]\n");
    if (g.reason == SESSION_CONTEXT) fprintf(stderr, "[context full: /reset to start over]\n");
    char drafts[64] = "";
    if (g.n_drafted) snprintf(drafts, sizeof drafts, " | drafts %lld/%lld accepted", g.n_accepted, g.n_drafted);
    fprintf(stderr, "[prompt %d tok, %.1f tok/s | answer %zu tok, %.1f tok/s%s | %s]\n", st.n_evaluated,
            st.n_evaluated / (st.seconds > 0 ? st.seconds : 1e-9), g.ids.n,
            g.ids.n / (g.seconds > 0 ? g.seconds : 1e-9), drafts,
            g.reason == SESSION_CANCELLED ? "interrupted" : session_reason_name(g.reason));
    rc = hist_append(S, user, g.text) ? 1 : 0;
out:
    g_interrupt = 0;
    session_gen_result_free(&g);
    tok_ids_free(&ids);
    chat_buf_free(&text);
    return rc;
}

/* ---- input ------------------------------------------------------------------------------- */

/* Read one message (lines ending in '\' continue). Returns 1 with *out set, 0 at end of
 * input, 130 when interrupted. */
static int read_message(bool tty, char **out) {
    chat_buf msg = {0};
    char *line = NULL;
    size_t cap = 0;
    int rc = 0;
    for (bool more = true; more;) {
        if (tty) {
            fputs(msg.n ? "... " : "> ", stdout);
            fflush(stdout);
        }
        errno = 0;
        ssize_t len = getline(&line, &cap, stdin);
        if (len < 0) {
            if (g_interrupt) rc = 130;
            else if (msg.n) rc = 1; /* end of input after a continued line: send what we have */
            clearerr(stdin);
            break;
        }
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        more = len > 0 && line[len - 1] == '\\';
        if (more) line[--len] = 0;
        if (msg.n) chat_buf_putc(&msg, '\n');
        chat_buf_put(&msg, line, (size_t)len);
        rc = 1;
    }
    free(line);
    if (rc == 1) {
        chat_buf_putc(&msg, 0);
        *out = chat_buf_take(&msg, NULL);
        if (!*out) rc = 0;
    } else {
        chat_buf_free(&msg);
    }
    return rc;
}

static void help(void) {
    fputs("commands:\n"
          "  /reset   forget the conversation (keeps the system prompt)\n"
          "  /help    this list\n"
          "  /quit    leave (also /exit, Ctrl-D)\n"
          "Ctrl-C stops an answer; at the prompt it leaves. End a line with \\ to continue it.\n",
          stdout);
}

int cmd_chat(int argc, char **argv) {
    cli_opts o;
    opts_defaults(&o);
    o.n_predict = -1;
    o.n_ctx = 4096;
    o.sp.temp = 0.7f;
    o.sp.min_p = 0.0f;
    o.checkpoints = 4; /* the next turn restores the last prompt's end (re-tokenised answers) */
    int r = opts_parse(&CHAT, argc, argv, &o);
    if (r) return r == OPTS_HELP ? 0 : r;
    const char *model = o.model, *system = o.system, *prompt = o.prompt, *history = o.history;
    long long n_ctx = o.n_ctx, batch = o.batch;

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: a Ctrl-C at the prompt interrupts the read */
    sigaction(SIGINT, &sa, NULL);

    chat_state S;
    memset(&S, 0, sizeof S);
    S.o = o;
    S.n_predict = o.n_predict;
    S.history = history;
    chat_conv_init(&S.conv);
    int rc = 1;
    bool tty = isatty(0);
    if (isatty(2)) fprintf(stderr, "loading %s ...\n", model);
    double t0 = rl_now();
    if (!(S.m = cli_model_open(&o))) goto fail;
    if (!(S.tok = session_model_tokenizer(S.m))) goto fail;
    if (g_interrupt) {
        rc = 130;
        goto done;
    }
    if ((rc = cli_spec_check(CMD, &S.o, S.m))) goto done;
    rc = 1;
    S.fmt = chat_format_from_gguf(engine_gguf(session_model_engine(S.m)));
    if (S.o.sp.repeat_last_n < 0) S.o.sp.repeat_last_n = (int32_t)n_ctx;
    int V = tokenizer_n_vocab(S.tok);
    if (engine_hparams(session_model_engine(S.m))->n_vocab < V) V = engine_hparams(session_model_engine(S.m))->n_vocab;
    if (!(S.s = cli_session_new(&o, S.m, (int)n_ctx, (int)batch)) || !(S.smp = sampler_new(&S.o.sp, V)))
        goto fail;
    if (system) {
        if (chat_conv_add(&S.conv, CHAT_SYSTEM, system) < 0) goto fail;
        S.n_sys = 1;
    }
    if (history) {
        int n = hist_load(&S);
        if (n < 0) goto fail;
        if (n > 0) fprintf(stderr, "(%d earlier turns from %s)\n", n, history);
    }
    fprintf(stderr, "redlite chat: %s loaded in %.1f s (template: %s%s, context %lld). /help for commands.\n", model,
            rl_now() - t0, chat_family_name(S.fmt.family), S.fmt.known ? "" : " fallback", n_ctx);

    if (prompt) {
        int t = turn(&S, prompt);
        if (t < 0) goto fail;
        rc = t ? 1 : 0;
        goto done;
    }
    for (;;) {
        char *msg = NULL;
        int r = read_message(tty, &msg);
        if (r == 130) {
            fputc('\n', stdout);
            rc = 130;
            break;
        }
        if (r == 0) {
            if (tty) fputc('\n', stdout);
            rc = 0;
            break;
        }
        const char *m = msg;
        while (*m == ' ' || *m == '\t') m++;
        if (!*m) {
            free(msg);
            continue;
        }
        if (!strcmp(m, "/quit") || !strcmp(m, "/exit")) {
            free(msg);
            rc = 0;
            break;
        } else if (!strcmp(m, "/reset")) {
            reset_conversation(&S);
            fputs("(conversation reset)\n", stdout);
        } else if (!strcmp(m, "/help")) {
            help();
        } else if (m[0] == '/' && !strchr(m, ' ') && !strchr(m, '\n')) {
            printf("unknown command %s (/help lists them)\n", m);
        } else {
            int t = turn(&S, msg);
            if (t < 0) {
                free(msg);
                goto fail;
            }
            S.failed |= t > 0;
        }
        free(msg);
        fflush(stdout);
    }
    goto done;
fail:
    rc = cli_fail(CMD, 1, "%s", rl_lasterr()[0] ? rl_lasterr() : "out of memory");
done:
    fflush(stdout);
    if (S.s && o.stats) session_print_cache_stats(S.s, stderr, true);
    if (rc == 0 && S.failed) rc = 1;
    chat_conv_free(&S.conv);
    sampler_free(S.smp);
    session_free(S.s);
    session_model_close(S.m);
    return rc;
}
