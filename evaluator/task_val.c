/* evaluator/task_val.c: held-out cross-entropy, perplexity and bits per byte.
 *
 * Batches come from loader/batch.h in-process (the same pure batch function a bin/loader
 * serves), so the evaluator needs no loader running and every checkpoint sees exactly the
 * same tokens: pack layout, epoch 0 of `seed`, steps 0..batches-1. The split is the
 * loader's "val" (the last val_docs documents) or, with val_docs 0, the whole dataset.
 *
 * bits per byte (seed 004): bpb = CE_nats * n_tokens / (n_bytes * ln 2), with the split's
 * tokens per byte from the dataset's metadata (pro-rated by tokens for a val split).
 *
 * A Free Transformer has no single cross-entropy: the reported numbers are, per token (nats),
 *   ce_enc   -log p(x|Z) with Z ~ q(Z|x) from the encoder, mean of K draws. The encoder has
 *            read the targets, so this alone is NOT a likelihood (it leaks them through Z);
 *   kl       sum_t KL(q(Z_t|x) || uniform) / tokens, exact from the bit logits;
 *   elbo     ce_enc + kl: an upper bound on -log p(x) (the negative ELBO);
 *   iw_bound -log mean_k p(x|z_k) p(z_k) / q(z_k|x) per row, z_k ~ q, K draws: a tighter
 *            bound (Burda et al.'s importance-weighted bound; equal to elbo in expectation
 *            for K = 1);
 *   ce_prior -log p(x|Z) with Z drawn from the prior, mean of N draws: what generation sees
 *            (an upper bound too, by Jensen);
 *   iw_prior -log mean_n p(x|z_n) per row, z_n from the prior: the same N draws as an
 *            importance-weighted bound whose proposal is the prior (tighter than ce_prior);
 *   nll_bound iw_bound, chosen in advance (never the smaller of two noisy bounds, which is
 *            biased down); ppl and bpb come from it.
 *
 * A Latent-thought LM (seed 003) has no single cross-entropy either: each row's posterior
 * q(z|x) is inferred from the row's own targets by K steps of stochastic VI (the decoder
 * fixed, a fresh eps per step), then scored on S = --draws fresh draws it was not fitted on
 * (model/ltm.h ltm_score; sums in evaluator/latent.h eval_ltm_accumulate). For each K of
 * --inner-steps-list, an inference of exactly K steps from the same start (the same draws for
 * every checkpoint), per token (nats):
 *   ce_k<K>, kl_k<K>, elbo_k<K> (their sum: the NELBO, >= -log p(x) in expectation) and
 *   elbo_se_k<K> (its Monte Carlo standard error); iw_k<K>, iw_se_k<K> (the importance-weighted
 *   bound with K' = --iw-samples, over S / K' groups); ppl_k<K>, bpb_k<K> from iw_k<K>;
 *   at the reported K (--inner-steps or the checkpoint's, fixed in advance, added to the list):
 *   elbo, elbo_se, nll_bound = iw_k<K>, nll_bound_se, ppl, bpb. No K is chosen by its value.
 *
 * An autoencoder or memory model (seed 004; lm->chunk_logits) predicts each row's own T
 * tokens from one stored embedding: its bits per byte add the embedding's, at the bits its
 * decoder reads, beside controls with the embedding zeroed, shuffled across rows and a
 * unigram (evaluator/val_chunk.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "evaluator/latent.h"
#include "evaluator/task.h"
#include "evaluator/val_chunk.h"
#include "loader/batch.h"

typedef struct {
    loader_src_t *src;
    loader_params_t p;
    uint64_t steps;         /* batches evaluated */
    loader_split_info_t info;
    uint32_t *rows;         /* (B, T+1) */
    uint32_t *inputs;       /* (B, T) */
    int seq_len;
    int T_open;             /* T the batches were checked for at open (seq_len or 0) */
    const char *data;
    int batches, K, N;
    int draws, iw;          /* --draws, --iw-samples as given (0: the family's default) */
    int ks[EVAL_MAX_INNER_STEPS], nks;  /* LTM: the bound after each of these inner steps */
    int inner_steps;                    /* LTM: --inner-steps (0: the checkpoint's) */
    float fast_lr;
    val_chunk_t *chunk;                 /* autoencoders and memory models */
    uint32_t *other;                    /* (B, T+1) the shuffled control's batch */
} val_t;

