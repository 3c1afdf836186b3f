"""The user documentation is true to the repository: README.md and docs/ (user guides; docs/dev/ holds
the developer notes and is checked for links and paths too).

- every relative link ([text](path)) points at a file or folder of the repository, and its #anchor,
  when there is one, at a heading of that file;
- every path written in code spans or in the prose that names a repository folder (src/, docs/, tests/, tools/,
  bench/, scripts/, examples/, include/, models/) exists, as a file, a folder or a glob;
- no doc names a path of a developer's machine (/home, /work, /tmp/..., /root, /Users);
- user guides (README.md, docs/*.md) have no line over 400 characters (tables excepted: one row
  is one line in Markdown) — a paragraph a reader can follow.
"""
import glob
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
USER_DOCS = [REPO / "README.md"] + sorted((REPO / "docs").glob("*.md"))
ALL_DOCS = USER_DOCS + sorted((REPO / "docs" / "dev").glob("*.md")) + [REPO / "tools" / "README.md"]
ALL_DOCS = [p for p in ALL_DOCS if p.exists()]
IDS = [str(p.relative_to(REPO)) for p in ALL_DOCS]

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
SPAN = re.compile(r"`([^`\n]+)`")
TOP = ("src/", "docs/", "tests/", "tools/", "bench/", "scripts/", "examples/", "include/", "models/")
FOREIGN = re.compile(r"(?<![\w.~-])/(home|work|root|Users)/|(?<![\w.~-])/tmp/[\w.-]+/")


def slug(heading):
    """GitHub's anchor of a heading: lower case, punctuation dropped, blanks to '-'."""
    h = re.sub(r"[`*_]", "", heading.strip().lower())
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")


def anchors(path):
    text = path.read_text()
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", text, re.M)}


def prose(text):
    """The text outside fenced code blocks (commands in them are checked by their own tests)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


@pytest.mark.parametrize("doc", ALL_DOCS, ids=IDS)
def test_links_point_at_files(doc):
    bad = []
    for target in LINK.findall(doc.read_text()):
        if re.match(r"^[a-z]+:", target) or target.startswith("#") and not target[1:]:
            continue  # http:, https:, mailto:
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading with that anchor")
        elif REPO not in dest.parents and dest != REPO:
            bad.append(f"{target}: outside the repository")
    assert not bad, f"{doc.relative_to(REPO)}:\n" + "\n".join(bad)


BARE = re.compile(r"(?<![\w/.~$-])((?:src|docs|tests|tools|bench|scripts|examples|include|models)/[\w./*-]*[\w/*])")


def span_paths(text):
    """Repository paths a doc names: in code spans, and bare in its prose (outside fenced blocks)."""
    text = prose(text)
    for span in SPAN.findall(text):
        for word in span.split():
            word = word.strip("(),;:'\"")
            m = re.match(r"^([\w./-]+)\.\{(\w+(?:,\w+)+)\}$", word)  # src/x.{h,c}
            if m and word.startswith(TOP):
                yield from (f"{m.group(1)}.{e}" for e in m.group(2).split(","))
            elif word.startswith(TOP) and not any(c in word for c in "=$<>{}|"):
                yield word.rstrip(".")
    for m in BARE.finditer(SPAN.sub(" ", LINK.sub(" ", text))):
        if not text[m.end():m.end() + 2].startswith((".{", "{")):
            yield m.group(1).rstrip(".")


@pytest.mark.parametrize("doc", ALL_DOCS, ids=IDS)
def test_named_paths_exist(doc):
    bad = []
    for p in span_paths(doc.read_text()):
        p = p.split(":")[0].split("#")[0]  # file:line, file#anchor
        if p.startswith("models/") and p.endswith(".gguf") and p != "models/default.gguf" and \
                not (REPO / p).exists() and "redlite-coder-tiny" not in p:
            continue  # user-side model files a guide tells you to download
        if not (glob.glob(str(REPO / p)) or (REPO / p).exists()):
            bad.append(p)
    assert not bad, f"{doc.relative_to(REPO)} names paths that do not exist: {sorted(set(bad))}"


@pytest.mark.parametrize("doc", ALL_DOCS, ids=IDS)
def test_no_paths_outside_the_repository(doc):
    hits = [f"{i}: {l.strip()[:160]}" for i, l in enumerate(doc.read_text().splitlines(), 1) if FOREIGN.search(l)]
    assert not hits, f"{doc.relative_to(REPO)} names a developer machine's paths:\n" + "\n".join(hits)


@pytest.mark.parametrize("doc", USER_DOCS, ids=[str(p.relative_to(REPO)) for p in USER_DOCS])
def test_user_docs_have_readable_lines(doc):
    long = [(i, len(l)) for i, l in enumerate(doc.read_text().splitlines(), 1)
            if len(l) > 400 and not l.lstrip().startswith("|")]
    assert not long, f"{doc.relative_to(REPO)}: lines over 400 characters (line, length): {long}"


def test_the_checks_catch_what_they_claim(tmp_path):
    """The checks fail on the stumbles they exist for (a link to a missing file, a machine path)."""
    assert FOREIGN.search("see /home/alice/models/x.gguf") and FOREIGN.search("cd /work/main && make")
    assert not FOREIGN.search("POST /v1/chat/completions") and not FOREIGN.search("~/.cache/redlite")
    assert list(span_paths("run `tools/nothing_here.py --x`")) == ["tools/nothing_here.py"]
    assert list(span_paths("code: `src/run/spec.{h,c}`")) == ["src/run/spec.h", "src/run/spec.c"]
    assert slug("Two commands") == "two-commands" and slug("`redlite chat`: slash commands") == "redlite-chat-slash-commands"
