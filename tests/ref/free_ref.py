#!/usr/bin/python3
"""PyTorch reference for model/free.c (seed 000 section 3): writes the fixtures
tests/test_free_ref.c checks.

A torch Free Transformer written from the paper, not from our C code: the decoder blocks of
tests/ref/llama_ref.py's formulas (RMSNorm, RoPE rotate_half, GQA, SwiGLU) generalised to a
query input and a key/value input; the encoder block (queries: zeta repeated T times,
keys/values: the output X of the first half, non-causal); RMSNorm and the bit read-out; the
Binary Mapper computed DENSELY over the 2^H values, Y = onehot(d) + G - G.detach() with
G_d = exp(sum_h log P(B_h = U_h(d))) (eq. 8), so torch's autograd gives the paper's gradient;
R = Y W_post^T; block L/2+1 with keys/values from X + R. Loss = CE + mean over counted
positions of max(0, KL_t - kappa), KL_t = H log 2 + sum_d G_d log G_d (eq. 4, also dense).
The uniforms u (B,T,H) are inputs (bit = u < sigmoid(L)), kept away from p by 1e-2 so float
differences between torch and C cannot flip a bit.

Writes tests/fixtures/free_tiny_init.safetensors (weights: HF names + free.*) and
tests/fixtures/free_tiny_ref.safetensors: tokens, targets, mask, uniforms (inputs), logits,
bit_logits, kl (B,T), z (B,T, as F32), ce (1), loss (1) and grad.<name> for every parameter.
Run with Debian's python (torch 1.13): /usr/bin/python3 tests/ref/free_ref.py [outdir]
(`make fixtures`). Deterministic: seeded, single-threaded.
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_ref import param_names, rms_norm, rotate_half, rope_tables, write_safetensors  # noqa: E402

CONFIG = dict(vocab_size=32, d_model=32, n_layers=4, n_heads=4, n_kv_heads=2, d_ff=64,
              max_seq=16, rope_theta=10000.0, norm_eps=1e-5, latent_bits=4, kappa_nats=0.3)
B, T = 2, 12
LAYER = ["input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
         "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
         "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"]


def free_names(c):
    D, F_, hd, H = c["d_model"], c["d_ff"], c["d_model"] // c["n_heads"], c["latent_bits"]
    shapes = [(D,), (c["n_heads"] * hd, D), (c["n_kv_heads"] * hd, D), (c["n_kv_heads"] * hd, D),
              (D, c["n_heads"] * hd), (D,), (F_, D), (F_, D), (D, F_)]
    return ([("free.zeta", (D,))] + [("free.encoder." + s, sh) for s, sh in zip(LAYER, shapes)] +
            [("free.encoder_norm.weight", (D,)), ("free.readout.weight", (H, D)),
             ("free.post_sampler.weight", (D, 2 ** H))])


def block(P, p, c, xq, xkv, causal):
    """One pre-norm block; the residual adds to the query stream."""
    Bn, Tn, D = xq.shape
    H, Hkv = c["n_heads"], c["n_kv_heads"]
    hd = D // H
    cos, sin = rope_tables(c, Tn)
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    hq = rms_norm(xq, P[p + "input_layernorm.weight"], c["norm_eps"])
    hkv = rms_norm(xkv, P[p + "input_layernorm.weight"], c["norm_eps"])
    q = (hq @ P[p + "self_attn.q_proj.weight"].T).view(Bn, Tn, H, hd)
    k = (hkv @ P[p + "self_attn.k_proj.weight"].T).view(Bn, Tn, Hkv, hd)
    v = (hkv @ P[p + "self_attn.v_proj.weight"].T).view(Bn, Tn, Hkv, hd)
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    k = k.repeat_interleave(H // Hkv, dim=1)
    v = v.repeat_interleave(H // Hkv, dim=1)
    s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
    if causal:
        s = s.masked_fill(~torch.ones(Tn, Tn, dtype=torch.bool).tril(), float("-inf"))
    a = (s.softmax(-1) @ v).transpose(1, 2).reshape(Bn, Tn, H * hd)
    x = xq + a @ P[p + "self_attn.o_proj.weight"].T
    h = rms_norm(x, P[p + "post_attention_layernorm.weight"], c["norm_eps"])
    g = h @ P[p + "mlp.gate_proj.weight"].T
    u = h @ P[p + "mlp.up_proj.weight"].T
    return x + (F.silu(g) * u) @ P[p + "mlp.down_proj.weight"].T


def forward(P, c, tokens, uniforms):
    L, H = c["n_layers"], c["latent_bits"]
    x = P["model.embed_tokens.weight"][tokens]
    for l in range(L // 2):
        x = block(P, f"model.layers.{l}.", c, x, x, True)
    # encoder: queries zeta repeated, keys/values X, non-causal; norm; bit logits
    zq = P["free.zeta"].expand_as(x)
    y = block(P, "free.encoder.", c, zq, x, False)
    bit_logits = rms_norm(y, P["free.encoder_norm.weight"], c["norm_eps"]) @ P["free.readout.weight"].T
    # Binary Mapper, densely: U(d) the bits of every d, G_d = P(B = U(d))
    p = torch.sigmoid(bit_logits)                                           # (B,T,H)
    U = ((torch.arange(2 ** H)[:, None] >> torch.arange(H)[None, :]) & 1).float()  # (2^H, H)
    logp1 = F.logsigmoid(bit_logits)                                        # log p
    logp0 = F.logsigmoid(-bit_logits)                                       # log (1-p)
    logG = logp1 @ U.T + logp0 @ (1 - U).T                                  # (B,T,2^H)
    G = logG.exp()
    bits = (uniforms < p).long()
    d = (bits * (2 ** torch.arange(H))).sum(-1)                             # (B,T)
    Y = F.one_hot(d, 2 ** H).float() + G - G.detach()
    r = Y @ P["free.post_sampler.weight"].T                                 # (B,T,D)
    kl = H * math.log(2) + (G * logG).sum(-1)                               # eq. 4, (B,T)
    x = block(P, f"model.layers.{L // 2}.", c, x, x + r, True)
    for l in range(L // 2 + 1, L):
        x = block(P, f"model.layers.{l}.", c, x, x, True)
    x = rms_norm(x, P["model.norm.weight"], c["norm_eps"])
    logits = x @ P["model.embed_tokens.weight"].T
    return logits, bit_logits, kl, d, p


def main():
    torch.set_num_threads(1)
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "fixtures")
    os.makedirs(outdir, exist_ok=True)
    c = CONFIG
    g = torch.Generator().manual_seed(4242)
    P = {}
    for name, shape in param_names(c, True) + free_names(c):
        if len(shape) == 1:
            P[name] = 1.0 + 0.1 * torch.randn(shape, generator=g)
        else:
            P[name] = 0.1 * torch.randn(shape, generator=g)
    # zeta: a random vector; read-out large enough that KL_t ~ kappa (some above, some below);
    # post-sampler large enough that R visibly moves the second half
    P["free.zeta"] = 0.5 * torch.randn(c["d_model"], generator=g)
    P["free.readout.weight"] = 0.12 * torch.randn(P["free.readout.weight"].shape, generator=g)
    P["free.post_sampler.weight"] = 0.3 * torch.randn(P["free.post_sampler.weight"].shape, generator=g)
    seq = torch.randint(0, c["vocab_size"], (B, T + 1), generator=g)
    tokens, targets = seq[:, :T], seq[:, 1:]
    mask = torch.ones(B, T, dtype=torch.int64)
    mask[0, 2] = mask[1, 7] = 0
    uniforms = torch.rand(B, T, c["latent_bits"], generator=g)
    with torch.no_grad():   # keep u at least 1e-2 away from p: no bit may depend on rounding
        _, _, _, _, p = forward(P, c, tokens, uniforms)
        close = (uniforms - p).abs() < 1e-2
        uniforms = torch.where(close, torch.where(p > 0.5, p - 2e-2, p + 2e-2), uniforms)
    meta = {"config": json.dumps(dict(c, tied=1, B=B, T=T)), "format": "free_ref v1"}
    write_safetensors(os.path.join(outdir, "free_tiny_init.safetensors"), P, meta)

    params = {k: v.clone().requires_grad_(True) for k, v in P.items()}
    logits, bit_logits, kl, d, _ = forward(params, c, tokens, uniforms)
    t = targets.clone()
    t[mask == 0] = -100
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), t.reshape(-1), ignore_index=-100)
    counted = mask.bool()
    free_bits = (kl - c["kappa_nats"]).clamp(min=0)[counted].mean()
    loss = ce + free_bits
    loss.backward()
    out = {"tokens": tokens.float(), "targets": targets.float(), "mask": mask.float(),
           "uniforms": uniforms, "logits": logits.detach(), "bit_logits": bit_logits.detach(),
           "kl": kl.detach(), "z": d.float(), "ce": ce.detach().reshape(1),
           "loss": loss.detach().reshape(1)}
    for k, v in params.items():
        out["grad." + k] = v.grad.detach().clone()
    write_safetensors(os.path.join(outdir, "free_tiny_ref.safetensors"), out, meta)
    above = (kl[counted] > c["kappa_nats"]).float().mean().item()
    print(f"free_tiny: ce {ce.item():.6f} loss {loss.item():.6f} mean KL {kl[counted].mean().item():.4f} nats, "
          f"{above:.2f} of tokens above kappa, z {d.flatten().tolist()}")


if __name__ == "__main__":
    main()
