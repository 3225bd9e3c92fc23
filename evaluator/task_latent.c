/* evaluator/task_latent.c: what a Free Transformer's latent Z carries on the synthetic
 * sequences of seed 000 §4.1 (tokenizer/synth.h), measured from the encoder rather than read
 * from samples (task synth does that).
 *
 * The encoder reads --limit held-out sequences (synth_sequence(--seed, i), i < limit; the
 * training data of `make figure4` is seed 1, so another seed is unseen), each the 66 tokens
 * of its line "L>" + 64 characters, the rows the model trained on. Per position t its bit
 * logits give q(Z_t | x) and KL_t = KL(q(Z_t | x) || uniform) (evaluator/latent.h); the
 * free-bits loss (seed 000 eq. 5) pays max(0, KL_t - kappa) per token, so a latent at the
 * threshold carries kappa x T bits per sequence for free.
 *   kl_seq_bits, kl_seq_bits_sd  sum over the T positions of KL_t (bits): what Z carries
 *                        about the sequence, mean and standard deviation over sequences
 *   kappa_bits, kappa_T_bits  the threshold per token and times T
 *   kl_paid_seq_bits     sum of max(0, KL_t - kappa): the part the loss pays for
 *   kl_prompt_bits, kl_target_bits, kl_rest_bits  the sum of KL_t over the 2 prompt
 *                        positions, the 8 positions of the target, the others (mean)
 *   above_kappa          fraction of positions with KL_t > kappa
 * How much of the target's start (0..56, uniform: log2 57 = 5.83 bits) a linear read-out
 * recovers from Z (evaluator/probe.h: softmax regression fitted on the first 3/4 of the
 * sequences, scored on the last 1/4), with as features the T x H bits of
 *   probe_z_*     one Z drawn from q per sequence: what the decoder is given;
 *   probe_q_*     the encoder's bit probabilities sigmoid(logit): what it computed;
 *   probe_prior_* Z drawn from the uniform prior, which carries nothing: the probe's own
 *                 floor (its information should be ~0; below 0 when it over-fits);
 * each as _bits (log2 57 - the held-out cross-entropy in bits: the information read),
 * _ce_bits, _acc (the most probable start exact), _acc2 (within 2), _mae. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "evaluator/latent.h"
#include "evaluator/probe.h"
#include "evaluator/task.h"
#include "evaluator/textdata.h"
#include "tokenizer/synth.h"

#define N_STARTS (SYNTH_BODY_LEN - SYNTH_TARGET_LEN + 1) /* 57 */

typedef struct {
    eval_tok_t tok;
    int n, batch;
    uint64_t seed;
} latent_t;

static void latent_close(void **self) {
    latent_t *s = *self;
    if (!s) return;
    eval_tok_close(&s->tok);
    free(s);
    *self = NULL;
}

static int latent_open(void **self, const eval_task_cfg_t *cfg, char *err, size_t errlen) {
    latent_t *s = calloc(1, sizeof *s);
    if (!s) return snprintf(err, errlen, "out of memory"), EVAL_ENOMEM;
    s->n = cfg->limit > 0 ? cfg->limit : 4000;
    s->batch = cfg->batch;
    s->seed = (uint64_t)cfg->seed;
    if (s->n < 40) {
        free(s);
        return snprintf(err, errlen, "--limit %d: the probe needs at least 40 sequences", cfg->limit), EVAL_EARG;
    }
    int rc = eval_tok_open(&s->tok, cfg->vocab ? cfg->vocab : "bytes", err, errlen);
    if (rc) {
        free(s);
        return rc;
    }
    *self = s;
    return 0;
}

static void latent_shape(const void *self, int *Bmax, int *Tmax) {
    *Bmax = ((const latent_t *)self)->batch;
    *Tmax = SYNTH_LINE_LEN;
}

static void probe_values(eval_values_t *out, const char *name, const eval_probe_t *p) {
    char k[48];
    const struct { const char *f; double x; } kv[] = {
        {"probe_%s_bits", log2(N_STARTS) - p->ce_bits}, {"probe_%s_ce_bits", p->ce_bits}, {"probe_%s_acc", p->acc},
        {"probe_%s_acc2", p->acc2}, {"probe_%s_mae", p->mae}};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) {
        snprintf(k, sizeof k, kv[i].f, name);
        eval_values_add(out, k, kv[i].x);
    }
}

