/* tests/test_free_ref.c: the C Free Transformer against the PyTorch reference
 * (tests/ref/free_ref.py: autograd through Y = onehot + G - detach(G) computed densely).
 *
 * Load the reference's weights (decoder + free.*), fix its uniforms, run one forward and
 * backward with its mask, and compare: the latent indices z exactly; logits, bit logits,
 * KL per token, CE and loss; every parameter gradient.
 *
 * Errors per tensor are max|ours - ref| / max|ref| (as tests/test_llama_ref.c). Both sides
 * compute in float32 with different summation orders; the measured errors (printed) are
 * ~1e-7..1e-6, so 2e-5 keeps an order of magnitude of margin while a real bug (the
 * sampled-entry shortcut instead of the dense pass-through, a causal encoder, a missing
 * RoPE in the encoder, the latent added to the queries instead of the keys/values, KL in
 * bits) moves some tensor by 1e-2 or more. */
#include "model/free.h"
#include "model/safetensors.h"
#include "tests/check.h"
#include "tests/fixture_check.h"
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define TOL 2e-5
#define TOL_LOSS 1e-5   /* relative, on losses of ~3.6 */

static int jint(json_t *o, const char *k) { return (int)json_integer_value(json_object_get(o, k)); }
static double jnum(json_t *o, const char *k) { return json_number_value(json_object_get(o, k)); }

static void compare(const char *what, const float *ours, const float *ref, int64_t n) {
    if (!ref) return;
    double e = rel_err(ours, ref, n);
    printf("%-52s rel err %.3g\n", what, e);
    CHECK(e < TOL, "%s rel err %.3g", what, e);
}

static void test_against_torch(void) {
    char err[512];
    st_file_t *init = NULL, *ref = NULL;
    int rc = st_open(&init, "tests/fixtures/free_tiny_init.safetensors", err, sizeof err);
    CHECK(rc == 0, "%s", err);
    rc |= st_open(&ref, "tests/fixtures/free_tiny_ref.safetensors", err, sizeof err);
    CHECK(rc == 0, "%s", err);
    json_error_t je;
    json_t *jc = rc ? NULL : json_loads(st_meta_get(ref, "config") ? st_meta_get(ref, "config") : "", 0, &je);
    CHECK(jc != NULL, "no config metadata");
    free_t *m = NULL;
    uint32_t *tok = NULL, *tgt = NULL;
    uint8_t *mask = NULL;
    if (!jc) goto out;
    model_config_t cfg = {.kind = MODEL_FREE, .vocab_size = jint(jc, "vocab_size"), .d_model = jint(jc, "d_model"),
                          .n_layers = jint(jc, "n_layers"), .n_heads = jint(jc, "n_heads"),
                          .n_kv_heads = jint(jc, "n_kv_heads"), .d_ff = jint(jc, "d_ff"),
                          .max_seq = jint(jc, "max_seq"), .rope_theta = (float)jnum(jc, "rope_theta"),
                          .norm_eps = (float)jnum(jc, "norm_eps"), .tied = jint(jc, "tied"),
                          .latent_bits = jint(jc, "latent_bits"), .kappa_nats = (float)jnum(jc, "kappa_nats")};
    const int B = jint(jc, "B"), T = jint(jc, "T"), N = B * T, H = cfg.latent_bits;
    rc = free_create(&m, &cfg, B, T, 1, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    if (rc) goto out;
    tensor_view_t pv[64], gv[64];
    int np = free_params(m, pv, 64);
    free_grads(m, gv, 64);
    CHECK(st_count(init) == np, "init has %d tensors, model %d", st_count(init), np);
    rc = st_read_into(init, pv, np, 1, err, sizeof err);
    CHECK(rc == np, "loading weights: %s", err);
    const float *tf = ref_get(ref, "tokens", N), *gf = ref_get(ref, "targets", N), *mf = ref_get(ref, "mask", N);
    const float *uf = ref_get(ref, "uniforms", (int64_t)N * H), *zf = ref_get(ref, "z", N);
    if (!tf || !gf || !mf || !uf || !zf) goto out;
    tok = malloc(sizeof(uint32_t) * N), tgt = malloc(sizeof(uint32_t) * N), mask = malloc(N);
    for (int i = 0; i < N; i++) tok[i] = (uint32_t)tf[i], tgt[i] = (uint32_t)gf[i], mask[i] = mf[i] != 0;
    free_set_uniforms(m, uf);
    float loss = 0;
    free_zero_grad(m);
    rc = free_forward(m, tok, tgt, mask, &loss, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    rc = free_backward(m, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    int zsame = 1;
    for (int i = 0; i < N; i++) zsame &= free_z(m)[i] == (uint32_t)zf[i];
    CHECK(zsame, "latent indices differ from the reference's");
    compare("logits", free_logits(m), ref_get(ref, "logits", (int64_t)N * cfg.vocab_size), (int64_t)N * cfg.vocab_size);
    compare("bit_logits", free_bit_logits(m), ref_get(ref, "bit_logits", (int64_t)N * H), (int64_t)N * H);
    compare("kl", free_kl(m), ref_get(ref, "kl", N), N);
    const float *rce = ref_get(ref, "ce", 1), *rloss = ref_get(ref, "loss", 1);
    family_metrics_t fm;
    free_metrics(m, &fm);
    if (rce) CHECK_CLOSE(fm.kv[0].value, rce[0], 0, TOL_LOSS);
    if (rloss) CHECK_CLOSE(loss, rloss[0], 0, TOL_LOSS);
    CHECK(fm.kv[3].value > 0 && fm.kv[3].value < 1, "the fixture has KL on both sides of kappa (%.2f above)", fm.kv[3].value);
    for (int i = 0; i < np; i++) {
        char name[160];
        snprintf(name, sizeof name, "grad.%.96s", gv[i].name);
        compare(name, gv[i].data, ref_get(ref, name, tensor_numel(&gv[i])), tensor_numel(&gv[i]));
    }
out:
    free_destroy(&m);
    free(tok), free(tgt), free(mask);
    json_decref(jc);
    st_close(&init);
    st_close(&ref);
}

int main(void) {
    RUN(test_against_torch);
    return check_summary();
}
