#!/usr/bin/env bash
# Integration test of data-parallel training (bin/trainer --dp; trainer/dp.h, dp_train.h) through
# the pipeline (bus, loader, trainer ranks) on the synthetic data. By default the ranks are CPU
# processes under mpirun (Open MPI); FT_TEST_DP=nccl runs the same checks with GPU ranks started
# by hand (--rank/--world/--rendezvous), as `make test-gpu` does where GPUs exist.
#
#  1. 2 ranks with --batch 2 each match 1 process with --batch 4 over 20 steps, in the loss of
#     every step and in the final weights, to float tolerance (below); the weights are
#     identical across the ranks after every step (--dp-check-every 1 compares checksums);
#     state.json and the metrics record the world, the global batch and the tokens seen;
#  2. ZeRO-1 gives the same bits as plain data parallelism (weights and AdamW moments);
#  3. the Free Transformer trains under data parallelism and matches one process (each rank's
#     latents are keyed by their rows' place in the global batch);
#  4. resume with another world size: 2 ranks -> 1 process (with --accum 2: the data position
#     converts) and 1 process -> 2 ranks, both matching the uninterrupted run; another global
#     batch is refused;
#  5. a rank SIGKILLed mid-run: the others exit within the bound, each with one line naming it;
#     a rank that stops answering (SIGSTOP, as a lost machine) is found by heartbeat silence;
#  6. a rank whose weights drift (fault hook) stops every rank with one line;
#  7. refusals: mpirun without --dp, ranks with other flags, --dp nccl on the CPU, --zero alone.
#
# Tolerance. One process sums the weight gradient over its B*T positions; two ranks each sum
# half and dp.c adds the halves, then scales by 1/2: the same numbers in another order, so
# every step's gradient differs by float32 rounding (~1e-7 relative), and AdamW, normalising by
# sqrt(v), carries that into the weights at about the same relative size. Measured over 20 steps:
# max |w - w'| = 1.2e-7 (llama, |w| <= 1.04); tolerance 1e-5. The negative control (other rows,
# as when two ranks take the same rows) differs by > 1e-3. The Free Transformer's latent bit is
# u < p: a p a rounding away can flip a bit whose draw u sits within that rounding of it, a
# larger but rare change; measured 2.8e-6 after 10 steps, tolerance 1e-4 (keying the draws by
# rank instead of by global row gives 2.4e-2).
set -u
cd "$(dirname "$0")/.."
. tests/lib/pipeline.sh
it_init it_dp 1
DP=${FT_TEST_DP:-mpi}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 # README: Open MPI as root
DIFF=tests/lib/st_diff.py
it_synth_data "$W/ds" 4000 7
it_pipeline "$W/ds" metrics ckpt

MODEL="--d-model 32 --layers 2 --heads 4 --kv-heads 2 --d-ff 64 --seq-len 32 --warmup 5 --lr 3e-3 --threads 1"
FREE="--model free --latent-bits 8 --kappa 0.125 --d-model 32 --layers 2 --heads 4 --kv-heads 2 --d-ff 64 --seq-len 32 --warmup 5 --lr 3e-3 --threads 1"
DEV=""; [ "$DP" = nccl ] && DEV="--device cuda"

one() { bin/trainer --loaders "ipc://$W/l0" $DEV "$@"; }
# dp NP ARGS...: NP ranks of one run. mpi: mpirun (its environment, fault hooks included, goes
# to every rank); nccl: NP processes by hand, one GPU each, meeting at a rendezvous.
dp() {
    local np=$1; shift
    if [ "$DP" = mpi ]; then
        local x=(); for v in $(env | grep -o '^FT_[A-Z_]*'); do x+=(-x "$v"); done
        mpirun --oversubscribe --bind-to none -np "$np" -x OMP_NUM_THREADS=1 "${x[@]}" \
            bin/trainer --dp mpi --loaders "ipc://$W/l0" "$@"
    else
        local port=$(it_port_base 1) r rc=0 ps=()
        for r in $(seq 0 $((np - 1))); do
            bin/trainer --dp nccl --device "cuda:$((r % NGPU))" --rank "$r" --world "$np" \
                --rendezvous "tcp://127.0.0.1:$port" --loaders "ipc://$W/l0" "$@" & ps+=($!)
        done
        for r in "${ps[@]}"; do wait "$r" || rc=$?; done
        return $rc
    fi
}
within() { awk -v d="$1" -v t="$2" 'BEGIN{exit !(d <= t)}'; }
diff_of() { $DIFF "$1" "$2" | awk '{print $2}'; }
# the loss of every step of run $1 from the bus tap, "step loss" lines
losses() { jq -r --arg t "metrics/$1" 'select(.topic == $t) | "\(.step) \(.values.loss)"' "$W/tap.log" | sort -n; }
# event TOPIC STEP JQ-CONDITION: the bus event of that topic and step holds the condition
event() { jq -s -e --arg t "$1" --argjson s "$2" "[.[] | select(.topic == \$t and .step == \$s)] | length > 0 and (.[-1] | $3)" "$W/tap.log" >/dev/null; }
max_rel() { join <(losses "$1") <(losses "$2") | awk '{d = $2 - $3; if (d < 0) d = -d; r = d / $3; if (r > m) m = r; n++} END{printf "%.3e %d\n", m, n}'; }

