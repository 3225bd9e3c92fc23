/* bench/train_step.c: times one training step (zero_grad, forward, backward, AdamW) of a
 * model family (model/family.h: the Llama decoder, or the Free Transformer on that decoder)
 * for the benchmark configs S and M, and prints tokens/s.
 *
 *   build/bench/train_step [--config S|M|G|both] [--model llama|free] [--latent-bits H]
 *                          [--steps N] [--batch B] [--seq T] [--device D] [--precision P]
 *                          [--json]
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
#include "model/ltm.h"
#include "model/mixer_config.h"
#include "model/prof.h"
#include "common/rng.h"
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

static void sync_dev(void) {
    char e[256];
    if (!device_is_host(dev) && DEV(dev, sync, e, sizeof e)) fprintf(stderr, "train_step: %s\n", e);
}

static int ltm_m = 8, ltm_K = 4, ltm_W = 0, profile = 0;

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static double median_of(double *v, int n) {
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* --profile: each op's time per step (model/prof.h), the median over the timed steps, as a
 * table on stderr, largest first (at one thread by the thread's CPU clock, which other
 * processes on the core do not inflate; else by the wall clock); the product's lines (inside the Linear and attention ops)
 * are shown apart. per[s][i] is line i's seconds in step s, step[s] the step's wall time. */
#define PROF_MAX_STEPS 64
static prof_line_t prof_names[PROF_LINES];
static double prof_per[PROF_MAX_STEPS][PROF_LINES], prof_calls[PROF_LINES];
static void profile_report(int nsteps, int nlines, const double *step_s) {
    double v[PROF_MAX_STEPS], med[PROF_LINES], step_med, ops = 0;
    int order[PROF_LINES];
    for (int s = 0; s < nsteps; s++) v[s] = step_s[s];
    step_med = median_of(v, nsteps);
    for (int i = 0; i < nlines; i++) {
        for (int s = 0; s < nsteps; s++) v[s] = prof_per[s][i];
        med[i] = median_of(v, nsteps);
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

static int run(char name, const char *model, int H, int mh, int mk, int B, int T, int steps, int json) {
    model_config_t c = config_of(name);
    const model_family_t *fam = family_find(model);
    if (!fam) {
        fprintf(stderr, "train_step: unknown --model %s (%s)\n", model, family_names());
        return 2;
    }
    c.kind = fam->kind;
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
    double t_fwd = 0, t_bwd = 0, t_opt = 0, t0 = 0, step_s[PROF_MAX_STEPS];
    prof_line_t prev[PROF_LINES];
    int nprof = 0, nprev = 0;
    float loss = 0;
    int rc = 0;
    for (int s = -1; s < steps && !rc; s++) {   /* s = -1: warm-up, not timed */
        double a = now();
        if (s == 0) {
            t0 = a;
            if (profile) prof_start(omp_get_max_threads() == 1);
        }
        const double a_prof = prof_now();
        if (fam->set_step) fam->set_step(m, (uint64_t)(s + 1));
        fam->zero_grad(m);
        rc |= fam->forward(m, in, tg, NULL, &loss, err, sizeof(err));
        sync_dev();
        double b = now();
        rc |= fam->backward(m, err, sizeof(err));
        sync_dev();
        double c2 = now();
        double norm;
        rc |= adamw_step(opt, gv, np, 1e-3f, 1.0f, 1.0f, &norm, err, sizeof(err));
        sync_dev();
        double d = now();
        if (s >= 0) { t_fwd += b - a; t_bwd += c2 - b; t_opt += d - c2; }
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
    }
    if (profile) {
        prof_stop();
        if (!rc && steps > 0) profile_report(steps < PROF_MAX_STEPS ? steps : PROF_MAX_STEPS, nprof, step_s);
    }
    if (rc) fprintf(stderr, "train_step: %s\n", err);
    /* cuBLAS' share, from a second pass with every product timed (it waits for each product,
     * so it is not part of the throughput above) */
    double gemm_share = -1;
    if (!device_is_host(dev) && !rc) {
        dev->profile_gemm = 1;
        dev->gemm_seconds = 0;
        double a = now();
        for (int s = 0; s < steps && !rc; s++) {
            fam->zero_grad(m);
            rc |= fam->forward(m, in, tg, NULL, &loss, err, sizeof(err));
            rc |= fam->backward(m, err, sizeof(err));
            sync_dev();
        }
        gemm_share = dev->gemm_seconds / (now() - a);
        dev->profile_gemm = 0;
    }
    double total = now() - t0, tps = (double)B * T * steps / total;
    double fpt = flops_per_token(&c, nparams, not_per_token, T);
    if (json)
        printf("{\"impl\":\"c\",\"config\":\"%c\",\"model\":\"%s\",\"params\":%lld,\"B\":%d,\"T\":%d,\"steps\":%d,"
               "\"threads\":%d,\"step_s\":%.4f,\"fwd_s\":%.4f,\"bwd_s\":%.4f,\"opt_s\":%.4f,"
               "\"tokens_per_s\":%.1f,\"flops_per_token\":%.0f,\"tr_flops_per_token\":%.0f,"
               "\"exec_flops_per_token\":%.0f,\"loss\":%.4f,\"device\":\"%s\",\"precision\":\"%s\","
               "\"gemm_share\":%.4f}\n",
               name, fam->name, (long long)nparams, B, T, steps, omp_get_max_threads(), total / steps, t_fwd / steps,
               t_bwd / steps, t_opt / steps, tps, fpt, ltm_train_flops(&c, T), ltm_exec_flops(&c, T), loss, dev->name,
               precision_name(dev->precision), gemm_share);
    else
        printf("C  config %c (%s): %lld params, B=%d T=%d, %d threads: %.3f s/step (fwd %.3f bwd %.3f opt %.3f) "
               "-> %.0f tokens/s (loss %.3f)\n", name, fam->name, (long long)nparams, B, T, omp_get_max_threads(),
               total / steps, t_fwd / steps, t_bwd / steps, t_opt / steps, tps, loss);
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
                   "                  [--mixer-heads h] [--mixer-kernel k] [--json] [--profile]\n"
                   "FAMILY: %s\n", family_names());
            printf("Times zero_grad + forward + backward + AdamW of a model family; prints tokens/s.\n"
                   "--profile: each op's median time per step on stderr (model/prof.h).\n");
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
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
        else if (!strcmp(argv[i], "--precision") && i + 1 < argc) prec = argv[++i];
        else if (!strcmp(argv[i], "--mixer-heads") && i + 1 < argc) mh = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--mixer-kernel") && i + 1 < argc) mk = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--profile")) profile = 1;
        else { fprintf(stderr, "train_step: unknown or incomplete flag %s (try --help)\n", argv[i]); return 2; }
    }
    if (steps <= 0 || B <= 0 || T <= 0 || H < 1 || H > 20 || mh < 1 || mk < 1 ||
        (strcmp(cfg, "S") && strcmp(cfg, "M") && strcmp(cfg, "G") && strcmp(cfg, "both"))) {
        fprintf(stderr, "train_step: bad --config/--steps/--batch/--seq (try --help)\n");
        return 2;
    }
    char err[256];
    precision_t p;
    if (precision_parse(prec, &p, err, sizeof err) || device_open(&dev, device, p, err, sizeof err)) {
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
