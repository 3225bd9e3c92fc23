/* tests/test_mixer_ref.c: the masked-mixer families (model/mixers.h) against the PyTorch
 * reference (tests/ref/mixer_ref.py, whose mixing is torch's own Conv1d): for every variant
 * (causal mixer flat / heads / kernel k; mixer autoencoder with repeat, and with heads, k = 2,
 * an unmasked encoder, compression and unroll; the transformer autoencoder; both memory
 * models) load the reference's weights, run forward and backward on its tokens and mask, and
 * compare the logits, the loss and every parameter gradient.
 *
 * Errors are per tensor max|ours - ref| / max|ref| (as tests/test_llama_ref.c). Both sides
 * compute in float32 in other orders (conv1d against gemm calls); measured errors are
 * ~1e-7..1e-6 (printed), so 2e-5 keeps an order of magnitude of margin, while a real bug (a
 * transposed mixing weight, a tap shifted the wrong way, a window that does not wrap, the
 * memory at the wrong position) gives 1e-2 or more. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "model/mixers.h"
#include "model/safetensors.h"
#include "tests/check.h"
#include "tests/fixture_check.h"

#define TOL 2e-5
#define TOL_LOSS 1e-5 /* relative, on losses of ~3.5 */

static int jint(json_t *o, const char *k) { return (int)json_integer_value(json_object_get(o, k)); }

/* The reference's config JSON as a model_config_t. */
static int config_of(json_t *j, model_config_t *c) {
    memset(c, 0, sizeof *c);
    if (mixer_kind_parse(json_string_value(json_object_get(j, "kind")), &c->kind)) return -1;
    c->vocab_size = jint(j, "vocab_size"), c->d_model = jint(j, "d_model"), c->n_layers = jint(j, "n_layers");
    c->n_heads = jint(j, "n_heads"), c->n_kv_heads = jint(j, "n_kv_heads"), c->d_ff = jint(j, "d_ff");
    c->max_seq = jint(j, "max_seq"), c->tied = jint(j, "tied");
    c->rope_theta = (float)json_number_value(json_object_get(j, "rope_theta"));
    c->norm_eps = (float)json_number_value(json_object_get(j, "norm_eps"));
    c->mixer_heads = jint(j, "mixer_heads"), c->mixer_kernel = jint(j, "mixer_kernel");
    c->no_mask_encoder = jint(j, "no_mask_encoder"), c->no_mask_decoder = jint(j, "no_mask_decoder");
    if (mixer_kind_has_encoder(c->kind)) {
        c->encoder_layers = jint(j, "encoder_layers");
        c->embed_dim = jint(j, "embed_dim");
    }
    c->unroll = mixer_kind_is_autoencoder(c->kind) ? jint(j, "unroll") : 0;
    return 0;
}

static void run_variant(const char *stem) {
    char path[512], err[512];
    st_file_t *init = NULL, *ref = NULL;
    snprintf(path, sizeof path, "tests/fixtures/%s_init.safetensors", stem);
    int rc = st_open(&init, path, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    snprintf(path, sizeof path, "tests/fixtures/%s_ref.safetensors", stem);
    rc |= st_open(&ref, path, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    json_error_t je;
    json_t *jc = rc ? NULL : json_loads(st_meta_get(ref, "config") ? st_meta_get(ref, "config") : "", 0, &je);
    model_config_t cfg;
    mixers_t *m = NULL;
    uint32_t *tok = NULL, *tgt = NULL;
    uint8_t *mask = NULL;
    if (!jc || config_of(jc, &cfg)) {
        CHECK(0, "%s: no usable config metadata", stem);
        goto out;
    }
    const int B = jint(jc, "B"), T = jint(jc, "T"), N = B * T, V = cfg.vocab_size;
    if ((rc = mixers_create_on(&m, device_cpu_default(), &cfg, B, T, 1, err, sizeof err))) {
        CHECK(0, "%s: %s", stem, err);
        goto out;
    }
    tensor_view_t pv[96], gv[96];
    const int np = mixers_params(m, pv, 96);
    mixers_grads(m, gv, 96);
    CHECK(st_count(init) == np, "%s: the reference has %d tensors, the model %d", stem, st_count(init), np);
    rc = st_read_into(init, pv, np, 1, err, sizeof err);
    CHECK(rc == np, "%s: loading the weights: %s", stem, err);
    const float *tf = ref_get(ref, "tokens", N), *gf = ref_get(ref, "targets", N), *mf = ref_get(ref, "mask", N);
    if (!tf || !gf || !mf) goto out;
    tok = malloc(sizeof(uint32_t) * N), tgt = malloc(sizeof(uint32_t) * N), mask = malloc(N);
    for (int i = 0; i < N; i++) tok[i] = (uint32_t)tf[i], tgt[i] = (uint32_t)gf[i], mask[i] = mf[i] != 0;
    float loss = 0;
    mixers_zero_grad(m);
    CHECK(mixers_forward(m, tok, tgt, mask, &loss, err, sizeof err) == 0, "%s: %s", stem, err);
    CHECK(mixers_backward(m, err, sizeof err) == 0, "%s: %s", stem, err);
    const float *rl = ref_get(ref, "logits", (int64_t)N * V), *rloss = ref_get(ref, "loss", 1);
    if (rl) {
        double e = rel_err(mixers_logits(m), rl, (int64_t)N * V);
        printf("%s logits rel err %.3g\n", stem, e);
        CHECK(e < TOL, "%s: logits rel err %.3g", stem, e);
    }
    if (rloss) CHECK_CLOSE(loss, rloss[0], 0, TOL_LOSS);
    double worst = 0;
    for (int i = 0; i < np; i++) {
        char name[160];
        snprintf(name, sizeof name, "grad.%.96s", gv[i].name);
        const float *rg = ref_get(ref, name, tensor_numel(&gv[i]));
        if (!rg) continue;
        double e = rel_err(gv[i].data, rg, tensor_numel(&gv[i]));
        CHECK(e < TOL, "%s: %s rel err %.3g", stem, name, e);
        if (e > worst) worst = e;
    }
    printf("%s worst gradient rel err %.3g\n", stem, worst);
out:
    mixers_destroy(&m);
    free(tok); free(tgt); free(mask);
    json_decref(jc);
    st_close(&init);
    st_close(&ref);
}

static void test_causal_mixers(void) {
    run_variant("mixer_flat");
    run_variant("mixer_heads");
    run_variant("mixer_kernel");
}
static void test_autoencoders(void) {
    run_variant("mixer_ae_repeat");
    run_variant("mixer_ae_unroll");
    run_variant("llama_ae");
}
static void test_memory_models(void) {
    run_variant("mixer_mem");
    run_variant("llama_mem");
}

int main(void) {
    RUN(test_causal_mixers);
    RUN(test_autoencoders);
    RUN(test_memory_models);
    return check_summary();
}
