/* bench/generate.c: batch-1 generation tokens/s with the KV cache (bin/sampler's path:
 * sampler_generate) on configuration S, for the baseline and the Free Transformer (H = 8).
 * Same work as bench/generate_torch.py: a prefill of --prompt tokens, then --new tokens each
 * sampled from softmax(logits); tokens/s = new tokens / wall time (prefill included), the
 * median over --repeats. Weights are random (speed does not depend on them).
 *
 *   build/bench/generate [--model llama|free] [--prompt 16] [--new 256] [--repeats 5]
 *                        [--precision fp32|bf16] [--versus fp32|bf16] [--json]
 * --precision bf16: the sampler's --precision bf16 (the products' operands rounded to bf16: the
 * decode step's rows on the weights' bf16 copies where the CPU has AVX512-BF16).
 * --versus P: a second model, the same weights at precision P on a second device, generates in
 * the same process, the two taking turns (ABBA: A then B on even repeats, B then A on odd), and
 * --repeats pairs are timed. Reported: each side's median time, and the median of the paired
 * ratios time A / time B (B's tokens/s over A's) with a 90% bootstrap interval (2000 resamples
 * of the pairs, a fixed seed). Why: separate runs of the two precisions lie tens of seconds apart
 * on a VM whose speed drifts by 15% over minutes (bench/NOTES.md, 2026-11-27 and 2026-12-07: one
 * fp32 round at 1203 tokens/s between rounds at 1769 and 1916 moved a bench's ratio of medians
 * from ~1.65 to 1.46); a pair is two generations under a second apart (train_step --versus is the
 * same rule for the training step). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "common/flags.h"
#include "common/rng.h"
#include "model/cpu_isa.h"
#include "model/device.h"
#include "model/prof.h"
#include "sampler/sampler.h"
#include "bench/stats.h"

/* --versus: the two models take turns, repeats pairs; 0, or 1 with err */
static int run_pair(sampler_model_t *a, sampler_model_t *b, const uint32_t *prompt, int P, sampler_opts_t o,
                    int repeats, double *ta, double *tb, char *err, size_t errlen) {
    sampler_result_t res;
    for (int k = 0; k < repeats; k++) {
        const int b_first = k % 2 == 1;
        for (int side = 0; side < 2; side++) {
            const int is_b = side == 0 ? b_first : !b_first;
            o.seed = (uint64_t)k + 1;   /* the same tokens drawn on both sides */
            if (sampler_generate(is_b ? b : a, prompt, P, &o, &res, err, errlen)) return 1;
            (is_b ? tb : ta)[k] = res.seconds;
            sampler_result_free(&res);
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *model = "llama", *prec = "fp32", *versus = "";
    int P = 16, n_new = 256, repeats = 5, json = 0, n = 1, profile = 0;
    flag_t fl[] = {
        {"model", FLAG_STR, &model, "llama or free", 0, 0, 0},
        {"prompt", FLAG_INT, &P, "prompt tokens", 1, 512, 0},
        {"new", FLAG_INT, &n_new, "generated tokens", 1, 512, 0},
        {"repeats", FLAG_INT, &repeats, "timed repeats (median reported)", 1, 100, 0},
        {"json", FLAG_BOOL, &json, "one JSON line", 0, 0, 0},
        {"n", FLAG_INT, &n, "sequences generated together (tokens/s counts all of them)", 1, 16, 0},
        {"precision", FLAG_STR, &prec, "fp32 or bf16", 0, 0, 0},
        {"profile", FLAG_BOOL, &profile, "each op's time per generated token, on stderr (model/prof.h)", 0, 0, 0},
        {"versus", FLAG_STR, &versus,
         "fp32 or bf16: a second model at that precision takes turns with the first (ABBA), --repeats pairs; "
         "the median of the paired speed ratios and its 90% bootstrap interval", 0, 0, 0},
    };
    const int nfl = (int)(sizeof fl / sizeof fl[0]);
    char err[512];
    int rc = flags_parse(argc, argv, 1, fl, nfl, NULL, NULL, 0, err, sizeof err);
    if (rc == 1) { printf("usage: generate [flags]\n"); flags_usage(stdout, fl, nfl); return 0; }
    if (rc) { fprintf(stderr, "generate: %s\n", err); return 2; }
    if (*versus && profile) { fprintf(stderr, "generate: --versus times whole generations: not with --profile\n"); return 2; }
    int is_free = !strcmp(model, "free");
    if (!is_free && strcmp(model, "llama")) { fprintf(stderr, "generate: --model llama or free\n"); return 2; }
    model_config_t c = {.kind = is_free ? MODEL_FREE : MODEL_LLAMA, .vocab_size = 4096,
                        .d_model = 256, .n_layers = 4, .n_heads = 4, .n_kv_heads = 2, .d_ff = 768,
                        .max_seq = 1024, .rope_theta = 10000.0f, .norm_eps = 1e-5f, .tied = 1,
                        .eot_id = 0, .latent_bits = 8, .kappa_nats = 0.1f};
    precision_t pr, pv = PRECISION_FP32;
    device_t *dev = NULL, *dev_v = NULL;
    if (cpu_isa_check(err, sizeof err) || precision_parse(prec, &pr, err, sizeof err) ||
        (*versus && precision_parse(versus, &pv, err, sizeof err)) || device_open(&dev, "cpu", pr, err, sizeof err) ||
        (*versus && device_open(&dev_v, "cpu", pv, err, sizeof err))) {
        fprintf(stderr, "generate: %s%s\n", *versus ? "--precision / --versus: " : "", err);
        device_close(&dev);
        return 2;
    }
    sampler_model_t *sm = NULL, *sm_v = NULL;   /* (the same seed: the same weights) */
    if (sampler_model_create(&sm, dev, &c, 1, err, sizeof err) ||
        (*versus && sampler_model_create(&sm_v, dev_v, &c, 1, err, sizeof err))) {
        fprintf(stderr, "generate: %s\n", err);
        return 1;
    }
    uint32_t *prompt = malloc(sizeof(uint32_t) * P);
    rng_t r;
    rng_seed(&r, 2);
    for (int i = 0; i < P; i++) prompt[i] = (uint32_t)rng_below(&r, c.vocab_size);
    sampler_opts_t o = {.n = 1, .max_new = 8, .sample = SAMPLE_OPTS_DEFAULT, .seed = 0, .group = 1};
    sampler_result_t res;
    double *t = malloc(sizeof(double) * repeats);
    /* warm-up (allocations, page faults), not timed */
    if (sampler_generate(sm, prompt, P, &o, &res, err, sizeof err)) { fprintf(stderr, "generate: %s\n", err); return 1; }
    sampler_result_free(&res);
    if (sm_v) {
        if (sampler_generate(sm_v, prompt, P, &o, &res, err, sizeof err)) { fprintf(stderr, "generate: %s\n", err); return 1; }
        sampler_result_free(&res);
    }
    o.max_new = n_new;
    o.n = n;
    if (sm_v) {   /* --versus: pairs, then the report, and done */
        double *tb = malloc(sizeof(double) * repeats), *ratio = malloc(sizeof(double) * repeats), lo, hi;
        if (!t || !tb || !ratio) { fprintf(stderr, "generate: out of memory\n"); return 1; }
        if (run_pair(sm, sm_v, prompt, P, o, repeats, t, tb, err, sizeof err)) {
            fprintf(stderr, "generate: %s\n", err);
            return 1;
        }
        for (int k = 0; k < repeats; k++) ratio[k] = t[k] / tb[k];
        bench_median_interval(ratio, repeats, &lo, &hi);
        const double med = bench_median(ratio, repeats), ma = bench_median(t, repeats), mb = bench_median(tb, repeats);
        if (json)
            printf("{\"impl\":\"ours\",\"model\":\"%s\",\"n\":%d,\"prompt\":%d,\"new\":%d,\"pairs\":%d,\"threads\":%d,"
                   "\"isa\":\"%s\",\"a\":\"%s\",\"b\":\"%s\",\"a_median_s\":%.6f,\"b_median_s\":%.6f,"
                   "\"a_tok_s\":%.1f,\"b_tok_s\":%.1f,\"b_over_a_speed_median\":%.4f,\"b_over_a_speed_lo90\":%.4f,"
                   "\"b_over_a_speed_hi90\":%.4f}\n",
                   model, n, P, n_new, repeats, omp_get_max_threads(), cpu_isa_name(cpu_isa()), prec, versus, ma, mb,
                   (double)n * n_new / ma, (double)n * n_new / mb, med, lo, hi);
        else
            printf("C  %s: %d x %d tokens after a %d-token prompt, up to %d threads, %d pairs interleaved: %s %.0f tok/s, "
                   "%s %.0f tok/s (medians); %s over %s paired: median %.3fx, 90%% interval %.3fx .. %.3fx\n",
                   model, n, n_new, P, omp_get_max_threads(), repeats, prec, (double)n * n_new / ma, versus,
                   (double)n * n_new / mb, versus, prec, med, lo, hi);
        free(tb), free(ratio), free(t), free(prompt);
        sampler_model_free(&sm_v);
        sampler_model_free(&sm);
        device_close(&dev_v);
        device_close(&dev);
        return 0;
    }
    /* --profile: every op of the timed repeats (at one thread by the thread's CPU clock) */
    if (profile) prof_start(omp_get_max_threads() == 1);
    for (int k = 0; k < repeats; k++) {
        o.seed = (uint64_t)k + 1;
        if (sampler_generate(sm, prompt, P, &o, &res, err, sizeof err)) { fprintf(stderr, "generate: %s\n", err); return 1; }
        t[k] = res.seconds;
        sampler_result_free(&res);
    }
    if (profile) {
        prof_stop();
        prof_line_t l[PROF_LINES];
        const int nl = prof_snapshot(l, PROF_LINES);
        double all = 0;
        for (int i = 0; i < nl; i++) all += strncmp(l[i].name, "gemm.", 5) ? l[i].seconds : 0;
        fprintf(stderr, "profile: %.1f us of ops per generated token\n", all / repeats / n_new / n * 1e6);
        for (int i = 0; i < nl; i++)
            fprintf(stderr, "  %-28s %9.2f us/token %5.1f%%\n", l[i].name, l[i].seconds / repeats / n_new / n * 1e6,
                    100 * l[i].seconds / all);
    }
    double med = bench_median(t, repeats);
    double tok_s = (double)n * n_new / med;
    if (json)
        printf("{\"impl\":\"ours\",\"model\":\"%s\",\"n\":%d,\"prompt\":%d,\"new\":%d,\"repeats\":%d,"
               "\"threads\":%d,\"median_s\":%.6f,\"tok_s\":%.1f,\"precision\":\"%s\",\"isa\":\"%s\"}\n",
               model, n, P, n_new, repeats, omp_get_max_threads(), med, tok_s, prec, cpu_isa_name(cpu_isa()));
    else
        printf("C  %s (%s): %d x %d tokens after a %d-token prompt, up to %d threads: %.0f tok/s (median of %d)\n",
               model, prec, n, n_new, P, omp_get_max_threads(), tok_s, repeats);
    free(t);
    free(prompt);
    sampler_model_free(&sm);
    device_close(&dev);
    return 0;
}
