/* model/config.h: the blueprint of a model (what config.json holds).
 *
 * Field names follow Hugging Face's LlamaConfig where one exists, so the checkpoint's
 * config.json maps one to one (docs/FORMATS.md). */
#ifndef MODEL_CONFIG_H
#define MODEL_CONFIG_H

typedef enum { MODEL_LLAMA = 0, MODEL_FREE = 1, MODEL_LTM = 2 } model_kind;

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
    /* self-attention sees only this many newest positions (sliding_window; 0: all). Read by
     * every decoder block; only the LTM sets it */
    int sliding_window;
    /* Latent-thought LM (seed 003, model/ltm.h), used when kind == MODEL_LTM */
    int latent_vectors;    /* m: latent thought vectors (of width d_model) per layer */
    int inner_steps;       /* K: AdamW steps on (mu, log sigma) per training batch; inference's default */
    float fast_lr;         /* the fast learning rate at optimizer step 0 ... */
    float fast_lr_end;     /* ... rising linearly to this at step fast_lr_steps - 1 */
    int fast_lr_steps;     /* the ramp's length in optimizer steps (the training run's --steps) */
} model_config_t;

#endif
