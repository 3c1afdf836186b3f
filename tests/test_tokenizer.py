"""Tokenizer oracle test: Red Lite's ids must be bit-identical to HF `tokenizers` loading Qwen's
tokenizer.json, on the committed corpus (tests/fixtures/tokenizer_corpus.jsonl, made by
tools/make_tokenizer_corpus.py) and on seeded random strings; decode(encode(s)) must give s back
(NFC-normalised outside added tokens).

Red Lite runs once per batch: `redlite tokenize -m tests/fixtures/qwen3-vocab.gguf --jsonl F`.
The HF tokenizer.json is not committed (11 MB): it is read from <repo>/../shared/data/qwen3-tokenizer/
and the oracle cases skip with a message when it is absent.
Set RL_BUILD to test another build directory (default: build).
"""
import json
import os
import random
import re
import subprocess
import tempfile
import unicodedata

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, os.environ.get("RL_BUILD", "build"))
REDLITE = os.path.join(BUILD, "redlite")
VOCAB = os.path.join(ROOT, "tests", "fixtures", "qwen3-vocab.gguf")
CORPUS = os.path.join(ROOT, "tests", "fixtures", "tokenizer_corpus.jsonl")
HF_DIR = os.path.join(ROOT, "..", "shared", "data", "qwen3-tokenizer")
HF_JSON = os.path.join(HF_DIR, "tokenizer.json")


def need_hf():
    if not os.path.exists(HF_JSON):
        pytest.skip(f"HF oracle tokenizer not found at {os.path.normpath(HF_JSON)} (shared/ data absent)")
    tokenizers = pytest.importorskip("tokenizers")
    return tokenizers


@pytest.fixture(scope="module")
def hf():
    tokenizers = need_hf()
    return tokenizers.Tokenizer.from_file(HF_JSON)


@pytest.fixture(scope="module")
def hf_plain():
    """The same tokenizer without its added tokens: the oracle for --no-special."""
    tokenizers = need_hf()
    with open(HF_JSON, encoding="utf-8") as f:
        tj = json.load(f)
    tj["added_tokens"] = []
    return tokenizers.Tokenizer.from_str(json.dumps(tj))


@pytest.fixture(scope="module")
def corpus():
    with open(CORPUS, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def redlite_batch(texts, *extra):
    assert os.path.exists(REDLITE), f"{REDLITE} is missing: run make first"
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False, encoding="ascii") as f:
        for t in texts:
            f.write(json.dumps(t, ensure_ascii=True) + "\n")
        path = f.name
    try:
        r = subprocess.run([REDLITE, "tokenize", "-m", VOCAB, "--jsonl", path, *extra], capture_output=True,
                           timeout=600)
    finally:
        os.unlink(path)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    out = [json.loads(line) for line in r.stdout.decode("utf-8").split("\n")[:-1]]
    assert len(out) == len(texts)
    return out


def added_token_regex(hf_tok):
    added = sorted((t.content for t in hf_tok.get_added_tokens_decoder().values()), key=len, reverse=True)
    return re.compile("(" + "|".join(re.escape(a) for a in added) + ")")


def expected_roundtrip(text, special_re, nfc):
    """NFC applied between added tokens (HF normalises the spans around added tokens separately).
    The oracle's NFC uses Unicode 9.0 data (see docs/TOKENIZER.md), so it is the reference here."""
    if special_re is None:
        return nfc(text)
    parts = special_re.split(text)
    return "".join(p if i % 2 else nfc(p) for i, p in enumerate(parts))


def compare(texts, cats, ours, theirs, special_re, nfc):
    bad = []
    for text, cat, o, ids in zip(texts, cats, ours, theirs):
        if o["ids"] != ids:
            bad.append(f"[{cat}] {text[:80]!r}: ids differ\n   ours {o['ids'][:24]}\n   hf   {ids[:24]}")
        elif o["decoded"] != expected_roundtrip(text, special_re, nfc):
            bad.append(f"[{cat}] {text[:80]!r}: round trip gives {o['decoded'][:80]!r}")
    assert not bad, f"{len(bad)} of {len(texts)} strings differ:\n" + "\n".join(bad[:12])


