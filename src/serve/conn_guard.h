/* conn_guard.h — connection admission and deadlines for `redlite serve`, independent of the
 * HTTP library: a table of open connections, each in a phase with a deadline, caps on the
 * number of connections (in all and per peer address), and a watchdog thread that closes a
 * connection whose deadline passed.
 *
 * Why: libmicrohttpd has one inactivity timeout per connection, which a slow client defeats by
 * sending a byte now and then (slowloris), and a connection limit counted before anything is
 * known about the client, so idle connections lock ordinary clients out. Here:
 *   - a request's headers must be complete within read_timeout of the connection opening or of
 *     its request line; its body within read_timeout + size / body_rate (a total deadline, not
 *     an inactivity one); a keep-alive connection with no new request closes after
 *     idle_timeout; a finished answer must be taken by the client within send_timeout;
 *   - at a cap, a new connection evicts the oldest connection that holds no request being
 *     served (new, idle or still sending headers: of the same peer when the per-peer cap is
 *     the one reached); only when there is none is the new one refused (a 503 is written to it).
 * A request being evaluated (phase CG_WORK) has no deadline: the server watches the client's
 * socket itself and cancels the job when it goes away.
 *
 * Closing: the guard keeps a duplicate of every connection's descriptor and shuts the socket
 * down (shutdown(2)) through it; the HTTP library then sees end-of-file and closes the
 * connection as if the client had. The duplicate is closed in conn_guard_close, so a
 * descriptor number is never reused under the watchdog's feet.
 * Thread-safe: every function may be called from any connection thread.
 */
#ifndef RL_CONN_GUARD_H
#define RL_CONN_GUARD_H

#include <stdint.h>

typedef enum { CG_NEW, CG_HEADERS, CG_BODY, CG_WORK, CG_SEND, CG_IDLE, CG_NPHASE } cg_phase;
const char *conn_guard_phase_name(cg_phase p);

typedef struct {
    int max_conns;       /* open connections in all (0: 256) */
    int max_per_peer;    /* from one client address (0: 32) */
    double read_timeout; /* s: headers (and the base of the body deadline); 0: 10 */
    double idle_timeout; /* s: keep-alive with no request; 0: 15 */
    double send_timeout; /* s: a finished answer taken by the client; 0: 60 */
    double body_rate;    /* bytes/s a body must arrive at least (0: 1 MiB/s) */
} cg_params;

typedef struct {
    int open, by_phase[CG_NPHASE];
    long long accepted, refused, evicted, timeouts[CG_NPHASE];
} cg_stats;

typedef struct conn_guard conn_guard;
typedef struct cg_conn cg_conn;

/* Start the guard and its watchdog thread. NULL with rl_lasterr set. */
conn_guard *conn_guard_new(const cg_params *p);
/* Stop the watchdog and free (every connection must be closed first). */
void conn_guard_free(conn_guard *g);
/* A new connection on fd from peer (an IPv4 address in network order, or any 32-bit key).
 * Returns its entry in phase CG_NEW, or NULL when it was refused (a 503 was written to fd and
 * the socket shut down; the caller lets the HTTP library close it). */
cg_conn *conn_guard_open(conn_guard *g, int fd, uint32_t peer);
/* The connection is closed (NULL: nothing). One marked by conn_guard_linger is first drained
 * (input read and discarded for up to 5 s, as nginx's lingering close), so the answer sent
 * before its body was read is not lost to a reset. */
void conn_guard_close(conn_guard *g, cg_conn *c);
/* Mark c as answered before its request body was read (a refusal). */
void conn_guard_linger(conn_guard *g, cg_conn *c);
/* Enter a phase; its deadline is the phase's timeout + extra seconds from now (CG_WORK: none). */
void conn_guard_set(conn_guard *g, cg_conn *c, cg_phase p, double extra);
cg_phase conn_guard_phase(conn_guard *g, const cg_conn *c);
void conn_guard_get_stats(conn_guard *g, cg_stats *st);
/* The effective parameters (defaults filled in). */
cg_params conn_guard_params(const conn_guard *g);

#endif
