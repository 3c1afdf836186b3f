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
#include "base/common.h"
#include "run/engine.h"
#include "cache/expert_cache.h"
#include "base/json.h"
#include "text/sampler.h"
#include "run/session.h"

static const char *CMD = "verify-check";

static void usage(FILE *out) {
    fprintf(out,
            "usage: redlite verify-check -m MODEL [options]\n"
            "\n"
            "Check that K-row verifies (with rollbacks to every row's snapshot) give logits\n"
            "bit-identical to single steps: the guarantee behind speculative decoding.\n"
            "\n"
            "  -m, --model FILE       GGUF model (qwen3next)\n"
            "  -n N                   tokens in the sequence (default 200: covers every (rows,\n"
            "                         rollback row) pair for --draft 8)\n"
            "  --draft K              most drafts per verify, 0..8 (default 8): verifies of 1..K+1\n"
            "                         rows, as the speculative loop makes (pending token + K drafts)\n"
            "  --backend B            cpu | cuda | auto (default cpu)\n"
            "  --kv f32|f16           KV cache elements (default " ENGINE_KV_DEFAULT_HELP ")\n"
            "  --cache-mib N|full|auto|mmap\n"
            "                         routed experts: bounded cache of N MiB, all resident, planned\n"
            "                         from RAM (default), or the plain mapping\n"
            "  -t, --threads N        threads (default: all CPUs)\n"
            "  --reference            CPU double-precision reference arithmetic\n"
            "  --seed S               seed of the token sequence (default 1)\n"
            "  --timing R             after the check, time R rounds of one step and of 2..K+1-row\n"
            "                         verifies at the same position (interleaved; snapshots as the\n"
            "                         speculative loop takes them), report min and median\n"
            "  --json                 one JSON object on stdout\n"
            "  -h, --help             this help\n");
}

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

