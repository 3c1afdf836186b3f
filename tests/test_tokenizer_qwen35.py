"""The `qwen35` pre-tokenizer (Qwen3.5 / Qwen3.6 GGUFs: `tokenizer.ggml.pre = "qwen35"`) against HF
`tokenizers`.

Qwen3.5's split regex is Qwen2's with combining marks joined to the letter runs (llama.cpp's
llama-vocab.cpp, LLAMA_VOCAB_PRE_TYPE_QWEN35, quoting the tokenizer.json pattern):

    (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+

The real 248,320-token vocabulary is not available offline, so the oracle is synthetic: the committed
Qwen3 vocabulary (tests/fixtures/qwen3-vocab.gguf) with its `pre` key set to `qwen35`, and an HF
tokenizer built from the same vocabulary and merges with the qwen35 regex (NFC normaliser, Split
isolated + ByteLevel without regex, the added tokens unnormalised: the layout of Qwen's
tokenizer.json). The construction is first checked with the qwen2 regex against the committed Qwen3
oracle ids, so it is Qwen's tokenizer.json; with the qwen35 regex both sides are compared on the
tokenizer corpus and on strings with combining marks, some of which must split differently from
qwen2 (the test would notice a tokenizer that ignored the key).
"""
import json
import os
import random
import subprocess
import sys
import unicodedata

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_tokenizer import CORPUS, ORACLE, REDLITE, VOCAB, read_gguf_kv  # noqa: E402

tokenizers = pytest.importorskip("tokenizers")

QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
            r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN35_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|"
             r"\s*[\r\n]+|\s+(?!\S)|\s+")


def kv_slices(buf):
    """(key, value bytes incl. its type) of every metadata entry, and the offset after them."""
    import struct

    pos, out = 24, []
    (n_kv,) = struct.unpack_from("<Q", buf, 16)
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def skip(t, pos):
        if t == 8:
            return pos + 8 + struct.unpack_from("<Q", buf, pos)[0]
        if t == 9:
            et, n = struct.unpack_from("<IQ", buf, pos)
            pos += 12
            if et in sizes:
                return pos + sizes[et] * n
            for _ in range(n):
                pos = skip(et, pos)
            return pos
        return pos + sizes[t]

    for _ in range(n_kv):
        end = skip(8, pos)
        key = buf[pos + 8:end].decode()
        vend = skip(struct.unpack_from("<I", buf, end)[0], end + 4)
        out.append((key, buf[end:vend]))
        pos = vend
    return out, pos


def str_bytes(s):
    b = s.encode()
    return len(b).to_bytes(8, "little") + b


def arr_bytes(et, items):
    import struct

    head = struct.pack("<IIQ", 9, et, len(items))
    if et == 8:
        return head + b"".join(str_bytes(x) for x in items)
    return head + struct.pack("<%di" % len(items), *items)


def write_gguf(path, kvs):
    import struct

    with open(path, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs)))
        for key, value in kvs:
            f.write(str_bytes(key) + value)


def pre_value(pre):
    b = pre.encode()
    return len(b).to_bytes(8, "little") + b


def write_vocab(path, pre):
    """The Qwen3 vocab fixture with tokenizer.ggml.pre = pre (the string value patched in place:
    the file has no tensors, so nothing after the metadata moves)."""
    with open(VOCAB, "rb") as f:
        buf = f.read()
    key = b"tokenizer.ggml.pre" + (8).to_bytes(4, "little")
    old = key + pre_value("qwen2")
    assert buf.count(old) == 1
    with open(path, "wb") as f:
        f.write(buf.replace(old, key + pre_value(pre)))


@pytest.fixture(scope="module")
def vocab():
    kv = read_gguf_kv(VOCAB)
    return kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.token_type"], kv["tokenizer.ggml.merges"]


def hf_tokenizer(vocab, regex):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    texts, types, merges = vocab
    # every used id is in the model's vocabulary (the added tokens too, so that they keep their ids;
    # BPE never produces them: no merge leads to them)
    bpe = models.BPE(vocab={t: i for i, t in enumerate(texts) if types[i] != 5},
                     merges=[tuple(m.split(" ", 1)) for m in merges], ignore_merges=False)
    tok = Tokenizer(bpe)
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    added = [i for i in range(len(texts)) if types[i] in (3, 4)]
    tok.add_special_tokens([AddedToken(texts[i], normalized=False, special=True) for i in added])
    assert all(tok.token_to_id(texts[i]) == i for i in added)
    return tok


