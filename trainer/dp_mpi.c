/* trainer/dp_mpi.c: MPI as the bootstrap (rank, size, rank 0's strings) and as the transport
 * between CPU ranks (see dp.h, dp_impl.h). Every transfer is MPI's non-blocking form, polled by
 * dp_wait, so a lost rank or a stuck one ends the wait with a line instead of a hang; errors
 * come back as codes (MPI_ERRORS_RETURN), never as MPI's abort. Only the main thread calls MPI
 * (MPI_THREAD_FUNNELED). A build without Open MPI's headers (FT_HAVE_MPI unset) keeps the
 * entry points, each saying so. */
#include "trainer/dp_impl.h"

#include <limits.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "common/errmsg.h"

#ifdef FT_HAVE_MPI
#include <mpi.h>

typedef struct {
    MPI_Comm comm;
} mpi_state_t;

static int mpi_fail(int code, char *err, size_t errlen, const char *call) {
    char s[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(code, s, &n) != MPI_SUCCESS) snprintf(s, sizeof s, "error %d", code);
    return err_fail(err, errlen, DP_EFAULT, "%s: %s", call, s);
}

static int test_request(void *arg, int *done, char *err, size_t errlen) {
    int flag = 0, rc = MPI_Test((MPI_Request *)arg, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, err, errlen, "MPI_Test");
    *done = flag;
    return 0;
}

/* Starts nothing itself: waits for the request `start` returned (rc its status). */
static int finish(dp_t *dp, int rc, MPI_Request *q, const char *call, char *err, size_t errlen) {
    if (rc != MPI_SUCCESS) {
        dp->broken = 1;
        return mpi_fail(rc, err, errlen, call);
    }
    return dp_wait(dp, test_request, q, err, errlen);
}

/* Byte counts as MPI's int counts: floats when they divide by 4 (2^31 floats is 8 GiB). */
static int count_of(size_t bytes, int *count, MPI_Datatype *type, char *err, size_t errlen) {
    size_t n = bytes % 4 ? bytes : bytes / 4;
    *type = bytes % 4 ? MPI_BYTE : MPI_FLOAT;
    if (n > INT_MAX) return err_fail(err, errlen, DP_EARG, "a transfer of %zu bytes is too large for one MPI call", bytes);
    *count = (int)n;
    return 0;
}

static MPI_Comm comm_of(dp_t *dp) { return dp->trs ? ((mpi_state_t *)dp->trs)->comm : MPI_COMM_WORLD; }

int dp_mpi_init(dp_t *dp, char *err, size_t errlen) {
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
        if (rc != MPI_SUCCESS) return mpi_fail(rc, err, errlen, "MPI_Init_thread");
        dp->mpi_up = 1;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &dp->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &dp->world);
    return 0;
}

int dp_mpi_bcast_str(dp_t *dp, char *buf, size_t cap, char *err, size_t errlen) {
    MPI_Request q;
    if (cap > INT_MAX) return err_fail(err, errlen, DP_EARG, "string buffer too large");
    int rc = MPI_Ibcast(buf, (int)cap, MPI_CHAR, 0, MPI_COMM_WORLD, &q);
    rc = finish(dp, rc, &q, "MPI_Ibcast", err, errlen);
    buf[cap - 1] = 0;
    return rc;
}

int dp_mpi_one_host(dp_t *dp) {
    MPI_Comm local;
    int n = 0;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local) != MPI_SUCCESS) return 0;
    MPI_Comm_size(local, &n);
    MPI_Comm_free(&local);
    int all = 0, one = n == dp->world;
    MPI_Allreduce(&one, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD); /* every rank must agree */
    return all;
}

void dp_mpi_finalize(dp_t *dp, int orderly) {
    /* a broken group cannot finalize (it waits for the lost rank): the process _exits */
    if (orderly) MPI_Finalize();
    dp->mpi_up = 0;
}

