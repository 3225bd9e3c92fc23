#!/usr/bin/env bash
# make bf16-check: does --precision bf16 train like fp32? (issue 11's evidence)
# The baseline and the Free Transformer (H=8, kappa 0.5 bit) are trained on Brown for
# BF16_STEPS steps (default 200) twice each, fp32 and bf16, from the same seed and batches,
# through the pipeline; then:
#   - the training curves (cross-entropy; for the Free Transformer also its KL and the
#     fraction of tokens above kappa) compared step by step: the largest difference over
#     the run, absolute and relative;
#   - the held-out cross-entropy of each final checkpoint by bin/evaluator (fp32 inference);
#   - the bf16-trained baseline decoded greedily by bin/sampler and by the PyTorch reference
#     (tests/ref/greedy_ref.py) on the same checkpoint: the same tokens.
# Writes results/bf16.{md,json}. Knobs: BF16_STEPS, BF16_DIR (default runs/bf16).
set -euo pipefail
cd "$(dirname "$0")/../.."
W=${BF16_DIR:-runs/bf16}; STEPS=${BF16_STEPS:-200}
mkdir -p "$W" results; W=$(cd "$W" && pwd)
export FT_BUS_PUB=ipc://$W/bus.pub FT_BUS_SUB=ipc://$W/bus.sub FT_PROGRESS=0
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
DECODER="--seq-len 128 --batch 16 --d-model 128 --layers 4 --heads 4 --kv-heads 2 --d-ff 384"
FREE="--latent-bits 8 --kappa 0.5 --kappa-unit bits"
VAL_DOCS=25
t0=$(date +%s)
[ -f data/brown.txt ] || make data
[ -f "$W/brown4k.ftbpe" ] || bin/tokenizer train --vocab-size 4096 --out "$W/brown4k.ftbpe" data/brown.txt 2>/dev/null
[ -d "$W/data" ] || bin/tokenizer encode --vocab "$W/brown4k.ftbpe" --out "$W/data" data/brown.txt 2>/dev/null
bin/bus --quiet & pids+=($!)
bin/loader --data "$W/data" --val-docs $VAL_DOCS --bind "ipc://$W/loader0" --name bf16-l0 --quiet & pids+=($!)
bin/bus tap metrics log/bf16 > "$W/metrics.jsonl" & pids+=($!)
for _ in $(seq 50); do bin/bus send log/bf16 log program=bf16 line=ping >/dev/null 2>&1; [ -s "$W/metrics.jsonl" ] && break; sleep 0.1; done

json='{}'
for m in llama free; do
    extra=""; [ "$m" = free ] && extra=$FREE
    for p in fp32 bf16; do
        r="bf16-$m-$p"
        echo "== training $m at $p ($STEPS steps)" >&2
        bin/trainer --loaders "ipc://$W/loader0" --run "$r" --run-dir "$W/$m-$p" --model "$m" $extra $DECODER \
            --steps "$STEPS" --lr 3e-3 --min-lr 3e-4 --warmup 20 --ckpt-every "$STEPS" --log-every 50 \
            --precision "$p" --resume 2> "$W/$m-$p.log"
        bin/evaluator --run "$r" --run-dir "$W/$m-$p" --task val --data "$W/data" --val-docs $VAL_DOCS \
            --batches 0 --batch 8 --seq-len 128 --once --no-bus --quiet > "$W/eval-$m-$p.json"
    done
