/* tests/test_generate_ltm.c: KV-cache generation of the Latent-Thought LM (model/kv_ltm.c)
 * equals its full forward with the same latents (ltm_forward_z): a prefill then one token at a
 * time, with a sliding window shorter than the sequence (so the cache must drop old
 * positions) and without one; z from the prior and from a posterior inferred from the prompt;
 * slots filled out of order; a slot without latents refused. */
#include "common/rng.h"
#include "model/ltm.h"
#include "tests/check.h"
#include <stdlib.h>
#include <string.h>

static model_config_t tiny(int window) {
    return (model_config_t){.kind = MODEL_LTM, .vocab_size = 41, .d_model = 32, .n_layers = 3,
                            .n_heads = 4, .n_kv_heads = 2, .d_ff = 48, .max_seq = 40,
                            .rope_theta = 10000.0f, .norm_eps = 1e-5f, .tied = 1,
                            .sliding_window = window, .latent_vectors = 5, .inner_steps = 4,
                            .fast_lr = 0.3f, .fast_lr_end = 0.3f, .fast_lr_steps = 1};
}

/* std ~0.3 weights (test_generate.c's reasoning): peaked attention, so a wrong window, key or
 * latent moves the logits by O(1). */
static ltm_t *model(model_config_t c, int B, int T, uint64_t seed) {
    char err[256];
    ltm_t *m = NULL;
    if (ltm_create(&m, &c, B, T, seed, err, sizeof err)) { CHECK(0, "%s", err); return NULL; }
    rng_t r;
    rng_seed(&r, seed + 1);
    int n = ltm_params(m, NULL, 0);
    tensor_view_t v[n];
    ltm_params(m, v, n);
    for (int i = 0; i < n; i++)
        if (v[i].ndim == 2)
            for (int64_t j = 0; j < tensor_numel(&v[i]); j++) v[i].data[j] = 0.3f * rng_normal(&r);
    return m;
}

static double max_rel(const float *a, const float *b, size_t n) {
    double md = 0, mb = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= md)) md = d;
        if (fabs(b[i]) > mb) mb = fabs(b[i]);
    }
    return mb > 0 ? md / mb : md;
}

/* float rounding of products with other row counts through L layers (test_generate.c) */
#define TOL 2e-5

static void check_ltm(int window, int B, int T, int P, int posterior) {
    model_config_t c = tiny(window);
    const int V = c.vocab_size;
    ltm_t *m = model(c, B, T, 31);
    if (!m) return;
    char err[256];
    uint32_t *tok = malloc(sizeof(uint32_t) * B * T), *chunk = malloc(sizeof(uint32_t) * B * T);
    float *got = malloc(sizeof(float) * B * T * V), *pl = malloc(sizeof(float) * B * P * V);
    rng_t r;
    rng_seed(&r, 78);
    for (int i = 0; i < B * T; i++) tok[i] = (uint32_t)rng_below(&r, V);
    for (int b = 0; b < B; b++) memcpy(chunk + b * P, tok + b * T, sizeof(uint32_t) * P);
    // z: the prior, or the posterior inferred from the prompt (inputs 0..P-2, targets 1..P-1)
    if (posterior) {
        ltm_set_shape(m, B, P - 1, err, sizeof err);
        uint32_t *in = malloc(sizeof(uint32_t) * B * (P - 1)), *tg = malloc(sizeof(uint32_t) * B * (P - 1));
        for (int b = 0; b < B; b++)
            for (int t = 0; t < P - 1; t++) in[b * (P - 1) + t] = tok[b * T + t], tg[b * (P - 1) + t] = tok[b * T + t + 1];
        ltm_infer_t o = {.steps = 3, .lr = 0.3f, .key = 5, .row0 = 0};
        CHECK(ltm_infer(m, in, tg, NULL, &o, NULL, NULL, err, sizeof err) == 0, "%s", err);
        free(in);
        free(tg);
    } else {
        ltm_set_shape(m, B, T, err, sizeof err);
        ltm_prior(m, 9, 0);
    }
    gen_ltm_t *g = NULL;
    CHECK(gen_ltm_create(&g, m, B, T, err, sizeof err) == 0, "%s", err);
    if (!g) goto out;
    CHECK(gen_ltm_step(g, chunk, B, P, pl, err, sizeof err) != 0 && strstr(err, "no latents"),
          "a slot without latents is refused: %s", err);
    int *slots = malloc(sizeof(int) * B);
    for (int b = 0; b < B; b++) slots[b] = B - 1 - b;   /* out of order: row b into slot B-1-b ... */
    CHECK(gen_ltm_set_latents(g, slots, B, err, sizeof err) == 0, "%s", err);
    /* ... then in order, so the chunk (slots 0..B-1) sees row b's latents in slot b */
    for (int b = 0; b < B; b++) slots[b] = b;
    CHECK(gen_ltm_set_latents(g, slots, B, err, sizeof err) == 0, "%s", err);
    free(slots);
    CHECK(gen_ltm_step(g, chunk, B, P, pl, err, sizeof err) == 0, "%s", err);
    for (int b = 0; b < B; b++)
        memcpy(got + (size_t)b * T * V, pl + (size_t)b * P * V, sizeof(float) * P * V);
    for (int t = P; t < T; t++) {
        for (int b = 0; b < B; b++) chunk[b] = tok[b * T + t];
        CHECK(gen_ltm_step(g, chunk, B, 1, NULL, err, sizeof err) == 0, "%s", err);
        for (int b = 0; b < B; b++)
            memcpy(got + ((size_t)b * T + t) * V, gen_logits(gen_ltm_decoder(g)) + (size_t)b * V, sizeof(float) * V);
    }
    // the full forward with the same z (the posterior's rows are those of the prompt's batch)
    ltm_set_shape(m, B, T, err, sizeof err);
    CHECK(ltm_forward_z(m, tok, NULL, NULL, NULL, err, sizeof err) == 0, "%s", err);
    double e = max_rel(got, ltm_logits(m), (size_t)B * T * V);
    fprintf(stderr, "  window=%d B=%d T=%d prompt=%d z from the %s: max rel error %.2g\n", window, B, T, P,
            posterior ? "posterior" : "prior", e);
    CHECK(e < TOL, "max rel error %.3g", e);
    // negative control: other latents move the logits far beyond TOL
    float *ref = malloc(sizeof(float) * B * T * V);
    memcpy(ref, ltm_logits(m), sizeof(float) * B * T * V);
    ltm_prior(m, 1234, 0);
    CHECK(ltm_forward_z(m, tok, NULL, NULL, NULL, err, sizeof err) == 0, "%s", err);
    CHECK(max_rel(ref, ltm_logits(m), (size_t)B * T * V) > 1e-2, "other latents barely move the logits");
    free(ref);
out:
    gen_ltm_destroy(&g);
    CHECK(g == NULL, "destroy NULLs the handle");
    ltm_destroy(&m);
    free(tok), free(chunk), free(got), free(pl);
}

static void test_window_prior(void) { check_ltm(6, 3, 30, 4, 0); }
static void test_window_posterior(void) { check_ltm(7, 2, 25, 9, 1); }
static void test_no_window(void) { check_ltm(0, 2, 20, 1, 0); }
static void test_long_prefill(void) { check_ltm(5, 1, 36, 30, 1); }

int main(void) {
    RUN(test_window_prior);
    RUN(test_window_posterior);
    RUN(test_no_window);
    RUN(test_long_prefill);
    return check_summary();
}
