/* tests/emu/test_emu.cu: the execution-model emulator's own tests (tests/emu, docs/DEVICES.md).
 *
 * Built like model/device_cuda.cu (prepass.sh, clang++, the shim headers, every access
 * observed) and run by tests/it_emu.sh. Two kinds of case:
 *   - kernels that use a feature correctly (3-D grids and blocks, shared-memory reductions with
 *     __syncthreads, every warp shuffle and vote, atomics on global and shared memory, dynamic
 *     shared memory with float4, bf16 conversions, the runtime's and cuBLAS's contracts, the
 *     warp access hook, NCCL between two emulated GPUs of this process), checked against the
 *     host's answer;
 *   - deliberately broken ones -- a missing __syncthreads, an out-of-bounds read of device and
 *     of shared memory, a host pointer in a kernel, a divergent shuffle, a barrier some threads
 *     skipped, two blocks writing one element, a last block reading the others' writes
 *     without a fence after its ticket, a stream race, an event waited for but never
 *     recorded, a read of memory never written, ranks issuing different collectives -- each run
 *     in a child process that must die
 *     with the emulator's (or AddressSanitizer's) report naming the fault. */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "emu_api.h"
#include "tests/check.h"

#define CK(call) CHECK((call) == cudaSuccess, "%s", #call)

/* n floats on the device from host values */
static float *dev_floats(const float *h, size_t n) {
    float *d = NULL;
    cudaMalloc(&d, n * sizeof(float));
    if (h) cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice);
    else cudaMemset(d, 0, n * sizeof(float));
    return d;
}

/* ---- features used correctly ---- */

__global__ void k_ids(unsigned *out, int *bad) {
    const unsigned bx = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const unsigned tx = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const unsigned nt = blockDim.x * blockDim.y * blockDim.z;
    if (threadIdx.x >= blockDim.x || threadIdx.y >= blockDim.y || threadIdx.z >= blockDim.z ||
        blockIdx.x >= gridDim.x || blockIdx.y >= gridDim.y || blockIdx.z >= gridDim.z)
        atomicAdd(bad, 1);
    out[bx * nt + tx] = bx * nt + tx + 1;
}
static void test_grid_3d(void) {
    dim3 g(3, 2, 2), b(4, 3, 5);
    const unsigned n = 12 * 60;
    unsigned *out;
    int *bad;
    cudaMalloc(&out, n * sizeof(unsigned));
    cudaMalloc(&bad, sizeof(int));
    cudaMemset(out, 0, n * sizeof(unsigned));
    cudaMemset(bad, 0, sizeof(int));
    k_ids<<<g, b>>>(out, bad);
    CK(cudaGetLastError());
    unsigned h[12 * 60];
    int hb = -1;
    cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost);
    cudaMemcpy(&hb, bad, sizeof hb, cudaMemcpyDeviceToHost);
    int ok = hb == 0;
    for (unsigned i = 0; i < n; i++) ok &= h[i] == i + 1;
    CHECK(ok, "every thread of a 3x2x2 grid of 4x3x5 blocks ran once with consistent indices");
    cudaFree(out);
    cudaFree(bad);
}

