/* model/cuda/elementwise.cuh: element-wise kernels of the CUDA device -- SwiGLU forward and
 * backward, the residual adds, scaling -- with 128-bit accesses where every pointer is 16-byte aligned and n % 4 == 0
 * (the scalar loop otherwise), grid-stride loops with 32-bit indices where n < 2^31 (every
 * tensor of the benchmark configs). Formulas: ops_math.h (ops_silu, ops_silu_grad), as
 * kernels.h's kb_swiglu_fwd and kb_swiglu_bwd. SwiGLU's outputs feed products only: the device
 * passes their bf16 shadows (out16, dg16, du16; NULL when it keeps none) and the kernels write
 * each value's rounding beside it (device_cuda.cu, "bf16 shadows"). An fp32 output given as
 * NULL (out; dgate, dup when overwritten) is not written: the tensor is read by products only
 * and the shadow is all that is kept (device.h products_only). */
#ifndef MODEL_CUDA_ELEMENTWISE_CUH
#define MODEL_CUDA_ELEMENTWISE_CUH
#include "model/cuda/common.cuh"
#include "model/ops_math.h"

#define EW_THREADS 256
/* at most this many blocks: a few waves of an H100's 132 SMs, each thread then takes several
 * float4 (a grid-stride loop), which keeps loads in flight without a block per 1 KiB */
#define EW_MAX_BLOCKS 2048

/* index types: 32-bit where the element count allows (cheaper address arithmetic) */
#define EW_LOOP(I, n)                                                                              \
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < (I)(n); i += (I)gridDim.x * blockDim.x)

/* ---- SwiGLU ---- */
template <class I>
__global__ void k_swiglu_fwd(size_t n, float *out, __nv_bfloat16 *out16, const float *gate, const float *up, int vec) {
    if (vec) {
        EW_LOOP(I, n / 4) {
            const float4 g = ld4_stream(gate + 4 * i), u = ld4_stream(up + 4 * i);
            float4 y;
            y.x = ops_silu(g.x) * u.x;
            y.y = ops_silu(g.y) * u.y;
            y.z = ops_silu(g.z) * u.z;
            y.w = ops_silu(g.w) * u.w;
            if (out) st4(out + 4 * i, y);
            if (out16) st4_bf16(out16 + 4 * i, y.x, y.y, y.z, y.w);
        }
        return;
    }
    EW_LOOP(I, n) {
        const float y = ops_silu(gate[i]) * up[i];
        if (out) out[i] = y;
        if (out16) out16[i] = to_bf16(y);
    }
}
__device__ static inline void swiglu_grad1(float *dg, float *du, float d, float g, float u) {
    *dg = d * u * ops_silu_grad(g);
    *du = d * ops_silu(g);
}
/* acc: dgate += / dup += (else overwritten) */
template <class I>
__global__ void k_swiglu_bwd(size_t n, float *dgate, float *dup, __nv_bfloat16 *dg16, __nv_bfloat16 *du16,
                             const float *dout, const float *gate, const float *up, int acc, int vec) {
    if (vec) {
        EW_LOOP(I, n / 4) {
            const float4 d = ld4_stream(dout + 4 * i), g = ld4(gate + 4 * i), u = ld4(up + 4 * i);
            float ga[4], ua[4];
            swiglu_grad1(&ga[0], &ua[0], d.x, g.x, u.x);
            swiglu_grad1(&ga[1], &ua[1], d.y, g.y, u.y);
            swiglu_grad1(&ga[2], &ua[2], d.z, g.z, u.z);
            swiglu_grad1(&ga[3], &ua[3], d.w, g.w, u.w);
            float4 a = make_float4(ga[0], ga[1], ga[2], ga[3]), b = make_float4(ua[0], ua[1], ua[2], ua[3]);
            if (acc) {
                const float4 a0 = ld4(dgate + 4 * i), b0 = ld4(dup + 4 * i);
                a = make_float4(a.x + a0.x, a.y + a0.y, a.z + a0.z, a.w + a0.w);
                b = make_float4(b.x + b0.x, b.y + b0.y, b.z + b0.z, b.w + b0.w);
            }
            if (dgate) st4(dgate + 4 * i, a);
            if (dup) st4(dup + 4 * i, b);
            if (dg16) st4_bf16(dg16 + 4 * i, a.x, a.y, a.z, a.w);
            if (du16) st4_bf16(du16 + 4 * i, b.x, b.y, b.z, b.w);
        }
        return;
    }
    EW_LOOP(I, n) {
        float a, b;
        swiglu_grad1(&a, &b, dout[i], gate[i], up[i]);
        if (acc) a += dgate[i], b += dup[i];
        if (dgate) dgate[i] = a;
        if (dup) dup[i] = b;
        if (dg16) dg16[i] = to_bf16(a);
        if (du16) du16[i] = to_bf16(b);
    }
}

