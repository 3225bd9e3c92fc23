/* model/mixer_config.h: the masked-mixer families' part of config.json (seed 004).
 *
 * checkpoint_config.c hands the kinds MODEL_MIXER .. MODEL_LLAMA_MEM to these functions, so
 * the fields of one family group live in one file. The fields (docs/FORMATS.md §6):
 *   ft_model_kind        "mixer", "mixer-ae", "llama-ae", "mixer-mem", "llama-mem"
 *   ft_mixer_heads       h (mixer kinds)          ft_mixer_kernel     k (mixer kinds)
 *   ft_no_mask_encoder   bool (autoencoders, memory models)
 *   ft_no_mask_decoder   bool (every kind)
 *   ft_encoder_layers    encoder blocks (autoencoders, memory models)
 *   ft_embed_dim         d_e of the stored embedding (autoencoders, memory models)
 *   ft_unroll            bool (autoencoders)      ft_freeze_encoder   bool (memory models)
 *   ft_embed_range       R > 0: the stored embedding clamped to [-R, R] (autoencoders, memory
 *                        models; absent or 0: unbounded, as checkpoints before it)
 *   ft_embed_noise_bits  b: trained with the noise of rounding to b bits (absent or 0: none)
 * All return 0 or a negative CKPT_ECONFIG with one line in err naming the field. */
#ifndef MODEL_MIXER_CONFIG_H
#define MODEL_MIXER_CONFIG_H
#include <jansson.h>
#include <stddef.h>

#include "model/config.h"

/* Bounds of the stored embedding's codec (model/mixers.h): its range, and the bits of a
 * rounded code (beyond 24 a float holds no more levels; 32 means the float itself). */
#define MIXER_EMBED_RANGE_MAX 1e6f
#define MIXER_EMBED_BITS_MAX 24

/* 1 for the kinds of this file. */
int mixer_kind_is(model_kind k);
/* "mixer", "mixer-ae", ... for a kind of this file; NULL otherwise. */
const char *mixer_kind_name(model_kind k);
/* The kind called name; 0 and *k set, or -1 when it is none of these. */
int mixer_kind_parse(const char *name, model_kind *k);
/* Which parts a kind has. */
int mixer_kind_has_encoder(model_kind k);   /* autoencoders and memory models */
int mixer_kind_is_memory(model_kind k);
int mixer_kind_is_autoencoder(model_kind k);
int mixer_kind_uses_mixer(model_kind k);    /* mixer blocks (else Llama blocks) */
/* Writes the fields above for c's kind into j (an object from ckpt_config_to_json). 0 or -1
 * (out of memory). */
int mixer_config_to_json(const model_config_t *c, json_t *j);
/* Reads them from j into c (c->kind already set). */
int mixer_config_from_json(const json_t *j, model_config_t *c, char *err, size_t errlen);
/* The checks beyond ckpt_config_validate's: heads divide d_model, 1 <= k <= d_model / h,
 * 1 <= d_e <= d_model, encoder_layers >= 1, flags 0 or 1. */
int mixer_config_validate(const model_config_t *c, char *err, size_t errlen);
/* d_e of the stored embedding (embed_dim, or d_model when 0). */
int mixer_embed_dim(const model_config_t *c);
#endif
