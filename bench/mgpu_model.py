#!/usr/bin/env python3
"""bench/mgpu_model.py — the arithmetic of docs/MULTI_GPU.md: expected decode (batch 1, 8 streams) and
prompt-2048 speeds of each multi-GPU split from measured single-GPU costs and link costs. No GPU needed;
every input is a named constant below with where it was measured (or 'est.' where it is a model).
Usage: python3 bench/mgpu_model.py [--alpha-us 15]   (alpha: one NCCL small-message collective)"""
import argparse

# ---- single-GPU costs (ms) --------------------------------------------------------------------------
# t1: decode token; t2/t4/t8: one forward of 2/4/8 rows (forward_rows, no graph); tp: a 2,048-token prompt.
# 80B CF2 on one H100: bench/results/2026-12-06-m3-house-h100.md (280-284 tok/s, 6,882-6,894 tok/s prompt),
# 2026-12-06-cuda-rows-h100.md (1/2/4/8 contexts: 279.9 / 314.9 / 436.5 / 524.7 tok/s).
MODELS = {
    "80B CF2": dict(L=48, D=2048, t1=1000 / 282, t2=2000 / 314.9, t4=4000 / 436.5, t8=8000 / 524.7,
                    tp=2048e3 / 6890, fE=0.24, fEp=0.35, gib=18.0, exp_mib=0.72, dense_gib=1.4),
    # Q4_K_M: H200 337 tok/s / 10,418 prompt (2026-12-04-session24-h200.md), scaled to the H100 by CF2's
    # H100/H200 ratios (282/296.6 decode, 6,890/8,387 prompt): est.
    "80B Q4_K_M": dict(L=48, D=2048, t1=1000 / (337 * 282 / 296.6), tp=2048e3 / (10418 * 6890 / 8387),
                       fE=0.24, fEp=0.35, gib=45.0, exp_mib=1.81, dense_gib=1.3),
    # 397B-A17B Q4_K_M (docs/MODELS.md: 223.56 GiB, experts 217.97, dense 5.59; 60 layers, D 4096): never run
    # on a GPU. Model: per layer 27.7 us of latency-bound work (the 80B Q4_K_M token minus its bytes at 40 %
    # of HBM, per layer) + 9.9 GB of weights per token at 40 % of 3.35 TB/s. Prompt: the 80B Q4_K_M chunk
    # with matmuls x4.6 (active parameters) and the DeltaNet scan x2.5 (layers x value heads): est.
    "397B Q4_K_M": dict(L=60, D=4096, t1=60 * 0.0277 + 9.9 / 1.34, tp=None, fE=0.40, fEp=0.45, gib=223.6,
                        exp_mib=7.44, dense_gib=5.6),
}
m = MODELS["80B Q4_K_M"]
for k, r in (("t2", 2000 / 314.9 / (1000 / 279.9)), ("t4", 4000 / 436.5 / (1000 / 279.9)),
             ("t8", 8000 / 524.7 / (1000 / 279.9))):
    m[k] = m["t1"] * r  # today's rows path: the same cost ratios as CF2 (est.)
tq = MODELS["80B Q4_K_M"]["tp"]
MODELS["397B Q4_K_M"]["tp"] = 0.6 * tq * 4.6 + 0.31 * tq * 2.5 + 0.09 * tq * 3
q = MODELS["397B Q4_K_M"]
for k, r in (("t2", 2000 / 314.9 / (1000 / 279.9)), ("t4", 4000 / 436.5 / (1000 / 279.9)),
             ("t8", 8000 / 524.7 / (1000 / 279.9))):
    q[k] = q["t1"] * r

# ---- links -----------------------------------------------------------------------------------------
# NVLink H100: NCCL all-reduce bus bandwidth 329 GB/s (2x), 355 (4x) (/work/.library/device/KINDS.md);
# alpha: one small-message collective (assumed 10-20 us, 15 default); hop: one in-graph peer copy (5 us).
# PCIe 4 consumer (no NVLink, no P2P on GeForce): ~25 GB/s, a hop through host memory (two copies) 20 us,
# a collective 30 us. Host->device fills of the VRAM tier: ~30 GB/s page-locked on the H100/H200 host
# (2026-12-01-vram-hybrid-h200.md: 30-32 GB/s), ~20 GB/s on a consumer PCIe 4 board.
LINKS = {"2x H100 NVLink": dict(N=2, bw=329e9, hop=5e-3, host=30e9, mem=78),
         "4x H100 NVLink": dict(N=4, bw=355e9, hop=5e-3, host=30e9, mem=78),
         "2x 24 GB PCIe 4": dict(N=2, bw=25e9, hop=20e-3, host=20e9, mem=24, alpha=30e-3, slow=True)}


def ms(b, bw):
    return b / bw * 1e3


