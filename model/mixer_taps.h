/* model/mixer_taps.h: which columns a tap of the masked mixer's token mixing reaches (seed
 * 004), for the loop reference (ops_mixer.c) and the gemm composition (mixer_mix.c) alike.
 *
 * A mixing has h heads x k taps, numbered tp = i k + j (head i, tap j: the order of its
 * weight matrices). Tap j reads column c + o, o = j - (k-1)/2 (torch's padding='same'), and
 * stays inside head i's columns [i dh, (i+1) dh): it reaches the output columns [c_lo, c_hi). */
#ifndef MODEL_MIXER_TAPS_H
#define MODEL_MIXER_TAPS_H

static inline void mixer_tap(int tp, int k, int dh, int *o, int *c_lo, int *c_hi) {
    const int h0 = (tp / k) * dh, h1 = h0 + dh;
    *o = tp % k - (k - 1) / 2;
    *c_lo = *o < 0 ? h0 - *o : h0;
    *c_hi = *o > 0 ? h1 - *o : h1;
}
#endif
