#!/usr/bin/python3
"""PyTorch reference for model/mixers.c (seed 004's masked mixers): writes the fixtures
tests/test_mixer_ref.c checks.

Written from the definitions (seed 004 and docs/FORMATS.md), not from our C code. The token
mixing is torch's own Conv1d over the embedding axis, as the masked-mixer papers build it:
per head i, F.conv1d(z_i (B, T, d/h), weight (T, T, k), bias (T), padding='same'), the
weight masked to its lower triangle in (out position, in position) when causal. Our
checkpoint layout stores that weight as mixer.weight[i] = conv weight.permute(2, 0, 1)
(taps first) and the biases of the h heads back to back. The Llama blocks of the transformer
twins and the MLP sublayer come from llama_ref.py.

Variants (stem: what it pins):
  mixer_flat       causal mixer LM, flat (1 head, k = 1), tied head
  mixer_heads      causal mixer LM, 2 heads (in/out projections), untied head
  mixer_kernel     causal mixer LM, k = 3 (the mixing also spans neighbouring elements)
  mixer_ae_repeat  mixer autoencoder, the embedding repeated at every decoder position
  mixer_ae_unroll  mixer autoencoder, 2 heads k = 2, unmasked encoder, d -> d_e -> d
                   compression and the sliding-window unroll with wrap-around
  llama_ae         transformer autoencoder (Llama blocks), unroll, non-causal encoder
  mixer_mem        memory model: encoder embedding at decoder position 0, d_e < d, untied
  llama_mem        the same with Llama blocks
For each: <stem>_init.safetensors (weights, documented names) and <stem>_ref.safetensors
(tokens, targets, mask as F32 (B,T); logits (B,T,V); loss (1); grad.<name> for every
parameter: one forward and backward of the masked mean loss). Metadata "config" (JSON).

Run with Debian's python (torch 1.13): /usr/bin/python3 tests/ref/mixer_ref.py [outdir]
(`make fixtures` does this). Deterministic: seeded, single-threaded.
"""
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_ref import llama_block, mlp_sublayer, rms_norm, write_safetensors  # noqa: E402

BASE = dict(vocab_size=29, d_model=16, n_layers=2, encoder_layers=2, n_heads=2, n_kv_heads=1,
            d_ff=24, max_seq=8, rope_theta=10000.0, norm_eps=1e-5, tied=1, mixer_heads=1,
            mixer_kernel=1, no_mask_encoder=0, no_mask_decoder=0, embed_dim=16, unroll=0)
B, T = 2, 8

VARIANTS = {
    "mixer_flat": dict(kind="mixer"),
    "mixer_heads": dict(kind="mixer", mixer_heads=2, tied=0),
    "mixer_kernel": dict(kind="mixer", mixer_kernel=3),
    "mixer_ae_repeat": dict(kind="mixer-ae"),
    "mixer_ae_unroll": dict(kind="mixer-ae", mixer_heads=2, mixer_kernel=2, no_mask_encoder=1,
                            embed_dim=6, unroll=1),
    "llama_ae": dict(kind="llama-ae", no_mask_encoder=1, unroll=1),
    "mixer_mem": dict(kind="mixer-mem", embed_dim=5, tied=0),
    "llama_mem": dict(kind="llama-mem", embed_dim=5),
}


def uses_mixer(c):
    return c["kind"] in ("mixer", "mixer-ae", "mixer-mem")


