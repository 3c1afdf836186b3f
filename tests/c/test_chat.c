/* test_chat.c — unit tests of src/chat*.c: Python-compatible JSON, conversations, template
 * detection, rendering details and the streaming tool-call parser (slips, partial tags,
 * text preservation). Byte-identity with jinja2 is tested in tests/test_chat_template.py. */
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "gguf/gguf.h"
#include "text/chat.h"
#include "check.h"
#include "base/common.h"

static char *dumps_of(const char *json) {
    cJSON *v = chat_json_parse(json, strlen(json));
    if (!v) return strdup("<parse error>");
    chat_buf b = {0};
    chat_json_dumps(v, &b);
    cJSON_Delete(v);
    return chat_buf_take(&b, NULL);
}

static char *pystr_of(const char *json) {
    cJSON *v = chat_json_parse(json, strlen(json));
    if (!v) return strdup("<parse error>");
    chat_buf b = {0};
    chat_json_pystr(v, &b);
    cJSON_Delete(v);
    return chat_buf_take(&b, NULL);
}

#define CHECK_STR(got, want)                                                                                 \
    do {                                                                                                     \
        char *g_ = (got);                                                                                    \
        CHECK(g_ && !strcmp(g_, (want)), "got [%s] want [%s]", g_ ? g_ : "(null)", (want));                  \
        free(g_);                                                                                            \
    } while (0)

static void test_json(void) {
    CHECK_STR(dumps_of("{\"a\":1,\"b\":[1.0,2.50,-0,1e5,1E-7,12345678901234567890123],\"c\":null}"),
              "{\"a\": 1, \"b\": [1.0, 2.5, 0, 100000.0, 1e-07, 12345678901234567890123], \"c\": null}");
    CHECK_STR(dumps_of("\"\\u00e9\\n\\t\\u0001\\\"\\\\/\\ud83d\\ude00\""), "\"é\\n\\t\\u0001\\\"\\\\/😀\"");
    CHECK_STR(dumps_of("{\"k\":1,\"k\":2,\"j\":3}"), "{\"k\": 2, \"j\": 3}");
    CHECK_STR(dumps_of("[true,false,{},[]]"), "[true, false, {}, []]");
    CHECK_STR(dumps_of("1e400"), "Infinity");
    CHECK_STR(dumps_of("-0.0"), "-0.0");
    CHECK_STR(pystr_of("[\"a\",1,true,null,{\"k\":\"it's\"}]"), "['a', 1, True, None, {'k': \"it's\"}]");
    CHECK_STR(pystr_of("\"raw \\\"text\\\"\""), "raw \"text\"");
    CHECK_STR(pystr_of("[\"tab\\t\\u0007\\u00a0é\"]"), "['tab\\t\\x07\\xa0é']");
    CHECK_STR(pystr_of("1.5e300"), "1.5e+300");
    char t[40];
    double vals[] = {0.1, 1e16, 1e15, 0.0001, 0.00001, 123456789.125, 5e-324, 1.7976931348623157e308, 2.0};
    const char *want[] = {"0.1",           "1e+16",  "1000000000000000.0",      "0.0001", "1e-05",
                          "123456789.125", "5e-324", "1.7976931348623157e+308", "2.0"};
    for (int i = 0; i < 9; i++) {
        chat_py_float_repr(vals[i], t);
        CHECK(!strcmp(t, want[i]), "repr %g: %s want %s", vals[i], t, want[i]);
    }
    CHECK(chat_json_parse("{\"a\":1} x", 9) == NULL, "trailing text rejected");
    size_t used;
    cJSON *v = chat_json_parse_lenient("{\"a\": [1, 2}} trailing", 22, &used);
    CHECK(v && used == 13, "lenient used %zu", used);
    char *s = NULL;
    if (v) {
        chat_buf b = {0};
        chat_json_dumps(v, &b);
        s = chat_buf_take(&b, NULL);
    }
    CHECK_STR(s, "{\"a\": [1, 2]}");
    cJSON_Delete(v);
    v = chat_json_parse_lenient("{\"a\": {\"b\": \"unterminated", 25, NULL);
    CHECK(v != NULL, "unterminated repaired");
    cJSON_Delete(v);
}

