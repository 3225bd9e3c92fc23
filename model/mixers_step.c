/* model/mixers_step.c: the forward and backward of the masked-mixer families (mixers.h). */
#include "model/mixers_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errmsg.h"
#include "model/llama.h"

static int check_ids(const uint32_t *ids, int N, int V, const char *what, char *err, size_t errlen) {
    for (int n = 0; n < N; n++)
        if (ids[n] >= (uint32_t)V)
            return err_fail(err, errlen, LLAMA_ETOKEN, "%s id %u at position %d is outside the vocabulary of %d", what,
                            ids[n], n, V);
    return 0;
}

/* encoder: embed -> blocks -> e = the last position -> down(e) -> m = code(down(e)), the
 * stored embedding the decoder reads (mixers.h: at unit RMS and clamped, rounded at
 * evaluation, noised in training; zeros for the evaluator's control) */
static void encode(mixers_t *m) {
    const int B = m->B, T = m->T, D = m->cfg.d_model;
    const size_t n = (size_t)B * m->de;
    const model_config_t *c = &m->cfg;
    device_t *d = m->dev;
    DEV(d, embedding_forward, blockstack_stream(&m->enc, 0), m->enc_read, m->w.enc_embed, B * T, D);
    blockstack_forward(&m->enc, &m->sh, d, B, T);
    DEV(d, copy_rows, m->e, D, blockstack_stream(&m->enc, m->enc.L) + (size_t)(T - 1) * D, T * D, B, D);
    if (m->w.down) DEV(d, linear_forward, m->m_raw, m->e, m->w.down, B, D, m->de);
    if (m->emb_zero) {
        DEV(d, zero, m->m_emb, sizeof(float) * n);
        return;
    }
    const int noise = m->emb_bits == 0 && c->embed_noise_bits > 0;
    if (noise) {
        DEV(d, uniform_fill, m->u, n, m->u_key, m->u_counter);
        m->u_counter += n;   /* the next micro-batch's rows draw their own */
    }
    /* a bounded embedding is first brought to unit RMS (its range is in those units) */
    const float *in = m->m_raw;
    if (c->embed_range > 0) {
        DEV(d, rmsnorm_forward, m->m_unit, m->rstd_m, m->m_raw, m->ones, B, m->de, c->norm_eps);
        in = m->m_unit;
    }
    DEV(d, embed_code_forward, m->m_emb, in, noise ? m->u : NULL, n, c->embed_range,
        m->emb_bits < 32 ? m->emb_bits : 0, noise ? c->embed_noise_bits : 0);
}

/* The decoder's input stream, by kind. */
static void decoder_input(mixers_t *m) {
    const int B = m->B, T = m->T, D = m->cfg.d_model, N = B * T;
    device_t *d = m->dev;
    float *x = blockstack_stream(&m->dec, 0);
    if (m->is_ae) {
        // the embedding back to d, then repeated at every position or unrolled by windows
        if (m->w.up) DEV(d, linear_forward, m->e_dec, m->m_emb, m->w.up, B, m->de, D);
        if (m->cfg.unroll) {
            DEV(d, unroll_forward, m->win, m->e_dec, B, T, D, m->nd);
            DEV(d, linear_forward, x, m->win, m->w.unroll, N, m->nd, D);
        } else {
            for (int b = 0; b < B; b++)
                DEV(d, repeat_rows, x + (size_t)b * T * D, m->e_dec + (size_t)b * D, T, D);
        }
    } else if (m->is_mem) {
        // tokens 0..T-2 at positions 1..T-1, the projected memory at position 0
        DEV(d, linear_forward, m->e_dec, m->m_emb, m->w.mem_proj, B, m->de, D);
        DEV(d, embedding_forward, x, m->dec_tokens, m->w.dec_embed, N, D);
        DEV(d, copy_rows, x, T * D, m->e_dec, D, B, D);
        if (m->w.mem_start)   /* a constant there that is not the encoder's to make (mixers.h) */
            for (int b = 0; b < B; b++) DEV(d, add_inplace, x + (size_t)b * T * D, m->w.mem_start, D);
    } else {
        DEV(d, embedding_forward, x, m->tokens, m->w.dec_embed, N, D);
    }
}

/* Uploads what a forward reads: the tokens, the decoder's shifted tokens (memory), and with
 * targets the targets and mask of what this kind predicts. */
