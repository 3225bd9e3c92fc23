/* model/ops_math.h: per-element and per-row math shared by the CPU ops and a future CUDA backend.
 *
 * Everything here is `static inline` and free of libc calls other than the math.h ones that CUDA
 * also provides, so the same text compiles under gcc (the CPU ops, model/ops_X.c) and nvcc (kernels in
 * the .cu files of model/), and the two backends cannot drift apart: the formula lives in one place. */
#ifndef MODEL_OPS_MATH_H
#define MODEL_OPS_MATH_H
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "common/rng.h"

#ifdef __CUDACC__
#define OPS_FN static inline __host__ __device__
#define OPS_SIMD
#define OPS_SIMD_SUM(v)
#define OPS_SIMD_MAX(v)
#else
/* always_inline: the ops call these from AVX2/AVX-512 clones (ops_clones.h); a call that is
 * not inlined runs the baseline build of the function instead (seen: the cross-entropy row's
 * log-sum-exp stayed a 4-lane call). */
#define OPS_FN static inline __attribute__((always_inline))
/* Lets the compiler vectorise a loop (and reassociate a float sum in a fixed, compile-time
 * order: results stay deterministic). */
#define OPS_SIMD _Pragma("omp simd")
#define OPS_PRAGMA_(x) _Pragma(#x)
#define OPS_SIMD_SUM(v) OPS_PRAGMA_(omp simd reduction(+ : v))
/* A max is exact in any order: vectorising it changes no bit. */
#define OPS_SIMD_MAX(v) OPS_PRAGMA_(omp simd reduction(max : v))
#endif

/* ---- exp that vectorises ----------------------------------------------------------------
 * libm's expf is a call the compiler cannot vectorise; attention evaluates one per (query,
 * key) pair and spent ~20% of its time there. This is the classic Cephes expf: x = n ln2 + r,
 * |r| <= ln2/2, exp(r) by a degree-6 polynomial, times 2^n built in the exponent bits.
 * Relative error ~2 ulp over the whole range; returns 0 below -87.3 (where expf underflows to
 * subnormals) and treats arguments above 88 as 88 (softmax feeds it values <= 0; sigmoid
 * only needs 1/(1+e^88) ~ 0). */
OPS_FN float ops_exp2i_(int n) {
#ifdef __CUDA_ARCH__
    return __int_as_float((n + 127) << 23);
#else
    union { int i; float f; } u;
    u.i = (n + 127) << 23;
    return u.f;
#endif
}
OPS_FN float ops_expf(float x) {
    const float lo = -87.33654f, hi = 88.0f;
    float xc = x < lo ? lo : (x > hi ? hi : x);
    float n = floorf(xc * 1.44269504088896341f + 0.5f);
    float r = xc - n * 0.693359375f - n * -2.12194440e-4f;  /* ln2 in two parts: exact n*C1 */
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    float y = p * ops_exp2i_((int)n);
    return x < lo ? 0.0f : y;
}

/* ---- SiLU: x * sigmoid(x) -------------------------------------------------------------- */
OPS_FN float ops_sigmoid(float x) { return 1.0f / (1.0f + ops_expf(-x)); }
OPS_FN float ops_silu(float x) { return x * ops_sigmoid(x); }
/* d/dx silu(x) = s + x s (1 - s), s = sigmoid(x). */
OPS_FN float ops_silu_grad(float x) {
    float s = ops_sigmoid(x);
    return s * (1.0f + x * (1.0f - s));
}

/* ---- RMSNorm of one row of length d ----------------------------------------------------
 * y = w * x * r, r = 1 / sqrt(mean(x^2) + eps). Returns r (the backward needs it). The sum of
 * squares is accumulated in float in a vectorised order fixed at compile time (PyTorch's CPU
 * kernel also sums in vector lanes; the fixtures agree to float rounding either way). */
