/* tests/test_engine.c: the batch engine (sampler/engine.h). A request's tokens, latents and
 * the bits of every logit it was sampled from are the same alone and in a batch that others
 * join and leave, for the baseline and the Free Transformer: prompts of different lengths
 * (one of several prefill chunks) and outputs of different lengths, requests arriving
 * mid-batch and waiting for a free row, one ending at end-of-text, a cancelled row, and a
 * shared-latent group whose members arrive at different steps; the latent-thought LM too (its
 * latents inferred from each prompt alone, or drawn from the prior, and a sliding window). The
 * command line's samples (sampler_generate) are the same rows. The same for the baseline at
 * precision bf16 (its decode rows on bf16 weights where the CPU has AVX512-BF16): a request's
 * tokens do not depend on the batch within a precision. */
#include <stdlib.h>
#include <omp.h>
#include <string.h>

#include "common/rng.h"
#include "evaluator/lm.h"
#include "model/device.h"
#include "model/generate.h"
#include "sampler/engine.h"
#include "tests/check.h"
#include "tests/fault_device.h"

#define NREQ 26  /* more than the 16 rows below which products run row by row anyway */
#define ROWS 20
#define MAXPOS 150

/* What a request produced: its ids, latents, and a hash of the bits of its logits. */
typedef struct {
    uint32_t ids[MAXPOS], z[MAXPOS];
    int len, n_z, stopped;
    uint64_t hash;
} out_t;

typedef struct {
    int row_req[64];  /* row -> request being observed (-1: none) */
    out_t *out;
} watch_t;

static void observe(void *ctx, int row, const float *lg, int V) {
    watch_t *w = ctx;
    if (w->row_req[row] < 0) return;
    uint64_t *h = &w->out[w->row_req[row]].hash;
    for (int i = 0; i < V; i++) {
        uint32_t b;
        memcpy(&b, &lg[i], 4);
        *h = (*h ^ b) * 0x100000001B3ull; /* FNV-1a over the bits */
    }
}

static uint32_t prompts[NREQ][MAXPOS];

/* Request k: prompt lengths from 1 to 130 (three chunks of GEN_PREFILL_CHUNK), outputs of
 * 1 to 24 tokens, greedy and sampled, one stopping at end-of-text, three (k = 5, 6, 7) sharing
 * their latents as indices 0, 1 and 2 of one group. */
static engine_req_t request(int k, int eot) { /* eot < 0: request 8 does not stop at eot */
    static const int P[9] = {3, 130, 1, 17, 64, 5, 5, 5, 66};
    static const int M[9] = {12, 9, 15, 1, 6, 10, 13, 7, 11};
    const int p = k < 9 ? P[k] : 1 + (k * 7) % 23, m = k < 9 ? M[k] : 8 + (k * 5) % 17;
    engine_req_t r = {.prompt = prompts[k], .P = p, .max_new = m, .sample = SAMPLE_OPTS_DEFAULT,
                      .seed = 100 + k, .index = (uint64_t)k, .latent = SAMPLER_LATENT_INDEPENDENT,
                      .group = 1};
    if (k == 2) r.sample.temperature = 0.0f;
    if (k == 3) r.sample = (sample_opts_t){0.7f, 20, 0.9f};
    if (k == 8) r.stop_at_eot = eot >= 0, r.sample.temperature = 0.0f; /* main makes eot come early */
    if (k >= 5 && k <= 7) r.seed = 77, r.latent = SAMPLER_LATENT_SHARED, r.group = 3, r.index = k - 5;
    if (k % 4 == 3) r.ltm_prior = 1; /* the latent-thought LM: some from the prior */
    return r;
}

static void collect(engine_t *e, int row, out_t *o) {
    const engine_row_t *w = engine_row(e, row);
    memcpy(o->ids, w->ids, sizeof(uint32_t) * w->len);
    o->len = w->len;
    o->stopped = w->stopped;
    if (w->z) memcpy(o->z, w->z, sizeof(uint32_t) * w->n_z);
    o->n_z = w->z ? w->n_z : 0;
}

