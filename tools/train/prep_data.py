#!/usr/bin/env python3
"""Data recipe of the trained default model: source code found on the training machine, deduplicated,
split held-out by file, plus a small share of chat-formatted examples in the model's own template.

Sources (all read from the machine the script runs on, nothing downloaded):
  * the Python standard library (sysconfig 'stdlib'),
  * installed Python packages (sysconfig 'purelib'/'platlib'), one group per top-level package,
    each group capped (--cap-mb) so that no single package dominates,
  * C headers under /usr/include, one group per top-level directory (same cap).
Files are taken in a deterministic order (sha256 of the path), skipped if they are not UTF-8, too
small/large, or look generated (very long lines); exact duplicates (sha256 of the content) are
dropped. A file goes to the held-out set iff sha256(content) mod 1000 < --heldout-permille, so
held-out data is whole files the model never saw.

Chat share (--chat-frac of the training tokens, default 7 %): for Python training files, functions
with a docstring become a user turn ("Write a Python function ...", phrased from the docstring) and an
assistant turn with the code; a few hundred tool-call conversations (read a file / run a command /
search) use the template's own tool format. Everything is rendered with the chat template shipped
in tokenizer_config.json (the Qwen3-Coder template), so the model learns exactly what Red Lite's
renderer produces.

Output (OUT/): train.bin / val.bin (uint16 token ids, documents separated by <|endoftext|>),
heldout.txt (the first --heldout-sample-kb of held-out files, for perplexity and routing statistics),
manifest.json (recipe, counts per group, file list with hashes, token counts, versions).
"""
import argparse
import ast
import hashlib
import json
import os
import random
import sys
import sysconfig
import time
from multiprocessing import Pool
from pathlib import Path

import numpy as np

EXT = {".py": "python", ".h": "c"}


