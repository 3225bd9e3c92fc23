#!/usr/bin/env bash
# evaluator/paper_table.sh: seed 000's Tables 1-2 for your checkpoints: a baseline and Free
# Transformers (one per kappa) evaluated on a list of tasks, printed as the paper prints them
# (a metric per task, each Free Transformer's relative change against the baseline).
#
#   evaluator/paper_table.sh --tasks TASKS --out RESULTS.jsonl [--live [--every S]] [--step N]
#                            [--eval-opts "OPTS"] LABEL=RUN_DIR...
#   evaluator/paper_table.sh --print --tasks TASKS [--step N] [LABEL=RUN_DIR...] RESULTS.jsonl...
#
# The first LABEL=RUN_DIR is the baseline, the others the Free Transformers (LABEL heads the
# column, e.g. "1/2 bit"; a Free Transformer's kappa is read from its checkpoint and shown).
# The run name of each is its directory's base name. Without --live: bin/evaluator --once on
# the newest checkpoint of every run for every task (results already in RESULTS are not
# redone), then the table. --live: one evaluator per run and task follows the checkpoints as
# they are written (bus announcements, directory rescans), and the table is printed again
# whenever a result arrives, until interrupted (the evaluators stop with it); an evaluator that
# stops on its own (a missing task file, a sandbox this machine cannot give) is named once with
# its exit status, and when none is left the table exits 1. A run's column
# shows its newest step that has every task (--step N: that step), so a live table compares
# complete evaluations only. --eval-opts go to every evaluator (e.g. "--device cuda --jobs 8").
#
# TASKS: one row per line, "TAG METRIC TASK [evaluator options...]"; "[Section title]" lines
# and "#" comments as in evaluator/tasks/paper_table.txt:
#   [Generative code/math]
#   human_eval_plu pass@1 code --file HumanEvalPlus.jsonl --vocab gpt2
#   mmlu macro_avg/acc_char mc --file mmlu.jsonl --vocab gpt2
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${FT_EVALUATOR:-$here/../bin/evaluator}
tasks="" out="" live=0 every=10 step="" print=0 eval_opts=""
runs=() files=()
usage() { awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; }  # the comment above
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0;;
        --tasks) tasks=${2:?--tasks needs a file}; shift 2;;
        --out) out=${2:?--out needs a file}; shift 2;;
        --live) live=1; shift;;
        --every) every=${2:?--every needs seconds}; shift 2;;
        --step) step=${2:?--step needs a number}; shift 2;;
        --print) print=1; shift;;
        --eval-opts) eval_opts=${2:?--eval-opts needs options}; shift 2;;
        -*) echo "paper_table.sh: unknown option $1 (see --help)" >&2; exit 2;;
        *=*) runs+=("$1"); shift;;
        *) files+=("$1"); shift;;
    esac
