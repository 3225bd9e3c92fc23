/* model/gemm.c: the entry points of gemm.h: precision, degenerate shapes, bf16 operands, and
 * which engine runs a product (gemm_impl.h).
 *
 * Engine. oneDNN (gemm_dnnl.c) runs every product it has a non-reference implementation for,
 * except where OpenBLAS (gemm_blas.c) was measured faster (gemm_prefers_blas); OpenBLAS runs
 * the rest, and everything when oneDNN failed to initialise. The choice depends on the ISA
 * level and the shape alone (a failed shape is remembered), so a product always takes the
 * same path and results stay deterministic.
 *
 * bf16. The operands are rounded once into per-thread buffers, compact (leading dimension =
 * rows): as bf16 bit patterns when the CPU runs bf16 products natively (ISA level
 * x86-64-v4-bf16), otherwise as fp32 values with the low 16 bits zero, multiplied by the fp32
 * product. Either way each product of two elements is exact in fp32 (8 x 8 significant bits)
 * and the accumulation is fp32: the two paths differ only in the order of the sums. Rounding
 * here rather than in oneDNN's reorder keeps one rounding for both paths and the GPU's
 * (ops_math.h); AVX512-BF16's conversion instruction would also flush subnormals to zero.
 * Where the products are emulated, the Linear and attention ops round their operands once
 * themselves (ops_bf16.h, "When.") and call the fp32 product with those same compact operands. */
#include "model/gemm_impl.h"
#include "model/cpu_isa.h"
#include "model/ops_bf16.h"
#include "model/ops_math.h"
#include "model/prof.h"
#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- per-thread buffers ---------------------------------------------------------------- */

typedef struct {
    void *p[GEMM_TLS_SLOTS];
    size_t cap[GEMM_TLS_SLOTS];
} gemm_tls;

static pthread_key_t tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;
static void tls_free(void *v) {
    gemm_tls *t = v;
    for (int i = 0; i < GEMM_TLS_SLOTS; i++) free(t->p[i]);
    free(t);
}
static void tls_key_make(void) { pthread_key_create(&tls_key, tls_free); }

void *gemm_tls_buffer(int slot, size_t bytes) {
    pthread_once(&tls_once, tls_key_make);
    gemm_tls *t = pthread_getspecific(tls_key);
    if (!t) {
        if (!(t = calloc(1, sizeof *t))) return NULL;
        pthread_setspecific(tls_key, t);
    }
    if (t->cap[slot] < bytes) {
        size_t cap = (bytes + 63) & ~(size_t)63;
        void *p = aligned_alloc(64, cap);
        if (!p) return NULL;
        free(t->p[slot]);
        t->p[slot] = p;
        t->cap[slot] = cap;
    }
    return t->p[slot];
}

/* Set while the timers time a product on the step's thread: the rounding's share. */
static int gemm_timed;
static double gemm_round_s;

/* ---- bf16 operands ---------------------------------------------------------------------- */

/* The stored operand X (rows x cols column-major, leading dimension ld; nb matrices stride
 * apart) rounded to bf16 into the thread's buffer `slot`, compact: leading dimension rows,
 * matrices rows*cols apart. As bf16 bit patterns when native, else as fp32. NULL when out of
 * memory. */
static void *bf16_operand(int slot, int native, const float *X, int rows, int cols, int ld,
                          long long stride, int nb) {
    const size_t total = (size_t)rows * cols * nb;
    void *buf = gemm_tls_buffer(slot, total * (native ? sizeof(uint16_t) : sizeof(float)));
    if (buf) ops_bf16_pack_matrix(buf, !native, X, rows, cols, ld, stride, nb);
    return buf;
}

int model_gemm_bf16_native(void) { return cpu_isa() >= CPU_ISA_V4_BF16 && !gemm_dnnl_status(NULL, 0); }

int model_gemm_check(char *err, size_t errlen) { return gemm_dnnl_status(err, errlen); }

const char *model_gemm_describe(void) { return gemm_dnnl_describe(); }

/* C = beta C for every matrix of the batch (k == 0 or alpha == 0: BLAS reads neither A nor B);
 * beta == 0 writes zeros without reading C. */
