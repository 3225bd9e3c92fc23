/* tests/test_llama_ref.c: the C decoder against the PyTorch reference (tests/ref/llama_ref.py).
 *
 * For the tiny config, tied and untied: load the reference's initial weights, run forward and
 * backward on its tokens with its mask, and compare logits, loss and every parameter
 * gradient; then take its five AdamW steps (same warm-up/cosine lr, weight decay, clipping)
 * and compare the losses, gradient norms, learning rates and the final parameters.
 *
 * Errors are measured per tensor as max|ours - ref| / max|ref| (scale-free, so one tolerance
 * serves tensors of very different magnitudes). Both sides compute in float32 with different
 * summation orders; the measured errors are ~1e-7..1e-6 for forward/backward
 * (printed by the test), so 2e-5 leaves an order of magnitude of margin while any real bug
 * (a transposed weight, a wrong RoPE pair, a missing 1/sqrt(hd), a wrong GQA head mapping)
 * gives errors of 1e-2 or more. The optimizer divides by sqrt(v) + 1e-8, which amplifies
 * tiny gradient differences in entries whose gradient is ~0, so the parameters after five
 * steps get 3e-4 (measured 3e-5; still far below an lr-sized error of ~1e-2 relative to weights of ~0.1). */
#include "model/adamw.h"
#include "model/llama.h"
#include "model/safetensors.h"
#include "model/schedule.h"
#include "tests/check.h"
#include "tests/fixture_check.h"
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define TOL_FWD 2e-5
#define TOL_GRAD 2e-5
#define TOL_STEP 3e-4
#define TOL_LOSS 1e-5   /* relative, on losses of ~2..5 */

static int json_int(json_t *o, const char *k) { return (int)json_integer_value(json_object_get(o, k)); }
static double json_num(json_t *o, const char *k) { return json_number_value(json_object_get(o, k)); }

