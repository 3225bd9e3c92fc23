/* model/cuda/rows.cuh: row-wise kernels (one warp per row) and the two-stage column
 * reductions of the CUDA device: RMSNorm forward and backward (dx and the weight gradient in
 * one pass over the rows), sum_rows (bias sums). The row formulas are ops_math.h's
 * (ops_rmsnorm_row and its backward): the same expressions, evaluated with the row's sums
 * reduced across lanes.
 *
 * Column reductions (a weight gradient dw[c] = sum over rows of f(n, c)) never use atomics:
 * stage 1 gives each block a fixed range of rows and writes one partial row per block
 * (colred_partial); stage 2 (k_colred_finish) adds the partials in a fixed order (a warp per
 * range of partial rows, lanes over columns, then the warps' sums in warp order). The number of blocks depends on N alone (COLRED_ROWS rows per block), so the
 * result is the same on every run and every GPU. By default stage 2 is folded into stage 1's
 * last blocks (colred_finish_folded: the same additions in the same order, the same bits, no
 * launch of its own); FT_CUDA_FINISH=kernels launches k_colred_finish instead.
 *
 * Fast paths: D % 4 == 0 with 16-byte aligned rows uses 128-bit accesses, and rows of up to
 * ROW_CACHE_MAX floats stay in registers between a row's two passes (one read of x per row);
 * other shapes take the scalar loops, which compute the same expressions. */
#ifndef MODEL_CUDA_ROWS_CUH
#define MODEL_CUDA_ROWS_CUH
#include "model/cuda/common.cuh"
#include "model/ops_math.h"

/* float4 per lane kept in registers: rows up to 32 * 4 * 8 = 1024 floats */
#define ROW_VECS 8
#define ROW_CACHE_MAX (WARP * 4 * ROW_VECS)
/* rows per block of the column reductions' first stage: 8, a row per warp of RMSNorm's backward
 * (k_rmsnorm_bwd_vec), so that N rows fill N / 8 blocks (at config G, N = 8192: 1024 blocks of
 * 256 threads, about the H100's 270k resident threads; with 32 rows, 256 blocks kept a quarter
 * of them busy, bench/NOTES.md) */
#define COLRED_ROWS 8
#define COLRED_MAX_BLOCKS 4096

/* The norm's weight row, read by every row of a block: staged once per block in shared memory
 * (ws: WARP * ROW_VECS float4, D <= ROW_CACHE_MAX, w 16-byte aligned), so a block of ROW_WARPS
 * rows reads w from global memory once, not once per row (at config G: 3 KB a block where the
 * rows read 24 KB; the performance model credits no cache reuse, and on the GPU the re-reads
 * are L1 traffic). Lane l of a warp reads ws[l + j WARP]: 16 consecutive bytes per lane, no
 * bank conflict. Every thread of the block calls it (it holds a __syncthreads). */
__device__ static inline void stage_row_weights(float4 *ws, const float *w, int D) {
    for (int v = threadIdx.x; v < D / 4; v += blockDim.x) ws[v] = ld4(w + 4 * v);
    __syncthreads();
}

/* ---- RMSNorm forward: out = w * (x * r), r = 1 / sqrt(mean(x^2) + eps) ----
 * one warp per row; out16 (may be NULL): out's bf16 shadow, written beside it (the output
 * feeds products only); out NULL: the shadow alone (device.h products_only). With b (add_rmsnorm_forward): the row normed is x + b, written to y
 * in the same pass (the residual add fused; y may be x or b: each lane reads its elements
 * before it writes them). */
