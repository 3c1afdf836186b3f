/* conn_guard.c — see conn_guard.h. The table is a list scanned linearly: it holds at most
 * max_conns live entries (a few hundred), and a scan happens once per new connection and once
 * per watchdog tick. */
#include "serve/conn_guard.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/common.h"

struct cg_conn {
    cg_conn *prev, *next;
    int fd; /* our duplicate (-1 if dup failed: then never shut down by us) */
    uint32_t peer;
    cg_phase phase;
    double since;    /* when the phase began (monotonic s) */
    double deadline; /* 0: none */
    bool dead;       /* shut down by the guard: no longer counted */
    bool linger;     /* answered before its body was read: drain the body before the close */
};

struct conn_guard {
    cg_params p;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t watchdog;
    bool stop, started;
    cg_conn *head;
    cg_conn *lingering; /* closed by the HTTP library, our descriptor draining (next-linked) */
    cg_stats st;
};

const char *conn_guard_phase_name(cg_phase p) {
    static const char *const n[] = {"new", "headers", "body", "work", "send", "idle"};
    return (unsigned)p < CG_NPHASE ? n[p] : "?";
}

static double mono_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double phase_timeout(const cg_params *p, cg_phase ph) {
    switch (ph) {
    case CG_NEW:
    case CG_HEADERS:
    case CG_BODY: return p->read_timeout;
    case CG_SEND: return p->send_timeout;
    case CG_IDLE: return p->idle_timeout;
    default: return 0;
    }
}

/* Shut the socket down (the HTTP library sees end-of-file) and stop counting it. mu held. */
static void kill_conn(conn_guard *g, cg_conn *c) {
    if (c->dead) return;
    c->dead = true;
    c->deadline = 0;
    g->st.open--;
    g->st.by_phase[c->phase]--;
    if (c->fd >= 0) shutdown(c->fd, SHUT_RDWR);
}

/* Drain what the client still sends, discarding it; true when the connection can be closed
 * (end of file, an error or its linger deadline). Without this, closing a socket with unread
 * input makes the kernel send a reset, and the client may lose the answer (a 413, a 401) it
 * was sent before it finished sending its body. */
static bool linger_drain(cg_conn *c, double now) {
    char buf[65536];
    for (int i = 0; i < 256; i++) { /* at most 16 MiB per tick */
        ssize_t r = recv(c->fd, buf, sizeof buf, MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return true;
        if (r < 0) break;
    }
    return now >= c->deadline;
}

static void *watchdog_main(void *arg) {
    conn_guard *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->stop) {
        double now = mono_now();
        for (cg_conn **pp = &g->lingering; *pp;) {
            cg_conn *c = *pp;
            if (linger_drain(c, now)) {
                *pp = c->next;
                close(c->fd);
                free(c);
            } else {
                pp = &c->next;
            }
        }
        for (cg_conn *c = g->head; c; c = c->next) {
            if (c->dead || !c->deadline || now < c->deadline) continue;
            g->st.timeouts[c->phase]++;
            kill_conn(g, c);
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += g->lingering ? 20000000L : 200000000L; /* deadlines are seconds; draining is faster */
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&g->cv, &g->mu, &ts);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

conn_guard *conn_guard_new(const cg_params *p) {
    conn_guard *g = calloc(1, sizeof *g);
    if (!g) {
        rl_seterr("out of memory (connection guard)");
        return NULL;
    }
    g->p = *p;
    if (g->p.max_conns <= 0) g->p.max_conns = 256;
    if (g->p.max_per_peer <= 0) g->p.max_per_peer = 32;
    if (g->p.read_timeout <= 0) g->p.read_timeout = 10;
    if (g->p.idle_timeout <= 0) g->p.idle_timeout = 15;
    if (g->p.send_timeout <= 0) g->p.send_timeout = 60;
    if (g->p.body_rate <= 0) g->p.body_rate = 1 << 20;
    pthread_mutex_init(&g->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&g->watchdog, NULL, watchdog_main, g)) {
        rl_seterr("cannot start the connection watchdog thread");
        conn_guard_free(g);
        return NULL;
    }
    g->started = true;
    return g;
}

void conn_guard_free(conn_guard *g) {
    if (!g) return;
    if (g->started) {
        pthread_mutex_lock(&g->mu);
        g->stop = true;
        pthread_cond_broadcast(&g->cv);
        pthread_mutex_unlock(&g->mu);
        pthread_join(g->watchdog, NULL);
    }
    for (int k = 0; k < 2; k++)
        for (cg_conn *c = k ? g->lingering : g->head, *n; c; c = n) { /* lingering; leaked ones */
            n = c->next;
            if (c->fd >= 0) close(c->fd);
            free(c);
        }
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g);
}

