/* test_gguf.c — GGUF reader/writer tests (src/gguf/gguf.c, src/gguf/gguf_meta.c, src/gguf/gguf_write.c).
 *
 *   - writer -> reader round trips of every value type (nested arrays, empty strings and
 *     arrays), several alignments, pointer and fill-callback tensors across buffer boundaries,
 *     gguf_writer_copy_kv;
 *   - split models: 3 parts merged; missing part, wrong entry part, count mismatch;
 *   - a table of hand-made corrupt files, each expected to fail with a given substring in a
 *     one-line rl_lasterr() (and never crash; run under ASan with `make asan-tests`);
 *   - writer failures: disk full (/dev/full), uncreatable path, failing fill callback.
 *
 * Run: build/tests/test_gguf. With RL_WRITE_FUZZ_SEEDS=DIR it also leaves its small valid
 * files in DIR as fuzz seeds (tools/fuzz_gguf.c).
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "gguf/gguf.h"
#include "gguf/quant.h"

static char tmpdir[256];

static const char *tmp(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static bool str_eq(gguf_str s, const char *c) { return s.n == strlen(c) && memcmp(s.p, c, s.n) == 0; }

static void maybe_seed(const char *path, const char *seed_name) {
    const char *dir = getenv("RL_WRITE_FUZZ_SEEDS");
    if (!dir) return;
    char dst[512];
    snprintf(dst, sizeof dst, "%s/%s", dir, seed_name);
    FILE *in = fopen(path, "rb"), *out = fopen(dst, "wb");
    if (in && out) {
        char b[4096];
        size_t n;
        while ((n = fread(b, 1, sizeof b, in)) > 0) fwrite(b, 1, n, out);
    }
    if (in) fclose(in);
    if (out) fclose(out);
}

/* ---- byte builder for hand-made files --------------------------------------------------- */

typedef struct {
    uint8_t *p;
    size_t n, cap;
} bytes;

static void put(bytes *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        RL_ASSERT(b->p);
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void u8(bytes *b, uint8_t v) { put(b, &v, 1); }
static void u32(bytes *b, uint32_t v) { put(b, &v, 4); } /* host is little endian */
static void u64(bytes *b, uint64_t v) { put(b, &v, 8); }
static void str(bytes *b, const char *s) {
    u64(b, strlen(s));
    put(b, s, strlen(s));
}
static void hdr(bytes *b, uint32_t version, uint64_t n_t, uint64_t n_kv) {
    put(b, "GGUF", 4);
    u32(b, version);
    u64(b, n_t);
    u64(b, n_kv);
}
static void kv_u32(bytes *b, const char *k, uint32_t v) {
    str(b, k);
    u32(b, GGUF_TYPE_UINT32);
    u32(b, v);
}
static void kv_str(bytes *b, const char *k, const char *v) {
    str(b, k);
    u32(b, GGUF_TYPE_STRING);
    str(b, v);
}
/* tensor info with up to 4 dims */
static void ti(bytes *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t off) {
    str(b, name);
    u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) u64(b, ne[d]);
    u32(b, type);
    u64(b, off);
}
static void pad_to(bytes *b, size_t al) {
    while (b->n % al) u8(b, 0);
}
static void zeros(bytes *b, size_t n) {
    for (size_t i = 0; i < n; i++) u8(b, 0);
}
/* One F32 tensor "t" of 8 values at offset 0, with the padding and data: a valid tail. */
static void one_tensor(bytes *b) {
    uint64_t ne[1] = {8};
    ti(b, "t", 1, ne, QT_F32, 0);
    pad_to(b, 32);
    zeros(b, 32);
}

/* A v3 file of one tensor and no keys: its info, the padding to 32 when `pad`, then n_zero zero
 * bytes of data (the tensor-info cases below vary one field each). */
static void tensor_file(bytes *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                        uint64_t off, bool pad, size_t n_zero) {
    hdr(b, 3, 1, 0);
    ti(b, name, n_dims, ne, type, off);
    if (pad) pad_to(b, 32);
    zeros(b, n_zero);
}

/* ---- corrupt-file table ------------------------------------------------------------------ */

