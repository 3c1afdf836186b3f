/* test_legacy.c — the older GGUF generation (fused, per-key-head interleaved `ssm_in`)
 * must give logits bit-identical to the current one (`attn_qkv` + `attn_gate`).
 *
 * We produce the legacy file ourselves with Red Lite's GGUF writer: for every DeltaNet layer
 * the rows of attn_qkv ([q all | k all | v all]) and attn_gate (z) are interleaved back into
 * the HF in_proj_qkvz order (per key head g: q_g, k_g, v of its r value heads, z of them).
 * Rows are whole quantised blocks, so this is a pure row permutation; the engine undoes it
 * at load time and every dot product sees the same bytes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "run/engine.h"
#include "gguf/quant.h"

static const char *MODELS[] = {"tests/fixtures/tiny-a.gguf", "tests/fixtures/tiny-b.gguf"};

/* Returns the number of fused ssm_in tensors written, or -1 (rl_lasterr says why). */
static int write_legacy(const char *in, const char *out) {
    gguf_file *f = gguf_open(in);
    if (!f) return -1;
    uint32_t hk = 0, hv = 0, dk = 0, inner = 0;
    int bad = 0;
    bad |= !gguf_get_u32(f, "qwen3next.ssm.group_count", &hk);
    bad |= !gguf_get_u32(f, "qwen3next.ssm.time_step_rank", &hv);
    bad |= !gguf_get_u32(f, "qwen3next.ssm.state_size", &dk);
    bad |= !gguf_get_u32(f, "qwen3next.ssm.inner_size", &inner);
    if (bad || !hk || !hv || hv % hk || inner % hv) {
        gguf_close(f);
        return rl_seterr("%s: missing or inconsistent ssm hyperparameters", in);
    }
    uint32_t r = hv / hk, dv = inner / hv;
    gguf_writer *w = gguf_writer_new();
    for (uint64_t i = 0; i < f->n_kv; i++) bad |= gguf_writer_copy_kv(w, &f->kv[i]) != 0;
    void *bufs[128];
    int nb = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        int il;
        char rest[64];
        if (sscanf(t->name, "blk.%d.%63s", &il, rest) == 2 && !strcmp(rest, "attn_gate.weight")) continue;
        if (sscanf(t->name, "blk.%d.%63s", &il, rest) == 2 && !strcmp(rest, "attn_qkv.weight")) {
            char gname[96], iname[96];
            snprintf(gname, sizeof gname, "blk.%d.attn_gate.weight", il);
            snprintf(iname, sizeof iname, "blk.%d.ssm_in.weight", il);
            const gguf_tensor *z = gguf_find_tensor(f, gname);
            if (!z || nb == (int)(sizeof bufs / sizeof bufs[0])) {
                bad = 1;
                break;
            }
            size_t rb = quant_row_size(t->type, t->ne[0]);
            size_t group = 2 * dk + 2 * (size_t)r * dv;
            uint8_t *buf = malloc(rb * group * hk);
            if (!buf) {
                bad = 1;
                break;
            }
            const uint8_t *qkv = t->data, *zz = z->data;
            for (uint32_t g = 0; g < hk; g++) {
                uint8_t *dst = buf + rb * group * g;
                memcpy(dst, qkv + rb * g * dk, rb * dk);
                memcpy(dst + rb * dk, qkv + rb * (hk * dk + g * dk), rb * dk);
                memcpy(dst + rb * 2 * dk, qkv + rb * (2 * hk * dk + g * r * dv), rb * r * dv);
                memcpy(dst + rb * (2 * dk + r * dv), zz + rb * g * r * dv, rb * r * dv);
            }
            int64_t ne[2] = {t->ne[0], (int64_t)(group * hk)};
            bufs[nb++] = buf;
            bad |= gguf_writer_add_tensor(w, iname, t->type, 2, ne, buf) < 0;
            continue;
        }
        bad |= gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data) < 0; /* index or -1 */
    }
    int rc = bad ? rl_seterr("%s: building the legacy copy failed (%s)", in, rl_lasterr())
                 : gguf_writer_write(w, out);
    gguf_writer_free(w);
    for (int i = 0; i < nb; i++) free(bufs[i]);
    gguf_close(f);
    return rc ? -1 : nb;
}

static int all_finite(const float *x, int n) {
    for (int i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

static void compare(const char *model) {
    char out[256];
    snprintf(out, sizeof out, "/tmp/redlite-legacy-%d.gguf", (int)getpid());
    int nfused = write_legacy(model, out);
    CHECK(nfused > 0, "writing legacy copy of %s: %s", model, rl_lasterr());
    if (nfused <= 0) return;
    engine *a = engine_open(model, &(engine_params){.n_threads = 2, .reference = true});
    engine *b = engine_open(out, &(engine_params){.n_threads = 2, .reference = true});
    CHECK(a && b, "open: %s", rl_lasterr());
    if (!a || !b) {
        engine_close(a);
        engine_close(b);
        unlink(out);
        return;
    }
    CHECK(!engine_hparams(a)->legacy_ssm_in && engine_hparams(b)->legacy_ssm_in, "generations detected");
    engine_ctx *ca = engine_ctx_new(a, &(engine_ctx_params){.n_ctx = 64});
    engine_ctx *cb = engine_ctx_new(b, &(engine_ctx_params){.n_ctx = 64});
    CHECK(ca && cb, "ctx_new: %s", rl_lasterr());
    int V = engine_hparams(a)->n_vocab;
    float *la = malloc(sizeof(float) * V), *lb = malloc(sizeof(float) * V);
    int32_t toks[] = {785, 3974, 13876, 38835, 34208, 916, 279, 15678, 5562, 13};
    int diff = 0, err = 0, nonfinite = 0;
    for (size_t i = 0; ca && cb && i < sizeof toks / sizeof toks[0]; i++) {
        check_poison(la, V);
        check_poison(lb, V);
        err += engine_step(ca, toks[i], la) != 0;
        err += engine_step(cb, toks[i], lb) != 0;
        nonfinite += !all_finite(la, V) || !all_finite(lb, V);
        diff += memcmp(la, lb, sizeof(float) * V) != 0;
    }
    CHECK(err == 0, "%s: %d steps failed: %s", model, err, rl_lasterr());
    CHECK(nonfinite == 0, "%s: %d steps left non-finite logits", model, nonfinite);
    CHECK(diff == 0, "%s: legacy ssm_in logits differ from attn_qkv+attn_gate at %d positions", model, diff);
    free(la);
    free(lb);
    engine_ctx_free(ca);
    engine_ctx_free(cb);
    engine_close(a);
    engine_close(b);
    unlink(out);
}

int main(void) {
    for (size_t i = 0; i < sizeof MODELS / sizeof MODELS[0]; i++) {
        /* both fixtures are committed: a missing one is a failure, not a skip */
        if (access(MODELS[i], R_OK) != 0) {
            CHECK(0, "fixture %s is missing (run from the repository root)", MODELS[i]);
            continue;
        }
        compare(MODELS[i]);
    }
    return check_done("test_legacy");
}
