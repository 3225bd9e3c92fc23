/* tests/test_device_kernels.c: the CUDA device's kernel families (model/cuda/) against the
 * CPU device, at shapes chosen to take every path of each kernel:
 *   - attention: several query and key tiles (T > 64), grouped-query heads, causal with
 *     Tq < Tk (a KV cache's prefill), a sliding window, non-causal, head dimensions that are
 *     padded (12 -> 16) or not (16, 64); forward and both backward passes; the backward into
 *     the fused q|k|v rows (attention_backward_qkv: stored, un-rotated); the decode rows
 *     with caches of 0, 1 and several tiles of keys;
 *   - RMSNorm: the vector path (D % 4 == 0, D <= 1024), the scalar one (D = 37) and a row too
 *     long for the registers (D = 1100); several column-reduction blocks (N > 32);
 *   - the classifier: rows cached in shared memory and rows too long for it (V = 70000),
 *     masked rows, the gradient written over the logits, the separate backward;
 *   - the embedding backward: a token repeated more than a piece (32 rows) and token ids
 *     above 2^16 (both radix passes);
 *   - sum_rows, SwiGLU, the residual adds and scaling at vector and scalar sizes, RoPE and the
 *     fused q|k|v rows at hd/2 % 4 == 0 and not;
 *   - the optimizer over a list of tensors of odd sizes (sumsq_multi, adamw_update_multi).
 *
 *   test_device_kernels                  the CPU device against a second CPU device (make
 *                                        test: proves the harness; results agree bit for bit)
 *   test_device_kernels --device cuda [--precision bf16]
 *                                        the CUDA device, under the emulator (tests/emu) or
 *                                        on a GPU (make test-gpu)
 * The reference runs at the device's precision (fp32 for tf32): in bf16 both round the
 * products' operands, so what differs is the order of sums and where attention's
 * probabilities are rounded (the GPU rounds P after its online rescaling).
 * Tolerances: element-wise 1e-6 relative (the same formula; FMA contraction may differ);
 * row and column sums 1e-5 (another order of up to ~1000 terms); attention 1e-4 relative with
 * a 1e-5 floor in fp32 (a softmax of up to 150 keys and products of up to hd = 64 terms in
 * another order, exp approximations of ~2 ulp on either side); in bf16 attention 3e-2
 * relative with a 1e-2 floor (P rounded to bf16 at a different point: 2^-8 per term). */
#include "common/rng.h"
#include "model/device.h"
#include "tests/check.h"
#include <stdlib.h>
#include <string.h>

static device_t *A, *B;
static rng_t R;
static int bf16;

#include "tests/device_pair.h"

/* both sides of a float buffer: |a - b| <= atol + rtol |a| */
static void same(const char *what, dbuf_t *x, double atol, double rtol) {
    float *ha = malloc(sizeof(float) * x->n), *hb = malloc(sizeof(float) * x->n);
    DEV(A, download, ha, x->a, sizeof(float) * x->n);
    DEV(B, download, hb, x->b, sizeof(float) * x->n);
    size_t bad = 0, first = 0;
    double worst = 0;
    for (size_t i = 0; i < x->n; i++) {
        const double e = fabs((double)ha[i] - hb[i]);
        if (!(e <= atol + rtol * fabs((double)ha[i]))) {
            if (!bad) first = i;
            bad++;
        }
        if (e > worst || e != e) worst = e;
    }
    CHECK(bad == 0, "%s: %zu of %zu differ (largest %.3g); first [%zu] %.9g vs %.9g", what, bad, x->n, worst, first,
          bad ? ha[first] : 0.0, bad ? hb[first] : 0.0);
    if (getenv("FT_TEST_VERBOSE")) fprintf(stderr, "     %-70s largest difference %.3g\n", what, worst);
    free(ha);
    free(hb);
}

/* x on both devices still holds its host values, bit for bit (an input an op must not write) */
static void unchanged(const char *what, dbuf_t *x) {
    float *h = malloc(sizeof(float) * x->n);
    for (int side = 0; side < 2; side++) {
        DEV(side ? B : A, download, h, side ? x->b : x->a, sizeof(float) * x->n);
        size_t bad = 0;
        for (size_t i = 0; i < x->n; i++) bad += memcmp(&h[i], (const float *)x->host + i, sizeof(float)) != 0;
        CHECK(bad == 0, "%s: %zu of %zu elements written on device %s", what, bad, x->n, side ? "B" : "A");
    }
    free(h);
}

