/* tests/test_ltm_ref.c: the C Latent-Thought LM against the PyTorch reference
 * (tests/ref/ltm_ref.py: the windowed decoder with cross-attention to z written in torch,
 * autograd for every gradient, torch.optim.AdamW for the fast step).
 *
 * Load the reference's weights, its posterior start (mu0, ls0) and the noise of the inner step
 * and of the final forward (eps, eps1: stochastic VI draws one per step), run one training
 * forward with one inner step and its backward, and compare: the inner step's gradients
 * d NELBO / d mu and d log sigma at the start and the NELBO's terms there; the posterior after
 * the fast AdamW step; the final logits, CE, KL and loss; every parameter's gradient.
 *
 * Errors per tensor are max|ours - ref| / max|ref| (as tests/test_llama_ref.c). Both sides
 * compute in float32 with different summation orders; measured errors (printed) are ~1e-7 to
 * 1e-6, so 2e-5 keeps an order of magnitude of margin, while a real bug (no window, RoPE
 * missing on the latents' keys or at other positions, z normed, the cross-attention after the
 * MLP, a KL in log-variance units, the Adam step without decay) moves some tensor by 1e-2 or
 * more. The posterior after the step: each coordinate moves by about the fast rate (Adam's
 * first step is ~ lr sign(g)), so it is compared to 1e-5 absolute. */
#include "model/ltm.h"
#include "model/safetensors.h"
#include "tests/check.h"
#include "tests/ref_check.h"
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define TOL 2e-5
#define TOL_LOSS 1e-5   /* relative, on losses of ~10 */

static double metric(ltm_t *m, const char *name) {
    family_metrics_t fm;
    ltm_metrics(m, &fm);
    for (int i = 0; i < fm.n; i++)
        if (!strcmp(fm.kv[i].name, name)) return fm.kv[i].value;
    return NAN;
}

