/* evaluator/task_mc.c: multiple choice, scored as in seed 000 Appendix B.
 *
 * Each line of the JSONL file is {"context": str, "choices": [str, ...], "label": int} (the
 * lm-evaluation-harness names "query" and "gold" are accepted too), or an MMLU line as
 * distributed (cais/mmlu: {"question", "choices", "answer": index or letter, "subject"}), asked
 * as "Question: <question>\nAnswer:" with each choice after a space. A line may name its
 * "subject" (or "category"): then macro_avg/acc_char and macro_avg/acc_completion, the mean
 * over subjects of each subject's accuracy, are reported beside the micro averages (lines
 * without one form a group of their own), with the number of subjects. Every choice is scored
 * by the log-probability of its tokens after the context: row = [eot] context choice, where
 * the leading end-of-text stands where a document starts in training (the loader joins
 * documents with it). Context and choice are tokenized separately and concatenated, so the
 * choice's tokens are exactly those of its own text. A row longer than the model's context
 * loses tokens from the left of the context.
 *   acc_completion: argmax over choices of sum log p / number of choice tokens
 *   acc_char:       argmax over choices of sum log p / number of choice characters
 *   acc:            argmax of the plain sum (reported too; it favours short choices)
 * Ties go to the lowest index.
 *
 * Free Transformer: the encoder reads [eot] context only (never the choice it is asked to
 * score) and gives Z for those positions, drawn from q; the choice's positions take Z from
 * the uniform prior, as in generation. A choice's log-probability is the log of the mean
 * probability over `draws` such draws (log-mean-exp: a Monte Carlo estimate of
 * p(choice | context) with Z marginalised); the draws of a choice run as rows of one batch.
 *
 * Latent-thought LM: the posterior q(z | [eot] context) is inferred from the context's own
 * tokens (never the choice's), `draws` times at once (rows of one batch, each from its own
 * streams of the item's key); every choice is scored under those same draws and its
 * log-probability is the log-mean-exp over them, as above. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "evaluator/latent.h"
#include "evaluator/task.h"
#include "evaluator/textdata.h"

typedef struct {
    uint32_t *ctx;
    int nctx, nch, label;
    int subject;            /* index into mc_t's subjects (-1: none given) */
    uint32_t **ch;
    int *chlen, *chchars;
} mc_item_t;

typedef struct {
    eval_tok_t tok;
    mc_item_t *items;
    int n, cap, batch, draws;
    int inner_steps;        /* LTM: --inner-steps (0: the checkpoint's) */
    float fast_lr;
    uint64_t seed;
    uint32_t *rows;
    double *score;
    char **subjects;        /* the distinct "subject" / "category" values, in order of appearance */
    int nsub;
} mc_t;

static void mc_close(void **self) {
    mc_t *m = *self;
    if (!m) return;
    for (int i = 0; i < m->n; i++) {
        mc_item_t *it = &m->items[i];
        free(it->ctx);
        for (int c = 0; c < it->nch; c++) free(it->ch[c]);
        free(it->ch);
        free(it->chlen);
        free(it->chchars);
    }
    free(m->items);
    free(m->rows);
    free(m->score);
    for (int i = 0; i < m->nsub; i++) free(m->subjects[i]);
    free(m->subjects);
    eval_tok_close(&m->tok);
    free(m);
    *self = NULL;
}

static json_t *field2(json_t *o, const char *a, const char *b) {
    json_t *x = json_object_get(o, a);
    return x ? x : json_object_get(o, b);
}

/* Index of subject name s in m (added when new); -1 on out-of-memory. */
static int subject_index(mc_t *m, const char *s) {
    for (int i = 0; i < m->nsub; i++)
        if (!strcmp(m->subjects[i], s)) return i;
    char **q = realloc(m->subjects, sizeof *q * (m->nsub + 1));
    if (!q) return -1;
    m->subjects = q;
    if (!(q[m->nsub] = strdup(s))) return -1;
    return m->nsub++;
}

