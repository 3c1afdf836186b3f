/* vram_link.h — the VRAM tier's host->device link as the tier sees it: every run of copies it
 * queues on its copy stream (a "segment": the DMAs of a fill from page-locked memory, or one staging
 * chunk's copies) is timed by a pair of events, so the tier can report the bandwidth it obtained;
 * and, under a cap (RL_VRAM_LINK_GBS=X, parsed in src/backend/cuda_tune.c), each segment is held on
 * the copy stream until a link of X GB/s would have finished it: a consumer card's PCIe 4 link
 * emulated on a machine whose link is faster (docs/CUDA.md, "Emulating a consumer link").
 *
 * The hold is a host function (cudaLaunchHostFunc) queued behind the segment's copies that waits
 * bytes/X minus what the segment costs on the real link. That cost is modelled as a + b * bytes:
 * b (the real per-byte rate) and a (the per-segment overhead, the host function's round trip
 * included) measured once at creation by copies of two sizes, then a corrected after each segment
 * by what its events measured (so the holds converge on segments that end where X GB/s would end
 * them); what the model's error let run faster than X is added to the next hold, so over a run
 * the copies never beat X. Only the copy stream waits: the compute stream keeps running and waits
 * for a batch's copies exactly as it would for a real slow link. The bytes and their order are
 * unchanged, so outputs are the same bits. A segment whose real cost is already above bytes/X is
 * not held (the emulated link is then slower than X, as a real one is for small copies); the
 * measured rate tells what was obtained.
 *
 * Use (the tier's inference thread; nothing here is thread-safe):
 *   vram_link_begin   before a run of copies on the copy stream (no-op when a segment is open)
 *   vram_link_add     the bytes of the copies queued
 *   vram_link_end     before the host does other work (a staging memcpy, a wait), and after the
 *                     fill: the hold (under a cap), the end event */
#ifndef RL_VRAM_LINK_H
#define RL_VRAM_LINK_H
#ifdef RL_CUDA
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

typedef struct vram_link vram_link;

/* The copies so far: bytes / seconds is the bandwidth obtained (the copy stream's time for the
 * segments, holds included). cap_gbs: the cap (0: none); raw_gbs: the real link's per-byte rate
 * measured at creation (under a cap only, else 0). Segments still in flight are left out (a
 * forward ends with its copies done). */
typedef struct {
    uint64_t bytes, segments;
    double seconds, cap_gbs, raw_gbs;
} vram_link_stats;

/* Segments on stream cp, held to cap_gbs GB/s (0: timed only). Under a cap, probes the real link
 * with copies of probe_bytes and probe_bytes / 8 from probe_src (page-locked) to probe_dst
 * (device memory whose contents do not matter yet). NULL with rl_lasterr. */
vram_link *vram_link_new(cudaStream_t cp, double cap_gbs, void *probe_dst, const void *probe_src,
                         size_t probe_bytes);
void vram_link_free(vram_link *l);
int vram_link_begin(vram_link *l);
void vram_link_add(vram_link *l, uint64_t bytes);
int vram_link_end(vram_link *l);
void vram_link_get_stats(vram_link *l, vram_link_stats *out);
#endif
#endif