if [ "$DP" = nccl ]; then
    NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
    if [ "$NGPU" -lt 2 ]; then
        # NCCL refuses two ranks of one communicator on one GPU: only world 1 runs here
        one --run g1 --run-dir "$W/g1" --steps 20 $MODEL --batch 4 2>"$W/g1.log"
        dp 1 --run g2 --run-dir "$W/g2" --steps 20 $MODEL --batch 4 2>"$W/g2.log"
        ok "one GPU: world 1 through NCCL trains (rc $?)" "grep -q 'done at step 20' $W/g2.log"
        d=$(diff_of "$W/g1/ckpt-00000020/model.safetensors" "$W/g2/ckpt-00000020/model.safetensors")
        ok "one GPU: world 1 through NCCL matches the plain GPU run (max |dw| $d)" "within $d 1e-5"
        echo "$NGPU GPU(s): the multi-rank NCCL checks need 2 and did not run"
        it_done; exit
    fi
fi

# 1. 2 ranks x batch 2 = 1 process x batch 4
one --run s1 --run-dir "$W/s1" --steps 20 $MODEL --batch 4 --log-every 5 2>"$W/s1.log"
ok "one process, batch 4, 20 steps (rc $?)" "grep -q 'done at step 20' $W/s1.log"
dp 2 --run d2 --run-dir "$W/d2" --steps 20 $MODEL --batch 2 --log-every 5 --dp-check-every 1 2>"$W/d2.log"
ok "2 ranks, batch 2 each, 20 steps, weights compared every step (rc $?)" \
   "grep -q 'done at step 20' $W/d2.log && ! grep -q 'differ' $W/d2.log"
ok "each rank says who it is" "grep -q '^trainer: rank 0 of 2' $W/d2.log && grep -q '^trainer: rank 1 of 2' $W/d2.log"
ok "the global batch is printed" "grep -q 'global batch 4 rows = --batch 2 x 2 ranks x --accum 1' $W/d2.log"
d=$(diff_of "$W/s1/ckpt-00000020/model.safetensors" "$W/d2/ckpt-00000020/model.safetensors")
ok "weights after 20 steps match one process (max |dw| $d, tolerance 1e-5)" "within $d 1e-5"
d=$(diff_of "$W/s1/ckpt-00000020/optimizer.safetensors" "$W/d2/ckpt-00000020/optimizer.safetensors")
ok "AdamW moments match too (max diff $d)" "within $d 1e-5"
sleep 0.5
read -r rel n <<<"$(max_rel s1 d2)"
ok "the loss of each of the 20 steps matches ($n steps, max relative diff $rel, tolerance 1e-5)" "[ $n = 20 ] && within $rel 1e-5"
one --run s1x --run-dir "$W/s1x" --steps 20 $MODEL --batch 4 --data-seed 2 2>"$W/s1x.log"
d=$(diff_of "$W/s1/ckpt-00000020/model.safetensors" "$W/s1x/ckpt-00000020/model.safetensors")
ok "negative control: other rows give weights far outside the tolerance ($d)" "! within $d 1e-3"
ok "state.json: world 2, global batch 4, tokens over every rank, data step 20" \
   "jq -e '.world == 2 and .global_batch == 4 and .tokens_seen == 2560 and .data_step == 20 and .batch == 2' $W/d2/ckpt-00000020/state.json >/dev/null"
ok "metrics/<run>: the ranks' loss, world, global batch, tokens" \
   "event metrics/d2 20 '.values.world == 2 and .values.global_batch == 4 and .values.tokens == 2560'"
