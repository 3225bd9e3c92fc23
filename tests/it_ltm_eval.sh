#!/usr/bin/env bash
# Integration test of an LTM checkpoint (seed 003) through bin/evaluator and bin/sampler:
# val reports, for each K of --inner-steps-list, the fresh-noise NELBO with its standard error
# and the importance-weighted bound (more inference steps give a tighter bound on this
# checkpoint); nll_bound / ppl / bpb at the K fixed in advance (the checkpoint's, or
# --inner-steps), never a min over the list; the same numbers on a second run; mc and em run
# with the posterior inferred from the context; the sampler generates with z inferred from the
# prompt and from the prior, reproducibly; bad flags are refused with one line.
set -u
cd "$(dirname "$0")/.."
. tests/lib/pipeline.sh
it_init it_ltm_eval
it_synth_data "$W/ds" 3000 11
it_pipeline "$W/ds"

bin/trainer --loaders "ipc://$W/l0" --model ltm --latent-vectors 4 --inner-steps 4 --window 16 --d-model 32 --layers 2 \
    --heads 4 --kv-heads 2 --d-ff 64 --seq-len 32 --batch 8 --warmup 5 --lr 3e-3 --steps 60 --run le \
    --run-dir "$W/r" --ckpt-every 0 2>"$W/train.log"
ok "ltm trains" "[ $? = 0 ] && [ -d $W/r/ckpt-00000060 ]"

# 1. val: the bound after 0, 2, 8 and 24 inference steps, in one pass
ev() { bin/evaluator --run le --run-dir "$W/r" --once --no-bus --quiet "$@"; }
ev --task val --data "$W/ds" --val-docs 100 --batches 3 --batch 4 --seq-len 32 --inner-steps-list 0,2,8,24 >"$W/val.json" 2>"$W/val.log"
ok "val exits 0" "[ $? = 0 ]"
V=$W/val.json
ok "bounds with standard errors, ppl and bpb for each K" "for k in 0 2 4 8 24; do for f in ce kl elbo elbo_se iw iw_se ppl bpb; do jq -e \".values.\${f}_k\$k\" $V >/dev/null || exit 1; done; done"
ok "more inference steps: a tighter bound (elbo_k0 > elbo_k2 > elbo_k8 > elbo_k24)" \
   "jq -e '.values | .elbo_k0 > .elbo_k2 and .elbo_k2 > .elbo_k8 and .elbo_k8 > .elbo_k24' $V >/dev/null"
ok "elbo = ce + kl; standard errors > 0 and small" \
   "jq -e '.values | ((.ce_k8 + .kl_k8 - .elbo_k8) | fabs) < 1e-9 and .elbo_se_k8 > 0 and .elbo_se_k8 < 0.05 and .iw_se_k8 > 0' $V >/dev/null"
ok "the importance-weighted bound is tighter than the NELBO (K=8, beyond 3 standard errors)" \
   "jq -e '.values | .iw_k8 < .elbo_k8 - 3 * .elbo_se_k8' $V >/dev/null"
ok "nll_bound is the IWAE bound at the checkpoint's K (4, added to the list), ppl = exp(nll_bound), no min" \
   "jq -e '.values | .nll_bound == .iw_k4 and .nll_bound_se == .iw_se_k4 and .elbo == .elbo_k4 and .inner_steps == 4 and ((.ppl - (.nll_bound | exp)) | fabs) < 1e-6 * .ppl and .draws == 16 and .iw_samples == 8' $V >/dev/null"
ev --task val --data "$W/ds" --val-docs 100 --batches 3 --batch 4 --seq-len 32 --inner-steps-list 0,2,4,8,24 >"$W/val2.json" 2>/dev/null
ok "the same numbers on a second run (the list holding 4 already)" "[ \"\$(jq -c '.values | del(.eval_s)' $V)\" = \"\$(jq -c '.values | del(.eval_s)' $W/val2.json)\" ]"
ev --task val --data "$W/ds" --val-docs 100 --batches 3 --batch 4 --seq-len 32 >"$W/val3.json" 2>/dev/null
ok "default list: 0 and the checkpoint's K (4)" "jq -e '.values | has(\"elbo_k0\") and has(\"elbo_k4\") and (has(\"elbo_k8\") | not)' $W/val3.json >/dev/null"
ev --task val --data "$W/ds" --val-docs 100 --batches 3 --batch 4 --seq-len 32 --inner-steps 8 --draws 8 --iw-samples 4 >"$W/val4.json" 2>/dev/null
ok "--inner-steps 8 reports K = 8; --draws / --iw-samples taken" "jq -e '.values | .nll_bound == .iw_k8 and .inner_steps == 8 and .draws == 8 and .iw_samples == 4' $W/val4.json >/dev/null"

