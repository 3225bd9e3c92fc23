/* model/generate.c: the decoder forward over a chunk of new positions with a KV cache
 * (see generate.h). Written like llama_block_forward, step by step, on the chunk's rows. */
#include "model/generate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>  /* openblas_set_num_threads */
#include <omp.h>

#include "model/ops.h"
#include "model/ops_math.h"

struct gen {
    llama_t *m;
    double macs_per_row;      /* multiply-adds of one position through every block and the head */
    double serial_macs;       /* chunks below this run serially (GEN_SERIAL_MACS by default) */
    int serial;               /* the chunk in progress runs serially */
    model_config_t cfg;
    int Bmax, Tmax;
    int pos;                  /* positions cached, same for every sequence */
    int B, T, open;           /* the chunk in progress */
    const float *embed, *norm_f, *lm_head;
    float *kc, *vc;           /* (L, Bmax, Tmax, Dkv): rotated keys, values */
    /* chunk buffers, (Bmax*Tmax) rows so a whole prompt fits in one chunk */
    uint32_t *tokens;
    float *x, *xn, *xkv, *q, *k, *v, *att, *lse, *branch, *gate, *up;
    float *xf, *rstd, *logits; /* (Bmax,D), (N), (Bmax,V) */
    float *scores;            /* (Tmax) one query row's attention scores (serial path) */
};

/* Up to this many rows a Linear is done by the loop below instead of through
 * model_gemm: OpenBLAS's sgemm packs the whole weight matrix into a buffer on every call,
 * whatever n is (for a decode row that copy was 67% of the time, perf on config S), and its
 * sgemv kernel depends on the core type OpenBLAS detects (on this VM's unrecognised Xeon it
 * picks the SSE3 "Prescott" kernels: 2x slower than with OPENBLAS_CORETYPE=Haswell). The
 * loop below reads each weight once per call, 4 rows at a time so each x load serves 4 FMAs,
 * and tiles of 4 weight rows x 4 x rows when several sequences decode together (config S, 4
 * sequences: 658 tok/s through sgemm, 1095 with one x row at a time, 1840 with the tiles);
 * it is built for AVX-512, AVX2 and the baseline (picked at load time, like ops_attention.c's
 * kernels). Sums are in a compile-time order: deterministic. */
#define GEN_GEMV_ROWS 16

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define GEN_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define GEN_CLONES
#endif

/* y (N,out) = x (N,in) W^T for a few rows: each block of 4 weight rows is read from memory
 * once and, while it sits in L1, dotted with every x row (the batch of a decode step). */
GEN_CLONES
static void gen_matvec(float *restrict y, const float *restrict w, const float *restrict x,
                       int N, int out, int in) {
    int o = 0;
    for (; o + 4 <= out; o += 4) {
        const float *w0 = w + (size_t)o * in, *w1 = w0 + in, *w2 = w1 + in, *w3 = w2 + in;
        int n = 0;
        /* 4 x rows at a time: 8 loads feed 16 FMAs */
        for (; n + 4 <= N; n += 4) {
            const float *x0 = x + (size_t)n * in, *x1 = x0 + in, *x2 = x1 + in, *x3 = x2 + in;
            float a00 = 0, a01 = 0, a02 = 0, a03 = 0, a10 = 0, a11 = 0, a12 = 0, a13 = 0;
            float a20 = 0, a21 = 0, a22 = 0, a23 = 0, a30 = 0, a31 = 0, a32 = 0, a33 = 0;
#pragma omp simd reduction(+ : a00, a01, a02, a03, a10, a11, a12, a13, a20, a21, a22, a23, a30, a31, a32, a33)
            for (int i = 0; i < in; i++) {
                const float u0 = w0[i], u1 = w1[i], u2 = w2[i], u3 = w3[i];
                a00 += u0 * x0[i]; a01 += u1 * x0[i]; a02 += u2 * x0[i]; a03 += u3 * x0[i];
                a10 += u0 * x1[i]; a11 += u1 * x1[i]; a12 += u2 * x1[i]; a13 += u3 * x1[i];
                a20 += u0 * x2[i]; a21 += u1 * x2[i]; a22 += u2 * x2[i]; a23 += u3 * x2[i];
                a30 += u0 * x3[i]; a31 += u1 * x3[i]; a32 += u2 * x3[i]; a33 += u3 * x3[i];
            }
            float *y0 = y + (size_t)n * out + o, *y1 = y0 + out, *y2 = y1 + out, *y3 = y2 + out;
            y0[0] = a00; y0[1] = a01; y0[2] = a02; y0[3] = a03;
            y1[0] = a10; y1[1] = a11; y1[2] = a12; y1[3] = a13;
            y2[0] = a20; y2[1] = a21; y2[2] = a22; y2[3] = a23;
            y3[0] = a30; y3[1] = a31; y3[2] = a32; y3[3] = a33;
        }
        for (; n < N; n++) {
            const float *xn = x + (size_t)n * in;
            float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
            for (int i = 0; i < in; i++) {
                s0 += w0[i] * xn[i];
                s1 += w1[i] * xn[i];
                s2 += w2[i] * xn[i];
                s3 += w3[i] * xn[i];
            }
            float *yn = y + (size_t)n * out + o;
            yn[0] = s0; yn[1] = s1; yn[2] = s2; yn[3] = s3;
        }
    }
    for (; o < out; o++) {
        const float *wr = w + (size_t)o * in;
        for (int n = 0; n < N; n++) {
            const float *xn = x + (size_t)n * in;
            float s = 0.0f;
#pragma omp simd reduction(+ : s)
            for (int i = 0; i < in; i++) s += wr[i] * xn[i];
            y[(size_t)n * out + o] = s;
        }
    }
}

