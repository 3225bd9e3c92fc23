#!/usr/bin/env bash
# tests/it_bad_frames.sh: what the loader and the trainer do with what they cannot use
# (docs/PROTOCOL.md §1.3, "Bad requests and bad replies"; python3-zmq as the peer):
#   1. the loader: a request that does not decode, one of another type, one with a bad field,
#      one of too many frames, each get one line that says what was wrong and from where (the
#      peer's address over TCP, its process over ipc, with its routing id), also where worker
#      threads (--threads 2) answer; a flood is said 10 lines a second plus one line with the
#      count; the loader keeps serving, and the lines reach the bus too;
#   2. the trainer: replies that do not decode, with a frame too many or a non-empty delimiter,
#      a batch it did not ask for, a message of another type: one line each naming the loader
#      (a relay in front of a real loader spoils the first replies); the run finishes as the
#      re-issued requests are answered;
#   3. data.mdb truncated under a running loader (another process cut it): the next batch
#      gets an error reply that says so, and the loader exits 1 with that line, instead of
#      dying of SIGBUS without a word.
set -u
cd "$(dirname "$0")/.."
. tests/lib/pipeline.sh
it_init it_bad_frames 1
PY=/usr/bin/python3
it_synth_data "$W/ds" 2000 5
it_pipeline "$W/ds" log
P=$(it_port_base 2)
bin/loader --data "$W/ds" --bind "ipc://$W/la" --name la >/dev/null 2>"$W/la.log" & la=$!; pids+=($la)
bin/loader --data "$W/ds" --bind "tcp://127.0.0.1:$P" --name lt >/dev/null 2>"$W/lt.log" & lt=$!; pids+=($lt)
# the same behind worker threads, which get the requests from the poll loop over inproc
bin/loader --data "$W/ds" --bind "ipc://$W/lw" --name lw --threads 2 >/dev/null 2>"$W/lw.log" & lw=$!; pids+=($lw)
bin/loader --data "$W/ds" --bind "tcp://127.0.0.1:$((P + 1))" --name lwt --threads 2 >/dev/null 2>"$W/lwt.log" & lwt=$!; pids+=($lwt)
wait_for "grep -q serving $W/la.log && grep -q serving $W/lt.log && grep -q serving $W/lw.log && grep -q serving $W/lwt.log" 20

# --- 1. the loader ---------------------------------------------------------------------------
$PY - "ipc://$W/la" "tcp://127.0.0.1:$P" >"$W/py1.out" 2>"$W/py1.err" <<'PYEOF'
import sys, time, zmq, msgpack
ctx = zmq.Context()
def dealer(ep):
    s = ctx.socket(zmq.DEALER); s.setsockopt(zmq.LINGER, 0); s.setsockopt(zmq.RCVTIMEO, 10000)
    s.connect(ep); return s
def reply(s):
    f = s.recv_multipart(); return msgpack.unpackb(f[-1], raw=False)
req = {"v": 1, "type": "batch_req", "req_id": 7, "seed": 1, "epoch": 0, "step": 0, "rank": 0,
       "world": 1, "B": 2, "T": 8, "layout": "pack", "split": "train"}
a = dealer(sys.argv[1])
a.send_multipart([b"", b"\xc1 not msgpack"]);                       print("junk", reply(a)["code"])
a.send_multipart([b"", msgpack.packb({"v": 1, "type": "log", "program": "x", "line": "y"})]); print("type", reply(a)["code"])
a.send_multipart([b"", msgpack.packb(dict(req, B=0, req_id=8))]);   print("field", reply(a)["code"])
a.send_multipart([b""] * 20 + [msgpack.packb(req)])                  # too many frames: no reply
time.sleep(1.2)                                                      # a new second for the flood
for i in range(40): a.send_multipart([b"", b"\x93\x01"])
for i in range(40): reply(a)
a.send_multipart([b"", msgpack.packb(req)]);                        print("good", reply(a)["type"])
t = dealer(sys.argv[2])
t.send_multipart([b"", b"\xc1 over tcp"]);                         print("tcp", reply(t)["code"])
PYEOF
ok "python peer ran ($(head -c 300 "$W/py1.err"))" "[ $? = 0 ]"
ok "error replies: -1 malformed, -2 type, -3 field; then a good batch" \
   "[ \"\$(cat $W/py1.out | tr '\n' ' ')\" = 'junk -1 type -2 field -3 good batch tcp -1 ' ]"
