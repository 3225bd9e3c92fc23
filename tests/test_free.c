/* tests/test_free.c: the Free Transformer's wiring (model/free.h).
 *
 * - with the post-sampler at zero, the decoder computes bit for bit what the baseline
 *   computes with the same decoder weights (same seed), whatever Z is;
 * - the forward with given Z reproduces the training forward that drew that Z;
 * - loss = CE + mean max(0, KL_t - kappa), metrics recomputed here from free_kl();
 * - views: decoder names then the documented free.* names and shapes;
 * - the uniform stream is a function of the step (resume draws the same Z);
 * - bad input is refused with a message, never a crash. */
#include "common/rng.h"
#include "model/free.h"
#include "model/llama.h"
#include "tests/check.h"
#include <stdlib.h>
#include <string.h>

enum { B = 2, T = 12 };

static model_config_t tiny(int H) {
    return (model_config_t){.kind = MODEL_FREE, .vocab_size = 32, .d_model = 32, .n_layers = 4,
                            .n_heads = 4, .n_kv_heads = 2, .d_ff = 64, .max_seq = 16,
                            .rope_theta = 10000.f, .norm_eps = 1e-5f, .tied = 1,
                            .latent_bits = H, .kappa_nats = 0.3f};
}

static void batch(uint32_t *tok, uint32_t *tgt, uint64_t seed) {
    rng_t r;
    rng_seed(&r, seed);
    for (int i = 0; i < B * T; i++) tok[i] = (uint32_t)rng_below(&r, 32), tgt[i] = (uint32_t)rng_below(&r, 32);
}

static void test_zero_post_is_baseline(void) {
    char err[256];
    model_config_t c = tiny(4);
    free_t *f = NULL;
    llama_t *l = NULL;
    CHECK(free_create(&f, &c, B, T, 7, err, sizeof err) == 0, "%s", err);
    model_config_t lc = c;
    lc.kind = MODEL_LLAMA;
    CHECK(llama_create(&l, &lc, B, T, 7, err, sizeof err) == 0, "%s", err);
    if (!f || !l) goto out;
    free_w_t w = free_weights(f);
    /* the test must be able to fail: with the random init, R != 0 changes the logits */
    uint32_t tok[B * T], tgt[B * T];
    batch(tok, tgt, 1);
    float lf = 0, ll = 0;
    CHECK(llama_forward(l, tok, tgt, NULL, &ll, err, sizeof err) == 0, "%s", err);
    CHECK(free_forward(f, tok, tgt, NULL, &lf, err, sizeof err) == 0, "%s", err);
    const size_t nl = (size_t)B * T * c.vocab_size;
    CHECK(memcmp(free_logits(f), llama_logits(l), nl * sizeof(float)) != 0,
          "random W_post should change the logits");
    memset(w.post, 0, sizeof(float) * c.d_model * (1u << c.latent_bits));
    CHECK(free_forward(f, tok, tgt, NULL, &lf, err, sizeof err) == 0, "%s", err);
    CHECK(memcmp(free_logits(f), llama_logits(l), nl * sizeof(float)) == 0,
          "W_post = 0: logits differ from the baseline's");
    /* any Z, same answer */
    uint32_t z[B * T];
    for (int i = 0; i < B * T; i++) z[i] = (uint32_t)(i * 7) % 16;
    float ce = 0;
    CHECK(free_forward_z(f, tok, z, tgt, NULL, &ce, err, sizeof err) == 0, "%s", err);
    CHECK(memcmp(free_logits(f), llama_logits(l), nl * sizeof(float)) == 0,
          "W_post = 0, given Z: logits differ from the baseline's");
    CHECK(ce == ll, "ce %.9g vs baseline loss %.9g", ce, ll);
out:
    free_destroy(&f);
    llama_destroy(&l);
    CHECK(f == NULL, "destroy NULLs the handle");
}

static void test_forward_z_replays(void) {
    char err[256];
    model_config_t c = tiny(4);
    free_t *f = NULL;
    CHECK(free_create(&f, &c, B, T, 3, err, sizeof err) == 0, "%s", err);
    if (!f) return;
    uint32_t tok[B * T], tgt[B * T], z[B * T];
    batch(tok, tgt, 2);
    float loss = 0, ce = 0;
    CHECK(free_forward(f, tok, tgt, NULL, &loss, err, sizeof err) == 0, "%s", err);
    const size_t nl = (size_t)B * T * c.vocab_size;
    float *lg = malloc(nl * sizeof(float));
    memcpy(lg, free_logits(f), nl * sizeof(float));
    memcpy(z, free_z(f), sizeof z);
    family_metrics_t fm;
    free_metrics(f, &fm);
    CHECK(free_forward_z(f, tok, z, tgt, NULL, &ce, err, sizeof err) == 0, "%s", err);
    CHECK(memcmp(lg, free_logits(f), nl * sizeof(float)) == 0, "given the drawn Z, logits differ");
    CHECK(fm.n >= 1 && !strcmp(fm.kv[0].name, "ce") && (float)fm.kv[0].value == ce,
          "ce metric %.9g vs forward_z ce %.9g", fm.n ? fm.kv[0].value : -1, ce);
    free(lg);
    free_destroy(&f);
}

