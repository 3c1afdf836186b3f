"""gen_fuzz_seeds.py — write small valid GGUF files as the fuzz seed corpus (tools/fuzz_gguf.c).

usage: python tools/gen_fuzz_seeds.py OUTDIR
Uses the `gguf` PyPI package (tests/requirements.txt); every value type, nested arrays, empty
strings (the package cannot write empty arrays; test_gguf.c covers those), a few tensor types and a custom alignment are covered, all under 4 KiB.
"""
import os
import sys

import numpy as np
import gguf


def write(path, alignment=None, nested=True, tensors=True, arch="qwen3next"):
    w = gguf.GGUFWriter(path, arch)
    if alignment:
        w.add_custom_alignment(alignment)
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -5)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -2000000000)
    w.add_float32("t.f32", 1.5)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "hello")
    w.add_string("t.empty", "")
    w.add_uint64("t.u64", 1 << 40)
    w.add_int64("t.i64", -(1 << 40))
    w.add_float64("t.f64", 2.25)
    w.add_array("t.arr_i32", [1, -2, 3])
    w.add_array("t.arr_str", ["a", "", "ccc"])
    if nested:
        w.add_array("t.nested", [[1, 2], [3]])
    w.add_uint32(f"{arch}.block_count", 2)
    if tensors:
        w.add_tensor("token_embd.weight", np.ones((4, 8), dtype=np.float32))
        w.add_tensor("blk.0.attn_norm.weight", np.ones(8, dtype=np.float16))
        q = np.zeros((2, 34), dtype=np.uint8)  # 2 rows of one Q8_0 block (32 values)
        w.add_tensor("blk.0.ffn_gate_exps.weight", q, raw_shape=(2, 34), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    write(os.path.join(out, "seed-basic.gguf"))
    write(os.path.join(out, "seed-align64.gguf"), alignment=64)
    write(os.path.join(out, "seed-notensors.gguf"), tensors=False)
    write(os.path.join(out, "seed-flat.gguf"), nested=False, alignment=8)


if __name__ == "__main__":
    main()
