#!/usr/bin/python3
"""tests/lib/st_diff.py A.safetensors B.safetensors: how far two checkpoints' tensors are apart.

Prints one line "max_abs_diff D max_abs M identical 0|1 tensors N": the largest |a - b| over
every element of every tensor, the largest |a|, whether every tensor is bit-identical. Exits 2
when the files do not hold the same names, shapes and dtypes (then they are not comparable at
all). Reads safetensors (8-byte header length, JSON header, raw little-endian data) with the
standard library alone, so that it runs wherever a python3 does (a GPU machine's system
interpreter may lack numpy); the checkpoints it compares are the tests' small ones."""
import array
import json
import math
import struct
import sys


def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t.get("dtype") != "F32":
            print("st_diff: %s: tensor %s is %s, not F32" % (path, name, t.get("dtype")), file=sys.stderr)
            sys.exit(2)
        a, b = t["data_offsets"]
        raw = data[a:b]
        vals, bits = array.array("f"), array.array("I")
        vals.frombytes(raw)
        bits.frombytes(raw)
        if sys.byteorder != "little":
            vals.byteswap()
            bits.byteswap()
        out[name] = (tuple(t["shape"]), vals, bits)
    return out


def main():
    a, b = load(sys.argv[1]), load(sys.argv[2])
    if sorted(a) != sorted(b) or any(a[k][0] != b[k][0] for k in a):
        print("st_diff: the files hold different tensors", file=sys.stderr)
        sys.exit(2)
    diff = scale = 0.0
    same = True
    for k in a:
        va, vb = a[k][1], b[k][1]
        # a NaN anywhere makes the difference NaN, as numpy's max would
        d = max((abs(x - y) for x, y in zip(va, vb)), default=0.0, key=lambda v: math.inf if v != v else v)
        diff = math.nan if d != d or diff != diff else max(diff, d)
        scale = max(scale, max((abs(x) for x in va), default=0.0))
        same = same and a[k][2] == b[k][2]
    print("max_abs_diff %.6e max_abs %.6e identical %d tensors %d" % (diff, scale, int(same), len(a)))


main()
