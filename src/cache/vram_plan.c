/* vram_plan.c — see vram_plan.h. */
#include "cache/vram_plan.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"

#define MIB 1048576.0

static uint64_t al(uint64_t n) { return (n + VRAM_ALIGN - 1) / VRAM_ALIGN * VRAM_ALIGN; }

void vram_layout_make(const q3n_expert_slice *e, vram_layout *o) {
    memset(o, 0, sizeof *o);
    o->gate_off = 0;
    if (e->fused) { /* one slice: gate rows then up rows, as in the file */
        o->src_bytes[0] = e->gate_bytes + e->up_bytes;
        o->up_off = e->gate_bytes;
        o->down_off = al(e->gate_bytes + e->up_bytes);
    } else { /* gate, up: each its own tensor's row bytes (the types may differ) */
        o->src_bytes[0] = e->gate_bytes;
        o->src_bytes[1] = e->up_bytes;
        o->up_off = al(e->gate_bytes);
        o->down_off = o->up_off + al(e->up_bytes);
    }
    o->src_bytes[2] = e->down_bytes;
    o->slot_bytes = o->down_off + al(e->down_bytes);
}

int vram_layout_of(const q3n_model *m, int il, vram_layout *out) {
    const q3n_layer *L = &m->layers[il];
    if (!L->gate_exps.data || !L->down_exps.data) return rl_seterr("layer %d has no routed experts", il);
    const q3n_expert_slice e = q3n_expert_slice_of(&m->hp, L, 0);
    vram_layout_make(&e, out);
    return 0;
}

int vram_geom_of(const q3n_model *m, vram_geom *g) {
    memset(g, 0, sizeof *g);
    g->n_layer = m->hp.n_layer;
    g->n_expert = m->hp.n_expert;
    g->top_k = m->hp.n_expert_used;
    for (int il = 0; il < g->n_layer; il++) {
        vram_layout ly;
        if (vram_layout_of(m, il, &ly)) return -1;
        g->slot_bytes[il] = ly.slot_bytes;
    }
    g->dense = m->bytes_dense;
    return 0;
}

static uint64_t layer_sum(const vram_geom *g) {
    uint64_t s = 0;
    for (int il = 0; il < g->n_layer; il++) s += g->slot_bytes[il];
    return s;
}

uint64_t vram_min_budget(const vram_geom *g) { return g->dense + g->ctx + (uint64_t)g->top_k * layer_sum(g); }
uint64_t vram_full_budget(const vram_geom *g) {
    return g->dense + g->ctx + (uint64_t)g->n_expert * layer_sum(g);
}

int vram_spec_check(const char *spec) {
    if (!spec || !strcmp(spec, "auto") || !strcmp(spec, "full")) return 0;
    char *end;
    errno = 0;
    long long v = strtoll(spec, &end, 10);
    if (errno || *end || end == spec || v <= 0 || v > (1LL << 40))
        return rl_seterr("--vram-mib %s: expected auto, full or a number of MiB > 0", spec);
    return 0;
}

int vram_prompt_batch(const char *spec) {
    if (!spec || !*spec || !strcmp(spec, "auto")) return VRAM_TIER_BATCH;
    if (!strcmp(spec, "full") || vram_spec_check(spec)) {
        rl_clearerr();
        return 0;
    }
    return strtoll(spec, NULL, 10) >= VRAM_TIER_BATCH_MIB ? VRAM_TIER_BATCH : 0;
}

