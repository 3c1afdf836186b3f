/* opts.c — the option table and its parser / help printer (see opts.h). */
#include "cli/opts.h"

#include "cache/vram_plan.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "base/common.h"
#include "run/engine.h"
#include "run/spec.h"
#include "cache/vram_plan.h"

typedef enum { K_FLAG, K_STR, K_I64, K_I32, K_U32, K_F32, K_FN } opt_kind;

typedef struct opt {
    unsigned cmds;       /* CMD_* bits of the commands that take it */
    const char *section; /* help heading */
    const char *names;   /* "-m, --model" */
    const char *value;   /* value name; NULL for a switch */
    const char *help;    /* '\n' continues on the next help line */
    opt_kind kind;
    size_t off;       /* field in cli_opts */
    double lo, hi;    /* bounds of numbers (inclusive) */
    const char *zero; /* how the default reads when the value is 0 / NULL ("all CPUs") */
    /* K_FN: validate and store v; 0, or -1 after cli_fail */
    int (*set)(const char *cmd, const char *flag, const char *v, cli_opts *o);
} opt;

#define ALL (CMD_GENERATE | CMD_CHAT | CMD_BENCH | CMD_DUMP | CMD_PERPLEXITY | CMD_SERVE)
#define GEN (CMD_GENERATE | CMD_CHAT | CMD_SERVE)
#define OFF(f) offsetof(cli_opts, f)

static int set_backend(const char *cmd, const char *flag, const char *v, cli_opts *o) {
    if (strcmp(v, "cpu") && strcmp(v, "cuda") && strcmp(v, "auto"))
        return cli_fail(cmd, 2, "%s expects cpu, cuda or auto, got '%s'", flag, v), -1;
    o->backend = v;
    return 0;
}

static int set_weights(const char *cmd, const char *flag, const char *v, cli_opts *o) {
    if (strcmp(v, "copy") && strcmp(v, "map")) return cli_fail(cmd, 2, "%s expects copy or map, got '%s'", flag, v), -1;
    o->weights = v;
    return 0;
}

static int set_kv(const char *cmd, const char *flag, const char *v, cli_opts *o) {
    int k;
    if (engine_kv_parse(v, &k)) return cli_fail(cmd, 2, "%s expects f32 or f16, got '%s'", flag, v), -1;
    o->kv = v;
    return 0;
}

/* The syntax here (a usage error); the planner checks the budget against the model later. */
static int set_cache(const char *cmd, const char *flag, const char *v, cli_opts *o) {
    if (strcmp(v, "auto") && strcmp(v, "full") && strcmp(v, "mmap")) {
        char *end;
        errno = 0;
        double mib = strtod(v, &end);
        if (end == v || *end || errno || !(mib > 0) || mib > 1e9)
            return cli_fail(cmd, 2, "%s expects a number of MiB above 0, 'auto', 'full' or 'mmap', got '%s'",
                            flag, v),
                   -1;
    }
    o->cache_spec = v;
    o->cache_set = true;
    return 0;
}

/* --vram-mib: the syntax here; the VRAM planner checks the budget against the model and device. */
static int set_vram(const char *cmd, const char *flag, const char *v, cli_opts *o) {
    if (vram_spec_check(v)) return cli_fail(cmd, 2, "%s expects auto, full or a number of MiB above 0, got '%s'", flag, v), -1;
    o->vram_spec = v;
    return 0;
}

static int set_vram_pin(const char *cmd, const char *flag, const char *v, cli_opts *o) {
    vram_pin_mode m;
    if (vram_pin_parse(v, &m) || !*v) return cli_fail(cmd, 2, "%s expects auto, on or off, got '%s'", flag, v), -1;
    o->vram_pin = v;
    return 0;
}

static int set_vram_miss(const char *cmd, const char *flag, const char *v, cli_opts *o) {
    vram_miss_mode m;
    if (vram_miss_parse(v, &m) || !*v) return cli_fail(cmd, 2, "%s expects copy, cpu or auto, got '%s'", flag, v), -1;
    o->vram_miss = v;
    return 0;
}

static int set_stop(const char *cmd, const char *flag, const char *v, cli_opts *o) {
    if (!*v) return cli_fail(cmd, 2, "%s needs a non-empty string", flag), -1;
    if (o->n_stops == OPTS_MAX_STOPS)
        return cli_fail(cmd, 2, "at most %d %s strings", OPTS_MAX_STOPS, flag), -1;
    o->stops[o->n_stops++] = v;
    return 0;
}

static int set_spec(const char *cmd, const char *flag, const char *v, cli_opts *o) {
    int m = spec_mode_parse(v);
    if (m < 0) return cli_fail(cmd, 2, "%s expects none, lookup, mtp or auto, got '%s'", flag, v), -1;
    o->spec_name = v;
    o->spec = (spec_mode)m;
    o->spec_set = true;
    return 0;
}

