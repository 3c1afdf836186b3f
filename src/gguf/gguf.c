/* gguf.c — hardened GGUF v2/v3 reader (see gguf.h for the format summary and the API
 * contract; the writer lives in gguf_write.c).
 *
 * Every byte of the file is untrusted. Parsing goes through a bounds-checked cursor; every
 * count is compared with the bytes that remain before anything is allocated or looped over,
 * and every size product uses rl_mul_u64 / rl_add_u64. The parsed objects point into the
 * mapping (zero copy); the only allocations are the kv / tensor arrays, the hash index and one
 * offsets table per top-level string array (so gguf_arr_str is O(1) on 151936-token vocabs).
 *
 * The typed getters and array element readers are in gguf_meta.c (shared helpers: gguf_int.h).
 *
 * Test: tests/c/test_gguf.c (round trips + a table of corrupt files), tools/fuzz_gguf.c
 * (libFuzzer; `make fuzz`), docs/FUZZING.md for the recorded fuzz runs.
 */
#include "gguf/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf_int.h"
#include "gguf/quant.h"
#include "gguf/quant_repack.h"

/* Arrays nested deeper than this are rejected: real files never nest at all, and the limit
 * bounds the recursion of the parser and of gguf_arr_get / gguf_arr_nbytes. */
#define GGUF_MAX_NEST 8
/* Sanity caps far above real files (~40 keys, ~850 tensors) that keep indices in 32 bits. */
#define GGUF_MAX_KV (1u << 24)
#define GGUF_MAX_TENSORS (1u << 24)
#define GGUF_DEFAULT_ALIGNMENT 32

/* ---- bounds-checked cursor ------------------------------------------------------------ */

typedef struct {
    const uint8_t *p;
    uint64_t size, pos;
    const char *name; /* for messages */
    bool failed;
} cursor;

/* Set "<name>: <msg>" as the error (first error wins) and return false. */
static bool cur_fail(cursor *c, const char *fmt, ...) RL_PRINTF(2, 3);
static bool cur_fail(cursor *c, const char *fmt, ...) {
    if (c->failed) return false;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    rl_seterr("%s: %s", c->name, msg);
    c->failed = true;
    return false;
}
#ifdef __clang_analyzer__
/* the contract where make lint's static analyzer sees it (it does not look into variadic
 * functions; as rl_seterr in base/common.h) */
#define cur_fail(...) (cur_fail(__VA_ARGS__), false)
#endif

static uint64_t cur_left(const cursor *c) { return c->size - c->pos; }

/* Take n bytes; `what` names the item for the truncation message. */
static const uint8_t *cur_take(cursor *c, uint64_t n, const char *what) {
    if (n > cur_left(c)) {
        cur_fail(c,
                 "file truncated: %s needs %llu bytes at offset %llu but only %llu remain "
                 "(re-download or re-convert the file)",
                 what, (unsigned long long)n, (unsigned long long)c->pos, (unsigned long long)cur_left(c));
        return NULL;
    }
    const uint8_t *r = c->p + c->pos;
    c->pos += n;
    return r;
}

static bool cur_u32(cursor *c, uint32_t *v, const char *what) {
    const uint8_t *p = cur_take(c, 4, what);
    if (p) *v = rl_le32(p);
    return p != NULL;
}

static bool cur_u64(cursor *c, uint64_t *v, const char *what) {
    const uint8_t *p = cur_take(c, 8, what);
    if (p) *v = rl_le64(p);
    return p != NULL;
}

static bool cur_str(cursor *c, gguf_str *s, const char *what) {
    uint64_t n;
    if (!cur_u64(c, &n, what)) return false;
    if (n > cur_left(c))
        return cur_fail(c,
                        "%s has length %llu at offset %llu but only %llu bytes remain "
                        "(file truncated or corrupt)",
                        what, (unsigned long long)n, (unsigned long long)(c->pos - 8),
                        (unsigned long long)cur_left(c));
    s->p = (const char *)c->p + c->pos;
    s->n = n;
    c->pos += n;
    return true;
}

/* Parse the body of a value of type t (the type tag is already consumed) into v.
 * `depth` counts array nesting; `want_off` asks for the str_off table of a string array
 * (only top-level arrays get one: nested ones are reached through gguf_arr_get). */
