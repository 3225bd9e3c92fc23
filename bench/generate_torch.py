#!/usr/bin/python3
"""PyTorch counterpart of bench/generate.c: generation with a key/value cache, batch 1 or a
static batch (--batch B: B sequences of the same prompt decoded together, as one batch from
the first token to the last; the peer of the service at B concurrent requests, bench/bench_serve.sh).

Its own KV-cache implementation of the same decoder (RMSNorm, GQA attention with RoPE in the
rotate_half layout, SwiGLU, tied head) and, with --model free, of the Free Transformer's
decoding path (seed 000: the prompt's latents from the encoder block reading the prompt,
every new position's latent uniform over 2^H, R = W_post[:, z] added to the key/value input
of block L/2). Same work as the C side: a prefill of --prompt tokens, then --new tokens each
sampled from softmax(logits) (torch.multinomial), one at a time. Reports the median over
--repeats of new tokens (all sequences) / wall time (prefill included, as in the C bench).

  /usr/bin/python3 bench/generate_torch.py [--model llama|free] [--prompt 16] [--new 256]
                                           [--batch 1] [--repeats 5] [--threads N] [--bf16] [--json]

--bf16: the model in bfloat16 (every weight, the cache and the activations, as model.to(
torch.bfloat16) gives a user; the logits' softmax in float32): PyTorch's bf16 inference mode.
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn.functional as F

S = dict(vocab_size=4096, d_model=256, n_layers=4, n_heads=4, n_kv_heads=2, d_ff=768,
         max_seq=1024, rope_theta=10000.0, norm_eps=1e-5, latent_bits=8)


def rms_norm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Model:
    def to(self, dtype):
        """Every tensor of the model in dtype."""
        for k, v in list(vars(self).items()):
            if torch.is_tensor(v):
                setattr(self, k, v.to(dtype))
            elif isinstance(v, dict) and v and all(torch.is_tensor(t) for t in v.values()):
                setattr(self, k, {n: t.to(dtype) for n, t in v.items()})
            elif isinstance(v, list) and v and isinstance(v[0], dict):
                setattr(self, k, [{n: t.to(dtype) for n, t in d.items()} for d in v])
        self.dtype = dtype
        return self

    def __init__(self, c, free, seed=1):
        g = torch.Generator().manual_seed(seed)
        D, F_, H, Hkv = c["d_model"], c["d_ff"], c["n_heads"], c["n_kv_heads"]
        hd = D // H
        self.c, self.free, self.hd, self.dtype = c, free, hd, torch.float32
        r = lambda *s: 0.02 * torch.randn(*s, generator=g)
        self.embed = r(c["vocab_size"], D)
        self.layers = [dict(n1=torch.ones(D), wq=r(H * hd, D), wk=r(Hkv * hd, D), wv=r(Hkv * hd, D),
                            wo=r(D, H * hd), n2=torch.ones(D), wg=r(F_, D), wu=r(F_, D), wd=r(D, F_))
                       for _ in range(c["n_layers"])]
        self.norm = torch.ones(D)
        if free:
            K = 1 << c["latent_bits"]
            self.zeta = r(D)
            self.enc = dict(n1=torch.ones(D), wq=r(H * hd, D), wk=r(Hkv * hd, D), wv=r(Hkv * hd, D),
                            wo=r(D, H * hd), n2=torch.ones(D), wg=r(F_, D), wu=r(F_, D), wd=r(D, F_))
            self.enc_norm = torch.ones(D)
            self.readout = r(c["latent_bits"], D)
            self.post = r(D, K)
        inv = (1.0 / c["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)).float()
        ang = torch.arange(c["max_seq"], dtype=torch.float32)[:, None] * inv[None, :]
        cos, sin = ang.double().cos().float(), ang.double().sin().float()
        self.cos, self.sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)   # (max_seq, hd)

    def new_cache(self, B, T):
        Hkv = self.c["n_kv_heads"]
        return [(torch.zeros(B, Hkv, T, self.hd, dtype=self.dtype), torch.zeros(B, Hkv, T, self.hd, dtype=self.dtype))
                for _ in self.layers]

    def attend(self, w, xq, xkv, pos, cache, causal=True):
        """One attention branch for T new rows at positions pos..pos+T-1 of B sequences
        (xq, xkv: (B, T, D)). With a cache the new keys/values are appended and the queries see
        every cached position."""
        c, hd = self.c, self.hd
        H, Hkv, B, T = c["n_heads"], c["n_kv_heads"], xq.shape[0], xq.shape[1]
        cos, sin = self.cos[pos:pos + T, None, :], self.sin[pos:pos + T, None, :]
        hq = rms_norm(xq, w["n1"], c["norm_eps"])
        hk = hq if xkv is xq else rms_norm(xkv, w["n1"], c["norm_eps"])
        q = (hq @ w["wq"].T).view(B, T, H, hd)
        k = (hk @ w["wk"].T).view(B, T, Hkv, hd)
        v = (hk @ w["wv"].T).view(B, T, Hkv, hd)
        q = (q * cos + rotate_half(q) * sin).transpose(1, 2)              # (B, H, T, hd)
        k = (k * cos + rotate_half(k) * sin).transpose(1, 2)              # (B, Hkv, T, hd)
        v = v.transpose(1, 2)
        if cache is not None:
            kc, vc = cache
            kc[:, :, pos:pos + T] = k
            vc[:, :, pos:pos + T] = v
            k, v = kc[:, :, :pos + T], vc[:, :, :pos + T]
        rep = H // Hkv
        q = q.reshape(B, Hkv, rep * T, hd)                                 # (B, Hkv, rep*T, hd)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)                      # (B, Hkv, rep*T, Tk)
        if causal and T > 1:
            Tk = k.shape[2]
            i = torch.arange(T).repeat(rep)[:, None] + (Tk - T)
            s = s.masked_fill(torch.arange(Tk)[None, :] > i, float("-inf"))
        a = (s.softmax(-1) @ v).view(B, Hkv, rep, T, hd).permute(0, 3, 1, 2, 4).reshape(B, T, H * hd)
        return xq + a @ w["wo"].T

    def mlp(self, w, x):
        h = rms_norm(x, w["n2"], self.c["norm_eps"])
        return x + (F.silu(h @ w["wg"].T) * (h @ w["wu"].T)) @ w["wd"].T

    def step(self, tokens, pos, cache, z=None, gen=None):
        """tokens (B, T) at positions pos.. -> (B, V) logits of the last one. Free Transformer:
        z (B, T) latent indices, or None for the prompt (the encoder draws them with gen)."""
        c, L = self.c, self.c["n_layers"]
        x = self.embed[tokens]
        half = L // 2 if self.free else L
        for l in range(half):
            x = self.mlp(self.layers[l], self.attend(self.layers[l], x, x, pos, cache[l]))
        if self.free:
            if z is None:   # encoder over the prompt only, non-causal, queries = zeta
                zq = self.zeta.expand_as(x)
                y = self.mlp(self.enc, self.attend(self.enc, zq, x, 0, None, causal=False))
                bits = rms_norm(y, self.enc_norm, c["norm_eps"]) @ self.readout.T
                b = torch.rand(bits.shape, generator=gen) < torch.sigmoid(bits.float())
                z = (b.long() << torch.arange(c["latent_bits"])).sum(-1)
            xkv = x + self.post.T[z]
            x = self.mlp(self.layers[half], self.attend(self.layers[half], x, xkv, pos, cache[half]))
            for l in range(half + 1, L):
                x = self.mlp(self.layers[l], self.attend(self.layers[l], x, x, pos, cache[l]))
        x = rms_norm(x[:, -1], self.norm, c["norm_eps"])
        return x @ self.embed.T


def generate(m, prompt, n_new, seed, B=1):
    gen = torch.Generator().manual_seed(seed)
    cache = m.new_cache(B, len(prompt) + n_new)
    K = 1 << m.c["latent_bits"]
    logits = m.step(prompt.expand(B, -1), 0, cache, None, gen)
    pos, out = len(prompt), []
    for s in range(n_new):
        tok = torch.multinomial(torch.softmax(logits.float(), -1), 1, generator=gen)   # (B, 1)
        out.append(tok)
        if s == n_new - 1:
            break
        z = torch.randint(0, K, (B, 1), generator=gen) if m.free else None
        logits = m.step(tok, pos, cache, z, gen)
        pos += 1
    return torch.cat(out, 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama", choices=["llama", "free"])
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--new", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    m = Model(S, a.model == "free")
    if a.bf16:
        m.to(torch.bfloat16)
    prompt = torch.randint(0, S["vocab_size"], (a.prompt,), generator=torch.Generator().manual_seed(2))
    times = []
    with torch.inference_mode():
        generate(m, prompt, 8, 0, a.batch)   # warm-up, not timed
        for r in range(a.repeats):
            t0 = time.perf_counter()
            generate(m, prompt, a.new, r + 1, a.batch)
            times.append(time.perf_counter() - t0)
    tok_s = a.batch * a.new / statistics.median(times)
    if a.json:
        print(json.dumps(dict(impl="torch", model=a.model, prompt=a.prompt, new=a.new, batch=a.batch,
                              dtype="bf16" if a.bf16 else "fp32",
                              repeats=a.repeats, threads=torch.get_num_threads(),
                              median_s=statistics.median(times), tok_s=tok_s)))
    else:
        print(f"PT {a.model}: {a.batch} x {a.new} tokens after a {a.prompt}-token prompt, "
              f"{torch.get_num_threads()} threads: {tok_s:.0f} tok/s (median of {a.repeats})")


if __name__ == "__main__":
    main()
