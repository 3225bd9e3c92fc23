/* tests/test_bf16_shadow.c: the bf16 shadows of the CPU's products (model/ops_bf16.h).
 *
 * - the table: a shadow is found while its tensor is unwritten, is invalid after a write that
 *   overlaps it (and only then), and is dropped with its buffer;
 * - a weight written through the device (an upload, the optimizer) is rounded afresh, the
 *   optimizer's step refreshing its shadow in its own pass (the shadow stays valid);
 * - every family, a few training steps at bf16 with the shadows in checking mode: no product
 *   ever read a stale shadow, and the losses and the trained weights are bit for bit those of
 *   the same run without shadows (a shadow holds exactly what the product would have rounded);
 * - the evaluator's models (evaluator/lm.h, the same family code on the same device) take the
 *   same path: their logits read the shadows and give the bits of the run without them, and a
 *   model made after another was freed (the evaluator's next checkpoint) reads none of its.
 * Where bf16 products are native (x86-64-v4-bf16 and up) shadows hold bf16 patterns; below,
 * they hold fp32 values (the emulated product's operands: a weight's rounded copy, a
 * products-only tensor rounded in place), and the same checks hold: every family, the same
 * bits with and without them.
 * - the element-wise ops' row packing (model/ops_pack16.h: the CPU's conversion at v4-bf16
 *   and up, the integer formula below) gives ops_bf16_from_float's bits: every subnormal and
 *   signed zero, every top half with a spread of bottom halves (the rounding ties, the NaNs,
 *   infinities, the largest finite), at every length up to 40 (the masked tail), unaligned. */
#include "evaluator/lm.h"
#include "model/adamw.h"
#include "model/device.h"
#include "model/family.h"
#include "model/gemm.h"
#include "model/ops_bf16.h"
#include "model/ops_pack16.h"
#include "tests/check.h"
#include <stdlib.h>
#include <string.h>

static int native;

static void test_table(void) {
    enum { N = 1000 };
    float *x = malloc(sizeof(float) * 2 * N);
    for (int i = 0; i < 2 * N; i++) x[i] = 0.1f * (float)i;
    uint16_t *s = ops_bf16_shadow_take(x, N);
    CHECK(s != NULL, "a shadow is taken");
    if (!s) { free(x); return; }
    ops_bf16_pack(s, x, N);
    CHECK(ops_bf16_shadow_find(x, N) == s, "and found");
    CHECK(ops_bf16_shadow_find(x, N - 1) == NULL, "not for another length");
    ops_bf16_clobber(x + N, sizeof(float) * N);   /* right after it: no overlap */
    CHECK(ops_bf16_shadow_find(x, N) == s, "a write beside it leaves it valid");
    ops_bf16_clobber(x + N - 1, sizeof(float));   /* its last element */
    CHECK(ops_bf16_shadow_find(x, N) == NULL, "a write into it invalidates it");
    s = ops_bf16_shadow_take(x, N);
    ops_bf16_pack(s, x, N);
    ops_bf16_forget(x, sizeof(float) * 2 * N);
    CHECK(ops_bf16_shadow_find(x, N) == NULL, "a freed buffer has no shadows");
    free(x);
}

/* The emulated path's fp32 shadows (ops_bf16.h): a products-only tensor rounded in place is its
 * own shadow until a write; a weight's copy holds its rounding; freeing the buffer drops both
 * (and never frees the tensor itself: the allocator would catch a double free). */
