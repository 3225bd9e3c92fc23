/* model/gemm.c: model_gemm on the CPU via OpenBLAS (see gemm.h for the layout contract). */
#include "model/gemm.h"
#include <cblas.h>

void model_gemm(gemm_op transa, gemm_op transb, int m, int n, int k, float alpha,
                const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    if (m <= 0 || n <= 0) return;
    cblas_sgemm(CblasColMajor, transa == GEMM_T ? CblasTrans : CblasNoTrans,
                transb == GEMM_T ? CblasTrans : CblasNoTrans, m, n, k, alpha, A, lda, B, ldb, beta,
                C, ldc);
}
