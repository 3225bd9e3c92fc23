/* model/cuda_launch.h: how a CUDA launch's threads map onto a kernel's work items
 * (model/kernels.h), written once for the device (model/device_cuda.cu) and the host test
 * that proves the mapping (tests/test_kernels.c: every item of odd-sized spaces is visited
 * exactly once).
 *
 * Every kernel is one-dimensional over its items: blocks of LAUNCH_BLOCK threads, at most
 * LAUNCH_MAX_GRID blocks, each thread taking items start, start + stride, ... (a grid-stride
 * loop), so any item count fits any grid. */
#ifndef MODEL_CUDA_LAUNCH_H
#define MODEL_CUDA_LAUNCH_H
#include <stddef.h>

#include "model/ops_math.h"

#define LAUNCH_BLOCK 256u
/* The emulated build (tests/emu) overrides the cap to make small test shapes iterate their
 * grid-stride loops. */
#ifndef LAUNCH_MAX_GRID
#define LAUNCH_MAX_GRID 8192u
#endif

/* Blocks for n items: enough for one item per thread, capped (at least 1). */
OPS_FN unsigned launch_grid(size_t n) {
    size_t g = (n + LAUNCH_BLOCK - 1) / LAUNCH_BLOCK;
    return g == 0 ? 1u : (g > LAUNCH_MAX_GRID ? LAUNCH_MAX_GRID : (unsigned)g);
}
/* The first item of thread t of block b, and the step between a thread's items. */
OPS_FN size_t launch_first(unsigned b, unsigned t) { return (size_t)b * LAUNCH_BLOCK + t; }
OPS_FN size_t launch_stride(unsigned grid) { return (size_t)grid * LAUNCH_BLOCK; }
#endif
