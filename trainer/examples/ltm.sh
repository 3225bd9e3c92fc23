#!/usr/bin/env bash
# make ltm: the Latent-thought LM (seed 003) on its training-compute axis (seed 003 Figure 5):
# LTMs trained at K = 4, 16 and 64 inner steps and the Llama-style baseline of the same decoder,
# each for the SAME number of training FLOPs (seed 003 §2.4's count: 3 forwards per token for
# the baseline, 3 (K + 1) for an LTM), on the same Brown data (the `make brown` setup), so a
# model with more inner steps makes fewer decoder updates. Every model's checkpoints at 1/8,
# 2/8, ..., 8/8 of the budget are evaluated by bin/evaluator on the same held-out batches: the
# baseline's NLL; the LTM's posterior inferred by stochastic VI at its own K, then scored on
# fresh noise draws: the NELBO with its standard error and the importance-weighted bound
# (docs/evaluator.md). The final LTM checkpoints are also evaluated at K = 0, 4, 16, 64
# inference steps (the test-time axis, every K reported, no min).
# Writes results/ltm.json (every number below, as numbers), results/ltm.md (the tables),
# results/ltm.png (bound against training FLOPs and against tokens; the test-time axis) and
# results/ltm_<model>.jsonl (the training metrics the bus carried).
# Knobs (environment), defaults in brackets:
#   LTM_FLOPS [2.5e13] training FLOPs of every model; LTM_STEPS [unset] instead, the same number
#   of decoder updates for every model (the pre-issue-24 recipe: LTM_STEPS=300); LTM_CKPTS [8]
#   checkpoints evaluated per model (at equal intervals); LTM_KS_TRAIN ["4 16 64"] the LTMs' K;
#   LTM_M [8] latent vectors per layer; LTM_WINDOW [32] the LTM's attention window (of T=128;
#   the paper: 256 of 1024); LTM_KS ["0,4,16,64"] test-time steps at the end;
#   LTM_EVAL_BATCHES [4] held-out batches of 8 x 128 tokens; LTM_DRAWS [16] fresh draws per
#   posterior; LTM_IW [8] samples per importance-weighted bound;
#   LTM_DIR [runs/ltm]; LTM_OUT [results]; LTM_MODELS [all: "llama ltm-k4 ltm-k16 ltm-k64"];
#   LTM_THREADS [1] OpenMP threads of the trainer and evaluator (1 on a machine another job
#   shares: the LTM's many small ops lose far more to a descheduled thread than the baseline).
# A finished model is not retrained (--resume) and a finished evaluation not redone, so a
# rerun after an interruption continues.
# Duration with the defaults: 1 h 29 min here (2026-11-26, one thread, the machine shared, load 10-20).
set -euo pipefail
cd "$(dirname "$0")/../.."
W=${LTM_DIR:-runs/ltm}; OUT=${LTM_OUT:-results}
BUDGET=${LTM_FLOPS:-2.5e13}; FIXED_STEPS=${LTM_STEPS:-}; NCK=${LTM_CKPTS:-8}; KS_TRAIN=${LTM_KS_TRAIN:-4 16 64}; M=${LTM_M:-8}; WIN=${LTM_WINDOW:-32}
KS=${LTM_KS:-0,4,16,64}; EB=${LTM_EVAL_BATCHES:-4}; DRAWS=${LTM_DRAWS:-16}; IW=${LTM_IW:-8}
TH=${LTM_THREADS:-1}
MODELS=${LTM_MODELS:-llama $(for k in $KS_TRAIN; do printf 'ltm-k%s ' "$k"; done)}
mkdir -p "$W" "$OUT"; W=$(cd "$W" && pwd)   # absolute: ipc:// endpoints live there
export FT_BUS_PUB=ipc://$W/bus.pub FT_BUS_SUB=ipc://$W/bus.sub
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
run() { printf '$ %s\n' "$*" >&2; "$@"; }
bgrun() { printf '$ %s &\n' "$*" >&2; "$@" & pids+=($!); }
B=16; T=128; EVB=8
DECODER="--seq-len $T --batch $B --d-model 128 --layers 4 --heads 4 --kv-heads 2 --d-ff 384"
LTMF="--latent-vectors $M --window $WIN --fast-lr 0.3 --fast-lr-end 0.34"
VAL_DOCS=25
EVAL="--task val --data $W/data --val-docs $VAL_DOCS --batches $EB --batch $EVB --seq-len $T --draws $DRAWS --iw-samples $IW --threads $TH --no-bus --quiet"
kof() { case $1 in ltm-k*) echo "${1#ltm-k}" ;; *) echo "" ;; esac; }

