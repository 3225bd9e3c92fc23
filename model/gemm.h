/* model/gemm.h: the one matrix product of the model, shaped like cublasSgemm.
 *
 * On the CPU it runs on oneDNN matmul primitives (model/gemm_dnnl.c: one per shape, cached,
 * on the process's OpenMP threads, pinned to the ISA level of model/cpu_isa.h), with OpenBLAS
 * as the fallback where oneDNN cannot run a product (gemm.c says which shapes and why).
 * Results are deterministic for a fixed shape, thread count and ISA level. Called inside an
 * OpenMP parallel region, a product runs on the calling thread alone; several threads may call
 * at once.
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
#include "model/precision.h"
#include <stddef.h>
#include <stdint.h>

typedef enum { GEMM_N = 0, GEMM_T = 1 } gemm_op;

/* Column-major C = alpha op(A) op(B) + beta C, op(A) is m x k, op(B) is k x n, in fp32.
 * As in BLAS: beta == 0 writes C without reading it; k == 0 or alpha == 0 only scales C. */
void model_gemm(gemm_op transa, gemm_op transb, int m, int n, int k, float alpha,
                const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* The same product at precision p (precision.h). fp32 is model_gemm. bf16: every element of
 * op(A) and op(B) is rounded to bf16 (ops_bf16_round, ties to even) before it is multiplied;
 * products are accumulated in fp32, alpha and beta applied in fp32, C is fp32. The caller's A
 * and B are not modified. tf32 is not a CPU precision (precision_cpu_check refuses it before a
 * run starts); passed here anyway, it computes fp32. */
void model_gemm_prec(precision_t p, gemm_op transa, gemm_op transb, int m, int n, int k,
                     float alpha, const float *A, int lda, const float *B, int ldb, float beta,
                     float *C, int ldc);

/* A strided batch of the same product, shaped like cublasGemmStridedBatchedEx: for
 * b in [0, batch), C + b*strideC = alpha op(A + b*strideA) op(B + b*strideB) + beta C + b*strideC
 * (strides in elements; a stride of 0 for A or B uses one matrix for every product). The batch's
 * C matrices must not overlap. One call runs the whole batch (over the process's threads, or on
 * the calling thread inside a parallel region). At one thread (so also inside a parallel
 * region) results equal `batch` single calls bit for bit; with more threads a single call may
 * split its sums over the threads where the batch splits the batch, so they agree to fp32
 * rounding of the sums. */
void model_gemm_batched_prec(precision_t p, gemm_op transa, gemm_op transb, int m, int n, int k,
                             float alpha, const float *A, int lda, long long strideA,
                             const float *B, int ldb, long long strideB, float beta, float *C,
                             int ldc, long long strideC, int batch);

/* The bf16 product on operands already rounded: A and B hold bf16 bit patterns
 * (ops_bf16.h), laid out as for model_gemm_batched_prec. For callers that checked
 * model_gemm_bf16_native(). The result is model_gemm_batched_prec(PRECISION_BF16) on the fp32
 * operands they were rounded from -- bit for bit when each operand is compact (leading
 * dimension = its stored rows, matrices rows*cols apart), as that function packs them. */
void model_gemm_bf16_batched(gemm_op transa, gemm_op transb, int m, int n, int k, float alpha,
                             const uint16_t *A, int lda, long long strideA, const uint16_t *B,
                             int ldb, long long strideB, float beta, float *C, int ldc,
                             long long strideC, int batch);
static inline void model_gemm_bf16(gemm_op transa, gemm_op transb, int m, int n, int k,
                                   float alpha, const uint16_t *A, int lda, const uint16_t *B,
                                   int ldb, float beta, float *C, int ldc) {
    model_gemm_bf16_batched(transa, transb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc,
                            0, 1);
}

/* 1 when bf16 products run on the CPU's bf16 dot-product instructions (ISA level
 * x86-64-v4-bf16, cpu_isa.h); 0 when they are the fp32 product of bf16-rounded operands: the
 * same semantics at fp32 speed plus the rounding, which model_gemm_prec does per product and
 * the Linear and attention ops do once per operand (ops_bf16.h: fp32 shadows). Library code
 * never prints; a program that runs bf16 where this is 0 says once that bf16 is emulated. */
int model_gemm_bf16_native(void);
/* 0 when the product engine (oneDNN) is ready and pinned to the ISA level in force; otherwise
 * -1 and one line saying why (products then all run on OpenBLAS: correct, slower, and bits
 * differ from a run where oneDNN works). Programs call it once at start. */
int model_gemm_check(char *err, size_t errlen);
/* One line naming the engine, e.g. "oneDNN 2.6.3 (OpenMP), ISA avx2" (logs, benchmarks). */
const char *model_gemm_describe(void);
#endif
