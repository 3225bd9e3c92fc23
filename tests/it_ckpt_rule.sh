#!/usr/bin/env bash
# The one checkpoint rule (model/checkpoint.h, docs/FORMATS.md §3 "Which checkpoint is usable"):
# trainer --resume, sampler --run-dir and the evaluator take the same checkpoint from a run
# directory whose newer checkpoints are damaged in three ways: a file that no longer matches
# the MANIFEST, and, under a MANIFEST recomputed over the damage, a flipped data byte (the
# safetensors file's own xxh3) and a config.json that no longer fits the tensors. Each program
# names every skipped checkpoint on its own line, prefixed with its name; a checkpoint given
# by path is used or refused, never swapped; when none is usable, each one says so.
set -u
cd "$(dirname "$0")/.."
. tests/lib/pipeline.sh
it_init it_ckpt_rule 1
cc -O1 -o "$W/remanifest" tests/lib/remanifest.c -lxxhash || { echo "cannot build tests/lib/remanifest.c"; exit 1; }
it_synth_data "$W/ds" 2000 7
it_pipeline "$W/ds"

MODEL="--d-model 32 --layers 2 --heads 4 --kv-heads 2 --d-ff 64 --seq-len 32 --batch 4 --warmup 5 --lr 3e-3"
train() { bin/trainer --loaders "ipc://$W/l0" $MODEL --run a --steps 40 --ckpt-every 10 "$@"; }
sample() { bin/sampler --prompt 'K>' --n 1 --max-new 4 "$@"; }
VAL="--task val --data $W/ds --val-docs 200 --batches 1 --batch 4 --seq-len 32"
# one byte of the data section (the last tensor), not of the header
flip() { printf 'x' | dd of="$1" bs=1 seek=$(($(stat -c %s "$1") - 50)) conv=notrunc 2>/dev/null; }

train --run-dir "$W/a" --keep 0 2>"$W/a.log"
ok "the run exits 0" "[ $? = 0 ] && [ \$(ls -d $W/a/ckpt-* | wc -l) = 4 ]"
cp -r "$W/a" "$W/m"
flip "$W/m/ckpt-00000040/model.safetensors"                          # the MANIFEST sees it
flip "$W/m/ckpt-00000030/model.safetensors"; "$W/remanifest" "$W/m/ckpt-00000030"   # its own xxh3 does
sed -i 's/"intermediate_size": 64/"intermediate_size": 65/' "$W/m/ckpt-00000020/config.json"
"$W/remanifest" "$W/m/ckpt-00000020"                                 # the tensors' shapes do
ok "the recomputed MANIFESTs verify" "! grep -q 'intermediate_size\": 64' $W/m/ckpt-00000020/config.json"
skips() { # the three skip lines of program $1 in log $2, in order, each with its prefix
    [ "$(grep -c "^$1: skipping " "$2")" = 3 ] && ! grep -q '^skipping' "$2" &&
    [ "$(grep "^$1: skipping " "$2" | grep -o 'ckpt-000000[0-9]*' | tr '\n' ' ')" = "ckpt-00000040 ckpt-00000030 ckpt-00000020 " ]
}

# 1. each program: the newest usable checkpoint, 10; every skip on a line of its own
cp -r "$W/m" "$W/mt"
train --run-dir "$W/mt" --resume 2>"$W/t.log"; rc=$?
ok "trainer resumes from the newest usable checkpoint (rc $rc)" "[ $rc = 0 ] && grep -q 'resumed from $W/mt/ckpt-00000010' $W/t.log"
ok "trainer: one prefixed line per skipped checkpoint" "skips trainer $W/t.log"
ok "trainer: the resumed run ends bit-identical" "cmp -s $W/a/ckpt-00000040/model.safetensors $W/mt/ckpt-00000040/model.safetensors"
sample --run-dir "$W/m" >/dev/null 2>"$W/s.log"; rc=$?
ok "sampler --run-dir uses the newest usable checkpoint (rc $rc)" "[ $rc = 0 ] && grep -q '^sampler: $W/m/ckpt-00000010: 1 samples' $W/s.log"
ok "sampler: one prefixed line per skipped checkpoint" "skips sampler $W/s.log"
bin/evaluator --run a --run-dir "$W/m" $VAL --once --no-bus >"$W/e.out" 2>"$W/e.log"; rc=$?
ok "evaluator --once evaluates the newest usable checkpoint (rc $rc)" "[ $rc = 0 ] && jq -s -e 'length == 1 and .[0].step == 10' $W/e.out >/dev/null"
ok "evaluator: one prefixed line per skipped checkpoint" "skips evaluator $W/e.log"