OPS_FN float ops_rmsnorm_row(float *y, const float *x, const float *w, int d, float eps) {
    float ss = 0.0f;
    OPS_SIMD_SUM(ss)
    for (int i = 0; i < d; i++) ss += x[i] * x[i];
    float r = 1.0f / sqrtf(ss / (float)d + eps);
    OPS_SIMD
    for (int i = 0; i < d; i++) y[i] = w[i] * (x[i] * r);
    return r;
}
/* Backward of one row with a residual: dx = res + (r*(w*dy) - x * r^3/d * sum(w*dy*x)); res
 * may be dx (then it is dx += ..., the same expression); dw is NOT touched here (the caller
 * reduces dw over rows in a fixed order, see ops_rmsnorm.c). */
OPS_FN void ops_rmsnorm_row_backward_res(float *dx, const float *res, const float *dy,
                                         const float *x, const float *w, float r, int d) {
    float dot = 0.0f;
    OPS_SIMD_SUM(dot)
    for (int i = 0; i < d; i++) dot += w[i] * dy[i] * x[i];
    float c = dot * r * r * r / (float)d;
    OPS_SIMD
    for (int i = 0; i < d; i++) dx[i] = res[i] + (r * w[i] * dy[i] - c * x[i]);
}
/* dx += r*(w*dy) - x * r^3/d * sum(w*dy*x) */
OPS_FN void ops_rmsnorm_row_backward(float *dx, const float *dy, const float *x, const float *w,
                                     float r, int d) {
    ops_rmsnorm_row_backward_res(dx, dx, dy, x, w, r, d);
}

/* ---- Rotary embedding, rotate_half layout -----------------------------------------------
 * A head vector of even length hd is rotated pairwise on (i, i + hd/2), i < hd/2, by the
 * angle p * theta^(-2i/hd):  out_i = x_i c - x_{i+h} s,  out_{i+h} = x_{i+h} c + x_i s.
 * cs/sn hold cos/sin of the angles of position p (hd/2 each). sign = -1 applies the inverse
 * rotation, which is exactly the backward (a rotation's transpose is its inverse).
 * out may alias x. */
OPS_FN void ops_rope_rotate(float *out, const float *x, const float *cs, const float *sn, int hd,
                            float sign) {
    int h = hd / 2;
    for (int i = 0; i < h; i++) {
        float a = x[i], b = x[i + h], c = cs[i], s = sign * sn[i];
        out[i] = a * c - b * s;
        out[i + h] = b * c + a * s;
    }
}
/* The angle's frequency for pair i: theta^(-2i/hd), computed in double then rounded. */
OPS_FN float ops_rope_freq(int i, int hd, float theta) {
    return (float)(1.0 / pow((double)theta, (double)(2 * i) / (double)hd));
}

/* ---- Online softmax -------------------------------------------------------------------
 * Running state (m = max so far, l = sum of exp(s - m)). Before adding terms whose maximum is
 * new_max, call this: it raises m if needed, rescales l, and returns the factor by which the
 * caller must also rescale its weighted accumulator. Starting state: m = -INFINITY, l = 0. */
OPS_FN float ops_online_softmax_rescale(float *m, float *l, float new_max) {
    if (new_max <= *m) return 1.0f;
    float f = (*m == -INFINITY) ? 0.0f : expf(*m - new_max);
    *l *= f;
    *m = new_max;
    return f;
}

/* ---- Which keys a query row sees -----------------------------------------------------
 * Queries are the LAST Tq positions of the Tk keys: row i sits at position p = i + (Tk - Tq).
 * Non-causal: every key. Causal: keys j <= p. Causal with a sliding window W > 0 (seed 003's
 * short context): only the W newest of those, p - W < j <= p. The row sees [*lo, *hi) (empty
 * when *lo >= *hi); a window without causal is ignored. */
OPS_FN void ops_att_range(int i, int Tq, int Tk, int causal, int window, int *lo, int *hi) {
    if (!causal) { *lo = 0; *hi = Tk; return; }
    int p = i + (Tk - Tq), h = p + 1, l = window > 0 ? p - window + 1 : 0;
    *hi = h < 0 ? 0 : (h > Tk ? Tk : h);
    *lo = l < 0 ? 0 : l;
}

