/* statefile.c — see statefile.h. Files are little-endian (the header is written as the struct
 * below on x86-64; a big-endian reader would reject them by magic/version mismatch of fields). */
#include "run/statefile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/common.h"

#define SF_MAGIC "RLSTATE"
#define SF_VERSION 1u
#define SF_BUILD "redlite " RL_VERSION " state-v1"
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
    bool seen; /* listed by the directory scan in progress */
} sf_entry;

struct statefile_dir {
    char *dir;
    uint64_t max_bytes, fp;
    char format[32];
    sf_entry *e;
    int n, cap;
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

uint64_t statefile_model_fingerprint(const gguf_file *f) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int i = 0; i < f->n_parts; i++) {
        h = sf_hash(h, &f->parts[i].size, sizeof f->parts[i].size);
        if (f->parts[i].map) h = sf_hash(h, f->parts[i].map, (size_t)f->parts[i].data_start);
    }
    return h;
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
    h.checksum = sf_hash(sf_hash(0xcbf29ce484222325ULL, tokens, sizeof(int32_t) * (size_t)n), state, state_bytes);
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
        return rl_seterr("cannot write checkpoint %s: %s (disk full? lower --state-max-mib)", tmp, strerror(err));
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
    d->e[d->n++] = (sf_entry){path, toks, n, bytes, mtime, true};
    return 0;
}

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double file_mtime(const struct stat *sb) { return (double)sb->st_mtim.tv_sec + sb->st_mtim.tv_nsec * 1e-9; }

/* The file name of a checkpoint of this model starts with its fingerprint (statefile_save). */
static bool name_ours(const statefile_dir *d, const char *name) {
    char pre[24];
    snprintf(pre, sizeof pre, "%016llx-", (unsigned long long)d->fp);
    return !strncmp(name, pre, strlen(pre));
}

/* Index directory entry `name` if it is a checkpoint of ours (a file of ours by name that is
 * broken, e.g. truncated, is deleted). `first`: the scan at open, which also removes stale
 * temporaries and reads every *.rlstate header; later scans only look at names not indexed yet
 * that carry this model's fingerprint (files of other models are not re-read every time). */
