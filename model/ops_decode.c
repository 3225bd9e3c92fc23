/* model/ops_decode.c: the ops of a decode step over rows that belong to different sequences
 * (ops.h): products whose rows do not depend on each other, RoPE at per-row positions,
 * single-query attention over each row's own slot of a KV cache, scattered row writes. */
#include "model/ops.h"
#include "model/ops_clones.h"
#include "model/ops_math.h"
#include <math.h>
#include <string.h>

/* Output columns per parallel task of linear_rows (a task reads its 64 weight rows once per
 * pair of input rows). */
#define ROWS_COLS_PER_TASK 64

/* Eight lanes as one value: GCC's vector extension keeps each accumulator in a register
 * (one AVX register, or two SSE ones at x86-64-v2; the lanes compute the same either way).
 * The helpers are always inlined, so the ABI note GCC gives for passing such a value from
 * code built without AVX concerns no real call. */
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float v8f __attribute__((vector_size(32)));
static inline __attribute__((always_inline)) v8f ld8(const float *p) {
    v8f v;
    memcpy(&v, p, sizeof v);
    return v;
}
/* ops_dot8's combination of the lanes, then its tail. */
static inline __attribute__((always_inline)) float finish8(v8f l, const float *w, const float *x,
                                                          int i, int in) {
    float s = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
    for (; i < in; i++) s += w[i] * x[i];
    return s;
}

/* 4 weight rows x R input rows (R = 2, or 1 for the last odd row): each of the dot products
 * keeps ops_dot8's 8 lanes (lane j: elements j, j + 8, ... in order) and combines them the
 * same way, so every element equals ops_dot8(w_o, x_n) bit for bit; 4 R independent
 * accumulators keep the FMA units busy, and the weights are read once per R input rows. */
OPS_VARIANTS(void, rows_tile, (float *y, const float *w, const float *x, int n0, int n1, int o0,
                               int o1, int in, int out),
             (y, w, x, n0, n1, o0, o1, in, out)) {
    const int in8 = in / 8 * 8;
    int o = o0;
    for (; o + 4 <= o1; o += 4) {
        const float *w0 = w + (size_t)o * in, *w1 = w0 + in, *w2 = w1 + in, *w3 = w2 + in;
        int n = n0;
        for (; n + 2 <= n1; n += 2) {
            const float *x0 = x + (size_t)n * in, *x1 = x0 + in;
            v8f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, b0 = {0}, b1 = {0}, b2 = {0}, b3 = {0};
            for (int i = 0; i < in8; i += 8) {
                const v8f u0 = ld8(x0 + i), u1 = ld8(x1 + i);
                const v8f c0 = ld8(w0 + i), c1 = ld8(w1 + i), c2 = ld8(w2 + i), c3 = ld8(w3 + i);
                a0 += c0 * u0; a1 += c1 * u0; a2 += c2 * u0; a3 += c3 * u0;
                b0 += c0 * u1; b1 += c1 * u1; b2 += c2 * u1; b3 += c3 * u1;
            }
            float *y0 = y + (size_t)n * out + o, *y1 = y0 + out;
            y0[0] = finish8(a0, w0, x0, in8, in); y0[1] = finish8(a1, w1, x0, in8, in);
            y0[2] = finish8(a2, w2, x0, in8, in); y0[3] = finish8(a3, w3, x0, in8, in);
            y1[0] = finish8(b0, w0, x1, in8, in); y1[1] = finish8(b1, w1, x1, in8, in);
            y1[2] = finish8(b2, w2, x1, in8, in); y1[3] = finish8(b3, w3, x1, in8, in);
        }
        for (; n < n1; n++) {
            const float *x0 = x + (size_t)n * in;
            v8f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
            for (int i = 0; i < in8; i += 8) {
                const v8f u0 = ld8(x0 + i);
                a0 += ld8(w0 + i) * u0; a1 += ld8(w1 + i) * u0;
                a2 += ld8(w2 + i) * u0; a3 += ld8(w3 + i) * u0;
            }
            float *y0 = y + (size_t)n * out + o;
            y0[0] = finish8(a0, w0, x0, in8, in); y0[1] = finish8(a1, w1, x0, in8, in);
            y0[2] = finish8(a2, w2, x0, in8, in); y0[3] = finish8(a3, w3, x0, in8, in);
        }
    }
    for (; o < o1; o++)
        for (int n = n0; n < n1; n++) y[(size_t)n * out + o] = ops_dot8(w + (size_t)o * in, x + (size_t)n * in, in);
}

