/* model/ops_clones.h: CPU-only helpers for the ops' hot loops (not for nvcc).
 *
 * OPS_CLONES builds a function for AVX-512, for AVX2+FMA and for the baseline the Makefile
 * targets (x86-64-v2); the loader picks one per machine (GCC function multi-versioning), so
 * the build stays portable and the exp/sigmoid loops run 8 or 16 lanes wide where the CPU
 * allows. Versions differ from each other in the last bits (FMA contraction, lane count of a
 * vectorised sum): results are deterministic on one kind of CPU, and bit-exact resume
 * assumes the same kind of CPU. Clone only leaf functions that the OpenMP loops call, not
 * the functions that open parallel regions. */
#ifndef MODEL_OPS_CLONES_H
#define MODEL_OPS_CLONES_H
#include <omp.h>
#include <stddef.h>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__CUDACC__)
#define OPS_CLONES \
    __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define OPS_CLONES
#endif

/* This thread's share [*lo, *hi) of n items inside a parallel region: contiguous, fixed by
 * the thread count alone (deterministic). */
static inline void ops_thread_range(size_t n, size_t *lo, size_t *hi) {
    size_t t = (size_t)omp_get_thread_num(), nt = (size_t)omp_get_num_threads();
    *lo = n * t / nt;
    *hi = n * (t + 1) / nt;
}
#endif
