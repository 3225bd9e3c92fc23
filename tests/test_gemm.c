/* tests/test_gemm.c: the matrix products (model/gemm.h) and the bf16 rounding they use
 * (model/ops_math.h), against naive double-precision references.
 *
 * Tolerances (u = 2^-24, fp32's unit roundoff). One element of C is alpha * sum_p a_p b_p +
 * beta * c. A sum of k products accumulated in fp32, in ANY order, blocked or with FMA, is
 * within gamma_k * sum_p |a_p b_p| of the exact sum, gamma_k = k u / (1 - k u) (Higham, Accuracy
 * and Stability of Numerical Algorithms, 3.1). Scaling by alpha, adding beta c and rounding the
 * result add a few u more. So
 *     fp32:           |C - C_exact| <= (k + 4) u (|alpha| sum|a b| + |beta c|)        (tol_f32)
 * is a bound, not a guess: a product that breaks it is wrong (a wrong index, a lost term, a
 * skipped beta), whatever engine, thread count or ISA computed it.
 *     bf16, against the exact product of the bf16-ROUNDED operands: the product of two bf16
 *     values (8 significant bits each) is exact in fp32, so only the fp32 accumulation errs:
 *     the same bound, tol_f32 with the rounded operands' |a b|. This is tight: forgetting to
 *     round an operand moves a result by about 2^-9 of its terms, thousands of times the bound.
 *     bf16, against the exact product of the fp32 operands: rounding an operand to bf16 (round
 *     to nearest, 8 significant bits) changes it by at most 2^-8 relative, so a product
 *     a(1+d1) b(1+d2) is within (2 * 2^-8 + 2^-16) |a b| of a b; in the worst case all k errors
 *     point the same way, so the sum is within (2^-7 + 2^-16) sum|a b|, plus the accumulation:
 *         |C - C_exact| <= (2^-7 + 2^-16 + (k + 4) u) |alpha| sum|a b| + (k + 4) u |beta c|.
 *     Measured against |C| instead of sum|a b| this is where k enters: with independent signs
 *     sum|a b| grows like k while |sum a b| grows like sqrt(k), so the error relative to the
 *     result grows like 2^-7 sqrt(k) (and like 2^-7 k in the worst, cancelling, case); the bound
 *     above carries that growth in sum|a b|. */
#include "model/cpu_isa.h"
#include "model/gemm.h"
#include "model/gemm_impl.h"
#include "model/ops.h"
#include "model/ops_bf16.h"
#include "model/ops_math.h"
#include "model/precision.h"
#include "common/rng.h"
#include "tests/check.h"
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define U32 (1.0 / 16777216.0)

static rng_t R;

static float *rnd(size_t n) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) p[i] = rng_normal(&R);
    return p;
}
static float *copy(const float *x, size_t n) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    memcpy(p, x, sizeof(float) * n);
    return p;
}

/* ---- bf16 rounding -------------------------------------------------------------------- */

static float from_bits(uint32_t u) { return ops_f32_from_bits(u); }

