/* vram_plan.h — the VRAM expert tier's planner: how much of the device the dense weights, the
 * context (KV cache, recurrent state, scratch) and the routed-expert slots get
 * (docs/EXPERT_CACHE.md, "VRAM tier"). Pure C, no CUDA: tested in CI (tests/c/test_vram.c).
 *
 * The backend (backend_cuda.c) fills a vram_geom from the model and its exact device sizes,
 * asks vram_plan_make for a plan under `--vram-mib N|auto`, and gets either full residency
 * (every expert fits: the plain resident path) or a number of slots per layer.
 *
 * Budget: N MiB is everything Red Lite allocates on the device for this model and context
 * (dense weights + context + slots), so "--vram-mib 8192" means what a user of an 8 GB card
 * expects. auto = the device's free memory minus a safety margin (VRAM_MARGIN: the CUDA
 * context, graphs and other processes' growth). */
#ifndef RL_VRAM_PLAN_H
#define RL_VRAM_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "model/experts.h"
#include "model/qwen3next.h"

#define VRAM_ALIGN 256                        /* alignment of every region in a slot (and slots) */
#define VRAM_MARGIN_MIN ((uint64_t)512 << 20) /* auto: free memory minus max(512 MiB, 5 % of total) */

/* Where the bytes of one expert live in a device slot of layer il: gate rows at gate_off, up
 * rows at up_off (fused gate_up: the fused slice at gate_off, up = gate + n_ff rows), down rows
 * at down_off; slots of a layer are slot_bytes apart (the grouped matmul's expert_stride). */
typedef struct {
    uint64_t gate_off, up_off, down_off, slot_bytes;
    uint64_t src_bytes[3]; /* bytes copied per region: gate (or fused gate_up), up (0 if fused), down */
} vram_layout;

/* One layer's slot layout from one expert's slice (model/experts.h: each matrix its own bytes). */
void vram_layout_make(const q3n_expert_slice *e, vram_layout *out);
/* The bytes a fill of one expert copies (its regions' source bytes). */
static inline uint64_t vram_layout_copy_bytes(const vram_layout *ly) {
    return ly->src_bytes[0] + ly->src_bytes[1] + ly->src_bytes[2];
}
/* ... from the bound model: 0, or -1 (rl_lasterr) if layer il has no routed experts. */
int vram_layout_of(const q3n_model *m, int il, vram_layout *out);

/* What the planner needs to know. */
typedef struct {
    int n_layer, n_expert, top_k;
    uint64_t slot_bytes[Q3N_MAX_LAYERS]; /* per layer (vram_layout.slot_bytes): size classes */
    uint64_t dense;                      /* every device byte of the model except routed experts */
    uint64_t ctx;                        /* KV cache + recurrent state (+ its backup) + scratch */
    uint64_t dev_free, dev_total;        /* device memory now (auto) */
} vram_geom;

/* Geometry of a model: layers, experts, slot sizes and dense bytes (the bytes as stored; the
 * backend may replace dense/ctx with its exact sizes). ctx and dev_* are left 0. */
int vram_geom_of(const q3n_model *m, vram_geom *g);

typedef struct {
    bool full;                 /* every expert fits: resident, no slot cache */
    uint64_t budget;           /* bytes the plan may use (N, or free - margin) */
    uint64_t slot_total;       /* bytes of all slots (0 when full) */
    uint64_t experts_all;      /* bytes of every expert in slots */
    int slots[Q3N_MAX_LAYERS]; /* slots per layer (n_expert each when full) */
    int min_slots, max_slots;  /* over the layers */
    char reason[256];          /* one line: what was decided and why */
} vram_plan;

/* spec: "auto" (or NULL/""), "full", or a number of MiB (the whole device budget). Slots: the
 * same count s per layer, s = (budget - dense - ctx) / sum of the layers' slot sizes, at most
 * n_expert; the bytes left over give one more slot to layers in order while they fit. At least
 * top_k slots per layer (one row's experts at once; a chunk needing more is run in batches).
 * 0, or -1 with a one-line rl_lasterr: bad spec, dense + context do not fit, fewer than top_k
 * slots per layer fit (the message names the smallest budget that works). */
int vram_plan_make(const vram_geom *g, const char *spec, vram_plan *out);
/* Smallest budget that works (top_k slots per layer), and the budget of full residency. */
uint64_t vram_min_budget(const vram_geom *g);
uint64_t vram_full_budget(const vram_geom *g);
/* Check a --vram-mib value: "auto", "full" or a positive integer of MiB ("" is an error; NULL
 * means auto). 0 or -1 (rl_lasterr). */
int vram_spec_check(const char *spec);
/* The prompt batch a context under this --vram-mib gets when --batch is auto: VRAM_TIER_BATCH for
 * "auto" (NULL) and budgets of at least VRAM_TIER_BATCH_MIB, else 0 (the backend's default). Each
 * chunk of a prompt reads the experts it misses over the link once, so larger chunks share the copy
 * among more rows: on an H100 (2026-12-07) the Qwen3.5-122B-A10B preset at 16 GiB ingested 2,048
 * tokens at 371-391 tok/s in 2048-row chunks against 114 in 512-row ones, CF2 at 8 GiB 4,325 against
 * 2,985, the 35B-A3B preset at 4 GiB 4,494 against 1,867. The chunk's scratch comes out of the slots
 * (that 4 GiB run: 26-27 slots a layer instead of 31-32, decode 90.6 tok/s instead of 100.0): for a
 * coding agent's long prompts 2.4x faster ingestion is worth 9 % of decode. Below 4 GiB (unmeasured,
 * the scratch a larger share of the slots) 512 rows. */
