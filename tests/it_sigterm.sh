#!/usr/bin/env bash
# tests/it_sigterm.sh: every program exits within 2 s of SIGTERM, under load:
#   - bin/bus, stopped at random moments under publish and subscribe load by a client written
#     from docs/PROTOCOL.md (tests/lib/bus_stress.py: late subscribers joining and leaving,
#     malformed and non-UTF-8 ckpt events, ckpt events of 260 runs evicting the cache, the
#     publisher closed, 40 publishers closing at once): FT_STRESS_N times, 12 by default here;
#     `make stress` runs it 200 times (FT_STRESS_N=200), as the issue that found the hang asked;
#   - bin/bus tap under a flood of events; bin/loader serving a client that keeps 16 requests
#     in flight; bin/trainer training, and waiting for a batch no loader will send; bin/evaluator
#     in the middle of a long evaluation; bin/sampler --serve decoding for 8 clients;
#     bin/tokenizer encoding a long input from a pipe; bin/live streaming to 8 pages; the test
#     relay (tests/lib/relay.py) carrying a stream.
# Each stop is timed from the signal to the process's end, and each program's own clean end is
# checked where it has one (the stop line, a checkpoint, exit status 0), or, for the tokenizer,
# that what it left is refused as incomplete. The programs under test run at nice -10 when the
# test runs as root (the load generators at the normal priority): on a machine shared with
# other jobs (load 20 on 2 cores was seen here) a process starved of CPU took 2 s to unmap
# 128 MiB after its clean stop, which says nothing about the program; in CI it changes nothing.
set -u
cd "$(dirname "$0")/.."
. tests/lib/pipeline.sh
it_init it_sigterm 1
PY=/usr/bin/python3
LIMIT_MS=2000
HI=(); [ "$(id -u)" = 0 ] && HI=(nice -n -10) # the programs under test (above)

# stop PID: SIGTERM, then the milliseconds until PID is gone (10000 when it is not)
stop() {
    local t0; t0=$(date +%s%N)
    kill -TERM "$1" 2>/dev/null
    wait_for "! kill -0 $1 2>/dev/null" 10 || { echo 10000; return; }
    echo $((($(date +%s%N) - t0) / 1000000))
}
# stop_ok NAME PID: one check, "NAME exits within 2 s of SIGTERM"
stop_ok() { local ms; ms=$(stop "$2"); echo "$1: $ms ms"; ok "$1 exits within 2 s of SIGTERM ($ms ms)" "[ $ms -le $LIMIT_MS ]"; }

# --- bin/bus: the stress test ---------------------------------------------------------------------
n=${FT_STRESS_N:-12}
mkdir -p "$W/stress"
"${HI[@]}" $PY tests/lib/bus_stress.py "$n" "$W/stress" >"$W/stress.log" 2>&1
ok "bin/bus stopped at random moments under load, $n times: every exit within 2 s, status 0, stop line ($(tail -n 2 "$W/stress.log" | head -n 1))" \
   "tail -n 1 $W/stress.log | grep -qx '$n passed, 0 failed'"
grep '^iteration' "$W/stress.log" | head -n 5

# --- the pipeline's programs, each under load ------------------------------------------------------
it_synth_data "$W/ds" 20000 7
it_pipeline "$W/ds" metrics
MODEL="--d-model 32 --layers 2 --heads 4 --kv-heads 2 --d-ff 64 --seq-len 32 --batch 4 --warmup 5 --lr 3e-3 --threads 1"

# bin/bus tap under a flood: a publisher sends events as fast as it can
$PY - "$FT_BUS_PUB" >/dev/null 2>&1 <<'PYEOF' & flood=$!; pids+=($flood)
import sys, zmq, msgpack
p = zmq.Context().socket(zmq.PUB); p.connect(sys.argv[1])
m = b"metrics/flood\x00" + msgpack.packb({"v": 1, "type": "metrics", "run": "flood", "step": 1, "time": 1.0, "values": {"loss": 1.0}})
while True:
    p.send(m)
PYEOF
"${HI[@]}" bin/bus tap metrics/flood >"$W/flood.out" 2>/dev/null & tap=$!; pids+=($tap)
wait_for "[ -s $W/flood.out ]" 10
stop_ok "bin/bus tap, printing a flood of events" $tap

# bin/loader, serving a client that keeps 16 requests in flight
"${HI[@]}" bin/loader --data "$W/ds" --bind "ipc://$W/l1" --name l1 >"$W/l1.log" 2>&1 & l1=$!; pids+=($l1)
bin/loader bench --connect "ipc://$W/l1" --B 64 --T 256 --batches 1000000 --window 16 >/dev/null 2>&1 & bench=$!; pids+=($bench)
sleep 1
stop_ok "bin/loader, serving batches" $l1
ok "and it logged its stop line" "grep -q 'loader: stopping after [0-9]* batches served' $W/l1.log"
kill -9 "$bench" 2>/dev/null