/* x -> expected bf16 bit pattern, hand-picked */
static void test_bf16_cases(void) {
    static const struct { uint32_t in; uint16_t out; const char *why; } cases[] = {
        {0x3f800000u, 0x3f80, "1.0 is exact"},
        {0x3f808000u, 0x3f80, "1 + 2^-8: a tie, to the even 1.0"},
        {0x3f818000u, 0x3f82, "1 + 2^-7 + 2^-8: a tie, to the even 1 + 2^-6"},
        {0x3f808001u, 0x3f81, "just above the tie rounds up"},
        {0x3f807fffu, 0x3f80, "just below the tie rounds down"},
        {0xbf808000u, 0xbf80, "-(1 + 2^-8): ties to even with the sign kept"},
        {0xbf818000u, 0xbf82, "negative tie to even, upwards in magnitude"},
        {0x3fffffffu, 0x4000, "mantissa overflow carries into the exponent"},
        {0x80000000u, 0x8000, "-0 stays -0"},
        {0x00000001u, 0x0000, "the smallest subnormal rounds to 0"},
        {0x00008000u, 0x0000, "subnormal tie, to the even 0"},
        {0x00018000u, 0x0002, "subnormal tie, to the even 2"},
        {0x00008001u, 0x0001, "subnormal above the tie"},
        {0x007fffffu, 0x0080, "the largest subnormal rounds up to the smallest normal"},
        {0x00800000u, 0x0080, "the smallest normal is exact"},
        {0x7f7f7fffu, 0x7f7f, "below max bf16 + half an ulp: max finite bf16"},
        {0x7f7f8000u, 0x7f80, "max bf16 + half an ulp: a tie whose even neighbour is inf"},
        {0x7f7fffffu, 0x7f80, "FLT_MAX overflows to inf"},
        {0xff7fffffu, 0xff80, "-FLT_MAX overflows to -inf"},
        {0x7f800000u, 0x7f80, "inf stays inf"},
        {0xff800000u, 0xff80, "-inf stays -inf"},
        {0x7fc00000u, 0x7fc0, "quiet NaN stays"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint16_t got = ops_bf16_from_float(from_bits(cases[i].in));
        CHECK(got == cases[i].out, "%08x -> %04x, want %04x: %s", cases[i].in, got, cases[i].out,
              cases[i].why);
        CHECK(ops_f32_bits(ops_bf16_round(from_bits(cases[i].in))) == (uint32_t)cases[i].out << 16,
              "ops_bf16_round(%08x) is the pattern widened", cases[i].in);
    }
    /* NaNs whose payload sits in the low half only: adding the rounding bias would make them
     * inf (0x7f800001 + 0x7fff -> 0x7f80 after the cut) */
    const uint32_t nans[] = {0x7f800001u, 0xff800001u, 0x7f807fffu, 0x7fffffffu, 0xffffffffu};
    for (size_t i = 0; i < sizeof nans / sizeof *nans; i++) {
        float r = ops_bf16_round(from_bits(nans[i]));
        CHECK(isnan(r), "NaN %08x stays NaN (got %08x)", nans[i], ops_f32_bits(r));
        CHECK((ops_f32_bits(r) >> 31) == (nans[i] >> 31), "NaN %08x keeps its sign", nans[i]);
    }
    CHECK(ops_bf16_to_float(0x3f80) == 1.0f && ops_bf16_to_float(0xc040) == -3.0f, "widening");
}

/* Every bf16 value converts back to itself (NaN to a NaN); every fp32 value goes to its
 * nearer bf16 neighbour, the even one on a tie, with beyond-max rounding to inf as IEEE does
 * (inf counts as 2^128 when measuring distance). The rule is checked from the values, in
 * double, independently of the bit trick: at every tie (each bf16 value plus half an ulp),
 * one pattern on either side of each tie, and a sweep of all exponents. */
static uint32_t nearest_bf16_pattern(uint32_t u) {
    const double x = from_bits(u);
    const uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
    const double vlo = from_bits(lo);
    const double vhi = (hi & 0x7fffffffu) == 0x7f800000u ? copysign(0x1p128, x) : from_bits(hi);
    const double dlo = fabs(x - vlo), dhi = fabs(x - vhi);
    return dlo < dhi ? lo : dhi < dlo ? hi : ((lo >> 16) & 1u) ? hi : lo;
}

static void test_bf16_exhaustive(void) {
    int bad_fixed = 0, bad_near = 0, n = 0;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        float x = ops_bf16_to_float((uint16_t)h);
        if (isnan(x)) bad_fixed += !isnan(ops_bf16_round(x));
        else bad_fixed += ops_bf16_from_float(x) != h;
    }
    for (uint32_t h = 0; h < 0x10000u; h++)
        for (int d = -1; d <= 1; d++) {
            const uint32_t u = ((h << 16) | 0x8000u) + (uint32_t)d;
            if (!isfinite(from_bits(u))) continue;
            bad_near += ops_f32_bits(ops_bf16_round(from_bits(u))) != nearest_bf16_pattern(u);
            n++;
        }
    for (uint64_t u = 0; u < 0x100000000ull; u += 40503) {
        if (!isfinite(from_bits((uint32_t)u))) continue;
        bad_near += ops_f32_bits(ops_bf16_round(from_bits((uint32_t)u))) != nearest_bf16_pattern((uint32_t)u);
        n++;
    }
    CHECK(bad_fixed == 0, "%d bf16 values do not convert back to themselves", bad_fixed);
    CHECK(bad_near == 0, "%d of %d fp32 values not rounded to their nearest bf16", bad_near, n);
    /* ops_bf16_round (a NaN test and a cut of its own) gives ops_bf16_from_float's pattern
     * widened, NaNs included: every high half, with the low halves at and around the
     * rounding's boundaries (the result depends on the low half through these alone) */
    static const uint32_t lows[] = {0, 1, 0x4000, 0x7fff, 0x8000, 0x8001, 0xc000, 0xffff};
    int bad_same = 0;
    for (uint32_t h = 0; h < 0x10000u; h++)
        for (size_t i = 0; i < sizeof lows / sizeof *lows; i++) {
            const float x = from_bits(h << 16 | lows[i]);
            bad_same += ops_f32_bits(ops_bf16_round(x)) != (uint32_t)ops_bf16_from_float(x) << 16;
        }
    CHECK(bad_same == 0, "%d patterns where ops_bf16_round is not ops_bf16_from_float widened", bad_same);
}

