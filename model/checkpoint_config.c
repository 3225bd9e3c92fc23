/* model/checkpoint_config.c: model_config_t <-> config.json (Hugging Face LlamaConfig names).
 *
 * transformers' LlamaForCausalLM.from_pretrained reads the HF fields and ignores unknown keys,
 * so our own fields ride along under an "ft_" prefix. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errmsg.h"
#include "model/checkpoint.h"
#include "model/mixer_config.h"

/* Sizes above this are certainly a corrupt or hostile file, and would overflow int products. */
#define CKPT_DIM_MAX (1 << 24)

/* The shortest decimal that reads back as the same float, as a double: 1e-5f is written
 * "1e-05", not "9.99999974737875e-06", so the file reads like one a person wrote. */
json_t *ckpt_json_real(float x) {
    char buf[32];
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)x);
        if (strtof(buf, NULL) == x) break;
    }
    return json_real(strtod(buf, NULL));
}

json_t *ckpt_config_to_json(const model_config_t *c) {
    if (!c) return NULL;
    int head_dim = c->n_heads > 0 ? c->d_model / c->n_heads : 0;
    json_t *j = json_pack(
        "{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:o, s:o, s:b, s:s, s:s, s:i, s:i,"
        " s:b, s:b, s:i, s:s}",
        "architectures", "LlamaForCausalLM", "model_type", "llama",
        "hidden_size", c->d_model, "intermediate_size", c->d_ff,
        "num_attention_heads", c->n_heads, "num_hidden_layers", c->n_layers,
        "num_key_value_heads", c->n_kv_heads, "vocab_size", c->vocab_size,
        "max_position_embeddings", c->max_seq, "rms_norm_eps", ckpt_json_real(c->norm_eps),
        "rope_theta", ckpt_json_real(c->rope_theta), "tie_word_embeddings", c->tied != 0,
        "hidden_act", "silu", "torch_dtype", "float32",
        "bos_token_id", c->eot_id, "eos_token_id", c->eot_id,
        "attention_bias", 0, "mlp_bias", 0, "head_dim", head_dim,
        "ft_model_kind", c->kind == MODEL_FREE ? "free" : c->kind == MODEL_LTM ? "ltm" : mixer_kind_is(c->kind) ? mixer_kind_name(c->kind) : "llama");
    if (!j) return NULL;
    if (mixer_kind_is(c->kind) && mixer_config_to_json(c, j)) {
        json_decref(j);
        return NULL;
    }
    if (c->kind == MODEL_FREE) {
        json_object_set_new(j, "ft_latent_bits", json_integer(c->latent_bits));
        json_object_set_new(j, "ft_kappa_nats", ckpt_json_real(c->kappa_nats));
    }
    if (c->sliding_window > 0) json_object_set_new(j, "sliding_window", json_integer(c->sliding_window));
    if (c->kind == MODEL_LTM) {
        json_object_set_new(j, "ft_latent_vectors", json_integer(c->latent_vectors));
        json_object_set_new(j, "ft_inner_steps", json_integer(c->inner_steps));
        json_object_set_new(j, "ft_fast_lr", ckpt_json_real(c->fast_lr));
        json_object_set_new(j, "ft_fast_lr_end", ckpt_json_real(c->fast_lr_end));
        json_object_set_new(j, "ft_fast_lr_steps", json_integer(c->fast_lr_steps));
    }
    return j;
}

/* Field readers: required fields must exist; wrong types are errors, never coerced. */
static int cfg_int(const json_t *j, const char *key, int required, int dflt, int *out,
                   char *err, size_t errlen) {
    json_t *v = json_object_get(j, key);
    if (!v || json_is_null(v)) {
        if (required) return err_fail(err, errlen, CKPT_ECONFIG, "missing field \"%s\"", key);
        *out = dflt;
        return 0;
    }
    /* HF allows eos_token_id to be a list; the first entry is the one generation stops on. */
    if (json_is_array(v) && strcmp(key, "eos_token_id") == 0 && json_array_size(v) > 0)
        v = json_array_get(v, 0);
    if (!json_is_integer(v)) return err_fail(err, errlen, CKPT_ECONFIG, "field \"%s\": expected an integer", key);
    json_int_t x = json_integer_value(v);
    if (x < -CKPT_DIM_MAX || x > CKPT_DIM_MAX)
        return err_fail(err, errlen, CKPT_ECONFIG, "field \"%s\": %lld is out of range", key, (long long)x);
    *out = (int)x;
    return 0;
}

static int cfg_float(const json_t *j, const char *key, int required, float dflt, float *out,
                     char *err, size_t errlen) {
    json_t *v = json_object_get(j, key);
    if (!v || json_is_null(v)) {
        if (required) return err_fail(err, errlen, CKPT_ECONFIG, "missing field \"%s\"", key);
        *out = dflt;
        return 0;
    }
    if (!json_is_number(v)) return err_fail(err, errlen, CKPT_ECONFIG, "field \"%s\": expected a number", key);
    *out = (float)json_number_value(v);
    return 0;
}

