/* tests/test_eval_chunk.c: the evaluator on the autoencoders and memory models (seed 004).
 *   - it scores the variant a run trained: a checkpoint with an unmasked encoder loads as
 *     unmasked (its logits are the saved model's, bit for bit, and not those of its masked
 *     twin with the same weights), a masked one as masked;
 *   - task val's bits and controls (evaluator/val_chunk.c) on a stub whose logits are fixed by
 *     construction: it predicts, at strength bits/4, the token its encoder read at the same
 *     position, and nothing (uniform) from a zeroed embedding. So every number val reports is
 *     known here in closed form: the CE at each bits, the zero control (ln V), the shuffled
 *     control (from the rows the rule names, rebuilt here with the loader's batch function),
 *     the unigram (counted here from the train split's batches), the gains, and the verdict;
 *   - an unbounded embedding: only 32 bits, and --bits-per-param 8 refused with one line. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/rng.h"
#include "evaluator/lm.h"
#include "evaluator/task.h"
#include "loader/batch.h"
#include "model/checkpoint.h"
#include "model/mixers.h"
#include "tests/check.h"
#include "tokenizer/dataset.h"

static char tmpdir[512];
static rng_t R;

/* ---- the variant each run trained ---- */
static model_config_t ae_cfg(model_kind kind, int unmasked) {
    return (model_config_t){.kind = kind, .vocab_size = 19, .d_model = 12, .n_layers = 1, .n_heads = 2,
                            .n_kv_heads = 1, .d_ff = 16, .max_seq = 8, .rope_theta = 1e4f, .norm_eps = 1e-5f,
                            .tied = 1, .mixer_heads = 1, .mixer_kernel = 1, .encoder_layers = 2, .embed_dim = 6,
                            .no_mask_encoder = unmasked};
}