static void test_table_f32(void) {
    if (native) return;
    enum { N = 1000 };
    float *x = malloc(sizeof(float) * 2 * N), *w = malloc(sizeof(float) * N);
    for (int i = 0; i < 2 * N; i++) x[i] = 0.1f * (float)i + 1e-3f;
    for (int i = 0; i < N; i++) w[i] = 0.3f * (float)i - 7e-4f;
    const precision_t p0 = ops_product_precision;
    ops_product_precision = PRECISION_BF16;
    CHECK(!ops_bf16_round_out(x, N), "not rounded in place outside a products-only range");
    ops_bf16_products_only(x, sizeof(float) * 2 * N);
    CHECK(ops_bf16_round_out(x, N), "rounded in place inside one");
    ops_bf16_round_row(x, N);
    CHECK(ops_bf16_shadow_find_f32(x, N) == x, "and found as its own shadow");
    CHECK(ops_bf16_shadow_find(x, N) == NULL, "never as a bf16 one");
    ops_bf16_clobber(x + N - 1, sizeof(float));
    CHECK(ops_bf16_shadow_find_f32(x, N) == NULL, "a write into it invalidates it");
    const float *w2 = ops_bf16_shadow_weight_f32(w, N);
    CHECK(w2 != NULL && w2 != w, "a weight's shadow is a copy");
    int bad = 0;
    for (int i = 0; w2 && i < N; i++) bad += w2[i] != ops_bf16_round(w[i]);
    CHECK(bad == 0, "holding its rounding (%d wrong)", bad);
    CHECK(ops_bf16_shadow_find_f32(w, N) == w2, "kept");
    float *c = ops_bf16_shadow_take_f32(w, N);   /* a copy for a tensor read in fp32 too */
    CHECK(c != NULL && c != w, "a tensor's fp32 copy is storage of its own");
    for (int i = 0; c && i < N; i++) c[i] = ops_bf16_round(w[i]);
    CHECK(c && ops_bf16_shadow_find_f32(w, N) == c, "found as its shadow");
    ops_bf16_clobber(w, sizeof(float));
    CHECK(ops_bf16_shadow_find_f32(w, N) == NULL, "a write into the tensor invalidates it");
    ops_bf16_shadows_enable(0);
    CHECK(!ops_bf16_round_out(x, N), "shadows off: not rounded in place");
    CHECK(ops_bf16_shadow_take_f32(w, N) == NULL, "shadows off: no fp32 copy");
    ops_bf16_shadows_enable(1);
    ops_bf16_only_set(2);
    CHECK(!ops_bf16_round_out(x, N), "poisoned: not rounded in place (the fp32 copy is the test)");
    ops_bf16_only_set(-1);
    ops_product_precision = p0;
    CHECK(!ops_bf16_round_out(x, N), "not at fp32");
    CHECK(ops_bf16_shadow_take_f32(w, N) == NULL, "no fp32 copy at fp32");
    ops_bf16_forget(x, sizeof(float) * 2 * N);
    ops_bf16_forget(w, sizeof(float) * N);
    CHECK(ops_bf16_shadow_find_f32(x, N) == NULL && ops_bf16_shadow_find_f32(w, N) == NULL,
          "a freed buffer has no shadows");
    free(x);
    free(w);
}

/* A weight uploaded anew through the device: the product after it reads the new values. */
static void test_weight_rewritten(void) {
    char err[256];
    device_t *d = NULL;
    if (device_open(&d, "cpu", PRECISION_BF16, err, sizeof err)) { CHECK(0, "%s", err); return; }
    enum { N = 4, IN = 32, OUT = 8 };
    float *w = DEV(d, alloc, sizeof(float) * OUT * IN), *x = DEV(d, alloc, sizeof(float) * N * IN);
    float *y = DEV(d, alloc, sizeof(float) * N * OUT), hw[OUT * IN], hx[N * IN], y1[N * OUT], y2[N * OUT];
    for (int i = 0; i < OUT * IN; i++) hw[i] = 1.0f + (float)(i % 7) / 8;
    for (int i = 0; i < N * IN; i++) hx[i] = (float)(i % 5) - 2.0f;
    DEV(d, upload, w, hw, sizeof hw);
    DEV(d, upload, x, hx, sizeof hx);
    DEV(d, linear_forward, y, x, w, N, IN, OUT);
    DEV(d, download, y1, y, sizeof y1);
    for (int i = 0; i < OUT * IN; i++) hw[i] *= 2.0f;   /* exact in bf16 too */
    DEV(d, upload, w, hw, sizeof hw);
    DEV(d, linear_forward, y, x, w, N, IN, OUT);
    DEV(d, download, y2, y, sizeof y2);
    int bad = 0;
    for (int i = 0; i < N * OUT; i++) bad += y2[i] != 2.0f * y1[i];
    CHECK(bad == 0, "%d of %d outputs still read the old weight", bad, N * OUT);
    DEV(d, free, w);
    DEV(d, free, x);
    DEV(d, free, y);
    device_close(&d);
}

