/* gguf_meta.c — GGUF metadata access: value types, typed key/value getters and array element
 * readers (API in gguf.h; the parser, split handling and the tensor/key index are in gguf.c).
 *
 * Everything here reads memory the parser in gguf.c has already validated, so array walks need
 * no bounds checks beyond RL_ASSERT. gguf_fixed_size / gguf_decode_scalar are shared with the
 * parser through gguf_int.h.
 */
#include "gguf/gguf.h"

#include <string.h>

#include "gguf/gguf_int.h"

const char *gguf_type_name(gguf_type t) {
    static const char *const names[GGUF_TYPE_COUNT] = {
        "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
    };
    return (unsigned)t < GGUF_TYPE_COUNT ? names[t] : "?";
}

/* Wire size of a fixed-size value type; 0 for string / array / unknown. */
uint64_t gguf_fixed_size(uint32_t t) {
    switch (t) {
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_INT8:
    case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16:
    case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32:
    case GGUF_TYPE_INT32:
    case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64:
    case GGUF_TYPE_INT64:
    case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

/* Decode one fixed-size scalar at p (validated memory) into v. */
void gguf_decode_scalar(gguf_type t, const uint8_t *p, gguf_value *v) {
    v->type = t;
    switch (t) {
    case GGUF_TYPE_UINT8: v->v.u64 = p[0]; break;
    case GGUF_TYPE_BOOL: v->v.u64 = p[0] != 0; break; /* any non-zero byte reads as true */
    case GGUF_TYPE_INT8: v->v.i64 = (int8_t)p[0]; break;
    case GGUF_TYPE_UINT16: v->v.u64 = rl_le16(p); break;
    case GGUF_TYPE_INT16: v->v.i64 = (int16_t)rl_le16(p); break;
    case GGUF_TYPE_UINT32: v->v.u64 = rl_le32(p); break;
    case GGUF_TYPE_INT32: v->v.i64 = (int32_t)rl_le32(p); break;
    case GGUF_TYPE_UINT64: v->v.u64 = rl_le64(p); break;
    case GGUF_TYPE_INT64: v->v.i64 = (int64_t)rl_le64(p); break;
    case GGUF_TYPE_FLOAT32: {
        union {
            uint32_t u;
            float f;
        } c = {.u = rl_le32(p)};
        v->v.f64 = c.f;
        break;
    }
    case GGUF_TYPE_FLOAT64: {
        union {
            uint64_t u;
            double f;
        } c = {.u = rl_le64(p)};
        v->v.f64 = c.f;
        break;
    }
    default: RL_ASSERT(!"gguf_decode_scalar: not a scalar type");
    }
}

/* ---- typed getters -------------------------------------------------------------------- */

static bool is_uint(gguf_type t) {
    return t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_UINT16 || t == GGUF_TYPE_UINT32 || t == GGUF_TYPE_UINT64;
}
static bool is_sint(gguf_type t) {
    return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 || t == GGUF_TYPE_INT64;
}

bool gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return false;
    if (is_uint(kv->val.type)) {
        *out = kv->val.v.u64;
        return true;
    }
    if (is_sint(kv->val.type) && kv->val.v.i64 >= 0) {
        *out = (uint64_t)kv->val.v.i64;
        return true;
    }
    return false;
}

bool gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out) {
    uint64_t v;
    if (!gguf_get_u64(f, key, &v) || v > UINT32_MAX) return false;
    *out = (uint32_t)v;
    return true;
}

bool gguf_get_i64(const gguf_file *f, const char *key, int64_t *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return false;
    if (is_sint(kv->val.type)) {
        *out = kv->val.v.i64;
        return true;
    }
    if (is_uint(kv->val.type) && kv->val.v.u64 <= (uint64_t)INT64_MAX) {
        *out = (int64_t)kv->val.v.u64;
        return true;
    }
    return false;
}

/* double -> float without the undefined behaviour of an out-of-range conversion. */
static float to_f32(double d) {
    if (d > 3.4028234663852886e38) return (float)__builtin_inf();
    if (d < -3.4028234663852886e38) return -(float)__builtin_inf();
    return (float)d;
}

bool gguf_get_f32(const gguf_file *f, const char *key, float *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv || (kv->val.type != GGUF_TYPE_FLOAT32 && kv->val.type != GGUF_TYPE_FLOAT64)) return false;
    *out = to_f32(kv->val.v.f64);
    return true;
}

bool gguf_get_bool(const gguf_file *f, const char *key, bool *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv || kv->val.type != GGUF_TYPE_BOOL) return false;
    *out = kv->val.v.u64 != 0;
    return true;
}

bool gguf_get_str(const gguf_file *f, const char *key, gguf_str *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv || kv->val.type != GGUF_TYPE_STRING) return false;
    *out = kv->val.v.str;
    return true;
}

char *gguf_get_str_dup(const gguf_file *f, const char *key) {
    gguf_str s;
    if (!gguf_get_str(f, key, &s)) return NULL;
    char *p = rl_malloc(s.n + 1, "GGUF string copy");
    if (!p) return NULL;
    memcpy(p, s.p, s.n);
    p[s.n] = 0;
    return p;
}