__global__ void __launch_bounds__(ROW_WARPS * WARP)
k_rmsnorm_fwd(float *out, __nv_bfloat16 *out16, float *rstd, float *y, const float *x, const float *b, const float *w,
              int N, int D, float eps) {
    __shared__ float4 ws[WARP * ROW_VECS];
    const int lane = threadIdx.x % WARP;
    const int row = blockIdx.x * ROW_WARPS + threadIdx.x / WARP;
    const float *xr = x + (size_t)row * D;
    const float *br = b ? b + (size_t)row * D : NULL;
    float *yr = b ? y + (size_t)row * D : NULL;
    float *orow = out ? out + (size_t)row * D : NULL; /* NULL: the shadow alone (products only) */
    __nv_bfloat16 *o16 = out16 ? out16 + (size_t)row * D : NULL;
    const bool vec = D % 4 == 0 && D <= ROW_CACHE_MAX && aligned16(x) && aligned16(out) && aligned16(w) &&
                     (!b || (aligned16(b) && aligned16(y))) && ((uintptr_t)out16 & 7u) == 0;
    /* vec is the same for every thread of the block (pointers and D): the whole block stages w */
    if (vec) stage_row_weights(ws, w, D);
    if (row >= N) return;
    if (vec) {
        float4 c[ROW_VECS];
        float ss = 0.0f;
#pragma unroll
        for (int j = 0; j < ROW_VECS; j++) {
            const int i = (lane + j * WARP) * 4;
            if (i < D) {
                c[j] = ld4_stream(xr + i);
                if (br) {
                    const float4 t = ld4_stream(br + i);
                    c[j].x = c[j].x + t.x;
                    c[j].y = c[j].y + t.y;
                    c[j].z = c[j].z + t.z;
                    c[j].w = c[j].w + t.w;
                    st4(yr + i, c[j]);
                }
                ss += c[j].x * c[j].x + c[j].y * c[j].y + c[j].z * c[j].z + c[j].w * c[j].w;
            }
        }
        ss = warp_sum(ss);
        const float r = 1.0f / sqrtf(ss / (float)D + eps);
#pragma unroll
        for (int j = 0; j < ROW_VECS; j++) {
            const int i = (lane + j * WARP) * 4;
            if (i < D) {
                const float4 wv = ws[lane + j * WARP];
                float4 o;
                o.x = wv.x * (c[j].x * r);
                o.y = wv.y * (c[j].y * r);
                o.z = wv.z * (c[j].z * r);
                o.w = wv.w * (c[j].w * r);
                if (orow) st4(orow + i, o);
                if (o16) st4_bf16(o16 + i, o.x, o.y, o.z, o.w);
            }
        }
        if (lane == 0) rstd[row] = r;
        return;
    }
    /* the scalar path: the sum written first, then read back as x (the lane's own elements) */
    if (br) {
        for (int i = lane; i < D; i += WARP) yr[i] = xr[i] + br[i];
        xr = yr;
    }
    float ss = 0.0f;
    for (int i = lane; i < D; i += WARP) ss += xr[i] * xr[i];
    ss = warp_sum(ss);
    const float r = 1.0f / sqrtf(ss / (float)D + eps);
    for (int i = lane; i < D; i += WARP) {
        const float o = w[i] * (xr[i] * r);
        if (orow) orow[i] = o;
        if (o16) o16[i] = to_bf16(o);
    }
    if (lane == 0) rstd[row] = r;
}

/* ---- stage 2 folded into stage 1 (tickets != NULL) ----
 * k_colred_finish's warp w adds the partial rows of group w ([w per, w per + per), per =
 * ceil(nb / COLRED_FIN_WARPS)) in order, then warp 0 adds the groups' sums in group order. Here the
 * last block of group w to write its partial row (an atomic ticket per group) adds the group's
 * rows into row w of gpart (COLRED_FIN_WARPS rows after the nb partial rows), and the last group
 * to finish (one more ticket) adds those rows in group order into out: the same additions in the
 * same order as the launch it replaces, so the same bits. Each finisher reads per (or
 * COLRED_FIN_WARPS) rows of D floats -- 96 KB at config G's 1024 x 768 -- where one finishing
 * block for all nb rows would stream 3 MB through one SM. Tickets: COLRED_TICKETS counters at 0
 * between launches (the finishers put theirs back; one stream, so launches do not overlap).
 * Called by every thread of the block after its partial row is written; go: a __shared__ int. */
