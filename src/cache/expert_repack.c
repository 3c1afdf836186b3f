/* expert_repack.c — --iq-repack at load: the routed experts of lookup-free-able types copied
 * into anonymous memory in that layout, the model's views re-pointed (design: expert_repack.h,
 * the layout: quant_repack.h). */
#include "cache/expert_repack.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/common.h"
#include "gguf/quant_repack.h"

#define GiB (1024.0 * 1024.0 * 1024.0)

typedef struct {
    void *mem;
    size_t len;
    ops_mat *mat;  /* the view re-pointed at mem once every buffer is filled */
    uint32_t type; /* its repacked type */
} rp_buf;

struct expert_repack {
    rp_buf *bufs;
    int n_bufs;
    expert_repack_info info;
};

/* The matrix views --iq-repack considers: the routed experts of layer il (NULL where absent: up_exps
 * of a fused gate_up), then its dense projections; the output head with the last layer. Not the
 * token embedding: rows of it are only dequantised one at a time, which no layout speeds up. */
#define RP_MAX_MATS 17
static int layer_mats(q3n_model *m, int il, int n_layer, ops_mat **out, int *n_experts) {
    q3n_layer *L = &m->layers[il];
    ops_mat *c[] = {&L->gate_exps,
                    &L->up_exps,
                    &L->down_exps,
                    &L->wq,
                    &L->wk,
                    &L->wv,
                    &L->wo,
                    &L->wqkv,
                    &L->wgate,
                    &L->wba,
                    &L->wout,
                    &L->router,
                    &L->gate_sh,
                    &L->up_sh,
                    &L->down_sh,
                    &L->eh_proj,
                    il == n_layer - 1 ? &m->output : NULL};
    _Static_assert(sizeof c / sizeof c[0] == RP_MAX_MATS, "RP_MAX_MATS");
    int n = 0;
    *n_experts = 0;
    for (int i = 0; i < RP_MAX_MATS; i++)
        if (c[i] && c[i]->data) {
            out[n++] = c[i];
            if (i < 3) (*n_experts)++;
        }
    return n;
}

typedef struct {
    uint32_t src;
    const uint8_t *in;
    uint8_t *out;
    int64_t n_rows, n_cols;
    size_t rb_in, rb_out;
} rp_job;

static void rp_worker(void *ctx, int ith, int nth) {
    const rp_job *j = ctx;
    long lo, hi;
    pool_range((long)j->n_rows, ith, nth, &lo, &hi);
    if (hi > lo)
        quant_repack_rows(j->src, j->in + (size_t)lo * j->rb_in, j->out + (size_t)lo * j->rb_out, hi - lo,
                          j->n_cols);
}

/* "IQ1_M->IQ1_LF, IQ2_XS->IQ2_LF": each source type once */
static void add_type(char *types, size_t n, uint32_t src) {
    char pair[40];
    snprintf(pair, sizeof pair, "%s->%s", quant_name(src), quant_name((uint32_t)quant_repack_type(src)));
    if (strstr(types, pair)) return;
    size_t l = strlen(types);
    snprintf(types + l, n - l, "%s%s", l ? ", " : "", pair);
}

/* The repacked type of a layer's matrix i (the first ne are routed experts), or -1 when it stays. */
static int repack_target(const ops_mat *w, int i, int ne, bool dense) {
    return i >= ne && !dense ? -1 : quant_repack_type(w->type);
}

