#!/usr/bin/env bash
# tests/it_net_dp.sh: data parallelism across two hosts (tests/lib/hosts.sh): 2 MPI ranks, rank
# 0 on host A and rank 1 on host B, Open MPI over TCP on the hosts' interface
# (btl_tcp_if_include ft0), started on A by trainer/examples/mpirun_hosts.sh with a hostfile and
# trainer/examples/multihost.env, as README's multi-host section starts them (there over ssh;
# here tests/lib/netns_rsh.sh is the remote shell); the ranks' rendezvous and the loader under
# CURVE.
#   1. the run equals the one-host 2-rank run of tests/it_dp.sh's kind (this machine, ipc, no
#      keys): every checkpoint file byte for byte (the sum runs in rank order either way);
#   2. host B cut off mid-run (no FIN): rank 0 exits with one line naming rank 1 and its last
#      checkpoint within --dp-lost-after + 2 s, and mpirun ends too (with Open MPI's keepalive
#      settings of README, or stopped by the launcher's watch when Open MPI lingers) instead of
#      waiting out TCP's retries;
#   3. healed, the run resumes from that checkpoint with 1 rank (--accum 2) and, separately, with
#      2 ranks across the hosts again; both continuations agree (1e-5, tests/it_dp.sh's
#      tolerance for another world size: the same numbers summed in another order).
#   4. the NCCL path's rendezvous across the hosts under the GPU emulator (build/emu/bin/trainer,
#      tests/it_emu_dp.sh): rank 0 on A binds --rendezvous tcp://A:5730 under CURVE and hands the
#      NCCL unique id to rank 1 on B; 10 steps equal, byte for byte, the same 2 emulated ranks
#      on one host (rendezvous on 127.0.0.1); and the same under mpirun on A and B (MPI hands
#      out rank 0's rendezvous, rank 1 fetches the id there). The emulated NCCL itself moves
#      the data through this machine's shared memory (/dev/shm, which the namespaces share), not
#      the network: what crosses the hosts is the rendezvous, the id and the ranks' heartbeat. A
#      real NCCL between hosts opens its own sockets (NCCL_SOCKET_IFNAME, README "The GPU"): not
#      run here.
# Needs root (network namespaces) and Open MPI; skips with one line otherwise.
set -u
cd "$(dirname "$0")/.."
. tests/lib/pipeline.sh
. tests/lib/hosts.sh
it_init it_net_dp 1
unset FT_KEY FT_TRUST FT_AUTHORIZED FT_INSECURE FT_ALLOW_ANY_CLIENT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 # README: Open MPI as root
command -v mpirun >/dev/null || { echo "SKIP: mpirun (Open MPI) missing; make deps installs openmpi-bin"; hosts_skip; }
hosts_init A B || hosts_skip
A=$(host_ip A)
it_synth_data "$W/ds" 2000 7
MODEL="--d-model 32 --layers 2 --heads 4 --kv-heads 2 --d-ff 64 --seq-len 32 --warmup 5 --lr 3e-3 --threads 1"
DIFF=tests/lib/st_diff.py
within() { awk -v d="$1" -v t="$2" 'BEGIN{exit !(d <= t)}'; }

# --- keys and the loader on A --------------------------------------------------------------------
K=$W/keys
hosts_keys "$K" trainer loader
# rank 0's rendezvous: port 5730 of any host (multihost.env), as docs/NETWORK.md's trust file
{ echo "tcp://*:5730 $(key trainer)"; echo "tcp://$A:5600 $(key loader)"; } >"$K/trust"
on_bg A "$W/loader.log" env FT_KEY="$K/loader.key" bin/loader --data "$W/ds" --bind "tcp://$A:5600" --authorized "$K/authorized"

# trainer/examples/mpirun_hosts.sh, README's launcher, with its environment
# (trainer/examples/multihost.env) on the hosts' interface; the remote shell is the harness's
printf 'A slots=1\nB slots=1\n' >"$W/hostfile"
export FT_HOSTS_PREFIX=$HOSTS_PREFIX
LAUNCH=(env FT_NET_IF=ft0 OMPI_MCA_plm_rsh_agent="$PWD/tests/lib/netns_rsh.sh"
        FT_KEY="$K/trainer.key" FT_TRUST="$K/trust" FT_AUTHORIZED="$K/authorized")
# two [VAR=VALUE] TRAINER-ARGS...: 2 ranks, on A and B
two() {
    local v=(); case $1 in FT_*=*) v=("$1"); shift;; esac
    on A "${LAUNCH[@]}" "${v[@]}" trainer/examples/mpirun_hosts.sh "$W/hostfile" 2 --loaders "tcp://$A:5600" "$@"
}

# --- 1. two hosts against one --------------------------------------------------------------------
it_pipeline "$W/ds"
mpirun --oversubscribe --bind-to none -np 2 -x OMP_NUM_THREADS=1 bin/trainer --dp mpi --loaders "ipc://$W/l0" \
    --run d --run-dir "$W/one" --steps 20 --ckpt-every 10 $MODEL --batch 2 --dp-check-every 1 2>"$W/one.log" >/dev/null
