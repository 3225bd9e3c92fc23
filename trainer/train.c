/* trainer/train.c: the training loop (see train.h). */
#include "common/errmsg.h"
#include "trainer/train.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "bus/bus.h"
#include "common/progress.h"
#include "loader/batch.h"
#include "loader/client.h"
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
    char run_dir[1024], last_ckpt[1200];
    long long step;          /* optimizer steps done */
    long long saved_step;    /* step of the newest checkpoint written or loaded, -1: none */
    double tokens_seen;
    uint32_t *inputs, *targets; /* (B,T) each, cut from the loader's (B,T+1) rows */
    long long fault_nan_step;   /* test hook: $FT_TRAINER_FAULT_NAN_STEP makes that step's loss NaN */
} run_t;

static double unix_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- checkpoints ------------------------------------------------------------------------ */

/* What a resumed run must agree on with the run that wrote the checkpoint, beside the model
 * config: otherwise the data cursor would point into another sequence of batches. */
static json_t *state_json(const run_t *r) {
    const trainer_opts_t *o = r->o;
    uint64_t epoch, dstep;
    trainer_data_cursor(r->data, &epoch, &dstep);
    return json_pack("{s:I, s:I, s:I, s:f, s:s, s:i, s:i, s:i, s:I, s:I, s:s, s:s}",
                     "step", (json_int_t)r->step, "data_epoch", (json_int_t)epoch,
                     "data_step", (json_int_t)dstep, "tokens_seen", r->tokens_seen,
                     "layout", o->layout, "batch", o->B, "seq_len", o->T, "accum", o->accum,
                     "data_seed", (json_int_t)o->data_seed, "seed", (json_int_t)o->seed,
                     "run", o->run, "model", r->fam->name);
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
    return 0;
}

static int json_int_field(json_t *st, const char *key, long long *out, char *err, size_t errlen) {
    json_t *v = json_object_get(st, key);
    if (!json_is_integer(v)) return err_fail(err, errlen, TRAIN_ECKPT, "state.json: \"%s\" missing or not an integer", key);
    *out = json_integer_value(v);
    return 0;
}

/* Checks that the flags describe the same data stream as the checkpoint's, then restores the
 * step, tokens seen and the data cursor. */
