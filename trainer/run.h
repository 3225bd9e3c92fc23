/* trainer/run.h: the state of one training run, shared by the loop (train.c) and its
 * data-parallel part (train_dp.c); internal to trainer/. */
#ifndef TRAINER_RUN_H
#define TRAINER_RUN_H
#include <stdint.h>

#include "bus/log.h"
#include "loader/client.h"
#include "model/adamw.h"
#include "model/config.h"
#include "model/device.h"
#include "model/family.h"
#include "model/schedule.h"
#include "trainer/data.h"
#include "trainer/dp.h"
#include "trainer/dp_train.h"
#include "trainer/opts.h"

typedef struct {
    const trainer_opts_t *o;
    void *zctx, *pub;
    bus_log_t log;              /* its lines: stderr, and log/trainer once pub is open (bus/log.h) */
    trainer_data_t *data;
    const model_family_t *fam;
    void *model;
    model_config_t cfg;
    adamw_t *opt;               /* one process; under data parallelism dpt holds the optimizer */
    device_t *dev;              /* where the model trains */
    schedule_t sched;
    int np;
    tensor_view_t *params, *grads, *mom1, *mom2;
    char run_dir[1024], last_ckpt[4096];
    long long step;          /* optimizer steps done */
    long long saved_step;    /* step of the newest checkpoint written or loaded, -1: none */
    double tokens_seen;      /* over every rank */
    uint64_t start_epoch, start_dstep; /* the data cursor to start from (a checkpoint's) */
    long long resumed_from;  /* step of the checkpoint --resume loaded, -1: none */
    long long start_row;     /* a resumed checkpoint's cursor as a row of its epoch (checked in setup) */
    char resume_skipped[1024]; /* checkpoints --resume skipped in earlier passes (setup's retry) */
    uint64_t bound_epoch, bound_dstep; /* the data cursor at the last step boundary (checkpoints) */
    loader_identity_t data_id;  /* the run's dataset: recorded in state.json, checked on resume */
    int have_data_id;           /* a resumed checkpoint recorded it (older ones did not) */
    uint32_t *inputs, *targets; /* (B,T) each, cut from the loader's (B,T+1) rows */
    /* test hooks (README, "Fault injection"): $FT_TRAINER_FAULT_NAN_STEP makes that step's
     * loss NaN; $FT_TRAINER_FAULT_KILL_AFTER_CKPT=S raises SIGKILL once checkpoint S is
     * complete, so a test kills at an exact point instead of racing a poll;
     * $FT_TRAINER_FAULT_DP_PERTURB=R:S changes one weight of rank R after step S */
    long long fault_nan_step, fault_kill_ckpt;
    int fault_perturb_rank;
    long long fault_perturb_step;
    /* data parallelism (NULL dp: one process, rank 0 of 1) */
    dp_t *dp;
    dp_train_t *dpt;
    int rank, world;
    int agreed;                 /* the failure returned was reached by every rank together */
    int stop;                   /* every rank agreed to stop after this step (a signal) */
    family_metrics_t fm;        /* the last step's family metrics: the mean over the ranks */
    double rank_loss;           /* this rank's own loss of the last step */
    double data_wait;           /* seconds this step waited for its batches (metrics "data_wait_s") */
    int metrics_fd;             /* <run_dir>/metrics.jsonl, appended (rank 0; -1: none) */
    int lock_fd;                /* <run_dir>/.lock held while the run lives (rank 0; -1: none) */
} run_t;

/* ---- train_dp.c: the data-parallel parts of a run ---------------------------------------------- */
/* Forms the group (after the device opened, so a rank without its GPU fails before the
 * others wait for it). A no-op without --dp. */
int trainer_dp_open(run_t *r, char *err, size_t errlen);
/* The device a rank trains on: "cuda" becomes "cuda:<local rank>" under mpirun (the launcher's
 * environment says it before MPI starts). */
const char *trainer_dp_device(const run_t *r, char *buf, size_t cap);
/* After rank 0 resumed (or not) and probed the loaders: every rank adopts rank 0's model config,
 * step, data position and dataset, and the others probe their loaders for that dataset. */
int trainer_dp_agree_setup(run_t *r, int *resumed, trainer_data_info_t *info, char *err, size_t errlen);
/* After every rank built its model: rank 0's weights (and resumed moments) to every rank, the
 * optimizer's step count, the first weight check. */
int trainer_dp_start(run_t *r, int resumed, char *err, size_t errlen);
/* After a rank's micro-batches: every rank learns every rank's outcome (status rc, loss, the
 * family metrics, a signal). Returns the group's verdict: 0 to go on with the update, or the
 * failure of the lowest failing rank (its own line on that rank, a line naming it elsewhere);
 * LOADER_EIO when a signal interrupted a rank's wait for data (every rank stops without this
 * step). *loss becomes the mean over the ranks. */
int trainer_dp_agree_step(run_t *r, int rc, double *loss, char *err, size_t errlen);
/* Every --dp-check-every steps: the weights' checksums compared; a difference stops the run. */
int trainer_dp_check(run_t *r, char *err, size_t errlen);
/* "resume from <rank 0's newest checkpoint> with --resume (any world size)", for the line of a
 * run that stops without saving. */
const char *trainer_dp_resume_hint(const run_t *r, char *buf, size_t cap);
/* The state.json record of the data-parallel layout and the resume rule for a checkpoint of
 * another world size: see train_dp.c. */
int trainer_dp_restore_position(run_t *r, long long batch, long long world, long long accum, long long dstep,
                                char *err, size_t errlen);
#endif
