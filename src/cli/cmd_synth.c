/* cmd_synth.c — `redlite synth`: write a full-size synthetic Qwen3-Next GGUF (src/model/synth.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/cli.h"
#include "cli/opts.h"
#include "base/common.h"
#include "gguf/quant.h"
#include "model/synth.h"

static const opts_cmd SYNTH = {
    "synth", CMD_SYNTH, "redlite synth --preset NAME -o FILE.gguf [options]",
    "Write a synthetic Qwen3-Next model with the real geometry and the per-tensor quantisation\n"
    "types of a preset, filled with random valid blocks (trained-layer magnitudes). Deterministic:\n"
    "the same preset, geometry, seed and vocabulary give the same bytes.",
    NULL};

static int list_plan(const synth_params *p) {
    int n = 0;
    synth_tensor_info *t = synth_plan(p, &n);
    if (!t) return cli_fail("synth", 2, "%s", rl_lasterr());
    uint64_t cnt[QT_COUNT] = {0}, bytes[QT_COUNT] = {0}, total = 0;
    for (int i = 0; i < n; i++) {
        printf("%-40s %-8s {", t[i].name, quant_name(t[i].type));
        for (uint32_t d = 0; d < t[i].n_dims; d++) printf("%s%lld", d ? ", " : "", (long long)t[i].ne[d]);
        printf("} %llu\n", (unsigned long long)t[i].nbytes);
        cnt[t[i].type]++;
        bytes[t[i].type] += t[i].nbytes;
        total += t[i].nbytes;
    }
    printf("\npreset %s: %d tensors, %llu bytes of tensor data (%.2f GiB)\n", synth_preset_name(p->preset), n,
           (unsigned long long)total, (double)total / (1u << 30));
    for (int q = 0; q < QT_COUNT; q++)
        if (cnt[q])
            printf("  %-8s %4llu tensors %16llu bytes\n", quant_name((uint32_t)q), (unsigned long long)cnt[q],
                   (unsigned long long)bytes[q]);
    free(t);
    return 0;
}

int cmd_synth(int argc, char **argv) {
    cli_opts o;
    opts_defaults(&o);
    o.bench_seed = 1;
    int r = opts_parse(&SYNTH, argc, argv, &o);
    if (r) return r == OPTS_HELP ? 0 : r;
    synth_params p = {
        .seed = (uint64_t)o.bench_seed, .n_threads = (int)o.threads, .vocab_path = o.vocab, .mtp = o.mtp};
    const char *preset = o.preset, *geometry = o.geometry, *out = o.output;
    if (o.routing && synth_routing_find(o.routing, &p.routing))
        return cli_fail("synth", 2, "--routing: %s", rl_lasterr());
    if (o.expert_type) {
        for (uint32_t q = 1; q < QT_COUNT && !p.expert_type; q++)
            if (quant_get(q) && !strcasecmp(quant_name(q), o.expert_type)) p.expert_type = q;
        if (!p.expert_type)
            return cli_fail("synth", 2, "--expert-type: unknown type '%s' (e.g. MXFP4, Q4_K, IQ2_XXS)",
                            o.expert_type);
    }
    if (!preset)
        return cli_fail("synth", 2,
                        "need --preset NAME, e.g. cf2 or 35b-a3b-q4_k_m (see redlite synth --help)");
    if (synth_preset_find(preset, &p.preset)) return cli_fail("synth", 2, "%s", rl_lasterr());
    synth_geom_default(p.preset, &p.g);
    if (geometry && synth_geom_parse(&p.g, geometry)) return cli_fail("synth", 2, "%s", rl_lasterr());
    if (p.vocab_path) {
        int want = p.g.n_vocab;
        if (synth_resolve_vocab(&p)) return cli_fail("synth", 1, "%s", rl_lasterr());
        if (geometry && strstr(geometry, "vocab=") && want != p.g.n_vocab)
            return cli_fail("synth", 2, "--geometry vocab=%d contradicts --vocab (%d tokens)", want,
                            p.g.n_vocab);
    }
    int n_t;
    synth_tensor_info *plan = synth_plan(&p, &n_t); /* validates every tensor's row length too */
    if (!plan) return cli_fail("synth", 2, "%s", rl_lasterr());
    free(plan);
    if (o.list) return list_plan(&p);
    if (!out) return cli_fail("synth", 2, "need -o FILE.gguf (see redlite synth --help)");
    p.progress = !o.quiet;
    synth_stats st;
    if (synth_write(&p, out, &st)) return cli_fail("synth", 1, "%s", rl_lasterr());
    printf("synth: wrote %s (preset %s, seed %llu, %s routing%s): %d tensors, %llu bytes (%.2f GiB) in %.2f "
           "s, %.0f MB/s\n",
           out, synth_preset_name(p.preset), (unsigned long long)p.seed, synth_routing_name(p.routing),
           p.mtp ? ", MTP" : "", st.n_tensors, (unsigned long long)st.file_bytes,
           (double)st.file_bytes / (1u << 30), st.seconds,
           st.seconds > 0 ? (double)st.file_bytes / st.seconds / 1e6 : 0.0);
    return 0;
}
