/* evaluator/val_chunk.c: task val for the autoencoders and memory models (seed 004).
 *
 * Such a model predicts each row's own T tokens from one stored embedding of n_p floats
 * (lm->n_embed; for a memory model also from the tokens before each), so its bits per byte
 * have two terms (seed 004's formulas; L_t / L_b the split's tokens per byte):
 *   decoder    (L_t / L_b) CE / ln 2
 *   embedding  n_p b_p / (T L_b / L_t): b_p bits per float, amortised over the T tokens
 *              (T L_b / L_t bytes) the embedding encodes.
 * The bits charged are the bits the decoder uses: it reads the b-bit code of the embedding
 * (model/mixers.h: clamped to [-R, R], rounded to 2^b levels; b = 32: the floats themselves).
 * An unbounded embedding (a model trained without --embed-range) has no code of b < 32 bits,
 * so only b = 32 is reported for it. For each b of --bits-list (default 4,8,16,32):
 *   ce_b<b>    the decoder's cross-entropy per token (nats) reading the b-bit code;
 *   bpb_b<b>   the total bits per byte at b bits.
 * At the headline b_p (--bits-per-param; default 8, 32 for an unbounded embedding):
 *   ce, bpb_decoder, bpb_embedding, bpb (their sum, comparable with a causal model's bpb),
 *   ce_total (the same total in nats per token: seed 004's "normalized loss").
 * Controls at b_p, on the same tokens, that say whether the embedding of a row carries that
 * row's tokens:
 *   ce_zero     the decoder reads zeros instead of the embedding;
 *   ce_shuffle  it reads another chunk's embedding: row b of batch s takes that of row
 *               (b + B/2) mod B of batch (s + S/2) mod S, S the batches evaluated (half the
 *               split away: another document as a rule); absent when S = B = 1;
 *   ce_unigram  a unigram of the train split (add-one smoothing: (count + 1) / (N + V)) on the
 *               same tokens, what a decoder that knows nothing of the row reaches without
 *               positions; absent without a train split (--val-docs 0);
 *   gain_<c>, gain_<c>_se  the mean over rows of (the row's CE under control c - its CE with
 *               its own embedding), nats per token, and the standard error of that mean over
 *               rows (the rows of a batch are consecutive chunks of the split, not independent
 *               draws: the error is a little optimistic);
 *   beats_controls  1 when every control's gain exceeds twice its standard error, else 0. */
#include "evaluator/val_chunk.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { C_ZERO, C_SHUFFLE, C_UNIGRAM, N_CONTROLS };
static const char *const CONTROL[N_CONTROLS] = {"zero", "shuffle", "unigram"};

struct val_chunk {
    int list[VAL_CHUNK_MAX_BITS], nlist; /* --bits-list */
    int bp_flag;                         /* --bits-per-param (0: by the embedding) */
    int bp;                              /* the headline bits, resolved per model */
    int bits[VAL_CHUNK_MAX_BITS + 1], nb;/* the bits evaluated: the list's the model has, and bp */
    double *logp_uni;                    /* (V) the train split's unigram, or NULL */
    int uni_tried;
    uint32_t *tok, *enc;                 /* (B,T) the chunks; another batch's, for the shuffle */
    double *own;                         /* (B) each row's CE at bp */
    /* sums over the rows evaluated */
    double nll[VAL_CHUNK_MAX_BITS + 1];  /* -log p per bits */
    double ctl[N_CONTROLS], d[N_CONTROLS], d2[N_CONTROLS];
    uint64_t rows, tokens, ctl_rows[N_CONTROLS];
};

static int parse_bits(const char *list, int *out, char *err, size_t errlen) {
    int n = 0;
    for (const char *p = list; p && *p;) {
        char *end;
        long b = strtol(p, &end, 10);
        if (end == p || (*end && *end != ',') || !(b == 32 || (b >= 1 && b <= 24)) || (n && b <= out[n - 1]) ||
            n == VAL_CHUNK_MAX_BITS) {
            snprintf(err, errlen, "--bits-list '%s': want up to %d ascending bit counts, each 1..24 or 32, comma-separated",
                     list, VAL_CHUNK_MAX_BITS);
            return EVAL_EARG;
        }
        out[n++] = (int)b;
        p = *end ? end + 1 : end;
    }
    if (!n) snprintf(err, errlen, "--bits-list is empty");
    return n ? n : EVAL_EARG;
}

