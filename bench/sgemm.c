/* bench/sgemm.c: the machine's matrix-product limit, and which engine is fastest at the
 * training step's shapes.
 *
 *   build/bench/sgemm [N] [REPEATS]
 *       cblas_sgemm (OpenBLAS, its own threads) at N x N x N: one number, the median GFLOP/s
 *       of REPEATS products (default 1024, 9). bench/bench_train.sh reads this line.
 *   build/bench/sgemm --engine E [--shape M,N,K[,TT]] [--reps R]
 *       one number, the median GFLOP/s of engine E at that shape (default 1024^3, NN):
 *         openblas  cblas_sgemm with OpenBLAS's own threads
 *         blas      the project's OpenBLAS engine (model/gemm_blas.c: single-threaded
 *                   OpenBLAS split over the OpenMP threads; model_gemm before oneDNN)
 *         onednn    oneDNN's fp32 matmul (model/gemm_dnnl.c), whatever model_gemm would pick
 *         fp32      model_gemm_prec(PRECISION_FP32): what the model runs (oneDNN, or OpenBLAS
 *                   where model/gemm.c routes the shape there)
 *         bf16      model_gemm_prec(PRECISION_BF16): operands rounded to bf16, then oneDNN bf16
 *                   where the level is x86-64-v4-bf16, the fp32 product elsewhere (emulated:
 *                   the rounding pass is timed too)
 *       The limit_fp32_gflops / limit_bf16_gflops are `--engine onednn|bf16 --shape` of
 *       the step's largest product (the tied head's forward: M,N,K = V,B*T,d, TN; config S
 *       4096,2048,256,TN, config M 8192,2048,512,TN).
 *   build/bench/sgemm --table [--reps R] [--step-only] [--match TEXT]
 *       every engine at 1024^3, the limit shapes of configs S and M, and every product shape
 *       of their training step (B*T = 2048; attention's at one thread, as it runs them inside
 *       its parallel region), with the oneDNN implementation that runs each; the engines
 *       alternate within each repeat. --match keeps the rows whose name contains TEXT.
 * Threads: OMP_NUM_THREADS (the process's OpenMP threads; OpenBLAS's own are set to the same
 * number for the "openblas" engine). Column-major shapes, as model/gemm.h. */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/stats.h"
#include "common/progress.h"
#include "model/gemm.h"
#include "model/gemm_impl.h"

typedef enum { ENG_OPENBLAS, ENG_BLAS, ENG_ONEDNN, ENG_FP32, ENG_BF16, ENG_COUNT } engine_t;
static const char *const engine_names[ENG_COUNT] = {"openblas", "blas", "onednn", "fp32", "bf16"};

typedef struct {
    const char *what;
    int ta, tb, m, n, k;
    float beta;
    int threads1;   /* runs at one thread (inside attention's parallel region) */
} shape_t;

static float *filled(size_t n, int mod) {
    float *p = malloc(sizeof(float) * n);
    for (size_t i = 0; p && i < n; i++) p[i] = (float)(i % mod) / (float)mod - 0.5f;
    return p;
}

static void product(engine_t e, const shape_t *s, const float *A, const float *B, float *C) {
    const int lda = s->ta ? s->k : s->m, ldb = s->tb ? s->n : s->k;
    switch (e) {
    case ENG_OPENBLAS:
        cblas_sgemm(CblasColMajor, s->ta ? CblasTrans : CblasNoTrans, s->tb ? CblasTrans : CblasNoTrans,
                    s->m, s->n, s->k, 1.0f, A, lda, B, ldb, s->beta, C, s->m);
        break;
    case ENG_BLAS:
        gemm_blas(s->ta, s->tb, s->m, s->n, s->k, 1.0f, A, lda, 0, B, ldb, 0, s->beta, C, s->m, 0, 1);
        break;
    case ENG_ONEDNN:
        if (gemm_dnnl(GEMM_IN_F32, s->ta, s->tb, s->m, s->n, s->k, 1.0f, A, lda, 0, B, ldb, 0,
                      s->beta, C, s->m, 0, 1))
            gemm_blas(s->ta, s->tb, s->m, s->n, s->k, 1.0f, A, lda, 0, B, ldb, 0, s->beta, C, s->m,
                      0, 1);
        break;
    default:
        model_gemm_prec(e == ENG_BF16 ? PRECISION_BF16 : PRECISION_FP32, s->ta, s->tb, s->m, s->n,
                        s->k, 1.0f, A, lda, B, ldb, s->beta, C, s->m);
    }
}

