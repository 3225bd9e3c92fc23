/* model/gemm_impl.h: the pieces behind model/gemm.h (inside model/ only; callers use gemm.h).
 *
 * gemm.c      the entry points: precision, degenerate shapes, bf16 operands, which engine runs
 * gemm_dnnl.c oneDNN matmul primitives, created once per shape and cached
 * gemm_blas.c OpenBLAS sgemm split over the OpenMP threads (the fallback engine)
 * All three share gemm.h's column-major contract, extended by batches: product b of a
 * strided batch reads A + b*sa, B + b*sb and writes C + b*sc (in elements). */
#ifndef MODEL_GEMM_IMPL_H
#define MODEL_GEMM_IMPL_H
#include "model/gemm.h"
#include <stddef.h>

/* The operands' element type in gemm_dnnl: fp32, or bf16 bit patterns (uint16_t). */
typedef enum { GEMM_IN_F32 = 0, GEMM_IN_BF16 = 1 } gemm_in_t;

/* The batched product on oneDNN. Returns 0 when it ran, -1 when oneDNN cannot run it (init
 * failed, no primitive for this shape, or only oneDNN's slow reference code would): then C is
 * untouched and the caller runs another engine. Deterministic for a fixed shape, thread count
 * and ISA level. */
int gemm_dnnl(gemm_in_t in, gemm_op ta, gemm_op tb, int m, int n, int k, float alpha,
              const void *A, int lda, long long sa, const void *B, int ldb, long long sb,
              float beta, float *C, int ldc, long long sc, int batch);
/* 0 when oneDNN initialised and is pinned to the ISA level (cpu_isa.h); else -1, one line. */
int gemm_dnnl_status(char *err, size_t errlen);
/* The oneDNN build and ISA in force, e.g. "oneDNN 2.6.3 (OpenMP), ISA avx2". */
const char *gemm_dnnl_describe(void);
/* The name of the oneDNN implementation for this shape ("gemm:jit", "brg:avx512_core", ...;
 * "none" when oneDNN has none, a "ref..." name when it has only its reference loop: such
 * shapes run on OpenBLAS). NULL when oneDNN is not ready. For the benchmark and the tests. */
const char *gemm_dnnl_impl(gemm_in_t in, gemm_op ta, gemm_op tb, int m, int n, int k,
                           float alpha, int lda, long long sa, int ldb, long long sb, float beta,
                           int ldc, long long sc, int batch);
/* Shapes held by the cache (at most 768). */
int gemm_dnnl_cached(void);

/* The same batched product on OpenBLAS (fp32 operands only); never fails. */
void gemm_blas(gemm_op ta, gemm_op tb, int m, int n, int k, float alpha, const float *A, int lda,
               long long sa, const float *B, int ldb, long long sb, float beta, float *C, int ldc,
               long long sc, int batch);

/* A 64-byte aligned buffer of at least `bytes`, private to the calling thread, kept (and grown)
 * across calls, freed when the thread ends; slot picks one of GEMM_TLS_SLOTS independent
 * buffers. NULL when out of memory. */
enum { GEMM_TLS_A, GEMM_TLS_B, GEMM_TLS_SCRATCH, GEMM_TLS_OPS_X, GEMM_TLS_OPS_Y, GEMM_TLS_OPS_W,
       GEMM_TLS_OPS_ROW, GEMM_TLS_OPS_ATT, GEMM_TLS_SLOTS };
/* (A and B: the rounded operands of gemm.c; SCRATCH: oneDNN's; OPS_X and OPS_Y: the bf16
 * operands an op rounds once for several products, ops_linear.c; OPS_W: a weight rounded
 * there when it has no shadow; OPS_ROW: the scratch row of the ops that keep one per thread,
 * ops_crossentropy.c, and no product in between; OPS_ATT: the blocked attention's scratch per
 * thread, ops_attention.c, products in between, which use A, B and SCRATCH only.) */
void *gemm_tls_buffer(int slot, size_t bytes);
#endif
