/* trainer/train.c: the training loop (see train.h). */
#include "common/errmsg.h"
#include "trainer/train.h"

#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "bus/bus.h"
#include "common/errmsg.h"
#include "common/progress.h"
#include "loader/batch.h"
#include "loader/client.h"
#include "model/gemm.h"
#include "model/cpu_isa.h"
#include "model/adamw.h"
#include "model/checkpoint.h"
#include "model/family.h"
#include "model/schedule.h"
#include "trainer/data.h"

typedef struct {
    const trainer_opts_t *o;
    void *zctx, *pub;
    trainer_data_t *data;
    const model_family_t *fam;
    void *model;
    model_config_t cfg;
    adamw_t *opt;
    device_t *dev;              /* where the model trains */
    schedule_t sched;
    int np;
    tensor_view_t *params, *grads, *mom1, *mom2;
    char run_dir[1024], last_ckpt[4096];
    long long step;          /* optimizer steps done */
    long long saved_step;    /* step of the newest checkpoint written or loaded, -1: none */
    double tokens_seen;
    uint64_t start_epoch, start_dstep; /* the data cursor to start from (a checkpoint's) */
    loader_identity_t data_id;  /* the run's dataset: recorded in state.json, checked on resume */
    int have_data_id;           /* a resumed checkpoint recorded it (older ones did not) */
    uint32_t *inputs, *targets; /* (B,T) each, cut from the loader's (B,T+1) rows */
    /* test hooks (README, "Fault injection"): $FT_TRAINER_FAULT_NAN_STEP makes that step's
     * loss NaN; $FT_TRAINER_FAULT_KILL_AFTER_CKPT=S raises SIGKILL once checkpoint S is
     * complete, so a test kills at an exact point instead of racing a poll */
    long long fault_nan_step, fault_kill_ckpt;
} run_t;

static double unix_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- checkpoints ------------------------------------------------------------------------ */

/* What a resumed run must agree on with the run that wrote the checkpoint, beside the model
 * config: otherwise the data cursor would point into another sequence of batches. */
/* What the run computed on: a resume on other hardware or another kernel level continues the
 * run correctly but not bit-identically (docs/DEVICES.md), so it is recorded and compared. */
static json_t *compute_json(const run_t *r) {
    return json_pack("{s:s, s:s, s:s, s:i}", "device", r->dev->kind == DEVICE_CUDA ? "cuda" : "cpu",
                     "precision", precision_name(r->dev->precision), "cpu_isa", cpu_isa_name(cpu_isa()),
                     "threads", r->dev->threads);
}

static void compare_compute(const run_t *r, json_t *st, const char *dir) {
    json_t *was = json_object_get(st, "compute"), *now = compute_json(r);
    if (!now) return;
    if (json_is_object(was) && !json_equal(was, now)) {
        char *a = json_dumps(was, JSON_COMPACT | JSON_SORT_KEYS), *b = json_dumps(now, JSON_COMPACT | JSON_SORT_KEYS);
        fprintf(stderr, "trainer: %s was computed with %s, this run with %s: the continuation is correct but not "
                "bit-identical to an uninterrupted run\n", dir, a ? a : "?", b ? b : "?");
        free(a);
        free(b);
    }
    json_decref(now);
}

static json_t *state_json(const run_t *r) {
    const trainer_opts_t *o = r->o;
    const loader_identity_t *d = &r->data_id;
    uint64_t epoch, dstep;
    trainer_data_cursor(r->data, &epoch, &dstep);
    json_t *st = json_pack("{s:I, s:I, s:I, s:f, s:s, s:i, s:i, s:i, s:I, s:I, s:s, s:s,"
                     " s:{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I}}",
                     "step", (json_int_t)r->step, "data_epoch", (json_int_t)epoch,
                     "data_step", (json_int_t)dstep, "tokens_seen", r->tokens_seen,
                     "layout", o->layout, "batch", o->B, "seq_len", o->T, "accum", o->accum,
                     "data_seed", (json_int_t)o->data_seed, "seed", (json_int_t)o->seed,
                     "run", o->run, "model", r->fam->name,
                     "dataset", "path", d->dataset, "tokenizer", d->tokenizer, "tokenizer_hash", d->tokenizer_hash,
                     "vocab_size", (json_int_t)d->vocab_size, "eot_id", (json_int_t)d->eot_id,
                     "n_docs", (json_int_t)d->n_docs, "n_tokens", (json_int_t)d->n_tokens,
                     "n_bytes", (json_int_t)d->n_bytes);
    if (st && json_object_set_new(st, "compute", compute_json(r))) {
        json_decref(st);
        return NULL;
    }
    return st;
}

