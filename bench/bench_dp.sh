#!/usr/bin/env bash
# Data-parallel training (bin/trainer --dp mpi) on this machine: config S (d=256, 4 layers, 4/2
# heads, ff 768, a 4096-token BPE vocabulary learned from the first MB of data/brown.txt),
# --batch 8 per rank, T=256, one thread per rank, through a loader as a user runs it. Weak
# scaling: 1 process against 2 ranks under mpirun, each rank with its own batch of 8 rows, so
# 2 ranks do twice the work per step. Reported: tokens/s of the whole run (every rank's rows),
# the scaling efficiency tok_s(2) / (2 tok_s(1)), and the share of a rank's training time spent
# in the gradient collectives (the trainer's own account at the end of a --dp run: the
# reduce-scatter and all-gather of each step, waits for the slower rank included). Steps and
# repeats alternate 1 and 2 ranks; medians. Writes "$BENCH_OUT/dp.json":
#   {"dp": {"ranks_1": {"tok_s"}, "ranks_2": {"tok_s", "allreduce_share"}, "efficiency", ...}}
#   DP_BENCH_REPS=3 DP_BENCH_STEPS=12 bash bench/bench_dp.sh
set -u
cd "$(dirname "$0")/.."
. bench/lib.sh
bench_no_args "$@"
OUT=${BENCH_OUT:-build/bench-out}; mkdir -p "$OUT"
REPS=${DP_BENCH_REPS:-3}; STEPS=${DP_BENCH_STEPS:-12}
command -v mpirun >/dev/null || { echo "bench_dp: mpirun missing (make deps installs Open MPI)"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 # README: Open MPI as root
D=$(mktemp -d /tmp/bench_dp.XXXXXX)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$D"' EXIT
head -c 1000000 data/brown.txt >"$D/brown.txt"
bin/tokenizer train --vocab-size 4096 --out "$D/vocab.json" "$D/brown.txt" 2>/dev/null || exit 1
bin/tokenizer encode --vocab "$D/vocab.json" --out "$D/data" data/brown.txt 2>/dev/null || exit 1
bin/loader --data "$D/data" --bind "ipc://$D/l0" --name bench-dp --quiet 2>"$D/loader.log" & pids+=($!)
# no bus: the trainers' events go nowhere (they say so once and train on)
export FT_BUS_PUB=ipc://$D/nobus.pub FT_BUS_SUB=ipc://$D/nobus.sub FT_PROGRESS=0
S="--d-model 256 --layers 4 --heads 4 --kv-heads 2 --d-ff 768 --seq-len 256 --batch 8 --layout pack
   --lr 1e-3 --warmup 2 --ckpt-every 0 --threads 1 --loaders ipc://$D/l0"
echo "dp bench: config S, batch 8 per rank, T=256, 1 thread per rank, $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1-3 /proc/loadavg), $REPS repeats of $STEPS steps"
# tok/s of one run from its "N steps in X s" line (rank 0's; every rank's rows counted)
rate() { sed -n 's/^trainer: \(rank 0: \)\{0,1\}\([0-9]*\) steps in \([0-9.]*\) s.*/\2 \3/p' "$1" |
         awk -v B=8 -v T=256 -v W="$2" '{n = $1; s = $2} END{if (s > 0) printf "%.1f", n * B * T * W / s}'; }
share() { awk '/gradient collectives/{gsub(/[(%)]/, "", $NF); print $NF / 100}' "$1" | sort -n | tail -1; }
for r in $(seq "$REPS"); do
    rm -rf "$D/r1" "$D/r2"
    # one process, as a user runs it without data parallelism
    OMP_NUM_THREADS=1 bin/trainer --run r1 --run-dir "$D/r1" --steps "$STEPS" $S 2>"$D/r1.log" || { cat "$D/r1.log"; exit 1; }
    OMP_NUM_THREADS=1 mpirun --oversubscribe --bind-to none -np 2 -x OMP_NUM_THREADS -x FT_BUS_PUB -x FT_BUS_SUB -x FT_PROGRESS \
        bin/trainer --dp mpi --run r2 --run-dir "$D/r2" --steps "$STEPS" $S 2>"$D/r2.log" || { cat "$D/r2.log"; exit 1; }
    a=$(rate "$D/r1.log" 1); b=$(rate "$D/r2.log" 2); c=$(share "$D/r2.log")
    [ -n "$a" ] && [ -n "$b" ] && [ -n "$c" ] || { echo "bench_dp: no timing line"; cat "$D/r1.log" "$D/r2.log"; exit 1; }
    echo "$a" >>"$D/t1"; echo "$b" >>"$D/t2"; echo "$c" >>"$D/c2"
    printf '  repeat %d: 1 rank %s tok/s, 2 ranks %s tok/s (collectives %.1f%% of a rank'"'"'s time)\n' "$r" "$a" "$b" "$(awk -v c="$c" 'BEGIN{print c * 100}')"
done
jq -L bench -n --rawfile a "$D/t1" --rawfile b "$D/t2" --rawfile c "$D/c2" --arg cpu "$(lscpu | sed -n 's/^Model name: *//p')" \
      --argjson cores "$(nproc)" --argjson steps "$STEPS" '
  include "lib";
  def nums: split("\n") | map(select(length > 0) | tonumber);
  ($a | nums) as $t1 | ($b | nums) as $t2 | ($c | nums) as $c2
  | {dp: {ranks_1: {tok_s: ($t1 | median)}, ranks_2: {tok_s: ($t2 | median), allreduce_share: ($c2 | median * 1000 | round / 1000)},
          efficiency: (($t2 | median) / (2 * ($t1 | median)) * 1000 | round / 1000),
          per_repeat: {ranks_1: $t1, ranks_2: $t2, allreduce_share: $c2},
          setup: {config: "S", batch_per_rank: 8, seq_len: 256, threads_per_rank: 1, steps: $steps, transport: "mpi",
                  cpu: $cpu, cores: $cores}}}' >"$OUT/dp.json"
jq -r '.dp | "data parallelism, config S, 1 thread per rank: 1 rank \(.ranks_1.tok_s) tok/s, 2 ranks \(.ranks_2.tok_s) tok/s, efficiency \(.efficiency), gradient collectives \(.ranks_2.allreduce_share * 1000 | round / 10)% of a rank'"'"'s time"' "$OUT/dp.json"