/* ---- Cross-entropy of one row of logits -------------------------------------------------
 * One exponential per logit: e_i = exp(z_i - max) is kept (in a scratch row, or a GPU block's
 * shared memory) while its sum s is taken, lse = max + log s, the loss of target t is
 * lse - z[t], and the gradient dz = scale (softmax(z) - onehot(t)) is written from the kept e_i as
 * dz_i = e_i c, c = scale exp(max - lse) (= scale / s, to rounding; lse's own rounding enters
 * as it did in the former scale exp(z_i - lse)), dz[t] = e_t c - scale. The separate backward,
 * given lse, finds the max again (no exponential) and recomputes e_i: the fused forward's bits. */
OPS_FN float ops_max_row(const float *z, int v) {
    float mx = -INFINITY;
    OPS_SIMD_MAX(mx)
    for (int i = 0; i < v; i++) mx = z[i] > mx ? z[i] : mx;
    return mx;
}
/* e[i] = exp(z[i] - mx) (e may alias z), returning their sum */
OPS_FN float ops_exp_row(float *e, const float *z, float mx, int v) {
    float s = 0.0f;
    OPS_SIMD_SUM(s)
    for (int i = 0; i < v; i++) {
        const float x = ops_expf(z[i] - mx);
        e[i] = x;
        s += x;
    }
    return s;
}
/* log-sum-exp of a row without keeping e (the kernel bodies, kernels.h) */
OPS_FN float ops_logsumexp_row(const float *z, int v) {
    const float mx = ops_max_row(z, v);
    float s = 0.0f;
    OPS_SIMD_SUM(s)
    for (int i = 0; i < v; i++) s += ops_expf(z[i] - mx);
    return mx + logf(s);
}
/* the gradient's factor c (above) and its two element forms */
OPS_FN float ops_ce_factor(float mx, float lse, float scale) { return scale * ops_expf(mx - lse); }
OPS_FN float ops_ce_grad(float e, float c) { return e * c; }
OPS_FN float ops_ce_grad_target(float e, float c, float scale) { return e * c - scale; }
/* dz = scale * (softmax(z) - onehot(t)) given lse; dz may alias z. */
OPS_FN void ops_crossentropy_row_backward(float *dz, const float *z, float lse, int t, int v,
                                          float scale) {
    const float mx = ops_max_row(z, v), c = ops_ce_factor(mx, lse, scale);
    const float et = ops_expf(z[t] - mx);   /* before dz, which may overwrite z */
    OPS_SIMD
    for (int i = 0; i < v; i++) dz[i] = ops_ce_grad(ops_expf(z[i] - mx), c);
    dz[t] = ops_ce_grad_target(et, c, scale);
}

/* ---- the gradient norm's sum of squares: chunks of this many elements, each summed in
 * double, the chunks added in order (ops_adamw.c, kernels.h): the same total for every thread
 * count (the CUDA device sums a chunk in its own order: the same to ~1e-16) ---- */
#define OPS_SUMSQ_CHUNK 4096
/* One chunk x[lo .. hi): 16 lane sums in double (lane i takes elements lo + i, lo + i + 16,
 * ...), folded as l[i] += l[i + w] for w = 8, 4, 2, 1, then the (hi - lo) % 16 tail in order.
 * Every vector width gives the same bits (each lane is its own chain; a float squared in
 * double is exact, so FMA contraction changes nothing either). A single chain was
 * latency-bound: one dependent double add per element, 20 ms of an M step (bench/NOTES.md). */
