#!/usr/bin/env bash
# trainer/examples/mpirun_hosts.sh HOSTFILE NP TRAINER-ARGS...: NP data-parallel ranks of
# bin/trainer over the hosts of HOSTFILE (Open MPI's format, a line per host: "hostA slots=1"),
# started by mpirun from this host, which gets rank 0 when it is HOSTFILE's first line. Every
# host needs this repository, built, at the same path, the keys of README's "Running across
# machines, securely", and ssh from this host without a password (mpirun's way in; tests set
# OMPI_MCA_plm_rsh_agent to tests/lib/netns_rsh.sh instead). The settings every rank needs
# travel with mpirun: multihost.env's (FT_NET_IF, Open MPI's ports and keepalives) and every
# FT_* variable set here, e.g.
#
#   export FT_NET_IF=eth0 FT_KEY=keys/trainer.key FT_TRUST=keys/trust FT_AUTHORIZED=keys/authorized
#   export FT_BUS_PUB=tcp://hostA:5710 FT_BUS_SUB=tcp://hostA:5711
#   trainer/examples/mpirun_hosts.sh hosts 4 --discover --run r1 --run-dir /shared/runs/r1 \
#       --batch 8 --seq-len 256 --steps 20000
#
# Rank 0's rendezvous is bound at port 5730 (FT_PORT_RENDEZVOUS) on every interface and named to
# the others by its host name, so the trust file's line "tcp://*:5730 <trainer key>" covers it.
# As root, Open MPI also wants OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1.
#
# mpirun is watched: once every rank on this host has ended, it gets FT_MPIRUN_GRACE_S (10)
# seconds to end too, and is then stopped with one line on stderr (exit status 1). Open MPI
# (4.1) waits for every host's daemon to confirm the end of a job; when a host vanished while
# mpirun's own message to its daemon was in flight, keepalives (multihost.env) never probe that
# busy connection and TCP's retries keep mpirun waiting for many minutes (CI: over 30 s after
# the survivor's exit) although the job is over: a rank exits only when the run is done or
# lost. Nothing is watched when this host runs no rank.
set -eu
[ $# -ge 2 ] || { echo "usage: $0 HOSTFILE NP TRAINER-ARGS..." >&2; exit 2; }
hostfile=$(realpath "$1") np=$2; shift 2
cd "$(dirname "$0")/../.."
. trainer/examples/multihost.env
x=(-x OMP_NUM_THREADS)
for v in $(env | grep -o '^FT_[A-Z0-9_]*' | sort -u); do x+=(-x "$v"); done
grace=${FT_MPIRUN_GRACE_S:-10}
case $grace in '' | *[!0-9]*) echo "mpirun_hosts: FT_MPIRUN_GRACE_S must be whole seconds, not '$grace'" >&2; exit 2;; esac
mpirun --hostfile "$hostfile" -np "$np" "${x[@]}" \
    bin/trainer --dp mpi --rendezvous "tcp://*:$FT_PORT_RENDEZVOUS" "$@" &
mpi=$!
trap 'kill -TERM $mpi 2>/dev/null || true' TERM INT HUP
# milliseconds now (bash's EPOCHREALTIME: $SECONDS counts whole seconds, and a grace timed by it
# could end up to a second early)
now_ms() { local t=${EPOCHREALTIME//[.,]/}; echo $((t / 1000)); }
# the ranks on this host are mpirun's own children (its daemon's role here)
seen=0 ended_at=
while kill -0 $mpi 2>/dev/null; do
    if pgrep -P $mpi -x trainer >/dev/null; then
        seen=1 ended_at=
    elif [ $seen = 1 ]; then
        ended_at=${ended_at:-$(now_ms)}
        if [ $(($(now_ms) - ended_at)) -ge $((grace * 1000)) ]; then
            echo "mpirun_hosts: this host's ranks ended $grace s ago and mpirun still waits (for a host it cannot reach?); stopping it (FT_MPIRUN_GRACE_S)" >&2
            # not SIGTERM: Open MPI 4.1's mpirun crashed on it there, waiting again
            kill -KILL $mpi 2>/dev/null || true
            disown $mpi 2>/dev/null || true
            exit 1
        fi
    fi
    sleep 0.5
done
rc=0
wait $mpi || rc=$?
exit $rc
