#!/usr/bin/env bash
# make mixers: seed 004's central comparisons at this machine's scale, on the Brown corpus
# (BPE 4096 learned from it, the last 25 documents held out), every model through the shell
# pipeline (bus, loaders, trainer) at equal steps and tokens, then bin/evaluator on the
# held-out split:
#   (1) mixer autoencoder vs transformer autoencoder of the same shape (d 128, 2 + 2 blocks,
#       the embedding uncompressed and repeated): seed 004 finds mixers autoencode far better;
#   (2) masked vs unmasked mixer encoder: seed 004 finds masking trains more efficiently; and
#       the unmasked checkpoint evaluated with its encoder masked (what its look-ahead
#       weights carry);
#   (3) causal mixer vs the causal baseline (d 128, 4 blocks);
#   (4) memory models (mixer, 2 encoder + 4 decoder blocks, d_e = MIXERS_DE floats per chunk
#       of 128 tokens) trained as seed 004 does, encoder and decoder jointly, against the
#       plain causal mixer in bits per byte including the stored embedding: seed 004 finds
#       the embedding-augmented model overtakes the causal one once trained long enough;
#       once as is (mixer-mem) and once with a learned start vector added at the decoder's
#       position 0 (mixer-mem-start, --memory-start; README says why);
#   (5) the embedding's quantization: every autoencoder and memory model clamps its
#       embedding to [-R, R] (R = MIXERS_RANGE), and the evaluator charges b bits per float
#       only where the decoder read the b-bit code (model/mixers.h), at 4, 8, 16 and 32 bits;
#       trained with seed 004's noise for 8 bits (QAT), for 4 bits, with none (post-training
#       quantization), and the previous setup (the encoder of the d_e autoencoder, frozen).
# Every evaluation carries the controls of evaluator/val_chunk.c (the embedding zeroed,
# another chunk's, a unigram of the train split): a result counts only if it beats them all,
# each by more than twice the gain's standard error and by more than 0.02 nats.
# Writes results/mixers.md (tables, and per comparison what the numbers say against seed
# 004, computed from them), results/mixers.png (curves from the metrics the bus carried) and
# MIXERS_OUT/ (default results/mixers/): eval_<run>.json (bin/evaluator's output as is),
# train_<run>.jsonl (the run's metrics) and commands.txt (every command that made them).
#   MIXERS_STEPS   optimizer steps of every run (default 2000, 4.1M tokens; 1000 steps took
#                  3-6 minutes a run on one quiet thread on 2026-11-24; 19-24 minutes on 2026-11-26 with
#                  about seven jobs on the two cores; 4-6 minutes with its evaluation on
#                  2026-11-26 12:40-13:10 at a load average of 1-7; an evaluation 0.5-3 minutes)
#   MIXERS_DE      the memory models' stored floats (default 16)
#   MIXERS_RANGE   R of the embeddings' clamp (default 4)
#   MIXERS_PARALLEL  trainings at once (default 1; give each one thread: OMP_NUM_THREADS=1)
#   MIXERS_RUNS    the runs to make (default all, in the order of the tables' rows; the memory
#                  and masking comparisons first: "mixer mixer-mem mixer-mem-start mixer-ae
#                  mixer-ae-unmasked mixer-mem-qat4 mixer-mem-ptq llama llama-ae mixer-ae-de16 mixer-mem-frozen");
#                  a run not made is left out of the tables and its comparison says so
#   MIXERS_DIR     work directory (default runs/mixers); finished runs are not redone (--resume)
#   MIXERS_OUT, MIXERS_MD, MIXERS_PNG  where the evidence, the tables and the curves go
set -euo pipefail
cd "$(dirname "$0")/../.."
W=${MIXERS_DIR:-runs/mixers}; STEPS=${MIXERS_STEPS:-2000}; DE=${MIXERS_DE:-16}; RANGE=${MIXERS_RANGE:-4}
PAR=${MIXERS_PARALLEL:-1}
OUT=${MIXERS_OUT:-results/mixers}; MD=${MIXERS_MD:-results/mixers.md}; PNG=${MIXERS_PNG:-results/mixers.png}
mkdir -p "$W" "$OUT"; W=$(cd "$W" && pwd)
export FT_BUS_PUB=ipc://$W/bus.pub FT_BUS_SUB=ipc://$W/bus.sub
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
CMDS="$W/commands.txt"
show() { local a l='$'; for a in "$@"; do l+=" $(printf '%q' "$a")"; done; echo "$l"; }   # a line the shell reads back
run() { show "$@" | tee -a "$CMDS" >&2; "$@"; }
bgrun() { printf '$ %s &\n' "$*" >&2; "$@" & pids+=($!); }
: > "$CMDS"
VAL_DOCS=25
SHAPE="--d-model 128 --heads 4 --kv-heads 2 --d-ff 384 --seq-len 128 --batch 16"
OPT="--lr 3e-3 --min-lr 3e-4 --warmup $(( STEPS < 500 ? STEPS / 10 : 50 )) --steps $STEPS --ckpt-every 200 --log-every 50"
CAUSAL="--layers 4"
AE="--layers 2 --encoder-layers 2"
MEM="--model mixer-mem $CAUSAL --encoder-layers 2 --embed-dim $DE"
QAT8="--embed-range $RANGE --embed-noise-bits 8"