static bool parse_value(cursor *c, uint32_t t, gguf_value *v, int depth, bool want_off, const char *what) {
    memset(v, 0, sizeof *v);
    uint64_t fs = gguf_fixed_size(t);
    if (fs) {
        const uint8_t *p = cur_take(c, fs, what);
        if (!p) return false;
        gguf_decode_scalar((gguf_type)t, p, v);
        return true;
    }
    if (t == GGUF_TYPE_STRING) {
        v->type = GGUF_TYPE_STRING;
        return cur_str(c, &v->v.str, what);
    }
    if (t != GGUF_TYPE_ARRAY)
        return cur_fail(c,
                        "%s has unknown value type %u at offset %llu (file corrupt or from a "
                        "newer GGUF version)",
                        what, t, (unsigned long long)(c->pos - 4));
    if (depth >= GGUF_MAX_NEST)
        return cur_fail(c, "%s: arrays nested deeper than %d levels (file corrupt)", what, GGUF_MAX_NEST);
    uint32_t elem;
    uint64_t n;
    if (!cur_u32(c, &elem, what) || !cur_u64(c, &n, what)) return false;
    if (elem >= GGUF_TYPE_COUNT)
        return cur_fail(c, "%s is an array of unknown element type %u (file corrupt)", what, elem);
    v->type = GGUF_TYPE_ARRAY;
    v->v.arr.elem = (gguf_type)elem;
    v->v.arr.n = n;
    v->v.arr.data = c->p + c->pos;
    /* Minimum wire size of one element: checked before any loop or allocation so a huge
     * count in a small file fails fast. */
    uint64_t min_elem = fs = gguf_fixed_size(elem);
    if (elem == GGUF_TYPE_STRING) min_elem = 8;
    if (elem == GGUF_TYPE_ARRAY) min_elem = 12;
    uint64_t min_bytes;
    if (!rl_mul_u64(n, min_elem, &min_bytes) || min_bytes > cur_left(c))
        return cur_fail(c,
                        "%s claims %llu %s elements but only %llu bytes remain (file "
                        "truncated or corrupt)",
                        what, (unsigned long long)n, gguf_type_name((gguf_type)elem),
                        (unsigned long long)cur_left(c));
    if (fs) {
        c->pos += min_bytes;
        return true;
    }
    if (elem == GGUF_TYPE_STRING) {
        uint64_t *off = NULL;
        if (want_off && n) {
            off = rl_malloc(n * sizeof *off, "GGUF string-array offsets");
            if (!off) {
                char e[300];
                snprintf(e, sizeof e, "%s", rl_lasterr());
                return cur_fail(c, "%s: %s", what, e);
            }
            v->v.arr.str_off = off;
        }
        uint64_t base = c->pos;
        for (uint64_t i = 0; i < n; i++) {
            if (off) off[i] = c->pos - base;
            gguf_str s;
            if (!cur_str(c, &s, what)) {
                free(off);
                v->v.arr.str_off = NULL;
                return false;
            }
        }
        return true;
    }
    /* Nested arrays: each element is an array body (u32 elem type, u64 count, elements)
     * without a tag of its own, since the outer array already said "array". */
    for (uint64_t i = 0; i < n; i++) {
        gguf_value sub;
        if (!parse_value(c, GGUF_TYPE_ARRAY, &sub, depth + 1, false, what)) return false;
    }
    return true;
}

/* Copy up to n bytes of s into buf (size cap) as a printable, NUL-terminated string, so a
 * hostile name cannot break the one-line error contract. */
static const char *printable(const char *s, uint64_t n, char *buf, size_t cap) {
    size_t k = 0;
    for (uint64_t i = 0; i < n && k + 4 < cap; i++) {
        unsigned char ch = (unsigned char)s[i];
        buf[k++] = (ch >= 0x20 && ch != 0x7f) ? (char)ch : '?';
    }
    if (n > cap - 4 && cap > 4) buf[k++] = '.', buf[k++] = '.', buf[k++] = '.';
    buf[k] = 0;
    return buf;
}

/* ---- hash index (open addressing, FNV-1a) --------------------------------------------- */

typedef struct {
    uint32_t *slot; /* 0 = empty, else index + 1 */
    uint64_t mask;
} htab;

typedef struct {
    htab kv, tensor;
} gguf_index;

