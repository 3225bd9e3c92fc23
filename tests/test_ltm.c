/* tests/test_ltm.c: the Latent-Thought LM's wiring and its dual-rate loop (model/ltm.h).
 *
 * - the inner loop really optimises: on a fixed decoder, the NELBO of a batch falls over the
 *   inner steps, by much, scored on fresh draws;
 * - the slow gradient does not flow through the inner loop: after K steps the decoder's
 *   gradient is, bit for bit, the one a 0-step model computes at the final posterior (and not
 *   the one at the starting posterior);
 * - finite differences: d(NELBO)/d mu and d log sigma of an inner step, d(loss)/d(every decoder
 *   and cross-attention weight) of the final forward;
 * - the latents matter: the logits change with z; with the cross-attention's output at zero
 *   the LTM is the windowed baseline decoder bit for bit;
 * - draws: the same step and micro-batch give the same loss bits (resume), another step not;
 * - views and config round trip; FLOP counts; bad configs refused in one line. */
#include "common/rng.h"
#include "model/checkpoint.h"
#include "model/ltm.h"
#include "tests/check.h"
#include "tests/ltm_check.h"
#include <stdlib.h>
#include <string.h>

enum { B = 2, T = 10, V = 29 };

static model_config_t tiny(int K, int window) {
    return (model_config_t){.kind = MODEL_LTM, .vocab_size = V, .d_model = 16, .n_layers = 2,
                            .n_heads = 4, .n_kv_heads = 2, .d_ff = 24, .max_seq = 16,
                            .rope_theta = 10000.f, .norm_eps = 1e-5f, .tied = 1,
                            .sliding_window = window, .latent_vectors = 3, .inner_steps = K,
                            .fast_lr = 0.3f, .fast_lr_end = 0.34f, .fast_lr_steps = 100};
}

static void batch(uint32_t *tok, uint32_t *tgt, uint8_t *mask, uint64_t seed) {
    rng_t r;
    rng_seed(&r, seed);
    for (int i = 0; i < B * T; i++) {
        tok[i] = (uint32_t)rng_below(&r, V);
        tgt[i] = (uint32_t)rng_below(&r, V);
        if (mask) mask[i] = i % 7 != 3;
    }
}

static float *normals(size_t n, float mean, float std, uint64_t seed) {
    rng_t r;
    rng_seed(&r, seed);
    float *p = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) p[i] = mean + std * rng_normal(&r);
    return p;
}