def extend_vocab(vocab, strings):
    """The vocabulary plus merges that join, into one token, the qwen35 pre-tokens of `strings`
    that qwen2 splits (a letter or other character and combining marks): appended last (the lowest
    priority), their tokens in the unused [PAD] ids. With them the ids depend on where the
    pre-tokenizer cuts, so a qwen2 split of qwen35 text shows in the ids."""
    from tokenizers import Regex, pre_tokenizers

    texts, types, merges = list(vocab[0]), list(vocab[1]), list(vocab[2])
    base = hf_tokenizer(vocab, QWEN2_RE)
    split35 = pre_tokenizers.Split(Regex(QWEN35_RE), behavior="isolated", invert=False)
    split2 = pre_tokenizers.Split(Regex(QWEN2_RE), behavior="isolated", invert=False)
    bl = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    free = [i for i, t in enumerate(types) if t == 5]
    known = set(texts)
    for s in sorted(strings, key=len):  # short ones first: more strings covered by the free ids
        s = unicodedata.normalize("NFC", s)
        for piece, _ in split35.pre_tokenize_str(s):
            if len(split2.pre_tokenize_str(piece)) < 2:
                continue
            syms = [t.value for t in base.model.tokenize(bl.pre_tokenize_str(piece)[0][0])]
            cur = syms[0]
            for t in syms[1:]:
                if cur + t not in known:
                    if not free:
                        return texts, types, merges
                    i = free.pop(0)
                    texts[i], types[i] = cur + t, 1
                    known.add(cur + t)
                    merges.append(cur + " " + t)
                cur += t
    return texts, types, merges


def write_vocab_ext(path, vocab, pre):
    """The Qwen3 vocab fixture with the given vocabulary and pre-tokenizer."""
    with open(VOCAB, "rb") as f:
        buf = f.read()
    kvs, _ = kv_slices(buf)
    texts, types, merges = vocab
    new = {"tokenizer.ggml.pre": (8).to_bytes(4, "little") + str_bytes(pre),
           "tokenizer.ggml.tokens": arr_bytes(8, texts), "tokenizer.ggml.token_type": arr_bytes(5, types),
           "tokenizer.ggml.merges": arr_bytes(8, merges)}
    write_gguf(path, [(k, new.get(k, v)) for k, v in kvs])