/* Median and best GFLOP/s of each engine of `engines` (a bit set) at shape s, into g[engine]
 * and best[engine]: one
 * warm-up product per engine (which also creates oneDNN's primitive), then `reps` rounds that
 * run each engine once, so that load from other users of the machine hits every engine alike.
 * Returns -1 when out of memory. */
static int measure(unsigned engines, const shape_t *s, int reps, double *g, double *best) {
    const int threads = s->threads1 ? 1 : omp_get_max_threads();
    const int saved = omp_get_max_threads();
    float *A = filled((size_t)s->m * s->k, 17), *B = filled((size_t)s->k * s->n, 13),
          *C = filled((size_t)s->m * s->n, 11);
    double *t = malloc(sizeof(double) * reps * ENG_COUNT);
    int rc = A && B && C && t ? 0 : -1;
    omp_set_num_threads(threads);
    for (int r = -1; !rc && r < reps; r++)
        for (int e = 0; e < ENG_COUNT; e++) {
            if (!(engines >> e & 1)) continue;
            openblas_set_num_threads(e == ENG_OPENBLAS ? threads : 1);
            double t0 = progress_now();
            product((engine_t)e, s, A, B, C);
            if (r >= 0) t[e * reps + r] = 2.0 * s->m * s->n * (double)s->k / (progress_now() - t0) / 1e9;
        }
    for (int e = 0; !rc && e < ENG_COUNT; e++)
        if (engines >> e & 1) {
            qsort(t + e * reps, reps, sizeof *t, bench_cmp_double);
            g[e] = t[e * reps + reps / 2];
            best[e] = t[e * reps + reps - 1];
        }
    omp_set_num_threads(saved);
    free(A), free(B), free(C), free(t);
    return rc;
}

static const char *impl_of(engine_t e, const shape_t *s) {
    if (e != ENG_FP32 && e != ENG_BF16) return "";
    const int saved = omp_get_max_threads();
    if (s->threads1) omp_set_num_threads(1);
    const int native = e == ENG_BF16 && model_gemm_bf16_native();
    const char *impl = gemm_dnnl_impl(native ? GEMM_IN_BF16 : GEMM_IN_F32, s->ta, s->tb, s->m, s->n,
                                      s->k, 1.0f, s->ta ? s->k : s->m, 0, s->tb ? s->n : s->k, 0,
                                      s->beta, s->m, 0, 1);
    omp_set_num_threads(saved);
    return impl ? impl : "none";
}

/* Column-major, as gemm.h: Linear forward (T,N, out, N, in), dx (N,N, in, N, out, beta 1 or 0),
 * dW (N,T, in, out, N, beta 1); attention with 2 heads per key/value group: 128 stacked rows,
 * hd 64, T 256 keys (the last query block's key count). */
#define STEP_SHAPES(c, d, dq, dkv, f, v)                                                    \
    {c " qkv fwd", 1, 0, dq + 2 * dkv, 2048, d, 0, 0},                                        \
    {c " qkv dx", 0, 0, d, 2048, dq + 2 * dkv, 0, 0},                                         \
    {c " qkv dW", 0, 1, d, dq + 2 * dkv, 2048, 1, 0},                                         \
    {c " o fwd", 1, 0, d, 2048, dq, 0, 0},                                                    \
    {c " o dx", 0, 0, dq, 2048, d, 0, 0},                                                     \
    {c " o dW", 0, 1, dq, d, 2048, 1, 0},                                                     \
    {c " gate/up fwd", 1, 0, f, 2048, d, 0, 0},                                               \
    {c " gate/up dx", 0, 0, d, 2048, f, 1, 0},                                                \
    {c " gate/up dW", 0, 1, d, f, 2048, 1, 0},                                                \
    {c " down fwd", 1, 0, d, 2048, f, 0, 0},                                                  \
    {c " down dx", 0, 0, f, 2048, d, 0, 0},                                                   \
    {c " down dW", 0, 1, f, d, 2048, 1, 0},                                                   \
    {c " head fwd", 1, 0, v, 2048, d, 0, 0},                                                  \
    {c " head dx", 0, 0, d, 2048, v, 0, 0},                                                   \
    {c " head dW", 0, 1, d, v, 2048, 1, 0}

static const shape_t attention_shapes[] = {
    {"att scores", 1, 0, 256, 128, 64, 0, 1},
    {"att PV", 0, 0, 64, 128, 256, 0, 1},
    {"att dV/dK", 0, 1, 64, 256, 128, 1, 1},
    {"att dQ", 0, 0, 64, 128, 256, 0, 1},
};