/* ---- residual adds and scaling: y = a + b; y += x; x *= s ---- */
template <class I> __global__ void k_add(size_t n, float *y, const float *a, const float *b, int vec) {
    if (vec) {
        EW_LOOP(I, n / 4) {
            const float4 p = ld4_stream(a + 4 * i), q = ld4_stream(b + 4 * i);
            st4(y + 4 * i, make_float4(p.x + q.x, p.y + q.y, p.z + q.z, p.w + q.w));
        }
        return;
    }
    EW_LOOP(I, n) y[i] = a[i] + b[i];
}
template <class I> __global__ void k_add_inplace(size_t n, float *y, const float *x, int vec) {
    if (vec) {
        EW_LOOP(I, n / 4) {
            const float4 p = ld4(y + 4 * i), q = ld4_stream(x + 4 * i);
            st4(y + 4 * i, make_float4(p.x + q.x, p.y + q.y, p.z + q.z, p.w + q.w));
        }
        return;
    }
    EW_LOOP(I, n) y[i] += x[i];
}
template <class I> __global__ void k_scale(size_t n, float *x, float s, int vec) {
    if (vec) {
        EW_LOOP(I, n / 4) {
            const float4 p = ld4(x + 4 * i);
            st4(x + 4 * i, make_float4(p.x * s, p.y * s, p.z * s, p.w * s));
        }
        return;
    }
    EW_LOOP(I, n) x[i] *= s;
}

/* ---- launchers ---- */
static inline unsigned ew_grid(size_t items) { return blocks_for(items, EW_THREADS, EW_MAX_BLOCKS); }
static inline bool ew_small(size_t n) { return n < ((size_t)1 << 31); }
static inline int ew_vec(size_t n, const void *a, const void *b, const void *c) {
    return n % 4 == 0 && aligned16(a) && (!b || aligned16(b)) && (!c || aligned16(c));
}
/* a bf16 shadow written 4 elements (8 bytes) at a time */
static inline int ew_vec16(const void *p) { return ((uintptr_t)p & 7u) == 0; }

#define EW_DISPATCH(kern, n, items, s, ...)                                                        \
    do {                                                                                           \
        if (ew_small(n)) LAUNCH_AS(kern<uint32_t>, #kern, ew_grid(items), EW_THREADS, 0, s)(__VA_ARGS__); \
        else LAUNCH_AS(kern<size_t>, #kern "<size_t>", ew_grid(items), EW_THREADS, 0, s)(__VA_ARGS__); \
    } while (0)

static inline void swiglu_forward_launch(cudaStream_t s, float *out, __nv_bfloat16 *out16, const float *gate,
                                         const float *up, size_t n) {
    if (!n) return;
    const int vec = ew_vec(n, out, gate, up) && ew_vec16(out16);
    EW_DISPATCH(k_swiglu_fwd, n, vec ? n / 4 : n, s, n, out, out16, gate, up, vec);
}
static inline void swiglu_backward_launch(cudaStream_t s, float *dg, float *du, __nv_bfloat16 *dg16, __nv_bfloat16 *du16,
                                          const float *dout, const float *gate, const float *up, size_t n, int acc) {
    if (!n) return;
    const int vec = ew_vec(n, dg, du, dout) && ew_vec(n, gate, up, NULL) && ew_vec16(dg16) && ew_vec16(du16);
    EW_DISPATCH(k_swiglu_bwd, n, vec ? n / 4 : n, s, n, dg, du, dg16, du16, dout, gate, up, acc, vec);
}
static inline void add_launch(cudaStream_t s, float *y, const float *a, const float *b, size_t n) {
    if (!n) return;
    const int vec = ew_vec(n, y, a, b);
    EW_DISPATCH(k_add, n, vec ? n / 4 : n, s, n, y, a, b, vec);
}
static inline void add_inplace_launch(cudaStream_t s, float *y, const float *x, size_t n) {
    if (!n) return;
    const int vec = ew_vec(n, y, x, NULL);
    EW_DISPATCH(k_add_inplace, n, vec ? n / 4 : n, s, n, y, x, vec);
}
static inline void scale_launch(cudaStream_t s, float *x, float f, size_t n) {
    if (!n) return;
    const int vec = ew_vec(n, x, NULL, NULL);
    EW_DISPATCH(k_scale, n, vec ? n / 4 : n, s, n, x, f, vec);
}
#endif
