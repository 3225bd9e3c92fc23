#!/usr/bin/env bash
# make bench-gpu: training throughput on the GPU (needs an NVIDIA GPU and its driver).
# Configs M (d=512, 8 layers, B=8, T=256) and G (GPT-2-small size: d=768, 12 layers, vocab
# 50257, B=8, T=1024), each in fp32, tf32 and bf16 (build/bench/train_step --device cuda
# --precision P): tokens/s, model FLOP/s (6 x parameters + 12 x layers x d x T per token) and
# the model FLOPs utilisation against the GPU's dense peak for that precision (table below,
# from NVIDIA's data sheets), and the share of a step spent in cuBLAS (timed with events in a
# separate pass). Merges gpu.{M,G}.{fp32,tf32,bf16} and the GPU's name into
# bench/results.json. Without a GPU it says so and writes nothing.
set -u
cd "$(dirname "$0")/.."
. bench/lib.sh
bench_no_args "$@"
REPS=${GPU_BENCH_REPS:-3}
STEPS=${GPU_BENCH_STEPS:-10}
[ -x build/bench/train_step ] || { echo "bench-gpu: build/bench/train_step missing (make bench-bins)"; exit 1; }
probe=$(build/tests/test_device_compare --device cuda --probe 2>&1)
if [ $? -ne 0 ]; then
    echo "bench-gpu: not run: $probe"
    echo "bench-gpu: nothing written to bench/results.json"
    exit 0
fi
gpu=${probe#gpu: }
# dense peak TFLOP/s per precision: fp32 (CUDA cores), tf32 and bf16 (tensor cores)
peak() {
    case "$1" in
        *H100*PCIe*) case $2 in fp32) echo 51;; tf32) echo 378;; bf16) echo 756;; esac;;
        *H100*|*H200*) case $2 in fp32) echo 67;; tf32) echo 495;; bf16) echo 989;; esac;;
        *A100*) case $2 in fp32) echo 19.5;; tf32) echo 156;; bf16) echo 312;; esac;;
        *) echo "";;
    esac
}
T=$(mktemp -d /tmp/bench_gpu.XXXXXX)
trap 'rm -rf "$T"' EXIT INT TERM
echo "bench-gpu: $gpu, $REPS repeats of $STEPS steps"
printf '%-4s %-5s %12s %12s %8s %10s\n' cfg prec tok/s TFLOP/s MFU cuBLAS
frag='{}'
for c in M G; do
    seq=256; [ "$c" = G ] && seq=1024
    for p in fp32 tf32 bf16; do
        : > "$T/$c.$p"
        for r in $(seq 1 "$REPS"); do
            build/bench/train_step --device cuda --precision "$p" --config "$c" --seq "$seq" \
                --steps "$STEPS" --json >> "$T/$c.$p" 2>>"$T/err" || echo "bench-gpu: $c $p failed: $(tail -1 "$T/err")"
        done
        [ -s "$T/$c.$p" ] || continue
        tps=$(jq -s 'map(.tokens_per_s) | sort | .[length/2|floor]' "$T/$c.$p")
        fpt=$(jq -s '.[0].flops_per_token' "$T/$c.$p")
        tf=$(jq -n "$tps * $fpt / 1e12")
        pk=$(peak "$gpu" "$p")
        mfu=$([ -n "$pk" ] && jq -n "$tf / $pk" || echo null)
        share=$(jq -s 'map(.gemm_share) | sort | .[length/2|floor]' "$T/$c.$p")
        printf '%-4s %-5s %12.0f %12.2f %8s %10s\n' "$c" "$p" "$tps" "$tf" "$mfu" "$share"
        frag=$(jq --arg c "$c" --arg p "$p" --argjson tps "$tps" --argjson tf "$tf" --argjson mfu "$mfu" \
               --argjson pk "${pk:-null}" --argjson sh "$share" \
               '.[$c][$p] = {tok_s: $tps, model_tflops: $tf, mfu: $mfu, peak_tflops: $pk, cublas_share: $sh}' <<<"$frag")
    done
done
jq --arg gpu "$gpu" --arg date "$(date -u +%FT%TZ)" --argjson g "$frag" \
   '.gpu = ($g + {name: $gpu, date: $date})' bench/results.json > bench/results.json.tmp \
  && mv bench/results.json.tmp bench/results.json
echo "bench-gpu: gpu.* written to bench/results.json"
