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
};

#define CKPT_MANIFEST_MAGIC "ft-checkpoint-manifest 1"

/* "<run_dir>/ckpt-%08lld" into buf; returns 0, or CKPT_EARG when it does not fit. */
int ckpt_dir_name(char *buf, size_t cap, const char *run_dir, int64_t step);

/* Writes checkpoint `step` atomically (see above). run_dir is created if missing (one level).
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

/* Newest complete checkpoint in run_dir (fully verified). Returns 1 and fills out_path/step
 * when found, 0 when there is none (run_dir missing counts as none), negative when run_dir
 * cannot be read. Each newer directory that was skipped adds one line to warn, "skipping
 * <dir or file in it>: <why>" (lines separated by '\n'; warn may be NULL). */
int ckpt_find_latest(const char *run_dir, char *out_path, size_t cap, int64_t *step,
                     char *warn, size_t warnlen, char *err, size_t errlen);

/* Steps of the complete checkpoints in run_dir, ascending, in *steps (malloc'd, caller frees;
 * NULL when *n == 0). full: verify hashes (else manifest + sizes only). Skipped ones are
 * reported in warn as above. Returns 0 (run_dir missing: *n = 0) or negative. */
int ckpt_list(const char *run_dir, int full, int64_t **steps, int *n, char *warn,
              size_t warnlen, char *err, size_t errlen);

/* Loading from a checkpoint directory (as returned by ckpt_find_latest). These do not check
 * the MANIFEST (call ckpt_verify for that); the safetensors files carry their own xxh3. */
int ckpt_load_config(const char *dir, model_config_t *cfg, char *err, size_t errlen);
/* Copies every view's tensor (by name, exact shape) into view.data; all must exist. */
int ckpt_load_params(const char *dir, const tensor_view_t *views, int n, char *err, size_t errlen);
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

#endif
