#!/usr/bin/env bash
# Integration test of bin/live (docs/live.md) driven through its page in Debian's chromium
# (headless, playwright-core from npm: `make data` fetches it): a short Free Transformer run
# fed by two loaders; the page shows the loss curve growing while it trains, an evaluator
# started mid-run adds its points, a SIGKILLed loader is shown gone within seconds, a sample
# request through the page returns text under four latents, the Log box shows the programs'
# lines, bin/live killed and restarted is picked up by the open page with the whole history
# (from the run directory), its log has the trainer's stop line; a screenshot
# is written to $W/live.png. Then the HTTP API by curl: bad parameters, methods, bodies, the
# Host check and the token off loopback.
set -u
cd "$(dirname "$0")/.."
. tests/lib/pipeline.sh
it_init it_live 1
export RUN=lv W

if [ ! -x /usr/bin/chromium ] || [ ! -f build/npm/playwright-core/package/package.json ] || ! command -v curl >/dev/null; then
    echo "FAIL: needs /usr/bin/chromium and curl (make deps) and playwright-core (make data)"; echo "0 passed, 1 failed"; exit 1
fi
it_synth_data "$W/ds" 3000 7
bin/bus >"$W/bus.log" 2>&1 & pids+=($!)
for i in 0 1; do
    bin/loader --data "$W/ds" --val-docs 200 --bind "ipc://$W/l$i" --name "l$i" --quiet >"$W/l$i.log" 2>&1 & pids+=($!)