# kept: a command that makes something kept across sessions, recorded in FILE beside it
kept() { local f=$1; shift; show "$@" | tee -a "$f" >&2; "$@"; }
[ -f data/brown.txt ] || run make data
[ -f "$W/brown4k.ftbpe" ] || { : > "$W/data.cmd"; kept "$W/data.cmd" bin/tokenizer train --vocab-size 4096 --out "$W/brown4k.ftbpe" data/brown.txt; }
[ -d "$W/data" ] || kept "$W/data.cmd" bin/tokenizer encode --vocab "$W/brown4k.ftbpe" --out "$W/data" data/brown.txt

bgrun bin/bus --quiet
for i in 0 1; do bgrun bin/loader --data "$W/data" --val-docs $VAL_DOCS --bind "ipc://$W/loader$i" --name "mixers$i" --quiet; done
bgrun bin/bus tap metrics log/mixers >> "$W/metrics.jsonl"   # kept across sessions: resumed runs' curves
for _ in $(seq 50); do bin/bus send log/mixers log program=mixers line=ping-$$ >/dev/null 2>&1; grep -q "ping-$$" "$W/metrics.jsonl" && break; sleep 0.1; done

# name | the headline bits per stored float | flags
RUNS=(
    "mixer|-|--model mixer $CAUSAL"
    "llama|-|--model llama $CAUSAL"
    "mixer-ae|8|--model mixer-ae $AE $QAT8"
    "llama-ae|8|--model llama-ae $AE $QAT8"
    "mixer-ae-unmasked|8|--model mixer-ae $AE $QAT8 --no-mask-encoder"
    "mixer-ae-de$DE|8|--model mixer-ae $AE --embed-dim $DE $QAT8"
    "mixer-mem|8|$MEM $QAT8"
    "mixer-mem-start|8|$MEM $QAT8 --memory-start"
    "mixer-mem-qat4|4|$MEM --embed-range $RANGE --embed-noise-bits 4"
    "mixer-mem-ptq|8|$MEM --embed-range $RANGE"
    "mixer-mem-frozen|8|$MEM $QAT8 --encoder $W/mixer-ae-de$DE --freeze-encoder"
)
ORDER=${MIXERS_RUNS:-"mixer mixer-mem mixer-mem-start mixer-ae mixer-ae-unmasked mixer-mem-qat4 mixer-mem-ptq llama llama-ae mixer-ae-de$DE mixer-mem-frozen"}
spec_of() { local r; for r in "${RUNS[@]}"; do [ "${r%%|*}" = "$1" ] && { echo "$r"; return 0; }; done
            echo "mixers: no run named $1 (MIXERS_RUNS)" >&2; return 1; }
