/* model/device_cuda.cu: the CUDA device (device.h) — cuBLAS for the products, the kernel
 * families of model/cuda/ for the ops a training step spends its time in, and for the rest a
 * grid-stride loop (cuda_launch.h) over the work items of a body from model/kernels.h. The
 * arithmetic is ops_math.h's, the math the CPU reference runs. Nothing here knows what a
 * model family is.
 *
 *   model/cuda/common.cuh      warp and block reductions in a fixed order, 128-bit accesses,
 *                              the launch spelling shared with the emulator
 *   model/cuda/rows.cuh        RMSNorm (a warp per row), two-stage column reductions
 *                              (RMSNorm's weight gradient, sum_rows)
 *   model/cuda/classifier.cuh  cross-entropy: log-sum-exp, loss and dlogits in one pass over
 *                              the logits, a block per row; the count and mean on the device
 *   model/cuda/adamw.cuh       the gradient norm and AdamW over every tensor in one launch
 *   model/cuda/elementwise.cuh SwiGLU, the residual adds, scaling: 128-bit accesses
 *   model/cuda/rope.cuh        RoPE, the fused q|k|v split and join, copy_rows: a thread per
 *                              rotation pair (four with 128-bit accesses), coalesced; the
 *                              split in one launch, a thread per four pairs of 6 heads
 *   model/cuda/attention.cuh   attention tiled in shared memory (FlashAttention-style online
 *                              softmax), an atomic-free backward (a dK/dV pass and a dQ pass),
 *                              tensor cores in bf16; the decode step's rows, a warp per row
 *
 * Determinism: no atomics; every sum runs in an order fixed by the shapes (a row's lanes in a
 * fixed shuffle tree, column sums in two fixed stages, kernels.h's items in their own order),
 * and cuBLAS is deterministic on one GPU kind with one stream. The numbers the host needs (the
 * loss, the gradient norm) are reduced on the device and downloaded once per call; the free
 * bits are downloaded per row and summed by the CPU op.
 *
 * Status: compiled and linked wherever nvcc exists; the host-side parts (launch geometry, the
 * kernel bodies) are tested on the CPU by tests/test_kernels.c. Whether it has ever run on a
 * GPU is stated in README ("The GPU device"). */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <type_traits>

extern "C" {
#include "model/device.h"
#include "model/ops.h"
}
#include "model/cuda_launch.h"
#include "model/kernels.h"
#include "model/cuda/adamw.cuh"
#include "model/cuda/attention.cuh"
#include "model/cuda/classifier.cuh"
#include "model/cuda/common.cuh"
#include "model/cuda/elementwise.cuh"
#include "model/cuda/rope.cuh"
#include "model/cuda/rows.cuh"

/* Rows of dZ = dR W_post computed per product in the Binary Mapper's backward (bounds the
 * work buffer to about 64 MiB at H = 16). */
#define CUDA_BINMAP_CHUNK_FLOATS (16u << 20)
/* The bf16 operands of one product chunk (the two converted operands of a k-slice): 64 MiB. */
#define CUDA_BF16_WORK_BYTES ((size_t)64 << 20)
/* The work buffer reserved at open: its bounded users (bf16 operand chunks, dZ chunks) fit. */
#define CUDA_WORK_RESERVE (CUDA_BF16_WORK_BYTES > sizeof(float) * CUDA_BINMAP_CHUNK_FLOATS ? CUDA_BF16_WORK_BYTES : sizeof(float) * CUDA_BINMAP_CHUNK_FLOATS)

/* the reductions' results, one allocation: the classifier's (ce_result_t, its ticket inside), the
 * norm's double, k_shadow_check's count, the norm's ticket (padded to 8 bytes), the column
 * reductions' tickets (rows.cuh: COLRED_TICKETS) */
#define CUDA_RESULTS_BYTES \
    (sizeof(ce_result_t) + sizeof(double) + 2 * sizeof(unsigned long long) + COLRED_TICKETS * sizeof(unsigned))

/* A bf16 shadow (precision bf16): an fp32 tensor's elements rounded to bf16 (ties to even, the
 * bits g_to_bf16 and the CPU's ops_bf16_from_float give), kept on the device beside it so a
 * product reads it instead of rounding the operand again -- the CUDA device's copy of the CPU
 * device's scheme (model/ops_bf16.h, docs/DEVICES.md "Precision"):
 *   - a product's operand that is a whole compact tensor view (a weight, an activation, an output
 *     gradient) is rounded into a shadow at its first product and read from it at the next ones
 *     (a Linear's x and dy are read twice, by the forward or the input gradient and by the
 *     weight gradient; a weight by the forward and the input gradient of every step);
 *   - the optimizer refreshes a weight's shadow in its own pass (k_adamw_multi writes the new
 *     value's rounding beside it): once per step, however many products read the weight;
 *   - every op names what it writes before it runs (OUT below): the shadows overlapping those
 *     bytes become invalid, and the next product rounds afresh.
 * The values a product multiplies are the rounding of its operands either way, so a step with
 * shadows gives the bits of one without them. $FT_BF16_SHADOW_CHECK=1 compares every shadow a
 * product reads with a fresh rounding on the device (k_shadow_check) and makes sync report a
 * stale one. Shadows are the device's own memory, not counted in device_t.allocated (as the
 * work buffer); one is made only where the GPU keeps CUDA_SHADOW_SPARE bytes free after it (a
 * product without one rounds into the work buffer, as before), so a model that fits still
 * runs. Nothing of this is visible through the device table. */
#define CUDA_SHADOW_MAX 1024
#define CUDA_SHADOW_SPARE ((size_t)256 << 20)
typedef struct {
    const float *src;     /* the fp32 tensor (NULL: a free slot) */
    size_t n, cap;        /* elements shadowed; elements `own` holds */
    __nv_bfloat16 *data;  /* own, or memory of the tensor's own buffer (shadow_borrow) */
    __nv_bfloat16 *own;   /* the shadow's storage (cudaMalloc), kept while data is borrowed */
    int valid;
    /* 0, 0: the elements in their order. Else the tensor is rows of `width` elements and the
     * shadow keeps row r at r * ld (ld > width, a multiple of CUDA_PRODUCT_ALIGN): a product
     * reading such a matrix gets 16-byte aligned columns (shadow_view); zpad: the zero elements
     * its writer puts after each row (ld - width, but 0 where a borrowed shadow's rows lie in
     * the fp32 rows they shadow: shadow_borrow) */
    int width, ld, zpad;
    /* a compact shadow's zero elements after its n (storage for them included in cap): a matrix of
     * an odd number of columns gets zero columns up to a multiple of CUDA_PRODUCT_ALIGN, so a
     * product can run its k or m dimension padded (the head's weight: V = 50257 -> 50304) */
    size_t tail;
} cu_shadow_t;
/* Products whose matrices have a leading dimension that is not a multiple of 8 bf16 (16 bytes)
 * run on cuBLAS's kernels without that alignment requirement: measured on an H200, the
 * vocabulary's products at V = 50257 ran Turing-era cutlass_75 kernels at ~95 TFLOP/s where the
 * layer's products got Hopper kernels (bench/h200/, bench/NOTES.md). So a padded shadow keeps
 * such a matrix at a leading dimension rounded up to CUDA_PRODUCT_ALIGN elements, and a product
 * whose fp32 result has such a leading dimension is computed into an aligned staging buffer and
 * copied out (gemm_run). $FT_CUDA_ALIGN=0 turns both off (for measuring what they give). */
#define CUDA_PRODUCT_ALIGN 64
/* below this many multiply-adds a product is not worth a staging copy ($FT_CUDA_STAGE_MIN: the
 * emulator's tests stage every product whose result is misaligned, at their small shapes) */
#define CUDA_STAGE_MIN_MACS ((double)(1 << 30))

/* Deferred zeroing. zero() of at least CUDA_PENDING_MIN bytes inside one allocation records the
 * range instead of writing it; the first op that uses it either overwrites it whole without
 * reading it -- a Linear's weight gradient, computed with beta 0 instead of accumulated into the
 * zeros (linear_bwd: the bits of 0 + the product but for the sign of a zero sum), an RMSNorm's
 * weight gradient written as its sum (the same bits) -- or gets the
 * zeros written first: an op's declared output (OUT) the exact overlap, an op's other pointer
 * argument every deferred range of that argument's allocation (the device table's ops reach
 * memory only through their arguments, each within its allocation; after_flush below), the
 * optimizer and the norm (whose lists the scan does not see) all of them. At config G this
 * takes the gradients' per-step memset (0.49 GB) off the step where the weight gradients are
 * products, and those products no longer read C. $FT_CUDA_LAZY_ZERO=0 turns it off, =poison
 * writes a deferred range as NaN (all ones) when it is deferred, so a reader the scheme missed
 * fails; $FT_CUDA_LAZY_ZERO_MIN sets the threshold (bytes; the tests: 0). */
#define CUDA_PENDING_MAX 256
#define CUDA_PENDING_MIN ((size_t)16 << 20)

/* a tensor list of the optimizer kernels, kept on the device between steps */
typedef struct {
    mt_tensor_t *host, *dev;
    int count, cap;
    size_t chunks;
} mt_list_t;

typedef struct {
    int ordinal;
    cudaStream_t stream;
    cublasHandle_t blas;
    char fault[256];          /* the first error since the last sync; sync reports it once */
    int fault_nomem;          /* ... and it was a lack of memory (device or host) */
    void *work;               /* scratch for attention's row terms, bf16 operands, dZ chunks */
    size_t work_bytes;
    struct cuda_alloc { void *p; size_t bytes; } *allocs; /* what alloc handed out, for free's count */
    size_t n_allocs, cap_allocs;
    float *host_rows;         /* host scratch for per-row results summed on the host */
    size_t host_rows_bytes;
    size_t smem_optin;        /* the most dynamic shared memory a block may ask for */
    mt_list_t mt_norm, mt_adam; /* the optimizer's tensor lists (adamw.cuh) */
    ce_result_t *ce;          /* device results: the classifier's count and loss sum, */
    double *norm;             /* the gradient norm's sum of squares (one allocation) */
    unsigned *norm_ticket;    /* k_sumsq_chunks' count of blocks done (same allocation; 0 between launches) */
    unsigned *colred_tickets; /* the column reductions' folded finish (same allocation; 0 between launches) */
    int finish_apart;         /* $FT_CUDA_FINISH=kernels: the count, mean and norm finished by kernels of
                                 their own, not by the last block (the layout before; the same bits) */
    unsigned long long *shadow_bad; /* k_shadow_check's count of stale elements (same allocation) */
    cu_shadow_t shadow[CUDA_SHADOW_MAX]; /* the bf16 shadows (above), n_shadow slots in use */
    int n_shadow;
    int shadow_check;         /* $FT_BF16_SHADOW_CHECK */
    int align_products;       /* padded shadows and staged results (CUDA_PRODUCT_ALIGN); $FT_CUDA_ALIGN */
    int ce_cache;             /* the classifier keeps a row in shared memory when it fits; $FT_CUDA_CE_CACHE=0: never
                                 (two reads of the row from global memory, for measuring the choice) */
    double stage_min;         /* CUDA_STAGE_MIN_MACS, or $FT_CUDA_STAGE_MIN */
    float *stage;             /* the staging buffer of products with a misaligned result */
    size_t stage_bytes;
    /* a staged result not yet copied out: C (m rows of n columns, ldc) is the staging buffer's
     * (ld) until the next op (staged_flush); the classifier reading and overwriting all of C
     * reads it from the staging buffer instead and the copy never runs (NULL dst: none) */
    struct { float *dst; size_t ldc, ld; int m, n; } pending;
    size_t shadow_bytes;      /* their storage */
    long shadow_hits;         /* products that read a shadow (device_cuda_shadow_hits) */
    long staged, padded_reads, padded_products; /* products staged; operands read from a padded shadow; products
                                                   run with k or m padded (device_cuda_aligned_counts) */
    long stage_reads;         /* classifier calls that read a staged result (no copy) */
    /* the ranges marked read by products only (device.h products_only; "bf16 shadows" above) */
    struct { const char *lo, *hi; } only[CUDA_SHADOW_MAX];
    int n_only;
    int only_mode;            /* $FT_BF16_SHADOW_ONLY: 0 off, 1 on (default), 2 poison */
    long only_writes;         /* outputs written as shadows alone (device_cuda_only_writes) */
    /* deferred zeroing ("Deferred zeroing" below): the ranges zero() left unwritten */
    struct { char *lo, *hi; } pz[CUDA_PENDING_MAX];
    int n_pz;
    int pz_mode;              /* $FT_CUDA_LAZY_ZERO: 0 off, 1 on (default), 2 poison */
    size_t pz_min;            /* the least zero() deferred; $FT_CUDA_LAZY_ZERO_MIN */
    long pz_claims;           /* ops that wrote a deferred range whole without reading it (device_cuda_zero_claims) */
    /* attention's backward: dQ from dK/dV's dS (attention.cuh ATT_DQ_FROM_DS) in this buffer, made
     * only where CUDA_SHADOW_SPARE bytes stay free (else k_att_bwd_dq); $FT_CUDA_ATT_DQ_DS=0: never */
    int att_dq_ds;
    void *att_ds;
    size_t att_ds_bytes;
    long att_ds_runs;         /* backward calls given the buffer (device_cuda_att_ds_runs) */
    int qkv_heads;            /* rope.cuh qkv_split_launch's heads: QKV_SPLIT_HEADS, 0 with $FT_CUDA_QKV_SPLIT=0 */
} cuda_impl_t;

static cuda_impl_t *impl_of(device_t *d) { return (cuda_impl_t *)d->impl; }
static void staged_flush(device_t *d);

static void fault(device_t *d, const char *what, const char *why) {
    cuda_impl_t *c = impl_of(d);
    if (!c->fault[0]) {
        snprintf(c->fault, sizeof c->fault, "%s: %s: %s", d->name, what, why);
        /* cudaErrorMemoryAllocation's string, or ours: "out of device memory", "... host memory" */
        c->fault_nomem = !strcmp(why, cudaGetErrorString(cudaErrorMemoryAllocation)) || !strncmp(why, "out of ", 7);
    }
    /* a launch that failed may have left a shadow it was to fill: none is trusted now */
    for (int i = 0; i < c->n_shadow; i++) c->shadow[i].valid = 0;
}
static void check_launch(device_t *d, const char *what) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) fault(d, what, cudaGetErrorString(e));
}
static void *work(device_t *d, size_t bytes) {
    cuda_impl_t *c = impl_of(d);
    if (bytes <= c->work_bytes) return c->work;
    /* the old buffer may still be read by queued kernels */
    cudaError_t e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) {
        fault(d, "work buffer: cudaStreamSynchronize", cudaGetErrorString(e));
        return NULL;
    }
    if (c->work) cudaFree(c->work);
    c->work = NULL;
    c->work_bytes = 0;
    if (cudaMalloc(&c->work, bytes) != cudaSuccess) {
        cudaGetLastError();
        fault(d, "work buffer", "out of device memory");
        return NULL;
    }
    c->work_bytes = bytes;
    return c->work;
}
static void *host_rows(device_t *d, size_t bytes) {
    cuda_impl_t *c = impl_of(d);
    if (bytes > c->host_rows_bytes) {
        void *p = realloc(c->host_rows, bytes);
        if (!p) return NULL;
        c->host_rows = (float *)p;
        c->host_rows_bytes = bytes;
    }
    return c->host_rows;
}

