/* tests/test_kernels.c: the CUDA device checked where no GPU is (model/kernels.h,
 * model/cuda_launch.h).
 *
 * - launch geometry: for item counts around every boundary (0, 1, a block, the grid cap,
 *   beyond it), the threads of launch_grid(n) blocks visit every item exactly once;
 * - every kernel body, run here over all its items as a shim (one "thread" after another),
 *   computes what the CPU op (model/ops.h) computes on the same random inputs: both use
 *   ops_math.h's formulas; only summation orders differ (the CPU vectorises its row sums, the
 *   kernels sum serially), so the tolerance is float rounding of sums of a few hundred terms:
 *   rtol 1e-5, atol 1e-6 (values here are O(1)); element-wise bodies must agree bit for bit
 *   except where the CPU op is vectorised with a fused multiply-add.
 * Shapes are odd on purpose (N, D, T not multiples of anything). */
#include "common/rng.h"
#include "model/cuda_launch.h"
#include "model/kernels.h"
#include "model/ops.h"
#include "tests/check.h"
#include <stdlib.h>
#include <string.h>

#define RTOL 1e-5
#define ATOL 1e-6

static rng_t R;
static float *rnd(size_t n, float scale) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) p[i] = scale * (2.0f * rng_f32(&R) - 1.0f);
    return p;
}
static float *dup_(const float *x, size_t n) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    memcpy(p, x, sizeof(float) * n);
    return p;
}
static int close_all(const char *what, const float *a, const float *b, size_t n, double atol, double rtol) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (!(fabs((double)a[i] - b[i]) <= atol + rtol * fabs((double)b[i]))) {
            if (!bad) first = i;
            bad++;
        }
    CHECK(bad == 0, "%s: %zu of %zu differ, first at %zu: kernel %.9g, cpu %.9g", what, bad, n, first,
          bad ? a[first] : 0.0, bad ? b[first] : 0.0);
    return bad == 0;
}

/* Runs a body over items 0..n-1 the way a launch does (cuda_launch.h's mapping). */
#define SHIM(n, call)                                                                    \
    do {                                                                                 \
        const size_t n_ = (n);                                                           \
        const unsigned g_ = launch_grid(n_);                                             \
        for (unsigned b_ = 0; b_ < g_; b_++)                                             \
            for (unsigned t_ = 0; t_ < LAUNCH_BLOCK; t_++)                               \
                for (size_t it = launch_first(b_, t_); it < n_; it += launch_stride(g_)) \
                    call;                                                                \
    } while (0)

static void test_launch_coverage(void) {
    const size_t ns[] = {0, 1, 2, 255, 256, 257, 1000, 65537,
                         (size_t)LAUNCH_BLOCK * LAUNCH_MAX_GRID - 1,
                         (size_t)LAUNCH_BLOCK * LAUNCH_MAX_GRID,
                         (size_t)LAUNCH_BLOCK * LAUNCH_MAX_GRID + 1, 3000017};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        const size_t n = ns[k];
        unsigned char *hit = calloc(n ? n : 1, 1);
        size_t visits = 0;
        SHIM(n, (hit[it]++, visits++));
        size_t wrong = 0;
        for (size_t i = 0; i < n; i++) wrong += hit[i] != 1;
        CHECK(wrong == 0 && visits == n, "n=%zu: %zu items not visited exactly once (%zu visits)", n, wrong, visits);
        CHECK(launch_grid(n) >= 1 && launch_grid(n) <= LAUNCH_MAX_GRID, "grid for n=%zu in range", n);
        free(hit);
    }
}

static void test_embedding(void) {
    enum { N = 37, D = 19, V = 11 };
    uint32_t tok[N];
    for (int n = 0; n < N; n++) tok[n] = (uint32_t)rng_below(&R, V);
    float *table = rnd(V * D, 1), *out_k = rnd(N * D, 1), *out_c = rnd(N * D, 1);
    embedding_forward(out_c, tok, table, N, D);
    SHIM((size_t)N * D, kb_embedding_fwd(it, out_k, tok, table, D));
    CHECK(!memcmp(out_k, out_c, sizeof(float) * N * D), "embedding forward bit for bit");
    float *dout = rnd(N * D, 1), *dt_k = rnd(V * D, 1), *dt_c = dup_(dt_k, V * D);
    embedding_backward(dt_c, dout, tok, N, D);
    SHIM((size_t)D, kb_embedding_bwd(it, dt_k, dout, tok, N, D));
    CHECK(!memcmp(dt_k, dt_c, sizeof(float) * V * D), "embedding backward bit for bit (rows in order)");
    free(table); free(out_k); free(out_c); free(dout); free(dt_k); free(dt_c);
}

