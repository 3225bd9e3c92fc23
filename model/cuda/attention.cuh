/* model/cuda/attention.cuh: attention on the CUDA device, tiled in shared memory
 * (FlashAttention-style): q (B,Tq,H,hd), k/v (B,Tk,Hkv,hd), out (B,Tq,H,hd), lse (B,H,Tq),
 * grouped-query (head h reads key/value head h / (H/Hkv)), causal with Tq <= Tk (queries are
 * the last Tq positions), sliding windows (ops_math.h ops_att_range: the keys a row sees).
 *
 * Forward (k_att_fwd): a block of 4 warps takes 64 query rows of one (b, h), 16 per warp; key
 * tiles of BK rows are staged in shared memory; S = Q K^T lands in each warp's registers in
 * the mma layout (mma.cuh), the online softmax (ops_online_softmax's rescaling: running max
 * m, sum l, the accumulator scaled by exp(m_old - m_new)) runs on those registers, and
 * O += P V follows from the same registers. Only the row's log-sum-exp is kept.
 *
 * Backward, atomic-free, in two passes so that every gradient row has one writer: D = rowsum
 * (dO o O) (k_att_rowdot); dK, dV (k_att_bwd_dkdv): a block owns 64 key rows of (b, kh) and
 * walks every query head of the group and every query tile that sees those keys, in order,
 * recomputing P = exp(S - lse) and dS = P (dP - D) scale, accumulating dV += P^T dO and
 * dK += dS^T Q in registers; dQ (k_att_bwd_dq): a block owns 64 query rows of (b, h) and
 * walks the key tiles, dQ += dS K. Results are added (+=) to dq, dk, dv once, at the end:
 * the same bits on every run.
 *
 * Two product engines fill the same register layout: in precision bf16 the tensor cores
 * (mma.sync m16n8k16: Q, K, V, dO, P and dS rounded to bf16 at the product's input, fp32
 * accumulation -- precision.h's bf16, as the CPU device's attention products), in fp32 and
 * tf32 the CUDA cores (fp32 FMAs over the shared-memory tiles; P and dS pass through a
 * per-warp shared buffer since a lane holds only a quarter of a row). The softmax, masking and
 * accumulation code is shared. Head dimensions up to ATT_MAX_HD are padded to 16, 32, 64 or
 * 128 (zeros in shared memory); larger ones use kernels.h's per-row bodies.
 *
 * Exponentials are ops_math.h's ops_expf, the CPU reference's (its results still differ from
 * the CPU's in the last bits: sums in another order).
 *
 * The decode step's attention (attention_rows: one query row per (row, head) over a cache
 * range) is k_att_rows: one warp per row and head, key tiles of 32 staged by the warp, lane j
 * scoring key j, the warp's online softmax, and P V with the lanes over the head dimension.
 * A row's result depends on its own inputs only (not on the rows beside it). */
#ifndef MODEL_CUDA_ATTENTION_CUH
#define MODEL_CUDA_ATTENTION_CUH
#include "model/cuda/mma.cuh"
#include "model/ops_math.h"

#define ATT_THREADS 128 /* 4 warps, 16 rows each */
#define ATT_MAX_HD 128

template <bool BF> struct att_elt {
    typedef float T;
};
template <> struct att_elt<true> {
    typedef __nv_bfloat16 T;
};

/* tile shapes of the forward and the dQ pass (per block: BQ queries; key tiles of BK) */
template <int HD, bool BF> struct att_cfg {
    static constexpr int BQ = 64;
    static constexpr int BK = (BF || HD <= 64) ? 64 : 32;
    static constexpr int NT = BK / 8;  /* 8-key column tiles of S */
    static constexpr int KS = HD / 16; /* 16-wide steps over the head dimension */
    static constexpr int DT = HD / 8;  /* 8-wide column tiles of O */
    /* row stride of row-major tiles: bf16 rows padded by 8 (a 16-byte multiple, and the
     * fragment loads of 8 rows x 4 lanes fall into 32 distinct banks); fp32 rows by 1 */
    static constexpr int LD = BF ? HD + 8 : HD + 1;
    static constexpr int LDT = BK + 8; /* transposed bf16 tiles (HD rows of BK keys) */
};
/* the dK/dV pass: 64 keys per block, query tiles of QT */
template <int HD, bool BF> struct att_bwd_cfg {
    static constexpr int KB = 64;
    static constexpr int QT = (BF || HD <= 64) ? 64 : 32;
    static constexpr int NTQ = QT / 8;
    static constexpr int KS = HD / 16;
    static constexpr int DT = HD / 8;
    static constexpr int LD = BF ? HD + 8 : HD + 1;
    static constexpr int LDT = QT + 8;
};

/* ---- staging a tile of head rows into shared memory ----
 * rows r < R of a head view (row r at src + r * stride floats), zero for r >= valid and for
 * columns >= hd, into a row-major tile (ld) and/or a transposed one (HD rows of ldt). */
__device__ static inline void att_put(float *tile, int ld, float *, int, int r, int c, float x) {
    if (tile) tile[r * ld + c] = x;
}
__device__ static inline void att_put(__nv_bfloat16 *tile, int ld, __nv_bfloat16 *tile_t, int ldt, int r, int c,
                                      float x) {
    const __nv_bfloat16 b = to_bf16(x);
    if (tile) tile[r * ld + c] = b;
    if (tile_t) tile_t[c * ldt + r] = b;
}
/* The bf16 copies of the inputs (device_cuda.cu's shadows: q, k, v and dout rounded once, the
 * values att_put's rounding gives) for the bf16 kernels, or NULL each: a tile is then staged from
 * 2-byte elements instead of rounding 4-byte ones (half the global-memory bytes of the tiles the
 * kernels stream). vec16: hd % 8 == 0 and every copy 16-byte aligned (rows of 8 bf16 moves). */
