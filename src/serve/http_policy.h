/* http_policy.h — which browsers' and names' requests `redlite serve` accepts.
 *
 * A server on this machine is reachable from every web page the user's browser opens: a page
 * can POST to http://127.0.0.1:8080 (a "simple" cross-origin request with a text/plain body
 * needs no preflight), and a DNS-rebinding page can even read the answers under its own name.
 * So, as Ollama and llama.cpp's server do:
 *   - Host: the name the client used must be a loopback name (localhost, *.localhost), an IP
 *     literal (an IP cannot be rebound), this machine's host name, or one given with
 *     --allow-host (an exact name, ".suffix" for a domain and its subdomains, or "*");
 *   - Origin (sent by browsers only): absent, or a loopback origin (http(s)://localhost,
 *     127.x.x.x, [::1], any port), or one given with --allow-origin (an exact origin such as
 *     "https://app.example.com", or "*");
 *   - a browser body must be JSON: text/plain, multipart/form-data and (from a browser)
 *     application/x-www-form-urlencoded bodies are refused (curl -d sends the last one, so it is
 *     accepted when no Origin / Sec-Fetch header says a browser sent it).
 * Pure functions, no state. */
#ifndef RL_HTTP_POLICY_H
#define RL_HTTP_POLICY_H

#include <stdbool.h>

typedef struct {
    const char *const *hosts; /* --allow-host values */
    int n_hosts;
    const char *const *origins; /* --allow-origin values */
    int n_origins;
    const char *hostname; /* this machine's name (may be NULL) */
} http_allow;

/* host: the Host header (NULL when absent: allowed). */
bool http_policy_host_ok(const http_allow *a, const char *host);
/* origin: the Origin header (NULL when absent: allowed). */
bool http_policy_origin_ok(const http_allow *a, const char *origin);
/* ctype: the Content-Type header of a request with a body; from_browser: an Origin or
 * Sec-Fetch-Mode header was sent. false: refuse with 415. */
bool http_policy_ctype_ok(const char *ctype, bool from_browser);

#endif
