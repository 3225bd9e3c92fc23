/* tests/fixture_check.h: comparing a model against the PyTorch fixtures in tests/fixtures
 * (tests/test_llama_ref.c, test_free_ref.c, test_mixer_ref.c).
 *
 * rel_err: max|ours - ref| / max|ref| over a tensor, scale-free so one tolerance serves
 * tensors of very different magnitudes; a NaN anywhere makes it NaN (a failure).
 * ref_get: a reference tensor of exactly `want` elements, or NULL with a failed check. */
#ifndef TESTS_FIXTURE_CHECK_H
#define TESTS_FIXTURE_CHECK_H
#include <math.h>
#include <stdint.h>

#include "model/safetensors.h"
#include "tests/check.h"

static double rel_err(const float *a, const float *b, int64_t n) {
    double md = 0, mb = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= md)) md = d;   /* NaN propagates as a failure */
        if (fabs(b[i]) > mb) mb = fabs(b[i]);
    }
    return mb > 0 ? md / mb : md;
}

static const float *ref_get(st_file_t *f, const char *name, int64_t want) {
    tensor_view_t v;
    if (st_find(f, name, &v) != 0) { CHECK(0, "reference lacks %s", name); return NULL; }
    CHECK(tensor_numel(&v) == want, "%s has %lld elements, want %lld", name,
          (long long)tensor_numel(&v), (long long)want);
    return tensor_numel(&v) == want ? v.data : NULL;
}
#endif
