/* model/cuda/rope.cuh: rotary embeddings and the fused q|k|v rows on the CUDA device --
 * rope_forward/backward, qkv_split_rope, qkv_join_unrope and the decode step's per-row
 * variants -- one thread per rotation pair (i, i + hd/2) of one head of one row (four
 * consecutive pairs, 128-bit accesses, where hd/2 % 4 == 0), so a warp reads whole half-heads
 * (coalesced), not one row per thread; qkv_split_rope in one launch where its rows allow
 * (k_qkv_split: a thread per four pairs of QKV_SPLIT_HEADS heads). The rotation is ops_math.h's
 * ops_rope_rotate: out_i = x_i c - x_{i+h} s, out_{i+h} = x_{i+h} c + x_i s, with s negated for the inverse. */
#ifndef MODEL_CUDA_ROPE_CUH
#define MODEL_CUDA_ROPE_CUH
#include "model/cuda/common.cuh"
#include "model/cuda/elementwise.cuh"

/* ops_rope_rotate's arithmetic on four consecutive pairs: lo = a c - b s, hi = b c + a s */
__device__ static inline void rope_rot4(float4 a, float4 b, float4 c, float4 s, float4 &lo, float4 &hi) {
    lo = make_float4(a.x * c.x - b.x * s.x, a.y * c.y - b.y * s.y, a.z * c.z - b.z * s.z, a.w * c.w - b.w * s.w);
    hi = make_float4(b.x * c.x + a.x * s.x, b.y * c.y + a.y * s.y, b.z * c.z + a.z * s.z, b.w * c.w + a.w * s.w);
}
/* Row n's head h at src + n * src_ld + src_off + h * hd (and likewise dst), rotated at the
 * position pos[n] (pos NULL: pos0 + n % T). acc: dst += rotation (else overwritten; dst may
 * alias src). dst16 (may be NULL): dst's bf16 shadow, the same layout, written beside it (q, k
 * and the q|k|v gradient feed attention's or the products' bf16 tiles only). */
template <class I>
__global__ void k_rope(float *dst, __nv_bfloat16 *dst16, size_t dst_ld, size_t dst_off, const float *src,
                       size_t src_ld, size_t src_off, const float *cos_t, const float *sin_t, size_t N, int nh,
                       int hd, int T, int pos0, const int *pos, float sign, int acc, int vec) {
    const int h2 = hd / 2, per = vec ? h2 / 4 : h2;
    EW_LOOP(I, N * nh * per) {
        const size_t n = (size_t)i / ((size_t)nh * per);
        const int r = (int)((size_t)i % ((size_t)nh * per)), h = r / per, j = (r % per) * (vec ? 4 : 1);
        const size_t p = pos ? (size_t)pos[n] : (size_t)(pos0 + (int)(n % T));
        const float *x = src + n * src_ld + src_off + (size_t)h * hd, *cs = cos_t + p * h2, *sn = sin_t + p * h2;
        const size_t yo = n * dst_ld + dst_off + (size_t)h * hd;
        float *y = dst + yo;
        if (vec) {
            const float4 a = ld4(x + j), b = ld4(x + j + h2), c = ld4(cs + j), s0 = ld4(sn + j);
            const float4 s = make_float4(sign * s0.x, sign * s0.y, sign * s0.z, sign * s0.w);
            float4 lo, hi;
            rope_rot4(a, b, c, s, lo, hi);
            if (acc) {
                const float4 l0 = ld4(y + j), h0 = ld4(y + j + h2);
                lo = make_float4(l0.x + lo.x, l0.y + lo.y, l0.z + lo.z, l0.w + lo.w);
                hi = make_float4(h0.x + hi.x, h0.y + hi.y, h0.z + hi.z, h0.w + hi.w);
            }
            if (dst) { /* NULL: the shadow alone (qkv_split_launch) */
                st4(y + j, lo);
                st4(y + j + h2, hi);
            }
            if (dst16) {
                st4_bf16(dst16 + yo + j, lo.x, lo.y, lo.z, lo.w);
                st4_bf16(dst16 + yo + j + h2, hi.x, hi.y, hi.z, hi.w);
            }
        } else {
            const float a = x[j], b = x[j + h2], c = cs[j], s = sign * sn[j];
            const float r0 = a * c - b * s, r1 = b * c + a * s;
            const float y0 = acc ? y[j] + r0 : r0, y1 = acc ? y[j + h2] + r1 : r1;
            if (dst) y[j] = y0, y[j + h2] = y1;
            if (dst16) dst16[yo + j] = to_bf16(y0), dst16[yo + j + h2] = to_bf16(y1);
        }
    }
}
/* rows of D floats copied between strided row sets (dst row n at dst + n ld_dst + dst_off);
 * dst16 (may be NULL): dst's bf16 shadow, the same layout */
