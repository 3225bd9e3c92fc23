/* model/gemm_blas.c: the products on OpenBLAS (gemm_impl.h), the engine gemm.c falls back
 * to where oneDNN cannot run a product.
 *
 * Threading: Debian's OpenBLAS runs its own pthread pool, whose idle threads spin after each
 * call while our OpenMP threads run the element-wise ops: on this 2-core machine the two pools
 * fight (measured: a training step of config S took 2x longer with 2 threads than with 1 when
 * the machine was busy). So BLAS is set single-threaded once, and large products are split
 * over OpenMP threads: one thread pool for the whole process. Products with a short k are
 * split by column blocks of C (each element one call's full-k sum); products with a long k by
 * ranges of k, whose partial sums are added in thread order. Either way the split depends on
 * the shape and the thread count only, so for a fixed thread count results are deterministic. */
#include "model/gemm_impl.h"
#include <cblas.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>

static pthread_once_t gemm_once = PTHREAD_ONCE_INIT;
static void gemm_blas_single(void) { openblas_set_num_threads(1); }

/* Below this many multiply-adds a product is not worth a parallel region. */
#define GEMM_PAR_MIN (1 << 20)
/* Column blocks are multiples of this (keeps the micro-kernel's tiles whole) ... */
#define GEMM_COL_ALIGN 16
/* ... and at least this wide: each block packs op(A) again, and narrow blocks run the
 * micro-kernel below its speed. */
#define GEMM_MIN_COLS 64
/* Blocks per thread, handed out dynamically: on a machine shared with other work a thread
 * that loses its core for a while no longer holds the other at the join (with one static
 * block each, it did: the step took up to 2x the single-thread time under load). */
#define GEMM_BLOCKS_PER_THREAD 4
/* Products with a long k (the weight gradients, k = B*T; the tied head's input gradient,
 * k = V) are split over k instead (gemm_ksplit): a column block packs all of op(A) (k x m)
 * again, which there is about as much work as the block itself. Measured on S, CPU time per
 * step: 4 column blocks per thread 7184 / 7705 ms, one per thread ~5% less, k-split 6794 /
 * 7032 ms. The column split remains the fallback (buffer or lock unavailable). */
#define GEMM_K_LONG 1024

static void sgemm1(gemm_op ta, gemm_op tb, int m, int n, int k, float alpha, const float *A,
                   int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    cblas_sgemm(CblasColMajor, ta == GEMM_T ? CblasTrans : CblasNoTrans,
                tb == GEMM_T ? CblasTrans : CblasNoTrans, m, n, k, alpha, A, lda, B, ldb, beta, C,
                ldc);
}

/* Partial products of the k-split, (nt - 1) x m x n floats, kept for the process (grown as
 * needed: a weight gradient calls this every step). One caller at a time uses it; a second
 * concurrent caller takes the column split instead. */
static float *ksplit_buf;
static size_t ksplit_cap;
static pthread_mutex_t ksplit_mu = PTHREAD_MUTEX_INITIALIZER;

/* C = alpha op(A) op(B) + beta C with k cut into one contiguous range per thread: thread 0
 * adds its range into C (with beta), the others write theirs into private partials, which are
 * then added in thread order. Every operand is packed exactly once. Deterministic for a fixed
 * thread count (the sum's association is fixed by it). Returns 0 when it could not run. */
static int gemm_ksplit(gemm_op ta, gemm_op tb, int m, int n, int k, float alpha, const float *A,
                       int lda, const float *B, int ldb, float beta, float *C, int ldc, int nt) {
    const size_t mn = (size_t)m * n;
    if (pthread_mutex_trylock(&ksplit_mu)) return 0;
    if (ksplit_cap < (size_t)(nt - 1) * mn) {
        float *p = realloc(ksplit_buf, sizeof(float) * (size_t)(nt - 1) * mn);
        if (!p) { pthread_mutex_unlock(&ksplit_mu); return 0; }
        ksplit_buf = p;
        ksplit_cap = (size_t)(nt - 1) * mn;
    }
    float *buf = ksplit_buf;
#pragma omp parallel num_threads(nt)
    {
        const int t = omp_get_thread_num(), nth = omp_get_num_threads();
        const int k0 = (int)((long)k * t / nth), k1 = (int)((long)k * (t + 1) / nth);
        const float *At = ta == GEMM_N ? A + (size_t)k0 * lda : A + k0;
        const float *Bt = tb == GEMM_N ? B + k0 : B + (size_t)k0 * ldb;
        if (t == 0)
            sgemm1(ta, tb, m, n, k1 - k0, alpha, At, lda, Bt, ldb, beta, C, ldc);
        else
            sgemm1(ta, tb, m, n, k1 - k0, alpha, At, lda, Bt, ldb, 0.0f, buf + (t - 1) * mn, m);
#pragma omp barrier
#pragma omp for schedule(static)
        for (int j = 0; j < n; j++)
            for (int s = 1; s < nth; s++) {
                const float *p = buf + (s - 1) * mn + (size_t)j * m;
                float *c = C + (size_t)j * ldc;
#pragma omp simd
                for (int i = 0; i < m; i++) c[i] += p[i];
            }
    }
    pthread_mutex_unlock(&ksplit_mu);
    return 1;
}

static void gemm_blas1(gemm_op transa, gemm_op transb, int m, int n, int k, float alpha,
                       const float *A, int lda, const float *B, int ldb, float beta, float *C,
                       int ldc) {
    pthread_once(&gemm_once, gemm_blas_single);
    int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
    if (nt <= 1 || (double)m * n * k < GEMM_PAR_MIN || n < 2 * GEMM_MIN_COLS) {
        sgemm1(transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    if (k >= GEMM_K_LONG &&
        gemm_ksplit(transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, nt))
        return;
    /* The blocks depend on the shape and the thread count only, never on which thread runs
     * one: every element of C is one call's full-k sum, so results are deterministic. */
    int units = (n + GEMM_COL_ALIGN - 1) / GEMM_COL_ALIGN;
    int blocks = nt * (k >= GEMM_K_LONG ? 1 : GEMM_BLOCKS_PER_THREAD), maxb = n / GEMM_MIN_COLS;
    if (blocks > maxb) blocks = maxb;
    if (blocks > units) blocks = units;
    if (blocks < nt) nt = blocks;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (int t = 0; t < blocks; t++) {
        int j0 = (int)((long)units * t / blocks) * GEMM_COL_ALIGN;
        int j1 = (int)((long)units * (t + 1) / blocks) * GEMM_COL_ALIGN;
        if (j1 > n) j1 = n;
        if (j1 <= j0) continue;
        /* columns j0..j1 of op(B): for op = N they are columns of B, for op = T rows of B */
        const float *Bj = transb == GEMM_N ? B + (size_t)j0 * ldb : B + j0;
        sgemm1(transa, transb, m, j1 - j0, k, alpha, A, lda, Bj, ldb, beta, C + (size_t)j0 * ldc,
               ldc);
    }
}

void gemm_blas(gemm_op ta, gemm_op tb, int m, int n, int k, float alpha, const float *A, int lda,
               long long sa, const float *B, int ldb, long long sb, float beta, float *C, int ldc,
               long long sc, int batch) {
    for (int b = 0; b < batch; b++)
        gemm_blas1(ta, tb, m, n, k, alpha, A + b * sa, lda, B + b * sb, ldb, beta, C + b * sc, ldc);
}
