/* tests/emu/test_emu_perf.cu: the emulator's performance counters (docs/DEVICES.md, "The
 * performance model"), on kernels whose counts are known by hand. Built like test_emu.cu but
 * with the FLOP-counting pass plugin (tests/emu/flops_pass.cc), as the device objects of
 * build/emu/bench/train_step are; run by tests/it_emu.sh.
 *   - FLOPs: a fused multiply-add per element (2 each), a loop of k adds per thread, a call of
 *     expf (1), and none for integer work or copies; a warp's tensor-core product
 *     (model/cuda/mma.cuh's mma_bf16, m16n8k16) 4096 tensor FLOPs and no CUDA-core ones;
 *   - the warp access hook's 32-byte sectors: a coalesced float copy moves 4 sectors per warp
 *     access (100%), a stride-8 read 32 (12.5%), a float4 copy 16 (100%);
 *   - shared memory's wavefronts (emu_shared_wavefronts): a warp reading 32 consecutive words
 *     takes 1, the same word broadcast 1, a stride of 32 words (every lane in bank 0) 32 -- 31 of
 *     them conflicts --, a stride of 2 words 2; a warp's 16-byte accesses of 512 consecutive bytes
 *     4 (the ideal), a 16-bit transposed store into rows of 72 bf16 (attention's old tile_t) 8;
 *   - FT_EMU_SAMPLE_BLOCKS=8 (set before the first launch): a 64-block launch observes 8 blocks
 *     (blocks_run), yet every block runs (the output is complete), and the sample scaled by
 *     64/8 gives a uniform kernel's exact count; a kernel FT_EMU_SAMPLE_EXCEPT names is
 *     observed whole;
 *   - the cuBLAS hook sees m, n, k, batch and the element sizes; host waits count the
 *     synchronising copy and stream synchronisation. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_api.h"
#include "model/cuda/mma.cuh"
#include "tests/check.h"

__global__ void k_fma(int n, const float *a, const float *b, float *c) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] * b[i] + c[i];
}
/* k_fma under another name, which FT_EMU_SAMPLE_EXCEPT lists (never sampled) */
__global__ void k_fma_whole(int n, const float *a, const float *b, float *c) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] * b[i] + c[i];
}
__global__ void k_sum(int n, int k, const float *a, float *out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float s = 0;
    for (int j = 0; j < k; j++) s += a[i];
    out[i] = s;
}
__global__ void k_exp(int n, const float *a, float *out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = expf(a[i]);
}
__global__ void k_copy(int n, const float *a, float *out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i];
}
__global__ void k_strided(int n, const float *a, float *out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[(size_t)i * 8];
}
/* every lane: A's fragment all 1.0, B's all 2.0 (bf16 0x3f80, 0x4000 in both halves), C = lane */
__global__ void k_mma(float *out) {
    const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    const uint32_t a[4] = {0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u};
    float c[4] = {(float)(threadIdx.x % 32), 0, 0, 0};
    mma_bf16(c, a, 0x40004000u, 0x40004000u);
    for (int e = 0; e < 4; e++) out[4 * t + e] = c[e];
}
__global__ void k_copy4(int n, const float4 *a, float4 *out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i];
}

/* one warp: shared loads of s[f(lane)] for the patterns test_banks names, then a transposed bf16
 * store (lane: column 8 (lane % 8), row lane / 8 of a 72-wide tile, as att_put's tile_t) */
__global__ void k_banks(int pattern, float *out) {
    __shared__ __align__(16) float s[32 * 33];
    __shared__ uint16_t t[64 * 72];
    const int l = threadIdx.x;
    for (int i = l; i < 32 * 33; i += 32) s[i] = (float)i;
    __syncwarp();
    float x = 0;
    if (pattern == 0) x = s[l];
    if (pattern == 1) x = s[5];
    if (pattern == 2) x = s[32 * l];
    if (pattern == 3) x = s[2 * l];
    if (pattern == 4) {
        const float4 v = ld4(s + 4 * l);
        x = v.x + v.w;
    }
    if (pattern == 5) ((volatile uint16_t *)t)[(8 * (l % 8)) * 72 + l / 8] = (uint16_t)l; /* never read: volatile */
    out[l] = x;
}

