#!/usr/bin/env bash
# The NCCL data-parallel path (trainer/dp_nccl.c) and checkpoints crossing devices, with the CUDA
# device and NCCL run by the execution-model emulator (tests/emu, docs/DEVICES.md):
# build/emu/bin/trainer is bin/trainer linked with them, through the pipeline (bus, loader).
#  1. 2 emulated GPUs over the emulated NCCL (ranks started by hand at a rendezvous, --batch 2
#     each) match 1 emulated GPU with --batch 4 over 10 steps (tolerance below); the ranks'
#     weights are compared every step (--dp-check-every 1); the emulator checks every NCCL
#     operation's reads and writes against the stream order (the host values' stage buffer
#     used to be filled by a pageable cudaMemcpy that the NCCL stream did not wait for);
#  2. ZeRO-1 (grouped ncclSend/ncclRecv, the gather) gives the same bits as plain data
#     parallelism over the emulated NCCL;
#  3. resume across devices: 10 steps on the CPU then 10 on the emulated GPU, and the other way
#     round, each against the uninterrupted CPU run.
# Tolerances: 1e-5 on weights up to ~1. 1 vs 2 ranks: the same numbers summed in another order
# (measured here max |dw| 1.2e-7, as it_dp.sh on the CPU). CPU vs emulated GPU: the kernels sum
# in other orders than the CPU's SIMD ops (the products are the CPU's own on both), so every
# step's gradient differs by float rounding and AdamW carries it into the weights (measured
# after 10 + 10 steps: 6e-8 and 1.2e-7). A real GPU's cuBLAS sums differently again: make
# test-gpu's tests/gpu/it_swap.sh is the check on hardware.
set -u
cd "$(dirname "$0")/.."
. tests/lib/pipeline.sh
it_init it_emu_dp 1
T=build/emu/bin/trainer
if [ ! -x $T ]; then
    echo "FAIL: build/emu is not built (clang++ missing? make deps installs it)"
    echo "0 passed, 1 failed"; exit 1
fi
DIFF=tests/lib/st_diff.py
it_synth_data "$W/ds" 2000 7
it_pipeline "$W/ds"
MODEL="--d-model 32 --layers 2 --heads 4 --kv-heads 2 --d-ff 64 --seq-len 32 --warmup 5 --lr 3e-3 --threads 1"
within() { awk -v d="$1" -v t="$2" 'BEGIN{exit !(d <= t)}'; }
diff_of() { $DIFF "$1" "$2" | awk '{print $2}'; }
seed_of() { grep -ho 'seed [0-9]*' "$@" 2>/dev/null | head -n 1; }
# dp NAME ARGS...: 2 emulated ranks of one run, each its own process and emulated GPU
dp() {
    local name=$1; shift
    local port=$(it_port_base 1) r rc=0 ps=()
    for r in 0 1; do
        $T --dp nccl --device "cuda:$r" --rank "$r" --world 2 --rendezvous "tcp://127.0.0.1:$port" \
            --loaders "ipc://$W/l0" --run "$name" --run-dir "$W/$name" "$@" 2>"$W/$name.$r.log" & ps+=($!)
    done
    for r in "${ps[@]}"; do wait "$r" || rc=$?; done
    # a rank that died leaves the emulated communicator's files (named after rank 0's pid)
    rm -f /dev/shm/ftemu-nccl-"${ps[0]}"-*
    return $rc
}
report() { grep -h -m3 -E 'emu: ERROR|AddressSanitizer|^trainer: .*(error|failed)' "$@" | sed 's/^/    /'; seed_of "$@" | sed 's/^/    emulator /'; }

# 1. 2 ranks x batch 2 = 1 device x batch 4
$T --loaders "ipc://$W/l0" --device cuda --run g1 --run-dir "$W/g1" --steps 10 $MODEL --batch 4 2>"$W/g1.log"
ok "one emulated GPU, batch 4, 10 steps (rc $?)" "grep -q 'done at step 10' $W/g1.log" || report "$W/g1.log"
dp g2 --steps 10 $MODEL --batch 2 --dp-check-every 1; rc=$?
ok "2 emulated GPUs over the emulated NCCL, batch 2 each, weights compared every step (rc $rc)" \
   "[ $rc = 0 ] && grep -q 'done at step 10' $W/g2.0.log && ! grep -q differ $W/g2.0.log $W/g2.1.log" || report "$W/g2".*.log
ok "no finding of the emulator in either rank (stream order, races, bounds)" "! grep -q 'emu: ERROR' $W/g2.0.log $W/g2.1.log"
d=$(diff_of "$W/g1/ckpt-00000010/model.safetensors" "$W/g2/ckpt-00000010/model.safetensors")
ok "2 ranks match 1 device after 10 steps (max |dw| $d, tolerance 1e-5)" "within $d 1e-5"
d=$(diff_of "$W/g1/ckpt-00000010/optimizer.safetensors" "$W/g2/ckpt-00000010/optimizer.safetensors")
ok "AdamW moments too (max diff $d)" "within $d 1e-5"

# 2. ZeRO-1: moments sharded by grouped send/recv and gathered; the same bits
dp z2 --steps 10 $MODEL --batch 2 --zero 1 --dp-check-every 1; rc=$?
ok "ZeRO-1 over the emulated NCCL (rc $rc)" "[ $rc = 0 ] && grep -q 'done at step 10' $W/z2.0.log" || report "$W/z2".*.log
ok "ZeRO-1 weights bit-identical to plain data parallelism" "cmp -s $W/g2/ckpt-00000010/model.safetensors $W/z2/ckpt-00000010/model.safetensors"
ok "ZeRO-1 moments (gathered to rank 0) bit-identical too" "cmp -s $W/g2/ckpt-00000010/optimizer.safetensors $W/z2/ckpt-00000010/optimizer.safetensors"

# 3. checkpoints across devices: a 20-step run killed after its step-10 checkpoint on one device
#    (the fault hook of README's "Fault injection"), resumed on the other
train() { $T --loaders "ipc://$W/l0" $MODEL --batch 4 --ckpt-every 10 --steps 20 "$@"; }
train --device cpu --run ref --run-dir "$W/ref" 2>"$W/ref.log"
for order in "cpu cuda" "cuda cpu"; do
    set -- $order; r="$W/x-$1-$2"
    FT_TRAINER_FAULT_KILL_AFTER_CKPT=10 killed_run $T --loaders "ipc://$W/l0" $MODEL --batch 4 --ckpt-every 10 --steps 20 \
        --device "$1" --run x --run-dir "$r" 2>"$r.1.log"; rc1=$?
    train --device "$2" --run x --run-dir "$r" --resume 2>"$r.2.log"; rc2=$?
    ok "20 steps: killed after step 10 on $1, resumed on $2 ($rc1, $rc2)" \
       "[ -d $r/ckpt-00000010 ] && [ $rc2 = 0 ] && grep -q 'resumed from .*ckpt-00000010' $r.2.log && grep -q 'done at step 20' $r.2.log" || report "$r".*.log
    d=$(diff_of "$W/ref/ckpt-00000020/model.safetensors" "$r/ckpt-00000020/model.safetensors")
    ok "$1 then $2 matches 20 steps on the CPU (max |dw| $d, tolerance 1e-5)" "within $d 1e-5"
done
it_done
