/* model/device.h: the device table, the one seam between the model families and the hardware.
 *
 * A family (model/llama.c, model/free.c, and every later one) is written ONCE, as a sequence
 * of calls through a device_t: it allocates its buffers on the device, uploads its inputs, runs
 * the ops of this table on device pointers and downloads only what the host needs. A device
 * (model/device_cpu.c: the reference; model/device_cuda.cu: CUDA + cuBLAS) implements the
 * table and never learns what a family is. Nothing else in a family touches the memory it
 * allocated through a device.
 *
 * Where data crosses to the host (the documented places):
 *   - inputs: token ids, targets, masks, uniforms given by a caller (upload);
 *   - results a program reads: logits for the sampler's token choice and the evaluator's
 *     scores, the loss and the metrics (the reductions that return a number return it on
 *     the host: crossentropy_forward, free_bits_forward, sumsq);
 *   - parameters and optimizer moments for checkpoint I/O and tests (tensor views carry their
 *     device: model/tensor.h's view_download / view_upload).
 *
 * Semantics of every op: model/ops.h (the CPU reference, same arguments after the device).
 * Products: model/gemm.h's cuBLAS-shaped contract. Precision (model/precision.h) is the
 * device's: fp32, or bf16/tf32 products with fp32 everything else.
 *
 * Determinism: every device sums in an order fixed by the shapes and its thread/launch
 * configuration alone (no atomics in reductions that feed training), so a run resumes
 * bit-exactly on the same device kind. */
#ifndef MODEL_DEVICE_H
#define MODEL_DEVICE_H
#include <stddef.h>
#include <stdint.h>

#include "model/gemm.h"
#include "model/ops.h"
#include "model/precision.h"
#include "model/prof.h"

typedef enum { DEVICE_CPU = 0, DEVICE_CUDA = 1 } device_kind;

/* sync's (and device_open's) failures */
enum { DEVICE_EFAULT = -1, DEVICE_ENOMEM = -2 };

typedef struct device device_t;

