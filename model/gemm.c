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
/* Column blocks are multiples of this (keeps the micro-kernel's tiles whole) ... */
#define GEMM_COL_ALIGN 16
/* ... and at least this wide: each block packs op(A) again, and narrow blocks run the
 * micro-kernel below its speed. */
#define GEMM_MIN_COLS 64
/* Blocks per thread, handed out dynamically: on a machine shared with other work a thread
 * that loses its core for a while no longer holds the other at the join (with one static
 * block each, it did: the step took up to 2x the single-thread time under load). */
#define GEMM_BLOCKS_PER_THREAD 4
/* ... except for products with a long k (the weight gradients, k = B*T): every block packs
 * all of op(A) (k x m) again, which there is as large as the block's work is; one block per
 * thread (measured on S: ~5% less CPU per step, the packing routines 10.2% -> 8.5%). */
#define GEMM_K_LONG 1024

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
    if (nt <= 1 || (double)m * n * k < GEMM_PAR_MIN || n < 2 * GEMM_MIN_COLS) {
        sgemm1(transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
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
