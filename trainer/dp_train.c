/* trainer/dp_train.c: the data-parallel optimizer step (see dp_train.h). Written over the
 * device table like a model family: buffers through DEV alloc, every operation on them a DEV op,
 * the host reading only what it must (sums of squares, a checksum's bytes). */
#include "trainer/dp_train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "common/errmsg.h"
#include "common/progress.h"

struct dp_train {
    dp_t *dp;
    device_t *dev;
    int n, W, rank, zero;
    tensor_view_t *params, *grads;  /* the model's */
    size_t *off;                    /* flat offset of each tensor */
    size_t P, C, S, lo, hi;         /* floats; this rank's shard of the model is [lo, hi) */
    float *flat, *scratch;          /* W*S floats each, on dev */
    adamw_t *opt;                   /* plain: every parameter; ZeRO-1: this shard's (NULL: empty) */
    int nopt;
    tensor_view_t *opt_p, *opt_g;   /* what the optimizer updates, and their gradients in flat */
    size_t *opt_off;                /* ZeRO-1: flat offset of each of those views */
    tensor_view_t *mom_m, *mom_v;   /* the moments in the parameters' layout (dp_train.h) */
    double *chunks;                 /* (W*S/C) per-chunk sums of squares, host */
    double comm_s;                  /* wall seconds in the steps' gradient collectives */
};


double dp_train_comm_seconds(const dp_train_t *t) { return t ? t->comm_s : 0; }

/* The norm's chunk: a power of two, at most 2^16 floats and small enough that every rank's
 * shard holds about 8 of them (a small model still spreads over every rank). */
static size_t norm_chunk(size_t P, int W) {
    size_t c = 64;
    while (c < 65536 && c * 2 * 8 * (size_t)W <= P) c *= 2;
    return c;
}

void dp_train_destroy(dp_train_t **pt) {
    dp_train_t *t = pt ? *pt : NULL;
    if (!t) return;
    adamw_destroy(&t->opt);
    if (t->flat) DEV(t->dev, free, t->flat);
    if (t->scratch) DEV(t->dev, free, t->scratch);
    free(t->params), free(t->grads), free(t->off), free(t->opt_p), free(t->opt_g), free(t->opt_off);
    if (t->zero) free(t->mom_m), free(t->mom_v);
    free(t->chunks);
    free(t);
    *pt = NULL;
}

/* A view with p's name and shape whose data is at `at` (flat or scratch). */
static tensor_view_t view_at(const tensor_view_t *p, float *at, device_t *dev) {
    tensor_view_t v = *p;
    v.data = at;
    v.dev = dev;
    return v;
}

/* ZeRO-1: the parts of the tensors inside [lo, hi), as 1-D views of the parameters and of
 * the flat gradient; an AdamW over them that decays each like its tensor. */
static int shard_optimizer(dp_train_t *t, const adamw_config_t *ac, char *err, size_t errlen) {
    t->opt_p = calloc(t->n, sizeof *t->opt_p);
    t->opt_g = calloc(t->n, sizeof *t->opt_g);
    t->opt_off = calloc(t->n, sizeof *t->opt_off);
    int *from = calloc(t->n, sizeof *from);
    if (!t->opt_p || !t->opt_g || !t->opt_off || !from) {
        free(from);
        return err_fail(err, errlen, DP_ENOMEM, "out of memory");
    }
    for (int i = 0; i < t->n; i++) {
        size_t a = t->off[i], b = a + (size_t)tensor_numel(&t->params[i]);
        if (b <= t->lo || a >= t->hi) continue;
        size_t s = a > t->lo ? a : t->lo, e = b < t->hi ? b : t->hi;
        tensor_view_t v = t->params[i];
        v.ndim = 1, v.shape[0] = (int64_t)(e - s), v.data = t->params[i].data + (s - a);
        t->opt_p[t->nopt] = v;
        t->opt_g[t->nopt] = view_at(&v, t->flat + s, t->dev);
        t->opt_off[t->nopt] = s;
        from[t->nopt++] = i;
    }
    int rc = 0;
    if (t->nopt && !(rc = adamw_create(&t->opt, t->opt_p, t->nopt, ac, err, errlen)))
        for (int k = 0; k < t->nopt; k++) adamw_set_decay(t->opt, k, adamw_default_decay(&t->params[from[k]], ac));
    free(from);
    return rc ? DP_ENOMEM : 0;
}

