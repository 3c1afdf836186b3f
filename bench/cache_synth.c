/* cache_synth.c — write a synthetic cf2 (or other preset) model for the expert-cache benchmark
 * on a machine without the full CLI's libraries: `cache_synth PRESET OUT.gguf [ROUTING]` (seed 1,
 * the preset's geometry, byte vocabulary). ROUTING defaults to calibrated, the routing model for
 * cache benchmarks (issue 17, docs/EXPERT_CACHE.md "Synthetic routing"). Same bytes as
 * `redlite synth --preset PRESET --routing ROUTING -o OUT`. */
#include <stdio.h>

#include "base/common.h"
#include "model/synth.h"

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: cache_synth PRESET OUT.gguf [uniform|calibrated|skewed]\n");
        return 2;
    }
    synth_params p = {.seed = 1, .progress = false, .routing = SYNTH_ROUTING_CALIBRATED};
    if (argc == 4 && synth_routing_find(argv[3], &p.routing)) {
        fprintf(stderr, "cache_synth: %s\n", rl_lasterr());
        return 2;
    }
    if (synth_preset_find(argv[1], &p.preset)) {
        fprintf(stderr, "cache_synth: %s\n", rl_lasterr());
        return 2;
    }
    synth_geom_default(p.preset, &p.g);
    synth_stats st;
    if (synth_write(&p, argv[2], &st)) {
        fprintf(stderr, "cache_synth: %s\n", rl_lasterr());
        return 1;
    }
    fprintf(stderr, "cache_synth: %s: %s routing, %llu bytes in %.1f s\n", argv[2], synth_routing_name(p.routing),
            (unsigned long long)st.file_bytes, st.seconds);
    return 0;
}