def test_corpus_shape(corpus):
    assert len(corpus) >= 1000
    cats = {c["cat"] for c in corpus}
    langs = {c.split("-", 1)[1] for c in cats if c.startswith("code-") and c != "code-synth"}
    assert len(langs) >= 10, langs
    for must in ("special", "nfc", "space", "contractions", "emoji", "marks", "digits", "long"):
        assert must in cats


def test_corpus_matches_hf(hf, corpus):
    texts = [c["text"] for c in corpus]
    ours = redlite_batch(texts)
    theirs = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    compare(texts, [c["cat"] for c in corpus], ours, theirs, added_token_regex(hf), hf.normalizer.normalize_str)


def test_corpus_no_special_matches_hf(hf_plain, corpus):
    texts = [c["text"] for c in corpus]
    ours = redlite_batch(texts, "--no-special")
    theirs = [e.ids for e in hf_plain.encode_batch(texts, add_special_tokens=False)]
    compare(texts, [c["cat"] for c in corpus], ours, theirs, None, hf_plain.normalizer.normalize_str)


def random_strings(seed, n):
    rng = random.Random(seed)
    pieces = ["'s", "'LL", "'Re", " ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "a", "Z", "é", "e\u0301",
              "ß", "ſ", "1", "42", "٣", "!", "?!", "...", "<|im_end|>", "<think>", "<|", "|>", "😀", "👨‍👩‍👧",
              "中文", "日本", "한", "\u1100\u1161", "Ω", "\u0301", "\u0338", ">", "<", "'", "_", "-", "\x00", "\x7f",
              "\x85", "\u2028", "𝔘", "\U0002ebf0", "\U00016d40", "\ue000"]
    out = []
    for _ in range(n):
        s = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 40)))
        if rng.random() < 0.3:
            s += "".join(chr(rng.randint(0x20, 0x2FFFF)) for _ in range(rng.randint(1, 10)))
        out.append("".join(ch for ch in s if not 0xD800 <= ord(ch) < 0xE000))
    return out


def test_random_strings_match_hf(hf):
    texts = random_strings(1234, 3000)
    ours = redlite_batch(texts)
    theirs = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    compare(texts, ["random"] * len(texts), ours, theirs, added_token_regex(hf), hf.normalizer.normalize_str)


def normalization_strings(seed, n):
    """Strings dense in combining marks and canonically decomposable characters (every one that
    Python's unicodedata knows), to pin down NFC: reordering, composition, blocking, Hangul."""
    rng = random.Random(seed)
    marks, decomposable = [], []
    for cp in range(0x80, 0x110000):
        if 0xD800 <= cp < 0xE000:
            continue
        ch = chr(cp)
        if unicodedata.combining(ch):
            marks.append(ch)
        d = unicodedata.decomposition(ch)
        if d and not d.startswith("<"):
            decomposable.append(ch)
    bases = list("aeiouAEOUnNcCsSzZ <>'1") + ["\u1100", "\u1161", "\u11a8", "\uac00", "\u0915", "\u05d0"]
    out = []
    for _ in range(n):
        s = ""
        for _ in range(rng.randint(1, 12)):
            r = rng.random()
            if r < 0.35:
                s += rng.choice(bases)
            elif r < 0.7:
                s += rng.choice(marks)
            else:
                s += unicodedata.normalize(rng.choice(["NFD", "NFC"]), rng.choice(decomposable))
        out.append(s)
    return out


def test_normalization_strings_match_hf(hf):
    texts = normalization_strings(99, 4000)
    ours = redlite_batch(texts)
    theirs = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    compare(texts, ["nfc"] * len(texts), ours, theirs, added_token_regex(hf), hf.normalizer.normalize_str)


def read_gguf_kv(path):
    """Metadata of a GGUF file as a dict (a small reader: the gguf package's is slow on 150k-entry
    arrays)."""
    import struct

    with open(path, "rb") as f:
        buf = f.read()
    assert buf[:4] == b"GGUF"
    pos = 8
    _n_tensors, n_kv = struct.unpack_from("<QQ", buf, pos)
    pos += 16
    scalar = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}

    def value(t):
        nonlocal pos
        if t == 8:
            (n,) = struct.unpack_from("<Q", buf, pos)
            s = buf[pos + 8:pos + 8 + n].decode("utf-8")
            pos += 8 + n
            return s
        if t == 9:
            et, n = struct.unpack_from("<IQ", buf, pos)
            pos += 12
            if et in scalar:
                fmt = scalar[et]
                size = struct.calcsize(fmt)
                vals = list(struct.unpack_from("<%d%s" % (n, fmt[1]), buf, pos))
                pos += size * n
                return vals
            return [value(et) for _ in range(n)]
        fmt = scalar[t]
        (v,) = struct.unpack_from(fmt, buf, pos)
        pos += struct.calcsize(fmt)
        return v

    kv = {}
    for _ in range(n_kv):
        key = value(8)
        (t,) = struct.unpack_from("<I", buf, pos)
        pos += 4
        kv[key] = value(t)
    return kv


