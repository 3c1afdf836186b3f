/* simple.c — the smallest program on Red Lite's C API (include/redlite.h): open a model, create a
 * session, feed a prompt, stream a greedy answer, close.
 *
 *   cc simple.c $(pkg-config --cflags --libs redlite) -o simple
 *   ./simple model.gguf "def fibonacci(n):" 32
 *
 * The text is fed as it is (no chat template): a completion, like `redlite generate --raw`. For a
 * chat, write the template's turn markers into the text ("<|im_start|>user\n...<|im_end|>\n
 * <|im_start|>assistant\n"); control tokens in fed text are matched. */
#include <redlite.h>

#include <stdio.h>
#include <stdlib.h>

static int print_piece(void *user_data, int32_t token, const char *text, size_t len) {
    (void)token;
    fwrite(text, 1, len, (FILE *)user_data);
    fflush((FILE *)user_data);
    return 0; /* non-zero would stop the answer here */
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL.gguf PROMPT [N_TOKENS]\n", argv[0]);
        return 2;
    }
    if (redlite_abi_version() != REDLITE_ABI_VERSION) {
        fprintf(stderr, "libredlite ABI %d, this program was built for %d\n", redlite_abi_version(),
                REDLITE_ABI_VERSION);
        return 1;
    }
    redlite_model_params mp;
    redlite_model_params_init(&mp);
    mp.n_threads = 2;
    redlite_model *model = redlite_model_open(argv[1], &mp);
    if (!model) {
        fprintf(stderr, "simple: %s\n", redlite_last_error());
        return 1;
    }
    redlite_session_params sp;
    redlite_session_params_init(&sp);
    sp.n_ctx = 2048;
    redlite_session *s = redlite_session_new(model, &sp);
    if (!s || redlite_feed_text(s, argv[2])) {
        fprintf(stderr, "simple: %s\n", redlite_last_error());
        redlite_session_free(s);
        redlite_model_close(model);
        return 1;
    }
    redlite_gen_params gp;
    redlite_gen_params_init(&gp); /* greedy */
    gp.n_predict = argc > 3 ? atoi(argv[3]) : 32;
    int stop = redlite_generate(s, &gp, print_piece, stdout);
    if (stop < 0) fprintf(stderr, "simple: %s\n", redlite_last_error());
    else fprintf(stderr, "\n[redlite %s: %d tokens in the context, stop %d]\n", redlite_version(),
                 redlite_session_n_past(s), stop);
    redlite_session_free(s);
    redlite_model_close(model);
    return stop < 0;
}
