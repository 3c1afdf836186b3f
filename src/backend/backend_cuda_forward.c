/* backend_cuda_forward.c — the CUDA backend's forward pass: the launches of a forward of T rows
 * (mixers, MoE with the shared expert on a side stream, the VRAM tier's expert batches, the lm
 * head), the decode step captured as one CUDA graph, the forward with its state rollback under a
 * VRAM tier, and speculative decoding (verify snapshots, verify graphs, the MTP head); the rows of
 * several sequences (forward_rows) are in backend_cuda_rows.c, on enqueue and head. The shape
 * of a forward and the environment switches are described in backend_cuda.c; the context in
 * backend_cuda_int.h.
 */
#ifdef RL_CUDA
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_cuda_int.h"

/* ---- forward ----------------------------------------------------------------------------- */

/* Debug dump of k device buffers of T rows (row-major, widths n[i]) in the CPU's order: row by
 * row, the k names within a row. Synchronous; only when a dump hook is set. */
static int dump_rows(backend_ctx *c, const backend_hooks *hk, int il, int row0, int T, int k,
                     const q3n_act *acts, float *const *ptrs, const int *n) {
    if (!hk || !hk->dump) return 0;
    size_t off[4], tot = 0;
    for (int i = 0; i < k; i++) {
        off[i] = tot;
        tot += (size_t)T * n[i];
    }
    RL_ASSERT(k <= 4 && tot <= c->h_tmp_floats);
    for (int i = 0; i < k; i++)
        TRY(CU_CHECK(cudaMemcpyAsync(c->h_tmp + off[i], ptrs[i], sizeof(float) * (size_t)T * n[i],
                                     cudaMemcpyDeviceToHost, c->st)));
    TRY(CU_CHECK(cudaStreamSynchronize(c->st)));
    for (int t = 0; t < T; t++)
        for (int i = 0; i < k; i++)
            hk->dump(hk->ud, q3n_act_name(acts[i]), il, row0 + t, c->h_tmp + off[i] + (size_t)t * n[i], n[i]);
    return 0;
}

static int dump1(backend_ctx *c, const backend_hooks *hk, q3n_act act, int il, int row0, int T, float *p,
                 int n) {
    return dump_rows(c, hk, il, row0, T, 1, &act, &p, &n);
}

/* y_i = W_i x for up to 3 matrices of one input; runs of equal type share a launch. */
static int mm_run(backend_ctx *c, const dmat *const *W, float *const *Y, const int *ldy, const int *epi,
                  int n, const float *x, int ldx, int T, const cu_conv *conv, cudaStream_t s) {
    for (int i = 0; i < n;) {
        cu_seg seg[3];
        int k = 0;
        do {
            seg[k] = (cu_seg){.w = W[i]->d,
                              .row_bytes = W[i]->row_bytes,
                              .n_out = (int)W[i]->n_out,
                              .y = Y[i],
                              .ldy = ldy[i],
                              .epi = epi ? epi[i] : CU_EPI_STORE};
            k++;
            i++;
        } while (i < n && k < 3 && W[i]->type == W[i - 1]->type && W[i]->n_in == W[i - 1]->n_in);
        TRY(cu_matmul(W[i - 1]->type, W[i - 1]->n_in, seg, k, x, ldx, T, NULL, false, conv,
                      s == c->st2 ? c->ws2 : c->ws, s == c->st2 ? c->ks2 : c->ks));
    }
    return 0;
}

/* Work for the second stream from here on: st2 waits for everything enqueued on st so far (its
 * results are joined back with ev_join: recorded on st2 after the work, waited for by st). */
static int side_fork(backend_ctx *c) {
    return CU_CHECK(cudaEventRecord(c->ev_fork, c->st)) ||
                   CU_CHECK(cudaStreamWaitEvent(c->st2, c->ev_fork, 0))
               ? -1
               : 0;
}

/* The mixer's output projection y = W in; with norm_w (decode, c->fuse) its last block also does
 * x += y, xn = rmsnorm(x) * norm_w (cu_tail: the bits of the separate cu_add_rmsnorm). */
static int out_proj(backend_ctx *c, const dmat *W, const float *in, int T, const float *norm_w) {
    const int D = c->hp->n_embd;
    if (norm_w) {
        cu_seg s = {.w = W->d, .row_bytes = W->row_bytes, .n_out = (int)W->n_out, .y = c->y, .ldy = D};
        cu_tail t = {.kind = CU_TAIL_ADD_NORM,
                     .counter = c->ctr,
                     .x = c->x,
                     .out = c->xn,
                     .w = norm_w,
                     .eps = c->hp->rms_eps};
        return cu_matmul_tail(W->type, W->n_in, &s, 1, in, &t, c->ks);
    }
    const dmat *Wo[1] = {W};
    float *Yo[1] = {c->y};
    return mm_run(c, Wo, Yo, &D, NULL, 1, in, W->n_in, T, NULL, c->st);
}

/* The mixers: rc (forward_rows) names each row's context, whose state, KV cache and position the row
 * uses (its conv + step and its attention run on their own, with that context's single-step launches);
 * NULL: every row is c's sequence, rows consecutive from *c->pos0. */
