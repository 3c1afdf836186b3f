/* opts_set.c — the setters of the option table (opts_table.c): each validates one flag's value
 * and stores it in cli_opts; 0, or -1 after a one-line usage error (exit 2). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "cache/vram_plan.h"
#include "cli/cli.h"
#include "cli/opts_int.h"
#include "model/synth.h"
#include "run/engine.h"
#include "run/spec.h"

int opts_set_backend(const char *cmd, const char *flag, const char *v, cli_opts *o) {
    if (strcmp(v, "cpu") && strcmp(v, "cuda") && strcmp(v, "auto"))
        return cli_fail(cmd, 2, "%s expects cpu, cuda or auto, got '%s'", flag, v), -1;
    o->backend = v;
    return 0;
}

int opts_set_weights(const char *cmd, const char *flag, const char *v, cli_opts *o) {
    if (strcmp(v, "copy") && strcmp(v, "map"))
        return cli_fail(cmd, 2, "%s expects copy or map, got '%s'", flag, v), -1;
    o->weights = v;
    return 0;
}

int opts_set_kv(const char *cmd, const char *flag, const char *v, cli_opts *o) {
    int k;
    if (engine_kv_parse(v, &k)) return cli_fail(cmd, 2, "%s expects f32 or f16, got '%s'", flag, v), -1;
    o->kv = v;
    return 0;
}

/* The syntax here (a usage error); the planner checks the budget against the model later. */
int opts_set_cache(const char *cmd, const char *flag, const char *v, cli_opts *o) {
    if (strcmp(v, "auto") && strcmp(v, "full") && strcmp(v, "mmap")) {
        char *end;
        errno = 0;
        double mib = strtod(v, &end);
        if (end == v || *end || errno || !(mib > 0) || mib > 1e9)
            return cli_fail(cmd, 2, "%s expects a number of MiB above 0, 'auto', 'full' or 'mmap', got '%s'",
                            flag, v),
                   -1;
    }
    o->cache_spec = v;
    o->cache_set = true;
    return 0;
}

/* --vram-mib: the syntax here; the VRAM planner checks the budget against the model and device. */
int opts_set_vram(const char *cmd, const char *flag, const char *v, cli_opts *o) {
    if (vram_spec_check(v))
        return cli_fail(cmd, 2, "%s expects auto, full or a number of MiB above 0, got '%s'", flag, v), -1;
    o->vram_spec = v;
    return 0;
}

int opts_set_vram_pin(const char *cmd, const char *flag, const char *v, cli_opts *o) {
    vram_pin_mode m;
    if (vram_pin_parse(v, &m) || !*v)
        return cli_fail(cmd, 2, "%s expects auto, on or off, got '%s'", flag, v), -1;
    o->vram_pin = v;
    return 0;
}

int opts_set_vram_miss(const char *cmd, const char *flag, const char *v, cli_opts *o) {
    vram_miss_mode m;
    if (vram_miss_parse(v, &m) || !*v)
        return cli_fail(cmd, 2, "%s expects copy, cpu or auto, got '%s'", flag, v), -1;
    o->vram_miss = v;
    return 0;
}

int opts_set_stop(const char *cmd, const char *flag, const char *v, cli_opts *o) {
    if (!*v) return cli_fail(cmd, 2, "%s needs a non-empty string", flag), -1;
    if (o->n_stops == OPTS_MAX_STOPS)
        return cli_fail(cmd, 2, "at most %d %s strings", OPTS_MAX_STOPS, flag), -1;
    o->stops[o->n_stops++] = v;
    return 0;
}

int opts_set_spec(const char *cmd, const char *flag, const char *v, cli_opts *o) {
    int m = spec_mode_parse(v);
    if (m < 0) return cli_fail(cmd, 2, "%s expects none, lookup, mtp or auto, got '%s'", flag, v), -1;
    o->spec_name = v;
    o->spec = (spec_mode)m;
    o->spec_set = true;
    return 0;
}

int opts_set_prompts(const char *cmd, const char *flag, const char *v, cli_opts *o) {
    int n = 0;
    if (strcmp(v, "0") && strcmp(v, "none")) {
        for (const char *p = v;;) {
            char *end;
            long x = strtol(p, &end, 10);
            if (end == p || x <= 0 || x > (1 << 24) || n == 16 || (*end && *end != ','))
                return cli_fail(cmd, 2, "%s expects up to 16 lengths like 512,2048 (or 0), got '%s'", flag,
                                v),
                       -1;
            o->prompts[n++] = (int)x;
            if (!*end) break;
            p = end + 1;
        }
    }
    o->n_prompts = n;
    o->prompt = v;
    return 0;
}

int opts_set_routing(const char *cmd, const char *flag, const char *v, cli_opts *o) {
    synth_routing r;
    if (synth_routing_find(v, &r)) return cli_fail(cmd, 2, "%s: %s", flag, rl_lasterr()), -1;
    o->routing = v;
    return 0;
}

int opts_set_layers(const char *cmd, const char *flag, const char *v, cli_opts *o) {
    int a, b;
    char c;
    if (sscanf(v, "%d-%d%c", &a, &b, &c) != 2 && (sscanf(v, "%d%c", &a, &c) != 1))
        return cli_fail(cmd, 2, "%s expects A-B or A, got '%s'", flag, v), -1;
    o->layers = v;
    return 0;
}
