/* tests/emu/include/emu_api.h: the execution-model emulator's own interface (tests/emu,
 * docs/DEVICES.md): its seed, and the hooks through which a tool observes what the emulated
 * kernels do -- every launch, every memory access of every thread, and the same accesses
 * grouped per warp (the k-th execution of one load or store by each lane of a warp, as the 32
 * lanes of a GPU warp issue it together: what a coalescing and roofline model counts).
 * C and C++; a program linked without the emulator does not have these symbols. */
#ifndef EMU_API_H
#define EMU_API_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The seed of this process's block and thread orders ($FT_EMU_SEED, else drawn and printed). */
unsigned long long emu_seed(void);

typedef struct {
    const char *kernel;        /* the name at the launch site */
    unsigned long long serial; /* launches so far in this process, from 1 */
    unsigned grid[3], block[3];
    size_t dyn_smem;
    int device;
    /* floating-point operations the launch's threads executed, counted by the code a pass plugin
     * instrumented (tests/emu/flops_pass.cc; 0 where the .cu was compiled without it): filled in
     * before the launch hook's end call */
    unsigned long long flops;
    /* of which none are tensor-core operations: those are counted apart, 2 per product term of
     * each warp-wide matrix multiply-accumulate the launch's warps executed (mma.sync, through
     * emu::mma_m16n8k16_bf16; 4096 per m16n8k16), also before the end call */
    unsigned long long tensor_flops;
    /* blocks of the grid, and blocks observed: fewer under $FT_EMU_SAMPLE_BLOCKS=N (a launch of
     * more than N blocks runs all of them, but only every k-th, k = ceil(blocks / N), is observed:
     * checks, access hooks and the FLOP count; the others run unchecked. For the performance
     * model, bench/gpu_model.sh: a launch's counts are those of its observed blocks, a sample) */
    unsigned long long blocks, blocks_run;
    /* of the flops, the operations a GPU's special-function units run (exp2, log2, sqrt, a
     * division's reciprocal, ...: tests/emu/flops_pass.cc's __emu_sfu; 0 without the pass),
     * counted like flops, before the end call */
    unsigned long long sfu;
} emu_launch_info_t;

enum { EMU_LOAD = 1, EMU_STORE = 2, EMU_ATOMIC = 4 };
/* Where an access falls: a device allocation, the block's shared memory, the thread's own stack
 * (a GPU's local memory: arrays and spills), the launch's parameters, static data of the program
 * (__device__ and __constant__ variables). */
enum { EMU_GLOBAL = 0, EMU_SHARED = 1, EMU_LOCAL = 2, EMU_PARAM = 3, EMU_STATIC = 4 };

typedef struct {
    const emu_launch_info_t *launch;
    unsigned block;            /* linear block index: x + y*gx + z*gx*gy */
    unsigned thread;           /* linear thread index in the block */
    unsigned warp, lane;
    const void *pc;            /* the instruction: the same for the lanes of one warp access */
    const void *addr;
    unsigned size;             /* bytes: 1, 2, 4, 8 or 16 */
    unsigned flags;            /* EMU_LOAD / EMU_STORE / EMU_ATOMIC */
    unsigned space;            /* EMU_GLOBAL ... */
} emu_access_t;

typedef struct {
    const emu_launch_info_t *launch;
    unsigned block, warp;
    const void *pc;
    unsigned size, flags, space;
    unsigned mask;             /* the lanes that took part */
    const void *addr[32];      /* per lane; NULL where the lane is not in mask */
} emu_warp_access_t;

typedef void (*emu_launch_hook_fn)(const emu_launch_info_t *l, int end, void *user);
typedef void (*emu_access_hook_fn)(const emu_access_t *a, void *user);
typedef void (*emu_warp_access_hook_fn)(const emu_warp_access_t *a, void *user);

/* Each is called on the thread that launched the kernel, with the emulator's lock held (do not
 * call the CUDA API from a hook). NULL removes a hook. */