static void test_conv(void) {
    chat_conv c;
    chat_conv_init(&c);
    const char *js =
        "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":"
        "\"b\"}]},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\","
        "\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"x\\\":1.0}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"r\"}],"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}";
    CHECK(chat_conv_from_json(&c, js, strlen(js)) == 0, "%s", rl_lasterr());
    CHECK(c.n == 4 && c.msgs[1].content && !strcmp(c.msgs[1].content, "ab"), "parts concatenated");
    CHECK(c.msgs[2].content == NULL && c.msgs[2].n_calls == 1, "null content + call");
    CHECK(c.msgs[2].n_calls == 1 && !strcmp(c.msgs[2].calls[0].arguments, "{\"x\":1.0}"), "args kept");
    chat_format f = {CHAT_FAMILY_HERMES, false, true};
    chat_buf b = {0};
    CHECK(chat_render(&f, &c, NULL, &b) == 0, "render");
    CHECK(b.p &&
              strstr(b.p,
                     "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1.0}}\n</tool_call><|im_end|>"),
          "hermes call rendered in json.dumps form: %s", b.p);
    CHECK(
        b.p &&
            strstr(
                b.p,
                "<|im_start|>user\n<tool_response>\nr\n</tool_response><|im_end|>\n<|im_start|>assistant\n"),
        "tool response + generation prompt");
    chat_buf_free(&b);
    chat_conv_truncate(&c, 1);
    CHECK(c.n == 1, "truncate");
    chat_conv_free(&c);

    chat_conv_init(&c);
    const char *bad = "{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}";
    CHECK(chat_conv_from_json(&c, bad, strlen(bad)) == -1 && strstr(rl_lasterr(), "messages[0]"),
          "bad role: %s", rl_lasterr());
    chat_conv_free(&c);
}

static void test_detect(void) {
    chat_format f = chat_format_detect(NULL);
    CHECK(!f.known && f.family == CHAT_FAMILY_CHATML, "none");
    f = chat_format_detect("<|im_start|>{{ x }}<tool_call>\\n<function=x><parameter=y>");
    CHECK(f.known && f.family == CHAT_FAMILY_CODER && !f.think, "coder");
    f = chat_format_detect(
        "<|im_start|><tool_call>\\n<function=x><parameter=y> {% if enable_thinking is false %}"
        "<think>\\n\\n</think>{% endif %}");
    CHECK(f.known && f.family == CHAT_FAMILY_QWEN35 && f.think, "qwen35");
    f = chat_format_detect("<|im_start|><tools> <tool_call>\\n{\"name\": <function-name>, \"arguments\": x} "
                           "reasoning_content");
    CHECK(f.known && f.family == CHAT_FAMILY_HERMES && f.think, "hermes think");
    f = chat_format_detect("{{ bos_token }}[INST]");
    CHECK(!f.known, "other");
}

/* ---- parser ----------------------------------------------------------------------------- */

typedef struct {
    chat_buf text;
    char names[8][64];
    char args[8][256];
    int n;
} sink;

static void on_text(void *ud, const char *s, size_t n) { chat_buf_put(&((sink *)ud)->text, s, n); }
static void on_call(void *ud, const char *name, const char *args) {
    sink *k = ud;
    if (k->n < 8) {
        snprintf(k->names[k->n], 64, "%s", name);
        snprintf(k->args[k->n], 256, "%s", args);
    }
    k->n++;
}

static cJSON *g_tools;

/* Feed `in` in chunks of `step` bytes; returns the failure count. */
static int parse_end(const char *in, size_t step, sink *k, bool cut) {
    memset(k, 0, sizeof *k);
    chat_parser *p = chat_parser_new(g_tools, &(chat_parser_cb){on_text, on_call, k});
    size_t n = strlen(in);
    for (size_t i = 0; i < n; i += step) chat_parser_feed(p, in + i, i + step <= n ? step : n - i);
    chat_parser_finish_cut(p, cut);
    int failed = chat_parser_n_failed(p);
    chat_parser_free(p);
    chat_buf_putc(&k->text, 0);
    return failed;
}

static int parse(const char *in, size_t step, sink *k) { return parse_end(in, step, k, false); }

static const char *txt(sink *k) { return k->text.p ? k->text.p : ""; }

