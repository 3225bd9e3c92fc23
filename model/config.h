/* model/config.h: the blueprint of a model (what config.json holds).
 *
 * Field names follow Hugging Face's LlamaConfig where one exists, so the checkpoint's
 * config.json maps one to one (docs/FORMATS.md). */
#ifndef MODEL_CONFIG_H
#define MODEL_CONFIG_H

typedef enum {
    MODEL_LLAMA = 0,
    MODEL_FREE = 1,
    MODEL_LTM = 2,
    /* masked mixers (seed 004, model/mixers.h): numbered apart from other families' kinds */
    MODEL_MIXER = 10,      /* causal mixer language model */
    MODEL_MIXER_AE = 11,   /* one-vector autoencoder, mixer blocks */
    MODEL_LLAMA_AE = 12,   /* the same with Llama blocks */
    MODEL_MIXER_MEM = 13,  /* memory model: encoder embedding + causal decoder, mixer blocks */
    MODEL_LLAMA_MEM = 14,  /* the same with Llama blocks */
} model_kind;

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
    /* masked mixers and their autoencoders / memory models (seed 004; kinds MODEL_MIXER..) */
    int mixer_heads;       /* 1: flat (one T x T mixing); h > 1: in/out projections, h heads */
    int mixer_kernel;      /* k >= 1: each output element mixes k neighbouring elements */
    int no_mask_encoder;   /* 1: the encoder's token mixing is not causal */
    int no_mask_decoder;   /* 1: the decoder's (the causal mixer's: its only stack) is not */
    int encoder_layers;    /* autoencoder / memory: encoder blocks (n_layers: the decoder's) */
    int embed_dim;         /* d_e of the one stored embedding (d -> d_e -> d); d_model: none */
    int unroll;            /* autoencoder: 1 sliding-window unroll, 0 repeat the embedding */
    int freeze_encoder;    /* memory: the encoder's weights get no updates */
    int memory_start;      /* memory: the decoder's position 0 is the projected memory plus a
                              learned start vector (memory.start), 0: the projected memory alone */
    float embed_range;     /* autoencoder / memory: the stored embedding is clamped to
                              [-R, R] so a b-bit code of it exists (0: unbounded, 32 bits only) */
    int embed_noise_bits;  /* ... and trained with the noise of rounding to b bits (0: none) */
} model_config_t;

#endif