r0=$(jq -r 'select(.topic == "metrics/d2" and .step == 20) | .values.rank_loss' "$W/tap.log")
r1=$(jq -r 'select(.topic == "metrics/d2/1" and .step == 20) | .values.rank_loss' "$W/tap.log")
ok "the run's loss is the mean of the ranks' losses ($r0, $r1)" "event metrics/d2 20 '(.values.loss - ($r0 + $r1) / 2 | fabs) < 1e-12'"
ok "rank 1 publishes its own on metrics/<run>/1, without a \"loss\" a curve would take" \
   "event metrics/d2/1 20 '.values.rank == 1 and (.values.rank_loss | type) == \"number\" and .values.loss == null'"
ok "only rank 0 announces checkpoints" "[ \$(grep -c '\"topic\":\"ckpt/d2\".*\"step\":20' $W/tap.log) = 1 ]"

# 2. ZeRO-1: AdamW's moments sharded, the same bits
dp 2 --run z2 --run-dir "$W/z2" --steps 20 $MODEL --batch 2 --zero 1 --dp-check-every 1 2>"$W/z2.log"
ok "ZeRO-1 run (rc $?)" "grep -q 'done at step 20' $W/z2.log"
ok "ZeRO-1 weights bit-identical to plain data parallelism" "cmp -s $W/d2/ckpt-00000020/model.safetensors $W/z2/ckpt-00000020/model.safetensors"
ok "ZeRO-1 moments (gathered to rank 0) bit-identical too" "cmp -s $W/d2/ckpt-00000020/optimizer.safetensors $W/z2/ckpt-00000020/optimizer.safetensors"
plain=$(sed -n 's/^trainer: rank 1: .*optimizer moments \([0-9.]*\) KiB,.*/\1/p' "$W/d2.log")
sharded=$(sed -n 's/^trainer: rank 1: .*optimizer moments \([0-9.]*\) KiB (ZeRO-1.*/\1/p' "$W/z2.log")
ok "memory per rank printed: rank 1 holds $sharded KiB of moments, not $plain" \
   "[ -n '$sharded' ] && [ -n '$plain' ] && awk -v a=$sharded -v b=$plain 'BEGIN{exit !(a < 0.6 * b)}'"

# 3. the Free Transformer
one --run f1 --run-dir "$W/f1" --steps 10 $FREE --batch 4 2>"$W/f1.log"
dp 2 --run f2 --run-dir "$W/f2" --steps 10 $FREE --batch 2 --dp-check-every 1 2>"$W/f2.log"
ok "Free Transformer under data parallelism (rc $?)" "grep -q 'done at step 10' $W/f2.log && grep -q 'done at step 10' $W/f1.log"
d=$(diff_of "$W/f1/ckpt-00000010/model.safetensors" "$W/f2/ckpt-00000010/model.safetensors")
ok "Free Transformer: 2 ranks match one process (max |dw| $d, tolerance 1e-4)" "within $d 1e-4"
sleep 0.5
ok "Free Transformer: its metrics (the ranks' mean) reach the bus" "event metrics/f2 10 '(.values.kl | type) == \"number\"'"

# 3b. the other families: the Latent-Thought LM (its posterior inferred per row, on the rank that
# holds the row) and a causal masked mixer train under data parallelism and match one process
LTM="--model ltm --latent-vectors 4 --inner-steps 2 --window 16 --d-model 32 --layers 2 --heads 4 --kv-heads 2 --d-ff 64 --seq-len 32 --warmup 5 --lr 3e-3 --threads 1"
MIX="--model mixer --d-model 32 --layers 2 --seq-len 32 --warmup 5 --lr 3e-3 --threads 1"
for fam in ltm mix; do
    [ $fam = ltm ] && F=$LTM || F=$MIX
    one --run ${fam}1 --run-dir "$W/${fam}1" --steps 6 $F --batch 4 2>"$W/${fam}1.log"
    dp 2 --run ${fam}2 --run-dir "$W/${fam}2" --steps 6 $F --batch 2 --dp-check-every 1 2>"$W/${fam}2.log"
    ok "$fam under data parallelism (rc $?)" "grep -q 'done at step 6' $W/${fam}2.log && grep -q 'done at step 6' $W/${fam}1.log"
    d=$(diff_of "$W/${fam}1/ckpt-00000006/model.safetensors" "$W/${fam}2/ckpt-00000006/model.safetensors")
    ok "$fam: 2 ranks match one process (max |dw| $d, tolerance 1e-5)" "within $d 1e-5"
done