#define GRID(n) launch_grid(n), LAUNCH_BLOCK, 0, impl_of(d)->stream
#define FOR_ITEMS(n) for (size_t it = launch_first(blockIdx.x, threadIdx.x); it < (n); it += launch_stride(gridDim.x))

/* ---- deferred zeroing (CUDA_PENDING_MIN above) ---- */
static void pz_set(device_t *d, char *lo, char *hi, int v) {
    if (hi > lo && cudaMemsetAsync(lo, v, (size_t)(hi - lo), impl_of(d)->stream) != cudaSuccess)
        fault(d, "zero", cudaGetErrorString(cudaGetLastError()));
}
/* [lo, hi) leaves the deferred ranges, its zeros written first when `write` */
static void pz_take(device_t *d, const char *lo, const char *hi, int write) {
    cuda_impl_t *c = impl_of(d);
    for (int i = 0; i < c->n_pz; i++) {
        char *a = c->pz[i].lo, *b = c->pz[i].hi;
        if (b <= lo || hi <= a) continue;
        char *x = a > lo ? a : (char *)lo, *y = b < hi ? b : (char *)hi;
        if (write) pz_set(d, x, y, 0);
        if (a < x && y < b) { /* the range keeps a part on each side */
            if (c->n_pz < CUDA_PENDING_MAX) c->pz[c->n_pz].lo = y, c->pz[c->n_pz++].hi = b;
            else pz_set(d, y, b, 0); /* no slot: the part after is zeroed now */
            c->pz[i].hi = x;
        } else if (a < x) {
            c->pz[i].hi = x;
        } else if (y < b) {
            c->pz[i].lo = y;
        } else {
            c->pz[i--] = c->pz[--c->n_pz];
        }
    }
}
static void pz_write_all(device_t *d) {
    cuda_impl_t *c = impl_of(d);
    for (; c->n_pz > 0; c->n_pz--) pz_set(d, c->pz[c->n_pz - 1].lo, c->pz[c->n_pz - 1].hi, 0);
}
/* the allocation [*lo, *hi) holding p; 0 if none */
static int alloc_of(cuda_impl_t *c, const void *p, const char **lo, const char **hi) {
    for (size_t i = 0; i < c->n_allocs; i++) {
        const char *a = (const char *)c->allocs[i].p;
        if ((const char *)p >= a && (const char *)p < a + (c->allocs[i].bytes ? c->allocs[i].bytes : 1)) {
            *lo = a, *hi = a + c->allocs[i].bytes;
            return 1;
        }
    }
    return 0;
}
/* an op's pointer argument: the zeros of every deferred range of its allocation written */
static void pz_touch(device_t *d, const void *p) {
    const char *lo, *hi;
    if (alloc_of(impl_of(d), p, &lo, &hi)) pz_take(d, lo, hi, 1);
}
/* zero(p, bytes) deferred where it may be (1), else 0 (the caller writes the zeros) */
static int pz_defer(device_t *d, void *p, size_t bytes) {
    cuda_impl_t *c = impl_of(d);
    const char *lo = (const char *)p, *hi = lo + bytes, *a, *b;
    if (!c->pz_mode || !bytes || bytes < c->pz_min || !alloc_of(c, p, &a, &b) || hi > b) return 0;
    pz_take(d, lo, hi, 0); /* parts already deferred: one range now */
    if (c->n_pz == CUDA_PENDING_MAX) return 0;
    c->pz[c->n_pz].lo = (char *)lo, c->pz[c->n_pz++].hi = (char *)hi;
    if (c->pz_mode == 2) pz_set(d, (char *)lo, (char *)hi, 0xff);
    return 1;
}
/* 1 when [p, p + bytes) lies in one deferred range: it leaves it unwritten, for a caller that
 * overwrites all of it without reading it; else 0, any deferred part of it zeroed first */
static int pz_claim(device_t *d, const void *p, size_t bytes) {
    cuda_impl_t *c = impl_of(d);
    const char *lo = (const char *)p, *hi = lo + bytes;
    for (int i = 0; i < c->n_pz; i++)
        if (c->pz[i].lo <= lo && hi <= c->pz[i].hi) {
            pz_take(d, lo, hi, 0);
            c->pz_claims++;
            return 1;
        }
    pz_take(d, lo, hi, 1);
    return 0;
}

/* ---- bf16 shadows (cu_shadow_t above) ---- */
/* bytes at p are about to be written: every shadow overlapping them becomes invalid */
static void shadows_out(device_t *d, const void *p, size_t bytes) {
    cuda_impl_t *c = impl_of(d);
    if (!c->n_shadow || !p || !bytes) return;
    const char *lo = (const char *)p, *hi = lo + bytes;
    for (int i = 0; i < c->n_shadow; i++) {
        cu_shadow_t *s = &c->shadow[i];
        if (s->valid && (const char *)s->src < hi && lo < (const char *)(s->src + s->n)) s->valid = 0;
    }
}
/* bytes at p are about to be written (or updated): their deferred zeros written first, the
 * shadows over them invalid */
static void out_bytes(device_t *d, const void *p, size_t bytes) {
    if (impl_of(d)->n_pz && p && bytes) pz_take(d, (const char *)p, (const char *)p + bytes, 1);
    shadows_out(d, p, bytes);
}
/* OUT(p, n): an op writes n elements of p's type at p (NULL skipped); out_rows: rows of D
 * elements, ld apart; out_to_end: from p to the end of its allocation (an op whose extent the
 * device table does not give: the rows a scatter or an embedding backward touch) */
#define OUT(p, n) out_bytes(d, (p), sizeof(*(p)) * (size_t)(n))
static void out_rows(device_t *d, const float *p, size_t ld, size_t rows, size_t D) {
    if (rows && D) out_bytes(d, p, sizeof(float) * ((rows - 1) * ld + D));
}
static void out_to_end(device_t *d, const void *p) {
    cuda_impl_t *c = impl_of(d);
    if ((!c->n_shadow && !c->n_pz) || !p) return;
    for (size_t i = 0; i < c->n_allocs; i++) {
        const char *a = (const char *)c->allocs[i].p;
        if ((const char *)p >= a && (const char *)p < a + (c->allocs[i].bytes ? c->allocs[i].bytes : 1)) {
            out_bytes(d, p, (size_t)(a + c->allocs[i].bytes - (const char *)p));
            return;
        }
    }
    out_bytes(d, p, (size_t)-1 - (uintptr_t)p); /* not an allocation of ours: everything above it */
}
/* The valid shadow holding the matrix view x (rows x cols, column stride ld) -- a compact one, or
 * a padded one of the same width (the view's columns are rows of its tensor) -- at x's element,
 * with its column stride in *lds; NULL if none. *rows_av, *cols_av: the rows and columns the
 * shadow gives the view when zero ones are counted (a padded shadow's padding, written zero by
 * its writer, below the view's last row of a tensor row; a compact shadow's zero tail after a
 * compact view that ends with it), >= rows, cols. */
static const __nv_bfloat16 *shadow_view(device_t *d, const float *x, int rows, int cols, int ld, int *lds, int *rows_av,
                                        int *cols_av) {
    cuda_impl_t *c = impl_of(d);
    const size_t span = (size_t)ld * (cols - 1) + rows;
    *rows_av = rows, *cols_av = cols;
    for (int i = 0; i < c->n_shadow; i++) {
        const cu_shadow_t *s = &c->shadow[i];
        if (!s->valid || x < s->src || x + span > s->src + s->n) continue;
        const size_t off = (size_t)(x - s->src);
        if (!s->ld) {
            *lds = ld;
            if (ld == rows && x + span == s->src + s->n) *cols_av = cols + (int)(s->tail / (size_t)ld);
            return s->data + off;
        }
        if (ld == s->width && (int)(off % (size_t)s->width) + rows <= s->width) {
            *lds = s->ld;
            if ((int)(off % (size_t)s->width) + rows == s->width) *rows_av = rows + s->zpad;
            c->padded_reads++;
            return s->data + (off / (size_t)s->width) * (size_t)s->ld + off % (size_t)s->width;
        }
    }
    return NULL;
}
/* storage for the shadow of x[0 .. n), marked valid (the caller fills it, on the stream, before
 * anything reads it); NULL when the table is full or the GPU would keep less than
 * CUDA_SHADOW_SPARE free */
static __nv_bfloat16 *shadow_take_rows(device_t *d, const float *x, size_t n, int width, int ld, size_t tail);
static __nv_bfloat16 *shadow_take(device_t *d, const float *x, size_t n) { return shadow_take_rows(d, x, n, 0, 0, 0); }
/* the same for a tensor of rows of `width` elements kept at row stride ld (0, 0: in order), or
 * in order with `tail` zero elements after it (zeroed here, on the stream) */
/* x's slot: its own, else a free one, else an invalid one, else a new one; NULL when full */
static cu_shadow_t *shadow_slot(cuda_impl_t *c, const float *x) {
    for (int i = 0; i < c->n_shadow; i++)
        if (c->shadow[i].src == x) return &c->shadow[i];
    for (int i = 0; i < c->n_shadow; i++)
        if (!c->shadow[i].src) return &c->shadow[i];
    for (int i = 0; i < c->n_shadow; i++)
        if (!c->shadow[i].valid) return &c->shadow[i];
    return c->n_shadow < CUDA_SHADOW_MAX ? &c->shadow[c->n_shadow++] : NULL;
}
static __nv_bfloat16 *shadow_take_rows(device_t *d, const float *x, size_t n, int width, int ld, size_t tail) {
    cuda_impl_t *c = impl_of(d);
    const size_t need = ld ? n / (size_t)width * (size_t)ld : n + tail;
    cu_shadow_t *s = shadow_slot(c, x);
    if (!s) return NULL;
    s->valid = 0;
    s->src = x;
    if (s->cap < need) {
        size_t fr = 0, total = 0;
        const size_t bytes = (need * sizeof(__nv_bfloat16) + 255) & ~(size_t)255;
        void *p = NULL;
        if (cudaMemGetInfo(&fr, &total) != cudaSuccess || fr < bytes + CUDA_SHADOW_SPARE ||
            cudaMalloc(&p, bytes) != cudaSuccess) {
            cudaGetLastError(); /* no shadow: the product rounds as without one */
            return NULL;
        }
        if (s->own) {
            /* the old storage may still be read by queued products */
            if (cudaStreamSynchronize(c->stream) != cudaSuccess) fault(d, "bf16 shadow", cudaGetErrorString(cudaGetLastError()));
            cudaFree(s->own);
            c->shadow_bytes -= s->cap * sizeof(__nv_bfloat16);
        }
        s->own = (__nv_bfloat16 *)p;
        s->cap = bytes / sizeof(__nv_bfloat16);
        c->shadow_bytes += bytes;
    }
    s->data = s->own;
    s->n = n;
    s->width = width;
    s->ld = ld;
    s->zpad = ld - width;
    s->tail = ld ? 0 : tail;
    if (s->tail && cudaMemsetAsync(s->data + n, 0, sizeof(__nv_bfloat16) * s->tail, c->stream) != cudaSuccess) {
        cudaGetLastError();
        s->tail = 0;
    }
    s->valid = 1;
    return s->data;
}
/* A shadow of x[0 .. n) kept in memory the caller owns, `data` (the classifier's dlogits over the
 * logits' own buffer: products-only, no fp32 copy written); width, ld as shadow_take_rows (0, 0:
 * compact), zpad: the zero elements its writer puts after each row. The slot keeps its own
 * storage for a later shadow_take. Valid until x is written (OUT), like any other. */
static int shadow_borrow(device_t *d, const float *x, size_t n, int width, int ld, int zpad, __nv_bfloat16 *data) {
    cu_shadow_t *s = shadow_slot(impl_of(d), x);
    if (!s) return -1; /* a full table: the caller writes the fp32 copy */
    s->src = x, s->data = data, s->n = n, s->width = width, s->ld = ld, s->zpad = zpad, s->tail = 0, s->valid = 1;
    return 0;
}
/* the slice of a valid shadow holding x[0 .. n), for an op about to write x that writes the
 * slice in the same pass (the optimizer); every other shadow overlapping x becomes invalid.
 * NULL when none holds it (the caller names x as an output: OUT) */
static __nv_bfloat16 *shadow_slice(device_t *d, const float *x, size_t n) {
    cuda_impl_t *c = impl_of(d);
    int keep = -1;
    for (int i = 0; i < c->n_shadow && keep < 0; i++)
        if (c->shadow[i].valid && !c->shadow[i].ld && x >= c->shadow[i].src && x + n <= c->shadow[i].src + c->shadow[i].n) keep = i;
    if (keep < 0) return NULL;
    const char *lo = (const char *)x, *hi = (const char *)(x + n);
    for (int i = 0; i < c->n_shadow; i++) {
        cu_shadow_t *s = &c->shadow[i];
        if (i != keep && s->valid && (const char *)s->src < hi && lo < (const char *)(s->src + s->n)) s->valid = 0;
    }
    return c->shadow[keep].data + (x - c->shadow[keep].src);
}
/* the buffer p of `bytes` is freed: the shadows inside it go with their storage (the stream is
 * idle: cu_free waited) */
static void shadow_forget(device_t *d, const void *p, size_t bytes) {
    cuda_impl_t *c = impl_of(d);
    const char *lo = (const char *)p, *hi = lo + (bytes ? bytes : 1);
    for (int i = 0; i < c->n_shadow; i++) {
        cu_shadow_t *s = &c->shadow[i];
        if (s->src && (const char *)s->src >= lo && (const char *)s->src < hi) {
            cudaFree(s->own);
            c->shadow_bytes -= s->cap * sizeof(__nv_bfloat16);
            memset(s, 0, sizeof *s);
        }
    }
    while (c->n_shadow > 0 && !c->shadow[c->n_shadow - 1].src) c->n_shadow--;
    for (int i = 0; i < c->n_only; i++) /* the buffer's marks go with it */
        if (c->only[i].lo < hi && lo < c->only[i].hi) c->only[i--] = c->only[--c->n_only];
}
/* The shadow an op writes beside its output out[0 .. n) when that output feeds products only
 * (RMSNorm's, SwiGLU's and its gradients, the classifier's dlogits, q|k|v split for attention
 * and the q|k|v gradient joined) and the products run at bf16; NULL otherwise. Called
 * after OUT(out): the op fills it in the same pass. */
static __nv_bfloat16 *product_output_shadow(device_t *d, const float *out, size_t n) {
    return d->precision == PRECISION_BF16 && out && n ? shadow_take(d, out, n) : NULL;
}
/* Tensors read by products only (device.h products_only). At bf16 the device records the range;
 * an op whose output out[0 .. n) lies in one and gets its shadow (product_output_shadow_only)
 * writes the shadow alone: the kernel gets out = NULL (rows.cuh, elementwise.cuh) and skips the
 * fp32 stores. Where no shadow is taken (fp32, a full table, no memory) it writes fp32 as always;
 * the products read the shadow either way, so the bits are the same. $FT_BF16_SHADOW_ONLY=0
 * turns it off, =poison writes the skipped fp32 copy as NaN (all ones; a reader that is not a
 * product then fails), and FT_BF16_SHADOW_CHECK (which compares shadows with fresh roundings of
 * the fp32 copies) turns it off. */