/* y (N,out) = x (N,in) W^T, W (out,in) row-major as in ops.h's linear_forward. */
static void gen_linear(float *y, const float *x, const float *w, int N, int in, int out) {
    if (N > GEN_GEMV_ROWS) linear_forward(y, x, w, N, in, out);
    else gen_matvec(y, w, x, N, out, in);
}

/* ---- the serial row kernels: ops.h's arithmetic from ops_math.h, no parallel region ---- */

static void k_rmsnorm(const gen_t *g, float *out, const float *x, const float *w, int N) {
    const int D = g->cfg.d_model;
    if (!g->serial) { rmsnorm_forward(out, g->rstd, x, w, N, D, g->cfg.norm_eps); return; }
    for (int n = 0; n < N; n++)
        ops_rmsnorm_row(out + (size_t)n * D, x + (size_t)n * D, w, D, g->cfg.norm_eps);
}

/* x (B,T,nh,hd) rotated in place, row t at position pos + t. */
static void k_rope(const gen_t *g, float *x, int nh) {
    const int B = g->B, T = g->T, hd = g->cfg.d_model / g->cfg.n_heads, h2 = hd / 2;
    const float *ct = llama_rope_cos(g->m), *st = llama_rope_sin(g->m);
    if (!g->serial) { rope_forward(x, x, ct, st, B, T, nh, hd, g->pos); return; }
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *cs = ct + (size_t)(g->pos + t) * h2, *sn = st + (size_t)(g->pos + t) * h2;
            for (int h = 0; h < nh; h++) {
                float *v = x + (((size_t)b * T + t) * nh + h) * hd;
                ops_rope_rotate(v, v, cs, sn, hd, 1.0f);
            }
        }
}

static void k_swiglu(const gen_t *g, float *out, const float *gate, const float *up, int N) {
    const size_t n = (size_t)N * g->cfg.d_ff;
    if (!g->serial) { swiglu_forward(out, gate, up, N, g->cfg.d_ff); return; }
    for (size_t i = 0; i < n; i++) out[i] = ops_silu(gate[i]) * up[i];
}

/* Causal attention of one sequence's T new query rows (T,H,hd) over its Tk = pos + T cached
 * keys/values (Tk,Hkv,hd): query row t sees keys 0..pos+t. */
static void k_attention(gen_t *g, float *out, float *lse, const float *q, const float *k,
                        const float *v) {
    const int T = g->T, Tk = g->pos + T, H = g->cfg.n_heads, Hkv = g->cfg.n_kv_heads;
    const int hd = g->cfg.d_model / H, rep = H / Hkv;
    if (!g->serial) { attention_forward(out, lse, q, k, v, 1, T, Tk, H, Hkv, hd, 1); return; }
    const float scale = 1.0f / sqrtf((float)hd);
    float *s = g->scores;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            const float *qi = q + ((size_t)t * H + h) * hd;
            float *oi = out + ((size_t)t * H + h) * hd;
            const int nk = g->pos + t + 1, kh = h / rep;
            float mx = -INFINITY;
            for (int j = 0; j < nk; j++) {
                const float *kj = k + ((size_t)j * Hkv + kh) * hd;
                float d = 0.0f;
                OPS_SIMD_SUM(d)
                for (int i = 0; i < hd; i++) d += qi[i] * kj[i];
                s[j] = d * scale;
                mx = s[j] > mx ? s[j] : mx;
            }
            float l = 0.0f;
            for (int j = 0; j < nk; j++) l += s[j] = ops_expf(s[j] - mx);
            for (int i = 0; i < hd; i++) oi[i] = 0.0f;
            for (int j = 0; j < nk; j++) {
                const float *vj = v + ((size_t)j * Hkv + kh) * hd, p = s[j] / l;
                OPS_SIMD
                for (int i = 0; i < hd; i++) oi[i] += p * vj[i];
            }
        }
}


