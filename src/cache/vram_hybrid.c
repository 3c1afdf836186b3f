/* vram_hybrid.c — the VRAM tier's CPU-computed experts (--vram-miss cpu|auto): the CPU backend's
 * kernels on missed experts with the GPU's bits, and the cost model's measurements. See vram_tier.h.
 * Host code of the CUDA backend (compiled with CUDA=1 only). */
#ifdef RL_CUDA
#include "cache/vram_tier_int.h"

#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "base/swiglu.h"

/* Experts ids[0..n) of layer il on the CPU pool: expert j's rows are xg rows [off_j, off_j + c[j])
 * (off: the running sum of c), its outputs (before the router weight) go to the same rows of
 * h_eo. The fast CPU kernels (ops_matmul_batch, activations quantised to Q8_K): for a layer with
 * cpu_exact (the only ones given here) each product is the scalar vec_dot's, as on the GPU's integer
 * path, and swiglu is the GPU epilogue's function, so every output row has the GPU's bits. 0 or -1. */
int vt_cpu_compute(vram_tier *vt, int il, const int32_t *ids, const int32_t *c, int n) {
    const q3n_layer *L = &vt->m->layers[il];
    const int D = vt->m->hp.n_embd, ff = vt->m->hp.n_ff_exp;
    if (vt_host_rows(vt, il, ids, n)) return -1;
    size_t need = 0;
    int nt = 0, off = 0;
    for (int j = 0; j < n; j++) { /* gate and up (fused: one matrix of 2 ff rows) per expert */
        ops_mat *g = &vt->mats[3 * j], *u = g + 1, *d = g + 2;
        *g = L->gate_exps;
        g->data = vt->hg[j];
        g->n_out = L->fused_gate_up ? 2 * ff : ff;
        *d = L->down_exps;
        d->data = vt->hd[j];
        d->n_out = D;
        vt->tasks[nt++] =
            (ops_mm_task){g, vt->xg + (size_t)off * D, c[j], vt->gb + (size_t)off * g->n_out, NULL};
        if (!L->fused_gate_up) {
            *u = L->up_exps;
            u->data = vt->hu[j];
            u->n_out = ff;
            vt->tasks[nt++] =
                (ops_mm_task){u, vt->xg + (size_t)off * D, c[j], vt->ub + (size_t)off * ff, NULL};
        }
        need += 2 * (((ops_actq_bytes(g, c[j]) + 63) & ~(size_t)63) +
                     ((ops_actq_bytes(d, c[j]) + 63) & ~(size_t)63));
        off += c[j];
    }
    if (need > vt->actq_cap) {
        free(vt->actq);
        if (!(vt->actq = rl_malloc(need, "VRAM tier CPU experts"))) {
            vt->actq_cap = 0;
            vt_host_release(vt, il);
            return -1;
        }
        vt->actq_cap = need;
    }
    size_t ao = 0;
    for (int i = 0; i < nt; i++) {
        vt->tasks[i].actq = (uint8_t *)vt->actq + ao;
        ao += (ops_actq_bytes(vt->tasks[i].W, vt->tasks[i].T) + 63) & ~(size_t)63;
    }
    ops_matmul_batch(vt->pool, vt->tasks, nt, true);
    for (int r = 0; r < off; r++) { /* h = silu(gate) * up, into ub rows of ff (in place when not fused) */
        float *g = vt->gb + (size_t)r * (L->fused_gate_up ? 2 * ff : ff),
              *u = L->fused_gate_up ? g + ff : vt->ub + (size_t)r * ff;
        float *h = vt->ub + (size_t)r * ff;
        for (int i = 0; i < ff; i++) h[i] = swiglu(g[i], u[i]); /* the GPU epilogue's function and bits */
    }
    nt = 0;
    off = 0;
    for (int j = 0; j < n; j++) {
        vt->tasks[nt++] = (ops_mm_task){&vt->mats[3 * j + 2], vt->ub + (size_t)off * ff, c[j],
                                        vt->h_eo + (size_t)off * D, NULL};
        off += c[j];
    }
    ao = 0;
    for (int i = 0; i < nt; i++) {
        vt->tasks[i].actq = (uint8_t *)vt->actq + ao;
        ao += (ops_actq_bytes(vt->tasks[i].W, vt->tasks[i].T) + 63) & ~(size_t)63;
    }
    ops_matmul_batch(vt->pool, vt->tasks, nt, true);
    return vt_host_release(vt, il);
}

