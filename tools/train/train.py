#!/usr/bin/env python3
"""Train the small Qwen3-Next coder with its MTP block jointly, on the tokens made by prep_data.py.

One run, budgeted by wall clock: training stops at --budget-min minutes after --start-ts (the start
of the whole pipeline, data preparation included) minus --reserve-min for the final evaluation and
export. Loss = trunk cross-entropy + --mtp-weight x MTP cross-entropy (predicting x_{t+2}) +
--aux-weight x mean load-balance loss over the 9 routers (8 trunk layers + MTP layer).

Logs JSON lines (OUT/train_log.jsonl): training loss every --log-every steps, validation (held-out
files) trunk loss, MTP loss and MTP acceptance every --eval-every-s seconds. At the end: final
held-out evaluation on more windows, expert usage per layer, and the weights as fp16 safetensors
shards of <= --shard-mib MiB (OUT/weights-NN.safetensors; trunk tensors in transformers' layout,
mtp.* in the real checkpoint's per-expert layout), reloaded and checked. OUT/meta.json holds the
config, the arguments, the results and the versions.

MTP acceptance = fraction of positions p where argmax of the MTP head at (h_p, x_{p+1}) equals the
trunk's argmax at p+1 (both predicting x_{p+2}), teacher-forced on held-out code.
"""
import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import model as tm  # noqa: E402


def log(msg):
    print(f"[train {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Routers:
    """Forward hooks on every router: keeps (logits, top-k ids) of the last forward."""

    def __init__(self, modules):
        from transformers.models.qwen3_next import modeling_qwen3_next as M
        self.out = []
        self.routers = [m for mod in modules for m in mod.modules() if isinstance(m, M.Qwen3NextTopKRouter)]
        for r in self.routers:
            r.register_forward_hook(self._hook)

    def _hook(self, mod, inp, out):
        self.out.append((out[0], out[2]))

    def take(self):
        o, self.out = self.out, []
        return o


def forward(model, mtp, routers, x, E):
    """x [B, T+1] tokens. Returns (trunk loss, mtp loss, aux loss, trunk logits, mtp logits, routes)."""
    inp, tgt = x[:, :-1], x[:, 1:]
    routers.take()
    h = model.model(input_ids=inp).last_hidden_state            # [B, T, D] after the final norm
    logits = model.lm_head(h)
    loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tgt.reshape(-1))
    # MTP pairs (h_p, x_{p+1}), p = 0..T-2, target x_{p+2}
    hm = mtp(model.model.embed_tokens, h[:, :-1], inp[:, 1:], pos0=1)
    mlogits = model.lm_head(hm)
    mloss = F.cross_entropy(mlogits.float().reshape(-1, mlogits.shape[-1]), x[:, 2:].reshape(-1))
    routes = routers.take()
    aux = torch.stack([tm.load_balance_loss(lg, idx, E) for lg, idx in routes]).mean()
    return loss, mloss, aux, logits, mlogits, routes


@torch.no_grad()
def evaluate(model, mtp, routers, windows, E, bs, autocast):
    model.eval(); mtp.eval()
    tot = {"loss": 0.0, "mtp_loss": 0.0, "acc": 0.0, "mtp_acc": 0.0, "accept": 0.0, "n": 0, "nm": 0}
    usage = None
    for i in range(0, windows.shape[0], bs):
        x = windows[i:i + bs]
        with autocast():
            loss, mloss, aux, logits, mlogits, routes = forward(model, mtp, routers, x, E)
        n = x[:, 1:].numel(); nm = x[:, 2:].numel()
        tot["loss"] += loss.item() * n
        tot["mtp_loss"] += mloss.item() * nm
        am = logits.argmax(-1)                                  # predicts x_{t+1} at t
        mm = mlogits.argmax(-1)                                 # predicts x_{p+2} at pair p
        tot["acc"] += (am == x[:, 1:]).float().sum().item()
        tot["mtp_acc"] += (mm == x[:, 2:]).float().sum().item()
        tot["accept"] += (mm == am[:, 1:]).float().sum().item()
        tot["n"] += n; tot["nm"] += nm
        c = torch.stack([torch.bincount(idx.reshape(-1), minlength=E) for _, idx in routes]).cpu()
        usage = c if usage is None else usage + c
    model.train(); mtp.train()
    r = {"val_loss": tot["loss"] / tot["n"], "val_mtp_loss": tot["mtp_loss"] / tot["nm"],
         "val_top1": tot["acc"] / tot["n"], "val_mtp_top1": tot["mtp_acc"] / tot["nm"],
         "mtp_acceptance": tot["accept"] / tot["nm"], "val_tokens": tot["n"]}
    r["val_ppl"] = math.exp(r["val_loss"])
    return r, usage