int val_chunk_open(val_chunk_t **pc, const char *bits_list, int bits_per_param, char *err, size_t errlen) {
    *pc = NULL;
    if (bits_per_param && bits_per_param != 4 && bits_per_param != 8 && bits_per_param != 16 && bits_per_param != 32) {
        snprintf(err, errlen, "--bits-per-param %d: the stored embedding's floats take 4, 8, 16 or 32 bits", bits_per_param);
        return EVAL_EARG;
    }
    val_chunk_t *c = calloc(1, sizeof *c);
    if (!c) return snprintf(err, errlen, "out of memory"), EVAL_ENOMEM;
    c->nlist = parse_bits(bits_list ? bits_list : "4,8,16,32", c->list, err, errlen);
    if (c->nlist < 0) {
        int rc = c->nlist;
        free(c);
        return rc;
    }
    c->bp_flag = bits_per_param;
    *pc = c;
    return 0;
}

void val_chunk_close(val_chunk_t **pc) {
    val_chunk_t *c = *pc;
    if (!c) return;
    free(c->logp_uni);
    free(c->tok);
    free(c->enc);
    free(c->own);
    free(c);
    *pc = NULL;
}

/* Counts the train split's tokens (epoch 0's batches of B x (T+1)) into the add-one unigram. */
static int unigram(val_chunk_t *c, loader_src_t *src, const loader_params_t *p, int V, int B, int T, char *err,
                   size_t errlen) {
    loader_params_t q = *p;
    q.split = WIRE_TRAIN;
    q.epoch = 0;
    q.B = (uint32_t)B;
    q.T = (uint32_t)T;
    uint64_t steps = 0;
    char why[256];
    if (loader_steps_per_epoch(src, &q, &steps, why, sizeof why)) return 0; /* no train batch: no control */
    uint64_t *count = calloc((size_t)V, sizeof *count), n = 0;
    uint32_t *rows = malloc(sizeof(uint32_t) * (size_t)B * (T + 1));
    c->logp_uni = malloc(sizeof(double) * (size_t)V);
    int rc = 0;
    if (!count || !rows || !c->logp_uni) {
        rc = (snprintf(err, errlen, "out of memory"), EVAL_ENOMEM);
        goto out;
    }
    for (q.step = 0; q.step < steps; q.step++) {
        if (loader_batch_make(src, &q, rows, NULL, NULL, why, sizeof why)) {
            rc = (snprintf(err, errlen, "the train split's batch %llu: %s", (unsigned long long)q.step, why), EVAL_EFORMAT);
            goto out;
        }
        for (size_t i = 0; i < (size_t)B * (T + 1); i++)
            if (rows[i] < (uint32_t)V) count[rows[i]]++, n++;
    }
    for (int v = 0; v < V; v++) c->logp_uni[v] = log((count[v] + 1.0) / ((double)n + V));
out:
    if (rc) {
        free(c->logp_uni);
        c->logp_uni = NULL;
    }
    free(count);
    free(rows);
    return rc;
}

int val_chunk_begin(val_chunk_t *c, eval_lm_t *lm, loader_src_t *src, const loader_params_t *p, int B, int T,
                    char *err, size_t errlen) {
    const int bounded = lm->embed_range > 0;
    c->bp = c->bp_flag ? c->bp_flag : bounded ? 8 : 32;
    if (!bounded && c->bp < 32) {
        snprintf(err, errlen, "--bits-per-param %d: this model's stored embedding is unbounded (trained without "
                 "--embed-range), so no %d-bit code of it exists; only 32 applies", c->bp, c->bp);
        return EVAL_EARG;
    }
    c->nb = 0;
    int have_bp = 0;
    for (int i = 0; i < c->nlist; i++) {
        if (!bounded && c->list[i] < 32) continue;
        if (!have_bp && c->bp < c->list[i]) c->bits[c->nb++] = c->bp, have_bp = 1;
        if (c->list[i] == c->bp) have_bp = 1;
        c->bits[c->nb++] = c->list[i];
    }
    if (!have_bp) c->bits[c->nb++] = c->bp;
    memset(c->nll, 0, sizeof c->nll);
    memset(c->ctl, 0, sizeof c->ctl);
    memset(c->d, 0, sizeof c->d);
    memset(c->d2, 0, sizeof c->d2);
    memset(c->ctl_rows, 0, sizeof c->ctl_rows);
    c->rows = c->tokens = 0;
    free(c->tok);
    free(c->enc);
    free(c->own);
    c->tok = malloc(sizeof(uint32_t) * (size_t)B * T);
    c->enc = malloc(sizeof(uint32_t) * (size_t)B * T);
    c->own = malloc(sizeof(double) * (size_t)B);
    if (!c->tok || !c->enc || !c->own) return snprintf(err, errlen, "out of memory"), EVAL_ENOMEM;
    if (!c->uni_tried && p->split == WIRE_VAL) {
        c->uni_tried = 1;
        return unigram(c, src, p, lm->cfg.vocab_size, B, T, err, errlen);
    }
    return 0;
}

/* -log p of row b's T tokens, each predicted by row t of the logits (B,T,V), per token. */
static double row_ce(const float *lg, const uint32_t *tok, int b, int T, int V) {
    double s = 0;
    for (int t = 0; t < T; t++) s -= eval_logprob(lg + ((size_t)b * T + t) * V, V, tok[(size_t)b * T + t]);
    return s / T;
}

