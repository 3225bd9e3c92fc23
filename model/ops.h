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
#include <stddef.h>
#include <stdint.h>
#include "model/precision.h"
#include "model/rope_table.h"

/* The precision of the CPU ops' matrix products (Linear and attention; model/precision.h).
 * The CPU device sets it from its own for each such op and back to fp32 after it (ops run
 * one at a time from one host thread); it is fp32 unless set. The Binary Mapper's product runs in fp32 under every
 * precision; the decode step's row products (linear_rows) run bf16 where bf16 is native (x86-64-v4-bf16 and up:
 * AVX512-BF16 dot products on the weights' bf16 shadows, model/ops_bf16.h) and fp32 elsewhere. */
extern precision_t ops_product_precision;

/* ---- embedding: out[n] = table[tokens[n]] ---- */
void embedding_forward(float *out /* (N,D) */, const uint32_t *tokens /* (N) */,
                       const float *table /* (V,D) */, int N, int D);
void embedding_backward(float *dtable /* (V,D) += */, const float *dout /* (N,D) */,
                        const uint32_t *tokens /* (N) */, int N, int D);

/* ---- RMSNorm: out = w * x / sqrt(mean(x^2) + eps) ---- */
void rmsnorm_forward(float *out /* (N,D) */, float *rstd /* (N) saved for backward */,
                     const float *x /* (N,D) */, const float *w /* (D) */, int N, int D, float eps);
void rmsnorm_backward(float *dx /* (N,D) += or NULL */, float *dw /* (D) += or NULL */,
                      const float *dout /* (N,D) */, const float *x /* (N,D) */,
                      const float *w /* (D) */, const float *rstd /* (N) */, int N, int D);
/* The residual stream's fusions (a block's add and the next norm are one pass over the rows):
 * y = a + b, then out = rmsnorm(y) as rmsnorm_forward (the same bits as add_forward followed
 * by rmsnorm_forward); y may be a or b. */
void add_rmsnorm_forward(float *y /* (N,D) */, float *out /* (N,D) */, float *rstd /* (N) */,
                         const float *a /* (N,D) */, const float *b /* (N,D) */,
                         const float *w /* (D) */, int N, int D, float eps);
/* dx = res + the input gradient rmsnorm_backward adds (res = dx, or NULL, is rmsnorm_backward):
 * a copy of res into dx, or an add of res after it, folded into the pass. res may not
 * overlap dx other than being dx. */
void rmsnorm_backward_res(float *dx /* (N,D) */, float *dw /* (D) += or NULL */,
                          const float *dout /* (N,D) */, const float *x /* (N,D) */,
                          const float *w /* (D) */, const float *rstd /* (N) */,
                          const float *res /* (N,D) */, int N, int D);

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

/* The same with a sliding window (seed 003): causal row i at position p = i + (Tk - Tq) sees
 * keys p - window < j <= p only (ops_math.h ops_att_range); window <= 0: unlimited, the ops
 * above (which are these with window 0). A window without causal is ignored. */
void attention_window_forward(float *out /* (B,Tq,H,hd) */, float *lse /* (B,H,Tq) */,
                              const float *q /* (B,Tq,H,hd) */, const float *k /* (B,Tk,Hkv,hd) */,
                              const float *v /* (B,Tk,Hkv,hd) */, int B, int Tq, int Tk, int H,
                              int Hkv, int hd, int causal, int window);
void attention_window_backward(float *dq /* += */, float *dk /* += */, float *dv /* += */,
                               const float *dout, const float *out, const float *lse,
                               const float *q, const float *k, const float *v, int B, int Tq,
                               int Tk, int H, int Hkv, int hd, int causal, int window);
/* The same with dq, dk, dv OVERWRITTEN: each thread zeroes the rows it owns (those of its batch
 * and key/value head) just before it adds into them, instead of three serial zeroing passes
 * ahead of the op: the same sums over zeroes, so the same bits as zero + the op above. */
