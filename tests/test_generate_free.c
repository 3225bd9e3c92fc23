/* tests/test_generate_free.c: KV-cache generation of the Free Transformer equals its full
 * forward with the same latent indices (free_forward_z), and the prompt's Z is the encoder's
 * (free_forward with the same uniforms). */
#include "model/free.h"
#include "model/generate.h"
#include "common/rng.h"
#include "tests/check.h"
#include <stdlib.h>
#include <string.h>

static model_config_t tiny(int L, int H) {
    return (model_config_t){.kind = MODEL_FREE, .vocab_size = 61, .d_model = 32, .n_layers = L,
                            .n_heads = 4, .n_kv_heads = 2, .d_ff = 48, .max_seq = 80,
                            .rope_theta = 10000.0f, .norm_eps = 1e-5f, .tied = 1,
                            .latent_bits = H, .kappa_nats = 0.1f};
}

/* As in test_generate.c: std 0.02 hides mistakes (flat attention, R ~ 0 next to X); std ~0.3
 * makes attention peaked and R comparable to the stream, so a wrong Z or a missing injection
 * shows as an O(1) change of the logits. */
static free_t *model(model_config_t c, int B, int T, uint64_t seed) {
    char err[256];
    free_t *m = NULL;
    if (free_create(&m, &c, B, T, seed, err, sizeof err)) { CHECK(0, "%s", err); return NULL; }
    int n = free_params(m, NULL, 0);
    tensor_view_t v[n];
    free_params(m, v, n);
    for (int i = 0; i < n; i++)
        for (int64_t j = 0; j < tensor_numel(&v[i]); j++)
            if (v[i].data[j] != 1.0f) v[i].data[j] *= 15.0f;
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

/* Same reasoning as test_generate.c's TOL: float rounding of BLAS products with another row
 * count, through L layers; a wrong latent or key changes logits by O(1). */
#define TOL 2e-5

static void check_free(int L, int H, int B, int T, int P) {
    model_config_t c = tiny(L, H);
    const int V = c.vocab_size;
    const uint32_t K = 1u << H;
    free_t *m = model(c, B, T, 21);
    if (!m) return;
    char err[256];
    uint32_t *tok = malloc(sizeof(uint32_t) * B * T), *z = malloc(sizeof(uint32_t) * B * T);
    uint32_t *chunk = malloc(sizeof(uint32_t) * B * T), *zt = malloc(sizeof(uint32_t) * B);
    float *u = malloc(sizeof(float) * B * P * H);
    float *got = malloc(sizeof(float) * B * T * V), *pl = malloc(sizeof(float) * B * P * V);
    rng_t r;
    rng_seed(&r, 77);
    for (int i = 0; i < B * T; i++) tok[i] = (uint32_t)rng_below(&r, V);
    for (int i = 0; i < B * P * H; i++) u[i] = rng_f32(&r);

    gen_free_t *g = NULL;
    CHECK(gen_free_create(&g, m, B, T, err, sizeof err) == 0, "%s", err);
    if (!g) goto out;
    CHECK(gen_free_n_latent(g) == K);
    // the prompt through the encoder
    for (int b = 0; b < B; b++) memcpy(chunk + b * P, tok + b * T, sizeof(uint32_t) * P);
    CHECK(gen_free_step(g, chunk, B, P, NULL, u, pl, err, sizeof err) == 0, "%s", err);
    for (int b = 0; b < B; b++) {
        memcpy(z + b * T, gen_free_z(g) + b * P, sizeof(uint32_t) * P);
        for (int t = 0; t < P; t++)
            memcpy(got + ((size_t)b * T + t) * V, pl + ((size_t)b * P + t) * V, sizeof(float) * V);
    }
    // the prompt's Z is the training forward's with the same uniforms
    free_set_shape(m, B, P, err, sizeof err);
    free_set_uniforms(m, u);
    CHECK(free_forward(m, chunk, NULL, NULL, NULL, err, sizeof err) == 0, "%s", err);
    free_set_uniforms(m, NULL);
    int zsame = 1, zvar = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < P; t++) {
            zsame &= free_z(m)[b * P + t] == z[b * T + t];
            zvar |= z[b * T + t] != z[0];
        }
    CHECK(zsame, "prompt latents equal the encoder's in free_forward");
    CHECK(zvar, "the encoder gave the same latent everywhere: the check would be weak");
    // new tokens one at a time, each with a prior latent uniform in [0, 2^H)
    for (int t = P; t < T; t++) {
        for (int b = 0; b < B; b++) {
            chunk[b] = tok[b * T + t];
            zt[b] = z[b * T + t] = (uint32_t)rng_below(&r, K);
        }
        CHECK(gen_free_step(g, chunk, B, 1, zt, NULL, NULL, err, sizeof err) == 0, "%s", err);
        for (int b = 0; b < B; b++)
            memcpy(got + ((size_t)b * T + t) * V, gen_logits(gen_free_decoder(g)) + (size_t)b * V,
                   sizeof(float) * V);
    }
    // reference: the full forward with the same indices everywhere
    free_set_shape(m, B, T, err, sizeof err);
    CHECK(free_forward_z(m, tok, z, NULL, NULL, NULL, err, sizeof err) == 0, "%s", err);
    double e = max_rel(got, free_logits(m), (size_t)B * T * V);
    fprintf(stderr, "  L=%d H=%d B=%d T=%d prompt=%d: max rel error %.2g\n", L, H, B, T, P, e);
    CHECK(e < TOL, "max rel error %.3g", e);
    // negative control: other latents everywhere change the logits by far more than TOL
    // (one position alone moves them little: only its own key/value in block L/2 changes)
    float *ref = malloc(sizeof(float) * B * T * V);
    memcpy(ref, free_logits(m), sizeof(float) * B * T * V);
    for (int i = 0; i < B * T; i++) z[i] = (z[i] + K / 2 + 1) % K;
    free_forward_z(m, tok, z, NULL, NULL, NULL, err, sizeof err);
    double d = max_rel(free_logits(m), ref, (size_t)B * T * V);
    fprintf(stderr, "  other latents: logits move by %.2g\n", d);
    CHECK(d > 100 * TOL, "the latent should matter: %.3g", d);
    free(ref);
out:
    gen_free_destroy(&g);
    CHECK(g == NULL);
    free_destroy(&m);
    free(tok); free(z); free(chunk); free(zt); free(u); free(got); free(pl);
}

