#!/usr/bin/env bash
# Fuzz of bin/live's HTTP endpoints (docs/live.md, "Safety"): tests/live/fuzz_http.py throws
# malformed requests, long URLs and headers, broken bodies, slow clients and unread event
# streams at a running server, two rounds of LIVE_FUZZ_SECONDS (10) each with a fixed seed
# (LIVE_FUZZ_SEED): no crash, the server answers throughout, its descriptors come back, its
# memory does not grow from the first round to the second; then a clean exit on SIGTERM.
set -u
cd "$(dirname "$0")/.."
. tests/lib/pipeline.sh
it_init it_live_fuzz 1
mkdir -p "$W/r1"
for i in 1 2 3; do
    echo "{\"topic\":\"metrics/r1\",\"v\":1,\"type\":\"metrics\",\"run\":\"r1\",\"step\":$i,\"time\":1.5,\"values\":{\"loss\":$((10 - i))}}"
done >"$W/r1/metrics.jsonl"
bin/live --runs "$W" --no-bus --port 0 >"$W/url" 2>"$W/live.log" & lp=$!; pids+=($lp)
wait_for "grep -q '^live: http' $W/url" 20
port=$(sed -n 's/^live: http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$W/url")
ok "bin/live serves (port $port)" "[ -n '$port' ]"
python3 tests/live/fuzz_http.py "$port" "$lp" "${LIVE_FUZZ_SECONDS:-10}" "${LIVE_FUZZ_SEED:-1}" >"$W/fuzz.log" 2>&1; frc=$?
cat "$W/fuzz.log"
pass=$((pass + $(grep -c '^ok ' "$W/fuzz.log"))); fail=$((fail + $(grep -c '^FAIL' "$W/fuzz.log")))
ok "the fuzzer exits 0" "[ $frc = 0 ]"
kill -TERM $lp; wait $lp; rc=$?
ok "bin/live exits 0 on SIGTERM after the fuzz ($rc)" "[ $rc = 0 ]"
it_done
