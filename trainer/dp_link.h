/* trainer/dp_link.h: how the ranks of a data-parallel run meet, and how each learns that
 * another is gone (docs/PROTOCOL.md §1.5).
 *
 * Rank 0 binds a ROUTER (the rendezvous); every other rank connects a DEALER, says `dp_hello`
 * (run, rank, world, host, pid and the flags every rank must share) and waits. When all W-1
 * have come and agree, rank 0 answers each with `dp_welcome` (the NCCL unique id when the
 * collectives are NCCL's). A hello of another run is refused and waited past; one that
 * disagrees with the group (world, flags, a rank taken twice) ends the rendezvous on every
 * rank with one line naming the difference.
 *
 * Then a thread per rank keeps the heartbeat on the same sockets: every beat interval
 * (lost_after/5, within 50 ms .. 1 s) each rank sends `dp_beat` to rank 0 and rank 0 sends one
 * to each rank. A rank is lost when
 *   - its connection closes without a `bye` (the process ended: found through a
 *     socket monitor, within 0.25 s: a bye can reach the socket just after the monitor sees
 *     the close), or
 *   - nothing came from it for lost_after_s (a machine lost, a process stopped).
 * Rank 0 judges the others and tells every rank the verdict in its next beats, sent at once;
 * the others judge rank 0 themselves. The first verdict stands (dp_link_lost). A rank that
 * ends in order sends a beat with `bye` first, so its closing is no loss. */
#ifndef TRAINER_DP_LINK_H
#define TRAINER_DP_LINK_H
#include <signal.h>
#include <stddef.h>

#define DP_LINK_EP_LEN 512

typedef struct {
    int rank, world;
    const char *run;         /* run name */
    const char *flags;       /* what every rank must agree on */
    const char *nccl_id;     /* rank 0: sent in every welcome ("" when none) */
    double timeout_s;        /* the rendezvous waits at most this long */
    double lost_after_s;
    volatile sig_atomic_t *stop; /* optional: the rendezvous gives up when *stop */
    void *zctx;
} dp_link_cfg_t;

typedef struct dp_link dp_link_t;

/* Rank 0 binds `endpoint` (a port "*" picks a free one) and writes the endpoint the others
 * connect to in `bound` (a wildcard host replaced by this machine's name); the others only
 * make their socket. Status 0 or a DP_E* code (trainer/dp.h). */
int dp_link_create(dp_link_t **l, const dp_link_cfg_t *cfg, const char *endpoint, char *bound, size_t cap,
                   char *err, size_t errlen);
/* The rendezvous: rank 0 waits for every hello and welcomes; another rank connects to
 * `endpoint`, says hello and waits for its welcome, whose NCCL id lands in nccl_id (may be
 * NULL). Starts the heartbeat thread. */
int dp_link_join(dp_link_t *l, const char *endpoint, char *nccl_id, size_t cap, char *err, size_t errlen);
/* -1 while every rank is alive; else the lost rank, with how it was found in why. */
int dp_link_lost(dp_link_t *l, char *why, size_t cap);
/* Seconds since rank `r` was last heard from (rank 0: any rank; others: only 0), for
 * time-out messages; -1 when unknown. */
double dp_link_silence(dp_link_t *l, int r);
void dp_link_set_step(dp_link_t *l, long long step);
/* Stops the heartbeat. orderly (the run ended on every rank): first says bye, so the closing
 * is no loss. Otherwise, with why: this rank stops alone and tells rank 0 (rank 0: every rank)
 * why, so the others' line says it instead of only "connection closed". */
void dp_link_close(dp_link_t **l, int orderly, const char *why);
#endif
