#!/usr/bin/env bash
# make brown: a Llama-style baseline trained on the Brown corpus through the shell pipeline
# (bus, loader, trainer as separate processes), and its loss curve drawn from the metrics the
# bus carried. Writes results/brown_baseline.{png,jsonl,md}.
#   BROWN_STEPS (default 600), BROWN_DIR (default runs/brown) override.
set -euo pipefail
cd "$(dirname "$0")/../.."
W=${BROWN_DIR:-runs/brown}; STEPS=${BROWN_STEPS:-600}
mkdir -p "$W" results
export FT_BUS_PUB=ipc://$PWD/$W/bus.pub FT_BUS_SUB=ipc://$PWD/$W/bus.sub
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
run() { printf '$ %s\n' "$*" >&2; "$@"; }
bgrun() { printf '$ %s &\n' "$*" >&2; "$@" & pids+=($!); }

[ -f data/brown.txt ] || run make data
# 1. a 4096-token byte-level BPE vocabulary learned from Brown; hold out the last 25 documents
[ -f "$W/brown4k.ftbpe" ] || run bin/tokenizer train --vocab-size 4096 --out "$W/brown4k.ftbpe" data/brown.txt
rm -rf "$W/data"; run bin/tokenizer encode --vocab "$W/brown4k.ftbpe" --out "$W/data" data/brown.txt
run bin/tokenizer info "$W/data"

# 2. bus, two loaders, a tap that records the metrics
bgrun bin/bus --quiet
for i in 0 1; do bgrun bin/loader --data "$W/data" --val-docs 25 --bind "ipc://$PWD/$W/loader$i" --name "brown$i" --quiet; done
bgrun bin/bus tap metrics log/brown > "$W/metrics.jsonl"
for _ in $(seq 50); do bin/bus send log/brown log program=brown line=ping >/dev/null 2>&1; [ -s "$W/metrics.jsonl" ] && break; sleep 0.1; done

# 3. train
rm -rf "$W/run"
start=$(date +%s)
run bin/trainer --discover --run brown --run-dir "$W/run" --steps "$STEPS" --seq-len 128 --batch 16 \
    --d-model 128 --layers 4 --heads 4 --kv-heads 2 --d-ff 384 --lr 3e-3 --min-lr 3e-4 --warmup 50 \
    --ckpt-every 200 --log-every 50
secs=$(( $(date +%s) - start ))

# 4. the curve, from what the bus carried
grep '"metrics/brown"' "$W/metrics.jsonl" > results/brown_baseline.jsonl
jq -r '"\(.step) \(.values.loss)"' results/brown_baseline.jsonl > "$W/loss.dat"
gnuplot <<GP
set terminal pngcairo size 800,480 noenhanced
set output 'results/brown_baseline.png'
set title 'Llama-style baseline on the Brown corpus (BPE 4096), CPU, bin/trainer'
set xlabel 'optimizer step (16 x 128 tokens)'
set ylabel 'training cross-entropy (nats/token)'
set grid
plot '$W/loss.dat' using 1:2 with lines lw 1 lc rgb '#88aadd' title 'loss per step', \
     '$W/loss.dat' using 1:2 smooth bezier lw 2 lc rgb '#003388' title 'smoothed'
GP
first=$(head -n 20 "$W/loss.dat" | awk '{s+=$2} END {printf "%.3f", s/NR}')
last=$(tail -n 20 "$W/loss.dat" | awk '{s+=$2} END {printf "%.3f", s/NR}')
params=$(grep -o '[0-9]* parameters' "$W/run.log" 2>/dev/null || true)
cat > results/brown_baseline.md <<MD
Baseline on Brown (\`make brown\`, $(date -u +%F)): d=128, 4 layers, 4/2 heads, SwiGLU 384,
BPE vocabulary 4096, T=128, B=16, $STEPS steps ($((STEPS * 16 * 128)) tokens), AdamW 3e-3 cosine to 3e-4,
$secs s on this machine. Mean training loss over the first 20 steps: $first nats/token; over the last 20: $last.
MD
cat results/brown_baseline.md
