/* sampler/engine.c: rows joining and leaving one decode batch (see engine.h). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errmsg.h"
#include "common/rng.h"
#include "sampler/model_impl.h"

typedef struct {
    engine_row_t pub;
    uint64_t seq;          /* arrival order: prompts are prefilled oldest first */
    uint32_t *prompt;      /* (max_pos) */
    uint32_t *ids;         /* (max_pos) generated */
    uint32_t *z;           /* (max_pos) latent indices (Free Transformer) */
    rng_t tokens, latents; /* the row's streams (engine.h) */
    engine_req_t req;      /* as added (req.prompt: the row's copy) */
    uint32_t next;         /* the token the next decode chunk feeds */
} row_t;

struct engine {
    sampler_model_t *sm;
    gen_t *gen;            /* the baseline's generator, or the Free Transformer's decoder */
    gen_free_t *genf;      /* the Free Transformer's generator (NULL for the baseline) */
    gen_ltm_t *genl;       /* the latent-thought LM's generator */
    int max_batch, max_pos, V, H, eot;
    uint32_t K;            /* 2^H latent values */
    row_t *rows;
    uint32_t *row_mem;     /* the rows' prompt, ids and z arrays */
    float *u;              /* (max_pos, H) a prompt's uniforms */
    int *slots;            /* (max_batch) the decode chunk's rows */
    uint32_t *tok, *zt;    /* (max_batch) its tokens and latents */
    sample_t **smp;        /* (nsmp) a sampler's scratch per thread */
    int nsmp;
    uint32_t *pick;        /* (max_batch) the step's picked ids */
    uint64_t seq;
    size_t enc_bytes;
    engine_observe_fn observe;
    void *observe_ctx;      /* the encoder activations this engine asked the model for */
};

void engine_destroy(engine_t **pe) {
    if (!pe || !*pe) return;
    engine_t *e = *pe;
    if (e->gen || e->genf || e->genl) e->sm->engines--;
    if (e->genf) gen_free_destroy(&e->genf);
    else if (e->genl) gen_ltm_destroy(&e->genl);
    else gen_destroy(&e->gen);
    for (int t = 0; e->smp && t < e->nsmp; t++) sample_destroy(&e->smp[t]);
    free(e->smp);
    free(e->pick);
    free(e->rows);
    free(e->row_mem);
    free(e->u);
    free(e->slots);
    free(e->tok);
    free(e->zt);
    free(e);
    *pe = NULL;
}

