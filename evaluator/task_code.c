/* evaluator/task_code.c: functional correctness of generated code, pass@k (seed 000's
 * "pass@1", Appendix B; the estimator of evaluator/passk.h).
 *
 * Problems come in HumanEval or MBPP format (evaluator/codeset.h). For each problem, n
 * completions: generated through the sampler's path (evaluator/lm_sampler.h: KV cache,
 * temperature / top-p; the Free Transformer draws its own latents for every sample, the
 * latent-thought LM infers its posterior from the prompt), each ended by the end-of-text
 * token, by the format's stop sequences (applied while generating, and the text cut before
 * the first one) or after max_new tokens; or given in a file; or the problems' canonical
 * solutions. Each completion's program (prompt + completion + tests) runs in the sandbox
 * (evaluator/sandbox.h); it passes when it exits 0. Per problem c of n pass, and
 * pass@k = mean over problems of 1 - C(n-c, k) / C(n, k) for every k <= n.
 *
 * The prompt the model continues is [eot] prompt, the end-of-text token standing where a
 * document starts in training (as in em). A prompt longer than the model's context minus the
 * tokens to generate loses tokens from its left; at most half the context is kept for the
 * completion. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/progress.h"
#include "evaluator/codeset.h"
#include "evaluator/lm_sampler.h"
#include "evaluator/passk.h"
#include "evaluator/task.h"
#include "evaluator/textdata.h"

/* pass@k values in the results: every k <= n up to this n; beyond it (the 64 values of an
 * eval event would not hold them), k = 1..10, 20, 50, 100, 200, 500, 1000 and n */
#define CODE_ALL_K_UP_TO 40

typedef struct {
    code_set_t set;
    code_given_t given;     /* --completions */
    int canonical;          /* --canonical */
    eval_tok_t tok;         /* generation only */
    int have_tok;
    int n;                  /* samples per problem */
    int max_new;
    sample_opts_t sample;
    uint64_t seed;
    int inner_steps;
    float fast_lr;
    sandbox_t *sb;
    const char *samples_out;
    bpe_bytes_t stop_buf;   /* the stop rule's decoded text */
} code_t;

static void code_close(void **self) {
    code_t *m = *self;
    if (!m) return;
    code_set_free(&m->set);
    code_given_free(&m->given);
    if (m->have_tok) eval_tok_close(&m->tok);
    sandbox_close(&m->sb);
    bpe_bytes_free(&m->stop_buf);
    free(m);
    *self = NULL;
}

static int code_open(void **self, const eval_task_cfg_t *cfg, char *err, size_t errlen) {
    if (!cfg->file) return snprintf(err, errlen, "task code needs --file PROBLEMS.jsonl (HumanEval or MBPP format)"), EVAL_EARG;
    if (cfg->completions && cfg->canonical)
        return snprintf(err, errlen, "--completions and --canonical both name the completions: give one"), EVAL_EARG;
    if (!(cfg->temperature >= 0) || !(cfg->top_p > 0 && cfg->top_p <= 1))
        return snprintf(err, errlen, "--temperature must be >= 0 and --top-p in (0, 1]"), EVAL_EARG;
    code_t *m = calloc(1, sizeof *m);
    if (!m) return snprintf(err, errlen, "out of memory"), EVAL_ENOMEM;
    *self = m;
    m->n = cfg->samples > 0 ? cfg->samples : 1;
    m->max_new = cfg->max_new > 0 ? cfg->max_new : 256;
    m->sample = (sample_opts_t){cfg->temperature, 0, cfg->top_p};
    m->seed = (uint64_t)cfg->seed;
    m->inner_steps = cfg->inner_steps;
    m->fast_lr = cfg->fast_lr;
    m->canonical = cfg->canonical;
    m->samples_out = cfg->samples_out;
    int rc = code_set_read(&m->set, cfg->file, cfg->limit, err, errlen);
    if (!rc && cfg->stop_words) rc = code_set_stops(&m->set, cfg->stop_words, err, errlen);
    if (!rc && cfg->completions) rc = code_given_read(&m->given, &m->set, cfg->completions, err, errlen);
    for (int i = 0; !rc && m->canonical && i < m->set.n; i++)
        if (!m->set.p[i].canonical)
            rc = (snprintf(err, errlen, "%s: problem %s has no canonical solution (--canonical)", cfg->file, m->set.p[i].task_id), EVAL_EFORMAT);
    if (!rc && !cfg->completions && !cfg->canonical) {
        rc = eval_tok_open(&m->tok, cfg->vocab, err, errlen);
        m->have_tok = rc == 0;
    }
    if (!rc) {
        sandbox_cfg_t sc = cfg->sandbox;
        if (!sc.jobs) {
            long cpus = sysconf(_SC_NPROCESSORS_ONLN);
            sc.jobs = cpus > 0 ? (cpus < 256 ? (int)cpus : 256) : 1;
        }
        char why[1024];
        int src = sandbox_open(&m->sb, &sc, why, sizeof why);
        if (src) rc = (snprintf(err, errlen, "sandbox: %s", why), src == SANDBOX_ENOMEM ? EVAL_ENOMEM : EVAL_EARG);
    }
    if (rc) code_close(self);
    return rc;
}