typedef struct device_ops {
    /* ---- memory: device buffers, zeroed at allocation; NULL when it did not fit ---- */
    void *(*alloc)(device_t *d, size_t bytes);
    void (*free)(device_t *d, void *p);
    void (*upload)(device_t *d, void *dst, const void *src_host, size_t bytes);
    void (*download)(device_t *d, void *dst_host, const void *src, size_t bytes);
    void (*copy)(device_t *d, void *dst, const void *src, size_t bytes);
    void (*zero)(device_t *d, void *p, size_t bytes);
    /* Waits for queued work; returns 0, or with one line in err DEVICE_ENOMEM when the fault
     * was a lack of memory (a work buffer, a host copy: no fault of the model or its data, the
     * same work may run when memory is back), else DEVICE_EFAULT. */
    int (*sync)(device_t *d, char *err, size_t errlen);
    /* A hint for small work (a decode step): on = 0 until the next on = 1 asks the device to
     * run the ops without its parallel machinery (the CPU: one OpenMP thread, since a region's
     * barrier with a descheduled peer costs more than such an op; a GPU ignores it). */
    void (*set_parallel)(device_t *d, int on);
    /* A hint: p[0 .. bytes), memory of this device, holds tensors that only products read (as
     * the operands of gemm and the Linear ops) until the buffer is freed. A device whose bf16
     * products read a rounded copy it keeps beside a tensor (a bf16 shadow: model/ops_bf16.h,
     * device_cuda.cu) may then write only that copy where an op's output lies there, and skip
     * the fp32 one; where it keeps no copy (fp32, no native bf16, no room) it writes fp32 as
     * always. The products read the same bf16 values either way: results never depend on
     * whether the hint took effect (docs/DEVICES.md "Precision"). Marking again is cheap.
     * Attention's q, k, v count as such tensors (their only readers are attention's products,
     * QK^T and PV, and their backward): a device that writes their copy alone must read them in
     * its attention ops only through that copy (the CUDA device: qkv_split_rope, where its tiled
     * bf16 kernels take them). The hint binds the ops that write such shadows (the norms,
     * SwiGLU, q|k|v, the classifier's dlogits), not a product's own fp32 result: the families
     * mark the logits buffer, whose logits the classifier reads and whose dlogits only the head's
     * products do. */
    void (*products_only)(device_t *d, const void *p, size_t bytes);

    /* ---- products (gemm.h), at the device's precision ---- */
    void (*gemm)(device_t *d, gemm_op ta, gemm_op tb, int m, int n, int k, float alpha,
                 const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);

    /* ---- the decoder's ops (ops.h) ---- */
    void (*embedding_forward)(device_t *d, float *out, const uint32_t *tokens, const float *table,
                              int N, int D);
    void (*embedding_backward)(device_t *d, float *dtable, const float *dout,
                               const uint32_t *tokens, int N, int D);
    void (*rmsnorm_forward)(device_t *d, float *out, float *rstd, const float *x, const float *w,
                            int N, int D, float eps);
    void (*rmsnorm_backward)(device_t *d, float *dx, float *dw, const float *dout, const float *x,
                             const float *w, const float *rstd, int N, int D);
    /* the residual add and the next RMSNorm in one pass (ops.h: add_rmsnorm_forward), and
     * RMSNorm's backward writing res + its input gradient (rmsnorm_backward_res) */
    void (*add_rmsnorm_forward)(device_t *d, float *y, float *out, float *rstd, const float *a,
                                const float *b, const float *w, int N, int D, float eps);
    void (*rmsnorm_backward_res)(device_t *d, float *dx, float *dw, const float *dout,
                                 const float *x, const float *w, const float *rstd,
                                 const float *res, int N, int D);
    void (*linear_forward)(device_t *d, float *y, const float *x, const float *w, int N, int in,
                           int out);
    void (*linear_backward)(device_t *d, float *dx, float *dw, const float *dy, const float *x,
                            const float *w, int N, int in, int out);
    void (*linear_backward_set)(device_t *d, float *dx, float *dw, const float *dy,
                                const float *x, const float *w, int N, int in, int out);
    void (*rope_forward)(device_t *d, float *out, const float *x, const float *cos_t,
                         const float *sin_t, int B, int T, int H, int hd, int pos0);
    void (*rope_backward)(device_t *d, float *dx, const float *dout, const float *cos_t,
                          const float *sin_t, int B, int T, int H, int hd, int pos0);
    void (*qkv_split_rope)(device_t *d, float *q, float *k, float *v, const float *qkv,
                           const float *cos_t, const float *sin_t, int N, int T, int H, int Hkv,
                           int hd, int pos0);
    void (*qkv_join_unrope)(device_t *d, float *dqkv, const float *dq, const float *dk,
                            const float *dv, const float *cos_t, const float *sin_t, int N, int T,
                            int H, int Hkv, int hd, int pos0);
    void (*attention_forward)(device_t *d, float *out, float *lse, const float *q, const float *k,
                              const float *v, int B, int Tq, int Tk, int H, int Hkv, int hd,
                              int causal);
    void (*attention_backward)(device_t *d, float *dq, float *dk, float *dv, const float *dout,
                               const float *out, const float *lse, const float *q,
                               const float *k, const float *v, int B, int Tq, int Tk, int H,
                               int Hkv, int hd, int causal);
    void (*swiglu_forward)(device_t *d, float *out, const float *gate, const float *up, int N,
                           int F);
    void (*swiglu_backward)(device_t *d, float *dgate, float *dup, const float *dout,
                            const float *gate, const float *up, int N, int F);
    void (*swiglu_backward_set)(device_t *d, float *dgate, float *dup, const float *dout,
                                const float *gate, const float *up, int N, int F);
    float (*crossentropy_forward)(device_t *d, float *dlogits, float *lse, int *count,
                                  const float *logits, const uint32_t *targets,
                                  const uint8_t *mask, int N, int V, float dloss);
    void (*crossentropy_backward)(device_t *d, float *dlogits, const float *logits,
                                  const float *lse, const uint32_t *targets, const uint8_t *mask,
                                  int N, int V, float dloss);

    /* ---- a decode step's rows, each its own sequence (ops.h, ops_decode.c) ---- */
    void (*linear_rows)(device_t *d, float *y, const float *x, const float *w, int N, int in,
                        int out);
    void (*qkv_split_rope_rows)(device_t *d, float *q, float *k, float *v, const float *qkv,
                                const float *cos_t, const float *sin_t, int N, int H, int Hkv,
                                int hd, const int *pos);
    void (*rope_rows)(device_t *d, float *out, const float *x, const float *cos_t,
                      const float *sin_t, int N, int H, int hd, const int *pos);
    void (*attention_rows)(device_t *d, float *out, const float *q, const float *kc,
                           const float *vc, const int *base, const int *len, int N, int H,
                           int Hkv, int hd);
    void (*scatter_rows)(device_t *d, float *dst, int ld_dst, const int *dst_row, const float *src,
                         int ld_src, int N, int D);

    /* ---- element-wise and row helpers (ops.h) ---- */
    void (*add_forward)(device_t *d, float *y, const float *a, const float *b, size_t n);
    void (*add_inplace)(device_t *d, float *y, const float *x, size_t n);
    void (*scale_inplace)(device_t *d, float *x, float s, size_t n);
    void (*repeat_rows)(device_t *d, float *out, const float *row, int N, int D);
    void (*sum_rows)(device_t *d, float *out, const float *x, int N, int D);
    /* Copies rows of width D: dst row i = src row i, with row strides ld_dst / ld_src floats
     * (the KV cache's appends, the head's last-row gathers). */
    void (*copy_rows)(device_t *d, float *dst, int ld_dst, const float *src, int ld_src, int rows,
                      int D);

    /* ---- the Free Transformer's latent (ops.h, free.h) ---- */
    void (*uniform_fill)(device_t *d, float *u, size_t n, uint64_t key, uint64_t counter0);
    void (*binmap_forward)(device_t *d, uint32_t *idx, float *prob, const float *logits,
                           const float *u, int N, int H);
    void (*binmap_kl_rows)(device_t *d, float *kl, const float *logits, int N, int H);
    free_bits_sums_t (*free_bits_forward)(device_t *d, const float *kl, const uint8_t *mask,
                                          int N, float kappa);
    void (*free_bits_backward)(device_t *d, float *dlogits, const float *logits, const float *kl,
                               const uint8_t *mask, int N, int H, float kappa, float scale);
    void (*post_sampler_forward)(device_t *d, float *r, const float *w, const uint32_t *idx,
                                 int N, int D, int H);
    void (*post_sampler_backward)(device_t *d, float *dw, float *dlogits, const float *dr,
                                  const float *w, const uint32_t *idx, const float *prob, int N,
                                  int D, int H);

    /* ---- the masked mixer (ops.h, ops_mixer.c; its products are gemm calls) ---- */
    void (*mixer_tril)(device_t *d, float *out, const float *w, int M, int T, int accumulate);
    void (*mixer_bias_forward)(device_t *d, float *y, const float *bias, int B, int T, int D,
                               int h, int Tb);
    void (*mixer_bias_backward)(device_t *d, float *dbias, const float *dy, int B, int T, int D,
                                int h, int Tb);
    void (*unroll_forward)(device_t *d, float *out, const float *e, int B, int T, int D, int nd);
    void (*unroll_backward)(device_t *d, float *de, const float *dout, int B, int T, int D,
                            int nd);
    void (*embed_code_forward)(device_t *d, float *y, const float *x, const float *u, size_t n,
                               float range, int qbits, int nbits);
    void (*embed_code_backward)(device_t *d, float *dx, const float *dy, const float *x, size_t n,
                                float range);

    /* ---- the optimizer (adamw.h) ---- */
    /* sum of x^2 in double, in an order fixed by n alone */
    double (*sumsq)(device_t *d, const float *x, size_t n);
    void (*adamw_update)(device_t *d, float *p, float *g, float *m, float *v, size_t n,
                         const adamw_scalars_t *s);

    /* ---- sliding-window attention (ops.h; seed 003) ---- */
    void (*attention_window_forward)(device_t *d, float *out, float *lse, const float *q,
                                     const float *k, const float *v, int B, int Tq, int Tk, int H,
                                     int Hkv, int hd, int causal, int window);
    void (*attention_window_backward)(device_t *d, float *dq, float *dk, float *dv,
                                      const float *dout, const float *out, const float *lse,
                                      const float *q, const float *k, const float *v, int B,
                                      int Tq, int Tk, int H, int Hkv, int hd, int causal,
                                      int window);
    /* The attention backward of a fused q|k|v product's rows, written straight into their
     * gradient: dqkv (B*T, Dq + 2 Dkv) = qkv_join_unrope of attention_window_backward's dq, dk,
     * dv (Tq = Tk = T, row n at position pos0 + n % T), OVERWRITTEN (every element, also of key
     * rows no query sees: zeros) -- no zeroing pass before it. q, k, v, out, lse as the forward
     * left them (q, k rotated). dq (B*T, Dq), dk, dv (B*T, Dkv): scratch the device may use
     * (the CPU composes the three ops through them: the bits of zero + attention_window_backward
     * + qkv_join_unrope) or leave alone (the CUDA device un-rotates in the attention kernels'
     * stores); their contents afterwards are undefined. */
    void (*attention_backward_qkv)(device_t *d, float *dqkv, float *dq, float *dk, float *dv,
                                   const float *dout, const float *out, const float *lse,
                                   const float *q, const float *k, const float *v,
                                   const float *cos_t, const float *sin_t, int B, int T, int H,
                                   int Hkv, int hd, int causal, int window, int pos0);

    /* ---- the LTM's Gaussian latents (ops.h, ltm.h) ---- */
    void (*latent_normal)(device_t *d, float *x, int L, int B, int n, uint64_t key, uint64_t row0,
                          float mean, float std);
    void (*latent_sample)(device_t *d, float *z, const float *mu, const float *ls,
                          const float *eps, size_t n);
    void (*latent_kl_rows)(device_t *d, float *kl, const float *mu, const float *ls, int L, int B,
                           int n);
    void (*latent_backward)(device_t *d, float *dmu, float *dls, const float *dz, const float *mu,
                            const float *ls, const float *eps, float kl_scale, size_t n);

    /* ---- the optimizer over a list of tensors (ops.h; adamw.c's step): the gradient norm's
     * sum of squares returned to the host once, the update of every tensor in one call ---- */
    double (*sumsq_multi)(device_t *d, const float *const *x, const size_t *n, int count);
    void (*adamw_update_multi)(device_t *d, const adamw_tensor_t *t, int count,
                               const adamw_scalars_t *s);
} device_ops_t;