int engine_create(engine_t **pe, sampler_model_t *sm, int max_batch, int max_pos, char *err,
                  size_t errlen) {
    *pe = NULL;
    const model_config_t *c = &sm->cfg;
    if (sm->mixer)
        return err_fail(err, errlen, SAMPLER_EARG, "a masked mixer cannot decode in this batch: its "
                        "generator keeps one position for all its sequences (sampler/run_mixer.c)");
    if (max_batch < 1 || max_pos < 2 || max_pos > c->max_seq)
        return err_fail(err, errlen, SAMPLER_EARG, "engine of %d rows x %d positions: want >= 1 rows "
                        "and 2..%d positions (the model's max_seq)", max_batch, max_pos, c->max_seq);
    model_memory_t before = {0}, after = {0};
    if (sm->free) free_memory(sm->free, &before);
    if (sm->ltm) ltm_memory(sm->ltm, &before);
    int rc = sampler_model_reserve(sm, max_pos, err, errlen);
    if (rc) return rc;
    if (sm->free) free_memory(sm->free, &after);
    if (sm->ltm) ltm_memory(sm->ltm, &after);
    engine_t *e = calloc(1, sizeof *e);
    if (!e) return err_fail(err, errlen, SAMPLER_ENOMEM, "out of memory");
    e->sm = sm;
    e->max_batch = max_batch;
    e->max_pos = max_pos;
    e->V = c->vocab_size;
    e->H = c->kind == MODEL_FREE ? c->latent_bits : 0;
    e->K = e->H ? 1u << e->H : 0;
    e->eot = c->eot_id;
    e->enc_bytes = after.activations > before.activations ? after.activations : 0;
    /* a decode chunk holds max_batch rows; a prefill chunk GEN_PREFILL_CHUNK positions, or a
     * whole prompt for the Free Transformer's encoder */
    const int chunk = sm->free ? max_pos : (GEN_PREFILL_CHUNK < max_pos ? GEN_PREFILL_CHUNK : max_pos);
    const int rows = max_batch > chunk ? max_batch : chunk;
    rc = sm->free  ? gen_free_create_rows(&e->genf, sm->free, max_batch, max_pos, rows, err, errlen)
         : sm->ltm ? gen_ltm_create_rows(&e->genl, sm->ltm, max_batch, max_pos, rows, err, errlen)
                   : gen_create_rows(&e->gen, sm->llama, max_batch, max_pos, rows, err, errlen);
    if (rc) {
        free(e);
        return rc == LLAMA_ENOMEM ? SAMPLER_ENOMEM : SAMPLER_EARG;
    }
    sm->engines++;
    if (e->genf) e->gen = gen_free_decoder(e->genf);
    if (e->genl) e->gen = gen_ltm_decoder(e->genl);
    e->rows = calloc(max_batch, sizeof *e->rows);
    e->row_mem = malloc(sizeof(uint32_t) * 3 * (size_t)max_batch * max_pos);
    e->u = e->H ? malloc(sizeof(float) * (size_t)max_pos * e->H) : NULL;
    e->slots = malloc(sizeof(int) * max_batch);
    e->tok = malloc(sizeof(uint32_t) * max_batch);
    e->zt = malloc(sizeof(uint32_t) * max_batch);
    e->pick = malloc(sizeof(uint32_t) * max_batch);
    e->nsmp = omp_get_max_threads() > 1 ? omp_get_max_threads() : 1;
    e->smp = calloc(e->nsmp, sizeof *e->smp);
    int smp_rc = !e->smp;
    for (int t = 0; !smp_rc && t < e->nsmp; t++) smp_rc = sample_create(&e->smp[t], e->V, err, errlen);
    if (!e->rows || !e->row_mem || (e->H && !e->u) || !e->slots || !e->tok || !e->zt || !e->pick || smp_rc) {
        engine_destroy(&e);
        return err_fail(err, errlen, SAMPLER_ENOMEM, "out of memory for an engine of %d rows x %d "
                        "positions", max_batch, max_pos);
    }
    for (int i = 0; i < max_batch; i++) {
        uint32_t *m = e->row_mem + (size_t)3 * i * max_pos;
        e->rows[i].prompt = m;
        e->rows[i].ids = m + max_pos;
        e->rows[i].z = m + 2 * (size_t)max_pos;
    }
    *pe = e;
    return 0;
}

void engine_observe(engine_t *e, engine_observe_fn fn, void *ctx) {
    e->observe = fn;
    e->observe_ctx = ctx;
}

void engine_set_parallel_rows(engine_t *e, int rows) { gen_set_parallel_rows(e->gen, rows); }

int engine_max_batch(const engine_t *e) { return e->max_batch; }
int engine_max_pos(const engine_t *e) { return e->max_pos; }
size_t engine_cache_bytes(const engine_t *e) { return gen_cache_bytes(e->gen); }
size_t engine_bytes(const engine_t *e) {
    return (e->genf ? gen_free_bytes(e->genf) : e->genl ? gen_ltm_bytes(e->genl) : gen_bytes(e->gen)) +
           e->enc_bytes;
}

const engine_row_t *engine_row(const engine_t *e, int i) {
    return i >= 0 && i < e->max_batch ? &e->rows[i].pub : NULL;
}

int engine_active(const engine_t *e) {
    int n = 0;
    for (int i = 0; i < e->max_batch; i++)
        n += e->rows[i].pub.state == ENGINE_PREFILL || e->rows[i].pub.state == ENGINE_DECODE;
    return n;
}

int engine_free_rows(const engine_t *e) {
    int n = 0;
    for (int i = 0; i < e->max_batch; i++) n += e->rows[i].pub.state == ENGINE_FREE;
    return n;
}

void engine_release(engine_t *e, int i) {
    if (i < 0 || i >= e->max_batch) return;
    memset(&e->rows[i].pub, 0, sizeof e->rows[i].pub);
    gen_reset_slot(e->gen, i);
}