static int upload_inputs(mixers_t *m, const uint32_t *tokens, const uint32_t *enc_tokens,
                         const uint32_t *targets, const uint8_t *mask, char *err, size_t errlen) {
    const int B = m->B, T = m->T, N = B * T, V = m->cfg.vocab_size;
    int rc = check_ids(tokens, N, V, "token", err, errlen);
    if (!rc && enc_tokens) rc = check_ids(enc_tokens, N, V, "encoder token", err, errlen);
    if (rc) return rc;
    device_t *d = m->dev;
    DEV(d, upload, m->tokens, tokens, sizeof(uint32_t) * N);
    m->enc_read = m->tokens;
    if (enc_tokens && m->has_enc) {
        DEV(d, upload, m->enc_tokens, enc_tokens, sizeof(uint32_t) * N);
        m->enc_read = m->enc_tokens;
    }
    if (m->is_mem) {
        for (int n = 0; n < N; n++) m->host_ids[n] = n % T ? tokens[n - 1] : 0;
        DEV(d, upload, m->dec_tokens, m->host_ids, sizeof(uint32_t) * N);
    }
    m->has_targets = targets != NULL;
    m->has_mask = mask != NULL;
    if (!targets) return 0;
    if (m->has_enc) {
        /* the chunk itself: token t is real when t = 0 or target t-1 (= token t) is */
        DEV(d, copy, m->targets, m->tokens, sizeof(uint32_t) * N);
        if (mask) {
            for (int n = 0; n < N; n++) m->host_mask[n] = n % T == 0 || mask[n - 1];
            DEV(d, upload, m->mask, m->host_mask, N);
        }
        return 0;
    }
    for (int n = 0; n < N; n++) {
        if ((!mask || mask[n]) && targets[n] >= (uint32_t)V) {
            m->has_targets = 0;
            return err_fail(err, errlen, LLAMA_ETOKEN, "target id %u at position %d is outside the vocabulary of %d",
                            targets[n], n, V);
        }
        /* uncounted targets are read by the backward's row index: keep them in range */
        m->host_ids[n] = mask && !mask[n] ? 0 : targets[n];
    }
    DEV(d, upload, m->targets, m->host_ids, sizeof(uint32_t) * N);
    if (mask) DEV(d, upload, m->mask, mask, N);
    return 0;
}

int mixers_forward(mixers_t *m, const uint32_t *tokens, const uint32_t *targets,
                   const uint8_t *mask, float *loss, char *err, size_t errlen) {
    return mixers_forward_enc(m, tokens, NULL, targets, mask, loss, err, errlen);
}

int mixers_forward_enc(mixers_t *m, const uint32_t *tokens, const uint32_t *enc_tokens,
                       const uint32_t *targets, const uint8_t *mask, float *loss, char *err,
                       size_t errlen) {
    const model_config_t *c = &m->cfg;
    const int N = m->B * m->T, D = c->d_model, V = c->vocab_size;
    device_t *d = m->dev;
    m->has_targets = 0;
    m->logits_are_grad = 0;
    if (!tokens) return err_fail(err, errlen, LLAMA_EARG, "mixers_forward: no tokens");
    int rc = upload_inputs(m, tokens, enc_tokens, targets, mask, err, errlen);
    if (rc) return rc;
    if (m->has_enc) encode(m);
    decoder_input(m);
    blockstack_forward(&m->dec, &m->sh, d, m->B, m->T);
    // final rmsnorm and the head
    DEV(d, rmsnorm_forward, m->xf, m->rstd_f, blockstack_stream(&m->dec, m->dec.L), m->w.norm, N, D, c->norm_eps);
    DEV(d, linear_forward, m->logits, m->xf, m->w.head, N, D, V);
    if (m->has_targets) {
        /* in place: dlogits over the logits, read by the head's products alone (mixers_logits
         * makes the logits again): at bf16 kept as their shadow alone (llama.c, device.h) */
        dev_products_only(d, m->logits, (size_t)N * V);
        float l = DEV(d, crossentropy_forward, m->logits, m->lse, &m->count, m->logits, m->targets,
                      m->has_mask ? m->mask : NULL, N, V, m->grad_scale);
        m->logits_are_grad = 1;
        m->dlogits_scale = m->grad_scale;
        if (loss) *loss = l;
    }
    return DEV_SYNC_AS(d, err, errlen, LLAMA_EARG, LLAMA_ENOMEM);
}

/* d loss / d stream(0) of the encoder (in sh.dA) from d loss / d m (the stored embedding):
 * through the codec (the clamp's gradient; the rounding and the noise pass it straight
 * through) and down, then through the encoder's blocks into its embedding table. */
static void encoder_backward(mixers_t *m) {
    const int B = m->B, T = m->T, D = m->cfg.d_model;
    const size_t n = (size_t)B * m->de;
    device_t *d = m->dev;
    if (m->emb_zero) {
        DEV(d, zero, m->d_raw, sizeof(float) * n);
    } else if (m->cfg.embed_range > 0) {
        DEV(d, embed_code_backward, m->d_unit, m->d_m, m->m_unit, n, m->cfg.embed_range);
        DEV(d, zero, m->d_raw, sizeof(float) * n);
        DEV(d, rmsnorm_backward, m->d_raw, NULL, m->d_unit, m->m_raw, m->ones, m->rstd_m, B, m->de);
    } else {
        DEV(d, embed_code_backward, m->d_raw, m->d_m, m->m_raw, n, 0.0f);
    }
    if (m->w.down) DEV(d, linear_backward_set, m->d_e, m->g.down, m->d_raw, m->e, m->w.down, B, D, m->de);
    DEV(d, zero, m->sh.dA, sizeof(float) * (size_t)B * T * D);
    DEV(d, copy_rows, m->sh.dA + (size_t)(T - 1) * D, T * D, m->d_e, D, B, D);
    blockstack_backward(&m->enc, &m->sh, d, B, T);
    DEV(d, embedding_backward, m->g.enc_embed, m->sh.dA, m->enc_read, B * T, D);
}

