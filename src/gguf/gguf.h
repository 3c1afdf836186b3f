/* gguf.h — hardened GGUF v2/v3 reader (mmap, zero-copy) and a streaming writer.
 *
 * The file is treated as hostile: every count, length and offset is checked against the
 * file size with overflow-safe arithmetic before use. On any problem gguf_open returns NULL
 * and rl_lasterr() holds one line: "<path>: <what is wrong>".
 *
 * Layout reminder (all little endian): magic "GGUF", u32 version (2 or 3), u64 n_tensors,
 * u64 n_kv, n_kv x {string key, u32 type, value}, n_tensors x {string name, u32 n_dims,
 * n_dims x u64 ne, u32 ggml_type, u64 offset}, zero padding to `alignment`, tensor data.
 * A string is u64 length + bytes (no terminator). Arrays are u32 elem type + u64 count + elems,
 * nested arrays allowed. `general.alignment` (u32, power of two) defaults to 32.
 *
 * Split models ("name-00001-of-00003.gguf"): opening part 1 opens every part (same directory,
 * same naming pattern) and merges their tensors; a missing part is a clear error.
 */
#ifndef RL_GGUF_H
#define RL_GGUF_H

#include <stdint.h>
#include <stdio.h>
#include "base/common.h"

typedef enum {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT
} gguf_type;

const char *gguf_type_name(gguf_type t);

/* A string inside the mapping: NOT NUL terminated. */
typedef struct {
    const char *p;
    uint64_t n;
} gguf_str;

/* One metadata value. Scalars are decoded; arrays point into the mapping. */
typedef struct gguf_value {
    gguf_type type;
    union {
        uint64_t u64; /* UINT8/16/32/64 and BOOL */
        int64_t i64;  /* INT8/16/32/64 */
        double f64;   /* FLOAT32/64 */
        gguf_str str;
        struct {
            gguf_type elem;      /* element type */
            uint64_t n;          /* element count */
            const uint8_t *data; /* first element in the mapping */
            /* For string / nested-array elements, elements are variable length: use
             * gguf_arr_str(), or gguf_arr_get() which walks them (O(i)); the reader keeps
             * an offsets table for string arrays so gguf_arr_str is O(1). */
            const uint64_t *str_off; /* string arrays: byte offset of element i from data */
        } arr;
    } v;
} gguf_value;

typedef struct {
    gguf_str key;
    gguf_value val;
} gguf_kv;

typedef struct {
    char name[128];    /* NUL-terminated copy */
    uint32_t n_dims;   /* 1..4 */
    int64_t ne[4];     /* elements per dim, ne[0] fastest; unused dims are 1 */
    uint32_t type;     /* ggml type id (see quant.h) */
    uint64_t offset;   /* relative to the data section of its part */
    uint64_t nbytes;   /* exact byte size */
    uint64_t file_off; /* absolute offset in its part's file (for pread) */
    int part;          /* which split part holds it (0 for single files) */
    const void *data;  /* pointer into the mapping */
} gguf_tensor;

typedef struct gguf_file {
    char *path;
    uint32_t version;
    uint32_t alignment;
    uint64_t n_kv;
    gguf_kv *kv;
    uint64_t n_tensors;
    gguf_tensor *tensors;
    int n_parts;
    struct gguf_part {
        char *path;
        int fd; /* kept open for pread (expert cache) */
        const uint8_t *map;
        uint64_t size;
        uint64_t data_start;
    } * parts;
    void *index; /* private: hash index of keys and tensor names */
} gguf_file;

/* Open and validate. NULL on failure (rl_lasterr says why). */
gguf_file *gguf_open(const char *path);
/* Parse from a memory buffer (no split support); used by the fuzzer and tests.
 * The buffer must outlive the returned object. `name` is used in error messages. */
gguf_file *gguf_open_mem(const void *buf, uint64_t size, const char *name);
void gguf_close(gguf_file *f);

/* Lookups: find returns NULL if absent. */
const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);

/* Typed getters: return true and set *out if the key exists with a compatible scalar type
 * (any integer type for the int getters if the value fits; F32/F64 for the float getter). */
