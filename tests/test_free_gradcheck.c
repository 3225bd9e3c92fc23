/* tests/test_free_gradcheck.c: finite-difference checks of the Free Transformer's gradient.
 *
 * 1. The Binary Mapper against the FORMULA: for logits l (H) and a fixed random c (2^H),
 *    f(l) = sum_d c_d G_d(l) with G_d = exp(sum_h log P(B_h = b_h(d))) computed here in double
 *    straight from eq. 8; its central differences must equal binmap_backward's gradient.
 *    The same case shows that the straight-through shortcut (only the sampled entry d*:
 *    c_{d*} dG_{d*} / dl) is a different vector, so the test can tell the two apart.
 * 2. The post-sampler's backward (dense dZ = W^T dR in row chunks, through G) against the
 *    same formula with dZ computed by plain loops, over more rows than one chunk.
 * 3. The whole model with the uniforms fixed, every parameter group (zeta, the encoder block,
 *    its norm, the read-out, the post-sampler, the injection block, the decoder's first half
 *    and embedding whose X feeds both the encoder and the injection, the second half).
 *    The forward VALUE of Z is the one-hot: it is piecewise constant in the encoder's
 *    parameters, so finite differences of the plain loss only see the KL term there. What
 *    the backward differentiates is the estimator's surrogate, R = W_post (onehot(d0) + G(theta)
 *    - G(theta0)), equal to the plain R at theta0; the test evaluates that surrogate through
 *    free_set_r_offset (offset W_post (G - G0), G from free_encode at the perturbed theta)
 *    and checks the backward against its central differences. Perturbations must not flip a
 *    bit: the uniforms are placed at least 20% of min(p, 1-p) away from p, and every
 *    perturbed forward is checked to keep the same Z (a flip is reported as a failure).
 *    kappa sits in the widest gap between the positions' KL values so no position crosses
 *    the max(0, .) kink either.
 *
 * Tolerances: the forward runs in float, so the step cannot be tiny (tests/test_gradcheck.c
 * explains the noise budget). Here e = 3e-2, not 1e-2: the encoder's q/k gradients are small
 * (~3e-3, every query being zeta), and with e = 1e-2 float noise alone gave them errors of up
 * to 1.2e-2 on some seeds; at 3e-2 the worst over several seeds was 4e-3, while the O(e^2)
 * truncation stays ~1e-3. Sampled gradient vectors must agree to 1e-2 relative
 * (||num - ana|| / max norm); a missing term (e.g. no pass-through: the encoder would only
 * get the KL part) gives O(1). The double-precision formula checks of 1. and 2. are far
 * tighter (1e-4; float rounding of G and of the products is ~1e-6 relative). */
#include "common/rng.h"
#include "model/free.h"
#include "tests/check.h"
#include <stdlib.h>
#include <string.h>

#define EPS 3e-2f
#define TOL 1e-2
#define SAMPLES 24

static rng_t R;

/* G_d from eq. 8, in double */
static void probs_ref(double *G, const double *l, int H) {
    for (int d = 0; d < 1 << H; d++) {
        double s = 0;
        for (int h = 0; h < H; h++) {
            double p = 1.0 / (1.0 + exp(-l[h]));
            s += ((d >> h) & 1) ? log(p) : log(1.0 - p);
        }
        G[d] = exp(s);
    }
}

static double f_ref(const double *l, const double *c, int H) {
    double G[1 << 10], s = 0;
    probs_ref(G, l, H);
    for (int d = 0; d < 1 << H; d++) s += c[d] * G[d];
    return s;
}

static double vec_rel(const double *a, const double *b, int n) {
    double dn = 0, na = 0, nb = 0;
    for (int i = 0; i < n; i++) dn += (a[i] - b[i]) * (a[i] - b[i]), na += a[i] * a[i], nb += b[i] * b[i];
    double den = sqrt(na > nb ? na : nb);
    return den > 0 ? sqrt(dn) / den : sqrt(dn);
}

