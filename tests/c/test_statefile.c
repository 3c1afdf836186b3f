/* test_statefile.c — context state export/import and disk checkpoints on the tiny fixture:
 *   - engine_state_export + engine_state_import into a fresh context, then more tokens: logits
 *     bit-identical to a cold context that evaluated everything (and to the exporting one);
 *   - statefile: save, reopen the directory (index rebuilt from the files), restore the longest
 *     prefix, continue bit-identically; superseded files are replaced;
 *   - files of another model fingerprint are ignored and left alone; a corrupted or truncated
 *     file is rejected and deleted, the context is left reset; a size cap evicts the LRU file;
 *   - wrong-size imports are refused;
 *   - the model fingerprint covers the weights (a copy with one tensor byte changed differs),
 *     is cached by file identity (a tampered cache entry is believed, a new mtime recomputes);
 *   - only regular files are opened (a FIFO named *.rlstate does not hang the open), torn
 *     temporaries are deleted at open, missing parent directories are created, the cap counts
 *     other files and temporaries and keeps the newest, two handles on one directory (two
 *     servers) see each other's files and a file deleted by the other is a miss, not an error. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "gguf/gguf.h"
#include "base/common.h"
#include "run/engine.h"
#include "run/session.h"
#include "run/statefile.h"

#define N 37
#define M 9

static int count_files(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, ".rlstate")) n++;
    if (d) closedir(d);
    return n;
}

static void first_file(const char *dir, char *out, size_t cap) {
    DIR *d = opendir(dir);
    struct dirent *e;
    out[0] = 0;
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, ".rlstate")) {
            snprintf(out, cap, "%s/%s", dir, e->d_name);
            break;
        }
    if (d) closedir(d);
}

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long l = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)l + 1);
    *n = b ? fread(b, 1, (size_t)l, f) : 0;
    fclose(f);
    return b;
}

static void clean(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[4096];
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.' || strlen(e->d_name) > 2) {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
    if (d) closedir(d);
    rmdir(dir);
}

int main(void) {
    const char *model = "tests/fixtures/tiny-a.gguf";
    if (access(model, R_OK) != 0) {
        CHECK(0, "fixture %s is missing", model);
        return check_done("test_statefile");
    }
    engine *e = engine_open(model, &(engine_params){.n_threads = 2});
    CHECK(e != NULL, "open: %s", rl_lasterr());
    if (!e) return check_done("test_statefile");
    int V = engine_hparams(e)->n_vocab;
    engine_ctx_params cp = {.n_ctx = 128, .n_batch = 8, .kv = "f32"};
    engine_ctx *a = engine_ctx_new(e, &cp), *b = engine_ctx_new(e, &cp), *cold = engine_ctx_new(e, &cp);
    float *la = malloc(sizeof(float) * V), *lb = malloc(sizeof(float) * V), *lc = malloc(sizeof(float) * V);
    int32_t t[N + M];
    rl_rng rng;
    rl_rng_seed(&rng, 7);
    for (int i = 0; i < N + M; i++) t[i] = (int32_t)(rl_rng_u64(&rng) % (uint64_t)V);

    /* export after N tokens, import into a fresh context, continue with M more */
    CHECK(engine_prefill(a, t, N, NULL) == 0, "prefill: %s", rl_lasterr());
    size_t sb = engine_state_bytes(a, N);
    CHECK(sb > 0, "state bytes");
    void *blob = malloc(sb);
    CHECK(engine_state_export(a, blob, sb) == 0, "export: %s", rl_lasterr());
    CHECK(engine_state_export(a, blob, sb - 1) == -1, "export with a wrong size must fail");
    CHECK(engine_state_import(b, N, blob, sb - 4) == -1 && engine_pos(b) == 0,
          "import with a wrong size must fail");
    CHECK(engine_state_import(b, N, blob, sb) == 0 && engine_pos(b) == N, "import: %s", rl_lasterr());
    check_poison(la, V);
    check_poison(lb, V);
    check_poison(lc, V);
    CHECK(engine_prefill(a, t + N, M, la) == 0, "continue a");
    CHECK(engine_prefill(b, t + N, M, lb) == 0, "continue b");
    CHECK(engine_prefill(cold, t, N + M, lc) == 0, "cold");
    CHECK(!memcmp(la, lc, sizeof(float) * V), "exporting context == cold");
    CHECK(!memcmp(lb, lc, sizeof(float) * V), "imported context == cold (bit-identical)");
    /* single steps after an import, too */
    CHECK(engine_state_import(b, N, blob, sb) == 0, "re-import");
    for (int i = N; i < N + M; i++) CHECK(engine_step(b, t[i], lb) == 0, "step");
    CHECK(!memcmp(lb, lc, sizeof(float) * V), "steps after import == cold");

    /* export from a snapshot after decoding past it (what the server does after an answer) */
    engine_snapshot *snap = engine_snapshot_new(a);
    engine_reset(a);
    CHECK(engine_prefill(a, t, N, NULL) == 0 && engine_snapshot_save(a, snap) == 0, "snapshot at N");
    CHECK(engine_prefill(a, t + N, M, NULL) == 0, "decode past the snapshot");
    memset(blob, 0xAB, sb);
    CHECK(engine_state_export_snapshot(a, snap, blob, sb) == 0, "export snapshot: %s", rl_lasterr());
    engine_reset(b);
    CHECK(engine_state_import(b, N, blob, sb) == 0, "import snapshot state");
    check_poison(lb, V);
    CHECK(engine_prefill(b, t + N, M, lb) == 0, "continue");
    CHECK(!memcmp(lb, lc, sizeof(float) * V), "state exported from a snapshot == cold (bit-identical)");
    engine_snapshot_free(snap);

    /* the checkpoint directory */
    char dir[] = "/tmp/rl-statefile-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    uint64_t fp = statefile_model_fingerprint(engine_gguf(e), NULL);
    const char *fmt = engine_state_format(a);
    CHECK(!strcmp(fmt, "cpu/f32"), "format %s", fmt);
    statefile_dir *d = statefile_open(dir, 0, fp, fmt);
    CHECK(d != NULL, "open dir: %s", rl_lasterr());
    engine_reset(a);
    CHECK(engine_prefill(a, t, 20, NULL) == 0, "prefill 20");
    CHECK(statefile_save(d, a, NULL, t, 20) == 0, "save 20: %s", rl_lasterr());
    CHECK(engine_prefill(a, t + 20, N - 20, NULL) == 0, "prefill to N");
    CHECK(statefile_save(d, a, NULL, t, N) == 0, "save N: %s", rl_lasterr());
    CHECK(count_files(dir) == 1, "the N file supersedes the 20 file (%d files)", count_files(dir));
    statefile_close(d);

    d = statefile_open(dir, 0, fp, fmt); /* index from the files */
    CHECK(statefile_best(d, t, N + M, 0, N + M - 1) == N, "best prefix");
    CHECK(statefile_best(d, t, N + M, N, N + M - 1) == 0, "nothing longer than min_pos");
    int32_t other[N + M];
    memcpy(other, t, sizeof other);
    other[5] ^= 1;
    CHECK(statefile_best(d, other, N + M, 0, N + M - 1) == 0, "a different prefix does not match");
    engine_reset(b);
    CHECK(statefile_restore(d, b, t, N + M, 0, N + M - 1) == N, "restore: %s", rl_lasterr());
    check_poison(lb, V);
    CHECK(engine_prefill(b, t + N, M, lb) == 0, "continue restored");
    CHECK(!memcmp(lb, lc, sizeof(float) * V), "restored from disk == cold (bit-identical)");
    statefile_close(d);

    /* another model's fingerprint: ignored, left alone */
    d = statefile_open(dir, 0, fp ^ 1, fmt);
    CHECK(statefile_best(d, t, N + M, 0, N + M - 1) == 0, "other model: ignored");
    statefile_close(d);
    d = statefile_open(dir, 0, fp, "cuda/f16");
    CHECK(statefile_best(d, t, N + M, 0, N + M - 1) == 0, "other format: ignored");
    statefile_close(d);
    CHECK(count_files(dir) == 1, "ignored files are kept");

    /* the KV format travels with the state: an f16 context saves "cpu/f16" checkpoints (half the
     * KV bytes), restores them bit-exactly, and an f32 context never takes them (a widened f16
     * cache would not continue like a cold f32 evaluation, so no conversion: the files are
     * ignored and kept, and a raw import of the blob is refused with the format named) */
    {
        engine_ctx_params hp16 = {.n_ctx = 128, .n_batch = 8, .kv = "f16"};
        engine_ctx *h = engine_ctx_new(e, &hp16), *hcold = engine_ctx_new(e, &hp16);
        CHECK(h && hcold, "f16 ctx: %s", rl_lasterr());
        const char *f16fmt = h ? engine_state_format(h) : "";
        CHECK(!strcmp(f16fmt, "cpu/f16"), "f16 format %s", f16fmt);
        char dir16[] = "/tmp/rl-statefile16-XXXXXX";
        CHECK(mkdtemp(dir16) != NULL, "mkdtemp");
        CHECK(h && engine_prefill(h, t, N, NULL) == 0, "f16 prefill");
        size_t sb16 = h ? engine_state_bytes(h, N) : 0;
        const q3n_hparams *hpar = engine_hparams(e);
        size_t kvrow = (size_t)hpar->n_head_kv * hpar->head_dim;
        int n_attn = 0;
        for (int il = 0; il < hpar->n_layer; il++) n_attn += hpar->is_attn[il];
        CHECK(sb - sb16 == (size_t)n_attn * 2 * kvrow * N * 2,
              "f16 state saves half the KV bytes (%zu vs %zu)", sb16, sb);
        statefile_dir *d16 = statefile_open(dir16, 0, fp, f16fmt);
        CHECK(d16 && statefile_save(d16, h, NULL, t, N) == 0, "save f16: %s", rl_lasterr());
        statefile_close(d16);
        statefile_dir *d32 = statefile_open(dir16, 0, fp, fmt);
        CHECK(statefile_best(d32, t, N + M, 0, N + M - 1) == 0 &&
                  statefile_restore(d32, b, t, N + M, 0, N + M - 1) == 0,
              "an f32 context must not take an f16 checkpoint");
        statefile_close(d32);
        CHECK(count_files(dir16) == 1, "the f16 checkpoint is kept for f16 sessions");
        void *blob16 = malloc(sb16);
        CHECK(h && blob16 && engine_state_export(h, blob16, sb16) == 0, "f16 export");
        CHECK(engine_state_import(b, N, blob16, sb16) == -1 && strstr(rl_lasterr(), "KV f32"),
              "raw import of an f16 "
              "state into an f32 context: %s",
              rl_lasterr());
        free(blob16);
        engine_ctx *h2 = engine_ctx_new(e, &hp16);
        d16 = statefile_open(dir16, 0, fp, f16fmt);
        CHECK(h2 && statefile_restore(d16, h2, t, N + M, 0, N + M - 1) == N, "restore f16: %s", rl_lasterr());
        float *l16 = malloc(sizeof(float) * V), *l16c = malloc(sizeof(float) * V);
        check_poison(l16, V);
        check_poison(l16c, V);
        CHECK(h2 && engine_prefill(h2, t + N, M, l16) == 0, "continue f16");
        CHECK(hcold && engine_prefill(hcold, t, N + M, l16c) == 0, "cold f16");
        CHECK(!memcmp(l16, l16c, sizeof(float) * V), "f16 restored from disk == cold f16 (bit-identical)");
        statefile_close(d16);
        free(l16), free(l16c);
        engine_ctx_free(h), engine_ctx_free(h2), engine_ctx_free(hcold);
        char p16[4096];
        first_file(dir16, p16, sizeof p16);
        unlink(p16);
        rmdir(dir16);
    }

    /* corruption: a flipped byte in the state is caught by the checksum, the file deleted */
    char path[4096];
    first_file(dir, path, sizeof path);
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL, "open %s", path);
    if (f) {
        fseek(f, -100, SEEK_END);
        int ch = fgetc(f);
        fseek(f, -100, SEEK_END);
        fputc(ch ^ 0x40, f);
        fclose(f);
    }
    d = statefile_open(dir, 0, fp, fmt);
    CHECK(statefile_best(d, t, N + M, 0, N + M - 1) == N, "corrupt file still indexed (header is fine)");
    CHECK(engine_prefill(b, t, 3, NULL) == 0 || 1, "dirty b");
    CHECK(statefile_restore(d, b, t, N + M, 0, N + M - 1) == -1, "corrupt file rejected");
    CHECK(engine_pos(b) == 0, "context reset after a rejected file");
    CHECK(count_files(dir) == 0, "corrupt file deleted");
    statefile_close(d);

    /* truncated file: deleted when the directory is opened */
    d = statefile_open(dir, 0, fp, fmt);
    engine_reset(a);
    CHECK(engine_prefill(a, t, N, NULL) == 0, "prefill");
    CHECK(statefile_save(d, a, NULL, t, N) == 0, "save");
    statefile_close(d);
    first_file(dir, path, sizeof path);
    struct stat st;
    stat(path, &st);
    CHECK(truncate(path, st.st_size - 10) == 0, "truncate");
    d = statefile_open(dir, 0, fp, fmt);
    CHECK(count_files(dir) == 0 && statefile_best(d, t, N + M, 0, N + M) == 0, "truncated file deleted");
    statefile_close(d);

    /* size cap: room for one file only; the least recently used goes */
    uint64_t one = sizeof(int32_t) * N + engine_state_bytes(a, N) + 200;
    d = statefile_open(dir, one + one / 2, fp, fmt);
    CHECK(statefile_save(d, a, NULL, t, N) == 0, "save 1");
    engine_reset(a);
    CHECK(engine_prefill(a, other, N, NULL) == 0, "prefill other");
    CHECK(statefile_save(d, a, NULL, other, N) == 0, "save 2");
    CHECK(count_files(dir) == 1, "LRU trim keeps one file (%d)", count_files(dir));
    CHECK(statefile_best(d, other, N + 1, 0, N) == N && statefile_best(d, t, N + 1, 0, N) == 0,
          "the newest stays");
    statefile_stats ss;
    statefile_get_stats(d, &ss);
    CHECK(ss.saves == 2 && ss.n_files == 1, "stats");
    statefile_close(d);

    /* two servers on one directory (replicas behind a load balancer): each finds what the other
     * saved after it opened the directory, forgets what the other removed, and a file removed
     * between the lookup and the restore is a miss that leaves the context as it was */
    {
        char rdir[] = "/tmp/rl-statefile-rep-XXXXXX";
        CHECK(mkdtemp(rdir) != NULL, "mkdtemp");
        statefile_dir *r1 = statefile_open(rdir, 0, fp, fmt), *r2 = statefile_open(rdir, 0, fp, fmt);
        CHECK(r1 && r2, "open twice: %s", rl_lasterr());
        engine_reset(a);
        CHECK(engine_prefill(a, t, N, NULL) == 0 && statefile_save(r1, a, NULL, t, N) == 0, "save on 1");
        CHECK(statefile_best(r2, t, N + M, 0, N + M - 1) == N, "2 sees the file 1 saved after 2 opened");
        engine_reset(b);
        CHECK(statefile_restore(r2, b, t, N + M, 0, N + M - 1) == N, "2 restores it: %s", rl_lasterr());
        check_poison(lb, V);
        CHECK(engine_prefill(b, t + N, M, lb) == 0 && !memcmp(lb, lc, sizeof(float) * V),
              "restored from the other server's file == cold (bit-identical)");
        /* 2 saves a longer state of the conversation: it supersedes 1's file (deleted by 2) */
        CHECK(statefile_save(r2, b, NULL, t, N + M) == 0 && count_files(rdir) == 1, "2 supersedes (%d files)",
              count_files(rdir));
        CHECK(statefile_best(r1, t, N + M + 1, 0, N + M) == N + M,
              "1 sees 2's state, not its own deleted one");
        statefile_stats st1;
        statefile_get_stats(r1, &st1);
        CHECK(st1.n_files == 1, "1 forgot the file 2 deleted (%d indexed)", st1.n_files);
        /* the file goes between 2's lookup and its restore: a miss, the context untouched */
        char rp[4096];
        first_file(rdir, rp, sizeof rp);
        CHECK(statefile_best(r2, t, N + M + 1, 0, N + M) == N + M && unlink(rp) == 0, "remove under 2");
        engine_reset(b);
        CHECK(engine_prefill(b, other, 5, NULL) == 0, "b holds 5 tokens");
        CHECK(statefile_restore(r2, b, t, N + M + 1, 0, N + M) == 0 && engine_pos(b) == 5,
              "a vanished file is a miss");
        statefile_stats st2;
        statefile_get_stats(r2, &st2);
        CHECK(st2.rejected == 0 && st2.n_files == 0, "not counted as rejected (%lld), forgotten (%d)",
              st2.rejected, st2.n_files);
        /* the size cap (room for two files) counts the other server's files, and reads the use
         * time of the victim from its file first: X saved by 2, Y by 1, then 2 uses X (its file
         * time moves past Y's), then 1 saves Z: Y is the least recently used and goes, not X */
        statefile_close(r1);
        uint64_t one = sizeof(int32_t) * N + engine_state_bytes(a, N) + 200;
        r1 = statefile_open(rdir, 2 * one + one / 2, fp, fmt);
        int32_t third[N + M];
        memcpy(third, t, sizeof third);
        third[0] ^= 1;
        char px[4096];
        engine_reset(a);
        CHECK(engine_prefill(a, t, N, NULL) == 0 && statefile_save(r2, a, NULL, t, N) == 0, "2 saves X");
        first_file(rdir, px, sizeof px);
        CHECK(statefile_best(r1, t, N + 1, 0, N) == N, "1 indexes X");
        engine_reset(a);
        CHECK(engine_prefill(a, other, N, NULL) == 0 && statefile_save(r1, a, NULL, other, N) == 0,
              "1 saves Y");
        struct timespec used[2] = {{time(NULL) + 5, 0}, {time(NULL) + 5, 0}};
        CHECK(utimensat(AT_FDCWD, px, used, 0) == 0, "2 uses X");
        engine_reset(a);
        CHECK(engine_prefill(a, third, N, NULL) == 0 && statefile_save(r1, a, NULL, third, N) == 0,
              "1 saves Z");
        CHECK(count_files(rdir) == 2, "1's cap counts 2's file (%d files)", count_files(rdir));
        CHECK(statefile_best(r1, t, N + 1, 0, N) == N && statefile_best(r1, third, N + 1, 0, N) == N &&
                  statefile_best(r1, other, N + 1, 0, N) == 0,
              "X (used by 2) and Z stay, Y goes");
        statefile_close(r1);
        statefile_close(r2);
        clean(rdir);
    }

    /* a session adopts an imported state: the next feed evaluates only the rest, bit-identically */
    session_model *sm = session_model_open(&(session_model_params){.model_path = model, .n_threads = 2});
    CHECK(sm != NULL, "session model: %s", rl_lasterr());
    if (sm) {
        session_params spp = {.n_ctx = 128, .n_batch = 8};
        session *s1 = session_new(sm, &spp), *s2 = session_new(sm, &spp), *s3 = session_new(sm, &spp);
        session_feed_stats fst;
        CHECK(session_feed(s1, t, N, NULL, &fst) == 0, "feed s1");
        size_t sb2 = engine_state_bytes(session_ctx(s1), N);
        void *b2 = malloc(sb2);
        CHECK(engine_state_export(session_ctx(s1), b2, sb2) == 0, "export s1");
        CHECK(session_feed(s2, other, 11, NULL, &fst) == 0, "s2 holds something else first");
        CHECK(engine_state_import(session_ctx(s2), N, b2, sb2) == 0, "import into s2");
        CHECK(session_adopt(s2, t, N) == 0, "adopt: %s", rl_lasterr());
        CHECK(session_adopt(s3, t, N) == -1, "adopt refuses tokens that do not match the position");
        int hn;
        session_history(s2, &hn);
        CHECK(hn == N && session_logits(s2) == NULL, "adopted history, no logits yet");
        CHECK(session_feed(s2, t, N + M, NULL, &fst) == 0 && fst.n_reused == N && fst.n_evaluated == M,
              "feed after adopt: reused %d evaluated %d", fst.n_reused, fst.n_evaluated);
        CHECK(session_feed(s3, t, N + M, NULL, NULL) == 0, "cold session");
        CHECK(!memcmp(session_logits(s2), session_logits(s3), sizeof(float) * V), "adopted session == cold");
        free(b2);
        session_free(s1);
        session_free(s2);
        session_free(s3);
        session_model_close(sm);
    }

    /* ---- the fingerprint covers the weights, and is cached ---- */
    {
        char cdir[] = "/tmp/rl-sf-fp-XXXXXX";
        CHECK(mkdtemp(cdir) != NULL, "mkdtemp");
        char copy[4200], cache[4200];
        snprintf(copy, sizeof copy, "%s/copy.gguf", cdir);
        snprintf(cache, sizeof cache, "%s/.model-hashes", cdir);
        size_t n;
        char *bytes = slurp(model, &n);
        CHECK(bytes != NULL, "read the fixture");
        FILE *f = bytes ? fopen(copy, "wb") : NULL;
        if (f) {
            bytes[n - 7] ^= 0x01; /* one bit of the last tensor's data: same layout, other weights */
            fwrite(bytes, 1, n, f);
            fclose(f);
        }
        free(bytes);
        gguf_file *g1 = gguf_open(model), *g2 = gguf_open(copy);
        CHECK(g1 && g2, "open both: %s", rl_lasterr());
        if (g1 && g2) {
            uint64_t f1 = statefile_model_fingerprint(g1, NULL), f2 = statefile_model_fingerprint(g2, NULL);
            CHECK(f1 && f2 && f1 != f2, "one weight bit changes the fingerprint (%llx %llx)",
                  (unsigned long long)f1, (unsigned long long)f2);
            CHECK(f1 == fp, "the same file, the same fingerprint");
            uint64_t c1 = statefile_model_fingerprint(g2, cdir), c2 = statefile_model_fingerprint(g2, cdir);
            CHECK(c1 == f2 && c2 == f2, "cached == computed");
            /* the cache is believed (no re-read): tamper with the entry's hash */
            char *txt = slurp(cache, &n);
            int lines = 0;
            for (size_t i = 0; txt && i < n; i++) lines += txt[i] == '\n';
            CHECK(txt && lines == 1, "one cache line (%d)", lines);
            char *sp = txt ? strstr(txt, " /") : NULL; /* "... HASH16 PATH" */
            if (sp && sp - txt > 16) {
                sp[-1] = sp[-1] == '0' ? '1' : '0';
                FILE *w = fopen(cache, "wb");
                fwrite(txt, 1, n, w);
                fclose(w);
            }
            free(txt);
            CHECK(statefile_model_fingerprint(g2, cdir) != f2,
                  "the cached hash is used, the weights not re-read");
            gguf_close(g2);
            struct timespec ts[2] = {{0, UTIME_OMIT}, {12345, 0}};
            utimensat(AT_FDCWD, copy, ts, 0); /* another mtime: another identity */
            g2 = gguf_open(copy);
            CHECK(g2 && statefile_model_fingerprint(g2, cdir) == f2,
                  "a changed file identity is hashed again");
        }
        gguf_close(g1);
        gguf_close(g2);
        unlink(copy);
        unlink(cache);
        rmdir(cdir);
    }

    /* ---- directory hygiene ---- */
    {
        char base[] = "/tmp/rl-sf-dir-XXXXXX";
        CHECK(mkdtemp(base) != NULL, "mkdtemp");
        char sd[4200], p1[4300], p2[4300], p3[4300];
        snprintf(sd, sizeof sd, "%s/a/b/state", base);
        statefile_dir *d1 = statefile_open(sd, 0, fp, fmt);
        CHECK(d1 != NULL, "missing parents are created: %s", rl_lasterr());
        statefile_close(d1);
        snprintf(p1, sizeof p1, "%s/fifo.rlstate", sd);
        snprintf(p2, sizeof p2, "%s/.tmp-999999-abc", sd);
        CHECK(mkfifo(p1, 0600) == 0, "mkfifo");
        FILE *tf = fopen(p2, "wb");
        if (tf) fputs("torn", tf), fclose(tf);
        alarm(30); /* a hang is a failure, not a stuck test */
        double t0 = rl_now();
        d1 = statefile_open(sd, 0, fp, fmt);
        CHECK(d1 && rl_now() - t0 < 5, "a FIFO named *.rlstate does not block the open");
        alarm(0);
        CHECK(access(p2, F_OK) != 0, "a torn temporary is deleted at open");
        CHECK(access(p1, F_OK) == 0, "the FIFO is left alone (not ours)");
        unlink(p1);
        /* two servers on one directory: d2 sees d1's file; cap counts everything, keeps the newest */
        uint64_t one = sizeof(int32_t) * N + engine_state_bytes(a, N) + 200;
        statefile_close(d1);
        d1 = statefile_open(sd, 2 * one + one / 2, fp, fmt);
        statefile_dir *d2 = statefile_open(sd, 2 * one + one / 2, fp, fmt);
        engine_reset(a);
        CHECK(engine_prefill(a, t, N, NULL) == 0 && statefile_save(d1, a, NULL, t, N) == 0, "d1 saves");
        CHECK(statefile_best(d2, t, N + 1, 0, N) == N, "d2 sees d1's checkpoint without reopening");
        /* an unrelated big file (another model's, say): older, and counted against the cap */
        snprintf(p3, sizeof p3, "%s/zz-other.rlstate", sd);
        FILE *of = fopen(p3, "wb");
        char *junk = calloc(1, one);
        if (of && junk) fwrite(junk, 1, one, of), fclose(of);
        free(junk);
        struct timespec old[2] = {{1000, 0}, {1000, 0}};
        utimensat(AT_FDCWD, p3, old, 0);
        engine_reset(a);
        CHECK(engine_prefill(a, other, N, NULL) == 0 && statefile_save(d2, a, NULL, other, N) == 0,
              "d2 saves");
        CHECK(access(p3, F_OK) != 0, "the oldest file goes when the directory is over the cap");
        CHECK(count_files(sd) == 2, "both servers' files fit (%d)", count_files(sd));
        int32_t third[N];
        memcpy(third, other, sizeof third);
        third[0] ^= 3;
        engine_reset(a);
        CHECK(engine_prefill(a, third, N, NULL) == 0 && statefile_save(d2, a, NULL, third, N) == 0,
              "d2 saves again");
        CHECK(count_files(sd) == 2, "still two files (%d)", count_files(sd));
        CHECK(statefile_best(d2, third, N + 1, 0, N) == N, "the newest is kept");
        /* d1's own file was the oldest: gone; d1 restoring it is a miss, its context untouched */
        engine_reset(b);
        CHECK(engine_prefill(b, t, 3, NULL) == 0, "b holds 3 tokens");
        CHECK(statefile_restore(d1, b, t, N + 1, 0, N) == 0 && engine_pos(b) == 3,
              "a checkpoint deleted by the other server is a miss (pos %d)", engine_pos(b));
        statefile_stats ss1;
        statefile_get_stats(d1, &ss1);
        CHECK(ss1.rejected == 0, "not counted as rejected");
        statefile_close(d1);
        statefile_close(d2);
        clean(sd);
        char q[4300];
        snprintf(q, sizeof q, "%s/a/b", base);
        rmdir(q);
        snprintf(q, sizeof q, "%s/a", base);
        rmdir(q);
        rmdir(base);
    }

    clean(dir);
    free(blob);
    free(la);
    free(lb);
    free(lc);
    engine_ctx_free(a);
    engine_ctx_free(b);
    engine_ctx_free(cold);
    engine_close(e);
    return check_done("test_statefile");
}
