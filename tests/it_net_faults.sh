#!/usr/bin/env bash
# tests/it_net_faults.sh: faults across hosts (tests/lib/hosts.sh), nothing lost. Under CURVE:
#     A: bin/bus, a tap    B: loader l1    C: loader l2 behind a slow link (the relay on C:
#     200 ms each way, 5% of the segments lost once)    D: the trainer    E: an evaluator
# One training run (checkpoints every 50 steps) lives through, in turn:
#   - the slow link: while B is up the trainer's pace follows B, the fast loader (it is more
#     than twice the pace it has on C alone), and C's requests are answered within the
#     documented time-out (2 s: nothing re-issued while B and C are both up and uncut);
#   - B and E cut off together (no FIN), B for 8 s, E for FT_NET_EVAL_CUT_S (8 by default, 60 for
#     the issue's "a minute"): the trainer carries on with C alone; the half-open connections
#     are noticed (dropped) on both sides within the heartbeat bound (docs/NETWORK.md: 5 s);
#     healed, B serves again and the pace recovers; E's results reach the bus again and it
#     evaluates what was written meanwhile (the run directory stays readable);
#   - A, the bus host, cut off for 7 s: the evaluator still finds the new checkpoints by its
#     directory scan; the trainer's and the evaluator's connections to the bus are dropped
#     within the bound; healed, metrics flow again and a late subscriber gets the welcome index
#     with the newest checkpoint;
# and at the end: the checkpoint written after the last fault equals, byte for byte, the same
# run on one host without faults (no batch skipped or repeated), and the evaluator evaluated
# every checkpoint up to it exactly once. The run directory sits on storage every host sees
# (this machine's file system), which the cuts leave reachable.
# Needs root (network namespaces); skips with one line otherwise.
set -u
cd "$(dirname "$0")/.."
. tests/lib/pipeline.sh
. tests/lib/hosts.sh
it_init it_net_faults 1
unset FT_KEY FT_TRUST FT_AUTHORIZED FT_INSECURE FT_ALLOW_ANY_CLIENT FT_HEARTBEAT_IVL_MS FT_HEARTBEAT_TIMEOUT_MS
hosts_init A B C D E || hosts_skip
A=$(host_ip A) B=$(host_ip B) C=$(host_ip C) D=$(host_ip D) E=$(host_ip E)
it_synth_data "$W/ds" 20000 7
MODEL="--d-model 32 --layers 2 --heads 4 --kv-heads 2 --d-ff 64 --seq-len 32 --batch 4 --warmup 5 --lr 3e-3 --threads 1"
RUN="--run r --steps 100000 --ckpt-every 50 --keep 0 --log-every 10"
BOUND_MS=7000 # the heartbeat's 1 s + 4 s (docs/NETWORK.md), and 2 s for a loaded 2-core machine (measured 4.1-6.1 s)
EVAL_CUT=${FT_NET_EVAL_CUT_S:-8}

K=$W/keys
hosts_keys "$K" bus loader trainer evaluator me
{ echo "tcp://$A:* $(key bus)"; echo "tcp://$B:* $(key loader)"; echo "tcp://$C:* $(key loader)"; } >"$K/trust"
export FT_BUS_PUB=tcp://$A:5710 FT_BUS_SUB=tcp://$A:5711 FT_TRUST=$K/trust
SRV="--authorized $K/authorized"

on_bg A "$W/bus.log" bin/bus --pub "$FT_BUS_PUB" --sub "$FT_BUS_SUB" --key "$K/bus.key" $SRV
on_bg A "$W/tap.err" env FT_KEY="$K/me.key" sh -c "exec bin/bus tap metrics ckpt eval loader log/sync >$W/tap.log"
wait_for "on A env FT_KEY=$K/me.key bin/bus send log/sync log program=it line=ping >/dev/null 2>&1; grep -q ping $W/tap.log" 20
on_bg B "$W/l1.log" env FT_KEY="$K/loader.key" bin/loader --data "$W/ds" --bind "tcp://$B:5600" --name l1 $SRV
on_bg C "$W/l2.log" env FT_KEY="$K/loader.key" bin/loader --data "$W/ds" --bind "tcp://$C:5600" --name l2 $SRV
relay_bg C 5601 "$C:5600" 200 0.05 "$W/relay.log"
mkdir -p "$W/r"
on_bg E "$W/eval.log" env FT_KEY="$K/evaluator.key" bin/evaluator --run r --run-dir "$W/r" --task val \
    --data "$W/ds" --batches 1 --seq-len 32 --batch 2 --poll-ms 500 --out "$W/evals.jsonl"
