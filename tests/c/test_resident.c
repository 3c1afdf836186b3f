/* test_resident.c — the weights copied off the file mapping (src/backend/resident.h) on the committed tiny
 * fixtures, against a second engine of the same file that serves everything from the mapping
 * (--weights map):
 *   - after engine_open every dense matrix view but the embedding's points outside the file
 *     mapping, at the same bytes as the mapped engine's view; the experts stay mapped until
 *     engine_copy_experts, which then moves them (idempotent; refused under map_weights);
 *   - prefill and decode steps give bit-identical logits (NaN-poisoned first) on both engines,
 *     with the dense copy alone and with the experts copied too;
 *   - a session whose expert plan is full residency copies the experts, a bounded one does not,
 *     and both give the mapped engine's logits;
 *   - a file that ends early (truncated after it was opened) fails the copy with one clear line and
 *     leaves every view where it was. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "base/common.h"
#include "run/engine.h"
#include "backend/resident.h"
#include "run/session.h"

static bool in_map(const gguf_file *f, const uint8_t *p) {
    for (int i = 0; i < f->n_parts; i++)
        if (p >= f->parts[i].map && p < f->parts[i].map + f->parts[i].size) return true;
    return false;
}

/* Visit every matrix view of both models (the same table field in each). */
typedef void (*view_fn)(const char *what, const ops_mat *a, const ops_mat *b, bool routed, bool embd,
                        void *ud);
static void each_view(const q3n_model *a, const q3n_model *b, view_fn fn, void *ud) {
    const int nl = a->hp.n_layer + a->hp.n_nextn;
    for (int id = 0; id < Q3N_T_COUNT; id++) {
        const q3n_tensor_desc *d = q3n_tensor((q3n_tensor_id)id);
        if (d->vec || d->field < 0) continue;
        if (d->kind == Q3N_KIND_GLOBAL) {
            fn(d->name, (const ops_mat *)((const char *)a + d->field),
               (const ops_mat *)((const char *)b + d->field), false, id == Q3N_T_TOKEN_EMBD, ud);
            continue;
        }
        for (int il = 0; il < nl; il++)
            fn(d->name, (const ops_mat *)((const char *)&a->layers[il] + d->field),
               (const ops_mat *)((const char *)&b->layers[il] + d->field), d->routed, false, ud);
    }
}

typedef struct {
    const gguf_file *fa, *fb; /* the copying engine's file, the mapped engine's */
    bool experts_copied;
    int n_dense, n_routed;
} view_check;

static void check_view(const char *what, const ops_mat *a, const ops_mat *b, bool routed, bool embd,
                       void *ud) {
    view_check *c = ud;
    CHECK(!a->data == !b->data, "%s: present in one engine only", what);
    if (!a->data || !b->data) return;
    CHECK(in_map(c->fb, b->data), "%s: the mapped engine's view is outside its mapping", what);
    const bool moved = !embd && (!routed || c->experts_copied);
    CHECK(in_map(c->fa, a->data) == !moved, "%s: %s the mapping (routed %d, experts copied %d)", what,
          moved ? "still in" : "outside", routed, c->experts_copied);
    CHECK(a->type == b->type && a->row_bytes == b->row_bytes && a->n_out == b->n_out, "%s: shape differs",
          what);
    CHECK(!memcmp(a->data, b->data, a->row_bytes * (size_t)a->n_out), "%s: bytes differ from the file's",
          what);
    if (moved) routed ? c->n_routed++ : c->n_dense++;
}

