#!/usr/bin/env bash
# Integration test of bin/sampler: train a tiny baseline and a tiny Free Transformer on the
# synthetic data through the real pipeline (bus, loader, trainer), then sample from their
# checkpoints: output shape, determinism by seed, the latent modes, the JSON form, and the
# refusals (bad flags, missing/corrupt checkpoint, vocabulary mismatch), one line each.
set -u
cd "$(dirname "$0")/.."
. tests/lib/pipeline.sh
# one thread: the models are tiny, and on the shared 2-core machine a second thread mostly
# waits at barriers (see model/generate.c)
it_init it_sampler 1
export LC_ALL=C
it_synth_data "$W/ds" 2000 3 --append-eot
it_pipeline "$W/ds"

MODEL="--d-model 32 --layers 2 --heads 4 --kv-heads 2 --d-ff 64 --seq-len 64 --batch 8 --warmup 5 --lr 1e-2"
bin/trainer --loaders "ipc://$W/l0" $MODEL --run base --run-dir "$W/base" --steps 60 --ckpt-every 30 2>"$W/base.log"
ok "baseline trained" "[ $? = 0 ] && [ -d $W/base/ckpt-00000060 ]"
S() { bin/sampler --quiet "$@"; }

# 1. shape: --n lines of --max-new characters (bytes vocabulary, synthetic text has no newline)
S --run-dir "$W/base" --prompt 'K>' --n 5 --max-new 30 --seed 1 >"$W/s1.txt" 2>"$W/s1.err"
ok "sampler exits 0" "[ $? = 0 ] && [ ! -s $W/s1.err ]"
ok "5 lines" "[ \$(wc -l < $W/s1.txt) = 5 ]"
S --run-dir "$W/base" --prompt 'K>' --n 5 --max-new 30 --seed 1 --json >"$W/s1.json"
ok "30 tokens each" "[ \$(jq -c 'select((.ids | length) == 30)' $W/s1.json | wc -l) = 5 ]"
# (texts compared where every id is a printable ASCII byte: other bytes are replaced in JSON)
ok "plain lines are the JSON texts" "[ \"\$(jq -r 'select(all(.ids[]; . >= 32 and . < 127)) | .i' $W/s1.json | while read i; do sed -n \"\$((i+1))p\" $W/s1.txt; done)\" = \"\$(jq -r 'select(all(.ids[]; . >= 32 and . < 127)) | .text' $W/s1.json)\" ]"
# the trained model has learned the alphabet of the data: mostly '_' (a 60-step model, so
# only a loose check: more than half of all characters)
ok "mostly underscores" "[ \$(tr -cd _ < $W/s1.txt | wc -c) -gt 75 ]"

# 2. determinism: same seed same text, another seed other text; batching does not matter
S --run-dir "$W/base" --prompt 'K>' --n 5 --max-new 30 --seed 1 >"$W/s1b.txt"
ok "same seed, same samples" "cmp -s $W/s1.txt $W/s1b.txt"
S --run-dir "$W/base" --prompt 'K>' --n 5 --max-new 30 --seed 2 >"$W/s2.txt"
ok "another seed, other samples" "! cmp -s $W/s1.txt $W/s2.txt"
S --run-dir "$W/base" --prompt 'K>' --n 1 --max-new 30 --seed 1 >"$W/s1one.txt"
ok "sample 0 alone equals sample 0 of a batch" "[ \"\$(head -1 $W/s1.txt)\" = \"\$(cat $W/s1one.txt)\" ]"
S --ckpt "$W/base/ckpt-00000060" --prompt 'K>' --n 5 --max-new 30 --seed 1 >"$W/s1c.txt"
ok "--ckpt of the newest equals --run-dir" "cmp -s $W/s1.txt $W/s1c.txt"
# greedy ignores the seed and every sample is the same
S --run-dir "$W/base" --prompt 'K>' --n 3 --max-new 20 --temperature 0 --seed 9 >"$W/g.txt"
ok "greedy samples identical" "[ \$(sort -u $W/g.txt | wc -l) = 1 ]"
# prompt from stdin equals --prompt
printf 'K>\n' | S --run-dir "$W/base" --n 5 --max-new 30 --seed 1 >"$W/s1in.txt"
ok "prompt on stdin" "cmp -s $W/s1.txt $W/s1in.txt"
# top-k 1 is greedy
S --run-dir "$W/base" --prompt 'K>' --n 2 --max-new 20 --top-k 1 --seed 4 >"$W/k1.txt"
ok "top-k 1 equals greedy" "[ \"\$(head -1 $W/k1.txt)\" = \"\$(head -1 $W/g.txt)\" ]"

