/* tests/test_ops.c: forward values of the kernels against naive definitions, and the
 * optimizer/schedule arithmetic against hand-computed values. (Backward passes are checked by
 * finite differences in test_gradcheck.c.) */
#include "model/adamw.h"
#include "model/device.h"
#include "model/gemm.h"
#include "model/ops.h"
#include "model/ops_clones.h"
#include "model/ops_exp16.h"
#include "model/ops_math.h"
#include "model/schedule.h"
#include "common/rng.h"
#include "tests/check.h"
#include <omp.h>
#include <stdlib.h>
#include <string.h>

static rng_t R;
static float *rnd(size_t n) {
    float *p = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) p[i] = rng_normal(&R);
    return p;
}

/* model_gemm against a naive column-major product, for all four transpose combinations, with
 * leading dimensions larger than the matrices and beta != 0. */
static void test_gemm_mapping(void) {
    const int m = 5, n = 4, k = 3, ld = 7;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            float *A = rnd(ld * 7), *B = rnd(ld * 7), *C = rnd(ld * n), *C0 = malloc(sizeof(float) * ld * n);
            memcpy(C0, C, sizeof(float) * ld * n);
            model_gemm(ta, tb, m, n, k, 0.5f, A, ld, B, ld, 2.0f, C, ld);
            double md = 0;
            for (int i = 0; i < m; i++)
                for (int j = 0; j < n; j++) {
                    double s = 0;
                    for (int p = 0; p < k; p++) {
                        double a = ta ? A[p + i * ld] : A[i + p * ld];
                        double b = tb ? B[j + p * ld] : B[p + j * ld];
                        s += a * b;
                    }
                    md = fmax(md, fabs(C[i + j * ld] - (0.5 * s + 2.0 * C0[i + j * ld])));
                }
            /* k = 3 products of N(0,1): float rounding ~1e-6 */
            CHECK(md < 1e-5, "transa=%d transb=%d max diff %g", ta, tb, md);
            free(A); free(B); free(C); free(C0);
        }
}

/* Linear is y = x W^T with W (out, in), row-major: the HF convention. */
static void test_linear_rowmajor(void) {
    const int N = 3, in = 4, out = 2;
    float *x = rnd(N * in), *W = rnd(out * in), y[6];
    linear_forward(y, x, W, N, in, out);
    double md = 0;
    for (int r = 0; r < N; r++)
        for (int o = 0; o < out; o++) {
            double s = 0;
            for (int i = 0; i < in; i++) s += (double)x[r * in + i] * W[o * in + i];
            md = fmax(md, fabs(y[r * out + o] - s));
        }
    CHECK(md < 1e-5, "linear max diff %g", md);
    free(x); free(W);
}

/* Attention against the textbook softmax(q k^T / sqrt(hd)) v with the full score matrix; with
 * window W > 0 (causal), the row at position p = i + Tk - Tq masks every key but p-W+1 .. p. */
static void attention_vs_naive_w(int Tq, int Tk, int H, int Hkv, int causal, int window) {
    const int B = 2, hd = 8, group = H / Hkv;
    size_t nq = (size_t)B * Tq * H * hd, nk = (size_t)B * Tk * Hkv * hd;
    float *q = rnd(nq), *k = rnd(nk), *v = rnd(nk), *o = malloc(sizeof(float) * nq),
          *lse = malloc(sizeof(float) * B * H * Tq);
    attention_window_forward(o, lse, q, k, v, B, Tq, Tk, H, Hkv, hd, causal, window);
    double md = 0, ml = 0, *s = malloc(sizeof(double) * Tk);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < Tq; i++) {
                double mx = -1e300, z = 0;
                int nvis = causal ? i + (Tk - Tq) + 1 : Tk;
                int first = causal && window > 0 && nvis - window > 0 ? nvis - window : 0;
                for (int j = first; j < nvis; j++) {
                    double d = 0;
                    for (int e = 0; e < hd; e++)
                        d += (double)q[((b * Tq + i) * H + h) * hd + e] * k[((b * Tk + j) * Hkv + h / group) * hd + e];
                    s[j] = d / sqrt((double)hd);
                    mx = fmax(mx, s[j]);
                }
                for (int j = first; j < nvis; j++) z += exp(s[j] - mx);
                for (int e = 0; e < hd; e++) {
                    double acc = 0;
                    for (int j = first; j < nvis; j++)
                        acc += exp(s[j] - mx) / z * v[((b * Tk + j) * Hkv + h / group) * hd + e];
                    md = fmax(md, fabs(o[((b * Tq + i) * H + h) * hd + e] - acc));
                }
                ml = fmax(ml, fabs(lse[(b * H + h) * Tq + i] - (mx + log(z))));
            }
    /* float vs double on O(1) values with up to ~100 terms: 1e-5 is generous, a wrong mask or
     * head mapping gives O(0.1) */
    CHECK(md < 1e-5 && ml < 1e-5, "Tq=%d Tk=%d H=%d Hkv=%d causal=%d window=%d: out diff %g lse diff %g",
          Tq, Tk, H, Hkv, causal, window, md, ml);
    free(q); free(k); free(v); free(o); free(lse); free(s);
}
static void attention_vs_naive(int Tq, int Tk, int H, int Hkv, int causal) {
    attention_vs_naive_w(Tq, Tk, H, Hkv, causal, 0);
}