static void test_binmap_formula(void) {
    enum { H = 6, K = 1 << H };
    for (int trial = 0; trial < 5; trial++) {
        double l[H], c[K], num[H], ours[H], st[H];
        float lf[H], pf[H], cz[K], dl[H] = {0}, Gf[K], u[H];
        for (int h = 0; h < H; h++) l[h] = 1.5 * rng_normal(&R), lf[h] = (float)l[h];
        for (int d = 0; d < K; d++) c[d] = rng_normal(&R), cz[d] = (float)c[d];
        // central differences of f(l) = sum_d c_d G_d(l), in double (e = 1e-5: error ~1e-10)
        for (int h = 0; h < H; h++) {
            double lp[H], lm[H];
            memcpy(lp, l, sizeof l), memcpy(lm, l, sizeof l);
            lp[h] += 1e-5, lm[h] -= 1e-5;
            num[h] = (f_ref(lp, c, H) - f_ref(lm, c, H)) / 2e-5;
        }
        for (int h = 0; h < H; h++) u[h] = rng_f32(&R);
        uint32_t d0;
        binmap_forward(&d0, pf, lf, u, 1, H);
        binmap_probs(Gf, pf, H);
        double G[K];
        probs_ref(G, l, H);
        double gerr = 0;
        for (int d = 0; d < K; d++) gerr = fmax(gerr, fabs(Gf[d] - G[d]));
        CHECK(gerr < 1e-6, "binmap_probs vs eq. 8: max err %.3g", gerr);
        // the sampled index is the bits u < p
        uint32_t dref = 0;
        for (int h = 0; h < H; h++) dref |= (uint32_t)(u[h] < 1.0 / (1.0 + exp(-l[h]))) << h;
        CHECK(d0 == dref, "index %u vs %u", d0, dref);
        binmap_backward(dl, cz, pf, 1, H);
        for (int h = 0; h < H; h++) {
            double p = 1.0 / (1.0 + exp(-l[h]));
            ours[h] = dl[h];
            st[h] = c[d0] * G[d0] * ((((d0 >> h) & 1) ? 1.0 : 0.0) - p); /* sampled entry only */
        }
        double e = vec_rel(ours, num, H), e_st = vec_rel(st, num, H);
        if (trial == 0) printf("binmap: ours vs formula %.3g, straight-through-on-sampled vs formula %.3g\n", e, e_st);
        CHECK(e < 1e-4, "trial %d: binmap gradient vs formula rel err %.3g", trial, e);
        CHECK(e_st > 0.1, "trial %d: the sampled-entry shortcut should differ (rel %.3g)", trial, e_st);
    }
}

/* post_sampler_backward over N rows (more than one 64-row chunk) against the formula with
 * dZ = W^T dR by plain loops in double. */
