#!/usr/bin/env bash
# make bench-gpu-model: the predicted per-kernel table, step time and MFU of config G (GPT-2-small
# size: d=768, 12 layers, 12 heads, ff 2048, vocab 50257, B=8, T=1024) in bf16 on an H100, from
# counts the execution-model emulator takes of a real training step of model/device_cuda.cu
# (docs/DEVICES.md, "The performance model"). A PREDICTION, not a measurement: no GPU ran.
#
# A full config-G step is too slow to emulate here, so it emulates reduced steps -- config G's
# d, heads and ff, B=1, L in {1,2} layers, T in {64,128,256}, a vocabulary V of 1024 or 2048 --
# each counted by build/emu/bench/train_step (one warm-up step, then one counted step:
# zero_grad, forward, backward, AdamW), and bench/gpu_model.py fits every count of every kernel as
#     f(L, B, T, V) = a0 + a1 L + aV V + B T (b0 + b1 L + bV V) + c1 L B T^2
# (once per step; once per layer; the vocabulary's parameters; per token; per token and layer;
# the classifier's per token and word; attention's per layer quadratic term), exact for a count
# of that form, from the seven runs, and evaluates it at L=12, B=8, T=1024, V=50257. Launches of
# more than $GPU_MODEL_SAMPLE blocks are counted on every k-th block and scaled
# (FT_EMU_SAMPLE_BLOCKS; all blocks still run, so the step computes what it should); grid-stride
# launches are capped at 1056 blocks (132 SMs x 2048 resident threads / 256), which is where a
# real launch stops adding parallelism.
#
#   GPU_MODEL_POINTS="L:T:V ..."  the runs (default the seven above; more than seven: least squares,
#                      and the fit's largest residual printed)
#   GPU_MODEL_JOBS=N   emulated runs at once (default 2; each is one process of one thread)
#   GPU_MODEL_OUT=DIR  where the runs' counts go (default build/gpu-model); GPU_MODEL_REUSE=1
#                      keeps counts already there (to re-fit after a change of bench/gpu_model.py)
# Writes bench/results.json's "gpu_model" and prints the table (bench/NOTES.md has the last one).
set -u
cd "$(dirname "$0")/.."
. bench/lib.sh
bench_no_args "$@"
BIN=build/emu/bench/train_step
[ -x "$BIN" ] || { echo "gpu_model: $BIN missing (make build/emu/bench/train_step; needs clang++ and llvm-dev)"; exit 1; }
OUT=${GPU_MODEL_OUT:-build/gpu-model}
JOBS=${GPU_MODEL_JOBS:-2}
SAMPLE=${GPU_MODEL_SAMPLE:-16}
PREC=${GPU_MODEL_PRECISION:-bf16}
POINTS=${GPU_MODEL_POINTS:-"1:64:1024 2:64:1024 1:128:1024 2:128:1024 1:256:1024 1:64:2048 1:128:2048"}
mkdir -p "$OUT"
run_point() {
    local L T V
    IFS=: read -r L T V <<<"$1"
    local name="$PREC-L$L-T$T-V$V" t0
    local f="$OUT/$name.json"
    [ "${GPU_MODEL_REUSE:-0}" = 1 ] && [ -s "$f" ] && return 0
    t0=$(date +%s)
    # k_emb_accumulate unsampled: its blocks' work is data-dependent (a token's first row walks
    # the token's rows, the others return), and a sample of 16 blocks extrapolated to 3.7 GB;
    # the column reductions' first stages too: the last block of each group and of the launch
    # adds the partial rows (rows.cuh's folded finish), once a launch, not once a block; and
    # the gradient norm's k_sumsq_chunks (its last block adds every chunk's double, and each
    # tensor's last chunk is short: blocks unlike each other, which a sample scales badly --
    # sampled, the vocabulary's term of the fit took ~6.9 bytes a parameter where all blocks
    # counted give 4.4 requested, 4.06 in sectors: 0.68 GB at G, now 0.55; bench/NOTES.md
    # 2026-11-27 05:45)
    if FT_EMU_SAMPLE_BLOCKS=$SAMPLE FT_EMU_SAMPLE_EXCEPT=k_emb_accumulate,k_rmsnorm_bwd_vec,k_colred_partial,k_sumsq_chunks FT_EMU_MAX_GRID=1056 FT_EMU_CHECKS=0 FT_EMU_SEED=1 FT_EMU_PERF="$f.tmp" \
       OMP_NUM_THREADS=1 "$BIN" --config G --layers "$L" --vocab "$V" --batch 1 --seq "$T" --steps 1 --device cuda \
       --precision "$PREC" > "$OUT/$name.log" 2>&1 && grep -q '"stepped": 1' "$f.tmp"; then
        mv "$f.tmp" "$f"
        echo "gpu_model: L=$L T=$T V=$V counted in $(( $(date +%s) - t0 )) s"
    else
        echo "gpu_model: L=$L T=$T V=$V failed: $(tail -1 "$OUT/$name.log")"
        return 1
    fi
}
echo "gpu_model: emulating config G steps (B=1) at L:T:V = $POINTS, $JOBS at a time"
fail=0
set -- $POINTS
while [ $# -gt 0 ]; do
    pids=()
    for j in $(seq 1 "$JOBS"); do
        [ $# -gt 0 ] || break
        run_point "$1" & pids+=($!)
        shift
    done
    for p in "${pids[@]}"; do wait "$p" || fail=1; done
done
[ $fail = 0 ] || { echo "gpu_model: a run failed; nothing written"; exit 1; }
files=()
for p in $POINTS; do IFS=: read -r L T V <<<"$p"; files+=("$OUT/$PREC-L$L-T$T-V$V.json"); done
/usr/bin/python3 bench/gpu_model.py --precision "$PREC" --results bench/results.json "${files[@]}"
