#!/usr/bin/env bash
# The sampler's decode on the CUDA device run by the execution-model emulator (tests/emu,
# docs/DEVICES.md): every family that samples -- the baseline, the Free Transformer (its
# encoder and latent), the latent-thought LM (its inner loop infers z from the prompt, then
# the KV cache with a sliding window) and the masked mixer (its cache of mixing sums) -- is
# trained briefly on the CPU, then bin/sampler and build/emu/bin/sampler --device cuda decode
# from the same checkpoint, several samples at once (the decode rows of linear_rows and
# attention_rows, the prefill's products), greedily and at temperature 1 with a seed (the
# greedy text of such small models is mostly one repeated byte; sampling reads the whole
# distribution). The texts must be the same byte for byte: the same draws over probabilities
# that agree to float rounding (~1e-7), so a token flips only when a draw falls within that of
# a boundary, about 1 in 10^5 for the ~300 tokens here.
set -u
cd "$(dirname "$0")/.."
. tests/lib/pipeline.sh
it_init it_emu_sample 1
S=build/emu/bin/sampler
if [ ! -x $S ]; then
    echo "FAIL: build/emu is not built (clang++ missing? make deps installs it)"
    echo "0 passed, 1 failed"; exit 1
fi
it_synth_data "$W/ds" 2000 7
it_pipeline "$W/ds"
BASE="--d-model 32 --layers 2 --heads 4 --kv-heads 2 --d-ff 64 --seq-len 32 --batch 4 --warmup 5 --lr 1e-2 --steps 40 --threads 1"
declare -A FAM=(
    [llama]=""
    [free]="--model free --latent-bits 4 --kappa 0.125"
    [ltm]="--model ltm --latent-vectors 4 --inner-steps 2 --window 16"
    [mixer]="--model mixer --mixer-heads 2 --mixer-kernel 3"
)
for f in llama free ltm mixer; do
    bin/trainer --loaders "ipc://$W/l0" $BASE ${FAM[$f]} --run $f --run-dir "$W/$f" 2>"$W/$f.train.log"
    ok "$f: 40 steps on the CPU (rc $?)" "grep -q 'done at step 40' $W/$f.train.log"
    for d in cpu cuda; do
        p=bin/sampler; [ $d = cuda ] && p=$S
        { $p --run-dir "$W/$f" --prompt "K>" --n 3 --temperature 0 --max-new 24 --seed 5 --device $d --quiet &&
          $p --run-dir "$W/$f" --prompt "Q>_" --n 3 --temperature 1 --max-new 24 --seed 5 --device $d --quiet; } \
            >"$W/$f.$d.txt" 2>"$W/$f.$d.log"; echo "rc $?" >>"$W/$f.$d.log"
    done
    ok "$f: the emulated GPU decodes (rc: $(tail -n1 $W/$f.cuda.log))" "grep -q 'rc 0' $W/$f.cuda.log && [ -s $W/$f.cuda.txt ]" ||
        grep -h -m3 -E 'emu: ERROR|AddressSanitizer|seed [0-9]' "$W/$f.cuda.log" | sed 's/^/    /'
    ok "$f: greedy samples, emulated GPU against CPU: the same text" "cmp -s $W/$f.cpu.txt $W/$f.cuda.txt" ||
        diff "$W/$f.cpu.txt" "$W/$f.cuda.txt" | head -n 6 | sed 's/^/    /'
done
it_done
