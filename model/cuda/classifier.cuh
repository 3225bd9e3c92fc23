/* model/cuda/classifier.cuh: the fused classifier of the CUDA device -- log-sum-exp, loss
 * and dlogits of a row of logits in one kernel, one block per row (llm.c's
 * fused_classifier), the gradient written over the logits when the caller aliases them (no
 * second logits-sized buffer), the probabilities never stored.
 *
 * Formulas: ops_math.h's cross-entropy row (the CPU's, model/ops_crossentropy.c): the max, e =
 * ops_expf(z - max) and its sum s, lse = max + log s, dz = e c with c = ops_ce_factor (scale /
 * s), dz[t] = e_t c - scale. When the row fits in shared memory (V floats) it is read from
 * global memory once and e is kept over the cached copy: one exponential per logit, as on the
 * CPU. Otherwise the row is read twice: an online max-and-sum pass (ops_online_softmax's
 * rescaling), then the gradient pass, which computes e again. The separate backward (lse
 * given) finds the max again and computes e once.
 *
 * dlogits marked products-only (device.h) at bf16 are written as their bf16 shadow alone, in
 * the logits' own buffer (device_cuda.cu's classifier): no fp32 dlogits, no buffer beside it.
 *
 * The count of counted rows and the mean loss stay on the device: the scale dloss / count is
 * read by each block, and the host downloads one result. Without a mask the count is the grid's
 * rows; with one, k_ce_count counts it first. The mean's sum is finished by the classifier's
 * last block (ce_finish: every block writes its row's loss, a ticket in the result tells the
 * last one, which adds the rows in block_sum_fixed's order -- the bits of the separate
 * k_ce_mean, still launched when the device is opened with FT_CUDA_FINISH=kernels). */
#ifndef MODEL_CUDA_CLASSIFIER_CUH
#define MODEL_CUDA_CLASSIFIER_CUH
#include "model/cuda/common.cuh"
#include "model/ops_math.h"

/* The blocks' width. k_classifier's vocabulary-sized row cached in shared memory leaves room for
 * one block per SM (201 KB at V = 50257); measured on an H100 at config G, 1024 threads took
 * 2.22 ms a call against 2.24 at 512 (1.83 TB/s): the width is not what holds it back */
#define CE_THREADS 512

/* what the host downloads after a forward: the loss sum (double, rows in a fixed order) and
 * the count of counted rows */
typedef struct {
    double loss_sum;
    int count;
    unsigned ticket; /* the blocks of k_classifier done with their row's loss (0 between launches) */
} ce_result_t;
static_assert(sizeof(ce_result_t) == 16, "ce_result_t is written as one 16-byte access");

/* one block: count = number of nonzero mask bytes (N when mask is NULL) */
__global__ void k_ce_count(ce_result_t *res, const uint8_t *mask, int N) {
    __shared__ float scratch[32];
    int c = 0;
    if (mask)
        for (int n = threadIdx.x; n < N; n += blockDim.x) c += mask[n] != 0;
    else if (threadIdx.x == 0)
        c = N;
    /* integer sums are exact in float up to 2^24 rows per thread block */
    const float tot = block_sum((float)c, scratch);
    if (threadIdx.x == 0) { /* the 16 bytes as one access (three stores touched a sector each) */
        ce_result_t r;
        r.loss_sum = 0.0;
        r.count = (int)tot;
        r.ticket = 0;
        uint4 u;
        memcpy(&u, &r, sizeof u);
        st16b(res, u);
    }
}

/* dloss / the count of counted rows: every row without a mask (one block per row), else
 * k_ce_count's */
__device__ static inline float ce_scale(const ce_result_t *res, const uint8_t *mask, float dloss) {
    const int cnt = mask ? res->count : (int)gridDim.x;
    return cnt > 0 ? dloss / (float)cnt : 0.0f;
}

/* The last block of k_classifier to write its row's loss (row_loss[blockIdx.x], by thread 0)
 * writes *res: loss_sum the rows' sum in block_sum_fixed's order (k_ce_mean's bits), the count
 * (k_ce_count's with a mask, else the rows), and the ticket back to 0 (an atomic: the other
 * blocks' ticks were atomics). Called by every thread. The emulator's race check accepts the
 * last block's reads of the others' rows because it took a ticket and then fenced (tests/emu). */
