/* tests/emu/include/cuda_bf16.h: __nv_bfloat16 and __nv_bfloat162 with cuda_bf16.h's
 * conversions and arithmetic, for the execution-model emulator (tests/emu; docs/DEVICES.md).
 *
 * Conversions from float round as CUDA does: _rn to nearest, ties to even (the default
 * constructor from float and __float2bfloat16 too), NaN kept a NaN; _rz/_rd/_ru as named.
 * Arithmetic is computed in float and rounded once to bf16: the hardware's bf16 add and
 * multiply are correctly rounded, so for sums of values of very different magnitude the
 * float step can round twice where the GPU rounds once (docs/DEVICES.md lists it). */
#ifndef EMU_CUDA_BF16_H
#define EMU_CUDA_BF16_H
#include "cuda_runtime.h"
#ifndef __cplusplus
typedef struct { unsigned short __x; } __nv_bfloat16;
typedef struct __attribute__((aligned(4))) { __nv_bfloat16 x, y; } __nv_bfloat162;
#else
namespace emu {
static inline unsigned short bf16_bits_rn(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u | 0x00400000u) >> 16);
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static inline unsigned short bf16_bits_rz(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u | 0x00400000u) >> 16);
    return (unsigned short)(u >> 16);
}
/* toward -inf (down) or +inf (up): truncate the magnitude, step it when the sign asks */
static inline unsigned short bf16_bits_dir(float f, int up) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u | 0x00400000u) >> 16);
    unsigned short t = (unsigned short)(u >> 16);
    const int neg = (u >> 31) != 0, inexact = (u & 0xffffu) != 0;
    if (inexact && (up ? !neg : neg)) t++;
    return t;
}
static inline float bf16_float(unsigned short b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
} // namespace emu

struct __nv_bfloat16_raw {
    unsigned short x;
};
struct __nv_bfloat16 {
    unsigned short __x;
    __nv_bfloat16() = default;
    __nv_bfloat16(const __nv_bfloat16_raw &r) : __x(r.x) {}
    __nv_bfloat16(float f) : __x(emu::bf16_bits_rn(f)) {}
    __nv_bfloat16(double f) : __x(emu::bf16_bits_rn((float)f)) {}
    __nv_bfloat16(int i) : __x(emu::bf16_bits_rn((float)i)) {}
    __nv_bfloat16(unsigned i) : __x(emu::bf16_bits_rn((float)i)) {}
    __nv_bfloat16(long long i) : __x(emu::bf16_bits_rn((float)i)) {}
    __nv_bfloat16(unsigned long long i) : __x(emu::bf16_bits_rn((float)i)) {}
    __nv_bfloat16 &operator=(float f) { __x = emu::bf16_bits_rn(f); return *this; }
    __nv_bfloat16 &operator=(const __nv_bfloat16_raw &r) { __x = r.x; return *this; }
    operator float() const { return emu::bf16_float(__x); }
    operator __nv_bfloat16_raw() const { return __nv_bfloat16_raw{__x}; }
};
struct __align__(4) __nv_bfloat162 {
    __nv_bfloat16 x, y;
    __nv_bfloat162() = default;
    __nv_bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) : x(a), y(b) {}
};
typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;
static_assert(sizeof(__nv_bfloat16) == 2 && sizeof(__nv_bfloat162) == 4, "bf16 layouts");

