/* cmd_chat.c — `redlite chat`: interactive, streaming, multi-turn chat in the terminal.
 *
 * Each turn renders the whole conversation with the model's chat template (src/text/chat.h),
 * tokenises it and hands it to the session (src/run/session.h), which evaluates only what its
 * context does not hold yet. When the re-tokenised history differs from what was generated
 * (BPE can spell the same text differently), the session restores its checkpoint taken after
 * the previous prompt, so only the last answer is evaluated again.
 *
 * Ctrl-C stops an answer (a SIGINT handler sets a flag the decoding loop checks between
 * tokens); Ctrl-C at the prompt exits with status 130, Ctrl-D (end of input) with 0.
 *
 * A line whose first word is /NAME (letters only) is a command, its arguments the rest of the
 * line; "//..." sends "/..." to the model, and a line starting with a path ("/usr/bin ...")
 * goes to the model as it is. The --history file holds "user: " / "assistant: " lines (newlines
 * and backslashes escaped), "assistant (interrupted): " for an answer cut by Ctrl-C, and "/reset"
 * where the conversation was reset; on load, the oldest turns are dropped until the history
 * takes at most half the context, so a long file never stops the chat from starting.
 *
 * On a terminal, what is typed while an answer streams is not echoed into it: echo is off
 * during the turn, and the type-ahead is drained afterwards and shown after the next prompt
 * (a complete line is sent as the next message). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
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
    "In the chat: /reset (or /clear) starts over, /save FILE writes the conversation,\n"
    "/help lists commands, /quit (or Ctrl-D) exits; //text sends /text. Ctrl-C stops an\n"
    "answer; at the prompt it exits (status 130). A line ending in \\ continues on the\n"
    "next line. --history FILE keeps the turns across runs (the oldest are dropped on load\n"
    "until it takes at most half the context). A turn that no longer fits the context, or a\n"
    "--history file that cannot be written, makes the exit status 1 (with -p: at once).\n"};

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
    sampler *smp; /* one random stream across the turns */
    chat_format fmt;
    chat_conv conv;
    int n_sys; /* 1 when conv starts with the system prompt */
    cli_opts o;
    long long n_predict;
    const char *history;
    bool failed;    /* a turn was refused or the history not written: exit 1 */
    bool warned;    /* the trained-context warning was shown */
    bool tty;       /* stdin is a terminal: echo is off while an answer streams */
    chat_buf ahead; /* type-ahead drained after a turn, read before stdin */
} chat_state;

/* ---- history file ------------------------------------------------------------------------ */

static void hist_write_escaped(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '\n') fputs("\\n", f);
        else if (*s == '\\') fputs("\\\\", f);
        else fputc(*s, f);
    }
}

#define HIST_INTERRUPTED "assistant (interrupted): "

/* Write messages [from, n) of the conversation (user and assistant ones) to f. `cut` marks the
 * last message as an answer stopped by Ctrl-C. */
static void hist_write_msgs(FILE *f, const chat_conv *c, int from, bool cut) {
    for (int i = from; i < c->n; i++) {
        const chat_msg *m = &c->msgs[i];
        if (m->role != CHAT_USER && m->role != CHAT_ASSISTANT) continue;
        fputs(m->role == CHAT_USER ? "user: " : cut && i == c->n - 1 ? HIST_INTERRUPTED : "assistant: ", f);
        hist_write_escaped(f, m->content ? m->content : "");
        fputc('\n', f);
    }
}

/* Append to `path` (mode "a") or replace it ("w"): messages [from, n), or the reset marker when
 * from < 0. 0, or -1 after printing why (the turn is lost from the file, not from the chat). */