int engine_add(engine_t *e, const engine_req_t *r, char *err, size_t errlen) {
    const model_config_t *c = &e->sm->cfg;
    if (!r->prompt || r->P < 1)
        return err_fail(err, errlen, SAMPLER_EARG, "the prompt is empty (it needs at least one token)");
    if (r->max_new < 1) return err_fail(err, errlen, SAMPLER_EARG, "max-new %d must be >= 1", r->max_new);
    if (r->group < 1) return err_fail(err, errlen, SAMPLER_EARG, "group %d must be >= 1", r->group);
    if (r->latent != SAMPLER_LATENT_INDEPENDENT && r->latent != SAMPLER_LATENT_SHARED)
        return err_fail(err, errlen, SAMPLER_EARG, "latent mode %d is neither independent nor shared",
                        (int)r->latent);
    if (sample_opts_check(&r->sample, err, errlen)) return SAMPLER_EARG;
    for (int i = 0; i < r->P; i++)
        if (r->prompt[i] >= (uint32_t)e->V)
            return err_fail(err, errlen, SAMPLER_EMISMATCH, "prompt token %u at position %d is outside "
                            "the model's vocabulary of %d", r->prompt[i], i, e->V);
    if ((long)r->P + r->max_new > c->max_seq)
        return err_fail(err, errlen, SAMPLER_EMISMATCH, "prompt of %d tokens + max-new %d exceed the "
                        "model's max_seq %d", r->P, r->max_new, c->max_seq);
    if ((long)r->P + r->max_new > e->max_pos)
        return err_fail(err, errlen, SAMPLER_EMISMATCH, "prompt of %d tokens + max-new %d exceed the "
                        "%d positions of a row", r->P, r->max_new, e->max_pos);
    int i = 0;
    while (i < e->max_batch && e->rows[i].pub.state != ENGINE_FREE) i++;
    if (i == e->max_batch) return err_fail(err, errlen, SAMPLER_EARG, "all %d rows are in use", e->max_batch);
    row_t *w = &e->rows[i];
    memcpy(w->prompt, r->prompt, sizeof(uint32_t) * r->P);
    rng_seed2(&w->tokens, r->seed ^ SAMPLER_TOKEN_SALT, r->index);
    const uint64_t key = r->latent == SAMPLER_LATENT_SHARED ? (1ull << 32) + r->index / (uint64_t)r->group
                                                            : r->index;
    rng_seed2(&w->latents, r->seed ^ SAMPLER_LATENT_SALT, key);
    w->req = *r;
    w->req.prompt = w->prompt;
    w->seq = e->seq++;
    w->pub = (engine_row_t){.state = ENGINE_PREFILL, .P = r->P, .max_new = r->max_new,
                            .ids = w->ids, .z = e->H ? w->z : NULL};
    gen_reset_slot(e->gen, i);
    return i;
}

/* Row w's next token id: appended, or the end of the row. */
static void append(engine_t *e, row_t *w, uint32_t id) {
    if (w->req.stop_at_eot && id == (uint32_t)e->eot) {
        w->pub.stopped = 1;
        w->pub.state = ENGINE_DONE;
        return;
    }
    w->ids[w->pub.len++] = id;
    w->pub.grew = 1;
    w->next = id;
    w->pub.state = w->pub.len == w->pub.max_new ? ENGINE_DONE : ENGINE_DECODE;
}

/* Picks row w's next token from its logits lg (V) on the row's own stream. */
static void take(engine_t *e, row_t *w, const float *lg) {
    if (e->observe) e->observe(e->observe_ctx, (int)(w - e->rows), lg, e->V);
    append(e, w, sample_pick(e->smp[0], lg, &w->req.sample, &w->tokens));
}

/* The oldest row waiting for its prompt, or -1. */
static int oldest_prefill(const engine_t *e) {
    int best = -1;
    for (int i = 0; i < e->max_batch; i++)
        if (e->rows[i].pub.state == ENGINE_PREFILL && (best < 0 || e->rows[i].seq < e->rows[best].seq))
            best = i;
    return best;
}

/* A family's failed step as the engine's status: its lack of memory (LLAMA_ENOMEM, which the
 * generators, the Free Transformer's and the LTM's share; a device fault for lack of memory
 * among them) SAMPLER_ENOMEM, so that a caller (the evaluator's code task) tells it from a
 * model that failed; anything else SAMPLER_EMODEL. */
static int model_rc(int rc) {
    _Static_assert((int)LLAMA_ENOMEM == (int)LTM_ENOMEM && (int)LLAMA_ENOMEM == (int)FREE_ENOMEM, "one out-of-memory code");
    return rc == LLAMA_ENOMEM ? SAMPLER_ENOMEM : SAMPLER_EMODEL;
}

/* The latent-thought LM: row i's latents into its slot, before its prompt (sampler.h): the
 * posterior inferred from the row's prompt alone, or the prior, on the sample's own streams. */