/* The optimizer's step refreshes a weight's shadow: still there after it, holding the new values. */
static void test_optimizer_refresh(void) {
    char err[256];
    device_t *d = NULL;
    if (device_open(&d, "cpu", PRECISION_BF16, err, sizeof err)) { CHECK(0, "%s", err); return; }
    enum { N = 2, IN = 64, OUT = 16 };
    float *w = DEV(d, alloc, sizeof(float) * OUT * IN), *x = DEV(d, alloc, sizeof(float) * N * IN);
    float *y = DEV(d, alloc, sizeof(float) * N * OUT), *g = DEV(d, alloc, sizeof(float) * OUT * IN);
    float *m = DEV(d, alloc, sizeof(float) * OUT * IN), *v = DEV(d, alloc, sizeof(float) * OUT * IN);
    float hw[OUT * IN];
    for (int i = 0; i < OUT * IN; i++) hw[i] = 0.01f * (float)(i % 13) - 0.05f;
    DEV(d, upload, w, hw, sizeof hw);
    DEV(d, upload, g, hw, sizeof hw);
    DEV(d, linear_forward, y, x, w, N, IN, OUT);   /* makes the weight's shadow */
    const adamw_scalars_t sc = {.clip = 1.0f, .decay_mul = 0.99f, .beta1 = 0.9f, .beta2 = 0.95f,
                                .eps = 1e-8f, .step_size = 0.1f, .bc2_sqrt = 0.2f};
    DEV(d, adamw_update, w, g, m, v, (size_t)OUT * IN, &sc);
    const uint16_t *sh = ops_bf16_shadow_find(w, (size_t)OUT * IN);
    if (native) {
        CHECK(sh != NULL, "the shadow survives the step");
        int bad = 0;
        for (int i = 0; sh && i < OUT * IN; i++) bad += sh[i] != ops_bf16_from_float(w[i]);
        CHECK(bad == 0, "and holds the new weights (%d stale)", bad);
    } else {   /* emulated: the fp32 shadow, refreshed the same way */
        CHECK(sh == NULL, "no bf16 shadows where bf16 is not native");
        const float *s32 = ops_bf16_shadow_find_f32(w, (size_t)OUT * IN);
        CHECK(s32 != NULL && s32 != w, "the fp32 shadow survives the step");
        int bad = 0;
        for (int i = 0; s32 && i < OUT * IN; i++) bad += s32[i] != ops_bf16_round(w[i]);
        CHECK(bad == 0, "and holds the new weights (%d stale)", bad);
    }
    float *bufs[] = {w, x, y, g, m, v};
    for (int i = 0; i < 6; i++) DEV(d, free, bufs[i]);
    device_close(&d);
}

typedef struct {
    float loss[4];
    float *params;
    size_t n;
} run_t;

/* `steps` training steps of `family` at precision p (shadows on or off); losses and final weights. */
static int train_at(const char *family, precision_t p, int shadows, int steps, run_t *out) {
    model_config_t c = {.kind = family_find(family)->kind, .vocab_size = 61, .d_model = 48,
                        .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .d_ff = 96, .max_seq = 32,
                        .rope_theta = 10000.f, .norm_eps = 1e-5f, .tied = 1, .latent_bits = 6,
                        .kappa_nats = 0.1f, .mixer_heads = 2, .mixer_kernel = 3,
                        .encoder_layers = 2, .embed_dim = 16, .unroll = 1};
    if (c.kind == MODEL_LTM)
        c.sliding_window = 8, c.latent_vectors = 4, c.inner_steps = 2, c.fast_lr = 0.3f,
        c.fast_lr_end = 0.34f, c.fast_lr_steps = 50;
    enum { B = 3, T = 17 };
    char err[256];
    device_t *d = NULL;
    void *m = NULL;
    adamw_t *opt = NULL;
    tensor_view_t pv[256], gv[256];
    int rc = -1;
    ops_bf16_shadows_enable(shadows);
    const model_family_t *f = family_find(family);
    if (device_open(&d, "cpu", p, err, sizeof err) || f->create(&m, d, &c, B, T, 5, err, sizeof err)) {
        CHECK(0, "%s: %s", family, err);
        goto out;
    }
    int np = f->params(m, pv, 256);
    f->grads(m, gv, 256);
    adamw_config_t ac = adamw_config_default();
    if (adamw_create(&opt, pv, np, &ac, err, sizeof err)) {
        CHECK(0, "%s: %s", family, err); /* a failed run is a failure, never a skipped family */
        goto out;
    }
    uint32_t tok[B * T], tgt[B * T];
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < B * T; i++) tok[i] = (uint32_t)((i * 7 + s * 3) % 61), tgt[i] = (uint32_t)((i * 7 + s * 3 + 1) % 61);
        f->zero_grad(m);
        if (f->set_step) f->set_step(m, (uint64_t)s);
        double norm;
        if (f->forward(m, tok, tgt, NULL, &out->loss[s], err, sizeof err) || f->backward(m, err, sizeof err) ||
            adamw_step(opt, gv, np, 1e-2f, 1.0f, 1.0f, &norm, err, sizeof err)) {
            CHECK(0, "%s step %d: %s", family, s, err);
            goto out;
        }
    }
    out->n = 0;
    for (int i = 0; i < np; i++) out->n += (size_t)tensor_numel(&pv[i]);
    out->params = malloc(sizeof(float) * out->n);
    if (!out->params) {
        CHECK(0, "%s: out of memory for %zu parameters", family, out->n);
        goto out;
    }
    for (int i = 0, o = 0; i < np; o += (int)tensor_numel(&pv[i]), i++) tensor_view_download(&pv[i], out->params + o);
    rc = 0;
out:
    adamw_destroy(&opt);
    if (m) f->destroy(&m);
    device_close(&d);
    ops_bf16_shadows_enable(1);
    return rc;
}
static int train(const char *family, int shadows, int steps, run_t *out) {
    return train_at(family, PRECISION_BF16, shadows, steps, out);
}

