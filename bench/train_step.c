/* bench/train_step.c: times one training step (zero_grad, forward, backward, AdamW) of a
 * model family (model/family.h: the Llama decoder, or the Free Transformer on that decoder)
 * for the benchmark configs S and M, and prints tokens/s.
 *
 *   build/bench/train_step [--config S|M|G|both] [--model llama|free] [--latent-bits H]
 *                          [--steps N] [--batch B] [--seq T] [--device D] [--precision P]
 *                          [--json] [--profile] [--limit] [--digest] [--versus P] [--eval]
 *
 * S: d=256, 4 layers, 4/2 heads, ff 768, vocab 4096; M: d=512, 8 layers, 8/4 heads, ff 1536,
 * vocab 8192; both tied, B=8, T=256 unless overridden. G (the GPU bench's GPT-2-small size,
 * 124M parameters with its vocabulary): d=768, 12 layers, 12/12 heads, ff 2048 (SwiGLU: as
 * many MLP weights as GPT-2's 3072), vocab 50257, T=1024. One untimed warm-up step first;
 * on a device that is not the host, each phase ends with a synchronisation.
 * The PyTorch counterpart is bench/train_step_torch.py (same model, same step).
 *
 * "flops_per_token" is the rule, 6 x parameters + 12 x layers x d x T, for the
 * baseline; for the Free Transformer the encoder block counts as one more layer, its
 * parameters count except the post-sampler (a column gather, no product), and the Binary
 * Mapper's dense pass-through adds 2 x 2^H x d (dY = W_post^T dR).
 * --model ltm (the Latent-thought LM: --latent-vectors m, --inner-steps K, --window W) also
 * prints "tr_flops_per_token", seed 003 §2.4's count (3 (K + 1) forwards, model/ltm.h; for the
 * baseline 3 forwards of the same count) and "exec_flops_per_token", what the implementation
 * executes ((2 K + 3) forwards: an inner step's backward skips the weight gradients).
 * For the masked mixers (--model mixer, ...; seed 004; n_ctx = T) the mixing weights are not
 * applied per token like a Linear's but per embedding column: they are left out of the 6 x
 * parameters, and each layer's mixing adds the products as run, 6 x k x T x d per token
 * (forward 2 T d k, backward twice that; the masked half of each T x T product included, as
 * the gemm computes it). */
#include "model/adamw.h"
#include "model/family.h"
#include "model/llama.h"
#include "model/ltm.h"
#include "model/cpu_isa.h"
#include "model/gemm.h"
#include "model/mixer_config.h"
#include "model/ops_bf16.h"
#include "model/prof.h"
#include "common/rng.h"
#include "bench/stats.h"
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static model_config_t config_of(char name) {
    model_config_t c = {.kind = MODEL_LLAMA, .max_seq = 1024, .rope_theta = 10000.0f,
                        .norm_eps = 1e-5f, .tied = 1};
    if (name == 'S') { c.vocab_size = 4096; c.d_model = 256; c.n_layers = 4; c.n_heads = 4; c.n_kv_heads = 2; c.d_ff = 768; }
    else if (name == 'M') { c.vocab_size = 8192; c.d_model = 512; c.n_layers = 8; c.n_heads = 8; c.n_kv_heads = 4; c.d_ff = 1536; }
    else { c.vocab_size = 50257; c.d_model = 768; c.n_layers = 12; c.n_heads = 12; c.n_kv_heads = 12; c.d_ff = 2048; }
    return c;
}

/* not_per_token: parameters not applied once per token (the post-sampler's gather, the
 * mixers' mixing weights), left out of the 6 x parameters */
static double flops_per_token(const model_config_t *c, int64_t params, int64_t not_per_token, int T) {
    if (mixer_kind_is(c->kind)) {
        const double blocks = c->n_layers + (mixer_kind_has_encoder(c->kind) ? c->encoder_layers : 0);
        const double mix = mixer_kind_uses_mixer(c->kind) ? 6.0 * c->mixer_kernel * T * c->d_model
                                                          : 12.0 * c->d_model * T;
        return 6.0 * (double)(params - not_per_token) + blocks * mix;
    }
    double layers = c->n_layers + (c->kind == MODEL_FREE ? 1 : 0);
    double f = 6.0 * (double)(params - not_per_token) + 12.0 * layers * c->d_model * T;
    if (c->kind == MODEL_FREE) f += 2.0 * (double)(1 << c->latent_bits) * c->d_model;
    return f;
}

static device_t *dev;

/* The clock of the limit and of cpu_step_s: at one thread the thread's CPU clock (what other
 * processes take of the core does not count), else the wall clock. */