/* a block's sum through shared memory: a tree with a barrier per level */
__global__ void k_block_sum(float *out, const float *in, int n) {
    __shared__ float s[256];
    const int t = threadIdx.x;
    float v = 0;
    for (int i = blockIdx.x * 256 + t; i < n; i += gridDim.x * 256) v += in[i];
    s[t] = v;
    __syncthreads();
    for (int w = 128; w > 0; w /= 2) {
        if (t < w) s[t] += s[t + w];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}
static void test_shared_reduce(void) {
    enum { N = 3000, G = 5 };
    float h[N], hs[G], want = 0;
    for (int i = 0; i < N; i++) h[i] = (float)(i % 7), want += h[i];
    float *in = dev_floats(h, N), *out = dev_floats(NULL, G);
    k_block_sum<<<G, 256>>>(out, in, N);
    cudaMemcpy(hs, out, sizeof hs, cudaMemcpyDeviceToHost);
    float got = 0;
    for (int i = 0; i < G; i++) got += hs[i];
    CHECK(got == want, "block sums through __shared__ and __syncthreads: %g vs %g", got, want);
    cudaFree(in);
    cudaFree(out);
}

/* each warp op's result per lane, written to out[lane * 10 + k] */
__global__ void k_warp(int *out) {
    const int l = threadIdx.x;
    int *o = out + l * 10;
    int v = l * 3 + 1, s = v;
    for (int m = 16; m > 0; m /= 2) s += __shfl_xor_sync(0xffffffffu, s, m);
    o[0] = s;                                            /* butterfly sum: every lane the total */
    o[1] = __shfl_down_sync(0xffffffffu, v, 3);          /* v of lane l+3, own at the top */
    o[2] = __shfl_up_sync(0xffffffffu, v, 2, 16);        /* within 16-lane halves */
    o[3] = __shfl_sync(0xffffffffu, v, 5, 8);            /* lane 5 of each 8-lane group */
    o[4] = (int)__ballot_sync(0xffffffffu, l % 3 == 0);
    o[5] = __any_sync(0xffffffffu, l == 17);
    o[6] = __all_sync(0xffffffffu, l < 31);
    o[7] = (int)__match_any_sync(0xffffffffu, l / 8);
    o[8] = __reduce_add_sync(0xffffffffu, l);
    if (l < 16) o[9] = __shfl_xor_sync(0x0000ffffu, v, 1); /* a partial mask: half the warp */
    else o[9] = -1;
}
static void test_warp_ops(void) {
    int *d;
    cudaMalloc(&d, 32 * 10 * sizeof(int));
    k_warp<<<1, 32>>>(d);
    CK(cudaGetLastError());
    int h[320];
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    int total = 0, ballot = 0, ok[10] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    for (int l = 0; l < 32; l++) total += l * 3 + 1, ballot |= (l % 3 == 0) << l;
    for (int l = 0; l < 32; l++) {
        const int *o = h + l * 10, v = l * 3 + 1;
        ok[0] &= o[0] == total;
        ok[1] &= o[1] == (l + 3 < 32 ? (l + 3) * 3 + 1 : v);
        ok[2] &= o[2] == ((l % 16) >= 2 ? (l - 2) * 3 + 1 : v);
        ok[3] &= o[3] == ((l / 8) * 8 + 5) * 3 + 1;
        ok[4] &= (unsigned)o[4] == (unsigned)ballot;
        ok[5] &= o[5] == 1;
        ok[6] &= o[6] == 0;
        ok[7] &= (unsigned)o[7] == (0xffu << (8 * (l / 8)));
        ok[8] &= o[8] == 496;
        ok[9] &= o[9] == (l < 16 ? (l ^ 1) * 3 + 1 : -1);
    }
    const char *names[] = {"__shfl_xor_sync butterfly", "__shfl_down_sync", "__shfl_up_sync width 16",
                           "__shfl_sync width 8", "__ballot_sync", "__any_sync", "__all_sync", "__match_any_sync",
                           "__reduce_add_sync", "__shfl_xor_sync on half a warp"};
    for (int k = 0; k < 10; k++) CHECK(ok[k], "%s gives every lane CUDA's result", names[k]);
    cudaFree(d);
}

/* a histogram by atomics, in shared memory then global; a float sum by CAS */
__global__ void k_atomics(unsigned *hist, float *fsum, int *mx, const int *in, int n) {
    __shared__ unsigned sh[8];
    if (threadIdx.x < 8) sh[threadIdx.x] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        atomicAdd(&sh[in[i] % 8], 1u);
        atomicMax(mx, in[i]);
        float old = *fsum, assumed;
        do {
            assumed = old;
            old = __int_as_float(atomicCAS((int *)fsum, __float_as_int(assumed), __float_as_int(assumed + 1.0f)));
        } while (__float_as_int(old) != __float_as_int(assumed));
    }
    __syncthreads();
    if (threadIdx.x < 8) atomicAdd(&hist[threadIdx.x], sh[threadIdx.x]);
}
/* the last-block pattern: every block writes its part and fences, thread 0 takes a ticket, and
 * the block that draws the last one fences and adds the parts (fence = 0: it does not fence) */