static void test_families(void) {
    const char *families[] = {"llama", "free", "ltm", "mixer", "mixer-ae", "llama-ae", "mixer-mem", "llama-mem"};
    ops_bf16_shadow_check(1);
    for (size_t i = 0; i < sizeof families / sizeof *families; i++) {
        enum { STEPS = 3 };
        run_t on, off;
        memset(&on, 0, sizeof on);
        memset(&off, 0, sizeof off);
        const long hits0 = ops_bf16_shadow_hits(), stale0 = ops_bf16_shadow_stale();
        if (train(families[i], 1, STEPS, &on) || train(families[i], 0, STEPS, &off)) continue;
        const long hits = ops_bf16_shadow_hits() - hits0;
        CHECK(ops_bf16_shadow_stale() == stale0, "%s: %ld products read a stale shadow", families[i],
              ops_bf16_shadow_stale() - stale0);
        CHECK(hits > 0, "%s: the products read shadows (%ld)", families[i], hits);
        CHECK(!memcmp(on.loss, off.loss, sizeof on.loss), "%s: losses %.9g %.9g %.9g with shadows, %.9g %.9g %.9g without",
              families[i], on.loss[0], on.loss[1], on.loss[2], off.loss[0], off.loss[1], off.loss[2]);
        CHECK(on.n == off.n && !memcmp(on.params, off.params, sizeof(float) * on.n),
              "%s: the trained weights are the same bits", families[i]);
        fprintf(stderr, "  %s: %ld shadow reads, losses %.6f %.6f %.6f\n", families[i], hits, on.loss[0], on.loss[1], on.loss[2]);
        free(on.params);
        free(off.params);
    }
    ops_bf16_shadow_check(0);
}

/* One norm into a buffer marked read by products only, then a product of it: poisoned, a
 * download of the norm's output (not a product) sees NaN where the hint took effect, and the
 * product's result is the bits of the run with the hint off (so the family test below can fail:
 * a reader that is not a product gets NaN). */
static void norm_product(int mode, float *xn_out, float *y_out) {
    char err[256];
    device_t *d = NULL;
    if (device_open(&d, "cpu", PRECISION_BF16, err, sizeof err)) { CHECK(0, "%s", err); return; }
    enum { N = 5, D = 32, OUT = 8 };
    float *x = DEV(d, alloc, sizeof(float) * N * D), *xn = DEV(d, alloc, sizeof(float) * N * D);
    float *rstd = DEV(d, alloc, sizeof(float) * N), *nw = DEV(d, alloc, sizeof(float) * D);
    float *w = DEV(d, alloc, sizeof(float) * OUT * D), *y = DEV(d, alloc, sizeof(float) * N * OUT);
    float hx[N * D], hnw[D], hw[OUT * D];
    for (int i = 0; i < N * D; i++) hx[i] = 0.37f * (float)(i % 11) - 1.5f;
    for (int i = 0; i < D; i++) hnw[i] = 1.0f + 0.01f * (float)i;
    for (int i = 0; i < OUT * D; i++) hw[i] = 0.05f * (float)(i % 13) - 0.3f;
    DEV(d, upload, x, hx, sizeof hx);
    DEV(d, upload, nw, hnw, sizeof hnw);
    DEV(d, upload, w, hw, sizeof hw);
    ops_bf16_only_set(mode);
    dev_products_only(d, xn, (size_t)N * D);
    DEV(d, rmsnorm_forward, xn, rstd, x, nw, N, D, 1e-5f);
    DEV(d, linear_forward, y, xn, w, N, D, OUT);
    ops_bf16_only_set(-1);
    DEV(d, download, xn_out, xn, sizeof(float) * N * D);
    DEV(d, download, y_out, y, sizeof(float) * N * OUT);
    float *bufs[] = {x, xn, rstd, nw, w, y};
    for (int i = 0; i < 6; i++) DEV(d, free, bufs[i]);
    device_close(&d);
}
static void test_poison(void) {
    enum { N = 5, D = 32, OUT = 8 };
    float xn_p[N * D], y_p[N * OUT], xn_0[N * D], y_0[N * OUT];
    norm_product(2, xn_p, y_p);
    norm_product(0, xn_0, y_0);
    int nan = 0, nan0 = 0;
    for (int i = 0; i < N * D; i++) nan += xn_p[i] != xn_p[i], nan0 += xn_0[i] != xn_0[i];
    CHECK(nan0 == 0, "the hint off: the norm's fp32 output is written (%d NaN)", nan0);
    if (native) CHECK(nan == N * D, "poisoned: a reader that is not a product sees NaN (%d of %d)", nan, N * D);
    else CHECK(nan == 0, "no native bf16: the fp32 output is written (%d NaN)", nan);
    CHECK(!memcmp(y_p, y_0, sizeof y_p), "the product reads the same values either way");
}

