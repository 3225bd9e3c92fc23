#!/usr/bin/env bash
# tests/it_bus.sh: bin/bus end to end on ipc endpoints under $FT_TEST_TMP.
#   - tap prints metrics/ckpt events as JSON lines (checked with jq), filters by prefix;
#   - the bus drops a malformed event, and a ckpt whose path is not UTF-8, instead of
#     forwarding it (and never puts the latter in the welcome message, which the Python
#     subscriber of docs/PROTOCOL.md decodes with raw=False);
#   - a subscriber that connects AFTER the checkpoints were published receives the latest
#     ckpt of each of two runs first (the XPUB welcome message), from bin/bus tap and from
#     a Python client written from docs/PROTOCOL.md;
#   - SIGTERM/SIGINT stop bus and tap cleanly; bad flags, a busy endpoint and one endpoint for
#     --pub and --sub fail with one line;
#   - the wire unit test and fuzz corpus run again under ASan/UBSan.
set -u
cd "$(dirname "$0")/.."
BASE=${FT_TEST_TMP:-$(mktemp -d /tmp/ft-test.XXXXXX)}
TMP=$(mktemp -d "$BASE/it_bus.XXXXXX")
PUB=ipc://$TMP/pub SUB=ipc://$TMP/sub
PY=/usr/bin/python3
pass=0 fail=0
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
}
trap cleanup EXIT

check() { # check "what" command...
    local what=$1; shift
    if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $what"; fi
}
# Waits (up to ~20 s, generous for a loaded machine) until file $1 has at least $2 lines.
wait_lines() {
    for _ in $(seq 200); do
        [ -f "$1" ] && [ "$(wc -l <"$1")" -ge "$2" ] && return 0
        sleep 0.1
    done
    return 1
}
send() { bin/bus send --pub "$PUB" --wait-ms 10000 "$@"; }

[ -x bin/bus ] || { echo "bin/bus not built"; echo "0 passed, 1 failed"; exit 1; }

# --- the bus -------------------------------------------------------------------------------
bin/bus --pub "$PUB" --sub "$SUB" 2>"$TMP/bus.log" &
BUS=$!; pids+=("$BUS")
check "bus answers a publisher" send log/up log program=it line=up

# --- a live tap ------------------------------------------------------------------------------
bin/bus tap --sub "$SUB" --timeout 60 metrics ckpt log/sync >"$TMP/tap.out" 2>"$TMP/tap.err" &
TAP=$!; pids+=("$TAP")
# a SUB's subscription reaches the bus some time after connect: ping until the tap hears us
for _ in $(seq 100); do
    send log/sync log program=it line=sync
    [ -s "$TMP/tap.out" ] && break
    sleep 0.1
done
check "tap is connected" test -s "$TMP/tap.out"
base=$(wc -l <"$TMP/tap.out")

send metrics/r1 metrics run=r1 step=10 loss=3.25 lr=0.001
send log/other log program=it line="not subscribed"
send ckpt/r1 ckpt run=r1 step=100 path=/ck/r1/100 model=free
send ckpt/r2 ckpt run=r2 step=7 path=/ck/r2/7 model=llama
send ckpt/r1 ckpt run=r1 step=50 path=/ck/r1/50 model=free   # older: must not replace 100
send ckpt/r2 ckpt run=r2 step=9 path=/ck/r2/9 model=llama
# straight from Python: a malformed event (topic, NUL, then the never-used byte 0xc1), and a
# ckpt of run r3 whose path is a msgpack str holding bytes that are not UTF-8
$PY - "$PUB" <<'PYEOF'
import sys, time, zmq, msgpack
ctx = zmq.Context()
s = ctx.socket(zmq.XPUB)          # XPUB so we can wait for the bus's subscription
s.connect(sys.argv[1])
s.setsockopt(zmq.RCVTIMEO, 10000)
s.recv()
s.send(b"metrics/bad\x00\xc1")
time.sleep(1.1)                   # the bus logs at most one malformed event a second
body = msgpack.packb({"v": 1, "type": "ckpt", "run": "r3", "step": 500, "time": 1.0,
                      "path": "/ck/r3/PLACEHOLDER", "model": "free"}, use_bin_type=True)
