/* tests/test_mixer_gradcheck.c: finite-difference checks of the masked mixer (seed 004): the
 * token mixing (its loop reference in ops_mixer.c and the gemm composition the models run,
 * mixer_mix.c), the unroll op, one mixer block (flat, heads, kernel k), and the loss of every
 * model kind of model/mixers.h with respect to every parameter tensor. Method and
 * tolerances: tests/gradcheck.h. Also: a masked weight's gradient is exactly zero above the
 * diagonal, and a frozen encoder gets no gradient at all.
 *
 * EPS is 5e-3 here, not the harness's 1e-2: a mixing weight scales a sum over positions that
 * then passes RMSNorms, so the loss curves more along it than along a Linear's weight; with
 * the whole models at weights ~0.2 the truncation error at 1e-2 measured 1-1.6% (over TOL), at
 * 5e-3 it is 4x smaller, while the float noise (~1e-5 / 2e = 1e-3) stays well under TOL. */
#define EPS 5e-3f
#include "model/mixer_block.h"
#include "model/mixer_mix.h"
#include "model/mixers.h"
#include "model/ops.h"
#include "tests/check.h"
#include "tests/gradcheck.h"

/* ---------------------------------------------------------------- the token mixing */
typedef struct {
    int B, T, D, h, k, Tw, causal, composed;
    float *wm, *dws;        /* the composition's scratch */
    float *dx_set;          /* its dx is overwritten: added into the checked dx afterwards */
} mx_ctx_t;
static void mx_fwd(gc_case_t *c) {
    mx_ctx_t *k = c->ctx;
    const mixer_mix_t s = {k->h, k->k, k->Tw, k->causal};
    if (k->composed) mixer_mix_forward(device_cpu_default(), c->out, c->in[0].x, c->in[1].x, c->in[2].x, k->wm, k->B, k->T, k->D, &s);
    else token_mix_ref_forward(c->out, c->in[0].x, c->in[1].x, c->in[2].x, k->B, k->T, k->D, k->h, k->k, k->Tw, k->causal);
}
static void mx_bwd(gc_case_t *c) {
    mx_ctx_t *k = c->ctx;
    const mixer_mix_t s = {k->h, k->k, k->Tw, k->causal};
    const size_t n = (size_t)k->B * k->T * k->D;
    if (!k->composed) {
        token_mix_ref_backward(c->in[0].dx, c->in[1].dx, c->in[2].dx, c->w, c->in[0].x, c->in[1].x, k->B, k->T, k->D,
                               k->h, k->k, k->Tw, k->causal);
        return;
    }
    mixer_mix_backward(device_cpu_default(), k->dx_set, c->in[1].dx, c->in[2].dx, c->w, c->in[0].x, c->in[1].x, k->wm,
                       k->dws, k->B, k->T, k->D, &s);
    for (size_t i = 0; i < n; i++) c->in[0].dx[i] += k->dx_set[i];
}
static void mix_case(const char *what, int h, int kk, int T, int Tw, int causal, int composed) {
    mx_ctx_t k = {.B = 2, .T = T, .D = 12, .h = h, .k = kk, .Tw = Tw, .causal = causal, .composed = composed};
    const size_t n = (size_t)k.B * T * k.D, nw = (size_t)h * kk * Tw * Tw, nb = (size_t)h * Tw;
    k.wm = zeros(nw);
    k.dws = zeros(nw);
    k.dx_set = zeros(n);
    gc_case_t c = {mx_fwd, mx_bwd, zeros(n), rnd(n, 1), n, {{0}}, 3, &k};
    c.in[0] = (gc_in_t){"x", rnd(n, 1), zeros(n), n};
    c.in[1] = (gc_in_t){"w", rnd(nw, 0.5f), zeros(nw), nw};
    c.in[2] = (gc_in_t){"bias", rnd(nb, 0.5f), zeros(nb), nb};
    gc_run(what, &c);
    if (causal) {
        /* the gradient of a masked weight: exactly zero above the diagonal, non-zero below */
        int above = 0, below = 0;
        for (size_t m = 0; m < (size_t)h * kk; m++)
            for (int t = 0; t < T; t++)
                for (int s = 0; s < T; s++) {
                    float g = c.in[1].dx[m * Tw * Tw + (size_t)t * Tw + s];
                    if (s > t) above += g != 0.0f;
                    else below += g != 0.0f;
                }
        CHECK(above == 0 && below > 0, "%s: %d gradient entries above the diagonal (want 0), %d below", what, above, below);
    }
    free(k.wm); free(k.dws); free(k.dx_set); free(c.out); free(c.w);
    for (int i = 0; i < 3; i++) free(c.in[i].x), free(c.in[i].dx);
}
static void test_mix_reference(void) {
    mix_case("reference mixing, flat, masked", 1, 1, 5, 5, 1, 0);
    mix_case("reference mixing, 3 heads, k=3, masked, T < Tw", 3, 3, 5, 7, 1, 0);
    mix_case("reference mixing, 2 heads, k=2, unmasked", 2, 2, 4, 4, 0, 0);
}
static void test_mix_composed(void) {
    mix_case("gemm mixing, flat, masked", 1, 1, 5, 5, 1, 1);
    mix_case("gemm mixing, 3 heads, k=3, masked, T < Tw", 3, 3, 5, 7, 1, 1);
    mix_case("gemm mixing, 2 heads, k=2, unmasked", 2, 2, 4, 4, 0, 1);
    mix_case("gemm mixing, flat, k=4, masked", 1, 4, 6, 6, 1, 1);
}

