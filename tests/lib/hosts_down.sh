#!/usr/bin/env bash
# tests/lib/hosts_down.sh PREFIX [--when-gone PID]: deletes the hosts of one tests/lib/hosts.sh
# run: kills every process in its namespaces (SIGKILL: a host that is switched off), deletes
# the namespaces, their /etc/netns files and the run's owner file /run/ftnet/PREFIX.
# With --when-gone PID it first waits until PID (the test's shell) has ended, or until the
# owner file is gone (the test tore its hosts down itself): the reaper hosts_init starts.
set -u
prefix=$1
case "$prefix" in ftn-[0-9]*-[0-9]*) ;; *) echo "hosts_down: not a hosts prefix: $prefix" >&2; exit 2;; esac
if [ "${2:-}" = --when-gone ]; then
    pid=$3 start=$(cut -d' ' -f22 "/proc/$3/stat" 2>/dev/null)
    while [ -f "/run/ftnet/$prefix" ] && [ "$(cut -d' ' -f22 "/proc/$pid/stat" 2>/dev/null)" = "$start" ]; do
        sleep 0.5
    done
    [ -f "/run/ftnet/$prefix" ] || exit 0
fi
mine() { ip netns list 2>/dev/null | awk '{print $1}' | grep "^$prefix-"; }
for ns in $(mine); do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
done
for ns in $(mine); do
    # a process killed a moment ago may still hold the namespace: delete anyway (it goes with it)
    ip netns del "$ns" 2>/dev/null
    rm -rf "/etc/netns/$ns"
done
rm -f "/run/ftnet/$prefix"