bool gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out);
bool gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out);
bool gguf_get_i64(const gguf_file *f, const char *key, int64_t *out);
bool gguf_get_f32(const gguf_file *f, const char *key, float *out);
bool gguf_get_bool(const gguf_file *f, const char *key, bool *out);
/* Returns a malloc'd NUL-terminated copy or NULL. */
char *gguf_get_str_dup(const gguf_file *f, const char *key);
/* Array access: returns the array value or NULL if the key is absent / not an array. */
const gguf_value *gguf_get_arr(const gguf_file *f, const char *key);
/* Element i of a string array (no bounds check beyond RL_ASSERT). */
gguf_str gguf_arr_str(const gguf_value *arr, uint64_t i);
/* Element i of a numeric array as int64 / double (RL_ASSERT: numeric or bool elements).
 * Floats convert to int64 truncating toward zero, saturating; NaN gives 0. */
int64_t gguf_arr_i64(const gguf_value *arr, uint64_t i);
double gguf_arr_f64(const gguf_value *arr, uint64_t i);

/* --- additions (gguf.c, gguf_meta.c) --- */
/* Zero-copy string value: true and *out set if the key exists with type string. */
bool gguf_get_str(const gguf_file *f, const char *key, gguf_str *out);
/* Element i (< n, RL_ASSERT) of any array, decoded into *out: scalars decoded, strings point
 * into the mapping, nested arrays give an array value (str_off NULL: its string elements are
 * found by walking, O(i)). Nesting depth is at most 8 (the reader rejects deeper files). */
void gguf_arr_get(const gguf_value *arr, uint64_t i, gguf_value *out);
/* Wire size in bytes of the array's elements (from arr.data to the end of the last one). */
uint64_t gguf_arr_nbytes(const gguf_value *arr);
/* madvise(advice) the page range of t's data (MADV_WILLNEED before a bulk read, MADV_RANDOM
 * for expert slabs read piecemeal, MADV_DONTNEED after upload to the GPU). 0 ok; -1 with the
 * error set. No-op for gguf_open_mem buffers. */
int gguf_tensor_advise(const gguf_file *f, const gguf_tensor *t, int advice);

/* ---- writer ---------------------------------------------------------------------------
 * Collect metadata and tensor descriptions, then gguf_writer_write streams the file:
 * header, then each tensor's bytes either from a pointer or from a fill callback that is
 * called with consecutive chunks (so multi-GB files never sit in memory). Writes v3.
 * Errors (disk full, ...) return -1 with rl_lasterr set, and the partial file is removed. */
typedef struct gguf_writer gguf_writer;
/* fill(ctx, tensor_index, dst, byte_offset_in_tensor, nbytes) -> 0 ok, -1 error */
typedef int (*gguf_fill_fn)(void *ctx, int tensor_index, void *dst, uint64_t off, uint64_t n);

gguf_writer *gguf_writer_new(void);
void gguf_writer_free(gguf_writer *w);
void gguf_writer_set_alignment(gguf_writer *w, uint32_t alignment);
int gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v);
int gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v);
int gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v);
int gguf_writer_set_f32(gguf_writer *w, const char *key, float v);
int gguf_writer_set_bool(gguf_writer *w, const char *key, bool v);
int gguf_writer_set_str(gguf_writer *w, const char *key, const char *v);
/* Numeric array: `data` has n elements of `elem` type (native little-endian layout). */
int gguf_writer_set_arr(gguf_writer *w, const char *key, gguf_type elem, const void *data, uint64_t n);
int gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *strs, uint64_t n);
/* Copy key/value pair from an opened file (any type, including arrays). */
int gguf_writer_copy_kv(gguf_writer *w, const gguf_kv *kv);
/* Any value (addition): scalars from the decoded union field matching v->type (u64 for the
 * unsigned types and bool, i64 for the signed ones, f64 for floats); strings from v.str; arrays
 * from v.arr.data, which must hold n elements in GGUF wire format (for numeric arrays that is
 * the packed little-endian values; string and nested-array elements carry their own length
 * prefixes, see the layout above). This is how nested arrays and u8/i16/i64/f64... are written.
 * Setting a key that already exists replaces its value (all setters). */
int gguf_writer_set_val(gguf_writer *w, const char *key, const gguf_value *v);
/* Tensor with bytes from `data` (must stay valid until write) or, when data is NULL, from
 * `fill`. Returns the tensor index, or -1. */
int gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                           const int64_t *ne, const void *data);
void gguf_writer_set_fill(gguf_writer *w, gguf_fill_fn fill, void *ctx);
int gguf_writer_write(gguf_writer *w, const char *path);

#endif
