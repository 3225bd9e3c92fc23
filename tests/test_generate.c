/* tests/test_generate.c: KV-cache inference of the baseline equals the full forward.
 *
 * The full forward (llama_forward over the whole sequence) is the reference: the logits the
 * cached generator computes for a position, whether it came in a prefill chunk or one token
 * at a time, must be those of the full forward at that position.
 * Slots: sequences in different slots at different positions, decoded together, give every
 * sequence the logits it gets decoded alone, bit for bit (a serving batch changes no text). */
#include "model/generate.h"
#include "common/rng.h"
#include "tests/check.h"
#include <stdlib.h>
#include <string.h>

static model_config_t tiny(int tied) {
    return (model_config_t){.kind = MODEL_LLAMA, .vocab_size = 61, .d_model = 32, .n_layers = 3,
                            .n_heads = 4, .n_kv_heads = 2, .d_ff = 48, .max_seq = 96,
                            .rope_theta = 10000.0f, .norm_eps = 1e-5f, .tied = tied};
}

static void fill(uint32_t *t, int n, int V, uint64_t seed) {
    rng_t r;
    rng_seed(&r, seed);
    for (int i = 0; i < n; i++) t[i] = (uint32_t)rng_below(&r, V);
}

/* The default init (std 0.02) makes near-uniform attention and logits near 0, where a wrong
 * position or a stale cache entry would hardly show: scale every matrix up to std ~0.3 so
 * attention is peaked and logits spread over several units. */
static llama_t *model(model_config_t c, int B, int T, uint64_t seed) {
    char err[256];
    llama_t *m = NULL;
    if (llama_create(&m, &c, B, T, seed, err, sizeof err)) { CHECK(0, "%s", err); return NULL; }
    size_t n;
    float *p = llama_param_data(m, &n);
    for (size_t i = 0; i < n; i++)
        if (p[i] != 1.0f) p[i] *= 15.0f;  /* norm weights (exactly 1) stay 1 */
    return m;
}

/* max |a - b| / max |b| */
static double max_rel(const float *a, const float *b, size_t n) {
    double md = 0, mb = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= md)) md = d;
        if (fabs(b[i]) > mb) mb = fabs(b[i]);
    }
    return mb > 0 ? md / mb : md;
}

/* Tolerance: both paths run the same ops in float; only the matrix products see another row
 * count (N = 1 vs N = B*T), which may change BLAS's kernel and so the order of a dot
 * product's additions: errors of a few ulp per product, growing through 3 layers. 2e-5 of the
 * largest logit is ~100x that and far below what a wrong key, position or head would give
 * (O(1) changes; checked by the negative case below). */
#define TOL 2e-5

/* path: 0 the default choice, 1 every chunk through ops.h's parallel kernels, 2 every chunk
 * through the serial row kernels */
static void check_incremental(int tied, int B, int T, int prefill, int path) {
    model_config_t c = tiny(tied);
    const int V = c.vocab_size;
    llama_t *m = model(c, B, T, 11 + tied);
    if (!m) return;
    uint32_t *tok = malloc(sizeof(uint32_t) * B * T), *chunk = malloc(sizeof(uint32_t) * B * T);
    fill(tok, B * T, V, 5);
    char err[256];
    CHECK(llama_forward(m, tok, NULL, NULL, NULL, err, sizeof err) == 0, "%s", err);
    float *ref = malloc(sizeof(float) * B * T * V), *got = malloc(sizeof(float) * B * T * V);
    memcpy(ref, llama_logits(m), sizeof(float) * B * T * V);
    gen_t *g = NULL;
    CHECK(gen_create(&g, m, B, T, err, sizeof err) == 0, "%s", err);
    if (!g) goto out;
    if (path) gen_set_serial_macs(g, path == 1 ? 0.0 : 1e30);
    /* prefill rows [0, prefill) in one chunk with every position's logits, then one by one */
    for (int b = 0; b < B; b++) memcpy(chunk + b * prefill, tok + b * T, sizeof(uint32_t) * prefill);
    float *pl = malloc(sizeof(float) * B * prefill * V);
    CHECK(gen_step(g, chunk, B, prefill, pl, err, sizeof err) == 0, "%s", err);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < prefill; t++)
            memcpy(got + ((size_t)b * T + t) * V, pl + ((size_t)b * prefill + t) * V, sizeof(float) * V);
    free(pl);
    for (int t = prefill; t < T; t++) {
        for (int b = 0; b < B; b++) chunk[b] = tok[b * T + t];
        CHECK(gen_step(g, chunk, B, 1, NULL, err, sizeof err) == 0, "%s", err);
        for (int b = 0; b < B; b++)
            memcpy(got + ((size_t)b * T + t) * V, gen_logits(g) + (size_t)b * V, sizeof(float) * V);
    }
    CHECK(gen_pos(g) == T, "pos %d", gen_pos(g));
    double e = max_rel(got, ref, (size_t)B * T * V);
    fprintf(stderr, "  tied=%d B=%d T=%d prefill=%d path=%d: max rel error %.2g\n", tied, B, T,
            prefill, path, e);
    CHECK(e < TOL, "tied=%d B=%d T=%d prefill=%d: max rel error %.3g", tied, B, T, prefill, e);
    /* the last prefill row's logits are also what gen_logits gave after the prefill chunk:
     * compare the final position through gen_logits */
    double e2 = max_rel(gen_logits(g), ref + (size_t)(T - 1) * V, V);
    CHECK(e2 < TOL, "last logits of sequence 0: %.3g", e2);
    /* negative control: the logits of position t differ from those of t-1 by far more than TOL */
    double d = max_rel(ref + (size_t)(T - 1) * V, ref + (size_t)(T - 2) * V, V);
    CHECK(d > 100 * TOL, "positions should differ: %.3g", d);