# 2. a checkpoint given by path is used or refused, never replaced by another
sample --ckpt "$W/m/ckpt-00000030" >/dev/null 2>"$W/s2.log"; rc=$?
ok "sampler --ckpt of a damaged checkpoint refused, one line (rc $rc)" \
   "[ $rc = 1 ] && [ \$(wc -l < $W/s2.log) = 1 ] && grep -q '^sampler: $W/m/ckpt-00000030/model.safetensors: .*xxh3' $W/s2.log"

# 3. none usable: each program refuses, naming them
flip "$W/m/ckpt-00000010/model.safetensors"
cp -r "$W/m" "$W/mt2"
train --run-dir "$W/mt2" --resume 2>"$W/t2.log"; rc=$?
ok "trainer refuses to start over (rc $rc)" \
   "[ $rc = 1 ] && grep -q 'every checkpoint in $W/mt2 is damaged (ckpt-00000040, ckpt-00000030, ckpt-00000020, ckpt-00000010)' $W/t2.log && ! grep -q '^step' $W/t2.log"
sample --run-dir "$W/m" >/dev/null 2>"$W/s3.log"; rc=$?
ok "sampler: no usable checkpoint, naming them (rc $rc)" \
   "[ $rc = 1 ] && grep -q '^sampler: --run-dir $W/m: no usable checkpoint (damaged: ckpt-00000040, ckpt-00000030, ckpt-00000020, ckpt-00000010)' $W/s3.log"
bin/evaluator --run a --run-dir "$W/m" $VAL --once --no-bus >/dev/null 2>"$W/e3.log"; rc=$?
ok "evaluator --once: no usable checkpoint (rc $rc)" "[ $rc = 1 ] && [ \$(grep -c '^evaluator: skipping' $W/e3.log) = 4 ] && grep -q 'no usable checkpoint' $W/e3.log"


# 4. config.json's layer count and embedding checked against the tensor names before anything
# is allocated (one line, skipped as damage: the previous checkpoint taken); a load that runs
# out of memory names its reason (it printed "sampler: <dir>: " and nothing else)
cp -r "$W/a" "$W/h"
sed -i 's/"num_hidden_layers": 2/"num_hidden_layers": 16777216/' "$W/h/ckpt-00000040/config.json"
sed -i 's/"num_hidden_layers": 2/"num_hidden_layers": 100000/' "$W/h/ckpt-00000030/config.json"
"$W/remanifest" "$W/h/ckpt-00000040"; "$W/remanifest" "$W/h/ckpt-00000030"
sample --ckpt "$W/h/ckpt-00000040" >/dev/null 2>"$W/h1.log"; rc=$?
ok "sampler --ckpt: 16777216 layers refused in one line naming why (rc $rc)" \
   "[ $rc = 1 ] && [ \$(wc -l < $W/h1.log) = 1 ] && grep -qx 'sampler: $W/h/ckpt-00000040/config.json: num_hidden_layers is 16777216 but model.safetensors holds 2 decoder block(s)' $W/h1.log"
t0=$(date +%s)
timeout 30 bin/sampler --prompt 'K>' --n 1 --max-new 4 --ckpt "$W/h/ckpt-00000030" >/dev/null 2>"$W/h2.log"; rc=$?
ok "sampler --ckpt: 100000 layers refused before allocating, in seconds (rc $rc)" \
   "[ $rc = 1 ] && [ \$((\$(date +%s) - t0)) -lt 10 ] && grep -q 'num_hidden_layers is 100000 but' $W/h2.log"
sample --run-dir "$W/h" >/dev/null 2>"$W/h3.log"; rc=$?
ok "sampler --run-dir skips both, uses ckpt-20 (rc $rc)" \
   "[ $rc = 0 ] && [ \$(grep -c '^sampler: skipping .*num_hidden_layers is' $W/h3.log) = 2 ] && grep -q '^sampler: $W/h/ckpt-00000020: 1 samples' $W/h3.log"
bin/evaluator --run a --run-dir "$W/h" $VAL --once --no-bus >"$W/h4.out" 2>"$W/h4.log"; rc=$?
ok "evaluator --once: the same, step 20 (rc $rc)" \
   "[ $rc = 0 ] && jq -s -e 'length == 1 and .[0].step == 20' $W/h4.out >/dev/null && [ \$(grep -c '^evaluator: skipping .*num_hidden_layers is' $W/h4.log) = 2 ]"
