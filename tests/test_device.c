/* tests/test_device.c: the device table's CPU side and what needs no GPU (model/device.h).
 *
 * - device_open: "cpu" opens; malformed specs and a missing GPU are refused with one line
 *   (which line depends on the build: without nvcc "this build has no CUDA device", with it
 *   and no GPU "no CUDA device"); bf16 opens on the CPU, tf32 (the GPU's) is refused;
 * - every entry of the CPU table is set, and an op through the table is the op;
 * - the arena lays out the same offsets when counting and when carving, 64-byte aligned;
 * - views carry their device: download/upload round-trip;
 * - a model that does not fit says what did not fit and the largest batch that would (a
 *   device whose allocations fail above a byte budget stands in for a small GPU);
 * - the memory report adds up to what the device allocated. */
#include "model/device.h"
#include "model/free.h"
#include "model/llama.h"
#include "tests/check.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void test_open(void) {
    char err[256];
    device_t *d = NULL;
    CHECK(device_open(&d, "cpu", PRECISION_FP32, err, sizeof err) == 0 && d, "cpu: %s", err);
    CHECK(d && d->kind == DEVICE_CPU && device_is_host(d) && strstr(d->name, "cpu"), "cpu device");
    device_close(&d);
    CHECK(d == NULL, "close NULLs the handle");
    const char *bad[] = {"gpu", "cuda:", "cuda:x", "cuda:-1", "cuda0", "", "cuda:99999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        CHECK(device_open(&d, bad[i], PRECISION_FP32, err, sizeof err) != 0 && !d && err[0] &&
                  !strchr(err, '\n'),
              "'%s' refused with one line: %s", bad[i], err);
    }
    /* no GPU here (or in CI): the CUDA device says so, whichever way the build went */
    err[0] = 0;
    int rc = device_open(&d, "cuda", PRECISION_FP32, err, sizeof err);
    if (rc == 0) {
        printf("(a CUDA device opened: %s; the no-GPU check does not apply)\n", d->name);
        device_close(&d);
    } else {
        CHECK(strstr(err, "no CUDA device") || strstr(err, "this build has no CUDA device"),
              "cuda without a GPU: %s", err);
    }
    CHECK(device_open(&d, "cpu", PRECISION_BF16, err, sizeof err) == 0 && d && d->precision == PRECISION_BF16,
          "bf16 on the CPU device: %s", err);
    device_close(&d);
    CHECK(device_open(&d, "cpu", PRECISION_TF32, err, sizeof err) != 0 && strstr(err, "tf32"),
          "tf32 refused by the CPU device: %s", err);
}

static void test_table_complete(void) {
    const device_t *d = device_cpu_default();
    const void *const *entry = (const void *const *)d->ops;
    const size_t n = sizeof(device_ops_t) / sizeof(void *);
    size_t missing = 0;
    for (size_t i = 0; i < n; i++) missing += entry[i] == NULL;
    CHECK(missing == 0, "%zu of %zu CPU table entries are NULL", missing, n);
    /* one op through the table equals the op */
    float a[5] = {1, 2, 3, 4, 5}, b[5] = {0.5f, -1, 2, 0, 1}, y1[5], y2[5];
    DEV(device_cpu_default(), add_forward, y1, a, b, 5);
    add_forward(y2, a, b, 5);
    CHECK(!memcmp(y1, y2, sizeof y1), "add through the table");
}

static void test_arena(void) {
    dev_arena_t ar = {0};
    float *p1 = DEV_TAKE(&ar, float, 3);
    uint8_t *p2 = DEV_TAKE(&ar, uint8_t, 5);
    double *p3 = DEV_TAKE(&ar, double, 2);
    CHECK(!p1 && !p2 && !p3, "counting returns NULL");
    size_t need = ar.used;
    char *mem = aligned_alloc(64, (need + 63) / 64 * 64);
    dev_arena_t ar2 = {mem, 0};
    float *q1 = DEV_TAKE(&ar2, float, 3);
    uint8_t *q2 = DEV_TAKE(&ar2, uint8_t, 5);
    double *q3 = DEV_TAKE(&ar2, double, 2);
    CHECK(ar2.used == need, "carving uses what counting said (%zu vs %zu)", ar2.used, need);
    CHECK((char *)q1 == mem && ((uintptr_t)q2 & 63) == 0 && ((uintptr_t)q3 & 63) == 0 &&
              (char *)q3 + 2 * sizeof(double) <= mem + need,
          "aligned, inside the allocation");
    free(mem);
}