static void test_free_b1(void) { check_free(4, 6, 1, 40, 2); }
static void test_free_batch(void) { check_free(4, 8, 3, 30, 11); }
static void test_free_odd_layers(void) { check_free(3, 3, 2, 25, 5); }

static void test_free_bad(void) {
    model_config_t c = tiny(4, 4);
    free_t *m = model(c, 2, 8, 3);
    if (!m) return;
    char err[256] = "";
    gen_free_t *g = NULL;
    CHECK(gen_free_create(&g, m, 2, 8, err, sizeof err) == 0, "%s", err);
    if (!g) { free_destroy(&m); return; }
    uint32_t tok[16] = {0}, z[16] = {0};
    float u[64] = {0};
    CHECK(gen_free_step(g, tok, 2, 2, NULL, NULL, NULL, err, sizeof err) == LLAMA_EARG, "no uniforms");
    z[1] = 16;
    CHECK(gen_free_step(g, tok, 2, 1, z, NULL, NULL, err, sizeof err) == LLAMA_EARG, "z >= 2^H");
    CHECK(strstr(err, "latent index 16") != NULL, "%s", err);
    z[1] = 0;
    CHECK(gen_free_step(g, tok, 2, 2, NULL, u, NULL, err, sizeof err) == 0, "%s", err);
    CHECK(gen_free_step(g, tok, 2, 2, NULL, u, NULL, err, sizeof err) == LLAMA_EARG,
          "encoder after position 0");
    CHECK(gen_pos(gen_free_decoder(g)) == 2);
    gen_free_destroy(&g);
    free_destroy(&m);
}

int main(void) {
    RUN(test_free_b1);
    RUN(test_free_batch);
    RUN(test_free_odd_layers);
    RUN(test_free_bad);
    return check_summary();
}