typedef struct {
    const __nv_bfloat16 *q, *k, *v, *dout;
} att_bf16_t;
__host__ __device__ static inline bool att16_vec(const att_bf16_t &c, int hd) {
    return hd % 8 == 0 && (!c.q || aligned16(c.q)) && (!c.k || aligned16(c.k)) && (!c.v || aligned16(c.v)) &&
           (!c.dout || aligned16(c.dout));
}
/* p + off, or NULL when p is */
__host__ __device__ static inline const __nv_bfloat16 *att16_at(const __nv_bfloat16 *p, size_t off) {
    return p ? p + off : (const __nv_bfloat16 *)NULL;
}
template <int HD, class T>
__device__ static inline void att_stage(T *tile, int ld, T *tile_t, int ldt, const float *src, size_t stride, int R,
                                        int valid, int hd, bool vec);
/* the same from a bf16 copy when there is one (src16: the element src is), else from src */
template <int HD, class T>
__device__ static inline void att_stage(T *tile, int ld, T *tile_t, int ldt, const float *src,
                                        const __nv_bfloat16 *src16, size_t stride, int R, int valid, int hd, bool vec,
                                        bool vec16) {
    if (!src16) {
        att_stage<HD>(tile, ld, tile_t, ldt, src, stride, R, valid, hd, vec);
        return;
    }
    if (vec16) { /* 8 bf16 (16 bytes) per thread and step */
        for (int e = threadIdx.x; e < R * (HD / 8); e += blockDim.x) {
            const int r = e / (HD / 8), c = (e % (HD / 8)) * 8;
            uint4 x = make_uint4(0u, 0u, 0u, 0u);
            if (r < valid && c < hd) x = ld16b(src16 + (size_t)r * stride + c);
            const uint32_t u[4] = {x.x, x.y, x.z, x.w};
            #pragma unroll
            for (int j = 0; j < 4; j++) {
                att_put(tile, ld, tile_t, ldt, r, c + 2 * j, bf16_lo(u[j]));
                att_put(tile, ld, tile_t, ldt, r, c + 2 * j + 1, bf16_hi(u[j]));
            }
        }
        return;
    }
    for (int e = threadIdx.x; e < R * HD; e += blockDim.x) {
        const int r = e / HD, c = e % HD;
        att_put(tile, ld, tile_t, ldt, r, c, (r < valid && c < hd) ? bf16_to_f(src16[(size_t)r * stride + c]) : 0.0f);
    }
}
template <int HD, class T>
__device__ static inline void att_stage(T *tile, int ld, T *tile_t, int ldt, const float *src, size_t stride, int R,
                                        int valid, int hd, bool vec) {
    if (vec) { /* hd % 4 == 0, 16-byte aligned rows: one float4 per thread and step */
        for (int e = threadIdx.x; e < R * (HD / 4); e += blockDim.x) {
            const int r = e / (HD / 4), c = (e % (HD / 4)) * 4;
            float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
            if (r < valid && c < hd) x = ld4(src + (size_t)r * stride + c);
            att_put(tile, ld, tile_t, ldt, r, c, x.x);
            att_put(tile, ld, tile_t, ldt, r, c + 1, x.y);
            att_put(tile, ld, tile_t, ldt, r, c + 2, x.z);
            att_put(tile, ld, tile_t, ldt, r, c + 3, x.w);
        }
        return;
    }
    for (int e = threadIdx.x; e < R * HD; e += blockDim.x) {
        const int r = e / HD, c = e % HD;
        att_put(tile, ld, tile_t, ldt, r, c, (r < valid && c < hd) ? src[(size_t)r * stride + c] : 0.0f);
    }
}
__device__ static inline uint32_t ld_b32(const __nv_bfloat16 *p) { return *(const uint32_t *)p; }

/* ---- the two product engines over a warp's 16 rows ----
 * acc[j][*] (+)= rows (r = 16 w + g, r + 8) of A times rows (8 j + 2 t, 8 j + 2 t + 1) of B,
 * dotted over HD: S-like products (A, B row-major tiles, ld). */
template <int HD, int NT>
__device__ static inline void att_dots_f32(float acc[NT][4], const float *A, const float *B, int ld, int g, int t) {
    const float *a0 = A + g * ld, *a1 = A + (g + 8) * ld;
    for (int d = 0; d < HD; d++) {
        const float x0 = a0[d], x1 = a1[d];
#pragma unroll
        for (int j = 0; j < NT; j++) {
            const float y0 = B[(8 * j + 2 * t) * ld + d], y1 = B[(8 * j + 2 * t + 1) * ld + d];
            acc[j][0] += x0 * y0;
            acc[j][1] += x0 * y1;
            acc[j][2] += x1 * y0;
            acc[j][3] += x1 * y1;
        }
    }
}
/* A fragments of a warp's 16 rows (row-major bf16 tile, ld) for every 16-wide step of HD */
template <int KS>
__device__ static inline void att_frags(uint32_t fa[KS][4], const __nv_bfloat16 *A, int ld, int g, int t) {
#pragma unroll
    for (int kk = 0; kk < KS; kk++) {
        fa[kk][0] = ld_b32(A + g * ld + 16 * kk + 2 * t);
        fa[kk][1] = ld_b32(A + (g + 8) * ld + 16 * kk + 2 * t);
        fa[kk][2] = ld_b32(A + g * ld + 16 * kk + 2 * t + 8);
        fa[kk][3] = ld_b32(A + (g + 8) * ld + 16 * kk + 2 * t + 8);
    }
}
/* acc[j] += A (fragments) times rows 8 j .. 8 j + 7 of the row-major tile B, over HD */
template <int KS, int NT>
__device__ static inline void att_dots_bf(float acc[NT][4], const uint32_t fa[KS][4], const __nv_bfloat16 *B, int ld,
                                          int g, int t) {
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
            const __nv_bfloat16 *row = B + (8 * j + g) * ld + 16 * kk + 2 * t;
            mma_bf16(acc[j], fa[kk], ld_b32(row), ld_b32(row + 8));
        }
}
/* out[jd] += P (the warp's 16 rows x 16*KP columns, registers in the C layout of NT = 2 KP
 * column tiles) times the tile whose TRANSPOSE is the row-major bf16 tile Bt (DT*8 rows of
 * ldt: Bt[n][k]) */