void attention_window_backward_set(float *dq /* = */, float *dk /* = */, float *dv /* = */,
                                   const float *dout, const float *out, const float *lse,
                                   const float *q, const float *k, const float *v, int B, int Tq,
                                   int Tk, int H, int Hkv, int hd, int causal, int window);

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
 * (fused forward+backward: one read of the logits; one exponential per logit, ops_math.h).
 * dlogits may alias logits. The separate backward gives the fused pass's bits. */
float crossentropy_forward(float *dlogits /* (N,V) or NULL */, float *lse /* (N) */,
                           int *count, const float *logits /* (N,V) */,
                           const uint32_t *targets /* (N) */, const uint8_t *mask /* (N) or NULL */,
                           int N, int V, float dloss);
/* The separate backward (when the forward ran without dlogits): OVERWRITES dlogits. */
void crossentropy_backward(float *dlogits /* (N,V) */, const float *logits /* (N,V) */,
                           const float *lse /* (N) */, const uint32_t *targets /* (N) */,
                           const uint8_t *mask /* (N) or NULL */, int N, int V, float dloss);

/* ---- element-wise and row helpers (model/ops_rows.c) ---- */
void add_forward(float *y /* (n) */, const float *a, const float *b, size_t n);   /* y = a + b */
void add_inplace(float *y /* (n) += */, const float *x, size_t n);               /* y += x */
void scale_inplace(float *x /* (n) */, float s, size_t n);                       /* x *= s */
/* out row n = row, for N rows. */
void repeat_rows(float *out /* (N,D) */, const float *row /* (D) */, int N, int D);
/* out[i] += sum over n of x[n][i], each column summed in the order of n. */
void sum_rows(float *out /* (D) += */, const float *x /* (N,D) */, int N, int D);
/* dst row i = src row i (width D), rows strided by ld_dst / ld_src floats. */
void copy_rows(float *dst, int ld_dst, const float *src, int ld_src, int rows, int D);

/* ---- the fused q|k|v product's rows (model/ops_qkv.c) ----
 * qkv (N, Dq + 2 Dkv) rows -> q (N,Dq) and k (N,Dkv) rotated (RoPE; row n at position
 * pos0 + n % T), v (N,Dkv) copied. A NULL destination is skipped. */
void qkv_split_rope(float *q, float *k, float *v, const float *qkv, const float *cos_t,
                    const float *sin_t, int N, int T, int H, int Hkv, int hd, int pos0);
/* The backward: dq, dk rotated back, dv copied into the fused rows (OVERWRITTEN). */
void qkv_join_unrope(float *dqkv, const float *dq, const float *dk, const float *dv,
                     const float *cos_t, const float *sin_t, int N, int T, int H, int Hkv, int hd,
                     int pos0);
/* The part of that join which key/value head kh of batch b owns (its query heads' dq, its dk
 * and dv, at the batch's T positions), each element as qkv_join_unrope writes it; d16: dqkv's
 * bf16 shadow or NULL; r32: the elements written rounded to bf16 as fp32 values (bf16 emulated,
 * dqkv read by products only: ops_bf16_round_out); dqkv NULL (d16 not NULL): the shadow alone
 * (ops_bf16_shadow_take_out's *only). For attention_backward_qkv, on the thread that wrote
 * those rows. */
void qkv_join_unrope_group(float *dqkv, uint16_t *d16, int r32, const float *dq, const float *dk,
                           const float *dv, const float *cos_t, const float *sin_t, int b, int kh,
                           int T, int H, int Hkv, int hd, int pos0);
/* attention_window_backward_set (Tq = Tk = T) into the scratch dq, dk, dv, then
 * qkv_join_unrope of them into dqkv (OVERWRITTEN): the same bits as the three calls, each
 * (batch, key/value head)'s rows joined by the thread that computed them, while they are in
 * its cache, instead of a pass of their own over all rows. */
