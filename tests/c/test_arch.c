/* test_arch.c — the model description of src/qwen3next.{h,c}: the tensor table and the
 * activation names.
 *
 * Checks: every entry has a name, a role and a consistent shape; names round-trip through
 * q3n_tensor_lookup (global and block names, any block index) and near-misses are rejected; the
 * block entries are contiguous (synth's file order depends on it); the activation names
 * round-trip and are distinct; and against a real file (synth tiny with its MTP block, written
 * here): every tensor of the file is a table entry, every entry that the block kinds call for is
 * in the file with the table's shape, q3n_load binds every required field, and no tensor of the
 * file is left unbound (counted through the fields).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "base/common.h"
#include "gguf/gguf.h"
#include "model/qwen3next.h"
#include "model/synth.h"

static void test_table(void) {
    int first_block = -1, last_block = -1, n_alt = 0;
    for (int id = 0; id < Q3N_T_COUNT; id++) {
        const q3n_tensor_desc *d = q3n_tensor((q3n_tensor_id)id);
        CHECK(d && d->name && d->role && d->role[0], "entry %d", id);
        CHECK(d->ne[0] != Q3N_DIM_NONE, "%s has no first dimension", d->name);
        CHECK(d->routed == (d->ne[2] == Q3N_DIM_E), "%s: routed iff stacked over experts", d->name);
        CHECK(d->field >= 0 || d->need == Q3N_ALTERNATIVE, "%s has no binding field", d->name);
        if (d->need == Q3N_ALTERNATIVE) n_alt++;
        bool global = d->kind == Q3N_KIND_GLOBAL;
        CHECK(global == (strncmp(d->name, "blk.%d.", 7) != 0), "%s: block names start blk.%%d.", d->name);
        if (!global) {
            if (first_block < 0) first_block = id;
            CHECK(last_block < 0 || last_block == id - 1, "%s: block entries are not contiguous", d->name);
            last_block = id;
        }
        /* round trip, two block indices */
        int ils[2] = {0, 4711};
        for (int k = 0; k < 2; k++) {
            char name[128];
            q3n_tensor_name((q3n_tensor_id)id, ils[k], name, sizeof name);
            int il = -2, got = q3n_tensor_lookup(name, &il);
            CHECK(got == id && il == (global ? -1 : ils[k]), "%s -> %d (block %d)", name, got, il);
        }
        for (int j = 0; j < id; j++)
            CHECK(strcmp(q3n_tensor((q3n_tensor_id)j)->name, d->name) != 0, "%s listed twice", d->name);
    }
    CHECK(n_alt == 2, "alternatives: ssm_in and gate_up_exps (%d)", n_alt);
    CHECK(q3n_tensor(Q3N_T_COUNT) == NULL, "past the end");
    CHECK(q3n_tensor(Q3N_T_TOKEN_EMBD)->kind == Q3N_KIND_GLOBAL && first_block == Q3N_T_TOKEN_EMBD + 1,
          "token_embd leads");
    const char *bad[] = {"blk.x.attn_q.weight",
                         "blk.3.attn_q.bias",
                         "blk.3.",
                         "blk.3.token_embd.weight",
                         "token_embd",
                         "blk..attn_norm.weight",
                         "blk.3attn_norm.weight",
                         "xblk.3.attn_norm.weight",
                         "attn_norm.weight",
                         ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(q3n_tensor_lookup(bad[i], NULL) == -1, "'%s' accepted", bad[i]);
    CHECK(q3n_tensor_is_routed("blk.7.ffn_down_exps.weight") &&
              !q3n_tensor_is_routed("blk.7.ffn_down_shexp.weight"),
          "routed");
}

static void test_acts(void) {
    for (int a = 0; a < Q3N_ACT_COUNT; a++) {
        const char *n = q3n_act_name((q3n_act)a);
        CHECK(n && strcmp(n, "?") && q3n_act_find(n) == a, "activation %d '%s'", a, n ? n : "(null)");
    }
    CHECK(q3n_act_find("l_out") == Q3N_ACT_L_OUT && q3n_act_find("nope") == -1, "find");
    CHECK(!strcmp(q3n_act_name(Q3N_ACT_COUNT), "?"), "out of range name");
}

/* path (a "/tmp/..._XXXXXX" template) made an empty file of our own; false (checked) if mkstemp fails */
static bool tmp_file(char *path) {
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0) return false;
    close(fd);
    return true;
}

