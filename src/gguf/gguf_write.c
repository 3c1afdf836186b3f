/* gguf_write.c — streaming GGUF v3 writer (API in gguf.h; the reader is gguf.c).
 *
 * Metadata is encoded into wire bytes as it is set; tensors are only described until
 * gguf_writer_write, which streams header, infos, padding and data through two large buffers:
 * the caller's thread fills one (memcpy from a pointer, or the fill callback writing in place)
 * while an I/O thread write()s the other, so generating synthetic weights and writing them
 * overlap. Multi-GB files never sit in memory.
 *
 * Test: tests/c/test_gguf.c (writer -> reader round trips, split parts, disk-full via
 * /dev/full when available).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "gguf/gguf_int.h"
#include "gguf/quant.h"

#define WBUF_MAX (16u << 20) /* per stream buffer; two of them */

typedef struct {
    uint8_t *p;
    size_t n, cap;
    bool oom;
} bbuf;

static void bb_put(bbuf *b, const void *src, size_t n) {
    if (b->oom || n == 0) return;
    if (b->n + n > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + n) nc *= 2;
        uint8_t *np = realloc(b->p, nc);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

/* Little-endian stores (explicit, so the writer is correct on any host). */
static void bb_u8(bbuf *b, uint8_t v) { bb_put(b, &v, 1); }
static void bb_u16(bbuf *b, uint16_t v) {
    uint8_t x[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    bb_put(b, x, 2);
}
static void bb_u32(bbuf *b, uint32_t v) {
    uint8_t x[4];
    for (int i = 0; i < 4; i++) x[i] = (uint8_t)(v >> (8 * i));
    bb_put(b, x, 4);
}
static void bb_u64(bbuf *b, uint64_t v) {
    uint8_t x[8];
    for (int i = 0; i < 8; i++) x[i] = (uint8_t)(v >> (8 * i));
    bb_put(b, x, 8);
}
static void bb_str(bbuf *b, const void *s, uint64_t n) {
    bb_u64(b, n);
    bb_put(b, s, (size_t)n);
}

typedef struct {
    char *key;
    size_t key_n;
    bbuf val; /* u32 type tag + value, wire format */
} wkv;

typedef struct {
    char name[128];
    uint32_t type, n_dims;
    int64_t ne[4];
    const void *data;   /* NULL: bytes come from the fill callback */
    uint64_t nbytes;    /* exact size */
    uint64_t row_bytes; /* bytes of ne[0] values */
    uint64_t blk_bytes; /* bytes of one block */
    uint64_t offset;    /* assigned by gguf_writer_write */
} wtensor;

struct gguf_writer {
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
    uint32_t alignment;
    gguf_fill_fn fill;
    void *fill_ctx;
};

gguf_writer *gguf_writer_new(void) {
    gguf_writer *w = rl_calloc(1, sizeof *w, "GGUF writer");
    if (w) w->alignment = 32;
    return w;
}

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val.p);
    }
    free(w->kv);
    free(w->t);
    free(w);
}

void gguf_writer_set_alignment(gguf_writer *w, uint32_t alignment) { w->alignment = alignment; }

void gguf_writer_set_fill(gguf_writer *w, gguf_fill_fn fill, void *ctx) {
    w->fill = fill;
    w->fill_ctx = ctx;
}

