# Windowed means of the LTM's training metrics, the fixed-noise run (before issue 24) against the
# stochastic-VI retrain of the same recipe (K = 16, 300 updates, the same data, init and seed).
# Usage: jq -n -r --slurpfile old results/ltm_fixed_noise/ltm_ltm.jsonl \
#          --slurpfile new results/ltm_300/ltm_ltm-k16.jsonl -f results/ltm_300/compare.jq
def steps($f): [$f[] | select(.values != null) | {key: (.step | tostring), value: .values}] | from_entries;
def mean(f): if length == 0 then null else (map(f) | add / length) end;
steps($old) as $o | steps($new) as $n
| ([$n | keys[] | tonumber] | max) as $last
| "| steps | loss, fixed noise | loss, fresh noise | CE, fixed | CE, fresh | KL, fixed | KL, fresh |",
  "| --- | --- | --- | --- | --- | --- | --- |",
  (range(0; $last; 25) as $a | [range($a + 1; ([$a + 25, $last] | min) + 1) | tostring] as $w
   | [$w[] | $o[.] | select(. != null)] as $ow | [$w[] | $n[.] | select(. != null)] as $nw
   | "| \($w[0])-\($w[-1]) | \($ow | mean(.loss) | . * 10000 | round / 10000) | \($nw | mean(.loss) | . * 10000 | round / 10000) | \($ow | mean(.ce) | . * 10000 | round / 10000) | \($nw | mean(.ce) | . * 10000 | round / 10000) | \($ow | mean(.kl) | . * 10000 | round / 10000) | \($nw | mean(.kl) | . * 10000 | round / 10000) |")
