#!/usr/bin/env bash
# make brown: the Llama-style baseline and the Free Transformer (same decoder) trained on the
# Brown corpus through the shell pipeline (bus, loaders, trainer as separate processes), then
# evaluated by bin/evaluator on held-out documents. Writes results/brown.md (the table),
# results/brown.png (training curves drawn from the metrics the bus carried) and
# results/brown_<model>.jsonl (those metrics).
#   BROWN_STEPS (default 600), BROWN_DIR (default runs/brown), BROWN_MODELS ("llama free"):
#   each entry "llama", "free" (kappa 0.5 bit, the paper's choice) or "free:K" (kappa K bits),
#   so a sweep is BROWN_MODELS="llama free:0.5 free:1 free:2". BROWN_OUT (default results):
#   where brown.md, brown.png, brown_kl.png and the metrics go.
#   BROWN_CORPUS: brown (default) or nlp (data/nlp-corpus.jsonl: 100,000 short documents, each
#   ended by end-of-text; the files are then named nlp*, the run directory runs/nlp).
#   BROWN_VOCAB: bpe4k (a 4096-token BPE learned from the corpus; Brown's default) or one of
#   tiktoken's encodings (gpt2, the nlp corpus's default; cl100k_base, ...).
#   BROWN_EVAL_EVERY: a checkpoint every N steps, all kept and all evaluated, so the bound is a
#   curve over training (<name>_bound.png and a table); default: only the last (N = 200 kept 3).
#   BROWN_VAL_DOCS: held-out documents, the corpus's last (default 25 for Brown, 2000 for nlp).
set -euo pipefail
cd "$(dirname "$0")/../.."
CORPUS=${BROWN_CORPUS:-brown}
case $CORPUS in
    brown) TEXT=data/brown.txt; FORMAT=text; EOT=(); VOCAB=${BROWN_VOCAB:-bpe4k}; VAL_DOCS=${BROWN_VAL_DOCS:-25} ;;
    nlp) TEXT=data/nlp-corpus.jsonl; FORMAT=jsonl; EOT=(--append-eot); VOCAB=${BROWN_VOCAB:-gpt2}; VAL_DOCS=${BROWN_VAL_DOCS:-2000} ;;
    *) echo "brown.sh: BROWN_CORPUS must be brown or nlp, not '$CORPUS'" >&2; exit 2 ;;
esac
NAME=$CORPUS
case $CORPUS in brown) TITLE="Brown corpus";; nlp) TITLE="nlp-corpus";; esac
W=${BROWN_DIR:-runs/$CORPUS}; STEPS=${BROWN_STEPS:-600}; MODELS=${BROWN_MODELS:-llama free}
OUT=${BROWN_OUT:-results}
EVAL_EVERY=${BROWN_EVAL_EVERY:-0}
if [ "$EVAL_EVERY" -gt 0 ]; then CKPT=(--ckpt-every "$EVAL_EVERY" --keep 0); ALL=(--all); else CKPT=(--ckpt-every 200); ALL=(); fi
mkdir -p "$W" "$OUT"; W=$(cd "$W" && pwd)
export FT_BUS_PUB=ipc://$W/bus.pub FT_BUS_SUB=ipc://$W/bus.sub
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
run() { printf '$ %s\n' "$*" >&2; "$@"; }
bgrun() { printf '$ %s &\n' "$*" >&2; "$@" & pids+=($!); }
DECODER="--seq-len 128 --batch 16 --d-model 128 --layers 4 --heads 4 --kv-heads 2 --d-ff 384"
# "free" is kappa 0.5 bit per token, the paper's choice; "free:K" is K bits
label_of() { case $1 in free:*) echo "free-k${1#free:}";; *) echo "$1";; esac; }
flags_of() { case $1 in llama) echo "--model llama";; free) echo "--model free --latent-bits 8 --kappa 0.5 --kappa-unit bits";;
             free:*) echo "--model free --latent-bits 8 --kappa ${1#free:} --kappa-unit bits";; esac; }

