/* model/checkpoint.h: training checkpoints as directories a Hugging Face loader understands.
 *
 *   <run_dir>/ckpt-<step, at least 8 digits>/
 *       config.json            LlamaConfig fields (+ our "ft_*" fields, ignored by transformers)
 *       model.safetensors      parameters under their HF Llama names
 *       optimizer.safetensors  AdamW moments "exp_avg.<name>", "exp_avg_sq.<name>" (if any)
 *       state.json             whatever JSON object the trainer hands in (step, cursor, RNGs...)
 *       MANIFEST               written last: size and XXH3-64 of every other file
 *
 * A checkpoint is written into ckpt-<step>.tmp/, every file fsynced, then the directory is
 * renamed to its final name and run_dir fsynced: after a crash there is either the complete
 * directory or a .tmp one that readers ignore and the next save removes. A directory counts as
 * a checkpoint only when its MANIFEST parses and every size and hash in it matches.
 * Full description: docs/FORMATS.md §3.
 *
 * All functions return 0 (or a count, where said) on success and a negative CKPT_E* code on
 * failure with one line in err ("<path>: <why>"). */
#ifndef MODEL_CHECKPOINT_H
#define MODEL_CHECKPOINT_H
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "model/config.h"
#include "model/tensor.h"

enum {
    CKPT_OK = 0,
    CKPT_EARG = -1,     /* bad argument */
    CKPT_EIO = -2,      /* a file or directory could not be read, written or renamed */
    CKPT_EFORMAT = -3,  /* a file is malformed (JSON, safetensors, MANIFEST) */
    CKPT_ECORRUPT = -4, /* MANIFEST and the files disagree (size, hash, missing file) */
    CKPT_ECONFIG = -5,  /* config.json parses but describes an impossible model */
    CKPT_EMISMATCH = -6,/* a tensor is missing or has another shape than the model's */
    CKPT_ENOMEM = -7,
    CKPT_EREFUSED = -8, /* a load callback refuses a sound checkpoint (not ours to resume, ...) */
};

#define CKPT_MANIFEST_MAGIC "ft-checkpoint-manifest 1"

/* "<run_dir>/ckpt-%08lld" into buf; returns 0, or CKPT_EARG when it does not fit. */
int ckpt_dir_name(char *buf, size_t cap, const char *run_dir, int64_t step);

/* Creates run_dir with its parents when missing and checks that a file can be created in it,
 * so a program can refuse an unusable directory before any work (one line in err). */
int ckpt_run_dir_prepare(const char *run_dir, char *err, size_t errlen);

/* Takes <run_dir>/.lock (flock, exclusive, not waiting) for the caller's lifetime, so that two
 * writers of one run directory (a second trainer started on a live run) are refused instead of
 * interleaving their checkpoints and metrics. The kernel drops the lock when the process dies,
 * however it dies, so a killed run never leaves a stale lock. *fd: the lock's descriptor, to be
 * closed at the end. Returns 0, CKPT_EREFUSED when another process holds it (its pid in err),
 * or CKPT_EIO. */
int ckpt_run_dir_lock(const char *run_dir, int *fd, char *err, size_t errlen);

/* Writes checkpoint `step` atomically (see above). run_dir is created if missing (parents too).
 * params: np views with HF names. opt_m/opt_v: nopt views each, named like the parameters they
 * belong to (nopt == 0 writes no optimizer file). state: any JSON object, or NULL for {}; it is
 * not modified or stolen. An existing ckpt-<step> is replaced atomically.
 * keep_last > 0: afterwards, complete checkpoints older than the newest keep_last (counting the
 * one just written, which is never deleted) are deleted; <= 0 keeps all.
 * out_path (may be NULL) receives the checkpoint's directory. */
int ckpt_save(const char *run_dir, int64_t step, const model_config_t *cfg,
              const tensor_view_t *params, int np, const tensor_view_t *opt_m,
              const tensor_view_t *opt_v, int nopt, const json_t *state, int keep_last,
              char *out_path, size_t cap, char *err, size_t errlen);

/* Checks dir's MANIFEST against the files: full != 0 hashes every byte, full == 0 checks only
 * the manifest itself and the file sizes (cheap). */
int ckpt_verify_ex(const char *dir, int full, char *err, size_t errlen);
static inline int ckpt_verify(const char *dir, char *err, size_t errlen) {
    return ckpt_verify_ex(dir, 1, err, errlen);
}

/* ---- Which checkpoint is usable: the one rule of every program (docs/FORMATS.md §3) ------
 *
 * A checkpoint directory is usable when its MANIFEST verifies in full (every size and hash)
 * AND the program's own load of it succeeds (config.json valid, every tensor present with its
 * shape, the safetensors' own xxh3, state.json). A MANIFEST recomputed over bad content thus
 * passes the first half and fails the second: the same verdict as a torn file. A program that
 * wants a run's checkpoint takes the newest usable one and reports every newer one it skipped,
 * one line each; a program handed one checkpoint (a path, a bus event) uses it or skips it.
 *
 * load: fills the caller's objects from dir; returns 0, a CKPT_E* code when dir is damaged
 * (EIO, EFORMAT, ECORRUPT, ECONFIG, EMISMATCH: the checkpoint is skipped), or CKPT_EREFUSED /
 * CKPT_ENOMEM when the caller cannot use a sound one (the search stops there). A load that
 * fails must leave nothing half-loaded that the next call would trip over. */
