#!/usr/bin/env python3
"""bench/records.py: benchmark results as flat records, one JSON object per line (JSONL).

A record is one measured rate, with where and how it was measured:

    machine   str       the machine (CPU model, CPUs, RAM; the GPU where one was used)
    date      str       ISO 8601 date or UTC time of the run
    commit    str       commit of the engine measured (Red Lite: `git describe`; llama.cpp: its
                        build_commit), "unknown" where the source of the record did not say
    file      str       the model file (its name, or how it was made)
    engine    str       "redlite" or "llama.cpp"
    backend   str       "cpu" or "cuda"
    threads   int       CPU threads
    budget    object    {"cache_mib": N | "full" | "auto" | "mmap" | null,
                         "vram_mib": N | "full" | "auto" | null}: the memory the run was given
                        for the routed experts (RAM expert cache; VRAM tier); null: not bounded /
                        not applicable
    kind      str       "decode" or "prompt"
    depth     int       context positions before the measured tokens (decode; 0 for a prompt)
    n_tokens  int       tokens measured (decode steps, or the prompt's length)
    tok_s     number    the rate, tokens per second

and optionally: hit_rate (expert-cache hits / lookups over the measured tokens, 0..1),
vram_used_mib (VRAM the run used, measured), config (what else distinguishes the series, e.g.
"--vram-miss auto"), source (where the numbers came from), tag.

    bench/records.py redlite BENCH.json [--set KEY=VALUE ...]      `redlite bench --json` -> JSONL
    bench/records.py llama-bench LB.json --set machine=... [...]   `llama-bench -o json` -> JSONL
    bench/records.py wrapped RECS.jsonl --set machine=... [...]    bench/cuda_files.sh's records.jsonl
                                                                    ({"tool", "tag", "args", "result"} lines)
    bench/records.py check FILE...                                  validate (exit 2 on the first bad one)
    bench/records.py csv FILE...                                    the records as CSV on stdout

--set KEY=VALUE adds or replaces a field (budget.vram_mib=4096 sets one budget; a value that parses
as JSON is taken as JSON, else as a string). Python standard library only; bench/charts.py reads
the same records.
"""
import csv
import json
import sys

REQUIRED = ("machine", "date", "commit", "file", "engine", "backend", "threads", "budget", "kind", "depth",
            "n_tokens", "tok_s")
OPTIONAL = ("hit_rate", "vram_used_mib", "config", "source", "tag")
SCHEMA_HINT = "every record needs " + ", ".join(REQUIRED) + " (bench/records.py describes them)"


class RecordError(Exception):
    """A record or input file that cannot be used: the message is one line."""


def _num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def validate(r):
    """None, or what is wrong with record r (one phrase)."""
    if not isinstance(r, dict):
        return "is not a JSON object"
    for k in REQUIRED:
        if k not in r:
            return f"lacks '{k}'"
    for k in ("machine", "date", "commit", "file", "engine", "backend", "kind"):
        if not isinstance(r[k], str) or not r[k]:
            return f"'{k}' is not a non-empty string"
    if r["kind"] not in ("decode", "prompt"):
        return f"'kind' is {r['kind']!r}, not 'decode' or 'prompt'"
    for k in ("threads", "depth", "n_tokens"):
        if not isinstance(r[k], int) or isinstance(r[k], bool) or r[k] < 0:
            return f"'{k}' is not a count"
    if not _num(r["tok_s"]) or r["tok_s"] <= 0:
        return "'tok_s' is not a positive number"
    b = r["budget"]
    if not isinstance(b, dict) or "cache_mib" not in b or "vram_mib" not in b:
        return "'budget' is not an object with 'cache_mib' and 'vram_mib'"
    for k in ("cache_mib", "vram_mib"):
        if b[k] is not None and not _num(b[k]) and not isinstance(b[k], str):
            return f"'budget.{k}' is neither a number, a word nor null"
    if r.get("hit_rate") is not None and (not _num(r["hit_rate"]) or not 0 <= r["hit_rate"] <= 1):
        return "'hit_rate' is not a fraction 0..1"
    return None


def parse_set(items):
    """--set KEY=VALUE pairs -> {key: value}; budget.X keys stay dotted."""
    out = {}
    for it in items or []:
        if "=" not in it:
            raise RecordError(f"--set {it}: expected KEY=VALUE")
        k, v = it.split("=", 1)
        try:
            out[k] = json.loads(v)
        except ValueError:
            out[k] = v
    return out


def apply_set(r, sets):
    for k, v in sets.items():
        if k.startswith("budget."):
            r.setdefault("budget", {"cache_mib": None, "vram_mib": None})[k.split(".", 1)[1]] = v
        else:
            r[k] = v
    return r


def from_redlite(j, sets=None, source=None):
    """The records of one `redlite bench --json` object: one per decode depth and per prompt. Fields an
    older binary did not write (machine, date, commit, budget) come from sets or stay missing (and
    validate() names them)."""
    for k in ("model", "backend", "threads", "decode", "prompt"):
        if k not in j:
            raise RecordError(f"not a redlite bench JSON object (no '{k}')")
    base = {k: j[k] for k in ("machine", "date", "commit") if k in j}
    base.update(file=j["model"], engine="redlite", backend=j["backend"], threads=j["threads"])
    if isinstance(j.get("budget"), dict):
        base["budget"] = {"cache_mib": j["budget"].get("cache_mib"), "vram_mib": j["budget"].get("vram_mib")}
    if source:
        base["source"] = source
    out = []
    for d in j["decode"]:
        r = dict(base, kind="decode", depth=d["depth"], n_tokens=d["n_tokens"], tok_s=d["tok_s"])
        if "cache_hit_rate" in d:
            r["hit_rate"] = d["cache_hit_rate"]
        out.append(r)
    for p in j["prompt"]:
        out.append(dict(base, kind="prompt", depth=0, n_tokens=p["n_tokens"], tok_s=p["tok_s"]))
    return [apply_set(dict(r, **({"budget": dict(r["budget"])} if "budget" in r else {})), sets or {}) for r in out]


