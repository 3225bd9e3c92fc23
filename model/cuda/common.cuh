/* model/cuda/common.cuh: what every kernel family of the CUDA device (model/device_cuda.cu)
 * shares: the launch and dynamic-shared-memory spellings, warp and block reductions in a
 * fixed order, 128-bit loads and stores, bf16 conversions, and the performance model's
 * counting hook.
 *
 * The same text compiles under nvcc and under the execution-model emulator (tests/emu: the
 * .cu file built by clang++ with tests/emu/include's shim, which defines EMU_DEVICE_H).
 * Where the two must differ (inline PTX, the spelling of a 128-bit access the emulator can
 * observe as one access), CUDA_EMU selects the emulator's version; each such place says why.
 *
 * Launch sizes: a warp is 32 lanes; row kernels use blocks of ROW_WARPS warps, one warp per
 * row (STYLE.md's llm.c habit), so a block reads ROW_WARPS rows at once and a row's sum is a
 * 5-step shuffle tree whose order depends on the row length only. */
#ifndef MODEL_CUDA_COMMON_CUH
#define MODEL_CUDA_COMMON_CUH
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#ifdef EMU_DEVICE_H
#define CUDA_EMU 1
#else
#define CUDA_EMU 0
#endif

/* kernel<<<grid, block, smem, stream>>> spelled as a macro call, so that kernels and their
 * launches can live in headers (tests/emu/prepass.sh rewrites the chevrons of the .cu file
 * only): LAUNCH(k, grid, block, smem, stream)(args...). */
#if CUDA_EMU
#define LAUNCH(k, g, b, smem, s) ::emu::make_launch(k, #k, g, b, smem, s)
#else
#define LAUNCH(k, g, b, smem, s) k<<<g, b, smem, s>>>
#endif
/* the same through a kernel pointer with its name given (a template instance, whose
 * arguments' commas a macro cannot take; name: a string that outlives the launch) */
#if CUDA_EMU
#define LAUNCH_AS(fp, name, g, b, smem, s) ::emu::make_launch(fp, name, g, b, smem, s)
#else
#define LAUNCH_AS(fp, name, g, b, smem, s) fp<<<g, b, smem, s>>>
#endif

/* The launch's dynamic shared memory as a T * named `name` (16-byte aligned). */
#if CUDA_EMU
#define DYN_SHARED(T, name) T *name = (T *)::emu::dyn_shared()
#else
#define DYN_SHARED(T, name)                                                                        \
    extern __shared__ __align__(16) unsigned char name##_bytes_[];                                 \
    T *name = (T *)name##_bytes_
#endif

#define WARP 32
#define FULL_MASK 0xffffffffu
/* warps per block of the row kernels (one warp per row) */
#define ROW_WARPS 8

/* ---- 128-bit accesses ----
 * nvcc turns a float4 load into one LDG.128. Clang (the emulator's compiler) splits a
 * struct copy into 4-byte loads, which the emulator would count as four warp accesses of a
 * quarter of the data each; a load through a vector type is one 16-byte access there too. */
#if CUDA_EMU
typedef float emu_vf4_ __attribute__((vector_size(16)));
static inline float4 ld4(const float *p) {
    emu_vf4_ v = *(const emu_vf4_ *)p;
    float4 r;
    __builtin_memcpy(&r, &v, 16);
    return r;
}
static inline void st4(float *p, float4 v) {
    emu_vf4_ t;
    __builtin_memcpy(&t, &v, 16);
    *(emu_vf4_ *)p = t;
}
/* a 16-byte move of 8 bf16 */
static inline uint4 ld16b(const void *p) {
    emu_vf4_ v = *(const emu_vf4_ *)p;
    uint4 r;
    __builtin_memcpy(&r, &v, 16);
    return r;
}
static inline void st16b(void *p, uint4 v) {
    emu_vf4_ t;
    __builtin_memcpy(&t, &v, 16);
    *(emu_vf4_ *)p = t;
}
typedef float emu_vf2_ __attribute__((vector_size(8)));
static inline float2 ld2(const float *p) {
    emu_vf2_ v = *(const emu_vf2_ *)p;
    float2 r;
    __builtin_memcpy(&r, &v, 8);
    return r;
}
static inline void st2(float *p, float2 v) {
    emu_vf2_ t;
    __builtin_memcpy(&t, &v, 8);
    *(emu_vf2_ *)p = t;
}
#define ld4_stream ld4
#define st4_stream st4
#else
__device__ __forceinline__ float2 ld2(const float *p) { return *(const float2 *)p; }
__device__ __forceinline__ void st2(float *p, float2 v) { *(float2 *)p = v; }
__device__ __forceinline__ float4 ld4(const float *p) { return *(const float4 *)p; }
__device__ __forceinline__ void st4(float *p, float4 v) { *(float4 *)p = v; }
__device__ __forceinline__ uint4 ld16b(const void *p) { return *(const uint4 *)p; }
__device__ __forceinline__ void st16b(void *p, uint4 v) { *(uint4 *)p = v; }
/* read once / written once: streaming (evict-first) hints, as llm.c's activations */
__device__ __forceinline__ float4 ld4_stream(const float *p) { return __ldcs((const float4 *)p); }
__device__ __forceinline__ void st4_stream(float *p, float4 v) { __stcs((float4 *)p, v); }
#endif

