/* tests/test_gradcheck.c: finite-difference checks of every op's backward, of the decoder
 * block (plain, separate Q/KV input, non-causal) and of the whole model's loss.
 *
 * Method and tolerances: tests/gradcheck.h. */
#include "model/llama.h"
#include "model/llama_block.h"
#include "model/ops.h"
#include "common/rng.h"
#include "tests/check.h"
#include "tests/gradcheck.h"
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- embedding */
enum { EB_N = 7, EB_V = 5, EB_D = 6 };
static uint32_t eb_tok[EB_N] = {1, 3, 1, 0, 4, 3, 1};
static void eb_fwd(gc_case_t *c) { embedding_forward(c->out, eb_tok, c->in[0].x, EB_N, EB_D); }
static void eb_bwd(gc_case_t *c) { embedding_backward(c->in[0].dx, c->w, eb_tok, EB_N, EB_D); }
static void test_embedding(void) {
    gc_case_t c = {eb_fwd, eb_bwd, zeros(EB_N * EB_D), rnd(EB_N * EB_D, 1), EB_N * EB_D, {{0}}, 1, 0};
    c.in[0] = (gc_in_t){"table", rnd(EB_V * EB_D, 1), zeros(EB_V * EB_D), EB_V * EB_D};
    gc_run("embedding", &c);
}

/* ---------------------------------------------------------------- rmsnorm */
enum { RN_N = 5, RN_D = 12 };
static float rn_rstd[RN_N];
static void rn_fwd(gc_case_t *c) {
    rmsnorm_forward(c->out, rn_rstd, c->in[0].x, c->in[1].x, RN_N, RN_D, 1e-5f);
}
static void rn_bwd(gc_case_t *c) {
    rmsnorm_backward(c->in[0].dx, c->in[1].dx, c->w, c->in[0].x, c->in[1].x, rn_rstd, RN_N, RN_D);
}
static void test_rmsnorm(void) {
    gc_case_t c = {rn_fwd, rn_bwd, zeros(RN_N * RN_D), rnd(RN_N * RN_D, 1), RN_N * RN_D, {{0}}, 2, 0};
    c.in[0] = (gc_in_t){"x", rnd(RN_N * RN_D, 1), zeros(RN_N * RN_D), RN_N * RN_D};
    c.in[1] = (gc_in_t){"w", rnd(RN_D, 1), zeros(RN_D), RN_D};
    gc_run("rmsnorm", &c);
    /* dw NULL (the LTM's inner steps want dx only): the same dx, nothing else written */
    float *dx1 = zeros(RN_N * RN_D), *dx2 = zeros(RN_N * RN_D), *dw = zeros(RN_D);
    rmsnorm_backward(dx1, dw, c.w, c.in[0].x, c.in[1].x, rn_rstd, RN_N, RN_D);
    rmsnorm_backward(dx2, NULL, c.w, c.in[0].x, c.in[1].x, rn_rstd, RN_N, RN_D);
    CHECK(!memcmp(dx1, dx2, sizeof(float) * RN_N * RN_D), "rmsnorm dx with dw NULL");
    free(dx1); free(dx2); free(dw);
}

/* ------------------------------------------- the residual add and RMSNorm, fused
 * out = (y, rmsnorm(y)) with y = a + b, both outputs checked: the backward is the block's,
 * da = dy + rmsnorm_backward_res's term (res = dy), db = da */
static void arn_fwd(gc_case_t *c) {
    add_rmsnorm_forward(c->out, c->out + RN_N * RN_D, rn_rstd, c->in[0].x, c->in[1].x, c->in[2].x, RN_N, RN_D,
                        1e-5f);
}
static void arn_bwd(gc_case_t *c) {
    enum { n = RN_N * RN_D };
    rmsnorm_backward_res(c->in[0].dx, c->in[2].dx, c->w + n, c->out, c->in[2].x, rn_rstd, c->w, RN_N, RN_D);
    for (int i = 0; i < n; i++) c->in[1].dx[i] += c->in[0].dx[i];
}
static void test_add_rmsnorm(void) {
    enum { n = RN_N * RN_D };
    gc_case_t c = {arn_fwd, arn_bwd, zeros(2 * n), rnd(2 * n, 1), 2 * n, {{0}}, 3, 0};
    c.in[0] = (gc_in_t){"a", rnd(n, 1), zeros(n), n};
    c.in[1] = (gc_in_t){"b", rnd(n, 1), zeros(n), n};
    c.in[2] = (gc_in_t){"w", rnd(RN_D, 1), zeros(RN_D), RN_D};
    gc_run("add + rmsnorm, backward with the residual", &c);
}

