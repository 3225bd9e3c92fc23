#!/usr/bin/env bash
# tests/it_net_hosts.sh: the host harness itself (tests/lib/hosts.sh), which the multi-host
# tests stand on:
#   - hosts on a private bridge reach each other by address and by name, each with its own
#     host name; this machine's own network is not touched (no new interface outside them);
#   - a cut (link down on the bridge) and a drop (nftables on the host) are partitions without
#     a FIN: a connection made before stays open on both ends, its bytes go nowhere, a new
#     connection times out instead of being refused; after healing the same connection carries
#     the bytes sent during the cut;
#   - the relay adds its delay (200 ms each way: a round trip of >= 400 ms) and its loss, and
#     exits within 2 s of SIGTERM;
#   - no host is left behind: after teardown, and when the test's shell is SIGKILLed (the
#     reaper); two runs at once get their own namespaces.
# Needs root; skips with one line otherwise.
set -u
cd "$(dirname "$0")/.."
. tests/lib/pipeline.sh
. tests/lib/hosts.sh
it_init it_net_hosts 1
PY=/usr/bin/python3
ECHO=tests/lib/echo.py
ifaces_before=$(ip -o link | wc -l)
hosts_init A B || hosts_skip
A=$(host_ip A) B=$(host_ip B)

ok "A reaches B by address" "hosts_reachable A B"
ok "each host has its own host name" "[ \"\$(on A hostname)\" = A ] && [ \"\$(on B hostname)\" = B ]"
ok "A resolves B's name to B's address" "[ \"\$(on A getent hosts B | awk '{print \$1}')\" = $B ]"
ok "no new interface on this machine's own network" "[ \$(ip -o link | wc -l) = $ifaces_before ]"
ok "the hosts' addresses are not this machine's" "! ip -o addr | grep -q ' $B/'"

# --- a partition without a FIN, and healing it ---------------------------------------------------
partition() { # partition NAME CUT HEAL
    local name=$1 cut=$2 heal=$3 fifo=$W/fifo.$1
    on_bg B "$W/srv.$name" $PY $ECHO serve "$B:7000"; local srv=$!
    wait_for "on B ss -Hltn src $B:7000 | grep -q ." 10
    mkfifo "$fifo"
    on_bg A "$W/cli.$name" $PY $ECHO hold "$B:7000" "$fifo"
    exec 7>"$fifo"
    echo one >&7
    wait_for "grep -q 'back one' $W/cli.$name" 10
    $cut
    echo two >&7
    sleep 2
    ok "$name: the connection is open on A during the cut" \
       "on A ss -Htn state established dst $B:7000 | grep -q ."
    ok "$name: and on B: no FIN or RST reached it" \
       "on B ss -Htn state established src $B:7000 | grep -q . && ! grep -q eof $W/srv.$name"
    ok "$name: bytes sent during the cut do not arrive" "[ \$(grep -c 'data' $W/srv.$name) = 1 ] && grep -q timeout $W/cli.$name"
    ok "$name: a new connection times out instead of being refused" \
       "! on A timeout 2 bash -c 'exec 3<>/dev/tcp/$B/7000' 2>/dev/null"
    $heal
    echo three >&7
    ok "$name: healed, the same connection carries what was sent during the cut" \
       "wait_for \"[ \\\$(grep -c 'data 4' $W/srv.$name) = 2 ] && grep -q 'data 6' $W/srv.$name\" 15"
    exec 7>&-
    kill "$srv" 2>/dev/null
}
cut_b() { host_cut B; }
heal_b() { host_heal B; }
partition cut cut_b heal_b
if command -v nft >/dev/null; then
    drop_b() { host_drop B; }
    undrop_b() { host_undrop B; }
    partition drop drop_b undrop_b
else
    echo "nft missing: the nftables partition was not checked (make deps installs nftables)"
fi

# --- the relay -----------------------------------------------------------------------------------
on_bg B "$W/srv.relay" $PY $ECHO serve "$B:7001"
relay_bg A 7002 "$B:7001" 200 0 "$W/relay.log"; relay=$!
relay_bg A 7003 "$B:7001" 0 0.5 "$W/relay_loss.log"; relay_loss=$!
wait_for "grep -q '^relay:' $W/relay.log && grep -q '^relay:' $W/relay_loss.log" 10
direct=$(on A $PY $ECHO rtt "$B:7001" 5)
slow=$(on A $PY $ECHO rtt "$A:7002" 3)
ok "relay: 200 ms each way makes a round trip of 400-700 ms ($slow ms; direct $direct ms)" \
   "awk -v s=$slow 'BEGIN{exit !(s >= 400 && s < 700)}'"
lossy=$(on A $PY $ECHO rtt "$A:7003" 9)
ok "relay: half the segments lost once: the median round trip pays a time-out of 200 ms ($lossy ms)" \
   "awk -v s=$lossy 'BEGIN{exit !(s >= 200)}'"
t0=$(date +%s%N); kill -TERM "$relay"; wait_for "! kill -0 $relay 2>/dev/null" 5; gone=$?
ms=$((($(date +%s%N) - t0) / 1000000))
ok "relay exits within 2 s of SIGTERM ($ms ms) with its stop line" "[ $gone = 0 ] && [ $ms -lt 2000 ] && grep -q 'relay: stopping: 1 connections' $W/relay.log"

# --- nothing left behind ---------------------------------------------------------------------------
# a second harness at the same time, in a shell that is then SIGKILLed: its reaper cleans up
cat >"$W/child.sh" <<EOF
cd "$PWD"; . tests/lib/pipeline.sh; . tests/lib/hosts.sh
pids=(); pass=0; fail=0
hosts_init X Y || exit 1
echo "\$HOSTS_PREFIX" >"$W/child.prefix"
on X hostname >"$W/child.host"
exec sleep 300
EOF
bash "$W/child.sh" >/dev/null 2>&1 & child=$!
wait_for "[ -s $W/child.host ]" 20
cp=$(cat "$W/child.prefix" 2>/dev/null)
ok "a second run at once has namespaces of its own ($cp, ours $HOSTS_PREFIX)" \
   "[ -n '$cp' ] && [ '$cp' != '$HOSTS_PREFIX' ] && ip netns list | grep -q '^$cp-X' && [ \"\$(cat $W/child.host)\" = X ]"
ok "and the same addresses in both, each on its own bridge" "hosts_reachable A B"
kill -9 "$child"
ok "its shell SIGKILLed: the reaper deletes its hosts, /etc/netns files and owner file within 5 s" \
   "wait_for \"! ip netns list | grep -q '^$cp-' && [ ! -e /etc/netns/$cp-X ] && [ ! -e /run/ftnet/$cp ]\" 5"
prefix=$HOSTS_PREFIX
hosts_teardown
ok "teardown deletes every namespace of the run" "! ip netns list | grep -q '^$prefix-'"
ok "and kills what ran on the hosts" "! kill -0 $relay_loss 2>/dev/null"
ok "and its /etc/netns files" "! ls -d /etc/netns/$prefix-* 2>/dev/null | grep -q ."
it_done
