#!/usr/bin/env bash
# The house rules the layout promises, checked on the source (docs/DEVICES.md):
#  - a model family is written once, over the device table: the family files hold no
#    OpenMP, no BLAS, no CUDA, and call no CPU op directly (only DEV(d, op, ...));
#  - model/ depends on no component folder (only common/ and itself).
set -u
cd "$(dirname "$0")/.."
pass=0; fail=0
ok() { if eval "$2"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $1"; fi; }

FAMILY_FILES="model/llama.c model/llama_block.c model/free.c model/generate.c model/kv_free.c model/adamw.c model/ltm.c model/kv_ltm.c
              model/mixers.c model/mixers_step.c model/mixer_block.c model/mixer_mix.c model/blockstack.c
              model/mixer_gen.c"
for f in $FAMILY_FILES; do
    [ -f "$f" ] || { fail=$((fail + 1)); echo "FAIL: $f is missing"; continue; }
    # comments stripped, so a comment may name what the code must not do
    code=$(sed -e 's://.*$::' -e 's:/\*.*\*/::g' "$f" | sed -e '/\/\*/,/\*\//d')
    bad=$(printf '%s\n' "$code" | grep -nE '#pragma omp|\bomp_|cblas|openblas|cuda|cublas|model_gemm\(|#include "model/ops\.h"|#include "model/ops_math\.h"' || true)
    ok "$f: no OpenMP, BLAS or CUDA${bad:+ (found: $bad)}" '[ -z "$bad" ]'
    direct=$(printf '%s\n' "$code" | grep -nE '(^|[^_a-zA-Z>.])(embedding|rmsnorm|linear|rope|attention|swiglu|crossentropy|binmap|post_sampler|qkv|free_bits|adamw_update|sumsq|uniform_fill|repeat_rows|sum_rows|copy_rows|add_forward|add_inplace|scale_inplace|mixer_tril|mixer_bias|unroll|token_mix_ref)(_[a-z_]+)?\(' \
             | grep -v 'DEV(' | grep -vE 'qkv_contiguous\(|rope_table_init\(' | grep -vE '(static|int|void|float|double) [a-z_]+\(' || true)
    ok "$f: ops only through the device table${direct:+ (direct: $direct)}" '[ -z "$direct" ]'
done
# (llama.c builds the RoPE tables on the host with ops.h's rope_table_init, before upload)
deps=$(grep -hoE '#include "(bus|loader|tokenizer|trainer|evaluator|sampler)/[^"]+"' model/*.c model/*.h model/*.cu 2>/dev/null || true)
ok "model/ includes no component folder${deps:+ ($deps)}" '[ -z "$deps" ]'
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