static void scan_entry(statefile_dir *d, const char *name, bool first) {
    size_t l = strlen(name);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", d->dir, name);
    struct stat sb;
    if (!strncmp(name, ".tmp-", 5)) { /* an interrupted write: stale after 10 minutes */
        if (first && !stat(path, &sb) && time(NULL) - sb.st_mtime > 600) unlink(path);
        return;
    }
    if (l <= strlen(SF_SUFFIX) || strcmp(name + l - strlen(SF_SUFFIX), SF_SUFFIX)) return;
    if (!first) {
        if (!name_ours(d, name)) return;
        for (int i = 0; i < d->n; i++)
            if (!strcmp(d->e[i].path, path)) {
                d->e[i].seen = true;
                return;
            }
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    sf_header h;
    int k = fstat(fd, &sb) ? -1 : header_read(fd, d, &h);
    int32_t *toks = NULL;
    if (k == 1) {
        toks = malloc(sizeof(int32_t) * h.n_tokens);
        uint64_t want = sizeof h + sizeof(int32_t) * (uint64_t)h.n_tokens + h.state_bytes;
        if (!toks || read_all(fd, toks, sizeof(int32_t) * h.n_tokens) || (uint64_t)sb.st_size != want) k = -1;
    }
    close(fd);
    char *p = k == 1 ? strdup(path) : NULL;
    if (k == 1 && p && !entry_add(d, p, toks, (int)h.n_tokens, (uint64_t)sb.st_size, file_mtime(&sb))) return;
    free(p);
    free(toks);
    if (k < 0) unlink(path); /* ours by name, but broken (e.g. truncated) */
}

/* Read the directory. After the first scan: index the checkpoints other servers sharing the
 * directory saved since the last scan, and forget the entries whose files are gone (another
 * server superseded or trimmed them). This is what lets replicas behind a load balancer resume
 * each other's conversations (docs/SERVER.md, "Deployment: several replicas"). 0 or -1. */
static int scan_dir(statefile_dir *d, bool first) {
    DIR *dh = opendir(d->dir);
    if (!dh) return rl_seterr("--state-dir %s: cannot open it: %s", d->dir, strerror(errno));
    for (int i = 0; i < d->n; i++) d->e[i].seen = false;
    int n0 = d->n;
    struct dirent *de;
    while ((de = readdir(dh))) scan_entry(d, de->d_name, first);
    closedir(dh);
    for (int i = n0 - 1; i >= 0; i--)
        if (!d->e[i].seen) entry_remove(d, i, false);
    return 0;
}

statefile_dir *statefile_open(const char *dir, uint64_t max_bytes, uint64_t fp, const char *format) {
    if (mkdir(dir, 0700) && errno != EEXIST) {
        rl_seterr("--state-dir %s: cannot create it: %s", dir, strerror(errno));
        return NULL;
    }
    statefile_dir *d = calloc(1, sizeof *d);
    if (!d || !(d->dir = strdup(dir))) {
        free(d);
        rl_seterr("out of memory");
        return NULL;
    }
    d->max_bytes = max_bytes ? max_bytes : (8ull << 30);
    d->fp = fp;
    snprintf(d->format, sizeof d->format, "%s", format);
    if (scan_dir(d, true)) {
        statefile_close(d);
        return NULL;
    }
    return d;
}

void statefile_close(statefile_dir *d) {
    if (!d) return;
    for (int i = 0; i < d->n; i++) entry_free(&d->e[i]);
    free(d->e);
    free(d->dir);
    free(d);
}

/* Delete least recently used files until the total fits. The index's use time of a file another
 * server shares may be stale (its restores touch the file, not our index): the victim's file
 * time is read again first, and a file already gone only leaves the index. */
static void trim(statefile_dir *d) {
    for (;;) {
        uint64_t total = 0;
        int oldest = -1;
        for (int i = 0; i < d->n; i++) {
            total += d->e[i].bytes;
            if (oldest < 0 || d->e[i].mtime < d->e[oldest].mtime) oldest = i;
        }
        if (total <= d->max_bytes || d->n <= 1) return;
        struct stat sb;
        if (stat(d->e[oldest].path, &sb)) {
            entry_remove(d, oldest, false);
        } else if (file_mtime(&sb) > d->e[oldest].mtime) {
            d->e[oldest].mtime = file_mtime(&sb);
        } else {
            entry_remove(d, oldest, true);
        }
    }
}

int statefile_save(statefile_dir *d, engine_ctx *c, const engine_snapshot *snap, const int32_t *tokens, int n) {
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
    if ((snap ? engine_state_export_snapshot(c, snap, buf, sb) : engine_state_export(c, buf, sb)) || statefile_write(path, d->fp, d->format, tokens, n, buf, sb)) goto out;
    /* superseded: this model's files whose tokens are a prefix of these (incl. the same path) */
    for (int i = d->n - 1; i >= 0; i--)
        if (d->e[i].n <= n && !memcmp(d->e[i].toks, tokens, sizeof(int32_t) * (size_t)d->e[i].n))
            entry_remove(d, i, strcmp(d->e[i].path, path) != 0);
    if (entry_add(d, p, toks, n, sizeof(sf_header) + sizeof(int32_t) * (uint64_t)n + sb, wall_now()))
        goto out;
    p = NULL;
    toks = NULL;
    trim(d);
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
    scan_dir(d, false); /* what other servers on this directory saved (or removed) meanwhile */
    int b = best_entry(d, tokens, n, min_pos, max_pos);
    return b < 0 ? 0 : d->e[b].n;
}

int statefile_restore(statefile_dir *d, engine_ctx *c, const int32_t *tokens, int n, int min_pos, int max_pos) {
    int b = best_entry(d, tokens, n, min_pos, max_pos);
    if (b < 0) return 0;
    double t0 = rl_now();
    sf_entry *e = &d->e[b];
    void *buf = NULL;
    int32_t *toks = NULL;
    sf_header h;
    int fd = open(e->path, O_RDONLY | O_CLOEXEC);
    const char *why = "cannot open it";
    if (fd < 0 && errno == ENOENT) { /* another server sharing the directory removed it: a miss */
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
        sf_hash(sf_hash(0xcbf29ce484222325ULL, toks, sizeof(int32_t) * (size_t)e->n), buf, h.state_bytes) != h.checksum)
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
