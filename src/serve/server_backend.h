/* server_backend.h — the inference backends of `redlite serve` (srv_backend, server.h):
 *
 *   - session: the real model through the session layer (session.h): prefix reuse of the held
 *     sequence and checkpoints, sampling, stop strings, speculation;
 *   - script (TEST ONLY, `--test-script`): no model evaluation at all. The GGUF's tokenizer and
 *     chat template are loaded (so rendering and token counts are real), and every request
 *     "generates" the next of a list of scripted answers token by token, honouring max tokens,
 *     stop strings, end-of-generation tokens written in the script, the context size and
 *     cancellation, optionally with a delay per token. It exists so that the protocol side
 *     (tool-call parsing, streaming, queueing, disconnects) is testable deterministically with
 *     a model that cannot be made to call a tool. Never use it to serve anybody.
 */
#ifndef RL_SERVER_BACKEND_H
#define RL_SERVER_BACKEND_H

#include "serve/server.h"

typedef struct {
    const char *model_path;
    int n_ctx;          /* 0: 32768 */
    const char *script; /* answers separated by a line "---" (used in turn) */
    int delay_ms;       /* per token */
} srv_script_params;

/* NULL with rl_lasterr set. */
srv_backend *srv_backend_script(const srv_script_params *p);

typedef struct {
    const char *model_path;
    const char *backend; /* "cpu" | "cuda" | "auto" */
    int n_threads;
    int n_ctx, n_batch; /* n_ctx 0: planned (run/ctx_plan.h), said in one line on stderr */
    const char *kv;     /* KV cache format "f32" | "f16" (NULL = the default) */
    const char *cache_spec;
    bool iq_repack;        /* session_model_params.iq_repack */
    bool map_weights;      /* session_model_params.map_weights */
    const char *vram_spec; /* --vram-mib (NULL: every weight on the device) */
    const char *vram_pin, *vram_miss;
    float route_bias;
    const char *route_trace;
    int n_slots;            /* --parallel: conversations held at once (0 = auto from the memory plan) */
    int ram_states;         /* evicted conversations kept in RAM (-1 = one per slot, 0 = none) */
    uint64_t ram_max_bytes; /* and their bytes at most (0 = no byte cap) */
    int max_checkpoints;    /* in-memory, per slot (0 = session default) */
    const char *state_dir;  /* disk checkpoints, or NULL */
    uint64_t state_max_bytes;
    int state_min_tokens; /* new tokens since the last disk save before saving again */
    int spec;             /* spec_mode (session.h): speculative decoding, never changes tokens */
    int draft_max;        /* 0 = the session's default */
    bool verbose;
} srv_session_params;

/* The real model through the session layer. NULL with rl_lasterr set. */
srv_backend *srv_backend_session(const srv_session_params *p);
void srv_backend_free(srv_backend *b);
#endif
