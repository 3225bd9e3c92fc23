/* tests/test_mixer.c: the masked mixer (seed 004) beyond its gradients (those are in
 * tests/test_mixer_gradcheck.c):
 *   - the element ops (mask, bias, unroll) against their definitions;
 *   - the gemm composition of the token mixing (mixer_mix.c) against the loop reference
 *     (ops_mixer.c), forward and backward, flat / heads / kernel / unmasked / T < n_ctx;
 *   - causality: a masked mixer's logits before position t do not change (bit for bit) when
 *     token t does; an unmasked one's do; a masked mixer run on a shorter sequence gives the
 *     longer run's first rows;
 *   - config.json of every kind round-trips; bad shapes are refused with one line;
 *   - a memory model takes its encoder from an autoencoder's checkpoint, and refuses one of
 *     another shape or kind naming what differs;
 *   - decoding with the cache of mixing sums (mixer_gen.h) gives the full forward's logits at
 *     every position (a prompt chunk, then one token at a time), and the same again after a
 *     reset.
 * Tolerances: the composition and the reference sum the same products in other orders (BLAS
 * blocking vs plain loops) over at most a few dozen terms of size O(1): 1e-5 absolute +
 * 1e-5 relative; the shorter-sequence logits pass products of other shapes: 1e-5 too; the
 * decoder's sums add the same products one position at a time through two layers and the
 * head: 1e-4 (measured ~1e-6). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/rng.h"
#include "model/checkpoint.h"
#include "model/mixer_gen.h"
#include "model/mixer_mix.h"
#include "model/mixers.h"
#include "model/ops.h"
#include "tests/check.h"

static rng_t R;
static char g_dir[512];

static float *rnd(size_t n, float scale) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) p[i] = scale * (2.0f * rng_f32(&R) - 1.0f);
    return p;
}
static int close_all(const char *what, const float *a, const float *b, size_t n, double atol, double rtol) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (!(fabs((double)a[i] - b[i]) <= atol + rtol * fabs((double)b[i]))) {
            if (!bad) first = i;
            bad++;
        }
    CHECK(bad == 0, "%s: %zu of %zu differ, first [%zu] %.9g vs %.9g", what, bad, n, first, bad ? a[first] : 0.0,
          bad ? b[first] : 0.0);
    return bad == 0;
}

static void test_element_ops(void) {
    /* mask: lower triangle kept, the rest zero; accumulate adds */
    enum { M = 2, T = 4 };
    float *w = rnd(M * T * T, 1), out[M * T * T], acc[M * T * T];
    mixer_tril(out, w, M, T, 0);
    int ok = 1;
    for (int m = 0; m < M; m++)
        for (int t = 0; t < T; t++)
            for (int s = 0; s < T; s++) {
                const int i = (m * T + t) * T + s;
                ok &= out[i] == (s <= t ? w[i] : 0.0f);
                acc[i] = 1.0f;
            }
    CHECK(ok, "mixer_tril keeps s <= t and zeroes the rest");
    mixer_tril(acc, w, M, T, 1);
    ok = 1;
    for (int i = 0; i < M * T * T; i++) ok &= acc[i] == 1.0f + out[i];
    CHECK(ok, "mixer_tril accumulate adds the masked weight");
    /* bias: head i's bias of position t on head i's columns */
    enum { B = 2, Tb = 5, Tr = 3, D = 6, H = 3 };
    float y[B * Tr * D] = {0}, bias[H * Tb];
    for (int i = 0; i < H * Tb; i++) bias[i] = (float)i;
    mixer_bias_forward(y, bias, B, Tr, D, H, Tb);
    CHECK(y[(1 * Tr + 2) * D + 5] == bias[2 * Tb + 2] && y[(0 * Tr + 1) * D + 0] == bias[1],
          "bias of (head 2, t 2) and (head 0, t 1) land where they belong");
    float db[H * Tb] = {0};
    mixer_bias_backward(db, y, B, Tr, D, H, Tb);
    CHECK(db[1 * Tb + 2] == (float)(B * (D / H)) * bias[1 * Tb + 2] && db[1 * Tb + 4] == 0.0f,
          "bias backward sums rows and the head's columns; positions beyond T get nothing");
    /* unroll: position i's window is e[(i + j) mod D]; its backward is the adjoint */
    enum { UB = 2, UT = 7, UD = 5, ND = 2 };
    float *e = rnd(UB * UD, 1), win[UB * UT * ND];
    unroll_forward(win, e, UB, UT, UD, ND);
    CHECK(win[(1 * UT + 4) * ND + 1] == e[1 * UD + 0] && win[(0 * UT + 6) * ND + 0] == e[1],
          "unroll windows wrap around the vector");
    float *g = rnd(UB * UT * ND, 1), de[UB * UD] = {0};
    unroll_backward(de, g, UB, UT, UD, ND);
    double lhs = 0, rhs = 0;
    for (int i = 0; i < UB * UT * ND; i++) lhs += (double)win[i] * g[i];
    for (int i = 0; i < UB * UD; i++) rhs += (double)e[i] * de[i];
    CHECK_CLOSE(lhs, rhs, 1e-6, 1e-6);
    free(w); free(e); free(g);
}

