/* model/ops_bf16.h: the bf16 operands of the CPU's products, rounded once (CPU only).
 *
 * Precision bf16 (precision.h) rounds every operand of a Linear or attention product to bf16
 * at the product's input. Done literally, each product rounds both its operands into a buffer
 * first: a step then rounds every weight twice (forward and input gradient), every saved
 * activation twice (forward and weight gradient) and every output gradient twice (input and
 * weight gradient), and on a CPU with bf16 dot-product instructions those passes cost about a
 * fifth of a step (bench/NOTES.md). Here an fp32 tensor may carry a SHADOW: its elements
 * rounded to bf16 (ops_bf16_from_float: the same bits the product's own rounding gives), kept
 * beside it, which a product reads instead of rounding again:
 *   - weights (the `w` of the Linear ops): rounded at their first product, kept until a write
 *     to them (the optimizer's step: once per step, however many products read them);
 *   - activations that feed products: written by the op that produces them, in the same pass
 *     as the fp32 result (RMSNorm's output, SwiGLU's and its gradients, q/k/v after RoPE, the
 *     q|k|v gradient, attention's output, the cross-entropy's dlogits);
 *   - inside an op: attention rounds its q, k, v, dO once per call (unless shadows exist) and
 *     writes its probabilities and score gradients as bf16.
 * The values a product multiplies are the same either way, so results are too: a run with
 * shadows gives the bits of a run without them (tests/test_bf16_shadow.c checks every family).
 *
 * Coherence. A shadow is right while its fp32 tensor is unchanged. The CPU device
 * (device_cpu.c) reports every op's outputs before the op runs (ops_bf16_clobber), which
 * invalidates the shadows they overlap, and drops the shadows inside a buffer it frees; a
 * producer op then writes a fresh shadow. So shadows hold for memory written through the
 * device only, which the device table requires of families (device.h); code that writes a
 * device buffer behind the device's back must call ops_bf16_clobber itself.
 * FT_BF16_SHADOW_CHECK=1 (or ops_bf16_shadow_check(1)) compares every shadow a product reads
 * with a fresh rounding and counts mismatches (ops_bf16_shadow_stale).
 *
 * Products only. A tensor that only products read needs no fp32 copy once its shadow exists:
 * a family says so through the device table (device.h: products_only, for a buffer it
 * allocated: SwiGLU's output and gradients, the norms' outputs that feed the projections), the
 * CPU device records the range (ops_bf16_products_only), and an op writing a tensor inside such
 * a range that takes its shadow (ops_bf16_shadow_take_out) writes the shadow alone, skipping the
 * fp32 stores (RMSNorm's output, add_rmsnorm's normed output, SwiGLU's output, SwiGLU's
 * overwriting backward's gradients). Where no shadow is taken (fp32, a level without native
 * bf16, shadows off, a full table, no memory) the op writes fp32 as before, so a result never
 * depends on whether the hint took effect: products read the same bf16 values either way.
 * $FT_BF16_SHADOW_ONLY: 1 (default) on; 0 off (A/B); "poison": the fp32 copy is written as NaN
 * (all bits one) instead of skipped, so a reader that is not a product shows up as a wrong
 * result. FT_BF16_SHADOW_CHECK=1 turns the hint off (the check compares shadows with fresh
 * roundings of the fp32 copies). A product finding a shadow reads it even where its weight has
 * none (ops_linear.c rounds the weight into its own buffer then).
 *
 * When. Shadows are used only inside ops the CPU device runs at bf16 (ops_product_precision,
 * ops.h); FT_BF16_SHADOWS=0 turns them off (A/B measurements). Where bf16 products run natively
 * (model_gemm_bf16_native: the bf16 operands go to oneDNN as they are) they hold bf16 patterns,
 * as above. Where they are emulated (x86-64-v3 and below: the fp32 product of operands rounded
 * to bf16) they hold FP32 VALUES, each rounded to bf16 (low 16 bits zero): what the emulated
 * product multiplies, handed to the fp32 product as it is (ops_linear.c), compact as the
 * product's own rounding packs it, so the same bits. There a weight's shadow is a copy as big
 * as the weight (made at its first product, then refreshed in the optimizer's pass: no rounding
 * pass of its own, where the product rounded it twice a step), and a products-only tensor is
 * its own shadow: its producer writes it
 * ROUNDED IN PLACE (ops_bf16_round_out: RMSNorm's and add_rmsnorm's outputs, SwiGLU's output
 * and gradients, the q|k|v gradient, dlogits), which costs no pass and no memory; with
 * FT_BF16_SHADOW_ONLY=0 or poison they are written in fp32 as before (poison cannot apply:
 * there is no second copy). A tensor that other ops read in fp32 too may get a rounded copy
 * of its own from its producer, in the pass that writes it (ops_bf16_shadow_take_f32:
 * attention's output, which two products read).
 * The bf16-pattern paths above (ops_bf16_shadows, the attention's bf16 blocks) stay native
 * only. The table is the process's, guarded by a lock; a shadow's contents are written by the
 * op that takes it, which runs on the calling thread's behalf alone. */