/* The evaluator's model is only the holder of the weights the sampler copies: smallest shape. */
static void code_shape(const void *self, int *Bmax, int *Tmax) {
    (void)self;
    *Bmax = 1;
    *Tmax = 1;
}

/* sampler stop rule: the completion so far holds one of the stop sequences */
static int code_stop_fn(void *ctx, int sample, const uint32_t *ids, int len) {
    code_t *m = ctx;
    (void)sample;
    m->stop_buf.n = 0;
    if (eval_tok_decode(&m->tok, ids, len, &m->stop_buf)) return 0;
    const char *t = (const char *)m->stop_buf.v;
    return code_stop_cut(t, m->set.stop, m->set.nstop) < strlen(t);
}

/* n completions of every problem into comp (problems * n, malloc'd strings). */
static int generate(code_t *m, eval_lm_t *lm, char **comp, volatile int *stop, double *gen_s, char *err, size_t errlen) {
    if (bpe_vocab_size(m->tok.vocab) > (uint32_t)lm->cfg.vocab_size)
        return snprintf(err, errlen, "the tokenizer's %u ids do not fit the model's vocabulary of %d",
                        bpe_vocab_size(m->tok.vocab), lm->cfg.vocab_size), EVAL_EMISMATCH;
    sampler_model_t *sm = NULL;
    int rc = eval_lm_sampler(lm, &sm, err, errlen);
    if (rc) return rc;
    const int Tm = lm->cfg.max_seq, reserve = m->max_new < Tm / 2 ? m->max_new : Tm / 2;
    uint32_t *row = malloc(sizeof(uint32_t) * (size_t)Tm);
    if (!row) rc = (snprintf(err, errlen, "out of memory"), EVAL_ENOMEM);
    progress_t pg;
    progress_init(&pg, "code: generating", "problem", (uint64_t)m->set.n);
    const double t0 = progress_now();
    for (int p = 0; p < m->set.n && !rc; p++) {
        if (stop && *stop) {
            rc = (snprintf(err, errlen, "interrupted"), EVAL_EINTR);
            break;
        }
        uint32_t *ids;
        int np;
        if (eval_tok_encode(&m->tok, m->set.p[p].prompt, &ids, &np)) {
            rc = (snprintf(err, errlen, "out of memory"), EVAL_ENOMEM);
            break;
        }
        const int keep = np < Tm - reserve - 1 ? np : Tm - reserve - 1;
        row[0] = (uint32_t)lm->cfg.eot_id;
        memcpy(row + 1, ids + np - keep, sizeof(uint32_t) * (size_t)keep);
        free(ids);
        const int P = 1 + keep, max_new = m->max_new < Tm - P ? m->max_new : Tm - P;
        sampler_opts_t o = {.n = m->n, .max_new = max_new, .sample = m->sample, .seed = m->seed,
                            .latent = SAMPLER_LATENT_INDEPENDENT, .group = 1, .stop_at_eot = 1,
                            .first = (uint32_t)((uint64_t)p * m->n), .inner_steps = m->inner_steps,
                            .fast_lr = m->fast_lr, .stop_fn = m->set.nstop ? code_stop_fn : NULL, .stop_ctx = m};
        sampler_result_t res;
        char why[1024];
        int src = sampler_generate(sm, row, P, &o, &res, why, sizeof why);
        if (src) {
            rc = (snprintf(err, errlen, "problem %s: %s", m->set.p[p].task_id, why), src == SAMPLER_ENOMEM ? EVAL_ENOMEM : EVAL_EMODEL);
            break;
        }
        for (int j = 0; j < m->n && !rc; j++) {
            bpe_bytes_t b = {0};
            if (eval_tok_decode(&m->tok, res.ids + (size_t)j * res.max_new, res.len[j], &b)) {
                rc = (snprintf(err, errlen, "out of memory"), EVAL_ENOMEM);
                break;
            }
            char *t = (char *)b.v;
            t[code_stop_cut(t, m->set.stop, m->set.nstop)] = 0;
            comp[(size_t)p * m->n + j] = t;
        }
        sampler_result_free(&res);
        progress_update(&pg, (uint64_t)p + 1);
    }
    progress_finish(&pg, (uint64_t)m->set.n);
    *gen_s = progress_now() - t0;
    free(row);
    sampler_model_free(&sm);
    return rc;
}