/* The embedding's codec (ops_math.h ops_embed_code) against its definition. */
static void test_embed_code(void) {
    enum { N = 4000 };
    const float R2 = 2.0f;
    float *x = rnd(N, 3.0f), *u = malloc(sizeof(float) * N), y[N], dy[N], dx[N];
    for (int i = 0; i < N; i++) u[i] = rng_f32(&R), dy[i] = 1.0f + rng_f32(&R);
    /* 3 bits: every value one of the 8 levels -2 + k 4/7, the nearest to the clamped x */
    embed_code_forward(y, x, NULL, N, R2, 3, 0);
    const float step = 4.0f / 7.0f;
    int on_grid = 1, nearest = 1, clamped = 1, seen[8] = {0}, levels = 0;
    for (int i = 0; i < N; i++) {
        const float cx = x[i] < -R2 ? -R2 : x[i] > R2 ? R2 : x[i];
        const double k = (y[i] + R2) / step;
        const int ki = (int)lrint(k);
        on_grid &= fabs(k - ki) < 1e-5 && ki >= 0 && ki <= 7;
        if (ki >= 0 && ki <= 7) seen[ki] = 1;
        nearest &= fabs(y[i] - cx) <= step / 2 + 1e-6;
        if (x[i] > R2) clamped &= y[i] == R2;
        if (x[i] < -R2) clamped &= y[i] == -R2;
    }
    for (int k = 0; k < 8; k++) levels += seen[k];
    CHECK(on_grid && levels == 8, "3 bits: every value on the 8 levels over [-2, 2] (%d levels seen)", levels);
    CHECK(nearest, "3 bits: each value within half a step of the clamped input");
    CHECK(clamped, "beyond the range: the range's ends");
    /* training noise of 4 bits: within half a 4-bit step of the clamped value, mean ~0 */
    embed_code_forward(y, x, u, N, R2, 0, 4);
    const float s4 = 4.0f / 15.0f;
    int within = 1;
    double mean = 0;
    for (int i = 0; i < N; i++) {
        const float cx = x[i] < -R2 ? -R2 : x[i] > R2 ? R2 : x[i];
        within &= fabs(y[i] - cx) <= s4 / 2 + 1e-6;
        mean += (y[i] - cx) / N;
    }
    /* the mean of N uniform noises of sd s4/sqrt(12): 4 standard errors */
    CHECK(within && fabs(mean) < 4 * s4 / sqrt(12.0 * N), "4-bit noise within +-half a step, mean %.2g", mean);
    /* range 0: unbounded, the identity whatever else is asked */
    embed_code_forward(y, x, u, N, 0.0f, 3, 4);
    CHECK(!memcmp(y, x, sizeof y), "range 0: the floats themselves");
    const float nan_in = NAN;
    embed_code_forward(y, &nan_in, NULL, 1, R2, 3, 0);
    CHECK(isnan(y[0]), "a NaN stays NaN (a diverged encoder is not hidden by the clamp)");
    /* backward: the gradient inside the range, zero where the clamp cut */
    embed_code_backward(dx, dy, x, N, R2);
    int grad_ok = 1;
    for (int i = 0; i < N; i++) grad_ok &= dx[i] == (fabsf(x[i]) < R2 ? dy[i] : 0.0f);
    CHECK(grad_ok, "backward: dy inside (-R, R), 0 outside");
    free(x);
    free(u);
}

