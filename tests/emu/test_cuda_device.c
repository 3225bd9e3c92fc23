/* tests/emu/test_cuda_device.c: the CUDA device's own contracts (model/device_cuda.cu), run on
 * the execution-model emulator (tests/emu; tests/it_emu.sh). Each case is a bug issue 25 found
 * by reading the code, and fails on the code before its fix:
 *   - every CUDA/cuBLAS call's status is checked: the opener's (device properties, stream,
 *     cuBLAS stream and math mode, the work buffer's sync), the product timer's events
 *     (emu_fail_call makes one call fail, as a GPU's would);
 *   - a fault is reported once by sync and then forgotten, so the device works again;
 *   - free gives back what alloc counted (device_t.allocated, the memory report);
 *   - a batch that creation found to fit trains its first step with nothing more allocated
 *     (the bf16 operands' work buffer used to grow at the first product: ~0.9 GB at config G,
 *     after the "largest batch that fits" probe had passed);
 * and the bf16 shadows (device_cuda.cu: operands rounded once and kept, weights refreshed by
 * the optimizer): products read them, every write through the device invalidates or refreshes
 * them, and FT_BF16_SHADOW_CHECK reports one made stale behind the device's back; and the
 * vocabulary's products at bf16 with every matrix 16-byte aligned (an odd vocabulary's logits
 * computed through the staging buffer, dlogits read from the classifier's padded shadow: on an
 * H200 the unaligned ones ran cuBLAS's Turing-era kernels at a tenth of the layer products' rate),
 * giving the bits of the unaligned products; and the reductions finished by the last block of
 * the kernel before them (the classifier's mean loss, the gradient norm's sum) give the bits of
 * the finishing kernels they replaced (FT_CUDA_FINISH=kernels), over many blocks, twice in a row
 * (the ticket goes back to 0); and the column reductions' finish folded into their first stage
 * (RMSNorm's weight gradient, sum_rows) gives k_colred_finish's bits the same way; and
 * attention's kernels whose tiles two warps share (their sums meeting in shared memory) give the
 * same bits twice over many blocks; and the shadows attention's kernels write (out's, dout's) are
 * their tensors' roundings, read where g_to_bf16's were, and never read once stale. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_runtime_api.h"
#include "emu_api.h"
#include "model/adamw.h"
#include "model/device.h"
#include "model/family.h"
#include "tests/check.h"

static device_t *open_cuda(precision_t p, char *err, size_t errlen) {
    device_t *d = NULL;
    if (device_open(&d, "cuda", p, err, errlen)) return NULL;
    return d;
}

/* Each call the opener makes, failing: open fails with one line naming the call. */
static void test_open_checks_every_call(void) {
    const char *calls[] = {"cudaGetDeviceProperties", "cudaStreamCreate", "cublasCreate", "cublasSetStream",
                           "cublasSetMathMode", "cudaStreamSynchronize" /* the work buffer's, at open */};
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
        char err[256] = "";
        emu_fail_call(calls[i], 1);
        device_t *d = open_cuda(PRECISION_FP32, err, sizeof err);
        const char *named = strstr(calls[i], "Synchronize") ? "work buffer" : calls[i];
        CHECK(!d && strstr(err, named), "open with %s failing: %s (\"%s\")", calls[i], d ? "opened" : "refused", err);
        if (d) device_close(&d);
        emu_fail_call(calls[i], 1 << 30); /* disarm */
    }
    char err[256];
    device_t *d = open_cuda(PRECISION_FP32, err, sizeof err);
    CHECK(d != NULL, "and with nothing failing it opens: %s", d ? d->name : err);
    device_close(&d);
}

/* The product timer (bench/gpu.sh) with an event call failing: a fault, not a silent 0 s. */
static void test_gemm_timer_checks_events(void) {
    char err[256];
    device_t *d = open_cuda(PRECISION_FP32, err, sizeof err);
    if (!d) { CHECK(0, "open: %s", err); return; }
    float *a = DEV(d, alloc, 64 * sizeof(float)), *c = DEV(d, alloc, 64 * sizeof(float));
    d->profile_gemm = 1;
    const char *calls[] = {"cudaEventCreate", "cudaEventRecord", "cudaEventSynchronize", "cudaEventElapsedTime"};
    for (size_t i = 0; i < 4; i++) {
        emu_fail_call(calls[i], 1);
        DEV(d, gemm, GEMM_N, GEMM_N, 8, 8, 8, 1.0f, a, 8, a, 8, 0.0f, c, 8);
        err[0] = 0;
        int rc = DEV(d, sync, err, sizeof err);
        CHECK(rc != 0 && strstr(err, "gemm timing"), "%s failing: sync %d (\"%s\")", calls[i], rc, err);
        emu_fail_call(calls[i], 1 << 30);
    }
    DEV(d, gemm, GEMM_N, GEMM_N, 8, 8, 8, 1.0f, a, 8, a, 8, 0.0f, c, 8);
    CHECK(DEV(d, sync, err, sizeof err) == 0 && d->gemm_seconds >= 0, "a timed product with nothing failing");
    DEV(d, free, a);
    DEV(d, free, c);
    device_close(&d);
}

/* A fault (a kernel launch that fails) is reported by the next sync, once. */
static void test_fault_reported_once(void) {
    char err[256];
    device_t *d = open_cuda(PRECISION_FP32, err, sizeof err);
    if (!d) { CHECK(0, "open: %s", err); return; }
    float *x = DEV(d, alloc, 100 * sizeof(float));
    emu_fail_call("g_scale", 1);
    DEV(d, scale_inplace, x, 2.0f, 100);
    err[0] = 0;
    int rc0 = DEV(d, sync, err, sizeof err);
    /* a fault, not a lack of memory (DEVICE_ENOMEM: the evaluator would retry instead of skipping) */
    CHECK(rc0 == DEVICE_EFAULT && strstr(err, "scale"), "the failed launch is reported: %d \"%s\"", rc0, err);
    DEV(d, scale_inplace, x, 2.0f, 100);
    err[0] = 0;
    int rc = DEV(d, sync, err, sizeof err);
    CHECK(rc == 0, "after it was reported, the device works again (sync %d: \"%s\")", rc, err);
    DEV(d, free, x);
    device_close(&d);
}

/* device_t.allocated: what alloc added, free takes away. */
static void test_free_counts(void) {
    char err[256];
    device_t *d = open_cuda(PRECISION_FP32, err, sizeof err);
    if (!d) { CHECK(0, "open: %s", err); return; }
    const size_t a0 = d->allocated;
    void *p = DEV(d, alloc, 1000), *q = DEV(d, alloc, 3000);
    CHECK(d->allocated == a0 + 4000, "two buffers: %zu bytes counted", d->allocated - a0);
    DEV(d, free, p);
    CHECK(d->allocated == a0 + 3000, "one freed: %zu bytes counted (want 3000)", d->allocated - a0);
    DEV(d, free, q);
    CHECK(d->allocated == a0, "both freed: %zu bytes counted (want 0)", d->allocated - a0);
    CHECK(DEV(d, sync, err, sizeof err) == 0, "no fault");
    device_close(&d);
}

/* A model created on a device with nothing to spare trains a step: every buffer the step
 * needs was taken at creation (or at open), none on the way. */
static void first_step_fits(precision_t p, const char *family) {
    char err[256];
    device_t *d = open_cuda(p, err, sizeof err);
    if (!d) { CHECK(0, "open: %s", err); return; }
    const model_family_t *f = family_find(family);
    model_config_t c = {.kind = f->kind, .vocab_size = 97, .d_model = 64, .n_layers = 2, .n_heads = 4,
                        .n_kv_heads = 2, .d_ff = 128, .max_seq = 32, .rope_theta = 10000.f, .norm_eps = 1e-5f,
                        .tied = 1, .latent_bits = 4, .kappa_nats = 0.1f};
    enum { Bt = 4, T = 32 };
    void *m = NULL;
    if (f->create(&m, d, &c, Bt, T, 5, err, sizeof err)) {
        CHECK(0, "%s: create: %s", family, err);
        device_close(&d);
        return;
    }
    size_t fr = 0, total = 0;
    cudaMemGetInfo(&fr, &total);
    emu_set_memory_limit(d->ordinal, total - fr); /* what is held now, not a byte more */
    uint32_t tok[Bt * T], tgt[Bt * T];
    for (int i = 0; i < Bt * T; i++) tok[i] = (uint32_t)(i * 7 % 97), tgt[i] = (uint32_t)((i * 7 + 1) % 97);
    float loss = 0;
    f->zero_grad(m);
    int rc = f->forward(m, tok, tgt, NULL, &loss, err, sizeof err);
    if (!rc) rc = f->backward(m, err, sizeof err);
    CHECK(rc == 0, "%s at %s: the first step on a device with nothing to spare: %s", family,
          precision_name(p), rc ? err : "trained");
    emu_set_memory_limit(d->ordinal, total);
    f->destroy(&m);
    device_close(&d);
}
static void test_first_step_allocates_nothing(void) {
    first_step_fits(PRECISION_FP32, "llama");
    first_step_fits(PRECISION_BF16, "llama");
    first_step_fits(PRECISION_BF16, "free");
}

long device_cuda_shadow_hits(const device_t *d);