static void test_rmsnorm(void) {
    enum { N = 29, D = 131 };
    float *x = rnd(N * D, 2), *w = rnd(D, 1), *o_k = rnd(N * D, 1), *o_c = rnd(N * D, 1);
    float r_k[N], r_c[N];
    rmsnorm_forward(o_c, r_c, x, w, N, D, 1e-5f);
    SHIM(N, kb_rmsnorm_fwd(it, o_k, r_k, x, w, D, 1e-5f));
    close_all("rmsnorm out", o_k, o_c, N * D, ATOL, RTOL);
    close_all("rmsnorm rstd", r_k, r_c, N, ATOL, RTOL);
    float *dout = rnd(N * D, 1), *dx_k = rnd(N * D, 1), *dx_c = dup_(dx_k, N * D);
    float *dw_k = rnd(D, 1), *dw_c = dup_(dw_k, D);
    rmsnorm_backward(dx_c, dw_c, dout, x, w, r_c, N, D);
    SHIM(N, kb_rmsnorm_bwd_dx(it, dx_k, dout, x, w, r_c, D));
    SHIM(D, kb_rmsnorm_bwd_dw(it, dw_k, dout, x, r_c, N, D));
    close_all("rmsnorm dx", dx_k, dx_c, N * D, ATOL, RTOL);
    close_all("rmsnorm dw", dw_k, dw_c, D, ATOL, RTOL);
    free(x); free(w); free(o_k); free(o_c); free(dout); free(dx_k); free(dx_c); free(dw_k); free(dw_c);
}

/* The residual fusions of the CPU ops give the bits of the passes they replace:
 * add_rmsnorm_forward = add_forward + rmsnorm_forward, rmsnorm_backward_res = a copy of res
 * + rmsnorm_backward (and with res = dx, rmsnorm_backward), at this level's kernels, on rows
 * of an odd width and of a vector multiple, with the stream written over its input. */
static void fused_norm_case(int N, int D) {
    const size_t n = (size_t)N * D;
    float *a = rnd(n, 2), *b = rnd(n, 1), *w = rnd(D, 1), *y1 = rnd(n, 1), *o1 = rnd(n, 1);
    float *y2 = dup_(b, n), *o2 = rnd(n, 1), *r1 = rnd(N, 1), *r2 = rnd(N, 1);
    add_forward(y1, a, b, n);
    rmsnorm_forward(o1, r1, y1, w, N, D, 1e-5f);
    add_rmsnorm_forward(y2, o2, r2, a, y2, w, N, D, 1e-5f); /* y over b */
    CHECK(!memcmp(y1, y2, sizeof(float) * n) && !memcmp(o1, o2, sizeof(float) * n) &&
              !memcmp(r1, r2, sizeof(float) * N),
          "add_rmsnorm_forward = add_forward + rmsnorm_forward bit for bit (N=%d D=%d)", N, D);
    float *dout = rnd(n, 1), *res = rnd(n, 1), *dx1 = dup_(res, n), *dx2 = rnd(n, 1);
    float *dw1 = rnd(D, 1), *dw2 = dup_(dw1, D);
    rmsnorm_backward(dx1, dw1, dout, y1, w, r1, N, D);
    rmsnorm_backward_res(dx2, dw2, dout, y1, w, r1, res, N, D);
    CHECK(!memcmp(dx1, dx2, sizeof(float) * n) && !memcmp(dw1, dw2, sizeof(float) * D),
          "rmsnorm_backward_res = copy + rmsnorm_backward bit for bit (N=%d D=%d)", N, D);
    float *dx3 = dup_(res, n);
    rmsnorm_backward_res(dx3, NULL, dout, y1, w, r1, dx3, N, D);
    CHECK(!memcmp(dx1, dx3, sizeof(float) * n), "rmsnorm_backward_res with res = dx (N=%d D=%d)", N, D);
    float *all[] = {a, b, w, y1, o1, y2, o2, r1, r2, dout, res, dx1, dx2, dw1, dw2, dx3};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
}
static void test_fused_norm(void) {
    fused_norm_case(29, 131);
    fused_norm_case(70, 64);
}

