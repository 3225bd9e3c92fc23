#!/usr/bin/env bash
# tests/lib/netns_rsh.sh HOST COMMAND...: Open MPI's remote shell for the hosts of
# tests/lib/hosts.sh (mpirun --mca plm_rsh_agent tests/lib/netns_rsh.sh): runs COMMAND, a line
# for a shell as ssh would hand it over, on HOST, i.e. in its network namespace under its host
# name. The run's prefix comes from the environment mpirun inherits (FT_HOSTS_PREFIX).
set -u
host=$1; shift
[ -n "${FT_HOSTS_PREFIX:-}" ] || { echo "netns_rsh: FT_HOSTS_PREFIX is not set" >&2; exit 255; }
exec ip netns exec "$FT_HOSTS_PREFIX-$host" unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' "$host" "$*"
