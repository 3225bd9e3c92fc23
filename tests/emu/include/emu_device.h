/* tests/emu/include/emu_device.h: what nvcc gives a .cu file implicitly, for the execution-model
 * emulator (tests/emu; docs/DEVICES.md says what it proves and what it cannot).
 *
 * A .cu file is compiled by the host C++ compiler with this header forced in (through
 * cuda_runtime.h) after tests/emu/prepass.sh rewrote its launches: kernel<<<g, b, smem, s>>>(args)
 * becomes ::emu::make_launch(kernel, "kernel", g, b, smem, s)(args). The emulator then runs every
 * thread of every block as a fiber with its real threadIdx/blockIdx/blockDim/gridDim:
 *   - blocks in a seeded random order, one block at a time; __syncthreads is a barrier of the
 *     block's fibers (reached by some threads only, or with some exited: an error);
 *   - __shared__ variables live in one ELF section (.emu_shared) the block owns while it runs;
 *     extern __shared__ is a per-launch buffer of the launch's dynamic size;
 *   - warp shuffles and votes wait until every lane of their mask has arrived at the same
 *     intrinsic with the same mask, then exchange, as 32 lanes in lockstep; a lane of the mask
 *     that has exited, waits elsewhere, or does not exist is an error naming the kernel;
 *   - every load and store of the compiled .cu is observed (AddressSanitizer's checks as
 *     callbacks into the emulator, tests/emu/module.mk): races on shared memory across a missing __syncthreads,
 *     accesses outside device allocations, and the stream-order checks of emu_runtime.cc.
 * Device-side arithmetic is the host's: no FMA contraction unless written, the host libm. */
#ifndef EMU_DEVICE_H
#define EMU_DEVICE_H
#ifndef __cplusplus
#error "emu_device.h: CUDA sources compile as C++ under the emulator"
#endif
/* The C++ headers a .cu file may include, taken in before the CUDA keywords below become macros
 * (libstdc++ spells attributes like __noinline__, which the macro would break). */
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cuda_runtime_api.h"

#ifndef __CUDACC__
#define __CUDACC__ 1
#endif
/* Kernels and host code share one compilation: the device branch of #ifdef __CUDA_ARCH__ is
 * the one compiled (sm_90, an H100's), for host code in the .cu file as well. */
#ifndef __CUDA_ARCH__
#define __CUDA_ARCH__ 900
#endif
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __constant__
#define __managed__
#define __grid_constant__
/* One section for every __shared__ variable: the emulator finds it in the executable, owns it
 * for the block that runs, and checks every access to it. */
#define __shared__ __attribute__((section(".emu_shared"))) static
#define warpSize 32