template <class I>
__global__ void k_copy_rows(float *dst, __nv_bfloat16 *dst16, size_t ld_dst, size_t dst_off, const float *src,
                            size_t ld_src, size_t src_off, size_t rows, int D, int vec) {
    const int per = vec ? D / 4 : D;
    EW_LOOP(I, rows * per) {
        const size_t n = (size_t)i / per, c = (size_t)((size_t)i % per) * (vec ? 4 : 1);
        const size_t o = n * ld_dst + dst_off + c;
        if (vec) {
            const float4 x = ld4(src + n * ld_src + src_off + c);
            if (dst) st4(dst + o, x);
            if (dst16) st4_bf16(dst16 + o, x.x, x.y, x.z, x.w);
        } else {
            const float x = src[n * ld_src + src_off + c];
            if (dst) dst[o] = x;
            if (dst16) dst16[o] = to_bf16(x);
        }
    }
}

/* qkv_split_rope in one pass (qkv_split_launch, where its rows allow 128-bit accesses): a thread
 * takes four pairs (j .. j + 3 and their partners hd/2 further) of `heads` consecutive heads of
 * row n of the fused rows -- q's, then k's (rotated), then v's (copied as they are), U = H + 2 Hkv
 * in the row's order -- and loads the row's cos and sin at those pairs once for all of them
 * (k_rope, a thread per head, loads them once per head: 40% of its requested bytes, 8 of a warp's
 * 56 sectors, the warp's 4 heads sharing them). Lanes j of a head are consecutive, so a warp
 * reads 4 heads' half-rows (128 contiguous bytes each) a step. Outputs and pos as
 * qkv_split_launch's; the arithmetic k_rope's (rope_rot4): the same bits. */
template <class I>
__global__ void k_qkv_split(float *q, float *k, float *v, __nv_bfloat16 *q16, __nv_bfloat16 *k16, __nv_bfloat16 *v16,
                            const float *qkv, const float *cos_t, const float *sin_t, size_t N, int H, int Hkv, int hd,
                            int T, int pos0, const int *pos, int heads) {
    const int h2 = hd / 2, per = h2 / 4, U = H + 2 * Hkv, G = (U + heads - 1) / heads;
    const size_t ld = (size_t)U * hd, Dq = (size_t)H * hd, Dkv = (size_t)Hkv * hd;
    EW_LOOP(I, N * G * per) {
        const size_t n = (size_t)i / ((size_t)G * per);
        const int r = (int)((size_t)i % ((size_t)G * per)), u0 = (r / per) * heads, j = (r % per) * 4;
        const int u1 = u0 + heads < U ? u0 + heads : U;
        const size_t p = pos ? (size_t)pos[n] : (size_t)(pos0 + (int)(n % T));
        float4 c = make_float4(0.f, 0.f, 0.f, 0.f), s = c;
        if (u0 < H + Hkv) c = ld4(cos_t + p * h2 + j), s = ld4(sin_t + p * h2 + j);
        const float *x = qkv + n * ld + j;
        for (int u = u0; u < u1; u++) {
            float *y;
            __nv_bfloat16 *y16;
            size_t o;
            if (u < H) y = q, y16 = q16, o = n * Dq + (size_t)u * hd + j;
            else if (u < H + Hkv) y = k, y16 = k16, o = n * Dkv + (size_t)(u - H) * hd + j;
            else y = v, y16 = v16, o = n * Dkv + (size_t)(u - H - Hkv) * hd + j;
            if (!y && !y16) continue;
            const float4 a = ld4_stream(x + (size_t)u * hd), b = ld4_stream(x + (size_t)u * hd + h2);
            float4 lo = a, hi = b;
            if (u < H + Hkv) rope_rot4(a, b, c, s, lo, hi);
            if (y) { /* NULL: the shadow alone */
                st4(y + o, lo);
                st4(y + o + h2, hi);
            }
            if (y16) {
                st4_bf16(y16 + o, lo.x, lo.y, lo.z, lo.w);
                st4_bf16(y16 + o + h2, hi.x, hi.y, hi.z, hi.w);
            }
        }
    }
}
/* heads a thread of k_qkv_split takes (0: k_rope and k_copy_rows, one launch each for q, k and v).
 * 6: the table loaded once per 6 heads, and at config G (36 heads of 64) 8192 x 6 x 8 = 393,216
 * threads, more than an H100 holds at once (132 x 2048): every SM busy. */
#ifndef QKV_SPLIT_HEADS
#define QKV_SPLIT_HEADS 6
#endif

