/* tests/emu/emu_cublas.cc: the cuBLAS subset of cublas_v2.h as a fixed-order product on the CPU,
 * for the execution-model emulator (docs/DEVICES.md).
 *
 * Arguments are validated first, as cuBLAS documents them (cublasSgemm / cublasGemmEx: "the
 * parameters m, n, k < 0", "lda < max(1, m) if transa == CUBLAS_OP_N and lda < max(1, k)
 * otherwise", the same for ldb and ldc, unsupported type combinations): such a call returns the
 * status and computes nothing. Then the product is an operation of the handle's stream: each
 * column of each operand that it reads or writes must lie in a device allocation, and is checked
 * against the stream order like a kernel's accesses (emu_runtime.cc). The operands are packed
 * into float matrices -- bf16 exactly, fp32 rounded to TF32 (10 mantissa bits, to nearest,
 * ties away from zero as the hardware's conversion) under the TF32 compute type or math mode, or
 * to bf16 under CUBLAS_COMPUTE_32F_FAST_16BF -- and multiplied in fp32 in a fixed order
 * (fixed_order_gemm below). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <set>

#include "cublas_v2.h"
#include "emu_internal.h"

struct cublasContext {
    int device;
    cudaStream_t stream;
    cublasMath_t math;
    cublasPointerMode_t pm;
};

namespace emu {
static std::set<cublasContext *> g_handles;
static emu_gemm_hook_fn g_gemm_hook;
static void *g_gemm_user;

enum round_t { R_NONE, R_TF32, R_BF16 };

static float round_tf32(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
    memcpy(&x, &u, 4);
    return x;
}
static float round_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) u |= 0x00400000u;
    else u = u + 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}
static float load(const void *p, cudaDataType_t t, size_t i, round_t r) {
    if (t == CUDA_R_16BF) {
        uint16_t h;
        memcpy(&h, (const char *)p + 2 * i, 2);
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    float f = ((const float *)p)[i];
    return r == R_TF32 ? round_tf32(f) : r == R_BF16 ? round_bf16(f) : f;
}
static size_t esize(cudaDataType_t t) { return t == CUDA_R_16BF ? 2 : 4; }

/* Checks the columns of an ld-strided rows x cols operand as accesses of op. */
static int check_operand(const op_t *op, int dev, const void *p, cudaDataType_t t, int rows, int cols, int ld,
                         int write, const char *what) {
    const size_t es = esize(t);
    for (int j = 0; j < cols; j++) {
        char w[96];
        snprintf(w, sizeof w, "%s: column %d of %s", op->what.c_str(), j, what);
        if (check_device_range(op, dev, (const char *)p + (size_t)j * ld * es, (size_t)rows * es, write, w)) return -1;
    }
    return 0;
}

/* C (m x n) = al A B + be C, A (m x k) and B (k x n) packed column-major, every element's sum
 * taken over k in ascending order in fp32, multiply and add rounded separately (no contraction):
 * an element's bits depend on its row of A and column of B alone, not on m, n, the layout or
 * this CPU's vector width. A CPU BLAS gives no such promise: OpenBLAS's AVX2 kernels (x86-64-v3)
 * sum an element differently at m = 61 and at m = 64 with three zero rows, so tests that show a
 * padded, staged or shadow-only layout gives the unpadded layout's bits failed there with the
 * device right (neither does cuBLAS promise it; those tests check the device's logic around the
 * product, which is what this product isolates). Blocks of 8 columns and 256 rows keep the sums
 * in L1 and read A once per block of columns. Not instrumented: the operands were checked and
 * packed above. */
__attribute__((no_sanitize("address"))) static void fixed_order_gemm(int m, int n, int k, float al, const float *A,
                                                                     const float *B, float be, float *C) {
#pragma clang fp contract(off)
    enum { NB = 8, MB = 256 };
    float acc[NB][MB];
    for (int j0 = 0; j0 < n; j0 += NB) {
        const int nb = n - j0 < NB ? n - j0 : NB;
        for (int i0 = 0; i0 < m; i0 += MB) {
            const int mb = m - i0 < MB ? m - i0 : MB;
            for (int jj = 0; jj < nb; jj++)
                for (int ii = 0; ii < mb; ii++) acc[jj][ii] = 0.0f;
            for (int kk = 0; kk < k; kk++) {
                const float *a = A + (size_t)kk * m + i0;
                for (int jj = 0; jj < nb; jj++) {
                    const float b = B[(size_t)(j0 + jj) * k + kk];
                    float *s = acc[jj];
                    for (int ii = 0; ii < mb; ii++) s[ii] = s[ii] + a[ii] * b;
                }
            }
            for (int jj = 0; jj < nb; jj++) {
                float *c = C + (size_t)(j0 + jj) * m + i0;
                for (int ii = 0; ii < mb; ii++) c[ii] = be != 0.0f ? al * acc[jj][ii] + be * c[ii] : al * acc[jj][ii];
            }
        }
    }
}

