/* model/ops.h: the CPU ops of the decoder, each a _forward and a _backward.
 *
 * Conventions (shared with a future CUDA backend of the same names):
 *   - arguments: outputs first, then inputs, then sizes; every pointer has its shape;
 *   - all tensors are row-major float32, contiguous;
 *   - a _backward ACCUMULATES (+=) into every gradient it writes (inputs and weights), so
 *     residual branches and a tensor feeding two consumers need no extra adds; the caller
 *     zeroes gradient buffers. A NULL input gradient is skipped;
 *   - results are deterministic for a fixed OpenMP thread count: no atomics, every float sum
 *     is reduced in a fixed order (bit-exact resume depends on it).
 * N = number of rows (B*T) for the token-wise ops. */
#ifndef MODEL_OPS_H
#define MODEL_OPS_H
#include <stdint.h>

/* ---- embedding: out[n] = table[tokens[n]] ---- */
void embedding_forward(float *out /* (N,D) */, const uint32_t *tokens /* (N) */,
                       const float *table /* (V,D) */, int N, int D);
void embedding_backward(float *dtable /* (V,D) += */, const float *dout /* (N,D) */,
                        const uint32_t *tokens /* (N) */, int N, int D);

/* ---- RMSNorm: out = w * x / sqrt(mean(x^2) + eps) ---- */
void rmsnorm_forward(float *out /* (N,D) */, float *rstd /* (N) saved for backward */,
                     const float *x /* (N,D) */, const float *w /* (D) */, int N, int D, float eps);
void rmsnorm_backward(float *dx /* (N,D) += or NULL */, float *dw /* (D) += */,
                      const float *dout /* (N,D) */, const float *x /* (N,D) */,
                      const float *w /* (D) */, const float *rstd /* (N) */, int N, int D);

/* ---- Linear without bias: y = x W^T (HF layout W = (out, in)) ---- */
void linear_forward(float *y /* (N,out) */, const float *x /* (N,in) */,
                    const float *w /* (out,in) */, int N, int in, int out);
void linear_backward(float *dx /* (N,in) += or NULL */, float *dw /* (out,in) += */,
                     const float *dy /* (N,out) */, const float *x /* (N,in) */,
                     const float *w /* (out,in) */, int N, int in, int out);

/* Same, but dx is OVERWRITTEN (dx = dy W; dw still accumulates): spares the caller zeroing
 * dx before its first contribution. */
void linear_backward_set(float *dx /* (N,in) = */, float *dw /* (out,in) += */,
                         const float *dy /* (N,out) */, const float *x /* (N,in) */,
                         const float *w /* (out,in) */, int N, int in, int out);

/* ---- RoPE (rotate_half layout) on (B,T,H,hd), position of row t is pos0 + t ----
 * cos_t/sin_t are (max_seq, hd/2) tables from rope_table_init. out may alias x. */
void rope_table_init(float *cos_t /* (max_seq, hd/2) */, float *sin_t /* (max_seq, hd/2) */,
                     int max_seq, int hd, float theta);
void rope_forward(float *out /* (B,T,H,hd) */, const float *x /* (B,T,H,hd) */,
                  const float *cos_t, const float *sin_t, int B, int T, int H, int hd, int pos0);
/* dx += R^T dout. dx must not alias dout. */
void rope_backward(float *dx /* (B,T,H,hd) += */, const float *dout /* (B,T,H,hd) */,
                   const float *cos_t, const float *sin_t, int B, int T, int H, int hd, int pos0);

/* ---- Scaled dot-product attention, grouped-query, flash-style ----
 * Query head h reads key/value head h / (H/Hkv). Scores are q.k / sqrt(hd).
 * causal: query row i (of Tq) sees key rows j <= i + (Tk - Tq) (queries are the LAST Tq
 * positions of the key sequence: Tq == Tk for training, Tq < Tk for a KV cache);
 * non-causal: every query sees every key. q and k/v may come from different inputs (the
 * Free Transformer's injection block and encoder block). No (T,T) matrix is stored: the
 * forward keeps per query row its log-sum-exp, the backward recomputes probabilities. */
void attention_forward(float *out /* (B,Tq,H,hd) */, float *lse /* (B,H,Tq) */,
                       const float *q /* (B,Tq,H,hd) */, const float *k /* (B,Tk,Hkv,hd) */,
                       const float *v /* (B,Tk,Hkv,hd) */, int B, int Tq, int Tk, int H, int Hkv,
                       int hd, int causal);
void attention_backward(float *dq /* (B,Tq,H,hd) += */, float *dk /* (B,Tk,Hkv,hd) += */,
                        float *dv /* (B,Tk,Hkv,hd) += */, const float *dout /* (B,Tq,H,hd) */,
                        const float *out /* (B,Tq,H,hd) */, const float *lse /* (B,H,Tq) */,
                        const float *q, const float *k, const float *v, int B, int Tq, int Tk,
                        int H, int Hkv, int hd, int causal);

/* ---- SwiGLU: out = silu(gate) * up ---- */
void swiglu_forward(float *out /* (N,F) */, const float *gate /* (N,F) */,
                    const float *up /* (N,F) */, int N, int F);
void swiglu_backward(float *dgate /* (N,F) += */, float *dup /* (N,F) += */,
                     const float *dout /* (N,F) */, const float *gate, const float *up, int N,
                     int F);

/* Same, but dgate and dup are OVERWRITTEN. */
void swiglu_backward_set(float *dgate /* (N,F) = */, float *dup /* (N,F) = */,
                         const float *dout /* (N,F) */, const float *gate, const float *up, int N,
                         int F);

/* ---- Cross-entropy over the vocabulary, mean over counted targets ----
 * Row n counts when mask == NULL or mask[n] != 0; targets of uncounted rows are not read.
 * Returns the mean loss (0 when no row counts) and writes lse (N) for the backward; *count
 * receives the number of counted rows. If dlogits != NULL, the same pass also writes
 * dlogits = dloss * (softmax - onehot) / count for counted rows and 0 for the others
 * (fused forward+backward: one read of the logits). dlogits may alias logits. */
float crossentropy_forward(float *dlogits /* (N,V) or NULL */, float *lse /* (N) */,
                           int *count, const float *logits /* (N,V) */,
                           const uint32_t *targets /* (N) */, const uint8_t *mask /* (N) or NULL */,
                           int N, int V, float dloss);
/* The separate backward (when the forward ran without dlogits): OVERWRITES dlogits. */
void crossentropy_backward(float *dlogits /* (N,V) */, const float *logits /* (N,V) */,
                           const float *lse /* (N) */, const uint32_t *targets /* (N) */,
                           const uint8_t *mask /* (N) or NULL */, int N, int V, float dloss);
#endif
