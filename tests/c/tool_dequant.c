/* tool_dequant.c — stdin/stdout bridge to the quant traits for tests/test_quant_oracle.py.
 *
 *   rl_dequant TYPE N        read quant_row_size(TYPE, N) bytes of blocks from stdin,
 *                            write N float32 (to_float) to stdout
 *   rl_dequant -q TYPE N     read N float32 from stdin, write the from_float blocks to stdout
 *
 * TYPE is a name ("Q4_K") or a numeric ggml type id. Built by `make all` as
 * $(BUILD)/tools/rl_dequant. Exit status 2 on bad usage, 1 on a short read / unsupported op.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gguf/quant.h"

static int parse_type(const char *s) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*s && !*end) return quant_get((uint32_t)v) ? (int)v : -1;
    for (int t = 0; t < QT_COUNT; t++)
        if (quant_get((uint32_t)t) && strcasecmp(quant_name((uint32_t)t), s) == 0) return t;
    return -1;
}

static int read_all(void *buf, size_t n) { return fread(buf, 1, n, stdin) == n ? 0 : -1; }

int main(int argc, char **argv) {
    int quantize = argc == 4 && strcmp(argv[1], "-q") == 0;
    if (argc != 3 + quantize) {
        fprintf(stderr, "usage: rl_dequant [-q] TYPE N\n");
        return 2;
    }
    int type = parse_type(argv[1 + quantize]);
    long long n = atoll(argv[2 + quantize]);
    const quant_traits *t = type < 0 ? NULL : quant_get((uint32_t)type);
    size_t rs = t ? quant_row_size((uint32_t)type, n) : 0;
    if (!t || (n > 0 && rs == 0)) {
        fprintf(stderr, "rl_dequant: unknown type '%s' or N not a multiple of the block size\n",
                argv[1 + quantize]);
        return 2;
    }
    if (quantize && !t->from_float) {
        fprintf(stderr, "rl_dequant: %s has no from_float\n", t->name);
        return 1;
    }
    unsigned char *blocks = malloc(rs + 1);
    float *f = malloc((size_t)n * sizeof(float) + 1);
    if (!blocks || !f) return 1;
    int rc = 0;
    if (quantize) {
        if (read_all(f, (size_t)n * sizeof(float))) rc = 1;
        else {
            t->from_float(f, blocks, n);
            fwrite(blocks, 1, rs, stdout);
        }
    } else {
        if (read_all(blocks, rs)) rc = 1;
        else {
            t->to_float(blocks, f, n);
            fwrite(f, sizeof(float), (size_t)n, stdout);
        }
    }
    if (rc) fprintf(stderr, "rl_dequant: short read on stdin\n");
    free(blocks);
    free(f);
    return rc;
}