static int save_checkpoint(run_t *r, char *err, size_t errlen) {
    json_t *st = state_json(r);
    if (!st) return err_fail(err, errlen, TRAIN_ECKPT, "out of memory building state.json");
    char path[1200];
    int rc = ckpt_save(r->run_dir, r->step, &r->cfg, r->params, r->np, r->mom1, r->mom2, r->np, st,
                       r->o->keep, path, sizeof path, err, errlen);
    json_decref(st);
    if (rc) return TRAIN_ECKPT;
    snprintf(r->last_ckpt, sizeof r->last_ckpt, "%s", path);
    r->saved_step = r->step;
    if (r->pub) {
        wire_msg_t m = {.type = MSG_CKPT};
        snprintf(m.u.ckpt.run, sizeof m.u.ckpt.run, "%s", r->o->run);
        m.u.ckpt.step = (uint64_t)r->step;
        m.u.ckpt.time = unix_now();
        m.u.ckpt.path = path;
        m.u.ckpt.model = (char *)r->fam->name;
        char topic[64];
        snprintf(topic, sizeof topic, "ckpt/%s", r->o->run);
        bus_publish(r->pub, topic, &m);
    }
    if (r->fault_kill_ckpt && r->fault_kill_ckpt == r->step) raise(SIGKILL);
    return 0;
}

static int json_int_field(json_t *st, const char *key, long long *out, const char *dir, char *err, size_t errlen) {
    json_t *v = json_object_get(st, key);
    if (!json_is_integer(v))
        return err_fail(err, errlen, CKPT_EFORMAT, "%s/state.json: \"%s\" missing or not an integer", dir, key);
    *out = json_integer_value(v);
    return 0;
}

/* The "dataset" record of state.json into r->data_id (absent: written before it existed). */
static int restore_dataset(run_t *r, json_t *st, const char *dir, char *err, size_t errlen) {
    json_t *d = json_object_get(st, "dataset");
    r->have_data_id = 0;
    if (!d) return 0;
    loader_identity_t *id = &r->data_id;
    memset(id, 0, sizeof *id);
    const char *path = NULL, *tok = NULL, *hash = NULL;
    json_int_t v[5];
    if (json_unpack(d, "{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I}", "path", &path, "tokenizer", &tok, "tokenizer_hash",
                    &hash, "vocab_size", &v[0], "eot_id", &v[1], "n_docs", &v[2], "n_tokens", &v[3], "n_bytes", &v[4]) ||
        v[0] < 0 || v[1] < 0 || v[2] < 0 || v[3] < 0 || v[4] < 0)
        return err_fail(err, errlen, CKPT_EFORMAT, "%s/state.json: \"dataset\" is not a dataset record", dir);
    snprintf(id->dataset, sizeof id->dataset, "%s", path);
    snprintf(id->tokenizer, sizeof id->tokenizer, "%s", tok);
    snprintf(id->tokenizer_hash, sizeof id->tokenizer_hash, "%s", hash);
    id->vocab_size = (uint32_t)v[0], id->eot_id = (uint32_t)v[1];
    id->n_docs = (uint64_t)v[2], id->n_tokens = (uint64_t)v[3], id->n_bytes = (uint64_t)v[4];
    r->have_data_id = 1;
    return 0;
}

/* Checks that the flags describe the same data stream as the checkpoint's, then restores the
 * step, tokens seen, the data cursor and the dataset record. CKPT_EFORMAT when state.json
 * lacks something, CKPT_EREFUSED when a flag disagrees with it. */