static void test_file(void) {
    char path[] = "/tmp/rl_test_arch_XXXXXX";
    if (!tmp_file(path)) return;
    synth_params p = {.preset = SYNTH_TINY, .seed = 3, .mtp = true, .n_threads = 1};
    synth_geom_default(SYNTH_TINY, &p.g);
    CHECK(synth_write(&p, path, NULL) == 0, "synth: %s", rl_lasterr());
    gguf_file *f = gguf_open(path);
    CHECK(f != NULL, "open: %s", rl_lasterr());
    if (!f) {
        unlink(path);
        return;
    }
    q3n_model m;
    int rc = q3n_load(&m, f);
    CHECK(rc == 0, "load: %s", rl_lasterr());
    if (rc == 0) {
        const q3n_hparams *hp = &m.hp;
        CHECK(hp->n_layer == p.g.n_layer && hp->n_nextn == 1, "blocks %d + %d", hp->n_layer, hp->n_nextn);
        /* every file tensor is a table entry of a kind its block has */
        int n_expected = 0;
        for (uint64_t i = 0; i < f->n_tensors; i++) {
            int il, id = q3n_tensor_lookup(f->tensors[i].name, &il);
            CHECK(id >= 0, "%s is not in the table", f->tensors[i].name);
            if (id < 0) continue;
            const q3n_tensor_desc *d = q3n_tensor((q3n_tensor_id)id);
            CHECK(d->kind == Q3N_KIND_GLOBAL || q3n_kind_in_block(hp, d->kind, il), "%s in block %d",
                  f->tensors[i].name, il);
        }
        /* every entry the blocks call for is there with the table's shape, and bound */
        for (int il = -1; il < hp->n_layer + hp->n_nextn; il++)
            for (int id = 0; id < Q3N_T_COUNT; id++) {
                const q3n_tensor_desc *d = q3n_tensor((q3n_tensor_id)id);
                bool here =
                    il < 0 ? d->kind == Q3N_KIND_GLOBAL : q3n_tensor_in_block(hp, (q3n_tensor_id)id, il);
                if (!here || d->need == Q3N_ALTERNATIVE) continue;
                n_expected++;
                char name[128];
                const gguf_tensor *t =
                    gguf_find_tensor(f, q3n_tensor_name((q3n_tensor_id)id, il, name, sizeof name));
                CHECK(t != NULL, "%s missing", name);
                if (!t) continue;
                int64_t n = 1;
                for (int k = 0; k < 3; k++) {
                    int64_t want = d->ne[k] == Q3N_DIM_NONE ? 1 : q3n_dim_value(hp, d->ne[k]);
                    n *= want;
                    if (!d->vec)
                        CHECK(t->ne[k] == want, "%s ne[%d] = %lld, table %lld", name, k, (long long)t->ne[k],
                              (long long)want);
                }
                CHECK(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3] == n, "%s: %lld values", name, (long long)n);
                const char *base = il < 0 ? (const char *)&m : (const char *)&m.layers[il];
                const void *bound = d->vec ? (const void *)*(float *const *)(base + d->field)
                                           : (const void *)((const ops_mat *)(base + d->field))->data;
                CHECK(bound != NULL, "%s not bound", name);
            }
        CHECK((uint64_t)n_expected == f->n_tensors, "file has %llu tensors, the table calls for %d",
              (unsigned long long)f->n_tensors, n_expected);
        /* block kinds: the tiny model is DDDA + the MTP block (attention) */
        const char *map = "DDDAA";
        for (int il = 0; il < hp->n_layer + hp->n_nextn; il++)
            CHECK(q3n_block_is_attn(hp, il) == (map[il] == 'A') && hp->is_attn[il] == (map[il] == 'A'),
                  "block %d", il);
        CHECK(!q3n_kind_in_block(hp, Q3N_KIND_MOE, hp->n_layer + hp->n_nextn), "past the last block");
        q3n_free(&m);
    }
    gguf_close(f);
    unlink(path);
}

/* A geometry the checks pass but the types do not fit (expert rows of 100 values, not a multiple
 * of the 256-value blocks): synth_write fails with the geometry error after many tensors were
 * planned, and frees the plan without touching it (it used to free the tensor array and then walk
 * it by the old count: a NULL dereference). */
static void test_bad_rows(void) {
    char path[] = "/tmp/rl_test_arch_XXXXXX";
    if (!tmp_file(path)) return;
    synth_params p = {.preset = SYNTH_TINY, .seed = 3, .n_threads = 1};
    synth_geom_default(SYNTH_TINY, &p.g);
    p.g.n_ff_exp = 100;
    CHECK(synth_geom_check(&p) == 0, "the checks accept it: %s", rl_lasterr());
    CHECK(synth_write(&p, path, NULL) == -1, "synth_write accepted expert rows of 100 values");
    CHECK(strstr(rl_lasterr(), "not a multiple") != NULL, "error: %s", rl_lasterr());
    unlink(path);
}

int main(void) {
    test_table();
    test_acts();
    test_file();
    test_bad_rows();
    return check_done("test_arch");
}