static int cfg_str_is(const json_t *j, const char *key, const char *want, char *err, size_t errlen) {
    json_t *v = json_object_get(j, key);
    if (!v) return 0;
    if (!json_is_string(v)) return err_fail(err, errlen, CKPT_ECONFIG, "field \"%s\": expected a string", key);
    if (strcmp(json_string_value(v), want) != 0)
        return err_fail(err, errlen, CKPT_ECONFIG, "field \"%s\" is \"%.40s\", only \"%s\" is supported", key,
                        json_string_value(v), want);
    return 0;
}

int ckpt_config_from_json(const json_t *j, model_config_t *c, char *err, size_t errlen) {
    if (!json_is_object(j) || !c) return err_fail(err, errlen, CKPT_ECONFIG, "config is not a JSON object");
    model_config_t t;
    memset(&t, 0, sizeof t);
    int rc;
    if ((rc = cfg_str_is(j, "model_type", "llama", err, errlen))) return rc;
    if ((rc = cfg_str_is(j, "hidden_act", "silu", err, errlen))) return rc;
    if ((rc = cfg_int(j, "vocab_size", 1, 0, &t.vocab_size, err, errlen)) ||
        (rc = cfg_int(j, "hidden_size", 1, 0, &t.d_model, err, errlen)) ||
        (rc = cfg_int(j, "num_hidden_layers", 1, 0, &t.n_layers, err, errlen)) ||
        (rc = cfg_int(j, "num_attention_heads", 1, 0, &t.n_heads, err, errlen)) ||
        (rc = cfg_int(j, "num_key_value_heads", 0, t.n_heads, &t.n_kv_heads, err, errlen)) ||
        (rc = cfg_int(j, "intermediate_size", 1, 0, &t.d_ff, err, errlen)) ||
        (rc = cfg_int(j, "max_position_embeddings", 1, 0, &t.max_seq, err, errlen)) ||
        (rc = cfg_int(j, "eos_token_id", 1, 0, &t.eot_id, err, errlen)) ||
        (rc = cfg_float(j, "rope_theta", 0, 10000.0f, &t.rope_theta, err, errlen)) ||
        (rc = cfg_float(j, "rms_norm_eps", 1, 0, &t.norm_eps, err, errlen)))
        return rc;
    json_t *tie = json_object_get(j, "tie_word_embeddings");
    if (tie && !json_is_boolean(tie))
        return err_fail(err, errlen, CKPT_ECONFIG, "field \"tie_word_embeddings\": expected true or false");
    t.tied = tie ? json_is_true(tie) : 0;
    /* These must agree with our model: a config with biases or another head_dim would load
     * into transformers as a different network than the one we trained. */
    const char *no_bias[] = {"attention_bias", "mlp_bias"};
    for (int i = 0; i < 2; i++) {
        json_t *b = json_object_get(j, no_bias[i]);
        if (b && !json_is_boolean(b)) return err_fail(err, errlen, CKPT_ECONFIG, "field \"%s\": expected true or false", no_bias[i]);
        if (json_is_true(b)) return err_fail(err, errlen, CKPT_ECONFIG, "field \"%s\" is true; biases are not supported", no_bias[i]);
    }
    int head_dim = 0;
    if ((rc = cfg_int(j, "head_dim", 0, 0, &head_dim, err, errlen))) return rc;
    if (head_dim && t.n_heads > 0 && head_dim * t.n_heads != t.d_model)
        return err_fail(err, errlen, CKPT_ECONFIG, "field \"head_dim\" %d != hidden_size %d / num_attention_heads %d",
                        head_dim, t.d_model, t.n_heads);
    json_t *kind = json_object_get(j, "ft_model_kind");
    if (kind && !json_is_string(kind)) return err_fail(err, errlen, CKPT_ECONFIG, "field \"ft_model_kind\": expected a string");
    const char *ks = kind ? json_string_value(kind) : "llama";
    if (strcmp(ks, "llama") == 0) t.kind = MODEL_LLAMA;
    else if (strcmp(ks, "free") == 0) t.kind = MODEL_FREE;
    else if (strcmp(ks, "ltm") == 0) t.kind = MODEL_LTM;
    else if (mixer_kind_parse(ks, &t.kind) == 0) {
        if ((rc = mixer_config_from_json(j, &t, err, errlen))) return rc;
    } else return err_fail(err, errlen, CKPT_ECONFIG, "field \"ft_model_kind\" is \"%.40s\", expected \"llama\", \"free\", \"ltm\" or a mixer kind", ks);
    if (t.kind == MODEL_FREE &&
        ((rc = cfg_int(j, "ft_latent_bits", 1, 0, &t.latent_bits, err, errlen)) ||
         (rc = cfg_float(j, "ft_kappa_nats", 1, 0, &t.kappa_nats, err, errlen))))
        return rc;
    if ((rc = cfg_int(j, "sliding_window", 0, 0, &t.sliding_window, err, errlen))) return rc;
    if (t.kind == MODEL_LTM &&
        ((rc = cfg_int(j, "ft_latent_vectors", 1, 0, &t.latent_vectors, err, errlen)) ||
         (rc = cfg_int(j, "ft_inner_steps", 1, 0, &t.inner_steps, err, errlen)) ||
         (rc = cfg_float(j, "ft_fast_lr", 1, 0, &t.fast_lr, err, errlen)) ||
         (rc = cfg_float(j, "ft_fast_lr_end", 1, 0, &t.fast_lr_end, err, errlen)) ||
         (rc = cfg_int(j, "ft_fast_lr_steps", 1, 0, &t.fast_lr_steps, err, errlen))))
        return rc;
    if ((rc = ckpt_config_validate(&t, err, errlen))) return rc;
    *c = t;
    return 0;
}

