#!/usr/bin/env bash
# Integration test of bin/trainer --model ltm (the Latent-Thought LM, seed 003) through the
# pipeline (bus, loader, trainer) on the synthetic data: the loss (the NELBO per token) falls;
# the trainer prints the LTM's settings and its trFLOPs/token; metrics on the bus carry ce, kl,
# elbo, elbo_0, elbo_K; the checkpoint holds the decoder under the baseline's names and the
# documented cross-attention tensors (no latents) and the ltm config; a run killed with SIGKILL
# and resumed ends bit-identical to one never interrupted (the latent draws are a function of
# the step); bad flags are refused with one line.
set -u
cd "$(dirname "$0")/.."
. tests/lib/pipeline.sh
it_init it_ltm_train
PY=/usr/bin/python3
it_synth_data "$W/ds" 4000 7
it_pipeline "$W/ds" metrics ckpt

MODEL="--model ltm --latent-vectors 4 --inner-steps 3 --window 16 --d-model 32 --layers 2 --heads 4 --kv-heads 2 --d-ff 64 --seq-len 32 --batch 4 --warmup 5 --lr 3e-3"
train() { bin/trainer --loaders "ipc://$W/l0" $MODEL "$@"; }

# 1. a straight run
train --run la --run-dir "$W/a" --steps 40 --ckpt-every 10 --keep 0 --log-every 10 2>"$W/a.log"
ok "ltm run exits 0" "[ $? = 0 ]"
ok "settings printed" "grep -q 'ltm, m=4 latent vectors per layer, window 16, K=3 inner steps, fast lr 0.3 rising to 0.34 over 40 steps' $W/a.log"
ok "trFLOPs/token printed as 3 (K+1) forwards" "grep -q 'trFLOPs/token .* (seed 003 §2.4: 3 (K + 1) = 12 x the forward' $W/a.log"
first=$(grep -m1 '^step 10/' "$W/a.log" | awk '{print $4}'); last=$(grep '^step 40/' "$W/a.log" | awk '{print $4}')
ok "loss (NELBO per token) falls ($first -> $last)" "awk -v a=$first -v b=$last 'BEGIN{exit !(b < a - 0.3)}'"
sleep 0.5
m=$(grep '"topic":"metrics/la"' "$W/tap.log" | tail -1)
ok "metrics carry ce, kl, elbo, elbo_0, elbo_K" "for k in ce kl elbo elbo_0 elbo_K fast_lr; do echo '$m' | grep -q \"\\\"\$k\\\"\" || exit 1; done"
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
print("config", cfg.get("ft_model_kind"), cfg.get("ft_latent_vectors"), cfg.get("sliding_window"),
      cfg.get("ft_inner_steps"), cfg.get("ft_fast_lr"), cfg.get("ft_fast_lr_end"), cfg.get("ft_fast_lr_steps"))
PYEOF
ok "checkpoint has the cross-attention tensors" "grep -q '^model.layers.0.cross_attn_layernorm.weight \[32\]' $W/names.txt && grep -q '^model.layers.1.cross_attn.q_proj.weight \[32, 32\]' $W/names.txt && grep -q '^model.layers.1.cross_attn.k_proj.weight \[16, 32\]' $W/names.txt && grep -q '^model.layers.0.cross_attn.o_proj.weight \[32, 32\]' $W/names.txt"
ok "checkpoint keeps the decoder's HF names" "grep -q '^model.layers.1.mlp.down_proj.weight' $W/names.txt && grep -q '^model.embed_tokens.weight' $W/names.txt"
ok "no latents saved (2 layers x (9 + 5) + 2 tensors)" "[ \$(grep -vc '^config' $W/names.txt) = 30 ]"
ok "checkpoint config says ltm, m=4, window 16, K=3, the fast rates" "grep -q '^config ltm 4 16 3 0.3 0.34 40' $W/names.txt"

# 2. SIGKILL right after the step-20 checkpoint, then --resume: bit-identical at step 40
FT_TRAINER_FAULT_KILL_AFTER_CKPT=20 killed_run bin/trainer --loaders "ipc://$W/l0" $MODEL --run lb --run-dir "$W/b" --steps 40 --ckpt-every 10 --keep 2 2>"$W/b1.log"; rc=$?
ok "run killed by SIGKILL after its step-20 checkpoint (rc $rc)" "[ $rc = 137 ]"
ok "killed run left a checkpoint" "[ -d $W/b/ckpt-00000020 ]"
ok "killed run did not finish" "[ ! -d $W/b/ckpt-00000030 ] && [ ! -d $W/b/ckpt-00000040 ]"
train --run lb --run-dir "$W/b" --steps 40 --ckpt-every 10 --keep 2 --resume 2>"$W/b2.log"
ok "resume exits 0" "[ $? = 0 ] && grep -q 'resumed from' $W/b2.log"
ok "resumed weights bit-identical" "cmp -s $W/a/ckpt-00000040/model.safetensors $W/b/ckpt-00000040/model.safetensors"
ok "resumed optimizer bit-identical" "cmp -s $W/a/ckpt-00000040/optimizer.safetensors $W/b/ckpt-00000040/optimizer.safetensors"

# 3. refused before training, one line each
refused() { # DESC PATTERN FLAGS...
    local desc=$1 pat=$2; shift 2
    bin/trainer --loaders "ipc://$W/l0" $MODEL "$@" >"$W/r.log" 2>&1; local rc=$?
    ok "$desc refused in one line" "[ $rc = 2 ] && [ \$(wc -l < $W/r.log) = 1 ] && grep -q -- '$pat' $W/r.log"
}
refused "a window longer than --seq-len" "window 64 is longer than --seq-len 32" --window 64
refused "--latent-vectors 0" "latent-vectors" --latent-vectors 0
refused "a negative --fast-lr" "fast-lr" --fast-lr -0.3
refused "a negative --fast-lr-end" "fast-lr-end" --fast-lr-end -1
refused "negative --inner-steps" "inner-steps" --inner-steps -2
refused "more latents than the RoPE table" "latent-vectors 40 exceeds" --latent-vectors 40
bin/trainer --loaders "ipc://$W/l0" --window 8 --seq-len 32 >"$W/r.log" 2>&1; rc=$?
ok "--window on the baseline refused in one line" "[ $rc = 2 ] && [ \$(wc -l < $W/r.log) = 1 ] && grep -q 'in-flight' $W/r.log"

it_done
