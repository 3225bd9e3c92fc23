/* model/ops_rope.c: rotary position embedding (rotation math in ops_math.h). */
#include "model/ops.h"
#include "model/ops_math.h"
#include <stdlib.h>

void rope_table_init(float *cos_t, float *sin_t, int max_seq, int hd, float theta) {
    int h = hd / 2;
    for (int i = 0; i < h; i++) {
        float f = ops_rope_freq(i, hd, theta);
        for (int p = 0; p < max_seq; p++) {
            /* The angle is formed in float (p * f) as the reference implementations do, so
             * tables agree to rounding at large p; cos/sin themselves in double. */
            float a = (float)p * f;
            cos_t[(size_t)p * h + i] = (float)cos((double)a);
            sin_t[(size_t)p * h + i] = (float)sin((double)a);
        }
    }
}

static void rope_apply(float *out, const float *x, const float *cos_t, const float *sin_t, int B,
                       int T, int H, int hd, int pos0, float sign, int accumulate) {
    int h = hd / 2;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *cs = cos_t + (size_t)(pos0 + t) * h, *sn = sin_t + (size_t)(pos0 + t) * h;
            for (int hh = 0; hh < H; hh++) {
                size_t off = (((size_t)b * T + t) * H + hh) * hd;
                if (!accumulate) {
                    ops_rope_rotate(out + off, x + off, cs, sn, hd, sign);
                } else {
                    float tmp[hd];
                    ops_rope_rotate(tmp, x + off, cs, sn, hd, sign);
                    for (int i = 0; i < hd; i++) out[off + i] += tmp[i];
                }
            }
        }
}

void rope_forward(float *out, const float *x, const float *cos_t, const float *sin_t, int B, int T,
                  int H, int hd, int pos0) {
    rope_apply(out, x, cos_t, sin_t, B, T, H, hd, pos0, 1.0f, 0);
}

void rope_backward(float *dx, const float *dout, const float *cos_t, const float *sin_t, int B,
                   int T, int H, int hd, int pos0) {
    rope_apply(dx, dout, cos_t, sin_t, B, T, H, hd, pos0, -1.0f, 1);
}