/* Request k alone in an engine of its own. */
static void alone(sampler_model_t *sm, int k, int eot, out_t *o) {
    char err[256];
    engine_t *e = NULL;
    memset(o, 0, sizeof *o);
    CHECK(engine_create(&e, sm, 4, MAXPOS, err, sizeof err) == 0, "%s", err);
    if (!e) return;
    watch_t w = {.out = o};
    for (int i = 0; i < 64; i++) w.row_req[i] = -1;
    engine_observe(e, observe, &w);
    engine_req_t r = request(k, eot);
    int row = engine_add(e, &r, err, sizeof err);
    CHECK(row >= 0, "%s", err);
    w.row_req[row] = 0;
    for (int s = 0; s < 200 && engine_row(e, row)->state != ENGINE_DONE; s++)
        CHECK(engine_step(e, err, sizeof err) == 0, "%s", err);
    CHECK(engine_row(e, row)->state == ENGINE_DONE);
    collect(e, row, o);
    engine_destroy(&e);
}

/* All requests through one engine of ROWS rows: they arrive over the first steps (request k
 * at step (k * 3) / 2 % 12), wait for a row when all are busy, and one more request that is
 * cancelled after 3 steps takes a row meanwhile. parallel: on two threads, steps of 2 or more
 * rows in parallel (engine_set_parallel_rows: the products, attention and the picks), without
 * the logits' observer (whose presence keeps the picks on one thread). */
static void batched(sampler_model_t *sm, int eot, out_t *out, int parallel) {
    char err[256];
    engine_t *e = NULL;
    const int threads = omp_get_max_threads();
    if (parallel) omp_set_num_threads(2);
    CHECK(engine_create(&e, sm, ROWS, MAXPOS, err, sizeof err) == 0, "%s", err);
    if (!e) return;
    memset(out, 0, sizeof(out_t) * NREQ);
    watch_t w = {.out = out};
    for (int i = 0; i < 64; i++) w.row_req[i] = -1;
    if (parallel) engine_set_parallel_rows(e, 2);
    else engine_observe(e, observe, &w);
    int next = 0, done = 0, victim = -1, max_active = 0;
    for (int s = 0; s < 400 && done < NREQ; s++) {
        if (s == 1) { /* a request that leaves before it is finished */
            engine_req_t r = request(1, eot);
            r.seed = 999;
            victim = engine_add(e, &r, err, sizeof err);
            CHECK(victim >= 0, "%s", err);
        }
        if (s == 4 && victim >= 0) {
            CHECK(engine_row(e, victim)->state != ENGINE_DONE);
            engine_release(e, victim);
            victim = -1;
        }
        while (next < NREQ && (next * 3) / 2 % 12 <= s && engine_free_rows(e) > 0) {
            engine_req_t r = request(next, eot);
            int row = engine_add(e, &r, err, sizeof err);
            CHECK(row >= 0, "%s", err);
            if (row < 0) return;
            w.row_req[row] = next++;
        }
        if (engine_active(e) > max_active) max_active = engine_active(e);
        CHECK(engine_step(e, err, sizeof err) == 0, "%s", err);
        for (int row = 0; row < ROWS; row++)
            if (w.row_req[row] >= 0 && engine_row(e, row)->state == ENGINE_DONE) {
                collect(e, row, &out[w.row_req[row]]);
                w.row_req[row] = -1;
                engine_release(e, row);
                done++;
            }
    }
    CHECK(done == NREQ, "%d of %d requests finished", done, NREQ);
    CHECK(max_active == ROWS, "the batch was full at some step (max %d rows)", max_active);
    engine_destroy(&e);
    omp_set_num_threads(threads);
}

