/* resident.c — the streamed weights copied into a huge-page arena, the model's views re-pointed
 * (design and numbers: resident.h). */
#include "backend/resident.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/common.h"

#define PIECE (8u << 20) /* bytes one thread reads at a time */
#define MiB (1024.0 * 1024.0)

struct resident {
    uint8_t *arena; /* rl_huge_alloc of arena_len bytes */
    size_t arena_len;
    int what;
    resident_info info;
};

typedef struct {
    const gguf_tensor *t;
    const struct gguf_part *part;
    uint64_t dst; /* offset in the arena */
} rs_item;

typedef struct {
    const rs_item *items;
    int n_items;
    uint8_t *arena;
    long n_pieces;
    long *first;      /* [n_items + 1]: the first piece of each item */
    atomic_long next; /* the next piece to claim */
    atomic_ullong done;
    atomic_int err; /* first errno (EIO for an end of file), 0 while all went well */
    rl_progress *pr;
} rs_job;

const char *resident_thp_mode(void) {
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!f) return "unknown";
    char buf[128] = {0};
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    if (strstr(buf, "[always]")) return "always";
    if (strstr(buf, "[madvise]")) return "madvise";
    if (strstr(buf, "[never]")) return "never";
    return "unknown";
}

/* Every matrix view of m (block tensors of every layer, MTP included), from the one tensor
 * table: those with data, into out (capacity cap); returns the count. */
static int model_views(q3n_model *m, ops_mat **out, int cap) {
    int n = 0, nl = m->hp.n_layer + m->hp.n_nextn;
    for (int id = 0; id < Q3N_T_COUNT; id++) {
        const q3n_tensor_desc *d = q3n_tensor((q3n_tensor_id)id);
        if (d->vec || d->field < 0) continue;
        if (d->kind == Q3N_KIND_GLOBAL) {
            ops_mat *v = (ops_mat *)((char *)m + d->field);
            if (v->data && n < cap) out[n++] = v;
            continue;
        }
        for (int il = 0; il < nl; il++) {
            ops_mat *v = (ops_mat *)((char *)&m->layers[il] + d->field);
            if (v->data && n < cap) out[n++] = v;
        }
    }
    return n;
}

static bool points_into(const ops_mat *v, const gguf_tensor *t) {
    const uint8_t *a = t->data;
    return v->data >= a && v->data < a + t->nbytes;
}

/* Piece k of the job: which item, and its byte range inside the item's tensor. */
static void piece_range(const rs_job *j, long k, int *item, uint64_t *off, uint64_t *len) {
    int lo = 0, hi = j->n_items - 1;
    while (lo < hi) { /* the last item whose first piece is <= k */
        int mid = (lo + hi + 1) / 2;
        if (j->first[mid] <= k) lo = mid;
        else hi = mid - 1;
    }
    *item = lo;
    *off = (uint64_t)(k - j->first[lo]) * PIECE;
    uint64_t left = j->items[lo].t->nbytes - *off;
    *len = left < PIECE ? left : PIECE;
}

/* pread exactly len bytes at off (retrying interrupted and short reads); 0 or an errno (EIO for
 * an early end of file). */
static int read_full(int fd, uint8_t *dst, uint64_t len, uint64_t off) {
    while (len) {
        ssize_t r = pread(fd, dst, len, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return errno;
        if (r == 0) return EIO;
        dst += r, len -= (uint64_t)r, off += (uint64_t)r;
    }
    return 0;
}

static void rs_worker(void *ctx, int ith, int nth) {
    rs_job *j = ctx;
    (void)nth;
    for (;;) {
        long k = atomic_fetch_add(&j->next, 1);
        if (k >= j->n_pieces || atomic_load(&j->err)) break;
        int it;
        uint64_t off, len;
        piece_range(j, k, &it, &off, &len);
        const rs_item *x = &j->items[it];
        uint8_t *dst = j->arena + x->dst + off;
        int e = 0;
        if (x->part->fd >= 0) e = read_full(x->part->fd, dst, len, x->t->file_off + off);
        else memcpy(dst, (const uint8_t *)x->t->data + off, len); /* a part without a file */
        if (e) {
            int zero = 0;
            atomic_compare_exchange_strong(&j->err, &zero, e);
            break;
        }
        unsigned long long d = atomic_fetch_add(&j->done, len) + len;
        if (ith == 0 && j->pr) rl_progress_update(j->pr, d);
    }
}

/* AnonHugePages of the mappings that overlap [a, a + len), from /proc/self/smaps (0 where it
 * cannot be read). */
static uint64_t huge_bytes(const uint8_t *a, size_t len) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return 0;
    char line[512];
    bool in = false;
    uint64_t sum = 0;
    const uintptr_t lo = (uintptr_t)a, hi = lo + len;
    while (fgets(line, sizeof line, f)) {
        unsigned long s, e;
        unsigned long long kb;
        if (sscanf(line, "%lx-%lx ", &s, &e) == 2 && strchr(line, '-') < strchr(line, ' '))
            in = s < hi && e > lo;
        else if (in && sscanf(line, "AnonHugePages: %llu kB", &kb) == 1) sum += kb * 1024ull;
    }
    fclose(f);
    return sum < len ? sum : len;
}