/* Encode v (tag + body) into b; -1 with the error set when a scalar is out of range. */
static int encode_value(bbuf *b, const char *key, const gguf_value *v) {
    bb_u32(b, (uint32_t)v->type);
    uint64_t u = v->v.u64;
    int64_t s = v->v.i64;
    switch (v->type) {
    case GGUF_TYPE_UINT8:
        if (u > UINT8_MAX) goto range;
        bb_u8(b, (uint8_t)u);
        break;
    case GGUF_TYPE_UINT16:
        if (u > UINT16_MAX) goto range;
        bb_u16(b, (uint16_t)u);
        break;
    case GGUF_TYPE_UINT32:
        if (u > UINT32_MAX) goto range;
        bb_u32(b, (uint32_t)u);
        break;
    case GGUF_TYPE_UINT64: bb_u64(b, u); break;
    case GGUF_TYPE_BOOL: bb_u8(b, u != 0); break;
    case GGUF_TYPE_INT8:
        if (s < INT8_MIN || s > INT8_MAX) goto range;
        bb_u8(b, (uint8_t)s);
        break;
    case GGUF_TYPE_INT16:
        if (s < INT16_MIN || s > INT16_MAX) goto range;
        bb_u16(b, (uint16_t)s);
        break;
    case GGUF_TYPE_INT32:
        if (s < INT32_MIN || s > INT32_MAX) goto range;
        bb_u32(b, (uint32_t)s);
        break;
    case GGUF_TYPE_INT64: bb_u64(b, (uint64_t)s); break;
    case GGUF_TYPE_FLOAT32: {
        double d = v->v.f64;
        if (d > 3.4028234663852886e38 || d < -3.4028234663852886e38) goto range;
        union {
            float f;
            uint32_t u;
        } c = {.f = (float)d};
        bb_u32(b, c.u);
        break;
    }
    case GGUF_TYPE_FLOAT64: {
        union {
            double f;
            uint64_t u;
        } c = {.f = v->v.f64};
        bb_u64(b, c.u);
        break;
    }
    case GGUF_TYPE_STRING:
        if (v->v.str.n && !v->v.str.p) return rl_seterr("gguf writer: key '%s': NULL string", key);
        bb_str(b, v->v.str.p, v->v.str.n);
        break;
    case GGUF_TYPE_ARRAY: {
        gguf_type et = v->v.arr.elem;
        if ((unsigned)et >= GGUF_TYPE_COUNT)
            return rl_seterr("gguf writer: key '%s': unknown array element type %d", key, (int)et);
        if (v->v.arr.n && !v->v.arr.data) return rl_seterr("gguf writer: key '%s': NULL array data", key);
        uint64_t nb = v->v.arr.n ? gguf_arr_nbytes(v) : 0;
        bb_u32(b, (uint32_t)et);
        bb_u64(b, v->v.arr.n);
        bb_put(b, v->v.arr.data, (size_t)nb);
        break;
    }
    default: return rl_seterr("gguf writer: key '%s': unknown value type %d", key, (int)v->type);
    }
    return 0;
range:
    return rl_seterr("gguf writer: key '%s': value out of range for type %s", key, gguf_type_name(v->type));
}

/* Set (or replace) key[0..kn) to v. */
static int set_val_n(gguf_writer *w, const char *key, size_t kn, const gguf_value *v) {
    char kprint[128];
    snprintf(kprint, sizeof kprint, "%.*s", (int)(kn < 100 ? kn : 100), key);
    if (kn == 0) return rl_seterr("gguf writer: empty key");
    bbuf b = {0};
    if (encode_value(&b, kprint, v) != 0) {
        free(b.p);
        return -1;
    }
    if (b.oom) {
        free(b.p);
        return rl_seterr("gguf writer: out of memory encoding key '%s'", kprint);
    }
    for (size_t i = 0; i < w->n_kv; i++) {
        if (w->kv[i].key_n == kn && memcmp(w->kv[i].key, key, kn) == 0) {
            free(w->kv[i].val.p);
            w->kv[i].val = b;
            return 0;
        }
    }
    if (w->n_kv == w->cap_kv) {
        size_t nc = w->cap_kv ? 2 * w->cap_kv : 32;
        wkv *nk = realloc(w->kv, nc * sizeof *nk);
        if (!nk) {
            free(b.p);
            return rl_seterr("gguf writer: out of memory adding key '%s'", kprint);
        }
        w->kv = nk;
        w->cap_kv = nc;
    }
    char *k = malloc(kn + 1);
    if (!k) {
        free(b.p);
        return rl_seterr("gguf writer: out of memory adding key '%s'", kprint);
    }
    memcpy(k, key, kn);
    k[kn] = 0;
    w->kv[w->n_kv++] = (wkv){.key = k, .key_n = kn, .val = b};
    return 0;
}

int gguf_writer_set_val(gguf_writer *w, const char *key, const gguf_value *v) {
    return set_val_n(w, key, strlen(key), v);
}

int gguf_writer_copy_kv(gguf_writer *w, const gguf_kv *kv) {
    return set_val_n(w, kv->key.p, (size_t)kv->key.n, &kv->val);
}

int gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v) {
    gguf_value x = {.type = GGUF_TYPE_UINT32, .v.u64 = v};
    return gguf_writer_set_val(w, key, &x);
}
int gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v) {
    gguf_value x = {.type = GGUF_TYPE_INT32, .v.i64 = v};
    return gguf_writer_set_val(w, key, &x);
}
int gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v) {
    gguf_value x = {.type = GGUF_TYPE_UINT64, .v.u64 = v};
    return gguf_writer_set_val(w, key, &x);
}
int gguf_writer_set_f32(gguf_writer *w, const char *key, float v) {
    gguf_value x = {.type = GGUF_TYPE_FLOAT32, .v.f64 = v};
    return gguf_writer_set_val(w, key, &x);
}
int gguf_writer_set_bool(gguf_writer *w, const char *key, bool v) {
    gguf_value x = {.type = GGUF_TYPE_BOOL, .v.u64 = v};
    return gguf_writer_set_val(w, key, &x);
}
int gguf_writer_set_str(gguf_writer *w, const char *key, const char *v) {
    gguf_value x = {.type = GGUF_TYPE_STRING, .v.str = {v, strlen(v)}};
    return gguf_writer_set_val(w, key, &x);
}

int gguf_writer_set_arr(gguf_writer *w, const char *key, gguf_type elem, const void *data, uint64_t n) {
    uint64_t es = gguf_fixed_size(elem);
    if (!es)
        return rl_seterr("gguf writer: key '%s': gguf_writer_set_arr takes numeric/bool elements, "
                         "not %s (use gguf_writer_set_arr_str / gguf_writer_set_val)",
                         key, gguf_type_name(elem));
    /* Host is little endian (x86-64 / aarch64), so the packed values are the wire format. */
    gguf_value x = {.type = GGUF_TYPE_ARRAY, .v.arr = {.elem = elem, .n = n, .data = data}};
    return gguf_writer_set_val(w, key, &x);
}

int gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *strs, uint64_t n) {
    bbuf b = {0};
    for (uint64_t i = 0; i < n; i++) bb_str(&b, strs[i], strlen(strs[i]));
    if (b.oom) {
        free(b.p);
        return rl_seterr("gguf writer: out of memory encoding string array '%s'", key);
    }
    gguf_value x = {.type = GGUF_TYPE_ARRAY, .v.arr = {.elem = GGUF_TYPE_STRING, .n = n, .data = b.p}};
    int r = gguf_writer_set_val(w, key, &x);
    free(b.p);
    return r;
}

int gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                           const int64_t *ne, const void *data) {
    size_t nl = strlen(name);
    if (nl == 0 || nl >= sizeof w->t[0].name)
        return rl_seterr("gguf writer: tensor name '%.100s' must be 1..127 bytes", name);
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0) return rl_seterr("gguf writer: duplicate tensor '%s'", name);
    const quant_traits *q = quant_get(type);
    if (!q) return rl_seterr("gguf writer: tensor '%s': unknown ggml type id %u", name, type);
    if (n_dims < 1 || n_dims > 4)
        return rl_seterr("gguf writer: tensor '%s': n_dims %u (must be 1..4)", name, n_dims);
    wtensor t = {.type = type, .n_dims = n_dims, .data = data, .ne = {1, 1, 1, 1}};
    memcpy(t.name, name, nl + 1);
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] <= 0)
            return rl_seterr("gguf writer: tensor '%s': ne[%u] = %lld (must be > 0)", name, d,
                             (long long)ne[d]);
        t.ne[d] = ne[d];
    }
    if (t.ne[0] % q->blck != 0)
        return rl_seterr("gguf writer: tensor '%s': ne[0] = %lld is not a multiple of the %s block "
                         "size %d",
                         name, (long long)t.ne[0], q->name, q->blck);
    uint64_t bytes = (uint64_t)(t.ne[0] / q->blck) * q->type_size;
    t.row_bytes = bytes;
    t.blk_bytes = q->type_size;
    for (int d = 1; d < 4; d++)
        if (!rl_mul_u64(bytes, (uint64_t)t.ne[d], &bytes))
            return rl_seterr("gguf writer: tensor '%s': byte size overflows", name);
    t.nbytes = bytes;
    if (w->n_t == w->cap_t) {
        size_t nc = w->cap_t ? 2 * w->cap_t : 64;
        wtensor *nt = realloc(w->t, nc * sizeof *nt);
        if (!nt) return rl_seterr("gguf writer: out of memory adding tensor '%s'", name);
        w->t = nt;
        w->cap_t = nc;
    }
    w->t[w->n_t] = t;
    return (int)w->n_t++;
}