/* y = x w^T at bf16 (N x out), downloaded */
static void linear_bf16(device_t *d, float *yh, float *y, const float *x, const float *w, int N, int in, int out) {
    DEV(d, linear_forward, y, x, w, N, in, out);
    DEV(d, download, yh, y, sizeof(float) * N * out);
}
static void test_bf16_shadows(void) {
    enum { N = 24, IN = 40, OUT = 36 };
    setenv("FT_BF16_SHADOW_CHECK", "1", 1); /* read at open */
    char err[256];
    device_t *d = open_cuda(PRECISION_BF16, err, sizeof err);
    unsetenv("FT_BF16_SHADOW_CHECK");
    if (!d) { CHECK(0, "open: %s", err); return; }
    float xh[N * IN], wh[OUT * IN], y0[N * OUT], y1[N * OUT], y2[N * OUT];
    for (int i = 0; i < N * IN; i++) xh[i] = (float)((i * 37) % 101 - 50) / 47.0f;
    for (int i = 0; i < OUT * IN; i++) wh[i] = (float)((i * 53) % 89 - 44) / 61.0f;
    float *x = DEV(d, alloc, sizeof xh), *w = DEV(d, alloc, sizeof wh), *y = DEV(d, alloc, sizeof y0);
    float *g = DEV(d, alloc, sizeof wh), *m = DEV(d, alloc, sizeof wh), *v = DEV(d, alloc, sizeof wh);
    DEV(d, upload, x, xh, sizeof xh);
    DEV(d, upload, w, wh, sizeof wh);
    const long h0 = device_cuda_shadow_hits(d);
    linear_bf16(d, y0, y, x, w, N, IN, OUT); /* rounds x and w into their shadows */
    linear_bf16(d, y1, y, x, w, N, IN, OUT); /* reads them */
    CHECK(device_cuda_shadow_hits(d) - h0 == 2, "the second product read both shadows (%ld reads)", device_cuda_shadow_hits(d) - h0);
    CHECK(!memcmp(y0, y1, sizeof y0), "the same bits from the shadows as from rounding");
    CHECK(DEV(d, sync, err, sizeof err) == 0, "no stale shadow: %s", err);
    /* written through the device: the shadow is dropped, the product sees the new weights */
    DEV(d, scale_inplace, w, 2.0f, OUT * IN);
    linear_bf16(d, y1, y, x, w, N, IN, OUT);
    int twice = 1;
    for (int i = 0; i < N * OUT; i++) twice &= y1[i] == 2.0f * y0[i];
    CHECK(twice, "after scale_inplace(w, 2) the product doubles (the scaled weights rounded afresh)");
    CHECK(DEV(d, sync, err, sizeof err) == 0, "no stale shadow after a write through the device: %s", err);
    /* the optimizer refreshes the weight's shadow in its pass: the next product reads it */
    for (int i = 0; i < OUT * IN; i++) wh[i] = 0.01f * (float)(i % 7 - 3);
    DEV(d, upload, g, wh, sizeof wh);
    DEV(d, zero, m, sizeof wh);
    DEV(d, zero, v, sizeof wh);
    adamw_scalars_t sc = {.clip = 1.0f, .decay_mul = 0.999f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                          .step_size = 0.05f, .bc2_sqrt = 1.0f};
    const long h1 = device_cuda_shadow_hits(d);
    DEV(d, adamw_update, w, g, m, v, OUT * IN, &sc);
    linear_bf16(d, y2, y, x, w, N, IN, OUT);
    CHECK(device_cuda_shadow_hits(d) - h1 == 2, "after the update both shadows read (%ld): w's refreshed by it",
          device_cuda_shadow_hits(d) - h1);
    CHECK(memcmp(y1, y2, sizeof y1) != 0, "the updated weights give another product");
    CHECK(DEV(d, sync, err, sizeof err) == 0, "the refreshed shadow is the new weights' rounding: %s", err);
    /* written behind the device's back (not allowed to a family): the check reports it */
    for (int i = 0; i < N * IN; i++) xh[i] = -xh[i] + 0.5f;
    cudaMemcpy(x, xh, sizeof xh, cudaMemcpyHostToDevice);
    linear_bf16(d, y2, y, x, w, N, IN, OUT);
    err[0] = 0;
    CHECK(DEV(d, sync, err, sizeof err) != 0 && strstr(err, "stale"), "a stale shadow is reported: \"%s\"", err);
    CHECK(DEV(d, sync, err, sizeof err) == 0, "once: %s", err);
    DEV(d, free, x), DEV(d, free, w), DEV(d, free, y), DEV(d, free, g), DEV(d, free, m), DEV(d, free, v);
    device_close(&d);
}

long device_cuda_only_writes(const device_t *d);

/* Tensors read by products only (device.h products_only): a norm, SwiGLU and its backward into
 * marked buffers, then products of them, with FT_BF16_SHADOW_ONLY=mode (read at open). out: the
 * fp32 copies downloaded (xn, h, dgate, dup), then the products (y of xn, y of h, dx of dgate);
 * *writes: outputs written as shadows alone. */
enum { PO_N = 20, PO_D = 32, PO_F = 48 };
#define PO_OUT (PO_N * PO_D + 3 * PO_N * PO_F + PO_N * PO_F + PO_N * PO_D + PO_N * PO_D)
static int products_only_run(const char *mode, int check, float *out, long *writes) {
    enum { N = PO_N, D = PO_D, F = PO_F };
    setenv("FT_BF16_SHADOW_ONLY", mode, 1);
    if (check) setenv("FT_BF16_SHADOW_CHECK", "1", 1);
    char err[256];
    device_t *d = open_cuda(PRECISION_BF16, err, sizeof err);
    unsetenv("FT_BF16_SHADOW_ONLY");
    unsetenv("FT_BF16_SHADOW_CHECK");
    if (!d) { CHECK(0, "open: %s", err); return -1; }
    static float xh[N * D], nwh[D], wgh[F * D], gh[N * F], dh[N * F];
    for (int i = 0; i < N * D; i++) xh[i] = (float)((i * 37) % 101 - 50) / 47.0f;
    for (int i = 0; i < D; i++) nwh[i] = 1.0f + 0.01f * (float)i;
    for (int i = 0; i < F * D; i++) wgh[i] = (float)((i * 53) % 89 - 44) / 61.0f;
    for (int i = 0; i < N * F; i++) gh[i] = (float)((i * 29) % 83 - 41) / 23.0f, dh[i] = (float)((i * 17) % 71 - 35) / 31.0f;
    float *x = DEV(d, alloc, sizeof xh), *nw = DEV(d, alloc, sizeof nwh), *rstd = DEV(d, alloc, sizeof(float) * N);
    float *xn = DEV(d, alloc, sizeof xh), *wg = DEV(d, alloc, sizeof wgh), *gate = DEV(d, alloc, sizeof gh);
    float *up = DEV(d, alloc, sizeof gh), *h = DEV(d, alloc, sizeof gh), *dout = DEV(d, alloc, sizeof dh);
    float *dg = DEV(d, alloc, sizeof gh), *du = DEV(d, alloc, sizeof gh), *y = DEV(d, alloc, sizeof gh);
    float *dx = DEV(d, alloc, sizeof xh);
    DEV(d, upload, x, xh, sizeof xh);
    DEV(d, upload, nw, nwh, sizeof nwh);
    DEV(d, upload, wg, wgh, sizeof wgh);
    DEV(d, upload, gate, gh, sizeof gh);
    DEV(d, upload, up, dh, sizeof dh);
    DEV(d, upload, dout, dh, sizeof dh);
    dev_products_only(d, xn, (size_t)N * D);
    dev_products_only(d, h, (size_t)N * F);
    dev_products_only(d, dg, (size_t)N * F);
    dev_products_only(d, du, (size_t)N * F);
    const long w0 = device_cuda_only_writes(d);
    DEV(d, rmsnorm_forward, xn, rstd, x, nw, N, D, 1e-5f);
    DEV(d, swiglu_forward, h, gate, up, N, F);
    DEV(d, swiglu_backward_set, dg, du, dout, gate, up, N, F);
    float *o = out;
    DEV(d, download, o, xn, sizeof xh), o += N * D;
    DEV(d, download, o, h, sizeof gh), o += N * F;
    DEV(d, download, o, dg, sizeof gh), o += N * F;
    DEV(d, download, o, du, sizeof gh), o += N * F;
    DEV(d, linear_forward, y, xn, wg, N, D, F); /* y = xn wg^T: (N, F) */
    DEV(d, download, o, y, sizeof gh), o += N * F;
    DEV(d, linear_forward, dx, h, wg, N, F, D); /* h (N, F) through wg read as (D, F): (N, D) */
    DEV(d, download, o, dx, sizeof xh), o += N * D;
    DEV(d, linear_backward_set, dx, NULL, dg, xn, wg, N, D, F); /* dx = dg wg */
    DEV(d, download, o, dx, sizeof xh);
    *writes = device_cuda_only_writes(d) - w0;
    const int rc = DEV(d, sync, err, sizeof err);
    CHECK(rc == 0, "FT_BF16_SHADOW_ONLY=%s%s: %s", mode, check ? " with the check" : "", rc ? err : "");
    float *bufs[] = {x, nw, rstd, xn, wg, gate, up, h, dout, dg, du, y, dx};
    for (int i = 0; i < 13; i++) DEV(d, free, bufs[i]);
    device_close(&d);
    return rc;
}
static void test_products_only(void) {
    static float p[PO_OUT], off[PO_OUT], chk[PO_OUT];
    long wp, w0, wc;
    if (products_only_run("poison", 0, p, &wp) || products_only_run("0", 0, off, &w0) ||
        products_only_run("1", 1, chk, &wc))
        return;
    const size_t copies = PO_N * PO_D + 3 * PO_N * PO_F, prods = PO_OUT - copies;
    size_t nan = 0, nan0 = 0;
    for (size_t i = 0; i < copies; i++) nan += p[i] != p[i], nan0 += off[i] != off[i];
    CHECK(wp == 4 && w0 == 0 && wc == 0, "outputs as shadows alone: %ld poisoned, %ld off, %ld with the check (4, 0, 0)", wp, w0, wc);
    CHECK(nan == copies && nan0 == 0, "the skipped fp32 copies are NaN when poisoned (%zu of %zu), written when off (%zu NaN)",
          nan, copies, nan0);
    CHECK(!memcmp(p + copies, off + copies, sizeof(float) * prods), "the products read the same values either way");
    CHECK(!memcmp(chk, off, sizeof off), "the check turns the hint off (the same copies and products)");
}

void device_cuda_aligned_counts(const device_t *d, long *staged, long *padded_reads, long *padded_products,
                                long *stage_reads);

/* The head of a model with an odd vocabulary, at bf16: logits = x w^T, the classifier (dlogits
 * over the logits), dx and dw from dlogits; its results downloaded into out (logits, dlogits,
 * dx, dw, loss). peek: the logits downloaded before the classifier (else the classifier follows
 * the product directly and may read its staged result; out's logits then stay as they were).
 * only: the logits' buffer marked products-only (device.h), as the families mark it: dlogits are
 * then their bf16 shadow alone and out's dlogits stay as they were */
