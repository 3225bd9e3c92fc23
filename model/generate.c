/* model/generate.c: the decoder forward over a chunk of new positions with a KV cache
 * (see generate.h). Written like llama_block_forward, step by step, on the chunk's rows. */
#include "model/generate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


struct gen {
    llama_t *m;
    device_t *dev;            /* the model's: the cache and every chunk buffer live there */
    double macs_per_row;      /* multiply-adds of one position through every block and the head */
    double serial_macs;       /* chunks below this run without parallel machinery */
    int parallel_rows;        /* chunks of at least this many rows run in parallel (0: off) */
    model_config_t cfg;
    int Bmax, Tmax;           /* cache slots, positions per slot */
    int max_rows;             /* rows (B*T) one chunk may hold: the chunk buffers' size */
    size_t cache_bytes, bytes;/* the key/value cache; everything allocated on the device */
    int *pos;                 /* (Bmax) positions cached in each slot */
    int B, T, open;           /* the chunk in progress: B sequences of T tokens */
    int *seq_slot;            /* (Bmax) the slot of each sequence of the chunk */
    int *row_host;            /* (4, max_rows) host staging of the row arrays below */
    int *row_pos, *row_cache, *row_base, *row_len; /* (N) per chunk row: its position, its cache
                                 row (slot * Tmax + pos), its slot's first cache row, keys it sees */
    const float *embed, *norm_f, *lm_head;
    void *mem;                /* one allocation: cache and chunk buffers (gen_layout) */
    float *kc, *vc;           /* (L, Bmax, Tmax, Dkv): rotated keys, values */
    /* chunk buffers, max_rows rows */
    uint32_t *tokens;
    float *x, *xn, *xkv, *qkv, *q, *k, *v, *att, *lse, *branch, *gate, *up, *h;
    float *xf, *rstd, *logits; /* (Bmax,D), (N), (Bmax,V) */
    float *logits_host;       /* (Bmax,V) host copy when the device is not the host */
    float *all_dev;           /* (N,V) every position's logits, allocated on first request */
    gen_mid_fn mid;           /* a family's sublayer between attention and MLP (or NULL) */
    void *mid_ctx;
};

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

static void gen_layout(gen_t *g, dev_arena_t *ar) {
    const model_config_t *c = &g->cfg;
    const size_t L = c->n_layers, D = c->d_model, F = c->d_ff, V = c->vocab_size;
    const size_t hd = D / c->n_heads, Dq = hd * c->n_heads, Dkv = hd * c->n_kv_heads;
    const size_t NC = (size_t)g->Bmax * g->Tmax, N = (size_t)g->max_rows;
    g->kc = DEV_TAKE(ar, float, L * NC * Dkv);
    g->vc = DEV_TAKE(ar, float, L * NC * Dkv);
    g->cache_bytes = ar->used;
    g->row_pos = DEV_TAKE(ar, int, N);
    g->row_cache = DEV_TAKE(ar, int, N);
    g->row_base = DEV_TAKE(ar, int, N);
    g->row_len = DEV_TAKE(ar, int, N);
    g->tokens = DEV_TAKE(ar, uint32_t, N);
    g->x = DEV_TAKE(ar, float, N * D);
    g->xn = DEV_TAKE(ar, float, N * D);
    g->xkv = DEV_TAKE(ar, float, N * D);
    g->qkv = DEV_TAKE(ar, float, N * (Dq + 2 * Dkv));
    g->q = DEV_TAKE(ar, float, N * Dq);
    g->k = DEV_TAKE(ar, float, N * Dkv);
    g->v = DEV_TAKE(ar, float, N * Dkv);
    g->att = DEV_TAKE(ar, float, N * Dq);
    g->lse = DEV_TAKE(ar, float, N * c->n_heads);
    g->branch = DEV_TAKE(ar, float, N * D);
    g->gate = DEV_TAKE(ar, float, N * F);
    g->up = DEV_TAKE(ar, float, N * F);
    g->h = DEV_TAKE(ar, float, N * F);
    g->xf = DEV_TAKE(ar, float, N * D);
    g->rstd = DEV_TAKE(ar, float, N);
    g->logits = DEV_TAKE(ar, float, (size_t)g->Bmax * V);
}

void gen_destroy(gen_t **pg) {
    if (!pg || !*pg) return;
    gen_t *g = *pg;
    if (g->mem) DEV(g->dev, free, g->mem);
    if (g->all_dev) DEV(g->dev, free, g->all_dev);
    free(g->logits_host);
    free(g->pos);
    free(g->seq_slot);
    free(g->row_host);
    free(g);
    *pg = NULL;
}