wait_for "grep -q '\"loader/l1\"' $W/tap.log && grep -q '\"loader/l2\"' $W/tap.log && grep -q '^relay: ' $W/relay.log" 20
sleep 1
on_bg D "$W/t.log" env FT_KEY="$K/trainer.key" bin/trainer --loaders "tcp://$B:5600,tcp://$C:5601" --in-flight 4 \
    $MODEL $RUN --run-dir "$W/r"
trainer=$!

step_now() { sed -n 's|^step \([0-9]*\)/.*|\1|p' "$W/t.log" | tail -n 1; }
# pace SECONDS: steps per second over the next SECONDS
pace() { local a b; a=$(step_now); sleep "$1"; b=$(step_now); awk -v a="${a:-0}" -v b="${b:-0}" -v s="$1" 'BEGIN{printf "%.1f", (b - a) / s}'; }
served() { jq -s -r --arg t "loader/$1" 'map(select(.topic == $t)) | last | .served // 0' "$W/tap.log"; }
# the run's checkpoints, oldest first (not the .tmp directory of one being written)
ckpts() { ls -d "$W"/r/ckpt-[0-9]* 2>/dev/null | grep -v '\.tmp$'; }
newest() { ckpts | tail -n 1; }
ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); }
# noticed DESC FILE: the drop that conns_gone_bg timed into FILE (from the cut) came within BOUND_MS
noticed() {
    wait_for "[ -s $2 ]" $((BOUND_MS / 1000 + 30))
    local t; t=$(cat "$2" 2>/dev/null)
    ok "$1 (${t:-?} ms after the cut; bound $BOUND_MS ms)" "[ '${t:-never}' != never ] && [ ${t:-0} -le $BOUND_MS ]"
}

ok "the trainer on D trains from B and C (via the relay)" "wait_for '[ \"\$(step_now)\" -ge 100 ] 2>/dev/null' 60"

# --- the slow link while B is up -----------------------------------------------------------------------
p_both=$(pace 3)
ok "with B up the slow link costs little: B served most batches (B $(served l1), C $(served l2))" \
   "[ \$(served l1) -gt \$((3 * \$(served l2))) ]"

# --- B and E cut off together ----------------------------------------------------------------------------
ok "before the cut D and B, A and E are connected (D-B $(conns D B), B-D $(conns B D), A-E $(conns A E))" \
   "[ $(conns D B) -gt 0 ] && [ $(conns B D) -gt 0 ] && [ $(conns A E) -gt 0 ]"
t0=$(date +%s%N)
host_cut B; host_cut E
conns_gone_bg D B $t0 "$W/gone.DB"; conns_gone_bg B D $t0 "$W/gone.BD"; conns_gone_bg A E $t0 "$W/gone.AE"
s_cut=$(step_now)
ok "B cut: the trainer carries on with C alone" "wait_for '[ \$(step_now) -ge $((s_cut + 10)) ]' 15"
noticed "D drops its half-open connection to B" "$W/gone.DB"
noticed "and B drops D's" "$W/gone.BD"
noticed "and the bus on A drops the evaluator's" "$W/gone.AE"
p_slow=$(pace 2)
sleep $((8 - $(ms_since $t0) / 1000 > 0 ? 8 - $(ms_since $t0) / 1000 : 0))
host_heal B
t_heal=$(date +%s%N)
b_before=$(served l1)
wait_for "[ \$(served l1) -gt $b_before ]" 20; back=$?
ok "healed: B serves again within 10 s ($(ms_since $t_heal) ms; it had served $b_before)" "[ $back = 0 ] && [ $(ms_since $t_heal) -lt 10000 ]"
# B's round trip, long while it was cut, halves every 2 s it is not measured (docs/NETWORK.md
# §3), so B takes back its share within seconds of serving again: the pace over 3 s, up to 4 times
fast() { awk -v s=$p_slow -v a=$1 'BEGIN{exit !(a > 2 * s)}'; }
for i in 1 2 3 4; do p_after=$(pace 3); fast "$p_after" && break; done
ok "the pace follows the fast loader: $p_both steps/s with B and C, $p_slow with C alone, $p_after after the heal (in the 3 s from $(((i - 1) * 3)) s after B served again)" \
   "awk -v b=$p_both -v s=$p_slow 'BEGIN{exit !(b > 2 * s)}' && fast $p_after"

