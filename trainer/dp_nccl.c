/* trainer/dp_nccl.c: NCCL as the transport between GPU ranks (see dp.h, dp_impl.h).
 *
 * A non-blocking communicator (ncclConfig_t.blocking = 0) on a stream of its own: every
 * operation is enqueued, then dp_wait polls ncclCommGetAsyncError and the stream, so a lost
 * or stuck rank ends the wait with a line and ncclCommAbort frees the GPU instead of a hang.
 * Before each operation the device's own queue is drained (DEV sync), so the buffers hold
 * what the model wrote; after it the stream is complete, so the next device op reads the
 * result. Host values (the step records) travel through a small device buffer.
 *
 * The all-to-all is grouped ncclSend/ncclRecv (the rank's own piece a device copy): copies
 * only, so dp.c's sum in rank order decides every bit (never ncclAllReduce's ring or tree).
 *
 * Compiled wherever nvcc is found (FT_HAVE_CUDA), linked with -lnccl; without it every entry
 * says the build has no NCCL. No GPU has been available to this project: this code runs on the
 * execution-model emulator's NCCL (tests/it_emu_dp.sh: 2 emulated ranks against one device,
 * its stream order checked), never yet on GPUs (make test-gpu runs it where GPUs exist). */
#include "trainer/dp_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errmsg.h"

#ifdef FT_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <nccl.h>

typedef struct {
    ncclComm_t comm;
    cudaStream_t stream;
    void *stage;         /* device buffer for host values */
    size_t stage_bytes;
    int ordinal;
} nccl_state_t;

_Static_assert(sizeof(ncclUniqueId) * 2 == DP_NCCL_ID_HEX, "the id's hex length");

static int nccl_fail(ncclResult_t r, const nccl_state_t *s, char *err, size_t errlen, const char *call) {
    const char *last = s && s->comm ? ncclGetLastError(s->comm) : NULL;
    return err_fail(err, errlen, DP_EFAULT, "%s: %s%s%s", call, ncclGetErrorString(r), last && *last ? ": " : "",
                    last ? last : "");
}

static int cuda_fail(cudaError_t e, char *err, size_t errlen, const char *call) {
    return err_fail(err, errlen, DP_EFAULT, "%s: %s", call, cudaGetErrorString(e));
}

int dp_nccl_unique_id(char hex[DP_NCCL_ID_HEX + 1], char *err, size_t errlen) {
    ncclUniqueId id;
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) return nccl_fail(r, NULL, err, errlen, "ncclGetUniqueId");
    for (size_t i = 0; i < sizeof id.internal; i++) snprintf(hex + 2 * i, 3, "%02x", (unsigned char)id.internal[i]);
    return 0;
}

static int id_from_hex(const char *hex, ncclUniqueId *id) {
    if (strlen(hex) != DP_NCCL_ID_HEX) return -1;
    for (size_t i = 0; i < sizeof id->internal; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1) return -1;
        id->internal[i] = (char)v;
    }
    return 0;
}

/* The communicator's state has left ncclInProgress: initialised, finalized, or (for an
 * operation) done enqueueing. */
static int test_ready(void *arg, int *done, char *err, size_t errlen) {
    nccl_state_t *s = arg;
    ncclResult_t a = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(s->comm, &a);
    if (r != ncclSuccess) return nccl_fail(r, s, err, errlen, "ncclCommGetAsyncError");
    if (a == ncclInProgress) return 0;
    if (a != ncclSuccess) return nccl_fail(a, s, err, errlen, "NCCL communicator");
    *done = 1;
    return 0;
}

/* An operation: enqueued (test_ready) and its stream idle. */
static int test_stream(void *arg, int *done, char *err, size_t errlen) {
    nccl_state_t *s = arg;
    int ready = 0, rc = test_ready(arg, &ready, err, errlen);
    if (rc || !ready) return rc;
    cudaError_t e = cudaStreamQuery(s->stream);
    if (e == cudaErrorNotReady) return 0;
    if (e != cudaSuccess) return cuda_fail(e, err, errlen, "cudaStreamQuery");
    *done = 1;
    return 0;
}

void device_cuda_settle(device_t *d); /* model/device_cuda.cu */

/* The device's queue drained (the model's kernels wrote the buffers), this GPU current. NCCL
 * reads the buffers outside the device's ops, so the writes the device defers (device_cuda.cu's
 * deferred zeros: a gradient no op wrote this step still owes its zeros) are done first. */