namespace emu {
/* ---- the running thread (fiber) ---- */
uint3 thread_idx() __attribute__((const));
uint3 block_idx() __attribute__((const));
dim3 block_dim() __attribute__((const));
dim3 grid_dim() __attribute__((const));
void *dyn_shared();
void syncthreads();
int syncthreads_reduce(int op, int pred); /* op: 0 count, 1 and, 2 or */
enum warp_kind {
    W_SHFL_IDX, W_SHFL_UP, W_SHFL_DOWN, W_SHFL_XOR, W_BALLOT, W_ANY, W_ALL, W_SYNC,
    W_MATCH_ANY, W_MATCH_ALL, W_RED_ADD, W_RED_MIN, W_RED_MAX, W_RED_MINS, W_RED_MAXS,
    W_RED_AND, W_RED_OR, W_RED_XOR, W_KINDS
};
/* A warp-synchronous operation: waits for every lane of mask, returns this lane's result. */
uint64_t warp_op(int kind, unsigned mask, uint64_t value, int arg, int width);
unsigned active_mask();
void threadfence();
long long clock64();
void nanosleep(unsigned ns);
[[noreturn]] void trap(const char *what);
/* An atomic read-modify-write, done by the emulator (which sees it as one atomic access). */
enum atomic_op { A_ADD, A_SUB, A_EXCH, A_MIN, A_MAX, A_INC, A_DEC, A_CAS, A_AND, A_OR, A_XOR };
enum atomic_type { T_I32, T_U32, T_I64, T_U64, T_F32, T_F64, T_U16, T_BF16, T_BF162 };
uint64_t atomic(void *p, int op, int type, uint64_t v, uint64_t cmp);
/* The arithmetic of PTX's mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 for one lane
 * (model/cuda/mma.cuh, after the warp's 32 lanes posted their fragments: a[lane][4] of A,
 * b[lane][2] of B): the lane's four fp32 outputs, c[e] += its row of A times its column of B,
 * k in order. It runs in the emulator's runtime, which the FLOP-counting pass does not
 * instrument: the launch counts the warp's 2 x 16 x 8 x 16 products as tensor-core FLOPs
 * (emu_launch_info_t.tensor_flops, once per warp: lane 0's call), not as CUDA-core ones. */
void mma_m16n8k16_bf16(float c[4], const uint32_t (*a)[4], const uint32_t (*b)[2], unsigned lane);
/* The exchange of PTX's ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 for one lane
 * (model/cuda/mma.cuh, after the warp's 32 lanes posted the 16-byte row each read: rows[lane]
 * holds 8 b16 elements, two per word, the lower column low). Lanes 8 i .. 8 i + 7 gave the rows
 * 0 .. 7 of matrix i; register r[i] receives, with g = lane / 4 and t = lane % 4, elements
 * (g, 2t) and (g, 2t + 1) of matrix i, or with trans elements (2t, g) and (2t + 1, g) (PTX ISA,
 * "Warp-level matrix load instruction: ldmatrix"), the first in the low half. Not counted and
 * not observed: the rows' loads are the kernel's own (16 bytes a lane, 8 lanes a phase). */
void ldmatrix_b16(uint32_t r[4], const uint32_t (*rows)[4], unsigned lane, int trans);

/* ---- launches ---- */
typedef void (*body_fn)(void *);
/* Runs body(args) on every thread of the grid, on stream s; args is the launch's parameter
 * block (kernels read it; the emulator knows its range). Sets the last error as CUDA would. */
void launch(const char *name, const void *kernel, dim3 grid, dim3 block, size_t smem,
            cudaStream_t s, body_fn body, void *args, size_t args_size);

template <class... P> struct kernel_call {
    void (*k)(P...);
    std::tuple<std::decay_t<P>...> a;
    /* not observed: the copy of the parameters into each thread is not an access of the kernel */
    __attribute__((no_sanitize("address"))) static void run(void *self) {
        kernel_call *c = static_cast<kernel_call *>(self);
        std::apply(c->k, c->a);
    }
};
template <class... P> struct launcher {
    void (*k)(P...);
    const char *name;
    dim3 g, b;
    size_t smem;
    cudaStream_t s;
    template <class... A> void operator()(A &&...args) const {
        static_assert(sizeof...(A) == sizeof...(P), "a kernel launched with another number of arguments than it takes");
        kernel_call<P...> c{k, std::tuple<std::decay_t<P>...>(std::forward<A>(args)...)};
        launch(name, (const void *)k, g, b, smem, s, &kernel_call<P...>::run, &c, sizeof c);
    }
};
template <class... P>
launcher<P...> make_launch(void (*k)(P...), const char *name, dim3 g, dim3 b, size_t smem = 0,
                           cudaStream_t s = 0) {
    return launcher<P...>{k, name, g, b, smem, s};
}

template <class T> static inline uint64_t bits_of(T v) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "a warp shuffle moves at most 8 bytes");
    uint64_t u = 0;
    memcpy(&u, &v, sizeof v);
    return u;
}
template <class T> static inline T of_bits(uint64_t u) {
    T v;
    memcpy(&v, &u, sizeof v);
    return v;
}
} // namespace emu

#define threadIdx (::emu::thread_idx())
#define blockIdx (::emu::block_idx())
#define blockDim (::emu::block_dim())
#define gridDim (::emu::grid_dim())

