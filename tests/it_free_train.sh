#!/usr/bin/env bash
# Integration test of bin/trainer --model free (the Free Transformer) through the pipeline
# (bus, loader, trainer) on the synthetic data: the loss falls; the trainer says kappa in bits
# and nats; metrics on the bus carry ce / kl / kl_bits / kl_above_kappa; the checkpoint holds
# the free.* tensors and the free config; a run killed with SIGKILL and resumed ends
# bit-identical to one never interrupted (the latent draws are a function of the step);
# bad flags and a family mismatch on resume are refused with one line.
set -u
cd "$(dirname "$0")/.."
. tests/lib/pipeline.sh
it_init it_free_train
PY=/usr/bin/python3
it_synth_data "$W/ds" 4000 7
it_pipeline "$W/ds" metrics ckpt

MODEL="--model free --latent-bits 8 --kappa 0.125 --d-model 32 --layers 2 --heads 4 --kv-heads 2 --d-ff 64 --seq-len 32 --batch 4 --warmup 5 --lr 3e-3"
train() { bin/trainer --loaders "ipc://$W/l0" $MODEL "$@"; }

# 1. a straight run
train --run fa --run-dir "$W/a" --steps 40 --ckpt-every 10 --keep 0 --log-every 10 2>"$W/a.log"
ok "free run exits 0" "[ $? = 0 ]"
ok "kappa printed in bits and nats" "grep -q 'kappa (--kappa-unit bits) 0.125 bits = 0.0866.* nats' $W/a.log"
first=$(grep -m1 '^step 10/' "$W/a.log" | awk '{print $4}'); last=$(grep '^step 40/' "$W/a.log" | awk '{print $4}')
ok "loss falls ($first -> $last)" "awk -v a=$first -v b=$last 'BEGIN{exit !(b < a - 0.3)}'"
sleep 0.5
ok "metrics carry ce, kl, kl_bits, kl_above_kappa" \
   "grep '\"topic\":\"metrics/fa\"' $W/tap.log | tail -1 | grep -q '\"kl_bits\"' && grep '\"topic\":\"metrics/fa\"' $W/tap.log | tail -1 | grep '\"kl_above_kappa\"' | grep '\"ce\"' | grep -q '\"kl\"'"
C=$W/a/ckpt-00000040
$PY - "$C" >"$W/names.txt" 2>&1 <<'PYEOF'
import json, struct, sys
d = sys.argv[1]
with open(d + "/model.safetensors", "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    h = json.loads(f.read(n))
cfg = json.load(open(d + "/config.json"))
for k, v in h.items():
    if k != "__metadata__":
        print(k, v["shape"])
print("config", cfg.get("ft_model_kind"), cfg.get("ft_latent_bits"), round(cfg.get("ft_kappa_nats", -1), 5))
PYEOF
ok "checkpoint has the free.* tensors" "grep -q '^free.zeta \[32\]' $W/names.txt && grep -q '^free.encoder.self_attn.q_proj.weight \[32, 32\]' $W/names.txt && grep -q '^free.readout.weight \[8, 32\]' $W/names.txt && grep -q '^free.post_sampler.weight \[32, 256\]' $W/names.txt && grep -q '^free.encoder_norm.weight' $W/names.txt"
ok "checkpoint keeps the decoder's HF names" "grep -q '^model.layers.1.mlp.down_proj.weight' $W/names.txt"
ok "checkpoint config says free, H=8, kappa in nats" "grep -q '^config free 8 0.0866' $W/names.txt"

# 2. SIGKILL right after the step-20 checkpoint (the trainer's fault hook, not a poll that a
# fast run outpaces), then --resume: bit-identical at step 40
FT_TRAINER_FAULT_KILL_AFTER_CKPT=20 killed_run bin/trainer --loaders "ipc://$W/l0" $MODEL --run fb --run-dir "$W/b" --steps 40 --ckpt-every 10 --keep 2 2>"$W/b1.log"; rc=$?
ok "run killed by SIGKILL after its step-20 checkpoint (rc $rc)" "[ $rc = 137 ]"
ok "killed run left a checkpoint" "[ -d $W/b/ckpt-00000020 ]"
ok "killed run did not finish" "[ ! -d $W/b/ckpt-00000030 ] && [ ! -d $W/b/ckpt-00000040 ]"
train --run fb --run-dir "$W/b" --steps 40 --ckpt-every 10 --keep 2 --resume 2>"$W/b2.log"
ok "resume exits 0" "[ $? = 0 ] && grep -q 'resumed from' $W/b2.log"
ok "resumed weights bit-identical" "cmp -s $W/a/ckpt-00000040/model.safetensors $W/b/ckpt-00000040/model.safetensors"
ok "resumed optimizer bit-identical" "cmp -s $W/a/ckpt-00000040/optimizer.safetensors $W/b/ckpt-00000040/optimizer.safetensors"

# 3. refused before training, one line each
bin/trainer --loaders "ipc://$W/l0" $MODEL --kappa-unit furlongs 2>"$W/c.log"; rc=$?
ok "bad --kappa-unit refused" "[ $rc = 2 ] && [ \$(wc -l < $W/c.log) = 1 ] && grep -q 'kappa-unit must be bits or nats' $W/c.log"
bin/trainer --loaders "ipc://$W/l0" --model gpt5 2>"$W/d.log"; rc=$?
ok "unknown --model refused" "[ $rc = 2 ] && [ \$(wc -l < $W/d.log) = 1 ] && grep -q 'not a model family' $W/d.log"
bin/trainer --loaders "ipc://$W/l0" $MODEL --latent-bits 0 2>"$W/e.log"; rc=$?
ok "--latent-bits 0 refused" "[ $rc = 2 ] && [ \$(wc -l < $W/e.log) = 1 ]"
bin/trainer --loaders "ipc://$W/l0" --run fa --run-dir "$W/a" --steps 50 --resume --d-model 32 --layers 2 --heads 4 --kv-heads 2 --d-ff 64 --seq-len 32 --batch 4 --warmup 5 2>"$W/f.log"; rc=$?
ok "resuming a free checkpoint as llama refused" "[ $rc != 0 ] && grep -q 'model llama but the checkpoint holds a free model' $W/f.log"

it_done