static int hist_write(const chat_state *S, const char *path, const char *mode, int from, bool cut) {
    FILE *f = fopen(path, mode);
    if (!f)
        return cli_fail(CMD, -1, "cannot %s %s: %s", *mode == 'a' ? "append to" : "write", path,
                        strerror(errno));
    if (from < 0) fputs("/reset\n", f);
    else hist_write_msgs(f, &S->conv, from, cut);
    bool err = ferror(f) != 0;
    if (fclose(f) || err) return cli_fail(CMD, -1, "error writing %s (disk full?)", path);
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
        if (!strcmp(line, "/reset")) { /* the conversation was reset here: forget what came before */
            chat_conv_truncate(&S->conv, S->n_sys);
            n = 0;
            continue;
        }
        if (!strncmp(line, "user: ", 6)) role = CHAT_USER, t = line + 6;
        else if (!strncmp(line, "assistant: ", 11)) role = CHAT_ASSISTANT, t = line + 11;
        else if (!strncmp(line, HIST_INTERRUPTED, strlen(HIST_INTERRUPTED)))
            role = CHAT_ASSISTANT, t = line + strlen(HIST_INTERRUPTED);
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

/* Tokens of the rendered conversation, or -1. */
static long conv_tokens(const chat_state *S, const chat_conv *c) {
    chat_buf text = {0};
    tok_ids ids = {0};
    long n = -1;
    if (!chat_render(&S->fmt, c, NULL, &text) &&
        !tokenizer_encode(S->tok, text.p ? text.p : "", text.n, TOK_PARSE_SPECIAL, &ids))
        n = (long)ids.n;
    tok_ids_free(&ids);
    chat_buf_free(&text);
    return n;
}

/* The system prompt (if any) and the messages from index `from` on, into *out. 0 or -1. */
static int conv_tail(const chat_state *S, int from, chat_conv *out) {
    chat_conv_init(out);
    for (int i = 0; i < S->conv.n; i++)
        if ((i < S->n_sys || i >= from) &&
            chat_conv_add(out, S->conv.msgs[i].role, S->conv.msgs[i].content) < 0) {
            chat_conv_free(out);
            return rl_seterr("out of memory (history)");
        }
    return 0;
}

/* Drop the oldest turns (a turn = a user message and the answers after it) until the conversation
 * takes at most half the context: room for the next turns. The fewest turns are dropped (a binary
 * search over where the kept part starts: O(log turns) renderings of a long file). Returns the
 * turns dropped, or -1. */
static int hist_trim(chat_state *S, int n_ctx) {
    long n = conv_tokens(S, &S->conv);
    if (n < 0) return -1;
    if (n <= n_ctx / 2) return 0;
    int nu = 0, *start = malloc(sizeof(int) * (size_t)(S->conv.n + 1));
    if (!start) return rl_seterr("out of memory (history)");
    for (int i = S->n_sys; i < S->conv.n; i++)
        if (S->conv.msgs[i].role == CHAT_USER) start[nu++] = i;
    start[nu] = S->conv.n; /* keep nothing but the system prompt: always fits (or nothing does) */
    /* keep from start[k]: k = nu always qualifies, k = 0 does not (and with no user turn, which the
     * caller never passes, start[1] is not set: lo = 0) */
    int lo = nu < 1 ? nu : 1, hi = nu, rc = -1;
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        chat_conv t;
        if (conv_tail(S, start[mid], &t)) goto out;
        const long m = conv_tokens(S, &t);
        chat_conv_free(&t);
        if (m < 0) goto out;
        if (m <= n_ctx / 2) hi = mid;
        else lo = mid + 1;
    }
    chat_conv kept;
    if (conv_tail(S, start[lo], &kept)) goto out;
    chat_conv_free(&S->conv);
    S->conv = kept;
    rc = lo;
out:
    free(start);
    return rc;
}

/* ---- the terminal while an answer streams ------------------------------------------------ */

/* Echo off (the line discipline still edits a line being typed, and Ctrl-C still signals, without
 * flushing the input).
 * Returns whether the settings were changed (saved in *old). */
static bool term_quiet(const chat_state *S, struct termios *old) {
    if (!S->tty || tcgetattr(0, old)) return false;
    struct termios t = *old;
    t.c_lflag &= ~(tcflag_t)(ECHO | ECHONL);
    t.c_lflag |= NOFLSH; /* Ctrl-C stopping the answer must not discard what was typed */
    return tcsetattr(0, TCSANOW, &t) == 0;
}

/* Take what was typed during the answer into S->ahead (complete lines and the unfinished one:
 * non-canonical mode releases the latter), then restore the saved settings. */
