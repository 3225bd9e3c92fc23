#!/usr/bin/env bash
# tests/it_net_pipeline.sh: the pipeline across four hosts (tests/lib/hosts.sh), every
# conversation off loopback and so under CURVE, set up as README's "Across hosts: a cluster
# run" tells a user (keys from bin/bus keygen, one trust file by port, servers bound to every
# interface, clients naming hosts by name):
#     A: bin/bus, an evaluator, a tap     B: loader l1     C: loader l2, the sampler service
#     D: the trainer (--loaders, both)
#   - the run (30 steps, checkpoints every 10; SIGKILLed after 20 and resumed on D) gives the loss
#     curve and the checkpoints, byte for byte, of the same run on one host (ipc, no keys);
#   - both loaders served it; the evaluator on A evaluated every checkpoint once; the sampler
#     on C followed the run to its last checkpoint and serves a client on D;
#   - a client in clear text, one whose key is not authorized and one holding a wrong server
#     key are refused by the bus, the loader and the sampler service, and each server logs it.
# Needs root (network namespaces); skips with one line otherwise. The run directory and the
# dataset sit on storage every host sees (this machine's file system), as on a cluster.
set -u
cd "$(dirname "$0")/.."
. tests/lib/pipeline.sh
. tests/lib/hosts.sh
it_init it_net_pipeline 1
export LC_ALL=C
unset FT_KEY FT_TRUST FT_AUTHORIZED FT_INSECURE FT_ALLOW_ANY_CLIENT
PY=/usr/bin/python3
hosts_init A B C D || hosts_skip
A=$(host_ip A) B=$(host_ip B) C=$(host_ip C) D=$(host_ip D)
it_synth_data "$W/ds" 2000 7

MODEL="--d-model 32 --layers 2 --heads 4 --kv-heads 2 --d-ff 64 --seq-len 32 --batch 4 --warmup 5 --lr 3e-3 --threads 1"
RUN="--run r1 --ckpt-every 10 --keep 0"
losses() { jq -r 'select(.topic == "metrics/r1") | "\(.step) \(.values.loss)"' "$1" | sort -n | uniq; }

# --- 1. the same run on one host: ipc, no keys -------------------------------------------------
it_pipeline "$W/ds" metrics
bin/trainer --loaders "ipc://$W/l0" $MODEL $RUN --run-dir "$W/one" --steps 30 2>"$W/one.log"
ok "one host: 30 steps (rc $?)" "grep -q 'done at step 30' $W/one.log"
wait_for "[ \$(losses $W/tap.log | wc -l) = 30 ]" 10
for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; pids=()

# --- 2. keys, as README says -------------------------------------------------------------------
K=$W/keys
hosts_keys "$K" bus loader trainer evaluator sampler me
printf 'tcp://*:5710 %s\ntcp://*:5711 %s\ntcp://*:5600 %s\ntcp://*:5800 %s\n' \
    "$(key bus)" "$(key bus)" "$(key loader)" "$(key sampler)" >"$K/trust"
export FT_BUS_PUB=tcp://A:5710 FT_BUS_SUB=tcp://A:5711 FT_TRUST=$K/trust
SRV="--authorized $K/authorized"

# --- 3. the pipeline on four hosts ----------------------------------------------------------------
on_bg A "$W/bus.log" bin/bus --pub 'tcp://*:5710' --sub 'tcp://*:5711' --key "$K/bus.key" $SRV
on_bg A "$W/tapn.err" env FT_KEY="$K/me.key" sh -c "exec bin/bus tap metrics ckpt eval loader log/sync >$W/tapn.log"
ok "a tap on A hears a publisher on D through the bus, both over CURVE" \
   "wait_for 'on D env FT_KEY=$K/me.key bin/bus send log/sync log program=it line=ping >/dev/null 2>&1; grep -q ping $W/tapn.log' 20"
on_bg B "$W/l1.log" env FT_KEY="$K/loader.key" bin/loader --data "$W/ds" --bind 'tcp://*:5600' --name l1 $SRV
on_bg C "$W/l2.log" env FT_KEY="$K/loader.key" bin/loader --data "$W/ds" --bind 'tcp://*:5600' --name l2 $SRV
ok "both loaders announce themselves on the bus, by host name (tcp://B:5600, tcp://C:5600)" \
   "wait_for 'grep -q \"loader/l1.*tcp://B:5600\" $W/tapn.log && grep -q \"loader/l2.*tcp://C:5600\" $W/tapn.log' 20"
