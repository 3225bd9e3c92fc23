/* tests/test_ltm_bound.c: the Latent-thought LM's reported bounds are bounds on an exact NLL.
 *
 * A tiny LTM whose latent has two dimensions (one layer, m = 1 latent vector, d_model = 2), its
 * weights drawn large so that p(x | z) depends strongly on z: each row's posterior is far
 * narrower than the prior, the case where a bound can go wrong. Its exact
 * -log p(x) = -log integral p(x | z) N(z; 0, I) dz is computed by quadrature: a uniform grid
 * over [-R, R]^2 (the prior's mass outside is < 1e-10 of it), p(x | z) from the model itself, one
 * grid point per batch row; the grid's step is halved to show the sum has converged.
 *
 * - What the evaluator reports (docs/evaluator.md): the posterior fitted by stochastic VI
 *   (ltm_infer, a fresh eps per step), scored on S fresh draws (ltm_score), summed by
 *   eval_ltm_accumulate: the NELBO and the importance-weighted bound, each with its standard
 *   error. Both must lie above the exact NLL (within 3 standard errors: they are Monte Carlo
 *   estimates of quantities >= it), and the IWAE bound below the NELBO.
 * - The estimator the evaluator used before (one eps kept through the inner steps and the
 *   score, ltm_set_posterior with one draw) lands below the exact NLL by far more than any
 *   standard error: this test would have caught that flaw. */
#include "common/rng.h"
#include "evaluator/latent.h"
#include "model/ltm.h"
#include "tests/check.h"
#include "tests/ltm_check.h"
#include <stdlib.h>
#include <string.h>

enum { V = 8, T = 8, R = 4 /* rows */, D = 2, CHUNK = 2048 };
#define BOX 7.0    /* the grid's half-width: prior mass outside < 2 e^{-24.5} */

static model_config_t tiny(void) {
    return (model_config_t){.kind = MODEL_LTM, .vocab_size = V, .d_model = D, .n_layers = 1, .n_heads = 1,
                            .n_kv_heads = 1, .d_ff = 8, .max_seq = T, .rope_theta = 10000.f, .norm_eps = 1e-5f,
                            .tied = 1, .sliding_window = 0, .latent_vectors = 1, .inner_steps = 0,
                            .fast_lr = 0.1f, .fast_lr_end = 0.1f, .fast_lr_steps = 1};
}

/* log p(row | z) + log N(z; 0, I) at n points z (n, 2), a batch of CHUNK rows at a time: the
 * posterior at z = mu with sigma = e^-40 (mu to float precision), scored on one draw. */
static int log_terms(ltm_t *m, const uint32_t *tok, const uint32_t *tgt, const float *z, int n, double *out) {
    char err[256];
    uint32_t *rt = malloc(sizeof(uint32_t) * CHUNK * T), *rg = malloc(sizeof(uint32_t) * CHUNK * T);
    float *ls = malloc(sizeof(float) * CHUNK * D), *eps = calloc(CHUNK * D, sizeof(float));
    double *ce = malloc(sizeof(double) * CHUNK);
    int rc = 0;
    for (int b = 0; b < CHUNK; b++) {
        memcpy(rt + b * T, tok, sizeof(uint32_t) * T);
        memcpy(rg + b * T, tgt, sizeof(uint32_t) * T);
    }
    for (int i = 0; i < CHUNK * D; i++) ls[i] = -40.0f;
    for (int at = 0; at < n && !rc; at += CHUNK) {
        const int B = n - at < CHUNK ? n - at : CHUNK;
        ltm_infer_t o = {.steps = 0, .lr = 0, .key = 1};
        rc = ltm_set_shape(m, B, T, err, sizeof err) || ltm_set_posterior(m, z + (size_t)at * D, ls, eps, 1) ||
             ltm_infer(m, rt, rg, NULL, &o, NULL, NULL, err, sizeof err) ||
             ltm_score(m, rg, NULL, 1, ce, NULL, NULL, err, sizeof err);
        if (rc) CHECK(0, "quadrature forward: %s", err);
        for (int b = 0; !rc && b < B; b++) {
            const double z0 = z[(size_t)(at + b) * D], z1 = z[(size_t)(at + b) * D + 1];
            out[at + b] = -ce[b] - 0.5 * (z0 * z0 + z1 * z1);
        }
    }
    free(rt), free(rg), free(ls), free(eps), free(ce);
    return rc;
}

