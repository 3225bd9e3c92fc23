#!/usr/bin/env bash
# Runs every unit test binary (build/tests/test_*) and every integration script
# (tests/it_*.sh), adds up their closing "N passed, M failed" lines and prints the total.
# A test that exits non-zero, or prints no closing line, counts as one failure.
set -u
cd "$(dirname "$0")/.."
export FT_TEST_TMP=${FT_TEST_TMP:-$(mktemp -d /tmp/ft-test.XXXXXX)}
total_pass=0; total_fail=0; failed_names=()
run_one() {
    local name=$1; shift
    local log="$FT_TEST_TMP/$(basename "$name").log" start=$SECONDS
    "$@" >"$log" 2>&1; local rc=$?
    local line; line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
    local p=0 f=0
    if [ -n "$line" ]; then p=${line%% passed*}; f=${line#*passed, }; f=${f%% failed*}; fi
    if [ $rc -ne 0 ] && [ "$f" = 0 ]; then f=1; fi
    if [ -z "$line" ] && [ $rc -eq 0 ]; then f=1; echo "  (no closing 'N passed, M failed' line)" >>"$log"; fi
    total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
    printf '%-32s %4d passed %3d failed  %3ds\n' "$(basename "$name")" "$p" "$f" $((SECONDS - start))
    if [ "$f" != 0 ]; then failed_names+=("$name"); sed 's/^/    | /' "$log" | tail -n 40; fi
}
for t in build/tests/test_*; do
    [ -x "$t" ] || continue
    case "$t" in *.o|*.d) continue;; esac
    run_one "$t" "$t"
done
for s in tests/it_*.sh; do
    [ -f "$s" ] || continue
    run_one "$s" bash "$s"
done
echo
[ ${#failed_names[@]} -gt 0 ] && echo "failed: ${failed_names[*]}"
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" = 0 ]
