#!/usr/bin/env bash
# Runs the Python examples of docs/FORMATS.md and docs/PROTOCOL.md (extracted
# verbatim between their markers) against a dataset and a live bin/loader, and compares their
# output with the C side (bin/loader get).
set -u
cd "$(dirname "$0")/.."
PY=/usr/bin/python3
T=${FT_TEST_TMP:-$(mktemp -d)}/it_loader_python.$$
mkdir -p "$T"
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT INT TERM
pass=0; fail=0
ok() { if [ "$1" = 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $2"; fi; }
extract() { sed -n "/<!-- example: $2 -->/,/<!-- end -->/p" "$1" | sed '1,2d;$d' | sed '$d'; }

extract docs/FORMATS.md read-dataset >"$T/read.py"
extract docs/PROTOCOL.md get-batch >"$T/get.py"
[ -s "$T/read.py" ] && [ -s "$T/get.py" ]; ok $? "examples not found in the docs"

bin/loader mkdata --out "$T/ds" --docs 500 --seed 4 --vocab 70000 --min-len 1 --max-len 50
ok $? "mkdata"
bin/loader mkdata --out "$T/ds16" --docs 50 --seed 4 --vocab 300 --min-len 0 --max-len 20
ok $? "mkdata u16"

# The Python reader on a u32 (vocab 70000) and a u16 dataset: it runs, and its length agrees
# with the tokens it printed; the meta agrees with what mkdata wrote.
for ds in ds ds16; do
    out=$("$PY" "$T/read.py" "$T/$ds" 5); ok $? "python reader on $ds"
    set -- $out
    [ "$#" -ge 4 ] && [ "$(( $# - 4 ))" = "$4" ]; ok $? "$ds: token count $4 vs $(( $# - 4 )) tokens printed"
done
out=$("$PY" "$T/read.py" "$T/ds" 0); set -- $out
[ "$1" = 500 ] && [ "$2" = 70000 ] && [ "$3" = 0 ]; ok $? "meta n_docs/vocab/eot: $1 $2 $3"

ep="ipc://$T/l0"
bin/loader --data "$T/ds" --bind "$ep" --quiet &
pid=$!
for i in $(seq 1 50); do [ -S "$T/l0" ] && break; sleep 0.1; done

# Every document's tokens are one of its rows in pad layout with B=1, T large, world=1:
# the Python reader's document must appear among the 500 rows of epoch 0.
doc=$("$PY" "$T/read.py" "$T/ds" 123 | cut -d' ' -f5-)
found=1
for s in $(seq 0 499); do
    row=$(bin/loader get --connect "$ep" --B 1 --T 60 --layout pad --step "$s" | "$PY" -c '
import json,sys
b=json.load(sys.stdin); row=b["tokens"][0]; m=b["mask"][0]
n=sum(m)   # targets t+1 <= len: n == len (capped at T)
print(" ".join(map(str,row[:n])))')
    if [ "$row" = "$doc" ]; then found=0; break; fi
done
ok $found "document 123 read by Python not served by the loader"

py=$("$PY" "$T/get.py" "$ep"); ok $? "python client"
c=$(bin/loader get --connect "$ep" --seed 1 --epoch 0 --step 3 --B 2 --T 16 | "$PY" -c '
import json,sys
b=json.load(sys.stdin); print(7, b["steps_per_epoch"], b["tokens"])')
[ "$py" = "$c" ]; ok $? "python batch differs from bin/loader get:
  $py
  $c"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