static inline __nv_bfloat16 __emu_bf16_of_bits(unsigned short b) { __nv_bfloat16 h; h.__x = b; return h; }
static inline __nv_bfloat16 __float2bfloat16(float f) { return __emu_bf16_of_bits(emu::bf16_bits_rn(f)); }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __emu_bf16_of_bits(emu::bf16_bits_rn(f)); }
static inline __nv_bfloat16 __float2bfloat16_rz(float f) { return __emu_bf16_of_bits(emu::bf16_bits_rz(f)); }
static inline __nv_bfloat16 __float2bfloat16_rd(float f) { return __emu_bf16_of_bits(emu::bf16_bits_dir(f, 0)); }
static inline __nv_bfloat16 __float2bfloat16_ru(float f) { return __emu_bf16_of_bits(emu::bf16_bits_dir(f, 1)); }
static inline __nv_bfloat16 __double2bfloat16(double d) { return __float2bfloat16_rn((float)d); }
static inline __nv_bfloat16 __int2bfloat16_rn(int i) { return __float2bfloat16_rn((float)i); }
static inline float __bfloat162float(__nv_bfloat16 h) { return emu::bf16_float(h.__x); }
static inline int __bfloat162int_rn(__nv_bfloat16 h) { return (int)nearbyintf(__bfloat162float(h)); }
static inline int __bfloat162int_rz(__nv_bfloat16 h) { return (int)__bfloat162float(h); }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
static inline short __bfloat16_as_short(__nv_bfloat16 h) { return (short)h.__x; }
static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return __emu_bf16_of_bits(u); }
static inline __nv_bfloat16 __short_as_bfloat16(short s) { return __emu_bf16_of_bits((unsigned short)s); }
static inline __nv_bfloat162 __float2bfloat162_rn(float f) { return __nv_bfloat162(__float2bfloat16_rn(f), __float2bfloat16_rn(f)); }
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return __nv_bfloat162(__float2bfloat16_rn(a), __float2bfloat16_rn(b)); }
static inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat162(a, b); }
static inline __nv_bfloat162 __bfloat162bfloat162(__nv_bfloat16 a) { return __nv_bfloat162(a, a); }
static inline __nv_bfloat162 __lows2bfloat162(__nv_bfloat162 a, __nv_bfloat162 b) { return __nv_bfloat162(a.x, b.x); }
static inline __nv_bfloat162 __highs2bfloat162(__nv_bfloat162 a, __nv_bfloat162 b) { return __nv_bfloat162(a.y, b.y); }
static inline __nv_bfloat16 __low2bfloat16(__nv_bfloat162 a) { return a.x; }
static inline __nv_bfloat16 __high2bfloat16(__nv_bfloat162 a) { return a.y; }
static inline float __low2float(__nv_bfloat162 a) { return __bfloat162float(a.x); }
static inline float __high2float(__nv_bfloat162 a) { return __bfloat162float(a.y); }
static inline float2 __bfloat1622float2(__nv_bfloat162 a) { return make_float2(__bfloat162float(a.x), __bfloat162float(a.y)); }
static inline __nv_bfloat162 __float22bfloat162_rn(float2 f) { return __floats2bfloat162_rn(f.x, f.y); }

/* arithmetic: in float, rounded once to bf16 */
#define EMU_BF16_BIN(name, expr)                                                                   \
    static inline __nv_bfloat16 name(__nv_bfloat16 a_, __nv_bfloat16 b_) {                          \
        const float a = __bfloat162float(a_), b = __bfloat162float(b_);                             \
        return __float2bfloat16_rn(expr);                                                           \
    }                                                                                               \
    static inline __nv_bfloat162 name##2(__nv_bfloat162 a2, __nv_bfloat162 b2) {                    \
        return __nv_bfloat162(name(a2.x, b2.x), name(a2.y, b2.y));                                  \
    }