/* -log p(row) = -log integral p(row | z) N(z; 0, I) dz by the midpoint rule: a coarse grid of
 * step H over [-BOX, BOX]^2, whose cells within 12 nats of the largest are each split into
 * sub x sub cells. The cells left coarse keep their coarse term, each < e^-12 of the largest:
 * their rule's error is a small part of a negligible mass. */
#define H 0.2
static double exact_nll(ltm_t *m, const uint32_t *tok, const uint32_t *tgt, const int *subs, int nsub, double *out) {
    const int n1 = (int)(2 * BOX / H + 0.5), n = n1 * n1;
    float *z = malloc(sizeof(float) * n * D);
    double *coarse = malloc(sizeof(double) * n), *terms = NULL, mx = -INFINITY;
    for (int i = 0; i < n; i++) {
        z[i * D] = (float)(-BOX + H * (i % n1 + 0.5));
        z[i * D + 1] = (float)(-BOX + H * (i / n1 + 0.5));
    }
    if (log_terms(m, tok, tgt, z, n, coarse)) goto out;
    for (int i = 0; i < n; i++) mx = fmax(mx, coarse[i]);
    int sig = 0;
    for (int i = 0; i < n; i++) sig += coarse[i] > mx - 12;
    printf("  %d of %d coarse cells refined\n", sig, n);
    for (int s = 0; s < nsub; s++) {
        const int k = subs[s], nf = sig * k * k;
        const double h = H / k;
        float *zf = malloc(sizeof(float) * (nf > 0 ? nf : 1) * D);
        terms = realloc(terms, sizeof(double) * (n + nf));
        int f = 0;
        for (int i = 0; i < n; i++) {   /* a cell: coarse (its own weight H^2) or refined */
            if (coarse[i] <= mx - 12) { terms[i] = coarse[i] + log(H * H); continue; }
            terms[i] = -INFINITY;
            const double x0 = -BOX + H * (i % n1), y0 = -BOX + H * (i / n1);
            for (int a = 0; a < k; a++)
                for (int b = 0; b < k; b++, f++) {
                    zf[f * D] = (float)(x0 + h * (a + 0.5));
                    zf[f * D + 1] = (float)(y0 + h * (b + 0.5));
                }
        }
        if (log_terms(m, tok, tgt, zf, nf, terms + n)) { free(zf); goto out; }
        for (int j = 0; j < nf; j++) terms[n + j] += log(h * h);
        out[s] = -(eval_logmeanexp(terms, n + nf) + log((double)(n + nf)) - log(2 * M_PI));
        free(zf);
    }
out:
    free(z), free(coarse), free(terms);
    return 0;
}