static int latent_run(void *self, eval_lm_t *lm, eval_values_t *out, volatile int *stop, char *err,
                      size_t errlen) {
    latent_t *s = self;
    const int H = lm->latent_bits, T = SYNTH_LINE_LEN, N = s->n, F = T * H;
    if (!H || !lm->encode) return snprintf(err, errlen, "task latent is for a Free Transformer (a model with latents)"), EVAL_EARG;
    if (lm->Tmax < T) return snprintf(err, errlen, "the model's %d positions cannot hold a %d-token line", lm->Tmax, T), EVAL_EMISMATCH;
    const int B = s->batch < lm->Bmax ? s->batch : lm->Bmax;
    const double kappa = lm->cfg.kappa_nats;
    float *Xz = malloc(sizeof(float) * (size_t)N * F), *Xq = malloc(sizeof(float) * (size_t)N * F);
    float *Xp = malloc(sizeof(float) * (size_t)N * F);
    int *label = malloc(sizeof(int) * (size_t)N);
    uint32_t *tok = malloc(sizeof(uint32_t) * (size_t)B * T), z[SYNTH_LINE_LEN];
    int rc = 0;
    double kl_sum = 0, kl_sq = 0, paid = 0, prompt = 0, target = 0, rest = 0;
    long above = 0;
    if (!Xz || !Xq || !Xp || !label || !tok) {
        rc = (snprintf(err, errlen, "out of memory"), EVAL_ENOMEM);
        goto out;
    }
    for (int i0 = 0; i0 < N && !rc; i0 += B) {
        if (stop && *stop) {
            rc = (snprintf(err, errlen, "interrupted"), EVAL_EINTR);
            goto out;
        }
        const int nb = N - i0 < B ? N - i0 : B;
        for (int b = 0; b < nb; b++) {
            char line[SYNTH_LINE_LEN + 1];
            synth_info_t info;
            synth_sequence(s->seed, (uint64_t)(i0 + b), line, &info);
            uint32_t *ids;
            int n;
            if (eval_tok_encode(&s->tok, line, &ids, &n)) {
                rc = (snprintf(err, errlen, "out of memory"), EVAL_ENOMEM);
                goto out;
            }
            if (n != T) {
                free(ids);
                rc = (snprintf(err, errlen, "the tokenizer made %d tokens of a %d-character line: task latent needs one per character (--vocab bytes)", n, T), EVAL_EMISMATCH);
                goto out;
            }
            memcpy(tok + (size_t)b * T, ids, sizeof(uint32_t) * T);
            free(ids);
            label[i0 + b] = info.start;
        }
        const float *lg = lm->encode(lm, tok, nb, T, err, errlen);
        if (!lg) {
            rc = EVAL_EMODEL;
            goto out;
        }
        for (int b = 0; b < nb; b++) {
            const int i = i0 + b, t0 = SYNTH_PROMPT_LEN + label[i];
            const float *l = lg + (size_t)b * T * H;
            double seq = 0;
            for (int t = 0; t < T; t++) {
                const double kl = eval_z_kl(l + (size_t)t * H, H);
                seq += kl;
                paid += kl > kappa ? kl - kappa : 0;
                above += kl > kappa;
                if (t < SYNTH_PROMPT_LEN) prompt += kl;
                else if (t >= t0 && t < t0 + SYNTH_TARGET_LEN) target += kl;
                else rest += kl;
            }
            kl_sum += seq, kl_sq += seq * seq;
            /* one draw of Z from q, one from the prior (each sequence its own stream) */
            rng_t r;
            rng_seed2(&r, s->seed ^ 0x1A7E47ull, (uint64_t)i);
            eval_z_posterior(&r, l, z, NULL, (size_t)T, H);
            for (int t = 0; t < T; t++)
                for (int h = 0; h < H; h++) {
                    const size_t k = (size_t)i * F + (size_t)t * H + h;
                    Xz[k] = (float)((z[t] >> h) & 1u);
                    Xq[k] = 1.0f / (1.0f + expf(-l[(size_t)t * H + h]));
                }
            eval_z_prior(&r, z, (size_t)T, H);
            for (int t = 0; t < T; t++)
                for (int h = 0; h < H; h++) Xp[(size_t)i * F + (size_t)t * H + h] = (float)((z[t] >> h) & 1u);
        }
    }
    const double ln2 = M_LN2, m = kl_sum / N;
    eval_values_add(out, "kl_seq_bits", m / ln2);
    eval_values_add(out, "kl_seq_bits_sd", sqrt(fmax(kl_sq / N - m * m, 0)) / ln2);
    eval_values_add(out, "kappa_bits", kappa / ln2);
    eval_values_add(out, "kappa_T_bits", kappa * T / ln2);
    eval_values_add(out, "kl_paid_seq_bits", paid / N / ln2);
    eval_values_add(out, "kl_prompt_bits", prompt / N / ln2);
    eval_values_add(out, "kl_target_bits", target / N / ln2);
    eval_values_add(out, "kl_rest_bits", rest / N / ln2);
    eval_values_add(out, "above_kappa", (double)above / ((double)N * T));
    eval_values_add(out, "position_bits", log2(N_STARTS));
    const int n_train = N * 3 / 4;
    const struct { const char *name; const float *X; } sets[] = {{"z", Xz}, {"q", Xq}, {"prior", Xp}};
    for (size_t k = 0; k < sizeof sets / sizeof sets[0] && !rc; k++) {
        eval_probe_t p;
        if ((rc = eval_probe_run(sets[k].X, label, N, n_train, F, N_STARTS, &p, err, (int)errlen))) break;
        probe_values(out, sets[k].name, &p);
    }
    eval_values_add(out, "n", N);
out:
    free(Xz);
    free(Xq);
    free(Xp);
    free(label);
    free(tok);
    return rc;
}

const eval_task_ops_t eval_task_latent = {latent_open, latent_close, latent_shape, latent_run};
