#!/bin/sh
# tests/emu/prepass.sh IN.cu OUT.cc: a .cu file as C++ for the execution-model emulator
# (tests/emu/include/emu_device.h). The one CUDA syntax a macro cannot express is rewritten,
# line for line (a #line directive keeps file and line numbers):
#   kernel<<<grid, block[, smem[, stream]]>>>(args)  ->  ::emu::make_launch(kernel, "kernel", grid, block...)(args)
#   extern __shared__ T name[];                      ->  T *name = (T *)::emu::dyn_shared();
#   static __shared__                                ->  __shared__ (which is static already)
# extern __shared__ must be declared inside a kernel (at file scope it is refused: the pointer
# would be set once, not per launch).
set -eu
in=$1 out=$2
if grep -nE '^extern[[:space:]]+__shared__' "$in" >&2; then
    echo "$in: extern __shared__ at file scope; declare it inside the kernel for the emulator" >&2
    exit 1
fi
{
    printf '#line 1 "%s"\n' "$in"
    sed -E \
        -e 's/static[[:space:]]+__shared__/__shared__/g' \
        -e 's/extern[[:space:]]+__shared__[[:space:]]+(__align__\([0-9]+\)[[:space:]]+)?([^;]*[^[:space:]])[[:space:]]+([A-Za-z_][A-Za-z0-9_]*)[[:space:]]*\[[[:space:]]*\][[:space:]]*;/\2 *\3 = (\2 *)::emu::dyn_shared();/g' \
        -e 's/([A-Za-z_][A-Za-z0-9_:]*(<[^<>;()]*>)?)[[:space:]]*<<</::emu::make_launch(\1, "\1", /g' \
        -e 's/>>>/)/g' \
        "$in"
} >"$out.tmp"
mv "$out.tmp" "$out"
