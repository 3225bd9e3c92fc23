/* model/gemm.c: model_gemm on the CPU via OpenBLAS (see gemm.h for the layout contract).
 *
 * Threading: Debian's OpenBLAS runs its own pthread pool, whose idle threads spin after each
 * call while our OpenMP threads run the element-wise ops: on this 2-core machine the two pools
 * fight (measured: a training step of config S took 2x longer with 2 threads than with 1 when
 * the machine was busy). So BLAS is set single-threaded once, and large products are split
 * over OpenMP threads by column blocks of C: one thread pool for the whole process. Each
 * element of C is still computed by one call over the full k, so the split does not change
 * the arithmetic of an element's sum; for a fixed thread count the result is deterministic. */
#include "model/gemm.h"
#include <cblas.h>
#include <omp.h>
#include <pthread.h>

static pthread_once_t gemm_once = PTHREAD_ONCE_INIT;
static void gemm_blas_single(void) { openblas_set_num_threads(1); }

/* Below this many multiply-adds a product is not worth a parallel region. */
#define GEMM_PAR_MIN (1 << 20)
/* Column blocks are multiples of this (keeps the micro-kernel's tiles whole). */
#define GEMM_COL_ALIGN 16

static void sgemm1(gemm_op ta, gemm_op tb, int m, int n, int k, float alpha, const float *A,
                   int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    cblas_sgemm(CblasColMajor, ta == GEMM_T ? CblasTrans : CblasNoTrans,
                tb == GEMM_T ? CblasTrans : CblasNoTrans, m, n, k, alpha, A, lda, B, ldb, beta, C,
                ldc);
}

void model_gemm(gemm_op transa, gemm_op transb, int m, int n, int k, float alpha,
                const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    if (m <= 0 || n <= 0) return;
    pthread_once(&gemm_once, gemm_blas_single);
    int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
    if (nt <= 1 || (double)m * n * k < GEMM_PAR_MIN || n < 2 * GEMM_COL_ALIGN) {
        sgemm1(transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    int blocks = (n + GEMM_COL_ALIGN - 1) / GEMM_COL_ALIGN;
    if (nt > blocks) nt = blocks;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int t = 0; t < nt; t++) {
        int j0 = (int)((long)blocks * t / nt) * GEMM_COL_ALIGN;
        int j1 = (int)((long)blocks * (t + 1) / nt) * GEMM_COL_ALIGN;
        if (j1 > n) j1 = n;
        if (j1 <= j0) continue;
        /* columns j0..j1 of op(B): for op = N they are columns of B, for op = T rows of B */
        const float *Bj = transb == GEMM_N ? B + (size_t)j0 * ldb : B + j0;
        sgemm1(transa, transb, m, j1 - j0, k, alpha, A, lda, Bj, ldb, beta, C + (size_t)j0 * ldc,
               ldc);
    }
}
