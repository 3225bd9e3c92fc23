# tests/lib/hosts.sh: several "machines" on this one, for the tests that cross a network.
# Source it (after tests/lib/pipeline.sh) from the repository root:
#
#   hosts_init A B C ...   one Linux network namespace per host name, each with one interface
#                          (ft0, address 10.211.0.<i>/24, i = 1, 2, ... in the order given)
#                          plugged into a private bridge that lives in a namespace of its own,
#                          so nothing of this machine's own network is touched and the same
#                          subnet serves every run at once. Each host also gets its own host
#                          name (a UTS namespace per command) and an /etc/hosts that names every
#                          host (ip netns exec binds /etc/netns/<ns>/hosts over /etc/hosts).
#                          Returns 1, after one line "SKIP: ..." saying why, when this machine
#                          cannot do it (not root, no ip netns) or FT_TEST_NO_NETNS is set
#                          (for a machine where they must not run): the caller ends with
#                          `hosts_skip`, which run.sh counts as skipped.
#   on HOST CMD...         runs CMD on HOST (its namespace and host name), in the foreground.
#   on_bg HOST LOG CMD...  the same in the background, stdout and stderr to LOG; the program's
#                          own pid (every step execs) is appended to pids and left in $!.
#   host_ip HOST           its address.
#   host_cut HOST          unplugs HOST: its link on the bridge goes down, so nothing leaves or
#                          reaches it and no FIN or RST is sent for its connections (a partition,
#                          as a dead switch port or a pulled cable). host_heal HOST plugs it back.
#   host_drop HOST         the same partition made by nftables on HOST itself (every packet in
#                          and out dropped; the interface stays up): host_undrop undoes it.
#                          Needs nft (make deps installs nftables); returns 1 without it.
#   relay_bg HOST PORT TARGET DELAY_MS LOSS LOG   a TCP relay (tests/lib/relay.py) on HOST at
#                          HOST:PORT to TARGET (IP:PORT) that delays every byte DELAY_MS each
#                          way and loses LOSS of the segments (0.05: 5%) as TCP sees a loss: the
#                          segment and all behind it come a retransmission time-out late.
#   conns HOST PEER        the established TCP connections on HOST with PEER (a host name) at
#                          either end.
#   conns_gone_bg HOST PEER T0 FILE   in the background, polls every 50 ms until HOST has no
#                          established connection with PEER and writes to FILE the milliseconds
#                          since T0 (a `date +%s%N`), or `never` after 30 s: a half-open
#                          connection's drop timed while the test does other things.
#   hosts_keys DIR NAME... a CURVE key pair per NAME made and handed out as README tells a user:
#                          DIR/NAME.key and .pub (bin/bus keygen), DIR/authorized (every .pub);
#                          the test writes DIR/trust, and key NAME prints a public key.
#   hosts_teardown         kills every process on the hosts and deletes the namespaces. The
#                          EXIT trap of it_init calls it (through hosts_init's trap), and a
#                          reaper started by hosts_init does it when this shell dies any other
#                          way (SIGKILL, a time-out of run.sh), so no host is left behind.
#
# Names are unique per run (ftn-<pid of the test shell>-<random>-<host>): several people may
# run `make test` on one machine at once. A run's namespaces whose owner is gone (a reaper that
# could not run: the machine stopped) are deleted by the next hosts_init.
HOSTS_NET=10.211.0
HOSTS_IF=ft0

hosts_skip() { echo "0 passed, 0 failed"; exit 0; }

# The namespace of host $1.
host_ns() { echo "$HOSTS_PREFIX-$1"; }
host_ip() { echo "${HOSTS_IP[$1]}"; }

# Deletes every namespace of runs whose owner process is gone (its pid and start time, kept in
# /run/ftnet/<prefix>, no longer match a live process).
hosts_sweep() {
    local f pid start now
    for f in /run/ftnet/ftn-*; do
        [ -f "$f" ] || continue
        read -r pid start <"$f" 2>/dev/null || continue
        now=$(cut -d' ' -f22 "/proc/$pid/stat" 2>/dev/null)
        [ -n "$now" ] && [ "$now" = "$start" ] && continue
        bash "$HOSTS_LIB/hosts_down.sh" "$(basename "$f")" >/dev/null 2>&1
    done
}