static uint64_t hash_bytes(const void *p, uint64_t n) {
    const uint8_t *b = p;
    uint64_t h = 1469598103934665603ull;
    for (uint64_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static bool htab_init(htab *h, uint64_t n) {
    uint64_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    h->slot = rl_calloc(cap, sizeof *h->slot, "GGUF hash index");
    h->mask = cap - 1;
    return h->slot != NULL;
}

static void htab_free(htab *h) {
    free(h->slot);
    h->slot = NULL;
}

/* Look up key bytes in a kv table: returns the slot (whether found or the empty one where
 * it would go) and sets *found. */
static uint64_t htab_find_kv(const htab *h, const gguf_kv *kv, const char *k, uint64_t n, bool *found) {
    uint64_t i = hash_bytes(k, n) & h->mask;
    for (;; i = (i + 1) & h->mask) {
        uint32_t s = h->slot[i];
        if (!s) break;
        gguf_str key = kv[s - 1].key;
        if (key.n == n && memcmp(key.p, k, n) == 0) {
            *found = true;
            return i;
        }
    }
    *found = false;
    return i;
}

static uint64_t htab_find_tensor(const htab *h, const gguf_tensor *t, const char *name, bool *found) {
    uint64_t i = hash_bytes(name, strlen(name)) & h->mask;
    for (;; i = (i + 1) & h->mask) {
        uint32_t s = h->slot[i];
        if (!s) break;
        if (strcmp(t[s - 1].name, name) == 0) {
            *found = true;
            return i;
        }
    }
    *found = false;
    return i;
}

/* ---- one part ------------------------------------------------------------------------- */

typedef struct {
    uint32_t version, alignment;
    gguf_kv *kv;
    uint64_t n_kv;
    htab kv_index; /* built while parsing: duplicate detection + lookups */
    gguf_tensor *t;
    uint64_t n_t;
    uint64_t data_start;
} part_parse;

static void free_kvs(gguf_kv *kv, uint64_t n) {
    for (uint64_t i = 0; kv && i < n; i++)
        if (kv[i].val.type == GGUF_TYPE_ARRAY) free((void *)kv[i].val.v.arr.str_off);
    free(kv);
}

static void part_parse_free(part_parse *pp) {
    free_kvs(pp->kv, pp->n_kv);
    htab_free(&pp->kv_index);
    free(pp->t);
    memset(pp, 0, sizeof *pp);
}

/* Grow a dynamic array to hold at least `need` elements (capacity doubles). */
static bool grow(void **arr, uint64_t *cap, uint64_t need, size_t elem, const char *what) {
    if (need <= *cap) return true;
    uint64_t nc = *cap ? *cap * 2 : 64;
    while (nc < need) nc *= 2;
    void *p = realloc(*arr, nc * elem);
    if (!p) return rl_seterr("out of memory growing %s", what), false;
    *arr = p;
    *cap = nc;
    return true;
}

static int cmp_off(const void *a, const void *b) {
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* An allocation failed (rl_lasterr says which): the same error with the file and position. */
static bool cur_oom(cursor *c) {
    char e[300];
    snprintf(e, sizeof e, "%s", rl_lasterr());
    return cur_fail(c, "%s", e);
}

/* The header: magic, version, and the tensor and key/value counts, bounded by what the file can
 * hold. Sets pp->version. */
static bool parse_header(cursor *c, part_parse *pp, uint64_t *n_t_out, uint64_t *n_kv_out) {
    const uint8_t *map = c->p;
    const uint64_t size = c->size;
    if (size < 4 || memcmp(map, "GGUF", 4) != 0) {
        if (size < 4)
            cur_fail(c, "not a GGUF file (only %llu bytes; expected the magic \"GGUF\")",
                     (unsigned long long)size);
        else
            cur_fail(c, "not a GGUF file (bad magic %02x %02x %02x %02x, expected \"GGUF\")", map[0], map[1],
                     map[2], map[3]);
        return false;
    }
    c->pos = 4;
    uint32_t version;
    uint64_t n_t, n_kv;
    if (!cur_u32(c, &version, "header version")) return false;
    if (version == 1)
        return cur_fail(c, "GGUF version 1 is not supported (re-convert the model with a current "
                           "llama.cpp to get version 3)");
    if (version == 0x02000000u || version == 0x03000000u)
        return cur_fail(c, "big-endian GGUF is not supported (convert a little-endian file)");
    if (version != 2 && version != 3)
        return cur_fail(c, "unsupported GGUF version %u (this build reads versions 2 and 3)", version);
    pp->version = version;
    if (!cur_u64(c, &n_t, "header tensor count") || !cur_u64(c, &n_kv, "header key/value count"))
        return false;
    /* Each kv needs >= 13 bytes (8 key length, 4 type, 1 value), each tensor info >= 32. */
    if (n_kv > cur_left(c) / 13 || n_kv > GGUF_MAX_KV)
        return cur_fail(c,
                        "header claims %llu key/value pairs, more than the file can hold "
                        "(file truncated or corrupt)",
                        (unsigned long long)n_kv);
    if (n_t > cur_left(c) / 32 || n_t > GGUF_MAX_TENSORS)
        return cur_fail(c,
                        "header claims %llu tensors, more than the file can hold (file "
                        "truncated or corrupt)",
                        (unsigned long long)n_t);
    *n_t_out = n_t, *n_kv_out = n_kv;
    return true;
}

/* The n_kv key/value pairs into pp->kv, indexed (a duplicate key is an error). */
static bool parse_kvs(cursor *c, part_parse *pp, uint64_t n_kv) {
    char nb[160];
    uint64_t cap = 0;
    if (!htab_init(&pp->kv_index, n_kv)) return cur_oom(c);
    for (uint64_t i = 0; i < n_kv; i++) {
        if (!grow((void **)&pp->kv, &cap, i + 1, sizeof *pp->kv, "GGUF key/value table")) return cur_oom(c);
        gguf_kv *kv = &pp->kv[i];
        memset(kv, 0, sizeof *kv);
        char what[200];
        snprintf(what, sizeof what, "key %llu of %llu", (unsigned long long)i + 1, (unsigned long long)n_kv);
        if (!cur_str(c, &kv->key, what)) return false;
        printable(kv->key.p, kv->key.n, nb, 100);
        snprintf(what, sizeof what, "value of key '%s'", nb);
        if (kv->key.n == 0)
            return cur_fail(c, "key %llu of %llu is empty (file corrupt)", (unsigned long long)i + 1,
                            (unsigned long long)n_kv);
        bool found;
        uint64_t slot = htab_find_kv(&pp->kv_index, pp->kv, kv->key.p, kv->key.n, &found);
        if (found) return cur_fail(c, "duplicate key '%s' (file corrupt)", nb);
        uint32_t type;
        if (!cur_u32(c, &type, what)) return false;
        pp->n_kv = i + 1; /* from here on the kv owns whatever parse_value allocates */
        if (!parse_value(c, type, &kv->val, 0, true, what)) return false;
        pp->kv_index.slot[slot] = (uint32_t)i + 1;
    }
    return true;
}

/* general.alignment: u32, power of two; GGUF_DEFAULT_ALIGNMENT when absent. */
static bool parse_alignment(cursor *c, part_parse *pp) {
    pp->alignment = GGUF_DEFAULT_ALIGNMENT;
    if (pp->n_kv == 0) return true; /* no keys: nothing to look up (pp->kv is NULL) */
    bool found;
    uint64_t s = htab_find_kv(&pp->kv_index, pp->kv, "general.alignment", 17, &found);
    if (!found) return true;
    const gguf_value *v = &pp->kv[pp->kv_index.slot[s] - 1].val;
    if (v->type != GGUF_TYPE_UINT32)
        return cur_fail(c, "general.alignment has type %s, expected u32 (file corrupt)",
                        gguf_type_name(v->type));
    if (v->v.u64 == 0 || (v->v.u64 & (v->v.u64 - 1)) != 0)
        return cur_fail(c, "general.alignment is %llu, not a power of two (file corrupt)",
                        (unsigned long long)v->v.u64);
    pp->alignment = (uint32_t)v->v.u64;
    return true;
}

/* The info of tensor i of n_t into t: name, dimensions, type, offset; its byte size checked. */
static bool parse_tensor_info(cursor *c, const part_parse *pp, uint64_t i, uint64_t n_t, int part,
                              gguf_tensor *t) {
    char nb[160];
    char what[200];
    gguf_str name_s;
    snprintf(what, sizeof what, "name of tensor %llu of %llu", (unsigned long long)i + 1,
             (unsigned long long)n_t);
    if (!cur_str(c, &name_s, what)) return false;
    printable(name_s.p, name_s.n, nb, 100);
    if (name_s.n == 0 || name_s.n >= sizeof t->name || memchr(name_s.p, 0, name_s.n))
        return cur_fail(c,
                        "tensor %llu has an invalid name '%s' (%llu bytes; names must be 1..%zu "
                        "bytes without NUL)",
                        (unsigned long long)i + 1, nb, (unsigned long long)name_s.n, sizeof t->name - 1);
    memcpy(t->name, name_s.p, name_s.n);
    t->name[name_s.n] = 0;
    snprintf(what, sizeof what, "info of tensor '%s'", nb);
    if (!cur_u32(c, &t->n_dims, what)) return false;
    if (t->n_dims < 1 || t->n_dims > 4)
        return cur_fail(c, "tensor '%s' has %u dimensions (must be 1..4)", nb, t->n_dims);
    uint64_t nelem = 1;
    for (int d = 0; d < 4; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t ne;
        if (!cur_u64(c, &ne, what)) return false;
        if (ne == 0 || ne > (uint64_t)INT64_MAX)
            return cur_fail(c, "tensor '%s' has invalid size %lld in dimension %u (must be > 0)", nb,
                            (long long)ne, d);
        if (!rl_mul_u64(nelem, ne, &nelem) || nelem > (uint64_t)INT64_MAX)
            return cur_fail(c, "tensor '%s' element count overflows 64 bits (file corrupt)", nb);
        t->ne[d] = (int64_t)ne;
    }
    if (!cur_u32(c, &t->type, what) || !cur_u64(c, &t->offset, what)) return false;
    const quant_traits *q = quant_is_internal(t->type) ? NULL : quant_get(t->type); /* in-memory layouts */
    if (!q)
        return cur_fail(c,
                        "tensor '%s' has unknown or unsupported ggml type id %u (this build cannot "
                        "read it)",
                        nb, t->type);
    if (q->blck <= 0 || t->ne[0] % q->blck != 0)
        return cur_fail(c,
                        "tensor '%s' of type %s has ne[0] = %lld, not a multiple of the block "
                        "size %d (file corrupt)",
                        nb, q->name, (long long)t->ne[0], q->blck);
    uint64_t bytes = (uint64_t)(t->ne[0] / q->blck);
    if (!rl_mul_u64(bytes, q->type_size, &bytes) || !rl_mul_u64(bytes, (uint64_t)t->ne[1], &bytes) ||
        !rl_mul_u64(bytes, (uint64_t)t->ne[2], &bytes) || !rl_mul_u64(bytes, (uint64_t)t->ne[3], &bytes))
        return cur_fail(c, "tensor '%s' byte size overflows 64 bits (file corrupt)", nb);
    t->nbytes = bytes;
    t->part = part;
    if (t->offset % pp->alignment != 0)
        return cur_fail(c,
                        "tensor '%s' data offset %llu is not a multiple of the alignment %u "
                        "(file corrupt)",
                        nb, (unsigned long long)t->offset, pp->alignment);
    return true;
}

/* The n_t tensor infos into pp->t (part stored in each). */
static bool parse_tensor_infos(cursor *c, part_parse *pp, uint64_t n_t, int part) {
    if (n_t > cur_left(c) / 32)
        return cur_fail(c,
                        "header claims %llu tensors, more than the file can hold (file truncated "
                        "or corrupt)",
                        (unsigned long long)n_t);
    pp->t = rl_calloc(n_t ? n_t : 1, sizeof *pp->t, "GGUF tensor table");
    if (!pp->t) return cur_oom(c);
    for (uint64_t i = 0; i < n_t; i++) {
        if (!parse_tensor_info(c, pp, i, n_t, part, &pp->t[i])) return false;
        pp->n_t = i + 1;
    }
    pp->n_t = n_t;
    return true;
}

/* The data section (at the next multiple of the alignment): every tensor inside the file and
 * no two overlapping. Sets pp->data_start and each tensor's file offset and data pointer. */
static bool parse_data(cursor *c, part_parse *pp) {
    const uint8_t *map = c->p;
    const uint64_t size = c->size, n_t = pp->n_t;
    char nb[160];
    uint64_t ds;
    if (!rl_add_u64(c->pos, pp->alignment - 1, &ds))
        return cur_fail(c, "data section offset overflows (file corrupt)");
    ds -= ds % pp->alignment;
    pp->data_start = ds;
    for (uint64_t i = 0; i < n_t; i++) {
        gguf_tensor *t = &pp->t[i];
        uint64_t beg, end;
        if (!rl_add_u64(ds, t->offset, &beg) || !rl_add_u64(beg, t->nbytes, &end) || end > size) {
            printable(t->name, strlen(t->name), nb, 100);
            return cur_fail(c,
                            "tensor '%s' data (offset %llu, %llu bytes) extends past the end of the "
                            "file (%llu bytes; file truncated?)",
                            nb, (unsigned long long)t->offset, (unsigned long long)t->nbytes,
                            (unsigned long long)size);
        }
        t->file_off = beg;
        t->data = map + beg;
    }
    /* non-overlap: sort by offset and compare neighbours */
    if (n_t > 1) {
        gguf_tensor **ord = rl_malloc(n_t * sizeof(gguf_tensor *), "GGUF tensor order");
        if (!ord) return cur_oom(c);
        for (uint64_t i = 0; i < n_t; i++) ord[i] = &pp->t[i];
        qsort(ord, n_t, sizeof(gguf_tensor *), cmp_off);
        for (uint64_t i = 1; i < n_t; i++) {
            if (ord[i - 1]->offset + ord[i - 1]->nbytes > ord[i]->offset) {
                char nb2[160];
                printable(ord[i - 1]->name, strlen(ord[i - 1]->name), nb, 100);
                printable(ord[i]->name, strlen(ord[i]->name), nb2, 100);
                cur_fail(c, "tensors '%s' and '%s' overlap in the data section (file corrupt)", nb, nb2);
                free(ord);
                return false;
            }
        }
        free(ord);
    }
    return true;
}

/* Parse and validate the whole of one GGUF image (header, kvs, tensor infos, data bounds).
 * `part` is stored in each tensor. On failure returns false with the error set and *pp freed. */
static bool parse_part(const uint8_t *map, uint64_t size, const char *name, int part, part_parse *pp) {
    memset(pp, 0, sizeof *pp);
    cursor c = {.p = map, .size = size, .name = name};
    uint64_t n_t = 0, n_kv = 0;
    if (!parse_header(&c, pp, &n_t, &n_kv)) return false;
    if (!parse_kvs(&c, pp, n_kv) || !parse_alignment(&c, pp) || !parse_tensor_infos(&c, pp, n_t, part) ||
        !parse_data(&c, pp)) {
        part_parse_free(pp);
        return false;
    }
    return true;
}

/* ---- whole file ----------------------------------------------------------------------- */

static char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = rl_malloc(n, "path");
    if (p) memcpy(p, s, n);
    return p;
}

/* Allocate the file object with one slot per part. */
static gguf_file *file_new(const char *path, int n_parts) {
    gguf_file *f = rl_calloc(1, sizeof *f, "GGUF file");
    if (!f) return NULL;
    f->path = xstrdup(path);
    f->parts = rl_calloc((size_t)n_parts, sizeof *f->parts, "GGUF parts");
    if (!f->path || !f->parts) {
        free(f->path);
        free(f->parts);
        free(f);
        return NULL;
    }
    f->n_parts = n_parts;
    for (int i = 0; i < n_parts; i++) f->parts[i].fd = -1;
    return f;
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    for (int i = 0; i < f->n_parts; i++) {
        struct gguf_part *p = &f->parts[i];
        if (p->fd >= 0) { /* files we mapped ourselves (gguf_open_mem maps nothing) */
            if (p->map) munmap((void *)p->map, p->size);
            close(p->fd);
        }
        free(p->path);
    }
    free(f->parts);
    free_kvs(f->kv, f->n_kv);
    free(f->tensors);
    gguf_index *ix = f->index;
    if (ix) {
        htab_free(&ix->kv);
        htab_free(&ix->tensor);
        free(ix);
    }
    free(f->path);
    free(f);
}

/* Open and map one file read-only into *p. */
static bool map_part(const char *path, struct gguf_part *p) {
    p->path = xstrdup(path);
    if (!p->path) return false;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rl_seterr("%s: cannot open: %s (check the path)", path, strerror(errno));
        return false;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        rl_seterr("%s: not a regular file (expected a .gguf model file)", path);
        close(fd);
        return false;
    }
    if (st.st_size == 0) {
        rl_seterr("%s: file is empty (expected a GGUF model; re-download it)", path);
        close(fd);
        return false;
    }
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        rl_seterr("%s: cannot mmap %lld bytes: %s", path, (long long)st.st_size, strerror(errno));
        close(fd);
        return false;
    }
    /* The metadata (tokenizer arrays included) sits in the first few MiB and is read right
     * away; tensor data is left to the caller's access pattern (gguf_tensor_advise). */
    size_t head = (size_t)st.st_size < (64u << 20) ? (size_t)st.st_size : (64u << 20);
    madvise(m, head, MADV_WILLNEED);
    p->fd = fd;
    p->map = m;
    p->size = (uint64_t)st.st_size;
    return true;
}

