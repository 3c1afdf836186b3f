// bench/cuda_persist.cu — what a persistent decode kernel would give (issue 15, item 1: "explore the
// persistent-kernel end of the road and report what it gives"), measured on a model of a decode token
// rather than by rewriting the engine first.
//
// A Qwen3-Next decode token is a chain of dependent steps: per layer the input projections, the
// DeltaNet step (or attention), the output projection, add + norm, the router and its top-k, the
// experts' gate/up, their down, the combine. Each step needs the whole result of the one before, so
// the engine runs it as one kernel each (~13 graph nodes a layer, ~600 a token) and the GPU idles at
// every boundary: the next grid launches, waits for the previous one's stores, and only then starts
// its weight loads (with RL_CUDA_PDL=1 the engine stages weights before its wait, but a grid that fills
// the GPU leaves no room for the next one's blocks until it drains). A persistent kernel keeps one grid resident for
// the whole token and replaces each boundary by a grid-wide barrier; it can issue the next step's
// weight loads before that barrier, since weights do not depend on the step before.
//
// The model: a chain of phases, each y = W x with W of 4-bit codes (0.5 bytes a weight, Q4_K's
// 0.5625 rounded) and x the int8 quantisation of an earlier phase's y (x = y >> s, s such that
// |x| <= 127: every consumer first reduces its whole input vector, as the engine's GEMV blocks quantise
// their token — though those per 256-value super-block, a shorter chain than this whole-vector one). Per layer (DeltaNet layer sizes of the 80B model, bytes of a Q4_K_M layer):
//   A  2048 -> 12352  (qkv 8192 + z 4096 + ba 64)       L1 light step (conv + DeltaNet step)
//   B  4096 -> 2048   (out projection, input from A)    L2 light step (add + norm)
//   C  2048 -> 512    (router, input from B)            L3 light step (top-k)
//   D  2048 -> 11264  (11 experts' gate+up, from B)
//   E  6144 -> 2048   (their down, from D)              L4 light step (combine)
// A light step is a phase of 32 rows of 2048 (32 KiB): a dependent step that moves almost nothing.
// Chains: "gemv" (A-E, 5 phases a layer) and "full" (A-E + L1-L4, 9 a layer), 48 layers: 1.69 GB a
// token (the engine's Q4_K_M file: ~1.9 GB). Integer arithmetic throughout (exact in any order), so
// every mode must give the same bits, and the host reference checks a 2-layer chain bit for bit.
//
// Modes (same grid: every SM filled, warps walking row groups with the next group's weights in
// registers while the current one is summed):
//   graph       one kernel per phase, captured in a CUDA graph (the engine's default)
//   graph+pdl   the same with programmatic dependent launch (weights loaded before the PDL wait)
//   persistent  one cooperative kernel per token; a grid barrier between phases; each warp loads
//               its first row group of the next phase before the barrier
//
// --producer-max moves each consumer's input reduction (the max that picks its shift) to the producer: one
// atomicMax a producer block, read by the consumers instead of a pass over their input (same value, same bits).
//
// H200, 2026-12-04 (bench/results/2026-12-04-session22-h200.md): full chain graph 2.92 ms a token, graph+pdl
// 2.47, persistent 3.19; with --producer-max 2.23 / 1.75 / 2.43. A graph node costs 0.64 us, a grid barrier 1.8.
//
//   nvcc -O3 -std=c++17 -arch=sm_90 bench/cuda_persist.cu -o /tmp/cuda_persist && /tmp/cuda_persist [--help]
//
// Exit 0 when every mode matched the reference, 1 on a mismatch, 77 without a usable GPU.
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <vector>

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "cuda_persist: %s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

enum { WARPS = 8, R = 2, MAX_NI = 6 }; // warps a block, rows a group, 1024-weight chunks a row at most

struct Phase {
    int n_in, n_out, src;  // input: the first n_in values of phase src's output (-1: the token's input)
    const uint4 *w;        // n_out rows of n_in / 2 bytes (16 bytes = 32 codes: low nibbles first)
    int *y;                // n_out outputs
    int qn;                // rows its consumers quantise (their n_in; 0: none)
    int *ymax;             // --producer-max: max |y| over those rows, reduced by the producer
};
struct Chain {
    Phase *ph;       // device copy
    int n;
    const int *y0;   // the token's input vector (2048)
    const int *y0max; // its max |value|
    int pmax;        // 1: consumers take their input's max from the producer (--producer-max)
    unsigned *bar;   // [0] arrivals, [1] generation
    int nap;         // grid barrier: ns of __nanosleep between polls (0: busy polling)
};