/* The sliding window (seed 003) against the masked textbook attention: narrower than one of
 * the CPU's position blocks and wider, one key only, a KV-cache chunk (Tq < Tk), stacked head
 * groups; and a window of T or more is the unlimited op bit for bit. */
static void test_attention_window_values(void) {
    attention_vs_naive_w(9, 9, 4, 2, 1, 3);
    attention_vs_naive_w(9, 9, 2, 2, 1, 1);
    attention_vs_naive_w(100, 100, 2, 2, 1, 30);
    attention_vs_naive_w(150, 150, 8, 2, 1, 40);
    attention_vs_naive_w(37, 90, 8, 1, 1, 20);
    attention_vs_naive_w(1, 257, 4, 1, 1, 64);
    attention_vs_naive_w(130, 130, 4, 2, 1, 129);
    const int B = 2, T = 70, H = 4, Hkv = 2, hd = 8;
    const size_t nq = (size_t)B * T * H * hd, nk = (size_t)B * T * Hkv * hd, nl = (size_t)B * H * T;
    float *q = rnd(nq), *k = rnd(nk), *v = rnd(nk);
    float *o1 = malloc(sizeof(float) * nq), *o2 = malloc(sizeof(float) * nq);
    float *l1 = malloc(sizeof(float) * nl), *l2 = malloc(sizeof(float) * nl);
    attention_forward(o1, l1, q, k, v, B, T, T, H, Hkv, hd, 1);
    attention_window_forward(o2, l2, q, k, v, B, T, T, H, Hkv, hd, 1, T);
    CHECK(!memcmp(o1, o2, sizeof(float) * nq) && !memcmp(l1, l2, sizeof(float) * nl),
          "window T is the unlimited causal attention bit for bit");
    free(q); free(k); free(v); free(o1); free(o2); free(l1); free(l2);
}

/* The LTM's latent ops against their definitions: z = mu + e^ls eps; KL per sequence of the
 * (L, B, n) layout; the normals: mean/std as asked, per-sequence streams independent of B. */
