"""The trained default model: a small Qwen3-Next (transformers' own Qwen3Next classes) plus the MTP
block, and the pieces shared by training (train.py) and export (export.py).

Architecture choices (see README.md for the size budget): hidden 256, 8 layers at the 3:1 pattern
(layers 3 and 7 full attention, the rest Gated DeltaNet), 32 routed experts top-4 (moe_ff 64) plus the
sigmoid-gated shared expert (ff 256) on every layer, zero-centred RMSNorms, partial (0.25) NeoX RoPE,
vocab 8192 (8166 Qwen BPE tokens + 26 added tokens), untied embeddings, one MTP block.

MTP (spec §F.2 and tools/make_fixtures.py `mtp_forward`): for every position p the pair
(h_p, x_{p+1}) -- h_p the trunk's hidden state after the final norm -- is mapped to
u = fc([RMSNorm_e(embed(x_{p+1})); RMSNorm_h(h_p)]), run through one full-attention MoE decoder layer
(causal over the pairs, RoPE position p+1, llama.cpp's draft-mtp pairing) and
logits = lm_head(RMSNorm_o(u)) predict x_{p+2}.
"""
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F


def make_config(vocab=8192, hidden=256, layers=8, experts=32, topk=4, moe_ff=64, shared_ff=256,
                heads=4, kv_heads=2, head_dim=64, lin_k_heads=4, lin_v_heads=8, lin_dim=64,
                rope_theta=1e6, bos=None, eos=None, pad=None, max_pos=4096):
    from transformers import Qwen3NextConfig
    return Qwen3NextConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=4 * hidden,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
        head_dim=head_dim,
        rope_parameters={"rope_type": "default", "rope_theta": float(rope_theta),
                         "partial_rotary_factor": 0.25},
        linear_conv_kernel_dim=4, linear_key_head_dim=lin_dim, linear_value_head_dim=lin_dim,
        linear_num_key_heads=lin_k_heads, linear_num_value_heads=lin_v_heads,
        moe_intermediate_size=moe_ff, shared_expert_intermediate_size=shared_ff,
        num_experts=experts, num_experts_per_tok=topk, norm_topk_prob=True, decoder_sparse_step=1,
        full_attention_interval=4, max_position_embeddings=max_pos,
        tie_word_embeddings=False, rms_norm_eps=1e-6, initializer_range=0.02,
        bos_token_id=bos, eos_token_id=eos, pad_token_id=pad,
    )


def experts_forward_padded(self, hidden_states, top_k_index, top_k_weights):
    """Same result as Qwen3NextExperts.forward (eager), computed with two batched matmuls: the
    routed (token, slot) pairs are sorted by expert into a [E, C, D] buffer (C = the largest expert
    load of this batch, zero padded), so the MoE costs 2 bmm launches instead of a loop over experts."""
    N, D = hidden_states.shape
    E = self.num_experts
    K = top_k_index.shape[1]
    flat_e = top_k_index.reshape(-1)
    flat_w = top_k_weights.reshape(-1)
    tok = torch.arange(N, device=hidden_states.device).repeat_interleave(K)
    order = torch.argsort(flat_e, stable=True)
    e_sorted = flat_e[order]
    counts = torch.bincount(flat_e, minlength=E)
    starts = torch.cumsum(counts, 0) - counts
    pos = torch.arange(N * K, device=hidden_states.device) - starts[e_sorted]
    C = int(counts.max().item())
    t_sorted = tok[order]
    x = hidden_states.new_zeros((E, C, D))
    x[e_sorted, pos] = hidden_states[t_sorted]
    gu = torch.bmm(x, self.gate_up_proj.transpose(1, 2))
    g, u = gu.chunk(2, dim=-1)
    y = torch.bmm(self.act_fn(g) * u, self.down_proj.transpose(1, 2))
    out = y[e_sorted, pos] * flat_w[order, None].to(y.dtype)
    final = torch.zeros((N, D), device=hidden_states.device, dtype=out.dtype)
    final.index_add_(0, t_sorted, out)
    return final.to(hidden_states.dtype)