/* ---------------------------------------------------------------- linear */
enum { LN_N = 6, LN_IN = 7, LN_OUT = 5 };
static void ln_fwd(gc_case_t *c) { linear_forward(c->out, c->in[0].x, c->in[1].x, LN_N, LN_IN, LN_OUT); }
static void ln_bwd(gc_case_t *c) {
    linear_backward(c->in[0].dx, c->in[1].dx, c->w, c->in[0].x, c->in[1].x, LN_N, LN_IN, LN_OUT);
}
static void test_linear(void) {
    gc_case_t c = {ln_fwd, ln_bwd, zeros(LN_N * LN_OUT), rnd(LN_N * LN_OUT, 1), LN_N * LN_OUT, {{0}}, 2, 0};
    c.in[0] = (gc_in_t){"x", rnd(LN_N * LN_IN, 1), zeros(LN_N * LN_IN), LN_N * LN_IN};
    c.in[1] = (gc_in_t){"W", rnd(LN_OUT * LN_IN, 1), zeros(LN_OUT * LN_IN), LN_OUT * LN_IN};
    gc_run("linear", &c);
}

/* ---------------------------------------------------------------- rope */
enum { RP_B = 2, RP_T = 5, RP_H = 3, RP_HD = 8, RP_POS0 = 3 };
static float rp_cos[(RP_T + RP_POS0) * RP_HD / 2], rp_sin[(RP_T + RP_POS0) * RP_HD / 2];
static void rp_fwd(gc_case_t *c) {
    rope_forward(c->out, c->in[0].x, rp_cos, rp_sin, RP_B, RP_T, RP_H, RP_HD, RP_POS0);
}
static void rp_bwd(gc_case_t *c) {
    rope_backward(c->in[0].dx, c->w, rp_cos, rp_sin, RP_B, RP_T, RP_H, RP_HD, RP_POS0);
}
static void test_rope(void) {
    enum { n = RP_B * RP_T * RP_H * RP_HD };
    rope_table_init(rp_cos, rp_sin, RP_T + RP_POS0, RP_HD, 10000.0f);
    gc_case_t c = {rp_fwd, rp_bwd, zeros(n), rnd(n, 1), n, {{0}}, 1, 0};
    c.in[0] = (gc_in_t){"x", rnd(n, 1), zeros(n), n};
    gc_run("rope", &c);
}