/* A control's per-row CE into its sums, paired with the row's own. */
static void control_row(val_chunk_t *c, int k, int b, double ce) {
    const double d = ce - c->own[b];
    c->ctl[k] += ce;
    c->d[k] += d;
    c->d2[k] += d * d;
    c->ctl_rows[k]++;
}

int val_chunk_batch(val_chunk_t *c, eval_lm_t *lm, const uint32_t *rows, const uint32_t *other, int B, int T,
                    char *err, size_t errlen) {
    const int V = lm->cfg.vocab_size;
    for (int b = 0; b < B; b++) memcpy(c->tok + (size_t)b * T, rows + (size_t)b * (T + 1), sizeof(uint32_t) * T);
    for (int i = 0; i < c->nb; i++) {
        const float *lg = lm->chunk_logits(lm, c->tok, NULL, c->bits[i], 0, B, T, err, errlen);
        if (!lg) return EVAL_EMODEL;
        for (int b = 0; b < B; b++) {
            const double ce = row_ce(lg, c->tok, b, T, V);
            c->nll[i] += ce * T;
            if (c->bits[i] == c->bp) c->own[b] = ce;
        }
    }
    const float *lg = lm->chunk_logits(lm, c->tok, NULL, c->bp, 1, B, T, err, errlen);
    if (!lg) return EVAL_EMODEL;
    for (int b = 0; b < B; b++) control_row(c, C_ZERO, b, row_ce(lg, c->tok, b, T, V));
    if (other) {
        for (int b = 0; b < B; b++)
            memcpy(c->enc + (size_t)b * T, other + (size_t)((b + B / 2) % B) * (T + 1), sizeof(uint32_t) * T);
        if (!(lg = lm->chunk_logits(lm, c->tok, c->enc, c->bp, 0, B, T, err, errlen))) return EVAL_EMODEL;
        for (int b = 0; b < B; b++) control_row(c, C_SHUFFLE, b, row_ce(lg, c->tok, b, T, V));
    }
    if (c->logp_uni)
        for (int b = 0; b < B; b++) {
            double s = 0;
            for (int t = 0; t < T; t++) s -= c->logp_uni[c->tok[(size_t)b * T + t]];
            control_row(c, C_UNIGRAM, b, s / T);
        }
    c->rows += (uint64_t)B;
    c->tokens += (uint64_t)B * T;
    return 0;
}

void val_chunk_values(const val_chunk_t *c, const eval_lm_t *lm, int T, double tokens_per_byte,
                      eval_values_t *out) {
    const double per_byte = tokens_per_byte / M_LN2;
    /* the embedding's bits per byte at b bits per float */
#define EMB_BPB(b) ((double)lm->n_embed * (b) * tokens_per_byte / T)
    char name[32];
    double ce = NAN;
    for (int i = 0; i < c->nb; i++) {
        const double x = c->nll[i] / (double)c->tokens;
        if (c->bits[i] == c->bp) ce = x;
        snprintf(name, sizeof name, "ce_b%d", c->bits[i]);
        eval_values_add(out, name, x);
        snprintf(name, sizeof name, "bpb_b%d", c->bits[i]);
        eval_values_add(out, name, x * per_byte + EMB_BPB(c->bits[i]));
    }
    eval_values_add(out, "ce", ce);
    eval_values_add(out, "bpb_decoder", ce * per_byte);
    eval_values_add(out, "embed_floats", lm->n_embed);
    eval_values_add(out, "embed_range", lm->embed_range);
    eval_values_add(out, "bits_per_param", c->bp);
    eval_values_add(out, "bpb_embedding", EMB_BPB(c->bp));
    eval_values_add(out, "bpb", ce * per_byte + EMB_BPB(c->bp));
    eval_values_add(out, "ce_total", ce + EMB_BPB(c->bp) / per_byte);
#undef EMB_BPB
    int beats = 1;
    for (int k = 0; k < N_CONTROLS; k++) {
        const double n = (double)c->ctl_rows[k];
        if (!n) continue;
        const double g = c->d[k] / n, var = n > 1 ? (c->d2[k] - n * g * g) / (n - 1) : NAN;
        const double se = sqrt(var > 0 ? var : 0) / sqrt(n);
        snprintf(name, sizeof name, "ce_%s", CONTROL[k]);
        eval_values_add(out, name, c->ctl[k] / n);
        snprintf(name, sizeof name, "gain_%s", CONTROL[k]);
        eval_values_add(out, name, g);
        snprintf(name, sizeof name, "gain_%s_se", CONTROL[k]);
        eval_values_add(out, name, se);
        beats &= g > 2 * se;
    }
    eval_values_add(out, "beats_controls", beats);
    eval_values_add(out, "rows", (double)c->rows);
}
