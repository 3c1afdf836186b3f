/* redlite.h — the public C API of Red Lite: open a Qwen3-Next GGUF model, create a session (one
 * sequence with its context), feed text or tokens, generate with a callback, close.
 *
 * Link with `pkg-config --cflags --libs redlite` (libredlite.so, or libredlite.a with --static).
 * Only what this header declares is exported from libredlite.so; everything else is internal.
 *
 * ABI contract (libredlite.so.REDLITE_ABI_VERSION):
 *   - handles are opaque; their layout is never part of the ABI;
 *   - every parameter struct starts with `size`, set by its *_init function to the size the
 *     caller was compiled with: the library reads only the fields that size covers and takes the
 *     defaults for the rest, so a program built against an older header keeps working;
 *   - fields are only ever appended to the structs; functions are only ever added. A change that
 *     breaks this raises REDLITE_ABI_VERSION (and the library's soname);
 *   - redlite_abi_version() returns the library's value: compare it with REDLITE_ABI_VERSION.
 *
 * Threads: calls on one session come from one thread at a time; different sessions (and
 * models) may be used from different threads. redlite_last_error() is per thread.
 * Errors: functions return NULL or a negative value; redlite_last_error() then holds one line
 * that says what is wrong. Strings passed in are UTF-8 and copied when kept.
 */
#ifndef REDLITE_H
#define REDLITE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define REDLITE_VERSION_MAJOR 0
#define REDLITE_VERSION_MINOR 1
#define REDLITE_VERSION_PATCH 0
#define REDLITE_VERSION_STRING "0.1.0"
/* The binary interface: the soname is libredlite.so.REDLITE_ABI_VERSION. */
#define REDLITE_ABI_VERSION 1

#if defined(__GNUC__)
#define REDLITE_API __attribute__((visibility("default")))
#else
#define REDLITE_API
#endif

typedef struct redlite_model redlite_model;     /* weights, tokenizer: shared by sessions */
typedef struct redlite_session redlite_session; /* one sequence: its context and position */

REDLITE_API const char *redlite_version(void); /* "0.1.0" (REDLITE_VERSION_STRING of the library) */
REDLITE_API int redlite_abi_version(void);     /* REDLITE_ABI_VERSION of the library */
REDLITE_API const char *redlite_last_error(void);

/* ---- model ------------------------------------------------------------------------------- */
typedef struct {
    size_t size;         /* sizeof(redlite_model_params): set by redlite_model_params_init */
    const char *backend; /* "cpu" (default), "cuda" or "auto" */
    int n_threads;       /* CPU threads; 0 = all online CPUs */
} redlite_model_params;

REDLITE_API void redlite_model_params_init(redlite_model_params *p);
/* NULL on error (missing file, not a GGUF, unsupported architecture or tensor type). params
 * may be NULL (the defaults). */
REDLITE_API redlite_model *redlite_model_open(const char *path, const redlite_model_params *params);
/* After every session of the model is freed. NULL is allowed. */
REDLITE_API void redlite_model_close(redlite_model *m);
REDLITE_API int redlite_model_n_vocab(const redlite_model *m);
REDLITE_API int redlite_model_n_ctx_train(const redlite_model *m); /* the context it was trained on */

/* Text to token ids. Writes at most `cap` ids to `out` (may be NULL when cap is 0) and returns
 * how many the text has (call again with a larger buffer when that exceeds cap), or -1.
 * parse_special != 0 matches control tokens written in the text ("<|im_start|>"). */
REDLITE_API int redlite_tokenize(const redlite_model *m, const char *text, size_t len, int parse_special,
                                 int32_t *out, int cap);
/* Token ids to text, malloc'd and NUL terminated (free with redlite_free), or NULL. */
REDLITE_API char *redlite_detokenize(const redlite_model *m, const int32_t *ids, int n);
REDLITE_API void redlite_free(void *p);

/* ---- session ----------------------------------------------------------------------------- */
typedef struct {
    size_t size;       /* sizeof(redlite_session_params): set by redlite_session_params_init */
    int n_ctx;         /* context positions; 0 = 4096 */
    int n_batch;       /* rows per prompt chunk; 0 = the backend's default */
    const char *kv;    /* KV cache format "f16" (default) or "f32" */
    const char *cache; /* routed experts: NULL/"auto" (a bounded cache sized to the machine),
                          "full", "mmap", or a budget in MiB ("4096") */
} redlite_session_params;

REDLITE_API void redlite_session_params_init(redlite_session_params *p);
/* NULL on error (out of memory, a cache budget below the model's minimum). params may be NULL. */
REDLITE_API redlite_session *redlite_session_new(redlite_model *m, const redlite_session_params *params);
REDLITE_API void redlite_session_free(redlite_session *s); /* NULL is allowed */
/* Forget the sequence (position 0). */
REDLITE_API void redlite_session_reset(redlite_session *s);
/* Tokens the context holds now. */
REDLITE_API int redlite_session_n_past(const redlite_session *s);

/* Append tokens / text (tokenised with control tokens matched) to the sequence and evaluate
 * them. 0, or -1 (does not fit the context, engine failure: the sequence then holds what was
 * evaluated before). An empty append is a no-op. */
REDLITE_API int redlite_feed_tokens(redlite_session *s, const int32_t *ids, int n);
REDLITE_API int redlite_feed_text(redlite_session *s, const char *text);

/* ---- generation -------------------------------------------------------------------------- */
typedef enum {
    REDLITE_STOP_EOG = 0,       /* the model ended its turn (the end token is not emitted) */
    REDLITE_STOP_LENGTH = 1,    /* n_predict tokens */
    REDLITE_STOP_CONTEXT = 2,   /* the context is full */
    REDLITE_STOP_CALLBACK = 3,  /* the callback returned non-zero */
} redlite_stop;

typedef struct {
    size_t size;         /* sizeof(redlite_gen_params): set by redlite_gen_params_init */
    int n_predict;       /* at most this many tokens; < 0 = until the end of the turn or context */
    float temperature;   /* <= 0: greedy (the default: 0) */
    int top_k;           /* <= 0: off (default 40, used with a temperature) */
    float top_p;         /* >= 1: off (default 0.95) */
    float min_p;         /* <= 0: off (default 0.05) */
    uint32_t seed;       /* 0xFFFFFFFF (the default): from the clock */
} redlite_gen_params;

/* Called with each piece of text as it becomes final (UTF-8 complete; may be empty), and the
 * token that produced it (-1 for text released at the end). Return non-zero to stop. */
typedef int (*redlite_text_cb)(void *user_data, int32_t token, const char *text, size_t len);

REDLITE_API void redlite_gen_params_init(redlite_gen_params *p);
/* Sample from the last fed token on, calling cb (may be NULL) for the text. Every emitted
 * token but the last is evaluated into the sequence, so a later feed continues the
 * conversation. Returns a redlite_stop (>= 0) or -1 on error. params may be NULL. */
REDLITE_API int redlite_generate(redlite_session *s, const redlite_gen_params *params, redlite_text_cb cb,
                                 void *user_data);

#ifdef __cplusplus
}
#endif
#endif