template <int NT, int DT>
__device__ static inline void att_pv_bf(float out[DT][4], const float P[NT][4], const __nv_bfloat16 *Bt, int ldt,
                                        int g, int t) {
#pragma unroll
    for (int kk = 0; kk < NT / 2; kk++) {
        const uint32_t a[4] = {pack_bf16(P[2 * kk][0], P[2 * kk][1]), pack_bf16(P[2 * kk][2], P[2 * kk][3]),
                               pack_bf16(P[2 * kk + 1][0], P[2 * kk + 1][1]),
                               pack_bf16(P[2 * kk + 1][2], P[2 * kk + 1][3])};
#pragma unroll
        for (int jd = 0; jd < DT; jd++) {
            const __nv_bfloat16 *row = Bt + (8 * jd + g) * ldt + 16 * kk + 2 * t;
            mma_bf16(out[jd], a, ld_b32(row), ld_b32(row + 8));
        }
    }
}
/* The fp32 engine's P V: P goes through the warp's buffer pw (16 rows of nk + 1 floats),
 * then out[jd] += sum over k of P[row][k] B[k][8 jd + 2 t + e] (B row-major fp32, ld) */
template <int NT, int DT>
__device__ static inline void att_pv_f32(float out[DT][4], const float P[NT][4], float *pw, const float *B, int ld,
                                         int g, int t) {
    const int lp = NT * 8 + 1;
#pragma unroll
    for (int j = 0; j < NT; j++) {
        pw[g * lp + 8 * j + 2 * t] = P[j][0];
        pw[g * lp + 8 * j + 2 * t + 1] = P[j][1];
        pw[(g + 8) * lp + 8 * j + 2 * t] = P[j][2];
        pw[(g + 8) * lp + 8 * j + 2 * t + 1] = P[j][3];
    }
    __syncwarp();
    for (int k = 0; k < NT * 8; k++) {
        const float p0 = pw[g * lp + k], p1 = pw[(g + 8) * lp + k];
#pragma unroll
        for (int jd = 0; jd < DT; jd++) {
            const float v0 = B[k * ld + 8 * jd + 2 * t], v1 = B[k * ld + 8 * jd + 2 * t + 1];
            out[jd][0] += p0 * v0;
            out[jd][1] += p0 * v1;
            out[jd][2] += p1 * v0;
            out[jd][3] += p1 * v1;
        }
    }
    __syncwarp();
}

/* the keys a query row sees ([lo, hi)); nothing for rows past Tq */
__device__ static inline void att_rows_range(int i, int Tq, int Tk, int causal, int window, int *lo, int *hi) {
    if (i >= Tq) {
        *lo = *hi = 0;
        return;
    }
    ops_att_range(i, Tq, Tk, causal, window, lo, hi);
}