#define COLRED_FIN_WARPS 32
#define COLRED_TICKETS (COLRED_FIN_WARPS + 1)
__device__ static inline void colred_finish_folded(float *out, int accumulate, unsigned *tickets, float *part,
                                                   int nb, int D, int *go) {
    const int per = (nb + COLRED_FIN_WARPS - 1) / COLRED_FIN_WARPS, groups = (nb + per - 1) / per;
    const int g = blockIdx.x / per, b0 = g * per, b1 = min(nb, b0 + per);
    /* groups of one row (nb <= COLRED_FIN_WARPS): a group's sum 0 + x is x but for x = -0, and t,
     * a sum from +0, is never -0 (t + -0 = t + +0 = t), so the last block adds the partial rows
     * themselves: the same bits, one ticket, no copy */
    float *gpart = per == 1 ? part : part + (size_t)nb * D;
    __threadfence(); /* this block's partial row, seen by the group's finisher */
    __syncthreads();
    if (per > 1) {
        if (threadIdx.x == 0) *go = atomicAdd(&tickets[g], 1u) == (unsigned)(b1 - b0 - 1);
        __syncthreads();
        if (!*go) return;
        __threadfence();
        for (int c = threadIdx.x; c < D; c += blockDim.x) {
            float s = 0.0f;
            for (int b = b0; b < b1; b++) s += part[(size_t)b * D + c];
            gpart[(size_t)g * D + c] = s;
        }
        __threadfence();
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        if (per > 1) atomicExch(&tickets[g], 0u);
        *go = atomicAdd(&tickets[COLRED_FIN_WARPS], 1u) == (unsigned)(groups - 1);
    }
    __syncthreads();
    if (!*go) return;
    __threadfence();
    for (int c = threadIdx.x; c < D; c += blockDim.x) {
        float t = 0.0f;
        for (int i = 0; i < COLRED_FIN_WARPS; i++) t += i < groups ? gpart[(size_t)i * D + c] : 0.0f;
        out[c] = accumulate ? out[c] + t : t;
    }
    if (threadIdx.x == 0) atomicExch(&tickets[COLRED_FIN_WARPS], 0u);
}

/* ---- RMSNorm backward ----
 * dx += r w dy - c x with c = r^3 / D sum(w dy x) (ops_rmsnorm_row_backward), one warp per
 * row; with dw_part, block b also writes row b of the weight gradient's stage-1 partials:
 * sum over its rows (COLRED_ROWS, rows b*R .. b*R+R-1 with R = rows_per_block) of dy x r,
 * the warps' sums added in warp order. Vector path only (D % 4 == 0, D <= ROW_CACHE_MAX,
 * aligned); the general shapes run k_rmsnorm_bwd_dx and the generic column reduction. dx16 (may be
 * NULL): dx's bf16 shadow, written beside the new dx (the residual stream's gradient, which the
 * next products read: device_cuda.cu's shadows). res (rmsnorm_backward_res): dx = res + the
 * row's term instead of dx += it (res = dx is the same). tickets (with dw_part): the weight
 * gradient's stage 2 folded in, dw += the partials' sum (colred_finish_folded); NULL: the partials
 * only (k_colred_finish adds them). dw_acc 0: dw = the sum, dw not read (its zeros deferred,
 * device_cuda.cu: the same bits, a sum from +0 is never -0). */
