/* model/cuda/embedding.cuh: the token embedding on the CUDA device. The forward is a gather,
 * one warp per row with 128-bit copies. The backward, dtable[v] += sum of dout[n] over the
 * rows n with token v, is a column reduction whose rows are chosen by the tokens; it runs
 * without atomics, in an order fixed by the tokens alone:
 *
 *   1. a stable sort of the rows by token: two passes of a radix sort on 16-bit digits
 *      (low, then high; the table op does not know the vocabulary size), each pass
 *        k_emb_rank   blocks of EMB_BLOCK positions: a position's rank among the earlier
 *                     ones of its block with the same digit; the block's count of each digit
 *                     (written by the digit's last position into hist[block][digit]);
 *        k_emb_prefix per digit, the counts of earlier blocks (hist becomes an exclusive
 *                     prefix over blocks) and the digit's total;
 *        k_emb_scan   per digit, its first position (an exclusive scan of the totals);
 *        k_emb_place  position p moves to start[d] + hist[block][d] + rank;
 *   2. k_emb_heads: each sorted position's segment head (the first position of its token), a
 *      prefix maximum in one block;
 *   3. k_emb_pieces: the sorted rows in pieces of EMB_PIECE rows of one token, one warp per
 *      piece and 128 columns, rows added in order; a token with one piece adds it to dtable,
 *      a longer one writes its pieces to scratch and k_emb_join adds them in order (bounded
 *      work per warp however frequent a token is).
 *
 * Every step is linear in the rows, none depends on the launch order: the same bits on every
 * run. */
#ifndef MODEL_CUDA_EMBEDDING_CUH
#define MODEL_CUDA_EMBEDDING_CUH
#include "model/cuda/common.cuh"

#define EMB_BLOCK 1024
#define EMB_PIECE 32
#define EMB_COLS 128 /* columns per warp (a float4 per lane) */

/* out row n = table row tok[n]; one warp per row */
__global__ void k_emb_fwd(float *out, const uint32_t *tok, const float *table, int N, int D) {
    const int row = blockIdx.x * ROW_WARPS + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (row >= N) return;
    const float *src = table + (size_t)tok[row] * D;
    float *dst = out + (size_t)row * D;
    if (D % 4 == 0 && aligned16(table) && aligned16(out)) {
        for (int i = 4 * lane; i < D; i += 4 * WARP) st4(dst + i, ld4(src + i));
        return;
    }
    for (int i = lane; i < D; i += WARP) dst[i] = src[i];
}

#define EMB_DIGITS 65536
__device__ static inline uint32_t emb_digit(const uint32_t *tok, const int *src, int p, int shift) {
    return (tok[src ? src[p] : p] >> shift) & (EMB_DIGITS - 1);
}
/* positions [b EMB_BLOCK, ...) of the order src (NULL: the identity) */
__global__ void __launch_bounds__(EMB_BLOCK)
k_emb_rank(int *rank, int *hist, const uint32_t *tok, const int *src, int N, int shift) {
    __shared__ uint32_t sd[EMB_BLOCK];
    const int p0 = blockIdx.x * EMB_BLOCK, nb = min(EMB_BLOCK, N - p0), i = threadIdx.x;
    if (i < nb) sd[i] = emb_digit(tok, src, p0 + i, shift);
    __syncthreads();
    if (i >= nb) return;
    const uint32_t me = sd[i];
    int before = 0, after = 0;
    for (int j = 0; j < nb; j++) {
        const int same = sd[j] == me;
        before += same && j < i;
        after += same && j > i;
    }
    rank[p0 + i] = before;
    if (after == 0) hist[(size_t)blockIdx.x * EMB_DIGITS + me] = before + 1;
}
/* one thread per digit: hist[b][d] <- positions with digit d in blocks before b; total[d] */
__global__ void k_emb_prefix(int *hist, int *total, int nblocks) {
    const int d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= EMB_DIGITS) return;
    int run = 0;
    for (int b = 0; b < nblocks; b++) {
        const int c = hist[(size_t)b * EMB_DIGITS + d];
        hist[(size_t)b * EMB_DIGITS + d] = run;
        run += c;
    }
    total[d] = run;
}
/* one block over n values: out[i] = the exclusive sum (op 0) of in[0..i), or the inclusive
 * maximum (op 1) of in[0..i]; each thread a contiguous run, the runs combined by thread 0
 * (integers: exact in any order) */