int gen_create(gen_t **pg, llama_t *m, int Bmax, int Tmax, char *err, size_t errlen) {
    return gen_create_rows(pg, m, Bmax, Tmax, Bmax * Tmax, err, errlen);
}

int gen_create_rows(gen_t **pg, llama_t *m, int Bmax, int Tmax, int max_rows, char *err,
                    size_t errlen) {
    if (!pg || !m) { snprintf(err, errlen, "gen_create: NULL argument"); return LLAMA_EARG; }
    *pg = NULL;
    const model_config_t *c = llama_config(m);
    int rc = llama_config_check(c, Bmax, Tmax, err, errlen);
    if (rc) return rc;
    if (max_rows < 1 || (long long)max_rows > (long long)Bmax * Tmax) {
        snprintf(err, errlen, "gen_create: %d rows per chunk outside 1..%lld", max_rows,
                 (long long)Bmax * Tmax);
        return LLAMA_EARG;
    }
    gen_t *g = calloc(1, sizeof(*g));
    if (!g) { snprintf(err, errlen, "gen_create: out of memory"); return LLAMA_ENOMEM; }
    g->m = m;
    g->dev = llama_device(m);
    g->cfg = *c;
    g->Bmax = Bmax;
    g->Tmax = Tmax;
    g->max_rows = max_rows;
    find_views(g, m);
    if (!g->embed || !g->norm_f || !g->lm_head) {
        snprintf(err, errlen, "gen_create: the model lacks embedding, final norm or head views");
        gen_destroy(&g);
        return LLAMA_EARG;
    }
    const double L = c->n_layers, D = c->d_model, F = c->d_ff, V = c->vocab_size;
    const double hd = D / c->n_heads, Dq = hd * c->n_heads, Dkv = hd * c->n_kv_heads;
    g->macs_per_row = L * (2.0 * D * Dq + 2.0 * D * Dkv + 3.0 * D * F) + D * V;
    g->serial_macs = GEN_SERIAL_MACS;
    dev_arena_t ar = {0};
    gen_layout(g, &ar);
    char b1[32];
    if (!(g->mem = DEV(g->dev, alloc, ar.used))) {
        snprintf(err, errlen, "gen_create: out of memory for a cache of %d x %d positions (%s) on %s",
                 Bmax, Tmax, device_bytes_str(ar.used, b1, sizeof b1), g->dev->name);
        gen_destroy(&g);
        return LLAMA_ENOMEM;
    }
    ar.base = g->mem;
    ar.used = 0;
    gen_layout(g, &ar);
    g->bytes = ar.used;
    g->pos = calloc(Bmax, sizeof(int));
    g->seq_slot = calloc(Bmax, sizeof(int));
    g->row_host = calloc((size_t)4 * max_rows, sizeof(int));
    if (!g->pos || !g->seq_slot || !g->row_host ||
        (!device_is_host(g->dev) && !(g->logits_host = malloc(sizeof(float) * Bmax * c->vocab_size)))) {
        snprintf(err, errlen, "gen_create: out of host memory");
        gen_destroy(&g);
        return LLAMA_ENOMEM;
    }
    *pg = g;
    return 0;
}

int gen_threads(const gen_t *g, int rows) {
    if (g->parallel_rows > 0 && rows >= g->parallel_rows) return 0;
    return (double)rows * g->macs_per_row < g->serial_macs ? 1 : 0;
}
void gen_set_serial_macs(gen_t *g, double macs) { g->serial_macs = macs; }
void gen_set_parallel_rows(gen_t *g, int rows) { g->parallel_rows = rows > 0 ? rows : 0; }

/* Runs the enclosed ops with the device's parallel machinery on or off for a chunk of `rows`
 * positions (gen_threads), then back on. */
#define WITH_PARALLEL(g, rows, body) do {                                             \
        DEV((g)->dev, set_parallel, !gen_threads(g, rows));                           \
        body;                                                                         \
        DEV((g)->dev, set_parallel, 1);                                               \
    } while (0)