__global__ void __launch_bounds__(ROW_WARPS * WARP)
k_rmsnorm_bwd_vec(float *dx, __nv_bfloat16 *dx16, float *dw_part, const float *dout, const float *x, const float *w,
                  const float *rstd, const float *res, int N, int D, int rows_per_block, float *dw, unsigned *tickets,
                  int dw_acc) {
    __shared__ float4 red[ROW_WARPS][WARP * ROW_VECS];
    __shared__ float4 ws[WARP * ROW_VECS];
    __shared__ int go;
    const int lane = threadIdx.x % WARP, wp = threadIdx.x / WARP;
    const int r0 = blockIdx.x * rows_per_block, r1 = min(N, r0 + rows_per_block);
    stage_row_weights(ws, w, D);
    float4 acc[ROW_VECS];
#pragma unroll
    for (int j = 0; j < ROW_VECS; j++) acc[j] = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int row = r0 + wp; row < r1; row += ROW_WARPS) {
        const float *dy = dout + (size_t)row * D, *xr = x + (size_t)row * D;
        const float r = rstd[row];
        float4 cy[ROW_VECS], cx[ROW_VECS];
        float dot = 0.0f;
#pragma unroll
        for (int j = 0; j < ROW_VECS; j++) {
            const int i = (lane + j * WARP) * 4;
            if (i < D) {
                cy[j] = ld4_stream(dy + i);
                cx[j] = ld4(xr + i);
                const float4 wv = ws[lane + j * WARP];
                dot += wv.x * cy[j].x * cx[j].x + wv.y * cy[j].y * cx[j].y + wv.z * cy[j].z * cx[j].z +
                       wv.w * cy[j].w * cx[j].w;
                acc[j].x += cy[j].x * cx[j].x * r;
                acc[j].y += cy[j].y * cx[j].y * r;
                acc[j].z += cy[j].z * cx[j].z * r;
                acc[j].w += cy[j].w * cx[j].w * r;
            }
        }
        dot = warp_sum(dot);
        if (dx) {
            const float c = dot * r * r * r / (float)D;
            float *dxr = dx + (size_t)row * D;
#pragma unroll
            for (int j = 0; j < ROW_VECS; j++) {
                const int i = (lane + j * WARP) * 4;
                if (i < D) {
                    const float4 wv = ws[lane + j * WARP];
                    float4 g = ld4(res + (size_t)row * D + i);
                    g.x += r * wv.x * cy[j].x - c * cx[j].x;
                    g.y += r * wv.y * cy[j].y - c * cx[j].y;
                    g.z += r * wv.z * cy[j].z - c * cx[j].z;
                    g.w += r * wv.w * cy[j].w - c * cx[j].w;
                    st4(dxr + i, g);
                    if (dx16) st4_bf16(dx16 + (size_t)row * D + i, g.x, g.y, g.z, g.w);
                }
            }
        }
    }
    if (!dw_part) return;
#pragma unroll
    for (int j = 0; j < ROW_VECS; j++) red[wp][lane + j * WARP] = acc[j];
    __syncthreads();
    /* the block's partial row: warps added in order 0, 1, ..., ROW_WARPS - 1 */
    for (int v = threadIdx.x; v < D / 4; v += blockDim.x) {
        float4 s = red[0][v];
        for (int k = 1; k < ROW_WARPS; k++) {
            const float4 t = red[k][v];
            s.x += t.x;
            s.y += t.y;
            s.z += t.z;
            s.w += t.w;
        }
        st4(dw_part + (size_t)blockIdx.x * D + 4 * v, s);
    }
    if (tickets) colred_finish_folded(dw, dw_acc, tickets, dw_part, gridDim.x, D, &go);
}
/* the general shapes: dx only, one warp per row, scalar */
__global__ void __launch_bounds__(ROW_WARPS * WARP)
k_rmsnorm_bwd_dx(float *dx, __nv_bfloat16 *dx16, const float *dout, const float *x, const float *w, const float *rstd,
                 const float *res, int N, int D) {
    const int lane = threadIdx.x % WARP;
    const int row = blockIdx.x * ROW_WARPS + threadIdx.x / WARP;
    if (row >= N) return;
    const float *dy = dout + (size_t)row * D, *xr = x + (size_t)row * D;
    const float r = rstd[row];
    float dot = 0.0f;
    for (int i = lane; i < D; i += WARP) dot += w[i] * dy[i] * xr[i];
    dot = warp_sum(dot);
    const float c = dot * r * r * r / (float)D;
    float *dxr = dx + (size_t)row * D;
    for (int i = lane; i < D; i += WARP) {
        dxr[i] = res[(size_t)row * D + i] + (r * w[i] * dy[i] - c * xr[i]);
        if (dx16) dx16[(size_t)row * D + i] = to_bf16(dxr[i]);
    }
}