static void test_bounds_against_exact_nll(void) {
    char err[256];
    model_config_t c = tiny();
    ltm_t *m = NULL;
    CHECK(ltm_create(&m, &c, CHUNK, T, 3, err, sizeof err) == 0, "%s", err);
    if (!m) return;
    ltm_check_scale_weights(m, 41, 1.5f);   /* a decoder whose output moves a lot with z */
    uint32_t tok[R * T], tgt[R * T];
    rng_t r;
    rng_seed(&r, 9);
    for (int i = 0; i < R * T; i++) tok[i] = (uint32_t)rng_below(&r, V), tgt[i] = (uint32_t)rng_below(&r, V);

    // the exact NLL of each row, at grid steps 0.1 and 0.05 where the mass is
    const int subs[] = {2, 4};
    double e[2], exact = 0, coarser = 0;
    for (int b = 0; b < R; b++) {
        exact_nll(m, tok + b * T, tgt + b * T, subs, 2, e);
        printf("  row %d: exact -log p(x) %.5f, %.5f (grid steps 0.1, 0.05)\n", b, e[0], e[1]);
        exact += e[1], coarser += e[0];
    }
    /* the midpoint rule's error falls as h^2: the last step changed the sum by |d|, so what
     * is left is about |d| / 3; 0.01 nats is 100 times below the gaps checked below */
    CHECK(fabs(exact - coarser) < 0.01, "the quadrature has not converged: %.6f vs %.6f", exact, coarser);

    // what the evaluator reports: stochastic VI, then S fresh draws
    enum { K = 100, S = 256, KW = 16 };
    const float lr = 0.1f;
    CHECK(ltm_set_shape(m, R, T, err, sizeof err) == 0, "%s", err);
    ltm_infer_t o = {.steps = K, .lr = lr, .key = 7, .row0 = 0};
    double *ce = malloc(sizeof(double) * S * R), *logw = malloc(sizeof(double) * S * R), kl[R];
    eval_ltm_acc_t acc = {0};
    CHECK(ltm_infer(m, tok, tgt, NULL, &o, NULL, NULL, err, sizeof err) == 0, "%s", err);
    CHECK(ltm_score(m, tgt, NULL, S, ce, kl, logw, err, sizeof err) == 0, "%s", err);
    CHECK(eval_ltm_accumulate(&acc, ce, kl, logw, S, R, KW) == 0, "accumulate");
    const double nelbo = acc.ce + acc.kl, se = sqrt(acc.var_nelbo), iw = acc.iw, iw_se = sqrt(acc.var_iw);

    // the pre-fix estimator: the same start, one eps through the K steps and the score
    const size_t NL = ltm_latent_numel(m);
    float *mu0 = malloc(sizeof(float) * NL), *ls0 = malloc(sizeof(float) * NL), *eps = malloc(sizeof(float) * NL);
    rng_seed(&r, 12);
    for (size_t i = 0; i < NL; i++)
        mu0[i] = 0.01f * rng_normal(&r), ls0[i] = -2.5f + 0.05f * rng_normal(&r), eps[i] = rng_normal(&r);
    int rec = K;
    double fce = 0, fkl = 0;
    ltm_infer_t of = {.steps = K, .lr = lr, .key = 7, .row0 = 0, .record = &rec, .n_record = 1};
    CHECK(ltm_set_posterior(m, mu0, ls0, eps, 1) == 0, "set posterior");
    CHECK(ltm_infer(m, tok, tgt, NULL, &of, &fce, &fkl, err, sizeof err) == 0, "%s", err);
    const double fixed = fce + fkl;

    printf("  sums over %d rows (nats): exact NLL %.4f; NELBO %.4f +- %.4f (KL %.4f); IWAE(%d) %.4f +- %.4f; "
           "fixed-noise fit %.4f\n", R, exact, nelbo, se, acc.kl, KW, iw, iw_se, fixed);
    CHECK(nelbo > exact - 3 * se, "the NELBO %.4f +- %.4f is below the exact NLL %.4f", nelbo, se, exact);
    CHECK(iw > exact - 3 * iw_se, "the IWAE bound %.4f +- %.4f is below the exact NLL %.4f", iw, iw_se, exact);
    CHECK(iw < nelbo, "the IWAE bound %.4f is not tighter than the NELBO %.4f", iw, nelbo);
    /* the bound is informative, not just large: within a few nats of the exact NLL */
    CHECK(nelbo < exact + 0.25 * R * T, "the NELBO %.4f is far above the exact NLL %.4f", nelbo, exact);
    CHECK(fixed < exact - 1.0 && fixed < exact - 10 * se,
          "the fixed-noise estimator %.4f should fall below the exact NLL %.4f", fixed, exact);
    free(ce), free(logw), free(mu0), free(ls0), free(eps);
    ltm_destroy(&m);
}

int main(void) {
    RUN(test_bounds_against_exact_nll);
    return check_summary();
}
