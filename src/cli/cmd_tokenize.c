/* cmd_tokenize.c — `redlite tokenize`: print the token ids of a text (see --help).
 *
 * Also the batch interface of the tokenizer oracle test (--jsonl) and the tokenizer speed
 * measurement (--bench, recorded in docs/TOKENIZER.md). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/opts.h"
#include "base/common.h"
#include "base/json.h"
#include "text/tokenizer.h"

static const char *CMD = "tokenize";

static const opts_cmd TOKENIZE = {
    "tokenize", CMD_TOKENIZE,
    "redlite tokenize -m MODEL (--text TEXT | --file PATH | --jsonl PATH) [options]",
    "Print the token ids of a text, one \"id<TAB>piece\" line per token.", NULL};

/* ---- small JSON helpers (strings only) ----------------------------------------------- */

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int hex4(const char *s, uint32_t *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval((unsigned char)s[i]);
        if (h < 0) return -1;
        *v = *v << 4 | (uint32_t)h;
    }
    return 0;
}

static size_t put_utf8(uint32_t cp, char *o) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Parse one line holding a JSON string literal (surrounding blanks allowed) into out
 * (which needs n bytes: the decoded string is never longer than its literal). Returns the
 * decoded length, or -1 with an error message in *why. */
static long parse_json_line(const char *s, size_t n, char *out, const char **why) {
    size_t i = 0, o = 0;
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r')) i++;
    if (i >= n || s[i] != '"') return *why = "expected a JSON string", -1;
    i++;
    for (;;) {
        if (i >= n) return *why = "unterminated string", -1;
        unsigned char c = (unsigned char)s[i];
        if (c == '"') break;
        if (c < 0x20) return *why = "raw control character in string", -1;
        if (c != '\\') {
            out[o++] = (char)c;
            i++;
            continue;
        }
        if (i + 1 >= n) return *why = "unterminated escape", -1;
        char e = s[i + 1];
        i += 2;
        switch (e) {
        case '"': out[o++] = '"'; break;
        case '\\': out[o++] = '\\'; break;
        case '/': out[o++] = '/'; break;
        case 'b': out[o++] = '\b'; break;
        case 'f': out[o++] = '\f'; break;
        case 'n': out[o++] = '\n'; break;
        case 'r': out[o++] = '\r'; break;
        case 't': out[o++] = '\t'; break;
        case 'u': {
            uint32_t cp, lo;
            if (i + 4 > n || hex4(s + i, &cp) < 0) return *why = "bad \\u escape", -1;
            i += 4;
            if (cp >= 0xDC00 && cp <= 0xDFFF) return *why = "lone low surrogate", -1;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (i + 6 > n || s[i] != '\\' || s[i + 1] != 'u' || hex4(s + i + 2, &lo) < 0 || lo < 0xDC00 ||
                    lo > 0xDFFF)
                    return *why = "lone high surrogate", -1;
                i += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            o += put_utf8(cp, out + o);
            break;
        }
        default: return *why = "unknown escape", -1;
        }
    }
    i++;
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r')) i++;
    if (i != n) return *why = "trailing characters after the string", -1;
    return (long)o;
}

/* ---- input ---------------------------------------------------------------------------- */

static char *read_all(const char *path, size_t *len) {
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f) {
        rl_seterr("cannot open '%s': %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
        }
        /* buf is not NULL here (the loop's condition; a failed realloc breaks out) */
        // cppcheck-suppress nullPointerArithmeticRedundantCheck
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    bool err = ferror(f);
    if (f != stdin) fclose(f);
    if (!buf) {
        rl_seterr("out of memory reading '%s'", path);
        return NULL;
    }
    if (err) {
        free(buf);
        rl_seterr("error reading '%s'", path);
        return NULL;
    }
    *len = n;
    return buf;
}

/* ---- modes ---------------------------------------------------------------------------- */