done
sleep 0.5
# step-by-step curves from the metrics events
curve() { grep "\"metrics/bf16-$1-$2\"" "$W/metrics.jsonl" | jq -c '{s: .step, ce: (.values.ce // .values.loss), kl: .values.kl_bits, above: .values.kl_above_kappa}'; }
for m in llama free; do
    curve "$m" fp32 > "$W/curve-$m-fp32.jsonl"; curve "$m" bf16 > "$W/curve-$m-bf16.jsonl"
    cmp=$(jq -s -n --slurpfile a "$W/curve-$m-fp32.jsonl" --slurpfile b "$W/curve-$m-bf16.jsonl" '
        [$a, $b] | transpose | map(select(.[0] != null and .[1] != null and .[0].s == .[1].s)) as $p
        | {steps_compared: ($p | length),
           max_ce_diff: ($p | map(.[0].ce - .[1].ce | fabs) | max),
           max_ce_rel_diff: ($p | map((.[0].ce - .[1].ce | fabs) / .[0].ce) | max),
           final_ce_fp32: ($p[-1][0].ce), final_ce_bf16: ($p[-1][1].ce),
           max_kl_bits_diff: ($p | map(if .[0].kl == null then 0 else (.[0].kl - .[1].kl | fabs) end) | max),
           final_kl_bits_fp32: ($p[-1][0].kl), final_kl_bits_bf16: ($p[-1][1].kl),
           final_above_kappa_fp32: ($p[-1][0].above), final_above_kappa_bf16: ($p[-1][1].above)}')
    vf=$(jq '.values.ce // .values.nll_bound' "$W/eval-$m-fp32.json"); vb=$(jq '.values.ce // .values.nll_bound' "$W/eval-$m-bf16.json")
    json=$(jq --arg m "$m" --argjson c "$cmp" --argjson vf "$vf" --argjson vb "$vb" \
           '.[$m] = ($c + {val_fp32_trained: $vf, val_bf16_trained: $vb})' <<< "$json")
done
# greedy decoding of the bf16-trained baseline: bin/sampler against the PyTorch reference
ck=$(ls -d "$W"/llama-bf16/ckpt-* | tail -n1)
agree=0; total=0
for prompt in "The jury said" "It was the first" "In the morning"; do
    ids=$(printf '%s' "$prompt" | bin/tokenizer ids --vocab "$W/brown4k.ftbpe" -)
    ours=$(bin/sampler --ckpt "$ck" --vocab "$W/brown4k.ftbpe" --prompt "$prompt" --temperature 0 --max-new 24 \
           --json --quiet | jq -r '.ids | map(tostring) | join(" ")')
    ref=$(/usr/bin/python3 tests/ref/greedy_ref.py "$ck" 24 $ids)
    total=$((total + 1)); [ "$ours" = "$ref" ] && agree=$((agree + 1))
    echo "greedy '$prompt': ours [$ours] / PyTorch [$ref]" >&2
done
json=$(jq --argjson a "$agree" --argjson t "$total" '.greedy_bf16_llama = {prompts: $t, identical: $a}' <<< "$json")
echo "$json" | jq . > results/bf16.json
secs=$(( $(date +%s) - t0 ))
{
echo "# bf16 against fp32 training (\`make bf16-check\`, $(date -u +%F))"
echo
echo "Brown, BPE 4096, decoder d=128, 4 layers, T=128, B=16, $STEPS steps, AdamW 3e-3 cosine; the same seed"
echo "and batches for both precisions; CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')."
echo "bf16: the Linear and attention products take bf16-rounded operands (fp32 accumulation);"
echo "everything else fp32 (docs/DEVICES.md). Cross-entropy in nats per token."
echo
echo "| model | steps compared | largest CE difference (abs / rel) | final CE fp32 / bf16 | held-out CE fp32-trained / bf16-trained |"
echo "| --- | --- | --- | --- | --- |"
for m in llama free; do
    jq -r --arg m "$m" '.[$m] as $v | "| \($m) | \($v.steps_compared) | \($v.max_ce_diff * 1e4 | round / 1e4) / \($v.max_ce_rel_diff * 1e6 | round / 1e6) | \($v.final_ce_fp32) / \($v.final_ce_bf16) | \($v.val_fp32_trained * 1e4 | round / 1e4) / \($v.val_bf16_trained * 1e4 | round / 1e4) |"' results/bf16.json
done
echo
jq -r '.free | "Free Transformer: KL at the end \(.final_kl_bits_fp32) bits (fp32) vs \(.final_kl_bits_bf16) (bf16), largest KL difference along the run \(.max_kl_bits_diff) bits; fraction of tokens above kappa at the end \(.final_above_kappa_fp32) vs \(.final_above_kappa_bf16)."' results/bf16.json
echo
jq -r '.greedy_bf16_llama | "Greedy decoding of the bf16-trained baseline, 24 tokens from \(.prompts) prompts: bin/sampler and the PyTorch reference (tests/ref/greedy_ref.py) agree on \(.identical) of \(.prompts)."' results/bf16.json
echo
echo "Duration: ${secs} s."
} > results/bf16.md
cat results/bf16.md