static int mixer_deltanet(backend_ctx *c, int il, int T, const backend_hooks *hk, const float *norm_w,
                          backend_ctx *const *rc) {
    const q3n_hparams *hp = c->hp;
    const dlayer *L = &c->dm->L[il];
    const int C = hp->ssm_conv_dim, inner = hp->ssm_hv * hp->ssm_dv, D = hp->n_embd, hv2 = 2 * hp->ssm_hv;
    const cu_dn_dims d = {.C = C,
                          .kw = hp->ssm_kw,
                          .dk = hp->ssm_dk,
                          .dv = hp->ssm_dv,
                          .hk = hp->ssm_hk,
                          .hv = hp->ssm_hv,
                          .eps = hp->rms_eps,
                          .conv_w = L->conv_w,
                          .ssm_a = L->ssm_a,
                          .dt_bias = L->dt_bias,
                          .ssm_norm = L->ssm_norm,
                          .v_tiled = hp->v_tiled,
                          .ba_split = hp->ba_split};
    const bool per_row = hk && hk->row_state, snap = c->snap_rows && !per_row,
               fused = T == 1 && !per_row && !snap && !rc;
    const cu_conv cv = {L->conv_w, c->conv[il], hp->ssm_kw, C};
    /* beta/alpha: the fused ssm_ba, or (ba_split) ssm_beta and ssm_alpha writing the two halves
     * of each row of c->ba ([beta x hv | alpha x hv], d.ba_split) */
    const bool split = hp->ba_split;
    const dmat *W[4] = {&L->wqkv, &L->wgate, split ? &L->wbeta : &L->wba, &L->walpha};
    float *Y[4] = {fused ? c->u : c->big, c->kvb, c->ba, c->ba + hp->ssm_hv};
    const int ldy[4] = {C, inner, hv2, hv2};
    const int epi[4] = {fused ? CU_EPI_CONV : CU_EPI_STORE, CU_EPI_STORE, CU_EPI_STORE, CU_EPI_STORE};
    const int n_w = split ? 4 : 3;
    TRY(mm_run(c, W, Y, ldy, epi, n_w, c->xn, D, T, &cv, c->st));
    if (fused) { /* conv done in the qkv epilogue */
        TRY(dump1(c, hk, Q3N_ACT_DN_CONV, il, 0, 1, c->u, C));
        TRY(cu_dn_step(&d, c->u, c->ba, c->kvb, c->ssm[il], c->o, c->dn_split ? c->ctr + CU_CTR_DN : NULL,
                       c->ks));
    } else if (rc) { /* rows of several sequences: each row's conv and step on its own context's state */
        TRY(cuda_rows_deltanet(c, &d, il, T, rc));
    } else if (per_row) { /* row by row, the state copied out after each (per-row snapshots) */
        size_t nc = q3n_conv_floats(hp), ns = q3n_ssm_floats(hp);
        for (int t = 0; t < T; t++) {
            float *u = c->u + (size_t)t * C, *ab = c->ab + (size_t)t * hv2;
            TRY(cu_dn_conv(&d, c->big + (size_t)t * C, C, u, c->conv[il], 1, c->ks));
            TRY(dump1(c, hk, Q3N_ACT_DN_CONV, il, t, 1, u, C));
            TRY(cu_dn_prep(&d, u, c->ba + (size_t)t * hv2, ab, 1, c->ks));
            TRY(cu_dn_scan(&d, u, ab, c->ssm[il], c->o + (size_t)t * inner, 1, c->ks));
            TRY(CU_CHECK(
                cudaMemcpyAsync(c->h_tmp, c->conv[il], sizeof(float) * nc, cudaMemcpyDeviceToHost, c->st)));
            TRY(CU_CHECK(cudaMemcpyAsync(c->h_tmp + nc, c->ssm[il], sizeof(float) * ns,
                                         cudaMemcpyDeviceToHost, c->st)));
            TRY(CU_CHECK(cudaStreamSynchronize(c->st)));
            hk->row_state(hk->ud, il, t, c->h_tmp, c->h_tmp + nc);
        }
        TRY(cu_dn_gnorm(&d, c->o, c->kvb, inner, T, c->ks));
    } else { /* snap: each row's state also into its verify snapshot slot (c->row_slot) */
        float *sconv = snap ? c->slots + (c->conv[il] - c->state) : NULL,
              *sssm = snap ? c->slots + (c->ssm[il] - c->state) : NULL;
        const int32_t *rs = snap ? c->row_slot : NULL;
        TRY(cu_dn_conv_snap(&d, c->big, C, c->u, c->conv[il], T, sconv, c->state_floats, rs, c->ks));
        TRY(dump1(c, hk, Q3N_ACT_DN_CONV, il, 0, T, c->u, C));
        TRY(cu_dn_prep(&d, c->u, c->ba, c->ab, T, c->ks));
        TRY(cu_dn_scan_snap(&d, c->u, c->ab, c->ssm[il], c->o, T, sssm, c->state_floats, rs, c->ks));
        TRY(cu_dn_gnorm(&d, c->o, c->kvb, inner, T, c->ks));
    }
    TRY(dump1(c, hk, Q3N_ACT_DN_GATED, il, 0, T, c->o, inner));
    return out_proj(c, &L->wout, c->o, T, norm_w);
}

/* The attention arithmetic of context c (its cache size and format, its kernel choices). */
static cu_attn_dims attn_dims(const backend_ctx *c, int il) {
    const q3n_hparams *hp = c->hp;
    return (cu_attn_dims){.H = hp->n_head,
                          .Hkv = hp->n_head_kv,
                          .hd = hp->head_dim,
                          .n_rot = hp->n_rot,
                          .n_ctx = c->n_ctx,
                          .eps = hp->rms_eps,
                          .scale = 1.0f / sqrtf((float)hp->head_dim),
                          .inv_freq = c->dm->inv_freq,
                          .kv_f16 = c->kv_f16,
                          .split_per_warp = c->attn_per_warp,
                          .prefill_staged = c->attn_pf_staged,
                          .prefill_tiled = c->attn_pf_tiled,
                          .rope_delta = il >= hp->n_layer,
                          .tc = c->attn_tc,
                          .split_db = c->attn_db};
}

static int mixer_attention(backend_ctx *c, int il, int T, const backend_hooks *hk, const float *norm_w,
                           backend_ctx *const *rc) {
    const q3n_hparams *hp = c->hp;
    const dlayer *L = &c->dm->L[il];
    const int H = hp->n_head, hd = hp->head_dim, kvw = hp->n_head_kv * hd, D = hp->n_embd;
    float *k = c->kvb, *v = c->kvb + (size_t)T * kvw;
    const dmat *W[3] = {&L->wq, &L->wk, &L->wv};
    float *Y[3] = {c->big, k, v};
    const int ldy[3] = {2 * H * hd, kvw, kvw};
    TRY(mm_run(c, W, Y, ldy, NULL, 3, c->xn, D, T, NULL, c->st));
    if (rc) { /* rows of several sequences: each row a decode step on its context's cache and position */
        for (int t = 0; t < T; t++) {
            backend_ctx *r = rc[t];
            const cu_attn_dims a = attn_dims(r, il);
            float *q = c->big + (size_t)t * 2 * H * hd;
            TRY(cu_qk_norm_rope_store(&a, q, k + (size_t)t * kvw, v + (size_t)t * kvw, L->q_norm, L->k_norm,
                                      r->pos0, 1, r->kc[il], r->vc[il], c->ks));
            TRY(cu_attention(&a, q, r->kc[il], r->vc[il], r->pos0, 1, true, r->part,
                             c->o + (size_t)t * H * hd, c->ks));
        }
        return out_proj(c, &L->wo, c->o, T, norm_w);
    }
    const cu_attn_dims a = attn_dims(c, il);
    TRY(cu_qk_norm_rope_store(&a, c->big, k, v, L->q_norm, L->k_norm, c->pos0, T, c->kc[il], c->vc[il],
                              c->ks));
    TRY(cu_attention(&a, c->big, c->kc[il], c->vc[il], c->pos0, T, T <= CU_ATTN_SPLIT_MAX_T, c->part, c->o,
                     c->ks));
    TRY(dump1(c, hk, Q3N_ACT_ATTN_GATED, il, 0, T, c->o, H * hd));
    return out_proj(c, &L->wo, c->o, T, norm_w);
}