static inline bool rope_vec(int hd, const void *a, const void *b, const void *c, const void *s, size_t lda,
                            size_t ldb, size_t offa, size_t offb) {
    return (hd / 2) % 4 == 0 && aligned16(a) && aligned16(b) && aligned16(c) && aligned16(s) && lda % 4 == 0 &&
           ldb % 4 == 0 && offa % 4 == 0 && offb % 4 == 0;
}
static inline void rope_launch(cudaStream_t s, float *dst, __nv_bfloat16 *dst16, size_t dst_ld, size_t dst_off,
                               const float *src, size_t src_ld, size_t src_off, const float *cs, const float *sn,
                               size_t N, int nh, int hd, int T, int pos0, const int *pos, float sign, int acc) {
    if (!N || nh <= 0 || hd < 2) return;
    const int vec = rope_vec(hd, dst, src, cs, sn, dst_ld, src_ld, dst_off, src_off) && ew_vec16(dst16);
    const size_t items = N * nh * (vec ? hd / 8 : hd / 2);
    EW_DISPATCH(k_rope, items, items, s, dst, dst16, dst_ld, dst_off, src, src_ld, src_off, cs, sn, N, nh, hd, T, pos0,
                pos, sign, acc, vec);
}
static inline void copy_rows_launch(cudaStream_t s, float *dst, __nv_bfloat16 *dst16, size_t ld_dst, size_t dst_off,
                                    const float *src, size_t ld_src, size_t src_off, size_t rows, int D) {
    if (!rows || D <= 0) return;
    const int vec = D % 4 == 0 && aligned16(dst) && aligned16(src) && ld_dst % 4 == 0 && ld_src % 4 == 0 &&
                    dst_off % 4 == 0 && src_off % 4 == 0 && ew_vec16(dst16);
    const size_t items = rows * (vec ? D / 4 : D);
    EW_DISPATCH(k_copy_rows, items, items, s, dst, dst16, ld_dst, dst_off, src, ld_src, src_off, rows, D, vec);
}
/* qkv (N, Dq + 2 Dkv) -> q, k rotated, v copied (an output NULL with its shadow NULL skipped,
 * NULL beside a shadow: the shadow alone); pos as k_rope's; q16,
 * k16, v16: their bf16 shadows or NULL; heads: k_qkv_split's heads a thread (QKV_SPLIT_HEADS; the
 * device's $FT_CUDA_QKV_SPLIT=0: 0), 0: k_rope for q and k, k_copy_rows for v (the same bits) */
static inline void qkv_split_launch(cudaStream_t s, float *q, float *k, float *v, __nv_bfloat16 *q16,
                                    __nv_bfloat16 *k16, __nv_bfloat16 *v16, const float *qkv, const float *cs,
                                    const float *sn, int N, int T, int H, int Hkv, int hd, int pos0, const int *pos,
                                    int heads) {
    const size_t Dq = (size_t)H * hd, Dkv = (size_t)Hkv * hd, ld = Dq + 2 * Dkv;
    if (heads > 0 && N > 0 && H > 0 && Hkv > 0 && hd % 8 == 0 && aligned16(qkv) && aligned16(cs) &&
        aligned16(sn) && aligned16(q) && aligned16(k) && aligned16(v) && ew_vec16(q16) && ew_vec16(k16) &&
        ew_vec16(v16)) {
        const size_t items = (size_t)N * ((H + 2 * Hkv + heads - 1) / heads) * (hd / 8);
        EW_DISPATCH(k_qkv_split, (size_t)N * ld, items, s, q, k, v, q16, k16, v16, qkv, cs, sn, (size_t)N, H, Hkv, hd, T,
                    pos0, pos, heads);
        return;
    }
    if (q || q16) rope_launch(s, q, q16, Dq, 0, qkv, ld, 0, cs, sn, N, H, hd, T, pos0, pos, 1.0f, 0);
    if (k || k16) rope_launch(s, k, k16, Dkv, 0, qkv, ld, Dq, cs, sn, N, Hkv, hd, T, pos0, pos, 1.0f, 0);
    if (v || v16) copy_rows_launch(s, v, v16, Dkv, 0, qkv, ld, Dq + Dkv, N, (int)Dkv);
}
/* the backward: dqkv rows overwritten with dq, dk rotated back and dv (dqkv16: its shadow or NULL;
 * dqkv NULL: the shadow alone) */
static inline void qkv_join_launch(cudaStream_t s, float *dqkv, __nv_bfloat16 *dqkv16, const float *dq, const float *dk,
                                   const float *dv, const float *cs, const float *sn, int N, int T, int H, int Hkv,
                                   int hd, int pos0) {
    const size_t Dq = (size_t)H * hd, Dkv = (size_t)Hkv * hd, ld = Dq + 2 * Dkv;
    rope_launch(s, dqkv, dqkv16, ld, 0, dq, Dq, 0, cs, sn, N, H, hd, T, pos0, NULL, -1.0f, 0);
    rope_launch(s, dqkv, dqkv16, ld, Dq, dk, Dkv, 0, cs, sn, N, Hkv, hd, T, pos0, NULL, -1.0f, 0);
    copy_rows_launch(s, dqkv, dqkv16, ld, Dq + Dkv, dv, Dkv, 0, N, (int)Dkv);
}
#endif