static int set_prompts(const char *cmd, const char *flag, const char *v, cli_opts *o) {
    int n = 0;
    if (strcmp(v, "0") && strcmp(v, "none")) {
        for (const char *p = v;;) {
            char *end;
            long x = strtol(p, &end, 10);
            if (end == p || x <= 0 || x > (1 << 24) || n == 16 || (*end && *end != ','))
                return cli_fail(cmd, 2, "%s expects up to 16 lengths like 512,2048 (or 0), got '%s'", flag,
                                v),
                       -1;
            o->prompts[n++] = (int)x;
            if (!*end) break;
            p = end + 1;
        }
    }
    o->n_prompts = n;
    o->prompt = v;
    return 0;
}

static int set_layers(const char *cmd, const char *flag, const char *v, cli_opts *o) {
    int a, b;
    char c;
    if (sscanf(v, "%d-%d%c", &a, &b, &c) != 2 && (sscanf(v, "%d%c", &a, &c) != 1))
        return cli_fail(cmd, 2, "%s expects A-B or A, got '%s'", flag, v), -1;
    o->layers = v;
    return 0;
}

static const opt TABLE[] = {
    /* input */
    {.cmds = ALL,
     .section = "input",
     .names = "-m, --model",
     .value = "FILE",
     .help = "GGUF model file (qwen3next)",
     .kind = K_STR,
     .off = OFF(model)},
    {.cmds = CMD_GENERATE,
     .section = "input",
     .names = "-p, --prompt",
     .value = "TEXT",
     .help = "prompt text (special tokens like <|im_start|> are parsed)",
     .kind = K_STR,
     .off = OFF(prompt)},
    {.cmds = CMD_CHAT,
     .section = "input",
     .names = "-p, --prompt",
     .value = "TEXT",
     .help = "send TEXT as the first message, print the answer and exit",
     .kind = K_STR,
     .off = OFF(prompt)},
    {.cmds = CMD_GENERATE,
     .section = "input",
     .names = "-f, --file",
     .value = "FILE",
     .help = "read the prompt from FILE (\"-\" = stdin)",
     .kind = K_STR,
     .off = OFF(file)},
    {.cmds = CMD_PERPLEXITY,
     .section = "input",
     .names = "-f, --file",
     .value = "FILE",
     .help = "text to score (\"-\" = stdin); special tokens in it are plain text",
     .kind = K_STR,
     .off = OFF(file)},
    {.cmds = CMD_GENERATE | CMD_CHAT,
     .section = "input",
     .names = "--system",
     .value = "TEXT",
     .help = "system message (chat template)",
     .kind = K_STR,
     .off = OFF(system)},
    {.cmds = CMD_GENERATE,
     .section = "input",
     .names = "--raw",
     .value = NULL,
     .help = "no chat template: complete the text as is",
     .kind = K_FLAG,
     .off = OFF(raw)},
    {.cmds = CMD_CHAT,
     .section = "input",
     .names = "--history",
     .value = "FILE",
     .help = "load earlier turns from FILE and append each new turn to it\n(lines \"user: ...\" / "
             "\"assistant: ...\", "
             "newlines written as \\n)",
     .kind = K_STR,
     .off = OFF(history)},
    {.cmds = CMD_GENERATE | CMD_CHAT,
     .section = "input",
     .names = "-n, --n-predict, --max-tokens",
     .value = "N",
     .help = "most tokens per answer (-1 = until the answer ends)",
     .kind = K_I64,
     .off = OFF(n_predict),
     .lo = -1,
     .hi = 1 << 24},
    {.cmds = CMD_BENCH,
     .section = "measurements",
     .names = "--prompt",
     .value = "LIST",
     .help = "prompt lengths to ingest, comma separated (0 = none)",
     .kind = K_FN,
     .off = OFF(prompt),
     .lo = 0,
     .hi = 0,
     .zero = NULL,
     .set = set_prompts},
    {.cmds = CMD_BENCH,
     .section = "measurements",
     .names = "--n-decode",
     .value = "N",
     .help = "decode steps per timed run",
     .kind = K_I64,
     .off = OFF(n_decode),
     .lo = 1,
     .hi = 1 << 24},
    {.cmds = CMD_BENCH,
     .section = "measurements",
     .names = "--reps",
     .value = "N",
     .help = "timed runs per measurement; the median is reported",
     .kind = K_I64,
     .off = OFF(reps),
     .lo = 1,
     .hi = 64},
    {.cmds = CMD_BENCH,
     .section = "measurements",
     .names = "--warmup",
     .value = "N",
     .help = "untimed decode steps first",
     .kind = K_I64,
     .off = OFF(warmup),
     .lo = 0,
     .hi = 1 << 24},
    {.cmds = CMD_BENCH,
     .section = "measurements",
     .names = "--depth",
     .value = "N",
     .help = "also decode after N tokens of filled context",
     .kind = K_I64,
     .off = OFF(depth),
     .lo = 0,
     .hi = 1 << 24,
     .zero = "0: off"},
    {.cmds = CMD_BENCH,
     .section = "measurements",
     .names = "--seed",
     .value = "N",
     .help = "seed of the random token ids",
     .kind = K_I64,
     .off = OFF(bench_seed),
     .lo = 0,
     .hi = INT64_MAX},
    {.cmds = CMD_BENCH,
     .section = "measurements",
     .names = "--profile",
     .value = NULL,
     .help = "per-stage time breakdown of a decode run and of the first prompt (CPU: also the decode at --depth)",
     .kind = K_FLAG,
     .off = OFF(profile)},
    {.cmds = CMD_DUMP,
     .section = "dump",
     .names = "--tokens",
     .value = "IDS",
     .help = "comma-separated token ids, or @FILE with whitespace/comma separated ids",
     .kind = K_STR,
     .off = OFF(tokens)},
    {.cmds = CMD_DUMP,
     .section = "dump",
     .names = "--greedy",
     .value = "N",
     .help = "then generate N tokens greedily, one step each",
     .kind = K_I64,
     .off = OFF(greedy),
     .lo = 0,
     .hi = 1 << 20},
    {.cmds = CMD_DUMP,
     .section = "dump",
     .names = "--mtp",
     .value = "FILE",
     .help = "then run the MTP head over every pair (hidden p, token p+1) of the\nsequence and write its "
             "float32 draft "
             "logits (rows x n_vocab)",
     .kind = K_STR,
     .off = OFF(mtp_path)},
    {.cmds = CMD_DUMP,
     .section = "dump",
     .names = "--logits",
     .value = "FILE",
     .help = "write float32 logits of every prompt and generated position",
     .kind = K_STR,
     .off = OFF(logits_path)},
    {.cmds = CMD_DUMP,
     .section = "dump",
     .names = "--routes",
     .value = "FILE",
     .help = "write router choices as JSON lines {layer,row,ids,w,p}",
     .kind = K_STR,
     .off = OFF(routes_path)},
    {.cmds = CMD_DUMP,
     .section = "dump",
     .names = "--acts",
     .value = "FILE",
     .help = "write named activations (float32) to FILE and an index to FILE.json",
     .kind = K_STR,
     .off = OFF(acts_path)},
    {.cmds = CMD_DUMP,
     .section = "dump",
     .names = "--names",
     .value = "a,b,...",
     .help = "activation names to dump; e.g. attn_norm, attn_out, ffn_inp, ffn_norm,\nffn_out, l_out, "
             "dn_conv, dn_gated, "
             "attn_gated, inp_embd, result_norm",
     .kind = K_STR,
     .off = OFF(names)},
    {.cmds = CMD_DUMP,
     .section = "dump",
     .names = "--layers",
     .value = "A-B",
     .help = "only layers A..B",
     .kind = K_FN,
     .off = OFF(layers),
     .lo = 0,
     .hi = 0,
     .zero = "all",
     .set = set_layers},
    {.cmds = CMD_DUMP,
     .section = "dump",
     .names = "--fast",
     .value = NULL,
     .help = "fast SIMD kernels (quantised activations) instead of the reference",
     .kind = K_FLAG,
     .off = OFF(fast)},
    {.cmds = CMD_DUMP,
     .section = "dump",
     .names = "--check-fast",
     .value = NULL,
     .help = "with --fast: recompute every product from the same quantised\nactivations in double and report "
             "mismatches on "
             "stderr (slow)",
     .kind = K_FLAG,
     .off = OFF(check_fast)},
    /* model */
    {.cmds = CMD_PERPLEXITY,
     .section = "model",
     .names = "-c, --ctx, --ctx-size",
     .value = "N",
     .help = "window size in tokens (the file needs at least 2 x N tokens)",
     .kind = K_I64,
     .off = OFF(n_ctx),
     .lo = 3, /* the smallest window that scores a token: N - N/2 - 1 >= 1 */
     .hi = 1 << 20},
    {.cmds = CMD_GENERATE | CMD_CHAT | CMD_SERVE,
     .section = "model",
     .names = "-c, --ctx, --context",
     .value = "N",
     .help = "context size in tokens",
     .kind = K_I64,
     .off = OFF(n_ctx),
     .lo = 16,
     .hi = 1 << 24,
     .zero = "prompt + n, at least 4096; serve: the trained length as memory allows"},
    {.cmds = ALL,
     .section = "model",
     .names = "-b, --batch",
     .value = "N|auto",
     .help = "prompt rows per forward; auto: the backend's (CPU: 512, or 2048 where\n"
             "AMX tiles run the experts); scratch grows with it (redlite info --batch N)",
     .kind = K_I64,
     .off = OFF(batch),
     .lo = 0,
     .hi = 4096,
     .zero = "auto"},
    {.cmds = ALL,
     .section = "model",
     .names = "-t, --threads",
     .value = "N",
     .help = "CPU threads",
     .kind = K_I64,
     .off = OFF(threads),
     .lo = 0,
     .hi = 1024,
     .zero = "all CPUs"},
    {.cmds = ALL,
     .section = "model",
     .names = "--backend",
     .value = "B",
     .help = "cpu | cuda | auto",
     .kind = K_FN,
     .off = OFF(backend),
     .lo = 0,
     .hi = 0,
     .zero = "cpu",
     .set = set_backend},
    {.cmds = ALL,
     .section = "model",
     .names = "--kv",
     .value = "f32|f16",
     .help = "KV cache elements: f16 halves its memory (rounded on store,\nexact f32 math after; see docs/ENGINE.md)",
     .kind = K_FN,
     .off = OFF(kv),
     .lo = 0,
     .hi = 0,
     .zero = ENGINE_KV_DEFAULT_HELP,
     .set = set_kv},
    {.cmds = ALL,
     .section = "model",
     .names = "--iq-repack",
     .value = NULL,
     .help = "CPU: repack IQ2_XXS/IQ2_XS/IQ1_M matrices (experts, dense) at load into\na lookup-free layout "
             "(same output, ~2x faster kernels, 1.9-2.5x their\nmemory; all resident)",
     .kind = K_FLAG,
     .off = OFF(iq_repack)},
    {.cmds = ALL,
     .section = "model",
     .names = "--weights",
     .value = "copy|map",
     .help = "CPU: copy the streamed matrices (dense; the experts too when all are\nresident) into huge-page "
             "memory at load (same output, fewer TLB misses:\ndecode +20-30 % on a 2-core Xeon), or serve them "
             "from the file mapping",
     .kind = K_FN,
     .off = OFF(weights),
     .lo = 0,
     .hi = 0,
     .zero = "copy",
     .set = set_weights},
    {.cmds = ALL,
     .section = "model",
     .names = "--cache-mib",
     .value = "N|full|auto|mmap",
     .help = "routed experts: a bounded cache of N MiB (same output), all resident\n(full), planned from the "
             "RAM (auto) or "
             "the plain file mapping (mmap)",
     .kind = K_FN,
     .off = OFF(cache_spec),
     .lo = 0,
     .hi = 0,
     .zero = "auto",
     .set = set_cache},
    {.cmds = CMD_GENERATE | CMD_CHAT | CMD_BENCH | CMD_DUMP | CMD_PERPLEXITY | CMD_SERVE,
     .section = "model",
     .names = "--vram-mib",
     .value = "N|auto|full",
     .help = "GPU: routed experts in a VRAM slot cache of a budget of N MiB\n(everything on the device: weights, "
             "context, slots; same output), what\nthe device has free (auto), or all resident (full)",
     .kind = K_FN,
     .off = OFF(vram_spec),
     .lo = 0,
     .hi = 0,
     .zero = "full",
     .set = set_vram},
    {.cmds = CMD_GENERATE | CMD_CHAT | CMD_BENCH | CMD_DUMP | CMD_PERPLEXITY | CMD_SERVE,
     .section = "model",
     .names = "--vram-pin",
     .value = "auto|on|off",
     .help = "with --vram-mib: page-lock the host tier (slot fills by DMA); auto:\nthe RAM cache, or the file "
             "mapping if its experts are <= 60 % of RAM",
     .kind = K_FN,
     .off = OFF(vram_pin),
     .lo = 0,
     .hi = 0,
     .zero = "auto",
     .set = set_vram_pin},
    {.cmds = CMD_GENERATE | CMD_CHAT | CMD_BENCH | CMD_DUMP | CMD_PERPLEXITY | CMD_SERVE,
     .section = "model",
     .names = "--vram-miss",
     .value = "copy|cpu|auto",
     .help = "with --vram-mib, decode/verify of <= 8 rows: an expert not in VRAM is\ncopied (copy: same output), "
             "computed on the CPU (cpu), or either by\nmeasured cost (auto); cpu/auto CHANGE OUTPUTS slightly",
     .kind = K_FN,
     .off = OFF(vram_miss),
     .lo = 0,
     .hi = 0,
     .zero = "copy",
     .set = set_vram_miss},
    {.cmds = CMD_GENERATE | CMD_CHAT | CMD_DUMP | CMD_SERVE,
     .section = "model",
     .names = "--route-bias",
     .value = "L",
     .help = "cache-aware routing: prefer resident experts when scores are\nwithin L (CHANGES OUTPUTS; "
             "bounded cache only; 0 = "
             "exact routing)",
     .kind = K_F32,
     .off = OFF(route_bias),
     .lo = 0,
     .hi = 1},
    {.cmds = CMD_GENERATE | CMD_CHAT | CMD_DUMP | CMD_PERPLEXITY | CMD_SERVE,
     .section = "model",
     .names = "--route-trace",
     .value = "FILE",
     .help = "record every token's expert choices as JSON lines (tools/cache_sim.py)",
     .kind = K_STR,
     .off = OFF(route_trace)},
    {.cmds = CMD_BENCH | CMD_PERPLEXITY,
     .section = "model",
     .names = "--reference",
     .value = NULL,
     .help = "CPU: the double-precision reference arithmetic instead of the fast kernels",
     .kind = K_FLAG,
     .off = OFF(reference)},
    /* sampling */
    {.cmds = GEN,
     .section = "sampling (llama.cpp's chain: penalties -> top-k -> top-p -> min-p -> temperature)",
     .names = "--temp, --temperature",
     .value = "T",
     .help = "temperature; 0 = greedy",
     .kind = K_F32,
     .off = OFF(sp.temp),
     .lo = 0,
     .hi = 100},
    {.cmds = GEN,
     .section = NULL,
     .names = "--top-k",
     .value = "N",
     .help = "keep the N most likely tokens (0 = off)",
     .kind = K_I32,
     .off = OFF(sp.top_k),
     .lo = 0,
     .hi = INT32_MAX},
    {.cmds = GEN,
     .section = NULL,
     .names = "--top-p",
     .value = "P",
     .help = "keep the smallest set with probability >= P (1 = off)",
     .kind = K_F32,
     .off = OFF(sp.top_p),
     .lo = 0,
     .hi = 1},
    {.cmds = GEN,
     .section = NULL,
     .names = "--min-p",
     .value = "P",
     .help = "drop tokens below P x the best one's probability (0 = off)",
     .kind = K_F32,
     .off = OFF(sp.min_p),
     .lo = 0,
     .hi = 1},
    {.cmds = GEN,
     .section = NULL,
     .names = "--repeat-penalty",
     .value = "R",
     .help = "penalise tokens seen in the last --repeat-last-n tokens (1 = off)",
     .kind = K_F32,
     .off = OFF(sp.repeat_penalty),
     .lo = 0.01,
     .hi = 100},
    {.cmds = GEN,
     .section = NULL,
     .names = "--repeat-last-n",
     .value = "N",
     .help = "history length for the penalties (-1 = the context)",
     .kind = K_I32,
     .off = OFF(sp.repeat_last_n),
     .lo = -1,
     .hi = INT32_MAX},
    {.cmds = GEN,
     .section = NULL,
     .names = "--presence-penalty",
     .value = "A",
     .help = "subtract A from every token seen (0 = off)",
     .kind = K_F32,
     .off = OFF(sp.presence_penalty),
     .lo = -2,
     .hi = 2},
    {.cmds = GEN,
     .section = NULL,
     .names = "--frequency-penalty",
     .value = "F",
     .help = "subtract F per occurrence (0 = off)",
     .kind = K_F32,
     .off = OFF(sp.frequency_penalty),
     .lo = -2,
     .hi = 2},
    {.cmds = GEN,
     .section = NULL,
     .names = "--seed",
     .value = "S",
     .help = "random seed",
     .kind = K_U32,
     .off = OFF(sp.seed),
     .lo = 0,
     .hi = UINT32_MAX},
    {.cmds = GEN,
     .section = NULL,
     .names = "--stop",
     .value = "STR",
     .help = "stop when STR is generated (repeatable; STR is not printed)",
     .kind = K_FN,
     .off = 0,
     .lo = 0,
     .hi = 0,
     .zero = NULL,
     .set = set_stop},
    {.cmds = GEN,
     .section = "speculative decoding (never changes the tokens, only the speed; docs/SPECULATION.md)",
     .names = "--spec",
     .value = "MODE",
     .help = "none | lookup (copy from the prompt and the answer where they repeat) |\nmtp (the model's MTP "
             "head) | auto (mtp when the model has a head, lookup on\nlong matches and otherwise)",
     .kind = K_FN,
     .off = OFF(spec_name),
     .set = set_spec},
    {.cmds = GEN,
     .section = NULL,
     .names = "--draft-max",
     .value = "N",
     .help = "at most N drafted tokens per verify",
     .kind = K_I32,
     .off = OFF(draft_max),
     .lo = 1,
     .hi = SPEC_DRAFT_MAX},
    {.cmds = GEN,
     .section = NULL,
     .names = "--draft-min",
     .value = "N",
     .help = "draft at least N tokens whenever a source has drafts; 0: K (0 included)\nfrom the measured verify cost and acceptance",
     .kind = K_I32,
     .off = OFF(draft_min),
     .lo = 0,
     .hi = SPEC_DRAFT_MAX},
    /* output */
    {.cmds = CMD_GENERATE,
     .section = "output",
     .names = "--json",
     .value = NULL,
     .help = "print one JSON object (ids, text, stop reason, timings) instead of text",
     .kind = K_FLAG,
     .off = OFF(json)},
    {.cmds = CMD_BENCH,
     .section = "output",
     .names = "--json",
     .value = NULL,
     .help = "print one JSON object instead of the table",
     .kind = K_FLAG,
     .off = OFF(json)},
    {.cmds = CMD_PERPLEXITY,
     .section = "output",
     .names = "--json",
     .value = NULL,
     .help = "print one JSON object (ppl, nll, counts, per-window values)",
     .kind = K_FLAG,
     .off = OFF(json)},
    {.cmds = CMD_PERPLEXITY,
     .section = "perplexity",
     .names = "--chunks",
     .value = "N",
     .help = "evaluate only the first N windows",
     .kind = K_I64,
     .off = OFF(chunks),
     .lo = 1,
     .hi = 1 << 30,
     .zero = "all"},
    {.cmds = CMD_PERPLEXITY,
     .section = "perplexity",
     .names = "--mtp-accept",
     .value = NULL,
     .help = "also measure the MTP head's draft acceptance (teacher-forced)",
     .kind = K_FLAG,
     .off = OFF(mtp_accept)},
    {.cmds = CMD_PERPLEXITY,
     .section = "perplexity",
     .names = "--tokens-out",
     .value = "FILE",
     .help = "one JSON line per scored position: window, position, next token,\nits NLL, the trunk's top-1 "
             "(and the MTP draft with --mtp-accept)",
     .kind = K_STR,
     .off = OFF(tokens_out)},
    {.cmds = CMD_DUMP,
     .section = "output",
     .names = "--json",
     .value = NULL,
     .help = "print {prompt, generated} ids as JSON on stdout",
     .kind = K_FLAG,
     .off = OFF(json)},
    {.cmds = CMD_GENERATE | CMD_CHAT,
     .section = "output",
     .names = "--stats",
     .value = NULL,
     .help = "on stderr at the end: load time, prompt and decode tok/s, stop reason,\npeak memory, where the "
             "weights live (--weights), and the expert cache's\nplan, hits, misses and MiB read per token",
     .kind = K_FLAG,
     .off = OFF(stats)},
    {.cmds = CMD_DUMP,
     .section = "output",
     .names = "--stats",
     .value = NULL,
     .help = "on stderr: the expert cache's plan and, at the end, its statistics",
     .kind = K_FLAG,
     .off = OFF(stats)},
    {.cmds = ALL,
     .section = "output",
     .names = "--verbose",
     .value = NULL,
     .help = "notes on stderr: the expert-cache plan and why, the preload progress",
     .kind = K_FLAG,
     .off = OFF(verbose)},
};
#define N_TABLE (sizeof TABLE / sizeof TABLE[0])

