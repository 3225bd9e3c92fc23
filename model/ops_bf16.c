/* model/ops_bf16.c: bf16 packing and the shadows of fp32 tensors (ops_bf16.h). */
#include "model/ops_bf16.h"
#include "model/gemm.h"
#include "model/ops.h"
#include "model/ops_clones.h"
#include "model/ops_math.h"
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- packing ------------------------------------------------------------------------------
 * Built per instruction-set level (ops_clones.h): the rounding is integer work on the bit
 * pattern, 16 lanes at AVX-512 (the bits are the same at every level). */
OPS_VARIANTS(void, pack_run, (uint16_t *restrict y, const float *restrict x, size_t n), (y, x, n)) {
    OPS_SIMD
    for (size_t i = 0; i < n; i++) y[i] = ops_bf16_from_float(x[i]);
}
OPS_VARIANTS(void, pack_run_f32, (float *restrict y, const float *restrict x, size_t n), (y, x, n)) {
    OPS_SIMD
    for (size_t i = 0; i < n; i++) y[i] = ops_bf16_round(x[i]);
}

/* Below this many elements a pass is not worth a parallel region. */
#define PACK_PAR_MIN (1 << 16)
#define PACK_CHUNK 16384

/* n elements in chunks over the threads: as bf16 patterns, or as rounded fp32 (f32) */
static void pack_chunks(void *y, int f32, const float *x, size_t n) {
    const long nch = (long)((n + PACK_CHUNK - 1) / PACK_CHUNK);
#pragma omp parallel for schedule(static) if (!omp_in_parallel() && n >= PACK_PAR_MIN)
    for (long c = 0; c < nch; c++) {
        const size_t lo = (size_t)c * PACK_CHUNK, len = n - lo < PACK_CHUNK ? n - lo : PACK_CHUNK;
        if (f32) pack_run_f32((float *)y + lo, x + lo, len);
        else pack_run((uint16_t *)y + lo, x + lo, len);
    }
}

/* (a parallel region with a false `if` still costs libgomp a team of one: measured, a call
 * per row made qkv_split_rope 25x slower, so small runs skip the pragma altogether) */
void ops_bf16_pack(uint16_t *y, const float *x, size_t n) {
    if (n < PACK_PAR_MIN || omp_in_parallel()) pack_run(y, x, n);
    else pack_chunks(y, 0, x, n);
}

void ops_bf16_pack_serial(uint16_t *y, const float *x, size_t n) { pack_run(y, x, n); }

void ops_bf16_pack_f32(float *y, const float *x, size_t n) {
    if (n < PACK_PAR_MIN || omp_in_parallel()) pack_run_f32(y, x, n);
    else pack_chunks(y, 1, x, n);
}

/* column c of the matrices (ops_bf16_pack_matrix) */
static inline void pack_column(void *y, int f32, const float *x, long c, int rows, int cols, int ld,
                               long long stride) {
    const float *xc = x + (c / cols) * stride + (c % cols) * (size_t)ld;
    if (f32) pack_run_f32((float *)y + (size_t)c * rows, xc, (size_t)rows);
    else pack_run((uint16_t *)y + (size_t)c * rows, xc, (size_t)rows);
}

void ops_bf16_pack_matrix(void *y, int f32, const float *x, int rows, int cols, int ld,
                          long long stride, int nb) {
    const size_t per = (size_t)rows * cols, total = per * nb;
    if (ld == rows && (nb == 1 || stride == (long long)per)) {   /* one contiguous run */
        if (f32) ops_bf16_pack_f32(y, x, total);
        else ops_bf16_pack(y, x, total);
        return;
    }
    const long ncol = (long)nb * cols;
    if (total < PACK_PAR_MIN || omp_in_parallel()) {   /* (no pragma at all: see above) */
        for (long c = 0; c < ncol; c++) pack_column(y, f32, x, c, rows, cols, ld, stride);
        return;
    }
#pragma omp parallel for schedule(static)
    for (long c = 0; c < ncol; c++) pack_column(y, f32, x, c, rows, cols, ld, stride);
}

