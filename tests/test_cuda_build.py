"""The CUDA build must never rot: where nvcc is on PATH (CI has no GPU), compile the whole tree
with CUDA=1 into build/cuda (-Werror applies to the .cu files too) and check that the binary
reports a missing device cleanly: `redlite dump --backend cuda` exits 1 with one line. The GPU C
tests (test_cuda_ops, test_cuda_engine, test_cuda_vram, test_cuda_verify, test_cuda_spec, test_cuda_rows, test_cuda_mgpu) run from that
build: on a GPU they must pass; without one they exit 77 saying "no CUDA device" and are reported as skips with that reason. A build that
fails, or a GPU test that fails or crashes, is a failure, never a skip. tests/run.sh runs this
file before tests/cuda/, whose fixture tests use the binary built here.

The whole tree is built for the Makefile's CUDA_TEST_ARCH (sm_90, what the GPU machine runs); every
other target of the default fat CUDA_ARCH (sm_80, sm_86, sm_89, sm_120, compute_120 PTX) is
compiled for the translation units that hold the architecture-dependent code: norm.cu (PDL's
griddepcontrol through common.cuh, which every kernel file includes), attn_tc.cu (f16 mma.sync,
ldmatrix, cp.async) and mm_q8_0.cu (the int8 mma.sync tiles of mmq.cuh and the matmul templates
every mm_<type>.cu instantiates). A whole fat build is about an hour on CI's 2 cores."""
import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = "build/cuda"