static int restore_state(run_t *r, const char *dir, char *err, size_t errlen) {
    json_t *st = NULL;
    int rc = ckpt_load_state(dir, &st, err, errlen);
    if (rc) return rc;
    long long v[7];
    const char *keys[7] = {"step", "data_epoch", "data_step", "batch", "seq_len", "accum", "data_seed"};
    for (int i = 0; i < 7 && !rc; i++) rc = json_int_field(st, keys[i], &v[i], dir, err, errlen);
    if (!rc) rc = restore_dataset(r, st, dir, err, errlen);
    const char *layout = json_string_value(json_object_get(st, "layout"));
    if (!rc && (!layout || strcmp(layout, r->o->layout)))
        rc = err_fail(err, errlen, CKPT_EREFUSED, "resume: --layout %s differs from the checkpoint's %s", r->o->layout, layout ? layout : "?");
    const long long want[4] = {r->o->B, r->o->T, r->o->accum, r->o->data_seed};
    const char *flag[4] = {"--batch", "--seq-len", "--accum", "--data-seed"};
    for (int i = 0; i < 4 && !rc; i++)
        if (v[3 + i] != want[i])
            rc = err_fail(err, errlen, CKPT_EREFUSED, "resume: %s %lld differs from the checkpoint's %lld", flag[i], want[i], v[3 + i]);
    const char *was = json_string_value(json_object_get(json_object_get(st, "compute"), "precision"));
    precision_t wp;
    if (!rc && was && !r->o->precision && precision_parse(was, &wp, NULL, 0) == 0 && wp != r->dev->precision) {
        /* a resumed run keeps the checkpoint's precision unless --precision says otherwise */
        char why[256];
        if (device_set_precision(r->dev, wp, why, sizeof why))
            rc = err_fail(err, errlen, CKPT_EREFUSED, "resume: %s was trained at precision %s: %s (give --precision)", dir, was, why);
    }
    if (!rc) {
        compare_compute(r, st, dir);
        r->step = v[0];
        r->start_epoch = (uint64_t)v[1];
        r->start_dstep = (uint64_t)v[2];
        json_t *tok = json_object_get(st, "tokens_seen");
        r->tokens_seen = json_is_number(tok) ? json_number_value(tok) : 0;
    }
    json_decref(st);
    return rc;
}

/* ---- metrics ---------------------------------------------------------------------------- */

static void publish_metrics(run_t *r, double loss, float lr, double gnorm, double tok_s, const family_metrics_t *fm) {
    if (!r->pub) return;
    wire_msg_t m = {.type = MSG_METRICS};
    msg_metrics_t *mm = &m.u.metrics;
    snprintf(mm->run, sizeof mm->run, "%s", r->o->run);
    mm->step = (uint64_t)r->step;
    mm->time = unix_now();
    snprintf(mm->precision, sizeof mm->precision, "%s", precision_name(r->dev->precision));
    wire_kv_add(mm->values, &mm->n, "loss", loss);
    wire_kv_add(mm->values, &mm->n, "lr", lr);
    wire_kv_add(mm->values, &mm->n, "grad_norm", gnorm);
    wire_kv_add(mm->values, &mm->n, "tok_s", tok_s);
    wire_kv_add(mm->values, &mm->n, "tokens", r->tokens_seen);
    for (int i = 0; fm && i < fm->n; i++) /* the family's own numbers, except what is already there */
        if (strcmp(fm->kv[i].name, "loss")) wire_kv_add(mm->values, &mm->n, fm->kv[i].name, fm->kv[i].value);
    char topic[64];
    snprintf(topic, sizeof topic, "metrics/%s", r->o->run);
    bus_publish(r->pub, topic, &m);
}

/* ---- setup ------------------------------------------------------------------------------ */

static int alloc_views(run_t *r) {
    r->np = r->fam->params(r->model, NULL, 0);
    r->params = calloc(r->np, sizeof *r->params);
    r->grads = calloc(r->np, sizeof *r->grads);
    r->mom1 = calloc(r->np, sizeof *r->mom1);
    r->mom2 = calloc(r->np, sizeof *r->mom2);
    if (!r->params || !r->grads || !r->mom1 || !r->mom2) return -1;
    r->fam->params(r->model, r->params, r->np);
    r->fam->grads(r->model, r->grads, r->np);
    return 0;
}

/* --encoder: a memory model's encoder from another checkpoint (a checkpoint directory, or a
 * run directory whose newest complete checkpoint is taken). A resumed run has it in its own
 * checkpoint already. */
static int load_encoder(run_t *r, char *err, size_t errlen) {
    const char *src = r->o->encoder;
    if (!r->fam->load_encoder)
        return err_fail(err, errlen, TRAIN_ESETUP, "--encoder is for the memory models (mixer-mem, llama-mem)");
    char dir[1200], warn[1024] = "", why[512];
    int64_t step = 0;
    if (ckpt_find_latest(src, dir, sizeof dir, &step, warn, sizeof warn, why, sizeof why) != 1)
        snprintf(dir, sizeof dir, "%s", src);
    if (r->fam->load_encoder(r->model, dir, err, errlen)) return TRAIN_ESETUP;
    fprintf(stderr, "trainer: encoder from %s%s\n", dir, r->cfg.freeze_encoder ? " (frozen)" : "");
    return 0;
}