// ---- one phase's work for a block: quantise the input, then the warp's row groups -----------------

__device__ __forceinline__ const int *src_of(const Chain &c, const Phase &p) { return p.src < 0 ? c.y0 : c.ph[p.src].y; }

// load a row group's weights (R rows x ni 16-byte chunks a lane); rows past n_out read nothing
__device__ __forceinline__ void load_group(const Phase &p, int g, uint4 (&buf)[R][MAX_NI]) {
    const int lane = threadIdx.x & 31, ni = p.n_in / 1024, rb = p.n_in / 32; // 16-byte chunks a row
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int row = g * R + r;
#pragma unroll
        for (int j = 0; j < MAX_NI; j++)
            if (j < ni && row < p.n_out) buf[r][j] = __ldg(p.w + (size_t)row * rb + lane + 32 * j);
    }
}

// x = src >> s in shared memory (int8, packed 4 a word) and sum(x); every thread of the block takes part
// (known >= 0: the max |src| its producer reduced; the same value, so the same bits, without this pass)
__device__ void build_x(const int *src, int n, int *xs, int *red, int known) {
    int m = known;
    if (known < 0) {
        m = 0;
        for (int i = threadIdx.x; i < n; i += blockDim.x) m = max(m, abs(__ldcg(src + i))); // L2: written by other SMs in this launch
        for (int o = 16; o; o >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
        if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
        __syncthreads();
        m = 0;
        for (int i = 0; i < WARPS; i++) m = max(m, red[i]);
    }
    const int s = max(0, 32 - __clz(m) - 7);
    int sx = 0;
    for (int i = threadIdx.x; i < n / 4; i += blockDim.x) {
        const int4 v = __ldcg((const int4 *)(src + 4 * i));
        const int a = v.x >> s, b = v.y >> s, cc = v.z >> s, d = v.w >> s;
        sx += a + b + cc + d;
        xs[i] = (a & 255) | ((b & 255) << 8) | ((cc & 255) << 16) | ((unsigned)(d & 255) << 24);
    }
    for (int o = 16; o; o >>= 1) sx += __shfl_xor_sync(0xffffffffu, sx, o);
    __syncthreads(); // every warp has read red[] as maxima
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = sx;
    __syncthreads();
    sx = 0;
    for (int i = 0; i < WARPS; i++) sx += red[i];
    red[WARPS] = sx; // read after the caller's __syncthreads
}

// the rows of group g from buf: sum over codes (nibble - 8) * x
__device__ __forceinline__ void sum_group(const Phase &p, int g, const uint4 (&buf)[R][MAX_NI], const int *xs, int sx, int &wmax) {
    const int lane = threadIdx.x & 31, ni = p.n_in / 1024;
#pragma unroll
    for (int r = 0; r < R; r++) {
        int acc = 0;
#pragma unroll
        for (int j = 0; j < MAX_NI; j++) {
            if (j >= ni) break;
            const int c = lane + 32 * j; // 16-byte chunk: codes 32c .. 32c + 31
            const uint32_t u[4] = {buf[r][j].x, buf[r][j].y, buf[r][j].z, buf[r][j].w};
#pragma unroll
            for (int k = 0; k < 4; k++) {
                acc = __dp4a((int)(u[k] & 0x0f0f0f0fu), xs[8 * c + k], acc);
                acc = __dp4a((int)((u[k] >> 4) & 0x0f0f0f0fu), xs[8 * c + 4 + k], acc);
            }
        }
        for (int o = 16; o; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        const int row = g * R + r;
        if (lane == 0 && row < p.n_out) p.y[row] = acc - 8 * sx;
        if (row < p.qn) wmax = max(wmax, abs(acc - 8 * sx)); // every lane holds the row's sum
    }
}

__device__ __forceinline__ int groups_of(const Phase &p) { return (p.n_out + R - 1) / R; }

// the warp's row groups g, g + stride, ... of p; a holds g's weights on entry. Ping-pong between a and b:
// the next group's loads are in flight while the current one is summed (no register copies)
__device__ __forceinline__ void walk_groups(const Phase &p, int g, int stride, uint4 (&a)[R][MAX_NI], uint4 (&b)[R][MAX_NI],
                                            const int *xs, int sx, int &wmax) {
    const int ng = groups_of(p);
    while (g < ng) {
        if (g + stride < ng) load_group(p, g + stride, b);
        sum_group(p, g, a, xs, sx, wmax);
        g += stride;
        if (g >= ng) break;
        if (g + stride < ng) load_group(p, g + stride, a);
        sum_group(p, g, b, xs, sx, wmax);
        g += stride;
    }
}

// the max |input| a consumer may take from its producer, or -1 (reduce it here)
__device__ __forceinline__ int known_max(const Chain &c, const Phase &p) {
    if (!c.pmax) return -1;
    return __ldcg(p.src < 0 ? c.y0max : c.ph[p.src].ymax);
}
// the producer's side: the block's warps' maxima, one atomicMax a block (wm: WARPS ints of shared memory)
__device__ __forceinline__ void publish_max(const Chain &c, const Phase &p, int wmax, int *wm) {
    if (!c.pmax || !p.qn) return;
    if ((threadIdx.x & 31) == 0) wm[threadIdx.x >> 5] = wmax;
    __syncthreads();
    if (threadIdx.x == 0) {
        int m = 0;
        for (int i = 0; i < WARPS; i++) m = max(m, wm[i]);
        atomicMax(p.ymax, m);
    }
}

// ---- graph modes: one kernel a phase ---------------------------------------------------------------

__global__ void __launch_bounds__(WARPS * 32, 2) k_phase(Chain c, int i, int pdl) {
    __shared__ int xs[6144 / 4], red[WARPS + 1], wm[WARPS];
    const Phase p = c.ph[i];
    const int warp = threadIdx.x >> 5, ng = groups_of(p), stride = gridDim.x * WARPS;
    int g = blockIdx.x * WARPS + warp;
    uint4 cur[R][MAX_NI], nxt[R][MAX_NI];
    if (g < ng) load_group(p, g, cur); // weights: written once, readable before the wait
    if (pdl) asm volatile("griddepcontrol.wait;" ::: "memory");
    build_x(src_of(c, p), p.n_in, xs, red, known_max(c, p));
    __syncthreads();
    if (pdl) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    int wmax = 0;
    walk_groups(p, g, stride, cur, nxt, xs, red[WARPS], wmax);
    publish_max(c, p, wmax, wm);
}

// ---- persistent mode: one kernel a token, a grid barrier between phases -----------------------------

// Sense by generation: the last block to arrive resets the count and bumps the generation; the others
// spin on it. Needs every block resident (cooperative launch).
__device__ __forceinline__ void grid_barrier(unsigned *bar, int nap) {
    __syncthreads();
    if (threadIdx.x == 0) {
        volatile unsigned *gen = bar + 1;
        const unsigned g = *gen;
        __threadfence();
        if (atomicAdd(bar, 1u) == gridDim.x - 1) {
            bar[0] = 0;
            __threadfence();
            atomicExch(bar + 1, g + 1);
        } else {
            while (*gen == g)
                if (nap) __nanosleep(nap);
        }
        __threadfence();
    }
    __syncthreads();
}

__global__ void __launch_bounds__(WARPS * 32, 2) k_persist(Chain c) {
    __shared__ int xs[6144 / 4], red[WARPS + 1], wm[WARPS];
    const int warp = threadIdx.x >> 5, stride = gridDim.x * WARPS, g0 = blockIdx.x * WARPS + warp;
    uint4 cur[R][MAX_NI], nxt[R][MAX_NI];
    if (g0 < groups_of(c.ph[0])) load_group(c.ph[0], g0, cur);
    for (int i = 0; i < c.n; i++) {
        const Phase p = c.ph[i];
        if (i) grid_barrier(c.bar, c.nap); // phase i - 1's stores are visible; cur holds phase i's first group
        build_x(src_of(c, p), p.n_in, xs, red, known_max(c, p));
        __syncthreads();
        const int sx = red[WARPS];
        int wmax = 0;
        walk_groups(p, g0, stride, cur, nxt, xs, sx, wmax);
        publish_max(c, p, wmax, wm);
        if (i + 1 < c.n && g0 < groups_of(c.ph[i + 1])) load_group(c.ph[i + 1], g0, cur); // before the barrier
        __syncthreads(); // xs / red are rebuilt after the barrier
    }
}

// ---- the floors: a dependent step that does nothing ------------------------------------------------

__global__ void k_empty(int pdl) {
    if (pdl) asm volatile("griddepcontrol.wait;" ::: "memory");
    if (pdl) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
__global__ void k_empty_persist(unsigned *bar, int n, int nap) {
    for (int i = 1; i < n; i++) grid_barrier(bar, nap);
}

// ---- host --------------------------------------------------------------------------------------------

struct HostPhase { int n_in, n_out, src; };

// the phases of `layers` layers; light steps when full
static std::vector<HostPhase> make_chain(int layers, bool full) {
    std::vector<HostPhase> v;
    int prev = -1; // the layer's input: the previous layer's E (or the token's input)
    for (int l = 0; l < layers; l++) {
        const int a = (int)v.size();
        v.push_back({2048, 12352, prev});
        if (full) v.push_back({2048, 32, prev}); // L1 reads the layer input (any dependent step would do)
        const int b = (int)v.size();
        v.push_back({4096, 2048, a});
        if (full) v.push_back({2048, 32, b});
        v.push_back({2048, 512, b});
        if (full) v.push_back({2048, 32, b});
        const int d = (int)v.size();
        v.push_back({2048, 11264, b});
        const int e = (int)v.size();
        v.push_back({6144, 2048, d});
        if (full) v.push_back({2048, 32, e});
        prev = e;
    }
    return v;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd() {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

// host reference of phase p (weights w as bytes, x from src)
static void ref_phase(const HostPhase &p, const uint8_t *w, const int *src, int *y) {
    int m = 0;
    for (int i = 0; i < p.n_in; i++) m = abs(src[i]) > m ? abs(src[i]) : m;
    const int s = m ? (32 - __builtin_clz((unsigned)m) - 7 > 0 ? 32 - __builtin_clz((unsigned)m) - 7 : 0) : 0;
    std::vector<int> x(p.n_in);
    for (int i = 0; i < p.n_in; i++) x[i] = src[i] >> s;
    for (int r = 0; r < p.n_out; r++) {
        const uint8_t *b = w + (size_t)r * (p.n_in / 2);
        int acc = 0;
        for (int c = 0; c < p.n_in / 32; c++)
            for (int k = 0; k < 16; k++) {
                acc += ((b[16 * c + k] & 15) - 8) * x[32 * c + k];
                acc += ((b[16 * c + k] >> 4) - 8) * x[32 * c + 16 + k];
            }
        y[r] = acc;
    }
}

struct Dev {
    std::vector<HostPhase> hp;
    std::vector<Phase> ph;
    Chain c;
    uint8_t *wall;
    size_t bytes;
    int *ymaxall; // every phase's producer max (reset before each token under --producer-max)
};

static Dev dev_make(const std::vector<HostPhase> &hp, const int *y0, std::vector<std::vector<uint8_t>> *keep, int pmax) {
    Dev d;
    d.hp = hp;
    d.bytes = 0;
    for (auto &p : hp) d.bytes += (size_t)p.n_out * p.n_in / 2;
    CK(cudaMalloc(&d.wall, d.bytes));
    CK(cudaMalloc(&d.ymaxall, hp.size() * sizeof(int)));
    std::vector<int> qn(hp.size(), 0); // the n_in of a phase's consumers (make_chain gives them one)
    for (auto &p : hp)
        if (p.src >= 0) qn[p.src] = p.n_in;
    std::vector<uint8_t> buf;
    size_t off = 0;
    for (auto &p : hp) {
        const size_t nb = (size_t)p.n_out * p.n_in / 2;
        buf.resize(nb);
        for (size_t i = 0; i < nb; i += 4) {
            const uint32_t r = rnd();
            memcpy(&buf[i], &r, 4);
        }
        if (keep) keep->push_back(buf);
        CK(cudaMemcpy(d.wall + off, buf.data(), nb, cudaMemcpyHostToDevice));
        Phase q;
        q.n_in = p.n_in, q.n_out = p.n_out, q.src = p.src, q.w = (const uint4 *)(d.wall + off);
        q.qn = qn[d.ph.size()], q.ymax = d.ymaxall + d.ph.size();
        CK(cudaMalloc(&q.y, (size_t)p.n_out * sizeof(int)));
        d.ph.push_back(q);
        off += nb;
    }
    CK(cudaMalloc(&d.c.ph, d.ph.size() * sizeof(Phase)));
    CK(cudaMemcpy(d.c.ph, d.ph.data(), d.ph.size() * sizeof(Phase), cudaMemcpyHostToDevice));
    d.c.n = (int)d.ph.size();
    int *y0d;
    CK(cudaMalloc(&y0d, 2048 * sizeof(int)));
    CK(cudaMemcpy(y0d, y0, 2048 * sizeof(int), cudaMemcpyHostToDevice));
    d.c.y0 = y0d;
    int m0 = 0, *m0d; // the token input's max over the 2048 values its consumers read
    for (int i = 0; i < 2048; i++) m0 = abs(y0[i]) > m0 ? abs(y0[i]) : m0;
    CK(cudaMalloc(&m0d, sizeof(int)));
    CK(cudaMemcpy(m0d, &m0, sizeof(int), cudaMemcpyHostToDevice));
    d.c.y0max = m0d;
    d.c.pmax = pmax;
    CK(cudaMalloc(&d.c.bar, 2 * sizeof(unsigned)));
    CK(cudaMemset(d.c.bar, 0, 2 * sizeof(unsigned)));
    return d;
}

static void dev_free(Dev &d) {
    for (auto &p : d.ph) CK(cudaFree(p.y));
    CK(cudaFree(d.c.ph));
    CK(cudaFree((void *)d.c.y0));
    CK(cudaFree((void *)d.c.y0max));
    CK(cudaFree(d.c.bar));
    CK(cudaFree(d.ymaxall));
    CK(cudaFree(d.wall));
}

static void dev_poison(Dev &d) {
    for (auto &p : d.ph) CK(cudaMemset(p.y, 0xA5, (size_t)p.n_out * sizeof(int)));
}

static std::vector<int> dev_last(Dev &d) {
    std::vector<int> y(d.ph.back().n_out);
    CK(cudaMemcpy(y.data(), d.ph.back().y, y.size() * sizeof(int), cudaMemcpyDeviceToHost));
    return y;
}

static int grid_blocks(int per_sm) {
    int dev, sms, per;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, k_persist, WARPS * 32, 0));
    if (per_sm > 0 && per_sm < per) per = per_sm;
    return sms * per;
}

// kern<<<grid, WARPS * 32, 0, s>>>(args...), with the PDL attribute when pdl
template <typename... P, typename... A> static void launch(void (*kern)(P...), int grid, int pdl, cudaStream_t s, A... args) {
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid), cfg.blockDim = dim3(WARPS * 32), cfg.stream = s, cfg.attrs = at;
    cfg.numAttrs = pdl ? 1 : 0;
    CK(cudaLaunchKernelEx(&cfg, kern, args...));
}

// the launches captured on s since cudaStreamBeginCapture, instantiated
static cudaGraphExec_t graph_end(cudaStream_t s) {
    cudaGraph_t g;
    CK(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t e;
    CK(cudaGraphInstantiate(&e, g, 0));
    CK(cudaGraphDestroy(g));
    return e;
}

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// one token as a graph of per-phase kernels (pdl: with the attribute)
static cudaGraphExec_t graph_make(Dev &d, int grid, int pdl, cudaStream_t s) {
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    if (d.c.pmax) CK(cudaMemsetAsync(d.ymaxall, 0, d.c.n * sizeof(int), s));
    for (int i = 0; i < d.c.n; i++) launch(k_phase, grid, pdl, s, d.c, i, pdl);
    return graph_end(s);
}

static void run_mode(Dev &d, int mode, int grid, cudaGraphExec_t ge, cudaStream_t s) {
    if (mode < 2) {
        CK(cudaGraphLaunch(ge, s));
    } else {
        if (d.c.pmax) CK(cudaMemsetAsync(d.ymaxall, 0, d.c.n * sizeof(int), s));
        void *args[] = {&d.c};
        CK(cudaLaunchCooperativeKernel((void *)k_persist, dim3(grid), dim3(WARPS * 32), args, 0, s));
    }
}

static const char *mode_name[3] = {"graph", "graph+pdl", "persistent"};

// tokens timed per mode, interleaved in rounds; returns the median ms a token per mode
static void time_modes(Dev &d, int grid, int tokens, int rounds, cudaStream_t s, double med[3], std::vector<int> out[3]) {
    cudaGraphExec_t ge[2] = {graph_make(d, grid, 0, s), graph_make(d, grid, 1, s)};
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<double> t[3];
    for (int r = 0; r < rounds; r++)
        for (int m = 0; m < 3; m++) {
            dev_poison(d);
            run_mode(d, m, grid, ge[m < 2 ? m : 0], s); // warm-up, and the result this mode gives
            CK(cudaStreamSynchronize(s));
            CK(cudaGetLastError());
            if (r == 0) out[m] = dev_last(d);
            CK(cudaEventRecord(e0, s));
            for (int k = 0; k < tokens; k++) run_mode(d, m, grid, ge[m < 2 ? m : 0], s);
            CK(cudaEventRecord(e1, s));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            t[m].push_back(ms / tokens);
        }
    for (int m = 0; m < 3; m++) med[m] = median(t[m]);
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    CK(cudaGraphExecDestroy(ge[0]));
    CK(cudaGraphExecDestroy(ge[1]));
}

static void usage(void) {
    fprintf(stderr, "usage: cuda_persist [--json] [--per-sm N] [--nap NS] [--producer-max]\n"
                    "  --json      one JSON object a row instead of the table\n"
                    "  --per-sm N  blocks per SM for every mode (default: as many as fit)\n"
                    "  --nap NS    the persistent barrier sleeps NS ns between polls (default 0: busy)\n"
                    "  --producer-max  each phase's producer reduces max |y| (one atomicMax a block), so its\n"
                    "              consumers skip their own pass over the input (the same value: the same bits)\n");
}

// one dependent step that does nothing, n times: a graph of n kernels (pdl: with the attribute) or one
// cooperative kernel with n - 1 grid barriers; the median us a step
static double empty_floor(int mode, int grid, int n, int nap, unsigned *bar, cudaStream_t s) {
    cudaGraphExec_t ge = nullptr;
    if (mode < 2) {
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        for (int i = 0; i < n; i++) launch(k_empty, grid, mode, s, mode);
        ge = graph_end(s);
    }
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<double> t;
    for (int r = 0; r < 6; r++) {
        CK(cudaEventRecord(e0, s));
        for (int k = 0; k < 10; k++) {
            if (mode < 2) CK(cudaGraphLaunch(ge, s));
            else {
                void *args[] = {&bar, &n, &nap};
                CK(cudaLaunchCooperativeKernel((void *)k_empty_persist, dim3(grid), dim3(WARPS * 32), args, 0, s));
            }
        }
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (r) t.push_back(1e3 * ms / (10.0 * n)); // round 0: warm-up
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    if (ge) CK(cudaGraphExecDestroy(ge));
    return median(t);
}

int main(int argc, char **argv) {
    bool json = false;
    int per_sm = 0, nap = 0, pmax = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = true;
        else if (!strcmp(argv[i], "--per-sm") && i + 1 < argc) per_sm = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--nap") && i + 1 < argc) nap = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--producer-max")) pmax = 1;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage();
            return 0;
        } else {
            fprintf(stderr, "cuda_persist: unknown argument '%s'\n", argv[i]);
            usage();
            return 2;
        }
    }
    if (per_sm < 0 || nap < 0 || nap > 100000) {
        fprintf(stderr, "cuda_persist: --per-sm and --nap take a count >= 0 (nap <= 100000 ns)\n");
        return 2;
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        fprintf(stderr, "cuda_persist: no CUDA device: skipped\n");
        return 77;
    }
    int coop = 0;
    CK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, 0));
    if (!coop) {
        fprintf(stderr, "cuda_persist: the device has no cooperative launch: skipped\n");
        return 77;
    }
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    const int grid = grid_blocks(per_sm);
    std::vector<int> y0(2048);
    for (auto &v : y0) v = (int)(rnd() % 60001) - 30000;
    int bad = 0;

    // 1. exactness: a 2-layer full chain, every mode against the host reference, bit for bit
    {
        std::vector<std::vector<uint8_t>> w;
        auto hp = make_chain(2, true);
        Dev d = dev_make(hp, y0.data(), &w, pmax);
        d.c.nap = nap;
        std::vector<std::vector<int>> y(hp.size());
        for (size_t i = 0; i < hp.size(); i++) {
            y[i].resize(hp[i].n_out);
            ref_phase(hp[i], w[i].data(), hp[i].src < 0 ? y0.data() : y[hp[i].src].data(), y[i].data());
        }
        double med[3];
        std::vector<int> out[3];
        time_modes(d, grid, 2, 1, s, med, out);
        for (int m = 0; m < 3; m++) {
            const bool ok = out[m] == y.back();
            bad += !ok;
            fprintf(stderr, "check: 2-layer chain (%zu phases), %-10s vs host reference: %s\n", hp.size(), mode_name[m],
                    ok ? "same bits" : "MISMATCH");
        }
        dev_free(d);
    }
    // 2. the floors: a step that does nothing, 432 in a row (the full chain's count)
    {
        unsigned *bar;
        CK(cudaMalloc(&bar, 2 * sizeof(unsigned)));
        CK(cudaMemset(bar, 0, 2 * sizeof(unsigned)));
        for (int m = 0; m < 3; m++) {
            const double us = empty_floor(m, grid, 432, nap, bar, s);
            if (json) printf("{\"chain\":\"empty\",\"phases\":432,\"mode\":\"%s\",\"us_phase\":%.3f,\"grid\":%d,\"nap\":%d}\n",
                             mode_name[m], us, grid, nap);
            else printf("empty step (432 in a row), %-10s: %.2f us a step\n", mode_name[m], us);
        }
        if (!json) printf("\n");
        CK(cudaFree(bar));
    }
    // 3. timing: 48 layers, the gemv and the full chain
    const char *chains[2] = {"gemv", "full"};
    if (!json)
        printf("grid %d blocks x %d warps (cooperative, every SM filled), barrier nap %d ns, producer max %s; medians of 5 rounds x 20 tokens\n\n"
               "| chain | phases | GB a token | mode | ms a token | us a phase | GB/s | vs graph |\n"
               "|---|---:|---:|---|---:|---:|---:|---:|\n",
               grid, WARPS, nap, pmax ? "on" : "off");
    for (int f = 0; f < 2; f++) {
        auto hp = make_chain(48, f == 1);
        Dev d = dev_make(hp, y0.data(), nullptr, pmax);
        d.c.nap = nap;
        double med[3];
        std::vector<int> out[3];
        time_modes(d, grid, 20, 5, s, med, out);
        for (int m = 1; m < 3; m++)
            if (out[m] != out[0]) {
                bad++;
                fprintf(stderr, "check: 48-layer %s chain, %s differs from graph\n", chains[f], mode_name[m]);
            }
        for (int m = 0; m < 3; m++) {
            const double gb = d.bytes / 1e9;
            if (json)
                printf("{\"chain\":\"%s\",\"phases\":%d,\"bytes\":%zu,\"mode\":\"%s\",\"ms_token\":%.4f,\"us_phase\":%.3f,"
                       "\"gbps\":%.1f,\"grid\":%d,\"nap\":%d,\"producer_max\":%d}\n",
                       chains[f], d.c.n, d.bytes, mode_name[m], med[m], 1e3 * med[m] / d.c.n, gb / (med[m] / 1e3), grid, nap,
                       pmax);
            else
                printf("| %s | %d | %.3f | %s | %.3f | %.2f | %.0f | %.2fx |\n", chains[f], d.c.n, gb, mode_name[m], med[m],
                       1e3 * med[m] / d.c.n, gb / (med[m] / 1e3), med[0] / med[m]);
        }
        fflush(stdout);
        dev_free(d);
    }
    if (bad) fprintf(stderr, "cuda_persist: %d mismatches\n", bad);
    return bad ? 1 : 0;
}