static void compare(sampler_model_t *sm, const char *family) {
    const model_config_t *c = sampler_model_config(sm);
    out_t solo[NREQ], batch[NREQ], par[NREQ];
    for (int k = 0; k < NREQ; k++) alone(sm, k, c->eot_id, &solo[k]);
    batched(sm, c->eot_id, batch, 0);
    batched(sm, c->eot_id, par, 1);
    for (int k = 0; k < NREQ; k++) {
        CHECK(solo[k].len == par[k].len && solo[k].stopped == par[k].stopped &&
              !memcmp(solo[k].ids, par[k].ids, sizeof(uint32_t) * solo[k].len) &&
              solo[k].n_z == par[k].n_z && !memcmp(solo[k].z, par[k].z, sizeof(uint32_t) * solo[k].n_z),
              "%s request %d: the batch on two threads differs from the request alone", family, k);
        CHECK(solo[k].len == batch[k].len && solo[k].stopped == batch[k].stopped, "%s request %d: %d/%d tokens alone, %d/%d in the batch",
              family, k, solo[k].len, solo[k].stopped, batch[k].len, batch[k].stopped);
        CHECK(!memcmp(solo[k].ids, batch[k].ids, sizeof(uint32_t) * solo[k].len), "%s request %d: ids differ", family, k);
        CHECK(solo[k].n_z == batch[k].n_z && !memcmp(solo[k].z, batch[k].z, sizeof(uint32_t) * solo[k].n_z),
              "%s request %d: latents differ", family, k);
        CHECK(solo[k].hash == batch[k].hash && solo[k].hash != 0, "%s request %d: the logits' bits differ", family, k);
    }
    CHECK(solo[8].stopped, "%s: request 8 ends at end-of-text (after %d tokens)", family, solo[8].len);
    if (c->kind == MODEL_FREE) {
        /* the group's members draw the same latents at every generated position they share */
        int P = 5, n = solo[7].n_z < solo[6].n_z ? solo[7].n_z : solo[6].n_z;
        CHECK(n > P && !memcmp(solo[5].z, solo[6].z, sizeof(uint32_t) * n) &&
              !memcmp(solo[6].z, solo[7].z, sizeof(uint32_t) * n), "shared group: latents differ");
        CHECK(memcmp(solo[5].ids, solo[6].ids, sizeof(uint32_t) * 7) != 0, "shared group: tokens drawn apart");
        CHECK(memcmp(solo[0].z + 3, solo[5].z + 5, sizeof(uint32_t) * 6) != 0, "independent latents differ");
    }
}

/* sampler_generate's sample i is row `index = i` of the engine: the command line's text is
 * the service's. */
static void cli_is_engine(sampler_model_t *sm) {
    const model_config_t *c = sampler_model_config(sm);
    char err[256];
    sampler_opts_t o = {.n = 20, .max_new = 9, .sample = SAMPLE_OPTS_DEFAULT, .seed = 77,
                        .latent = c->kind == MODEL_FREE ? SAMPLER_LATENT_SHARED : SAMPLER_LATENT_INDEPENDENT,
                        .group = 3, .stop_at_eot = 1};
    sampler_result_t res;
    CHECK(sampler_generate(sm, prompts[5], 5, &o, &res, err, sizeof err) == 0, "%s", err);
    for (int i = 0; i < 20; i += 7) {
        engine_req_t r = {.prompt = prompts[5], .P = 5, .max_new = 9, .sample = o.sample, .seed = 77,
                          .index = (uint64_t)i, .latent = o.latent, .group = 3, .stop_at_eot = 1};
        engine_t *e = NULL;
        CHECK(engine_create(&e, sm, 1, 20, err, sizeof err) == 0, "%s", err);
        int row = engine_add(e, &r, err, sizeof err);
        while (row >= 0 && engine_row(e, row)->state != ENGINE_DONE) engine_step(e, err, sizeof err);
        const engine_row_t *w = engine_row(e, row);
        CHECK(w->len == res.len[i] && !memcmp(w->ids, res.ids + (size_t)i * 9, sizeof(uint32_t) * w->len),
              "sample %d of sampler_generate differs from the engine's row", i);
        if (res.z) CHECK(!memcmp(w->z, res.z + (size_t)i * res.z_stride, sizeof(uint32_t) * w->n_z));
        engine_destroy(&e);
    }
    sampler_result_free(&res);
}