# 4. resume with another world size
FT_TRAINER_FAULT_KILL_AFTER_CKPT=10 dp 2 --run r21 --run-dir "$W/r21" --steps 20 --ckpt-every 10 $MODEL --batch 2 --dp-lost-after 5 2>"$W/r21a.log"
ok "2 ranks: rank 0 killed after its step-10 checkpoint, rank 1 says so" \
   "[ -d $W/r21/ckpt-00000010 ] && [ ! -d $W/r21/ckpt-00000020 ] && grep -q 'rank 1: rank 0 lost during .* of step 11' $W/r21a.log"
one --run r21 --run-dir "$W/r21" --steps 20 --ckpt-every 10 $MODEL --batch 2 --accum 2 --resume 2>"$W/r21b.log"
ok "resumed by one process with --batch 2 --accum 2 (rc $?)" "grep -q 'done at step 20' $W/r21b.log"
ok "the data position converts: row 40 of the epoch is step 20 of 2 x 1 rows" "grep -q 'row 40 of the epoch .* is step 20 of 2 x 1 rows' $W/r21b.log"
ok "and the run says the continuation is not bit-identical (another world)" "grep -q 'not bit-identical' $W/r21b.log"
d=$(diff_of "$W/s1/ckpt-00000020/model.safetensors" "$W/r21/ckpt-00000020/model.safetensors")
ok "2 -> 1: weights match the uninterrupted run (max |dw| $d)" "within $d 1e-5"
ok "2 -> 1: the data position is global (data step 40 of 2 rows = 20 of 4)" "jq -e '.data_step == 40 and .world == 1 and .global_batch == 4' $W/r21/ckpt-00000020/state.json >/dev/null"
FT_TRAINER_FAULT_KILL_AFTER_CKPT=10 killed_run bin/trainer --loaders "ipc://$W/l0" $DEV --run r12 --run-dir "$W/r12" --steps 20 --ckpt-every 10 $MODEL --batch 4 2>"$W/r12a.log"
dp 2 --run r12 --run-dir "$W/r12" --steps 20 --ckpt-every 10 $MODEL --batch 2 --resume --dp-check-every 1 2>"$W/r12b.log"
ok "1 -> 2: resumed by 2 ranks (rc $?)" "grep -q 'resumed from.*ckpt-00000010' $W/r12b.log && grep -q 'done at step 20' $W/r12b.log"
d=$(diff_of "$W/s1/ckpt-00000020/model.safetensors" "$W/r12/ckpt-00000020/model.safetensors")
ok "1 -> 2: weights match the uninterrupted run (max |dw| $d)" "within $d 1e-5"
dp 2 --run r12 --run-dir "$W/r12" --steps 30 $MODEL --batch 4 --resume 2>"$W/r12c.log"; rc=$?
ok "another global batch is refused, one line (rc $rc)" \
   "[ $rc != 0 ] && grep -q 'global batch 8 (--batch 4 x 2 ranks x --accum 1) differs from the checkpoint.s 4' $W/r12c.log && [ ! -d $W/r12/ckpt-00000030 ]"

# 4b. a bf16 checkpoint resumed by 2 ranks without --precision: every rank takes rank 0's (the
# checkpoint's) precision, not only rank 0
one --run b1 --run-dir "$W/b1" --steps 6 $MODEL --batch 4 --precision bf16 2>"$W/b1a.log"
dp 2 --run b1 --run-dir "$W/b1" --steps 8 $MODEL --batch 2 --resume 2>"$W/b1b.log"
ok "bf16 checkpoint resumed by 2 ranks (rc $?)" "grep -q 'resumed from.*ckpt-00000006' $W/b1b.log && grep -q 'done at step 8' $W/b1b.log"
ok "both ranks train at the checkpoint's precision" \
   "grep -q '^trainer: rank 0: device .*, precision bf16' $W/b1b.log && grep -q '^trainer: rank 1: device .*, precision bf16' $W/b1b.log"