static void test_rope_qkv(void) {
    enum { B = 3, T = 7, H = 5, Hkv = 1, hd = 6, S = 16, pos0 = 4 };
    float cs[S * hd / 2], sn[S * hd / 2];
    rope_table_init(cs, sn, S, hd, 10000.0f);
    const size_t n = (size_t)B * T * H * hd;
    float *x = rnd(n, 1), *o_k = rnd(n, 1), *o_c = rnd(n, 1);
    rope_forward(o_c, x, cs, sn, B, T, H, hd, pos0);
    SHIM((size_t)B * T * H, kb_rope(it, o_k, x, cs, sn, T, H, hd, pos0, 1.0f, 0));
    CHECK(!memcmp(o_k, o_c, sizeof(float) * n), "rope forward bit for bit");
    float *d_k = rnd(n, 1), *d_c = dup_(d_k, n);
    rope_backward(d_c, x, cs, sn, B, T, H, hd, pos0);
    SHIM((size_t)B * T * H, kb_rope(it, d_k, x, cs, sn, T, H, hd, pos0, -1.0f, 1));
    CHECK(!memcmp(d_k, d_c, sizeof(float) * n), "rope backward bit for bit");
    /* the fused q|k|v rows */
    const int N = B * T, Dq = H * hd, Dkv = Hkv * hd, ld = Dq + 2 * Dkv;
    float *qkv = rnd((size_t)N * ld, 1);
    float *q_k = rnd((size_t)N * Dq, 1), *k_k = rnd((size_t)N * Dkv, 1), *v_k = rnd((size_t)N * Dkv, 1);
    float *q_c = rnd((size_t)N * Dq, 1), *k_c = rnd((size_t)N * Dkv, 1), *v_c = rnd((size_t)N * Dkv, 1);
    qkv_split_rope(q_c, k_c, v_c, qkv, cs, sn, N, T, H, Hkv, hd, pos0);
    SHIM(N, kb_qkv_split(it, q_k, k_k, v_k, qkv, cs, sn, T, H, Hkv, hd, pos0));
    CHECK(!memcmp(q_k, q_c, sizeof(float) * N * Dq) && !memcmp(k_k, k_c, sizeof(float) * N * Dkv) &&
              !memcmp(v_k, v_c, sizeof(float) * N * Dkv), "qkv split bit for bit");
    float *j_k = rnd((size_t)N * ld, 1), *j_c = rnd((size_t)N * ld, 1);
    qkv_join_unrope(j_c, q_c, k_c, v_c, cs, sn, N, T, H, Hkv, hd, pos0);
    SHIM(N, kb_qkv_join(it, j_k, q_c, k_c, v_c, cs, sn, T, H, Hkv, hd, pos0));
    CHECK(!memcmp(j_k, j_c, sizeof(float) * N * ld), "qkv join bit for bit");
    free(x); free(o_k); free(o_c); free(d_k); free(d_c); free(qkv); free(q_k); free(k_k); free(v_k);
    free(q_c); free(k_c); free(v_c); free(j_k); free(j_c);
}

/* Attention forward and backward against the CPU op: causal with Tq < Tk (a KV cache),
 * causal square, non-causal; grouped heads; sliding windows (window > 0). */