static void test_ltm_latent_values(void) {
    enum { L = 2, B = 3, n = 5 };
    const size_t N = (size_t)L * B * n;
    float *mu = rnd(N), *ls = rnd(N), *eps = rnd(N), z[N], kl[B];
    latent_sample(z, mu, ls, eps, N);
    double md = 0;
    for (size_t i = 0; i < N; i++) md = fmax(md, fabs(z[i] - (mu[i] + exp((double)ls[i]) * eps[i])));
    CHECK(md < 1e-5, "latent_sample diff %g", md);
    latent_kl_rows(kl, mu, ls, L, B, n);
    for (int b = 0; b < B; b++) {
        double s = 0;
        for (int l = 0; l < L; l++)
            for (int i = 0; i < n; i++) {
                double m = mu[(l * B + b) * n + i], sg = exp((double)ls[(l * B + b) * n + i]);
                s += 0.5 * (m * m + sg * sg - 1.0) - log(sg);
            }
        CHECK_CLOSE(kl[b], s, 1e-5, 1e-6);
    }
    /* sequence b of a batch draws what it draws alone as row0 + b */
    float *x3 = malloc(sizeof(float) * L * 3 * 1000), *x1 = malloc(sizeof(float) * L * 1000);
    latent_normal(x3, L, 3, 1000, 42, 10, 0.0f, 1.0f);
    latent_normal(x1, L, 1, 1000, 42, 12, 0.0f, 1.0f);
    int same = 1;
    for (int l = 0; l < L; l++) same &= !memcmp(x1 + l * 1000, x3 + (l * 3 + 2) * 1000, sizeof(float) * 1000);
    CHECK(same, "sequence 12 draws the same numbers in a batch from 10 and alone");
    double m1 = 0, m2 = 0;
    for (int i = 0; i < L * 3000; i++) m1 += x3[i], m2 += (double)x3[i] * x3[i];
    m1 /= L * 3000, m2 = m2 / (L * 3000) - m1 * m1;
    /* 6000 draws: the mean's standard error is 0.013, the variance's 0.018 */
    CHECK(fabs(m1) < 0.06 && fabs(m2 - 1.0) < 0.08, "normals: mean %g variance %g", m1, m2);
    latent_normal(x1, L, 1, 1000, 42, 12, -2.5f, 0.05f);
    double mm = 0;
    for (int i = 0; i < L * 1000; i++) mm = fmax(mm, fabs(x1[i] - (-2.5 + 0.05 * x3[(i / 1000 * 3 + 2) * 1000 + i % 1000])));
    CHECK(mm < 1e-6, "mean + std * the same normal (diff %g)", mm);
    free(mu); free(ls); free(eps); free(x3); free(x1);
}
static void test_attention_values(void) {
    attention_vs_naive(9, 9, 4, 2, 1);
    attention_vs_naive(9, 9, 4, 2, 0);
    attention_vs_naive(3, 11, 2, 1, 1);
    attention_vs_naive(100, 100, 2, 2, 1);  /* spans two key blocks */
    /* stacked head groups (ATT_ROWS / group positions per block), partial last blocks, a
     * decoding row of a group of 4 (4 stacked rows: the blocked path) and of 2 (the row
     * kernel), a KV-cache chunk */
    attention_vs_naive(150, 150, 8, 2, 1);
    attention_vs_naive(37, 90, 8, 1, 1);
    attention_vs_naive(37, 90, 8, 1, 0);
    attention_vs_naive(1, 257, 4, 1, 1);
    attention_vs_naive(1, 257, 4, 2, 1);
    attention_vs_naive(130, 130, 4, 2, 1);
}

static void test_rope_properties(void) {
    const int hd = 16, S = 40;
    float cs[S * hd / 2], sn[S * hd / 2];
    rope_table_init(cs, sn, S, hd, 10000.0f);
    float *x = rnd(S * hd), *y = malloc(sizeof(float) * S * hd), *z = calloc(S * hd, sizeof(float));
    rope_forward(y, x, cs, sn, 1, S, 1, hd, 0);
    /* position 0 is the identity; rotation keeps the norm; pair (i, i+hd/2) at position p is
     * rotated by p * theta^(-2i/hd) */
    double md0 = 0;
    for (int e = 0; e < hd; e++) md0 = fmax(md0, fabs(y[e] - x[e]));
    CHECK(md0 == 0.0, "position 0 must not rotate (diff %g)", md0);
    for (int p = 0; p < S; p++) {
        double nx = 0, ny = 0;
        for (int e = 0; e < hd; e++) { nx += x[p * hd + e] * x[p * hd + e]; ny += y[p * hd + e] * y[p * hd + e]; }
        CHECK(fabs(nx - ny) < 1e-4 * nx, "norm changed at position %d", p);
    }
    const int p = 7, i = 2;
    double ang = p * pow(10000.0, -2.0 * i / hd);
    double a = x[p * hd + i], b = x[p * hd + i + hd / 2];
    CHECK_CLOSE(y[p * hd + i], a * cos(ang) - b * sin(ang), 1e-6, 1e-5);
    CHECK_CLOSE(y[p * hd + i + hd / 2], b * cos(ang) + a * sin(ang), 1e-6, 1e-5);
    /* backward of the forward is the inverse rotation */
    rope_backward(z, y, cs, sn, 1, S, 1, hd, 0);
    double md = 0;
    for (int e = 0; e < S * hd; e++) md = fmax(md, fabs(z[e] - x[e]));
    CHECK(md < 1e-5, "R^T R x != x (diff %g)", md);
    free(x); free(y); free(z);
}