def test_fixture_vocab_matches_hf(hf):
    kv = read_gguf_kv(VOCAB)
    assert kv["general.architecture"] == "qwen3next"
    assert kv["tokenizer.ggml.model"] == "gpt2" and kv["tokenizer.ggml.pre"] == "qwen2"
    texts = kv["tokenizer.ggml.tokens"]
    assert len(texts) == 151936
    vocab = hf.get_vocab(with_added_tokens=True)
    assert len(vocab) == 151669
    for text, i in vocab.items():
        assert texts[i] == text
    for i in range(151669, 151936):
        assert texts[i] == f"[PAD{i}]"
    ty = kv["tokenizer.ggml.token_type"]
    assert all(t == 1 for t in ty[:151643])
    assert ty[151643:151657] == [3] * 14  # <|endoftext|> .. <|video_pad|>: special
    assert ty[151657:151659] == [4, 4]  # <tool_call> </tool_call>
    assert ty[151659:151665] == [3] * 6  # <|fim_*|>, <|repo_name|>, <|file_sep|>: shaped <|...|>
    assert ty[151665:151669] == [4] * 4  # <tool_response> </tool_response> <think> </think>
    assert all(t == 5 for t in ty[151669:])
    assert kv["tokenizer.ggml.eos_token_id"] == 151645
    assert kv["tokenizer.ggml.padding_token_id"] == 151643 and kv["tokenizer.ggml.bos_token_id"] == 151643
    assert kv["tokenizer.ggml.add_bos_token"] is False
    with open(HF_JSON, encoding="utf-8") as f:
        merges = json.load(f)["model"]["merges"]
    assert kv["tokenizer.ggml.merges"] == [m if isinstance(m, str) else " ".join(m) for m in merges]
    assert kv["tokenizer.chat_template"].startswith("{%")


def run_cli(*args, input=None):
    return subprocess.run([REDLITE, "tokenize", *args], capture_output=True, input=input, timeout=120)


def test_cli_json_and_text():
    r = run_cli("-m", VOCAB, "--json", "--text", "Hello world<|im_end|>")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j == {"n_tokens": 3, "ids": [9707, 1879, 151645], "tokens": ["Hello", "\u0120world", "<|im_end|>"]}
    r = run_cli("-m", VOCAB, "--json", "--no-special", "--text", "<|im_end|>")
    assert 151645 not in json.loads(r.stdout)["ids"]
    r = run_cli("-m", VOCAB, "--text", "a\nb")
    assert r.returncode == 0
    lines = r.stdout.decode().splitlines()
    assert lines[-1] == "3 tokens" and lines[1].split("\t") == ["   198", "'\\n'"]


def test_cli_file_invalid_utf8(tmp_path):
    p = tmp_path / "bad.bin"
    p.write_bytes(b"ok \xff\xfe caf\xc3 \xe2\x82 \xed\xa0\x80 end")
    r = run_cli("-m", VOCAB, "--json", "--file", str(p))
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    # the byte-level texts of the tokens spell the input bytes exactly
    assert j["n_tokens"] > 0


def test_cli_errors():
    r = run_cli("--help")
    assert r.returncode == 0 and b"usage: redlite tokenize" in r.stdout
    r = run_cli("--text", "x")
    assert r.returncode == 2 and len(r.stderr.decode().strip().splitlines()) == 1
    r = run_cli("-m", VOCAB)
    assert r.returncode == 2
    r = run_cli("-m", VOCAB, "--text", "x", "--bogus")
    assert r.returncode == 2
    r = run_cli("-m", "/nonexistent/model.gguf", "--text", "x")
    assert r.returncode == 1 and r.stderr.decode().startswith("redlite tokenize: ")
    assert len(r.stderr.decode().strip().splitlines()) == 1
