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
    float *m_emb;                  /* (B,d_e) the stored embedding (== e when d_e == D) */
    float *e_dec;                  /* (B,D) what the decoder receives (up / memory proj) */
    float *win;                    /* (B*T,nd) the unrolled windows */
    float *xf, *rstd_f;            /* (N,D), (N): final norm */
    float *logits, *lse;           /* (N,V), (N): dlogits overwrite the logits (llama.c's reasons) */
    float *dxf;                    /* (N,D) */
    float *d_dec, *d_m, *d_e;      /* (B,D), (B,d_e), (B,D): gradients of e_dec, m_emb, e */
    float *dwin;                   /* (B*T,nd) */
    float *zeros;                  /* (D) a zero row (clears strided rows) */
    uint32_t *tokens, *dec_tokens, *targets; /* (N) */
    uint8_t *mask;                 /* (N) */
    /* host side */
    uint32_t *host_ids;            /* (N) targets or shifted tokens being prepared */
    uint8_t *host_mask;            /* (N) */
    float *logits_host, *emb_host;
    int has_targets, has_mask, count, logits_are_grad; /* the buffer holds dlogits at dlogits_scale */
    float dlogits_scale;
};
#endif