static void post_sampler_case(int H, int D, int N) {
    const int K = 1 << H;
    float *w = malloc(sizeof(float) * D * K), *dr = malloc(sizeof(float) * N * D);
    float *lg = malloc(sizeof(float) * N * H), *p = malloc(sizeof(float) * N * H), *u = malloc(sizeof(float) * N * H);
    float *dl = calloc(N * H, sizeof(float)), *dw = calloc((size_t)D * K, sizeof(float)), *r = malloc(sizeof(float) * N * D);
    size_t wf = post_sampler_work_floats(D, H, 2);
    float *work = malloc(sizeof(float) * wf);
    double *c = malloc(sizeof(double) * K), *G = malloc(sizeof(double) * K), *dwr = calloc((size_t)D * K, sizeof(double));
    uint32_t *idx = malloc(sizeof(uint32_t) * N);
    for (int i = 0; i < D * K; i++) w[i] = rng_normal(&R);
    for (int i = 0; i < N * D; i++) dr[i] = rng_normal(&R);
    for (int i = 0; i < N * H; i++) lg[i] = rng_normal(&R), u[i] = rng_f32(&R);
    binmap_forward(idx, p, lg, u, N, H);
    post_sampler_forward(r, w, idx, N, D, H);
    int gather_ok = 1;
    for (int n = 0; n < N; n++)
        for (int i = 0; i < D; i++) gather_ok &= r[n * D + i] == w[(size_t)i * K + idx[n]];
    CHECK(gather_ok, "H=%d: R is the column W_post[:, d]", H);
    post_sampler_backward(dw, dl, dr, w, idx, p, N, D, H, work, wf);
    double worst = 0;
    for (int n = 0; n < N; n++) {
        double l[32], ref[32], ours[32];
        for (int h = 0; h < H; h++) l[h] = lg[n * H + h];
        for (int d = 0; d < K; d++) {
            c[d] = 0;
            for (int i = 0; i < D; i++) c[d] += (double)w[(size_t)i * K + d] * dr[n * D + i];
        }
        probs_ref(G, l, H);
        for (int h = 0; h < H; h++) {
            double pp = 1.0 / (1.0 + exp(-l[h])), s = 0;
            for (int d = 0; d < K; d++) s += c[d] * G[d] * (((d >> h) & 1) - pp);
            ref[h] = s, ours[h] = dl[n * H + h];
        }
        worst = fmax(worst, vec_rel(ours, ref, H));
    }
    printf("post-sampler H=%d N=%d: worst row rel err %.3g\n", H, N, worst);
    CHECK(worst < 1e-4, "H=%d: post-sampler pass-through gradient vs formula: worst row rel err %.3g", H, worst);
    // dW: column idx[n] gets dr[n] (Z's value is the one-hot), nothing else
    for (int n = 0; n < N; n++)
        for (int i = 0; i < D; i++) dwr[(size_t)i * K + idx[n]] += dr[n * D + i];
    double e = 0;
    for (size_t i = 0; i < (size_t)D * K; i++) e = fmax(e, fabs(dw[i] - dwr[i]));
    CHECK(e < 1e-5, "H=%d: dW_post max err %.3g", H, e);
    // the chunks run in parallel, each with its own buffer: one buffer (one thread) gives
    // the same bits
    size_t wf1 = post_sampler_work_floats(D, H, 1);
    float *dl1 = calloc(N * H, sizeof(float)), *dw1 = calloc((size_t)D * K, sizeof(float));
    post_sampler_backward(dw1, dl1, dr, w, idx, p, N, D, H, work, wf1);
    CHECK(!memcmp(dl1, dl, sizeof(float) * N * H) && !memcmp(dw1, dw, sizeof(float) * D * K),
          "H=%d: post-sampler gradients differ between 1 and 2 work buffers", H);
    free(dl1), free(dw1);
    free(w), free(dr), free(lg), free(p), free(u), free(dl), free(dw), free(r), free(work);
    free(c), free(G), free(dwr), free(idx);
}

static void test_post_sampler_backward(void) { post_sampler_case(5, 12, 150); }
/* the paper's H = 16: 65,536 latent values, computed exactly (a few rows keep it fast) */
static void test_post_sampler_h16(void) { post_sampler_case(16, 8, 3); }

/* ---- the whole model ---- */
enum { B = 2, T = 8, H = 4, K = 1 << H, D = 32, V = 32 };

typedef struct {
    free_t *m;
    uint32_t tok[B * T], tgt[B * T], z0[B * T];
    uint8_t mask[B * T];
    float G0[B * T * K];
    int surrogate, flips;
} mctx_t;

static void probs_of(free_t *m, float *G) {
    const float *bl = free_bit_logits(m);
    for (int n = 0; n < B * T; n++) {
        float p[H];
        for (int h = 0; h < H; h++) p[h] = 1.0f / (1.0f + expf(-bl[n * H + h]));
        binmap_probs(G + n * K, p, H);
    }
}

