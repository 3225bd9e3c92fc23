#!/usr/bin/env bash
# tests/it_secure.sh: who may talk to whom (docs/PROTOCOL.md §1.4), across TCP on 127.0.0.1
# with random ports, every socket CURVE:
#   - bin/bus keygen writes PREFIX.key (mode 0600) and PREFIX.pub, and keeps existing keys;
#   - a pipeline with keys runs end to end: bus, loader, a few trainer steps, the ckpt event
#     received by an authenticated subscriber, an evaluator and a sampler service following it;
#   - a client without CURVE is refused on each kind of socket (bus publisher side, bus
#     subscriber side, loader, sampler service), and so is one whose key is not authorized;
#   - without keys, an endpoint that is not loopback or ipc is refused with one line by every
#     program unless --insecure;
#   - the sampler and the evaluator open only checkpoints inside their run directory, whatever
#     path a ckpt event names.
set -u
cd "$(dirname "$0")/.."
. tests/lib/pipeline.sh
it_init it_secure 1
export LC_ALL=C
PY=/usr/bin/python3
unset FT_KEY FT_TRUST FT_AUTHORIZED FT_INSECURE FT_ALLOW_ANY_CLIENT
it_synth_data "$W/ds" 600 7 --append-eot
K=$W/keys
mkdir -p "$K"

# --- keys ------------------------------------------------------------------------------------
for n in bus loader trainer sampler client; do bin/bus keygen --out "$K/$n" >"$K/$n.printed" || break; done
ok "keygen: five key pairs" "[ \$(ls $K/*.key | wc -l) = 5 ] && [ \$(ls $K/*.pub | wc -l) = 5 ]"
ok "keygen: .key is mode 600" "[ \"\$(stat -c %a $K/bus.key)\" = 600 ]"
ok "keygen: prints the public key, which starts the .pub line" \
    "[ \"\$(cut -d' ' -f1 $K/bus.pub)\" = \"\$(cat $K/bus.printed)\" ] && [ \$(wc -c < $K/bus.printed) = 41 ]"
cp "$K/bus.key" "$W/bus.key.before"
bin/bus keygen --out "$K/bus" >/dev/null 2>"$W/e"; rc=$?
ok "keygen: existing keys kept (rc=$rc), one line" "[ $rc = 1 ] && [ \$(wc -l < $W/e) = 1 ] && cmp -s $K/bus.key $W/bus.key.before"
cp "$K/bus.key" "$W/open.key"; chmod 644 "$W/open.key"
bin/bus --key "$W/open.key" --allow-any-client 2>"$W/e"; rc=$?
ok "a secret key others may read is refused (rc=$rc)" "[ $rc = 2 ] && grep -q 'chmod 600' $W/e"

P=$(it_port_base 12)
BUSP=tcp://127.0.0.1:$P BUSS=tcp://127.0.0.1:$((P + 1)) LEP=tcp://127.0.0.1:$((P + 2)) SEP=tcp://127.0.0.1:$((P + 3))
export FT_BUS_PUB=$BUSP FT_BUS_SUB=$BUSS
key() { cut -d' ' -f1 "$K/$1.pub"; }
printf '# servers\n%s %s\n%s %s\n%s %s\n%s %s\n' "$BUSP" "$(key bus)" "$BUSS" "$(key bus)" \
    "$LEP" "$(key loader)" "$SEP" "$(key sampler)" >"$K/trust"
cat "$K/loader.pub" "$K/trainer.pub" "$K/sampler.pub" "$K/client.pub" >"$K/authorized"
SRV="--authorized $K/authorized"

# --- the pipeline, every socket CURVE ---------------------------------------------------------
bin/bus --key "$K/bus.key" $SRV 2>"$W/bus.log" & pids+=($!)
bin/loader --data "$W/ds" --bind "$LEP" --name l0 --quiet --key "$K/loader.key" $SRV --trust "$K/trust" \
    2>"$W/l0.log" & pids+=($!)
# the subscriber takes its key and trust file from the environment
FT_KEY=$K/client.key FT_TRUST=$K/trust bin/bus tap ckpt loader log/sync >"$W/tap.log" 2>"$W/tap.err" & pids+=($!)
CSEND() { bin/bus send --key "$K/client.key" --trust "$K/trust" "$@"; }
ok "authenticated tap hears an authenticated publisher" \
    "wait_for 'CSEND log/sync log program=it line=ping >/dev/null 2>&1; grep -q ping $W/tap.log' 15"
ok "the loader announces itself over CURVE" "wait_for 'grep -q \"\\\"loader/l0\\\"\" $W/tap.log' 10"
MODEL="--d-model 32 --layers 2 --heads 4 --kv-heads 2 --d-ff 64 --seq-len 32 --batch 4 --warmup 2"
bin/trainer --loaders "$LEP" $MODEL --run r1 --run-dir "$W/r1" --steps 10 --ckpt-every 5 \
    --key "$K/trainer.key" --trust "$K/trust" 2>"$W/trainer.log"
