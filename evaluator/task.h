/* evaluator/task.h: what an evaluation computes on one checkpoint.
 *
 * A task is opened once per evaluator process (its data read and checked up front, so a bad
 * file fails before any checkpoint is touched), then run on each checkpoint's model. Each
 * kind lives in its own file: task_val.c (held-out cross-entropy, perplexity, bits per byte),
 * task_mc.c (multiple choice), task_em.c (generative exact match), task_synth.c (the Figure 4
 * measures on the synthetic sequences), task_code.c (pass@k of generated code run in the
 * sandbox). The numbers go into a
 * values map, the same one the MSG_EVAL event and the results file carry.
 * Formats and definitions: docs/evaluator.md. */
#ifndef EVALUATOR_TASK_H
#define EVALUATOR_TASK_H
#include <stddef.h>
#include <stdint.h>

#include "bus/wire.h"
#include "evaluator/lm.h"
#include "evaluator/sandbox.h"

typedef struct {
    uint32_t n;
    wire_kv_t kv[WIRE_MAX_KV];
} eval_values_t;

typedef struct {
    const char *task;       /* "val", "mc", "em", "synth" or "code" */
    /* val */
    const char *data;       /* dataset directory */
    long long val_docs;     /* > 0: the last N documents of data (the loader's val split);
                               0: every document of data (a separate held-out dataset) */
    int batches;            /* batches evaluated (0: the whole split) */
    int batch;              /* rows per forward (all tasks) */
    int seq_len;            /* tokens per row for val (0: the model's max_position_embeddings) */
    long long seed;         /* val: order of the documents; em: sampling */
    /* mc, em */
    const char *file;       /* JSONL task file */
    const char *vocab;      /* tokenizer spec for bpe_vocab_open: bytes, gpt2, a file... */
    int limit;              /* first N items only (0: all); synth: groups (0: 10) */
    float temperature;      /* em, code: 0 = greedy */
    int eot_prefix;         /* synth: rows start with end-of-text (pack-trained models) */
    /* Free Transformer */
    int iw_samples;         /* val: K posterior samples per row (ELBO and importance-weighted bound) */
    int draws;              /* val: prior draws for ce_prior; mc: prior draws averaged per choice */
    /* Latent-thought LM */
    const char *inner_steps_list; /* val: "0,4,16,64": the bound after each K (NULL: 0 and K) */
    int inner_steps;        /* K of the posterior's inference (0: the checkpoint's) */
    float fast_lr;          /* its peak rate (0: the checkpoint's final fast rate) */
    /* autoencoders and memory models (seed 004) */
    int bits_per_param;     /* val: b_p, bits each float of the stored embedding takes (4, 8, 16, 32) */
    /* code (task_code.c; mc and em also read "subject" and GSM8K lines, see their files) */
    int samples;            /* n completions per problem (0: 1) */
    int max_new;            /* tokens per completion (0: 256); em: GSM8K's max_tokens */
    float top_p;            /* nucleus (1: all) */
    const char *stop_words; /* JSON array replacing the format's stop sequences */
    const char *completions;/* score the completions of this JSONL file instead of generating */
    int canonical;          /* score each problem's canonical solution instead */
    const char *samples_out;/* every sample's completion and end, one JSON line each */
    sandbox_cfg_t sandbox;  /* limits, interpreter, jobs (0: the online CPUs) */
    /* em on GSM8K lines */
    const char *fewshot;    /* worked examples (GSM8K lines) put before every question */
    int shots;              /* the first N of them (0: all) */
} eval_task_cfg_t;

#define EVAL_MAX_INNER_STEPS 8   /* entries of --inner-steps-list */
/* Parses "0,4,16,64" (ascending, each 0..100000, at most EVAL_MAX_INNER_STEPS) into ks; the
 * count, or EVAL_EARG with one line in err. */
int eval_parse_steps(const char *list, int *ks, char *err, size_t errlen);
/* Applies a task's --inner-steps / --fast-lr to an LTM's eval_lm_t (others: nothing). */
void eval_ltm_settings(eval_lm_t *lm, int inner_steps, float fast_lr);

typedef struct eval_task eval_task_t;

int eval_task_open(eval_task_t **t, const eval_task_cfg_t *cfg, char *err, size_t errlen);
void eval_task_close(eval_task_t **t);
/* The largest batch shape the task will ask for (Tmax 0: whatever the model allows). */
void eval_task_shape(const eval_task_t *t, int *Bmax, int *Tmax);
/* Runs the task on lm; out is reset and filled. stop (may be NULL) is polled between
 * forwards: when it becomes non-zero the run ends with EVAL_EINTR. lm may be NULL for the
 * code task with given completions (eval_task_needs_model says when). */
int eval_task_run(eval_task_t *t, eval_lm_t *lm, eval_values_t *out, volatile int *stop,
                  char *err, size_t errlen);
/* 0 when the task scores without a model (code with --completions or --canonical). */
int eval_task_needs_model(const eval_task_cfg_t *cfg);

/* Adds name=value (an error only when the map is full, which the tasks never reach). */
int eval_values_add(eval_values_t *v, const char *name, double value);
/* The value called name, or NAN. */
double eval_values_get(const eval_values_t *v, const char *name);

/* ---- the kinds (task.c dispatches; not for direct use) ---------------------------------- */
typedef struct {
    int (*open)(void **self, const eval_task_cfg_t *cfg, char *err, size_t errlen);
    void (*close)(void **self);
    void (*shape)(const void *self, int *Bmax, int *Tmax);
    int (*run)(void *self, eval_lm_t *lm, eval_values_t *out, volatile int *stop, char *err,
               size_t errlen);
} eval_task_ops_t;
extern const eval_task_ops_t eval_task_val, eval_task_mc, eval_task_em, eval_task_synth, eval_task_code;
#endif
