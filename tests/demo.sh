#!/usr/bin/env bash
# make demo: the whole pipeline on the synthetic data of the Free Transformer paper (§4.1),
# as separate processes talking over ZeroMQ:
#   tokenizer synth | tokenizer encode -> LMDB dataset
#   bus  <- loader x2 (announce themselves), trainer (metrics, checkpoints)
#   trainer <- batches from whichever loader is alive (one is killed halfway)
#   bus tap -> the events as JSON lines
# Every step prints what it runs, so the commands can be copied into a shell.
set -euo pipefail
cd "$(dirname "$0")/.."
W=${DEMO_DIR:-runs/demo}
STEPS=${DEMO_STEPS:-300}
rm -rf "$W"; mkdir -p "$W"
export FT_BUS_PUB=ipc://$PWD/$W/bus.pub FT_BUS_SUB=ipc://$PWD/$W/bus.sub
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*" >&2; "$@"; }
# Starts a program in the background; $! (and the pids list) is the program itself.
bgrun() { printf '$ %s &\n' "$*" >&2; "$@" & pids+=($!); }

say "1. synthetic sequences (seed 000 §4.1): prompt 'L>' then 64 characters"
run bin/tokenizer synth --n 50000 --seed 1 > "$W/synth.txt"
head -n 4 "$W/synth.txt"

say "2. byte-level tokenization into an LMDB dataset"
run bin/tokenizer encode --vocab bytes --out "$W/data" "$W/synth.txt"
run bin/tokenizer info "$W/data"

say "3. the bus, two loaders announcing themselves on it, and a tap on the events"
bgrun bin/bus --quiet
for i in 0 1; do
    bgrun bin/loader --data "$W/data" --bind "ipc://$PWD/$W/loader$i" --name "l$i" --quiet
done
lpid=${pids[1]}
bin/bus tap metrics ckpt loader > "$W/events.jsonl" & pids+=($!)
sleep 1

say "4. one batch, fetched by hand (B=2 rows of T+1=17 token ids)"
run bin/loader get --connect "ipc://$PWD/$W/loader0" --B 2 --T 16 --seed 1

say "5. train a small Llama-style baseline; the trainer finds the loaders on the bus"
bgrun bin/trainer --discover --run demo --run-dir "$W/run" --steps "$STEPS" --seq-len 66 --batch 16 \
    --layout pad --d-model 64 --layers 2 --heads 4 --kv-heads 2 --d-ff 192 --lr 3e-3 --warmup 30 \
    --ckpt-every 100 --log-every 50
tpid=$!
sleep 8
say "   killing loader l0 (SIGKILL) while training runs: its requests go to l1"
kill -9 "$lpid"
wait "$tpid"

say "6. what the bus carried"
echo "events: $(wc -l < "$W/events.jsonl") ($(grep -c '"metrics/demo"' "$W/events.jsonl") metrics, $(grep -c '"ckpt/demo"' "$W/events.jsonl") checkpoints, $(grep -c '"loader/' "$W/events.jsonl") loader heartbeats)"
grep '"metrics/demo"' "$W/events.jsonl" | jq -r '"step \(.step)  loss \(.values.loss | .*1000 | round / 1000)"' | awk 'NR % 50 == 1'
grep '"ckpt/demo"' "$W/events.jsonl" | jq -c '{run, step, path}'
ls "$W/run"
say "done: everything above ran as separate processes; see README.md for each program"
