/* test_api_think.c — the server's reasoning split (api_think.h): for each case the reasoning and
 * content are the same whether the text arrives whole, one byte at a time, or cut at every
 * position into two pieces (partial tags held back correctly). */
#include <stdio.h>
#include <string.h>

#include "serve/api_think.h"
#include "check.h"

typedef struct {
    chat_buf r, c;
} out2;

static const char *S(const chat_buf *b) { return b->p ? b->p : ""; }

static void on_r(void *ud, const char *s, size_t n) { chat_buf_put(&((out2 *)ud)->r, s, n); }
static void on_c(void *ud, const char *s, size_t n) { chat_buf_put(&((out2 *)ud)->c, s, n); }

/* Feed text cut at the given positions (cuts sorted, n_cuts of them; step 1 = byte by byte). */
static void run(const char *text, int mode, const size_t *cuts, int n_cuts, int step, out2 *o) {
    memset(o, 0, sizeof *o);
    srv_think t;
    srv_think_init(&t, mode, on_r, on_c, o);
    size_t n = strlen(text), at = 0;
    if (step) {
        for (; at < n; at++) srv_think_feed(&t, text + at, 1);
    } else {
        for (int i = 0; i < n_cuts; i++) {
            srv_think_feed(&t, text + at, cuts[i] - at);
            at = cuts[i];
        }
        srv_think_feed(&t, text + at, n - at);
    }
    srv_think_finish(&t);
    srv_think_free(&t);
}

static void check_case(const char *text, int mode, const char *want_r, const char *want_c) {
    out2 o;
    run(text, mode, NULL, 0, 0, &o);
    CHECK(!strcmp(S(&o.r), want_r) && !strcmp(S(&o.c), want_c), "whole '%s': reasoning '%s' content '%s'",
          text, S(&o.r), S(&o.c));
    chat_buf_free(&o.r);
    chat_buf_free(&o.c);
    run(text, mode, NULL, 0, 1, &o);
    CHECK(!strcmp(S(&o.r), want_r) && !strcmp(S(&o.c), want_c), "bytes '%s': reasoning '%s' content '%s'",
          text, S(&o.r), S(&o.c));
    chat_buf_free(&o.r);
    chat_buf_free(&o.c);
    for (size_t k = 0; k <= strlen(text); k++) {
        run(text, mode, &k, 1, 0, &o);
        CHECK(!strcmp(S(&o.r), want_r) && !strcmp(S(&o.c), want_c),
              "cut %zu '%s': reasoning '%s' content '%s'", k, text, S(&o.r), S(&o.c));
        chat_buf_free(&o.r);
        chat_buf_free(&o.c);
    }
}

int main(void) {
    check_case("<think>\nplan\n</think>\n\nHello", 1, "plan", "Hello");
    check_case("<think>\nline 1\n\nline 2\n</think>\n\nA\n\nB\n", 1, "line 1\n\nline 2", "A\n\nB\n");
    check_case("\n<think>x</think>y", 1, "x", "y");
    check_case("Hello <think>not at the start</think>", 1, "", "Hello <think>not at the start</think>");
    check_case("<thin", 1, "", "<thin"); /* a partial tag that never completes */
    check_case("<think>\nunterminated\n", 1, "unterminated", "");
    check_case("plan\n</think>\n\nanswer", 2, "plan", "answer"); /* the prompt opened the block */
    check_case("<think>\nplan\n</think>\n\nHello", 0, "", "<think>\nplan\n</think>\n\nHello");
    check_case("<think>a</thin</think>b", 1, "a</thin", "b");
    check_case("<think></think>\n\nonly content", 1, "", "only content");
    return check_done("test_api_think");
}
