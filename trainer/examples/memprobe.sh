#!/usr/bin/env bash
# Why the jointly trained memory model ignores its embedding (README, masked mixers (4)):
# builds tests/lib/memprobe.c against the libraries of `make` and trains its small memory
# model without and with the start vector (--memory-start) and the autoencoder of the same
# shape, MEMPROBE_STEPS steps each (default 2000, about 1-3 minutes a run on one thread),
# one after the other, on make mixers' Brown BPE-4096 dataset (made first if missing).
# MEMPROBE_SEEDS (default 1): the weights' seeds. Writes OUT (default results/mixers_memprobe)/
# <variant>-seed<seed>-<steps>.log and appends its commands to commands.txt.
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${MEMPROBE_STEPS:-2000}; OUT=${MEMPROBE_OUT:-results/mixers_memprobe}
DATA=${MEMPROBE_DATA:-runs/mixers/data}; W=${MEMPROBE_DIR:-runs/memprobe}
mkdir -p "$OUT" "$W"
show() { local a l='$'; for a in "$@"; do l+=" $(printf '%q' "$a")"; done; echo "$l"; }
run() { show "$@" | tee -a "$OUT/commands.txt" >&2; "$@"; }
[ -d "$DATA" ] || { echo "memprobe.sh: no dataset $DATA: run make mixers (or its first two steps) first, or set MEMPROBE_DATA" >&2; exit 1; }
make -s all
LIBS=$(make -s -p -n 2>/dev/null | sed -n 's/^LDLIBS *:= *//p' | head -1)   # the Makefile's, CUDA and MPI included where found
run cc -O2 -std=gnu11 -I. -fopenmp -o "$W/memprobe" tests/lib/memprobe.c -Wl,--start-group build/lib*.a -Wl,--end-group $LIBS
for seed in ${MEMPROBE_SEEDS:-1}; do
    for v in ${MEMPROBE_VARIANTS:-mem mem-start ae}; do
        log="$OUT/$v-seed$seed-$STEPS.log"
        echo "\$ OMP_NUM_THREADS=1 $(show "$W/memprobe" "$DATA" "$STEPS" "$v" "$seed" | cut -c3-) > $(printf '%q' "$log")" | tee -a "$OUT/commands.txt" >&2
        OMP_NUM_THREADS=1 "$W/memprobe" "$DATA" "$STEPS" "$v" "$seed" > "$log"
    done
done
