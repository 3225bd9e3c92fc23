/* model/mixer_config.c: the masked-mixer kinds' config.json fields (see mixer_config.h). */
#include "model/mixer_config.h"

#include <string.h>

#include "common/errmsg.h"
#include "model/checkpoint.h"

/* "architectures" names no class transformers knows, so a mixer checkpoint fails to load
 * there instead of loading as a LlamaForCausalLM it is not. */
static const struct { model_kind kind; const char *name, *arch; } KINDS[] = {
    {MODEL_MIXER, "mixer", "FtMaskedMixerForCausalLM"},
    {MODEL_MIXER_AE, "mixer-ae", "FtMaskedMixerAutoencoder"},
    {MODEL_LLAMA_AE, "llama-ae", "FtLlamaAutoencoder"},
    {MODEL_MIXER_MEM, "mixer-mem", "FtMaskedMixerMemoryModel"},
    {MODEL_LLAMA_MEM, "llama-mem", "FtLlamaMemoryModel"},
};
#define N_KINDS (int)(sizeof KINDS / sizeof KINDS[0])

const char *mixer_kind_name(model_kind k) {
    for (int i = 0; i < N_KINDS; i++)
        if (KINDS[i].kind == k) return KINDS[i].name;
    return NULL;
}
int mixer_kind_is(model_kind k) { return mixer_kind_name(k) != NULL; }
int mixer_kind_parse(const char *name, model_kind *k) {
    for (int i = 0; i < N_KINDS; i++)
        if (name && !strcmp(KINDS[i].name, name)) return *k = KINDS[i].kind, 0;
    return -1;
}
int mixer_kind_is_memory(model_kind k) { return k == MODEL_MIXER_MEM || k == MODEL_LLAMA_MEM; }
int mixer_kind_is_autoencoder(model_kind k) { return k == MODEL_MIXER_AE || k == MODEL_LLAMA_AE; }
int mixer_kind_has_encoder(model_kind k) { return mixer_kind_is_memory(k) || mixer_kind_is_autoencoder(k); }
int mixer_kind_uses_mixer(model_kind k) {
    return k == MODEL_MIXER || k == MODEL_MIXER_AE || k == MODEL_MIXER_MEM;
}
int mixer_embed_dim(const model_config_t *c) { return c->embed_dim > 0 ? c->embed_dim : c->d_model; }

int mixer_config_to_json(const model_config_t *c, json_t *j) {
    int rc = 0;
#define SET(key, v) rc |= json_object_set_new(j, key, v)
    for (int i = 0; i < N_KINDS; i++)
        if (KINDS[i].kind == c->kind) SET("architectures", json_pack("[s]", KINDS[i].arch));
    if (mixer_kind_uses_mixer(c->kind)) {
        SET("ft_mixer_heads", json_integer(c->mixer_heads));
        SET("ft_mixer_kernel", json_integer(c->mixer_kernel));
    }
    SET("ft_no_mask_decoder", json_boolean(c->no_mask_decoder));
    if (mixer_kind_has_encoder(c->kind)) {
        SET("ft_no_mask_encoder", json_boolean(c->no_mask_encoder));
        SET("ft_encoder_layers", json_integer(c->encoder_layers));
        SET("ft_embed_dim", json_integer(mixer_embed_dim(c)));
    }
    if (mixer_kind_is_autoencoder(c->kind)) SET("ft_unroll", json_boolean(c->unroll));
    if (mixer_kind_is_memory(c->kind)) {
        SET("ft_freeze_encoder", json_boolean(c->freeze_encoder));
        SET("ft_memory_start", json_boolean(c->memory_start));
    }
    if (mixer_kind_has_encoder(c->kind)) {
        SET("ft_embed_range", ckpt_json_real(c->embed_range));
        SET("ft_embed_noise_bits", json_integer(c->embed_noise_bits));
    }
#undef SET
    return rc ? -1 : 0;
}

static int get_int(const json_t *j, const char *key, int *out, char *err, size_t errlen) {
    json_t *v = json_object_get(j, key);
    if (!json_is_integer(v)) return err_fail(err, errlen, CKPT_ECONFIG, "field \"%s\": missing or not an integer", key);
    json_int_t x = json_integer_value(v);
    if (x < 0 || x > (1 << 24)) return err_fail(err, errlen, CKPT_ECONFIG, "field \"%s\": %lld is out of range", key, (long long)x);
    *out = (int)x;
    return 0;
}
static int get_bool(const json_t *j, const char *key, int *out, char *err, size_t errlen) {
    json_t *v = json_object_get(j, key);
    if (!json_is_boolean(v)) return err_fail(err, errlen, CKPT_ECONFIG, "field \"%s\": missing or not true/false", key);
    *out = json_is_true(v);
    return 0;
}

