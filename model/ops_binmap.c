/* model/ops_binmap.c: the Binary Mapper (seed 000 eq. 6-8), its KL, and the post-sampler.
 *
 * Bit h of an index d is (d >> h) & 1 (h = 0..H-1): the paper's d = 1 + sum 2^(h-1) B_h
 * with 0-based indices. */
#include "common/rng.h"
#include "model/gemm.h"
#include "model/ops.h"
#include "model/ops_math.h"
#include <math.h>
#include <omp.h>
#include <string.h>

/* Rows of dZ = dR W_post computed at once in the backward: bounds the work buffer to
 * BINMAP_CHUNK * 2^H floats (16 MiB at H = 16) while keeping the product a real matrix
 * product. */
#define BINMAP_CHUNK 64


void binmap_forward(uint32_t *idx, float *prob, const float *logits, const float *u, int N, int H) {
    for (int n = 0; n < N; n++) {
        uint32_t d = 0;
        for (int h = 0; h < H; h++) {
            float p = ops_binmap_prob(logits[(size_t)n * H + h]);
            prob[(size_t)n * H + h] = p;
            if (u[(size_t)n * H + h] < p) d |= 1u << h;
        }
        idx[n] = d;
    }
}

void binmap_probs(float *G, const float *prob, int H) {
    /* doubling: after bit h, G[0 .. 2^(h+1)) holds the joint probabilities of bits 0..h */
    G[0] = 1.0f;
    for (int h = 0; h < H; h++) {
        size_t half = (size_t)1 << h;
        float p = prob[h];
        for (size_t j = 0; j < half; j++) {
            G[j + half] = G[j] * p;
            G[j] *= 1.0f - p;
        }
    }
}

void binmap_backward(float *dlogits, float *dz, const float *prob, int N, int H) {
    const size_t K = (size_t)1 << H;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        ops_binmap_backward_row(dlogits + (size_t)n * H, dz + (size_t)n * K, prob + (size_t)n * H, H);
}

float binmap_kl(const float *logits, int H) { return ops_binmap_kl_row(logits, H); }

void binmap_kl_backward(float *dlogits, const float *logits, int H, float scale) {
    ops_binmap_kl_row_backward(dlogits, logits, H, scale);
}

void binmap_kl_rows(float *kl, const float *logits, int N, int H) {
    for (int n = 0; n < N; n++) kl[n] = ops_binmap_kl_row(logits + (size_t)n * H, H);
}

free_bits_sums_t free_bits_forward(const float *kl, const uint8_t *mask, int N, float kappa) {
    free_bits_sums_t s = {0, 0, 0, 0};
    for (int n = 0; n < N; n++) {
        if (mask && !mask[n]) continue;
        s.count++;
        s.kl_sum += kl[n];
        if (kl[n] > kappa) { s.above++; s.term_sum += kl[n] - kappa; }
    }
    return s;
}

void free_bits_backward(float *dlogits, const float *logits, const float *kl, const uint8_t *mask,
                        int N, int H, float kappa, float scale) {
    for (int n = 0; n < N; n++) {
        if (mask && !mask[n]) continue;
        if (kl[n] > kappa)
            ops_binmap_kl_row_backward(dlogits + (size_t)n * H, logits + (size_t)n * H, H, scale);
    }
}

void uniform_fill(float *u, size_t n, uint64_t key, uint64_t counter0) {
    for (size_t i = 0; i < n; i++) u[i] = rng_counter_f32(key, counter0 + i);
}

void post_sampler_forward(float *r, const float *w, const uint32_t *idx, int N, int D, int H) {
    const size_t K = (size_t)1 << H;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        for (int i = 0; i < D; i++) r[(size_t)n * D + i] = w[(size_t)i * K + idx[n]];
}

size_t post_sampler_work_floats(int D, int H, int threads) {
    (void)D;
    return ((size_t)BINMAP_CHUNK << H) * (size_t)(threads > 0 ? threads : 1);
}

/* Rows of dw per scatter task: dr is read 16 columns (one cache line) at a time. */
#define SCATTER_COLS 16

void post_sampler_backward(float *dw, float *dlogits, const float *dr, const float *w,
                           const uint32_t *idx, const float *prob, int N, int D, int H,
                           float *work, size_t work_floats) {
    const size_t K = (size_t)1 << H;
    /* dW = dR Z^T with Z's VALUE, the one-hot: only column idx[n] receives dr[n]. Threads own
     * rows of dw; every element still receives its terms in the order of n (the same sums,
     * bit for bit, as a serial loop). */
#pragma omp parallel for schedule(static)
    for (int i0 = 0; i0 < D; i0 += SCATTER_COLS) {
        const int i1 = i0 + SCATTER_COLS < D ? i0 + SCATTER_COLS : D;
        for (int n = 0; n < N; n++)
            for (int i = i0; i < i1; i++) dw[(size_t)i * K + idx[n]] += dr[(size_t)n * D + i];
    }
    if (!dlogits) return;
    /* dZ = W^T dR, dense over the 2^H entries, then through G (Z = onehot + G - detach(G)).
     * Row-major dZ (rows, K) = dR (rows, D) W (D, K); column-major that is
     * dZ^T (K, rows) = W_cm (K x D, ld K) dR_cm (D x rows, ld D). Chunks of rows are
     * independent: one per thread at a time, each with its own part of `work` (a thread
     * count the buffer was not sized for gets fewer threads, never a shared buffer). */
    const size_t chunk_floats = (size_t)BINMAP_CHUNK << H;
    int nbuf = (int)(work_floats / chunk_floats);
    if (nbuf > omp_get_max_threads()) nbuf = omp_get_max_threads();   /* the caller's count */
    if (nbuf < 1) nbuf = 1;
    const int nchunks = (N + BINMAP_CHUNK - 1) / BINMAP_CHUNK;
#pragma omp parallel num_threads(nbuf)
    {
        float *mine = work + (size_t)omp_get_thread_num() * chunk_floats;
#pragma omp for schedule(dynamic, 1)
        for (int ch = 0; ch < nchunks; ch++) {
            const int n0 = ch * BINMAP_CHUNK, rows = N - n0 < BINMAP_CHUNK ? N - n0 : BINMAP_CHUNK;
            model_gemm(GEMM_N, GEMM_N, (int)K, rows, D, 1.0f, w, (int)K, dr + (size_t)n0 * D, D,
                       0.0f, mine, (int)K);
            binmap_backward(dlogits + (size_t)n0 * H, mine, prob + (size_t)n0 * H, rows, H);
        }
    }
}
