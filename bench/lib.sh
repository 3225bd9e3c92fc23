# bench/lib.sh: what the bench scripts share. Source it from the repository root
# (`. bench/lib.sh`); it defines functions only.
#   bench_median V...        the median of the numbers given (the mean of the middle two when even)
#   bench_median_file F      the median of the numbers in file F, one per line
#   bench_tps F              the median "tokens_per_s" of the JSON lines in file F
#   bench_cpu_model          this CPU's model name, as /proc/cpuinfo spells it
#   bench_native_bf16        1 where the CPU has AVX512-BF16 (bf16 products in hardware), else 0
#   bench_no_args "$@"       for a script configured by its environment alone: --help/-h prints
#                            the script's leading comment and exits 0, any other argument is
#                            refused in one line (exit 2): an argument must never start the work
# jq programs share bench/lib.jq the same way: `jq -L bench 'include "lib"; ... | median'`.
# Medians everywhere, because the machines are shared and noisy: load only ever adds time, and
# the median of interleaved repeats is what the bench scripts report (each says where it takes
# the best instead, and why).

bench_median_file() {
    sort -g "$1" | awk '{a[NR] = $1} END {if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2}'
}
bench_median() { printf '%s\n' "$@" | bench_median_file /dev/stdin; }
bench_tps() { jq -r .tokens_per_s "$1" | bench_median_file /dev/stdin; }
bench_cpu_model() { grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'; }
bench_native_bf16() { if grep -qw avx512_bf16 /proc/cpuinfo; then echo 1; else echo 0; fi; }
bench_no_args() {
    [ $# -eq 0 ] && return 0
    case "$1" in
        -h|--help)
            local self=$0  # relative to where it was started; the scripts cd to the repository root
            [ -f "$self" ] || self=bench/$(basename "$0")
            awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$self"; exit 0 ;;
    esac
    echo "$(basename "$0"): takes no arguments (its settings are environment variables: see --help); got '$1'" >&2
    exit 2
}
