#!/usr/bin/env bash
# One session on a lent GPU machine (the device tool's `run` with `carry: [".gpu"]`, from the
# repository root, after bench/gpu_bundle.sh): in order of what matters most, each part skipped
# when the session's time (SESSION_S, default 480 s) is short:
#   1. test_device_compare --device cuda at fp32, bf16, tf32 (make test-gpu's first part);
#   2. the training bench: config G (GPT-2-small size) bf16 twice, and once each with the
#      vocabulary's products unaligned (FT_CUDA_ALIGN=0), with the classifier's row not kept in
#      shared memory (FT_CUDA_CE_CACHE=0), in tf32 and fp32; config M bf16 and fp32;
#   3. ncu: every kernel's time and DRAM bytes in one layer of config G, bf16;
#   4. the CPU's AMX level (when the CPU has AMX), in the background on cores 4.. (the GPU's host
#      threads keep cores 0-3): every unit-test binary at FT_CPU_ISA=x86-64-v4-amx, then on 2
#      cores the bf16 and fp32 step at S and M against the AMX product limit, batch-1 generation
#      and the training bench against PyTorch, one repeat each;
#   5. make test-gpu in full (tests/gpu/run.sh: the compares, the integration scripts on the
#      GPU, NCCL data parallelism);
#   6. ncu's full sections on the attention kernels.
# SKIP="compare bench ncu amx testgpu attention" leaves those parts out. Everything goes to $OUT:
# log.txt, and results.tgz with a file per part (the device tool brings back only a few files).
set -u
. "$(dirname "$0")/lib.sh"
bench_no_args "$@"
O=${OUT:-/tmp/gpuout}; mkdir -p "$O"
exec > >(tee "$O/log.txt") 2>&1
t0=$(date +%s); S=${SESSION_S:-480}
el() { echo "[+$(( $(date +%s) - t0 ))s] $*"; }
want() { case " ${SKIP:-} " in *" $1 "*) return 1;; esac; }
left() { [ $(( $(date +%s) - t0 )) -lt $(( S - $1 )) ]; } # at least $1 s of the session left
# the device tool brings back only a few files: everything but log.txt goes into results.tgz
pack() { (cd "$O" && ls | grep -v -x -e log.txt -e results.tgz | tar -czf results.tgz -T - && ls | grep -v -x -e log.txt -e results.tgz | xargs rm -rf); }
trap pack EXIT
el start
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
{ lscpu | grep -E 'Model name|^CPU\(s\)'; grep -o -w 'amx_tile\|amx_bf16\|avx512_bf16\|avx512f' /proc/cpuinfo | sort -u | tr '\n' ' '; echo; } | tee "$O/cpu.txt"
mkdir -p .gpu/x && tar -C .gpu/x -xJf .gpu/bundle.tar.xz || { el "bundle: tar failed"; exit 1; }
cp -r .gpu/x/bin . && mkdir -p build/tests build/bench && cp .gpu/x/build/tests/* build/tests/ && cp .gpu/x/build/bench/* build/bench/
[ -d .gpu/x/data ] && mkdir -p data && cp -r .gpu/x/data/* data/
# the machine's own jq where it works: ours, on LD_LIBRARY_PATH, broke it (bench/h200/README.md)
jq --version >/dev/null 2>&1 && rm -f .gpu/x/lib/libjq.so.1 .gpu/x/lib/libonig.so.5
CUDALIB=$(dirname "$(find /usr/local/cuda*/ /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)")
NCCLLIB=$(dirname "$(find /usr/local/cuda*/ /usr/lib /opt -name 'libnccl.so.2' 2>/dev/null | head -1)")
NCU=$(command -v ncu || find /usr/local/cuda*/ /opt -name ncu -type f 2>/dev/null | head -1)
export LD_LIBRARY_PATH=$PWD/.gpu/x/lib:$CUDALIB:$NCCLLIB
el "cublas in $CUDALIB, nccl in $NCCLLIB, ncu $NCU, jq $(jq --version 2>&1)"
ldd build/tests/test_device_compare bin/trainer | grep 'not found'
build/tests/test_device_compare --device cuda --probe; el "probe rc=$?"
NC=$(nproc)

