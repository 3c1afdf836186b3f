/* progress.h — progress of a long step on stderr: "what done/total unit, rate unit/s, ETA".
 *
 * On a terminal a live line redrawn in place (at most 10 times a second, cleared at the end);
 * otherwise (a log file, CI, a pipe) one plain line every REDLITE_PROGRESS_SECONDS seconds
 * (default 10; 0 = at every update), so a long run says it is alive without flooding the log.
 * Nothing is printed for a step shorter than one interval. */
#ifndef RL_CLI_PROGRESS_H
#define RL_CLI_PROGRESS_H

#include <stdbool.h>

typedef struct {
    const char *cmd, *what, *unit; /* "generate" (NULL: none), "prompt", "tokens" */
    bool on, tty, shown;
    double t0, last, every; /* start, last print (seconds), log-line interval */
} cli_progress;

/* Start a step; on = false keeps it silent (--json on a terminal, a step of one chunk). */
void progress_begin(cli_progress *p, const char *cmd, const char *what, const char *unit, bool on);
/* done of total units are finished. */
void progress_update(cli_progress *p, long long done, long long total);
/* Clear a live line (log lines stay). */
void progress_end(cli_progress *p);

#endif
