/* evaluator/task_em.c: generative exact match.
 *
 * Each line of the JSONL file is {"prompt": str, "answer": str} with optional "stop" (a
 * string, or an array of up to 8, that ends the generation; default "\n") and "max_tokens"
 * (default: the number of tokens of the answer, so a model must produce the answer in its
 * first tokens). The model continues [eot] prompt, greedily (temperature 0) or sampled with
 * the task's seed (item i uses rng_seed2(seed, i), so the same seed gives the same text);
 * generation ends at the end-of-text token, at a stop string, or after max_tokens. The item
 * counts when the generated text, cut at the first stop string, equals the answer with
 * surrounding whitespace trimmed on both sides.
 *
 * GSM8K lines as distributed, {"question": str, "answer": "...worked steps...\n#### 72"}: the
 * prompt is lm-evaluation-harness's "Question: <question>\nAnswer:", after the --fewshot
 * examples in the same layout; stops "Question:" and "\n\n", max_tokens --max-new; the item
 * counts when the generated answer's final number (after "####" if it writes one, else its
 * last number; commas and '$' dropped) is the reference's number after "####".
 *
 * Decoding: with a model that offers its key/value cache (lm->gen_start, model/generate.h),
 * one item at a time, the prompt once and then one position per token. Otherwise (the test
 * stubs) by repeating a full forward per new token, items batched, each row reading the logits
 * at its own last position: quadratic in the length, same results up to float rounding.
 *
 * Free Transformer: as in its generation (seed 000, Figure 2), the encoder reads [eot] prompt
 * (the prompt only) and Z of those positions is drawn from q; every generated position draws
 * Z from the uniform prior once, when its token is appended, and keeps it. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "evaluator/codeset.h"
#include "evaluator/latent.h"
#include "evaluator/task.h"
#include "evaluator/textdata.h"

#define EM_MAX_STOP 8

typedef struct {
    uint32_t *prompt;
    int np, max_tokens;
    char *answer;
    char *stop[EM_MAX_STOP];
    int nstop;
    int numeric;            /* GSM8K: judged by the final number */
} em_item_t;

typedef struct {
    eval_tok_t tok;
    em_item_t *items;
    int n, cap, batch;
    float temperature;
    uint64_t seed;
    int inner_steps;        /* LTM: --inner-steps (0: the checkpoint's), inferring z from the prompt */
    float fast_lr;
    int max_new;            /* GSM8K's max_tokens */
    char *fewshot;          /* GSM8K: the worked examples put before every question ("" none) */
    size_t fewshot_len;
} em_t;

static void em_close(void **self) {
    em_t *m = *self;
    if (!m) return;
    for (int i = 0; i < m->n; i++) {
        free(m->items[i].prompt);
        free(m->items[i].answer);
        for (int j = 0; j < m->items[i].nstop; j++) free(m->items[i].stop[j]);
    }
    free(m->items);
    free(m->fewshot);
    eval_tok_close(&m->tok);
    free(m);
    *self = NULL;
}

/* The number a GSM8K answer ends on: the first after "####" when the text has that mark (the
 * dataset's own, and what a model trained on it writes), else the last number of the text
 * (lm-evaluation-harness's "flexible extract"). Commas and '$' are dropped, a trailing '.'
 * too. 0 and the number's text in out, or -1 when there is none. */
static int final_number(const char *s, char *out, size_t cap) {
    const char *mark = NULL;
    for (const char *p = strstr(s, "####"); p; p = strstr(p + 1, "####")) mark = p;
    const char *p = mark ? mark + 4 : s;
    int found = -1;
    while (*p) {
        const int neg = *p == '-' && isdigit((unsigned char)p[1]);
        if (!neg && !isdigit((unsigned char)*p)) {
            p++;
            continue;
        }
        size_t n = 0;
        if (neg) out[n++] = *p++;
        while (*p && (isdigit((unsigned char)*p) || *p == ',' || *p == '.' || *p == '$')) {
            if (*p != ',' && *p != '$' && n + 1 < cap) out[n++] = *p;
            p++;
        }
        while (n && out[n - 1] == '.') n--;
        out[n] = 0;
        found = 0;
        if (mark) break; /* the first number after the mark */
    }
    return found;
}

