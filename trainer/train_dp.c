/* trainer/train_dp.c: what a training run does differently when it spans ranks (see run.h,
 * trainer/dp.h for the collectives, trainer/dp_train.h for the step).
 *
 * Rank 0 is the run's memory: it alone reads (--resume) and writes checkpoints and the run
 * directory, and it tells the others where the run is (model config, step, data position,
 * dataset) before their first step; the others may be on machines without the run directory.
 * Every decision that changes the control flow (stop on a signal, a rank's failure, a weight
 * check) is taken from values every rank has exchanged, so all ranks take the same branch and
 * no rank waits for a collective the others skipped. A failure one rank meets alone ends that
 * rank; the heartbeat tells the others (trainer/dp_link.h). */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bus/bus.h"
#include "common/errmsg.h"
#include "loader/batch.h"
#include "model/checkpoint.h"
#include "model/precision.h"
#include "trainer/run.h"
#include "trainer/train.h"

static int train_status(int dp_rc) {
    return dp_rc == DP_EARG || dp_rc == DP_ESETUP ? TRAIN_ESETUP : dp_rc == DP_ENOMEM ? TRAIN_EMODEL : TRAIN_EDP;
}

/* The options every rank must share (the rendezvous compares them): the model, the data
 * stream, the schedule, and the steps at which every rank takes part in a collective
 * (checkpoints, weight checks). Not: threads, logging, the GPU index. */
static void shared_flags(const trainer_opts_t *o, char *buf, size_t cap) {
    snprintf(buf, cap,
             "model=%s d_model=%d layers=%d heads=%d kv_heads=%d d_ff=%d max_seq=%d untied=%d rope_theta=%g "
             "norm_eps=%g seed=%lld latent_bits=%d kappa=%g kappa_unit=%s vocab_size=%d batch=%d seq_len=%d "
             "accum=%d layout=%s data_seed=%lld steps=%lld lr=%g min_lr=%g warmup=%d wd=%g decay_embeddings=%d "
             "beta1=%g beta2=%g eps=%g clip=%g dp=%s zero=%d resume=%d ckpt_every=%d dp_check_every=%d device=%.4s "
             "precision=%s window=%d latent_vectors=%d inner_steps=%d fast_lr=%g fast_lr_end=%g mixer_heads=%d "
             "mixer_kernel=%d no_mask=%d no_mask_encoder=%d encoder_layers=%d embed_dim=%d unroll=%d encoder=%s "
             "embed_range=%g embed_noise_bits=%d memory_start=%d",
             o->model, o->d_model, o->n_layers, o->n_heads, o->n_kv_heads, o->d_ff, o->max_seq, o->untied,
             o->rope_theta, o->norm_eps, o->seed, o->latent_bits, o->kappa, o->kappa_unit, o->vocab_size, o->B, o->T,
             o->accum, o->layout, o->data_seed, o->steps, o->lr, o->min_lr, o->warmup, o->wd, o->decay_embeddings,
             o->beta1, o->beta2, o->eps, o->clip, o->dp, o->zero, o->resume, o->ckpt_every, o->dp_check_every,
             o->device, o->precision ? o->precision : "-", o->attn_window, o->latent_vectors, o->inner_steps,
             o->fast_lr, o->fast_lr_end, o->mixer_heads, o->mixer_kernel, o->no_mask, o->no_mask_encoder,
             o->encoder_layers, o->embed_dim, o->unroll, o->encoder ? o->encoder : "-", o->embed_range,
             o->embed_noise_bits, o->memory_start);
}

int trainer_dp_open(run_t *r, char *err, size_t errlen) {
    const trainer_opts_t *o = r->o;
    dp_kind kind = DP_NONE;
    dp_kind_parse(o->dp, &kind);
    if (kind == DP_NONE) return 0;
    char flags[2048];
    shared_flags(o, flags, sizeof flags);
    dp_opts_t d = {.kind = kind, .rank = o->rank, .world = o->world, .rendezvous = o->rendezvous, .run = o->run,
                   .flags = flags, .timeout_s = o->dp_timeout, .lost_after_s = o->dp_lost_after, .zctx = r->zctx};
    int rc = dp_open(&r->dp, &d, err, errlen);
    if (r->dp && dp_world(r->dp) > 0) {
        r->rank = dp_rank(r->dp);
        r->world = dp_world(r->dp);
    }
    if (rc) return train_status(rc);
    if (r->world > 1) {
        char host[128] = "?";
        gethostname(host, sizeof host - 1);
        bus_log(&r->log, "rank %d of %d (%s): pid %d on %s", r->rank, r->world, o->dp, (int)getpid(), host);
    }
    return 0;
}

