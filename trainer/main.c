/* bin/trainer: trains a model on batches served by loaders (docs/README: trainer). */
#include <omp.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bus/net.h"
#include "model/cpu_isa.h"
#include "common/flags.h"
#include "trainer/opts.h"
#include "trainer/train.h"

static void usage(FILE *f, const flag_t *flags, int n) {
    fprintf(f,
            "usage: trainer --loaders EP[,EP...] [--discover] [options]\n"
            "       mpirun -np W trainer --dp mpi [options]             (W CPU ranks)\n"
            "       trainer --dp nccl --device cuda:G --rank R --world W --rendezvous tcp://HOST:PORT [options]\n"
            "Trains a model on batches from loaders (bin/loader), publishes metrics/<run> and\n"
            "ckpt/<run> events on the bus, writes checkpoints to --run-dir. SIGTERM/SIGINT write a\n"
            "checkpoint and exit; --resume continues from the newest usable one (docs/FORMATS.md §3).\n"
            "With --dp the run spans ranks (processes, machines): --batch is per rank, rank 0 writes\n"
            "the checkpoints, a lost rank stops every rank within --dp-lost-after (README, \"Many\n"
            "processes, many machines\"). Test-only fault injection: README, \"Fault injection\".\n\noptions:\n");
    flags_usage(f, flags, n);
}

int main(int argc, char **argv) {
    trainer_opts_t o;
    flag_t flags[TRAINER_NFLAGS + BUS_NET_NFLAGS];
    bus_net_opts_t net = {0};
    int nf = trainer_opts_init(&o, flags);
    nf += bus_net_flags(flags + nf, &net, BUS_PEER_REQUESTS); /* rank 0's rendezvous serves the other ranks */
    char err[1024];
    int rc = flags_parse(argc, argv, 1, flags, nf, NULL, NULL, 0, err, sizeof err);
    if (rc == 1) {
        usage(stdout, flags, nf);
        return 0;
    }
    if (rc || trainer_opts_check(&o, err, sizeof err) || cpu_isa_check(err, sizeof err) ||
        bus_net_setup(&net, err, sizeof err)) {
        fprintf(stderr, "trainer: %s\n", err);
        return 2;
    }
    if (o.threads > 0) omp_set_num_threads(o.threads);
    err[0] = 0;
    int hard_exit = 0;
    rc = trainer_run(&o, &hard_exit, err, sizeof err);
    if (rc) fprintf(stderr, "trainer: %s\n", err);
    int status = rc == 0 ? 0 : rc == TRAIN_ESETUP ? 2 : 1;
    if (hard_exit) { /* MPI left unfinalized (a lost rank): Open MPI's exit handlers would crash */
        fflush(NULL);
        _exit(status);
    }
    return status;
}
