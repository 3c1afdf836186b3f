/* chat.h — conversations, their rendering to the model's prompt bytes, and tool-call parsing.
 *
 * Three pieces (see docs/CHAT.md for the user-facing description):
 *
 *  1. A conversation (chat_conv): messages with roles system/user/assistant/tool, content,
 *     assistant tool calls (name + JSON arguments) and tool definitions (OpenAI JSON schema
 *     objects, as cJSON). Built by calls or loaded from OpenAI-style JSON.
 *
 *  2. Rendering (chat_render): the exact bytes the model's Jinja chat template produces under
 *     Hugging Face's apply_chat_template (trim_blocks, lstrip_blocks, tojson = json.dumps with
 *     ensure_ascii=False), for the template families below, chosen from the GGUF's
 *     tokenizer.chat_template by chat_format_detect:
 *       CHAT_FAMILY_HERMES  Qwen3 / Qwen3-Next: tools as JSON lines in <tools>, calls as
 *                           <tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>;
 *                           `think` = the template's <think>/reasoning_content handling
 *                           (Qwen3 hybrid template) is present;
 *       CHAT_FAMILY_CODER   Qwen3-Coder(-Next): XML tool descriptions, calls as
 *                           <tool_call>\n<function=NAME>\n<parameter=K>\nV\n</parameter>\n...;
 *       CHAT_FAMILY_QWEN35  Qwen3.5 / Qwen3.6: tools as JSON lines in <tools>, calls in the CODER
 *                           XML form, every content trimmed, the <think> block on every
 *                           assistant turn after the last user query, and a generation
 *                           prompt that opens "<think>\n" (closed empty with
 *                           enable_thinking=false); a system message after the first is
 *                           rendered as a system turn (the template refuses it);
 *       CHAT_FAMILY_CHATML  anything else: plain ChatML, tool calls/results written as HERMES
 *                           does (a fallback; chat_format_from_gguf says so once on stderr).
 *     Byte-identity with jinja2 is tested in tests/test_chat_template.py.
 *
 *  3. A streaming tool-call parser (chat_parser): feed generated text, get plain text and
 *     structured calls. Robust to slips of quantised models; text that is not a valid call is
 *     passed through as text, never dropped.
 *
 * JSON values are cJSON trees. Trees made by chat_json_parse keep each number's source text in
 * the node's valuestring, so that re-serialising reproduces Python's json.dumps exactly (1 vs
 * 1.0, big integers). Strings are C strings: a "\u0000" escape truncates a string there.
 */
#ifndef RL_CHAT_H
#define RL_CHAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "gguf/gguf.h"

/* ---- growable byte buffer ----------------------------------------------------------------
 * Appends never fail visibly: on out of memory `oom` is set and later appends are ignored, so
 * a builder checks once at the end. p is always NUL terminated when non-NULL. */
typedef struct {
    char *p;
    size_t n, cap;
    bool oom;
} chat_buf;
void chat_buf_put(chat_buf *b, const char *s, size_t n);
void chat_buf_puts(chat_buf *b, const char *s);
void chat_buf_putc(chat_buf *b, char c);
void chat_buf_free(chat_buf *b);
/* Take ownership of the bytes (malloc'd, NUL terminated; "" for an empty buffer) or NULL on oom. */
char *chat_buf_take(chat_buf *b, size_t *len);

/* ---- Python-compatible JSON ------------------------------------------------------------ */

/* Parse JSON text s[0..n) (the whole text must be one value plus whitespace). Numbers keep
 * their lexeme (see above). NULL with rl_lasterr set on a syntax error. */
cJSON *chat_json_parse(const char *s, size_t n);
/* Like chat_json_parse after repairing the bracket slips models make: a closing bracket of
 * the wrong kind is replaced by the right one, missing closers (and an unterminated string)
 * are completed, and text after the value is ignored. *used (optional) = bytes of s that
 * belonged to the value. */
cJSON *chat_json_parse_lenient(const char *s, size_t n, size_t *used);
/* json.dumps(v, ensure_ascii=False) (separators ", " and ": "). Returns 0, -1 on oom. */
int chat_json_dumps(const cJSON *v, chat_buf *out);
/* Python str(v) as Jinja's `|string` filter gives it: strings raw, True/False/None, ints,
 * float repr, containers as Python repr ("['a', 1]"). */