static int mc_line(json_t *o, int line, void *ctx, char *why, size_t whylen) {
    mc_t *m = ctx;
    json_t *c = field2(o, "context", "query"), *ch = json_object_get(o, "choices");
    json_t *lb = field2(o, "label", "gold");
    json_t *sub = field2(o, "subject", "category");
    /* MMLU as distributed (cais/mmlu): question, choices, answer (index or letter), subject;
     * asked in the cloze form that acc_char scores: "Question: q\nAnswer:" + " choice" */
    json_t *mq = json_object_get(o, "question"), *ma = json_object_get(o, "answer");
    char *mmlu_ctx = NULL;
    json_int_t mmlu_label = -1;
    if (!c && json_is_string(mq) && ma) {
        if (json_is_integer(ma)) mmlu_label = json_integer_value(ma);
        else if (json_is_string(ma) && strlen(json_string_value(ma)) == 1 && json_string_value(ma)[0] >= 'A' &&
                 json_string_value(ma)[0] <= 'Z')
            mmlu_label = json_string_value(ma)[0] - 'A';
        else return snprintf(why, whylen, "\"answer\" must be a choice's index or letter"), -1;
        if (!json_is_array(ch) || mmlu_label >= (json_int_t)json_array_size(ch))
            return snprintf(why, whylen, "\"answer\" must index \"choices\""), -1;
        mmlu_ctx = malloc(strlen(json_string_value(mq)) + 32);
        if (!mmlu_ctx) return snprintf(why, whylen, "out of memory"), EVAL_ENOMEM;
        sprintf(mmlu_ctx, "Question: %s\nAnswer:", json_string_value(mq));
    } else {
        if (!json_is_string(c)) return snprintf(why, whylen, "\"context\" (or MMLU's \"question\") missing or not a string"), -1;
        if (!json_is_array(ch) || json_array_size(ch) < 2)
            return snprintf(why, whylen, "\"choices\" must be an array of at least 2 strings"), -1;
        if (!json_is_integer(lb) || json_integer_value(lb) < 0 ||
            json_integer_value(lb) >= (json_int_t)json_array_size(ch))
            return snprintf(why, whylen, "\"label\" must be an integer index into \"choices\""), -1;
    }
    if (sub && !json_is_string(sub)) {
        free(mmlu_ctx);
        return snprintf(why, whylen, "\"subject\" / \"category\" must be a string"), -1;
    }
    if (json_array_size(ch) < 2) {
        free(mmlu_ctx);
        return snprintf(why, whylen, "\"choices\" must be an array of at least 2 strings"), -1;
    }
    if (eval_grow(&m->items, &m->cap, m->n, sizeof *m->items)) return free(mmlu_ctx), snprintf(why, whylen, "out of memory"), EVAL_ENOMEM;
    mc_item_t *it = &m->items[m->n];
    memset(it, 0, sizeof *it);
    m->n++; /* counted now so mc_close frees a half-filled item */
    it->label = mmlu_ctx ? (int)mmlu_label : (int)json_integer_value(lb);
    it->subject = sub ? subject_index(m, json_string_value(sub)) : -1;
    if (sub && it->subject < 0) return free(mmlu_ctx), snprintf(why, whylen, "out of memory"), EVAL_ENOMEM;
    int k = (int)json_array_size(ch);
    it->ch = calloc(k, sizeof *it->ch);
    it->chlen = calloc(k, sizeof *it->chlen);
    it->chchars = calloc(k, sizeof *it->chchars);
    if (!it->ch || !it->chlen || !it->chchars) return snprintf(why, whylen, "out of memory"), EVAL_ENOMEM;
    int bad = eval_tok_encode(&m->tok, mmlu_ctx ? mmlu_ctx : json_string_value(c), &it->ctx, &it->nctx);
    free(mmlu_ctx);
    if (bad) return snprintf(why, whylen, "out of memory"), EVAL_ENOMEM;
    for (int i = 0; i < k; i++) {
        json_t *s = json_array_get(ch, i);
        if (!json_is_string(s)) return snprintf(why, whylen, "choice %d is not a string", i), -1;
        /* MMLU's choices come bare: the space that separates them from "Answer:" goes first */
        char *text = malloc(strlen(json_string_value(s)) + 2);
        if (!text) return snprintf(why, whylen, "out of memory"), EVAL_ENOMEM;
        sprintf(text, "%s%s", c ? "" : " ", json_string_value(s));
        bad = eval_tok_encode(&m->tok, text, &it->ch[i], &it->chlen[i]);
        it->nch = i + 1;
        it->chchars[i] = eval_utf8_chars(text);
        free(text);
        if (bad) return snprintf(why, whylen, "out of memory"), EVAL_ENOMEM;
        if (it->chlen[i] == 0) return snprintf(why, whylen, "choice %d is empty", i), -1;
    }
    (void)line;
    return 0;
}