void gen_reset(gen_t *g) {
    memset(g->pos, 0, sizeof(int) * g->Bmax);
    g->open = 0;
}
int gen_reset_slot(gen_t *g, int slot) {
    if (slot < 0 || slot >= g->Bmax) return LLAMA_EARG;
    g->pos[slot] = 0;
    return 0;
}
int gen_pos(const gen_t *g) { return g->pos[0]; }
int gen_slot_pos(const gen_t *g, int slot) { return slot >= 0 && slot < g->Bmax ? g->pos[slot] : -1; }
int gen_slots(const gen_t *g) { return g->Bmax; }
int gen_capacity(const gen_t *g) { return g->Tmax; }
int gen_max_rows(const gen_t *g) { return g->max_rows; }
size_t gen_cache_bytes(const gen_t *g) { return g->cache_bytes; }
size_t gen_bytes(const gen_t *g) { return g->bytes; }
const model_config_t *gen_config(const gen_t *g) { return &g->cfg; }
float *gen_hidden(gen_t *g) { return g->x; }
device_t *gen_device(const gen_t *g) { return g->dev; }
const float *gen_logits(const gen_t *g) { return g->logits_host ? g->logits_host : g->logits; }

int gen_begin(gen_t *g, const uint32_t *tokens, int B, int T, char *err, size_t errlen) {
    return gen_begin_slots(g, NULL, tokens, B, T, err, errlen);
}

int gen_begin_slots(gen_t *g, const int *slots, const uint32_t *tokens, int B, int T, char *err,
                    size_t errlen) {
    if (!tokens || B <= 0 || T <= 0 || B > g->Bmax || (long long)B * T > g->max_rows) {
        snprintf(err, errlen, "gen: chunk of B=%d T=%d outside 1 <= B <= %d, T >= 1, B*T <= %d",
                 B, T, g->Bmax, g->max_rows);
        return LLAMA_EARG;
    }
    for (int b = 0; b < B; b++) {
        const int s = slots ? slots[b] : b;
        if (s < 0 || s >= g->Bmax) {
            snprintf(err, errlen, "gen: slot %d outside the cache's 0..%d", s, g->Bmax - 1);
            return LLAMA_EARG;
        }
        for (int b2 = 0; b2 < b; b2++)
            if (g->seq_slot[b2] == s) {
                snprintf(err, errlen, "gen: slot %d appears twice in one chunk", s);
                return LLAMA_EARG;
            }
        if (g->pos[s] + T > g->Tmax) {
            snprintf(err, errlen, "gen: %d cached + %d new positions exceed the capacity of %d",
                     g->pos[s], T, g->Tmax);
            return LLAMA_EARG;
        }
        g->seq_slot[b] = s;
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
    /* every row's position, cache row, slot start and visible keys, for the device ops */
    const int N = B * T;
    int *rp = g->row_host, *rc = rp + N, *rb = rc + N, *rl = rb + N;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const int n = b * T + t, s = g->seq_slot[b], p = g->pos[s] + t;
            rp[n] = p;
            rc[n] = s * g->Tmax + p;
            /* a sliding window sees the newest W positions of its slot (seed 003) */
            const int W = g->cfg.sliding_window, first = W > 0 && p + 1 > W ? p + 1 - W : 0;
            rb[n] = s * g->Tmax + first;
            rl[n] = p + 1 - first;
        }
    device_t *d = g->dev;
    DEV(d, upload, g->row_pos, rp, sizeof(int) * N);
    DEV(d, upload, g->row_cache, rc, sizeof(int) * N);
    DEV(d, upload, g->row_base, rb, sizeof(int) * N);
    DEV(d, upload, g->row_len, rl, sizeof(int) * N);
    DEV(d, upload, g->tokens, tokens, sizeof(uint32_t) * N);
    WITH_PARALLEL(g, N, DEV(d, embedding_forward, g->x, g->tokens, g->embed, N, g->cfg.d_model));
    return 0;
}

/* The chunk's products: a decode chunk (one token per sequence) through linear_rows, whose
 * rows do not depend on each other, so a sequence decoded beside others gets the bits it gets
 * alone; a prefill chunk of up to GEN_PREFILL_CHUNK rows too, because its tiles read each weight
 * once for several rows where the CPU's few-row product (ops_linear.c, up to 16 rows) reads it
 * once per 4 (a serving step with a 16-token prompt to prefill spent 18% of its time there,
 * perf, config S, 32 rows); larger chunks through the ordinary product. */
static int by_rows(const gen_t *g, int N) { return g->T == 1 || N <= GEN_PREFILL_CHUNK; }
static void lin(gen_t *g, float *y, const float *x, const float *w, int N, int in, int out) {
    if (by_rows(g, N)) DEV(g->dev, linear_rows, y, x, w, N, in, out);
    else DEV(g->dev, linear_forward, y, x, w, N, in, out);
}
void gen_linear(gen_t *g, float *y, const float *x, const float *w, int N, int in, int out) {
    lin(g, y, x, w, N, in, out);
}

