/* model/cuda/adamw.cuh: the optimizer over a whole list of tensors in one launch each --
 * the gradient norm's sum of squares and AdamW's update (ops_math.h ops_adamw_element) --
 * so that a step costs two launches and one host synchronisation (the norm, which the host
 * needs for clipping and for the metrics), not two launches and a download per tensor.
 *
 * Both walk the tensors in chunks of OPS_SUMSQ_CHUNK elements counted from each tensor's
 * start (ops_adamw.c's chunks): chunk c of the list belongs to the tensor whose first chunk
 * index (chunk0, a prefix sum over the list) is the largest <= c. The sum of squares is one
 * double per chunk (a warp's lanes, then its shuffle tree), then the last block of that launch
 * (an atomic ticket counts the blocks done) adds the chunk sums in an order fixed by their
 * count (block_sum_fixed_width at MT_FINISH_THREADS): the same bits on every run, not the CPU's
 * order (CPU and GPU norms agree to double rounding). Opened with FT_CUDA_FINISH=kernels the
 * device adds them in a second launch instead (k_sumsq_finish, one block of MT_FINISH_THREADS:
 * the same order, the same bits). */
#ifndef MODEL_CUDA_ADAMW_CUH
#define MODEL_CUDA_ADAMW_CUH
#include "model/cuda/common.cuh"
#include "model/ops_math.h"

typedef struct {
    float *p, *g, *m, *v;
    size_t n;
    size_t chunk0;     /* index of the tensor's first chunk in the list */
    int decay;         /* apply the decay multiplier */
    int pad_;
    __nv_bfloat16 *p16; /* p's bf16 shadow (device_cuda.cu), refreshed in the update's pass, or NULL */
} mt_tensor_t;

typedef struct {
    float clip, decay_mul, b1, b2, eps, step_size, bc2_sqrt;
} mt_scalars_t;

#define MT_FINISH_THREADS 1024

