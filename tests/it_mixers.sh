#!/usr/bin/env bash
# Integration test of the masked-mixer families (seed 004) through the pipeline (bus, loader,
# trainer, evaluator, sampler) on the synthetic data. For each of mixer (2 heads, k = 3),
# mixer-ae (d_e 8, unroll, unmasked encoder, its embedding clamped and trained with 8-bit
# noise), llama-ae, mixer-mem (the mixer-ae's encoder, frozen) and llama-mem (trained jointly, with --memory-start):
# the loss falls; a run killed with SIGKILL and resumed ends
# bit-identical to one never interrupted; the checkpoint holds the documented tensors and
# config. Then: the frozen encoder is still the autoencoder's, bit for bit; bin/evaluator val
# gives bits per byte (for the autoencoders and memory models the decoder's plus the stored
# embedding's, n_p b_p / (T L_b / L_t), at --bits-per-param, 32 only for an unbounded one) and
# the controls (the embedding zeroed, shuffled, a unigram), mc and em run on the causal
# mixer and are refused for an autoencoder; bin/sampler generates from the causal mixer and
# refuses an autoencoder; bad flags and an encoder of the wrong shape or kind get one line.
set -u
cd "$(dirname "$0")/.."
. tests/lib/pipeline.sh
it_init it_mixers
PY=/usr/bin/python3
it_synth_data "$W/ds" 4000 11
it_pipeline "$W/ds"

BASE="--d-model 32 --layers 2 --heads 4 --kv-heads 2 --d-ff 64 --seq-len 32 --batch 4 --warmup 5 --lr 3e-3"
train() { bin/trainer --loaders "ipc://$W/l0" $BASE "$@"; }
last() { printf '%s/ckpt-%08d' "$1" "$2"; }

# A straight run of 40 steps, and one killed after its step-20 checkpoint then resumed: the
# same bytes at step 40. $1: name, then the model's flags.
straight_and_resumed() {
    local name=$1; shift
    train "$@" --run "$name" --run-dir "$W/$name" --steps 40 --ckpt-every 20 --keep 0 --log-every 10 2>"$W/$name.log"
    ok "$name: trains (exit 0)" "[ $? = 0 ] && [ -d $(last "$W/$name" 40) ]"
    local first last_
    first=$(grep -m1 '^step 10/' "$W/$name.log" | awk '{print $4}'); last_=$(grep '^step 40/' "$W/$name.log" | awk '{print $4}')
    ok "$name: loss falls ($first -> $last_)" "awk -v a=$first -v b=$last_ 'BEGIN{exit !(b < a - 0.2)}'"
    # killed by the trainer's own fault hook right after its step-20 checkpoint (SIGKILL)
    FT_TRAINER_FAULT_KILL_AFTER_CKPT=20 killed_run bin/trainer --loaders "ipc://$W/l0" $BASE "$@" --run "$name-k" --run-dir "$W/$name-k" --steps 40 --ckpt-every 20 --keep 2 2>"$W/$name-k1.log"
    ok "$name: the killed run stopped before the end" "[ -d $(last "$W/$name-k" 20) ] && [ ! -d $(last "$W/$name-k" 40) ]"
    train "$@" --run "$name-k" --run-dir "$W/$name-k" --steps 40 --ckpt-every 20 --keep 2 --resume 2>"$W/$name-k2.log"
    ok "$name: resumes" "[ $? = 0 ] && grep -q 'resumed from' $W/$name-k2.log"
    ok "$name: resumed weights and optimizer bit-identical" \
       "cmp -s $(last "$W/$name" 40)/model.safetensors $(last "$W/$name-k" 40)/model.safetensors && cmp -s $(last "$W/$name" 40)/optimizer.safetensors $(last "$W/$name-k" 40)/optimizer.safetensors"
}

# Tensor names and shapes, and the config's mixer fields, of a checkpoint.
describe() {
    $PY - "$1" <<'PYEOF'
import json, struct, sys
d = sys.argv[1]
with open(d + "/model.safetensors", "rb") as f:
    h = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
for k, v in h.items():
    if k != "__metadata__":
        print(k, v["shape"])
c = json.load(open(d + "/config.json"))
print("config", c["ft_model_kind"], c["architectures"][0], *[f"{k}={c[k]}" for k in sorted(c) if k.startswith("ft_") and k != "ft_model_kind"])
PYEOF
}