static void mix_case(const char *what, int B, int T, int D, int h, int k, int Tw, int causal) {
    const mixer_mix_t s = {h, k, Tw, causal};
    const size_t n = (size_t)B * T * D, nw = mixer_mix_weight_floats(&s), nb = (size_t)h * Tw;
    float *x = rnd(n, 1), *w = rnd(nw, 0.5f), *bias = rnd(nb, 0.5f), *dy = rnd(n, 1);
    float *y_ref = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
    float *wm = calloc(nw, sizeof(float)), *dws = calloc(nw, sizeof(float));
    token_mix_ref_forward(y_ref, x, w, bias, B, T, D, h, k, Tw, causal);
    mixer_mix_forward(device_cpu_default(), y, x, w, bias, wm, B, T, D, &s);
    close_all(what, y, y_ref, n, 1e-5, 1e-5);
    float *dx_ref = calloc(n, sizeof(float)), *dx = calloc(n, sizeof(float));
    float *dw_ref = calloc(nw, sizeof(float)), *dw = calloc(nw, sizeof(float));
    float *db_ref = calloc(nb, sizeof(float)), *db = calloc(nb, sizeof(float));
    token_mix_ref_backward(dx_ref, dw_ref, db_ref, dy, x, w, B, T, D, h, k, Tw, causal);
    mixer_mix_backward(device_cpu_default(), dx, dw, db, dy, x, w, wm, dws, B, T, D, &s);
    close_all(what, dx, dx_ref, n, 1e-5, 1e-5);
    close_all(what, dw, dw_ref, nw, 1e-5, 1e-5);
    close_all(what, db, db_ref, nb, 1e-5, 1e-5);
    free(x); free(w); free(bias); free(dy); free(y_ref); free(y); free(wm); free(dws);
    free(dx_ref); free(dx); free(dw_ref); free(dw); free(db_ref); free(db);
}
static void test_mix_matches_reference(void) {
    mix_case("flat masked", 3, 9, 10, 1, 1, 9, 1);
    mix_case("4 heads masked", 2, 7, 16, 4, 1, 7, 1);
    mix_case("flat k=3 masked, T < n_ctx", 2, 5, 9, 1, 3, 8, 1);
    mix_case("2 heads k=4 masked", 2, 6, 14, 2, 4, 6, 1);
    mix_case("3 heads k=2 unmasked", 2, 5, 12, 3, 2, 5, 0);
}

static model_config_t cfg_of(model_kind kind) {
    return (model_config_t){.kind = kind, .vocab_size = 23, .d_model = 16, .n_layers = 2, .n_heads = 2,
                            .n_kv_heads = 1, .d_ff = 24, .max_seq = 8, .rope_theta = 1e4f, .norm_eps = 1e-5f,
                            .tied = 1, .mixer_heads = 1, .mixer_kernel = 1, .encoder_layers = 2, .embed_dim = 16};
}

/* Logits of a fresh model (weights from seed 5) on tokens (B,T). */
static float *logits_of(model_config_t c, const uint32_t *tok, int B, int T) {
    mixers_t *m = NULL;
    char err[256];
    if (mixers_create_on(&m, device_cpu_default(), &c, B, T, 5, err, sizeof err)) {
        CHECK(0, "%s", err);
        return NULL;
    }
    float *out = NULL;
    if (mixers_forward(m, tok, NULL, NULL, NULL, err, sizeof err)) CHECK(0, "%s", err);
    else {
        const size_t n = (size_t)B * T * c.vocab_size;
        out = malloc(sizeof(float) * n);
        memcpy(out, mixers_logits(m), sizeof(float) * n);
    }
    mixers_destroy(&m);
    return out;
}

/* Rows before t_changed equal bit for bit (masked) / some row before it differs (unmasked). */
static void causal_case(const char *what, int heads, int kernel, int unmasked) {
    model_config_t c = cfg_of(MODEL_MIXER);
    c.mixer_heads = heads, c.mixer_kernel = kernel, c.no_mask_decoder = unmasked;
    enum { B = 2, T = 8, tc = 5 };
    uint32_t tok[B * T], tok2[B * T];
    for (int i = 0; i < B * T; i++) tok[i] = tok2[i] = (uint32_t)rng_below(&R, c.vocab_size);
    for (int b = 0; b < B; b++) tok2[b * T + tc] = (tok[b * T + tc] + 7) % c.vocab_size;
    float *a = logits_of(c, tok, B, T), *z = logits_of(c, tok2, B, T);
    if (!a || !z) goto out;
    const size_t V = c.vocab_size, row = V * sizeof(float);
    int before_same = 1, after_differ = 0;
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < tc; t++) before_same &= !memcmp(a + ((size_t)b * T + t) * V, z + ((size_t)b * T + t) * V, row);
        after_differ += memcmp(a + ((size_t)b * T + tc) * V, z + ((size_t)b * T + tc) * V, row) != 0;
    }
    if (unmasked) CHECK(!before_same, "%s: no logits before t changed: the unmasked mixer looks ahead", what);
    else CHECK(before_same, "%s: logits before the changed token changed", what);
    CHECK(after_differ == B, "%s: the changed token's own logits must change", what);
