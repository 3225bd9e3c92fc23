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
 * them at the tensor cores' bf16 peak), not as CUDA-core ones.
 *
 * The B fragments come from shared memory with ldmatrix (ldsm_x4, ldsm_x4_t: PTX's
 * ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16): lane l gives the address of row l % 8 of
 * 8x8 matrix l / 8 (16 bytes, 16-byte aligned) and register i receives lane (g, t)'s elements of
 * matrix i -- (g, 2t), (g, 2t + 1), or with .trans (2t, g), (2t + 1, g) -- which is the B
 * fragment layout above: for a row-major B^T tile [n][k] the plain load, for a row-major B tile
 * [k][n] the transposed one (no transposed copy in shared memory, and one 16-byte row a lane
 * where two 16-bit loads per register were needed). The hardware reads each matrix's 8 rows in
 * one 128-byte wavefront when they fall into distinct banks. Under the emulator each lane
 * really loads its 16-byte row (an observed shared access: the performance model counts its
 * wavefronts, 8 lanes a phase), posts it to the warp's slot and takes its registers
 * (emu::ldmatrix_b16) after a __syncwarp; two row slots used in turn make a second __syncwarp
 * unnecessary (a lane writes a slot again only after every lane passed the next call's one). */
#ifndef MODEL_CUDA_MMA_CUH
#define MODEL_CUDA_MMA_CUH
#include "model/cuda/common.cuh"

#if CUDA_EMU
namespace mma_emu {
struct slot_t {
    uint32_t a[WARP][4], b[WARP][2];
    uint32_t rows[2][WARP][4]; /* ldmatrix's rows, two slots in turn */
    unsigned char turn[WARP];  /* each lane's next row slot */
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
/* the warp's exchange of ldmatrix: this lane's row in, its four registers out */
__attribute__((no_sanitize("address", "coverage"))) static inline void ldsm_x4_(uint32_t r[4], uint4 row, int trans) {
    const unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const unsigned lane = tid % WARP;
    mma_emu::slot_t *s = &mma_emu::slots[tid / WARP];
    const unsigned k = s->turn[lane];
    s->turn[lane] = (unsigned char)(k ^ 1u);
    s->rows[k][lane][0] = row.x, s->rows[k][lane][1] = row.y, s->rows[k][lane][2] = row.z, s->rows[k][lane][3] = row.w;
    __syncwarp();
    ::emu::ldmatrix_b16(r, s->rows[k], lane, trans);
}
/* the row's 16-byte load is the kernel's own access (observed, counted) */
static inline void ldsm_x4(uint32_t r[4], const __nv_bfloat16 *p) { ldsm_x4_(r, ld16b(p), 0); }
static inline void ldsm_x4_t(uint32_t r[4], const __nv_bfloat16 *p) { ldsm_x4_(r, ld16b(p), 1); }
#else
__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const __nv_bfloat16 *p) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t r[4], const __nv_bfloat16 *p) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
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