/* ---- shadows --------------------------------------------------------------------------- */

#define SHADOW_MAX 1024

typedef struct {
    const float *src;     /* the fp32 tensor (NULL: a free slot) */
    size_t n;             /* elements shadowed */
    size_t cap;           /* elements the storage holds */
    void *data;           /* bf16 patterns, or fp32 values (f32); src itself when in place */
    int valid;
    int f32;              /* the emulated path's kind (ops_bf16.h): fp32 values, low bits zero */
} shadow_t;

/* storage of s that is its own (not the tensor itself: a tensor rounded in place) */
static void shadow_release(shadow_t *s) {
    if (s->data != (const void *)s->src) free(s->data);
    s->data = NULL, s->cap = 0;
}

static shadow_t tab[SHADOW_MAX];
static int ntab;          /* slots in use at the front of tab (some may be free) */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int enabled = -1, checking = -1, only_mode = -1;
static long stale, hits, only_writes;

/* the ranges a device marked as read by products only (ops_bf16_products_only) */
#define ONLY_MAX 1024
static struct { const char *lo, *hi; } only_tab[ONLY_MAX];
static int n_only;

static int env_flag(const char *name, int dflt) {
    const char *e = getenv(name);
    return e && *e ? strcmp(e, "0") != 0 : dflt;
}

void ops_bf16_shadows_enable(int on) { enabled = !!on; }
void ops_bf16_shadow_check(int on) { checking = !!on; }
static int check_on(void) {
    if (checking < 0) checking = env_flag("FT_BF16_SHADOW_CHECK", 0);
    return checking;
}
long ops_bf16_shadow_stale(void) { return stale; }
long ops_bf16_shadow_hits(void) { return hits; }

int ops_bf16_native(void) {
    return ops_product_precision == PRECISION_BF16 && model_gemm_bf16_native();
}

/* $FT_BF16_SHADOWS (or ops_bf16_shadows_enable), for either kind of shadow */
static int shadows_enabled(void) {
    if (enabled < 0) enabled = env_flag("FT_BF16_SHADOWS", 1);
    return enabled;
}

int ops_bf16_shadows(void) { return ops_bf16_native() && shadows_enabled(); }

int ops_bf16_emulated(void) {
    return ops_product_precision == PRECISION_BF16 && !model_gemm_bf16_native() && shadows_enabled();
}

static shadow_t *lookup(const float *x) {
    for (int i = 0; i < ntab; i++)
        if (tab[i].src == x) return &tab[i];
    return NULL;
}

/* In checking mode: does shadow s hold the rounding of its tensor? Counts it when not. */
static void check_one(const shadow_t *s) {
    if (!check_on()) return;
    const uint16_t *h = s->data;
    const float *f = s->data;
    for (size_t i = 0; i < s->n; i++)
        if (s->f32 ? f[i] != ops_bf16_round(s->src[i]) : h[i] != ops_bf16_from_float(s->src[i])) {
            __atomic_add_fetch(&stale, 1, __ATOMIC_RELAXED);
            return;
        }
}

const uint16_t *ops_bf16_shadow_find(const float *x, size_t n) {
    pthread_mutex_lock(&lock);
    shadow_t *s = lookup(x);
    const uint16_t *r = s && s->valid && !s->f32 && s->n == n ? s->data : NULL;
    if (r) hits++;
    pthread_mutex_unlock(&lock);
    if (r) check_one(s);
    return r;
}

/* a valid shadow of x[0 .. n) of kind f32, its storage: the tensor itself (in_place), else
 * storage of its own (kept, grown when short); NULL when out of memory or the table is full */
