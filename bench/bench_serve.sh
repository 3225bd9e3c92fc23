#!/usr/bin/env bash
# The generation service under load: bin/sampler --serve of a configuration-S checkpoint (random
# weights, baseline; d=256, 4 layers, 4/2 heads, ff 768, vocab 4096: a BPE vocabulary trained on
# the first MB of data/brown.txt) answering 1, 8 and 32 concurrent closed-loop clients
# (bench/serve_load.py: each sends a request, waits for its answer, sends the next), every
# request a 16-token prompt and 64 sampled tokens (temperature 1, no early stop). Reported per
# concurrency: tokens/s of all clients together, p50 and p99 latency (send to final reply).
# Peer: PyTorch decoding the same 32 requests as one static batch with a KV cache
# (bench/generate_torch.py --batch 32, the faster of 1 and $BENCH_THREADS threads).
# Then the memory of a reload under load: the server follows a bus, 32 clients ask, a second
# checkpoint is announced; the server's own account of its device memory and its RSS.
# SERVE_BENCH_BEFORE=path/to/an/older/bin/sampler also measures that one at 1 client (the
# one-at-a-time server this replaced, for the "one client's latency" comparison).
# SERVE_BENCH_FLAGS adds flags to the measured server (e.g. "--parallel-rows 0").
# SERVE_BENCH_REQUESTS "R1 R8 R32": requests per client at 1, 8 and 32 clients (default
# "48 16 8": about a second of decoding each, on a machine where one client gets ~3,500
# tokens/s; the earlier 16 / 6 / 3 made rounds of ~0.3 s there, and p99 the maximum of 96).
# Writes "$BENCH_OUT/serve.json" {"serve": {...}}.
set -u
cd "$(dirname "$0")/.."
. bench/lib.sh
bench_no_args "$@"
OUT=${BENCH_OUT:-build/bench-out}
mkdir -p "$OUT"
TH=${BENCH_THREADS:-2}
ROUNDS=${SERVE_BENCH_ROUNDS:-3}
read -r R1 R8 R32 <<< "${SERVE_BENCH_REQUESTS:-48 16 8}"
CPU="$(bench_cpu_model), $(nproc) cores, $(grep -qw avx512_bf16 /proc/cpuinfo && echo AVX512_BF16 || { grep -qw avx512f /proc/cpuinfo && echo AVX-512 || echo AVX2; })"
echo "serve bench: $CPU, load $(cut -d' ' -f1-3 /proc/loadavg)"
make -s bin/sampler bin/bus bin/tokenizer build/bench/serve_ckpt >/dev/null || exit 1
PY=/usr/bin/python3
D=$(mktemp -d /tmp/bench_serve.XXXXXX)
spid=; bpid=
cleanup() { for p in $spid $bpid; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$D"; }
trap cleanup EXIT

build/bench/serve_ckpt --out "$D/run" --step 1 --seed 1 >/dev/null || exit 1
build/bench/serve_ckpt --out "$D/run" --step 2 --seed 2 >/dev/null || exit 1
[ -s data/brown.txt ] || { echo "bench_serve: data/brown.txt missing (run: make data)"; exit 1; }
head -c 1000000 data/brown.txt >"$D/brown.txt"
bin/tokenizer train --vocab-size 4096 --out "$D/vocab.json" "$D/brown.txt" 2>/dev/null || exit 1
PROMPT="The jury further said in term-end presentments that the City Executive"
P=$(printf '%s' "$PROMPT" | bin/tokenizer ids --vocab "$D/vocab.json" - 2>/dev/null | wc -w)
[ "$P" = 16 ] || echo "bench_serve: the prompt is $P tokens with this vocabulary (16 wanted)"

serve() { # sampler-binary log flags...: a server of checkpoint 1 on ipc://$D/s.sock
    local bin=$1 log=$2; shift 2
    rm -f "$D/s.sock"
    $bin --ckpt "$D/run/ckpt-00000001" --vocab "$D/vocab.json" --serve "ipc://$D/s.sock" "$@" 2>"$D/$log" & spid=$!
    for _ in $(seq 100); do [ -S "$D/s.sock" ] && break; kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
    # a server that did not start would leave every client waiting out its 120 s time-out
    [ -S "$D/s.sock" ] && kill -0 "$spid" 2>/dev/null \
        || { echo "bench_serve: $bin did not start: $(tail -n 1 "$D/$log")"; spid=; exit 1; }
}
unserve() { kill -TERM "$spid"; wait "$spid" 2>/dev/null; spid=; }
load() { # clients requests-per-client -> one JSON line
    $PY bench/serve_load.py --endpoint "ipc://$D/s.sock" --clients "$1" --requests "$2" --prompt "$PROMPT" --max-new 64
}

# The machine is shared and its load drifts within seconds: the concurrencies and the peer take
# turns, ROUNDS times; each figure is the median over the rounds.
serve bin/sampler serve.log --max-batch 32 --max-queue 256 ${SERVE_BENCH_FLAGS:-}
for r in $(seq "$ROUNDS"); do   # one JSON line per round in $D/<key>.jsonl
    load 1 "$R1" >>"$D/c1.jsonl"; load 8 "$R8" >>"$D/c8.jsonl"; load 32 "$R32" >>"$D/c32.jsonl"
    OMP_NUM_THREADS=1 $PY bench/generate_torch.py --batch 32 --prompt 16 --new 64 --repeats 3 --threads 1 --json >>"$D/t1.jsonl"
    OMP_NUM_THREADS=$TH $PY bench/generate_torch.py --batch 32 --prompt 16 --new 64 --repeats 3 --threads "$TH" --json >>"$D/tn.jsonl"
done
start_line=$(head -1 "$D/serve.log")
unserve
if [ -n "${SERVE_BENCH_BEFORE:-}" ]; then
    serve "$SERVE_BENCH_BEFORE" before.log
    for r in $(seq "$ROUNDS"); do load 1 "$R1" >>"$D/before.jsonl"; done
    unserve
fi
pick() { # key field -> the median of that field over the rounds, or null
    [ -s "$D/$1.jsonl" ] || { echo null; return; }
    bench_median $(jq ".$2" "$D/$1.jsonl")
}
errors=$(cat "$D"/c*.jsonl | jq -s 'map(.errors) | add')

# Reload under load: memory before, while two models are held, and after.
bin/bus --pub "ipc://$D/pub" --sub "ipc://$D/sub" 2>/dev/null & bpid=$!
sleep 0.3
serve bin/sampler reload.log --max-batch 32 --max-queue 256 --follow run --bus-sub "ipc://$D/sub"
rss() { awk "/$1/ {print \$2}" /proc/$spid/status; }
rss_before=$(rss VmRSS)
$PY bench/serve_load.py --endpoint "ipc://$D/s.sock" --clients 32 --requests 6 --prompt "$PROMPT" --max-new 64 >/dev/null & lp=$!
sleep 1
bin/bus send --pub "ipc://$D/pub" ckpt/run ckpt run=run step=2 path="$D/run/ckpt-00000002" model=llama >/dev/null
wait $lp
rss_peak=$(rss VmHWM); rss_after=$(rss VmRSS)
unserve
kill "$bpid" 2>/dev/null; wait "$bpid" 2>/dev/null; bpid=
reloaded=$(grep -o 'reloaded .*' "$D/reload.log" | head -1)
drained=$(grep -c 'the last row on .* finished' "$D/reload.log")

jq -n --arg start "$start_line" --arg reloaded "$reloaded" --argjson drained "$drained" \
      --argjson c1t "$(pick c1 tok_s)" --argjson c1a "$(pick c1 p50_ms)" --argjson c1b "$(pick c1 p99_ms)" \
      --argjson c8t "$(pick c8 tok_s)" --argjson c8a "$(pick c8 p50_ms)" --argjson c8b "$(pick c8 p99_ms)" \
      --argjson c32t "$(pick c32 tok_s)" --argjson c32a "$(pick c32 p50_ms)" --argjson c32b "$(pick c32 p99_ms)" \
      --argjson t1 "$(pick t1 tok_s)" --argjson tn "$(pick tn tok_s)" --argjson th "$TH" \
      --argjson bt "$(pick before tok_s)" --argjson ba "$(pick before p50_ms)" --argjson bb "$(pick before p99_ms)" \
      --argjson errors "$errors" --argjson rounds "$ROUNDS" --argjson P "$P" \
      --argjson r1 "$R1" --argjson r8 "$R8" --argjson r32 "$R32" --arg cpu "$CPU" \
      --argjson rb "$rss_before" --argjson rp "$rss_peak" --argjson ra "$rss_after" \
      --argjson per "$(for k in c1 c8 c32 t1; do jq -s --arg k "$k" '{($k): map(.tok_s * 10 | round / 10)}' "$D/$k.jsonl"; done | jq -s add)" '
  def r1: . * 10 | round / 10;
  def e(t; a; b): {tok_s: (t|r1), p50_ms: (a|r1), p99_ms: (b|r1)};
  {serve: {c1: e($c1t; $c1a; $c1b), c8: e($c8t; $c8a; $c8b), c32: e($c32t; $c32a; $c32b),
           pytorch_batch32: {tok_s: ([$t1, $tn] | max | r1), tok_s_1thread: ($t1|r1), tok_s_nthreads: ($tn|r1), threads: $th},
           before_c1: (if $bt == null then null else e($bt; $ba; $bb) end),
           ratios: {c32_over_c1_tok_s: ($c32t / $c1t * 100 | round / 100),
                    c32_over_c1_p99: ($c32b / $c1b * 100 | round / 100),
                    c32_over_pytorch_batch32: ($c32t / ([$t1, $tn] | max) * 100 | round / 100),
                    c1_p50_over_before: (if $ba == null then null else ($c1a / $ba * 100 | round / 100) end)},
           errors: $errors, tok_s_per_round: $per,
           reload: {server_line: $reloaded, old_model_freed: ($drained > 0),
                    rss_kb_before: $rb, rss_kb_peak: $rp, rss_kb_after: $ra},
           setup: {config: "S", model: "baseline", prompt: $P, new: 64, max_batch: 32, rounds: $rounds,
                   requests_per_client: {c1: $r1, c8: $r8, c32: $r32}, server_start: $start, cpu: $cpu}}}' >"$OUT/serve.json" || exit 1
jq -r '.serve | "clients   tok/s   p50 ms   p99 ms",
  (["c1", "c8", "c32"][] as $k | "\($k)\t\(.[$k].tok_s)\t\(.[$k].p50_ms)\t\(.[$k].p99_ms)"),
  "PyTorch static batch of 32: \(.pytorch_batch32.tok_s) tok/s",
  "32 clients / 1 client: \(.ratios.c32_over_c1_tok_s)x tok/s, \(.ratios.c32_over_c1_p99)x p99; / PyTorch: \(.ratios.c32_over_pytorch_batch32)x",
  (if .before_c1 then "before (one at a time), 1 client: p50 \(.before_c1.p50_ms) ms; now / before: \(.ratios.c1_p50_over_before)" else empty end),
  "reload under load: \(.reload.server_line); RSS \(.reload.rss_kb_before) kB -> peak \(.reload.rss_kb_peak) kB -> \(.reload.rss_kb_after) kB"' "$OUT/serve.json"