__global__ void k_last_block(float *part, float *total, unsigned *ticket, int fence) {
    __shared__ int last;
    if (threadIdx.x == 0) {
        part[blockIdx.x] = (float)(blockIdx.x + 1);
        __threadfence();
        last = atomicAdd(ticket, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    if (fence) __threadfence();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (unsigned b = 0; b < gridDim.x; b++) s += part[b];
        *total = s;
        atomicExch(ticket, 0u);
    }
}
static void last_block(int fence, float *got, unsigned *left) {
    float *part = dev_floats(NULL, 64), *total = dev_floats(NULL, 1);
    unsigned *ticket;
    cudaMalloc(&ticket, sizeof(unsigned));
    cudaMemset(ticket, 0, sizeof(unsigned));
    k_last_block<<<64, 32>>>(part, total, ticket, fence);
    cudaMemcpy(got, total, sizeof *got, cudaMemcpyDeviceToHost);
    cudaMemcpy(left, ticket, sizeof *left, cudaMemcpyDeviceToHost);
}
static void test_last_block(void) {
    float got = 0;
    unsigned left = 1;
    last_block(1, &got, &left);
    CHECK(got == 64 * 65 / 2 && left == 0, "the last block adds every block's part: %g (want %d), ticket %u", got,
          64 * 65 / 2, left);
}
static void broken_last_block_unfenced(void) {
    float got;
    unsigned left;
    last_block(0, &got, &left);
}

static void test_atomics(void) {
    enum { N = 1000 };
    int h[N], hm = 0;
    unsigned want[8] = {0};
    for (int i = 0; i < N; i++) h[i] = (i * 37) % 101, want[h[i] % 8]++, hm = h[i] > hm ? h[i] : hm;
    int *in, *mx;
    unsigned *hist;
    float *fs;
    cudaMalloc(&in, sizeof h);
    cudaMemcpy(in, h, sizeof h, cudaMemcpyHostToDevice);
    cudaMalloc(&hist, 8 * sizeof(unsigned));
    cudaMemset(hist, 0, 8 * sizeof(unsigned));
    cudaMalloc(&mx, sizeof(int));
    cudaMemset(mx, 0, sizeof(int));
    fs = dev_floats(NULL, 1);
    k_atomics<<<4, 64>>>(hist, fs, mx, in, N);
    unsigned got[8];
    int gm;
    float gf;
    cudaMemcpy(got, hist, sizeof got, cudaMemcpyDeviceToHost);
    cudaMemcpy(&gm, mx, sizeof gm, cudaMemcpyDeviceToHost);
    cudaMemcpy(&gf, fs, sizeof gf, cudaMemcpyDeviceToHost);
    CHECK(!memcmp(got, want, sizeof got), "atomicAdd histogram, shared then global");
    CHECK(gm == hm, "atomicMax: %d vs %d", gm, hm);
    CHECK(gf == (float)N, "atomicCAS loop: %g", gf);
    cudaFree(in);
    cudaFree(hist);
    cudaFree(mx);
    cudaFree(fs);
}

/* dynamic shared memory, 16-byte vector loads and stores */
__global__ void k_dyn(float4 *out, const float4 *in, int n) {
    extern __shared__ float4 tile[];
    const int t = threadIdx.x;
    if (t < n) tile[t] = in[t];
    __syncthreads();
    if (t < n) {
        float4 a = tile[n - 1 - t];
        out[t] = make_float4(a.w, a.z, a.y, a.x);
    }
}
static void test_dynamic_shared(void) {
    enum { N = 40 };
    float h[4 * N], g[4 * N];
    for (int i = 0; i < 4 * N; i++) h[i] = (float)i;
    float4 *in, *out;
    cudaMalloc(&in, sizeof h);
    cudaMalloc(&out, sizeof h);
    cudaMemcpy(in, h, sizeof h, cudaMemcpyHostToDevice);
    k_dyn<<<1, 64, N * sizeof(float4)>>>(out, in, N);
    cudaMemcpy(g, out, sizeof g, cudaMemcpyDeviceToHost);
    int ok = 1;
    for (int t = 0; t < N; t++)
        for (int c = 0; c < 4; c++) ok &= g[4 * t + c] == h[4 * (N - 1 - t) + 3 - c];
    CHECK(ok, "extern __shared__ float4 of the launch's dynamic size");
    cudaFree(in);
    cudaFree(out);
}

__global__ void k_count(int *out) {
    const int c = __syncthreads_count(threadIdx.x % 3 == 0);
    const int a = __syncthreads_and(threadIdx.x < 100);
    const int o = __syncthreads_or(threadIdx.x == 99);
    if (threadIdx.x == 7) out[0] = c, out[1] = a, out[2] = o;
}
static void test_barrier_reductions(void) {
    int *d, h[3];
    cudaMalloc(&d, sizeof h);
    k_count<<<1, 100>>>(d);
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    CHECK(h[0] == 34 && h[1] == 1 && h[2] == 1, "__syncthreads_count/and/or: %d %d %d", h[0], h[1], h[2]);
    cudaFree(d);
}

static void test_bf16(void) {
    /* round to nearest, ties to even, on the bits: 1 + 2^-8 is a tie between 1 and 1 + 2^-7 */
    const float tie_down = 1.0f + 1.0f / 256, tie_up = 1.0f + 3.0f / 256, above = 1.0f + 1.0f / 256 + 1.0f / 65536;
    CHECK(__bfloat162float(__float2bfloat16(tie_down)) == 1.0f, "a tie rounds to the even bf16 (down)");
    CHECK(__bfloat162float(__float2bfloat16_rn(tie_up)) == 1.0f + 4.0f / 256, "a tie rounds to the even bf16 (up)");
    CHECK(__bfloat162float(__float2bfloat16(above)) == 1.0f + 2.0f / 256, "above a tie rounds up");
    CHECK(__bfloat162float(__float2bfloat16_rz(1.0f + 3.0f / 256)) == 1.0f + 2.0f / 256, "_rz truncates");
    CHECK(__bfloat162float(__float2bfloat16_rd(-above)) == -(1.0f + 2.0f / 256), "_rd goes down");
    CHECK(isnan(__bfloat162float(__float2bfloat16(NAN))), "NaN stays NaN");
    CHECK(isinf(__bfloat162float(__float2bfloat16(3.4e38f))), "beyond bf16's largest: infinity");
    __nv_bfloat162 p = __floats2bfloat162_rn(1.5f, -2.25f);
    float2 f = __bfloat1622float2(__hmul2(p, p));
    CHECK(f.x == 2.25f && f.y == 5.0625f, "bf16x2 arithmetic: %g %g", f.x, f.y);
    __nv_bfloat16 a = 3.0f, b = 0.5f;
    CHECK((float)(a * b + a) == 4.5f, "bf16 operators");
}

static void test_cublas(void) {
    cublasHandle_t h;
    CHECK(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS, "cublasCreate");
    float ha[6] = {1, 2, 3, 4, 5, 6}, hb[6] = {1, 0, 2, 1, 0, 3}, hc[4] = {0};
    float *A = dev_floats(ha, 6), *B = dev_floats(hb, 6), *C = dev_floats(NULL, 4);
    const float one = 1, zero = 0;
    /* validation: cuBLAS's documented conditions, nothing computed */
    CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, A, 1, B, 3, &zero, C, 2) == CUBLAS_STATUS_INVALID_VALUE, "lda < m");
    CHECK(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, 2, 2, 3, &one, A, 2, B, 3, &zero, C, 2) == CUBLAS_STATUS_INVALID_VALUE, "lda < k with op T");
    CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, -1, 2, 3, &one, A, 2, B, 3, &zero, C, 2) == CUBLAS_STATUS_INVALID_VALUE, "m < 0");
    CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, A, 2, B, 3, &zero, C, 1) == CUBLAS_STATUS_INVALID_VALUE, "ldc < m");
    CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, A, CUDA_R_32F, 2, B, CUDA_R_16BF, 3, &zero, C, CUDA_R_32F, 2,
                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_NOT_SUPPORTED, "mixed operand types");
    /* C (2x2) = A (2x3) B (3x2), column-major */
    CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, A, 2, B, 3, &zero, C, 2) == CUBLAS_STATUS_SUCCESS, "a valid Sgemm");
    cudaMemcpy(hc, C, sizeof hc, cudaMemcpyDeviceToHost);
    CHECK(hc[0] == 11 && hc[1] == 14 && hc[2] == 16 && hc[3] == 20, "Sgemm's product: %g %g %g %g", hc[0], hc[1], hc[2], hc[3]);
    /* TF32: 1 + 2^-12 keeps 10 mantissa bits: 1 */
    float t1 = 1.0f + 1.0f / 4096, t2 = 1.0f;
    float *T1 = dev_floats(&t1, 1), *T2 = dev_floats(&t2, 1), *TC = dev_floats(NULL, 1), r = 0;
    cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, T1, CUDA_R_32F, 1, T2, CUDA_R_32F, 1, &zero, TC, CUDA_R_32F, 1,
                 CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT);
    cudaMemcpy(&r, TC, sizeof r, cudaMemcpyDeviceToHost);
    CHECK(r == 1.0f, "TF32 rounds the operands to 10 mantissa bits: %.9g", r);
    cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, T1, CUDA_R_32F, 1, T2, CUDA_R_32F, 1, &zero, TC, CUDA_R_32F, 1,
                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    cudaMemcpy(&r, TC, sizeof r, cudaMemcpyDeviceToHost);
    CHECK(r == t1, "the 32F compute type keeps fp32: %.9g", r);
    CHECK(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS, "cublasDestroy");
    float *all[] = {A, B, C, T1, T2, TC};
    for (float *p : all) cudaFree(p);
}