/* Build the tensor-name index of f (f->index allocated, its tensor table empty); a duplicate
 * name is an error, `where` finishes its message ("" or " across split parts"). */
static bool index_tensors(gguf_file *f, const char *where) {
    gguf_index *ix = f->index;
    if (!htab_init(&ix->tensor, f->n_tensors)) return false;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        bool found;
        uint64_t s = htab_find_tensor(&ix->tensor, f->tensors, f->tensors[i].name, &found);
        if (found) {
            char nb[160];
            printable(f->tensors[i].name, strlen(f->tensors[i].name), nb, 100);
            rl_seterr("%s: duplicate tensor name '%s'%s (file corrupt)", f->path, nb, where);
            return false;
        }
        ix->tensor.slot[s] = (uint32_t)i + 1;
    }
    return true;
}

/* Move the parsed kvs of part 0 into f and build both indexes over f's tensors. */
static bool index_file(gguf_file *f) {
    gguf_index *ix = rl_calloc(1, sizeof *ix, "GGUF index");
    if (!ix) return false;
    f->index = ix;
    return index_tensors(f, "");
}

/* Build the file object from a single parsed part whose mapping is in f->parts[0]. */
static gguf_file *adopt_part(gguf_file *f, part_parse *pp) {
    f->version = pp->version;
    f->alignment = pp->alignment;
    f->kv = pp->kv;
    f->n_kv = pp->n_kv;
    f->tensors = pp->t;
    f->n_tensors = pp->n_t;
    f->parts[0].data_start = pp->data_start;
    gguf_index *ix = NULL;
    pp->kv = NULL;
    pp->t = NULL;
    if (!index_file(f)) goto fail;
    ix = f->index;
    ix->kv = pp->kv_index;
    pp->kv_index.slot = NULL;
    return f;
fail:
    part_parse_free(pp);
    gguf_close(f);
    return NULL;
}