/* ---- attention ---- */
static void attention_case(int Bt, int Tq, int Tk, int H, int Hkv, int hd, int causal, int window) {
    char what[160];
    const size_t nq = (size_t)Bt * Tq * H * hd, nk = (size_t)Bt * Tk * Hkv * hd, nr = (size_t)Bt * H * Tq;
    dbuf_t q = dfloats(nq, 1.5f), k = dfloats(nk, 1.5f), v = dfloats(nk, 1), out = dfloats(nq, 1);
    dbuf_t lse = dfloats(nr, 1), dout = dfloats(nq, 1);
    dbuf_t dq = dfloats(nq, 0.5f), dk = dfloats(nk, 0.5f), dv = dfloats(nk, 0.5f); /* += targets */
    const double rt = bf16 ? 3e-2 : 1e-4, at = bf16 ? 1e-2 : 1e-5;
    DEV(A, attention_window_forward, FA(out), FA(lse), FA(q), FA(k), FA(v), Bt, Tq, Tk, H, Hkv, hd, causal, window);
    DEV(B, attention_window_forward, FB(out), FB(lse), FB(q), FB(k), FB(v), Bt, Tq, Tk, H, Hkv, hd, causal, window);
    snprintf(what, sizeof what, "attention B=%d Tq=%d Tk=%d H=%d/%d hd=%d causal=%d window=%d", Bt, Tq, Tk, H, Hkv, hd,
             causal, window);
    char w2[200];
    snprintf(w2, sizeof w2, "%s: out", what);
    same(w2, &out, at, rt);
    snprintf(w2, sizeof w2, "%s: lse", what);
    same(w2, &lse, at, rt);
    /* the backward from the CPU's forward on both sides (the same out and lse) */
    DEV(A, download, out.host, out.a, sizeof(float) * nq);
    DEV(A, download, lse.host, lse.a, sizeof(float) * nr);
    dbuf_put(&out);
    dbuf_put(&lse);
    DEV(A, attention_window_backward, FA(dq), FA(dk), FA(dv), FA(dout), FA(out), FA(lse), FA(q), FA(k), FA(v), Bt, Tq,
        Tk, H, Hkv, hd, causal, window);
    DEV(B, attention_window_backward, FB(dq), FB(dk), FB(dv), FB(dout), FB(out), FB(lse), FB(q), FB(k), FB(v), Bt, Tq,
        Tk, H, Hkv, hd, causal, window);
    /* the reference's contribution is not negligible (a pass that added nothing on both sides
     * would otherwise agree) */
    {
        float *h = malloc(sizeof(float) * nq);
        DEV(A, download, h, dq.a, sizeof(float) * nq);
        double moved = 0;
        for (size_t i = 0; i < nq; i++) moved = fmax(moved, fabs((double)h[i] - ((float *)dq.host)[i]));
        CHECK(moved > 1e-2, "%s: the backward moved dq by %.3g at most", what, moved);
        if (getenv("FT_TEST_VERBOSE")) fprintf(stderr, "     %s: dq moved by up to %.3g\n", what, moved);
        free(h);
    }
    snprintf(w2, sizeof w2, "%s: dq", what);
    same(w2, &dq, at, rt);
    snprintf(w2, sizeof w2, "%s: dk", what);
    same(w2, &dk, at, rt);
    snprintf(w2, sizeof w2, "%s: dv", what);
    same(w2, &dv, at, rt);
    dbuf_t *all[] = {&q, &k, &v, &out, &lse, &dout, &dq, &dk, &dv};
    for (int i = 0; i < 9; i++) dfree(all[i]);
}
/* attention_backward_qkv: the gradient of the fused q|k|v rows, un-rotated, written over dqkv
 * (random beforehand on both sides: an accumulating or partial store differs); the CUDA device
 * stores it from the kernels at hd 16, 32, 64, 128 and composes the three ops elsewhere */
