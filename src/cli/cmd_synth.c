/* cmd_synth.c — `redlite synth`: write a full-size synthetic Qwen3-Next GGUF (src/model/synth.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/cli.h"
#include "base/common.h"
#include "gguf/quant.h"
#include "model/synth.h"

static const char *USAGE =
    "usage: redlite synth --preset cf2|iq2_xxs|q4_k_m|tiny -o FILE.gguf [options]\n"
    "\n"
    "Write a synthetic Qwen3-Next model with the real geometry and the per-tensor quantisation\n"
    "types of a preset, filled with random valid blocks (trained-layer magnitudes). Deterministic:\n"
    "the same preset, geometry, seed and vocabulary give the same bytes.\n"
    "\n"
    "  --preset NAME        cf2      Red Lite CF2 recipe (19.3 GB): dense Q4_K, experts IQ2_XS on\n"
    "                                layers 40-47 and IQ1_M elsewhere, Q2_K embedding, Q5_K output\n"
    "                       iq2_xxs  llama.cpp's IQ2_XXS mix\n"
    "                       q4_k_m   llama.cpp's Q4_K_M mix\n"
    "                       tiny     cf2 types at hidden 256, 4 layers, 16 experts top-4 (CI)\n"
    "  -o, --output FILE    output GGUF (removed again if writing fails)\n"
    "  --vocab FILE         copy tokenizer.* metadata (and the vocabulary size) from this GGUF,\n"
    "                       e.g. tests/fixtures/qwen3-vocab.gguf; default: a byte-level vocabulary\n"
    "  --seed N             random seed (default 1)\n"
    "  --routing MODE       routing model of the router weights (docs/EXPERT_CACHE.md):\n"
    "                       uniform     i.i.d. routers, near-uniform routing (default; the bytes\n"
    "                                   of files written before this option)\n"
    "                       calibrated  per-expert lognormal popularity tuned to real models'\n"
    "                                   per-layer LRU-64/128 hit rates (targets ~67 % / 81 %,\n"
    "                                   gets ~63 % / 87 %); use it for cache benchmarks\n"
    "                       skewed      a small hot set (most lookups hit a 4 GiB cache)\n"
    "  --expert-type TYPE   the routed experts' type instead of the preset's: MXFP4 (as the\n"
    "                       published MXFP4 repacks), Q4_K, Q5_K, Q6_K, Q8_0, Q2_K, IQ2_XXS,\n"
    "                       IQ2_XS or IQ1_M\n"
    "  --mtp                append the MTP block (blk.<layers>.*, nextn_predict_layers = 1)\n"
    "  --geometry K=V,...   override sizes: hidden, layers, vocab, ctx, ff, heads, kv_heads,\n"
    "                       head_dim, rope_dims, rope_base, eps, experts, top_k, expert_ff,\n"
    "                       shared_ff, conv, state, groups, dt_rank, inner, interval, precise\n"
    "                       (e.g. layers=24,experts=256,hidden=1024; rope_base=5e6 for Coder-Next)\n"
    "  -t, --threads N      generator threads (default: all CPUs)\n"
    "  --list               print every tensor with its type and shape, a type census and the\n"
    "                       data size; write nothing\n"
    "  --quiet              no progress bar\n";

static int list_plan(const synth_params *p) {
    int n = 0;
    synth_tensor_info *t = synth_plan(p, &n);
    if (!t) return cli_fail("synth", 2, "%s", rl_lasterr());
    uint64_t cnt[QT_COUNT] = {0}, bytes[QT_COUNT] = {0}, total = 0;
    for (int i = 0; i < n; i++) {
        printf("%-40s %-8s {", t[i].name, quant_name(t[i].type));
        for (uint32_t d = 0; d < t[i].n_dims; d++)
            printf("%s%lld", d ? ", " : "", (long long)t[i].ne[d]);
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
    synth_params p = {.seed = 1};
    const char *preset = NULL, *geometry = NULL, *out = NULL, *v;
    bool list = false, quiet = false;
    long long ll;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) {
            fputs(USAGE, stdout);
            return 0;
        } else if (!strcmp(a, "--preset")) {
            if (!(preset = cli_need_value("synth", argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!(out = cli_need_value("synth", argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--vocab")) {
            if (!(p.vocab_path = cli_need_value("synth", argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--geometry")) {
            if (!(geometry = cli_need_value("synth", argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--seed")) {
            if (!(v = cli_need_value("synth", argc, argv, &i)) ||
                !cli_parse_int("synth", a, v, 0, INT64_MAX, &ll))
                return 2;
            p.seed = (uint64_t)ll;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!(v = cli_need_value("synth", argc, argv, &i)) || !cli_parse_int("synth", a, v, 0, 1024, &ll))
                return 2;
            p.n_threads = (int)ll;
        } else if (!strcmp(a, "--routing")) {
            if (!(v = cli_need_value("synth", argc, argv, &i))) return 2;
            if (synth_routing_find(v, &p.routing)) return cli_fail("synth", 2, "--routing: %s", rl_lasterr());
        } else if (!strcmp(a, "--expert-type")) {
            if (!(v = cli_need_value("synth", argc, argv, &i))) return 2;
            for (uint32_t q = 1; q < QT_COUNT && !p.expert_type; q++)
                if (quant_get(q) && !strcasecmp(quant_name(q), v)) p.expert_type = q;
            if (!p.expert_type)
                return cli_fail("synth", 2, "--expert-type: unknown type '%s' (e.g. MXFP4, Q4_K, IQ2_XXS)", v);
        } else if (!strcmp(a, "--mtp")) {
            p.mtp = true;
        } else if (!strcmp(a, "--list")) {
            list = true;
        } else if (!strcmp(a, "--quiet")) {
            quiet = true;
        } else {
            return cli_fail("synth", 2, "unknown option '%s' (see redlite synth --help)", a);
        }
    }
    if (!preset)
        return cli_fail("synth", 2, "need --preset cf2|iq2_xxs|q4_k_m|tiny (see redlite synth --help)");
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
    if (list) return list_plan(&p);
    if (!out) return cli_fail("synth", 2, "need -o FILE.gguf (see redlite synth --help)");
    p.progress = !quiet;
    synth_stats st;
    if (synth_write(&p, out, &st)) return cli_fail("synth", 1, "%s", rl_lasterr());
    printf(
        "synth: wrote %s (preset %s, seed %llu, %s routing%s): %d tensors, %llu bytes (%.2f GiB) in %.2f s, %.0f MB/s\n",
        out, synth_preset_name(p.preset), (unsigned long long)p.seed, synth_routing_name(p.routing), p.mtp ? ", MTP" : "", st.n_tensors,
        (unsigned long long)st.file_bytes, (double)st.file_bytes / (1u << 30), st.seconds,
        st.seconds > 0 ? (double)st.file_bytes / st.seconds / 1e6 : 0.0);
    return 0;
}