# bin/trainer, training; then one waiting for a batch that never comes
"${HI[@]}" bin/trainer --loaders "ipc://$W/l0" $MODEL --run t --run-dir "$W/t" --steps 1000000 --ckpt-every 0 2>"$W/t.log" & tr=$!; pids+=($tr)
wait_for "grep -q '^step 20/' $W/t.log" 30
stop_ok "bin/trainer, training" $tr
ok "and it wrote a checkpoint of the last finished step and said so" "grep -q 'stopped by signal at step [0-9]*; checkpoint' $W/t.log"
"${HI[@]}" bin/trainer --loaders "ipc://$W/nobody" $MODEL --run w --run-dir "$W/w" --steps 100 2>"$W/w.log" & tw=$!; pids+=($tw)
sleep 1.5
stop_ok "bin/trainer, waiting for a loader that never answers" $tw

# bin/evaluator in the middle of a long evaluation (the whole validation split, batch by batch)
"${HI[@]}" bin/evaluator --run t --run-dir "$W/t" --task val --data "$W/ds" --val-docs 10000 --batches 0 --seq-len 32 \
    --batch 2 --no-bus --out "$W/evals.jsonl" >/dev/null 2>"$W/eval.log" & ev=$!; pids+=($ev)
sleep 2
ok "(the evaluator is still evaluating)" "kill -0 $ev && [ ! -s $W/evals.jsonl ]"
stop_ok "bin/evaluator, evaluating" $ev

# bin/sampler --serve, decoding for 8 clients
ck=$(ls -d "$W"/t/ckpt-* | tail -n 1)
"${HI[@]}" bin/sampler --ckpt "$ck" --serve "ipc://$W/gen" --threads 1 >/dev/null 2>"$W/serve.log" & srv=$!; pids+=($srv)
wait_for "grep -q '^sampler: serving' $W/serve.log" 20
for i in 1 2 3 4 5 6 7 8; do
    bin/sampler --connect "ipc://$W/gen" --prompt 'K>' --n 4 --max-new 1000 --seed $i >/dev/null 2>&1 & pids+=($!)
done
sleep 1.5
stop_ok "bin/sampler --serve, decoding for 8 clients" $srv

# bin/tokenizer, encoding a long input read from a pipe
line=$(head -c 3000 data/brown.txt 2>/dev/null | tr '\n' ' '); [ -n "$line" ] || line=$(head -c 3000 "$W/ds.txt" | tr '\n' ' ')
(yes "$line" | head -c 400000000 | exec "${HI[@]}" bin/tokenizer encode --vocab gpt2 --out "$W/big.ds" - 2>/dev/null) & pids+=($!); disown $!
wait_for "[ -e $W/big.ds/data.mdb ]" 20
sleep 1
tok=$(pgrep -f "tokenizer encode --vocab gpt2 --out $W/big.ds" | head -n 1)
ok "(the tokenizer is still encoding)" "[ -n '$tok' ]"
stop_ok "bin/tokenizer encode, on a long input" "${tok:-0}"
ok "and what it left is refused as an incomplete dataset" "! bin/tokenizer info $W/big.ds >/dev/null 2>&1"

# bin/live, streaming the bus's flood (still running) to 8 pages while others ask for its state
# (curl clients: without curl bin/live would stop with nobody connected, and prove nothing)
ok "curl is installed (make deps)" "command -v curl >/dev/null"
"${HI[@]}" bin/live --runs "$W" --port 0 >"$W/live.url" 2>"$W/live.log" & lv=$!; pids+=($lv)
wait_for "grep -q '^live: http' $W/live.url" 20
url=$(sed -n 's/^live: //p' "$W/live.url")
for i in 1 2 3 4 5 6 7 8; do curl -sN "${url}api/events?since=0" >/dev/null 2>&1 & pids+=($!); done
(while :; do curl -s "${url}api/state" >/dev/null 2>&1; done) & pids+=($!)
sleep 1
stop_ok "bin/live, streaming to 8 pages" $lv

# the relay of the multi-host tests, carrying a stream
port=$(it_port_base 2)
$PY tests/lib/echo.py serve "127.0.0.1:$port" >/dev/null 2>&1 & pids+=($!)
"${HI[@]}" $PY tests/lib/relay.py --listen "127.0.0.1:$((port + 1))" --to "127.0.0.1:$port" --delay-ms 50 --loss 0.05 2>"$W/relay.log" & relay=$!; pids+=($relay)
wait_for "grep -q '^relay:' $W/relay.log" 10
$PY - "$((port + 1))" >/dev/null 2>&1 <<'PYEOF' & pids+=($!)
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
while True:
    s.sendall(b"x" * 65536); s.recv(65536)
PYEOF
wait_for "ss -Htn state established '( sport = :$((port + 1)) )' | grep -q ." 20
sleep 0.5
stop_ok "the test relay, carrying a stream" $relay
ok "and it logged its stop line" "grep -q '^relay: stopping: 1 connections' $W/relay.log"
it_done