/* ---- products against the double reference ----------------------------------------- */

typedef struct {
    int ta, tb, m, n, k, lda, ldb, ldc;
    float alpha, beta;
} prob;

static inline double elem_a(const prob *p, const float *A, int i, int q) {
    return p->ta ? A[q + (size_t)i * p->lda] : A[i + (size_t)q * p->lda];
}
static inline double elem_b(const prob *p, const float *B, int q, int j) {
    return p->tb ? B[j + (size_t)q * p->ldb] : B[q + (size_t)j * p->ldb];
}

/* Largest |C - ref| / tol over the matrix. ref: exact product of the operands (rounded to bf16
 * first when round_ops); tol: the bound of the file's header, loose when loose. */
static double worst_ratio(const prob *p, const float *A, const float *B, const float *C0,
                          const float *C, int round_ops, int loose) {
    double worst = 0;
    for (int j = 0; j < p->n; j++)
        for (int i = 0; i < p->m; i++) {
            double s = 0, sabs = 0;
            for (int q = 0; q < p->k; q++) {
                double a = elem_a(p, A, i, q), b = elem_b(p, B, q, j);
                if (round_ops) a = ops_bf16_round((float)a), b = ops_bf16_round((float)b);
                s += a * b;
                sabs += fabs(a * b);
            }
            const double c0 = p->beta == 0.0f ? 0 : C0[i + (size_t)j * p->ldc];
            const double ref = p->alpha * s + p->beta * c0;
            const double acc = (p->k + 4) * U32;
            const double tol = (acc + (loose ? 0x1p-7 + 0x1p-16 : 0)) * fabs(p->alpha) * sabs +
                               acc * fabs(p->beta * c0) + 1e-30;
            const double r = fabs(C[i + (size_t)j * p->ldc] - ref) / tol;
            worst = r > worst || isnan(r) ? r : worst;
        }
    return worst;
}

/* Runs one problem at precision pr; the caller frees nothing. Also checks that C's padding
 * rows (between m and ldc) and A, B are untouched. */
static void run_prob(const prob *p, precision_t pr) {
    const int ar = p->ta ? p->k : p->m, ac = p->ta ? p->m : p->k;
    const int br = p->tb ? p->n : p->k, bc = p->tb ? p->k : p->n;
    (void)ar, (void)br;
    const size_t na = (size_t)p->lda * ac, nb = (size_t)p->ldb * bc, nc = (size_t)p->ldc * p->n;
    float *A = rnd(na), *B = rnd(nb), *C = rnd(nc);
    if (p->beta == 0.0f)   /* beta == 0 must not read C: NaN there must not leak */
        for (size_t i = 0; i < nc; i++) C[i] = (i % (size_t)p->ldc) < (size_t)p->m ? NAN : C[i];
    float *A0 = copy(A, na), *B0 = copy(B, nb), *C0 = copy(C, nc);
    model_gemm_prec(pr, p->ta, p->tb, p->m, p->n, p->k, p->alpha, A, p->lda, B, p->ldb, p->beta, C,
                    p->ldc);
    char what[160];
    snprintf(what, sizeof what, "%s %c%c m=%d n=%d k=%d ld=%d,%d,%d alpha=%g beta=%g",
             precision_name(pr), p->ta ? 'T' : 'N', p->tb ? 'T' : 'N', p->m, p->n, p->k, p->lda,
             p->ldb, p->ldc, p->alpha, p->beta);
    if (pr == PRECISION_BF16) {
        double tight = worst_ratio(p, A0, B0, C0, C, 1, 0), loose = worst_ratio(p, A0, B0, C0, C, 0, 1);
        CHECK(tight <= 1, "%s: %.3g of the bound against rounded operands", what, tight);
        CHECK(loose <= 1, "%s: %.3g of the bound against fp32 operands", what, loose);
    } else {
        double w = worst_ratio(p, A0, B0, C0, C, 0, 0);
        CHECK(w <= 1, "%s: %.3g of the fp32 bound", what, w);
    }
    int pad_ok = 1;
    for (int j = 0; j < p->n; j++)
        for (int i = p->m; i < p->ldc; i++)
            pad_ok &= ops_f32_bits(C[i + (size_t)j * p->ldc]) == ops_f32_bits(C0[i + (size_t)j * p->ldc]);
    CHECK(pad_ok, "%s: C's rows beyond m are untouched", what);
    CHECK(!memcmp(A, A0, sizeof(float) * na) && !memcmp(B, B0, sizeof(float) * nb),
          "%s: A and B are not modified", what);
    free(A), free(B), free(C), free(A0), free(B0), free(C0);
}