# 3. JSON lines
# (top-k 10: the 60-step model keeps a little mass on bytes >= 128, which are not UTF-8 alone)
S --run-dir "$W/base" --prompt 'K>' --n 3 --max-new 10 --json --stop-at-eot --top-k 10 >"$W/j.txt"
ok "json: 3 valid lines with ids/text/stop" "[ \$(jq -c 'select(.ids and .text != null and .stop)' $W/j.txt | wc -l) = 3 ]"
ok "json: text is the bytes of the ids" "jq -e '(.ids | implode) == .text' $W/j.txt >/dev/null"

# 4. refusals: one line on stderr, non-zero exit
err1() { "$@" >/dev/null 2>"$W/e.txt"; rc=$?; [ $rc != 0 ] && [ "$(wc -l < "$W/e.txt")" = 1 ]; }
ok "vocabulary mismatch" "err1 bin/sampler --run-dir $W/base --vocab gpt2 --prompt x && grep -q 'vocab_size' $W/e.txt"
ok "no checkpoint" "err1 bin/sampler --run-dir $W/nothing --prompt x && grep -q 'no complete checkpoint' $W/e.txt"
ok "both --ckpt and --run-dir" "err1 bin/sampler --run-dir $W/base --ckpt $W/base/ckpt-00000060 --prompt x"
ok "bad number" "err1 bin/sampler --run-dir $W/base --n many && grep -q \"'many' is not an integer\" $W/e.txt"
ok "bad temperature" "err1 bin/sampler --run-dir $W/base --temperature -1"
ok "bad top-p" "err1 bin/sampler --run-dir $W/base --top-p 0 --prompt x && grep -q 'top-p' $W/e.txt"
ok "bad latent mode" "err1 bin/sampler --run-dir $W/base --latent both"
ok "latent on a baseline" "err1 bin/sampler --run-dir $W/base --latent shared --prompt x"
ok "too long" "err1 bin/sampler --run-dir $W/base --prompt x --max-new 5000 && grep -q max_seq $W/e.txt"
ok "empty prompt" "err1 bin/sampler --run-dir $W/base --prompt ''"
ok "unknown flag" "err1 bin/sampler --run-dir $W/base --frobnicate"
cp -r "$W/base/ckpt-00000060" "$W/bad"
printf 'xx' | dd of="$W/bad/model.safetensors" bs=1 seek=300 conv=notrunc 2>/dev/null
ok "corrupt checkpoint" "err1 bin/sampler --ckpt $W/bad --prompt x && grep -q 'bad' $W/e.txt"
ok "--run-dir skips a corrupt newest" "cp -r $W/bad $W/base/ckpt-00000090 && S --run-dir $W/base --prompt 'K>' --n 5 --max-new 30 --seed 1 2>$W/skip.err | cmp -s - $W/s1.txt && grep -q 'skipping' $W/skip.err"
rm -rf "$W/base/ckpt-00000090"
ok "--help" "bin/sampler --help | grep -q -- --latent"

# 5. the Free Transformer
bin/trainer --loaders "ipc://$W/l0" $MODEL --model free --latent-bits 4 --kappa 0.5 --run ft --run-dir "$W/ft" --steps 40 --ckpt-every 40 2>"$W/ft.log"
if [ $? = 0 ] && [ -d "$W/ft/ckpt-00000040" ]; then
    pass=$((pass+1))
    F() { S --run-dir "$W/ft" --prompt 'K>' --max-new 30 "$@"; }
    F --n 6 --seed 5 --json >"$W/f1.txt"
    ok "ft: 6 samples of 30 tokens" "[ \$(wc -l < $W/f1.txt) = 6 ] && [ \$(jq -c 'select((.ids | length) == 30)' $W/f1.txt | wc -l) = 6 ]"
    F --n 6 --seed 5 --json >"$W/f1b.txt"
    ok "ft: same seed, same samples and latents" "cmp -s $W/f1.txt $W/f1b.txt"
    ok "ft: latents in [0, 16), one per predicting position" "jq -e '(.z | length) == 31 and all(.z[]; . >= 0 and . < 16)' $W/f1.txt >/dev/null"
    ok "ft: independent latents differ between samples" "[ \$(jq -c '.z[2:]' $W/f1.txt | sort -u | wc -l) = 6 ]"
    F --n 6 --seed 5 --json --latent shared --group 3 >"$W/f2.txt"
    ok "ft: shared latents equal within a group" "[ \$(jq -c '.z' $W/f2.txt | head -3 | sort -u | wc -l) = 1 ] && [ \$(jq -c '.z' $W/f2.txt | tail -3 | sort -u | wc -l) = 1 ]"
    ok "ft: and differ between groups" "[ \$(jq -c '.z' $W/f2.txt | sort -u | wc -l) = 2 ]"
    ok "ft: prompt latents from the encoder equal within a shared group" "[ \$(jq -c '.z[0:2]' $W/f2.txt | head -3 | sort -u | wc -l) = 1 ]"
