/* tests/ltm_check.h: what the Latent-thought LM's tests share (test_ltm.c, test_ltm_bound.c). */
#ifndef TESTS_LTM_CHECK_H
#define TESTS_LTM_CHECK_H
#include "common/rng.h"
#include "model/ltm.h"

/* Every matrix ~ N(0, std^2) from seed (norms stay 1): weights larger than the 0.02 init, so
 * z and every weight visibly move the loss. */
static inline void ltm_check_scale_weights(ltm_t *m, uint64_t seed, float std) {
    rng_t r;
    rng_seed(&r, seed);
    int n = ltm_params(m, NULL, 0);
    tensor_view_t v[n];
    ltm_params(m, v, n);
    for (int i = 0; i < n; i++)
        if (v[i].ndim == 2)
            for (int64_t j = 0; j < tensor_numel(&v[i]); j++) v[i].data[j] = std * rng_normal(&r);
}
#endif