static int mc_open(void **self, const eval_task_cfg_t *cfg, char *err, size_t errlen) {
    if (!cfg->file) {
        snprintf(err, errlen, "task mc needs --file TASK.jsonl");
        return EVAL_EARG;
    }
    mc_t *m = calloc(1, sizeof *m);
    if (!m) return snprintf(err, errlen, "out of memory"), EVAL_ENOMEM;
    m->batch = cfg->batch;
    m->draws = cfg->draws > 0 ? cfg->draws : 4;
    m->inner_steps = cfg->inner_steps;
    m->fast_lr = cfg->fast_lr;
    m->seed = (uint64_t)cfg->seed;
    int rc = eval_tok_open(&m->tok, cfg->vocab, err, errlen);
    if (rc) {
        free(m);
        return rc;
    }
    rc = eval_jsonl_read(cfg->file, cfg->limit, mc_line, m, err, errlen);
    if (!rc && m->n == 0) {
        snprintf(err, errlen, "%s: no questions", cfg->file);
        rc = EVAL_EFORMAT;
    }
    if (rc) {
        mc_close((void **)&m);
        return rc;
    }
    *self = m;
    return 0;
}

static void mc_shape(const void *self, int *Bmax, int *Tmax) {
    const mc_t *m = self;
    *Bmax = m->batch;
    *Tmax = 0;
}

/* Sum of log p of every choice of it into m->score[0..nch). */
static int mc_score_item(mc_t *m, const mc_item_t *it, eval_lm_t *lm, char *err, size_t errlen) {
    const int V = lm->cfg.vocab_size, Tm = lm->Tmax;
    for (int c0 = 0; c0 < it->nch; c0 += lm->Bmax) {
        int B = it->nch - c0 < lm->Bmax ? it->nch - c0 : lm->Bmax;
        /* row length L = 1 + kept context + choice; the model sees L-1 tokens */
        int T = 1;
        for (int b = 0; b < B; b++) {
            int L = 1 + it->nctx + it->chlen[c0 + b];
            if (L - 1 > T) T = L - 1;
        }
        if (T > Tm) T = Tm;
        for (int b = 0; b < B; b++) {
            int nc = it->chlen[c0 + b];
            if (nc > Tm) {
                snprintf(err, errlen, "a choice of %d tokens does not fit the model's %d positions", nc, Tm);
                return EVAL_EMISMATCH;
            }
            uint32_t *row = m->rows + (size_t)b * (T + 1);
            /* context tokens kept: as many as fit before the choice in T+1 slots with the eot */
            int keep = it->nctx < T - nc ? it->nctx : T - nc;
            int L = 0;
            row[L++] = (uint32_t)lm->cfg.eot_id;
            memcpy(row + L, it->ctx + it->nctx - keep, sizeof(uint32_t) * keep);
            L += keep;
            memcpy(row + L, it->ch[c0 + b], sizeof(uint32_t) * nc);
            L += nc;
            for (int i = L; i < T + 1; i++) row[i] = (uint32_t)lm->cfg.eot_id;
        }
        uint32_t *in = malloc(sizeof(uint32_t) * (size_t)B * T);
        if (!in) return snprintf(err, errlen, "out of memory"), EVAL_ENOMEM;
        for (int b = 0; b < B; b++) memcpy(in + (size_t)b * T, m->rows + (size_t)b * (T + 1), sizeof(uint32_t) * T);
        const float *lg = lm->logits(lm, in, NULL, B, T, err, errlen);
        free(in);
        if (!lg) return EVAL_EMODEL;
        for (int b = 0; b < B; b++) {
            int nc = it->chlen[c0 + b];
            int keep = it->nctx < T - nc ? it->nctx : T - nc;
            const uint32_t *row = m->rows + (size_t)b * (T + 1);
            double s = 0;
            /* choice token j sits at row position 1 + keep + j, predicted at the one before */
            for (int j = 0; j < nc; j++) {
                int p = keep + j;
                s += eval_logprob(lg + ((size_t)b * T + p) * V, V, row[p + 1]);
            }
            m->score[c0 + b] = s;
        }
    }
    return 0;
}