/* Prefill 9 tokens, then 3 steps, on a fresh context of each engine: logits equal bit for bit. */
static void check_logits(engine *a, engine *b, const char *what) {
    const int V = engine_hparams(a)->n_vocab;
    float *la = malloc(sizeof(float) * (size_t)V), *lb = malloc(sizeof(float) * (size_t)V);
    engine_ctx *ca = engine_ctx_new(a, &(engine_ctx_params){.n_ctx = 64, .n_batch = 16});
    engine_ctx *cb = engine_ctx_new(b, &(engine_ctx_params){.n_ctx = 64, .n_batch = 16});
    CHECK(la && lb && ca && cb, "%s: contexts: %s", what, rl_lasterr());
    if (la && lb && ca && cb) {
        rl_rng r;
        rl_rng_seed(&r, 7);
        int32_t t[12];
        for (int i = 0; i < 12; i++) t[i] = (int32_t)(rl_rng_u64(&r) % (uint64_t)V);
        check_poison(la, (size_t)V);
        check_poison(lb, (size_t)V);
        CHECK(engine_prefill(ca, t, 9, la) == 0 && engine_prefill(cb, t, 9, lb) == 0, "%s: prefill: %s", what,
              rl_lasterr());
        CHECK(!memcmp(la, lb, sizeof(float) * (size_t)V), "%s: prefill logits differ", what);
        for (int i = 9; i < 12; i++) {
            check_poison(la, (size_t)V);
            check_poison(lb, (size_t)V);
            CHECK(engine_step(ca, t[i], la) == 0 && engine_step(cb, t[i], lb) == 0, "%s: step: %s", what,
                  rl_lasterr());
            CHECK(!memcmp(la, lb, sizeof(float) * (size_t)V), "%s: step %d logits differ", what, i);
        }
    }
    engine_ctx_free(ca);
    engine_ctx_free(cb);
    free(la);
    free(lb);
}

static void test_engine_copies(const char *path) {
    engine *a = engine_open(path, &(engine_params){.n_threads = 2});
    engine *b = engine_open(path, &(engine_params){.n_threads = 2, .map_weights = true});
    CHECK(a && b, "open %s: %s", path, rl_lasterr());
    if (!a || !b) goto out;
    const q3n_model *ma = engine_model(a), *mb = engine_model(b);
    CHECK(ma->dense_copied && !ma->experts_copied, "%s: after open: dense %d experts %d", path,
          ma->dense_copied, ma->experts_copied);
    CHECK(!mb->dense_copied && !mb->experts_copied, "%s: --weights map copied something", path);
    view_check vc = {.fa = engine_gguf(a), .fb = engine_gguf(b)};
    each_view(ma, mb, check_view, &vc);
    CHECK(vc.n_dense >= 4 * ma->hp.n_layer && vc.n_routed == 0, "%s: %d dense / %d routed views moved", path,
          vc.n_dense, vc.n_routed);
    char buf[640];
    CHECK(engine_weights_describe(a, buf, sizeof buf) && strstr(buf, "dense weights: ") &&
              strstr(buf, "copied") && !strstr(buf, "routed experts"),
          "%s: describe: '%s'", path, buf);
    CHECK(engine_weights_describe(b, buf, sizeof buf) && strstr(buf, "in the file mapping") &&
              strstr(buf, "--weights map"),
          "%s: describe (map): '%s'", path, buf);
    check_logits(a, b, "dense copied");

    CHECK(engine_copy_experts(b, false) != 0 && strstr(rl_lasterr(), "--weights map"),
          "map engine copied experts: '%s'", rl_lasterr());
    rl_clearerr();
    CHECK(engine_copy_experts(a, false) == 0, "%s: copy experts: %s", path, rl_lasterr());
    CHECK(engine_copy_experts(a, false) == 0, "%s: a second copy_experts call fails: %s", path, rl_lasterr());
    CHECK(ma->experts_copied, "%s: experts_copied not set", path);
    vc = (view_check){.fa = engine_gguf(a), .fb = engine_gguf(b), .experts_copied = true};
    each_view(ma, mb, check_view, &vc);
    CHECK(vc.n_routed >= 2 * ma->hp.n_layer, "%s: %d routed views moved", path, vc.n_routed);
    CHECK(engine_weights_describe(a, buf, sizeof buf) && strstr(buf, "dense weights: ") &&
              strstr(buf, "\nrouted experts: "),
          "%s: describe after the experts: '%s'", path, buf);
    check_logits(a, b, "experts copied");
out:
    engine_close(a);
    engine_close(b);
}

