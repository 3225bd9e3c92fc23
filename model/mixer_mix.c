/* model/mixer_mix.c: the token mixing as gemm calls and two element ops (see mixer_mix.h). */
#include "model/mixer_mix.h"

#include "model/mixer_taps.h"

size_t mixer_mix_weight_floats(const mixer_mix_t *s) {
    return (size_t)s->h * s->k * s->Tw * s->Tw;
}

/* The weight the products read: the masked copy (causal) or the weight itself. */
static const float *effective_weight(device_t *d, const float *w, float *wm, const mixer_mix_t *s) {
    if (!s->causal) return w;
    DEV(d, mixer_tril, wm, w, s->h * s->k, s->Tw, 0);
    return wm;
}

void mixer_mix_forward(device_t *d, float *y, const float *x, const float *w, const float *bias,
                       float *wm, int B, int T, int D, const mixer_mix_t *s) {
    const int dh = D / s->h, Tw = s->Tw;
    const float *we = effective_weight(d, w, wm, s);
    DEV(d, zero, y, sizeof(float) * (size_t)B * T * D);
    for (int b = 0; b < B; b++)
        for (int tp = 0; tp < s->h * s->k; tp++) {
            int o, c0, c1;
            mixer_tap(tp, s->k, dh, &o, &c0, &c1);
            const size_t off = (size_t)b * T * D;
            DEV(d, gemm, GEMM_N, GEMM_N, c1 - c0, T, T, 1.0f, x + off + c0 + o, D,
                we + (size_t)tp * Tw * Tw, Tw, 1.0f, y + off + c0, D);
        }
    DEV(d, mixer_bias_forward, y, bias, B, T, D, s->h, Tw);
}

void mixer_mix_backward(device_t *d, float *dx, float *dw, float *dbias, const float *dy,
                        const float *x, const float *w, float *wm, float *dws, int B, int T,
                        int D, const mixer_mix_t *s) {
    const int dh = D / s->h, Tw = s->Tw;
    const float *we = effective_weight(d, w, wm, s);
    /* the raw weight gradient goes into scratch when it must be masked before it is added */
    float *graw = s->causal ? dws : dw;
    if (s->causal) DEV(d, zero, dws, sizeof(float) * mixer_mix_weight_floats(s));
    DEV(d, zero, dx, sizeof(float) * (size_t)B * T * D);
    for (int b = 0; b < B; b++)
        for (int tp = 0; tp < s->h * s->k; tp++) {
            int o, c0, c1;
            mixer_tap(tp, s->k, dh, &o, &c0, &c1);
            const size_t off = (size_t)b * T * D, wo = (size_t)tp * Tw * Tw;
            DEV(d, gemm, GEMM_N, GEMM_T, c1 - c0, T, T, 1.0f, dy + off + c0, D, we + wo, Tw, 1.0f,
                dx + off + c0 + o, D);
            DEV(d, gemm, GEMM_T, GEMM_N, T, T, c1 - c0, 1.0f, x + off + c0 + o, D, dy + off + c0, D,
                1.0f, graw + wo, Tw);
        }
    if (s->causal) DEV(d, mixer_tril, dw, dws, s->h * s->k, Tw, 1);
    DEV(d, mixer_bias_backward, dbias, dy, B, T, D, s->h, Tw);
}