def usage_stats(usage):
    """Per router: share of routed slots per expert, normalised entropy, min/max share."""
    out = []
    for row in usage.double():
        p = row / row.sum()
        ent = float(-(p[p > 0] * p[p > 0].log()).sum() / math.log(len(p)))
        out.append({"entropy_norm": round(ent, 4), "min_share": round(float(p.min()), 5),
                    "max_share": round(float(p.max()), 5), "unused": int((row == 0).sum()),
                    "share": [round(float(v), 5) for v in p]})
    return out


def export_shards(model, mtp, out: Path, shard_mib: float):
    from safetensors.torch import save_file
    sd = {k: v.detach().to(torch.float16).cpu().contiguous() for k, v in model.state_dict().items()}
    sd.update({k: v.detach().to(torch.float16).cpu().contiguous()
               for k, v in tm.mtp_state_for_checkpoint(mtp).items()})
    limit = int(shard_mib * 1024 * 1024) - 64 * 1024          # room for the header
    shards, cur, cb = [], {}, 0
    for k in sorted(sd):
        nb = sd[k].numel() * 2
        if cur and cb + nb > limit:
            shards.append(cur); cur, cb = {}, 0
        cur[k] = sd[k]; cb += nb
    if cur:
        shards.append(cur)
    paths = []
    for i, s in enumerate(shards):
        p = out / f"weights-{i:02d}.safetensors"
        save_file(s, str(p), metadata={"format": "pt", "shard": str(i), "of": str(len(shards))})
        paths.append(p)
    return sd, paths


def load_shards(paths):
    from safetensors.torch import load_file
    sd = {}
    for p in paths:
        sd.update(load_file(str(p)))
    return sd