EMU_BF16_BIN(__hadd, a + b)
EMU_BF16_BIN(__hsub, a - b)
EMU_BF16_BIN(__hmul, a * b)
EMU_BF16_BIN(__hdiv, a / b)
EMU_BF16_BIN(__hmax, fmaxf(a, b))
EMU_BF16_BIN(__hmin, fminf(a, b))
#undef EMU_BF16_BIN
static inline __nv_bfloat16 __hfma(__nv_bfloat16 a, __nv_bfloat16 b, __nv_bfloat16 c) {
    return __float2bfloat16_rn(fmaf(__bfloat162float(a), __bfloat162float(b), __bfloat162float(c)));
}
static inline __nv_bfloat162 __hfma2(__nv_bfloat162 a, __nv_bfloat162 b, __nv_bfloat162 c) {
    return __nv_bfloat162(__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y));
}
static inline __nv_bfloat16 __hneg(__nv_bfloat16 a) { return __emu_bf16_of_bits((unsigned short)(a.__x ^ 0x8000u)); }
static inline __nv_bfloat16 __habs(__nv_bfloat16 a) { return __emu_bf16_of_bits((unsigned short)(a.__x & 0x7fffu)); }
static inline __nv_bfloat162 __hneg2(__nv_bfloat162 a) { return __nv_bfloat162(__hneg(a.x), __hneg(a.y)); }
static inline __nv_bfloat162 __habs2(__nv_bfloat162 a) { return __nv_bfloat162(__habs(a.x), __habs(a.y)); }
static inline bool __heq(__nv_bfloat16 a, __nv_bfloat16 b) { return __bfloat162float(a) == __bfloat162float(b); }
static inline bool __hne(__nv_bfloat16 a, __nv_bfloat16 b) { return __bfloat162float(a) != __bfloat162float(b); }
static inline bool __hlt(__nv_bfloat16 a, __nv_bfloat16 b) { return __bfloat162float(a) < __bfloat162float(b); }
static inline bool __hle(__nv_bfloat16 a, __nv_bfloat16 b) { return __bfloat162float(a) <= __bfloat162float(b); }
static inline bool __hgt(__nv_bfloat16 a, __nv_bfloat16 b) { return __bfloat162float(a) > __bfloat162float(b); }
static inline bool __hge(__nv_bfloat16 a, __nv_bfloat16 b) { return __bfloat162float(a) >= __bfloat162float(b); }
static inline bool __hisnan(__nv_bfloat16 a) { return isnan(__bfloat162float(a)); }
static inline int __hisinf(__nv_bfloat16 a) { float f = __bfloat162float(a); return isinf(f) ? (f < 0 ? -1 : 1) : 0; }
static inline __nv_bfloat16 hsqrt(__nv_bfloat16 a) { return __float2bfloat16_rn(sqrtf(__bfloat162float(a))); }
static inline __nv_bfloat16 hexp(__nv_bfloat16 a) { return __float2bfloat16_rn(expf(__bfloat162float(a))); }
static inline __nv_bfloat16 hlog(__nv_bfloat16 a) { return __float2bfloat16_rn(logf(__bfloat162float(a))); }
static inline __nv_bfloat16 hrsqrt(__nv_bfloat16 a) { return __float2bfloat16_rn(1.0f / sqrtf(__bfloat162float(a))); }

static inline __nv_bfloat16 operator+(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return __hadd(a, b); }
static inline __nv_bfloat16 operator-(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return __hsub(a, b); }
static inline __nv_bfloat16 operator*(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return __hmul(a, b); }
static inline __nv_bfloat16 operator/(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return __hdiv(a, b); }
static inline __nv_bfloat16 operator-(const __nv_bfloat16 &a) { return __hneg(a); }
static inline __nv_bfloat16 &operator+=(__nv_bfloat16 &a, const __nv_bfloat16 &b) { return a = __hadd(a, b); }
static inline __nv_bfloat16 &operator-=(__nv_bfloat16 &a, const __nv_bfloat16 &b) { return a = __hsub(a, b); }
static inline __nv_bfloat16 &operator*=(__nv_bfloat16 &a, const __nv_bfloat16 &b) { return a = __hmul(a, b); }
static inline __nv_bfloat16 &operator/=(__nv_bfloat16 &a, const __nv_bfloat16 &b) { return a = __hdiv(a, b); }
static inline bool operator==(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return __heq(a, b); }
static inline bool operator!=(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return __hne(a, b); }
static inline bool operator<(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return __hlt(a, b); }
static inline bool operator<=(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return __hle(a, b); }
static inline bool operator>(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return __hgt(a, b); }
static inline bool operator>=(const __nv_bfloat16 &a, const __nv_bfloat16 &b) { return __hge(a, b); }
static inline __nv_bfloat162 operator+(const __nv_bfloat162 &a, const __nv_bfloat162 &b) { return __hadd2(a, b); }
static inline __nv_bfloat162 operator-(const __nv_bfloat162 &a, const __nv_bfloat162 &b) { return __hsub2(a, b); }
static inline __nv_bfloat162 operator*(const __nv_bfloat162 &a, const __nv_bfloat162 &b) { return __hmul2(a, b); }

static inline __nv_bfloat16 atomicAdd(__nv_bfloat16 *p, __nv_bfloat16 v) {
    return emu::of_bits<__nv_bfloat16>(emu::atomic(p, emu::A_ADD, emu::T_BF16, emu::bits_of(v), 0));
}
static inline __nv_bfloat162 atomicAdd(__nv_bfloat162 *p, __nv_bfloat162 v) {
    return emu::of_bits<__nv_bfloat162>(emu::atomic(p, emu::A_ADD, emu::T_BF162, emu::bits_of(v), 0));
}
#endif
#endif