const char *trainer_dp_device(const run_t *r, char *buf, size_t cap) {
    int local = dp_launcher_local_rank();
    if (strcmp(r->o->dp, "none") && !strcmp(r->o->device, "cuda") && local >= 0) { /* one GPU per rank of a machine */
        snprintf(buf, cap, "cuda:%d", local);
        return buf;
    }
    return r->o->device;
}

/* ---- rank 0's record of where the run is ------------------------------------------------------ */

#define RECORD_BYTES 16384

static json_t *identity_json(const loader_identity_t *d) {
    return json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I}", "path", d->dataset, "tokenizer", d->tokenizer,
                     "tokenizer_hash", d->tokenizer_hash, "vocab_size", (json_int_t)d->vocab_size, "eot_id",
                     (json_int_t)d->eot_id, "n_docs", (json_int_t)d->n_docs, "n_tokens", (json_int_t)d->n_tokens,
                     "n_bytes", (json_int_t)d->n_bytes);
}

static int identity_from_json(json_t *j, loader_identity_t *d) {
    const char *path, *tok, *hash;
    json_int_t v[5];
    if (json_unpack(j, "{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I}", "path", &path, "tokenizer", &tok, "tokenizer_hash", &hash,
                    "vocab_size", &v[0], "eot_id", &v[1], "n_docs", &v[2], "n_tokens", &v[3], "n_bytes", &v[4]))
        return -1;
    memset(d, 0, sizeof *d);
    snprintf(d->dataset, sizeof d->dataset, "%s", path);
    snprintf(d->tokenizer, sizeof d->tokenizer, "%s", tok);
    snprintf(d->tokenizer_hash, sizeof d->tokenizer_hash, "%s", hash);
    d->vocab_size = (uint32_t)v[0], d->eot_id = (uint32_t)v[1];
    d->n_docs = (uint64_t)v[2], d->n_tokens = (uint64_t)v[3], d->n_bytes = (uint64_t)v[4];
    return 0;
}

static int write_record(const run_t *r, int resumed, const trainer_data_info_t *info, char *buf) {
    json_t *j = json_pack("{s:b, s:I, s:I, s:I, s:f, s:s, s:o, s:s}", "resumed", resumed, "step", (json_int_t)r->step,
                          "epoch", (json_int_t)r->start_epoch, "dstep", (json_int_t)r->start_dstep, "tokens_seen",
                          r->tokens_seen, "ckpt", r->last_ckpt, "dataset", identity_json(&info->id), "precision",
                          precision_name(r->dev->precision));
    if (j && resumed && json_object_set_new(j, "config", ckpt_config_to_json(&r->cfg))) json_decref(j), j = NULL;
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    int ok = s && strlen(s) < RECORD_BYTES;
    if (ok) snprintf(buf, RECORD_BYTES, "%s", s);
    free(s);
    return ok ? 0 : -1;
}

static int read_record(run_t *r, const char *buf, int *resumed, loader_identity_t *id, char *err, size_t errlen) {
    json_error_t je;
    json_t *j = json_loads(buf, 0, &je), *cfg = NULL, *ds = NULL;
    int res = 0, rc = 0;
    json_int_t step, epoch, dstep;
    double tokens;
    const char *ckpt, *prec;
    precision_t p;
    char why[256];
    if (!j || json_unpack(j, "{s:b, s:I, s:I, s:I, s:F, s:s, s:o, s:s, s?o}", "resumed", &res, "step", &step, "epoch", &epoch,
                          "dstep", &dstep, "tokens_seen", &tokens, "ckpt", &ckpt, "dataset", &ds, "precision", &prec,
                          "config", &cfg) ||
        identity_from_json(ds, id) || precision_parse(prec, &p, NULL, 0))
        rc = err_fail(err, errlen, TRAIN_EDP, "rank 0's record of the run does not parse");
    else if (res && (!cfg || ckpt_config_from_json(cfg, &r->cfg, err, errlen)))
        rc = TRAIN_EDP;
    /* rank 0's precision (a resume takes the checkpoint's unless --precision is given): every
     * rank computes its rows as rank 0 does */
    else if (p != r->dev->precision && device_set_precision(r->dev, p, why, sizeof why))
        rc = err_fail(err, errlen, TRAIN_ESETUP, "rank 0 trains at precision %s, which this rank cannot: %s", prec, why);
    if (!rc) {
        *resumed = res;
        r->step = step, r->start_epoch = (uint64_t)epoch, r->start_dstep = (uint64_t)dstep, r->tokens_seen = tokens;
        snprintf(r->last_ckpt, sizeof r->last_ckpt, "%s", ckpt);
        if (res) r->saved_step = step;
    }
    json_decref(j);
    return rc;
}