/* The loss at the current parameters; with surrogate, R = W_post (onehot(d) + G - G0). */
static double mloss(mctx_t *c) {
    char err[256];
    if (c->surrogate) {
        static float G[B * T * K], off[B * T * D];
        free_encode(c->m, c->tok, err, sizeof err);
        probs_of(c->m, G);
        const float *w = free_weights(c->m).post;
        for (int n = 0; n < B * T; n++)
            for (int i = 0; i < D; i++) {
                double s = 0;
                for (int d = 0; d < K; d++) s += (double)w[i * K + d] * (G[n * K + d] - c->G0[n * K + d]);
                off[n * D + i] = (float)s;
            }
        free_set_r_offset(c->m, off);
    }
    float l = 0;
    int rc = free_forward(c->m, c->tok, c->tgt, c->mask, &l, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    if (memcmp(free_z(c->m), c->z0, sizeof c->z0)) c->flips++;
    free_set_r_offset(c->m, NULL);
    return l;
}

static void check_group(mctx_t *c, const char *name, float *x, const float *dx, size_t n,
                        const uint32_t *cols /* post-sampler: sample the used columns */) {
    double num[SAMPLES] = {0}, ana[SAMPLES] = {0};
    int ns = n < SAMPLES ? (int)n : SAMPLES;
    for (int s = 0; s < ns; s++) {
        size_t j = n <= SAMPLES ? (size_t)s : rng_below(&R, n);
        if (cols) j = rng_below(&R, D) * K + cols[rng_below(&R, B * T)];
        float x0 = x[j];
        x[j] = x0 + EPS;
        double lp = mloss(c);
        x[j] = x0 - EPS;
        double lm = mloss(c);
        x[j] = x0;
        num[s] = (lp - lm) / (2.0 * EPS);
        ana[s] = dx[j];
    }
    double e = vec_rel(ana, num, ns), norm = 0;
    for (int s = 0; s < ns; s++) norm += ana[s] * ana[s];
    printf("%-48s rel err %.3g (|grad| %.3g)\n", name, e, sqrt(norm));
    CHECK(e < TOL, "%s: rel err %.3g", name, e);
    CHECK(norm > 1e-12, "%s: the sampled gradient is zero, nothing was checked", name);
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static void test_model(void) {
    char err[256];
    model_config_t cfg = {.kind = MODEL_FREE, .vocab_size = V, .d_model = D, .n_layers = 4, .n_heads = 4,
                          .n_kv_heads = 2, .d_ff = 48, .max_seq = T, .rope_theta = 10000.f,
                          .norm_eps = 1e-5f, .tied = 1, .latent_bits = H, .kappa_nats = 0};
    static mctx_t c;
    memset(&c, 0, sizeof c);
    for (int i = 0; i < B * T; i++) {
        c.tok[i] = (uint32_t)rng_below(&R, V), c.tgt[i] = (uint32_t)rng_below(&R, V);
        c.mask[i] = i != 3;
    }
    for (int pass = 0; pass < 2; pass++) {
        free_destroy(&c.m);
        CHECK(free_create(&c.m, &cfg, B, T, 11, err, sizeof err) == 0, "%s", err);
        if (!c.m) return;
        /* weights of std 0.1 (matrices) and a larger read-out so attention is far from uniform,
         * gradients are well above the float noise and KL_t ~ 0.1..1 nats */
        tensor_view_t v[80];
        int nv = free_params(c.m, v, 80);
        rng_t wr;
        rng_seed(&wr, 77);
        for (int i = 0; i < nv; i++)
            for (int64_t j = 0; j < tensor_numel(&v[i]); j++)
                v[i].data[j] = v[i].ndim == 2 ? 0.1f * rng_normal(&wr)
                             : (v[i].data == free_weights(c.m).zeta ? 0.5f * rng_normal(&wr)
                                                                   : 1.0f + 0.1f * rng_normal(&wr));
        free_w_t w = free_weights(c.m);
        for (int i = 0; i < H * D; i++) w.readout[i] = 0.3f * rng_normal(&wr);
        for (int i = 0; i < D * K; i++) w.post[i] = 0.5f * rng_normal(&wr);
        free_encode(c.m, c.tok, err, sizeof err);
        if (pass == 0) {
            /* kappa in the middle of the widest gap between KL values near the median */
            float kl[B * T];
            memcpy(kl, free_kl(c.m), sizeof kl);
            qsort(kl, B * T, sizeof(float), cmp_float);
            int best = B * T / 4;
            for (int i = B * T / 4; i < 3 * B * T / 4; i++)
                if (kl[i + 1] - kl[i] > kl[best + 1] - kl[best]) best = i;
            cfg.kappa_nats = 0.5f * (kl[best] + kl[best + 1]);
            printf("kappa %.4f nats (gap %.4f), KL from %.4f to %.4f\n", cfg.kappa_nats,
                   kl[best + 1] - kl[best], kl[0], kl[B * T - 1]);
        }
    }
    // uniforms far from p so no perturbation flips a bit
    const float *bl = free_bit_logits(c.m);
    float u[B * T * H];
    for (int i = 0; i < B * T * H; i++) {
        float p = 1.0f / (1.0f + expf(-bl[i])), r = 0.2f + 0.6f * rng_f32(&R);
        u[i] = rng_below(&R, 2) ? p * r : p + (1.0f - p) * r;
    }
    free_set_uniforms(c.m, u);
    probs_of(c.m, c.G0);
    float loss;
    free_zero_grad(c.m);
    CHECK(free_forward(c.m, c.tok, c.tgt, c.mask, &loss, err, sizeof err) == 0, "%s", err);
    memcpy(c.z0, free_z(c.m), sizeof c.z0);
    family_metrics_t fm;
    free_metrics(c.m, &fm);
    printf("loss %.5f, kl_above_kappa %.3f\n", loss, fm.kv[3].value);
    CHECK(fm.kv[3].value > 0 && fm.kv[3].value < 1, "KL on both sides of kappa");
    CHECK(free_backward(c.m, err, sizeof err) == 0, "%s", err);
    tensor_view_t pv[80], gv[80];
    int np = free_params(c.m, pv, 80);
    free_grads(c.m, gv, 80);
    /* copy the gradients: the finite differences run forwards only, but keep them safe */
    float *gcopy[80];
    for (int i = 0; i < np; i++) {
        gcopy[i] = malloc(sizeof(float) * tensor_numel(&gv[i]));
        memcpy(gcopy[i], gv[i].data, sizeof(float) * tensor_numel(&gv[i]));
    }
    const char *want[] = {"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
                          "model.layers.1.mlp.down_proj.weight", "model.layers.1.input_layernorm.weight",
                          "model.layers.2.self_attn.k_proj.weight", "model.layers.2.self_attn.v_proj.weight",
                          "model.layers.2.self_attn.q_proj.weight", "model.layers.2.input_layernorm.weight",
                          "model.layers.3.mlp.up_proj.weight", "model.norm.weight",
                          "free.zeta", "free.encoder.input_layernorm.weight",
                          "free.encoder.self_attn.q_proj.weight", "free.encoder.self_attn.k_proj.weight",
                          "free.encoder.self_attn.v_proj.weight", "free.encoder.self_attn.o_proj.weight",
                          "free.encoder.post_attention_layernorm.weight", "free.encoder.mlp.gate_proj.weight",
                          "free.encoder.mlp.up_proj.weight", "free.encoder.mlp.down_proj.weight",
                          "free.encoder_norm.weight", "free.readout.weight", "free.post_sampler.weight"};
    c.surrogate = 1;
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        int i = 0;
        while (i < np && strcmp(pv[i].name, want[k])) i++;
        CHECK(i < np, "no parameter %s", want[k]);
        if (i == np) continue;
        check_group(&c, want[k], pv[i].data, gcopy[i], tensor_numel(&pv[i]),
                    !strcmp(want[k], "free.post_sampler.weight") ? c.z0 : NULL);
    }
    CHECK(c.flips == 0, "%d perturbed forwards flipped a bit", c.flips);
    // downstream of the Binary Mapper the surrogate and the plain loss coincide
    c.surrogate = 0;
    for (int i = 0; i < np; i++)
        if (!strcmp(pv[i].name, "model.layers.3.mlp.up_proj.weight"))
            check_group(&c, "plain loss: model.layers.3.mlp.up_proj.weight", pv[i].data, gcopy[i],
                        tensor_numel(&pv[i]), NULL);
    for (int i = 0; i < np; i++) free(gcopy[i]);
    free_destroy(&c.m);
}

int main(void) {
    rng_seed(&R, 2024);
    RUN(test_binmap_formula);
    RUN(test_post_sampler_backward);
    RUN(test_post_sampler_h16);
    RUN(test_model);
    return check_summary();
}