mkdir -p "$W/net"
on_bg A "$W/eval.log" env FT_KEY="$K/evaluator.key" bin/evaluator --run r1 --run-dir "$W/net" --task val \
    --data "$W/ds" --batches 1 --seq-len 32 --batch 2 --out "$W/evals.jsonl"
sleep 1 # the evaluator subscribed (its first scan finds nothing)
LOADERS="--loaders tcp://B:5600,tcp://C:5600"
FT_TRAINER_FAULT_KILL_AFTER_CKPT=20 killed_run on D env FT_KEY="$K/trainer.key" bin/trainer $LOADERS $MODEL $RUN \
    --run-dir "$W/net" --steps 30 2>"$W/t1.log"
ok "D trains, killed after its step-20 checkpoint (rc $?)" "[ -d $W/net/ckpt-00000020 ] && [ ! -d $W/net/ckpt-00000030 ]"
on_bg C "$W/sampler.log" env FT_KEY="$K/sampler.key" bin/sampler --run-dir "$W/net" --serve 'tcp://*:5800' \
    --follow r1 $SRV
wait_for "grep -q '^sampler: serving' $W/sampler.log" 20
sleep 1
on D env FT_KEY="$K/trainer.key" bin/trainer $LOADERS $MODEL $RUN --run-dir "$W/net" --steps 30 --resume 2>"$W/t2.log"
ok "D resumes to step 30 (rc $?)" "grep -q 'resumed from.*ckpt-00000020' $W/t2.log && grep -q 'done at step 30' $W/t2.log"

# --- 4. what the two runs produced -------------------------------------------------------------------
wait_for "[ \$(losses $W/tapn.log | wc -l) = 30 ]" 10
ok "the loss curve of the 30 steps equals the one-host run's ($(losses "$W/tapn.log" | wc -l) steps)" \
   "[ \$(losses $W/tapn.log | wc -l) = 30 ] && diff <(losses $W/tap.log) <(losses $W/tapn.log) >/dev/null"
for s in 10 20 30; do
    c=ckpt-000000$s
    ok "checkpoint $s equals the one-host run's, every file byte for byte" "diff -r $W/one/$c $W/net/$c >/dev/null"
done
ok "both loaders served batches (l1 $(jq -s 'map(select(.topic == "loader/l1")) | last | .served' "$W/tapn.log"), l2 $(jq -s 'map(select(.topic == "loader/l2")) | last | .served' "$W/tapn.log"))" \
   "wait_for \"jq -s -e '(map(select(.topic == \\\"loader/l1\\\")) | last | .served > 0) and (map(select(.topic == \\\"loader/l2\\\")) | last | .served > 0)' $W/tapn.log >/dev/null\" 5"
ok "the evaluator on A evaluated steps 10, 20 and 30, each once" \
   "wait_for '[ \"\$(jq -r .step $W/evals.jsonl 2>/dev/null | sort -n | tr \"\\n\" \" \")\" = \"10 20 30 \" ]' 30"
ok "its results reached the bus" "wait_for 'grep -q \"\\\"topic\\\":\\\"eval/r1\\\".*\\\"step\\\":30\" $W/tapn.log' 10"
ok "the sampler service on C followed the run to step 30" "wait_for 'grep -q \"reloaded .*ckpt-00000030\" $W/sampler.log' 20"
on D env FT_KEY="$K/me.key" bin/sampler --connect tcp://C:5800 --prompt 'K>' --max-new 8 --timeout-ms 20000 --json >"$W/gen.json" 2>"$W/gen.err"
ok "a client on D is served by it, from step 30 (rc $?)" "[ \"\$(jq -r .step $W/gen.json)\" = 30 ]"

