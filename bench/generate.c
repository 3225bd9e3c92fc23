/* bench/generate.c: batch-1 generation tokens/s with the KV cache (bin/sampler's path:
 * sampler_generate) on configuration S, for the baseline and the Free Transformer (H = 8).
 * Same work as bench/generate_torch.py: a prefill of --prompt tokens, then --new tokens each
 * sampled from softmax(logits); tokens/s = new tokens / wall time (prefill included), the
 * median over --repeats. Weights are random (speed does not depend on them).
 *
 *   build/bench/generate [--model llama|free] [--prompt 16] [--new 256] [--repeats 5]
 *                        [--precision fp32|bf16] [--json]
 * --precision bf16: the sampler's --precision bf16 (the products' operands rounded to bf16: the
 * decode step's rows on the weights' bf16 copies where the CPU has AVX512-BF16). */
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

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    const char *model = "llama", *prec = "fp32";
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
    };
    char err[512];
    int rc = flags_parse(argc, argv, 1, fl, 8, NULL, NULL, 0, err, sizeof err);
    if (rc == 1) { printf("usage: generate [flags]\n"); flags_usage(stdout, fl, 8); return 0; }
    if (rc) { fprintf(stderr, "generate: %s\n", err); return 2; }
    int is_free = !strcmp(model, "free");
    if (!is_free && strcmp(model, "llama")) { fprintf(stderr, "generate: --model llama or free\n"); return 2; }
    model_config_t c = {.kind = is_free ? MODEL_FREE : MODEL_LLAMA, .vocab_size = 4096,
                        .d_model = 256, .n_layers = 4, .n_heads = 4, .n_kv_heads = 2, .d_ff = 768,
                        .max_seq = 1024, .rope_theta = 10000.0f, .norm_eps = 1e-5f, .tied = 1,
                        .eot_id = 0, .latent_bits = 8, .kappa_nats = 0.1f};
    precision_t pr;
    device_t *dev = NULL;
    if (cpu_isa_check(err, sizeof err) || precision_parse(prec, &pr, err, sizeof err) ||
        device_open(&dev, "cpu", pr, err, sizeof err)) {
        fprintf(stderr, "generate: %s\n", err);
        return 2;
    }
    sampler_model_t *sm = NULL;
    if (sampler_model_create(&sm, dev, &c, 1, err, sizeof err)) { fprintf(stderr, "generate: %s\n", err); return 1; }
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
    o.max_new = n_new;
    o.n = n;
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
    qsort(t, repeats, sizeof(double), cmp_d);
    double med = repeats % 2 ? t[repeats / 2] : 0.5 * (t[repeats / 2 - 1] + t[repeats / 2]);
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