static void c_bad_magic(bytes *b) { put(b, "GGUX\3\0\0\0", 8), zeros(b, 16); }
static void c_tiny(bytes *b) { put(b, "GG", 2); }
static void c_empty(bytes *b) { (void)b; }
static void c_v1(bytes *b) { hdr(b, 1, 0, 0); }
static void c_v4(bytes *b) { hdr(b, 4, 0, 0); }
static void c_big_endian(bytes *b) { hdr(b, 0x03000000u, 0, 0); }
static void c_trunc_header(bytes *b) { put(b, "GGUF\3\0\0\0\1\0\0", 11); }
static void c_trunc_kv(bytes *b) {
    hdr(b, 3, 0, 2);
    kv_u32(b, "a", 1);
    str(b, "b");
    u32(b, GGUF_TYPE_UINT64);
    u32(b, 0); /* only 4 of 8 value bytes */
    zeros(b, 1);
}
static void c_trunc_tinfo(bytes *b) {
    hdr(b, 3, 1, 0);
    str(b, "tensor.name.long");
    u32(b, 1);
    u64(b, 8);
    u32(b, QT_F32);
    zeros(b, 4); /* half of the offset */
}
static void c_trunc_data(bytes *b) {
    hdr(b, 3, 1, 0);
    uint64_t ne[1] = {8};
    ti(b, "t", 1, ne, QT_F32, 0);
    pad_to(b, 32);
    zeros(b, 31); /* needs 32 */
}
static void c_huge_nkv(bytes *b) { hdr(b, 3, 0, 1ull << 60), zeros(b, 64); }
static void c_huge_ntensors(bytes *b) { hdr(b, 3, 1ull << 60, 0), zeros(b, 64); }
static void c_key_len_past_eof(bytes *b) {
    hdr(b, 3, 0, 1);
    u64(b, 1ull << 40);
    put(b, "abc", 3);
    zeros(b, 16);
}
static void c_str_len_past_eof(bytes *b) {
    hdr(b, 3, 0, 1);
    str(b, "k");
    u32(b, GGUF_TYPE_STRING);
    u64(b, 1000);
    put(b, "short", 5);
    zeros(b, 8);
}
static void c_ndims0(bytes *b) { tensor_file(b, "t", 0, NULL, QT_F32, 0, false, 64); }
static void c_ndims5(bytes *b) { tensor_file(b, "t", 5, (uint64_t[]){1, 1, 1, 1, 1}, QT_F32, 0, false, 64); }
static void c_ne0(bytes *b) { tensor_file(b, "t", 2, (uint64_t[]){8, 0}, QT_F32, 0, false, 64); }
static void c_ne_negative(bytes *b) {
    tensor_file(b, "t", 2, (uint64_t[]){8, (uint64_t)-1}, QT_F32, 0, false, 64);
}
static void c_ne_overflow(bytes *b) {
    tensor_file(b, "t", 3, (uint64_t[]){1ull << 40, 1ull << 20, 1ull << 10}, QT_F32, 0, false, 64);
}
static void c_bytes_overflow(bytes *b) { /* fits int64, but 4 bytes each overflows */
    tensor_file(b, "t", 1, (uint64_t[]){1ull << 62}, QT_F32, 0, false, 64);
}
static void c_unknown_value_type(bytes *b) {
    hdr(b, 3, 0, 1);
    str(b, "k");
    u32(b, 13);
    zeros(b, 16);
}
static void c_unknown_elem_type(bytes *b) {
    hdr(b, 3, 0, 1);
    str(b, "k");
    u32(b, GGUF_TYPE_ARRAY);
    u32(b, 77);
    u64(b, 1);
    zeros(b, 16);
}
static void c_array_huge_count(bytes *b) {
    hdr(b, 3, 0, 1);
    str(b, "k");
    u32(b, GGUF_TYPE_ARRAY);
    u32(b, GGUF_TYPE_UINT32);
    u64(b, 1ull << 62);
    zeros(b, 16);
}
static void c_strarray_huge_count(bytes *b) {
    hdr(b, 3, 0, 1);
    str(b, "tokenizer.ggml.tokens");
    u32(b, GGUF_TYPE_ARRAY);
    u32(b, GGUF_TYPE_STRING);
    u64(b, 151936);
    str(b, "a");
    str(b, "b");
}
static void c_unknown_tensor_type(bytes *b) {
    tensor_file(b, "blk.0.weird.weight", 1, (uint64_t[]){32}, 99, 0, true, 256);
}
static void c_internal_type(bytes *b) { /* IQ2_LF (quant_repack.h): an in-memory layout only */
    tensor_file(b, "blk.0.ffn_up_exps.weight", 1, (uint64_t[]){256}, 48, 0, true, 256);
}
static void c_misaligned(bytes *b) { tensor_file(b, "t", 1, (uint64_t[]){8}, QT_F32, 4, true, 64); }
static void c_offset_past_eof(bytes *b) { tensor_file(b, "t", 1, (uint64_t[]){8}, QT_F32, 1024, true, 64); }
static void c_offset_wraps(bytes *b) {
    tensor_file(b, "t", 1, (uint64_t[]){8}, QT_F32, (uint64_t)-32, true, 64);
}
static void c_overlap(bytes *b) {
    hdr(b, 3, 2, 0);
    uint64_t ne[1] = {16};
    ti(b, "a", 1, ne, QT_F32, 0);
    ti(b, "b", 1, ne, QT_F32, 32); /* a is 64 bytes: [0,64) overlaps [32,96) */
    pad_to(b, 32);
    zeros(b, 128);
}
static void c_dup_key(bytes *b) {
    hdr(b, 3, 0, 3);
    kv_u32(b, "general.x", 1);
    kv_str(b, "general.y", "y");
    kv_u32(b, "general.x", 2);
}
static void c_dup_tensor(bytes *b) {
    hdr(b, 3, 2, 0);
    uint64_t ne[1] = {8};
    ti(b, "blk.0.attn_q.weight", 1, ne, QT_F32, 0);
    ti(b, "blk.0.attn_q.weight", 1, ne, QT_F32, 32);
    pad_to(b, 32);
    zeros(b, 64);
}
static void c_align_not_pow2(bytes *b) {
    hdr(b, 3, 1, 1);
    kv_u32(b, "general.alignment", 48);
    one_tensor(b);
}
static void c_align_zero(bytes *b) {
    hdr(b, 3, 1, 1);
    kv_u32(b, "general.alignment", 0);
    one_tensor(b);
}
static void c_align_wrong_type(bytes *b) {
    hdr(b, 3, 1, 1);
    str(b, "general.alignment");
    u32(b, GGUF_TYPE_UINT64);
    u64(b, 32);
    one_tensor(b);
}
static void c_not_block_multiple(bytes *b) {
    tensor_file(b, "blk.0.ffn_up_exps.weight", 2, (uint64_t[]){33, 2}, QT_Q8_0, 0, true, 256);
}
static void c_depth_bomb(bytes *b) {
    hdr(b, 3, 0, 1);
    str(b, "bomb");
    u32(b, GGUF_TYPE_ARRAY);
    for (int i = 0; i < 1000; i++) { /* array of one array of one array ... */
        u32(b, GGUF_TYPE_ARRAY);
        u64(b, 1);
    }
    u32(b, GGUF_TYPE_UINT8);
    u64(b, 0);
}
static void c_empty_key(bytes *b) {
    hdr(b, 3, 0, 1);
    kv_u32(b, "", 1);
}
static void c_empty_tensor_name(bytes *b) { tensor_file(b, "", 1, (uint64_t[]){8}, QT_F32, 0, true, 32); }
static void c_long_tensor_name(bytes *b) {
    char name[201];
    memset(name, 'x', 200);
    name[200] = 0;
    hdr(b, 3, 1, 0);
    uint64_t ne[1] = {8};
    ti(b, name, 1, ne, QT_F32, 0);
    pad_to(b, 32);
    zeros(b, 32);
}
static void c_name_with_newline(bytes *b) { /* message must stay one line */
    tensor_file(b, "evil\nname", 1, (uint64_t[]){8}, 99, 0, true, 32);
}
static void c_nested_bad_elem(bytes *b) {
    hdr(b, 3, 0, 1);
    str(b, "k");
    u32(b, GGUF_TYPE_ARRAY);
    u32(b, GGUF_TYPE_ARRAY);
    u64(b, 2);
    u32(b, GGUF_TYPE_UINT8), u64(b, 1), u8(b, 7); /* fine */
    u32(b, 200), u64(b, 0);                       /* bad inner element type */
}
static void c_tensor_count_after_kvs(bytes *b) {
    /* n_tensors plausible for the header, impossible once the kvs are consumed */
    hdr(b, 3, 3, 1);
    str(b, "k");
    u32(b, GGUF_TYPE_ARRAY);
    u32(b, GGUF_TYPE_UINT8);
    u64(b, 96);
    zeros(b, 96);
}