static void term_restore(chat_state *S, const struct termios *old) {
    struct termios t = *old;
    t.c_lflag &= ~(tcflag_t)(ECHO | ECHONL | ICANON);
    t.c_cc[VMIN] = 0;
    t.c_cc[VTIME] = 0;
    if (!tcsetattr(0, TCSANOW, &t)) {
        char b[256];
        ssize_t k;
        while ((k = read(0, b, sizeof b)) > 0) chat_buf_put(&S->ahead, b, (size_t)k);
    }
    tcsetattr(0, TCSANOW, old);
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
static int turn_run(chat_state *S, const char *user);

/* One turn with the terminal's echo off while it runs (see the top of the file). */
static int turn(chat_state *S, const char *user) {
    struct termios old;
    const bool quiet = term_quiet(S, &old);
    int rc = turn_run(S, user);
    if (quiet) term_restore(S, &old);
    return rc;
}

static int turn_run(chat_state *S, const char *user) {
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
        fprintf(stderr,
                "redlite chat: the conversation (%zu tokens) no longer fits the context (%d): "
                "/reset, or restart with a larger --ctx\n",
                ids.n, n_ctx);
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
    session_gen_params gp = {.smp = S->smp,
                             .n_predict = S->n_predict,
                             .stops = S->o.stops,
                             .n_stops = S->o.n_stops,
                             .cancel = &g_interrupt,
                             .on_text = cli_emit_stdout,
                             .decode_flags = TOK_DECODE_REPLACE,
                             .spec = S->o.spec,
                             .draft_max = S->o.draft_max,
                             .draft_min = S->o.draft_min};
    if (session_generate(S->s, &gp, &g)) goto out;
    if (chat_conv_add(&S->conv, CHAT_ASSISTANT, g.text) < 0) goto out;
    const bool cut = g.reason == SESSION_CANCELLED;
    fputc('\n', stdout);
    fflush(stdout);
    if (g.reason == SESSION_CANCELLED) fprintf(stderr, "[stopped]\n");
    if (g.reason == SESSION_CONTEXT) fprintf(stderr, "[context full: /reset to start over]\n");
    char drafts[64] = "";
    if (g.n_drafted)
        snprintf(drafts, sizeof drafts, " | drafts %lld/%lld accepted", g.n_accepted, g.n_drafted);
    fprintf(stderr, "[prompt %d tok, %.1f tok/s | answer %zu tok, %.1f tok/s%s | %s]\n", st.n_evaluated,
            st.n_evaluated / (st.seconds > 0 ? st.seconds : 1e-9), g.ids.n,
            g.ids.n / (g.seconds > 0 ? g.seconds : 1e-9), drafts,
            g.reason == SESSION_CANCELLED ? "interrupted" : session_reason_name(g.reason));
    rc = S->history && hist_write(S, S->history, "a", mi, cut) ? 1 : 0;
out:
    g_interrupt = 0;
    session_gen_result_free(&g);
    tok_ids_free(&ids);
    chat_buf_free(&text);
    return rc;
}

/* ---- input ------------------------------------------------------------------------------- */

/* One line: from the type-ahead first (shown after the prompt, since it was typed while echo was
 * off), the rest from stdin. Returns its length (newline kept), or -1 at end of input or on Ctrl-C. */
static ssize_t read_line(chat_state *S, char **line, size_t *cap) {
    size_t n = 0;
    if (S->ahead.n) {
        const char *nl = memchr(S->ahead.p, '\n', S->ahead.n);
        n = nl ? (size_t)(nl - S->ahead.p) + 1 : S->ahead.n;
        if (!*line || n + 1 > *cap) {
            char *p = realloc(*line, n + 1);
            if (!p) return -1;
            *line = p, *cap = n + 1;
        }
        memcpy(*line, S->ahead.p, n);
        (*line)[n] = 0;
        memmove(S->ahead.p, S->ahead.p + n, S->ahead.n - n);
        S->ahead.n -= n;
        fwrite(*line, 1, n, stdout);
        fflush(stdout);
        if (nl) return (ssize_t)n;
    }
    char *rest = NULL;
    size_t rcap = 0;
    ssize_t k = getline(&rest, &rcap, stdin);
    if (k < 0) {
        /* Ctrl-C with the type-ahead shown: at the prompt Ctrl-C leaves, as it does with a typed line
         * (the partial is not a message). End of input after it: the partial is the last line. The
         * stream's error / end flag is cleared either way: a later read must not see a stale one */
        free(rest);
        clearerr(stdin);
        return g_interrupt || !n ? -1 : (ssize_t)n;
    }
    if (n + (size_t)k + 1 > *cap) {
        char *p = realloc(*line, n + (size_t)k + 1);
        if (!p) {
            free(rest);
            return -1;
        }
        *line = p, *cap = n + (size_t)k + 1;
    }
    memcpy(*line + n, rest, (size_t)k + 1);
    free(rest);
    return (ssize_t)(n + (size_t)k);
}

/* Read one message (lines ending in '\' continue). Returns 1 with *out set, 0 at end of
 * input, 130 when interrupted. */
static int read_message(chat_state *S, bool tty, char **out) {
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
        ssize_t len = read_line(S, &line, &cap);
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
          "  /reset       forget the conversation (keeps the system prompt; also /clear)\n"
          "  /save FILE   write the conversation to FILE (a --history file)\n"
          "  /help        this list\n"
          "  /quit        leave (also /exit, Ctrl-D)\n"
          "Ctrl-C stops an answer; at the prompt it leaves. End a line with \\ to continue it;\n"
          "start it with // to send a line that begins with /.\n",
          stdout);
}