out:
    free(a);
    free(z);
}
static void test_causality(void) {
    causal_case("masked flat", 1, 1, 0);
    causal_case("masked 2 heads", 2, 1, 0);
    causal_case("masked k=3", 1, 3, 0);
    causal_case("masked 4 heads k=2", 4, 2, 0);
    causal_case("unmasked flat", 1, 1, 1);
    causal_case("unmasked k=3", 1, 3, 1);
}

static void test_shorter_sequence(void) {
    model_config_t c = cfg_of(MODEL_MIXER);
    c.mixer_heads = 2, c.mixer_kernel = 3;
    enum { B = 2, T = 8, Ts = 5 };
    uint32_t tok[B * T], tok_s[B * Ts];
    for (int i = 0; i < B * T; i++) tok[i] = (uint32_t)rng_below(&R, c.vocab_size);
    for (int b = 0; b < B; b++) memcpy(tok_s + b * Ts, tok + b * T, sizeof(uint32_t) * Ts);
    float *a = logits_of(c, tok, B, T), *s = logits_of(c, tok_s, B, Ts);
    const size_t V = c.vocab_size;
    for (int b = 0; a && s && b < B; b++)
        close_all("T=5 run vs the T=8 run's first rows", s + (size_t)b * Ts * V, a + (size_t)b * T * V, Ts * V, 1e-5, 1e-5);
    free(a);
    free(s);
}

/* The decoder reads exactly the b-bit code: an autoencoder with a 1-bit, 2-float code has 4
 * possible embeddings, so of 9 rows some share a code, and rows that share a code get the same
 * logits bit for bit (the decoder reads nothing else), rows that do not, different ones. The
 * zero control gives every row the same logits; an encoder reading other rows gives those
 * rows' logits. */