static void test_inner_loop_optimises(void) {
    char err[256];
    model_config_t c = tiny(0, 4);
    ltm_t *m = NULL;
    CHECK(ltm_create(&m, &c, B, T, 11, err, sizeof err) == 0, "%s", err);
    if (!m) return;
    ltm_check_scale_weights(m, 5, 0.3f);
    uint32_t tok[B * T], tgt[B * T];
    uint8_t mask[B * T];
    batch(tok, tgt, mask, 1);
    enum { K = 40 };
    int rec[K + 1];
    for (int k = 0; k <= K; k++) rec[k] = k;
    double ce[K + 1], kl[K + 1];
    ltm_infer_t o = {.steps = K, .lr = 0.1f, .key = 99, .row0 = 0, .record = rec, .n_record = K + 1};
    CHECK(ltm_infer(m, tok, tgt, mask, &o, ce, kl, err, sizeof err) == 0, "%s", err);
    /* each record is one fresh draw (stochastic VI), so the curve is noisy: its last five
     * against the start */
    double tail = 0;
    for (int k = K - 4; k <= K; k++) tail += (ce[k] + kl[k]) / 5;
    const double first = ce[0] + kl[0];
    CHECK(tail < 0.5 * first, "NELBO %g after %d steps vs %g at the start: the loop does not optimise", tail, K, first);
    /* the posteriors after 0, 5, 20 and 40 steps (each its own inference from the same start),
     * each scored on 64 fresh draws: the NELBO falls with the steps beyond the scoring noise
     * (its standard error, printed, is < 1% of the gaps), and the reconstruction term itself
     * improves, not only the KL */
    const int steps[] = {0, 5, 20, 40};
    double nelbo[4], rec_ce[4];
    enum { S = 64 };
    double sce[S * B], skl[B];
    for (int i = 0; i < 4; i++) {
        ltm_infer_t oi = {.steps = steps[i], .lr = 0.1f, .key = 99, .row0 = 0};
        CHECK(ltm_infer(m, tok, tgt, mask, &oi, NULL, NULL, err, sizeof err) == 0, "%s", err);
        CHECK(ltm_score(m, tgt, mask, S, sce, skl, NULL, err, sizeof err) == 0, "%s", err);
        double c = 0, q = 0, sq = 0;
        for (int j = 0; j < S * B; j++) c += sce[j] / S;
        for (int b = 0; b < B; b++) q += skl[b];
        for (int s2 = 0; s2 < S; s2++) {
            double t = 0;
            for (int b = 0; b < B; b++) t += sce[s2 * B + b];
            sq += (t - c) * (t - c) / (S - 1);
        }
        nelbo[i] = c + q, rec_ce[i] = c;
        printf("  %2d steps: NELBO %.3f (se %.3f), CE %.3f, KL %.3f (nats, batch sums)\n", steps[i], nelbo[i],
               sqrt(sq / S), c, q);
        if (i) CHECK(nelbo[i] < nelbo[i - 1], "NELBO after %d steps %g, after %d %g", steps[i], nelbo[i], steps[i - 1], nelbo[i - 1]);
    }
    CHECK(rec_ce[3] < rec_ce[0], "reconstruction %g after vs %g before", rec_ce[3], rec_ce[0]);
    /* the training rate (0.3, its cosine within the 16 steps): not monotone (Adam overshoots
     * log sigma early on), but far down at the end */
    ltm_infer_t o16 = {.steps = 16, .lr = 0.3f, .key = 99, .row0 = 0, .record = rec, .n_record = 17};
    CHECK(ltm_infer(m, tok, tgt, mask, &o16, ce, kl, err, sizeof err) == 0, "%s", err);
    CHECK(ce[16] + kl[16] < 0.3 * (ce[0] + kl[0]), "rate 0.3, 16 steps: NELBO %g from %g", ce[16] + kl[16], ce[0] + kl[0]);
    /* and through the decoder: the same loop with the cross-attention's output at zero cannot
     * move the reconstruction (the test can fail) */
    for (int l = 0; l < c.n_layers; l++) {
        ltm_cross_w_t w = ltm_cross_weights(m, l);
        memset(w.wo, 0, sizeof(float) * c.d_model * c.d_model);
    }
    CHECK(ltm_infer(m, tok, tgt, mask, &o, ce, kl, err, sizeof err) == 0, "%s", err);
    CHECK(ce[K] == ce[0], "o_proj = 0: z cannot change the reconstruction (%g vs %g)", ce[K], ce[0]);
    ltm_destroy(&m);
}