/* Tensors read by products only (ops_bf16.h; device.h products_only): every family at fp32 and
 * bf16 with the skipped fp32 copies written as NaN (FT_BF16_SHADOW_ONLY=poison) gives the
 * losses and trained weights of the run with the hint off, bit for bit -- so nothing but a
 * product read those tensors, and the products read the same values either way. Where bf16 is
 * native the hint must have taken effect (outputs written as shadows alone). Where it is
 * emulated the hint rounds those tensors in place (poison does not apply: there is no second
 * copy), so the run with the hint on (mode 1) is the one compared: a reader that is not a
 * product would read rounded values and, almost surely, change a bit. */
static void test_products_only(void) {
    const char *families[] = {"llama", "free", "ltm", "mixer", "mixer-ae", "llama-ae", "mixer-mem", "llama-mem"};
    const precision_t precs[] = {PRECISION_FP32, PRECISION_BF16};
    ops_bf16_shadow_check(0);
    for (size_t i = 0; i < sizeof families / sizeof *families; i++)
        for (int p = 0; p < 2; p++) {
            enum { STEPS = 3 };
            run_t on, off;
            memset(&on, 0, sizeof on);
            memset(&off, 0, sizeof off);
            const int emulated = !native && precs[p] == PRECISION_BF16;
            ops_bf16_only_set(emulated ? 1 : 2);
            const long w0 = ops_bf16_only_writes();
            const int r = train_at(families[i], precs[p], 1, STEPS, &on);
            const long writes = ops_bf16_only_writes() - w0;
            ops_bf16_only_set(0);
            const int r0 = r ? r : train_at(families[i], precs[p], 1, STEPS, &off);
            ops_bf16_only_set(-1);
            if (r || r0) continue;
            const char *pn = precs[p] == PRECISION_BF16 ? "bf16" : "fp32";
            if (precs[p] == PRECISION_BF16)
                CHECK(writes > 0, "%s %s: outputs written as shadows alone or rounded in place (%ld)", families[i], pn, writes);
            else
                CHECK(writes == 0, "%s %s: none at fp32 (%ld)", families[i], pn, writes);
            int finite = 1;
            for (int s = 0; s < STEPS; s++) finite &= on.loss[s] == on.loss[s];
            CHECK(finite, "%s %s: the losses are numbers (%g %g %g)", families[i], pn, on.loss[0], on.loss[1], on.loss[2]);
            CHECK(!memcmp(on.loss, off.loss, sizeof on.loss), "%s %s: losses %.9g %.9g %.9g poisoned, %.9g %.9g %.9g without the hint",
                  families[i], pn, on.loss[0], on.loss[1], on.loss[2], off.loss[0], off.loss[1], off.loss[2]);
            CHECK(on.n == off.n && !memcmp(on.params, off.params, sizeof(float) * on.n),
                  "%s %s: the trained weights are the same bits", families[i], pn);
            fprintf(stderr, "  %s %s: %ld outputs as shadows alone (%s)\n", families[i], pn, writes,
                    emulated ? "rounded in place" : "poisoned");
            free(on.params);
            free(off.params);
        }
}

/* n values with a spread of exponents and mantissas that bf16 rounding changes */
static void fill(float *x, size_t n, int seed) {
    uint32_t u = 2463534242u + (uint32_t)seed * 977u;
    for (size_t i = 0; i < n; i++) {
        u ^= u << 13, u ^= u >> 17, u ^= u << 5;
        x[i] = ((float)(u % 20001) - 10000.0f) / 3791.0f;
    }
}
/* how many of x[0 .. n) are not sh[i] = the bf16 rounding of x[i] (sh NULL: n) */
static int not_rounding(const float *sh, const float *x, size_t n) {
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad += !sh || sh[i] != ops_bf16_round(x[i]);
    return bad;
}

/* The emulated path's producers of tensors that products read (ops_bf16.h "When."): attention's
 * output gets an fp32 copy of its own (attention's backward reads it in fp32), the fused q|k|v
 * gradient, read by products only, is rounded in place; each holds
 * exactly the rounding of the fp32 result the op writes without them (a wrong shadow, or a
 * rounding that reached the fp32 copy, fails here), and the product that reads it finds it. */
