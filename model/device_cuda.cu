/* model/device_cuda.cu: the CUDA device (device.h) -- cuBLAS for the products, the kernel
 * families of model/cuda/ for the ops the training step spends its time in, and kernels.h's
 * one-item-per-thread bodies (a grid-stride loop, cuda_launch.h) for the rest. The formulas
 * are ops_math.h's, the math the CPU reference runs; nothing here knows what a model family is.
 *
 *   model/cuda/attention.cuh   tiled attention forward, atomic-free backward (dK/dV and dQ
 *                              passes), the decode step's rows; tensor cores in bf16
 *   model/cuda/rows.cuh        RMSNorm (a warp per row), two-stage column reductions
 *   model/cuda/classifier.cuh  cross-entropy: loss and dlogits in one pass over the logits
 *   model/cuda/embedding.cuh   the gather, and its backward as a token-sorted reduction
 *   model/cuda/rope.cuh        RoPE and the fused q|k|v split / join
 *   model/cuda/elementwise.cuh SwiGLU, residual adds, bf16 conversions
 *   model/cuda/adamw.cuh       the optimizer over every tensor in one launch
 *   model/cuda/operands.cuh    bf16 copies of product operands (precision bf16)
 *
 * Determinism: no atomics in any reduction; every sum runs in an order fixed by the shapes
 * (a row's lanes in a fixed shuffle tree, column sums in two fixed stages, attention's
 * gradients with one writer per row); cuBLAS is deterministic on one GPU kind with one stream.
 * The numbers the host needs (the loss, the gradient norm, the free bits) are reduced on the
 * device or per row and downloaded once per call.
 *
 * Host synchronisation per training step: the loss (one download of the classifier's
 * result), the gradient norm (one download), the family's own syncs (device.h's sync at the
 * end of forward and backward). Nothing else waits.
 *
 * Status: compiled and linked wherever nvcc exists; run under the execution-model emulator
 * (tests/emu) against the CPU device by make test; whether it has run on a GPU is stated in
 * README ("The GPU device"). */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "model/device.h"
#include "model/ops.h"
}
#include "model/cuda_launch.h"
#include "model/kernels.h"
#include "model/cuda/adamw.cuh"
#include "model/cuda/attention.cuh"
#include "model/cuda/classifier.cuh"
#include "model/cuda/elementwise.cuh"
#include "model/cuda/embedding.cuh"
#include "model/cuda/operands.cuh"
#include "model/cuda/rope.cuh"
#include "model/cuda/rows.cuh"

/* Rows of dZ = dR W_post computed per product in the Binary Mapper's backward (bounds the
 * work buffer to about 64 MiB at H = 16). */
#define CUDA_BINMAP_CHUNK_FLOATS (16u << 20)

/* a tensor list of the optimizer kernels, kept on the device between steps */
typedef struct {
    mt_tensor_t *host, *dev;
    int count, cap;
    size_t chunks;
} mt_list_t;

typedef struct {
    int ordinal;
    cudaStream_t stream;
    cublasHandle_t blas;
    char fault[256];          /* sticky: the first error; sync reports it */
    void *work;               /* scratch: bf16 operands, reductions' partials, attention's rows */
    size_t work_bytes;
    float *host_rows;         /* host scratch for per-row results summed on the host */
    size_t host_rows_bytes;
    size_t smem_optin;        /* the most dynamic shared memory a block may ask for */
    bf_cache_t bf;            /* bf16 copies of product operands (precision bf16) */
    mt_list_t mt_norm, mt_adam;
    ce_result_t *ce;          /* device results: the classifier's, the gradient norm's */
    double *norm;
} cuda_impl_t;

static cuda_impl_t *impl_of(device_t *d) { return (cuda_impl_t *)d->impl; }

static void fault(device_t *d, const char *what, const char *why) {
    cuda_impl_t *c = impl_of(d);
    if (!c->fault[0]) snprintf(c->fault, sizeof c->fault, "%s: %s: %s", d->name, what, why);
}
static void check_launch(device_t *d, const char *what) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) fault(d, what, cudaGetErrorString(e));
}
static void check_status(device_t *d, const char *what, cudaError_t e) {
    if (e != cudaSuccess) {
        fault(d, what, cudaGetErrorString(e));
        cudaGetLastError();
    }
}
static void *work(device_t *d, size_t bytes) {
    cuda_impl_t *c = impl_of(d);
    if (bytes <= c->work_bytes) return c->work;
    cudaStreamSynchronize(c->stream); /* the old buffer may still be read by queued kernels */
    if (c->work) cudaFree(c->work);
    c->work = NULL;
    c->work_bytes = 0;
    if (cudaMalloc(&c->work, bytes) != cudaSuccess) {
        cudaGetLastError();
        fault(d, "work buffer", "out of device memory");
        return NULL;
    }
    c->work_bytes = bytes;
    return c->work;
}
static void *host_rows(device_t *d, size_t bytes) {
    cuda_impl_t *c = impl_of(d);
    if (bytes > c->host_rows_bytes) {
        void *p = realloc(c->host_rows, bytes);
        if (!p) return NULL;
        c->host_rows = (float *)p;
        c->host_rows_bytes = bytes;
    }
    return c->host_rows;
}

#define STREAM (impl_of(d)->stream)
#define GRID(n) launch_grid(n), LAUNCH_BLOCK, 0, STREAM
#define FOR_ITEMS(n) for (size_t it = launch_first(blockIdx.x, threadIdx.x); it < (n); it += launch_stride(gridDim.x))
/* what an op reads and writes, for the bf16 copies (operands.cuh): counts in elements */
#define RD(p, n) bf_read(&impl_of(d)->bf, STREAM, (p), sizeof(*(p)) * (size_t)(n))
#define WR(p, n) bf_written(&impl_of(d)->bf, STREAM, (p), sizeof(*(p)) * (size_t)(n))
/* in precision bf16, the bf16 copy an op writes beside its fp32 output (NULL: none) */
#define PRODUCE(p, n) (d->precision == PRECISION_BF16 ? bf_produce(&impl_of(d)->bf, STREAM, (p), (size_t)(n), 0) : (WR(p, n), (__nv_bfloat16 *)NULL))
#define LAUNCHED(what) check_launch(d, what)