int dp_train_create(dp_train_t **out, dp_t *dp, device_t *dev, const tensor_view_t *params,
                    const tensor_view_t *grads, int n, const adamw_config_t *ac, int zero, char *err,
                    size_t errlen) {
    *out = NULL;
    dp_train_t *t = calloc(1, sizeof *t);
    if (!t) return err_fail(err, errlen, DP_ENOMEM, "out of memory");
    t->dp = dp, t->dev = dev, t->n = n, t->zero = zero;
    t->W = dp_world(dp), t->rank = dp_rank(dp);
    t->params = malloc(n * sizeof *t->params);
    t->grads = malloc(n * sizeof *t->grads);
    t->off = malloc(n * sizeof *t->off);
    if (!t->params || !t->grads || !t->off) {
        dp_train_destroy(&t);
        return err_fail(err, errlen, DP_ENOMEM, "out of memory");
    }
    memcpy(t->params, params, n * sizeof *params);
    memcpy(t->grads, grads, n * sizeof *grads);
    for (int i = 0; i < n; i++) {
        if (tensor_numel(&grads[i]) != tensor_numel(&params[i])) {
            dp_train_destroy(&t);
            return err_fail(err, errlen, DP_EARG, "gradient %s has another size than its parameter", grads[i].name);
        }
        t->off[i] = t->P;
        t->P += (size_t)tensor_numel(&params[i]);
    }
    t->C = norm_chunk(t->P, t->W);
    t->S = (t->P + (size_t)t->W * t->C - 1) / ((size_t)t->W * t->C) * t->C;
    t->lo = (size_t)t->rank * t->S;
    t->hi = t->lo + t->S < t->P ? t->lo + t->S : t->P;
    if (t->hi < t->lo) t->hi = t->lo;
    const size_t all = (size_t)t->W * t->S;
    t->flat = DEV(dev, alloc, all * sizeof(float));
    t->scratch = DEV(dev, alloc, all * sizeof(float));
    t->chunks = calloc(all / t->C, sizeof *t->chunks);
    if (!t->flat || !t->scratch || !t->chunks) {
        dp_train_destroy(&t);
        char a[32];
        return err_fail(err, errlen, DP_ENOMEM, "no room on %s for the data-parallel buffers (2 x %s)", dev->name,
                        device_bytes_str(all * sizeof(float), a, sizeof a));
    }
    int rc = 0;
    if (zero) {
        t->mom_m = malloc(n * sizeof *t->mom_m);
        t->mom_v = malloc(n * sizeof *t->mom_v);
        if (!t->mom_m || !t->mom_v) rc = err_fail(err, errlen, DP_ENOMEM, "out of memory");
        for (int i = 0; !rc && i < n; i++) {
            t->mom_m[i] = view_at(&params[i], t->flat + t->off[i], dev);
            t->mom_v[i] = view_at(&params[i], t->scratch + t->off[i], dev);
        }
        if (!rc) rc = shard_optimizer(t, ac, err, errlen);
    } else {
        t->opt_g = malloc(n * sizeof *t->opt_g);
        if (!t->opt_g) rc = err_fail(err, errlen, DP_ENOMEM, "out of memory");
        for (int i = 0; !rc && i < n; i++) t->opt_g[i] = view_at(&params[i], t->flat + t->off[i], dev);
        t->nopt = n;
        if (!rc && adamw_create(&t->opt, t->params, n, ac, err, errlen)) rc = DP_ENOMEM;
        if (!rc) {
            t->opt_p = malloc(n * sizeof *t->opt_p);
            t->mom_m = malloc(n * sizeof *t->mom_m);
            t->mom_v = malloc(n * sizeof *t->mom_v);
            if (!t->opt_p || !t->mom_m || !t->mom_v) rc = err_fail(err, errlen, DP_ENOMEM, "out of memory");
        }
        if (!rc) {
            memcpy(t->opt_p, t->params, n * sizeof *t->params);
            adamw_moments(t->opt, 0, t->mom_m, n);
            adamw_moments(t->opt, 1, t->mom_v, n);
        }
    }
    if (rc) {
        dp_train_destroy(&t);
        return rc;
    }
    *out = t;
    return 0;
}