/* The decoder's gradient after K inner steps against a 0-step model at the final posterior. */
static void grads_of(ltm_t *m, float *out, size_t *n) {
    int nv = ltm_grads(m, NULL, 0);
    tensor_view_t v[nv];
    ltm_grads(m, v, nv);
    size_t at = 0;
    for (int i = 0; i < nv; i++) {
        memcpy(out + at, v[i].data, sizeof(float) * tensor_numel(&v[i]));
        at += tensor_numel(&v[i]);
    }
    *n = at;
}
static void test_slow_gradient_at_final_posterior(void) {
    char err[256];
    model_config_t c3 = tiny(3, 4), c0 = tiny(0, 4);
    ltm_t *a = NULL, *z = NULL;
    CHECK(ltm_create(&a, &c3, B, T, 7, err, sizeof err) == 0, "%s", err);
    CHECK(ltm_create(&z, &c0, B, T, 7, err, sizeof err) == 0, "%s", err);
    if (!a || !z) goto out;
    ltm_check_scale_weights(a, 9, 0.3f);
    ltm_check_scale_weights(z, 9, 0.3f);
    const size_t NL = ltm_latent_numel(a);
    /* the noise of the 3 inner steps and of the final forward (stochastic VI: one draw each) */
    float *mu0 = normals(NL, 0, 0.01f, 1), *ls0 = normals(NL, -2.5f, 0.05f, 2), *eps = normals(4 * NL, 0, 1, 3);
    float *mu3 = malloc(sizeof(float) * NL), *ls3 = malloc(sizeof(float) * NL);
    uint32_t tok[B * T], tgt[B * T];
    batch(tok, tgt, NULL, 4);
    float la = 0, lz = 0, l0 = 0;
    ltm_zero_grad(a);
    ltm_set_posterior(a, mu0, ls0, eps, 4);
    CHECK(ltm_forward(a, tok, tgt, NULL, &la, err, sizeof err) == 0 && ltm_backward(a, err, sizeof err) == 0, "%s", err);
    ltm_posterior(a, mu3, ls3, NULL, NULL);
    CHECK(memcmp(mu3, mu0, sizeof(float) * NL) != 0, "the inner steps moved mu");
    size_t np = (size_t)family_param_count(family_find("ltm"), a);
    float *ga = malloc(sizeof(float) * np), *gz = malloc(sizeof(float) * np);
    grads_of(a, ga, &np);
    ltm_zero_grad(z);
    ltm_set_posterior(z, mu3, ls3, eps + 3 * NL, 1);   /* the final forward's draw */
    CHECK(ltm_forward(z, tok, tgt, NULL, &lz, err, sizeof err) == 0 && ltm_backward(z, err, sizeof err) == 0, "%s", err);
    grads_of(z, gz, &np);
    CHECK(la == lz, "loss after 3 steps %.9g vs at the final posterior %.9g", la, lz);
    CHECK(memcmp(ga, gz, sizeof(float) * np) == 0,
          "the decoder's gradient is not the one at the final posterior (it flows through the inner loop?)");
    /* and it is not the gradient at the starting posterior: the check can tell them apart */
    ltm_zero_grad(z);
    ltm_set_posterior(z, mu0, ls0, eps + 3 * NL, 1);
    CHECK(ltm_forward(z, tok, tgt, NULL, &l0, err, sizeof err) == 0 && ltm_backward(z, err, sizeof err) == 0, "%s", err);
    grads_of(z, gz, &np);
    CHECK(memcmp(ga, gz, sizeof(float) * np) != 0, "the starting posterior gives the same gradient");
    CHECK(l0 > la, "3 inner steps lowered the NELBO (%g -> %g)", l0, la);
    free(ga); free(gz); free(mu0); free(ls0); free(eps); free(mu3); free(ls3);
out:
    ltm_destroy(&a);
    ltm_destroy(&z);
}

/* Finite differences, in double around float forwards: steps of 1e-2 on O(1) inputs and the
 * sampled gradient vectors compared by relative error (tests/test_gradcheck.c's reasoning:
 * 1e-2 is two orders above the float noise, a wrong backward is off by O(1)). */
#define FD_EPS 1e-2
#define FD_TOL 2e-2
static double nelbo_sum(ltm_t *m, const float *mu, const float *ls, const float *eps,
                        const uint32_t *tok, const uint32_t *tgt, const uint8_t *mask) {
    char err[256];
    int rec = 0;
    double ce = 0, kl = 0;
    ltm_infer_t o = {.steps = 0, .lr = 0, .key = 1, .record = &rec, .n_record = 1};
    ltm_set_posterior(m, mu, ls, eps, 1);
    if (ltm_infer(m, tok, tgt, mask, &o, &ce, &kl, err, sizeof err)) return NAN;
    return ce + kl;
}
static void test_gradcheck_latents(void) {
    char err[256];
    model_config_t c = tiny(1, 3);
    ltm_t *m = NULL;
    CHECK(ltm_create(&m, &c, B, T, 13, err, sizeof err) == 0, "%s", err);
    if (!m) return;
    ltm_check_scale_weights(m, 21, 0.4f);
    const size_t NL = ltm_latent_numel(m);
    float *mu = normals(NL, 0, 1, 5), *ls = normals(NL, -0.5f, 0.3f, 6), *eps = normals(NL, 0, 1, 7);
    float *dmu = malloc(sizeof(float) * NL), *dls = malloc(sizeof(float) * NL);
    uint32_t tok[B * T], tgt[B * T];
    uint8_t mask[B * T];
    batch(tok, tgt, mask, 8);
    float loss;
    ltm_set_posterior(m, mu, ls, eps, 1);
    CHECK(ltm_forward(m, tok, tgt, mask, &loss, err, sizeof err) == 0, "%s", err);
    ltm_posterior(m, NULL, NULL, dmu, dls);  /* the first (only) inner step's gradients */
    rng_t r;
    rng_seed(&r, 77);
    for (int which = 0; which < 2; which++) {
        float *x = which ? ls : mu, *g = which ? dls : dmu;
        double dn = 0, nn = 0, na = 0;
        for (int s = 0; s < 30; s++) {
            size_t j = rng_below(&r, NL);
            float x0 = x[j];
            x[j] = x0 + FD_EPS;
            double lp = nelbo_sum(m, mu, ls, eps, tok, tgt, mask);
            x[j] = x0 - FD_EPS;
            double lm = nelbo_sum(m, mu, ls, eps, tok, tgt, mask);
            x[j] = x0;
            double num = (lp - lm) / (2 * FD_EPS), ana = g[j];
            dn += (num - ana) * (num - ana), nn += num * num, na += ana * ana;
        }
        double rel = sqrt(dn) / fmax(sqrt(nn), sqrt(na));
        CHECK(rel < FD_TOL && sqrt(na) > 1e-3, "d NELBO / d %s: relative error %.3g (|num| %.3g |ana| %.3g)",
              which ? "log sigma" : "mu", rel, sqrt(nn), sqrt(na));
    }
    free(mu); free(ls); free(eps); free(dmu); free(dls);
    ltm_destroy(&m);
}