enum { HN = 24, HD = 40, HV = 61 };
static void head_bf16_as(device_t *d, float *out, const float *xh, const float *wh, const uint32_t *th, int peek,
                         int only) {
    float *x = DEV(d, alloc, sizeof(float) * HN * HD), *w = DEV(d, alloc, sizeof(float) * HV * HD);
    float *z = DEV(d, alloc, sizeof(float) * HN * HV), *lse = DEV(d, alloc, sizeof(float) * HN);
    float *dx = DEV(d, alloc, sizeof(float) * HN * HD), *dw = DEV(d, alloc, sizeof(float) * HV * HD);
    uint32_t *t = DEV(d, alloc, sizeof(uint32_t) * HN);
    DEV(d, upload, x, xh, sizeof(float) * HN * HD);
    DEV(d, upload, w, wh, sizeof(float) * HV * HD);
    DEV(d, linear_forward, z, x, w, HN, HD, HV);
    DEV(d, upload, t, th, sizeof(uint32_t) * HN); /* as a training step: not into the logits */
    if (peek) DEV(d, download, out, z, sizeof(float) * HN * HV);
    out += HN * HV;
    int count = 0;
    if (only) dev_products_only(d, z, (size_t)HN * HV);
    const float loss = DEV(d, crossentropy_forward, z, lse, &count, z, t, NULL, HN, HV, 1.0f);
    DEV(d, linear_backward_set, dx, dw, z, x, w, HN, HD, HV);
    if (!only) DEV(d, download, out, z, sizeof(float) * HN * HV);
    DEV(d, download, out + HN * HV, dx, sizeof(float) * HN * HD);
    DEV(d, download, out + HN * HV + HN * HD, dw, sizeof(float) * HV * HD);
    out[HN * HV + HN * HD + HV * HD] = loss;
    DEV(d, free, x), DEV(d, free, w), DEV(d, free, z), DEV(d, free, lse), DEV(d, free, dx), DEV(d, free, dw);
    DEV(d, free, t);
}
static void head_bf16(device_t *d, float *out, const float *xh, const float *wh, const uint32_t *th, int peek) {
    head_bf16_as(d, out, xh, wh, th, peek, 0);
}
/* The head's inputs of test_aligned_vocabulary_products */
static void head_inputs(float *xh, float *wh, uint32_t *th) {
    for (int i = 0; i < HN * HD; i++) xh[i] = (float)((i * 37) % 101 - 50) / 47.0f;
    for (int i = 0; i < HV * HD; i++) wh[i] = (float)((i * 53) % 89 - 44) / 61.0f;
    for (int i = 0; i < HN; i++) th[i] = (uint32_t)((i * 7) % HV);
}
/* dlogits marked products-only (issue 25): the classifier writes their bf16 shadow alone in the
 * logits' own buffer -- compact at the padded stride where it reads the staged logits, over the
 * first half of each fp32 row where it reads the logits' buffer itself (not staged; unaligned) --
 * and the head's products give the bits they give from the fp32 dlogits' shadow: dx, dw and the
 * loss, with the hint on and with the rest of the buffer poisoned */
static void test_products_only_dlogits(void) {
    enum { NOUT = 2 * HN * HV + HN * HD + HV * HD + 1 };
    static float xh[HN * HD], wh[HV * HD], ref[NOUT], got[NOUT];
    uint32_t th[HN];
    head_inputs(xh, wh, th);
    const char *layouts[] = {"staged", "not staged", "unaligned"};
    for (int l = 0; l < 3; l++)
        for (int mode = 1; mode <= 2; mode++) {
            char err[256];
            if (l == 0) setenv("FT_CUDA_STAGE_MIN", "0", 1);
            if (l == 2) setenv("FT_CUDA_ALIGN", "0", 1);
            setenv("FT_BF16_SHADOW_ONLY", "0", 1);
            device_t *d = open_cuda(PRECISION_BF16, err, sizeof err);
            setenv("FT_BF16_SHADOW_ONLY", mode == 2 ? "poison" : "1", 1);
            device_t *e = d ? open_cuda(PRECISION_BF16, err, sizeof err) : NULL;
            unsetenv("FT_BF16_SHADOW_ONLY"), unsetenv("FT_CUDA_STAGE_MIN"), unsetenv("FT_CUDA_ALIGN");
            if (!d || !e) {
                CHECK(0, "open: %s", err);
                device_close(&d);
                return;
            }
            memset(ref, 0, sizeof ref), memset(got, 0, sizeof got);
            head_bf16_as(d, ref, xh, wh, th, 0, 1);
            const long w0 = device_cuda_only_writes(e);
            head_bf16_as(e, got, xh, wh, th, 0, 1);
            const long writes = device_cuda_only_writes(e) - w0;
            long staged = 0, padded = 0, extents = 0, in_place = 0;
            device_cuda_aligned_counts(e, &staged, &padded, &extents, &in_place);
            CHECK(writes == 1, "%s, %s: dlogits written as the shadow alone (%ld)", layouts[l], mode == 2 ? "poison" : "on", writes);
            CHECK(in_place == (l == 0), "%s: the classifier read the staged logits: %ld", layouts[l], in_place);
            CHECK(!memcmp(ref + 2 * HN * HV, got + 2 * HN * HV, sizeof(float) * (NOUT - 2 * HN * HV)),
                  "%s, %s: dx, dw and the loss the same bits as from fp32 dlogits", layouts[l], mode == 2 ? "poison" : "on");
            CHECK(DEV(e, sync, err, sizeof err) == 0, "%s: %s", layouts[l], err);
            device_close(&d);
            device_close(&e);
        }
}
static void test_aligned_vocabulary_products(void) {
    enum { NOUT = 2 * HN * HV + HN * HD + HV * HD + 1 };
    static float xh[HN * HD], wh[HV * HD], a[NOUT], b[NOUT], c[NOUT];
    uint32_t th[HN];
    head_inputs(xh, wh, th);
    char err[256];
    /* aligned (the default), staging even this small product; the shadows checked on the device */
    setenv("FT_BF16_SHADOW_CHECK", "1", 1);
    setenv("FT_CUDA_STAGE_MIN", "0", 1);
    device_t *d = open_cuda(PRECISION_BF16, err, sizeof err);
    unsetenv("FT_CUDA_STAGE_MIN");
    if (!d) { unsetenv("FT_BF16_SHADOW_CHECK"); CHECK(0, "open: %s", err); return; }
    head_bf16(d, a, xh, wh, th, 1);
    long staged = 0, padded = 0, extents = 0, in_place = 0;
    device_cuda_aligned_counts(d, &staged, &padded, &extents, &in_place);
    CHECK(staged == 1, "the logits' product ran staged (%ld staged products)", staged);
    CHECK(padded == 2, "both gradient products read dlogits from the padded shadow (%ld reads)", padded);
    CHECK(extents == 2, "the logits (m) and the input gradient (k) ran with V padded to 64 (%ld products)", extents);
    CHECK(in_place == 0, "logits downloaded: the staged result was copied out before the classifier (%ld)", in_place);
    /* the classifier right after the product: it reads the staging buffer, the copy never runs */
    memcpy(c, a, sizeof(float) * HN * HV);
    head_bf16(d, c, xh, wh, th, 0);
    device_cuda_aligned_counts(d, &staged, &padded, &extents, &in_place);
    CHECK(staged == 2 && in_place == 1, "the classifier read the staged logits in place (%ld staged, %ld)", staged, in_place);
    CHECK(!memcmp(a, c, sizeof a), "the same results with the classifier reading the staged logits");
    /* an upload into a staged result lands after the result's copy, not under it */
    {
        float *x = DEV(d, alloc, sizeof xh), *w = DEV(d, alloc, sizeof wh), *z = DEV(d, alloc, sizeof(float) * HN * HV);
        float row[HV], back[HV];
        for (int i = 0; i < HV; i++) row[i] = 1000.0f + (float)i;
        DEV(d, upload, x, xh, sizeof xh);
        DEV(d, upload, w, wh, sizeof wh);
        DEV(d, linear_forward, z, x, w, HN, HD, HV);
        DEV(d, upload, z + 3 * HV, row, sizeof row);
        DEV(d, download, back, z + 3 * HV, sizeof back);
        CHECK(!memcmp(row, back, sizeof row), "a row uploaded over the staged logits reads back as uploaded");
        DEV(d, download, back, z + 2 * HV, sizeof back);
        CHECK(!memcmp(a + 2 * HV, back, sizeof back), "the row before it is the product's");
        DEV(d, free, x), DEV(d, free, w), DEV(d, free, z);
    }
    CHECK(DEV(d, sync, err, sizeof err) == 0, "the padded shadow is dlogits' rounding: %s", err);
    device_close(&d);
    /* unaligned, as before the change */
    setenv("FT_CUDA_ALIGN", "0", 1);
    d = open_cuda(PRECISION_BF16, err, sizeof err);
    unsetenv("FT_CUDA_ALIGN");
    unsetenv("FT_BF16_SHADOW_CHECK");
    if (!d) { CHECK(0, "open: %s", err); return; }
    head_bf16(d, b, xh, wh, th, 1);
    device_cuda_aligned_counts(d, &staged, &padded, &extents, &in_place);
    CHECK(staged == 0 && padded == 0 && extents == 0, "FT_CUDA_ALIGN=0: nothing staged or padded (%ld, %ld, %ld)", staged,
          padded, extents);
    CHECK(DEV(d, sync, err, sizeof err) == 0, "unaligned run: %s", err);
    device_close(&d);
    CHECK(!memcmp(a, b, sizeof a), "logits, dlogits, dx, dw and the loss: the same bits aligned and not");
}

/* the classifier's loss and count and the norm's sum of squares, twice each (a ticket left
 * nonzero would show in the second), with and without a mask; dz's bits into out */
enum { FN = 700, FV = 37, FT = 3 };
static void finish_case(device_t *d, double *res, float *dzh) {
    float zh[FN * FV];
    uint32_t th[FN];
    uint8_t mh[FN];
    for (int i = 0; i < FN * FV; i++) zh[i] = (float)((i * 37) % 101 - 50) / 13.0f;
    for (int i = 0; i < FN; i++) th[i] = (uint32_t)(i * 7 % FV), mh[i] = i % 3 != 1;
    float *z = DEV(d, alloc, sizeof zh), *lse = DEV(d, alloc, sizeof(float) * FN);
    uint32_t *t = DEV(d, alloc, sizeof th);
    uint8_t *m = DEV(d, alloc, sizeof mh);
    DEV(d, upload, t, th, sizeof th);
    DEV(d, upload, m, mh, sizeof mh);
    for (int k = 0; k < 4; k++) {
        DEV(d, upload, z, zh, sizeof zh);
        int count = -1;
        res[2 * k] = DEV(d, crossentropy_forward, z, lse, &count, z, t, k % 2 ? m : NULL, FN, FV, 1.0f);
        res[2 * k + 1] = count;
        DEV(d, download, dzh + (size_t)k * FN * FV, z, sizeof zh);
    }
    /* 3 tensors of 120k, 4097 and 9000 elements: 33 chunks, 5 blocks of k_sumsq_chunks */
    const size_t n[FT] = {120000, 4097, 9000};
    float *x[FT];
    for (int i = 0; i < FT; i++) {
        float *h = malloc(sizeof(float) * n[i]);
        for (size_t j = 0; j < n[i]; j++) h[j] = (float)((j * 53 + i) % 89) / 61.0f - 0.7f;
        x[i] = DEV(d, alloc, sizeof(float) * n[i]);
        DEV(d, upload, x[i], h, sizeof(float) * n[i]);
        free(h);
    }
    res[8] = DEV(d, sumsq_multi, (const float *const *)x, n, FT);
    res[9] = DEV(d, sumsq_multi, (const float *const *)x, n, FT);
    res[10] = DEV(d, sumsq, x[1], n[1]);
    for (int i = 0; i < FT; i++) DEV(d, free, x[i]);
    DEV(d, free, z), DEV(d, free, lse), DEV(d, free, t), DEV(d, free, m);
}
/* a: opened with FT_CUDA_FINISH=kernels (read at open: the finishing kernels launched), b: without
 * (finished in the kernels before them); -1 (a failed check) when either does not open */