static void test_emulated_producers(void) {
    if (native) return;
    char err[256];
    device_t *d = NULL;
    if (device_open(&d, "cpu", PRECISION_BF16, err, sizeof err)) { CHECK(0, "%s", err); return; }
    enum { B = 2, T = 16, H = 4, HKV = 2, HD = 8, N = B * T, DQ = H * HD, DKV = HKV * HD,
           LD = DQ + 2 * DKV, F = 24 };
    float *q = DEV(d, alloc, sizeof(float) * N * DQ), *k = DEV(d, alloc, sizeof(float) * N * DKV);
    float *v = DEV(d, alloc, sizeof(float) * N * DKV), *out = DEV(d, alloc, sizeof(float) * N * DQ);
    float *lse = DEV(d, alloc, sizeof(float) * B * H * T), *dout = DEV(d, alloc, sizeof(float) * N * DQ);
    float *dq = DEV(d, alloc, sizeof(float) * N * DQ), *dk = DEV(d, alloc, sizeof(float) * N * DKV);
    float *dv = DEV(d, alloc, sizeof(float) * N * DKV), *dqkv = DEV(d, alloc, sizeof(float) * N * LD);
    float *cs = DEV(d, alloc, sizeof(float) * T * HD / 2), *sn = DEV(d, alloc, sizeof(float) * T * HD / 2);
    float *x = DEV(d, alloc, sizeof(float) * N * F), *w = DEV(d, alloc, sizeof(float) * F * DQ);
    float *dw = DEV(d, alloc, sizeof(float) * F * DQ), *h = DEV(d, alloc, sizeof(float) * N * F);
    static float ref[N * LD];
    fill(q, N * DQ, 1), fill(k, N * DKV, 2), fill(v, N * DKV, 3), fill(dout, N * DQ, 4);
    fill(cs, T * HD / 2, 5), fill(sn, T * HD / 2, 6), fill(x, N * F, 7), fill(w, F * DQ, 8);
    ops_bf16_clobber(q, sizeof(float));   /* (the host wrote behind the device's back) */

    DEV(d, attention_window_forward, out, lse, q, k, v, B, T, T, H, HKV, HD, 1, 0);
    const float *o32 = ops_bf16_shadow_find_f32(out, (size_t)N * DQ);
    CHECK(o32 != NULL && o32 != out, "attention's output has an fp32 copy of its own");
    CHECK(not_rounding(o32, out, (size_t)N * DQ) == 0, "holding the rounding of the output");
    long h0 = ops_bf16_shadow_hits();
    DEV(d, linear_backward_set, h, dw, out, x, w, N, F, DQ);   /* (out as a dy: any product reads it) */
    CHECK(ops_bf16_shadow_hits() > h0, "which a product reads");

    dev_products_only(d, dqkv, (size_t)N * LD);
    ops_bf16_only_set(0);
    DEV(d, attention_backward_qkv, dqkv, dq, dk, dv, dout, out, lse, q, k, v, cs, sn, B, T, H, HKV,
        HD, 1, 0, 0);
    memcpy(ref, dqkv, sizeof ref);
    CHECK(ops_bf16_shadow_find_f32(dqkv, (size_t)N * LD) == NULL, "the hint off: dqkv in fp32");
    ops_bf16_only_set(1);
    DEV(d, attention_backward_qkv, dqkv, dq, dk, dv, dout, out, lse, q, k, v, cs, sn, B, T, H, HKV,
        HD, 1, 0, 0);
    ops_bf16_only_set(-1);
    CHECK(ops_bf16_shadow_find_f32(dqkv, (size_t)N * LD) == dqkv, "the hint on: dqkv rounded in place");
    CHECK(not_rounding(dqkv, ref, (size_t)N * LD) == 0, "to the rounding of the fp32 gradient");
    int moved = 0;
    for (int i = 0; i < N * LD; i++) moved += dqkv[i] != ref[i];
    CHECK(moved > 0, "(which differs from it: the test can fail)");
    DEV(d, zero, out, sizeof(float) * N * DQ);
    CHECK(ops_bf16_shadow_find_f32(out, (size_t)N * DQ) == NULL, "a write invalidates the copy");

    float *bufs[] = {q, k, v, out, lse, dout, dq, dk, dv, dqkv, cs, sn, x, w, dw, h};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) DEV(d, free, bufs[i]);
    device_close(&d);
}

/* The logits of a freshly made evaluator model of `family` (weights from seed) on a bf16 CPU
 * device, shadows on or off; how many products read a shadow goes to *hits. */