int trainer_dp_agree_setup(run_t *r, int *resumed, trainer_data_info_t *info, char *err, size_t errlen) {
    char *rec = calloc(1, RECORD_BYTES);
    if (!rec) return err_fail(err, errlen, TRAIN_EMODEL, "out of memory");
    int rc = 0;
    if (r->rank == 0 && write_record(r, *resumed, info, rec)) rc = err_fail(err, errlen, TRAIN_EMODEL, "the run's record does not fit");
    if (!rc) rc = dp_host_broadcast(r->dp, rec, RECORD_BYTES, 0, err, errlen) ? TRAIN_EDP : 0;
    if (!rc && r->rank != 0) {
        loader_identity_t id;
        if (!(rc = read_record(r, rec, resumed, &id, err, errlen))) {
            r->data_id = id;
            r->have_data_id = 1;
            /* this rank's loaders must serve rank 0's dataset */
            if (trainer_data_probe(r->data, &id, info, err, errlen)) rc = TRAIN_ESETUP;
        }
    }
    free(rec);
    return rc;
}

/* ---- the start and every step ------------------------------------------------------------------- */

int trainer_dp_start(run_t *r, int resumed, char *err, size_t errlen) {
    dp_train_set_steps(r->dpt, r->step);
    int rc = dp_train_sync(r->dpt, resumed, err, errlen);
    if (rc) return train_status(rc);
    dp_set_step(r->dp, r->step);
    return r->o->dp_check_every ? trainer_dp_check(r, err, errlen) : 0;
}

/* What each rank tells the others after its micro-batches. */
typedef struct {
    int32_t status;       /* 0, a TRAIN_E* code, or INTERRUPTED */
    int32_t stop;         /* a signal asked this rank to stop */
    int32_t n;            /* family metrics */
    int32_t pad;
    double loss;
    double fm[FAMILY_MAX_METRICS];
} step_record_t;
#define INTERRUPTED 1

static const char *what_failed(int status) {
    switch (status) {
    case TRAIN_ENAN: return "its loss is not finite";
    case TRAIN_EDATA: return "its loaders failed";
    case TRAIN_EMODEL: return "its model failed";
    default: return "it failed";
    }
}

int trainer_dp_agree_step(run_t *r, int rc, double *loss, char *err, size_t errlen) {
    step_record_t mine = {0}, *all = calloc(r->world, sizeof *all);
    if (!all) return err_fail(err, errlen, TRAIN_EMODEL, "out of memory");
    family_metrics_t fm = {0};
    if (!rc && r->fam->metrics) r->fam->metrics(r->model, &fm);
    mine.status = rc == LOADER_EIO && bus_signal_received() ? INTERRUPTED : rc;
    mine.stop = bus_signal_received();
    mine.loss = *loss;
    mine.n = fm.n;
    for (int i = 0; i < fm.n; i++) mine.fm[i] = fm.kv[i].value;
    char own[1024];
    snprintf(own, sizeof own, "%s", rc ? err : "");
    int xrc = dp_host_allgather(r->dp, &mine, all, sizeof mine, err, errlen);
    if (xrc) {
        free(all);
        return train_status(xrc);
    }
    int failed = -1, interrupted = 0;
    double sum = 0;
    for (int k = 0; k < r->world; k++) {
        if (all[k].status == INTERRUPTED) interrupted = 1;
        else if (all[k].status && failed < 0) failed = k;
        r->stop |= all[k].stop != 0;
        sum += all[k].loss;
    }
    r->agreed = 1; /* whatever is returned now, every rank returns its like */
    int out = 0;
    if (failed >= 0) {
        if (mine.status && mine.status != INTERRUPTED) {
            snprintf(err, errlen, "%s", own); /* this rank's own line */
            out = mine.status;
        } else {
            out = all[failed].status;
            err_fail(err, errlen, out, "rank %d stopped the run at step %lld: %s (its own line says more)", failed,
                     r->step + 1, what_failed(all[failed].status));
        }
    } else if (interrupted) {
        out = LOADER_EIO; /* a signal while waiting for data: every rank stops without this step */
        r->stop = 1;
    } else {
        r->agreed = 0;
        r->rank_loss = mine.loss;
        *loss = sum / r->world;
        memset(&r->fm, 0, sizeof r->fm);
        r->fm = fm;
        for (int i = 0; i < fm.n; i++) {
            double s = 0;
            for (int k = 0; k < r->world; k++) s += all[k].n == fm.n ? all[k].fm[i] : 0;
            r->fm.kv[i].value = s / r->world;
        }
    }
    free(all);
    return out;
}

