/* common/rng.h: the one random-number generator of the project (header-only).
 *
 * Every seeded thing (document shuffles, synthetic data, weight init, sampling, Binary Mapper
 * draws) uses this, so a run is reproducible from its seeds and the state fits in a
 * checkpoint: four uint64 words. xoshiro256** seeded through splitmix64 (Blackman & Vigna);
 * written as static inline so it compiles under gcc and nvcc alike. */
#ifndef COMMON_RNG_H
#define COMMON_RNG_H
#include <stdint.h>

#ifdef __CUDACC__
#define RNG_FN static inline __host__ __device__
#else
#define RNG_FN static inline
#endif

typedef struct { uint64_t s[4]; } rng_t;

RNG_FN uint64_t rng_splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Seeds from any number of 64-bit keys (seed, epoch, rank, ...): streams for different key
 * tuples are independent for all practical purposes. */
RNG_FN void rng_seed2(rng_t *r, uint64_t a, uint64_t b) {
    uint64_t x = a ^ rng_splitmix64(&b);
    for (int i = 0; i < 4; i++) r->s[i] = rng_splitmix64(&x);
}
RNG_FN void rng_seed(rng_t *r, uint64_t seed) { rng_seed2(r, seed, 0); }

RNG_FN uint64_t rng_rotl_(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

RNG_FN uint64_t rng_u64(rng_t *r) {
    uint64_t *s = r->s;
    uint64_t out = rng_rotl_(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3];
    s[2] ^= t; s[3] = rng_rotl_(s[3], 45);
    return out;
}

/* Uniform in [0, 1) with 24 random bits: every float value is exactly representable. */
RNG_FN float rng_f32(rng_t *r) { return (float)(rng_u64(r) >> 40) * (1.0f / 16777216.0f); }
/* Uniform in [0, 1) with 53 random bits. */
RNG_FN double rng_f64(rng_t *r) { return (double)(rng_u64(r) >> 11) * (1.0 / 9007199254740992.0); }

/* Uniform integer in [0, n), unbiased (Lemire's multiply-shift with rejection). */
RNG_FN uint64_t rng_below(rng_t *r, uint64_t n) {
    if (n == 0) return 0;
    for (;;) {
        uint64_t x = rng_u64(r);
        __uint128_t m = (__uint128_t)x * n;
        uint64_t lo = (uint64_t)m;
        if (lo >= n || lo >= (uint64_t)(-n) % n) return (uint64_t)(m >> 64);
    }
}

/* Standard normal (Box-Muller; one of the pair is discarded so the state advance is fixed). */
RNG_FN float rng_normal(rng_t *r) {
    double u1 = rng_f64(r), u2 = rng_f64(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(__builtin_sqrt(-2.0 * __builtin_log(u1)) * __builtin_cos(6.283185307179586 * u2));
}
/* ---- counter-based draws: the i-th number of a stream is a function of (key, i) alone ----
 * For draws that several devices (CPU, GPU) or ranks must agree on without sharing a state:
 * each index is computed on its own, in any order, by any thread. SplitMix64's output
 * function on key + (i + 1) * golden gamma (SplitMix is itself this counter construction). */
RNG_FN uint64_t rng_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
/* The key of the stream (a, b), e.g. (seed ^ salt, step): well mixed, so nearby (a, b) give
 * unrelated streams. */
RNG_FN uint64_t rng_counter_key(uint64_t a, uint64_t b) {
    return rng_mix64(rng_mix64(a + 0x9e3779b97f4a7c15ULL) ^ (b * 0xd1b54a32d192ed03ULL));
}
RNG_FN uint64_t rng_counter_u64(uint64_t key, uint64_t i) {
    return rng_mix64(key + (i + 1) * 0x9e3779b97f4a7c15ULL);
}
/* Uniform in [0, 1) with 24 random bits, like rng_f32. */
RNG_FN float rng_counter_f32(uint64_t key, uint64_t i) {
    return (float)(rng_counter_u64(key, i) >> 40) * (1.0f / 16777216.0f);
}
#endif