/* 1 when the two numbers' texts are the same number ("10" and "10.00"). */
static int same_number(const char *a, const char *b) {
    char *ea, *eb;
    double x = strtod(a, &ea), y = strtod(b, &eb);
    if (ea == a || eb == b || *ea || *eb) return !strcmp(a, b);
    return x == y;
}

static int add_stop(em_item_t *it, const char *s) {
    if (it->nstop == EM_MAX_STOP) return 0;
    if (!(it->stop[it->nstop] = strdup(s))) return -1;
    it->nstop++;
    return 0;
}

static int em_line(json_t *o, int line, void *ctx, char *why, size_t whylen) {
    em_t *m = ctx;
    (void)line;
    json_t *q = json_object_get(o, "question");
    json_t *p = json_object_get(o, "prompt"), *a = json_object_get(o, "answer");
    json_t *st = json_object_get(o, "stop"), *mt = json_object_get(o, "max_tokens");
    const int gsm = json_is_string(q) && !p;
    if (gsm) {
        if (!json_is_string(a) || !strstr(json_string_value(a), "####"))
            return snprintf(why, whylen, "a GSM8K line's \"answer\" must be a string ending in \"#### <number>\""), -1;
    } else {
        if (!json_is_string(p)) return snprintf(why, whylen, "\"prompt\" (or GSM8K's \"question\") missing or not a string"), -1;
        if (!json_is_string(a)) return snprintf(why, whylen, "\"answer\" missing or not a string"), -1;
    }
    if (st && !json_is_string(st) && !json_is_array(st)) return snprintf(why, whylen, "\"stop\" is neither a string nor an array of strings"), -1;
    for (size_t i = 0; json_is_array(st) && i < json_array_size(st); i++)
        if (!json_is_string(json_array_get(st, i)) || !*json_string_value(json_array_get(st, i)) || i >= EM_MAX_STOP)
            return snprintf(why, whylen, "\"stop\" holds at most %d non-empty strings", EM_MAX_STOP), -1;
    if (mt && (!json_is_integer(mt) || json_integer_value(mt) < 1 || json_integer_value(mt) > 4096))
        return snprintf(why, whylen, "\"max_tokens\" must be an integer in 1..4096"), -1;
    if (eval_grow(&m->items, &m->cap, m->n, sizeof *m->items)) return snprintf(why, whylen, "out of memory"), EVAL_ENOMEM;
    em_item_t *it = &m->items[m->n];
    memset(it, 0, sizeof *it);
    m->n++;
    int oom = 0;
    if (gsm) {
        char num[128];
        if (final_number(json_string_value(a), num, sizeof num)) return snprintf(why, whylen, "no number after \"####\" in \"answer\""), -1;
        it->numeric = 1;
        it->answer = strdup(num);
        /* lm-evaluation-harness's gsm8k prompt, after the few-shot examples */
        const char *qs = json_string_value(q);
        char *text = malloc(m->fewshot_len + strlen(qs) + 32);
        if (text) {
            sprintf(text, "%sQuestion: %s\nAnswer:", m->fewshot ? m->fewshot : "", qs);
            oom |= eval_tok_encode(&m->tok, text, &it->prompt, &it->np) != 0;
            free(text);
        }
        oom |= !text;
        if (!st) oom |= add_stop(it, "Question:") || add_stop(it, "\n\n");
    } else {
        it->answer = strdup(json_string_value(a));
        oom |= eval_tok_encode(&m->tok, json_string_value(p), &it->prompt, &it->np) != 0;
        if (!st) oom |= add_stop(it, "\n");
    }
    if (json_is_string(st) && *json_string_value(st)) oom |= add_stop(it, json_string_value(st));
    for (size_t i = 0; json_is_array(st) && i < json_array_size(st); i++) oom |= add_stop(it, json_string_value(json_array_get(st, i)));
    if (oom || !it->answer) return snprintf(why, whylen, "out of memory"), EVAL_ENOMEM;
    if (mt) {
        it->max_tokens = (int)json_integer_value(mt);
    } else if (gsm) {
        it->max_tokens = m->max_new;
    } else {
        uint32_t *ids;
        int n;
        if (eval_tok_encode(&m->tok, it->answer, &ids, &n)) return snprintf(why, whylen, "out of memory"), EVAL_ENOMEM;
        free(ids);
        it->max_tokens = n > 0 ? n : 1;
    }
    return 0;
}