int vram_plan_make(const vram_geom *g, const char *spec, vram_plan *o) {
    memset(o, 0, sizeof *o);
    if (spec && *spec && vram_spec_check(spec)) return -1;
    if (g->n_layer <= 0 || g->n_layer > Q3N_MAX_LAYERS || g->n_expert <= 0 || g->top_k <= 0 ||
        g->top_k > g->n_expert)
        return rl_seterr("VRAM plan: bad geometry (%d layers, %d experts, top-%d)", g->n_layer, g->n_expert,
                         g->top_k);
    const uint64_t sum = layer_sum(g), fullb = vram_full_budget(g), minb = vram_min_budget(g);
    o->experts_all = (uint64_t)g->n_expert * sum;
    const bool is_auto = !spec || !*spec || !strcmp(spec, "auto"), is_full = spec && !strcmp(spec, "full");
    char src[96];
    if (is_auto || is_full) {
        uint64_t margin = g->dev_total / 20 > VRAM_MARGIN_MIN ? g->dev_total / 20 : VRAM_MARGIN_MIN;
        o->budget = g->dev_free > margin ? g->dev_free - margin : 0;
        snprintf(src, sizeof src, "auto: %.0f MiB free - %.0f MiB margin", g->dev_free / MIB, margin / MIB);
        if (is_full && o->budget < fullb)
            return rl_seterr(
                "--vram-mib full: every weight and the context need %.0f MiB, the device has %.0f MiB free "
                "(use --vram-mib auto or a number)",
                fullb / MIB, g->dev_free / MIB);
    } else {
        o->budget = (uint64_t)strtoll(spec, NULL, 10) << 20;
        snprintf(src, sizeof src, "requested %s MiB", spec);
    }
    if (o->budget < g->dense + g->ctx)
        return rl_seterr(
            "--vram-mib: the dense weights (%.0f MiB) and the context (%.0f MiB, lower --ctx or --batch) "
            "do not fit in %.0f MiB (%s)",
            g->dense / MIB, g->ctx / MIB, o->budget / MIB, src);
    if (is_full || o->budget >= fullb) {
        o->full = true;
        for (int il = 0; il < g->n_layer; il++) o->slots[il] = g->n_expert;
        o->min_slots = o->max_slots = g->n_expert;
        snprintf(o->reason, sizeof o->reason, "every expert resident: %.0f MiB of %.0f MiB (%s)", fullb / MIB,
                 o->budget / MIB, src);
        return 0;
    }
    if (o->budget < minb)
        return rl_seterr(
            "--vram-mib: %.0f MiB (%s) is below the minimum of %.0f MiB: dense %.0f + context %.0f + "
            "%d expert slots per layer %.0f MiB",
            o->budget / MIB, src, minb / MIB, g->dense / MIB, g->ctx / MIB, g->top_k,
            (double)g->top_k * sum / MIB);
    uint64_t left = o->budget - g->dense - g->ctx;
    uint64_t s = left / sum;
    if (s >= (uint64_t)g->n_expert) s = (uint64_t)g->n_expert - 1; /* not full (checked above) */
    left -= s * sum;
    for (int il = 0; il < g->n_layer; il++) o->slots[il] = (int)s;
    /* the rest: one more slot per layer, in layer order, while it fits */
    for (int il = 0; il < g->n_layer; il++)
        if (g->slot_bytes[il] <= left && o->slots[il] < g->n_expert) {
            o->slots[il]++;
            left -= g->slot_bytes[il];
        }
    o->min_slots = g->n_expert;
    for (int il = 0; il < g->n_layer; il++) {
        o->slot_total += (uint64_t)o->slots[il] * g->slot_bytes[il];
        if (o->slots[il] < o->min_slots) o->min_slots = o->slots[il];
        if (o->slots[il] > o->max_slots) o->max_slots = o->slots[il];
    }
    snprintf(o->reason, sizeof o->reason,
             "%d-%d of %d expert slots per layer (%.0f MiB) + dense %.0f + context %.0f MiB in %.0f MiB (%s)",
             o->min_slots, o->max_slots, g->n_expert, o->slot_total / MIB, g->dense / MIB, g->ctx / MIB,
             o->budget / MIB, src);
    return 0;
}

int vram_pin_parse(const char *s, vram_pin_mode *out) {
    if (!s || !*s || !strcmp(s, "auto")) *out = VRAM_PIN_AUTO;
    else if (!strcmp(s, "on")) *out = VRAM_PIN_ON;
    else if (!strcmp(s, "off")) *out = VRAM_PIN_OFF;
    else return rl_seterr("--vram-pin %s: expected auto, on or off", s);
    return 0;
}

int vram_miss_parse(const char *s, vram_miss_mode *out) {
    if (!s || !*s || !strcmp(s, "auto")) *out = VRAM_MISS_AUTO;
    else if (!strcmp(s, "cpu")) *out = VRAM_MISS_CPU;
    else if (!strcmp(s, "copy")) *out = VRAM_MISS_COPY;
    else return rl_seterr("--vram-miss %s: expected copy, cpu or auto", s);
    return 0;
}

const char *vram_pin_name(vram_pin_mode m) {
    return m == VRAM_PIN_ON ? "on" : m == VRAM_PIN_OFF ? "off" : "auto";
}
const char *vram_miss_name(vram_miss_mode m) {
    return m == VRAM_MISS_CPU ? "cpu" : m == VRAM_MISS_AUTO ? "auto" : "copy";
}

bool vram_pin_mapping_ok(uint64_t span, uint64_t ram) {
    return ram > 0 && (double)span <= VRAM_PIN_RAM_SHARE * (double)ram;
}

int vram_cpu_pick(int32_t *uni, int nres, int n, const int32_t *cnt, int k, int max_rows, int max_pairs,
                  int32_t *out, int *n_out) {
    int pairs = 0, no = 0;
    for (int want = 1; want <= max_rows && no < k; want++)
        for (int i = nres; i < n && no < k; i++) {
            const int e = uni[i];
            if (e < 0 || cnt[e] != want || pairs + want > max_pairs)
                continue; /* e < 0: taken in an earlier pass */
            out[no++] = e;
            pairs += want;
            uni[i] = -1 - e;
        }
    int o = nres;
    for (int i = nres; i < n; i++)
        if (uni[i] >= 0) uni[o++] = uni[i];
    *n_out = no;
    return o;
}

double vram_graph_ema(double ema, uint64_t step_bytes) {
    return (1.0 - VRAM_GRAPH_EMA) * ema + VRAM_GRAPH_EMA * (double)step_bytes;
}

bool vram_graph_take(double ema, double limit_bytes) { return ema <= limit_bytes; }

double vram_graph_limit(double limit_bytes, double gbs) {
    return gbs > 0 && gbs < VRAM_GRAPH_REF_GBS ? limit_bytes * gbs / VRAM_GRAPH_REF_GBS : limit_bytes;
}

int vram_miss_split(int m, double copy_s, double cpu_s, double cpu_fixed_s) {
    if (m <= 0 || !(copy_s > 0) || !(cpu_s > 0) || !(cpu_fixed_s >= 0) || copy_s > 1e9 || cpu_s > 1e9 ||
        cpu_fixed_s > 1e9)
        return 0;
    int best = 0;
    double best_t = m * copy_s;
    for (int k = 1; k <= m; k++) {
        const double a = k * cpu_s + cpu_fixed_s, b = (m - k) * copy_s, t = a > b ? a : b;
        if (t < best_t) best_t = t, best = k;
    }
    return best;
}
