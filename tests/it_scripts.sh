#!/usr/bin/env bash
# The shell scripts a user runs (bench/*.sh, evaluator/*.sh, tests/demo.sh, tests/run.sh,
# live/embed.sh): --help prints the script's own header comment (not lines of its code) and exits
# 0, and an argument a script does not take is refused in one line with exit 2 -- before any
# work: `bash bench/run.sh --help` once rewrote bench/results.json and `bash tests/demo.sh
# --help` removed runs/demo. bench/results.json is checked untouched at the end.
set -u
cd "$(dirname "$0")/.."
. tests/lib/pipeline.sh
it_init it_scripts 1
scripts=(bench/bench_*.sh bench/run.sh bench/gpu.sh bench/gpu_model.sh bench/gpu_bundle.sh bench/gpu_session.sh
         bench/bf16_targets.sh evaluator/paper_table.sh evaluator/plot.sh evaluator/table.sh
         tests/demo.sh tests/run.sh live/embed.sh)
before=$(stat -c %Y bench/results.json 2>/dev/null)
for s in "${scripts[@]}"; do
    timeout -k 2 20 bash "$s" --help >"$W/help.out" 2>"$W/help.err"; rc=$?
    # the header's first line is the script's own first comment line
    first=$(awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; exit}' "$s")
    ok "$s --help: exit 0 (got $rc), its header comment, no code ($(wc -l <"$W/help.out") lines)" \
       "[ $rc = 0 ] && [ \"\$(head -n 1 $W/help.out)\" = \"\$first\" ] && ! grep -Eq '^(set -|usage\\(\\)|cd \"|\\. )' $W/help.out && [ ! -s $W/help.err ]"
    # bf16_targets.sh takes a directory or files, plot.sh and paper_table.sh take flags: an
    # unknown flag is what they all must refuse
    timeout -k 2 20 bash "$s" --no-such-flag >"$W/bad.out" 2>"$W/bad.err"; rc=$?
    ok "$s --no-such-flag: exit 2 in one line (got $rc: $(head -c 160 "$W/bad.err"))" \
       "[ $rc = 2 ] && [ \$(wc -l <$W/bad.err) = 1 ] && [ ! -s $W/bad.out ]"
done
# a positional word is no flag: the scripts configured by their environment refuse it too
for s in bench/run.sh bench/bench_train.sh tests/demo.sh tests/run.sh; do
    timeout -k 2 20 bash "$s" now >/dev/null 2>"$W/word.err"; rc=$?
    ok "$s now: refused (exit $rc)" "[ $rc = 2 ] && grep -q 'takes no arguments' $W/word.err"
done
ok "bench/results.json untouched by all of it" "[ \"\$(stat -c %Y bench/results.json 2>/dev/null)\" = '$before' ]"
it_done
