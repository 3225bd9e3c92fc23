/* tests/device_pair.h: a buffer on two devices filled from the same host values, for the tests
 * that run one device against another (test_device_compare.c, test_device_kernels.c).
 * The including file defines, before including this:
 *     static device_t *A, *B;   the reference and the device under test
 *     static rng_t R;           the values' source */
#ifndef FT_TESTS_DEVICE_PAIR_H
#define FT_TESTS_DEVICE_PAIR_H

#include <stdint.h>
#include <stdlib.h>

typedef struct {
    size_t n, esz;
    void *host, *a, *b;
} dbuf_t;

/* n elements of esz bytes on both devices (at least one, so an empty case still has pointers) */
static dbuf_t dbuf(size_t n, size_t esz) {
    dbuf_t x = {n, esz, calloc(n ? n : 1, esz), DEV(A, alloc, (n ? n : 1) * esz), DEV(B, alloc, (n ? n : 1) * esz)};
    return x;
}
/* the host values onto both devices */
static void dbuf_put(dbuf_t *x) {
    DEV(A, upload, x->a, x->host, x->n * x->esz);
    DEV(B, upload, x->b, x->host, x->n * x->esz);
}
/* uniform in [-scale, scale) */
static dbuf_t dfloats(size_t n, float scale) {
    dbuf_t x = dbuf(n, sizeof(float));
    for (size_t i = 0; i < n; i++) ((float *)x.host)[i] = scale * (2.0f * rng_f32(&R) - 1.0f);
    dbuf_put(&x);
    return x;
}
/* integers below `below`, as uint32 (esz 4) or uint8 (esz 1) */
static dbuf_t dints(size_t n, uint32_t below, size_t esz) {
    dbuf_t x = dbuf(n, esz);
    for (size_t i = 0; i < n; i++) {
        const uint32_t v = (uint32_t)rng_below(&R, below);
        if (esz == 4) ((uint32_t *)x.host)[i] = v;
        else ((uint8_t *)x.host)[i] = (uint8_t)v;
    }
    dbuf_put(&x);
    return x;
}
static void dfree(dbuf_t *x) {
    DEV(A, free, x->a);
    DEV(B, free, x->b);
    free(x->host);
}
#define FA(x) ((float *)(x).a)
#define FB(x) ((float *)(x).b)

#endif