static void attention_qkv_case(int Bt, int T, int H, int Hkv, int hd, int causal, int window, int pos0) {
    char what[160];
    const int Dq = H * hd, Dkv = Hkv * hd, ld = Dq + 2 * Dkv, N = Bt * T, S = pos0 + T;
    dbuf_t q = dfloats((size_t)N * Dq, 1.5f), k = dfloats((size_t)N * Dkv, 1.5f), v = dfloats((size_t)N * Dkv, 1);
    dbuf_t out = dfloats((size_t)N * Dq, 1), lse = dfloats((size_t)Bt * H * T, 1), dout = dfloats((size_t)N * Dq, 1);
    dbuf_t dqkv = dfloats((size_t)N * ld, 3), dq = dfloats((size_t)N * Dq, 1), dk = dfloats((size_t)N * Dkv, 1);
    dbuf_t dv = dfloats((size_t)N * Dkv, 1);
    dbuf_t cs = dbuf((size_t)S * hd / 2, sizeof(float)), sn = dbuf((size_t)S * hd / 2, sizeof(float));
    rope_table_init((float *)cs.host, (float *)sn.host, S, hd, 10000.f);
    dbuf_put(&cs);
    dbuf_put(&sn);
    const double rt = bf16 ? 3e-2 : 1e-4, at = bf16 ? 1e-2 : 1e-5;
    /* the forward on the CPU, its out and lse on both sides */
    DEV(A, attention_window_forward, FA(out), FA(lse), FA(q), FA(k), FA(v), Bt, T, T, H, Hkv, hd, causal, window);
    DEV(A, download, out.host, out.a, sizeof(float) * out.n);
    DEV(A, download, lse.host, lse.a, sizeof(float) * lse.n);
    dbuf_put(&out);
    dbuf_put(&lse);
    DEV(A, attention_backward_qkv, FA(dqkv), FA(dq), FA(dk), FA(dv), FA(dout), FA(out), FA(lse), FA(q), FA(k), FA(v),
        FA(cs), FA(sn), Bt, T, H, Hkv, hd, causal, window, pos0);
    DEV(B, attention_backward_qkv, FB(dqkv), FB(dq), FB(dk), FB(dv), FB(dout), FB(out), FB(lse), FB(q), FB(k), FB(v),
        FB(cs), FB(sn), Bt, T, H, Hkv, hd, causal, window, pos0);
    snprintf(what, sizeof what, "attention_backward_qkv B=%d T=%d H=%d/%d hd=%d causal=%d window=%d pos0=%d: dqkv", Bt,
             T, H, Hkv, hd, causal, window, pos0);
    same(what, &dqkv, at, rt);
    /* the CPU's fused op (each (batch, key/value head)'s rows zeroed, computed and joined by one
     * thread) against the three ops it stands for, composed on the same device: bit for bit */
    dbuf_t cq = dfloats((size_t)N * Dq, 1), ck = dfloats((size_t)N * Dkv, 1), cv = dfloats((size_t)N * Dkv, 1);
    dbuf_t cj = dfloats((size_t)N * ld, 3);
    DEV(A, zero, FA(cq), sizeof(float) * cq.n);
    DEV(A, zero, FA(ck), sizeof(float) * ck.n);
    DEV(A, zero, FA(cv), sizeof(float) * cv.n);
    DEV(A, attention_window_backward, FA(cq), FA(ck), FA(cv), FA(dout), FA(out), FA(lse), FA(q), FA(k), FA(v), Bt, T,
        T, H, Hkv, hd, causal, window);
    DEV(A, qkv_join_unrope, FA(cj), FA(cq), FA(ck), FA(cv), FA(cs), FA(sn), N, T, H, Hkv, hd, pos0);
    float *hf = malloc(sizeof(float) * dqkv.n), *hc = malloc(sizeof(float) * dqkv.n);
    DEV(A, download, hf, dqkv.a, sizeof(float) * dqkv.n);
    DEV(A, download, hc, cj.a, sizeof(float) * dqkv.n);
    CHECK(!memcmp(hf, hc, sizeof(float) * dqkv.n), "%s: the CPU's fused op is its three ops composed, bit for bit",
          what);
    free(hf);
    free(hc);
    dbuf_t *all[] = {&q, &k, &v, &out, &lse, &dout, &dqkv, &dq, &dk, &dv, &cs, &sn, &cq, &ck, &cv, &cj};
    for (int i = 0; i < 16; i++) dfree(all[i]);
}
static void test_attention_qkv(void) {
    attention_qkv_case(2, 100, 4, 2, 64, 1, 0, 3);  /* the fused store: two tiles, GQA, causal */
    attention_qkv_case(1, 130, 2, 2, 16, 1, 40, 0); /* a sliding window across tiles */
    attention_qkv_case(1, 70, 2, 1, 32, 0, 0, 5);   /* non-causal */
    attention_qkv_case(1, 37, 2, 1, 12, 1, 0, 0);   /* hd padded to 16: the composed path */
}
static void test_attention(void) {
    attention_case(2, 100, 100, 4, 2, 16, 1, 0);  /* two query tiles, GQA, causal */
    attention_case(1, 37, 150, 2, 1, 12, 1, 0);   /* Tq < Tk, hd padded to 16 */
    attention_case(1, 130, 130, 2, 2, 64, 1, 40); /* a sliding window across tiles */
    attention_case(1, 20, 70, 2, 1, 32, 0, 0);    /* non-causal */
    /* bf16 at hd 32, 64: tiles split between two warps (attention.cuh ATT_*_SPLIT) -- rows whose
     * half of a tile sees no key (causal, windows), Tq < Tk, T not a multiple of 64, GQA */
    attention_case(2, 77, 141, 4, 1, 64, 1, 0);
    attention_case(1, 200, 200, 4, 2, 32, 1, 70);
    /* the bf16 forward's wide blocks (ATT_FWD_WIDE: 128 queries, 32 a warp, 48-key tiles split
     * between 3 warps): a last block whose last warps have no row, non-causal with Tq > Tk */
    attention_case(1, 300, 300, 2, 1, 64, 1, 0);
    attention_case(1, 150, 90, 2, 2, 64, 0, 0);
}
static void test_attention_rows(void) {
    enum { N = 3, H = 4, Hkv = 2, hd = 16, S = 80 };
    const int ldk = Hkv * hd;
    dbuf_t q = dfloats(N * H * hd, 1.5f), kc = dfloats(S * ldk, 1.5f), vc = dfloats(S * ldk, 1), out = dfloats(N * H * hd, 1);
    dbuf_t base = dbuf(N, sizeof(int)), len = dbuf(N, sizeof(int));
    const int bs[N] = {0, 5, 10}, ls[N] = {0, 1, 70};
    memcpy(base.host, bs, sizeof bs);
    memcpy(len.host, ls, sizeof ls);
    dbuf_put(&base);
    dbuf_put(&len);
    DEV(A, attention_rows, FA(out), FA(q), FA(kc), FA(vc), (int *)base.a, (int *)len.a, N, H, Hkv, hd);
    DEV(B, attention_rows, FB(out), FB(q), FB(kc), FB(vc), (int *)base.b, (int *)len.b, N, H, Hkv, hd);
    same("attention_rows (caches of 0, 1 and 70 keys)", &out, 1e-6, 1e-5);
    dbuf_t *all[] = {&q, &kc, &vc, &out, &base, &len};
    for (int i = 0; i < 6; i++) dfree(all[i]);
}

