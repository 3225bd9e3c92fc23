/* model/cuda/operands.cuh: bf16 copies of product operands, kept by the CUDA device in
 * precision bf16 (host-side bookkeeping; the conversions are elementwise.cuh's kernels).
 *
 * A product in bf16 takes bf16 operands (precision.h). Converting each fp32 operand at every
 * product costs a read and a write of it per use; at config G that was more memory traffic
 * than the rest of the step's element-wise work. Instead, the ops whose outputs feed products
 * (RMSNorm, SwiGLU forward and backward, attention's output, the q|k|v join, the classifier's
 * dlogits, AdamW's updated weights) write a bf16 copy as they write the fp32 result, and a
 * product finds it here: an entry says that the fp32 range [src, src + n) has a current bf16
 * copy, either
 *   BF_MIRROR  beside it (bf, same layout): both are current; or
 *   BF_ONLY    the bf16 copy alone is current, the fp32 range is stale (the classifier's
 *              dlogits, whose only readers are the head's two products): written as rows of
 *              V bf16 over the first half of each fp32 row (inplace_rows = V, row stride 2V).
 * Every other op tells the registry what it writes (bf_written: overlapping copies are
 * dropped) and what it reads (bf_read: a BF_ONLY range is widened back to fp32 first, so a
 * reader gets the bf16-rounded values -- the values the products use). Downloads, copies,
 * uploads, zeroing and frees do the same. A product whose operand has no copy converts it
 * into the device's work buffer, touching only the elements of the view.
 *
 * The registry is a short list searched linearly (a model registers a few entries per layer
 * and one per weight tensor); an entry's buffer is reused when the same range is produced
 * again (every step). When a copy cannot be allocated, the op writes none and the products
 * convert: slower, never wrong. */
#ifndef MODEL_CUDA_OPERANDS_CUH
#define MODEL_CUDA_OPERANDS_CUH
#include "model/cuda/common.cuh"
#include "model/cuda/elementwise.cuh"

enum { BF_FREE = 0, BF_MIRROR = 1, BF_ONLY = 2 };

typedef struct {
    const float *src;
    size_t n;           /* floats of the fp32 range */
    __nv_bfloat16 *bf;  /* the copy (owned, cap elements), or NULL for an in-place one */
    size_t cap;
    int state;
    int inplace_rows;   /* BF_ONLY in place: the row length V */
} bf_entry_t;

typedef struct {
    bf_entry_t *e;
    int count, cap;
    size_t bytes;       /* held by copies */
    unsigned long long conversions, hits; /* products that converted / found a copy */
} bf_cache_t;

static inline int bf_overlaps(const bf_entry_t *e, const void *p, size_t bytes) {
    const char *a = (const char *)e->src, *b = (const char *)p;
    return e->state != BF_FREE && b < a + e->n * sizeof(float) && a < b + bytes;
}
/* widens a BF_ONLY entry back to fp32 (then a mirror, or nothing for an in-place copy) */
static inline void bf_materialize(cudaStream_t s, bf_entry_t *e) {
    if (e->state != BF_ONLY) return;
    if (e->inplace_rows) {
        const size_t rows = e->n / e->inplace_rows;
        if (rows) LAUNCH(k_rows_from_bf16_inplace, (unsigned)rows, 256, 0, s)((float *)e->src, e->inplace_rows);
        e->state = BF_FREE;
    } else {
        from_bf16_launch(s, (float *)e->src, e->bf, e->n);
        e->state = BF_MIRROR;
    }
}
/* an op reads [p, p + bytes) as fp32 */
static inline void bf_read(bf_cache_t *c, cudaStream_t s, const void *p, size_t bytes) {
    if (!p || !bytes) return;
    for (int i = 0; i < c->count; i++)
        if (c->e[i].state == BF_ONLY && bf_overlaps(&c->e[i], p, bytes)) bf_materialize(s, &c->e[i]);
}
/* an op writes [p, p + bytes) as fp32: copies of what it overwrites are dropped (a stale
 * fp32 remainder of a BF_ONLY range is widened first, since only part may be overwritten) */