void gen_set_mid(gen_t *g, gen_mid_fn fn, void *ctx) {
    g->mid = fn;
    g->mid_ctx = ctx;
}
void gen_chunk(const gen_t *g, int *B, int *T) { *B = g->B, *T = g->T; }
const int *gen_chunk_slots(const gen_t *g) { return g->seq_slot; }
const int *gen_row_positions(const gen_t *g) { return g->row_pos; }

/* One block on the chunk: x (B*T,D) updated in place; the rows' keys/values written into
 * their slots at their positions. The training block's arithmetic (llama_block.c) on the
 * chunk's rows; a prefill's queries attend to their slot's keys through attention_forward with
 * Tq < Tk, a decode chunk's rows each through attention_rows. */
static void block_step(gen_t *g, int l, const float *r) {
    const model_config_t *c = &g->cfg;
    device_t *d = g->dev;
    const int B = g->B, T = g->T, N = B * T, D = c->d_model, F = c->d_ff;
    const int H = c->n_heads, Hkv = c->n_kv_heads, hd = D / H, Dq = hd * H, Dkv = hd * Hkv;
    const llama_block_w_t w = llama_block_weights(g->m, l);
    const float *cs = llama_rope_cos(g->m), *sn = llama_rope_sin(g->m);
    const size_t seq_stride = (size_t)g->Tmax * Dkv, layer_stride = (size_t)g->Bmax * seq_stride;
    float *kc = g->kc + l * layer_stride, *vc = g->vc + l * layer_stride;
    /* q|k|v in one product where the weights lie so. Not in a block whose keys/values read
     * x + r (the Free Transformer's block L/2) when the chunk goes through the row products:
     * there the fused product ran twice, on each input, and half of each result went unused
     * (config S: 512 x 256 multiply-adds a token thrown away, 3% of a decode step), where q
     * from x and k, v from x + r cost one; every element of linear_rows is its row's dot
     * product whatever the product's width (ops.h), so the bits are the same. A chunk through
     * the ordinary product keeps the fused pair (its bits could depend on the output's width). */
    const int fused = w.wk == w.wq + (size_t)Dq * D && w.wv == w.wk + (size_t)Dkv * D &&
                      !(r && by_rows(g, N));
    // attention rmsnorm of the query input, and of the key/value input x + r when injected
    DEV(d, rmsnorm_forward, g->xn, g->rstd, g->x, w.attn_norm, N, D, c->norm_eps);
    const float *kv_in = g->xn;
    if (r) {
        DEV(d, add_forward, g->xkv, g->x, r, (size_t)N * D);
        DEV(d, rmsnorm_forward, g->xkv, g->rstd, g->xkv, w.attn_norm, N, D, c->norm_eps);
        kv_in = g->xkv;
    }
    // projections; RoPE at each row's position
    if (fused) {
        if (r) {
            lin(g, g->qkv, kv_in, w.wq, N, D, Dq + 2 * Dkv);
            DEV(d, qkv_split_rope_rows, NULL, g->k, g->v, g->qkv, cs, sn, N, H, Hkv, hd, g->row_pos);
        }
        lin(g, g->qkv, g->xn, w.wq, N, D, Dq + 2 * Dkv);
        DEV(d, qkv_split_rope_rows, g->q, r ? NULL : g->k, r ? NULL : g->v, g->qkv, cs, sn, N, H,
            Hkv, hd, g->row_pos);
    } else {
        lin(g, g->q, g->xn, w.wq, N, D, Dq);
        lin(g, g->k, kv_in, w.wk, N, D, Dkv);
        lin(g, g->v, kv_in, w.wv, N, D, Dkv);
        DEV(d, rope_rows, g->q, g->q, cs, sn, N, H, hd, g->row_pos);
        DEV(d, rope_rows, g->k, g->k, cs, sn, N, Hkv, hd, g->row_pos);
    }
    // write the keys/values into the cache, then the queries attend to their slot's keys
    DEV(d, scatter_rows, kc, Dkv, g->row_cache, g->k, Dkv, N, Dkv);
    DEV(d, scatter_rows, vc, Dkv, g->row_cache, g->v, Dkv, N, Dkv);
    if (T == 1) {
        DEV(d, attention_rows, g->att, g->q, kc, vc, g->row_base, g->row_len, N, H, Hkv, hd);
    } else {
        for (int b = 0; b < B; b++) {
            const size_t s = (size_t)g->seq_slot[b];
            DEV(d, attention_window_forward, g->att + (size_t)b * T * Dq, g->lse + (size_t)b * H * T,
                g->q + (size_t)b * T * Dq, kc + s * seq_stride, vc + s * seq_stride, 1, T,
                g->pos[s] + T, H, Hkv, hd, 1, c->sliding_window);
        }
    }
    // output projection and residual on the query stream
    lin(g, g->branch, g->att, w.wo, N, Dq, D);
    DEV(d, add_inplace, g->x, g->branch, (size_t)N * D);
    // a family's own sublayer here (the LTM's cross-attention to its latents)
    if (g->mid) g->mid(g->mid_ctx, g, l);
    // MLP: rmsnorm, SwiGLU, down projection, residual
    DEV(d, rmsnorm_forward, g->xn, g->rstd, g->x, w.mlp_norm, N, D, c->norm_eps);
    lin(g, g->gate, g->xn, w.wgate, N, D, F);
    lin(g, g->up, g->xn, w.wup, N, D, F);
    DEV(d, swiglu_forward, g->h, g->gate, g->up, N, F);
    lin(g, g->branch, g->h, w.wdown, N, F, D);
    DEV(d, add_inplace, g->x, g->branch, (size_t)N * D);
}