static void test_codec_in_model(void) {
    model_config_t c = cfg_of(MODEL_MIXER_AE);
    c.embed_dim = 2, c.embed_range = 0.05f, c.embed_noise_bits = 1;
    enum { B = 9, T = 8 };
    mixers_t *m = NULL;
    char err[256];
    uint32_t tok[B * T], perm[B * T];
    for (int i = 0; i < B * T; i++) tok[i] = (uint32_t)rng_below(&R, c.vocab_size);
    for (int b = 0; b < B; b++) memcpy(perm + b * T, tok + ((b + 4) % B) * T, sizeof(uint32_t) * T);
    if (mixers_create_on(&m, device_cpu_default(), &c, B, T, 5, err, sizeof err)) {
        CHECK(0, "%s", err);
        return;
    }
    tensor_view_t v[64];
    const int nv = mixers_params(m, v, 64);
    for (int i = 0; i < nv; i++)   /* weights ~ 0.3: embeddings that differ across rows */
        if (v[i].ndim >= 2)
            for (int64_t j = 0; j < tensor_numel(&v[i]); j++) v[i].data[j] = 0.3f * rng_normal(&R);
    const size_t V = c.vocab_size, rowb = sizeof(float) * T * V;
    float *lg = malloc(rowb * B), *lp = malloc(rowb * B);
    float emb[B * 2];
    CHECK(mixers_set_embed_eval(m, 1, 0, err, sizeof err) == 0, "%s", err);
    CHECK(mixers_forward(m, tok, NULL, NULL, NULL, err, sizeof err) == 0, "%s", err);
    memcpy(lg, mixers_logits(m), rowb * B);
    memcpy(emb, mixers_embedding(m), sizeof emb);
    int codes_ok = 1, pairs = 0, same_ok = 1, diff_ok = 1;
    for (int i = 0; i < B * 2; i++) codes_ok &= emb[i] == c.embed_range || emb[i] == -c.embed_range;
    CHECK(codes_ok, "1 bit: every float of the embedding read is +-R");
    for (int a = 0; a < B; a++)
        for (int b = a + 1; b < B; b++) {
            const int same_code = emb[2 * a] == emb[2 * b] && emb[2 * a + 1] == emb[2 * b + 1];
            const int same_logits = !memcmp(lg + a * T * V, lg + b * T * V, rowb);
            pairs += same_code;
            if (same_code) same_ok &= same_logits;
            else diff_ok &= !same_logits;
        }
    CHECK(pairs > 0 && same_ok, "rows sharing a code (%d pairs) get the same logits bit for bit", pairs);
    CHECK(pairs < B * (B - 1) / 2, "the rows do not all share one code");
    CHECK(diff_ok, "rows with different codes get different logits");
    /* the encoder reading other rows: the decoder's logits follow the embedding */
    CHECK(mixers_forward_enc(m, tok, perm, NULL, NULL, NULL, err, sizeof err) == 0, "%s", err);
    int follows = 1;
    for (int b = 0; b < B; b++) follows &= !memcmp(mixers_logits(m) + b * T * V, lg + ((b + 4) % B) * T * V, rowb);
    CHECK(follows, "an encoder reading row b+4 gives row b the logits of row b+4");
    /* the zero control: one embedding (zeros) for every row */
    CHECK(mixers_set_embed_eval(m, 1, 1, err, sizeof err) == 0, "%s", err);
    CHECK(mixers_forward(m, tok, NULL, NULL, NULL, err, sizeof err) == 0, "%s", err);
    memcpy(lp, mixers_logits(m), rowb * B);
    int zeros = 1;
    for (int b = 1; b < B; b++) zeros &= !memcmp(lp, lp + b * T * V, rowb);
    for (int i = 0; i < B * 2; i++) zeros &= mixers_embedding(m)[i] == 0.0f;
    CHECK(zeros, "zero control: the embedding read is 0 and every row's logits are the same");
    /* 32 bits: the clamped floats; an unbounded model has no 8-bit code */
    CHECK(mixers_set_embed_eval(m, 32, 0, err, sizeof err) == 0, "%s", err);
    mixers_destroy(&m);
    /* a range of 4: the embedding read is each row's down(e) at unit RMS (nothing beyond 4 sd
     * in 2 floats: the clamp does not cut) */
    c.embed_range = 4.0f;
    CHECK(mixers_create_on(&m, device_cpu_default(), &c, B, T, 5, err, sizeof err) == 0, "%s", err);
    if (m) {
        mixers_params(m, v, 64);
        for (int i = 0; i < nv; i++)
            if (v[i].ndim >= 2)
                for (int64_t j = 0; j < tensor_numel(&v[i]); j++) v[i].data[j] = 0.3f * rng_normal(&R);
    }
    CHECK(m && mixers_set_embed_eval(m, 32, 0, err, sizeof err) == 0 &&
          mixers_forward(m, tok, NULL, NULL, NULL, err, sizeof err) == 0, "%s", err);
    int unit = m != NULL;
    for (int b = 0; unit && b < B; b++) {
        const float *e = mixers_embedding(m) + 2 * b;
        unit &= fabs(sqrt((e[0] * e[0] + e[1] * e[1]) / 2.0) - 1.0) < 1e-4;
    }
    CHECK(unit, "a bounded embedding is read at unit RMS");
    CHECK(mixers_set_embed_eval(m, 25, 0, err, sizeof err) != 0 && strstr(err, "1..24"), "25 bits refused: %s", err);
    mixers_destroy(&m);
    c.embed_range = 0, c.embed_noise_bits = 0;
    CHECK(mixers_create_on(&m, device_cpu_default(), &c, B, T, 5, err, sizeof err) == 0, "%s", err);
    CHECK(m && mixers_set_embed_eval(m, 8, 0, err, sizeof err) != 0 && strstr(err, "unbounded") && !strchr(err, '\n'),
          "an unbounded embedding has no 8-bit code: %s", err);
    mixers_destroy(&m);
    free(lg);
    free(lp);
}