int chat_json_pystr(const cJSON *v, chat_buf *out);
/* Python's repr() of a float (shortest round trip, "1.0", "1e-05", "1e+16", "inf"). */
void chat_py_float_repr(double v, char out[40]);

/* ---- conversation ---------------------------------------------------------------------- */

typedef enum { CHAT_SYSTEM = 0, CHAT_USER, CHAT_ASSISTANT, CHAT_TOOL } chat_role;

typedef struct {
    char *id;        /* optional call id (not rendered by the Qwen templates) */
    char *name;      /* function name */
    char *arguments; /* JSON text of the arguments object */
} chat_call;

typedef struct {
    chat_role role;
    char *content;      /* NULL = none (rendered as "") */
    char *reasoning;    /* reasoning_content; NULL = absent */
    char *tool_call_id; /* tool messages: the call answered (not rendered) */
    chat_call *calls;   /* assistant tool calls */
    int n_calls;
} chat_msg;

typedef struct {
    chat_msg *msgs;
    int n, cap;
    cJSON *tools; /* JSON array of tool definitions ({"type":"function","function":{...}} or
                     the bare function objects); NULL = no tools */
} chat_conv;

/* "system", "user", "assistant", "tool"; chat_role_parse returns -1 for anything else. */
const char *chat_role_name(chat_role r);
int chat_role_parse(const char *s);

void chat_conv_init(chat_conv *c);
void chat_conv_free(chat_conv *c); /* frees messages and tools; c can be reused after init */
/* Append a message (content copied, may be NULL). Returns its index or -1 (oom). */
int chat_conv_add(chat_conv *c, chat_role role, const char *content);
/* Append a tool call to message `msg` (an assistant message). args_json NULL means "{}".
 * 0 or -1. */
int chat_conv_add_call(chat_conv *c, int msg, const char *name, const char *args_json, const char *id);
/* Remove every message from index `from` on. */
void chat_conv_truncate(chat_conv *c, int from);
/* Replace the tools with a JSON array given as text (NULL or "" removes them). 0 or -1. */
int chat_conv_set_tools_json(chat_conv *c, const char *json, size_t len);
/* Load an OpenAI-style request: either {"messages":[...], "tools":[...]} or a bare messages
 * array. Message content may be a string, null, or a list of {"type":"text","text":...}
 * parts (concatenated). Tool call arguments may be an object or a JSON string. 0 or -1 with
 * rl_lasterr naming the offending message. */
int chat_conv_from_json(chat_conv *c, const char *json, size_t len);

/* ---- templates ------------------------------------------------------------------------- */

typedef enum {
    CHAT_FAMILY_CHATML = 0,
    CHAT_FAMILY_HERMES,
    CHAT_FAMILY_CODER,
    CHAT_FAMILY_QWEN35
} chat_family;

typedef struct {
    chat_family family;
    bool think; /* HERMES: the template has the Qwen3 <think>/reasoning_content logic;
                   QWEN35: always (its generation prompt opens the <think> block) */
    bool known; /* false when the template was absent or not recognised (fallback) */
} chat_format;

const char *chat_family_name(chat_family f); /* "chatml", "hermes", "coder", "qwen35" */
/* Classify a Jinja template text (NULL = none). */
chat_format chat_format_detect(const char *tmpl);
/* Detect from the GGUF's tokenizer.chat_template. A qwen35 / qwen35moe file whose template is
 * absent or not recognised gets the Qwen3.5 format (its architecture's official template).
 * Otherwise, when the template is absent or unknown, prints one line on stderr (once per
 * process) saying that plain ChatML is used. */
chat_format chat_format_from_gguf(const gguf_file *f);

typedef struct {
    bool add_generation_prompt;
    int enable_thinking; /* -1 = not passed (default), 0 = false, 1 = true (HERMES think only) */
} chat_render_opts;

/* Render the conversation. NULL opts = {add_generation_prompt=true, enable_thinking=-1}.
 * The output is appended to *out. 0, or -1 on oom. */