static int attach(dp_t *dp, char *err, size_t errlen) {
    mpi_state_t *s = calloc(1, sizeof *s);
    if (!s) return err_fail(err, errlen, DP_ENOMEM, "out of memory");
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &s->comm);
    if (rc != MPI_SUCCESS) {
        free(s);
        return mpi_fail(rc, err, errlen, "MPI_Comm_dup");
    }
    MPI_Comm_set_errhandler(s->comm, MPI_ERRORS_RETURN);
    dp->trs = s;
    return 0;
}

static int alltoall(dp_t *dp, const void *send, void *recv, size_t each, char *err, size_t errlen) {
    int n = 0, rc;
    MPI_Datatype t;
    MPI_Request q;
    if ((rc = count_of(each, &n, &t, err, errlen))) return rc;
    rc = MPI_Ialltoall(send, n, t, recv, n, t, comm_of(dp), &q);
    return finish(dp, rc, &q, "MPI_Ialltoall", err, errlen);
}

static int allgather(dp_t *dp, void *buf, size_t each, char *err, size_t errlen) {
    int n = 0, rc;
    MPI_Datatype t;
    MPI_Request q;
    if ((rc = count_of(each, &n, &t, err, errlen))) return rc;
    rc = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, n, t, comm_of(dp), &q);
    return finish(dp, rc, &q, "MPI_Iallgather", err, errlen);
}

static int gather(dp_t *dp, void *buf, size_t each, int root, char *err, size_t errlen) {
    int n = 0, rc;
    MPI_Datatype t;
    MPI_Request q;
    if ((rc = count_of(each, &n, &t, err, errlen))) return rc;
    char *mine = (char *)buf + (size_t)dp->rank * each;
    if (dp->rank == root)
        rc = MPI_Igather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, n, t, root, comm_of(dp), &q);
    else
        rc = MPI_Igather(mine, n, t, NULL, 0, t, root, comm_of(dp), &q);
    return finish(dp, rc, &q, "MPI_Igather", err, errlen);
}

static int broadcast(dp_t *dp, void *buf, size_t bytes, int root, char *err, size_t errlen) {
    int n = 0, rc;
    MPI_Datatype t;
    MPI_Request q;
    if ((rc = count_of(bytes, &n, &t, err, errlen))) return rc;
    rc = MPI_Ibcast(buf, n, t, root, comm_of(dp), &q);
    return finish(dp, rc, &q, "MPI_Ibcast", err, errlen);
}

static int host_allgather(dp_t *dp, const void *mine, void *all, size_t each, char *err, size_t errlen) {
    int n = 0, rc;
    MPI_Datatype t;
    MPI_Request q;
    if ((rc = count_of(each, &n, &t, err, errlen))) return rc;
    rc = MPI_Iallgather(mine, n, t, all, n, t, comm_of(dp), &q);
    return finish(dp, rc, &q, "MPI_Iallgather", err, errlen);
}

static void close_transport(dp_t *dp, int orderly) {
    mpi_state_t *s = dp->trs;
    if (s && orderly) MPI_Comm_free(&s->comm);
    free(s);
    dp->trs = NULL;
}

const dp_transport_t dp_transport_mpi = {
    .name = "mpi",
    .attach = attach,
    .alltoall = alltoall,
    .allgather = allgather,
    .gather = gather,
    .broadcast = broadcast,
    .host_allgather = host_allgather,
    .host_broadcast = broadcast, /* host memory either way */
    .close = close_transport,
};

#else /* no MPI in this build */

#define NO_MPI "this build has no MPI (Open MPI's headers were not found when it was built: make deps, then make)"

int dp_mpi_init(dp_t *dp, char *err, size_t errlen) { return err_fail(err, errlen, DP_ESETUP, "%s", NO_MPI); }
int dp_mpi_bcast_str(dp_t *dp, char *buf, size_t cap, char *err, size_t errlen) {
    return err_fail(err, errlen, DP_ESETUP, "%s", NO_MPI);
}
int dp_mpi_one_host(dp_t *dp) { return 1; }
void dp_mpi_finalize(dp_t *dp, int orderly) { dp->mpi_up = 0; }
static int attach(dp_t *dp, char *err, size_t errlen) { return err_fail(err, errlen, DP_ESETUP, "%s", NO_MPI); }
const dp_transport_t dp_transport_mpi = {.name = "mpi", .attach = attach};
#endif