static int eval_logits(const char *family, uint64_t seed, int shadows, float *out, size_t n, long *hits) {
    model_config_t c = {.kind = family_find(family)->kind, .vocab_size = 61, .d_model = 48,
                        .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .d_ff = 96, .max_seq = 32,
                        .rope_theta = 10000.f, .norm_eps = 1e-5f, .tied = 1, .latent_bits = 4,
                        .kappa_nats = 0.1f};
    enum { B = 2, T = 13 };
    uint32_t tok[B * T], z[B * T];
    for (int i = 0; i < B * T; i++) tok[i] = (uint32_t)((i * 5 + 3) % 61), z[i] = (uint32_t)(i % 16);
    char err[256];
    device_t *d = NULL;
    eval_lm_t *lm = NULL;
    int rc = -1;
    ops_bf16_shadows_enable(shadows);
    const long h0 = ops_bf16_shadow_hits();
    if (device_open(&d, "cpu", PRECISION_BF16, err, sizeof err) || eval_lm_create(&lm, d, &c, B, T, seed, err, sizeof err)) {
        CHECK(0, "%s: %s", family, err);
        goto out;
    }
    const float *lg = lm->logits(lm, tok, lm->latent_bits ? z : NULL, B, T, err, sizeof err);
    CHECK(lg != NULL, "%s: %s", family, err);
    if (lg) memcpy(out, lg, sizeof(float) * n), rc = 0;
out:
    *hits = ops_bf16_shadow_hits() - h0;
    eval_lm_free(&lm);
    device_close(&d);
    ops_bf16_shadows_enable(1);
    return rc;
}

static void test_evaluator(void) {
    const char *families[] = {"llama", "free"};
    enum { N = 2 * 13 * 61 };
    static float a1[N], a0[N], b1[N], b0[N], a2[N];
    ops_bf16_shadow_check(1);
    for (size_t i = 0; i < sizeof families / sizeof *families; i++) {
        const char *f = families[i];
        const long stale0 = ops_bf16_shadow_stale();
        long h1, h0, hb, hb0, h2;
        /* a, then b made where a was (the evaluator's next checkpoint), then a again */
        if (eval_logits(f, 1, 1, a1, N, &h1) || eval_logits(f, 1, 0, a0, N, &h0) ||
            eval_logits(f, 2, 1, b1, N, &hb) || eval_logits(f, 2, 0, b0, N, &hb0) ||
            eval_logits(f, 1, 1, a2, N, &h2))
            continue;
        CHECK(ops_bf16_shadow_stale() == stale0, "%s: %ld products read a stale shadow", f, ops_bf16_shadow_stale() - stale0);
        /* (emulated, in checking mode, a forward's only shadows are the weights' copies, made
         * by the one product that reads each: there may be no second read to count) */
        if (native) CHECK(h1 > 0 && hb > 0 && h2 > 0, "%s: the logits read shadows (%ld %ld %ld)", f, h1, hb, h2);
        CHECK(h0 == 0 && hb0 == 0, "%s: none read when they are off (%ld %ld)", f, h0, hb0);
        CHECK(!memcmp(a1, a0, sizeof a1), "%s: the logits are the bits of the run without shadows", f);
        CHECK(!memcmp(b1, b0, sizeof b1), "%s: the next model's too", f);
        CHECK(memcmp(a1, b1, sizeof a1) != 0, "%s: the two models differ (else the test shows nothing)", f);
        CHECK(!memcmp(a1, a2, sizeof a1), "%s: the first model made again gives its bits again", f);
        fprintf(stderr, "  evaluator %s: %ld/%ld/%ld shadow reads\n", f, h1, hb, h2);
    }
    ops_bf16_shadow_check(0);
}

/* The head at bf16 on the CPU device: logits = x w^T, the classifier over them (dlogits over the
 * logits, the buffer marked products-only as the families mark it), dx and dw from dlogits; dx,
 * dw and the loss into out, with the hint in `mode` (ops_bf16_only_set). How many outputs were
 * written as shadows alone goes to *writes. */
enum { CN = 12, CD = 24, CV = 61 };
static void head_at(int mode, float *out, long *writes) {
    char err[256];
    device_t *d = NULL;
    if (device_open(&d, "cpu", PRECISION_BF16, err, sizeof err)) {
        CHECK(0, "%s", err);
        return;
    }
    float *x = DEV(d, alloc, sizeof(float) * CN * CD), *w = DEV(d, alloc, sizeof(float) * CV * CD);
    float *z = DEV(d, alloc, sizeof(float) * CN * CV), *lse = DEV(d, alloc, sizeof(float) * CN);
    float *dx = DEV(d, alloc, sizeof(float) * CN * CD), *dw = DEV(d, alloc, sizeof(float) * CV * CD);
    uint32_t *t = DEV(d, alloc, sizeof(uint32_t) * CN);
    for (int i = 0; i < CN * CD; i++) x[i] = (float)((i * 37) % 101 - 50) / 47.0f;
    for (int i = 0; i < CV * CD; i++) w[i] = (float)((i * 53) % 89 - 44) / 61.0f;
    for (int i = 0; i < CN; i++) t[i] = (uint32_t)((i * 7) % CV);
    ops_bf16_only_set(mode);
    const long w0 = ops_bf16_only_writes();
    DEV(d, linear_forward, z, x, w, CN, CD, CV);
    dev_products_only(d, z, (size_t)CN * CV);
    int count = 0;
    out[0] = DEV(d, crossentropy_forward, z, lse, &count, z, t, NULL, CN, CV, 1.0f);
    DEV(d, linear_backward_set, dx, dw, z, x, w, CN, CD, CV);
    *writes = ops_bf16_only_writes() - w0;
    ops_bf16_only_set(-1);
    memcpy(out + 1, dx, sizeof(float) * CN * CD);
    memcpy(out + 1 + CN * CD, dw, sizeof(float) * CV * CD);
    DEV(d, free, x), DEV(d, free, w), DEV(d, free, z), DEV(d, free, lse), DEV(d, free, dx), DEV(d, free, dw);
    DEV(d, free, t);
    device_close(&d);
}
/* dlogits read by the head's products alone (issue 25): at native bf16 the classifier writes
 * their shadow alone (emulated: rounds them in place); dx, dw and the loss are the bits of the
 * run that writes fp32 dlogits, with the hint on and with the fp32 copy poisoned (native) */
