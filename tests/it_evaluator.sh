#!/usr/bin/env bash
# Integration test of bin/evaluator on a live run (issue 5's "Done when"): a training run
# with a checkpoint every 4 steps; an evaluator joins halfway and is SIGKILLed, a replacement
# takes over, an mc evaluator watches beside it. Every checkpoint from the first evaluated one
# on gets exactly one val result, every one after the mc evaluator's start an mc result, and
# the trainer's final weights are byte-identical to a run nobody watched. The programs' lines
# reach the bus as log/<program> events (the trainer's start, checkpoints and stop, the
# evaluators' results and errors, a loader's start and stop). Then: --once, re-runs that find
# their work done, corrupt and half-written checkpoints, bad input, the plot.
set -u
cd "$(dirname "$0")/.."
. tests/lib/pipeline.sh
it_init it_evaluator 1
# a foreground evaluator that hangs fails the test instead of holding up `make test`
ev() { timeout -k 5 180 bin/evaluator "$@"; }
# val steps recorded in the results file, one per line, sorted
steps_of() { jq -r --arg t "$1" 'select(.run == "live" and .task == $t) | .step' "$W/results.jsonl" 2>/dev/null | sort -n; }

it_synth_data "$W/ds" 3000 7
it_pipeline "$W/ds" metrics eval log
# has_log PROGRAM FILTER: the tap saw a log/PROGRAM event from PROGRAM whose line passes the jq
# FILTER ($w is the work directory)
has_log() {
    jq -n -e --arg p "$1" --arg w "$W" "any(inputs; .topic == \"log/\" + \$p and .type == \"log\" and .program == \$p and (.line | $2))" \
        "$W/tap.log" >/dev/null
}

STEPS=64
# --max-seq 80: the example mc rows (up to 67 tokens) fit the model's positions
MODEL="--d-model 32 --layers 2 --heads 4 --kv-heads 2 --d-ff 64 --seq-len 32 --max-seq 80 --batch 4 --warmup 5 --lr 3e-3"
train() { bin/trainer --loaders "ipc://$W/l0" $MODEL --steps $STEPS --ckpt-every 4 --keep 0 "$@"; }
VAL="--task val --data $W/ds --val-docs 200 --batches 2 --batch 4 --seq-len 32"
MC="--task mc --file evaluator/tasks/synth_mc.jsonl --vocab bytes --limit 8 --batch 4"
EV="--run live --run-dir $W/live --out $W/results.jsonl --poll-ms 200"

# 0. the reference: the same run with nobody watching
train --run ref --run-dir "$W/ref" 2>"$W/ref.log"
ok "reference run exits 0" "[ $? = 0 ]"

# 1. the live run; an evaluator joins once a third of the checkpoints exist
bin/trainer --loaders "ipc://$W/l0" $MODEL --steps $STEPS --ckpt-every 4 --keep 0 --run live --run-dir "$W/live" 2>"$W/live.log" & tp=$!; pids+=($tp)
wait_for "[ -d $W/live/ckpt-00000020 ]" 120
bin/evaluator $EV $VAL 2>"$W/evA.log" >/dev/null & ea=$!; pids+=($ea)
wait_for "[ -n \"\$(steps_of val)\" ]" 120
first=$(steps_of val | head -1)
kill -9 $ea 2>/dev/null; wait $ea 2>/dev/null
nA=$(steps_of val | wc -l)
ok "first evaluator started halfway (first step $first)" "[ -n '$first' ] && [ '$first' -ge 20 ]"
# 2. its replacement, and a different task beside it
bin/evaluator $EV $VAL 2>"$W/evB.log" >/dev/null & eb=$!; pids+=($eb)
bin/evaluator $EV $MC --tag mc 2>"$W/evC.log" >/dev/null & ec=$!; pids+=($ec)
wait $tp; rc=$?
ok "live trainer exits 0 with evaluators attached" "[ $rc = 0 ]"
ok "trainer weights unaffected (same bytes as the unwatched run)" \
   "cmp -s $W/ref/ckpt-$(printf %08d $STEPS)/model.safetensors $W/live/ckpt-$(printf %08d $STEPS)/model.safetensors"