out:
    gen_destroy(&g);
    CHECK(g == NULL);
    llama_destroy(&m);
    free(tok); free(chunk); free(ref); free(got);
}

static void test_decode_one_by_one(void) { check_incremental(1, 1, 40, 1, 0); }
static void test_prefill_then_decode(void) {
    for (int path = 0; path < 3; path++) check_incremental(1, 1, 40, 17, path);
}
/* batches of 3 and 5 rows: matrix-vector products below 4 rows, model_gemm from 4 */
static void test_batch_untied(void) {
    for (int path = 0; path < 3; path++) check_incremental(0, 3, 33, 9, path);
    check_incremental(0, 5, 20, 3, 0);
}
/* a prompt longer than one attention key block (64) */
static void test_long_prefill(void) {
    for (int path = 0; path < 3; path++) check_incremental(1, 2, 90, 70, path);
}

/* Reset forgets the cache: the same chunk after a reset gives the same logits. */
static void test_reset(void) {
    model_config_t c = tiny(1);
    llama_t *m = model(c, 1, 16, 3);
    if (!m) return;
    char err[256];
    gen_t *g = NULL;
    CHECK(gen_create(&g, m, 1, 16, err, sizeof err) == 0, "%s", err);
    uint32_t tok[8];
    fill(tok, 8, c.vocab_size, 9);
    float a[61], b[61];
    gen_step(g, tok, 1, 8, NULL, err, sizeof err);
    memcpy(a, gen_logits(g), sizeof a);
    gen_step(g, tok, 1, 8, NULL, err, sizeof err);  /* positions 8..15: different context */
    CHECK(max_rel(gen_logits(g), a, 61) > 100 * TOL, "a longer context should change the logits");
    gen_reset(g);
    CHECK(gen_pos(g) == 0);
    gen_step(g, tok, 1, 8, NULL, err, sizeof err);
    memcpy(b, gen_logits(g), sizeof b);
    CHECK(memcmp(a, b, sizeof a) == 0, "same chunk after reset gives the same logits");
    gen_destroy(&g);
    llama_destroy(&m);
}

/* S sequences with prompts of different lengths, each prefilled alone into its slot, then
 * decoded together (rows joining and leaving between steps; up to 20 at once, beyond the
 * few-row product path, where an ordinary product would change its algorithm with the row
 * count); each sequence's logits equal, bit for bit, those of the same sequence prefilled and
 * decoded alone in another generator. */
