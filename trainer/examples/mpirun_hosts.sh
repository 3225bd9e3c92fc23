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
set -eu
[ $# -ge 2 ] || { echo "usage: $0 HOSTFILE NP TRAINER-ARGS..." >&2; exit 2; }
hostfile=$(realpath "$1") np=$2; shift 2
cd "$(dirname "$0")/../.."
. trainer/examples/multihost.env
x=(-x OMP_NUM_THREADS)
for v in $(env | grep -o '^FT_[A-Z0-9_]*' | sort -u); do x+=(-x "$v"); done
exec mpirun --hostfile "$hostfile" -np "$np" "${x[@]}" \
    bin/trainer --dp mpi --rendezvous "tcp://*:$FT_PORT_RENDEZVOUS" "$@"