__global__ void k_emb_scan(int *out, const int *in, int n, int op) {
    __shared__ int sums[1024];
    const int per = (n + blockDim.x - 1) / blockDim.x, lo = threadIdx.x * per, hi = min(n, lo + per);
    int s = op ? -1 : 0;
    for (int v = lo; v < hi; v++) s = op ? max(s, in[v]) : s + in[v];
    sums[threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        int run = op ? -1 : 0;
        for (int k = 0; k < (int)blockDim.x; k++) {
            const int c = sums[k];
            sums[k] = run;
            run = op ? max(run, c) : run + c;
        }
    }
    __syncthreads();
    int run = sums[threadIdx.x];
    for (int v = lo; v < hi; v++) {
        if (op) run = max(run, in[v]), out[v] = run;
        else out[v] = run, run += in[v];
    }
}
__global__ void k_emb_place(int *dst, const int *src, const int *rank, const int *hist, const int *start,
                            const uint32_t *tok, int N, int shift) {
    const int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= N) return;
    const uint32_t d = emb_digit(tok, src, p, shift);
    dst[start[d] + hist[(size_t)(p / EMB_BLOCK) * EMB_DIGITS + d] + rank[p]] = src ? src[p] : p;
}
/* heads[p] = p where the token changes (0 elsewhere; the scan then takes the maximum) */
__global__ void k_emb_heads(int *heads, const int *sorted, const uint32_t *tok, int N) {
    const int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= N) return;
    heads[p] = (p == 0 || tok[sorted[p]] != tok[sorted[p - 1]]) ? p : 0;
}
/* one warp per (sorted position p starting a piece, 128-column tile) */
__global__ void k_emb_pieces(float *dtable, float *scratch, const int *sorted, const int *head, const float *dout,
                             const uint32_t *tok, int N, int D) {
    const size_t wi = (size_t)blockIdx.x * ROW_WARPS + threadIdx.x / WARP;
    const int lane = threadIdx.x % WARP, tiles = (D + EMB_COLS - 1) / EMB_COLS;
    if (wi >= (size_t)N * tiles) return;
    const int p = (int)(wi / tiles), c0 = (int)(wi % tiles) * EMB_COLS, h = head[p];
    if ((p - h) % EMB_PIECE) return;
    const uint32_t v = tok[sorted[p]];
    int end = p + 1;
    while (end < N && end < p + EMB_PIECE && head[end] == h) end++;
    /* the token's only piece: straight into the table; else a piece of scratch */
    const bool only = h == p && (end == N || head[end] != h);
    float *dst = only ? dtable + (size_t)v * D : scratch + (size_t)p * D;
    if (D % 4 == 0 && aligned16(dout) && aligned16(dtable) && aligned16(scratch)) {
        const int c = c0 + 4 * lane;
        if (c >= D) return;
        float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int q = p; q < end; q++) {
            const float4 x = ld4(dout + (size_t)sorted[q] * D + c);
            s.x += x.x, s.y += x.y, s.z += x.z, s.w += x.w;
        }
        if (only) {
            const float4 o = ld4(dst + c);
            s.x += o.x, s.y += o.y, s.z += o.z, s.w += o.w;
        }
        st4(dst + c, s);
        return;
    }
    for (int c = c0 + lane; c < min(D, c0 + EMB_COLS); c += WARP) {
        float s = 0.0f;
        for (int q = p; q < end; q++) s += dout[(size_t)sorted[q] * D + c];
        dst[c] = only ? dst[c] + s : s;
    }
}
/* one warp per (token of more than one piece, 128-column tile): its pieces in order */
__global__ void k_emb_join(float *dtable, const float *scratch, const int *sorted, const int *head,
                           const uint32_t *tok, int N, int D) {
    const size_t wi = (size_t)blockIdx.x * ROW_WARPS + threadIdx.x / WARP;
    const int lane = threadIdx.x % WARP, tiles = (D + EMB_COLS - 1) / EMB_COLS;
    if (wi >= (size_t)N * tiles) return;
    const int p = (int)(wi / tiles), c0 = (int)(wi % tiles) * EMB_COLS;
    if (head[p] != p || p + EMB_PIECE >= N || head[p + EMB_PIECE] != p) return;
    const uint32_t v = tok[sorted[p]];
    for (int c = c0 + lane; c < min(D, c0 + EMB_COLS); c += WARP) {
        float s = 0.0f;
        for (int q = p; q < N && head[q] == p; q += EMB_PIECE) s += scratch[(size_t)q * D + c];
        dtable[(size_t)v * D + c] += s;
    }
}