static inline void bf_written(bf_cache_t *c, cudaStream_t s, const void *p, size_t bytes) {
    if (!p || !bytes) return;
    for (int i = 0; i < c->count; i++)
        if (bf_overlaps(&c->e[i], p, bytes)) {
            bf_materialize(s, &c->e[i]);
            c->e[i].state = BF_FREE;
        }
}
/* the entry for exactly [src, src + n), or a free one (its buffer kept when large enough) */
static inline bf_entry_t *bf_slot(bf_cache_t *c, const float *src, size_t n) {
    bf_entry_t *spare = NULL;
    for (int i = 0; i < c->count; i++) {
        bf_entry_t *e = &c->e[i];
        if (e->src == src && e->n == n) return e;
        if (e->state == BF_FREE && !spare && e->cap >= n && !e->inplace_rows) spare = e;
    }
    if (spare) {
        spare->src = src;
        spare->n = n;
        return spare;
    }
    if (c->count == c->cap) {
        const int cap = c->cap ? 2 * c->cap : 64;
        bf_entry_t *e = (bf_entry_t *)realloc(c->e, sizeof(bf_entry_t) * cap);
        if (!e) return NULL;
        c->e = e;
        c->cap = cap;
    }
    bf_entry_t *e = &c->e[c->count++];
    memset(e, 0, sizeof(*e));
    e->src = src;
    e->n = n;
    return e;
}
/* A producer about to write [src, src + n) in fp32 (mirror) or only in bf16 in place (rows of
 * V, only): returns where the bf16 values go, or NULL (write fp32 only: nothing registered).
 * Overlapping copies are dropped first. The entry is valid once the producer is queued. */
static inline __nv_bfloat16 *bf_produce(bf_cache_t *c, cudaStream_t s, const float *src, size_t n, int inplace_rows) {
    if (!src || !n) return NULL;
    for (int i = 0; i < c->count; i++) {
        bf_entry_t *e = &c->e[i];
        if (bf_overlaps(e, src, n * sizeof(float))) {
            if (!(e->src == src && e->n == n)) bf_materialize(s, e);
            e->state = BF_FREE;
        }
    }
    bf_entry_t *e = bf_slot(c, src, n);
    if (!e) return NULL;
    if (inplace_rows) {
        if (e->bf) { /* an owned buffer is no use to an in-place copy: give it back */
            cudaFree(e->bf);
            c->bytes -= e->cap * sizeof(__nv_bfloat16);
            e->bf = NULL;
            e->cap = 0;
        }
        e->inplace_rows = inplace_rows;
        e->state = BF_ONLY;
        return (__nv_bfloat16 *)src;
    }
    e->inplace_rows = 0;
    if (e->cap < n) {
        if (e->bf) {
            cudaStreamSynchronize(s); /* queued products may still read the old copy */
            cudaFree(e->bf);
            c->bytes -= e->cap * sizeof(__nv_bfloat16);
        }
        e->bf = NULL;
        e->cap = 0;
        if (cudaMalloc(&e->bf, n * sizeof(__nv_bfloat16)) != cudaSuccess) {
            cudaGetLastError(); /* not a fault: the products will convert */
            e->bf = NULL;
            return NULL;
        }
        e->cap = n;
        c->bytes += n * sizeof(__nv_bfloat16);
    }
    e->state = BF_MIRROR;
    return e->bf;
}
/* The bf16 copy of the column-major view (rows x cols, leading dimension ld) at p, as a
 * pointer and leading dimension, or NULL when none is current. */
static inline const __nv_bfloat16 *bf_find(bf_cache_t *c, const float *p, size_t rows, size_t cols, size_t ld,
                                           size_t *ld_bf) {
    if (!rows || !cols) return NULL;
    const size_t extent = ld * (cols - 1) + rows;
    for (int i = 0; i < c->count; i++) {
        const bf_entry_t *e = &c->e[i];
        if (e->state == BF_FREE || p < e->src || p + extent > e->src + e->n) continue;
        const size_t off = (size_t)(p - e->src);
        if (!e->inplace_rows) {
            *ld_bf = ld;
            return e->bf + off;
        }
        /* in place: fp32 row r of V at 4 V r bytes holds bf16 row r at the same bytes */
        const size_t V = e->inplace_rows;
        if (ld != V || off % V + rows > V) continue;
        *ld_bf = 2 * V;
        return (const __nv_bfloat16 *)e->src + 2 * V * (off / V) + off % V;
    }
    return NULL;
}
/* a freed allocation: its entries go (their buffers are kept for reuse) */
static inline void bf_forget(bf_cache_t *c, const void *p, size_t bytes) {
    for (int i = 0; i < c->count; i++)
        if (bf_overlaps(&c->e[i], p, bytes)) c->e[i].state = BF_FREE;
}
static inline void bf_destroy(bf_cache_t *c) {
    for (int i = 0; i < c->count; i++)
        if (c->e[i].bf) cudaFree(c->e[i].bf);
    free(c->e);
    memset(c, 0, sizeof(*c));
}
#endif
