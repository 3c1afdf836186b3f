/* statefile.c — see statefile.h. Files are little-endian (the header is written as the struct
 * below on x86-64; a big-endian reader would reject them by magic/version mismatch of fields). */
#include "run/statefile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/common.h"

#define SF_MAGIC "RLSTATE"
#define SF_VERSION 2u /* 2: the model fingerprint covers the tensor data */
#define SF_BUILD "redlite " RL_VERSION " state-v2"
#define SF_LOCK ".lock"
#define SF_FPCACHE ".model-hashes"
#define SF_SUFFIX ".rlstate"

typedef struct {
    char magic[8];
    uint32_t version, header_bytes;
    uint64_t model_fp;
    char format[32];
    char build[32];
    uint32_t n_tokens, reserved;
    uint64_t state_bytes;
    uint64_t checksum; /* over tokens + state */
} sf_header;

typedef struct {
    char *path;
    int32_t *toks;
    int n;
    uint64_t bytes;
    double mtime;
} sf_entry;

struct statefile_dir {
    char *dir;
    uint64_t max_bytes, fp;
    char format[32];
    sf_entry *e;
    int n, cap;
    int lock_fd;               /* DIR/.lock: flock'd exclusively while scanning at open and while saving */
    struct timespec dir_mtime; /* when the index was last synced with the directory */
    statefile_stats st;
};

static uint64_t sf_hash(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (; n >= 8; b += 8, n -= 8) {
        uint64_t w;
        memcpy(&w, b, 8);
        h = (h ^ w) * 0x100000001b3ULL;
        h ^= h >> 29;
    }
    for (; n; n--) h = (h ^ *b++) * 0x100000001b3ULL;
    return h;
}

/* ---- the model fingerprint ---------------------------------------------------------------
 * Header, metadata and tensor table of every part (as before) and a full content hash of every
 * part's tensor data: two files of one layout and other weights (re-quantised, fine-tuned)
 * never share checkpoints. The data hash reads every byte (no sampling), in 64 MiB chunks over
 * up to 16 threads (chunk hashes combined in order, so the result does not depend on the thread
 * count), and is cached per file identity (device, inode, size, mtime in ns) in
 * DIR/.model-hashes, so a restart does not read the weights again. */
#define FP_CHUNK (64ull << 20)

/* 4 independent lanes of 8 bytes: several GB/s per thread, memory-bound with a few threads. */
static uint64_t data_hash(const uint8_t *p, size_t n, uint64_t seed) {
    uint64_t h[4] = {seed, seed ^ 0x9e3779b97f4a7c15ULL, seed ^ 0xc2b2ae3d27d4eb4fULL,
                     seed ^ 0x165667b19e3779f9ULL};
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++) {
            uint64_t w;
            memcpy(&w, p + i + 8 * k, 8);
            h[k] = (h[k] ^ w) * 0x100000001b3ULL;
            h[k] ^= h[k] >> 31;
        }
    uint64_t r = sf_hash(h[0], h + 1, 24);
    return sf_hash(r ^ n, p + i, n - i);
}

typedef struct {
    const uint8_t *map;
    int fd;
    uint64_t start, size, n_chunks;
    uint64_t *out;
    uint64_t next; /* next chunk to take */
    pthread_mutex_t mu;
    int failed;
} fp_job;

static void *fp_worker(void *arg) {
    fp_job *j = arg;
    uint8_t *buf = j->map ? NULL : malloc(FP_CHUNK);
    for (;;) {
        pthread_mutex_lock(&j->mu);
        uint64_t c = j->next++;
        pthread_mutex_unlock(&j->mu);
        if (c >= j->n_chunks) break;
        uint64_t off = j->start + c * FP_CHUNK, n = j->size - off < FP_CHUNK ? j->size - off : FP_CHUNK;
        if (j->map) {
            j->out[c] = data_hash(j->map + off, (size_t)n, c);
        } else if (buf && pread(j->fd, buf, (size_t)n, (off_t)off) == (ssize_t)n) {
            j->out[c] = data_hash(buf, (size_t)n, c);
        } else {
            j->failed = 1;
        }
    }
    free(buf);
    return NULL;
}

