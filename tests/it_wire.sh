#!/usr/bin/env bash
# tests/it_wire.sh: the wire as a client written from docs/PROTOCOL.md sees it (Debian's
# python3 with zmq and msgpack, decoding with raw=False):
#   - size limits: a 64 MB frame sent to the bus and to a loader is refused before it is
#     read (the process's peak RSS, VmHWM, grows by far less than 64 MB) and both keep serving;
#   - error replies are UTF-8 whatever the request held (a type name that is not UTF-8);
#   - an unknown layout or split is -3 (EPARAM) with the request's req_id (§1.3);
#   - `served` in the loader's announcement counts batches, not info or error replies;
#   - bin/loader get takes any u64 seed, like the wire, and gives the Python client's batch;
#     it refuses a request without --B and --T itself;
#   - bin/loader refuses a --name the announcement cannot carry (1..47 bytes of UTF-8).
set -u
cd "$(dirname "$0")/.."
. tests/lib/pipeline.sh
it_init it_wire 1
PY=/usr/bin/python3
it_synth_data "$W/ds" 400 5 --append-eot
it_pipeline "$W/ds" loader
L=ipc://$W/l0
BUS_PID=${pids[0]} LOADER_PID=${pids[1]}
hwm_kb() { awk '/^VmHWM/ {print $2}' "/proc/$1/status"; }

# --- a 64 MB frame: to the bus's publisher side, and to the loader ----------------------------
bus0=$(hwm_kb "$BUS_PID") ld0=$(hwm_kb "$LOADER_PID")
$PY - "$FT_BUS_PUB" "$L" <<'PYEOF'
import sys, time, zmq
ctx = zmq.Context()
big = b"log/big\x00" + b"x" * (64 << 20)
pub = ctx.socket(zmq.PUB); pub.connect(sys.argv[1])
dealer = ctx.socket(zmq.DEALER); dealer.connect(sys.argv[2])
time.sleep(0.5)                      # PUB: the bus's subscription must have arrived
pub.send(big)
dealer.send_multipart([b"", big[8:]])
time.sleep(2)                        # let both ends take it, or refuse it
pub.close(linger=0); dealer.close(linger=0); ctx.term()
PYEOF
ok "python sent 64 MB frames" "[ $? = 0 ]"
bus1=$(hwm_kb "$BUS_PID") ld1=$(hwm_kb "$LOADER_PID")
echo "peak RSS: bus ${bus0} -> ${bus1} kB, loader ${ld0} -> ${ld1} kB"
ok "bus did not hold the 64 MB frame (peak +$((bus1 - bus0)) kB)" "[ $((bus1 - bus0)) -lt 16384 ]"
ok "loader did not hold the 64 MB frame (peak +$((ld1 - ld0)) kB)" "[ $((ld1 - ld0)) -lt 16384 ]"
ok "bus still forwards" "bin/bus send log/sync log program=it line=after-big >/dev/null && wait_for 'grep -q after-big $W/tap.log' 10"
ok "loader still serves" "bin/loader info --connect $L >/dev/null"

# --- the Python client of PROTOCOL.md: error replies and codes -----------------------------
$PY - "$L" >"$W/py.out" 2>"$W/py.err" <<'PYEOF'
import sys, zmq, msgpack
ctx = zmq.Context()
def ask(m, raw_body=None):
    s = ctx.socket(zmq.REQ); s.setsockopt(zmq.RCVTIMEO, 10000); s.setsockopt(zmq.LINGER, 0)
    s.connect(sys.argv[1])
    s.send(raw_body if raw_body is not None else msgpack.packb(m))
    r = msgpack.unpackb(s.recv(), raw=False)     # raises on a str that is not UTF-8
    s.close()
    return r
req = {"v": 1, "type": "batch_req", "req_id": 7, "seed": 1, "epoch": 0, "step": 0, "rank": 0,
       "world": 1, "B": 2, "T": 8, "layout": "pack", "split": "train"}