static int ltm_latents(engine_t *e, int i, char *err, size_t errlen) {
    row_t *w = &e->rows[i];
    ltm_t *m = e->sm->ltm;
    const model_config_t *c = &e->sm->cfg;
    const engine_req_t *r = &w->req;
    const int P = w->pub.P, prior = r->ltm_prior || P < 2;
    const uint64_t key = rng_counter_key(r->seed ^ SAMPLER_LATENT_SALT, 3);
    int rc = ltm_set_shape(m, 1, prior ? 1 : P - 1, err, errlen);
    if (rc) return model_rc(rc);
    if (prior) {
        ltm_prior(m, key, r->index);
    } else {
        ltm_infer_t inf = {.steps = r->inner_steps > 0 ? r->inner_steps : c->inner_steps,
                           .lr = r->fast_lr > 0 ? r->fast_lr : c->fast_lr_end, .key = key, .row0 = r->index};
        if ((rc = ltm_infer(m, w->prompt, w->prompt + 1, NULL, &inf, NULL, NULL, err, errlen))) return model_rc(rc);
    }
    return (rc = gen_ltm_set_latents(e->genl, &i, 1, err, errlen)) ? model_rc(rc) : 0;
}

/* One prefill chunk of row i: the prompt's next chunk (the baseline), or all of it with the
 * encoder (the Free Transformer). Returns the prompt positions it ran, or a negative code. */
static int prefill_chunk(engine_t *e, int i, char *err, size_t errlen) {
    row_t *w = &e->rows[i];
    const int P = w->pub.P;
    if (e->genf) {
        for (int j = 0; j < P * e->H; j++) e->u[j] = rng_f32(&w->latents);
        const int rc = gen_free_step_slots(e->genf, &i, w->prompt, 1, P, NULL, e->u, NULL, err, errlen);
        if (rc) return model_rc(rc);
        memcpy(w->z, gen_free_z(e->genf), sizeof(uint32_t) * P);
        w->pub.n_z = P;
        take(e, w, gen_logits(e->gen));
        return P;
    }
    const int pos = gen_slot_pos(e->gen, i);
    int rc;
    if (e->genl && pos == 0 && (rc = ltm_latents(e, i, err, errlen))) return rc;
    const int left = gen_prefill_next(e->gen, i, w->prompt, P, err, errlen);
    if (left < 0) return model_rc(left);
    if (left == 0) take(e, w, gen_logits(e->gen));
    return P - left - pos;
}

int engine_step(engine_t *e, char *err, size_t errlen) {
    int nd = 0;
    for (int i = 0; i < e->max_batch; i++) {
        row_t *w = &e->rows[i];
        w->pub.grew = 0;
        if (w->pub.state == ENGINE_DECODE) e->slots[nd++] = i; /* rows decoding before this step */
    }
    // prefill: the oldest waiting prompts, one chunk each, about one chunk's positions a step
    for (int budget = GEN_PREFILL_CHUNK, i; budget > 0 && (i = oldest_prefill(e)) >= 0;) {
        int ran = prefill_chunk(e, i, err, errlen);
        if (ran < 0) return ran;
        budget -= ran;
        if (e->rows[i].pub.state == ENGINE_PREFILL) break; /* its next chunk waits for the next step */
    }
    if (!nd) return 0;
    // decode: one new token for every row, each at its own position
    for (int b = 0; b < nd; b++) {
        row_t *w = &e->rows[e->slots[b]];
        e->tok[b] = w->next;
        if (e->H) w->z[w->pub.n_z++] = e->zt[b] = (uint32_t)rng_below(&w->latents, e->K);
    }
    int rc;
    if (e->genf) {
        rc = gen_free_step_slots(e->genf, e->slots, e->tok, nd, 1, e->zt, NULL, NULL, err, errlen);
    } else if (!(rc = gen_begin_slots(e->gen, e->slots, e->tok, nd, 1, err, errlen))) {
        gen_blocks(e->gen, 0, e->sm->cfg.n_layers, NULL);
        rc = gen_finish(e->gen, NULL, err, errlen);
    }
    if (rc) return model_rc(rc);
    const float *lg = gen_logits(e->gen);
    if (!e->observe && e->nsmp > 1 && !gen_threads(e->gen, nd)) {
        /* a step that ran in parallel (gen_threads): its picks too (a fifth of a 32-row step
         * on one thread), each on its row's own stream, so a row picks the same id on any
         * thread; then appended in order */
#pragma omp parallel for schedule(dynamic, 2) num_threads(e->nsmp)
        for (int b = 0; b < nd; b++) {
            row_t *w = &e->rows[e->slots[b]];
            e->pick[b] = sample_pick(e->smp[omp_get_thread_num()], lg + (size_t)b * e->V, &w->req.sample, &w->tokens);
        }
        for (int b = 0; b < nd; b++) append(e, &e->rows[e->slots[b]], e->pick[b]);
        return 0;
    }
    for (int b = 0; b < nd; b++) take(e, &e->rows[e->slots[b]], lg + (size_t)b * e->V);
    return 0;
}
