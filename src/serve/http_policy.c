/* http_policy.c — see http_policy.h. */
#include "serve/http_policy.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* The host part of "host", "host:port", "[v6]" or "[v6]:port", lowercased into out. */
static bool host_part(const char *s, size_t n, char *out, size_t cap) {
    const char *end = s + n;
    if (n && s[0] == '[') {
        const char *rb = memchr(s, ']', n);
        if (!rb) return false;
        end = rb + 1;
    } else {
        const char *colon = memchr(s, ':', n);
        if (colon) end = colon;
    }
    size_t l = (size_t)(end - s);
    if (!l || l >= cap) return false;
    for (size_t i = 0; i < l; i++) out[i] = (char)(s[i] >= 'A' && s[i] <= 'Z' ? s[i] + 32 : s[i]);
    out[l] = 0;
    return true;
}

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static bool is_ip(const char *h, bool *loopback) {
    unsigned char buf[16];
    if (inet_pton(AF_INET, h, buf) == 1) {
        *loopback = buf[0] == 127;
        return true;
    }
    size_t l = strlen(h);
    if (l > 2 && h[0] == '[' && h[l - 1] == ']' && l < 64) {
        char v6[64];
        snprintf(v6, sizeof v6, "%.*s", (int)(l - 2), h + 1);
        if (inet_pton(AF_INET6, v6, buf) == 1) {
            static const unsigned char one[16] = {[15] = 1};
            *loopback = !memcmp(buf, one, 16);
            return true;
        }
    }
    return false;
}

static bool loopback_name(const char *h) { return !strcmp(h, "localhost") || ends_with(h, ".localhost"); }

static bool listed(const char *h, const char *const *list, int n) {
    for (int i = 0; i < n; i++) {
        const char *e = list[i];
        if (!strcmp(e, "*") || !strcasecmp(e, h)) return true;
        if (e[0] == '.') { /* ".example.com": the domain and its subdomains */
            size_t a = strlen(h), b = strlen(e);
            if ((a >= b && !strcasecmp(h + a - b, e)) || !strcasecmp(h, e + 1)) return true;
        }
    }
    return false;
}

bool http_policy_host_ok(const http_allow *a, const char *host) {
    if (!host) return true;
    char h[256];
    bool lo;
    if (!host_part(host, strlen(host), h, sizeof h)) return false;
    if (loopback_name(h) || is_ip(h, &lo)) return true;
    if (a->hostname && *a->hostname && !strcasecmp(h, a->hostname)) return true;
    return listed(h, a->hosts, a->n_hosts);
}

bool http_policy_origin_ok(const http_allow *a, const char *origin) {
    if (!origin) return true;
    for (int i = 0; i < a->n_origins; i++)
        if (!strcmp(a->origins[i], "*") || !strcasecmp(a->origins[i], origin)) return true;
    const char *p = NULL;
    if (!strncasecmp(origin, "http://", 7)) p = origin + 7;
    else if (!strncasecmp(origin, "https://", 8)) p = origin + 8;
    if (!p) return false; /* "null", file:, extensions...: only by --allow-origin */
    size_t n = strcspn(p, "/");
    if (p[n]) return false; /* an origin has no path */
    char h[256];
    bool lo = false;
    if (!host_part(p, n, h, sizeof h)) return false;
    return loopback_name(h) || (is_ip(h, &lo) && lo);
}

bool http_policy_ctype_ok(const char *ctype, bool from_browser) {
    if (!ctype) return !from_browser;
    char t[64];
    size_t n = strcspn(ctype, ";");
    while (n && (ctype[n - 1] == ' ' || ctype[n - 1] == '\t')) n--;
    if (n >= sizeof t) return true; /* unusual but not one of the browser's simple types */
    snprintf(t, sizeof t, "%.*s", (int)n, ctype);
    if (!strcasecmp(t, "text/plain") || !strcasecmp(t, "multipart/form-data")) return false;
    if (!strcasecmp(t, "application/x-www-form-urlencoded")) return !from_browser;
    return true;
}