/* ---------------------------------------------------------------- unroll */
enum { UR_B = 2, UR_T = 7, UR_D = 5, UR_ND = 3 };
static void ur_fwd(gc_case_t *c) { unroll_forward(c->out, c->in[0].x, UR_B, UR_T, UR_D, UR_ND); }
static void ur_bwd(gc_case_t *c) { unroll_backward(c->in[0].dx, c->w, UR_B, UR_T, UR_D, UR_ND); }
static void test_unroll(void) {
    const size_t n = UR_B * UR_T * UR_ND;
    gc_case_t c = {ur_fwd, ur_bwd, zeros(n), rnd(n, 1), n, {{0}}, 1, 0};
    c.in[0] = (gc_in_t){"e", rnd(UR_B * UR_D, 1), zeros(UR_B * UR_D), UR_B * UR_D};
    gc_run("unroll (T > D: windows wrap around)", &c);
}

/* ---------------------------------------------------------------- one mixer block */
typedef struct {
    model_config_t cfg;
    int B, T;
    mixer_block_acts_t acts;
    mixer_block_scratch_t scr;
    mixer_block_w_t w, g;
    float *x, *dx, *abuf, *sbuf;
} bl_ctx_t;
static void bl_fwd(gc_case_t *c) {
    bl_ctx_t *k = c->ctx;
    mixer_block_forward(device_cpu_default(), c->out, &k->acts, &k->w, k->x, &k->cfg, k->B, k->T, 1, &k->scr);
}
static void bl_bwd(gc_case_t *c) {
    bl_ctx_t *k = c->ctx;
    mixer_block_backward(device_cpu_default(), k->dx, &k->g, c->w, &k->acts, &k->w, k->x, &k->cfg, k->B, k->T, 1, &k->scr);
}
static void block_case(const char *what, int heads, int kernel) {
    bl_ctx_t k = {.B = 2, .T = 5};
    k.cfg = (model_config_t){.kind = MODEL_MIXER, .vocab_size = 8, .d_model = 12, .n_layers = 1, .n_heads = 2,
                             .n_kv_heads = 2, .d_ff = 20, .max_seq = 6, .rope_theta = 1e4f, .norm_eps = 1e-5f,
                             .mixer_heads = heads, .mixer_kernel = kernel};
    const size_t N = (size_t)k.B * k.T, D = 12;
    /* the weights, laid out by the block's own code; weights ~ 0.3 so every path carries signal */
    tensor_view_t pv[16], gv[16];
    ptable_t cnt = {0};
    mixer_block_layout(&k.cfg, "", &cnt, &k.w);
    float *pbuf = rnd(cnt.off, 0.3f), *gbuf = zeros(cnt.off);
    ptable_t pp = {.base = pbuf, .views = pv}, pg = {.base = gbuf, .views = gv};
    mixer_block_layout(&k.cfg, "", &pp, &k.w);
    mixer_block_layout(&k.cfg, "", &pg, &k.g);
    dev_arena_t ar = {0};
    mixer_block_acts_layout(&k.acts, &ar, &k.cfg, k.B, k.T);
    ar = (dev_arena_t){.base = (char *)(k.abuf = zeros(ar.used / sizeof(float) + 1))};
    mixer_block_acts_layout(&k.acts, &ar, &k.cfg, k.B, k.T);
    ar = (dev_arena_t){0};
    mixer_block_scratch_layout(&k.scr, &ar, &k.cfg, k.B, k.T);
    ar = (dev_arena_t){.base = (char *)(k.sbuf = zeros(ar.used / sizeof(float) + 1))};
    mixer_block_scratch_layout(&k.scr, &ar, &k.cfg, k.B, k.T);
    k.x = rnd(N * D, 1);
    k.dx = zeros(N * D);
    gc_case_t c = {bl_fwd, bl_bwd, zeros(N * D), rnd(N * D, 1), N * D, {{0}}, 1, &k};
    c.in[0] = (gc_in_t){"x", k.x, k.dx, N * D};
    gc_run(what, &c);
    for (int i0 = 0; i0 < pp.n; i0 += 4) {
        c.n_in = 0;
        for (int i = i0; i < i0 + 4 && i < pp.n; i++)
            c.in[c.n_in++] = (gc_in_t){pv[i].name, pv[i].data, gv[i].data, (size_t)tensor_numel(&pv[i])};
        gc_run(what, &c);
    }
    free(pbuf); free(gbuf); free(k.abuf); free(k.sbuf); free(k.x); free(k.dx); free(c.out); free(c.w);
}
static void test_block_flat(void) { block_case("mixer block, flat", 1, 1); }
static void test_block_heads(void) { block_case("mixer block, 3 heads", 3, 1); }
static void test_block_kernel(void) { block_case("mixer block, k=3", 1, 3); }

