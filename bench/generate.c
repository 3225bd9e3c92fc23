/* bench/generate.c: batch-1 generation tokens/s with the KV cache (bin/sampler's path:
 * sampler_generate) on configuration S, for the baseline and the Free Transformer (H = 8).
 * Same work as bench/generate_torch.py: a prefill of --prompt tokens, then --new tokens each
 * sampled from softmax(logits); tokens/s = new tokens / wall time (prefill included), the
 * median over --repeats. Weights are random (speed does not depend on them).
 *
 *   build/bench/generate [--model llama|free] [--prompt 16] [--new 256] [--repeats 5] [--json] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "common/flags.h"
#include "common/rng.h"
#include "sampler/sampler.h"

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    const char *model = "llama";
    int P = 16, n_new = 256, repeats = 5, json = 0, n = 1;
    flag_t fl[] = {
        {"model", FLAG_STR, &model, "llama or free", 0, 0, 0},
        {"prompt", FLAG_INT, &P, "prompt tokens", 1, 512, 0},
        {"new", FLAG_INT, &n_new, "generated tokens", 1, 512, 0},
        {"repeats", FLAG_INT, &repeats, "timed repeats (median reported)", 1, 100, 0},
        {"json", FLAG_BOOL, &json, "one JSON line", 0, 0, 0},
        {"n", FLAG_INT, &n, "sequences generated together (tokens/s counts all of them)", 1, 16, 0},
    };
    char err[512];
    int rc = flags_parse(argc, argv, 1, fl, 6, NULL, NULL, 0, err, sizeof err);
    if (rc == 1) { printf("usage: generate [flags]\n"); flags_usage(stdout, fl, 6); return 0; }
    if (rc) { fprintf(stderr, "generate: %s\n", err); return 2; }
    int is_free = !strcmp(model, "free");
    if (!is_free && strcmp(model, "llama")) { fprintf(stderr, "generate: --model llama or free\n"); return 2; }
    model_config_t c = {.kind = is_free ? MODEL_FREE : MODEL_LLAMA, .vocab_size = 4096,
                        .d_model = 256, .n_layers = 4, .n_heads = 4, .n_kv_heads = 2, .d_ff = 768,
                        .max_seq = 1024, .rope_theta = 10000.0f, .norm_eps = 1e-5f, .tied = 1,
                        .eot_id = 0, .latent_bits = 8, .kappa_nats = 0.1f};
    sampler_model_t *sm = NULL;
    if (sampler_model_create(&sm, NULL, &c, 1, err, sizeof err)) { fprintf(stderr, "generate: %s\n", err); return 1; }
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
    for (int k = 0; k < repeats; k++) {
        o.seed = (uint64_t)k + 1;
        if (sampler_generate(sm, prompt, P, &o, &res, err, sizeof err)) { fprintf(stderr, "generate: %s\n", err); return 1; }
        t[k] = res.seconds;
        sampler_result_free(&res);
    }
    qsort(t, repeats, sizeof(double), cmp_d);
    double med = repeats % 2 ? t[repeats / 2] : 0.5 * (t[repeats / 2 - 1] + t[repeats / 2]);
    double tok_s = (double)n * n_new / med;
    if (json)
        printf("{\"impl\":\"ours\",\"model\":\"%s\",\"n\":%d,\"prompt\":%d,\"new\":%d,\"repeats\":%d,"
               "\"threads\":%d,\"median_s\":%.6f,\"tok_s\":%.1f}\n",
               model, n, P, n_new, repeats, omp_get_max_threads(), med, tok_s);
    else
        printf("C  %s: %d x %d tokens after a %d-token prompt, up to %d threads: %.0f tok/s (median of %d)\n",
               model, n, n_new, P, omp_get_max_threads(), tok_s, repeats);
    free(t);
    free(prompt);
    sampler_model_free(&sm);
    return 0;
}
