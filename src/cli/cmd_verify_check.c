/* cmd_verify_check.c — `redlite verify-check`: the engine's exactness contract as speculative
 * decoding uses it, on a real model and backend.
 *
 * A token sequence (seeded random ids) is evaluated twice in one context: first one
 * engine_step per token (the reference logits), then as K-row engine_verify calls, K = 1..D
 * cycling, each followed by a rollback to one of its rows' snapshots (row r = 0..K-1 cycling, so
 * every (K, r) pair is visited when -n allows) and continuing from there, exactly as the
 * speculative loop rolls back a rejected draft. Every row of every verify is compared bit for
 * bit with the step at the same position, which also checks each restored state (the rows
 * after a restore are computed from it). Exit 0 when all agree, 1 on the first difference (its
 * position, verify and row in the message) or a runtime error, 2 on usage errors.
 *
 * It also times the steps and the verifies (with their per-row snapshots): the ratio of a
 * K-row verify to one step is what speculative decoding's speed-up depends on (docs/SPECULATION.md). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/opts.h"
#include "base/common.h"
#include "run/engine.h"
#include "cache/expert_cache.h"
#include "base/json.h"
#include "text/sampler.h"
#include "run/session.h"

static const char *CMD = "verify-check";

static const opts_cmd VERIFY = {
    "verify-check", CMD_VERIFY, "redlite verify-check -m MODEL [options]",
    "Check that K-row verifies (with rollbacks to every row's snapshot) give logits\n"
    "bit-identical to single steps: the guarantee behind speculative decoding. Exit 0 when\n"
    "every row agrees, 1 at the first difference (named on stderr) or a runtime error.",
    NULL};

static uint64_t xs_next(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

static bool finite_row(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return false;
    return true;
}

typedef struct {
    bool found;
    int pos, k, row, restored_row, verify_index;
    double max_diff;
    size_t argmax_step, argmax_verify;
    bool nonfinite;
} mismatch;

/* One check: what set-up opens and allocates, what the passes measure, what the report prints. */
typedef struct {
    const cli_opts *o;
    long long n, timing;
    int K; /* rows of the largest verify */
    session_model *sm;
    session *S;
    engine *e;
    engine_ctx *c;
    size_t V;
    float *plain, *vl; /* the steps' logits [n][V]; one verify's [K][V] */
    int32_t *tok;
    engine_snapshot *snaps[9];
    /* the steps: total, and the minimum (the best estimate of the cost itself on a shared, noisy
     * machine: interference only ever adds) */
    double t_steps, step_min;
    /* the verifies */
    mismatch mm;
    int n_verifies, n_restores, pairs, n_k[10];
    long long rows;
    double t_verify[10], v_min[10];
    /* --timing: min and median per row count */
    double t_min[9], t_med[9];
} vcheck;

/* Open the model through a session (the expert cache planned as generate does; the check then
 * drives the engine context directly: no prefix reuse, no sampling), allocate, draw the tokens. */
static int vc_setup(vcheck *v) {
    const cli_opts *o = v->o;
    v->sm = session_model_open(&(session_model_params){.model_path = o->model,
                                                       .backend = o->backend,
                                                       .n_threads = (int)o->threads,
                                                       .reference = o->reference});
    v->e = v->sm ? session_model_engine(v->sm) : NULL;
    if (!v->e) return -1;
    v->V = (size_t)engine_hparams(v->e)->n_vocab;
    v->S = session_new(v->sm, &(session_params){.n_ctx = (int)v->n + 16,
                                                .n_batch = v->K < 16 ? 16 : v->K,
                                                .kv = o->kv,
                                                .cache_spec = o->cache_spec,
                                                .vram_spec = o->vram_spec,
                                                .vram_pin = o->vram_pin,
                                                .vram_miss = o->vram_miss,
                                                .verbose = !o->json});
    if (!v->S) return -1;
    v->c = session_ctx(v->S);
    v->plain = malloc(sizeof(float) * v->V * (size_t)v->n);
    v->vl = malloc(sizeof(float) * v->V * (size_t)v->K);
    v->tok = malloc(sizeof(int32_t) * (size_t)v->n);
    if (!v->plain || !v->vl || !v->tok)
        return rl_seterr("out of memory (%lld x %zu logits: lower -n)", v->n, v->V);
    for (int i = 0; i < v->K; i++)
        if (!(v->snaps[i] = engine_snapshot_new(v->c))) return -1;
    uint64_t st = 0x9E3779B97F4A7C15ull ^ (uint64_t)o->bench_seed * 0xD1B54A32D192ED03ull;
    if (!st) st = 1;
    for (long long i = 0; i < v->n; i++) v->tok[i] = (int32_t)(xs_next(&st) % v->V);
    return 0;
}