void opts_defaults(cli_opts *o) {
    memset(o, 0, sizeof *o);
    o->backend = "cpu";
    o->cache_spec = "auto";
    o->batch = 0; /* auto: engine_default_batch */
    o->n_predict = 128;
    o->sp = sampler_default_params();
    o->sp.temp = 0;
    /* measured: a 2-row verify costs about 2 steps on a CPU, so MTP drafts do not pay there;
     * lookup drafts only where the text repeats (docs/SPECULATION.md, "Default") */
    o->spec = SPEC_LOOKUP;
    o->spec_name = "lookup";
    o->draft_max = SPEC_DRAFT_MAX;
    o->prompts[0] = 512, o->prompts[1] = 2048, o->n_prompts = 2;
    o->n_decode = 32, o->reps = 3, o->warmup = 2, o->bench_seed = 1;
    o->names = "l_out";
}

static bool has_name(const char *names, const char *a, size_t n) {
    for (const char *p = names; *p;) {
        const char *e = strstr(p, ", ");
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, a, n)) return true;
        if (!e) break;
        p = e + 2;
    }
    return false;
}

static const opt *find(unsigned bit, const char *a, size_t n) {
    for (size_t i = 0; i < N_TABLE; i++)
        if ((TABLE[i].cmds & bit) && has_name(TABLE[i].names, a, n)) return &TABLE[i];
    return NULL;
}