def block_names(c, p):
    D, F_, h, Tn = c["d_model"], c["d_ff"], c["mixer_heads"], c["max_seq"]
    if not uses_mixer(c):
        hd = D // c["n_heads"]
        return [(p + "input_layernorm.weight", (D,)),
                (p + "self_attn.q_proj.weight", (c["n_heads"] * hd, D)),
                (p + "self_attn.k_proj.weight", (c["n_kv_heads"] * hd, D)),
                (p + "self_attn.v_proj.weight", (c["n_kv_heads"] * hd, D)),
                (p + "self_attn.o_proj.weight", (D, c["n_heads"] * hd)),
                (p + "post_attention_layernorm.weight", (D,)),
                (p + "mlp.gate_proj.weight", (F_, D)), (p + "mlp.up_proj.weight", (F_, D)),
                (p + "mlp.down_proj.weight", (D, F_))]
    names = [(p + "input_layernorm.weight", (D,))]
    if h > 1:
        names.append((p + "mixer.in_proj.weight", (D, D)))
    names += [(p + "mixer.weight", (h, c["mixer_kernel"], Tn, Tn)), (p + "mixer.bias", (h * Tn,))]
    if h > 1:
        names.append((p + "mixer.out_proj.weight", (D, D)))
    return names + [(p + "post_mixer_layernorm.weight", (D,)),
                    (p + "mlp.gate_proj.weight", (F_, D)), (p + "mlp.up_proj.weight", (F_, D)),
                    (p + "mlp.down_proj.weight", (D, F_))]