/* Chunks below this many multiply-adds run on one thread, and without entering any OpenMP
 * parallel region (the row kernels below instead of ops.h's, which each open one). A decode
 * step of a small model is a few hundred microseconds split into ~15 regions per layer; on
 * the shared 2-core machine a region waits for a descheduled peer at its barrier (measured on
 * a 27k-parameter model under load 8: 5 samples x 30 tokens took 9.5 s with 2 threads, 0.008 s
 * with 1), and even a 1-thread region wakes libgomp's idle pool thread, which then spins
 * (perf: 40% of the process in libgomp; config S decoded at 250-500 tok/s instead of
 * 750-1050). A prefill pays the same at each of its ~50 regions' barriers: with a 32M threshold
 * a 16-token prefill of config S on 2 threads left 45% of the run in libgomp (master and
 * worker, perf under load 5), and after any parallel chunk libgomp's idle worker keeps spinning
 * through the decode steps that follow (16 sequences of config S: 1440-1870 tok/s serial or
 * with OMP_WAIT_POLICY=passive, ~800 with the default policy). So a chunk goes parallel only
 * when it is worth ~0.5 s of one core: config S (4.2M multiply-adds per token) runs prompts
 * of up to ~480 tokens (for one sequence) serially. */
#define GEN_SERIAL_MACS (2048.0 * 1024 * 1024)


static const float *view_data(const tensor_view_t *v, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(v[i].name, name)) return v[i].data;
    return NULL;
}

static void find_views(gen_t *g, llama_t *m) {
    int nv = llama_params(m, NULL, 0);
    tensor_view_t views[nv];
    llama_params(m, views, nv);
    g->embed = view_data(views, nv, "model.embed_tokens.weight");
    g->norm_f = view_data(views, nv, "model.norm.weight");
    g->lm_head = g->cfg.tied ? g->embed : view_data(views, nv, "lm_head.weight");
}

void gen_destroy(gen_t **pg) {
    if (!pg || !*pg) return;
    gen_t *g = *pg;
    void *p[] = {g->kc, g->vc, g->tokens, g->x, g->xn, g->xkv, g->q, g->k, g->v, g->att,
                 g->lse, g->branch, g->gate, g->up, g->xf, g->rstd, g->logits, g->scores};
    for (size_t i = 0; i < sizeof(p) / sizeof(p[0]); i++) free(p[i]);
    free(g);
    *pg = NULL;
}

int gen_create(gen_t **pg, llama_t *m, int Bmax, int Tmax, char *err, size_t errlen) {
    if (!pg || !m) { snprintf(err, errlen, "gen_create: NULL argument"); return LLAMA_EARG; }
    *pg = NULL;
    const model_config_t *c = llama_config(m);
    int rc = llama_config_check(c, Bmax, Tmax, err, errlen);
    if (rc) return rc;
    gen_t *g = calloc(1, sizeof(*g));
    if (!g) { snprintf(err, errlen, "gen_create: out of memory"); return LLAMA_ENOMEM; }
    g->m = m;
    g->cfg = *c;
    openblas_set_num_threads(1);  /* as model_gemm does: one thread pool (OpenMP) per process */
    g->Bmax = Bmax;
    g->Tmax = Tmax;
    find_views(g, m);
    if (!g->embed || !g->norm_f || !g->lm_head) {
        snprintf(err, errlen, "gen_create: the model lacks embedding, final norm or head views");
        gen_destroy(&g);
        return LLAMA_EARG;
    }
    const size_t L = c->n_layers, D = c->d_model, F = c->d_ff, V = c->vocab_size;
    const size_t hd = D / c->n_heads, Dq = hd * c->n_heads, Dkv = hd * c->n_kv_heads;
    const size_t N = (size_t)Bmax * Tmax;
    g->macs_per_row = (double)L * (2.0 * D * Dq + 2.0 * D * Dkv + 3.0 * D * F) + (double)D * V;
    g->kc = malloc(sizeof(float) * L * N * Dkv);
    g->vc = malloc(sizeof(float) * L * N * Dkv);
    g->tokens = malloc(sizeof(uint32_t) * N);
    g->x = malloc(sizeof(float) * N * D);
    g->xn = malloc(sizeof(float) * N * D);
    g->xkv = malloc(sizeof(float) * N * D);
    g->q = malloc(sizeof(float) * N * Dq);
    g->k = malloc(sizeof(float) * N * Dkv);
    g->v = malloc(sizeof(float) * N * Dkv);
    g->att = malloc(sizeof(float) * N * Dq);
    g->lse = malloc(sizeof(float) * N * c->n_heads);
    g->branch = malloc(sizeof(float) * N * D);
    g->gate = malloc(sizeof(float) * N * F);
    g->up = malloc(sizeof(float) * N * F);
    g->xf = malloc(sizeof(float) * N * D);
    g->rstd = malloc(sizeof(float) * N);
    g->logits = malloc(sizeof(float) * Bmax * V);
    g->scores = malloc(sizeof(float) * Tmax);
    g->serial_macs = GEN_SERIAL_MACS;
    if (!g->kc || !g->vc || !g->tokens || !g->x || !g->xn || !g->xkv || !g->q || !g->k || !g->v ||
        !g->att || !g->lse || !g->branch || !g->gate || !g->up || !g->xf || !g->rstd || !g->logits || !g->scores)
        goto oom;
    *pg = g;
    return 0;
oom:
    snprintf(err, errlen, "gen_create: out of memory for a cache of %d x %d positions", Bmax, Tmax);
    gen_destroy(&g);
    return LLAMA_ENOMEM;
}