static void test_runtime_contracts(void) {
    float *d = dev_floats(NULL, 4);
    k_block_sum<<<1, 2048>>>(d, d, 4); /* more threads than a block may have */
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "a 2048-thread block: cudaErrorInvalidConfiguration");
    CHECK(cudaGetLastError() == cudaSuccess, "cudaGetLastError clears the error");
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b) == cudaErrorInvalidResourceHandle, "elapsed time of events never recorded");
    cudaGetLastError();
    cudaEventDestroy(a);
    CHECK(cudaEventRecord(a, 0) == cudaErrorInvalidResourceHandle, "a destroyed event");
    cudaGetLastError();
    cudaStream_t s;
    cudaStreamCreate(&s);
    cudaStreamDestroy(s);
    CHECK(cudaMemsetAsync(d, 0, 16, s) == cudaErrorInvalidResourceHandle, "a destroyed stream");
    cudaGetLastError();
    int n = 0;
    CHECK(cudaGetDeviceCount(&n) == cudaSuccess && n >= 1, "devices: %d", n);
    CHECK(cudaSetDevice(n) == cudaErrorInvalidDevice, "a device past the last");
    cudaGetLastError();
    cudaEventDestroy(b);
    cudaFree(d);
}

/* the warp access hook: a coalesced load is one warp access of 32 consecutive floats */
static int g_hook_groups, g_hook_coalesced;
static void warp_hook(const emu_warp_access_t *a, void *) {
    if (a->space != EMU_GLOBAL || !(a->flags & EMU_LOAD)) return;
    g_hook_groups++;
    int ok = a->mask == 0xffffffffu && a->size == 4;
    for (int l = 1; l < 32 && ok; l++) ok = (const char *)a->addr[l] - (const char *)a->addr[l - 1] == 4;
    g_hook_coalesced += ok;
}
__global__ void k_copy(float *out, const float *in) { out[threadIdx.x] = in[threadIdx.x] * 2; }
static void test_warp_hook(void) {
    float h[64] = {0};
    float *in = dev_floats(h, 64), *out = dev_floats(NULL, 64);
    emu_set_warp_access_hook(warp_hook, NULL);
    k_copy<<<1, 64>>>(out, in);
    emu_set_warp_access_hook(NULL, NULL);
    CHECK(g_hook_groups == 2 && g_hook_coalesced == 2, "2 warps, each one coalesced load of 32 lanes (%d groups, %d coalesced)",
          g_hook_groups, g_hook_coalesced);
    cudaFree(in);
    cudaFree(out);
}

