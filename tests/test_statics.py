"""No hidden process state: every mutable static of src/ is on the allow-list below, with its reason.

A simple scan (no compiler): every `static` declaration at file or function scope in
src/**/*.{c,h,cu,cuh} that is data (not a function) and not const (for pointers: the pointer itself
const, `T *const p`) is a mutable static. State belongs to whoever uses it (an engine's runtime, a
device context, a session); what remains here must say why it may be process-wide. A new mutable
static fails this test until it is removed or listed with its reason; a listed one that is gone
fails too, so the list stays the truth.
"""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (file, name): reason. Names are the declared identifier (the first one of a line declaring several).
ALLOWED = {
    # once-initialised constants: written under pthread_once / call_once, read-only afterwards
    ("src/kern/kern.c", "tables"): "per-level dispatch tables as filled from CPUID, built once (pthread_once), read-only after",
    ("src/kern/kern.c", "has_simd"): "CPU fact, built once with the tables",
    ("src/kern/kern.c", "supported"): "CPU fact, built once with the tables",
    ("src/kern/kern.c", "amx_ok"): "CPU + OS fact, built once with the tables",
    ("src/kern/kern.c", "cpu_amd"): "CPU fact, built once with the tables",
    ("src/kern/kern.c", "default_cfg"): "the default configuration, built once with the tables, read-only after",
    ("src/kern/kern.c", "once"): "the pthread_once guard of the tables",
    ("src/kern/vec_avx512.c", "table"): "the AVX-512 vector table, built once (pthread_once), read-only after",
    ("src/kern/vec_avx512.c", "table_once"): "its pthread_once guard",
    ("src/gguf/quant_repack.c", "mag_xxs"): "repack lookup tables (mag_xxs, mag_xs, sign_bits, grid_iq1), built once (pthread_once)",
    ("src/gguf/quant_repack.c", "tables_once"): "their pthread_once guard",
    ("src/base/common.c", "g_err"): "the calling thread's last error (_Thread_local: per thread by design)",
    ("src/cli/cmd_chat.c", "g_interrupt"): "set by the SIGINT handler: a signal handler can reach only a global (lock-free atomic_int)",
    ("src/cli/main.c", "help_flag"): "argv-style writable copy of \"--help\" handed to a command's parser; never written",
    ("src/backend/backend_cuda_model.c", "g_models_lock"): "guards g_models",
    ("src/backend/backend_cuda_model.c", "g_models"): "device copies of a model shared by the engines of one process (refcounted, under g_models_lock)",
    ("src/cuda/quant.cu", "g_tabs"): "the quant lookup tables' device copies, uploaded once per device (constant data)",
    ("src/cuda/quant.cu", "g_tabs_ready"): "their per-device upload flag (under g_tabs_lock)",
    ("src/cuda/quant.cu", "g_tabs_lock"): "guards the per-device uploads of g_tabs",
    # pointers to string literals never reassigned (`*const` left to their owners: cli / serve edits)
    ("src/cli/cmd_chat.c", "CMD"): "the command's name, never written",
    ("src/cli/cmd_generate.c", "CMD"): "the command's name, never written",
    ("src/cli/cmd_info.c", "CMD"): "the command's name, never written",
    ("src/cli/cmd_perplexity.c", "CMD"): "the command's name, never written",
    ("src/cli/cmd_serve.c", "CMD"): "the command's name, never written",
    ("src/cli/cmd_tokenize.c", "CMD"): "the command's name, never written",
    ("src/cli/cmd_verify_check.c", "CMD"): "the command's name, never written",
    # known process state still to move (issue #44): listed so that nothing new joins them
    ("src/text/chat.c", "warned"): "TO MOVE: warn once about an unknown chat template (a race between two loads)",
    ("src/backend/backend_cuda.c", "buf"): "TO MOVE: the text of cuda_available's why (written at a probe)",
}

STATIC = re.compile(r"^\s*static\b(.*)$")
FUNC = re.compile(r"[A-Za-z_]\w*\s*\((?!\s*\*)")


def strip_comments(txt):
    txt = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), txt, flags=re.S)
    return re.sub(r"//[^\n]*", "", txt)


def mutable_statics(root):
    """(file, line, name, text) of every mutable static of src/."""
    out = []
    for dp, _, fs in os.walk(os.path.join(root, "src")):
        for f in sorted(fs):
            if not f.endswith((".c", ".h", ".cu", ".cuh")):
                continue
            path = os.path.join(dp, f)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            for n, line in enumerate(strip_comments(open(path, errors="replace").read()).split("\n"), 1):
                m = STATIC.match(line)
                if not m:
                    continue
                rest = m.group(1).strip()
                head = re.split(r"[=;{]", rest, maxsplit=1)[0]
                if FUNC.search(head):  # a function (a pointer to one is `(*name)`: data)
                    continue
                decl = head.split("[", 1)[0].strip()
                ids = re.findall(r"[A-Za-z_]\w*", decl)
                name = ids[-1] if ids else "?"
                toks = decl.replace("*", " * ").split()
                fp = re.search(r"\(\s*\*\s*(const\s+)?([A-Za-z_]\w*)", decl)  # a pointer to a function
                if fp:
                    name, const = fp.group(2), bool(fp.group(1))
                elif "*" in toks:  # const only if the pointer itself is: T *const p
                    last = len(toks) - 1 - toks[::-1].index("*")
                    const = "const" in toks[last + 1:]
                else:
                    const = any(t in toks for t in ("const", "constexpr", "__constant__"))
                if not const:
                    out.append((rel, n, name, line.strip()))
    return out


def test_scanner_finds_what_it_should(tmp_path):
    """The scan itself: mutable data found, functions and constants not."""
    src = tmp_path / "src" / "x"
    src.mkdir(parents=True)
    (src / "a.c").write_text(
        "static int counter;\n"
        "static const char *name = \"x\";\n"
        "static const char *const ok = \"y\";\n"
        "static const int table[4] = {1};\n"
        "static void (*hook)(int);\n"
        "static int f(int a) {\n"
        "    static double cache[8];\n"
        "    return a;\n"
        "}\n"
        "static inline int g(void) { return 0; }\n"
        "/* static int in_comment; */\n")
    got = sorted(e[2] for e in mutable_statics(str(tmp_path)))
    assert got == ["cache", "counter", "hook", "name"], got


def test_no_unjustified_mutable_statics():
    found = mutable_statics(ROOT)
    bad = [f"{f}:{n}: static `{name}` ({text})" for f, n, name, text in found if (f, name) not in ALLOWED]
    assert not bad, ("mutable statics without a reason (move the state to its owner, or add it to "
                     "tests/test_statics.py ALLOWED with why it may be process-wide):\n  " + "\n  ".join(bad))
    seen = {(f, name) for f, _, name, _ in found}
    gone = [f"{f}: {name}" for f, name in ALLOWED if (f, name) not in seen]
    assert not gone, "listed in ALLOWED but no longer in src/ (drop the entry):\n  " + "\n  ".join(gone)
