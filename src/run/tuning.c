/* tuning.c — see tuning.h. The one reader of the RL_* tuning variables. */
#include "run/tuning.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"

rl_tuning tuning_default(void) { return (rl_tuning){.kern = kern_opts_default(), .vec_level = -1}; }

/* A kernel level by name (scalar | avx2 | avx512) into *out; -1 with rl_lasterr. */
static int env_level(const char *name, const char *v, int *out) {
    for (int l = 0; l < KERN_NLEVELS; l++)
        if (!strcmp(v, kern_level_name(l))) {
            *out = l;
            return 0;
        }
    return rl_seterr("%s=%s: expected scalar, avx2 or avx512", name, v);
}

/* One of the words in `choices` (NULL-terminated) into *out (its index); -1 with rl_lasterr. */
static int env_choice(const char *name, const char *v, const char *const *choices, int *out) {
    for (int i = 0; choices[i]; i++)
        if (!strcmp(v, choices[i])) {
            *out = i;
            return 0;
        }
    char list[128] = "";
    for (int i = 0; choices[i]; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", choices[i]);
    rl_seterr("%s=%s: expected one of %s", name, v, list);
    return -1; /* not rl_seterr's value: the analyzer cannot see it is -1 (*out unset here) */
}

/* A whole number >= lo into *out; -1 with rl_lasterr. */
static int env_int(const char *name, const char *v, long lo, int *out) {
    char *end;
    const long n = strtol(v, &end, 10);
    if (end == v || *end || n < lo || n > 1 << 30)
        return rl_seterr("%s=%s: expected a whole number >= %ld", name, v, lo);
    *out = (int)n;
    return 0;
}

/* The value of `name` when set and not empty, else NULL. */
static const char *env(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* A 0/1 switch: when `name` is set, *dst = (value is 1), or (value is 0) for an `invert`ed field
 * (no_prefetch, no_victim, ...); unset leaves *dst. -1 with rl_lasterr on another value. */
static int env_flag(const char *name, bool *dst, bool invert) {
    const char *v = env(name);
    int i;
    if (!v) return 0;
    if (env_choice(name, v, (const char *const[]){"0", "1", NULL}, &i)) return -1;
    *dst = (i == 1) != invert;
    return 0;
}

static int kern_from_env(rl_tuning *t) {
    const char *v;
    int i;
    if ((v = env("RL_KERN")) && env_level("RL_KERN", v, &t->kern.level)) return -1;
    if ((v = env("RL_VEC")) && env_level("RL_VEC", v, &t->vec_level)) return -1;
    if ((v = env("RL_KERN_MM"))) {
        if (env_choice("RL_KERN_MM", v, (const char *const[]){"256", "512", NULL}, &i)) return -1;
        t->kern.mm512 = i == 1;
    }
    if (env_flag("RL_KERN_AMX", &t->kern.amx, false)) return -1;
    if ((v = env("RL_KERN_AMX_ROWS")) && env_int("RL_KERN_AMX_ROWS", v, 0, &t->kern.amx_rows)) return -1;
    if ((v = env("RL_KERN_IQ_MV"))) {
        if (env_choice("RL_KERN_IQ_MV", v, (const char *const[]){"256", "512", NULL}, &i)) return -1;
        t->kern.iq_mv = i ? 512 : 256;
    }
    return 0;
}

static int cache_from_env(ec_params *c) {
    const char *v;
    int i;
    if ((v = env("RL_CACHE_IO_THREADS")) && env_int("RL_CACHE_IO_THREADS", v, 1, &c->io_threads)) return -1;
    if (c->io_threads > 64) return rl_seterr("RL_CACHE_IO_THREADS=%s: at most 64", v);
    if (env_flag("RL_CACHE_PREFETCH", &c->no_prefetch, true)) return -1;
    if ((v = env("RL_CACHE_PREFETCH_K")) && env_int("RL_CACHE_PREFETCH_K", v, 1, &c->prefetch_k)) return -1;
    if ((v = env("RL_CACHE_DIRECT"))) {
        if (env_choice("RL_CACHE_DIRECT", v, (const char *const[]){"0", "1", NULL}, &i)) return -1;
        c->io = i ? EC_IO_DIRECT : EC_IO_BUFFERED;
    }
    if (env_flag("RL_CACHE_DEMOTE", &c->demote, false)) return -1;
    if (env_flag("RL_CACHE_VICTIM", &c->no_victim, true)) return -1;
    if (env_flag("RL_CACHE_SCAN", &c->no_scan, true)) return -1;
    if (env_flag("RL_CACHE_CLASSES", &c->uniform, true)) return -1;
    c->trace_path = env("RL_ROUTE_TRACE");
    c->fault = env("RL_CACHE_FAULT");
    return 0;
}

static int repack_from_env(expert_repack_opts *r) {
    const char *v;
    if (env_flag("RL_REPACK_DENSE", &r->experts_only, true)) return -1;
    if ((v = env("RL_REPACK_RAM_MIB"))) {
        char *end;
        const double mib = strtod(v, &end);
        if (end == v || *end || !(mib > 0) || mib > 1e12)
            return rl_seterr("RL_REPACK_RAM_MIB=%s: expected MiB > 0", v);
        r->ram = (uint64_t)(mib * 1048576.0);
    }
    return 0;
}

int tuning_from_env(rl_tuning *t) {
    *t = tuning_default();
    return kern_from_env(t) || cache_from_env(&t->cache) || repack_from_env(&t->repack) ? -1 : 0;
}