static void test_gradcheck_weights(void) {
    char err[256];
    model_config_t c = tiny(0, 3);
    c.tied = 0;
    ltm_t *m = NULL;
    CHECK(ltm_create(&m, &c, B, T, 17, err, sizeof err) == 0, "%s", err);
    if (!m) return;
    ltm_check_scale_weights(m, 23, 0.3f);
    const size_t NL = ltm_latent_numel(m);
    float *mu = normals(NL, 0, 1, 15), *ls = normals(NL, -0.5f, 0.3f, 16), *eps = normals(NL, 0, 1, 17);
    uint32_t tok[B * T], tgt[B * T];
    uint8_t mask[B * T];
    batch(tok, tgt, mask, 18);
    float loss;
    ltm_zero_grad(m);
    ltm_set_posterior(m, mu, ls, eps, 1);
    CHECK(ltm_forward(m, tok, tgt, mask, &loss, err, sizeof err) == 0 && ltm_backward(m, err, sizeof err) == 0, "%s", err);
    int nv = ltm_params(m, NULL, 0);
    tensor_view_t pv[nv], gv[nv];
    ltm_params(m, pv, nv);
    ltm_grads(m, gv, nv);
    rng_t r;
    rng_seed(&r, 31);
    int checked = 0;
    for (int i = 0; i < nv; i++) {
        double dn = 0, nn = 0, na = 0;
        const int64_t n = tensor_numel(&pv[i]);
        for (int s = 0; s < 6; s++) {
            size_t j = rng_below(&r, (uint64_t)n);
            float x0 = pv[i].data[j], lp = 0, lm = 0;
            pv[i].data[j] = x0 + (float)FD_EPS;
            ltm_set_posterior(m, mu, ls, eps, 1);
            ltm_forward(m, tok, tgt, mask, &lp, err, sizeof err);
            pv[i].data[j] = x0 - (float)FD_EPS;
            ltm_set_posterior(m, mu, ls, eps, 1);
            ltm_forward(m, tok, tgt, mask, &lm, err, sizeof err);
            pv[i].data[j] = x0;
            double num = ((double)lp - lm) / (2 * FD_EPS), ana = gv[i].data[j];
            dn += (num - ana) * (num - ana), nn += num * num, na += ana * ana;
        }
        double den = fmax(sqrt(nn), sqrt(na));
        /* a tensor whose sampled entries carry no signal says nothing; the norms are checked
         * over all tensors below */
        if (den < 1e-4) continue;
        checked++;
        CHECK(sqrt(dn) / den < 5e-2, "d loss / d %s: relative error %.3g (|num| %.3g |ana| %.3g)", pv[i].name,
              sqrt(dn) / den, sqrt(nn), sqrt(na));
    }
    CHECK(checked >= nv - 2, "only %d of %d tensors carried a checkable gradient", checked, nv);
    free(mu); free(ls); free(eps);
    ltm_destroy(&m);
}