for name in $ORDER; do spec_of "$name" > /dev/null; done
EVAL="--task val --data $W/data --val-docs $VAL_DOCS --batches 0 --batch 8 --seq-len 128 --once --no-bus --quiet"
# An evaluation newer than the checkpoints it read is kept.
fresh() { [ -s "$1" ] && [ -z "$(find "$2" -maxdepth 1 -name 'ckpt-*' -newer "$1")" ]; }
# evaluate NAME DIR [flags]: bin/evaluator's val into eval_NAME.json, its command line beside it
evaluate() {
    local name=$1 dir=$2; shift 2
    fresh "$W/eval_$name.json" "$dir" && [ -s "$W/eval_$name.cmd" ] && return 0
    printf '$ %s\n' "bin/evaluator --run mixers-$name --run-dir $dir $EVAL $*" > "$W/eval_$name.cmd"
    cat "$W/eval_$name.cmd" >&2
    bin/evaluator --run "mixers-$name" --run-dir "$dir" $EVAL "$@" > "$W/eval_$name.json"
}
# train_eval SPEC: one run trained (its log $W/<run>.log), then evaluated at once, so an
# invocation cut short keeps every run it finished with its evaluation
train_eval() {
    local r=$1 name rest flags bits
    name=${r%%|*}; rest=${r#*|}; bits=${rest%%|*}; flags=${rest#*|}
    run bin/trainer --discover --run "mixers-$name" --run-dir "$W/$name" $flags $SHAPE $OPT --resume 2>"$W/$name.log" || return 1
    grep -q "done at step $STEPS" "$W/$name.log" || return 1
    evaluate "$name" "$W/$name" $([ "$bits" = - ] || echo "--bits-per-param $bits")
}
# training: PAR runs at once in the order of MIXERS_RUNS; a run that reads another's encoder
# starts once every earlier one has finished
running=0
for name in $ORDER; do
    r=$(spec_of "$name"); flags=${r#*|}; flags=${flags#*|}
    case "$flags " in *"--encoder "*) while [ $running -gt 0 ]; do wait -n || true; running=$((running - 1)); done;; esac
    train_eval "$r" &
    running=$((running + 1))
    if [ $running -ge "$PAR" ]; then wait -n || true; running=$((running - 1)); fi
done
while [ $running -gt 0 ]; do wait -n || true; running=$((running - 1)); done
for name in $ORDER; do
    { grep -q "done at step $STEPS" "$W/$name.log" && [ -s "$W/eval_$name.json" ]; } ||
        { echo "mixers: run $name did not finish; $W/$name.log says:" >&2; tail -n 5 "$W/$name.log" >&2; exit 1; }
done
# (2): the unmasked encoder's checkpoint evaluated with its encoder masked: the same weights,
# the look-ahead half of its first mixing dropped (config.json edited, MANIFEST rewritten)
flip=$W/mixer-ae-unmasked-as-masked
made() { case " $ORDER " in *" $1 "*) return 0;; esac; return 1; }
if made mixer-ae-unmasked; then
src=$(ls -d "$W/mixer-ae-unmasked"/ckpt-* | tail -n 1)
if ! fresh "$W/eval_mixer-ae-unmasked-as-masked.json" "$W/mixer-ae-unmasked"; then
    : > "$W/flip.cmd"
    kept "$W/flip.cmd" rm -rf "$flip"; kept "$W/flip.cmd" mkdir -p "$flip"; kept "$W/flip.cmd" cp -r "$src" "$flip/"
    kept "$W/flip.cmd" sed -i 's/"ft_no_mask_encoder": true/"ft_no_mask_encoder": false/' "$flip/$(basename "$src")/config.json"
    kept "$W/flip.cmd" cc -O2 -o "$W/remanifest" tests/lib/remanifest.c -lxxhash
    kept "$W/flip.cmd" "$W/remanifest" "$flip/$(basename "$src")"
