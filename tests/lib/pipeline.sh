# tests/lib/pipeline.sh: what the integration scripts share. Source it from the repository root:
#   it_init NAME [THREADS]      fresh work dir $W under $FT_TEST_TMP, bus endpoints (ipc) in it,
#                               check counters, and a trap that kills every process in $pids
#   ok DESC CONDITION           one check; CONDITION is eval'ed, a failure prints "FAIL: DESC"
#   wait_for CONDITION SECONDS  polls CONDITION every 0.1 s; 1 when it never held
#   it_synth_data DIR N SEED [ENCODE FLAGS...]  N synthetic lines -> byte-level dataset DIR
#   it_pipeline DATA [TOPIC...] bin/bus, one loader "l0" at ipc://$W/l0 and, with topics, a tap
#                               into $W/tap.log that is known to be connected when this returns
#   killed_run PROGRAM ARGS...  runs a program (not a shell function) that a fault hook kills
#                               (FT_*_FAULT_KILL_*, README's "Fault injection") without bash's
#                               "Killed" notice; its status (137)
#   it_port_base N              a random first port of N consecutive TCP ports below the
#                               kernel's ephemeral range (a port inside it can be taken at any
#                               moment by a connection's own end, even one this test opened)
#   it_done                     prints "N passed, M failed"; use as the script's last command
# Background processes started by a script go into pids (`cmd & pids+=($!)`).

it_init() {
    W=${FT_TEST_TMP:-$(mktemp -d)}/$1; rm -rf "$W"; mkdir -p "$W"
    export FT_BUS_PUB=ipc://$W/bus.pub FT_BUS_SUB=ipc://$W/bus.sub FT_PROGRESS=0
    # the device every program uses (make test-gpu runs these scripts with FT_TEST_DEVICE=cuda)
    export FT_DEVICE=${FT_TEST_DEVICE:-cpu}
    export OMP_NUM_THREADS=${2:-2}
    pass=0; fail=0; pids=()
    trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; wait 2>/dev/null' EXIT
}

it_port_base() {
    local low; low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null) || low=32768
    [ "$low" -gt 12000 ] 2>/dev/null || low=32768
    echo $((10000 + RANDOM % (low - 10000 - $1)))
}

ok() { if eval "$2"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $1"; fi; }

wait_for() { local i; for i in $(seq $(($2 * 10))); do eval "$1" && return 0; sleep 0.1; done; return 1; }

it_synth_data() {
    local dir=$1 n=$2 seed=$3; shift 3
    bin/tokenizer synth --n "$n" --seed "$seed" > "$dir.txt"
    bin/tokenizer encode --vocab bytes "$@" --out "$dir" "$dir.txt" 2>/dev/null
}

it_pipeline() {
    local data=$1; shift
    bin/bus >"$W/bus.log" 2>&1 & pids+=($!)
    bin/loader --data "$data" --bind "ipc://$W/l0" --name l0 --quiet >"$W/l0.log" 2>&1 & pids+=($!)
    if [ $# -gt 0 ]; then
        bin/bus tap "$@" log/sync >"$W/tap.log" 2>/dev/null & pids+=($!)
        # a subscriber that joins late misses events: wait until the tap sees a ping
        wait_for "bin/bus send log/sync log program=it line=ping >/dev/null 2>&1; grep -q ping $W/tap.log" 10
    fi
}

killed_run() { { "$@" 2>&3; } 3>&2 2>/dev/null; }

it_done() { echo "$pass passed, $fail failed"; [ "$fail" = 0 ]; }
