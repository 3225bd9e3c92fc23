/* model/ops_mixer.c: the masked mixer's element ops and the loop reference of its token
 * mixing (ops.h). Every output element is one expression or a sum in a fixed order, so the
 * thread count changes no bit. */
#include "model/ops.h"
#include "model/mixer_taps.h"
#include "model/ops_math.h"

#include <string.h>

/* Below this many elements a loop is not worth a parallel region. */
#define MIX_PAR_MIN 32768

void mixer_tril(float *out, const float *w, int M, int T, int accumulate) {
    const size_t n = (size_t)M * T * T;
#pragma omp parallel for schedule(static) if (n >= MIX_PAR_MIN)
    for (size_t r = 0; r < (size_t)M * T; r++) {   /* row t = r % T of matrix r / T */
        const int t = (int)(r % T);
        float *o = out + r * T;
        const float *x = w + r * T;
        for (int s = 0; s < T; s++) {
            const float v = s <= t ? x[s] : 0.0f;
            o[s] = accumulate ? o[s] + v : v;
        }
    }
}

void mixer_bias_forward(float *y, const float *bias, int B, int T, int D, int h, int Tb) {
    const int dh = D / h;
#pragma omp parallel for schedule(static) if ((size_t)B * T * D >= MIX_PAR_MIN)
    for (int r = 0; r < B * T; r++) {
        const int t = r % T;
        float *row = y + (size_t)r * D;
        for (int c = 0; c < D; c++) row[c] += bias[(size_t)(c / dh) * Tb + t];
    }
}

void mixer_bias_backward(float *dbias, const float *dy, int B, int T, int D, int h, int Tb) {
    const int dh = D / h;
#pragma omp parallel for schedule(static) if ((size_t)B * T * D >= MIX_PAR_MIN)
    for (int it = 0; it < h * T; it++) {   /* (head i, position t): its sum in a fixed order */
        const int i = it / T, t = it % T;
        float acc = dbias[(size_t)i * Tb + t];
        for (int b = 0; b < B; b++) {
            const float *row = dy + ((size_t)b * T + t) * D + (size_t)i * dh;
            for (int c = 0; c < dh; c++) acc += row[c];
        }
        dbias[(size_t)i * Tb + t] = acc;
    }
}

void unroll_forward(float *out, const float *e, int B, int T, int D, int nd) {
#pragma omp parallel for schedule(static) if ((size_t)B * T * nd >= MIX_PAR_MIN)
    for (int r = 0; r < B * T; r++) {
        const int b = r / T, i = r % T;
        for (int j = 0; j < nd; j++) out[(size_t)r * nd + j] = e[(size_t)b * D + (i + j) % D];
    }
}

void unroll_backward(float *de, const float *dout, int B, int T, int D, int nd) {
#pragma omp parallel for schedule(static) if ((size_t)B * T * nd >= MIX_PAR_MIN)
    for (int r = 0; r < B * D; r++) {   /* element c of vector b: one window slot per position */
        const int b = r / D, c = r % D;
        float acc = de[r];
        for (int i = 0; i < T; i++) {
            const int j = ((c - i) % D + D) % D;
            if (j < nd) acc += dout[((size_t)b * T + i) * nd + j];
        }
        de[r] = acc;
    }
}

void embed_code_forward(float *y, const float *x, const float *u, size_t n, float range, int qbits,
                        int nbits) {
    for (size_t i = 0; i < n; i++) y[i] = ops_embed_code(x[i], range, qbits, u ? u[i] : 0.5f, u ? nbits : 0);
}

void embed_code_backward(float *dx, const float *dy, const float *x, size_t n, float range) {
    for (size_t i = 0; i < n; i++) dx[i] = dy[i] * ops_embed_code_grad(x[i], range);
}

/* Calls visit(b, t, s, y offset, x offset, w offset) for every product term of the mixing,
 * in a fixed order: the forward and the backward walk the same terms. */
#define MIX_TERMS(B, T, D, h, k, Tw, causal, visit)                                          \
    for (int b_ = 0; b_ < (B); b_++)                                                         \
        for (int tp_ = 0; tp_ < (h) * (k); tp_++) {                                          \
            int o_, c0_, c1_;                                                                \
            mixer_tap(tp_, (k), (D) / (h), &o_, &c0_, &c1_);                             \
            for (int t_ = 0; t_ < (T); t_++)                                                 \
                for (int s_ = 0; s_ < ((causal) ? t_ + 1 : (T)); s_++)                       \
                    for (int c_ = c0_; c_ < c1_; c_++) {                                     \
                        const size_t yo = ((size_t)b_ * (T) + t_) * (D) + c_;                \
                        const size_t xo = ((size_t)b_ * (T) + s_) * (D) + c_ + o_;           \
                        const size_t wo = ((size_t)tp_ * (Tw) + t_) * (Tw) + s_;             \
                        visit;                                                               \
                    }                                                                        \
        }

void token_mix_ref_forward(float *y, const float *x, const float *w, const float *bias, int B,
                           int T, int D, int h, int k, int Tw, int causal) {
    for (size_t n = 0; n < (size_t)B * T * D; n++) y[n] = 0.0f;
    mixer_bias_forward(y, bias, B, T, D, h, Tw);
    MIX_TERMS(B, T, D, h, k, Tw, causal, y[yo] += w[wo] * x[xo])
}

void token_mix_ref_backward(float *dx, float *dw, float *dbias, const float *dy, const float *x,
                            const float *w, int B, int T, int D, int h, int k, int Tw, int causal) {
    mixer_bias_backward(dbias, dy, B, T, D, h, Tw);
    MIX_TERMS(B, T, D, h, k, Tw, causal, (dx[xo] += w[wo] * dy[yo], dw[wo] += dy[yo] * x[xo]))
}
