"""`make install` and the C library: what a packager and an embedding program see.

- `make install PREFIX=<tmp>` installs bin/redlite, lib/libredlite.so(.1) + libredlite.a,
  include/redlite.h, lib/pkgconfig/redlite.pc, the man page and the bash / zsh completions;
  DESTDIR stages the same tree under another root (the .pc keeps the PREFIX paths);
- examples/simple.c, compiled with `pkg-config --cflags --libs redlite` against the installed
  library (shared, then static), prints exactly what `redlite generate --raw --temp 0` prints;
- libredlite.so exports redlite_* only; its soname carries REDLITE_ABI_VERSION; the header's
  version equals the binary's;
- the man page and the completions list the options each command's --help lists;
- the Dockerfiles name files and commands that exist (built in CI only where a container tool is).
The install compiles the library once more with -fPIC (a minute or two on 2 cores): one module-scoped
install serves every test here.
"""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / "models" / "default.gguf"
PROMPT = "def quicksort(arr):"


def sh(*args, env=None, cwd=REPO, timeout=1200):
    r = subprocess.run(list(args), capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)
    assert r.returncode == 0, f"{args} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    if not shutil.which("pkg-config"):
        pytest.skip("pkg-config is not installed (scripts/install-deps.sh installs it)")
    p = tmp_path_factory.mktemp("prefix")
    sh("make", "-s", f"-j{os.cpu_count() or 2}", "install", f"PREFIX={p}")
    return p


def pc_env(prefix):
    env = dict(os.environ)
    env["PKG_CONFIG_PATH"] = str(prefix / "lib" / "pkgconfig")
    return env


def test_install_tree(prefix):
    for f in ("bin/redlite", "lib/libredlite.so", "lib/libredlite.so.1", "lib/libredlite.a", "include/redlite.h",
              "lib/pkgconfig/redlite.pc", "share/man/man1/redlite.1",
              "share/bash-completion/completions/redlite", "share/zsh/site-functions/_redlite"):
        assert (prefix / f).exists(), f
    assert os.readlink(prefix / "lib" / "libredlite.so") == "libredlite.so.1"
    r = sh(str(prefix / "bin" / "redlite"), "--help")
    assert "usage: redlite" in r.stdout
    pc = (prefix / "lib" / "pkgconfig" / "redlite.pc").read_text()
    assert f"prefix={prefix}\n" in pc and "Libs: -L${libdir} -lredlite" in pc


def test_destdir_stages_the_same_tree(tmp_path):
    stage = tmp_path / "stage"
    sh("make", "-s", f"-j{os.cpu_count() or 2}", "install", "PREFIX=/usr", f"DESTDIR={stage}")
    assert (stage / "usr" / "bin" / "redlite").exists() and (stage / "usr" / "lib" / "libredlite.so.1").exists()
    assert "prefix=/usr\n" in (stage / "usr" / "lib" / "pkgconfig" / "redlite.pc").read_text()
    sh("make", "-s", "uninstall", "PREFIX=/usr", f"DESTDIR={stage}")
    assert not (stage / "usr" / "bin" / "redlite").exists() and not (stage / "usr" / "include" / "redlite.h").exists()


def expected_text(prefix, n):
    r = sh(str(prefix / "bin" / "redlite"), "generate", "-m", str(MODEL), "--raw", "-p", PROMPT, "-n", str(n),
           "--temp", "0", "-t", "2", "--spec", "none")
    return r.stdout.rstrip("\n")


@pytest.mark.parametrize("link", ["shared", "static"])
def test_example_against_installed_library(prefix, tmp_path, link):
    env = pc_env(prefix)
    flags = sh("pkg-config", "--cflags", "--libs", *(["--static"] if link == "static" else []), "redlite",
               env=env).stdout.split()
    exe = tmp_path / "simple"
    cc = os.environ.get("CC", "cc")
    if link == "static":
        # the archive by path: -lredlite would pick the .so next to it
        flags = [f for f in flags if f != "-lredlite"]
        cmd = [cc, str(REPO / "examples" / "simple.c"), str(prefix / "lib" / "libredlite.a"), *flags, "-o", str(exe)]
    else:
        cmd = [cc, str(REPO / "examples" / "simple.c"), *flags, f"-Wl,-rpath,{prefix / 'lib'}", "-o", str(exe)]
    sh(*cmd, "-Wall", "-Wextra", "-Werror", env=env)
    r = sh(str(exe), str(MODEL), PROMPT, "24", env=env)
    assert r.stdout.strip() and r.stdout.rstrip("\n") == expected_text(prefix, 24), (r.stdout, r.stderr)
    assert "tokens in the context" in r.stderr
    if link == "shared":
        ldd = sh("ldd", str(exe)).stdout
        assert str(prefix / "lib" / "libredlite.so.1") in ldd, ldd
    # a bad model path: one line, exit 1
    bad = subprocess.run([str(exe), str(tmp_path / "none.gguf"), "x"], capture_output=True, text=True, env=env)
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "none.gguf" in bad.stderr, bad.stderr


