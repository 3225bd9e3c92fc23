#!/usr/bin/env bash
# One device session: the real GPU checks of make test-gpu's first part, bench-gpu's table,
# a per-kernel timing of one config-G layer, the CPU's ISA (AMX?), and two integration scripts.
set -u
O=${OUT:-/tmp/gpuout}; mkdir -p "$O"
exec > >(tee "$O/log.txt") 2>&1
t0=$(date +%s)
el() { echo "[+$(( $(date +%s) - t0 ))s] $*"; }
left() { [ $(( $(date +%s) - t0 )) -lt "$1" ]; }
el start
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
{ lscpu | grep -E 'Model name|^CPU\(s\)'; grep -o -w 'amx_tile\|amx_bf16\|avx512_bf16\|avx512f' /proc/cpuinfo | sort -u | tr '\n' ' '; echo; } | tee "$O/cpu.txt"
mkdir -p .gpu/x && tar -C .gpu/x -xJf .gpu/bundle.tar.xz || { el "bundle: tar failed"; exit 1; }
cp -r .gpu/x/bin . && mkdir -p build/tests build/bench && cp .gpu/x/build/tests/* build/tests/ && cp .gpu/x/build/bench/* build/bench/
CUDALIB=$(dirname "$(find /usr/local/cuda*/ /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)")
NCCLLIB=$(dirname "$(find /usr/local/cuda*/ /usr/lib /opt -name 'libnccl.so.2' 2>/dev/null | head -1)")
NCU=$(command -v ncu || find /usr/local/cuda*/ /opt -name ncu -type f 2>/dev/null | head -1)
export LD_LIBRARY_PATH=$PWD/.gpu/x/lib:$CUDALIB:$NCCLLIB
export PATH=$PWD/.gpu/x/lib:$PATH
el "cublas in $CUDALIB, nccl in $NCCLLIB, ncu $NCU"
ldd build/tests/test_device_compare bin/trainer | grep 'not found'
build/tests/test_device_compare --device cuda --probe; el "probe rc=$?"

: > "$O/compare.log"
for p in fp32 bf16 tf32; do
    el "compare $p"
    timeout 100 build/tests/test_device_compare --device cuda --precision "$p" > "$O/c.$p" 2>&1; rc=$?
    { echo "=== compare $p rc=$rc"; cat "$O/c.$p"; } >> "$O/compare.log"
    grep -E 'FAIL|not ok|failed' "$O/c.$p" | grep -v ' 0 failed' | head -20; tail -n 1 "$O/c.$p"; rm -f "$O/c.$p"
done

: > "$O/bench.jsonl"
for c in M G; do
    seq=256; [ "$c" = G ] && seq=1024
    for p in fp32 tf32 bf16; do
        left 260 || { el "bench $c $p: skipped, time"; continue; }
        for r in 1 2; do
            timeout 60 build/bench/train_step --device cuda --precision "$p" --config "$c" --seq "$seq" --steps 10 --json \
                > "$O/b.json" 2> "$O/b.err"; rc=$?
            [ -s "$O/b.json" ] && sed "s/^{/{\"cfg\":\"$c\",\"prec\":\"$p\",\"rep\":$r,/" "$O/b.json" >> "$O/bench.jsonl"
            el "bench $c $p rep $r rc=$rc: $(cut -c1-300 "$O/b.json") $(tail -n 2 "$O/b.err")"
        done
    done
done
rm -f "$O/b.json" "$O/b.err"

if [ -n "$NCU" ] && left 300; then
    el "ncu: one layer of config G, bf16, every kernel of a warm-up and a timed step"
    timeout 100 "$NCU" --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --csv --print-units base \
        build/bench/train_step --device cuda --precision bf16 --config G --seq 1024 --layers 1 --steps 1 \
        > "$O/ncu.csv" 2> "$O/ncu.err"; el "ncu rc=$? $(wc -l < "$O/ncu.csv") lines; $(tail -n 3 "$O/ncu.err")"
fi

if grep -q amx_tile "$O/cpu.txt" && left 340; then
    for p in fp32 bf16; do
        el "CPU $p M, 2 threads"
        OMP_NUM_THREADS=2 timeout 60 build/bench/train_step --device cpu --precision "$p" --config M --steps 3 --limit --json 2>&1 | tail -n 3
    done
fi

for s in tests/gpu/it_swap.sh tests/it_trainer.sh; do
    left 380 || { el "$s: skipped, time"; continue; }
    el "$s (cuda)"
    FT_TEST_DEVICE=cuda timeout 60 bash "$s" > "$O/$(basename "$s").log" 2>&1; el "$s rc=$?: $(tail -n 1 "$O/$(basename "$s").log")"
done
el end
