"""The Qwen3.5 / Qwen3.6 rows of the family description (docs/QWEN35.md): files of the qwen35moe and
qwen35 (dense) architectures load, run and describe themselves; vision projectors, vision tensors and
an unsupported RoPE section are refused with one line. The forward pass against transformers is in
test_forward_oracle.py (fixtures tiny-q35moe, tiny-q35)."""
import os
import subprocess

import gguf
import numpy as np
import pytest

from oracle_util import REDLITE

FIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def run(*args):
    return subprocess.run([REDLITE, *args], capture_output=True, text=True, timeout=300)


def synth(tmp_path, arch, extra=""):
    out = tmp_path / f"{arch}.gguf"
    geo = f"arch={arch}" + (",ff=768" if arch == "qwen35" else "") + extra
    r = run("synth", "--preset", "tiny", "-o", str(out), "--geometry", geo, "--mtp")
    assert r.returncode == 0, r.stderr
    return out


@pytest.mark.parametrize("arch", ["qwen35moe", "qwen35"])
def test_synth_file_is_the_arch(tmp_path, arch):
    """synth writes the arch's own keys and tensors (beta/alpha separate, dense FFN for qwen35)."""
    p = synth(tmp_path, arch)
    rd = gguf.GGUFReader(str(p))
    assert rd.fields["general.architecture"].contents() == arch
    assert rd.fields[f"{arch}.rope.dimension_sections"].contents() == [3, 3, 2, 0]
    names = {t.name for t in rd.tensors}
    assert "blk.0.ssm_beta.weight" in names and "blk.0.ssm_alpha.weight" in names
    assert not any(n.endswith("ssm_ba.weight") for n in names)
    dense = arch == "qwen35"
    assert ("blk.0.ffn_gate.weight" in names) == dense
    assert ("blk.0.ffn_gate_exps.weight" in names) == (not dense)
    assert ("blk.4.ffn_down.weight" in names) == dense  # the MTP block has the trunk's FFN kind
    assert (f"{arch}.expert_count" in rd.fields) == (not dense)


@pytest.mark.parametrize("arch", ["qwen35moe", "qwen35"])
def test_synth_runs_and_info_names_the_family(tmp_path, arch):
    p = synth(tmp_path, arch)
    r = run("info", str(p))
    assert r.returncode == 0, r.stderr
    fam = [l for l in r.stdout.splitlines() if l.startswith("family")]
    assert fam and "value heads tiled" in fam[0] and "beta/alpha separate" in fam[0]
    assert ("dense FFN" in fam[0]) == (arch == "qwen35")
    r = run("dump", "-m", str(p), "--tokens", "1,2,3,4,5", "--greedy", "4", "--json")
    assert r.returncode == 0, r.stderr
    r = run("generate", "-m", str(p), "-p", "hello", "-n", "4")
    assert r.returncode == 0, r.stderr


def test_dense_model_refuses_a_cache_budget(tmp_path):
    p = synth(tmp_path, "qwen35")
    r = run("generate", "-m", str(p), "-p", "hi", "-n", "2", "--cache-mib", "64")
    assert r.returncode != 0
    assert "no routed experts" in r.stderr and len(r.stderr.strip().splitlines()) <= 2


def rewrite(src, dst, arch=None, drop_key=None, set_arr=None, extra_tensor=None):
    """Copy a GGUF with one change (gguf-py writer)."""
    rd = gguf.GGUFReader(str(src))
    a = arch or rd.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(str(dst), a)
    for f in rd.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture" or f.name == drop_key:
            continue
        vt = gguf.GGUFValueType(f.types[0])
        val = f.contents()
        if set_arr and f.name == set_arr[0]:
            val = set_arr[1]
        if vt == gguf.GGUFValueType.ARRAY and not len(val):  # synth's empty merges: gguf-py cannot write it
            continue
        sub = gguf.GGUFValueType(f.types[-1]) if vt == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(f.name, val, vt, sub_type=sub)
    for t in rd.tensors:
        w.add_tensor(t.name, np.asarray(t.data), raw_dtype=gguf.GGMLQuantizationType(t.tensor_type))
    if extra_tensor:
        w.add_tensor(extra_tensor, np.zeros(32, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def one_line_refusal(path, *want):
    r = run("generate", "-m", str(path), "-p", "hi", "-n", "1")
    assert r.returncode != 0
    err = r.stderr.strip()
    for w in want:
        assert w in err, err
    assert len(err.splitlines()) <= 2, err


def test_mmproj_is_refused(tmp_path):
    src = synth(tmp_path, "qwen35moe")
    dst = tmp_path / "mmproj.gguf"
    rewrite(src, dst, arch="clip")
    one_line_refusal(dst, "vision projector", "text only")


def test_vision_tensor_is_refused(tmp_path):
    src = synth(tmp_path, "qwen35moe")
    dst = tmp_path / "vl.gguf"
    rewrite(src, dst, extra_tensor="v.patch_embd.weight")
    one_line_refusal(dst, "v.patch_embd.weight", "vision tower")


def test_rope_sections_checked(tmp_path):
    src = synth(tmp_path, "qwen35moe")
    bad = tmp_path / "sec4.gguf"
    rewrite(src, bad, set_arr=("qwen35moe.rope.dimension_sections", [3, 3, 1, 1]))
    one_line_refusal(bad, "rope.dimension_sections", "4th section")
    missing = tmp_path / "nosec.gguf"
    rewrite(src, missing, drop_key="qwen35moe.rope.dimension_sections")
    one_line_refusal(missing, "missing metadata key qwen35moe.rope.dimension_sections")


def test_committed_fixture_is_converted_qwen35moe():
    """The oracle fixture is the converter's own qwen35moe output (tiled value heads: a grouped
    reading of it is off by O(10) logits, which test_forward_oracle would catch)."""
    p = os.path.join(FIX, "tiny-q35moe.gguf")
    rd = gguf.GGUFReader(p)
    assert rd.fields["general.architecture"].contents() == "qwen35moe"
    names = {t.name for t in rd.tensors}
    assert {"blk.0.ssm_beta.weight", "blk.0.ssm_alpha.weight", "blk.4.nextn.eh_proj.weight"} <= names