/* The cost model's estimates, measured once before the first forward: a fill of n slots of
 * layer 0 (through the path fills really take: DMA or the staging ring; a free slot gets expert
 * i's bytes, a slot vram_tier_warm filled its own expert's again, so no slot's content changes), and per cost
 * class 1 and 4 experts on the CPU (one row). */
void vt_calibrate(vram_tier *vt) {
    vt->calibrated = true;
    if (!vt->pin_resolved) vt_pin_resolve(vt);
    const int D = vt->m->hp.n_embd, n = vt->plan.slots[0] < 8 ? vt->plan.slots[0] : 8;
    int32_t ids[8], sl[8], c[8];
    for (int i = 0; i < 8; i++) { /* a slot the warm-up filled is rewritten with its own expert */
        const int k = i < n ? vram_slots_key(vt->slots, 0, i) : -1;
        sl[i] = i;
        ids[i] = k >= 0 ? k : i % vt->E;
        c[i] = 1;
    }
    double best = 0;
    for (int rep = 0; rep < 3 && n > 0; rep++) { /* the first warms the path up */
        int done = 0;
        double t0 = rl_now();
        if (vt_host_rows(vt, 0, ids, n) || vt_fill_slots(vt, 0, sl, ids, n, false, &done) ||
            vt_host_release(vt, 0) || CU_CHECK(cudaStreamSynchronize(vt->cp))) {
            rl_clearerr();
            return; /* no estimate: auto copies */
        }
        double t = rl_now() - t0;
        if (rep && (best == 0 || t < best)) best = t;
    }
    vt->copy_s_per_byte = best / ((double)n * (double)vt->ly[0].slot_bytes);
    for (size_t i = 0; i < 4 * (size_t)D; i++) vt->xg[i] = 0.01f * (float)((i * 37) % 17) - 0.08f;
    double fixed = 0;
    int measured = 0;
    for (int k = 0; k < vt->n_kind; k++) {
        int il = 0; /* the class's first layer the CPU may compute (no estimate: never used) */
        while (il < vt->m->hp.n_layer && (vt->kind[il] != k || !vt->cpu_exact[il])) il++;
        if (il == vt->m->hp.n_layer) continue;
        measured++;
        double t1 = 1e30, t4 = 1e30;
        for (int rep = 0; rep < 3; rep++) {
            double t0 = rl_now();
            if (vt_cpu_compute(vt, il, ids, c, 1)) break;
            double ta = rl_now();
            if (vt_cpu_compute(vt, il, ids, c, 4)) break;
            double tb = rl_now();
            t1 = ta - t0 < t1 ? ta - t0 : t1;
            t4 = tb - ta < t4 ? tb - ta : t4;
        }
        rl_clearerr();
        const double per = t4 > t1 ? (t4 - t1) / 3 : t1;
        vt->cpu_s[k] = per;
        fixed += t1 - per > 0 ? t1 - per : 0;
    }
    vt->cpu_fixed_s = measured ? fixed / measured : 0;
}

/* Which of the layer's non-resident experts (uni[nres..n)) the CPU computes: all (cpu), or the
 * cost model's k (auto), those with the fewest rows first. They leave uni; the rest keep order.
 * Returns the new n. */
int vt_choose_cpu(vram_tier *vt, int il, int nres, int n) {
    const int m = n - nres;
    if (!vt->cpu_exact[il]) return n; /* the CPU's bits would differ: every miss is copied */
    int k = m;
    if (vt->miss == VRAM_MISS_AUTO)
        k = vram_miss_split(m, vt->copy_s_per_byte * (double)vt->ly[il].slot_bytes, vt->cpu_s[vt->kind[il]],
                            vt->cpu_fixed_s);
    return vram_cpu_pick(vt->uni, nres, n, vt->cnt, k, VRAM_CPU_MAX_T, VT_CPU_PAIRS, vt->cpu_e, &vt->n_cpu);
}

#endif