/* Every transpose pair, odd sizes (1, 7, 129 ...), leading dimensions above the minimum,
 * and the alpha/beta cases a model uses (1/0, 1/1, a scale, a negative and a general pair). */
static void test_products(precision_t pr) {
    static const int sizes[][3] = {{1, 1, 1}, {7, 1, 129}, {1, 7, 5}, {129, 7, 33}, {33, 129, 7},
                                   {64, 64, 64}, {130, 67, 257}, {5, 300, 1}, {257, 3, 1030}};
    static const float ab[][2] = {{1, 0}, {1, 1}, {0.125f, 0}, {-1.5f, 2}, {0.5f, -1}};
    int t = 0;
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++, t++) {
                const int m = sizes[s][0], n = sizes[s][1], k = sizes[s][2];
                const int pad = t % 3 == 0 ? 0 : 1 + t % 5;   /* some minimal, most padded */
                prob p = {ta, tb, m, n, k, (ta ? k : m) + pad, (tb ? n : k) + (pad ? pad + 2 : 0),
                          m + (pad ? 3 : 0), ab[t % 5][0], ab[t % 5][1]};
                run_prob(&p, pr);
            }
}
static void test_products_fp32(void) { test_products(PRECISION_FP32); }
static void test_products_bf16(void) { test_products(PRECISION_BF16); }

/* The shapes of a training step's largest products (config S's tied head, forward and weight
 * gradient) at both precisions: the engine's blocked, threaded paths. */
static void test_large(void) {
    const prob ps[] = {{1, 0, 1024, 512, 256, 256, 256, 1024, 1, 0},
                       {0, 1, 256, 512, 1024, 256, 512, 256, 1, 1}};
    for (size_t i = 0; i < sizeof ps / sizeof *ps; i++) {
        run_prob(&ps[i], PRECISION_FP32);
        run_prob(&ps[i], PRECISION_BF16);
    }
}

/* bf16 really rounds: a product whose exact result needs more than 8 bits of its operands */
static void test_bf16_differs(void) {
    float a = 1.0f + 0x1p-10f, b = 3.0f, c32 = 0, c16 = 0;
    model_gemm_prec(PRECISION_FP32, GEMM_N, GEMM_N, 1, 1, 1, 1, &a, 1, &b, 1, 0, &c32, 1);
    model_gemm_prec(PRECISION_BF16, GEMM_N, GEMM_N, 1, 1, 1, 1, &a, 1, &b, 1, 0, &c16, 1);
    CHECK(c32 == a * 3.0f && c16 == 3.0f, "fp32 %.9g (want %.9g), bf16 %.9g (want 3)", c32,
          a * 3.0f, c16);
    /* tf32 is not a CPU precision; slipped through, it computes fp32 */
    float ct = 0;
    model_gemm_prec(PRECISION_TF32, GEMM_N, GEMM_N, 1, 1, 1, 1, &a, 1, &b, 1, 0, &ct, 1);
    CHECK(ct == c32, "tf32 on the CPU computes fp32");
}

/* k == 0 and alpha == 0 only scale C, reading neither A nor B (BLAS semantics) */
static void test_degenerate(void) {
    float A[4] = {NAN, NAN, NAN, NAN}, B[4] = {NAN, NAN, NAN, NAN}, C[4] = {1, 2, 3, 4};
    model_gemm(GEMM_N, GEMM_N, 2, 2, 0, 1, A, 2, B, 1, 2, C, 2);
    CHECK(C[0] == 2 && C[3] == 8, "k = 0: C = beta C (%g %g)", C[0], C[3]);
    model_gemm_prec(PRECISION_BF16, GEMM_N, GEMM_N, 2, 2, 2, 0, A, 2, B, 2, 0.5f, C, 2);
    CHECK(C[0] == 1 && C[3] == 4, "alpha = 0: C = beta C, A and B unread (%g %g)", C[0], C[3]);
    C[1] = NAN;
    model_gemm(GEMM_N, GEMM_N, 2, 2, 0, 1, A, 2, B, 1, 0, C, 2);
    CHECK(C[0] == 0 && C[1] == 0 && C[3] == 0, "k = 0, beta = 0: zeros, C unread");
    model_gemm(GEMM_N, GEMM_N, 0, 2, 2, 1, A, 2, B, 2, 0, C, 1);   /* m = 0: nothing */
    CHECK(C[0] == 0, "m = 0 writes nothing");
}