static void test_config(void) {
    const model_kind kinds[] = {MODEL_MIXER, MODEL_MIXER_AE, MODEL_LLAMA_AE, MODEL_MIXER_MEM, MODEL_LLAMA_MEM};
    const char *names[] = {"mixer", "mixer-ae", "llama-ae", "mixer-mem", "llama-mem"};
    char err[256];
    for (int i = 0; i < 5; i++) {
        model_config_t c = cfg_of(kinds[i]), d;
        if (!mixer_kind_has_encoder(kinds[i])) c.encoder_layers = c.embed_dim = 0;
        if (!mixer_kind_uses_mixer(kinds[i])) c.mixer_heads = c.mixer_kernel = 0;
        if (mixer_kind_is_autoencoder(kinds[i])) c.unroll = 1, c.no_mask_encoder = 1, c.embed_dim = 4;
        if (mixer_kind_has_encoder(kinds[i])) c.embed_range = 2.5f, c.embed_noise_bits = 6;
        if (mixer_kind_is_memory(kinds[i])) c.freeze_encoder = 1, c.memory_start = 1;
        json_t *j = ckpt_config_to_json(&c);
        CHECK(j && !strcmp(json_string_value(json_object_get(j, "ft_model_kind")), names[i]), "%s: kind name", names[i]);
        CHECK(j && strncmp(json_string_value(json_array_get(json_object_get(j, "architectures"), 0)), "Ft", 2) == 0,
              "%s: an architecture transformers does not mistake for a Llama", names[i]);
        memset(&d, 0, sizeof d);
        CHECK(j && ckpt_config_from_json(j, &d, err, sizeof err) == 0, "%s: %s", names[i], err);
        CHECK(!memcmp(&c, &d, sizeof c), "%s: config changed in the round trip", names[i]);
        json_decref(j);
    }
    struct { const char *what; int heads, kernel, embed; const char *want; } bad[] = {
        {"heads not dividing d", 3, 1, 16, "mixer heads 3 must be >= 1 and divide d_model 16"},
        {"kernel 0", 1, 0, 16, "mixer kernel 0 must be in 1..16"},
        {"kernel wider than a head", 4, 5, 16, "mixer kernel 5 must be in 1..4"},
        {"embedding wider than d", 1, 1, 17, "embedding dimension 17 must be in 1..d_model 16"},
    };
    {   /* the codec's fields */
        model_config_t c = cfg_of(MODEL_MIXER_AE);
        c.embed_noise_bits = 8;
        mixers_t *m = NULL;
        CHECK(mixers_create_on(&m, device_cpu_default(), &c, 1, 8, 1, err, sizeof err) != 0 && strstr(err, "bounded"),
              "noise without a range refused: %s", err);
        c.embed_range = -1, c.embed_noise_bits = 0;
        CHECK(mixers_create_on(&m, device_cpu_default(), &c, 1, 8, 1, err, sizeof err) != 0 && strstr(err, "range"),
              "a negative range refused: %s", err);
        c = cfg_of(MODEL_MIXER);
        c.encoder_layers = c.embed_dim = 0, c.embed_range = 1;
        CHECK(mixers_create_on(&m, device_cpu_default(), &c, 1, 8, 1, err, sizeof err) != 0 && strstr(err, "no stored embedding"),
              "a causal mixer with a range refused: %s", err);
        /* a config.json written before the codec: unbounded */
        c = cfg_of(MODEL_MIXER_MEM);
        json_t *j = ckpt_config_to_json(&c);
        json_object_del(j, "ft_embed_range");
        json_object_del(j, "ft_embed_noise_bits");
        json_object_del(j, "ft_memory_start");
        model_config_t d;
        CHECK(j && ckpt_config_from_json(j, &d, err, sizeof err) == 0 && d.embed_range == 0 && d.embed_noise_bits == 0 &&
                  d.memory_start == 0,
              "an older config.json reads as unbounded, without a start vector: %s", err);
        json_decref(j);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        model_config_t c = cfg_of(MODEL_MIXER_AE);
        c.mixer_heads = bad[i].heads, c.mixer_kernel = bad[i].kernel, c.embed_dim = bad[i].embed;
        mixers_t *m = NULL;
        err[0] = 0;
        CHECK(mixers_create_on(&m, device_cpu_default(), &c, 1, 8, 1, err, sizeof err) != 0 && !m, "%s refused", bad[i].what);
        CHECK(strstr(err, bad[i].want) && !strchr(err, '\n'), "%s: one line saying \"%s\", got \"%s\"", bad[i].what, bad[i].want, err);
    }
    model_config_t c = cfg_of(MODEL_MIXER_MEM);
    c.no_mask_decoder = 1;
    mixers_t *m = NULL;
    CHECK(mixers_create_on(&m, device_cpu_default(), &c, 1, 8, 1, err, sizeof err) != 0 && strstr(err, "causal"),
          "an unmasked memory decoder refused: %s", err);
    c = cfg_of(MODEL_MIXER_AE);
    c.memory_start = 1;
    CHECK(mixers_create_on(&m, device_cpu_default(), &c, 1, 8, 1, err, sizeof err) != 0 && strstr(err, "start vector"),
          "a start vector on an autoencoder refused: %s", err);
}