static int open_finish_pair(device_t **a, device_t **b) {
    char err[256];
    setenv("FT_CUDA_FINISH", "kernels", 1);
    *a = open_cuda(PRECISION_FP32, err, sizeof err);
    unsetenv("FT_CUDA_FINISH");
    if (!*a) { CHECK(0, "open: %s", err); return -1; }
    *b = open_cuda(PRECISION_FP32, err, sizeof err);
    if (!*b) { CHECK(0, "open: %s", err); device_close(a); return -1; }
    return 0;
}
/* The last block's finish gives the finishing kernels' bits (FT_CUDA_FINISH=kernels, read at open) */
static void test_finish_in_last_block(void) {
    char err[256];
    device_t *a, *b;
    if (open_finish_pair(&a, &b)) return;
    double ra[11], rb[11];
    float *da = malloc(sizeof(float) * 4 * FN * FV), *db = malloc(sizeof(float) * 4 * FN * FV);
    finish_case(a, ra, da);
    finish_case(b, rb, db);
    const char *what[11] = {"loss", "count", "masked loss", "masked count", "loss again", "count again",
                            "masked loss again", "masked count again", "sumsq_multi", "sumsq_multi again", "sumsq"};
    for (int i = 0; i < 11; i++)
        CHECK(!memcmp(&ra[i], &rb[i], sizeof ra[i]), "%s: %.17g (finishing kernels) vs %.17g (last block)", what[i], ra[i], rb[i]);
    CHECK(ra[1] == FN && ra[3] == FN - FN / 3, "the counts: %g, %g masked", ra[1], ra[3]);
    CHECK(ra[0] == ra[4] && ra[2] == ra[6] && ra[8] == ra[9], "the same loss and norm when repeated");
    CHECK(!memcmp(da, db, sizeof(float) * 4 * FN * FV), "dlogits: the same bits");
    CHECK(DEV(a, sync, err, sizeof err) == 0 && DEV(b, sync, err, sizeof err) == 0, "no fault: %s", err);
    free(da), free(db);
    device_close(&a);
    device_close(&b);
}
/* an attention case's device buffers: q, k, v, dout uploaded from h (nq, nk, nk, nq floats in turn) */
typedef struct {
    float *q, *k, *v, *dout, *out, *lse, *dq, *dk, *dv;
} att_bufs_t;
static att_bufs_t att_bufs(device_t *d, const float *h, size_t nq, size_t nk, size_t nl) {
    att_bufs_t a;
    float **nq_[] = {&a.q, &a.dout, &a.out, &a.dq}, **nk_[] = {&a.k, &a.v, &a.dk, &a.dv};
    for (int i = 0; i < 4; i++) *nq_[i] = DEV(d, alloc, sizeof(float) * nq), *nk_[i] = DEV(d, alloc, sizeof(float) * nk);
    a.lse = DEV(d, alloc, sizeof(float) * nl);
    DEV(d, upload, a.q, h, sizeof(float) * nq);
    DEV(d, upload, a.k, h + nq, sizeof(float) * nk);
    DEV(d, upload, a.v, h + nq + nk, sizeof(float) * nk);
    DEV(d, upload, a.dout, h + nq + 2 * nk, sizeof(float) * nq);
    return a;
}
static void att_bufs_free(device_t *d, att_bufs_t *a) {
    float *p[] = {a->q, a->k, a->v, a->dout, a->out, a->lse, a->dq, a->dk, a->dv};
    for (int i = 0; i < 9; i++) DEV(d, free, p[i]);
}
/* zeroed gradients, then attention_window_forward and _backward (causal) on a's buffers */
static void att_fwd_bwd(device_t *d, const att_bufs_t *a, int B, int Tq, int Tk, int H, int Hkv, int hd, int window) {
    const size_t nq = (size_t)B * Tq * H * hd, nk = (size_t)B * Tk * Hkv * hd;
    DEV(d, zero, a->dq, sizeof(float) * nq);
    DEV(d, zero, a->dk, sizeof(float) * nk);
    DEV(d, zero, a->dv, sizeof(float) * nk);
    DEV(d, attention_window_forward, a->out, a->lse, a->q, a->k, a->v, B, Tq, Tk, H, Hkv, hd, 1, window);
    DEV(d, attention_window_backward, a->dq, a->dk, a->dv, a->dout, a->out, a->lse, a->q, a->k, a->v, B, Tq, Tk, H, Hkv,
        hd, 1, window);
}
/* Attention in bf16 (its tiles split between two warps at hd 32 and 64, the halves' sums added in
 * shared memory: attention.cuh ATT_*_SPLIT) twice in a row -- the emulator's blocks and threads
 * run in another random order each launch -- over many blocks: out, lse, dq, dk, dv the same bits.
 * Causal with a window, grouped-query, T not a multiple of 64, and Tq < Tk. */
enum { AB = 2, AH = 4, AHKV = 2, AQ = 77, AK = 141, AMAXT = 300, AMAXD = 64 };
static void attention_repeat_case(device_t *d, int hd, int Tq, int Tk, int window, float *res /* 2 x 5 parts */) {
    const size_t nq = (size_t)AB * Tq * AH * hd, nk = (size_t)AB * Tk * AHKV * hd, nl = (size_t)AB * AH * Tq;
    float *h = malloc(sizeof(float) * (nq + 2 * nk + nq));
    for (size_t i = 0; i < nq + 2 * nk + nq; i++) h[i] = (float)((int)(i * 37 % 101) - 50) / 31.0f;
    att_bufs_t a = att_bufs(d, h, nq, nk, nl);
    const size_t part = (size_t)AB * AMAXT * AH * AMAXD; /* room for the largest result */
    for (int rep = 0; rep < 2; rep++) {
        float *r = res + rep * 5 * part;
        att_fwd_bwd(d, &a, AB, Tq, Tk, AH, AHKV, hd, window);
        DEV(d, download, r, a.out, sizeof(float) * nq);
        DEV(d, download, r + part, a.lse, sizeof(float) * nl);
        DEV(d, download, r + 2 * part, a.dq, sizeof(float) * nq);
        DEV(d, download, r + 3 * part, a.dk, sizeof(float) * nk);
        DEV(d, download, r + 4 * part, a.dv, sizeof(float) * nk);
    }
    free(h);
    att_bufs_free(d, &a);
}
/* the block size of the last k_att_fwd<64,bf16> launch */
static unsigned fwd64_threads;
static void watch_fwd64(const emu_launch_info_t *l, int end, void *user) {
    (void)user;
    if (!end && !strcmp(l->kernel, "k_att_fwd<64,bf16>")) fwd64_threads = l->block[0] * l->block[1] * l->block[2];
}
static void test_attention_split_repeats(void) {
    char err[256];
    device_t *d = open_cuda(PRECISION_BF16, err, sizeof err);
    CHECK(d != NULL, "open: %s", d ? d->name : err);
    if (!d) return;
    const size_t part = (size_t)AB * AMAXT * AH * AMAXD;
    float *res = calloc(10 * part, sizeof(float));
    /* the last: 3 of the bf16 forward's wide blocks (ATT_FWD_WIDE: 128 queries, 3 warps a tile
     * per 32, their softmax states merged in shared memory), the last one's last warps idle */
    const struct { int hd, Tq, Tk, window; } cases[] = {{64, AQ, AQ, 40}, {64, AQ, AK, 0}, {32, AK, AK, 70}, {64, AMAXT, AMAXT, 0}};
    const char *parts[5] = {"out", "lse", "dq", "dk", "dv"};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        memset(res, 0, sizeof(float) * 10 * part);
        emu_set_launch_hook(watch_fwd64, NULL);
        fwd64_threads = 0;
        attention_repeat_case(d, cases[c].hd, cases[c].Tq, cases[c].Tk, cases[c].window, res);
        emu_set_launch_hook(NULL, NULL);
        if (cases[c].hd == 64)
            CHECK(fwd64_threads == 384, "hd 64: the forward's wide blocks ran (ATT_FWD_WIDE: 384 threads, got %u)", fwd64_threads);
        for (int i = 0; i < 5; i++)
            CHECK(!memcmp(res + i * part, res + (5 + i) * part, sizeof(float) * part),
                  "hd %d Tq %d Tk %d window %d: %s the same bits twice", cases[c].hd, cases[c].Tq, cases[c].Tk,
                  cases[c].window, parts[i]);
        float m = 0;
        for (size_t i = 2 * part; i < 5 * part; i++) m = fmaxf(m, fabsf(res[i]));
        CHECK(m > 0 && isfinite(m), "hd %d: gradients computed (max |g| %g)", cases[c].hd, m);
    }
    CHECK(DEV(d, sync, err, sizeof err) == 0, "no fault: %s", err);
    free(res);
    device_close(&d);
}
long device_cuda_att_ds_runs(const device_t *d);

/* dQ from the dK/dV pass's stored dS (attention.cuh ATT_DQ_FROM_DS: bf16, hd 64, causal, Tq = Tk,
 * no window that cuts): attention_window_backward's dq, dk, dv and attention_backward_qkv's fused
 * gradient (dq rotated back into it, with its bf16 shadow) over T = 141 (a short last tile),
 * grouped-query, twice each (the emulator's blocks in another order each launch). Against the same
 * device with the path off ($FT_CUDA_ATT_DQ_DS=0: k_att_bwd_dq recomputes dS) and the CPU device
 * (fp32, test_device_compare's bf16 tolerance: |a - b| <= 2e-2 + 3e-2 |a|); a window that cuts
 * takes the old kernel on the same device. */