static void attention_case(int B, int Tq, int Tk, int H, int Hkv, int hd, int causal, int window) {
    char what[112];
    snprintf(what, sizeof what, "attention B%d Tq%d Tk%d H%d/%d hd%d causal%d window%d", B, Tq, Tk, H, Hkv, hd,
             causal, window);
    const size_t nq = (size_t)B * Tq * H * hd, nk = (size_t)B * Tk * Hkv * hd, nl = (size_t)B * H * Tq;
    float *q = rnd(nq, 1), *k = rnd(nk, 1), *v = rnd(nk, 1);
    float *o_k = rnd(nq, 1), *o_c = rnd(nq, 1), *l_k = rnd(nl, 1), *l_c = rnd(nl, 1);
    attention_window_forward(o_c, l_c, q, k, v, B, Tq, Tk, H, Hkv, hd, causal, window);
    SHIM(nl, kb_att_fwd(it, o_k, l_k, q, k, v, Tq, Tk, H, Hkv, hd, causal, window));
    close_all(what, o_k, o_c, nq, ATOL, RTOL);
    close_all(what, l_k, l_c, nl, ATOL, RTOL);
    float *dout = rnd(nq, 1), *Drow = rnd(nl, 1);
    float *dq_k = rnd(nq, 1), *dk_k = rnd(nk, 1), *dv_k = rnd(nk, 1);
    float *dq_c = dup_(dq_k, nq), *dk_c = dup_(dk_k, nk), *dv_c = dup_(dv_k, nk);
    attention_window_backward(dq_c, dk_c, dv_c, dout, o_c, l_c, q, k, v, B, Tq, Tk, H, Hkv, hd, causal, window);
    SHIM(nl, kb_att_bwd_rowdot(it, Drow, dout, o_c, Tq, H, hd));
    SHIM(nl, kb_att_bwd_dq(it, dq_k, q, k, v, dout, l_c, Drow, Tq, Tk, H, Hkv, hd, causal, window));
    SHIM((size_t)B * Hkv * Tk, kb_att_bwd_dkv(it, dk_k, dv_k, q, k, v, dout, l_c, Drow, Tq, Tk, H, Hkv, hd, causal, window));
    close_all(what, dq_k, dq_c, nq, 1e-5, 1e-4);
    close_all(what, dk_k, dk_c, nk, 1e-5, 1e-4);
    close_all(what, dv_k, dv_c, nk, 1e-5, 1e-4);
    free(q); free(k); free(v); free(o_k); free(o_c); free(l_k); free(l_c); free(dout); free(Drow);
    free(dq_k); free(dk_k); free(dv_k); free(dq_c); free(dk_c); free(dv_c);
}
static void test_attention(void) {
    attention_case(2, 9, 9, 4, 2, 8, 1, 0);
    attention_case(1, 3, 11, 6, 3, 4, 1, 0);
    attention_case(2, 5, 7, 2, 1, 6, 0, 0);
    attention_case(1, 1, 1, 1, 1, 2, 1, 0);
    /* windows: narrower than T, one key, Tq < Tk, several of the CPU's position blocks */
    attention_case(2, 9, 9, 4, 2, 8, 1, 3);
    attention_case(1, 5, 5, 2, 2, 4, 1, 1);
    attention_case(1, 3, 11, 6, 3, 4, 1, 4);
    attention_case(1, 70, 70, 2, 1, 8, 1, 17);
}

static void test_swiglu_ce(void) {
    enum { N = 13, F = 21, V = 97 };
    const size_t n = (size_t)N * F;
    float *g = rnd(n, 3), *u = rnd(n, 1), *o_k = rnd(n, 1), *o_c = rnd(n, 1);
    swiglu_forward(o_c, g, u, N, F);
    SHIM(n, kb_swiglu_fwd(it, o_k, g, u));
    close_all("swiglu forward", o_k, o_c, n, 0, 1e-6);
    float *dout = rnd(n, 1), *dg_k = rnd(n, 1), *du_k = rnd(n, 1);
    float *dg_c = dup_(dg_k, n), *du_c = dup_(du_k, n);
    swiglu_backward(dg_c, du_c, dout, g, u, N, F);
    SHIM(n, kb_swiglu_bwd(it, dg_k, du_k, dout, g, u, 1));
    close_all("swiglu backward dgate", dg_k, dg_c, n, ATOL, RTOL);
    close_all("swiglu backward dup", du_k, du_c, n, ATOL, RTOL);
    /* cross-entropy, fused gradient, a mask */
    float *z = rnd((size_t)N * V, 4), *dz_k = rnd((size_t)N * V, 1), *dz_c = rnd((size_t)N * V, 1);
    float lse_k[N], lse_c[N], rl[N];
    uint32_t t[N];
    uint8_t mask[N];
    for (int i = 0; i < N; i++) t[i] = (uint32_t)rng_below(&R, V), mask[i] = i % 3 != 1;
    int cnt = 0;
    float loss_c = crossentropy_forward(dz_c, lse_c, &cnt, z, t, mask, N, V, 1.0f);
    SHIM(N, kb_ce_fwd(it, rl, dz_k, lse_k, z, t, mask, V, 1.0f / cnt));
    double sum = 0;
    for (int i = 0; i < N; i++) sum += rl[i];
    CHECK_CLOSE(sum / cnt, loss_c, ATOL, RTOL);
    close_all("ce lse", lse_k, lse_c, N, ATOL, RTOL);
    close_all("ce dlogits", dz_k, dz_c, (size_t)N * V, ATOL, RTOL);
    SHIM(N, kb_ce_bwd(it, dz_k, z, lse_c, t, mask, V, 0.5f / cnt));
    crossentropy_backward(dz_c, z, lse_c, t, mask, N, V, 0.5f);
    close_all("ce backward", dz_k, dz_c, (size_t)N * V, ATOL, RTOL);
    free(g); free(u); free(o_k); free(o_c); free(dout); free(dg_k); free(du_k); free(dg_c); free(du_c);
    free(z); free(dz_k); free(dz_c);
}