static void test_crossentropy_values(void) {
    const int N = 3, V = 7;
    float z[21] = {0}, lse[3];
    uint32_t t[3] = {0, 3, 6};
    uint8_t none[3] = {0, 0, 0};
    int cnt;
    float l = crossentropy_forward(NULL, lse, &cnt, z, t, NULL, N, V, 1.0f);
    CHECK_CLOSE(l, log(7.0), 0, 1e-6);  /* uniform logits: log V */
    float d[21];
    l = crossentropy_forward(d, lse, &cnt, z, t, none, N, V, 1.0f);
    double s = 0;
    for (int i = 0; i < 21; i++) s += fabs(d[i]);
    CHECK(l == 0.0f && cnt == 0 && s == 0.0, "no counted target: loss %g count %d |d| %g", l, cnt, s);
    /* a row of huge logits must not overflow (max subtraction) */
    float big[7] = {1000, 999, 998, 0, 0, 0, 0};
    uint32_t t0 = 1;
    l = crossentropy_forward(NULL, lse, NULL, big, &t0, NULL, 1, V, 1.0f);
    double ref = log(1 + exp(-1.0) + exp(-2.0) + 4 * exp(-1000.0)) + 1.0;
    CHECK_CLOSE(l, ref, 1e-5, 1e-5);
}

static void test_math_helpers(void) {
    CHECK_CLOSE(ops_silu(0.0f), 0.0, 1e-7, 0);
    CHECK_CLOSE(ops_silu(2.0f), 2.0 / (1 + exp(-2.0)), 1e-7, 1e-6);
    CHECK_CLOSE(ops_silu_grad(1.5f), (ops_silu(1.5f + 1e-3f) - ops_silu(1.5f - 1e-3f)) / 2e-3, 1e-3, 1e-3);
    /* online softmax over two halves == direct */
    float s[6] = {0.3f, -1.0f, 2.5f, 0.1f, 3.0f, -2.0f};
    float m = -INFINITY, l = 0;
    for (int half = 0; half < 2; half++) {
        float bm = -INFINITY;
        for (int j = 0; j < 3; j++) bm = fmaxf(bm, s[half * 3 + j]);
        ops_online_softmax_rescale(&m, &l, bm);
        for (int j = 0; j < 3; j++) l += expf(s[half * 3 + j] - m);
    }
    CHECK_CLOSE(m + logf(l), ops_logsumexp_row(s, 6), 1e-6, 1e-6);
}

/* The vectorisable exp against libm's, over the range softmax and sigmoid use. */
static void test_expf_accuracy(void) {
    double worst = 0;
    for (float x = -87.0f; x <= 88.0f; x += 0.0137f) {
        double ref = exp((double)x), rel = fabs(ops_expf(x) - ref) / ref;
        if (rel > worst) worst = rel;
    }
    /* Cephes' polynomial is good to ~2 ulp (2.4e-7); 5e-7 still catches a wrong coefficient */
    CHECK(worst < 5e-7, "ops_expf worst relative error %g", worst);
    CHECK(ops_expf(-INFINITY) == 0.0f && ops_expf(-200.0f) == 0.0f, "underflow must give 0");
    CHECK(ops_expf(0.0f) == 1.0f, "exp(0) = %g", ops_expf(0.0f));
}

static void test_schedule(void) {
    schedule_t s = {.lr_max = 1e-3f, .lr_min = 1e-4f, .warmup_steps = 10, .total_steps = 110};
    char err[128];
    CHECK(schedule_check(&s, err, sizeof(err)) == 0, "%s", err);
    CHECK_CLOSE(schedule_lr(&s, 0), 1e-4, 0, 1e-6);
    CHECK_CLOSE(schedule_lr(&s, 9), 1e-3, 0, 1e-6);
    CHECK_CLOSE(schedule_lr(&s, 10), 1e-3, 0, 1e-6);
    CHECK_CLOSE(schedule_lr(&s, 60), 5.5e-4, 0, 1e-6);   /* half-way: the mean of peak and floor */
    CHECK_CLOSE(schedule_lr(&s, 110), 1e-4, 0, 1e-6);
    CHECK_CLOSE(schedule_lr(&s, 1000), 1e-4, 0, 1e-6);
    schedule_t bad = {.lr_max = 1e-4f, .lr_min = 1e-3f, .warmup_steps = 0, .total_steps = 5};
    CHECK(schedule_check(&bad, err, sizeof(err)) != 0, "floor above peak accepted");
}