enum { DB = 2, DH = 4, DHKV = 2, DT = 141, DHD = 64 };
enum { DNQ = DB * DT * DH * DHD, DNK = DB * DT * DHKV * DHD, DLD = (DH + 2 * DHKV) * DHD, DNQKV = DB * DT * DLD };
/* results: dq, dk, dv (window backward), then dqkv (the fused one) */
static void ds_case(device_t *d, int window, const float *h, float *res) {
    const size_t nl = (size_t)DB * DH * DT, nt = (size_t)DT * (DHD / 2);
    att_bufs_t a = att_bufs(d, h, DNQ, DNK, nl);
    float *dqkv = DEV(d, alloc, sizeof(float) * DNQKV), *cs = DEV(d, alloc, sizeof(float) * nt), *sn = DEV(d, alloc, sizeof(float) * nt);
    float *tab = malloc(sizeof(float) * 2 * nt);
    for (size_t i = 0; i < nt; i++) tab[i] = cosf(0.01f * (float)i), tab[nt + i] = sinf(0.01f * (float)i);
    DEV(d, upload, cs, tab, sizeof(float) * nt);
    DEV(d, upload, sn, tab + nt, sizeof(float) * nt);
    free(tab);
    att_fwd_bwd(d, &a, DB, DT, DT, DH, DHKV, DHD, window);
    DEV(d, download, res, a.dq, sizeof(float) * DNQ);
    DEV(d, download, res + DNQ, a.dk, sizeof(float) * DNK);
    DEV(d, download, res + DNQ + DNK, a.dv, sizeof(float) * DNK);
    DEV(d, attention_backward_qkv, dqkv, a.dq, a.dk, a.dv, a.dout, a.out, a.lse, a.q, a.k, a.v, cs, sn, DB, DT, DH, DHKV, DHD, 1, window, 0);
    DEV(d, download, res + DNQ + 2 * DNK, dqkv, sizeof(float) * DNQKV);
    att_bufs_free(d, &a);
    DEV(d, free, dqkv), DEV(d, free, cs), DEV(d, free, sn);
}
/* elements of a (n) not within |a - b| <= atol + rtol |a| of b, and the largest |a - b| */
static size_t ds_far(const float *a, const float *b, size_t n, double atol, double rtol, double *worst) {
    size_t bad = 0;
    *worst = 0;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)a[i] - b[i]);
        if (!(e <= atol + rtol * fabs((double)a[i]))) bad++;
        if (e > *worst || e != e) *worst = e;
    }
    return bad;
}
static void test_attention_dq_from_ds(void) {
    char err[256];
    device_t *d = open_cuda(PRECISION_BF16, err, sizeof err), *cpu = NULL;
    setenv("FT_CUDA_ATT_DQ_DS", "0", 1); /* read at open */
    device_t *off = open_cuda(PRECISION_BF16, err, sizeof err);
    unsetenv("FT_CUDA_ATT_DQ_DS");
    CHECK(d && off && device_open(&cpu, "cpu", PRECISION_FP32, err, sizeof err) == 0, "open: %s", err);
    if (!d || !off || !cpu) {
        if (d) device_close(&d);
        if (off) device_close(&off);
        if (cpu) device_close(&cpu);
        return;
    }
    const size_t nin = 2 * (size_t)DNQ + 2 * DNK, nres = (size_t)DNQ + 2 * DNK + DNQKV;
    float *h = malloc(sizeof(float) * nin), *r = malloc(sizeof(float) * 4 * nres);
    for (size_t i = 0; i < nin; i++) h[i] = (float)((int)(i * 37 % 101) - 50) / 31.0f;
    const char *parts[4] = {"dq", "dk", "dv", "dqkv"};
    const size_t off_[4] = {0, DNQ, DNQ + DNK, DNQ + 2 * DNK}, len[4] = {DNQ, DNK, DNK, DNQKV};
    for (int c = 0; c < 2; c++) {
        const int window = c ? 40 : 0; /* 40 cuts: the old dQ kernel on both devices */
        const long runs0 = device_cuda_att_ds_runs(d);
        ds_case(d, window, h, r);
        ds_case(d, window, h, r + nres);
        const long runs = device_cuda_att_ds_runs(d) - runs0;
        ds_case(off, window, h, r + 2 * nres);
        ds_case(cpu, window, h, r + 3 * nres);
        CHECK(runs == (c ? 0 : 4), "window %d: dQ from dS taken %ld times of 4 (expected %d)", window, runs, c ? 0 : 4);
        CHECK(device_cuda_att_ds_runs(off) == 0, "$FT_CUDA_ATT_DQ_DS=0: never taken");
        for (int i = 0; i < 4; i++) {
            CHECK(!memcmp(r + off_[i], r + nres + off_[i], sizeof(float) * len[i]), "window %d: %s the same bits twice",
                  window, parts[i]);
            double wo, wc;
            const size_t bo = ds_far(r + 2 * nres + off_[i], r + off_[i], len[i], 2e-2, 3e-2, &wo);
            const size_t bc = ds_far(r + 3 * nres + off_[i], r + off_[i], len[i], 2e-2, 3e-2, &wc);
            CHECK(bo == 0 && bc == 0, "window %d: %s: %zu (path off) and %zu (CPU fp32) of %zu elements outside bf16's tolerance; largest differences %g, %g",
                  window, parts[i], bo, bc, len[i], wo, wc);
            if (c == 0) fprintf(stderr, "  window 0 %s: largest |difference| %.3g from the path off, %.3g from the CPU's fp32\n", parts[i], wo, wc);
            /* dK and dV: the same products whether dS is stored or not */
            if (i == 1 || i == 2 || c == 1)
                CHECK(!memcmp(r + 2 * nres + off_[i], r + off_[i], sizeof(float) * len[i]),
                      "window %d: %s the same bits with the path on and off", window, parts[i]);
        }
        float m = 0;
        for (size_t i = 0; i < nres; i++) m = fmaxf(m, fabsf(r[i]));
        CHECK(m > 0.1f && isfinite(m), "window %d: gradients computed (max |g| %g)", window, m);
    }
    CHECK(DEV(d, sync, err, sizeof err) == 0 && DEV(off, sync, err, sizeof err) == 0, "no fault: %s", err);
    free(h), free(r);
    device_close(&d), device_close(&off), device_close(&cpu);
}
/* The fused rows' gradient marked products-only (device.h products_only; llama_block marks it
 * before attention_backward_qkv): its bf16 shadow alone is written -- by the attention kernels'
 * join store (attention.cuh att_join_t only16), with dQ from dS and with the recomputing dQ pass
 * ($FT_CUDA_ATT_DQ_DS=0), and by the join pass where the kernels cannot store it (hd 48) -- and
 * the q|k|v projection's backward products read it: dx and dw the same bits as from the shadow
 * written beside the fp32 rows (the hint off), the skipped fp32 rows NaN when poisoned. T 141:
 * several key and query blocks, a short last one. out: dqkv's fp32 rows, dx, dw. */
enum { QO_D = 40 };
static int qkv_only_run(const char *mode, int dq_ds, int hd, float *out, long *writes) {
    enum { B = 2, H = 4, HKV = 2, T = 141 };
    const size_t N = (size_t)B * T, nq = N * H * hd, nk = N * HKV * hd, ld = (size_t)(H + 2 * HKV) * hd;
    const size_t nl = (size_t)B * H * T, nt = (size_t)T * (hd / 2);
    setenv("FT_BF16_SHADOW_ONLY", mode, 1);
    if (!dq_ds) setenv("FT_CUDA_ATT_DQ_DS", "0", 1);
    char err[256];
    device_t *d = open_cuda(PRECISION_BF16, err, sizeof err);
    unsetenv("FT_BF16_SHADOW_ONLY"), unsetenv("FT_CUDA_ATT_DQ_DS");
    if (!d) { CHECK(0, "open: %s", err); return -1; }
    const size_t nin = 2 * nq + 2 * nk + ld * QO_D + N * QO_D;
    float *h = malloc(sizeof(float) * (nin + 2 * nt));
    for (size_t i = 0; i < nin; i++) h[i] = (float)((int)(i * 37 % 101) - 50) / 31.0f;
    for (size_t i = 0; i < nt; i++) h[nin + i] = cosf(0.01f * (float)i), h[nin + nt + i] = sinf(0.01f * (float)i);
    att_bufs_t a = att_bufs(d, h, nq, nk, nl);
    float *dqkv = DEV(d, alloc, sizeof(float) * N * ld), *w = DEV(d, alloc, sizeof(float) * ld * QO_D);
    float *x = DEV(d, alloc, sizeof(float) * N * QO_D), *dx = DEV(d, alloc, sizeof(float) * N * QO_D);
    float *dw = DEV(d, alloc, sizeof(float) * ld * QO_D), *cs = DEV(d, alloc, sizeof(float) * nt);
    float *sn = DEV(d, alloc, sizeof(float) * nt);
    DEV(d, upload, w, h + 2 * nq + 2 * nk, sizeof(float) * ld * QO_D);
    DEV(d, upload, x, h + 2 * nq + 2 * nk + ld * QO_D, sizeof(float) * N * QO_D);
    DEV(d, upload, cs, h + nin, sizeof(float) * nt);
    DEV(d, upload, sn, h + nin + nt, sizeof(float) * nt);
    DEV(d, attention_window_forward, a.out, a.lse, a.q, a.k, a.v, B, T, T, H, HKV, hd, 1, 0);
    dev_products_only(d, dqkv, N * ld);
    const long w0 = device_cuda_only_writes(d);
    DEV(d, attention_backward_qkv, dqkv, a.dq, a.dk, a.dv, a.dout, a.out, a.lse, a.q, a.k, a.v, cs, sn, B, T, H, HKV, hd,
        1, 0, 0);
    *writes = device_cuda_only_writes(d) - w0;
    /* dx (N, D) = dqkv w, dw (ld, D) = dqkv^T x: the q|k|v projection's backward */
    DEV(d, linear_backward_set, dx, dw, dqkv, x, w, (int)N, QO_D, (int)ld);
    DEV(d, download, out, dqkv, sizeof(float) * N * ld);
    DEV(d, download, out + N * ld, dx, sizeof(float) * N * QO_D);
    DEV(d, download, out + N * ld + N * QO_D, dw, sizeof(float) * ld * QO_D);
    const int rc = DEV(d, sync, err, sizeof err);
    CHECK(rc == 0, "hd %d, FT_BF16_SHADOW_ONLY=%s: %s", hd, mode, rc ? err : "");
    att_bufs_free(d, &a);
    float *bufs[] = {dqkv, w, x, dx, dw, cs, sn};
    for (int i = 0; i < 7; i++) DEV(d, free, bufs[i]);
    free(h);
    device_close(&d);
    return rc;
}
static void test_attention_qkv_products_only(void) {
    const struct { int hd, dq_ds; const char *path; } cases[] = {
        {64, 1, "dQ from dS"}, {64, 0, "the recomputing dQ pass"}, {48, 1, "the join pass"}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int hd = cases[c].hd;
        const size_t nrows = (size_t)2 * 141 * 8 * hd, n = nrows + (size_t)2 * 141 * QO_D + (size_t)8 * hd * QO_D;
        float *off = malloc(sizeof(float) * n), *on = malloc(sizeof(float) * n), *p = malloc(sizeof(float) * n);
        long woff, won, wp;
        if (!qkv_only_run("0", cases[c].dq_ds, hd, off, &woff) && !qkv_only_run("1", cases[c].dq_ds, hd, on, &won) &&
            !qkv_only_run("poison", cases[c].dq_ds, hd, p, &wp)) {
            size_t nan = 0, nan0 = 0;
            float m = 0;
            for (size_t i = 0; i < nrows; i++) nan += p[i] != p[i], nan0 += off[i] != off[i], m = fmaxf(m, fabsf(off[i]));
            CHECK(woff == 0 && won == 1 && wp == 1, "hd %d, %s: dqkv written as its shadow alone %ld times off, %ld on, %ld poisoned (0, 1, 1)",
                  hd, cases[c].path, woff, won, wp);
            CHECK(nan == nrows && nan0 == 0 && m > 0.1f, "hd %d, %s: the skipped fp32 rows NaN when poisoned (%zu of %zu), written when off (%zu NaN, max |g| %g)",
                  hd, cases[c].path, nan, nrows, nan0, m);
            CHECK(!memcmp(on + nrows, off + nrows, sizeof(float) * (n - nrows)) &&
                      !memcmp(p + nrows, off + nrows, sizeof(float) * (n - nrows)),
                  "hd %d, %s: dx and dw the same bits from the shadow alone as from the fp32 rows' shadow", hd, cases[c].path);
        }
        free(off), free(on), free(p);
    }
}
/* qkv_split_rope in one pass (rope.cuh k_qkv_split: a thread per four pairs of 6 heads, the
 * table loaded once for them) against the three launches it replaces ($FT_CUDA_QKV_SPLIT=0: k_rope
 * for q and k, k_copy_rows for v), fp32 and bf16, hd 64 and 40 (5 column groups a head), T 141:
 * q, k, v the same bits (fp32 copies downloaded; at bf16 their shadows read by a product each),
 * with every output, with q alone and with k and v alone (a separate key input), and the decode
 * step's rows (qkv_split_rope_rows, positions given). */