static void print_piece(const char *p, size_t n) {
    /* C-style escapes for control characters and ill-formed bytes, UTF-8 as it is */
    const uint8_t *s = (const uint8_t *)p;
    putchar('\'');
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i];
        size_t len = c >= 0x80 ? tok_utf8_len(s + i, n - i) : 1;
        if (c >= 0x80 && len) {
            fwrite(s + i, 1, len, stdout);
            i += len;
            continue;
        }
        if (c == '\n') fputs("\\n", stdout);
        else if (c == '\r') fputs("\\r", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c == '\\') fputs("\\\\", stdout);
        else if (c == '\'') fputs("\\'", stdout);
        else if (c < 0x20 || c >= 0x7F) printf("\\x%02x", c);
        else putchar(c);
        i++;
    }
    putchar('\'');
}

static int run_jsonl(const tokenizer *t, const char *path, unsigned flags) {
    size_t n;
    char *data = read_all(path, &n);
    if (!data) return cli_fail(CMD, 1, "%s", rl_lasterr());
    char *text = malloc(n + 1);
    if (!text) {
        free(data);
        return cli_fail(CMD, 1, "out of memory");
    }
    tok_ids ids = {0};
    int rc = 0;
    size_t line = 0;
    for (size_t a = 0; a < n;) {
        const char *nl = memchr(data + a, '\n', n - a);
        size_t b = nl ? (size_t)(nl - data) : n;
        line++;
        if (b > a) {
            const char *why = "";
            long tl = parse_json_line(data + a, b - a, text, &why);
            if (tl < 0) {
                rc = cli_fail(CMD, 1, "%s:%zu: %s", path, line, why);
                break;
            }
            ids.n = 0;
            char *dec = NULL;
            size_t dl = 0;
            if (tokenizer_encode(t, text, (size_t)tl, flags, &ids) < 0 ||
                tokenizer_decode(t, ids.ids, ids.n, TOK_DECODE_SPECIAL | TOK_DECODE_REPLACE, &dec, &dl) < 0) {
                rc = cli_fail(CMD, 1, "%s", rl_lasterr());
                break;
            }
            fputs("{\"ids\":[", stdout);
            for (size_t i = 0; i < ids.n; i++) printf(i ? ",%d" : "%d", ids.ids[i]);
            fputs("],\"decoded\":", stdout);
            json_write_escaped(stdout, dec, dl);
            fputs("}\n", stdout);
            free(dec);
        }
        a = b + 1;
    }
    tok_ids_free(&ids);
    free(text);
    free(data);
    if (fflush(stdout) != 0 && rc == 0) rc = cli_fail(CMD, 1, "error writing output");
    return rc;
}

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Wall-clock MB/s, plus MB/s per CPU-second of this thread (the same on an idle machine; the
 * CPU figure stays meaningful on a loaded one). */
static int run_bench(const tokenizer *t, const char *text, size_t n, unsigned flags, bool json) {
    tok_ids ids = {0};
    size_t iters = 0, ntok = 0;
    double t0 = rl_now(), c0 = cpu_now(), el;
    do {
        ids.n = 0;
        if (tokenizer_encode(t, text, n, flags, &ids) < 0) {
            tok_ids_free(&ids);
            return cli_fail(CMD, 1, "%s", rl_lasterr());
        }
        ntok = ids.n;
        iters++;
        el = rl_now() - t0;
    } while (el < 2.0);
    double cpu = cpu_now() - c0;
    tok_ids_free(&ids);
    double mbs = (double)n * (double)iters / el / 1e6,
           mbs_cpu = cpu > 0 ? (double)n * (double)iters / cpu / 1e6 : 0;
    if (json) {
        json_writer j;
        cli_json_begin(&j);
        json_kv_uint(&j, "bytes", n);
        json_kv_uint(&j, "tokens", ntok);
        json_kv_uint(&j, "iterations", iters);
        json_kv_num(&j, "seconds", el);
        json_kv_num(&j, "cpu_seconds", cpu);
        json_kv_num(&j, "mb_per_s", mbs);
        json_kv_num(&j, "mb_per_cpu_s", mbs_cpu);
        json_obj_end(&j);
        if (json_finish(&j) != 0) return cli_fail(CMD, 1, "error writing output");
        putchar('\n');
    } else
        printf("%zu bytes -> %zu tokens (%.2f bytes/token); %zu runs in %.2f s (%.2f s CPU): %.2f MB/s "
               "(%.2f MB per CPU-second), %.0f tokens/s\n",
               n, ntok, ntok ? (double)n / (double)ntok : 0.0, iters, el, cpu, mbs, mbs_cpu,
               (double)ntok * (double)iters / el);
    return 0;
}

