#!/usr/bin/env bash
# make bench: runs each bench/bench_*.sh (each writes a JSON fragment into $BENCH_OUT and prints
# its table), then merges the fragments into bench/results.json. Which OPENBLAS_CORETYPE the run
# used is recorded, since it changes BLAS speed on this machine for us and for PyTorch alike.
set -u
cd "$(dirname "$0")/.."
. bench/lib.sh
bench_no_args "$@"
export BENCH_OUT=${BENCH_OUT:-build/bench-out}
rm -rf "$BENCH_OUT"; mkdir -p "$BENCH_OUT"
echo "bench: $(nproc) cores, OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}, $(date -u +%FT%TZ)"
status=0
for b in bench/bench_*.sh; do
    [ -f "$b" ] || continue
    echo; echo "== $b"
    bash "$b" || { echo "bench: $b failed"; status=1; }
done
# issue 26's targets for this CPU's kind, judged from the fragments above (its table is printed
# and merged as bf16_targets; a target not met is a finding, not a failed bench)
if [ -s "$BENCH_OUT/train.json" ] && [ -s "$BENCH_OUT/generate.json" ]; then
    echo; echo "== bench/bf16_targets.sh"
    bash bench/bf16_targets.sh "$BENCH_OUT"; [ $? -le 1 ] || { echo "bench: bf16_targets.sh could not read the fragments"; status=1; }
fi
jq -n --arg env "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}" --arg date "$(date -u +%FT%TZ)" \
   --argjson cores "$(nproc)" '{meta: {env: $env, date: $date, cores: $cores}}' > "$BENCH_OUT/_meta.json"
# the keys other targets write into bench/results.json (make bench-gpu: gpu; make bench-gpu-model:
# gpu_model; each with its own date) are kept from the file as it was; everything else is this run's
keep='{}'; [ -s bench/results.json ] && keep=$(jq -c '{gpu, gpu_model} | with_entries(select(.value != null))' bench/results.json)
jq -s --argjson keep "$keep" 'reduce .[] as $x ({}; . * $x) | . + $keep' "$BENCH_OUT"/*.json > bench/results.json.tmp \
  && mv bench/results.json.tmp bench/results.json
echo; echo "bench/results.json:"; cat bench/results.json
exit $status
