/* trainer/opts.h: everything a training run is configured by (bin/trainer's flags). */
#ifndef TRAINER_OPTS_H
#define TRAINER_OPTS_H
#include <stddef.h>
#include <stdint.h>

#include "common/flags.h"
#include "model/config.h"

typedef struct {
    /* run */
    const char *run;           /* run name: bus topics metrics/<run>, ckpt/<run> */
    const char *run_dir;       /* checkpoints go here (default runs/<run>) */
    const char *model;         /* family name */
    int resume;
    int allow_restart;         /* --resume may start over when every checkpoint is damaged */
    long long steps;           /* optimizer steps in total (a resumed run continues to this) */
    int ckpt_every, keep;
    int log_every;             /* a plain log line every N steps when stderr is no terminal */
    int threads;
    const char *device;        /* "cpu", "cuda", "cuda:N" */
    /* data */
    const char *loaders;       /* comma-separated loader endpoints */
    int discover;              /* also use loaders announced on the bus */
    const char *layout;        /* "pack" | "pad" */
    int B, T, accum;
    long long data_seed;
    int window, timeout_ms;
    /* bus */
    const char *bus_pub, *bus_sub;
    /* model */
    int vocab_size;            /* 0: the dataset's */
    int d_model, n_layers, n_heads, n_kv_heads, d_ff, max_seq;
    int untied;
    float rope_theta, norm_eps;
    long long seed;
    /* Free Transformer (--model free) */
    int latent_bits;           /* H: Z is one-hot over 2^H */
    float kappa;               /* free-bits threshold per token, in kappa_unit */
    const char *kappa_unit;    /* "bits" | "nats" */
    /* optimizer */
    float lr, min_lr, wd, beta1, beta2, eps, clip;
    int warmup, decay_embeddings;
    /* data parallelism (trainer/dp.h, trainer/dp_train.h) */
    const char *dp;            /* "none", "mpi" (CPU ranks under mpirun), "nccl" (GPU ranks) */
    int rank, world;           /* -1 / 0: the launcher's (mpirun) */
    const char *rendezvous;    /* tcp://HOST:PORT that rank 0 binds (--dp nccl without mpirun) */
    int zero;                  /* 1: ZeRO-1, optimizer moments sharded over the ranks */
    int dp_check_every;        /* compare a weight checksum across ranks every N steps (0: never) */
    double dp_timeout, dp_lost_after; /* seconds: bound on a collective; heartbeat silence */
} trainer_opts_t;

#define TRAINER_NFLAGS 61
/* Fills defaults and the flag table describing o (flags must hold TRAINER_NFLAGS). Returns the
 * number of flags. */
int trainer_opts_init(trainer_opts_t *o, flag_t *flags);
/* Cross-field checks that do not need the dataset (T vs RoPE table, heads, ...). */
int trainer_opts_check(const trainer_opts_t *o, char *err, size_t errlen);
/* The model config the flags describe, for a dataset of vocab_size tokens and eot id. */
void trainer_opts_config(const trainer_opts_t *o, int vocab_size, int eot_id, model_config_t *cfg);
/* --kappa converted to nats (--kappa-unit bits: times ln 2). */
float trainer_opts_kappa_nats(const trainer_opts_t *o);
#endif