# a type name that is not UTF-8 (a str holding other bytes; msgpack-python will not make one)
body = msgpack.packb({"v": 1, "type": "TYPEPLACEHOLDER", "req_id": 5})
r = ask(None, body.replace(b"TYPEPLACEHOLDER", b"\xff\xfe\xfd" + b"batch_req\xc3\xc3\xc3"))
print("badtype", r["type"], r["code"], r["req_id"], "batch_req" in r["message"])
r = ask(dict(req, layout="spiral"));  print("layout", r["code"], r["req_id"])
r = ask(dict(req, split="test", req_id=8));  print("split", r["code"], r["req_id"])
r = ask(dict(req, req_id=9));  print("good", r["type"], r["req_id"])
PYEOF
ok "python client ran (raw=False decodes every reply)" "[ $? = 0 ]"
cat "$W/py.err"
ok "non-UTF-8 type: error -1, message readable" "grep -qx 'badtype error -1 0 True' $W/py.out"
ok "unknown layout: -3 with req_id 7" "grep -qx 'layout -3 7' $W/py.out"
ok "unknown split: -3 with req_id 8" "grep -qx 'split -3 8' $W/py.out"
ok "good request still a batch" "grep -qx 'good batch 9' $W/py.out"

# --- served counts batches -----------------------------------------------------------------
# so far: 1 good batch (python), and info requests from `bin/loader info`; 3 more batches now
for s in 0 1 2; do bin/loader get --connect "$L" --B 2 --T 8 --step $s >/dev/null; done
bin/loader info --connect "$L" >/dev/null
rm -f "$W/ann.log"
bin/bus tap --count 1 --timeout 10 loader/l0 >"$W/ann.log"
ok "announcement: served = 4 batches ($(jq -r .served "$W/ann.log" 2>/dev/null))" "[ \"\$(jq -r .served $W/ann.log)\" = 4 ]"

# --- any u64 seed ----------------------------------------------------------------------------
MAX=18446744073709551615
bin/loader get --connect "$L" --B 2 --T 8 --seed $MAX --epoch $MAX --step 1 >"$W/get.json" 2>"$W/get.err"
ok "get --seed 2^64-1 --epoch 2^64-1 answered (an error reply: epoch too large)" \
    "grep -q 'error -4' $W/get.err"
bin/loader get --connect "$L" --B 2 --T 8 --seed $MAX --step 1 >"$W/get.json" 2>"$W/get.err"
ok "get --seed 2^64-1" "[ $? = 0 ] && jq -e .tokens $W/get.json >/dev/null"
$PY - "$L" $MAX >"$W/py_seed.json" <<'PYEOF'
import sys, struct, json, zmq, msgpack
s = zmq.Context().socket(zmq.REQ); s.setsockopt(zmq.RCVTIMEO, 10000); s.setsockopt(zmq.LINGER, 0)
s.connect(sys.argv[1])
s.send(msgpack.packb({"v": 1, "type": "batch_req", "req_id": 1, "seed": int(sys.argv[2]), "epoch": 0,
                      "step": 1, "rank": 0, "world": 1, "B": 2, "T": 8, "layout": "pack", "split": "train"}))
r = msgpack.unpackb(s.recv(), raw=False)
ids = struct.unpack("<18I", r["tokens"])
print(json.dumps([list(ids[0:9]), list(ids[9:18])], separators=(",", ":")))
PYEOF
ok "same batch as the python client" "[ \"\$(jq -c .tokens $W/get.json)\" = \"\$(cat $W/py_seed.json)\" ]"
bin/loader get --connect "$L" --B 2 --T 8 --seed -1 2>"$W/neg.err" >/dev/null; rc=$?
ok "negative seed refused with one line (rc=$rc)" "[ $rc = 2 ] && [ \$(wc -l < $W/neg.err) = 1 ]"
# --B and --T: 0 was sent as is and came back as the server's parameter error (exit 1)
for a in "" "--B 2" "--T 8"; do
    bin/loader get --connect "$L" $a 2>"$W/bt.err" >/dev/null; rc=$?
    ok "get ${a:-without --B --T}: refused by the client, one line (rc=$rc)" \
        "[ $rc = 2 ] && [ \$(wc -l < $W/bt.err) = 1 ] && grep -q -- '--B and --T are needed' $W/bt.err"
