#!/usr/bin/env bash
# The code task's sandbox: programs sandboxed and run per second, at --jobs 1 and 2.
# Ours: bin/evaluator --task code --completions on N programs (the shipped HumanEval-format
# problems' canonical solutions, each repeated), the sandbox's own time (values.exec_s: from
# the first start to the last end, generation excluded). Peer: bench/sandbox_peer.py runs the
# same N programs the way a Python harness without isolation does it (a fresh temporary
# directory, subprocess.run of /usr/bin/python3 with a timeout, a thread pool of --jobs): the
# floor any harness that starts a fresh interpreter per program pays. Both use /usr/bin/python3.
# Median of 3 alternating repeats; writes "$BENCH_OUT/sandbox.json" and prints a table.
set -u
cd "$(dirname "$0")/.."
. bench/lib.sh
bench_no_args "$@"
OUT=${BENCH_OUT:-build/bench-out}
mkdir -p "$OUT"
T=$(mktemp -d /tmp/bench_sandbox.XXXXXX)
trap 'rm -rf "$T"' EXIT INT TERM
N=${SANDBOX_BENCH_PROGRAMS:-100}
PY=/usr/bin/python3
PROBLEMS=evaluator/tasks/example_humaneval.jsonl
per=$(( (N + 4) / 5 ))
jq -c --argjson per "$per" '. as $p | range($per) | {task_id: $p.task_id, completion: $p.canonical_solution}' "$PROBLEMS" > "$T/completions.jsonl"
N=$(wc -l < "$T/completions.jsonl")
# the programs exactly as the evaluator assembles them (human-eval's layout), for the peer
jq -r --argjson per "$per" '(.prompt + .canonical_solution + "\n" + .test + "\ncheck(" + .entry_point + ")\n") | @json' "$PROBLEMS" \
    | while read -r p; do for i in $(seq "$per"); do echo "$p"; done; done > "$T/programs.jsonl"

ours() { # jobs -> programs/s
    bin/evaluator --task code --file "$PROBLEMS" --completions "$T/completions.jsonl" --jobs "$1" --quiet \
        | jq -r --argjson n "$N" 'if .values.end_passed != $n then error("not every program passed") else $n / .values.exec_s end'
}
peer() { $PY bench/sandbox_peer.py --jobs "$1" "$T/programs.jsonl"; }
declare -A res
for j in 1 2; do
    o=() p=()
    for k in 1 2 3; do
        x=$(ours "$j") || { echo "bench_sandbox: evaluator failed"; exit 1; }
        o+=("$x")
        x=$(peer "$j") || { echo "bench_sandbox: peer failed"; exit 1; }
        p+=("$x")
    done
    res[ours$j]=$(bench_median "${o[@]}")
    res[peer$j]=$(bench_median "${p[@]}")
done
printf '%-34s %12s %12s\n' "programs/s ($N programs)" "--jobs 1" "--jobs 2"
printf '%-34s %12.1f %12.1f\n' "ours (namespaces + rlimits)" "${res[ours1]}" "${res[ours2]}"
printf '%-34s %12.1f %12.1f\n' "peer (subprocess.run, no isolation)" "${res[peer1]}" "${res[peer2]}"
jq -n --argjson o1 "${res[ours1]}" --argjson o2 "${res[ours2]}" --argjson p1 "${res[peer1]}" --argjson p2 "${res[peer2]}" \
      --argjson n "$N" --arg py "$($PY --version 2>&1)" \
   '{sandbox: {ours_jobs1_prog_s: ($o1 * 10 | round / 10), ours_jobs2_prog_s: ($o2 * 10 | round / 10),
               peer_jobs1_prog_s: ($p1 * 10 | round / 10), peer_jobs2_prog_s: ($p2 * 10 | round / 10),
               ratio_jobs1: ($o1 / $p1 * 1000 | round / 1000), ratio_jobs2: ($o2 / $p2 * 1000 | round / 1000),
               programs: $n, interpreter: ("/usr/bin/python3, " + $py),
               peer: "bench/sandbox_peer.py: subprocess.run per program in a fresh temporary directory, no isolation"}}' \
   > "$OUT/sandbox.json"
cat "$OUT/sandbox.json"