def splits(mod, lk, alpha):
    L, D, N = mod["L"], mod["D"], lk["N"]
    a = lk.get("alpha", alpha)
    row = 4 * D  # one f32 hidden row
    t1, t8, tp = mod["t1"], mod["t8"], mod["tp"]
    tN = {2: mod["t4"], 4: mod["t2"]}[N]  # 8 streams in N micro-batches of 8/N rows
    out = {}
    # one GPU (reference)
    out["one GPU"] = (t1, t8, tp)
    # (a) expert parallel: the routed expert launches split N ways (latency-bound at batch 1: 30 % of the
    # ideal saving; 80 % at 8 rows; compute-bound prompt: all of it); per MoE layer an all-to-all out and back
    # (every expert's output row returned whole: the combine's fixed order keeps the bits)
    frac = 1 - 1 / N
    b1 = row * (N - 1) + 10 * frac * row
    d1 = t1 - mod["fE"] * t1 * frac * 0.3 + L * (2 * a + ms(b1, lk["bw"]))
    d8 = t8 - 0.3 * t8 * frac * 0.8 + L * (2 * a + ms(8 * b1, lk["bw"]))
    p = tp - mod["fEp"] * tp * frac + L * (2 * a + ms(2048 * b1, lk["bw"]))
    out["(a) expert parallel"] = (d1, d8, p)
    # (b) layers across devices: N-1 hops per token; 8 streams as N micro-batches in flight (every stage
    # busy: a round of 8 tokens costs one forward of 8/N rows); prompt: 4 chunks of 512 rows pipelined
    d1 = t1 + (N - 1) * (lk["hop"] + ms(row, lk["bw"]))
    d8 = tN + (N - 1) * (lk["hop"] + ms(8 / N * row, lk["bw"]))
    p = (4 + N - 1) / (4 * N) * tp + (4 + N - 1) * (lk["hop"] + ms(512 * row, lk["bw"]))
    out["(b) layers across devices"] = (d1, d8, p)
    # (d) tensor parallel of the dense parts, column-parallel only (each GPU whole output rows: exact) and
    # an all-gather after each: ~4 per layer; the dense launches split N ways (30 % of ideal at batch 1)
    d1 = t1 - 0.42 * t1 * frac * 0.3 + L * 4 * (a + ms(frac * row, lk["bw"]))
    d8 = t8 - 0.42 * t8 * frac * 0.8 + L * 4 * (a + ms(8 * frac * row, lk["bw"]))
    p = 1.1 * tp / N + L * 4 * (a + ms(2048 * frac * 2 * row, lk["bw"]))
    out["(d) tensor parallel (dense)"] = (d1, d8, p)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--alpha-us", type=float, default=15.0)
    alpha = ap.parse_args().alpha_us * 1e-3
    for mn in ("80B CF2", "80B Q4_K_M", "397B Q4_K_M"):
        mod = MODELS[mn]
        print(f"\n### {mn}: one H100 t1 {mod['t1']:.2f} ms ({1e3 / mod['t1']:.0f} tok/s), 8 rows "
              f"{mod['t8']:.1f} ms ({8e3 / mod['t8']:.0f} tok/s), prompt 2048 {mod['tp']:.0f} ms "
              f"({2048e3 / mod['tp']:,.0f} tok/s)")
        print("| link | split | decode b=1 ms (tok/s) | 8 streams ms/round (tok/s) | prompt 2048 ms (tok/s) |")
        print("|---|---|---|---|---|")
        for ln, lk in LINKS.items():
            if lk.get("slow"):
                continue  # consumer cards: in the doc as ratios (no consumer GPU has run this code)
            for sn, (d1, d8, p) in splits(mod, lk, alpha).items():
                if sn == "one GPU" and ln != "2x H100 NVLink":
                    continue
                print(f"| {ln if sn != 'one GPU' else 'one H100'} | {sn} | {d1:.2f} ({1e3 / d1:.0f}) | "
                      f"{d8:.1f} ({8e3 / d8:.0f}) | {p:.0f} ({2048e3 / p:,.0f}) |")
    print("\n### consumer: 2 cards over PCIe 4, as a ratio to one such card (same model, if it fitted)")
    print("| model | split | decode b=1 | 8 streams | prompt 2048 |")
    print("|---|---|---|---|---|")
    lk = LINKS["2x 24 GB PCIe 4"]
    for mn in ("80B CF2", "80B Q4_K_M"):
        mod = dict(MODELS[mn])
        # a consumer card: the same latency-bound part, bytes at 40 % of ~1 TB/s, prompt ~3x (est.)
        s = (mod["L"] * 0.0277 + (1.9 if "CF2" in mn else 2.39) / 0.4) / mod["t1"]
        for k in ("t1", "t2", "t4", "t8"):
            mod[k] *= s
        mod["tp"] *= 3
        res = splits(mod, lk, alpha)
        base = res["one GPU"]
        for sn, v in res.items():
            if sn == "one GPU":
                continue
            print(f"| {mn} | {sn} | {base[0] / v[0]:.2f}x | {base[1] / v[1]:.2f}x | {base[2] / v[2]:.2f}x |")
    print("\n### sensitivity of batch-1 decode to alpha (80B CF2, 2x H100)")
    for au in (5, 10, 15, 20):
        r = splits(MODELS["80B CF2"], LINKS["2x H100 NVLink"], au * 1e-3)
        print(f"alpha {au} us: EP {1e3 / r['(a) expert parallel'][0]:.0f} tok/s, TP "
              f"{1e3 / r['(d) tensor parallel (dense)'][0]:.0f} tok/s, layers "
              f"{1e3 / r['(b) layers across devices'][0]:.0f} tok/s (one GPU {1e3 / MODELS['80B CF2']['t1']:.0f})")


if __name__ == "__main__":
    main()