def log(msg):
    print(f"[prep {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def list_sources(max_files_per_root=None):
    """Yields (group, path) for every candidate file, grouped for the per-group cap."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    sites = sorted({Path(sysconfig.get_paths()[k]) for k in ("purelib", "platlib")})
    roots = []
    for s in sites:
        if s.is_dir():
            roots.append(("site", s))
    if stdlib.is_dir():
        roots.append(("stdlib", stdlib))
    if Path("/usr/include").is_dir():
        roots.append(("include", Path("/usr/include")))
    seen_dirs = set()
    for kind, root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            dp = Path(dirpath)
            # the stdlib walk must not re-enter site-packages (it lives under it)
            if kind == "stdlib" and ("site-packages" in dp.parts or "dist-packages" in dp.parts):
                dirnames[:] = []
                continue
            if dp in seen_dirs:
                continue
            seen_dirs.add(dp)
            dirnames.sort()
            rel = dp.relative_to(root)
            top = rel.parts[0] if rel.parts else "_root"
            if kind == "stdlib":
                group = "stdlib"
            elif kind == "site":
                group = "pkg:" + top.split("-")[0].split(".")[0]
            else:
                group = "include:" + top
            for fn in sorted(filenames):
                ext = os.path.splitext(fn)[1]
                if ext in EXT and (kind != "include" or ext == ".h"):
                    yield group, dp / fn


def read_ok(path: Path, min_bytes: int, max_bytes: int):
    try:
        st = path.stat()
        if not (min_bytes <= st.st_size <= max_bytes):
            return None
        b = path.read_bytes()
        t = b.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    lines = t.split("\n")
    if max(len(l) for l in lines) > 400 or len(lines) < 8:
        return None           # minified / generated / data tables
    if "\x00" in t:
        return None
    return b, t


# ---------------------------------------------------------------------------------------------
# chat examples

REQUESTS = [
    "Write a Python function `{sig}` that {doc}",
    "Implement `{sig}` in Python. It should {doc}",
    "Can you write a function {name} that {doc}",
    "I need a Python function called {name}: {doc}",
    "Write {name}({args}) in Python; it {doc}",
]
INTROS = ["", "Here is an implementation:\n\n", "Sure, here it is:\n\n", "Here is the function:\n\n", ""]
OUTROS = ["", "", "\n\n`{name}`: {doc_nl}", "\n\nThis keeps the behaviour simple and readable."]


def doc_phrase(doc: str):
    first = doc.strip().split("\n\n")[0].replace("\n", " ").strip()
    first = " ".join(first.split())
    if not (12 <= len(first) <= 240):
        return None
    if first[0].isupper() and not first[:2].isupper():
        first = first[0].lower() + first[1:]
    return first.rstrip(".") + "."


def funcs_of(args):
    """(path text) -> list of (name, args, doc phrase, source) for functions with docstrings."""
    text, seed = args
    out = []
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return out
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
            doc = ast.get_docstring(node)
            if not doc:
                continue
            ph = doc_phrase(doc)
            if not ph:
                continue
            src = ast.get_source_segment(text, node)
            if not src or not (120 <= len(src) <= 2500):
                continue
            # dedent methods to top level
            ind = len(src) - len(src.lstrip(" ")) if src.startswith(" ") else 0
            lines = src.split("\n")
            col = node.col_offset
            lines = [lines[0]] + [l[col:] if l[:col].strip() == "" else l for l in lines[1:]]
            src = "\n".join(lines)
            a = [x.arg for x in node.args.args if x.arg not in ("self", "cls")]
            out.append((node.name, ", ".join(a), ph, src))
    return out


TOOLS = [
    {"type": "function", "function": {"name": "read_file", "description": "Read a file from the repository.",
     "parameters": {"type": "object", "properties": {"path": {"type": "string", "description": "Path of the file"}},
                    "required": ["path"]}}},
    {"type": "function", "function": {"name": "run_command", "description": "Run a shell command and return its output.",
     "parameters": {"type": "object", "properties": {"command": {"type": "string", "description": "The command line"}},
                    "required": ["command"]}}},
    {"type": "function", "function": {"name": "search_code", "description": "Search the code base for a string.",
     "parameters": {"type": "object", "properties": {"query": {"type": "string", "description": "Text to find"},
                                                     "max_results": {"type": "integer", "description": "Limit"}},
                    "required": ["query"]}}},
]


def tool_conversation(rng, path: str, text: str, funcs):
    """One tool-call conversation grounded in a real training file."""
    name = Path(path).name
    kind = rng.randrange(3)
    snippet = "\n".join(text.split("\n")[: rng.randint(8, 30)])
    if kind == 0:
        user = rng.choice([f"What does {name} do?", f"Show me the start of {name}.",
                           f"Open {name} and summarise it."])
        call = {"name": "read_file", "arguments": {"path": name}}
        result = snippet
        answer = f"{name} starts with:\n\n```\n" + "\n".join(snippet.split("\n")[:6]) + "\n```"
    elif kind == 1:
        user = rng.choice([f"How many lines does {name} have?", f"Count the lines in {name}."])
        n = text.count("\n")
        call = {"name": "run_command", "arguments": {"command": f"wc -l {name}"}}
        result = f"{n} {name}"
        answer = f"{name} has {n} lines."
    else:
        fn = rng.choice(funcs)[0] if funcs else "main"
        user = rng.choice([f"Where is {fn} defined?", f"Find the definition of {fn}."])
        call = {"name": "search_code", "arguments": {"query": f"def {fn}", "max_results": 5}}
        result = f"{name}: def {fn}("
        answer = f"`{fn}` is defined in {name}."
    msgs = [{"role": "user", "content": user},
            {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": call}]},
            {"role": "tool", "content": result},
            {"role": "assistant", "content": answer}]
    return msgs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokenizer-dir", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cap-mb", type=float, default=6.0, help="max MB of text per package/header group")
    ap.add_argument("--stdlib-cap-mb", type=float, default=40.0)
    ap.add_argument("--max-total-mb", type=float, default=400.0)
    ap.add_argument("--min-bytes", type=int, default=300)
    ap.add_argument("--max-bytes", type=int, default=300_000)
    ap.add_argument("--heldout-permille", type=int, default=15)
    ap.add_argument("--heldout-sample-kb", type=int, default=400)
    ap.add_argument("--chat-frac", type=float, default=0.07)
    ap.add_argument("--n-tool-convs", type=int, default=600)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    t0 = time.time()
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer.from_file(str(a.tokenizer_dir / "tokenizer.json"))
    tc = json.loads((a.tokenizer_dir / "tokenizer_config.json").read_text())
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, chat_template=tc["chat_template"])
    eot = tok.token_to_id("<|endoftext|>")
    assert eot is not None

    # 1. collect, cap, dedup, split
    cands = {}
    for g, p in list_sources():
        cands.setdefault(g, []).append(p)
    used = {}
    hashes = set()
    train_docs, val_docs, files = [], [], []
    total = 0
    dup = 0
    order = {"stdlib": 0, "pkg": 1, "include": 2}
    for g in sorted(cands, key=lambda g: (order[g.split(':')[0]], g)):
        cap = (a.stdlib_cap_mb if g == "stdlib" else a.cap_mb) * 1e6
        paths = sorted(cands[g], key=lambda p: sha(str(p).encode()))
        nb = 0
        for p in paths:
            if nb >= cap or total >= a.max_total_mb * 1e6:
                break
            r = read_ok(p, a.min_bytes, a.max_bytes)
            if r is None:
                continue
            b, t = r
            h = sha(b)
            if h in hashes:
                dup += 1
                continue
            hashes.add(h)
            held = int(h[:8], 16) % 1000 < a.heldout_permille
            (val_docs if held else train_docs).append((str(p), t))
            files.append({"path": str(p), "sha256": h, "bytes": len(b), "group": g, "heldout": held})
            nb += len(b)
            total += len(b)
        if nb:
            used[g] = nb
    log(f"collected {len(files)} files ({total / 1e6:.1f} MB) from {len(used)} groups, "
        f"{dup} duplicates dropped, {len(val_docs)} held-out files; {time.time() - t0:.0f}s")

    # 2. chat examples from training python files
    rng = random.Random(a.seed)
    py_train = [(p, t) for p, t in train_docs if p.endswith(".py")]
    code_bytes = sum(len(t) for _, t in train_docs)
    want_chat_bytes = a.chat_frac / (1 - a.chat_frac) * code_bytes
    rng.shuffle(py_train)
    pick = py_train[: max(1, len(py_train) // 3)]
    with Pool(a.workers) as pool:
        fl = pool.map(funcs_of, [(t, 0) for _, t in pick], chunksize=16)
    chats = []
    chat_bytes = 0
    all_funcs = [f for fs in fl for f in fs]
    log(f"{len(py_train)} python training files, {len(pick)} scanned, {len(all_funcs)} documented functions")
    rng.shuffle(all_funcs)
    for name, args, doc, src in all_funcs:
        if chat_bytes >= want_chat_bytes:
            break
        r = rng.choice(REQUESTS)
        user = r.format(sig=f"{name}({args})", name=name, args=args, doc=doc)
        body = rng.choice(INTROS) + "```python\n" + src + "\n```" + \
            rng.choice(OUTROS).format(name=name, doc_nl=doc)
        msgs = [{"role": "user", "content": user}, {"role": "assistant", "content": body}]
        if rng.random() < 0.2:
            msgs.insert(0, {"role": "system", "content": "You are a helpful coding assistant."})
        s = hf.apply_chat_template(msgs, tokenize=False)
        chats.append(s)
        chat_bytes += len(s)
    n_func_chats = len(chats)
    for i in range(a.n_tool_convs):
        p, t = pick[rng.randrange(len(pick))] if pick else ("main.py", "x = 1\n" * 10)
        msgs = tool_conversation(rng, p, t, fl[i % len(fl)] if fl else [])
        s = hf.apply_chat_template(msgs, tools=TOOLS, tokenize=False)
        chats.append(s)
        chat_bytes += len(s)
    log(f"chat: {n_func_chats} function requests + {a.n_tool_convs} tool conversations, "
        f"{chat_bytes / 1e6:.1f} MB; {time.time() - t0:.0f}s")

    # 3. tokenize (documents in a deterministic shuffled order, <|endoftext|> between them)
    docs = [t for _, t in train_docs] + chats
    rng.shuffle(docs)
    def encode(texts):
        ids = []
        B = 2048
        for i in range(0, len(texts), B):
            for e in tok.encode_batch(texts[i:i + B], add_special_tokens=False):
                ids.extend(e.ids)
                ids.append(eot)
        return np.asarray(ids, dtype=np.uint16)
    # chat text contains the special tokens literally: the tokenizer maps them to their ids
    tr = encode(docs)
    va = encode([t for _, t in val_docs])
    a.out.mkdir(parents=True, exist_ok=True)
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        (a.out / fn).write_bytes((a.tokenizer_dir / fn).read_bytes())
    tr.tofile(a.out / "train.bin")
    va.tofile(a.out / "val.bin")
    n_chat_tok = sum(len(e.ids) + 1 for e in tok.encode_batch(chats[:2000], add_special_tokens=False))
    chat_tok_est = n_chat_tok * len(chats) / max(1, min(2000, len(chats)))
    log(f"tokens: train {len(tr) / 1e6:.2f} M, val {len(va) / 1e6:.2f} M "
        f"(chat ≈ {chat_tok_est / max(1, len(tr)) * 100:.1f} %); {time.time() - t0:.0f}s")

    # 4. held-out text sample (whole held-out files, in file-hash order) + manifest
    sample, sb = [], 0
    for p, t in sorted(val_docs, key=lambda x: sha(x[1].encode())):
        if sb >= a.heldout_sample_kb * 1000:
            break
        sample.append(t)
        sb += len(t.encode())
    (a.out / "heldout.txt").write_text("\n\n".join(sample))
    import tokenizers
    import transformers
    man = {
        "recipe": "tools/train/prep_data.py", "args": {k: str(v) for k, v in vars(a).items()},
        "python": sys.version.split()[0], "tokenizers": tokenizers.__version__,
        "transformers": transformers.__version__, "platform": sys.platform,
        "tokenizer_json_sha256": sha((a.tokenizer_dir / "tokenizer.json").read_bytes()),
        "n_files": len(files), "n_heldout_files": len(val_docs), "duplicates_dropped": dup,
        "bytes_total": total, "bytes_per_group": dict(sorted(used.items(), key=lambda x: -x[1])),
        "chat": {"function_requests": n_func_chats, "tool_conversations": a.n_tool_convs,
                 "bytes": chat_bytes, "token_share_est": chat_tok_est / max(1, len(tr))},
        "tokens": {"train": int(len(tr)), "val": int(len(va))},
        "train_bin_sha256": sha(tr.tobytes()), "val_bin_sha256": sha(va.tobytes()),
        "heldout_sample": {"files": len(sample), "bytes": sb,
                           "sha256": sha((a.out / "heldout.txt").read_bytes())},
        "files_sha256": sha(json.dumps(files, sort_keys=True).encode()),
        "files": files,
        "seconds": round(time.time() - t0, 1),
    }
    (a.out / "manifest.json").write_text(json.dumps(man, indent=1))
    log(f"done in {time.time() - t0:.0f}s -> {a.out}")


if __name__ == "__main__":
    main()