typedef struct {
    const char *name;
    void (*build)(bytes *);
    const char *expect; /* substring of rl_lasterr() */
} corrupt_case;

static const corrupt_case corrupt[] = {
    {"bad magic", c_bad_magic, "bad magic"},
    {"2-byte file", c_tiny, "not a GGUF file"},
    {"empty buffer", c_empty, "not a GGUF file"},
    {"version 1", c_v1, "version 1 is not supported"},
    {"version 4", c_v4, "unsupported GGUF version 4"},
    {"big endian", c_big_endian, "big-endian"},
    {"truncated header", c_trunc_header, "truncated"},
    {"truncated kv", c_trunc_kv, "truncated"},
    {"truncated tensor info", c_trunc_tinfo, "truncated"},
    {"truncated data", c_trunc_data, "extends past the end"},
    {"huge n_kv", c_huge_nkv, "key/value pairs, more than the file can hold"},
    {"huge n_tensors", c_huge_ntensors, "tensors, more than the file can hold"},
    {"key length past EOF", c_key_len_past_eof, "has length 1099511627776"},
    {"string length past EOF", c_str_len_past_eof, "has length 1000"},
    {"n_dims 0", c_ndims0, "has 0 dimensions"},
    {"n_dims 5", c_ndims5, "has 5 dimensions"},
    {"ne 0", c_ne0, "invalid size 0 in dimension 1"},
    {"ne negative", c_ne_negative, "invalid size -1"},
    {"ne product overflow", c_ne_overflow, "element count overflows"},
    {"byte size overflow", c_bytes_overflow, "byte size overflows"},
    {"unknown value type", c_unknown_value_type, "unknown value type 13"},
    {"unknown array element type", c_unknown_elem_type, "unknown element type 77"},
    {"array huge count", c_array_huge_count, "claims 4611686018427387904 u32 elements"},
    {"string array huge count", c_strarray_huge_count, "claims 151936 string elements"},
    {"unknown tensor type", c_unknown_tensor_type,
     "tensor 'blk.0.weird.weight' has unknown or unsupported ggml type id 99"},
    {"internal type id", c_internal_type,
     "tensor 'blk.0.ffn_up_exps.weight' has unknown or unsupported ggml type id 48"},
    {"misaligned offset", c_misaligned, "offset 4 is not a multiple of the alignment 32"},
    {"offset past EOF", c_offset_past_eof, "extends past the end"},
    {"offset wraps u64", c_offset_wraps, "extends past the end"},
    {"overlapping tensors", c_overlap, "'a' and 'b' overlap"},
    {"duplicate key", c_dup_key, "duplicate key 'general.x'"},
    {"duplicate tensor name", c_dup_tensor, "duplicate tensor name 'blk.0.attn_q.weight'"},
    {"alignment 48", c_align_not_pow2, "general.alignment is 48, not a power of two"},
    {"alignment 0", c_align_zero, "general.alignment is 0, not a power of two"},
    {"alignment wrong type", c_align_wrong_type, "general.alignment has type u64, expected u32"},
    {"ne[0] not block multiple", c_not_block_multiple, "ne[0] = 33, not a multiple of the block size 32"},
    {"nested array depth bomb", c_depth_bomb, "nested deeper than 8 levels"},
    {"empty key", c_empty_key, "is empty"},
    {"empty tensor name", c_empty_tensor_name, "invalid name"},
    {"200-byte tensor name", c_long_tensor_name, "invalid name"},
    {"newline in tensor name", c_name_with_newline, "'evil?name'"},
    {"nested bad element type", c_nested_bad_elem, "unknown element type 200"},
    {"tensor count vs remaining", c_tensor_count_after_kvs, "3 tensors, more than the file can hold"},
};