static int set_value(const char *cmd, const opt *t, const char *flag, const char *v, cli_opts *o) {
    char *p = (char *)o + t->off;
    long long iv;
    double d;
    switch (t->kind) {
    case K_STR:
        *(const char **)p = v;
        return 0;
    case K_FN:
        return t->set(cmd, flag, v, o);
    case K_I64:
    case K_I32:
    case K_U32:
        if (t->kind == K_I64 && t->lo == 0 && t->zero && !strcmp(t->zero, "auto") && !strcmp(v, "auto")) {
            *(long long *)p = 0;
            return 0;
        }
        if (!cli_parse_int(cmd, flag, v, (long long)t->lo, (long long)t->hi, &iv)) return -1;
        if (t->kind == K_I64)
            *(long long *)p = iv;
        else if (t->kind == K_I32)
            *(int32_t *)p = (int32_t)iv;
        else
            *(uint32_t *)p = (uint32_t)iv;
        return 0;
    case K_F32:
        if (!cli_parse_float(cmd, flag, v, &d)) return -1;
        if (!(d >= t->lo && d <= t->hi))
            return cli_fail(cmd, 2, "%s must be in [%g, %g], got %s", flag, t->lo, t->hi, v), -1;
        *(float *)p = (float)d;
        return 0;
    case K_FLAG:
        break;
    }
    return -1;
}