void emu_set_launch_hook(emu_launch_hook_fn fn, void *user);
void emu_set_access_hook(emu_access_hook_fn fn, void *user);
/* Warp grouping: the accesses of a warp's lanes between two points where the warp waits (a
 * barrier, a warp-synchronous call, the end of the thread) are matched by (pc, k-th execution
 * of pc); a lane that executes pc fewer times is absent from the later groups. */
void emu_set_warp_access_hook(emu_warp_access_hook_fn fn, void *user);

/* The 128-byte wavefronts shared memory needs for warp access a (space EMU_SHARED): per phase of
 * lanes served together (32 lanes; 16 for 8-byte, 8 for 16-byte accesses), the largest number of
 * distinct 4-byte words any one of the 32 banks holds. *ideal (when not NULL): the wavefronts the
 * same distinct words would take spread over all banks; the excess is bank conflicts
 * (tests/emu/emu_banks.cc). */
unsigned emu_shared_wavefronts(const emu_warp_access_t *a, unsigned *ideal);

/* A cuBLAS product as it is called (after cuBLAS's argument checks passed): C (m x n) = op(A)
 * (m x k) op(B) (k x n), batch times; element sizes of A, B, C in bytes; beta_nonzero when C is
 * read; tensor when the hardware would run it on tensor cores (bf16 operands, or a TF32 / BF16
 * fast compute type or math mode). Called on the calling thread with the emulator's lock held. */
typedef struct {
    const char *name; /* cublasSgemm, cublasGemmEx, ... */
    int transa, transb, m, n, k, batch;
    unsigned a_size, b_size, c_size;
    int beta_nonzero, tensor, device;
} emu_gemm_info_t;
typedef void (*emu_gemm_hook_fn)(const emu_gemm_info_t *g, void *user);
void emu_set_gemm_hook(emu_gemm_hook_fn fn, void *user);

/* A memset or a copy as it is queued (after its checks passed): what (cudaMemsetAsync,
 * cudaMemcpy, ...), the direction (cudaMemcpyKind's value; -1 for a memset) and the bytes. On a
 * GPU a memset and a device-to-device copy are kernels of their own that move their bytes through
 * memory (the performance model, bench/gpu_model.py, charges them). Called on the calling thread
 * with the emulator's lock held. */
typedef struct {
    const char *name;
    int kind;
    size_t bytes;
} emu_copy_info_t;
typedef void (*emu_copy_hook_fn)(const emu_copy_info_t *c, void *user);
void emu_set_copy_hook(emu_copy_hook_fn fn, void *user);

/* How many times the host has waited for a device so far (a synchronising copy to the host,
 * cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize). */
unsigned long long emu_host_waits(void);

/* $name as an unsigned number, dflt when unset or not a number (read once per name and cached by
 * the caller; for settings an emulated build overrides, e.g. LAUNCH_MAX_GRID). */
unsigned emu_env_unsigned(const char *name, unsigned dflt);

/* Fault injection: the nth next call (1: the next) of name fails as the GPU's would -- name is an
 * API function the emulator implements (cudaStreamSynchronize, cublasSetStream, ncclAllGather,
 * ...; it returns its error code: cudaErrorUnknown, CUBLAS_STATUS_INTERNAL_ERROR,
 * ncclUnhandledCudaError) or a kernel's name at its launch site (the launch sets
 * cudaErrorLaunchFailure and runs nothing). $FT_EMU_FAIL="name[:nth],..." does the same from
 * the start of a program. */
void emu_fail_call(const char *name, int nth);
/* Device dev's memory from now on: bytes in all (cudaMalloc beyond it fails). */
void emu_set_memory_limit(int dev, size_t bytes);

/* Counts of what the checks found and let pass (FT_EMU_ON_ERROR=count): 0 in a clean run. */
unsigned long long emu_error_count(void);
#ifdef __cplusplus
}
#endif
#endif