/* --fewshot: each GSM8K line becomes "Question: q\nAnswer: a\n\n" (lm-evaluation-harness's
 * layout, the answer with its worked steps and its "#### n"). */
static int fewshot_line(json_t *o, int line, void *ctx, char *why, size_t whylen) {
    em_t *m = ctx;
    (void)line;
    json_t *q = json_object_get(o, "question"), *a = json_object_get(o, "answer");
    if (!json_is_string(q) || !json_is_string(a)) return snprintf(why, whylen, "a few-shot line needs \"question\" and \"answer\" strings"), -1;
    size_t add = strlen(json_string_value(q)) + strlen(json_string_value(a)) + 32;
    char *f = realloc(m->fewshot, m->fewshot_len + add + 1);
    if (!f) return snprintf(why, whylen, "out of memory"), EVAL_ENOMEM;
    m->fewshot = f;
    m->fewshot_len += (size_t)sprintf(f + m->fewshot_len, "Question: %s\nAnswer: %s\n\n", json_string_value(q), json_string_value(a));
    return 0;
}

static int em_open(void **self, const eval_task_cfg_t *cfg, char *err, size_t errlen) {
    if (!cfg->file) return snprintf(err, errlen, "task em needs --file TASK.jsonl"), EVAL_EARG;
    if (!(cfg->temperature >= 0) || cfg->temperature > 100)
        return snprintf(err, errlen, "--temperature must be in [0, 100]"), EVAL_EARG;
    em_t *m = calloc(1, sizeof *m);
    if (!m) return snprintf(err, errlen, "out of memory"), EVAL_ENOMEM;
    m->batch = cfg->batch;
    m->temperature = cfg->temperature;
    m->seed = (uint64_t)cfg->seed;
    m->inner_steps = cfg->inner_steps;
    m->fast_lr = cfg->fast_lr;
    m->max_new = cfg->max_new > 0 ? cfg->max_new : 256;
    int rc = eval_tok_open(&m->tok, cfg->vocab, err, errlen);
    if (rc) {
        free(m);
        return rc;
    }
    if (cfg->fewshot) rc = eval_jsonl_read(cfg->fewshot, cfg->shots, fewshot_line, m, err, errlen);
    if (!rc) rc = eval_jsonl_read(cfg->file, cfg->limit, em_line, m, err, errlen);
    if (!rc && m->n == 0) rc = (snprintf(err, errlen, "%s: no items", cfg->file), EVAL_EFORMAT);
    if (rc) {
        em_close((void **)&m);
        return rc;
    }
    *self = m;
    return 0;
}

static void em_shape(const void *self, int *Bmax, int *Tmax) {
    const em_t *m = self;
    *Bmax = m->batch;
    *Tmax = 0;
}

/* Next token from one row of logits: argmax, or a draw from softmax(logits / temperature). */
static uint32_t em_pick(const float *row, int V, float temperature, rng_t *rng) {
    if (temperature <= 0) return eval_argmax(row, V);
    float mx = row[eval_argmax(row, V)];
    double s = 0;
    for (int i = 0; i < V; i++) s += exp((row[i] - mx) / temperature);
    double u = rng_f64(rng) * s, c = 0;
    for (int i = 0; i < V; i++) {
        c += exp((row[i] - mx) / temperature);
        if (u < c) return (uint32_t)i;
    }
    return (uint32_t)(V - 1);
}

static char *trim(char *s) {
    while (*s && isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) s[--n] = 0;
    return s;
}

/* Generated text of a row (ids after the prompt) cut at the first stop string; 1 when it
 * matches: the same text (whitespace trimmed), or for GSM8K the same final number. */
static int em_judge(em_t *m, const em_item_t *it, const uint32_t *gen, int n, int *stopped) {
    bpe_bytes_t b = {0};
    *stopped = 0;
    if (eval_tok_decode(&m->tok, gen, n, &b)) return 0;
    char *s = (char *)b.v;
    size_t cut = code_stop_cut(s, it->stop, it->nstop);
    if (s[cut]) {
        s[cut] = 0;
        *stopped = 1;
    }
    int ok = 0;
    if (it->numeric) {
        char num[128];
        ok = !final_number(s, num, sizeof num) && same_number(num, it->answer);
    } else {
        char *ans = strdup(it->answer);
        ok = ans && !strcmp(trim(s), trim(ans));
        free(ans);
    }
    bpe_bytes_free(&b);
    return ok;
}

