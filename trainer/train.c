/* trainer/train.c: the training loop (see train.h). */
#include "common/errmsg.h"
#include "trainer/train.h"

#include <errno.h>
#include <fcntl.h>
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
#include "model/precision.h"
#include "model/cpu_isa.h"
#include "model/adamw.h"
#include "model/checkpoint.h"
#include "model/family.h"
#include "model/schedule.h"
#include "trainer/data.h"
#include "trainer/run.h"


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
    json_t *c = json_pack("{s:s, s:s, s:s, s:i}", "device", r->dev->kind == DEVICE_CUDA ? "cuda" : "cpu",
                          "precision", precision_name(r->dev->precision), "cpu_isa", cpu_isa_name(cpu_isa()),
                          "threads", r->dev->threads);
    /* the ranks' sum runs in an order fixed by the world size (trainer/dp.h): another one
     * continues correctly, not bit for bit */
    if (c && r->world > 1 && json_object_set_new(c, "world", json_integer(r->world))) {
        json_decref(c);
        return NULL;
    }
    return c;
}

static void compare_compute(const run_t *r, json_t *st, const char *dir) {
    json_t *was = json_object_get(st, "compute"), *now = compute_json(r);
    if (!now) return;
    if (json_is_object(was) && !json_equal(was, now)) {
        char *a = json_dumps(was, JSON_COMPACT | JSON_SORT_KEYS), *b = json_dumps(now, JSON_COMPACT | JSON_SORT_KEYS);
        bus_log(&r->log, "%s was computed with %s, this run with %s: the continuation is correct but not "
                "bit-identical to an uninterrupted run", dir, a ? a : "?", b ? b : "?");
        free(a);
        free(b);
    }
    json_decref(now);
}

static json_t *state_json(const run_t *r) {
    const trainer_opts_t *o = r->o;
    const loader_identity_t *d = &r->data_id;
    uint64_t epoch = r->bound_epoch, dstep = r->bound_dstep; /* a step interrupted by a signal is not counted */
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
    /* data parallelism: the rows of a loader step are batch x world, of an optimizer step
     * global_batch = batch x world x accum (a resume may change the world, not global_batch) */
    if (st && (json_object_set_new(st, "compute", compute_json(r)) || json_object_set_new(st, "world", json_integer(r->world)) ||
               json_object_set_new(st, "global_batch", json_integer((json_int_t)o->B * r->world * o->accum)))) {
        json_decref(st);
        return NULL;
    }
    return st;
}

/* Under data parallelism every rank calls it (ZeRO-1 gathers the moments to rank 0 first);
 * rank 0 alone writes and announces. */
static int save_checkpoint(run_t *r, char *err, size_t errlen) {
    if (r->dpt) {
        int rc = dp_train_gather_moments(r->dpt, err, errlen);
        if (rc) return TRAIN_EDP;
        if (r->rank != 0) {
            r->saved_step = r->step;
            return 0;
        }
    }
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
    bus_log(&r->log, "checkpoint %s written (step %lld)", path, r->step);
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

/* state.json's numbers as the trainer writes them: a step >= 0 equal to the one in the
 * directory's name (ckpt-<step>), a data cursor >= 0 whose row (data_step x batch x world) fits
 * 64 bits, positive batch/accum/seq_len. Anything else is damage, skipped like a torn file:
 * trusted, a step of 100 in ckpt-8 ended a run with nothing trained and a negative one failed at
 * the first save. v: step, data_epoch, data_step, batch, seq_len, accum, data_seed. The data
 * cursor's upper bound, the dataset's epoch, is known only once a loader answers (setup). */
static int check_state(const long long *v, json_t *world, const char *dir, char *err, size_t errlen) {
    const char *base = strrchr(dir, '/');
    base = base ? base + 1 : dir;
    long long named = -1;
    if (sscanf(base, "ckpt-%lld", &named) != 1) named = -1;
    if (v[0] < 0 || v[0] != named)
        return err_fail(err, errlen, CKPT_EFORMAT, "%s/state.json: \"step\" is %lld, the directory's name says %lld", dir,
                        v[0], named);
    long long w = json_is_integer(world) ? json_integer_value(world) : 1;
    if (v[3] < 1 || v[4] < 1 || v[5] < 1 || w < 1 || v[3] > INT32_MAX || w > INT32_MAX)
        return err_fail(err, errlen, CKPT_EFORMAT, "%s/state.json: batch %lld, seq_len %lld, accum %lld, world %lld: "
                        "each must be positive", dir, v[3], v[4], v[5], w);
    if (v[1] < 0 || v[2] < 0 || v[2] > INT64_MAX / (v[3] * w))
        return err_fail(err, errlen, CKPT_EFORMAT, "%s/state.json: data cursor epoch %lld step %lld is impossible", dir,
                        v[1], v[2]);
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
    if (!rc) rc = check_state(v, json_object_get(st, "world"), dir, err, errlen);
    if (!rc) rc = restore_dataset(r, st, dir, err, errlen);
    const char *layout = json_string_value(json_object_get(st, "layout"));
    if (!rc && (!layout || strcmp(layout, r->o->layout)))
        rc = err_fail(err, errlen, CKPT_EREFUSED, "resume: --layout %s differs from the checkpoint's %s", r->o->layout, layout ? layout : "?");
    const long long want[2] = {r->o->T, r->o->data_seed};
    const char *flag[2] = {"--seq-len", "--data-seed"};
    for (int i = 0; i < 2 && !rc; i++)
        if (v[4 + 2 * i] != want[i])
            rc = err_fail(err, errlen, CKPT_EREFUSED, "resume: %s %lld differs from the checkpoint's %lld", flag[i], want[i], v[4 + 2 * i]);
    json_t *w = json_object_get(st, "world"); /* absent: one process wrote it */
    long long world = json_is_integer(w) ? json_integer_value(w) : 1;
    if (!rc && world < 1) rc = err_fail(err, errlen, CKPT_EFORMAT, "%s/state.json: \"world\" is %lld", dir, world);
    if (!rc) rc = trainer_dp_restore_position(r, v[3], world, v[5], v[2], err, errlen);
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
        json_t *tok = json_object_get(st, "tokens_seen");
        r->tokens_seen = json_is_number(tok) ? json_number_value(tok) : 0;
    }
    json_decref(st);
    return rc;
}