/* Free Transformer: scores of every choice of item `idx` (see the top of the file). */
static int mc_score_item_free(mc_t *m, const mc_item_t *it, int idx, eval_lm_t *lm, char *err,
                              size_t errlen) {
    const int V = lm->cfg.vocab_size, Tm = lm->Tmax, H = lm->latent_bits, N = m->draws;
    uint32_t *in = malloc(sizeof(uint32_t) * (size_t)lm->Bmax * Tm);
    uint32_t *z = malloc(sizeof(uint32_t) * (size_t)lm->Bmax * Tm);
    float *bl = malloc(sizeof(float) * (size_t)Tm * H);
    double *lp = malloc(sizeof(double) * N);
    int rc = 0;
    if (!in || !z || !bl || !lp) {
        rc = (snprintf(err, errlen, "out of memory"), EVAL_ENOMEM);
        goto out;
    }
    rng_t r;
    rng_seed2(&r, m->seed ^ 0x3C3Cu, (uint64_t)idx);
    for (int c = 0; c < it->nch; c++) {
        int nc = it->chlen[c];
        if (nc > Tm) {
            rc = (snprintf(err, errlen, "a choice of %d tokens does not fit the model's %d positions", nc, Tm), EVAL_EMISMATCH);
            goto out;
        }
        int T = it->nctx + nc < Tm ? it->nctx + nc : Tm; /* 1 + keep + nc = T + 1 */
        int keep = T - nc, Lc = 1 + keep;
        uint32_t *row = m->rows;
        row[0] = (uint32_t)lm->cfg.eot_id;
        memcpy(row + 1, it->ctx + it->nctx - keep, sizeof(uint32_t) * keep);
        memcpy(row + Lc, it->ch[c], sizeof(uint32_t) * nc);
        /* the encoder sees the context only (Lc <= T positions: the choice is not among them) */
        const float *e = lm->encode(lm, row, 1, Lc, err, errlen);
        if (!e) {
            rc = EVAL_EMODEL;
            goto out;
        }
        memcpy(bl, e, sizeof(float) * (size_t)Lc * H);
        for (int d0 = 0; d0 < N; d0 += lm->Bmax) {
            int B = N - d0 < lm->Bmax ? N - d0 : lm->Bmax;
            for (int b = 0; b < B; b++) {
                memcpy(in + (size_t)b * T, row, sizeof(uint32_t) * T);
                eval_z_posterior(&r, bl, z + (size_t)b * T, NULL, (size_t)Lc, H);
                eval_z_prior(&r, z + (size_t)b * T + Lc, (size_t)(T - Lc), H);
            }
            const float *lg = lm->logits(lm, in, z, B, T, err, errlen);
            if (!lg) {
                rc = EVAL_EMODEL;
                goto out;
            }
            for (int b = 0; b < B; b++) {
                double s = 0;
                for (int j = 0; j < nc; j++) {
                    int p = keep + j;
                    s += eval_logprob(lg + ((size_t)b * T + p) * V, V, row[p + 1]);
                }
                lp[d0 + b] = s;
            }
        }
        m->score[c] = eval_logmeanexp(lp, N);
    }
out:
    free(in);
    free(z);
    free(bl);
    free(lp);
    return rc;
}

