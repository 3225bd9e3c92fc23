/* model/kernels.h: the CUDA device's kernel bodies, one work item each, written once for
 * nvcc (model/device_cuda.cu runs them, one thread per item) and for the host (the test
 * shim tests/test_kernels.c runs every item in a loop and compares with the CPU ops).
 *
 * A body adds only indexing to ops_math.h's formulas: which element, row or column item
 * `it` is, and what it reads and writes. Reductions a body performs run over a fixed order
 * inside that one item (a row's sum, a column's sum over rows), so results never depend on
 * the launch geometry and no reduction needs atomics: the CUDA device is deterministic.
 *
 * Item spaces (what `it` ranges over) are stated at each body; cuda_launch.h maps a launch's
 * threads onto items (every item exactly once: tests/test_kernels.c checks it). */
#ifndef MODEL_KERNELS_H
#define MODEL_KERNELS_H
#include <stddef.h>
#include <stdint.h>

#include "common/rng.h"
#include "model/ops_math.h"

/* Largest head dimension the attention bodies support (their per-item accumulators). */
#define KB_MAX_HEAD_DIM 256

/* ---- embedding ---- */
/* it < N*D */
OPS_FN void kb_embedding_fwd(size_t it, float *out, const uint32_t *tok, const float *table, int D) {
    out[it] = table[(size_t)tok[it / D] * D + it % D];
}
/* it < D: column it of every token row, rows in order (a token may repeat) */
OPS_FN void kb_embedding_bwd(size_t it, float *dtable, const float *dout, const uint32_t *tok,
                             int N, int D) {
    for (int n = 0; n < N; n++) dtable[(size_t)tok[n] * D + it] += dout[(size_t)n * D + it];
}

/* ---- RMSNorm ---- */
/* it < N */
OPS_FN void kb_rmsnorm_fwd(size_t it, float *out, float *rstd, const float *x, const float *w,
                           int D, float eps) {
    rstd[it] = ops_rmsnorm_row(out + it * D, x + it * D, w, D, eps);
}
/* it < N */
OPS_FN void kb_rmsnorm_bwd_dx(size_t it, float *dx, const float *dout, const float *x,
                              const float *w, const float *rstd, int D) {
    ops_rmsnorm_row_backward(dx + it * D, dout + it * D, x + it * D, w, rstd[it], D);
}
/* it < D: dw[it] += sum over rows in order of dy * x * r */
OPS_FN void kb_rmsnorm_bwd_dw(size_t it, float *dw, const float *dout, const float *x,
                              const float *rstd, int N, int D) {
    float acc = dw[it];
    for (int n = 0; n < N; n++) acc += dout[(size_t)n * D + it] * x[(size_t)n * D + it] * rstd[n];
    dw[it] = acc;
}

/* ---- RoPE ---- */
/* it < B*T*H: head vector (b, t, h), position pos0 + t. accumulate: out += rotation. */
OPS_FN void kb_rope(size_t it, float *out, const float *x, const float *cos_t, const float *sin_t,
                    int T, int H, int hd, int pos0, float sign, int accumulate) {
    const size_t t = (it / H) % T, h2 = hd / 2;
    const float *cs = cos_t + (size_t)(pos0 + t) * h2, *sn = sin_t + (size_t)(pos0 + t) * h2;
    const float *xi = x + it * hd;
    float *oi = out + it * hd;
    for (size_t i = 0; i < h2; i++) {
        float a = xi[i], b = xi[i + h2], c = cs[i], s = sign * sn[i];
        float r0 = a * c - b * s, r1 = b * c + a * s;
        oi[i] = accumulate ? oi[i] + r0 : r0;
        oi[i + h2] = accumulate ? oi[i + h2] + r1 : r1;
    }
}
/* it < N: the fused q|k|v row n split and rotated (ops.h qkv_split_rope); NULL outputs skipped */
OPS_FN void kb_qkv_split(size_t it, float *q, float *k, float *v, const float *qkv,
                         const float *cos_t, const float *sin_t, int T, int H, int Hkv, int hd,
                         int pos0) {
    const int Dq = H * hd, Dkv = Hkv * hd, ld = Dq + 2 * Dkv, h2 = hd / 2;
    const size_t t = (size_t)(pos0 + (int)(it % T));
    ops_qkv_split_row(q ? q + it * Dq : NULL, k ? k + it * Dkv : NULL, v ? v + it * Dkv : NULL,
                      qkv + it * ld, cos_t + t * h2, sin_t + t * h2, H, Hkv, hd);
}
/* it < N: the backward (ops.h qkv_join_unrope), the fused row overwritten */
OPS_FN void kb_qkv_join(size_t it, float *dqkv, const float *dq, const float *dk, const float *dv,
                        const float *cos_t, const float *sin_t, int T, int H, int Hkv, int hd,
                        int pos0) {
    const int Dq = H * hd, Dkv = Hkv * hd, ld = Dq + 2 * Dkv, h2 = hd / 2;
    const size_t t = (size_t)(pos0 + (int)(it % T));
    ops_qkv_join_row(dqkv + it * ld, dq + it * Dq, dk + it * Dkv, dv + it * Dkv, cos_t + t * h2,
                     sin_t + t * h2, H, Hkv, hd);
}