wait_for "grep -q 'more refused' $W/la.log" 5
ID='process [0-9]+ \\(uid [0-9]+\\) \\(routing id [0-9a-f]+\\)'
ok "undecodable request: one line, what and from where" \
   "grep -Eq \"^loader: refused a request from $ID: error -1 \\(malformed request\\): request not understood: invalid byte 0xc1 at 0\$\" $W/la.log"
ok "another type: one line" "grep -Eq \"^loader: refused a request from $ID: error -2 .*not log\" $W/la.log"
ok "a bad field: one line naming it" "grep -Eq \"^loader: refused a request from $ID: error -3 \\(invalid request parameters\\): .*B\" $W/la.log"
ok "too many frames: one line" "grep -Eq \"^loader: dropped a request from $ID: more than 16 frames\" $W/la.log"
n=$(grep -c 'container at byte' "$W/la.log")
ok "a flood of 40: 10 lines and one with the count of the other 30 (got $n)" \
   "[ $n = 10 ] && grep -q '^loader: 30 more refused request(s) in the last second(s), not said one by one\$' $W/la.log"
wait_for "grep -q 'over tcp\\|0xc1' $W/lt.log" 5
ok "over TCP the line names the peer's address" \
   "grep -Eq '^loader: refused a request from 127\\.0\\.0\\.1:[0-9]+ \\(routing id [0-9a-f]+\\): error -1 ' $W/lt.log"
# worker threads: the same lines, the peer named as on the poll loop's own socket; a request of
# exactly 16 frames (the routing id and 15) still gets its error reply
$PY - "ipc://$W/lw" "tcp://127.0.0.1:$((P + 1))" >"$W/py3.out" 2>"$W/py3.err" <<'PYEOF'
import sys, zmq, msgpack
ctx = zmq.Context()
for ep in sys.argv[1:]:
    s = ctx.socket(zmq.DEALER); s.setsockopt(zmq.LINGER, 0); s.setsockopt(zmq.RCVTIMEO, 10000); s.connect(ep)
    s.send_multipart([b"", b"\xc1 to a worker"]); print("w", msgpack.unpackb(s.recv_multipart()[-1], raw=False)["code"])
    s.send_multipart([b""] * 14 + [b"\xc1 sixteen"]); f = s.recv_multipart()
    print("16", len(f), msgpack.unpackb(f[-1], raw=False)["code"])
PYEOF
ok "worker threads answer: error replies, 16 frames too ($(head -c 300 "$W/py3.err"))" \
   "[ \"\$(cat $W/py3.out | tr '\n' ' ')\" = 'w -1 16 15 -1 w -1 16 15 -1 ' ]"
wait_for "[ \$(grep -c 0xc1 $W/lwt.log) -ge 2 ] && [ \$(grep -c 0xc1 $W/lw.log) -ge 2 ]" 5
ok "worker threads, ipc: the line names the peer's process" \
   "[ \$(grep -Ec \"^loader: refused a request from $ID: error -1 \\(malformed request\\): request not understood: invalid byte 0xc1 at 0\$\" $W/lw.log) = 2 ]"
ok "worker threads, TCP: the line names the peer's address" \
   "[ \$(grep -Ec '^loader: refused a request from 127\\.0\\.0\\.1:[0-9]+ \\(routing id [0-9a-f]+\\): error -1 ' $W/lwt.log) = 2 ]"
ok "the lines reach the bus (log/loader)" "wait_for \"grep -q 'refused a request from' $W/tap.log\" 5"
ok "the loader still serves" "bin/loader info --connect ipc://$W/la >/dev/null"