fi
evaluate mixer-ae-unmasked-as-masked "$flip" --bits-per-param 8
fi
sleep 0.5

# the committed evidence: evaluations, metrics, commands
# (the tables' rows in RUNS order, those made)
NAMES=(); EVALS=()
for r in "${RUNS[@]}"; do made "${r%%|*}" && NAMES+=("${r%%|*}"); done
EVALS=("${NAMES[@]}"); made mixer-ae-unmasked && EVALS+=(mixer-ae-unmasked-as-masked)
for name in "${EVALS[@]}"; do cp "$W/eval_$name.json" "$OUT/eval_$name.json"; done
# a step logged twice (a run stopped after it and resumed from an earlier checkpoint): the
# resumed one, the one the checkpoints descend from, is kept
for name in "${NAMES[@]}"; do
    grep "\"metrics/mixers-$name\"" "$W/metrics.jsonl" > "$W/train_$name.all" || true
    awk 'match($0, /"step":[0-9]+/) { k = substr($0, RSTART, RLENGTH) } NR == FNR { last[k] = FNR; next } last[k] == FNR' \
        "$W/train_$name.all" "$W/train_$name.all" > "$OUT/train_$name.jsonl"
done
{ cat "$W/data.cmd" "$CMDS"; made mixer-ae-unmasked && cat "$W/flip.cmd"; for name in "${EVALS[@]}"; do cat "$W/eval_$name.cmd"; done; } > "$OUT/commands.txt"

# curves: the training loss of each run; the memory model's also with its embedding's share
# added (seed 004's "normalized loss": ce + L_o, L_o = bpb_embedding ln 2 / (L_t / L_b))
for name in "${NAMES[@]}"; do jq -r '"\(.step) \(.values.loss)"' "$OUT/train_$name.jsonl" > "$W/loss_$name.dat"; done
for m in mixer-mem mixer-mem-start; do made $m || continue; for bp in 4 8; do
    off=$(jq --argjson bp $bp '(.values.ce_total - .values.ce) * $bp / .values.bits_per_param' "$W/eval_$m.json")
    awk -v o="$off" '{print $1, $2 + o}' "$W/loss_$m.dat" > "$W/loss_${m}_norm$bp.dat"
done; done
# a run not made is left out of its panel (an empty panel: gnuplot warns, the script goes on)
line() { [ -s "$W/loss_$1.dat" ] && echo "'$W/loss_$1.dat' using 1:2 smooth bezier lw 2 title '$2'" || echo "NaN notitle"; }
gnuplot <<GP || echo "mixers: gnuplot failed; $PNG may be missing" >&2
set terminal pngcairo size 1200,900 noenhanced
set output '$PNG'
set multiplot layout 2,2 title 'seed 004 at small scale: Brown (BPE 4096), d=128, T=128, B=16, $STEPS steps, CPU'
set grid; set xlabel 'optimizer step'; set ylabel 'training cross-entropy (nats/token)'
set title '(1) autoencoders: mixer vs transformer (d_e = d)'
plot $(line mixer-ae 'mixer-ae'), $(line llama-ae 'llama-ae')
set title '(2) mixer autoencoder: masked vs unmasked encoder'
plot $(line mixer-ae 'masked encoder'), $(line mixer-ae-unmasked 'unmasked encoder')
set title '(3) causal: mixer vs transformer baseline'
plot $(line mixer 'mixer'), $(line llama 'llama')
set title '(4) memory model (joint, d_e=$DE, 8-bit noise) vs causal mixer'
set ylabel 'cross-entropy + embedding share (nats/token)'
plot $(line mixer 'causal mixer'), $(line mixer-mem 'memory model, decoder only'), $(line mixer-mem_norm8 'memory model + embedding at 8 bits'), $(line mixer-mem-start 'with start vector, decoder only'), $(line mixer-mem-start_norm8 'with start vector + embedding at 8 bits')
unset multiplot
GP