int cmd_verify_check(int argc, char **argv) {
    const char *model = NULL, *backend = NULL, *cache = NULL, *kv = NULL;
    long long n = 200, dmax = 8, threads = 0, seed = 1, timing = 0;
    bool json = false, reference = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (cli_is_help(a)) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(model = cli_need_value(CMD, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--backend")) {
            if (!(backend = cli_need_value(CMD, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--kv")) {
            int k;
            if (!(kv = cli_need_value(CMD, argc, argv, &i))) return 2;
            if (engine_kv_parse(kv, &k)) return cli_fail(CMD, 2, "--kv expects f32 or f16, got '%s'", kv);
        } else if (!strcmp(a, "--cache-mib")) {
            if (!(cache = cli_need_value(CMD, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-n")) {
            if (!(v = cli_need_value(CMD, argc, argv, &i)) || !cli_parse_int(CMD, a, v, 2, 1 << 20, &n)) return 2;
        } else if (!strcmp(a, "--draft")) {
            if (!(v = cli_need_value(CMD, argc, argv, &i)) || !cli_parse_int(CMD, a, v, 0, 8, &dmax)) return 2;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!(v = cli_need_value(CMD, argc, argv, &i)) || !cli_parse_int(CMD, a, v, 0, 1024, &threads)) return 2;
        } else if (!strcmp(a, "--seed")) {
            if (!(v = cli_need_value(CMD, argc, argv, &i)) || !cli_parse_int(CMD, a, v, 0, UINT32_MAX, &seed))
                return 2;
        } else if (!strcmp(a, "--timing")) {
            if (!(v = cli_need_value(CMD, argc, argv, &i)) || !cli_parse_int(CMD, a, v, 0, 1000, &timing)) return 2;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--reference")) {
            reference = true;
        } else {
            return cli_fail(CMD, 2, "unknown option '%s' (see redlite verify-check --help)", a);
        }
    }
    if (!model) return cli_fail(CMD, 2, "need -m MODEL (see redlite verify-check --help)");

    int rc = 1, K = (int)dmax + 1; /* rows of the largest verify */
    /* the session opens the model and plans the expert cache as generate does; the check then
     * drives the engine context directly (no prefix reuse, no sampling) */
    session_model *sm = session_model_open(&(session_model_params){
        .model_path = model, .backend = backend, .n_threads = (int)threads, .reference = reference});
    session *S = NULL;
    engine *e = sm ? session_model_engine(sm) : NULL;
    engine_ctx *c = NULL;
    float *plain = NULL, *vl = NULL;
    int32_t *tok = NULL;
    engine_snapshot *snaps[9] = {0};
    if (!e) goto fail;
    size_t V = (size_t)engine_hparams(e)->n_vocab;
    S = session_new(sm, &(session_params){.n_ctx = (int)n + 16, .n_batch = K < 16 ? 16 : K, .kv = kv, .cache_spec = cache,
                                          .verbose = !json});
    if (!S) goto fail;
    c = session_ctx(S);
    plain = malloc(sizeof(float) * V * (size_t)n);
    vl = malloc(sizeof(float) * V * (size_t)K);
    tok = malloc(sizeof(int32_t) * (size_t)n);
    if (!plain || !vl || !tok) {
        rl_seterr("out of memory (%lld x %zu logits: lower -n)", n, V);
        goto fail;
    }
    for (int i = 0; i < K; i++)
        if (!(snaps[i] = engine_snapshot_new(c))) goto fail;
    uint64_t st = 0x9E3779B97F4A7C15ull ^ (uint64_t)seed * 0xD1B54A32D192ED03ull;
    if (!st) st = 1;
    for (long long i = 0; i < n; i++) tok[i] = (int32_t)(xs_next(&st) % V);

    /* the reference: one step per token (poisoned first, so an unwritten row fails) */
    /* times: the mean, and the minimum (the best estimate of the cost itself on a shared,
     * noisy machine: interference only ever adds) */
    double t0 = rl_now(), step_min = 1e30;
    for (long long p = 0; p < n; p++) {
        float *row = plain + (size_t)p * V;
        for (size_t j = 0; j < V; j++) row[j] = NAN;
        double ts = rl_now();
        if (engine_step(c, tok[p], row)) goto fail;
        ts = rl_now() - ts;
        if (p > 0 && ts < step_min) step_min = ts; /* the first step pays first touches */
    }
    double t_steps = rl_now() - t0;
    if (step_min > 1e29) step_min = t_steps;
    engine_reset(c);

    /* the verifies: (K rows, restore to row r) pairs in order, K = 1..dmax, r = 0..K-1 */
    mismatch mm = {0};
    int k = 1, r = 0, p = 0, n_verifies = 0, n_restores = 0, pairs = 0, prev_r = -1;
    long long rows = 0;
    double t_verify[10] = {0}, v_min[10];
    for (int i = 0; i < 10; i++) v_min[i] = 1e30;
    int n_k[10] = {0};
    while (p + k <= n && !mm.found) {
        for (size_t j = 0; j < V * (size_t)k; j++) vl[j] = NAN;
        double tv = rl_now();
        if (engine_verify(c, tok + p, k, vl, snaps)) goto fail;
        tv = rl_now() - tv;
        t_verify[k] += tv;
        if (tv < v_min[k]) v_min[k] = tv;
        n_k[k]++;
        n_verifies++;
        for (int i = 0; i < k; i++) {
            const float *a = plain + (size_t)(p + i) * V, *b = vl + (size_t)i * V;
            rows++;
            if (!memcmp(a, b, sizeof(float) * V) && finite_row(b, V)) continue;
            mm = (mismatch){.found = true, .pos = p + i, .k = k, .row = i, .restored_row = prev_r,
                            .verify_index = n_verifies, .nonfinite = !finite_row(b, V)};
            for (size_t j = 0; j < V; j++)
                if (fabs((double)a[j] - b[j]) > mm.max_diff || isnan(b[j])) mm.max_diff = fabs((double)a[j] - b[j]);
            mm.argmax_step = sampler_argmax(a, V), mm.argmax_verify = sampler_argmax(b, V);
            break;
        }
        if (mm.found) break;
        if (engine_snapshot_restore(c, snaps[r])) goto fail;
        n_restores++;
        pairs++;
        if (engine_pos(c) != p + r + 1) {
            rl_seterr("after restoring row %d of a %d-row verify at %d the position is %d, not %d", r, k, p,
                      engine_pos(c), p + r + 1);
            goto fail;
        }
        p += r + 1;
        prev_r = r;
        if (++r == k) r = 0, k = k % K + 1;
    }
    /* after the last restore, one plain step must continue the reference too */
    if (!mm.found && p < n) {
        for (size_t j = 0; j < V; j++) vl[j] = NAN;
        if (engine_step(c, tok[p], vl)) goto fail;
        rows++;
        if (memcmp(vl, plain + (size_t)p * V, sizeof(float) * V))
            mm = (mismatch){.found = true, .pos = p, .k = 1, .row = 0, .restored_row = prev_r, .verify_index = -1};
    }
    /* timing rounds: rows 1 (a step) .. K at the current position, restored after each */
    double *tm = NULL; /* [timing][K] seconds */
    if (!mm.found && timing > 0) {
        tm = malloc(sizeof(double) * (size_t)timing * (size_t)K);
        engine_snapshot *base = engine_snapshot_new(c);
        if (!tm || !base || engine_snapshot_save(c, base)) {
            engine_snapshot_free(base);
            goto fail;
        }
        int p0 = engine_pos(c);
        int32_t rowtok[9];
        for (int i = 0; i < K; i++) rowtok[i] = tok[(p0 + i) % n];
        for (long long rep = 0; rep < timing; rep++)
            for (int rows = 1; rows <= K; rows++) {
                engine_snapshot *sn[9];
                for (int i = 0; i < rows; i++) sn[i] = i < rows - 1 ? snaps[i] : NULL;
                double tv = rl_now();
                int e1 = rows == 1 ? engine_step(c, rowtok[0], vl) : engine_verify(c, rowtok, rows, vl, sn);
                tm[rep * K + rows - 1] = rl_now() - tv;
                if (e1 || engine_snapshot_restore(c, base)) {
                    engine_snapshot_free(base);
                    goto fail;
                }
            }
        engine_snapshot_free(base);
    }
    double t_min[9] = {0}, t_med[9] = {0};
    for (int rows = 1; tm && rows <= K; rows++) {
        double col[1000];
        for (long long rep = 0; rep < timing; rep++) col[rep] = tm[rep * K + rows - 1];
        for (long long x = 1; x < timing; x++) /* insertion sort: timing <= 1000 */
            for (long long y = x; y > 0 && col[y] < col[y - 1]; y--) {
                double t = col[y];
                col[y] = col[y - 1], col[y - 1] = t;
            }
        t_min[rows - 1] = col[0];
        t_med[rows - 1] = timing % 2 ? col[timing / 2] : 0.5 * (col[timing / 2 - 1] + col[timing / 2]);
    }
    free(tm);
    int total_pairs = K * (K + 1) / 2;
    double step_ms = 1e3 * t_steps / (double)n;
    expert_cache *ec = session_expert_cache(S);
    const char *cmode = ec ? ec_mode_name(expert_cache_mode(ec)) : "device (the backend holds every expert)";
    if (json) {
        json_writer j;
        cli_json_begin(&j);
        json_kv_bool(&j, "ok", !mm.found);
        json_kv_str(&j, "model", model);
        json_kv_str(&j, "backend", engine_backend_name(e));
        json_kv_str(&j, "kv", engine_kv_format(c));
        json_kv_str(&j, "cache", cmode);
        json_kv_int(&j, "n", n);
        json_kv_int(&j, "draft", K - 1);
        json_kv_int(&j, "verifies", n_verifies);
        json_kv_int(&j, "restores", n_restores);
        json_kv_int(&j, "rows_compared", rows);
        json_kv_int(&j, "pairs_covered", pairs < total_pairs ? pairs : total_pairs);
        json_kv_int(&j, "pairs_total", total_pairs);
        json_kv_num(&j, "step_ms", step_ms);
        json_kv_num(&j, "step_min_ms", 1e3 * step_min);
        json_key(&j, "verify_ms");
        json_obj_begin(&j);
        for (int i = 1; i <= K; i++) {
            if (!n_k[i]) continue;
            char key[8];
            snprintf(key, sizeof key, "%d", i);
            json_kv_num(&j, key, 1e3 * t_verify[i] / n_k[i]);
        }
        json_obj_end(&j);
        json_key(&j, "verify_min_ms");
        json_obj_begin(&j);
        for (int i = 1; i <= K; i++) {
            if (!n_k[i]) continue;
            char key[8];
            snprintf(key, sizeof key, "%d", i);
            json_kv_num(&j, key, 1e3 * v_min[i]);
        }
        json_obj_end(&j);
        if (timing > 0 && !mm.found) {
            json_key(&j, "timing");
            json_obj_begin(&j);
            json_kv_int(&j, "rounds", timing);
            for (int pass = 0; pass < 2; pass++) {
                json_key(&j, pass ? "median_ms" : "min_ms");
                json_obj_begin(&j);
                for (int rows = 1; rows <= K; rows++) {
                    char key[16];
                    snprintf(key, sizeof key, "%d", rows);
                    json_kv_num(&j, key, 1e3 * (pass ? t_med : t_min)[rows - 1]);
                }
                json_obj_end(&j);
            }
            json_obj_end(&j);
        }
        json_key(&j, "first_mismatch");
        if (mm.found) {
            json_obj_begin(&j);
            json_kv_int(&j, "position", mm.pos);
            json_kv_int(&j, "rows", mm.k);
            json_kv_int(&j, "row", mm.row);
            json_kv_int(&j, "after_restore_to_row", mm.restored_row);
            json_kv_num(&j, "max_abs_diff", mm.max_diff);
            json_kv_bool(&j, "argmax_agrees", mm.argmax_step == mm.argmax_verify);
            json_obj_end(&j);
        } else {
            json_null(&j);
        }
        if (cli_json_end(&j)) goto fail;
    } else if (!mm.found) {
        printf("verify-check: OK — %d verifies of 1..%d rows with %d rollbacks (%d of %d (rows, rollback row) "
               "pairs), %lld rows bit-identical to %lld steps (backend %s, experts %s)\n",
               n_verifies, K, n_restores, pairs < total_pairs ? pairs : total_pairs, total_pairs, rows, n,
               engine_backend_name(e), cmode);
        printf("timing (mean / min): step %.2f / %.2f ms", step_ms, 1e3 * step_min);
        for (int i = 1; i <= K; i++)
            if (n_k[i])
                printf(" | %d rows %.2f / %.2f ms (%.2fx / %.2fx)", i, 1e3 * t_verify[i] / n_k[i], 1e3 * v_min[i],
                       1e3 * t_verify[i] / n_k[i] / step_ms, v_min[i] / step_min);
        printf("\n");
        if (timing > 0) {
            printf("timing, %lld rounds at one position (median, relative to the median step):", timing);
            for (int rows = 1; rows <= K; rows++)
                printf(" %d rows %.2f ms (%.2fx)%s", rows, 1e3 * t_med[rows - 1], t_med[rows - 1] / t_med[0],
                       rows < K ? " |" : "\n");
        }
    }
    if (mm.found) {
        if (mm.verify_index < 0)
            fprintf(stderr, "redlite verify-check: MISMATCH at position %d: the plain step after the last rollback (to "
                    "row %d) differs from the reference\n", mm.pos, mm.restored_row);
        else
            fprintf(stderr,
                    "redlite verify-check: MISMATCH at position %d: row %d of verify #%d (%d rows, after a rollback to "
                    "row %d) differs from the single step: max |diff| %.3g%s, argmax %zu vs %zu\n",
                    mm.pos, mm.row, mm.verify_index, mm.k, mm.restored_row, mm.max_diff,
                    mm.nonfinite ? " (non-finite values)" : "", mm.argmax_verify, mm.argmax_step);
        rc = 1;
    } else {
        rc = 0;
    }
    goto done;
fail:
    rc = cli_fail(CMD, 1, "%s", rl_lasterr()[0] ? rl_lasterr() : "out of memory");
done:
    for (int i = 0; i < 9; i++) engine_snapshot_free(snaps[i]);
    free(plain);
    free(vl);
    free(tok);
    session_free(S);
    session_model_close(sm);
    return rc;
}