/* ---- attention (ops.h: q (B,Tq,H,hd), k/v (B,Tk,Hkv,hd), lse (B,H,Tq)) ---- */
/* Keys query row i sees: [lo, hi) of ops_math.h's ops_att_range (causal, sliding window). */
OPS_FN float kb_dot(const float *a, const float *b, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}
/* it < B*H*Tq, as (b, h, i) with i fastest: one query row, online softmax over its keys. */
OPS_FN void kb_att_fwd(size_t it, float *out, float *lse, const float *q, const float *k,
                       const float *v, int Tq, int Tk, int H, int Hkv, int hd, int causal,
                       int window) {
    const int i = (int)(it % Tq), h = (int)((it / Tq) % H), b = (int)(it / ((size_t)Tq * H));
    const int kh = h / (H / Hkv);
    int lo, nk;
    ops_att_range(i, Tq, Tk, causal, window, &lo, &nk);
    const float scale = 1.0f / sqrtf((float)hd);
    const float *qi = q + (((size_t)b * Tq + i) * H + h) * hd;
    float *oi = out + (((size_t)b * Tq + i) * H + h) * hd;
    float acc[KB_MAX_HEAD_DIM];
    float m = -INFINITY, l = 0.0f;
    for (int d = 0; d < hd; d++) acc[d] = 0.0f;
    for (int j = lo; j < nk; j++) {
        const float *kj = k + (((size_t)b * Tk + j) * Hkv + kh) * hd;
        const float *vj = v + (((size_t)b * Tk + j) * Hkv + kh) * hd;
        float s = kb_dot(qi, kj, hd) * scale;
        float f = ops_online_softmax_rescale(&m, &l, s);
        if (f != 1.0f)
            for (int d = 0; d < hd; d++) acc[d] *= f;
        float p = ops_expf(s - m);
        l += p;
        for (int d = 0; d < hd; d++) acc[d] += p * vj[d];
    }
    float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int d = 0; d < hd; d++) oi[d] = acc[d] * inv;
    /* a row that sees no key: lse = +inf, so the backward's probabilities are 0 */
    lse[((size_t)b * H + h) * Tq + i] = l > 0.0f ? m + logf(l) : INFINITY;
}
/* it < B*H*Tq: Drow = dout_i . out_i (the softmax backward's row term) */
OPS_FN void kb_att_bwd_rowdot(size_t it, float *Drow, const float *dout, const float *out, int Tq,
                              int H, int hd) {
    const int i = (int)(it % Tq), h = (int)((it / Tq) % H), b = (int)(it / ((size_t)Tq * H));
    const size_t o = (((size_t)b * Tq + i) * H + h) * hd;
    Drow[((size_t)b * H + h) * Tq + i] = kb_dot(dout + o, out + o, hd);
}
/* P_ij and dS_ij = P_ij (dout_i . v_j - D_i) of row (b, h, i) and key j. */
OPS_FN void kb_att_pds(float *P, float *dS, const float *q, const float *k, const float *v,
                       const float *dout, const float *lse, const float *Drow, int b, int h,
                       int i, int j, int Tq, int Tk, int H, int Hkv, int hd) {
    const int kh = h / (H / Hkv);
    const float scale = 1.0f / sqrtf((float)hd);
    const size_t qo = (((size_t)b * Tq + i) * H + h) * hd, ko = (((size_t)b * Tk + j) * Hkv + kh) * hd;
    const size_t ro = ((size_t)b * H + h) * Tq + i;
    *P = ops_expf(kb_dot(q + qo, k + ko, hd) * scale - lse[ro]);
    *dS = *P * (kb_dot(dout + qo, v + ko, hd) - Drow[ro]);
}
/* it < B*H*Tq: dq_i += scale * sum_j dS_ij k_j, keys in order */
OPS_FN void kb_att_bwd_dq(size_t it, float *dq, const float *q, const float *k, const float *v,
                          const float *dout, const float *lse, const float *Drow, int Tq, int Tk,
                          int H, int Hkv, int hd, int causal, int window) {
    const int i = (int)(it % Tq), h = (int)((it / Tq) % H), b = (int)(it / ((size_t)Tq * H));
    const int kh = h / (H / Hkv);
    int lo, nk;
    ops_att_range(i, Tq, Tk, causal, window, &lo, &nk);
    const float scale = 1.0f / sqrtf((float)hd);
    float *dqi = dq + (((size_t)b * Tq + i) * H + h) * hd;
    for (int j = lo; j < nk; j++) {
        float P, dS;
        kb_att_pds(&P, &dS, q, k, v, dout, lse, Drow, b, h, i, j, Tq, Tk, H, Hkv, hd);
        const float *kj = k + (((size_t)b * Tk + j) * Hkv + kh) * hd;
        for (int d = 0; d < hd; d++) dqi[d] += scale * dS * kj[d];
    }
}
/* it < B*Hkv*Tk, as (b, kh, j) with j fastest: dk_j, dv_j over the group's query heads and
 * every query row that sees key j, in order (heads outer, rows inner). */