/* ---- metrics ---------------------------------------------------------------------------- */

/* metrics/<run>: the run's numbers (under data parallelism from rank 0: the loss and the
 * family's metrics are means over the ranks, tok_s counts every rank). The other ranks publish
 * their own on metrics/<run>/<rank>, with "rank_loss" instead of "loss" so that a reader of the
 * run's loss curve does not take them for it. */
static void publish_metrics(run_t *r, double loss, float lr, double gnorm, double tok_s, const family_metrics_t *fm) {
    if (!r->pub && r->metrics_fd < 0) return;
    wire_msg_t m = {.type = MSG_METRICS};
    msg_metrics_t *mm = &m.u.metrics;
    snprintf(mm->run, sizeof mm->run, "%s", r->o->run);
    mm->step = (uint64_t)r->step;
    mm->time = unix_now();
    snprintf(mm->precision, sizeof mm->precision, "%s", precision_name(r->dev->precision));
    char topic[64];
    if (r->rank > 0) {
        wire_kv_add(mm->values, &mm->n, "rank", r->rank);
        wire_kv_add(mm->values, &mm->n, "rank_loss", r->rank_loss);
        wire_kv_add(mm->values, &mm->n, "tok_s", tok_s / r->world);
        wire_kv_add(mm->values, &mm->n, "tokens", r->tokens_seen);
        snprintf(topic, sizeof topic, "metrics/%s/%d", r->o->run, r->rank);
        if (r->pub) bus_publish(r->pub, topic, &m);
        return;
    }
    if (r->world > 1) {
        wire_kv_add(mm->values, &mm->n, "rank_loss", r->rank_loss);
        wire_kv_add(mm->values, &mm->n, "world", r->world);
        wire_kv_add(mm->values, &mm->n, "global_batch", (double)r->o->B * r->world * r->o->accum);
    }
    wire_kv_add(mm->values, &mm->n, "loss", loss);
    wire_kv_add(mm->values, &mm->n, "lr", lr);
    wire_kv_add(mm->values, &mm->n, "grad_norm", gnorm);
    wire_kv_add(mm->values, &mm->n, "tok_s", tok_s);
    wire_kv_add(mm->values, &mm->n, "tokens", r->tokens_seen);
    wire_kv_add(mm->values, &mm->n, "data_wait_s", r->data_wait);
    for (int i = 0; fm && i < fm->n; i++) /* the family's own numbers, except what is already there */
        if (strcmp(fm->kv[i].name, "loss")) wire_kv_add(mm->values, &mm->n, fm->kv[i].name, fm->kv[i].value);
    snprintf(topic, sizeof topic, "metrics/%s", r->o->run);
    if (r->metrics_fd >= 0) { /* the file first: a watcher that reads it after the event finds the step there */
        char line[8192];
        int n = wire_to_json(topic, &m, line, sizeof line - 1);
        if (n > 0) {
            line[n++] = '\n';
            if (write(r->metrics_fd, line, (size_t)n) != n) { /* one write per line: O_APPEND keeps lines whole */
                bus_log(&r->log, "warning: %s/metrics.jsonl: %s; no more metrics written there", r->run_dir,
                        strerror(errno));
                close(r->metrics_fd);
                r->metrics_fd = -1;
            }
        }
    }
    if (r->pub) bus_publish(r->pub, topic, &m);
}