static void sandbox_progress(void *ctx, int done, int n) {
    (void)n;
    progress_update(ctx, (uint64_t)done);
}

/* One line per sample into samples_out (written whole to a temporary file, then renamed). */
static int write_samples(const code_t *m, int n, char *const *comp, const sandbox_result_t *res, char *err, size_t errlen) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", m->samples_out, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return snprintf(err, errlen, "%s: cannot write", tmp), EVAL_EIO;
    for (int p = 0; p < m->set.n; p++)
        for (int j = 0; j < n; j++) {
            const size_t i = (size_t)p * n + j;
            const sandbox_result_t *r = &res[i];
            const size_t tail = r->err_len > 2000 ? r->err_len - 2000 : 0;
            json_t *o = json_pack("{s:s, s:i, s:s, s:s, s:b, s:i, s:f, s:f, s:s}", "task_id", m->set.p[p].task_id,
                                  "sample", j, "completion", comp[i] ? comp[i] : "", "end", sandbox_end_name(r->end),
                                  "passed", r->end == SANDBOX_PASSED, "status", r->code, "wall_s", r->wall_s,
                                  "cpu_s", r->cpu_s, "stderr", r->err ? r->err + tail : "");
            char *line = o ? json_dumps(o, JSON_COMPACT) : NULL;
            if (!line) {
                /* text that is not UTF-8 (a byte-level model's output) has no JSON string */
                json_decref(o);
                o = json_pack("{s:s, s:i, s:s, s:b}", "task_id", m->set.p[p].task_id, "sample", j, "end",
                              sandbox_end_name(r->end), "passed", r->end == SANDBOX_PASSED);
                line = o ? json_dumps(o, JSON_COMPACT) : NULL;
            }
            if (line) fprintf(f, "%s\n", line);
            free(line);
            json_decref(o);
        }
    int bad = ferror(f);
    bad |= fflush(f) != 0 || fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, m->samples_out)) {
        unlink(tmp);
        return snprintf(err, errlen, "%s: write failed", m->samples_out), EVAL_EIO;
    }
    return 0;
}