# 5. a rank killed mid-run: found at once by its closed connection (the bound: --dp-lost-after
# for a silent rank, one step for the others to reach a collective); a stopped rank by silence
run_bg() { # NP LOG ARGS...: a long run in the background, $bg its launcher
    local np=$1 log=$2; shift 2
    dp "$np" "$@" >"$log" 2>&1 & bg=$!; pids+=($bg)
}
pid_of() { sed -n "s/^trainer: rank $1 of [0-9]* ([a-z]*): pid \([0-9]*\).*/\1/p" "$2"; }
run_bg 3 "$W/k.log" --run k --run-dir "$W/k" --steps 100000 --ckpt-every 0 $MODEL --batch 2 --log-every 1 --dp-lost-after 5
wait_for "grep -q '^step 5/' $W/k.log" 60
victim=$(pid_of 1 "$W/k.log")
t0=$(date +%s%N); kill -9 "$victim"
wait_for "! kill -0 $bg 2>/dev/null" 15; gone=$?
ms=$((($(date +%s%N) - t0) / 1000000))
ok "rank 1 SIGKILLed: the run ends within the bound (${ms} ms; bound 5 s + a step)" "[ $gone = 0 ] && [ $ms -lt 6000 ]"
ok "rank 0 and rank 2 each say, in one line, that rank 1 was lost" \
   "[ \$(grep -c '^trainer: rank 0: rank 1 lost during .*its connection closed' $W/k.log) = 1 ] && [ \$(grep -c '^trainer: rank 2: rank 1 lost during .*its connection closed' $W/k.log) = 1 ]"
ok "no checkpoint is written after a lost rank" "[ -z \"\$(ls -d $W/k/ckpt-* 2>/dev/null)\" ]"
run_bg 2 "$W/q.log" --run q --run-dir "$W/q" --steps 100000 --ckpt-every 0 $MODEL --batch 2 --log-every 1 --dp-lost-after 2
wait_for "grep -q '^step 5/' $W/q.log" 60
victim=$(pid_of 1 "$W/q.log")
t0=$(date +%s%N); kill -STOP "$victim"
wait_for "grep -q 'rank 0: rank 1 lost' $W/q.log" 15; found=$?
ms=$((($(date +%s%N) - t0) / 1000000))
kill -9 "$victim" 2>/dev/null; wait "$bg" 2>/dev/null
ok "a rank that stops answering (SIGSTOP) is found by silence within --dp-lost-after 2 (+1 s): ${ms} ms" \
   "[ $found = 0 ] && [ $ms -ge 1500 ] && [ $ms -lt 4000 ] && grep -q 'rank 0: rank 1 lost during .*silent for' $W/q.log"

# 6. weights that drift on one rank stop every rank
FT_TRAINER_FAULT_DP_PERTURB=1:5 dp 2 --run v --run-dir "$W/v" --steps 20 --ckpt-every 0 $MODEL --batch 2 --dp-check-every 1 2>"$W/v.log"; rc=$?
ok "a drifting rank stops the run after the check of step 5 (rc $rc)" \
   "[ $rc != 0 ] && grep -q 'rank 0: the weights differ across ranks after step 5 (checksums rank 0 [0-9a-f]*, rank 1 [0-9a-f]*)' $W/v.log && grep -q 'rank 1: the weights differ' $W/v.log"
ok "and nothing is written" "[ ! -d $W/v/ckpt-00000020 ] && ! grep -q 'done at step' $W/v.log"

# 7. refusals, one line each
if [ "$DP" = mpi ]; then
    mpirun --oversubscribe --bind-to none -np 2 bin/trainer --loaders "ipc://$W/l0" --run n $MODEL 2>"$W/n.log" >/dev/null; rc=$?
    ok "mpirun without --dp is refused (rc $rc)" "[ $rc != 0 ] && grep -q 'started by mpirun as one of 2 processes without --dp' $W/n.log && ! grep -q '^step' $W/n.log"
    mpirun --oversubscribe --bind-to none -np 1 bin/trainer --dp mpi --loaders "ipc://$W/l0" --run m --run-dir "$W/m" $MODEL --batch 2 --steps 5 \
        : -np 1 bin/trainer --dp mpi --loaders "ipc://$W/l0" --run m --run-dir "$W/m" $MODEL --batch 3 --steps 5 2>"$W/m.log" >/dev/null; rc=$?
    ok "ranks with other flags are refused, naming the flag (rc $rc)" \
       "[ $rc != 0 ] && grep -q 'rank 1 (.*) has other flags than rank 0: batch=3, rank 0 has batch=2' $W/m.log && [ ! -d $W/m ]"
    bin/trainer --dp nccl --loaders "ipc://$W/l0" --run c $MODEL 2>"$W/c.log"; rc=$?
    ok "--dp nccl on the CPU is refused (rc $rc)" "[ $rc = 2 ] && grep -qE 'dp nccl sums GPU buffers|has no NCCL' $W/c.log"
    bin/trainer --loaders "ipc://$W/l0" --run z --zero 1 $MODEL 2>"$W/z.log"; rc=$?
    ok "--zero 1 without --dp is refused (rc $rc)" "[ $rc = 2 ] && grep -q 'go with --dp mpi or --dp nccl' $W/z.log"
fi
it_done
