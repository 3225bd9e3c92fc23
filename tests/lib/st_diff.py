#!/usr/bin/python3
"""tests/lib/st_diff.py A.safetensors B.safetensors: how far two checkpoints' tensors are apart.

Prints one line "max_abs_diff D max_abs M identical 0|1 tensors N": the largest |a - b| over
every element of every tensor, the largest |a|, whether every tensor is bit-identical. Exits 2
when the files do not hold the same names and shapes (then they are not comparable at all).
Reads safetensors (8-byte header length, JSON header, raw little-endian data) with numpy alone."""
import json
import struct
import sys

import numpy as np


def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=np.float32).reshape(t["shape"])
    return out


def main():
    a, b = load(sys.argv[1]), load(sys.argv[2])
    if sorted(a) != sorted(b) or any(a[k].shape != b[k].shape for k in a):
        print("st_diff: the files hold different tensors", file=sys.stderr)
        sys.exit(2)
    diff = max(float(np.abs(a[k].astype(np.float64) - b[k]).max()) for k in a)
    scale = max(float(np.abs(a[k]).max()) for k in a)
    same = all(np.array_equal(a[k].view(np.uint32), b[k].view(np.uint32)) for k in a)
    print("max_abs_diff %.6e max_abs %.6e identical %d tensors %d" % (diff, scale, int(same), len(a)))


main()