/* The routed experts of layer il from the VRAM slots (router ids in c->ids): the same grouped
 * launches as full residency, per batch of resident experts, with slot s as "expert" s. First
 * the pre-gated prediction: layer il+1's router on this layer's input (its copies overlap). */
static int experts_vram(backend_ctx *c, int il, int T, bool direct) {
    const q3n_hparams *hp = c->hp;
    const dlayer *L = &c->dm->L[il];
    const int D = hp->n_embd, E = hp->n_expert, K = hp->n_expert_used, ff = hp->n_ff_exp;
    int32_t *pred = il + 1 < hp->n_layer ? vram_tier_pred_ids(c->vt) : NULL;
    if (pred) {
        const dmat *Wr[1] = {&c->dm->L[il + 1].router};
        float *Yr[1] = {c->rl};
        TRY(mm_run(c, Wr, Yr, &E, NULL, 1, c->xn, D, T, NULL, c->st));
        TRY(cu_router(c->rl, E, K, T, pred, vram_tier_pred_w(c->vt), NULL, NULL, NULL, NULL, NULL, c->ks));
    }
    int nb = vram_tier_layer(c->vt, il, c->ids, pred, c->xn, T, direct ? 1 : CU_TT,
                             c->st); /* tiles as full residency's */
    if (nb < 0) return -1;
    for (int b = 0; b < nb; b++) {
        vram_batch vb;
        TRY(vram_tier_batch(c->vt, b, c->st, &vb));
        cu_group gg = vb.g, gd = vb.g;
        gg.pair_out =
            NULL; /* gate/up: input row pair_in[p] -> h row p; down: h row p -> eo row pair_out[p] */
        gd.pair_in = NULL;
        gg.x_rows = T;
        gd.x_rows = T * K;
        cu_seg gu = {.w = vb.gate,
                     .w2 = vb.up,
                     .row_bytes = L->gate_exps.row_bytes,
                     .expert_stride = vb.stride,
                     .n_out = ff,
                     .y = c->h,
                     .ldy = ff};
        cu_seg dn = {.w = vb.down,
                     .row_bytes = L->down_exps.row_bytes,
                     .expert_stride = vb.stride,
                     .n_out = D,
                     .y = c->eo,
                     .ldy = D};
        if (cu_matmul(L->gate_exps.type, D, &gu, 1, c->xn, D, T, &gg, true, NULL, c->ws, c->ks) ||
            cu_matmul(L->down_exps.type, ff, &dn, 1, c->h, ff, T, &gd, false, NULL, c->ws, c->ks)) {
            vram_tier_abort(c->vt);
            return -1;
        }
        TRY(vram_tier_batch_end(c->vt, c->st));
    }
    return vram_tier_cpu(c->vt, c->eo, c->st); /* misses left to the CPU (--vram-miss cpu|auto), if any */
}

/* The norm weight after layer il's FFN: the next layer's attn_norm, the output norm, or the MTP
 * head's shared_head_norm. */
static const float *next_norm(const backend_ctx *c, int il) {
    const q3n_hparams *hp = c->hp;
    return il + 1 < hp->n_layer ? c->dm->L[il + 1].attn_norm
           : il >= hp->n_layer  ? c->dm->L[il].shared_head_norm /* the MTP head's output norm */
                                : c->dm->output_norm;
}

/* The dense SwiGLU FFN of a qwen35 layer (its matrices in the shared expert's places):
 * down(silu(gate x) * up x), then the combine with no routed experts and no gate, which stores
 * y = 0 + 1 * ffn (exactly the FFN's output), x += y and the next norm. */
static int ffn_dense(backend_ctx *c, int il, int T) {
    const q3n_hparams *hp = c->hp;
    const dlayer *L = &c->dm->L[il];
    const int D = hp->n_embd, ff = hp->n_ff;
    if (L->gate_sh.type != L->up_sh.type)
        return rl_seterr("CUDA backend: FFN gate/up types differ (layer %d)", il);
    cu_seg gu = {.w = L->gate_sh.d,
                 .w2 = L->up_sh.d,
                 .row_bytes = L->gate_sh.row_bytes,
                 .n_out = ff,
                 .y = c->hs,
                 .ldy = ff};
    TRY(cu_matmul(L->gate_sh.type, D, &gu, 1, c->xn, D, T, NULL, true, NULL, c->ws, c->ks));
    cu_seg dn = {.w = L->down_sh.d, .row_bytes = L->down_sh.row_bytes, .n_out = D, .y = c->sh, .ldy = D};
    TRY(cu_matmul(L->down_sh.type, ff, &dn, 1, c->hs, ff, T, NULL, false, NULL, c->ws, c->ks));
    if (T == 1 && (c->fuse & FUSE_COMBINE))
        return cu_moe_combine_norm1(NULL, NULL, 0, c->sh, NULL, NULL, c->xn, c->y, c->x, next_norm(c, il),
                                    c->xn, D, hp->rms_eps, c->ctr + 2, c->ks);
    return cu_moe_combine(NULL, NULL, 0, c->sh, NULL, NULL, c->xn, c->y, c->x, next_norm(c, il), c->xn, D, T,
                          hp->rms_eps, c->ks);
}