s.send(b"ckpt/r3\x00" + body.replace(b"PLACEHOLDER", b"\xff\xfe-not-utf8"))
s.close(linger=2000)
ctx.term()
PYEOF
check "python publisher ran" test $? -eq 0
send log/sync log program=it line=after-bad   # its arrival shows the bad ones went first

want=$((base + 6))   # metrics, 4 ckpt, the sync line after the bad ones
check "tap printed $want lines" wait_lines "$TMP/tap.out" "$want"
kill -INT "$TAP"; wait "$TAP"; rc=$?
check "tap exits 0 on SIGINT (rc=$rc)" test $rc -eq 0
check "every tap line is JSON" jq -e . "$TMP/tap.out" >/dev/null
ev() { grep -v '"log/sync"' "$TMP/tap.out"; }
check "metrics: run, step, loss" \
    test "$(ev | jq -r 'select(.type=="metrics") | "\(.run) \(.step) \(.values.loss) \(.values.lr)"')" = "r1 10 3.25 0.001"
check "four ckpt events in order" \
    test "$(ev | jq -r 'select(.type=="ckpt") | "\(.run):\(.step)"' | tr '\n' ' ')" = "r1:100 r2:7 r1:50 r2:9 "
check "ckpt path and model" \
    test "$(ev | jq -r 'select(.type=="ckpt" and .step==7) | "\(.path) \(.model) \(.topic)"')" = "/ck/r2/7 llama ckpt/r2"
check "unsubscribed topic filtered out" test -z "$(ev | jq -r 'select(.topic=="log/other")')"
check "malformed event not forwarded" test -z "$(ev | jq -r 'select(.error or .topic=="metrics/bad")')"
check "ckpt with a path that is not UTF-8 not forwarded" test -z "$(ev | jq -r 'select(.run=="r3")')"
check "bus logged the malformed event" grep -q 'malformed event on "metrics/bad".*(dropped)' "$TMP/bus.log"
check "bus logged the bad ckpt" grep -q 'malformed event on "ckpt/r3".*UTF-8' "$TMP/bus.log"

# --- late subscribers: the welcome message ---------------------------------------------------
bin/bus tap --sub "$SUB" --count 1 --timeout 20 ckpt >"$TMP/late.out"
check "late tap got one event (rc=$?)" test -s "$TMP/late.out"
check "welcome: topic ckpt/, type ckpt_index" \
    test "$(jq -r '"\(.topic) \(.type)"' "$TMP/late.out")" = "ckpt/ ckpt_index"
check "welcome: latest ckpt of both runs" \
    test "$(jq -r '[.items[] | "\(.run):\(.step):\(.path)"] | sort | join(" ")' "$TMP/late.out")" = \
         "r1:100:/ck/r1/100 r2:9:/ck/r2/9"
# the Python client of docs/PROTOCOL.md, subscribing late to "ckpt"
$PY - "$SUB" >"$TMP/py.out" <<'PYEOF'
import sys, zmq, msgpack
ctx = zmq.Context()
s = ctx.socket(zmq.SUB)
s.setsockopt(zmq.SUBSCRIBE, b"ckpt")      # subscribe BEFORE connect to get the welcome
s.setsockopt(zmq.RCVTIMEO, 20000)
s.connect(sys.argv[1])
frame = s.recv()
topic, _, body = frame.partition(b"\x00")
msg = msgpack.unpackb(body, raw=False)
assert topic == b"ckpt/" and msg["v"] == 1 and msg["type"] == "ckpt_index", (topic, msg)
print(" ".join(sorted(f'{i["run"]}:{i["step"]}' for i in msg["items"])))
s.close(linger=0)
ctx.term()
PYEOF
check "python late subscriber decodes the welcome" test "$(cat "$TMP/py.out")" = "r1:100 r2:9"
# a late "metrics" subscriber gets no welcome (its SUB filters the ckpt/ frame out)
bin/bus tap --sub "$SUB" --count 1 --timeout 1 metrics >"$TMP/late_m.out"; rc=$?
check "late metrics tap: nothing, rc 1 (rc=$rc)" test $rc -eq 1 -a ! -s "$TMP/late_m.out"