gguf_file *gguf_open_mem(const void *buf, uint64_t size, const char *name) {
    part_parse pp;
    if (!buf && size) return rl_seterr("%s: NULL buffer", name), NULL;
    if (!parse_part(buf, size, name, 0, &pp)) return NULL;
    gguf_file *f = file_new(name, 1);
    if (!f) {
        part_parse_free(&pp);
        return NULL;
    }
    f->parts[0].map = buf;
    f->parts[0].size = size;
    f->parts[0].path = xstrdup(name);
    if (!f->parts[0].path) {
        part_parse_free(&pp);
        gguf_close(f);
        return NULL;
    }
    return adopt_part(f, &pp);
}

/* Split naming: "<prefix>-00001-of-00003.gguf" (5 digits, 1-based, as llama.cpp's
 * gguf-split writes). Returns the prefix length, or 0 if `path` does not follow it. */
static size_t split_prefix_len(const char *path) {
    static const char pat[] = "-#####-of-#####.gguf";
    size_t n = strlen(path), m = sizeof pat - 1;
    if (n <= m) return 0;
    for (size_t i = 0; i < m; i++) {
        char c = path[n - m + i];
        if (pat[i] == '#' ? (c < '0' || c > '9') : c != pat[i]) return 0;
    }
    return n - m;
}

