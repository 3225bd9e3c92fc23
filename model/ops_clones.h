/* model/ops_clones.h: CPU-only helpers for the ops' hot loops (not for nvcc).
 *
 * OPS_VARIANTS(ret, name, (params), (args)) { body } defines name() three times, compiled
 * for x86-64-v4 (AVX-512), x86-64-v3 (AVX2 + FMA) and the build's baseline (x86-64-v2), plus
 * a name() that calls the one cpu_isa() chose (model/cpu_isa.h: once per process, forced by
 * FT_CPU_ISA; x86-64-v4-bf16 and x86-64-v4-amx run the v4 build). The body is written once and inlined into
 * each variant. The variants round differently in the last bits (FMA contraction, lane count
 * of a vectorised sum), so the same computation must go through the same function: every op
 * picks its variant from that one choice, never from the CPU alone, and a test can run every
 * level on one machine.
 * Vary only leaf functions that the OpenMP loops call, not the functions that open parallel
 * regions. */
#ifndef MODEL_OPS_CLONES_H
#define MODEL_OPS_CLONES_H
#include <omp.h>
#include <stddef.h>
#include "model/cpu_isa.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__CUDACC__)
/* Feature lists rather than "arch=": the always_inline body (built for the baseline) may only
 * be inlined into a caller of the same arch whose features are a superset. */
#define OPS_TARGET_V3 __attribute__((target("avx,avx2,bmi,bmi2,f16c,fma,lzcnt,movbe,xsave")))
#define OPS_TARGET_V4 \
    __attribute__((target("avx,avx2,bmi,bmi2,f16c,fma,lzcnt,movbe,xsave,avx512f,avx512bw," \
                          "avx512cd,avx512dq,avx512vl")))
#define OPS_VARIANTS(ret, name, params, args)                                                 \
    static inline __attribute__((always_inline)) ret name##_body params;                    \
    static OPS_TARGET_V4 ret name##_v4 params { return name##_body args; }                   \
    static OPS_TARGET_V3 ret name##_v3 params { return name##_body args; }                   \
    static ret name##_v2 params { return name##_body args; }                                 \
    static ret name params {                                                                 \
        switch (cpu_isa()) {                                                                 \
        case CPU_ISA_V4_AMX:                                                                 \
        case CPU_ISA_V4_BF16:                                                                \
        case CPU_ISA_V4: return name##_v4 args;                                              \
        case CPU_ISA_V3: return name##_v3 args;                                              \
        default: return name##_v2 args;                                                      \
        }                                                                                    \
    }                                                                                        \
    static inline __attribute__((always_inline)) ret name##_body params
#else
#define OPS_VARIANTS(ret, name, params, args) static ret name params
#endif

/* This thread's share [*lo, *hi) of n items inside a parallel region: contiguous, fixed by
 * the thread count alone (deterministic). */
static inline void ops_thread_range(size_t n, size_t *lo, size_t *hi) {
    size_t t = (size_t)omp_get_thread_num(), nt = (size_t)omp_get_num_threads();
    *lo = n * t / nt;
    *hi = n * (t + 1) / nt;
}

/* 1 when a parallel region is worth opening: work of at least min, more than one thread
 * allowed, not inside a region already. Otherwise the caller runs the region's tasks in a plain
 * loop (the same tasks in the same order, so the same bits): in libgomp a region with a false
 * `if`, or a team of one (the generator's serial decode, model/generate.c), still ends in a
 * futex wake, a system call per call (about a microsecond on the VM). */
static inline int ops_par(double work, double min) {
    return work >= min && omp_get_max_threads() > 1 && !omp_in_parallel();
}
#endif