static void test_rows_and_adamw(void) {
    enum { N = 23, D = 17 };
    const size_t n = (size_t)N * D;
    float *a = rnd(n, 1), *b = rnd(n, 1), *y_k = rnd(n, 1), *y_c = rnd(n, 1), *row = rnd(D, 1);
    add_forward(y_c, a, b, n);
    SHIM(n, kb_add(it, y_k, a, b));
    CHECK(!memcmp(y_k, y_c, sizeof(float) * n), "add");
    add_inplace(y_c, a, n);
    SHIM(n, kb_add_inplace(it, y_k, a));
    scale_inplace(y_c, 0.37f, n);
    SHIM(n, kb_scale(it, y_k, 0.37f));
    CHECK(!memcmp(y_k, y_c, sizeof(float) * n), "add_inplace, scale");
    repeat_rows(y_c, row, N, D);
    SHIM(n, kb_repeat_rows(it, y_k, row, D));
    CHECK(!memcmp(y_k, y_c, sizeof(float) * n), "repeat_rows");
    float *s_k = rnd(D, 1), *s_c = dup_(s_k, D);
    sum_rows(s_c, a, N, D);
    SHIM(D, kb_sum_rows(it, s_k, a, N, D));
    CHECK(!memcmp(s_k, s_c, sizeof(float) * D), "sum_rows (rows in order)");
    copy_rows(y_c, D + 0, b, D, N / 2, D - 3);
    SHIM((size_t)(N / 2) * (D - 3), kb_copy_rows(it, y_k, D, b, D, D - 3));
    CHECK(!memcmp(y_k, y_c, sizeof(float) * n), "copy_rows");
    /* AdamW and the norm's chunks */
    const size_t m = 10007;
    float *p_k = rnd(m, 1), *g_k = rnd(m, 1), *m_k = rnd(m, 0.1f), *v_k = rnd(m, 0.1f);
    for (size_t i = 0; i < m; i++) v_k[i] = fabsf(v_k[i]);
    float *p_c = dup_(p_k, m), *g_c = dup_(g_k, m), *m_c = dup_(m_k, m), *v_c = dup_(v_k, m);
    adamw_scalars_t sc = {.clip = 0.7f, .decay_mul = 0.999f, .beta1 = 0.9f, .beta2 = 0.95f,
                          .eps = 1e-8f, .step_size = 1e-3f, .bc2_sqrt = 0.3f};
    adamw_update(p_c, g_c, m_c, v_c, m, &sc);
    SHIM(m, kb_adamw(it, p_k, g_k, m_k, v_k, sc.clip, sc.decay_mul, sc.beta1, sc.beta2, sc.eps, sc.step_size, sc.bc2_sqrt));
    close_all("adamw p", p_k, p_c, m, 0, 1e-6);
    close_all("adamw v", v_k, v_c, m, 0, 1e-6);
    const size_t nch = (m + OPS_SUMSQ_CHUNK - 1) / OPS_SUMSQ_CHUNK;
    double part[8], total = 0;
    SHIM(nch, kb_sumsq_chunk(it, part, p_k, m));
    for (size_t c = 0; c < nch; c++) total += part[c];
    CHECK(total == sumsq(p_k, m), "sumsq: chunks summed in order give the CPU's bits (%.17g vs %.17g)", total, sumsq(p_k, m));
    free(a); free(b); free(y_k); free(y_c); free(row); free(s_k); free(s_c);
    free(p_k); free(g_k); free(m_k); free(v_k); free(p_c); free(g_c); free(m_c); free(v_c);
}