static void test_against_torch(void) {
    char err[512];
    st_file_t *init = NULL, *ref = NULL;
    int rc = st_open(&init, "tests/fixtures/ltm_tiny_init.safetensors", err, sizeof err);
    CHECK(rc == 0, "%s", err);
    rc |= st_open(&ref, "tests/fixtures/ltm_tiny_ref.safetensors", err, sizeof err);
    CHECK(rc == 0, "%s", err);
    json_error_t je;
    json_t *jc = rc ? NULL : json_loads(st_meta_get(ref, "config") ? st_meta_get(ref, "config") : "", 0, &je);
    CHECK(jc != NULL, "no config metadata");
    ltm_t *m = NULL;
    uint32_t *tok = NULL, *tgt = NULL;
    uint8_t *mask = NULL;
    float *mu1 = NULL, *ls1 = NULL, *dmu = NULL, *dls = NULL, *noise = NULL;
    if (!jc) goto out;
    model_config_t cfg = {.kind = MODEL_LTM, .vocab_size = ref_jint(jc, "vocab_size"), .d_model = ref_jint(jc, "d_model"),
                          .n_layers = ref_jint(jc, "n_layers"), .n_heads = ref_jint(jc, "n_heads"),
                          .n_kv_heads = ref_jint(jc, "n_kv_heads"), .d_ff = ref_jint(jc, "d_ff"),
                          .max_seq = ref_jint(jc, "max_seq"), .rope_theta = (float)ref_jnum(jc, "rope_theta"),
                          .norm_eps = (float)ref_jnum(jc, "norm_eps"), .tied = ref_jint(jc, "tied"),
                          .sliding_window = ref_jint(jc, "sliding_window"), .latent_vectors = ref_jint(jc, "latent_vectors"),
                          .inner_steps = 1, .fast_lr = (float)ref_jnum(jc, "fast_lr"),
                          .fast_lr_end = (float)ref_jnum(jc, "fast_lr"), .fast_lr_steps = 1};
    const int B = ref_jint(jc, "B"), T = ref_jint(jc, "T"), N = B * T, V = cfg.vocab_size;
    rc = ltm_create(&m, &cfg, B, T, 1, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    if (rc) goto out;
    tensor_view_t pv[128], gv[128];
    const int np = ltm_params(m, pv, 128);
    CHECK(np <= 128, "%d views", np);
    ltm_grads(m, gv, np);
    CHECK(st_count(init) == np, "init has %d tensors, model %d", st_count(init), np);
    rc = st_read_into(init, pv, np, 1, err, sizeof err);
    CHECK(rc == np, "loading weights: %s", err);
    const int64_t NL = (int64_t)ltm_latent_numel(m);
    const float *tf = ref_get(ref, "tokens", N), *gf = ref_get(ref, "targets", N), *mf = ref_get(ref, "mask", N);
    const float *mu0 = ref_get(ref, "mu0", NL), *ls0 = ref_get(ref, "ls0", NL), *eps = ref_get(ref, "eps", NL);
    const float *eps1 = ref_get(ref, "eps1", NL);
    if (!tf || !gf || !mf || !mu0 || !ls0 || !eps || !eps1) goto out;
    noise = malloc(sizeof(float) * 2 * NL);
    memcpy(noise, eps, sizeof(float) * NL);
    memcpy(noise + NL, eps1, sizeof(float) * NL);
    tok = malloc(sizeof(uint32_t) * N), tgt = malloc(sizeof(uint32_t) * N), mask = malloc(N);
    int count = 0;
    for (int i = 0; i < N; i++) tok[i] = (uint32_t)tf[i], tgt[i] = (uint32_t)gf[i], mask[i] = mf[i] != 0, count += mask[i];
    ltm_set_posterior(m, mu0, ls0, noise, 2);
    float loss = 0;
    ltm_zero_grad(m);
    rc = ltm_forward(m, tok, tgt, mask, &loss, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    rc = ltm_backward(m, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    // the inner step: its gradients at the start, the NELBO there, the posterior after it
    mu1 = malloc(sizeof(float) * NL), ls1 = malloc(sizeof(float) * NL);
    dmu = malloc(sizeof(float) * NL), dls = malloc(sizeof(float) * NL);
    ltm_posterior(m, mu1, ls1, dmu, dls);
    ref_compare("d NELBO / d mu (inner step)", dmu, ref_get(ref, "grad.mu", NL), NL, TOL);
    ref_compare("d NELBO / d log sigma (inner step)", dls, ref_get(ref, "grad.ls", NL), NL, TOL);
    const float *ce0 = ref_get(ref, "ce0_sum", 1), *kl0 = ref_get(ref, "kl0_sum", 1);
    if (ce0 && kl0) CHECK_CLOSE(metric(m, "elbo_0"), (ce0[0] + kl0[0]) / count, 0, TOL_LOSS);
    const float *rmu1 = ref_get(ref, "mu1", NL), *rls1 = ref_get(ref, "ls1", NL);
    double dmu1 = 0, dls1 = 0;
    for (int64_t i = 0; rmu1 && rls1 && i < NL; i++)
        dmu1 = fmax(dmu1, fabs(mu1[i] - rmu1[i])), dls1 = fmax(dls1, fabs(ls1[i] - rls1[i]));
    printf("%-52s max abs err %.3g, %.3g\n", "posterior after the fast AdamW step", dmu1, dls1);
    CHECK(dmu1 < 1e-5 && dls1 < 1e-5, "mu1 / ls1 differ by %.3g / %.3g", dmu1, dls1);
    // the final forward
    ref_compare("logits", ltm_logits(m), ref_get(ref, "logits", (int64_t)N * V), (int64_t)N * V, TOL);
    const float *rce = ref_get(ref, "ce", 1), *rkl = ref_get(ref, "kl_sum", 1), *rloss = ref_get(ref, "loss", 1);
    if (rce) CHECK_CLOSE(metric(m, "ce"), rce[0], 0, TOL_LOSS);
    if (rkl) CHECK_CLOSE(metric(m, "kl") * count, rkl[0], 0, TOL_LOSS);
    if (rloss) CHECK_CLOSE(loss, rloss[0], 0, TOL_LOSS);
    for (int i = 0; i < np; i++) {
        char name[160];
        snprintf(name, sizeof name, "grad.%.96s", gv[i].name);
        ref_compare(name, gv[i].data, ref_get(ref, name, tensor_numel(&gv[i])), tensor_numel(&gv[i]), TOL);
    }
out:
    ltm_destroy(&m);
    free(tok), free(tgt), free(mask), free(mu1), free(ls1), free(dmu), free(dls), free(noise);
    json_decref(jc);
    st_close(&init);
    st_close(&ref);
}

int main(void) {
    RUN(test_against_torch);
    return check_summary();
}