static int moe(backend_ctx *c, int il, int T, const backend_hooks *hk) {
    const q3n_hparams *hp = c->hp;
    if (!hp->moe) return ffn_dense(c, il, T);
    const dlayer *L = &c->dm->L[il];
    const int D = hp->n_embd, E = hp->n_expert, K = hp->n_expert_used, ff = hp->n_ff_exp,
              ffs = hp->n_ff_shexp;
    /* direct: one tile per (row, expert) pair, planned by the router (decode and small batches) */
    const bool has_sh = L->gate_sh.d != NULL, direct = T == 1 || T <= c->small_moe;
    const bool tiered = c->vt && il < hp->n_layer; /* VRAM slots (the MTP layer's experts stay resident) */
    /* the tier inside the graph (a decode step, vram_gtab.h): full residency's launches reading each
     * expert where the layer's tables say; else the tier's own path (host synchronisation) */
    vram_gtab *gt = tiered ? c->gstep : NULL;
    const bool tier = tiered && !gt;
    const bool shg = has_sh && L->sh_gate;
    if (has_sh) { /* the shared expert runs beside the router and the routed experts */
        if (L->gate_sh.type != L->up_sh.type)
            return rl_seterr("CUDA backend: shared gate/up types differ (layer %d)", il);
        TRY(side_fork(c));
        cu_seg gu = {.w = L->gate_sh.d,
                     .w2 = L->up_sh.d,
                     .row_bytes = L->gate_sh.row_bytes,
                     .n_out = ffs,
                     .y = c->hs,
                     .ldy = ffs};
        TRY(cu_matmul(L->gate_sh.type, D, &gu, 1, c->xn, D, T, NULL, true, NULL, c->ws2, c->ks2));
        cu_seg dn = {.w = L->down_sh.d, .row_bytes = L->down_sh.row_bytes, .n_out = D, .y = c->sh, .ldy = D};
        TRY(cu_matmul(L->down_sh.type, ffs, &dn, 1, c->hs, ffs, T, NULL, false, NULL, c->ws2, c->ks2));
        if (shg)
            TRY(cu_moe_sh_gate(L->sh_gate, c->xn, c->shg, D, T,
                               c->ks2)); /* the combine's gate, off its path */
        TRY(CU_CHECK(cudaEventRecord(c->ev_join, c->st2)));
    }
    if (T == 1 &&
        (c->fuse & FUSE_ROUTER)) { /* the router GEMV's last block does the top-k (cu_tail, same bits) */
        cu_seg s = {.w = L->router.d, .row_bytes = L->router.row_bytes, .n_out = E, .y = c->rl, .ldy = E};
        cu_tail t = {.kind = CU_TAIL_ROUTER,
                     .counter = c->ctr + 1,
                     .K = K,
                     .ids = c->ids,
                     .wts = c->wts,
                     .probs = c->probs,
                     .tiles = direct && !tier ? c->tiles : NULL,
                     .n_tiles = c->n_tiles,
                     .pair_in = c->pair_in,
                     .pair_out = c->pair_out};
        TRY(cu_matmul_tail(L->router.type, D, &s, 1, c->xn, &t, c->ks));
    } else {
        const dmat *Wr[1] = {&L->router};
        float *Yr[1] = {c->rl};
        TRY(mm_run(c, Wr, Yr, &E, NULL, 1, c->xn, D, T, NULL, c->st));
        TRY(cu_router(c->rl, E, K, T, c->ids, c->wts, c->probs, direct && !tier ? c->tiles : NULL, c->n_tiles,
                      c->pair_in, c->pair_out, c->ks));
    }
    /* the plan's tile: CU_TT pairs, or 2 * CU_TT where both expert launches run the staged integer tiles */
    const int ptt = cu_matmul_group_tt(&c->cd, L->gate_exps.type) == 2 * CU_TT &&
                            cu_matmul_group_tt(&c->cd, L->down_exps.type) == 2 * CU_TT
                        ? 2 * CU_TT
                        : CU_TT;
    if (!direct && !tier)
        TRY(cu_moe_plan(c->ids, T, K, E, ptt, c->tiles, c->n_tiles, c->pair_in, c->pair_out, c->counts,
                        c->ks));
    if (hk && hk->route) {
        int32_t *hid = (int32_t *)c->h_tmp;
        float *hw = c->h_tmp + (size_t)T * K, *hpr = hw + (size_t)T * K;
        TRY(CU_CHECK(
            cudaMemcpyAsync(hid, c->ids, sizeof(int32_t) * (size_t)T * K, cudaMemcpyDeviceToHost, c->st)));
        TRY(CU_CHECK(
            cudaMemcpyAsync(hw, c->wts, sizeof(float) * (size_t)T * K, cudaMemcpyDeviceToHost, c->st)));
        TRY(CU_CHECK(
            cudaMemcpyAsync(hpr, c->probs, sizeof(float) * (size_t)T * K, cudaMemcpyDeviceToHost, c->st)));
        TRY(CU_CHECK(cudaStreamSynchronize(c->st)));
        for (int t = 0; t < T; t++)
            hk->route(hk->ud, il, t, hid + (size_t)t * K, hw + (size_t)t * K, hpr + (size_t)t * K, K);
    }
    /* routed experts, grouped by expert: gate/up (silu(g) * u) then down */
    if (!L->fused_gate_up && L->gate_exps.type != L->up_exps.type)
        return rl_seterr("CUDA backend: expert gate/up types differ (layer %d)", il);
    if (tier) {
        TRY(experts_vram(c, il, T, direct));
        goto combine;
    }
    if (gt) /* the forward's ids, for the slot policy between forwards */
        TRY(CU_CHECK(cudaMemcpyAsync(vram_gtab_ids(gt, il, T), c->ids, sizeof(int32_t) * (size_t)T * K,
                                     cudaMemcpyDeviceToDevice, c->st)));
    const size_t rb = L->gate_exps.row_bytes;
    cu_group g = {.tiles = c->tiles,
                  .n_tiles = c->n_tiles,
                  .max_tiles = direct ? T * K : c->max_tiles,
                  .tt = direct ? 1 : ptt,
                  .pair_in = c->pair_in,
                  .pair_out = NULL,
                  .x_rows = T};
    cu_seg gu = {.w = L->gate_exps.d,
                 .w2 = gt                 ? NULL
                       : L->fused_gate_up ? L->gate_exps.d + (size_t)ff * rb
                                          : L->up_exps.d,
                 .row_bytes = rb,
                 .wt = gt ? vram_gtab_table(gt, il, 0) : NULL,
                 .wt2 = gt ? vram_gtab_table(gt, il, 1) : NULL,
                 .expert_stride = (size_t)ff * rb * (L->fused_gate_up ? 2 : 1),
                 .n_out = ff,
                 .y = c->h,
                 .ldy = ff};
    TRY(cu_matmul(L->gate_exps.type, D, &gu, 1, c->xn, D, T, &g, true, NULL, c->ws, c->ks));
    g.pair_in = NULL;
    g.pair_out = c->pair_out;
    g.x_rows = T * K;
    cu_seg dn = {.w = L->down_exps.d,
                 .wt = gt ? vram_gtab_table(gt, il, 2) : NULL,
                 .row_bytes = L->down_exps.row_bytes,
                 .expert_stride = (size_t)D * L->down_exps.row_bytes,
                 .n_out = D,
                 .y = c->eo,
                 .ldy = D};
    TRY(cu_matmul(L->down_exps.type, ff, &dn, 1, c->h, ff, T, &g, false, NULL, c->ws, c->ks));
    if (gt)
        TRY(vram_gtab_hold(gt, il, c->ids, T, c->ks)); /* an emulated link's reads (nothing without one) */
combine:
    if (has_sh) TRY(CU_CHECK(cudaStreamWaitEvent(c->st, c->ev_join, 0)));
    const float *w_next = next_norm(c, il);
    if (T == 1 && (c->fuse & FUSE_COMBINE)) /* the next norm in the combine's last block (same bits) */
        return cu_moe_combine_norm1(c->eo, c->wts, K, has_sh ? c->sh : NULL, L->sh_gate, shg ? c->shg : NULL,
                                    c->xn, c->y, c->x, w_next, c->xn, D, hp->rms_eps, c->ctr + 2, c->ks);
    return cu_moe_combine(c->eo, c->wts, K, has_sh ? c->sh : NULL, L->sh_gate, shg ? c->shg : NULL, c->xn,
                          c->y, c->x, w_next, c->xn, D, T, hp->rms_eps, c->ks);
}

