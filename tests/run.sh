#!/usr/bin/env bash
# Runs every unit test binary (build/tests/test_*) and every integration script
# (tests/it_*.sh), adds up their closing "N passed, M failed" lines and prints the total.
# A test that exits non-zero, or prints no closing line, counts as one failure.
# The unit tests run once per instruction-set level the CPU supports (FT_CPU_ISA, see
# model/cpu_isa.h), so a machine proves every kernel variant it can run; the integration
# scripts run at the default level (the highest).
# A test that cannot run here (the multi-host tests without root or network namespaces) prints
# one line "SKIP: why" and "0 passed, 0 failed"; it is listed with its reason and counted in a
# line "K skipped" before the total.
# Each one runs under a time limit, FT_TEST_TIMEOUT seconds (default 600; the slowest takes 20 s
# on a quiet machine): one that hangs is killed with every process it started (timeout signals its
# whole process group) and counts as one failure, so a hang costs minutes, not the CI's budget.
set -u
case "${1-}" in  # settings are environment variables: an argument never starts the suite
    "") ;;
    -h|--help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;;
    *) echo "tests/run.sh: takes no arguments (FT_TEST_TMP, FT_TEST_TIMEOUT: see --help); got '$1'" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
export FT_TEST_TMP=${FT_TEST_TMP:-$(mktemp -d /tmp/ft-test.XXXXXX)}
mkdir -p "$FT_TEST_TMP" || { echo "tests/run.sh: cannot create FT_TEST_TMP=$FT_TEST_TMP"; exit 1; }
limit=${FT_TEST_TIMEOUT:-600}
total_pass=0; total_fail=0; failed_names=(); failed_logs=(); skipped=()
run_one() {
    local name=$1 label=$2 suffix=$3; shift 3
    local log="$FT_TEST_TMP/$(basename "$name")$suffix.log" start=$SECONDS
    timeout -k 10 "$limit" "$@" >"$log" 2>&1 </dev/null; local rc=$?
    [ $rc = 124 ] && echo "  (killed: still running after $limit s, FT_TEST_TIMEOUT)" >>"$log"
    local line; line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
    local p=0 f=0
    if [ -n "$line" ]; then p=${line%% passed*}; f=${line#*passed, }; f=${f%% failed*}; fi
    if [ $rc -ne 0 ] && [ "$f" = 0 ]; then f=1; fi
    if [ -z "$line" ] && [ $rc -eq 0 ]; then f=1; echo "  (no closing 'N passed, M failed' line)" >>"$log"; fi
    total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
    local skip; skip=$(grep -m1 '^SKIP: ' "$log")
    if [ -n "$skip" ] && [ "$p" = 0 ] && [ "$f" = 0 ]; then
        skipped+=("$label"); printf '%-44s skipped: %s\n' "$label" "${skip#SKIP: }"; return
    fi
    printf '%-44s %4d passed %3d failed  %3ds\n' "$label" "$p" "$f" $((SECONDS - start))
    if [ "$f" != 0 ]; then failed_names+=("$label"); failed_logs+=("$log"); sed 's/^/    | /' "$log" | tail -n 40; fi
}
levels=$(build/tests/test_cpu_isa --levels 2>/dev/null) || levels=x86-64-v2
echo "instruction-set levels of this CPU: $(echo $levels)"
for t in build/tests/test_*; do
    [ -x "$t" ] || continue
    case "$t" in *.o|*.d) continue;; esac
    for lv in $levels; do
        run_one "$t" "$(basename "$t") [$lv]" ".$lv" env FT_CPU_ISA="$lv" "$t"
    done
done
for s in tests/it_*.sh; do
    [ -f "$s" ] || continue
    run_one "$s" "$(basename "$s")" "" bash "$s"
done
echo
# the failed checks again, at the end where a log's tail (CI's) shows them
for i in "${!failed_names[@]}"; do
    echo "failed: ${failed_names[$i]}"
    { grep -E '^(FAIL|  \(killed|  \(no closing)' "${failed_logs[$i]}" || tail -n 3 "${failed_logs[$i]}"; } | head -n 8 | sed 's/^/    /'
done
echo "${#skipped[@]} skipped${skipped:+: ${skipped[*]}}"
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" = 0 ]