static void refusals(sampler_model_t *sm) {
    char err[256];
    engine_t *e = NULL;
    CHECK(engine_create(&e, sm, 2, 20, err, sizeof err) == 0, "%s", err);
    engine_req_t r = request(0, 0);
    r.P = 18;
    CHECK(engine_add(e, &r, err, sizeof err) == SAMPLER_EMISMATCH && strstr(err, "20 positions"), "%s", err);
    r = request(0, 0);
    uint32_t bad = 5000;
    r.prompt = &bad, r.P = 1;
    CHECK(engine_add(e, &r, err, sizeof err) == SAMPLER_EMISMATCH && strstr(err, "vocabulary"), "%s", err);
    r = request(0, 0);
    r.sample.top_p = 0;
    CHECK(engine_add(e, &r, err, sizeof err) == SAMPLER_EARG);
    r = request(0, 0);
    CHECK(engine_add(e, &r, err, sizeof err) >= 0 && engine_add(e, &r, err, sizeof err) >= 0);
    CHECK(engine_add(e, &r, err, sizeof err) == SAMPLER_EARG && strstr(err, "rows"), "%s", err);
    CHECK(engine_free_rows(e) == 0 && engine_active(e) == 2);
    engine_release(e, 0);
    CHECK(engine_free_rows(e) == 1 && engine_active(e) == 1);
    CHECK(engine_create(&e, sm, 2, 5000, err, sizeof err) == SAMPLER_EARG && strstr(err, "max_seq"), "%s", err);
    engine_destroy(&e);
    CHECK(e == NULL);
}

/* The evaluator's generation path is the sampler's: its gen_start (several prompts at once,
 * each prefilled alone with the same cut) gives the logits the engine samples a request's first
 * token from, and its gen_next (a decode chunk of those rows) the logits of the next ones, bit
 * for bit, for a model of the same weights. Greedy requests, so the evaluator can feed the
 * engine's tokens; the Free Transformer's uniforms and latents drawn from the request's
 * stream as the engine draws them. */
typedef struct {
    float *lg;      /* (rows, steps, V) every logit row the engine sampled from */
    int steps, V, n[8];
} record_t;
static void record(void *ctx, int row, const float *logits, int V) {
    record_t *r = ctx;
    if (row < 8 && r->n[row] < r->steps) memcpy(r->lg + ((size_t)row * r->steps + r->n[row]++) * V, logits, sizeof(float) * V);
}