/* Hash of bytes [start, size) of one part. 0 or -1. */
static int part_data_hash(const struct gguf_part *pt, uint64_t *out) {
    fp_job j = {.map = pt->map, .fd = pt->fd, .start = pt->data_start, .size = pt->size};
    j.n_chunks = pt->size > pt->data_start ? (pt->size - pt->data_start + FP_CHUNK - 1) / FP_CHUNK : 0;
    if (!(j.out = calloc(j.n_chunks + 1, sizeof *j.out))) return rl_seterr("out of memory (model hash)");
    pthread_mutex_init(&j.mu, NULL);
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = (int)(nc < 1 ? 1 : nc > 16 ? 16 : nc);
    if ((uint64_t)nt > j.n_chunks) nt = j.n_chunks ? (int)j.n_chunks : 1;
    pthread_t th[16];
    int started = 0;
    for (int i = 1; i < nt; i++)
        if (!pthread_create(&th[started], NULL, fp_worker, &j)) started++;
    fp_worker(&j);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    pthread_mutex_destroy(&j.mu);
    uint64_t h = sf_hash(0x6a09e667f3bcc908ULL, j.out, sizeof *j.out * j.n_chunks);
    free(j.out);
    if (j.failed) return rl_seterr("cannot read the model's weights to hash them");
    *out = h;
    return 0;
}

/* mkdir -p (mode 0700 for what it creates). */
static int make_dirs(const char *dir) {
    char p[4096];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) return rl_seterr("--state-dir: path too long");
    for (char *q = p + 1;; q++) {
        char c = *q;
        if (c != '/' && c) continue;
        *q = 0;
        if (mkdir(p, 0700) && errno != EEXIST)
            return rl_seterr("--state-dir %s: cannot create %s: %s", dir, p, strerror(errno));
        *q = c;
        if (!c) break;
    }
    struct stat sb;
    if (stat(dir, &sb) || !S_ISDIR(sb.st_mode)) return rl_seterr("--state-dir %s: not a directory", dir);
    return 0;
}

/* The cached data hash of the file behind fd, or compute and append it. cache may be NULL. */
static int cached_data_hash(const struct gguf_part *pt, const char *cache, uint64_t *out) {
    struct stat sb;
    if (pt->fd >= 0 ? fstat(pt->fd, &sb) : stat(pt->path, &sb))
        return rl_seterr("cannot stat %s: %s", pt->path, strerror(errno));
    char key[160];
    snprintf(key, sizeof key, "v1 %llu %llu %llu %lld.%09ld %llu", (unsigned long long)sb.st_dev,
             (unsigned long long)sb.st_ino, (unsigned long long)sb.st_size, (long long)sb.st_mtim.tv_sec,
             sb.st_mtim.tv_nsec, (unsigned long long)pt->data_start);
    FILE *f = cache ? fopen(cache, "r") : NULL;
    char line[256];
    size_t kl = strlen(key);
    while (f && fgets(line, sizeof line, f)) {
        unsigned long long h;
        if (!strncmp(line, key, kl) && line[kl] == ' ' && sscanf(line + kl + 1, "%16llx", &h) == 1) {
            fclose(f);
            *out = h;
            return 0;
        }
    }
    if (f) fclose(f);
    if (part_data_hash(pt, out)) return -1;
    int fd = cache ? open(cache, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600) : -1;
    if (fd >= 0) { /* one short append: lines of concurrent writers do not interleave */
        int n = snprintf(line, sizeof line, "%s %016llx %s\n", key, (unsigned long long)*out, pt->path);
        if (n > 0 &&
            write(fd, line, (size_t)(n < (int)sizeof line ? n : (int)sizeof line - 1)) < 0) { /* a cache */
        }
        close(fd);
    }
    return 0;
}

uint64_t statefile_model_fingerprint(const gguf_file *f, const char *cache_dir) {
    char cache[4096];
    bool have_cache = cache_dir && !make_dirs(cache_dir) &&
                      snprintf(cache, sizeof cache, "%s/" SF_FPCACHE, cache_dir) < (int)sizeof cache;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int i = 0; i < f->n_parts; i++) {
        const struct gguf_part *pt = &f->parts[i];
        h = sf_hash(h, &pt->size, sizeof pt->size);
        if (pt->map) h = sf_hash(h, pt->map, (size_t)pt->data_start);
        uint64_t dh = 0;
        if (cached_data_hash(pt, have_cache ? cache : NULL, &dh)) return 0; /* rl_lasterr set */
        h = sf_hash(h, &dh, sizeof dh);
    }
    return h ? h : 1;
}