/* ---- double-buffered output stream ------------------------------------------------------ */

typedef struct {
    int fd;
    uint8_t *buf[2];
    size_t cap, used; /* capacity of each buffer; bytes in the current one */
    int cur;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    const uint8_t *job; /* buffer handed to the I/O thread, NULL when idle */
    size_t job_n;
    bool quit;
    int err; /* errno of the first failed write, 0 if none */
    uint64_t written;
} ostream;

static void *io_main(void *arg) {
    ostream *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->job && !s->quit) pthread_cond_wait(&s->cv, &s->mu);
        if (!s->job) break; /* quit with nothing pending */
        const uint8_t *p = s->job;
        size_t n = s->job_n;
        int err = s->err;
        pthread_mutex_unlock(&s->mu);
        while (n && !err) {
            ssize_t r = write(s->fd, p, n > (1u << 30) ? (1u << 30) : n);
            if (r < 0) {
                if (errno == EINTR) continue;
                err = errno;
            } else if (r == 0) {
                err = EIO;
            } else {
                p += r;
                n -= (size_t)r;
                s->written += (uint64_t)r;
            }
        }
        pthread_mutex_lock(&s->mu);
        if (err && !s->err) s->err = err;
        s->job = NULL;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* Hand the current buffer to the I/O thread (after it finished the previous one) and switch
 * to the other. Returns false if a write has failed. */
static bool os_flush(ostream *s) {
    pthread_mutex_lock(&s->mu);
    while (s->job) pthread_cond_wait(&s->cv, &s->mu);
    bool ok = s->err == 0;
    if (ok && s->used) {
        s->job = s->buf[s->cur];
        s->job_n = s->used;
        s->cur ^= 1;
        s->used = 0;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return ok;
}

static bool os_put(ostream *s, const void *src, uint64_t n) {
    const uint8_t *p = src;
    while (n) {
        if (s->used == s->cap && !os_flush(s)) return false;
        size_t k = s->cap - s->used;
        if (k > n) k = (size_t)n;
        if (p) memcpy(s->buf[s->cur] + s->used, p, k), p += k;
        else memset(s->buf[s->cur] + s->used, 0, k);
        s->used += k;
        n -= k;
    }
    return true;
}

/* Stream tensor t's bytes from the fill callback, in chunks of whole rows (whole blocks when
 * one row exceeds the buffer) written in place into the stream buffer. */
static bool os_fill(ostream *s, gguf_writer *w, int ti, const char *path) {
    const wtensor *t = &w->t[ti];
    uint64_t unit = t->row_bytes <= s->cap ? t->row_bytes : t->blk_bytes;
    uint64_t off = 0;
    while (off < t->nbytes) {
        uint64_t n = t->nbytes - off, room = s->cap - s->used;
        if (n > room) n = room - room % unit;
        if (n == 0) {
            if (!os_flush(s)) return false;
            continue;
        }
        rl_clearerr();
        if (w->fill(w->fill_ctx, ti, s->buf[s->cur] + s->used, off, n) != 0) {
            char e[300];
            snprintf(e, sizeof e, "%s", rl_lasterr());
            rl_seterr("%s: generating tensor '%s' failed at byte %llu%s%s", path, t->name,
                      (unsigned long long)off, e[0] ? ": " : "", e);
            return false;
        }
        s->used += n;
        off += n;
    }
    return true;
}

/* Stream everything; on failure sets the error (unless already set) and returns -1. */
static int write_stream(gguf_writer *w, int fd, const char *path, const bbuf *head, uint64_t total) {
    ostream s = {.fd = fd};
    s.cap = total < WBUF_MAX ? (size_t)(total > 4096 ? total : 4096) : WBUF_MAX;
    s.buf[0] = rl_aligned_alloc(s.cap, "GGUF write buffer");
    s.buf[1] = rl_aligned_alloc(s.cap, "GGUF write buffer");
    if (!s.buf[0] || !s.buf[1]) {
        free(s.buf[0]);
        free(s.buf[1]);
        return rl_seterr("%s: out of memory for the write buffers", path);
    }
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.cv, NULL);
    int rc = 0;
    if (pthread_create(&s.th, NULL, io_main, &s) != 0) {
        rc = rl_seterr("%s: cannot start the writer thread", path);
        goto out;
    }
    bool ok = os_put(&s, head->p, head->n);
    uint64_t pos = 0; /* relative to the data section */
    for (size_t i = 0; ok && i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        ok = os_put(&s, NULL, t->offset - pos); /* zero padding */
        if (ok) ok = t->data ? os_put(&s, t->data, t->nbytes) : os_fill(&s, w, (int)i, path);
        pos = t->offset + t->nbytes;
    }
    if (ok) ok = os_flush(&s);
    pthread_mutex_lock(&s.mu);
    while (s.job) pthread_cond_wait(&s.cv, &s.mu);
    s.quit = true;
    pthread_cond_broadcast(&s.cv);
    pthread_mutex_unlock(&s.mu);
    pthread_join(s.th, NULL);
    if (s.err > 0) {
        if (s.err == ENOSPC || s.err == EDQUOT)
            rc = rl_seterr("%s: disk full after writing %llu of %llu bytes (free some space or "
                           "write elsewhere)",
                           path, (unsigned long long)s.written, (unsigned long long)total);
        else
            rc = rl_seterr("%s: write failed after %llu bytes: %s", path, (unsigned long long)s.written,
                           strerror(s.err));
    } else if (!ok) {
        rc = -1; /* fill callback error, already reported */
    }
out:
    pthread_mutex_destroy(&s.mu);
    pthread_cond_destroy(&s.cv);
    free(s.buf[0]);
    free(s.buf[1]);
    return rc;
}