# 1. every kind trains, resumes bit-exactly and writes its documented tensors
straight_and_resumed mixer --model mixer --mixer-heads 2 --mixer-kernel 3
describe "$(last "$W/mixer" 40)" >"$W/mixer.names"
ok "mixer: checkpoint tensors" "grep -q '^model.layers.1.mixer.weight \[2, 3, 32, 32\]' $W/mixer.names && grep -q '^model.layers.0.mixer.bias \[64\]' $W/mixer.names && grep -q '^model.layers.0.mixer.in_proj.weight \[32, 32\]' $W/mixer.names && grep -q '^model.layers.0.post_mixer_layernorm.weight \[32\]' $W/mixer.names"
ok "mixer: config" "grep -q '^config mixer FtMaskedMixerForCausalLM ft_mixer_heads=2 ft_mixer_kernel=3 ft_no_mask_decoder=False' $W/mixer.names"
straight_and_resumed ae --model mixer-ae --embed-dim 8 --unroll --no-mask-encoder --embed-range 2 --embed-noise-bits 8
describe "$(last "$W/ae" 40)" >"$W/ae.names"
ok "mixer-ae: checkpoint tensors" "grep -q '^encoder.down.weight \[8, 32\]' $W/ae.names && grep -q '^decoder.up.weight \[32, 8\]' $W/ae.names && grep -q '^decoder.unroll.weight \[32, 16\]' $W/ae.names && grep -q '^encoder.layers.1.mixer.weight \[1, 1, 32, 32\]' $W/ae.names && grep -q '^decoder.norm.weight' $W/ae.names"
ok "mixer-ae: config" "grep -q 'ft_embed_dim=8 ft_embed_noise_bits=8 ft_embed_range=2.0 ft_encoder_layers=2 ft_mixer_heads=1 ft_mixer_kernel=1 ft_no_mask_decoder=False ft_no_mask_encoder=True ft_unroll=True' $W/ae.names"
straight_and_resumed lae --model llama-ae
describe "$(last "$W/lae" 40)" >"$W/lae.names"
ok "llama-ae: Llama blocks" "grep -q '^encoder.layers.0.self_attn.q_proj.weight \[32, 32\]' $W/lae.names && grep -q '^decoder.layers.1.mlp.down_proj.weight' $W/lae.names"
straight_and_resumed mem --model mixer-mem --embed-dim 8 --no-mask-encoder --embed-range 2 --embed-noise-bits 8 --encoder "$W/ae" --freeze-encoder
ok "mixer-mem: the encoder came from the autoencoder, frozen" "grep -q 'encoder from .*ae/ckpt-00000040 (frozen)' $W/mem.log"
describe "$(last "$W/mem" 40)" >"$W/mem.names"
ok "mixer-mem: checkpoint tensors" "grep -q '^memory.proj.weight \[32, 8\]' $W/mem.names && grep -q '^model.embed_tokens.weight' $W/mem.names && grep -q '^encoder.down.weight \[8, 32\]' $W/mem.names"
$PY - "$(last "$W/ae" 40)" "$(last "$W/mem" 40)" >"$W/frozen.txt" 2>&1 <<'PYEOF'
import json, struct, sys
def tensors(d):
    with open(d + "/model.safetensors", "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for k, v in h.items():
            if k != "__metadata__":
                f.seek(base + v["data_offsets"][0])
                out[k] = f.read(v["data_offsets"][1] - v["data_offsets"][0])
        return out
ae, mem = tensors(sys.argv[1]), tensors(sys.argv[2])
enc = [k for k in mem if k.startswith("encoder.")]
print("encoder tensors", len(enc), "identical", sum(mem[k] == ae[k] for k in enc))
PYEOF
ok "mixer-mem: after 40 steps the frozen encoder is the autoencoder's, bit for bit ($(cat $W/frozen.txt))" "grep -qE '^encoder tensors ([0-9]+) identical \1$' $W/frozen.txt && ! grep -q 'tensors 0 ' $W/frozen.txt"
straight_and_resumed lmem --model llama-mem --embed-dim 8 --memory-start
describe "$(last "$W/lmem" 40)" >"$W/lmem.names"
ok "llama-mem --memory-start: the start vector in the checkpoint and its config" "grep -q '^memory.start \[32\]' $W/lmem.names && grep -q 'ft_memory_start=True' $W/lmem.names"

# 2. evaluation: bits per byte; the embedding's share follows n_p b_p / (T L_b / L_t)
EV() { timeout -k 5 180 bin/evaluator --run "$1" --run-dir "$W/$1" --once --no-bus --quiet "${@:2}"; }
VAL="--task val --data $W/ds --val-docs 200 --batches 2 --batch 4 --seq-len 32"
for r in mixer ae lae mem lmem; do EV $r $VAL >"$W/val_$r.json" 2>"$W/val_$r.err"; done
ok "val on every kind" "for r in mixer ae lae mem lmem; do jq -e '.values.bpb > 0' $W/val_\$r.json >/dev/null || exit 1; done"
ok "causal mixer: bpb = ce (L_t/L_b) / ln 2, no embedding term" "jq -e '.values.ce > 0 and (.values.bpb_embedding == null)' $W/val_mixer.json >/dev/null"
# bytes vocabulary: L_t / L_b = bpb_decoder ln 2 / ce; n_p = 8 floats of 8 bits for T = 32 tokens
ok "autoencoder: bpb = decoder + embedding, embedding = 8 x 8 / (32 L_b / L_t)" \
   "jq -e '.values as \$v | (\$v.bpb_decoder * 0.6931471805599453 / \$v.ce) as \$tpb | (\$v.embed_floats == 8 and \$v.bits_per_param == 8 and ((\$v.bpb_embedding - 64 / 32 * \$tpb) | fabs) < 1e-6 and ((\$v.bpb - \$v.bpb_decoder - \$v.bpb_embedding) | fabs) < 1e-9)' $W/val_ae.json >/dev/null"
ok "llama autoencoder without compression: n_p = d_model" "jq -e '.values.embed_floats == 32' $W/val_lae.json >/dev/null"
ok "memory model: bpb = decoder + embedding" "jq -e '.values as \$v | (\$v.embed_floats == 8 and ((\$v.bpb - \$v.bpb_decoder - \$v.bpb_embedding) | fabs) < 1e-9 and \$v.ce_total > \$v.ce)' $W/val_mem.json >/dev/null"
EV mem $VAL --bits-per-param 4 >"$W/val_mem4.json" 2>/dev/null
ok "--bits-per-param 4 halves the embedding's share" "jq -s -e '((.[0].values.bpb_embedding / .[1].values.bpb_embedding) - 2 | fabs) < 1e-9' $W/val_mem.json $W/val_mem4.json >/dev/null"
EV mem $VAL --bits-per-param 7 >/dev/null 2>"$W/bp7.err"; rc=$?
ok "--bits-per-param 7 refused with one line" "[ $rc = 2 ] && [ \$(wc -l < $W/bp7.err) = 1 ] && grep -q '4, 8, 16 or 32' $W/bp7.err"
ok "the embedding at 4, 8, 16 and 32 bits, and the controls" "jq -e '.values as \$v | [\$v.ce_b4, \$v.ce_b8, \$v.ce_b16, \$v.ce_b32, \$v.ce_zero, \$v.ce_shuffle, \$v.ce_unigram, \$v.gain_shuffle_se] | all(. != null and . > 0) and (\$v.beats_controls == 0 or \$v.beats_controls == 1) and \$v.ce == \$v.ce_b8' $W/val_mem.json >/dev/null"
ok "an unbounded embedding is charged 32 bits, with no code below" "jq -e '.values.bits_per_param == 32 and .values.ce_b8 == null and .values.ce_b32 > 0' $W/val_lmem.json >/dev/null"
EV lmem $VAL --bits-per-param 8 >/dev/null 2>"$W/bp8.err"; rc=$?
ok "--bits-per-param 8 on an unbounded embedding refused with one line" "[ $rc = 2 ] && [ \$(wc -l < $W/bp8.err) = 1 ] && grep -q 'unbounded' $W/bp8.err"
MC="--task mc --file evaluator/tasks/synth_mc.jsonl --vocab bytes --limit 6 --batch 4"
EV mixer $MC >"$W/mc_mixer.json" 2>"$W/mc_mixer.err"
ok "mc on the causal mixer" "jq -e '.values.n == 6 and .values.acc_char >= 0' $W/mc_mixer.json >/dev/null"
EV mixer --task em --file evaluator/tasks/synth_em.jsonl --vocab bytes --limit 3 --batch 2 >"$W/em_mixer.json" 2>"$W/em_mixer.err"
ok "em on the causal mixer (generation through the mixing sums)" "jq -e '.values.n == 3' $W/em_mixer.json >/dev/null"
EV ae $MC >/dev/null 2>"$W/mc_ae.err"
ok "mc refused for an autoencoder, one line" "grep -q 'only task val applies' $W/mc_ae.err && [ \$(grep -c . $W/mc_ae.err) = 1 ]"

# 3. sampling from the causal mixer (its cache of mixing sums), refused for an autoencoder
S() { bin/sampler --quiet --vocab bytes "$@"; }
S --run-dir "$W/mixer" --prompt 'K>' --n 3 --max-new 12 --seed 1 --json >"$W/s1.json" 2>"$W/s1.err"
ok "sampler on the mixer: 3 samples of 12 tokens" "[ \$(jq -c 'select((.ids | length) == 12)' $W/s1.json | wc -l) = 3 ]"
S --run-dir "$W/mixer" --prompt 'K>' --n 3 --max-new 12 --seed 1 --json >"$W/s1b.json" 2>/dev/null
ok "same seed, same samples" "cmp -s $W/s1.json $W/s1b.json"
S --run-dir "$W/ae" --prompt 'K>' --n 1 --max-new 4 >/dev/null 2>"$W/s_ae.err"; rc=$?
ok "sampler refuses an autoencoder with one line" "[ $rc != 0 ] && [ \$(wc -l < $W/s_ae.err) = 1 ] && grep -q 'predicts the chunk it has encoded' $W/s_ae.err"

# 4. refused before training, one line each (the encoder's checks come after the trainer has
#    asked a loader for the dataset, whose description line is not part of the error)
refused() { # $1: what, $2: expected text, then the flags
    local what=$1 want=$2; shift 2
    train --run bad --run-dir "$W/bad" --steps 5 "$@" 2>"$W/bad.err"; local rc=$?
    grep -v '^trainer: dataset ' "$W/bad.err" >"$W/bad.line"
    ok "$what refused with one line" "[ $rc = 2 ] && [ \$(wc -l < $W/bad.line) = 1 ] && grep -q -- '$want' $W/bad.line"
}
refused "--mixer-heads not dividing --d-model" "--mixer-heads 3 does not divide --d-model 32" --model mixer --mixer-heads 3
refused "--mixer-kernel 0" "--mixer-kernel: 0 is outside" --model mixer --mixer-kernel 0
refused "a kernel wider than a head" "wider than a head" --model mixer --mixer-heads 8 --mixer-kernel 5
refused "an unmasked causal mixer" "sees the tokens it predicts" --model mixer --no-mask
refused "--encoder for a model without one" "for the memory models" --model mixer-ae --encoder "$W/ae"
refused "rounding noise without a range" "needs --embed-range" --model mixer-ae --embed-noise-bits 8
refused "a range for a model without a stored embedding" "has no stored embedding" --model mixer --embed-range 4
refused "an encoder of another shape" "its embedding dimension d_e is 8, the memory model.s is 16" --model mixer-mem --embed-dim 16 --no-mask-encoder --encoder "$W/ae"
refused "an encoder of another kind" "holds a llama-ae model" --model mixer-mem --encoder "$W/lae"
refused "an encoder that is no checkpoint" "--encoder $W/nothing" --model mixer-mem --encoder "$W/nothing"

it_done
