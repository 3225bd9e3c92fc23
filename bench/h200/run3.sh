#!/usr/bin/env bash
set -u
O=${OUT:-/tmp/gpuout}; mkdir -p "$O"
exec > >(tee "$O/log3.txt") 2>&1
t0=$(date +%s)
el() { echo "[+$(( $(date +%s) - t0 ))s] $*"; }
el start; lscpu | grep 'Model name'; command -v jq; jq --version
mkdir -p .gpu/x && tar -C .gpu/x -xJf .gpu/bundle.tar.xz || { el "bundle: tar failed"; exit 1; }
cp -r .gpu/x/bin . && mkdir -p build/tests build/bench && cp .gpu/x/build/tests/* build/tests/ && cp .gpu/x/build/bench/* build/bench/
# the machine's own jq (if it works) with its own libjq: ours leaves LD_LIBRARY_PATH
if jq --version >/dev/null 2>&1; then rm -f .gpu/x/lib/jq .gpu/x/lib/libjq.so.1 .gpu/x/lib/libonig.so.5; fi
CUDALIB=$(dirname "$(find /usr/local/cuda*/ /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)")
NCCLLIB=$(dirname "$(find /usr/local/cuda*/ /usr/lib /opt -name 'libnccl.so.2' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$PWD/.gpu/x/lib:$CUDALIB:$NCCLLIB PATH=$PWD/.gpu/x/lib:$PATH
el "jq now: $(command -v jq) $(jq --version)"
for s in tests/gpu/it_swap.sh tests/it_trainer.sh; do
    FT_TEST_DEVICE=cuda timeout 60 bash "$s" > "$O/$(basename "$s").log" 2>&1; el "$s (cuda) rc=$?: $(grep FAIL "$O/$(basename "$s").log" | head -5) $(tail -n 1 "$O/$(basename "$s").log")"
done
sed 's#^PY=/usr/bin/python3#PY=python3#' bench/bench_train.sh > bench/.bt.sh
el "bench_train on 2 cores (taskset -c 0,1), 1 repeat"
BENCH_OUT=$O TRAIN_BENCH_REPS=1 timeout 170 taskset -c 0,1 bash bench/.bt.sh 2>&1 | grep -v '^{' | tail -n 12
el end