/* One AdamW step on two tensors, against the formula written out by hand. */
static void test_adamw_step(void) {
    float w[4] = {1.0f, -2.0f, 0.5f, 3.0f}, n[2] = {1.0f, 1.0f};
    float gw[4] = {0.1f, -0.2f, 0.3f, 0.0f}, gn[2] = {0.5f, -0.5f};
    tensor_view_t p[2] = {{.name = "model.layers.0.mlp.up_proj.weight", .ndim = 2, .shape = {2, 2}, .data = w},
                          {.name = "model.norm.weight", .ndim = 1, .shape = {2}, .data = n}};
    tensor_view_t g[2] = {p[0], p[1]};
    g[0].data = gw; g[1].data = gn;
    adamw_config_t c = {.beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f, .weight_decay = 0.1f};
    adamw_t *o = NULL;
    char err[128];
    CHECK(adamw_create(&o, p, 2, &c, err, sizeof(err)) == 0, "%s", err);
    CHECK(adamw_get_decay(o, 0) == 1 && adamw_get_decay(o, 1) == 0, "default decay flags");
    double norm;
    /* grad_scale 2 then clipping at 0.5: norm after scaling is 2*sqrt(0.14+0.5) */
    CHECK(adamw_step(o, g, 2, 0.01f, 2.0f, 0.5f, &norm, err, sizeof(err)) == 0, "%s", err);
    double gn0 = 2 * sqrt(0.01 + 0.04 + 0.09 + 0.25 + 0.25);
    CHECK_CLOSE(norm, gn0, 0, 1e-6);
    double clip = 0.5 / (gn0 + 1e-6);
    double w0[4] = {1.0, -2.0, 0.5, 3.0}, g0[4] = {0.1, -0.2, 0.3, 0.0};
    for (int i = 0; i < 4; i++) {
        double gg = 2 * g0[i] * clip, m = 0.1 * gg, v = 0.01 * gg * gg;
        double pw = w0[i] * (1 - 0.01 * 0.1);
        pw -= (0.01 / 0.1) * m / (sqrt(v) / sqrt(0.01) + 1e-8);
        CHECK_CLOSE(w[i], pw, 1e-6, 1e-5);
    }
    /* the norm weight: no decay */
    double gg = 2 * 0.5 * clip;
    CHECK_CLOSE(n[0], 1.0 - 0.1 * (0.1 * gg) / (sqrt(0.01 * gg * gg) / 0.1 + 1e-8), 1e-6, 1e-5);
    CHECK(adamw_steps(o) == 1, "step count");
    tensor_view_t mv[2];
    CHECK(adamw_moments(o, 0, mv, 2) == 2 && strcmp(mv[1].name, "model.norm.weight") == 0, "moment views");
    CHECK_CLOSE(mv[1].data[0], 0.1 * gg, 1e-7, 1e-5);
    /* a NaN gradient is refused, not applied */
    gw[0] = NAN;
    float before = w[1];
    CHECK(adamw_step(o, g, 2, 0.01f, 1.0f, 0.0f, &norm, err, sizeof(err)) != 0, "NaN accepted");
    CHECK(w[1] == before, "parameters changed by a refused step");
    adamw_destroy(&o);
    CHECK(o == NULL, "destroy NULLs the handle");
}

/* rmsnorm_backward_res splits dx's rows and dw's columns over the threads (ops_rmsnorm.c):
 * every thread count gives one thread's bits, for dx and dw together, dx alone and dw alone,
 * at widths where a slab of 16 columns leaves some threads none (D = 20 at 3 and 4 threads)
 * or a short last slab (D = 131), and with N smaller than the thread count. */
