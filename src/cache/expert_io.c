/* expert_io.c — the expert cache's I/O thread pool: fills slots with pread from the GGUF
 * part's descriptor (never through the mapping), demand loads before prefetch loads.
 *
 * Buffered mode (default): pread, then posix_fadvise(POSIX_FADV_DONTNEED) on the range read,
 * so the page cache does not keep a second copy of what the slots already hold.
 * Direct mode (RL_CACHE_DIRECT=1): O_DIRECT reads of whole 4 KiB blocks into the slot; the
 * expert's bytes then start `ec_pad` bytes into the region (docs/EXPERT_CACHE.md compares them).
 *
 * Reads loop over short reads and EINTR; any other failure (EIO, unexpected end of file)
 * marks the slot FAILED with the errno and the range, which the acquiring thread turns into
 * "reading expert L/E from FILE: ..." (rl_lasterr is thread-local, so the message is built
 * there). Fault injection for tests wraps every read call (expert_cache_set_fault). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/common.h"
#include "cache/expert_cache_int.h"

static ssize_t fault_pread(expert_cache *ec, int fd, uint8_t *buf, size_t len, uint64_t off) {
    uint64_t n = atomic_fetch_add(&ec->reads, 1) + 1;
    uint64_t k = ec->fault_n;
    switch (ec->fault) {
    case EC_FAULT_EIO:
        if (n == k) {
            errno = EIO;
            return -1;
        }
        break;
    case EC_FAULT_EOF:
        if (n == k) return 0;
        break;
    case EC_FAULT_SHORT:
        if (n % k == 0) {
            size_t part = ec->direct ? (len / 2) & ~(size_t)(EC_ALIGN - 1) : len / 2;
            if (part > 0) len = part;
        }
        break;
    case EC_FAULT_EINTR:
        if (n % k == 0) {
            errno = EINTR;
            return -1;
        }
        break;
    default: break;
    }
    return pread(fd, buf, len, (off_t)off);
}

typedef struct {
    uint64_t bytes, shorts, eintrs;
    int err; /* 0, errno, or -1 for end of file */
    int range;
} load_result;

/* Read [off, off + len) into dst; at least `need` bytes must arrive (direct reads may stop
 * at the end of the file inside their last aligned block). */
static int read_range(expert_cache *ec, int fd, uint8_t *dst, uint64_t off, uint64_t len, uint64_t need,
                      load_result *res) {
    uint64_t got = 0;
    while (got < len) {
        ssize_t n = fault_pread(ec, fd, dst + got, (size_t)(len - got), off + got);
        if (n < 0) {
            if (errno == EINTR) {
                res->eintrs++;
                continue;
            }
            res->err = errno ? errno : EIO;
            return -1;
        }
        if (n == 0) {
            if (got >= need) break;
            res->err = -1;
            return -1;
        }
        if ((uint64_t)n < len - got) res->shorts++;
        got += (uint64_t)n;
    }
    res->bytes += got;
    return 0;
}

static uint64_t align_page(uint64_t x) { return (x + EC_ALIGN - 1) / EC_ALIGN * EC_ALIGN; }

static void load_slot(expert_cache *ec, int32_t key, uint8_t *mem, load_result *res) {
    const ec_layer *ly = &ec->layers[ec_layer_of(ec, key)];
    int e = ec_expert_of(ec, key);
    for (int i = 0; i < ly->n_ranges; i++) {
        const ec_range *r = &ly->r[i];
        uint64_t off = r->base + (uint64_t)e * r->stride;
        res->range = i;
        if (ec->direct) {
            uint64_t pad = off % EC_ALIGN, a0 = off - pad;
            uint64_t alen = (pad + r->stride + EC_ALIGN - 1) / EC_ALIGN * EC_ALIGN;
            if (read_range(ec, ec->dfd[r->part], mem + r->dst, a0, alen, pad + r->stride, res)) return;
        } else {
            int fd = ec->dfd[r->part];
            if (read_range(ec, fd, mem + r->dst, off, r->stride, r->stride, res)) return;
            /* drop the page-cache copy: the slot holds these bytes now (best effort). The range
             * is widened to whole pages: the edge pages belong to neighbouring experts (or to a
             * dense tensor, whose pages are mapped and therefore never dropped). */
            uint64_t b = off - off % EC_ALIGN, e = align_page(off + r->stride);
            posix_fadvise(fd, (off_t)b, (off_t)(e - b), POSIX_FADV_DONTNEED);
        }
    }
}

static int32_t pop(int32_t *ring, int *head, int *n, int cap) {
    int32_t s = ring[*head];
    *head = (*head + 1) % cap;
    (*n)--;
    return s;
}

static void *io_main(void *arg) {
    expert_cache *ec = arg;
    pthread_mutex_lock(&ec->mu);
    for (;;) {
        while (!ec->quit && ec->qd_n == 0 && ec->qp_n == 0) pthread_cond_wait(&ec->cv_job, &ec->mu);
        if (ec->quit) break;
        bool demand = ec->qd_n > 0;
        int32_t s = demand ? pop(ec->qd, &ec->qd_head, &ec->qd_n, ec->n_slots)
                           : pop(ec->qp, &ec->qp_head, &ec->qp_n, ec->n_slots);
        ec_slot *sl = &ec->slots[s];
        RL_ASSERT(sl->queued && sl->state == EC_S_LOADING);
        sl->queued = 0;
        int32_t key = slot_policy_key(ec->sp, s);
        uint8_t *mem = sl->mem;
        pthread_mutex_unlock(&ec->mu);

        load_result res = {0};
        load_slot(ec, key, mem, &res);

        pthread_mutex_lock(&ec->mu);
        RL_ASSERT(sl->state == EC_S_LOADING && slot_policy_key(ec->sp, s) == key);
        sl->state = res.err ? EC_S_FAILED : EC_S_VALID;
        sl->io_err = res.err;
        sl->io_range = res.range;
        if (demand) ec->st.bytes_demand += res.bytes;
        else ec->st.bytes_prefetch += res.bytes;
        ec->st.short_reads += res.shorts;
        ec->st.eintr += res.eintrs;
        if (res.err) ec->st.io_errors++;
        pthread_cond_broadcast(&ec->cv_done);
    }
    pthread_mutex_unlock(&ec->mu);
    return NULL;
}