/* <run_dir>/metrics.jsonl: every step's metrics event as bin/bus tap prints it (docs/FORMATS.md
 * §3), so a watcher started late (bin/live) has the run's whole history. Rank 0 only; a file
 * that cannot be opened costs a warning, not the run. */
static void open_metrics_file(run_t *r) {
    r->metrics_fd = -1;
    if (r->rank != 0) return;
    char path[1100];
    snprintf(path, sizeof path, "%s/metrics.jsonl", r->run_dir);
    r->metrics_fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (r->metrics_fd < 0) bus_log(&r->log, "warning: %s: %s; metrics go to the bus only", path, strerror(errno));
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
    bus_log(&r->log, "encoder from %s%s", dir, r->cfg.freeze_encoder ? " (frozen)" : "");
    return 0;
}

/* Frees the model, its views and the optimizer (a failed checkpoint load leaves them half set). */
static void release_model(run_t *r) {
    adamw_destroy(&r->opt);
    dp_train_destroy(&r->dpt);
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
    if (r->dp) { /* the optimizer spans the ranks; its moments in the parameters' layout for checkpoints */
        for (int i = 0; r->fam->frozen && i < r->np; i++)
            if (r->fam->frozen(r->model, i)) /* the sharded update has no per-tensor decay switch yet */
                return err_fail(err, errlen, TRAIN_ESETUP, "--dp: a model with a frozen encoder (%s) is not supported yet; "
                                "train it in one process", r->fam->name);
        if (dp_train_create(&r->dpt, r->dp, r->dev, r->params, r->grads, r->np, &ac, o->zero, err, errlen))
            return TRAIN_EMODEL;
        const tensor_view_t *m, *v;
        dp_train_moment_views(r->dpt, &m, &v);
        memcpy(r->mom1, m, r->np * sizeof *m);
        memcpy(r->mom2, v, r->np * sizeof *v);
        return 0;
    }
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

/* Adds a skipped checkpoint's name to the run's list (for the refusal when none is left). */
static void resume_skipped_add(run_t *r, const char *name) {
    size_t at = strlen(r->resume_skipped);
    if (name[0]) snprintf(r->resume_skipped + at, sizeof r->resume_skipped - at, "%s%s", at ? ", " : "", name);
}

/* --resume: the newest usable checkpoint (model/checkpoint.h's rule), loaded. 1 resumed, 0 start
 * from scratch, or a TRAIN_E* status. */
static int resume(run_t *r, int64_t below, char *err, size_t errlen) {
    ckpt_pick_t *pick = malloc(sizeof *pick);
    if (!pick) return err_fail(err, errlen, TRAIN_EMODEL, "out of memory");
    /* a checkpoint found damaged after an earlier pass took it leaves nothing of its own behind */
    r->step = 0, r->start_epoch = 0, r->start_dstep = 0, r->start_row = 0, r->tokens_seen = 0;
    r->saved_step = r->resumed_from = -1, r->last_ckpt[0] = 0;
    int found = ckpt_open_newest_below(r->run_dir, below, load_checkpoint, r, pick, err, errlen);
    bus_log(&r->log, "%s", pick->warn);
    /* the names of every pass (setup's retry after a data cursor beyond the epoch), for the refusal */
    resume_skipped_add(r, pick->skipped);
    snprintf(pick->skipped, sizeof pick->skipped, "%s", r->resume_skipped);
    if (pick->skipped[0] && !pick->n_skipped) pick->n_skipped = 1;
    int rc = found;
    if (found < 0) {
        rc = found == CKPT_EREFUSED ? TRAIN_ESETUP : found == CKPT_ENOMEM ? TRAIN_EMODEL : TRAIN_ECKPT;
    } else if (found == 0 && pick->n_skipped && !r->o->allow_restart) {
        rc = err_fail(err, errlen, TRAIN_ECKPT, "--resume: every checkpoint in %s is damaged (%s); refusing to start over "
                      "(--allow-restart starts from scratch and replaces them)", r->run_dir, pick->skipped);
    } else if (found == 0) {
        bus_log(&r->log, "--resume: no usable checkpoint in %s, starting from scratch%s", r->run_dir,
                pick->n_skipped ? " (--allow-restart)" : "");
    } else {
        snprintf(r->last_ckpt, sizeof r->last_ckpt, "%s", pick->path);
        r->saved_step = r->resumed_from = r->step;
        if (r->opt) adamw_set_steps(r->opt, r->step); /* under --dp: every rank, trainer_dp_start */
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
    int resumed = 0, rc;
    /* under --dp rank 0 alone reads the run directory (the others may be on other machines) */
    if (o->resume && r->rank == 0 && (resumed = resume(r, INT64_MAX, err, errlen)) < 0) return resumed;

    /* The dataset, from a loader, before a new model is built: its vocabulary sizes the model;
     * a resumed run takes only loaders of the dataset its checkpoint records. */
    trainer_data_info_t info;
    while (r->rank == 0) {
        if (trainer_data_probe(r->data, r->have_data_id ? &r->data_id : NULL, &info, err, errlen)) return TRAIN_ESETUP;
        if (resumed && !r->have_data_id)
            bus_log(&r->log, "%s records no dataset (written by an older trainer): the loaders' is not checked",
                    r->last_ckpt);
        /* the data cursor against the epoch the loader reports: a legitimate one is at most one
         * step past its end in this run's rows (rounded up from another world size's); beyond
         * that state.json is damaged, and the rule skips the checkpoint as it would at load */
        const long long rows = (long long)o->B * r->world;
        if (resumed && info.steps_per_epoch < (uint64_t)(INT64_MAX / rows) &&
            r->start_row >= (long long)(info.steps_per_epoch + 1) * rows) {
            bus_log(&r->log, "skipping %s: state.json data cursor row %lld is beyond the dataset's epoch (%llu steps of "
                    "%lld rows)", r->last_ckpt, r->start_row, (unsigned long long)info.steps_per_epoch, rows);
            const char *base = strrchr(r->last_ckpt, '/');
            resume_skipped_add(r, base ? base + 1 : r->last_ckpt);
            if ((resumed = resume(r, r->saved_step, err, errlen)) < 0) return resumed;
            continue;
        }
        if (resumed && r->start_dstep >= info.steps_per_epoch) { /* a position converted to another world size */
            r->start_epoch++;
            r->start_dstep = 0;
        }
        break;
    }
    if (r->dp && (rc = trainer_dp_agree_setup(r, &resumed, &info, err, errlen))) return rc;
    r->data_id = info.id;
    if (resumed && r->rank != 0) { /* rank 0's model, whose weights come from rank 0 */
        r->fam = family_for_kind(r->cfg.kind);
        if ((rc = build_model(r, err, errlen))) return rc;
    }
    if (!resumed) {
        trainer_opts_config(o, info.id.vocab_size, info.id.eot_id, &r->cfg);
        if (o->vocab_size && o->vocab_size != (int)info.id.vocab_size)
            return err_fail(err, errlen, TRAIN_ESETUP, "--vocab-size %d does not match the dataset's vocabulary of %u tokens (%s)",
                        o->vocab_size, info.id.vocab_size, info.id.tokenizer);
        r->fam = family_for_kind(r->cfg.kind);
        if ((rc = build_model(r, err, errlen))) return rc;
        if (o->encoder && (rc = load_encoder(r, err, errlen))) return rc;
    } else if (o->encoder && r->rank == 0) {
        bus_log(&r->log, "--encoder %s not read: the resumed checkpoint holds the encoder", o->encoder);
    }
    if (r->cfg.vocab_size != (int)info.id.vocab_size)
        return err_fail(err, errlen, TRAIN_ESETUP, "the model's vocabulary (%d) does not match the dataset's (%u tokens, tokenizer %s)",
                    r->cfg.vocab_size, info.id.vocab_size, info.id.tokenizer);
    r->sched = (schedule_t){o->lr, o->min_lr, o->warmup, (int)o->steps};
    if (schedule_check(&r->sched, err, errlen)) return TRAIN_ESETUP;
    /* before step 1 (and after every refusal, which leaves no directory behind): a run that
     * cannot save would lose every step up to its first checkpoint */
    char why[1200];
    if (r->rank == 0 && ckpt_run_dir_prepare(r->run_dir, why, sizeof why))
        return err_fail(err, errlen, TRAIN_ESETUP, "run directory unusable: %s", why);
    if (r->rank == 0 && ckpt_run_dir_lock(r->run_dir, &r->lock_fd, why, sizeof why))
        return err_fail(err, errlen, TRAIN_ESETUP, "%s", why);
    open_metrics_file(r);
    if (resumed && r->rank == 0)
        bus_log(&r->log, "resumed from %s (step %lld, data epoch %llu step %llu)", r->last_ckpt, r->step,
                (unsigned long long)r->start_epoch, (unsigned long long)r->start_dstep);
    r->inputs = malloc(sizeof(uint32_t) * o->B * o->T);
    r->targets = malloc(sizeof(uint32_t) * o->B * o->T);
    if (!r->inputs || !r->targets) return err_fail(err, errlen, TRAIN_EMODEL, "out of memory");
    return 0;
}

/* ---- the loop --------------------------------------------------------------------------- */

/* Micro-batch a of the step: fetch this rank's rows, forward, backward. *l: its loss. */
static int micro_batch(run_t *r, int a, float *l, char *err, size_t errlen) {
    const trainer_opts_t *o = r->o;
    msg_batch_t b;
    double t_wait = progress_now();
    int rc = trainer_data_next(r->data, &b, err, errlen);
    r->data_wait += progress_now() - t_wait;
    if (rc) return rc == LOADER_EIO && bus_signal_received() ? LOADER_EIO : TRAIN_EDATA; /* interrupted, or failed */
    for (int i = 0; i < o->B; i++) { /* row (T+1) -> inputs [0,T), targets [1,T] */
        memcpy(r->inputs + (size_t)i * o->T, b.tokens + (size_t)i * (o->T + 1), sizeof(uint32_t) * o->T);
        memcpy(r->targets + (size_t)i * o->T, b.tokens + (size_t)i * (o->T + 1) + 1, sizeof(uint32_t) * o->T);
    }
    /* data parallelism: these rows' place in the step's global batch (trainer/dp_train.h) */
    if (r->dp && r->fam->set_row) r->fam->set_row(r->model, ((uint64_t)a * r->world + r->rank) * o->B);
    rc = r->fam->forward(r->model, r->inputs, r->targets, b.mask, l, err, errlen);
    loader_batch_release(&b);
    if (rc) return TRAIN_EMODEL;
    if (r->fault_nan_step == r->step + 1) *l = NAN;
    if (!isfinite(*l)) return err_fail(err, errlen, TRAIN_ENAN, "loss is %g at step %lld", *l, r->step + 1);
    if (r->fam->backward(r->model, err, errlen)) return TRAIN_EMODEL;
    r->tokens_seen += (double)o->B * o->T * r->world;
    return 0;
}

/* One optimizer step over o->accum micro-batches; *loss receives their mean loss (under data
 * parallelism the mean over the ranks too, which every rank agrees on before the update). */
static int train_step(run_t *r, double *loss, float *lr, double *gnorm, char *err, size_t errlen) {
    const trainer_opts_t *o = r->o;
    r->fam->zero_grad(r->model);
    if (r->fam->set_step) r->fam->set_step(r->model, (uint64_t)r->step); /* same draws after a resume */
    double sum = 0;
    int rc = 0;
    for (int a = 0; a < o->accum && !rc; a++) {
        float l = 0;
        if (!(rc = micro_batch(r, a, &l, err, errlen))) sum += l;
    }
    *loss = sum / o->accum;
    if (r->dp) rc = trainer_dp_agree_step(r, rc, loss, err, errlen);
    if (rc) return rc;
    *lr = schedule_lr(&r->sched, r->step);
    if (r->dp) {
        rc = dp_train_step(r->dpt, *lr, 1.0f / o->accum, o->clip, gnorm, err, errlen);
        r->agreed = rc == -2; /* a norm that is not finite: every rank found the same */
        if (rc) return rc == -2 ? TRAIN_ENAN : TRAIN_EDP;
    } else if (adamw_step(r->opt, r->grads, r->np, *lr, 1.0f / o->accum, o->clip, gnorm, err, errlen)) {
        return TRAIN_EMODEL;
    }
    if (!isfinite(*gnorm)) return err_fail(err, errlen, TRAIN_ENAN, "gradient norm is %g at step %lld", *gnorm, r->step + 1);
    r->step++;
    trainer_data_cursor(r->data, &r->bound_epoch, &r->bound_dstep);
    if (r->dp) dp_set_step(r->dp, r->step);
    return 0;
}

/* Releases everything. Returns 1 when the process must _exit (trainer/dp.h's dp_close). */
static int teardown(run_t *r, int rc, const char *err) {
    release_model(r);
    int hard = dp_close(&r->dp, rc && !r->agreed ? err : NULL); /* a failure of its own: the others learn why */
    device_close(&r->dev);
    trainer_data_close(&r->data);
    r->log.pub = NULL; /* its lines go to stderr alone from here */
    bus_close(&r->pub);
    if (r->metrics_fd >= 0) close(r->metrics_fd);
    r->metrics_fd = -1;
    if (r->lock_fd >= 0) close(r->lock_fd); /* last: the run's files are all written */
    r->lock_fd = -1;
    if (r->zctx) zmq_ctx_term(r->zctx);
    free(r->inputs), free(r->targets);
    return hard;
}

/* "0x1234" -> rank and step of $FT_TRAINER_FAULT_DP_PERTURB=R:S */
static void fault_hooks(run_t *r) {
    const char *fault = getenv("FT_TRAINER_FAULT_NAN_STEP");
    r->fault_nan_step = fault ? atoll(fault) : 0;
    fault = getenv("FT_TRAINER_FAULT_KILL_AFTER_CKPT");
    r->fault_kill_ckpt = fault ? atoll(fault) : 0;
    fault = getenv("FT_TRAINER_FAULT_DP_PERTURB");
    r->fault_perturb_rank = -1;
    if (fault && sscanf(fault, "%d:%lld", &r->fault_perturb_rank, &r->fault_perturb_step) != 2) r->fault_perturb_rank = -1;
}

/* The test hook: one weight of this rank changed in its last bit, as a faulty device would. */
static void perturb_weights(run_t *r) {
    const tensor_view_t *v = &r->params[0];
    float *host = malloc(sizeof(float) * (size_t)tensor_numel(v));
    if (!host) return;
    tensor_view_download(v, host);
    uint32_t bits;
    memcpy(&bits, host, 4);
    bits ^= 1;
    memcpy(host, &bits, 4);
    tensor_view_upload(v, host);
    free(host);
}

static void print_start(run_t *r) {
    const trainer_opts_t *o = r->o;
    model_memory_t mm;
    r->fam->memory(r->model, &mm);
    char a[32], b[32], c[32], d[32], e[32], rank[48] = "";
    size_t moments = 2 * mm.params;
    if (r->dpt) {
        dp_train_memory_t dm;
        dp_train_memory(r->dpt, &dm);
        moments = dm.moments;
        snprintf(rank, sizeof rank, "rank %d: ", r->rank);
        bus_log(&r->log, "%sdevice %s, precision %s: parameters %s, gradients %s, optimizer moments %s%s, "
                "data-parallel buffers %s, activations %s", rank, r->dev->name, precision_name(r->dev->precision), device_bytes_str(mm.params, a, sizeof a),
                device_bytes_str(mm.grads, b, sizeof b), device_bytes_str(moments, c, sizeof c),
                o->zero ? " (ZeRO-1: this rank's shard)" : "", device_bytes_str(dm.buffers, e, sizeof e),
                device_bytes_str(mm.activations, d, sizeof d));
    }
    if (r->rank != 0) return;
    bus_log(&r->log, "%s model, %lld parameters, vocab %d, B=%d T=%d accum %d, steps %lld..%lld, run dir %s",
            r->fam->name, (long long)family_param_count(r->fam, r->model), r->cfg.vocab_size, o->B, o->T, o->accum,
            r->step, o->steps, r->run_dir);
    if (r->dp)
        bus_log(&r->log, "data parallel (%s%s): %d ranks, global batch %lld rows = --batch %d x %d ranks x --accum %d, "
                "%lld tokens per step", dp_kind_name(dp_get_kind(r->dp)), o->zero ? ", ZeRO-1" : "", r->world,
                (long long)o->B * r->world * o->accum, o->B, r->world, o->accum, (long long)o->B * r->world * o->accum * o->T);
    else
        bus_log(&r->log, "device %s, precision %s: parameters %s, gradients %s, optimizer moments %s, activations %s",
                r->dev->name, precision_name(r->dev->precision), device_bytes_str(mm.params, a, sizeof a), device_bytes_str(mm.grads, b, sizeof b),
                device_bytes_str(moments, c, sizeof c), device_bytes_str(mm.activations, d, sizeof d));
    if (r->cfg.kind == MODEL_FREE)
        bus_log(&r->log, "free transformer, H=%d latent bits, kappa (--kappa-unit %s) %g bits = %g nats per token%s",
                r->cfg.latent_bits, o->kappa_unit, r->cfg.kappa_nats / M_LN2, r->cfg.kappa_nats,
                fabsf(r->cfg.kappa_nats - trainer_opts_kappa_nats(o)) > 1e-6f * (1 + r->cfg.kappa_nats)
                    ? " (from the checkpoint; --kappa differs and is ignored)" : "");
    if (r->dev->precision == PRECISION_BF16 && device_is_host(r->dev) && !model_gemm_bf16_native())
        bus_log(&r->log, "this CPU has no bf16 instructions: bf16 products are fp32 products of rounded "
                        "operands (the same numbers, no faster than fp32; docs/DEVICES.md)");
    if (r->cfg.kind == MODEL_LTM)
        bus_log(&r->log, "ltm, m=%d latent vectors per layer, window %d, K=%d inner steps, fast lr %g rising to "
                "%g over %d steps%s", r->cfg.latent_vectors, r->cfg.sliding_window, r->cfg.inner_steps, r->cfg.fast_lr,
                r->cfg.fast_lr_end, r->cfg.fast_lr_steps,
                r->cfg.latent_vectors != o->latent_vectors || r->cfg.inner_steps != o->inner_steps ||
                        r->cfg.sliding_window != o->attn_window || r->cfg.fast_lr != o->fast_lr || r->cfg.fast_lr_end != o->fast_lr_end
                    ? " (from the checkpoint; the flags differ and are ignored)" : "");
    char fl[160];
    trainer_opts_flops_line(&r->cfg, o->T, fl, sizeof fl);
    if (fl[0]) bus_log(&r->log, "%s", fl);
}

/* A NaN on the very first step after --resume comes from the checkpoint it resumed from (its
 * weights or moments, under a MANIFEST that verifies): calling that one "good" sent the user
 * back to it. Says so, and names the usable checkpoint before it (verified; "none" if none). */
static void nan_after_resume(run_t *r, char *err, size_t errlen) {
    char before[4096] = "none", why[256];
    ckpt_pick_t *pick = r->rank == 0 ? malloc(sizeof *pick) : NULL;
    if (pick && ckpt_open_newest_below(r->run_dir, r->resumed_from, NULL, NULL, pick, why, sizeof why) == 1)
        snprintf(before, sizeof before, "%s", pick->path);
    free(pick);
    size_t at = strlen(err);
    snprintf(err + at, errlen - at, "; stopped without saving: it is the first step from %s, which --resume loaded, so "
             "that checkpoint is not good (non-finite weights or moments?); the one before it: %s",
             r->last_ckpt[0] ? r->last_ckpt : "?", before);
}

/* The loop; rc of the first failure. */
static int train_loop(run_t *r, char *err, size_t errlen) {
    const trainer_opts_t *o = r->o;
    int rc = 0;
    progress_t prog;
    progress_init(&prog, "train", "step", (uint64_t)o->steps);
    if (r->rank != 0) prog.enabled = 0;
    double t_last = progress_now(), t_begin = t_last;
    long long s_last = r->step, s_begin = r->step;
    while (r->step < o->steps) {
        if (r->dp ? r->stop : bus_signal_received()) break; /* under --dp every rank stops after the same step */
        double loss = 0, gnorm = 0;
        float lr = 0;
        r->data_wait = 0;
        rc = train_step(r, &loss, &lr, &gnorm, err, errlen);
        if (rc == LOADER_EIO) return 0; /* interrupted while waiting for data (under --dp: on some rank) */
        if (rc) {
            if (rc == TRAIN_ENAN && r->resumed_from >= 0 && r->step == r->resumed_from)
                nan_after_resume(r, err, errlen);
            else if (rc == TRAIN_ENAN)
                snprintf(err + strlen(err), errlen - strlen(err), "; stopped without saving, last good checkpoint: %s",
                         r->last_ckpt[0] ? r->last_ckpt : "none");
            else if (rc > 0 || rc < TRAIN_EDP)
                rc = TRAIN_EDATA;
            return rc;
        }
        if (r->fault_perturb_rank == r->rank && r->fault_perturb_step == r->step) perturb_weights(r);
        if (r->dp && o->dp_check_every && r->step % o->dp_check_every == 0 && (rc = trainer_dp_check(r, err, errlen)))
            return rc;
        trainer_data_poll(r->data); /* pick up loaders announced on the bus */
        double now = progress_now(), tok_s = (r->step - s_last) * (double)o->B * o->T * o->accum * r->world / (now - t_last + 1e-9);
        family_metrics_t fm = {0};
        if (r->dp) fm = r->fm; /* the ranks' mean */
        else if (r->fam->metrics) r->fam->metrics(r->model, &fm);
        publish_metrics(r, loss, lr, gnorm, tok_s, &fm);
        snprintf(prog.extra, sizeof prog.extra, "loss %.4f lr %.2e gnorm %.3f %.0f tok/s", loss, lr, gnorm, tok_s);
        progress_update(&prog, (uint64_t)r->step);
        if (!prog.enabled && r->rank == 0 && o->log_every && r->step % o->log_every == 0)
            fprintf(stderr, "step %lld/%lld loss %.4f lr %.3e grad_norm %.4f tok/s %.0f tokens %.0f\n", r->step, o->steps, loss,
                    lr, gnorm, tok_s, r->tokens_seen);
        t_last = now, s_last = r->step;
        if (o->ckpt_every && r->step % o->ckpt_every == 0 && r->step < o->steps)
            if ((rc = save_checkpoint(r, err, errlen))) return rc;
    }
    progress_finish(&prog, (uint64_t)r->step);
    /* the run's pace, and under --dp what the collectives cost each rank (bench/bench_dp.sh) */
    double all = progress_now() - t_begin;
    if (r->dpt && r->step > s_begin) {
        double comm = dp_train_comm_seconds(r->dpt);
        bus_log(&r->log, "rank %d: %lld steps in %.3f s, %.3f s of them in the gradient collectives (%.1f%%)",
                r->rank, r->step - s_begin, all, comm, 100 * comm / (all + 1e-9));
    } else if (r->rank == 0 && r->step > s_begin) {
        bus_log(&r->log, "%lld steps in %.3f s", r->step - s_begin, all);
    }
    return 0;
}

/* What the loaders' links cost (docs/NETWORK.md): a re-issue is a request that waited
 * --timeout-ms (a loader down, or a link slower than that). */
static void print_loader_stats(const run_t *r) {
    uint64_t sent, reissued, dropped;
    trainer_data_stats(r->data, &sent, &reissued, &dropped);
    char who[32] = "";
    if (r->world > 1) snprintf(who, sizeof who, "rank %d: ", r->rank);
    bus_log(&r->log, "%sloaders: %llu batch requests, %llu re-issued after --timeout-ms, %llu replies dropped (late or twice)",
            who, (unsigned long long)sent, (unsigned long long)reissued, (unsigned long long)dropped);
}

int trainer_run(const trainer_opts_t *o, int *hard_exit, char *err, size_t errlen) {
    run_t r = {.o = o, .saved_step = -1, .resumed_from = -1, .world = 1, .metrics_fd = -1, .lock_fd = -1, .log = {.program = "trainer"}};
    int rc = 0, started = 0;
    *hard_exit = 0;
    bus_signals_install();
    fault_hooks(&r);
    r.zctx = zmq_ctx_new();
    if (!r.zctx) return err_fail(err, errlen, TRAIN_ESETUP, "zmq_ctx_new failed");
    char perr[256], spec[64];
    /* the device first: a run asked for a GPU that is not there fails at once, not after the
     * ranks met or the loaders answered (a GPU rank's device is its local rank's GPU) */
    precision_t prec = PRECISION_FP32;
    if (o->precision) precision_parse(o->precision, &prec, NULL, 0); /* checked by trainer_opts_check */
    if (device_open(&r.dev, trainer_dp_device(&r, spec, sizeof spec), prec, err, errlen)) { rc = TRAIN_ESETUP; goto done; }
    if ((rc = trainer_dp_open(&r, err, errlen))) goto done;
    r.pub = bus_pub_open(r.zctx, bus_endpoint_pub(o->bus_pub), perr, sizeof perr);
    if (!r.pub && r.rank == 0) bus_log(&r.log, "warning: no bus publisher (%s); training without events", perr);
    else if (r.pub) bus_pub_wait(r.pub, 500); /* so the first events are not dropped; no bus: go on after 0.5 s */
    r.log.pub = r.pub;
    if (r.dp && dp_attach(r.dp, r.dev, err, errlen)) { rc = TRAIN_ESETUP; goto done; }
    if ((rc = trainer_data_open(&r.data, r.zctx, o, &r.log, err, errlen))) { rc = TRAIN_ESETUP; goto done; }
    trainer_data_set_rank(r.data, r.rank, r.world);

    if ((rc = setup(&r, err, errlen))) goto done;
    if (r.dp && (rc = trainer_dp_start(&r, r.saved_step >= 0, err, errlen))) goto done;
    if ((rc = trainer_data_start(r.data, &r.data_id, r.start_epoch, r.start_dstep, err, errlen))) { rc = TRAIN_ESETUP; goto done; }
    r.bound_epoch = r.start_epoch, r.bound_dstep = r.start_dstep;
    print_start(&r);
    started = 1;
    if ((rc = train_loop(&r, err, errlen))) goto done;
    /* Final (or interrupted) checkpoint: the weights after the last finished step. */
    if (r.saved_step != r.step)
        if ((rc = save_checkpoint(&r, err, errlen))) goto done;
    if (r.rank == 0)
        bus_log(&r.log, "%s at step %lld; checkpoint %s", r.stop || bus_signal_received() ? "stopped by signal" : "done",
                r.step, r.last_ckpt);
    print_loader_stats(&r);
done:
    if (rc == TRAIN_EDP && !r.agreed && started) { /* a lost or stuck rank: nothing more is written */
        char where[4200];
        snprintf(err + strlen(err), errlen - strlen(err), "; %s", trainer_dp_resume_hint(&r, where, sizeof where));
    }
    if (rc && r.world > 1) { /* every line of a rank says which */
        char tmp[1024];
        snprintf(tmp, sizeof tmp, "rank %d: %s", r.rank, err);
        snprintf(err, errlen, "%s", tmp);
    }
    if (rc && r.pub) { /* the error's line on the bus too; bin/trainer prints it to stderr */
        bus_log_t bus_only = r.log;
        bus_only.quiet = 1;
        bus_log(&bus_only, "%s", err);
    }
    *hard_exit = teardown(&r, rc, err);
    return rc;
}