cp -r "$W/h" "$W/ht"
train --run-dir "$W/ht" --resume 2>"$W/h5.log"; rc=$?
ok "trainer --resume: the same, from ckpt-20, ends bit-identical (rc $rc)" \
   "[ $rc = 0 ] && grep -q 'resumed from $W/ht/ckpt-00000020' $W/h5.log && [ \$(grep -c '^trainer: skipping .*num_hidden_layers is' $W/h5.log) = 2 ] && cmp -s $W/a/ckpt-00000040/model.safetensors $W/ht/ckpt-00000040/model.safetensors"

# the other sizes block 0's tensors reveal, the same way: intermediate_size 2^24 (gigabytes for
# the MLPs before the loader's shape check refused it) and a kv-head count the k_proj lacks
cp -r "$W/a" "$W/f"
sed -i 's/"intermediate_size": 64/"intermediate_size": 16777216/' "$W/f/ckpt-00000040/config.json"
sed -i 's/"num_key_value_heads": 2/"num_key_value_heads": 4/' "$W/f/ckpt-00000030/config.json"
"$W/remanifest" "$W/f/ckpt-00000040"; "$W/remanifest" "$W/f/ckpt-00000030"
t0=$(date +%s)
timeout 30 bin/sampler --prompt 'K>' --n 1 --max-new 4 --ckpt "$W/f/ckpt-00000040" >/dev/null 2>"$W/f1.log"; rc=$?
ok "sampler --ckpt: intermediate_size 16777216 refused before allocating, in one line (rc $rc)" \
   "[ $rc = 1 ] && [ \$((\$(date +%s) - t0)) -lt 10 ] && [ \$(wc -l < $W/f1.log) = 1 ] && grep -qx \"sampler: $W/f/ckpt-00000040/config.json: intermediate_size 16777216, hidden_size 32 but model.safetensors' model.layers.0.mlp.gate_proj.weight is \\[64,32\\], not \\[16777216,32\\]\" $W/f1.log"
sample --run-dir "$W/f" >/dev/null 2>"$W/f2.log"; rc=$?
ok "sampler --run-dir skips both (intermediate_size, num_key_value_heads), uses ckpt-20 (rc $rc)" \
   "[ $rc = 0 ] && grep -q '^sampler: skipping .*intermediate_size 16777216' $W/f2.log && grep -q '^sampler: skipping .*num_key_value_heads 4.*k_proj.weight is \\[16,32\\], not \\[32,32\\]' $W/f2.log && grep -q '^sampler: $W/f/ckpt-00000020: 1 samples' $W/f2.log"

# what each family adds, the same way (model/checkpoint.c ck_check_blocks, ck_check_sizes): a Free
# Transformer's ft_latent_bits against its read-out (2^20 columns of post-sampler allocated before),
# a baseline's config turned into a Free Transformer's (no encoder block), a mixer autoencoder's
# ft_encoder_layers against its encoder blocks and ft_embed_dim against its down projection
fam() { bin/trainer --loaders "ipc://$W/l0" $MODEL --steps 20 --ckpt-every 10 --keep 0 "$@"; }
edit() { jq -c "$2" "$1/config.json" >"$1/config.j" && mv "$1/config.j" "$1/config.json" && "$W/remanifest" "$1"; }
fam --run fr --run-dir "$W/fr" --model free --latent-bits 4 --kappa 0.125 2>"$W/fr.log"
ok "a Free Transformer run of 20 steps exits 0" "[ $? = 0 ] && [ -d $W/fr/ckpt-00000020 ]"
edit "$W/fr/ckpt-00000020" '.ft_latent_bits = 20'
rm -rf "$W/fb"; mkdir "$W/fb"; cp -r "$W/a/ckpt-00000040" "$W/fb/"
edit "$W/fb/ckpt-00000040" '.ft_model_kind = "free" | .ft_latent_bits = 20 | .ft_kappa_nats = 0.1'
t0=$(date +%s)
timeout 30 bin/sampler --prompt 'K>' --n 1 --max-new 4 --ckpt "$W/fr/ckpt-00000020" >/dev/null 2>"$W/fr1.log"; rc=$?
ok "sampler --ckpt: ft_latent_bits 20 against a 4-bit read-out refused in one line (rc $rc)" \
   "[ $rc = 1 ] && [ \$((\$(date +%s) - t0)) -lt 10 ] && [ \$(wc -l < $W/fr1.log) = 1 ] && grep -qx \"sampler: $W/fr/ckpt-00000020/config.json: ft_latent_bits 20, hidden_size 32 but model.safetensors' free.readout.weight is \\[4,32\\], not \\[20,32\\]\" $W/fr1.log"
