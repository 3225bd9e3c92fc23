/* tests/ref_check.h: comparing a model against a PyTorch reference's safetensors fixture
 * (the helpers of the *_ref tests; include after tests/check.h). */
#ifndef TESTS_REF_CHECK_H
#define TESTS_REF_CHECK_H
#include <jansson.h>
#include <stdio.h>

#include "model/safetensors.h"

/* max |a - b| / max |b| over n elements; a NaN in a makes it NaN (a failure). */
static inline double ref_rel_err(const float *a, const float *b, int64_t n) {
    double md = 0, mb = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= md)) md = d;
        if (fabs(b[i]) > mb) mb = fabs(b[i]);
    }
    return mb > 0 ? md / mb : md;
}

/* The reference's tensor `name`, which must hold `want` elements (else a failed check, NULL). */
static inline const float *ref_get(st_file_t *f, const char *name, int64_t want) {
    tensor_view_t v;
    if (st_find(f, name, &v) != 0) { CHECK(0, "reference lacks %s", name); return NULL; }
    CHECK(tensor_numel(&v) == want, "%s has %lld elements, want %lld", name, (long long)tensor_numel(&v), (long long)want);
    return tensor_numel(&v) == want ? v.data : NULL;
}

/* Prints and checks one tensor's relative error against tol (ref NULL: already failed). */
static inline void ref_compare(const char *what, const float *ours, const float *ref, int64_t n, double tol) {
    if (!ref) return;
    double e = ref_rel_err(ours, ref, n);
    printf("%-52s rel err %.3g\n", what, e);
    CHECK(e < tol, "%s rel err %.3g", what, e);
}

static inline int ref_jint(json_t *o, const char *k) { return (int)json_integer_value(json_object_get(o, k)); }
static inline double ref_jnum(json_t *o, const char *k) { return json_number_value(json_object_get(o, k)); }
#endif
