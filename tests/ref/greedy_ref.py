#!/usr/bin/python3
"""Greedy continuation of a baseline checkpoint by the PyTorch reference (tests/ref/llama_ref.py).

  /usr/bin/python3 tests/ref/greedy_ref.py CKPT_DIR N ID [ID ...]

Reads config.json (Hugging Face LlamaConfig fields) and model.safetensors from CKPT_DIR (the
files bin/trainer writes, docs/FORMATS.md §3), feeds the prompt ids, appends the argmax token N
times (a full forward each time: no cache, the reference's own arithmetic), and prints the N
new ids on one line. trainer/examples/bf16.sh compares them with bin/sampler --temperature 0.
"""
import json
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref  # noqa: E402


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[a:b]), dtype=torch.float32).reshape(e["shape"])
    return out


def main():
    d, n, ids = sys.argv[1], int(sys.argv[2]), [int(x) for x in sys.argv[3:]]
    cfg = json.load(open(os.path.join(d, "config.json")))
    c = dict(vocab_size=cfg["vocab_size"], d_model=cfg["hidden_size"], n_layers=cfg["num_hidden_layers"],
             n_heads=cfg["num_attention_heads"], n_kv_heads=cfg["num_key_value_heads"],
             d_ff=cfg["intermediate_size"], max_seq=cfg["max_position_embeddings"],
             rope_theta=cfg["rope_theta"], norm_eps=cfg["rms_norm_eps"])
    tied = cfg.get("tie_word_embeddings", True)
    P = read_safetensors(os.path.join(d, "model.safetensors"))
    torch.set_num_threads(1)
    seq = list(ids)
    with torch.no_grad():
        for _ in range(n):
            logits = llama_ref.forward(P, c, tied, torch.tensor([seq]))
            seq.append(int(logits[0, -1].argmax()))
    print(" ".join(str(t) for t in seq[len(ids):]))


if __name__ == "__main__":
    main()