int gen_threads(const gen_t *g, int rows) {
    return (double)rows * g->macs_per_row < g->serial_macs ? 1 : omp_get_max_threads();
}
void gen_set_serial_macs(gen_t *g, double macs) { g->serial_macs = macs; }

/* Runs the enclosed ops with gen_threads(g, rows) threads, then restores the caller's count. */
#define WITH_THREADS(g, rows, body) do {                                              \
        int saved_ = omp_get_max_threads();                                           \
        omp_set_num_threads(gen_threads(g, rows));                                    \
        body;                                                                         \
        omp_set_num_threads(saved_);                                                  \
    } while (0)

void gen_reset(gen_t *g) { g->pos = 0; g->open = 0; }
int gen_pos(const gen_t *g) { return g->pos; }
int gen_capacity(const gen_t *g) { return g->Tmax; }
const model_config_t *gen_config(const gen_t *g) { return &g->cfg; }
float *gen_hidden(gen_t *g) { return g->x; }
const float *gen_logits(const gen_t *g) { return g->logits; }

int gen_begin(gen_t *g, const uint32_t *tokens, int B, int T, char *err, size_t errlen) {
    if (!tokens || B <= 0 || T <= 0 || B > g->Bmax) {
        snprintf(err, errlen, "gen: chunk of B=%d T=%d outside 1 <= B <= %d, T >= 1", B, T, g->Bmax);
        return LLAMA_EARG;
    }
    if (g->pos + T > g->Tmax) {
        snprintf(err, errlen, "gen: %d cached + %d new positions exceed the capacity of %d", g->pos,
                 T, g->Tmax);
        return LLAMA_EARG;
    }
    for (int i = 0; i < B * T; i++)
        if (tokens[i] >= (uint32_t)g->cfg.vocab_size) {
            snprintf(err, errlen, "gen: token id %u at position %d is outside the vocabulary of %d",
                     tokens[i], i, g->cfg.vocab_size);
            return LLAMA_ETOKEN;
        }
    g->B = B;
    g->T = T;
    g->open = 1;
    memcpy(g->tokens, tokens, sizeof(uint32_t) * B * T);
    g->serial = gen_threads(g, B * T) == 1;
    const int D = g->cfg.d_model;
    if (g->serial)
        for (int i = 0; i < B * T; i++)
            memcpy(g->x + (size_t)i * D, g->embed + (size_t)g->tokens[i] * D, sizeof(float) * D);
    else
        embedding_forward(g->x, g->tokens, g->embed, B * T, D);
    return 0;
}