/* Frees the model, its views and the optimizer (a failed checkpoint load leaves them half set). */
static void release_model(run_t *r) {
    adamw_destroy(&r->opt);
    if (r->fam && r->model) r->fam->destroy(&r->model);
    free(r->params), free(r->grads), free(r->mom1), free(r->mom2);
    r->params = r->grads = r->mom1 = r->mom2 = NULL;
    r->np = 0;
}

/* The model of r->cfg (family r->fam), its views and AdamW. */
static int build_model(run_t *r, char *err, size_t errlen) {
    const trainer_opts_t *o = r->o;
    if (r->fam->create(&r->model, r->dev, &r->cfg, o->B, o->T, (uint64_t)o->seed, err, errlen)) return TRAIN_EMODEL;
    if (alloc_views(r)) return err_fail(err, errlen, TRAIN_EMODEL, "out of memory");
    adamw_config_t ac = adamw_config_default();
    ac.beta1 = o->beta1, ac.beta2 = o->beta2, ac.eps = o->eps, ac.weight_decay = o->wd;
    ac.decay_embeddings = o->decay_embeddings;
    if (adamw_create(&r->opt, r->params, r->np, &ac, err, errlen)) return TRAIN_EMODEL;
    /* a frozen tensor gets no gradient; without decay its update is exactly zero */
    for (int i = 0; r->fam->frozen && i < r->np; i++)
        if (r->fam->frozen(r->model, i)) adamw_set_decay(r->opt, i, 0);
    adamw_moments(r->opt, 0, r->mom1, r->np);
    adamw_moments(r->opt, 1, r->mom2, r->np);
    return 0;
}

/* ckpt_load_fn for --resume: the model, AdamW moments and state of checkpoint dir. */
static int load_checkpoint(void *ctx, const char *dir, char *err, size_t errlen) {
    run_t *r = ctx;
    const trainer_opts_t *o = r->o;
    release_model(r);
    int rc = ckpt_load_config(dir, &r->cfg, err, errlen);
    if (rc) return rc;
    r->fam = family_for_kind(r->cfg.kind);
    if (!r->fam || strcmp(r->fam->name, o->model))
        return err_fail(err, errlen, CKPT_EREFUSED, "--model %s but the checkpoint holds a %s model", o->model,
                        r->fam ? r->fam->name : "unknown");
    if (o->T > r->cfg.max_seq)
        return err_fail(err, errlen, CKPT_EREFUSED, "--seq-len %d is longer than the model's RoPE table (max_position_embeddings %d)",
                        o->T, r->cfg.max_seq);
    if (build_model(r, err, errlen)) return CKPT_EREFUSED; /* no memory for a valid config: not the checkpoint's fault */
    if ((rc = ckpt_load_params(dir, r->params, r->np, err, errlen)) ||
        (rc = ckpt_load_optimizer(dir, r->mom1, r->mom2, r->np, err, errlen)))
        return rc;
    return restore_state(r, dir, err, errlen);
}

/* --resume: the newest usable checkpoint (model/checkpoint.h's rule), loaded. 1 resumed, 0 start
 * from scratch, or a TRAIN_E* status. */
static int resume(run_t *r, char *err, size_t errlen) {
    ckpt_pick_t *pick = malloc(sizeof *pick);
    if (!pick) return err_fail(err, errlen, TRAIN_EMODEL, "out of memory");
    int found = ckpt_open_newest(r->run_dir, load_checkpoint, r, pick, err, errlen);
    err_print_lines(stderr, "trainer: ", pick->warn);
    int rc = found;
    if (found < 0) {
        rc = found == CKPT_EREFUSED ? TRAIN_ESETUP : found == CKPT_ENOMEM ? TRAIN_EMODEL : TRAIN_ECKPT;
    } else if (found == 0 && pick->n_skipped && !r->o->allow_restart) {
        rc = err_fail(err, errlen, TRAIN_ECKPT, "--resume: every checkpoint in %s is damaged (%s); refusing to start over "
                      "(--allow-restart starts from scratch and replaces them)", r->run_dir, pick->skipped);
    } else if (found == 0) {
        fprintf(stderr, "trainer: --resume: no usable checkpoint in %s, starting from scratch%s\n", r->run_dir,
                pick->n_skipped ? " (--allow-restart)" : "");
    } else {
        snprintf(r->last_ckpt, sizeof r->last_ckpt, "%s", pick->path);
        r->saved_step = r->step;
        adamw_set_steps(r->opt, r->step);
    }
    if (found <= 0) {
        release_model(r); /* a damaged checkpoint's half-made model, none of its records */
        r->have_data_id = 0;
    }
    free(pick);
    return rc;
}