# --- bin/bus send's metrics carry a precision the protocol allows, or none ---------------------
# (it sent precision '' when none was given: PROTOCOL.md §2.3 allows fp32, bf16, tf32 or absent)
$PY - "$SUB" "$PUB" >"$TMP/prec.out" 2>&1 <<'PYEOF'
import subprocess, sys, zmq, msgpack
sub_ep, pub_ep = sys.argv[1:3]
s = zmq.Context().socket(zmq.SUB)
s.setsockopt(zmq.SUBSCRIBE, b"metrics/prec")
s.setsockopt(zmq.LINGER, 0)
s.connect(sub_ep)
def send(*kv):
    subprocess.run(["bin/bus", "send", "--pub", pub_ep, "metrics/prec", "metrics", "run=prec", *kv], check=True)
got = []
for attempt in range(50):           # until the subscription has reached the bus
    send("step=0", "loss=1")
    if s.poll(200):
        break
while s.poll(100):
    s.recv()
send("step=1", "loss=1"); send("step=2", "loss=1", "precision=bf16")
for _ in range(2):
    assert s.poll(10000), "no event"
    m = msgpack.unpackb(s.recv().partition(b"\x00")[2], raw=False)
    got.append("%d:%s" % (m["step"], m.get("precision", "absent")))
print(" ".join(got))
PYEOF
check "bin/bus send metrics: precision absent when not given, sent when given ($(tail -c 200 "$TMP/prec.out"))" \
    test "$(cat "$TMP/prec.out")" = "1:absent 2:bf16"
check "and tap prints no empty precision" test -z "$(ev | jq -r 'select(.type=="metrics" and has("precision"))')"

# --- bad input and shutdown ------------------------------------------------------------------
bin/bus --bogus 2>"$TMP/e1"; rc=$?
check "unknown flag: exit 2, one line" test $rc -eq 2 -a "$(wc -l <"$TMP/e1")" -eq 1
bin/bus send --pub "$PUB" log/x nosuchtype a=b 2>"$TMP/e2"; rc=$?
check "send unknown type: exit 2" test $rc -eq 2
bin/bus send --pub "$PUB" metrics/x metrics step=-3 2>"$TMP/e3"; rc=$?
check "send bad number: exit 2" test $rc -eq 2 -a "$(wc -l <"$TMP/e3")" -eq 1
bin/bus send --pub "ipc://$TMP/nobody" --wait-ms 300 log/x log line=x 2>"$TMP/e4"; rc=$?
check "send with no bus: exit 1" test $rc -eq 1 -a "$(wc -l <"$TMP/e4")" -eq 1
# a second bus on tcp ports already taken fails with one line
port=$(. tests/lib/pipeline.sh && it_port_base 2)
bin/bus --pub tcp://127.0.0.1:$port --sub tcp://127.0.0.1:$((port + 1)) 2>/dev/null &
B2=$!; pids+=("$B2")
sleep 0.5
bin/bus --pub tcp://127.0.0.1:$port --sub tcp://127.0.0.1:$((port + 1)) 2>"$TMP/e5"; rc=$?
check "endpoint in use: exit 1 (rc=$rc)" test $rc -eq 1 -a "$(wc -l <"$TMP/e5")" -eq 1
kill -TERM "$B2"; wait "$B2"
# one endpoint for --pub and --sub: over ipc the second bind took the path and the bus started
# but forwarded nothing; refused before binding (also as another spelling of the same path)
for same in "ipc://$TMP/same ipc://$TMP/same" "ipc://$TMP/same ipc://$TMP/./same" "tcp://127.0.0.1:$port tcp://127.0.0.1:$port"; do
    set -- $same
    timeout 10 bin/bus --pub "$1" --sub "$2" 2>"$TMP/e6"; rc=$?
    check "--pub $1 --sub $2 refused: exit 2, one line (rc=$rc: $(head -c 160 "$TMP/e6"))" \
        test $rc -eq 2 -a "$(wc -l <"$TMP/e6")" -eq 1 -a ! -e "$TMP/same"