/* the backward's scratch: ints, then N x D floats */
static inline size_t emb_ints(int N) {
    const size_t nb = (size_t)(N + EMB_BLOCK - 1) / EMB_BLOCK;
    return 4 * (size_t)N + nb * EMB_DIGITS + 2 * (size_t)EMB_DIGITS;
}
static inline size_t emb_work_bytes(int N, int D) {
    return ((emb_ints(N) * sizeof(int) + 15) & ~(size_t)15) + sizeof(float) * (size_t)N * D;
}
static inline void embedding_forward_launch(cudaStream_t s, float *out, const uint32_t *tok, const float *table,
                                            int N, int D) {
    if (N <= 0) return;
    LAUNCH(k_emb_fwd, blocks_for((size_t)N, ROW_WARPS, 1u << 30), ROW_WARPS * WARP, 0, s)(out, tok, table, N, D);
}
static inline cudaError_t embedding_backward_launch(cudaStream_t s, void *work, float *dtable, const float *dout,
                                                    const uint32_t *tok, int N, int D) {
    if (N <= 0 || D <= 0) return cudaSuccess;
    const int nb = (N + EMB_BLOCK - 1) / EMB_BLOCK;
    int *rank = (int *)work, *order = rank + N, *sorted = order + N, *head = sorted + N;
    int *hist = head + N, *total = hist + (size_t)nb * EMB_DIGITS, *start = total + EMB_DIGITS;
    float *scratch = (float *)((char *)work + ((emb_ints(N) * sizeof(int) + 15) & ~(size_t)15));
    for (int pass = 0; pass < 2; pass++) {
        const int shift = 16 * pass;
        const int *src = pass ? order : NULL;
        int *dst = pass ? sorted : order;
        cudaError_t e = cudaMemsetAsync(hist, 0, sizeof(int) * (size_t)nb * EMB_DIGITS, s);
        if (e != cudaSuccess) return e;
        LAUNCH(k_emb_rank, nb, EMB_BLOCK, 0, s)(rank, hist, tok, src, N, shift);
        LAUNCH(k_emb_prefix, EMB_DIGITS / 256, 256, 0, s)(hist, total, nb);
        LAUNCH(k_emb_scan, 1, 1024, 0, s)(start, total, EMB_DIGITS, 0);
        LAUNCH(k_emb_place, blocks_for((size_t)N, 256, 1u << 30), 256, 0, s)(dst, src, rank, hist, start, tok, N, shift);
    }
    LAUNCH(k_emb_heads, blocks_for((size_t)N, 256, 1u << 30), 256, 0, s)(rank, sorted, tok, N);
    LAUNCH(k_emb_scan, 1, 1024, 0, s)(head, rank, N, 1);
    const size_t warps = (size_t)N * ((D + EMB_COLS - 1) / EMB_COLS);
    LAUNCH(k_emb_pieces, blocks_for(warps, ROW_WARPS, 1u << 30), ROW_WARPS * WARP, 0, s)
    (dtable, scratch, sorted, head, dout, tok, N, D);
    LAUNCH(k_emb_join, blocks_for(warps, ROW_WARPS, 1u << 30), ROW_WARPS * WARP, 0, s)
    (dtable, scratch, sorted, head, tok, N, D);
    return cudaSuccess;
}
#endif