static double metric(const family_metrics_t *m, const char *k) {
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->kv[i].name, k)) return m->kv[i].value;
    CHECK(0, "no metric %s", k);
    return NAN;
}

/* A model whose read-out is large enough for KL_t ~ 0.1..1 nats (with 0.02 it is ~1e-4). */
static free_t *kl_model(const model_config_t *c, const uint32_t *tok, const uint32_t *tgt,
                        const uint8_t *mask, float *loss) {
    char err[256];
    free_t *f = NULL;
    CHECK(free_create(&f, c, B, T, 5, err, sizeof err) == 0, "%s", err);
    if (!f) return NULL;
    free_w_t w = free_weights(f);
    rng_t r;
    rng_seed(&r, 9);
    for (int i = 0; i < c->latent_bits * c->d_model; i++) w.readout[i] = 0.25f * rng_normal(&r);
    CHECK(free_forward(f, tok, tgt, mask, loss, err, sizeof err) == 0, "%s", err);
    return f;
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static void test_loss_and_metrics(void) {
    model_config_t c = tiny(4);
    uint32_t tok[B * T], tgt[B * T];
    uint8_t mask[B * T];
    batch(tok, tgt, 4);
    for (int i = 0; i < B * T; i++) mask[i] = i % 5 != 0;
    float loss = 0;
    /* kappa at the median KL of a first pass, so positions fall on both sides of it */
    free_t *f = kl_model(&c, tok, tgt, mask, &loss);
    if (!f) return;
    float sorted[B * T];
    memcpy(sorted, free_kl(f), sizeof sorted);
    qsort(sorted, B * T, sizeof(float), cmp_float);
    c.kappa_nats = sorted[B * T / 2];
    free_destroy(&f);
    f = kl_model(&c, tok, tgt, mask, &loss);
    if (!f) return;
    const float *kl = free_kl(f), *bl = free_bit_logits(f);
    double sum = 0, term = 0;
    int n = 0, above = 0;
    for (int i = 0; i < B * T; i++) {
        /* KL_t from its definition (eq. 4): H log 2 + sum_d G_d log G_d over 2^H values */
        float p[16], G[16];
        for (int h = 0; h < c.latent_bits; h++) p[h] = 1.0f / (1.0f + expf(-bl[i * c.latent_bits + h]));
        binmap_probs(G, p, c.latent_bits);
        double k = c.latent_bits * M_LN2;
        for (int d = 0; d < 16; d++) k += G[d] > 0 ? G[d] * log(G[d]) : 0;
        CHECK_CLOSE(kl[i], k, 1e-5, 1e-4); /* float G vs double: ~1e-7 relative per term */
        if (!mask[i]) continue;
        n++, sum += kl[i];
        if (kl[i] > c.kappa_nats) above++, term += kl[i] - c.kappa_nats;
    }
    family_metrics_t m;
    free_metrics(f, &m);
    CHECK(above > 0 && above < n, "the case should have KL on both sides of kappa (%d of %d)", above, n);
    CHECK_CLOSE(metric(&m, "kl"), sum / n, 1e-7, 1e-6);
    CHECK_CLOSE(metric(&m, "kl_bits"), sum / n / M_LN2, 1e-7, 1e-6);
    CHECK_CLOSE(metric(&m, "kl_above_kappa"), (double)above / n, 0, 1e-12);
    CHECK_CLOSE(loss, metric(&m, "ce") + term / n, 1e-6, 1e-6);
    free_destroy(&f);
}

static void test_views(void) {
    char err[256];
    model_config_t c = tiny(3);
    free_t *f = NULL;
    CHECK(free_create(&f, &c, B, T, 1, err, sizeof err) == 0, "%s", err);
    if (!f) return;
    int n = free_params(f, NULL, 0), nd = llama_params(free_decoder(f), NULL, 0);
    CHECK(n == nd + 13, "%d views, decoder %d", n, nd);
    tensor_view_t v[64], g[64];
    free_params(f, v, 64);
    free_grads(f, g, 64);
    const struct { const char *name; int64_t d0, d1; } want[] = {
        {"free.zeta", 32, 0}, {"free.encoder.input_layernorm.weight", 32, 0},
        {"free.encoder.self_attn.q_proj.weight", 32, 32}, {"free.encoder.self_attn.k_proj.weight", 16, 32},
        {"free.encoder.self_attn.v_proj.weight", 16, 32}, {"free.encoder.self_attn.o_proj.weight", 32, 32},
        {"free.encoder.post_attention_layernorm.weight", 32, 0}, {"free.encoder.mlp.gate_proj.weight", 64, 32},
        {"free.encoder.mlp.up_proj.weight", 64, 32}, {"free.encoder.mlp.down_proj.weight", 32, 64},
        {"free.encoder_norm.weight", 32, 0}, {"free.readout.weight", 3, 32}, {"free.post_sampler.weight", 32, 8}};
    for (int i = 0; i < 13 && nd + i < n; i++) {
        tensor_view_t *t = &v[nd + i];
        CHECK(!strcmp(t->name, want[i].name) && !strcmp(g[nd + i].name, want[i].name), "view %d is %s", nd + i, t->name);
        CHECK(t->shape[0] == want[i].d0 && (t->ndim == 1 || t->shape[1] == want[i].d1), "%s shape", t->name);
    }
    CHECK(!strcmp(v[0].name, "model.embed_tokens.weight"), "decoder first: %s", v[0].name);
    /* init: norms exactly 1, zeta a small random vector */
    free_w_t w = free_weights(f);
    CHECK(w.enc_norm[0] == 1.0f && w.enc.attn_norm[5] == 1.0f, "norms start at 1");
    CHECK(w.zeta[0] != 0 && fabsf(w.zeta[0]) < 0.2f, "zeta ~ normal(0, 0.02): %g", w.zeta[0]);
    free_destroy(&f);
}

static void test_uniform_stream(void) {
    char err[256];
    model_config_t c = tiny(8);
    free_t *f = NULL;
    CHECK(free_create(&f, &c, B, T, 1, err, sizeof err) == 0, "%s", err);
    if (!f) return;
    free_w_t w = free_weights(f);
    memset(w.readout, 0, sizeof(float) * 8 * 32); /* p = 1/2: Z uniform, depends only on u */
    uint32_t tok[B * T], tgt[B * T], z1[B * T], z2[B * T], z3[B * T];
    batch(tok, tgt, 6);
    float loss;
    free_set_step(f, 5);
    free_forward(f, tok, tgt, NULL, &loss, err, sizeof err);
    memcpy(z1, free_z(f), sizeof z1);
    free_forward(f, tok, tgt, NULL, &loss, err, sizeof err); /* next micro-batch: new draws */
    memcpy(z3, free_z(f), sizeof z3);
    free_set_step(f, 5);
    free_forward(f, tok, tgt, NULL, &loss, err, sizeof err);
    memcpy(z2, free_z(f), sizeof z2);
    CHECK(memcmp(z1, z2, sizeof z1) == 0, "same step, same draws");
    CHECK(memcmp(z1, z3, sizeof z1) != 0, "a second micro-batch draws anew");
    free_destroy(&f);
}

static void test_bad_input(void) {
    char err[256] = "";
    model_config_t c = tiny(4);
    free_t *f = NULL;
    model_config_t bad = c;
    bad.latent_bits = 0;
    CHECK(free_create(&f, &bad, B, T, 1, err, sizeof err) < 0 && f == NULL && err[0], "H=0 refused");
    bad = c, bad.n_layers = 1;
    CHECK(free_create(&f, &bad, B, T, 1, err, sizeof err) < 0 && f == NULL, "1 layer refused");
    bad = c, bad.kappa_nats = -1;
    CHECK(free_create(&f, &bad, B, T, 1, err, sizeof err) < 0, "negative kappa refused");
    CHECK(free_create(&f, &c, B, T, 1, err, sizeof err) == 0, "%s", err);
    if (!f) return;
    uint32_t tok[B * T], tgt[B * T], z[B * T];
    batch(tok, tgt, 8);
    err[0] = 0;
    CHECK(free_backward(f, err, sizeof err) < 0 && err[0], "backward before forward refused");
    tok[3] = 32;
    float l;
    CHECK(free_forward(f, tok, tgt, NULL, &l, err, sizeof err) < 0, "token outside vocab refused");
    CHECK(free_backward(f, err, sizeof err) < 0, "no backward after a refused forward");
    tok[3] = 1;
    memset(z, 0, sizeof z);
    z[5] = 16;
    err[0] = 0;
    CHECK(free_forward_z(f, tok, z, tgt, NULL, &l, err, sizeof err) < 0 && strstr(err, "latent"), "z >= 2^H refused: %s", err);
    CHECK(free_set_shape(f, B + 1, T, err, sizeof err) < 0, "shape beyond the allocation refused");
    CHECK(free_set_shape(f, 1, 5, err, sizeof err) == 0, "%s", err);
    CHECK(free_forward(f, tok, tgt, NULL, &l, err, sizeof err) == 0 && free_backward(f, err, sizeof err) == 0,
          "smaller shape runs: %s", err);
    free_destroy(&f);
    free_destroy(&f); /* twice is harmless */
}

int main(void) {
    RUN(test_zero_post_is_baseline);
    RUN(test_forward_z_replays);
    RUN(test_loss_and_metrics);
    RUN(test_views);
    RUN(test_uniform_stream);
    RUN(test_bad_input);
    return check_summary();
}