# 1. the compares
# (bf16-staged: every product whose result is misaligned through the staging buffer, as the
# head's at config G, here at the compare's small shapes)
for p in fp32 bf16 tf32 bf16-staged; do
    want compare || break
    timeout 100 env $([ $p = bf16-staged ] && echo FT_CUDA_STAGE_MIN=0) taskset -c 0-3 build/tests/test_device_compare \
        --device cuda --precision "${p%-staged}" > "$O/compare.$p.log" 2>&1
    el "compare $p rc=$?: $(grep -E '^FAIL' "$O/compare.$p.log" | head -5) $(tail -n 1 "$O/compare.$p.log")"
done

# 2. the bench (the step is fwd_s + bwd_s + opt_s: phases timed with a device sync after each)
bench() { # label config precision [env...]
    local label=$1 c=$2 p=$3; shift 3
    local seq=256; [ "$c" = G ] && seq=1024
    want bench || return
    left 200 || { el "bench $label: skipped, time"; return; }
    env "$@" timeout 60 taskset -c 0-3 build/bench/train_step --device cuda --precision "$p" --config "$c" --seq "$seq" \
        --steps 20 --json > "$O/b.json" 2> "$O/b.err"; local rc=$?
    [ -s "$O/b.json" ] && sed "s/^{/{\"label\":\"$label\",/" "$O/b.json" >> "$O/bench.jsonl"
    el "bench $label rc=$rc: $(jq -c '{step: (.fwd_s + .bwd_s + .opt_s), tokens_per_s, loss}' "$O/b.json" 2>/dev/null) $(tail -n 1 "$O/b.err")"
}
: > "$O/bench.jsonl"
bench G-bf16 G bf16
bench G-bf16-unaligned G bf16 FT_CUDA_ALIGN=0
bench G-bf16-nocache G bf16 FT_CUDA_CE_CACHE=0
bench G-bf16 G bf16
bench G-tf32 G tf32
bench G-fp32 G fp32
bench M-bf16 M bf16
bench M-fp32 M fp32
rm -f "$O/b.json" "$O/b.err"

# 3. per-kernel times, one layer of G
if [ -n "$NCU" ] && want ncu && left 160; then
    timeout 90 "$NCU" --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --csv --print-units base \
        build/bench/train_step --device cuda --precision bf16 --config G --seq 1024 --layers 1 --steps 1 \
        > "$O/ncu_G_1layer_bf16.csv" 2> "$O/ncu.err"; el "ncu rc=$? $(wc -l < "$O/ncu_G_1layer_bf16.csv") lines; $(tail -n 2 "$O/ncu.err")"
fi