/* The logits of m on tok (B,T) into out. */
static int logits_into(mixers_t *m, const uint32_t *tok, float *out, size_t n) {
    char err[256];
    int rc = mixers_forward(m, tok, NULL, NULL, NULL, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    if (!rc) memcpy(out, mixers_logits(m), sizeof(float) * n);
    return rc;
}

static void variant_case(model_kind kind, int unmasked) {
    enum { B = 3, T = 8 };
    const char *what = kind == MODEL_MIXER_AE ? (unmasked ? "mixer-ae, unmasked encoder" : "mixer-ae, masked encoder")
                                              : (unmasked ? "mixer-mem, unmasked encoder" : "mixer-mem, masked encoder");
    model_config_t c = ae_cfg(kind, unmasked), twin = ae_cfg(kind, !unmasked);
    mixers_t *m = NULL, *t = NULL;
    eval_lm_t *lm = NULL;
    char err[512], run[600], dir[1200];
    uint32_t tok[B * T];
    const size_t n = (size_t)B * T * c.vocab_size;
    float *want = malloc(sizeof(float) * n), *other = malloc(sizeof(float) * n);
    for (int i = 0; i < B * T; i++) tok[i] = (uint32_t)rng_below(&R, c.vocab_size);
    if (mixers_create_on(&m, device_cpu_default(), &c, B, T, 7, err, sizeof err) ||
        mixers_create_on(&t, device_cpu_default(), &twin, B, T, 7, err, sizeof err)) {
        CHECK(0, "%s: %s", what, err);
        goto out;
    }
    tensor_view_t v[96], tv[96];
    const int nv = mixers_params(m, v, 96);
    CHECK(mixers_params(t, tv, 96) == nv, "%s: the twin has the same tensors", what);
    /* weights ~ 0.3 so the mask matters; the twin gets the very same numbers */
    for (int i = 0; i < nv; i++)
        for (int64_t j = 0; j < tensor_numel(&v[i]); j++)
            tv[i].data[j] = v[i].data[j] = v[i].ndim >= 2 ? 0.3f * rng_normal(&R) : 1.0f;
    if (logits_into(m, tok, want, n) || logits_into(t, tok, other, n)) goto out;
    CHECK(memcmp(want, other, sizeof(float) * n) != 0, "%s: masking the encoder changes the logits", what);
    snprintf(run, sizeof run, "%s/%s-%d", tmpdir, kind == MODEL_MIXER_AE ? "ae" : "mem", unmasked);
    if (ckpt_save(run, 1, &c, v, nv, NULL, NULL, 0, NULL, 0, dir, sizeof dir, err, sizeof err)) {
        CHECK(0, "%s: save: %s", what, err);
        goto out;
    }
    if (eval_lm_load(&lm, NULL, dir, B, T, err, sizeof err)) {
        CHECK(0, "%s: load: %s", what, err);
        goto out;
    }
    CHECK(lm->cfg.no_mask_encoder == unmasked, "%s: the loaded config keeps the encoder's mask", what);
    const float *lg = lm->chunk_logits(lm, tok, NULL, 32, 0, B, T, err, sizeof err);
    CHECK(lg && !memcmp(lg, want, sizeof(float) * n), "%s: the evaluator scores the saved model, bit for bit", what);
    CHECK(lg && memcmp(lg, other, sizeof(float) * n) != 0, "%s: and not its twin with the other mask", what);
out:
    eval_lm_free(&lm);
    mixers_destroy(&m);
    mixers_destroy(&t);
    free(want);
    free(other);
}

static void test_scores_trained_variant(void) {
    variant_case(MODEL_MIXER_AE, 1);
    variant_case(MODEL_MIXER_AE, 0);
    variant_case(MODEL_MIXER_MEM, 1);
    variant_case(MODEL_MIXER_MEM, 0);
}

/* ---- val's bits and controls on a stub ---- */
enum { SV = 12, SB = 4, ST = 6 };
typedef struct { float buf[SB * ST * SV]; int ignore; } chunk_stub_t;

/* Row t: logit bits/4 at the token the encoder read at t (0 elsewhere); a zeroed embedding,
 * or a stub that ignores its embedding: all 0. */
static const float *stub_chunk(eval_lm_t *lm, const uint32_t *tok, const uint32_t *enc, int bits, int zero, int B,
                               int T, char *err, size_t errlen) {
    (void)err, (void)errlen;
    chunk_stub_t *s = lm->impl;
    const uint32_t *read = enc ? enc : tok;
    memset(s->buf, 0, sizeof(float) * B * T * SV);
    if (!zero && !s->ignore)
        for (int i = 0; i < B * T; i++) s->buf[(size_t)i * SV + read[i]] = bits / 4.0f;
    return s->buf;
}
static void stub_release(eval_lm_t *lm) { free(lm->impl); }
static eval_lm_t *stub_new(float range, int ignore) {
    eval_lm_t *lm = calloc(1, sizeof *lm);
    chunk_stub_t *s = calloc(1, sizeof *s);
    s->ignore = ignore;
    lm->cfg = (model_config_t){.kind = MODEL_MIXER_AE, .vocab_size = SV, .max_seq = ST, .eot_id = 0};
    lm->Bmax = SB;
    lm->Tmax = ST;
    lm->impl = s;
    lm->chunk_logits = stub_chunk;
    lm->n_embed = 3;
    lm->embed_range = range;
    lm->release = stub_release;
    return lm;
}

/* 40 documents of random lengths and tokens (1..SV-1), 3 bytes a token. */
static const char *make_data(void) {
    static char path[700];
    snprintf(path, sizeof path, "%s/ds", tmpdir);
    dataset_meta_t meta;
    memset(&meta, 0, sizeof meta);
    meta.vocab_size = SV;
    snprintf(meta.tokenizer, sizeof meta.tokenizer, "test");
    snprintf(meta.tokenizer_hash, sizeof meta.tokenizer_hash, "0");
    dataset_writer_t *w = NULL;
    char err[256];
    uint32_t t[64];
    CHECK(dataset_writer_open(&w, path, &meta, 1, err, sizeof err) == 0, "%s", err);
    for (int d = 0; d < 40; d++) {
        const uint32_t len = 20 + (uint32_t)rng_below(&R, 40);
        /* skewed: low ids more often, so the unigram is not uniform */
        for (uint32_t i = 0; i < len; i++) t[i] = 1 + (uint32_t)(rng_below(&R, SV - 1) * rng_f32(&R));
        CHECK(dataset_writer_add(w, t, len, 3 * (uint64_t)len, err, sizeof err) == 0, "%s", err);
    }
    CHECK(dataset_writer_close(&w, err, sizeof err) == 0, "%s", err);
    return path;
}

static int run_val(const char *data, eval_lm_t *lm, int bits_per_param, eval_values_t *v, char *err, size_t errlen) {
    eval_task_cfg_t c = {.task = "val", .data = data, .val_docs = 12, .batches = 0, .batch = SB, .seq_len = ST,
                         .seed = 5, .bits_per_param = bits_per_param, .bits_list = "4,16,32"};
    eval_task_t *t = NULL;
    int rc = eval_task_open(&t, &c, err, errlen);
    if (!rc) rc = eval_task_run(t, lm, v, NULL, err, errlen);
    eval_task_close(&t);
    return rc;
}

/* The stub's CE of one token at strength s: ln(V - 1 + e^s) - s when the read token is the
 * target, ln(V - 1 + e^s) otherwise. */
static double stub_ce(double s, int hit) { return log(SV - 1 + exp(s)) - (hit ? s : 0); }

static void test_val_controls(void) {
    const char *data = make_data();
    char err[512];
    /* the expected numbers from the loader's own batches */
    loader_src_t *src = NULL;
    CHECK(loader_src_open(&src, data, NULL, 12, err, sizeof err) == 0, "%s", err);
    loader_params_t p = {.seed = 5, .world = 1, .B = SB, .T = ST, .layout = WIRE_PACK, .split = WIRE_VAL};
    uint64_t S = 0;
    CHECK(loader_steps_per_epoch(src, &p, &S, err, sizeof err) == 0 && S >= 2, "%llu val batches", (unsigned long long)S);
    uint32_t rows[SB * (ST + 1)], other[SB * (ST + 1)];
    double shuffle = 0, tokens = 0, uni = 0;
    /* the unigram of the train split, add-one */
    double count[SV] = {0}, total = 0;
    loader_params_t q = p;
    q.split = WIRE_TRAIN;
    uint64_t St = 0;
    CHECK(loader_steps_per_epoch(src, &q, &St, err, sizeof err) == 0, "%s", err);
    for (q.step = 0; q.step < St; q.step++) {
        CHECK(loader_batch_make(src, &q, rows, NULL, NULL, err, sizeof err) == 0, "%s", err);
        for (int i = 0; i < SB * (ST + 1); i++) count[rows[i]]++, total++;
    }
    for (p.step = 0; p.step < S; p.step++) {
        loader_params_t o = p;
        o.step = (p.step + S / 2) % S;
        CHECK(loader_batch_make(src, &p, rows, NULL, NULL, err, sizeof err) == 0, "%s", err);
        CHECK(loader_batch_make(src, &o, other, NULL, NULL, err, sizeof err) == 0, "%s", err);
        for (int b = 0; b < SB; b++)
            for (int t = 0; t < ST; t++) {
                const uint32_t tok = rows[b * (ST + 1) + t], enc = other[((b + SB / 2) % SB) * (ST + 1) + t];
                shuffle += stub_ce(2.0, tok == enc);
                uni -= log((count[tok] + 1) / (total + SV));
                tokens++;
            }
    }
    loader_src_close(&src);
    eval_lm_t *lm = stub_new(1.0f, 0);
    eval_values_t v;
    int rc = run_val(data, lm, 0, &v, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    if (!rc) {
        /* doubles over float logits: 1e-6 */
        CHECK(eval_values_get(&v, "bits_per_param") == 8, "a bounded embedding's default: 8 bits");
        const int bits[] = {4, 8, 16, 32};
        for (int i = 0; i < 4; i++) {
            char name[16];
            snprintf(name, sizeof name, "ce_b%d", bits[i]);
            CHECK_CLOSE(eval_values_get(&v, name), stub_ce(bits[i] / 4.0, 1), 1e-6, 1e-6);
        }
        const double ce = stub_ce(2.0, 1), tpb = 1 / 3.0; /* 3 bytes a token */
        CHECK_CLOSE(eval_values_get(&v, "ce"), ce, 1e-6, 1e-6);
        CHECK_CLOSE(eval_values_get(&v, "bpb_embedding"), 3 * 8 * tpb / ST, 1e-9, 1e-9);
        CHECK_CLOSE(eval_values_get(&v, "bpb_b16"), stub_ce(4.0, 1) * tpb / M_LN2 + 3 * 16 * tpb / ST, 1e-6, 1e-6);
        CHECK_CLOSE(eval_values_get(&v, "bpb"), ce * tpb / M_LN2 + 3 * 8 * tpb / ST, 1e-6, 1e-6);
        CHECK_CLOSE(eval_values_get(&v, "ce_zero"), log(SV), 1e-6, 1e-6);
        CHECK_CLOSE(eval_values_get(&v, "ce_shuffle"), shuffle / tokens, 1e-6, 1e-6);
        CHECK_CLOSE(eval_values_get(&v, "ce_unigram"), uni / tokens, 1e-6, 1e-6);
        CHECK_CLOSE(eval_values_get(&v, "gain_zero"), log(SV) - ce, 1e-6, 1e-6);
        CHECK_CLOSE(eval_values_get(&v, "gain_shuffle"), shuffle / tokens - ce, 1e-6, 1e-6);
        CHECK(eval_values_get(&v, "gain_zero_se") < 1e-6, "every row gains the same from its own embedding (float logits): se %g",
              eval_values_get(&v, "gain_zero_se"));
        CHECK(eval_values_get(&v, "gain_shuffle_se") > 0, "rows gain differently from another row's embedding");
        CHECK(eval_values_get(&v, "beats_controls") == 1, "an embedding that carries the row beats every control");
        CHECK(eval_values_get(&v, "rows") == SB * S, "rows %g", eval_values_get(&v, "rows"));
    }
    eval_lm_free(&lm);
    /* a decoder that ignores its embedding: no gain over zero or shuffle, and not counted */
    lm = stub_new(1.0f, 1);
    if ((rc = run_val(data, lm, 0, &v, err, sizeof err)) == 0) {
        CHECK(eval_values_get(&v, "gain_zero") == 0 && eval_values_get(&v, "gain_shuffle") == 0, "no gains");
        CHECK(eval_values_get(&v, "beats_controls") == 0, "an ignored embedding does not count");
    } else CHECK(0, "%s", err);
    eval_lm_free(&lm);
    /* unbounded: only its floats, 32 bits; 8 bits refused with one line */
    lm = stub_new(0.0f, 0);
    if ((rc = run_val(data, lm, 0, &v, err, sizeof err)) == 0) {
        CHECK(eval_values_get(&v, "bits_per_param") == 32, "an unbounded embedding's default: 32 bits");
        CHECK(isnan(eval_values_get(&v, "ce_b4")) && isnan(eval_values_get(&v, "ce_b16")), "no code below 32 bits");
        CHECK_CLOSE(eval_values_get(&v, "ce_b32"), stub_ce(8.0, 1), 1e-6, 1e-6);
    } else CHECK(0, "%s", err);
    err[0] = 0;
    CHECK(run_val(data, lm, 8, &v, err, sizeof err) == EVAL_EARG && strstr(err, "unbounded") && !strchr(err, '\n'),
          "--bits-per-param 8 on an unbounded embedding refused: %s", err);
    eval_lm_free(&lm);
}

int main(void) {
    rng_seed(&R, 24);
    const char *base = getenv("FT_TEST_TMP");
    snprintf(tmpdir, sizeof tmpdir, "%s/test_eval_chunk.%d", base ? base : "/tmp", (int)getpid());
    char cmd[700];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", tmpdir);
    if (system(cmd) != 0) return 1;
    RUN(test_scores_trained_variant);
    RUN(test_val_controls);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_summary();
}