static int setup(run_t *r, char *err, size_t errlen) {
    const trainer_opts_t *o = r->o;
    if (o->run_dir) snprintf(r->run_dir, sizeof r->run_dir, "%s", o->run_dir);
    else snprintf(r->run_dir, sizeof r->run_dir, "runs/%s", o->run);
    int resumed = 0;
    if (o->resume && (resumed = resume(r, err, errlen)) < 0) return resumed;

    /* The dataset, from a loader, before a new model is built: its vocabulary sizes the model;
     * a resumed run takes only loaders of the dataset its checkpoint records. */
    trainer_data_info_t info;
    if (trainer_data_probe(r->data, r->have_data_id ? &r->data_id : NULL, &info, err, errlen)) return TRAIN_ESETUP;
    if (resumed && !r->have_data_id)
        fprintf(stderr, "trainer: %s records no dataset (written by an older trainer): the loaders' is not checked\n",
                r->last_ckpt);
    r->data_id = info.id;
    if (!resumed) {
        trainer_opts_config(o, info.id.vocab_size, info.id.eot_id, &r->cfg);
        if (o->vocab_size && o->vocab_size != (int)info.id.vocab_size)
            return err_fail(err, errlen, TRAIN_ESETUP, "--vocab-size %d does not match the dataset's vocabulary of %u tokens (%s)",
                        o->vocab_size, info.id.vocab_size, info.id.tokenizer);
        r->fam = family_for_kind(r->cfg.kind);
        int rc = build_model(r, err, errlen);
        if (rc) return rc;
        if (o->encoder && (rc = load_encoder(r, err, errlen))) return rc;
    } else if (o->encoder) {
        fprintf(stderr, "trainer: --encoder %s not read: the resumed checkpoint holds the encoder\n", o->encoder);
    }
    if (r->cfg.vocab_size != (int)info.id.vocab_size)
        return err_fail(err, errlen, TRAIN_ESETUP, "the model's vocabulary (%d) does not match the dataset's (%u tokens, tokenizer %s)",
                    r->cfg.vocab_size, info.id.vocab_size, info.id.tokenizer);
    r->sched = (schedule_t){o->lr, o->min_lr, o->warmup, (int)o->steps};
    if (schedule_check(&r->sched, err, errlen)) return TRAIN_ESETUP;
    /* before step 1 (and after every refusal, which leaves no directory behind): a run that
     * cannot save would lose every step up to its first checkpoint */
    char why[1200];
    if (ckpt_run_dir_prepare(r->run_dir, why, sizeof why))
        return err_fail(err, errlen, TRAIN_ESETUP, "run directory unusable: %s", why);
    if (resumed)
        fprintf(stderr, "trainer: resumed from %s (step %lld, data epoch %llu step %llu)\n", r->last_ckpt, r->step,
                (unsigned long long)r->start_epoch, (unsigned long long)r->start_dstep);
    r->inputs = malloc(sizeof(uint32_t) * o->B * o->T);
    r->targets = malloc(sizeof(uint32_t) * o->B * o->T);
    if (!r->inputs || !r->targets) return err_fail(err, errlen, TRAIN_EMODEL, "out of memory");
    return 0;
}

/* ---- the loop --------------------------------------------------------------------------- */