/* Logits of rows [t0, t0+n) (n <= logit_rows) into c->logits. */
static int head(backend_ctx *c, int t0, int n) {
    const dmat *o = &c->dm->output;
    cu_seg s = {
        .w = o->d, .row_bytes = o->row_bytes, .n_out = (int)o->n_out, .y = c->logits, .ldy = (int)o->n_out};
    return cu_matmul(o->type, c->hp->n_embd, &s, 1, c->xn + (size_t)t0 * c->hp->n_embd, c->hp->n_embd, n,
                     NULL, false, NULL, c->ws, c->ks);
}

/* Every launch of a forward of T rows (tokens and position already in c->tok / c->pos0).
 * last_logits: also the head of the last row. rc: forward_rows' contexts of the rows (mixers). */
static int enqueue(backend_ctx *c, int T, const backend_hooks *hk, bool last_logits, backend_ctx *const *rc) {
    const q3n_hparams *hp = c->hp;
    const dmodel *dm = c->dm;
    const int D = hp->n_embd;
    TRY(cu_get_rows(dm->tok_embd.type, dm->tok_embd.d, dm->tok_embd.row_bytes, D, c->tok, T, c->x, D, c->ks));
    TRY(dump1(c, hk, Q3N_ACT_INP_EMBD, -1, 0, T, c->x, D));
    TRY(cu_add_rmsnorm(c->x, NULL, dm->L[0].attn_norm, c->xn, D, T, hp->rms_eps, c->ks));
    for (int il = 0; il < hp->n_layer; il++) {
        TRY(dump1(c, hk, Q3N_ACT_ATTN_NORM, il, 0, T, c->xn, D));
        /* decode: the residual add + norm in the output projection's tail (same bits) */
        const float *fz = (c->fuse & FUSE_NORM) && T == 1 ? dm->L[il].post_norm : NULL;
        TRY(hp->is_attn[il] ? mixer_attention(c, il, T, hk, fz, rc) : mixer_deltanet(c, il, T, hk, fz, rc));
        if (!fz) TRY(cu_add_rmsnorm(c->x, c->y, dm->L[il].post_norm, c->xn, D, T, hp->rms_eps, c->ks));
        static const q3n_act n1[3] = {Q3N_ACT_ATTN_OUT, Q3N_ACT_FFN_INP, Q3N_ACT_FFN_NORM};
        float *const p1[3] = {c->y, c->x, c->xn};
        const int w1[3] = {D, D, D};
        TRY(dump_rows(c, hk, il, 0, T, 3, n1, p1, w1));
        TRY(moe(c, il, T, hk));
        static const q3n_act n2[2] = {Q3N_ACT_FFN_OUT, Q3N_ACT_L_OUT};
        float *const p2[2] = {c->y, c->x};
        TRY(dump_rows(c, hk, il, 0, T, 2, n2, p2, w1));
    }
    TRY(dump1(c, hk, Q3N_ACT_RESULT_NORM, -1, 0, T, c->xn, D));
    return last_logits ? head(c, T - 1, 1) : 0;
}

/* Nodes of a captured graph, and how many of them are kernels (bench --json: decode_graph). */
static void graph_count(cudaGraph_t g, int *nodes, int *kernels) {
    size_t n = 0;
    *nodes = *kernels = 0;
    if (cudaGraphGetNodes(g, NULL, &n) != cudaSuccess || !n) {
        (void)cudaGetLastError();
        return;
    }
    cudaGraphNode_t *v = malloc(sizeof *v * n);
    if (v && cudaGraphGetNodes(g, v, &n) == cudaSuccess) {
        *nodes = (int)n;
        for (size_t i = 0; i < n; i++) {
            enum cudaGraphNodeType t;
            if (cudaGraphNodeGetType(v[i], &t) == cudaSuccess && t == cudaGraphNodeTypeKernel) ++*kernels;
        }
    }
    (void)cudaGetLastError();
    free(v);
}

static int capture(backend_ctx *c) {
    cudaGraph_t g = NULL;
    c->gtried = true;
    TRY(CU_CHECK(cudaStreamBeginCapture(c->st, cudaStreamCaptureModeThreadLocal)));
    int rc = enqueue(c, 1, NULL, true, NULL);
    cudaError_t e = cudaStreamEndCapture(c->st, &g);
    if (rc || e != cudaSuccess) {
        if (g) cudaGraphDestroy(g);
        return rc ? -1 : cu_fail(e, "cudaStreamEndCapture", __FILE__, __LINE__);
    }
    graph_count(g, &c->graph_nodes, &c->graph_kernels);
    e = cudaGraphInstantiate(&c->gexec, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) {
        c->gexec = NULL;
        return cu_fail(e, "cudaGraphInstantiate", __FILE__, __LINE__);
    }
    return 0;
}

/* The lm head over rows 0..T-1 of xn in chunks of logit_rows, each chunk's logits copied to the
 * host rows of logits (T x n_vocab), or (logits NULL) row t's to dst[t] (n_vocab; NULL: not wanted). */