/* ---- forward ---- */
template <int HD, bool BF> static inline size_t att_fwd_smem() {
    typedef att_cfg<HD, BF> C;
    typedef typename att_elt<BF>::T T;
    return sizeof(T) * ((size_t)C::BQ * C::LD + (size_t)C::BK * C::LD + (BF ? (size_t)HD * C::LDT : (size_t)C::BK * C::LD)) +
           (BF ? 0 : sizeof(float) * 4 * 16 * (C::BK + 1));
}
template <int HD, bool BF>
__global__ void __launch_bounds__(ATT_THREADS)
k_att_fwd(float *out, float *lse, const float *q, const float *k, const float *v, int Tq, int Tk, int H, int Hkv,
          int hd, int causal, int window, float scale, att_bf16_t c16) {
    typedef att_cfg<HD, BF> C;
    typedef typename att_elt<BF>::T T;
    DYN_SHARED(unsigned char, smem);
    T *sQ = (T *)smem;
    T *sK = sQ + C::BQ * C::LD;
    T *sV = sK + C::BK * C::LD; /* bf16: transposed (HD x LDT); fp32: row-major (BK x LD) */
    float *sP = (float *)(sV + (BF ? HD * C::LDT : C::BK * C::LD));
    const int b = blockIdx.z, h = blockIdx.y, i0 = blockIdx.x * C::BQ, kh = h / (H / Hkv);
    const int w = threadIdx.x / WARP, lane = threadIdx.x % WARP, g = lane / 4, t = lane % 4;
    const size_t qs = (size_t)H * hd, ks = (size_t)Hkv * hd;
    const float *kb = k + (size_t)b * Tk * ks + (size_t)kh * hd, *vb = v + (size_t)b * Tk * ks + (size_t)kh * hd;
    const bool vec = hd % 4 == 0 && aligned16(q) && aligned16(k) && aligned16(v);
    const int nq = min(C::BQ, Tq - i0);
    const bool v16 = att16_vec(c16, hd);
    const size_t qo = ((size_t)b * Tq + i0) * qs + (size_t)h * hd, kvb = (size_t)b * Tk * ks + (size_t)kh * hd;
    att_stage<HD>(sQ, C::LD, (T *)NULL, 0, q + qo, att16_at(c16.q, qo), qs, C::BQ, nq, hd, vec, v16);
    int lo[2], hi[2], klo, khi, unused;
    #pragma unroll
    for (int rr = 0; rr < 2; rr++) att_rows_range(i0 + 16 * w + g + 8 * rr, Tq, Tk, causal, window, &lo[rr], &hi[rr]);
    ops_att_range(i0, Tq, Tk, causal, window, &klo, &unused);
    ops_att_range(i0 + nq - 1, Tq, Tk, causal, window, &unused, &khi);
    __syncthreads();
    uint32_t qa[C::KS][4];
    if (BF) att_frags<C::KS>(qa, (const __nv_bfloat16 *)(sQ + 16 * w * C::LD), C::LD, g, t);
    float o[C::DT][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    #pragma unroll
    for (int jd = 0; jd < C::DT; jd++) o[jd][0] = o[jd][1] = o[jd][2] = o[jd][3] = 0.0f;
    for (int k0 = klo; k0 < khi; k0 += C::BK) {
        const int nk = min(C::BK, Tk - k0);
        __syncthreads(); /* the previous tile's readers are done */
        const size_t ko = (size_t)k0 * ks;
        att_stage<HD>(sK, C::LD, (T *)NULL, 0, kb + ko, att16_at(c16.k, kvb + ko), ks, C::BK, nk, hd, vec, v16);
        if (BF) att_stage<HD>((T *)NULL, 0, sV, C::LDT, vb + ko, att16_at(c16.v, kvb + ko), ks, C::BK, nk, hd, vec, v16);
        else att_stage<HD>(sV, C::LD, (T *)NULL, 0, vb + ko, ks, C::BK, nk, hd, vec);
        __syncthreads();
        float s[C::NT][4];
        #pragma unroll
        for (int j = 0; j < C::NT; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
        if (BF) att_dots_bf<C::KS, C::NT>(s, qa, (const __nv_bfloat16 *)sK, C::LD, g, t);
        else att_dots_f32<HD, C::NT>(s, (const float *)(sQ + 16 * w * C::LD), (const float *)sK, C::LD, g, t);
        /* scale, mask, online softmax per row (a row's 4 lanes share m) */
        #pragma unroll
        for (int rr = 0; rr < 2; rr++) {
            float mx = -INFINITY;
            #pragma unroll
            for (int j = 0; j < C::NT; j++)
                #pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int key = k0 + 8 * j + 2 * t + e;
                    float x = s[j][2 * rr + e] * scale;
                    if (key < lo[rr] || key >= hi[rr]) x = -INFINITY;
                    s[j][2 * rr + e] = x;
                    mx = fmaxf(mx, x);
                }
            mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 2));
            const float mn = fmaxf(m[rr], mx);
            if (mn == -INFINITY) { /* nothing visible yet in this row */
                #pragma unroll
                for (int j = 0; j < C::NT; j++) s[j][2 * rr] = s[j][2 * rr + 1] = 0.0f;
                continue;
            }
            if (mn != m[rr]) {
                const float f = m[rr] == -INFINITY ? 0.0f : ops_expf(m[rr] - mn);
                l[rr] *= f;
                #pragma unroll
                for (int jd = 0; jd < C::DT; jd++) o[jd][2 * rr] *= f, o[jd][2 * rr + 1] *= f;
                m[rr] = mn;
            }
            #pragma unroll
            for (int j = 0; j < C::NT; j++)
                #pragma unroll
                for (int e = 0; e < 2; e++) {
                    const float p = ops_expf(s[j][2 * rr + e] - mn);
                    s[j][2 * rr + e] = p;
                    l[rr] += p;
                }
        }
        if (BF) att_pv_bf<C::NT, C::DT>(o, s, (const __nv_bfloat16 *)sV, C::LDT, g, t);
        else att_pv_f32<C::NT, C::DT>(o, s, sP + w * 16 * (C::BK + 1), (const float *)sV, C::LD, g, t);
    }
    /* out = O / l, lse = m + log l (a row that saw no key: out 0, lse +inf) */
    #pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        float lt = l[rr] + __shfl_xor_sync(FULL_MASK, l[rr], 1);
        lt += __shfl_xor_sync(FULL_MASK, lt, 2);
        const int i = i0 + 16 * w + g + 8 * rr;
        if (i >= Tq) continue;
        const float inv = lt > 0.0f ? 1.0f / lt : 0.0f;
        const size_t ro = ((size_t)b * Tq + i) * qs + (size_t)h * hd;
        float *orow = out + ro;
        #pragma unroll
        for (int jd = 0; jd < C::DT; jd++) {
            const int c = 8 * jd + 2 * t;
            const float y0 = o[jd][2 * rr] * inv, y1 = o[jd][2 * rr + 1] * inv;
            if (hd % 2 == 0 && aligned16(out)) {
                if (c < hd) st2(orow + c, make_float2(y0, y1));
            } else {
                if (c < hd) orow[c] = y0;
                if (c + 1 < hd) orow[c + 1] = y1;
            }
        }
        if (t == 0) lse[((size_t)b * H + h) * Tq + i] = lt > 0.0f ? m[rr] + logf(lt) : INFINITY;
    }
}

/* ---- backward: D = rowsum(dO o O), one warp per (b, i, h), in memory order ---- */
__global__ void k_att_rowdot(float *Drow, const float *dout, const float *out, int Tq, int H, int hd, size_t items) {
    const size_t it = (size_t)blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    if (it >= items) return;
    const int lane = threadIdx.x % WARP;
    const float *a = dout + it * hd, *o = out + it * hd;
    float s = 0.0f;
    for (int d = lane; d < hd; d += WARP) s += a[d] * o[d];
    s = warp_sum(s);
    const size_t h = it % H, bi = it / H, i = bi % Tq, b = bi / Tq;
    if (lane == 0) Drow[(b * H + h) * Tq + i] = s;
}

