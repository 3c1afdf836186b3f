/* fuzz_gguf.c — libFuzzer target for the GGUF reader (src/gguf/gguf.c, src/gguf/gguf_meta.c).
 *
 * Build: make fuzz   (clang, -fsanitize=fuzzer,address,undefined) -> build/fuzz/fuzz_gguf
 * Run:   build/fuzz/fuzz_gguf -max_len=4096 build/fuzz/corpus tests/fixtures/fuzz-seeds
 * Seeds: tests/fixtures/fuzz-seeds/ (small valid files written by tests/c/test_gguf.c with
 *        RL_WRITE_FUZZ_SEEDS=dir). Results are recorded in docs/FUZZING.md.
 *
 * Contract checked: gguf_open_mem never crashes, never reads outside the input, and either
 * fails with a one-line error or returns an object whose every kv, array element, getter and
 * tensor view stays inside the buffer (ASan sees the input as an exactly-sized allocation).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"

static volatile uint64_t sink;

static void touch(const void *p, uint64_t n) {
    const uint8_t *b = p;
    if (n) sink += b[0] + b[n - 1];
}

static void walk_value(const gguf_value *v, int depth) {
    switch (v->type) {
    case GGUF_TYPE_STRING: touch(v->v.str.p, v->v.str.n); break;
    case GGUF_TYPE_ARRAY: {
        sink += gguf_arr_nbytes(v);
        uint64_t n = v->v.arr.n < 64 ? v->v.arr.n : 64; /* nested walks are O(i): cap */
        for (uint64_t i = 0; i < n; i++) {
            gguf_value e;
            gguf_arr_get(v, i, &e);
            if (v->v.arr.elem == GGUF_TYPE_STRING) {
                gguf_str s = gguf_arr_str(v, i);
                touch(s.p, s.n);
            } else if (v->v.arr.elem != GGUF_TYPE_ARRAY) {
                sink += (uint64_t)gguf_arr_i64(v, i);
                sink += (uint64_t)gguf_arr_f64(v, i);
            }
            if (depth < 16) walk_value(&e, depth + 1);
        }
        if (v->v.arr.n && v->v.arr.elem == GGUF_TYPE_STRING) { /* last element via str_off */
            gguf_str s = gguf_arr_str(v, v->v.arr.n - 1);
            touch(s.p, s.n);
        }
        break;
    }
    default: sink += v->v.u64; break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file *f = gguf_open_mem(data, size, "fuzz");
    if (!f) {
        if (!rl_lasterr()[0] || strchr(rl_lasterr(), '\n')) abort(); /* one-line error contract */
        return 0;
    }
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        char key[256];
        uint64_t kn = kv->key.n < sizeof key - 1 ? kv->key.n : sizeof key - 1;
        memcpy(key, kv->key.p, kn);
        key[kn] = 0;
        walk_value(&kv->val, 0);
        uint32_t u32;
        uint64_t u64;
        int64_t i64;
        float f32;
        bool b;
        gguf_str s;
        sink += gguf_get_u32(f, key, &u32) + gguf_get_u64(f, key, &u64) + gguf_get_i64(f, key, &i64) +
                gguf_get_f32(f, key, &f32) + gguf_get_bool(f, key, &b) + gguf_get_str(f, key, &s);
        free(gguf_get_str_dup(f, key));
        sink += gguf_get_arr(f, key) != NULL;
        if (strlen(key) == kn && gguf_find_kv(f, key) != kv) abort(); /* index must find it */
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (gguf_find_tensor(f, t->name) != t) abort();
        if (t->file_off + t->nbytes > size) abort();
        touch(t->data, t->nbytes);
    }
    gguf_close(f);
    return 0;
}
