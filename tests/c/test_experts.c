/* test_experts.c — the routed-expert addressing (model/experts.h) on hand-worked layouts:
 *   - separate gate / up / down tensors of three different types (Q4_K gate, Q6_K up, Q8_0 down):
 *     each matrix strided by its own tensor's row bytes (the up rows are NOT at e * the gate's);
 *   - a fused gate_up slab: up = gate + n_ff rows, experts 2 * n_ff rows apart;
 *   - q3n_expert_rows points exactly there in the bound tensors;
 *   - the VRAM tier's slot layout built from a mixed slice gives every matrix its own bytes. */
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "cache/vram_plan.h"
#include "gguf/quant.h"
#include "model/experts.h"

static uint8_t *gate_buf, *up_buf, *down_buf; /* 512 KiB each: room for every slab below */

static void test_separate(void) {
    q3n_hparams hp = {.n_ff_exp = 3, .n_embd = 512};
    q3n_layer L = {0};
    /* gate / up rows of 512 values: Q4_K 2 blocks x 144 = 288 bytes, Q6_K 2 x 210 = 420; down rows
     * of 32 values (n_in, a Q8_0 block of 34 bytes; the shape's n_ff is not checked here) */
    L.gate_exps = (ops_mat){"g", QT_Q4_K, 512, 3 * 8, quant_row_size(QT_Q4_K, 512), gate_buf};
    L.up_exps = (ops_mat){"u", QT_Q6_K, 512, 3 * 8, quant_row_size(QT_Q6_K, 512), up_buf};
    L.down_exps = (ops_mat){"d", QT_Q8_0, 32, 512 * 8, quant_row_size(QT_Q8_0, 32), down_buf};
    CHECK(L.gate_exps.row_bytes == 288 && L.up_exps.row_bytes == 420 && L.down_exps.row_bytes == 34,
          "row bytes %zu %zu %zu", L.gate_exps.row_bytes, L.up_exps.row_bytes, L.down_exps.row_bytes);
    const q3n_expert_slice s = q3n_expert_slice_of(&hp, &L, 5);
    /* expert 5: gate 5 * 3 * 288 = 4320, up 5 * 3 * 420 = 6300, down 5 * 512 * 34 = 87040 */
    CHECK(!s.fused && s.gate_off == 4320 && s.up_off == 6300 && s.down_off == 87040, "offsets %llu %llu %llu",
          (unsigned long long)s.gate_off, (unsigned long long)s.up_off, (unsigned long long)s.down_off);
    CHECK(s.gate_bytes == 864 && s.up_bytes == 1260 && s.down_bytes == 17408, "bytes %llu %llu %llu",
          (unsigned long long)s.gate_bytes, (unsigned long long)s.up_bytes, (unsigned long long)s.down_bytes);
    CHECK(s.gate_stride == 864 && s.up_stride == 1260 && s.down_stride == 17408, "strides");
    const uint8_t *g, *u, *d;
    q3n_expert_rows(&hp, &L, 5, &g, &u, &d);
    CHECK(g == gate_buf + 4320 && u == up_buf + 6300 && d == down_buf + 87040, "rows: %td %td %td",
          g - gate_buf, u - up_buf, d - down_buf);
    vram_layout ly;
    vram_layout_make(&s, &ly); /* 864 -> 1024, 1260 -> 1280 (256-byte regions) */
    CHECK(ly.src_bytes[0] == 864 && ly.src_bytes[1] == 1260 && ly.src_bytes[2] == 17408 &&
              ly.up_off == 1024 && ly.down_off == 1024 + 1280 && ly.slot_bytes == 1024 + 1280 + 17408,
          "vram layout %llu %llu %llu", (unsigned long long)ly.up_off, (unsigned long long)ly.down_off,
          (unsigned long long)ly.slot_bytes);
}

static void test_fused(void) {
    q3n_hparams hp = {.n_ff_exp = 4, .n_embd = 256};
    q3n_layer L = {0};
    L.fused_gate_up = true;
    L.gate_exps = (ops_mat){"gu", QT_Q4_K, 256, 2 * 4 * 8, quant_row_size(QT_Q4_K, 256), gate_buf}; /* 144 */
    L.down_exps = (ops_mat){"d", QT_Q6_K, 256, 256 * 8, quant_row_size(QT_Q6_K, 256), down_buf};    /* 210 */
    const q3n_expert_slice s = q3n_expert_slice_of(&hp, &L, 3);
    /* expert 3: gate at 3 * 8 * 144 = 3456, up 4 rows later (+576), down 3 * 256 * 210 = 161280 */
    CHECK(s.fused && s.gate_off == 3456 && s.up_off == 4032 && s.down_off == 161280 &&
              s.gate_stride == 1152 && s.up_stride == 1152 && s.up_bytes == 576,
          "fused %llu %llu %llu", (unsigned long long)s.gate_off, (unsigned long long)s.up_off,
          (unsigned long long)s.down_off);
    const uint8_t *g, *u, *d;
    q3n_expert_rows(&hp, &L, 3, &g, &u, &d);
    CHECK(g == gate_buf + 3456 && u == gate_buf + 4032 && d == down_buf + 161280,
          "fused rows: up in the gate slab");
    q3n_expert_rows(&hp, &L, 0, &g, &u, &d);
    CHECK(g == gate_buf && u == gate_buf + 576 && d == down_buf, "expert 0");
    vram_layout ly;
    vram_layout_make(&s, &ly);
    CHECK(ly.src_bytes[0] == 1152 && ly.src_bytes[1] == 0 && ly.up_off == 576 && ly.down_off == 1280,
          "fused layout");
}

int main(void) {
    gate_buf = malloc(512 << 10), up_buf = malloc(512 << 10), down_buf = malloc(512 << 10);
    test_separate();
    test_fused();
    free(gate_buf), free(up_buf), free(down_buf);
    return check_done("test_experts");
}
