/* trainer/dp_impl.h: what dp.c shares with its transports (dp_mpi.c, dp_nccl.c); not for
 * other code.
 *
 * A transport implements the transfers as calls that start the library's non-blocking
 * operation and then wait through dp_wait, which polls the operation and the heartbeat's
 * verdict and enforces the time-out: so every transport has the same bounded waits and the
 * same lines. Buffers are device buffers of dp->dev (host memory for MPI); sizes in bytes. */
#ifndef TRAINER_DP_IMPL_H
#define TRAINER_DP_IMPL_H
#include "trainer/dp.h"
#include "trainer/dp_link.h"

#define DP_NCCL_ID_HEX 256 /* NCCL_UNIQUE_ID_BYTES (128) as hex */

typedef struct {
    const char *name;
    int (*attach)(dp_t *dp, char *err, size_t errlen);
    int (*alltoall)(dp_t *dp, const void *send, void *recv, size_t each, char *err, size_t errlen);
    int (*allgather)(dp_t *dp, void *buf, size_t each, char *err, size_t errlen);
    int (*gather)(dp_t *dp, void *buf, size_t each, int root, char *err, size_t errlen);
    int (*broadcast)(dp_t *dp, void *buf, size_t bytes, int root, char *err, size_t errlen);
    int (*host_allgather)(dp_t *dp, const void *mine, void *all, size_t each, char *err, size_t errlen);
    int (*host_broadcast)(dp_t *dp, void *buf, size_t bytes, int root, char *err, size_t errlen);
    /* orderly: after the last collective of a healthy group; else abandon (abort) */
    void (*close)(dp_t *dp, int orderly);
} dp_transport_t;

struct dp {
    dp_opts_t o;
    int rank, world;
    device_t *dev;
    dp_link_t *link;
    const dp_transport_t *tr;
    void *trs;                 /* the transport's state */
    int mpi_up;                /* dp_mpi.c initialised MPI */
    char nccl_id[DP_NCCL_ID_HEX + 1];
    int broken;
    long long step;
    const char *what;          /* the collective in flight, for messages */
};

/* Polls test(arg) until it says done, the heartbeat reports a lost rank (DP_ELOST) or the
 * time-out passes (DP_ETIMEOUT): one line in err naming the collective, the step and the rank.
 * test returns 0 (done set) or a DP_E* status with err set. */
typedef int (*dp_test_fn)(void *arg, int *done, char *err, size_t errlen);
int dp_wait(dp_t *dp, dp_test_fn test, void *arg, char *err, size_t errlen);

extern const dp_transport_t dp_transport_mpi, dp_transport_nccl;

/* MPI as the bootstrap (dp_mpi.c): MPI_Init, rank and size; rank 0's string (the heartbeat
 * endpoint, the NCCL id) to every rank; whether every rank runs on this machine. */
int dp_mpi_init(dp_t *dp, char *err, size_t errlen);
int dp_mpi_bcast_str(dp_t *dp, char *buf, size_t cap, char *err, size_t errlen);
int dp_mpi_one_host(dp_t *dp);
void dp_mpi_finalize(dp_t *dp, int orderly);
/* NCCL's unique id as hex (dp_nccl.c): rank 0 makes it, the others receive it. */
int dp_nccl_unique_id(char hex[DP_NCCL_ID_HEX + 1], char *err, size_t errlen);
#endif
