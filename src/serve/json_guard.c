/* json_guard.c — see json_guard.h. */
#include "serve/json_guard.h"

#include <stdio.h>

int json_guard_check(const char *s, size_t n, const json_limits *lim, char *why, size_t cap) {
    size_t values = n ? 1 : 0;
    int depth = 0, max_depth = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (ch == '"') { /* skip a string: escapes never end it */
            for (i++; i < n && s[i] != '"'; i++)
                if (s[i] == '\\') i++;
        } else if (ch == ',') {
            values++;
        } else if (ch == '[' || ch == '{') {
            values++; /* its first member follows no comma */
            if (++depth > max_depth) max_depth = depth;
        } else if (ch == ']' || ch == '}') {
            depth--;
        }
    }
    if (lim->max_depth > 0 && max_depth > lim->max_depth) {
        snprintf(why, cap, "the JSON body nests %d levels deep; the server accepts at most %d", max_depth,
                 lim->max_depth);
        return -1;
    }
    size_t allowed = lim->max_values;
    if (lim->values_per_4b && lim->values_per_4b + n / 4 < allowed) allowed = lim->values_per_4b + n / 4;
    if (allowed && values > allowed) {
        snprintf(why, cap,
                 "the JSON body has about %zu values; the server parses at most %zu for a body of %zu bytes "
                 "(send fewer, larger values: text as strings, not arrays of numbers)",
                 values, allowed, n);
        return -1;
    }
    return 0;
}