OPS_FN void kb_att_bwd_dkv(size_t it, float *dk, float *dv, const float *q, const float *k,
                           const float *v, const float *dout, const float *lse, const float *Drow,
                           int Tq, int Tk, int H, int Hkv, int hd, int causal, int window) {
    const int j = (int)(it % Tk), kh = (int)((it / Tk) % Hkv), b = (int)(it / ((size_t)Tk * Hkv));
    const int rep = H / Hkv;
    const float scale = 1.0f / sqrtf((float)hd);
    float *dkj = dk + (((size_t)b * Tk + j) * Hkv + kh) * hd;
    float *dvj = dv + (((size_t)b * Tk + j) * Hkv + kh) * hd;
    /* first query row that sees key j: i + (Tk - Tq) >= j */
    int i0 = causal ? j - (Tk - Tq) : 0;
    if (i0 < 0) i0 = 0;
    for (int h = kh * rep; h < (kh + 1) * rep; h++)
        for (int i = i0; i < Tq; i++) {
            int lo, hi;
            ops_att_range(i, Tq, Tk, causal, window, &lo, &hi);
            if (lo > j) break;   /* the windows of later rows start later still */
            if (j >= hi) continue;
            float P, dS;
            kb_att_pds(&P, &dS, q, k, v, dout, lse, Drow, b, h, i, j, Tq, Tk, H, Hkv, hd);
            const size_t qo = (((size_t)b * Tq + i) * H + h) * hd;
            for (int d = 0; d < hd; d++) {
                dkj[d] += scale * dS * q[qo + d];
                dvj[d] += P * dout[qo + d];
            }
        }
}

/* ---- SwiGLU ---- */
/* it < N*F */
OPS_FN void kb_swiglu_fwd(size_t it, float *out, const float *gate, const float *up) {
    out[it] = ops_silu(gate[it]) * up[it];
}
/* it < N*F; acc = 1 adds into dgate, dup, acc = 0 overwrites them */
OPS_FN void kb_swiglu_bwd(size_t it, float *dgate, float *dup, const float *dout,
                          const float *gate, const float *up, int acc) {
    float g = gate[it], dg = dout[it] * up[it] * ops_silu_grad(g), du = dout[it] * ops_silu(g);
    dgate[it] = acc ? dgate[it] + dg : dg;
    dup[it] = acc ? dup[it] + du : du;
}