const gguf_value *gguf_get_arr(const gguf_file *f, const char *key) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    return kv && kv->val.type == GGUF_TYPE_ARRAY ? &kv->val : NULL;
}

/* ---- array elements (data was validated by the parser, so walks need no bounds) -------- */

static const uint8_t *skip_elem(gguf_type t, const uint8_t *p) {
    uint64_t fs = gguf_fixed_size(t);
    if (fs) return p + fs;
    if (t == GGUF_TYPE_STRING) return p + 8 + rl_le64(p);
    RL_ASSERT(t == GGUF_TYPE_ARRAY);
    gguf_type et = (gguf_type)rl_le32(p);
    uint64_t n = rl_le64(p + 4);
    p += 12;
    if (gguf_fixed_size(et)) return p + n * gguf_fixed_size(et);
    for (uint64_t i = 0; i < n; i++) p = skip_elem(et, p);
    return p;
}

static const uint8_t *arr_elem_ptr(const gguf_value *arr, uint64_t i) {
    RL_ASSERT(arr->type == GGUF_TYPE_ARRAY && i < arr->v.arr.n);
    gguf_type et = arr->v.arr.elem;
    uint64_t fs = gguf_fixed_size(et);
    if (fs) return arr->v.arr.data + i * fs;
    if (et == GGUF_TYPE_STRING && arr->v.arr.str_off) return arr->v.arr.data + arr->v.arr.str_off[i];
    const uint8_t *p = arr->v.arr.data;
    for (uint64_t k = 0; k < i; k++) p = skip_elem(et, p);
    return p;
}

uint64_t gguf_arr_nbytes(const gguf_value *arr) {
    RL_ASSERT(arr->type == GGUF_TYPE_ARRAY);
    uint64_t fs = gguf_fixed_size(arr->v.arr.elem);
    if (fs) return arr->v.arr.n * fs;
    const uint8_t *p = arr->v.arr.data;
    for (uint64_t k = 0; k < arr->v.arr.n; k++) p = skip_elem(arr->v.arr.elem, p);
    return (uint64_t)(p - arr->v.arr.data);
}

void gguf_arr_get(const gguf_value *arr, uint64_t i, gguf_value *out) {
    const uint8_t *p = arr_elem_ptr(arr, i);
    gguf_type et = arr->v.arr.elem;
    memset(out, 0, sizeof *out);
    if (gguf_fixed_size(et)) {
        gguf_decode_scalar(et, p, out);
    } else if (et == GGUF_TYPE_STRING) {
        out->type = GGUF_TYPE_STRING;
        out->v.str.n = rl_le64(p);
        out->v.str.p = (const char *)p + 8;
    } else {
        out->type = GGUF_TYPE_ARRAY;
        out->v.arr.elem = (gguf_type)rl_le32(p);
        out->v.arr.n = rl_le64(p + 4);
        out->v.arr.data = p + 12;
        out->v.arr.str_off = NULL; /* nested string arrays are walked (O(i)) */
    }
}

gguf_str gguf_arr_str(const gguf_value *arr, uint64_t i) {
    RL_ASSERT(arr->type == GGUF_TYPE_ARRAY && arr->v.arr.elem == GGUF_TYPE_STRING);
    const uint8_t *p = arr_elem_ptr(arr, i);
    gguf_str s = {(const char *)p + 8, rl_le64(p)};
    return s;
}

int64_t gguf_arr_i64(const gguf_value *arr, uint64_t i) {
    RL_ASSERT(arr->type == GGUF_TYPE_ARRAY && gguf_fixed_size(arr->v.arr.elem));
    gguf_value v;
    gguf_decode_scalar(arr->v.arr.elem, arr_elem_ptr(arr, i), &v);
    if (is_sint(v.type)) return v.v.i64;
    if (v.type == GGUF_TYPE_FLOAT32 || v.type == GGUF_TYPE_FLOAT64) {
        double d = v.v.f64; /* truncate toward zero, saturating (NaN -> 0) */
        if (!(d == d)) return 0;
        if (d >= 9.2233720368547758e18) return INT64_MAX;
        if (d <= -9.2233720368547758e18) return INT64_MIN;
        return (int64_t)d;
    }
    return (int64_t)v.v.u64; /* unsigned and bool; u64 above INT64_MAX wraps */
}

double gguf_arr_f64(const gguf_value *arr, uint64_t i) {
    RL_ASSERT(arr->type == GGUF_TYPE_ARRAY && gguf_fixed_size(arr->v.arr.elem));
    gguf_value v;
    gguf_decode_scalar(arr->v.arr.elem, arr_elem_ptr(arr, i), &v);
    if (is_sint(v.type)) return (double)v.v.i64;
    if (v.type == GGUF_TYPE_FLOAT32 || v.type == GGUF_TYPE_FLOAT64) return v.v.f64;
    return (double)v.v.u64;
}