static void gemm_scale_only(int m, int n, float beta, float *C, int ldc, long long sc, int batch) {
    for (int b = 0; b < batch; b++)
        for (int j = 0; j < n; j++) {
            float *c = C + b * sc + (size_t)j * ldc;
            if (beta == 0.0f) memset(c, 0, sizeof(float) * m);
            else if (beta != 1.0f)
                for (int i = 0; i < m; i++) c[i] *= beta;
        }
}

/* Products OpenBLAS runs faster than oneDNN 2.6. Below AVX-512 oneDNN's matmul is its jit
 * sgemm, which packs a transposed op(B) slowly: C = A B^T (the weight gradients dW += X^T dY,
 * attention's dV and dK) measured 1.0-2.3x slower than OpenBLAS on Zen 3 (one thread, best of
 * 6: m,n,k = 256,4096,2048 34 vs 78 GFLOP/s; 256,512,2048 55 vs 73; 512,8192,2048 77 vs 80;
 * 64,256,128 52 vs 57), never faster; the other transpose pairs were equal within the noise
 * (bench/NOTES.md, 2026-11-23). At x86-64-v4 and above oneDNN runs its AVX-512 kernels, which
 * the issue measured well ahead of OpenBLAS (1024^3 on Zen 5); every product goes there. */
static int gemm_prefers_blas(gemm_op ta, gemm_op tb) {
    return cpu_isa() < CPU_ISA_V4 && ta == GEMM_N && tb == GEMM_T;
}

/* fp32 operands: oneDNN, else OpenBLAS. */
static void gemm_f32(gemm_op ta, gemm_op tb, int m, int n, int k, float alpha, const float *A,
                     int lda, long long sa, const float *B, int ldb, long long sb, float beta,
                     float *C, int ldc, long long sc, int batch) {
    if (gemm_prefers_blas(ta, tb) || gemm_dnnl(GEMM_IN_F32, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc,
                  batch))
        gemm_blas(ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
}

/* bf16: rounded operands (see the top of the file), natively where the CPU can. */
static void gemm_bf16(gemm_op ta, gemm_op tb, int m, int n, int k, float alpha, const float *A,
                      int lda, long long sa, const float *B, int ldb, long long sb, float beta,
                      float *C, int ldc, long long sc, int batch) {
    /* stored shapes: op(A) = A (m x k) or A^T (A is k x m); the same for B (k x n) */
    const int ar = ta == GEMM_N ? m : k, ac = ta == GEMM_N ? k : m;
    const int br = tb == GEMM_N ? k : n, bc = tb == GEMM_N ? n : k;
    const int na = batch > 1 && sa ? batch : 1, nbb = batch > 1 && sb ? batch : 1;
    const long long sa2 = na > 1 ? (long long)ar * ac : 0, sb2 = nbb > 1 ? (long long)br * bc : 0;
    for (int native = model_gemm_bf16_native(); native >= 0; native--) {
        const double t0 = gemm_timed ? prof_now() : 0.0;
        const void *A2 = bf16_operand(GEMM_TLS_A, native, A, ar, ac, lda, sa, na);
        const void *B2 = bf16_operand(GEMM_TLS_B, native, B, br, bc, ldb, sb, nbb);
        if (gemm_timed) gemm_round_s += prof_now() - t0;
        if (!A2 || !B2) break;
        if (!native) {
            gemm_f32(ta, tb, m, n, k, alpha, A2, ar, sa2, B2, br, sb2, beta, C, ldc, sc, batch);
            return;
        }
        if (!gemm_dnnl(GEMM_IN_BF16, ta, tb, m, n, k, alpha, A2, ar, sa2, B2, br, sb2, beta, C, ldc,
                       sc, batch))
            return;
    }
    /* no memory for the rounded copies: round element by element on the way (slow, rare) */
    for (int b = 0; b < batch; b++)
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                const float *a = A + b * sa, *bb = B + b * sb;
                float s = 0.0f;
                for (int p = 0; p < k; p++)
                    s += ops_bf16_round(ta == GEMM_N ? a[i + (size_t)p * lda] : a[p + (size_t)i * lda]) *
                         ops_bf16_round(tb == GEMM_N ? bb[p + (size_t)j * ldb] : bb[j + (size_t)p * ldb]);
                float *c = C + b * sc + i + (size_t)j * ldc;
                *c = alpha * s + (beta == 0.0f ? 0.0f : beta * *c);
            }
}

