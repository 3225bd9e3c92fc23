/* model/gemm.h: the one matrix product of the model, shaped like cublasSgemm.
 *
 * Arguments map one to one onto cublasSgemm(handle, transa, transb, m, n, k, &alpha, A, lda,
 * B, ldb, &beta, C, ldc), so a CUDA backend swaps the implementation, not the call sites:
 *     C (m x n) = alpha * op(A) (m x k) * op(B) (k x n) + beta * C,   all COLUMN-major.
 *
 * Row-major <-> column-major, once for the whole model. A row-major (r, c) array with row
 * stride c is, read column-major, its transpose: a (c, r) matrix with leading dimension c.
 * Our activations and HF weights are row-major, so for a Linear with X (N, in), W (out, in),
 * Y (N, out):
 *   forward   Y = X W^T    <=>  Y^T (out,N) = W^T^T X^T  : gemm(T, N, out, N, in,  1, W, in,  X, in,  0, Y, out)
 *   backward  dX = dY W    <=>  dX^T (in,N) = W^T dY^T   : gemm(N, N, in,  N, out, 1, W, in,  dY, out, 1, dX, in)
 *   backward  dW += dY^T X <=>  dW^T (in,out) = X^T dY   : gemm(N, T, in, out, N,  1, X, in,  dY, out, 1, dW, in)
 * (ops_linear.c is the only caller that needs this table.) */
#ifndef MODEL_GEMM_H
#define MODEL_GEMM_H

typedef enum { GEMM_N = 0, GEMM_T = 1 } gemm_op;

/* Column-major C = alpha op(A) op(B) + beta C, op(A) is m x k, op(B) is k x n. */
void model_gemm(gemm_op transa, gemm_op transb, int m, int n, int k, float alpha,
                const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);
#endif