/* ---------------------------------------------------------------- whole models */
typedef struct { mixers_t *m; uint32_t *tok, *tgt; uint8_t *mask; } md_ctx_t;
static void md_fwd(gc_case_t *c) {
    md_ctx_t *k = c->ctx;
    char err[256];
    mixers_set_step(k->m, 0);   /* the training noise: the same draws in every forward */
    if (mixers_forward(k->m, k->tok, k->tgt, k->mask, &c->out[0], err, sizeof err)) CHECK(0, "%s", err);
}
static void md_bwd(gc_case_t *c) {
    md_ctx_t *k = c->ctx;
    char err[256];
    mixers_set_grad_scale(k->m, c->w[0]);
    if (mixers_backward(k->m, err, sizeof err)) CHECK(0, "%s", err);
}
static model_config_t small(model_kind kind) {
    return (model_config_t){.kind = kind, .vocab_size = 13, .d_model = 12, .n_layers = 2, .n_heads = 2,
                            .n_kv_heads = 1, .d_ff = 20, .max_seq = 6, .rope_theta = 1e4f, .norm_eps = 1e-5f,
                            .tied = 1, .mixer_heads = 1, .mixer_kernel = 1, .encoder_layers = 1};
}
static void model_case(const char *what, model_config_t cfg) {
    const int B = 2, T = 6;
    md_ctx_t k = {0};
    char err[256];
    if (mixers_create_on(&k.m, device_cpu_default(), &cfg, B, T, 3, err, sizeof err)) {
        CHECK(0, "%s: %s", what, err);
        return;
    }
    tensor_view_t v[96], gv[96];
    const int nv = mixers_params(k.m, v, 96);
    mixers_grads(k.m, gv, 96);
    /* weights ~ 0.3 (the 0.02 init leaves a float difference no signal), 1-D ones as they are */
    for (int i = 0; i < nv; i++)
        if (v[i].ndim >= 2)
            for (int64_t j = 0; j < tensor_numel(&v[i]); j++) v[i].data[j] = 0.2f * rng_normal(&R);
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
    for (int i = 0; i < nv; i += 8) {
        c.n_in = 0;
        for (int j = i; j < i + 8 && j < nv; j++)
            if (!mixers_frozen(k.m, j))
                c.in[c.n_in++] = (gc_in_t){v[j].name, v[j].data, gv[j].data, (size_t)tensor_numel(&v[j])};
        if (c.n_in) gc_run(what, &c);
    }
    /* a frozen encoder: its gradient stays exactly zero */
    int frozen = 0, nonzero = 0;
    for (int j = 0; j < nv; j++)
        if (mixers_frozen(k.m, j)) {
            frozen++;
            for (int64_t e = 0; e < tensor_numel(&gv[j]); e++) nonzero += gv[j].data[e] != 0.0f;
        }
    if (cfg.freeze_encoder) CHECK(frozen > 0 && nonzero == 0, "%s: %d frozen tensors, %d non-zero gradient entries", what, frozen, nonzero);
    if (cfg.embed_range > 0) {   /* the clamp did cut somewhere, and not everywhere */
        const float *e = mixers_embedding(k.m);
        int cut = 0, n = B * mixer_embed_dim(&cfg);
        for (int i = 0; i < n; i++) cut += fabsf(e[i]) >= cfg.embed_range * (1 - 1e-6f) - (cfg.embed_noise_bits ? cfg.embed_range / 15 : 0);
        CHECK(cut > 0 && cut < n, "%s: %d of %d floats at the clamp", what, cut, n);
    }
    free(k.tok); free(k.tgt); free(k.mask); free(c.w);
    mixers_destroy(&k.m);
}
static void test_model_mixer(void) {
    model_case("mixer, flat", small(MODEL_MIXER));
    model_config_t c = small(MODEL_MIXER);
    c.mixer_heads = 2, c.mixer_kernel = 3, c.tied = 0;
    model_case("mixer, 2 heads, k=3, untied", c);
}
static void test_model_autoencoders(void) {
    model_case("mixer-ae, repeat", small(MODEL_MIXER_AE));
    model_config_t c = small(MODEL_MIXER_AE);
    c.unroll = 1, c.embed_dim = 4, c.no_mask_encoder = 1;
    model_case("mixer-ae, unroll, d_e 4, unmasked encoder", c);
    c = small(MODEL_LLAMA_AE);
    c.unroll = 1;
    model_case("llama-ae, unroll", c);
}
static void test_model_memory(void) {
    model_config_t c = small(MODEL_MIXER_MEM);
    c.embed_dim = 5;
    model_case("mixer-mem, d_e 5", c);
    c.freeze_encoder = 1;
    model_case("mixer-mem, frozen encoder", c);
    model_case("llama-mem", small(MODEL_LLAMA_MEM));
    /* the codec: the embedding at unit RMS, some floats clamped beyond 1.2 (their gradient
     * 0), the rest with 4-bit noise */
    c = small(MODEL_MIXER_MEM);
    c.embed_dim = 5, c.embed_range = 1.2f, c.embed_noise_bits = 4;
    model_case("mixer-mem, d_e 5, clamped at 1.2, 4-bit noise", c);
    c.memory_start = 1;
    model_case("mixer-mem, d_e 5, clamped, noised, start vector", c);
    c = small(MODEL_LLAMA_MEM);
    c.memory_start = 1;
    model_case("llama-mem, start vector", c);
    c = small(MODEL_MIXER_AE);
    c.embed_dim = 4, c.embed_range = 1.2f;
    model_case("mixer-ae, d_e 4, clamped at 1.2", c);
}

int main(void) {
    rng_seed(&R, 20260115);
    RUN(test_mix_reference);
    RUN(test_mix_composed);
    RUN(test_unroll);
    RUN(test_block_flat);
    RUN(test_block_heads);
    RUN(test_block_kernel);
    RUN(test_model_mixer);
    RUN(test_model_autoencoders);
    RUN(test_model_memory);
    return check_summary();
}