void attention_backward_qkv(float *dqkv, float *dq, float *dk, float *dv, const float *dout,
                            const float *out, const float *lse, const float *q, const float *k,
                            const float *v, const float *cos_t, const float *sin_t, int B, int T,
                            int H, int Hkv, int hd, int causal, int window, int pos0);

/* ---- a decode step's rows, each its own sequence (model/ops_decode.c) ----
 * y (N,out) = x W^T with every element ops_dot8(w row, x row) (at bf16 where native: one
 * fixed sequence of AVX512-BF16 dot products of the rounded rows): a row's result does not
 * depend on N or on the rows beside it (a request decoded in a batch gives the bits it gives
 * alone), nor on the thread count. */
void linear_rows(float *y /* (N,out) */, const float *x /* (N,in) */, const float *w /* (out,in) */,
                 int N, int in, int out);
/* qkv_split_rope with row n at position pos[n]. */
void qkv_split_rope_rows(float *q, float *k, float *v, const float *qkv, const float *cos_t,
                         const float *sin_t, int N, int H, int Hkv, int hd, const int *pos /* (N) */);
/* out (N,H,hd) = x rotated, row n at position pos[n]; out may alias x. */
void rope_rows(float *out, const float *x, const float *cos_t, const float *sin_t, int N, int H,
               int hd, const int *pos /* (N) */);
/* Row n's query heads q (N,H,hd) attend to len[n] keys/values of a cache (rows of Hkv*hd
 * floats) starting at cache row base[n]; no log-sum-exp kept (inference). */
void attention_rows(float *out /* (N,H,hd) */, const float *q, const float *kc, const float *vc,
                    const int *base /* (N) */, const int *len /* (N) */, int N, int H, int Hkv,
                    int hd);
/* dst row dst_row[n] = src row n (width D), row strides ld_dst / ld_src floats. */
void scatter_rows(float *dst, int ld_dst, const int *dst_row /* (N) */, const float *src,
                  int ld_src, int N, int D);

/* ---- AdamW's element loops (model/ops_adamw.c; adamw.h forms the scalars) ---- */
typedef struct adamw_scalars {
    float clip;        /* gradient multiplier (1: no clipping) */
    float decay_mul;   /* p *= decay_mul before the update (1: no decay) */
    float beta1, beta2, eps;
    float step_size;   /* lr / (1 - beta1^t) */
    float bc2_sqrt;    /* sqrt(1 - beta2^t) */
} adamw_scalars_t;
/* g clipped (g * clip, in a register: g itself is not written); p *= decay_mul; m, v moments;
 * p -= step_size m / (sqrt(v) / bc2_sqrt + eps). */
void adamw_update(float *p, float *g, float *m, float *v, size_t n, const adamw_scalars_t *s);
/* sum of x^2 in double, in fixed chunks added in order: the same whatever the thread count. */
double sumsq(const float *x, size_t n);
/* The optimizer over a list of tensors at once (model/adamw.c's step: one call each, so a
 * device runs a step in two launches and one host synchronisation). */
typedef struct adamw_tensor {
    float *p, *g, *m, *v;  /* parameters, gradients (read only: clipped in registers), moments */
    size_t n;
    int decay;             /* 1: p *= decay_mul before the update; 0: no decay */
} adamw_tensor_t;
/* The sum over the list of sumsq(x[i], n[i]), tensors in order (the same total as the calls
 * one by one). */
double sumsq_multi(const float *const *x, const size_t *n, int count);
/* ---- the Free Transformer's Binary Mapper, KL and post-sampler (model/ops_binmap.c) ---- */
/* Bits and indices: prob = sigmoid(logits); bit_h = u_h < prob_h; idx = sum_h 2^h bit_h. */
void binmap_forward(uint32_t *idx /* (N) */, float *prob /* (N,H) */,
                    const float *logits /* (N,H) */, const float *u /* (N,H) */, int N, int H);