# the tables, and per comparison what the numbers say against seed 004
v() { [ -s "$W/eval_$1.json" ] || return 0; jq -r --arg f "$2" '.values[$f] // empty' "$W/eval_$1.json"; }
# all RUN...: every run named was made at this invocation (MIXERS_RUNS), else the comparison says so
all() { local r; for r in "$@"; do made "$r" || return 1; done; }
notmade() { echo "- ($1) $2: not made at this invocation (MIXERS_RUNS=\"$ORDER\")."; }
f4() { awk -v x="$1" 'BEGIN { if (x == "") print "-"; else printf "%.4f", x }'; }
f2() { awk -v x="$1" 'BEGIN { if (x == "") print "-"; else printf "%.2f", x }'; }
pm() { echo "$(f4 "$(v "$1" "$2")") ± $(f4 "$(v "$1" "$2_se")")"; }
# lt A B TOL: A below B by more than TOL; near A B TOL: within TOL
lt() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { exit !(a < b - t) }'; }
near() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; exit !(d <= t && d >= -t) }'; }
sub4() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%+.4f", a - b }'; }
pct() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%+.1f%%", 100 * (a - b) / b }'; }
# a result counts when it beats every control by more than twice the gain's standard error
# (bin/evaluator's beats_controls) and by more than 0.02 nats (the outcome threshold below)
beats() { [ "$(v "$1" beats_controls)" = 1 ] && ! lt "$(v "$1" gain_zero)" 0.02 0 && ! lt "$(v "$1" gain_shuffle)" 0.02 0 && ! lt "$(v "$1" gain_unigram)" 0.02 0; }
counts() { if beats "$1"; then echo yes; elif [ "$(v "$1" beats_controls)" = 1 ]; then echo "**no** (a gain under 0.02 nats)"; else echo "**no**"; fi; }
# the paired difference of two runs' training losses over the second half (same batches)
paired() {
    paste <(jq -r '"\(.step) \(.values.loss)"' "$OUT/train_$1.jsonl") <(jq -r '"\(.step) \(.values.loss)"' "$OUT/train_$2.jsonl") |
        awk -v h=$((STEPS / 2)) '$1 == $3 && $1 > h { d = $2 - $4; n++; s += d; s2 += d * d }
            END { if (n < 2) print "- -"; else { m = s / n; printf "%.4f %.4f %d\n", m, sqrt((s2 / n - m * m) / (n - 1)), n } }'
}
{
# the command that made this, every setting given
envs=$(for e in OMP_NUM_THREADS MIXERS_DIR MIXERS_STEPS MIXERS_DE MIXERS_RANGE MIXERS_PARALLEL MIXERS_RUNS MIXERS_OUT MIXERS_MD MIXERS_PNG; do
           [ -n "${!e:-}" ] && case ${!e} in *" "*) printf '%s="%s" ' "$e" "${!e}";; *) printf '%s=%s ' "$e" "${!e}";; esac; done; true)