__device__ static inline void ce_finish(ce_result_t *res, const float *row_loss, const uint8_t *mask,
                                        double *part) {
    __shared__ int last;
    if (threadIdx.x == 0) {
        __threadfence(); /* the row's loss, seen by whichever block is last */
        last = atomicAdd(&res->ticket, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    const double t = block_sum_fixed(row_loss, (size_t)gridDim.x, part);
    if (threadIdx.x == 0) {
        res->loss_sum = t;
        if (!mask) res->count = (int)gridDim.x;
        atomicExch(&res->ticket, 0u);
    }
}

/* the elements before p's first 16-byte boundary (p 4-byte aligned), at most V: a row of a
 * vocabulary of odd size starts anywhere in a 16-byte word, so its loads and stores are
 * vectorized after this many (ce_head) and before the last (V - head) % 4 */
__device__ static inline int ce_head(const void *p, int V) {
    const int h = (int)((16u - ((uintptr_t)p & 15u)) & 15u) / 4;
    return h < V ? h : V;
}
/* the same for a bf16 row and p's first 8-byte boundary (4 elements stored as one 8-byte word) */
__device__ static inline int ce_head8(const __nv_bfloat16 *p, int V) {
    const int h = (int)((8u - ((uintptr_t)p & 7u)) & 7u) / 2;
    return h < V ? h : V;
}
/* row[0 .. V) = zr[0 .. V) through shared memory, returning the max of the block's share: 16-byte
 * loads after the row's head, four in flight per thread (a block per SM: its loads must overlap).
 * Stored as 16-byte words where row + head is 16-byte aligned (a staged row's head is 0): four
 * 4-byte stores 16 bytes apart put lanes l, l + 8, l + 16, l + 24 in one bank (4 wavefronts a
 * warp each, 16 for the 512 bytes), one 16-byte store takes the 4 a warp's 512 bytes need */
__device__ static inline float ce_cache_row(float *row, const float *zr, int V) {
    float mx = -INFINITY;
    const int a = ce_head(zr, V), nb = (V - a) / 4, tail = a + 4 * nb;
    for (int i = threadIdx.x; i < a; i += blockDim.x) row[i] = zr[i], mx = fmaxf(mx, zr[i]);
    const float *zb = zr + a;
    float *rb = row + a;
    const bool s16 = aligned16(rb);
    int j = threadIdx.x;
    for (; j + 3 * (int)blockDim.x < nb; j += 4 * blockDim.x) {
        float4 v[4];
        #pragma unroll
        for (int u = 0; u < 4; u++) v[u] = ld4_stream(zb + 4 * (j + u * blockDim.x));
        #pragma unroll
        for (int u = 0; u < 4; u++) {
            float *r = rb + 4 * (j + u * blockDim.x);
            if (s16) st4(r, v[u]);
            else r[0] = v[u].x, r[1] = v[u].y, r[2] = v[u].z, r[3] = v[u].w;
            mx = fmaxf(fmaxf(mx, fmaxf(v[u].x, v[u].y)), fmaxf(v[u].z, v[u].w));
        }
    }
    for (; j < nb; j += blockDim.x) {
        const float4 v = ld4_stream(zb + 4 * j);
        float *r = rb + 4 * j;
        if (s16) st4(r, v);
        else r[0] = v.x, r[1] = v.y, r[2] = v.z, r[3] = v.w;
        mx = fmaxf(fmaxf(mx, fmaxf(v.x, v.y)), fmaxf(v.z, v.w));
    }
    for (int i = tail + threadIdx.x; i < V; i += blockDim.x) row[i] = zr[i], mx = fmaxf(mx, zr[i]);
    return mx;
}
/* one element of the gradient from its e = exp(z - max) (ops_math.h: the CPU's formulas) */
__device__ static inline float ce_g(float e, int i, int t, float cf, float scale) {
    return i == t ? ops_ce_grad_target(e, cf, scale) : ops_ce_grad(e, cf);
}
/* One block per row. row_loss (may be NULL): the row's loss, 0 when not counted. lse: the
 * row's log-sum-exp (when have_lse, it is read instead: the separate backward). dz (fp32) may be
 * NULL or alias z (then ldz = V); z's rows are ldz apart (a product's staged result:
 * device_cuda.cu); dz16 (may be NULL): dz's bf16 shadow, row n at n * ld16, pad16 zeros after
 * each row's V (dlogits feed the classifier's two products only; device_cuda.cu pads that
 * stride). dz NULL with dz16: the shadow alone (products-only), which may lie in z's own rows
 * (ld16 = 2 V, pad16 = 0: row n's bf16 over the first half of its fp32 row): every read of a
 * row comes before a barrier that precedes the writes over it, and a chunk's bf16 writes reach
 * only the fp32 words of that chunk and the ones before it.
 * One exponential per logit where the row is cached: exp(z - max) kept over the cached row
 * between the sum and the gradient (ops_math.h); without the cache the gradient pass computes
 * it again. */
__global__ void __launch_bounds__(CE_THREADS)
k_classifier(float *row_loss, float *lse, float *dz, __nv_bfloat16 *dz16, int ld16, int pad16, const float *z,
             size_t ldz, const uint32_t *tgt, const uint8_t *mask, ce_result_t *res, int V, float dloss,
             int have_lse, int cache, int finish) {
    __shared__ float scratch[32];
    __shared__ double part[CE_THREADS]; /* ce_finish's */
    DYN_SHARED(float, row);
    const size_t n = blockIdx.x;
    const float *zr = z + n * ldz;
    const int counted = !mask || mask[n];
    const uint32_t t = tgt[n];
    /* the target's logit, read before anything is written over the row */
    const float zt = threadIdx.x == 0 && row_loss && counted ? zr[t] : 0.0f;
    float mx, l;
    if (cache) {
        /* one read of the row: its max, then e = exp(z - max) over the cached copy, summed */
        mx = block_max(ce_cache_row(row, zr, V), scratch);
        float s = 0.0f;
        for (int i = threadIdx.x; i < V; i += blockDim.x) {
            const float e = ops_expf(row[i] - mx);
            row[i] = e;
            s += e;
        }
        if (have_lse) {
            l = lse[n];
        } else {
            s = block_sum(s, scratch);
            l = mx + logf(s);
        }
    } else if (have_lse) {
        mx = -INFINITY;
        for (int i = threadIdx.x; i < V; i += blockDim.x) mx = fmaxf(mx, zr[i]);
        mx = block_max(mx, scratch);
        l = lse[n];
    } else {
        /* online max and sum: one pass over global memory */
        float m = -INFINITY, s = 0.0f;
        for (int i = threadIdx.x; i < V; i += blockDim.x) {
            const float v = zr[i];
            if (v > m) {
                s = m == -INFINITY ? 0.0f : s * ops_expf(m - v);
                m = v;
            }
            s += ops_expf(v - m);
        }
        mx = block_max(m, scratch);
        s = m == -INFINITY ? 0.0f : s * ops_expf(m - mx);
        s = block_sum(s, scratch);
        l = mx + logf(s);
    }
    if (threadIdx.x == 0) {
        if (!have_lse) lse[n] = l;
        if (row_loss) row_loss[n] = counted ? l - zt : 0.0f;
    }
    if (finish && row_loss) ce_finish(res, row_loss, mask, part);
    if (!dz && !dz16) return;
    const float scale = counted ? ce_scale(res, mask, dloss) : 0.0f;
    const float cf = ops_ce_factor(mx, l, scale); /* 0 when not counted: the row's gradient is 0 */
    float *dr = dz ? dz + n * V : NULL;
    __nv_bfloat16 *d16 = dz16 ? dz16 + n * (size_t)ld16 : NULL;
    /* a padded shadow's padding is zero: products run their k over it (device_cuda.cu) */
    if (d16)
        for (int i = V + threadIdx.x; i < V + pad16; i += blockDim.x) d16[i] = __float2bfloat16_rn(0.0f);
    if (cache) {
        __syncthreads(); /* e over the cached row, read below by other threads */
        /* 16-byte stores after dz's head (the shadow's head where dz is not written); the
         * shadow's 4 elements as one 8-byte store where they are 8-byte aligned (a padded stride
         * and an aligned dz row), else one by one */
        const int a = dr ? ce_head(dr, V) : ce_head8(d16, V), nb = (V - a) / 4, tail = a + 4 * nb;
        const bool v16 = d16 && (((uintptr_t)(d16 + a)) & 7u) == 0;
        /* the cached e as 16-byte words where the head leaves them aligned (as the stores above:
         * 4 wavefronts a warp, not 16) */
        const bool r16 = aligned16(row + a);
        for (int i = threadIdx.x; i < a; i += blockDim.x) {
            const float g = ce_g(row[i], i, (int)t, cf, scale);
            if (dr) dr[i] = g;
            if (d16) d16[i] = to_bf16(g);
        }
        for (int j = threadIdx.x; j < nb; j += blockDim.x) {
            const int i = a + 4 * j;
            const float4 e = r16 ? ld4(row + i) : make_float4(row[i], row[i + 1], row[i + 2], row[i + 3]);
            float4 g;
            g.x = ce_g(e.x, i, (int)t, cf, scale);
            g.y = ce_g(e.y, i + 1, (int)t, cf, scale);
            g.z = ce_g(e.z, i + 2, (int)t, cf, scale);
            g.w = ce_g(e.w, i + 3, (int)t, cf, scale);
            if (dr) st4_stream(dr + i, g);
            if (v16) st4_bf16(d16 + i, g.x, g.y, g.z, g.w);
            else if (d16) d16[i] = to_bf16(g.x), d16[i + 1] = to_bf16(g.y), d16[i + 2] = to_bf16(g.z), d16[i + 3] = to_bf16(g.w);
        }
        for (int i = tail + threadIdx.x; i < V; i += blockDim.x) {
            const float g = ce_g(row[i], i, (int)t, cf, scale);
            if (dr) dr[i] = g;
            if (d16) d16[i] = to_bf16(g);
        }
        return;
    }
    /* no cache: chunks of the block's width, read all, barrier, write all */
    for (int i0 = 0; i0 < V; i0 += blockDim.x) {
        const int i = i0 + threadIdx.x;
        float g = 0.0f;
        if (i < V) g = ce_g(ops_expf(zr[i] - mx), i, (int)t, cf, scale);
        __syncthreads();
        if (i < V && dr) dr[i] = g;
        if (i < V && d16) d16[i] = to_bf16(g);
    }
}

/* one block: loss_sum = sum of row_loss in a fixed order (block_sum_fixed) */
__global__ void k_ce_mean(ce_result_t *res, const float *row_loss, int N) {
    __shared__ double part[CE_THREADS];
    const double t = block_sum_fixed(row_loss, (size_t)(N > 0 ? N : 0), part);
    if (threadIdx.x == 0) res->loss_sum = t;
}

/* The forward (row_loss: N floats of work; res: device scratch, its ticket 0; cache_bytes: 0 or
 * V * 4 when the row fits the block's shared memory; apart: the count and the mean as kernels of
 * their own, k_ce_count and k_ce_mean, every time -- the layout before the last-block finish,
 * kept for comparing: the same bits) */
static inline void classifier_launch(cudaStream_t s, ce_result_t *res, float *row_loss, float *lse, float *dz,
                                     __nv_bfloat16 *dz16, int ld16, int pad16, const float *z, size_t ldz, const uint32_t *tgt,
                                     const uint8_t *mask, int N, int V, float dloss, int have_lse,
                                     size_t cache_bytes, int apart) {
    if (apart || mask || N <= 0) LAUNCH(k_ce_count, 1, CE_THREADS, 0, s)(res, mask, N);
    if (N <= 0) return;
    LAUNCH(k_classifier, N, CE_THREADS, cache_bytes, s)
    (row_loss, lse, dz, dz16, ld16, pad16, z, ldz, tgt, mask, res, V, dloss, have_lse, cache_bytes > 0, !apart);
    if (row_loss && apart) LAUNCH(k_ce_mean, 1, CE_THREADS, 0, s)(res, row_loss, N);
}
#endif