[ -f "$TEXT" ] || run make data
# 1. the vocabulary: a 4096-token byte-level BPE learned from the corpus, or tiktoken's; the last
#    VAL_DOCS documents are held out
if [ "$VOCAB" = bpe4k ]; then
    V="$W/${CORPUS}4k.ftbpe"
    [ -f "$V" ] || run bin/tokenizer train --vocab-size 4096 --out "$V" "$TEXT"
    VOCAB_TEXT="a BPE vocabulary of 4096 learned from the corpus"
else
    V=$VOCAB
    VOCAB_TEXT="tiktoken's $VOCAB vocabulary"
fi
[ -d "$W/data" ] || run bin/tokenizer encode --vocab "$V" --format "$FORMAT" "${EOT[@]}" --out "$W/data" "$TEXT"
run bin/tokenizer info "$W/data"

# 2. bus, two loaders serving the training split, a tap recording the metrics
bgrun bin/bus --quiet
for i in 0 1; do bgrun bin/loader --data "$W/data" --val-docs $VAL_DOCS --bind "ipc://$W/loader$i" --name "$NAME$i" --quiet; done
# appended: a sweep run again (--resume) keeps the curves of the runs it does not redo
touch "$W/metrics.jsonl"; lines0=$(wc -l < "$W/metrics.jsonl")
bgrun bin/bus tap metrics log/brown >> "$W/metrics.jsonl"
for _ in $(seq 50); do   # the tap is connected once it has written our ping
    bin/bus send log/brown log program=brown line=ping >/dev/null 2>&1
    [ "$(wc -l < "$W/metrics.jsonl")" -gt "$lines0" ] && break; sleep 0.1
done

# 3. train each model (--resume: a finished run is not redone), then evaluate it on the held-out split
declare -A secs
for spec in $MODELS; do
    m=$(label_of "$spec")
    start=$(date +%s)
    run bin/trainer --discover --run "$NAME-$m" --run-dir "$W/$m" $(flags_of "$spec") --steps "$STEPS" $DECODER \
        --lr 3e-3 --min-lr 3e-4 --warmup 50 "${CKPT[@]}" --log-every 50 --resume 2> >(tee "$W/$m.log" >&2)
    secs[$m]=$(( $(date +%s) - start ))
    run bin/evaluator --run "$NAME-$m" --run-dir "$W/$m" --task val --data "$W/data" --val-docs $VAL_DOCS \
        --batches 0 --batch 8 --seq-len 128 --once "${ALL[@]}" --no-bus --quiet > "$W/evals_$m.jsonl"
    jq -s 'max_by(.step)' "$W/evals_$m.jsonl" > "$W/eval_$m.json"   # the table: the last checkpoint
done
LABELS=$(for spec in $MODELS; do label_of "$spec"; done)
sleep 0.5

# 4. curves and table
plots=(); klplots=()
for m in $LABELS; do
    # one line per step: a run resumed from a checkpoint repeats the steps after it (the last kept)
    grep "\"metrics/$NAME-$m\"" "$W/metrics.jsonl" | jq -c -s 'group_by(.step) | map(.[-1]) | .[]' \
        > "$OUT/${NAME}_$m.jsonl" || true
    jq -r '"\(.step) \(.values.ce // .values.loss)"' "$OUT/${NAME}_$m.jsonl" > "$W/loss_$m.dat"
    plots+=("'$W/loss_$m.dat' using 1:2 smooth bezier lw 2 title '$m (training cross-entropy)'")
    if [ "${m%%-*}" = free ]; then
        jq -r '"\(.step) \(.values.kl_bits)"' "$OUT/${NAME}_$m.jsonl" > "$W/kl_$m.dat"
        klplots+=("'$W/kl_$m.dat' using 1:2 smooth bezier lw 2 title '$m (KL, bits per token)'")
    fi
