/* tests/emu/test_emu_perf.cu: the emulator's performance counters (docs/DEVICES.md, "The
 * performance model"), on kernels whose counts are known by hand. Built like test_emu.cu but
 * with the FLOP-counting pass plugin (tests/emu/flops_pass.cc), as the device objects of
 * build/emu/bench/train_step are; run by tests/it_emu.sh.
 *   - FLOPs: a fused multiply-add per element (2 each), a loop of k adds per thread, a call of
 *     expf (1), and none for integer work or copies; a warp's tensor-core product
 *     (model/cuda/mma.cuh's mma_bf16, m16n8k16) 4096 tensor FLOPs and no CUDA-core ones;
 *   - special-function unit operations (sfu, counted apart from and among the FLOPs): expf 1,
 *     exp2f + sqrtf + a division 3, 1 / sqrtf 2 (rcp and rsq), a multiply-add or a copy 0;
 *   - the warp access hook's 32-byte sectors: a coalesced float copy moves 4 sectors per warp
 *     access (100%), a stride-8 read 32 (12.5%), a float4 copy 16 (100%);
 *   - shared memory's wavefronts (emu_shared_wavefronts): a warp reading 32 consecutive words
 *     takes 1, the same word broadcast 1, a stride of 32 words (every lane in bank 0) 32 -- 31 of
 *     them conflicts --, a stride of 2 words 2; a warp's 16-byte accesses of 512 consecutive bytes
 *     4 (the ideal), a 16-bit transposed store into rows of 72 bf16 (attention's old tile_t) 8;
 *   - ldmatrix (mma.cuh's ldsm_x4, ldsm_x4_t): every lane's registers against the PTX ISA's
 *     layout, plain and transposed (each check shown to reject the other layout), a product fed
 *     by them equal to the host's and a wrong choice of layout caught; its wavefronts one per 8x8
 *     matrix without conflicts (rows of 24 b16), two with rows 4 apart in one bank (rows of 16);
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
/* exp2f, sqrtf and a division per element: 3 special-function operations (ex2, rsq, rcp) */
__global__ void k_sfu3(int n, const float *a, float *out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = exp2f(a[i]) + sqrtf(a[i]) / (a[i] + 1.0f);
}
/* 1 / sqrt: a reciprocal and a square root, 2 */
__global__ void k_rsqrt(int n, const float *a, float *out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 1.0f / sqrtf(a[i]);
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

/* one warp, a 16 x 16 b16 tile in shared memory with rows of ld elements. Modes 0-2: element
 * (r, c) holds the bits 32 r + c + 1; 0 stops there, 1 loads the tile's four 8x8 matrices with
 * ldmatrix.x4 (mma.cuh's ldsm_x4; lane l at row l % 16, column 8 (l / 16): matrix i is rows
 * 8 (i % 2) .., columns 8 (i / 2) ..), 2 the same with .trans; out: each lane's 4 registers.
 * Modes 3, 4: element (r, c) is the bf16 of T[r][c] = (5 r + 3 c) % 11 - 5 and the warp
 * computes T T with mma_bf16, A's fragments by ldsm_x4, B's (the tile read as B[k][n], two
 * 8-column tiles) by ldsm_x4_t (3) or, the wrong layout for a [k][n] tile, by ldsm_x4 (4); out:
 * each lane's 8 outputs as float bits. */
__global__ void k_ldsm(int ld, int mode, uint32_t *out) {
    __shared__ __align__(16) uint16_t tile[16 * 24];
    const int l = threadIdx.x, g = l / 4, t = l % 4;
    for (int e = l; e < 256; e += 32) {
        const int r = e / 16, c = e % 16;
        tile[r * ld + c] = mode <= 2 ? (uint16_t)(32 * r + c + 1) : __bfloat16_as_ushort(__float2bfloat16_rn((float)((5 * r + 3 * c) % 11 - 5)));
    }
    __syncwarp();
    const __nv_bfloat16 *base = (const __nv_bfloat16 *)tile;
    uint32_t r[4] = {0, 0, 0, 0};
    if (mode == 1) ldsm_x4(r, base + (l & 15) * ld + 8 * (l >> 4));
    if (mode == 2) ldsm_x4_t(r, base + (l & 15) * ld + 8 * (l >> 4));
    if (mode <= 2) {
        for (int i = 0; i < 4; i++) out[4 * l + i] = r[i];
        return;
    }
    uint32_t a[4], b[4];
    ldsm_x4(a, base + (l & 15) * ld + 8 * (l >> 4));
    const __nv_bfloat16 *pb = base + (8 * ((l >> 3) & 1) + (l & 7)) * ld + 8 * (l >> 4);
    if (mode == 3) ldsm_x4_t(b, pb);
    else ldsm_x4(b, pb);
    float c0[4] = {0, 0, 0, 0}, c1[4] = {0, 0, 0, 0};
    mma_bf16(c0, a, b[0], b[1]);
    mma_bf16(c1, a, b[2], b[3]);
    for (int e = 0; e < 4; e++) {
        memcpy(&out[8 * l + e], &c0[e], 4);
        memcpy(&out[8 * l + 4 + e], &c1[e], 4);
    }
    (void)g, (void)t;
}

struct counts {
    unsigned long long sh_access, sh_wave, sh_ideal;
    unsigned long long flops, tensor_flops, sfu, blocks, blocks_run, ld_bytes, st_bytes, ld_sectors, st_sectors, ld_warp, st_warp;
};
static counts g_c;
static void on_launch(const emu_launch_info_t *l, int end, void *) {
    if (!end) {
        memset(&g_c, 0, sizeof g_c);
        return;
    }
    g_c.flops = l->flops, g_c.tensor_flops = l->tensor_flops, g_c.sfu = l->sfu, g_c.blocks = l->blocks, g_c.blocks_run = l->blocks_run;
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
    CHECK(g_c.sfu == 0, "a*b+c: no special-function operation: %llu", g_c.sfu);
    k_sum<<<(N + 127) / 128, 128>>>(N, 7, a, c);
    CHECK(g_c.flops == 7 * N, "a loop of 7 adds per thread: %llu for %d threads", g_c.flops, N);
    k_exp<<<(N + 127) / 128, 128>>>(N, a, c);
    CHECK(g_c.flops == N, "expf: 1 per element: %llu", g_c.flops);
    CHECK(g_c.sfu == N, "expf: 1 special-function operation per element: %llu", g_c.sfu);
    k_copy<<<(N + 127) / 128, 128>>>(N, a, c);
    CHECK(g_c.flops == 0, "a copy: no FLOPs: %llu", g_c.flops);
    float h = 0;
    cudaMemcpy(&h, c, sizeof h, cudaMemcpyDeviceToHost);
    CHECK(h == 2.0f, "the copy's result");
    cudaFree(a), cudaFree(b), cudaFree(c);
}

static void test_sfu(void) {
    enum { N = 1000 };
    float *a = dev_floats(N, 4), *c = dev_floats(N, 0);
    k_sfu3<<<(N + 127) / 128, 128>>>(N, a, c);
    CHECK(g_c.sfu == 3 * N, "exp2f + sqrtf / x: 3 per element: %llu for %d", g_c.sfu, N);
    CHECK(g_c.flops >= g_c.sfu, "counted among the FLOPs too: %llu of %llu", g_c.sfu, g_c.flops);
    float h = 0;
    cudaMemcpy(&h, c, sizeof h, cudaMemcpyDeviceToHost);
    CHECK(h == 16.0f + 2.0f / 5.0f, "exp2f(4) + sqrtf(4) / 5: %g", h);
    k_rsqrt<<<(N + 127) / 128, 128>>>(N, a, c);
    CHECK(g_c.sfu == 2 * N, "1 / sqrtf: 2 per element: %llu", g_c.sfu);
    k_copy<<<(N + 127) / 128, 128>>>(N, a, c);
    CHECK(g_c.sfu == 0, "a copy: none: %llu", g_c.sfu);
    cudaFree(a), cudaFree(c);
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

/* ldmatrix (mma.cuh) against the PTX ISA's fragment layout, computed here on its own: lane
 * (g, t)'s register i holds matrix i's elements (g, 2t), (g, 2t + 1), or with .trans (2t, g),
 * (2t + 1, g), the first in the low half; every element's bits are distinct, so a lane
 * mapping that differs anywhere fails */
static uint32_t *ldsm_run(int ld, int mode, uint32_t *h, size_t n) {
    uint32_t *d = NULL;
    cudaMalloc(&d, n * sizeof *d);
    k_ldsm<<<1, 32>>>(ld, mode, d);
    cudaMemcpy(h, d, n * sizeof *d, cudaMemcpyDeviceToHost);
    cudaFree(d);
    return h;
}
static int ldsm_mismatches(const uint32_t *h, int trans) {
    int bad = 0;
    for (int l = 0; l < 32; l++)
        for (int i = 0; i < 4; i++) {
            const int g = l / 4, t = l % 4, r0 = 8 * (i % 2), c0 = 8 * (i / 2);
            const int ra = trans ? r0 + 2 * t : r0 + g, ca = trans ? c0 + g : c0 + 2 * t;
            const int rb = trans ? ra + 1 : ra, cb = trans ? ca : ca + 1;
            const uint32_t want = (uint32_t)(32 * ra + ca + 1) | (uint32_t)(32 * rb + cb + 1) << 16;
            bad += h[4 * l + i] != want;
        }
    return bad;
}
static void test_ldmatrix_layout(void) {
    uint32_t h[128];
    CHECK(ldsm_mismatches(ldsm_run(24, 1, h, 128), 0) == 0, "ldmatrix.x4: every lane's registers as the PTX ISA's layout");
    CHECK(ldsm_mismatches(h, 1) > 0, "the check tells the plain layout from the transposed one");
    CHECK(ldsm_mismatches(ldsm_run(24, 2, h, 128), 1) == 0, "ldmatrix.x4.trans: every lane's registers");
    CHECK(ldsm_mismatches(h, 0) > 0, "and the transposed load is not the plain one");
    /* T T through mma: right with .trans for the [k][n] operand, wrong (detected) without */
    float T[16][16], D[16][16];
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) T[r][c] = (float)((5 * r + 3 * c) % 11 - 5);
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            D[i][j] = 0;
            for (int k = 0; k < 16; k++) D[i][j] += T[i][k] * T[k][j];
        }
    for (int mode = 3; mode <= 4; mode++) {
        uint32_t o[256];
        ldsm_run(24, mode, o, 256);
        int bad = 0;
        for (int l = 0; l < 32; l++)
            for (int jt = 0; jt < 2; jt++)
                for (int e = 0; e < 4; e++) {
                    float x;
                    memcpy(&x, &o[8 * l + 4 * jt + e], 4);
                    bad += x != D[l / 4 + 8 * (e / 2)][8 * jt + 2 * (l % 4) + e % 2];
                }
        if (mode == 3) CHECK(bad == 0, "T T from ldmatrix fragments (B by .trans): %d of 256 outputs wrong", bad);
        else CHECK(bad > 0, "B by the plain ldmatrix from a [k][n] tile (the wrong layout) gives another product");
    }
}
/* ldmatrix's shared wavefronts: one per 8x8 matrix when its 8 rows of 16 bytes fall into
 * distinct banks (rows of 24 b16: 12 words apart), two when rows 4 apart share banks (rows of 16:
 * 8 words apart); the ideal is 4 either way */
static void test_ldmatrix_banks(void) {
    uint32_t h[128];
    for (int ld = 16; ld <= 24; ld += 8) {
        ldsm_run(ld, 0, h, 128);
        const unsigned long long w0 = g_c.sh_wave, i0 = g_c.sh_ideal, a0 = g_c.sh_access;
        ldsm_run(ld, 1, h, 128);
        const unsigned long long w = g_c.sh_wave - w0, i = g_c.sh_ideal - i0, a = g_c.sh_access - a0;
        const unsigned want = ld == 24 ? 4 : 8;
        CHECK(a == 1 && w == want && i == 4, "ldmatrix.x4 over rows of %d: %llu access, %llu wavefronts (ideal %llu), want 1, %u (4)",
              ld, a, w, i, want);
        CHECK(ldsm_mismatches(h, 0) == 0, "rows of %d: the registers", ld);
    }
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
    RUN(test_sfu);
    RUN(test_tensor_flops);
    RUN(test_sectors);
    RUN(test_banks);
    RUN(test_ldmatrix_layout);
    RUN(test_ldmatrix_banks);
    RUN(test_sampling);
    RUN(test_gemm_hook_and_waits);
    RUN(test_copy_hook);
    return check_summary();
}