static int head_rows_to_host(backend_ctx *c, int T, float *logits, float *const *dst) {
    const size_t V = (size_t)c->hp->n_vocab;
    for (int t0 = 0; t0 < T; t0 += c->logit_rows) {
        const int n = T - t0 < c->logit_rows ? T - t0 : c->logit_rows;
        TRY(head(c, t0, n));
        TRY(CU_CHECK(cudaMemcpyAsync(c->h_logits, c->logits, sizeof(float) * (size_t)n * V,
                                     cudaMemcpyDeviceToHost, c->st)));
        TRY(CU_CHECK(cudaStreamSynchronize(c->st)));
        if (logits) memcpy(logits + (size_t)t0 * V, c->h_logits, sizeof(float) * (size_t)n * V);
        else
            for (int t = 0; t < n; t++)
                if (dst[t0 + t]) memcpy(dst[t0 + t], c->h_logits + (size_t)t * V, sizeof(float) * V);
    }
    return 0;
}

static int snap_rows_upload(backend_ctx *c, const int *rows_to_slots, int T);
static int capture_verify(backend_ctx *c, int T);

static int forward_run(backend_ctx *c, const int32_t *tokens, int T, int pos, float *logits, bool all_logits,
                       float *hidden, const backend_hooks *hooks) {
    const q3n_hparams *hp = c->hp;
    const int V = hp->n_vocab, D = hp->n_embd;
    if (T < 1 || T > c->n_batch)
        return rl_seterr("forward of %d rows: must be 1..%d (n_batch)", T, c->n_batch);
    if (pos < 0 || pos + T > c->n_ctx)
        return rl_seterr("context is full: %d + %d tokens exceed the context size %d (raise --ctx)", pos, T,
                         c->n_ctx);
    if (q3n_check_tokens(tokens, T, V)) return -1;
    const bool hooked = hooks && (hooks->dump || hooks->route || hooks->row_state);
    const int *rows_to_slots = hooks && !hooks->row_state ? hooks->row_slots : NULL;
    /* with the tier: a plain decode step runs inside the graph where the host tier allows it
     * (vram_gtab.h: full residency's launches through per-expert tables, no host synchronisation),
     * and so does a verify with RL_VRAM_GRAPH_VERIFY=1; any other forward takes the tier's own path
     * (which first lets the previous forwards' fills finish) */
    const bool vrows = !hooked && T > 1 && T <= CU_SMALL_T && logits && all_logits; /* a verify */
    if (c->vt) vram_tier_warm(c->vt); /* once: the free slots filled from the pinned mapping */
    vram_gtab *gt = c->vt ? vram_tier_graph(c->vt) : NULL;
    const bool step = T == 1 && !hooked && !rows_to_slots; /* a decode step: graph or own path */
    c->gstep =
        gt && (step || (vrows && c->tune.vram_graph_verify)) && vram_tier_graph_next(c->vt, T) ? gt : NULL;
    /* small all-logits batches (verifies) replay a graph per row count, the snapshot slots of
     * its rows read from device memory (-1: none) */
    const bool vgraph = vrows && c->graphs && (!c->vt || c->gstep);
    memcpy(c->h_tok, tokens, sizeof(int32_t) * (size_t)T);
    c->h_tok[c->n_batch] = pos;
    TRY(CU_CHECK(
        cudaMemcpyAsync(c->tok, c->h_tok, sizeof(int32_t) * (size_t)T, cudaMemcpyHostToDevice, c->st)));
    TRY(CU_CHECK(
        cudaMemcpyAsync(c->pos0, c->h_tok + c->n_batch, sizeof(int), cudaMemcpyHostToDevice, c->st)));
    c->snap_rows = false;
    if (rows_to_slots || vgraph) TRY(snap_rows_upload(c, rows_to_slots, T));
    const bool one_row_logits = logits && (!all_logits || T == 1);
    bool all_done = false; /* every row's logits already in c->logits */
    if (c->gstep) TRY(vram_gtab_prepare(gt, c->st));
    if (T == 1 && !hooked && !c->snap_rows && c->graphs && (!c->vt || c->gstep)) {
        if (!c->gexec && !c->gtried) TRY(capture(c));
        if (c->gexec) TRY(CU_CHECK(cudaGraphLaunch(c->gexec, c->st)));
        else TRY(enqueue(c, 1, NULL, true, NULL));
    } else if (vgraph) {
        if (!c->vexec[T] && !c->vtried[T]) TRY(capture_verify(c, T));
        if (c->vexec[T]) TRY(CU_CHECK(cudaGraphLaunch(c->vexec[T], c->st)));
        else TRY(enqueue(c, T, NULL, false, NULL) || head(c, 0, T));
        all_done = true;
    } else {
        TRY(enqueue(c, T, hooks, one_row_logits, NULL));
    }
    c->snap_rows = false;
    if (one_row_logits)
        TRY(CU_CHECK(
            cudaMemcpyAsync(c->h_logits, c->logits, sizeof(float) * V, cudaMemcpyDeviceToHost, c->st)));
    if (hidden)
        TRY(CU_CHECK(cudaMemcpyAsync(c->h_hidden, c->xn, sizeof(float) * (size_t)T * D,
                                     cudaMemcpyDeviceToHost, c->st)));
    TRY(CU_CHECK(cudaStreamSynchronize(c->st)));
    const bool in_graph = c->gstep != NULL;
    if (c->gstep) { /* between forwards: the slot policy, the fills, the tables */
        c->gstep = NULL;
        TRY(vram_gtab_step(gt, c->st, T));
    }
    if (c->vt) vram_tier_forward_done(c->vt, gt && step, in_graph);
    if (one_row_logits) memcpy(logits, c->h_logits, sizeof(float) * V);
    if (hidden) memcpy(hidden, c->h_hidden, sizeof(float) * (size_t)T * D);
    if (all_done) {
        TRY(CU_CHECK(cudaMemcpyAsync(c->h_logits, c->logits, sizeof(float) * (size_t)T * V,
                                     cudaMemcpyDeviceToHost, c->st)));
        TRY(CU_CHECK(cudaStreamSynchronize(c->st)));
        memcpy(logits, c->h_logits, sizeof(float) * (size_t)T * V);
    } else if (logits && !one_row_logits) { /* every row's logits, in chunks of logit_rows */
        TRY(head_rows_to_host(c, T, logits, NULL));
    }
    return 0;
}

/* Copy the recurrent-state block (every DeltaNet layer's conv + ssm, carve's first block) to
 * (save) or from (restore) the rollback buffer, on the stream. */
static int state_backup(backend_ctx *c, bool save) {
    const size_t n = sizeof(float) * c->state_floats;
    if (!n) return 0;
    return CU_CHECK(cudaMemcpyAsync(save ? (void *)c->bk : (void *)c->state,
                                    save ? (const void *)c->state : (const void *)c->bk, n,
                                    cudaMemcpyDeviceToDevice, c->st));
}