# 2. mc and em, the posterior from the context
ev --task mc --file evaluator/tasks/synth_mc.jsonl --vocab bytes --batch 4 --limit 12 --draws 3 >"$W/mc.json" 2>"$W/mc.log"
ok "mc runs (acc_completion in [0, 1])" "jq -e '.values.acc_completion >= 0 and .values.acc_completion <= 1 and .values.n == 12' $W/mc.json >/dev/null"
ev --task em --file evaluator/tasks/synth_em.jsonl --vocab bytes --batch 4 --limit 4 --inner-steps 2 >"$W/em.json" 2>"$W/em.log"
ok "em runs" "jq -e '.values.n == 4' $W/em.json >/dev/null"

# 3. the sampler: z inferred from the prompt, or from the prior
C=$W/r/ckpt-00000060
S="--ckpt $C --prompt K>__!___ --n 3 --max-new 12 --seed 5 --quiet --json"
bin/sampler $S --model ltm >"$W/s1.txt" 2>"$W/s1.log"
ok "conditional samples" "[ $? = 0 ] && [ \$(wc -l < $W/s1.txt) = 3 ]"
bin/sampler $S >"$W/s2.txt" 2>/dev/null
ok "the same seed, the same samples" "cmp -s $W/s1.txt $W/s2.txt"
bin/sampler $S --z-from prior >"$W/s3.txt" 2>/dev/null
ok "unconditional samples (z from the prior) differ" "[ \$(wc -l < $W/s3.txt) = 3 ] && ! cmp -s $W/s1.txt $W/s3.txt"
bin/sampler $S --inner-steps 1 --fast-lr 0.1 >"$W/s4.txt" 2>/dev/null
ok "another inference differs" "[ \$(wc -l < $W/s4.txt) = 3 ] && ! cmp -s $W/s1.txt $W/s4.txt"

# 4. refused in one line
one_line() { [ "$1" = 2 ] && [ "$(wc -l < "$2")" = 1 ] && grep -q -- "$3" "$2"; }
ev --task val --data "$W/ds" --val-docs 100 --inner-steps-list 8,2 >/dev/null 2>"$W/b1.log"; rc=$?
ok "a descending --inner-steps-list refused" "one_line $rc $W/b1.log 'inner-steps-list'"
ev --task val --data "$W/ds" --val-docs 100 --batches 1 --batch 4 --seq-len 32 --draws 8 --iw-samples 8 >/dev/null 2>"$W/b6.log"; rc=$?
ok "--draws without two groups of --iw-samples refused" "[ $rc = 2 ] && [ \$(wc -l < $W/b6.log) = 1 ] && grep -q 'two groups' $W/b6.log"
bin/sampler $S --z-from posterior >/dev/null 2>"$W/b2.log"; rc=$?
ok "--z-from posterior refused" "one_line $rc $W/b2.log 'z-from'"
bin/sampler $S --model free >/dev/null 2>"$W/b3.log"; rc=$?
ok "--model free for an ltm checkpoint refused" "one_line $rc $W/b3.log 'holds a ltm model'"
bin/sampler $S --latent shared >/dev/null 2>"$W/b4.log"; rc=$?
ok "--latent (the Free Transformer's) refused" "one_line $rc $W/b4.log 'latent applies to Free Transformer'"
bin/sampler $S --fast-lr -1 >/dev/null 2>"$W/b5.log"; rc=$?
ok "a negative --fast-lr refused" "one_line $rc $W/b5.log 'fast-lr'"

it_done