# E stays cut off FT_NET_EVAL_CUT_S seconds in all (8 by default; 60 as the issue's "a minute")
sleep $((EVAL_CUT - $(ms_since $t0) / 1000 > 0 ? EVAL_CUT - $(ms_since $t0) / 1000 : 0))
host_heal E
t_eheal=$(date +%s)
ok "E healed after $(($(ms_since $t0) / 1000)) s: its results reach the bus again" \
   "wait_for \"jq -s -e 'map(select(.topic == \\\"eval/r\\\" and .time > $t_eheal)) | length > 0' $W/tap.log >/dev/null\" 20"

# --- the bus host cut off ----------------------------------------------------------------------------------
ck_before=$(newest)
ok "before the cut D and E are connected to A (D $(conns D A), E $(conns E A))" "[ $(conns D A) -gt 0 ] && [ $(conns E A) -gt 0 ]"
t0=$(date +%s%N)
host_cut A
conns_gone_bg D A $t0 "$W/gone.DA"; conns_gone_bg E A $t0 "$W/gone.EA"
noticed "A cut: D drops its half-open connections to the bus" "$W/gone.DA"
noticed "and so does the evaluator on E" "$W/gone.EA"
ok "the evaluator finds a checkpoint written during the cut by its directory scan" \
   "wait_for '[ \$(newest) != $ck_before ] && s=\$(basename \$(newest) | sed s/ckpt-0*//) && jq -e \"select(.step == \$s)\" $W/evals.jsonl >/dev/null' 20"
sleep $((7 - $(ms_since $t0) / 1000 > 0 ? 7 - $(ms_since $t0) / 1000 : 0))
host_heal A
s_heal=$(step_now)
ok "healed: metrics flow again (step > $s_heal on the tap)" \
   "wait_for \"jq -s -e 'map(select(.topic == \\\"metrics/r\\\" and .step > $s_heal)) | length > 0' $W/tap.log >/dev/null\" 15"
ck_new=$(newest); s_new=$((10#${ck_new##*ckpt-}))
ok "a late subscriber gets the welcome index with the newest checkpoint (>= $s_new)" \
   "wait_for 'on D env FT_KEY=$K/me.key bin/bus tap --count 1 --timeout 3 ckpt | jq -e \".type == \\\"ckpt_index\\\" and (.items[] | select(.run == \\\"r\\\") | .step) >= $s_new\" >/dev/null' 20"

# --- the end: one more checkpoint after the last fault, then compare -------------------------------------------
last_now=$(newest)
wait_for "[ \$(newest) != $last_now ]" 30
kill -TERM "$trainer"; wait_for "! kill -0 $trainer 2>/dev/null" 10
re=$(sed -n 's/^trainer: loaders: [0-9]* batch requests, \([0-9]*\) re-issued.*/\1/p' "$W/t.log")
ok "the 2 s time-out held on the slow link: ${re:-?} requests re-issued, no more than B's cut left waiting (2 x --in-flight 4)" \
   "[ -n '$re' ] && [ '$re' -le 8 ]"
X=$(basename "$(ckpts | awk -F- '{print $NF, $0}' | sort -n | awk '$1 % 50 == 0 {print $2}' | tail -n 1)")
X=$((10#${X#ckpt-}))
it_pipeline "$W/ds"
FT_TRAINER_FAULT_KILL_AFTER_CKPT=$X killed_run bin/trainer --loaders "ipc://$W/l0" --in-flight 4 $MODEL $RUN --run-dir "$W/one" 2>"$W/one.log"
ok "checkpoint $X after every fault equals the one-host run's without faults, byte for byte" \
   "diff -r $W/r/ckpt-$(printf %08d $X) $W/one/ckpt-$(printf %08d $X) >/dev/null"
want=$(seq 50 50 "$X" | tr '\n' ' ')
ok "the evaluator evaluated every checkpoint up to $X exactly once" \
   "wait_for '[ \"\$(jq -r .step $W/evals.jsonl | awk \"\\\$1 <= $X\" | sort -n | tr \"\\n\" \" \")\" = \"$want\" ]' 20"
it_done
