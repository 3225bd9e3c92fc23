#!/usr/bin/env bash
# make demo: the whole pipeline on the synthetic data of the Free Transformer paper (§4.1),
# as separate processes talking over ZeroMQ:
#   tokenizer synth | tokenizer encode -> LMDB dataset
#   bus  <- loader x2 (announce themselves), trainer (metrics, checkpoints)
#   trainer <- batches from whichever loader is alive (one is killed halfway)
#   bus tap -> the events as JSON lines
#   sampler -> a Figure-4-style grid: 5 samples with independent Z, 2 groups of 5 sharing one Z
#   live    -> a page where all of it is watched while it runs (its URL is printed; docs/live.md),
#              with an evaluator and a sampler service started mid-run feeding it
# DEMO_SCREENSHOT=FILE.png writes a screenshot of that page near the end of training (chromium,
# playwright-core: make deps, make data); DEMO_HOLD=1 keeps the page up at the end until Enter.
# The Free Transformer trains at kappa = DEMO_KAPPA bits (default 1) for DEMO_STEPS steps. At 1
# bit the paper's Figure 4 shows the latent carrying the target's position and the noise, and
# this small model learns that within the demo's minutes (shared-Z groups: position difference
# 1.7 against 7.2 for independent Z, noise agreement 0.70 against 0.24, 2026-11-23); at 1/8 bit
# it needs far longer runs (README, "Figure 4 of the paper") and the demo's groups would not
# visibly agree.
# Every step prints what it runs, so the commands can be copied into a shell.
set -euo pipefail
# settings are environment variables only: an argument never starts the demo (it removes runs/demo)
case "${1-}" in
    "") ;;
    -h|--help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;;
    *) echo "demo.sh: takes no arguments (its settings are DEMO_* environment variables: see --help); got '$1'" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
W=${DEMO_DIR:-runs/demo}
STEPS=${DEMO_STEPS:-1500}
KAPPA=${DEMO_KAPPA:-1}
rm -rf "$W"; mkdir -p "$W"
export FT_BUS_PUB=ipc://$PWD/$W/bus.pub FT_BUS_SUB=ipc://$PWD/$W/bus.sub
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*" >&2; "$@"; }
# Starts a program in the background; $! (and the pids list) is the program itself.
bgrun() { printf '$ %s &\n' "$*" >&2; "$@" & pids+=($!); }

say "1. synthetic sequences (seed 000 §4.1): prompt 'L>' then 64 characters"
run bin/tokenizer synth --n 50000 --seed 1 > "$W/synth.txt"
head -n 4 "$W/synth.txt"

say "2. byte-level tokenization into an LMDB dataset"
run bin/tokenizer encode --vocab bytes --out "$W/data" "$W/synth.txt"
run bin/tokenizer info "$W/data"

say "3. the bus, two loaders announcing themselves on it, and a tap on the events"
bgrun bin/bus --quiet
for i in 0 1; do
    bgrun bin/loader --data "$W/data" --bind "ipc://$PWD/$W/loader$i" --name "l$i" --quiet
done
lpid=${pids[1]}
bin/bus tap metrics ckpt loader > "$W/events.jsonl" & pids+=($!)
sleep 1

say "   the live page: the runs under $W, fed from the bus (docs/live.md)"
bgrun bin/live --runs "$W" --port "${DEMO_LIVE_PORT:-0}" --quiet > "$W/live.url"
for _ in $(seq 50); do grep -q '^live: http' "$W/live.url" && break; sleep 0.1; done
URL=$(sed -n 's/^live: //p' "$W/live.url")
printf '\033[1m   watch it live: %s\033[0m  (from another machine: ssh -L PORT:127.0.0.1:PORT this-host, docs/live.md)\n' "$URL"

say "4. one batch, fetched by hand (B=2 rows of T+1=17 token ids)"
run bin/loader get --connect "ipc://$PWD/$W/loader0" --B 2 --T 16 --seed 1