static void test_corrupt_table(void) {
    int n = (int)(sizeof corrupt / sizeof corrupt[0]);
    CHECK(n >= 20, "table has %d cases", n);
    for (int i = 0; i < n; i++) {
        bytes b = {0};
        corrupt[i].build(&b);
        /* exact-size heap copy so ASan catches any read past the end */
        uint8_t *buf = malloc(b.n ? b.n : 1);
        if (b.n) memcpy(buf, b.p, b.n);
        rl_clearerr();
        gguf_file *f = gguf_open_mem(buf, b.n, "corrupt.gguf");
        const char *e = rl_lasterr();
        CHECK(f == NULL, "case '%s' was accepted", corrupt[i].name);
        CHECK(strstr(e, corrupt[i].expect) != NULL, "case '%s': error '%s' lacks '%s'", corrupt[i].name, e,
              corrupt[i].expect);
        CHECK(strncmp(e, "corrupt.gguf: ", 14) == 0, "case '%s': error '%s' does not name the file",
              corrupt[i].name, e);
        CHECK(strchr(e, '\n') == NULL, "case '%s': error is not one line", corrupt[i].name);
        gguf_close(f);
        /* the same bytes through gguf_open (mmap path) */
        const char *path = tmp("corrupt.gguf");
        FILE *fp = fopen(path, "wb");
        if (b.n) fwrite(b.p, 1, b.n, fp);
        fclose(fp);
        f = gguf_open(path);
        CHECK(f == NULL, "case '%s' accepted by gguf_open", corrupt[i].name);
        CHECK(strstr(rl_lasterr(), corrupt[i].expect) || (b.n == 0 && strstr(rl_lasterr(), "empty")),
              "case '%s' via file: '%s'", corrupt[i].name, rl_lasterr());
        gguf_close(f);
        free(buf);
        free(b.p);
    }
    /* a version-2 file (same layout, 64-bit counts) is accepted */
    {
        bytes v2 = {0};
        hdr(&v2, 2, 1, 1);
        kv_str(&v2, "general.architecture", "qwen3next");
        one_tensor(&v2);
        gguf_file *f = gguf_open_mem(v2.p, v2.n, "v2.gguf");
        CHECK(f && f->version == 2 && f->n_tensors == 1 && gguf_find_tensor(f, "t"), "v2: %s", rl_lasterr());
        gguf_close(f);
        free(v2.p);
    }
    /* every prefix of a valid file must fail cleanly (truncation anywhere) */
    bytes b = {0};
    hdr(&b, 3, 2, 3);
    kv_str(&b, "general.architecture", "qwen3next");
    str(&b, "arr"), u32(&b, GGUF_TYPE_ARRAY), u32(&b, GGUF_TYPE_STRING), u64(&b, 2), str(&b, "x"),
        str(&b, "yy");
    kv_u32(&b, "general.alignment", 64);
    uint64_t ne[2] = {32, 2};
    ti(&b, "w", 2, ne, QT_Q8_0, 0);
    ti(&b, "n", 1, ne, QT_F32, 128);
    pad_to(&b, 64);
    zeros(&b, 128 + 128);
    gguf_file *ok = gguf_open_mem(b.p, b.n, "full.gguf");
    CHECK(ok != NULL, "valid file rejected: %s", rl_lasterr());
    gguf_close(ok);
    int bad = 0;
    for (size_t len = 0; len < b.n; len++) {
        uint8_t *buf = malloc(len ? len : 1);
        memcpy(buf, b.p, len);
        gguf_file *f = gguf_open_mem(buf, len, "prefix.gguf");
        if (f || strchr(rl_lasterr(), '\n') || !rl_lasterr()[0]) bad++;
        gguf_close(f);
        free(buf);
    }
    CHECK(bad == 0, "%d truncated prefixes were accepted or gave bad errors", bad);
    free(b.p);
}

/* ---- writer -> reader round trips -------------------------------------------------------- */

typedef struct {
    int calls;
    bool bad_chunk; /* a chunk broke the whole-rows contract or was out of order */
    uint64_t next_off[16];
    uint64_t row_bytes[16];
    int fail_tensor; /* -1: never fail */
} fill_ctx;

static uint8_t pattern(int ti, uint64_t i) { return (uint8_t)(ti * 31 + i * 7 + (i >> 9)); }

static int fill_cb(void *ctx, int ti, void *dst, uint64_t off, uint64_t n) {
    fill_ctx *c = ctx;
    c->calls++;
    if (ti == c->fail_tensor) {
        rl_seterr("synthetic failure");
        return -1;
    }
    if (off != c->next_off[ti] || off % c->row_bytes[ti] != 0 || n % c->row_bytes[ti] != 0)
        c->bad_chunk = true;
    c->next_off[ti] = off + n;
    uint8_t *d = dst;
    for (uint64_t i = 0; i < n; i++) d[i] = pattern(ti, off + i);
    return 0;
}

static bool check_pattern(const gguf_tensor *t, int ti) {
    const uint8_t *d = t->data;
    for (uint64_t i = 0; i < t->nbytes; i++)
        if (d[i] != pattern(ti, i)) return false;
    return true;
}

/* nested array wire bytes: [[1u32,2u32], ["x"], [] (u8), [[5u8]]] */
static bytes nested_bytes(void) {
    bytes b = {0};
    u32(&b, GGUF_TYPE_UINT32), u64(&b, 2), u32(&b, 1), u32(&b, 2);
    u32(&b, GGUF_TYPE_STRING), u64(&b, 1), str(&b, "x");
    u32(&b, GGUF_TYPE_UINT8), u64(&b, 0);
    u32(&b, GGUF_TYPE_ARRAY), u64(&b, 1), u32(&b, GGUF_TYPE_UINT8), u64(&b, 1), u8(&b, 5);
    return b;
}

