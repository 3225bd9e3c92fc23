/* tests/test_probe.c: the linear probe (evaluator/probe.h) and task latent (evaluator/
 * task_latent.c) on inputs whose answer is known by construction:
 *   - features that hold the label one-hot: the probe reads almost all of log2 C bits and
 *     finds every label; features of pure noise: it reads ~0 bits (at most a little below,
 *     from over-fitting) and finds about 1 label in C;
 *   - task latent on a stub encoder whose bits are certain everywhere in the body (logit 8 at
 *     the target's letters, -8 elsewhere) and uncertain at the prompt (logit 0): Z is then a
 *     function of the position and the noise, the KL per sequence is 64 certain positions,
 *     split 8 on the target and 56 elsewhere, and the probe reads the position from Z
 *     (nearly all 5.83 bits) and nothing from Z drawn from the prior. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "evaluator/lm.h"
#include "evaluator/probe.h"
#include "evaluator/task.h"
#include "tests/check.h"
#include "tokenizer/synth.h"

static rng_t R;

static void test_probe_known(void) {
    enum { N = 600, C = 12, F = 20 };
    float *X = malloc(sizeof(float) * N * F), *Xn = malloc(sizeof(float) * N * F);
    int y[N];
    for (int i = 0; i < N; i++) {
        y[i] = (int)rng_below(&R, C);
        for (int j = 0; j < F; j++) {
            X[i * F + j] = (j == y[i]) + 0.1f * rng_normal(&R);   /* the label, one-hot, a little noise */
            Xn[i * F + j] = rng_normal(&R);
        }
    }
    eval_probe_t p;
    char err[256];
    CHECK(eval_probe_run(X, y, N, 450, F, C, &p, err, sizeof err) == 0, "%s", err);
    CHECK(p.acc > 0.97 && log2(C) - p.ce_bits > 0.9 * log2(C), "one-hot labels: acc %.3f, %.2f of %.2f bits read", p.acc,
          log2(C) - p.ce_bits, log2(C));
    CHECK(p.mae < 0.1 && p.acc2 >= p.acc, "mae %.3f acc2 %.3f", p.mae, p.acc2);
    CHECK(eval_probe_run(Xn, y, N, 450, F, C, &p, err, sizeof err) == 0, "%s", err);
    /* 150 test rows: 1/12 right by chance is 12.5 +- 3.4; ~0 bits, over-fitting pushes below */
    CHECK(p.acc < 0.2 && log2(C) - p.ce_bits < 0.15 && log2(C) - p.ce_bits > -1, "noise: acc %.3f, %.3f bits read",
          p.acc, log2(C) - p.ce_bits);
    CHECK(eval_probe_run(X, y, N, 5, F, C, &p, err, sizeof err) == EVAL_EARG, "too few training rows refused");
    free(X);
    free(Xn);
}

/* ---- task latent on a stub encoder ---- */
enum { SH = 2, SB = 16 };
typedef struct { float buf[SB * SYNTH_LINE_LEN * SH]; } enc_stub_t;
static int upper(uint32_t t) { return t >= 'A' && t <= 'Z'; }
/* Bit logits 8 at the body's upper-case letters (the target's, noise aside), -8 at the rest of
 * the body, 0 at the prompt. */
static const float *stub_encode(eval_lm_t *lm, const uint32_t *tok, int B, int T, char *err, size_t errlen) {
    (void)err, (void)errlen;
    enc_stub_t *s = lm->impl;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < SH; h++)
                s->buf[((size_t)b * T + t) * SH + h] = t < SYNTH_PROMPT_LEN ? 0.0f : upper(tok[b * T + t]) ? 8.0f : -8.0f;
    return s->buf;
}
static void stub_release(eval_lm_t *lm) { free(lm->impl); }

static void test_latent_task(void) {
    const int N = 400;
    const double kappa = 0.05;
    eval_lm_t *lm = calloc(1, sizeof *lm);
    lm->impl = calloc(1, sizeof(enc_stub_t));
    lm->cfg = (model_config_t){.kind = MODEL_FREE, .vocab_size = 256, .max_seq = SYNTH_LINE_LEN, .latent_bits = SH,
                               .kappa_nats = (float)kappa};
    lm->Bmax = SB;
    lm->Tmax = SYNTH_LINE_LEN;
    lm->latent_bits = SH;
    lm->encode = stub_encode;
    lm->release = stub_release;
    /* the closed forms: a position at logit +-8 has KL = H (ln 2 - h(sigmoid 8)) nats */
    const double p8 = 1 / (1 + exp(-8.0)), kl8 = SH * (M_LN2 + p8 * log(p8) + (1 - p8) * log(1 - p8));
    eval_task_cfg_t c = {.task = "latent", .batch = SB, .limit = N, .seed = 9, .vocab = "bytes"};
    eval_task_t *t = NULL;
    eval_values_t v;
    char err[256];
    int rc = eval_task_open(&t, &c, err, sizeof err);
    if (!rc) rc = eval_task_run(t, lm, &v, NULL, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    if (!rc) {
        CHECK_CLOSE(eval_values_get(&v, "kl_seq_bits"), SYNTH_BODY_LEN * kl8 / M_LN2, 1e-6, 1e-6);
        CHECK_CLOSE(eval_values_get(&v, "kl_seq_bits_sd"), 0, 1e-6, 0);
        CHECK_CLOSE(eval_values_get(&v, "kl_target_bits"), SYNTH_TARGET_LEN * kl8 / M_LN2, 1e-6, 1e-6);
        CHECK_CLOSE(eval_values_get(&v, "kl_rest_bits"), (SYNTH_BODY_LEN - SYNTH_TARGET_LEN) * kl8 / M_LN2, 1e-6, 1e-6);
        CHECK_CLOSE(eval_values_get(&v, "kl_prompt_bits"), 0, 1e-9, 0);
        CHECK_CLOSE(eval_values_get(&v, "kappa_T_bits"), kappa * SYNTH_LINE_LEN / M_LN2, 1e-6, 1e-6);
        CHECK_CLOSE(eval_values_get(&v, "kl_paid_seq_bits"), SYNTH_BODY_LEN * (kl8 - kappa) / M_LN2, 1e-6, 1e-6);
        CHECK_CLOSE(eval_values_get(&v, "above_kappa"), (double)SYNTH_BODY_LEN / SYNTH_LINE_LEN, 1e-12, 0);
        const double pos = log2(SYNTH_BODY_LEN - SYNTH_TARGET_LEN + 1);
        CHECK(eval_values_get(&v, "probe_z_bits") > 0.8 * pos && eval_values_get(&v, "probe_z_acc2") > 0.9,
              "Z holds the position: %.2f of %.2f bits read, %.2f within 2", eval_values_get(&v, "probe_z_bits"), pos,
              eval_values_get(&v, "probe_z_acc2"));
        CHECK(eval_values_get(&v, "probe_q_bits") > 0.8 * pos, "the probabilities too: %.2f bits",
              eval_values_get(&v, "probe_q_bits"));
        CHECK(fabs(eval_values_get(&v, "probe_prior_bits")) < 0.5, "Z from the prior holds nothing: %.2f bits",
              eval_values_get(&v, "probe_prior_bits"));
    }
    eval_task_close(&t);
    eval_lm_free(&lm);
}

int main(void) {
    rng_seed(&R, 8);
    RUN(test_probe_known);
    RUN(test_latent_task);
    return check_summary();
}