/* ---- rows and columns ---- */
static void rmsnorm_case(int N, int D) {
    char w[96];
    dbuf_t x = dfloats((size_t)N * D, 2), wt = dfloats(D, 1), y = dfloats((size_t)N * D, 1), r = dfloats(N, 1);
    DEV(A, rmsnorm_forward, FA(y), FA(r), FA(x), FA(wt), N, D, 1e-5f);
    DEV(B, rmsnorm_forward, FB(y), FB(r), FB(x), FB(wt), N, D, 1e-5f);
    snprintf(w, sizeof w, "rmsnorm_forward N=%d D=%d", N, D);
    same(w, &y, 1e-6, 1e-5);
    snprintf(w, sizeof w, "rmsnorm_forward rstd N=%d D=%d", N, D);
    same(w, &r, 1e-6, 1e-5);
    dbuf_t dout = dfloats((size_t)N * D, 1), dx = dfloats((size_t)N * D, 1), dw = dfloats(D, 1);
    DEV(A, rmsnorm_backward, FA(dx), FA(dw), FA(dout), FA(x), FA(wt), FA(r), N, D);
    DEV(B, rmsnorm_backward, FB(dx), FB(dw), FB(dout), FB(x), FB(wt), FB(r), N, D);
    snprintf(w, sizeof w, "rmsnorm_backward dx N=%d D=%d", N, D);
    same(w, &dx, 1e-5, 1e-5);
    snprintf(w, sizeof w, "rmsnorm_backward dw N=%d D=%d", N, D);
    same(w, &dw, 1e-5, 1e-5);
    /* dw alone (the LTM's inner steps ask for dx alone; the head for both) */
    DEV(A, rmsnorm_backward, NULL, FA(dw), FA(dout), FA(x), FA(wt), FA(r), N, D);
    DEV(B, rmsnorm_backward, NULL, FB(dw), FB(dout), FB(x), FB(wt), FB(r), N, D);
    snprintf(w, sizeof w, "rmsnorm_backward dw only N=%d D=%d", N, D);
    same(w, &dw, 1e-5, 1e-5);
    /* the fusions: the residual add and the norm (y written over the branch b, as a block may
     * pass it), and the norm's backward writing res + its term */
    dbuf_t b = dfloats((size_t)N * D, 1), res = dfloats((size_t)N * D, 1);
    DEV(A, add_rmsnorm_forward, FA(b), FA(y), FA(r), FA(x), FA(b), FA(wt), N, D, 1e-5f);
    DEV(B, add_rmsnorm_forward, FB(b), FB(y), FB(r), FB(x), FB(b), FB(wt), N, D, 1e-5f);
    snprintf(w, sizeof w, "add_rmsnorm_forward sum N=%d D=%d", N, D);
    same(w, &b, 0, 0); /* one add per element: bit for bit */
    snprintf(w, sizeof w, "add_rmsnorm_forward N=%d D=%d", N, D);
    same(w, &y, 1e-6, 1e-5);
    snprintf(w, sizeof w, "add_rmsnorm_forward rstd N=%d D=%d", N, D);
    same(w, &r, 1e-6, 1e-5);
    DEV(A, rmsnorm_backward_res, FA(dx), FA(dw), FA(dout), FA(b), FA(wt), FA(r), FA(res), N, D);
    DEV(B, rmsnorm_backward_res, FB(dx), FB(dw), FB(dout), FB(b), FB(wt), FB(r), FB(res), N, D);
    snprintf(w, sizeof w, "rmsnorm_backward_res dx N=%d D=%d", N, D);
    same(w, &dx, 1e-5, 1e-5);
    snprintf(w, sizeof w, "rmsnorm_backward_res dw N=%d D=%d", N, D);
    same(w, &dw, 1e-5, 1e-5);
    dbuf_t *all[] = {&x, &wt, &y, &r, &dout, &dx, &dw, &b, &res};
    for (int i = 0; i < 9; i++) dfree(all[i]);
}
static void test_rmsnorm(void) {
    rmsnorm_case(70, 48);
    rmsnorm_case(9, 37);
    rmsnorm_case(5, 1100);
}
static void test_sum_rows(void) {
    dbuf_t x = dfloats(70 * 40, 1), o = dfloats(40, 1), x2 = dfloats(33 * 7, 1), o2 = dfloats(7, 1);
    DEV(A, sum_rows, FA(o), FA(x), 70, 40);
    DEV(B, sum_rows, FB(o), FB(x), 70, 40);
    same("sum_rows N=70 D=40", &o, 1e-5, 1e-5);
    DEV(A, sum_rows, FA(o2), FA(x2), 33, 7);
    DEV(B, sum_rows, FB(o2), FB(x2), 33, 7);
    same("sum_rows N=33 D=7", &o2, 1e-5, 1e-5);
    dfree(&x), dfree(&o), dfree(&x2), dfree(&o2);
}
static void classifier_case(int N, int V, int with_mask) {
    char w[96];
    dbuf_t z = dfloats((size_t)N * V, 4), t = dints(N, V, 4), lse = dfloats(N, 1);
    dbuf_t m = with_mask ? dints(N, 2, 1) : dbuf(0, 1);
    if (with_mask) { /* at least one counted row */
        ((uint8_t *)m.host)[0] = 1;
        dbuf_put(&m);
    }
    int ca = 0, cb = 0;
    /* the fused pass, the gradient over the logits */
    const float la = DEV(A, crossentropy_forward, FA(z), FA(lse), &ca, FA(z), (uint32_t *)t.a,
                         with_mask ? (uint8_t *)m.a : NULL, N, V, 1.0f);
    const float lb = DEV(B, crossentropy_forward, FB(z), FB(lse), &cb, FB(z), (uint32_t *)t.b,
                         with_mask ? (uint8_t *)m.b : NULL, N, V, 1.0f);
    CHECK(ca == cb && fabsf(la - lb) <= 1e-5f * fabsf(la), "classifier N=%d V=%d: loss %.9g vs %.9g, count %d vs %d", N,
          V, la, lb, ca, cb);
    snprintf(w, sizeof w, "classifier N=%d V=%d lse", N, V);
    same(w, &lse, 1e-5, 1e-5);
    /* dlogits ~ 1/(count V): bf16 rounds them to 2^-8 relative */
    snprintf(w, sizeof w, "classifier N=%d V=%d dlogits over the logits", N, V);
    same(w, &z, 1e-8, bf16 ? 4e-3 : 1e-5);
    /* the separate backward from fresh logits */
    dbuf_t z2 = dfloats((size_t)N * V, 4), dz = dbuf((size_t)N * V, sizeof(float));
    DEV(A, crossentropy_forward, NULL, FA(lse), &ca, FA(z2), (uint32_t *)t.a, with_mask ? (uint8_t *)m.a : NULL, N, V, 1.0f);
    DEV(B, crossentropy_forward, NULL, FB(lse), &cb, FB(z2), (uint32_t *)t.b, with_mask ? (uint8_t *)m.b : NULL, N, V, 1.0f);
    DEV(A, crossentropy_backward, FA(dz), FA(z2), FA(lse), (uint32_t *)t.a, with_mask ? (uint8_t *)m.a : NULL, N, V, 0.5f);
    DEV(B, crossentropy_backward, FB(dz), FB(z2), FB(lse), (uint32_t *)t.b, with_mask ? (uint8_t *)m.b : NULL, N, V, 0.5f);
    snprintf(w, sizeof w, "crossentropy_backward N=%d V=%d", N, V);
    same(w, &dz, 1e-8, bf16 ? 4e-3 : 1e-5);
    dbuf_t *all[] = {&z, &t, &lse, &m, &z2, &dz};
    for (int i = 0; i < 6; i++) dfree(all[i]);
}
static void test_classifier(void) {
    classifier_case(7, 97, 1);
    classifier_case(5, 1000, 0);
    classifier_case(2, 70000, 1); /* 280 KB rows: no row cache */
}
static void embedding_case(int N, int D, uint32_t below, uint32_t offset) {
    char w[96];
    dbuf_t tok = dints(N, below, 4);
    for (int i = 0; i < N; i++) ((uint32_t *)tok.host)[i] += offset;
    dbuf_put(&tok);
    const size_t V = offset + below;
    dbuf_t table = dfloats(V * D, 1), out = dfloats((size_t)N * D, 1), dout = dfloats((size_t)N * D, 1);
    DEV(A, embedding_forward, FA(out), (uint32_t *)tok.a, FA(table), N, D);
    DEV(B, embedding_forward, FB(out), (uint32_t *)tok.b, FB(table), N, D);
    snprintf(w, sizeof w, "embedding_forward N=%d D=%d", N, D);
    same(w, &out, 0, 0);
    DEV(A, embedding_backward, FA(table), FA(dout), (uint32_t *)tok.a, N, D);
    DEV(B, embedding_backward, FB(table), FB(dout), (uint32_t *)tok.b, N, D);
    snprintf(w, sizeof w, "embedding_backward N=%d D=%d tokens %u..%u", N, D, offset, offset + below - 1);
    same(w, &table, 0, 0); /* both add a token's rows into its table row in row order: the same bits */
    dfree(&tok), dfree(&table), dfree(&out), dfree(&dout);
}
static void test_embedding(void) {
    embedding_case(300, 40, 5, 0);        /* ~60 rows per token: pieces joined */
    embedding_case(200, 37, 97, 65530);   /* ids across 2^16, odd D */
    embedding_case(600, 33, 40, 7);       /* 19 blocks of the link stage, chains across them; a part warp */
    embedding_case(1100, 9, 13, 3);       /* two tiles of the link stage's rows (1024 a tile), 35 blocks */
}