sample --run-dir "$W/fr" >/dev/null 2>"$W/fr2.log"; rc=$?
ok "sampler --run-dir skips it, uses ckpt-10 (rc $rc)" \
   "[ $rc = 0 ] && grep -q '^sampler: skipping .*ft_latent_bits 20' $W/fr2.log && grep -q '^sampler: $W/fr/ckpt-00000010: 1 samples' $W/fr2.log"
sample --ckpt "$W/fb/ckpt-00000040" >/dev/null 2>"$W/fb1.log"; rc=$?
ok "sampler --ckpt: a baseline's tensors under a Free Transformer's config refused in one line (rc $rc)" \
   "[ $rc = 1 ] && [ \$(wc -l < $W/fb1.log) = 1 ] && grep -qx 'sampler: $W/fb/ckpt-00000040/config.json: ft_model_kind free (one encoder block) but model.safetensors holds 0 encoder blocks (no free.encoder.\\* tensor)' $W/fb1.log"
AE="--model mixer-ae --embed-dim 8 --unroll"
fam --run ae --run-dir "$W/ae" $AE 2>"$W/ae.log"
ok "a mixer-ae run of 20 steps exits 0" "[ $? = 0 ] && [ -d $W/ae/ckpt-00000020 ]"
rm -rf "$W/ae1" "$W/ae2"; cp -r "$W/ae" "$W/ae1"; cp -r "$W/ae" "$W/ae2"
edit "$W/ae1/ckpt-00000020" '.ft_encoder_layers = 16777216'
edit "$W/ae2/ckpt-00000020" '.ft_embed_dim = 4'
sample --ckpt "$W/ae1/ckpt-00000020" >/dev/null 2>"$W/ae1.log"; rc=$?
ok "sampler --ckpt: ft_encoder_layers 16777216 refused as damage in one line (rc $rc)" \
   "[ $rc = 1 ] && [ \$(wc -l < $W/ae1.log) = 1 ] && grep -qx 'sampler: $W/ae1/ckpt-00000020/config.json: ft_encoder_layers is 16777216 but model.safetensors holds 2 encoder block(s)' $W/ae1.log"
fam --run ae --run-dir "$W/ae2" $AE --resume 2>"$W/ae2.log"; rc=$?
ok "trainer --resume: ft_embed_dim 4 against an (8, 32) down projection skipped, resumed from ckpt-10, bit-identical (rc $rc)" \
   "[ $rc = 0 ] && grep -qx \"trainer: skipping $W/ae2/ckpt-00000020/config.json: ft_embed_dim 4, hidden_size 32 but model.safetensors' encoder.down.weight is \\[8,32\\], not \\[4,32\\]\" $W/ae2.log && grep -q 'resumed from $W/ae2/ckpt-00000010' $W/ae2.log && cmp -s $W/ae/ckpt-00000020/model.safetensors $W/ae2/ckpt-00000020/model.safetensors"

# the decoder's blocks counted as distinct indices 0..num_hidden_layers-1 (the highest index stood
# for the count: model.layers.1.* renamed model.layers.999.* in the header passed for 1000 blocks,
# which the programs allocated before finding model.layers.1. missing; 2^24 the same way in
# test_checkpoint), and the head against tie_word_embeddings: a tied config over an untied
# checkpoint ran the embedding as the head with the trained lm_head.weight skipped; an untied config
# over a tied one allocated a head the file lacks
relayer() { python3 - "$1/model.safetensors" "$2" "$3" <<'PY'
import json, struct, sys
p, a, b = sys.argv[1:]; d = open(p, 'rb').read(); n = struct.unpack('<Q', d[:8])[0]
h = {(b + k[len(a):] if k.startswith(a) else k): v for k, v in json.loads(d[8:8 + n]).items()}
hb = json.dumps(h).encode(); hb += b' ' * (-(8 + len(hb)) % 8)
open(p, 'wb').write(struct.pack('<Q', len(hb)) + hb + d[8 + n:])
PY
}
V=$(jq .vocab_size "$W/a/ckpt-00000040/config.json")
rm -rf "$W/d"; cp -r "$W/a" "$W/d"
relayer "$W/d/ckpt-00000040" model.layers.1. model.layers.999.; edit "$W/d/ckpt-00000040" '.num_hidden_layers = 1000'
t0=$(date +%s)
timeout 30 bin/sampler --prompt 'K>' --n 1 --max-new 4 --ckpt "$W/d/ckpt-00000040" >/dev/null 2>"$W/d1.log"; rc=$?
ok "sampler --ckpt: blocks 0 and 999 under num_hidden_layers 1000 refused before allocating, in one line naming the gap (rc $rc)" \
   "[ $rc = 1 ] && [ \$((\$(date +%s) - t0)) -lt 10 ] && [ \$(wc -l < $W/d1.log) = 1 ] && grep -qx 'sampler: $W/d/ckpt-00000040/config.json: num_hidden_layers is 1000 but model.safetensors holds 2 decoder block(s) (model.layers.1. missing)' $W/d1.log"