void model_gemm_batched_prec(precision_t p, gemm_op transa, gemm_op transb, int m, int n, int k,
                             float alpha, const float *A, int lda, long long strideA,
                             const float *B, int ldb, long long strideB, float beta, float *C,
                             int ldc, long long strideC, int batch) {
    if (m <= 0 || n <= 0 || batch <= 0) return;
    if (k <= 0 || alpha == 0.0f) {
        gemm_scale_only(m, n, beta, C, ldc, strideC, batch);
        return;
    }
    if (batch == 1) strideA = strideB = strideC = 0;
    /* the timers (prof.h) split a product called from the step's own thread */
    if (prof_on_ && !omp_in_parallel()) {
        const double t0 = prof_now();
        gemm_timed = 1, gemm_round_s = 0.0;
        if (p == PRECISION_BF16)
            gemm_bf16(transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C,
                      ldc, strideC, batch);
        else
            gemm_f32(transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C,
                     ldc, strideC, batch);
        gemm_timed = 0;
        if (gemm_round_s > 0.0) prof_add("gemm.round", gemm_round_s);
        prof_add("gemm.product", prof_now() - t0 - gemm_round_s);
        return;
    }
    if (p == PRECISION_BF16)
        gemm_bf16(transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc,
                  strideC, batch);
    else
        gemm_f32(transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc,
                 strideC, batch);
}

void model_gemm_bf16_batched(gemm_op transa, gemm_op transb, int m, int n, int k, float alpha,
                             const uint16_t *A, int lda, long long strideA, const uint16_t *B,
                             int ldb, long long strideB, float beta, float *C, int ldc,
                             long long strideC, int batch) {
    if (m <= 0 || n <= 0 || batch <= 0) return;
    if (k <= 0 || alpha == 0.0f) {
        gemm_scale_only(m, n, beta, C, ldc, strideC, batch);
        return;
    }
    if (batch == 1) strideA = strideB = strideC = 0;
    const double t0 = prof_on_ && !omp_in_parallel() ? prof_now() : 0.0;
    const int rc = gemm_dnnl(GEMM_IN_BF16, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb,
                             strideB, beta, C, ldc, strideC, batch);
    if (t0 > 0.0) prof_add("gemm.product", prof_now() - t0);
    if (!rc) return;
    /* oneDNN cannot run it (rare: callers checked model_gemm_bf16_native): the same values
     * widened to fp32 and multiplied there, one matrix at a time */
    const int ar = transa == GEMM_N ? m : k, ac = transa == GEMM_N ? k : m;
    const int br = transb == GEMM_N ? k : n, bc = transb == GEMM_N ? n : k;
    float *a = malloc(sizeof(float) * (size_t)ar * ac), *b = malloc(sizeof(float) * (size_t)br * bc);
    for (int q = 0; a && b && q < batch; q++) {
        for (int j = 0; j < ac; j++)
            for (int i = 0; i < ar; i++)
                a[i + (size_t)j * ar] = ops_bf16_to_float(A[q * strideA + i + (size_t)j * lda]);
        for (int j = 0; j < bc; j++)
            for (int i = 0; i < br; i++)
                b[i + (size_t)j * br] = ops_bf16_to_float(B[q * strideB + i + (size_t)j * ldb]);
        gemm_f32(transa, transb, m, n, k, alpha, a, ar, 0, b, br, 0, beta, C + q * strideC, ldc, 0, 1);
    }
    free(a);
    free(b);
}

void model_gemm_prec(precision_t p, gemm_op transa, gemm_op transb, int m, int n, int k,
                     float alpha, const float *A, int lda, const float *B, int ldb, float beta,
                     float *C, int ldc) {
    model_gemm_batched_prec(p, transa, transb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc,
                            0, 1);
}

void model_gemm(gemm_op transa, gemm_op transb, int m, int n, int k, float alpha,
                const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    model_gemm_prec(PRECISION_FP32, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}