/* The reference: one step per token (poisoned first, so an unwritten row fails). */
static int vc_reference(vcheck *v) {
    size_t V = v->V;
    double t0 = rl_now();
    v->step_min = 1e30;
    for (long long p = 0; p < v->n; p++) {
        float *row = v->plain + (size_t)p * V;
        for (size_t j = 0; j < V; j++) row[j] = NAN;
        double ts = rl_now();
        if (engine_step(v->c, v->tok[p], row)) return -1;
        ts = rl_now() - ts;
        if (p > 0 && ts < v->step_min) v->step_min = ts; /* the first step pays first touches */
    }
    v->t_steps = rl_now() - t0;
    if (v->step_min > 1e29) v->step_min = v->t_steps;
    engine_reset(v->c);
    return 0;
}

/* Compare the k rows of a verify at p with the steps; false (v->mm filled) at a difference. */
static bool vc_rows_agree(vcheck *v, int p, int k, int prev_r) {
    size_t V = v->V;
    for (int i = 0; i < k; i++) {
        const float *a = v->plain + (size_t)(p + i) * V, *b = v->vl + (size_t)i * V;
        v->rows++;
        if (!memcmp(a, b, sizeof(float) * V) && finite_row(b, V)) continue;
        mismatch *mm = &v->mm;
        *mm = (mismatch){.found = true,
                         .pos = p + i,
                         .k = k,
                         .row = i,
                         .restored_row = prev_r,
                         .verify_index = v->n_verifies,
                         .nonfinite = !finite_row(b, V)};
        for (size_t j = 0; j < V; j++)
            if (fabs((double)a[j] - b[j]) > mm->max_diff || isnan(b[j]))
                mm->max_diff = fabs((double)a[j] - b[j]);
        mm->argmax_step = sampler_argmax(a, V), mm->argmax_verify = sampler_argmax(b, V);
        return false;
    }
    return true;
}

/* The verifies: (K rows, restore to row r) pairs in order, K = 1..dmax, r = 0..K-1; after the
 * last restore, one plain step must continue the reference too. */
static int vc_verifies(vcheck *v) {
    int k = 1, r = 0, p = 0, prev_r = -1;
    for (int i = 0; i < 10; i++) v->v_min[i] = 1e30;
    while (p + k <= v->n && !v->mm.found) {
        for (size_t j = 0; j < v->V * (size_t)k; j++) v->vl[j] = NAN;
        double tv = rl_now();
        if (engine_verify(v->c, v->tok + p, k, v->vl, v->snaps)) return -1;
        tv = rl_now() - tv;
        v->t_verify[k] += tv;
        if (tv < v->v_min[k]) v->v_min[k] = tv;
        v->n_k[k]++;
        v->n_verifies++;
        if (!vc_rows_agree(v, p, k, prev_r)) break;
        if (engine_snapshot_restore(v->c, v->snaps[r])) return -1;
        v->n_restores++;
        v->pairs++;
        if (engine_pos(v->c) != p + r + 1)
            return rl_seterr("after restoring row %d of a %d-row verify at %d the position is %d, not %d", r,
                             k, p, engine_pos(v->c), p + r + 1);
        p += r + 1;
        prev_r = r;
        if (++r == k) r = 0, k = k % v->K + 1;
    }
    if (!v->mm.found && p < v->n) {
        for (size_t j = 0; j < v->V; j++) v->vl[j] = NAN;
        if (engine_step(v->c, v->tok[p], v->vl)) return -1;
        v->rows++;
        if (memcmp(v->vl, v->plain + (size_t)p * v->V, sizeof(float) * v->V))
            v->mm = (mismatch){
                .found = true, .pos = p, .k = 1, .row = 0, .restored_row = prev_r, .verify_index = -1};
    }
    return 0;
}