static bool evictable(const cg_conn *c) {
    return !c->dead && (c->phase == CG_NEW || c->phase == CG_IDLE || c->phase == CG_HEADERS);
}

/* The oldest evictable connection (of peer when same_peer). mu held. */
static cg_conn *oldest_idle(conn_guard *g, bool same_peer, uint32_t peer) {
    cg_conn *best = NULL;
    for (cg_conn *c = g->head; c; c = c->next)
        if (evictable(c) && (!same_peer || c->peer == peer) && (!best || c->since < best->since)) best = c;
    return best;
}

static void refuse(int fd) {
    static const char body[] =
        "{\"error\":{\"message\":\"too many connections from this address or in all: retry later\","
        "\"type\":\"server_error\",\"code\":\"too_many_connections\"}}";
    char msg[512];
    int n =
        snprintf(msg, sizeof msg,
                 "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
                 "Connection: close\r\nContent-Length: %zu\r\n\r\n%s",
                 sizeof body - 1, body);
    ssize_t w = send(fd, msg, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)w;
    shutdown(fd, SHUT_RDWR);
}

cg_conn *conn_guard_open(conn_guard *g, int fd, uint32_t peer) {
    pthread_mutex_lock(&g->mu);
    int n_peer = 0;
    for (cg_conn *c = g->head; c; c = c->next) n_peer += !c->dead && c->peer == peer;
    bool ok = true;
    if (n_peer >= g->p.max_per_peer) {
        cg_conn *v = oldest_idle(g, true, peer);
        if (v) kill_conn(g, v), g->st.evicted++;
        else ok = false;
    }
    if (ok && g->st.open >= g->p.max_conns) {
        cg_conn *v = oldest_idle(g, false, 0);
        if (v) kill_conn(g, v), g->st.evicted++;
        else ok = false;
    }
    cg_conn *c = ok ? calloc(1, sizeof *c) : NULL;
    if (!c) {
        g->st.refused++;
        pthread_mutex_unlock(&g->mu);
        refuse(fd);
        return NULL;
    }
    c->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    c->peer = peer;
    c->phase = CG_NEW;
    c->since = mono_now();
    c->deadline = c->since + g->p.read_timeout;
    c->next = g->head;
    if (g->head) g->head->prev = c;
    g->head = c;
    g->st.open++;
    g->st.by_phase[CG_NEW]++;
    g->st.accepted++;
    pthread_mutex_unlock(&g->mu);
    return c;
}

void conn_guard_close(conn_guard *g, cg_conn *c) {
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    if (!c->dead) {
        g->st.open--;
        g->st.by_phase[c->phase]--;
    }
    if (c->prev) c->prev->next = c->next;
    else g->head = c->next;
    if (c->next) c->next->prev = c->prev;
    if (c->linger && c->fd >= 0 && !g->stop) {
        shutdown(c->fd, SHUT_WR); /* the answer is sent; now only read and discard, briefly */
        c->deadline = mono_now() + 5;
        c->next = g->lingering;
        g->lingering = c;
        pthread_cond_broadcast(&g->cv);
        pthread_mutex_unlock(&g->mu);
        return;
    }
    pthread_mutex_unlock(&g->mu);
    if (c->fd >= 0) close(c->fd);
    free(c);
}

void conn_guard_linger(conn_guard *g, cg_conn *c) {
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    c->linger = true;
    pthread_mutex_unlock(&g->mu);
}

void conn_guard_set(conn_guard *g, cg_conn *c, cg_phase p, double extra) {
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    if (!c->dead) {
        g->st.by_phase[c->phase]--;
        g->st.by_phase[p]++;
        c->phase = p;
        c->since = mono_now();
        double t = phase_timeout(&g->p, p);
        c->deadline = t > 0 ? c->since + t + extra : 0;
    }
    pthread_mutex_unlock(&g->mu);
}

cg_phase conn_guard_phase(conn_guard *g, const cg_conn *c) {
    pthread_mutex_lock(&g->mu);
    cg_phase p = c ? c->phase : CG_NEW;
    pthread_mutex_unlock(&g->mu);
    return p;
}

void conn_guard_get_stats(conn_guard *g, cg_stats *st) {
    pthread_mutex_lock(&g->mu);
    *st = g->st;
    pthread_mutex_unlock(&g->mu);
}

cg_params conn_guard_params(const conn_guard *g) { return g->p; }