/* ---------------------------------------------------------------- attention */
typedef struct { int B, Tq, Tk, H, Hkv, hd, causal, window; float *lse; } at_ctx_t;
static void at_fwd(gc_case_t *c) {
    at_ctx_t *a = c->ctx;
    attention_window_forward(c->out, a->lse, c->in[0].x, c->in[1].x, c->in[2].x, a->B, a->Tq, a->Tk,
                             a->H, a->Hkv, a->hd, a->causal, a->window);
}
static void at_bwd(gc_case_t *c) {
    at_ctx_t *a = c->ctx;
    attention_window_backward(c->in[0].dx, c->in[1].dx, c->in[2].dx, c->w, c->out, a->lse,
                              c->in[0].x, c->in[1].x, c->in[2].x, a->B, a->Tq, a->Tk, a->H,
                              a->Hkv, a->hd, a->causal, a->window);
}
static void attention_case_w(const char *what, int Tq, int Tk, int H, int Hkv, int causal, int window) {
    at_ctx_t a = {2, Tq, Tk, H, Hkv, 8, causal, window, NULL};
    size_t nq = (size_t)a.B * Tq * H * a.hd, nk = (size_t)a.B * Tk * Hkv * a.hd;
    a.lse = zeros((size_t)a.B * H * Tq);
    gc_case_t c = {at_fwd, at_bwd, zeros(nq), rnd(nq, 1), nq, {{0}}, 3, &a};
    c.in[0] = (gc_in_t){"q", rnd(nq, 1), zeros(nq), nq};
    c.in[1] = (gc_in_t){"k", rnd(nk, 1), zeros(nk), nk};
    c.in[2] = (gc_in_t){"v", rnd(nk, 1), zeros(nk), nk};
    gc_run(what, &c);
}
static void attention_case(const char *what, int Tq, int Tk, int H, int Hkv, int causal) {
    attention_case_w(what, Tq, Tk, H, Hkv, causal, 0);
}
/* The sliding window (seed 003): keys outside a row's window get no gradient from it. */
static void test_attention_window(void) {
    attention_case_w("attention window 3", 7, 7, 4, 2, 1, 3);
    attention_case_w("attention window 2", 5, 5, 2, 2, 1, 2);
    attention_case_w("attention window 4, Tq<Tk", 4, 9, 2, 1, 1, 4);
    attention_case_w("attention window 20, 2 blocks, group 4", 70, 70, 8, 2, 1, 20);
}
static void test_attention_causal_gqa(void) { attention_case("attention causal GQA 4/2", 6, 6, 4, 2, 1); }
static void test_attention_causal_mha(void) { attention_case("attention causal MHA", 5, 5, 2, 2, 1); }
static void test_attention_noncausal(void) { attention_case("attention non-causal GQA", 6, 6, 4, 1, 0); }
/* Queries from a different (shorter) input than keys/values: the KV-cache alignment. */
static void test_attention_q_kv_differ(void) { attention_case("attention causal Tq<Tk", 3, 7, 4, 2, 1); }
static void test_attention_noncausal_q_kv_differ(void) {
    attention_case("attention non-causal Tq!=Tk", 4, 9, 2, 1, 0);
}
/* Longer than one key block (ATT_BLOCK = 64), so the online-softmax rescale between blocks
 * is exercised; outputs are large, so fewer samples are fine. */
static void test_attention_multiblock(void) { attention_case("attention causal 2 blocks", 70, 70, 2, 1, 1); }
/* Groups of 4 and 8 query heads per key/value head stack into blocks of 32 and 16 positions
 * (ATT_ROWS / group): several blocks, the last one partial, causal and not, Tq < Tk. */
static void test_attention_stacked_groups(void) {
    attention_case("attention causal group 4, 3 blocks", 70, 70, 8, 2, 1);
    attention_case("attention non-causal group 8, Tq<Tk", 40, 70, 8, 1, 0);
    attention_case("attention causal group 8, Tq<Tk", 37, 45, 8, 1, 1);
}

/* ---------------------------------------------------------------- the LTM's latent */
/* z = mu + e^ls eps reduced by w, plus kl_scale * sum_b KL_b: the backward gives both terms. */
enum { LT_L = 2, LT_B = 3, LT_N = 4 };
static float lt_eps[LT_L * LT_B * LT_N];
static void lt_fwd(gc_case_t *c) {
    enum { n = LT_L * LT_B * LT_N };
    float z[n], kl[LT_B];
    latent_sample(z, c->in[0].x, c->in[1].x, lt_eps, n);
    latent_kl_rows(kl, c->in[0].x, c->in[1].x, LT_L, LT_B, LT_N);
    /* out = z, then the KL rows weighted by the last entries of w */
    memcpy(c->out, z, sizeof z);
    memcpy(c->out + n, kl, sizeof kl);
}
static void lt_bwd(gc_case_t *c) {
    enum { n = LT_L * LT_B * LT_N };
    /* one KL weight for all rows (the family uses one scale): w's KL entries are made equal */
    float dmu[n], dls[n];
    latent_backward(dmu, dls, c->w, c->in[0].x, c->in[1].x, lt_eps, c->w[n], n);
    for (int i = 0; i < n; i++) c->in[0].dx[i] += dmu[i], c->in[1].dx[i] += dls[i];
}
static void test_latent(void) {
    enum { n = LT_L * LT_B * LT_N };
    for (int i = 0; i < n; i++) lt_eps[i] = rng_normal(&R);
    gc_case_t c = {lt_fwd, lt_bwd, zeros(n + LT_B), rnd(n + LT_B, 1), n + LT_B, {{0}}, 2, 0};
    for (int b = 1; b < LT_B; b++) c.w[n + b] = c.w[n];
    c.in[0] = (gc_in_t){"mu", rnd(n, 1), zeros(n), n};
    c.in[1] = (gc_in_t){"log sigma", rnd(n, 0.5f), zeros(n), n};
    gc_run("LTM latent sample + KL", &c);
}