echo "Masked mixers at small scale (\`${envs}make mixers\`, $(date -u +%F)):"
echo "Brown corpus, BPE 4096"
echo "learned from it, the last $VAL_DOCS documents held out; d=128, SwiGLU 384, T=128 (the mixers' n_ctx), B=16,"
echo "$STEPS steps ($((STEPS * 16 * 128)) tokens) for every run, AdamW 3e-3 cosine to 3e-4. Causal models: 4 blocks;"
echo "autoencoders: 2 encoder + 2 decoder blocks, the last position's vector as the one embedding, repeated at"
echo "every decoder position; memory models: 2 encoder + 4 decoder blocks, the embedding ($DE floats) at the"
echo "decoder's position 0, encoder and decoder trained together (but the frozen row). Mixers flat (1 head, k = 1)."
echo "Every stored embedding is clamped to [-$RANGE, $RANGE]; at b bits per float the decoder reads its b-bit code"
echo "(2^b levels over the range). Validation on the whole held-out split. Evaluations: [mixers/](mixers/)eval_<run>.json,"
echo "the commands that made them: [mixers/commands.txt](mixers/commands.txt). Train time: the intervals between the"
echo "metrics the bus carried, added up (a gap over 60 s, where a run stopped and was resumed, left out), wall"
echo "clock on a machine shared with other jobs."
echo
echo "CE in nats per token, bits per byte (bpb) per seed 004: (L_t / L_b) CE / ln 2, plus n_p b_p / (T L_b / L_t)"
echo "for the stored embedding of n_p floats at b_p bits."
echo
echo "| run | parameters | train time | val CE | decoder bpb | floats x bits | embedding bpb | total bpb | CE, embedding zeroed | CE, another chunk's | CE, unigram | beats all three |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for name in "${NAMES[@]}"; do
    # the steps' intervals added up, a gap over 60 s (the run stopped, then resumed) left out
    secs=$(jq -s -r 'sort_by(.time) as $a | if length > 1 then [range(1; length) as $i | $a[$i].time - $a[$i - 1].time | select(. < 60)] | add | round | tostring + " s" else "-" end' "$OUT/train_$name.jsonl")
    if [ -n "$(v "$name" embed_floats)" ]; then
        echo "| $name | $(v "$name" params) | $secs | $(f4 "$(v "$name" ce)") | $(f4 "$(v "$name" bpb_decoder)") | $(v "$name" embed_floats) x $(v "$name" bits_per_param) | $(f4 "$(v "$name" bpb_embedding)") | $(f4 "$(v "$name" bpb)") | $(f4 "$(v "$name" ce_zero)") | $(f4 "$(v "$name" ce_shuffle)") | $(f4 "$(v "$name" ce_unigram)") | $(counts "$name") |"
    else
        echo "| $name | $(v "$name" params) | $secs | $(f4 "$(v "$name" ce)") | $(f4 "$(v "$name" bpb)") | - | - | $(f4 "$(v "$name" bpb)") | - | - | - | - |"
    fi
done
echo
echo "Gains over the controls (nats per token, mean over the held-out rows ± its standard error). A result counts"
echo "(\"beats all three\") when every gain exceeds twice its standard error (bin/evaluator's \`beats_controls\`) and 0.02"
echo "nats (a smaller gain, however significant, is not read as an outcome):"
echo
echo "| run | over the zeroed embedding | over another chunk's | over the unigram |"
echo "| --- | --- | --- | --- |"
for name in "${NAMES[@]}"; do
    [ -n "$(v "$name" embed_floats)" ] || continue
    echo "| $name | $(pm "$name" gain_zero) | $(pm "$name" gain_shuffle) | $(pm "$name" gain_unigram) |"
done
echo
echo "The embedding at b bits per float (the decoder reading the b-bit code): CE (nats per token) / total bits per byte:"
echo
echo "| run | trained with | 4 bits | 8 bits | 16 bits | 32 bits |"
echo "| --- | --- | --- | --- | --- | --- |"
for name in "${NAMES[@]}"; do
    [ -n "$(v "$name" embed_floats)" ] || continue
    case $name in *qat4) how="noise of 4 bits";; *-start) how="noise of 8 bits, start vector";; *ptq) how="no noise (post-training quantization)";; *frozen) how="noise of 8 bits, encoder frozen";; *) how="noise of 8 bits";; esac
    row="| $name | $how"
    for b in 4 8 16 32; do row="$row | $(f4 "$(v "$name" ce_b$b)") / $(f4 "$(v "$name" bpb_b$b)")"; done
    echo "$row |"
