/* vram_link.c — see vram_link.h. Host code of the CUDA backend (compiled with CUDA=1 only). */
#ifdef RL_CUDA
#include "cache/vram_link.h"

#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#include "base/common.h"
#include "cuda/cuda_ops.h"

#define VL_RING 64   /* timed segments in flight */
#define VL_EMA 0.1   /* weight of a segment's residual in the overhead estimate a */
#define VL_SPIN 2e-4 /* the last this many seconds of a hold are spun, not slept */

struct vram_link {
    cudaStream_t cp;
    double cap;  /* GB/s; 0: timed only */
    double a, b; /* real cost of a segment: a + b * bytes seconds */
    /* credit (<= 0): seconds the segments so far ran faster than the cap allows, net (a model error);
     * the next hold pays it back, so the cap holds over the run whatever the model's error */
    double credit;
    /* segment i: its copies between ev[i % VL_RING][0] and [1], bytes[] of them, hold[] planned
     * (-1: no cap, no host function), extra[] of it paying back credit; head segments recorded, tail
     * harvested */
    cudaEvent_t ev[VL_RING][2];
    uint64_t bytes[VL_RING], open_bytes;
    double hold[VL_RING], extra[VL_RING];
    int64_t head, tail;
    bool open;
    vram_link_stats st;
};

/* The hold (a host function on the copy stream: no CUDA call allowed here); ud: the hold in
 * nanoseconds. Sleeps to within VL_SPIN of the end, then spins: a sleep alone overshoots by the
 * timer slack (~50 us, as much as a whole CF2 expert's copy at 25 GB/s). */
static void CUDART_CB link_hold(void *ud) {
    const double until = rl_now() + 1e-9 * (double)(uintptr_t)ud;
    for (double left; (left = until - rl_now()) > 0;) {
        if (left < VL_SPIN) continue;
        const double s = left - 0.75 * VL_SPIN;
        struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

/* Account the finished segments (those in flight stay for a later call). Under a cap, the measured
 * time less the planned hold, against the model a + b * bytes, corrects a; the time less what paid
 * back credit, against bytes / cap, adds to the credit (a slower segment only cancels credit: a real
 * link does not bank idle time). */
static void link_harvest(vram_link *l) {
    while (l->tail < l->head) {
        const int i = (int)(l->tail % VL_RING);
        cudaError_t e = cudaEventQuery(l->ev[i][1]);
        if (e == cudaErrorNotReady) return;
        float ms = 0;
        if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, l->ev[i][0], l->ev[i][1]);
        l->tail++;
        if (e != cudaSuccess) { /* a failed copy: its error surfaces on the streams; nothing counted */
            (void)cudaGetLastError();
            continue;
        }
        const double t = 1e-3 * ms;
        l->st.bytes += l->bytes[i];
        l->st.seconds += t;
        l->st.segments++;
        if (l->hold[i] >= 0) { /* under a cap: the real part was t - hold */
            l->a += VL_EMA * (t - l->hold[i] - (l->a + l->b * (double)l->bytes[i]));
            if (l->a < 0) l->a = 0;
            l->credit += t - l->extra[i] - (double)l->bytes[i] / (l->cap * 1e9);
            if (l->credit > 0) l->credit = 0;
        }
    }
}

int vram_link_begin(vram_link *l) {
    if (l->open) return 0;
    if (l->head - l->tail == VL_RING) { /* the ring is full: wait for the oldest */
        if (CU_CHECK(cudaEventSynchronize(l->ev[l->tail % VL_RING][1]))) return -1;
        link_harvest(l);
    }
    if (CU_CHECK(cudaEventRecord(l->ev[l->head % VL_RING][0], l->cp))) return -1;
    l->open = true;
    l->open_bytes = 0;
    return 0;
}

void vram_link_add(vram_link *l, uint64_t bytes) { l->open_bytes += bytes; }

int vram_link_end(vram_link *l) {
    if (!l->open) return 0;
    l->open = false;
    const int i = (int)(l->head % VL_RING);
    const double B = (double)l->open_bytes;
    double hold = -1, extra = 0; /* no cap: no host function, no model */
    if (l->cap > 0) { /* the host function even for a hold of 0: every segment costs what a models */
        hold = B / (l->cap * 1e9) - (l->a + l->b * B);
        hold = hold > 1e-6 ? hold : 0;
        extra = -l->credit; /* paid now: counted at once, so the segments in flight do not pay it again */
        l->credit = 0;
        hold += extra;
        if (CU_CHECK(cudaLaunchHostFunc(l->cp, link_hold, (void *)(uintptr_t)(hold * 1e9)))) return -1;
    }
    l->hold[i] = hold;
    l->extra[i] = extra;
    l->bytes[i] = l->open_bytes;
    if (CU_CHECK(cudaEventRecord(l->ev[i][1], l->cp))) return -1;
    l->head++;
    link_harvest(l);
    return 0;
}

void vram_link_get_stats(vram_link *l, vram_link_stats *out) {
    link_harvest(l);
    *out = l->st;
}

/* One copy of n bytes followed by an empty host function, as a held segment is: the best time of
 * 3 (after a warm-up), or -1. */
static double link_time(vram_link *l, void *dst, const void *src, size_t n) {
    double best = 0;
    for (int rep = 0; rep < 4; rep++) {
        float ms = 0;
        if (CU_CHECK(cudaEventRecord(l->ev[0][0], l->cp)) ||
            CU_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, l->cp)) ||
            CU_CHECK(cudaLaunchHostFunc(l->cp, link_hold, NULL)) ||
            CU_CHECK(cudaEventRecord(l->ev[0][1], l->cp)) || CU_CHECK(cudaEventSynchronize(l->ev[0][1])) ||
            CU_CHECK(cudaEventElapsedTime(&ms, l->ev[0][0], l->ev[0][1])))
            return -1;
        if (rep && (best == 0 || 1e-3 * ms < best)) best = 1e-3 * ms;
    }
    return best;
}

vram_link *vram_link_new(cudaStream_t cp, double cap_gbs, void *probe_dst, const void *probe_src,
                         size_t probe_bytes) {
    vram_link *l = rl_calloc(1, sizeof *l, "VRAM tier link");
    if (!l) return NULL;
    l->cp = cp;
    l->cap = cap_gbs;
    for (int i = 0; i < VL_RING; i++)
        for (int k = 0; k < 2; k++)
            if (CU_CHECK(cudaEventCreate(&l->ev[i][k]))) goto fail;
    if (cap_gbs > 0) { /* the real link: a + b * bytes from two sizes */
        const size_t n = probe_bytes, m = n / 8;
        const double tn = link_time(l, probe_dst, probe_src, n), tm = link_time(l, probe_dst, probe_src, m);
        if (tn < 0 || tm < 0) goto fail;
        l->b = tn > tm && n > m ? (tn - tm) / (double)(n - m) : tn / (double)(n ? n : 1);
        l->a = tm - l->b * (double)m > 0 ? tm - l->b * (double)m : 0;
        l->st.raw_gbs = l->b > 0 ? 1e-9 / l->b : 0;
        l->st.cap_gbs = cap_gbs;
    }
    return l;
fail:
    vram_link_free(l);
    return NULL;
}

void vram_link_free(vram_link *l) {
    if (!l) return;
    for (int i = 0; i < VL_RING; i++)
        for (int k = 0; k < 2; k++)
            if (l->ev[i][k]) cudaEventDestroy(l->ev[i][k]);
    free(l);
}
#else
typedef int vram_link_unused; /* ISO C wants a declaration in every translation unit */
#endif