sample --run-dir "$W/d" >/dev/null 2>"$W/d2.log"; rc=$?
ok "sampler --run-dir skips it, uses ckpt-30 (rc $rc)" \
   "[ $rc = 0 ] && grep -q '^sampler: skipping .*model.layers.1. missing' $W/d2.log && grep -q '^sampler: $W/d/ckpt-00000030: 1 samples' $W/d2.log"
fam --run un --run-dir "$W/un" --untied 2>"$W/un.log"
ok "an untied run of 20 steps exits 0 (lm_head.weight saved)" "[ $? = 0 ] && [ -d $W/un/ckpt-00000020 ] && grep -q lm_head.weight $W/un/ckpt-00000020/model.safetensors"
edit "$W/un/ckpt-00000020" '.tie_word_embeddings = true'
sample --ckpt "$W/un/ckpt-00000020" >/dev/null 2>"$W/un1.log"; rc=$?
ok "sampler --ckpt: tie_word_embeddings true over a trained lm_head.weight refused in one line (rc $rc)" \
   "[ $rc = 1 ] && [ \$(wc -l < $W/un1.log) = 1 ] && grep -qx \"sampler: $W/un/ckpt-00000020/config.json: tie_word_embeddings true, vocab_size $V, hidden_size 32 but model.safetensors holds lm_head.weight \\[$V,32\\], which only tie_word_embeddings false has\" $W/un1.log"
sample --run-dir "$W/un" >/dev/null 2>"$W/un2.log"; rc=$?
ok "sampler --run-dir skips it, uses ckpt-10 (rc $rc)" \
   "[ $rc = 0 ] && grep -q '^sampler: skipping .*tie_word_embeddings true' $W/un2.log && grep -q '^sampler: $W/un/ckpt-00000010: 1 samples' $W/un2.log"
rm -rf "$W/ti"; cp -r "$W/a" "$W/ti"; edit "$W/ti/ckpt-00000040" '.tie_word_embeddings = false'
sample --ckpt "$W/ti/ckpt-00000040" >/dev/null 2>"$W/ti1.log"; rc=$?
ok "sampler --ckpt: tie_word_embeddings false without lm_head.weight refused before allocating, in one line (rc $rc)" \
   "[ $rc = 1 ] && [ \$(wc -l < $W/ti1.log) = 1 ] && grep -qx 'sampler: $W/ti/ckpt-00000040/config.json: tie_word_embeddings false, vocab_size $V, hidden_size 32 but model.safetensors holds no lm_head.weight \\[$V,32\\]' $W/ti1.log"
bin/evaluator --run a --run-dir "$W/ti" $VAL --once --no-bus >"$W/ti2.out" 2>"$W/ti2.log"; rc=$?
ok "evaluator --once: skips it, step 30 (rc $rc)" \
   "[ $rc = 0 ] && jq -s -e 'length == 1 and .[0].step == 30' $W/ti2.out >/dev/null && grep -q '^evaluator: skipping .*tie_word_embeddings false.*holds no lm_head.weight' $W/ti2.log"

