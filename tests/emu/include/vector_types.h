/* tests/emu/include/vector_types.h: CUDA's vector types (float4, uint2, dim3, ...) for the
 * execution-model emulator (tests/emu, docs/DEVICES.md). Layout and alignment as CUDA's: a
 * float4 is 16 bytes aligned to 16, so a kernel's 128-bit loads behave as on the GPU (an
 * unaligned one is undefined there, and the compiler's aligned loads fault here too). C and
 * C++ (dim3's constructors only in C++). */
#ifndef EMU_VECTOR_TYPES_H
#define EMU_VECTOR_TYPES_H
#include <stdint.h>

#if defined(__cplusplus) && defined(__clang__)
/* 2- and 4-element types as clang vectors (.x .y .z .w, aligned as CUDA's): a copy of a float4
 * is then one 16-byte load and store, as the GPU's 128-bit access, where a struct copy would be
 * a memcpy or two 8-byte halves. (CUDA's are structs without arithmetic: do not use the vector
 * operators these happen to have, nvcc would refuse them.) */
#define EMU_VEC2(T, N, A) typedef T N##2 __attribute__((ext_vector_type(2)));
#define EMU_VEC4(T, N, A) typedef T N##4 __attribute__((ext_vector_type(4)));
#else
#define EMU_VEC2(T, N, A) typedef struct __attribute__((aligned(A))) { T x, y; } N##2;
#define EMU_VEC4(T, N, A) typedef struct __attribute__((aligned(A))) { T x, y, z, w; } N##4;
#endif
#define EMU_VEC1(T, N, A) typedef struct __attribute__((aligned(A))) { T x; } N##1;
#define EMU_VEC3(T, N) typedef struct { T x, y, z; } N##3;
#define EMU_VECS(T, N, A1, A2, A4) EMU_VEC1(T, N, A1) EMU_VEC2(T, N, A2) EMU_VEC3(T, N) EMU_VEC4(T, N, A4)
EMU_VECS(signed char, char, 1, 2, 4)
EMU_VECS(unsigned char, uchar, 1, 2, 4)
EMU_VECS(short, short, 2, 4, 8)
EMU_VECS(unsigned short, ushort, 2, 4, 8)
EMU_VECS(int, int, 4, 8, 16)
EMU_VECS(unsigned int, uint, 4, 8, 16)
EMU_VECS(long long, longlong, 8, 16, 16)
EMU_VECS(unsigned long long, ulonglong, 8, 16, 16)
EMU_VECS(float, float, 4, 8, 16)
EMU_VECS(double, double, 8, 16, 16)
#undef EMU_VEC1
#undef EMU_VEC2
#undef EMU_VEC3
#undef EMU_VEC4
#undef EMU_VECS

#ifdef __cplusplus
struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};
#else
typedef struct dim3 { unsigned int x, y, z; } dim3;
#endif

#define EMU_MAKE2(T, N) static inline N##2 make_##N##2(T x, T y) { N##2 v; v.x = x; v.y = y; return v; }
#define EMU_MAKE3(T, N) static inline N##3 make_##N##3(T x, T y, T z) { N##3 v; v.x = x; v.y = y; v.z = z; return v; }
#define EMU_MAKE4(T, N) static inline N##4 make_##N##4(T x, T y, T z, T w) { N##4 v; v.x = x; v.y = y; v.z = z; v.w = w; return v; }
#define EMU_MAKES(T, N) EMU_MAKE2(T, N) EMU_MAKE3(T, N) EMU_MAKE4(T, N)
EMU_MAKES(signed char, char)
EMU_MAKES(unsigned char, uchar)
EMU_MAKES(short, short)
EMU_MAKES(unsigned short, ushort)
EMU_MAKES(int, int)
EMU_MAKES(unsigned int, uint)
EMU_MAKES(long long, longlong)
EMU_MAKES(unsigned long long, ulonglong)
EMU_MAKES(float, float)
EMU_MAKES(double, double)
#undef EMU_MAKE2
#undef EMU_MAKE3
#undef EMU_MAKE4
#undef EMU_MAKES
#endif