static void test_latent(void) {
    enum { N = 19, H = 5, D = 7 };
    const size_t K = (size_t)1 << H;
    float *lg = rnd(N * H, 3), *u = malloc(sizeof(float) * N * H), *u_c = malloc(sizeof(float) * N * H);
    uniform_fill(u_c, (size_t)N * H, 1234, 77);
    SHIM((size_t)N * H, kb_uniform(it, u, 1234, 77));
    CHECK(!memcmp(u, u_c, sizeof(float) * N * H), "uniforms: the same counter-based numbers");
    uint32_t idx_k[N], idx_c[N];
    float *pr_k = rnd(N * H, 1), *pr_c = rnd(N * H, 1), kl_k[N], kl_c[N];
    binmap_forward(idx_c, pr_c, lg, u, N, H);
    SHIM(N, kb_binmap_fwd(it, idx_k, pr_k, lg, u, H));
    CHECK(!memcmp(idx_k, idx_c, sizeof idx_k) && !memcmp(pr_k, pr_c, sizeof(float) * N * H), "binmap forward");
    binmap_kl_rows(kl_c, lg, N, H);
    SHIM(N, kb_binmap_kl(it, kl_k, lg, H));
    CHECK(!memcmp(kl_k, kl_c, sizeof kl_k), "binmap KL rows");
    uint8_t mask[N];
    for (int i = 0; i < N; i++) mask[i] = i % 4 != 0;
    float kappa = kl_c[3];
    float *dl_k = rnd(N * H, 1), *dl_c = dup_(dl_k, N * H);
    free_bits_backward(dl_c, lg, kl_c, mask, N, H, kappa, 0.25f);
    SHIM(N, kb_free_bits_bwd(it, dl_k, lg, kl_c, mask, H, kappa, 0.25f));
    CHECK(!memcmp(dl_k, dl_c, sizeof(float) * N * H), "free bits backward");
    /* post-sampler: gather, column scatter, and the dense pass-through through a product */
    float *w = rnd(D * K, 1), *r_k = rnd(N * D, 1), *r_c = rnd(N * D, 1);
    post_sampler_forward(r_c, w, idx_c, N, D, H);
    SHIM((size_t)N * D, kb_post_fwd(it, r_k, w, idx_c, D, H));
    CHECK(!memcmp(r_k, r_c, sizeof(float) * N * D), "post-sampler gather");
    float *dr = rnd(N * D, 1), *dw_k = rnd(D * K, 1), *dw_c = dup_(dw_k, D * K);
    float *dlg_k = rnd(N * H, 1), *dlg_c = dup_(dlg_k, N * H);
    size_t wf = post_sampler_work_floats(D, H, 1);
    float *wbuf = malloc(sizeof(float) * wf), *dz = malloc(sizeof(float) * N * K);
    post_sampler_backward(dw_c, dlg_c, dr, w, idx_c, pr_c, N, D, H, wbuf, wf);
    SHIM(D, kb_post_bwd_dw(it, dw_k, dr, idx_c, N, D, H));
    CHECK(!memcmp(dw_k, dw_c, sizeof(float) * D * K), "post-sampler dW scatter");
    /* dZ = dR W as the CUDA device gets it from cuBLAS, here by a plain loop */
    for (int nn = 0; nn < N; nn++)
        for (size_t j = 0; j < K; j++) {
            float s = 0;
            for (int i = 0; i < D; i++) s += dr[nn * D + i] * w[i * K + j];
            dz[nn * K + j] = s;
        }
    SHIM(N, kb_binmap_bwd(it, dlg_k, dz, pr_c, H));
    close_all("binmap pass-through backward", dlg_k, dlg_c, N * H, ATOL, RTOL);
    free(lg); free(u); free(u_c); free(pr_k); free(pr_c); free(dl_k); free(dl_c); free(w);
    free(r_k); free(r_c); free(dr); free(dw_k); free(dw_c); free(dlg_k); free(dlg_c); free(wbuf); free(dz);
}

/* The LTM's latent ops: the same counter-based normals, KL rows and gradients. */
static void test_ltm_latent(void) {
    enum { L = 3, B = 4, n = 11 };
    const size_t N = (size_t)L * B * n;
    float *x_k = rnd(N, 1), *x_c = rnd(N, 1);
    latent_normal(x_c, L, B, n, 99, 5, 0.5f, 2.0f);
    SHIM(N, kb_latent_normal(it, x_k, B, n, 99, 5, 0.5f, 2.0f));
    CHECK(!memcmp(x_k, x_c, sizeof(float) * N), "latent normals: the same counter-based numbers");
    float *mu = rnd(N, 1), *ls = rnd(N, 0.5f), *eps = rnd(N, 1), *z_k = rnd(N, 1), *z_c = rnd(N, 1);
    latent_sample(z_c, mu, ls, eps, N);
    SHIM(N, kb_latent_sample(it, z_k, mu, ls, eps));
    close_all("latent sample", z_k, z_c, N, ATOL, RTOL);
    float kl_k[B], kl_c[B];
    latent_kl_rows(kl_c, mu, ls, L, B, n);
    SHIM(B, kb_latent_kl(it, kl_k, mu, ls, L, B, n));
    CHECK(!memcmp(kl_k, kl_c, sizeof kl_k), "latent KL rows (double sums in order)");
    float *dmu_k = rnd(N, 1), *dls_k = rnd(N, 1), *dmu_c = rnd(N, 1), *dls_c = rnd(N, 1);
    latent_backward(dmu_c, dls_c, z_c, mu, ls, eps, 0.7f, N);
    SHIM(N, kb_latent_bwd(it, dmu_k, dls_k, z_c, mu, ls, eps, 0.7f));
    close_all("latent backward dmu", dmu_k, dmu_c, N, ATOL, RTOL);
    close_all("latent backward dls", dls_k, dls_c, N, ATOL, RTOL);
    free(x_k); free(x_c); free(mu); free(ls); free(eps); free(z_k); free(z_c);
    free(dmu_k); free(dls_k); free(dmu_c); free(dls_c);
}