# --- 2. the trainer ----------------------------------------------------------------------------
# a relay: ROUTER in front, a DEALER to loader la behind; the first batch replies are spoiled
$PY - "ipc://$W/relay" "ipc://$W/la" >"$W/relay.out" 2>&1 <<'PYEOF' & rp=$!; pids+=($rp)
import sys, zmq, msgpack
ctx = zmq.Context()
front = ctx.socket(zmq.ROUTER); front.bind(sys.argv[1])
back = ctx.socket(zmq.DEALER); back.connect(sys.argv[2])
poller = zmq.Poller(); poller.register(front, zmq.POLLIN); poller.register(back, zmq.POLLIN)
spoiled = 0
while True:
    for s, _ in poller.poll():
        f = s.recv_multipart()
        if s is front:
            back.send_multipart(f); continue
        ident, rest = f[0], f[1:]
        m = msgpack.unpackb(rest[-1], raw=False)
        if m.get("type") == "batch" and spoiled < 5:
            spoiled += 1
            if spoiled == 1: rest = [b"", b"\xc1 spoiled"]
            elif spoiled == 2: rest = [b"x", rest[-1]]
            elif spoiled == 3: rest = [b"", rest[-1], rest[-1]]
            elif spoiled == 4: rest = [b"", msgpack.packb(dict(m, seed=m["seed"] + 1), use_bin_type=True)]
            else: rest = [b"", msgpack.packb({"v": 1, "type": "info_req", "req_id": 1, "world": 1, "B": 1, "T": 1,
                                               "layout": "pack", "split": "train"})]
            print("spoiled", spoiled, flush=True)
        front.send_multipart([ident] + rest)
PYEOF
MODEL="--d-model 32 --layers 2 --heads 4 --kv-heads 2 --d-ff 64 --seq-len 32 --batch 2 --warmup 2 --threads 1"
timeout -k 5 120 bin/trainer --loaders "ipc://$W/relay" $MODEL --steps 8 --ckpt-every 8 --timeout-ms 300 \
    --run t --run-dir "$W/t" >/dev/null 2>"$W/t.log"; rc=$?
ok "the trainer finishes through the spoiled replies (rc $rc: $(grep -v '^step' "$W/t.log" | tail -2 | head -c 300))" "[ $rc = 0 ]"
R="^trainer: dropped a reply from loader ipc://$W/relay: "
ok "a reply that does not decode: one line" "grep -q \"${R}invalid byte 0xc1 at 0\$\" $W/t.log"
ok "a non-empty delimiter: one line" "grep -q \"${R}2 frames, the first not empty\" $W/t.log"
ok "a frame too many: one line" "grep -q \"${R}more than 2 frames\" $W/t.log"
ok "a batch it did not ask for: one line with both configurations" \
   "grep -q \"${R}a batch for a request not ours (req_id [0-9]*: seed [0-9]*, .*we ask seed [0-9]*,\" $W/t.log"
ok "another type: one line" "grep -q \"${R}a info_req message, which is no reply of a loader\" $W/t.log"
kill $rp 2>/dev/null

# --- 3. data.mdb cut under a running loader (one thread, and worker threads) ------------------
for th in 1 2; do
    rm -rf "$W/cut"; cp -r "$W/ds" "$W/cut"
    bin/loader --data "$W/cut" --bind "ipc://$W/lc$th" --threads $th --name lc$th >/dev/null 2>"$W/lc$th.log" & lc=$!; pids+=($lc)
    wait_for "grep -q serving $W/lc$th.log" 20
    bin/loader get --connect "ipc://$W/lc$th" --B 2 --T 8 --step 0 >/dev/null 2>"$W/get0.err"
    ok "threads $th: a batch before the cut" "[ $? = 0 ]"
    truncate -s 8192 "$W/cut/data.mdb"
    timeout 20 bin/loader get --connect "ipc://$W/lc$th" --B 4 --T 64 --seed 9 --step 3 >/dev/null 2>"$W/get1.err"; rg=$?
    ok "threads $th: the next batch gets an error reply that says data.mdb shrank (rc $rg: $(head -c 300 "$W/get1.err"))" \
       "[ $rg != 0 ] && grep -q 'data.mdb shrank under the reader (now 8192 bytes; its pages need [0-9]*)' $W/get1.err"
    wait $lc; rc=$?
    ok "threads $th: the loader exits 1, not by SIGBUS (rc $rc)" "[ $rc = 1 ]"
    ok "threads $th: one line says what happened and where, the last ($(tail -1 "$W/lc$th.log" | head -c 300))" \
       "[ \$(grep -c shrank $W/lc$th.log) = 1 ] && tail -1 $W/lc$th.log | grep -q \"^loader: document [0-9]*: $W/cut/data.mdb shrank under the reader (now 8192 bytes; its pages need [0-9]*): another process truncated it; rebuild it (bin/tokenizer encode)\$\""
done

it_done
