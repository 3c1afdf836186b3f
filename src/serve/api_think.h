/* api_think.h — the reasoning split shared by the API modules (see server.h, docs/SERVER.md).
 *
 * Thinking models write "<think>\n...\n</think>\n\n" before the answer (or only the closing
 * tag when the prompt already opened the block). The splitter routes the text inside to
 * reasoning (reasoning_content, thinking blocks, reasoning items) and the rest to content,
 * with the newlines the template adds around the tags removed, so the client's re-sent turn
 * renders back to the same text. Partial tags at chunk ends are held back. */
#ifndef RL_API_THINK_H
#define RL_API_THINK_H

#include <stdbool.h>
#include <stddef.h>

#include "text/chat.h"

typedef void (*srv_text_fn)(void *ud, const char *s, size_t n);
typedef struct {
    int state;     /* 0 start, 1 reasoning, 2 content, 3 off (everything is content) */
    bool lead;     /* reasoning: leading newline not yet seen/dropped */
    bool strip_nl; /* content: drop newlines right after </think> */
    chat_buf hold;
    srv_text_fn reasoning, content;
    void *ud;
} srv_think;
/* mode: 0 off, 1 the output may open a <think> block, 2 the prompt opened it already */
void srv_think_init(srv_think *t, int mode, srv_text_fn reasoning, srv_text_fn content, void *ud);
void srv_think_feed(srv_think *t, const char *s, size_t n);
void srv_think_finish(srv_think *t);
void srv_think_free(srv_think *t);
#endif