/* ---------------------------------------------------------------- swiglu */
enum { SW_N = 4, SW_F = 9 };
static void sw_fwd(gc_case_t *c) { swiglu_forward(c->out, c->in[0].x, c->in[1].x, SW_N, SW_F); }
static void sw_bwd(gc_case_t *c) {
    swiglu_backward(c->in[0].dx, c->in[1].dx, c->w, c->in[0].x, c->in[1].x, SW_N, SW_F);
}
static void test_swiglu(void) {
    enum { n = SW_N * SW_F };
    gc_case_t c = {sw_fwd, sw_bwd, zeros(n), rnd(n, 1), n, {{0}}, 2, 0};
    c.in[0] = (gc_in_t){"gate", rnd(n, 2), zeros(n), n};
    c.in[1] = (gc_in_t){"up", rnd(n, 1), zeros(n), n};
    gc_run("swiglu", &c);
}

/* ---------------------------------------------------------------- cross-entropy */
enum { CE_N = 6, CE_V = 11 };
static uint32_t ce_tgt[CE_N] = {3, 0, 10, 5, 5, 7};
static uint8_t ce_mask[CE_N] = {1, 0, 1, 1, 0, 1};
static float ce_lse[CE_N];
static const uint8_t *ce_m;
static void ce_fwd(gc_case_t *c) {
    c->out[0] = crossentropy_forward(NULL, ce_lse, NULL, c->in[0].x, ce_tgt, ce_m, CE_N, CE_V, 1.0f);
}
static void ce_bwd(gc_case_t *c) {
    /* crossentropy_backward overwrites and takes dloss = w[0] */
    crossentropy_backward(c->in[0].dx, c->in[0].x, ce_lse, ce_tgt, ce_m, CE_N, CE_V, c->w[0]);
}
static void ce_case(const char *what, const uint8_t *mask) {
    enum { n = CE_N * CE_V };
    ce_m = mask;
    gc_case_t c = {ce_fwd, ce_bwd, zeros(1), rnd(1, 1), 1, {{0}}, 1, 0};
    c.in[0] = (gc_in_t){"logits", rnd(n, 2), zeros(n), n};
    gc_run(what, &c);
}
static void test_crossentropy(void) { ce_case("cross-entropy", NULL); }
static void test_crossentropy_mask(void) { ce_case("cross-entropy masked", ce_mask); }
/* The fused path must give the same gradient as the separate backward. */
static void test_crossentropy_fused(void) {
    float *z = rnd(CE_N * CE_V, 2), *d1 = zeros(CE_N * CE_V), *d2 = zeros(CE_N * CE_V);
    float lse[CE_N];
    int cnt = 0;
    float l1 = crossentropy_forward(d1, lse, &cnt, z, ce_tgt, ce_mask, CE_N, CE_V, 0.5f);
    crossentropy_backward(d2, z, lse, ce_tgt, ce_mask, CE_N, CE_V, 0.5f);
    float l2 = crossentropy_forward(NULL, lse, NULL, z, ce_tgt, ce_mask, CE_N, CE_V, 1.0f);
    CHECK(cnt == 4, "count %d", cnt);
    CHECK(l1 == l2, "fused loss %g vs %g", l1, l2);
    double md = 0;
    for (int i = 0; i < CE_N * CE_V; i++) md = fmax(md, fabs(d1[i] - d2[i]));
    CHECK(md == 0.0, "fused dlogits differ by %g", md);
    /* in place: dlogits aliasing logits */
    float l3 = crossentropy_forward(z, lse, NULL, z, ce_tgt, ce_mask, CE_N, CE_V, 0.5f);
    CHECK(l3 == l1, "in-place loss %g vs %g", l3, l1);
    md = 0;
    for (int i = 0; i < CE_N * CE_V; i++) md = fmax(md, fabs(z[i] - d2[i]));
    CHECK(md == 0.0, "in-place dlogits differ by %g", md);
    free(z); free(d1); free(d2);
}