void ec_io_submit(expert_cache *ec, int32_t s, bool demand) {
    ec_slot *sl = &ec->slots[s];
    RL_ASSERT(!sl->queued && sl->state == EC_S_LOADING);
    sl->queued = 1;
    sl->in_qd = demand;
    if (demand) {
        RL_ASSERT(ec->qd_n < ec->n_slots);
        ec->qd[(ec->qd_head + ec->qd_n++) % ec->n_slots] = s;
    } else {
        RL_ASSERT(ec->qp_n < ec->n_slots);
        ec->qp[(ec->qp_head + ec->qp_n++) % ec->n_slots] = s;
    }
    pthread_cond_signal(&ec->cv_job);
}

void ec_io_promote(expert_cache *ec, int32_t s) {
    ec_slot *sl = &ec->slots[s];
    if (!sl->queued || sl->in_qd) return;
    int n = ec->n_slots, found = -1;
    for (int i = 0; i < ec->qp_n && found < 0; i++)
        if (ec->qp[(ec->qp_head + i) % n] == s) found = i;
    RL_ASSERT(found >= 0);
    for (int i = found; i + 1 < ec->qp_n; i++)
        ec->qp[(ec->qp_head + i) % n] = ec->qp[(ec->qp_head + i + 1) % n];
    ec->qp_n--;
    sl->queued = 0;
    ec_io_submit(ec, s, true);
}

bool ec_io_probe_direct(gguf_file *f) {
    void *buf = NULL;
    if (posix_memalign(&buf, EC_ALIGN, EC_ALIGN) != 0) return false;
    bool ok = true;
    for (int i = 0; i < f->n_parts && ok; i++) {
        int fd = f->parts[i].path ? open(f->parts[i].path, O_RDONLY | O_DIRECT | O_CLOEXEC) : -1;
        ok = fd >= 0 && pread(fd, buf, EC_ALIGN, 0) > 0;
        if (fd >= 0) close(fd);
    }
    free(buf);
    return ok;
}

int ec_io_error(expert_cache *ec, int32_t s) {
    const ec_slot *sl = &ec->slots[s];
    const int32_t key = slot_policy_key(ec->sp, s);
    int il = ec_layer_of(ec, key), e = ec_expert_of(ec, key);
    const ec_range *r = &ec->layers[il].r[sl->io_range];
    const char *what =
        sl->io_err == -1 ? "unexpected end of file (truncated model file?)" : strerror(sl->io_err);
    const uint64_t off = r->base + (uint64_t)e * r->stride;
    return rl_seterr("reading expert %d/%d from %s: %s (offset %llu, %llu bytes)", il, e,
                     ec->f->parts[r->part].path, what, (unsigned long long)off,
                     (unsigned long long)r->stride);
}

int ec_io_start(expert_cache *ec) {
    int np = ec->f->n_parts;
    ec->dfd = rl_malloc(sizeof(int) * (size_t)np, "expert cache descriptors");
    if (!ec->dfd) return -1;
    for (int i = 0; i < np; i++) ec->dfd[i] = -1;
    /* Descriptors of our own: readahead state is per open file, and the mapping's faults (dense
     * weights) must keep theirs while expert reads are told they are random. */
    for (int i = 0; i < np; i++) {
        const char *path = ec->f->parts[i].path;
        ec->dfd[i] = open(path, O_RDONLY | O_CLOEXEC | (ec->direct ? O_DIRECT : 0));
        if (ec->dfd[i] < 0)
            return rl_seterr("%s: cannot open%s for expert reads: %s%s", path,
                             ec->direct ? " with O_DIRECT" : "", strerror(errno),
                             ec->direct ? " (set RL_CACHE_DIRECT=0)" : "");
        if (!ec->direct) posix_fadvise(ec->dfd[i], 0, 0, POSIX_FADV_RANDOM);
    }
    ec->io = rl_calloc((size_t)ec->p.io_threads, sizeof(pthread_t), "expert I/O threads");
    if (!ec->io) return -1;
    ec->io_started = true;
    for (int i = 0; i < ec->p.io_threads; i++) {
        if (pthread_create(&ec->io[i], NULL, io_main, ec) != 0) break;
        ec->n_io++;
    }
    if (ec->n_io == 0) return rl_seterr("cannot start the expert I/O threads");
    return 0;
}

void ec_io_stop(expert_cache *ec) {
    if (ec->io_started) {
        pthread_mutex_lock(&ec->mu);
        ec->quit = true;
        pthread_cond_broadcast(&ec->cv_job);
        pthread_mutex_unlock(&ec->mu);
        for (int i = 0; i < ec->n_io; i++) pthread_join(ec->io[i], NULL);
    }
    free(ec->io);
    ec->io = NULL;
    ec->n_io = 0;
    if (ec->dfd) {
        for (int i = 0; i < ec->f->n_parts; i++)
            if (ec->dfd[i] >= 0) close(ec->dfd[i]);
        free(ec->dfd);
        ec->dfd = NULL;
    }
}