static void table(int reps, int step_only, const char *match) {
    const shape_t limits[] = {
        {"cube 1024", 0, 0, 1024, 1024, 1024, 0, 0},
        {"S limit (head fwd)", 1, 0, 4096, 2048, 256, 0, 0},
        {"M limit (head fwd)", 1, 0, 8192, 2048, 512, 0, 0},
    };
    const shape_t step[] = {STEP_SHAPES("S", 256, 256, 128, 768, 4096),
                            STEP_SHAPES("M", 512, 512, 256, 1536, 8192)};
    printf("%s; %d threads; OPENBLAS_CORETYPE=%s; GFLOP/s, median/best of %d\n", model_gemm_describe(),
           omp_get_max_threads(), getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "unset",
           reps);
    printf("%-22s %5s %5s %5s %2s %4s", "shape", "m", "n", "k", "op", "beta");
    for (int e = 0; e < ENG_COUNT; e++) printf(" %11s", engine_names[e]);
    printf("  oneDNN impl (fp32 / bf16)\n");
    const shape_t *groups[] = {limits, step, attention_shapes};
    const size_t counts[] = {sizeof limits / sizeof *limits, sizeof step / sizeof *step,
                             sizeof attention_shapes / sizeof *attention_shapes};
    for (int g = step_only ? 1 : 0; g < 3; g++)
        for (size_t i = 0; i < counts[g]; i++) {
            const shape_t *s = &groups[g][i];
            if (match && !strstr(s->what, match)) continue;
            printf("%-22s %5d %5d %5d %c%c %4.0f", s->what, s->m, s->n, s->k, s->ta ? 'T' : 'N',
                   s->tb ? 'T' : 'N', s->beta);
            double g[ENG_COUNT], best[ENG_COUNT];
            if (measure((1u << ENG_COUNT) - 1, s, reps, g, best)) {
                printf("  out of memory\n");
                continue;
            }
            for (int e = 0; e < ENG_COUNT; e++) printf(" %5.0f/%5.0f", g[e], best[e]);
            printf("  %s / %s%s\n", impl_of(ENG_FP32, s), impl_of(ENG_BF16, s),
                   s->threads1 ? " (1 thread)" : "");
            fflush(stdout);
        }
}

static int usage(void) {
    fprintf(stderr, "usage: sgemm [N] [REPEATS] | --engine openblas|blas|onednn|fp32|bf16 [--shape M,N,K[,TT]] "
                    "[--reps R] | --table [--reps R] [--step-only] [--match TEXT]\n");
    return 2;
}

int main(int argc, char **argv) {
    int reps = 9, tab = 0, step_only = 0, eng = -1;
    const char *match = NULL;
    shape_t s = {"cube", 0, 0, 1024, 1024, 1024, 0, 0};
    int positional = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--table")) tab = 1;
        else if (!strcmp(a, "--step-only")) step_only = 1;
        else if (!strcmp(a, "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(a, "--match") && i + 1 < argc) match = argv[++i];
        else if (!strcmp(a, "--engine") && i + 1 < argc) {
            const char *v = argv[++i];
            for (int e = 0; e < ENG_COUNT; e++)
                if (!strcmp(v, engine_names[e])) eng = e;
            if (eng < 0) return usage();
        } else if (!strcmp(a, "--shape") && i + 1 < argc) {
            char t[3] = "NN";
            if (sscanf(argv[++i], "%d,%d,%d,%2[NT]", &s.m, &s.n, &s.k, t) < 3) return usage();
            s.ta = t[0] == 'T', s.tb = t[1] == 'T';
        } else if (a[0] != '-' && positional == 0) {
            s.m = s.n = s.k = atoi(a);
            positional++;
        } else if (a[0] != '-' && positional == 1) {
            reps = atoi(a);
            positional++;
        } else
            return usage();
    }
    if (reps <= 0 || reps > 1000 || s.m <= 0 || s.n <= 0 || s.k <= 0) return usage();
    char err[256];
    if (eng != ENG_OPENBLAS && eng != -1 && model_gemm_check(err, sizeof err))
        fprintf(stderr, "sgemm: %s (products run on OpenBLAS)\n", err);
    if (tab) {
        table(reps, step_only, match);
        return 0;
    }
    const engine_t e = eng < 0 ? ENG_OPENBLAS : (engine_t)eng;
    double g[ENG_COUNT], best[ENG_COUNT];
    if (measure(1u << e, &s, reps, g, best)) {
        fprintf(stderr, "sgemm: out of memory\n");
        return 1;
    }
    printf("%.2f\n", g[e]);
    return 0;
}