/* Latent-thought LM: scores of every choice of item `idx` (see the top of the file). */
static int mc_score_item_ltm(mc_t *m, const mc_item_t *it, int idx, eval_lm_t *lm, char *err,
                             size_t errlen) {
    const int V = lm->cfg.vocab_size, Tm = lm->Tmax;
    const int N = m->draws < lm->Bmax ? m->draws : lm->Bmax;
    int maxch = 0;
    for (int c = 0; c < it->nch; c++) maxch = it->chlen[c] > maxch ? it->chlen[c] : maxch;
    if (maxch > Tm) {
        snprintf(err, errlen, "a choice of %d tokens does not fit the model's %d positions", maxch, Tm);
        return EVAL_EMISMATCH;
    }
    /* one context for all choices: as much of it as leaves room for the longest choice */
    const int keep = it->nctx < Tm - maxch ? it->nctx : Tm - maxch, Lc = 1 + keep;
    uint32_t *row = m->rows, *in = malloc(sizeof(uint32_t) * (size_t)N * Tm);
    double *lp = malloc(sizeof(double) * N);
    int rc = 0;
    if (!in || !lp) {
        rc = (snprintf(err, errlen, "out of memory"), EVAL_ENOMEM);
        goto out;
    }
    row[0] = (uint32_t)lm->cfg.eot_id;
    memcpy(row + 1, it->ctx + it->nctx - keep, sizeof(uint32_t) * keep);
    const uint64_t key = rng_counter_key(m->seed ^ 0x3C3Cu, (uint64_t)idx);
    const int steps = lm->ltm_steps;
    if (Lc >= 2) {   /* the posterior from the context's targets: rows [eot] ctx, N times */
        for (int b = 0; b < N; b++) memcpy(in + (size_t)b * (Lc - 1), row, sizeof(uint32_t) * (Lc - 1));
        uint32_t *tg = malloc(sizeof(uint32_t) * (size_t)N * (Lc - 1));
        if (!tg) { rc = (snprintf(err, errlen, "out of memory"), EVAL_ENOMEM); goto out; }
        for (int b = 0; b < N; b++) memcpy(tg + (size_t)b * (Lc - 1), row + 1, sizeof(uint32_t) * (Lc - 1));
        rc = lm->ltm_infer(lm, in, tg, NULL, N, Lc - 1, steps, key, 0, err, errlen);
        free(tg);
        if (rc) goto out;
    } else if ((rc = lm->ltm_prior(lm, N, key, 0, err, errlen))) {   /* no context: the prior */
        goto out;
    }
    for (int c = 0; c < it->nch; c++) {
        const int nc = it->chlen[c], T = Lc - 1 + nc;   /* row: [eot] ctx choice, T + 1 tokens */
        memcpy(row + Lc, it->ch[c], sizeof(uint32_t) * nc);
        for (int b = 0; b < N; b++) memcpy(in + (size_t)b * T, row, sizeof(uint32_t) * T);
        const float *lg = lm->logits(lm, in, NULL, N, T, err, errlen);
        if (!lg) { rc = EVAL_EMODEL; goto out; }
        for (int b = 0; b < N; b++) {
            double s = 0;
            for (int j = 0; j < nc; j++) {
                const int p = keep + j;
                s += eval_logprob(lg + ((size_t)b * T + p) * V, V, row[p + 1]);
            }
            lp[b] = s;
        }
        m->score[c] = eval_logmeanexp(lp, N);
    }
out:
    free(in);
    free(lp);
    return rc;
}