/* With o_proj = 0 the cross-attention adds nothing: the windowed baseline decoder's logits. */
static void test_zero_cross_is_baseline(void) {
    char err[256];
    model_config_t c = tiny(2, 4), lc = c;
    lc.kind = MODEL_LLAMA;
    ltm_t *m = NULL;
    llama_t *l = NULL;
    CHECK(ltm_create(&m, &c, B, T, 7, err, sizeof err) == 0, "%s", err);
    CHECK(llama_create(&l, &lc, B, T, 7, err, sizeof err) == 0, "%s", err);
    if (!m || !l) goto out;
    uint32_t tok[B * T], tgt[B * T];
    batch(tok, tgt, NULL, 3);
    const size_t nlg = (size_t)B * T * V;
    float loss, ll;
    CHECK(llama_forward(l, tok, tgt, NULL, &ll, err, sizeof err) == 0, "%s", err);
    CHECK(ltm_forward(m, tok, tgt, NULL, &loss, err, sizeof err) == 0, "%s", err);
    CHECK(memcmp(ltm_logits(m), llama_logits(l), sizeof(float) * nlg) != 0, "the latents change the logits");
    float *first = malloc(sizeof(float) * nlg);
    memcpy(first, ltm_logits(m), sizeof(float) * nlg);
    ltm_prior(m, 5, 0);
    CHECK(ltm_forward_z(m, tok, NULL, NULL, NULL, err, sizeof err) == 0, "%s", err);
    CHECK(memcmp(first, ltm_logits(m), sizeof(float) * nlg) != 0, "another z gives other logits");
    for (int k = 0; k < c.n_layers; k++) {
        ltm_cross_w_t w = ltm_cross_weights(m, k);
        memset(w.wo, 0, sizeof(float) * c.d_model * c.d_model);
    }
    CHECK(ltm_forward(m, tok, tgt, NULL, &loss, err, sizeof err) == 0, "%s", err);
    CHECK(memcmp(ltm_logits(m), llama_logits(l), sizeof(float) * nlg) == 0,
          "o_proj = 0: the LTM's logits differ from the windowed baseline's");
    free(first);
out:
    ltm_destroy(&m);
    llama_destroy(&l);
    CHECK(m == NULL, "destroy NULLs the handle");
}

/* The draws are a function of (seed, step, micro-batch): a resumed run redraws them. */
static void test_draws_follow_the_step(void) {
    char err[256];
    model_config_t c = tiny(2, 0);
    ltm_t *a = NULL, *b = NULL;
    CHECK(ltm_create(&a, &c, B, T, 3, err, sizeof err) == 0, "%s", err);
    CHECK(ltm_create(&b, &c, B, T, 3, err, sizeof err) == 0, "%s", err);
    if (!a || !b) goto out;
    uint32_t tok[B * T], tgt[B * T];
    batch(tok, tgt, NULL, 6);
    float la1, la2, lb1, lb2, lb3;
    ltm_set_step(a, 0);
    ltm_forward(a, tok, tgt, NULL, &la1, err, sizeof err);
    ltm_forward(a, tok, tgt, NULL, &la2, err, sizeof err);   /* the step's second micro-batch */
    ltm_set_step(b, 5);
    ltm_forward(b, tok, tgt, NULL, &lb3, err, sizeof err);
    ltm_set_step(b, 0);
    ltm_forward(b, tok, tgt, NULL, &lb1, err, sizeof err);
    ltm_forward(b, tok, tgt, NULL, &lb2, err, sizeof err);
    CHECK(la1 == lb1 && la2 == lb2, "the same step draws the same latents (%.9g %.9g vs %.9g %.9g)", la1, la2, lb1, lb2);
    CHECK(la1 != la2, "the step's micro-batches draw other latents");
    CHECK(lb3 != lb1, "another step draws other latents");
    family_metrics_t fm;
    ltm_metrics(a, &fm);
    double ce = NAN, kl = NAN, elbo = NAN, e0 = NAN;
    for (int i = 0; i < fm.n; i++) {
        if (!strcmp(fm.kv[i].name, "ce")) ce = fm.kv[i].value;
        if (!strcmp(fm.kv[i].name, "kl")) kl = fm.kv[i].value;
        if (!strcmp(fm.kv[i].name, "elbo")) elbo = fm.kv[i].value;
        if (!strcmp(fm.kv[i].name, "elbo_0")) e0 = fm.kv[i].value;
    }
    CHECK_CLOSE(ce + kl, elbo, 1e-6, 1e-6);
    CHECK_CLOSE(elbo, la2, 1e-5, 1e-6);
    CHECK(e0 > elbo, "2 inner steps lower the NELBO from %g (elbo_0) to %g", e0, elbo);
out:
    ltm_destroy(&a);
    ltm_destroy(&b);
}