static void run_variant(const char *stem) {
    char path[512], err[512];
    st_file_t *init = NULL, *ref = NULL;
    snprintf(path, sizeof(path), "tests/fixtures/%s_init.safetensors", stem);
    int rc = st_open(&init, path, err, sizeof(err));
    CHECK(rc == 0, "%s", err);
    snprintf(path, sizeof(path), "tests/fixtures/%s_ref.safetensors", stem);
    rc |= st_open(&ref, path, err, sizeof(err));
    CHECK(rc == 0, "%s", err);
    if (rc) { st_close(&init); st_close(&ref); return; }

    json_error_t je;
    json_t *jc = json_loads(st_meta_get(ref, "config") ? st_meta_get(ref, "config") : "", 0, &je);
    json_t *jo = json_loads(st_meta_get(ref, "optim") ? st_meta_get(ref, "optim") : "", 0, &je);
    CHECK(jc && jo, "%s: no config/optim metadata", stem);
    if (!jc || !jo) return;
    model_config_t cfg = {.kind = MODEL_LLAMA, .vocab_size = json_int(jc, "vocab_size"),
                          .d_model = json_int(jc, "d_model"), .n_layers = json_int(jc, "n_layers"),
                          .n_heads = json_int(jc, "n_heads"), .n_kv_heads = json_int(jc, "n_kv_heads"),
                          .d_ff = json_int(jc, "d_ff"), .max_seq = json_int(jc, "max_seq"),
                          .rope_theta = (float)json_num(jc, "rope_theta"),
                          .norm_eps = (float)json_num(jc, "norm_eps"), .tied = json_int(jc, "tied")};
    const int B = json_int(jc, "B"), T = json_int(jc, "T"), N = B * T, V = cfg.vocab_size;

    llama_t *m = NULL;
    adamw_t *opt = NULL;
    uint32_t *tok = malloc(sizeof(uint32_t) * N), *tgt = malloc(sizeof(uint32_t) * N);
    uint8_t *mask = malloc(N);
    rc = llama_create(&m, &cfg, B, T, 1, err, sizeof(err));
    CHECK(rc == 0, "%s: %s", stem, err);
    if (rc) goto out;
    tensor_view_t pv[64], gv[64];
    int np = llama_params(m, pv, 64);
    llama_grads(m, gv, 64);
    CHECK(st_count(init) == np, "%s: init has %d tensors, model %d", stem, st_count(init), np);
    rc = st_read_into(init, pv, np, 1, err, sizeof(err));
    CHECK(rc == np, "%s: loading weights: %s", stem, err);

    const float *tf = ref_get(ref, "tokens", N), *gf = ref_get(ref, "targets", N),
                *mf = ref_get(ref, "mask", N);
    if (!tf || !gf || !mf) goto out;
    for (int i = 0; i < N; i++) { tok[i] = (uint32_t)tf[i]; tgt[i] = (uint32_t)gf[i]; mask[i] = mf[i] != 0; }

    // forward and backward
    float loss = 0;
    llama_zero_grad(m);
    rc = llama_forward(m, tok, tgt, mask, &loss, err, sizeof(err));
    CHECK(rc == 0, "%s", err);
    rc = llama_backward(m, err, sizeof(err));
    CHECK(rc == 0, "%s", err);
    const float *rl = ref_get(ref, "logits", (int64_t)N * V), *rloss = ref_get(ref, "loss", 1);
    if (rl) {
        double e = rel_err(llama_logits(m), rl, (int64_t)N * V);
        printf("%s logits rel err %.3g\n", stem, e);
        CHECK(e < TOL_FWD, "%s: logits rel err %.3g", stem, e);
    }
    if (rloss) CHECK_CLOSE(loss, rloss[0], 0, TOL_LOSS);
    double worst = 0;
    for (int i = 0; i < np; i++) {
        char name[160];
        snprintf(name, sizeof(name), "grad.%.96s", gv[i].name);
        const float *rg = ref_get(ref, name, tensor_numel(&gv[i]));
        if (!rg) continue;
        double e = rel_err(gv[i].data, rg, tensor_numel(&gv[i]));
        CHECK(e < TOL_GRAD, "%s: %s rel err %.3g", stem, name, e);
        if (e > worst) worst = e;
    }
    printf("%s worst gradient rel err %.3g\n", stem, worst);

    // five AdamW steps on the same batch
    adamw_config_t oc = {.beta1 = (float)json_num(jo, "beta1"), .beta2 = (float)json_num(jo, "beta2"),
                         .eps = (float)json_num(jo, "eps"),
                         .weight_decay = (float)json_num(jo, "weight_decay"), .decay_embeddings = 0};
    schedule_t sc = {.lr_max = (float)json_num(jo, "lr_max"), .lr_min = (float)json_num(jo, "lr_min"),
                     .warmup_steps = json_int(jo, "warmup_steps"),
                     .total_steps = json_int(jo, "total_steps")};
    const int steps = json_int(jo, "steps");
    const float max_norm = (float)json_num(jo, "max_norm");
    rc = adamw_create(&opt, pv, np, &oc, err, sizeof(err));
    CHECK(rc == 0, "%s", err);
    const float *rlosses = ref_get(ref, "adamw.losses", steps),
                *rnorms = ref_get(ref, "adamw.grad_norms", steps), *rlrs = ref_get(ref, "adamw.lrs", steps);
    for (int s = 0; s < steps && opt && rlosses && rnorms && rlrs; s++) {
        llama_zero_grad(m);
        llama_forward(m, tok, tgt, mask, &loss, err, sizeof(err));
        llama_backward(m, err, sizeof(err));
        float lr = schedule_lr(&sc, s);
        double norm = 0;
        rc = adamw_step(opt, gv, np, lr, 1.0f, max_norm, &norm, err, sizeof(err));
        CHECK(rc == 0, "%s", err);
        printf("%s step %d loss %.6f (ref %.6f) norm %.6f (ref %.6f) lr %.6g\n", stem, s, loss,
               rlosses[s], norm, rnorms[s], lr);
        CHECK_CLOSE(loss, rlosses[s], 0, TOL_LOSS * 10);
        CHECK_CLOSE(norm, rnorms[s], 0, TOL_GRAD * 10);
        CHECK_CLOSE(lr, rlrs[s], 0, 1e-6);  /* both in double, rounded to float */
    }
    worst = 0;
    for (int i = 0; i < np; i++) {
        char name[160];
        snprintf(name, sizeof(name), "step5.%.96s", pv[i].name);
        const float *rp = ref_get(ref, name, tensor_numel(&pv[i]));
        if (!rp) continue;
        double e = rel_err(pv[i].data, rp, tensor_numel(&pv[i]));
        CHECK(e < TOL_STEP, "%s: %s rel err %.3g", stem, name, e);
        if (e > worst) worst = e;
    }
    printf("%s worst parameter rel err after %d steps %.3g\n", stem, steps, worst);
out:
    adamw_destroy(&opt);
    llama_destroy(&m);
    free(tok); free(tgt); free(mask);
    json_decref(jc);
    json_decref(jo);
    st_close(&init);
    st_close(&ref);
}

static void test_tied(void) { run_variant("llama_tiny"); }
static void test_untied(void) { run_variant("llama_tiny_untied"); }

int main(void) {
    RUN(test_tied);
    RUN(test_untied);
    return check_summary();
}