def redlite_ids(vocab_path, texts, tmp_path):
    inp = tmp_path / "texts.jsonl"
    inp.write_text("".join(json.dumps(t, ensure_ascii=True) + "\n" for t in texts), encoding="ascii")
    r = subprocess.run([REDLITE, "tokenize", "-m", vocab_path, "--jsonl", str(inp)], capture_output=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    out = [json.loads(line)["ids"] for line in r.stdout.decode().split("\n")[:-1]]
    assert len(out) == len(texts)
    return out


def mark_strings():
    """Strings with combining marks (Mn, Mc, Me) in every position the two regexes treat
    differently: after letters, after a space, punctuation, a digit, a newline, at the start,
    in runs, before punctuation; plus real text of scripts written with marks."""
    marks = [chr(c) for c in range(0x300, 0x30000)
             if unicodedata.category(chr(c)) in ("Mn", "Mc", "Me")]
    rng = random.Random(35)
    out = [
        "नमस्ते दुनिया, यह एक परीक्षण है।", "স্বাগতম বাংলা", "தமிழ் மொழி", "สวัสดีครับ ยินดีต้อนรับ",
        "مَرْحَبًا بِكُمْ", "שָׁלוֹם עֲלֵיכֶם", "Tiếng Việt có dấu", "Zalgo: Z̴̡̛a̷̢͝l̸̨̛g̵̡͠o̶̢̧",
        "keycaps 1️⃣ #️⃣ *️⃣ and ©️ ™️", "enclosed a⃝ b⃞ 7⃣", "e\u0301 cafe\u0301 !\u0301x",
        "\u0301start", " \u0301\u0302 spaced", "x\n\u0300y", "9\u0301", "'s\u0301 it's\u0308",
        "ക്ഷ് ന്റെ", "ཀྲུང་གོ", "한국어 ᄒᆞᆫ글", "ñ vs n\u0303 vs N\u0303!",
    ]
    ctx = ["a{}", " {}b", "!{}x", "1{}2", "\n{}", "{}{}a", "x {}!", "{}", "ab{}cd{}", "({}) ", "\t{}\u00a0"]
    # marks of Unicode 16.0 (after utf8proc's 15.0 tables; the oracle's regex engine has them)
    for cp in (0x897, 0x10D69, 0x10EFC, 0x113B8, 0x113C2, 0x113D2, 0x113E2, 0x11F5A, 0x1611E, 0x1612F, 0x1E5EF):
        out += ["a" + chr(cp), "!" + chr(cp) + "x", " " + chr(cp) + chr(cp) + "b"]
    for m in marks:
        out.append(rng.choice(ctx).format(m, m))
    for _ in range(500):
        out.append("".join(rng.choice(marks + list("ab 1!\n'")) for _ in range(rng.randint(1, 12))))
    return out


def corpus_texts():
    with open(CORPUS, encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f]


def test_hf_construction_is_qwens_tokenizer(vocab):
    """With the qwen2 regex the constructed HF tokenizer gives the committed Qwen3 oracle ids."""
    import gzip

    with gzip.open(ORACLE, "rt", encoding="utf-8") as f:
        want = json.load(f)["sets"]["corpus"]["ids"]
    tok = hf_tokenizer(vocab, QWEN2_RE)
    got = [e.ids for e in tok.encode_batch(corpus_texts(), add_special_tokens=False)]
    assert got == want


def test_qwen35_matches_hf(vocab, tmp_path):
    marks = mark_strings()
    ext = extend_vocab(vocab, marks)
    assert sum(t == 5 for t in ext[1]) < 50, "too few joining merges were added"
    texts = corpus_texts() + marks
    hf35 = [e.ids for e in hf_tokenizer(ext, QWEN35_RE).encode_batch(texts, add_special_tokens=False)]
    hf2 = [e.ids for e in hf_tokenizer(ext, QWEN2_RE).encode_batch(texts, add_special_tokens=False)]
    # the two pre-tokenizers give different ids on many of the mark strings
    n_diff = sum(a != b for a, b in zip(hf35, hf2))
    assert n_diff > 150, n_diff
    for pre, want in (("qwen35", hf35), ("qwen2", hf2)):
        path = str(tmp_path / f"{pre}-vocab.gguf")
        write_vocab_ext(path, ext, pre)
        ours = redlite_ids(path, texts, tmp_path)
        bad = [f"{t[:60]!r}\n   ours {o[:20]}\n   hf   {h[:20]}" for t, o, h in zip(texts, ours, want) if o != h]
        assert not bad, f"{pre}: {len(bad)} of {len(texts)} strings differ:\n" + "\n".join(bad[:10])


def test_qwen35_vocab_loads_and_other_pre_refused(tmp_path):
    path = str(tmp_path / "qwen35-vocab.gguf")
    write_vocab(path, "qwen35")
    r = subprocess.run([REDLITE, "tokenize", "-m", path, "--json", "--text", "न\u092e\u0938\u094d"],
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    bad = str(tmp_path / "llama3-vocab.gguf")
    write_vocab(bad, "llama3")
    r = subprocess.run([REDLITE, "tokenize", "-m", bad, "--json", "--text", "x"], capture_output=True, timeout=60)
    assert r.returncode != 0
    err = r.stderr.decode()
    assert "pre-tokenizer 'llama3' is not supported" in err and "qwen35" in err, err


# ---- llama.cpp's own test vectors --------------------------------------------------------------

LLAMA_INP = os.path.join(os.path.dirname(VOCAB), "llama-vocab-qwen35.inp")
LLAMA_OUT = os.path.join(os.path.dirname(VOCAB), "llama-vocab-qwen35.out")
LLAMA_SEP = "\n__ggml_vocab_test__\n"


def llama_vectors():
    """llama.cpp's test-tokenizer-0 format: the inputs joined by LLAMA_SEP (each one followed by it),
    one output line per input with the ids separated by spaces (an empty line for no tokens)."""
    with open(LLAMA_INP, "rb") as f:
        raw = f.read().decode("utf-8")
    assert raw.endswith(LLAMA_SEP)
    texts = raw[: -len(LLAMA_SEP)].split(LLAMA_SEP)
    with open(LLAMA_OUT, encoding="ascii") as f:
        ids = [[int(x) for x in line.split()] for line in f.read().split("\n")[:-1]]
    assert len(texts) == len(ids) == 50
    return texts, ids


def test_llama_cpp_vectors(vocab, tmp_path):
    """llama.cpp's test vectors of the qwen35 pre-tokenizer (models/ggml-vocab-qwen35.gguf.inp/.out of
    the llama.cpp tree in the llama-cpp-python 0.3.36 sdist) on the committed vocabulary with
    pre = qwen35. llama.cpp's vocab file for them is its Qwen2 vocabulary with pre = qwen35: its
    151,643 BPE tokens and 151,387 merges are those of tests/fixtures/qwen3-vocab.gguf (checked when
    the vectors were added; the files differ only in the added tokens above id 151643, which no input
    contains), so the ids are comparable as they are.

    llama.cpp applies no Unicode normalisation; Qwen's tokenizer.json (and Red Lite, following HF)
    applies NFC first. On the inputs NFC leaves alone the ids must be llama.cpp's exactly; on the three
    that NFC changes (a letter + U+0300/U+0301 spelt decomposed) they must be HF's (the qwen35 regex
    tokenizer with NFC, see hf_tokenizer), and the same HF tokenizer without its normaliser must give
    llama.cpp's ids there: the only difference is the normalisation."""
    from tokenizers import normalizers

    texts, want = llama_vectors()
    path = str(tmp_path / "qwen35-vocab.gguf")
    write_vocab(path, "qwen35")
    ours = redlite_ids(path, texts, tmp_path)
    hf = hf_tokenizer(vocab, QWEN35_RE)
    raw_hf = hf_tokenizer(vocab, QWEN35_RE)
    raw_hf.normalizer = normalizers.Sequence([])
    n_nfc = 0
    for t, o, w in zip(texts, ours, want):
        if unicodedata.normalize("NFC", t) == t:
            assert o == w, f"{t!r}: ours {o}, llama.cpp {w}"
        else:
            n_nfc += 1
            assert raw_hf.encode(t, add_special_tokens=False).ids == w, t
            assert o == hf.encode(t, add_special_tokens=False).ids != w, f"{t!r}: ours {o}, llama.cpp {w}"
    assert n_nfc == 3