static void test_decode_rows(void) {
    enum { N = 5, IN = 37, OUT = 21, H = 4, Hkv = 2, hd = 6, SL = 3, TM = 9, S = 16 };
    float *x = rnd(N * IN, 1), *w = rnd(OUT * IN, 1), *y_k = rnd(N * OUT, 1), *y_c = rnd(N * OUT, 1);
    linear_rows(y_c, x, w, N, IN, OUT);
    SHIM((size_t)N * OUT, kb_linear_rows(it, y_k, x, w, IN, OUT));
    close_all("linear_rows", y_k, y_c, N * OUT, ATOL, RTOL);
    float cs[S * hd / 2], sn[S * hd / 2];
    rope_table_init(cs, sn, S, hd, 10000.f);
    const int ld = (H + 2 * Hkv) * hd;
    int pos[N] = {3, 0, 15, 7, 7};
    float *qkv = rnd(N * ld, 1), *q_k = rnd(N * H * hd, 1), *q_c = rnd(N * H * hd, 1);
    float *k_k = rnd(N * Hkv * hd, 1), *k_c = rnd(N * Hkv * hd, 1), *v_k = rnd(N * Hkv * hd, 1), *v_c = rnd(N * Hkv * hd, 1);
    qkv_split_rope_rows(q_c, k_c, v_c, qkv, cs, sn, N, H, Hkv, hd, pos);
    SHIM(N, kb_qkv_split_rows(it, q_k, k_k, v_k, qkv, cs, sn, H, Hkv, hd, pos));
    CHECK(!memcmp(q_k, q_c, sizeof(float) * N * H * hd) && !memcmp(v_k, v_c, sizeof(float) * N * Hkv * hd), "qkv split rows");
    rope_rows(q_c, q_c, cs, sn, N, H, hd, pos);
    SHIM((size_t)N * H, kb_rope_rows(it, q_k, q_k, cs, sn, H, hd, pos));
    CHECK(!memcmp(q_k, q_c, sizeof(float) * N * H * hd), "rope rows");
    float *kc = rnd(SL * TM * Hkv * hd, 1), *vc = rnd(SL * TM * Hkv * hd, 1);
    float *o_k = rnd(N * H * hd, 1), *o_c = rnd(N * H * hd, 1);
    int base[N] = {0, 2 * TM, TM, 0, 2 * TM}, len[N] = {4, 9, 1, 9, 6};
    attention_rows(o_c, q_c, kc, vc, base, len, N, H, Hkv, hd);
    SHIM((size_t)N * H, kb_attention_rows(it, o_k, q_c, kc, vc, base, len, H, Hkv, hd));
    close_all("attention rows", o_k, o_c, N * H * hd, ATOL, RTOL);
    float *d_k = rnd(SL * TM * hd, 1), *d_c = dup_(d_k, SL * TM * hd);
    int rows[N] = {4, 11, 0, 26, 13};
    scatter_rows(d_c, hd, rows, o_c, H * hd, N, hd);
    SHIM((size_t)N * hd, kb_scatter_rows(it, d_k, hd, rows, o_c, H * hd, hd));
    CHECK(!memcmp(d_k, d_c, sizeof(float) * SL * TM * hd), "scatter rows");
    free(x); free(w); free(y_k); free(y_c); free(qkv); free(q_k); free(q_c); free(k_k); free(k_c);
    free(v_k); free(v_c); free(kc); free(vc); free(o_k); free(o_c); free(d_k); free(d_c);
}

