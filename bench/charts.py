#!/usr/bin/env python3
"""bench/charts.py: the comparison charts (PNG) from benchmark records (bench/records.py).

    bench/charts.py [--out-dir DIR] [--depth FILE...] [--vram FILE...] [--cache FILE...]

  depth  decode tok/s vs context depth and prompt tok/s vs prompt length, Red Lite vs llama.cpp
         -> DIR/chart-depth.png
  vram   decode and prompt tok/s vs the VRAM the run had (Red Lite: --vram-mib, its whole budget;
         llama.cpp: the VRAM it used, measured) -> DIR/chart-vram.png
  cache  RAM expert cache: hit rate and decode tok/s vs --cache-mib -> DIR/chart-cache.png

A FILE is JSONL of records or one `redlite bench --json` document. With no FILE options the
charts are drawn from the records in bench/results/ named in DEFAULTS below, into bench/results/.
A series the records do not have is named on its chart ("no ... records"), never drawn from
anything else. Several records of one point (rounds) are drawn as their median.

Exit status: 0 the charts written, 2 a file that is missing, unreadable, or holds a record that
lacks a field (one line on stderr).
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import records  # noqa: E402  (bench/records.py, beside this file)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results")
DEFAULTS = {
    "depth": ["2026-12-04-records-depth-h200.jsonl"],
    "vram": ["2026-12-01-records-vram-h200.jsonl"],
    "cache": ["2026-11-30-records-cache.jsonl"],
}
ENGINES = ("redlite", "llama.cpp")
ENGINE_NAME = {"redlite": "Red Lite", "llama.cpp": "llama.cpp"}
MARKERS = "osD^vP*X"
NOTE = "firebrick"  # the colour of the notes that name a series the records lack


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def series_key(r):
    return (r["engine"], r["file"], r.get("config") or "")


def series_label(key):
    engine, f, config = key
    return f"{ENGINE_NAME.get(engine, engine)}: {os.path.basename(f)}" + (f" ({config})" if config else "")


def grouped(recs, xf):
    """{series key: [(x, median tok/s, [records])]} sorted by x; xf(record) -> x or None (skip)."""
    pts = {}
    for r in recs:
        x = xf(r)
        if x is not None:
            pts.setdefault(series_key(r), {}).setdefault(x, []).append(r)
    return {k: sorted((x, statistics.median(r["tok_s"] for r in rs), rs) for x, rs in v.items())
            for k, v in sorted(pts.items())}


def styles(keys):
    """A colour per (file, config): one engine against the other on a file share it; a line style per
    engine; a marker per series."""
    cols = sorted({(k[1], k[2]) for k in keys})
    cmap = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:gray"]
    out = {}
    for i, k in enumerate(sorted(keys)):
        out[k] = dict(color=cmap[cols.index((k[1], k[2])) % len(cmap)],
                      linestyle="-" if k[0] == "redlite" else "--", marker=MARKERS[i % len(MARKERS)])
    return out


def note_missing(ax, recs, kind, what):
    """A line in the panel for each engine with no records of this panel."""
    have = {r["engine"] for r in recs}
    missing = [ENGINE_NAME[e] for e in ENGINES if e not in have]
    lines = [f"no {e} {kind} records in {what}" for e in missing]
    if lines:
        ax.text(0.02, 0.02, "\n".join(lines), transform=ax.transAxes, fontsize=8, color=NOTE,
                va="bottom", ha="left")
    return lines


def provenance(recs):
    machines = sorted({r["machine"] for r in recs})
    dates = sorted({r["date"][:10] for r in recs})
    commits = sorted({r["commit"] for r in recs if r["engine"] == "redlite"})
    span = dates[0] if len(dates) == 1 else f"{dates[0]} .. {dates[-1]}"
    backends = sorted({r["backend"] for r in recs})
    return f"{'; '.join(machines)} | backend {', '.join(backends)} | {span} | Red Lite {', '.join(commits) or '-'}"


def draw_lines(ax, groups, st):
    for k, pts in groups.items():
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=series_label(k), **st[k])


def tokens_label(n):
    return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else str(n)


def token_ticks(ax, groups):
    """Ticks at the measured lengths (0, 2K, 8K, 32K ...) on a log-like axis."""
    xs = sorted({p[0] for pts in groups.values() for p in pts})
    if xs:
        ax.set_xticks(xs)
        ax.set_xticklabels([tokens_label(x) for x in xs])
        ax.minorticks_off()


def finish(fig, recs, title, out, sources, subtitle=""):
    """One legend for the figure (below the panels), the title, and the records' provenance."""
    seen = {}
    for ax in fig.axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    ncol = 3 if len(seen) > 4 else max(1, len(seen))
    rows = (len(seen) + ncol - 1) // ncol
    bottom = 0.07 + 0.045 * rows
    if seen:
        fig.legend(list(seen.values()), list(seen.keys()), loc="lower center", ncol=ncol, fontsize=8,
                   bbox_to_anchor=(0.5, 0.065), frameon=False)
    fig.suptitle(title + (f"\n{subtitle}" if subtitle else ""), fontsize=11)
    fig.text(0.5, 0.005, provenance(recs) + "\nrecords: " + ", ".join(os.path.basename(s) for s in sources),
             ha="center", va="bottom", fontsize=7, color="dimgray")
    fig.tight_layout(rect=(0, bottom, 1, 0.93 if subtitle else 0.95))
    fig.savefig(out, dpi=110)
    notes = [line for ax in fig.axes for t in ax.texts if t.get_color() == NOTE for line in t.get_text().splitlines()]
    _plt().close(fig)
    return out, notes