/* ---- backward, dK and dV: a block owns 64 keys of (b, kh) ---- */
template <int HD, bool BF> static inline size_t att_dkdv_smem() {
    typedef att_bwd_cfg<HD, BF> C;
    typedef typename att_elt<BF>::T T;
    if (BF) /* sK, sV (frags), sQ, sdO row-major, sQt, sdOt transposed */
        return sizeof(T) * (2 * (size_t)C::KB * C::LD + 2 * (size_t)C::QT * C::LD + 2 * (size_t)HD * C::LDT) +
               sizeof(float) * 2 * C::QT;
    return sizeof(float) * (2 * (size_t)C::KB * C::LD + 2 * (size_t)C::QT * C::LD + 4 * 16 * (C::QT + 1) + 2 * C::QT);
}
template <int HD, bool BF>
__global__ void __launch_bounds__(ATT_THREADS)
k_att_bwd_dkdv(float *dk, float *dv, const float *q, const float *k, const float *v, const float *dout, const float *lse,
               const float *Drow, int Tq, int Tk, int H, int Hkv, int hd, int causal, int window, float scale,
               att_bf16_t c16) {
    typedef att_bwd_cfg<HD, BF> C;
    typedef typename att_elt<BF>::T T;
    DYN_SHARED(unsigned char, smem);
    T *sK = (T *)smem, *sV = sK + C::KB * C::LD, *sQ = sV + C::KB * C::LD, *sdO = sQ + C::QT * C::LD;
    T *sQt = sdO + C::QT * C::LD, *sdOt = BF ? sQt + HD * C::LDT : sQt;
    float *sP = (float *)(BF ? sdOt + HD * C::LDT : sQt); /* fp32 only: 4 warps x 16 x (QT + 1) */
    float *sL = BF ? sP : sP + 4 * 16 * (C::QT + 1), *sD = sL + C::QT;
    const int b = blockIdx.z, kh = blockIdx.y, j0 = blockIdx.x * C::KB, rep = H / Hkv;
    const int w = threadIdx.x / WARP, lane = threadIdx.x % WARP, g = lane / 4, t = lane % 4;
    const size_t qs = (size_t)H * hd, ks = (size_t)Hkv * hd;
    const bool vec = hd % 4 == 0 && aligned16(q) && aligned16(k) && aligned16(v) && aligned16(dout);
    const int nkv = min(C::KB, Tk - j0), j1 = j0 + nkv;
    const size_t kvo = ((size_t)b * Tk + j0) * ks + (size_t)kh * hd;
    const bool v16 = att16_vec(c16, hd);
    att_stage<HD>(sK, C::LD, (T *)NULL, 0, k + kvo, att16_at(c16.k, kvo), ks, C::KB, nkv, hd, vec, v16);
    att_stage<HD>(sV, C::LD, (T *)NULL, 0, v + kvo, att16_at(c16.v, kvo), ks, C::KB, nkv, hd, vec, v16);
    __syncthreads();
    uint32_t ka[C::KS][4], va[C::KS][4];
    if (BF) {
        att_frags<C::KS>(ka, (const __nv_bfloat16 *)(sK + 16 * w * C::LD), C::LD, g, t);
        att_frags<C::KS>(va, (const __nv_bfloat16 *)(sV + 16 * w * C::LD), C::LD, g, t);
    }
    float dka[C::DT][4], dva[C::DT][4];
    #pragma unroll
    for (int jd = 0; jd < C::DT; jd++)
        #pragma unroll
        for (int e = 0; e < 4; e++) dka[jd][e] = dva[jd][e] = 0.0f;
    /* the query rows that see any of keys [j0, j1): p = i + Tk - Tq with j0 <= p and
     * p - window + 1 <= j1 - 1 */
    int iq_lo = 0, iq_hi = Tq;
    if (causal) {
        iq_lo = max(0, j0 - (Tk - Tq));
        if (window > 0) iq_hi = min(Tq, j1 + window - 1 - (Tk - Tq));
    }
    const int key0 = j0 + 16 * w + g;
    for (int h = kh * rep; h < (kh + 1) * rep; h++)
        for (int q0 = iq_lo; q0 < iq_hi; q0 += C::QT) {
            const int nq = min(C::QT, Tq - q0);
            const size_t qo = ((size_t)b * Tq + q0) * qs + (size_t)h * hd;
            __syncthreads();
            att_stage<HD>(sQ, C::LD, BF ? sQt : (T *)NULL, C::LDT, q + qo, att16_at(c16.q, qo), qs, C::QT, nq, hd, vec, v16);
            att_stage<HD>(sdO, C::LD, BF ? sdOt : (T *)NULL, C::LDT, dout + qo, att16_at(c16.dout, qo), qs, C::QT, nq, hd,
                          vec, v16);
            for (int r = threadIdx.x; r < C::QT; r += blockDim.x) {
                const size_t ro = ((size_t)b * H + h) * Tq + q0 + r;
                sL[r] = r < nq ? lse[ro] : INFINITY;
                sD[r] = r < nq ? Drow[ro] : 0.0f;
            }
            __syncthreads();
            /* S^T (16 keys x QT queries) and dP^T = V dO^T */
            float st[C::NTQ][4], dpt[C::NTQ][4];
            #pragma unroll
            for (int j = 0; j < C::NTQ; j++)
                #pragma unroll
                for (int e = 0; e < 4; e++) st[j][e] = dpt[j][e] = 0.0f;
            if (BF) {
                att_dots_bf<C::KS, C::NTQ>(st, ka, (const __nv_bfloat16 *)sQ, C::LD, g, t);
                att_dots_bf<C::KS, C::NTQ>(dpt, va, (const __nv_bfloat16 *)sdO, C::LD, g, t);
            } else {
                att_dots_f32<HD, C::NTQ>(st, (const float *)(sK + 16 * w * C::LD), (const float *)sQ, C::LD, g, t);
                att_dots_f32<HD, C::NTQ>(dpt, (const float *)(sV + 16 * w * C::LD), (const float *)sdO, C::LD, g, t);
            }
            /* P^T = exp(S^T scale - lse), dS^T = P^T (dP^T - D) scale, 0 where not visible */
            #pragma unroll
            for (int j = 0; j < C::NTQ; j++)
                #pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int col = 8 * j + 2 * t + (e & 1), key = key0 + 8 * (e >> 1), i = q0 + col;
                    int lo, hi;
                    att_rows_range(i, Tq, Tk, causal, window, &lo, &hi);
                    const bool vis = key >= lo && key < hi;
                    const float p = vis ? ops_expf(st[j][e] * scale - sL[col]) : 0.0f;
                    st[j][e] = p;
                    dpt[j][e] = p * (dpt[j][e] - sD[col]) * scale;
                }
            /* dV += P^T dO, dK += dS^T Q */
            if (BF) {
                att_pv_bf<C::NTQ, C::DT>(dva, st, (const __nv_bfloat16 *)sdOt, C::LDT, g, t);
                att_pv_bf<C::NTQ, C::DT>(dka, dpt, (const __nv_bfloat16 *)sQt, C::LDT, g, t);
            } else {
                float *pw = sP + w * 16 * (C::QT + 1);
                att_pv_f32<C::NTQ, C::DT>(dva, st, pw, (const float *)sdO, C::LD, g, t);
                att_pv_f32<C::NTQ, C::DT>(dka, dpt, pw, (const float *)sQ, C::LD, g, t);
            }
        }
    /* dk, dv += the block's sums (this block is their only writer) */
    #pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        const int key = key0 + 8 * rr;
        if (key >= Tk) continue;
        const size_t o = ((size_t)b * Tk + key) * ks + (size_t)kh * hd;
        #pragma unroll
        for (int jd = 0; jd < C::DT; jd++)
            #pragma unroll
            for (int e = 0; e < 2; e++) {
                const int c = 8 * jd + 2 * t + e;
                if (c < hd) {
                    dk[o + c] += dka[jd][2 * rr + e];
                    dv[o + c] += dva[jd][2 * rr + e];
                }
            }
    }
}

