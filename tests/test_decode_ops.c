/* tests/test_decode_ops.c: the decode step's row ops (model/ops_decode.c).
 *
 * - linear_rows: every row equals the row computed alone, bit for bit, for every batch size
 *   and at 1 and 2 threads (a request's text must not depend on its batch); and it agrees
 *   with linear_forward to float rounding (sums of `in` products in another order: rtol 1e-5);
 * - the same at precision bf16 where it is native (AVX512-BF16 dot products on the weight's
 *   bf16 shadow): batch-independent bit for bit, equal to the exact product of the rounded
 *   operands up to fp32 summation, and really rounded (differs from fp32); below that level
 *   the rows stay fp32 (the same bits as at fp32);
 * - qkv_split_rope_rows and rope_rows at per-row positions equal the sequence ops at those
 *   positions, bit for bit;
 * - attention_rows over cache slots equals attention_forward of each row's query over its
 *   slot's prefix (Tq = 1, Tk = len) to float rounding;
 * - scatter_rows writes each row where it is told. */
#include "common/rng.h"
#include "model/gemm.h"
#include "model/ops.h"
#include "model/ops_bf16.h"
#include "tests/check.h"
#include <omp.h>
#include <stdlib.h>
#include <string.h>

static rng_t R;
static float *rnd(size_t n) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) p[i] = 2.0f * rng_f32(&R) - 1.0f;
    return p;
}

static void test_linear_rows(void) {
    enum { NMAX = 13, IN = 67, OUT = 135 };
    float *x = rnd(NMAX * IN), *w = rnd(OUT * IN), *alone = malloc(sizeof(float) * NMAX * OUT);
    float *y = malloc(sizeof(float) * NMAX * OUT), *ref = malloc(sizeof(float) * NMAX * OUT);
    for (int n = 0; n < NMAX; n++) linear_rows(alone + n * OUT, x + n * IN, w, 1, IN, OUT);
    const int saved = omp_get_max_threads();
    for (int threads = 1; threads <= 2; threads++) {
        omp_set_num_threads(threads);
        for (int N = 1; N <= NMAX; N++) {
            /* the batch holds rows starting anywhere: a row's neighbours change with N and s */
            for (int s = 0; s + N <= NMAX; s += 5) {
                linear_rows(y, x + s * IN, w, N, IN, OUT);
                CHECK(!memcmp(y, alone + s * OUT, sizeof(float) * N * OUT),
                      "rows %d..%d of a batch of %d (%d threads) differ from each row alone", s, s + N - 1, N, threads);
            }
        }
    }
    omp_set_num_threads(saved);
    linear_forward(ref, x, w, NMAX, IN, OUT);
    int bad = 0;
    for (int i = 0; i < NMAX * OUT; i++) bad += !(fabsf(ref[i] - alone[i]) <= 1e-6f + 1e-5f * fabsf(ref[i]));
    CHECK(bad == 0, "linear_rows vs linear_forward: %d elements differ beyond rounding", bad);
    free(x); free(w); free(alone); free(y); free(ref);
}

static void test_linear_rows_bf16(void) {
    enum { NMAX = 13, IN = 67, OUT = 135 };
    float *x = rnd(NMAX * IN), *w = rnd(OUT * IN), *alone = malloc(sizeof(float) * NMAX * OUT);
    float *y = malloc(sizeof(float) * NMAX * OUT), *y32 = malloc(sizeof(float) * NMAX * OUT);
    linear_rows(y32, x, w, NMAX, IN, OUT);   /* fp32 */
    ops_product_precision = PRECISION_BF16;
    for (int n = 0; n < NMAX; n++) linear_rows(alone + n * OUT, x + n * IN, w, 1, IN, OUT);
    const int saved = omp_get_max_threads();
    for (int threads = 1; threads <= 2; threads++) {
        omp_set_num_threads(threads);
        for (int N = 1; N <= NMAX; N++)
            for (int s = 0; s + N <= NMAX; s += 5) {
                linear_rows(y, x + s * IN, w, N, IN, OUT);
                CHECK(!memcmp(y, alone + s * OUT, sizeof(float) * N * OUT),
                      "bf16: rows %d..%d of a batch of %d (%d threads) differ from each row alone", s, s + N - 1, N, threads);
            }
    }
    omp_set_num_threads(saved);
    ops_product_precision = PRECISION_FP32;
    if (!model_gemm_bf16_native()) {
        CHECK(!memcmp(alone, y32, sizeof(float) * NMAX * OUT), "below x86-64-v4-bf16 the rows stay fp32");
    } else {
        /* against the exact (double) sum of the rounded operands' products, which are exact in
         * fp32: fp32 summation of 67 terms of |a b| <= 1 differs by a few ulps of their sum */
        int bad = 0, differs = 0;
        for (int n = 0; n < NMAX; n++)
            for (int o = 0; o < OUT; o++) {
                double ref = 0, mag = 0;
                for (int i = 0; i < IN; i++) {
                    const double p = (double)ops_bf16_round(x[n * IN + i]) * ops_bf16_round(w[o * IN + i]);
                    ref += p;
                    mag += fabs(p);
                }
                bad += !(fabs(alone[n * OUT + o] - ref) <= 1e-6 * mag);
                differs += alone[n * OUT + o] != y32[n * OUT + o];
            }
        CHECK(bad == 0, "bf16 rows vs the exact product of the rounded operands: %d elements off", bad);
        CHECK(differs > NMAX * OUT / 2, "bf16 rows are rounded: %d of %d differ from fp32", differs, NMAX * OUT);
    }
    ops_bf16_forget(w, sizeof(float) * OUT * IN);   /* its shadow: w is freed behind the table's back */
    free(x); free(w); free(alone); free(y); free(y32);
}

