/* test_cuda_spec.c — speculative decoding never changes the answer, on the CUDA backend: the
 * identity and stop tests of tests/c/test_spec.c (every draft mode none/lookup/mtp/auto, greedy
 * and seeded sampling, random, repetitive and periodic prompts, stops at every token index
 * inside a verify), run with TEST_SPEC_BACKEND "cuda": verify rows through the small-batch
 * graphs, snapshots in device slots, the MTP head on the GPU (tiny-b has one). The bounded
 * expert cache and its injected read errors are CPU-only (CUDA holds every expert).
 * Without a GPU: "test_cuda_spec: skipped: ..." and exit 77. */
#include "backend/backend.h"
#define TEST_SPEC_BACKEND "cuda"
#define TEST_SPEC_NAME "test_cuda_spec"
#define main test_spec_main
#include "test_spec.c"
#undef main

int main(void) {
    const char *why = NULL;
    if (!backend_cuda.available(&why)) return check_skip("test_cuda_spec", why ? why : "no CUDA device");
    return test_spec_main();
}