static int code_run(void *self, eval_lm_t *lm, eval_values_t *out, volatile int *stop, char *err, size_t errlen) {
    code_t *m = self;
    const int given = m->given.per > 0, n = given ? m->given.per : m->canonical ? 1 : m->n, P = m->set.n;
    if (!given && !m->canonical && !lm)
        return snprintf(err, errlen, "task code generates from a checkpoint unless --completions or --canonical"), EVAL_EARG;
    const size_t N = (size_t)P * n;
    char **comp = calloc(N, sizeof *comp), **prog = calloc(N, sizeof *prog);
    sandbox_result_t *res = calloc(N, sizeof *res);
    int *pass = calloc((size_t)P, sizeof *pass);
    int rc = 0;
    double gen_s = 0;
    if (!comp || !prog || !res || !pass) rc = (snprintf(err, errlen, "out of memory"), EVAL_ENOMEM);
    if (!rc && !given && !m->canonical) {
        eval_ltm_settings(lm, m->inner_steps, m->fast_lr);
        rc = generate(m, lm, comp, stop, &gen_s, err, errlen);
    }
    for (size_t i = 0; i < N && !rc; i++) {
        const int p = (int)(i / n), j = (int)(i % n);
        const char *c = given ? m->given.text[i] : m->canonical ? m->set.p[p].canonical : comp[i];
        if (!comp[i] && !(comp[i] = strdup(c))) rc = (snprintf(err, errlen, "out of memory"), EVAL_ENOMEM);
        else if (!(prog[i] = code_program(&m->set.p[p], comp[i], given && m->given.is_solution[(size_t)p * n + j])))
            rc = (snprintf(err, errlen, "out of memory"), EVAL_ENOMEM);
    }
    double exec_s = 0;
    if (!rc) {
        progress_t pg;
        progress_init(&pg, "code: running", "program", N);
        const double t0 = progress_now();
        char why[1024];
        int src = sandbox_run(m->sb, (const char *const *)prog, (int)N, res, stop, sandbox_progress, &pg, why, sizeof why);
        progress_finish(&pg, N);
        exec_s = progress_now() - t0;
        if (src == SANDBOX_EINTR) rc = (snprintf(err, errlen, "interrupted"), EVAL_EINTR);
        else if (src) rc = (snprintf(err, errlen, "sandbox: %s", why), EVAL_EIO);
    }
    if (!rc) {
        int ends[SANDBOX_NEND] = {0};
        for (size_t i = 0; i < N; i++) {
            ends[res[i].end]++;
            pass[i / n] += res[i].end == SANDBOX_PASSED;
        }
        /* pass@1's standard error over problems (the benchmark as a sample of problems; it
         * also holds the sampling noise of each problem's estimate) */
        double s1 = 0, s2 = 0;
        for (int p = 0; p < P; p++) {
            double e = eval_pass_at_k(n, pass[p], 1);
            s1 += e;
            s2 += e * e;
        }
        const double mean1 = s1 / P, var1 = P > 1 ? (s2 - P * mean1 * mean1) / (P - 1) : 0;
        for (int k = 1; k <= n; k++) {
            if (n > CODE_ALL_K_UP_TO && k > 10 && k != n && k != 20 && k != 50 && k != 100 && k != 200 && k != 500 && k != 1000)
                continue;
            double s = 0;
            for (int p = 0; p < P; p++) s += eval_pass_at_k(n, pass[p], k);
            char name[32];
            snprintf(name, sizeof name, "pass@%d", k);
            eval_values_add(out, name, s / P);
        }
        eval_values_add(out, "pass@1_stderr", sqrt(var1 > 0 ? var1 : 0) / sqrt((double)P));
        eval_values_add(out, "problems", P);
        eval_values_add(out, "samples", n);
        for (int e = 0; e < SANDBOX_NEND; e++) {
            char name[32];
            snprintf(name, sizeof name, "end_%s", sandbox_end_name((sandbox_end)e));
            eval_values_add(out, name, ends[e]);
        }
        eval_values_add(out, "gen_s", gen_s);
        eval_values_add(out, "exec_s", exec_s);
        if (m->samples_out) rc = write_samples(m, n, comp, res, err, errlen);
    }
    for (size_t i = 0; comp && i < N; i++) free(comp[i]);
    for (size_t i = 0; prog && i < N; i++) free(prog[i]);
    for (size_t i = 0; res && i < N; i++) sandbox_result_free(&res[i]);
    free(comp);
    free(prog);
    free(res);
    free(pass);
    return rc;
}

const eval_task_ops_t eval_task_code = {code_open, code_close, code_shape, code_run};