int opts_parse(const opts_cmd *c, int argc, char **argv, cli_opts *o) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) {
            opts_usage(c, o, stdout);
            return OPTS_HELP;
        }
        const char *eq = a[0] == '-' && a[1] == '-' ? strchr(a, '=') : NULL; /* --flag=value */
        size_t n = eq ? (size_t)(eq - a) : strlen(a);
        const opt *t = a[0] == '-' ? find(c->bit, a, n) : NULL;
        if (!t) {
            if (a[0] != '-')
                return cli_fail(c->name, 2, "unexpected argument '%s' (see redlite %s --help)", a, c->name);
            return cli_fail(c->name, 2, "unknown option '%.*s' (see redlite %s --help)", (int)n, a, c->name);
        }
        char flag[64];
        snprintf(flag, sizeof flag, "%.*s", (int)n, a);
        if (t->kind == K_FLAG) {
            if (eq) return cli_fail(c->name, 2, "%s takes no value", flag);
            *(bool *)((char *)o + t->off) = true;
            continue;
        }
        const char *v = eq ? eq + 1 : NULL;
        if (!v) {
            if (i + 1 >= argc)
                return cli_fail(c->name, 2, "%s needs a value %s (see redlite %s --help)", flag, t->value,
                                c->name);
            v = argv[++i];
        }
        if (set_value(c->name, t, flag, v, o)) return 2;
    }
    if (!o->model) return cli_fail(c->name, 2, "need -m MODEL (see redlite %s --help)", c->name);
    return 0;
}