expert_repack *expert_repack_model(q3n_model *m, pool *p, bool progress, const expert_repack_opts *o) {
    const int n_layer = m->hp.n_layer + m->hp.n_nextn;
    const expert_repack_opts d = {0};
    if (!o) o = &d;
    const bool dense = !o->experts_only;
    expert_repack *r = rl_calloc(1, sizeof *r, "expert repack");
    if (!r) return NULL;
    expert_repack_info *in = &r->info;
    /* plan: what is repacked, and does it fit */
    int n_mats = 0;
    for (int il = 0; il < n_layer; il++) {
        ops_mat *mats[RP_MAX_MATS];
        int ne;
        const int k = layer_mats(m, il, n_layer, mats, &ne);
        for (int i = 0; i < k; i++) {
            const uint64_t file = (uint64_t)mats[i]->n_out * mats[i]->row_bytes;
            const uint64_t mem =
                i < ne || dense ? quant_repack_bytes(mats[i]->type, mats[i]->n_out, mats[i]->n_in) : 0;
            if (mem) {
                n_mats++;
                in->n_dense += i >= ne;
                in->bytes_file += file;
                in->bytes_mem += mem;
                if (i >= ne) in->dense_file += file, in->dense_mem += mem;
                add_type(in->types, sizeof in->types, mats[i]->type);
            } else if (i < ne) {
                in->bytes_kept += file;
            }
        }
    }
    if (n_mats == in->n_dense) {
        rl_seterr(
            "--iq-repack: no routed expert of this model has a lookup-free layout (only IQ2_XXS, IQ2_XS and "
            "IQ1_M experts do); run without --iq-repack");
        goto fail;
    }
    const uint64_t ram = o->ram ? o->ram : rl_total_ram(),
                   limit = (uint64_t)(EXPERT_REPACK_RAM_SHARE * (double)ram);
    const uint64_t need = m->bytes_dense - in->dense_file + in->bytes_mem + in->bytes_kept;
    if (need > limit) {
        rl_seterr("--iq-repack: the repacked matrices need %.2f GiB (%.2f GiB in the file) + %.2f GiB of "
                  "other weights, "
                  "more than %d%% of this machine's %.1f GiB RAM; run without --iq-repack (the expert cache "
                  "serves the "
                  "file's layout)",
                  in->bytes_mem / GiB, in->bytes_file / GiB,
                  (m->bytes_dense - in->dense_file + in->bytes_kept) / GiB,
                  (int)(EXPERT_REPACK_RAM_SHARE * 100 + 0.5), ram / GiB);
        goto fail;
    }
    r->bufs = rl_calloc((size_t)n_mats, sizeof(rp_buf), "expert repack buffers");
    if (!r->bufs) goto fail;
    /* repack into fresh buffers first; only when all succeeded are the views re-pointed */
    const double t0 = rl_now();
    rl_progress pr;
    if (progress) rl_progress_start(&pr, "repacking experts", in->bytes_file);
    uint64_t done = 0;
    for (int il = 0; il < n_layer; il++) {
        ops_mat *mats[RP_MAX_MATS];
        int ne;
        const int k = layer_mats(m, il, n_layer, mats, &ne);
        for (int i = 0; i < k; i++) {
            const int t = repack_target(mats[i], i, ne, dense);
            if (t < 0) continue;
            rp_job j = {.src = mats[i]->type,
                        .in = mats[i]->data,
                        .n_rows = mats[i]->n_out,
                        .n_cols = mats[i]->n_in,
                        .rb_in = mats[i]->row_bytes,
                        .rb_out = quant_row_size((uint32_t)t, mats[i]->n_in)};
            rp_buf *b = &r->bufs[r->n_bufs];
            b->len = (size_t)j.n_rows * j.rb_out;
            if (!(b->mem = rl_huge_alloc(b->len, "repacked experts (--iq-repack)"))) {
                if (progress) rl_progress_end(&pr);
                goto fail;
            }
            b->mat = mats[i];
            b->type = (uint32_t)t;
            r->n_bufs++;
            j.out = b->mem;
            pool_run(p, rp_worker, &j);
            /* drop the mapping's pages of the source now (clean file pages: the page cache may keep
             * them, but they leave this process's RSS and the peak is one tensor, not all) */
            const uintptr_t a = (uintptr_t)j.in, e = a + (uintptr_t)j.n_rows * j.rb_in;
            const uintptr_t pa = (a + 4095) & ~(uintptr_t)4095, pe = e & ~(uintptr_t)4095;
            if (i < ne && pe > pa)
                madvise((void *)pa, pe - pa, MADV_DONTNEED); /* experts: always the file
                                                           mapping (a dense view may be owned) */
            done += (uint64_t)j.n_rows * j.rb_in;
            if (progress) rl_progress_update(&pr, done);
        }
    }
    if (progress) rl_progress_end(&pr);
    /* every tensor repacked: re-point the views */
    for (int bi = 0; bi < r->n_bufs; bi++) {
        const rp_buf *b = &r->bufs[bi];
        b->mat->type = b->type;
        b->mat->row_bytes = quant_row_size(b->type, b->mat->n_in);
        b->mat->data = b->mem;
    }
    in->n_tensors = r->n_bufs;
    in->seconds = rl_now() - t0;
    return r;
fail:
    expert_repack_free(r);
    return NULL;
}

void expert_repack_free(expert_repack *r) {
    if (!r) return;
    if (r->bufs) /* NULL only when allocating it failed, with no buffer counted yet */
        for (int i = 0; i < r->n_bufs; i++) rl_huge_free(r->bufs[i].mem, r->bufs[i].len);
    free(r->bufs);
    free(r);
}

void expert_repack_get_info(const expert_repack *r, expert_repack_info *out) { *out = r->info; }

/* GiB, or MiB below one GiB (test models) */
static const char *fmt_bytes(char *b, size_t n, double bytes) {
    if (bytes >= GiB) snprintf(b, n, "%.2f GiB", bytes / GiB);
    else snprintf(b, n, "%.1f MiB", bytes / 1048576.0);
    return b;
}

void expert_repack_describe(const expert_repack *r, char *buf, size_t n) {
    const expert_repack_info *i = &r->info;
    char f[32], m[32], d[32];
    snprintf(
        buf, n,
        "iq-repack: %d expert + %d dense tensors (%s), %s in the file -> %s in memory (+%s, %.2fx), %.1f s%s",
        i->n_tensors - i->n_dense, i->n_dense, i->types, fmt_bytes(f, sizeof f, (double)i->bytes_file),
        fmt_bytes(m, sizeof m, (double)i->bytes_mem),
        fmt_bytes(d, sizeof d, (double)(i->bytes_mem - i->bytes_file)),
        (double)i->bytes_mem / (double)i->bytes_file, i->seconds,
        i->bytes_kept ? "; other experts stay in the file's layout" : "");
}
