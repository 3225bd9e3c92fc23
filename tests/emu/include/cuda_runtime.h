/* tests/emu/include/cuda_runtime.h: the runtime API (cuda_runtime_api.h) and, in C++, what
 * nvcc provides to every .cu file (emu_device.h: kernels, builtins, intrinsics) plus the C++
 * forms of the symbol and attribute calls. The emulator's build forces it into every .cu file,
 * as nvcc does. */
#ifndef EMU_CUDA_RUNTIME_H
#define EMU_CUDA_RUNTIME_H
#include "cuda_runtime_api.h"
#ifdef __cplusplus
#include "emu_device.h"
template <class T> static inline cudaError_t cudaFuncSetAttribute(T *entry, cudaFuncAttribute attr, int value) {
    return cudaFuncSetAttribute((const void *)entry, attr, value);
}
template <class T>
static inline cudaError_t cudaMemcpyToSymbol(const T &symbol, const void *src, size_t count, size_t offset = 0,
                                             cudaMemcpyKind kind = cudaMemcpyHostToDevice) {
    return cudaMemcpyToSymbol((const void *)&symbol, src, count, offset, kind);
}
template <class T>
static inline cudaError_t cudaMemcpyFromSymbol(void *dst, const T &symbol, size_t count, size_t offset = 0,
                                               cudaMemcpyKind kind = cudaMemcpyDeviceToHost) {
    return cudaMemcpyFromSymbol(dst, (const void *)&symbol, count, offset, kind);
}
template <class T> static inline cudaError_t cudaMalloc(T **p, size_t size) { return cudaMalloc((void **)p, size); }
template <class T> static inline cudaError_t cudaMallocHost(T **p, size_t size) { return cudaMallocHost((void **)p, size); }
#endif
#endif
