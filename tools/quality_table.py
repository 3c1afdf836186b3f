#!/usr/bin/env python3
"""Quality table of a model family: held-out perplexity per weight type by `redlite perplexity`
and by llama.cpp's `llama-perplexity`, MTP acceptance, trunk top-1, a unigram baseline, greedy
agreement with llama.cpp, sample completions — and the routing statistics of held-out code.

Inputs: the float GGUF (F32 or F16, from llama.cpp's converter), optionally the converter's Q8_0,
a held-out text file, and llama.cpp's tools (tools/build_llama_cpp.sh). Quantized variants are made
here with llama.cpp's own llama-quantize (into --work, outside the repository) and each file's
tensor types are recorded (tiny dimensions force llama-quantize's fallbacks: the table says what it
did).

Unigram baseline: token frequencies counted on the held-out file itself with add-one smoothing over
the whole vocabulary, scored on exactly the positions perplexity scores. Fitted on the test text, it
is an optimistic (lower) baseline, so "far below the unigram" is a conservative claim.

usage: tools/quality_table.py --float F16.gguf [--q8 Q8_0.gguf] --heldout FILE [--ctx 512]
         [--chunks N] [--routing-chunks N] [--llama-bin DIR] [--work DIR] [--md OUT.md] [--json OUT.json]
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import time
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REDLITE = os.path.join(ROOT, "build", "redlite")
SAMPLE_PROMPTS = ["def quicksort(arr):", "#include <stdio.h>\n\nint main(int argc, char **argv)\n{",
                  "import os\n\n\ndef read_lines(path):\n    \"\"\"Return the lines of a text file.\"\"\""]
CHAT_PROMPT = "Write a Python function that returns the factorial of n."


def log(msg):
    print(f"[quality {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run(cmd, timeout=3600, check=True):
    log(" ".join(cmd) if len(" ".join(cmd)) < 300 else " ".join(cmd)[:300] + " ...")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, errors="replace")
    if check and r.returncode != 0:
        sys.exit(f"quality_table: {cmd[0]} exited {r.returncode}:\n{r.stderr[-3000:]}")
    return r


def tensor_types(path):
    import gguf
    rd = gguf.GGUFReader(path)
    by = Counter()
    detail = {}
    for t in rd.tensors:
        ty = t.tensor_type.name
        by[ty] += 1
        # group names like blk.3.ffn_down_exps.weight -> ffn_down_exps
        key = re.sub(r"^blk\.\d+\.", "", t.name).replace(".weight", "")
        detail.setdefault(key, Counter())[ty] += 1
    return dict(by), {k: dict(v) for k, v in sorted(detail.items())}


def quantize(llama_bin, src, dst, qtype, allow_requantize=False):
    """llama-quantize src -> dst; returns its shape fallbacks summarised per tensor kind."""
    side = dst + ".fallbacks.txt"
    if os.path.exists(dst) and os.path.exists(side) and os.path.getmtime(dst) > os.path.getmtime(src):
        log(f"{dst} exists, kept")
        return open(side).read()
    cmd = [os.path.join(llama_bin, "llama-quantize")] + (["--allow-requantize"] if allow_requantize else [])
    r = run(cmd + [src, dst, qtype, "2"])
    by = Counter()
    for m in re.finditer(r"warning: (\S+)\s+- ncols\s+(\d+) not divisible by\s+(\d+) \(required for type\s+(\S+)\)"
                         r".*?falling back to\s+(\S+)", r.stdout + r.stderr):
        kind = re.sub(r"^blk\.\d+\.", "", m.group(1)).replace(".weight", "")
        by[(kind, m.group(2), m.group(4), m.group(5))] += 1
    text = "; ".join(f"{k} (ncols {n}): {a} -> {b} x{c}" for (k, n, a, b), c in sorted(by.items()))
    with open(side, "w") as f:
        f.write(text)
    return text


def redlite_ppl(model, heldout, ctx, chunks, mtp, extra=()):
    cmd = [REDLITE, "perplexity", "-m", model, "-f", heldout, "--ctx", str(ctx), "--json", "-b", str(min(ctx, 128))]
    if chunks:
        cmd += ["--chunks", str(chunks)]
    if mtp:
        cmd += ["--mtp-accept"]
    return json.loads(run(cmd + list(extra)).stdout)


def llama_ppl(llama_bin, model, heldout, ctx, chunks):
    cmd = [os.path.join(llama_bin, "llama-perplexity"), "-m", model, "-f", heldout, "-c", str(ctx), "-b", str(ctx),
           "-t", str(os.cpu_count() or 2), "--no-repack", "-fa", "off", "-ctk", "f32", "-ctv", "f32"]
    if chunks:
        cmd += ["--chunks", str(chunks)]
    # llama.cpp logs from a worker thread and can exit before the last line is flushed: the final
    # estimate is then read from the running "[N]ppl," values of the last window; one retry
    for attempt in range(2):
        t0 = time.time()
        r = run(cmd)
        out = r.stdout + r.stderr
        m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", out)
        if m:
            return {"ppl": float(m.group(1)), "ppl_err": float(m.group(2)), "seconds": time.time() - t0}
        runs = re.findall(r"\[(\d+)\]([0-9.]+),", out)
        if runs and chunks and int(runs[-1][0]) == chunks:
            return {"ppl": float(runs[-1][1]), "ppl_err": float("nan"), "seconds": time.time() - t0}
        log("llama-perplexity printed no final estimate, retrying")
    sys.exit("quality_table: no 'Final estimate' in llama-perplexity's output:\n" + r.stderr[-3000:])


def unigram(model, heldout, ctx, n_windows, n_vocab):
    text = open(heldout, encoding="utf-8", errors="surrogateescape").read()
    if text.endswith("\n"):
        text = text[:-1]
    with open(os.path.join(WORK, "heldout-nonl.txt"), "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write(text)
    ids = json.loads(run([REDLITE, "tokenize", "-m", model, "--file", f.name, "--json", "--no-special"]).stdout)["ids"]
    cnt = Counter(ids)
    tot = len(ids) + n_vocab

    def lp(t):
        return math.log((cnt[t] + 1) / tot)

    first = ctx // 2
    scored = [ids[w * ctx + p + 1] for w in range(n_windows) for p in range(first, ctx - 1)]
    return {"n_tokens": len(ids), "distinct": len(cnt), "ppl_scored": math.exp(-sum(map(lp, scored)) / len(scored)),
            "ppl_all": math.exp(-sum(map(lp, ids)) / len(ids)), "n_scored": len(scored)}


def generate(model, prompt, n, raw=True):
    cmd = [REDLITE, "generate", "-m", model, "-p", prompt, "-n", str(n), "--json"] + (["--raw"] if raw else [])
    return json.loads(run(cmd).stdout)


def llama_simple(llama_bin, model, prompt, n):
    r = run([os.path.join(llama_bin, "llama-simple"), "-m", model, "-n", str(n), prompt])
    out = r.stdout
    if out.endswith("\n"):
        out = out[:-1]
    return out[len(prompt):] if out.startswith(prompt) else None, out


def md_escape_block(s):
    return s.replace("```", "`\u200b``")


def main():
    global WORK
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--float", help="F32/F16 GGUF from llama.cpp's converter")
    ap.add_argument("--q8", help="Q8_0 GGUF from the converter (default: llama-quantize makes one)")
    ap.add_argument("--heldout")
    ap.add_argument("--routing-md", help="write the routing statistics (markdown) here")
    ap.add_argument("--from-json", help="only render --md / --routing-md from a saved --json")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=0, help="windows per redlite run (0 = all)")
    ap.add_argument("--llama-chunks", type=int, default=16, help="windows for the llama.cpp comparison (compared "
                    "with the same first windows of the redlite run)")
    ap.add_argument("--f16", help="the F16 GGUF too (a row of the table)")
    ap.add_argument("--routing-chunks", type=int, default=4, help="windows for the route trace (0 = skip)")
    ap.add_argument("--types", default="Q4_K_M,Q2_K", help="llama-quantize types to make")
    ap.add_argument("--llama-bin", default="build/llama.cpp/bin")
    ap.add_argument("--work", default="/work/quality-work")
    ap.add_argument("--reuse", action="store_true", help="reuse per-model results kept in --work")
    ap.add_argument("--allow-requantize", action="store_true", help="--float is itself quantized (tests)")
    ap.add_argument("--greedy-n", type=int, default=32)
    ap.add_argument("--md", help="write the markdown report here")
    ap.add_argument("--json", help="write all numbers here")
    a = ap.parse_args()
    if a.from_json:
        res = json.load(open(a.from_json))
        if a.md:
            open(a.md, "w").write(render_md(res, a))
        if a.routing_md and "routing" in res:
            open(a.routing_md, "w").write(render_routing(res))
        return
    if not a.float or not a.heldout:
        ap.error("--float and --heldout are required")
    WORK = a.work
    os.makedirs(WORK, exist_ok=True)
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    info = json.loads(run([REDLITE, "info", a.float, "--json"]).stdout)
    base = os.path.splitext(os.path.basename(a.float))[0]
    models = [(info.get("file_type_name") or ("F32" if info["file_type"] == 0 else "float"), a.float)]
    if a.f16:
        models.append(("F16", a.f16))
    quant_log = {}
    q8 = a.q8
    if not q8:
        q8 = os.path.join(WORK, base + "-Q8_0.gguf")
        quant_log["Q8_0"] = quantize(a.llama_bin, a.float, q8, "Q8_0", a.allow_requantize)
    models.append(("Q8_0", q8))
    for t in [t for t in a.types.split(",") if t]:
        dst = os.path.join(WORK, f"{base}-{t}.gguf")
        quant_log[t] = quantize(a.llama_bin, a.float, dst, t, a.allow_requantize)
        models.append((t, dst))
    res = {"commit": commit, "heldout": a.heldout, "ctx": a.ctx, "chunks": a.chunks, "models": []}
    first_json = None
    for name, path in models:
        cache = os.path.join(WORK, f"result-{name}-{a.ctx}-{a.chunks}-{a.llama_chunks}.json")
        if a.reuse and os.path.exists(cache) and os.path.getmtime(cache) > os.path.getmtime(path):
            res["models"].append(json.load(open(cache)))
            first_json = first_json or {"n_windows": res["models"][-1]["redlite"]["n_windows"]}
            log(f"{name}: reused {cache}")
            continue
        ty, detail = tensor_types(path)
        has_mtp = "nextn.eh_proj" in detail
        ours = redlite_ppl(path, a.heldout, a.ctx, a.chunks, has_mtp)
        first_json = first_json or ours
        theirs = None
        if os.path.isdir(a.llama_bin) and a.llama_chunks:
            theirs = llama_ppl(a.llama_bin, path, a.heldout, a.ctx, a.llama_chunks)
            w = ours["windows"][:a.llama_chunks]
            nl, ns = sum(x["nll_sum"] for x in w), sum(x["n_scored"] for x in w)
            theirs["redlite_same_windows"] = math.exp(nl / ns)
            theirs["n_windows"] = len(w)
        res["models"].append({"name": name, "path": path, "bytes": os.path.getsize(path), "tensor_types": ty,
                              "tensor_detail": detail, "quantize_fallbacks": quant_log.get(name, ""),
                              "redlite": {k: ours[k] for k in ("ppl", "ppl_err", "nll", "n_scored", "n_windows",
                                                               "top1", "seconds", "tok_s", "windows")}
                              | {"mtp": ours.get("mtp")},
                              "llama": theirs})
        with open(cache, "w") as f:
            json.dump(res["models"][-1], f)
        log(f"{name}: redlite {ours['ppl']:.4f}, llama.cpp {theirs['ppl'] if theirs else '-'}")
    n_vocab = info["tokenizer"]["vocab_size"]
    res["unigram"] = unigram(a.float, a.heldout, a.ctx, first_json["n_windows"], n_vocab)
    res["unigram"]["n_vocab"] = n_vocab
    # greedy agreement with llama.cpp and sample completions
    res["greedy"] = []
    for name, path in [m for m in models if m[0] in ("F32", "Q8_0")]:
        for p in SAMPLE_PROMPTS:
            g = generate(path, p, a.greedy_n)
            row = {"model": name, "prompt": p, "redlite_text": g["text"], "n": len(g["generated_ids"])}
            if os.path.isdir(a.llama_bin):
                lt, raw = llama_simple(a.llama_bin, path, p, a.greedy_n)
                row["llama_text"] = lt if lt is not None else raw
                row["equal"] = lt == g["text"]
            res["greedy"].append(row)
    res["samples"] = [{"prompt": p, "text": generate(q8, p, 96)["text"]} for p in SAMPLE_PROMPTS[:2]]
    res["samples"].append({"prompt": CHAT_PROMPT, "chat": True, "text": generate(q8, CHAT_PROMPT, 128, raw=False)["text"]})
    # routing statistics: one token per forward so the trace holds every token's choices
    if a.routing_chunks:
        trace = os.path.join(WORK, base + "-route.jsonl")
        run([REDLITE, "perplexity", "-m", q8, "-f", a.heldout, "--ctx", str(a.ctx), "--chunks", str(a.routing_chunks),
             "-b", "1", "--cache-mib", "mmap", "--route-trace", trace, "--json"])
        st = run([sys.executable, os.path.join(ROOT, "tools", "cache_sim.py"), trace, "--stats", "--json"]).stdout
        res["routing"] = json.loads(st)
        res["routing"]["model"] = q8
        res["routing"]["tokens_traced"] = a.routing_chunks * a.ctx
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    if a.md:
        with open(a.md, "w") as f:
            f.write(render_md(res, a))
    if a.routing_md and "routing" in res:
        with open(a.routing_md, "w") as f:
            f.write(render_routing(res))
    print(json.dumps({m["name"]: (m["redlite"]["ppl"], m["llama"]["ppl"] if m["llama"] else None)
                      for m in res["models"]}))


def render_md(res, a):
    L = []
    u = res["unigram"]
    r0 = res["models"][0]["redlite"]
    L.append(f"Held-out file `{res['heldout']}` ({u['n_tokens']} tokens); windows of {res['ctx']} tokens from an "
             f"empty state, second half scored: {r0['n_windows']} windows ({r0['n_scored']} scored tokens) for "
             f"redlite, the first {a.llama_chunks} of them for the llama.cpp comparison. Commit {res['commit']}.\n")
    L.append(f"| type | file MiB | PPL redlite ({r0['n_windows']} windows) | top-1 | MTP accept | MTP draft = text | "
             f"PPL redlite, first {a.llama_chunks} | PPL llama.cpp, first {a.llama_chunks} | Δ |")
    L.append("|---|---|---|---|---|---|---|---|---|")
    for m in res["models"]:
        r, l, mt = m["redlite"], m["llama"], m["redlite"].get("mtp")
        row = [m["name"], f"{m['bytes'] / 1048576:.1f}", f"{r['ppl']:.4f} ± {r['ppl_err']:.4f}", f"{100 * r['top1']:.1f} %",
               f"{100 * mt['accept_rate']:.1f} %" if mt else "-", f"{100 * mt['text_match_rate']:.1f} %" if mt else "-"]
        if l:
            row += [f"{l['redlite_same_windows']:.4f}", f"{l['ppl']:.4f} ± {l['ppl_err']:.4f}",
                    f"{100 * (l['redlite_same_windows'] / l['ppl'] - 1):+.3f} %"]
        else:
            row += ["-", "-", "-"]
        L.append("| " + " | ".join(row) + " |")
    L.append(f"\nUnigram baseline (add-one smoothing over {u['n_vocab']} ids, fitted on the held-out file itself, "
             f"scored on the same positions): PPL {u['ppl_scored']:.1f} (all {u['n_tokens']} tokens: "
             f"{u['ppl_all']:.1f}).\n")
    L.append("Tensor types per file (number of tensors):\n")
    for m in res["models"]:
        L.append(f"- {m['name']}: " + ", ".join(f"{k} {v}" for k, v in sorted(m["tensor_types"].items())))
        if m["quantize_fallbacks"]:
            L.append("  - llama-quantize fallbacks: " + m["quantize_fallbacks"])
    L.append("")
    if res["greedy"] and "equal" in res["greedy"][0]:
        eq = sum(g["equal"] for g in res["greedy"])
        L.append(f"Greedy agreement with llama.cpp (llama-simple vs `redlite generate --raw`, {a.greedy_n} tokens): "
                 f"{eq} / {len(res['greedy'])} completions identical.\n")
        for g in res["greedy"]:
            if not g["equal"]:
                L.append(f"- differs: {g['model']} {g['prompt']!r}: redlite {g['redlite_text']!r} / llama.cpp "
                         f"{g['llama_text']!r}")
    L.append("\nSamples (Q8_0, greedy):\n")
    for smp in res["samples"]:
        L.append(("Chat: " if smp.get("chat") else "Prompt: ") + f"`{smp['prompt']!r}`\n")
        L.append("```\n" + md_escape_block((smp["prompt"] if not smp.get("chat") else "") + smp["text"]) + "\n```\n")
    return "\n".join(L) + "\n"


def render_routing(res):
    r = res["routing"]
    L = [f"Model `{os.path.basename(r['model'])}` ({r['n_expert']} routed experts per layer, top-{r['top_k']}), "
         f"held-out file `{res['heldout']}`: the first {r['tokens_traced']} tokens ({r['tokens_traced'] // res['ctx']} "
         f"perplexity windows of {res['ctx']}), one token per forward (`--batch 1`), exact routing; commit "
         f"{res['commit']}.\n",
         "| layer | usage entropy, bits (of log2 E) | effective experts | max share | unused | previous token's "
         "experts reused | reuse distance 1 | ≤ 4 | ≤ 16 | median |",
         "|---|---|---|---|---|---|---|---|---|---|"]
    for x in r["layers"]:
        L.append(f"| {x['layer']} | {x['entropy_bits']:.3f} ({x['entropy_norm']:.3f}) | {x['effective_experts']:.1f} | "
                 f"{100 * x['max_share']:.1f} % | {x['unused']} | {100 * x['prev_token_overlap']:.1f} % | "
                 f"{100 * x['reuse_d1']:.1f} % | {100 * x['reuse_le4']:.1f} % | {100 * x['reuse_le16']:.1f} % | "
                 f"{x['reuse_median']} |")
    K, E = r["top_k"], r["n_expert"]
    L.append(f"\nRandom routing would reuse {100 * K / E:.1f} % of the previous token's experts (top-{K} of {E}).\n")
    L.append("Hit rates of one uniform pool of slots (all traced layers' experts compete), demand misses only:\n")
    L.append("| cache size (of all experts) | slots | LRU hit rate | LRU misses/token | Belady hit rate | Belady misses/token |")
    L.append("|---|---|---|---|---|---|")
    by = {}
    for c in r["cache"]:
        by.setdefault(c["frac"], {})[c["policy"]] = c
    for f, d in sorted(by.items()):
        lr, bl = d.get("lru", {}), d.get("belady", {})
        cell = lambda z, k, fmt: fmt.format(z[k]) if k in z else z.get("error", "-")
        L.append(f"| {100 * f:.0f} % | {lr.get('slots', bl.get('slots'))} | {cell(lr, 'hit_rate', '{:.1%}')} | "
                 f"{cell(lr, 'misses_per_token', '{:.2f}')} | {cell(bl, 'hit_rate', '{:.1%}')} | "
                 f"{cell(bl, 'misses_per_token', '{:.2f}')} |")
    return "\n".join(L) + "\n"


WORK = None
if __name__ == "__main__":
    main()
