/* model/mixers_impl.h: the inside of a mixers_t, shared by model/mixers.c (construction,
 * parameters, the encoder's checkpoint) and model/mixers_step.c (forward and backward).
 * Not for other files. */
#ifndef MODEL_MIXERS_IMPL_H
#define MODEL_MIXERS_IMPL_H
#include "model/mixers.h"

/* Named pointers into the parameter buffer (or the gradient buffer: the same layout). NULL
 * where the kind has no such tensor. */
typedef struct {
    float *enc_embed;   /* (V,D) encoder.embed_tokens */
    float *down;        /* (d_e,D) encoder.down */
    float *up;          /* (D,d_e) decoder.up */
    float *unroll;      /* (D,nd) decoder.unroll */
    float *mem_proj;    /* (D,d_e) memory.proj */
    float *mem_start;   /* (D) memory.start (cfg.memory_start), added to the projected memory */
    float *dec_embed;   /* (V,D) model.embed_tokens */
    float *norm;        /* (D) decoder.norm / model.norm */
    float *head;        /* (V,D) lm_head, or the tied embedding */
} mixers_w_t;

struct mixers {
    model_config_t cfg;
    device_t *dev;                 /* every buffer below is on it */
    int Bmax, Tmax, B, T;
    int has_enc, is_ae, is_mem;
    int de, nd;                    /* d_e; the unroll window (D/2) */
    float grad_scale;
    /* parameters and gradients: one allocation each, views in the documented order */
    float *params, *grads;
    size_t n_params;
    tensor_view_t *pv, *gv;        /* host arrays */
    int nv, n_enc_views;           /* the first n_enc_views views are the encoder's */
    mixers_w_t w, g;
    blockstack_t enc, dec;
    /* activations: one allocation */
    void *act_mem;
    size_t act_bytes;
    blockstack_shared_t sh;
    float *e;                      /* (B,D) the encoder's last position */
    float *m_raw;                  /* (B,d_e) down(e), before the codec (== e when d_e == D) */
    float *m_unit, *rstd_m;        /* (B,d_e), (B): m_raw at unit RMS (a bounded codec's input) */
    float *ones;                   /* (d_e) the weight of that weightless RMS norm */
    float *m_emb;                  /* (B,d_e) the stored embedding: code(m_raw), what the
                                      decoder reads */
    float *u;                      /* (B,d_e) uniforms of the training noise */
    float *e_dec;                  /* (B,D) what the decoder receives (up / memory proj) */
    float *win;                    /* (B*T,nd) the unrolled windows */
    float *xf, *rstd_f;            /* (N,D), (N): final norm */
    float *logits, *lse;           /* (N,V), (N): dlogits overwrite the logits (llama.c's reasons) */
    float *dxf;                    /* (N,D) */
    float *d_dec, *d_m, *d_e;      /* (B,D), (B,d_e), (B,D): gradients of e_dec, m_emb, e */
    float *d_raw;                  /* (B,d_e) gradient of m_raw (== d_e when d_e == D) */
    float *d_unit;                 /* (B,d_e) gradient of m_unit */
    float *dwin;                   /* (B*T,nd) */
    float *zeros;                  /* (D) a zero row (clears strided rows) */
    uint32_t *tokens, *dec_tokens, *targets; /* (N) */
    uint32_t *enc_tokens;          /* (N) what the encoder reads when not the tokens */
    const uint32_t *enc_read;      /* tokens or enc_tokens: the last forward's encoder input */
    uint8_t *mask;                 /* (N) */
    /* host side */
    uint32_t *host_ids;            /* (N) targets or shifted tokens being prepared */
    uint8_t *host_mask;            /* (N) */
    float *logits_host, *emb_host;
    /* the embedding's codec: emb_bits 0 = training (the noise of cfg.embed_noise_bits, if
     * any), else the bits of the code the decoder reads (32: the float itself); emb_zero:
     * the decoder reads zeros (the evaluator's control) */
    int emb_bits, emb_zero;
    uint64_t seed, u_key, u_counter;  /* the noise's counter-based draws: (seed, step), row */
    int has_targets, has_mask, count, logits_are_grad; /* the buffer holds dlogits at dlogits_scale */
    float dlogits_scale;
};
#endif