static int write_all(int fd, const void *p, size_t n) {
    const uint8_t *b = p;
    while (n) {
        ssize_t w = write(fd, b, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

static int read_all(int fd, void *p, size_t n) {
    uint8_t *b = p;
    while (n) {
        ssize_t r = read(fd, b, n > (1u << 30) ? (1u << 30) : n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        b += r;
        n -= (size_t)r;
    }
    return 0;
}

static void header_init(sf_header *h, uint64_t fp, const char *format, int n, uint64_t state_bytes) {
    memset(h, 0, sizeof *h);
    memcpy(h->magic, SF_MAGIC, 8);
    h->version = SF_VERSION;
    h->header_bytes = sizeof *h;
    h->model_fp = fp;
    snprintf(h->format, sizeof h->format, "%s", format);
    snprintf(h->build, sizeof h->build, "%s", SF_BUILD);
    h->n_tokens = (uint32_t)n;
    h->state_bytes = state_bytes;
}

int statefile_write(const char *path, uint64_t fp, const char *format, const int32_t *tokens, int n,
                    const void *state, uint64_t state_bytes) {
    sf_header h;
    header_init(&h, fp, format, n, state_bytes);
    h.checksum =
        sf_hash(sf_hash(0xcbf29ce484222325ULL, tokens, sizeof(int32_t) * (size_t)n), state, state_bytes);
    char tmp[4096];
    const char *slash = strrchr(path, '/');
    int dl = slash ? (int)(slash - path) : 1;
    snprintf(tmp, sizeof tmp, "%.*s/.tmp-%d-%llx", dl, slash ? path : ".", (int)getpid(),
             (unsigned long long)(rl_now() * 1e6));
    int fd = open(tmp, O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return rl_seterr("cannot write %s: %s", tmp, strerror(errno));
    if (write_all(fd, &h, sizeof h) || write_all(fd, tokens, sizeof(int32_t) * (size_t)n) ||
        write_all(fd, state, state_bytes) || fsync(fd)) {
        int err = errno;
        close(fd);
        unlink(tmp);
        return rl_seterr("cannot write checkpoint %s: %s (disk full? lower --state-max-mib)", tmp,
                         strerror(err));
    }
    close(fd);
    if (rename(tmp, path)) {
        int err = errno;
        unlink(tmp);
        return rl_seterr("cannot rename checkpoint to %s: %s", path, strerror(err));
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s", dl, slash ? path : ".");
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) { /* the rename itself reaches the disk */
        fsync(dfd);
        close(dfd);
    }
    return 0;
}

/* Read and check a header: 1 ours, 0 not ours (another model/format/build), -1 unreadable. */
static int header_read(int fd, const statefile_dir *d, sf_header *h) {
    if (read_all(fd, h, sizeof *h)) return -1;
    if (memcmp(h->magic, SF_MAGIC, 8) || h->version != SF_VERSION || h->header_bytes != sizeof *h) return 0;
    if (h->model_fp != d->fp || strncmp(h->format, d->format, sizeof h->format) ||
        strncmp(h->build, SF_BUILD, sizeof h->build))
        return 0;
    if (h->n_tokens == 0 || h->n_tokens > (1u << 26)) return -1;
    return 1;
}

static void entry_free(sf_entry *e) {
    free(e->path);
    free(e->toks);
}

static void entry_remove(statefile_dir *d, int i, bool unlink_file) {
    if (unlink_file) unlink(d->e[i].path);
    entry_free(&d->e[i]);
    d->e[i] = d->e[--d->n];
}

static int entry_add(statefile_dir *d, char *path, int32_t *toks, int n, uint64_t bytes, double mtime) {
    if (d->n == d->cap) {
        int cap = d->cap ? d->cap * 2 : 16;
        sf_entry *e = realloc(d->e, sizeof *e * (size_t)cap);
        if (!e) return rl_seterr("out of memory (checkpoint index)");
        d->e = e;
        d->cap = cap;
    }
    d->e[d->n++] = (sf_entry){path, toks, n, bytes, mtime};
    return 0;
}

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double file_mtime(const struct stat *sb) {
    return (double)sb->st_mtim.tv_sec + sb->st_mtim.tv_nsec * 1e-9;
}

/* Open a directory entry for reading only if it is a regular file: O_NOFOLLOW (no symlink
 * games), O_NONBLOCK (a FIFO or device does not block the open), then fstat. -1 otherwise. */
static int open_regular(const char *path, struct stat *sb) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) return -1;
    if (fstat(fd, sb) || !S_ISREG(sb->st_mode)) {
        close(fd);
        errno = EINVAL;
        return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
}

static bool has_suffix(const char *name) {
    size_t l = strlen(name), s = strlen(SF_SUFFIX);
    return l > s && !strcmp(name + l - s, SF_SUFFIX);
}

static int find_entry(const statefile_dir *d, const char *path) {
    for (int i = 0; i < d->n; i++)
        if (!strcmp(d->e[i].path, path)) return i;
    return -1;
}

static bool dir_changed(statefile_dir *d, bool update) {
    struct stat sb;
    if (stat(d->dir, &sb)) return true;
    bool ch = sb.st_mtim.tv_sec != d->dir_mtime.tv_sec || sb.st_mtim.tv_nsec != d->dir_mtime.tv_nsec;
    if (update) d->dir_mtime = sb.st_mtim;
    return ch;
}

/* Sync the index with the directory (other servers may share it): add this model's files not
 * indexed yet, drop entries whose files are gone. locked: the caller holds the lock, so
 * temporaries are torn writes (deleted) and broken files of ours can be deleted. */
static void scan(statefile_dir *d, bool locked) {
    dir_changed(d, true); /* before reading: a change during the scan triggers the next one */
    DIR *dh = opendir(d->dir);
    if (!dh) return;
    int old_n = d->n;
    char *seen = calloc((size_t)old_n + 1, 1);
    struct dirent *de;
    while ((de = readdir(dh))) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", d->dir, de->d_name);
        if (!strncmp(de->d_name, ".tmp-", 5)) {
            if (locked) unlink(path); /* writers hold the lock: nobody is writing it */
            continue;
        }
        if (!has_suffix(de->d_name)) continue;
        int known = find_entry(d, path);
        if (known >= 0) {
            if (seen && known < old_n) seen[known] = 1;
            continue;
        }
        struct stat sb;
        int fd = open_regular(path, &sb);
        if (fd < 0) continue; /* gone, a FIFO, a symlink...: never ours */
        sf_header h;
        int k = header_read(fd, d, &h);
        int32_t *toks = NULL;
        if (k == 1) {
            toks = malloc(sizeof(int32_t) * h.n_tokens);
            uint64_t want = sizeof h + sizeof(int32_t) * (uint64_t)h.n_tokens + h.state_bytes;
            if (!toks || read_all(fd, toks, sizeof(int32_t) * h.n_tokens) || (uint64_t)sb.st_size != want)
                k = -1;
        }
        close(fd);
        char *p = k == 1 ? strdup(path) : NULL;
        if (k == 1 && p && !entry_add(d, p, toks, (int)h.n_tokens, (uint64_t)sb.st_size, file_mtime(&sb)))
            continue;
        free(p);
        free(toks);
        if (k < 0 && locked) unlink(path); /* ours by name, but broken (e.g. truncated) */
    }
    closedir(dh);
    /* entries of files that vanished (another server's trim); new entries are past the old n */
    if (seen)
        for (int i = old_n - 1; i >= 0; i--) { /* a removal swaps in an entry already looked at */
            struct stat sb;
            if (!seen[i] && stat(d->e[i].path, &sb)) entry_remove(d, i, false);
        }
    free(seen);
}

static void dir_lock(statefile_dir *d) {
    while (d->lock_fd >= 0 && flock(d->lock_fd, LOCK_EX) && errno == EINTR) {}
}

static void dir_unlock(statefile_dir *d) {
    if (d->lock_fd >= 0) flock(d->lock_fd, LOCK_UN);
}

statefile_dir *statefile_open(const char *dir, uint64_t max_bytes, uint64_t fp, const char *format) {
    if (make_dirs(dir)) return NULL;
    statefile_dir *d = calloc(1, sizeof *d);
    if (!d || !(d->dir = strdup(dir))) {
        free(d);
        rl_seterr("out of memory");
        return NULL;
    }
    d->lock_fd = -1;
    d->max_bytes = max_bytes ? max_bytes : (8ull << 30);
    d->fp = fp;
    snprintf(d->format, sizeof d->format, "%s", format);
    char lp[4096];
    snprintf(lp, sizeof lp, "%s/" SF_LOCK, dir);
    d->lock_fd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (d->lock_fd < 0) {
        rl_seterr("--state-dir %s: cannot create its lock file: %s", dir, strerror(errno));
        statefile_close(d);
        return NULL;
    }
    dir_lock(d);
    scan(d, true);
    dir_unlock(d);
    return d;
}

void statefile_close(statefile_dir *d) {
    if (!d) return;
    for (int i = 0; i < d->n; i++) entry_free(&d->e[i]);
    free(d->e);
    free(d->dir);
    if (d->lock_fd >= 0) close(d->lock_fd);
    free(d);
}

/* Under the lock: the whole directory (every checkpoint of any model and every temporary)
 * must fit the cap; the least recently used files go first, never `keep` (the file just
 * written). */
static void trim(statefile_dir *d, const char *keep) {
    for (;;) {
        DIR *dh = opendir(d->dir);
        if (!dh) return;
        uint64_t total = 0;
        double oldest_t = 0;
        char oldest[4096] = "";
        struct dirent *de;
        while ((de = readdir(dh))) {
            if (strncmp(de->d_name, ".tmp-", 5) && !has_suffix(de->d_name)) continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", d->dir, de->d_name);
            struct stat sb;
            if (lstat(path, &sb) || !S_ISREG(sb.st_mode)) continue;
            total += (uint64_t)sb.st_size;
            if (!has_suffix(de->d_name) || (keep && !strcmp(path, keep))) continue;
            if (!oldest[0] || file_mtime(&sb) < oldest_t) {
                oldest_t = file_mtime(&sb);
                snprintf(oldest, sizeof oldest, "%s", path);
            }
        }
        closedir(dh);
        if (total <= d->max_bytes || !oldest[0]) return;
        int i = find_entry(d, oldest);
        if (i >= 0) entry_remove(d, i, true);
        else unlink(oldest);
    }
}

int statefile_save(statefile_dir *d, engine_ctx *c, const engine_snapshot *snap, const int32_t *tokens,
                   int n) {
    int pos = snap ? engine_snapshot_pos(snap) : engine_pos(c);
    if (n != pos || n <= 0) return rl_seterr("checkpoint: %d tokens for a state at position %d", n, pos);
    double t0 = rl_now();
    size_t sb = engine_state_bytes(c, n);
    if (!sb) return rl_seterr("checkpoint: the %s backend cannot export its state", engine_state_format(c));
    if (sizeof(sf_header) + sb > d->max_bytes)
        return rl_seterr("checkpoint of %zu MiB does not fit --state-max-mib", sb >> 20);
    void *buf = malloc(sb);
    if (!buf) return rl_seterr("out of memory (checkpoint of %zu MiB)", sb >> 20);
    char path[4096];
    uint64_t th = sf_hash(0x9e3779b97f4a7c15ULL, tokens, sizeof(int32_t) * (size_t)n);
    snprintf(path, sizeof path, "%s/%016llx-%016llx-%d" SF_SUFFIX, d->dir, (unsigned long long)d->fp,
             (unsigned long long)th, n);
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)n);
    char *p = strdup(path);
    int rc = -1;
    if (!toks || !p) {
        rl_seterr("out of memory (checkpoint)");
        goto out;
    }
    memcpy(toks, tokens, sizeof(int32_t) * (size_t)n);
    if (snap ? engine_state_export_snapshot(c, snap, buf, sb) : engine_state_export(c, buf, sb)) goto out;
    /* write, rename and trim under the directory lock: servers sharing DIR never see each
     * other's temporaries as torn, and their files count against one cap */
    dir_lock(d);
    if (statefile_write(path, d->fp, d->format, tokens, n, buf, sb)) {
        dir_unlock(d);
        goto out;
    }
    /* superseded: this model's files whose tokens are a prefix of these (incl. the same path) */
    for (int i = d->n - 1; i >= 0; i--)
        if (d->e[i].n <= n && !memcmp(d->e[i].toks, tokens, sizeof(int32_t) * (size_t)d->e[i].n))
            entry_remove(d, i, strcmp(d->e[i].path, path) != 0);
    if (entry_add(d, p, toks, n, sizeof(sf_header) + sizeof(int32_t) * (uint64_t)n + sb, wall_now())) {
        dir_unlock(d);
        goto out;
    }
    p = NULL;
    toks = NULL;
    scan(d, false); /* other servers' files: known before the trim */
    trim(d, path);
    dir_unlock(d);
    d->st.saves++;
    d->st.save_s += rl_now() - t0;
    rc = 0;
out:
    free(buf);
    free(toks);
    free(p);
    return rc;
}

static int best_entry(statefile_dir *d, const int32_t *tokens, int n, int min_pos, int max_pos) {
    int best = -1;
    for (int i = 0; i < d->n; i++) {
        sf_entry *e = &d->e[i];
        if (e->n <= min_pos || e->n > max_pos || e->n > n || (best >= 0 && e->n <= d->e[best].n)) continue;
        if (!memcmp(e->toks, tokens, sizeof(int32_t) * (size_t)e->n)) best = i;
    }
    return best;
}

int statefile_best(statefile_dir *d, const int32_t *tokens, int n, int min_pos, int max_pos) {
    if (dir_changed(d, false)) scan(d, false); /* files saved or trimmed by another server */
    int b = best_entry(d, tokens, n, min_pos, max_pos);
    return b < 0 ? 0 : d->e[b].n;
}

int statefile_restore(statefile_dir *d, engine_ctx *c, const int32_t *tokens, int n, int min_pos,
                      int max_pos) {
    int b = best_entry(d, tokens, n, min_pos, max_pos);
    if (b < 0) return 0;
    double t0 = rl_now();
    sf_entry *e = &d->e[b];
    void *buf = NULL;
    int32_t *toks = NULL;
    sf_header h;
    struct stat sb;
    int fd = open_regular(e->path, &sb);
    const char *why = "cannot open it";
    if (fd < 0 && errno == ENOENT) { /* deleted by another server's trim: a miss, c untouched */
        entry_remove(d, b, false);
        return 0;
    }
    if (fd < 0) goto bad;
    why = "unreadable header";
    if (header_read(fd, d, &h) != 1 || (int)h.n_tokens != e->n) goto bad;
    why = "its state does not fit this context";
    if (h.state_bytes != engine_state_bytes(c, e->n)) goto bad;
    why = "out of memory";
    if (!(buf = malloc(h.state_bytes)) || !(toks = malloc(sizeof(int32_t) * (size_t)e->n))) goto bad;
    why = "truncated";
    if (read_all(fd, toks, sizeof(int32_t) * (size_t)e->n) || read_all(fd, buf, h.state_bytes)) goto bad;
    why = "checksum mismatch";
    if (memcmp(toks, e->toks, sizeof(int32_t) * (size_t)e->n) ||
        sf_hash(sf_hash(0xcbf29ce484222325ULL, toks, sizeof(int32_t) * (size_t)e->n), buf, h.state_bytes) !=
            h.checksum)
        goto bad;
    why = "import failed";
    if (engine_state_import(c, e->n, buf, h.state_bytes)) goto bad;
    close(fd);
    free(buf);
    free(toks);
    utimensat(AT_FDCWD, e->path, NULL, 0); /* LRU: recently used */
    e->mtime = wall_now();
    d->st.restores++;
    d->st.restore_s += rl_now() - t0;
    return e->n;
bad:
    rl_seterr("checkpoint %s: %s: deleted", e->path, why);
    if (fd >= 0) close(fd);
    free(buf);
    free(toks);
    entry_remove(d, b, true);
    d->st.rejected++;
    engine_reset(c);
    return -1;
}

void statefile_get_stats(const statefile_dir *d, statefile_stats *st) {
    *st = d->st;
    st->n_files = d->n;
    st->bytes = 0;
    for (int i = 0; i < d->n; i++) st->bytes += d->e[i].bytes;
}