/* One block on the chunk: x (B,T,D) updated in place; keys/values of rows appended at pos. */
static void block_step(gen_t *g, int l, const float *r) {
    const model_config_t *c = &g->cfg;
    const int B = g->B, T = g->T, N = B * T, D = c->d_model, F = c->d_ff;
    const int H = c->n_heads, Hkv = c->n_kv_heads, hd = D / H, Dq = hd * H, Dkv = hd * Hkv;
    const llama_block_w_t w = llama_block_weights(g->m, l);
    const size_t seq_stride = (size_t)g->Tmax * Dkv, layer_stride = (size_t)g->Bmax * seq_stride;
    float *kc = g->kc + l * layer_stride, *vc = g->vc + l * layer_stride;
    // attention rmsnorm of the query input, and of the key/value input x + r when injected
    k_rmsnorm(g, g->xn, g->x, w.attn_norm, N);
    const float *kv_in = g->xn;
    if (r) {
        for (size_t i = 0; i < (size_t)N * D; i++) g->xkv[i] = g->x[i] + r[i];
        k_rmsnorm(g, g->xkv, g->xkv, w.attn_norm, N);
        kv_in = g->xkv;
    }
    // projections; RoPE at the chunk's absolute positions pos..pos+T-1
    gen_linear(g->q, g->xn, w.wq, N, D, Dq);
    gen_linear(g->k, kv_in, w.wk, N, D, Dkv);
    gen_linear(g->v, kv_in, w.wv, N, D, Dkv);
    k_rope(g, g->q, H);
    k_rope(g, g->k, Hkv);
    // append to the cache, then the new queries attend to every cached key (causally)
    for (int b = 0; b < B; b++) {
        size_t dst = b * seq_stride + (size_t)g->pos * Dkv, src = (size_t)b * T * Dkv;
        memcpy(kc + dst, g->k + src, sizeof(float) * T * Dkv);
        memcpy(vc + dst, g->v + src, sizeof(float) * T * Dkv);
    }
    for (int b = 0; b < B; b++)
        k_attention(g, g->att + (size_t)b * T * Dq, g->lse + (size_t)b * H * T,
                    g->q + (size_t)b * T * Dq, kc + b * seq_stride, vc + b * seq_stride);
    // output projection and residual on the query stream
    gen_linear(g->branch, g->att, w.wo, N, Dq, D);
    for (size_t i = 0; i < (size_t)N * D; i++) g->x[i] += g->branch[i];
    // MLP: rmsnorm, SwiGLU (written into gate), down projection, residual
    k_rmsnorm(g, g->xn, g->x, w.mlp_norm, N);
    gen_linear(g->gate, g->xn, w.wgate, N, D, F);
    gen_linear(g->up, g->xn, w.wup, N, D, F);
    k_swiglu(g, g->gate, g->gate, g->up, N);
    gen_linear(g->branch, g->gate, w.wdown, N, F, D);
    for (size_t i = 0; i < (size_t)N * D; i++) g->x[i] += g->branch[i];
}

void gen_blocks(gen_t *g, int l0, int l1, const float *r) {
    if (!g->open) return;
    WITH_THREADS(g, g->B * g->T, for (int l = l0; l < l1 && l < g->cfg.n_layers; l++)
                                     block_step(g, l, l == l0 ? r : NULL));
}

static void head(gen_t *g, float *all_logits) {
    const model_config_t *c = &g->cfg;
    const int B = g->B, T = g->T, D = c->d_model, V = c->vocab_size;
    if (all_logits) {
        k_rmsnorm(g, g->xf, g->x, g->norm_f, B * T);
        gen_linear(all_logits, g->xf, g->lm_head, B * T, D, V);
        for (int b = 0; b < B; b++)
            memcpy(g->logits + (size_t)b * V, all_logits + ((size_t)b * T + T - 1) * V,
                   sizeof(float) * V);
    } else {
        // only each sequence's last row goes through the head (V x D per row is the big product)
        for (int b = 0; b < B; b++)
            memcpy(g->xn + (size_t)b * D, g->x + ((size_t)b * T + T - 1) * D, sizeof(float) * D);
        k_rmsnorm(g, g->xf, g->xn, g->norm_f, B);
        gen_linear(g->logits, g->xf, g->lm_head, B, D, V);
    }
}

int gen_finish(gen_t *g, float *all_logits, char *err, size_t errlen) {
    if (!g->open) { snprintf(err, errlen, "gen_finish: no chunk in progress"); return LLAMA_EARG; }
    WITH_THREADS(g, g->B * g->T, head(g, all_logits));
    g->pos += g->T;
    g->open = 0;
    return 0;
}

int gen_step(gen_t *g, const uint32_t *tokens, int B, int T, float *all_logits, char *err,
             size_t errlen) {
    int rc = gen_begin(g, tokens, B, T, err, errlen);
    if (rc) return rc;
    gen_blocks(g, 0, g->cfg.n_layers, NULL);
    return gen_finish(g, all_logits, err, errlen);
}