static void test_rmsnorm_backward_threads(void) {
    const int shape[][2] = {{37, 131}, {64, 20}, {2, 48}, {50, 256}};
    const int saved = omp_get_max_threads();
    for (size_t s = 0; s < sizeof shape / sizeof *shape; s++) {
        const int N = shape[s][0], D = shape[s][1];
        const size_t n = (size_t)N * D;
        float *x = rnd(n), *dout = rnd(n), *res = rnd(n), *w = rnd(D), *dw0 = rnd(D), *r = rnd(N);
        for (int i = 0; i < N; i++) r[i] = 0.5f + fabsf(r[i]);
        float *dx1 = malloc(sizeof(float) * n), *dw1 = malloc(sizeof(float) * D);
        float *dx = malloc(sizeof(float) * n), *dw = malloc(sizeof(float) * D);
        omp_set_num_threads(1);
        memcpy(dw1, dw0, sizeof(float) * D);
        rmsnorm_backward_res(dx1, dw1, dout, x, w, r, res, N, D);
        for (int threads = 1; threads <= 4; threads++) {
            omp_set_num_threads(threads);
            for (int which = 0; which < 3; which++) {   /* both, dx alone, dw alone */
                memset(dx, 0xff, sizeof(float) * n);
                memcpy(dw, dw0, sizeof(float) * D);
                rmsnorm_backward_res(which == 2 ? NULL : dx, which == 1 ? NULL : dw, dout, x, w, r,
                                     res, N, D);
                const int dx_ok = which == 2 || !memcmp(dx, dx1, sizeof(float) * n);
                const int dw_ok = !memcmp(dw, which == 1 ? dw0 : dw1, sizeof(float) * D);
                CHECK(dx_ok && dw_ok, "rmsnorm_backward_res at %d threads (N=%d D=%d, %s): %s differs from one thread's",
                      threads, N, D, which == 0 ? "dx and dw" : which == 1 ? "dx alone" : "dw alone",
                      dx_ok ? "dw" : "dx");
            }
        }
        float *all[] = {x, dout, res, w, dw0, r, dx1, dw1, dx, dw};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
    }
    omp_set_num_threads(saved);
}

/* The CPU device's zero: a buffer large enough to be split over the threads (device_cpu.c),
 * of a size no multiple of a line, at an offset inside its allocation: every byte of it zero
 * at every thread count, none beside it touched. */
static void test_device_zero(void) {
    char err[256];
    device_t *d = NULL;
    CHECK(!device_open(&d, "cpu", PRECISION_FP32, err, sizeof err), "cpu device: %s", err);
    if (!d) return;
    const size_t bytes = (3u << 20) + 1236, pad = 4096;
    unsigned char *buf = malloc(bytes + 2 * pad);
    const int saved = omp_get_max_threads();
    for (int threads = 1; threads <= 3; threads++) {
        omp_set_num_threads(threads);
        const size_t lens[] = {100, bytes};   /* below the split's threshold, above it */
        for (int k = 0; k < 2; k++) {
            const size_t len = lens[k];
            memset(buf, 0xa5, bytes + 2 * pad);
            DEV(d, zero, buf + pad + 20, len);
            size_t bad = 0;
            for (size_t i = 0; i < bytes + 2 * pad; i++)
                bad += buf[i] != (i >= pad + 20 && i < pad + 20 + len ? 0 : 0xa5);
            CHECK(bad == 0, "device zero of %zu bytes at %d threads: %zu bytes wrong", len, threads, bad);
        }
    }
    omp_set_num_threads(saved);
    free(buf);
    device_close(&d);
}

