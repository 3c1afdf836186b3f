"""Source rules for the CUDA kernels that no compiler flag enforces.

nvcc 13.0 miscompiles a discarded `if constexpr` branch (or `else` of one) that is an unbraced loop
with a braced body: the `#pragma unroll` loop that FOLLOWS the branch is discarded with it, whether or
not the branch's own loop carries a #pragma (a runtime `if` of the same shape compiles right). k_mmq_mma's
IQ instantiations lost the loop that fills their MMA B operands that way (their PTX had undefined B
registers; 2026-12-02, bench/results/2026-12-02-cuda-iq-h200.md), while the K-quants, whose condition was
true, were right. REPRO below is a minimal case (X = 0 compiles to a kernel that stores 0 without
reading `in`; with braces it reads it). The rules: a branch of an `if` / `if constexpr` / `else` that
starts with a `#pragma` is braced, and so is an `if constexpr` branch that is a loop."""
import glob
import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

REPRO = r"""
template <int X> __global__ void k(int *o, const int *in, const int *sc) {
    int acc[2] = {0, 0};
    for (int ib = 0; ib < in[100]; ib++) {
        int bq[2][16];
#pragma unroll
        for (int n = 0; n < 2; n++)
#pragma unroll
            for (int v = 0; v < 16; v++) bq[n][v] = in[ib * 32 + n * 16 + v];
#pragma unroll
        for (int s = 0; s < 8; s++) {
            int kw[2] = {0, 0}, bs[2][2];
            if constexpr (X == 1)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    kw[h] = sc[h * 8 + s];
                }
#pragma unroll
            for (int n = 0; n < 2; n++) bs[n][0] = bq[n][2 * s], bs[n][1] = bq[n][2 * s + 1];
#pragma unroll
            for (int n = 0; n < 2; n++) acc[n] += bs[n][0] * bs[n][1] + kw[0];
        }
    }
    o[0] = acc[0];
    o[1] = acc[1];
}
template __global__ void k<0>(int *, const int *, const int *);
"""

# (the condition holds no "{": a braced branch with a comment that ends in ")" is not a match)
_IF = re.compile(r"^\s*(?:\}\s*)?(?:else\s+)?if\s*(?:constexpr\s*)?\([^{]*\)\s*(?://.*)?$|^\s*(?:\}\s*)?else\s*(?://.*)?$")
_IFC = re.compile(r"^\s*(?:\}\s*)?(?:else\s+)?if\s+constexpr\s*\([^{]*\)\s*(?://.*)?$")
_IFC_LOOP = re.compile(r"\bif\s+constexpr\s*\([^{;]*\)\s*(?:for|while)\s*\(")
_LOOP = re.compile(r"^\s*(?:for|while|do)\b")


def unbraced_pragma_sites(text):
    """Line numbers (1-based) of unbraced branches the rules refuse: an `if (...)` / `if constexpr (...)` /
    `else` line whose next line is a #pragma, an `if constexpr (...)` line whose next line is a loop, and
    `if constexpr (...) for (...)` on one line."""
    lines = text.splitlines()
    out = []
    for i, ln in enumerate(lines):
        nxt = lines[i + 1].lstrip() if i + 1 < len(lines) else ""
        if (_IF.match(ln) and nxt.startswith("#pragma")) or (_IFC.match(ln) and _LOOP.match(nxt)) or _IFC_LOOP.search(ln):
            out.append(i + 1)
    return out


def test_detector_flags_the_miscompiled_shapes():
    assert unbraced_pragma_sites(REPRO) == [13]
    braced = REPRO.replace("if constexpr (X == 1)\n", "if constexpr (X == 1) {\n", 1)
    assert unbraced_pragma_sites(braced) == []
    no_pragma = REPRO.replace("if constexpr (X == 1)\n#pragma unroll\n", "if constexpr (X == 1)\n", 1)
    assert unbraced_pragma_sites(no_pragma) == [13]  # miscompiled too (nvcc 13.0)
    assert unbraced_pragma_sites("    if constexpr (A) for (int i = 0; i < 2; i++) { x(); }\n") == [1]
    assert unbraced_pragma_sites("    if (a)\n        for (int i = 0; i < n; i++) x();\n") == []  # runtime if: fine
    assert unbraced_pragma_sites("    if (n > 0) { // (a comment)\n#pragma unroll 2\n        for (;;) {}\n    }\n") == []
    assert unbraced_pragma_sites("    if (n > 0) // (a comment)\n#pragma unroll 2\n        for (;;) {}\n") == [1]