static void test_roundtrip(uint32_t al) {
    char name[64];
    snprintf(name, sizeof name, "rt-%u.gguf", al);
    const char *path = tmp(name);
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_alignment(w, al);
    gguf_value v;
    v = (gguf_value){.type = GGUF_TYPE_UINT8, .v.u64 = 200};
    CHECK(gguf_writer_set_val(w, "t.u8", &v) == 0, "%s", rl_lasterr());
    v = (gguf_value){.type = GGUF_TYPE_INT8, .v.i64 = -128};
    gguf_writer_set_val(w, "t.i8", &v);
    v = (gguf_value){.type = GGUF_TYPE_UINT16, .v.u64 = 65535};
    gguf_writer_set_val(w, "t.u16", &v);
    v = (gguf_value){.type = GGUF_TYPE_INT16, .v.i64 = -32768};
    gguf_writer_set_val(w, "t.i16", &v);
    gguf_writer_set_u32(w, "t.u32", 4000000000u);
    gguf_writer_set_i32(w, "t.i32", INT32_MIN);
    gguf_writer_set_u64(w, "t.u64", UINT64_MAX);
    v = (gguf_value){.type = GGUF_TYPE_INT64, .v.i64 = INT64_MIN};
    gguf_writer_set_val(w, "t.i64", &v);
    gguf_writer_set_f32(w, "t.f32", 1.5f);
    v = (gguf_value){.type = GGUF_TYPE_FLOAT64, .v.f64 = 1e300};
    gguf_writer_set_val(w, "t.f64", &v);
    gguf_writer_set_bool(w, "t.true", true);
    gguf_writer_set_bool(w, "t.false", false);
    gguf_writer_set_str(w, "t.str", "h\xc3\xa9llo");
    gguf_writer_set_str(w, "t.empty", "");
    gguf_writer_set_u32(w, "t.replaced", 1);
    gguf_writer_set_u32(w, "t.replaced", 2);
    int32_t ai[3] = {1, -2, 3};
    float af[2] = {0.25f, -8.0f};
    uint8_t ab[3] = {1, 0, 1};
    CHECK(gguf_writer_set_arr(w, "a.i32", GGUF_TYPE_INT32, ai, 3) == 0, "%s", rl_lasterr());
    gguf_writer_set_arr(w, "a.f32", GGUF_TYPE_FLOAT32, af, 2);
    gguf_writer_set_arr(w, "a.bool", GGUF_TYPE_BOOL, ab, 3);
    gguf_writer_set_arr(w, "a.empty", GGUF_TYPE_UINT64, NULL, 0);
    const char *strs[3] = {"a", "", "ccc"};
    gguf_writer_set_arr_str(w, "a.str", strs, 3);
    gguf_writer_set_arr_str(w, "a.str_empty", NULL, 0);
    bytes nb = nested_bytes();
    v = (gguf_value){.type = GGUF_TYPE_ARRAY, .v.arr = {.elem = GGUF_TYPE_ARRAY, .n = 4, .data = nb.p}};
    CHECK(gguf_writer_set_val(w, "a.nested", &v) == 0, "%s", rl_lasterr());
    CHECK(gguf_writer_set_arr(w, "a.bad", GGUF_TYPE_STRING, strs, 3) != 0, "string via set_arr accepted");
    v = (gguf_value){.type = GGUF_TYPE_UINT8, .v.u64 = 300};
    CHECK(gguf_writer_set_val(w, "t.bad", &v) != 0 && strstr(rl_lasterr(), "out of range"), "u8 300");

    float f32d[24];
    for (int i = 0; i < 24; i++) f32d[i] = (float)i - 3.5f;
    uint8_t q8[2 * 2 * 34];
    for (size_t i = 0; i < sizeof q8; i++) q8[i] = (uint8_t)(i * 13);
    int64_t ne_a[2] = {8, 3}, ne_b[1] = {16}, ne_c[2] = {64, 2}, ne_d[3] = {256, 2, 3};
    CHECK(gguf_writer_add_tensor(w, "a.f32", QT_F32, 2, ne_a, f32d) == 0, "%s", rl_lasterr());
    CHECK(gguf_writer_add_tensor(w, "b.f16", QT_F16, 1, ne_b, NULL) == 1, "%s", rl_lasterr());
    CHECK(gguf_writer_add_tensor(w, "c.q8", QT_Q8_0, 2, ne_c, q8) == 2, "%s", rl_lasterr());
    CHECK(gguf_writer_add_tensor(w, "d.q4k", QT_Q4_K, 3, ne_d, NULL) == 3, "%s", rl_lasterr());
    CHECK(gguf_writer_add_tensor(w, "c.q8", QT_F32, 1, ne_b, f32d) < 0, "duplicate tensor accepted");
    CHECK(gguf_writer_add_tensor(w, "bad", 99, 1, ne_b, f32d) < 0, "type 99 accepted");
    int64_t ne_bad[1] = {33};
    CHECK(gguf_writer_add_tensor(w, "bad", QT_Q8_0, 1, ne_bad, q8) < 0 && strstr(rl_lasterr(), "multiple"),
          "ne0 33 Q8_0 accepted");
    fill_ctx fc = {.fail_tensor = -1};
    fc.row_bytes[1] = 32, fc.row_bytes[3] = 144;
    gguf_writer_set_fill(w, fill_cb, &fc);
    CHECK(gguf_writer_write(w, path) == 0, "write: %s", rl_lasterr());
    CHECK(!fc.bad_chunk && fc.calls >= 2, "fill chunks: calls %d bad %d", fc.calls, fc.bad_chunk);
    gguf_writer_free(w);
    free(nb.p);

    gguf_file *f = gguf_open(path);
    CHECK(f != NULL, "open: %s", rl_lasterr());
    if (!f) return;
    CHECK(f->version == 3 && f->alignment == al, "version %u alignment %u", f->version, f->alignment);
    uint32_t u;
    uint64_t u6;
    int64_t i6;
    float fl;
    bool b;
    CHECK(gguf_get_u32(f, "general.alignment", &u) == (al != 32) && (al == 32 || u == al), "alignment key");
    CHECK(gguf_get_u32(f, "t.u8", &u) && u == 200, "u8");
    CHECK(gguf_get_i64(f, "t.i8", &i6) && i6 == -128, "i8");
    CHECK(!gguf_get_u64(f, "t.i8", &u6), "negative read as unsigned");
    CHECK(gguf_get_u32(f, "t.u16", &u) && u == 65535, "u16");
    CHECK(gguf_get_i64(f, "t.i16", &i6) && i6 == -32768, "i16");
    CHECK(gguf_get_u32(f, "t.u32", &u) && u == 4000000000u, "u32");
    CHECK(gguf_get_i64(f, "t.i32", &i6) && i6 == INT32_MIN, "i32");
    CHECK(gguf_get_u64(f, "t.u64", &u6) && u6 == UINT64_MAX, "u64");
    CHECK(!gguf_get_u32(f, "t.u64", &u) && !gguf_get_i64(f, "t.u64", &i6), "u64 max does not fit");
    CHECK(gguf_get_i64(f, "t.i64", &i6) && i6 == INT64_MIN, "i64");
    CHECK(gguf_get_f32(f, "t.f32", &fl) && fl == 1.5f, "f32");
    CHECK(gguf_find_kv(f, "t.f64")->val.v.f64 == 1e300, "f64");
    CHECK(gguf_get_f32(f, "t.f64", &fl) && isinf(fl), "f64 1e300 as f32 saturates");
    CHECK(gguf_get_bool(f, "t.true", &b) && b, "bool true");
    CHECK(gguf_get_bool(f, "t.false", &b) && !b, "bool false");
    CHECK(!gguf_get_u32(f, "t.true", &u), "bool is not an integer");
    char *s = gguf_get_str_dup(f, "t.str");
    CHECK(s && strcmp(s, "h\xc3\xa9llo") == 0, "str");
    free(s);
    s = gguf_get_str_dup(f, "t.empty");
    CHECK(s && s[0] == 0, "empty str");
    free(s);
    CHECK(gguf_get_u32(f, "t.replaced", &u) && u == 2, "replaced value");
    CHECK(!gguf_find_kv(f, "t.bad") && !gguf_find_kv(f, "a.bad") && !gguf_find_kv(f, "missing"),
          "absent keys");
    CHECK(f->n_kv == 22 + (al != 32), "n_kv %llu", (unsigned long long)f->n_kv);
    CHECK(gguf_get_arr(f, "t.u8") == NULL, "scalar is not an array");

    const gguf_value *a = gguf_get_arr(f, "a.i32");
    CHECK(a && a->v.arr.elem == GGUF_TYPE_INT32 && a->v.arr.n == 3 && gguf_arr_i64(a, 1) == -2 &&
              gguf_arr_f64(a, 2) == 3.0 && gguf_arr_nbytes(a) == 12,
          "a.i32");
    a = gguf_get_arr(f, "a.f32");
    CHECK(a && gguf_arr_f64(a, 0) == 0.25 && gguf_arr_i64(a, 1) == -8, "a.f32");
    a = gguf_get_arr(f, "a.bool");
    CHECK(a && a->v.arr.elem == GGUF_TYPE_BOOL && gguf_arr_i64(a, 0) == 1 && gguf_arr_i64(a, 1) == 0,
          "a.bool");
    a = gguf_get_arr(f, "a.empty");
    CHECK(a && a->v.arr.n == 0 && a->v.arr.elem == GGUF_TYPE_UINT64 && gguf_arr_nbytes(a) == 0, "a.empty");
    a = gguf_get_arr(f, "a.str");
    CHECK(a && a->v.arr.n == 3 && a->v.arr.str_off && str_eq(gguf_arr_str(a, 0), "a") &&
              str_eq(gguf_arr_str(a, 1), "") && str_eq(gguf_arr_str(a, 2), "ccc") && gguf_arr_nbytes(a) == 28,
          "a.str");
    a = gguf_get_arr(f, "a.str_empty");
    CHECK(a && a->v.arr.n == 0 && a->v.arr.elem == GGUF_TYPE_STRING, "a.str_empty");
    a = gguf_get_arr(f, "a.nested");
    CHECK(a && a->v.arr.elem == GGUF_TYPE_ARRAY && a->v.arr.n == 4, "a.nested");
    if (a && a->v.arr.n == 4) {
        gguf_value e, e2;
        gguf_arr_get(a, 0, &e);
        CHECK(e.type == GGUF_TYPE_ARRAY && e.v.arr.elem == GGUF_TYPE_UINT32 && e.v.arr.n == 2 &&
                  gguf_arr_i64(&e, 1) == 2,
              "nested[0]");
        gguf_arr_get(a, 1, &e);
        CHECK(e.v.arr.elem == GGUF_TYPE_STRING && e.v.arr.n == 1 && str_eq(gguf_arr_str(&e, 0), "x"),
              "nested[1]");
        gguf_arr_get(&e, 0, &e2);
        CHECK(e2.type == GGUF_TYPE_STRING && str_eq(e2.v.str, "x"), "nested[1][0] via arr_get");
        gguf_arr_get(a, 2, &e);
        CHECK(e.v.arr.elem == GGUF_TYPE_UINT8 && e.v.arr.n == 0, "nested[2]");
        gguf_arr_get(a, 3, &e);
        gguf_arr_get(&e, 0, &e2);
        CHECK(e2.type == GGUF_TYPE_ARRAY && e2.v.arr.n == 1 && gguf_arr_i64(&e2, 0) == 5, "nested[3][0][0]");
        bytes ref = nested_bytes();
        CHECK(gguf_arr_nbytes(a) == ref.n && memcmp(a->v.arr.data, ref.p, ref.n) == 0, "nested bytes");
        free(ref.p);
    }

    CHECK(f->n_tensors == 4 && f->n_parts == 1 && f->parts[0].fd >= 0, "tensors %llu",
          (unsigned long long)f->n_tensors);
    CHECK(f->parts[0].data_start % al == 0, "data_start %llu", (unsigned long long)f->parts[0].data_start);
    const gguf_tensor *t = gguf_find_tensor(f, "a.f32");
    CHECK(t && t->n_dims == 2 && t->ne[0] == 8 && t->ne[1] == 3 && t->ne[2] == 1 && t->nbytes == 96 &&
              memcmp(t->data, f32d, 96) == 0,
          "a.f32 tensor");
    t = gguf_find_tensor(f, "b.f16");
    CHECK(t && t->type == QT_F16 && t->nbytes == 32 && check_pattern(t, 1), "b.f16 tensor");
    t = gguf_find_tensor(f, "c.q8");
    CHECK(t && t->type == QT_Q8_0 && t->nbytes == sizeof q8 && memcmp(t->data, q8, sizeof q8) == 0, "c.q8");
    t = gguf_find_tensor(f, "d.q4k");
    CHECK(t && t->n_dims == 3 && t->ne[2] == 3 && t->nbytes == 144 * 6 && check_pattern(t, 3), "d.q4k");
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        t = &f->tensors[i];
        CHECK(t->offset % al == 0 && t->file_off == f->parts[0].data_start + t->offset &&
                  (const uint8_t *)t->data == f->parts[0].map + t->file_off,
              "tensor %s placement", t->name);
        CHECK(gguf_tensor_advise(f, t, MADV_WILLNEED) == 0, "advise: %s", rl_lasterr());
    }
    CHECK(gguf_find_tensor(f, "nope") == NULL, "absent tensor");
    if (al == 32) maybe_seed(path, "seed-all-types.gguf");
    if (al == 1) maybe_seed(path, "seed-align1.gguf");

    /* copy_kv: every value, raw bytes identical after a second round trip */
    gguf_writer *w2 = gguf_writer_new();
    gguf_writer_set_alignment(w2, al);
    for (uint64_t i = 0; i < f->n_kv; i++)
        CHECK(gguf_writer_copy_kv(w2, &f->kv[i]) == 0, "copy: %s", rl_lasterr());
    const char *path2 = tmp("rt-copy.gguf");
    CHECK(gguf_writer_write(w2, path2) == 0, "copy write: %s", rl_lasterr());
    gguf_writer_free(w2);
    gguf_file *g = gguf_open(path2);
    CHECK(g && g->n_kv == f->n_kv && g->n_tensors == 0, "copy reopen: %s", rl_lasterr());
    for (uint64_t i = 0; g && i < f->n_kv; i++) {
        const gguf_kv *x = &f->kv[i], *y = &g->kv[i];
        bool same =
            x->key.n == y->key.n && !memcmp(x->key.p, y->key.p, x->key.n) && x->val.type == y->val.type;
        if (same && x->val.type == GGUF_TYPE_STRING)
            same =
                x->val.v.str.n == y->val.v.str.n && !memcmp(x->val.v.str.p, y->val.v.str.p, x->val.v.str.n);
        else if (same && x->val.type == GGUF_TYPE_ARRAY)
            same = x->val.v.arr.elem == y->val.v.arr.elem && x->val.v.arr.n == y->val.v.arr.n &&
                   gguf_arr_nbytes(&x->val) == gguf_arr_nbytes(&y->val) &&
                   !memcmp(x->val.v.arr.data, y->val.v.arr.data, gguf_arr_nbytes(&x->val));
        else if (same) same = x->val.v.u64 == y->val.v.u64;
        CHECK(same, "copied kv %.*s differs", (int)x->key.n, x->key.p);
    }
    gguf_close(g);
    gguf_close(f);
}

