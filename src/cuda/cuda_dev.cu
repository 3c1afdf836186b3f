// cuda_dev.cu — see cuda_dev.h: a device's facts, read once when a context is created, and the
// per-kernel launch state (shared memory opted in, occupancy answers) that lives in the struct.
#include <stdio.h>

#include "cuda/common.cuh"

extern "C" int cu_dev_init(cu_dev *d, int ordinal, const cu_tuning *t) {
    cudaDeviceProp p;
    if (CU_CHECK(cudaGetDeviceProperties(&p, ordinal))) return -1;
    *d = cu_dev{};
    d->ordinal = ordinal;
    d->tune = *t;
    d->cc = 10 * p.major + p.minor;
    d->n_sm = p.multiProcessorCount;
    d->smem_optin = p.sharedMemPerBlockOptin;
    d->smem_max = t->smem_limit && t->smem_limit < d->smem_optin ? t->smem_limit : d->smem_optin;
    d->l2_bytes = (size_t)p.l2CacheSize;
    d->pdl = t->pdl && d->cc >= 90;
    d->int8 = t->mmq < 0 ? 0 : t->mmq > 2 ? 2 : t->mmq;
    return 0;
}

extern "C" int cu_dev_set_int8(cu_dev *d, int mode) {
    const int old = d->int8;
    d->int8 = mode < 0 ? 0 : mode > 2 ? 2 : mode;
    return old;
}

cu_fn_slot *cu_dev_slot(cu_dev *d, const void *fn) {
    // open addressing on the function's address; NULL when the table is full (the caller then asks
    // the runtime every time: slower, the same launches)
    size_t h = ((uintptr_t)fn >> 4) * 0x9E3779B97F4A7C15ull >> 56;
    for (int i = 0; i < CU_DEV_FNS; i++) {
        cu_fn_slot *s = &d->fns[(h + (size_t)i) % CU_DEV_FNS];
        if (s->fn == fn) return s;
        if (!s->fn) {
            s->fn = fn;
            return s;
        }
    }
    return NULL;
}

extern "C" int cu_dev_smem(cu_dev *d, const void *fn, size_t smem, const char *what) {
    if (smem <= (48u << 10)) return 0; // every device gives a block 48 KiB without the attribute
    if (smem > d->smem_max)
        return rl_seterr(
            "CUDA kernel %s needs %zu bytes of shared memory per block; this GPU (sm_%d) allows %zu%s", what,
            smem, d->cc, d->smem_max, d->smem_max < d->smem_optin ? " (RL_CUDA_SMEM_LIMIT)" : "");
    cu_fn_slot *s = cu_dev_slot(d, fn);
    if (s && smem <= s->optin) return 0;
    if (CU_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem))) return -1;
    if (s) s->optin = smem;
    return 0;
}

int cu_dev_resident(cu_dev *d, const void *fn, int threads, size_t smem, unsigned *n) {
    cu_fn_slot *s = cu_dev_slot(d, fn);
    if (s && s->resident && s->occ_smem == smem) {
        *n = s->resident;
        return 0;
    }
    int per_sm = 0;
    if (CU_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, threads, smem))) return -1;
    *n = (unsigned)(d->n_sm * (per_sm > 0 ? per_sm : 1));
    if (s) {
        s->occ_smem = smem;
        s->resident = *n;
    }
    return 0;
}
