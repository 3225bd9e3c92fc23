/* model/precision.h: the arithmetic precision of a run's matrix products.
 *
 *   fp32  every product in float32 (the reference);
 *   bf16  products take bf16 operands (weights and activations rounded to bf16, round to
 *         nearest even, at the product's input: ops_math.h's ops_bf16_round) with float32
 *         accumulation and a float32 result;
 *   tf32  the GPU's tensor-float-32 products (10-bit mantissa operands, float32 accumulate);
 *         the CPU device refuses it.
 * Everything else stays float32 under every precision: master weights, AdamW's moments,
 * norms, softmax and log-sum-exp, cross-entropy, the Binary Mapper's probabilities and KL.
 * A bf16 run on the CPU and on the GPU mean the same thing. */
#ifndef MODEL_PRECISION_H
#define MODEL_PRECISION_H

typedef enum { PRECISION_FP32 = 0, PRECISION_BF16 = 1, PRECISION_TF32 = 2 } precision_t;

/* "fp32", "bf16", "tf32" */
const char *precision_name(precision_t p);
/* -1 if unknown */
int precision_parse(const char *s);
#endif