ok "one host: 2 ranks, 20 steps (rc $?)" "grep -q 'done at step 20' $W/one.log"
two --run d --run-dir "$W/two" --steps 20 --ckpt-every 10 $MODEL --batch 2 --dp-check-every 1 2>"$W/two.log" >/dev/null
ok "two hosts: 2 ranks, 20 steps (rc $?)" "grep -q 'done at step 20' $W/two.log"
ok "rank 0 ran on A and rank 1 on B" "grep -q '^trainer: rank 0 of 2 (mpi): pid [0-9]* on A$' $W/two.log && grep -q '^trainer: rank 1 of 2 (mpi): pid [0-9]* on B$' $W/two.log"
for s in 10 20; do
    ok "checkpoint $s equals the one-host 2-rank run's, every file byte for byte" "diff -r $W/one/ckpt-000000$s $W/two/ckpt-000000$s >/dev/null"
done

# --- 2. host B cut off in the middle of a run --------------------------------------------------------
on_bg A "$W/k.log" "${LAUNCH[@]}" trainer/examples/mpirun_hosts.sh "$W/hostfile" 2 --loaders "tcp://$A:5600" --run k \
    --run-dir "$W/k" --steps 100000 --ckpt-every 20 $MODEL --batch 2 --dp-lost-after 3 --log-every 10
launcher=$!
wait_for "[ -d $W/k/ckpt-00000040 ]" 60
t0=$(date +%s%N)
host_cut B
wait_for "grep -q '^trainer: rank 0: rank 1 lost' $W/k.log" 15; found=$?
ms=$((($(date +%s%N) - t0) / 1000000))
ok "B cut: rank 0 says rank 1 is lost within --dp-lost-after 3 + 2 s ($ms ms)" "[ $found = 0 ] && [ $ms -lt 5000 ]"
ok "in one line naming the silence and the checkpoint to resume from" \
   "grep -q '^trainer: rank 0: rank 1 lost during .* of step [0-9]*: silent for [0-9.]* s (--dp-lost-after 3); resume from $W/k/ckpt-[0-9]* with --resume' $W/k.log"
