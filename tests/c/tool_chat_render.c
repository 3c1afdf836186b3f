/* tool_chat_render.c — test bridge for tests/test_chat_template.py and test_chat_parse cases.
 *
 *   rl_chat_render TEMPLATE_FILE < cases.jsonl
 *
 * Detects the template family of TEMPLATE_FILE (a Jinja text; "-" = none), prints one line
 * "family=<name> think=<0|1> known=<0|1>", then for each input line (a JSON object
 * {"messages": [...], "tools": [...], "add_generation_prompt": bool, "enable_thinking": bool})
 * prints "<byte length>\n<rendered bytes>\n". A line that fails prints "ERR <message>\n".
 *
 *   rl_chat_render --parse TOOLS_JSON_FILE < texts.jsonl
 *
 * Each input line is a JSON string (generated text); it is fed to the streaming tool-call
 * parser in chunks of 1..7 bytes (varying), and one JSON line per input is printed:
 * {"text": "...", "calls": [{"name": ..., "arguments": "..."}], "failed": N}.
 *
 *   rl_chat_render --gguf-template MODEL.gguf
 *
 * Prints the GGUF's tokenizer.chat_template as is (exit 3 if it has none). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/chat.h"
#include "base/common.h"

static char *read_all(FILE *f, size_t *n) {
    chat_buf b = {0};
    char tmp[65536];
    size_t r;
    while ((r = fread(tmp, 1, sizeof tmp, f)) > 0) chat_buf_put(&b, tmp, r);
    return chat_buf_take(&b, n);
}

static int render_mode(const char *tpath) {
    char *tmpl = NULL;
    if (strcmp(tpath, "-") != 0) {
        FILE *f = fopen(tpath, "rb");
        if (!f) {
            fprintf(stderr, "cannot open %s\n", tpath);
            return 1;
        }
        tmpl = read_all(f, NULL);
        fclose(f);
    }
    chat_format fmt = chat_format_detect(tmpl);
    free(tmpl);
    printf("family=%s think=%d known=%d\n", chat_family_name(fmt.family), fmt.think, fmt.known);
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, stdin)) > 0) {
        chat_conv c;
        chat_conv_init(&c);
        cJSON *root = chat_json_parse(line, (size_t)len);
        chat_render_opts o = {.add_generation_prompt = false, .enable_thinking = -1};
        if (root) {
            const cJSON *g = cJSON_GetObjectItemCaseSensitive(root, "add_generation_prompt");
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "enable_thinking");
            o.add_generation_prompt = cJSON_IsTrue(g);
            if (cJSON_IsBool(t)) o.enable_thinking = cJSON_IsTrue(t);
        }
        chat_buf out = {0};
        if (!root || chat_conv_from_json(&c, line, (size_t)len) || chat_render(&fmt, &c, &o, &out)) {
            printf("ERR %s\n", rl_lasterr());
        } else {
            printf("%zu\n", out.n);
            fwrite(out.p ? out.p : "", 1, out.n, stdout);
            putchar('\n');
        }
        chat_buf_free(&out);
        cJSON_Delete(root);
        chat_conv_free(&c);
    }
    free(line);
    return 0;
}

typedef struct {
    chat_buf text;
    cJSON *calls;
} parse_out;

static void on_text(void *ud, const char *s, size_t n) { chat_buf_put(&((parse_out *)ud)->text, s, n); }
static void on_call(void *ud, const char *name, const char *args) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", name);
    cJSON_AddStringToObject(o, "arguments", args);
    cJSON_AddItemToArray(((parse_out *)ud)->calls, o);
}

static int parse_mode(const char *tools_path) {
    cJSON *tools = NULL;
    if (strcmp(tools_path, "-") != 0) {
        FILE *f = fopen(tools_path, "rb");
        if (!f) {
            fprintf(stderr, "cannot open %s\n", tools_path);
            return 1;
        }
        size_t n;
        char *t = read_all(f, &n);
        fclose(f);
        tools = chat_json_parse(t, n);
        free(t);
        if (!tools) {
            fprintf(stderr, "tools: %s\n", rl_lasterr());
            return 1;
        }
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int k = 0;
    while ((len = getline(&line, &cap, stdin)) > 0) {
        cJSON *s = cJSON_ParseWithLength(line, (size_t)len);
        if (!cJSON_IsString(s)) {
            printf("ERR not a JSON string\n");
            cJSON_Delete(s);
            continue;
        }
        parse_out po = {{0}, cJSON_CreateArray()};
        chat_parser *p = chat_parser_new(tools, &(chat_parser_cb){on_text, on_call, &po});
        const char *t = s->valuestring;
        size_t n = strlen(t);
        for (size_t i = 0; i < n;) {
            size_t step = 1 + (size_t)((k++ * 5 + i) % 7);
            if (step > n - i) step = n - i;
            chat_parser_feed(p, t + i, step);
            i += step;
        }
        chat_parser_finish(p);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "text", po.text.p ? po.text.p : "");
        cJSON_AddItemToObject(o, "calls", po.calls);
        cJSON_AddNumberToObject(o, "failed", chat_parser_n_failed(p));
        char *js = cJSON_PrintUnformatted(o);
        puts(js);
        free(js);
        cJSON_Delete(o);
        cJSON_Delete(s);
        chat_buf_free(&po.text);
        chat_parser_free(p);
    }
    free(line);
    cJSON_Delete(tools);
    return 0;
}

static int template_mode(const char *path) {
    gguf_file *g = gguf_open(path);
    if (!g) {
        fprintf(stderr, "%s\n", rl_lasterr());
        return 1;
    }
    gguf_str t;
    int rc = 3;
    if (gguf_get_str(g, "tokenizer.chat_template", &t)) {
        fwrite(t.p, 1, t.n, stdout);
        rc = 0;
    }
    gguf_close(g);
    return rc;
}

int main(int argc, char **argv) {
    if (argc == 2) return render_mode(argv[1]);
    if (argc == 3 && !strcmp(argv[1], "--gguf-template")) return template_mode(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "--parse")) return parse_mode(argv[2]);
    fprintf(stderr, "usage: rl_chat_render TEMPLATE|- < cases.jsonl\n       rl_chat_render --parse TOOLS|- < "
                    "texts.jsonl\n");
    return 2;
}