def param_names(c):
    """The documented order (model/mixers.h)."""
    V, D, de = c["vocab_size"], c["d_model"], c["embed_dim"]
    ae, mem = c["kind"].endswith("-ae"), c["kind"].endswith("-mem")
    names = []
    if ae or mem:
        names.append(("encoder.embed_tokens.weight", (V, D)))
        for l in range(c["encoder_layers"]):
            names += block_names(c, f"encoder.layers.{l}.")
        if de < D:
            names.append(("encoder.down.weight", (de, D)))
    dec = "decoder." if ae else "model."
    if ae:
        if de < D:
            names.append(("decoder.up.weight", (D, de)))
        if c["unroll"]:
            names.append(("decoder.unroll.weight", (D, D // 2)))
    else:
        if mem:
            names.append(("memory.proj.weight", (D, de)))
        names.append(("model.embed_tokens.weight", (V, D)))
    for l in range(c["n_layers"]):
        names += block_names(c, f"{dec}layers.{l}.")
    names.append((dec + "norm.weight", (D,)))
    if not c["tied"]:
        names.append(("lm_head.weight", (V, D)))
    return names


def token_mixing(z, W, bias, c, causal):
    """Per head, torch's Conv1d with the positions as channels, over the embedding axis."""
    Bn, Tn, D = z.shape
    h, Tw = c["mixer_heads"], c["max_seq"]
    dh = D // h
    mask = torch.ones(Tn, Tn).tril()[:, :, None]
    out = []
    for i in range(h):
        w = W[i, :, :Tn, :Tn].permute(1, 2, 0)               # (out t, in s, tap)
        if causal:
            w = w * mask
        out.append(F.conv1d(z[..., i * dh:(i + 1) * dh], w, bias[i * Tw:i * Tw + Tn], padding="same"))
    return torch.cat(out, dim=-1)


def mixer_block(P, p, x, c, causal):
    h = rms_norm(x, P[p + "input_layernorm.weight"], c["norm_eps"])
    if c["mixer_heads"] > 1:
        h = h @ P[p + "mixer.in_proj.weight"].T
    u = token_mixing(h, P[p + "mixer.weight"], P[p + "mixer.bias"], c, causal)
    if c["mixer_heads"] > 1:
        u = u @ P[p + "mixer.out_proj.weight"].T
    return mlp_sublayer(P, p, x + u, c, norm="post_mixer_layernorm.weight")


def blocks(P, prefix, L, x, c, causal):
    for l in range(L):
        p = f"{prefix}{l}."
        x = mixer_block(P, p, x, c, causal) if uses_mixer(c) else llama_block(P, p, x, c, causal)
    return x


def encode(P, c, tokens):
    """The last position's hidden vector after the encoder, compressed to d_e when asked."""
    x = blocks(P, "encoder.layers.", c["encoder_layers"], P["encoder.embed_tokens.weight"][tokens],
               c, not c["no_mask_encoder"])
    e = x[:, -1, :]
    return e @ P["encoder.down.weight"].T if c["embed_dim"] < c["d_model"] else e


def forward(P, c, tokens):
    Bn, Tn = tokens.shape
    D = c["d_model"]
    kind = c["kind"]
    if kind.endswith("-ae"):
        e = encode(P, c, tokens)
        if c["embed_dim"] < D:
            e = e @ P["decoder.up.weight"].T
        if c["unroll"]:
            nd = D // 2
            idx = torch.tensor([[(i + j) % D for j in range(nd)] for i in range(Tn)])   # (T, nd)
            x = e[:, idx] @ P["decoder.unroll.weight"].T           # window of position i: e[i..i+nd) wrapped
        else:
            x = e[:, None, :].expand(Bn, Tn, D)
        prefix, norm, embed = "decoder.", "decoder.norm.weight", "encoder.embed_tokens.weight"
    elif kind.endswith("-mem"):
        r = encode(P, c, tokens) @ P["memory.proj.weight"].T
        x = torch.cat([r[:, None, :], P["model.embed_tokens.weight"][tokens[:, :-1]]], dim=1)
        prefix, norm, embed = "model.", "model.norm.weight", "model.embed_tokens.weight"
    else:
        x = P["model.embed_tokens.weight"][tokens]
        prefix, norm, embed = "model.", "model.norm.weight", "model.embed_tokens.weight"
    x = blocks(P, prefix + "layers.", c["n_layers"], x, c, not c["no_mask_decoder"])
    x = rms_norm(x, P[norm], c["norm_eps"])
    return x @ (P[embed] if c["tied"] else P["lm_head.weight"]).T


def make(stem, variant, outdir, seed):
    c = dict(BASE, **variant)
    g = torch.Generator().manual_seed(seed)
    P = {}
    for name, shape in param_names(c):
        if name.endswith("mixer.weight"):
            P[name] = 0.3 * torch.randn(shape, generator=g)
        elif len(shape) == 1 and not name.endswith("mixer.bias"):   # norms near 1, not exactly
            P[name] = 1.0 + 0.1 * torch.randn(shape, generator=g)
        else:
            P[name] = 0.1 * torch.randn(shape, generator=g)
    seq = torch.randint(0, c["vocab_size"], (B, T + 1), generator=g)
    tokens, targets = seq[:, :T], seq[:, 1:]
    mask = torch.ones(B, T, dtype=torch.int64)
    mask[0, 3] = mask[1, 6] = 0
    meta = {"config": json.dumps(dict(c, B=B, T=T)), "format": "mixer_ref v1"}
    write_safetensors(os.path.join(outdir, stem + "_init.safetensors"), P, meta)

    params = {k: v.clone().requires_grad_(True) for k, v in P.items()}
    logits = forward(params, c, tokens)
    if c["kind"] == "mixer":                      # next tokens, counted where mask is set
        want, counted = targets, mask
    else:                                         # the chunk itself: token t real when t = 0 or target t-1 is
        want = tokens
        counted = torch.cat([torch.ones(B, 1, dtype=torch.int64), mask[:, :-1]], dim=1)
    t = want.clone()
    t[counted == 0] = -100
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), t.reshape(-1), ignore_index=-100)
    loss.backward()
    out = {"tokens": tokens.float(), "targets": targets.float(), "mask": mask.float(),
           "logits": logits.detach(), "loss": loss.detach().reshape(1)}
    for k, v in params.items():
        out["grad." + k] = v.grad.detach().clone()
    write_safetensors(os.path.join(outdir, stem + "_ref.safetensors"), out, meta)
    print(f"{stem}: {len(P)} tensors, loss {loss.item():.6f}")


def main():
    torch.set_num_threads(1)
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "fixtures")
    os.makedirs(outdir, exist_ok=True)
    for i, (stem, variant) in enumerate(VARIANTS.items()):
        make(stem, variant, outdir, 4000 + i)


if __name__ == "__main__":
    main()