static void evaluator_is_engine(device_t *dev, const model_config_t *c) {
    enum { B = 3, P = 70, STEPS = 5 };   /* a prompt of two prefill chunks */
    char err[256];
    sampler_model_t *sm = NULL;
    eval_lm_t *lm = NULL;
    engine_t *e = NULL;
    CHECK(sampler_model_create(&sm, dev, c, 3, err, sizeof err) == 0, "%s", err);
    CHECK(eval_lm_create(&lm, dev, c, 4, MAXPOS, 3, err, sizeof err) == 0, "%s", err);
    CHECK(sm && lm && engine_create(&e, sm, B, MAXPOS, err, sizeof err) == 0, "%s", err);
    if (!e) goto out;
    const int V = c->vocab_size, H = c->kind == MODEL_FREE ? c->latent_bits : 0;
    record_t rec = {.lg = malloc(sizeof(float) * B * STEPS * V), .steps = STEPS, .V = V};
    engine_observe(e, record, &rec);
    uint32_t prompt[B * P], tok[B], z[B];
    float *u = H ? malloc(sizeof(float) * B * P * H) : NULL;
    rng_t lat[B];
    for (int b = 0; b < B; b++) {
        memcpy(prompt + b * P, prompts[b + 1], sizeof(uint32_t) * P);
        engine_req_t r = {.prompt = prompt + b * P, .P = P, .max_new = STEPS, .sample = {0.0f, 0, 1.0f},
                          .seed = 5, .index = (uint64_t)b, .latent = SAMPLER_LATENT_INDEPENDENT, .group = 1};
        CHECK(engine_add(e, &r, err, sizeof err) == b, "%s", err);
        rng_seed2(&lat[b], 5 ^ SAMPLER_LATENT_SALT, (uint64_t)b);
        for (int j = 0; H && j < P * H; j++) u[(size_t)b * P * H + j] = rng_f32(&lat[b]);
    }
    while (engine_active(e)) CHECK(engine_step(e, err, sizeof err) == 0, "%s", err);
    const float *lg = lm->gen_start(lm, prompt, B, P, u, err, sizeof err);
    int same = lg != NULL;
    for (int s = 0; lg && s < STEPS; s++) {
        for (int b = 0; b < B; b++) {
            same &= !memcmp(lg + (size_t)b * V, rec.lg + ((size_t)b * STEPS + s) * V, sizeof(float) * V);
            tok[b] = engine_row(e, b)->ids[s];
            if (H) z[b] = (uint32_t)rng_below(&lat[b], 1u << H);
        }
        if (s + 1 < STEPS) lg = lm->gen_next(lm, tok, H ? z : NULL, B, err, sizeof err);
    }
    CHECK(same, "%s: the evaluator's logits differ from the engine's (%s)", c->kind == MODEL_FREE ? "free" : "llama", err);
    free(rec.lg);
    free(u);
out:
    engine_destroy(&e);
    eval_lm_free(&lm);
    sampler_model_free(&sm);
}

/* A step whose device runs out of memory (the prompt's prefill, the LTM's latents, a decode
 * chunk) is SAMPLER_ENOMEM, another fault SAMPLER_EMODEL (the evaluator's code task tells the
 * first from a damaged checkpoint by it); with the fault gone the row finishes. */
static void nomem_travels(const model_config_t *c, const char *name) {
    char err[256];
    sampler_model_t *sm = NULL;
    engine_t *e = NULL;
    fault_rc = 0;
    CHECK(sampler_model_create(&sm, fault_device(), c, 3, err, sizeof err) == 0, "%s: %s", name, err);
    if (!sm || engine_create(&e, sm, 2, 40, err, sizeof err)) {
        CHECK(0, "%s: %s", name, err);
        sampler_model_free(&sm);
        return;
    }
    engine_req_t r = request(3, -1);
    r.P = 17, r.max_new = 4;
    int row = engine_add(e, &r, err, sizeof err);
    CHECK(row >= 0, "%s: %s", name, err);
    for (int phase = 0; phase < 2 && row >= 0; phase++) { /* 0: the prompt, 1: a decode chunk */
        for (int k = 0; k < 2; k++) {
            fault_rc = k ? DEVICE_EFAULT : DEVICE_ENOMEM;
            err[0] = 0;
            const int rc = engine_step(e, err, sizeof err), want = k ? SAMPLER_EMODEL : SAMPLER_ENOMEM;
            CHECK(rc == want && err[0], "%s, %s, %s: rc %d, want %d: %s", name, phase ? "decoding" : "the prompt",
                  k ? "a fault" : "out of memory", rc, want, err);
        }
        fault_rc = 0;
        CHECK(engine_step(e, err, sizeof err) == 0, "%s: after the faults: %s", name, err);
    }
    while (row >= 0 && engine_row(e, row)->state != ENGINE_DONE) CHECK(engine_step(e, err, sizeof err) == 0, "%s", err);
    engine_destroy(&e);
    sampler_model_free(&sm);
}