static int restore_state(run_t *r, const char *dir, uint64_t *epoch, uint64_t *dstep, char *err, size_t errlen) {
    json_t *st = NULL;
    if (ckpt_load_state(dir, &st, err, errlen)) return TRAIN_ECKPT;
    long long v[7];
    const char *keys[7] = {"step", "data_epoch", "data_step", "batch", "seq_len", "accum", "data_seed"};
    int rc = 0;
    for (int i = 0; i < 7 && !rc; i++) rc = json_int_field(st, keys[i], &v[i], err, errlen);
    const char *layout = json_string_value(json_object_get(st, "layout"));
    if (!rc && (!layout || strcmp(layout, r->o->layout)))
        rc = err_fail(err, errlen, TRAIN_ESETUP, "resume: --layout %s differs from the checkpoint's %s", r->o->layout, layout ? layout : "?");
    const long long want[4] = {r->o->B, r->o->T, r->o->accum, r->o->data_seed};
    const char *flag[4] = {"--batch", "--seq-len", "--accum", "--data-seed"};
    for (int i = 0; i < 4 && !rc; i++)
        if (v[3 + i] != want[i])
            rc = err_fail(err, errlen, TRAIN_ESETUP, "resume: %s %lld differs from the checkpoint's %lld (%s)", flag[i], want[i], v[3 + i], dir);
    if (!rc) {
        r->step = v[0];
        *epoch = (uint64_t)v[1];
        *dstep = (uint64_t)v[2];
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
static int load_encoder(run_t *r, int resumed, char *err, size_t errlen) {
    const char *src = r->o->encoder;
    if (!r->fam->load_encoder)
        return err_fail(err, errlen, TRAIN_ESETUP, "--encoder is for the memory models (mixer-mem, llama-mem)");
    if (resumed) {
        fprintf(stderr, "trainer: --encoder %s not read: the resumed checkpoint holds the encoder\n", src);
        return 0;
    }
    char dir[1200], warn[1024] = "", why[512];
    int64_t step = 0;
    if (ckpt_find_latest(src, dir, sizeof dir, &step, warn, sizeof warn, why, sizeof why) != 1)
        snprintf(dir, sizeof dir, "%s", src);
    if (r->fam->load_encoder(r->model, dir, err, errlen)) return TRAIN_ESETUP;
    fprintf(stderr, "trainer: encoder from %s%s\n", dir, r->cfg.freeze_encoder ? " (frozen)" : "");
    return 0;
}

static int setup(run_t *r, uint64_t *epoch, uint64_t *dstep, char *err, size_t errlen) {
    const trainer_opts_t *o = r->o;
    if (o->run_dir) snprintf(r->run_dir, sizeof r->run_dir, "%s", o->run_dir);
    else snprintf(r->run_dir, sizeof r->run_dir, "runs/%s", o->run);

    /* The dataset's vocabulary, from a loader, before anything is built. */
    trainer_data_info_t info;
    if (trainer_data_probe(r->data, &info, err, errlen)) return TRAIN_ESETUP;

    char ckpt_dir[1200] = "";
    int64_t ckpt_step = 0;
    if (o->resume) {
        char warn[2048] = "";
        int found = ckpt_find_latest(r->run_dir, ckpt_dir, sizeof ckpt_dir, &ckpt_step, warn, sizeof warn, err, errlen);
        if (warn[0]) fprintf(stderr, "trainer: %s\n", warn);
        if (found < 0) return TRAIN_ECKPT;
        if (found == 0) {
            fprintf(stderr, "trainer: --resume: no complete checkpoint in %s, starting from scratch\n", r->run_dir);
            ckpt_dir[0] = 0;
        }
    }
    if (ckpt_dir[0]) {
        if (ckpt_load_config(ckpt_dir, &r->cfg, err, errlen)) return TRAIN_ECKPT;
    } else {
        trainer_opts_config(o, info.vocab_size, info.eot_id, &r->cfg);
        if (o->vocab_size && o->vocab_size != (int)info.vocab_size)
            return err_fail(err, errlen, TRAIN_ESETUP, "--vocab-size %d does not match the dataset's vocabulary of %u tokens (%s)",
                        o->vocab_size, info.vocab_size, info.tokenizer);
    }
    if (r->cfg.vocab_size != (int)info.vocab_size)
        return err_fail(err, errlen, TRAIN_ESETUP, "the model's vocabulary (%d) does not match the dataset's (%u tokens, tokenizer %s)",
                    r->cfg.vocab_size, info.vocab_size, info.tokenizer);
    if (o->T > r->cfg.max_seq)
        return err_fail(err, errlen, TRAIN_ESETUP, "--seq-len %d is longer than the model's RoPE table (max_position_embeddings %d)", o->T, r->cfg.max_seq);
    r->fam = family_for_kind(r->cfg.kind);
    if (!r->fam || strcmp(r->fam->name, o->model))
        return err_fail(err, errlen, TRAIN_ESETUP, "--model %s but the checkpoint holds a %s model", o->model, r->fam ? r->fam->name : "unknown");
    if (r->fam->create(&r->model, r->dev, &r->cfg, o->B, o->T, (uint64_t)o->seed, err, errlen)) return TRAIN_EMODEL;
    if (alloc_views(r)) return err_fail(err, errlen, TRAIN_EMODEL, "out of memory");
    if (o->encoder) {
        int rc = load_encoder(r, ckpt_dir[0] != 0, err, errlen);
        if (rc) return rc;
    }

    adamw_config_t ac = adamw_config_default();
    ac.beta1 = o->beta1, ac.beta2 = o->beta2, ac.eps = o->eps, ac.weight_decay = o->wd;
    ac.decay_embeddings = o->decay_embeddings;
    if (adamw_create(&r->opt, r->params, r->np, &ac, err, errlen)) return TRAIN_EMODEL;
    /* a frozen tensor gets no gradient; without decay its update is exactly zero */
    for (int i = 0; r->fam->frozen && i < r->np; i++)
        if (r->fam->frozen(r->model, i)) adamw_set_decay(r->opt, i, 0);
    adamw_moments(r->opt, 0, r->mom1, r->np);
    adamw_moments(r->opt, 1, r->mom2, r->np);
    r->sched = (schedule_t){o->lr, o->min_lr, o->warmup, (int)o->steps};
    if (schedule_check(&r->sched, err, errlen)) return TRAIN_ESETUP;

    *epoch = 0, *dstep = 0;
    if (ckpt_dir[0]) {
        if (ckpt_load_params(ckpt_dir, r->params, r->np, err, errlen) ||
            ckpt_load_optimizer(ckpt_dir, r->mom1, r->mom2, r->np, err, errlen))
            return TRAIN_ECKPT;
        int rc = restore_state(r, ckpt_dir, epoch, dstep, err, errlen);
        if (rc) return rc;
        adamw_set_steps(r->opt, r->step);
        snprintf(r->last_ckpt, sizeof r->last_ckpt, "%s", ckpt_dir);
        r->saved_step = r->step;
        fprintf(stderr, "trainer: resumed from %s (step %lld, data epoch %llu step %llu)\n", ckpt_dir, r->step,
                (unsigned long long)*epoch, (unsigned long long)*dstep);
    }
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
    adamw_destroy(&r->opt);
    if (r->fam && r->model) r->fam->destroy(&r->model);
    device_close(&r->dev);
    trainer_data_close(&r->data);
    bus_close(&r->pub);
    if (r->zctx) zmq_ctx_term(r->zctx);
    free(r->params), free(r->grads), free(r->mom1), free(r->mom2);
    free(r->inputs), free(r->targets);
}

int trainer_run(const trainer_opts_t *o, char *err, size_t errlen) {
    run_t r = {.o = o, .saved_step = -1};
    int rc = 0;
    bus_signals_install();
    const char *fault = getenv("FT_TRAINER_FAULT_NAN_STEP");
    r.fault_nan_step = fault ? atoll(fault) : 0;
    r.zctx = zmq_ctx_new();
    if (!r.zctx) return err_fail(err, errlen, TRAIN_ESETUP, "zmq_ctx_new failed");
    char perr[256];
    r.pub = bus_pub_open(r.zctx, bus_endpoint_pub(o->bus_pub), perr, sizeof perr);
    if (!r.pub) fprintf(stderr, "trainer: warning: no bus publisher (%s); training without events\n", perr);
    else bus_pub_wait(r.pub, 500); /* so the first events are not dropped; no bus: go on after 0.5 s */
    /* the device first: a run asked for a GPU that is not there fails at once, not after the
     * loaders answered */
    if (device_open(&r.dev, o->device, PRECISION_FP32, err, errlen)) { rc = TRAIN_ESETUP; goto done; }
    if ((rc = trainer_data_open(&r.data, r.zctx, o, err, errlen))) { rc = TRAIN_ESETUP; goto done; }

    uint64_t epoch = 0, dstep = 0;
    if ((rc = setup(&r, &epoch, &dstep, err, errlen))) goto done;
    if ((rc = trainer_data_start(r.data, epoch, dstep, err, errlen))) { rc = TRAIN_ESETUP; goto done; }
    fprintf(stderr, "trainer: %s model, %lld parameters, vocab %d, B=%d T=%d accum %d, steps %lld..%lld, run dir %s\n",
            r.fam->name, (long long)family_param_count(r.fam, r.model), r.cfg.vocab_size, o->B, o->T, o->accum,
            r.step, o->steps, r.run_dir);
    {
        model_memory_t mm;
        r.fam->memory(r.model, &mm);
        char a[32], b[32], c[32], d[32];
        fprintf(stderr, "trainer: device %s: parameters %s, gradients %s, optimizer moments %s, activations %s\n",
                r.dev->name, device_bytes_str(mm.params, a, sizeof a), device_bytes_str(mm.grads, b, sizeof b),
                device_bytes_str(2 * mm.params, c, sizeof c), device_bytes_str(mm.activations, d, sizeof d));
    }
    if (r.cfg.kind == MODEL_FREE)
        fprintf(stderr, "trainer: free transformer, H=%d latent bits, kappa (--kappa-unit %s) %g bits = %g nats per token%s\n",
                r.cfg.latent_bits, o->kappa_unit, r.cfg.kappa_nats / M_LN2, r.cfg.kappa_nats,
                fabsf(r.cfg.kappa_nats - trainer_opts_kappa_nats(o)) > 1e-6f * (1 + r.cfg.kappa_nats)
                    ? " (from the checkpoint; --kappa differs and is ignored)" : "");

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