static void test_classifier_products_only(void) {
    enum { NOUT = 1 + CN * CD + CV * CD };
    static float off[NOUT], on[NOUT], poison[NOUT];
    long w_off = 0, w_on = 0, w_poison = 0;
    head_at(0, off, &w_off);
    head_at(1, on, &w_on);
    head_at(2, poison, &w_poison);
    CHECK(w_off == 0, "hint off: nothing written as a shadow alone (%ld)", w_off);
    CHECK(w_on == 1 && w_poison == native, "dlogits as the shadow alone: %ld, poisoned %ld (expected 1, %d)", w_on,
          w_poison, native);
    CHECK(!memcmp(off, on, sizeof off), "dx, dw and the loss: the same bits with the hint");
    CHECK(!memcmp(off, poison, sizeof off), "the same bits with the fp32 dlogits poisoned");
    CHECK(off[0] == off[0] && off[0] > 0.0f, "the loss is a positive number (%g)", off[0]);
}

static void test_pack16(void) {
    enum { B = 1 << 16 };
    float *x = malloc(sizeof(float) * (B + 1));
    uint16_t *y = malloc(sizeof(uint16_t) * (B + 1));
    static const uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff, 0x4000, 0xc000};
    long bad = 0, n = 0;
    uint32_t first = 0;
    for (int pass = 0; pass < 2 * 256 + 64; pass++) {
        /* passes 0..511: subnormals (both signs, every bottom bit pattern, 2^23 each side);
         * 512..575: each top half with low bits lows[] or a hash of it */
        for (uint32_t i = 0; i < B; i++) {
            uint32_t u;
            if (pass < 512)
                u = (pass & 256 ? 0x80000000u : 0u) | (((uint32_t)(pass & 255) << 15) | (i >> 1));
            else {
                const uint32_t k = (uint32_t)(pass - 512);
                u = i << 16 | (k < 8 ? lows[k] : ((i * 2654435761u) ^ (k * 40503u)) & 0xffffu);
            }
            memcpy(&x[1 + i], &u, sizeof u);
        }
        ops_pack16_row(y + 1, x + 1, B);   /* (unaligned by one element) */
        for (uint32_t i = 0; i < B; i++, n++)
            if (y[1 + i] != ops_bf16_from_float(x[1 + i])) {
                if (!bad) memcpy(&first, &x[1 + i], sizeof first);
                bad++;
            }
    }
    for (int len = 0; len <= 40; len++) {   /* the tail, and nothing written beyond it */
        for (int i = 0; i <= 40; i++) x[i] = -1.5e-39f * (float)(i + 1) + 0.37f * (float)(i & 3), y[i] = 0x5a5a;
        ops_pack16_row(y, x, (size_t)len);
        for (int i = 0; i <= 40; i++, n++)
            if (y[i] != (i < len ? ops_bf16_from_float(x[i]) : 0x5a5a)) {
                if (!bad) memcpy(&first, &x[i], sizeof first);
                bad++;
            }
    }
    CHECK(bad == 0, "ops_pack16_row: %ld of %ld elements differ from ops_bf16_from_float (first 0x%08x)",
          bad, n, first);
    free(x);
    free(y);
}

int main(void) {
    native = model_gemm_bf16_native();
    fprintf(stderr, "bf16 products %s: shadows of %s\n", native ? "native" : "emulated", native ? "bf16 patterns" : "fp32 values");
    RUN(test_table);
    RUN(test_pack16);
    RUN(test_table_f32);
    RUN(test_weight_rewritten);
    RUN(test_optimizer_refresh);
    RUN(test_families);
    RUN(test_poison);
    RUN(test_products_only);
    RUN(test_classifier_products_only);
    RUN(test_emulated_producers);
    RUN(test_evaluator);
    return check_summary();
}