hosts_init() {
    HOSTS_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
    if [ -n "${FT_TEST_NO_NETNS:-}" ]; then echo "SKIP: FT_TEST_NO_NETNS is set (the multi-host tests are not wanted here)"; return 1; fi
    if [ "$(id -u)" != 0 ]; then echo "SKIP: the multi-host tests need root (network namespaces); run as root, as CI does"; return 1; fi
    if ! command -v ip >/dev/null || ! command -v unshare >/dev/null; then
        echo "SKIP: ip (iproute2) or unshare (util-linux) missing; make deps installs them"; return 1
    fi
    mkdir -p /run/ftnet
    hosts_sweep
    HOSTS_PREFIX=ftn-$$-$RANDOM
    HOSTS_NAMES=("$@")
    declare -gA HOSTS_IP=()
    echo "$$ $(cut -d' ' -f22 /proc/$$/stat)" >"/run/ftnet/$HOSTS_PREFIX"
    # the reaper: its own session, so a time-out that kills the test's process group spares it
    setsid bash "$HOSTS_LIB/hosts_down.sh" "$HOSTS_PREFIX" --when-gone $$ </dev/null >/dev/null 2>&1 &
    disown $! # not one of the script's jobs: its EXIT trap's `wait` must not wait for it
    local sw err; sw=$(host_ns sw)
    if ! err=$(ip netns add "$sw" 2>&1); then
        rm -f "/run/ftnet/$HOSTS_PREFIX"
        echo "SKIP: cannot create a network namespace here ($err)"; return 1
    fi
    ip -n "$sw" link add br0 type bridge && ip -n "$sw" link set br0 up && ip -n "$sw" link set lo up || return 1
    local i=0 h ns hosts="127.0.0.1 localhost"$'\n'"::1 localhost"
    for h in "$@"; do i=$((i + 1)); HOSTS_IP[$h]=$HOSTS_NET.$i; hosts+=$'\n'"$HOSTS_NET.$i $h"; done
    for h in "$@"; do
        ns=$(host_ns "$h")
        ip netns add "$ns" &&
            ip -n "$sw" link add "v$h" type veth peer name "$HOSTS_IF" netns "$ns" &&
            ip -n "$sw" link set "v$h" master br0 up &&
            ip -n "$ns" addr add "${HOSTS_IP[$h]}/24" dev "$HOSTS_IF" &&
            ip -n "$ns" link set "$HOSTS_IF" up && ip -n "$ns" link set lo up || {
            echo "hosts_init: could not make host $h"; return 1; }
        mkdir -p "/etc/netns/$ns" && echo "$hosts" >"/etc/netns/$ns/hosts"
    done
    # the teardown first, then whatever EXIT trap the script has (it_init's kills $pids and waits)
    local prev; prev=$(trap -p EXIT | sed "s/^trap -- '\(.*\)' EXIT$/\1/")
    trap "hosts_teardown; $prev" EXIT
    trap 'exit 143' TERM INT
    # a bridge port forwards at once (no STP), but wait until A reaches every host anyway
    for h in "$@"; do wait_for "hosts_reachable $1 $h" 5 || { echo "hosts_init: $1 cannot reach $h"; return 1; }; done
    return 0
}

# 0 when HOST $1 reaches $2's address (a refused connection counts: the host answered).
hosts_reachable() {
    on "$1" timeout 1 bash -c "exec 3<>/dev/tcp/${HOSTS_IP[$2]}/9" 2>&1 | grep -q 'refused' ||
        on "$1" timeout 1 bash -c "exec 3<>/dev/tcp/${HOSTS_IP[$2]}/9" 2>/dev/null
}

on() {
    local h=$1; shift
    ip netns exec "$(host_ns "$h")" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$h" "$@"
}

on_bg() {
    local h=$1 log=$2; shift 2
    (exec ip netns exec "$(host_ns "$h")" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$h" "$@") >"$log" 2>&1 &
    pids+=($!)
}

host_cut() { ip -n "$(host_ns sw)" link set "v$1" down; }
host_heal() { ip -n "$(host_ns sw)" link set "v$1" up; }

host_drop() {
    command -v nft >/dev/null || return 1
    ip netns exec "$(host_ns "$1")" nft -f - <<EOF
table inet ftcut {
    chain in { type filter hook input priority -300; policy drop; iifname "lo" accept; }
    chain out { type filter hook output priority -300; policy drop; oifname "lo" accept; }
}
EOF
}
host_undrop() { ip netns exec "$(host_ns "$1")" nft delete table inet ftcut; }

relay_bg() {
    local h=$1 port=$2 target=$3 delay=$4 loss=$5 log=$6
    on_bg "$h" "$log" /usr/bin/python3 "$HOSTS_LIB/relay.py" --listen "${HOSTS_IP[$h]}:$port" \
        --to "$target" --delay-ms "$delay" --loss "$loss"
}

conns() { ip netns exec "$(host_ns "$1")" ss -Htn state established | grep -c -- " ${HOSTS_IP[$2]}:"; }

conns_gone_bg() {
    local h=$1 peer=$2 t0=$3 out=$4
    (
        end=$(($(date +%s) + 30))
        while [ "$(conns "$h" "$peer")" != 0 ]; do
            [ "$(date +%s)" -lt $end ] || { echo never >"$out"; exit 0; }
            sleep 0.05
        done
        echo $((($(date +%s%N) - t0) / 1000000)) >"$out"
    ) &
    pids+=($!)
}

hosts_keys() {
    local dir=$1 n; shift
    mkdir -p "$dir"
    for n in "$@"; do bin/bus keygen --out "$dir/$n" >/dev/null || return 1; done
    cat "$dir"/*.pub >"$dir/authorized"
    HOSTS_KEYS=$dir
}
key() { cut -d' ' -f1 "$HOSTS_KEYS/$1.pub"; }

hosts_teardown() {
    [ -n "${HOSTS_PREFIX:-}" ] || return 0
    bash "$HOSTS_LIB/hosts_down.sh" "$HOSTS_PREFIX"
    HOSTS_PREFIX=
}