#define VRAM_TIER_BATCH 2048
#define VRAM_TIER_BATCH_MIB 4096
int vram_prompt_batch(const char *spec);

/* ---- host tier and misses (--vram-pin, --vram-miss; docs/EXPERT_CACHE.md "VRAM tier") ---- */

/* --vram-pin: page-lock the host tier so every slot fill is a DMA (no staging memcpy).
 * auto: the bounded RAM cache's arena always (it is within the RAM budget already); the file
 * mapping (--cache-mib full/mmap) only when its expert span is at most VRAM_PIN_RAM_SHARE of
 * the machine's RAM. on: always try. off: the staging ring. A failed registration falls back to
 * the staging ring with one stderr line. Same bytes either way: outputs do not change. */
typedef enum { VRAM_PIN_AUTO = 0, VRAM_PIN_ON, VRAM_PIN_OFF } vram_pin_mode;
#define VRAM_PIN_RAM_SHARE 0.60
/* --vram-miss: what a small forward (T <= VRAM_CPU_MAX_T rows: decode, short verifies) does with
 * a routed expert that is not in VRAM. copy: fill a slot. cpu: compute it on the CPU from host
 * memory while the GPU computes the resident ones, upload its output rows for the combine. auto
 * (default): per layer, as many misses on the CPU as the measured cost model says
 * (vram_miss_split). The CPU takes a layer's experts only where it gives the GPU's bits
 * (vram_tier_opts.cpu_exact), so all three are bit-identical to full residency. Larger forwards
 * (prefill) always copy. */
typedef enum { VRAM_MISS_COPY = 0, VRAM_MISS_CPU, VRAM_MISS_AUTO } vram_miss_mode;
#define VRAM_CPU_MAX_T 8
/* NULL or "" = the default (auto for both); 0, or -1 with rl_lasterr naming the choices. */
int vram_pin_parse(const char *s, vram_pin_mode *out);
int vram_miss_parse(const char *s, vram_miss_mode *out);
const char *vram_pin_name(vram_pin_mode m);
const char *vram_miss_name(vram_miss_mode m);
/* auto's rule for the mapping: span <= VRAM_PIN_RAM_SHARE * ram (ram 0: refuse). */
bool vram_pin_mapping_ok(uint64_t span, uint64_t ram);

/* Where a decode step of the tier runs (vram_tier_graph_next): inside the graph while the
 * host->device bytes per decode token, an EMA with weight VRAM_GRAPH_EMA for the newest step,
 * are at most limit_bytes; else on the tier's own path. A graph step reads its misses over the
 * link inside the GEMVs, a slow way to move many bytes; the own path copies them in bulk by DMA
 * behind a pre-gated prefetch; both give the same bits. Measured on an H100 (2026-12-07): the
 * graph won at 7 and 32 MiB per token (CF2 at 16 and 8 GiB) and lost at 71 and 295 MiB (Qwen3.5
 * 35B-A3B at 8 and 4 GiB), hence VRAM_GRAPH_MIB. */
#define VRAM_GRAPH_EMA 0.2
#define VRAM_GRAPH_MIB 48
double vram_graph_ema(double ema, uint64_t step_bytes);
bool vram_graph_take(double ema, double limit_bytes);
/* The switch point is a time on the link: VRAM_GRAPH_MIB was measured on the H100's own link, where the
 * tier's copies obtained 48-54 GB/s (VRAM_GRAPH_REF_GBS). Under a 25 GB/s link (emulated on an H100,
 * copies obtaining 19-22 GB/s; 2026-12-07) the graph won at 12 MiB per token (CF2 at 16 GiB: 190.6 tok/s
 * against the own path's 171.3) and lost at 28 MiB (8 GiB: 139.0 against 150.0), so the default limit
 * shrinks with the rate the tier's copies obtain: limit_bytes * gbs / VRAM_GRAPH_REF_GBS, never above
 * limit_bytes; gbs <= 0 (nothing measured yet): limit_bytes. */
#define VRAM_GRAPH_REF_GBS 50.0
double vram_graph_limit(double limit_bytes, double gbs);

/* The cost model of --vram-miss auto for one layer of a forward: m experts not in VRAM;
 * copy_s = seconds to fill one slot (PCIe and staging; the GPU waits for the copies),
 * cpu_s = seconds to compute one expert for the forward's rows on the CPU pool, cpu_fixed_s =
 * the CPU path's fixed cost (activation download, output upload, dispatch). The copies and the
 * CPU run at the same time, so k experts on the CPU cost max(k*cpu_s + cpu_fixed_s, (m-k)*copy_s);
 * returns the k in 0..m with the least cost (ties: fewer on the CPU, since a copied expert stays
 * resident for later tokens). Non-positive or non-finite estimates: 0 (copy everything). */
int vram_miss_split(int m, double copy_s, double cpu_s, double cpu_fixed_s);
/* Which k of a layer's non-resident experts uni[nres..n) the CPU computes: those with the fewest
 * rows first (cnt[e]: the expert's rows in this forward, 1..max_rows), ties in uni order, at most
 * max_pairs rows in all. They go to out[0..*n_out) and leave uni, whose other entries keep their
 * order; returns the new n. */
int vram_cpu_pick(int32_t *uni, int nres, int n, const int32_t *cnt, int k, int max_rows, int max_pairs,
                  int32_t *out, int *n_out);
#endif