/* ---- element-wise ---- */
static void test_elementwise(void) {
    const size_t sizes[2] = {4096, 4099};
    for (int s = 0; s < 2; s++) {
        const size_t n = sizes[s];
        char w[96];
        dbuf_t g = dfloats(n, 4), u = dfloats(n, 2), o = dfloats(n, 1), d = dfloats(n, 1), dg = dfloats(n, 1),
               du = dfloats(n, 1);
        DEV(A, swiglu_forward, FA(o), FA(g), FA(u), 1, (int)n);
        DEV(B, swiglu_forward, FB(o), FB(g), FB(u), 1, (int)n);
        snprintf(w, sizeof w, "swiglu_forward n=%zu", n);
        same(w, &o, 1e-6, 1e-6);
        DEV(A, swiglu_backward, FA(dg), FA(du), FA(d), FA(g), FA(u), 1, (int)n);
        DEV(B, swiglu_backward, FB(dg), FB(du), FB(d), FB(g), FB(u), 1, (int)n);
        snprintf(w, sizeof w, "swiglu_backward dgate n=%zu", n);
        same(w, &dg, 1e-6, 1e-6);
        snprintf(w, sizeof w, "swiglu_backward dup n=%zu", n);
        same(w, &du, 1e-6, 1e-6);
        DEV(A, swiglu_backward_set, FA(dg), FA(du), FA(d), FA(g), FA(u), 1, (int)n);
        DEV(B, swiglu_backward_set, FB(dg), FB(du), FB(d), FB(g), FB(u), 1, (int)n);
        snprintf(w, sizeof w, "swiglu_backward_set n=%zu", n);
        same(w, &dg, 1e-6, 1e-6);
        DEV(A, add_forward, FA(o), FA(g), FA(u), n);
        DEV(B, add_forward, FB(o), FB(g), FB(u), n);
        snprintf(w, sizeof w, "add_forward n=%zu", n);
        same(w, &o, 0, 0);
        DEV(A, add_inplace, FA(g), FA(u), n);
        DEV(B, add_inplace, FB(g), FB(u), n);
        snprintf(w, sizeof w, "add_inplace n=%zu", n);
        same(w, &g, 0, 0);
        DEV(A, scale_inplace, FA(g), 0.37f, n);
        DEV(B, scale_inplace, FB(g), 0.37f, n);
        snprintf(w, sizeof w, "scale_inplace n=%zu", n);
        same(w, &g, 0, 0);
        dbuf_t *all[] = {&g, &u, &o, &d, &dg, &du};
        for (int i = 0; i < 6; i++) dfree(all[i]);
    }
}
static void rope_case(int hd) {
    enum { Bt = 2, T = 9, H = 3, Hkv = 1, S = 16 };
    char w[96];
    const int N = Bt * T, Dq = H * hd, Dkv = Hkv * hd, ld = Dq + 2 * Dkv, h2 = hd / 2;
    dbuf_t cs = dbuf(S * h2, sizeof(float)), sn = dbuf(S * h2, sizeof(float));
    rope_table_init((float *)cs.host, (float *)sn.host, S, hd, 10000.0f);
    dbuf_put(&cs);
    dbuf_put(&sn);
    dbuf_t qkv = dfloats((size_t)N * ld, 1), q = dfloats((size_t)N * Dq, 1), k = dfloats((size_t)N * Dkv, 1),
           v = dfloats((size_t)N * Dkv, 1);
    DEV(A, qkv_split_rope, FA(q), FA(k), FA(v), FA(qkv), FA(cs), FA(sn), N, T, H, Hkv, hd, 3);
    DEV(B, qkv_split_rope, FB(q), FB(k), FB(v), FB(qkv), FB(cs), FB(sn), N, T, H, Hkv, hd, 3);
    snprintf(w, sizeof w, "qkv_split_rope q hd=%d", hd);
    same(w, &q, 1e-6, 1e-6);
    snprintf(w, sizeof w, "qkv_split_rope k hd=%d", hd);
    same(w, &k, 1e-6, 1e-6);
    snprintf(w, sizeof w, "qkv_split_rope v hd=%d", hd);
    same(w, &v, 0, 0);
    DEV(A, qkv_join_unrope, FA(qkv), FA(q), FA(k), FA(v), FA(cs), FA(sn), N, T, H, Hkv, hd, 3);
    DEV(B, qkv_join_unrope, FB(qkv), FB(q), FB(k), FB(v), FB(cs), FB(sn), N, T, H, Hkv, hd, 3);
    snprintf(w, sizeof w, "qkv_join_unrope hd=%d", hd);
    same(w, &qkv, 1e-6, 1e-6);
    DEV(A, rope_forward, FA(q), FA(q), FA(cs), FA(sn), Bt, T, H, hd, 2);
    DEV(B, rope_forward, FB(q), FB(q), FB(cs), FB(sn), Bt, T, H, hd, 2);
    snprintf(w, sizeof w, "rope_forward in place hd=%d", hd);
    same(w, &q, 1e-6, 1e-6);
    DEV(A, rope_backward, FA(k), FA(q), FA(cs), FA(sn), Bt, T, Hkv, hd, 2);
    DEV(B, rope_backward, FB(k), FB(q), FB(cs), FB(sn), Bt, T, Hkv, hd, 2);
    snprintf(w, sizeof w, "rope_backward hd=%d", hd);
    same(w, &k, 1e-6, 1e-6);
    dbuf_t *all[] = {&cs, &sn, &qkv, &q, &k, &v};
    for (int i = 0; i < 6; i++) dfree(all[i]);
}
static void test_rope(void) {
    rope_case(16);
    rope_case(12);
}