def from_llama_bench(rows, sets=None, source=None):
    """The records of `llama-bench -o json` rows (pp: kind prompt; tg: kind decode at n_depth).
    machine and budget are not in its output: pass them with --set (machine is required)."""
    out = []
    for t in rows:
        n_p, n_g = t.get("n_prompt", 0), t.get("n_gen", 0)
        if (n_p > 0) == (n_g > 0):
            continue  # pp+tg combined rows are neither a prompt rate nor a decode rate
        r = {"date": t.get("test_time", ""), "commit": t.get("build_commit") or "unknown",
             "file": t.get("model_filename", ""), "engine": "llama.cpp",
             "backend": "cuda" if "CUDA" in str(t.get("backends", "")) else "cpu",
             "threads": t.get("n_threads", 0), "budget": {"cache_mib": None, "vram_mib": None},
             "kind": "prompt" if n_p else "decode", "depth": 0 if n_p else t.get("n_depth", 0),
             "n_tokens": n_p or n_g, "tok_s": t["avg_ts"], "config": f"-ub {t.get('n_ubatch', '?')}"}
        if t.get("cpu_info") or t.get("gpu_info"):
            r["machine"] = ", ".join(x for x in (t.get("gpu_info"), t.get("cpu_info")) if x)
        if source:
            r["source"] = source
        out.append(apply_set(r, sets or {}))
    return out


def from_wrapped(path, sets=None, keep=None):
    """bench/cuda_files.sh's records.jsonl: lines {"tool": "redlite" | "llama-bench", "tag", "args",
    "result": the tool's JSON}. keep(line) -> bool selects lines (default: all). Each record gets
    the line's tag and, where the args name RL_* switches ("[RL_X=1] ..."), config = them."""
    out = []
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError as e:
        raise RecordError(f"{path}: cannot read: {e.strerror}")
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            w = json.loads(line)
        except ValueError:
            raise RecordError(f"{path}:{i}: not JSON")
        if keep and not keep(w):
            continue
        res, src = w.get("result"), f"{path}#{w.get('tag', i)}"
        args = str(w.get("args", ""))
        extra = {"tag": w.get("tag", "")}
        if args.startswith("[RL_"):
            extra["config"] = args[1:args.index("]")]
        if w.get("tool") == "redlite" and isinstance(res, dict):
            recs = from_redlite(res, sets, src)
        elif w.get("tool") in ("llama-bench", "llama.cpp") and isinstance(res, list):
            recs = from_llama_bench(res, sets, src)
        else:
            continue
        out += [dict(r, **extra) for r in recs]
    return out


def load(path):
    """The records of a file: JSONL of records, or one `redlite bench --json` document (flattened).
    Raises RecordError with one line naming the file and the first bad record."""
    try:
        text = open(path, encoding="utf-8").read()
    except OSError as e:
        raise RecordError(f"{path}: cannot read: {e.strerror}")
    try:
        whole = json.loads(text)
    except ValueError:
        whole = None
    if isinstance(whole, dict) and "decode" in whole and "prompt" in whole:
        try:
            recs = from_redlite(whole, source=path)
        except RecordError as e:
            raise RecordError(f"{path}: {e}")
        numbered = [(1, r) for r in recs]
    else:
        numbered = []
        for i, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                numbered.append((i, json.loads(line)))
            except ValueError:
                raise RecordError(f"{path}:{i}: not JSON (expected one record per line)")
    if not numbered:
        raise RecordError(f"{path}: no records")
    for i, r in numbered:
        why = validate(r)
        if why:
            raise RecordError(f"{path}:{i}: the record {why}; {SCHEMA_HINT}")
    return [r for _, r in numbered]


def write_csv(records, f):
    w = csv.writer(f)
    cols = [c for c in REQUIRED if c != "budget"] + ["cache_mib", "vram_mib"] + list(OPTIONAL)
    w.writerow(cols)
    for r in records:
        row = dict(r, cache_mib=r["budget"]["cache_mib"], vram_mib=r["budget"]["vram_mib"])
        w.writerow(["" if row.get(c) is None else row[c] for c in cols])


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("redlite", "llama-bench", "wrapped", "check", "csv"))
    ap.add_argument("files", nargs="+")
    ap.add_argument("--set", action="append", metavar="KEY=VALUE")
    a = ap.parse_args(argv)
    try:
        sets = parse_set(a.set)
        if a.what in ("check", "csv"):
            recs = [r for p in a.files for r in load(p)]
            if a.what == "csv":
                write_csv(recs, sys.stdout)
            else:
                print(f"{len(recs)} records, all complete")
            return 0
        for p in a.files:
            if a.what == "wrapped":
                recs = from_wrapped(p, sets)
            else:
                try:
                    data = json.load(open(p, encoding="utf-8"))
                except (OSError, ValueError) as e:
                    raise RecordError(f"{p}: not a JSON document ({e})")
                recs = from_redlite(data, sets, p) if a.what == "redlite" else from_llama_bench(data, sets, p)
            for i, r in enumerate(recs, 1):
                why = validate(r)
                if why:
                    raise RecordError(f"{p}: record {i} {why} (add it with --set KEY=VALUE)")
                print(json.dumps(r))
    except RecordError as e:
        print(f"records: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