ok "trainer ran over CURVE (rc=$?)" "[ -d $W/r1/ckpt-00000010 ]"
# (jq -s and any: jq 1.6's -e reads only the last line's result, so a loader announcement that
# came after the ckpt event made a select() fail)
ok "the subscriber received the ckpt event of step 10" \
    "wait_for 'jq -s -e \"any(.[]; .type==\\\"ckpt\\\" and .run==\\\"r1\\\" and .step==10)\" $W/tap.log >/dev/null' 10"
bin/loader info --connect "$LEP" --key "$K/client.key" --trust "$K/trust" >"$W/info.json"
ok "loader info with a key" "jq -e .steps_per_epoch $W/info.json >/dev/null"

# --- clients without CURVE, or with a key the servers do not know -----------------------------
$PY - "$BUSP" "$BUSS" "$LEP" "$(key loader)" >"$W/plain.out" 2>&1 <<'PYEOF'
import sys, time, zmq, msgpack
busp, buss, lep, loader_key = sys.argv[1:5]
ctx = zmq.Context()
ev = lambda line: b"log/sync\x00" + msgpack.packb({"v": 1, "type": "log", "program": "py", "line": line})
pub = ctx.socket(zmq.PUB); pub.setsockopt(zmq.LINGER, 0); pub.connect(busp)
sub = ctx.socket(zmq.SUB); sub.setsockopt(zmq.LINGER, 0); sub.setsockopt(zmq.SUBSCRIBE, b""); sub.connect(buss)
# SNDTIMEO as well as RCVTIMEO: once the server has refused the handshake, libzmq may drop the
# connection's pipe, and a REQ socket without a peer blocks in send forever (seen: a CI run hung)
def req_socket():
    s = ctx.socket(zmq.REQ)
    for opt in (zmq.LINGER, 0), (zmq.RCVTIMEO, 3000), (zmq.SNDTIMEO, 3000):
        s.setsockopt(*opt)
    return s
req = req_socket(); req.connect(lep)
stranger = req_socket()
pk, sk = zmq.curve_keypair()
stranger.curve_serverkey = loader_key.encode(); stranger.curve_publickey = pk; stranger.curve_secretkey = sk
stranger.connect(lep)
info = msgpack.packb({"v": 1, "type": "info_req", "req_id": 1, "world": 1, "B": 1, "T": 1,
                      "layout": "pack", "split": "train"})
time.sleep(1)
for _ in range(5):
    pub.send(ev("plaintext-publisher"))
    time.sleep(0.1)
for name, s in (("plain", req), ("stranger", stranger)):
    try:  # a request that cannot even be sent gets no answer either
        s.send(info); s.recv(); print(name, "loader answered")
    except zmq.Again:
        print(name, "loader silent")
try:
    sub.recv(zmq.NOBLOCK); print("plain subscriber received")
except zmq.Again:
    print("plain subscriber silent")
PYEOF
cat "$W/plain.out"
ok "loader: a client without CURVE gets no answer" "grep -qx 'plain loader silent' $W/plain.out"
ok "loader: a CURVE client whose key is not authorized gets no answer" "grep -qx 'stranger loader silent' $W/plain.out"
ok "bus subscriber side: a subscriber without CURVE receives nothing" "grep -qx 'plain subscriber silent' $W/plain.out"
# clear text is refused one of two ways (docs/NETWORK.md §2), by which side reads the other's
# greeting first: a mechanism mismatch, or a client that hung up on our CURVE greeting
PLAIN='(it does not speak CURVE|it broke off its handshake)'
ok "each refusal is logged by the server: clear text on the bus and the loader, an unknown key by the loader" \
   "grep -qE '^bus: refused a client on $BUSS: $PLAIN' $W/bus.log && grep -qE '^loader: refused a client on $LEP: $PLAIN' $W/l0.log && grep -q '^loader: refused a client from 127.0.0.1: its key .* is not in --authorized' $W/l0.log"
CSEND log/sync log program=it line=after-plain >/dev/null
ok "bus publisher side: events of a publisher without CURVE are not forwarded" \
    "wait_for 'grep -q after-plain $W/tap.log' 10 && ! grep -q plaintext-publisher $W/tap.log"
bin/bus send --wait-ms 1500 log/sync log program=it line=no-key-at-all 2>"$W/e"; rc=$?
ok "bin/bus send without keys: no bus accepts it (rc=$rc)" "[ $rc = 1 ]"

# --- the sampler service, and the run directory rule ------------------------------------------
bin/sampler --serve "$SEP" --ckpt "$W/r1/ckpt-00000005" --follow r1 --key "$K/sampler.key" $SRV \
    --trust "$K/trust" 2>"$W/srv.log" & pids+=($!)
ok "sampler reloads the newest checkpoint of its run from the welcome index" \
    "wait_for 'grep -q \"reloaded .*ckpt-00000010\" $W/srv.log' 20"
C() { bin/sampler --connect "$SEP" --key "$K/client.key" --trust "$K/trust" --timeout-ms 20000 --json "$@"; }
C --prompt 'K>' --max-new 4 >"$W/gen.json"
ok "sampler --connect with a key: served by step 10" "[ \"\$(jq -r .step $W/gen.json)\" = 10 ]"
$PY - "$SEP" >"$W/splain.out" <<'PYEOF'
import sys, zmq, msgpack
s = zmq.Context().socket(zmq.REQ)
for opt in (zmq.LINGER, 0), (zmq.RCVTIMEO, 3000), (zmq.SNDTIMEO, 3000):  # see the loader's check above
    s.setsockopt(*opt)