typedef int (*ckpt_load_fn)(void *ctx, const char *dir, char *err, size_t errlen);

/* 1 when a code (from ckpt_verify or a load) says the checkpoint itself is damaged. */
int ckpt_is_damage(int code);

/* The rule for one directory: full verification, then load(ctx, dir) (NULL: verify only).
 * Returns 0 or the failing code, with "<path>: <why>" in err. */
int ckpt_open(const char *dir, ckpt_load_fn load, void *ctx, char *err, size_t errlen);

typedef struct {
    char path[4096];     /* the checkpoint taken */
    int64_t step;
    int n_skipped;       /* damaged directories newer than it (every one when none was usable) */
    char skipped[1024];  /* their names, ", "-separated ("..." when they do not fit) */
    char warn[4096];     /* one line per skipped one, "skipping <path>: <why>", '\n'-separated */
} ckpt_pick_t;

/* The newest usable checkpoint of run_dir, loaded with load (NULL: verify only). Returns 1 when
 * one was taken, 0 when none is usable (run_dir missing or empty: n_skipped == 0), negative
 * when run_dir cannot be listed or load stopped the search (err set; pick still lists what was
 * skipped before). */
int ckpt_open_newest(const char *run_dir, ckpt_load_fn load, void *ctx, ckpt_pick_t *pick, char *err,
                     size_t errlen);

/* The same among the checkpoints older than step `below` only: for a caller that finds a taken
 * checkpoint damaged only after the search (the trainer learns the dataset's epoch length from
 * a loader after loading, and a data cursor beyond it is damage) and goes on from there. */
int ckpt_open_newest_below(const char *run_dir, int64_t below, ckpt_load_fn load, void *ctx, ckpt_pick_t *pick,
                           char *err, size_t errlen);

/* ckpt_open_newest(run_dir, NULL, ...) with its results in separate buffers (warn may be NULL). */
int ckpt_find_latest(const char *run_dir, char *out_path, size_t cap, int64_t *step,
                     char *warn, size_t warnlen, char *err, size_t errlen);

/* Steps of the complete checkpoints in run_dir, ascending, in *steps (malloc'd, caller frees;
 * NULL when *n == 0). full: verify hashes (else manifest + sizes only). Skipped ones are
 * reported in warn as above. Returns 0 (run_dir missing: *n = 0) or negative. */
int ckpt_list(const char *run_dir, int full, int64_t **steps, int *n, char *warn,
              size_t warnlen, char *err, size_t errlen);

/* Loading from a checkpoint directory, the pieces a load callback is made of. These do not
 * check the MANIFEST (ckpt_open does); the safetensors files carry their own xxh3. */
/* config.json, validated, and checked against model.safetensors's header before anything is
 * allocated: the decoder blocks its tensor names hold must be num_hidden_layers, the token
 * embedding (vocab_size, hidden_size) (CKPT_EMISMATCH otherwise). */
int ckpt_load_config(const char *dir, model_config_t *cfg, char *err, size_t errlen);
/* Copies every view's tensor (by name, exact shape) into view.data; all must exist, and every
 * tensor of the file must be one of them: a tensor the model does not have (a stray stack:
 * encoder.* in a baseline, another family's, a name nobody writes) is refused by name
 * (CKPT_EMISMATCH), not ignored. ckpt_load_optimizer holds its moments to the same rule. */
int ckpt_load_params(const char *dir, const tensor_view_t *views, int n, char *err, size_t errlen);
/* The views' tensors only, the file's others not looked at: part of a model from another's
 * checkpoint (a memory model's encoder from an autoencoder's, mixers_load_encoder). */
int ckpt_load_params_some(const char *dir, const tensor_view_t *views, int n, char *err, size_t errlen);
int ckpt_load_optimizer(const char *dir, const tensor_view_t *m, const tensor_view_t *v, int n,
                        char *err, size_t errlen);
/* *state receives a new reference to the state.json object (caller json_decref's it). */
int ckpt_load_state(const char *dir, json_t **state, char *err, size_t errlen);

/* config.json <-> model_config_t (model/checkpoint_config.c). to_json returns a new object
 * (NULL on out-of-memory). from_json reads HF names, fills defaults HF would (num_key_value_heads
 * = num_attention_heads, tie_word_embeddings = false, ft_model_kind = "llama"), then validates.
 * validate: positive sizes, heads divide hidden, kv heads divide heads, even head_dim (RoPE
 * rotates pairs), eos id inside the vocabulary, positive finite eps/theta, latent fields for
 * the Free Transformer. err names the offending field. */
json_t *ckpt_config_to_json(const model_config_t *cfg);
int ckpt_config_from_json(const json_t *j, model_config_t *cfg, char *err, size_t errlen);
int ckpt_config_validate(const model_config_t *cfg, char *err, size_t errlen);
/* A float as the shortest decimal that reads back as the same float (1e-5f is written
 * "1e-05"), so config.json reads like one a person wrote. NULL on out-of-memory. */
json_t *ckpt_json_real(float x);

#endif
