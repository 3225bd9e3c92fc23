#!/usr/bin/env bash
# Integration test of bin/trainer through the real pipeline (bus, loader, trainer) on the
# synthetic data: the loss falls; a run killed with SIGKILL and resumed ends bit-identical
# to one never interrupted; SIGTERM checkpoints and exits 0; a NaN loss stops the run naming
# the step and keeps the last good checkpoint; mismatches are refused with one line.
set -u
cd "$(dirname "$0")/.."
. tests/lib/pipeline.sh
it_init it_trainer
it_synth_data "$W/ds" 4000 7
it_pipeline "$W/ds" metrics ckpt

MODEL="--d-model 32 --layers 2 --heads 4 --kv-heads 2 --d-ff 64 --seq-len 32 --batch 4 --warmup 5 --lr 3e-3"
# (background runs call bin/trainer directly, so $! is the trainer and not a subshell)
train() { bin/trainer --loaders "ipc://$W/l0" $MODEL "$@"; }

# 1. a straight run: the loss falls, checkpoints appear, metrics reach the bus
train --run a --run-dir "$W/a" --steps 40 --ckpt-every 10 --keep 0 --log-every 10 2>"$W/a.log"
ok "straight run exits 0" "[ $? = 0 ]"
first=$(grep -m1 '^step 10/' "$W/a.log" | awk '{print $4}'); last=$(grep '^step 40/' "$W/a.log" | awk '{print $4}')
ok "loss falls ($first -> $last)" "awk -v a=$first -v b=$last 'BEGIN{exit !(b < a - 0.3)}'"
ok "4 checkpoints kept" "[ \$(ls -d $W/a/ckpt-* | wc -l) = 4 ]"
sleep 0.5
ok "metrics events on the bus" "grep -q '\"topic\":\"metrics/a\"' $W/tap.log"
ok "ckpt event on the bus" "grep -q '\"topic\":\"ckpt/a\".*\"step\":40' $W/tap.log"

# 2. SIGKILL after the step-20 checkpoint, then --resume: bit-identical at step 40
bin/trainer --loaders "ipc://$W/l0" $MODEL --run b --run-dir "$W/b" --steps 40 --ckpt-every 10 --keep 2 2>"$W/b1.log" & tp=$!; pids+=($tp)
for _ in $(seq 600); do [ -d "$W/b/ckpt-00000020" ] && break; sleep 0.05; done
kill -9 $tp 2>/dev/null; wait $tp 2>/dev/null
ok "killed run left a checkpoint" "[ -d $W/b/ckpt-00000020 ]"
ok "killed run did not finish" "[ ! -d $W/b/ckpt-00000040 ]"
train --run b --run-dir "$W/b" --steps 40 --ckpt-every 10 --keep 2 --resume 2>"$W/b2.log"
ok "resume exits 0" "[ $? = 0 ]"
ok "resume says where it started" "grep -q 'resumed from' $W/b2.log"
ok "resumed weights bit-identical" "cmp -s $W/a/ckpt-00000040/model.safetensors $W/b/ckpt-00000040/model.safetensors"
ok "resumed optimizer bit-identical" "cmp -s $W/a/ckpt-00000040/optimizer.safetensors $W/b/ckpt-00000040/optimizer.safetensors"
ok "keep 2 pruned older checkpoints" "[ \$(ls -d $W/b/ckpt-* | wc -l) = 2 ]"

# 3. a corrupt newest checkpoint is skipped on resume
cp -r "$W/a" "$W/c"; printf 'x' | dd of="$W/c/ckpt-00000040/model.safetensors" bs=1 seek=200 conv=notrunc 2>/dev/null
train --run c --run-dir "$W/c" --steps 40 --resume 2>"$W/c.log"
ok "corrupt checkpoint skipped with a message" "grep -q 'skipp.*ckpt-00000040' $W/c.log && grep -q 'resumed from.*ckpt-00000030' $W/c.log"

# 4. SIGTERM: checkpoint of the last finished step, exit 0
bin/trainer --loaders "ipc://$W/l0" $MODEL --run d --run-dir "$W/d" --steps 100000 --ckpt-every 0 2>"$W/d.log" & tp=$!; pids+=($tp)
for _ in $(seq 600); do grep -q 'parameters' "$W/d.log" && break; sleep 0.05; done; sleep 1
kill -TERM $tp; wait $tp; rc=$?
ok "SIGTERM exits 0 (rc $rc)" "[ $rc = 0 ]"
ok "SIGTERM wrote a checkpoint" "ls -d $W/d/ckpt-* >/dev/null 2>&1 && grep -q 'stopped by signal' $W/d.log"

# 5. NaN at step 13: stop, name the step, keep the last good checkpoint (10)
FT_TRAINER_FAULT_NAN_STEP=13 train --run e --run-dir "$W/e" --steps 40 --ckpt-every 5 2>"$W/e.log"; rc=$?
ok "NaN stops with non-zero exit" "[ $rc != 0 ]"
ok "NaN message names the step and the checkpoint" "grep -q 'loss is nan at step 13.*ckpt-00000010' $W/e.log"
ok "nothing saved after the NaN" "[ ! -d $W/e/ckpt-00000015 ] && [ ! -d $W/e/ckpt-00000013 ]"

# 6. refused before training, one line each
train --run f --run-dir "$W/f" --steps 5 --vocab-size 300 2>"$W/f.log"; rc=$?
ok "vocab mismatch refused" "[ $rc = 2 ] && grep -q 'vocab-size 300 does not match' $W/f.log && [ ! -d $W/f ]"
bin/trainer --loaders "ipc://$W/l0" --seq-len 64 --max-seq 32 2>"$W/g.log"; rc=$?
ok "seq-len beyond RoPE table refused" "[ $rc = 2 ] && [ \$(wc -l < $W/g.log) = 1 ]"
bin/trainer --loaders "ipc://$W/l0" --batch zero 2>"$W/h.log"; rc=$?
ok "bad flag refused" "[ $rc = 2 ] && grep -q \"'zero' is not an integer\" $W/h.log"
train --run i --run-dir "$W/b" --steps 50 --resume --batch 8 2>"$W/i.log"; rc=$?
ok "resume with another batch size refused" "[ $rc = 2 ] && grep -q 'batch 8 differs' $W/i.log"

it_done