int ckpt_config_validate(const model_config_t *c, char *err, size_t errlen) {
    if (!c) return err_fail(err, errlen, CKPT_ECONFIG, "no config");
    struct { const char *name; int v; } pos[] = {
        {"vocab_size", c->vocab_size}, {"hidden_size", c->d_model},
        {"num_hidden_layers", c->n_layers}, {"num_attention_heads", c->n_heads},
        {"num_key_value_heads", c->n_kv_heads}, {"intermediate_size", c->d_ff},
        {"max_position_embeddings", c->max_seq},
    };
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].v <= 0 || pos[i].v > CKPT_DIM_MAX)
            return err_fail(err, errlen, CKPT_ECONFIG, "field \"%s\" is %d, must be in 1..%d", pos[i].name, pos[i].v, CKPT_DIM_MAX);
    if (c->d_model % c->n_heads)
        return err_fail(err, errlen, CKPT_ECONFIG, "num_attention_heads %d does not divide hidden_size %d", c->n_heads, c->d_model);
    if ((c->d_model / c->n_heads) % 2)
        return err_fail(err, errlen, CKPT_ECONFIG, "head_dim %d is odd; RoPE rotates pairs", c->d_model / c->n_heads);
    if (c->n_heads % c->n_kv_heads)
        return err_fail(err, errlen, CKPT_ECONFIG, "num_key_value_heads %d does not divide num_attention_heads %d",
                        c->n_kv_heads, c->n_heads);
    if (c->eot_id < 0 || c->eot_id >= c->vocab_size)
        return err_fail(err, errlen, CKPT_ECONFIG, "eos_token_id %d outside the vocabulary (0..%d)", c->eot_id, c->vocab_size - 1);
    if (!isfinite(c->rope_theta) || c->rope_theta <= 0)
        return err_fail(err, errlen, CKPT_ECONFIG, "rope_theta %g must be positive", (double)c->rope_theta);
    if (!isfinite(c->norm_eps) || c->norm_eps <= 0)
        return err_fail(err, errlen, CKPT_ECONFIG, "rms_norm_eps %g must be positive", (double)c->norm_eps);
    if (c->kind != MODEL_LLAMA && c->kind != MODEL_FREE && c->kind != MODEL_LTM && !mixer_kind_is(c->kind))
        return err_fail(err, errlen, CKPT_ECONFIG, "unknown model kind %d", (int)c->kind);
    if (c->sliding_window < 0 || c->sliding_window > c->max_seq)
        return err_fail(err, errlen, CKPT_ECONFIG, "sliding_window %d must be in 0..max_position_embeddings %d",
                        c->sliding_window, c->max_seq);
    if (c->kind == MODEL_LTM) {
        /* each layer's m latents sit at RoPE positions below max_position_embeddings */
        if (c->latent_vectors < 1 || c->latent_vectors > c->max_seq)
            return err_fail(err, errlen, CKPT_ECONFIG, "ft_latent_vectors %d must be in 1..max_position_embeddings %d",
                            c->latent_vectors, c->max_seq);
        if (c->inner_steps < 0 || c->inner_steps > 100000)
            return err_fail(err, errlen, CKPT_ECONFIG, "ft_inner_steps %d must be in 0..100000", c->inner_steps);
        if (!isfinite(c->fast_lr) || c->fast_lr < 0 || !isfinite(c->fast_lr_end) || c->fast_lr_end < 0)
            return err_fail(err, errlen, CKPT_ECONFIG, "ft_fast_lr %g and ft_fast_lr_end %g must be >= 0",
                            (double)c->fast_lr, (double)c->fast_lr_end);
        if (c->fast_lr_steps < 1)
            return err_fail(err, errlen, CKPT_ECONFIG, "ft_fast_lr_steps %d must be >= 1", c->fast_lr_steps);
    }
    if (mixer_kind_is(c->kind)) return mixer_config_validate(c, err, errlen);
    if (c->kind == MODEL_FREE) {
        /* Z is one-hot over 2^H values; past 2^20 the latent projections dwarf the model. */
        if (c->latent_bits < 1 || c->latent_bits > 20)
            return err_fail(err, errlen, CKPT_ECONFIG, "ft_latent_bits %d must be in 1..20", c->latent_bits);
        if (!isfinite(c->kappa_nats) || c->kappa_nats < 0)
            return err_fail(err, errlen, CKPT_ECONFIG, "ft_kappa_nats %g must be >= 0", (double)c->kappa_nats);
    }
    return 0;
}