/* ---- cross-entropy ---- */
/* it < N: the row's lse, its loss (0 when not counted) into row_loss, and with dz the fused
 * gradient (ops.h crossentropy_forward) */
OPS_FN void kb_ce_fwd(size_t it, float *row_loss, float *dz, float *lse, const float *z,
                      const uint32_t *tgt, const uint8_t *mask, int V, float scale) {
    const float *zr = z + it * V;
    const int counted = !mask || mask[it];
    float l = ops_logsumexp_row(zr, V);
    lse[it] = l;
    row_loss[it] = counted ? l - zr[tgt[it]] : 0.0f;
    if (dz) {
        if (counted) ops_crossentropy_row_backward(dz + it * V, zr, l, (int)tgt[it], V, scale);
        else
            for (int i = 0; i < V; i++) dz[it * V + i] = 0.0f;
    }
}
/* it < N: the separate backward, dz overwritten */
OPS_FN void kb_ce_bwd(size_t it, float *dz, const float *z, const float *lse, const uint32_t *tgt,
                      const uint8_t *mask, int V, float scale) {
    if (!mask || mask[it]) ops_crossentropy_row_backward(dz + it * V, z + it * V, lse[it], (int)tgt[it], V, scale);
    else
        for (int i = 0; i < V; i++) dz[it * V + i] = 0.0f;
}

/* ---- a decode step's rows (ops.h, ops_decode.c) ---- */
/* it < N*out: y[n, o] = ops_dot8(w_o, x_n): the CPU's bits at the same level of FMA use */
OPS_FN void kb_linear_rows(size_t it, float *y, const float *x, const float *w, int in, int out) {
    const size_t n = it / out, o = it % out;
    y[it] = ops_dot8(w + o * in, x + n * in, in);
}
/* it < N */
OPS_FN void kb_qkv_split_rows(size_t it, float *q, float *k, float *v, const float *qkv,
                              const float *cos_t, const float *sin_t, int H, int Hkv, int hd,
                              const int *pos) {
    const int Dq = H * hd, Dkv = Hkv * hd, ld = Dq + 2 * Dkv, h2 = hd / 2;
    ops_qkv_split_row(q ? q + it * Dq : NULL, k ? k + it * Dkv : NULL, v ? v + it * Dkv : NULL,
                      qkv + it * ld, cos_t + (size_t)pos[it] * h2, sin_t + (size_t)pos[it] * h2, H,
                      Hkv, hd);
}
/* it < N*H: head vector (n, h) rotated at position pos[n] */
OPS_FN void kb_rope_rows(size_t it, float *out, const float *x, const float *cos_t,
                         const float *sin_t, int H, int hd, const int *pos) {
    const int h2 = hd / 2, p = pos[it / H];
    ops_rope_rotate(out + it * hd, x + it * hd, cos_t + (size_t)p * h2, sin_t + (size_t)p * h2, hd, 1.0f);
}
/* it < N*H: query head (n, h) over len[n] cache rows from base[n] (ops_decode.c's rows_att_head) */
OPS_FN void kb_attention_rows(size_t it, float *out, const float *q, const float *kc,
                              const float *vc, const int *base, const int *len, int H, int Hkv,
                              int hd) {
    const size_t n = it / H, h = it % H, ldk = (size_t)Hkv * hd;
    const size_t kv = (size_t)base[n] * ldk + (h / (H / Hkv)) * hd;
    ops_attention_row(out + it * hd, q + it * hd, kc + kv, vc + kv, len[n], ldk, hd);
}
/* it < N*D */
OPS_FN void kb_scatter_rows(size_t it, float *dst, int ld_dst, const int *dst_row, const float *src,
                            int ld_src, int D) {
    const size_t n = it / D, i = it % D;
    dst[(size_t)dst_row[n] * ld_dst + i] = src[n * ld_src + i];
}

