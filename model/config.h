/* model/config.h: the blueprint of a model (what config.json holds).
 *
 * Field names follow Hugging Face's LlamaConfig where one exists, so the checkpoint's
 * config.json maps one to one (docs/FORMATS.md). */
#ifndef MODEL_CONFIG_H
#define MODEL_CONFIG_H

typedef enum { MODEL_LLAMA = 0, MODEL_FREE = 1 } model_kind;

typedef struct {
    model_kind kind;
    int vocab_size;        /* vocab_size */
    int d_model;           /* hidden_size */
    int n_layers;          /* num_hidden_layers */
    int n_heads;           /* num_attention_heads */
    int n_kv_heads;        /* num_key_value_heads (grouped-query attention) */
    int d_ff;              /* intermediate_size (SwiGLU hidden) */
    int max_seq;           /* max_position_embeddings: length of the RoPE table */
    float rope_theta;      /* rope_theta */
    float norm_eps;        /* rms_norm_eps */
    int tied;              /* tie_word_embeddings */
    int eot_id;            /* eos_token_id / bos_token_id */
    /* Free Transformer (seed 000), used when kind == MODEL_FREE */
    int latent_bits;       /* H: Z is one-hot over 2^H */
    float kappa_nats;      /* free-bits threshold per token, in nats */
} model_config_t;

#endif
