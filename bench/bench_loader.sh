#!/usr/bin/env bash
# Loader throughput as one client sees it: tokens/s = B*T*batches/s received through
# loader_client (window of 16 requests in flight), T=256, B=8, pack layout, on a random
# dataset of ~4M tokens. Cases: one loader over ipc, two loaders over ipc, one over tcp.
# Median of 3 repeats each; writes "$BENCH_OUT/loader.json" and prints a table.
set -u
cd "$(dirname "$0")/.."
. bench/lib.sh
bench_no_args "$@"
OUT=${BENCH_OUT:-build/bench-out}
mkdir -p "$OUT"
T=$(mktemp -d /tmp/bench_loader.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT INT TERM
BATCHES=${LOADER_BENCH_BATCHES:-3000}

bin/loader mkdata --out "$T/ds" --docs 8000 --seed 1 --vocab 50257 --min-len 16 --max-len 1000 || exit 1
port=$((20000 + RANDOM % 40000))
bin/loader --data "$T/ds" --bind "ipc://$T/l0" --quiet & pids+=($!)
bin/loader --data "$T/ds" --bind "ipc://$T/l1" --quiet & pids+=($!)
bin/loader --data "$T/ds" --bind "tcp://127.0.0.1:$port" --quiet & pids+=($!)
for i in $(seq 1 50); do [ -S "$T/l0" ] && [ -S "$T/l1" ] && break; sleep 0.1; done
sleep 0.3

run() {
    local r=() x
    for k in 1 2 3; do
        x=$(bin/loader bench --connect "$1" --B 8 --T 256 --batches "$BATCHES" --window 16) || return 1
        r+=("$x")
    done
    bench_median "${r[@]}"
}
one_ipc=$(run "ipc://$T/l0") || exit 1
two_ipc=$(run "ipc://$T/l0,ipc://$T/l1") || exit 1
one_tcp=$(run "tcp://127.0.0.1:$port") || exit 1

printf '%-22s %14s\n' case "tokens/s"
printf '%-22s %14.0f\n' "one loader, ipc" "$one_ipc" "two loaders, ipc" "$two_ipc" "one loader, tcp" "$one_tcp"
printf '{"loader": {"one_ipc_tok_s": %.0f, "two_ipc_tok_s": %.0f, "one_tcp_tok_s": %.0f, "B": 8, "T": 256, "batches": %d, "window": 16}}\n' \
    "$one_ipc" "$two_ipc" "$one_tcp" "$BATCHES" > "$OUT/loader.json"
cat "$OUT/loader.json"
