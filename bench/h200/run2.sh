#!/usr/bin/env bash
# Device session 2: the fixed comparisons and scripts, config G again on the merged tree, and
# the CPU benches on this machine's AMX Xeon pinned to 2 cores (the issue's 2-core setting).
set -u
O=${OUT:-/tmp/gpuout}; mkdir -p "$O"
exec > >(tee "$O/log2.txt") 2>&1
t0=$(date +%s)
el() { echo "[+$(( $(date +%s) - t0 ))s] $*"; }
left() { [ $(( $(date +%s) - t0 )) -lt "$1" ]; }
el start; nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader; lscpu | grep 'Model name'
mkdir -p .gpu/x && tar -C .gpu/x -xJf .gpu/bundle.tar.xz || { el "bundle: tar failed"; exit 1; }
cp -r .gpu/x/bin . && mkdir -p build/tests build/bench && cp .gpu/x/build/tests/* build/tests/ && cp .gpu/x/build/bench/* build/bench/
CUDALIB=$(dirname "$(find /usr/local/cuda*/ /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)")
NCCLLIB=$(dirname "$(find /usr/local/cuda*/ /usr/lib /opt -name 'libnccl.so.2' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$PWD/.gpu/x/lib:$CUDALIB:$NCCLLIB PATH=$PWD/.gpu/x/lib:$PATH
: > "$O/compare2.log"
for p in fp32 bf16 tf32; do
    timeout 100 build/tests/test_device_compare --device cuda --precision "$p" > "$O/c" 2>&1; rc=$?
    { echo "=== compare $p rc=$rc"; cat "$O/c"; } >> "$O/compare2.log"; el "compare $p rc=$rc: $(grep FAIL "$O/c" | head -5) $(tail -n 1 "$O/c")"
done; rm -f "$O/c"
for s in tests/gpu/it_swap.sh tests/it_trainer.sh; do
    FT_TEST_DEVICE=cuda timeout 70 bash "$s" > "$O/c" 2>&1; el "$s (cuda) rc=$?: $(grep FAIL "$O/c" | head -5) $(tail -n 1 "$O/c")"
done; rm -f "$O/c"
: > "$O/bench2.jsonl"
for p in bf16 tf32 fp32; do
    timeout 60 build/bench/train_step --device cuda --precision "$p" --config G --seq 1024 --steps 20 --json >> "$O/bench2.jsonl" 2>/dev/null
    el "G $p: $(tail -n 1 "$O/bench2.jsonl" | cut -c1-260)"
done
sed 's#^PY=/usr/bin/python3#PY=python3#' bench/bench_train.sh > bench/.bt.sh
el "bench_train on 2 cores (taskset -c 0,1)"
left 250 && BENCH_OUT=$O TRAIN_BENCH_REPS=2 timeout 200 taskset -c 0,1 bash bench/.bt.sh 2>&1 | grep -v '^{' | tail -n 12
sed -e 's#^PY=/usr/bin/python3#PY=python3#' -e 's#^make -s build/bench/generate.*##' bench/bench_generate.sh > bench/.bg.sh
left 420 && { el "bench_generate on 2 cores"; BENCH_OUT=$O GENERATE_BENCH_ROUNDS=1 timeout 100 taskset -c 0,1 bash bench/.bg.sh 2>&1 | tail -n 8; }
el end