int trainer_dp_check(run_t *r, char *err, size_t errlen) {
    uint64_t mine = dp_train_checksum(r->dpt), *all = calloc(r->world, sizeof *all);
    if (!all) return err_fail(err, errlen, TRAIN_EMODEL, "out of memory");
    int rc = dp_host_allgather(r->dp, &mine, all, sizeof mine, err, errlen);
    if (rc) {
        free(all);
        return train_status(rc);
    }
    int same = 1;
    for (int k = 1; k < r->world; k++) same &= all[k] == all[0];
    if (!same) {
        char list[512] = "";
        for (int k = 0; k < r->world && strlen(list) < sizeof list - 40; k++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%srank %d %016" PRIx64, k ? ", " : "", k, all[k]);
        r->agreed = 1; /* every rank compared the same numbers */
        char where[4200];
        rc = err_fail(err, errlen, TRAIN_EDP, "the weights differ across ranks after step %lld (checksums %s): a rank's "
                      "device or memory is faulty, or a bug; stopped without saving; %s", r->step, list,
                      trainer_dp_resume_hint(r, where, sizeof where));
    }
    free(all);
    return rc;
}

const char *trainer_dp_resume_hint(const run_t *r, char *buf, size_t cap) {
    if (r->rank != 0) snprintf(buf, cap, "resume from rank 0's newest checkpoint with --resume (any world size)");
    else if (r->last_ckpt[0]) snprintf(buf, cap, "resume from %s with --resume (any world size)", r->last_ckpt);
    else snprintf(buf, cap, "no checkpoint was written yet");
    return buf;
}

/* ---- resuming under another world size ------------------------------------------------------------ */

/* The data position is global: the checkpoint is at loader step `dstep` of batch x world rows,
 * i.e. row dstep*batch*world of its epoch's row sequence (loader/batch.h), which is the same
 * whatever B and W. This run continues at that row, in steps of B*W rows; the global batch
 * (rows per optimizer step) must stay, so the schedule and the optimizer see the same steps. */
int trainer_dp_restore_position(run_t *r, long long batch, long long world, long long accum, long long dstep,
                                char *err, size_t errlen) {
    const trainer_opts_t *o = r->o;
    long long was = batch * world * accum, now = (long long)o->B * r->world * o->accum;
    if (was != now)
        return err_fail(err, errlen, CKPT_EREFUSED,
                        "resume: global batch %lld (--batch %d x %d rank%s x --accum %d) differs from the checkpoint's "
                        "%lld (--batch %lld x %lld rank%s x --accum %lld); another world size resumes with the same "
                        "--batch x ranks x --accum", now, o->B, r->world, r->world == 1 ? "" : "s", o->accum, was, batch,
                        world, world == 1 ? "" : "s", accum);
    long long rows_was = batch * world, rows_now = (long long)o->B * r->world, row = dstep * rows_was;
    r->start_row = row;
    r->start_dstep = (uint64_t)((row + rows_now - 1) / rows_now);
    if (rows_was != rows_now)
        bus_log(&r->log, "data position: row %lld of the epoch (the checkpoint's step %lld of %lld x %lld rows) is "
                "step %llu of %d x %d rows%s", row, dstep, batch, world, (unsigned long long)r->start_dstep, o->B,
                r->world, row % rows_now ? " (the rows up to it skipped)" : "");
    return 0;
}