/* A command line: "/" then letters, then nothing or blanks and the arguments. Sets *name (its
 * length in *len) and *args (trimmed, "" when none); false for a message to the model. */
static bool parse_command(char *m, const char **name, size_t *len, char **args) {
    if (m[0] != '/' || !((m[1] >= 'a' && m[1] <= 'z') || (m[1] >= 'A' && m[1] <= 'Z'))) return false;
    size_t k = 1;
    while ((m[k] >= 'a' && m[k] <= 'z') || (m[k] >= 'A' && m[k] <= 'Z')) k++;
    if (m[k] && m[k] != ' ' && m[k] != '\t' && m[k] != '\n') return false; /* "/usr/bin ...": a path */
    *name = m + 1;
    *len = k - 1;
    char *a = m + k;
    while (*a == ' ' || *a == '\t' || *a == '\n') a++;
    char *e = a + strlen(a);
    while (e > a && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r')) *--e = 0;
    *args = a;
    return true;
}

static bool is_cmd(const char *name, size_t len, const char *want) {
    return strlen(want) == len && !strncmp(name, want, len);
}

/* Run a command. Returns 1 to leave the chat, 0 to go on. */
static int command(chat_state *S, const char *name, size_t len, const char *args) {
    if (is_cmd(name, len, "quit") || is_cmd(name, len, "exit")) return 1;
    if (is_cmd(name, len, "reset") || is_cmd(name, len, "clear")) {
        reset_conversation(S);
        if (S->history && hist_write(S, S->history, "a", -1, false)) S->failed = true;
        fputs("(conversation reset)\n", stdout);
    } else if (is_cmd(name, len, "help")) {
        help();
    } else if (is_cmd(name, len, "save")) {
        if (!*args) printf("usage: /save FILE\n");
        else if (!hist_write(S, args, "w", S->n_sys, false))
            printf("(saved %d messages to %s; load them with --history %s)\n", S->conv.n - S->n_sys, args,
                   args);
    } else {
        printf("unknown command /%.*s (/help lists them; //%.*s sends it to the model)\n", (int)len, name,
               (int)len, name);
    }
    return 0;
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
    S.tty = tty && !prompt; /* -p reads no more input: nothing to keep from the terminal */
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
    if (engine_hparams(session_model_engine(S.m))->n_vocab < V)
        V = engine_hparams(session_model_engine(S.m))->n_vocab;
    if (!(S.s = cli_session_new(&o, S.m, (int)n_ctx, (int)batch)) || !(S.smp = sampler_new(&S.o.sp, V)))
        goto fail;
    if (system) {
        if (chat_conv_add(&S.conv, CHAT_SYSTEM, system) < 0) goto fail;
        S.n_sys = 1;
    }
    if (history) {
        int n = hist_load(&S), cut = n > 0 ? hist_trim(&S, (int)n_ctx) : 0;
        if (n < 0 || cut < 0) goto fail;
        if (cut > 0)
            fprintf(stderr,
                    "(%d earlier turns from %s; the oldest %d dropped to leave half the context free)\n", n,
                    history, cut);
        else if (n > 0) fprintf(stderr, "(%d earlier turns from %s)\n", n, history);
    }
    fprintf(stderr, "redlite chat: %s loaded in %.1f s (template: %s%s, context %lld). /help for commands.\n",
            model, rl_now() - t0, chat_family_name(S.fmt.family), S.fmt.known ? "" : " fallback", n_ctx);

    if (prompt) {
        int t = turn(&S, prompt);
        if (t < 0) goto fail;
        rc = t ? 1 : 0;
        goto done;
    }
    for (;;) {
        char *msg = NULL;
        int r = read_message(&S, tty, &msg);
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
        const char *name;
        size_t nlen;
        char *args;
        if (parse_command((char *)m, &name, &nlen, &args)) {
            if (command(&S, name, nlen, args)) {
                free(msg);
                rc = 0;
                break;
            }
        } else {
            /* "//text" sends "/text" */
            int t = turn(&S, m[0] == '/' && m[1] == '/' ? m + 1 : msg);
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
    chat_buf_free(&S.ahead);
    sampler_free(S.smp);
    session_free(S.s);
    session_model_close(S.m);
    return rc;
}