/* One item at a time through the model's key/value cache (lm->gen_start / gen_next): the
 * prompt is run once, then one position per new token. Same rules as the batched path. */
static int em_run_cached(em_t *m, eval_lm_t *lm, eval_values_t *out, volatile int *stop, char *err,
                         size_t errlen) {
    const int V = lm->cfg.vocab_size, Tm = lm->Tmax, H = lm->latent_bits;
    const uint32_t eot = (uint32_t)lm->cfg.eot_id;
    uint32_t *row = malloc(sizeof(uint32_t) * (size_t)(Tm + 1));
    float *u = H ? malloc(sizeof(float) * (size_t)Tm * H) : NULL;
    int rc = 0, correct = 0;
    if (!row || (H && !u)) {
        rc = (snprintf(err, errlen, "out of memory"), EVAL_ENOMEM);
        goto out;
    }
    for (int i = 0; i < m->n; i++) {
        if (stop && *stop) {
            rc = (snprintf(err, errlen, "interrupted"), EVAL_EINTR);
            goto out;
        }
        const em_item_t *it = &m->items[i];
        if (it->max_tokens >= Tm) {
            rc = (snprintf(err, errlen, "item %d: max_tokens %d does not fit the model's %d positions", i + 1,
                           it->max_tokens, Tm), EVAL_EMISMATCH);
            goto out;
        }
        int keep = it->np < Tm - it->max_tokens ? it->np : Tm - it->max_tokens;
        row[0] = eot;
        memcpy(row + 1, it->prompt + it->np - keep, sizeof(uint32_t) * keep);
        const int P = 1 + keep;
        int len = P, stopped = 0;
        rng_t r;
        rng_seed2(&r, m->seed, (uint64_t)i);
        if (H)
            for (int j = 0; j < P * H; j++) u[j] = rng_f32(&r); /* the prompt's bits: u < sigmoid(l) */
        const float *lg = lm->gen_start(lm, row, 1, P, u, err, errlen);
        while (lg) {
            uint32_t y = em_pick(lg, V, m->temperature, &r);
            if (y == eot) break;
            row[len++] = y;
            em_judge(m, it, row + P, len - P, &stopped);
            if (stopped || len - P >= it->max_tokens) break;
            uint32_t z = 0;
            if (H) eval_z_prior(&r, &z, 1, H);
            lg = lm->gen_next(lm, &y, &z, 1, err, errlen);
        }
        if (!lg) {
            rc = EVAL_EMODEL;
            goto out;
        }
        correct += em_judge(m, it, row + P, len - P, &stopped);
    }
    eval_values_add(out, "em", (double)correct / m->n);
    eval_values_add(out, "n", m->n);
out:
    free(row);
    free(u);
    return rc;
}

