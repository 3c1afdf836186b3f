/* api_think.c — see api_think.h. */
#include "serve/api_think.h"

#include <string.h>

void srv_think_init(srv_think *t, int mode, srv_text_fn reasoning, srv_text_fn content, void *ud) {
    memset(t, 0, sizeof *t);
    t->state = mode == 0 ? 3 : mode == 2 ? 1 : 0;
    t->lead = true;
    t->reasoning = reasoning;
    t->content = content;
    t->ud = ud;
}

void srv_think_free(srv_think *t) { chat_buf_free(&t->hold); }

static void think_content(srv_think *t, const char *s, size_t n) {
    if (t->strip_nl) {
        while (n && *s == '\n') s++, n--;
        if (!n) return;
        t->strip_nl = false;
    }
    t->content(t->ud, s, n);
}

/* Length of the longest suffix of s[0..n) that is a proper prefix of tag. */
static size_t partial_tag(const char *s, size_t n, const char *tag) {
    size_t l = strlen(tag);
    for (size_t k = l - 1 < n ? l - 1 : n; k > 0; k--)
        if (!memcmp(s + n - k, tag, k)) return k;
    return 0;
}

void srv_think_feed(srv_think *t, const char *s, size_t n) {
    if (t->state == 3 || (t->state == 2 && !t->hold.n)) {
        think_content(t, s, n);
        return;
    }
    chat_buf_put(&t->hold, s, n);
    if (t->hold.oom) {
        t->state = 3;
        return;
    }
    for (;;) {
        char *h = t->hold.p;
        size_t hn = t->hold.n;
        if (t->state == 0) {
            size_t ws = 0;
            while (ws < hn && (h[ws] == '\n' || h[ws] == ' ')) ws++;
            size_t rest = hn - ws;
            if (rest >= 7 && !memcmp(h + ws, "<think>", 7)) {
                memmove(h, h + ws + 7, rest - 7);
                t->hold.n = rest - 7;
                t->state = 1;
                continue;
            }
            if (rest < 7 && (!rest || !memcmp(h + ws, "<think>", rest)))
                return; /* undecided (h may be NULL) */
            t->state = 2;
            t->hold.n = 0;
            think_content(t, h, hn);
            return;
        }
        if (t->state == 1) {
            if (t->lead && hn && h[0] == '\n') {
                memmove(h, h + 1, --hn);
                t->hold.n = hn;
            }
            if (hn) t->lead = false;
            const char *end = hn >= 8 ? memmem(h, hn, "</think>", 8) : NULL;
            if (end) {
                size_t r = (size_t)(end - h), k = r;
                while (k && h[k - 1] == '\n') k--; /* the template's newline before </think> */
                if (k) t->reasoning(t->ud, h, k);
                size_t after = hn - r - 8;
                memmove(h, end + 8, after);
                t->hold.n = after;
                t->state = 2;
                t->strip_nl = true;
                if (after) {
                    t->hold.n = 0;
                    think_content(t, h, after);
                }
                return;
            }
            /* emit what cannot be the start of </think> nor trailing newlines before it */
            size_t keep = partial_tag(h, hn, "</think>");
            size_t k = hn - keep;
            while (k && h[k - 1] == '\n') k--;
            if (k) {
                t->reasoning(t->ud, h, k);
                memmove(h, h + k, hn - k);
                t->hold.n = hn - k;
            }
            return;
        }
        /* state 2 with held text (from state 0's decision) */
        t->hold.n = 0;
        think_content(t, h, hn);
        return;
    }
}

void srv_think_finish(srv_think *t) {
    char *h = t->hold.p;
    size_t hn = t->hold.n;
    t->hold.n = 0;
    if (!hn) return;
    if (t->state == 1) { /* an unterminated block: it is reasoning (trailing newlines dropped) */
        while (hn && h[hn - 1] == '\n') hn--;
        if (hn) t->reasoning(t->ud, h, hn);
    } else {
        think_content(t, h, hn);
    }
}
