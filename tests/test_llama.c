/* tests/test_llama.c: the decoder's contracts: config validation, parameter names/shapes/layout,
 * init, bad input, determinism, causality, gradient accumulation, the pieces API. */
#include "model/llama.h"
#include "common/rng.h"
#include "tests/check.h"
#include <stdlib.h>
#include <string.h>

static model_config_t tiny(int tied) {
    return (model_config_t){.kind = MODEL_LLAMA, .vocab_size = 50, .d_model = 32, .n_layers = 4,
                            .n_heads = 4, .n_kv_heads = 2, .d_ff = 48, .max_seq = 16,
                            .rope_theta = 10000.0f, .norm_eps = 1e-5f, .tied = tied};
}

static void fill(uint32_t *t, int n, int V, uint64_t seed) {
    rng_t r;
    rng_seed(&r, seed);
    for (int i = 0; i < n; i++) t[i] = (uint32_t)rng_below(&r, V);
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

static void bad_config(model_config_t c, int B, int T, const char *word) {
    char err[256] = "";
    llama_t *m = NULL;
    int rc = llama_create(&m, &c, B, T, 1, err, sizeof(err));
    CHECK(rc == LLAMA_ECONFIG && m == NULL, "expected a config error mentioning %s, rc %d", word, rc);
    CHECK(strstr(err, word) != NULL, "message '%s' should mention '%s'", err, word);
}

static void test_config_validation(void) {
    model_config_t c = tiny(1);
    c.n_heads = 5; bad_config(c, 1, 8, "divide d_model");
    c = tiny(1); c.n_kv_heads = 3; bad_config(c, 1, 8, "n_kv_heads");
    c = tiny(1); c.d_model = 24; c.n_heads = 8; c.n_kv_heads = 8; bad_config(c, 1, 8, "even");
    c = tiny(1); bad_config(c, 1, 17, "max_seq");
    c = tiny(1); c.vocab_size = 0; bad_config(c, 1, 8, "vocab_size");
    c = tiny(1); c.n_layers = 0; bad_config(c, 1, 8, "n_layers");
    c = tiny(1); c.d_ff = -1; bad_config(c, 1, 8, "d_ff");
    c = tiny(1); bad_config(c, 0, 8, "batch shape");
    char err[128];
    c = tiny(1);
    CHECK(llama_config_check(&c, 2, 16, err, sizeof(err)) == 0, "%s", err);
}

static void test_param_layout(void) {
    for (int tied = 0; tied <= 1; tied++) {
        model_config_t c = tiny(tied);
        char err[256];
        llama_t *m = NULL;
        CHECK(llama_create(&m, &c, 2, 8, 3, err, sizeof(err)) == 0, "%s", err);
        if (!m) return;
        tensor_view_t v[64], g[64];
        int n = llama_params(m, v, 64);
        CHECK(n == 2 + 9 * c.n_layers + !tied, "tied=%d: %d tensors", tied, n);
        CHECK(llama_grads(m, g, 64) == n, "grad view count");
        CHECK(llama_params(m, NULL, 0) == n, "count query");
        size_t total;
        float *base = llama_param_data(m, &total), *p = base;
        for (int i = 0; i < n; i++) {
            CHECK(v[i].data == p, "%s is not contiguous after its predecessor", v[i].name);
            CHECK(strcmp(v[i].name, g[i].name) == 0, "grad name %s vs %s", g[i].name, v[i].name);
            p += tensor_numel(&v[i]);
        }
        CHECK((size_t)(p - base) == total, "views cover %zu of %zu floats", (size_t)(p - base), total);
        CHECK(strcmp(v[0].name, "model.embed_tokens.weight") == 0 && v[0].shape[0] == 50 &&
              v[0].shape[1] == 32, "embedding %s", v[0].name);
        CHECK(strcmp(v[2].name, "model.layers.0.self_attn.q_proj.weight") == 0 && v[2].shape[0] == 32,
              "q_proj %s", v[2].name);
        CHECK(strcmp(v[3].name, "model.layers.0.self_attn.k_proj.weight") == 0 && v[3].shape[0] == 16 &&
              v[3].shape[1] == 32, "k_proj (Hkv*hd, D) %s", v[3].name);
        CHECK(strcmp(v[9].name, "model.layers.0.mlp.down_proj.weight") == 0 && v[9].shape[0] == 32 &&
              v[9].shape[1] == 48, "down_proj (D, F) %s", v[9].name);
        CHECK(strcmp(v[1 + 9 * c.n_layers].name, "model.norm.weight") == 0, "final norm");
        if (!tied) CHECK(strcmp(v[n - 1].name, "lm_head.weight") == 0, "lm_head last");
        /* init: norms are ones, matrices ~ N(0, 0.02) */
        double s = 0, s2 = 0;
        int64_t cnt = 0, ones = 1;
        for (int i = 0; i < n; i++) {
            for (int64_t j = 0; j < tensor_numel(&v[i]); j++) {
                if (v[i].ndim == 1) ones &= v[i].data[j] == 1.0f;
                else { s += v[i].data[j]; s2 += (double)v[i].data[j] * v[i].data[j]; cnt++; }
            }
        }
        double mean = s / cnt, sd = sqrt(s2 / cnt - mean * mean);
        CHECK(ones, "norm weights start at 1");
        /* ~25k samples: the std of the sample std is ~0.02/sqrt(2*25k) ~ 1e-4; allow 5e-4 */
        CHECK(fabs(sd - 0.02) < 5e-4 && fabs(mean) < 5e-4, "init mean %g sd %g", mean, sd);
        llama_destroy(&m);
        CHECK(m == NULL, "destroy NULLs the handle");
    }
}

static void test_init_seeded(void) {
    model_config_t c = tiny(1);
    char err[256];
    llama_t *a = NULL, *b = NULL, *d = NULL;
    llama_create(&a, &c, 1, 4, 11, err, sizeof(err));
    llama_create(&b, &c, 1, 4, 11, err, sizeof(err));
    llama_create(&d, &c, 1, 4, 12, err, sizeof(err));
    size_t n;
    float *pa = llama_param_data(a, &n), *pb = llama_param_data(b, NULL), *pd = llama_param_data(d, NULL);
    CHECK(memcmp(pa, pb, n * sizeof(float)) == 0, "same seed, same weights");
    CHECK(memcmp(pa, pd, n * sizeof(float)) != 0, "different seed, different weights");
    llama_destroy(&a); llama_destroy(&b); llama_destroy(&d);
}

static void test_bad_tokens(void) {
    model_config_t c = tiny(1);
    char err[256] = "";
    llama_t *m = NULL;
    llama_create(&m, &c, 1, 8, 1, err, sizeof(err));
    uint32_t tok[8] = {1, 2, 3, 50, 4, 5, 6, 7}, tgt[8] = {2, 3, 4, 5, 6, 7, 8, 99};
    uint8_t mask[8] = {1, 1, 1, 1, 1, 1, 1, 0};
    float loss;
    CHECK(llama_forward(m, tok, tgt, NULL, &loss, err, sizeof(err)) == LLAMA_ETOKEN, "token 50 >= vocab");
    CHECK(strstr(err, "token id 50") != NULL, "message: %s", err);
    tok[3] = 9;
    CHECK(llama_forward(m, tok, tgt, NULL, &loss, err, sizeof(err)) == LLAMA_ETOKEN, "target 99 >= vocab");
    CHECK(llama_backward(m, err, sizeof(err)) != 0, "no backward after a refused forward");
    /* a masked-out target is never read, so it may be anything */
    CHECK(llama_forward(m, tok, tgt, mask, &loss, err, sizeof(err)) == 0, "%s", err);
    CHECK(llama_target_count(m) == 7, "count %d", llama_target_count(m));
    CHECK(llama_backward(m, err, sizeof(err)) == 0, "%s", err);
    CHECK(llama_set_shape(m, 2, 8, err, sizeof(err)) != 0, "B above capacity refused");
    CHECK(llama_forward(m, tok, NULL, NULL, NULL, err, sizeof(err)) == 0, "logits only: %s", err);
    CHECK(llama_backward(m, err, sizeof(err)) != 0, "no backward without targets");
    llama_destroy(&m);
}

/* Same input twice: bit-identical loss and gradients (no atomics, fixed reduction order). */
static void test_deterministic(void) {
    model_config_t c = tiny(0);
    char err[256];
    llama_t *m = NULL;
    llama_create(&m, &c, 2, 16, 5, err, sizeof(err));
    uint32_t tok[32], tgt[32];
    fill(tok, 32, 50, 1); fill(tgt, 32, 50, 2);
    size_t n;
    float l1, l2;
    llama_zero_grad(m);
    llama_forward(m, tok, tgt, NULL, &l1, err, sizeof(err));
    llama_backward(m, err, sizeof(err));
    float *g = llama_grad_data(m, &n), *g1 = malloc(n * sizeof(float));
    memcpy(g1, g, n * sizeof(float));
    llama_zero_grad(m);
    llama_forward(m, tok, tgt, NULL, &l2, err, sizeof(err));
    llama_backward(m, err, sizeof(err));
    CHECK(l1 == l2, "loss %g vs %g", l1, l2);
    CHECK(memcmp(g1, g, n * sizeof(float)) == 0, "gradients differ between identical runs");
    free(g1);
    llama_destroy(&m);
}

/* Causality: the logits of a prefix do not depend on what follows, and running with a shorter
 * T (llama_set_shape) gives the prefix's logits. */
static void test_causal_prefix(void) {
    model_config_t c = tiny(1);
    char err[256];
    llama_t *m = NULL;
    llama_create(&m, &c, 1, 16, 5, err, sizeof(err));
    uint32_t tok[16];
    fill(tok, 16, 50, 3);
    llama_forward(m, tok, NULL, NULL, NULL, err, sizeof(err));
    float *full = malloc(sizeof(float) * 16 * 50);
    memcpy(full, llama_logits(m), sizeof(float) * 16 * 50);
    CHECK(llama_set_shape(m, 1, 9, err, sizeof(err)) == 0, "%s", err);
    tok[12] = (tok[12] + 1) % 50;  /* beyond the prefix: must not matter */
    llama_forward(m, tok, NULL, NULL, NULL, err, sizeof(err));
    /* different GEMM shapes may round differently: 1e-5 relative is float noise, a leak of the
     * future would be O(1) */
    double e = max_rel(llama_logits(m), full, 9 * 50);
    CHECK(e < 1e-5, "prefix logits differ by %g", e);
    llama_destroy(&m);
}

/* Two micro-batches of B=1 with grad scale 1/2 accumulate the gradient of the B=2 batch. */
static void test_grad_accumulation(void) {
    model_config_t c = tiny(1);
    char err[256];
    llama_t *m = NULL;
    llama_create(&m, &c, 2, 8, 5, err, sizeof(err));
    uint32_t tok[16], tgt[16];
    fill(tok, 16, 50, 4); fill(tgt, 16, 50, 5);
    size_t n;
    float loss, l0, l1;
    llama_zero_grad(m);
    llama_forward(m, tok, tgt, NULL, &loss, err, sizeof(err));
    llama_backward(m, err, sizeof(err));
    float *g = llama_grad_data(m, &n), *full = malloc(n * sizeof(float));
    memcpy(full, g, n * sizeof(float));
    llama_zero_grad(m);
    llama_set_shape(m, 1, 8, err, sizeof(err));
    llama_set_grad_scale(m, 0.5f);
    llama_forward(m, tok, tgt, NULL, &l0, err, sizeof(err));
    llama_backward(m, err, sizeof(err));
    llama_forward(m, tok + 8, tgt + 8, NULL, &l1, err, sizeof(err));
    llama_backward(m, err, sizeof(err));
    CHECK_CLOSE(0.5 * (l0 + l1), loss, 0, 1e-6);  /* float sums in another order */
    double e = max_rel(g, full, n);
    CHECK(e < 1e-5, "accumulated gradient differs by %g", e);
    free(full);
    llama_destroy(&m);
}

/* The Free Transformer runs the model in pieces; pieces must equal the whole, bit for bit. */
static void test_pieces(void) {
    model_config_t c = tiny(1);
    char err[256];
    llama_t *m = NULL;
    llama_create(&m, &c, 1, 8, 5, err, sizeof(err));
    uint32_t tok[8], tgt[8];
    fill(tok, 8, 50, 6); fill(tgt, 8, 50, 7);
    float l1, l2;
    size_t n;
    llama_zero_grad(m);
    llama_forward(m, tok, tgt, NULL, &l1, err, sizeof(err));
    llama_backward(m, err, sizeof(err));
    float *g = llama_grad_data(m, &n), *g1 = malloc(n * sizeof(float));
    memcpy(g1, g, n * sizeof(float));
    llama_zero_grad(m);
    llama_embed(m, tok, err, sizeof(err));
    llama_blocks_forward(m, 0, 2);
    llama_blocks_forward(m, 2, 4);
    llama_head_forward(m, tgt, NULL, &l2, err, sizeof(err));
    llama_head_backward(m);
    llama_blocks_backward(m, 4, 2);
    llama_blocks_backward(m, 2, 0);
    llama_embed_backward(m);
    CHECK(l1 == l2, "loss %g vs %g", l1, l2);
    CHECK(memcmp(g1, g, n * sizeof(float)) == 0, "piecewise gradients differ");
    free(g1);
    llama_destroy(&m);
}

/* The injection-block entry points: with x_kv a copy of the stream, the forward equals the
 * plain block bit for bit, and d/dx_q + d/dx_kv equals the plain input gradient. */
static void test_block_kv(void) {
    model_config_t c = tiny(1);
    char err[256];
    llama_t *m = NULL;
    llama_create(&m, &c, 1, 8, 5, err, sizeof(err));
    uint32_t tok[8], tgt[8];
    fill(tok, 8, 50, 8); fill(tgt, 8, 50, 9);
    const int ND = 8 * 32;
    float l1, l2, *kv = malloc(sizeof(float) * ND), *dkv = calloc(ND, sizeof(float));
    float *plain_d = malloc(sizeof(float) * ND);
    llama_zero_grad(m);
    llama_forward(m, tok, tgt, NULL, &l1, err, sizeof(err));
    llama_head_backward(m);
    llama_blocks_backward(m, 4, 2);
    memcpy(plain_d, llama_dstream(m), sizeof(float) * ND);
    llama_embed(m, tok, err, sizeof(err));
    llama_blocks_forward(m, 0, 2);
    memcpy(kv, llama_stream(m, 2), sizeof(float) * ND);
    llama_block_forward_kv(m, 2, kv);
    llama_blocks_forward(m, 3, 4);
    llama_head_forward(m, tgt, NULL, &l2, err, sizeof(err));
    CHECK(l1 == l2, "loss %g vs %g", l1, l2);
    llama_head_backward(m);
    llama_blocks_backward(m, 4, 3);
    llama_block_backward_kv(m, 2, kv, dkv);
    float *d = llama_dstream(m);
    for (int i = 0; i < ND; i++) d[i] += dkv[i];
    /* the two halves are summed in another order than the plain block's: float noise only */
    double e = max_rel(d, plain_d, ND);
    CHECK(e < 1e-5, "split gradient differs by %g", e);
    double nkv = 0;
    for (int i = 0; i < ND; i++) nkv += fabs(dkv[i]);
    CHECK(nkv > 0, "no gradient reached x_kv");
    free(kv); free(dkv); free(plain_d);
    llama_destroy(&m);
}

/* One (N,V) buffer for the head: dlogits overwrite the logits (at config G each is 1.65 GB).
 * The activations grow by 4 bytes per row and vocabulary entry, not 8; and the logits read
 * after a training forward are still the logits, and its backward the same gradient. */
static void test_one_logits_buffer(void) {
    model_config_t c = tiny(1);
    const int B = 2, T = 8, dv = 64;
    size_t a0 = llama_activation_bytes(&c, B, T);
    c.vocab_size += dv;
    size_t a1 = llama_activation_bytes(&c, B, T);
    c.vocab_size -= dv;
    /* the arena aligns each buffer to 64 bytes: up to 64 more per buffer that holds V */
    CHECK(a1 - a0 >= (size_t)B * T * dv * 4 && a1 - a0 < (size_t)B * T * dv * 4 + 256,
          "activations grow by %zu bytes for %d more vocabulary entries at N=%d (one (N,V) buffer: %d)",
          a1 - a0, dv, B * T, B * T * dv * 4);
    char err[256];
    llama_t *m = NULL;
    llama_create(&m, &c, B, T, 5, err, sizeof(err));
    uint32_t tok[16], tgt[16];
    fill(tok, 16, 50, 4); fill(tgt, 16, 50, 5);
    float loss;
    size_t n, V = c.vocab_size;
    float *lg = malloc(sizeof(float) * 16 * V), *g0 = NULL;
    llama_forward(m, tok, NULL, NULL, &loss, err, sizeof(err));
    memcpy(lg, llama_logits(m), sizeof(float) * 16 * V);
    llama_zero_grad(m);
    llama_forward(m, tok, tgt, NULL, &loss, err, sizeof(err));
    llama_backward(m, err, sizeof(err));
    float *g = llama_grad_data(m, &n);
    g0 = malloc(n * sizeof(float));
    memcpy(g0, g, n * sizeof(float));
    llama_zero_grad(m);
    llama_forward(m, tok, tgt, NULL, &loss, err, sizeof(err));
    CHECK(!memcmp(lg, llama_logits(m), sizeof(float) * 16 * V), "logits read after a forward with targets: the logits, bit for bit");
    llama_backward(m, err, sizeof(err));
    CHECK(!memcmp(g0, llama_grad_data(m, &n), n * sizeof(float)), "and the backward after it: the same gradient, bit for bit");
    free(lg);
    free(g0);
    llama_destroy(&m);
}

int main(void) {
    RUN(test_config_validation);
    RUN(test_param_layout);
    RUN(test_init_seeded);
    RUN(test_bad_tokens);
    RUN(test_deterministic);
    RUN(test_causal_prefix);
    RUN(test_grad_accumulation);
    RUN(test_pieces);
    RUN(test_block_kv);
    RUN(test_one_logits_buffer);
    return check_summary();
}