static void val_close(void **self) {
    val_t *v = *self;
    if (!v) return;
    loader_src_close(&v->src);
    val_chunk_close(&v->chunk);
    free(v->other);
    free(v->rows);
    free(v->inputs);
    free(v);
    *self = NULL;
}

static int val_open(void **self, const eval_task_cfg_t *cfg, char *err, size_t errlen) {
    if (!cfg->data) {
        snprintf(err, errlen, "task val needs --data DIR");
        return EVAL_EARG;
    }
    if (cfg->batches < 0 || cfg->seq_len < 0 || cfg->val_docs < 0) {
        snprintf(err, errlen, "--batches, --seq-len and --val-docs must not be negative");
        return EVAL_EARG;
    }
    val_t *v = calloc(1, sizeof *v);
    if (!v) {
        snprintf(err, errlen, "out of memory");
        return EVAL_ENOMEM;
    }
    char why[256] = "";
    int rc = loader_src_open(&v->src, cfg->data, NULL, (uint64_t)cfg->val_docs, why, sizeof why);
    if (rc) {
        /* loader_src_open's lines start "dataset PATH:" already; only a bare status lacks it */
        if (why[0]) snprintf(err, errlen, "%s", why);
        else snprintf(err, errlen, "dataset %s: %s", cfg->data, loader_strerror(rc));
        free(v);
        return EVAL_EIO;
    }
    v->p.seed = (uint64_t)cfg->seed;
    v->p.world = 1;
    v->p.B = (uint32_t)cfg->batch;
    v->p.layout = WIRE_PACK;
    v->p.split = cfg->val_docs > 0 ? WIRE_VAL : WIRE_TRAIN;
    v->seq_len = cfg->seq_len;
    v->data = cfg->data;
    v->batches = cfg->batches;
    v->K = cfg->iw_samples > 0 ? cfg->iw_samples : 4;
    v->N = cfg->draws > 0 ? cfg->draws : 4;
    v->draws = cfg->draws;
    v->iw = cfg->iw_samples;
    v->inner_steps = cfg->inner_steps;
    v->fast_lr = cfg->fast_lr;
    if (cfg->inner_steps_list && (v->nks = eval_parse_steps(cfg->inner_steps_list, v->ks, err, errlen)) < 0) {
        int rc = v->nks;
        val_close((void **)&v);
        return rc;
    }
    if ((rc = val_chunk_open(&v->chunk, cfg->bits_list, cfg->bits_per_param, err, errlen))) {
        val_close((void **)&v);
        return rc;
    }
    loader_src_split_info(v->src, v->p.split, &v->info);
    if (v->info.n_bytes == 0 || v->info.n_tokens == 0) {
        snprintf(err, errlen, "dataset %s: the evaluated split has no tokens or no byte count", cfg->data);
        val_close((void **)&v);
        return EVAL_EFORMAT;
    }
    *self = v;
    return 0;
}

static void val_shape(const void *self, int *Bmax, int *Tmax) {
    const val_t *v = self;
    *Bmax = (int)v->p.B;
    *Tmax = v->seq_len;
}

/* Sum over row b of log p(target) from logits (B,T,V). */
static double row_logp(const float *lg, const uint32_t *rows, int b, int T, int V) {
    double s = 0;
    for (int t = 0; t < T; t++)
        s += eval_logprob(lg + ((size_t)b * T + t) * V, V, rows[(size_t)b * (T + 1) + t + 1]);
    return s;
}