ok "trainer loss curve unaffected" "diff <(grep '^step' $W/ref.log | awk '{print \$2, \$4}') <(grep '^step' $W/live.log | awk '{print \$2, \$4}') >/dev/null"
# (B must have started, not only the results be there: on a fast machine A's newest-first
# pass may already hold the last step)
wait_for "steps_of val | grep -qx $STEPS && steps_of mc | grep -qx $STEPS && grep -q 'already evaluated' $W/evB.log" 180
kill -TERM $eb $ec; wait $eb; rb=$?; wait $ec; rcc=$?
ok "evaluators exit 0 on SIGTERM ($rb, $rcc)" "[ $rb = 0 ] && [ $rcc = 0 ]"
want=$(seq "$first" 4 $STEPS)
ok "every checkpoint from step $first on has exactly one val result" "[ \"\$(steps_of val)\" = \"\$want\" ]"
ok "the replacement did not redo the killed one's $nA result(s)" "grep -q '$nA already evaluated' $W/evB.log"
mc_first=$(steps_of mc | head -1)
ok "every checkpoint from step $mc_first on has an mc result" "[ -n '$mc_first' ] && [ \"\$(steps_of mc)\" = \"\$(seq $mc_first 4 $STEPS)\" ]"
ok "results carry the values" "jq -s -e 'map(select(.task == \"val\")) | all(.values.ce > 0 and .values.bpb > 0 and .values.tokens == 256 and .values.tokens_seen > 0)' $W/results.jsonl >/dev/null && jq -s -e 'map(select(.task == \"mc\")) | all(.values.n == 8 and .values.acc_char >= 0)' $W/results.jsonl >/dev/null"
ok "eval events on the bus" "grep -q '\"topic\":\"eval/live\".*\"task\":\"val\"' $W/tap.log && grep -q '\"topic\":\"eval/live\".*\"task\":\"mc\"' $W/tap.log"
# (the first evaluator may start as late as the last checkpoint on a fast machine, so the
# trained model's loss is compared with an untrained one's, ln 257 = 5.55 nats on the bytes
# vocabulary, not with the first result)
ok "validation loss well below an untrained model's" "jq -s -e '[.[] | select(.task == \"val\")] | sort_by(.step) | (.[-1].values.ce < 0.8 * (257 | log))' $W/results.jsonl >/dev/null"

# 2b. started after training without --run-dir: the bus's welcome message names the directory
bin/evaluator --run live $VAL --out "$W/late.jsonl" --poll-ms 200 >/dev/null 2>"$W/late.log" & e=$!; pids+=($e)
wait_for "[ -s $W/late.jsonl ]" 60; kill -TERM $e; wait $e
ok "late evaluator learns the run directory from the bus and does the newest first" \
   "grep -q 'from the bus' $W/late.log && jq -s -e '.[0].step == $STEPS' $W/late.jsonl >/dev/null"

# 2c. the programs' lines on the bus (docs/PROTOCOL.md, "log"), as on their stderr
has_log trainer 'startswith("llama model, ") and endswith(", run dir \($w)/live")'; r1=$?
has_log trainer '. == "checkpoint \($w)/live/ckpt-00000020 written (step 20)"'; r2=$?
has_log trainer '. == "done at step '$STEPS'; checkpoint \($w)/live/ckpt-'$(printf %08d $STEPS)'"'; r3=$?
ok "log/trainer: the live run's start, a checkpoint and its stop ($r1 $r2 $r3)" "[ $r1$r2$r3 = 000 ]"
ok "the trainer's stderr has the checkpoint line too" "grep -qx 'trainer: checkpoint $W/live/ckpt-00000020 written (step 20)' $W/live.log"
has_log evaluator 'test("^run live task val: [0-9]+ checkpoint\\(s\\) on disk, [0-9]+ already evaluated$")'; r1=$?
has_log evaluator 'test("^live step [0-9]+ val: ce [0-9.e+-]+ ")'; r2=$?
has_log evaluator 'test("^stopped by signal after [0-9]+ evaluation\\(s\\)$")'; r3=$?
ok "log/evaluator: an evaluator's start, its results and its stop ($r1 $r2 $r3)" "[ $r1$r2$r3 = 000 ]"
ok "the evaluator's stderr has the stop line too" "grep -q '^evaluator: stopped by signal after [0-9]* evaluation(s)$' $W/evB.log"
mkdir -p "$W/none"  # a run directory without a checkpoint (one that does not exist: below)
ev --run x --run-dir "$W/none" $VAL --once 2>"$W/b0.log"; rc=$?
wait_for "has_log evaluator '. == \"run x: no complete checkpoint in \\(\$w)/none\"'" 10; r=$?
ok "log/evaluator: the error it exits on, the line of its stderr (rc $rc)" \
   "[ $rc = 1 ] && [ $r = 0 ] && grep -qx 'evaluator: run x: no complete checkpoint in $W/none' $W/b0.log"