/* Open parts 2..n of a split model and merge their tensors into f. */
static bool open_split_parts(gguf_file *f, uint32_t n_split) {
    size_t plen = split_prefix_len(f->path);
    if (!plen) {
        rl_seterr("%s: part 1 of a %u-part split model, but the name does not end in "
                  "-00001-of-%05u.gguf (rename the parts to the gguf-split pattern)",
                  f->path, n_split, n_split);
        return false;
    }
    struct gguf_part *np = realloc(f->parts, n_split * sizeof *np);
    if (!np) return rl_seterr("%s: out of memory for split parts", f->path), false;
    f->parts = np;
    for (uint32_t k = 1; k < n_split; k++) {
        memset(&f->parts[k], 0, sizeof f->parts[k]);
        f->parts[k].fd = -1;
    }
    f->n_parts = (int)n_split;
    uint64_t total = f->n_tensors;
    char *pp_path = rl_malloc(plen + 32, "split part path");
    if (!pp_path) return false;
    for (uint32_t k = 1; k < n_split; k++) {
        snprintf(pp_path, plen + 32, "%.*s-%05u-of-%05u.gguf", (int)plen, f->path, k + 1, n_split);
        if (access(pp_path, F_OK) != 0) {
            rl_seterr("%s: split part %u of %u is missing: %s (download every part into the same "
                      "directory)",
                      f->path, k + 1, n_split, pp_path);
            goto fail;
        }
        if (!map_part(pp_path, &f->parts[k])) goto fail;
        part_parse pp;
        if (!parse_part(f->parts[k].map, f->parts[k].size, pp_path, (int)k, &pp)) goto fail;
        f->parts[k].data_start = pp.data_start;
        /* the part must say it is part k of n_split */
        bool found;
        uint64_t s;
        uint64_t no = UINT64_MAX, cnt = UINT64_MAX;
        s = htab_find_kv(&pp.kv_index, pp.kv, "split.no", 8, &found);
        if (found && gguf_fixed_size(pp.kv[pp.kv_index.slot[s] - 1].val.type))
            no = pp.kv[pp.kv_index.slot[s] - 1].val.v.u64;
        s = htab_find_kv(&pp.kv_index, pp.kv, "split.count", 11, &found);
        if (found && gguf_fixed_size(pp.kv[pp.kv_index.slot[s] - 1].val.type))
            cnt = pp.kv[pp.kv_index.slot[s] - 1].val.v.u64;
        if (no != k || cnt != n_split) {
            rl_seterr("%s: split.no/split.count say part %lld of %lld, expected part %u of %u (a "
                      "part from another model?)",
                      pp_path, (long long)no + 1, (long long)cnt, k + 1, n_split);
            part_parse_free(&pp);
            goto fail;
        }
        gguf_tensor *nt = NULL;
        if (pp.n_t) {
            nt = realloc(f->tensors, (total + pp.n_t) * sizeof *nt);
            if (!nt) {
                rl_seterr("%s: out of memory merging split tensors", f->path);
                part_parse_free(&pp);
                goto fail;
            }
            memcpy(nt + total, pp.t, pp.n_t * sizeof *nt);
            f->tensors = nt;
            total += pp.n_t;
            f->n_tensors = total;
        }
        part_parse_free(&pp);
    }
    free(pp_path);
    return true;
fail:
    free(pp_path);
    return false;
}