[ -f data/brown.txt ] || run make data
# 1. a 4096-token byte-level BPE vocabulary learned from Brown; the last 25 documents held out
[ -f "$W/brown4k.ftbpe" ] || run bin/tokenizer train --vocab-size 4096 --out "$W/brown4k.ftbpe" data/brown.txt
[ -d "$W/data" ] || run bin/tokenizer encode --vocab "$W/brown4k.ftbpe" --out "$W/data" data/brown.txt
run bin/tokenizer info "$W/data"

# 2. bus, two loaders serving the training split, a tap recording the metrics
bgrun bin/bus --quiet
for i in 0 1; do bgrun bin/loader --data "$W/data" --val-docs $VAL_DOCS --bind "ipc://$W/loader$i" --name "ltm$i" --quiet; done
bgrun bin/bus tap metrics log/ltm >> "$W/metrics.jsonl"   # appended: a rerun keeps the curves of finished runs
for _ in $(seq 50); do bin/bus send log/ltm log program=ltm line=ping >/dev/null 2>&1; grep -q ping "$W/metrics.jsonl" 2>/dev/null && break; sleep 0.1; done

# 3. the FLOPs of one forward per token of each architecture, from the trainer's own count (a
#    one-step run each: the LTM's forward does not depend on K)
probe() {   # $1 model, rest: flags; prints the forward's FLOPs per token
    [ -s "$W/probe-$1.log" ] || bin/trainer --discover --run "ltm-probe-$1" --run-dir "$W/probe-$1" --model "$1" "${@:2}" \
        --steps 1 --warmup 0 --ckpt-every 0 --threads "$TH" $DECODER 2> "$W/probe-$1.log" >/dev/null
    grep -o "the forward's [0-9.e+]*" "$W/probe-$1.log" | tail -n1 | cut -d' ' -f3
}
FWD_LLAMA=$(probe llama); FWD_LTM=$(probe ltm $LTMF --inner-steps 0)
[ -n "$FWD_LLAMA" ] && [ -n "$FWD_LTM" ] || { echo "ltm.sh: no FLOP count in $W/probe-*.log" >&2; exit 1; }
trf() { local k; k=$(kof "$1"); if [ -z "$k" ]; then awk -v f="$FWD_LLAMA" 'BEGIN{printf "%.10g", 3 * f}'; else awk -v f="$FWD_LTM" -v k="$k" 'BEGIN{printf "%.10g", 3 * (k + 1) * f}'; fi; }
# steps: the budget over (tokens per step x trFLOPs per token), a multiple of the checkpoints'
# count (LTM_STEPS: that, for every model)
steps_of() {
    if [ -n "$FIXED_STEPS" ]; then echo "$FIXED_STEPS"; return; fi
    awk -v c="$BUDGET" -v f="$(trf "$1")" -v n=$((B * T)) -v q="$NCK" 'BEGIN{s = int(c / (n * f) / q + 0.5) * q; if (s < q) s = q; print s}'
}