ev --run x --run-dir "$W/no_such_run" $VAL --once --no-bus 2>"$W/b1.log"; rc=$?
ok "--once on a run directory that does not exist says so, in one line (rc $rc: $(cat "$W/b1.log"))" \
   "[ $rc = 1 ] && [ \$(wc -l < $W/b1.log) = 1 ] && grep -qx 'evaluator: run x: run directory $W/no_such_run: No such file or directory' $W/b1.log"
# a loader started now (l0 started before the tap): --quiet keeps its stderr empty, not the bus
bin/loader --data "$W/ds" --bind "ipc://$W/l1" --name l1 --quiet >/dev/null 2>"$W/l1.log" & l1=$!; pids+=($l1)
wait_for "has_log loader 'startswith(\"serving \\(\$w)/ds at ipc://\\(\$w)/l1 (\")'" 20; r1=$?
kill -TERM $l1; wait $l1
wait_for "has_log loader 'startswith(\"stopping after 0 batches served\")'" 10; r2=$?
ok "log/loader: what it serves where, and its stop ($r1 $r2)" "[ $r1$r2 = 00 ] && [ ! -s $W/l1.log ]"

# 3. after training: --once evaluates the newest; again, it finds the work done
ev --run ref --run-dir "$W/ref" $VAL --once --no-bus --out "$W/ref.jsonl" >"$W/once.out" 2>"$W/once.log"
ok "--once exits 0 with one line for the newest step" "[ $? = 0 ] && [ \$(wc -l < $W/ref.jsonl) = 1 ] && jq -e '.step == $STEPS' $W/ref.jsonl >/dev/null && cmp -s $W/once.out $W/ref.jsonl"
ev --run ref --run-dir "$W/ref" $VAL --once --no-bus --out "$W/ref.jsonl" >/dev/null 2>"$W/once2.log"
ok "--once again: already evaluated, nothing appended" "[ $? = 0 ] && grep -q 'already evaluated' $W/once2.log && [ \$(wc -l < $W/ref.jsonl) = 1 ]"
ok "same checkpoint, same numbers (deterministic batches)" \
   "[ \"\$(jq -c '.values | del(.eval_s)' $W/ref.jsonl)\" = \"\$(jq -c 'select(.task == \"val\" and .step == $STEPS) | .values | del(.eval_s)' $W/results.jsonl)\" ]"
ev --run ref --run-dir "$W/ref" $VAL --once --all --no-bus --out "$W/ref.jsonl" >/dev/null 2>&1
ok "--once --all fills in every older checkpoint" "[ \$(wc -l < $W/ref.jsonl) = $((STEPS / 4)) ]"

# 3b. replacements resume where their predecessors stopped, across two kills in a row: A
# evaluates the only checkpoint (8); B starts with 8..64 on disk, does 64 and is killed (the
# evaluator's fault hook kills it right after a result, not a poll); C does 60 and 56 and is
# killed; D does the rest. Every checkpoint exactly once, newest first then the backlog (C used
# to take the highest step recorded, 64, as where its predecessors stopped: 12..60 were lost).
mkdir -p "$W/k"; cp -r "$W/ref/ckpt-00000008" "$W/k/"
KV="--run k --run-dir $W/k $VAL --no-bus --poll-ms 100 --out $W/k.jsonl"
ev $KV --once >/dev/null 2>"$W/kA.log"
cp -r "$W/ref"/ckpt-* "$W/k/"
FT_EVALUATOR_FAULT_KILL_AFTER_EVALS=1 killed_run timeout -k 5 60 bin/evaluator $KV >/dev/null 2>"$W/kB.log"; rb=$?
FT_EVALUATOR_FAULT_KILL_AFTER_EVALS=2 killed_run timeout -k 5 60 bin/evaluator $KV >/dev/null 2>"$W/kC.log"; rc=$?
ok "B and C were killed after 1 and 2 results ($rb, $rc)" "[ $rb = 137 ] && [ $rc = 137 ] && [ \$(wc -l < $W/k.jsonl) = 4 ]"
bin/evaluator $KV >/dev/null 2>"$W/kD.log" & e=$!; pids+=($e)
wait_for "[ \$(wc -l < $W/k.jsonl) -ge $((STEPS / 4 - 1)) ]" 120; sleep 0.5; kill -TERM $e; wait $e
ok "after two kills every checkpoint has exactly one result" "[ \"\$(jq -r .step $W/k.jsonl | sort -n)\" = \"\$(seq 8 4 $STEPS)\" ]"
ok "newest first, then the backlog" "[ \"\$(jq -r .step $W/k.jsonl | tr '\\n' ' ')\" = \"8 \$(seq $STEPS -4 12 | tr '\\n' ' ')\" ]"