static void test_parser(void) {
    const char *tools =
        "[{\"type\":\"function\",\"function\":{\"name\":\"run\",\"parameters\":{\"type\":\"object\","
        "\"properties\":{\"cmd\":{\"type\":\"string\"},\"timeout\":{\"type\":\"integer\"},"
        "\"env\":{\"type\":\"object\"},\"dry\":{\"type\":\"boolean\"},\"tags\":{\"type\":\"array\"}}}}}]";
    g_tools = chat_json_parse(tools, strlen(tools));
    sink k;
    for (size_t step = 1; step <= 9; step += 4) {
        /* clean XML call with typed values */
        int f =
            parse("Running it.\n<tool_call>\n<function=run>\n<parameter=cmd>\nls -l\n</parameter>\n"
                  "<parameter=timeout>\n30\n</parameter>\n<parameter=dry>\nfalse\n</parameter>\n"
                  "<parameter=env>\n{\"A\": \"1\"}\n</parameter>\n<parameter=tags>\n[\"x\"]\n</parameter>\n"
                  "</function>\n</tool_call>",
                  step, &k);
        CHECK(f == 0 && k.n == 1 && !strcmp(txt(&k), "Running it."), "step %zu: text [%s] n=%d", step,
              txt(&k), k.n);
        CHECK(!strcmp(k.args[0], "{\"cmd\": \"ls -l\", \"timeout\": 30, \"dry\": false, \"env\": {\"A\": "
                                 "\"1\"}, \"tags\": [\"x\"]}"),
              "typed args: %s", k.args[0]);
        chat_buf_free(&k.text);
        /* the 2-bit slip: <KEY> instead of <parameter=KEY>, missing closes */
        f = parse(
            "<tool_call>\n<function=run>\n<cmd>\necho hi\n</cmd>\n<timeout>\n5\n</function>\n</tool_call>",
            step, &k);
        CHECK(f == 0 && k.n == 1 && !strcmp(k.args[0], "{\"cmd\": \"echo hi\", \"timeout\": 5}"), "slip: %s",
              k.args[0]);
        chat_buf_free(&k.text);
        /* multi-line values keep inner newlines; a value of the wrong type makes the call one the
         * client cannot run: the block is text (issue 45) */
        f = parse(
            "<tool_call>\n<function=run>\n<parameter=timeout>\n7\n</parameter>\n<parameter=cmd>\na\n\nb\n"
            "</parameter>\n</function>\n</tool_call>",
            step, &k);
        CHECK(k.n == 1 && !strcmp(k.args[0], "{\"timeout\": 7, \"cmd\": \"a\\n\\nb\"}"), "newlines: %s",
              k.args[0]);
        chat_buf_free(&k.text);
        const char *mistyped =
            "<tool_call>\n<function=run>\n<parameter=timeout>\nsoon\n</parameter>\n</function>\n</tool_call>";
        f = parse(mistyped, step, &k);
        CHECK(f == 1 && k.n == 0 && !strcmp(txt(&k), mistyped), "mistyped: n=%d [%s]", k.n, txt(&k));
        chat_buf_free(&k.text);
        /* JSON with the wrong closing bracket, then trailing text */
        f = parse("<tool_call>\n{\"name\": \"run\", \"arguments\": {\"tags\": [\"a\"}}\n</tool_call>\nDone.",
                  step, &k);
        CHECK(f == 0 && k.n == 1 && !strcmp(k.args[0], "{\"tags\": [\"a\"]}") && !strcmp(txt(&k), "\nDone."),
              "json repair: %s / [%s]", k.args[0], txt(&k));
        chat_buf_free(&k.text);
        /* partial tags that are not tags are released unchanged */
        const char *plain = "x <tool y <tool_cal z <function w </tool_call> v <";
        f = parse(plain, step, &k);
        CHECK(f == 0 && k.n == 0 && !strcmp(txt(&k), plain), "plain: [%s]", txt(&k));
        chat_buf_free(&k.text);
        /* unparseable block: text kept byte for byte */
        const char *junk = "A <tool_call>\n{\"nom\": 1}\n</tool_call> B";
        f = parse(junk, step, &k);
        CHECK(f == 1 && k.n == 0 && !strcmp(txt(&k), junk), "junk: [%s]", txt(&k));
        chat_buf_free(&k.text);
        /* end of output inside a call: parsed if possible */
        f = parse("<tool_call>\n<function=run>\n<parameter=cmd>\npwd\n</parameter>\n</function>", step, &k);
        CHECK(f == 0 && k.n == 1 && !strcmp(k.args[0], "{\"cmd\": \"pwd\"}"), "unclosed: %d", k.n);
        chat_buf_free(&k.text);
        /* an output cut short (max tokens, context end, shutdown): an unclosed block is text,
         * never a call with repaired arguments; a closed one before it still counts */
        const char *cut = "<tool_call>\n{\"name\": \"run\", \"arguments\": {\"cmd\": \"rm -rf /tmp/x";
        f = parse_end(cut, step, &k, true);
        CHECK(f == 1 && k.n == 0 && !strcmp(txt(&k), cut), "cut: n=%d [%s]", k.n, txt(&k));
        chat_buf_free(&k.text);
        f = parse_end(
            "<tool_call>\n<function=run>\n<parameter=cmd>\npwd\n</parameter>\n</function>\n</tool_call>"
            "<tool_call>\n<function=run>\n<parameter=cmd>\nls",
            step, &k, true);
        CHECK(f == 1 && k.n == 1 && !strcmp(k.args[0], "{\"cmd\": \"pwd\"}") &&
                  !strcmp(txt(&k), "<tool_call>\n<function=run>\n<parameter=cmd>\nls"),
              "cut second: n=%d [%s]", k.n, txt(&k));
        chat_buf_free(&k.text);
        /* two calls, whitespace between them dropped; a new <tool_call> closes an unclosed one */
        f = parse("<tool_call>\n{\"name\": \"run\", \"arguments\": {}}\n<tool_call>\n{\"name\": \"run\", "
                  "\"arguments\": {\"cmd\": \"x\"}}\n</tool_call>\n\n",
                  step, &k);
        CHECK(f == 0 && k.n == 2 && !strcmp(txt(&k), ""), "two calls: n=%d [%s]", k.n, txt(&k));
        chat_buf_free(&k.text);
        /* plain text answers keep trailing whitespace */
        f = parse("Hello\n\n", step, &k);
        CHECK(!strcmp(txt(&k), "Hello\n\n"), "trailing ws kept: [%s]", txt(&k));
        chat_buf_free(&k.text);
    }
    /* chat_parse_call_body appends to a conversation */
    chat_conv c;
    chat_conv_init(&c);
    int m = chat_conv_add(&c, CHAT_ASSISTANT, "");
    const char *body = "\n<function=run>\n<parameter=cmd>\nls\n</parameter>\n</function>\n";
    CHECK(chat_parse_call_body(g_tools, body, strlen(body), &c, m) == 1, "body");
    CHECK(c.msgs[m].n_calls == 1 && !strcmp(c.msgs[m].calls[0].name, "run"), "body call");
    CHECK(chat_parse_call_body(g_tools, "nothing", 7, &c, m) == 0, "not a body");
    chat_conv_free(&c);
    cJSON_Delete(g_tools);
}