static long qkv_split_launches, rope_launches;
static void count_split(const emu_launch_info_t *l, int end, void *user) {
    (void)user;
    if (end) return;
    if (!strncmp(l->kernel, "k_qkv_split", 11)) qkv_split_launches++;
    if (!strncmp(l->kernel, "k_rope", 6) || !strncmp(l->kernel, "k_copy_rows", 11)) rope_launches++;
}
enum { QS_N = 282, QS_T = 141, QS_H = 4, QS_HKV = 2, QS_M = 24 };
/* out: q, k, v (N rows each, fp32), then the products y = q wq^T, k wk^T, v wk^T (N x QS_M each) */
static void qkv_split_case(device_t *d, int hd, int which, int rows, const float *h, float *out) {
    const size_t Dq = (size_t)QS_H * hd, Dkv = (size_t)QS_HKV * hd, ld = Dq + 2 * Dkv, nt = (size_t)(QS_T + 7) * (hd / 2);
    float *qkv = DEV(d, alloc, sizeof(float) * QS_N * ld), *cs = DEV(d, alloc, sizeof(float) * nt);
    float *sn = DEV(d, alloc, sizeof(float) * nt), *w = DEV(d, alloc, sizeof(float) * QS_M * Dq);
    float *q = DEV(d, alloc, sizeof(float) * QS_N * Dq), *k = DEV(d, alloc, sizeof(float) * QS_N * Dkv);
    float *v = DEV(d, alloc, sizeof(float) * QS_N * Dkv), *y = DEV(d, alloc, sizeof(float) * QS_N * QS_M);
    int *pos = DEV(d, alloc, sizeof(int) * QS_N);
    int posh[QS_N];
    for (int i = 0; i < QS_N; i++) posh[i] = (i * 13) % (QS_T + 7);
    DEV(d, upload, qkv, h, sizeof(float) * QS_N * ld);
    DEV(d, upload, cs, h + QS_N * ld, sizeof(float) * nt);
    DEV(d, upload, sn, h + QS_N * ld + nt, sizeof(float) * nt);
    DEV(d, upload, w, h + QS_N * ld + 2 * nt, sizeof(float) * QS_M * Dq);
    DEV(d, upload, pos, posh, sizeof posh);
    DEV(d, zero, q, sizeof(float) * QS_N * Dq);
    DEV(d, zero, k, sizeof(float) * QS_N * Dkv);
    DEV(d, zero, v, sizeof(float) * QS_N * Dkv);
    float *oq = which != 2 ? q : NULL, *ok = which != 1 ? k : NULL, *ov = which != 1 ? v : NULL;
    if (rows) DEV(d, qkv_split_rope_rows, oq, ok, ov, qkv, cs, sn, QS_N, QS_H, QS_HKV, hd, pos);
    else DEV(d, qkv_split_rope, oq, ok, ov, qkv, cs, sn, QS_N, QS_T, QS_H, QS_HKV, hd, 0);
    float *o = out;
    const float *src[3] = {q, k, v};
    const size_t width[3] = {Dq, Dkv, Dkv};
    for (int i = 0; i < 3; i++) {
        DEV(d, download, o, src[i], sizeof(float) * QS_N * width[i]);
        o += QS_N * width[i];
    }
    for (int i = 0; i < 3; i++) {
        DEV(d, linear_forward, y, src[i], w, QS_N, (int)width[i], QS_M);
        DEV(d, download, o, y, sizeof(float) * QS_N * QS_M);
        o += QS_N * QS_M;
    }
    float *bufs[] = {qkv, cs, sn, w, q, k, v, y};
    for (int i = 0; i < 8; i++) DEV(d, free, bufs[i]);
    DEV(d, free, pos);
}
static void test_qkv_split_fused(void) {
    const int hds[2] = {64, 40};
    for (int pr = 0; pr < 2; pr++) {
        const precision_t prec = pr ? PRECISION_BF16 : PRECISION_FP32;
        char err[256];
        device_t *d = open_cuda(prec, err, sizeof err);
        setenv("FT_CUDA_QKV_SPLIT", "0", 1); /* read at open */
        device_t *old = d ? open_cuda(prec, err, sizeof err) : NULL;
        unsetenv("FT_CUDA_QKV_SPLIT");
        if (!d || !old) {
            CHECK(0, "open: %s", err);
            if (d) device_close(&d);
            return;
        }
        for (int c = 0; c < 2; c++) {
            const int hd = hds[c];
            const size_t ld = (size_t)(QS_H + 2 * QS_HKV) * hd, nt = (size_t)(QS_T + 7) * (hd / 2);
            const size_t nin = QS_N * ld + 2 * nt + (size_t)QS_M * QS_H * hd, nout = QS_N * ld + 3 * QS_N * QS_M;
            float *h = malloc(sizeof(float) * nin), *a = malloc(sizeof(float) * nout), *b = malloc(sizeof(float) * nout);
            for (size_t i = 0; i < nin; i++) h[i] = (float)((int)(i * 37 % 101) - 50) / 31.0f;
            for (size_t i = 0; i < nt; i++) h[QS_N * ld + i] = cosf(0.01f * (float)i), h[QS_N * ld + nt + i] = sinf(0.01f * (float)i);
            for (int which = 0; which < 3; which++)
                for (int rows = 0; rows < 2; rows++) {
                    emu_set_launch_hook(count_split, NULL);
                    qkv_split_launches = rope_launches = 0;
                    qkv_split_case(d, hd, which, rows, h, a);
                    const long fused = qkv_split_launches, fused_rope = rope_launches;
                    qkv_split_launches = rope_launches = 0;
                    qkv_split_case(old, hd, which, rows, h, b);
                    emu_set_launch_hook(NULL, NULL);
                    CHECK(fused == 1 && fused_rope == 0 && qkv_split_launches == 0 && rope_launches == (which == 0 ? 3 : which == 1 ? 1 : 2),
                          "%s hd %d outputs %d rows %d: one k_qkv_split launch (%ld, %ld k_rope/k_copy_rows), off: %ld k_rope/k_copy_rows",
                          pr ? "bf16" : "fp32", hd, which, rows, fused, fused_rope, rope_launches);
                    float m = 0;
                    for (size_t i = 0; i < nout; i++) m = fmaxf(m, fabsf(a[i]));
                    CHECK(!memcmp(a, b, sizeof(float) * nout) && m > 0.5f && isfinite(m),
                          "%s hd %d outputs %d rows %d: q, k, v and the products of them the same bits (max %g)",
                          pr ? "bf16" : "fp32", hd, which, rows, m);
                }
            free(h), free(a), free(b);
        }
        CHECK(DEV(d, sync, err, sizeof err) == 0 && DEV(old, sync, err, sizeof err) == 0, "no fault: %s", err);
        device_close(&d), device_close(&old);
    }
}
/* Attention's own shadows (device_cuda.cu attention_out_shadow, attention_dout_shadow): the
 * forward writes out's bf16 shadow beside out and k_att_rowdot dout's, where a g_to_bf16 pass
 * rounded them before. With FT_BF16_SHADOW_CHECK (each compared with a fresh rounding when its
 * kernel has written it and when a product reads it): the output projection reads out's shadow
 * and gives the bits of the product rounding out itself (out uploaded afresh); out doubled
 * through the device doubles the product (the stale shadow is not read); the gradients from
 * dout's shadow written by rowdot are those from the shadow a product made (g_to_bf16), and
 * dout doubled through the device doubles them. */