# 4. a corrupt newest checkpoint and a half-written one
mkdir -p "$W/c"; cp -r "$W/ref/ckpt-00000060" "$W/ref/ckpt-00000064" "$W/c/"
printf 'x' | dd of="$W/c/ckpt-00000064/model.safetensors" bs=1 seek=300 conv=notrunc 2>/dev/null
mkdir -p "$W/c/ckpt-00000068.tmp"; cp "$W/ref/ckpt-00000064/config.json" "$W/c/ckpt-00000068.tmp/"
bin/evaluator --run c --run-dir "$W/c" $VAL --no-bus --poll-ms 100 >"$W/c.out" 2>"$W/c.log" & e=$!; pids+=($e)
wait_for "[ -s $W/c.out ]" 60; sleep 0.5; kill -TERM $e; wait $e
ok "corrupt checkpoint skipped with one clear message" "[ \$(grep -c 'ckpt-00000064' $W/c.log) = 1 ] && grep -q 'skipp.*ckpt-00000064' $W/c.log"
ok "the newest good one evaluated instead, the .tmp ignored" "jq -s -e 'length == 1 and .[0].step == 60' $W/c.out >/dev/null && ! grep -q '00000068' $W/c.log $W/c.out"
ev --run c --run-dir "$W/c" $VAL --once --no-bus >"$W/c1.out" 2>"$W/c1.log"
ok "--once falls back to the newest good checkpoint too" "[ $? = 0 ] && jq -s -e 'length == 1 and .[0].step == 60' $W/c1.out >/dev/null && grep -q 'skipp.*ckpt-00000064' $W/c1.log"

# 4b. out of memory is not damage: a sound checkpoint whose activations (B=4096 rows of 80
# positions, 2.2 GiB) do not fit under a 1 GB address-space limit is neither skipped nor
# called damaged; --once exits 1 with one line that names it and what it needed; a watching
# evaluator says so, tries again later, and evaluates it once the memory is there (the limit
# is raised under it: a soft limit, so prlimit may lift it)
mkdir -p "$W/m"; cp -r "$W/ref/ckpt-00000060" "$W/ref/ckpt-00000064" "$W/m/"
BIG="--task mc --file evaluator/tasks/synth_mc.jsonl --vocab bytes --limit 8 --batch 4096 --threads 1"
(ulimit -S -v 1000000; exec timeout -k 5 60 bin/evaluator --run m --run-dir "$W/m" $BIG --once --no-bus) >/dev/null 2>"$W/m1.log"; rc=$?
ok "--once out of memory: rc 1, one line naming the checkpoint and its size, no skip (rc $rc: $(head -c 300 "$W/m1.log"))" \
   "[ $rc = 1 ] && [ \$(wc -l < $W/m1.log) = 1 ] && grep -q '^evaluator: run m: $W/m/ckpt-00000064: out of memory loading it, not damage.*2.23 GiB' $W/m1.log && ! grep -qi 'skipping\|damaged)' $W/m1.log"
if command -v prlimit >/dev/null; then
    # (--oom-tries 0: never given up, however long the limit is raised late)
    (ulimit -S -v 1000000; exec bin/evaluator --run m --run-dir "$W/m" $BIG --no-bus --poll-ms 100 --oom-tries 0 --out "$W/m.jsonl") >/dev/null 2>"$W/m2.log" & e=$!; pids+=($e)
    wait_for "[ \$(grep -c 'out of memory' $W/m2.log) -ge 2 ]" 30
    ok "watching: out of memory said, nothing skipped, tried again later" \
       "grep -q '$W/m/ckpt-00000064: out of memory loading it, not damage (not skipped; trying again in 0.2 s)' $W/m2.log && ! grep -q skipping $W/m2.log && [ ! -s $W/m.jsonl ]"
    prlimit --pid $e --as=unlimited:unlimited
    wait_for "[ \$(jq -s length $W/m.jsonl 2>/dev/null) = 1 ]" 60; kill -TERM $e; wait $e; rc=$?
    ok "watching: once the memory is there the checkpoint is evaluated (rc $rc)" \
       "[ $rc = 0 ] && jq -s -e 'length == 1 and .[0].step == 64 and .[0].values.n == 8' $W/m.jsonl >/dev/null"