/* --timing: rows 1 (a step) .. K at the current position, restored after each; min and median. */
static int vc_timing(vcheck *v) {
    long long timing = v->timing;
    RL_ASSERT(timing > 0 && timing <= 1000); /* --timing's bounds (opts_table.c); col[] below */
    int K = v->K;
    double *tm = malloc(sizeof(double) * (size_t)timing * (size_t)K); /* [timing][K] seconds */
    engine_snapshot *base = engine_snapshot_new(v->c);
    int rc = -1;
    if (!tm || !base || engine_snapshot_save(v->c, base)) goto out;
    int p0 = engine_pos(v->c);
    int32_t rowtok[9];
    for (int i = 0; i < K; i++) rowtok[i] = v->tok[(p0 + i) % v->n];
    for (long long rep = 0; rep < timing; rep++)
        for (int rows = 1; rows <= K; rows++) {
            engine_snapshot *sn[9];
            for (int i = 0; i < rows; i++) sn[i] = i < rows - 1 ? v->snaps[i] : NULL;
            double tv = rl_now();
            int e1 = rows == 1 ? engine_step(v->c, rowtok[0], v->vl)
                               : engine_verify(v->c, rowtok, rows, v->vl, sn);
            tm[rep * K + rows - 1] = rl_now() - tv;
            if (e1 || engine_snapshot_restore(v->c, base)) goto out;
        }
    for (int rows = 1; rows <= K; rows++) {
        double col[1000];
        for (long long rep = 0; rep < timing; rep++) col[rep] = tm[rep * K + rows - 1];
        for (long long x = 1; x < timing; x++) /* insertion sort: timing <= 1000 */
            for (long long y = x; y > 0 && col[y] < col[y - 1]; y--) {
                double t = col[y];
                col[y] = col[y - 1], col[y - 1] = t;
            }
        /* col[0..timing) was filled above and timing >= 1 (cppcheck does not follow the loop) */
        // cppcheck-suppress uninitvar
        v->t_min[rows - 1] = col[0];
        v->t_med[rows - 1] = timing % 2 ? col[timing / 2] : 0.5 * (col[timing / 2 - 1] + col[timing / 2]);
    }
    rc = 0;
out:
    engine_snapshot_free(base);
    free(tm);
    return rc;
}

/* {"1": ms, ...} of the row counts that ran */
static void json_ms_by_rows(json_writer *j, const char *key, const vcheck *v, const double *t, bool mean) {
    json_key(j, key);
    json_obj_begin(j);
    for (int i = 1; i <= v->K; i++) {
        if (!v->n_k[i]) continue;
        char k[8];
        snprintf(k, sizeof k, "%d", i);
        json_kv_num(j, k, 1e3 * t[i] / (mean ? v->n_k[i] : 1));
    }
    json_obj_end(j);
}

static int vc_report_json(const vcheck *v, const char *cmode) {
    const mismatch *mm = &v->mm;
    int K = v->K, total_pairs = K * (K + 1) / 2;
    json_writer j;
    cli_json_begin(&j);
    json_kv_bool(&j, "ok", !mm->found);
    json_kv_str(&j, "model", v->o->model);
    json_kv_str(&j, "backend", engine_backend_name(v->e));
    json_kv_str(&j, "kv", engine_kv_format(v->c));
    json_kv_str(&j, "cache", cmode);
    json_kv_int(&j, "n", v->n);
    json_kv_int(&j, "draft", K - 1);
    json_kv_int(&j, "verifies", v->n_verifies);
    json_kv_int(&j, "restores", v->n_restores);
    json_kv_int(&j, "rows_compared", v->rows);
    json_kv_int(&j, "pairs_covered", v->pairs < total_pairs ? v->pairs : total_pairs);
    json_kv_int(&j, "pairs_total", total_pairs);
    json_kv_num(&j, "step_ms", 1e3 * v->t_steps / (double)v->n);
    json_kv_num(&j, "step_min_ms", 1e3 * v->step_min);
    json_ms_by_rows(&j, "verify_ms", v, v->t_verify, true);
    json_ms_by_rows(&j, "verify_min_ms", v, v->v_min, false);
    if (v->timing > 0 && !mm->found) {
        json_key(&j, "timing");
        json_obj_begin(&j);
        json_kv_int(&j, "rounds", v->timing);
        for (int pass = 0; pass < 2; pass++) {
            json_key(&j, pass ? "median_ms" : "min_ms");
            json_obj_begin(&j);
            for (int rows = 1; rows <= K; rows++) {
                char key[16];
                snprintf(key, sizeof key, "%d", rows);
                json_kv_num(&j, key, 1e3 * (pass ? v->t_med : v->t_min)[rows - 1]);
            }
            json_obj_end(&j);
        }
        json_obj_end(&j);
    }
    json_key(&j, "first_mismatch");
    if (mm->found) {
        json_obj_begin(&j);
        json_kv_int(&j, "position", mm->pos);
        json_kv_int(&j, "rows", mm->k);
        json_kv_int(&j, "row", mm->row);
        json_kv_int(&j, "after_restore_to_row", mm->restored_row);
        json_kv_num(&j, "max_abs_diff", mm->max_diff);
        json_kv_bool(&j, "argmax_agrees", mm->argmax_step == mm->argmax_verify);
        json_obj_end(&j);
    } else {
        json_null(&j);
    }
    return cli_json_end(&j);
}