static int em_run(void *self, eval_lm_t *lm, eval_values_t *out, volatile int *stop, char *err,
                  size_t errlen) {
    em_t *m = self;
    if (bpe_vocab_size(m->tok.vocab) > (uint32_t)lm->cfg.vocab_size)
        return snprintf(err, errlen, "the tokenizer's %u ids do not fit the model's vocabulary of %d",
                        bpe_vocab_size(m->tok.vocab), lm->cfg.vocab_size), EVAL_EMISMATCH;
    eval_ltm_settings(lm, m->inner_steps, m->fast_lr);   /* the LTM's gen_start infers z from the prompt */
    if (lm->gen_start && lm->gen_next) return em_run_cached(m, lm, out, stop, err, errlen);
    const int V = lm->cfg.vocab_size, Tm = lm->Tmax, Bm = lm->Bmax;
    const uint32_t eot = (uint32_t)lm->cfg.eot_id;
    /* per row: the token buffer (Tm+1), its length, where generation began, and whether done */
    uint32_t *rows = malloc(sizeof(uint32_t) * (size_t)Bm * (Tm + 1));
    uint32_t *in = malloc(sizeof(uint32_t) * (size_t)Bm * Tm);
    int *len = calloc(Bm, sizeof *len), *gen0 = calloc(Bm, sizeof *gen0), *done = calloc(Bm, sizeof *done);
    rng_t *rng = calloc(Bm, sizeof *rng);
    const int H = lm->latent_bits;
    /* latent models: Z of every row position, and the copy handed to the model */
    uint32_t *zrows = H ? malloc(sizeof(uint32_t) * (size_t)Bm * (Tm + 1)) : NULL;
    uint32_t *zin = H ? malloc(sizeof(uint32_t) * (size_t)Bm * Tm) : NULL;
    int rc = 0, correct = 0;
    if (!rows || !in || !len || !gen0 || !done || !rng || (H && (!zrows || !zin))) {
        rc = (snprintf(err, errlen, "out of memory"), EVAL_ENOMEM);
        goto out;
    }
    for (int i0 = 0; i0 < m->n && !rc; i0 += Bm) {
        int B = m->n - i0 < Bm ? m->n - i0 : Bm;
        for (int b = 0; b < B; b++) {
            const em_item_t *it = &m->items[i0 + b];
            if (it->max_tokens >= Tm) {
                rc = (snprintf(err, errlen, "item %d: max_tokens %d does not fit the model's %d positions",
                               i0 + b + 1, it->max_tokens, Tm), EVAL_EMISMATCH);
                goto out;
            }
            uint32_t *row = rows + (size_t)b * (Tm + 1);
            /* keep the end of the prompt so that prompt + answer fit in Tm positions */
            int keep = it->np < Tm - it->max_tokens ? it->np : Tm - it->max_tokens;
            row[0] = eot;
            memcpy(row + 1, it->prompt + it->np - keep, sizeof(uint32_t) * keep);
            len[b] = gen0[b] = 1 + keep;
            done[b] = 0;
            rng_seed2(&rng[b], m->seed, (uint64_t)(i0 + b));
            if (H) {
                /* the encoder reads the prompt row only */
                const float *e = lm->encode(lm, row, 1, len[b], err, errlen);
                if (!e) {
                    rc = EVAL_EMODEL;
                    goto out;
                }
                eval_z_posterior(&rng[b], e, zrows + (size_t)b * (Tm + 1), NULL, (size_t)len[b], H);
            }
        }
        for (;;) {
            int T = 0, active = 0;
            /* finished rows may be one token longer than the model takes; they are not read */
            for (int b = 0; b < B; b++) {
                if (!done[b] && len[b] > T) T = len[b];
                active += !done[b];
            }
            if (!active) break;
            if (stop && *stop) {
                rc = (snprintf(err, errlen, "interrupted"), EVAL_EINTR);
                goto out;
            }
            for (int b = 0; b < B; b++) {
                const uint32_t *row = rows + (size_t)b * (Tm + 1);
                for (int t = 0; t < T; t++) in[(size_t)b * T + t] = t < len[b] ? row[t] : eot;
                if (H)
                    for (int t = 0; t < T; t++) zin[(size_t)b * T + t] = t < len[b] ? zrows[(size_t)b * (Tm + 1) + t] : 0;
            }
            const float *lg = lm->logits(lm, in, zin, B, T, err, errlen);
            if (!lg) {
                rc = EVAL_EMODEL;
                goto out;
            }
            for (int b = 0; b < B; b++) {
                if (done[b]) continue;
                const em_item_t *it = &m->items[i0 + b];
                uint32_t *row = rows + (size_t)b * (Tm + 1);
                uint32_t y = em_pick(lg + ((size_t)b * T + len[b] - 1) * V, V, m->temperature, &rng[b]);
                if (y == eot) {
                    done[b] = 1;
                    continue;
                }
                if (H) eval_z_prior(&rng[b], zrows + (size_t)b * (Tm + 1) + len[b], 1, H);
                row[len[b]++] = y;
                int stopped;
                em_judge(m, it, row + gen0[b], len[b] - gen0[b], &stopped);
                if (stopped || len[b] - gen0[b] >= it->max_tokens) done[b] = 1;
            }
        }
        for (int b = 0; b < B; b++) {
            int stopped;
            const uint32_t *row = rows + (size_t)b * (Tm + 1);
            correct += em_judge(m, &m->items[i0 + b], row + gen0[b], len[b] - gen0[b], &stopped);
        }
    }
    if (!rc) {
        eval_values_add(out, "em", (double)correct / m->n);
        eval_values_add(out, "n", m->n);
    }
out:
    free(rows);
    free(in);
    free(len);
    free(gen0);
    free(done);
    free(rng);
    free(zrows);
    free(zin);
    return rc;
}

const eval_task_ops_t eval_task_em = {em_open, em_close, em_shape, em_run};