/* The session copies the experts for a full-residency plan only. */
static void test_session_plans(const char *path) {
    engine *ref = engine_open(path, &(engine_params){.n_threads = 2, .map_weights = true});
    const char *specs[] = {"1", "mmap", "full"};
    const bool copies[] = {false, false, true};
    for (int i = 0; i < 3 && ref; i++) {
        session_model *m = session_model_open(&(session_model_params){.model_path = path, .n_threads = 2});
        session *s =
            m ? session_new(m, &(session_params){.n_ctx = 64, .n_batch = 16, .cache_spec = specs[i]}) : NULL;
        CHECK(s != NULL, "%s: session (cache %s): %s", path, specs[i], rl_lasterr());
        if (s) {
            const q3n_model *mm = engine_model(session_model_engine(m));
            CHECK(mm->experts_copied == copies[i] && mm->dense_copied,
                  "%s: cache %s: experts copied %d, dense %d", path, specs[i], mm->experts_copied,
                  mm->dense_copied);
            const int V = engine_hparams(ref)->n_vocab;
            float *lb = malloc(sizeof(float) * (size_t)V);
            int32_t t[10];
            for (int k = 0; k < 10; k++) t[k] = (int32_t)((k * 7919 + 13) % V);
            engine_ctx *c = engine_ctx_new(ref, &(engine_ctx_params){.n_ctx = 64, .n_batch = 16});
            check_poison(lb, (size_t)V);
            CHECK(c && engine_prefill(c, t, 10, lb) == 0, "reference prefill: %s", rl_lasterr());
            CHECK(session_feed(s, t, 10, NULL, NULL) == 0, "%s: feed (cache %s): %s", path, specs[i],
                  rl_lasterr());
            const float *l = session_logits(s);
            CHECK(l && !memcmp(l, lb, sizeof(float) * (size_t)V),
                  "%s: cache %s: logits differ from the mapped engine's", path, specs[i]);
            engine_ctx_free(c);
            free(lb);
        }
        session_free(s);
        session_model_close(m);
    }
    engine_close(ref);
}

/* The read error path: the file loses its second half after the mapped engine opened it. */
static void test_read_error(const char *path) {
    const char *tmp = "/tmp/rl_test_resident_trunc.gguf";
    FILE *in = fopen(path, "rb"), *out = fopen(tmp, "wb");
    CHECK(in && out, "copy %s to %s", path, tmp);
    char buf[1 << 16];
    size_t n, total = 0;
    while (in && out && (n = fread(buf, 1, sizeof buf, in)) > 0) total += fwrite(buf, 1, n, out);
    if (in) fclose(in);
    if (out) fclose(out);
    engine *e = engine_open(tmp, &(engine_params){.n_threads = 2, .map_weights = true});
    CHECK(e != NULL, "open %s: %s", tmp, rl_lasterr());
    if (e) {
        q3n_model *m = (q3n_model *)engine_model(e); /* resident_copy re-points views: the test drives it */
        const uint8_t *before = m->output.data, *before_l0 = m->layers[0].router.data;
        CHECK(truncate(tmp, (off_t)(total / 2)) == 0, "truncate %s", tmp);
        resident *r = resident_copy(m, NULL, RESIDENT_DENSE, false);
        CHECK(r == NULL && strstr(rl_lasterr(), "reading weights into memory failed") &&
                  strstr(rl_lasterr(), "ended early"),
              "truncated file: copy %p, error '%s'", (void *)r, rl_lasterr());
        CHECK(m->output.data == before && m->layers[0].router.data == before_l0 && !m->dense_copied,
              "a failed copy moved the views");
        resident_free(r);
        rl_clearerr();
        engine_close(e);
    }
    unlink(tmp);
}

