/* test_verify.c — the CPU verify path beyond the shared engine contract (engine_contract.h):
 *   - per-row snapshots written in place by the forward (q3n_row_dst_fn): any subset of the rows
 *     may ask for one (the speculative loop leaves the last row out; a NULL in the middle makes
 *     rows update the live state in place between two snapshot rows), and every snapshot given
 *     restores the exact state after its row, the verify's end state is the steps' state, and
 *     the logits are those of single steps;
 *   - the same with a debug dump hook set (the per-row dispatch path);
 * (all 128 masks on tiny-a's fast path, every 3rd or 7th elsewhere, to keep the run short)
 * on the committed tiny fixtures, reference and fast CPU paths. Outputs are NaN-poisoned. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "run/engine.h"

#define NT 7  /* rows of the verify under test */
#define PRE 3 /* tokens before it */
static const int32_t TOK[PRE + NT + 1] = {872, 198, 9707, 11, 1879, 34, 4340, 198, 77091, 13, 55};

static int all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

static int n_dumps;
static void count_dump(void *ud, const char *name, int layer, int row, const float *x, int n) {
    (void)ud, (void)name, (void)layer, (void)row, (void)x, (void)n;
    n_dumps++;
}

/* For every snapshot mask over the NT rows: prefill PRE tokens, verify NT rows with snapshots of
 * the masked rows, compare each row's logits with the steps', then for every masked row restore
 * its snapshot and step the next token: its logits must be the steps' next row. */
static void run(const char *model, bool reference, unsigned stride) {
    engine *e = engine_open(model, &(engine_params){.n_threads = 2, .reference = reference});
    CHECK(e != NULL, "open %s: %s", model, rl_lasterr());
    if (!e) return;
    size_t V = (size_t)engine_hparams(e)->n_vocab;
    engine_ctx *c = engine_ctx_new(e, &(engine_ctx_params){.n_ctx = 64, .n_batch = 16});
    float *step = malloc(sizeof(float) * V * (PRE + NT + 1)), *ver = malloc(sizeof(float) * V * NT);
    float *tmp = malloc(sizeof(float) * V);
    engine_snapshot *sn[NT];
    for (int i = 0; i < NT; i++) sn[i] = c ? engine_snapshot_new(c) : NULL;
    CHECK(c && step && ver && tmp && sn[0] && sn[NT - 1], "setup: %s", rl_lasterr());
    if (!c || !step || !ver || !tmp || !sn[0] || !sn[NT - 1]) goto out;
    check_poison(step, V * (PRE + NT + 1));
    for (int i = 0; i < PRE + NT + 1; i++)
        CHECK(engine_step(c, TOK[i], step + V * i) == 0, "step: %s", rl_lasterr());
    CHECK(all_finite(step, V * (PRE + NT + 1)), "steps left non-finite logits");
    int masks = 0, bad_rows = 0, bad_restores = 0, bad_end = 0, errs = 0;
    for (int dump = 0; dump < 2; dump++)
        for (unsigned mask = 0; mask < (1u << NT); mask += dump ? 37 : stride) {
            engine_reset(c);
            engine_set_hooks(c, dump ? count_dump : NULL, NULL, NULL);
            n_dumps = 0;
            errs += engine_prefill(c, TOK, PRE, NULL) != 0;
            engine_snapshot *use[NT];
            for (int i = 0; i < NT; i++) use[i] = mask >> i & 1 ? sn[i] : NULL;
            check_poison(ver, V * NT);
            errs += engine_verify(c, TOK + PRE, NT, ver, use) != 0;
            bad_rows += !all_finite(ver, V * NT) || memcmp(ver, step + V * PRE, sizeof(float) * V * NT) != 0;
            if (dump) errs += n_dumps == 0; /* the hook ran: the per-row path was taken */
            engine_set_hooks(c, NULL, NULL, NULL);
            /* the end state: one more step continues the steps */
            check_poison(tmp, V);
            errs += engine_step(c, TOK[PRE + NT], tmp) != 0;
            bad_end += memcmp(tmp, step + V * (PRE + NT), sizeof(float) * V) != 0;
            for (int i = 0; i < NT; i++) {
                if (!use[i]) continue;
                errs += engine_snapshot_restore(c, use[i]) != 0 || engine_pos(c) != PRE + i + 1;
                check_poison(tmp, V);
                errs += engine_step(c, TOK[PRE + i + 1], tmp) != 0;
                bad_restores +=
                    !all_finite(tmp, V) || memcmp(tmp, step + V * (PRE + i + 1), sizeof(float) * V) != 0;
            }
            masks++;
        }
    CHECK(errs == 0, "%s%s: %d calls failed: %s", model, reference ? " (reference)" : "", errs, rl_lasterr());
    CHECK(bad_rows == 0, "%s: %d of %d verifies gave rows different from single steps", model, bad_rows,
          masks);
    CHECK(bad_end == 0, "%s: %d of %d verifies ended in another state than the steps", model, bad_end, masks);
    CHECK(bad_restores == 0,
          "%s: %d snapshot restores (over %d masks) did not give the state after their row", model,
          bad_restores, masks);
out:
    for (int i = 0; i < NT; i++) engine_snapshot_free(sn[i]);
    free(step);
    free(ver);
    free(tmp);
    engine_ctx_free(c);
    engine_close(e);
}

int main(void) {
    const char *models[] = {"tests/fixtures/tiny-a.gguf", "tests/fixtures/tiny-b.gguf"};
    for (int m = 0; m < 2; m++) {
        if (access(models[m], R_OK) != 0) {
            CHECK(0, "fixture %s is missing", models[m]);
            continue;
        }
        run(models[m], false, m == 0 ? 1 : 3); /* every mask on tiny-a's fast path */
        run(models[m], true, 7);
    }
    return check_done("test_verify");
}