/* ---- barriers, fences ---- */
static inline void __syncthreads() { emu::syncthreads(); }
static inline int __syncthreads_count(int p) { return emu::syncthreads_reduce(0, p); }
static inline int __syncthreads_and(int p) { return emu::syncthreads_reduce(1, p); }
static inline int __syncthreads_or(int p) { return emu::syncthreads_reduce(2, p); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) { emu::warp_op(emu::W_SYNC, mask, 0, 0, 32); }
static inline void __threadfence() { emu::threadfence(); }
static inline void __threadfence_block() { emu::threadfence(); }
static inline void __threadfence_system() { emu::threadfence(); }
static inline unsigned __activemask() { return emu::active_mask(); }
static inline long long clock64() { return emu::clock64(); }
#define clock() clock64()
static inline void __nanosleep(unsigned ns) { emu::nanosleep(ns); }
static inline void __trap() { emu::trap("__trap()"); }
static inline void __brkpt() { emu::trap("__brkpt()"); }

/* ---- warp shuffles and votes ---- */
template <class T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    return emu::of_bits<T>(emu::warp_op(emu::W_SHFL_IDX, mask, emu::bits_of(v), src, width));
}
template <class T> static inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    return emu::of_bits<T>(emu::warp_op(emu::W_SHFL_UP, mask, emu::bits_of(v), (int)delta, width));
}
template <class T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    return emu::of_bits<T>(emu::warp_op(emu::W_SHFL_DOWN, mask, emu::bits_of(v), (int)delta, width));
}
template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    return emu::of_bits<T>(emu::warp_op(emu::W_SHFL_XOR, mask, emu::bits_of(v), lane_mask, width));
}
static inline unsigned __ballot_sync(unsigned mask, int p) { return (unsigned)emu::warp_op(emu::W_BALLOT, mask, p != 0, 0, 32); }
static inline int __any_sync(unsigned mask, int p) { return (int)emu::warp_op(emu::W_ANY, mask, p != 0, 0, 32); }
static inline int __all_sync(unsigned mask, int p) { return (int)emu::warp_op(emu::W_ALL, mask, p != 0, 0, 32); }
template <class T> static inline unsigned __match_any_sync(unsigned mask, T v) {
    return (unsigned)emu::warp_op(emu::W_MATCH_ANY, mask, emu::bits_of(v), 0, 32);
}
template <class T> static inline unsigned __match_all_sync(unsigned mask, T v, int *pred) {
    unsigned r = (unsigned)emu::warp_op(emu::W_MATCH_ALL, mask, emu::bits_of(v), 0, 32);
    *pred = r != 0;
    return r;
}
static inline unsigned __reduce_add_sync(unsigned mask, unsigned v) { return (unsigned)emu::warp_op(emu::W_RED_ADD, mask, v, 0, 32); }
static inline unsigned __reduce_min_sync(unsigned mask, unsigned v) { return (unsigned)emu::warp_op(emu::W_RED_MIN, mask, v, 0, 32); }
static inline unsigned __reduce_max_sync(unsigned mask, unsigned v) { return (unsigned)emu::warp_op(emu::W_RED_MAX, mask, v, 0, 32); }
static inline int __reduce_add_sync(unsigned mask, int v) { return (int)emu::warp_op(emu::W_RED_ADD, mask, (uint32_t)v, 0, 32); }
static inline int __reduce_min_sync(unsigned mask, int v) { return (int)emu::warp_op(emu::W_RED_MINS, mask, (uint32_t)v, 0, 32); }
static inline int __reduce_max_sync(unsigned mask, int v) { return (int)emu::warp_op(emu::W_RED_MAXS, mask, (uint32_t)v, 0, 32); }
static inline unsigned __reduce_and_sync(unsigned mask, unsigned v) { return (unsigned)emu::warp_op(emu::W_RED_AND, mask, v, 0, 32); }
static inline unsigned __reduce_or_sync(unsigned mask, unsigned v) { return (unsigned)emu::warp_op(emu::W_RED_OR, mask, v, 0, 32); }
static inline unsigned __reduce_xor_sync(unsigned mask, unsigned v) { return (unsigned)emu::warp_op(emu::W_RED_XOR, mask, v, 0, 32); }