static int best_of(const double *s, const int *norm, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) {
        double a = norm ? s[i] / norm[i] : s[i], b = norm ? s[best] / norm[best] : s[best];
        if (a > b) best = i;
    }
    return best;
}

static int mc_run(void *self, eval_lm_t *lm, eval_values_t *out, volatile int *stop, char *err,
                  size_t errlen) {
    mc_t *m = self;
    if (bpe_vocab_size(m->tok.vocab) > (uint32_t)lm->cfg.vocab_size) {
        snprintf(err, errlen, "the tokenizer's %u ids do not fit the model's vocabulary of %d",
                 bpe_vocab_size(m->tok.vocab), lm->cfg.vocab_size);
        return EVAL_EMISMATCH;
    }
    int maxch = 0;
    for (int i = 0; i < m->n; i++)
        if (m->items[i].nch > maxch) maxch = m->items[i].nch;
    free(m->rows);
    free(m->score);
    m->rows = malloc(sizeof(uint32_t) * (size_t)lm->Bmax * (lm->Tmax + 1));
    m->score = malloc(sizeof(double) * maxch);
    if (!m->rows || !m->score) return snprintf(err, errlen, "out of memory"), EVAL_ENOMEM;
    int ok_tok = 0, ok_char = 0, ok_sum = 0;
    /* per subject: items, right by acc_char, right by acc_completion */
    int *sub_n = calloc((size_t)m->nsub + 1, sizeof(int)), *sub_char = calloc((size_t)m->nsub + 1, sizeof(int)),
        *sub_tok = calloc((size_t)m->nsub + 1, sizeof(int));
    if (!sub_n || !sub_char || !sub_tok) {
        free(sub_n);
        free(sub_char);
        free(sub_tok);
        return snprintf(err, errlen, "out of memory"), EVAL_ENOMEM;
    }
    eval_ltm_settings(lm, m->inner_steps, m->fast_lr);
    int rc = 0;
    for (int i = 0; i < m->n && !rc; i++) {
        if (stop && *stop) {
            rc = (snprintf(err, errlen, "interrupted"), EVAL_EINTR);
            break;
        }
        const mc_item_t *it = &m->items[i];
        rc = lm->latent_bits ? mc_score_item_free(m, it, i, lm, err, errlen)
             : lm->ltm_infer ? mc_score_item_ltm(m, it, i, lm, err, errlen)
                             : mc_score_item(m, it, lm, err, errlen);
        if (rc) break;
        const int t = best_of(m->score, it->chlen, it->nch) == it->label;
        const int c = best_of(m->score, it->chchars, it->nch) == it->label;
        ok_tok += t;
        ok_char += c;
        ok_sum += best_of(m->score, NULL, it->nch) == it->label;
        const int g = it->subject >= 0 ? it->subject : m->nsub; /* items without one: a group of their own */
        sub_n[g]++;
        sub_char[g] += c;
        sub_tok[g] += t;
    }
    if (!rc) {
        eval_values_add(out, "acc_completion", (double)ok_tok / m->n);
        eval_values_add(out, "acc_char", (double)ok_char / m->n);
        eval_values_add(out, "acc", (double)ok_sum / m->n);
        eval_values_add(out, "n", m->n);
        if (m->nsub) {
            /* seed 000's macro_avg/acc_char: the mean over subjects of each one's accuracy */
            double mc = 0, mt = 0;
            int groups = 0;
            for (int g = 0; g <= m->nsub; g++)
                if (sub_n[g]) {
                    mc += (double)sub_char[g] / sub_n[g];
                    mt += (double)sub_tok[g] / sub_n[g];
                    groups++;
                }
            eval_values_add(out, "macro_avg/acc_char", mc / groups);
            eval_values_add(out, "macro_avg/acc_completion", mt / groups);
            eval_values_add(out, "subjects", groups);
        }
    }
    free(sub_n);
    free(sub_char);
    free(sub_tok);
    return rc;
}

const eval_task_ops_t eval_task_mc = {mc_open, mc_close, mc_shape, mc_run};