/* ---- batches ------------------------------------------------------------------------- */

/* A strided batch equals the loop of single products, for both precisions, with gaps between
 * the batch's matrices and with A broadcast (stride 0): to the fp32 accumulation bound with
 * several threads (a single product may split its sums over the threads, the batch splits
 * the batch), bit for bit at one thread. */
static void test_batched(void) {
    const int m = 37, n = 65, k = 129, batch = 5;
    for (int pi = 0; pi < 2; pi++)
        for (int bc = 0; bc < 2; bc++)
            for (int ta = 0; ta < 2; ta++)
                for (int tb = 0; tb < 2; tb++) {
                    const precision_t pr = pi ? PRECISION_BF16 : PRECISION_FP32;
                    const int lda = (ta ? k : m) + 1, ldb = (tb ? n : k) + 2, ldc = m + 3;
                    const long long sa = bc ? 0 : (long long)lda * (ta ? m : k) + 11;
                    const long long sb = (long long)ldb * (tb ? k : n) + 5, sc = (long long)ldc * n + 7;
                    const size_t na = (size_t)(bc ? 1 : batch) * (sa ? sa : lda * (ta ? m : k));
                    const size_t nb = (size_t)batch * sb, nc = (size_t)batch * sc;
                    float *A = rnd(na), *B = rnd(nb), *C = rnd(nc), *C1 = copy(C, nc), *C0 = copy(C, nc);
                    model_gemm_batched_prec(pr, ta, tb, m, n, k, 0.5f, A, lda, sa, B, ldb, sb, 1.0f,
                                            C, ldc, sc, batch);
                    for (int b = 0; b < batch; b++)
                        model_gemm_prec(pr, ta, tb, m, n, k, 0.5f, A + b * sa, lda, B + b * sb, ldb,
                                        1.0f, C1 + b * sc, ldc);
                    double worst = 0;
                    int gaps_ok = 1;
                    for (int b = 0; b < batch; b++)
                        for (long long e = 0; e < sc; e++) {
                            const long long o = b * sc + e;
                            const int i = (int)(e % ldc), j = (int)(e / ldc);
                            if (j >= n || i >= m) {
                                gaps_ok &= ops_f32_bits(C[o]) == ops_f32_bits(C1[o]);
                                continue;
                            }
                            double sabs = 0;
                            for (int q = 0; q < k; q++) {
                                float a = ta ? A[b * sa + q + (size_t)i * lda] : A[b * sa + i + (size_t)q * lda];
                                float bb = tb ? B[b * sb + j + (size_t)q * ldb] : B[b * sb + q + (size_t)j * ldb];
                                if (pi) a = ops_bf16_round(a), bb = ops_bf16_round(bb);
                                sabs += fabs((double)a * bb);
                            }
                            /* two fp32 results, each within the bound of the same exact value */
                            const double tol = 2 * (k + 4) * U32 * (0.5 * sabs + fabs(C0[o])) + 1e-30;
                            const double r = fabs(C[o] - C1[o]) / tol;
                            worst = r > worst ? r : worst;
                        }
                    CHECK(worst <= 1, "%s %c%c%s: batched vs singles %.3g of the bound",
                          precision_name(pr), ta ? 'T' : 'N', tb ? 'T' : 'N',
                          bc ? " (A broadcast)" : "", worst);
                    CHECK(gaps_ok, "gaps between the batch's C matrices untouched");
                    /* at one thread (as inside a parallel region) no product is split across
                     * threads, and the batch is the singles bit for bit */
                    const int saved = omp_get_max_threads();
                    omp_set_num_threads(1);
                    memcpy(C, C0, sizeof(float) * nc);
                    memcpy(C1, C0, sizeof(float) * nc);
                    model_gemm_batched_prec(pr, ta, tb, m, n, k, 0.5f, A, lda, sa, B, ldb, sb, 1.0f,
                                            C, ldc, sc, batch);
                    for (int b = 0; b < batch; b++)
                        model_gemm_prec(pr, ta, tb, m, n, k, 0.5f, A + b * sa, lda, B + b * sb, ldb,
                                        1.0f, C1 + b * sc, ldc);
                    omp_set_num_threads(saved);
                    CHECK(!memcmp(C, C1, sizeof(float) * nc), "%s %c%c%s: one thread, batch == singles bit for bit",
                          precision_name(pr), ta ? 'T' : 'N', tb ? 'T' : 'N', bc ? " (A broadcast)" : "");
                    free(A), free(B), free(C), free(C1), free(C0);
                }
}