struct counts {
    unsigned long long sh_access, sh_wave, sh_ideal;
    unsigned long long flops, tensor_flops, blocks, blocks_run, ld_bytes, st_bytes, ld_sectors, st_sectors, ld_warp, st_warp;
};
static counts g_c;
static void on_launch(const emu_launch_info_t *l, int end, void *) {
    if (!end) {
        memset(&g_c, 0, sizeof g_c);
        return;
    }
    g_c.flops = l->flops, g_c.tensor_flops = l->tensor_flops, g_c.blocks = l->blocks, g_c.blocks_run = l->blocks_run;
}
static void on_warp(const emu_warp_access_t *a, void *) {
    if (a->space == EMU_SHARED) {
        unsigned ideal = 0;
        g_c.sh_wave += emu_shared_wavefronts(a, &ideal);
        g_c.sh_ideal += ideal, g_c.sh_access++;
        return;
    }
    if (a->space != EMU_GLOBAL) return;
    unsigned long long s[64];
    unsigned n = 0;
    for (unsigned l = 0; l < 32; l++)
        if (a->mask >> l & 1)
            for (uintptr_t x = (uintptr_t)a->addr[l] >> 5; x <= ((uintptr_t)a->addr[l] + a->size - 1) >> 5; x++) s[n++] = x;
    unsigned d = 0;
    for (unsigned i = 0; i < n; i++) {
        unsigned j = 0;
        while (j < i && s[j] != s[i]) j++;
        d += j == i;
    }
    const unsigned long long bytes = (unsigned long long)__builtin_popcount(a->mask) * a->size;
    if (a->flags & EMU_STORE) g_c.st_bytes += bytes, g_c.st_sectors += d, g_c.st_warp++;
    else g_c.ld_bytes += bytes, g_c.ld_sectors += d, g_c.ld_warp++;
}
static emu_gemm_info_t g_gemm;
static int g_gemms;
static void on_gemm(const emu_gemm_info_t *g, void *) { g_gemm = *g, g_gemms++; }

static float *dev_floats(size_t n, float v) {
    float *d = NULL, *h = (float *)malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = v;
    cudaMalloc(&d, n * sizeof(float));
    cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice);
    free(h);
    return d;
}

static void test_flops(void) {
    enum { N = 1000 };
    float *a = dev_floats(N, 2), *b = dev_floats(N, 3), *c = dev_floats(N, 1);
    k_fma<<<(N + 127) / 128, 128>>>(N, a, b, c);
    CHECK(g_c.flops == 2 * N, "a*b+c: 2 FLOPs per element: %llu for %d", g_c.flops, N);
    k_sum<<<(N + 127) / 128, 128>>>(N, 7, a, c);
    CHECK(g_c.flops == 7 * N, "a loop of 7 adds per thread: %llu for %d threads", g_c.flops, N);
    k_exp<<<(N + 127) / 128, 128>>>(N, a, c);
    CHECK(g_c.flops == N, "expf: 1 per element: %llu", g_c.flops);
    k_copy<<<(N + 127) / 128, 128>>>(N, a, c);
    CHECK(g_c.flops == 0, "a copy: no FLOPs: %llu", g_c.flops);
    float h = 0;
    cudaMemcpy(&h, c, sizeof h, cudaMemcpyDeviceToHost);
    CHECK(h == 2.0f, "the copy's result");
    cudaFree(a), cudaFree(b), cudaFree(c);
}

static void test_tensor_flops(void) {
    enum { BLOCKS = 2, THREADS = 64 }; /* 4 warps */
    float *out = dev_floats(4 * BLOCKS * THREADS, -1);
    k_mma<<<BLOCKS, THREADS>>>(out);
    CHECK(g_c.tensor_flops == 4ull * 2 * 16 * 8 * 16, "4 warps' m16n8k16 products: %llu tensor FLOPs, want %d",
          g_c.tensor_flops, 4 * 2 * 16 * 8 * 16);
    CHECK(g_c.flops == 0, "the tensor-core product counts no CUDA-core FLOPs: %llu", g_c.flops);
    float h[4 * 64];
    cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost);
    /* D = C + sum over 16 k of 1 x 2: lane 0's c[0] = 0 + 32, lane 5's c[0] = 5 + 32 */
    CHECK(h[0] == 32.0f && h[4 * 5] == 37.0f && h[1] == 32.0f, "the product's values: %g %g %g", h[0], h[20], h[1]);
    k_fma<<<1, 32>>>(1, out, out, out);
    CHECK(g_c.tensor_flops == 0, "a kernel without mma: 0 tensor FLOPs (%llu)", g_c.tensor_flops);
    cudaFree(out);
}