/* A qwen35 / qwen35moe file without a known template gets the Qwen3.5 format (its architecture's
 * official template); a qwen3next file without one the ChatML fallback. */
static void test_detect_gguf(void) {
    static const char *const arch[3] = {"qwen35moe", "qwen35", "qwen3next"};
    for (int i = 0; i < 3; i++) {
        char path[64];
        snprintf(path, sizeof path, "/tmp/rl_test_chat_%d_%d.gguf", (int)getpid(), i);
        gguf_writer *w = gguf_writer_new();
        CHECK(w && gguf_writer_set_str(w, "general.architecture", arch[i]) == 0 &&
                  gguf_writer_write(w, path) == 0,
              "write %s: %s", path, rl_lasterr());
        gguf_writer_free(w);
        gguf_file *g = gguf_open(path);
        CHECK(g != NULL, "open %s: %s", path, rl_lasterr());
        chat_format f = chat_format_from_gguf(g);
        if (i < 2)
            CHECK(f.known && f.family == CHAT_FAMILY_QWEN35 && f.think, "%s: family %d", arch[i], f.family);
        else CHECK(!f.known && f.family == CHAT_FAMILY_CHATML, "%s: family %d", arch[i], f.family);
        if (g) gguf_close(g);
        unlink(path);
    }
}

int main(void) {
    test_json();
    test_conv();
    test_detect();
    test_detect_gguf();
    test_parser();
    return check_done("test_chat");
}