/* ---------------------------------------------------------------- decoder block */
typedef struct {
    model_config_t cfg;
    int B, T, causal, separate;
    llama_block_acts_t acts;
    llama_block_scratch_t scr;
    llama_block_w_t w, g;
    float *cs, *sn;
    gc_in_t xq, xkv;  /* the block's inputs, also when the checked inputs are the weights */
} bk_ctx_t;
static void bk_fwd(gc_case_t *c) {
    bk_ctx_t *k = c->ctx;
    llama_block_forward(device_cpu_default(), c->out, &k->acts, &k->w, k->xq.x, k->separate ? k->xkv.x : k->xq.x,
                        &k->cfg, k->cs, k->sn, k->B, k->T, k->causal, &k->scr);
}
static void bk_bwd(gc_case_t *c) {
    bk_ctx_t *k = c->ctx;
    llama_block_backward(device_cpu_default(), k->xq.dx, k->separate ? k->xkv.dx : k->xq.dx, &k->g, c->w, &k->acts,
                         &k->w, k->xq.x, k->separate ? k->xkv.x : k->xq.x, &k->cfg, k->cs,
                         k->sn, k->B, k->T, k->causal, &k->scr);
}
static void block_case(const char *what, int separate, int causal) {
    bk_ctx_t k = {0};
    k.cfg = (model_config_t){.vocab_size = 16, .d_model = 16, .n_layers = 1, .n_heads = 4,
                             .n_kv_heads = 2, .d_ff = 24, .max_seq = 8, .rope_theta = 10000.0f,
                             .norm_eps = 1e-5f};
    k.B = 2; k.T = 5; k.causal = causal; k.separate = separate;
    const int D = 16, F = 24, hd = 4, Dq = 16, Dkv = 8;
    llama_block_acts_alloc(&k.acts, &k.cfg, k.B, k.T, separate);
    llama_block_scratch_alloc(&k.scr, &k.cfg, k.B, k.T);
    k.cs = zeros(8 * hd / 2); k.sn = zeros(8 * hd / 2);
    rope_table_init(k.cs, k.sn, 8, hd, 10000.0f);
    /* weights ~ 0.3 so every path carries signal of the same order as the residual */
    size_t sz[9] = {D, (size_t)Dq * D, (size_t)Dkv * D, (size_t)Dkv * D, (size_t)D * Dq, D,
                    (size_t)F * D, (size_t)F * D, (size_t)D * F};
    float **wp[9] = {&k.w.attn_norm, &k.w.wq, &k.w.wk, &k.w.wv, &k.w.wo, &k.w.mlp_norm, &k.w.wgate,
                     &k.w.wup, &k.w.wdown};
    float **gp[9] = {&k.g.attn_norm, &k.g.wq, &k.g.wk, &k.g.wv, &k.g.wo, &k.g.mlp_norm, &k.g.wgate,
                     &k.g.wup, &k.g.wdown};
    const char *names[9] = {"attn_norm", "wq", "wk", "wv", "wo", "mlp_norm", "wgate", "wup", "wdown"};
    size_t N = (size_t)k.B * k.T;
    gc_case_t c = {bk_fwd, bk_bwd, zeros(N * D), rnd(N * D, 1), N * D, {{0}}, 0, &k};
    k.xq = (gc_in_t){"x_q", rnd(N * D, 1), zeros(N * D), N * D};
    c.in[c.n_in++] = k.xq;
    if (separate) {
        k.xkv = (gc_in_t){"x_kv", rnd(N * D, 1), zeros(N * D), N * D};
        c.in[c.n_in++] = k.xkv;
    }
    for (int i = 0; i < 9; i++) {
        *wp[i] = rnd(sz[i], i == 0 || i == 5 ? 1.0f : 0.3f);
        *gp[i] = zeros(sz[i]);
    }
    gc_run(what, &c);  /* checks the inputs */
    /* and the weights: three checks reuse the same case with the weights as inputs */
    for (int i0 = 0; i0 < 9; i0 += 3) {
        gc_case_t cw = c;
        cw.n_in = 0;
        for (int i = i0; i < i0 + 3; i++) cw.in[cw.n_in++] = (gc_in_t){names[i], *wp[i], *gp[i], sz[i]};
        /* the backward also accumulates into the input grads; those are not checked here */
        gc_run(what, &cw);
    }
    llama_block_acts_free(&k.acts);
    llama_block_scratch_free(&k.scr);
}
static void test_block_plain(void) { block_case("block causal", 0, 1); }
static void test_block_separate_kv(void) { block_case("block causal, separate KV input", 1, 1); }
static void test_block_encoder(void) { block_case("block non-causal, separate KV input", 1, 0); }