/* ---- backward, dQ: a block owns 64 query rows of (b, h) ---- */
template <int HD, bool BF> static inline size_t att_dq_smem() {
    typedef att_cfg<HD, BF> C;
    typedef typename att_elt<BF>::T T;
    if (BF) /* sQ, sdO, sK, sV row-major, sKt transposed */
        return sizeof(T) * (2 * (size_t)C::BQ * C::LD + 2 * (size_t)C::BK * C::LD + (size_t)HD * C::LDT);
    return sizeof(float) * (2 * (size_t)C::BQ * C::LD + 2 * (size_t)C::BK * C::LD + 4 * 16 * (C::BK + 1));
}
template <int HD, bool BF>
__global__ void __launch_bounds__(ATT_THREADS)
k_att_bwd_dq(float *dq, const float *q, const float *k, const float *v, const float *dout, const float *lse,
             const float *Drow, int Tq, int Tk, int H, int Hkv, int hd, int causal, int window, float scale,
             att_bf16_t c16) {
    typedef att_cfg<HD, BF> C;
    typedef typename att_elt<BF>::T T;
    DYN_SHARED(unsigned char, smem);
    T *sQ = (T *)smem, *sdO = sQ + C::BQ * C::LD, *sK = sdO + C::BQ * C::LD, *sV = sK + C::BK * C::LD;
    T *sKt = sV + C::BK * C::LD;
    float *sP = (float *)sKt; /* fp32 only */
    const int b = blockIdx.z, h = blockIdx.y, i0 = blockIdx.x * C::BQ, kh = h / (H / Hkv);
    const int w = threadIdx.x / WARP, lane = threadIdx.x % WARP, g = lane / 4, t = lane % 4;
    const size_t qs = (size_t)H * hd, ks = (size_t)Hkv * hd;
    const float *kb = k + (size_t)b * Tk * ks + (size_t)kh * hd, *vb = v + (size_t)b * Tk * ks + (size_t)kh * hd;
    const bool vec = hd % 4 == 0 && aligned16(q) && aligned16(k) && aligned16(v) && aligned16(dout);
    const int nq = min(C::BQ, Tq - i0);
    const size_t qo = ((size_t)b * Tq + i0) * qs + (size_t)h * hd;
    const bool v16 = att16_vec(c16, hd);
    const size_t kvb = (size_t)b * Tk * ks + (size_t)kh * hd;
    att_stage<HD>(sQ, C::LD, (T *)NULL, 0, q + qo, att16_at(c16.q, qo), qs, C::BQ, nq, hd, vec, v16);
    att_stage<HD>(sdO, C::LD, (T *)NULL, 0, dout + qo, att16_at(c16.dout, qo), qs, C::BQ, nq, hd, vec, v16);
    int lo[2], hi[2], klo, khi, unused;
    float L[2], Dr[2];
    #pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        const int i = i0 + 16 * w + g + 8 * rr;
        att_rows_range(i, Tq, Tk, causal, window, &lo[rr], &hi[rr]);
        const size_t ro = ((size_t)b * H + h) * Tq + i;
        L[rr] = i < Tq ? lse[ro] : INFINITY;
        Dr[rr] = i < Tq ? Drow[ro] : 0.0f;
    }
    ops_att_range(i0, Tq, Tk, causal, window, &klo, &unused);
    ops_att_range(i0 + nq - 1, Tq, Tk, causal, window, &unused, &khi);
    __syncthreads();
    uint32_t qa[C::KS][4], da[C::KS][4];
    if (BF) {
        att_frags<C::KS>(qa, (const __nv_bfloat16 *)(sQ + 16 * w * C::LD), C::LD, g, t);
        att_frags<C::KS>(da, (const __nv_bfloat16 *)(sdO + 16 * w * C::LD), C::LD, g, t);
    }
    float dqa[C::DT][4];
    #pragma unroll
    for (int jd = 0; jd < C::DT; jd++) dqa[jd][0] = dqa[jd][1] = dqa[jd][2] = dqa[jd][3] = 0.0f;
    for (int k0 = klo; k0 < khi; k0 += C::BK) {
        const int nk = min(C::BK, Tk - k0);
        __syncthreads();
        const size_t ko = (size_t)k0 * ks;
        att_stage<HD>(sK, C::LD, BF ? sKt : (T *)NULL, C::LDT, kb + ko, att16_at(c16.k, kvb + ko), ks, C::BK, nk, hd, vec,
                      v16);
        att_stage<HD>(sV, C::LD, (T *)NULL, 0, vb + ko, att16_at(c16.v, kvb + ko), ks, C::BK, nk, hd, vec, v16);
        __syncthreads();
        float s[C::NT][4], dp[C::NT][4];
        #pragma unroll
        for (int j = 0; j < C::NT; j++)
            #pragma unroll
            for (int e = 0; e < 4; e++) s[j][e] = dp[j][e] = 0.0f;
        if (BF) {
            att_dots_bf<C::KS, C::NT>(s, qa, (const __nv_bfloat16 *)sK, C::LD, g, t);
            att_dots_bf<C::KS, C::NT>(dp, da, (const __nv_bfloat16 *)sV, C::LD, g, t);
        } else {
            att_dots_f32<HD, C::NT>(s, (const float *)(sQ + 16 * w * C::LD), (const float *)sK, C::LD, g, t);
            att_dots_f32<HD, C::NT>(dp, (const float *)(sdO + 16 * w * C::LD), (const float *)sV, C::LD, g, t);
        }
        #pragma unroll
        for (int j = 0; j < C::NT; j++)
            #pragma unroll
            for (int e = 0; e < 4; e++) {
                const int rr = e >> 1, key = k0 + 8 * j + 2 * t + (e & 1);
                const bool vis = key >= lo[rr] && key < hi[rr];
                const float p = vis ? ops_expf(s[j][e] * scale - L[rr]) : 0.0f;
                dp[j][e] = p * (dp[j][e] - Dr[rr]) * scale;
            }
        if (BF) att_pv_bf<C::NT, C::DT>(dqa, dp, (const __nv_bfloat16 *)sKt, C::LDT, g, t);
        else att_pv_f32<C::NT, C::DT>(dqa, dp, sP + w * 16 * (C::BK + 1), (const float *)sK, C::LD, g, t);
    }
    #pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        const int i = i0 + 16 * w + g + 8 * rr;
        if (i >= Tq) continue;
        float *row = dq + ((size_t)b * Tq + i) * qs + (size_t)h * hd;
        #pragma unroll
        for (int jd = 0; jd < C::DT; jd++)
            #pragma unroll
            for (int e = 0; e < 2; e++) {
                const int c = 8 * jd + 2 * t + e;
                if (c < hd) row[c] += dqa[jd][2 * rr + e];
            }
    }
}

