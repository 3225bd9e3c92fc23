/* trainer/dp.h: collectives between the ranks (processes) of a data-parallel training run.
 *
 * One interface, two implementations of the transfers: MPI (Open MPI) between CPU processes,
 * whose device buffers are host memory, and NCCL between GPUs (CUDA device buffers). How the
 * ranks find each other is separate from that (the bootstrap):
 *   - under mpirun: rank and world size are MPI's; rank 0 opens a heartbeat socket and hands
 *     its address to the others with an MPI broadcast;
 *   - launched by hand (--rank R --world W --rendezvous tcp://HOST:PORT): rank 0 binds the
 *     rendezvous, every other rank says hello there, rank 0 answers each with the NCCL unique
 *     id (docs/PROTOCOL.md §1.5); the same sockets then carry the heartbeats.
 * Either way every rank keeps a heartbeat with rank 0 (trainer/dp_link.h).
 *
 * Determinism. No collective here lets a library add floats. A sum over the ranks
 * (dp_reduce_scatter) is an all-to-all that only copies (rank j receives shard j of every
 * rank's buffer) followed by rank j adding the W pieces in rank order 0, 1, ..., W-1 with the
 * device's add op; all-gather, gather and broadcast copy. So the owner of a shard computes
 * ((g_0 + g_1) + g_2) + ..., every rank ends up with the owner's bits, and the bits depend only
 * on the inputs and W: not on the library's algorithm (MPI_Allreduce's recursive doubling can
 * give ranks different bits), the network or the timing. A resumed run therefore continues
 * bit for bit with the same world size.
 *
 * Bounded waits. Every collective polls its completion, and gives up with one line in err:
 *   - DP_ELOST when a rank is lost: its heartbeat connection closed (a killed process) or it
 *     was silent for lost_after_s (a lost machine); the line names the rank;
 *   - DP_ETIMEOUT when it did not complete within timeout_s (every rank alive, one stuck).
 * After either the group is broken (dp_broken): no further collective runs, and the program
 * must end without an orderly close (MPI cannot finalize with a lost peer; its exit handlers
 * crash): main() calls _exit.
 *
 * All functions return DP_OK (0) or a negative DP_E* status with one line in err. */
#ifndef TRAINER_DP_H
#define TRAINER_DP_H
#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "model/device.h"

typedef enum { DP_NONE = 0, DP_MPI = 1, DP_NCCL = 2 } dp_kind;

enum {
    DP_OK = 0,
    DP_EARG = -1,     /* a bad option or combination (rank >= world, mpi on a GPU, ...) */
    DP_ESETUP = -2,   /* the group could not be formed (no MPI or NCCL in this build, a refused
                         rendezvous, a rank with other flags) */
    DP_ELOST = -3,    /* a rank was lost */
    DP_ETIMEOUT = -4, /* a collective did not complete in time */
    DP_EFAULT = -5,   /* MPI, NCCL or the device reported an error */
    DP_ENOMEM = -6,
};

typedef struct {
    dp_kind kind;
    int rank, world;          /* -1: the launcher's (mpirun) */
    const char *rendezvous;   /* tcp://HOST:PORT that rank 0 binds (NULL under mpirun: an
                                 ephemeral port on loopback, or on rank 0's host name when
                                 the ranks span machines) */
    const char *run;          /* ranks of another run are refused at the rendezvous */
    const char *flags;        /* the options every rank must share, as text ("B=4 T=64 ...") */
    double timeout_s;         /* bound on every collective and on the rendezvous */
    double lost_after_s;      /* heartbeat silence that makes a rank lost */
    void *zctx;               /* the ZeroMQ context for the heartbeat sockets */
} dp_opts_t;

typedef struct dp dp_t;

/* "mpi", "nccl" or "none" (also "" and NULL) -> kind; -1 for anything else. */
int dp_kind_parse(const char *name, dp_kind *kind);
const char *dp_kind_name(dp_kind kind);
/* The world size mpirun gave this process (0 when not launched by mpirun), and its rank on
 * its machine (-1 when unknown): a GPU rank takes the GPU of its local rank. */
int dp_launcher_world(void);
int dp_launcher_local_rank(void);

/* Forms the group: the bootstrap (MPI or the rendezvous) and the heartbeat. Blocks until every
 * rank has joined, at most timeout_s. */
int dp_open(dp_t **dp, const dp_opts_t *o, char *err, size_t errlen);
/* Sets up the transfers on the device the ranks train on (MPI: the CPU device; NCCL: a CUDA
 * device, one per rank). Before any collective. */
int dp_attach(dp_t *dp, device_t *dev, char *err, size_t errlen);
int dp_rank(const dp_t *dp);
int dp_world(const dp_t *dp);
dp_kind dp_get_kind(const dp_t *dp);
/* The optimizer step the ranks are at, for heartbeats and messages. */
void dp_set_step(dp_t *dp, long long step);
/* 1 once a collective failed (lost rank, time-out, library error): see the header comment. */
int dp_broken(const dp_t *dp);
/* Ends this rank's part. alone NULL on a healthy group: the orderly end, every rank calls it
 * after the last collective (a bye to rank 0, MPI_Finalize, the NCCL communicator finalized).
 * alone = a reason: this rank stops by itself (a failure the others did not share); rank 0,
 * and through it every rank, learns the reason at once and stops with it. A broken group is
 * released locally. Returns 1 when MPI was left unfinalized (alone or broken): the program
 * must then end with _exit, since Open MPI's exit handlers crash without MPI_Finalize. */
int dp_close(dp_t **dp, const char *alone);

/* ---- collectives on buffers of the attached device (float counts; W = world) ---------- */
/* buf holds W shards of `shard` floats; afterwards shard `rank` of buf holds the sum over
 * the ranks of their shard `rank`, added in rank order (the header comment). scratch: W*shard
 * floats on the device. The other shards of buf are left as they were. */
int dp_reduce_scatter(dp_t *dp, float *buf, float *scratch, size_t shard, char *err, size_t errlen);
/* In place: shard r of buf comes from rank r, for every r. */
int dp_allgather(dp_t *dp, float *buf, size_t shard, char *err, size_t errlen);
/* In place: root receives shard r of buf from rank r (the other ranks' buf is unchanged). */
int dp_gather(dp_t *dp, float *buf, size_t shard, int root, char *err, size_t errlen);
/* In place: n floats of root's buf to every rank. */
int dp_broadcast(dp_t *dp, float *buf, size_t n, int root, char *err, size_t errlen);

/* ---- small host values (step records, checksums, the gradient norm's partial sums) ----- */
/* all[r*bytes ...] = rank r's `mine`, for every r. */
int dp_host_allgather(dp_t *dp, const void *mine, void *all, size_t bytes, char *err, size_t errlen);
int dp_host_broadcast(dp_t *dp, void *buf, size_t bytes, int root, char *err, size_t errlen);
#endif