/* This process's virtual size (VmSize of /proc/self/status) in bytes; 0 if unreadable. */
static size_t vm_size(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    unsigned long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmSize: %lu kB", &kb) == 1) break;
    fclose(f);
    return (size_t)kb * 1024;
}

/* rl_huge_alloc (common.c), the memory of the weight copies, the repacked experts and the recurrent
 * states: 2 MiB-aligned, the length rounded up to 2 MiB, zeroed and writable to its end, the process
 * grown by exactly that length (the over-sized mapping's extra pages given back) and shrunk by it at
 * the free; an impossible size gets NULL and one line naming what it was for. */
static void test_huge_alloc(void) {
    const size_t mb2 = RL_HUGE_PAGE, sizes[] = {1, 4096, mb2 - 1, mb2, 5 * mb2 + 3};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        const size_t len = (sizes[i] + mb2 - 1) / mb2 * mb2;
        (void)vm_size(); /* stdio's buffers in place before the measured pair */
        const size_t before = vm_size();
        uint8_t *p = rl_huge_alloc(sizes[i], "test");
        CHECK(p && ((uintptr_t)p & (mb2 - 1)) == 0, "huge alloc %zu: %p not 2 MiB-aligned (%s)", sizes[i],
              (void *)p, rl_lasterr());
        if (!p) continue;
        size_t nz = 0;
        for (size_t k = 0; k < len; k += 4096) nz += p[k] != 0;
        CHECK(nz == 0 && p[len - 1] == 0, "huge alloc %zu: %zu non-zero pages", sizes[i], nz);
        p[0] = 1, p[len - 1] = 2; /* writable to the rounded end */
        const size_t after = vm_size();
        rl_huge_free(p, sizes[i]);
        const size_t freed = vm_size();
        CHECK(after - before == len && after - freed == len,
              "huge alloc %zu: the process grew by %zu bytes and shrank by %zu at the free, not the %zu of "
              "the rounded "
              "length (the over-sized mapping's extra pages kept?)",
              sizes[i], after - before, after - freed, len);
    }
    rl_clearerr();
    void *q = rl_huge_alloc((size_t)1 << 62, "an impossible test array");
    CHECK(!q && strstr(rl_lasterr(), "out of memory") && strstr(rl_lasterr(), "an impossible test array"),
          "impossible size: %p, '%s'", q, rl_lasterr());
    rl_clearerr();
    q = rl_huge_alloc(SIZE_MAX - 4096, "a wrapping test array"); /* its rounding up would wrap */
    CHECK(!q && strstr(rl_lasterr(), "out of memory"), "wrapping size: %p, '%s'", q, rl_lasterr());
    rl_clearerr();
    rl_huge_free(NULL, 1); /* a no-op */
}

int main(void) {
    const char *models[] = {"tests/fixtures/tiny-a.gguf", "tests/fixtures/tiny-b.gguf"};
    test_huge_alloc();
    if (!strcmp(resident_thp_mode(),
                "never")) { /* nothing is copied: check that, then say what did not run */
        engine *e = engine_open(models[0], &(engine_params){.n_threads = 2});
        char buf[640] = "";
        CHECK(e && !engine_model(e)->dense_copied && engine_weights_describe(e, buf, sizeof buf) &&
                  strstr(buf, "in the file mapping") && strstr(buf, "never"),
              "THP never: '%s'", buf);
        engine_close(e);
        if (check_fail) return check_done("test_resident");
        return check_skip("test_resident",
                          "transparent huge pages are off here (never): no weight is copied, so the "
                          "copies' checks cannot run");
    }
    for (int i = 0; i < 2; i++) {
        if (access(models[i], R_OK) != 0) {
            CHECK(0, "fixture %s is missing", models[i]);
            continue;
        }
        test_engine_copies(models[i]);
        test_session_plans(models[i]);
    }
    test_read_error(models[0]);
    return check_done("test_resident");
}