def use_padded_experts(module: nn.Module) -> int:
    from transformers.models.qwen3_next import modeling_qwen3_next as M
    n = 0
    for m in module.modules():
        if isinstance(m, M.Qwen3NextExperts):
            m.forward = experts_forward_padded.__get__(m, type(m))
            n += 1
    return n


class MTP(nn.Module):
    """The MTP block with checkpoint names mtp.{fc, pre_fc_norm_embedding, pre_fc_norm_hidden, norm,
    layers.0.*} (layers.0 is a transformers Qwen3NextDecoderLayer of type full_attention)."""

    def __init__(self, cfg):
        super().__init__()
        from transformers.models.qwen3_next import modeling_qwen3_next as M
        c2 = copy.deepcopy(cfg)
        c2.num_hidden_layers = 1
        c2.layer_types = ["full_attention"]
        self.c2 = c2
        D = cfg.hidden_size
        self.fc = nn.Linear(2 * D, D, bias=False)
        self.pre_fc_norm_embedding = M.Qwen3NextRMSNorm(D, eps=cfg.rms_norm_eps)
        self.pre_fc_norm_hidden = M.Qwen3NextRMSNorm(D, eps=cfg.rms_norm_eps)
        self.norm = M.Qwen3NextRMSNorm(D, eps=cfg.rms_norm_eps)
        self.layers = nn.ModuleList([M.Qwen3NextDecoderLayer(c2, 0)])
        self.rotary = M.Qwen3NextRotaryEmbedding(c2)

    def forward(self, embed, h_post, next_ids, pos0=1):
        """h_post [B, n, D] (trunk hidden after the final norm at positions p), next_ids [B, n]
        (x_{p+1}); returns the MTP hidden state after its final norm, [B, n, D]."""
        B, n, _ = h_post.shape
        u = self.fc(torch.cat([self.pre_fc_norm_embedding(embed(next_ids)),
                               self.pre_fc_norm_hidden(h_post)], dim=-1))
        pos = torch.arange(pos0, pos0 + n, device=u.device)[None].expand(B, n)
        pe = self.rotary(u, pos)
        mask = None
        if self.c2._attn_implementation == "eager":
            mask = torch.full((n, n), torch.finfo(u.dtype).min, device=u.device).triu(1)[None, None]
        u = self.layers[0](u, position_embeddings=pe, attention_mask=mask, position_ids=pos)
        return self.norm(u)


def init_mtp(mtp: MTP, model) -> None:
    """Initialise the MTP block the way transformers initialises the trunk (normal(0, 0.02) matrices,
    zero norms = unit gain, experts/router normal)."""
    for m in mtp.modules():
        model._init_weights(m)


def mtp_state_for_checkpoint(mtp: MTP) -> dict:
    """mtp.* tensors in the real checkpoint's per-expert layout (what llama.cpp's converter reads)."""
    sd = {}
    for k, v in mtp.state_dict().items():
        if k.startswith("rotary."):
            continue
        if k == "layers.0.mlp.experts.gate_up_proj":
            I = v.shape[1] // 2
            for e in range(v.shape[0]):
                sd[f"mtp.layers.0.mlp.experts.{e}.gate_proj.weight"] = v[e, :I].contiguous()
                sd[f"mtp.layers.0.mlp.experts.{e}.up_proj.weight"] = v[e, I:].contiguous()
        elif k == "layers.0.mlp.experts.down_proj":
            for e in range(v.shape[0]):
                sd[f"mtp.layers.0.mlp.experts.{e}.down_proj.weight"] = v[e].contiguous()
        else:
            sd["mtp." + k] = v
    return sd


def load_balance_loss(router_logits: torch.Tensor, top_idx: torch.Tensor, E: int) -> torch.Tensor:
    """Switch-style auxiliary loss E * sum_e f_e * P_e (f_e: share of routed slots that went to expert
    e, P_e: mean router probability of e); 1.0 when perfectly balanced."""
    p = F.softmax(router_logits.float(), dim=-1)
    f = torch.bincount(top_idx.reshape(-1), minlength=E).float() / top_idx.numel()
    return E * (f.detach() * p.mean(0)).sum()