int cmd_tokenize(int argc, char **argv) {
    cli_opts o;
    opts_defaults(&o);
    int r = opts_parse(&TOKENIZE, argc, argv, &o);
    if (r) return r == OPTS_HELP ? 0 : r;
    const char *model = o.model, *text = o.text, *file = o.file, *jsonl = o.jsonl;
    bool json = o.json, bench = o.tok_bench;
    unsigned flags = o.no_special ? 0 : TOK_PARSE_SPECIAL;
    if (!!text + !!file + !!jsonl != 1)
        return cli_fail(CMD, 2, "give exactly one of --text, --file, --jsonl (see redlite tokenize --help)");
    if (jsonl && bench) return cli_fail(CMD, 2, "--bench takes --text or --file, not --jsonl");
    if (jsonl && json) return cli_fail(CMD, 2, "--jsonl prints JSON lines already: drop --json");

    tokenizer *t = tokenizer_load_file(model);
    if (!t) return cli_fail(CMD, 1, "%s", rl_lasterr());
    int rc = 0;
    if (jsonl) {
        rc = run_jsonl(t, jsonl, flags);
        tokenizer_free(t);
        return rc;
    }
    size_t n = 0;
    char *owned = NULL;
    if (file) {
        owned = read_all(file, &n);
        if (!owned) {
            tokenizer_free(t);
            return cli_fail(CMD, 1, "%s", rl_lasterr());
        }
        text = owned;
    } else {
        n = strlen(text);
    }
    if (bench) {
        rc = run_bench(t, text, n, flags, json);
    } else {
        tok_ids ids = {0};
        if (tokenizer_encode(t, text, n, flags, &ids) < 0) {
            rc = cli_fail(CMD, 1, "%s", rl_lasterr());
        } else if (json) {
            json_writer j;
            cli_json_begin(&j);
            json_kv_uint(&j, "n_tokens", ids.n);
            json_key(&j, "ids");
            json_arr_begin(&j);
            for (size_t i = 0; i < ids.n; i++) json_int(&j, ids.ids[i]);
            json_arr_end(&j);
            json_key(&j, "tokens");
            json_arr_begin(&j);
            for (size_t i = 0; i < ids.n; i++) {
                size_t tl;
                const char *tt = tokenizer_token_text(t, ids.ids[i], &tl);
                json_strn(&j, tt, tl);
            }
            json_arr_end(&j);
            json_obj_end(&j);
            if (json_finish(&j) != 0) rc = cli_fail(CMD, 1, "error writing output");
            putchar('\n');
        } else {
            for (size_t i = 0; i < ids.n; i++) {
                size_t pl;
                const char *p = tokenizer_token_piece(t, ids.ids[i], &pl);
                printf("%6d\t", ids.ids[i]);
                print_piece(p, pl);
                putchar('\n');
            }
            printf("%zu tokens\n", ids.n);
        }
        tok_ids_free(&ids);
    }
    free(owned);
    tokenizer_free(t);
    if (fflush(stdout) != 0 && rc == 0) rc = cli_fail(CMD, 1, "error writing output");
    return rc;
}
