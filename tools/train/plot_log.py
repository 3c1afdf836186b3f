#!/usr/bin/env python3
"""Plot a training log (train_log.jsonl from train.py): training loss (trunk and MTP, smoothed) and
held-out validation loss against tokens seen. Usage: plot_log.py LOG.jsonl OUT.png"""
import json
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 3:
        print("usage: plot_log.py LOG.jsonl OUT.png", file=sys.stderr)
        sys.exit(2)
    recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
    tr = [r for r in recs if r.get("event") == "train"]
    ev = [r for r in recs if r.get("event") == "eval"]
    fin = [r for r in recs if r.get("event") == "final_eval"]

    def smooth(v, k=10):
        out, acc = [], []
        for x in v:
            acc.append(x); acc = acc[-k:]
            out.append(sum(acc) / len(acc))
        return out
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    t = [r["tokens"] / 1e6 for r in tr]
    ax[0].plot(t, smooth([r["loss"] for r in tr]), label="train loss (trunk)", lw=1)
    ax[0].plot(t, smooth([r["mtp_loss"] for r in tr]), label="train loss (MTP, t+2)", lw=1)
    ax[0].plot([r["tokens"] / 1e6 for r in ev], [r["val_loss"] for r in ev], "o-", ms=3,
               label="held-out loss (trunk, 64 windows)")
    ax[0].plot([r["tokens"] / 1e6 for r in ev], [r["val_mtp_loss"] for r in ev], "s-", ms=3,
               label="held-out loss (MTP, 64 windows)")
    for f in fin:
        ax[0].plot([f["tokens"] / 1e6], [f["val_loss"]], "k*", ms=9, label="final held-out (512 windows)")
    ax[0].set_ylim(1, 5); ax[0].set_xlabel("training tokens (M)"); ax[0].set_ylabel("cross-entropy (nats)")
    ax[0].legend(fontsize=8); ax[0].grid(alpha=.3)
    ax[1].plot([r["tokens"] / 1e6 for r in ev], [r["mtp_acceptance"] for r in ev], "o-", ms=3)
    ax[1].set_xlabel("training tokens (M)"); ax[1].set_ylabel("MTP acceptance (held-out, teacher-forced)")
    ax[1].set_ylim(0.5, 0.85); ax[1].grid(alpha=.3)
    fig.suptitle("redlite-coder-tiny: 24.3M-param Qwen3-Next + MTP, one H200 run")
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=90)


if __name__ == "__main__":
    main()