gguf_file *gguf_open(const char *path) {
    gguf_file *f = file_new(path, 1);
    if (!f) return NULL;
    if (!map_part(path, &f->parts[0])) goto fail;
    part_parse pp;
    if (!parse_part(f->parts[0].map, f->parts[0].size, path, 0, &pp)) goto fail;
    if (!adopt_part(f, &pp)) return NULL; /* adopt_part closed f */

    uint32_t n_split = 1, no = 0;
    const gguf_kv *kc = gguf_find_kv(f, "split.count");
    if (kc && !gguf_get_u32(f, "split.count", &n_split)) {
        rl_seterr("%s: split.count has a bad type or value (file corrupt)", path);
        goto fail;
    }
    if (n_split <= 1) return f;
    if (n_split > 1024) {
        rl_seterr("%s: split.count is %u (at most 1024 parts are supported)", path, n_split);
        goto fail;
    }
    gguf_get_u32(f, "split.no", &no);
    if (no != 0) {
        size_t plen = split_prefix_len(path);
        rl_seterr("%s: this is part %u of a %u-part split model (open the first part, "
                  "%.*s-00001-of-%05u.gguf)",
                  path, no + 1, n_split, (int)plen, path, n_split);
        goto fail;
    }
    /* tensors of part 1 are re-indexed after the merge */
    gguf_index *ix = f->index;
    htab_free(&ix->tensor);
    if (!open_split_parts(f, n_split)) goto fail;
    uint64_t want;
    if (gguf_get_u64(f, "split.tensors.count", &want) && want != f->n_tensors) {
        rl_seterr("%s: split.tensors.count is %llu but the %u parts hold %llu tensors (mixed "
                  "parts from different models?)",
                  path, (unsigned long long)want, n_split, (unsigned long long)f->n_tensors);
        goto fail;
    }
    if (f->n_tensors > GGUF_MAX_TENSORS) {
        rl_seterr("%s: %llu tensors across the split parts, too many", path,
                  (unsigned long long)f->n_tensors);
        goto fail;
    }
    if (!index_tensors(f, " across split parts")) goto fail; /* f->path is path */
    /* tensor data pointers into each part's mapping */
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        t->data = f->parts[t->part].map + t->file_off;
    }
    return f;