def chart_depth(recs, out, sources):
    """Decode tok/s vs depth; prompt tok/s vs prompt length; both engines."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(12, 6))
    dec = [r for r in recs if r["kind"] == "decode"]
    pro = [r for r in recs if r["kind"] == "prompt"]
    gd = grouped(dec, lambda r: r["depth"])
    gp = grouped(pro, lambda r: r["n_tokens"])
    st = styles(set(gd) | set(gp))
    what = ", ".join(os.path.basename(s) for s in sources)
    for ax, g, sub, kind, xl in ((axes[0], gd, dec, "decode", "context depth (tokens before the decoded ones)"),
                                 (axes[1], gp, pro, "prompt", "prompt length (tokens)")):
        draw_lines(ax, g, st)
        note_missing(ax, sub, kind, what)
        ax.set_xscale("symlog", linthresh=1024, linscale=0.5)
        token_ticks(ax, g)
        ax.set_xlabel(xl)
        ax.set_ylabel(f"{kind} tok/s")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.set_title(f"{kind} speed vs context length", fontsize=10)
    return finish(fig, recs, "Red Lite vs llama.cpp: speed vs context length", out, sources)


def vram_gib(r):
    """The VRAM a record had: its budget (Red Lite) or what it used (llama.cpp, measured)."""
    if r.get("vram_used_mib") is not None and r["engine"] != "redlite":
        return r["vram_used_mib"] / 1024
    v = r["budget"]["vram_mib"]
    return v / 1024 if records._num(v) else None


def chart_vram(recs, out, sources):
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(12, 6))
    what = ", ".join(os.path.basename(s) for s in sources)
    gs = {}
    for kind in ("decode", "prompt"):
        gs[kind] = grouped([r for r in recs if r["kind"] == kind], vram_gib)
    st = styles(set(gs["decode"]) | set(gs["prompt"]))
    for ax, kind in zip(axes, ("decode", "prompt")):
        sub = [r for r in recs if r["kind"] == kind and vram_gib(r) is not None]
        draw_lines(ax, gs[kind], st)
        note_missing(ax, sub, kind, what)
        ax.set_xlabel("VRAM GiB")
        ax.set_ylabel(f"{kind} tok/s")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        n = sorted({r["n_tokens"] for r in sub})
        ax.set_title(f"{kind} ({'prompt of' if kind == 'prompt' else 'runs of'} {', '.join(map(str, n))} tokens)"
                     if n else kind, fontsize=10)
    return finish(fig, recs, "VRAM budget sweep: routed experts in a VRAM cache, the rest in RAM", out, sources,
                  "Red Lite at its --vram-mib budget (weights, context and slots); llama.cpp at the VRAM it used "
                  "(measured) with -ncmoe N")


def chart_cache(recs, out, sources):
    """Hit rate and decode tok/s vs the RAM expert cache's budget (numeric budgets); 'full' as a note."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(12, 6))
    what = ", ".join(os.path.basename(s) for s in sources)
    dec = [r for r in recs if r["kind"] == "decode"]
    bounded = [r for r in dec if records._num(r["budget"]["cache_mib"])]
    full = [r for r in dec if r["budget"]["cache_mib"] == "full"]
    gib = lambda r: r["budget"]["cache_mib"] / 1024 if records._num(r["budget"]["cache_mib"]) else None  # noqa: E731
    gt = grouped(bounded, gib)
    hits = {}
    for r in bounded:
        if r.get("hit_rate") is not None:
            hits.setdefault(series_key(r), {}).setdefault(gib(r), []).append(r["hit_rate"] * 100)
    st = styles(set(gt) | set(hits))
    ax = axes[0]
    for k, pts in sorted(hits.items()):
        xs = sorted(pts)
        ax.plot(xs, [statistics.median(pts[x]) for x in xs], label=series_label(k), **st[k])
    lines = []
    if not hits:
        lines.append(f"no hit-rate records in {what}")
    if not any(r["engine"] == "llama.cpp" for r in dec):
        lines.append("llama.cpp: no expert cache (its experts are mmap'd or resident), no series")
    if lines:
        ax.text(0.02, 0.02, "\n".join(lines), transform=ax.transAxes, fontsize=8, color=NOTE)
    ax.set_ylim(0, 100)
    ax.set_ylabel("expert-cache hit rate % (decode)")
    ax.set_title("hit rate vs RAM cache budget", fontsize=10)
    ax = axes[1]
    draw_lines(ax, gt, st)
    for i, (k, rs) in enumerate(sorted(grouped(full, lambda r: 0).items())):
        v = rs[0][1]
        ax.axhline(v, color=st.get(k, {}).get("color", "gray"), linestyle=":", linewidth=1)
        ax.text(0.98, v, f"all experts resident (--cache-mib full): {v:.2f} tok/s", ha="right", va="bottom",
                fontsize=7, transform=ax.get_yaxis_transform())
    if not gt:
        ax.text(0.02, 0.02, f"no bounded-cache decode records in {what}", transform=ax.transAxes, fontsize=8,
                color=NOTE)
    ax.set_ylabel("decode tok/s")
    ax.set_ylim(bottom=0)
    ax.set_title("decode speed vs RAM cache budget", fontsize=10)
    for ax in axes:
        ax.set_xlabel("RAM expert cache budget GiB (--cache-mib)")
        ax.grid(alpha=0.3)
    return finish(fig, recs, "RAM expert cache: hit rate and speed vs budget", out, sources)


CHARTS = {"depth": chart_depth, "vram": chart_vram, "cache": chart_cache}


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", default=None, help="where the PNGs go (default bench/results)")
    for name in CHARTS:
        ap.add_argument(f"--{name}", nargs="+", metavar="FILE", help=f"records of the {name} chart")
    a = ap.parse_args(argv)
    given = {n: getattr(a, n) for n in CHARTS if getattr(a, n)}
    todo = given or {n: [os.path.join(RESULTS, f) for f in fs] for n, fs in DEFAULTS.items()}
    out_dir = a.out_dir or RESULTS
    try:
        loaded = {n: [r for p in fs for r in records.load(p)] for n, fs in todo.items()}
    except records.RecordError as e:
        print(f"charts: {e}", file=sys.stderr)
        return 2
    os.makedirs(out_dir, exist_ok=True)
    for n, recs in loaded.items():
        out, notes = CHARTS[n](recs, os.path.join(out_dir, f"chart-{n}.png"), todo[n])
        print(f"wrote {out} ({len(recs)} records)" + "".join(f"\n  note: {x}" for x in notes))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
