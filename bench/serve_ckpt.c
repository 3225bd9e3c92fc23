/* bench/serve_ckpt.c: a checkpoint of configuration S with random weights, for the service
 * benchmark (bench/bench_serve.sh serves it with bin/sampler --serve; speed does not depend on
 * the weights). Baseline or Free Transformer (H = 8), vocabulary 4096.
 *
 *   build/bench/serve_ckpt --out RUN_DIR [--step 1] [--model llama|free] [--seed 1] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/flags.h"
#include "model/checkpoint.h"
#include "sampler/sampler.h"

int main(int argc, char **argv) {
    const char *out = NULL, *model = "llama";
    long long step = 1, seed = 1;
    flag_t fl[] = {
        {"out", FLAG_STR, &out, "run directory to write ckpt-<step> into", 0, 0, 0},
        {"step", FLAG_I64, &step, "the checkpoint's step", 0, 0, 0},
        {"model", FLAG_STR, &model, "llama or free", 0, 0, 0},
        {"seed", FLAG_I64, &seed, "weights' seed", 0, 0, 0},
    };
    char err[512];
    int rc = flags_parse(argc, argv, 1, fl, 4, NULL, NULL, 0, err, sizeof err);
    if (rc == 1) { printf("usage: serve_ckpt --out RUN_DIR [flags]\n"); flags_usage(stdout, fl, 4); return 0; }
    if (rc || !out) { fprintf(stderr, "serve_ckpt: %s\n", rc ? err : "--out is required"); return 2; }
    const int is_free = !strcmp(model, "free");
    model_config_t c = {.kind = is_free ? MODEL_FREE : MODEL_LLAMA, .vocab_size = 4096,
                        .d_model = 256, .n_layers = 4, .n_heads = 4, .n_kv_heads = 2, .d_ff = 768,
                        .max_seq = 1024, .rope_theta = 10000.0f, .norm_eps = 1e-5f, .tied = 1,
                        .eot_id = 0, .latent_bits = 8, .kappa_nats = 0.1f};
    sampler_model_t *sm = NULL;
    if (sampler_model_create(&sm, NULL, &c, (uint64_t)seed, err, sizeof err)) {
        fprintf(stderr, "serve_ckpt: %s\n", err);
        return 1;
    }
    int n = sampler_model_params(sm, NULL, 0);
    tensor_view_t *v = malloc(sizeof *v * n);
    sampler_model_params(sm, v, n);
    char path[4096];
    rc = ckpt_save(out, step, &c, v, n, NULL, NULL, 0, NULL, 0, path, sizeof path, err, sizeof err);
    if (rc) fprintf(stderr, "serve_ckpt: %s\n", err);
    else printf("%s\n", path);
    free(v);
    sampler_model_free(&sm);
    return rc ? 1 : 0;
}