s.connect(sys.argv[1])
msg = msgpack.packb({"v": 1, "type": "gen_req", "req_id": 1, "prompt": "K>", "max_new": 2, "temperature": 1.0,
                      "top_k": 0, "top_p": 1.0, "seed": 1, "latent": "independent", "index": 0, "group": 1, "flags": 0})
try:
    s.send(msg); s.recv(); print("answered")
except zmq.Again:
    print("silent")
PYEOF
ok "sampler service: a client without CURVE gets no answer" "grep -qx silent $W/splain.out"
# a checkpoint copied elsewhere and announced as newer: not opened
mkdir -p "$W/elsewhere"
cp -r "$W/r1/ckpt-00000010" "$W/elsewhere/ckpt-00000010"
bin/evaluator --run r1 --run-dir "$W/r1" --task val --data "$W/ds" --batches 1 --seq-len 32 --batch 2 \
    --key "$K/client.key" --trust "$K/trust" --out "$W/eval.jsonl" >/dev/null 2>"$W/eval.log" & pids+=($!)
ok "evaluator evaluates step 10 over CURVE" "wait_for 'grep -qs \"\\\"step\\\":10\" $W/eval.jsonl' 60"
CSEND ckpt/r1 ckpt run=r1 step=20 path="$W/elsewhere/ckpt-00000010" model=llama >/dev/null
CSEND ckpt/r1 ckpt run=r1 step=30 path="$W/r1/../elsewhere/ckpt-00000010" model=llama >/dev/null
ok "sampler refuses a path outside its run directory" \
    "wait_for 'grep -q \"not reloading $W/elsewhere/ckpt-00000010: not a checkpoint inside\" $W/srv.log' 10"
ok "... and one that leaves it with .." "wait_for 'grep -q \"not reloading $W/r1/../elsewhere\" $W/srv.log' 10"
CSEND ckpt/r1 ckpt run=r1 step=40 path="$W/r1/ckpt-00000040" model=llama >/dev/null
ok "... and says a path that is not there is not there" \
    "wait_for 'grep -q \"not reloading $W/r1/ckpt-00000040: No such file or directory\" $W/srv.log' 10"
C --prompt 'K>' --max-new 4 >"$W/gen2.json"
ok "sampler still serves step 10 from the run directory" \
    "[ \"\$(jq -r '\"\\(.step) \\(.ckpt)\"' $W/gen2.json)\" = \"10 $W/r1/ckpt-00000010\" ]"
ok "evaluator says it ignores the path outside" \
    "wait_for 'grep -q \"ignoring a ckpt event of run r1: $W/elsewhere/ckpt-00000010 is not a checkpoint inside\" $W/eval.log' 10"
ok "evaluator evaluated nothing outside" "! grep -q elsewhere $W/eval.jsonl"

# --- without keys, endpoints that are not loopback or ipc are refused unless --insecure ------
unset FT_BUS_PUB FT_BUS_SUB
Q=$((P + 10))
one_line() { "$@" >/dev/null 2>"$W/e" </dev/null; rc=$?; [ $rc != 0 ] && [ "$(wc -l < "$W/e")" = 1 ] && grep -q -- --insecure "$W/e"; }
ok "bus refuses to bind 0.0.0.0 in the clear" "one_line bin/bus --pub tcp://0.0.0.0:$Q --sub tcp://0.0.0.0:$((Q + 1))"
ok "loader refuses to bind 0.0.0.0 in the clear" "one_line bin/loader --data $W/ds --bind tcp://0.0.0.0:$Q"
ok "loader client refuses a remote loader in the clear" "one_line bin/loader info --connect tcp://10.255.255.1:$Q"
ok "trainer refuses a remote loader in the clear" \
    "one_line bin/trainer --loaders tcp://10.255.255.1:$Q $MODEL --run x --run-dir $W/x --steps 5"
ok "sampler refuses to serve on 0.0.0.0 in the clear" \
    "one_line bin/sampler --serve tcp://0.0.0.0:$Q --ckpt $W/r1/ckpt-00000010"
ok "tap refuses a remote bus in the clear" "one_line bin/bus tap --sub tcp://10.255.255.1:$Q --timeout 1"
bin/bus --pub tcp://0.0.0.0:$Q --sub tcp://0.0.0.0:$((Q + 1)) --insecure 2>"$W/ins.log" & ipid=$!; pids+=($ipid)
ok "--insecure: the bus binds 0.0.0.0" "wait_for 'grep -qs publishers $W/ins.log' 10 && kill -0 $ipid"
FT_INSECURE=1 bin/loader info --connect tcp://10.255.255.1:$Q --timeout-ms 300 2>"$W/e" >/dev/null
ok "FT_INSECURE=1: the client connects (and times out)" "grep -q 'no reply' $W/e"
it_done