# 4. train each model (--resume: a finished run is not redone), evaluate its checkpoints
for m in $MODELS; do
    k=$(kof "$m"); S=$(steps_of "$m")
    if [ -n "$k" ]; then model=ltm; extra="$LTMF --inner-steps $k"; evx="--inner-steps-list $k"; else model=llama; extra=""; evx=""; fi
    warm=$(( S / 4 < 50 ? S / 4 : 50 ))
    if [ ! -d "$W/$m/ckpt-$(printf %08d "$S")" ]; then
        start=$(date +%s)
        run bin/trainer --discover --run "ltm-$m" --run-dir "$W/$m" --model "$model" $extra --steps "$S" $DECODER \
            --lr 3e-3 --min-lr 3e-4 --warmup "$warm" --ckpt-every $((S / NCK)) --keep 0 --log-every 25 --threads "$TH" --resume \
            2> >(tee -a "$W/$m.log" >&2)
        echo $(( $(date +%s) - start )) > "$W/$m.train_s"
    fi
    if [ ! -s "$W/evals_$m.jsonl" ]; then
        start=$(date +%s)
        run bin/evaluator --run "ltm-$m" --run-dir "$W/$m" $EVAL $evx --once --all --out "$W/evals_$m.jsonl.part" >/dev/null
        mv "$W/evals_$m.jsonl.part" "$W/evals_$m.jsonl"
        echo $(( $(date +%s) - start )) > "$W/$m.eval_s"
    fi
    if [ -n "$k" ] && [ ! -s "$W/klist_$m.json" ]; then
        run bin/evaluator --run "ltm-$m" --run-dir "$W/$m" $EVAL --inner-steps-list "$KS" --once > "$W/klist_$m.json.part"
        mv "$W/klist_$m.json.part" "$W/klist_$m.json"
    fi
done
sleep 0.5

# 5. results/ltm.json: every number, as numbers
for m in $MODELS; do grep "\"metrics/ltm-$m\"" "$W/metrics.jsonl" > "$OUT/ltm_$m.jsonl" || true; done
params() { grep -o '[0-9][0-9]* parameters' "$W/$1.log" | tail -n1 | cut -d' ' -f1; }
{
    for m in $MODELS; do
        k=$(kof "$m")
        jq -n --arg name "$m" --argjson K "${k:-null}" --argjson steps "$(steps_of "$m")" --argjson trf "$(trf "$m")" \
              --argjson params "$(params "$m")" --argjson train_s "$(cat "$W/$m.train_s" 2>/dev/null || echo null)" \
              --argjson eval_s "$(cat "$W/$m.eval_s" 2>/dev/null || echo null)" --argjson tpstep $((B * T)) \
              --slurpfile ev "$W/evals_$m.jsonl" --slurpfile kl <(cat "$W/klist_$m.json" 2>/dev/null || true) '
            {key: $name, value: {K: $K, steps: $steps, tr_flops_per_token: $trf, parameters: $params,
              train_s: $train_s, eval_s: $eval_s,
              evals: [$ev[] | (.values | del(.eval_s)) + {step, train_tokens: (.step * $tpstep), train_flops: (.step * $tpstep * $trf)}]
                     | sort_by(.step),
              test_time_steps: (if ($kl | length) > 0 then $kl[0].values | del(.eval_s) else null end)}}'
    done
} | jq -s --argjson budget "$([ -n "$FIXED_STEPS" ] && echo null || echo "$BUDGET")" --arg ks "$KS" --argjson m "$M" --argjson win "$WIN" --argjson eb "$EB" \
          --argjson draws "$DRAWS" --argjson iw "$IW" --argjson fl "$FWD_LLAMA" --argjson ft "$FWD_LTM" --arg date "$(date -u +%F)" '
    {setup: {train_flops_budget: $budget, seq_len: 128, batch: 16, d_model: 128, layers: 4, heads: 4, kv_heads: 2, d_ff: 384,
             vocab: 4096, m: $m, window: $win, test_time_ks: ($ks | split(",") | map(tonumber)), eval_batches: $eb,
             eval_batch: 8, draws: $draws, iw_samples: $iw, forward_flops_per_token: {llama: $fl, ltm: $ft},
             command: "make ltm (trainer/examples/ltm.sh)", date: $date},
     models: from_entries}' > "$OUT/ltm.json"