static int before(dp_t *dp, char *err, size_t errlen) {
    nccl_state_t *s = dp->trs;
    device_cuda_settle(dp->dev);
    if (DEV(dp->dev, sync, err, errlen)) return DP_EFAULT;
    cudaError_t e = cudaSetDevice(s->ordinal);
    return e == cudaSuccess ? 0 : cuda_fail(e, err, errlen, "cudaSetDevice");
}

/* rc: the status of the enqueueing call (ncclInProgress is fine for a non-blocking comm). */
static int wait_for(dp_t *dp, ncclResult_t rc, const char *call, char *err, size_t errlen) {
    nccl_state_t *s = dp->trs;
    if (rc != ncclSuccess && rc != ncclInProgress) {
        dp->broken = 1;
        return nccl_fail(rc, s, err, errlen, call);
    }
    return dp_wait(dp, test_stream, s, err, errlen);
}

static void close_transport(dp_t *dp, int orderly) {
    nccl_state_t *s = dp->trs;
    if (!s) return;
    cudaSetDevice(s->ordinal);
    if (s->comm) {
        char e[256];
        ncclResult_t r = orderly ? ncclCommFinalize(s->comm) : ncclInternalError;
        if ((r == ncclSuccess || r == ncclInProgress) && dp_wait(dp, test_ready, s, e, sizeof e) == 0)
            ncclCommDestroy(s->comm);
        else
            ncclCommAbort(s->comm); /* a lost peer (or a finalize that did not finish): frees what waits */
    }
    if (s->stage) cudaFree(s->stage);
    if (s->stream) cudaStreamDestroy(s->stream);
    free(s);
    dp->trs = NULL;
}

static int attach(dp_t *dp, char *err, size_t errlen) {
    nccl_state_t *s = calloc(1, sizeof *s);
    if (!s) return err_fail(err, errlen, DP_ENOMEM, "out of memory");
    dp->trs = s;
    s->ordinal = dp->dev->ordinal;
    ncclUniqueId id;
    if (id_from_hex(dp->nccl_id, &id))
        return err_fail(err, errlen, DP_ESETUP, "rank %d has no valid NCCL id from rank 0", dp->rank);
    cudaError_t e = cudaSetDevice(s->ordinal);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) return cuda_fail(e, err, errlen, "cudaSetDevice/cudaStreamCreate");
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&s->comm, dp->world, id, dp->rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) return nccl_fail(r, s, err, errlen, "ncclCommInitRankConfig");
    return dp_wait(dp, test_ready, s, err, errlen);
}

static int alltoall(dp_t *dp, const void *send, void *recv, size_t each, char *err, size_t errlen) {
    nccl_state_t *s = dp->trs;
    int rc = before(dp, err, errlen);
    if (rc) return rc;
    const char *in = send;
    char *out = recv;
    cudaError_t e = cudaMemcpyAsync(out + (size_t)dp->rank * each, in + (size_t)dp->rank * each, each,
                                    cudaMemcpyDeviceToDevice, s->stream);
    if (e != cudaSuccess) return cuda_fail(e, err, errlen, "cudaMemcpyAsync");
    ncclResult_t r = ncclGroupStart();
    for (int p = 0; p < dp->world && (r == ncclSuccess || r == ncclInProgress); p++) {
        if (p == dp->rank) continue;
        r = ncclSend(in + (size_t)p * each, each, ncclChar, p, s->comm, s->stream);
        if (r == ncclSuccess || r == ncclInProgress) r = ncclRecv(out + (size_t)p * each, each, ncclChar, p, s->comm, s->stream);
    }
    ncclResult_t g = ncclGroupEnd();
    return wait_for(dp, r != ncclSuccess && r != ncclInProgress ? r : g, "ncclSend/ncclRecv", err, errlen);
}

static int allgather(dp_t *dp, void *buf, size_t each, char *err, size_t errlen) {
    nccl_state_t *s = dp->trs;
    int rc = before(dp, err, errlen);
    if (rc) return rc;
    char *b = buf;
    ncclResult_t r = ncclAllGather(b + (size_t)dp->rank * each, b, each, ncclChar, s->comm, s->stream); /* in place */
    return wait_for(dp, r, "ncclAllGather", err, errlen);
}

