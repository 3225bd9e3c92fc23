#!/usr/bin/env bash
# evaluator/plot.sh: draws a run's training loss and evaluation curves into a PNG (gnuplot).
#
#   bin/bus tap metrics eval > events.jsonl          # while the run trains (or any tap log)
#   evaluator/plot.sh --out run.png [--run NAME] [--metrics events.jsonl] [--evals results.jsonl]
#
# --metrics: JSON lines with "type":"metrics" (bin/bus tap output); their values.loss is the
#   training loss. --evals: the evaluator's --out file (or a tap log with "type":"eval" lines;
#   both carry run, task, step, values). Both may be given several times, or be the same file.
# Panel 1, nats per token against the step: the training loss and every evaluation value
# among ce, ce_enc, kl, elbo, iw_bound, ce_prior. Panel 2 (when there are any), accuracies:
# acc_completion, acc_char, acc, em. A series is named "<task>:<value>".
set -euo pipefail
usage() { awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; }  # the comment above
out="" run="" metrics=() evals=()
while [ $# -gt 0 ]; do
    case "$1" in
        --out) out=${2:?--out needs a file}; shift 2;;
        --run) run=${2:?--run needs a name}; shift 2;;
        --metrics) metrics+=("${2:?--metrics needs a file}"); shift 2;;
        --evals) evals+=("${2:?--evals needs a file}"); shift 2;;
        -h|--help) usage; exit 0;;
        *) echo "plot.sh: unknown argument '$1' (see --help)" >&2; exit 2;;
    esac
done
[ -n "$out" ] || { echo "plot.sh: needs --out FILE.png (see --help)" >&2; exit 2; }
[ ${#metrics[@]} -gt 0 ] || [ ${#evals[@]} -gt 0 ] || { echo "plot.sh: needs --metrics and/or --evals" >&2; exit 2; }
for f in "${metrics[@]}" "${evals[@]}"; do [ -r "$f" ] || { echo "plot.sh: cannot read $f" >&2; exit 1; }; done
command -v gnuplot >/dev/null || { echo "plot.sh: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 1; }
command -v jq >/dev/null || { echo "plot.sh: jq not found (apt-get install jq)" >&2; exit 1; }

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# lines that are not JSON (a torn last line) are skipped: jq -R + fromjson?
sel='fromjson? | select(type == "object") | select($run == "" or .run == $run)'
if [ ${#metrics[@]} -gt 0 ]; then
    cat "${metrics[@]}" | jq -R -r --arg run "$run" "$sel"' | select(.type == "metrics" and (.values.loss | type) == "number") | "\(.step) \(.values.loss)"' \
        | sort -n -k1,1 > "$tmp/train_loss.dat"
fi
if [ ${#evals[@]} -gt 0 ]; then
    cat "${evals[@]}" | jq -R -r --arg run "$run" "$sel"' | select(.task and (.type == null or .type == "eval")) | .task as $t | .step as $s
        | .values | to_entries[] | select((.value | type) == "number")
        | select(.key | IN("ce","ce_enc","kl","elbo","iw_bound","ce_prior","acc_completion","acc_char","acc","em"))
        | "\($t):\(.key) \($s) \(.value)"' \
        | sort -k1,1 -k2,2n | awk -v d="$tmp" '{ f = $1; gsub(/[^A-Za-z0-9_:.-]/, "_", f); print $2, $3 > (d "/eval_" f ".dat") }'
fi
nats=() accs=()
[ -s "$tmp/train_loss.dat" ] && nats+=("'$tmp/train_loss.dat' using 1:2 with lines lw 1 lc rgb '#999999' title 'train loss'")
for f in "$tmp"/eval_*.dat; do
    [ -e "$f" ] || continue
    name=$(basename "$f" .dat); name=${name#eval_}
    spec="'$f' using 1:2 with linespoints pt 7 ps 0.6 title '$name'"
    case "$name" in *:acc*|*:em) accs+=("$spec");; *) nats+=("$spec");; esac
done
[ ${#nats[@]} -gt 0 ] || [ ${#accs[@]} -gt 0 ] || { echo "plot.sh: no training loss or evaluation values found${run:+ for run $run}" >&2; exit 1; }
join() { local IFS=,; echo "$*"; }
term=png; gnuplot -e 'set terminal pngcairo' >/dev/null 2>&1 && term=pngcairo
panels=0; [ ${#nats[@]} -gt 0 ] && panels=$((panels+1)); [ ${#accs[@]} -gt 0 ] && panels=$((panels+1))
{
    echo "set terminal $term size 1000,$((360 * panels + 60)) noenhanced"
    echo "set output '$out'"
    echo "set key outside right; set grid; set xlabel 'step'; set xrange [0:*]"
    [ $panels = 2 ] && echo "set multiplot layout 2,1 title 'run ${run:-all}'" || echo "set title 'run ${run:-all}'"
    if [ ${#nats[@]} -gt 0 ]; then echo "set ylabel 'nats per token'"; echo "plot $(join "${nats[@]}")"; fi
    if [ ${#accs[@]} -gt 0 ]; then echo "set ylabel 'accuracy'; set yrange [0:1.05]"; echo "plot $(join "${accs[@]}")"; fi
    [ $panels = 2 ] && echo "unset multiplot"
} > "$tmp/plot.gp"
gnuplot "$tmp/plot.gp"
echo "plot.sh: wrote $out (${#nats[@]} loss series, ${#accs[@]} accuracy series)" >&2
