#!/usr/bin/env bash
# build/bench/train_step --versus (bench/bench_train.sh's bf16-against-fp32 comparison, issue
# 26): two models of one config in one process, taking turns step by step. What can go wrong is
# that the two interfere (the bf16 shadows and the per-thread buffers are process-wide, model/
# ops_bf16.h): so each side must train to exactly the loss it reaches alone, and two sides of the
# same precision to the same loss. The timing fields must be consistent (the interval holds the
# median), and a flag --versus cannot honour is one line, exit 2. A tiny config (1 layer, B=2,
# T=32) keeps it to seconds.
# --eval (the evaluator's scoring forward, timed alone or paired) the same way: each side's logits
# hash equals its lone run's, and the two precisions' logits differ.
set -u
cd "$(dirname "$0")/.."
. tests/lib/pipeline.sh
it_init it_train_step
make -s build/bench/train_step >/dev/null 2>&1
B=build/bench/train_step
ok "build/bench/train_step builds" "[ -x $B ]"
TINY="--config S --layers 1 --batch 2 --seq 32 --vocab 128 --steps 4 --json"
declare -A ALONE=([fp32]=$($B $TINY --precision fp32 | jq -r .loss) [bf16]=$($B $TINY --precision bf16 | jq -r .loss))
for pair in "fp32 bf16" "bf16 bf16" "fp32 fp32"; do
    set -- $pair
    $B $TINY --precision "$1" --versus "$2" > "$W/pair.$1.$2" 2> "$W/pair.$1.$2.err"; rc=$?
    ok "--precision $1 --versus $2 runs (rc $rc)" "[ $rc = 0 ]"
    ok "$1 vs $2: the sides are named, 4 steps each" \
       "[ \"\$(jq -r '[.a, .b, .steps] | join(\" \")' $W/pair.$1.$2)\" = '$1 $2 4' ]"
    ok "$1 vs $2: side A trains to its loss alone ($(jq .a_loss "$W/pair.$1.$2") vs ${ALONE[$1]})" \
       "[ \"\$(jq -r '.a_loss | tostring' $W/pair.$1.$2)\" = '${ALONE[$1]}' ]"
    ok "$1 vs $2: side B trains to its loss alone ($(jq .b_loss "$W/pair.$1.$2") vs ${ALONE[$2]})" \
       "[ \"\$(jq -r '.b_loss | tostring' $W/pair.$1.$2)\" = '${ALONE[$2]}' ]"
    ok "$1 vs $2: lo90 <= median <= hi90, step medians > 0" \
       "jq -e '.b_over_a_lo90 <= .b_over_a_median and .b_over_a_median <= .b_over_a_hi90 and .a_step_median_s > 0 and .b_step_median_s > 0' $W/pair.$1.$2 >/dev/null"
done
# (fp32 and bf16 alone end at different losses, so the checks above can tell the sides apart)
ok "fp32 and bf16 alone reach different losses (${ALONE[fp32]} / ${ALONE[bf16]})" "[ '${ALONE[fp32]}' != '${ALONE[bf16]}' ]"
for bad in "--profile" "--digest" "--limit" "--steps 513"; do
    $B $TINY --versus bf16 $bad > /dev/null 2> "$W/bad.err"; rc=$?
    ok "--versus with $bad: one line, exit 2 (rc $rc: $(head -c 120 "$W/bad.err"))" \
       "[ $rc = 2 ] && [ \$(wc -l < $W/bad.err) = 1 ] && grep -q 'not with --profile' $W/bad.err"
done
$B $TINY --versus bf17 > /dev/null 2> "$W/bad.err"; rc=$?
ok "--versus bf17: one line naming it, non-zero exit (rc $rc: $(cat "$W/bad.err"))" \
   "[ $rc != 0 ] && [ \$(wc -l < $W/bad.err) = 1 ] && grep -q \"bf17\" $W/bad.err"
declare -A ELOG=([fp32]=$($B $TINY --eval --precision fp32 | jq -r .logits_digest)
                 [bf16]=$($B $TINY --eval --precision bf16 | jq -r .logits_digest))
ok "--eval: a logits hash at each precision, different (${ELOG[fp32]} / ${ELOG[bf16]})" \
   "[ \${#ELOG[fp32]} = 16 ] && [ \${#ELOG[bf16]} = 16 ] && [ '${ELOG[fp32]}' != '${ELOG[bf16]}' ]"
ok "--eval: the same logits run to run (fp32)" "[ \"\$($B $TINY --eval | jq -r .logits_digest)\" = '${ELOG[fp32]}' ]"
$B $TINY --eval | jq -e '.mode == "eval" and .tokens_per_s > 0 and .step_s > 0' > /dev/null
ok "--eval --json: mode eval, tokens/s and the forward's time" "[ $? = 0 ]"
for pair in "fp32 bf16" "bf16 fp32"; do
    set -- $pair
    $B $TINY --eval --precision "$1" --versus "$2" > "$W/epair.$1.$2" 2> "$W/epair.$1.$2.err"; rc=$?
    ok "--eval --precision $1 --versus $2 runs (rc $rc)" "[ $rc = 0 ]"
    ok "--eval $1 vs $2: each side's logits as alone ($(jq -r '.a_logits_digest + " " + .b_logits_digest' "$W/epair.$1.$2"))" \
       "[ \"\$(jq -r '.a_logits_digest + \" \" + .b_logits_digest' $W/epair.$1.$2)\" = '${ELOG[$1]} ${ELOG[$2]}' ]"
    ok "--eval $1 vs $2: lo90 <= median <= hi90" \
       "jq -e '.mode == \"eval\" and .b_over_a_lo90 <= .b_over_a_median and .b_over_a_median <= .b_over_a_hi90' $W/epair.$1.$2 >/dev/null"
done
for bad in "--limit" "--digest" "--model free"; do
    $B $TINY --eval $bad > /dev/null 2> "$W/bad.err"; rc=$?
    ok "--eval with $bad: one line, exit 2 (rc $rc: $(head -c 120 "$W/bad.err"))" \
       "[ $rc = 2 ] && [ \$(wc -l < $W/bad.err) = 1 ] && grep -q -- '--eval' $W/bad.err"
done
it_done