/* The memory model's start vector (cfg.memory_start): one more tensor, memory.start (D), 0 at
 * init, so a fresh model with it computes the logits of the same model without it bit for bit
 * (the other weights draw the same numbers); set, it changes position 0's input and the logits. */
static void test_memory_start(void) {
    enum { B = 3, T = 8 };
    uint32_t tok[B * T];
    for (int i = 0; i < B * T; i++) tok[i] = (uint32_t)rng_below(&R, 23);
    model_config_t c = cfg_of(MODEL_MIXER_MEM);
    c.embed_dim = 4, c.embed_range = 2;
    float *plain = logits_of(c, tok, B, T);
    c.memory_start = 1;
    float *with = logits_of(c, tok, B, T);
    const size_t n = (size_t)B * T * c.vocab_size;
    CHECK(plain && with && !memcmp(plain, with, sizeof(float) * n), "a fresh start vector (0) changes no logit");
    mixers_t *m = NULL;
    char err[256];
    CHECK(mixers_create_on(&m, device_cpu_default(), &c, B, T, 5, err, sizeof err) == 0, "%s", err);
    tensor_view_t v[64];
    const int nv = m ? mixers_params(m, v, 64) : 0;
    int found = 0, zero = 1;
    for (int i = 0; i < nv; i++)
        if (!strcmp(v[i].name, "memory.start")) {
            found = tensor_numel(&v[i]) == c.d_model;
            for (int j = 0; j < c.d_model; j++) zero &= v[i].data[j] == 0.0f, v[i].data[j] = 0.5f;
        }
    CHECK(found && zero, "memory.start: (D) zeros at init");
    CHECK(m && mixers_forward(m, tok, NULL, NULL, NULL, err, sizeof err) == 0, "%s", err);
    CHECK(m && memcmp(mixers_logits(m), plain, sizeof(float) * n) != 0, "a set start vector changes the logits");
    mixers_destroy(&m);
    free(plain);
    free(with);
}

/* Saves a fresh model's weights as checkpoint <g_dir>/name/ckpt-00000001. */
static int save_model(mixers_t *m, const char *name, char *dir, size_t cap) {
    char run[600], err[256];
    snprintf(run, sizeof run, "%s/%s", g_dir, name);
    tensor_view_t v[128];
    int n = mixers_params(m, v, 128);
    int rc = ckpt_save(run, 1, mixers_config(m), v, n, NULL, NULL, 0, NULL, 0, dir, cap, err, sizeof err);
    CHECK(rc == 0, "save %s: %s", name, err);
    return rc;
}

