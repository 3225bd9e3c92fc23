#!/usr/bin/python3
"""PyTorch reference for model/llama.c: writes the fixtures tests/test_llama_ref.c checks.

A straightforward torch implementation of the SAME decoder (seed 002: RMSNorm, SwiGLU, RoPE
in the rotate_half layout, grouped-query attention, tied or untied head), written from the
formulas, not from our C code. For a tiny config it writes, per variant (tied / untied):

  tests/fixtures/llama_tiny[_untied]_init.safetensors  initial weights (Hugging Face names)
  tests/fixtures/llama_tiny[_untied]_ref.safetensors   what the C code must reproduce:
      tokens, targets, mask (as F32, (B,T)), logits (B,T,V), loss (1),
      grad.<name> for every parameter (one forward+backward of the masked mean loss),
      adamw.losses / adamw.grad_norms / adamw.lrs (5): five steps of torch.optim.AdamW with
      warm-up + cosine lr, weight decay on matrices except the embedding, and clipping by
      torch.nn.utils.clip_grad_norm_; step5.<name>: the parameters after those five steps.
The config and optimiser settings are in the files' __metadata__ ("config", "optim", JSON).

Run with Debian's python (torch 1.13): /usr/bin/python3 tests/ref/llama_ref.py [outdir]
(`make fixtures` does this). Deterministic: seeded, single-threaded.
"""
import json
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

CONFIG = dict(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64,
              max_seq=32, rope_theta=10000.0, norm_eps=1e-5)
B, T = 2, 16
OPTIM = dict(lr_max=1e-2, lr_min=1e-3, warmup_steps=2, total_steps=5, beta1=0.9, beta2=0.95,
             eps=1e-8, weight_decay=0.1, max_norm=0.5, steps=5)
INIT_STD = 0.1  # larger than HF's 0.02 so attention is far from uniform and gradients are large


def write_safetensors(path, tensors, metadata):
    """8-byte little-endian header length, JSON header (padded to 8 with spaces), raw data."""
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        data = t.detach().contiguous().to(torch.float32).numpy().astype('<f4').tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    header["__metadata__"] = metadata
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def param_names(c, tied):
    names = [("model.embed_tokens.weight", (c["vocab_size"], c["d_model"]))]
    D, F_, hd = c["d_model"], c["d_ff"], c["d_model"] // c["n_heads"]
    for l in range(c["n_layers"]):
        p = f"model.layers.{l}."
        names += [(p + "input_layernorm.weight", (D,)),
                  (p + "self_attn.q_proj.weight", (c["n_heads"] * hd, D)),
                  (p + "self_attn.k_proj.weight", (c["n_kv_heads"] * hd, D)),
                  (p + "self_attn.v_proj.weight", (c["n_kv_heads"] * hd, D)),
                  (p + "self_attn.o_proj.weight", (D, c["n_heads"] * hd)),
                  (p + "post_attention_layernorm.weight", (D,)),
                  (p + "mlp.gate_proj.weight", (F_, D)),
                  (p + "mlp.up_proj.weight", (F_, D)),
                  (p + "mlp.down_proj.weight", (D, F_))]
    names.append(("model.norm.weight", (D,)))
    if not tied:
        names.append(("lm_head.weight", (c["vocab_size"], D)))
    return names


def rms_norm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rope_tables(c, T):
    hd = c["d_model"] // c["n_heads"]
    inv_freq = (1.0 / c["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)).float()
    ang = torch.arange(T, dtype=torch.float32)[:, None] * inv_freq[None, :]   # (T, hd/2), float
    cos, sin = ang.double().cos().float(), ang.double().sin().float()
    return torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)             # (T, hd)


def mlp_sublayer(P, p, x, c, norm="post_attention_layernorm.weight"):
    """x + down(silu(gate(n)) * up(n)), n = RMSNorm(x): the block's second half (the masked
    mixer's block ends with it too, under another norm name)."""
    h = rms_norm(x, P[p + norm], c["norm_eps"])
    g = h @ P[p + "mlp.gate_proj.weight"].T
    u = h @ P[p + "mlp.up_proj.weight"].T
    return x + (F.silu(g) * u) @ P[p + "mlp.down_proj.weight"].T


def llama_block(P, p, x, c, causal=True):
    """One pre-norm decoder block with prefix p on x (B, T, D); causal or not."""
    Bn, Tn, _ = x.shape
    H, Hkv, D = c["n_heads"], c["n_kv_heads"], c["d_model"]
    hd = D // H
    cos, sin = rope_tables(c, Tn)
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    h = rms_norm(x, P[p + "input_layernorm.weight"], c["norm_eps"])
    q = (h @ P[p + "self_attn.q_proj.weight"].T).view(Bn, Tn, H, hd)
    k = (h @ P[p + "self_attn.k_proj.weight"].T).view(Bn, Tn, Hkv, hd)
    v = (h @ P[p + "self_attn.v_proj.weight"].T).view(Bn, Tn, Hkv, hd)
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)   # (B, heads, T, hd)
    k = k.repeat_interleave(H // Hkv, dim=1)   # query head i reads kv head i // (H/Hkv)
    v = v.repeat_interleave(H // Hkv, dim=1)
    s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
    if causal:
        s = s.masked_fill(~torch.ones(Tn, Tn, dtype=torch.bool).tril(), float("-inf"))
    a = (s.softmax(-1) @ v).transpose(1, 2).reshape(Bn, Tn, H * hd)
    x = x + a @ P[p + "self_attn.o_proj.weight"].T
    return mlp_sublayer(P, p, x, c)


def forward(P, c, tied, tokens):
    x = P["model.embed_tokens.weight"][tokens]
    for l in range(c["n_layers"]):
        x = llama_block(P, f"model.layers.{l}.", x, c)
    x = rms_norm(x, P["model.norm.weight"], c["norm_eps"])
    head = P["model.embed_tokens.weight"] if tied else P["lm_head.weight"]
    return x @ head.T


def loss_fn(logits, targets, mask):
    t = targets.clone()
    t[mask == 0] = -100
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), t.reshape(-1), ignore_index=-100)