int gguf_writer_write(gguf_writer *w, const char *path) {
    uint32_t al = w->alignment;
    if (al == 0 || (al & (al - 1)) != 0) return rl_seterr("%s: alignment %u is not a power of two", path, al);
    /* The writer's alignment is authoritative: the key must agree with it (a copied
     * general.alignment from another file is overwritten). */
    bool has_key = false;
    for (size_t i = 0; i < w->n_kv; i++)
        if (w->kv[i].key_n == 17 && memcmp(w->kv[i].key, "general.alignment", 17) == 0) has_key = true;
    if ((al != 32 || has_key) && gguf_writer_set_u32(w, "general.alignment", al) != 0) return -1;

    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        if (!w->t[i].data && !w->fill)
            return rl_seterr("%s: tensor '%s' has no data and no fill callback is set", path, w->t[i].name);
        w->t[i].offset = off;
        if (!rl_add_u64(off, w->t[i].nbytes, &off) || !rl_add_u64(off, al - 1, &off))
            return rl_seterr("%s: total tensor size overflows", path);
        off -= off % al;
    }
    bbuf h = {0};
    bb_put(&h, "GGUF", 4);
    bb_u32(&h, 3);
    bb_u64(&h, w->n_t);
    bb_u64(&h, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        bb_str(&h, w->kv[i].key, w->kv[i].key_n);
        bb_put(&h, w->kv[i].val.p, w->kv[i].val.n);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        bb_str(&h, t->name, strlen(t->name));
        bb_u32(&h, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) bb_u64(&h, (uint64_t)t->ne[d]);
        bb_u32(&h, t->type);
        bb_u64(&h, t->offset);
    }
    while (h.n % al) bb_u8(&h, 0);
    if (h.oom) {
        free(h.p);
        return rl_seterr("%s: out of memory building the GGUF header", path);
    }
    /* data size = end of the last tensor (no padding after it) */
    uint64_t data_end = w->n_t ? w->t[w->n_t - 1].offset + w->t[w->n_t - 1].nbytes : 0;
    uint64_t total = h.n + data_end;

    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        free(h.p);
        return rl_seterr("%s: cannot create: %s", path, strerror(e));
    }
    /* Only a regular file we created may be removed on failure (never /dev/full & co). */
    struct stat st;
    bool regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    int rc = write_stream(w, fd, path, &h, total);
    free(h.p);
    if (close(fd) != 0 && rc == 0) {
        int e = errno;
        rc = e == ENOSPC || e == EDQUOT
                 ? rl_seterr("%s: disk full while closing the file (free some space)", path)
                 : rl_seterr("%s: close failed: %s", path, strerror(e));
    }
    if (rc != 0 && regular) unlink(path); /* never leave a partial model behind */
    return rc;
}