static long to_bf16_launches;
static void count_to_bf16(const emu_launch_info_t *l, int end, void *user) {
    (void)user;
    if (!end && !strcmp(l->kernel, "g_to_bf16")) to_bf16_launches++;
}
static void attention_grads(device_t *d, float *res, float *dq, float *dk, float *dv, const float *dout,
                            const float *out, const float *lse, const float *q, const float *k, const float *v, int hd,
                            size_t nq, size_t nk) {
    DEV(d, zero, dq, sizeof(float) * nq);
    DEV(d, zero, dk, sizeof(float) * nk);
    DEV(d, zero, dv, sizeof(float) * nk);
    DEV(d, attention_window_backward, dq, dk, dv, dout, out, lse, q, k, v, AB, AQ, AQ, AH, AHKV, hd, 1, 0);
    DEV(d, download, res, dq, sizeof(float) * nq);
    DEV(d, download, res + nq, dk, sizeof(float) * nk);
    DEV(d, download, res + nq + nk, dv, sizeof(float) * nk);
}
static void test_attention_shadows(void) {
    enum { HDIM = 64, DM = 40 };
    setenv("FT_BF16_SHADOW_CHECK", "1", 1); /* read at open */
    char err[256];
    device_t *d = open_cuda(PRECISION_BF16, err, sizeof err);
    unsetenv("FT_BF16_SHADOW_CHECK");
    if (!d) { CHECK(0, "open: %s", err); return; }
    const int N = AB * AQ, Dq = AH * HDIM;
    const size_t nq = (size_t)N * Dq, nk = (size_t)N * AHKV * HDIM, nl = (size_t)AB * AH * AQ, ny = (size_t)N * DM;
    float *h = malloc(sizeof(float) * (2 * nq + 2 * nk + (size_t)DM * Dq));
    for (size_t i = 0; i < 2 * nq + 2 * nk + (size_t)DM * Dq; i++) h[i] = (float)((int)(i * 37 % 101) - 50) / 31.0f;
    float *outh = malloc(sizeof(float) * nq), *y = malloc(sizeof(float) * 3 * ny), *g = malloc(sizeof(float) * 3 * (nq + 2 * nk));
    float *q = DEV(d, alloc, sizeof(float) * nq), *k = DEV(d, alloc, sizeof(float) * nk), *v = DEV(d, alloc, sizeof(float) * nk);
    float *dout = DEV(d, alloc, sizeof(float) * nq), *out = DEV(d, alloc, sizeof(float) * nq), *lse = DEV(d, alloc, sizeof(float) * nl);
    float *dq = DEV(d, alloc, sizeof(float) * nq), *dk = DEV(d, alloc, sizeof(float) * nk), *dv = DEV(d, alloc, sizeof(float) * nk);
    float *w = DEV(d, alloc, sizeof(float) * DM * Dq), *yd = DEV(d, alloc, sizeof(float) * nq);
    DEV(d, upload, q, h, sizeof(float) * nq);
    DEV(d, upload, k, h + nq, sizeof(float) * nk);
    DEV(d, upload, v, h + nq + nk, sizeof(float) * nk);
    DEV(d, upload, dout, h + nq + 2 * nk, sizeof(float) * nq);
    DEV(d, upload, w, h + 2 * nq + 2 * nk, sizeof(float) * DM * Dq);
    /* the forward's shadow, read by the output projection (q's, k's, v's and w's made first: no
     * operand is rounded by a g_to_bf16 pass after that) */
    DEV(d, attention_window_forward, out, lse, q, k, v, AB, AQ, AQ, AH, AHKV, HDIM, 1, 0);
    DEV(d, linear_forward, yd, w, w, DM, Dq, DM);
    CHECK(DEV(d, sync, err, sizeof err) == 0, "sync: %s", err);
    emu_set_launch_hook(count_to_bf16, NULL);
    to_bf16_launches = 0;
    DEV(d, attention_window_forward, out, lse, q, k, v, AB, AQ, AQ, AH, AHKV, HDIM, 1, 0);
    const long h0 = device_cuda_shadow_hits(d);
    DEV(d, linear_forward, yd, out, w, N, Dq, DM);
    CHECK(DEV(d, sync, err, sizeof err) == 0, "sync: %s", err);
    CHECK(device_cuda_shadow_hits(d) - h0 == 2 && to_bf16_launches == 0,
          "the output projection read out's and w's shadows (%ld reads), nothing rounded apart (%ld g_to_bf16)",
          device_cuda_shadow_hits(d) - h0, to_bf16_launches);
    DEV(d, download, y, yd, sizeof(float) * ny);
    DEV(d, download, outh, out, sizeof(float) * nq);
    /* again, out doubled through the device: its shadow is stale, the product rounds afresh */
    DEV(d, attention_window_forward, out, lse, q, k, v, AB, AQ, AQ, AH, AHKV, HDIM, 1, 0);
    DEV(d, scale_inplace, out, 2.0f, nq);
    DEV(d, linear_forward, yd, out, w, N, Dq, DM);
    DEV(d, download, y + ny, yd, sizeof(float) * ny);
    /* out uploaded (no shadow): the product's own rounding (g_to_bf16) */
    DEV(d, upload, out, outh, sizeof(float) * nq);
    DEV(d, linear_forward, yd, out, w, N, Dq, DM);
    DEV(d, download, y + 2 * ny, yd, sizeof(float) * ny);
    CHECK(!memcmp(y, y + 2 * ny, sizeof(float) * ny), "out's shadow gives the bits of the product's own rounding");
    int twice = 1;
    for (size_t i = 0; i < ny; i++) twice &= y[ny + i] == 2.0f * y[i];
    CHECK(twice, "out doubled through the device: the product doubles (the forward's shadow not read)");
    /* the backward: dout's shadow written by k_att_rowdot, then one a product made */
    const size_t ng = nq + 2 * nk;
    attention_grads(d, g, dq, dk, dv, dout, out, lse, q, k, v, HDIM, nq, nk);
    DEV(d, upload, dout, h + nq + 2 * nk, sizeof(float) * nq);
    DEV(d, linear_forward, yd, dout, w, N, Dq, DM); /* dout's shadow by operand_shadow (g_to_bf16) */
    const long h1 = device_cuda_shadow_hits(d);
    attention_grads(d, g + ng, dq, dk, dv, dout, out, lse, q, k, v, HDIM, nq, nk);
    CHECK(device_cuda_shadow_hits(d) - h1 == 4, "the backward read q's, k's, v's and the product's dout shadows (%ld)",
          device_cuda_shadow_hits(d) - h1);
    CHECK(!memcmp(g, g + ng, sizeof(float) * ng), "dq, dk, dv: the same bits from rowdot's dout shadow as from g_to_bf16's");
    /* dout doubled through the device: the backward's gradients double (rowdot's shadow rewritten) */
    DEV(d, scale_inplace, dout, 2.0f, nq);
    CHECK(DEV(d, sync, err, sizeof err) == 0, "sync: %s", err);
    to_bf16_launches = 0;
    attention_grads(d, g + 2 * ng, dq, dk, dv, dout, out, lse, q, k, v, HDIM, nq, nk);
    CHECK(DEV(d, sync, err, sizeof err) == 0, "sync: %s", err);
    CHECK(to_bf16_launches == 0, "dout's shadow written by k_att_rowdot (%ld g_to_bf16 launches)", to_bf16_launches);
    emu_set_launch_hook(NULL, NULL);
    twice = 1;
    float m = 0;
    for (size_t i = 0; i < ng; i++) twice &= g[2 * ng + i] == 2.0f * g[i], m = fmaxf(m, fabsf(g[i]));
    CHECK(twice && m > 0, "dout doubled through the device: dq, dk, dv double (max |g| %g)", m);
    DEV(d, scale_inplace, dout, 0.5f, nq); /* dout's shadow stale again: rowdot writes it */
    attention_grads(d, g + ng, dq, dk, dv, dout, out, lse, q, k, v, HDIM, nq, nk);
    CHECK(!memcmp(g, g + ng, sizeof(float) * ng), "dout halved back: the first gradients' bits");
    CHECK(DEV(d, sync, err, sizeof err) == 0, "every shadow written and read was its tensor's rounding: %s", err);
    free(h), free(outh), free(y), free(g);
    float *bufs[] = {q, k, v, dout, out, lse, dq, dk, dv, w, yd};
    for (int i = 0; i < 11; i++) DEV(d, free, bufs[i]);
    device_close(&d);
}
/* RMSNorm's weight gradient (vector path at D = 768, the generic reduction at D = 37) and
 * sum_rows, twice each (dw accumulates; a ticket left nonzero would show in the second), over
 * N = 1100 rows (138 partial rows, groups of 5, 28 of the 32 groups used) or N = 200 (25 partial
 * rows, groups of one: the last block adds them). Results into out. */
enum { CN = 1100, CD = 768, CS = 37 };
static void colred_case(device_t *d, int N, float *out /* 2 CD + 2 CS + 2 CD + 2 CS */) {
    float *h = malloc(sizeof(float) * CN * CD * 2);
    for (size_t i = 0; i < (size_t)CN * CD * 2; i++) h[i] = (float)((int)(i * 29 % 97) - 48) / 17.0f;
    float *dy = DEV(d, alloc, sizeof(float) * CN * CD), *x = DEV(d, alloc, sizeof(float) * CN * CD);
    float *w = DEV(d, alloc, sizeof(float) * CD), *r = DEV(d, alloc, sizeof(float) * CN);
    float *dx = DEV(d, alloc, sizeof(float) * CN * CD), *dw = DEV(d, alloc, sizeof(float) * CD);
    float *s = DEV(d, alloc, sizeof(float) * CD);
    DEV(d, upload, dy, h, sizeof(float) * CN * CD);
    DEV(d, upload, x, h + (size_t)CN * CD, sizeof(float) * CN * CD);
    DEV(d, upload, w, h + 5, sizeof(float) * CD);
    for (int i = 0; i < CN; i++) h[i] = 0.5f + (float)(i % 13) / 8.0f;
    DEV(d, upload, r, h, sizeof(float) * CN);
    size_t o = 0;
    for (int k = 0; k < 2; k++) {
        const int D = k ? CS : CD;
        memset(h, 0, sizeof(float) * CD);
        DEV(d, upload, dw, h, sizeof(float) * D);
        DEV(d, upload, s, h, sizeof(float) * D);
        for (int rep = 0; rep < 2; rep++) {
            DEV(d, upload, dx, h, sizeof(float) * CN * D);
            DEV(d, rmsnorm_backward, dx, dw, dy, x, w, r, N, D);
            DEV(d, download, out + o, dw, sizeof(float) * D), o += D;
            DEV(d, sum_rows, s, x, N, D);
            DEV(d, download, out + o, s, sizeof(float) * D), o += D;
        }
    }
    free(h);
    DEV(d, free, dy), DEV(d, free, x), DEV(d, free, w), DEV(d, free, r), DEV(d, free, dx), DEV(d, free, dw),
        DEV(d, free, s);
}
/* The column reductions' folded finish gives k_colred_finish's bits (FT_CUDA_FINISH=kernels) */
static void test_colred_finish_folded(void) {
    char err[256];
    device_t *a, *b;
    if (open_finish_pair(&a, &b)) return;
    enum { NO = 4 * CD + 4 * CS };
    float *oa = calloc(2 * NO, sizeof(float)), *ob = calloc(2 * NO, sizeof(float));
    colred_case(a, CN, oa);
    colred_case(b, CN, ob);
    colred_case(a, 200, oa + NO);
    colred_case(b, 200, ob + NO);
    CHECK(!memcmp(oa, ob, sizeof(float) * NO), "dw and the row sums over 1100 rows: the same bits folded and launched");
    CHECK(!memcmp(oa + NO, ob + NO, sizeof(float) * NO), "over 200 rows: the same bits folded and launched");
    int nonzero = 0;
    for (int i = 0; i < NO; i++) nonzero += oa[i] != 0.0f;
    CHECK(nonzero > NO / 2, "the case computes something (%d of %d nonzero)", nonzero, NO);
    CHECK(oa[0] != oa[CD + CD], "dw accumulates over the two calls (%g, %g)", oa[0], oa[2 * CD]);
    CHECK(DEV(a, sync, err, sizeof err) == 0 && DEV(b, sync, err, sizeof err) == 0, "no fault: %s", err);
    free(oa), free(ob);
    device_close(&a);
    device_close(&b);
}
long device_cuda_zero_claims(const device_t *d);