static void cu_products_only(device_t *d, const void *p, size_t bytes) {
    cuda_impl_t *c = impl_of(d);
    if (d->precision != PRECISION_BF16 || !c->only_mode || c->shadow_check || !p || !bytes) return;
    const char *lo = (const char *)p, *hi = lo + bytes;
    int i = 0;
    while (i < c->n_only && c->only[i].lo != lo) i++;
    if (i < c->n_only) {
        if (hi > c->only[i].hi) c->only[i].hi = hi;
    } else if (c->n_only < CUDA_SHADOW_MAX) {
        c->only[c->n_only].lo = lo, c->only[c->n_only++].hi = hi;
    }
}
/* product_output_shadow, and *out = NULL when the shadow alone is written (out marked, a shadow
 * taken); then only_done after the launch (the poison mode's NaN) */
static __nv_bfloat16 *product_output_shadow_only(device_t *d, float **out, size_t n) {
    cuda_impl_t *c = impl_of(d);
    __nv_bfloat16 *sh = product_output_shadow(d, *out, n);
    if (!sh || !c->n_only || !c->only_mode || c->shadow_check) return sh;
    const char *lo = (const char *)*out, *hi = (const char *)(*out + n);
    for (int i = 0; i < c->n_only; i++)
        if (c->only[i].lo <= lo && hi <= c->only[i].hi) {
            *out = NULL;
            c->only_writes++;
            break;
        }
    return sh;
}
static void only_done(device_t *d, float *skipped, const float *out, size_t n) {
    if (!skipped && impl_of(d)->only_mode == 2 &&
        cudaMemsetAsync((void *)out, 0xff, sizeof(float) * n, impl_of(d)->stream) != cudaSuccess)
        fault(d, "FT_BF16_SHADOW_ONLY=poison", cudaGetErrorString(cudaGetLastError()));
}
/* The same for an output of `rows` rows of `width` elements; *ld: the shadow's row stride --
 * width, or width rounded up to CUDA_PRODUCT_ALIGN when width is not a multiple of 8 (the
 * classifier's dlogits, rows of the vocabulary's size) */
static __nv_bfloat16 *product_output_shadow_rows(device_t *d, const float *out, size_t rows, int width, int *ld) {
    *ld = width;
    if (d->precision != PRECISION_BF16 || !out || !rows || width <= 0) return NULL;
    if (!impl_of(d)->align_products || width % 8 == 0) return shadow_take(d, out, rows * (size_t)width);
    *ld = (width + CUDA_PRODUCT_ALIGN - 1) / CUDA_PRODUCT_ALIGN * CUDA_PRODUCT_ALIGN;
    return shadow_take_rows(d, out, rows * (size_t)width, width, *ld, 0);
}
/* FT_BF16_SHADOW_CHECK: *bad += the elements of the shadow sh of the view x (rows x n / rows,
 * column strides lds and ldx) that are not the rounding of x */
__global__ void k_shadow_check(size_t n, unsigned long long *bad, const __nv_bfloat16 *sh, size_t lds, const float *x,
                               size_t ldx, size_t rows) {
    FOR_ITEMS(n) {
        const size_t r = it % rows, col = it / rows;
        if (__bfloat16_as_ushort(sh[col * lds + r]) != __bfloat16_as_ushort(__float2bfloat16_rn(x[col * ldx + r])))
            atomicAdd(bad, 1ull);
    }
}

/* ---- memory ---- */
static void *cu_alloc(device_t *d, size_t bytes) {
    cuda_impl_t *c = impl_of(d);
    void *p = NULL;
    if (c->n_allocs == c->cap_allocs) {
        size_t cap = c->cap_allocs ? 2 * c->cap_allocs : 16;
        void *a = realloc(c->allocs, cap * sizeof *c->allocs);
        if (!a) return NULL;
        c->allocs = (struct cuda_impl_t::cuda_alloc *)a;
        c->cap_allocs = cap;
    }
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) { cudaGetLastError(); return NULL; }
    /* zeroed on the device's stream, where every later use of the buffer is ordered after it */
    if (cudaMemsetAsync(p, 0, bytes ? bytes : 1, c->stream) != cudaSuccess) { cudaFree(p); cudaGetLastError(); return NULL; }
    c->allocs[c->n_allocs].p = p;
    c->allocs[c->n_allocs++].bytes = bytes;
    d->allocated += bytes;
    return p;
}
static void cu_free(device_t *d, void *p) {
    cuda_impl_t *c = impl_of(d);
    if (!p) return;
    size_t i = c->n_allocs;
    while (i > 0 && c->allocs[i - 1].p != p) i--;
    if (i == 0) {
        fault(d, "free", "not a buffer this device allocated");
        return;
    }
    const size_t bytes = c->allocs[i - 1].bytes;
    d->allocated -= bytes;
    c->allocs[i - 1] = c->allocs[--c->n_allocs];
    cudaError_t e = cudaStreamSynchronize(c->stream); /* queued kernels may still use it */
    shadow_forget(d, p, bytes);
    if (c->n_pz) pz_take(d, (const char *)p, (const char *)p + bytes, 0); /* its deferred zeros go with it */
    if (e == cudaSuccess) e = cudaFree(p);
    if (e != cudaSuccess) fault(d, "free", cudaGetErrorString(e));
}
/* An upload flushes a staged result only when it writes into it: a training step uploads its
 * targets between the logits' product and the classifier (llama.c), which would otherwise cost
 * the copy the classifier saves. */
static void cu_upload(device_t *d, void *dst, const void *src, size_t bytes) {
    cuda_impl_t *c = impl_of(d);
    if (c->pending.dst && bytes) {
        const char *lo = (const char *)c->pending.dst,
                   *hi = lo + sizeof(float) * ((size_t)(c->pending.n - 1) * c->pending.ldc + (size_t)c->pending.m);
        if ((const char *)dst < hi && lo < (const char *)dst + bytes) staged_flush(d);
    }
    out_bytes(d, dst, bytes);
    if (bytes && cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, impl_of(d)->stream) != cudaSuccess)
        fault(d, "upload", cudaGetErrorString(cudaGetLastError()));
}
static void cu_download(device_t *d, void *dst, const void *src, size_t bytes) {
    cuda_impl_t *c = impl_of(d);
    if (!bytes) return;
    if (cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream) != cudaSuccess ||
        cudaStreamSynchronize(c->stream) != cudaSuccess)
        fault(d, "download", cudaGetErrorString(cudaGetLastError()));
}
static void cu_copy(device_t *d, void *dst, const void *src, size_t bytes) {
    out_bytes(d, dst, bytes);
    if (bytes && dst != src &&
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, impl_of(d)->stream) != cudaSuccess)
        fault(d, "copy", cudaGetErrorString(cudaGetLastError()));
}
static void cu_zero(device_t *d, void *p, size_t bytes) {
    shadows_out(d, p, bytes);
    if (!bytes || pz_defer(d, p, bytes)) return;
    if (impl_of(d)->n_pz) pz_take(d, (const char *)p, (const char *)p + bytes, 0); /* zeroed now */
    if (bytes && cudaMemsetAsync(p, 0, bytes, impl_of(d)->stream) != cudaSuccess)
        fault(d, "zero", cudaGetErrorString(cudaGetLastError()));
}
/* Reports the first fault since the last sync once, then forgets it: a caller that handled it
 * (a request refused, a smaller batch tried) goes on with a device that works. A GPU error that
 * leaves the context unusable makes every later call fail anyway, and so every later sync. */
static int cu_sync(device_t *d, char *err, size_t errlen) {
    cuda_impl_t *c = impl_of(d);
    cudaError_t e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) fault(d, "sync", cudaGetErrorString(e));
    if (c->shadow_check && e == cudaSuccess) {
        unsigned long long bad = 0;
        e = cudaMemcpy(&bad, c->shadow_bad, sizeof bad, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess) fault(d, "sync: the shadow check's count", cudaGetErrorString(e));
        else if (bad) {
            char why[96];
            snprintf(why, sizeof why, "%llu elements of bf16 shadows read by products were stale", bad);
            fault(d, "FT_BF16_SHADOW_CHECK", why);
            cudaMemsetAsync(c->shadow_bad, 0, sizeof bad, c->stream);
        }
    }
    if (!c->fault[0]) return 0;
    snprintf(err, errlen, "%s", c->fault);
    c->fault[0] = 0;
    return c->fault_nomem ? DEVICE_ENOMEM : DEVICE_EFAULT;
}
static void cu_set_parallel(device_t *d, int on) { (void)d; (void)on; }

/* ---- products ---- */
/* The operand view (rows x cols, column stride ld) as a compact bf16 matrix (column stride
 * rows): only the view's own elements are read. A strided view ends at ld * (cols - 1) + rows,
 * not at ld * cols: converting ld * cols elements read past the end of a view at the end of its
 * buffer (mixer_mix.c's shifted views into x; found by the emulator, tests/it_emu.sh). Rounds to
 * nearest even, as ops_math.h's rounding: the CPU device's bf16 semantics. it < rows * cols. */
__global__ void g_to_bf16(size_t n, __nv_bfloat16 *out, const float *x, int rows, int ld) {
    FOR_ITEMS(n) out[it] = __float2bfloat16_rn(x[(it / rows) * (size_t)ld + it % rows]);
}