/* The masked mixer's element ops (ops_mixer.c): each item a copy, a mask or one in-order sum. */
static void test_mixer(void) {
    enum { M = 3, T = 7, B = 2, Tr = 5, D = 12, H = 3, Tb = 7, UT = 9, UD = 5, ND = 2 };
    const size_t nw = (size_t)M * T * T, ny = (size_t)B * Tr * D;
    float *w = rnd(nw, 1), *o_k = rnd(nw, 1), *o_c = dup_(o_k, nw);
    mixer_tril(o_c, w, M, T, 1);
    SHIM(nw, kb_mixer_tril(it, o_k, w, T, 1));
    CHECK(!memcmp(o_k, o_c, sizeof(float) * nw), "mixer_tril accumulate");
    mixer_tril(o_c, w, M, T, 0);
    SHIM(nw, kb_mixer_tril(it, o_k, w, T, 0));
    CHECK(!memcmp(o_k, o_c, sizeof(float) * nw), "mixer_tril");
    float *bias = rnd(H * Tb, 1), *y_k = rnd(ny, 1), *y_c = dup_(y_k, ny);
    mixer_bias_forward(y_c, bias, B, Tr, D, H, Tb);
    SHIM(ny, kb_mixer_bias_fwd(it, y_k, bias, Tr, D, H, Tb));
    CHECK(!memcmp(y_k, y_c, sizeof(float) * ny), "mixer_bias_forward");
    float *db_k = rnd(H * Tb, 1), *db_c = dup_(db_k, H * Tb);
    mixer_bias_backward(db_c, y_c, B, Tr, D, H, Tb);
    SHIM((size_t)H * Tr, kb_mixer_bias_bwd(it, db_k, y_c, B, Tr, D, H, Tb));
    CHECK(!memcmp(db_k, db_c, sizeof(float) * H * Tb), "mixer_bias_backward (rows, then columns, in order)");
    const size_t nu = (size_t)B * UT * ND;
    float *e = rnd(B * UD, 1), *u_k = rnd(nu, 1), *u_c = rnd(nu, 1);
    unroll_forward(u_c, e, B, UT, UD, ND);
    SHIM(nu, kb_unroll_fwd(it, u_k, e, UT, UD, ND));
    CHECK(!memcmp(u_k, u_c, sizeof(float) * nu), "unroll_forward");
    float *de_k = rnd(B * UD, 1), *de_c = dup_(de_k, B * UD);
    unroll_backward(de_c, u_c, B, UT, UD, ND);
    SHIM((size_t)B * UD, kb_unroll_bwd(it, de_k, u_c, UT, UD, ND));
    CHECK(!memcmp(de_k, de_c, sizeof(float) * B * UD), "unroll_backward (positions in order)");
    enum { NE = 301 };
    float *ex = rnd(NE, 3), *eu = rnd(NE, 1), *ey_k = rnd(NE, 1), *ey_c = rnd(NE, 1), *edy = rnd(NE, 1);
    for (int i = 0; i < NE; i++) eu[i] = 0.5f + 0.5f * eu[i];
    const struct { int q, n, noise; } codes[] = {{4, 0, 0}, {8, 0, 0}, {16, 0, 0}, {0, 8, 1}, {0, 0, 0}};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        const float *uu = codes[i].noise ? eu : NULL;
        embed_code_forward(ey_c, ex, uu, NE, 2.0f, codes[i].q, codes[i].n);
        SHIM(NE, kb_embed_code_fwd(it, ey_k, ex, uu, 2.0f, codes[i].q, codes[i].n));
        CHECK(!memcmp(ey_k, ey_c, sizeof(float) * NE), "embed_code_forward (%d bits, noise of %d)", codes[i].q, codes[i].n);
    }
    embed_code_backward(ey_c, edy, ex, NE, 2.0f);
    SHIM(NE, kb_embed_code_bwd(it, ey_k, edy, ex, 2.0f));
    CHECK(!memcmp(ey_k, ey_c, sizeof(float) * NE), "embed_code_backward");
    free(w); free(o_k); free(o_c); free(bias); free(y_k); free(y_c); free(db_k); free(db_c);
    free(e); free(u_k); free(u_c); free(de_k); free(de_c);
    free(ex); free(eu); free(ey_k); free(ey_c); free(edy);
}

int main(void) {
    rng_seed(&R, 42);
    RUN(test_launch_coverage);
    RUN(test_embedding);
    RUN(test_rmsnorm);
    RUN(test_fused_norm);
    RUN(test_rope_qkv);
    RUN(test_attention);
    RUN(test_swiglu_ce);
    RUN(test_rows_and_adamw);
    RUN(test_latent);
    RUN(test_decode_rows);
    RUN(test_ltm_latent);
    RUN(test_mixer);
    return check_summary();
}
