#!/usr/bin/env bash
# make test-gpu: the GPU checks (docs/DEVICES.md). Needs an NVIDIA GPU and its driver.
#
#   1. test_device_compare --device cuda: every op forward and backward, one training step
#      of each family (loss, every gradient, every updated weight), 50 steps of training
#      (the loss curves) and a checkpoint swap, the GPU against the CPU; again with bf16 and
#      tf32 products (looser tolerances, explained in the test);
#   2. the integration scripts run with FT_TEST_DEVICE=cuda (every program then defaults to
#      --device cuda): training resumed bit-exactly after SIGKILL, the Free Transformer, the
#      sampler, the evaluator; and tests/gpu/it_swap.sh: checkpoints crossing CPU <-> GPU,
#      evaluator and sampler outputs GPU against CPU;
#   3. tests/it_dp.sh with FT_TEST_DP=nccl: data parallelism over NCCL, GPU ranks started by
#      hand meeting at a rendezvous (with one GPU only world 1 runs, and it says so).
# Without a GPU nothing is run and nothing passes: the script says how many checks it did not
# run and ends with "0 passed, 0 failed, N skipped".
set -u
cd "$(dirname "$0")/../.."
export FT_TEST_TMP=${FT_TEST_TMP:-$(mktemp -d /tmp/ft-gpu.XXXXXX)}
COMPARES=("--precision fp32" "--precision bf16" "--precision tf32")
SCRIPTS=(tests/it_trainer.sh tests/it_free_train.sh tests/it_sampler.sh tests/it_evaluator.sh tests/gpu/it_swap.sh)
n_checks=$(( ${#COMPARES[@]} + ${#SCRIPTS[@]} + 1 ))

why=$(build/tests/test_device_compare --device cuda --probe 2>&1)
if [ $? -ne 0 ] || ! grep -q '^gpu:' <<<"$why"; then
    echo "no CUDA device: $n_checks GPU checks not run ($why)"
    echo "0 passed, 0 failed, $n_checks skipped"
    exit 0
fi
echo "$why"
pass=0; fail=0
for c in "${COMPARES[@]}"; do
    log="$FT_TEST_TMP/compare${c// /_}.log"
    build/tests/test_device_compare --device cuda $c >"$log" 2>&1
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
    p=${line%% passed*}; f=${line#*passed, }; f=${f%% failed*}
    [ -z "$line" ] && { p=0; f=1; }
    pass=$((pass + p)); fail=$((fail + f))
    printf '%-40s %4d passed %3d failed\n' "device_compare $c" "$p" "$f"
    [ "$f" != 0 ] && tail -n 30 "$log" | sed 's/^/    | /'
done
for s in "${SCRIPTS[@]}" tests/it_dp.sh; do
    log="$FT_TEST_TMP/$(basename "$s").log"
    FT_TEST_DEVICE=cuda FT_TEST_DP=nccl bash "$s" >"$log" 2>&1; rc=$?
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
    p=${line%% passed*}; f=${line#*passed, }; f=${f%% failed*}
    [ -z "$line" ] && { p=0; f=1; }
    [ $rc -ne 0 ] && [ "$f" = 0 ] && f=1
    pass=$((pass + p)); fail=$((fail + f))
    printf '%-40s %4d passed %3d failed\n' "$(basename "$s") (cuda)" "$p" "$f"
    [ "$f" != 0 ] && tail -n 30 "$log" | sed 's/^/    | /'
    grep -h 'did not run' "$log" | sed 's/^/    /'
done
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