static cublasStatus_t gemm(cublasContext *h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const void *alpha, const void *A, cudaDataType_t at, int lda, long long sA,
                           const void *B, cudaDataType_t bt, int ldb, long long sB, const void *beta, void *C,
                           cudaDataType_t ct, int ldc, long long sC, int batch, round_t r, const char *name) {
    guard g;
    if (!g_handles.count(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (injected(name)) return CUBLAS_STATUS_INTERNAL_ERROR;
    if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T && ta != CUBLAS_OP_C) ||
        (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T && tb != CUBLAS_OP_C) || m < 0 || n < 0 || k < 0 || batch < 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    const int ra = ta == CUBLAS_OP_N ? m : k, ca = ta == CUBLAS_OP_N ? k : m;
    const int rb = tb == CUBLAS_OP_N ? k : n, cb = tb == CUBLAS_OP_N ? n : k;
    if (lda < (ra > 1 ? ra : 1) || ldb < (rb > 1 ? rb : 1) || ldc < (m > 1 ? m : 1)) return CUBLAS_STATUS_INVALID_VALUE;
    if (!alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
    if (h->pm == CUBLAS_POINTER_MODE_DEVICE) {
        fail("%s: device pointer mode is not emulated", name);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (current_device() != h->device) {
        fail("%s: called with device %d current on a handle created on device %d", name, current_device(), h->device);
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    cudaError_t e = cudaSuccess;
    stream_t *s = resolve_stream(h->stream, &e);
    if (!s) {
        fail("%s: the handle's stream is not a live stream of device %d", name, h->device);
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    const float al = *(const float *)alpha, be = *(const float *)beta;
    if (g_gemm_hook) {
        const emu_gemm_info_t gi = {name, ta, tb, m, n, k, batch, (unsigned)esize(at), (unsigned)esize(bt),
                                    (unsigned)esize(ct), be != 0.0f, r != R_NONE || at == CUDA_R_16BF, h->device};
        g_gemm_hook(&gi, g_gemm_user);
    }
    op_t op;
    op_begin(&op, s, name);
    const size_t ea = esize(at), eb = esize(bt), ec = esize(ct);
    std::vector<float> Ap((size_t)m * k), Bp((size_t)k * n), Cp((size_t)m * n);
    for (int b = 0; b < batch; b++) {
        const char *Ab = (const char *)A + (size_t)b * sA * ea, *Bb = (const char *)B + (size_t)b * sB * eb;
        char *Cb = (char *)C + (size_t)b * sC * ec;
        const int reads_ab = k > 0 && al != 0.0f;
        if ((reads_ab && (check_operand(&op, h->device, Ab, at, ra, ca, lda, 0, "A") ||
                          check_operand(&op, h->device, Bb, bt, rb, cb, ldb, 0, "B"))) ||
            (be != 0.0f && check_operand(&op, h->device, Cb, ct, m, n, ldc, 0, "C")) ||
            check_operand(&op, h->device, Cb, ct, m, n, ldc, 1, "C"))
            return CUBLAS_STATUS_EXECUTION_FAILED;
        /* op(A) as m x k, op(B) as k x n, column-major and packed */
        if (reads_ab) {
            for (int j = 0; j < k; j++)
                for (int i = 0; i < m; i++)
                    Ap[(size_t)j * m + i] = load(Ab, at, ta == CUBLAS_OP_N ? (size_t)j * lda + i : (size_t)i * lda + j, r);
            for (int j = 0; j < n; j++)
                for (int i = 0; i < k; i++)
                    Bp[(size_t)j * k + i] = load(Bb, bt, tb == CUBLAS_OP_N ? (size_t)j * ldb + i : (size_t)i * ldb + j, r);
        }
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) Cp[(size_t)j * m + i] = be != 0.0f ? load(Cb, ct, (size_t)j * ldc + i, R_NONE) : 0.0f;
        fixed_order_gemm(m, n, reads_ab ? k : 0, al, Ap.data(), Bp.data(), be, Cp.data());
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                const float v = Cp[(size_t)j * m + i];
                if (ct == CUDA_R_16BF) {
                    uint32_t u;
                    float rv = round_bf16(v);
                    memcpy(&u, &rv, 4);
                    uint16_t hb = (uint16_t)(u >> 16);
                    memcpy(Cb + 2 * ((size_t)j * ldc + i), &hb, 2);
                } else {
                    ((float *)Cb)[(size_t)j * ldc + i] = v;
                }
            }
    }
    return CUBLAS_STATUS_SUCCESS;
}

/* The compute types and operand types the emulator accepts, as cuBLAS's table for GemmEx with
 * fp32 scaling: 32F with fp32 or bf16 operands, the fast modes with fp32 operands. */
static cublasStatus_t ex_round(cublasComputeType_t ct, cudaDataType_t at, cudaDataType_t bt, cudaDataType_t c,
                               round_t *r) {
    const int ok_ab = (at == CUDA_R_32F || at == CUDA_R_16BF) && at == bt;
    const int ok_c = c == CUDA_R_32F || (c == CUDA_R_16BF && at == CUDA_R_16BF);
    if (!ok_ab || !ok_c) return CUBLAS_STATUS_NOT_SUPPORTED;
    switch (ct) {
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC: *r = R_NONE; return CUBLAS_STATUS_SUCCESS;
    case CUBLAS_COMPUTE_32F_FAST_TF32: *r = at == CUDA_R_32F ? R_TF32 : R_NONE; return CUBLAS_STATUS_SUCCESS;
    case CUBLAS_COMPUTE_32F_FAST_16BF: *r = at == CUDA_R_32F ? R_BF16 : R_NONE; return CUBLAS_STATUS_SUCCESS;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
    }
}
} // namespace emu

using namespace emu;

extern "C" {
void emu_set_gemm_hook(emu_gemm_hook_fn fn, void *user) { g_gemm_hook = fn, g_gemm_user = user; }
cublasStatus_t cublasCreate(cublasHandle_t *h) {
    guard g;
    if (injected("cublasCreate")) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!h) return CUBLAS_STATUS_INVALID_VALUE;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        cudaGetLastError();
        return CUBLAS_STATUS_NOT_INITIALIZED;
    }
    cublasContext *c = new cublasContext{current_device(), NULL, CUBLAS_DEFAULT_MATH, CUBLAS_POINTER_MODE_HOST};
    g_handles.insert(c);
    *h = c;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t h) {
    guard g;
    if (!g_handles.erase(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
    guard g;
    if (injected("cublasSetStream")) return CUBLAS_STATUS_INTERNAL_ERROR;
    if (!g_handles.count(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    cudaError_t e = cudaSuccess;
    if (!resolve_stream(s, &e)) {
        fail("cublasSetStream: %p is not a live stream of device %d", (void *)s, current_device());
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGetStream(cublasHandle_t h, cudaStream_t *s) {
    guard g;
    if (!g_handles.count(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!s) return CUBLAS_STATUS_INVALID_VALUE;
    *s = h->stream;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) {
    guard g;
    if (injected("cublasSetMathMode")) return CUBLAS_STATUS_INTERNAL_ERROR;
    if (!g_handles.count(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    const int base = m & ~CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
    if (base != CUBLAS_DEFAULT_MATH && base != CUBLAS_TENSOR_OP_MATH && base != CUBLAS_PEDANTIC_MATH &&
        base != CUBLAS_TF32_TENSOR_OP_MATH)
        return CUBLAS_STATUS_INVALID_VALUE;
    h->math = m;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGetMathMode(cublasHandle_t h, cublasMath_t *m) {
    guard g;
    if (!g_handles.count(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!m) return CUBLAS_STATUS_INVALID_VALUE;
    *m = h->math;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetPointerMode(cublasHandle_t h, cublasPointerMode_t m) {
    guard g;
    if (!g_handles.count(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (m != CUBLAS_POINTER_MODE_HOST && m != CUBLAS_POINTER_MODE_DEVICE) return CUBLAS_STATUS_INVALID_VALUE;
    h->pm = m;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *, size_t) {
    guard g;
    return g_handles.count(h) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}
const char *cublasGetStatusString(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

static round_t sgemm_round(cublasHandle_t h) {
    guard g;
    return g_handles.count(h) && (h->math & ~CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION) == CUBLAS_TF32_TENSOR_OP_MATH
               ? R_TF32 : R_NONE;
}
cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const float *alpha, const float *A, int lda, const float *B, int ldb, const float *beta,
                           float *C, int ldc) {
    return gemm(h, ta, tb, m, n, k, alpha, A, CUDA_R_32F, lda, 0, B, CUDA_R_32F, ldb, 0, beta, C, CUDA_R_32F, ldc, 0,
                1, sgemm_round(h), "cublasSgemm");
}
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const float *alpha, const float *A, int lda, long long sA,
                                         const float *B, int ldb, long long sB, const float *beta, float *C, int ldc,
                                         long long sC, int batch) {
    return gemm(h, ta, tb, m, n, k, alpha, A, CUDA_R_32F, lda, sA, B, CUDA_R_32F, ldb, sB, beta, C, CUDA_R_32F, ldc,
                sC, batch, sgemm_round(h), "cublasSgemmStridedBatched");
}
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType_t at, int lda, const void *B,
                            cudaDataType_t bt, int ldb, const void *beta, void *C, cudaDataType_t ct, int ldc,
                            cublasComputeType_t comp, cublasGemmAlgo_t) {
    round_t r;
    cublasStatus_t st = ex_round(comp, at, bt, ct, &r);
    if (st) return st;
    return gemm(h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, C, ct, ldc, 0, 1, r, "cublasGemmEx");
}
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void *alpha, const void *A, cudaDataType_t at, int lda,
                                          long long sA, const void *B, cudaDataType_t bt, int ldb, long long sB,
                                          const void *beta, void *C, cudaDataType_t ct, int ldc, long long sC,
                                          int batch, cublasComputeType_t comp, cublasGemmAlgo_t) {
    round_t r;
    cublasStatus_t st = ex_round(comp, at, bt, ct, &r);
    if (st) return st;
    return gemm(h, ta, tb, m, n, k, alpha, A, at, lda, sA, B, bt, ldb, sB, beta, C, ct, ldc, sC, batch, r,
                "cublasGemmStridedBatchedEx");
}
}
