/* progress.c — the progress line of long steps (see progress.h). */
#include "cli/progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/common.h"

void progress_begin(cli_progress *p, const char *cmd, const char *what, const char *unit, bool on) {
    const char *ev = getenv("REDLITE_PROGRESS_SECONDS");
    *p = (cli_progress){.cmd = cmd,
                        .what = what,
                        .unit = unit,
                        .on = on,
                        .tty = isatty(STDERR_FILENO),
                        .t0 = rl_now(),
                        .every = ev && *ev ? atof(ev) : 10.0};
    p->last = p->tty ? -1 : 0; /* a log line first after one interval */
}

void progress_update(cli_progress *p, long long done, long long total) {
    if (!p->on || total <= 0 || (p->tty && done >= total && !p->shown))
        return; /* done before a first redraw */
    double el = rl_now() - p->t0;
    if (p->tty ? (done < total && el - p->last < 0.1)
               : (el - p->last < p->every || (done >= total && !p->shown)))
        return;
    p->last = el;
    double rate = done / (el > 0 ? el : 1e-9),
           eta = done > 0 ? el / (double)done * (double)(total - done) : 0;
    char eta_s[32] = "";
    if (done > 0 && done < total) snprintf(eta_s, sizeof eta_s, ", ETA %.0f s", eta);
    else if (done < total) snprintf(eta_s, sizeof eta_s, ", ETA unknown"); /* nothing done yet: no rate */
    if (p->tty)
        fprintf(stderr, "\r%s %lld/%lld %s, %.1f %s/s%s\033[K", p->what, done, total, p->unit, rate,
                p->unit[0] == 't' ? "tok" : p->unit, eta_s);
    else
        fprintf(stderr, "redlite%s%s: %s %lld/%lld %s (%.0f %%), %.1f %s/s%s\n", p->cmd ? " " : "",
                p->cmd ? p->cmd : "", p->what, done, total, p->unit, 100.0 * (double)done / (double)total,
                rate, p->unit[0] == 't' ? "tok" : p->unit, eta_s);
    fflush(stderr);
    p->shown = true;
}

void progress_end(cli_progress *p) {
    if (p->tty && p->shown) fputs("\r\033[K", stderr);
    p->shown = false;
}