fail:
    gguf_close(f);
    return NULL;
}

/* ---- index lookups -------------------------------------------------------------------- */

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key) {
    if (f->n_kv == 0) return NULL; /* no keys: nothing to look up (f->kv is NULL) */
    const gguf_index *ix = f->index;
    bool found;
    uint64_t s = htab_find_kv(&ix->kv, f->kv, key, strlen(key), &found);
    return found ? &f->kv[ix->kv.slot[s] - 1] : NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    const gguf_index *ix = f->index;
    bool found;
    uint64_t s = htab_find_tensor(&ix->tensor, f->tensors, name, &found);
    return found ? &f->tensors[ix->tensor.slot[s] - 1] : NULL;
}

int gguf_tensor_advise(const gguf_file *f, const gguf_tensor *t, int advice) {
    const struct gguf_part *p = &f->parts[t->part];
    if (p->fd < 0) return 0; /* caller-owned memory: nothing to advise */
    long pg = sysconf(_SC_PAGESIZE);
    uint64_t psz = pg > 0 ? (uint64_t)pg : 4096;
    uint64_t beg = t->file_off - t->file_off % psz, end = t->file_off + t->nbytes;
    if (madvise((void *)(p->map + beg), end - beg, advice) != 0)
        return rl_seterr("%s: madvise on tensor '%s' failed: %s", p->path, t->name, strerror(errno));
    return 0;
}