/* ---- memory ---- */
static void *cu_alloc(device_t *d, size_t bytes) {
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) { cudaGetLastError(); return NULL; }
    if (cudaMemset(p, 0, bytes ? bytes : 1) != cudaSuccess) { cudaFree(p); cudaGetLastError(); return NULL; }
    d->allocated += bytes;
    return p;
}
static void cu_free(device_t *d, void *p) {
    cuda_impl_t *c = impl_of(d);
    /* the copies of whatever lay in p go with it (a copy only held in bf16 is widened first:
     * it may lie in another allocation) */
    for (int i = 0; i < c->bf.count; i++) {
        bf_materialize(c->stream, &c->bf.e[i]);
        c->bf.e[i].state = BF_FREE;
    }
    cudaStreamSynchronize(c->stream);
    cudaFree(p);
}
static void cu_upload(device_t *d, void *dst, const void *src, size_t bytes) {
    WR((char *)dst, bytes);
    if (bytes && cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, STREAM) != cudaSuccess)
        fault(d, "upload", cudaGetErrorString(cudaGetLastError()));
}
static void cu_download(device_t *d, void *dst, const void *src, size_t bytes) {
    cuda_impl_t *c = impl_of(d);
    if (!bytes) return;
    RD((const char *)src, bytes);
    if (cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream) != cudaSuccess ||
        cudaStreamSynchronize(c->stream) != cudaSuccess)
        fault(d, "download", cudaGetErrorString(cudaGetLastError()));
}
static void cu_copy(device_t *d, void *dst, const void *src, size_t bytes) {
    if (!bytes || dst == src) return;
    RD((const char *)src, bytes);
    WR((char *)dst, bytes);
    if (cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, STREAM) != cudaSuccess)
        fault(d, "copy", cudaGetErrorString(cudaGetLastError()));
}
static void cu_zero(device_t *d, void *p, size_t bytes) {
    WR((char *)p, bytes);
    if (bytes && cudaMemsetAsync(p, 0, bytes, STREAM) != cudaSuccess)
        fault(d, "zero", cudaGetErrorString(cudaGetLastError()));
}
static int cu_sync(device_t *d, char *err, size_t errlen) {
    cuda_impl_t *c = impl_of(d);
    cudaError_t e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) fault(d, "sync", cudaGetErrorString(e));
    if (!c->fault[0]) return 0;
    snprintf(err, errlen, "%s", c->fault);
    return -1;
}
static void cu_set_parallel(device_t *d, int on) { (void)d; (void)on; }

/* ---- products ----
 * cuBLAS' column-major contract (gemm.h). In bf16 each operand is its bf16 copy when one is
 * current (operands.cuh), else it is converted into the work buffer: only the elements of the
 * view (rows x cols with leading dimension ld), so a strided view's last column ends where
 * the view does, inside its buffer. cuBLASLt is not used: this model's products have no
 * epilogue to fuse (no bias; SwiGLU joins two products), and cublasGemmEx reaches the same
 * bf16 tensor-core kernels with fp32 accumulation. */