done
export L0_PID=${pids[1]}
sleep 0.5
bin/live --runs "$W" --port 0 >"$W/live.url" 2>"$W/live.log" & lp=$!
wait_for "grep -q '^live: http' $W/live.url" 20
export LIVE_URL=$(sed -n 's/^live: //p' "$W/live.url") LIVE_PID=$lp
port=${LIVE_URL##*:}; port=${port%%/*}
ok "bin/live prints its URL on loopback ($LIVE_URL)" "[[ '$LIVE_URL' == http://127.0.0.1:*/ ]]"
# a Free Transformer small enough to step fast; it runs until the browser checks are done
bin/trainer --discover --run $RUN --run-dir "$W/run" --steps 100000 --seq-len 66 --batch 8 --layout pad --model free \
    --latent-bits 4 --kappa 1 --kappa-unit bits --d-model 32 --layers 2 --heads 4 --kv-heads 2 --d-ff 64 --lr 3e-3 \
    --warmup 20 --ckpt-every 100 --keep 3 --log-every 1000 2>"$W/trainer.log" & tp=$!; pids+=($tp)
export EVAL_CMD="exec bin/evaluator --run $RUN --run-dir $W/run --task val --data $W/ds --val-docs 200 --batches 1 --batch 4 --seq-len 64 --iw-samples 1 --draws 1 --out $W/run/evals.jsonl --poll-ms 300 --name val --quiet >/dev/null 2>$W/eval.log"
export SAMPLER_CMD="exec bin/sampler --serve ipc://$W/sampler --follow $RUN --run-dir $W/run --name s0 --quiet 2>$W/sampler.log"
export RESTART_CMD="exec bin/live --runs $W --port $port >$W/live2.url 2>$W/live2.log"
: >"$W/pids"
node tests/live/browser.cjs >"$W/browser.log" 2>&1; brc=$?
while read -r p; do pids+=($p); done <"$W/pids"
cat "$W/browser.log"
pass=$((pass + $(grep -c '^ok ' "$W/browser.log"))); fail=$((fail + $(grep -c '^FAIL' "$W/browser.log")))
ok "the browser script exits 0" "[ $brc = 0 ]"
kill -TERM $tp; wait $tp; ok "the trainer stops cleanly on SIGTERM" "[ $? = 0 ]"
ok "the trainer wrote metrics.jsonl with data_wait_s" "grep -q '\"data_wait_s\"' $W/run/metrics.jsonl"

# ---- the API by curl (on the restarted bin/live) ----
U=${LIVE_URL%/}
code() { curl -s -o "$W/body" -w '%{http_code}' "$@"; }
one_line() { [ "$(wc -l <"$W/body")" = 1 ] && jq -e '.error | length > 0' "$W/body" >/dev/null; }
stop_logged() { curl -s "$U/api/state" | jq -e '.log | any(.program == "trainer" and (.line | startswith("stopped by signal at step ")))' >/dev/null; }
wait_for stop_logged 10; r=$?
ok "GET /api/state: the log holds the trainer's stop line (log/trainer)" "[ $r = 0 ]"
ok "GET /api/state: the run with its curves" "[ \$(code $U/api/state) = 200 ] && jq -e '.runs[] | select(.run == \"$RUN\") | .metrics.loss | length > 10' $W/body >/dev/null"
ok "GET /api/health: stages" "[ \$(code $U/api/health) = 200 ] && jq -e '.stages | length >= 3' $W/body >/dev/null"
ok "an unknown run is 404 with one line" "[ \$(code '$U/api/series?run=nope&name=loss') = 404 ] && one_line"
ok "a bad run name is 400" "[ \$(code '$U/api/series?run=%ff%fe&name=loss') = 400 ] && one_line"
ok "a huge range is 400" "[ \$(code '$U/api/series?run=$RUN&name=loss&to=99999999999999999999') = 400 ] && one_line"
ok "from after to is 400" "[ \$(code '$U/api/series?run=$RUN&name=loss&from=9&to=3') = 400 ] && one_line"
ok "points out of range is 400" "[ \$(code '$U/api/state?points=0') = 400 ] && one_line"
ok "an unknown parameter is 400" "[ \$(code '$U/api/state?evil=1') = 400 ] && one_line"
ok "malformed JSON is 400" "[ \$(code -X POST -H 'Content-Type: application/json' --data '{\"prompt\": ' $U/api/sample) = 400 ] && one_line"
ok "a wrong field is 400" "[ \$(code -X POST -H 'Content-Type: application/json' --data '{\"prompt\":\"K>\",\"n\":99}' $U/api/sample) = 400 ] && one_line"
ok "a body that is not JSON-typed is 415" "[ \$(code -X POST --data '{}' $U/api/sample) = 415 ] && one_line"
ok "a body over 16 KiB is 413" "[ \$(head -c 20000 /dev/zero | tr '\\0' a | code -X POST -H 'Content-Type: application/json' --data-binary @- $U/api/sample) = 413 ] && one_line"
ok "a wrong method is 405" "[ \$(code -X DELETE $U/api/state) = 405 ] && one_line"
ok "another Host is 403 (DNS rebinding)" "[ \$(code -H 'Host: attacker.example:$port' $U/api/state) = 403 ] && one_line"
ok "an unknown path is 404" "[ \$(code $U/nope) = 404 ] && one_line"
ok "headers over 32 KiB are refused (431)" "[ \$(code -H \"X-Big: \$(head -c 40000 /dev/zero | tr '\\0' a)\" $U/api/health) = 431 ]"
ok "the restarted bin/live is still serving" "kill -0 \$(pgrep -f -- '--port $port' | head -1) 2>/dev/null && [ \$(code $U/api/health) = 200 ]"

# off loopback a token is required, printed at start (127.0.0.2 is loopback too: 0.0.0.0 is not)
bin/live --runs "$W" --no-bus --host 0.0.0.0 --port 0 >"$W/live3.url" 2>"$W/live3.log" & l3=$!; pids+=($l3)
wait_for "grep -q '^live: http' $W/live3.url" 20
T=$(sed -n 's/.*?token=//p' "$W/live3.url"); P3=$(sed -n 's/^live: http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$W/live3.url")
ok "off loopback: a token is printed and said to be needed" "[ \${#T} = 32 ] && grep -q 'needs the token' $W/live3.log"
ok "off loopback: no token, 401" "[ \$(code http://127.0.0.1:$P3/api/state) = 401 ] && one_line"
ok "off loopback: a wrong token, 401" "[ \$(code -H 'Authorization: Bearer 0123456789abcdef0123456789abcdef' http://127.0.0.1:$P3/api/state) = 401 ]"
ok "off loopback: the token as a header" "[ \$(code -H 'Authorization: Bearer $T' http://127.0.0.1:$P3/api/state) = 200 ]"
ok "off loopback: the page with ?token sets the cookie the page's requests carry" \
   "curl -s -D - -o /dev/null 'http://127.0.0.1:$P3/?token=$T' | grep -qi 'Set-Cookie: ft_live_token=$T; Path=/; HttpOnly; SameSite=Strict' && [ \$(code -b ft_live_token=$T http://127.0.0.1:$P3/api/health) = 200 ]"
kill -TERM $l3; wait $l3; ok "bin/live exits 0 on SIGTERM" "[ $? = 0 ]"
ok "bad flags exit 2 with one line" "bin/live --port 99999 2>$W/e; [ \$? = 2 ] && [ \$(wc -l <$W/e) = 1 ]"
ok "a bad --runs exits 1 with one line" "bin/live --runs $W/none --port 0 --no-bus >/dev/null 2>$W/e; [ \$? = 1 ] && [ \$(wc -l <$W/e) = 1 ]"
it_done