/* The default of an entry as o holds it ("" = none worth printing). */
static void fmt_default(const opt *t, const cli_opts *o, char *buf, size_t n) {
    const char *p = (const char *)o + t->off;
    buf[0] = 0;
    switch (t->kind) {
    case K_FLAG:
        return;
    case K_STR:
    case K_FN:
        if (t->set == set_stop) return;
        if (t->set == set_prompts) {
            size_t k = 0;
            for (int i = 0; i < o->n_prompts && k + 12 < n; i++)
                k += (size_t)snprintf(buf + k, n - k, "%s%d", i ? "," : "", o->prompts[i]);
            if (!o->n_prompts) snprintf(buf, n, "0");
            return;
        }
        if (*(const char *const *)p)
            snprintf(buf, n, "%s", *(const char *const *)p);
        else if (t->zero)
            snprintf(buf, n, "%s", t->zero);
        return;
    case K_I64:
        if (*(const long long *)p == 0 && t->zero)
            snprintf(buf, n, "%s", t->zero);
        else
            snprintf(buf, n, "%lld", *(const long long *)p);
        return;
    case K_I32:
        snprintf(buf, n, "%d", (int)*(const int32_t *)p);
        return;
    case K_U32:
        if (*(const uint32_t *)p == SAMPLER_SEED_RANDOM)
            snprintf(buf, n, "from the clock");
        else
            snprintf(buf, n, "%u", *(const uint32_t *)p);
        return;
    case K_F32:
        snprintf(buf, n, "%g", *(const float *)p);
        return;
    }
}