/* ---- determinism and threads ----------------------------------------------------------- */

/* The same product twice gives the same bits; so do copies of the inputs at other addresses
 * (alignment must not choose another code path), in both precisions. */
static void test_repeatable(void) {
    const int m = 300, n = 200, k = 517;
    float *A = rnd((size_t)m * k), *B = rnd((size_t)k * n);
    float *A2 = malloc(sizeof(float) * ((size_t)m * k + 1)), *B2 = malloc(sizeof(float) * ((size_t)k * n + 3));
    memcpy(A2 + 1, A, sizeof(float) * m * k);
    memcpy(B2 + 3, B, sizeof(float) * k * n);
    float *C[3];
    for (int pi = 0; pi < 2; pi++) {
        const precision_t pr = pi ? PRECISION_BF16 : PRECISION_FP32;
        for (int r = 0; r < 3; r++) {
            C[r] = calloc((size_t)m * n, sizeof(float));
            model_gemm_prec(pr, GEMM_T, GEMM_N, m, n, k, 1, r == 2 ? A2 + 1 : A, k,
                            r == 2 ? B2 + 3 : B, k, 0, C[r], m);
        }
        CHECK(!memcmp(C[0], C[1], sizeof(float) * m * n), "%s: repeated call, same bits", precision_name(pr));
        CHECK(!memcmp(C[0], C[2], sizeof(float) * m * n), "%s: inputs at other addresses, same bits",
              precision_name(pr));
        /* the same shape on other values (a thread keeps the memory objects of the shapes it
         * ran and points them at each call's buffers: gemm_dnnl.c): A doubled at a third
         * address gives C doubled exactly (x2 is exact in fp32 and commutes with bf16 rounding) */
        float *A3 = malloc(sizeof(float) * (size_t)m * k), *C3 = calloc((size_t)m * n, sizeof(float));
        for (size_t i = 0; i < (size_t)m * k; i++) A3[i] = 2.0f * A[i];
        model_gemm_prec(pr, GEMM_T, GEMM_N, m, n, k, 1, A3, k, B, k, 0, C3, m);
        int twice = 1;
        for (size_t i = 0; i < (size_t)m * n; i++) twice &= C3[i] == 2.0f * C[0][i];
        CHECK(twice, "%s: the same shape on new operands reads them", precision_name(pr));
        free(A3), free(C3);
        for (int r = 0; r < 3; r++) free(C[r]);
    }
    free(A), free(B), free(A2), free(B2);
}

/* Inside a parallel region (as attention calls it) every thread runs its own products at the
 * same time: each result equals the one-thread product computed outside, bit for bit (the same
 * primitive: one thread either way). */
static void test_in_parallel(void) {
    enum { NP = 8 };
    const int m = 96, n = 64, k = 200;
    float *A = rnd((size_t)NP * m * k), *B = rnd((size_t)NP * k * n);
    float *C = calloc((size_t)NP * m * n * 2, sizeof(float)), *Cref = calloc((size_t)NP * m * n * 2, sizeof(float));
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    for (int r = 0; r < 3; r++)   /* rounds: products of several shapes interleave */
        for (int t = 0; t < NP * 2; t++) {
            const int u = t % NP, pr = t / NP, mm = m - r * 7;
            model_gemm_prec(pr, GEMM_N, GEMM_N, mm, n, k, 1, A + (size_t)u * m * k, m, B + (size_t)u * k * n,
                            k, r ? 1.0f : 0.0f, Cref + (size_t)t * m * n, m);
        }
    omp_set_num_threads(saved > 1 ? saved : 2);
    int inside = 0;
#pragma omp parallel reduction(+ : inside)
    {
        inside += omp_in_parallel();
        for (int r = 0; r < 3; r++) {
#pragma omp for schedule(dynamic, 1)
            for (int t = 0; t < NP * 2; t++) {
                const int u = t % NP, pr = t / NP, mm = m - r * 7;
                model_gemm_prec(pr, GEMM_N, GEMM_N, mm, n, k, 1, A + (size_t)u * m * k, m,
                                B + (size_t)u * k * n, k, r ? 1.0f : 0.0f, C + (size_t)t * m * n, m);
            }
        }
    }
    omp_set_num_threads(saved);
    CHECK(inside >= 1, "ran inside a parallel region");
    CHECK(!memcmp(C, Cref, sizeof(float) * NP * m * n * 2),
          "products run concurrently inside a parallel region equal the one-thread products");
    free(A), free(B), free(C), free(Cref);
}