static void vc_report_text(const vcheck *v, const char *cmode) {
    int K = v->K, total_pairs = K * (K + 1) / 2;
    double step_ms = 1e3 * v->t_steps / (double)v->n;
    printf("verify-check: OK — %d verifies of 1..%d rows with %d rollbacks (%d of %d (rows, rollback row) "
           "pairs), %lld rows bit-identical to %lld steps (backend %s, experts %s)\n",
           v->n_verifies, K, v->n_restores, v->pairs < total_pairs ? v->pairs : total_pairs, total_pairs,
           v->rows, v->n, engine_backend_name(v->e), cmode);
    printf("timing (mean / min): step %.2f / %.2f ms", step_ms, 1e3 * v->step_min);
    for (int i = 1; i <= K; i++)
        if (v->n_k[i])
            printf(" | %d rows %.2f / %.2f ms (%.2fx / %.2fx)", i, 1e3 * v->t_verify[i] / v->n_k[i],
                   1e3 * v->v_min[i], 1e3 * v->t_verify[i] / v->n_k[i] / step_ms, v->v_min[i] / v->step_min);
    printf("\n");
    if (v->timing > 0) {
        printf("timing, %lld rounds at one position (median, relative to the median step):", v->timing);
        for (int rows = 1; rows <= K; rows++)
            printf(" %d rows %.2f ms (%.2fx)%s", rows, 1e3 * v->t_med[rows - 1],
                   v->t_med[rows - 1] / v->t_med[0], rows < K ? " |" : "\n");
    }
}

static void vc_report_mismatch(const mismatch *mm) {
    if (mm->verify_index < 0)
        fprintf(stderr,
                "redlite verify-check: MISMATCH at position %d: the plain step after the last rollback (to "
                "row %d) differs from the reference\n",
                mm->pos, mm->restored_row);
    else
        fprintf(stderr,
                "redlite verify-check: MISMATCH at position %d: row %d of verify #%d (%d rows, after a "
                "rollback to "
                "row %d) differs from the single step: max |diff| %.3g%s, argmax %zu vs %zu\n",
                mm->pos, mm->row, mm->verify_index, mm->k, mm->restored_row, mm->max_diff,
                mm->nonfinite ? " (non-finite values)" : "", mm->argmax_verify, mm->argmax_step);
}

static void vc_free(vcheck *v) {
    for (int i = 0; i < 9; i++) engine_snapshot_free(v->snaps[i]);
    free(v->plain);
    free(v->vl);
    free(v->tok);
    session_free(v->S);
    session_model_close(v->sm);
}

int cmd_verify_check(int argc, char **argv) {
    cli_opts o;
    opts_defaults(&o);
    o.backend = NULL; /* the session's default */
    o.cache_spec = NULL;
    o.n_predict = 200;
    o.draft = 8;
    o.bench_seed = 1;
    int r = opts_parse(&VERIFY, argc, argv, &o);
    if (r) return r == OPTS_HELP ? 0 : r;
    vcheck v = {.o = &o, .n = o.n_predict, .timing = o.timing, .K = (int)o.draft + 1};
    int rc = 1;
    if (vc_setup(&v) || vc_reference(&v) || vc_verifies(&v)) goto fail;
    if (!v.mm.found && v.timing > 0 && vc_timing(&v)) goto fail;
    expert_cache *ec = session_expert_cache(v.S);
    const char *cmode = ec ? ec_mode_name(expert_cache_mode(ec)) : "device (the backend holds every expert)";
    if (o.json) {
        if (vc_report_json(&v, cmode)) goto fail;
    } else if (!v.mm.found) {
        vc_report_text(&v, cmode);
    }
    if (v.mm.found) vc_report_mismatch(&v.mm);
    if (o.vram_spec && !o.json) session_print_cache_stats(v.S, stderr, false); /* the tier's counters */
    rc = v.mm.found ? 1 : 0;
    goto done;
fail:
    rc = cli_fail(CMD, 1, "%s", rl_lasterr()[0] ? rl_lasterr() : "out of memory");
done:
    vc_free(&v);
    return rc;
}
