#!/usr/bin/env bash
# Batch-1 generation with the KV cache on configuration S (d=256, 4 layers, 4/2 heads, ff 768,
# vocab 4096; the Free Transformer with H=8): a 16-token prompt, then 256 tokens each sampled
# from softmax(logits), tokens/s = 256 / wall time (median: see ROUNDS below). Ours: bench/generate.c
# (bin/sampler's code path). PyTorch: bench/generate_torch.py, its own KV-cache implementation
# of the same models, run in the same session with 1 thread and with $BENCH_THREADS (default
# 2) threads; the faster of the two is the reference (on this loaded 2-core machine one
# thread is often faster for batch-1 decoding, for PyTorch as for us). Writes
# "$BENCH_OUT/generate.json" {"generate": {"baseline": {...}, "free": {...}}}.
# bf16 (issue 26): ours with --precision bf16 (the decode rows on bf16 weights where the CPU has
# AVX512-BF16), and PyTorch with the model in bfloat16 (--bf16) at both thread counts, in the
# same rounds; PyTorch's best mode is the fastest of its four (fp32/bf16 x 1/N threads). Each
# entry gains ours_bf16_tok_s, pytorch_bf16_tok_s, pytorch_best_tok_s, bf16_over_best_pytorch
# and bf16_over_ours_fp32. GENERATE_BENCH_BF16=0 skips the bf16 runs.
# bf16 over our fp32, paired (2026-12-07): after the rounds each model also runs `generate
# --versus bf16` (GENERATE_BENCH_PAIRS=12 generations each side, fp32 and bf16 taking turns in one
# process): bf16_over_ours_fp32_interleaved {median, lo90, hi90, pairs} is the median of the
# paired speed ratios, which the VM's drift does not move (bf16_over_ours_fp32, the ratio of two
# medians of runs tens of seconds apart, stays beside it). bench/bf16_targets.sh judges the
# "bf16 over our fp32" rule by the paired median where the file has one.
set -u
cd "$(dirname "$0")/.."
. bench/lib.sh
bench_no_args "$@"
OUT=${BENCH_OUT:-build/bench-out}
mkdir -p "$OUT"
TH=${BENCH_THREADS:-2}
REP=${GENERATE_BENCH_REPEATS:-3}
make -s build/bench/generate >/dev/null || exit 1
PY=/usr/bin/python3

# The machine is shared and its load drifts within seconds: the programs take turns, ROUNDS
# times, each reporting its median of REP repeats; the figure kept is the median over rounds.
ROUNDS=${GENERATE_BENCH_ROUNDS:-3}
BF16=${GENERATE_BENCH_BF16:-1}
PAIRS=${GENERATE_BENCH_PAIRS:-12}
one() {  # model -> "ours torch1 torchN ours_bf16 torch_bf16_1 torch_bf16_N" tokens/s (0: not run)
    local m=$1 o=() a=() b=() ob=(0) ab=(0) bb=(0) x
    [ "$BF16" = 1 ] && ob=() ab=() bb=()
    for _ in $(seq "$ROUNDS"); do
        x=$(OMP_NUM_THREADS=$TH build/bench/generate --model "$m" --repeats "$REP" --json | jq .tok_s) || return 1; o+=("$x")
        x=$(OMP_NUM_THREADS=1 $PY bench/generate_torch.py --model "$m" --repeats "$REP" --threads 1 --json | jq .tok_s) || return 1; a+=("$x")
        x=$(OMP_NUM_THREADS=$TH $PY bench/generate_torch.py --model "$m" --repeats "$REP" --threads "$TH" --json | jq .tok_s) || return 1; b+=("$x")
        [ "$BF16" = 1 ] || continue
        x=$(OMP_NUM_THREADS=$TH build/bench/generate --model "$m" --repeats "$REP" --precision bf16 --json | jq .tok_s) || return 1; ob+=("$x")
        x=$(OMP_NUM_THREADS=1 $PY bench/generate_torch.py --model "$m" --repeats "$REP" --threads 1 --bf16 --json | jq .tok_s) || return 1; ab+=("$x")
        x=$(OMP_NUM_THREADS=$TH $PY bench/generate_torch.py --model "$m" --repeats "$REP" --threads "$TH" --bf16 --json | jq .tok_s) || return 1; bb+=("$x")
        echo "  round ($m): ours ${o[-1]} (bf16 ${ob[-1]}), PyTorch 1/$TH threads ${a[-1]}/${b[-1]} (bf16 ${ab[-1]}/${bb[-1]}) tok/s, load $(cut -d' ' -f1 /proc/loadavg)" >&2
    done
    echo "$(bench_median "${o[@]}") $(bench_median "${a[@]}") $(bench_median "${b[@]}") $(bench_median "${ob[@]}") $(bench_median "${ab[@]}") $(bench_median "${bb[@]}")"
}
read -r b_ours b_t1 b_tn b_ob b_b1 b_bn < <(one llama) || exit 1
read -r f_ours f_t1 f_tn f_ob f_b1 f_bn < <(one free) || exit 1
[ -n "${f_bn:-}" ] || { echo "bench_generate: a run failed"; exit 1; }
b_pair=null f_pair=null
if [ "$BF16" = 1 ]; then
    b_pair=$(OMP_NUM_THREADS=$TH build/bench/generate --model llama --repeats "$PAIRS" --versus bf16 --json) || exit 1
    f_pair=$(OMP_NUM_THREADS=$TH build/bench/generate --model free --repeats "$PAIRS" --versus bf16 --json) || exit 1
    for p in "$b_pair" "$f_pair"; do
        echo "  paired ($(jq -r .model <<< "$p")): bf16 over fp32 $(jq .b_over_a_speed_median <<< "$p"), 90% interval" \
             "$(jq .b_over_a_speed_lo90 <<< "$p") .. $(jq .b_over_a_speed_hi90 <<< "$p") ($PAIRS pairs, one process)" >&2
    done