resident *resident_copy(q3n_model *m, pool *p, int what, bool progress) {
    gguf_file *f = m->gguf;
    if (!f) return rl_seterr("no model file to copy weights from"), NULL;
    if (!strcmp(resident_thp_mode(), "never"))
        return rl_seterr("transparent huge pages are off here (/sys/kernel/mm/transparent_hugepage/enabled: "
                         "never): "
                         "a copy would not stream faster"),
               NULL;
    resident *r = rl_calloc(1, sizeof *r, "resident weights");
    rs_item *items = rl_calloc(f->n_tensors ? f->n_tensors : 1, sizeof *items, "resident items");
    const int cap = (Q3N_T_COUNT + 1) * (m->hp.n_layer + m->hp.n_nextn + 1);
    ops_mat **views = rl_calloc((size_t)cap, sizeof(ops_mat *), "resident views");
    long *first = NULL;
    if (!r || !items || !views) goto fail;
    r->what = what;
    const int nv = model_views(m, views, cap);
    /* the tensors some view reads (so not the legacy ssm_in, which was de-interleaved into owned
     * rows, nor views already re-pointed by --iq-repack), of the kinds asked for */
    int n = 0;
    uint64_t total = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        int id = q3n_tensor_lookup(t->name, NULL);
        if (id < 0 || !t->nbytes || q3n_tensor((q3n_tensor_id)id)->vec) continue;
        const bool routed = q3n_tensor((q3n_tensor_id)id)->routed;
        if (!(what & (routed ? RESIDENT_EXPERTS : RESIDENT_DENSE))) continue;
        bool read = false; /* by a view other than the embedding's (a tied head reads it whole) */
        for (int v = 0; v < nv && !read; v++) read = views[v] != &m->tok_embd && points_into(views[v], t);
        if (!read) continue;
        items[n++] = (rs_item){t, &f->parts[t->part], total};
        total += (t->nbytes + 63) & ~(uint64_t)63;
    }
    if (!n) {
        rl_seterr("no %s tensors in the file mapping to copy", what & RESIDENT_EXPERTS ? "expert" : "dense");
        goto fail;
    }
    r->arena_len = (size_t)total;
    if (!(r->arena = rl_huge_alloc(r->arena_len, "weights"))) goto fail;
    first = rl_malloc(sizeof(long) * (size_t)(n + 1), "resident pieces");
    if (!first) goto fail;
    long np = 0;
    for (int i = 0; i < n; i++) {
        first[i] = np;
        np += (long)((items[i].t->nbytes + PIECE - 1) / PIECE);
    }
    first[n] = np;
    const double t0 = rl_now();
    rl_progress pr;
    if (progress)
        rl_progress_start(&pr, what & RESIDENT_EXPERTS ? "experts to memory" : "weights to memory", total);
    rs_job j = {.items = items,
                .n_items = n,
                .arena = r->arena,
                .n_pieces = np,
                .first = first,
                .pr = progress ? &pr : NULL};
    atomic_init(&j.next, 0);
    atomic_init(&j.done, 0);
    atomic_init(&j.err, 0);
    if (p) pool_run(p, rs_worker, &j);
    else rs_worker(&j, 0, 1);
    if (progress) rl_progress_end(&pr);
    const int err = atomic_load(&j.err);
    if (err) {
        rl_seterr("%s: reading weights into memory failed: %s", f->path,
                  err == EIO ? "input/output error or the file "
                               "ended early (is it complete?)"
                             : strerror(err));
        goto fail;
    }
    /* every tensor is in: re-point the views, release the mapping's pages of the copied tensors */
    for (int i = 0; i < n; i++) {
        const gguf_tensor *t = items[i].t;
        for (int v = 0; v < nv; v++)
            if (points_into(views[v], t))
                views[v]->data = r->arena + items[i].dst + (views[v]->data - (const uint8_t *)t->data);
        const uintptr_t a = (uintptr_t)t->data, e = a + t->nbytes, pg = (uintptr_t)sysconf(_SC_PAGESIZE);
        const uintptr_t pa = (a + pg - 1) & ~(pg - 1), pe = e & ~(pg - 1);
        if (items[i].part->fd >= 0 && pe > pa) madvise((void *)pa, pe - pa, MADV_DONTNEED);
    }
    if (what & RESIDENT_DENSE) m->dense_copied = true;
    if (what & RESIDENT_EXPERTS) m->experts_copied = true;
    r->info = (resident_info){.n_tensors = n,
                              .bytes = total,
                              .seconds = rl_now() - t0,
                              .huge_bytes = huge_bytes(r->arena, (size_t)total)};
    free(items);
    free(views);
    free(first);
    return r;
fail:
    free(items);
    free(views);
    free(first);
    resident_free(r);
    return NULL;
}

void resident_free(resident *r) {
    if (!r) return;
    rl_huge_free(r->arena, r->arena_len);
    free(r);
}

void resident_get_info(const resident *r, resident_info *out) { *out = r->info; }

void resident_describe(const resident *r, char *buf, size_t n) {
    const resident_info *i = &r->info;
    snprintf(buf, n,
             "%s: %d tensors, %.1f MiB copied to memory, %.1f MiB of it in huge pages (THP %s), %.2f s",
             r->what & RESIDENT_EXPERTS ? "routed experts" : "dense weights", i->n_tensors, i->bytes / MiB,
             i->huge_bytes / MiB, resident_thp_mode(), i->seconds);
}
