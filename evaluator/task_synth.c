/* evaluator/task_synth.c: the Figure 4 measures on the synthetic sequences (seed 000, §4.1;
 * tokenizer/synth.h), computed from the model's own samples.
 *
 * For each of `groups` groups (letter drawn from rng_seed2(seed, group)) the model continues
 * "L>" (after an end-of-text token with --eot-prefix) for 64 tokens, sampled at `temperature` (1 when not given): 5 sequences whose
 * latents are drawn independently and, for the Free Transformer, 5 more that share ONE draw
 * of Z (the prompt's positions from the encoder, which reads the prompt only; every later
 * position from the uniform prior). The 64 characters are judged with synth_judge.
 *   valid                 fraction of sequences with exactly one run of the prompt's letter
 *                         of length 8 (noise '!' allowed) and nothing else but '_' and '!'
 *   independent_pos_diff  mean |start_i - start_j| over pairs of valid sequences of a group
 *                         with independent Z (and for the baseline, its plain samples)
 *   shared_pos_diff       the same inside groups sharing Z: small when Z carries the position,
 *                         which is what Figure 4 shows (Free Transformer only)
 *   independent_noise_agree  mean over pairs of valid sequences of a group (independent Z) of
 *                         the Jaccard agreement of their noise: |A n B| / |A u B| with A, B the
 *                         positions of '!' in the 64 characters (pairs with no '!' at all are
 *                         left out); independent noise at rate 1/16 gives about 0.03
 *   shared_noise_agree    the same inside groups sharing Z: near 1 when Z carries the noise
 *                         (Figure 4 at 1 bit), near the independent value when it does not
 * Decoding repeats a full forward per token (see task_em.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "evaluator/latent.h"
#include "evaluator/task.h"
#include "evaluator/textdata.h"
#include "tokenizer/synth.h"

#define GROUP 5

typedef struct {
    eval_tok_t tok;
    int groups, batch;
    int eot_prefix;      /* start rows with end-of-text, as pack-layout training rows do */
    float temperature;
    uint64_t seed;
} synth_t;

static void synth_close(void **self) {
    synth_t *s = *self;
    if (!s) return;
    eval_tok_close(&s->tok);
    free(s);
    *self = NULL;
}

static int synth_open(void **self, const eval_task_cfg_t *cfg, char *err, size_t errlen) {
    if (!(cfg->temperature >= 0) || cfg->temperature > 100)
        return snprintf(err, errlen, "--temperature must be in [0, 100]"), EVAL_EARG;
    synth_t *s = calloc(1, sizeof *s);
    if (!s) return snprintf(err, errlen, "out of memory"), EVAL_ENOMEM;
    s->groups = cfg->limit > 0 ? cfg->limit : 10;
    s->temperature = cfg->temperature > 0 ? cfg->temperature : 1.0f;
    s->seed = (uint64_t)cfg->seed;
    s->eot_prefix = cfg->eot_prefix;
    int rc = eval_tok_open(&s->tok, cfg->vocab ? cfg->vocab : "bytes", err, errlen);
    if (rc) {
        free(s);
        return rc;
    }
    *self = s;
    return 0;
}

static void synth_shape(const void *self, int *Bmax, int *Tmax) {
    (void)self;
    *Bmax = 2 * GROUP;
    *Tmax = 0;
}

static uint32_t sample_row(const float *row, int V, float temperature, rng_t *r) {
    float mx = row[eval_argmax(row, V)];
    double s = 0;
    for (int i = 0; i < V; i++) s += exp((row[i] - mx) / temperature);
    double u = rng_f64(r) * s, c = 0;
    for (int i = 0; i < V; i++) {
        c += exp((row[i] - mx) / temperature);
        if (u < c) return (uint32_t)i;
    }
    return (uint32_t)(V - 1);
}

/* Mean |a_i - a_j| over pairs of the valid entries (start >= 0) into *sum, pairs into *n. */
static void pair_diffs(const int *start, int n, double *sum, long *pairs) {
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (start[i] >= 0 && start[j] >= 0) {
                *sum += abs(start[i] - start[j]);
                (*pairs)++;
            }
}

/* Mean Jaccard agreement of the '!' positions over pairs of valid rows into *sum, *pairs. */
static void pair_noise(const char (*bang)[SYNTH_BODY_LEN], const int *start, int n, double *sum,
                       long *pairs) {
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            if (start[i] < 0 || start[j] < 0) continue;
            int both = 0, either = 0;
            for (int k = 0; k < SYNTH_BODY_LEN; k++) both += bang[i][k] && bang[j][k], either += bang[i][k] || bang[j][k];
            if (!either) continue;
            *sum += (double)both / either;
            (*pairs)++;
        }
}