/* Tensors larger than the 16 MiB stream buffers: pointer and fill paths cross buffer edges. */
static void test_big_tensors(void) {
    const char *path = tmp("big.gguf");
    gguf_writer *w = gguf_writer_new();
    int64_t ne_f[2] = {4096, 5000}; /* Q8_0: 4352-byte rows, 21.8 MB */
    int64_t ne_p[1] = {5 << 20};    /* F32: 20 MiB from a pointer */
    uint8_t *src = malloc((size_t)ne_p[0] * 4);
    for (int64_t i = 0; i < ne_p[0] * 4; i++) src[i] = pattern(1, (uint64_t)i);
    gguf_writer_add_tensor(w, "fill", QT_Q8_0, 2, ne_f, NULL);
    gguf_writer_add_tensor(w, "ptr", QT_F32, 1, ne_p, src);
    fill_ctx fc = {.fail_tensor = -1};
    fc.row_bytes[0] = 4352;
    gguf_writer_set_fill(w, fill_cb, &fc);
    double t0 = rl_now();
    CHECK(gguf_writer_write(w, path) == 0, "big write: %s", rl_lasterr());
    double dt = rl_now() - t0;
    CHECK(!fc.bad_chunk && fc.calls >= 2, "big fill chunks: calls %d bad %d", fc.calls, fc.bad_chunk);
    gguf_writer_free(w);
    gguf_file *f = gguf_open(path);
    CHECK(f != NULL, "big open: %s", rl_lasterr());
    if (f) {
        CHECK(check_pattern(gguf_find_tensor(f, "fill"), 0), "fill content");
        CHECK(check_pattern(gguf_find_tensor(f, "ptr"), 1), "pointer content");
        printf("big write: %.1f MB in %.3f s (%.0f MB/s, page cache)\n", f->parts[0].size / 1e6, dt,
               f->parts[0].size / 1e6 / dt);
    }
    gguf_close(f);
    free(src);
    unlink(path);
}