# mpirun ends when its connection to B's daemon fails: by multihost.env's keepalives (about
# 5 s after the cut) when that connection is idle, but when mpirun's own message to the daemon
# is in flight keepalives never probe it and TCP's retries take many minutes (CI: still there
# 35 s after the cut). mpirun_hosts.sh then stops mpirun FT_MPIRUN_GRACE_S (10) s after the
# ranks on A ended (tests/it_mpirun_hosts.sh): rank 0's exit (~3 s) + 10 s + its 0.5 s poll.
wait_for "! kill -0 $launcher 2>/dev/null" 30; gone=$?
ms=$((($(date +%s%N) - t0) / 1000000))
ok "and the launcher (mpirun) ends too, within 30 s of the cut ($ms ms$(grep -q '^mpirun_hosts: .*stopping it' $W/k.log && echo ', stopped by its watch'))" "[ $gone = 0 ]"
[ $gone = 0 ] || kill -KILL $launcher 2>/dev/null # the checks below stand on their own
last=$(sed -n "s|.*resume from $W/k/ckpt-\([0-9]*\) with.*|\1|p" "$W/k.log" | head -1)
last=$((10#${last:-0}))
host_heal B
# B's daemon ends at once by its own keepalives when its connection was idle; when it was
# sending at the cut, at its next retransmission after the heal (answered: mpirun is gone),
# which TCP's backoff puts up to ~25 s apart by then
ok "healed: what was left on B (Open MPI's daemon) ends by itself" "wait_for '! ip netns pids $(host_ns B) | grep -q .' 45"

# --- 3. resumed from the last checkpoint with 1 rank, and with 2 across the hosts ---------------------
cp -r "$W/k" "$W/k1"
# the same --steps as the cut run (the schedule), stopped right after checkpoint $end by the
# trainer's fault hook (README, "Fault injection")
end=$((last + 10)) E=$(printf %08d $((last + 10))) L=$(printf %08d $last)
FT_TRAINER_FAULT_KILL_AFTER_CKPT=$end killed_run on A env FT_KEY="$K/trainer.key" FT_TRUST="$K/trust" bin/trainer \
    --loaders "tcp://$A:5600" --run k --run-dir "$W/k1" --steps 100000 --ckpt-every 10 $MODEL --batch 2 --accum 2 --resume \
    2>"$W/k1.log" >/dev/null
ok "resumed by 1 rank (--accum 2) from step $last to $end" "grep -q 'resumed from.*ckpt-$L' $W/k1.log && [ -d $W/k1/ckpt-$E ]"
two FT_TRAINER_FAULT_KILL_AFTER_CKPT=$end --run k --run-dir "$W/k" --steps 100000 --ckpt-every 10 $MODEL --batch 2 \
    --dp-lost-after 3 --resume 2>"$W/k2.log" >/dev/null
ok "resumed by 2 ranks across the hosts from step $last to $end" "grep -q 'resumed from.*ckpt-$L' $W/k2.log && [ -d $W/k/ckpt-$E ]"
d=$($DIFF "$W/k1/ckpt-$E/model.safetensors" "$W/k/ckpt-$E/model.safetensors" | awk '{print $2}')
ok "the two continuations agree after 10 steps (max |dw| $d, tolerance 1e-5)" "[ -n '$d' ] && within $d 1e-5"
# --- 4. NCCL's rendezvous across the hosts, under the GPU emulator ---------------------------------
T=build/emu/bin/trainer
# emu DIR RENDEZVOUS HOST0 HOST1: 2 emulated ranks of run n in $W/DIR, rank r on HOSTr ("-": this machine)
emu() {
    local name=$1 rv=$2 r rc=0 ps=() h; shift 2
    for r in 0 1; do
        h=$1; shift
        if [ "$h" = - ]; then
            $T --dp nccl --device "cuda:$r" --rank $r --world 2 --rendezvous "$rv" --loaders "ipc://$W/l0" --run n \
                --run-dir "$W/$name" --steps 10 --ckpt-every 10 $MODEL --batch 2 --dp-check-every 1 --dp-timeout 60 2>"$W/$name.$r.log" >/dev/null &
        else
            on "$h" env FT_KEY="$K/trainer.key" FT_TRUST="$K/trust" FT_AUTHORIZED="$K/authorized" $T --dp nccl \
                --device "cuda:$r" --rank $r --world 2 --rendezvous "$rv" --loaders "tcp://$A:5600" --run n \
                --run-dir "$W/$name" --steps 10 --ckpt-every 10 $MODEL --batch 2 --dp-check-every 1 --dp-timeout 60 2>"$W/$name.$r.log" >/dev/null &
        fi
        ps+=($!)
    done
    for r in "${ps[@]}"; do wait "$r" || rc=$?; done
    # a rank that died leaves the emulated communicator's files, named after rank 0's pid
    local p0; p0=$(sed -n 's/^trainer: rank 0 of 2 (nccl): pid \([0-9]*\) .*/\1/p' "$W/$name.0.log")
    [ -n "$p0" ] && rm -f /dev/shm/ftemu-nccl-"$p0"-*
    return $rc
}
if [ ! -x $T ]; then
    ok "build/emu/bin/trainer is built (the GPU emulator; clang++ missing? make deps installs it)" false
else
    emu n1 "tcp://127.0.0.1:$(it_port_base 1)" - -; rc=$?
    ok "one host: 2 emulated GPUs over the emulated NCCL, 10 steps (rc $rc)" "[ $rc = 0 ] && grep -q 'done at step 10' $W/n1.0.log"
    emu n2 tcp://A:5730 A B; rc=$?
    ok "two hosts: rank 0 on A hands the NCCL id to rank 1 on B over tcp://A:5730 under CURVE, 10 steps (rc $rc)" \
       "[ $rc = 0 ] && grep -q 'done at step 10' $W/n2.0.log && grep -q '^trainer: rank 1 of 2 (nccl): pid [0-9]* on B$' $W/n2.1.log"
    ok "no finding of the emulator in either rank" "! grep -q 'emu: ERROR' $W/n2.0.log $W/n2.1.log"
    ok "checkpoint 10 across the hosts equals the one-host run's, every file byte for byte" \
       "diff -r $W/n1/ckpt-00000010 $W/n2/ckpt-00000010 >/dev/null"
    # the same under mpirun across the hosts: MPI hands rank 0's rendezvous to rank 1, which
    # fetches the NCCL id there; --device cuda is cuda:<local rank> (trainer/examples/multihost.env)
    on A "${LAUNCH[@]}" bash -c '. trainer/examples/multihost.env && exec mpirun --hostfile "$0" -np 2 -x OMP_NUM_THREADS \
        -x FT_KEY -x FT_TRUST -x FT_AUTHORIZED "$@"' "$W/hostfile" $T --dp nccl --device cuda --rendezvous "tcp://*:5730" \
        --loaders "tcp://$A:5600" --run n --run-dir "$W/n3" --steps 10 --ckpt-every 10 $MODEL --batch 2 --dp-check-every 1 \
        --dp-timeout 60 2>"$W/n3.log" >/dev/null; rc=$?
    p0=$(sed -n 's/^trainer: rank 0 of 2 (nccl): pid \([0-9]*\) .*/\1/p' "$W/n3.log"); [ -n "$p0" ] && rm -f /dev/shm/ftemu-nccl-"$p0"-*
    ok "under mpirun on A and B: the NCCL id through rank 0's rendezvous, 10 steps (rc $rc)" \
       "[ $rc = 0 ] && grep -q 'done at step 10' $W/n3.log && grep -q '^trainer: rank 1 of 2 (nccl): pid [0-9]* on B$' $W/n3.log"
    ok "and its checkpoint 10 equals the one-host run's byte for byte" "diff -r $W/n1/ckpt-00000010 $W/n3/ckpt-00000010 >/dev/null"
fi
it_done
