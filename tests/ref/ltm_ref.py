#!/usr/bin/python3
"""PyTorch reference for model/ltm.c (seed 003, Latent-Thought LM): writes the fixtures
tests/test_ltm_ref.c checks.

A torch LTM written from the seed and the public LTM code's structure, not from our C code:
tests/ref/llama_ref.py's decoder formulas (RMSNorm, RoPE rotate_half, GQA, SwiGLU), the
self-attention causal with a sliding window W (row t sees keys t-W+1 .. t), and in every layer,
between the self-attention and the MLP, a cross-attention whose queries are the normed token
stream (RoPE at the token positions) and whose keys/values are that layer's latent vectors z_l
(m x d, not normed; keys rotated at positions j * max(1, max_seq // (L m))), every token
seeing all m latents. Posterior q(z) = N(mu, exp(ls)^2), z = mu + exp(ls) eps; the NELBO of a
sequence = sum over counted targets of CE + KL(q || N(0, I)) in closed form.

One dual-rate step with K = 1 inner step, as the C family runs it (stochastic variational
inference: every step and the final forward draw their own noise, eps for the inner step, eps1
for the final forward):
  1. at (mu0, ls0): z0 = mu0 + exp(ls0) eps, NELBO summed over the batch; its gradients w.r.t.
     mu and ls (autograd);
  2. one torch.optim.AdamW step on [mu, ls] (lr = the fast rate, betas 0.9/0.999, eps 1e-8,
     weight decay 0.01: torch's defaults) -> (mu1, ls1);
  3. the forward at z1 = mu1 + exp(ls1) eps1 with (mu1, ls1) detached: logits, the mean CE, the
     KL; loss = (sum CE + sum KL) / counted targets; its backward: every weight's gradient.

Writes tests/fixtures/ltm_tiny_init.safetensors (weights: HF names + the cross-attention's) and
tests/fixtures/ltm_tiny_ref.safetensors: tokens, targets, mask (B,T as F32); mu0, ls0, eps,
eps1 (L,B,m,D: layer-major, the C model's latent layout); ce0_sum, kl0_sum (1); grad.mu, grad.ls
(L,B,m,D, at the start); mu1, ls1; logits (B,T,V), ce (1, mean), kl_sum (1), loss (1);
grad.<name> for every parameter.
Run with Debian's python (torch 1.13): /usr/bin/python3 tests/ref/ltm_ref.py [outdir]
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
from llama_ref import param_names, rms_norm, rotate_half, write_safetensors  # noqa: E402

CONFIG = dict(vocab_size=32, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64,
              max_seq=16, rope_theta=10000.0, norm_eps=1e-5, latent_vectors=3, sliding_window=4,
              fast_lr=0.3)
B, T = 2, 12
FAST = dict(betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)


def cross_names(c):
    D, hd = c["d_model"], c["d_model"] // c["n_heads"]
    out = []
    for l in range(c["n_layers"]):
        p = f"model.layers.{l}."
        out += [(p + "cross_attn_layernorm.weight", (D,)),
                (p + "cross_attn.q_proj.weight", (c["n_heads"] * hd, D)),
                (p + "cross_attn.k_proj.weight", (c["n_kv_heads"] * hd, D)),
                (p + "cross_attn.v_proj.weight", (c["n_kv_heads"] * hd, D)),
                (p + "cross_attn.o_proj.weight", (D, c["n_heads"] * hd))]
    return out


def rope_at(c, positions):
    """cos/sin (len(positions), hd) of the rotate_half layout at the given positions."""
    hd = c["d_model"] // c["n_heads"]
    inv_freq = (1.0 / c["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)).float()
    ang = positions.float()[:, None] * inv_freq[None, :]
    cos, sin = ang.double().cos().float(), ang.double().sin().float()
    return torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)


def attend(q, k, v, H, Hkv, mask):
    """q (B,Tq,H,hd), k/v (B,Tk,Hkv,hd); mask (Tq,Tk) bool (True: visible) or None."""
    Bn, Tq, _, hd = q.shape
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    k = k.repeat_interleave(H // Hkv, dim=1)
    v = v.repeat_interleave(H // Hkv, dim=1)
    s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return (s.softmax(-1) @ v).transpose(1, 2).reshape(Bn, Tq, H * hd)


def forward(P, c, tokens, z):
    """z (L,B,m,D). Returns the logits (B,T,V)."""
    Bn, Tn = tokens.shape
    H, Hkv, D, L, m = c["n_heads"], c["n_kv_heads"], c["d_model"], c["n_layers"], c["latent_vectors"]
    hd, W = D // H, c["sliding_window"]
    cos, sin = rope_at(c, torch.arange(Tn))
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    spacing = max(1, c["max_seq"] // (L * m))
    zcos, zsin = rope_at(c, torch.arange(m) * spacing)
    zcos, zsin = zcos[None, :, None, :], zsin[None, :, None, :]
    i = torch.arange(Tn)[:, None]
    j = torch.arange(Tn)[None, :]
    window = (j <= i) & (j > i - W)                       # the sliding causal window
    x = P["model.embed_tokens.weight"][tokens]
    for l in range(L):
        p = f"model.layers.{l}."
        # self-attention, windowed
        h = rms_norm(x, P[p + "input_layernorm.weight"], c["norm_eps"])
        q = (h @ P[p + "self_attn.q_proj.weight"].T).view(Bn, Tn, H, hd)
        k = (h @ P[p + "self_attn.k_proj.weight"].T).view(Bn, Tn, Hkv, hd)
        v = (h @ P[p + "self_attn.v_proj.weight"].T).view(Bn, Tn, Hkv, hd)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        x = x + attend(q, k, v, H, Hkv, window) @ P[p + "self_attn.o_proj.weight"].T
        # cross-attention to the layer's latents
        h = rms_norm(x, P[p + "cross_attn_layernorm.weight"], c["norm_eps"])
        q = (h @ P[p + "cross_attn.q_proj.weight"].T).view(Bn, Tn, H, hd)
        q = q * cos + rotate_half(q) * sin
        k = (z[l] @ P[p + "cross_attn.k_proj.weight"].T).view(Bn, m, Hkv, hd)
        v = (z[l] @ P[p + "cross_attn.v_proj.weight"].T).view(Bn, m, Hkv, hd)
        k = k * zcos + rotate_half(k) * zsin
        x = x + attend(q, k, v, H, Hkv, None) @ P[p + "cross_attn.o_proj.weight"].T
        # MLP
        h = rms_norm(x, P[p + "post_attention_layernorm.weight"], c["norm_eps"])
        g = h @ P[p + "mlp.gate_proj.weight"].T
        u = h @ P[p + "mlp.up_proj.weight"].T
        x = x + (F.silu(g) * u) @ P[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, P["model.norm.weight"], c["norm_eps"])
    return x @ P["model.embed_tokens.weight"].T


def ce_sum(logits, targets, mask):
    t = targets.clone()
    t[mask == 0] = -100
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), t.reshape(-1), ignore_index=-100,
                           reduction="sum")


def kl_sum(mu, ls):
    """sum over everything of KL(N(mu, e^{2 ls}) || N(0, 1)) = 0.5 (mu^2 + e^{2 ls} - 1) - ls"""
    return (0.5 * (mu.pow(2) + (2 * ls).exp() - 1) - ls).double().sum()


def main():
    torch.set_num_threads(1)
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "fixtures")
    os.makedirs(outdir, exist_ok=True)
    c = CONFIG
    g = torch.Generator().manual_seed(3003)
    P = {}
    for name, shape in param_names(c, True) + cross_names(c):
        if len(shape) == 1:   # norms around 1, so their gradients matter
            P[name] = 1.0 + 0.1 * torch.randn(shape, generator=g)
        else:
            P[name] = 0.15 * torch.randn(shape, generator=g)
    seq = torch.randint(0, c["vocab_size"], (B, T + 1), generator=g)
    tokens, targets = seq[:, :T], seq[:, 1:]
    mask = torch.ones(B, T, dtype=torch.int64)
    mask[0, 4] = mask[1, 9] = 0
    shape = (c["n_layers"], B, c["latent_vectors"], c["d_model"])
    # a posterior start away from the training one (mu ~ 0.01 N, ls ~ -2.5) so z matters
    mu0 = 0.5 * torch.randn(shape, generator=g)
    ls0 = -1.0 + 0.2 * torch.randn(shape, generator=g)
    eps = torch.randn(shape, generator=g)
    eps1 = torch.randn(shape, generator=g)   # the final forward's own draw
    meta = {"config": json.dumps(dict(c, tied=1, B=B, T=T)), "fast": json.dumps(FAST),
            "format": "ltm_ref v2"}
    write_safetensors(os.path.join(outdir, "ltm_tiny_init.safetensors"), P, meta)
    count = int(mask.sum())

    # 1. the inner step's gradient: the batch's NELBO at (mu0, ls0) w.r.t. mu and ls
    mu = mu0.clone().requires_grad_(True)
    ls = ls0.clone().requires_grad_(True)
    with torch.no_grad():
        Pc = {k: v.clone() for k, v in P.items()}
    z0 = mu + ls.exp() * eps
    ce0 = ce_sum(forward(Pc, c, tokens, z0), targets, mask)
    kl0 = kl_sum(mu, ls)
    (ce0 + kl0.float()).backward()
    out = {"tokens": tokens.float(), "targets": targets.float(), "mask": mask.float(),
           "mu0": mu0, "ls0": ls0, "eps": eps, "eps1": eps1, "ce0_sum": ce0.detach().reshape(1),
           "kl0_sum": kl0.detach().float().reshape(1), "grad.mu": mu.grad.detach().clone(),
           "grad.ls": ls.grad.detach().clone()}
    # 2. one fast AdamW step
    opt = torch.optim.AdamW([mu, ls], lr=c["fast_lr"], **FAST)
    opt.step()
    out["mu1"], out["ls1"] = mu.detach().clone(), ls.detach().clone()
    # 3. the final forward and the decoder's gradient
    params = {k: v.clone().requires_grad_(True) for k, v in P.items()}
    z1 = out["mu1"] + out["ls1"].exp() * eps1
    logits = forward(params, c, tokens, z1)
    ces = ce_sum(logits, targets, mask)
    kl1 = kl_sum(out["mu1"], out["ls1"]).float()
    loss = (ces + kl1) / count
    loss.backward()
    out.update({"logits": logits.detach(), "ce": (ces / count).detach().reshape(1),
                "kl_sum": kl1.reshape(1), "loss": loss.detach().reshape(1)})
    for k, v in params.items():
        out["grad." + k] = v.grad.detach().clone()
    write_safetensors(os.path.join(outdir, "ltm_tiny_ref.safetensors"), out, meta)
    gmin = min(out["grad.mu"].abs().min().item(), out["grad.ls"].abs().min().item())
    print(f"ltm_tiny: NELBO/token {((ce0 + kl0) / count).item():.4f} -> {loss.item():.4f} after one inner step "
          f"(ce {out['ce'].item():.4f}, kl {kl1.item():.2f} nats); smallest |d mu|, |d ls| {gmin:.3g}")


if __name__ == "__main__":
    main()