/* The Free Transformer's bounds on one batch (see the top of the file); sums into acc. */
typedef struct { double ce_enc, kl, iw, ce_prior, iw_prior; } free_acc_t;
static int val_free_batch(val_t *v, eval_lm_t *lm, int B, int T, free_acc_t *acc, char *err,
                          size_t errlen) {
    const int V = lm->cfg.vocab_size, H = lm->latent_bits, K = v->K, N = v->N;
    const size_t n = (size_t)B * T;
    float *bl = malloc(sizeof(float) * n * H);
    uint32_t *z = malloc(sizeof(uint32_t) * n);
    double *logq = malloc(sizeof(double) * n), *logw = malloc(sizeof(double) * (size_t)B * K);
    double *logp = malloc(sizeof(double) * (size_t)B * N);
    int rc = 0;
    if (!bl || !z || !logq || !logw || !logp) {
        rc = (snprintf(err, errlen, "out of memory"), EVAL_ENOMEM);
        goto out;
    }
    const float *e = lm->encode(lm, v->inputs, B, T, err, errlen);
    if (!e) {
        rc = EVAL_EMODEL;
        goto out;
    }
    memcpy(bl, e, sizeof(float) * n * H);
    for (size_t i = 0; i < n; i++) acc->kl += eval_z_kl(bl + i * H, H);
    rng_t r;
    rng_seed2(&r, (uint64_t)v->p.seed ^ 0xE7A1u, v->p.step); /* same draws for every checkpoint */
    for (int k = 0; k < K; k++) {
        eval_z_posterior(&r, bl, z, logq, n, H);
        const float *lg = lm->logits(lm, v->inputs, z, B, T, err, errlen);
        if (!lg) {
            rc = EVAL_EMODEL;
            goto out;
        }
        for (int b = 0; b < B; b++) {
            double lp = row_logp(lg, v->rows, b, T, V), lr = 0;
            for (int t = 0; t < T; t++) lr += -H * M_LN2 - logq[(size_t)b * T + t];
            acc->ce_enc -= lp / K;
            logw[(size_t)b * K + k] = lp + lr;
        }
    }
    for (int b = 0; b < B; b++) acc->iw += eval_logmeanexp(logw + (size_t)b * K, K);
    for (int d = 0; d < N; d++) {
        eval_z_prior(&r, z, n, H);
        const float *lg = lm->logits(lm, v->inputs, z, B, T, err, errlen);
        if (!lg) {
            rc = EVAL_EMODEL;
            goto out;
        }
        for (int b = 0; b < B; b++) {
            logp[(size_t)b * N + d] = row_logp(lg, v->rows, b, T, V);
            acc->ce_prior -= logp[(size_t)b * N + d] / N;
        }
    }
    for (int b = 0; b < B; b++) acc->iw_prior += eval_logmeanexp(logp + (size_t)b * N, N);
out:
    free(bl);
    free(z);
    free(logq);
    free(logw);
    free(logp);
    return rc;
}

/* The LTM's bounds of one batch: for each K an inference of K steps, then S fresh draws; sums
 * into acc[i]. */
static int val_ltm_batch(val_t *v, eval_lm_t *lm, int B, int T, const int *ks, int nk, int S, int Kw,
                         eval_ltm_acc_t *acc, char *err, size_t errlen) {
    uint32_t *tgt = malloc(sizeof(uint32_t) * (size_t)B * T);
    double *ce = malloc(sizeof(double) * (size_t)S * B), *kl = malloc(sizeof(double) * B);
    double *logw = malloc(sizeof(double) * (size_t)S * B);
    int rc = 0;
    if (!tgt || !ce || !kl || !logw) {
        rc = (snprintf(err, errlen, "out of memory"), EVAL_ENOMEM);
        goto out;
    }
    for (int b = 0; b < B; b++) memcpy(tgt + (size_t)b * T, v->rows + (size_t)b * (T + 1) + 1, sizeof(uint32_t) * T);
    for (int i = 0; i < nk; i++) {
        /* row b of batch s draws from stream s * B + b: the same for every checkpoint; each K its
         * own inference from the same start (the rate's cosine spans the K steps) */
        if ((rc = lm->ltm_infer(lm, v->inputs, tgt, NULL, B, T, ks[i], (uint64_t)v->p.seed ^ 0x17A7E7A1ull,
                                v->p.step * (uint64_t)B, err, errlen)) ||
            (rc = lm->ltm_score(lm, tgt, NULL, S, ce, kl, logw, err, errlen)))
            goto out;
        if (eval_ltm_accumulate(&acc[i], ce, kl, logw, S, B, Kw)) {
            rc = (snprintf(err, errlen, "out of memory"), EVAL_ENOMEM);
            goto out;
        }
    }
out:
    free(tgt);
    free(ce);
    free(kl);
    free(logw);
    return rc;
}