/* The logits again over dlogits (the head's product on the same inputs: the same bits). */
static void logits_again(mixers_t *m) {
    const int N = m->B * m->T;
    DEV(m->dev, linear_forward, m->logits, m->xf, m->w.head, N, m->cfg.d_model, m->cfg.vocab_size);
    m->logits_are_grad = 0;
}

int mixers_backward(mixers_t *m, char *err, size_t errlen) {
    if (!m->has_targets) return err_fail(err, errlen, LLAMA_EARG, "mixers_backward: the last forward had no targets");
    const model_config_t *c = &m->cfg;
    const int B = m->B, T = m->T, N = B * T, D = c->d_model, V = c->vocab_size;
    device_t *d = m->dev;
    // head and final norm
    if (!m->logits_are_grad || m->dlogits_scale != m->grad_scale) {
        if (m->logits_are_grad) logits_again(m);
        DEV(d, crossentropy_backward, m->logits, m->logits, m->lse, m->targets, m->has_mask ? m->mask : NULL, N, V,
            m->grad_scale);
        m->logits_are_grad = 1;
        m->dlogits_scale = m->grad_scale;
    }
    DEV(d, linear_backward_set, m->dxf, m->g.head, m->logits, m->xf, m->w.head, N, D, V);
    DEV(d, zero, m->sh.dA, sizeof(float) * (size_t)N * D);
    DEV(d, rmsnorm_backward, m->sh.dA, m->g.norm, m->dxf, blockstack_stream(&m->dec, m->dec.L), m->w.norm,
        m->rstd_f, N, D);
    blockstack_backward(&m->dec, &m->sh, d, B, T);
    float *dx = m->sh.dA;   /* d loss / d decoder input */
    if (m->is_ae) {
        DEV(d, zero, m->d_dec, sizeof(float) * (size_t)B * D);
        if (c->unroll) {
            DEV(d, linear_backward_set, m->dwin, m->g.unroll, dx, m->win, m->w.unroll, N, m->nd, D);
            DEV(d, unroll_backward, m->d_dec, m->dwin, B, T, D, m->nd);
        } else {
            for (int b = 0; b < B; b++) DEV(d, sum_rows, m->d_dec + (size_t)b * D, dx + (size_t)b * T * D, T, D);
        }
        if (m->w.up) DEV(d, linear_backward_set, m->d_m, m->g.up, m->d_dec, m->m_emb, m->w.up, B, m->de, D);
        encoder_backward(m);
    } else if (m->is_mem) {
        // position 0 is the memory: its gradient goes to the projection, not to a token row
        DEV(d, copy_rows, m->d_dec, D, dx, T * D, B, D);
        if (m->g.mem_start) DEV(d, sum_rows, m->g.mem_start, m->d_dec, B, D);
        DEV(d, copy_rows, dx, T * D, m->zeros, 0, B, D);
        DEV(d, embedding_backward, m->g.dec_embed, dx, m->dec_tokens, N, D);
        const int frozen = c->freeze_encoder;
        DEV(d, linear_backward_set, frozen ? NULL : m->d_m, m->g.mem_proj, m->d_dec, m->m_emb, m->w.mem_proj, B,
            m->de, D);
        if (!frozen) encoder_backward(m);
    } else {
        DEV(d, embedding_backward, m->g.dec_embed, dx, m->tokens, N, D);
    }
    return DEV_SYNC_AS(d, err, errlen, LLAMA_EARG, LLAMA_ENOMEM);
}

/* A device buffer's host copy (the buffer itself on the CPU device). */
static const float *to_host(mixers_t *m, float **host, const float *src, size_t n_max, size_t n) {
    if (device_is_host(m->dev)) return src;
    if (!*host && !(*host = malloc(sizeof(float) * n_max))) return NULL;
    DEV(m->dev, download, *host, src, sizeof(float) * n);
    return *host;
}
const float *mixers_logits(mixers_t *m) {
    const size_t V = m->cfg.vocab_size;
    if (m->logits_are_grad) logits_again(m);
    return to_host(m, &m->logits_host, m->logits, (size_t)m->Bmax * m->Tmax * V, (size_t)m->B * m->T * V);
}
const float *mixers_embedding(mixers_t *m) {
    if (!m->has_enc) return NULL;
    return to_host(m, &m->emb_host, m->m_emb, (size_t)m->Bmax * m->de, (size_t)m->B * m->de);
}
