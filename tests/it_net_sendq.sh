#!/usr/bin/env bash
# tests/it_net_sendq.sh: a connection whose own bytes are stuck at a cut is dropped by the
# kernel's time-out, not only by the heartbeat (bus/net.h, docs/NETWORK.md §3). libzmq (4.3)
# sends its PING only when its output buffer is empty, so a publisher that fills its kernel
# send buffer after the peer's host is cut never pings, and the heartbeat's time-out never
# starts (CI saw the trainer's connection to a cut bus host stay up 30 s in it_net_faults.sh).
# Here the pings are 60 s apart (FT_HEARTBEAT_IVL_MS), so within the test only the kernel's
# time-out (ZMQ_TCP_MAXRT = FT_HEARTBEAT_TIMEOUT_MS, 2 s here) can drop the connection:
#     A: bin/bus, a tap      B: a loader (ipc, no bus) and the trainer, publishing metrics every step
#   - after A is cut, B's connection to the bus holds unacknowledged bytes, and B drops it
#     within the 2 s time-out + 2 s (the retransmission timer's tick, a loaded machine);
#   - healed, the trainer reconnects by itself and its metrics reach the bus again.
# Needs root (network namespaces); skips with one line otherwise.
set -u
cd "$(dirname "$0")/.."
. tests/lib/pipeline.sh
. tests/lib/hosts.sh
it_init it_net_sendq 1
unset FT_KEY FT_TRUST FT_AUTHORIZED FT_ALLOW_ANY_CLIENT
hosts_init A B || hosts_skip
A=$(host_ip A)
it_synth_data "$W/ds" 2000 7
TIMEOUT_MS=2000 BOUND_MS=4000
export FT_INSECURE=1 FT_BUS_PUB=tcp://$A:5710 FT_BUS_SUB=tcp://$A:5711
export FT_HEARTBEAT_IVL_MS=60000 FT_HEARTBEAT_TIMEOUT_MS=$TIMEOUT_MS

on_bg A "$W/bus.log" bin/bus --pub "$FT_BUS_PUB" --sub "$FT_BUS_SUB"
on_bg A "$W/tap.err" sh -c "exec bin/bus tap metrics log/sync >$W/tap.log"
wait_for "on A bin/bus send log/sync log program=it line=ping >/dev/null 2>&1; grep -q ping $W/tap.log" 20
# the loader publishes to no bus here: the trainer's is the one connection between the hosts
on_bg B "$W/l0.log" env FT_BUS_PUB="ipc://$W/no-bus" bin/loader --data "$W/ds" --bind "ipc://$W/l0" --name l0 --quiet
on_bg B "$W/t.log" bin/trainer --loaders "ipc://$W/l0" --d-model 32 --layers 1 --heads 2 --kv-heads 1 --d-ff 32 \
    --seq-len 16 --batch 2 --threads 1 --run s --run-dir "$W/r" --steps 10000000 --ckpt-every 0 --log-every 1
step_on_tap() { jq -s -r 'map(select(.topic == "metrics/s")) | last | .step // 0' "$W/tap.log" 2>/dev/null; }
ok "the trainer on B publishes its metrics to the bus on A" "wait_for '[ \"\$(step_on_tap)\" -ge 50 ] 2>/dev/null' 30"
ok "B has one connection with A (its publisher's: $(conns B A))" "[ $(conns B A) = 1 ]"

t0=$(date +%s%N)
host_cut A
conns_gone_bg B A "$t0" "$W/gone"
sleep 0.5
sendq=$(ip netns exec "$(host_ns B)" ss -Htn state established dst "$A" | awk '{s += $2} END {print s + 0}')
ok "0.5 s after the cut B's connection holds unacknowledged bytes ($sendq): its pings could not go out" "[ $sendq -gt 0 ]"
wait_for "[ -s $W/gone ]" 35
t=$(cat "$W/gone" 2>/dev/null)
ok "B drops it within the ${TIMEOUT_MS} ms time-out + 2 s without a ping (${t:-?} ms after the cut; bound $BOUND_MS ms)" \
   "[ '${t:-never}' != never ] && [ ${t:-0} -le $BOUND_MS ]"
ok "and not before the time-out (${t:-?} ms >= $TIMEOUT_MS ms)" "[ '${t:-never}' != never ] && [ ${t:-0} -ge $TIMEOUT_MS ]"

host_heal A
s_heal=$(step_on_tap)
ok "healed: the trainer reconnects and its metrics reach the bus again (after step $s_heal)" \
   "wait_for '[ \"\$(step_on_tap)\" -gt $s_heal ]' 15"
it_done