/* ---- the decode step: one warp per (row n, head h), len[n] cache rows from base[n] ----
 * shared per warp: the query (hd) and a key tile (32 rows of hd + 1) */
#define ATT_ROWS_WARPS 4
__global__ void __launch_bounds__(ATT_ROWS_WARPS * WARP)
k_att_rows(float *out, const float *q, const float *kc, const float *vc, const int *base, const int *len, int N,
           int H, int Hkv, int hd) {
    DYN_SHARED(float, smem);
    const int lane = threadIdx.x % WARP, w = threadIdx.x / WARP;
    const size_t it = (size_t)blockIdx.x * ATT_ROWS_WARPS + w;
    if (it >= (size_t)N * H) return;
    float *sq = smem + (size_t)w * (hd + WARP * (hd + 1)), *sk = sq + hd;
    const size_t n = it / H, h = it % H, ldk = (size_t)Hkv * hd;
    const size_t kvo = (size_t)base[n] * ldk + (h / (H / Hkv)) * hd;
    const float *qi = q + it * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int d = lane; d < hd; d += WARP) sq[d] = qi[d];
    __syncwarp();
    const int nd = (hd + WARP - 1) / WARP; /* output elements per lane: d = lane + 32 u */
    float o[ATT_MAX_HD / WARP];
#pragma unroll
    for (int u = 0; u < ATT_MAX_HD / WARP; u++) o[u] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    const int L = len[n];
    for (int j0 = 0; j0 < L; j0 += WARP) {
        const int nk = min(WARP, L - j0);
        /* stage the tile: consecutive lanes read consecutive floats of a row */
        for (int e = lane; e < nk * hd; e += WARP) {
            const int r = e / hd, c = e % hd;
            sk[r * (hd + 1) + c] = kc[kvo + (size_t)(j0 + r) * ldk + c];
        }
        __syncwarp();
        float s = -INFINITY;
        if (lane < nk) {
            float acc = 0.0f;
            for (int d = 0; d < hd; d++) acc += sq[d] * sk[lane * (hd + 1) + d];
            s = acc * scale;
        }
        const float mx = warp_max(s), mn = fmaxf(m, mx);
        const float f = m == -INFINITY ? 0.0f : ops_expf(m - mn);
        const float p = lane < nk ? ops_expf(s - mn) : 0.0f;
        l = l * f + warp_sum(p);
        m = mn;
        #pragma unroll
        for (int u = 0; u < ATT_MAX_HD / WARP; u++) o[u] *= f;
        for (int r = 0; r < nk; r++) {
            const float pr = __shfl_sync(FULL_MASK, p, r);
            const float *vr = vc + kvo + (size_t)(j0 + r) * ldk;
#pragma unroll
            for (int u = 0; u < ATT_MAX_HD / WARP; u++) {
                const int d = lane + WARP * u;
                if (u < nd && d < hd) o[u] += pr * vr[d];
            }
        }
        __syncwarp(); /* the tile is read before the next one is staged */
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
    for (int u = 0; u < ATT_MAX_HD / WARP; u++) {
        const int d = lane + WARP * u;
        if (u < nd && d < hd) out[it * hd + d] = o[u] * inv;
    }
}

/* ---- launchers ---- */
/* "att_fwd<64,bf16>": the instances' names for the emulator's reports */
template <int HD, bool BF> static inline const char *att_kname(int which) {
    static char names[3][40];
    static const char *base[3] = {"k_att_fwd", "k_att_bwd_dkdv", "k_att_bwd_dq"};
    if (!names[which][0]) snprintf(names[which], sizeof names[which], "%s<%d,%s>", base[which], HD, BF ? "bf16" : "fp32");
    return names[which];
}
/* dynamic shared memory beyond the default 48 KiB needs an opt-in per kernel */
template <class K> static inline cudaError_t att_smem_optin(K *kern, size_t bytes) {
    if (bytes <= 48 * 1024) return cudaSuccess;
    return cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}