def lr_at(step):
    o = OPTIM
    if step < o["warmup_steps"]:
        return o["lr_max"] * (step + 1) / o["warmup_steps"]
    if step >= o["total_steps"]:
        return o["lr_min"]
    p = (step - o["warmup_steps"]) / (o["total_steps"] - o["warmup_steps"])
    return o["lr_min"] + (o["lr_max"] - o["lr_min"]) * 0.5 * (1.0 + math.cos(math.pi * p))


def make(tied, outdir, stem):
    c = CONFIG
    g = torch.Generator().manual_seed(1234 + tied)
    P = {}
    for name, shape in param_names(c, tied):
        if len(shape) == 1:   # norms: around 1, not exactly 1, so their gradients matter
            P[name] = 1.0 + 0.1 * torch.randn(shape, generator=g)
        else:
            P[name] = INIT_STD * torch.randn(shape, generator=g)
    seq = torch.randint(0, c["vocab_size"], (B, T + 1), generator=g)
    tokens, targets = seq[:, :T], seq[:, 1:]
    mask = torch.ones(B, T, dtype=torch.int64)
    mask[0, 3] = mask[0, 10] = mask[1, 0] = mask[1, 15] = 0   # a few uncounted targets
    meta = {"config": json.dumps(dict(c, tied=int(tied), B=B, T=T)), "optim": json.dumps(OPTIM),
            "format": "llama_ref v1"}
    write_safetensors(os.path.join(outdir, stem + "_init.safetensors"), P, meta)

    params = {k: v.clone().requires_grad_(True) for k, v in P.items()}
    logits = forward(params, c, tied, tokens)
    loss = loss_fn(logits, targets, mask)
    loss.backward()
    out = {"tokens": tokens.float(), "targets": targets.float(), "mask": mask.float(),
           "logits": logits.detach(), "loss": loss.detach().reshape(1)}
    for k, v in params.items():
        out["grad." + k] = v.grad.detach().clone()

    # Five optimizer steps on the same batch, with torch's own AdamW and clipping.
    o = OPTIM
    decay = [v for k, v in params.items() if v.dim() >= 2 and k != "model.embed_tokens.weight"]
    no_decay = [v for k, v in params.items() if not (v.dim() >= 2 and k != "model.embed_tokens.weight")]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": o["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=o["lr_max"], betas=(o["beta1"], o["beta2"]), eps=o["eps"])
    losses, norms, lrs = [], [], []
    for step in range(o["steps"]):
        opt.zero_grad()
        loss = loss_fn(forward(params, c, tied, tokens), targets, mask)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(list(params.values()), o["max_norm"])
        lr = lr_at(step)
        for grp in opt.param_groups:
            grp["lr"] = lr
        opt.step()
        losses.append(loss.item()); norms.append(norm.item()); lrs.append(lr)
    out["adamw.losses"] = torch.tensor(losses)
    out["adamw.grad_norms"] = torch.tensor(norms)
    out["adamw.lrs"] = torch.tensor(lrs)
    for k, v in params.items():
        out["step5." + k] = v.detach().clone()
    write_safetensors(os.path.join(outdir, stem + "_ref.safetensors"), out, meta)
    print(f"{stem}: loss {out['loss'].item():.6f}, after 5 steps {losses[-1]:.6f}, norms {norms}")


def main():
    torch.set_num_threads(1)
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "fixtures")
    os.makedirs(outdir, exist_ok=True)
    make(True, outdir, "llama_tiny")
    make(False, outdir, "llama_tiny_untied")


if __name__ == "__main__":
    main()