/* With a VRAM tier a forward can fail half-way (a slot fill): the DeltaNet states saved before
 * it are put back, so the context is as it was (KV rows past its position are ignored). */
int cuda_forward(backend_ctx *c, const int32_t *tokens, int T, int pos, float *logits, bool all_logits,
                 float *hidden, const backend_hooks *hooks) {
    if (!c->vt) return forward_run(c, tokens, T, pos, logits, all_logits, hidden, hooks);
    TRY(state_backup(c, true));
    if (forward_run(c, tokens, T, pos, logits, all_logits, hidden, hooks) == 0) return 0;
    char err[512];
    snprintf(err, sizeof err, "%s", rl_lasterr());
    cudaStreamSynchronize(c->st); /* let what was queued finish before the states go back */
    (void)cudaGetLastError();
    if (state_backup(c, false) || CU_CHECK(cudaStreamSynchronize(c->st)))
        return rl_seterr("%s; restoring the recurrent state failed too: %s (reset the context)", err,
                         rl_lasterr());
    return rl_seterr("%s", err);
}

/* ---- for forward_rows (backend_cuda_rows.c) ------------------------------------------------ */

int cuda_enqueue_rows(backend_ctx *c, int n, backend_ctx *const *rc) {
    c->gstep = NULL; /* rows of several contexts: the tier's own path */
    const int r = enqueue(c, n, NULL, false, rc);
    if (c->vt) vram_tier_forward_done(c->vt, false, false); /* its bytes are no decode step's */
    return r;
}

int cuda_head(backend_ctx *c, int t0, int n) { return head(c, t0, n); }

int cuda_head_to_host(backend_ctx *c, int T, float *const *dst) { return head_rows_to_host(c, T, NULL, dst); }

/* ---- speculative decoding: verify snapshots on the device, verify graphs, the MTP head ---- */

/* Drop the verify graphs (they hold the slots' address, and under the tier its tables'). */
void cuda_verify_graphs_drop(backend_ctx *c) {
    for (int t = 0; t <= CU_SMALL_T; t++) {
        if (c->vexec[t]) cudaGraphExecDestroy(c->vexec[t]);
        c->vexec[t] = NULL;
        c->vtried[t] = false;
    }
}

/* At least n snapshot slots (each one copy of the state block), keeping the slots' contents. */
static int slots_reserve(backend_ctx *c, int n) {
    if (n <= c->n_slots) return 0;
    const size_t per = sizeof(float) * c->state_floats;
    float *p = NULL;
    if (CU_CHECK(cudaMalloc((void **)&p, per * (size_t)n)))
        return rl_seterr("cannot allocate %d verify snapshot slots of %.1f MiB on the GPU: %s", n,
                         per / 1048576.0, rl_lasterr());
    if (c->n_slots &&
        (CU_CHECK(cudaMemcpyAsync(p, c->slots, per * (size_t)c->n_slots, cudaMemcpyDeviceToDevice, c->st)) ||
         CU_CHECK(cudaStreamSynchronize(c->st)))) {
        cudaFree(p);
        return -1;
    }
    if (c->slots) cudaFree(c->slots);
    c->slots = p;
    c->n_slots = n;
    cuda_verify_graphs_drop(c);
    return 0;
}

/* This forward writes row t's state into slot rows_to_slots[t] (NULL: no row does). */
static int snap_rows_upload(backend_ctx *c, const int *rows_to_slots, int T) {
    int32_t *h = c->h_tok + c->n_batch + 1;
    int need = 1; /* one slot even when no row needs one: the graphs take the slots' address */
    for (int t = 0; t < T; t++) {
        h[t] = rows_to_slots ? rows_to_slots[t] : -1;
        if (h[t] >= c->n_batch)
            return rl_seterr("verify snapshot slot %d: at most %d (n_batch)", h[t], c->n_batch);
        if (h[t] + 1 > need) need = h[t] + 1;
    }
    TRY(slots_reserve(c, need));
    TRY(CU_CHECK(
        cudaMemcpyAsync(c->row_slot, h, sizeof(int32_t) * (size_t)T, cudaMemcpyHostToDevice, c->st)));
    c->snap_rows = true;
    return 0;
}

/* Capture what f(c, T, arg) enqueues into *out (inputs are read from device memory). */
static int graph_capture(backend_ctx *c, cudaGraphExec_t *out, int (*f)(backend_ctx *, int, int), int T,
                         int arg) {
    cudaGraph_t g = NULL;
    TRY(CU_CHECK(cudaStreamBeginCapture(c->st, cudaStreamCaptureModeThreadLocal)));
    int rc = f(c, T, arg);
    cudaError_t e = cudaStreamEndCapture(c->st, &g);
    if (rc || e != cudaSuccess) {
        if (g) cudaGraphDestroy(g);
        return rc ? -1 : cu_fail(e, "cudaStreamEndCapture", __FILE__, __LINE__);
    }
    e = cudaGraphInstantiate(out, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) {
        *out = NULL;
        return cu_fail(e, "cudaGraphInstantiate", __FILE__, __LINE__);
    }
    return 0;
}

/* The forward of T rows with every row's logits (snapshot slots on). */
static int verify_enqueue(backend_ctx *c, int T, int unused) {
    (void)unused;
    return enqueue(c, T, NULL, false, NULL) || head(c, 0, T);
}

static int capture_verify(backend_ctx *c, int T) {
    c->vtried[T] = true;
    return graph_capture(c, &c->vexec[T], verify_enqueue, T, 0);
}

int cuda_slot_restore(backend_ctx *c, int slot) {
    if (slot < 0 || slot >= c->n_slots)
        return rl_seterr("verify snapshot slot %d does not exist (%d)", slot, c->n_slots);
    const size_t per = c->state_floats;
    return CU_CHECK(cudaMemcpyAsync(c->state, c->slots + (size_t)slot * per, sizeof(float) * per,
                                    cudaMemcpyDeviceToDevice, c->st));
}

int cuda_slot_get(backend_ctx *c, int slot, int il, float *conv, float *ssm) {
    if (slot < 0 || slot >= c->n_slots)
        return rl_seterr("verify snapshot slot %d does not exist (%d)", slot, c->n_slots);
    if (il < 0 || il >= c->hp->n_layer || !c->conv[il])
        return rl_seterr("layer %d has no recurrent state", il);
    const float *b = c->slots + (size_t)slot * c->state_floats;
    TRY(CU_CHECK(cudaMemcpyAsync(conv, b + (c->conv[il] - c->state), sizeof(float) * q3n_conv_floats(c->hp),
                                 cudaMemcpyDeviceToHost, c->st)));
    TRY(CU_CHECK(cudaMemcpyAsync(ssm, b + (c->ssm[il] - c->state), sizeof(float) * q3n_ssm_floats(c->hp),
                                 cudaMemcpyDeviceToHost, c->st)));
    return CU_CHECK(cudaStreamSynchronize(c->st));
}

