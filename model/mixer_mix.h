/* model/mixer_mix.h: the masked mixer's token mixing (seed 004) over the device table.
 *
 * Per layer, h heads x k taps of (Tw x Tw) weights w (h, k, Tw, Tw) and a bias (h*Tw); for
 * B rows of T <= Tw positions and width D (head width dh = D / h):
 *     y[b,t,c] = bias[i*Tw + t] + sum_j sum_s W_ij[t][s] x[b, s, c + j - (k-1)/2]
 * with i = c / dh, the shifted column kept inside head i (zero outside: torch's
 * Conv1d(T, T, k, padding='same') run per head over the embedding axis), s <= t when causal,
 * s < T otherwise. Causal means the MASKED weight tril(W): the forward multiplies by it and
 * the backward masks the weight's gradient (dW = tril(dY X^T)), so entries above the
 * diagonal neither act nor learn.
 *
 * The products are gemm calls (model/gemm.h, column-major): for each row b, head i, tap j,
 * with o = j - (k-1)/2 and the columns [c0, c1) the tap reaches (mixer_taps.h), m =
 * c1 - c0, x_b = x + b T D (a row-major (T, D) block is the column-major (D, T) one):
 *   forward   Y_b^T[c0:c1, :]   += X_b^T[c0+o:c1+o, :] W_ij^T :  gemm(N, N, m, T, T,  x_b + c0 + o, D, W_ij, Tw, y_b + c0, D)
 *   backward  dX_b^T[c0+o:.., :] += dY_b^T[c0:c1, :] W_ij     :  gemm(N, T, m, T, T,  dy_b + c0, D, W_ij, Tw, dx_b + c0 + o, D)
 *             dW_ij^T          += X_b[:, c0+o:..] dY_b^T       :  gemm(T, N, T, T, m,  x_b + c0 + o, D, dy_b + c0, D, dW_ij, Tw)
 * (only the top-left T x T block of each weight is read or written when T < Tw). The element
 * parts are device ops: mixer_tril (the mask), mixer_bias_forward / _backward. */
#ifndef MODEL_MIXER_MIX_H
#define MODEL_MIXER_MIX_H
#include "model/device.h"

typedef struct {
    int h, k;      /* heads, taps */
    int Tw;        /* the weights' side: the model's n_ctx (max_seq) */
    int causal;    /* 1: masked */
} mixer_mix_t;

/* Floats of one layer's mixing weight (h k Tw Tw): the size of each scratch below. */
size_t mixer_mix_weight_floats(const mixer_mix_t *s);
/* y (B,T,D) = mix(x). wm: scratch of mixer_mix_weight_floats (the masked weight; unused when
 * not causal). y must not alias x. */
void mixer_mix_forward(device_t *d, float *y, const float *x, const float *w, const float *bias,
                       float *wm, int B, int T, int D, const mixer_mix_t *s);
/* dx (B,T,D) OVERWRITTEN with d/dx; dw (h,k,Tw,Tw) += and dbias (h*Tw) += (masked when
 * causal). wm, dws: scratch of mixer_mix_weight_floats each. dx must not alias dy. */
void mixer_mix_backward(device_t *d, float *dx, float *dw, float *dbias, const float *dy,
                        const float *x, const float *w, float *wm, float *dws, int B, int T,
                        int D, const mixer_mix_t *s);
#endif
