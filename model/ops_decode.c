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

/* 4 weight rows x 2 input rows: each of the 8 dot products keeps ops_dot8's 8 lanes and
 * combines them the same way, so every element equals ops_dot8(w_o, x_n) bit for bit and the
 * weights are read once per 2 input rows instead of once per row. */
OPS_VARIANTS(void, rows_tile, (float *y, const float *w, const float *x, int n0, int n1, int o0,
                               int o1, int in, int out),
             (y, w, x, n0, n1, o0, o1, in, out)) {
    int o = o0;
    for (; o + 4 <= o1; o += 4) {
        int n = n0;
        for (; n + 2 <= n1; n += 2) {
            float l[2][4][8];
            memset(l, 0, sizeof l);
            const float *x0 = x + (size_t)n * in, *x1 = x0 + in;
            int i = 0;
            for (; i + 8 <= in; i += 8)
                for (int a = 0; a < 4; a++) {
                    const float *wa = w + (size_t)(o + a) * in + i;
                    for (int j = 0; j < 8; j++) {
                        l[0][a][j] += wa[j] * x0[i + j];
                        l[1][a][j] += wa[j] * x1[i + j];
                    }
                }
            for (int b = 0; b < 2; b++)
                for (int a = 0; a < 4; a++) {
                    const float *lj = l[b][a], *wa = w + (size_t)(o + a) * in, *xb = b ? x1 : x0;
                    float s = ((lj[0] + lj[1]) + (lj[2] + lj[3])) + ((lj[4] + lj[5]) + (lj[6] + lj[7]));
                    for (int t = i; t < in; t++) s += wa[t] * xb[t];
                    y[(size_t)(n + b) * out + o + a] = s;
                }
        }
        for (; n < n1; n++)
            for (int a = 0; a < 4; a++)
                y[(size_t)n * out + o + a] = ops_dot8(w + (size_t)(o + a) * in, x + (size_t)n * in, in);
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