static void gemm_run(device_t *d, gemm_op ta, gemm_op tb, int m, int n, int k, float alpha,
                     const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    cuda_impl_t *c = impl_of(d);
    if (m <= 0 || n <= 0) return;
    const size_t cext = (size_t)ldc * (n - 1) + m;
    if (beta != 0.0f) RD(C, cext);
    WR(C, cext);
    const cublasOperation_t oa = ta == GEMM_T ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t ob = tb == GEMM_T ? CUBLAS_OP_T : CUBLAS_OP_N;
    const size_t ar = ta == GEMM_N ? m : k, ac = ta == GEMM_N ? k : m;
    const size_t br = tb == GEMM_N ? k : n, bc = tb == GEMM_N ? n : k;
    cublasStatus_t st;
    if (d->precision == PRECISION_BF16 && k > 0) {
        size_t la = lda, lb = ldb;
        const __nv_bfloat16 *Ab = bf_find(&c->bf, A, ar, ac, lda, &la), *Bb = bf_find(&c->bf, B, br, bc, ldb, &lb);
        const size_t na = Ab ? 0 : ((size_t)lda * (ac - 1) + ar + 7) & ~(size_t)7;
        const size_t nb = Bb ? 0 : (size_t)ldb * (bc - 1) + br;
        if (Ab && Bb) c->bf.hits++;
        else c->bf.conversions++;
        if (na + nb) {
            __nv_bfloat16 *w = (__nv_bfloat16 *)work(d, sizeof(__nv_bfloat16) * (na + nb));
            if (!w) return;
            if (!Ab) {
                RD(A, (size_t)lda * (ac - 1) + ar);
                to_bf16_launch(c->stream, w, A, ar, ac, lda);
                Ab = w;
            }
            if (!Bb) {
                RD(B, (size_t)ldb * (bc - 1) + br);
                to_bf16_launch(c->stream, w + na, B, br, bc, ldb);
                Bb = w + na;
            }
            check_launch(d, "gemm bf16 operands");
        }
        PERF_PRODUCT("gemm", m, n, k, 1);
        st = cublasGemmEx(c->blas, oa, ob, m, n, k, &alpha, Ab, CUDA_R_16BF, (int)la, Bb, CUDA_R_16BF, (int)lb,
                          &beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    } else {
        if (k > 0) {
            RD(A, (size_t)lda * (ac - 1) + ar);
            RD(B, (size_t)ldb * (bc - 1) + br);
        }
        PERF_PRODUCT("gemm", m, n, k, 0);
        if (d->precision == PRECISION_TF32)
            st = cublasGemmEx(c->blas, oa, ob, m, n, k, &alpha, A, CUDA_R_32F, lda, B, CUDA_R_32F, ldb, &beta, C,
                              CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT);
        else st = cublasSgemm(c->blas, oa, ob, m, n, k, &alpha, A, lda, B, ldb, &beta, C, ldc);
    }
    if (st != CUBLAS_STATUS_SUCCESS) {
        char why[64];
        snprintf(why, sizeof why, "cuBLAS status %d", (int)st);
        fault(d, "gemm", why);
    }
}

/* The product, timed with events when a benchmark asks (bench/gpu.sh: cuBLAS' share). */
static void cu_gemm(device_t *d, gemm_op ta, gemm_op tb, int m, int n, int k, float alpha,
                    const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    if (!d->profile_gemm) {
        gemm_run(d, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaEventRecord(e0, STREAM);
    gemm_run(d, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
    cudaEventRecord(e1, STREAM);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    d->gemm_seconds += ms * 1e-3;
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
}

/* The bias-free Linear through the product (the mapping table of gemm.h). */
static void cu_linear_forward(device_t *d, float *y, const float *x, const float *w, int N, int in, int out) {
    cu_gemm(d, GEMM_T, GEMM_N, out, N, in, 1.0f, w, in, x, in, 0.0f, y, out);
}
static void linear_bwd(device_t *d, float *dx, float *dw, const float *dy, const float *x, const float *w,
                       int N, int in, int out, float beta_dx) {
    if (dx) cu_gemm(d, GEMM_N, GEMM_N, in, N, out, 1.0f, w, in, dy, out, beta_dx, dx, in);
    if (dw) cu_gemm(d, GEMM_N, GEMM_T, in, out, N, 1.0f, x, in, dy, out, 1.0f, dw, in);
}
static void cu_linear_backward(device_t *d, float *dx, float *dw, const float *dy, const float *x,
                               const float *w, int N, int in, int out) {
    linear_bwd(d, dx, dw, dy, x, w, N, in, out, 1.0f);
}
static void cu_linear_backward_set(device_t *d, float *dx, float *dw, const float *dy, const float *x,
                                   const float *w, int N, int in, int out) {
    linear_bwd(d, dx, dw, dy, x, w, N, in, out, 0.0f);
}

/* ---- kernels.h's bodies: a grid-stride loop over a body's items (the ops outside the
 * training step's hot path, and the attention of head dimensions above ATT_MAX_HD) ---- */
__global__ void g_att_fwd(size_t n, float *out, float *lse, const float *q, const float *k, const float *v, int Tq, int Tk, int H, int Hkv, int hd, int causal, int window) { FOR_ITEMS(n) kb_att_fwd(it, out, lse, q, k, v, Tq, Tk, H, Hkv, hd, causal, window); }
__global__ void g_att_rowdot(size_t n, float *Drow, const float *dout, const float *out, int Tq, int H, int hd) { FOR_ITEMS(n) kb_att_bwd_rowdot(it, Drow, dout, out, Tq, H, hd); }
__global__ void g_att_dq(size_t n, float *dq, const float *q, const float *k, const float *v, const float *dout, const float *lse, const float *Drow, int Tq, int Tk, int H, int Hkv, int hd, int causal, int window) { FOR_ITEMS(n) kb_att_bwd_dq(it, dq, q, k, v, dout, lse, Drow, Tq, Tk, H, Hkv, hd, causal, window); }
__global__ void g_att_dkv(size_t n, float *dk, float *dv, const float *q, const float *k, const float *v, const float *dout, const float *lse, const float *Drow, int Tq, int Tk, int H, int Hkv, int hd, int causal, int window) { FOR_ITEMS(n) kb_att_bwd_dkv(it, dk, dv, q, k, v, dout, lse, Drow, Tq, Tk, H, Hkv, hd, causal, window); }
__global__ void g_linear_rows(size_t n, float *y, const float *x, const float *w, int in, int out) { FOR_ITEMS(n) kb_linear_rows(it, y, x, w, in, out); }
__global__ void g_attention_rows(size_t n, float *out, const float *q, const float *kc, const float *vc, const int *base, const int *len, int H, int Hkv, int hd) { FOR_ITEMS(n) kb_attention_rows(it, out, q, kc, vc, base, len, H, Hkv, hd); }
__global__ void g_scatter_rows(size_t n, float *dst, int ldd, const int *idx, const float *src, int lds, int D) { FOR_ITEMS(n) kb_scatter_rows(it, dst, ldd, idx, src, lds, D); }
__global__ void g_repeat_rows(size_t n, float *out, const float *row, int D) { FOR_ITEMS(n) kb_repeat_rows(it, out, row, D); }
__global__ void g_uniform(size_t n, float *u, uint64_t key, uint64_t c0) { FOR_ITEMS(n) kb_uniform(it, u, key, c0); }
__global__ void g_binmap_fwd(size_t n, uint32_t *idx, float *prob, const float *lg, const float *u, int H) { FOR_ITEMS(n) kb_binmap_fwd(it, idx, prob, lg, u, H); }
__global__ void g_binmap_kl(size_t n, float *kl, const float *lg, int H) { FOR_ITEMS(n) kb_binmap_kl(it, kl, lg, H); }
__global__ void g_free_bits_bwd(size_t n, float *dl, const float *lg, const float *kl, const uint8_t *mask, int H, float kappa, float scale) { FOR_ITEMS(n) kb_free_bits_bwd(it, dl, lg, kl, mask, H, kappa, scale); }
__global__ void g_post_fwd(size_t n, float *r, const float *w, const uint32_t *idx, int D, int H) { FOR_ITEMS(n) kb_post_fwd(it, r, w, idx, D, H); }
__global__ void g_post_bwd_dw(size_t n, float *dw, const float *dr, const uint32_t *idx, int N, int D, int H) { FOR_ITEMS(n) kb_post_bwd_dw(it, dw, dr, idx, N, D, H); }
__global__ void g_binmap_bwd(size_t n, float *dl, float *dz, const float *prob, int H) { FOR_ITEMS(n) kb_binmap_bwd(it, dl, dz, prob, H); }
__global__ void g_mixer_tril(size_t n, float *out, const float *w, int T, int acc) { FOR_ITEMS(n) kb_mixer_tril(it, out, w, T, acc); }
__global__ void g_mixer_bias_fwd(size_t n, float *y, const float *bias, int T, int D, int h, int Tb) { FOR_ITEMS(n) kb_mixer_bias_fwd(it, y, bias, T, D, h, Tb); }
__global__ void g_mixer_bias_bwd(size_t n, float *db, const float *dy, int B, int T, int D, int h, int Tb) { FOR_ITEMS(n) kb_mixer_bias_bwd(it, db, dy, B, T, D, h, Tb); }
__global__ void g_unroll_fwd(size_t n, float *out, const float *e, int T, int D, int nd) { FOR_ITEMS(n) kb_unroll_fwd(it, out, e, T, D, nd); }
__global__ void g_unroll_bwd(size_t n, float *de, const float *dout, int T, int D, int nd) { FOR_ITEMS(n) kb_unroll_bwd(it, de, dout, T, D, nd); }
__global__ void g_latent_normal(size_t n, float *x, int B, int len, uint64_t key, uint64_t row0, float mean, float std) { FOR_ITEMS(n) kb_latent_normal(it, x, B, len, key, row0, mean, std); }
__global__ void g_latent_sample(size_t n, float *z, const float *mu, const float *ls, const float *eps) { FOR_ITEMS(n) kb_latent_sample(it, z, mu, ls, eps); }
__global__ void g_latent_kl(size_t n, float *kl, const float *mu, const float *ls, int L, int B, int len) { FOR_ITEMS(n) kb_latent_kl(it, kl, mu, ls, L, B, len); }
__global__ void g_latent_bwd(size_t n, float *dmu, float *dls, const float *dz, const float *mu, const float *ls, const float *eps, float kl_scale) { FOR_ITEMS(n) kb_latent_bwd(it, dmu, dls, dz, mu, ls, eps, kl_scale); }

/* ---- the decoder's ops ---- */
/* The table's extent is not an argument (nor a KV cache's, nor scatter_rows' destination):
 * such ranges are never a bf16-only copy (operands.cuh registers activations' and weights'
 * ranges, whose fp32 stays current, and dlogits'), so their reads need no widening and their
 * writes touch no copy. */
static void cu_embedding_forward(device_t *d, float *out, const uint32_t *tok, const float *table, int N, int D) {
    WR(out, (size_t)N * D);
    embedding_forward_launch(STREAM, out, tok, table, N, D);
    LAUNCHED("embedding_forward");
}
static void cu_embedding_backward(device_t *d, float *dt, const float *dout, const uint32_t *tok, int N, int D) {
    RD(dout, (size_t)N * D);
    void *w = work(d, emb_work_bytes(N, D));
    if (!w) return;
    check_status(d, "embedding_backward", embedding_backward_launch(STREAM, w, dt, dout, tok, N, D));
    LAUNCHED("embedding_backward");
}
static void cu_rmsnorm_forward(device_t *d, float *out, float *rstd, const float *x, const float *w, int N, int D, float eps) {
    RD(x, (size_t)N * D);
    RD(w, D);
    WR(rstd, N);
    __nv_bfloat16 *ob = PRODUCE(out, (size_t)N * D);
    rmsnorm_forward_launch(STREAM, out, rstd, ob, x, w, N, D, eps);
    LAUNCHED("rmsnorm_forward");
}
static void cu_rmsnorm_backward(device_t *d, float *dx, float *dw, const float *dout, const float *x, const float *w, const float *rstd, int N, int D) {
    RD(dout, (size_t)N * D);
    RD(x, (size_t)N * D);
    RD(w, D);
    RD(rstd, N);
    if (dx) WR(dx, (size_t)N * D);
    if (dw) WR(dw, D);
    float *part = dw ? (float *)work(d, sizeof(float) * colred_work_floats(N, D)) : NULL;
    if (dw && !part) return;
    rmsnorm_backward_launch(STREAM, dx, dw, part, dout, x, w, rstd, N, D);
    LAUNCHED("rmsnorm_backward");
}
static void cu_rope_forward(device_t *d, float *out, const float *x, const float *cs, const float *sn, int B, int T, int H, int hd, int pos0) {
    const size_t n = (size_t)B * T * H * hd, ld = (size_t)H * hd;
    RD(x, n);
    WR(out, n);
    rope_launch(STREAM, out, NULL, ld, 0, x, ld, 0, cs, sn, (size_t)B * T, H, hd, T, pos0, NULL, 1.0f, 0);
    LAUNCHED("rope_forward");
}
static void cu_rope_backward(device_t *d, float *dx, const float *dout, const float *cs, const float *sn, int B, int T, int H, int hd, int pos0) {
    const size_t n = (size_t)B * T * H * hd, ld = (size_t)H * hd;
    RD(dout, n);
    WR(dx, n);
    rope_launch(STREAM, dx, NULL, ld, 0, dout, ld, 0, cs, sn, (size_t)B * T, H, hd, T, pos0, NULL, -1.0f, 1);
    LAUNCHED("rope_backward");
}
static void cu_qkv_split_rope(device_t *d, float *q, float *k, float *v, const float *qkv, const float *cs, const float *sn, int N, int T, int H, int Hkv, int hd, int pos0) {
    const size_t Dq = (size_t)H * hd, Dkv = (size_t)Hkv * hd;
    RD(qkv, (size_t)N * (Dq + 2 * Dkv));
    if (q) WR(q, N * Dq);
    if (k) WR(k, N * Dkv);
    if (v) WR(v, N * Dkv);
    qkv_split_launch(STREAM, q, k, v, qkv, cs, sn, N, T, H, Hkv, hd, pos0, NULL);
    LAUNCHED("qkv_split_rope");
}
static void cu_qkv_join_unrope(device_t *d, float *dqkv, const float *dq, const float *dk, const float *dv, const float *cs, const float *sn, int N, int T, int H, int Hkv, int hd, int pos0) {
    const size_t Dq = (size_t)H * hd, Dkv = (size_t)Hkv * hd;
    RD(dq, N * Dq);
    RD(dk, N * Dkv);
    RD(dv, N * Dkv);
    __nv_bfloat16 *bf = PRODUCE(dqkv, (size_t)N * (Dq + 2 * Dkv));
    qkv_join_launch(STREAM, dqkv, bf, dq, dk, dv, cs, sn, N, T, H, Hkv, hd, pos0);
    LAUNCHED("qkv_join_unrope");
}
static void cu_attention_window_forward(device_t *d, float *out, float *lse, const float *q, const float *k, const float *v, int B, int Tq, int Tk, int H, int Hkv, int hd, int causal, int window) {
    if (hd > KB_MAX_HEAD_DIM) {
        char why[96];
        snprintf(why, sizeof why, "head dimension %d exceeds the kernels' %d", hd, KB_MAX_HEAD_DIM);
        fault(d, "attention", why);
        return;
    }
    const size_t nq = (size_t)B * Tq * H * hd, nk = (size_t)B * Tk * Hkv * hd;
    RD(q, nq);
    RD(k, nk);
    RD(v, nk);
    WR(lse, (size_t)B * H * Tq);
    if (hd > ATT_MAX_HD) {
        WR(out, nq);
        const size_t n = (size_t)B * H * Tq;
        g_att_fwd<<<GRID(n)>>>(n, out, lse, q, k, v, Tq, Tk, H, Hkv, hd, causal, window);
    } else {
        __nv_bfloat16 *ob = PRODUCE(out, nq);
        check_status(d, "attention_forward", attention_forward_launch(STREAM, d->precision == PRECISION_BF16, out, ob, lse, q, k, v, B, Tq, Tk, H, Hkv, hd, causal, window));
    }
    LAUNCHED("attention_forward");
}
static void cu_attention_window_backward(device_t *d, float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse, const float *q, const float *k, const float *v, int B, int Tq, int Tk, int H, int Hkv, int hd, int causal, int window) {
    if (hd > KB_MAX_HEAD_DIM) {
        char why[96];
        snprintf(why, sizeof why, "head dimension %d exceeds the kernels' %d", hd, KB_MAX_HEAD_DIM);
        fault(d, "attention", why);
        return;
    }
    const size_t nq = (size_t)B * Tq * H * hd, nk = (size_t)B * Tk * Hkv * hd, nr = (size_t)B * H * Tq;
    RD(dout, nq);
    RD(out, nq);
    RD(lse, nr);
    RD(q, nq);
    RD(k, nk);
    RD(v, nk);
    if (dq) WR(dq, nq);
    WR(dk, nk);
    WR(dv, nk);
    float *Drow = (float *)work(d, sizeof(float) * nr);
    if (!Drow) return;
    if (hd > ATT_MAX_HD) {
        const size_t nkr = (size_t)B * Hkv * Tk;
        g_att_rowdot<<<GRID(nr)>>>(nr, Drow, dout, out, Tq, H, hd);
        if (dq) g_att_dq<<<GRID(nr)>>>(nr, dq, q, k, v, dout, lse, Drow, Tq, Tk, H, Hkv, hd, causal, window);
        g_att_dkv<<<GRID(nkr)>>>(nkr, dk, dv, q, k, v, dout, lse, Drow, Tq, Tk, H, Hkv, hd, causal, window);
    } else {
        check_status(d, "attention_backward", attention_backward_launch(STREAM, d->precision == PRECISION_BF16, dq, dk, dv, Drow, dout, out, lse, q, k, v, B, Tq, Tk, H, Hkv, hd, causal, window));
    }
    LAUNCHED("attention_backward");
}
static void cu_attention_forward(device_t *d, float *out, float *lse, const float *q, const float *k, const float *v, int B, int Tq, int Tk, int H, int Hkv, int hd, int causal) {
    cu_attention_window_forward(d, out, lse, q, k, v, B, Tq, Tk, H, Hkv, hd, causal, 0);
}
static void cu_attention_backward(device_t *d, float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse, const float *q, const float *k, const float *v, int B, int Tq, int Tk, int H, int Hkv, int hd, int causal) {
    cu_attention_window_backward(d, dq, dk, dv, dout, out, lse, q, k, v, B, Tq, Tk, H, Hkv, hd, causal, 0);
}
static void cu_swiglu_forward(device_t *d, float *out, const float *gate, const float *up, int N, int F) {
    const size_t n = (size_t)N * F;
    RD(gate, n);
    RD(up, n);
    __nv_bfloat16 *ob = PRODUCE(out, n);
    swiglu_forward_launch(STREAM, out, ob, gate, up, n);
    LAUNCHED("swiglu_forward");
}
static void swiglu_bwd(device_t *d, float *dg, float *du, const float *dout, const float *gate, const float *up, int N, int F, int acc) {
    const size_t n = (size_t)N * F;
    RD(dout, n);
    RD(gate, n);
    RD(up, n);
    if (acc) {
        RD(dg, n);
        RD(du, n);
    }
    __nv_bfloat16 *gb = PRODUCE(dg, n), *ub = PRODUCE(du, n);
    swiglu_backward_launch(STREAM, dg, du, gb, ub, dout, gate, up, n, acc);
    LAUNCHED("swiglu_backward");
}
static void cu_swiglu_backward(device_t *d, float *dg, float *du, const float *dout, const float *gate, const float *up, int N, int F) { swiglu_bwd(d, dg, du, dout, gate, up, N, F, 1); }
static void cu_swiglu_backward_set(device_t *d, float *dg, float *du, const float *dout, const float *gate, const float *up, int N, int F) { swiglu_bwd(d, dg, du, dout, gate, up, N, F, 0); }

/* The classifier (classifier.cuh). In precision bf16 the gradient is written only in bf16, in
 * place over each row's own bytes (its readers are the head's two products, which find it in
 * operands.cuh; any other reader gets it widened back to fp32). */
static void classifier(device_t *d, float *row_loss, float *lse, float *dz, const float *z, const uint32_t *tgt, const uint8_t *mask, int N, int V, float dloss, int have_lse) {
    cuda_impl_t *c = impl_of(d);
    const size_t n = (size_t)N * V;
    RD(z, n);
    if (mask) RD(mask, N);
    if (have_lse) RD(lse, N);
    else WR(lse, N);
    __nv_bfloat16 *dzb = NULL;
    if (dz && d->precision == PRECISION_BF16 && V >= 8) dzb = bf_produce(&c->bf, c->stream, dz, n, V);
    if (dz && !dzb) WR(dz, n);
    /* the row cached in shared memory when it fits (one read of the logits) */
    const size_t cache = !have_lse && sizeof(float) * (size_t)V + 1024 <= c->smem_optin ? sizeof(float) * (size_t)V : 0;
    if (cache > 48 * 1024) check_status(d, "crossentropy", cudaFuncSetAttribute(k_classifier, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)cache));
    classifier_launch(c->stream, c->ce, row_loss, lse, dzb ? NULL : dz, dzb, 2 * V, z, tgt, mask, N, V, dloss, have_lse, cache);
}
static float cu_crossentropy_forward(device_t *d, float *dz, float *lse, int *count, const float *z, const uint32_t *tgt, const uint8_t *mask, int N, int V, float dloss) {
    cuda_impl_t *c = impl_of(d);
    float *row_loss = (float *)work(d, sizeof(float) * (N > 0 ? N : 1));
    if (!row_loss) return NAN;
    classifier(d, row_loss, lse, dz, z, tgt, mask, N, V, dloss, 0);
    LAUNCHED("crossentropy_forward");
    ce_result_t r = {0.0, 0, 0};
    if (cudaMemcpyAsync(&r, c->ce, sizeof r, cudaMemcpyDeviceToHost, c->stream) != cudaSuccess ||
        cudaStreamSynchronize(c->stream) != cudaSuccess) {
        fault(d, "crossentropy_forward", cudaGetErrorString(cudaGetLastError()));
        return NAN;
    }
    if (count) *count = r.count;
    return r.count > 0 ? (float)(r.loss_sum / r.count) : 0.0f;
}
static void cu_crossentropy_backward(device_t *d, float *dz, const float *z, const float *lse, const uint32_t *tgt, const uint8_t *mask, int N, int V, float dloss) {
    classifier(d, NULL, (float *)lse, dz, z, tgt, mask, N, V, dloss, 1);
    LAUNCHED("crossentropy_backward");
}

/* ---- a decode step's rows ----
 * Row-independent products by a kernel, not cuBLAS: cuBLAS may choose another algorithm for
 * another N, and a decode row must not depend on the rows beside it. */
static void cu_linear_rows(device_t *d, float *y, const float *x, const float *w, int N, int in, int out) {
    size_t n = (size_t)N * out;
    RD(x, (size_t)N * in);
    RD(w, (size_t)in * out);
    WR(y, n);
    g_linear_rows<<<GRID(n)>>>(n, y, x, w, in, out);
    LAUNCHED("linear_rows");
}
static void cu_qkv_split_rope_rows(device_t *d, float *q, float *k, float *v, const float *qkv, const float *cs, const float *sn, int N, int H, int Hkv, int hd, const int *pos) {
    const size_t Dq = (size_t)H * hd, Dkv = (size_t)Hkv * hd;
    RD(qkv, (size_t)N * (Dq + 2 * Dkv));
    if (q) WR(q, N * Dq);
    if (k) WR(k, N * Dkv);
    if (v) WR(v, N * Dkv);
    qkv_split_launch(STREAM, q, k, v, qkv, cs, sn, N, 1, H, Hkv, hd, 0, pos);
    LAUNCHED("qkv_split_rope_rows");
}
static void cu_rope_rows(device_t *d, float *out, const float *x, const float *cs, const float *sn, int N, int H, int hd, const int *pos) {
    const size_t ld = (size_t)H * hd;
    RD(x, N * ld);
    WR(out, N * ld);
    rope_launch(STREAM, out, NULL, ld, 0, x, ld, 0, cs, sn, (size_t)N, H, hd, 1, 0, pos, 1.0f, 0);
    LAUNCHED("rope_rows");
}
static void cu_attention_rows(device_t *d, float *out, const float *q, const float *kc, const float *vc, const int *base, const int *len, int N, int H, int Hkv, int hd) {
    if (hd > KB_MAX_HEAD_DIM) {
        fault(d, "attention_rows", "head dimension exceeds the kernels' maximum");
        return;
    }
    size_t n = (size_t)N * H;
    RD(q, n * hd);
    WR(out, n * hd);
    if (hd > ATT_MAX_HD) g_attention_rows<<<GRID(n)>>>(n, out, q, kc, vc, base, len, H, Hkv, hd);
    else check_status(d, "attention_rows", attention_rows_launch(STREAM, out, q, kc, vc, base, len, N, H, Hkv, hd));
    LAUNCHED("attention_rows");
}
static void cu_scatter_rows(device_t *d, float *dst, int ldd, const int *idx, const float *src, int lds, int N, int D) {
    size_t n = (size_t)N * D;
    RD(src, (size_t)lds * (N > 0 ? N - 1 : 0) + D);
    g_scatter_rows<<<GRID(n)>>>(n, dst, ldd, idx, src, lds, D);
    LAUNCHED("scatter_rows");
}

/* ---- element-wise and row helpers ---- */
static void cu_add_forward(device_t *d, float *y, const float *a, const float *b, size_t n) {
    RD(a, n);
    RD(b, n);
    WR(y, n);
    add_launch(STREAM, y, a, b, n);
    LAUNCHED("add");
}
static void cu_add_inplace(device_t *d, float *y, const float *x, size_t n) {
    RD(x, n);
    WR(y, n);
    add_inplace_launch(STREAM, y, x, n);
    LAUNCHED("add_inplace");
}
static void cu_scale_inplace(device_t *d, float *x, float s, size_t n) {
    WR(x, n);
    scale_launch(STREAM, x, s, n);
    LAUNCHED("scale");
}
static void cu_repeat_rows(device_t *d, float *out, const float *row, int N, int D) {
    size_t n = (size_t)N * D;
    RD(row, D);
    WR(out, n);
    g_repeat_rows<<<GRID(n)>>>(n, out, row, D);
    LAUNCHED("repeat_rows");
}
static void cu_sum_rows(device_t *d, float *out, const float *x, int N, int D) {
    RD(x, (size_t)N * D);
    WR(out, D);
    float *part = (float *)work(d, sizeof(float) * colred_work_floats(N, D));
    if (!part) return;
    colsum_launch(STREAM, out, part, x, NULL, NULL, N, D, COLRED_SUM, 1);
    LAUNCHED("sum_rows");
}
static void cu_copy_rows(device_t *d, float *dst, int ldd, const float *src, int lds, int rows, int D) {
    if (rows <= 0) return;
    RD(src, (size_t)lds * (rows - 1) + D);
    WR(dst, (size_t)ldd * (rows - 1) + D);
    copy_rows_launch(STREAM, dst, NULL, ldd, 0, src, lds, 0, rows, D);
    LAUNCHED("copy_rows");
}

/* ---- the Free Transformer's latent ---- */
static void cu_uniform_fill(device_t *d, float *u, size_t n, uint64_t key, uint64_t c0) {
    WR(u, n);
    g_uniform<<<GRID(n)>>>(n, u, key, c0);
    LAUNCHED("uniform_fill");
}
static void cu_binmap_forward(device_t *d, uint32_t *idx, float *prob, const float *lg, const float *u, int N, int H) {
    RD(lg, (size_t)N * H);
    RD(u, (size_t)N * H);
    WR(prob, (size_t)N * H);
    g_binmap_fwd<<<GRID((size_t)N)>>>((size_t)N, idx, prob, lg, u, H);
    LAUNCHED("binmap_forward");
}
static void cu_binmap_kl_rows(device_t *d, float *kl, const float *lg, int N, int H) {
    RD(lg, (size_t)N * H);
    WR(kl, N);
    g_binmap_kl<<<GRID((size_t)N)>>>((size_t)N, kl, lg, H);
    LAUNCHED("binmap_kl_rows");
}
/* The free bits' sums: KL and mask downloaded and summed by the CPU op itself. */
static free_bits_sums_t cu_free_bits_forward(device_t *d, const float *kl, const uint8_t *mask, int N, float kappa) {
    free_bits_sums_t s = {0, 0, 0, 0};
    char *h = (char *)host_rows(d, (sizeof(float) + 1) * (size_t)(N > 0 ? N : 1));
    if (!h) { fault(d, "free_bits_forward", "out of host memory"); return s; }
    float *klh = (float *)h;
    uint8_t *mh = mask ? (uint8_t *)(h + sizeof(float) * N) : NULL;
    cu_download(d, klh, kl, sizeof(float) * N);
    if (mask) cu_download(d, mh, mask, (size_t)N);
    return free_bits_forward(klh, mh, N, kappa);
}
static void cu_free_bits_backward(device_t *d, float *dl, const float *lg, const float *kl, const uint8_t *mask, int N, int H, float kappa, float scale) {
    RD(lg, (size_t)N * H);
    RD(kl, N);
    WR(dl, (size_t)N * H);
    g_free_bits_bwd<<<GRID((size_t)N)>>>((size_t)N, dl, lg, kl, mask, H, kappa, scale);
    LAUNCHED("free_bits_backward");
}
static void cu_post_sampler_forward(device_t *d, float *r, const float *w, const uint32_t *idx, int N, int D, int H) {
    size_t n = (size_t)N * D;
    RD(w, (size_t)D << H);
    WR(r, n);
    g_post_fwd<<<GRID(n)>>>(n, r, w, idx, D, H);
    LAUNCHED("post_sampler_forward");
}
static void cu_post_sampler_backward(device_t *d, float *dw, float *dl, const float *dr, const float *w, const uint32_t *idx, const float *prob, int N, int D, int H) {
    RD(dr, (size_t)N * D);
    RD(w, (size_t)D << H);
    RD(prob, (size_t)N * H);
    WR(dw, (size_t)D << H);
    if (dl) WR(dl, (size_t)N * H);
    g_post_bwd_dw<<<GRID((size_t)D)>>>((size_t)D, dw, dr, idx, N, D, H);
    LAUNCHED("post_sampler_backward dw");
    if (!dl) return;
    /* dZ = W^T dR over chunks of rows (fp32, as the CPU: the Binary Mapper stays fp32), then
     * the pass-through per row */
    const size_t K = (size_t)1 << H;
    int rows = (int)(CUDA_BINMAP_CHUNK_FLOATS / K);
    if (rows < 1) rows = 1;
    if (rows > N) rows = N;
    float *dz = (float *)work(d, sizeof(float) * K * rows);
    if (!dz) return;
    cuda_impl_t *c = impl_of(d);
    const float one = 1.0f, zero = 0.0f;
    for (int n0 = 0; n0 < N; n0 += rows) {
        int r = N - n0 < rows ? N - n0 : rows;
        PERF_PRODUCT("binmap", (long long)K, r, D, 0);
        cublasStatus_t st = cublasSgemm(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)K, r, D, &one, w, (int)K,
                                        dr + (size_t)n0 * D, D, &zero, dz, (int)K);
        if (st != CUBLAS_STATUS_SUCCESS) { fault(d, "post_sampler_backward", "cuBLAS failed"); return; }
        g_binmap_bwd<<<GRID((size_t)r)>>>((size_t)r, dl + (size_t)n0 * H, dz, prob + (size_t)n0 * H, H);
        LAUNCHED("post_sampler_backward dlogits");
    }
}

/* ---- the masked mixer ---- */
static void cu_mixer_tril(device_t *d, float *out, const float *w, int M, int T, int acc) {
    size_t n = (size_t)M * T * T;
    RD(w, n);
    WR(out, n);
    g_mixer_tril<<<GRID(n)>>>(n, out, w, T, acc);
    LAUNCHED("mixer_tril");
}
static void cu_mixer_bias_forward(device_t *d, float *y, const float *bias, int B, int T, int D, int h, int Tb) {
    size_t n = (size_t)B * T * D;
    RD(bias, (size_t)h * Tb);
    WR(y, n);
    g_mixer_bias_fwd<<<GRID(n)>>>(n, y, bias, T, D, h, Tb);
    LAUNCHED("mixer_bias_forward");
}
static void cu_mixer_bias_backward(device_t *d, float *db, const float *dy, int B, int T, int D, int h, int Tb) {
    size_t n = (size_t)h * T;
    RD(dy, (size_t)B * T * D);
    WR(db, (size_t)h * Tb);
    g_mixer_bias_bwd<<<GRID(n)>>>(n, db, dy, B, T, D, h, Tb);
    LAUNCHED("mixer_bias_backward");
}
static void cu_unroll_forward(device_t *d, float *out, const float *e, int B, int T, int D, int nd) {
    size_t n = (size_t)B * T * nd;
    RD(e, (size_t)B * D);
    WR(out, n);
    g_unroll_fwd<<<GRID(n)>>>(n, out, e, T, D, nd);
    LAUNCHED("unroll_forward");
}
static void cu_unroll_backward(device_t *d, float *de, const float *dout, int B, int T, int D, int nd) {
    size_t n = (size_t)B * D;
    RD(dout, (size_t)B * T * nd);
    WR(de, n);
    g_unroll_bwd<<<GRID(n)>>>(n, de, dout, T, D, nd);
    LAUNCHED("unroll_backward");
}

/* ---- the optimizer (adamw.cuh) ---- */
/* the list on the device (uploaded when it changed) and its chunk count */
static const mt_tensor_t *mt_upload(device_t *d, mt_list_t *L, mt_tensor_t *t, int count) {
    const size_t chunks = mt_layout(t, count);
    if (count == L->count && L->dev && !memcmp(t, L->host, sizeof(*t) * count)) return L->dev;
    if (count > L->cap) {
        cudaStreamSynchronize(STREAM);
        if (L->dev) cudaFree(L->dev);
        free(L->host);
        L->dev = NULL;
        L->host = (mt_tensor_t *)malloc(sizeof(*t) * count);
        L->cap = 0;
        L->count = 0;
        if (!L->host || cudaMalloc(&L->dev, sizeof(*t) * count) != cudaSuccess) {
            cudaGetLastError();
            free(L->host);
            L->host = NULL;
            L->dev = NULL;
            fault(d, "optimizer", "out of memory for the tensor list");
            return NULL;
        }
        L->cap = count;
    }
    memcpy(L->host, t, sizeof(*t) * count);
    L->count = count;
    L->chunks = chunks;
    /* synchronous: the host copy is rewritten by the next call */
    check_status(d, "optimizer list", cudaMemcpyAsync(L->dev, L->host, sizeof(*t) * count, cudaMemcpyHostToDevice, STREAM));
    check_status(d, "optimizer list", cudaStreamSynchronize(STREAM));
    return L->dev;
}
static double cu_sumsq_multi(device_t *d, const float *const *x, const size_t *n, int count) {
    cuda_impl_t *c = impl_of(d);
    if (count <= 0) return 0.0;
    mt_tensor_t *t = (mt_tensor_t *)calloc(count, sizeof(*t));
    if (!t) { fault(d, "sumsq", "out of host memory"); return NAN; }
    for (int i = 0; i < count; i++) {
        t[i].g = (float *)x[i];
        t[i].n = n[i];
        RD(x[i], n[i]);
    }
    const mt_tensor_t *dev = mt_upload(d, &c->mt_norm, t, count);
    free(t);
    if (!dev) return NAN;
    double *part = (double *)work(d, sizeof(double) * (c->mt_norm.chunks ? c->mt_norm.chunks : 1));
    if (!part) return NAN;
    sumsq_multi_launch(c->stream, c->norm, part, dev, count, c->mt_norm.chunks);
    LAUNCHED("sumsq");
    double total = NAN;
    if (cudaMemcpyAsync(&total, c->norm, sizeof total, cudaMemcpyDeviceToHost, c->stream) != cudaSuccess ||
        cudaStreamSynchronize(c->stream) != cudaSuccess)
        fault(d, "sumsq", cudaGetErrorString(cudaGetLastError()));
    return total;
}
static double cu_sumsq(device_t *d, const float *x, size_t n) { return cu_sumsq_multi(d, &x, &n, 1); }
/* In precision bf16 the update also refreshes the bf16 copy of the weights, one copy per run
 * of tensors that lie back to back (a product may span several: the fused q|k|v weight). */
static void cu_adamw_update_multi(device_t *d, const adamw_tensor_t *at, int count, const adamw_scalars_t *s) {
    cuda_impl_t *c = impl_of(d);
    if (count <= 0) return;
    mt_tensor_t *t = (mt_tensor_t *)calloc(count, sizeof(*t));
    if (!t) { fault(d, "adamw_update", "out of host memory"); return; }
    for (int i = 0; i < count; i++) {
        t[i] = (mt_tensor_t){at[i].p, at[i].g, at[i].m, at[i].v, NULL, at[i].n, 0, at[i].decay, 0};
        WR(at[i].g, at[i].n);
        WR(at[i].m, at[i].n);
        WR(at[i].v, at[i].n);
    }
    for (int i0 = 0; i0 < count;) {
        int i1 = i0 + 1;
        size_t len = at[i0].n;
        while (i1 < count && at[i1].p == at[i0].p + len) len += at[i1++].n;
        __nv_bfloat16 *pb = PRODUCE(at[i0].p, len);
        for (int i = i0; i < i1 && pb; i++) t[i].pb = pb + (at[i].p - at[i0].p);
        i0 = i1;
    }
    const mt_tensor_t *dev = mt_upload(d, &c->mt_adam, t, count);
    free(t);
    if (!dev) return;
    const mt_scalars_t sc = {s->clip, s->decay_mul, s->beta1, s->beta2, s->eps, s->step_size, s->bc2_sqrt};
    adamw_multi_launch(c->stream, dev, count, c->mt_adam.chunks, sc);
    LAUNCHED("adamw_update");
}
static void cu_adamw_update(device_t *d, float *p, float *g, float *m, float *v, size_t n, const adamw_scalars_t *s) {
    const adamw_tensor_t t = {p, g, m, v, n, 1};
    cu_adamw_update_multi(d, &t, 1, s);
}

/* ---- the LTM's Gaussian latents ---- */
static void cu_latent_normal(device_t *d, float *x, int L, int B, int n, uint64_t key, uint64_t row0, float mean, float std) {
    size_t total = (size_t)L * B * n;
    WR(x, total);
    g_latent_normal<<<GRID(total)>>>(total, x, B, n, key, row0, mean, std);
    LAUNCHED("latent_normal");
}
static void cu_latent_sample(device_t *d, float *z, const float *mu, const float *ls, const float *eps, size_t n) {
    RD(mu, n);
    RD(ls, n);
    RD(eps, n);
    WR(z, n);
    g_latent_sample<<<GRID(n)>>>(n, z, mu, ls, eps);
    LAUNCHED("latent_sample");
}
static void cu_latent_kl_rows(device_t *d, float *kl, const float *mu, const float *ls, int L, int B, int n) {
    RD(mu, (size_t)L * B * n);
    RD(ls, (size_t)L * B * n);
    WR(kl, B);
    g_latent_kl<<<GRID((size_t)B)>>>((size_t)B, kl, mu, ls, L, B, n);
    LAUNCHED("latent_kl_rows");
}
static void cu_latent_backward(device_t *d, float *dmu, float *dls, const float *dz, const float *mu, const float *ls, const float *eps, float kl_scale, size_t n) {
    RD(dz, n);
    RD(mu, n);
    RD(ls, n);
    RD(eps, n);
    WR(dmu, n);
    WR(dls, n);
    g_latent_bwd<<<GRID(n)>>>(n, dmu, dls, dz, mu, ls, eps, kl_scale);
    LAUNCHED("latent_backward");
}

/* C++20 designated initializers: in the table's order, which the compiler checks */
static const device_ops_t cuda_ops = {
    .alloc = cu_alloc,
    .free = cu_free,
    .upload = cu_upload,
    .download = cu_download,
    .copy = cu_copy,
    .zero = cu_zero,
    .sync = cu_sync,
    .set_parallel = cu_set_parallel,
    .gemm = cu_gemm,
    .embedding_forward = cu_embedding_forward,
    .embedding_backward = cu_embedding_backward,
    .rmsnorm_forward = cu_rmsnorm_forward,
    .rmsnorm_backward = cu_rmsnorm_backward,
    .linear_forward = cu_linear_forward,
    .linear_backward = cu_linear_backward,
    .linear_backward_set = cu_linear_backward_set,
    .rope_forward = cu_rope_forward,
    .rope_backward = cu_rope_backward,
    .qkv_split_rope = cu_qkv_split_rope,
    .qkv_join_unrope = cu_qkv_join_unrope,
    .attention_forward = cu_attention_forward,
    .attention_backward = cu_attention_backward,
    .swiglu_forward = cu_swiglu_forward,
    .swiglu_backward = cu_swiglu_backward,
    .swiglu_backward_set = cu_swiglu_backward_set,
    .crossentropy_forward = cu_crossentropy_forward,
    .crossentropy_backward = cu_crossentropy_backward,
    .linear_rows = cu_linear_rows,
    .qkv_split_rope_rows = cu_qkv_split_rope_rows,
    .rope_rows = cu_rope_rows,
    .attention_rows = cu_attention_rows,
    .scatter_rows = cu_scatter_rows,
    .add_forward = cu_add_forward,
    .add_inplace = cu_add_inplace,
    .scale_inplace = cu_scale_inplace,
    .repeat_rows = cu_repeat_rows,
    .sum_rows = cu_sum_rows,
    .copy_rows = cu_copy_rows,
    .uniform_fill = cu_uniform_fill,
    .binmap_forward = cu_binmap_forward,
    .binmap_kl_rows = cu_binmap_kl_rows,
    .free_bits_forward = cu_free_bits_forward,
    .free_bits_backward = cu_free_bits_backward,
    .post_sampler_forward = cu_post_sampler_forward,
    .post_sampler_backward = cu_post_sampler_backward,
    .mixer_tril = cu_mixer_tril,
    .mixer_bias_forward = cu_mixer_bias_forward,
    .mixer_bias_backward = cu_mixer_bias_backward,
    .unroll_forward = cu_unroll_forward,
    .unroll_backward = cu_unroll_backward,
    .sumsq = cu_sumsq,
    .adamw_update = cu_adamw_update,
    .attention_window_forward = cu_attention_window_forward,
    .attention_window_backward = cu_attention_window_backward,
    .latent_normal = cu_latent_normal,
    .latent_sample = cu_latent_sample,
    .latent_kl_rows = cu_latent_kl_rows,
    .latent_backward = cu_latent_backward,
    .sumsq_multi = cu_sumsq_multi,
    .adamw_update_multi = cu_adamw_update_multi,
};

extern "C" int device_cuda_open(device_t **pd, int ordinal, precision_t precision, char *err, size_t errlen) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        snprintf(err, errlen, "device cuda:%d: no CUDA device (%s)", ordinal,
                 e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports 0 GPUs");
        cudaGetLastError();
        return -1;
    }
    if (ordinal >= count) {
        snprintf(err, errlen, "device cuda:%d: this machine has %d GPU(s): cuda:0 .. cuda:%d", ordinal, count, count - 1);
        return -1;
    }
    if ((e = cudaSetDevice(ordinal)) != cudaSuccess) {
        snprintf(err, errlen, "device cuda:%d: %s", ordinal, cudaGetErrorString(e));
        return -1;
    }
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, ordinal);
    int optin = 0;
    if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, ordinal) != cudaSuccess) {
        cudaGetLastError();
        optin = 48 * 1024;
    }
    device_t *d = (device_t *)calloc(1, sizeof(*d));
    cuda_impl_t *c = (cuda_impl_t *)calloc(1, sizeof(*c));
    if (!d || !c) {
        free(d);
        free(c);
        snprintf(err, errlen, "device cuda:%d: out of host memory", ordinal);
        return -1;
    }
    c->ordinal = ordinal;
    c->smem_optin = (size_t)optin;
    if (cudaStreamCreate(&c->stream) != cudaSuccess || cublasCreate(&c->blas) != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, errlen, "device cuda:%d: cannot create a stream and a cuBLAS handle", ordinal);
        free(d);
        free(c);
        return -1;
    }
    if (cudaMalloc(&c->ce, sizeof(ce_result_t) + sizeof(double)) != cudaSuccess) {
        cudaGetLastError();
        snprintf(err, errlen, "device cuda:%d: out of device memory", ordinal);
        cublasDestroy(c->blas);
        cudaStreamDestroy(c->stream);
        free(d);
        free(c);
        return -1;
    }
    c->norm = (double *)(c->ce + 1);
    cublasSetStream(c->blas, c->stream);
    /* fp32 means fp32: the default math mode (no TF32) for cublasSgemm, whatever the
     * precision; tf32 and bf16 ask for their compute type per call (cublasGemmEx), so a
     * precision changed after opening (device_set_precision) means what it says */
    cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH);
    d->ops = &cuda_ops;
    d->kind = DEVICE_CUDA;
    d->ordinal = ordinal;
    d->precision = precision;
    d->impl = c;
    snprintf(d->name, sizeof d->name, "cuda:%d (%.80s, sm_%d%d)", ordinal, prop.name, prop.major,
             prop.minor);
    *pd = d;
    return 0;
}

extern "C" void device_cuda_close(device_t *d) {
    cuda_impl_t *c = impl_of(d);
    if (c) {
        cudaStreamSynchronize(c->stream);
        if (c->work) cudaFree(c->work);
        bf_destroy(&c->bf);
        if (c->mt_norm.dev) cudaFree(c->mt_norm.dev);
        if (c->mt_adam.dev) cudaFree(c->mt_adam.dev);
        free(c->mt_norm.host);
        free(c->mt_adam.host);
        if (c->ce) cudaFree(c->ce);
        cublasDestroy(c->blas);
        cudaStreamDestroy(c->stream);
        free(c->host_rows);
        free(c);
    }
    free(d);
}