/* ---- the generic column reduction ----
 * stage 1: block b sums rows [b R, b R + R) of f(n, c) for every column c (threads stride
 * over columns, rows in order); kinds of f: */
enum { COLRED_SUM = 0,      /* x[n][c] */
       COLRED_RMS_DW = 1 }; /* dy[n][c] x[n][c] r[n] */
__global__ void k_colred_partial(float *part, const float *a, const float *b, const float *r, int N, int D,
                                 int rows_per_block, int kind, float *out, int accumulate, unsigned *tickets) {
    __shared__ int go;
    const int r0 = blockIdx.x * rows_per_block, r1 = min(N, r0 + rows_per_block);
    const bool vec = D % 4 == 0 && aligned16(a) && (!b || aligned16(b));
    if (vec) {
        for (int v = threadIdx.x; v < D / 4; v += blockDim.x) {
            float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
            for (int n = r0; n < r1; n++) {
                const float4 p = ld4(a + (size_t)n * D + 4 * v);
                if (kind == COLRED_SUM) {
                    s.x += p.x;
                    s.y += p.y;
                    s.z += p.z;
                    s.w += p.w;
                } else {
                    const float4 q = ld4(b + (size_t)n * D + 4 * v);
                    const float rn = r[n];
                    s.x += p.x * q.x * rn;
                    s.y += p.y * q.y * rn;
                    s.z += p.z * q.z * rn;
                    s.w += p.w * q.w * rn;
                }
            }
            st4(part + (size_t)blockIdx.x * D + 4 * v, s);
        }
    } else {
        for (int c = threadIdx.x; c < D; c += blockDim.x) {
            float s = 0.0f;
            for (int n = r0; n < r1; n++)
                s += kind == COLRED_SUM ? a[(size_t)n * D + c] : a[(size_t)n * D + c] * b[(size_t)n * D + c] * r[n];
            part[(size_t)blockIdx.x * D + c] = s;
        }
    }
    if (tickets) colred_finish_folded(out, accumulate, tickets, part, gridDim.x, D, &go);
}
/* stage 2: out[c] (+)= sum over the nb partial rows. A block of COLRED_FIN_WARPS warps takes
 * WARP consecutive columns (lane = column: a warp reads 128 contiguous bytes); warp w adds
 * its fixed range of partial rows in order, then warp 0 adds the warps' sums in warp order --
 * an order fixed by nb and D alone. */
__global__ void k_colred_finish(float *out, const float *part, int nb, int D, int accumulate) {
    __shared__ float red[COLRED_FIN_WARPS][WARP + 1];
    const int lane = threadIdx.x % WARP, w = threadIdx.x / WARP, nw = blockDim.x / WARP;
    const int c = blockIdx.x * WARP + lane;
    const int per = (nb + nw - 1) / nw, b0 = w * per, b1 = b0 + per < nb ? b0 + per : nb;
    float s = 0.0f;
    if (c < D)
        for (int b = b0; b < b1; b++) s += part[(size_t)b * D + c];
    red[w][lane] = s;
    __syncthreads();
    if (w != 0 || c >= D) return;
    float t = 0.0f;
    for (int i = 0; i < nw; i++) t += red[i][lane];
    out[c] = accumulate ? out[c] + t : t;
}
static inline unsigned colred_finish_blocks(int D) { return (unsigned)((D + WARP - 1) / WARP); }

