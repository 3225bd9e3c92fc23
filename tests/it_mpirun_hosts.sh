#!/usr/bin/env bash
# tests/it_mpirun_hosts.sh: the watch trainer/examples/mpirun_hosts.sh keeps on mpirun, with a
# stand-in mpirun first on PATH (the real one, across hosts, runs in tests/it_net_dp.sh, where
# whether Open MPI lingers depends on what was in flight at the cut):
#   - mpirun that ends after its rank: its exit status comes back at once, nothing stopped;
#   - mpirun that lingers after this host's ranks ended (Open MPI 4.1 waiting for the daemon of
#     a host it cannot reach): stopped FT_MPIRUN_GRACE_S seconds later, one line, status 1;
#   - no rank on this host: mpirun is never stopped, however long it runs;
#   - SIGTERM to the launcher reaches mpirun; a bad FT_MPIRUN_GRACE_S is refused.
set -u
cd "$(dirname "$0")/.."
. tests/lib/pipeline.sh
it_init it_mpirun_hosts 1
F=$W/fake
mkdir -p "$F"
cp "$(command -v sleep)" "$F/trainer" # a "rank": a process named trainer
# the stand-in: MODE (FAKE_MODE) is end STATUS | linger | norank SECONDS; its pid in $W/mpirun.pid
cat >"$F/mpirun" <<EOF
#!/usr/bin/env bash
echo \$\$ >"$W/mpirun.pid"
trap 'echo TERM >"$W/mpirun.sig"; exit 143' TERM
set -- \$FAKE_MODE
case \$1 in
    end) "$F/trainer" 1; exit \$2;;
    linger) "$F/trainer" 1; exec sleep 600;;
    norank) sleep \$2 & wait; exit 0;;
    rank) "$F/trainer" 600 & echo \$! >"$W/rank.pid"; wait;;
esac
EOF
chmod +x "$F/mpirun"
echo "localhost slots=1" >"$W/hostfile"
L=trainer/examples/mpirun_hosts.sh
launch() { PATH="$F:$PATH" FAKE_MODE="$1" "$L" "$W/hostfile" 1 --steps 1 2>"$W/err"; }
ms() { echo $((($(date +%s%N) - $1) / 1000000)); }

t0=$(date +%s%N); launch "end 3"; rc=$?; t=$(ms "$t0")
ok "mpirun ending after its rank: its status comes back (rc $rc, want 3) within 3 s ($t ms), nothing stopped" \
   "[ $rc = 3 ] && [ $t -lt 3000 ] && ! grep -q stopping $W/err"

t0=$(date +%s%N); FT_MPIRUN_GRACE_S=1 launch linger; rc=$?; t=$(ms "$t0")
ok "mpirun lingering after this host's ranks ended: stopped with status 1 (rc $rc) after the 1 s grace + 1 s rank ($t ms; 2-5 s)" \
   "[ $rc = 1 ] && [ $t -ge 2000 ] && [ $t -lt 5000 ]"
ok "in one line saying why and what to set" \
   "[ \$(wc -l <$W/err) = 1 ] && grep -q '^mpirun_hosts: this host.s ranks ended 1 s ago and mpirun still waits .*FT_MPIRUN_GRACE_S' $W/err"
ok "and that mpirun is gone" "wait_for '! kill -0 \$(cat $W/mpirun.pid) 2>/dev/null' 5"

t0=$(date +%s%N); FT_MPIRUN_GRACE_S=0 launch "norank 2"; rc=$?; t=$(ms "$t0")
ok "no rank on this host: mpirun runs its 2 s unstopped even at a 0 s grace (rc $rc, $t ms)" \
   "[ $rc = 0 ] && [ $t -ge 2000 ] && ! grep -q stopping $W/err"

rm -f "$W/mpirun.sig" "$W/mpirun.pid"
PATH="$F:$PATH" FAKE_MODE=rank "$L" "$W/hostfile" 1 2>"$W/err" &
launcher=$!
wait_for "[ -s $W/mpirun.pid ] && pgrep -P \$(cat $W/mpirun.pid) -x trainer >/dev/null" 10
kill -TERM $launcher
wait_for "! kill -0 $launcher 2>/dev/null" 5; gone=$?
ok "SIGTERM to the launcher reaches mpirun, and both end" "[ $gone = 0 ] && [ \"\$(cat $W/mpirun.sig 2>/dev/null)\" = TERM ]"
kill "$(cat "$W/rank.pid" 2>/dev/null || echo 0)" 2>/dev/null # the stand-in's rank, orphaned by its TERM

FT_MPIRUN_GRACE_S=soon launch "end 0"; rc=$?
ok "FT_MPIRUN_GRACE_S=soon is refused in one line (rc $rc)" \
   "[ $rc = 2 ] && grep -q \"^mpirun_hosts: FT_MPIRUN_GRACE_S must be whole seconds, not 'soon'\" $W/err"
it_done