void opts_usage(const opts_cmd *c, const cli_opts *o, FILE *out) {
    fprintf(out, "usage: %s\n\n%s\n", c->usage, c->about);
    const char *section = NULL;
    for (size_t i = 0; i < N_TABLE; i++) {
        const opt *t = &TABLE[i];
        if (!(t->cmds & c->bit)) continue;
        if (t->section && (!section || strcmp(section, t->section))) {
            section = t->section;
            fprintf(out, "\n%s:\n", section);
        }
        char head[80], def[64];
        snprintf(head, sizeof head, "%s%s%s", t->names, t->value ? " " : "", t->value ? t->value : "");
        fmt_default(t, o, def, sizeof def);
        if (strlen(head) > 24)
            fprintf(out, "  %s\n%27s", head, "");
        else
            fprintf(out, "  %-24s ", head);
        for (const char *h = t->help; *h; h++) {
            fputc(*h, out);
            if (*h == '\n') fprintf(out, "%27s", "");
        }
        if (def[0]) fprintf(out, " (default %s)", def);
        fputc('\n', out);
    }
    fprintf(out, "  %-24s %s\n", "-h, --help", "this help");
    fputs("\nExit status: 0 success, 1 runtime error, 2 usage error.\n", out);
    if (c->footer) fprintf(out, "\n%s", c->footer);
}