say "5. train a small Free Transformer (H=8 latent bits, kappa=$KAPPA bit); the trainer finds the loaders on the bus"
bgrun bin/trainer --discover --run demo --run-dir "$W/run" --steps "$STEPS" --seq-len 66 --batch 32 \
    --layout pad --model free --latent-bits 8 --kappa "$KAPPA" --kappa-unit bits \
    --d-model 64 --layers 4 --heads 4 --kv-heads 2 --d-ff 192 --lr 3e-3 --min-lr 3e-4 --warmup 100 \
    --ckpt-every $((STEPS / 3)) --log-every 100
tpid=$!
sleep 15
say "   killing loader l0 (SIGKILL) while training runs: its requests go to l1 (the page shows l0 gone)"
kill -9 "$lpid"
# at the first checkpoint (a third of the way) an evaluator (the Figure-4 measures of each
# checkpoint) and a sampler service (the page's samples box) join the running pipeline
while [ -z "$(ls -d "$W"/run/ckpt-* 2>/dev/null)" ] && kill -0 "$tpid" 2>/dev/null; do sleep 1; done
if kill -0 "$tpid" 2>/dev/null; then
    say "   an evaluator and a sampler service join mid-run; the page shows their points and samples"
    bgrun nice -n 10 bin/evaluator --run demo --run-dir "$W/run" --task synth --limit 4 --vocab bytes --threads 1 \
        --out "$W/run/evals.jsonl" --quiet > /dev/null
    bgrun bin/sampler --serve "ipc://$PWD/$W/sampler" --follow demo --run-dir "$W/run" --threads 1 --quiet
fi
if [ -n "${DEMO_SCREENSHOT:-}" ]; then
    # near the end of training: nine tenths of the steps done
    while kill -0 "$tpid" 2>/dev/null && [ "$(tail -n 1 "$W/run/metrics.jsonl" | jq .step)" -lt $((STEPS * 9 / 10)) ]; do sleep 1; done
    node tests/live/screenshot.cjs "$URL" "$DEMO_SCREENSHOT" "K>" || true
fi
wait "$tpid"

say "6. what the bus carried"
echo "events: $(wc -l < "$W/events.jsonl") ($(grep -c '"metrics/demo"' "$W/events.jsonl") metrics, $(grep -c '"ckpt/demo"' "$W/events.jsonl") checkpoints, $(grep -c '"loader/' "$W/events.jsonl") loader heartbeats)"
grep '"metrics/demo"' "$W/events.jsonl" | jq -r '"step \(.step)  loss \(.values.loss | .*1000 | round / 1000)  ce \(.values.ce | .*1000 | round / 1000)  kl \(.values.kl_bits | .*1000 | round / 1000) bits"' \
    | awk -v n="$STEPS" 'NR % int(n / 10) == 1'
grep '"ckpt/demo"' "$W/events.jsonl" | jq -c '{run, step, path}'

say "7. sampling, as in the paper's Figure 4: the prompt, then 64 characters"
p="$(printf "\\x$(printf %x $((65 + RANDOM % 26)))")>"
echo "independent Z for each sequence:"
run bin/sampler --run-dir "$W/run" --prompt "$p" --n 5 --max-new 64 --latent independent --seed 1 --quiet | sed "s/^/  $p/"
for g in 1 2; do
    echo "one Z shared by the group ($g):"
    run bin/sampler --run-dir "$W/run" --prompt "$p" --n 5 --group 5 --max-new 64 --latent shared --seed $((g + 1)) --quiet | sed "s/^/  $p/"
done
echo "what to look for: within a shared-Z group the block of target letters starts at (nearly) the"
echo "same place and many '!' fall at the same places; across independent Z they do not."
echo "the Figure-4 measures on 20 groups (bin/evaluator --task synth): shared_pos_diff against"
echo "independent_pos_diff (mean distance of the target's start), shared_noise_agree against"
echo "independent_noise_agree (the share of '!' positions two sequences have in common):"
run bin/evaluator --run demo --run-dir "$W/run" --task synth --limit 20 --vocab bytes --once --no-bus --quiet | jq -c .values
say "done: everything above ran as separate processes; see README.md for each program"
if [ "${DEMO_HOLD:-0}" = 1 ]; then
    echo "the page is still at $URL: press Enter to stop everything"
    read -r _ || true
fi