fi

# 4c. watching, a checkpoint that never fits is given up after --oom-tries tries: one line (on
# stderr and the bus) says it was not scored for lack of memory; the evaluator goes on with
# newer checkpoints and does not try that one again
if command -v prlimit >/dev/null; then
    mkdir -p "$W/g"; cp -r "$W/ref/ckpt-00000060" "$W/g/"
    (ulimit -S -v 1000000; exec bin/evaluator --run g --run-dir "$W/g" $BIG --poll-ms 100 --oom-tries 3 --out "$W/g.jsonl") >/dev/null 2>"$W/g.log" & e=$!; pids+=($e)
    wait_for "grep -q 'giving up' $W/g.log" 30
    ok "watching: after --oom-tries 3 tries one line gives the checkpoint up, unscored ($(grep -c . "$W/g.log") lines)" \
       "[ \$(grep -Ec 'ckpt-00000060: out of memory loading it, not damage \(not skipped; trying again in [0-9.]+ s, try [23] of 3\)' $W/g.log) = 2 ] && [ \$(grep -c 'ckpt-00000060: out of memory loading it, not damage; giving up on it after 3 tries: not scored for lack of memory' $W/g.log) = 1 ] && ! grep -q skipping $W/g.log"
    ok "the give-up reaches the bus (log/evaluator)" "wait_for \"grep -q 'giving up on it after 3 tries' $W/tap.log\" 5"
    prlimit --pid $e --as=unlimited:unlimited
    cp -r "$W/ref/ckpt-00000064" "$W/g/"
    wait_for "[ \$(jq -s length $W/g.jsonl 2>/dev/null) = 1 ]" 60; sleep 0.5; kill -TERM $e; wait $e; rc=$?
    ok "a newer checkpoint is evaluated, the one given up not tried again (rc $rc)" \
       "[ $rc = 0 ] && jq -s -e 'length == 1 and .[0].step == 64' $W/g.jsonl >/dev/null && [ \$(grep -c 'ckpt-00000060: out of memory' $W/g.log) = 3 ]"
fi

# 4d. out of memory while scoring, not loading (a device fault for lack of memory, as a GPU's work
# buffer it could not get; FT_DEVICE_FAULT_NOMEM=1 makes the process's first sync report one):
# the same handling, "running task"; --once exits 1, watching tries again and evaluates
FT_DEVICE_FAULT_NOMEM=1 ev --run m --run-dir "$W/m" $MC --once --no-bus >/dev/null 2>"$W/s1.log"; rc=$?
ok "--once, out of memory scoring: rc 1, one line, not skipped (rc $rc: $(head -c 300 "$W/s1.log"))" \
   "[ $rc = 1 ] && [ \$(wc -l < $W/s1.log) = 1 ] && grep -q '^evaluator: run m: $W/m/ckpt-00000064: out of memory running task mc on it, not damage (the checkpoint is not skipped): cpu: out of memory (FT_DEVICE_FAULT_NOMEM=1)' $W/s1.log"
FT_DEVICE_FAULT_NOMEM=1 bin/evaluator --run m --run-dir "$W/m" $MC --no-bus --poll-ms 100 --out "$W/s.jsonl" >/dev/null 2>"$W/s2.log" & e=$!; pids+=($e)
wait_for "[ \$(jq -s length $W/s.jsonl 2>/dev/null) = 1 ]" 60; kill -TERM $e; wait $e; rc=$?
ok "watching: out of memory scoring said once, tried again, evaluated (rc $rc)" \
   "[ $rc = 0 ] && [ \$(grep -c 'out of memory running task mc on it, not damage (not skipped; trying again in 0.1 s, try 2 of 5)' $W/s2.log) = 1 ] && jq -s -e 'length == 1 and .[0].step == 64' $W/s.jsonl >/dev/null && ! grep -q skipping $W/s2.log"