int main(void) {
    char err[256];
    rng_t r;
    rng_seed(&r, 11);
    for (int k = 0; k < NREQ; k++)
        for (int i = 0; i < MAXPOS; i++) prompts[k][i] = (uint32_t)rng_below(&r, 257);
    for (int k = 6; k <= 7; k++) memcpy(prompts[k], prompts[5], sizeof prompts[5]); /* one group, one prompt */
    model_config_t c = {.kind = MODEL_LLAMA, .vocab_size = 257, .d_model = 32, .n_layers = 2,
                        .n_heads = 4, .n_kv_heads = 2, .d_ff = 48, .max_seq = MAXPOS,
                        .rope_theta = 10000.0f, .norm_eps = 1e-5f, .tied = 1, .eot_id = 256,
                        .latent_bits = 4, .kappa_nats = 0.1f, .latent_vectors = 5, .inner_steps = 2,
                        .fast_lr = 0.3f, .fast_lr_end = 0.3f, .fast_lr_steps = 1};
    static const char *names[3] = {"llama", "free", "ltm"};
    for (int fam = 0; fam < 3; fam++) {
        c.kind = fam == 2 ? MODEL_LTM : fam ? MODEL_FREE : MODEL_LLAMA;
        c.n_layers = fam == 1 ? 4 : 2;
        c.sliding_window = fam == 2 ? 24 : 0; /* the LTM with its window, across prefill chunks */
        sampler_model_t *sm = NULL;
        if (sampler_model_create(&sm, NULL, &c, 3, err, sizeof err)) {
            fprintf(stderr, "setup: %s\n", err);
            return 1;
        }
        /* the end-of-text id: request 8's 5th greedy token, so that it stops early */
        out_t probe;
        alone(sm, 8, -1, &probe);
        c.eot_id = (int)probe.ids[4];
        sampler_model_free(&sm);
        if (sampler_model_create(&sm, NULL, &c, 3, err, sizeof err)) {
            fprintf(stderr, "setup: %s\n", err);
            return 1;
        }
        const char *name = names[fam];
        int f0 = check_failed_;
        compare(sm, name);
        cli_is_engine(sm);
        refusals(sm);
        if (fam < 2) evaluator_is_engine(NULL, &c); /* the LTM's evaluator infers z on streams of its own */
        nomem_travels(&c, name);
        fprintf(stderr, "%s %s\n", check_failed_ == f0 ? "ok  " : "FAIL", name);
        sampler_model_free(&sm);
    }
    /* the baseline at bf16 (one family: the decode rows are the same op for all) */
    device_t *bf16 = NULL;
    c.kind = MODEL_LLAMA, c.n_layers = 2, c.sliding_window = 0;
    if (device_open(&bf16, "cpu", PRECISION_BF16, err, sizeof err)) {
        CHECK(0, "bf16 device: %s", err);
        return check_summary();
    }
    sampler_model_t *sm = NULL;
    CHECK(sampler_model_create(&sm, bf16, &c, 3, err, sizeof err) == 0, "%s", err);
    if (sm) { /* the end-of-text id as above, from this model's greedy tokens */
        out_t probe;
        alone(sm, 8, -1, &probe);
        c.eot_id = (int)probe.ids[4];
        sampler_model_free(&sm);
        CHECK(sampler_model_create(&sm, bf16, &c, 3, err, sizeof err) == 0, "%s", err);
    }
    if (sm) {
        int f0 = check_failed_;
        compare(sm, "llama bf16");
        evaluator_is_engine(bf16, &c);
        fprintf(stderr, "%s llama bf16\n", check_failed_ == f0 ? "ok  " : "FAIL");
        sampler_model_free(&sm);
    }
    device_close(&bf16);
    return check_summary();
}