static double clock_now(void) {
    struct timespec ts;
    clock_gettime(omp_get_max_threads() == 1 ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- --limit: the machine's product limit at the step's own shapes ----------------------
 * The products a step of the Llama baseline needs, each at its own shape: for every Linear
 * (out, in) -- the fused q|k|v, o, gate, up, down of each layer and the tied head -- the
 * forward (out x N x in), the input gradient (in x N x out) and the weight gradient
 * (in x out x N), N = B*T; and per layer attention as six batched products over the B*H heads,
 * each T x T x hd with the full T x T (scores, P V; dP, dV, dK, dQ), which is the 12 x d x T
 * per token of the FLOP rule. They run through model/gemm.h at the step's precision on
 * operands of the right type (bf16: already rounded, as the step's shadows give them; bf16
 * emulated: fp32 products of rounded values, as the step runs them), with
 * the process's threads and the ISA level in force (the default: the best this CPU has). The
 * limit is the step's FLOPs (flops_per_token x B x T) over the time of one pass over the list:
 * a step that did nothing but its products at oneDNN's speed would run at it, so (a pass's
 * time) / (a step's time) is the share of the step's time that is products.
 *
 * How the two are timed (issue 26, 2026-11-27): the passes are interleaved with the steps in
 * this process -- after every timed step, --limit-reps passes (default 1), by the same clock
 * (at one thread the thread's CPU clock, else the wall clock) -- so a slow moment of a shared
 * machine falls on steps and passes alike, and the same statistic is taken of both: the best
 * (shortest) step against the best pass, "fraction" = best pass / best step. Load only ever
 * adds time to either, so the best of each is the nearest to what the machine does unhindered;
 * taken of equally many samples of similar length, neither side is favoured (a pass is a bit
 * shorter than a step, so a little likelier to miss a burst of load: if anything the limit is
 * flattered, not the step). The medians of both are printed too ("fraction_median"). Until
 * then the limit was the median of 5 passes run after all the steps, against the steps' mean:
 * two moments, two statistics; under load its per-process figure moved from 0.47 to 1.64
 * between two runs a minute apart. */
typedef struct {
    gemm_op ta, tb;
    int m, n, k, batch;
    float alpha, beta;
} prod_t;

static int linear_products(prod_t *p, int out, int in, int N) {
    p[0] = (prod_t){GEMM_T, GEMM_N, out, N, in, 1, 1.0f, 0.0f};   /* y = x W^T */
    p[1] = (prod_t){GEMM_N, GEMM_N, in, N, out, 1, 1.0f, 0.0f};   /* dx = dy W */
    p[2] = (prod_t){GEMM_N, GEMM_T, in, out, N, 1, 1.0f, 1.0f};   /* dW += dy^T x */
    return 3;
}

static int step_products(const model_config_t *c, int B, int T, prod_t *p) {
    /* (21 per layer and 3 for the head: the caller sizes p) */
    const int N = B * T, D = c->d_model, F = c->d_ff, hd = D / c->n_heads;
    const int Dq = hd * c->n_heads, Dkv = hd * c->n_kv_heads, BH = B * c->n_heads;
    const float sc = 1.0f / sqrtf((float)hd);
    int n = 0;
    for (int l = 0; l < c->n_layers; l++) {
        n += linear_products(p + n, Dq + 2 * Dkv, D, N);
        n += linear_products(p + n, D, Dq, N);
        n += linear_products(p + n, F, D, N);
        n += linear_products(p + n, F, D, N);
        n += linear_products(p + n, D, F, N);
        p[n++] = (prod_t){GEMM_T, GEMM_N, T, T, hd, BH, sc, 0.0f};   /* S = Q K^T */
        p[n++] = (prod_t){GEMM_N, GEMM_N, hd, T, T, BH, 1.0f, 0.0f}; /* O = P V */
        p[n++] = (prod_t){GEMM_T, GEMM_N, T, T, hd, BH, 1.0f, 0.0f}; /* dP = dO V^T */
        p[n++] = (prod_t){GEMM_N, GEMM_T, hd, T, T, BH, 1.0f, 0.0f}; /* dV = P^T dO */
        p[n++] = (prod_t){GEMM_N, GEMM_T, hd, T, T, BH, 1.0f, 0.0f}; /* dK = dS^T Q */
        p[n++] = (prod_t){GEMM_N, GEMM_N, hd, T, T, BH, 1.0f, 0.0f}; /* dQ = dS K */
    }
    n += linear_products(p + n, c->vocab_size, D, N);
    return n;
}

/* The operands of the list's largest products (compact, random in [-0.5, 0.5), bf16 copies
 * for a native bf16 step), set up once; limit_pass times one pass over the list. */
typedef struct {
    const prod_t *p;
    int np, native16;
    precision_t prec;
    float *A, *B, *C;
    uint16_t *A16, *B16;
} limit_ctx_t;

static void limit_free(limit_ctx_t *L) {
    free(L->A); free(L->B); free(L->C); free(L->A16); free(L->B16);
    memset(L, 0, sizeof *L);
}

static int limit_init(limit_ctx_t *L, const prod_t *p, int np, precision_t prec) {
    size_t na = 0, nb = 0, nc = 0;
    for (int i = 0; i < np; i++) {
        const size_t b = (size_t)p[i].batch;
        na = (size_t)p[i].m * p[i].k * b > na ? (size_t)p[i].m * p[i].k * b : na;
        nb = (size_t)p[i].k * p[i].n * b > nb ? (size_t)p[i].k * p[i].n * b : nb;
        nc = (size_t)p[i].m * p[i].n * b > nc ? (size_t)p[i].m * p[i].n * b : nc;
    }
    /* bf16 emulated (no native bf16 products): the step's products are fp32 products of
     * operands rounded once by their producers (model/ops_linear.c), so its limit is those fp32
     * products; through model_gemm_prec at bf16 each pass would also round both operands of
     * every product, work the step no longer does (a "limit" slower than the step: 1.06 of it
     * at S on a Zen 3, 2026-11-27) */
    const int native16 = prec == PRECISION_BF16 && model_gemm_bf16_native();
    *L = (limit_ctx_t){.p = p, .np = np, .prec = prec == PRECISION_BF16 && !native16 ? PRECISION_FP32 : prec,
                       .native16 = native16};
    L->A = malloc(sizeof(float) * na), L->B = malloc(sizeof(float) * nb), L->C = calloc(nc, sizeof(float));
    L->A16 = malloc(sizeof(uint16_t) * na), L->B16 = malloc(sizeof(uint16_t) * nb);
    if (!L->A || !L->B || !L->C || !L->A16 || !L->B16) return limit_free(L), -1;
    rng_t g;
    rng_seed(&g, 7);
    for (size_t i = 0; i < na; i++) L->A[i] = (float)(rng_f32(&g) - 0.5);
    for (size_t i = 0; i < nb; i++) L->B[i] = (float)(rng_f32(&g) - 0.5);
    ops_bf16_pack(L->A16, L->A, na);
    ops_bf16_pack(L->B16, L->B, nb);
    if (prec == PRECISION_BF16 && !native16) {   /* the emulated operands' values: rounded */
        ops_bf16_round_row(L->A, na);
        ops_bf16_round_row(L->B, nb);
    }
    return 0;
}

/* One pass over the list, in seconds of clock_now (the first call also creates oneDNN's
 * primitives: run it untimed). */
static double limit_pass(const limit_ctx_t *L) {
    const double t0 = clock_now();
    for (int i = 0; i < L->np; i++) {
        const prod_t *q = &L->p[i];
        /* compact operands: op(A) is m x k, stored (ta ? k x m : m x k) */
        const int lda = q->ta == GEMM_N ? q->m : q->k, ldb = q->tb == GEMM_N ? q->k : q->n;
        const long long sa = (long long)q->m * q->k, sb = (long long)q->k * q->n, sc = (long long)q->m * q->n;
        if (L->native16)
            model_gemm_bf16_batched(q->ta, q->tb, q->m, q->n, q->k, q->alpha, L->A16, lda, sa, L->B16, ldb,
                                    sb, q->beta, L->C, q->m, sc, q->batch);
        else
            model_gemm_batched_prec(L->prec, q->ta, q->tb, q->m, q->n, q->k, q->alpha, L->A, lda, sa, L->B,
                                    ldb, sb, q->beta, L->C, q->m, sc, q->batch);
    }
    return clock_now() - t0;
}

static void sync_dev(void) {
    char e[256];
    if (!device_is_host(dev) && DEV(dev, sync, e, sizeof e)) fprintf(stderr, "train_step: %s\n", e);
}

static const char *versus = NULL, *device_spec = "cpu";   /* --versus P: the pair mode (run_pair) */
static int ltm_m = 8, ltm_K = 4, ltm_W = 0, profile = 0, limit = 0, digest = 0, limit_reps = 1, layers = 0, vocab = 0;
/* --eval: a "step" is the forward the evaluator runs to score held-out text (evaluator/lm.c:
 * tokens in, the logits out to the host, no targets, no gradient, no update), llama only; the
 * weights never change, so at bf16 their rounded copies are made once, as in the evaluator */
static int eval_only = 0;

/* --eval's step: the evaluator's scoring forward (llama_lm_logits), the logits brought to the host */
static int eval_step(const model_family_t *fam, void *m, const uint32_t *in, char *err, size_t errlen) {
    float unused;
    if (fam->forward(m, in, NULL, NULL, &unused, err, errlen)) return 1;
    if (!llama_logits(m)) return snprintf(err, errlen, "out of memory for the host logits"), 1;
    return 0;
}

/* --eval: a hash of the last forward's logits (their bits): what the loss is to a training run's output */
static uint64_t logits_digest(void *m, const model_config_t *c, int B, int T) {
    const float *z = llama_logits(m);
    return z ? (uint64_t)XXH64(z, sizeof(float) * (size_t)B * T * c->vocab_size, 0) : 0;
}

/* The execution-model emulator's performance counters (tests/emu/emu_perf.cc, linked only into
 * build/emu/bench/train_step for bench/gpu_model.sh): they count the first timed step alone. */
extern void emu_perf_step(int begin) __attribute__((weak));

/* --profile: each op's time per step (model/prof.h), the median over the timed steps, as a
 * table on stderr, largest first (at one thread by the thread's CPU clock, which other
 * processes on the core do not inflate; else by the wall clock); the product's lines (inside the Linear and attention ops)
 * are shown apart. per[s][i] is line i's seconds in step s, step[s] the step's wall time. */
#define PROF_MAX_STEPS 64
#define PROF_MAX_PAIRS 512   /* --versus: steps at most */
static prof_line_t prof_names[PROF_LINES];
static double prof_per[PROF_MAX_STEPS][PROF_LINES], prof_calls[PROF_LINES];
static void profile_report(int nsteps, int nlines, const double *step_s) {
    double v[PROF_MAX_STEPS], med[PROF_LINES], step_med, ops = 0;
    int order[PROF_LINES];
    for (int s = 0; s < nsteps; s++) v[s] = step_s[s];
    step_med = bench_median(v, nsteps);
    for (int i = 0; i < nlines; i++) {
        for (int s = 0; s < nsteps; s++) v[s] = prof_per[s][i];
        med[i] = bench_median(v, nsteps);
        order[i] = i;
        if (strncmp(prof_names[i].name, "gemm.", 5)) ops += med[i];
    }
    for (int i = 1; i < nlines; i++)   /* largest first */
        for (int j = i; j > 0 && med[order[j]] > med[order[j - 1]]; j--) {
            int t = order[j]; order[j] = order[j - 1]; order[j - 1] = t;
        }
    fprintf(stderr, "profile (%s clock): median of %d steps, step %.2f ms (ops %.2f ms, outside ops %.2f ms)\n",
            omp_get_max_threads() == 1 ? "thread CPU" : "wall", nsteps, step_med * 1e3, ops * 1e3, (step_med - ops) * 1e3);
    fprintf(stderr, "  %-50s %9s %7s %9s\n", "op", "ms/step", "share", "calls");
    for (int k = 0; k < nlines; k++) {
        const int i = order[k];
        char nm[96];
        snprintf(nm, sizeof nm, "%s%s%s", prof_names[i].name, prof_names[i].in ? " in " : "",
                 prof_names[i].in ? prof_names[i].in : "");
        fprintf(stderr, "  %-50s %9.3f %6.1f%% %9.0f\n", nm, med[i] * 1e3,
                100.0 * med[i] / step_med, prof_calls[i] / nsteps);
    }
}

/* --digest: one hash of every parameter's bits after the steps, so that two builds can be shown
 * to train to the same bits (an op change that must not move one), without a checkpoint. */
static int print_digest(const tensor_view_t *pv, int np, float loss) {
    XXH64_state_t *st = XXH64_createState();
    int rc = !st || XXH64_reset(st, 0) == XXH_ERROR;
    for (int i = 0; i < np && !rc; i++) {
        const size_t bytes = sizeof(float) * (size_t)tensor_numel(&pv[i]);
        float *h = device_is_host(pv[i].dev) ? NULL : malloc(bytes ? bytes : 1);
        if (!device_is_host(pv[i].dev) && !h) rc = 1;
        else if (h) tensor_view_download(&pv[i], h);
        if (!rc) rc = XXH64_update(st, h ? h : pv[i].data, bytes) == XXH_ERROR;
        free(h);
    }
    if (!rc) printf("   digest of the parameters after the steps: %016llx (loss %.9g)\n",
                    (unsigned long long)XXH64_digest(st), loss);
    else fprintf(stderr, "train_step: --digest: out of memory\n");
    XXH64_freeState(st);
    return rc;
}

/* ---- --versus P: two precisions, one process, steps interleaved ----------------------------
 * On a shared VM the speed of the same binary drifts by 15% over minutes (bench/NOTES.md,
 * 2026-11-27), as much as the difference between fp32 and bf16 a CPU without native bf16 is
 * asked to keep under 5% (issue 26): alternating whole runs leaves each pair tens of seconds
 * apart. Here a second model of the same config and tokens trains at precision P on a second
 * device in the same process, and the two take turns step by step (ABBA: A then B on even
 * steps, B then A on odd ones, so neither always runs on the other's caches); each pair is the
 * two steps of one index, under a second apart. Reported: each side's median step, the median
 * of the paired ratios B/A, and a 90% bootstrap interval of that median (2000 resamples of the
 * pairs, a fixed seed: the same timings give the same interval). Both models start from the
 * same weights (the family's seeded init) and see the same batch every step. */
typedef struct {
    device_t *dev;
    void *m;
    adamw_t *opt;
    tensor_view_t gv[256];
    int np;
} trainee_t;

static int trainee_step(const model_family_t *fam, trainee_t *t, int s, const uint32_t *in,
                        const uint32_t *tg, float *loss, char *err, size_t errlen) {
    char e[256];
    double norm;
    if (eval_only) return eval_step(fam, t->m, in, err, errlen);
    if (fam->set_step) fam->set_step(t->m, (uint64_t)(s + 1));
    fam->zero_grad(t->m);
    int rc = fam->forward(t->m, in, tg, NULL, loss, err, errlen);
    rc = rc ? rc : fam->backward(t->m, err, errlen);
    rc = rc ? rc : adamw_step(t->opt, t->gv, t->np, 1e-3f, 1.0f, 1.0f, &norm, err, errlen);
    if (!rc && !device_is_host(t->dev) && DEV(t->dev, sync, e, sizeof e))
        rc = 1, snprintf(err, errlen, "%s", e);
    return rc;
}

/* b's steps over a's, each pair one step index: fills ratio[] and returns its median */
static double pair_ratios(const double *a, const double *b, int n, double *ratio) {
    double v[PROF_MAX_PAIRS];
    for (int i = 0; i < n; i++) ratio[i] = v[i] = b[i] / a[i];
    return bench_median(v, n);
}

/* A is the model run() made (dev, its precision); B the same config at --versus's precision */
static int run_pair(const model_family_t *fam, const model_config_t *c, char name, trainee_t *A,
                    const uint32_t *in, const uint32_t *tg, int B, int T, int steps, int json) {
    char err[256];
    precision_t pb;
    trainee_t Bm = {0};
    double ta[PROF_MAX_PAIRS], tb[PROF_MAX_PAIRS], ratio[PROF_MAX_PAIRS], lo = 0, hi = 0;
    float la = 0, lb = 0;
    int rc = precision_parse(versus, &pb, err, sizeof err) ||
             device_open(&Bm.dev, device_spec, pb, err, sizeof err);
    if (!rc && fam->create(&Bm.m, Bm.dev, c, B, T, 1, err, sizeof err)) rc = 1, Bm.m = NULL;
    if (!rc) {
        tensor_view_t pv[256];
        adamw_config_t oc = adamw_config_default();
        const int np = fam->params(Bm.m, pv, 256);
        Bm.np = fam->grads(Bm.m, Bm.gv, 256);
        if (Bm.np != np) rc = 1, snprintf(err, sizeof err, "%d parameters but %d gradients", np, Bm.np);
        else rc = adamw_create(&Bm.opt, pv, np, &oc, err, sizeof err);
    }
    for (int s = -1; s < steps && !rc; s++) {   /* s = -1: one warm-up step each, not timed */
        const int b_first = s >= 0 && s % 2 == 1;   /* ABBA (the warm-up: A first) */
        trainee_t *first = b_first ? &Bm : A, *second = b_first ? A : &Bm;
        const double t0 = now();
        rc = trainee_step(fam, first, s, in, tg, first == A ? &la : &lb, err, sizeof err);
        const double t1 = now();
        rc = rc ? rc : trainee_step(fam, second, s, in, tg, second == A ? &la : &lb, err, sizeof err);
        const double t2 = now();
        if (s >= 0) {
            ta[s] = first == A ? t1 - t0 : t2 - t1;
            tb[s] = first == A ? t2 - t1 : t1 - t0;
        }
    }
    if (!rc) {
        const double med = pair_ratios(ta, tb, steps, ratio);
        bench_median_interval(ratio, steps, &lo, &hi);
        double sa[PROF_MAX_PAIRS], sb[PROF_MAX_PAIRS];
        memcpy(sa, ta, sizeof(double) * steps), memcpy(sb, tb, sizeof(double) * steps);
        const double ma = bench_median(sa, steps), mb = bench_median(sb, steps);
        /* what each side computed: --eval, its logits (no targets, no loss); else its loss */
        char outcome[128];
        if (eval_only) {
            const unsigned long long da = logits_digest(A->m, c, B, T), db = logits_digest(Bm.m, c, B, T);
            snprintf(outcome, sizeof outcome, json ? "\"mode\":\"eval\",\"a_logits_digest\":\"%016llx\","
                                                     "\"b_logits_digest\":\"%016llx\"" : "logits %016llx / %016llx", da, db);
        } else
            snprintf(outcome, sizeof outcome, json ? "\"a_loss\":%.9g,\"b_loss\":%.9g" : "loss %.3f / %.3f", la, lb);
        if (json)
            printf("{\"impl\":\"c\",\"config\":\"%c\",\"model\":\"%s\",\"B\":%d,\"T\":%d,\"steps\":%d,\"threads\":%d,"
                   "\"isa\":\"%s\",\"a\":\"%s\",\"b\":\"%s\",\"a_step_median_s\":%.5f,\"b_step_median_s\":%.5f,"
                   "\"b_over_a_median\":%.5f,\"b_over_a_lo90\":%.5f,\"b_over_a_hi90\":%.5f,%s}\n",
                   name, fam->name, B, T, steps, omp_get_max_threads(), cpu_isa_name(cpu_isa()),
                   precision_name(dev->precision), precision_name(pb), ma, mb, med, lo, hi, outcome);
        else
            printf("C  config %c (%s)%s, B=%d T=%d, %d threads, %s, %d steps each, interleaved: %s %.1f ms, %s %.1f ms "
                   "(medians); %s/%s paired: median %+.2f%%, 90%% interval %+.2f%% .. %+.2f%% (%s)\n",
                   name, fam->name, eval_only ? " eval forward" : "", B, T, omp_get_max_threads(),
                   cpu_isa_name(cpu_isa()), steps, precision_name(dev->precision), ma * 1e3, precision_name(pb),
                   mb * 1e3, precision_name(pb), precision_name(dev->precision), 100 * (med - 1), 100 * (lo - 1),
                   100 * (hi - 1), outcome);
    }
    if (rc) fprintf(stderr, "train_step: --versus %s: %s\n", versus, err);
    adamw_destroy(&Bm.opt);
    if (Bm.m) fam->destroy(&Bm.m);
    device_close(&Bm.dev);
    return rc;
}

static int run(char name, const char *model, int H, int mh, int mk, int B, int T, int steps, int json) {
    model_config_t c = config_of(name);
    if (layers > 0) c.n_layers = layers;
    if (vocab > 0) c.vocab_size = vocab;
    const model_family_t *fam = family_find(model);
    if (!fam) {
        fprintf(stderr, "train_step: unknown --model %s (%s)\n", model, family_names());
        return 2;
    }
    c.kind = fam->kind;
    if (limit && c.kind != MODEL_LLAMA) {
        fprintf(stderr, "train_step: --limit knows the products of --model llama only\n");
        return 2;
    }
    if (c.kind == MODEL_FREE) c.latent_bits = H, c.kappa_nats = 0.5f * 0.6931472f;
    if (c.kind == MODEL_LTM)
        c.latent_vectors = ltm_m, c.inner_steps = ltm_K, c.sliding_window = ltm_W, c.fast_lr = 0.3f,
        c.fast_lr_end = 0.34f, c.fast_lr_steps = 1000;
    if (mixer_kind_is(c.kind)) {   /* the mixing weights are n_ctx x n_ctx: n_ctx = T */
        c.max_seq = T, c.mixer_heads = mh, c.mixer_kernel = mk;
        c.encoder_layers = c.n_layers, c.embed_dim = c.d_model;
    }
    char err[256];
    void *m = NULL;
    adamw_t *opt = NULL;
    if (fam->create(&m, dev, &c, B, T, 1, err, sizeof(err))) {
        fprintf(stderr, "train_step: config %c: %s\n", name, err);
        return 1;
    }
    tensor_view_t pv[256], gv[256];
    int np = fam->params(m, pv, 256);
    fam->grads(m, gv, 256);
    int64_t nparams = 0, not_per_token = 0;
    for (int i = 0; i < np; i++) {
        const char *nm = pv[i].name;
        const size_t n = strlen(nm);
        nparams += tensor_numel(&pv[i]);
        if (!strcmp(nm, "free.post_sampler.weight") || (n >= 12 && !strcmp(nm + n - 12, "mixer.weight")) ||
            (n >= 10 && !strcmp(nm + n - 10, "mixer.bias")))
            not_per_token += tensor_numel(&pv[i]);
    }
    adamw_config_t oc = adamw_config_default();
    if (adamw_create(&opt, pv, np, &oc, err, sizeof(err))) {
        fprintf(stderr, "train_step: %s\n", err);
        fam->destroy(&m);
        return 1;
    }
    uint32_t *tok = malloc(sizeof(uint32_t) * B * (T + 1));
    rng_t r;
    rng_seed(&r, 42);
    for (int i = 0; i < B * (T + 1); i++) tok[i] = (uint32_t)rng_below(&r, c.vocab_size);
    uint32_t *in = malloc(sizeof(uint32_t) * B * T), *tg = malloc(sizeof(uint32_t) * B * T);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) { in[b * T + t] = tok[b * (T + 1) + t]; tg[b * T + t] = tok[b * (T + 1) + t + 1]; }
    if (versus) {
        trainee_t A = {.dev = dev, .m = m, .opt = opt, .np = np};
        memcpy(A.gv, gv, sizeof(tensor_view_t) * np);
        int prc = run_pair(fam, &c, name, &A, in, tg, B, T, steps, json);
        free(tok); free(in); free(tg);
        adamw_destroy(&opt);
        fam->destroy(&m);
        return prc;
    }
    double t_fwd = 0, t_bwd = 0, t_opt = 0, step_s[PROF_MAX_STEPS], wall_sum = 0, clock_sum = 0;
    prof_line_t prev[PROF_LINES];
    int nprof = 0, nprev = 0;
    float loss = 0;
    int rc = 0;
    /* --limit: the product list and its operands, set up before the steps: its passes run
     * between them (the comment above limit_ctx_t) */
    double fpt = flops_per_token(&c, nparams, not_per_token, T);
    prod_t *pl = NULL;
    limit_ctx_t lc = {0};
    double *clk_step = NULL, *clk_pass = NULL;
    int npass = 0;
    if (limit && (!(pl = malloc(sizeof(prod_t) * (21 * c.n_layers + 3))) ||
                  limit_init(&lc, pl, step_products(&c, B, T, pl), dev->precision) ||
                  !(clk_step = malloc(sizeof(double) * steps)) ||
                  !(clk_pass = malloc(sizeof(double) * (size_t)steps * limit_reps))))
        rc = 1, snprintf(err, sizeof err, "--limit: out of memory");
    for (int s = -1; s < steps && !rc; s++) {   /* s = -1: warm-up, not timed */
        if (s == 0 && profile) prof_start(omp_get_max_threads() == 1);
        double a = now();
        const double clock_a = clock_now();
        if (s == 0 && emu_perf_step) emu_perf_step(1);
        const double a_prof = prof_now();
        if (eval_only) rc |= eval_step(fam, m, in, err, sizeof err);
        else {
            if (fam->set_step) fam->set_step(m, (uint64_t)(s + 1));
            fam->zero_grad(m);
            rc |= fam->forward(m, in, tg, NULL, &loss, err, sizeof(err));
        }
        sync_dev();
        double b = now();
        if (!eval_only) rc |= fam->backward(m, err, sizeof(err));
        sync_dev();
        double c2 = now();
        double norm;
        if (!eval_only) rc |= adamw_step(opt, gv, np, 1e-3f, 1.0f, 1.0f, &norm, err, sizeof(err));
        sync_dev();
        double d = now();
        const double clock_d = clock_now();
        if (s == 0 && emu_perf_step) emu_perf_step(0);
        if (s >= 0) {
            t_fwd += b - a; t_bwd += c2 - b; t_opt += d - c2;
            wall_sum += d - a, clock_sum += clock_d - clock_a;
            if (limit) clk_step[s] = clock_d - clock_a;
        }
        if (profile && s >= 0 && s < PROF_MAX_STEPS) {   /* this step's share of every line */
            prof_line_t now_l[PROF_LINES];
            nprof = prof_snapshot(now_l, PROF_LINES);
            for (int i = 0; i < nprof; i++) {
                const int had = i < nprev;
                prof_names[i] = now_l[i];
                prof_per[s][i] = now_l[i].seconds - (had ? prev[i].seconds : 0.0);
                prof_calls[i] += now_l[i].calls - (had ? prev[i].calls : 0);
            }
            memcpy(prev, now_l, sizeof(prof_line_t) * nprof);
            nprev = nprof;
            step_s[s] = prof_now() - a_prof;
        }
        if (limit && !rc) {   /* the product passes after this step (after the warm-up: one, untimed) */
            const int on = prof_on_;
            prof_stop();   /* the passes' products are no op's */
            for (int k = 0; k < (s < 0 ? 1 : limit_reps); k++) {
                const double t = limit_pass(&lc);
                if (s >= 0) clk_pass[npass++] = t;
            }
            if (on) prof_resume();
        }
    }
    if (profile) {
        prof_stop();
        if (!rc && steps > 0) profile_report(steps < PROF_MAX_STEPS ? steps : PROF_MAX_STEPS, nprof, step_s);
    }
    if (rc) fprintf(stderr, "train_step: %s\n", err);
    if (digest && !rc) rc = print_digest(pv, np, loss);
    /* the timed steps' own time (the limit's passes between them not counted; the cuBLAS pass
     * below is not part of the throughput either: until 2026-11-26 it was, which halved every GPU
     * tokens/s; found on the first H200 run) */
    double total = wall_sum, tps = (double)B * T * steps / total;
    const double clock_step = clock_sum / steps;
    /* cuBLAS' share, from a second pass with every product timed (it waits for each product,
     * so it is not part of the throughput above) */
    double gemm_share = -1;
    if (!device_is_host(dev) && !rc) {
        dev->profile_gemm = 1;
        dev->gemm_seconds = 0;
        double a = now();
        for (int s = 0; s < steps && !rc; s++) {
            if (eval_only) rc |= eval_step(fam, m, in, err, sizeof err);
            else {
                fam->zero_grad(m);
                rc |= fam->forward(m, in, tg, NULL, &loss, err, sizeof(err));
                rc |= fam->backward(m, err, sizeof(err));
            }
            sync_dev();
        }
        gemm_share = dev->gemm_seconds / (now() - a);
        dev->profile_gemm = 0;
    }
    /* --limit: the best (and the median) pass against the best (and the median) step */
    double limit_s = -1.0, limit_gflops = -1.0, limit_med = -1.0, step_best = -1.0, step_med = -1.0;
    if (limit && !rc && npass > 0) {
        limit_med = bench_median(clk_pass, npass), limit_s = clk_pass[0];   /* sorted by bench_median */
        step_med = bench_median(clk_step, steps), step_best = clk_step[0];
        limit_gflops = fpt * B * T / limit_s / 1e9;
    }
    free(pl), free(clk_step), free(clk_pass);
    const int lc_emulated = limit && lc.p && lc.prec != dev->precision;   /* (before limit_free clears it) */
    limit_free(&lc);
    const unsigned long long ldig = eval_only && !rc ? logits_digest(m, &c, B, T) : 0;
    if (json && eval_only)   /* the evaluator's forward: no loss, no FLOP rule of a step */
        printf("{\"impl\":\"c\",\"mode\":\"eval\",\"config\":\"%c\",\"model\":\"%s\",\"params\":%lld,"
               "\"B\":%d,\"T\":%d,\"steps\":%d,\"threads\":%d,\"step_s\":%.5f,\"tokens_per_s\":%.1f,"
               "\"device\":\"%s\",\"precision\":\"%s\",\"gemm_share\":%.4f,\"isa\":\"%s\",\"gemm_engine\":\"%s\","
               "\"logits_digest\":\"%016llx\"}\n",
               name, fam->name, (long long)nparams, B, T, steps, omp_get_max_threads(), total / steps, tps,
               dev->name, precision_name(dev->precision), gemm_share, cpu_isa_name(cpu_isa()),
               model_gemm_describe(), ldig);
    else if (eval_only)
        printf("C  config %c (%s) eval forward: %lld params, B=%d T=%d, %d threads: %.4f s/forward -> %.0f tokens/s "
               "(logits %016llx)\n", name, fam->name, (long long)nparams, B, T, omp_get_max_threads(), total / steps,
               tps, ldig);
    else if (json)
        printf("{\"impl\":\"c\",\"config\":\"%c\",\"model\":\"%s\",\"params\":%lld,\"B\":%d,\"T\":%d,\"steps\":%d,"
               "\"threads\":%d,\"step_s\":%.4f,\"fwd_s\":%.4f,\"bwd_s\":%.4f,\"opt_s\":%.4f,"
               "\"tokens_per_s\":%.1f,\"flops_per_token\":%.0f,\"tr_flops_per_token\":%.0f,"
               "\"exec_flops_per_token\":%.0f,\"loss\":%.9g,\"device\":\"%s\",\"precision\":\"%s\","
               "\"gemm_share\":%.4f,\"isa\":\"%s\",\"gemm_engine\":\"%s\",\"limit_precision\":\"%s\",\"limit_products_s\":%.5f,"
               "\"limit_gflops\":%.2f,\"gflops\":%.2f,\"clock_step_s\":%.5f,\"clock\":\"%s\","
               "\"limit_passes\":%d,\"step_best_s\":%.5f,\"step_median_s\":%.5f,\"limit_median_s\":%.5f,"
               "\"fraction\":%.4f,\"fraction_median\":%.4f}\n",
               name, fam->name, (long long)nparams, B, T, steps, omp_get_max_threads(), total / steps, t_fwd / steps,
               t_bwd / steps, t_opt / steps, tps, fpt, ltm_train_flops(&c, T), ltm_exec_flops(&c, T), loss, dev->name,
               precision_name(dev->precision), gemm_share, cpu_isa_name(cpu_isa()), model_gemm_describe(),
               !limit ? "none" : lc_emulated ? "fp32 (bf16 emulated)" : precision_name(dev->precision),
               limit_s, limit_gflops, tps * fpt / 1e9, clock_step, omp_get_max_threads() == 1 ? "thread-cpu" : "wall",
               npass, step_best, step_med, limit_med, limit_s > 0 ? limit_s / step_best : -1.0,
               limit_s > 0 ? limit_med / step_med : -1.0);
    else
        printf("C  config %c (%s): %lld params, B=%d T=%d, %d threads: %.3f s/step (fwd %.3f bwd %.3f opt %.3f) "
               "-> %.0f tokens/s (loss %.3f)\n", name, fam->name, (long long)nparams, B, T, omp_get_max_threads(),
               total / steps, t_fwd / steps, t_bwd / steps, t_opt / steps, tps, loss);
    if (!json && limit_gflops > 0)
        printf("   %.1f GFLOP/s; the product limit at this step's shapes%s %.1f GFLOP/s (best of %d passes between\n"
               "   the steps, %s clock): best pass %.1f ms of products against the best step %.1f ms: %.3f\n"
               "   (medians: %.1f against %.1f ms: %.3f)\n", tps * fpt / 1e9,
               lc_emulated ? " (bf16 emulated: fp32 products of rounded operands)" : "", limit_gflops, npass,
               omp_get_max_threads() == 1 ? "thread CPU" : "wall", limit_s * 1e3, step_best * 1e3,
               limit_s / step_best, limit_med * 1e3, step_med * 1e3, limit_med / step_med);
    free(tok); free(in); free(tg);
    adamw_destroy(&opt);
    fam->destroy(&m);
    return rc != 0;
}

int main(int argc, char **argv) {
    const char *cfg = "both", *model = "llama", *device = "cpu", *prec = "fp32";
    int steps = 3, B = 8, T = 256, json = 0, H = 8, mh = 1, mk = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: train_step [--config S|M|G|both] [--model FAMILY] [--latent-bits H] [--steps N]\n"
                   "                  [--latent-vectors m] [--inner-steps K] [--window W]\n"
                   "                  [--batch B] [--seq T] [--device cpu|cuda[:N]] [--precision fp32|bf16|tf32]\n"
                   "                  [--mixer-heads h] [--mixer-kernel k] [--layers L] [--vocab V] [--json] [--profile]\n"
                   "                  [--limit [--limit-reps R]] [--digest] [--versus P] [--eval]\n"
                   "FAMILY: %s\n", family_names());
            printf("Times zero_grad + forward + backward + AdamW of a model family; prints tokens/s.\n"
                   "--layers L, --vocab V: the config with L layers, a vocabulary of V, instead of its own.\n"
                   "--profile: each op's median time per step on stderr (model/prof.h).\n"
                   "--limit: also the step's products alone, each at its shape, at the same precision, timed\n"
                   "  between the steps (R passes after each, --limit-reps R, default 1): the product limit\n"
                   "  (GFLOP/s) a step of only products would reach, and the best pass / the best step (llama only).\n"
                   "--versus P: a second model at precision P trains in the same process, the two taking turns\n"
                   "  step by step; prints both median steps and P's step over --precision's, paired by step\n"
                   "  (median and 90%% bootstrap interval): a comparison the machine's drift does not move.\n"
                   "--digest: a hash of the parameters' bits after the steps (two builds, the same bits?).\n"
                   "--eval: time the evaluator's scoring forward instead of a training step (tokens in, logits\n"
                   "  to the host; no targets, gradient or update), llama only; prints a hash of the last logits.\n");
            return 0;
        } else if (!strcmp(argv[i], "--config") && i + 1 < argc) cfg = argv[++i];
        else if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--latent-bits") && i + 1 < argc) H = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--latent-vectors") && i + 1 < argc) ltm_m = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--inner-steps") && i + 1 < argc) ltm_K = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--window") && i + 1 < argc) ltm_W = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) B = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seq") && i + 1 < argc) T = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) device = device_spec = argv[++i];
        else if (!strcmp(argv[i], "--precision") && i + 1 < argc) prec = argv[++i];
        else if (!strcmp(argv[i], "--mixer-heads") && i + 1 < argc) mh = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--mixer-kernel") && i + 1 < argc) mk = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--layers") && i + 1 < argc) layers = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--vocab") && i + 1 < argc) vocab = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--profile")) profile = 1;
        else if (!strcmp(argv[i], "--limit")) limit = 1;
        else if (!strcmp(argv[i], "--digest")) digest = 1;
        else if (!strcmp(argv[i], "--eval")) eval_only = 1;
        else if (!strcmp(argv[i], "--limit-reps") && i + 1 < argc) limit_reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--versus") && i + 1 < argc) versus = argv[++i];
        else { fprintf(stderr, "train_step: unknown or incomplete flag %s (try --help)\n", argv[i]); return 2; }
    }
    if (steps <= 0 || B <= 0 || T <= 0 || limit_reps < 1 || H < 1 || H > 20 || mh < 1 || mk < 1 ||
        (strcmp(cfg, "S") && strcmp(cfg, "M") && strcmp(cfg, "G") && strcmp(cfg, "both"))) {
        fprintf(stderr, "train_step: bad --config/--steps/--batch/--seq (try --help)\n");
        return 2;
    }
    if (eval_only && strcmp(model, "llama")) {
        fprintf(stderr, "train_step: --eval times the llama forward only, not --model %s\n", model);
        return 2;
    }
    if (eval_only && (limit || digest)) {
        fprintf(stderr, "train_step: --eval changes no weights and knows no product limit: not with --limit or --digest\n");
        return 2;
    }
    if (versus && (profile || limit || digest || steps > PROF_MAX_PAIRS)) {
        fprintf(stderr, "train_step: --versus times whole steps: not with --profile, --limit or --digest, "
                        "and at most %d steps\n", PROF_MAX_PAIRS);
        return 2;
    }
    char err[256];
    precision_t p;
    if (cpu_isa_check(err, sizeof err) || precision_parse(prec, &p, err, sizeof err) ||
        device_open(&dev, device, p, err, sizeof err)) {
        fprintf(stderr, "train_step: %s\n", err);
        return 2;
    }
    int rc = 0;
    if (!strcmp(cfg, "G")) rc |= run('G', model, H, mh, mk, B, T, steps, json);
    if (!strcmp(cfg, "S") || !strcmp(cfg, "both")) rc |= run('S', model, H, mh, mk, B, T, steps, json);
    if (!strcmp(cfg, "M") || !strcmp(cfg, "both")) rc |= run('M', model, H, mh, mk, B, T, steps, json);
    device_close(&dev);
    return rc;
}
