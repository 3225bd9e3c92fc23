/* model/precision.h: the arithmetic precision of a run's matrix products.
 *
 * A property of the run (the device carries it; trainer, evaluator and sampler take it as
 * --precision), with one meaning on every device:
 *
 *   fp32  every product takes fp32 operands, accumulates and writes fp32.
 *   bf16  the matrix products of the Linear layers (the tied head included), of attention and
 *         of the masked mixers' token mixing,
 *         forward and backward, take bf16 operands: weights, activations and gradients alike
 *         are rounded to bf16 (round to nearest, ties to even: ops_bf16_round in ops_math.h)
 *         at the product's input; the products of two bf16 values are exact in fp32, they are
 *         accumulated in fp32, and the output is fp32 (a gradient that accumulates, beta = 1,
 *         accumulates in fp32). Nothing else changes: master weights, gradients, AdamW state,
 *         RMSNorm, RoPE, SwiGLU, softmax, log-sum-exp, cross-entropy, and the Free
 *         Transformer's Binary Mapper (its probabilities, its sampling, the product of its
 *         dense pass-through) and its KL all stay fp32. Where the CPU has bf16 dot-product
 *         instructions the product runs on them; elsewhere it is the fp32 product of the
 *         rounded operands, which is the same arithmetic (only the order in which fp32 partial
 *         sums are added can differ) and slower (gemm.h: model_gemm_bf16_native). How often an
 *         operand is rounded is the implementation's business (the CPU keeps rounded copies:
 *         ops_bf16.h); what is multiplied is always the rounded value. A decode step's row
 *         products (ops.h linear_rows) are bf16 where the CPU's bf16 is native and fp32
 *         elsewhere; its single-query attention over the KV cache is fp32.
 *   tf32  the GPU's tensor-core mode (operands with a 10-bit mantissa, fp32 accumulation);
 *         a CPU device refuses it (precision_cpu_check).
 *
 * The numeric values are stable: they may be stored. */
#ifndef MODEL_PRECISION_H
#define MODEL_PRECISION_H
#include <stddef.h>

typedef enum { PRECISION_FP32 = 0, PRECISION_BF16 = 1, PRECISION_TF32 = 2 } precision_t;

/* "fp32", "bf16", "tf32"; "?" for a value outside the enum. */
const char *precision_name(precision_t p);
/* Parses a name (exactly as precision_name writes it). Returns 0 and sets *out, or -1 with
 * one line in err naming the value and the accepted names. */
int precision_parse(const char *s, precision_t *out, char *err, size_t errlen);
/* 0 when the CPU device can run p; otherwise -1 and one line in err (tf32 is the GPU's). */
int precision_cpu_check(precision_t p, char *err, size_t errlen);
#endif