/* One optimizer step over o->accum micro-batches; *loss receives their mean loss. */
static int train_step(run_t *r, double *loss, float *lr, double *gnorm, char *err, size_t errlen) {
    const trainer_opts_t *o = r->o;
    r->fam->zero_grad(r->model);
    if (r->fam->set_step) r->fam->set_step(r->model, (uint64_t)r->step); /* same draws after a resume */
    double sum = 0;
    for (int a = 0; a < o->accum; a++) {
        msg_batch_t b;
        int rc = trainer_data_next(r->data, &b, err, errlen);
        if (rc) return rc;
        for (int i = 0; i < o->B; i++) { /* row (T+1) -> inputs [0,T), targets [1,T] */
            memcpy(r->inputs + (size_t)i * o->T, b.tokens + (size_t)i * (o->T + 1), sizeof(uint32_t) * o->T);
            memcpy(r->targets + (size_t)i * o->T, b.tokens + (size_t)i * (o->T + 1) + 1, sizeof(uint32_t) * o->T);
        }
        float l = 0;
        rc = r->fam->forward(r->model, r->inputs, r->targets, b.mask, &l, err, errlen);
        loader_batch_release(&b);
        if (rc) return TRAIN_EMODEL;
        if (r->fault_nan_step == r->step + 1) l = NAN;
        if (!isfinite(l)) return err_fail(err, errlen, TRAIN_ENAN, "loss is %g at step %lld", l, r->step + 1);
        if (r->fam->backward(r->model, err, errlen)) return TRAIN_EMODEL;
        sum += l;
        r->tokens_seen += (double)o->B * o->T;
    }
    *loss = sum / o->accum;
    *lr = schedule_lr(&r->sched, r->step);
    if (adamw_step(r->opt, r->grads, r->np, *lr, 1.0f / o->accum, o->clip, gnorm, err, errlen)) return TRAIN_EMODEL;
    if (!isfinite(*gnorm)) return err_fail(err, errlen, TRAIN_ENAN, "gradient norm is %g at step %lld", *gnorm, r->step + 1);
    r->step++;
    return 0;
}

static void teardown(run_t *r) {
    release_model(r);
    device_close(&r->dev);
    trainer_data_close(&r->data);
    bus_close(&r->pub);
    if (r->zctx) zmq_ctx_term(r->zctx);
    free(r->inputs), free(r->targets);
}