static int val_run(void *self, eval_lm_t *lm, eval_values_t *out, volatile int *stop, char *err,
                   size_t errlen) {
    val_t *v = self;
    eval_ltm_settings(lm, v->inner_steps, v->fast_lr);
    /* the LTM's list of K: given, else 0 and the checkpoint's (or --inner-steps') K; the
     * reported K (nll_bound) is that K, fixed before any number is seen, added to the list */
    int ks[EVAL_MAX_INNER_STEPS + 1], nk = v->nks, krep = lm->ltm_steps;
    eval_ltm_acc_t lacc[EVAL_MAX_INNER_STEPS + 1];
    memset(lacc, 0, sizeof lacc);
    memcpy(ks, v->ks, sizeof(int) * EVAL_MAX_INNER_STEPS);
    if (lm->ltm_infer && !nk) ks[nk++] = 0;
    if (lm->ltm_infer) {
        int at = 0;
        while (at < nk && ks[at] < krep) at++;
        if (at == nk || ks[at] != krep) {
            memmove(ks + at + 1, ks + at, sizeof(int) * (nk - at));
            ks[at] = krep;
            nk++;
        }
    }
    /* the LTM's fresh draws S and its importance-weighted groups of K' */
    const int S = v->draws > 0 ? v->draws : 16, Kw = v->iw > 0 ? v->iw : 8;
    if (lm->ltm_infer && S < 2 * Kw) {
        snprintf(err, errlen, "LTM val: --draws %d must hold at least two groups of --iw-samples %d (a standard error "
                 "needs two)", S, Kw);
        return EVAL_EARG;
    }
    const dataset_meta_t *meta = loader_src_meta(v->src);
    if (meta->vocab_size > (uint32_t)lm->cfg.vocab_size || (int)meta->eot_id != lm->cfg.eot_id) {
        snprintf(err, errlen, "dataset %s (vocab %u, eot %u) does not match the model (vocab %d, eot %d)",
                 v->data, meta->vocab_size, meta->eot_id, lm->cfg.vocab_size, lm->cfg.eot_id);
        return EVAL_EMISMATCH;
    }
    int T = v->seq_len ? v->seq_len : lm->Tmax;
    int B = (int)v->p.B;
    if (T > lm->Tmax || B > lm->Bmax) {
        snprintf(err, errlen, "--seq-len %d / --batch %d beyond the model's %d / %d", T, B, lm->Tmax, lm->Bmax);
        return EVAL_EMISMATCH;
    }
    v->p.T = (uint32_t)T;
    uint64_t spe = 0;
    char why[256];
    if (loader_steps_per_epoch(v->src, &v->p, &spe, why, sizeof why) || spe == 0) {
        snprintf(err, errlen, "dataset %s: no full batch of %dx%d tokens in the evaluated split%s%s", v->data,
                 B, T + 1, spe ? ": " : "", spe ? why : "");
        return EVAL_EMISMATCH;
    }
    uint64_t steps = v->batches > 0 && (uint64_t)v->batches < spe ? (uint64_t)v->batches : spe;
    free(v->rows);
    free(v->inputs);
    free(v->other);
    v->rows = malloc(sizeof(uint32_t) * (size_t)B * (T + 1));
    v->inputs = malloc(sizeof(uint32_t) * (size_t)B * T);
    v->other = malloc(sizeof(uint32_t) * (size_t)B * (T + 1));
    if (!v->rows || !v->inputs || !v->other) {
        snprintf(err, errlen, "out of memory");
        return EVAL_ENOMEM;
    }
    if (lm->chunk_logits) {
        int rc = val_chunk_begin(v->chunk, lm, v->src, &v->p, B, T, err, errlen);
        if (rc) return rc;
    }
    const int V = lm->cfg.vocab_size;
    double nll = 0;
    uint64_t count = 0;
    free_acc_t fa = {0, 0, 0, 0, 0};
    for (uint64_t s = 0; s < steps; s++) {
        if (stop && *stop) {
            snprintf(err, errlen, "interrupted");
            return EVAL_EINTR;
        }
        v->p.step = s;
        if (loader_batch_make(v->src, &v->p, v->rows, NULL, NULL, why, sizeof why)) {
            snprintf(err, errlen, "dataset %s: batch %llu: %s", v->data, (unsigned long long)s, why);
            return EVAL_EFORMAT;
        }
        for (int b = 0; b < B; b++) memcpy(v->inputs + (size_t)b * T, v->rows + (size_t)b * (T + 1), sizeof(uint32_t) * T);
        count += (uint64_t)B * T;
        if (lm->latent_bits) {
            int rc = val_free_batch(v, lm, B, T, &fa, err, errlen);
            if (rc) return rc;
            continue;
        }
        if (lm->ltm_infer) {
            int rc = val_ltm_batch(v, lm, B, T, ks, nk, S, Kw, lacc, err, errlen);
            if (rc) return rc;
            continue;
        }
        if (lm->chunk_logits) {
            /* the shuffled control's embeddings: batch (s + S/2) mod S (rows shifted there) */
            loader_params_t q = v->p;
            q.step = (s + steps / 2) % steps;
            if (loader_batch_make(v->src, &q, v->other, NULL, NULL, why, sizeof why)) {
                snprintf(err, errlen, "dataset %s: batch %llu: %s", v->data, (unsigned long long)q.step, why);
                return EVAL_EFORMAT;
            }
            int rc = val_chunk_batch(v->chunk, lm, v->rows, steps > 1 || B > 1 ? v->other : NULL, B, T, err, errlen);
            if (rc) return rc;
            continue;
        }
        const float *lg = lm->logits(lm, v->inputs, NULL, B, T, err, errlen);
        if (!lg) return EVAL_EMODEL;
        for (int b = 0; b < B; b++) nll -= row_logp(lg, v->rows, b, T, V);
    }
    const double per_byte = (double)v->info.n_tokens / ((double)v->info.n_bytes * M_LN2);
    if (lm->latent_bits) {
        double ce_enc = fa.ce_enc / count, kl = fa.kl / count, iw = -fa.iw / count;
        double iwp = -fa.iw_prior / count;
        eval_values_add(out, "ce_enc", ce_enc);
        eval_values_add(out, "kl", kl);
        eval_values_add(out, "elbo", ce_enc + kl);
        eval_values_add(out, "iw_bound", iw);
        eval_values_add(out, "ce_prior", fa.ce_prior / count);
        eval_values_add(out, "iw_prior", iwp);
        eval_values_add(out, "nll_bound", iw);
        eval_values_add(out, "ppl", exp(iw));
        eval_values_add(out, "bpb", iw * per_byte);
        eval_values_add(out, "iw_samples", v->K);
        eval_values_add(out, "draws", v->N);
    } else if (lm->ltm_infer) {
        for (int i = 0; i < nk; i++) {
            char name[32];
            const eval_ltm_acc_t *a = &lacc[i];
            const double ce = a->ce / count, kl = a->kl / count, e = ce + kl, iw = a->iw / count;
            const struct { const char *f; double x; } kv[] = {
                {"ce_k%d", ce}, {"kl_k%d", kl}, {"elbo_k%d", e}, {"elbo_se_k%d", sqrt(a->var_nelbo) / count},
                {"iw_k%d", iw}, {"iw_se_k%d", sqrt(a->var_iw) / count}, {"ppl_k%d", exp(iw)}, {"bpb_k%d", iw * per_byte}};
            for (size_t j = 0; j < sizeof kv / sizeof kv[0]; j++) {
                snprintf(name, sizeof name, kv[j].f, ks[i]);
                eval_values_add(out, name, kv[j].x);
            }
            if (ks[i] == krep) {
                eval_values_add(out, "elbo", e);
                eval_values_add(out, "elbo_se", sqrt(a->var_nelbo) / count);
                eval_values_add(out, "nll_bound", iw);
                eval_values_add(out, "nll_bound_se", sqrt(a->var_iw) / count);
                eval_values_add(out, "ppl", exp(iw));
                eval_values_add(out, "bpb", iw * per_byte);
            }
        }
        eval_values_add(out, "inner_steps", krep);
        eval_values_add(out, "draws", S);
        eval_values_add(out, "iw_samples", Kw);
        eval_values_add(out, "fast_lr", lm->ltm_fast_lr);
    } else if (lm->chunk_logits) {
        val_chunk_values(v->chunk, lm, T, (double)v->info.n_tokens / (double)v->info.n_bytes, out);
    } else {
        double ce = nll / (double)count;
        eval_values_add(out, "ce", ce);
        eval_values_add(out, "ppl", exp(ce));
        eval_values_add(out, "bpb", ce * per_byte);
    }
    eval_values_add(out, "tokens", (double)count);
    return 0;
}

const eval_task_ops_t eval_task_val = {val_open, val_close, val_shape, val_run};