/* ---- engine, ISA, cache ------------------------------------------------------------------- */

static void test_engine(void) {
    char err[256] = "";
    CHECK(model_gemm_check(err, sizeof err) == 0, "oneDNN ready: %s", err);
    const char *d = model_gemm_describe();
    static const char *const want[] = {[CPU_ISA_V2] = "ISA sse41", [CPU_ISA_V3] = "ISA avx2",
                                       [CPU_ISA_V4] = "ISA avx512_core",
                                       [CPU_ISA_V4_BF16] = "ISA avx512_core_bf16",
                                       [CPU_ISA_V4_AMX] = "ISA avx512_core_amx"};
    const char *w = want[cpu_isa()];
    const size_t dl = strlen(d), wl = strlen(w);
    CHECK(dl >= wl && !strcmp(d + dl - wl, w), "level %s pins oneDNN: '%s'", cpu_isa_name(cpu_isa()), d);
    CHECK(model_gemm_bf16_native() == (cpu_isa() >= CPU_ISA_V4_BF16),
          "bf16 is native exactly from x86-64-v4-bf16 up (level %s, native %d)", cpu_isa_name(cpu_isa()),
          model_gemm_bf16_native());
    /* every product of a training step has a real (non-reference) oneDNN implementation */
    const char *impl = gemm_dnnl_impl(GEMM_IN_F32, GEMM_T, GEMM_N, 512, 2048, 256, 1, 256, 0, 256, 0,
                                      0, 512, 0, 1);
    CHECK(impl && strncmp(impl, "ref", 3) && strcmp(impl, "none"), "fp32 implementation: %s",
          impl ? impl : "(null)");
    if (model_gemm_bf16_native()) {
        impl = gemm_dnnl_impl(GEMM_IN_BF16, GEMM_T, GEMM_N, 512, 2048, 256, 1, 256, 0, 256, 0, 0,
                              512, 0, 1);
        CHECK(impl && strncmp(impl, "ref", 3) && strcmp(impl, "none"), "bf16 implementation: %s",
              impl ? impl : "(null)");
        /* where AMX exists (never on the machines this was written on), its level's bf16
         * products run on the tiles, below it they do not */
        CHECK(impl && (strstr(impl, "amx") != NULL) == (cpu_isa() == CPU_ISA_V4_AMX),
              "bf16 on AMX tiles exactly at x86-64-v4-amx (level %s): %s", cpu_isa_name(cpu_isa()),
              impl ? impl : "(null)");
    }
}

/* A shape is made once: calling it again (from either precision's fp32 path, at another
 * address) finds the cached primitive. */
static void test_cache_hits(void) {
    float A[6 * 5], B[5 * 3], C[6 * 3];
    for (int i = 0; i < 30; i++) A[i] = (float)i;
    for (int i = 0; i < 15; i++) B[i] = 1.0f;
    const int before = gemm_dnnl_cached();
    for (int r = 0; r < 10; r++) model_gemm(GEMM_T, GEMM_N, 6, 3, 5, 0.75f, A, 5, B, 5, 0, C, 6);
    CHECK(gemm_dnnl_cached() == before + 1, "one new shape, one entry (%d -> %d)", before,
          gemm_dnnl_cached());
}

/* More shapes than the cache holds: it stops growing at its bound, and products beyond it
 * (made, run and dropped on each call) are still right. Keys differ by alpha (exact here:
 * small integers). */