int mixer_config_from_json(const json_t *j, model_config_t *c, char *err, size_t errlen) {
    int rc = 0;
    if (mixer_kind_uses_mixer(c->kind) &&
        ((rc = get_int(j, "ft_mixer_heads", &c->mixer_heads, err, errlen)) ||
         (rc = get_int(j, "ft_mixer_kernel", &c->mixer_kernel, err, errlen))))
        return rc;
    if ((rc = get_bool(j, "ft_no_mask_decoder", &c->no_mask_decoder, err, errlen))) return rc;
    if (mixer_kind_has_encoder(c->kind) &&
        ((rc = get_bool(j, "ft_no_mask_encoder", &c->no_mask_encoder, err, errlen)) ||
         (rc = get_int(j, "ft_encoder_layers", &c->encoder_layers, err, errlen)) ||
         (rc = get_int(j, "ft_embed_dim", &c->embed_dim, err, errlen))))
        return rc;
    if (mixer_kind_is_autoencoder(c->kind) && (rc = get_bool(j, "ft_unroll", &c->unroll, err, errlen))) return rc;
    if (mixer_kind_is_memory(c->kind) && (rc = get_bool(j, "ft_freeze_encoder", &c->freeze_encoder, err, errlen)))
        return rc;
    /* the start vector: absent in checkpoints written before it existed (none) */
    c->memory_start = 0;
    if (mixer_kind_is_memory(c->kind) && json_object_get(j, "ft_memory_start") &&
        (rc = get_bool(j, "ft_memory_start", &c->memory_start, err, errlen)))
        return rc;
    /* the embedding's codec: absent in checkpoints written before it existed (unbounded) */
    c->embed_range = 0;
    c->embed_noise_bits = 0;
    if (mixer_kind_has_encoder(c->kind)) {
        json_t *r = json_object_get(j, "ft_embed_range");
        if (r && !json_is_number(r)) return err_fail(err, errlen, CKPT_ECONFIG, "field \"ft_embed_range\": expected a number");
        if (r) c->embed_range = (float)json_number_value(r);
        if (json_object_get(j, "ft_embed_noise_bits") &&
            (rc = get_int(j, "ft_embed_noise_bits", &c->embed_noise_bits, err, errlen)))
            return rc;
    }
    return 0;
}

int mixer_config_validate(const model_config_t *c, char *err, size_t errlen) {
    const int D = c->d_model;
    if (mixer_kind_uses_mixer(c->kind)) {
        if (c->mixer_heads < 1 || D % c->mixer_heads)
            return err_fail(err, errlen, CKPT_ECONFIG, "mixer heads %d must be >= 1 and divide d_model %d", c->mixer_heads, D);
        if (c->mixer_kernel < 1 || c->mixer_kernel > D / c->mixer_heads)
            return err_fail(err, errlen, CKPT_ECONFIG, "mixer kernel %d must be in 1..%d (the head width d_model / heads)",
                            c->mixer_kernel, D / c->mixer_heads);
    }
    if (mixer_kind_has_encoder(c->kind)) {
        if (c->encoder_layers < 1)
            return err_fail(err, errlen, CKPT_ECONFIG, "encoder layers %d must be >= 1", c->encoder_layers);
        if (c->embed_dim < 0 || c->embed_dim > D)
            return err_fail(err, errlen, CKPT_ECONFIG, "embedding dimension %d must be in 1..d_model %d", c->embed_dim, D);
    }
    if (!(c->embed_range >= 0 && c->embed_range <= MIXER_EMBED_RANGE_MAX))
        return err_fail(err, errlen, CKPT_ECONFIG, "embedding range %g must be in 0..%g (0: unbounded)", (double)c->embed_range,
                        (double)MIXER_EMBED_RANGE_MAX);
    if (c->embed_noise_bits < 0 || c->embed_noise_bits > MIXER_EMBED_BITS_MAX)
        return err_fail(err, errlen, CKPT_ECONFIG, "embedding noise bits %d must be in 0..%d", c->embed_noise_bits,
                        MIXER_EMBED_BITS_MAX);
    if (c->embed_noise_bits && !(c->embed_range > 0))
        return err_fail(err, errlen, CKPT_ECONFIG, "the rounding noise of %d bits needs a bounded embedding (an embedding range > 0)",
                        c->embed_noise_bits);
    if (!mixer_kind_has_encoder(c->kind) && (c->embed_range != 0 || c->embed_noise_bits))
        return err_fail(err, errlen, CKPT_ECONFIG, "a causal mixer has no stored embedding (embedding range and noise bits must be 0)");
    if (mixer_kind_is_autoencoder(c->kind) && c->unroll && D < 2)
        return err_fail(err, errlen, CKPT_ECONFIG, "the unrolled embedding needs d_model >= 2 (windows of d_model / 2)");
    if (c->memory_start && !mixer_kind_is_memory(c->kind))
        return err_fail(err, errlen, CKPT_ECONFIG, "a start vector is for the memory models' decoder");
    const int flags[] = {c->no_mask_encoder, c->no_mask_decoder, c->unroll, c->freeze_encoder, c->memory_start};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (flags[i] != 0 && flags[i] != 1)
            return err_fail(err, errlen, CKPT_ECONFIG, "a mixer flag (mask, unroll, freeze, start) is %d, not 0 or 1", flags[i]);
    return 0;
}
