/* json_guard.h — bound what parsing a JSON request body may cost, before it is parsed.
 *
 * cJSON allocates one node (~80 bytes with the allocator's overhead) per value, so a body of
 * small numbers ("1,1,1,...") costs about 40 times its size, and deep nesting recurses. A
 * linear pre-scan (no allocation) counts an upper bound of the values (every value but the
 * first of a container follows a comma; containers are counted when opened) and the nesting
 * depth, and refuses the body when either is over its limit. Strings cost at most their own
 * bytes, which the body size already bounds. The scan does not validate the JSON (the parser
 * does); it only has to be an upper bound. */
#ifndef RL_JSON_GUARD_H
#define RL_JSON_GUARD_H

#include <stddef.h>

typedef struct {
    size_t max_values;    /* values in all (0: no limit) */
    size_t values_per_4b; /* and at most 1 value per 4 bytes beyond this allowance */
    int max_depth;        /* nesting of arrays / objects */
} json_limits;

/* 0 when the body is within the limits; -1 with a one-line reason in why (what to do). */
int json_guard_check(const char *s, size_t n, const json_limits *lim, char *why, size_t cap);

#endif