done
if [ ${#klplots[@]} -gt 0 ]; then
gnuplot <<GP
set terminal pngcairo size 800,480 noenhanced
set output '$OUT/${NAME}_kl.png'
set title '$TITLE: the Free Transformer KL per token (training)'
set xlabel 'optimizer step (16 x 128 tokens)'
set ylabel 'bits per token'
set grid
plot $(IFS=,; echo "${klplots[*]}")
GP
fi
if [ "$EVAL_EVERY" -gt 0 ]; then
bplots=()
for m in $LABELS; do
    jq -r '"\(.step) \(.values.ce // .values.nll_bound)"' "$W/evals_$m.jsonl" | sort -n > "$W/bound_$m.dat"
    bplots+=("'$W/bound_$m.dat' using 1:2 with linespoints lw 2 title '$m (held-out NLL bound)'")
done
gnuplot <<GP
set terminal pngcairo size 800,480 noenhanced
set output '$OUT/${NAME}_bound.png'
set title '$TITLE: held-out NLL (the baseline) and likelihood bound (Free Transformer) over training'
set xlabel 'optimizer step (16 x 128 tokens)'
set ylabel 'nats per token'
set grid
plot $(IFS=,; echo "${bplots[*]}")
GP
fi
gnuplot <<GP
set terminal pngcairo size 800,480 noenhanced
set output '$OUT/$NAME.png'
set title '$TITLE ($VOCAB), CPU, bin/trainer: same decoder, d=128, 4 layers'
set xlabel 'optimizer step (16 x 128 tokens)'
set ylabel 'nats per token'
set grid
plot $(IFS=,; echo "${plots[*]}")
GP
{
echo "$TITLE (\`make brown\`, BROWN_CORPUS=$CORPUS, $(date -u +%F)): $VOCAB_TEXT; the last"
echo "$VAL_DOCS documents held out. Decoder d=128, 4 layers, 4/2 heads, SwiGLU 384, T=128, B=16, $STEPS steps"
echo "($((STEPS * 16 * 128)) tokens seen), AdamW 3e-3 cosine to 3e-4. Free Transformer: the same decoder plus its"
echo "encoder block, H=8 latent bits, kappa = 0.5 bit (free) or K bits (free-kK). Validation on the whole held-out split (nats per token)."
echo
echo "| model | parameters | tokens seen | train time | val NLL bound | CE, Z from the encoder | KL | ELBO | CE, Z from the prior | bits per byte |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for m in $LABELS; do
    p=$(grep -o '[0-9][0-9]* parameters' "$W/$m.log" 2>/dev/null | tail -n1 | cut -d' ' -f1 || true)
    jq -r --arg m "$m" --arg s "${secs[$m]}" --arg p "${p:--}" '
      def f: if . == null then "-" else (. * 1000 | round / 1000 | tostring) end;
      .values as $v
      | "| \($m) | \($p) | \($v.tokens_seen) | \($s) s | \(($v.ce // $v.nll_bound) | f) | \($v.ce_enc | f) | \($v.kl | f) | \($v.elbo | f) | \($v.ce_prior | f) | \($v.bpb | f) |"' "$W/eval_$m.json"
done
if [ "$EVAL_EVERY" -gt 0 ]; then
    echo
    echo "The held-out NLL (baseline) and bound (Free Transformer) at each checkpoint (${NAME}_bound.png):"
    echo
    steps=$(cat "$W"/evals_*.jsonl | jq -s -r 'map(.step) | unique | map(tostring) | join(" ")')
    echo "| model | $(echo $steps | sed 's/ / | /g') |"
    echo "| --- |$(for _ in $steps; do printf ' --- |'; done)"
    for m in $LABELS; do
        jq -s -r --arg m "$m" --arg steps "$steps" '
          (map({key: (.step | tostring), value: (.values.ce // .values.nll_bound)}) | from_entries) as $b
          | "| \($m) | " + ($steps | split(" ") | map(($b[.] // null) | if . == null then "-" else (. * 1000 | round / 1000 | tostring) end) | join(" | ")) + " |"' \
          "$W/evals_$m.jsonl"
    done
fi
echo
echo "Nats per token. The baseline's NLL is its cross-entropy. The Free Transformer's is its upper bound"
echo "on -log p(x) from K posterior samples (bin/evaluator's nll_bound = iw_bound, chosen in advance, never"
echo "the smaller of it and the prior-sample bound iw_prior: docs/evaluator.md); the CE with Z from the"
echo "encoder alone is not a likelihood (the encoder has read the tokens it predicts) and is shown only as"
echo "the ELBO's first term."
} > "$OUT/$NAME.md"
cat "$OUT/$NAME.md"