/* ---- split models -------------------------------------------------------------------------- */

static float split_data[5][16];

static int write_part(const char *name, int no, int count, int64_t n_total, const char *const *tn, int nt,
                      const int *which) {
    gguf_writer *w = gguf_writer_new();
    gguf_value v = {.type = GGUF_TYPE_UINT16, .v.u64 = (uint64_t)no};
    gguf_writer_set_val(w, "split.no", &v);
    v.v.u64 = (uint64_t)count;
    gguf_writer_set_val(w, "split.count", &v);
    if (no == 0) {
        gguf_writer_set_str(w, "general.architecture", "qwen3next");
        if (n_total >= 0) gguf_writer_set_i32(w, "split.tensors.count", (int32_t)n_total);
    }
    int64_t ne[1] = {16};
    for (int i = 0; i < nt; i++) gguf_writer_add_tensor(w, tn[i], QT_F32, 1, ne, split_data[which[i]]);
    int r = gguf_writer_write(w, tmp(name));
    gguf_writer_free(w);
    return r;
}

static void test_split(void) {
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 16; j++) split_data[i][j] = (float)(i * 100 + j);
    const char *n1[2] = {"a", "b"}, *n2[1] = {"c"}, *n3[2] = {"d", "e"};
    int w1[2] = {0, 1}, w2[1] = {2}, w3[2] = {3, 4};
    CHECK(write_part("m-00001-of-00003.gguf", 0, 3, 5, n1, 2, w1) == 0, "%s", rl_lasterr());
    CHECK(write_part("m-00002-of-00003.gguf", 1, 3, -1, n2, 1, w2) == 0, "%s", rl_lasterr());
    CHECK(write_part("m-00003-of-00003.gguf", 2, 3, -1, n3, 2, w3) == 0, "%s", rl_lasterr());
    gguf_file *f = gguf_open(tmp("m-00001-of-00003.gguf"));
    CHECK(f != NULL, "split open: %s", rl_lasterr());
    if (f) {
        CHECK(f->n_parts == 3 && f->n_tensors == 5, "parts %d tensors %llu", f->n_parts,
              (unsigned long long)f->n_tensors);
        const char *names[5] = {"a", "b", "c", "d", "e"};
        int parts[5] = {0, 0, 1, 2, 2};
        for (int i = 0; i < 5; i++) {
            const gguf_tensor *t = gguf_find_tensor(f, names[i]);
            CHECK(t && t->part == parts[i] && memcmp(t->data, split_data[i], 64) == 0, "split tensor %s",
                  names[i]);
            if (!t) continue;
            float buf[16];
            ssize_t r = pread(f->parts[t->part].fd, buf, 64, (off_t)t->file_off);
            CHECK(r == 64 && memcmp(buf, split_data[i], 64) == 0, "pread of %s", names[i]);
        }
        char *arch = gguf_get_str_dup(f, "general.architecture");
        CHECK(arch && !strcmp(arch, "qwen3next"), "split metadata from part 1");
        free(arch);
        gguf_close(f);
    }
    maybe_seed(tmp("m-00001-of-00003.gguf"), "seed-split-part1.gguf");
    /* entering through part 2 */
    f = gguf_open(tmp("m-00002-of-00003.gguf"));
    CHECK(!f && strstr(rl_lasterr(), "this is part 2 of a 3-part split model") &&
              strstr(rl_lasterr(), "m-00001-of-00003.gguf"),
          "part 2: %s", rl_lasterr());
    /* missing part 3 */
    rename(tmp("m-00003-of-00003.gguf"), tmp("m3.away"));
    f = gguf_open(tmp("m-00001-of-00003.gguf"));
    CHECK(!f && strstr(rl_lasterr(), "split part 3 of 3 is missing") &&
              strstr(rl_lasterr(), "m-00003-of-00003.gguf"),
          "missing part: %s", rl_lasterr());
    rename(tmp("m3.away"), tmp("m-00003-of-00003.gguf"));
    /* split.tensors.count disagrees */
    write_part("m-00001-of-00003.gguf", 0, 3, 6, n1, 2, w1);
    f = gguf_open(tmp("m-00001-of-00003.gguf"));
    CHECK(!f && strstr(rl_lasterr(), "split.tensors.count is 6 but the 3 parts hold 5"), "count: %s",
          rl_lasterr());
    /* duplicate tensor across parts */
    write_part("m-00001-of-00003.gguf", 0, 3, -1, n1, 2, w1);
    const char *dup[1] = {"a"};
    write_part("m-00002-of-00003.gguf", 1, 3, -1, dup, 1, w2);
    f = gguf_open(tmp("m-00001-of-00003.gguf"));
    CHECK(!f && strstr(rl_lasterr(), "duplicate tensor name 'a' across split parts"), "dup: %s",
          rl_lasterr());
    /* a part that claims the wrong number */
    write_part("m-00002-of-00003.gguf", 2, 3, -1, n2, 1, w2);
    f = gguf_open(tmp("m-00001-of-00003.gguf"));
    CHECK(!f && strstr(rl_lasterr(), "expected part 2 of 3"), "wrong no: %s", rl_lasterr());
    /* split.count > 1 but not named like a split */
    write_part("lonely.gguf", 0, 2, -1, n1, 2, w1);
    f = gguf_open(tmp("lonely.gguf"));
    CHECK(!f && strstr(rl_lasterr(), "does not end in -00001-of-00002.gguf"), "naming: %s", rl_lasterr());
}