fi

jq -n --argjson bo "$b_ours" --argjson b1 "$b_t1" --argjson bn "$b_tn" \
      --argjson fo "$f_ours" --argjson f1 "$f_t1" --argjson fn "$f_tn" --argjson th "$TH" --argjson rep "$REP" --argjson rounds "$ROUNDS" \
      --argjson bob "$b_ob" --argjson bb1 "$b_b1" --argjson bbn "$b_bn" --argjson fob "$f_ob" --argjson fb1 "$f_b1" --argjson fbn "$f_bn" \
      --argjson bpair "$b_pair" --argjson fpair "$f_pair" --arg cpu "$(bench_cpu_model)" \
      --arg isa "$(build/tests/test_cpu_isa --levels 2>/dev/null | tail -1)" --argjson bf16 "$BF16" '
  def r1: .*10|round/10;
  def paired(p): if p == null then {} else {bf16_over_ours_fp32_interleaved: {median: p.b_over_a_speed_median,
      lo90: p.b_over_a_speed_lo90, hi90: p.b_over_a_speed_hi90, pairs: p.pairs,
      rule: "generate --versus bf16: fp32 and bf16 generations taking turns in one process (ABBA), the median of the paired speed ratios; 90% bootstrap interval"}} end;
  def entry(o; t1; tn; ob; b1; bn): {ours_tok_s: (o|r1), pytorch_tok_s: ([t1, tn] | max | r1),
      ratio: (o / ([t1, tn] | max) * 100 | round / 100),
      pytorch_1thread_tok_s: (t1|r1), pytorch_nthreads_tok_s: (tn|r1)}
    + (if $bf16 == 1 then {ours_bf16_tok_s: (ob|r1), pytorch_bf16_1thread_tok_s: (b1|r1), pytorch_bf16_nthreads_tok_s: (bn|r1),
      pytorch_best_tok_s: ([t1, tn, b1, bn] | max | r1),
      bf16_over_best_pytorch: (ob / ([t1, tn, b1, bn] | max) * 100 | round / 100),
      bf16_over_ours_fp32: (ob / o * 100 | round / 100)} else {} end);
  {generate: {baseline: (entry($bo; $b1; $bn; $bob; $bb1; $bbn) + paired($bpair)),
              free: (entry($fo; $f1; $fn; $fob; $fb1; $fbn) + paired($fpair)),
              setup: {config: "S", latent_bits: 8, batch: 1, prompt: 16, new: 256, repeats: $rep, rounds: $rounds,
                      threads: $th, sampling: "softmax, temperature 1", cpu_model: $cpu, isa_level: $isa}}}' > "$OUT/generate.json" || exit 1
printf '%-10s %12s %14s %8s %12s %16s %10s %10s\n' model "ours tok/s" "pytorch tok/s" ratio "ours bf16" "PT best (4 modes)" "bf16/PT" "bf16/fp32"
jq -r '.generate | ["baseline", "free"][] as $k | [$k, .[$k].ours_tok_s, .[$k].pytorch_tok_s, .[$k].ratio,
       (.[$k].ours_bf16_tok_s // 0), (.[$k].pytorch_best_tok_s // 0), (.[$k].bf16_over_best_pytorch // 0),
       (.[$k].bf16_over_ours_fp32 // 0)] | @tsv' \
   "$OUT/generate.json" | awk -F'\t' '{printf "%-10s %12.0f %14.0f %8.2f %12.0f %16.0f %10.2f %10.2f\n", $1, $2, $3, $4, $5, $6, $7, $8}'