/* ---- the optimizer over a list ---- */
static void test_optimizer(void) {
    enum { NT = 3 };
    const size_t n[NT] = {5000, 37, 8192};
    dbuf_t p[NT], g[NT], m[NT], v[NT];
    adamw_tensor_t ta[NT], tb[NT];
    const float *xa[NT], *xb[NT];
    for (int i = 0; i < NT; i++) {
        p[i] = dfloats(n[i], 1), g[i] = dfloats(n[i], 0.1f), m[i] = dfloats(n[i], 0.01f), v[i] = dfloats(n[i], 0.001f);
        for (size_t j = 0; j < n[i]; j++) ((float *)v[i].host)[j] = fabsf(((float *)v[i].host)[j]);
        dbuf_put(&v[i]);
        ta[i] = (adamw_tensor_t){FA(p[i]), FA(g[i]), FA(m[i]), FA(v[i]), n[i], i != 1};
        tb[i] = (adamw_tensor_t){FB(p[i]), FB(g[i]), FB(m[i]), FB(v[i]), n[i], i != 1};
        xa[i] = FA(g[i]);
        xb[i] = FB(g[i]);
    }
    const double sa = DEV(A, sumsq_multi, xa, n, NT), sb = DEV(B, sumsq_multi, xb, n, NT);
    CHECK(fabs(sa - sb) <= 1e-12 * sa, "sumsq_multi %.17g vs %.17g", sa, sb);
    const double s1a = DEV(A, sumsq, xa[2], n[2]), s1b = DEV(B, sumsq, xb[2], n[2]);
    CHECK(fabs(s1a - s1b) <= 1e-12 * s1a, "sumsq %.17g vs %.17g", s1a, s1b);
    const adamw_scalars_t sc = {.clip = 0.5f, .decay_mul = 0.999f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                                .step_size = 1e-3f, .bc2_sqrt = 0.3f};
    DEV(A, adamw_update_multi, ta, NT, &sc);
    DEV(B, adamw_update_multi, tb, NT, &sc);
    for (int i = 0; i < NT; i++) {
        char w[64];
        snprintf(w, sizeof w, "adamw_update_multi p[%d]", i);
        same(w, &p[i], 1e-7, 1e-6);
        snprintf(w, sizeof w, "adamw_update_multi m[%d]", i);
        same(w, &m[i], 0, 1e-6);
        snprintf(w, sizeof w, "adamw_update_multi v[%d]", i);
        same(w, &v[i], 0, 1e-6);
        /* the clip (0.5) is applied in registers: the gradient is read, never written */
        snprintf(w, sizeof w, "adamw_update_multi g[%d] (read only)", i);
        unchanged(w, &g[i]);
        dfree(&p[i]), dfree(&g[i]), dfree(&m[i]), dfree(&v[i]);
    }
}

