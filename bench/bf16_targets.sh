#!/usr/bin/env bash
# Issue 26's targets on this CPU, read from the benches' own JSON: which apply here, each
# measured value, met or not, and which cannot be measured on this CPU (and on what they can).
#
#   bash bench/bf16_targets.sh [--run] [DIR]
#   bash bench/bf16_targets.sh --train F --generate F [--eval F] [--flags "CPU FLAGS"] [--out F]
#
# DIR (default $BENCH_OUT, else build/bench-out) holds train.json, generate.json and eval.json
# as bench/bench_train.sh, bench/bench_generate.sh and bench/bench_eval.sh write them (`make
# bench` leaves them there); the table goes to DIR/bf16_targets.json too. --run runs those three
# first, into DIR (about 30 minutes on 2 cores with their default repeats; their environment
# variables still apply). --train/--generate/--eval read single files instead, one run's, and
# then nothing from DIR (--eval is optional: runs older than bench_eval.sh have none), and
# --flags judges them by another machine's CPU flags (its /proc/cpuinfo "flags" line) instead
# of this one's: bench/h100/ and
# bench/h200/ hold two AMX hosts' runs. --out F writes the JSON there. Exits 0 when every target
# measured by the run is met, 1 when one is not, 2 when an input is missing or malformed.
#
# The CPU's kind decides which targets apply (issue 26, "Evidence and targets"):
#   AMX (amx_bf16 among the flags and the bench ran at x86-64-v4-amx): M bf16 >= 2.5x our fp32,
#     >= 2x PyTorch's best mode, >= 0.5 of the bf16 product limit at M's shapes;
#   AVX512_BF16 without AMX (Zen 4/5): bf16 >= 0.85 of the bf16 limit at M, >= 0.8 at S;
#   no native bf16 (Zen 3 and other AVX2 CPUs): the bf16 step at most 5% slower than fp32 (the
#     paired median of `train_step --versus bf16`, bench_train.sh's bf16_over_fp32_interleaved);
#   every kind: batch-1 generation in bf16 >= 3x PyTorch's best mode (baseline and Free
#     Transformer); with native bf16 also >= 1.5x our own fp32 generation (the paired median of
#     `generate --versus bf16`, bench_generate.sh's bf16_over_ours_fp32_interleaved, where the
#     file has one; else, for runs before 2026-12-07, the ratio of the two medians).
# A target this CPU could measure at its best level but the run did not (FT_CPU_ISA pinned it
# lower, or the kernel refused AMX's permission) says so; an AMX CPU run at x86-64-v4-bf16 is
# judged by the AVX512_BF16 targets. The evaluator's forward (bench_eval.sh) has no number of its
# own in the issue ("the same for the evaluator"): it is listed under the training step's rule
# where one applies (no native bf16).
set -u
run=0 flags= DIR= OUTJ=
declare -A IN=()
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;;
        --run) run=1 ;;
        --flags) [ $# -ge 2 ] || { echo "bf16_targets: --flags needs a value" >&2; exit 2; }; flags=$2; shift ;;
        --train|--generate|--eval|--out)
            [ $# -ge 2 ] || { echo "bf16_targets: $1 needs a file" >&2; exit 2; }
            if [ "$1" = --out ]; then OUTJ=$(realpath -m -- "$2"); else IN[${1#--}]=$(realpath -m -- "$2"); fi; shift ;;
        -*) echo "bf16_targets: unknown flag $1 (try --help)" >&2; exit 2 ;;
        *) [ -z "$DIR" ] || { echo "bf16_targets: one DIR only ($DIR, $1)" >&2; exit 2; }; DIR=$(realpath -m -- "$1") ;;
    esac
    shift
done
[ -n "$DIR" ] || DIR=$(realpath -m -- "${BENCH_OUT:-$(dirname "$0")/../build/bench-out}")
cd "$(dirname "$0")/.."
if [ "$run" = 1 ]; then
    mkdir -p "$DIR" || exit 2
    for b in train generate eval; do
        BENCH_OUT=$DIR bash "bench/bench_$b.sh" || { echo "bf16_targets: bench/bench_$b.sh failed" >&2; exit 2; }
    done
fi
IN_GIVEN=${IN[train]:-}${IN[generate]:-}${IN[eval]:-}
if [ -n "$IN_GIVEN" ] && { [ -z "${IN[train]:-}" ] || [ -z "${IN[generate]:-}" ]; }; then
    echo "bf16_targets: --train and --generate go together (one run's files), --eval with them" >&2; exit 2
fi
for f in train generate eval; do
    file=${IN[$f]:-$DIR/$f.json}
    # single files name one run: no eval.json from DIR beside another run's train and generate
    [ -n "$IN_GIVEN" ] && [ -z "${IN[$f]:-}" ] && file=
    if [ ! -s "$file" ]; then
        # the evaluator's rows are the issue's "the same for the evaluator", no target of their own:
        # an older run without bench_eval.sh is read without them
        [ "$f" = eval ] && [ -z "${IN[eval]:-}" ] && { IN[eval]=; continue; }
        echo "bf16_targets: $file missing (run bench/bench_$f.sh, or this with --run)" >&2; exit 2
    fi
    jq -e ".$f" "$file" > /dev/null 2>&1 || { echo "bf16_targets: $file is not a bench_$f.sh output (no .$f in it)" >&2; exit 2; }
    IN[$f]=$file
done
[ -n "$flags" ] || flags=$(grep -m1 '^flags' /proc/cpuinfo)
amx=0; avx512bf16=0
grep -qw amx_bf16 <<< "$flags" && amx=1
grep -qw avx512_bf16 <<< "$flags" && avx512bf16=1
level=$(jq -r '.train.M.isa_level // "unknown"' "${IN[train]}")
if [ "$amx" = 1 ] && [ "$level" = x86-64-v4-amx ]; then kind=amx
elif [ "$avx512bf16" = 1 ] && [[ "$level" == x86-64-v4-bf16 || "$level" == x86-64-v4-amx ]]; then kind=avx512bf16
elif [ "$avx512bf16" = 1 ]; then kind=pinned   # native bf16 present, the bench ran below it
else kind=emulated; fi
cpu=$(jq -r '.train.M.cpu_model // empty' "${IN[train]}")
# the table's JSON: --out, else beside the inputs when they came as a DIR
[ -n "$OUTJ" ] || [ -n "$IN_GIVEN" ] || OUTJ=$DIR/bf16_targets.json
TMPJ=$(mktemp /tmp/bf16_targets.XXXXXX)
trap 'rm -f "$TMPJ"' EXIT
echo "bf16 targets: ${cpu:-unknown CPU}; amx_bf16 $amx, avx512_bf16 $avx512bf16; the bench's level $level -> kind $kind"
echo "  from ${IN[train]}, ${IN[generate]}, ${IN[eval]:-(no evaluator run)}"
[ "$amx" = 1 ] && [ "$kind" != amx ] && echo "  (an AMX CPU, but the bench ran at $level: its AMX targets are not measured by this run)"

jq -n --arg kind "$kind" --arg cpu "$cpu" --arg level "$level" --argjson amx "$amx" --argjson avx "$avx512bf16" \
   --slurpfile tr "${IN[train]}" --slurpfile ge "${IN[generate]}" --slurpfile ev "${IN[eval]:-/dev/null}" '
  $tr[0].train as $t | $ge[0].generate as $g | ($ev[0].eval // null) as $e | ($e != null) as $hasE |
  # applies: this run measured it; a row that does not apply is one this CPU could measure at
  # its own best level (could: the run was pinned below it) or one it cannot
  def row(name; applies; could; value; op; target; where):
    {target: name, value: (if applies then value else null end), rule: (op + " " + (target|tostring)), needs: where,
     status: (if (applies | not) and could then "not measured by this run (level " + $level + ")"
              elif (applies | not) then "not measurable on this CPU"
              elif value == null then "missing from the bench output"
              elif (op == ">=" and value >= target) or (op == "<=" and value <= target) then "met"
              else "not met" end)};
  def r3: if . == null then null else (. * 1000 | round / 1000) end;
  def best_pt(c): [c.pytorch_tok_s, c.pytorch_bf16_tok_s] | map(select(. != null)) | max;
  ($kind == "amx") as $A | ($kind == "avx512bf16") as $B | ($kind == "emulated") as $Z |
  ($A or $B) as $native | ($amx == 1) as $cA | ($avx == 1) as $cB | ($avx == 0) as $cZ |
  [ row("M: bf16 step over our fp32 step (AMX)"; $A; $cA; ($t.M.ours_bf16_tok_s / $t.M.ours_tok_s | r3); ">="; 2.5; "AMX"),
    row("M: our bf16 over PyTorch best mode (AMX)"; $A; $cA; ($t.M.ours_bf16_tok_s / best_pt($t.M) | r3); ">="; 2; "AMX"),
    row("M: bf16 step of the AMX bf16 product limit"; $A; $cA; ($t.M.ours_bf16_fraction_of_limit_bf16 | r3); ">="; 0.5; "AMX"),
    row("M: bf16 step of the bf16 product limit (AVX512_BF16)"; $B; $cB; ($t.M.ours_bf16_fraction_of_limit_bf16 | r3); ">="; 0.85; "AVX512_BF16 without AMX"),
    row("S: bf16 step of the bf16 product limit (AVX512_BF16)"; $B; $cB; ($t.S.ours_bf16_fraction_of_limit_bf16 | r3); ">="; 0.8; "AVX512_BF16 without AMX"),
    row("S: bf16 step / fp32 step, paired (no native bf16)"; $Z; $cZ; ($t.S.bf16_over_fp32_interleaved.median | r3); "<="; 1.05; "no native bf16"),
    row("M: bf16 step / fp32 step, paired (no native bf16)"; $Z; $cZ; ($t.M.bf16_over_fp32_interleaved.median | r3); "<="; 1.05; "no native bf16"),
    row("generation, baseline: bf16 over PyTorch best mode"; true; true; ($g.baseline.bf16_over_best_pytorch | r3); ">="; 3; "any"),
    row("generation, Free Transformer: bf16 over PyTorch best mode"; true; true; ($g.free.bf16_over_best_pytorch | r3); ">="; 3; "any"),
    row("generation, baseline: bf16 over our fp32 (native bf16)"; $native; $cB; (($g.baseline.bf16_over_ours_fp32_interleaved.median // $g.baseline.bf16_over_ours_fp32) | r3); ">="; 1.5; "native bf16"),
    row("generation, Free Transformer: bf16 over our fp32 (native bf16)"; $native; $cB; (($g.free.bf16_over_ours_fp32_interleaved.median // $g.free.bf16_over_ours_fp32) | r3); ">="; 1.5; "native bf16") ]
  + if ($hasE | not) then [] else [ row("evaluator S: bf16 forward / fp32 forward, paired (the step'"'"'s rule)"; $Z; $cZ; ($e.S.bf16_over_fp32_interleaved.median | r3); "<="; 1.05; "no native bf16"),
      row("evaluator M: bf16 forward / fp32 forward, paired (the step'"'"'s rule)"; $Z; $cZ; ($e.M.bf16_over_fp32_interleaved.median | r3); "<="; 1.05; "no native bf16") ] end
  | {bf16_targets: {cpu_model: $cpu, kind: $kind, level: $level, rows: .,
                    met: (map(select(.status == "met")) | length),
                    not_met: (map(select(.status == "not met")) | length),
                    not_measurable: (map(select(.status == "not measurable on this CPU")) | length),
                    not_measured: (map(select(.status | startswith("not measured by"))) | length),
                    missing: (map(select(.status == "missing from the bench output")) | length)}}' \
   > "$TMPJ" || { echo "bf16_targets: the bench output lacks a field this reads" >&2; exit 2; }
jq -r '.bf16_targets.rows[] | [.target, (.value // "-" | tostring), .rule, .status, .needs] | @tsv' "$TMPJ" |
    awk -F'\t' 'BEGIN {printf "%-64s %8s %8s  %s\n", "target", "value", "rule", "status"}
                {printf "%-64s %8s %8s  %s%s\n", $1, $2, $3, $4, ($4 ~ /not measurable/ ? " (needs " $5 ")" : "")}'
jq -r '.bf16_targets | "\(.met) met, \(.not_met) not met, \(.missing) missing, \(.not_measured) not measured at this level, \(.not_measurable) not measurable on this CPU"' "$TMPJ"
if [ -n "$OUTJ" ]; then cp "$TMPJ" "$OUTJ.tmp" && mv "$OUTJ.tmp" "$OUTJ" && echo "(written to $OUTJ)"; fi
[ "$(jq .bf16_targets.missing "$TMPJ")" = 0 ] || exit 2
[ "$(jq .bf16_targets.not_met "$TMPJ")" = 0 ]