static int synth_run(void *self, eval_lm_t *lm, eval_values_t *out, volatile int *stop, char *err,
                     size_t errlen) {
    synth_t *s = self;
    const int V = lm->cfg.vocab_size, H = lm->latent_bits;
    const int rows = H ? 2 * GROUP : GROUP;
    if (bpe_vocab_size(s->tok.vocab) > (uint32_t)V)
        return snprintf(err, errlen, "the tokenizer's %u ids do not fit the model's vocabulary of %d",
                        bpe_vocab_size(s->tok.vocab), V), EVAL_EMISMATCH;
    if (lm->Bmax < rows) return snprintf(err, errlen, "the model takes %d rows, the task %d", lm->Bmax, rows), EVAL_EARG;
    int Tm = lm->Tmax, rc = 0, valid = 0, total = 0;
    double sum_ind = 0, sum_sh = 0, noise_ind = 0, noise_sh = 0;
    long n_ind = 0, n_sh = 0, nn_ind = 0, nn_sh = 0;
    uint32_t *tok = malloc(sizeof(uint32_t) * (size_t)rows * (Tm + 1));
    uint32_t *z = malloc(sizeof(uint32_t) * (size_t)rows * (Tm + 1));
    uint32_t *in = malloc(sizeof(uint32_t) * (size_t)rows * Tm);
    uint32_t *zin = malloc(sizeof(uint32_t) * (size_t)rows * Tm);
    float *bl = NULL;
    if (!tok || !z || !in || !zin) {
        rc = (snprintf(err, errlen, "out of memory"), EVAL_ENOMEM);
        goto out;
    }
    for (int g = 0; g < s->groups && !rc; g++) {
        rng_t r;
        rng_seed2(&r, s->seed, (uint64_t)g);
        char prompt[3] = {(char)('A' + rng_below(&r, 26)), '>', 0};
        uint32_t *p;
        int np;
        if (eval_tok_encode(&s->tok, prompt, &p, &np)) {
            rc = (snprintf(err, errlen, "out of memory"), EVAL_ENOMEM);
            goto out;
        }
        const int pre = s->eot_prefix ? 1 : 0, P = pre + np, L = P + SYNTH_BODY_LEN; /* tokens per finished row (bytes: 1 per char) */
        if (L - 1 > Tm) {
            free(p);
            rc = (snprintf(err, errlen, "the model's %d positions cannot hold a %d-token synthetic line", Tm, L - 1), EVAL_EMISMATCH);
            goto out;
        }
        for (int b = 0; b < rows; b++) {
            if (pre) tok[(size_t)b * (Tm + 1)] = (uint32_t)lm->cfg.eot_id;
            memcpy(tok + (size_t)b * (Tm + 1) + pre, p, sizeof(uint32_t) * np);
        }
        free(p);
        if (H) {
            const float *e = lm->encode(lm, tok, 1, P, err, errlen); /* the prompt only */
            if (!e) {
                rc = EVAL_EMODEL;
                goto out;
            }
            free(bl);
            bl = malloc(sizeof(float) * (size_t)P * H);
            if (!bl) {
                rc = (snprintf(err, errlen, "out of memory"), EVAL_ENOMEM);
                goto out;
            }
            memcpy(bl, e, sizeof(float) * (size_t)P * H);
            /* rows 0..4 independent draws; row 5's draw is copied to rows 6..9 (shared) */
            for (int b = 0; b <= GROUP; b++) {
                uint32_t *zb = z + (size_t)b * (Tm + 1);
                eval_z_posterior(&r, bl, zb, NULL, (size_t)P, H);
                eval_z_prior(&r, zb + P, (size_t)(L - P), H);
            }
            for (int b = GROUP + 1; b < rows; b++)
                memcpy(z + (size_t)b * (Tm + 1), z + (size_t)GROUP * (Tm + 1), sizeof(uint32_t) * L);
        }
        for (int T = P; T < L; T++) {
            if (stop && *stop) {
                rc = (snprintf(err, errlen, "interrupted"), EVAL_EINTR);
                goto out;
            }
            for (int b = 0; b < rows; b++) {
                memcpy(in + (size_t)b * T, tok + (size_t)b * (Tm + 1), sizeof(uint32_t) * T);
                if (H) memcpy(zin + (size_t)b * T, z + (size_t)b * (Tm + 1), sizeof(uint32_t) * T);
            }
            const float *lg = lm->logits(lm, in, H ? zin : NULL, rows, T, err, errlen);
            if (!lg) {
                rc = EVAL_EMODEL;
                goto out;
            }
            for (int b = 0; b < rows; b++)
                tok[(size_t)b * (Tm + 1) + T] = sample_row(lg + ((size_t)b * T + T - 1) * V, V, s->temperature, &r);
        }
        int start[2 * GROUP];
        char bang[2 * GROUP][SYNTH_BODY_LEN];
        for (int b = 0; b < rows; b++) {
            bpe_bytes_t text = {0};
            start[b] = -1;
            memset(bang[b], 0, SYNTH_BODY_LEN);
            if (eval_tok_decode(&s->tok, tok + (size_t)b * (Tm + 1) + P, L - P, &text) == 0 &&
                text.n >= SYNTH_BODY_LEN && synth_judge(prompt[0], (const char *)text.v, SYNTH_BODY_LEN, &start[b]) != 1)
                start[b] = -1;
            for (int k = 0; start[b] >= 0 && k < SYNTH_BODY_LEN; k++) bang[b][k] = text.v[k] == '!';
            bpe_bytes_free(&text);
            valid += start[b] >= 0;
            total++;
        }
        pair_diffs(start, GROUP, &sum_ind, &n_ind);
        pair_noise(bang, start, GROUP, &noise_ind, &nn_ind);
        if (H) {
            pair_diffs(start + GROUP, GROUP, &sum_sh, &n_sh);
            pair_noise(bang + GROUP, start + GROUP, GROUP, &noise_sh, &nn_sh);
        }
    }
    eval_values_add(out, "valid", (double)valid / total);
    eval_values_add(out, "independent_pos_diff", n_ind ? sum_ind / n_ind : NAN);
    eval_values_add(out, "independent_noise_agree", nn_ind ? noise_ind / nn_ind : NAN);
    if (H) {
        eval_values_add(out, "shared_pos_diff", n_sh ? sum_sh / n_sh : NAN);
        eval_values_add(out, "shared_noise_agree", nn_sh ? noise_sh / nn_sh : NAN);
    }
    eval_values_add(out, "n", total);
out:
    free(tok);
    free(z);
    free(in);
    free(zin);
    free(bl);
    return rc;
}

const eval_task_ops_t eval_task_synth = {synth_open, synth_close, synth_shape, synth_run};