# 5. state.json as the trainer wrote it: step = the directory's, >= 0; the data cursor inside the
# dataset's epoch (checked once a loader has said how long it is). Otherwise the checkpoint is
# damaged and skipped (a step of 100 in ckpt-40 ended the run at "step 100" with nothing
# trained; -5 trained, then failed every save; a cursor of 99999999999 was taken as epoch 1)
st() { jq -c "$2" "$1/state.json" >"$1/state.j" && mv "$1/state.j" "$1/state.json" && "$W/remanifest" "$1"; }
for bad in 100 -5; do
    rm -rf "$W/s"; cp -r "$W/a" "$W/s"; st "$W/s/ckpt-00000040" ".step = $bad"
    train --run-dir "$W/s" --resume 2>"$W/s$bad.log"; rc=$?
    ok "trainer: state.json step $bad in ckpt-40 skipped, resumed from ckpt-30, bit-identical (rc $rc)" \
       "[ $rc = 0 ] && grep -qx 'trainer: skipping $W/s/ckpt-00000040/state.json: \"step\" is $bad, the directory.s name says 40' $W/s$bad.log && grep -q 'resumed from $W/s/ckpt-00000030 (step 30' $W/s$bad.log && cmp -s $W/a/ckpt-00000040/model.safetensors $W/s/ckpt-00000040/model.safetensors"
done
rm -rf "$W/s"; cp -r "$W/a" "$W/s"
st "$W/s/ckpt-00000040" '.data_step = 99999999999'; st "$W/s/ckpt-00000030" '.data_epoch = -1'
train --run-dir "$W/s" --resume 2>"$W/sd.log"; rc=$?
ok "trainer: a data cursor beyond the epoch (ckpt-40) and a negative epoch (ckpt-30) skipped, resumed from ckpt-20 (rc $rc)" \
   "[ $rc = 0 ] && grep -q '^trainer: skipping $W/s/ckpt-00000040: state.json data cursor row 399999999996 is beyond the dataset.s epoch' $W/sd.log && grep -q '^trainer: skipping $W/s/ckpt-00000030/state.json: data cursor epoch -1 step' $W/sd.log && grep -q 'resumed from $W/s/ckpt-00000020 (step 20' $W/sd.log && [ \$(grep -c 'resumed from' $W/sd.log) = 1 ] && [ \$(grep -c 'steps per epoch' $W/sd.log) = 1 ] && cmp -s $W/a/ckpt-00000040/model.safetensors $W/s/ckpt-00000040/model.safetensors"
rm -rf "$W/s"; mkdir "$W/s"; cp -r "$W/a/ckpt-00000040" "$W/s/"
st "$W/s/ckpt-00000040" '.data_step = 99999999999'
train --run-dir "$W/s" --resume 2>"$W/sn.log"; rc=$?
ok "trainer: its only checkpoint's cursor beyond the epoch: refuses to start over, naming it (rc $rc)" \
   "[ $rc = 1 ] && grep -q 'every checkpoint in $W/s is damaged (ckpt-00000040)' $W/sn.log && ! grep -q '^step' $W/sn.log"

# 6. NaN weights under a MANIFEST that verifies (no xxh3 of its own: optional in safetensors):
# the first step after --resume has a NaN loss, and the message names that checkpoint as the
# cause and the one before it as the one to go back to (it called the NaN one "last good")
nanify() { python3 - "$1/model.safetensors" <<'PY'
import json, struct, sys
p = sys.argv[1]; b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n]); data = bytearray(b[8 + n:]); h['__metadata__'].pop('xxh3', None)
s, t = h['model.norm.weight']['data_offsets']; data[s:t] = b'\x00\x00\xc0\x7f' * ((t - s) // 4)
hb = json.dumps(h).encode(); open(p, 'wb').write(struct.pack('<Q', len(hb)) + hb + bytes(data))
PY
}
rm -rf "$W/n"; cp -r "$W/a" "$W/n"; nanify "$W/n/ckpt-00000040"; "$W/remanifest" "$W/n/ckpt-00000040"
bin/trainer --loaders "ipc://$W/l0" $MODEL --run a --steps 50 --ckpt-every 10 --run-dir "$W/n" --resume 2>"$W/n.log"; rc=$?
ok "trainer: NaN on the first step after resuming names that checkpoint and the one before it (rc $rc)" \
   "[ $rc != 0 ] && grep -q 'resumed from $W/n/ckpt-00000040' $W/n.log && grep -q 'loss is nan at step 41; stopped without saving: it is the first step from $W/n/ckpt-00000040, which --resume loaded, so that checkpoint is not good.*the one before it: $W/n/ckpt-00000030\$' $W/n.log && ! grep -q 'last good checkpoint: $W/n/ckpt-00000040' $W/n.log && [ ! -d $W/n/ckpt-00000050 ]"

it_done