/* ---- NCCL between two emulated GPUs of this process, one thread each ---- */
struct nccl_rank {
    ncclUniqueId id;
    int rank, ok[5];
    int mismatch; /* the broken case: rank 1 broadcasts where rank 0 gathers */
};
static void *nccl_thread(void *arg) {
    nccl_rank *r = (nccl_rank *)arg;
    enum { N = 10 };
    cudaSetDevice(r->rank);
    ncclComm_t c;
    if (ncclCommInitRank(&c, 2, r->id, r->rank) != ncclSuccess) return NULL;
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    float h[2 * N], g[2 * N];
    for (int i = 0; i < 2 * N; i++) h[i] = (float)(r->rank * 100 + i);
    float *a, *b;
    cudaMalloc(&a, sizeof h);
    cudaMalloc(&b, sizeof h);
    cudaMemcpyAsync(a, h, sizeof h, cudaMemcpyHostToDevice, s);
    if (r->mismatch && r->rank == 1) ncclBroadcast(a, a, N, ncclFloat, 0, c, s);
    else ncclAllReduce(a, b, 2 * N, ncclFloat, ncclSum, c, s);
    cudaMemcpyAsync(g, b, sizeof g, cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
    r->ok[0] = 1;
    for (int i = 0; i < 2 * N; i++) r->ok[0] &= g[i] == (float)(100 + 2 * i);
    /* all-gather in place: rank r's N floats at offset r*N */
    ncclAllGather(a + r->rank * N, a, N, ncclFloat, c, s);
    cudaMemcpyAsync(g, a, sizeof g, cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
    r->ok[1] = 1;
    for (int i = 0; i < 2 * N; i++) r->ok[1] &= g[i] == (float)((i / N) * 100 + i);
    /* broadcast from rank 1 */
    cudaMemcpyAsync(a, h, sizeof h, cudaMemcpyHostToDevice, s);
    ncclBroadcast(a, a, 2 * N, ncclFloat, 1, c, s);
    cudaMemcpyAsync(g, a, sizeof g, cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
    r->ok[2] = 1;
    for (int i = 0; i < 2 * N; i++) r->ok[2] &= g[i] == (float)(100 + i);
    /* grouped send/recv: swap halves */
    cudaMemcpyAsync(a, h, sizeof h, cudaMemcpyHostToDevice, s);
    ncclGroupStart();
    ncclSend(a, N, ncclFloat, 1 - r->rank, c, s);
    ncclRecv(b, N, ncclFloat, 1 - r->rank, c, s);
    ncclGroupEnd();
    cudaMemcpyAsync(g, b, N * sizeof(float), cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
    r->ok[3] = 1;
    for (int i = 0; i < N; i++) r->ok[3] &= g[i] == (float)((1 - r->rank) * 100 + i);
    r->ok[4] = ncclCommDestroy(c) == ncclSuccess;
    cudaFree(a);
    cudaFree(b);
    cudaStreamDestroy(s);
    return NULL;
}
static void test_nccl_threads(void) {
    nccl_rank r[2];
    memset(r, 0, sizeof r);
    CHECK(ncclGetUniqueId(&r[0].id) == ncclSuccess, "ncclGetUniqueId");
    r[1].id = r[0].id;
    pthread_t t[2];
    for (int i = 0; i < 2; i++) r[i].rank = i, pthread_create(&t[i], NULL, nccl_thread, &r[i]);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    const char *what[] = {"ncclAllReduce (sum)", "ncclAllGather in place", "ncclBroadcast from rank 1",
                          "grouped ncclSend/ncclRecv", "ncclCommDestroy"};
    for (int k = 0; k < 5; k++) CHECK(r[0].ok[k] && r[1].ok[k], "%s between two emulated GPUs (threads)", what[k]);
}

/* ---- broken kernels: each must be reported ---- */

__global__ void k_missing_sync(float *out, const float *in) {
    __shared__ float s[64];
    const int t = threadIdx.x;
    s[t] = in[t];
    /* __syncthreads() missing: thread t reads what thread t+1 writes */
    out[t] = s[(t + 1) % 64];
}
static void broken_missing_sync(void) {
    float h[64] = {0};
    float *in = dev_floats(h, 64), *out = dev_floats(NULL, 64);
    k_missing_sync<<<1, 64>>>(out, in);
}
/* a tile reused without the second barrier: thread t rewrites s[t] while t-1 may still read it */
__global__ void k_missing_second_sync(float *out, const float *in) {
    __shared__ float s[64];
    const int t = threadIdx.x;
    float acc = 0;
    for (int round = 0; round < 2; round++) {
        s[t] = in[t] + round;
        __syncthreads();
        acc += s[(t + 1) % 64];
        /* __syncthreads() missing before the next round's write */
    }
    out[t] = acc;
}
static void broken_missing_second_sync(void) {
    float h[64] = {0};
    float *in = dev_floats(h, 64), *out = dev_floats(NULL, 64);
    k_missing_second_sync<<<1, 64>>>(out, in);
}
__global__ void k_oob(float *out, const float *in, int n) { out[threadIdx.x] = in[threadIdx.x + 1]; }
static void broken_oob_global(void) {
    float h[32] = {0};
    float *in = dev_floats(h, 32), *out = dev_floats(NULL, 32);
    k_oob<<<1, 32>>>(out, in, 32); /* thread 31 reads in[32] */
}
__global__ void k_oob_shared(float *out) {
    __shared__ float s[32];
    s[threadIdx.x] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = s[threadIdx.x + 1];
}
static void broken_oob_shared(void) {
    float *out = dev_floats(NULL, 32);
    k_oob_shared<<<1, 32>>>(out);
}
static void broken_host_pointer(void) {
    static float host_in[32];
    float *in = (float *)malloc(sizeof host_in), *out = dev_floats(NULL, 32);
    memset(in, 0, sizeof host_in);
    k_oob<<<1, 16>>>(out, in, 16);
}
__global__ void k_divergent(float *out) {
    float v = (float)threadIdx.x;
    if (threadIdx.x >= 16) return; /* half the warp leaves ... */
    v += __shfl_xor_sync(0xffffffffu, v, 1); /* ... but the mask names all 32 lanes */
    out[threadIdx.x] = v;
}
static void broken_divergent_shuffle(void) {
    float *out = dev_floats(NULL, 32);
    k_divergent<<<1, 32>>>(out);
}
__global__ void k_bar_exit(float *out) {
    __shared__ float s[64];
    if (threadIdx.x >= 40) return;
    s[threadIdx.x] = 1;
    __syncthreads();
    out[threadIdx.x] = s[39 - threadIdx.x];
}
static void broken_barrier_exit(void) {
    float *out = dev_floats(NULL, 64);
    k_bar_exit<<<1, 64>>>(out);
}
__global__ void k_block_race(float *out) { out[0] = (float)blockIdx.x; }
static void broken_block_race(void) {
    float *out = dev_floats(NULL, 1);
    k_block_race<<<4, 1>>>(out);
}
__global__ void k_read(float *out, const float *in) { out[threadIdx.x] = in[threadIdx.x]; }
static void broken_stream_race(void) {
    /* a pageable cudaMemcpy on the legacy stream, read on a non-blocking stream: nothing orders them */
    float h[32] = {0};
    float *in, *out = dev_floats(NULL, 32);
    cudaMalloc(&in, sizeof h);
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaMemcpy(in, h, sizeof h, cudaMemcpyHostToDevice);
    k_read<<<1, 32, 0, s>>>(out, in);
}
static void broken_event_never_recorded(void) {
    cudaStream_t s;
    cudaEvent_t e;
    cudaStreamCreate(&s);
    cudaEventCreate(&e);
    cudaStreamWaitEvent(s, e, 0);
}
static void broken_nccl_mismatch(void) {
    nccl_rank r[2];
    memset(r, 0, sizeof r);
    ncclGetUniqueId(&r[0].id);
    r[1].id = r[0].id;
    pthread_t t[2];
    for (int i = 0; i < 2; i++) r[i].rank = i, r[i].mismatch = 1, pthread_create(&t[i], NULL, nccl_thread, &r[i]);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
}
static void broken_uninitialised(void) {
    float *in, *out = dev_floats(NULL, 32);
    cudaMalloc(&in, 32 * sizeof(float));
    k_read<<<1, 32>>>(out, in);
}

/* Runs fn in a child with stderr captured; it must die (the emulator aborts, AddressSanitizer
 * exits non-zero) and its report must contain want. */
static void expect_report(const char *what, void (*fn)(void), const char *want) {
    int fd[2];
    if (pipe(fd)) return;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        fn();
        cudaDeviceSynchronize();
        fprintf(stderr, "(returned normally)\n");
        _exit(0);
    }
    close(fd[1]);
    static char buf[1 << 16];
    size_t n = 0;
    ssize_t r;
    while ((r = read(fd[0], buf + n, sizeof buf - 1 - n)) > 0) n += (size_t)r;
    buf[n] = 0;
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    char rm[96]; /* what an emulated NCCL communicator of the dead child left in /dev/shm */
    snprintf(rm, sizeof rm, "rm -f /dev/shm/ftemu-nccl-%d-*", (int)pid);
    if (system(rm)) {}
    const int died = WIFSIGNALED(st) || (WIFEXITED(st) && WEXITSTATUS(st) != 0);
    const int named = strstr(buf, want) != NULL;
    CHECK(died && named, "%s: the child %s and %s \"%s\"", what, died ? "died" : "returned normally",
          named ? "reported" : "did not report", want);
    if (!(died && named)) fprintf(stderr, "---- its stderr ----\n%s--------\n", buf);
    else {
        const char *line = strstr(buf, "ERROR");
        const char *end = line ? strchr(line, '\n') : NULL;
        if (line) fprintf(stderr, "  %s: %.*s\n", what, (int)(end ? end - line : 200), line);
    }
}

static void test_broken_kernels(void) {
    /* reported either way the random order runs it: a read before the write, or after it */
    expect_report("missing __syncthreads", broken_missing_sync, "__syncthreads() missing");
    expect_report("a tile rewritten without the second __syncthreads", broken_missing_second_sync, "(a race: __syncthreads() missing?)");
    expect_report("out-of-bounds read of device memory", broken_oob_global, "no device allocation");
    expect_report("out-of-bounds read of a __shared__ array", broken_oob_shared, "out of bounds of a __shared__ array");
    expect_report("a host pointer given to a kernel", broken_host_pointer, "no device allocation");
    expect_report("divergent shuffle", broken_divergent_shuffle, "divergent __shfl_xor_sync in kernel k_divergent");
    expect_report("__syncthreads after some threads exited", broken_barrier_exit, "have exited");
    expect_report("two blocks writing one element", broken_block_race, "also wrote in the same launch");
    expect_report("the last block reading the others' parts without a fence after its ticket",
                  broken_last_block_unfenced, "wrote in the same launch with no barrier");
    expect_report("a pageable copy read on a non-blocking stream", broken_stream_race, "stream race");
    expect_report("waiting for an event never recorded", broken_event_never_recorded, "never recorded");
    expect_report("reading memory never written", broken_uninitialised, "nothing has written since cudaMalloc");
    expect_report("ranks issuing different collectives", broken_nccl_mismatch, "the ranks must issue the same collectives");
}

int main(void) {
    printf("execution-model emulator, seed %llu\n", emu_seed());
    RUN(test_grid_3d);
    RUN(test_shared_reduce);
    RUN(test_warp_ops);
    RUN(test_atomics);
    RUN(test_last_block);
    RUN(test_dynamic_shared);
    RUN(test_barrier_reductions);
    RUN(test_bf16);
    RUN(test_cublas);
    RUN(test_runtime_contracts);
    RUN(test_warp_hook);
    RUN(test_nccl_threads);
    RUN(test_broken_kernels);
    return check_summary();
}
