"""Tokenizer oracle test: Red Lite's ids must be bit-identical to HF `tokenizers` loading Qwen's
tokenizer.json, and decode(encode(s)) must give s back (NFC-normalised outside added tokens), on
the committed corpus (tests/fixtures/tokenizer_corpus.jsonl) and on seeded random and
normalisation strings.

The oracle is committed: tests/fixtures/tokenizer_oracle.json.gz holds HF's ids for every string
(with and without added tokens for the corpus), the expected round trips, and digests of HF's
vocabulary and merges. It was generated once by `tools/make_tokenizer_corpus.py --oracle` from the
Qwen3 tokenizer.json (11 MB, not committed) and is re-checked against HF by `--check`, so these
tests need nothing outside the repository.

Red Lite runs once per batch: `redlite tokenize -m tests/fixtures/qwen3-vocab.gguf --jsonl F`.
Set RL_BUILD to test another build directory (default: build).
"""
import gzip
import hashlib
import json
import os
import subprocess
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, os.environ.get("RL_BUILD", "build"))
REDLITE = os.path.join(BUILD, "redlite")
VOCAB = os.path.join(ROOT, "tests", "fixtures", "qwen3-vocab.gguf")
CORPUS = os.path.join(ROOT, "tests", "fixtures", "tokenizer_corpus.jsonl")
ORACLE = os.path.join(ROOT, "tests", "fixtures", "tokenizer_oracle.json.gz")


@pytest.fixture(scope="module")
def oracle():
    with gzip.open(ORACLE, "rt", encoding="utf-8") as f:
        return json.load(f)


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


def compare(texts, cats, ours, theirs, roundtrip):
    """ours: Red Lite's records; theirs: HF's ids; roundtrip: {index: expected} where the expected
    round trip differs from the text."""
    assert len(theirs) == len(texts) and len(texts) > 0
    bad = []
    for i, (text, cat, o, ids) in enumerate(zip(texts, cats, ours, theirs)):
        if o["ids"] != ids:
            bad.append(f"[{cat}] {text[:80]!r}: ids differ\n   ours {o['ids'][:24]}\n   hf   {ids[:24]}")
        elif o["decoded"] != roundtrip.get(str(i), text):
            bad.append(f"[{cat}] {text[:80]!r}: round trip gives {o['decoded'][:80]!r}")
    assert not bad, f"{len(bad)} of {len(texts)} strings differ:\n" + "\n".join(bad[:12])


def test_corpus_shape(corpus):
    assert len(corpus) >= 1000
    cats = {c["cat"] for c in corpus}
    langs = {c.split("-", 1)[1] for c in cats if c.startswith("code-") and c != "code-synth"}
    assert len(langs) >= 10, langs
    for must in ("special", "nfc", "space", "contractions", "emoji", "marks", "digits", "long"):
        assert must in cats


def test_oracle_is_of_this_corpus(oracle):
    """The committed ids belong to the committed corpus (regenerate both with the tool)."""
    with open(CORPUS, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == oracle["sets"]["corpus"]["corpus_sha256"], \
            "tokenizer_corpus.jsonl changed: run tools/make_tokenizer_corpus.py --oracle"
    for name, n in (("random", 3000), ("nfc", 4000)):
        assert len(oracle["sets"][name]["texts"]) == len(oracle["sets"][name]["ids"]) == n
    # the round trips that differ are a real part of the check (NFC cases, not an empty table)
    assert len(oracle["sets"]["nfc"]["roundtrip"]) > 100 and len(oracle["sets"]["corpus"]["roundtrip"]) > 0


def test_corpus_matches_hf(oracle, corpus):
    texts = [c["text"] for c in corpus]
    o = oracle["sets"]["corpus"]
    compare(texts, [c["cat"] for c in corpus], redlite_batch(texts), o["ids"], o["roundtrip"])


def test_corpus_no_special_matches_hf(oracle, corpus):
    texts = [c["text"] for c in corpus]
    o = oracle["sets"]["corpus"]
    compare(texts, [c["cat"] for c in corpus], redlite_batch(texts, "--no-special"), o["ids_plain"],
            o["roundtrip_plain"])


def test_random_strings_match_hf(oracle):
    o = oracle["sets"]["random"]
    compare(o["texts"], ["random"] * len(o["texts"]), redlite_batch(o["texts"]), o["ids"], o["roundtrip"])


def test_normalization_strings_match_hf(oracle):
    o = oracle["sets"]["nfc"]
    compare(o["texts"], ["nfc"] * len(o["texts"]), redlite_batch(o["texts"]), o["ids"], o["roundtrip"])


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


def sha256_json(x):
    """The digest tools/make_tokenizer_corpus.py records for HF's vocabulary and merges."""
    return hashlib.sha256(json.dumps(x, ensure_ascii=False, separators=(",", ":")).encode("utf-8")).hexdigest()


def test_fixture_vocab_matches_hf(oracle):
    kv = read_gguf_kv(VOCAB)
    assert kv["general.architecture"] == "qwen3next"
    assert kv["tokenizer.ggml.model"] == "gpt2" and kv["tokenizer.ggml.pre"] == "qwen2"
    texts = kv["tokenizer.ggml.tokens"]
    assert len(texts) == 151936
    n = oracle["n_vocab"]
    assert n == 151669
    # every HF token text at its id (digest of HF's id-ordered list), then llama.cpp's padding
    assert sha256_json(texts[:n]) == oracle["vocab_sha256"], "token texts differ from HF's vocabulary"
    for i in range(n, 151936):
        assert texts[i] == f"[PAD{i}]"
    assert set(oracle["added_tokens"]) == set(texts[151643:n])
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
    assert sha256_json(kv["tokenizer.ggml.merges"]) == oracle["merges_sha256"], "merges differ from HF's"
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
    # the byte-level texts of the tokens spell the input bytes exactly (GPT-2 byte alphabet:
    # printable bytes are themselves, the others U+0100 + their rank among the unprintable)
    keep = [b for b in range(256) if 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or b >= 0xAE]
    char_to_byte = {chr(b): b for b in keep}
    char_to_byte.update({chr(0x100 + k): b for k, b in enumerate(b for b in range(256) if b not in keep)})
    assert j["n_tokens"] == len(j["tokens"]) == len(j["ids"]) > 0
    assert bytes(char_to_byte[c] for t in j["tokens"] for c in t) == p.read_bytes()


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