static void *take_kind(const float *x, size_t n, int f32, int in_place) {
    if (!x || !n) return NULL;
    pthread_mutex_lock(&lock);
    shadow_t *s = lookup(x);
    if (!s) {   /* a free slot, else an invalid one, else a new one at the end */
        for (int i = 0; i < ntab && !s; i++)
            if (!tab[i].src) s = &tab[i];
        for (int i = 0; i < ntab && !s; i++)
            if (!tab[i].valid) s = &tab[i];
        if (!s && ntab < SHADOW_MAX) s = &tab[ntab++];
        if (s) {
            if (s->data == (const void *)s->src) s->data = NULL, s->cap = 0;   /* was in place */
            s->src = x, s->valid = 0;
        }
    }
    void *r = NULL;
    if (s) {
        if (s->f32 != f32 || in_place || s->data == (const void *)s->src) shadow_release(s);
        s->f32 = f32;
        const size_t esz = f32 ? sizeof(float) : sizeof(uint16_t);
        if (in_place) {
            s->data = (void *)x;
            s->cap = n;
        } else if (s->cap < n) {
            void *p = aligned_alloc(64, (n * esz + 63) & ~(size_t)63);
            if (p) {
                shadow_release(s);
                s->data = p;
                s->cap = n;
            }
        }
        if (s->cap >= n) {
            s->n = n;
            s->valid = 1;
            r = s->data;
        } else {
            s->valid = 0;
        }
    }
    pthread_mutex_unlock(&lock);
    return r;
}

uint16_t *ops_bf16_shadow_take(const float *x, size_t n) { return take_kind(x, n, 0, 0); }

const uint16_t *ops_bf16_shadow_weight(const float *w, size_t n) {
    const uint16_t *r = ops_bf16_shadow_find(w, n);
    if (r) return r;
    uint16_t *p = ops_bf16_shadow_take(w, n);
    if (p) ops_bf16_pack(p, w, n);
    return p;
}

static int overlaps(const shadow_t *s, const char *lo, const char *hi) {
    const char *a = (const char *)s->src, *b = (const char *)(s->src + s->n);
    return s->src && a < hi && lo < b;
}

void *ops_bf16_shadow_slice(const float *x, size_t n, int *f32) {
    *f32 = 0;
    if (!ntab || !x || !n) return NULL;
    void *r = NULL;
    int keep = -1;
    pthread_mutex_lock(&lock);
    /* (a tensor rounded in place is not a slice to write: it is x itself) */
    for (int i = 0; i < ntab && keep < 0; i++)
        if (tab[i].valid && tab[i].src && tab[i].data != (const void *)tab[i].src &&
            x >= tab[i].src && x + n <= tab[i].src + tab[i].n) {
            keep = i, *f32 = tab[i].f32;
            r = (char *)tab[i].data + (x - tab[i].src) * (tab[i].f32 ? sizeof(float) : sizeof(uint16_t));
        }
    const char *lo = (const char *)x, *hi = (const char *)(x + n);
    for (int i = 0; r && i < ntab; i++)   /* any other view of those bytes is stale now */
        if (i != keep && tab[i].valid && overlaps(&tab[i], lo, hi)) tab[i].valid = 0;
    pthread_mutex_unlock(&lock);
    return r;
}

void ops_bf16_clobber(const void *p, size_t bytes) {
    if (!ntab || !p || !bytes) return;   /* (an unlocked read: a stale 0 means no shadows yet) */
    const char *lo = p, *hi = lo + bytes;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < ntab; i++)
        if (tab[i].valid && overlaps(&tab[i], lo, hi)) tab[i].valid = 0;
    pthread_mutex_unlock(&lock);
}

void ops_bf16_forget(const void *p, size_t bytes) {
    if ((!ntab && !n_only) || !p) return;
    const char *lo = p, *hi = lo + bytes;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < n_only; i++)   /* the marks inside the buffer go with it */
        if (only_tab[i].lo < hi && lo < only_tab[i].hi) only_tab[i--] = only_tab[--n_only];
    for (int i = 0; i < ntab; i++)
        if (overlaps(&tab[i], lo, hi)) {
            shadow_release(&tab[i]);
            memset(&tab[i], 0, sizeof tab[i]);
        }
    while (ntab > 0 && !tab[ntab - 1].src) ntab--;
    pthread_mutex_unlock(&lock);
}

