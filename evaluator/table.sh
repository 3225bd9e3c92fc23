#!/usr/bin/env bash
# evaluator/table.sh: a markdown table of the newest validation result of each run, for
# comparing the baseline's cross-entropy with the Free Transformer's bounds (docs/evaluator.md).
#
#   evaluator/table.sh [--task val] RESULTS.jsonl...
#
# Columns: run, step, parameters, tokens seen, then nats per token: ce (baseline), elbo,
# iw_bound, ce_prior, nll_bound (Free Transformer; "-" where a model has no such number), and bpb.
set -euo pipefail
task=val
if [ "${1:-}" = --task ]; then task=${2:?--task needs a name}; shift 2; fi
case "${1:-}" in
    -h|--help|"") awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; [ -n "${1:-}" ]; exit ;;
    -*) echo "table.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
esac
command -v jq >/dev/null || { echo "table.sh: jq not found" >&2; exit 1; }
echo "| run | step | parameters | tokens seen | ce | elbo | iw_bound | ce_prior | nll_bound | bpb |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
cat "$@" | jq -R -r --arg t "$task" 'fromjson? | select(type == "object" and .task == $t)' | jq -s -r '
    def f: if . == null then "-" else (. * 10000 | round / 10000 | tostring) end;
    def n: if . == null then "-" else (. | round | tostring) end;
    group_by(.run)[] | max_by(.step)
    | "| \(.run) | \(.step) | \(.values.params | n) | \(.values.tokens_seen | n) | \(.values.ce | f) | \(.values.elbo | f) | \(.values.iw_bound | f) | \(.values.ce_prior | f) | \(.values.nll_bound | f) | \(.values.bpb | f) |"'