int chat_render(const chat_format *fmt, const chat_conv *c, const chat_render_opts *opts, chat_buf *out);
/* The byte ranges of a rendering that hold client text rather than template markup: the
 * contents of system, user and tool messages and the tool definitions (assistant turns are
 * the model's own output and stay as rendered). Pairs [v[2i], v[2i+1]) in ascending order,
 * offsets into the output buffer (counting the bytes it held before). The server tokenises
 * them without matching special tokens (tokenizer_encode_plain), so "<|im_start|>" typed by a
 * user or read from a file by an agent stays text and cannot open a turn. */
typedef struct {
    size_t *v;
    size_t n, cap;
    bool oom;
} chat_spans;
void chat_spans_free(chat_spans *sp);
/* chat_render that also records the client-text ranges in *plain (NULL: not recorded). */
int chat_render_spans(const chat_format *fmt, const chat_conv *c, const chat_render_opts *opts, chat_buf *out,
                      chat_spans *plain);

/* ---- streaming tool-call parser -------------------------------------------------------
 * Recognises <tool_call>…</tool_call> blocks holding either a JSON call
 *   {"name": N, "arguments": {...}}       (HERMES; "parameters" is accepted for "arguments",
 *                                          arguments given as a JSON string are parsed)
 * or XML calls
 *   <function=N>\n<parameter=K>\nV\n</parameter>\n...</function>   (CODER)
 * whatever the template family (models drift between the two). A bare <function=...> block
 * without <tool_call> is accepted too. Repairs:
 *   - JSON: wrong closing brackets, missing closers, trailing junk after the object;
 *   - XML: missing </parameter> (value ends at the next <parameter=, known <KEY> or
 *     </function>), the <KEY>value</KEY> / <KEY>value</parameter> slip for <parameter=KEY>,
 *     a missing </function> or </tool_call> at the end of the output;
 * XML values are typed by the tool's JSON schema (parameters.properties[K].type, a type list or
 * anyOf): integer/number/boolean/null/object/array are parsed when the text is a valid value
 * of that type, in schema order; otherwise (and for parameters without a schema) the text is a
 * string. One leading and one trailing newline of a value are removed (the template adds them).
 * Arguments come out as json.dumps text of an object, in the order the parameters appeared.
 *
 * A call is passed on only when it fits the declared tools (when `tools` is given): the name is
 * one of them, the arguments an object with every `required` key, each argument of a type its
 * property schema allows; otherwise its block is text. An output that was cut short
 * (chat_parser_finish_cut) never yields a call whose closing tag was not generated.
 *
 * Text: everything outside calls, byte for byte, except whitespace directly before a call, and
 * whitespace-only text between or after calls, which is dropped (the templates put it there).
 * A partial tag at the end of a chunk is held back until it is known; a block that does not
 * parse is emitted as text exactly as generated (and counted in n_failed). */
typedef struct chat_parser chat_parser;

typedef struct {
    void (*text)(void *ud, const char *s, size_t n);
    void (*call)(void *ud, const char *name, const char *args_json);
    void *ud;
} chat_parser_cb;

/* tools: the conversation's tools array (may be NULL; not copied: keep it alive). */
chat_parser *chat_parser_new(const cJSON *tools, const chat_parser_cb *cb);
void chat_parser_free(chat_parser *p);
/* Feed generated bytes. 0, or -1 on oom. */
int chat_parser_feed(chat_parser *p, const char *s, size_t n);
/* End of generation: parse or release whatever is held. 0 or -1. */
int chat_parser_finish(chat_parser *p);
/* The same, saying whether the output was cut short (length, context end, cancelled, error):
 * then a block still open is returned as text, never as a call with repaired arguments. */
int chat_parser_finish_cut(chat_parser *p, bool cut);
/* True while inside a (possible) call: text is being held for it. */
bool chat_parser_in_call(const chat_parser *p);
int chat_parser_n_calls(const chat_parser *p);
int chat_parser_n_failed(const chat_parser *p);

/* Parse one call body (the text between <tool_call> and </tool_call>). Appends the calls found
 * to msg (an assistant message of c, index msg). Returns the number of calls (>= 1) or 0 if
 * the body is not a call, -1 on oom. Exposed for tests and the server. */
int chat_parse_call_body(const cJSON *tools, const char *body, size_t n, chat_conv *c, int msg);

#endif
