#!/usr/bin/python3
"""PyTorch counterpart of bench/train_step.c: times zero_grad + forward + backward + AdamW
(with clipping) of the same Llama decoder (the reference implementation of
tests/ref/llama_ref.py) for configs S and M, and prints tokens/s.

  /usr/bin/python3 bench/train_step_torch.py [--config S|M|both] [--steps N] [--batch B] [--seq T]
                                            [--bf16] [--eval] [--json]

--bf16 runs the forward and the loss under torch.autocast("cpu", dtype=torch.bfloat16): the
mixed precision a PyTorch user picks (bf16 products, fp32 weights and optimizer).
--eval times the scoring forward instead (train_step --eval): tokens in, logits out, under
torch.inference_mode() (no autograd record), autocast as above with --bf16.
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "ref"))
import llama_ref  # noqa: E402

CONFIGS = {
    "S": dict(vocab_size=4096, d_model=256, n_layers=4, n_heads=4, n_kv_heads=2, d_ff=768),
    "M": dict(vocab_size=8192, d_model=512, n_layers=8, n_heads=8, n_kv_heads=4, d_ff=1536),
}


def run_eval(name, c, params, tokens, B, T, steps, as_json, bf16):
    """the forward alone, as an evaluator scores held-out text: logits of (B, T) tokens"""
    times = []
    with torch.inference_mode():
        for s in range(-1, steps):   # s = -1: warm-up, not timed
            a = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                logits = llama_ref.forward(params, c, True, tokens)
            logits = logits.float()   # the scores are read in fp32
            if s >= 0:
                times.append(time.perf_counter() - a)
    total = sum(times)
    tps = B * T * steps / total
    nparams = sum(p.numel() for p in params.values())
    if as_json:
        print(json.dumps(dict(impl="torch", mode="eval", config=name, params=nparams, B=B, T=T, steps=steps,
                              bf16=bf16, threads=torch.get_num_threads(), step_s=total / steps, tokens_per_s=tps)))
    else:
        print(f"PT config {name} eval forward: {nparams} params, B={B} T={T}, {torch.get_num_threads()} threads: "
              f"{total / steps:.4f} s/forward -> {tps:.0f} tokens/s")


def run(name, B, T, steps, as_json, bf16=False, eval_only=False):
    c = dict(CONFIGS[name], max_seq=1024, rope_theta=10000.0, norm_eps=1e-5)
    g = torch.Generator().manual_seed(1)
    params = {}
    for pname, shape in llama_ref.param_names(c, True):
        t = torch.ones(shape) if len(shape) == 1 else 0.02 * torch.randn(shape, generator=g)
        params[pname] = t.requires_grad_(True)
    seq = torch.randint(0, c["vocab_size"], (B, T + 1), generator=g)
    tokens, targets = seq[:, :T], seq[:, 1:]
    mask = torch.ones(B, T, dtype=torch.int64)
    if eval_only:
        return run_eval(name, c, params, tokens, B, T, steps, as_json, bf16)
    opt = torch.optim.AdamW(list(params.values()), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    tf = tb = to = 0.0
    for s in range(-1, steps):   # s = -1: warm-up, not timed
        a = time.perf_counter()
        if s == 0:
            t0 = a
        opt.zero_grad(set_to_none=False)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = llama_ref.loss_fn(llama_ref.forward(params, c, True, tokens), targets, mask)
        b = time.perf_counter()
        loss.backward()
        c2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
        opt.step()
        d = time.perf_counter()
        if s >= 0:
            tf += b - a; tb += c2 - b; to += d - c2
    total = time.perf_counter() - t0
    tps = B * T * steps / total
    nparams = sum(p.numel() for p in params.values())
    if as_json:
        print(json.dumps(dict(impl="torch", config=name, params=nparams, B=B, T=T, steps=steps, bf16=bf16,
                              threads=torch.get_num_threads(), step_s=total / steps, fwd_s=tf / steps,
                              bwd_s=tb / steps, opt_s=to / steps, tokens_per_s=tps, loss=loss.item())))
    else:
        print(f"PT config {name}: {nparams} params, B={B} T={T}, {torch.get_num_threads()} threads: "
              f"{total / steps:.3f} s/step (fwd {tf / steps:.3f} bwd {tb / steps:.3f} opt {to / steps:.3f}) "
              f"-> {tps:.0f} tokens/s (loss {loss.item():.3f})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="both", choices=["S", "M", "both"])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast for forward and loss")
    ap.add_argument("--eval", action="store_true", help="time the scoring forward (logits) under inference_mode")
    ap.add_argument("--threads", type=int, default=os.cpu_count(),
                    help="intra-op threads (default: all cores, as the C side's OpenMP default; "
                         "0 leaves torch's own default, which is 1 here)")
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    for name in ("S", "M"):
        if a.config in (name, "both"):
            run(name, a.batch, a.seq, a.steps, a.json, a.bf16, a.eval)


if __name__ == "__main__":
    main()