static void test_sectors(void) {
    enum { N = 256 };
    float *a = dev_floats(8 * N, 1), *c = dev_floats(N, 0);
    k_copy<<<N / 64, 64>>>(N, a, c);
    CHECK(g_c.ld_warp == N / 32 && g_c.ld_sectors == 4 * N / 32 && g_c.ld_bytes == 4 * N,
          "coalesced: 4 sectors per warp load (%llu warp loads, %llu sectors, %llu bytes)", g_c.ld_warp, g_c.ld_sectors,
          g_c.ld_bytes);
    CHECK(g_c.st_sectors == 4 * N / 32 && g_c.st_bytes == 4 * N, "coalesced stores: %llu sectors", g_c.st_sectors);
    k_strided<<<N / 64, 64>>>(N, a, c);
    CHECK(g_c.ld_sectors == 32 * N / 32 && g_c.ld_bytes == 4 * N,
          "stride 8: 32 sectors per warp load, 12.5%% efficiency (%llu sectors for %llu bytes)", g_c.ld_sectors, g_c.ld_bytes);
    k_copy4<<<N / 4 / 64 + 1, 64>>>(N / 4, (const float4 *)a, (float4 *)c);
    CHECK(g_c.ld_bytes == 4 * N && g_c.ld_sectors == N * 4 / 32,
          "float4: 16-byte lanes, 16 sectors per full warp (%llu sectors, %llu bytes)", g_c.ld_sectors, g_c.ld_bytes);
    cudaFree(a), cudaFree(c);
}

/* the wavefronts of the pattern's one shared access: the kernel's fill loop (33 stores of 32
 * consecutive words, 1 each) and its own access */
static void banks_case(int pattern, unsigned want, unsigned want_ideal, const char *what) {
    float *out = dev_floats(32, 0);
    k_banks<<<1, 32>>>(pattern, out);
    const unsigned long long fill = 33, wave = g_c.sh_wave - fill, ideal = g_c.sh_ideal - fill;
    CHECK(g_c.sh_access == fill + 1 && wave == want && ideal == want_ideal, "%s: %llu wavefronts (ideal %llu), want %u (%u)",
          what, wave, ideal, want, want_ideal);
    cudaFree(out);
}
static void test_banks(void) {
    banks_case(0, 1, 1, "32 consecutive words");
    banks_case(1, 1, 1, "one word broadcast");
    banks_case(2, 32, 1, "stride 32 words: all lanes in bank 0");
    banks_case(3, 2, 1, "stride 2 words: 2-way conflict");
    banks_case(4, 4, 4, "16-byte lanes over 512 consecutive bytes");
    banks_case(5, 8, 1, "16-bit transposed store into rows of 72");
}

static void test_sampling(void) {
    enum { N = 64 * 128 };
    float *a = dev_floats(N, 2), *b = dev_floats(N, 3), *c = dev_floats(N, 1);
    k_fma<<<64, 128>>>(N, a, b, c);
    CHECK(g_c.blocks == 64 && g_c.blocks_run == 8, "64 blocks, 8 observed (FT_EMU_SAMPLE_BLOCKS=8): %llu, %llu", g_c.blocks,
          g_c.blocks_run);
    CHECK(g_c.flops * g_c.blocks / g_c.blocks_run == 2ull * N, "the sample scaled: %llu x 8 FLOPs for %d elements",
          g_c.flops, N);
    CHECK(g_c.ld_bytes * 8 == 3ull * 4 * N, "the sample's bytes scaled (a, b, c read): %llu x 8", g_c.ld_bytes);
    float *h = (float *)malloc(N * sizeof(float));
    cudaMemcpy(h, c, N * sizeof(float), cudaMemcpyDeviceToHost);
    int ok = 1;
    for (int i = 0; i < N; i++) ok &= h[i] == 7.0f;
    CHECK(ok, "every block ran, observed or not: c = 2 x 3 + 1 everywhere");
    free(h);
    k_fma<<<8, 128>>>(8 * 128, a, b, c);
    CHECK(g_c.blocks == 8 && g_c.blocks_run == 8 && g_c.flops == 2 * 8 * 128, "8 blocks or fewer: all observed");
    k_fma_whole<<<64, 128>>>(N, a, b, c);
    CHECK(g_c.blocks == 64 && g_c.blocks_run == 64 && g_c.flops == 2ull * N,
          "a kernel FT_EMU_SAMPLE_EXCEPT names: all 64 blocks observed (%llu)", g_c.blocks_run);
    cudaFree(a), cudaFree(b), cudaFree(c);
}