# 4. the AMX level, in the background on cores 4.. while the GPU's parts keep cores 0-3: every
# unit test at FT_CPU_ISA=x86-64-v4-amx (2 threads each), then on cores 4-5 the step at S and M
# against the AMX product limit, batch-1 generation and the training bench against PyTorch (one
# repeat each; the machine's python3 has PyTorch)
amx_pid=
if grep -q amx_tile "$O/cpu.txt" && [ "$NC" -ge 8 ] && want amx; then
    el "AMX: unit tests at x86-64-v4-amx on cores 4-$((NC - 1)), then the CPU benches on cores 4-5"
    sed -e 's#^PY=/usr/bin/python3#PY=python3#' -e 's#^make -s build/bench/generate.*##' bench/bench_generate.sh > bench/.bg.sh
    sed -e 's#^PY=/usr/bin/python3#PY=python3#' bench/bench_train.sh > bench/.bt.sh
    (
        ls build/tests/test_* | xargs -P $(( (NC - 4) / 2 )) -I{} sh -c \
            'n=$(basename {}); FT_CPU_ISA=x86-64-v4-amx OMP_NUM_THREADS=2 timeout 150 taskset -c 4-'$((NC - 1))' {} > '"$O"'/amx.$n.log 2>&1; echo "$n rc=$? $(grep -E "^[0-9]+ passed, [0-9]+ failed" '"$O"'/amx.$n.log | tail -n 1)"' \
            > "$O/amx_tests.txt" 2>&1
        echo "[amx] unit tests done at +$(( $(date +%s) - t0 ))s"
        for c in S M; do
            for p in fp32 bf16; do
                OMP_NUM_THREADS=2 timeout 40 taskset -c 4,5 build/bench/train_step --device cpu --precision "$p" --config "$c" \
                    --steps 3 --limit --json > "$O/cb.json" 2> /dev/null
                [ -s "$O/cb.json" ] && sed "s/^{/{\"label\":\"cpu-$c-$p\",/" "$O/cb.json" >> "$O/amx_bench.jsonl"
            done
        done
        echo "[amx] train_step done at +$(( $(date +%s) - t0 ))s"
        BENCH_OUT=$O GENERATE_BENCH_ROUNDS=1 timeout 90 taskset -c 4,5 bash bench/.bg.sh > "$O/amx_generate.txt" 2>&1
        echo "[amx] generate rc=$? at +$(( $(date +%s) - t0 ))s"
        BENCH_OUT=$O TRAIN_BENCH_REPS=1 timeout 200 taskset -c 4,5 bash bench/.bt.sh > "$O/amx_train.txt" 2>&1
        echo "[amx] bench_train rc=$? at +$(( $(date +%s) - t0 ))s"
    ) > "$O/amx_progress.txt" 2>&1 &
    amx_pid=$!
fi

# 5. make test-gpu
if want testgpu && left 150; then
    el "make test-gpu (tests/gpu/run.sh)"
    timeout $(( S - 120 - ($(date +%s) - t0) )) taskset -c 0-3 bash tests/gpu/run.sh > "$O/test_gpu.log" 2>&1
    el "test-gpu rc=$?: $(grep -E 'passed .* failed$' "$O/test_gpu.log" | tr -s ' ' | tr '\n' ';') $(tail -n 1 "$O/test_gpu.log")"
fi

# 6. attention kernels in detail
if [ -n "$NCU" ] && want attention && left 70; then
    timeout 60 "$NCU" --set full -k regex:k_att --launch-count 4 --csv --page details \
        build/bench/train_step --device cuda --precision bf16 --config G --seq 1024 --layers 1 --steps 1 \
        > "$O/ncu_att_full.csv" 2> "$O/ncu_att.err"; el "ncu attention rc=$? $(wc -l < "$O/ncu_att_full.csv") lines"
fi

if [ -n "$amx_pid" ]; then
    while kill -0 "$amx_pid" 2>/dev/null && left 10; do sleep 2; done
    kill -0 "$amx_pid" 2>/dev/null && { el "AMX benches: stopped, time"; pkill -P "$amx_pid"; kill "$amx_pid"; }
    cat "$O/amx_progress.txt"
    el "AMX unit tests: $(grep -c 'rc=0' "$O/amx_tests.txt") of $(wc -l < "$O/amx_tests.txt") exited 0; not: $(grep -v 'rc=0' "$O/amx_tests.txt" | tr '\n' ';')"
    for f in "$O"/amx.*.log; do grep -q -E '^[0-9]+ passed, 0 failed' "$f" && rm -f "$f"; done
    jq -c '{label, tokens_per_s, step_s, limit_products_s, isa}' "$O/amx_bench.jsonl" 2>/dev/null
    tail -n 8 "$O/amx_generate.txt" "$O/amx_train.txt" 2>/dev/null
fi
el end