def cuda_make():
    """make for build/cuda, always with the same configuration (tests/run.sh's prebuild too): every
    make parses its stamps (Makefile: the flags of build/obj-cuda, the link of build/cuda), so another
    CUDA_ARCH or a CPU configuration here would rebuild or delete what the others built."""
    arch = subprocess.run(["make", "-s", "print-cuda-test-arch"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    return ["make", "-s", "CUDA=1", f"BUILD={BUILD}", "OBJ=build/obj-cuda", f"CUDA_ARCH={arch}"]


@pytest.fixture(scope="module")
def cuda_build():
    if not shutil.which("nvcc"):
        pytest.skip("nvcc not on PATH: the CUDA build is not checked here")
    # every core (nproc): the .cu files are independent and nvcc is the long pole (13-17 min serially).
    # The objects are shared with `make CUDA=1` (build/obj-cuda): same flags, compiled once; and
    # tests/run.sh builds these targets before pytest starts, so here make finds them up to date and a
    # test's duration is its own, not the build's.
    jobs = os.environ.get("RL_CUDA_JOBS") or str(os.cpu_count() or 2)
    r = subprocess.run([*cuda_make(), f"-j{jobs}",
                        f"{BUILD}/redlite",
                        f"{BUILD}/tests/test_cuda_ops", f"{BUILD}/tests/test_cuda_engine",
                        f"{BUILD}/tests/test_cuda_vram", f"{BUILD}/tests/test_cuda_verify",
                        f"{BUILD}/tests/test_cuda_spec", f"{BUILD}/tests/test_cuda_rows", f"{BUILD}/tests/test_cuda_mgpu"],
                       cwd=ROOT, capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, f"make CUDA=1 failed:\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    return os.path.join(ROOT, BUILD)


def test_cuda_unavailable_is_one_line(cuda_build):
    model = os.path.join(ROOT, "tests", "fixtures", "tiny-a.gguf")
    r = subprocess.run([os.path.join(cuda_build, "redlite"), "dump", "-m", model, "--tokens", "1,2,3",
                        "--backend", "cuda", "--json"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    if r.returncode == 0:
        pytest.skip("a CUDA device is present: the backend ran (GPU checks: bench/cuda_check.sh)")
    assert r.returncode == 1, r.stderr
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, r.stderr
    assert "cuda" in lines[0] and "not available" in lines[0] and "no CUDA device" in lines[0], lines[0]


@pytest.mark.parametrize("name", ["test_cuda_ops", "test_cuda_engine", "test_cuda_vram", "test_cuda_verify",
                                  "test_cuda_spec", "test_cuda_rows", "test_cuda_mgpu"])
def test_cuda_c_test(cuda_build, name):
    r = subprocess.run([os.path.join(cuda_build, "tests", name)], cwd=ROOT, capture_output=True, text=True,
                       timeout=1800)
    out = r.stdout[-2000:] + r.stderr[-2000:]
    if r.returncode == 77:
        line = next((l for l in r.stdout.splitlines() if l.startswith(f"{name}: skipped: ")), None)
        assert line and "no CUDA device" in line, f"{name} skipped without saying it lacks a device:\n{out}"
        pytest.skip(line)
    assert r.returncode == 0, f"{name} failed (exit {r.returncode}):\n{out}"
    assert re.search(rf"^{name}: [1-9]\d* passed, 0 failed$", r.stdout, re.M), out


def test_cpu_backend_still_works_in_cuda_build(cuda_build):
    model = os.path.join(ROOT, "tests", "fixtures", "tiny-a.gguf")
    r = subprocess.run([os.path.join(cuda_build, "redlite"), "dump", "-m", model, "--tokens", "1,2,3",
                        "--backend", "cpu", "--json"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert '"prompt":[1,2,3]' in r.stdout


def test_cuda_persist_bench():
    """bench/cuda_persist.cu (the persistent-kernel model of a decode token) compiles warning-free; a bad
    argument exits 2; on a GPU its modes must match the host reference bit for bit (exit 0), without one it
    exits 77 saying so (a skip). Built by `make cuda-persist` (tests/run.sh runs it before pytest; make
    recompiles only when the source or its headers change, so the test's time is not nvcc's)."""
    if not shutil.which("nvcc"):
        pytest.skip("nvcc not on PATH: bench/cuda_persist.cu is not checked here")
    exe = os.path.join(ROOT, BUILD, "cuda_persist")
    r = subprocess.run([*cuda_make(), "cuda-persist"], cwd=ROOT, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, f"nvcc failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    assert os.access(exe, os.X_OK), f"make cuda-persist left no {exe}"
    r = subprocess.run([exe, "--per-sm"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "usage:" in r.stderr, r.stderr
    for args in ([], ["--producer-max"]):
        r = subprocess.run([exe] + args, capture_output=True, text=True, timeout=600)
        if r.returncode == 77:
            assert "no CUDA device" in r.stderr or "cooperative" in r.stderr, r.stderr
            pytest.skip(r.stderr.strip().splitlines()[-1])
        assert r.returncode == 0, f"cuda_persist {args} failed (exit {r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
        assert r.stderr.count("same bits") == 3 and "MISMATCH" not in r.stderr, r.stderr


ARCH_TUS = ["norm.cu", "attn_tc.cu", "mm_q8_0.cu"]


def test_every_target_compiles():
    """Each -gencode of the default (fat) CUDA_ARCH compiles the architecture-dependent translation units
    with the build's own flags (-Werror included): `make cuda-archcheck`, in parallel. The objects and
    nvcc's dependency files stay in build/cuda/archcheck, so make recompiles one only when its source,
    a header it includes or the flags change (tests/run.sh runs the same make before pytest starts)."""
    if not shutil.which("nvcc"):
        pytest.skip("nvcc not on PATH: the CUDA targets are not checked here")
    arch = subprocess.run(["make", "-s", "print-cuda-arch"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    test_arch = subprocess.run(["make", "-s", "print-cuda-test-arch"], cwd=ROOT, capture_output=True,
                               text=True).stdout.split()
    pairs = [arch[i + 1] for i in range(0, len(arch) - 1, 2) if arch[i] == "-gencode"]
    done = {test_arch[i + 1] for i in range(0, len(test_arch) - 1, 2) if test_arch[i] == "-gencode"}
    todo = [p for p in pairs if p not in done]
    assert len(pairs) >= 5 and todo, f"default CUDA_ARCH lists {pairs}"
    # the Makefile's list of objects is exactly every (target, translation unit) pair
    want = sorted(os.path.join(BUILD, "archcheck", f"{p.replace(',', '_').replace('=', '-')}_{tu}.o")
                  for p in todo for tu in ARCH_TUS)
    listed = subprocess.run([*cuda_make(), "print-archcheck"], cwd=ROOT, capture_output=True,
                            text=True).stdout.split()
    assert sorted(listed) == want, f"make cuda-archcheck builds {listed}, the test expects {want}"
    n = int(os.environ.get("RL_CUDA_JOBS") or os.cpu_count() or 2)
    r = subprocess.run([*cuda_make(), "-k", f"-j{n}", "cuda-archcheck"], cwd=ROOT,
                       capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, f"make cuda-archcheck failed:\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    src = {tu: os.path.getmtime(os.path.join(ROOT, "src", "cuda", tu)) for tu in ARCH_TUS}
    for o in want:
        tu = next(t for t in ARCH_TUS if o.endswith(f"_{t}.o"))
        assert os.path.getmtime(os.path.join(ROOT, o)) >= src[tu], f"{o} is older than src/cuda/{tu}"
