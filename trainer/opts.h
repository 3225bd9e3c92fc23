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
    const char *precision;     /* "fp32" | "bf16" | "tf32"; NULL: fp32, or the checkpoint's on --resume */
    /* data */
    const char *loaders;       /* comma-separated loader endpoints */
    int discover;              /* also use loaders announced on the bus */
    const char *layout;        /* "pack" | "pad" */
    int B, T, accum;
    long long data_seed;
    int window, timeout_ms;    /* window: batch requests kept in flight (--in-flight) */
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
    /* Latent-thought LM (--model ltm, model/ltm.h) */
    int attn_window;           /* --window: self-attention sees the W newest positions (0: all) */
    int latent_vectors;        /* m per layer */
    int inner_steps;           /* K fast AdamW steps per batch */
    float fast_lr, fast_lr_end;/* the fast rate at the first step, rising linearly to the end one */
    /* masked mixers (--model mixer, mixer-ae, llama-ae, mixer-mem, llama-mem; seed 004) */
    int mixer_heads, mixer_kernel;
    int no_mask, no_mask_encoder;
    int encoder_layers;        /* 0: --layers */
    int embed_dim;             /* 0: --d-model (no compression) */
    int unroll;
    const char *encoder;       /* memory models: the encoder's checkpoint (or its run dir) */
    int freeze_encoder, memory_start;
    float embed_range;         /* the stored embedding clamped to [-R, R] (0: unbounded) */
    int embed_noise_bits;      /* trained with the noise of rounding to b bits (0: none) */
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

#define TRAINER_NFLAGS 76
/* Fills defaults and the flag table describing o (flags must hold TRAINER_NFLAGS). Returns the
 * number of flags. */
int trainer_opts_init(trainer_opts_t *o, flag_t *flags);
/* Cross-field checks that do not need the dataset (T vs RoPE table, heads, ...). */
int trainer_opts_check(const trainer_opts_t *o, char *err, size_t errlen);
/* The model config the flags describe, for a dataset of vocab_size tokens and eot id. */
void trainer_opts_config(const trainer_opts_t *o, int vocab_size, int eot_id, model_config_t *cfg);
/* --kappa converted to nats (--kappa-unit bits: times ln 2). */
float trainer_opts_kappa_nats(const trainer_opts_t *o);
/* The training FLOPs line of a llama or LTM config (seed 003 §2.4's count) into buf: "" for
 * other kinds. */
void trainer_opts_flops_line(const model_config_t *cfg, int T, char *buf, size_t cap);
#endif
