/* model/cuda/mma.cuh: the tensor-core product the bf16 kernels use, PTX's
 * mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (sm_80 and later): a warp computes
 * D (16 x 8, fp32) = A (16 x 16, bf16) B (16 x 8, bf16) + C, every lane holding fixed
 * elements of each operand (PTX ISA, "Matrix fragments for mma.m16n8k16"). With
 * g = lane / 4 and t = lane % 4:
 *   A: a[0] = A[g][2t, 2t+1], a[1] = A[g+8][2t, 2t+1], a[2] = A[g][2t+8, 2t+9],
 *      a[3] = A[g+8][2t+8, 2t+9]          (two bf16 per register, the lower column low)
 *   B: b0 = B[2t, 2t+1][g], b1 = B[2t+8, 2t+9][g]
 *   C, D: c[0] = C[g][2t], c[1] = C[g][2t+1], c[2] = C[g+8][2t], c[3] = C[g+8][2t+1]
 * so the accumulator of two neighbouring 8-column tiles is, packed to bf16, the A fragment
 * of a 16-column step (how attention feeds P from S's registers into P V).
 *
 * Under the emulator (CUDA_EMU) the same layout is computed on the CPU: the 32 lanes post
 * their fragments to a per-warp slot, meet at __syncwarp (every lane must take part, as the
 * .aligned instruction requires), each computes its four outputs in fp32 (the emulator's
 * emu::mma_m16n8k16_bf16: the bf16 products are exact; the sum over k runs in order from C,
 * where the hardware's internal order and rounding are its own: the emulator checks the layout
 * and the data flow, a GPU the last bits), and meet again before the slot is reused. The
 * exchange is not an access of the kernel's (no_sanitize: the emulator does not observe it):
 * the performance model sees the fragments' loads from shared or global memory, as on a GPU.
 * The arithmetic runs in the emulator's runtime, outside the FLOP-counting pass, which counts
 * the warp's 2 x 16 x 8 x 16 multiply-adds as tensor-core FLOPs (bench/gpu_model.py charges
 * them at the tensor cores' bf16 peak), not as CUDA-core ones. */
#ifndef MODEL_CUDA_MMA_CUH
#define MODEL_CUDA_MMA_CUH
#include "model/cuda/common.cuh"

#if CUDA_EMU
namespace mma_emu {
struct slot_t {
    uint32_t a[WARP][4], b[WARP][2];
};
/* a slot per warp of the block an OS thread runs (emulated devices may run on several) */
static thread_local slot_t slots[1024 / WARP];
} // namespace mma_emu
__attribute__((no_sanitize("address", "coverage"))) static inline void mma_bf16(float c[4], const uint32_t a[4], uint32_t b0,
                                                                     uint32_t b1) {
    const unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const unsigned lane = tid % WARP;
    mma_emu::slot_t *s = &mma_emu::slots[tid / WARP];
    for (int i = 0; i < 4; i++) s->a[lane][i] = a[i];
    s->b[lane][0] = b0;
    s->b[lane][1] = b1;
    __syncwarp();
    ::emu::mma_m16n8k16_bf16(c, s->a, s->b, lane);
    __syncwarp();
}
#else
__device__ __forceinline__ void mma_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    __trap(); /* the build targets sm_80 and later (Makefile CUDA_ARCHS) */
#endif
}
#endif
#endif