else
    fail=$((fail+1)); echo "FAIL: Free Transformer training"; tail -3 "$W/ft.log"
fi

# 6. the service: --serve answers gen_req like the command line, refuses bad requests with an
#    error reply and keeps serving, reloads when the followed run announces a checkpoint
SRV="ipc://$W/srv.sock"
bin/sampler --run-dir "$W/base" --serve "$SRV" --follow base --max-new-limit 100 --max-prompt 64 2>"$W/srv.log" & spid=$!; pids+=($spid)
for _ in $(seq 200); do grep -q serving "$W/srv.log" && break; sleep 0.05; done
ok "server up" "grep -q 'serving .*ckpt-00000060' $W/srv.log"
C() { bin/sampler --connect "$SRV" --timeout-ms 20000 "$@"; }
S --run-dir "$W/base" --prompt 'K>' --n 4 --max-new 30 --seed 3 --top-k 10 >"$W/cli.txt"
C --prompt 'K>' --n 4 --max-new 30 --seed 3 --top-k 10 >"$W/srv1.txt"
ok "service gives the command line's samples" "cmp -s $W/cli.txt $W/srv1.txt"
C --prompt 'K>' --n 4 --max-new 30 --seed 3 --top-k 10 >"$W/srv2.txt"
ok "service: same seed, same samples" "cmp -s $W/srv1.txt $W/srv2.txt"
C --prompt 'K>' --max-new 5 --json >"$W/srvj.txt"
ok "service: reply names checkpoint and step" "jq -e '.step == 60 and (.ckpt | test(\"ckpt-00000060\")) and .n_tokens == 5' $W/srvj.txt >/dev/null"
ok "service: max_new over the limit refused" "err1 C --prompt x --max-new 101 && grep -q 'error -4.*limit of 100' $W/e.txt"
ok "service: prompt over the limit refused" "err1 C --prompt \"\$(head -c 65 /dev/zero | tr '\\0' _)\" --max-new 2 && grep -q 'error -4.*prompt of 65' $W/e.txt"
ok "service: bad latent refused" "err1 C --prompt x --latent both"
ok "service: nobody listening" "err1 bin/sampler --connect ipc://$W/nobody --prompt x --timeout-ms 300 && grep -q 'no reply' $W/e.txt"
# raw frames: garbage, another message type, an oversized prompt (decoder limit), then a good one
/usr/bin/python3 - "$SRV" >"$W/raw.txt" 2>&1 <<'PY'
import sys, zmq, msgpack
s = zmq.Context().socket(zmq.DEALER); s.setsockopt(zmq.RCVTIMEO, 20000); s.connect(sys.argv[1])
def ask(body):
    s.send_multipart([b"", body]); f = s.recv_multipart(); return msgpack.unpackb(f[-1], raw=False)
good = {"v": 1, "type": "gen_req", "req_id": 7, "prompt": "K>", "max_new": 4, "temperature": 0.0,
        "top_k": 0, "top_p": 1.0, "seed": 1, "latent": "independent", "index": 0, "group": 1, "flags": 0}
print(ask(b"\xc1garbage")["code"])
print(ask(msgpack.packb({"v": 1, "type": "info_req", "req_id": 3, "world": 1, "B": 1, "T": 1,
                         "layout": "pack", "split": "train"}))["code"])
print(ask(msgpack.packb(dict(good, prompt="x" * 5000)))["code"])
print(ask(msgpack.packb(dict(good, top_p=0.0)))["code"])
r = ask(msgpack.packb(good)); print(r["type"], r["req_id"], r["n_tokens"])
PY
ok "service: raw bad frames answered with errors, then served" "[ \"\$(tr '\\n' ' ' < $W/raw.txt)\" = '-1 -2 -1 -3 gen 7 4 ' ]"
# reload: the run goes on to step 70 and announces it on the bus
bin/trainer --loaders "ipc://$W/l0" $MODEL --run base --run-dir "$W/base" --steps 70 --ckpt-every 10 --resume 2>"$W/base2.log"
for _ in $(seq 200); do grep -q 'reloaded' "$W/srv.log" && break; sleep 0.05; done
ok "service reloaded the new checkpoint" "grep -q 'reloaded .*ckpt-00000070 (step 70)' $W/srv.log"
C --prompt 'K>' --max-new 5 --json >"$W/srvj2.txt"
ok "service answers with the new checkpoint" "jq -e '.step == 70' $W/srvj2.txt >/dev/null"
kill -TERM $spid; wait $spid; rc=$?
ok "service stops on SIGTERM with status 0" "[ $rc = 0 ] && grep -q 'stopped by signal' $W/srv.log"

it_done
