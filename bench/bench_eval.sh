#!/usr/bin/env bash
# Evaluation throughput of configs S and M (issue 26: "the same for the evaluator"): the forward
# the evaluator runs to score held-out text -- (B, T) tokens in, the logits out to the host, no
# targets, gradient or update (build/bench/train_step --eval) -- ours at fp32 and bf16 against
# the PyTorch reference of the same model under torch.inference_mode() (bench/train_step_torch.py
# --eval), fp32 and bf16 autocast.
#
# As bench/bench_train.sh: every side runs in each of REPS repeats (default 3), interleaved, so
# load from other users of the machine hits all alike; each tokens/s is the median of the
# repeats. PyTorch runs two ways (its defaults; torch.set_num_threads(1) + OPENBLAS_NUM_THREADS=2)
# and the faster median counts; its bf16 autocast runs every repeat where the CPU has
# AVX512-BF16 and once, one timed forward, where it does not (oneDNN 2.6 has no bf16 matmul
# there: ~25x slower than its fp32; EVAL_BENCH_PT_BF16_ALWAYS=1 runs it every repeat).
# "best over best": ours in its faster mode against PyTorch in its fastest (fp32 or bf16).
# bf16 against fp32 on one machine drifting by 15% over minutes: after the repeats each config
# also runs `train_step --eval --versus bf16` (the two models in one process taking turns,
# ABBA; the paired median and its 90% bootstrap interval), recorded as bf16_over_fp32_interleaved.
# Writes "$BENCH_OUT/eval.json" (results.json `eval`) and prints a table.
#   EVAL_BENCH_REPS=3 EVAL_BENCH_STEPS_S=8 EVAL_BENCH_STEPS_M=3 bash bench/bench_eval.sh
set -u
cd "$(dirname "$0")/.."
. bench/lib.sh
bench_no_args "$@"
OUT=${BENCH_OUT:-build/bench-out}
mkdir -p "$OUT"
REPS=${EVAL_BENCH_REPS:-3}
declare -A STEPS=([S]=${EVAL_BENCH_STEPS_S:-8} [M]=${EVAL_BENCH_STEPS_M:-3})
declare -A PAIR_STEPS=([S]=${EVAL_BENCH_PAIR_STEPS_S:-40} [M]=${EVAL_BENCH_PAIR_STEPS_M:-12})
PY=/usr/bin/python3
[ -x build/bench/train_step ] || { echo "bench_eval: build/bench/train_step missing (run: make bench-bins)"; exit 1; }
"$PY" -c 'import torch' 2>/dev/null || { echo "bench_eval: $PY has no torch (make deps)"; exit 1; }
T=$(mktemp -d /tmp/bench_eval.XXXXXX)
trap 'rm -rf "$T"' EXIT INT TERM
cpu=$(bench_cpu_model)
native_bf16=$(bench_native_bf16)
# PyTorch's bf16 autocast every repeat, or once with one forward (see the header)
pt_bf16_every=$native_bf16; [ "${EVAL_BENCH_PT_BF16_ALWAYS:-0}" = 1 ] && pt_bf16_every=1
echo "eval bench: $cpu, OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)," \
     "$REPS repeats, forwards S=${STEPS[S]} M=${STEPS[M]}"
for r in $(seq 1 "$REPS"); do
    for c in S M; do
        build/bench/train_step --eval --config "$c" --steps "${STEPS[$c]}" --json >> "$T/ours.$c" \
            && build/bench/train_step --eval --config "$c" --steps "${STEPS[$c]}" --precision bf16 --json >> "$T/ours_bf16.$c" \
            || { echo "bench_eval: train_step --eval --config $c failed"; exit 1; }
        "$PY" bench/train_step_torch.py --eval --config "$c" --steps "${STEPS[$c]}" --json --threads 0 \
            >> "$T/pt_default.$c" || { echo "bench_eval: torch (defaults) $c failed"; exit 1; }
        OPENBLAS_NUM_THREADS=2 "$PY" bench/train_step_torch.py --eval --config "$c" --steps "${STEPS[$c]}" \
            --json --threads 1 >> "$T/pt_1thr.$c" || { echo "bench_eval: torch (1 thread) $c failed"; exit 1; }
        if [ "$pt_bf16_every" = 1 ] || [ "$r" = 1 ]; then
            steps_b=1; [ "$pt_bf16_every" = 1 ] && steps_b=${STEPS[$c]}
            "$PY" bench/train_step_torch.py --eval --config "$c" --steps "$steps_b" --json --threads 0 --bf16 \
                >> "$T/pt_bf16.$c" || { echo "bench_eval: torch bf16 $c failed"; exit 1; }
        fi
        printf '  repeat %d %s: ours fp32 %.0f, bf16 %.0f; PyTorch defaults %.0f, 1 thread + ob2 %.0f, bf16 autocast %.0f tokens/s\n' \
            "$r" "$c" "$(tail -1 "$T/ours.$c" | jq .tokens_per_s)" "$(tail -1 "$T/ours_bf16.$c" | jq .tokens_per_s)" \
            "$(tail -1 "$T/pt_default.$c" | jq .tokens_per_s)" "$(tail -1 "$T/pt_1thr.$c" | jq .tokens_per_s)" \
            "$(tail -1 "$T/pt_bf16.$c" | jq .tokens_per_s)"
    done