/* ---- atomics (every scope the same: one block runs at a time) ---- */
#define EMU_ATOMIC(name, op, T, tc)                                                                \
    static inline T name(T *p, T v) { return emu::of_bits<T>(emu::atomic(p, op, tc, emu::bits_of(v), 0)); } \
    static inline T name##_block(T *p, T v) { return name(p, v); }                                 \
    static inline T name##_system(T *p, T v) { return name(p, v); }
EMU_ATOMIC(atomicAdd, emu::A_ADD, int, emu::T_I32)
EMU_ATOMIC(atomicAdd, emu::A_ADD, unsigned, emu::T_U32)
EMU_ATOMIC(atomicAdd, emu::A_ADD, unsigned long long, emu::T_U64)
EMU_ATOMIC(atomicAdd, emu::A_ADD, float, emu::T_F32)
EMU_ATOMIC(atomicAdd, emu::A_ADD, double, emu::T_F64)
EMU_ATOMIC(atomicSub, emu::A_SUB, int, emu::T_I32)
EMU_ATOMIC(atomicSub, emu::A_SUB, unsigned, emu::T_U32)
EMU_ATOMIC(atomicExch, emu::A_EXCH, int, emu::T_I32)
EMU_ATOMIC(atomicExch, emu::A_EXCH, unsigned, emu::T_U32)
EMU_ATOMIC(atomicExch, emu::A_EXCH, unsigned long long, emu::T_U64)
EMU_ATOMIC(atomicExch, emu::A_EXCH, float, emu::T_F32)
EMU_ATOMIC(atomicMin, emu::A_MIN, int, emu::T_I32)
EMU_ATOMIC(atomicMin, emu::A_MIN, unsigned, emu::T_U32)
EMU_ATOMIC(atomicMin, emu::A_MIN, long long, emu::T_I64)
EMU_ATOMIC(atomicMin, emu::A_MIN, unsigned long long, emu::T_U64)
EMU_ATOMIC(atomicMax, emu::A_MAX, int, emu::T_I32)
EMU_ATOMIC(atomicMax, emu::A_MAX, unsigned, emu::T_U32)
EMU_ATOMIC(atomicMax, emu::A_MAX, long long, emu::T_I64)
EMU_ATOMIC(atomicMax, emu::A_MAX, unsigned long long, emu::T_U64)
EMU_ATOMIC(atomicInc, emu::A_INC, unsigned, emu::T_U32)
EMU_ATOMIC(atomicDec, emu::A_DEC, unsigned, emu::T_U32)
EMU_ATOMIC(atomicAnd, emu::A_AND, int, emu::T_I32)
EMU_ATOMIC(atomicAnd, emu::A_AND, unsigned, emu::T_U32)
EMU_ATOMIC(atomicAnd, emu::A_AND, unsigned long long, emu::T_U64)
EMU_ATOMIC(atomicOr, emu::A_OR, int, emu::T_I32)
EMU_ATOMIC(atomicOr, emu::A_OR, unsigned, emu::T_U32)
EMU_ATOMIC(atomicOr, emu::A_OR, unsigned long long, emu::T_U64)
EMU_ATOMIC(atomicXor, emu::A_XOR, int, emu::T_I32)
EMU_ATOMIC(atomicXor, emu::A_XOR, unsigned, emu::T_U32)
EMU_ATOMIC(atomicXor, emu::A_XOR, unsigned long long, emu::T_U64)
#undef EMU_ATOMIC
#define EMU_CAS(T, tc)                                                                              \
    static inline T atomicCAS(T *p, T cmp, T v) { return emu::of_bits<T>(emu::atomic(p, emu::A_CAS, tc, emu::bits_of(v), emu::bits_of(cmp))); } \
    static inline T atomicCAS_block(T *p, T cmp, T v) { return atomicCAS(p, cmp, v); }
