#!/usr/bin/env bash
# The CPU level as the programs see it (issue 26): FT_CPU_ISA=x86-64-v4-amx asked for on a CPU
# without a usable AMX stops bin/trainer, bin/evaluator and bin/sampler before any work with one
# line on stderr that names the level, why it is refused and the best level there is, exit 2;
# on a CPU with AMX the level is obeyed (whatever the program says next is not about the level).
# Left unset, the default is the best level silently: no line about FT_CPU_ISA or AMX.
# An unknown level is one line too. The unit test (test_cpu_isa) checks each of AMX's three
# conditions (CPU flags, the OS's tile state, the kernel's arch_prctl grant) on its own.
set -u
cd "$(dirname "$0")/.."
. tests/lib/pipeline.sh
it_init it_cpu_isa
best=$(build/tests/test_cpu_isa --levels 2>/dev/null | tail -1)
ok "the best level is known ($best)" "[ -n '$best' ]"
echo "best level here: $best"

# each program with arguments that pass its own checks, so the level is the first thing refused
# (the level is checked before any connection: unset, the trainer gives up on its absent loader
# after 6 x --timeout-ms)
progs=("trainer|bin/trainer --loaders ipc://$W/nobody --timeout-ms 50"
       "evaluator|bin/evaluator --run x --task val"
       "sampler|bin/sampler --ckpt $W/no_ckpt")
mkdir -p "$W/no_ckpt"
for p in "${progs[@]}"; do
    name=${p%%|*}; cmd=${p#*|}
    FT_CPU_ISA=x86-64-v4-amx timeout 20 $cmd </dev/null >/dev/null 2>"$W/$name.amx"; rc=$?
    if [ "$best" = x86-64-v4-amx ]; then
        ok "$name: AMX here, the level is obeyed" "! grep -q FT_CPU_ISA $W/$name.amx"
    else
        ok "$name: x86-64-v4-amx refused, exit 2 (rc $rc)" "[ $rc = 2 ]"
        ok "$name: in one line" "[ \$(wc -l < $W/$name.amx) = 1 ]"
        ok "$name: names the level and the best one ($(cat "$W/$name.amx"))" \
           "grep -q '^$name: FT_CPU_ISA=x86-64-v4-amx: .*at most $best' $W/$name.amx"
        if [ "$best" = x86-64-v4-bf16 ]; then
            ok "$name: says which part of AMX is missing" "grep -Eq 'no AMX here \((the CPU has no AMX|the OS does not save|the kernel refused)' $W/$name.amx"
        fi
    fi
    timeout 20 env -u FT_CPU_ISA $cmd </dev/null >/dev/null 2>"$W/$name.default"; rc=$?
    ok "$name: unset, no word about the level or AMX (rc $rc: $(head -c 160 "$W/$name.default"))" \
       "! grep -Eq 'FT_CPU_ISA|AMX' $W/$name.default"
    FT_CPU_ISA=x86-64-v9 timeout 20 $cmd </dev/null >/dev/null 2>"$W/$name.bad"; rc=$?
    ok "$name: an unknown level is one line, exit 2 (rc $rc)" \
       "[ $rc = 2 ] && [ \$(wc -l < $W/$name.bad) = 1 ] && grep -q 'FT_CPU_ISA=x86-64-v9: unknown level' $W/$name.bad"
done
it_done
