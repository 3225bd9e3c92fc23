#!/usr/bin/env bash
# The CUDA device (model/device_cuda.cu) run by the execution-model emulator (tests/emu,
# docs/DEVICES.md "The emulator"), on the CPU, under AddressSanitizer:
#  0. test_emu: the emulator's own tests -- each feature against the host's answer, and broken
#     kernels (a missing __syncthreads, out-of-bounds reads of device and shared memory, a
#     divergent shuffle, a host pointer, block races, a stream race, ...) each reported;
#  1. test_device_compare --device cuda against the CPU device: every op forward and backward,
#     one training step of every family (loss, every gradient, every updated weight), the loss
#     curves over --steps steps and a checkpoint swap; fp32 with the grid-stride launches capped
#     at 7 blocks (FT_EMU_MAX_GRID: every op over more than 1792 items iterates its loop), bf16
#     at the real cap (8192 blocks: every launch takes as many blocks as its items need), with
#     a product on a strided view at the end of its buffer (the bf16 operands were read past it);
#     bf16 with FT_BF16_SHADOW_CHECK=1: every bf16 shadow a product reads (device_cuda.cu: operands
#     rounded once and kept, weights refreshed by the optimizer) is compared on the device with
#     a fresh rounding, and a stale one fails the sync; and FT_CUDA_STAGE_MIN=0, so every product
#     whose result has a misaligned leading dimension (the head's: vocabularies 97 and 61) runs
#     through the staging buffer and reads dlogits from the classifier's padded shadow; and bf16
#     (and fp32, where nothing is skipped) with FT_BF16_SHADOW_ONLY=poison: the tensors the
#     families mark as read by products only (device.h products_only) keep only their bf16
#     shadows and their fp32 copies are NaN on both devices, so a reader that is not a product fails;
#     the fp32 and the poisoned bf16 runs also defer every zero() (FT_CUDA_LAZY_ZERO_MIN=0) and
#     write a deferred range as NaN (FT_CUDA_LAZY_ZERO=poison), so an op that reads one before the
#     device wrote its zeros (docs/DEVICES.md "Deferred zeroing") fails;
#  2. test_device_kernels --device cuda: model/cuda/'s kernel families against the CPU device at
#     shapes that take each kernel's every path (vector and scalar rows, rows longer than the
#     registers or shared memory, several column-reduction blocks, lists of odd-sized tensors),
#     fp32 and bf16;
#  2b. test_emu_perf: the performance model's counters (FLOPs, bytes, 32-byte sectors per warp
#     access, shared-memory wavefronts and bank conflicts, sampled blocks, cuBLAS products, host
#     waits) on kernels counted by hand;
#  3. test_cuda_device: the device's contracts with faults injected into single CUDA/cuBLAS
#     calls (every status checked, a fault reported once, free's count, the first step of a
#     model created with nothing to spare, the bf16 shadows' coherence and their check).
# Each binary's own "N passed, M failed" adds up here; a failure shows its log's tail and the
# emulator's seed (FT_EMU_SEED=N repeats its block and thread order).
set -u
cd "$(dirname "$0")/.."
. tests/lib/pipeline.sh
it_init it_emu 1
EMU=build/emu/tests
# the emulated binaries: one line each, their counts added to this script's
run_bin() {
    local label=$1; shift
    local log="$W/$label.log"
    "$@" >"$log" 2>&1; local rc=$?
    local line p=0 f=0; line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
    if [ -n "$line" ]; then p=${line%% passed*}; f=${line#*passed, }; f=${f%% failed*}; fi
    [ $rc -ne 0 ] && [ "$f" = 0 ] && f=1
    pass=$((pass + p)); fail=$((fail + f))
    echo "$label: $p passed, $f failed (rc $rc)"
    if [ "$f" != 0 ]; then
        grep -E '^(FAIL|emu: ERROR|==[0-9]+==ERROR)' "$log" | head -n 20 | sed 's/^/    /'
        tail -n 15 "$log" | sed 's/^/    | /'
        grep -m1 -o 'seed [0-9]*' "$log" | sed 's/^/    emulator /'
    fi
}
if [ ! -x $EMU/test_device_compare ] || [ ! -x $EMU/test_device_kernels ]; then
    echo "FAIL: build/emu is not built (clang++ missing? make deps installs it)"
    echo "0 passed, 1 failed"; exit 1
fi
run_bin "emulator self-tests" $EMU/test_emu
run_bin "device_compare fp32, grid cap 7, zeros deferred and poisoned" env FT_EMU_MAX_GRID=7 FT_BF16_SHADOW_ONLY=poison FT_CUDA_LAZY_ZERO=poison FT_CUDA_LAZY_ZERO_MIN=0 $EMU/test_device_compare --device cuda --steps 5
run_bin "device_compare bf16" env FT_BF16_SHADOW_CHECK=1 FT_CUDA_STAGE_MIN=0 $EMU/test_device_compare --device cuda --precision bf16 --steps 5
run_bin "device_compare bf16, products-only fp32 copies and deferred zeros poisoned" env FT_BF16_SHADOW_ONLY=poison FT_CUDA_LAZY_ZERO=poison FT_CUDA_LAZY_ZERO_MIN=0 $EMU/test_device_compare --device cuda --precision bf16 --steps 2
run_bin "kernel families fp32" $EMU/test_device_kernels --device cuda
run_bin "kernel families bf16" $EMU/test_device_kernels --device cuda --precision bf16
run_bin "performance counters" $EMU/test_emu_perf
run_bin "CUDA device contracts" $EMU/test_cuda_device
it_done