def test_api_continues_and_respects_struct_sizes(prefix, tmp_path):
    """feed / generate / feed / generate continues one sequence (the pending last token is fed); a
    caller's shorter struct (an older header) leaves the newer fields at their defaults."""
    src = tmp_path / "t.c"
    src.write_text(r'''
#include <redlite.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
static char buf[8192]; static size_t len;
static int keep(void *ud, int32_t t, const char *s, size_t n) { (void)ud; (void)t; memcpy(buf + len, s, n); len += n; return 0; }
static int stop_at_3(void *ud, int32_t t, const char *s, size_t n) { (void)s; (void)n; (void)t; return ++*(int *)ud >= 3; }
int main(int argc, char **argv) {
    redlite_model *m = redlite_model_open(argv[1], NULL);
    if (!m) { printf("open: %s\n", redlite_last_error()); return 1; }
    redlite_session_params sp; redlite_session_params_init(&sp);
    sp.size = offsetof(redlite_session_params, n_batch); /* an "older" caller: n_ctx only */
    sp.n_ctx = 512; sp.kv = "not-a-format";            /* beyond its size: must be ignored */
    redlite_session *s = redlite_session_new(m, &sp);
    if (!s) { printf("session: %s\n", redlite_last_error()); return 1; }
    redlite_gen_params gp; redlite_gen_params_init(&gp); gp.n_predict = 6;
    if (redlite_feed_text(s, argv[2]) || redlite_generate(s, &gp, keep, NULL) != REDLITE_STOP_LENGTH) return 1;
    int n1 = redlite_session_n_past(s);
    if (redlite_generate(s, &gp, keep, NULL) != REDLITE_STOP_LENGTH) return 1; /* continues */
    printf("A[%.*s]\n", (int)len, buf);
    printf("n_past %d %d\n", n1, redlite_session_n_past(s));
    int calls = 0; gp.n_predict = 50;
    printf("cb-stop %d\n", redlite_generate(s, &gp, stop_at_3, &calls));
    redlite_session_reset(s);
    printf("after-reset %d gen=%d\n", redlite_session_n_past(s), redlite_generate(s, &gp, NULL, NULL));
    int32_t ids[64]; int n = redlite_tokenize(m, argv[2], strlen(argv[2]), 1, ids, 64);
    char *back = redlite_detokenize(m, ids, n);
    printf("roundtrip %d [%s] ctx_train %d vocab %d v %s abi %d\n", n, back, redlite_model_n_ctx_train(m),
           redlite_model_n_vocab(m), redlite_version(), redlite_abi_version());
    redlite_free(back);
    redlite_session_free(s); redlite_model_close(m);
    return 0;
}
''')
    env = pc_env(prefix)
    flags = sh("pkg-config", "--cflags", "--libs", "redlite", env=env).stdout.split()
    exe = tmp_path / "t"
    sh(os.environ.get("CC", "cc"), str(src), *flags, f"-Wl,-rpath,{prefix / 'lib'}", "-Wall", "-Werror", "-o", str(exe))
    r = sh(str(exe), str(MODEL), PROMPT)
    out = r.stdout
    got = re.search(r"^A\[(.*)\]$", out, re.M | re.S).group(1)
    assert got == expected_text(prefix, 12), out  # 6 + 6 tokens, greedy: one continuous completion
    n1, n2 = map(int, re.search(r"n_past (\d+) (\d+)", out).groups())
    assert n2 == n1 + 6, out
    assert "cb-stop 3" in out  # REDLITE_STOP_CALLBACK
    assert re.search(r"after-reset 0 gen=-1", out), out  # nothing fed: an error, not a crash
    m = re.search(r"roundtrip (\d+) \[(.*)\] ctx_train (\d+) vocab (\d+) v (\S+) abi (\d+)", out)
    assert m and m.group(2) == PROMPT and int(m.group(3)) > 0 and int(m.group(4)) > 0, out
    ver = re.search(r'#define RL_VERSION "(.*)"', (REPO / "src" / "base" / "common.h").read_text()).group(1)
    assert m.group(5) == ver and m.group(6) == "1", out  # header and library agree with the binary's version