enum { SLOTS = 20 };
static void test_slots_batched_equals_alone(void) {
    model_config_t c = tiny(1);
    const int V = c.vocab_size, S = SLOTS, T = 40;
    int plen[SLOTS], steps[SLOTS], join[SLOTS];
    for (int s = 0; s < S; s++) plen[s] = 1 + (s * 7) % 13, steps[s] = 4 + (s * 5) % 12, join[s] = s < 16 ? 0 : 2 * (s - 15);
    llama_t *m = model(c, S, T, 21);
    if (!m) return;
    char err[256];
    gen_t *all = NULL, *one = NULL;
    CHECK(gen_create(&all, m, S, T, err, sizeof err) == 0 && gen_create(&one, m, 1, T, err, sizeof err) == 0, "%s", err);
    if (!all || !one) goto out;
    uint32_t prompt[SLOTS][16], next[SLOTS][20];
    for (int s = 0; s < S; s++) fill(prompt[s], plen[s], V, 100 + s), fill(next[s], 20, V, 200 + s);
    /* alone: each sequence's logits after its prompt and after each of its new tokens */
    float *ref = malloc(sizeof(float) * S * 20 * V);
    for (int s = 0; s < S; s++) {
        gen_reset(one);
        CHECK(gen_step(one, prompt[s], 1, plen[s], NULL, err, sizeof err) == 0, "%s", err);
        memcpy(ref + ((size_t)s * 20) * V, gen_logits(one), sizeof(float) * V);
        for (int k = 0; k < steps[s]; k++) {
            CHECK(gen_step(one, &next[s][k], 1, 1, NULL, err, sizeof err) == 0, "%s", err);
            memcpy(ref + ((size_t)s * 20 + k + 1) * V, gen_logits(one), sizeof(float) * V);
        }
    }
    /* together: a sequence joins (its prompt prefilled alone) at step join[s] and leaves after
     * its own steps; at every step the running ones decode in one chunk */
    int done[SLOTS] = {0}, running = 0, mismatch = 0;
    for (int step = 0; step < 30; step++) {
        for (int s = 0; s < S; s++)
            if (join[s] == step) {
                gen_reset_slot(all, s);
                CHECK(gen_begin_slots(all, &s, prompt[s], 1, plen[s], err, sizeof err) == 0, "%s", err);
                gen_blocks(all, 0, c.n_layers, NULL);
                CHECK(gen_finish(all, NULL, err, sizeof err) == 0, "%s", err);
                mismatch += memcmp(gen_logits(all), ref + ((size_t)s * 20) * V, sizeof(float) * V) != 0;
                running++;
            }
        int slots[SLOTS], n = 0;
        uint32_t tok[SLOTS];
        for (int s = 0; s < S; s++)
            if (join[s] <= step && done[s] < steps[s]) slots[n] = s, tok[n] = next[s][done[s]], n++;
        if (!n) continue;
        CHECK(gen_begin_slots(all, slots, tok, n, 1, err, sizeof err) == 0, "%s", err);
        gen_blocks(all, 0, c.n_layers, NULL);
        CHECK(gen_finish(all, NULL, err, sizeof err) == 0, "%s", err);
        for (int i = 0; i < n; i++) {
            const int s = slots[i];
            done[s]++;
            mismatch += memcmp(gen_logits(all) + (size_t)i * V, ref + ((size_t)s * 20 + done[s]) * V,
                               sizeof(float) * V) != 0;
        }
    }
    for (int s = 0; s < S; s++) CHECK(done[s] == steps[s], "sequence %d decoded %d of %d steps", s, done[s], steps[s]);
    CHECK(mismatch == 0, "%d logit rows differ from the sequence decoded alone", mismatch);
    CHECK(gen_slot_pos(all, 2) == plen[2] + steps[2], "slot 2 at position %d", gen_slot_pos(all, 2));
    free(ref);
out:
    gen_destroy(&all);
    gen_destroy(&one);
    llama_destroy(&m);
}

static void test_bad_input(void) {
    model_config_t c = tiny(1);
    llama_t *m = model(c, 2, 8, 3);
    if (!m) return;
    char err[256] = "";
    gen_t *g = NULL;
    CHECK(gen_create(&g, m, 2, 97, err, sizeof err) == LLAMA_ECONFIG && !g, "capacity > max_seq");
    CHECK(gen_create(&g, m, 2, 8, err, sizeof err) == 0, "%s", err);
    if (!g) { llama_destroy(&m); return; }
    uint32_t tok[16] = {0};
    tok[3] = 61;
    CHECK(gen_step(g, tok, 2, 4, NULL, err, sizeof err) == LLAMA_ETOKEN, "id 61 of 61");
    CHECK(strstr(err, "outside the vocabulary") != NULL, "%s", err);
    CHECK(gen_pos(g) == 0, "a refused chunk leaves the cache alone");
    tok[3] = 1;
    CHECK(gen_step(g, tok, 3, 1, NULL, err, sizeof err) == LLAMA_EARG, "B beyond Bmax");
    CHECK(gen_step(g, tok, 2, 6, NULL, err, sizeof err) == 0, "%s", err);
    CHECK(gen_step(g, tok, 2, 3, NULL, err, sizeof err) == LLAMA_EARG, "6 + 3 > 8");
    CHECK(strstr(err, "capacity") != NULL, "%s", err);
    CHECK(gen_finish(g, NULL, err, sizeof err) == LLAMA_EARG, "finish without a chunk");
    gen_destroy(&g);
    llama_destroy(&m);
}

int main(void) {
    RUN(test_decode_one_by_one);
    RUN(test_prefill_then_decode);
    RUN(test_batch_untied);
    RUN(test_long_prefill);
    RUN(test_reset);
    RUN(test_slots_batched_equals_alone);
    RUN(test_bad_input);
    return check_summary();
}