int trainer_run(const trainer_opts_t *o, char *err, size_t errlen) {
    run_t r = {.o = o, .saved_step = -1};
    int rc = 0;
    bus_signals_install();
    const char *fault = getenv("FT_TRAINER_FAULT_NAN_STEP");
    r.fault_nan_step = fault ? atoll(fault) : 0;
    fault = getenv("FT_TRAINER_FAULT_KILL_AFTER_CKPT");
    r.fault_kill_ckpt = fault ? atoll(fault) : 0;
    r.zctx = zmq_ctx_new();
    if (!r.zctx) return err_fail(err, errlen, TRAIN_ESETUP, "zmq_ctx_new failed");
    char perr[256];
    r.pub = bus_pub_open(r.zctx, bus_endpoint_pub(o->bus_pub), perr, sizeof perr);
    if (!r.pub) fprintf(stderr, "trainer: warning: no bus publisher (%s); training without events\n", perr);
    else bus_pub_wait(r.pub, 500); /* so the first events are not dropped; no bus: go on after 0.5 s */
    /* the device first: a run asked for a GPU that is not there fails at once, not after the
     * loaders answered */
    precision_t prec = PRECISION_FP32;
    if (o->precision) precision_parse(o->precision, &prec, NULL, 0); /* checked by trainer_opts_check */
    if (device_open(&r.dev, o->device, prec, err, errlen)) { rc = TRAIN_ESETUP; goto done; }
    if ((rc = trainer_data_open(&r.data, r.zctx, o, err, errlen))) { rc = TRAIN_ESETUP; goto done; }

    if ((rc = setup(&r, err, errlen))) goto done;
    if ((rc = trainer_data_start(r.data, &r.data_id, r.start_epoch, r.start_dstep, err, errlen))) { rc = TRAIN_ESETUP; goto done; }
    fprintf(stderr, "trainer: %s model, %lld parameters, vocab %d, B=%d T=%d accum %d, steps %lld..%lld, run dir %s\n",
            r.fam->name, (long long)family_param_count(r.fam, r.model), r.cfg.vocab_size, o->B, o->T, o->accum,
            r.step, o->steps, r.run_dir);
    {
        model_memory_t mm;
        r.fam->memory(r.model, &mm);
        char a[32], b[32], c[32], d[32];
        fprintf(stderr, "trainer: device %s, precision %s: parameters %s, gradients %s, optimizer moments %s, activations %s\n",
                r.dev->name, precision_name(r.dev->precision), device_bytes_str(mm.params, a, sizeof a),
                device_bytes_str(mm.grads, b, sizeof b), device_bytes_str(2 * mm.params, c, sizeof c),
                device_bytes_str(mm.activations, d, sizeof d));
        if (r.dev->precision == PRECISION_BF16 && device_is_host(r.dev) && !model_gemm_bf16_native())
            fprintf(stderr, "trainer: this CPU has no bf16 instructions: bf16 products are fp32 products of rounded "
                            "operands, slower than fp32 (docs/DEVICES.md)\n");
    }
    if (r.cfg.kind == MODEL_FREE)
        fprintf(stderr, "trainer: free transformer, H=%d latent bits, kappa (--kappa-unit %s) %g bits = %g nats per token%s\n",
                r.cfg.latent_bits, o->kappa_unit, r.cfg.kappa_nats / M_LN2, r.cfg.kappa_nats,
                fabsf(r.cfg.kappa_nats - trainer_opts_kappa_nats(o)) > 1e-6f * (1 + r.cfg.kappa_nats)
                    ? " (from the checkpoint; --kappa differs and is ignored)" : "");
    if (r.cfg.kind == MODEL_LTM)
        fprintf(stderr, "trainer: ltm, m=%d latent vectors per layer, window %d, K=%d inner steps, fast lr %g rising to "
                "%g over %d steps%s\n", r.cfg.latent_vectors, r.cfg.sliding_window, r.cfg.inner_steps, r.cfg.fast_lr,
                r.cfg.fast_lr_end, r.cfg.fast_lr_steps,
                r.cfg.latent_vectors != o->latent_vectors || r.cfg.inner_steps != o->inner_steps ||
                        r.cfg.sliding_window != o->attn_window || r.cfg.fast_lr != o->fast_lr || r.cfg.fast_lr_end != o->fast_lr_end
                    ? " (from the checkpoint; the flags differ and are ignored)" : "");
    {
        char fl[160];
        trainer_opts_flops_line(&r.cfg, o->T, fl, sizeof fl);
        if (fl[0]) fprintf(stderr, "trainer: %s\n", fl);
    }

    progress_t prog;
    progress_init(&prog, "train", "step", (uint64_t)o->steps);
    double t_last = progress_now();
    long long s_last = r.step;
    while (r.step < o->steps) {
        if (bus_signal_received()) break;
        double loss = 0, gnorm = 0;
        float lr = 0;
        rc = train_step(&r, &loss, &lr, &gnorm, err, errlen);
        if (rc == LOADER_EIO && bus_signal_received()) { rc = 0; break; } /* interrupted while waiting for data */
        if (rc) {
            if (rc == TRAIN_ENAN)
                snprintf(err + strlen(err), errlen - strlen(err), "; stopped without saving, last good checkpoint: %s",
                         r.last_ckpt[0] ? r.last_ckpt : "none");
            else if (rc > 0 || rc < TRAIN_EMODEL)
                rc = TRAIN_EDATA;
            goto done;
        }
        trainer_data_poll(r.data); /* pick up loaders announced on the bus */
        double now = progress_now(), tok_s = (r.step - s_last) * (double)o->B * o->T * o->accum / (now - t_last + 1e-9);
        family_metrics_t fm = {0};
        if (r.fam->metrics) r.fam->metrics(r.model, &fm);
        publish_metrics(&r, loss, lr, gnorm, tok_s, &fm);
        snprintf(prog.extra, sizeof prog.extra, "loss %.4f lr %.2e gnorm %.3f %.0f tok/s", loss, lr, gnorm, tok_s);
        progress_update(&prog, (uint64_t)r.step);
        if (!prog.enabled && o->log_every && r.step % o->log_every == 0)
            fprintf(stderr, "step %lld/%lld loss %.4f lr %.3e grad_norm %.4f tok/s %.0f\n", r.step, o->steps, loss, lr, gnorm, tok_s);
        t_last = now, s_last = r.step;
        if (o->ckpt_every && r.step % o->ckpt_every == 0 && r.step < o->steps)
            if ((rc = save_checkpoint(&r, err, errlen))) goto done;
    }
    progress_finish(&prog, (uint64_t)r.step);
    /* Final (or interrupted) checkpoint: the weights after the last finished step. */
    if (r.saved_step != r.step)
        if ((rc = save_checkpoint(&r, err, errlen))) goto done;
    fprintf(stderr, "trainer: %s at step %lld; checkpoint %s\n", bus_signal_received() ? "stopped by signal" : "done", r.step, r.last_ckpt);
done:
    teardown(&r);
    return rc;
}