static void test_load_encoder(void) {
    char err[512], dir[1200];
    model_config_t ae = cfg_of(MODEL_MIXER_AE);
    ae.embed_dim = 6;
    mixers_t *a = NULL, *m = NULL;
    if (mixers_create_on(&a, device_cpu_default(), &ae, 1, 8, 11, err, sizeof err) || save_model(a, "ae", dir, sizeof dir)) {
        CHECK(0, "%s", err);
        mixers_destroy(&a);
        return;
    }
    model_config_t mc = ae;
    mc.kind = MODEL_MIXER_MEM;
    mc.freeze_encoder = 1;
    CHECK(mixers_create_on(&m, device_cpu_default(), &mc, 2, 8, 12, err, sizeof err) == 0, "%s", err);
    CHECK(m && mixers_load_encoder(m, dir, err, sizeof err) == 0, "%s", err);
    /* the encoder views are the autoencoder's, bit for bit; the decoder is the memory model's */
    tensor_view_t va[128], vm[128];
    int na = mixers_params(a, va, 128), nm = m ? mixers_params(m, vm, 128) : 0, same = 0, enc = 0;
    for (int i = 0; i < nm; i++) {
        if (!mixers_frozen(m, i)) continue;
        enc++;
        for (int k = 0; k < na; k++)
            if (!strcmp(va[k].name, vm[i].name))
                same += !memcmp(va[k].data, vm[i].data, sizeof(float) * tensor_numel(&vm[i]));
    }
    CHECK(enc > 0 && same == enc, "%d of %d encoder tensors loaded bit for bit", same, enc);
    mixers_destroy(&m);
    /* another shape, another kind: one line each naming what differs */
    mc.embed_dim = 8;
    mixers_create_on(&m, device_cpu_default(), &mc, 1, 8, 1, err, sizeof err);
    err[0] = 0;
    CHECK(m && mixers_load_encoder(m, dir, err, sizeof err) != 0 && strstr(err, "embedding dimension d_e is 6") &&
              !strchr(err, '\n'), "d_e mismatch: %s", err);
    mixers_destroy(&m);
    mc = ae;
    mc.kind = MODEL_LLAMA_MEM;
    mixers_create_on(&m, device_cpu_default(), &mc, 1, 8, 1, err, sizeof err);
    err[0] = 0;
    CHECK(m && mixers_load_encoder(m, dir, err, sizeof err) != 0 && strstr(err, "holds a mixer-ae model"),
          "kind mismatch: %s", err);
    mixers_destroy(&m);
    mixers_destroy(&a);
}

static void test_generation(void) {
    model_config_t c = cfg_of(MODEL_MIXER);
    c.mixer_heads = 2, c.mixer_kernel = 3;
    enum { B = 2, T = 8, P = 3 };
    uint32_t tok[B * T];
    for (int i = 0; i < B * T; i++) tok[i] = (uint32_t)rng_below(&R, c.vocab_size);
    float *full = logits_of(c, tok, B, T);
    mixers_t *m = NULL;
    mixer_gen_t *g = NULL;
    char err[256];
    if (!full || mixers_create_on(&m, device_cpu_default(), &c, 1, 1, 5, err, sizeof err) ||
        mixer_gen_create(&g, m, B, T, err, sizeof err)) {
        CHECK(0, "%s", err);
        goto out;
    }
    const size_t V = c.vocab_size;
    for (int round = 0; round < 2; round++) {
        mixer_gen_reset(g);
        uint32_t chunk[B * P], next[B];
        float all[B * P * 23];
        for (int b = 0; b < B; b++) memcpy(chunk + b * P, tok + b * T, sizeof(uint32_t) * P);
        CHECK(mixer_gen_step(g, chunk, B, P, all, err, sizeof err) == 0, "%s", err);
        for (int b = 0; b < B; b++)
            close_all("prompt chunk logits", all + (size_t)b * P * V, full + (size_t)b * T * V, P * V, 1e-4, 1e-4);
        for (int t = P; t < T; t++) {
            for (int b = 0; b < B; b++) next[b] = tok[b * T + t];
            CHECK(mixer_gen_step(g, next, B, 1, NULL, err, sizeof err) == 0, "%s", err);
            for (int b = 0; b < B; b++)
                close_all(round ? "decoded logits after a reset" : "decoded logits", mixer_gen_logits(g) + b * V,
                          full + ((size_t)b * T + t) * V, V, 1e-4, 1e-4);
        }
        CHECK(mixer_gen_pos(g) == T, "position %d after %d tokens", mixer_gen_pos(g), T);
    }
    CHECK(mixer_gen_step(g, tok, 1, 1, NULL, err, sizeof err) != 0 && strstr(err, "beyond"), "a full cache refuses: %s", err);
out:
    mixer_gen_destroy(&g);
    mixers_destroy(&m);
    free(full);
}

int main(void) {
    rng_seed(&R, 4004);
    const char *base = getenv("FT_TEST_TMP");
    snprintf(g_dir, sizeof g_dir, "%s/test_mixer.XXXXXX", base ? base : "/tmp");
    if (!mkdtemp(g_dir)) {
        fprintf(stderr, "cannot create %s\n", g_dir);
        return 1;
    }
    RUN(test_element_ops);
    RUN(test_embed_code);
    RUN(test_mix_matches_reference);
    RUN(test_causality);
    RUN(test_shorter_sequence);
    RUN(test_codec_in_model);
    RUN(test_config);
    RUN(test_memory_start);
    RUN(test_load_encoder);
    RUN(test_generation);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", g_dir);
    return check_summary();
}