/* ---- tensors read by products only (ops_bf16.h) ---- */

int ops_bf16_only_mode(void) {
    if (only_mode < 0) {
        const char *e = getenv("FT_BF16_SHADOW_ONLY");
        only_mode = !e || !*e ? 1 : !strcmp(e, "poison") ? 2 : strcmp(e, "0") != 0;
    }
    return only_mode;
}
void ops_bf16_only_set(int mode) { only_mode = mode < 0 ? -1 : mode > 2 ? 2 : mode; }
long ops_bf16_only_writes(void) { return only_writes; }

void ops_bf16_products_only(const void *p, size_t bytes) {
    if (!p || !bytes) return;
    const char *lo = p, *hi = lo + bytes;
    pthread_mutex_lock(&lock);
    int i = 0;
    while (i < n_only && only_tab[i].lo != lo) i++;
    if (i < n_only) {
        if (hi > only_tab[i].hi) only_tab[i].hi = hi;
    } else if (n_only < ONLY_MAX) {
        only_tab[n_only].lo = lo, only_tab[n_only++].hi = hi;
    }   /* (a full table: the tensor keeps its fp32 copy) */
    pthread_mutex_unlock(&lock);
}

/* 1 when x[0 .. n) lies inside a range marked products-only (the caller holds the lock) */
static int inside_only(const float *x, size_t n) {
    const char *lo = (const char *)x, *hi = (const char *)(x + n);
    int in = 0;
    for (int i = 0; i < n_only && !in; i++) in = only_tab[i].lo <= lo && hi <= only_tab[i].hi;
    return in;
}

uint16_t *ops_bf16_shadow_take_out(const float *x, size_t n, int *only) {
    *only = 0;
    if (!ops_bf16_shadows()) return NULL;
    uint16_t *r = ops_bf16_shadow_take(x, n);
    if (!r || !n_only || !ops_bf16_only_mode() || check_on()) return r;
    pthread_mutex_lock(&lock);
    *only = inside_only(x, n);
    pthread_mutex_unlock(&lock);
    if (*only) __atomic_add_fetch(&only_writes, 1, __ATOMIC_RELAXED);
    return r;
}

void ops_bf16_only_done(float *x, size_t n) {
    if (ops_bf16_only_mode() == 2) memset(x, 0xff, sizeof(float) * n);   /* all ones: a NaN */
}

/* ---- the emulated path: fp32 shadows (ops_bf16.h) ---- */

int ops_bf16_round_out(const float *x, size_t n) {
    if (!x || !n || !n_only || !ops_bf16_emulated() || ops_bf16_only_mode() != 1 || check_on())
        return 0;
    pthread_mutex_lock(&lock);
    const int in = inside_only(x, n);
    pthread_mutex_unlock(&lock);
    if (!in || !take_kind(x, n, 1, 1)) return 0;
    __atomic_add_fetch(&only_writes, 1, __ATOMIC_RELAXED);
    return 1;
}

const float *ops_bf16_shadow_find_f32(const float *x, size_t n) {
    if (!ntab || !x) return NULL;   /* (an unlocked read, as in ops_bf16_clobber) */
    pthread_mutex_lock(&lock);
    shadow_t *s = lookup(x);
    const float *r = s && s->valid && s->f32 && s->n == n ? s->data : NULL;
    if (r) hits++;
    pthread_mutex_unlock(&lock);
    if (r) check_one(s);
    return r;
}

float *ops_bf16_shadow_take_f32(const float *x, size_t n) {
    return ops_bf16_emulated() ? take_kind(x, n, 1, 0) : NULL;
}

const float *ops_bf16_shadow_weight_f32(const float *w, size_t n) {
    const float *r = ops_bf16_shadow_find_f32(w, n);
    if (r) return r;
    float *p = take_kind(w, n, 1, 0);
    if (p) ops_bf16_pack_f32(p, w, n);
    return p;
}