def test_cuda_sources_brace_pragma_branches():
    bad = []
    for path in sorted(glob.glob(os.path.join(ROOT, "src", "cuda", "*.cu*"))):
        with open(path) as f:
            for n in unbraced_pragma_sites(f.read()):
                bad.append(f"{os.path.relpath(path, ROOT)}:{n}")
    assert not bad, "brace the branch (nvcc drops the next #pragma loop; see this file's docstring): " + ", ".join(bad)


def test_braced_form_compiles_right(tmp_path):
    """Where nvcc is present: the braced form of REPRO keeps the loads of `in` (the fix this rule relies
    on); a braced form that lost them would be a different, new problem."""
    if not shutil.which("nvcc"):
        pytest.skip("nvcc not on PATH")
    def loads(src):
        cu = tmp_path / "r.cu"
        cu.write_text(src)
        ptx = tmp_path / "r.ptx"
        r = subprocess.run(["nvcc", "-O3", "-std=c++17", "-arch=sm_90", "--ptx", str(cu), "-o", str(ptx)],
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        return len(re.findall(r"ld\.global", ptx.read_text()))
    braced = loads(REPRO.replace("if constexpr (X == 1)\n", "if constexpr (X == 1) {\n", 1)
                   .replace("                    kw[h] = sc[h * 8 + s];\n                }\n",
                            "                    kw[h] = sc[h * 8 + s];\n                }}\n", 1))
    assert braced > 1, "the braced form lost its loads too"


# ---- programmatic dependent launch (common.cuh): every kernel waits in pdl_enter -----------------
#
# With PDL (the default; RL_CUDA_PDL=0 turns it off) a kernel may start before the one before it in the
# stream has finished; a kernel that never calls pdl_enter would read stale inputs (or overwrite what its
# predecessor still reads) on some runs only. So: every launch goes through cu_go (no <<< >>> left), and every __global__
# function calls pdl_enter in its body or in the *_body function it calls first.

def _strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def _bodies(text):
    """(name, body text) of each __global__ function in text (comments removed)."""
    text = _strip_comments(text)
    out = []
    for m in re.finditer(r"__global__", text):
        b = text.index("{", m.end())
        head = text[m.end():b]
        name = re.search(r"void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)", head).group(1)
        depth, j = 0, b
        while True:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                break
            j += 1
        out.append((name, text[b:j + 1]))
    return out


def kernels_without_pdl_enter(text):
    """Names of the __global__ functions of text whose body neither calls pdl_enter nor calls a
    function named *_body that (defined in text) does."""
    clean = _strip_comments(text)
    bad = []
    for name, body in _bodies(text):
        if "pdl_enter(" in body:
            continue
        ok = False
        for callee in re.findall(r"\b(\w+_body)\s*<", body) + re.findall(r"\b(\w+_body)\s*\(", body):
            d = re.search(r"\b" + callee + r"\s*\([^;{]*\)\s*\{", clean)
            if d:
                i, depth = d.end() - 1, 0
                j = i
                while True:
                    depth += {"{": 1, "}": -1}.get(clean[j], 0)
                    if depth == 0:
                        break
                    j += 1
                ok = ok or "pdl_enter(" in clean[i:j]
        if not ok:
            bad.append(name)
    return bad


def test_pdl_detector():
    assert kernels_without_pdl_enter("__global__ void k_a(int *o) {\n    pdl_enter();\n    o[0] = 1;\n}\n") == []
    assert kernels_without_pdl_enter("__global__ void k_a(int *o) {\n    // pdl_enter();\n    o[0] = 1;\n}\n") == ["k_a"]
    body = ("template <int T> __device__ void k_b_body(int *o) {\n    if (T) pdl_enter();\n    o[0] = T;\n}\n"
            "template <int T> __global__ void k_b(int *o) {\n    k_b_body<T>(o);\n}\n")
    assert kernels_without_pdl_enter(body) == []
    assert kernels_without_pdl_enter(body.replace("if (T) pdl_enter();", "")) == ["k_b"]


def test_cuda_kernels_wait_for_their_inputs():
    bad, launches = [], []
    for path in sorted(glob.glob(os.path.join(ROOT, "src", "cuda", "*.cu*"))):
        with open(path) as f:
            text = f.read()
        rel = os.path.relpath(path, ROOT)
        bad += [f"{rel}: {k}" for k in kernels_without_pdl_enter(text)]
        if "<<<" in _strip_comments(text):
            launches.append(rel)
    assert not bad, "call pdl_enter before the kernel reads its inputs (common.cuh): " + ", ".join(bad)
    assert not launches, "launch through cu_go (common.cuh), not <<< >>>: " + ", ".join(launches)