struct device {
    const device_ops_t *ops;
    device_kind kind;
    int ordinal;               /* cuda:N */
    precision_t precision;
    int threads;               /* CPU: OpenMP threads the ops use (0: OpenMP's default) */
    char name[128];            /* "cpu (x86-64-v3, 2 threads)", "cuda:0 (NVIDIA H100 ...)" */
    size_t allocated;          /* bytes held through alloc, for the memory report */
    int profile_gemm;          /* set by a benchmark: the CUDA device times its products ... */
    double gemm_seconds;       /* ... and adds their time here (events, each product waited
                                  for, so only for measuring cuBLAS' share of a step) */
    void *impl;                /* the device's own state */
};

/* Bytes of each buffer kind a model holds on its device, for the report programs print at
 * start. */
typedef struct {
    size_t params, grads, activations;
} model_memory_t;

/* One op call: DEV(d, rmsnorm_forward, out, rstd, x, w, N, D, eps). Its wall time goes to the
 * op's line of the timers while they are on (model/prof.h: a statement expression whose
 * value is the op's, the timer stopped by the cleanup as the expression ends). */
#define DEV(d, op, ...)                                                                    \
    ({                                                                                     \
        __attribute__((cleanup(prof_end))) prof_timer_t dev_prof_ = prof_begin(#op);       \
        (void)dev_prof_;                                                                   \
        (d)->ops->op((d), __VA_ARGS__);                                                    \
    })

/* DEV(d, sync, ...) as a family's status: 0, nomem when the fault was a lack of memory
 * (DEVICE_ENOMEM), else fault, so that a caller tells "out of memory" from a model that
 * failed (the evaluator must not take the one for a damaged checkpoint). */
#define DEV_SYNC_AS(d, err, errlen, fault, nomem)                                          \
    ({                                                                                     \
        const int dev_sync_rc_ = DEV(d, sync, err, errlen);                                \
        dev_sync_rc_ == 0 ? 0 : dev_sync_rc_ == DEVICE_ENOMEM ? (nomem) : (fault);        \
    })

/* The hint above for n floats at p (no timer: not an op). */
static inline void dev_products_only(device_t *d, const float *p, size_t n) {
    d->ops->products_only(d, p, sizeof(float) * n);
}

/* Opens "cpu", "cuda" (= cuda:0) or "cuda:N" at a precision. Where the build has no CUDA
 * device, or the machine no GPU or driver, one line says so and the status is -1. */
int device_open(device_t **d, const char *spec, precision_t precision, char *err, size_t errlen);
void device_close(device_t **d);
/* Changes the precision of an open device (a resumed run takes its checkpoint's): 0, or -1
 * with one line when the device cannot compute at p (the CPU and tf32). */
int device_set_precision(device_t *d, precision_t p, char *err, size_t errlen);
/* The device programs use when --device is not given: $FT_DEVICE, else "cpu". */
const char *device_default_spec(void);
/* The process's CPU device at fp32 (tests, tools and the checkpoint code's host buffers). */
device_t *device_cpu_default(void);
/* 1 when device pointers of d are host pointers (the CPU device). */
static inline int device_is_host(const device_t *d) { return !d || d->kind == DEVICE_CPU; }

/* ---- buffers carved from one allocation per kind ----
 * A family lays out a buffer kind (parameters, gradients, activations, ...) in two passes with
 * the same code: first with base NULL to count the bytes, then on the allocation. */
typedef struct {
    char *base;       /* NULL while counting */
    size_t used;      /* bytes taken so far */
} dev_arena_t;

/* Takes n elements of size esz (aligned to 64 bytes); NULL while counting. */
void *dev_arena_take(dev_arena_t *a, size_t n, size_t esz);
#define DEV_TAKE(a, type, n) ((type *)dev_arena_take((a), (size_t)(n), sizeof(type)))

/* "12.3 MiB", "1.50 GiB" */
const char *device_bytes_str(size_t bytes, char *buf, size_t cap);
#endif