done
echo
echo "Against seed 004 (every verdict computed from the numbers above; differences within 0.02 nats of CE or"
echo "0.01 bit per byte are not read as an outcome):"
if ! all mixer-ae llama-ae; then notmade 1 "mixer vs transformer autoencoder"; else
a=$(v mixer-ae ce); b=$(v llama-ae ce)
if lt "$a" "$b" 0.02; then w="agrees: the mixer autoencodes better, by $(sub4 "$b" "$a") nats per token"
elif near "$a" "$b" 0.02; then w="no difference at this length"
else w="does not agree: the transformer autoencodes better, by $(sub4 "$a" "$b") nats per token"; fi
echo "- (1) mixer vs transformer autoencoder, val CE $(f4 "$a") vs $(f4 "$b"): $w (seed 004: mixers far better). Both count: $(counts mixer-ae), $(counts llama-ae)."
fi
if ! all mixer-ae mixer-ae-unmasked; then notmade 2 "masked vs unmasked mixer encoder"; else
a=$(v mixer-ae ce); b=$(v mixer-ae-unmasked ce); fl=$(v mixer-ae-unmasked-as-masked ce)
read -r pd pse pn <<<"$(paired mixer-ae mixer-ae-unmasked)"
if lt "$a" "$b" 0.02; then w="agrees: the masked encoder reaches a lower loss"
elif near "$a" "$b" 0.02; then w="no difference at this length (within 0.02 nats); the embedding is read at the last position, which sees every token through either mask"
else w="does not agree: the unmasked encoder reaches a lower loss"; fi
if lt "$b" "$fl" 0.02; then fw="so its look-ahead weights carry that much, and the evaluator scores the mask each checkpoint asks for"
else fw="within 0.02 nats of the unmasked reading: this control does not show the mask read"; fi
echo "- (2) masked vs unmasked mixer encoder, val CE $(f4 "$a") vs $(f4 "$b") (difference $(sub4 "$a" "$b")): $w (seed 004: masking trains more efficiently). Over the second half of training, on the same batches, the masked run's loss minus the unmasked one's is $(f4 "$pd") ± $(f4 "$pse") nats ($pn steps). The control that the evaluator scores the variant it is given: the unmasked checkpoint evaluated with its encoder masked (the same weights, config flipped) reads $(f4 "$fl") ($(sub4 "$fl" "$b")), $fw."
fi
if ! all mixer llama; then notmade 3 "causal mixer vs transformer"; else
a=$(v mixer ce); b=$(v llama ce)
if lt "$a" "$b" 0.02; then w="the mixer is ahead by $(sub4 "$b" "$a") nats"
elif near "$a" "$b" 0.02; then w="no difference at this length"
else w="the transformer is ahead by $(sub4 "$a" "$b") nats per token"; fi
echo "- (3) causal mixer vs transformer, val CE $(f4 "$a") vs $(f4 "$b"): $w (the masked-mixer papers: a mixer learns causal language somewhat less efficiently than an optimised transformer, about as well as an early one)."
fi
if ! all mixer mixer-mem; then notmade 4 "memory model vs causal mixer"; else
a=$(v mixer bpb)
# mem_verdict RUN BPB8 BPB4: what RUN's numbers say against the causal mixer's bpb $a
mem_verdict() {
    local d; d=$(v "$1" bpb_decoder)
    if ! beats "$1"; then echo "does not count: it does not beat its controls (gains over the zeroed embedding $(pm "$1" gain_zero), over another chunk's $(pm "$1" gain_shuffle), over the unigram $(pm "$1" gain_unigram) nats; a gain counts above twice its standard error and 0.02 nats)"
    elif lt "$3" "$a" 0.01 || lt "$2" "$a" 0.01; then echo "agrees: it beats its controls and with the embedding stored compresses better"
    elif lt "$d" "$a" 0.01; then echo "does not agree yet: it beats its controls (over another chunk's embedding $(pm "$1" gain_shuffle) nats) and its decoder alone is $(sub4 "$d" "$a") bpb against the causal mixer, but the embedding costs more to store than it saves"
    else echo "does not agree: it beats its controls (over another chunk's embedding $(pm "$1" gain_shuffle) nats) but its decoder alone is not below the causal mixer's ($(sub4 "$d" "$a") bpb), so the embedding's storage is pure cost"; fi
}
d=$(v mixer-mem bpb_decoder); b8=$(v mixer-mem bpb_b8)
if made mixer-mem-qat4; then b4=$(v mixer-mem-qat4 bpb_b4); d4=$(v mixer-mem-qat4 bpb_decoder)
else b4=$(v mixer-mem bpb_b4); d4=$(v mixer-mem bpb_decoder); fi   # no model trained for 4 bits: the 8-bit one read at 4
w=$(mem_verdict mixer-mem "$b8" "$b4")
made mixer-mem-qat4 && t4="for the model trained for 4 bits" || t4="for the same model read at 4 bits (mixer-mem-qat4 not made)"
if made mixer-mem-start; then
    s8=$(v mixer-mem-start bpb_b8); s4=$(v mixer-mem-start bpb_b4)
    st="With the learned start vector at the decoder's position 0 (mixer-mem-start, --memory-start): val CE $(f4 "$(v mixer-mem-start ce)") against $(f4 "$(v mixer-mem ce)") without, total bpb $(f4 "$s8") at 8 bits ($(sub4 "$s8" "$a")), $(f4 "$s4") read at 4 bits ($(sub4 "$s4" "$a")), decoder alone $(f4 "$(v mixer-mem-start bpb_decoder)"): $(mem_verdict mixer-mem-start "$s8" "$s4")."