void gen_blocks(gen_t *g, int l0, int l1, const float *r) {
    if (!g->open) return;
    WITH_PARALLEL(g, g->B * g->T, for (int l = l0; l < l1 && l < g->cfg.n_layers; l++)
                                      block_step(g, l, l == l0 ? r : NULL));
}

static int head(gen_t *g, float *all_logits) {
    const model_config_t *c = &g->cfg;
    device_t *d = g->dev;
    const int B = g->B, T = g->T, D = c->d_model, V = c->vocab_size;
    if (all_logits) {
        float *out = all_logits;
        if (!device_is_host(d)) {
            if (!g->all_dev && !(g->all_dev = DEV(d, alloc, sizeof(float) * g->max_rows * V)))
                return LLAMA_ENOMEM;
            out = g->all_dev;
        }
        DEV(d, rmsnorm_forward, g->xf, g->rstd, g->x, g->norm_f, B * T, D, c->norm_eps);
        lin(g, out, g->xf, g->lm_head, B * T, D, V);
        DEV(d, copy_rows, g->logits, V, out + (size_t)(T - 1) * V, T * V, B, V);
        if (out != all_logits) DEV(d, download, all_logits, out, sizeof(float) * B * T * V);
    } else {
        // only each sequence's last row goes through the head (V x D per row is the big product)
        DEV(d, copy_rows, g->xn, D, g->x + (size_t)(T - 1) * D, T * D, B, D);
        DEV(d, rmsnorm_forward, g->xf, g->rstd, g->xn, g->norm_f, B, D, c->norm_eps);
        lin(g, g->logits, g->xf, g->lm_head, B, D, V);
    }
    if (g->logits_host) DEV(d, download, g->logits_host, g->logits, sizeof(float) * B * V);
    return 0;
}

int gen_finish(gen_t *g, float *all_logits, char *err, size_t errlen) {
    if (!g->open) { snprintf(err, errlen, "gen_finish: no chunk in progress"); return LLAMA_EARG; }
    int rc = 0;
    WITH_PARALLEL(g, g->B * g->T, rc = head(g, all_logits));
    if (rc) { snprintf(err, errlen, "gen_finish: out of memory for every position's logits"); return rc; }
    if ((rc = DEV_SYNC_AS(g->dev, err, errlen, LLAMA_EARG, LLAMA_ENOMEM))) return rc;
    for (int b = 0; b < g->B; b++) g->pos[g->seq_slot[b]] += g->T;
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

int gen_prefill_next(gen_t *g, int slot, const uint32_t *prompt, int n, char *err, size_t errlen) {
    const int pos = gen_slot_pos(g, slot);
    if (pos < 0 || pos >= n) {
        snprintf(err, errlen, "gen_prefill_next: slot %d holds %d of the prompt's %d positions", slot,
                 pos, n);
        return LLAMA_EARG;
    }
    const int end = gen_prefill_cut(pos, n);
    int rc = gen_begin_slots(g, &slot, prompt + pos, 1, end - pos, err, errlen);
    if (rc) return rc;
    gen_blocks(g, 0, g->cfg.n_layers, NULL);
    if ((rc = gen_finish(g, NULL, err, errlen))) return rc;
    return n - end;
}

int gen_prefill_cut(int pos, int n) {
    const int end = (pos / GEN_PREFILL_CHUNK + 1) * GEN_PREFILL_CHUNK;
    return end < n ? end : n;
}