#ifndef MODEL_OPS_BF16_H
#define MODEL_OPS_BF16_H
#include <stddef.h>
#include <stdint.h>
#include "model/ops_math.h"

struct adamw_scalars;

/* y[i] = bf16 of x[i] (ties to even), n elements; over the process's threads when large and
 * called outside a parallel region. */
void ops_bf16_pack(uint16_t *y, const float *x, size_t n);
/* The same on the calling thread alone (a row inside an op's own parallel loop). */
void ops_bf16_pack_serial(uint16_t *y, const float *x, size_t n);
/* The same, as fp32 values with the low 16 bits zero (the emulated path's operands). */
void ops_bf16_pack_f32(float *y, const float *x, size_t n);
/* A column-major (rows x cols, leading dimension ld) matrix, nb of them `stride` elements
 * apart, packed compact (leading dimension rows, matrices rows*cols apart) as bf16 bit
 * patterns (f32 = 0) or as rounded fp32 values (f32 = 1). */
void ops_bf16_pack_matrix(void *y, int f32, const float *x, int rows, int cols, int ld,
                          long long stride, int nb);

/* The same for one row inside an op's own loop (inlined: built at the op's level). */
static inline __attribute__((always_inline)) void ops_bf16_pack_row(uint16_t *restrict y,
                                                                    const float *restrict x,
                                                                    size_t n) {
    OPS_SIMD
    for (size_t i = 0; i < n; i++) y[i] = ops_bf16_from_float(x[i]);
}

/* x[i] = bf16 of x[i] as an fp32 value (low 16 bits zero), in place: a row an op wrote. */
static inline __attribute__((always_inline)) void ops_bf16_round_row(float *x, size_t n) {
    OPS_SIMD
    for (size_t i = 0; i < n; i++) x[i] = ops_bf16_round(x[i]);
}
/* y[i] = bf16 of x[i] as an fp32 value: a row an op wrote, into its fp32 shadow
 * (ops_bf16_shadow_take_f32) while the row is in L1. */
static inline __attribute__((always_inline)) void ops_bf16_round_row_to(float *restrict y,
                                                                        const float *restrict x,
                                                                        size_t n) {
    OPS_SIMD
    for (size_t i = 0; i < n; i++) y[i] = ops_bf16_round(x[i]);
}

/* 1 when the op now running computes its products at bf16 natively (ops_product_precision is
 * bf16 and model_gemm_bf16_native): it may take bf16 operands (model_gemm_bf16) of its own. */
int ops_bf16_native(void);
/* 1 when the op now running should use and write shadows: the CPU device runs it at bf16,
 * natively, and shadows are on. */
int ops_bf16_shadows(void);
/* The valid shadow of exactly x[0 .. n), or NULL. */
const uint16_t *ops_bf16_shadow_find(const float *x, size_t n);
/* Storage for the shadow of x[0 .. n), marked valid: the caller fills it before anything
 * reads it (a producer op, in the pass that writes x). NULL when out of memory or the table is
 * full (then the op writes none and its consumers round as without shadows). */
uint16_t *ops_bf16_shadow_take(const float *x, size_t n);
/* The shadow of a weight: found, or made now by rounding w (and kept). NULL when out of
 * memory (the caller rounds as without shadows). */
const uint16_t *ops_bf16_shadow_weight(const float *w, size_t n);
/* The slice of a valid shadow that holds x[0 .. n) (the shadow may be longer), for an op that
 * is about to write x and writes the slice afresh in the same pass (the optimizer: a weight's
 * shadow refreshed by the step that changes it); *f32: the slice holds fp32 values (the
 * emulated path's kind) rather than bf16 patterns. The shadow stays valid, and every other
 * shadow overlapping x[0 .. n) is invalidated. NULL when no valid shadow of storage of its own
 * holds the whole range (then the caller clobbers as usual). */