static void test_views(void) {
    char err[256];
    model_config_t c = {.kind = MODEL_LLAMA, .vocab_size = 17, .d_model = 8, .n_layers = 1,
                        .n_heads = 2, .n_kv_heads = 1, .d_ff = 12, .max_seq = 8,
                        .rope_theta = 10000.f, .norm_eps = 1e-5f, .tied = 1};
    llama_t *m = NULL;
    CHECK(llama_create(&m, &c, 2, 4, 3, err, sizeof err) == 0, "%s", err);
    if (!m) return;
    tensor_view_t v[16];
    int n = llama_params(m, v, 16);
    CHECK(n > 0 && v[0].dev == llama_device(m) && v[0].dev == device_cpu_default(),
          "views carry the model's device");
    const int64_t k = tensor_numel(&v[1]);
    float *h = malloc(sizeof(float) * k), *h2 = malloc(sizeof(float) * k);
    for (int64_t i = 0; i < k; i++) h[i] = (float)i * 0.25f;
    tensor_view_upload(&v[1], h);
    tensor_view_download(&v[1], h2);
    CHECK(!memcmp(h, h2, sizeof(float) * k), "upload then download round-trips");
    model_memory_t mm;
    llama_memory(m, &mm);
    CHECK(mm.params == mm.grads && mm.params == sizeof(float) * (size_t)family_param_count(family_find("llama"), m),
          "parameter bytes = 4 x parameter count");
    CHECK(mm.activations == llama_activation_bytes(&c, 2, 4), "activation bytes as computed");
    free(h);
    free(h2);
    llama_destroy(&m);
}

/* A CPU device whose allocations fail beyond a budget: a small GPU, for the OOM message. */
static size_t budget, spent;
static struct { void *p; size_t n; } live[64];
static void *(*cpu_alloc)(device_t *, size_t);
static void (*cpu_free)(device_t *, void *);
static void *tight_alloc(device_t *d, size_t bytes) {
    if (spent + bytes > budget) return NULL;
    void *p = cpu_alloc(d, bytes);
    for (int i = 0; p && i < 64; i++)
        if (!live[i].p) { live[i].p = p; live[i].n = bytes; spent += bytes; break; }
    return p;
}
static void tight_free(device_t *d, void *p) {
    for (int i = 0; i < 64; i++)
        if (live[i].p == p) { spent -= live[i].n; live[i].p = NULL; }
    cpu_free(d, p);
}
static void test_out_of_memory(void) {
    char err[512];
    model_config_t c = {.kind = MODEL_LLAMA, .vocab_size = 64, .d_model = 32, .n_layers = 2,
                        .n_heads = 4, .n_kv_heads = 2, .d_ff = 48, .max_seq = 64,
                        .rope_theta = 10000.f, .norm_eps = 1e-5f, .tied = 1};
    device_t tight = *device_cpu_default();
    device_ops_t ops = *tight.ops;
    cpu_alloc = ops.alloc;
    cpu_free = ops.free;
    ops.alloc = tight_alloc;
    ops.free = tight_free;
    tight.ops = &ops;
    const int T = 64;
    llama_t *probe = NULL;
    CHECK(llama_create(&probe, &c, 1, T, 1, err, sizeof err) == 0, "%s", err);
    model_memory_t mm = {0};
    if (probe) llama_memory(probe, &mm);
    llama_destroy(&probe);
    /* room for the parameters, their gradients and exactly 5 rows of activations */
    budget = mm.params + mm.grads + llama_activation_bytes(&c, 5, T);
    spent = 0;
    llama_t *m = NULL;
    int rc = llama_create_on(&m, &tight, &c, 16, T, 1, err, sizeof err);
    CHECK(rc == LLAMA_ENOMEM && !m, "B=16 does not fit (rc %d)", rc);
    CHECK(strstr(err, "activations") && strstr(err, "B=16") && !strchr(err, '\n'),
          "one line names what did not fit: %s", err);
    CHECK(strstr(err, "the largest batch that would is B=5") != NULL, "and the batch that fits: %s", err);
    CHECK(spent == 0, "everything freed after the refusal (%zu bytes left)", spent);
    budget = mm.params + mm.grads + llama_activation_bytes(&c, 5, T);
    CHECK(llama_create_on(&m, &tight, &c, 5, T, 1, err, sizeof err) == 0, "B=5 fits: %s", err);
    llama_destroy(&m);
}

int main(void) {
    RUN(test_open);
    RUN(test_table_complete);
    RUN(test_arena);
    RUN(test_views);
    RUN(test_out_of_memory);
    return check_summary();
}