/* 1 when p is 16-byte aligned (a float4 / 8-bf16 access may start there) */
__host__ __device__ static inline int aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* ---- bf16 ---- */
/* round to nearest even, as ops_math.h's ops_bf16_from_float (the CPU device's rounding) */
__device__ static inline __nv_bfloat16 to_bf16(float x) { return __float2bfloat16_rn(x); }
__device__ static inline float bf16_to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
/* two floats as one 32-bit register of two bf16 (lo in the low half, as mma operands want) */
__device__ static inline uint32_t pack_bf16(float lo, float hi) {
    const uint32_t a = __bfloat16_as_ushort(__float2bfloat16_rn(lo));
    const uint32_t b = __bfloat16_as_ushort(__float2bfloat16_rn(hi));
    return a | (b << 16);
}
/* four floats rounded (to_bf16) and stored as one 8-byte access at p (8-byte aligned): a
 * kernel writing the bf16 shadow of its output beside it (device_cuda.cu) */
__device__ static inline void st4_bf16(__nv_bfloat16 *p, float a, float b, float c, float d) {
    *(unsigned long long *)p = (unsigned long long)pack_bf16(a, b) | (unsigned long long)pack_bf16(c, d) << 32;
}
__device__ static inline float bf16_lo(uint32_t r) { return __uint_as_float(r << 16); }
__device__ static inline float bf16_hi(uint32_t r) { return __uint_as_float(r & 0xffff0000u); }

/* ---- reductions in a fixed order ----
 * A butterfly over the 32 lanes: every lane ends with the same value, and the association
 * ((l0 + l16) + (l8 + l24)) ... depends on nothing but the lane count. */
__device__ static inline float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}
__device__ static inline double warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}
__device__ static inline float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
    return v;
}
/* The sum over a block's warps of one value per warp (lane 0's), in warp order; every
 * thread gets it. scratch: >= 32 floats of shared memory, free again on return. */
__device__ static inline float block_sum(float v, float *scratch) {
    const int lane = threadIdx.x % WARP, w = threadIdx.x / WARP, nw = blockDim.x / WARP;
    v = warp_sum(v);
    __syncthreads(); /* scratch may still be read by a previous call */
    if (lane == 0) scratch[w] = v;
    __syncthreads();
    v = lane < nw ? scratch[lane] : 0.0f;
    return warp_sum(v);
}
__device__ static inline float block_max(float v, float *scratch) {
    const int lane = threadIdx.x % WARP, w = threadIdx.x / WARP, nw = blockDim.x / WARP;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[w] = v;
    __syncthreads();
    v = lane < nw ? scratch[lane] : -INFINITY;
    return warp_max(v);
}

/* One block's sum of x[0..n) in double, in an order fixed by n and width alone: virtual thread
 * v < width adds x[v], x[v + width], ... (a warp reads consecutive elements), then a tree over
 * the width (a power of two, a multiple of blockDim: each thread plays width / blockDim of
 * them, so a narrower block gives a wider one's bits). red: width doubles of shared memory;
 * every thread gets the sum. */
template <typename T>
__device__ static inline double block_sum_fixed_width(const T *x, size_t n, double *red, int width) {
    for (int v = threadIdx.x; v < width; v += blockDim.x) {
        double s = 0.0;
        for (size_t i = v; i < n; i += width) s += x[i];
        red[v] = s;
    }
    __syncthreads();
    for (int o = width / 2; o > 0; o >>= 1) {
        for (int v = threadIdx.x; v < o; v += blockDim.x) red[v] += red[v + o];
        __syncthreads();
    }
    return red[0];
}
/* the same with width = blockDim (red: blockDim doubles) */
template <typename T>
__device__ static inline double block_sum_fixed(const T *x, size_t n, double *red) {
    return block_sum_fixed_width(x, n, red, (int)blockDim.x);
}

/* blocks for n items of `per` items per block, at least 1, at most cap */
static inline unsigned blocks_for(size_t n, size_t per, unsigned cap) {
    size_t g = (n + per - 1) / per;
    return g == 0 ? 1u : (g > cap ? cap : (unsigned)g);
}
#endif