/* blocks of the first stage and rows per block, from N alone */
static inline void colred_split(int N, int *blocks, int *rows_per_block) {
    int nb = (N + COLRED_ROWS - 1) / COLRED_ROWS;
    if (nb < 1) nb = 1;
    if (nb > COLRED_MAX_BLOCKS) nb = COLRED_MAX_BLOCKS;
    *rows_per_block = (N + nb - 1) / nb;
    *blocks = N > 0 ? (N + *rows_per_block - 1) / *rows_per_block : 1;
}
/* work floats the column reductions need for N rows of D (the partial rows, then the folded
 * finish's group rows) */
static inline size_t colred_work_floats(int N, int D) {
    int nb, rpb;
    colred_split(N, &nb, &rpb);
    return (size_t)(nb + COLRED_FIN_WARPS) * D;
}

/* ---- launchers (the device's op wrappers call these; part: colred_work_floats) ---- */
/* y, b: NULL, or the fused residual add (y = x + b, normed) */
static inline void rmsnorm_forward_launch(cudaStream_t s, float *out, __nv_bfloat16 *out16, float *rstd, float *y,
                                          const float *x, const float *b, const float *w, int N, int D, float eps) {
    if (N <= 0) return;
    LAUNCH(k_rmsnorm_fwd, blocks_for((size_t)N, ROW_WARPS, 1u << 30), ROW_WARPS * WARP, 0, s)
    (out, out16, rstd, y, x, b, w, N, D, eps);
}
/* tickets: COLRED_TICKETS counters at 0 (the finish folded into stage 1), or NULL (k_colred_finish) */
static inline void colsum_launch(cudaStream_t s, float *out, float *part, unsigned *tickets, const float *a,
                                 const float *b, const float *r, int N, int D, int kind, int accumulate) {
    if (D <= 0) return;
    int nb, rpb;
    colred_split(N, &nb, &rpb);
    if (N > 0) LAUNCH(k_colred_partial, nb, 256, 0, s)(part, a, b, r, N, D, rpb, kind, out, accumulate, tickets);
    if (N <= 0 || !tickets)
        LAUNCH(k_colred_finish, colred_finish_blocks(D), COLRED_FIN_WARPS * WARP, 0, s)
        (out, part, N > 0 ? nb : 0, D, accumulate);
}
/* res: NULL (dx +=) or dx = res + the term */
static inline void rmsnorm_backward_launch(cudaStream_t s, float *dx, __nv_bfloat16 *dx16, float *dw, float *part,
                                           unsigned *tickets, const float *dout, const float *x, const float *w, const float *rstd,
                                           const float *res, int N, int D, int dw_acc = 1) {
    if (N <= 0) return;
    if (!res) res = dx;
    const bool vec = D % 4 == 0 && D <= ROW_CACHE_MAX && aligned16(dout) && aligned16(x) && aligned16(w) &&
                     (!dx || (aligned16(dx) && aligned16(res))) && ((uintptr_t)dx16 & 7u) == 0;
    if (vec) {
        int nb, rpb;
        colred_split(N, &nb, &rpb);
        LAUNCH(k_rmsnorm_bwd_vec, nb, ROW_WARPS * WARP, 0, s)
        (dx, dx16, dw ? part : NULL, dout, x, w, rstd, res, N, D, rpb, dw, dw ? tickets : NULL, dw_acc);
        if (dw && !tickets) LAUNCH(k_colred_finish, colred_finish_blocks(D), COLRED_FIN_WARPS * WARP, 0, s)(dw, part, nb, D, dw_acc);
        return;
    }
    if (dx)
        LAUNCH(k_rmsnorm_bwd_dx, blocks_for((size_t)N, ROW_WARPS, 1u << 30), ROW_WARPS * WARP, 0, s)
        (dx, dx16, dout, x, w, rstd, res, N, D);
    if (dw) colsum_launch(s, dw, part, tickets, dout, x, rstd, N, D, COLRED_RMS_DW, dw_acc);
}
#endif