/* G_{d} = P(B = bits of d) for one position: (2^H) from prob (H). */
void binmap_probs(float *G /* (2^H) */, const float *prob /* (H) */, int H);
/* dlogits += d/dlogits sum_d' dz_d' G_d' = sum_d' dz_d' G_d' (b_h(d') - p_h), per position.
 * dz is overwritten (it becomes dz * G). */
void binmap_backward(float *dlogits /* (N,H) += */, float *dz /* (N,2^H) in/out */,
                     const float *prob /* (N,H) */, int N, int H);
/* KL_t = H log 2 - sum_h binary_entropy(sigmoid(l_h)) in nats (double accumulation), and its
 * derivative dKL/dl_h = l_h p_h (1 - p_h). */
float binmap_kl(const float *logits /* (H) */, int H);
void binmap_kl_backward(float *dlogits /* (H) += */, const float *logits /* (H) */, int H,
                        float scale);
/* Post-sampler: r[n] = w[:, idx[n]] (the column gather = W onehot). */
void post_sampler_forward(float *r /* (N,D) */, const float *w /* (D,2^H) */,
                          const uint32_t *idx /* (N) */, int N, int D, int H);
/* dw[:, idx[n]] += dr[n] (Z's value is the one-hot) and, if dlogits, the pass-through
 * gradient dlogits += binmap_backward(dZ = W^T dr) computed over row chunks, in parallel,
 * with a work buffer of post_sampler_work_floats(D, H, threads) floats (work_floats: its
 * size; it bounds how many threads take chunks). Results do not depend on the thread count.
 * The products run at `precision` (model/precision.h). */
size_t post_sampler_work_floats(int D, int H, int threads);
void post_sampler_backward(float *dw /* (D,2^H) += */, float *dlogits /* (N,H) += or NULL */,
                           const float *dr /* (N,D) */, const float *w /* (D,2^H) */,
                           const uint32_t *idx /* (N) */, const float *prob /* (N,H) */, int N,
                           int D, int H, float *work, size_t work_floats);
/* kl[n] = binmap_kl(logits row n) for N rows. */
void binmap_kl_rows(float *kl /* (N) */, const float *logits /* (N,H) */, int N, int H);
/* The free bits (seed 000 eq. 5) over counted positions (mask NULL: all), summed in order
 * of n: sum KL_t, sum max(0, KL_t - kappa), the count, and how many are above kappa. */
typedef struct {
    double kl_sum, term_sum;
    int count, above;
} free_bits_sums_t;
free_bits_sums_t free_bits_forward(const float *kl /* (N) */, const uint8_t *mask /* (N) */,
                                   int N, float kappa);
/* Its backward: rows counted and above kappa get binmap_kl_backward(scale). */
void free_bits_backward(float *dlogits /* (N,H) += */, const float *logits /* (N,H) */,
                        const float *kl /* (N) */, const uint8_t *mask /* (N) or NULL */, int N,
                        int H, float kappa, float scale);
/* u[i] = rng_counter_f32(key, counter0 + i) (common/rng.h): the Binary Mapper's uniforms, the
 * same numbers on every device. */
void uniform_fill(float *u /* (n) */, size_t n, uint64_t key, uint64_t counter0);
/* ---- the LTM's Gaussian latents (model/ops_latent.c; seed 003, model/ltm.h) ----
 * A latent tensor holds L layers x B sequences x n numbers, layer-major ((L, B, n): layer l's
 * vectors of all sequences are one block of rows). Sequence b's draws come from the counter
 * stream rng_counter_key(key, row0 + b), number l * n + i for element (l, b, i): what a
 * sequence draws depends on its own index only, not on the batch around it, and every device
 * draws the same numbers (ops_math.h ops_counter_normal). x = mean + std * N(0, 1). */
void latent_normal(float *x /* (L,B,n) */, int L, int B, int n, uint64_t key, uint64_t row0,
                   float mean, float std);