void linear_rows(float *y, const float *x, const float *w, int N, int in, int out) {
    const int tasks = (out + ROWS_COLS_PER_TASK - 1) / ROWS_COLS_PER_TASK;
#pragma omp parallel for schedule(static) if ((double)N * in * out >= (1 << 20))
    for (int t = 0; t < tasks; t++) {
        const int o0 = t * ROWS_COLS_PER_TASK, o1 = o0 + ROWS_COLS_PER_TASK < out ? o0 + ROWS_COLS_PER_TASK : out;
        rows_tile(y, w, x, 0, N, o0, o1, in, out);
    }
}

void qkv_split_rope_rows(float *q, float *k, float *v, const float *qkv, const float *cos_t,
                         const float *sin_t, int N, int H, int Hkv, int hd, const int *pos) {
    const int Dq = H * hd, Dkv = Hkv * hd, ld = Dq + 2 * Dkv, h2 = hd / 2;
    for (int n = 0; n < N; n++) {
        const float *row = qkv + (size_t)n * ld;
        const float *cs = cos_t + (size_t)pos[n] * h2, *sn = sin_t + (size_t)pos[n] * h2;
        if (q)
            for (int h = 0; h < H; h++)
                ops_rope_rotate(q + (size_t)n * Dq + h * hd, row + h * hd, cs, sn, hd, 1.0f);
        if (k)
            for (int h = 0; h < Hkv; h++)
                ops_rope_rotate(k + (size_t)n * Dkv + h * hd, row + Dq + h * hd, cs, sn, hd, 1.0f);
        if (v) memcpy(v + (size_t)n * Dkv, row + Dq + Dkv, sizeof(float) * Dkv);
    }
}

void rope_rows(float *out, const float *x, const float *cos_t, const float *sin_t, int N, int H,
               int hd, const int *pos) {
    const int h2 = hd / 2;
    for (int n = 0; n < N; n++)
        for (int h = 0; h < H; h++) {
            const size_t off = ((size_t)n * H + h) * hd;
            ops_rope_rotate(out + off, x + off, cos_t + (size_t)pos[n] * h2, sin_t + (size_t)pos[n] * h2, hd, 1.0f);
        }
}

/* One query row of one head over len keys of its cache rows, online softmax. */
OPS_VARIANTS(void, rows_att_head, (float *o, const float *q, const float *kc, const float *vc,
                                   int len, int ldk, int hd),
             (o, q, kc, vc, len, ldk, hd)) {
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

void attention_rows(float *out, const float *q, const float *kc, const float *vc, const int *base,
                    const int *len, int N, int H, int Hkv, int hd) {
    const int rep = H / Hkv, ldk = Hkv * hd;
#pragma omp parallel for collapse(2) schedule(static) if ((double)N * H * hd * 64 >= (1 << 20))
    for (int n = 0; n < N; n++)
        for (int h = 0; h < H; h++) {
            const size_t off = ((size_t)n * H + h) * hd, kv = (size_t)base[n] * ldk + (size_t)(h / rep) * hd;
            rows_att_head(out + off, q + off, kc + kv, vc + kv, len[n], ldk, hd);
        }
}

void scatter_rows(float *dst, int ld_dst, const int *dst_row, const float *src, int ld_src, int N,
                  int D) {
    for (int n = 0; n < N; n++)
        memcpy(dst + (size_t)dst_row[n] * ld_dst, src + (size_t)n * ld_src, sizeof(float) * D);
}
