/* trainer/dp.c: the group, the bounded wait, and the sums in rank order (see dp.h). */
#include "trainer/dp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/errmsg.h"
#include "common/progress.h"
#include "trainer/dp_impl.h"


int dp_kind_parse(const char *name, dp_kind *kind) {
    if (!name || !*name || !strcmp(name, "none")) *kind = DP_NONE;
    else if (!strcmp(name, "mpi")) *kind = DP_MPI;
    else if (!strcmp(name, "nccl")) *kind = DP_NCCL;
    else return -1;
    return 0;
}

const char *dp_kind_name(dp_kind k) { return k == DP_MPI ? "mpi" : k == DP_NCCL ? "nccl" : "none"; }

static int env_int(const char *const *names, int dflt) {
    for (int i = 0; names[i]; i++) {
        const char *v = getenv(names[i]);
        if (v && *v) return atoi(v);
    }
    return dflt;
}

/* Open MPI's variables first; PMI_* / MPI_LOCALRANKID are MPICH's (Hydra). */
int dp_launcher_world(void) {
    static const char *const names[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", NULL};
    return env_int(names, 0);
}

int dp_launcher_local_rank(void) {
    static const char *const names[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", NULL};
    return env_int(names, -1);
}

int dp_rank(const dp_t *dp) { return dp->rank; }
int dp_world(const dp_t *dp) { return dp->world; }
dp_kind dp_get_kind(const dp_t *dp) { return dp->o.kind; }
int dp_broken(const dp_t *dp) { return dp && dp->broken; }

void dp_set_step(dp_t *dp, long long step) {
    dp->step = step;
    dp_link_set_step(dp->link, step);
}

/* ---- forming the group ------------------------------------------------------------------------ */

static dp_link_cfg_t link_cfg(const dp_t *dp, const char *nccl_id) {
    return (dp_link_cfg_t){.rank = dp->rank, .world = dp->world, .run = dp->o.run, .flags = dp->o.flags,
                           .nccl_id = nccl_id, .timeout_s = dp->o.timeout_s, .lost_after_s = dp->o.lost_after_s,
                           .zctx = dp->o.zctx};
}

/* mpirun gave rank and size; rank 0's heartbeat endpoint goes to the others by MPI. */
static int open_under_mpi(dp_t *dp, char *err, size_t errlen) {
    int rc = dp_mpi_init(dp, err, errlen);
    if (rc) return rc;
    if ((dp->o.rank >= 0 && dp->o.rank != dp->rank) || (dp->o.world > 0 && dp->o.world != dp->world))
        return err_fail(err, errlen, DP_EARG, "--rank %d --world %d, but mpirun made this rank %d of %d", dp->o.rank,
                        dp->o.world, dp->rank, dp->world);
    if (dp->world == 1) return 0;
    int one_host = dp_mpi_one_host(dp);
    char ep[DP_LINK_EP_LEN] = "";
    if (dp->rank == 0) {
        rc = dp->o.kind == DP_NCCL ? dp_nccl_unique_id(dp->nccl_id, err, errlen) : 0;
        dp_link_cfg_t c = link_cfg(dp, dp->nccl_id);
        const char *bind = dp->o.rendezvous ? dp->o.rendezvous : one_host ? "tcp://127.0.0.1:*" : "tcp://*:*";
        if (!rc) rc = dp_link_create(&dp->link, &c, bind, ep, sizeof ep, err, errlen);
        if (rc) ep[0] = 0; /* the others learn that rank 0 failed, and stop */
    }
    int brc = dp_mpi_bcast_str(dp, ep, sizeof ep, err, errlen);
    if (rc || brc) return rc ? rc : brc;
    if (!ep[0]) return err_fail(err, errlen, DP_ESETUP, "rank 0 could not open its heartbeat socket (its own line says why)");
    if (dp->rank != 0) {
        dp_link_cfg_t c = link_cfg(dp, "");
        if ((rc = dp_link_create(&dp->link, &c, NULL, NULL, 0, err, errlen))) return rc;
    }
    return dp_link_join(dp->link, ep, dp->nccl_id, sizeof dp->nccl_id, err, errlen);
}

/* --rank/--world given, rank 0 binds --rendezvous and hands out the NCCL id there. */
static int open_by_hand(dp_t *dp, char *err, size_t errlen) {
    dp->rank = dp->o.rank < 0 ? 0 : dp->o.rank;
    dp->world = dp->o.world <= 0 ? 1 : dp->o.world;
    if (dp->rank >= dp->world) return err_fail(err, errlen, DP_EARG, "--rank %d is not below --world %d", dp->rank, dp->world);
    int rc = 0;
    if (dp->rank == 0 && dp->o.kind == DP_NCCL && (rc = dp_nccl_unique_id(dp->nccl_id, err, errlen))) return rc;
    if (dp->world == 1) return 0;
    if (!dp->o.rendezvous)
        return err_fail(err, errlen, DP_EARG, "--world %d without mpirun needs --rendezvous tcp://HOST:PORT (rank 0's host)",
                        dp->world);
    dp_link_cfg_t c = link_cfg(dp, dp->nccl_id);
    char bound[DP_LINK_EP_LEN];
    if ((rc = dp_link_create(&dp->link, &c, dp->o.rendezvous, bound, sizeof bound, err, errlen))) return rc;
    return dp_link_join(dp->link, dp->o.rendezvous, dp->nccl_id, sizeof dp->nccl_id, err, errlen);
}

int dp_open(dp_t **out, const dp_opts_t *o, char *err, size_t errlen) {
    *out = NULL;
    if (o->kind == DP_NONE) return err_fail(err, errlen, DP_EARG, "dp_open without a kind");
    dp_t *dp = calloc(1, sizeof *dp);
    if (!dp) return err_fail(err, errlen, DP_ENOMEM, "out of memory");
    dp->o = *o;
    dp->what = "the rendezvous";
    int launched = dp_launcher_world() > 0;
    int rc;
    if (o->kind == DP_MPI && o->rendezvous && !launched)
        rc = err_fail(err, errlen, DP_EARG, "--dp mpi takes its ranks from mpirun (mpirun -np W bin/trainer --dp mpi ...); "
                      "--rendezvous by hand is for --dp nccl");
    else if (o->kind == DP_MPI && !launched && o->world > 1)
        rc = err_fail(err, errlen, DP_EARG, "--dp mpi with --world %d: start the ranks with mpirun -np %d", o->world, o->world);
    /* under mpirun the ranks come from it, also for --dp nccl with a --rendezvous (rank 0's bind):
     * only --rank/--world given by hand make a group by hand (each rank of a by-hand group saw
     * itself as rank 0 of 1 before, and all trained the same run directory) */
    else if (o->kind == DP_MPI || (launched && (!o->rendezvous || (o->rank < 0 && o->world <= 0))))
        rc = open_under_mpi(dp, err, errlen);
    else
        rc = open_by_hand(dp, err, errlen);
    if (rc) {
        dp->broken = 1;
        *out = dp; /* the caller closes it (not in order): MPI may be up */
        return rc;
    }
    *out = dp;
    return 0;
}

int dp_attach(dp_t *dp, device_t *dev, char *err, size_t errlen) {
    if (dp->o.kind == DP_MPI && !device_is_host(dev))
        return err_fail(err, errlen, DP_EARG, "--dp mpi sums host buffers; on %s use --dp nccl", dev->name);
    if (dp->o.kind == DP_NCCL && device_is_host(dev))
        return err_fail(err, errlen, DP_EARG, "--dp nccl sums GPU buffers; --device %s trains on the CPU: use --dp mpi",
                        dev->name);
    dp->dev = dev;
    dp->tr = dp->o.kind == DP_MPI ? &dp_transport_mpi : &dp_transport_nccl;
    dp->what = "setting up the collectives";
    int rc = dp->tr->attach(dp, err, errlen);
    if (rc) {
        dp->tr = NULL;
        dp->broken = 1;
    }
    return rc;
}

int dp_close(dp_t **pdp, const char *alone) {
    dp_t *dp = pdp ? *pdp : NULL;
    if (!dp) return 0;
    int orderly = !dp->broken && !alone;
    if (dp->tr) dp->tr->close(dp, orderly);
    dp_link_close(&dp->link, orderly, alone);
    int must_exit = dp->mpi_up && !orderly;
    if (dp->mpi_up) dp_mpi_finalize(dp, orderly);
    free(dp);
    *pdp = NULL;
    return must_exit;
}

/* ---- the bounded wait ------------------------------------------------------------------------- */

int dp_wait(dp_t *dp, dp_test_fn test, void *arg, char *err, size_t errlen) {
    const double deadline = progress_now() + dp->o.timeout_s;
    long pause_ns = 0; /* polled back to back at first, then with pauses growing to 200 us */
    for (int polls = 0;; polls++) {
        int done = 0;
        int rc = test(arg, &done, err, errlen);
        if (rc) {
            dp->broken = 1;
            return rc;
        }
        if (done) return 0;
        char why[320];
        int lost = dp_link_lost(dp->link, why, sizeof why);
        if (lost >= 0) {
            dp->broken = 1;
            return err_fail(err, errlen, DP_ELOST, "rank %d lost during %s of step %lld: %s", lost, dp->what, dp->step + 1, why);
        }
        if (progress_now() > deadline) {
            dp->broken = 1;
            return err_fail(err, errlen, DP_ETIMEOUT,
                            "%s of step %lld did not complete within %.0f s (--dp-timeout)%s", dp->what, dp->step + 1,
                            dp->o.timeout_s, dp->link ? "; every rank still answers the heartbeat, so one is stuck" : "");
        }
        if (polls >= 200) {
            pause_ns = pause_ns ? (pause_ns * 2 < 200000 ? pause_ns * 2 : 200000) : 5000;
            struct timespec ts = {0, pause_ns};
            nanosleep(&ts, NULL);
        }
    }
}

/* ---- collectives ------------------------------------------------------------------------------ */

static int usable(dp_t *dp, const char *what, char *err, size_t errlen) {
    if (!dp || !dp->tr) return err_fail(err, errlen, DP_EARG, "%s before dp_attach", what);
    if (dp->broken) return err_fail(err, errlen, DP_EFAULT, "%s on a broken group", what);
    dp->what = what;
    return 0;
}

int dp_reduce_scatter(dp_t *dp, float *buf, float *scratch, size_t shard, char *err, size_t errlen) {
    int rc = usable(dp, "the gradient reduce-scatter", err, errlen);
    if (rc) return rc;
    const size_t bytes = shard * sizeof(float);
    if ((rc = dp->tr->alltoall(dp, buf, scratch, bytes, err, errlen))) return rc;
    /* scratch piece j is rank j's part of my shard: added in rank order 0, 1, ..., W-1 */
    float *mine = buf + (size_t)dp->rank * shard;
    DEV(dp->dev, copy, mine, scratch, bytes);
    for (int j = 1; j < dp->world; j++) DEV(dp->dev, add_inplace, mine, scratch + (size_t)j * shard, shard);
    if (DEV(dp->dev, sync, err, errlen)) {
        dp->broken = 1;
        return DP_EFAULT;
    }
    return 0;
}

int dp_allgather(dp_t *dp, float *buf, size_t shard, char *err, size_t errlen) {
    int rc = usable(dp, "an all-gather", err, errlen);
    return rc ? rc : dp->tr->allgather(dp, buf, shard * sizeof(float), err, errlen);
}

int dp_gather(dp_t *dp, float *buf, size_t shard, int root, char *err, size_t errlen) {
    int rc = usable(dp, "a gather", err, errlen);
    return rc ? rc : dp->tr->gather(dp, buf, shard * sizeof(float), root, err, errlen);
}

int dp_broadcast(dp_t *dp, float *buf, size_t n, int root, char *err, size_t errlen) {
    int rc = usable(dp, "a broadcast", err, errlen);
    return rc ? rc : dp->tr->broadcast(dp, buf, n * sizeof(float), root, err, errlen);
}

int dp_host_allgather(dp_t *dp, const void *mine, void *all, size_t bytes, char *err, size_t errlen) {
    int rc = usable(dp, "the exchange of the step's records", err, errlen);
    return rc ? rc : dp->tr->host_allgather(dp, mine, all, bytes, err, errlen);
}

int dp_host_broadcast(dp_t *dp, void *buf, size_t bytes, int root, char *err, size_t errlen) {
    int rc = usable(dp, "a broadcast of rank 0's record", err, errlen);
    return rc ? rc : dp->tr->host_broadcast(dp, buf, bytes, root, err, errlen);
}