static void test_gemm_hook_and_waits(void) {
    cublasHandle_t h;
    cublasCreate(&h);
    float *A = dev_floats(3 * 5, 1), *B = dev_floats(5 * 4, 1), *C = dev_floats(3 * 4, 0);
    const float one = 1, zero = 0;
    g_gemms = 0;
    cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, 3, 4, 5, &one, A, 3, B, 4, &zero, C, 3);
    CHECK(g_gemms == 1 && g_gemm.m == 3 && g_gemm.n == 4 && g_gemm.k == 5 && g_gemm.batch == 1 && g_gemm.transb == 1 &&
              g_gemm.a_size == 4 && g_gemm.c_size == 4 && !g_gemm.beta_nonzero && !g_gemm.tensor,
          "the product hook: %d call, m %d n %d k %d", g_gemms, g_gemm.m, g_gemm.n, g_gemm.k);
    cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 3, 4, 5, &one, A, 2, B, 5, &zero, C, 3);
    CHECK(g_gemms == 1, "a call cuBLAS refuses (lda < m) is not counted");
    const unsigned long long w0 = emu_host_waits();
    float x;
    cudaMemcpy(&x, C, sizeof x, cudaMemcpyDeviceToHost);
    cudaStreamSynchronize(0);
    CHECK(emu_host_waits() - w0 == 2, "a copy to the host and a stream sync: 2 host waits (%llu)", emu_host_waits() - w0);
    cublasDestroy(h);
    cudaFree(A), cudaFree(B), cudaFree(C);
}

static int g_copies;
static emu_copy_info_t g_copy;
static void on_copy(const emu_copy_info_t *c, void *) { g_copy = *c, g_copies++; }

/* memsets and copies reach the copy hook with their kind and bytes (the model charges them)
 * (one past its allocation is not tested here: the emulator stops the program at it) */
static void test_copy_hook(void) {
    float *a = dev_floats(256, 1), *b = dev_floats(256, 0), h[4];
    emu_set_copy_hook(on_copy, NULL);
    g_copies = 0;
    cudaMemsetAsync(b, 0, 100 * sizeof(float), 0);
    CHECK(g_copies == 1 && g_copy.kind == -1 && g_copy.bytes == 400 && !strcmp(g_copy.name, "cudaMemsetAsync"),
          "a memset: %d call, kind %d, %zu bytes", g_copies, g_copy.kind, g_copy.bytes);
    cudaMemcpyAsync(b, a, 256 * sizeof(float), cudaMemcpyDeviceToDevice, 0);
    CHECK(g_copies == 2 && g_copy.kind == cudaMemcpyDeviceToDevice && g_copy.bytes == 1024,
          "a device-to-device copy: kind %d, %zu bytes", g_copy.kind, g_copy.bytes);
    cudaMemcpy(h, a, sizeof h, cudaMemcpyDeviceToHost);
    CHECK(g_copies == 3 && g_copy.kind == cudaMemcpyDeviceToHost && g_copy.bytes == sizeof h, "a copy to the host");
    emu_set_copy_hook(NULL, NULL);
    cudaMemsetAsync(b, 0, 4, 0);
    CHECK(g_copies == 3, "no hook, no count");
    cudaFree(a), cudaFree(b);
}

int main(void) {
    setenv("FT_EMU_SAMPLE_BLOCKS", "8", 1); /* read at the first launch */
    setenv("FT_EMU_SAMPLE_EXCEPT", "k_none,k_fma_whole", 1);
    emu_set_launch_hook(on_launch, NULL);
    emu_set_warp_access_hook(on_warp, NULL);
    emu_set_gemm_hook(on_gemm, NULL);
    RUN(test_flops);
    RUN(test_tensor_flops);
    RUN(test_sectors);
    RUN(test_banks);
    RUN(test_sampling);
    RUN(test_gemm_hook_and_waits);
    RUN(test_copy_hook);
    return check_summary();
}