__host__ __device__ static inline size_t mt_min(size_t a, size_t b) { return a < b ? a : b; }
/* the tensor of chunk c (binary search over chunk0) */
__device__ static inline int mt_tensor_of(const mt_tensor_t *t, int count, size_t c) {
    int lo = 0, hi = count - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (t[mid].chunk0 <= c) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* one warp per chunk: part[c] = sum over the chunk of x^2, in double. finish: then the last block
 * to be done writes *total (k_sumsq_finish's sum) and sets *ticket (0 at the launch) back to 0 */
__global__ void k_sumsq_chunks(double *part, const mt_tensor_t *t, int count, size_t chunks, double *total,
                               unsigned *ticket, int finish) {
    const size_t c = (size_t)blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    const int lane = threadIdx.x % WARP;
    if (c < chunks) {
        const mt_tensor_t *x = &t[mt_tensor_of(t, count, c)];
        const size_t lo = (c - x->chunk0) * OPS_SUMSQ_CHUNK, hi = mt_min(x->n, lo + (size_t)OPS_SUMSQ_CHUNK);
        const float *g = x->g;
        double s = 0.0;
        if (aligned16(g) && lo % 4 == 0 && (hi - lo) % 4 == 0) {
            for (size_t i = lo + 4 * lane; i < hi; i += 4 * WARP) {
                const float4 v = ld4(g + i);
                s += (double)v.x * v.x + (double)v.y * v.y + (double)v.z * v.z + (double)v.w * v.w;
            }
        } else {
            for (size_t i = lo + lane; i < hi; i += WARP) s += (double)g[i] * g[i];
        }
        s = warp_sum_d(s);
        if (lane == 0) {
            part[c] = s;
            if (finish) __threadfence(); /* seen by whichever block is last */
        }
    }
    if (!finish) return;
    __shared__ int last;
    __shared__ double red[MT_FINISH_THREADS];
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(ticket, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    const double tot = block_sum_fixed_width(part, chunks, red, MT_FINISH_THREADS);
    if (threadIdx.x == 0) *total = tot, atomicExch(ticket, 0u);
}
/* one block: *total = sum of part (block_sum_fixed: strided per thread, so a warp's lanes read
 * consecutive doubles, then a tree; the order is fixed by chunks alone) */
__global__ void k_sumsq_finish(double *total, const double *part, size_t chunks) {
    __shared__ double red[MT_FINISH_THREADS];
    const double t = block_sum_fixed(part, chunks, red);
    if (threadIdx.x == 0) *total = t;
}

/* one block per chunk: AdamW on its elements, 30 bytes an element moved (p, g, m, v read; p, m,
 * v and the bf16 shadow written). g is read only (ops_adamw_element clips it in a register): a
 * clipped step stored it back before, 34 bytes an element (bench/NOTES.md 2026-11-27). The scalars are
 * read from the launch's parameters on a GPU; the emulator's x86-64 call passes the 28-byte
 * struct on the fiber's stack, which its counters report as local memory (no local memory in
 * nvcc's build: bench/NOTES.md) */
__device__ static inline void mt_adamw1(float *p, const float *g, float *m, float *v, const mt_scalars_t &s, float dm) {
    ops_adamw_element(p, g, m, v, s.clip, dm, s.b1, s.b2, s.eps, s.step_size, s.bc2_sqrt);
}
__global__ void k_adamw_multi(const mt_tensor_t *t, int count, mt_scalars_t s) {
    /* the chunk's tensor found and its entry read once a block, by one thread, not by each of the
     * 8 warps (their searches over the list were 4% of the launch's sectors at config G) */
    __shared__ mt_tensor_t tx;
    const size_t c = blockIdx.x;
    if (threadIdx.x == 0) tx = t[mt_tensor_of(t, count, c)];
    __syncthreads();
    const mt_tensor_t *x = &tx;
    const size_t lo = (c - x->chunk0) * OPS_SUMSQ_CHUNK, hi = mt_min(x->n, lo + (size_t)OPS_SUMSQ_CHUNK);
    const float dm = x->decay ? s.decay_mul : 1.0f;
    float *p = x->p, *m = x->m, *v = x->v;
    const float *g = x->g;
    __nv_bfloat16 *p16 = x->p16;
    if (aligned16(p) && aligned16(g) && aligned16(m) && aligned16(v) && ((uintptr_t)p16 & 7u) == 0 && lo % 4 == 0 &&
        (hi - lo) % 4 == 0) {
        for (size_t i = lo + 4 * threadIdx.x; i < hi; i += 4 * blockDim.x) {
            const float4 P = ld4(p + i), G = ld4(g + i), M = ld4(m + i), Vv = ld4(v + i);
            float pp[4] = {P.x, P.y, P.z, P.w}, gg[4] = {G.x, G.y, G.z, G.w};
            float mm[4] = {M.x, M.y, M.z, M.w}, vv[4] = {Vv.x, Vv.y, Vv.z, Vv.w};
#pragma unroll
            for (int j = 0; j < 4; j++) mt_adamw1(&pp[j], &gg[j], &mm[j], &vv[j], s, dm);
            st4(p + i, make_float4(pp[0], pp[1], pp[2], pp[3]));
            st4(m + i, make_float4(mm[0], mm[1], mm[2], mm[3]));
            st4(v + i, make_float4(vv[0], vv[1], vv[2], vv[3]));
            if (p16) st4_bf16(p16 + i, pp[0], pp[1], pp[2], pp[3]);
        }
        return;
    }
    for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        mt_adamw1(&p[i], &g[i], &m[i], &v[i], s, dm);
        if (p16) p16[i] = to_bf16(p[i]);
    }
}

/* chunks of a list (fills chunk0) */
static inline size_t mt_layout(mt_tensor_t *t, int count) {
    size_t c = 0;
    for (int i = 0; i < count; i++) {
        t[i].chunk0 = c;
        c += (t[i].n + OPS_SUMSQ_CHUNK - 1) / OPS_SUMSQ_CHUNK;
    }
    return c;
}
/* ticket: a device counter at 0 (k_sumsq_chunks leaves it at 0); apart: the sum finished by
 * k_sumsq_finish (FT_CUDA_FINISH=kernels) */
static inline void sumsq_multi_launch(cudaStream_t s, double *total, double *part, unsigned *ticket,
                                      const mt_tensor_t *t_dev, int count, size_t chunks, int apart) {
    if (chunks)
        LAUNCH(k_sumsq_chunks, blocks_for(chunks, 8, 1u << 30), 8 * WARP, 0, s)
        (part, t_dev, count, chunks, total, ticket, !apart);
    if (apart || !chunks) LAUNCH(k_sumsq_finish, 1, MT_FINISH_THREADS, 0, s)(total, part, chunks);
}
static inline void adamw_multi_launch(cudaStream_t s, const mt_tensor_t *t_dev, int count, size_t chunks,
                                      const mt_scalars_t &sc) {
    if (chunks) LAUNCH(k_adamw_multi, (unsigned)chunks, 256, 0, s)(t_dev, count, sc);
}
#endif