def test_only_the_api_is_exported(prefix):
    syms = sh("nm", "-D", "--defined-only", str(prefix / "lib" / "libredlite.so.1")).stdout.split("\n")
    names = [l.split()[-1] for l in syms if len(l.split()) == 3 and l.split()[1] in "TDBRW"]
    names = [n.split("@")[0] for n in names]
    assert names and all(n.startswith("redlite_") for n in names), [n for n in names if not n.startswith("redlite_")]
    declared = set(re.findall(r"\b(redlite_\w+)\(", (REPO / "include" / "redlite.h").read_text()))
    assert declared - {"redlite_text_cb"} <= set(names), declared - set(names)
    so = sh("objdump", "-p", str(prefix / "lib" / "libredlite.so.1")).stdout
    assert re.search(r"SONAME\s+libredlite\.so\.1\b", so), so


def help_options(binary, cmd):
    text = subprocess.run([binary, cmd, "--help"], capture_output=True, text=True).stdout
    return set(re.findall(r"^  (?:-\w, )?(--[\w-]+)", text, re.M))


def test_man_page_and_completions_follow_the_help(prefix):
    binary = str(prefix / "bin" / "redlite")
    man = (prefix / "share" / "man" / "man1" / "redlite.1").read_text()
    bash = prefix / "share" / "bash-completion" / "completions" / "redlite"
    zsh = (prefix / "share" / "zsh" / "site-functions" / "_redlite").read_text()
    for cmd in ("generate", "chat", "serve", "bench", "info"):
        opts = help_options(binary, cmd)
        assert opts, cmd
        assert f'.SH "REDLITE {cmd.upper()}"' in man
        for o in opts:
            assert o.replace("-", "\\-") in man, (cmd, o)
            assert o in zsh, (cmd, o)
        # bash: complete "redlite CMD --" and get every option of the command
        r = sh("bash", "-c", f'source "{bash}"; COMP_WORDS=(redlite {cmd} --); COMP_CWORD=2; _redlite; '
                             'printf "%s\\n" "${COMPREPLY[@]}"')
        assert opts <= set(r.stdout.split()), (cmd, opts - set(r.stdout.split()))
    r = sh("bash", "-c", f'source "{bash}"; COMP_WORDS=(redlite ch); COMP_CWORD=1; _redlite; echo "${{COMPREPLY[@]}}"')
    assert r.stdout.split() == ["chat"]
    if shutil.which("groff"):
        r = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", str(prefix / "share/man/man1/redlite.1")],
                           capture_output=True, text=True)
        assert r.returncode == 0 and not r.stderr.strip(), r.stderr
    if shutil.which("zsh"):
        sh("zsh", "-n", str(prefix / "share" / "zsh" / "site-functions" / "_redlite"))


def dockerfile_refs(path):
    """(files COPY'd from the repository, make targets, redlite commands) of a Dockerfile."""
    text = (REPO / path).read_text()
    copies = [c for line in re.findall(r"^COPY\s+(.*)$", text, re.M) if "--from" not in line
              for c in line.split()[:-1]]
    return text, copies


@pytest.mark.parametrize("path", ["Dockerfile", "Dockerfile.cuda"])
def test_dockerfiles_reference_what_exists(path):
    text, copies = dockerfile_refs(path)
    assert re.search(r"^FROM debian:12|^FROM nvidia/cuda:\S+-ubuntu|^FROM nvidia/cuda:", text, re.M), text
    for c in copies:
        if c != ".":
            assert (REPO / c).exists(), f"{path} copies {c}, which is not in the repository"
    # the packages it installs are the ones scripts/install-deps.sh names for Debian
    deps = (REPO / "scripts" / "install-deps.sh").read_text()
    for pkg in re.findall(r"\b(libutf8proc-dev|libcjson-dev|libmicrohttpd-dev)\b", text):
        assert pkg in deps, pkg
    for target in re.findall(r"\bmake\b[^\n]*?\b(install|all|lib)\b", text):
        assert re.search(rf"^{target}:", (REPO / "Makefile").read_text(), re.M), target
    assert "ENTRYPOINT" in text and "redlite" in text
    docs = (REPO / "docs" / "INSTALL.md").read_text()
    assert f"docker build -f {path}" in docs or (path == "Dockerfile" and "docker build -t redlite ." in docs)