static void gemm_run(device_t *d, gemm_op ta, gemm_op tb, int m, int n, int k, float alpha,
                     const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* The product, timed with events when a benchmark asks (bench/gpu.sh: cuBLAS' share). */
static void cu_gemm(device_t *d, gemm_op ta, gemm_op tb, int m, int n, int k, float alpha,
                    const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    if (!d->profile_gemm) {
        gemm_run(d, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    cudaEvent_t e0 = NULL, e1 = NULL;
    cudaError_t e = cudaEventCreate(&e0);
    if (e == cudaSuccess) e = cudaEventCreate(&e1);
    if (e == cudaSuccess) e = cudaEventRecord(e0, impl_of(d)->stream);
    gemm_run(d, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
    float ms = 0;
    if (e == cudaSuccess) e = cudaEventRecord(e1, impl_of(d)->stream);
    if (e == cudaSuccess) e = cudaEventSynchronize(e1);
    if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, e0, e1);
    if (e == cudaSuccess) d->gemm_seconds += ms * 1e-3;
    else fault(d, "gemm timing (events)", cudaGetErrorString(e));
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
}

/* Storage for the shadow operand_shadow makes of the compact matrix X (rows x cols): its elements
 * in order and, when pad_cols, an odd number of columns (cols % 8) gets zero ones up to a multiple
 * of CUDA_PRODUCT_ALIGN after it. Its caller fills it; a kernel that writes X can fill it in its
 * own pass (attention's output and its gradient) and a product then finds what it would have made. */
static __nv_bfloat16 *operand_shadow_take(device_t *d, const float *X, int rows, int cols, int pad_cols) {
    const int cols_pad = pad_cols && impl_of(d)->align_products && cols % 8 ? (cols + CUDA_PRODUCT_ALIGN - 1) / CUDA_PRODUCT_ALIGN * CUDA_PRODUCT_ALIGN : cols;
    return shadow_take_rows(d, X, (size_t)rows * cols, 0, 0, (size_t)(cols_pad - cols) * rows);
}
/* FT_BF16_SHADOW_CHECK: the shadow sh that a kernel just wrote beside x[0 .. n) compared with a
 * fresh rounding (a product reading it later is checked again, at its read) */
static void shadow_written(device_t *d, const __nv_bfloat16 *sh, const float *x, size_t n) {
    cuda_impl_t *c = impl_of(d);
    if (sh && n && c->shadow_check) k_shadow_check<<<GRID(n)>>>(n, c->shadow_bad, sh, n, x, n, n);
}

/* The bf16 operand view X (rows x cols, column stride ld) as its shadow (column stride ld): a
 * valid one that holds the view, else, for a compact view (ld == rows: a whole tensor or a run
 * of its columns), one made now by rounding it; NULL where neither (a strided view, no memory)
 * -- the product then rounds the view into the work buffer. In checking mode a shadow found is
 * compared with a fresh rounding (k_shadow_check). */
static const __nv_bfloat16 *operand_shadow(device_t *d, const float *X, int rows, int cols, int ld, int pad_cols,
                                           int *lds, int *rows_av, int *cols_av) {
    cuda_impl_t *c = impl_of(d);
    const size_t span = (size_t)ld * (cols - 1) + rows;
    *lds = ld;
    const __nv_bfloat16 *s = shadow_view(d, X, rows, cols, ld, lds, rows_av, cols_av);
    if (s) {
        c->shadow_hits++;
        if (c->shadow_check) {
            const size_t n = (size_t)rows * cols;
            k_shadow_check<<<GRID(n)>>>(n, c->shadow_bad, s, (size_t)*lds, X, (size_t)ld, (size_t)rows);
        }
        return s;
    }
    if (ld != rows) return NULL;
    __nv_bfloat16 *t = operand_shadow_take(d, X, rows, cols, pad_cols);
    if (t) {
        g_to_bf16<<<GRID(span)>>>(span, t, X, rows, rows);
        shadow_view(d, X, rows, cols, ld, lds, rows_av, cols_av); /* the new shadow's zero columns */
    }
    return t;
}

static void gemm_cublas(device_t *d, gemm_op ta, gemm_op tb, int m, int n, int k, float alpha, const float *A,
                        int lda, const float *B, int ldb, float beta, float *C, int ldc, int m_room);
/* *buf (of *have bytes) grown to at least `bytes` where CUDA_SHADOW_SPARE bytes stay free after it,
 * or NULL (and *buf released: the caller runs without it); what: the buffer's name in a fault */
template <class T> static T *spare_buffer(device_t *d, T **buf, size_t *have, size_t bytes, const char *what) {
    cuda_impl_t *c = impl_of(d);
    if (bytes <= *have) return *buf;
    if (*buf) {
        /* the old buffer may still be read by queued kernels */
        if (cudaStreamSynchronize(c->stream) != cudaSuccess) {
            fault(d, what, cudaGetErrorString(cudaGetLastError()));
            return NULL;
        }
        cudaFree(*buf);
        *buf = NULL;
        *have = 0;
    }
    size_t fr = 0, total = 0;
    void *p = NULL;
    if (cudaMemGetInfo(&fr, &total) != cudaSuccess || fr < bytes + CUDA_SHADOW_SPARE || cudaMalloc(&p, bytes) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    *buf = (T *)p;
    *have = bytes;
    return *buf;
}
/* the staging buffer of at least `bytes`, or NULL (the product then runs unstaged) */
static float *stage_buffer(device_t *d, size_t bytes) {
    cuda_impl_t *c = impl_of(d);
    return spare_buffer(d, &c->stage, &c->stage_bytes, bytes, "product staging: cudaStreamSynchronize");
}
/* the dS buffer of at least `bytes` for attention's backward, or NULL (bytes 0, the knob off, or it
 * does not fit: the dQ pass then recomputes dS, as without it) */
static void *att_ds_buffer(device_t *d, size_t bytes) {
    cuda_impl_t *c = impl_of(d);
    if (!bytes || !c->att_dq_ds) return NULL;
    return spare_buffer(d, &c->att_ds, &c->att_ds_bytes, bytes, "attention dS buffer: cudaStreamSynchronize");
}
/* the pending copy of a staged result, launched (every op but the classifier calls this first:
 * FLUSHED in the ops table) */
static void staged_flush(device_t *d) {
    cuda_impl_t *c = impl_of(d);
    if (!c->pending.dst) return;
    copy_rows_launch(c->stream, c->pending.dst, NULL, c->pending.ldc, 0, c->stage, c->pending.ld, 0,
                     (size_t)c->pending.n, c->pending.m);
    c->pending.dst = NULL;
    check_launch(d, "gemm: copying the staged result");
}
/* A bf16 product whose fp32 result C has a leading dimension that is not 16-byte aligned (the
 * logits: ldc = the vocabulary's size) runs into the staging buffer at an aligned leading
 * dimension; its copy into C waits for the next op (pending above): copy_rows, ~2 x C's bytes of
 * traffic (~1.4 ms at config G on an H100), unless that op is the classifier overwriting C with
 * dlogits, which reads the staging buffer. Other products run as they are. */
static void gemm_run(device_t *d, gemm_op ta, gemm_op tb, int m, int n, int k, float alpha,
                     const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    cuda_impl_t *c = impl_of(d);
    staged_flush(d); /* one op may run two staged products (a Linear's dx and dw) */
    if (m <= 0 || n <= 0) return;
    if (c->n_pz) out_rows(d, C, (size_t)ldc, (size_t)n, (size_t)m); /* deferred zeros of C, before it is read */
    float *S = NULL;
    const int lds = (m + CUDA_PRODUCT_ALIGN - 1) / CUDA_PRODUCT_ALIGN * CUDA_PRODUCT_ALIGN;
    if (d->precision == PRECISION_BF16 && c->align_products && k > 0 && (ldc % 4 != 0 || !aligned16(C)) &&
        (double)m * n * k >= c->stage_min)
        S = stage_buffer(d, sizeof(float) * (size_t)lds * n);
    if (!S) {
        gemm_cublas(d, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, m);
        return;
    }
    c->staged++;
    if (beta != 0.0f) copy_rows_launch(c->stream, S, NULL, (size_t)lds, 0, C, (size_t)ldc, 0, (size_t)n, m);
    gemm_cublas(d, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, S, lds, lds);
    out_rows(d, C, (size_t)ldc, (size_t)n, (size_t)m);
    c->pending.dst = C, c->pending.ldc = (size_t)ldc, c->pending.ld = (size_t)lds, c->pending.m = m, c->pending.n = n;
}
/* Padding a product's dimensions with zeros (bf16, both operands from shadows): an odd k (the
 * input gradient through the head: k = V) up to a multiple of CUDA_PRODUCT_ALIGN where both
 * shadows give zero rows/columns that far, an odd m (the logits: m = V) where C has room for it
 * (the staging buffer: m_room rows) and A's shadow zero columns. Aligned leading dimensions
 * alone did not move cuBLAS off its Turing-era kernels for those two products on an H100
 * (bench/NOTES.md): an extent that is not a multiple of 8 does. Zeros add nothing to a sum. */
static int padded_extent(int x, int room_a, int room_b) {
    const int p = (x + CUDA_PRODUCT_ALIGN - 1) / CUDA_PRODUCT_ALIGN * CUDA_PRODUCT_ALIGN;
    return x % 8 && room_a >= p && room_b >= p ? p : x;
}
static void gemm_cublas(device_t *d, gemm_op ta, gemm_op tb, int m, int n, int k, float alpha, const float *A,
                        int lda, const float *B, int ldb, float beta, float *C, int ldc, int m_room) {
    cuda_impl_t *c = impl_of(d);
    out_rows(d, C, (size_t)ldc, (size_t)n, (size_t)m);
    const cublasOperation_t oa = ta == GEMM_T ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t ob = tb == GEMM_T ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasStatus_t st;
    if (d->precision == PRECISION_BF16 && k > 0) {
        /* operands in bf16, fp32 accumulate and result: each operand's shadow (operand_shadow),
         * else rounded into the work buffer along k in chunks whose two operands fit
         * CUDA_BF16_WORK_BYTES (a chunk after the first adds into C: beta 1), so the buffer
         * never grows past what device_cuda_open reserved */
        const int ra = ta == GEMM_N ? m : k, rb = tb == GEMM_N ? k : n;
        int lsa, lsb; /* the shadows' column strides (a padded shadow's differ from lda, ldb) */
        int ra_av, ca_av, rb_av, cb_av; /* rows and columns with the shadows' zeros counted */
        const __nv_bfloat16 *sa = operand_shadow(d, A, ra, ta == GEMM_N ? k : m, lda, 1, &lsa, &ra_av, &ca_av);
        const __nv_bfloat16 *sb = operand_shadow(d, B, rb, tb == GEMM_N ? n : k, ldb, 1, &lsb, &rb_av, &cb_av);
        if (sa && sb && c->align_products) {
            const int k0 = k, m0 = m;
            k = padded_extent(k, ta == GEMM_N ? ca_av : ra_av, tb == GEMM_N ? rb_av : cb_av);
            m = padded_extent(m, ta == GEMM_N ? ra_av : ca_av, m_room);
            if (k != k0 || m != m0) c->padded_products++;
        }
        out_rows(d, C, (size_t)ldc, (size_t)n, (size_t)m); /* again: a shadow just made of A or B may overlap C */
        size_t kc = sa && sb ? (size_t)k : CUDA_BF16_WORK_BYTES / (sizeof(__nv_bfloat16) * ((size_t)(sa ? 0 : m) + (sb ? 0 : n)));
        if (kc < 1) kc = 1;
        for (int k0 = 0; k0 < k; k0 += (int)kc) {
            const int kn = k - k0 < (int)kc ? k - k0 : (int)kc;
            /* the chunk's views: op(A) columns k0.., op(B) rows k0.. (offsets into a shadow are
             * the same: it keeps the operand's column stride) */
            const size_t oA = ta == GEMM_N ? (size_t)k0 * lda : (size_t)k0, oB = tb == GEMM_N ? (size_t)k0 : (size_t)k0 * ldb;
            const size_t oAs = ta == GEMM_N ? (size_t)k0 * lsa : (size_t)k0, oBs = tb == GEMM_N ? (size_t)k0 : (size_t)k0 * lsb;
            const int rac = ta == GEMM_N ? ra : kn, cac = ta == GEMM_N ? kn : m;
            const int rbc = tb == GEMM_N ? kn : rb, cbc = tb == GEMM_N ? n : kn;
            const size_t na = sa ? 0 : (size_t)rac * cac, nb = sb ? 0 : (size_t)rbc * cbc;
            __nv_bfloat16 *w = NULL;
            if (na + nb) {
                w = (__nv_bfloat16 *)work(d, sizeof(__nv_bfloat16) * (na + nb));
                if (!w) return;
            }
            if (na) g_to_bf16<<<GRID(na)>>>(na, w, A + oA, rac, lda);
            if (nb) g_to_bf16<<<GRID(nb)>>>(nb, w + na, B + oB, rbc, ldb);
            check_launch(d, "gemm bf16 operands");
            const float b = k0 == 0 ? beta : 1.0f;
            st = cublasGemmEx(c->blas, oa, ob, m, n, kn, &alpha, sa ? (const void *)(sa + oAs) : (const void *)w, CUDA_R_16BF,
                              sa ? lsa : rac, sb ? (const void *)(sb + oBs) : (const void *)(w + na), CUDA_R_16BF,
                              sb ? lsb : rbc, &b, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
            if (st != CUBLAS_STATUS_SUCCESS) break;
        }
    } else if (d->precision == PRECISION_TF32) {
        st = cublasGemmEx(c->blas, oa, ob, m, n, k, &alpha, A, CUDA_R_32F, lda, B, CUDA_R_32F, ldb,
                          &beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT);
    } else {
        st = cublasSgemm(c->blas, oa, ob, m, n, k, &alpha, A, lda, B, ldb, &beta, C, ldc);
    }
    if (st != CUBLAS_STATUS_SUCCESS) {
        char why[64];
        snprintf(why, sizeof why, "cuBLAS status %d", (int)st);
        fault(d, "gemm", why);
    }
}

/* The bias-free Linear through the product (the mapping table of gemm.h). */
static void cu_linear_forward(device_t *d, float *y, const float *x, const float *w, int N, int in, int out) {
    cu_gemm(d, GEMM_T, GEMM_N, out, N, in, 1.0f, w, in, x, in, 0.0f, y, out);
}
static void linear_bwd(device_t *d, float *dx, float *dw, const float *dy, const float *x, const float *w,
                       int N, int in, int out, float beta_dx) {
    if (dx) cu_gemm(d, GEMM_N, GEMM_N, in, N, out, 1.0f, w, in, dy, out, beta_dx, dx, in);
    /* dw += the product, or = it where dw's zeros are deferred (pz_claim): C not read */
    if (dw) {
        const float beta = pz_claim(d, dw, sizeof(float) * (size_t)in * (size_t)out) ? 0.0f : 1.0f;
        cu_gemm(d, GEMM_N, GEMM_T, in, out, N, 1.0f, x, in, dy, out, beta, dw, in);
    }
}
static void cu_linear_backward(device_t *d, float *dx, float *dw, const float *dy, const float *x,
                               const float *w, int N, int in, int out) {
    linear_bwd(d, dx, dw, dy, x, w, N, in, out, 1.0f);
}
static void cu_linear_backward_set(device_t *d, float *dx, float *dw, const float *dy, const float *x,
                                   const float *w, int N, int in, int out) {
    linear_bwd(d, dx, dw, dy, x, w, N, in, out, 0.0f);
}

/* ---- kernels: a grid-stride loop over a body's items ---- */
__global__ void g_embedding_fwd(size_t n, float *out, const uint32_t *tok, const float *table, int D) { FOR_ITEMS(n) kb_embedding_fwd(it, out, tok, table, D); }
/* Embedding backward without float atomics, in the CPU device's order: stage 1 links each row
 * n to the next row of the same token (next[n], N where none) and marks each token's first row
 * (head[n]), comparing every pair of rows (N^2 integer compares, through shared-memory tiles of
 * the tokens); stage 2 gives each row a block, and a head's block walks its chain in row
 * order, table[t][c] = ((table[t][c] + dout[n0][c]) + dout[n1][c]) + ... -- the order of
 * ops_embedding.c, so both devices give the same bits. Lanes run over columns (coalesced).
 * Stage 1's block takes EMB_ROWS rows (a lane each) and splits the other rows between its
 * EMB_WARPS warps, whose answers it then combines (the least next row; a head when no warp saw
 * an earlier row): N / 32 blocks of 1024 threads, each thread N / 32 compares. (It was a block
 * of 256 rows, each thread comparing its row with all N: N / 256 blocks, 32 of them at config
 * G on 132 SMs, 0.36 ms predicted and ~0.2 measured on an H100, for ~10 us of compares.) */
#define EMB_ROWS WARP
#define EMB_WARPS 32
__global__ void __launch_bounds__(EMB_WARPS * WARP) k_emb_link(uint32_t *next, uint32_t *head, const uint32_t *tok, int N) {
    __shared__ uint32_t t[EMB_WARPS * WARP];
    __shared__ int nxs[EMB_WARPS][WARP + 1], firsts[EMB_WARPS][WARP + 1];
    const int lane = threadIdx.x % WARP, w = threadIdx.x / WARP;
    const int n = blockIdx.x * EMB_ROWS + lane;
    const uint32_t mine = n < N ? tok[n] : 0;
    int nx = N, first = 1;
    for (int m0 = 0; m0 < N; m0 += EMB_WARPS * WARP) {
        __syncthreads();
        if (m0 + (int)threadIdx.x < N) t[threadIdx.x] = tok[m0 + threadIdx.x];
        __syncthreads();
        const int b = m0 + w * WARP, lim = N - b < WARP ? N - b : WARP;
        for (int i = 0; i < lim; i++)
            if (t[w * WARP + i] == mine) {
                const int m = b + i;
                if (m < n) first = 0;
                else if (m > n && m < nx) nx = m;
            }
    }
    nxs[w][lane] = nx;
    firsts[w][lane] = first;
    __syncthreads();
    if (w == 0 && n < N) {
        for (int v = 1; v < EMB_WARPS; v++) {
            nx = nxs[v][lane] < nx ? nxs[v][lane] : nx;
            first &= firsts[v][lane];
        }
        next[n] = (uint32_t)nx;
        head[n] = (uint32_t)first;
    }
}
__global__ void k_emb_accumulate(float *dt, const float *dout, const uint32_t *tok, const uint32_t *next,
                                 const uint32_t *head, int N, int D) {
    const int n = blockIdx.x;
    if (!head[n]) return;
    float *row = dt + (size_t)tok[n] * D;
    for (int c = threadIdx.x; c < D; c += blockDim.x) {
        float s = row[c];
        for (int m = n; m < N; m = (int)next[m]) s += dout[(size_t)m * D + c];
        row[c] = s;
    }
}
__global__ void g_att_fwd(size_t n, float *out, float *lse, const float *q, const float *k, const float *v, int Tq, int Tk, int H, int Hkv, int hd, int causal, int window) { FOR_ITEMS(n) kb_att_fwd(it, out, lse, q, k, v, Tq, Tk, H, Hkv, hd, causal, window); }
__global__ void g_att_rowdot(size_t n, float *Drow, const float *dout, const float *out, int Tq, int H, int hd) { FOR_ITEMS(n) kb_att_bwd_rowdot(it, Drow, dout, out, Tq, H, hd); }
__global__ void g_att_dq(size_t n, float *dq, const float *q, const float *k, const float *v, const float *dout, const float *lse, const float *Drow, int Tq, int Tk, int H, int Hkv, int hd, int causal, int window) { FOR_ITEMS(n) kb_att_bwd_dq(it, dq, q, k, v, dout, lse, Drow, Tq, Tk, H, Hkv, hd, causal, window); }
__global__ void g_att_dkv(size_t n, float *dk, float *dv, const float *q, const float *k, const float *v, const float *dout, const float *lse, const float *Drow, int Tq, int Tk, int H, int Hkv, int hd, int causal, int window) { FOR_ITEMS(n) kb_att_bwd_dkv(it, dk, dv, q, k, v, dout, lse, Drow, Tq, Tk, H, Hkv, hd, causal, window); }
__global__ void g_linear_rows(size_t n, float *y, const float *x, const float *w, int in, int out) { FOR_ITEMS(n) kb_linear_rows(it, y, x, w, in, out); }
__global__ void g_attention_rows(size_t n, float *out, const float *q, const float *kc, const float *vc, const int *base, const int *len, int H, int Hkv, int hd) { FOR_ITEMS(n) kb_attention_rows(it, out, q, kc, vc, base, len, H, Hkv, hd); }
__global__ void g_scatter_rows(size_t n, float *dst, int ldd, const int *idx, const float *src, int lds, int D) { FOR_ITEMS(n) kb_scatter_rows(it, dst, ldd, idx, src, lds, D); }
__global__ void g_repeat_rows(size_t n, float *out, const float *row, int D) { FOR_ITEMS(n) kb_repeat_rows(it, out, row, D); }
__global__ void g_uniform(size_t n, float *u, uint64_t key, uint64_t c0) { FOR_ITEMS(n) kb_uniform(it, u, key, c0); }
__global__ void g_binmap_fwd(size_t n, uint32_t *idx, float *prob, const float *lg, const float *u, int H) { FOR_ITEMS(n) kb_binmap_fwd(it, idx, prob, lg, u, H); }
__global__ void g_binmap_kl(size_t n, float *kl, const float *lg, int H) { FOR_ITEMS(n) kb_binmap_kl(it, kl, lg, H); }
__global__ void g_free_bits_bwd(size_t n, float *dl, const float *lg, const float *kl, const uint8_t *mask, int H, float kappa, float scale) { FOR_ITEMS(n) kb_free_bits_bwd(it, dl, lg, kl, mask, H, kappa, scale); }
__global__ void g_post_fwd(size_t n, float *r, const float *w, const uint32_t *idx, int D, int H) { FOR_ITEMS(n) kb_post_fwd(it, r, w, idx, D, H); }
__global__ void g_post_bwd_dw(size_t n, float *dw, const float *dr, const uint32_t *idx, int N, int D, int H) { FOR_ITEMS(n) kb_post_bwd_dw(it, dw, dr, idx, N, D, H); }
__global__ void g_binmap_bwd(size_t n, float *dl, float *dz, const float *prob, int H) { FOR_ITEMS(n) kb_binmap_bwd(it, dl, dz, prob, H); }
__global__ void g_mixer_tril(size_t n, float *out, const float *w, int T, int acc) { FOR_ITEMS(n) kb_mixer_tril(it, out, w, T, acc); }
__global__ void g_mixer_bias_fwd(size_t n, float *y, const float *bias, int T, int D, int h, int Tb) { FOR_ITEMS(n) kb_mixer_bias_fwd(it, y, bias, T, D, h, Tb); }
__global__ void g_mixer_bias_bwd(size_t n, float *db, const float *dy, int B, int T, int D, int h, int Tb) { FOR_ITEMS(n) kb_mixer_bias_bwd(it, db, dy, B, T, D, h, Tb); }
__global__ void g_unroll_fwd(size_t n, float *out, const float *e, int T, int D, int nd) { FOR_ITEMS(n) kb_unroll_fwd(it, out, e, T, D, nd); }
__global__ void g_unroll_bwd(size_t n, float *de, const float *dout, int T, int D, int nd) { FOR_ITEMS(n) kb_unroll_bwd(it, de, dout, T, D, nd); }
__global__ void g_embed_code_fwd(size_t n, float *y, const float *x, const float *u, float range, int qbits, int nbits) { FOR_ITEMS(n) kb_embed_code_fwd(it, y, x, u, range, qbits, nbits); }
__global__ void g_embed_code_bwd(size_t n, float *dx, const float *dy, const float *x, float range) { FOR_ITEMS(n) kb_embed_code_bwd(it, dx, dy, x, range); }
__global__ void g_latent_normal(size_t n, float *x, int B, int len, uint64_t key, uint64_t row0, float mean, float std) { FOR_ITEMS(n) kb_latent_normal(it, x, B, len, key, row0, mean, std); }
__global__ void g_latent_sample(size_t n, float *z, const float *mu, const float *ls, const float *eps) { FOR_ITEMS(n) kb_latent_sample(it, z, mu, ls, eps); }
__global__ void g_latent_kl(size_t n, float *kl, const float *mu, const float *ls, int L, int B, int len) { FOR_ITEMS(n) kb_latent_kl(it, kl, mu, ls, L, B, len); }
__global__ void g_latent_bwd(size_t n, float *dmu, float *dls, const float *dz, const float *mu, const float *ls, const float *eps, float kl_scale) { FOR_ITEMS(n) kb_latent_bwd(it, dmu, dls, dz, mu, ls, eps, kl_scale); }

/* ---- the ops ---- */
#define LAUNCHED(what) check_launch(d, what)

static void cu_embedding_forward(device_t *d, float *out, const uint32_t *tok, const float *table, int N, int D) {
    size_t n = (size_t)N * D;
    OUT(out, n);
    g_embedding_fwd<<<GRID(n)>>>(n, out, tok, table, D);
    LAUNCHED("embedding_forward");
}
static void cu_embedding_backward(device_t *d, float *dt, const float *dout, const uint32_t *tok, int N, int D) {
    if (N <= 0 || D <= 0) return;
    out_to_end(d, dt); /* the tokens' rows */
    uint32_t *next = (uint32_t *)work(d, sizeof(uint32_t) * 2 * (size_t)N);
    if (!next) return;
    cudaStream_t s = impl_of(d)->stream;
    LAUNCH(k_emb_link, (unsigned)((N + EMB_ROWS - 1) / EMB_ROWS), EMB_WARPS * WARP, 0, s)(next, next + N, tok, N);
    LAUNCH(k_emb_accumulate, (unsigned)N, D < 256 ? (D + WARP - 1) / WARP * WARP : 256, 0, s)
    (dt, dout, tok, next, next + N, N, D);
    LAUNCHED("embedding_backward");
}
static void cu_rmsnorm_forward(device_t *d, float *out, float *rstd, const float *x, const float *w, int N, int D, float eps) {
    OUT(out, (size_t)N * D);
    OUT(rstd, N);
    float *o = out;
    __nv_bfloat16 *o16 = product_output_shadow_only(d, &o, (size_t)N * D);
    rmsnorm_forward_launch(impl_of(d)->stream, o, o16, rstd, NULL, x, NULL, w, N, D, eps);
    LAUNCHED("rmsnorm_forward");
    only_done(d, o, out, (size_t)N * D);
}
/* the residual add and the norm in one pass: y = a + b is the stream (read again by the next
 * residual add and the norm's backward, so fp32 and no shadow); out feeds products only */
static void cu_add_rmsnorm_forward(device_t *d, float *y, float *out, float *rstd, const float *a, const float *b,
                                   const float *w, int N, int D, float eps) {
    OUT(y, (size_t)N * D);
    OUT(out, (size_t)N * D);
    OUT(rstd, N);
    float *o = out;
    __nv_bfloat16 *o16 = product_output_shadow_only(d, &o, (size_t)N * D);
    rmsnorm_forward_launch(impl_of(d)->stream, o, o16, rstd, y, a, b, w, N, D, eps);
    LAUNCHED("add_rmsnorm_forward");
    only_done(d, o, out, (size_t)N * D);
}
static void cu_rmsnorm_backward_res(device_t *d, float *dx, float *dw, const float *dout, const float *x, const float *w,
                                    const float *rstd, const float *res, int N, int D) {
    /* dw += the rows' sum, or = it where dw's zeros are deferred (pz_claim; the sums start at
     * +0, so 0 + t is t: the same bits) */
    const int dw_acc = !(dw && impl_of(d)->n_pz && N > 0 && D > 0 && pz_claim(d, dw, sizeof(float) * (size_t)D));
    OUT(dx, (size_t)N * D);
    OUT(dw, D);
    float *part = dw ? (float *)work(d, sizeof(float) * colred_work_floats(N, D)) : NULL;
    if (dw && !part) return;
    /* dx, the residual stream's gradient, feeds the next products (a Linear's dy) before anything
     * adds to it again: its shadow is written in the same pass */
    rmsnorm_backward_launch(impl_of(d)->stream, dx, product_output_shadow(d, dx, (size_t)N * D), dw, part,
                            impl_of(d)->colred_tickets, dout, x, w, rstd, res, N, D, dw_acc);
    LAUNCHED("rmsnorm_backward");
}
static void cu_rmsnorm_backward(device_t *d, float *dx, float *dw, const float *dout, const float *x, const float *w, const float *rstd, int N, int D) {
    cu_rmsnorm_backward_res(d, dx, dw, dout, x, w, rstd, NULL, N, D);
}
static void cu_rope_forward(device_t *d, float *out, const float *x, const float *cs, const float *sn, int B, int T, int H, int hd, int pos0) {
    const size_t ld = (size_t)H * hd;
    OUT(out, (size_t)B * T * ld);
    rope_launch(impl_of(d)->stream, out, NULL, ld, 0, x, ld, 0, cs, sn, (size_t)B * T, H, hd, T, pos0, NULL, 1.0f, 0);
    LAUNCHED("rope_forward");
}
static void cu_rope_backward(device_t *d, float *dx, const float *dout, const float *cs, const float *sn, int B, int T, int H, int hd, int pos0) {
    const size_t ld = (size_t)H * hd;
    OUT(dx, (size_t)B * T * ld);
    rope_launch(impl_of(d)->stream, dx, NULL, ld, 0, dout, ld, 0, cs, sn, (size_t)B * T, H, hd, T, pos0, NULL, -1.0f, 1);
    LAUNCHED("rope_backward");
}
static void cu_qkv_split_rope(device_t *d, float *q, float *k, float *v, const float *qkv, const float *cs, const float *sn, int N, int T, int H, int Hkv, int hd, int pos0) {
    OUT(q, (size_t)N * H * hd);
    OUT(k, (size_t)N * Hkv * hd);
    OUT(v, (size_t)N * Hkv * hd);
    /* q, k, v feed attention only: their bf16 shadows written in the same pass (attention_shadows).
     * Marked products_only (the family's hint: attention's products are their only readers), the
     * shadows alone are written where the attention kernels read nothing else: the tiled bf16
     * engine with 16-byte rows of shadow (hd % 8 == 0, hd <= ATT_MAX_HD, aligned shadows) */
    const size_t nq = (size_t)N * H * hd, nkv = (size_t)N * Hkv * hd;
    __nv_bfloat16 *q16, *k16, *v16;
    float *q1 = q, *k1 = k, *v1 = v;
    if (hd % 8 == 0 && hd <= ATT_MAX_HD) {
        q16 = q ? product_output_shadow_only(d, &q1, nq) : NULL;
        k16 = k ? product_output_shadow_only(d, &k1, nkv) : NULL;
        v16 = v ? product_output_shadow_only(d, &v1, nkv) : NULL;
        if (!aligned16(q16) || !aligned16(k16) || !aligned16(v16)) q1 = q, k1 = k, v1 = v; /* fp32 as well */
    } else {
        q16 = product_output_shadow(d, q, nq), k16 = product_output_shadow(d, k, nkv), v16 = product_output_shadow(d, v, nkv);
    }
    qkv_split_launch(impl_of(d)->stream, q1, k1, v1, q16, k16, v16, qkv, cs, sn, N, T, H, Hkv, hd, pos0, NULL,
                     impl_of(d)->qkv_heads);
    if (q) only_done(d, q1, q, nq);
    if (k) only_done(d, k1, k, nkv);
    if (v) only_done(d, v1, v, nkv);
    LAUNCHED("qkv_split_rope");
}
static void cu_qkv_join_unrope(device_t *d, float *dqkv, const float *dq, const float *dk, const float *dv, const float *cs, const float *sn, int N, int T, int H, int Hkv, int hd, int pos0) {
    const size_t n = (size_t)N * (H + 2 * Hkv) * hd;
    OUT(dqkv, n);
    /* dqkv feeds the q|k|v projection's backward products: marked products-only, its shadow alone */
    float *o32 = dqkv;
    __nv_bfloat16 *d16 = product_output_shadow_only(d, &o32, n);
    qkv_join_launch(impl_of(d)->stream, o32, d16, dq, dk, dv, cs, sn, N, T, H, Hkv, hd, pos0);
    only_done(d, o32, dqkv, n);
    LAUNCHED("qkv_join_unrope");
}
static int att_head_dim_ok(device_t *d, int hd) {
    if (hd <= KB_MAX_HEAD_DIM) return 1;
    char why[96];
    snprintf(why, sizeof why, "head dimension %d exceeds the kernels' %d", hd, KB_MAX_HEAD_DIM);
    fault(d, "attention", why);
    return 0;
}
/* The bf16 kernels' inputs as bf16 shadows (operand_shadow: found, or rounded once now and kept
 * for the backward), which their tiles are staged from; none at other precisions. nq, nkv: the
 * elements of q (and dout) and of k, v. */
static att_bf16_t attention_shadows(device_t *d, const float *q, const float *k, const float *v, const float *dout,
                                    size_t nq, size_t nkv) {
    att_bf16_t c = {NULL, NULL, NULL, NULL};
    if (d->precision != PRECISION_BF16 || !nq || !nkv || nq > INT_MAX || nkv > INT_MAX) return c;
    int ld, r, cl; /* single columns: a shadow of any layout gives them compact */
    c.q = operand_shadow(d, q, (int)nq, 1, (int)nq, 0, &ld, &r, &cl);
    c.k = operand_shadow(d, k, (int)nkv, 1, (int)nkv, 0, &ld, &r, &cl);
    c.v = operand_shadow(d, v, (int)nkv, 1, (int)nkv, 0, &ld, &r, &cl);
    if (dout) c.dout = operand_shadow(d, dout, (int)nq, 1, (int)nq, 0, &ld, &r, &cl);
    check_launch(d, "attention bf16 operands");
    return c;
}
/* The shadows attention's kernels write beside tensors they write or read in fp32, where a
 * product (or the backward's tiles) would otherwise round them in a g_to_bf16 pass of their own:
 * the forward's out (B Tq rows of H hd; the output projection's operand, rows x cols = H hd x
 * B Tq, in its forward and its weight gradient: the geometry its operand_shadow would make) and
 * the backward's dout (written by k_att_rowdot, which reads it anyway; attention_shadows' single
 * column). Taken as operand_shadow takes them; the kernel stores the rounding of the values in
 * fp32 (the bits g_to_bf16 gives), so the products multiply what they multiplied before. out
 * stays in fp32 as well: k_att_rowdot reads it. NULL at other precisions, where no memory is
 * left for one (the readers round as before), and for dout when a valid shadow of it exists. */
static __nv_bfloat16 *attention_out_shadow(device_t *d, const float *out, size_t rows, size_t width) {
    if (d->precision != PRECISION_BF16 || !rows || !width || rows > INT_MAX || width > INT_MAX ||
        rows * width > INT_MAX)
        return NULL;
    return operand_shadow_take(d, out, (int)width, (int)rows, 1);
}
static __nv_bfloat16 *attention_dout_shadow(device_t *d, const float *dout, size_t n) {
    if (d->precision != PRECISION_BF16 || !n || n > INT_MAX) return NULL;
    int ld, r, cl;
    if (shadow_view(d, dout, (int)n, 1, (int)n, &ld, &r, &cl)) return NULL;
    return operand_shadow_take(d, dout, (int)n, 1, 0);
}
/* The tiled backward's inputs beyond its arguments, for both of its entry points: the dS buffer
 * (*ds; NULL: the dQ pass recomputes dS), dout's shadow for k_att_rowdot to write (*dout16; NULL
 * where one is valid already or none is taken) and the bf16 operands, dout's being that shadow. */
static att_bf16_t attention_backward_inputs(device_t *d, const float *q, const float *k, const float *v, const float *dout,
                                            int B, int Tq, int Tk, int H, int Hkv, int hd, int causal, int window,
                                            __nv_bfloat16 **dout16, void **ds) {
    *ds = att_ds_buffer(d, attention_ds_bytes(d->precision == PRECISION_BF16, B, Tq, Tk, H, hd, causal, window));
    impl_of(d)->att_ds_runs += *ds != NULL;
    const size_t nq = (size_t)B * Tq * H * hd;
    *dout16 = attention_dout_shadow(d, dout, nq);
    att_bf16_t c16 = attention_shadows(d, q, k, v, *dout16 ? NULL : dout, nq, (size_t)B * Tk * Hkv * hd);
    if (*dout16) c16.dout = *dout16;
    return c16;
}
/* Head dimensions up to ATT_MAX_HD run the tiled kernels (attention.cuh), larger ones (up to
 * KB_MAX_HEAD_DIM) kernels.h's per-row bodies. */
static void cu_attention_window_forward(device_t *d, float *out, float *lse, const float *q, const float *k, const float *v, int B, int Tq, int Tk, int H, int Hkv, int hd, int causal, int window) {
    if (!att_head_dim_ok(d, hd)) return;
    OUT(out, (size_t)B * Tq * H * hd);
    OUT(lse, (size_t)B * H * Tq);
    if (hd > ATT_MAX_HD) {
        const size_t n = (size_t)B * H * Tq;
        g_att_fwd<<<GRID(n)>>>(n, out, lse, q, k, v, Tq, Tk, H, Hkv, hd, causal, window);
    } else {
        const att_bf16_t c16 = attention_shadows(d, q, k, v, NULL, (size_t)B * Tq * H * hd, (size_t)B * Tk * Hkv * hd);
        __nv_bfloat16 *out16 = attention_out_shadow(d, out, (size_t)B * Tq, (size_t)H * hd);
        cudaError_t e = attention_forward_launch(impl_of(d)->stream, d->precision == PRECISION_BF16, out, out16, lse, q, k, v, B, Tq, Tk, H, Hkv, hd, causal, window, c16);
        if (e != cudaSuccess) fault(d, "attention_forward", cudaGetErrorString(e));
        shadow_written(d, out16, out, (size_t)B * Tq * H * hd);
    }
    LAUNCHED("attention_forward");
}
static void cu_attention_window_backward(device_t *d, float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse, const float *q, const float *k, const float *v, int B, int Tq, int Tk, int H, int Hkv, int hd, int causal, int window) {
    if (!att_head_dim_ok(d, hd)) return;
    OUT(dq, (size_t)B * Tq * H * hd);
    OUT(dk, (size_t)B * Tk * Hkv * hd);
    OUT(dv, (size_t)B * Tk * Hkv * hd);
    size_t nq = (size_t)B * H * Tq, nk = (size_t)B * Hkv * Tk;
    float *Drow = (float *)work(d, sizeof(float) * nq);
    if (!Drow) return;
    if (hd > ATT_MAX_HD) {
        g_att_rowdot<<<GRID(nq)>>>(nq, Drow, dout, out, Tq, H, hd);
        g_att_dq<<<GRID(nq)>>>(nq, dq, q, k, v, dout, lse, Drow, Tq, Tk, H, Hkv, hd, causal, window);
        g_att_dkv<<<GRID(nk)>>>(nk, dk, dv, q, k, v, dout, lse, Drow, Tq, Tk, H, Hkv, hd, causal, window);
    } else {
        const int bf = d->precision == PRECISION_BF16;
        const size_t n = (size_t)B * Tq * H * hd;
        void *ds;
        __nv_bfloat16 *dout16;
        const att_bf16_t c16 = attention_backward_inputs(d, q, k, v, dout, B, Tq, Tk, H, Hkv, hd, causal, window, &dout16, &ds);
        cudaError_t e = attention_backward_launch(impl_of(d)->stream, bf, dq, dk, dv, Drow, dout16, dout, out, lse, q, k, v, B, Tq, Tk, H, Hkv, hd, causal, window, c16, att_join_t{}, ds);
        if (e != cudaSuccess) fault(d, "attention_backward", cudaGetErrorString(e));
        shadow_written(d, dout16, dout, n);
    }
    LAUNCHED("attention_backward");
}
/* device.h attention_backward_qkv: the tiled kernels store dq, dk rotated back and dv straight
 * into the fused rows (and their bf16 shadow), every row written: no zeroing of dq, dk, dv and no
 * join pass (attention.cuh att_join_t). Where they cannot (hd not 16, 32, 64 or 128: the
 * padded kernels' partner column is not in the lane; unaligned rows; hd > ATT_MAX_HD) the
 * three ops run through the scratch dq, dk, dv as the CPU device runs them. */
static void cu_attention_backward_qkv(device_t *d, float *dqkv, float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse, const float *q, const float *k, const float *v, const float *cs, const float *sn, int B, int T, int H, int Hkv, int hd, int causal, int window, int pos0) {
    if (!att_head_dim_ok(d, hd)) return;
    const size_t N = (size_t)B * T, ld = (size_t)(H + 2 * Hkv) * hd;
    att_join_t jo = {dqkv, NULL, cs, sn, ld, H * hd, Hkv * hd, pos0, 0};
    if (hd <= ATT_MAX_HD && attention_join_ok(jo, hd)) {
        OUT(dqkv, N * ld);
        /* the shadow alone where dqkv is marked products-only (the q|k|v projection's backward
         * products its only readers: device.h products_only) */
        float *o32 = dqkv;
        jo.out16 = product_output_shadow_only(d, &o32, N * ld);
        jo.only16 = !o32;
        const size_t nq = (size_t)B * H * T;
        float *Drow = (float *)work(d, sizeof(float) * nq);
        if (!Drow) return;
        if (attention_join_ok(jo, hd)) {
            const int bf = d->precision == PRECISION_BF16;
            void *ds;
            __nv_bfloat16 *dout16;
            const att_bf16_t c16 = attention_backward_inputs(d, q, k, v, dout, B, T, T, H, Hkv, hd, causal, window, &dout16, &ds);
            cudaError_t e = attention_backward_launch(impl_of(d)->stream, bf, NULL, NULL, NULL, Drow, dout16, dout, out, lse, q, k, v, B, T, T, H, Hkv, hd, causal, window, c16, jo, ds);
            if (e != cudaSuccess) fault(d, "attention_backward_qkv", cudaGetErrorString(e));
            shadow_written(d, dout16, dout, N * H * hd);
            only_done(d, o32, dqkv, N * ld);
            LAUNCHED("attention_backward_qkv");
            return;
        }
    }
    cu_zero(d, dq, sizeof(float) * N * H * hd);
    cu_zero(d, dk, sizeof(float) * N * Hkv * hd);
    cu_zero(d, dv, sizeof(float) * N * Hkv * hd);
    cu_attention_window_backward(d, dq, dk, dv, dout, out, lse, q, k, v, B, T, T, H, Hkv, hd, causal, window);
    cu_qkv_join_unrope(d, dqkv, dq, dk, dv, cs, sn, (int)N, T, H, Hkv, hd, pos0);
}
static void cu_attention_forward(device_t *d, float *out, float *lse, const float *q, const float *k, const float *v, int B, int Tq, int Tk, int H, int Hkv, int hd, int causal) {
    cu_attention_window_forward(d, out, lse, q, k, v, B, Tq, Tk, H, Hkv, hd, causal, 0);
}
static void cu_attention_backward(device_t *d, float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse, const float *q, const float *k, const float *v, int B, int Tq, int Tk, int H, int Hkv, int hd, int causal) {
    cu_attention_window_backward(d, dq, dk, dv, dout, out, lse, q, k, v, B, Tq, Tk, H, Hkv, hd, causal, 0);
}
static void cu_swiglu_forward(device_t *d, float *out, const float *gate, const float *up, int N, int F) {
    OUT(out, (size_t)N * F);
    float *o = out;
    __nv_bfloat16 *o16 = out != gate && out != up ? product_output_shadow_only(d, &o, (size_t)N * F)
                                                  : product_output_shadow(d, out, (size_t)N * F);
    swiglu_forward_launch(impl_of(d)->stream, o, o16, gate, up, (size_t)N * F);
    LAUNCHED("swiglu_forward");
    only_done(d, o, out, (size_t)N * F);
}
static void swiglu_bwd(device_t *d, float *dg, float *du, const float *dout, const float *gate, const float *up, int N, int F, int acc) {
    OUT(dg, (size_t)N * F);
    OUT(du, (size_t)N * F);
    float *g = dg, *u = du;
    __nv_bfloat16 *g16 = acc ? product_output_shadow(d, dg, (size_t)N * F) : product_output_shadow_only(d, &g, (size_t)N * F);
    __nv_bfloat16 *u16 = acc ? product_output_shadow(d, du, (size_t)N * F) : product_output_shadow_only(d, &u, (size_t)N * F);
    swiglu_backward_launch(impl_of(d)->stream, g, u, g16, u16, dout, gate, up, (size_t)N * F, acc);
    LAUNCHED("swiglu_backward");
    only_done(d, g, dg, (size_t)N * F);
    only_done(d, u, du, (size_t)N * F);
}
static void cu_swiglu_backward(device_t *d, float *dg, float *du, const float *dout, const float *gate, const float *up, int N, int F) { swiglu_bwd(d, dg, du, dout, gate, up, N, F, 1); }
static void cu_swiglu_backward_set(device_t *d, float *dg, float *du, const float *dout, const float *gate, const float *up, int N, int F) { swiglu_bwd(d, dg, du, dout, gate, up, N, F, 0); }

/* 1 when x[0 .. n) lies in a range marked products-only and the hint is on (cu_products_only) */
static int products_only_range(device_t *d, const float *x, size_t n) {
    cuda_impl_t *c = impl_of(d);
    if (d->precision != PRECISION_BF16 || !c->n_only || !c->only_mode || c->shadow_check || !x || !n) return 0;
    const char *lo = (const char *)x, *hi = (const char *)(x + n);
    for (int i = 0; i < c->n_only; i++)
        if (c->only[i].lo <= lo && hi <= c->only[i].hi) return 1;
    return 0;
}
/* The classifier (classifier.cuh): the row kept in shared memory when it fits (one read of the
 * logits), the count of counted rows and the mean loss reduced on the device. dlogits marked
 * products-only (the families' logits buffer, at bf16) are written as their bf16 shadow alone,
 * kept in dz's own buffer: compact (or at the padded stride of product_output_shadow_rows) where
 * the kernel does not read that buffer (the logits read from the staging buffer, or dz not z),
 * else row n's bf16 over the first half of its own fp32 row (row stride 2 V, no zero padding:
 * the kernel reads a row before it writes over it). Poison writes NaN over what the shadow
 * leaves of dz. */
static void classifier(device_t *d, float *row_loss, float *lse, float *dz, const float *z, const uint32_t *tgt, const uint8_t *mask, int N, int V, float dloss, int have_lse) {
    cuda_impl_t *c = impl_of(d);
    /* the logits just staged and dlogits written over all of them: read from the staging buffer */
    size_t ldz = (size_t)V;
    if (c->pending.dst && c->pending.dst == z && dz == z && c->pending.ldc == (size_t)V && c->pending.m == V && c->pending.n == N) {
        z = c->stage;
        ldz = c->pending.ld;
        c->pending.dst = NULL;
        c->stage_reads++;
    } else {
        staged_flush(d);
    }
    OUT(dz, (size_t)N * V);
    if (!have_lse) OUT(lse, N);
    /* the margin: the kernel's static shared memory (ce_finish's CE_THREADS doubles, its scratch) */
    const size_t cache = c->ce_cache && sizeof(float) * (size_t)V + sizeof(double) * CE_THREADS + 1024 <= c->smem_optin
                             ? sizeof(float) * (size_t)V : 0;
    if (cache > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(k_classifier, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)cache);
        if (e != cudaSuccess) {
            fault(d, "crossentropy: cudaFuncSetAttribute", cudaGetErrorString(e));
            cudaGetLastError();
            return;
        }
    }
    int ld16 = V, pad16 = 0;
    __nv_bfloat16 *dz16 = NULL;
    float *dzf = dz; /* the fp32 dlogits the kernel writes: NULL for the shadow alone */
    size_t keep = 0; /* the bytes of dz the shadow takes (poison spares them) */
    if (N > 0 && products_only_range(d, dz, (size_t)N * V)) {
        const int P = c->align_products && V % 8 ? (V + CUDA_PRODUCT_ALIGN - 1) / CUDA_PRODUCT_ALIGN * CUDA_PRODUCT_ALIGN : V;
        const int compact = z != dz && P <= 2 * V; /* dz's buffer not read (dz not z, or z staged); N P bf16 fit in N V floats */
        ld16 = compact ? P : 2 * V;
        pad16 = compact ? P - V : 0;
        const int width = compact && P == V ? 0 : V, ld = compact && P == V ? 0 : ld16;
        if (!shadow_borrow(d, dz, (size_t)N * V, width, ld, pad16, (__nv_bfloat16 *)dz)) {
            dz16 = (__nv_bfloat16 *)dz;
            dzf = NULL;
            keep = compact ? sizeof(__nv_bfloat16) * (size_t)N * P : 0;
            c->only_writes++;
        }
    }
    if (dzf) {
        ld16 = V, pad16 = 0;
        dz16 = product_output_shadow_rows(d, dz, (size_t)(N > 0 ? N : 0), V, &ld16);
        pad16 = ld16 - V;
    }
    classifier_launch(c->stream, c->ce, row_loss, lse, dzf, dz16, ld16, pad16, z, ldz, tgt, mask, N, V, dloss, have_lse,
                      cache, c->finish_apart);
    if (!dzf && c->only_mode == 2) {
        /* poison: NaN (all ones) over dz's bytes the shadow does not hold -- after it, or the
         * second half of each row */
        cudaError_t e = cudaSuccess;
        if (keep)
            e = cudaMemsetAsync((char *)dz + keep, 0xff, sizeof(float) * (size_t)N * V - keep, c->stream);
        else /* (a test mode: a call per row) */
            for (int r = 0; r < N && e == cudaSuccess && V > 1; r++)
                e = cudaMemsetAsync(dz + (size_t)r * V + (V + 1) / 2, 0xff, sizeof(float) * (size_t)(V / 2), c->stream);
        if (e != cudaSuccess) fault(d, "FT_BF16_SHADOW_ONLY=poison", cudaGetErrorString(cudaGetLastError()));
    }
}
static float cu_crossentropy_forward(device_t *d, float *dz, float *lse, int *count, const float *z, const uint32_t *tgt, const uint8_t *mask, int N, int V, float dloss) {
    cuda_impl_t *c = impl_of(d);
    float *row_loss = (float *)work(d, sizeof(float) * (N > 0 ? N : 1));
    if (!row_loss) return NAN;
    classifier(d, row_loss, lse, dz, z, tgt, mask, N, V, dloss, 0);
    LAUNCHED("crossentropy_forward");
    ce_result_t r = {0.0, 0, 0};
    cudaError_t e = cudaMemcpyAsync(&r, c->ce, sizeof r, cudaMemcpyDeviceToHost, c->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) {
        fault(d, "crossentropy_forward: download", cudaGetErrorString(e));
        cudaGetLastError();
        return NAN;
    }
    if (count) *count = r.count;
    return r.count > 0 ? (float)(r.loss_sum / r.count) : 0.0f;
}
static void cu_crossentropy_backward(device_t *d, float *dz, const float *z, const float *lse, const uint32_t *tgt, const uint8_t *mask, int N, int V, float dloss) {
    classifier(d, NULL, (float *)lse, dz, z, tgt, mask, N, V, dloss, 1);
    LAUNCHED("crossentropy_backward");
}
/* Row-independent products by a kernel, not cuBLAS: cuBLAS may choose another algorithm
 * for another N, and a decode row must not depend on the rows beside it. */
static void cu_linear_rows(device_t *d, float *y, const float *x, const float *w, int N, int in, int out) {
    size_t n = (size_t)N * out;
    OUT(y, n);
    g_linear_rows<<<GRID(n)>>>(n, y, x, w, in, out);
    LAUNCHED("linear_rows");
}
static void cu_qkv_split_rope_rows(device_t *d, float *q, float *k, float *v, const float *qkv, const float *cs, const float *sn, int N, int H, int Hkv, int hd, const int *pos) {
    OUT(q, (size_t)N * H * hd);
    OUT(k, (size_t)N * Hkv * hd);
    OUT(v, (size_t)N * Hkv * hd);
    qkv_split_launch(impl_of(d)->stream, q, k, v, NULL, NULL, NULL, qkv, cs, sn, N, 1, H, Hkv, hd, 0, pos, impl_of(d)->qkv_heads);
    LAUNCHED("qkv_split_rope_rows");
}
static void cu_rope_rows(device_t *d, float *out, const float *x, const float *cs, const float *sn, int N, int H, int hd, const int *pos) {
    const size_t ld = (size_t)H * hd;
    OUT(out, (size_t)N * ld);
    rope_launch(impl_of(d)->stream, out, NULL, ld, 0, x, ld, 0, cs, sn, (size_t)N, H, hd, 1, 0, pos, 1.0f, 0);
    LAUNCHED("rope_rows");
}
static void cu_attention_rows(device_t *d, float *out, const float *q, const float *kc, const float *vc, const int *base, const int *len, int N, int H, int Hkv, int hd) {
    if (!att_head_dim_ok(d, hd)) return;
    OUT(out, (size_t)N * H * hd);
    if (hd > ATT_MAX_HD) {
        size_t n = (size_t)N * H;
        g_attention_rows<<<GRID(n)>>>(n, out, q, kc, vc, base, len, H, Hkv, hd);
    } else {
        cudaError_t e = attention_rows_launch(impl_of(d)->stream, out, q, kc, vc, base, len, N, H, Hkv, hd);
        if (e != cudaSuccess) fault(d, "attention_rows", cudaGetErrorString(e));
    }
    LAUNCHED("attention_rows");
}
static void cu_scatter_rows(device_t *d, float *dst, int ldd, const int *idx, const float *src, int lds, int N, int D) {
    size_t n = (size_t)N * D;
    out_to_end(d, dst); /* the rows idx names */
    g_scatter_rows<<<GRID(n)>>>(n, dst, ldd, idx, src, lds, D);
    LAUNCHED("scatter_rows");
}
static void cu_add_forward(device_t *d, float *y, const float *a, const float *b, size_t n) { OUT(y, n); add_launch(impl_of(d)->stream, y, a, b, n); LAUNCHED("add"); }
static void cu_add_inplace(device_t *d, float *y, const float *x, size_t n) { OUT(y, n); add_inplace_launch(impl_of(d)->stream, y, x, n); LAUNCHED("add_inplace"); }
static void cu_scale_inplace(device_t *d, float *x, float s, size_t n) { OUT(x, n); scale_launch(impl_of(d)->stream, x, s, n); LAUNCHED("scale"); }
static void cu_repeat_rows(device_t *d, float *out, const float *row, int N, int D) {
    size_t n = (size_t)N * D;
    OUT(out, n);
    g_repeat_rows<<<GRID(n)>>>(n, out, row, D);
    LAUNCHED("repeat_rows");
}
static void cu_sum_rows(device_t *d, float *out, const float *x, int N, int D) {
    OUT(out, D);
    float *part = (float *)work(d, sizeof(float) * colred_work_floats(N, D));
    if (!part) return;
    colsum_launch(impl_of(d)->stream, out, part, impl_of(d)->colred_tickets, x, NULL, NULL, N, D, COLRED_SUM, 1);
    LAUNCHED("sum_rows");
}
static void cu_copy_rows(device_t *d, float *dst, int ldd, const float *src, int lds, int rows, int D) {
    if (rows > 0 && D > 0) out_rows(d, dst, (size_t)ldd, (size_t)rows, (size_t)D);
    copy_rows_launch(impl_of(d)->stream, dst, NULL, (size_t)ldd, 0, src, (size_t)lds, 0, (size_t)(rows > 0 ? rows : 0), D);
    LAUNCHED("copy_rows");
}
static void cu_uniform_fill(device_t *d, float *u, size_t n, uint64_t key, uint64_t c0) { OUT(u, n); g_uniform<<<GRID(n)>>>(n, u, key, c0); LAUNCHED("uniform_fill"); }
static void cu_binmap_forward(device_t *d, uint32_t *idx, float *prob, const float *lg, const float *u, int N, int H) {
    OUT(idx, N);
    OUT(prob, (size_t)N * H);
    g_binmap_fwd<<<GRID((size_t)N)>>>((size_t)N, idx, prob, lg, u, H);
    LAUNCHED("binmap_forward");
}
static void cu_binmap_kl_rows(device_t *d, float *kl, const float *lg, int N, int H) {
    OUT(kl, N);
    g_binmap_kl<<<GRID((size_t)N)>>>((size_t)N, kl, lg, H);
    LAUNCHED("binmap_kl_rows");
}
/* The free bits' sums: KL and mask downloaded and summed by the CPU op itself. */
static free_bits_sums_t cu_free_bits_forward(device_t *d, const float *kl, const uint8_t *mask, int N, float kappa) {
    free_bits_sums_t s = {0, 0, 0, 0};
    char *h = (char *)host_rows(d, (sizeof(float) + 1) * (size_t)(N > 0 ? N : 1));
    if (!h) { fault(d, "free_bits_forward", "out of host memory"); return s; }
    float *klh = (float *)h;
    uint8_t *mh = mask ? (uint8_t *)(h + sizeof(float) * N) : NULL;
    cu_download(d, klh, kl, sizeof(float) * N);
    if (mask) cu_download(d, mh, mask, (size_t)N);
    return free_bits_forward(klh, mh, N, kappa);
}
static void cu_free_bits_backward(device_t *d, float *dl, const float *lg, const float *kl, const uint8_t *mask, int N, int H, float kappa, float scale) {
    OUT(dl, (size_t)N * H);
    g_free_bits_bwd<<<GRID((size_t)N)>>>((size_t)N, dl, lg, kl, mask, H, kappa, scale);
    LAUNCHED("free_bits_backward");
}
static void cu_post_sampler_forward(device_t *d, float *r, const float *w, const uint32_t *idx, int N, int D, int H) {
    size_t n = (size_t)N * D;
    OUT(r, n);
    g_post_fwd<<<GRID(n)>>>(n, r, w, idx, D, H);
    LAUNCHED("post_sampler_forward");
}
static void cu_post_sampler_backward(device_t *d, float *dw, float *dl, const float *dr, const float *w, const uint32_t *idx, const float *prob, int N, int D, int H) {
    OUT(dw, (size_t)D << H);
    OUT(dl, (size_t)N * H);
    g_post_bwd_dw<<<GRID((size_t)D)>>>((size_t)D, dw, dr, idx, N, D, H);
    LAUNCHED("post_sampler_backward dw");
    if (!dl) return;
    /* dZ = W^T dR over chunks of rows (fp32, as the CPU: the Binary Mapper stays fp32), then
     * the pass-through per row */
    const size_t K = (size_t)1 << H;
    int rows = (int)(CUDA_BINMAP_CHUNK_FLOATS / K);
    if (rows < 1) rows = 1;
    if (rows > N) rows = N;
    float *dz = (float *)work(d, sizeof(float) * K * rows);
    if (!dz) return;
    cuda_impl_t *c = impl_of(d);
    const float one = 1.0f, zero = 0.0f;
    for (int n0 = 0; n0 < N; n0 += rows) {
        int r = N - n0 < rows ? N - n0 : rows;
        cublasStatus_t st = cublasSgemm(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)K, r, D, &one, w, (int)K,
                                        dr + (size_t)n0 * D, D, &zero, dz, (int)K);
        if (st != CUBLAS_STATUS_SUCCESS) { fault(d, "post_sampler_backward", "cuBLAS failed"); return; }
        g_binmap_bwd<<<GRID((size_t)r)>>>((size_t)r, dl + (size_t)n0 * H, dz, prob + (size_t)n0 * H, H);
        LAUNCHED("post_sampler_backward dlogits");
    }
}
static void cu_mixer_tril(device_t *d, float *out, const float *w, int M, int T, int acc) {
    size_t n = (size_t)M * T * T;
    OUT(out, n);
    g_mixer_tril<<<GRID(n)>>>(n, out, w, T, acc);
    LAUNCHED("mixer_tril");
}
static void cu_mixer_bias_forward(device_t *d, float *y, const float *bias, int B, int T, int D, int h, int Tb) {
    size_t n = (size_t)B * T * D;
    OUT(y, n);
    g_mixer_bias_fwd<<<GRID(n)>>>(n, y, bias, T, D, h, Tb);
    LAUNCHED("mixer_bias_forward");
}
static void cu_mixer_bias_backward(device_t *d, float *db, const float *dy, int B, int T, int D, int h, int Tb) {
    OUT(db, (size_t)h * Tb);
    size_t n = (size_t)h * T;
    g_mixer_bias_bwd<<<GRID(n)>>>(n, db, dy, B, T, D, h, Tb);
    LAUNCHED("mixer_bias_backward");
}
static void cu_unroll_forward(device_t *d, float *out, const float *e, int B, int T, int D, int nd) {
    size_t n = (size_t)B * T * nd;
    OUT(out, n);
    g_unroll_fwd<<<GRID(n)>>>(n, out, e, T, D, nd);
    LAUNCHED("unroll_forward");
}
static void cu_unroll_backward(device_t *d, float *de, const float *dout, int B, int T, int D, int nd) {
    size_t n = (size_t)B * D;
    OUT(de, n);
    g_unroll_bwd<<<GRID(n)>>>(n, de, dout, T, D, nd);
    LAUNCHED("unroll_backward");
}
static void cu_embed_code_forward(device_t *d, float *y, const float *x, const float *u, size_t n, float range, int qbits, int nbits) {
    OUT(y, n);
    if (!n) return;
    g_embed_code_fwd<<<GRID(n)>>>(n, y, x, u, range, qbits, nbits);
    LAUNCHED("embed_code_forward");
}
static void cu_embed_code_backward(device_t *d, float *dx, const float *dy, const float *x, size_t n, float range) {
    OUT(dx, n);
    if (!n) return;
    g_embed_code_bwd<<<GRID(n)>>>(n, dx, dy, x, range);
    LAUNCHED("embed_code_backward");
}
static void cu_latent_normal(device_t *d, float *x, int L, int B, int n, uint64_t key, uint64_t row0, float mean, float std) {
    size_t total = (size_t)L * B * n;
    OUT(x, total);
    g_latent_normal<<<GRID(total)>>>(total, x, B, n, key, row0, mean, std);
    LAUNCHED("latent_normal");
}
static void cu_latent_sample(device_t *d, float *z, const float *mu, const float *ls, const float *eps, size_t n) { OUT(z, n); g_latent_sample<<<GRID(n)>>>(n, z, mu, ls, eps); LAUNCHED("latent_sample"); }
static void cu_latent_kl_rows(device_t *d, float *kl, const float *mu, const float *ls, int L, int B, int n) { OUT(kl, B); g_latent_kl<<<GRID((size_t)B)>>>((size_t)B, kl, mu, ls, L, B, n); LAUNCHED("latent_kl_rows"); }
static void cu_latent_backward(device_t *d, float *dmu, float *dls, const float *dz, const float *mu, const float *ls, const float *eps, float kl_scale, size_t n) { OUT(dmu, n); OUT(dls, n); g_latent_bwd<<<GRID(n)>>>(n, dmu, dls, dz, mu, ls, eps, kl_scale); LAUNCHED("latent_backward"); }
/* ---- the optimizer (adamw.cuh) ----
 * The list on the device, uploaded when it changed (a training step passes the same list every
 * step: no upload, no wait), and its chunk count. */
static const mt_tensor_t *mt_upload(device_t *d, mt_list_t *L, mt_tensor_t *t, int count) {
    cuda_impl_t *c = impl_of(d);
    const size_t chunks = mt_layout(t, count);
    if (count == L->count && L->dev && !memcmp(t, L->host, sizeof(*t) * count)) return L->dev;
    cudaError_t e = cudaSuccess;
    if (count > L->cap) {
        e = cudaStreamSynchronize(c->stream); /* the old list may still be read */
        if (L->dev) cudaFree(L->dev);
        free(L->host);
        L->dev = NULL;
        L->host = (mt_tensor_t *)malloc(sizeof(*t) * count);
        L->cap = L->count = 0;
        if (e != cudaSuccess || !L->host || (e = cudaMalloc(&L->dev, sizeof(*t) * count)) != cudaSuccess) {
            fault(d, "optimizer: the tensor list", e != cudaSuccess ? cudaGetErrorString(e) : "out of host memory");
            cudaGetLastError();
            free(L->host);
            L->host = NULL;
            L->dev = NULL;
            return NULL;
        }
        L->cap = count;
    }
    memcpy(L->host, t, sizeof(*t) * count);
    /* waited for: the host copy is rewritten by the next call */
    e = cudaMemcpyAsync(L->dev, L->host, sizeof(*t) * count, cudaMemcpyHostToDevice, c->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) {
        fault(d, "optimizer: the tensor list", cudaGetErrorString(e));
        cudaGetLastError();
        L->count = 0;
        return NULL;
    }
    L->count = count;
    L->chunks = chunks;
    return L->dev;
}
/* The sum of squares of every tensor: chunks of OPS_SUMSQ_CHUNK each in double (a warp per
 * chunk), then one block adds the chunks; one download. */
static double cu_sumsq_multi(device_t *d, const float *const *x, const size_t *n, int count) {
    cuda_impl_t *c = impl_of(d);
    pz_write_all(d); /* the list's tensors are not arguments the scan sees */
    if (count <= 0) return 0.0;
    mt_tensor_t *t = (mt_tensor_t *)calloc(count, sizeof(*t));
    if (!t) { fault(d, "sumsq", "out of host memory"); return NAN; }
    for (int i = 0; i < count; i++) {
        t[i].g = (float *)x[i];
        t[i].n = n[i];
    }
    const mt_tensor_t *dev = mt_upload(d, &c->mt_norm, t, count);
    free(t);
    if (!dev) return NAN;
    double *part = (double *)work(d, sizeof(double) * (c->mt_norm.chunks ? c->mt_norm.chunks : 1));
    if (!part) return NAN;
    sumsq_multi_launch(c->stream, c->norm, part, c->norm_ticket, dev, count, c->mt_norm.chunks, c->finish_apart);
    LAUNCHED("sumsq");
    double total = NAN;
    cudaError_t e = cudaMemcpyAsync(&total, c->norm, sizeof total, cudaMemcpyDeviceToHost, c->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) {
        fault(d, "sumsq: download", cudaGetErrorString(e));
        cudaGetLastError();
        return NAN;
    }
    return total;
}
static double cu_sumsq(device_t *d, const float *x, size_t n) { return cu_sumsq_multi(d, &x, &n, 1); }
/* AdamW over every tensor of the list in one launch (a block per chunk). */
static void cu_adamw_update_multi(device_t *d, const adamw_tensor_t *at, int count, const adamw_scalars_t *s) {
    cuda_impl_t *c = impl_of(d);
    pz_write_all(d); /* the list's tensors are not arguments the scan sees */
    if (count <= 0) return;
    mt_tensor_t *t = (mt_tensor_t *)calloc(count, sizeof(*t));
    if (!t) { fault(d, "adamw_update", "out of host memory"); return; }
    for (int i = 0; i < count; i++) {
        t[i].p = at[i].p;
        t[i].g = at[i].g;
        t[i].m = at[i].m;
        t[i].v = at[i].v;
        t[i].n = at[i].n;
        t[i].decay = at[i].decay;
        /* a weight with a bf16 shadow gets it refreshed in the update's pass */
        t[i].p16 = d->precision == PRECISION_BF16 ? shadow_slice(d, at[i].p, at[i].n) : NULL;
        if (!t[i].p16) OUT(at[i].p, at[i].n);
        OUT(at[i].g, at[i].n);
        OUT(at[i].m, at[i].n);
        OUT(at[i].v, at[i].n);
    }
    const mt_tensor_t *dev = mt_upload(d, &c->mt_adam, t, count);
    free(t);
    if (!dev) return;
    const mt_scalars_t sc = {s->clip, s->decay_mul, s->beta1, s->beta2, s->eps, s->step_size, s->bc2_sqrt};
    adamw_multi_launch(c->stream, dev, count, c->mt_adam.chunks, sc);
    LAUNCHED("adamw_update");
}
static void cu_adamw_update(device_t *d, float *p, float *g, float *m, float *v, size_t n, const adamw_scalars_t *s) {
    const adamw_tensor_t t = {p, g, m, v, n, 1};
    cu_adamw_update_multi(d, &t, 1, s);
}

/* C++20 designated initializers: in the table's order, which the compiler checks */
/* Every op of the table but the classifier's (which may read a staged result in place), the
 * allocator's and upload's (which flushes only a staged result it overwrites) launches a staged result's pending copy first (staged_flush), so it sees C written;
 * FLUSHED(f) is f with that before it. */
/* With deferred zeros, every pointer argument but the ones at indices S0, S1 (counted after d:
 * arguments the op itself handles, pz_claim or OUT) first gets the zeros of its allocation's
 * deferred ranges written (pz_touch). */
template <typename T> static inline void pz_arg(device_t *d, T a) {
    if constexpr (std::is_pointer_v<T>)
        if (a) pz_touch(d, (const void *)a);
}
template <auto F, int S0, int S1, int FLUSH, typename R, typename... A> static R after_flush(device_t *d, A... a) {
    if (FLUSH) staged_flush(d);
    if (impl_of(d)->n_pz) {
        int i = 0;
        auto one = [&](auto x) {
            if (i != S0 && i != S1) pz_arg(d, x);
            i++;
        };
        (one(a), ...);
    }
    return F(d, a...);
}
template <auto F, int S0, int S1, int FLUSH, typename R, typename... A>
constexpr auto wrapped(R (*)(device_t *, A...)) { return &after_flush<F, S0, S1, FLUSH, R, A...>; }
#define FLUSHED(f) wrapped<f, -1, -1, 1>(f)
/* f's arguments S0, S1 left to f (deferred zeros); SCANNED: no flush (the classifier) */
#define FLUSHED_BUT(f, s0, s1) wrapped<f, s0, s1, 1>(f)
#define SCANNED(f) wrapped<f, -1, -1, 0>(f)
static const device_ops_t cuda_ops = {
    .alloc = cu_alloc,
    .free = FLUSHED_BUT(cu_free, 0, -1), /* its deferred zeros dropped, not written */
    .upload = cu_upload, /* flushes only what it overwrites */
    .download = FLUSHED(cu_download),
    .copy = FLUSHED(cu_copy),
    .zero = FLUSHED_BUT(cu_zero, 0, -1), /* p: deferred, not written */
    .sync = FLUSHED(cu_sync),
    .set_parallel = cu_set_parallel,
    .products_only = cu_products_only,
    .gemm = FLUSHED(cu_gemm),
    .embedding_forward = FLUSHED(cu_embedding_forward),
    .embedding_backward = FLUSHED(cu_embedding_backward),
    .rmsnorm_forward = FLUSHED(cu_rmsnorm_forward),
    .rmsnorm_backward = FLUSHED_BUT(cu_rmsnorm_backward, 1, -1), /* dw: OUT's exact range */
    .add_rmsnorm_forward = FLUSHED(cu_add_rmsnorm_forward),
    .rmsnorm_backward_res = FLUSHED_BUT(cu_rmsnorm_backward_res, 1, -1),
    .linear_forward = FLUSHED(cu_linear_forward),
    .linear_backward = FLUSHED_BUT(cu_linear_backward, 1, -1), /* dw: pz_claim */
    .linear_backward_set = FLUSHED_BUT(cu_linear_backward_set, 1, -1),
    .rope_forward = FLUSHED(cu_rope_forward),
    .rope_backward = FLUSHED(cu_rope_backward),
    .qkv_split_rope = FLUSHED(cu_qkv_split_rope),
    .qkv_join_unrope = FLUSHED(cu_qkv_join_unrope),
    .attention_forward = FLUSHED(cu_attention_forward),
    .attention_backward = FLUSHED(cu_attention_backward),
    .swiglu_forward = FLUSHED(cu_swiglu_forward),
    .swiglu_backward = FLUSHED(cu_swiglu_backward),
    .swiglu_backward_set = FLUSHED(cu_swiglu_backward_set),
    .crossentropy_forward = SCANNED(cu_crossentropy_forward),
    .crossentropy_backward = SCANNED(cu_crossentropy_backward),
    .linear_rows = FLUSHED(cu_linear_rows),
    .qkv_split_rope_rows = FLUSHED(cu_qkv_split_rope_rows),
    .rope_rows = FLUSHED(cu_rope_rows),
    .attention_rows = FLUSHED(cu_attention_rows),
    .scatter_rows = FLUSHED(cu_scatter_rows),
    .add_forward = FLUSHED(cu_add_forward),
    .add_inplace = FLUSHED(cu_add_inplace),
    .scale_inplace = FLUSHED(cu_scale_inplace),
    .repeat_rows = FLUSHED(cu_repeat_rows),
    .sum_rows = FLUSHED(cu_sum_rows),
    .copy_rows = FLUSHED(cu_copy_rows),
    .uniform_fill = FLUSHED(cu_uniform_fill),
    .binmap_forward = FLUSHED(cu_binmap_forward),
    .binmap_kl_rows = FLUSHED(cu_binmap_kl_rows),
    .free_bits_forward = FLUSHED(cu_free_bits_forward),
    .free_bits_backward = FLUSHED(cu_free_bits_backward),
    .post_sampler_forward = FLUSHED(cu_post_sampler_forward),
    .post_sampler_backward = FLUSHED(cu_post_sampler_backward),
    .mixer_tril = FLUSHED(cu_mixer_tril),
    .mixer_bias_forward = FLUSHED(cu_mixer_bias_forward),
    .mixer_bias_backward = FLUSHED(cu_mixer_bias_backward),
    .unroll_forward = FLUSHED(cu_unroll_forward),
    .unroll_backward = FLUSHED(cu_unroll_backward),
    .embed_code_forward = FLUSHED(cu_embed_code_forward),
    .embed_code_backward = FLUSHED(cu_embed_code_backward),
    .sumsq = FLUSHED(cu_sumsq),
    .adamw_update = FLUSHED(cu_adamw_update),
    .attention_window_forward = FLUSHED(cu_attention_window_forward),
    .attention_window_backward = FLUSHED(cu_attention_window_backward),
    .attention_backward_qkv = FLUSHED(cu_attention_backward_qkv),
    .latent_normal = FLUSHED(cu_latent_normal),
    .latent_sample = FLUSHED(cu_latent_sample),
    .latent_kl_rows = FLUSHED(cu_latent_kl_rows),
    .latent_backward = FLUSHED(cu_latent_backward),
    .sumsq_multi = FLUSHED(cu_sumsq_multi),
    .adamw_update_multi = FLUSHED(cu_adamw_update_multi),
};

/* Outputs written as bf16 shadows alone so far (cu_products_only). */
extern "C" long device_cuda_only_writes(const device_t *d) { return ((const cuda_impl_t *)d->impl)->only_writes; }
/* Products that read a bf16 shadow so far (tests: that the shadows are used at all). */
extern "C" long device_cuda_shadow_hits(const device_t *d) { return ((const cuda_impl_t *)d->impl)->shadow_hits; }
/* ops that wrote a deferred-zero range whole without reading it (deferred zeroing, above) */
extern "C" long device_cuda_zero_claims(const device_t *d) { return ((const cuda_impl_t *)d->impl)->pz_claims; }
/* attention backward calls that took dQ from dK/dV's dS (the buffer given; tests) */
extern "C" long device_cuda_att_ds_runs(const device_t *d) { return ((const cuda_impl_t *)d->impl)->att_ds_runs; }
/* Every write the device still owes its memory done (a staged result's copy, the deferred
 * zeros), queued before whatever the caller queues next: for a reader outside the device
 * table's ops -- NCCL in trainer/dp_nccl.c reads and writes the gradients and parameters
 * directly, where the ops' argument scan cannot see it. */
extern "C" void device_cuda_settle(device_t *d) {
    staged_flush(d);
    pz_write_all(d);
}
extern "C" void device_cuda_aligned_counts(const device_t *d, long *staged, long *padded_reads, long *padded_products,
                                           long *stage_reads) {
    *stage_reads = ((const cuda_impl_t *)d->impl)->stage_reads;
    *staged = ((const cuda_impl_t *)d->impl)->staged;
    *padded_reads = ((const cuda_impl_t *)d->impl)->padded_reads;
    *padded_products = ((const cuda_impl_t *)d->impl)->padded_products;
}

extern "C" void device_cuda_close(device_t *d);
extern "C" int device_cuda_open(device_t **pd, int ordinal, precision_t precision, char *err, size_t errlen) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        snprintf(err, errlen, "device cuda:%d: no CUDA device (%s)", ordinal,
                 e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports 0 GPUs");
        cudaGetLastError();
        return -1;
    }
    if (ordinal >= count) {
        snprintf(err, errlen, "device cuda:%d: this machine has %d GPU(s): cuda:0 .. cuda:%d", ordinal, count, count - 1);
        return -1;
    }
    if ((e = cudaSetDevice(ordinal)) != cudaSuccess) {
        snprintf(err, errlen, "device cuda:%d: %s", ordinal, cudaGetErrorString(e));
        return -1;
    }
    cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, ordinal)) != cudaSuccess) {
        snprintf(err, errlen, "device cuda:%d: cudaGetDeviceProperties: %s", ordinal, cudaGetErrorString(e));
        cudaGetLastError();
        return -1;
    }
    int optin = 0;
    if ((e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, ordinal)) != cudaSuccess) {
        snprintf(err, errlen, "device cuda:%d: cudaDeviceGetAttribute: %s", ordinal, cudaGetErrorString(e));
        cudaGetLastError();
        return -1;
    }
    device_t *d = (device_t *)calloc(1, sizeof(*d));
    cuda_impl_t *c = (cuda_impl_t *)calloc(1, sizeof(*c));
    if (!d || !c) {
        free(d);
        free(c);
        snprintf(err, errlen, "device cuda:%d: out of host memory", ordinal);
        return -1;
    }
    c->ordinal = ordinal;
    c->smem_optin = (size_t)optin;
    d->ops = &cuda_ops;
    d->kind = DEVICE_CUDA;
    d->ordinal = ordinal;
    d->precision = precision;
    d->impl = c;
    snprintf(d->name, sizeof d->name, "cuda:%d (%.80s, sm_%d%d)", ordinal, prop.name, prop.major,
             prop.minor);
    const char *what = NULL, *why = "";
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    if ((e = cudaStreamCreate(&c->stream)) != cudaSuccess) what = "cudaStreamCreate", why = cudaGetErrorString(e);
    else if ((st = cublasCreate(&c->blas)) != CUBLAS_STATUS_SUCCESS) what = "cublasCreate";
    else if ((st = cublasSetStream(c->blas, c->stream)) != CUBLAS_STATUS_SUCCESS) what = "cublasSetStream";
    /* fp32 means fp32: the default math mode (no TF32) for cublasSgemm, whatever the
     * precision; tf32 and bf16 ask for their compute type per call (cublasGemmEx), so a
     * precision changed after opening (device_set_precision) means what it says */
    else if ((st = cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH)) != CUBLAS_STATUS_SUCCESS) what = "cublasSetMathMode";
    /* the work buffer's bounded users fit it: reserved now, so what a model's "largest batch
     * that fits" probe finds free stays free for the first step */
    else if (!work(d, CUDA_WORK_RESERVE)) what = "the work buffer", why = "out of device memory";
    else if ((e = cudaMalloc(&c->ce, CUDA_RESULTS_BYTES)) != cudaSuccess)
        what = "the reductions' results", why = cudaGetErrorString(e);
    else if ((e = cudaMemsetAsync(c->ce, 0, CUDA_RESULTS_BYTES, c->stream)) != cudaSuccess)
        what = "the reductions' results", why = cudaGetErrorString(e);
    else {
        c->norm = (double *)(c->ce + 1);
        c->shadow_bad = (unsigned long long *)(c->norm + 1);
        c->norm_ticket = (unsigned *)(c->shadow_bad + 1);
        c->colred_tickets = (unsigned *)(c->shadow_bad + 2);
        const char *fin = getenv("FT_CUDA_FINISH");
        c->finish_apart = fin && strcmp(fin, "kernels") == 0;
        if (c->finish_apart) c->colred_tickets = NULL; /* k_colred_finish launched */
        const char *chk = getenv("FT_BF16_SHADOW_CHECK");
        c->shadow_check = chk && *chk && strcmp(chk, "0") != 0;
        const char *so = getenv("FT_BF16_SHADOW_ONLY");
        c->only_mode = !so || !*so ? 1 : strcmp(so, "poison") == 0 ? 2 : strcmp(so, "0") != 0;
        const char *al = getenv("FT_CUDA_ALIGN");
        c->align_products = !(al && strcmp(al, "0") == 0);
        const char *cc = getenv("FT_CUDA_CE_CACHE");
        c->ce_cache = !(cc && strcmp(cc, "0") == 0);
        const char *ad = getenv("FT_CUDA_ATT_DQ_DS");
        c->att_dq_ds = !(ad && strcmp(ad, "0") == 0);
        const char *qs = getenv("FT_CUDA_QKV_SPLIT");
        c->qkv_heads = qs && strcmp(qs, "0") == 0 ? 0 : QKV_SPLIT_HEADS;
        const char *sm = getenv("FT_CUDA_STAGE_MIN");
        c->stage_min = sm && *sm ? atof(sm) : CUDA_STAGE_MIN_MACS;
        const char *lz = getenv("FT_CUDA_LAZY_ZERO"), *lzm = getenv("FT_CUDA_LAZY_ZERO_MIN");
        c->pz_mode = !lz || !*lz ? 1 : strcmp(lz, "poison") == 0 ? 2 : strcmp(lz, "0") != 0;
        c->pz_min = lzm && *lzm ? (size_t)strtoull(lzm, NULL, 10) : CUDA_PENDING_MIN;
    }
    if (what) {
        char code[64] = "";
        if (st != CUBLAS_STATUS_SUCCESS) snprintf(code, sizeof code, "cuBLAS status %d", (int)st);
        snprintf(err, errlen, "device cuda:%d: %s: %s", ordinal, what, st != CUBLAS_STATUS_SUCCESS ? code : why);
        cudaGetLastError();
        device_cuda_close(d);
        return -1;
    }
    *pd = d;
    return 0;
}

/* Also for a device whose open stopped half way (NULL handles skipped). Errors here have no one
 * left to tell. */
extern "C" void device_cuda_close(device_t *d) {
    cuda_impl_t *c = impl_of(d);
    if (c) {
        if (c->stream) cudaStreamSynchronize(c->stream);
        if (c->work) cudaFree(c->work);
        if (c->stage) cudaFree(c->stage);
        if (c->att_ds) cudaFree(c->att_ds);
        if (c->ce) cudaFree(c->ce);
        for (int i = 0; i < c->n_shadow; i++)
            if (c->shadow[i].own) cudaFree(c->shadow[i].own);
        if (c->mt_norm.dev) cudaFree(c->mt_norm.dev);
        if (c->mt_adam.dev) cudaFree(c->mt_adam.dev);
        free(c->mt_norm.host);
        free(c->mt_adam.host);
        if (c->blas) cublasDestroy(c->blas);
        if (c->stream) cudaStreamDestroy(c->stream);
        free(c->allocs);
        free(c->host_rows);
        free(c);
    }
    free(d);
}