bool cli_map_weights(const cli_opts *o) { return o->weights && !strcmp(o->weights, "map"); }

session_model *cli_model_open(const cli_opts *o) {
    return session_model_open(&(session_model_params){.model_path = o->model,
                                                      .backend = o->backend,
                                                      .n_threads = (int)o->threads,
                                                      .reference = o->reference,
                                                      .iq_repack = o->iq_repack,
                                                      .map_weights = cli_map_weights(o)});
}

int cli_spec_check(const char *cmd, cli_opts *o, session_model *m) {
    engine *e = session_model_engine(m);
    if (!o->spec_set && o->route_bias > 0) o->spec = SPEC_NONE, o->spec_name = "none";
    if (o->spec != SPEC_MTP || engine_has_mtp(e)) return 0;
    if (engine_hparams(e)->n_nextn > 0)
        return cli_fail(cmd, 2, "--spec mtp: the %s backend has no MTP head forward yet (use --spec lookup or auto, "
                        "or --backend cpu)", engine_backend_name(e));
    return cli_fail(cmd, 2, "--spec mtp: this model has no MTP head (no blk.N.nextn.* tensors); use --spec lookup "
                    "or auto");
}

session *cli_session_new(const cli_opts *o, session_model *m, int n_ctx, int n_batch) {
    return session_new(m, &(session_params){.n_ctx = n_ctx,
                                            .n_batch = n_batch,
                                            .kv = o->kv,
                                            .cache_spec = o->cache_spec,
                                            .vram_spec = o->vram_spec,
                                            .vram_pin = o->vram_pin,
                                            .vram_miss = o->vram_miss,
                                            .route_bias = o->route_bias,
                                            .route_trace = o->route_trace,
                                            .max_checkpoints = o->checkpoints,
                                            .verbose = o->verbose || o->stats, .progress = !o->json});
}

static void progress_line(void *ud, int done, int total, double seconds) {
    cli_progress *p = ud;
    if (!p->on || total <= p->batch || (done < total && seconds - p->last < 0.1)) return; /* 10 per second */
    p->last = seconds;
    fprintf(stderr, "\rprompt %d/%d tokens, %.1f tok/s\033[K", done, total, done / (seconds > 0 ? seconds : 1e-9));
    fflush(stderr);
    p->shown = true;
}

session_feed_opts cli_feed_opts(cli_progress *p, const cli_opts *o, atomic_int *cancel) {
    p->on = !o->json && isatty(STDERR_FILENO);
    p->shown = false;
    p->last = -1;
    p->batch = (int)o->batch;
    return (session_feed_opts){.progress = progress_line, .ud = p, .cancel = cancel};
}

void cli_feed_done(cli_progress *p) {
    if (p->shown) fputs("\r\033[K", stderr);
    p->shown = false;
}

void cli_warn_ctx_train(const char *cmd, const session *s, int n_tokens, bool *warned) {
    int train = session_hparams(s)->n_ctx_train;
    if (train <= 0 || n_tokens <= train || (warned && *warned)) return;
    fprintf(stderr,
            "redlite %s: warning: the prompt has %d tokens, more than the %d the model was trained on "
            "(context_length); answers may degrade\n",
            cmd, n_tokens, train);
    if (warned) *warned = true;
}

char *cli_read_file(const char *path, size_t *len) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        rl_seterr("cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0, r;
    char *buf = malloc(cap);
    while (buf && (r = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (n + 1 == cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b) {
                free(buf);
                buf = NULL;
            } else {
                buf = b;
            }
        }
    }
    bool err = ferror(f);
    if (f != stdin) fclose(f);
    if (!buf) {
        rl_seterr("out of memory reading %s", path);
        return NULL;
    }
    if (err) {
        free(buf);
        rl_seterr("cannot read %s", path);
        return NULL;
    }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}