/* ---- element-wise and rows ---- */
OPS_FN void kb_add(size_t it, float *y, const float *a, const float *b) { y[it] = a[it] + b[it]; }
OPS_FN void kb_add_inplace(size_t it, float *y, const float *x) { y[it] += x[it]; }
OPS_FN void kb_scale(size_t it, float *x, float s) { x[it] *= s; }
/* it < N*D */
OPS_FN void kb_repeat_rows(size_t it, float *out, const float *row, int D) { out[it] = row[it % D]; }
/* it < D: out[it] += sum over rows in order */
OPS_FN void kb_sum_rows(size_t it, float *out, const float *x, int N, int D) {
    float acc = out[it];
    for (int n = 0; n < N; n++) acc += x[(size_t)n * D + it];
    out[it] = acc;
}
/* it < rows*D */
OPS_FN void kb_copy_rows(size_t it, float *dst, int ld_dst, const float *src, int ld_src, int D) {
    dst[(it / D) * ld_dst + it % D] = src[(it / D) * ld_src + it % D];
}

/* ---- the Free Transformer's latent ---- */
/* it < n */
OPS_FN void kb_uniform(size_t it, float *u, uint64_t key, uint64_t counter0) {
    u[it] = rng_counter_f32(key, counter0 + it);
}
/* it < N: bits = u < sigmoid(logits), idx = sum_h 2^h bit_h */
OPS_FN void kb_binmap_fwd(size_t it, uint32_t *idx, float *prob, const float *logits,
                          const float *u, int H) {
    uint32_t d = 0;
    for (int h = 0; h < H; h++) {
        float p = ops_binmap_prob(logits[it * H + h]);
        prob[it * H + h] = p;
        if (u[it * H + h] < p) d |= 1u << h;
    }
    idx[it] = d;
}
/* it < N */
OPS_FN void kb_binmap_kl(size_t it, float *kl, const float *logits, int H) {
    kl[it] = ops_binmap_kl_row(logits + it * H, H);
}
/* it < N */
OPS_FN void kb_free_bits_bwd(size_t it, float *dlogits, const float *logits, const float *kl,
                             const uint8_t *mask, int H, float kappa, float scale) {
    if ((!mask || mask[it]) && kl[it] > kappa)
        ops_binmap_kl_row_backward(dlogits + it * H, logits + it * H, H, scale);
}
/* it < N*D: r[n, i] = w[i, idx[n]] */
OPS_FN void kb_post_fwd(size_t it, float *r, const float *w, const uint32_t *idx, int D, int H) {
    const size_t n = it / D, i = it % D;
    r[it] = w[i * ((size_t)1 << H) + idx[n]];
}
/* it < D: dw[it, idx[n]] += dr[n, it], rows in order */
OPS_FN void kb_post_bwd_dw(size_t it, float *dw, const float *dr, const uint32_t *idx, int N, int D,
                           int H) {
    const size_t K = (size_t)1 << H;
    for (int n = 0; n < N; n++) dw[it * K + idx[n]] += dr[(size_t)n * D + it];
}
/* it < rows: dlogits[it] += the pass-through gradient from dz[it] (2^H, overwritten with
 * dz * G), as ops_binmap.c's binmap_backward */
OPS_FN void kb_binmap_bwd(size_t it, float *dlogits, float *dz, const float *prob, int H) {
    ops_binmap_backward_row(dlogits + it * H, dz + it * ((size_t)1 << H), prob + it * H, H);
}