done
# a second bus on the ipc endpoints of the live one: libzmq would remove the first's socket
# files and bind anew, cutting the first off for good; refused, and the first still forwards
timeout 10 bin/bus --pub "$PUB" --sub "$SUB" 2>"$TMP/e7"; rc=$?
check "a second bus on the live bus's ipc endpoints refused: exit 1, one line (rc=$rc: $(head -c 160 "$TMP/e7"))" \
    test $rc -eq 1 -a "$(wc -l <"$TMP/e7")" -eq 1
check "and it names the live one" grep -q 'another process is serving there' "$TMP/e7"
bin/bus send --pub "$PUB" --wait-ms 2000 log/x log program=x line=still 2>"$TMP/e8"; rc=$?
check "the first bus still answers (rc=$rc: $(head -c 160 "$TMP/e8"))" test $rc -eq 0
# a stale socket file (its bus killed) is no obstacle
stale_pub="ipc://$TMP/stale.pub" stale_sub="ipc://$TMP/stale.sub"
bin/bus --pub "$stale_pub" --sub "$stale_sub" 2>/dev/null & B3=$!
for _ in $(seq 50); do [ -S "$TMP/stale.pub" ] && break; sleep 0.1; done
kill -9 "$B3"; wait "$B3" 2>/dev/null
bin/bus --pub "$stale_pub" --sub "$stale_sub" 2>"$TMP/e9" & B3=$!; pids+=("$B3")
sleep 0.5
check "a bus starts over the socket files of a killed one" kill -0 "$B3"
kill -TERM "$B3"; wait "$B3"
kill -TERM "$BUS"; wait "$BUS"; rc=$?
check "bus exits 0 on SIGTERM (rc=$rc)" test $rc -eq 0
check "bus logged its stop line" grep -q 'stopping:.*2 runs kept' "$TMP/bus.log"
pids=()

# --- sanitizers --------------------------------------------------------------------------------
if command -v clang >/dev/null || command -v gcc >/dev/null; then
    CCX=$(command -v clang || command -v gcc)
    SRCS="bus/wire.c bus/wire_schema.c bus/json.c bus/wire_text.c bus/utf8.c common/errmsg.c"
    if $CCX -std=gnu11 -O1 -g -I. -D_GNU_SOURCE -fsanitize=address,undefined \
        -fno-sanitize-recover=undefined tests/test_wire.c $SRCS -lmsgpackc -ljansson -lm \
        -o "$TMP/test_wire_asan" 2>"$TMP/asan_build.log"; then
        "$TMP/test_wire_asan" >"$TMP/asan.log" 2>&1; rc=$?
        check "test_wire under ASan/UBSan (rc=$rc)" test $rc -eq 0
    else
        check "ASan build of test_wire" false; cat "$TMP/asan_build.log"
    fi
fi
if command -v clang >/dev/null; then   # clang is on every machine here (make deps); a failed build fails
    if clang -std=gnu11 -g -O1 -I. -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
            -fno-sanitize-recover=undefined tests/fuzz/fuzz_wire.c $SRCS \
            -lmsgpackc -lm -o "$TMP/fuzz_wire" 2>"$TMP/fuzz_build.log"; then
        # -runs=0: execute each seed once (decode, re-encode, compare), no mutation
        "$TMP/fuzz_wire" -runs=0 tests/fuzz/corpus/wire >"$TMP/fuzz.log" 2>&1; rc=$?
        check "fuzz target on the seed corpus (rc=$rc)" test $rc -eq 0
    else
        check "fuzz target builds" false; cat "$TMP/fuzz_build.log"
    fi
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