EMU_CAS(int, emu::T_I32)
EMU_CAS(unsigned, emu::T_U32)
EMU_CAS(unsigned long long, emu::T_U64)
EMU_CAS(unsigned short, emu::T_U16)
#undef EMU_CAS

/* ---- loads and stores with cache hints: plain accesses here (the hints only change timing) ---- */
template <class T> static inline T __ldg(const T *p) { return *p; }
template <class T> static inline T __ldcg(const T *p) { return *p; }
template <class T> static inline T __ldca(const T *p) { return *p; }
template <class T> static inline T __ldcs(const T *p) { return *p; }
template <class T> static inline T __ldlu(const T *p) { return *p; }
template <class T> static inline T __ldcv(const T *p) { return *p; }
template <class T> static inline void __stcg(T *p, T v) { *p = v; }
template <class T> static inline void __stcs(T *p, T v) { *p = v; }
template <class T> static inline void __stwb(T *p, T v) { *p = v; }
template <class T> static inline void __stwt(T *p, T v) { *p = v; }

/* ---- arithmetic intrinsics: the host's (correctly rounded or libm) versions ---- */
/* glibc declares __expf and its kin (its internal names): macros, after <math.h> */
#define __expf(x) expf(x)
#define __exp10f(x) exp10f(x)
#define __logf(x) logf(x)
#define __log2f(x) log2f(x)
#define __log10f(x) log10f(x)
#define __sinf(x) sinf(x)
#define __cosf(x) cosf(x)
#define __tanf(x) tanf(x)
#define __powf(x, y) powf(x, y)
static inline void __emu_sincosf(float x, float *s, float *c) { *s = sinf(x); *c = cosf(x); }
#define __sincosf(x, s, c) __emu_sincosf(x, s, c)
static inline float __fdividef(float x, float y) { return x / y; }
static inline float __fdiv_rn(float x, float y) { return x / y; }
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float __fsqrt_rn(float x) { return sqrtf(x); }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : (x == x ? x : 0.0f)); }
static inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
static inline int __float2int_rz(float x) { return (int)x; }
static inline unsigned __float2uint_rn(float x) { return (unsigned)nearbyintf(x); }
static inline float __int2float_rn(int x) { return (float)x; }
static inline float __uint2float_rn(unsigned x) { return (float)x; }
static inline float __double2float_rn(double x) { return (float)x; }
static inline int __float_as_int(float x) { return emu::of_bits<int>(emu::bits_of(x)); }
static inline unsigned __float_as_uint(float x) { return emu::of_bits<unsigned>(emu::bits_of(x)); }
static inline float __int_as_float(int x) { return emu::of_bits<float>(emu::bits_of(x)); }
static inline float __uint_as_float(unsigned x) { return emu::of_bits<float>(emu::bits_of(x)); }
static inline long long __double_as_longlong(double x) { return emu::of_bits<long long>(emu::bits_of(x)); }
static inline double __longlong_as_double(long long x) { return emu::of_bits<double>(emu::bits_of(x)); }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
static inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline unsigned __brev(unsigned x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
    x = ((x >> 8) & 0x00ff00ffu) | ((x & 0x00ff00ffu) << 8);
    return (x >> 16) | (x << 16);
}
static inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
static inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) { return (unsigned long long)(((unsigned __int128)a * b) >> 64); }
static inline int __mul24(int a, int b) { return (int)((long long)(a << 8 >> 8) * (b << 8 >> 8)); }
static inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned s) {
    s &= 31;
    return s ? (hi << s) | (lo >> (32 - s)) : hi;
}
static inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s) {
    s &= 31;
    return s ? (lo >> s) | (hi << (32 - s)) : lo;
}
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    unsigned long long v = ((unsigned long long)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return r;
}
/* CUDA's overloaded min/max of the integer and floating types */
static inline int min(int a, int b) { return a < b ? a : b; }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
static inline float min(float a, float b) { return fminf(a, b); }
static inline double min(double a, double b) { return fmin(a, b); }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
static inline float max(float a, float b) { return fmaxf(a, b); }
static inline double max(double a, double b) { return fmax(a, b); }
#endif
