/* resident.h — the weights the CPU forward pass streams, copied off the file mapping into
 * anonymous memory backed by 2 MiB huge pages.
 *
 * Why: a mat-vec streams its matrix once per token; from the model file's mapping that is one
 * 4 KiB page (one TLB miss, and a stop of the hardware prefetcher) every 4 KiB. Measured on a
 * 2-vCPU Intel Xeon VM (Q4_K_M 4-layer file, 2 threads, STREAM 28 GB/s): the Q6_K
 * output head streamed at 19 GB/s from the mapping and 29-30 GB/s from a huge-page copy, the
 * DeltaNet projections 16 -> 20.5 GB/s, the routed experts 18.5 -> 21 GB/s; a decode token
 * 23.7 -> 17.6 ms. The bytes are the file's, so every result is bit-identical.
 *
 * What is copied (resident_copy's `what`):
 *   RESIDENT_DENSE    every matrix view of the model that points into the file mapping except the
 *                     token embedding (its rows are read one at a time) and the routed experts: the
 *                     projections, router, shared expert, MTP eh_proj, output head. A few percent of
 *                     the model's bytes; the engine copies them when it opens a model on the CPU
 *                     backend.
 *   RESIDENT_EXPERTS  the routed-expert slabs: only when every expert stays resident anyway (the
 *                     expert cache's full mode; the session asks for it), so the copy replaces the
 *                     preload of the mapping and costs no memory that full residency did not.
 * Views are re-pointed only once every selected tensor is copied; the copy is best effort: when
 * memory runs out or transparent huge pages are off ("never"), nothing changes and the reason is
 * kept for the describe line (with THP "never" nothing is copied: 4 KiB pages either way). The model's
 * dense_copied / experts_copied flags tell the expert cache that the mapping's pages of those tensors are no
 * longer read (no preload, no touch).
 *
 * Reading: pread from the file (the page cache may keep its copy: clean, reclaimable pages; a
 * second process then starts fast), split over the pool's threads in 8 MiB pieces, a progress bar
 * on stderr when `progress` and stderr is a terminal. Pages of the mapping over a copied tensor are
 * released (MADV_DONTNEED), so RSS counts each byte once.
 */
#ifndef RL_RESIDENT_H
#define RL_RESIDENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/pool.h"
#include "model/qwen3next.h"

enum { RESIDENT_DENSE = 1, RESIDENT_EXPERTS = 2 };

typedef struct resident resident;

typedef struct {
    int n_tensors;       /* tensors copied */
    uint64_t bytes;      /* their bytes */
    uint64_t huge_bytes; /* of the arena, bytes the kernel backs with huge pages (AnonHugePages in
                            /proc/self/smaps; 0 where it cannot be read) */
    double seconds;      /* wall time of the copy */
} resident_info;

/* Copy the selected tensors of m (see above) and re-point its views. NULL when nothing was
 * copied: rl_lasterr says why (no such tensor in the mapping, huge pages off, out of memory, a
 * read error); m is then unchanged and still serves the mapping. */
resident *resident_copy(q3n_model *m, pool *p, int what, bool progress);
/* Frees the copies: after the model's last use. NULL is fine. */
void resident_free(resident *r);
void resident_get_info(const resident *r, resident_info *out);
/* One line: "dense weights: 98 tensors, 344.2 MiB copied to huge pages (344.0 MiB backed), 0.12 s" */
void resident_describe(const resident *r, char *buf, size_t n);
/* The system's transparent huge page mode for anonymous memory: "always", "madvise", "never", or
 * "unknown" (no sysfs file). */
const char *resident_thp_mode(void);

#endif