/* z = mu + exp(ls) * eps, element-wise. */
void latent_sample(float *z, const float *mu, const float *ls, const float *eps, size_t n);
/* kl[b] = sum over l, i of KL(N(mu, exp(ls)^2) || N(0, 1)) for sequence b, in order of l then i,
 * in double. */
void latent_kl_rows(float *kl /* (B) */, const float *mu /* (L,B,n) */, const float *ls, int L,
                    int B, int n);
/* dmu, dls (OVERWRITTEN) = the gradients of (the loss whose dL/dz is dz) + kl_scale * KL. */
void latent_backward(float *dmu, float *dls, const float *dz, const float *mu, const float *ls,
                     const float *eps, float kl_scale, size_t n);
/* ---- the masked mixer's token mixing (seed 004; model/ops_mixer.c) ----
 * A mixing weight is M matrices (T, T) (per layer: h heads x k taps); the causal mask keeps
 * entries s <= t of row t. The mixing's products are gemm calls (model/mixer_mix.c); these
 * are its element parts. */
/* out = tril(w) (accumulate 0), or out += tril(w) (accumulate 1): the mask on the weight in
 * the forward, and on the gradient (dW = tril(dW_raw)) in the backward. */
void mixer_tril(float *out /* (M,T,T) */, const float *w /* (M,T,T) */, int M, int T,
                int accumulate);
/* y[b,t,c] += bias[c / (D/h) * Tb + t]: one bias per head and position (Conv1d's per output
 * channel, the channels being positions). */
void mixer_bias_forward(float *y /* (B,T,D) += */, const float *bias /* (h*Tb) */, int B, int T,
                        int D, int h, int Tb);
/* dbias[i*Tb + t] += sum over b, then over head i's columns c, of dy[b,t,c], in that order. */
void mixer_bias_backward(float *dbias /* (h*Tb) += */, const float *dy /* (B,T,D) */, int B,
                         int T, int D, int h, int Tb);
/* The autoencoder's sliding-window unroll (seed 004): out[b,i,j] = e[b, (i + j) mod D] for the
 * T positions i and window elements j < nd (the window wraps around to the vector's start). */
void unroll_forward(float *out /* (B,T,nd) */, const float *e /* (B,D) */, int B, int T, int D,
                    int nd);
/* de[b,c] += sum over positions i (in order) of dout[b,i,j] with (i + j) mod D = c, j < nd. */
void unroll_backward(float *de /* (B,D) += */, const float *dout /* (B,T,nd) */, int B, int T,
                     int D, int nd);
/* The stored embedding's codec (ops_math.h ops_embed_code), n elements: y = code(x), with
 * the uniforms u (n; NULL: no noise) for the training noise of nbits. y may be x. */
void embed_code_forward(float *y /* (n) */, const float *x /* (n) */, const float *u, size_t n,
                        float range, int qbits, int nbits);
/* dx (OVERWRITTEN) = dy where x was inside [-range, range], else 0. */
void embed_code_backward(float *dx /* (n) */, const float *dy /* (n) */, const float *x,
                         size_t n, float range);
/* The whole mixing by plain loops, the yardstick mixer_mix.c's products are tested against:
 * y[b,t,c] = bias + sum over taps j and positions s (s <= t when causal, s < T) of
 * w[i][j][t][s] x[b, s, c + j - (k-1)/2], i = c / (D/h), the shifted column inside head i
 * (zero outside it). w is (h, k, Tw, Tw), bias (h*Tw), T <= Tw. */
void token_mix_ref_forward(float *y /* (B,T,D) */, const float *x /* (B,T,D) */, const float *w,
                           const float *bias, int B, int T, int D, int h, int k, int Tw,
                           int causal);
/* Its gradients: dx (B,T,D) +=, dw (h,k,Tw,Tw) +=, dbias (h*Tw) +=. */
void token_mix_ref_backward(float *dx, float *dw, float *dbias, const float *dy, const float *x,
                            const float *w, int B, int T, int D, int h, int k, int Tw, int causal);
#endif