# 5. bad input: one line, non-zero exit, nothing hangs
ev --run x --run-dir "$W/none" $VAL --once --no-bus 2>"$W/b1.log"; rc=$?
ok "--once without checkpoints fails with one line (rc $rc)" "[ $rc = 1 ] && [ \$(wc -l < $W/b1.log) = 1 ] && grep -q 'no complete checkpoint' $W/b1.log"
ev --run x --task val --batch zero 2>"$W/b2.log"; rc=$?
ok "bad flag refused (rc $rc)" "[ $rc = 2 ] && grep -q \"'zero' is not an integer\" $W/b2.log"
ev --run x --run-dir "$W/ref" --task mc --file "$W/ds.txt" --vocab bytes --once --no-bus 2>"$W/b3.log"; rc=$?
ok "a task file that is not JSONL is refused before any checkpoint (rc $rc)" "[ $rc = 2 ] && grep -q 'ds.txt:1: not a JSON object' $W/b3.log"
ev --run x --run-dir "$W/ref" --task val --data "$W/nope" --once --no-bus 2>"$W/b4.log"; rc=$?
ok "missing dataset refused, its path said once (rc $rc: $(cat "$W/b4.log"))" "[ $rc = 2 ] && [ \$(wc -l < $W/b4.log) = 1 ] && [ \$(grep -o 'nope' $W/b4.log | wc -l) = 1 ]"
ev --run x --run-dir "$W/ref" --task mc --file evaluator/tasks/synth_mc.jsonl --vocab gpt2 --once --no-bus >/dev/null 2>"$W/b5.log"; rc=$?
ok "tokenizer larger than the model's vocabulary refused (rc $rc)" "[ $rc != 0 ] && [ \$(wc -l < $W/b5.log) -le 3 ] && grep -qi 'vocab' $W/b5.log"
ev --help | grep -q 'usage: evaluator'
ok "--help" "[ $? = 0 ]"

# 6. the plot
if command -v gnuplot >/dev/null; then
    evaluator/plot.sh --out "$W/live.png" --run live --metrics "$W/tap.log" --evals "$W/results.jsonl" 2>"$W/plot.log"
    ok "plot.sh draws a PNG with the loss and both tasks" "[ \"\$(head -c 4 $W/live.png | tail -c 3)\" = PNG ] && grep -q '2 loss series, 3 accuracy series' $W/plot.log"
    evaluator/plot.sh --out "$W/x.png" --run nobody --evals "$W/results.jsonl" 2>/dev/null
    ok "plot.sh with nothing to draw fails" "[ $? != 0 ]"
fi

# 6b. a Free Transformer checkpoint end to end: its bounds, mc and em, the table row
bin/trainer --loaders "ipc://$W/l0" $MODEL --model free --latent-bits 4 --steps 16 --ckpt-every 8 --run ft --run-dir "$W/ft" 2>"$W/ft.log"
ok "Free Transformer run exits 0" "[ $? = 0 ]"
ev --run ft --run-dir "$W/ft" $VAL --iw-samples 2 --draws 2 --once --no-bus --out "$W/ft.jsonl" >/dev/null 2>"$W/ftv.log"
ok "FT val: elbo = ce_enc + kl, every bound present, no plain ce" \
   "jq -s -e 'length == 1 and (.[0].values | (.elbo - .ce_enc - .kl | fabs) < 1e-9 and .kl >= 0 and .iw_bound > 0 and .ce_prior > 0 and .iw_prior > 0 and .nll_bound == .iw_bound and .ce == null)' $W/ft.jsonl >/dev/null"
ev --run ft --run-dir "$W/ft" $MC --draws 2 --once --no-bus --out "$W/ft.jsonl" >/dev/null 2>>"$W/ftv.log" &&
ev --run ft --run-dir "$W/ft" --task em --file evaluator/tasks/synth_em.jsonl --vocab bytes --limit 4 --once --no-bus --out "$W/ft.jsonl" >/dev/null 2>>"$W/ftv.log"
ok "FT mc and em run" "[ $? = 0 ] && jq -s -e 'map(.task) == [\"val\", \"mc\", \"em\"]' $W/ft.jsonl >/dev/null"

# 7. the comparison table
evaluator/table.sh "$W/results.jsonl" "$W/ref.jsonl" "$W/ft.jsonl" > "$W/table.md" 2>&1
ok "table.sh: one row per run, newest step, parameters and tokens seen" \
   "grep -Eq '^\| live \| $STEPS \| [0-9]+ \| [0-9]+ \| [0-9.]+ \| - ' $W/table.md && grep -q '^| ref | $STEPS |' $W/table.md && grep -Eq '^\| ft \| 16 \| [0-9]+ \| [0-9]+ \| - \| [0-9.]+ ' $W/table.md"

it_done