/* ---- packing: tensors <-> the flat buffer -------------------------------------------------- */

static void pack(dp_train_t *t, float *flat, const tensor_view_t *v) {
    for (int i = 0; i < t->n; i++)
        DEV(t->dev, copy, flat + t->off[i], v[i].data, sizeof(float) * (size_t)tensor_numel(&v[i]));
}

static void unpack(dp_train_t *t, const float *flat, const tensor_view_t *v) {
    for (int i = 0; i < t->n; i++)
        DEV(t->dev, copy, v[i].data, flat + t->off[i], sizeof(float) * (size_t)tensor_numel(&v[i]));
}

/* ---- the step ------------------------------------------------------------------------------- */

/* Sum of squares of chunks [c0, c1) of flat into t->chunks. */
static void chunk_sums(dp_train_t *t, size_t c0, size_t c1) {
    for (size_t c = c0; c < c1; c++) t->chunks[c] = DEV(t->dev, sumsq, t->flat + c * t->C, t->C);
}

static int global_norm(dp_train_t *t, double *norm, char *err, size_t errlen) {
    const size_t per = t->S / t->C, nc = per * (size_t)t->W;
    if (t->zero) {
        double *mine = malloc(per * sizeof *mine);
        if (!mine) return err_fail(err, errlen, DP_ENOMEM, "out of memory");
        chunk_sums(t, t->rank * per, (t->rank + 1) * per);
        memcpy(mine, t->chunks + t->rank * per, per * sizeof *mine);
        int rc = dp_host_allgather(t->dp, mine, t->chunks, per * sizeof *mine, err, errlen);
        free(mine);
        if (rc) return rc;
    } else {
        chunk_sums(t, 0, nc);
    }
    double total = 0;
    for (size_t c = 0; c < nc; c++) total += t->chunks[c];
    *norm = sqrt(total);
    return 0;
}

int dp_train_step(dp_train_t *t, float lr, float grad_scale, float max_norm, double *norm, char *err,
                  size_t errlen) {
    pack(t, t->flat, t->grads);
    double t0 = progress_now();
    int rc = dp_reduce_scatter(t->dp, t->flat, t->scratch, t->S, err, errlen);
    t->comm_s += progress_now() - t0;
    if (rc) return rc;
    const float scale = (float)((double)grad_scale / t->W);
    if (scale != 1.0f) DEV(t->dev, scale_inplace, t->flat + (size_t)t->rank * t->S, scale, t->S);
    t0 = progress_now();
    if (!t->zero) rc = dp_allgather(t->dp, t->flat, t->S, err, errlen);
    t->comm_s += progress_now() - t0;
    if (rc) return rc;
    double nrm = 0;
    if ((rc = global_norm(t, &nrm, err, errlen))) return rc;
    if (norm) *norm = nrm;
    if (t->opt && (rc = adamw_step_normed(t->opt, t->opt_g, t->nopt, lr, max_norm, nrm, err, errlen)))
        return rc == -2 ? -2 : DP_EFAULT;
    if (!isfinite(nrm)) return err_fail(err, errlen, -2, "gradient norm is %g; step skipped", nrm);
    if (!t->zero) return 0;
    /* ZeRO-1: this shard's new parameters into flat, then every shard to every rank */
    for (int k = 0; k < t->nopt; k++)
        DEV(t->dev, copy, t->flat + t->opt_off[k], t->opt_p[k].data, sizeof(float) * (size_t)tensor_numel(&t->opt_p[k]));
    t0 = progress_now();
    rc = dp_allgather(t->dp, t->flat, t->S, err, errlen);
    t->comm_s += progress_now() - t0;
    if (rc) return rc;
    unpack(t, t->flat, t->params);
    return 0;
}

/* ---- state across the ranks ------------------------------------------------------------------ */

void dp_train_moment_views(dp_train_t *t, const tensor_view_t **m, const tensor_view_t **v) {
    *m = t->mom_m;
    *v = t->mom_v;
}