/* ---- writer failures ------------------------------------------------------------------------ */

static void test_writer_errors(void) {
    int64_t ne[1] = {1 << 20};
    float *d = calloc((size_t)ne[0], 4);
    gguf_writer *w = gguf_writer_new();
    gguf_writer_add_tensor(w, "x", QT_F32, 1, ne, d);
    if (access("/dev/full", W_OK) == 0) {
        CHECK(gguf_writer_write(w, "/dev/full") == -1 && strstr(rl_lasterr(), "disk full"), "/dev/full: %s",
              rl_lasterr());
        CHECK(access("/dev/full", F_OK) == 0, "/dev/full was removed");
    }
    CHECK(gguf_writer_write(w, tmp("no/such/dir.gguf")) == -1 && strstr(rl_lasterr(), "cannot create"), "%s",
          rl_lasterr());
    gguf_writer_set_alignment(w, 48);
    CHECK(gguf_writer_write(w, tmp("a48.gguf")) == -1 && strstr(rl_lasterr(), "not a power of two"), "%s",
          rl_lasterr());
    gguf_writer_free(w);

    w = gguf_writer_new();
    gguf_writer_add_tensor(w, "ok", QT_F32, 1, ne, d);
    gguf_writer_add_tensor(w, "gen", QT_F32, 1, ne, NULL);
    CHECK(gguf_writer_write(w, tmp("nofill.gguf")) == -1 && strstr(rl_lasterr(), "no fill callback"), "%s",
          rl_lasterr());
    fill_ctx fc = {.fail_tensor = 1};
    gguf_writer_set_fill(w, fill_cb, &fc);
    const char *path = tmp("failfill.gguf");
    CHECK(gguf_writer_write(w, path) == -1 &&
              strstr(rl_lasterr(), "generating tensor 'gen' failed at byte 0: synthetic failure"),
          "%s", rl_lasterr());
    CHECK(access(path, F_OK) != 0, "partial file left behind");
    gguf_writer_free(w);
    free(d);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/rl_test_gguf_XXXXXX");
    if (!mkdtemp(tmpdir)) return perror("mkdtemp"), 1;
    test_corrupt_table();
    uint32_t aligns[5] = {1, 8, 32, 64, 4096};
    for (int i = 0; i < 5; i++) test_roundtrip(aligns[i]);
    test_big_tensors();
    test_split();
    test_writer_errors();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_done("test_gguf");
}