static void test_positions(void) {
    enum { N = 5, H = 4, Hkv = 2, hd = 8, S = 40 };
    float cs[S * hd / 2], sn[S * hd / 2];
    rope_table_init(cs, sn, S, hd, 10000.f);
    const int ld = (H + 2 * Hkv) * hd;
    float *qkv = rnd(N * ld), q1[N * H * hd], k1[N * Hkv * hd], v1[N * Hkv * hd];
    float q2[H * hd], k2[Hkv * hd], v2[Hkv * hd];
    int pos[N] = {0, 17, 3, 39, 8};
    qkv_split_rope_rows(q1, k1, v1, qkv, cs, sn, N, H, Hkv, hd, pos);
    for (int n = 0; n < N; n++) {
        qkv_split_rope(q2, k2, v2, qkv + n * ld, cs, sn, 1, 1, H, Hkv, hd, pos[n]);
        CHECK(!memcmp(q1 + n * H * hd, q2, sizeof q2) && !memcmp(k1 + n * Hkv * hd, k2, sizeof k2) &&
                  !memcmp(v1 + n * Hkv * hd, v2, sizeof v2), "row %d at position %d", n, pos[n]);
    }
    float r1[N * H * hd], r2[H * hd];
    rope_rows(r1, q1, cs, sn, N, H, hd, pos);
    for (int n = 0; n < N; n++) {
        rope_forward(r2, q1 + n * H * hd, cs, sn, 1, 1, H, hd, pos[n]);
        CHECK(!memcmp(r1 + n * H * hd, r2, sizeof r2), "rope_rows row %d", n);
    }
    free(qkv);
}

static void test_attention_rows(void) {
    enum { N = 4, H = 6, Hkv = 3, hd = 12, SLOTS = 3, TMAX = 20 };
    const int ldk = Hkv * hd;
    float *kc = rnd(SLOTS * TMAX * ldk), *vc = rnd(SLOTS * TMAX * ldk), *q = rnd(N * H * hd);
    float out[N * H * hd], ref[H * hd], lse[H];
    int slot[N] = {2, 0, 2, 1}, len[N] = {7, 20, 1, 13}, base[N];
    for (int n = 0; n < N; n++) base[n] = slot[n] * TMAX;
    attention_rows(out, q, kc, vc, base, len, N, H, Hkv, hd);
    for (int n = 0; n < N; n++) {
        attention_forward(ref, lse, q + n * H * hd, kc + (size_t)base[n] * ldk, vc + (size_t)base[n] * ldk,
                          1, 1, len[n], H, Hkv, hd, 1);
        int bad = 0;
        for (int i = 0; i < H * hd; i++) bad += !(fabsf(out[n * H * hd + i] - ref[i]) <= 1e-6f + 1e-5f * fabsf(ref[i]));
        CHECK(bad == 0, "row %d (slot %d, %d keys): %d elements differ", n, slot[n], len[n], bad);
    }
    float dst[6 * 4] = {0}, src[3 * 4] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    int rows[3] = {4, 0, 2};
    scatter_rows(dst, 4, rows, src, 4, 3, 3);
    CHECK(dst[16] == 1 && dst[18] == 3 && dst[19] == 0 && dst[0] == 5 && dst[8] == 9 && dst[4] == 0,
          "scatter_rows: rows land where told, width D only");
    free(kc); free(vc); free(q);
}

/* Two query heads of one key/value head go through one pass over the keys at x86-64-v4
 * (rows_att_pair): each head's output must be the bits it gets alone (H = Hkv = 1), for the
 * head sizes with an unrolled body (64, 128) and one without (24); at the other levels both
 * calls take the one-head path. */
static void test_attention_pairs(void) {
    enum { N = 3, TMAX = 40 };
    const int hds[3] = {64, 128, 24}, len[N] = {1, 40, 17}, base[N] = {TMAX, 0, 2 * TMAX};
    for (int c = 0; c < 3; c++) {
        const int hd = hds[c];
        float *kc = rnd(3 * TMAX * hd), *vc = rnd(3 * TMAX * hd), *q = rnd(N * 2 * hd);
        float *pair = malloc(sizeof(float) * N * 2 * hd), *qh = malloc(sizeof(float) * N * hd);
        float *one = malloc(sizeof(float) * N * hd);
        for (int i = 0; i < N * 2 * hd; i++) q[i] *= 4.0f; /* scores of a few units: rescales happen */
        attention_rows(pair, q, kc, vc, base, len, N, 2, 1, hd);
        for (int h = 0; h < 2; h++) {
            for (int n = 0; n < N; n++) memcpy(qh + n * hd, q + (n * 2 + h) * hd, sizeof(float) * hd);
            attention_rows(one, qh, kc, vc, base, len, N, 1, 1, hd);
            for (int n = 0; n < N; n++)
                CHECK(!memcmp(pair + (n * 2 + h) * hd, one + n * hd, sizeof(float) * hd),
                      "hd %d, head %d of a pair, row %d (%d keys): the bits of the head alone", hd, h, n, len[n]);
        }
        free(kc); free(vc); free(q); free(pair); free(qh); free(one);
    }
}

int main(void) {
    rng_seed(&R, 7);
    RUN(test_linear_rows);
    RUN(test_linear_rows_bf16);
    RUN(test_positions);
    RUN(test_attention_rows);
    RUN(test_attention_pairs);
    return check_summary();
}