/* One buffer of tensors (in the parameters' layout) from rank 0 to every rank, through flat. */
static int broadcast_tensors(dp_train_t *t, const tensor_view_t *v, char *err, size_t errlen) {
    pack(t, t->flat, v);
    int rc = dp_broadcast(t->dp, t->flat, t->P, 0, err, errlen);
    if (!rc) unpack(t, t->flat, v);
    return rc;
}

/* ZeRO-1: this rank's shard of a moment held in the parameters' layout at `from` (flat or
 * scratch, filled by a checkpoint load on rank 0 and broadcast) into the optimizer's. */
static void take_shard(dp_train_t *t, const float *from, int which) {
    if (!t->opt) return;
    tensor_view_t *mv = malloc(t->nopt * sizeof *mv);
    if (!mv) return;
    adamw_moments(t->opt, which, mv, t->nopt);
    for (int k = 0; k < t->nopt; k++)
        DEV(t->dev, copy, mv[k].data, from + t->opt_off[k], sizeof(float) * (size_t)tensor_numel(&mv[k]));
    free(mv);
}

int dp_train_sync(dp_train_t *t, int moments, char *err, size_t errlen) {
    int rc = 0;
    if (moments && t->zero) { /* rank 0 loaded them into flat and scratch: the moments first */
        if (!(rc = dp_broadcast(t->dp, t->flat, t->P, 0, err, errlen)) &&
            !(rc = dp_broadcast(t->dp, t->scratch, t->P, 0, err, errlen))) {
            take_shard(t, t->flat, 0);
            take_shard(t, t->scratch, 1);
        }
    } else if (moments) {
        if (!(rc = broadcast_tensors(t, t->mom_m, err, errlen))) rc = broadcast_tensors(t, t->mom_v, err, errlen);
    }
    if (!rc) rc = broadcast_tensors(t, t->params, err, errlen);
    if (!rc && DEV(t->dev, sync, err, errlen)) rc = DP_EFAULT;
    return rc;
}

int dp_train_gather_moments(dp_train_t *t, char *err, size_t errlen) {
    if (!t->zero) return 0;
    for (int which = 0; which < 2; which++) {
        float *to = which ? t->scratch : t->flat;
        if (t->opt) {
            tensor_view_t *mv = malloc(t->nopt * sizeof *mv);
            if (!mv) return err_fail(err, errlen, DP_ENOMEM, "out of memory");
            adamw_moments(t->opt, which, mv, t->nopt);
            for (int k = 0; k < t->nopt; k++)
                DEV(t->dev, copy, to + t->opt_off[k], mv[k].data, sizeof(float) * (size_t)tensor_numel(&mv[k]));
            free(mv);
        }
        int rc = dp_gather(t->dp, to, t->S, 0, err, errlen);
        if (rc) return rc;
    }
    return DEV(t->dev, sync, err, errlen) ? DP_EFAULT : 0;
}

void dp_train_set_steps(dp_train_t *t, int64_t steps) {
    if (t->opt) adamw_set_steps(t->opt, steps);
}

uint64_t dp_train_checksum(dp_train_t *t) {
    XXH3_state_t *h = XXH3_createState();
    size_t most = 0;
    for (int i = 0; i < t->n; i++)
        if ((size_t)tensor_numel(&t->params[i]) > most) most = (size_t)tensor_numel(&t->params[i]);
    float *host = malloc((most ? most : 1) * sizeof *host);
    uint64_t sum = 0;
    if (h && host && XXH3_64bits_reset(h) == XXH_OK) {
        for (int i = 0; i < t->n; i++) {
            tensor_view_download(&t->params[i], host);
            XXH3_64bits_update(h, host, sizeof(float) * (size_t)tensor_numel(&t->params[i]));
        }
        sum = XXH3_64bits_digest(h);
    }
    free(host);
    XXH3_freeState(h);
    return sum;
}

void dp_train_memory(const dp_train_t *t, dp_train_memory_t *out) {
    size_t held = t->zero ? t->hi - t->lo : t->P;
    out->moments = 2 * held * sizeof(float);
    out->buffers = 2 * (size_t)t->W * t->S * sizeof(float);
    out->params = t->P;
    out->shard = t->S;
    out->chunk = t->C;
}