# --- 5. refused peers, each refusal logged ------------------------------------------------------------
mkdir -p "$W/stranger"
bin/bus keygen --out "$W/stranger/me" >/dev/null
# a wrong server key: the loaders' line with the sampler's key (awk: a Z85 key may hold a & or |)
awk -v k="$(key sampler)" '$1 == "tcp://*:5600" {$2 = k} {print}' "$K/trust" >"$W/stranger/trust"
# first, alone: a client holding a wrong server key (so that its line is not one of the
# clear-text clients' below; the server sees it either fail or break off its handshake)
on D env FT_KEY="$K/me.key" FT_TRUST="$W/stranger/trust" bin/loader info --connect tcp://B:5600 --timeout-ms 2000 >/dev/null 2>&1
ok "a wrong server key in the client's trust file: the loader does not answer, and logs it (rc $?)" \
   "[ $? != 0 ] && grep -qE '^loader: refused a client on tcp://[*]:5600: (its CURVE handshake failed|it broke off its handshake)' $W/l1.log"
on D $PY - "$FT_BUS_PUB" "$FT_BUS_SUB" tcp://B:5600 tcp://C:5800 >"$W/plain.out" 2>&1 <<'PYEOF'
import sys, time, zmq, msgpack
pub_ep, sub_ep, loader_ep, sampler_ep = sys.argv[1:5]
ctx = zmq.Context()
def sock(kind, ep):
    s = ctx.socket(kind)
    for opt in (zmq.LINGER, 0), (zmq.RCVTIMEO, 1500), (zmq.SNDTIMEO, 1500):
        s.setsockopt(*opt)
    s.connect(ep)
    return s
pub = sock(zmq.PUB, pub_ep)
sub = sock(zmq.SUB, sub_ep); sub.setsockopt(zmq.SUBSCRIBE, b"")
info = msgpack.packb({"v": 1, "type": "info_req", "req_id": 1, "world": 1, "B": 1, "T": 1, "layout": "pack", "split": "train"})
time.sleep(1)
for _ in range(5):
    pub.send(b"log/sync\x00" + msgpack.packb({"v": 1, "type": "log", "program": "py", "line": "clear-text"}))
for name, ep in (("loader", loader_ep), ("sampler", sampler_ep)):
    try:
        s = sock(zmq.REQ, ep); s.send(info); s.recv(); print(name, "answered")
    except zmq.Again:
        print(name, "silent")
try:
    sub.recv(); print("subscriber received")
except zmq.Again:
    print("subscriber silent")
PYEOF
ok "clear text: the loader, the sampler service and the bus's subscriber side answer nothing" \
   "grep -qx 'loader silent' $W/plain.out && grep -qx 'sampler silent' $W/plain.out && grep -qx 'subscriber silent' $W/plain.out"
ok "clear text: and the publisher's events are not forwarded" "! grep -q clear-text $W/tapn.log"
on D env FT_KEY="$W/stranger/me.key" bin/loader info --connect tcp://B:5600 --timeout-ms 2000 >/dev/null 2>"$W/s1.err"; rc1=$?
on D env FT_KEY="$W/stranger/me.key" bin/bus tap --count 1 --timeout 2 >"$W/s2.out" 2>&1; rc2=$?
ok "a key not in --authorized: the loader does not answer, the bus sends nothing (rc $rc1, $rc2)" \
   "[ $rc1 != 0 ] && [ $rc2 = 1 ] && [ ! -s $W/s2.out ]"
# a client in clear text fails either on our reading its greeting or on its hanging up first
clear() { grep -qF "$1: refused a client on $2: it does not speak CURVE" "$3" || grep -qF "$1: refused a client on $2: it broke off its handshake" "$3"; }
ok "the bus logged the clear-text clients on both its sockets" "clear bus 'tcp://*:5710' $W/bus.log && clear bus 'tcp://*:5711' $W/bus.log"
# (single quotes: a Z85 key may hold a $, never a ')
ok "the bus logged the unknown key" "grep -qF 'bus: refused a client from $D: its key $(cut -d' ' -f1 $W/stranger/me.pub) is not in --authorized' $W/bus.log"
ok "the loader logged clear text and the unknown key" \
   "clear loader 'tcp://*:5600' $W/l1.log && grep -q 'loader: refused a client from $D: its key' $W/l1.log"
ok "the sampler service logged clear text" "clear sampler 'tcp://*:5800' $W/sampler.log"

# --- 6. every server stops on SIGTERM, and no host is left behind --------------------------------
for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
ok "every program on the hosts exits on SIGTERM within 2 s" "wait_for '! ip netns pids $(host_ns A) | grep -q . && ! ip netns pids $(host_ns B) | grep -q . && ! ip netns pids $(host_ns C) | grep -q .' 2"
pids=()
it_done
