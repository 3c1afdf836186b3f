/* gen.c — the old model-flag parser on top of the option table (see gen.h). */
#include "gen.h"

#include "opts.h"

int gen_model_flags_parse(const char *cmd, int argc, char **argv, int *i, gen_model_flags *m) {
    cli_opts o;
    opts_defaults(&o);
    o.backend = m->backend, o.cache_spec = m->cache_spec, o.route_bias = m->route_bias;
    o.route_trace = m->route_trace, o.threads = m->threads, o.n_ctx = m->n_ctx, o.batch = m->batch;
    int r = opts_parse_model_flag(cmd, argc, argv, i, &o);
    if (r > 0) {
        m->backend = o.backend, m->cache_spec = o.cache_spec, m->route_bias = o.route_bias;
        m->route_trace = o.route_trace, m->threads = o.threads, m->n_ctx = o.n_ctx, m->batch = o.batch;
    }
    return r;
}

char *gen_read_file(const char *path, size_t *len) { return cli_read_file(path, len); }