/* Deferred zeroing (device_cuda.cu, FT_CUDA_LAZY_ZERO=mode, every zero() deferred): a gradient
 * buffer of three tensors zeroed, then a Linear's weight gradient written by linear_backward_set
 * (over deferred zeros: beta 0) and accumulated by linear_backward, a norm's weight gradient
 * written by rmsnorm_backward (over deferred zeros: not read), the third tensor never written
 * until the norm and AdamW read it (their lists: every deferred range written); and a buffer z
 * zeroed and read by add_inplace and download (the arguments' scan). out: z, the gradients, y,
 * the parameters after the update and the norm, downloaded. */
enum { LZ_N = 24, LZ_IN = 40, LZ_OUT = 36, LZ_U = 20, LZ_G = LZ_OUT * LZ_IN + LZ_IN + LZ_U };
static int lazy_zero_run(const char *mode, precision_t prec, float *out, long *claims) {
    setenv("FT_CUDA_LAZY_ZERO", mode, 1);
    setenv("FT_CUDA_LAZY_ZERO_MIN", "0", 1);
    char err[256];
    device_t *d = open_cuda(prec, err, sizeof err);
    unsetenv("FT_CUDA_LAZY_ZERO"), unsetenv("FT_CUDA_LAZY_ZERO_MIN");
    if (!d) { CHECK(0, "open: %s", err); return -1; }
    const int N = LZ_N, IN = LZ_IN, OUT = LZ_OUT;
    float xh[LZ_N * LZ_IN], dyh[LZ_N * LZ_OUT], wh[LZ_OUT * LZ_IN], ph[LZ_G];
    for (int i = 0; i < N * IN; i++) xh[i] = (float)((i * 37) % 101 - 50) / 47.0f;
    for (int i = 0; i < N * OUT; i++) dyh[i] = (float)((i * 29) % 83 - 41) / 53.0f;
    for (int i = 0; i < OUT * IN; i++) wh[i] = (float)((i * 53) % 89 - 44) / 61.0f;
    for (int i = 0; i < LZ_G; i++) ph[i] = (float)((i * 17) % 31 - 15) / 29.0f;
    float *x = DEV(d, alloc, sizeof xh), *dy = DEV(d, alloc, sizeof dyh), *w = DEV(d, alloc, sizeof wh);
    float *dx = DEV(d, alloc, sizeof xh), *xn = DEV(d, alloc, sizeof xh), *rstd = DEV(d, alloc, sizeof(float) * N);
    float *y = DEV(d, alloc, sizeof(float) * LZ_U), *g = DEV(d, alloc, sizeof ph), *p = DEV(d, alloc, sizeof ph);
    float *m = DEV(d, alloc, sizeof ph), *v = DEV(d, alloc, sizeof ph), *z = DEV(d, alloc, sizeof(float) * LZ_U);
    float *gw = g, *gn = g + OUT * IN, *gu = gn + IN;
    DEV(d, upload, x, xh, sizeof xh), DEV(d, upload, dy, dyh, sizeof dyh), DEV(d, upload, w, wh, sizeof wh);
    DEV(d, upload, p, ph, sizeof ph), DEV(d, upload, y, ph, sizeof(float) * LZ_U);
    const long c0 = device_cuda_zero_claims(d);
    DEV(d, zero, g, sizeof ph);
    DEV(d, linear_backward_set, dx, gw, dy, x, w, N, IN, OUT);
    DEV(d, linear_backward, dx, gw, dy, x, w, N, IN, OUT);
    DEV(d, rmsnorm_forward, xn, rstd, x, w, N, IN, 1e-5f);
    DEV(d, rmsnorm_backward, dx, gn, xn, x, w, rstd, N, IN);
    DEV(d, upload, z, ph, sizeof(float) * LZ_U);
    DEV(d, zero, z, sizeof(float) * LZ_U);
    DEV(d, add_inplace, y, z, LZ_U);
    DEV(d, download, out + LZ_G, z, sizeof(float) * LZ_U);
    const float *lst[3] = {gw, gn, gu};
    const size_t len[3] = {(size_t)OUT * IN, IN, LZ_U};
    const double ss = DEV(d, sumsq_multi, lst, len, 3);
    adamw_tensor_t t[3] = {{p, gw, m, v, len[0], 1}, {p + len[0], gn, m + len[0], v + len[0], len[1], 0},
                           {p + len[0] + len[1], gu, m + len[0] + len[1], v + len[0] + len[1], len[2], 0}};
    const adamw_scalars_t sc = {.clip = 0.5f, .decay_mul = 0.999f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                                .step_size = 0.05f, .bc2_sqrt = 1.0f};
    DEV(d, adamw_update_multi, t, 3, &sc);
    DEV(d, download, out, g, sizeof ph);
    DEV(d, download, out + LZ_G + LZ_U, y, sizeof(float) * LZ_U);
    DEV(d, download, out + LZ_G + 2 * LZ_U, p, sizeof ph);
    out[2 * LZ_G + 2 * LZ_U] = (float)ss;
    *claims = device_cuda_zero_claims(d) - c0;
    const int rc = DEV(d, sync, err, sizeof err);
    CHECK(rc == 0, "%s: %s", mode, err);
    void *all[] = {x, dy, w, dx, xn, rstd, y, g, p, m, v, z};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) DEV(d, free, all[i]);
    device_close(&d);
    return rc;
}
static void test_lazy_zero(void) {
    enum { NOUT = 2 * LZ_G + 2 * LZ_U + 1 };
    static float ref[NOUT], got[NOUT];
    for (int prec = 0; prec < 2; prec++) {
        const precision_t pr = prec ? PRECISION_BF16 : PRECISION_FP32;
        long c_ref = -1, c = -1;
        if (lazy_zero_run("0", pr, ref, &c_ref)) return;
        CHECK(c_ref == 0, "FT_CUDA_LAZY_ZERO=0: no product over deferred zeros (%ld)", c_ref);
        int zero_u = 1;
        for (int i = 0; i < LZ_U; i++) zero_u &= ref[LZ_G + i] == 0.0f && ref[LZ_OUT * LZ_IN + LZ_IN + i] == 0.0f;
        CHECK(zero_u, "the zeroed buffers never written read as zeros");
        const char *modes[] = {"1", "poison"};
        for (int k = 0; k < 2; k++) {
            memset(got, 0, sizeof got);
            if (lazy_zero_run(modes[k], pr, got, &c)) return;
            CHECK(c == 2, "%s %s: the first weight gradient and the norm's written over deferred zeros (%ld, not 2)",
                  modes[k], prec ? "bf16" : "fp32", c);
            size_t bad = 0;
            for (int i = 0; i < NOUT; i++) bad += memcmp(&got[i], &ref[i], sizeof(float)) != 0;
            CHECK(bad == 0, "%s %s: %zu of %d values differ from zeros written at once (gradients, reads, update, norm)",
                  modes[k], prec ? "bf16" : "fp32", bad, NOUT);
        }
    }
}

void device_cuda_settle(device_t *d);

/* A reader outside the device's ops (NCCL in trainer/dp_nccl.c) sees a deferred zero() only
 * after device_cuda_settle: the bytes read raw (cudaMemcpy, which the ops' scan does not see)
 * are the old values before it and zeros after it. */
static void test_settle_writes_deferred_zeros(void) {
    setenv("FT_CUDA_LAZY_ZERO", "1", 1);
    setenv("FT_CUDA_LAZY_ZERO_MIN", "0", 1);
    char err[256];
    device_t *d = open_cuda(PRECISION_FP32, err, sizeof err);
    unsetenv("FT_CUDA_LAZY_ZERO"), unsetenv("FT_CUDA_LAZY_ZERO_MIN");
    if (!d) { CHECK(0, "open: %s", err); return; }
    enum { N = 1000 };
    static float h[N], raw[N];
    for (int i = 0; i < N; i++) h[i] = 1.0f + (float)i;
    float *g = DEV(d, alloc, sizeof h);
    DEV(d, upload, g, h, sizeof h);
    DEV(d, zero, g, sizeof h);
    CHECK(DEV(d, sync, err, sizeof err) == 0, "sync: %s", err);
    cudaMemcpy(raw, g, sizeof raw, cudaMemcpyDeviceToHost);
    CHECK(raw[0] == 1.0f && raw[N - 1] == (float)N, "the zero was deferred (raw %g %g): the case tests something", raw[0], raw[N - 1]);
    device_cuda_settle(d);
    CHECK(DEV(d, sync, err, sizeof err) == 0, "sync: %s", err);
    cudaMemcpy(raw, g, sizeof raw, cudaMemcpyDeviceToHost);
    int nz = 0;
    for (int i = 0; i < N; i++) nz += raw[i] != 0.0f;
    CHECK(nz == 0, "after device_cuda_settle every byte is zero (%d of %d not)", nz, N);
    DEV(d, free, g);
    device_close(&d);
}

int main(void) {
    RUN(test_open_checks_every_call);
    RUN(test_gemm_timer_checks_events);
    RUN(test_fault_reported_once);
    RUN(test_free_counts);
    RUN(test_first_step_allocates_nothing);
    RUN(test_bf16_shadows);
    RUN(test_products_only);
    RUN(test_aligned_vocabulary_products);
    RUN(test_products_only_dlogits);
    RUN(test_finish_in_last_block);
    RUN(test_colred_finish_folded);
    RUN(test_lazy_zero);
    RUN(test_attention_split_repeats);
    RUN(test_attention_dq_from_ds);
    RUN(test_attention_shadows);
    RUN(test_attention_qkv_products_only);
    RUN(test_qkv_split_fused);
    RUN(test_settle_writes_deferred_zeros);
    return check_summary();
}
