#!/usr/bin/env bash
# The load test of bin/live (docs/live.md): 50 page clients on a run publishing 1000 metrics
# events a second for a minute (LIVE_BENCH_CLIENTS, LIVE_BENCH_RATE, LIVE_BENCH_SECONDS), after
# a 10 s baseline with no page open (bench/live_load.py says what each number is). The
# publisher stands in for a trainer: the time of its sends is what a trainer's step would pay.
# Writes "$BENCH_OUT/live.json" {"live": {...}} and prints it.
set -u
cd "$(dirname "$0")/.."
. bench/lib.sh
bench_no_args "$@"
OUT=${BENCH_OUT:-build/bench-out}
mkdir -p "$OUT"
make -s bin/live bin/bus build/bench/live_clients >/dev/null || exit 1
D=$(mktemp -d /tmp/bench_live.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$D"; }
trap cleanup EXIT
export FT_BUS_PUB=ipc://$D/bus.pub FT_BUS_SUB=ipc://$D/bus.sub
echo "live bench: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
bin/bus --quiet 2>"$D/bus.log" & pids+=($!)
mkdir -p "$D/runs"
bin/live --runs "$D/runs" --port 0 --quiet >"$D/url" 2>"$D/live.log" & lp=$!; pids+=($lp)
for _ in $(seq 100); do grep -q '^live: http' "$D/url" 2>/dev/null && break; sleep 0.1; done
port=$(sed -n 's/^live: http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$D/url")
[ -n "$port" ] || { echo "bench_live: bin/live did not start"; cat "$D/live.log"; exit 1; }
/usr/bin/python3 bench/live_load.py --port "$port" --pid "$lp" --pub "$FT_BUS_PUB" --rate "${LIVE_BENCH_RATE:-1000}" \
    --seconds "${LIVE_BENCH_SECONDS:-60}" --baseline 10 --clients "${LIVE_BENCH_CLIENTS:-50}" --work "$D" >"$D/result.json" || exit 1
jq -c . "$D/result.json"
jq '{live: .}' "$D/result.json" >"$OUT/live.json"
jq -e '.streams.gaps == 0 and .streams.closed == 0 and .streams.min_last == .streams.target' "$D/result.json" >/dev/null \
    || { echo "bench_live: a client missed updates or its stream ended"; exit 1; }