/* ops_exp16.h against the v4 build of the generic code it stands in for (the same bits):
 * ops_expf16 lane by lane against ops_expf vectorised at v4, on normal draws and on the edges
 * (each clamp and around it, +-0, +-inf, NaN, huge values); ops_exp_row16's sum and fused max
 * against ops_exp_row and ops_max_row at v4, with ties of +0 and -0 in the max. Runs where the
 * CPU has AVX-512 (whatever FT_CPU_ISA says: it calls the v4 builds directly). The references
 * are built as model/ops_*.c are (-fno-trapping-math, model/module.mk: without it they stay
 * scalar, in another order). */
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math")
OPS_VARIANTS(void, ref_exp, (float *y, const float *x, int n), (y, x, n)) {
    OPS_SIMD
    for (int i = 0; i < n; i++) y[i] = ops_expf(x[i]);
}
OPS_VARIANTS(float, ref_exp_row, (float *e, const float *z, float mx, int n), (e, z, mx, n)) {
    return ops_exp_row(e, z, mx, n);
}
OPS_VARIANTS(float, ref_max_row, (const float *z, int n), (z, n)) { return ops_max_row(z, n); }
#pragma GCC pop_options
#if OPS_EXP16
static OPS_TARGET_V4 __attribute__((noinline)) void exp16_all(float *y, const float *x, int n) {
    for (int i = 0; i < n; i += 16) _mm512_storeu_ps(y + i, ops_expf16(_mm512_loadu_ps(x + i)));
}
#endif
static void test_exp16(void) {
    (void)ref_exp, (void)ref_exp_row, (void)ref_max_row;   /* (their v4 builds are called) */
#if OPS_EXP16
    if (cpu_isa_best() < CPU_ISA_V4) {
        fprintf(stderr, "  (no AVX-512: skipped)\n");
        return;
    }
    enum { N = 4096 };
    float *x = malloc(sizeof(float) * N), *a = malloc(sizeof(float) * N), *b = malloc(sizeof(float) * N);
    float *zn = malloc(sizeof(float) * N);
    const float edge[] = {-87.33654f, 88.0f, -87.3f, -87.4f, 87.9f, 88.1f, 0.0f, -0.0f, INFINITY, -INFINITY,
                          NAN, -NAN, 1e30f, -1e30f, 3.4e38f, -3.4e38f, 1e-40f, -1e-40f, 0.34657359f, -0.34657359f};
    const int ne = (int)(sizeof edge / sizeof *edge);
    long bad = 0;
    for (int pass = 0; pass < 3; pass++) {
        for (int i = 0; i < N; i++) {
            const float g = rng_normal(&R);
            x[i] = pass == 0 ? 8.0f * g : pass == 1 ? 60.0f * g : -90.0f + 4.0f * g;
            if (i % 5 == 0) x[i] = edge[(i / 5) % ne];
            if (i % 7 == 0) x[i] = nextafterf(edge[(i / 7) % ne], (i & 8) ? INFINITY : -INFINITY);
        }
        ref_exp_v4(a, x, N);
        exp16_all(b, x, N);
        for (int i = 0; i < N; i++) bad += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    }
    CHECK(bad == 0, "ops_expf16: %ld lanes differ from ops_expf's v4 build", bad);
    for (int pass = 0; pass < 4; pass++) {
        for (int i = 0; i < N; i++) x[i] = 5.0f * rng_normal(&R), zn[i] = pass < 2 ? 3.0f * rng_normal(&R) : -1.0f;
        if (pass >= 2)   /* the max a tie of signed zeros, in varied lanes */
            for (int i = 3 * pass; i < N; i += 37) zn[i] = (i / 37) & 1 ? 0.0f : -0.0f;
        const float mx = ref_max_row_v4(x, N), s0 = ref_exp_row_v4(a, x, mx, N), m0 = ref_max_row_v4(zn, N);
        float m1 = 1.0f;
        const float s1 = ops_exp_row16(b, x, mx, N, zn, &m1, x), s2 = ops_exp_row16(b, x, mx, N, NULL, NULL, NULL);
        CHECK(!memcmp(a, b, sizeof(float) * N), "ops_exp_row16: the row's exponentials (pass %d)", pass);
        CHECK(!memcmp(&s0, &s1, sizeof s0) && !memcmp(&s0, &s2, sizeof s0), "ops_exp_row16: the sum %a %a %a", s0, s1, s2);
        CHECK(!memcmp(&m0, &m1, sizeof m0), "ops_exp_row16: the next row's max %a, %a (pass %d)", m0, m1, pass);
    }
    free(x), free(a), free(b), free(zn);
#else
    fprintf(stderr, "  (not built: skipped)\n");
#endif
}

int main(void) {
    rng_seed(&R, 99);
    RUN(test_gemm_mapping);
    RUN(test_linear_rowmajor);
    RUN(test_attention_values);
    RUN(test_attention_window_values);
    RUN(test_ltm_latent_values);
    RUN(test_rope_properties);
    RUN(test_crossentropy_values);
    RUN(test_exp16);
    RUN(test_math_helpers);
    RUN(test_expf_accuracy);
    RUN(test_schedule);
    RUN(test_adamw_step);
    RUN(test_rmsnorm_backward_threads);
    RUN(test_device_zero);
    return check_summary();
}
