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
 *     after the "largest batch that fits" probe had passed). */
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
    CHECK(DEV(d, sync, err, sizeof err) != 0 && strstr(err, "scale"), "the failed launch is reported: \"%s\"", err);
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

int main(void) {
    RUN(test_open_checks_every_call);
    RUN(test_gemm_timer_checks_events);
    RUN(test_fault_reported_once);
    RUN(test_free_counts);
    RUN(test_first_step_allocates_nothing);
    return check_summary();
}