void *ops_bf16_shadow_slice(const float *x, size_t n, int *f32);
/* AdamW's update (ops.h adamw_update, the same bits) also writing the new p[j] rounded into
 * sh[j]: a bf16 pattern, or an fp32 value with the low 16 bits zero when f32 (sh may be NULL:
 * adamw_update). */
void ops_bf16_adamw_update(float *p, void *sh, int f32, float *g, float *m, float *v, size_t n,
                           const struct adamw_scalars *s);
/* A list of such updates in one pass (the optimizer's step, device_cpu.c): one parallel region
 * for the whole list, each thread a contiguous share of the list's elements (the update is
 * element by element: the same bits as the calls one by one, in any split). */
typedef struct ops_adamw_job {
    float *p, *g, *m, *v;
    void *sh;   /* p's shadow slice, or NULL */
    int f32;
    size_t n;
    const struct adamw_scalars *s;
} ops_adamw_job_t;
void ops_bf16_adamw_update_multi(const ops_adamw_job_t *job, int count);
/* bytes at p are about to be written: every shadow overlapping them becomes invalid. */
void ops_bf16_clobber(const void *p, size_t bytes);
/* The buffer p of `bytes` is freed: the shadows inside it are dropped with their storage. */
void ops_bf16_forget(const void *p, size_t bytes);
/* Checking mode (see the top); returns the number of stale shadows found so far. */
void ops_bf16_shadow_check(int on);
long ops_bf16_shadow_stale(void);
/* How many times a product found a valid shadow (tests: that the shadows are used at all). */
long ops_bf16_shadow_hits(void);
/* Turns shadows on or off for the process (default on unless FT_BF16_SHADOWS=0). */
void ops_bf16_shadows_enable(int on);

/* ---- tensors read by products only (see the top) ---- */
/* p[0 .. bytes) holds tensors that only products read, until the buffer is freed through the
 * device (ops_bf16_forget drops the mark); marking a range again with the same start widens it. */
void ops_bf16_products_only(const void *p, size_t bytes);
/* ops_bf16_shadow_take for an op's output x[0 .. n), *only = 1 when the op may write the shadow
 * alone (x inside a marked range, the hint on, not checking); NULL (and *only = 0) when the op
 * runs without shadows. An op that skipped x calls ops_bf16_only_done(x, n) after (poison). */
uint16_t *ops_bf16_shadow_take_out(const float *x, size_t n, int *only);
void ops_bf16_only_done(float *x, size_t n);
/* ---- the emulated path (no native bf16 products; see "When." at the top) ---- */
/* 1 when the op now running computes its products at bf16 emulated (fp32 products of rounded
 * operands) and shadows are on: it may use the fp32 shadows below. */
int ops_bf16_emulated(void);
/* For an op about to write x[0 .. n) at bf16 emulated: 1 when it is to write x ROUNDED IN PLACE
 * (each element bf16-rounded, kept as fp32 with the low 16 bits zero: what the emulated product
 * multiplies), which makes x its own fp32 shadow (ops_bf16_shadow_find_f32 finds it until the
 * next write); only for x inside a products-only range, with the hint on (mode 1: not off, not
 * poison) and not checking. 0: the op writes fp32 as always. */
int ops_bf16_round_out(const float *x, size_t n);
/* The valid fp32 shadow of exactly x[0 .. n) (x itself when rounded in place), or NULL. */
const float *ops_bf16_shadow_find_f32(const float *x, size_t n);
/* The fp32 shadow of a weight: found, or made now by rounding w into storage of its own (as
 * big as w) and kept until w is written. NULL when out of memory. */
const float *ops_bf16_shadow_weight_f32(const float *w, size_t n);
/* For an op about to write x[0 .. n) at bf16 emulated where x has readers besides products
 * (attention's output, read by attention's backward): storage of its own for x's fp32 shadow,
 * marked valid, which the op
 * fills in the pass that writes x (ops_bf16_round_row_to, each row while it is in L1), so the
 * products that read x find it instead of rounding x in a pass of their own (a read and a
 * write of x: here, one write). x itself is written in fp32 as always. NULL where the op runs
 * without fp32 shadows (not bf16 emulated, shadows off), out of memory or the table full: the
 * op writes x alone and its products round it as before. */
float *ops_bf16_shadow_take_f32(const float *x, size_t n);

/* $FT_BF16_SHADOW_ONLY as 0 (off), 1 (on), 2 (poison); ops_bf16_only_set overrides it (-1: the
 * environment's again). ops_bf16_only_writes: how many outputs were written as shadows alone. */
int ops_bf16_only_mode(void);
void ops_bf16_only_set(int mode);
long ops_bf16_only_writes(void);
#endif
