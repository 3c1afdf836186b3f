/* tool_synth.c — `tool_synth PRESET SEED THREADS OUT.gguf [GEOMETRY]`: synth_write alone, for
 * tests/test_synth_determinism.py, which compiles it together with the modules synth's bytes
 * pass through (synth, qwen3next, gguf, gguf_write, quant*, pool, common; the rest comes from
 * build/libredlite.a) under several compilers' flag sets (-O0 .. -O3, -march=native
 * -ffp-contract=fast, UBSan) and checks that every build writes the same bytes as build/redlite. Exit 0, 1 on
 * a runtime error, 2 on a usage error. */
#include <stdio.h>
#include <stdlib.h>

#include "base/common.h"
#include "model/synth.h"

int main(int argc, char **argv) {
    if (argc != 5 && argc != 6) {
        fprintf(stderr, "usage: tool_synth PRESET SEED THREADS OUT.gguf [GEOMETRY]\n");
        return 2;
    }
    synth_params p = {0};
    if (synth_preset_find(argv[1], &p.preset)) {
        fprintf(stderr, "tool_synth: %s\n", rl_lasterr());
        return 2;
    }
    synth_geom_default(p.preset, &p.g);
    if (argc == 6 && synth_geom_parse(&p.g, argv[5])) {
        fprintf(stderr, "tool_synth: %s\n", rl_lasterr());
        return 2;
    }
    p.seed = strtoull(argv[2], NULL, 10);
    p.n_threads = atoi(argv[3]);
    if (synth_write(&p, argv[4], NULL)) {
        fprintf(stderr, "tool_synth: %s\n", rl_lasterr());
        return 1;
    }
    return 0;
}
