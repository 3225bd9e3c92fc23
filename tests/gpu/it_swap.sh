#!/usr/bin/env bash
# make test-gpu: checkpoints cross devices (docs/DEVICES.md). Needs a GPU.
#  - a baseline and a Free Transformer trained 20 steps on cuda resume on the CPU for 20 more,
#    and the other way round; every leg exits 0 and the loss keeps falling;
#  - bin/evaluator on a GPU checkpoint gives the CPU's validation loss on the same checkpoint
#    to float rounding (1e-4 relative: the same formulas, sums in other orders): the baseline's
#    CE, the Free Transformer's ELBO (CE with Z from the encoder + KL; it has no plain CE);
#  - bin/sampler, greedy, gives the same text from the same checkpoint on both devices (the
#    argmax of logits that agree to rounding; a near-tie could flip a token, which a small
#    trained model on the synthetic data does not show).
set -u
cd "$(dirname "$0")/../.."
. tests/lib/pipeline.sh
it_init it_gpu_swap
it_synth_data "$W/ds" 4000 7
it_pipeline "$W/ds"
MODEL="--d-model 32 --layers 2 --heads 4 --kv-heads 2 --d-ff 64 --seq-len 32 --batch 4 --warmup 5 --lr 3e-3"
train() { bin/trainer --loaders "ipc://$W/l0" $MODEL "$@"; }
for fam in llama free; do
    extra=""; [ $fam = free ] && extra="--model free --latent-bits 8 --kappa 0.125"
    for order in "cuda cpu" "cpu cuda"; do
        set -- $order; d1=$1 d2=$2; r="$W/$fam-$d1-$d2"
        train $extra --run x --run-dir "$r" --steps 20 --ckpt-every 10 --device "$d1" 2>"$r.1.log"; rc1=$?
        train $extra --run x --run-dir "$r" --steps 40 --ckpt-every 10 --device "$d2" --resume 2>"$r.2.log"; rc2=$?
        ok "$fam: 20 steps on $d1, 20 more on $d2 ($rc1, $rc2)" "[ $rc1 = 0 ] && [ $rc2 = 0 ] && [ -d $r/ckpt-00000040 ]"
    done
    r="$W/$fam-cuda-cpu"
    for d in cpu cuda; do
        bin/evaluator --run x --run-dir "$r" --task val --data "$W/ds" --val-docs 200 --once --no-bus \
            --device "$d" --quiet > "$W/$fam.val.$d.json" 2>"$W/$fam.val.$d.log"
        bin/sampler --run-dir "$r" --prompt "K>" --temperature 0 --max-new 40 --device "$d" --quiet \
            > "$W/$fam.sample.$d.txt" 2>"$W/$fam.sample.$d.log"
    done
    ok "$fam: validation loss, GPU vs CPU" "jq -n -e --slurpfile a $W/$fam.val.cpu.json --slurpfile b $W/$fam.val.cuda.json \
        '(\$a[0].values | .ce // .elbo) as \$x | (\$b[0].values | .ce // .elbo) as \$y | ((\$x - \$y) | fabs) <= 1e-4 * \$x' >/dev/null"
    ok "$fam: greedy samples, GPU vs CPU" "cmp -s $W/$fam.sample.cpu.txt $W/$fam.sample.cuda.txt"
done
it_done