int main(int argc, char **argv) {
    char err[256];
    const char *spec = "cpu", *prec = "fp32";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc) spec = argv[++i];
        else if (!strcmp(argv[i], "--precision") && i + 1 < argc) prec = argv[++i];
        else {
            fprintf(stderr, "usage: test_device_kernels [--device cpu|cuda[:N]] [--precision fp32|bf16|tf32]\n");
            return 2;
        }
    }
    precision_t p;
    if (precision_parse(prec, &p, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    bf16 = p == PRECISION_BF16;
    if (device_open(&A, "cpu", bf16 ? PRECISION_BF16 : PRECISION_FP32, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    if (device_open(&B, spec, p, err, sizeof err)) {
        printf("%s: not compared (%s)\n", spec, err);
        printf("0 passed, 0 failed, 1 skipped\n");
        device_close(&A);
        return 1;
    }
    printf("comparing %s against %s\n", B->name, A->name);
    rng_seed(&R, 77);
    RUN(test_attention);
    RUN(test_attention_qkv);
    RUN(test_attention_rows);
    RUN(test_rmsnorm);
    RUN(test_sum_rows);
    RUN(test_classifier);
    RUN(test_embedding);
    RUN(test_elementwise);
    RUN(test_rope);
    RUN(test_optimizer);
    device_close(&B);
    device_close(&A);
    return check_summary();
}