OPS_FN double ops_sumsq_chunk(const float *x, size_t lo, size_t hi) {
    double l[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    size_t j = lo;
    for (; j + 16 <= hi; j += 16)
        for (int i = 0; i < 16; i++) l[i] += (double)x[j + i] * x[j + i];
    for (int w = 8; w >= 1; w /= 2)
        for (int i = 0; i < w; i++) l[i] += l[i + w];
    double s = l[0];
    for (; j < hi; j++) s += (double)x[j] * x[j];
    return s;
}

/* ---- AdamW, one element (torch.optim.AdamW's single-tensor arithmetic; adamw.h) ---- */
/* g is read, never written: the clipped gradient g * clip lives in a register (storing it back
 * moved 4 bytes an element that no one reads: the next step zeroes the gradients first) */
OPS_FN void ops_adamw_element(float *p, const float *g, float *m, float *v, float clip, float decay_mul,
                              float b1, float b2, float eps, float step_size, float bc2_sqrt) {
    const float gc = clip != 1.0f ? *g * clip : *g;
    if (decay_mul != 1.0f) *p *= decay_mul;
    *m = b1 * *m + (1.0f - b1) * gc;
    *v = b2 * *v + (1.0f - b2) * gc * gc;
    float denom = sqrtf(*v) / bc2_sqrt + eps;
    *p -= step_size * *m / denom;
}

/* ---- the Binary Mapper (seed 000 eq. 6-8) and its KL (eq. 4), per bit ----
 * Probabilities and KL in double where they are summed; libm's exp, which CUDA provides. */
OPS_FN float ops_binmap_prob(float logit) { return 1.0f / (1.0f + expf(-logit)); }
/* binary_entropy(sigmoid(l)) = softplus(l) - l sigmoid(l): stable for any l */
OPS_FN double ops_bin_entropy_logit(double l) {
    double sp = l > 0 ? l + log1p(exp(-l)) : log1p(exp(l));
    return sp - l / (1.0 + exp(-l));
}
/* KL_t = H log 2 - sum_h binary_entropy(sigmoid(l_h)), clamped at 0 (the exact value is >= 0;
 * rounding may give -1e-16). */
OPS_FN float ops_binmap_kl_row(const float *logits, int H) {
    double kl = H * 0.69314718055994530942;
    for (int h = 0; h < H; h++) kl -= ops_bin_entropy_logit(logits[h]);
    return kl > 0 ? (float)kl : 0.0f;
}
/* dKL/dl_h = l p (1 - p), times scale, accumulated */
OPS_FN void ops_binmap_kl_row_backward(float *dlogits, const float *logits, int H, float scale) {
    for (int h = 0; h < H; h++) {
        double l = logits[h], p = 1.0 / (1.0 + exp(-l));
        dlogits[h] += (float)(scale * l * p * (1.0 - p));
    }
}
/* The Binary Mapper's dense pass-through for one position: c (2^H) holds dZ on entry and
 * dZ * G on exit (G a product over bits, applied one bit at a time, no 2^H buffer);
 * dlogits_h += sum_d' c_d' (b_h(d') - p_h) = s_h - p_h s, with s_h over d' whose bit h is 1
 * (sums in double, in index order). */
OPS_FN void ops_binmap_backward_row(float *dlogits, float *c, const float *p, int H) {
    const size_t K = (size_t)1 << H;
    for (int h = 0; h < H; h++) {
        const size_t half = (size_t)1 << h;
        const float p1 = p[h], p0 = 1.0f - p[h];
        for (size_t base = 0; base < K; base += 2 * half) {
            for (size_t j = 0; j < half; j++) c[base + j] *= p0;
            for (size_t j = 0; j < half; j++) c[base + half + j] *= p1;
        }
    }
    double s = 0;
    for (size_t j = 0; j < K; j++) s += c[j];
    for (int h = 0; h < H; h++) {
        const size_t half = (size_t)1 << h;
        double sh = 0;
        for (size_t base = half; base < K; base += 2 * half)
            for (size_t j = 0; j < half; j++) sh += c[base + j];
        dlogits[h] += (float)(sh - p[h] * s);
    }
}
/* ---- the LTM's Gaussian latents (seed 003 eq. 5), one element ----
 * q(z) = N(mu, sigma^2) with sigma = exp(ls); z = mu + sigma eps (reparameterised). Its KL to
 * N(0, 1): 0.5 (mu^2 + sigma^2 - 1) - ls, in double (summed per sequence). */
OPS_FN double ops_latent_kl(float mu, float ls) {
    const double m = mu, l = ls;
    return 0.5 * (m * m + exp(2.0 * l) - 1.0) - l;
}
/* The gradients of (the decoder's loss with dz = dL/dz) + kl_scale * KL w.r.t. mu and ls:
 * dmu = dz + kl_scale mu, dls = dz eps sigma + kl_scale (sigma^2 - 1). */
OPS_FN void ops_latent_grad(float *dmu, float *dls, float dz, float mu, float ls, float eps,
                            float kl_scale) {
    const float sig = expf(ls);
    *dmu = dz + kl_scale * mu;
    *dls = dz * eps * sig + kl_scale * (sig * sig - 1.0f);
}
/* A standard normal from the counter draws 2i and 2i + 1 of a stream (Box-Muller in double,
 * the cosine branch): a function of (key, i) alone, so every device draws the same number. */
OPS_FN float ops_counter_normal(uint64_t key, uint64_t i) {
    double u1 = (double)(rng_counter_u64(key, 2 * i) >> 11) * (1.0 / 9007199254740992.0);
    double u2 = (double)(rng_counter_u64(key, 2 * i + 1) >> 11) * (1.0 / 9007199254740992.0);
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* ---- the stored embedding's codec (seed 004; model/mixers.h), one element ----
 * x clamped to [-range, range] (range 0: not bounded); with qbits in 1..24 rounded to the
 * nearest of the 2^qbits evenly spaced levels -range + k step, k = 0 .. 2^qbits - 1 (what a
 * qbits-bit code stores: the value read is a function of k alone); with u (a uniform in
 * [0, 1)) and nbits > 0, the noise (u - 1/2) step(nbits) added: seed 004's quantization-aware
 * training, U(-q, q) with q half the spacing of the levels the evaluation will round to.
 * A NaN stays NaN (comparisons, not fminf, so a diverged run is not hidden). */
OPS_FN float ops_embed_step(float range, int bits) {
    return 2.0f * range / (float)((1u << bits) - 1u);
}
OPS_FN float ops_embed_code(float x, float range, int qbits, float u, int nbits) {
    if (range > 0.0f) {
        x = x < -range ? -range : x > range ? range : x;
        if (qbits > 0 && qbits <= 24) {
            const float step = ops_embed_step(range, qbits);
            x = -range + rintf((x + range) / step) * step;
        }
        if (nbits > 0) x += (u - 0.5f) * ops_embed_step(range, nbits);
    }
    return x;
}
/* d code / d x: 1 inside the clamp's range (the rounding passes the gradient straight
 * through), 0 where x was clamped. */
OPS_FN float ops_embed_code_grad(float x, float range) {
    return range <= 0.0f || (x > -range && x < range) ? 1.0f : 0.0f;
}

/* ---- a dot product whose association is fixed by n alone ----
 * 8 lane sums (lane j takes elements j, j + 8, ...) combined as
 * ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)), then the n % 8 tail in order. Whatever
 * vector width runs it, and whichever rows are computed beside it, a row's result is the same
 * bits (within one instruction-set level: FMA contraction follows the level): the decode
 * step's products use it so that a request's text does not depend on the batch it is in. */
OPS_FN float ops_dot8(const float *a, const float *b, int n) {
    float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) l[j] += a[i + j] * b[i + j];
    float s = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}
/* ---- One query row of one head over len cached keys (the decode step's attention) ----
 * Key/value rows j at kc/vc + j * ldk; online softmax over the keys in order; o (hd) is
 * overwritten, o = 0 when len = 0. kb_attention_rows runs it on a GPU, attention_rows
 * (ops_decode.c) on a CPU, whose vector paths for hd % 8 == 0 do these operations in this
 * order with the output row in registers. */
OPS_FN void ops_attention_row(float *o, const float *q, const float *kc, const float *vc, int len,
                              size_t ldk, int hd) {
    const float scale = 1.0f / sqrtf((float)hd);
    float m = -INFINITY, l = 0.0f;
    for (int d = 0; d < hd; d++) o[d] = 0.0f;
    for (int j = 0; j < len; j++) {
        const float *kj = kc + (size_t)j * ldk, *vj = vc + (size_t)j * ldk;
        const float s = ops_dot8(q, kj, hd) * scale;
        const float f = ops_online_softmax_rescale(&m, &l, s);
        if (f != 1.0f)
            for (int d = 0; d < hd; d++) o[d] *= f;
        const float p = ops_expf(s - m);
        l += p;
        for (int d = 0; d < hd; d++) o[d] += p * vj[d];
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int d = 0; d < hd; d++) o[d] *= inv;
}

/* ---- the fused q|k|v product's row (Dq + 2 Dkv floats) split into q, k rotated at the
 * position whose cos/sin rows are cs/sn, and v copied; a NULL destination is skipped. The
 * backward joins dq, dk rotated back and dv into the fused row (overwritten). ---- */
OPS_FN void ops_qkv_split_row(float *q, float *k, float *v, const float *row, const float *cs,
                              const float *sn, int H, int Hkv, int hd) {
    const int Dq = H * hd, Dkv = Hkv * hd;
    if (q)
        for (int h = 0; h < H; h++) ops_rope_rotate(q + h * hd, row + h * hd, cs, sn, hd, 1.0f);
    if (k)
        for (int h = 0; h < Hkv; h++) ops_rope_rotate(k + h * hd, row + Dq + h * hd, cs, sn, hd, 1.0f);
    if (v)
        for (int i = 0; i < Dkv; i++) v[i] = row[Dq + Dkv + i];
}
OPS_FN void ops_qkv_join_row(float *row, const float *dq, const float *dk, const float *dv,
                             const float *cs, const float *sn, int H, int Hkv, int hd) {
    const int Dq = H * hd, Dkv = Hkv * hd;
    for (int h = 0; h < H; h++) ops_rope_rotate(row + h * hd, dq + h * hd, cs, sn, hd, -1.0f);
    for (int h = 0; h < Hkv; h++) ops_rope_rotate(row + Dq + h * hd, dk + h * hd, cs, sn, hd, -1.0f);
    for (int i = 0; i < Dkv; i++) row[Dq + Dkv + i] = dv[i];
}

/* ---- bf16: the rounding of precision bf16 (model/precision.h) ---------------------------
 * bf16 is the top half of an fp32: sign, the same 8-bit exponent, 7 stored mantissa bits
 * (8 significant). Rounding to nearest, ties to even, is done on the bit pattern: add
 * 0x7fff plus the lowest kept bit, then cut the low 16 bits. The pattern is monotonic in the
 * value, so this is exact for normal and subnormal numbers alike, carries into the exponent
 * when the mantissa overflows, and turns values at or beyond max finite + half an ulp
 * (0x7f7f8000 and up) into infinity. Infinity stays infinity (its low half is 0). A NaN would
 * lose its payload (and could become infinity) by that addition, so it only gets its quiet bit
 * set: NaN stays NaN, sign kept. The same text runs on the CPU and in CUDA kernels; it
 * agrees with PyTorch's float -> bfloat16 conversion for every non-NaN input. */
OPS_FN uint32_t ops_f32_bits(float x) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(x);
#else
    union { float f; uint32_t u; } v;
    v.f = x;
    return v.u;
#endif
}
OPS_FN float ops_f32_from_bits(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    union { uint32_t u; float f; } v;
    v.u = u;
    return v.f;
#endif
}
OPS_FN uint16_t ops_bf16_from_float(float x) {
    const uint32_t u = ops_f32_bits(x);
    const uint32_t r = (u & 0x7fffffffu) > 0x7f800000u ? (u | 0x00400000u)
                                                       : u + 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(r >> 16);
}
OPS_FN float ops_bf16_to_float(uint16_t h) { return ops_f32_from_bits((uint32_t)h << 16); }
/* x rounded to the nearest bf16, as an fp32 (the low 16 bits zero): ops_bf16_from_float's
 * bits, written for the loops that round fp32 values in place of other work (the emulated bf16
 * path's producers): the NaN test as a float compare (one instruction where the integer
 * test took three and two constants: x != x exactly when the magnitude's pattern is above
 * 0x7f800000), the cut as a mask. Checked against ops_bf16_from_float for every pattern. */
OPS_FN float ops_bf16_round(float x) {
    const uint32_t u = ops_f32_bits(x);
    const uint32_t r = x != x ? (u | 0x00400000u) : u + 0x7fffu + ((u >> 16) & 1u);
    return ops_f32_from_bits(r & 0xffff0000u);
}
#endif
