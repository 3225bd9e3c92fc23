#!/usr/bin/env bash
# Evaluators on a live run, as a user would do it from a shell: a training run writes a
# checkpoint every 25 steps; halfway an evaluator (validation loss) joins, is killed with
# SIGKILL a little later, and a different one (multiple choice) takes over. Every checkpoint
# after each evaluator's start gets its evaluation; the trainer never notices (its results
# are the same as without evaluators: tests/it_evaluator.sh checks the weights byte for byte).
# Ends with the curves: runs/hot_swap/curves.png.
set -euo pipefail
cd "$(dirname "$0")/../.."
W=runs/hot_swap; rm -rf "$W"; mkdir -p "$W"; W=$(cd "$W" && pwd)
export FT_BUS_PUB=ipc://$W/bus.pub FT_BUS_SUB=ipc://$W/bus.sub
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true' EXIT
say() { printf '\n== %s\n' "$*"; }
wait_ckpt() { while [ ! -d "$W/run/ckpt-$(printf %08d "$1")" ]; do sleep 0.2; done; }

bin/tokenizer synth --n 20000 --seed 1 > "$W/synth.txt"
bin/tokenizer encode --vocab bytes --out "$W/data" "$W/synth.txt"
bin/bus --quiet & pids+=($!)
bin/loader --data "$W/data" --val-docs 500 --bind "ipc://$W/loader" --name hs --quiet & pids+=($!)
bin/bus tap metrics eval > "$W/events.jsonl" & pids+=($!)
sleep 1

say "training: 400 steps, a checkpoint every 25"
bin/trainer --loaders "ipc://$W/loader" --run hs --run-dir "$W/run" --steps 400 --ckpt-every 25 --keep 0 \
    --seq-len 66 --batch 16 --layout pad --d-model 64 --layers 2 --heads 4 --kv-heads 2 --d-ff 192 \
    --lr 3e-3 --warmup 30 --log-every 100 & tpid=$!; pids+=($tpid)

EVAL="--run hs --run-dir $W/run --out $W/evals.jsonl --threads 1"
wait_ckpt 150
say "step 150: evaluator A (validation cross-entropy on the last 500 documents) joins"
bin/evaluator $EVAL --task val --data "$W/data" --val-docs 500 --batches 4 --batch 8 --seq-len 66 & apid=$!; pids+=($apid)
wait_ckpt 250
say "step 250: evaluator A is killed (SIGKILL); evaluator B (multiple choice) takes over"
kill -9 "$apid"
bin/evaluator $EVAL --task mc --file evaluator/tasks/synth_mc.jsonl --vocab bytes --limit 40 & pids+=($!)
wait "$tpid"
wait_ckpt 400
# B evaluates the newest checkpoint first; wait until it has caught up with step 400
while ! jq -e 'select(.task == "mc" and .step == 400)' "$W/evals.jsonl" >/dev/null 2>&1; do sleep 0.5; done

say "what each evaluator saw (steps with a result)"
for t in val mc; do
    echo "$t: $(jq -r --arg t "$t" 'select(.task == $t) | .step' "$W/evals.jsonl" | sort -n | tr '\n' ' ')"
done
evaluator/plot.sh --out "$W/curves.png" --run hs --metrics "$W/events.jsonl" --evals "$W/evals.jsonl"
echo "curves: $W/curves.png"