static int gather(dp_t *dp, void *buf, size_t each, int root, char *err, size_t errlen) {
    nccl_state_t *s = dp->trs;
    int rc = before(dp, err, errlen);
    if (rc) return rc;
    char *b = buf;
    ncclResult_t r = ncclGroupStart();
    if (dp->rank == root) {
        for (int p = 0; p < dp->world && (r == ncclSuccess || r == ncclInProgress); p++)
            if (p != root) r = ncclRecv(b + (size_t)p * each, each, ncclChar, p, s->comm, s->stream);
    } else if (r == ncclSuccess || r == ncclInProgress) {
        r = ncclSend(b + (size_t)dp->rank * each, each, ncclChar, root, s->comm, s->stream);
    }
    ncclResult_t g = ncclGroupEnd();
    return wait_for(dp, r != ncclSuccess && r != ncclInProgress ? r : g, "ncclSend/ncclRecv (gather)", err, errlen);
}

static int broadcast(dp_t *dp, void *buf, size_t bytes, int root, char *err, size_t errlen) {
    nccl_state_t *s = dp->trs;
    int rc = before(dp, err, errlen);
    if (rc) return rc;
    ncclResult_t r = ncclBroadcast(buf, buf, bytes, ncclChar, root, s->comm, s->stream);
    return wait_for(dp, r, "ncclBroadcast", err, errlen);
}

static int stage_reserve(nccl_state_t *s, size_t bytes, char *err, size_t errlen) {
    if (bytes <= s->stage_bytes) return 0;
    if (s->stage) cudaFree(s->stage);
    s->stage = NULL, s->stage_bytes = 0;
    cudaError_t e = cudaMalloc(&s->stage, bytes);
    if (e != cudaSuccess) return cuda_fail(e, err, errlen, "cudaMalloc (host values' buffer)");
    s->stage_bytes = bytes;
    return 0;
}

/* Host values cross through the stage buffer on the transport's own stream, in order with the
 * collective. A synchronous cudaMemcpy from pageable memory runs on the legacy default stream,
 * which the non-blocking NCCL stream does not wait for, and returns before the copy has reached
 * the device: the collective could read the stage before the value arrived (the emulator
 * reports it as a stream race: tests/it_emu_dp.sh). */
static int stage_in(nccl_state_t *s, void *dst, const void *src, size_t n, char *err, size_t errlen) {
    cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, s->stream);
    return e == cudaSuccess ? 0 : cuda_fail(e, err, errlen, "cudaMemcpyAsync (host value to the stage)");
}
static int stage_out(nccl_state_t *s, void *dst, const void *src, size_t n, char *err, size_t errlen) {
    cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, s->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s->stream);
    return e == cudaSuccess ? 0 : cuda_fail(e, err, errlen, "cudaMemcpyAsync (stage to host)");
}

static int host_allgather(dp_t *dp, const void *mine, void *all, size_t each, char *err, size_t errlen) {
    nccl_state_t *s = dp->trs;
    int rc = stage_reserve(s, each * (size_t)dp->world, err, errlen);
    if (rc) return rc;
    char *st = s->stage;
    if ((rc = stage_in(s, st + (size_t)dp->rank * each, mine, each, err, errlen))) return rc;
    if ((rc = allgather(dp, st, each, err, errlen))) return rc;
    return stage_out(s, all, st, each * (size_t)dp->world, err, errlen);
}

static int host_broadcast(dp_t *dp, void *buf, size_t bytes, int root, char *err, size_t errlen) {
    nccl_state_t *s = dp->trs;
    int rc = stage_reserve(s, bytes, err, errlen);
    if (rc) return rc;
    if ((rc = stage_in(s, s->stage, buf, bytes, err, errlen))) return rc;
    if ((rc = broadcast(dp, s->stage, bytes, root, err, errlen))) return rc;
    return stage_out(s, buf, s->stage, bytes, err, errlen);
}

const dp_transport_t dp_transport_nccl = {
    .name = "nccl",
    .attach = attach,
    .alltoall = alltoall,
    .allgather = allgather,
    .gather = gather,
    .broadcast = broadcast,
    .host_allgather = host_allgather,
    .host_broadcast = host_broadcast,
    .close = close_transport,
};

#else /* no CUDA toolkit at build time */

#define NO_NCCL "this build has no NCCL (nvcc and the CUDA toolkit were not found when it was built)"

int dp_nccl_unique_id(char hex[DP_NCCL_ID_HEX + 1], char *err, size_t errlen) {
    return err_fail(err, errlen, DP_ESETUP, "%s", NO_NCCL);
}
static int attach(dp_t *dp, char *err, size_t errlen) { return err_fail(err, errlen, DP_ESETUP, "%s", NO_NCCL); }
const dp_transport_t dp_transport_nccl = {.name = "nccl", .attach = attach};
#endif
