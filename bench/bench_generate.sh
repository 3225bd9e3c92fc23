#!/usr/bin/env bash
# Batch-1 generation with the KV cache on configuration S (d=256, 4 layers, 4/2 heads, ff 768,
# vocab 4096; the Free Transformer with H=8): a 16-token prompt, then 256 tokens each sampled
# from softmax(logits), tokens/s = 256 / wall time (median: see ROUNDS below). Ours: bench/generate.c
# (bin/sampler's code path). PyTorch: bench/generate_torch.py, its own KV-cache implementation
# of the same models, run in the same session with 1 thread and with $BENCH_THREADS (default
# 2) threads; the faster of the two is the reference (on this loaded 2-core machine one
# thread is often faster for batch-1 decoding, for PyTorch as for us). Writes
# "$BENCH_OUT/generate.json" {"generate": {"baseline": {...}, "free": {...}}}.
set -u
cd "$(dirname "$0")/.."
OUT=${BENCH_OUT:-build/bench-out}
mkdir -p "$OUT"
TH=${BENCH_THREADS:-2}
REP=${GENERATE_BENCH_REPEATS:-3}
make -s build/bench/generate >/dev/null || exit 1
PY=/usr/bin/python3

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
# The machine is shared and its load drifts within seconds: the programs take turns, ROUNDS
# times, each reporting its median of REP repeats; the figure kept is the median over rounds.
ROUNDS=${GENERATE_BENCH_ROUNDS:-3}
one() {  # model -> "ours torch1 torchN" tokens/s
    local m=$1 o=() a=() b=() x
    for _ in $(seq "$ROUNDS"); do
        x=$(OMP_NUM_THREADS=$TH build/bench/generate --model "$m" --repeats "$REP" --json | jq .tok_s) || return 1; o+=("$x")
        x=$(OMP_NUM_THREADS=1 $PY bench/generate_torch.py --model "$m" --repeats "$REP" --threads 1 --json | jq .tok_s) || return 1; a+=("$x")
        x=$(OMP_NUM_THREADS=$TH $PY bench/generate_torch.py --model "$m" --repeats "$REP" --threads "$TH" --json | jq .tok_s) || return 1; b+=("$x")
    done
    echo "$(median "${o[@]}") $(median "${a[@]}") $(median "${b[@]}")"
}
read -r b_ours b_t1 b_tn < <(one llama) || exit 1
read -r f_ours f_t1 f_tn < <(one free) || exit 1
[ -n "${f_tn:-}" ] || { echo "bench_generate: a run failed"; exit 1; }

jq -n --argjson bo "$b_ours" --argjson b1 "$b_t1" --argjson bn "$b_tn" \
      --argjson fo "$f_ours" --argjson f1 "$f_t1" --argjson fn "$f_tn" --argjson th "$TH" --argjson rep "$REP" --argjson rounds "$ROUNDS" '
  def entry(o; t1; tn): {ours_tok_s: (o*10|round/10), pytorch_tok_s: ([t1, tn] | max | .*10|round/10),
      ratio: (o / ([t1, tn] | max) * 100 | round / 100),
      pytorch_1thread_tok_s: (t1*10|round/10), pytorch_nthreads_tok_s: (tn*10|round/10)};
  {generate: {baseline: entry($bo; $b1; $bn), free: entry($fo; $f1; $fn),
              setup: {config: "S", latent_bits: 8, batch: 1, prompt: 16, new: 256, repeats: $rep, rounds: $rounds,
                      threads: $th, sampling: "softmax, temperature 1"}}}' > "$OUT/generate.json" || exit 1
printf '%-10s %12s %14s %8s\n' model "ours tok/s" "pytorch tok/s" ratio
jq -r '.generate | ["baseline", "free"][] as $k | [$k, .[$k].ours_tok_s, .[$k].pytorch_tok_s, .[$k].ratio] | @tsv' \
   "$OUT/generate.json" | awk -F'\t' '{printf "%-10s %12.0f %14.0f %8.2f\n", $1, $2, $3, $4}'