/* ---------------------------------------------------------------- whole model */
typedef struct { llama_t *m; uint32_t *tok, *tgt; uint8_t *mask; } md_ctx_t;
static void md_fwd(gc_case_t *c) {
    md_ctx_t *k = c->ctx;
    char err[256];
    llama_forward(k->m, k->tok, k->tgt, k->mask, &c->out[0], err, sizeof(err));
}
static void md_bwd(gc_case_t *c) {
    md_ctx_t *k = c->ctx;
    char err[256];
    llama_set_grad_scale(k->m, c->w[0]);
    llama_backward(k->m, err, sizeof(err));
}
static void model_case(int tied) {
    model_config_t cfg = {.vocab_size = 13, .d_model = 16, .n_layers = 2, .n_heads = 4,
                          .n_kv_heads = 2, .d_ff = 24, .max_seq = 8, .rope_theta = 10000.0f,
                          .norm_eps = 1e-5f, .tied = tied};
    const int B = 2, T = 6;
    md_ctx_t k = {0};
    char err[256];
    int rc = llama_create(&k.m, &cfg, B, T, 7, err, sizeof(err));
    CHECK(rc == 0, "%s", err);
    if (rc) return;
    /* The default 0.02 init gives gradients too small for a float finite difference (see the
     * header); weights ~ 0.3 make the loss sensitive enough. */
    size_t np;
    float *p = llama_param_data(k.m, &np);
    tensor_view_t v[64];
    int nv = llama_params(k.m, v, 64);
    for (int i = 0; i < nv; i++)
        if (v[i].ndim == 2)
            for (int64_t j = 0; j < tensor_numel(&v[i]); j++) v[i].data[j] = 0.3f * rng_normal(&R);
    k.tok = malloc(sizeof(uint32_t) * B * T);
    k.tgt = malloc(sizeof(uint32_t) * B * T);
    k.mask = malloc(B * T);
    for (int i = 0; i < B * T; i++) {
        k.tok[i] = rng_below(&R, cfg.vocab_size);
        k.tgt[i] = rng_below(&R, cfg.vocab_size);
        k.mask[i] = i % 5 != 2;
    }
    float loss = 0;
    gc_case_t c = {md_fwd, md_bwd, &loss, rnd(1, 1), 1, {{0}}, 0, &k};
    tensor_view_t gv[64];
    llama_grads(k.m, gv, 64);
    /* every parameter tensor, sampled */
    for (int i = 0; i < nv; i += 8) {
        c.n_in = 0;
        for (int j = i; j < i + 8 && j < nv; j++)
            c.in[c.n_in++] = (gc_in_t){v[j].name, v[j].data, gv[j].data, (size_t)tensor_numel(&v[j])};
        gc_run(tied ? "model tied" : "model untied", &c);
    }
    (void)p;
    free(k.tok); free(k.tgt); free(k.mask);
    llama_destroy(&k.m);
    CHECK(k.m == NULL, "llama_destroy must NULL the handle");
}
static void test_model_tied(void) { model_case(1); }
static void test_model_untied(void) { model_case(0); }

int main(void) {
    rng_seed(&R, 20251022);
    RUN(test_embedding);
    RUN(test_rmsnorm);
    RUN(test_add_rmsnorm);
    RUN(test_linear);
    RUN(test_rope);
    RUN(test_attention_causal_gqa);
    RUN(test_attention_causal_mha);
    RUN(test_attention_noncausal);
    RUN(test_attention_q_kv_differ);
    RUN(test_attention_noncausal_q_kv_differ);
    RUN(test_attention_multiblock);
    RUN(test_attention_stacked_groups);
    RUN(test_attention_window);
    RUN(test_latent);
    RUN(test_swiglu);
    RUN(test_crossentropy);
    RUN(test_crossentropy_mask);
    RUN(test_crossentropy_fused);
    RUN(test_block_plain);
    RUN(test_block_separate_kv);
    RUN(test_block_encoder);
    RUN(test_model_tied);
    RUN(test_model_untied);
    return check_summary();
}