static int mtp_enqueue(backend_ctx *c, int T, int with_head);

/* The MTP head (q3n_mtp_forward's arithmetic, every kernel batch-invariant): pairs (hidden p,
 * token p+1) -> [enorm(embed) ; hnorm(hidden)] -> eh_proj -> the MTP decoder layer (its own KV
 * slots slot.., RoPE at slot+1..) -> shared_head_norm (moe's combine) -> hidden_out, lm head. */
int cuda_mtp_forward(backend_ctx *c, const float *hidden, const int32_t *next_tokens, int T, int slot,
                     float *logits, float *hidden_out) {
    const q3n_hparams *hp = c->hp;
    const int V = hp->n_vocab, D = hp->n_embd, il = hp->n_layer;
    const dmodel *dm = c->dm;
    const dlayer *L = &dm->L[il];
    if (hp->n_nextn < 1 || !L->eh_proj.d)
        return rl_seterr("this model has no MTP block (nextn_predict_layers is 0)");
    if (T < 1 || T > c->n_batch)
        return rl_seterr("MTP forward of %d pairs: must be 1..%d (n_batch)", T, c->n_batch);
    if (slot < 0 || slot + T > c->n_ctx)
        return rl_seterr("MTP context is full: %d + %d pairs exceed %d", slot, T, c->n_ctx);
    if (q3n_check_tokens(next_tokens, T, V)) return -1;
    c->snap_rows = false;
    memcpy(c->h_tok, next_tokens, sizeof(int32_t) * (size_t)T);
    c->h_tok[c->n_batch] = slot;
    memcpy(c->h_hidden, hidden, sizeof(float) * (size_t)T * D);
    TRY(CU_CHECK(
        cudaMemcpyAsync(c->tok, c->h_tok, sizeof(int32_t) * (size_t)T, cudaMemcpyHostToDevice, c->st)));
    TRY(CU_CHECK(
        cudaMemcpyAsync(c->pos0, c->h_tok + c->n_batch, sizeof(int), cudaMemcpyHostToDevice, c->st)));
    TRY(CU_CHECK(
        cudaMemcpyAsync(c->y, c->h_hidden, sizeof(float) * (size_t)T * D, cudaMemcpyHostToDevice, c->st)));
    const bool with_head = logits != NULL;
    if (T == 1 && c->graphs) { /* one pair (a chained draft): a captured graph */
        if (!c->mexec[with_head] && !c->mtried[with_head]) {
            c->mtried[with_head] = true;
            TRY(graph_capture(c, &c->mexec[with_head], mtp_enqueue, 1, with_head));
        }
    }
    if (T == 1 && c->mexec[with_head]) TRY(CU_CHECK(cudaGraphLaunch(c->mexec[with_head], c->st)));
    else TRY(mtp_enqueue(c, T, 0));
    if (hidden_out)
        TRY(CU_CHECK(cudaMemcpyAsync(c->h_hidden, c->xn, sizeof(float) * (size_t)T * D,
                                     cudaMemcpyDeviceToHost, c->st)));
    if (T == 1 && c->mexec[with_head]) { /* the head (if asked for) ran in the graph */
        if (with_head)
            TRY(CU_CHECK(
                cudaMemcpyAsync(c->h_logits, c->logits, sizeof(float) * V, cudaMemcpyDeviceToHost, c->st)));
        TRY(CU_CHECK(cudaStreamSynchronize(c->st)));
        if (hidden_out) memcpy(hidden_out, c->h_hidden, sizeof(float) * D);
        if (logits) memcpy(logits, c->h_logits, sizeof(float) * V);
        return 0;
    }
    TRY(CU_CHECK(cudaStreamSynchronize(c->st)));
    if (hidden_out) memcpy(hidden_out, c->h_hidden, sizeof(float) * (size_t)T * D);
    return logits ? head_rows_to_host(c, T, logits, NULL) : 0;
}

/* The MTP head's launches on T pairs (tokens in c->tok, slot in c->pos0, hidden in c->y);
 * with_head: also the logits of row 0 (the one-pair graph). */
static int mtp_enqueue(backend_ctx *c, int T, int with_head) {
    const q3n_hparams *hp = c->hp;
    const int D = hp->n_embd, il = hp->n_layer;
    const dmodel *dm = c->dm;
    const dlayer *L = &dm->L[il];
    const size_t row = sizeof(float) * (size_t)D;
    TRY(cu_get_rows(dm->tok_embd.type, dm->tok_embd.d, dm->tok_embd.row_bytes, D, c->tok, T, c->x, D, c->ks));
    TRY(cu_add_rmsnorm(c->x, NULL, L->enorm, c->xn, D, T, hp->rms_eps, c->ks));
    TRY(cu_add_rmsnorm(c->y, NULL, L->hnorm, c->sh, D, T, hp->rms_eps, c->ks));
    TRY(CU_CHECK(cudaMemcpy2DAsync(c->mcat, 2 * row, c->xn, row, row, T, cudaMemcpyDeviceToDevice, c->st)));
    TRY(CU_CHECK(
        cudaMemcpy2DAsync(c->mcat + D, 2 * row, c->sh, row, row, T, cudaMemcpyDeviceToDevice, c->st)));
    const dmat *We[1] = {&L->eh_proj};
    float *Ye[1] = {c->x};
    TRY(mm_run(c, We, Ye, &D, NULL, 1, c->mcat, 2 * D, T, NULL, c->st));
    TRY(cu_add_rmsnorm(c->x, NULL, L->attn_norm, c->xn, D, T, hp->rms_eps, c->ks));
    TRY(mixer_attention(c, il, T, NULL, NULL, NULL));
    TRY(cu_add_rmsnorm(c->x, c->y, L->post_norm, c->xn, D, T, hp->rms_eps, c->ks));
    TRY(moe(c, il, T, NULL)); /* ends with xn = shared_head_norm(x) */
    return with_head ? head(c, 0, 1) : 0;
}
#else
typedef int backend_cuda_forward_unused; /* ISO C wants a declaration in every translation unit */
#endif