/* ---- the masked mixer (ops_mixer.c) ---- */
/* it < M*T*T: element (m, t, s) of the masked weight; acc adds into out */
OPS_FN void kb_mixer_tril(size_t it, float *out, const float *w, int T, int acc) {
    const int s = (int)(it % T), t = (int)((it / T) % T);
    const float v = s <= t ? w[it] : 0.0f;
    out[it] = acc ? out[it] + v : v;
}
/* it < B*T*D */
OPS_FN void kb_mixer_bias_fwd(size_t it, float *y, const float *bias, int T, int D, int h, int Tb) {
    const int c = (int)(it % D), t = (int)((it / D) % T);
    y[it] += bias[(size_t)(c / (D / h)) * Tb + t];
}
/* it < h*T: (head i, position t), rows b in order, the head's columns in order */
OPS_FN void kb_mixer_bias_bwd(size_t it, float *dbias, const float *dy, int B, int T, int D, int h,
                              int Tb) {
    const int i = (int)(it / T), t = (int)(it % T), dh = D / h;
    float acc = dbias[(size_t)i * Tb + t];
    for (int b = 0; b < B; b++)
        for (int c = 0; c < dh; c++) acc += dy[((size_t)b * T + t) * D + (size_t)i * dh + c];
    dbias[(size_t)i * Tb + t] = acc;
}
/* it < B*T*nd */
OPS_FN void kb_unroll_fwd(size_t it, float *out, const float *e, int T, int D, int nd) {
    const size_t r = it / nd;
    const int j = (int)(it % nd), i = (int)(r % T);
    out[it] = e[(r / T) * D + (i + j) % D];
}
/* it < B*D: element c of vector b, positions in order */
OPS_FN void kb_unroll_bwd(size_t it, float *de, const float *dout, int T, int D, int nd) {
    const int c = (int)(it % D);
    const size_t b = it / D;
    float acc = de[it];
    for (int i = 0; i < T; i++) {
        const int j = ((c - i) % D + D) % D;
        if (j < nd) acc += dout[(b * T + i) * nd + j];
    }
    de[it] = acc;
}
/* it < n: the stored embedding's codec, one element (ops_math.h) */
OPS_FN void kb_embed_code_fwd(size_t it, float *y, const float *x, const float *u, float range,
                              int qbits, int nbits) {
    y[it] = ops_embed_code(x[it], range, qbits, u ? u[it] : 0.5f, u ? nbits : 0);
}
OPS_FN void kb_embed_code_bwd(size_t it, float *dx, const float *dy, const float *x, float range) {
    dx[it] = dy[it] * ops_embed_code_grad(x[it], range);
}
/* ---- the LTM's Gaussian latents (ops.h ops_latent.c) ---- */
/* it < L*B*n, as (l, b, i) with i fastest */
OPS_FN void kb_latent_normal(size_t it, float *x, int B, int n, uint64_t key, uint64_t row0,
                             float mean, float std) {
    const size_t i = it % n, b = (it / n) % B, l = it / ((size_t)n * B);
    x[it] = mean + std * ops_counter_normal(rng_counter_key(key, row0 + b), l * n + i);
}
/* it < n */
OPS_FN void kb_latent_sample(size_t it, float *z, const float *mu, const float *ls, const float *eps) {
    z[it] = mu[it] + expf(ls[it]) * eps[it];
}
/* it < B: sequence it's KL, layers then elements in order, in double */
OPS_FN void kb_latent_kl(size_t it, float *kl, const float *mu, const float *ls, int L, int B, int n) {
    double s = 0.0;
    for (int l = 0; l < L; l++) {
        const size_t o = ((size_t)l * B + it) * n;
        for (int i = 0; i < n; i++) s += ops_latent_kl(mu[o + i], ls[o + i]);
    }
    kl[it] = (float)s;
}
/* it < n */
OPS_FN void kb_latent_bwd(size_t it, float *dmu, float *dls, const float *dz, const float *mu,
                          const float *ls, const float *eps, float kl_scale) {
    ops_latent_grad(&dmu[it], &dls[it], dz[it], mu[it], ls[it], eps[it], kl_scale);
}

/* ---- AdamW ---- */
/* it < ceil(n / OPS_SUMSQ_CHUNK): the chunk's sum of squares in double (ops_adamw.c's chunks) */
OPS_FN void kb_sumsq_chunk(size_t it, double *part, const float *x, size_t n) {
    const size_t lo = it * OPS_SUMSQ_CHUNK, hi = lo + OPS_SUMSQ_CHUNK < n ? lo + OPS_SUMSQ_CHUNK : n;
    part[it] = ops_sumsq_chunk(x, lo, hi);
}
/* it < n */
OPS_FN void kb_adamw(size_t it, float *p, float *g, float *m, float *v, float clip, float decay_mul,
                     float b1, float b2, float eps, float step_size, float bc2_sqrt) {
    ops_adamw_element(&p[it], &g[it], &m[it], &v[it], clip, decay_mul, b1, b2, eps, step_size,
                      bc2_sqrt);
}
#endif