/* the padded head dimension of hd, 0 when the tiled kernels do not take it */
static inline int att_pad_hd(int hd) {
    return hd <= 0 ? 0 : hd <= 16 ? 16 : hd <= 32 ? 32 : hd <= 64 ? 64 : hd <= ATT_MAX_HD ? 128 : 0;
}
template <int HD, bool BF>
static inline cudaError_t att_forward_t(cudaStream_t s, float *out, float *lse, const float *q, const float *k,
                                        const float *v, int B, int Tq, int Tk, int H, int Hkv, int hd, int causal,
                                        int window, att_bf16_t c16) {
    const size_t smem = att_fwd_smem<HD, BF>();
    cudaError_t e = att_smem_optin(k_att_fwd<HD, BF>, smem);
    if (e != cudaSuccess) return e;
    const dim3 grid((Tq + 63) / 64, H, B);
    void (*kern)(float *, float *, const float *, const float *, const float *, int, int, int, int,
                 int, int, int, float, att_bf16_t) = k_att_fwd<HD, BF>;
    const char *nm = att_kname<HD, BF>(0);
    LAUNCH_AS(kern, nm, grid, ATT_THREADS, smem, s)
    (out, lse, q, k, v, Tq, Tk, H, Hkv, hd, causal, window, 1.0f / sqrtf((float)hd), BF ? c16 : att_bf16_t{});
    return cudaSuccess;
}
template <int HD, bool BF>
static inline cudaError_t att_backward_t(cudaStream_t s, float *dq, float *dk, float *dv, float *Drow,
                                         const float *dout, const float *out, const float *lse, const float *q,
                                         const float *k, const float *v, int B, int Tq, int Tk, int H, int Hkv,
                                         int hd, int causal, int window, att_bf16_t c16) {
    if (!BF) c16 = att_bf16_t{};
    const size_t s_kv = att_dkdv_smem<HD, BF>(), s_q = att_dq_smem<HD, BF>();
    cudaError_t e = att_smem_optin(k_att_bwd_dkdv<HD, BF>, s_kv);
    if (e == cudaSuccess) e = att_smem_optin(k_att_bwd_dq<HD, BF>, s_q);
    if (e != cudaSuccess) return e;
    const float scale = 1.0f / sqrtf((float)hd);
    const size_t items = (size_t)B * Tq * H;
    LAUNCH(k_att_rowdot, blocks_for(items, 8, 1u << 30), 8 * WARP, 0, s)(Drow, dout, out, Tq, H, hd, items);
    if (dk || dv) {
        /* dk and dv are written together (a NULL one is given a scratch copy by the caller) */
        const dim3 grid((Tk + 63) / 64, Hkv, B);
        void (*kern)(float *, float *, const float *, const float *, const float *, const float *, const float *,
                     const float *, int, int, int, int, int, int, int, float, att_bf16_t) = k_att_bwd_dkdv<HD, BF>;
        const char *nm = att_kname<HD, BF>(1);
    LAUNCH_AS(kern, nm, grid, ATT_THREADS, s_kv, s)
        (dk, dv, q, k, v, dout, lse, Drow, Tq, Tk, H, Hkv, hd, causal, window, scale, c16);
    }
    if (dq) {
        const dim3 grid((Tq + 63) / 64, H, B);
        void (*kern)(float *, const float *, const float *, const float *, const float *, const float *,
                     const float *, int, int, int, int, int, int, int, float, att_bf16_t) = k_att_bwd_dq<HD, BF>;
        const char *nm = att_kname<HD, BF>(2);
    LAUNCH_AS(kern, nm, grid, ATT_THREADS, s_q, s)
        (dq, q, k, v, dout, lse, Drow, Tq, Tk, H, Hkv, hd, causal, window, scale, c16);
    }
    return cudaSuccess;
}
#define ATT_DISPATCH(fn, HDP, bf, ...)                                                             \
    (HDP == 16    ? (bf ? fn<16, true>(__VA_ARGS__) : fn<16, false>(__VA_ARGS__))                  \
     : HDP == 32  ? (bf ? fn<32, true>(__VA_ARGS__) : fn<32, false>(__VA_ARGS__))                  \
     : HDP == 64  ? (bf ? fn<64, true>(__VA_ARGS__) : fn<64, false>(__VA_ARGS__))                  \
                  : (bf ? fn<128, true>(__VA_ARGS__) : fn<128, false>(__VA_ARGS__)))
/* hd <= ATT_MAX_HD (att_pad_hd(hd) != 0); bf: the tensor-core engine */
static inline cudaError_t attention_forward_launch(cudaStream_t s, int bf, float *out, float *lse, const float *q,
                                                   const float *k, const float *v, int B, int Tq, int Tk, int H,
                                                   int Hkv, int hd, int causal, int window, att_bf16_t c16) {
    if (B <= 0 || Tq <= 0 || H <= 0) return cudaSuccess;
    const int HDP = att_pad_hd(hd);
    return ATT_DISPATCH(att_forward_t, HDP, bf, s, out, lse, q, k, v, B, Tq, Tk, H, Hkv, hd, causal, window, c16);
}
/* Drow: B * H * Tq floats of scratch */
static inline cudaError_t attention_backward_launch(cudaStream_t s, int bf, float *dq, float *dk, float *dv,
                                                    float *Drow, const float *dout, const float *out,
                                                    const float *lse, const float *q, const float *k,
                                                    const float *v, int B, int Tq, int Tk, int H, int Hkv, int hd,
                                                    int causal, int window, att_bf16_t c16) {
    if (B <= 0 || Tq <= 0 || H <= 0) return cudaSuccess;
    const int HDP = att_pad_hd(hd);
    return ATT_DISPATCH(att_backward_t, HDP, bf, s, dq, dk, dv, Drow, dout, out, lse, q, k, v, B, Tq, Tk, H, Hkv,
                        hd, causal, window, c16);
}
static inline cudaError_t attention_rows_launch(cudaStream_t s, float *out, const float *q, const float *kc,
                                                const float *vc, const int *base, const int *len, int N, int H,
                                                int Hkv, int hd) {
    const size_t items = (size_t)N * H;
    if (!items) return cudaSuccess;
    const size_t smem = sizeof(float) * ATT_ROWS_WARPS * (hd + WARP * (hd + 1));
    cudaError_t e = att_smem_optin(k_att_rows, smem);
    if (e != cudaSuccess) return e;
    LAUNCH(k_att_rows, blocks_for(items, ATT_ROWS_WARPS, 1u << 30), ATT_ROWS_WARPS * WARP, smem, s)
    (out, q, kc, vc, base, len, N, H, Hkv, hd);
    return cudaSuccess;
}
#endif