static void test_views_config_flops(void) {
    char err[256];
    model_config_t c = tiny(4, 6);
    ltm_t *m = NULL;
    CHECK(ltm_create(&m, &c, B, T, 1, err, sizeof err) == 0, "%s", err);
    if (!m) return;
    int nv = ltm_params(m, NULL, 0);
    tensor_view_t v[nv];
    ltm_params(m, v, nv);
    llama_t *l = ltm_decoder(m);
    const int nd = llama_params(l, NULL, 0);
    CHECK(nv == nd + 5 * c.n_layers, "%d views", nv);
    CHECK(!strcmp(v[0].name, "model.embed_tokens.weight"), "decoder names first: %s", v[0].name);
    CHECK(!strcmp(v[nd].name, "model.layers.0.cross_attn_layernorm.weight") && v[nd].shape[0] == 16, "%s", v[nd].name);
    CHECK(!strcmp(v[nd + 2].name, "model.layers.0.cross_attn.k_proj.weight") && v[nd + 2].shape[0] == 8 &&
          v[nd + 2].shape[1] == 16, "%s", v[nd + 2].name);
    CHECK(!strcmp(v[nv - 1].name, "model.layers.1.cross_attn.o_proj.weight"), "%s", v[nv - 1].name);
    /* config.json round trip */
    json_t *j = ckpt_config_to_json(&c);
    model_config_t back;
    CHECK(j && ckpt_config_from_json(j, &back, err, sizeof err) == 0, "%s", err);
    CHECK(back.kind == MODEL_LTM && back.latent_vectors == 3 && back.sliding_window == 6 && back.inner_steps == 4 &&
          back.fast_lr == 0.3f && back.fast_lr_end == 0.34f && back.fast_lr_steps == 100, "LTM fields survive");
    json_object_set_new(j, "ft_latent_vectors", json_integer(0));
    CHECK(ckpt_config_from_json(j, &back, err, sizeof err) == CKPT_ECONFIG && strstr(err, "ft_latent_vectors"), "%s", err);
    json_decref(j);
    /* the fast rate's ramp */
    CHECK(ltm_fast_lr(&c, 0) == 0.3f && fabsf(ltm_fast_lr(&c, 99) - 0.34f) < 1e-7f && ltm_fast_lr(&c, 500) == ltm_fast_lr(&c, 99),
          "0.3 rising linearly to 0.34 at the last step");
    CHECK(ltm_inner_lr(0.3f, 0, 16) == 0.3f && fabsf(ltm_inner_lr(0.3f, 8, 16) - 0.165f) < 1e-6f &&
          ltm_inner_lr(0.3f, 15, 16) > 0.03f && ltm_inner_lr(0.3f, 15, 16) < 0.035f,
          "within a batch: a cosine from the peak to a tenth");
    /* FLOPs: 3 (K + 1) forwards; the window and the latents count */
    double f = ltm_forward_flops(&c, T);
    CHECK(ltm_train_flops(&c, T) == 3 * 5 * f, "trFLOPs = 3 (K+1) forward");
    model_config_t base = c;
    base.kind = MODEL_LLAMA;
    base.sliding_window = 0;
    CHECK(ltm_forward_flops(&base, T) < f, "the baseline counts no cross-attention");
    CHECK(ltm_train_flops(&base, T) == 3 * ltm_forward_flops(&base, T), "the baseline: one backward");
    ltm_destroy(&m);
    /* bad configs: one line each, no crash */
    const struct { int field, value; const char *needle; } bad[] = {
        {0, 0, "latent vectors"}, {1, 17, "sliding window"}, {2, -1, "inner steps"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        model_config_t b = tiny(1, 2);
        if (bad[i].field == 0) b.latent_vectors = bad[i].value;
        if (bad[i].field == 1) b.sliding_window = bad[i].value;
        if (bad[i].field == 2) b.inner_steps = bad[i].value;
        err[0] = 0;
        CHECK(ltm_create(&m, &b, B, T, 1, err, sizeof err) == LTM_ECONFIG && m == NULL && strstr(err, bad[i].needle),
              "bad config %zu: %s", i, err);
    }
}

int main(void) {
    RUN(test_inner_loop_optimises);
    RUN(test_slow_gradient_at_final_posterior);
    RUN(test_gradcheck_latents);
    RUN(test_gradcheck_weights);
    RUN(test_zero_cross_is_baseline);
    RUN(test_draws_follow_the_step);
    RUN(test_views_config_flops);
    return check_summary();
}
