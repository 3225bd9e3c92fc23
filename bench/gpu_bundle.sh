#!/usr/bin/env bash
# Packs what a lent GPU machine needs to run our binaries into .gpu/bundle.tar.xz (.gpu/ is in
# .git/info/exclude; the device tool carries it with `carry: [".gpu"]`). Such a machine has CUDA,
# cuBLAS, NCCL, PyTorch and jq but none of our libraries (ZeroMQ, msgpack-c, LMDB, oneDNN,
# OpenBLAS, jansson, xxhash, Open MPI) and no network: the programs, every unit-test binary, the
# benches, and every library `ldd` names that is not the C runtime's or CUDA's (debug info
# stripped; ~35 MB). A session script unpacks it and points LD_LIBRARY_PATH at it and at the
# machine's own cuBLAS and NCCL (bench/gpu_session.sh). Run after `make -j2 && make bench-bins`.
set -eu
cd "$(dirname "$0")/.."
. bench/lib.sh
bench_no_args "$@"
G=$(mktemp -d /tmp/gpu_bundle.XXXXXX)
trap 'rm -rf "$G"' EXIT
mkdir -p "$G/lib" "$G/bin" "$G/build/tests" "$G/build/bench"
cp bin/* "$G/bin/"
for t in build/tests/test_*; do
    case "$t" in *.o|*.d) continue;; esac
    [ -x "$t" ] && cp "$t" "$G/build/tests/"
done
cp build/bench/train_step build/bench/sgemm build/bench/generate "$G/build/bench/"
strip --strip-debug "$G"/bin/* "$G"/build/*/*
for f in "$G"/bin/* "$G"/build/*/*; do ldd "$f" | awk '{print $3}' | grep '^/' || true; done | sort -u |
    grep -Ev 'linux-vdso|libc.so|libm.so|libstdc|libgcc_s|libpthread|libdl.so|librt.so|ld-linux|libcublas|libcudart|libnccl|libresolv' |
    while read -r l; do cp -L "$l" "$G/lib/"; done
# the tiktoken vocabularies (data/, not tracked: `make data`) for the tokenizer's tests
mkdir -p "$G/data/tiktoken/encoders" && cp data/tiktoken/encoders/*.json "$G/data/tiktoken/encoders/" 2>/dev/null || true
mkdir -p .gpu
tar -C "$G" -cf - . | xz -T2 -6 > .gpu/bundle.tar.xz
echo "gpu_bundle: .gpu/bundle.tar.xz $(du -h .gpu/bundle.tar.xz | cut -f1) ($(git rev-parse --short HEAD)$(git diff --quiet || echo ', uncommitted changes'))"