static void test_cache_bound(void) {
    float A[64 * 4], B[4], C[64];
    for (int i = 0; i < 64 * 4; i++) A[i] = (float)(i % 7);
    for (int i = 0; i < 4; i++) B[i] = 1.0f;
    int ok = 1, grew_past = 0;
    for (int s = 0; s < 900; s++) {
        const int m = 1 + s % 64;
        const float alpha = 1.0f + (float)s;
        model_gemm(GEMM_N, GEMM_N, m, 1, 4, alpha, A, 64, B, 4, 0, C, m);
        for (int i = 0; i < m; i++)
            ok &= C[i] == alpha * (A[i] + A[i + 64] + A[i + 128] + A[i + 192]);
        grew_past |= gemm_dnnl_cached() > 768;
    }
    CHECK(ok, "products right beyond the cache's bound");
    CHECK(!grew_past && gemm_dnnl_cached() == 768, "cache bounded: %d entries", gemm_dnnl_cached());
}

static void test_precision_names(void) {
    precision_t p;
    char err[200];
    for (int i = 0; i < 3; i++)
        CHECK(!precision_parse(precision_name((precision_t)i), &p, err, sizeof err) && p == (precision_t)i,
              "%s round trip", precision_name((precision_t)i));
    CHECK(precision_parse("fp16", &p, err, sizeof err) == -1 && strstr(err, "fp16") && strstr(err, "bf16"),
          "unknown name refused with one line: %s", err);
    CHECK(precision_cpu_check(PRECISION_FP32, err, sizeof err) == 0 &&
              precision_cpu_check(PRECISION_BF16, err, sizeof err) == 0,
          "the CPU runs fp32 and bf16");
    CHECK(precision_cpu_check(PRECISION_TF32, err, sizeof err) == -1 && strstr(err, "tf32") &&
              !strchr(err, '\n'),
          "the CPU refuses tf32 with one line: %s", err);
}

/* A Linear's backward at bf16 (model/ops_linear.c) gives the bits of its two products through
 * model_gemm_prec, dx set or accumulated: below native bf16 it rounds dy once for both products
 * instead of letting each product round it (shadows off, so a native level takes the products'
 * own path and this holds trivially there). */
static void test_linear_backward_bf16(void) {
    const int N = 70, in = 48, out = 96;
    float *x = rnd((size_t)N * in), *w = rnd((size_t)out * in), *dy = rnd((size_t)N * out);
    float *dx0 = rnd((size_t)N * in), *dw0 = rnd((size_t)out * in);
    float *dx = malloc(sizeof(float) * N * in), *dw = malloc(sizeof(float) * out * in);
    float *ex = malloc(sizeof(float) * N * in), *ew = malloc(sizeof(float) * out * in);
    const precision_t saved = ops_product_precision;
    ops_product_precision = PRECISION_BF16;
    ops_bf16_shadows_enable(0);
    for (int set = 0; set < 2; set++) {
        memcpy(dx, dx0, sizeof(float) * N * in), memcpy(ex, dx0, sizeof(float) * N * in);
        memcpy(dw, dw0, sizeof(float) * out * in), memcpy(ew, dw0, sizeof(float) * out * in);
        if (set) linear_backward_set(dx, dw, dy, x, w, N, in, out);
        else linear_backward(dx, dw, dy, x, w, N, in, out);
        model_gemm_prec(PRECISION_BF16, GEMM_N, GEMM_N, in, N, out, 1.0f, w, in, dy, out, set ? 0.0f : 1.0f, ex, in);
        model_gemm_prec(PRECISION_BF16, GEMM_N, GEMM_T, in, out, N, 1.0f, x, in, dy, out, 1.0f, ew, in);
        CHECK(!memcmp(dx, ex, sizeof(float) * N * in), "%s: dx has the products' bits",
              set ? "linear_backward_set" : "linear_backward");
        CHECK(!memcmp(dw, ew, sizeof(float) * out * in), "%s: dw has the products' bits",
              set ? "linear_backward_set" : "linear_backward");
    }
    ops_bf16_shadows_enable(1);
    ops_product_precision = saved;
    free(x), free(w), free(dy), free(dx0), free(dw0), free(dx), free(dw), free(ex), free(ew);
}

int main(void) {
    rng_seed(&R, 11);
    RUN(test_bf16_cases);
    RUN(test_bf16_exhaustive);
    RUN(test_precision_names);
    RUN(test_engine);
    RUN(test_products_fp32);
    RUN(test_products_bf16);
    RUN(test_large);
    RUN(test_bf16_differs);
    RUN(test_degenerate);
    RUN(test_batched);
    RUN(test_repeatable);
    RUN(test_in_parallel);
    RUN(test_linear_backward_bf16);
    RUN(test_cache_hits);
    RUN(test_cache_bound);
    return check_summary();
}