else st="The memory model with the start vector (mixer-mem-start): not made."; fi
echo "- (4) memory model (joint, $DE floats) vs causal mixer, total bpb $(f4 "$b8") at 8 bits ($(sub4 "$b8" "$a")), $(f4 "$b4") $t4 ($(sub4 "$b4" "$a")), decoder alone $(f4 "$d") / $(f4 "$d4"), vs $(f4 "$a"): $w (seed 004: at d_e = 64 and n_ctx = 1024 the embedding-augmented mixer ends with the lowest total bpb after long training; it starts higher and overtakes later). $st The frozen encoder of the previous setup: $(made mixer-mem-frozen && echo "decoder bpb $(f4 "$(v mixer-mem-frozen bpb_decoder)"), total $(f4 "$(v mixer-mem-frozen bpb_b8)") at 8 bits, $(mem_verdict mixer-mem-frozen "$(v mixer-mem-frozen bpb_b8)" "$(v mixer-mem-frozen bpb_b4)")" || echo "not made")."
fi
if ! made mixer-mem; then notmade 5 "quantizing the embedding"; else
q32=$(v mixer-mem ce_b32); q8=$(v mixer-mem ce_b8); q4=$(v mixer-mem ce_b4)
p32=$(v mixer-mem-ptq ce_b32); p8=$(v mixer-mem-ptq ce_b8); p4=$(v mixer-mem-ptq ce_b4)
made mixer-mem-ptq && ptq="trained without noise $(f4 "$p32") -> $(f4 "$p8") ($(pct "$p8" "$p32")) -> $(f4 "$p4") ($(pct "$p4" "$p32"))" || ptq="the model trained without noise not made"
echo "- (5) quantizing the embedding: trained with 8-bit noise, the CE goes $(f4 "$q32") at 32 bits -> $(f4 "$q8") at 8 ($(pct "$q8" "$q32")) -> $(f4 "$q4") at 4 ($(pct "$q4" "$q32")); $ptq. Seed 004's numbers (FineWeb, d_e = 64, 200k steps): without noise, float16 2.26 -> float8 E4M3 4.86 (+115%); with noise, float16 2.424 -> int8 2.437 (+0.5%) -> E4M3 2.672 (+10%)."
fi
} > "$MD"
cat "$MD"