done
command -v jq >/dev/null || { echo "paper_table.sh: jq not found" >&2; exit 1; }
[ -n "$tasks" ] && [ -f "$tasks" ] || { echo "paper_table.sh: --tasks FILE is needed (see --help)" >&2; exit 2; }
if [ $print = 0 ]; then
    [ -n "$out" ] || { echo "paper_table.sh: --out RESULTS.jsonl is needed" >&2; exit 2; }
    [ ${#runs[@]} -ge 1 ] || { echo "paper_table.sh: name the runs as LABEL=RUN_DIR, the baseline first" >&2; exit 2; }
    files=("$out")
fi
[ ${#files[@]} -ge 1 ] || { echo "paper_table.sh: no results file" >&2; exit 2; }

# rows of the task file: "S\ttitle" for a section, "R\ttag\tmetric\ttask\toptions" for a row
rows=$(awk '/^[ \t]*(#|$)/ {next}
            /^[ \t]*\[/ {t = $0; sub(/^[ \t]*\[/, "", t); sub(/\][ \t]*$/, "", t); print "S\t" t; next}
            NF < 3 {printf "paper_table.sh: %s:%d: want TAG METRIC TASK [options]\n", FILENAME, NR > "/dev/stderr"; bad = 1; next}
            {o = ""; for (i = 4; i <= NF; i++) o = o (i > 4 ? " " : "") $i; print "R\t" $1 "\t" $2 "\t" $3 "\t" o}
            END {exit bad}' "$tasks") || exit 2
[ -n "$(printf '%s\n' "$rows" | grep '^R')" ] || { echo "paper_table.sh: $tasks has no task rows" >&2; exit 2; }

run_name() { basename "${1#*=}" | tr -c 'A-Za-z0-9_.\n-' '_'; }
label() { echo "${1%%=*}"; }
run_dir() { echo "${1#*=}"; }

# kappa of a run's newest checkpoint in bits ("" for the baseline or none yet)
kappa_bits() {
    local c; c=$(ls -d "$1"/ckpt-[0-9]* 2>/dev/null | grep -v '\.tmp' | sort | tail -1)
    [ -n "$c" ] && [ -f "$c/config.json" ] || return 0
    jq -r 'if .ft_model_kind == "free" and .ft_kappa_nats then (.ft_kappa_nats / (2 | log) * 1000 | round / 1000 | tostring) else empty end' "$c/config.json" 2>/dev/null
}

print_table() {
    local spec names="" labels="" kappas="" tags
    for spec in "${runs[@]}"; do
        names+="$(run_name "$spec")"$'\n'; labels+="$(label "$spec")"$'\n'; kappas+="$(kappa_bits "$(run_dir "$spec")")"$'\n'
    done
    if [ ${#runs[@]} = 0 ]; then  # --print without LABEL=RUN_DIR: every run in the files, as they come
        names=$(cat "${files[@]}" | jq -R -r 'fromjson? | .run // empty' | awk '!seen[$0]++')$'\n'
        labels=$names
    fi
    cat "${files[@]}" | jq -R -r 'fromjson? | select(type == "object" and .values != null)' |
    jq -s -r --arg rows "$rows" --arg names "$names" --arg labels "$labels" --arg kappas "$kappas" --arg step "$step" '
        def lines: split("\n") | map(select(length > 0));
        ($names | split("\n") | .[:-1]) as $runs | ($labels | split("\n")) as $labs | ($kappas | split("\n")) as $kap |
        ($rows | lines | map(split("\t"))) as $rows |
        ($rows | map(select(.[0] == "R") | .[1])) as $tags |
        def fmt: if . == null then "-" else (. * 1000 | round / 1000 | tostring |
                 if test("\\.") then (. + "000" | capture("^(?<a>-?[0-9]+\\.[0-9]{3})").a) else . + ".000" end) end;
        def rel($v; $b): if $v == null or $b == null or $b == 0 then "-"
                         else (($v - $b) / ($b | fabs) * 100) as $r |
                              (($r | fabs) * 100 | round / 100 | tostring | if test("\\.") then (. + "00" | capture("^(?<a>[0-9]+\\.[0-9]{2})").a) else . + ".00" end) as $s |
                              (if $r < 0 then "-" else "+" end) + $s + "%" end;
        # per run: the step shown (--step, or the newest with every task) and the value of a row
        (. as $all | reduce range(0; $runs | length) as $i ({};
            ($runs[$i]) as $r |
            ($all | map(select(.run == $r and (.task as $t | $tags | index($t))))) as $mine |
            ($mine | group_by(.step) | map({step: .[0].step, n: (map(.task) | unique | length)})
                   | map(select(.n == ($tags | length))) | map(.step)) as $complete |
            (if $step != "" then ($step | tonumber) elif ($complete | length) > 0 then ($complete | max)
             else (($mine | map(.step) | max) // null) end) as $s |
            .[$r] = {step: $s, rec: ($mine | map(select(.step == $s)) | map({(.task): .values}) | add // {})})) as $by |
        ($runs | length) as $n |
        "| | " + ($labs[0] // $runs[0]) + " |" +
            ([range(1; $n) | " " + $labs[.] + (if ($kap[.] // "") != "" then " (kappa " + $kap[.] + " bit)" else "" end) + " | |"] | join("")),
        "|---|---:|" + ([range(1; $n) | "---:|---:|"] | join("")),
        "| step | " + ($by[$runs[0]].step | tostring) + " |" + ([range(1; $n) | " " + ($by[$runs[.]].step | tostring) + " | |"] | join("")),
        ($rows[] |
            if .[0] == "S" then "| **" + .[1] + "** |" + ([range(0; 2 * $n - 1) | " |"] | join(""))
            else (.[1]) as $tag | (.[2]) as $metric |
                 ($by[$runs[0]].rec[$tag][$metric]) as $b |
                 "| " + $tag + " (" + $metric + ") | " + ($b | fmt) + " |" +
                 ([range(1; $n) | ($by[$runs[.]].rec[$tag][$metric]) as $v | " " + ($v | fmt) + " | " + rel($v; $b) + " |"] | join(""))
            end)'
}

if [ $print = 1 ]; then print_table; exit; fi

# one evaluator per run and task row
ev_pids=() ev_names=()
start_ev() { # spec tag task options once; exec: in the background the job IS the evaluator
    local spec=$1 tag=$2 task=$3 opts=$4 once=$5
    # shellcheck disable=SC2086 # the row's options are words
    exec "$bin" --run "$(run_name "$spec")" --run-dir "$(run_dir "$spec")" --task "$task" --tag "$tag" --out "$out" \
        $once $opts $eval_opts
}
cleanup() { for p in "${ev_pids[@]}"; do kill -TERM "$p" 2>/dev/null; done; wait 2>/dev/null; }
if [ $live = 0 ]; then
    rc=0
    while IFS=$'\t' read -r kind tag metric task opts; do
        [ "$kind" = R ] || continue
        for spec in "${runs[@]}"; do
            (start_ev "$spec" "$tag" "$task" "$opts" "--once --no-bus --quiet" >/dev/null) || {
                echo "paper_table.sh: evaluating $tag on $(run_dir "$spec") failed" >&2; rc=1; }
        done
    done <<<"$rows"
    print_table
    exit $rc
fi
trap 'cleanup; exit 0' INT TERM
trap cleanup EXIT
while IFS=$'\t' read -r kind tag metric task opts; do
    [ "$kind" = R ] || continue
    for spec in "${runs[@]}"; do
        mkdir -p "$(run_dir "$spec")"
        start_ev "$spec" "$tag" "$task" "$opts" "--quiet" >/dev/null & ev_pids+=($!)
        ev_names+=("$tag on $(run_dir "$spec")")
    done
done <<<"$rows"
last=0
while :; do
    sleep "$every" & wait $!
    cur=$(cat "$out" 2>/dev/null | wc -l); cur=${cur:-0}
    if [ "$cur" != "$last" ]; then
        last=$cur
        echo "== $(date '+%H:%M:%S'), $cur result(s) in $out"
        print_table
    fi
    # an evaluator that stopped (its own message is above: stderr passes through) is said once,
    # by name and status; the table goes on with the others
    alive=0
    for i in "${!ev_pids[@]}"; do
        p=${ev_pids[$i]}
        [ -n "$p" ] || continue
        if kill -0 "$p" 2>/dev/null; then alive=1; continue; fi
        wait "$p"; st=$?
        echo "paper_table.sh: the evaluator of ${ev_names[$i]} stopped (exit $st)" >&2
        ev_pids[$i]=""
    done
    [ $alive = 1 ] || { echo "paper_table.sh: every evaluator has stopped" >&2; exit 1; }
done