done
bin/loader get --connect "$L" --B 0 --T 8 2>"$W/bt.err" >/dev/null; rc=$?
ok "get --B 0: out of the flag's range, one line (rc=$rc)" "[ $rc = 2 ] && [ \$(wc -l < $W/bt.err) = 1 ] && grep -q -- '--B: 0 is outside' $W/bt.err"
for a in "--world 0" "--rank 2 --world 2"; do
    bin/loader get --connect "$L" --B 2 --T 8 $a 2>"$W/bt.err" >/dev/null; rc=$?
    ok "get $a: refused by the client, one line (rc=$rc: $(head -c 120 "$W/bt.err"))" "[ $rc = 2 ] && [ \$(wc -l < $W/bt.err) = 1 ]"
done
ok "get --help: --B and --T needed, no default 0" \
    "bin/loader get --help | grep -q -- '--B V  *rows (needed)\$' && ! bin/loader get --help | grep -q -- '--[BT] V.*default'"
ok "info still defaults --B 1 --T 1" "bin/loader info --connect $L --help | grep -q -- '--B V  *rows (default: 1)'"
bin/loader --data "$W/nope" --bind "ipc://$W/nope.ep" --quiet 2>"$W/nope.err"; rc=$?
ok "a missing dataset: exit 1, one line, its path once (rc=$rc: $(cat "$W/nope.err"))" \
    "[ $rc = 1 ] && [ \$(wc -l < $W/nope.err) = 1 ] && [ \$(grep -o 'nope' $W/nope.err | wc -l) = 1 ]"
# a second loader on the live one's ipc endpoint: libzmq would replace the socket file and the
# first would serve nobody again; refused in one line, and the first still answers
timeout 10 bin/loader --data "$W/ds" --bind "$L" --quiet 2>"$W/twice.err"; rc=$?
ok "a second loader on a live loader's endpoint: exit 1, one line (rc=$rc: $(head -c 160 "$W/twice.err"))" \
    "[ $rc = 1 ] && [ \$(wc -l < $W/twice.err) = 1 ] && grep -q 'another process is serving there' $W/twice.err"
ok "and the first loader still answers" "bin/loader info --connect $L --timeout-ms 5000 >/dev/null"

# --- --name: the announcement's name field carries 1..47 bytes of UTF-8 ------------------------
# (a longer name was cut there though the topic kept it whole; one not UTF-8 made every
# announcement unsendable, so --discover never saw the loader): refused before binding
N47=$(printf 'n%.0s' $(seq 47))
for bad in "${N47}x" $'bad\xffname' ''; do
    timeout 10 bin/loader --data "$W/ds" --bind "ipc://$W/badname" --name "$bad" --quiet 2>"$W/name.err"; rc=$?
    ok "--name of ${#bad} bytes refused with one line, nothing bound (rc=$rc: $(head -c 120 "$W/name.err"))" \
        "[ $rc = 2 ] && [ \$(wc -l < $W/name.err) = 1 ] && grep -q 'is not a name of 1..47 bytes' $W/name.err && [ ! -e $W/badname ]"
done
bin/loader --data "$W/ds" --bind "ipc://$W/l47" --name "$N47" --quiet >/dev/null 2>&1 & pids+=($!)
bin/bus tap --count 1 --timeout 10 "loader/$N47" >"$W/ann47.log"
ok "a 47-byte --name is announced whole" "[ \"\$(jq -r .name $W/ann47.log)\" = $N47 ]"
it_done