done
for c in S M; do
    build/bench/train_step --eval --config "$c" --steps "${PAIR_STEPS[$c]}" --versus bf16 --json > "$T/pair.$c" \
        || { echo "bench_eval: train_step --eval --config $c --versus bf16 failed"; exit 1; }
    printf '  %s interleaved (%s forwards each, one process): bf16 / fp32 %s, 90%% interval %s .. %s\n' "$c" \
        "${PAIR_STEPS[$c]}" "$(jq .b_over_a_median "$T/pair.$c")" "$(jq .b_over_a_lo90 "$T/pair.$c")" "$(jq .b_over_a_hi90 "$T/pair.$c")"
done

json="{}"
printf '\n%-6s %11s %11s %12s %12s %12s %11s %s\n' config "ours fp32" "ours bf16" "PT fp32 def" "PT fp32 1+ob" "PT bf16" "best/best" "(tokens/s, medians)"
for c in S M; do
    of=$(bench_tps "$T/ours.$c"); ob=$(bench_tps "$T/ours_bf16.$c"); pd=$(bench_tps "$T/pt_default.$c"); p1=$(bench_tps "$T/pt_1thr.$c")
    pb=$(bench_tps "$T/pt_bf16.$c"); pbn=$(wc -l < "$T/pt_bf16.$c")
    read -r ours_best ours_mode pt_best pt_mode ratio <<< "$(awk -v of="$of" -v ob="$ob" -v pd="$pd" -v p1="$p1" -v pb="$pb" 'BEGIN {
        o = of; om = "fp32"; if (ob > o) { o = ob; om = "bf16" }
        p = pd; pm = "fp32-defaults"; if (p1 > p) { p = p1; pm = "fp32-1thr+ob2" }; if (pb > p) { p = pb; pm = "bf16-autocast" }
        printf "%s %s %s %s %.3f", o, om, p, pm, o / p }')"
    printf '%-6s %11.0f %11.0f %12.0f %12.0f %12.0f %10sx   ours %s against PyTorch %s\n' "$c" "$of" "$ob" "$pd" "$p1" "$pb" \
        "$ratio" "$ours_mode" "$pt_mode"
    json=$(jq -c --arg c "$c" --argjson of "$of" --argjson ob "$ob" --argjson pd "$pd" --argjson p1 "$p1" \
        --argjson pb "$pb" --argjson pbn "$pbn" --argjson r "$ratio" --arg om "$ours_mode" --arg pm "$pt_mode" \
        --argjson reps "$REPS" --argjson steps "${STEPS[$c]}" --argjson nat "$native_bf16" --arg cpu "$cpu" \
        --arg e "${OPENBLAS_CORETYPE:-unset}" --slurpfile pair "$T/pair.$c" --slurpfile one "$T/ours_bf16.$c" \
        '.eval[$c] = {what: "the evaluator'"'"'s scoring forward: (B, T) tokens to host logits (train_step --eval; PyTorch: inference_mode)",
                      ours_fp32_tok_s: $of, ours_bf16_tok_s: $ob, pytorch_fp32_defaults_tok_s: $pd,
                      pytorch_fp32_1thread_ob2_tok_s: $p1, pytorch_bf16_tok_s: $pb, pytorch_bf16_runs: $pbn,
                      ours_best_mode: $om, pytorch_best_mode: $pm, best_over_best: $r, repeats: $reps, forwards: $steps,
                      bf16_over_fp32_interleaved: {median: $pair[0].b_over_a_median, lo90: $pair[0].b_over_a_lo90,
                                                   hi90: $pair[0].b_over_a_hi90, forwards: $pair[0].steps,
                                                   rule: "train_step --eval --versus bf16: bf16 forward / fp32 forward, paired in one process (ABBA); 90% bootstrap interval of the median"},
                      B: $one[0].B, T: $one[0].T, threads: $one[0].threads, cpu_model: $cpu, cpu_native_bf16: ($nat == 1),
                      isa_level: $one[0].isa, gemm_engine: $one[0].gemm_engine, openblas_coretype: $e}' <<< "$json")
done
echo "$json" > "$OUT/eval.json"
cat "$OUT/eval.json"