# 6. the figure
if [ -n "$FIXED_STEPS" ]; then SCALE="$FIXED_STEPS decoder updates"; else SCALE="$BUDGET FLOPs (seed 003 count)"; fi
for m in $MODELS; do
    jq -r --arg m "$m" '.models[$m] as $x | $x.evals[]
        | "\(.train_flops) \(.train_tokens) \(.ce // .elbo) \(.elbo_se // 0) \(.nll_bound // .ce) \(.nll_bound_se // 0)"' "$OUT/ltm.json" > "$W/curve_$m.dat"
    k=$(kof "$m")
    [ -n "$k" ] && jq -r --arg m "$m" --arg ks "$KS" '.models[$m].test_time_steps as $v | ($ks | split(","))[]
        | "\(.) \($v["elbo_k\(.)"]) \($v["elbo_se_k\(.)"]) \($v["iw_k\(.)"]) \($v["iw_se_k\(.)"])"' "$OUT/ltm.json" > "$W/ktest_$m.dat"
done
plots() {   # $1: x column; prints gnuplot plot clauses: the baseline's NLL, each LTM's NELBO
    local out=() m
    for m in $MODELS; do
        if [ -z "$(kof "$m")" ]; then
            out+=("'$W/curve_$m.dat' using $1:3 with linespoints lw 2 pt 7 dt 2 lc rgb 'black' title 'baseline NLL'")
        else
            out+=("'$W/curve_$m.dat' using $1:3:4 with yerrorlines lw 2 pt 7 title 'LTM K=$(kof "$m") NELBO (+-SE)'")
        fi
    done
    (IFS=,; echo "${out[*]}")
}
ktest=()
for m in $MODELS; do [ -s "$W/ktest_$m.dat" ] && ktest+=("'$W/ktest_$m.dat' using (\$0):2:3:xtic(1) with yerrorlines lw 2 pt 7 title 'trained at K=$(kof "$m"): NELBO'"); done
[ ${#ktest[@]} -gt 0 ] || ktest=("0 notitle")
gnuplot <<GP
set terminal pngcairo size 1500,480 noenhanced
set output '$OUT/ltm.png'
set multiplot layout 1,3 title 'Brown (BPE 4096), d=128, 4 layers, T=128; every model trained for $SCALE; held-out bound, nats/token'
set grid
set key top right
set ylabel 'nats per token (upper bound on the NLL)'
set logscale xy
set format x '%.0e'
set title 'against training FLOPs'
set xlabel 'training FLOPs'
plot $(plots 1)
set title 'against training tokens'
set xlabel 'training tokens'
set format x '%.0e'
plot $(plots 2)
unset logscale xy
set title 'final checkpoints: test-time inference steps'
set xlabel 'inference steps K at evaluation'
set logscale y
plot $(IFS=,; echo "${ktest[*]}")
unset multiplot
GP

# 7. results/ltm.md: the tables, numbers for humans (CE 4 decimals, ppl 4 significant digits)
{
if [ -n "$FIXED_STEPS" ]; then
    echo "Latent-thought LM against the baseline at equal decoder updates ($FIXED_STEPS each), on Brown (trainer/examples/ltm.sh,"
else
    echo "Latent-thought LM against the baseline at equal training compute, on Brown (\`make ltm\`, trainer/examples/ltm.sh,"
fi
echo "$(date -u +%F); every number from results/ltm.json). BPE vocabulary of 4096 learned from Brown, the last $VAL_DOCS"
echo "documents held out. Every model: decoder d=128, 4 layers, 4/2 heads, SwiGLU 384, T=128, B=16, AdamW 3e-3 cosine to"
echo "3e-4, trained for $SCALE; FLOPs as seed 003 §2.4 counts them (3 forwards per token for the baseline, 3 (K + 1)"
echo "for an LTM). LTM: m=$M latent vectors per layer, sliding window $WIN, K inner steps of stochastic VI per batch (a fresh"
echo "noise draw per step; fast rate 0.3 rising to 0.34, a cosine to a tenth within each batch). Evaluation: $EB held-out"
echo "batches of 8 x 128 tokens, the same for every model and checkpoint; each LTM row's posterior inferred by K steps of"
echo "stochastic VI (K = the model's training K), then scored on $DRAWS fresh noise draws: the NELBO (an upper bound on"
echo "the NLL) with the standard error of its Monte Carlo estimate, and the importance-weighted bound with $IW samples"
echo "(tighter, still a bound; ppl from it)."
echo
echo "| model | parameters | trFLOPs/token | decoder updates | train time | val bound at 1/4, 1/2, 1 of the training (nats/token) | final NELBO +- SE | final IWAE bound +- SE | final ppl (IWAE) | final bits per byte |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
jq -r '.models | to_entries[] | .value as $v | ($v.evals | length) as $n
    | [(if $v.K == null then "baseline" else "LTM K=\($v.K)" end), $v.parameters, $v.tr_flops_per_token, $v.steps, ($v.train_s // "-"),
       ($v.evals[([($n / 4 | floor) - 1, 0] | max)] | .nll_bound // .ce), ($v.evals[([($n / 2 | floor) - 1, 0] | max)] | .nll_bound // .ce), ($v.evals[-1] | .nll_bound // .ce),
       ($v.evals[-1] | .elbo // .ce), ($v.evals[-1].elbo_se // "-"), ($v.evals[-1] | .nll_bound // .ce), ($v.evals[-1].nll_bound_se // "-"),
       $v.evals[-1].ppl, $v.evals[-1].bpb] | @tsv' "$OUT/ltm.json" |
awk -F'\t' '{ se = ($10 == "-") ? "(NLL)" : sprintf("+- %.2g", $10); se2 = ($12 == "-") ? "(NLL)" : sprintf("+- %.2g", $12);
              printf "| %s | %d | %.4g | %d | %s s | %.4f, %.4f, %.4f | %.4f %s | %.4f %s | %.4g | %.4f |\n", $1, $2, $3, $4, $5, $6, $7, $8, $9, se, $11, se2, $13, $14 }'
echo
echo "Every checkpoint (tokens and FLOPs of training so far; LTM: NELBO +- SE / IWAE bound +- SE; baseline: NLL):"
echo
echo "| model | step | training tokens | training FLOPs | NELBO or NLL | SE | IWAE bound | SE | CE term | KL term |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
jq -r '.models | to_entries[] | .value as $v | $v.evals[]
    | [(if $v.K == null then "baseline" else "LTM K=\($v.K)" end), .step, .train_tokens, .train_flops, (.elbo // .ce), (.elbo_se // "-"),
       (.nll_bound // "-"), (.nll_bound_se // "-"), (if $v.K == null then .ce else .["ce_k\($v.K)"] end),
       (if $v.K == null then "-" else .["kl_k\($v.K)"] end)] | @tsv' "$OUT/ltm.json" |
awk -F'\t' 'function f(x, fmt) { return x == "-" ? "-" : sprintf(fmt, x) }
            { printf "| %s | %d | %d | %.3e | %.4f | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, f($6, "%.2g"), f($7, "%.4f"), f($8, "%.2g"), f($9, "%.4f"), f($10, "%.4f") }'
echo
echo "Final LTM checkpoints at other numbers of inference steps (each K its own inference from the same start; every K"
echo "reported, none selected):"
echo
echo "| model | K at evaluation | NELBO +- SE | CE term | KL term | IWAE bound +- SE | ppl (IWAE) |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
jq -r --arg ks "$KS" '.models | to_entries[] | .value as $v | select($v.test_time_steps != null) | ($ks | split(","))[] as $k
    | $v.test_time_steps as $t
    | ["LTM K=\($v.K)", $k, $t["elbo_k\($k)"], $t["elbo_se_k\($k)"], $t["ce_k\($k)"], $t["kl_k\($k)"], $t["iw_k\($k)"], $t["iw_se_k\($k)"], $t["ppl_k\($k)"]] | @tsv' "$OUT/ltm.json" |
awk -F'\t' '{ printf "| %s | %s | %.4f +- %.2g | %.4f | %.4f | %.4f +- %.2g | %.4g |\n", $1, $2, $3, $4, $5, $6, $7, $8, $9 }'
echo
echo "Nats per token. The baseline's number is its NLL (cross-entropy). An LTM's are upper bounds on its NLL; SE is the"
echo "standard error of the Monte Carlo estimate over the fresh noise draws (the held-out tokens are fixed), not of the"
echo "data (standard errors to 2 significant digits). Times are wall-clock on a 2-core machine shared with other jobs (one"
echo "thread each, load 10-20 while these ran), a rough guide only."
} > "$OUT/ltm.md"
cat "$OUT/ltm.md"