def split_state(sd):
    """Shard state -> (trunk state for Qwen3NextForCausalLM, MTP module state with fused experts)."""
    trunk = {k: v for k, v in sd.items() if not k.startswith("mtp.")}
    m = {k[4:]: v for k, v in sd.items() if k.startswith("mtp.")}
    E = len([k for k in m if k.startswith("layers.0.mlp.experts.") and k.endswith("down_proj.weight")])
    m["layers.0.mlp.experts.gate_up_proj"] = torch.stack(
        [torch.cat([m.pop(f"layers.0.mlp.experts.{e}.gate_proj.weight"),
                    m.pop(f"layers.0.mlp.experts.{e}.up_proj.weight")], 0) for e in range(E)])
    m["layers.0.mlp.experts.down_proj"] = torch.stack(
        [m.pop(f"layers.0.mlp.experts.{e}.down_proj.weight") for e in range(E)])
    return trunk, m


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--start-ts", type=float, default=None, help="pipeline start (unix time)")
    ap.add_argument("--budget-min", type=float, default=17.0)
    ap.add_argument("--reserve-min", type=float, default=1.2)
    ap.add_argument("--max-steps", type=int, default=0, help="stop after N steps (smoke test)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--min-lr-ratio", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--mtp-weight", type=float, default=0.3)
    ap.add_argument("--aux-weight", type=float, default=0.01)
    ap.add_argument("--log-every", type=int, default=20)
    ap.add_argument("--eval-every-s", type=float, default=60.0)
    ap.add_argument("--eval-windows", type=int, default=64)
    ap.add_argument("--final-eval-windows", type=int, default=512)
    ap.add_argument("--shard-mib", type=float, default=15.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    # model
    for k, v in dict(hidden=256, layers=8, experts=32, topk=4, moe_ff=64, shared_ff=256, heads=4,
                     kv_heads=2, head_dim=64, lin_k_heads=4, lin_v_heads=8, lin_dim=64).items():
        ap.add_argument("--" + k.replace("_", "-"), type=int, default=v)
    ap.add_argument("--rope-theta", type=float, default=1e6)
    a = ap.parse_args()
    t_start = a.start_ts or time.time()
    stop_at = t_start + (a.budget_min - a.reserve_min) * 60
    a.out.mkdir(parents=True, exist_ok=True)
    dev = torch.device(a.device)
    torch.manual_seed(a.seed)
    np.random.seed(a.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True

    tcfg = json.loads((a.data / "tokenizer_config.json").read_text()) \
        if (a.data / "tokenizer_config.json").exists() else None
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(a.data / "tokenizer.json"))
    V = tok.get_vocab_size(with_added_tokens=True)
    eot, im_end = tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|im_end|>")
    train = torch.from_numpy(np.fromfile(a.data / "train.bin", dtype=np.uint16).astype(np.int32)).to(dev)
    val = np.fromfile(a.data / "val.bin", dtype=np.uint16).astype(np.int64)
    W = a.seq + 1
    nv = len(val) // W
    val_w = torch.from_numpy(val[: nv * W].reshape(nv, W)).to(dev)
    log(f"data: train {len(train) / 1e6:.2f} M tokens, val {len(val) / 1e6:.3f} M ({nv} windows), vocab {V}")

    from transformers import Qwen3NextForCausalLM
    cfg = tm.make_config(vocab=V, hidden=a.hidden, layers=a.layers, experts=a.experts, topk=a.topk,
                         moe_ff=a.moe_ff, shared_ff=a.shared_ff, heads=a.heads, kv_heads=a.kv_heads,
                         head_dim=a.head_dim, lin_k_heads=a.lin_k_heads, lin_v_heads=a.lin_v_heads,
                         lin_dim=a.lin_dim, rope_theta=a.rope_theta, bos=eot, eos=im_end, pad=eot)
    attn = "sdpa"
    cfg._attn_implementation = attn
    model = Qwen3NextForCausalLM(cfg).to(dev)
    mtp = tm.MTP(cfg).to(dev)
    tm.init_mtp(mtp, model)
    n_exp = tm.use_padded_experts(model) + tm.use_padded_experts(mtp)
    routers = Routers([model, mtp])
    n_par = sum(p.numel() for p in model.parameters()) + sum(p.numel() for p in mtp.parameters())
    n_mtp = sum(p.numel() for p in mtp.parameters())
    log(f"model: {n_par / 1e6:.2f} M params ({n_mtp / 1e6:.2f} M MTP), {n_exp} expert blocks, "
        f"{len(routers.routers)} routers, layer types {cfg.layer_types}")
    for n, p in list(model.named_parameters()) + list(mtp.named_parameters()):
        if not torch.isfinite(p).all() or p.abs().max() > 100:
            raise SystemExit(f"train: bad initial value in {n}")

    params = list(model.parameters()) + list(mtp.parameters())
    named = list(model.named_parameters()) + [("mtp." + n, p) for n, p in mtp.named_parameters()]
    decay = [p for n, p in named if p.dim() >= 2 and "norm" not in n]
    nodecay = [p for n, p in named if not (p.dim() >= 2 and "norm" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd},
                             {"params": nodecay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=dev.type == "cuda")
    use_amp = dev.type == "cuda"

    def autocast():
        return torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=use_amp)

    logf = open(a.out / "train_log.jsonl", "a")

    def emit(rec):
        rec["t"] = round(time.time() - t_start, 2)
        logf.write(json.dumps(rec) + "\n"); logf.flush()

    emit({"event": "start", "params": n_par, "mtp_params": n_mtp, "args": {k: str(v) for k, v in vars(a).items()}})
    ev_w = val_w[: a.eval_windows]
    t_train0 = time.time()
    t_last_eval = 0.0
    step, tokens = 0, 0
    win = time.time()
    win_tok = 0
    while True:
        now = time.time()
        if now >= stop_at or (a.max_steps and step >= a.max_steps):
            break
        if now - t_last_eval >= a.eval_every_s or step == 0:
            r, _ = evaluate(model, mtp, routers, ev_w, a.experts, a.batch, autocast)
            r.update(event="eval", step=step, tokens=tokens)
            emit(r)
            log(f"eval step {step}: val loss {r['val_loss']:.4f} (ppl {r['val_ppl']:.2f}), mtp "
                f"{r['val_mtp_loss']:.4f}, acceptance {r['mtp_acceptance']:.3f}")
            t_last_eval = time.time()
        # lr: linear warmup, then cosine by wall-clock progress to min ratio
        if step < a.warmup:
            lr = a.lr * (step + 1) / a.warmup
        else:
            if not hasattr(main, "t_decay0"):
                main.t_decay0 = time.time()
            frac = min(1.0, (time.time() - main.t_decay0) / max(1.0, stop_at - main.t_decay0))
            lr = a.lr * (a.min_lr_ratio + (1 - a.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, len(train) - W, (a.batch,), device=dev)
        x = train[starts[:, None] + torch.arange(W, device=dev)[None]].long()
        with autocast():
            loss, mloss, aux, _, _, _ = forward(model, mtp, routers, x, a.experts)
            total = loss + a.mtp_weight * mloss + a.aux_weight * aux
        opt.zero_grad(set_to_none=True)
        total.backward()
        gn = torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        tokens += a.batch * a.seq
        win_tok += a.batch * a.seq
        if step % a.log_every == 0 or step <= 3:
            lv = loss.item()
            if not math.isfinite(lv):
                emit({"event": "diverged", "step": step})
                raise SystemExit(f"train: loss is {lv} at step {step}")
            dt = time.time() - win
            rec = {"event": "train", "step": step, "tokens": tokens, "lr": lr, "loss": lv,
                   "mtp_loss": mloss.item(), "aux": aux.item(), "grad_norm": float(gn),
                   "tok_s": win_tok / max(dt, 1e-9)}
            if dev.type == "cuda":
                rec["mem_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
            emit(rec)
            if step % (a.log_every * 5) == 0 or step <= 3:
                log(f"step {step}: loss {lv:.4f} mtp {rec['mtp_loss']:.4f} aux {rec['aux']:.4f} "
                    f"lr {lr:.2e} {rec['tok_s'] / 1e3:.1f}K tok/s" + (f" mem {rec.get('mem_gib')} GiB"))
            win, win_tok = time.time(), 0
    train_s = time.time() - t_train0
    log(f"training done: {step} steps, {tokens / 1e6:.1f} M tokens in {train_s:.0f}s")

    fin, usage = evaluate(model, mtp, routers, val_w[: a.final_eval_windows], a.experts, a.batch, autocast)
    fin.update(event="final_eval", step=step, tokens=tokens)
    emit(fin)
    log(f"final: val loss {fin['val_loss']:.4f} ppl {fin['val_ppl']:.2f} top1 {fin['val_top1']:.3f}; "
        f"mtp loss {fin['val_mtp_loss']:.4f} acceptance {fin['mtp_acceptance']:.3f}")
    ust = usage_stats(usage)
    log("expert usage entropy per router: " + " ".join(f"{u['entropy_norm']:.3f}" for u in ust))

    # export fp16 shards, reload and check
    sd16, paths = export_shards(model, mtp, a.out, a.shard_mib)
    back = load_shards(paths)
    for k, v in sd16.items():
        if not torch.equal(back[k], v):
            raise SystemExit(f"train: reloaded shard tensor {k} differs")
    trunk, msd = split_state(back)
    m2 = Qwen3NextForCausalLM(cfg).to(dev)
    missing, unexpected = m2.load_state_dict({k: v.float() for k, v in trunk.items()}, strict=False)
    missing = [k for k in missing if "rotary" not in k]
    if missing or unexpected:
        raise SystemExit(f"train: reload mismatch missing={missing[:5]} unexpected={unexpected[:5]}")
    mt2 = tm.MTP(cfg).to(dev)
    mt2.load_state_dict({k: v.float() for k, v in msd.items()}, strict=False)
    tm.use_padded_experts(m2); tm.use_padded_experts(mt2)
    r2 = Routers([m2, mt2])
    fin16, _ = evaluate(m2, mt2, r2, val_w[: a.final_eval_windows], a.experts, a.batch, autocast)
    log(f"reloaded fp16 weights: val loss {fin16['val_loss']:.4f} (trained {fin['val_loss']:.4f}), "
        f"acceptance {fin16['mtp_acceptance']:.3f}")
    if abs(fin16["val_loss"] - fin["val_loss"]) > 0.02:
        raise SystemExit("train: fp16 export changes the validation loss by > 0.02")
    emit({"event": "export", "shards": [p.name for p in paths], "fp16_val_loss": fin16["val_loss"],
          "fp16_mtp_acceptance": fin16["mtp_acceptance"]})
    import transformers
    meta = {
        "config": cfg.to_dict(), "args": {k: str(v) for k, v in vars(a).items()},
        "params": n_par, "mtp_params": n_mtp, "steps": step, "tokens": tokens, "train_seconds": train_s,
        "final_eval": fin, "final_eval_fp16": fin16, "expert_usage": ust,
        "shards": [p.name for p in paths], "torch": torch.__version__,
        "transformers": transformers.__version__,
        "device": torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu",
        "wall_seconds": time.time() - t_start,
    }
    (a.out / "meta.json").write_text(json.dumps(meta, indent=1))
    emit({"event": "done"})
    log(f"done: {time.time() - t_start:.0f}s after pipeline start")


if __name__ == "__main__":
    main()
