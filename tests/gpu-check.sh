#!/bin/sh
# gpu-check.sh - the GPU check, in one go, on a machine with a GPU: build
# ddpsim with CUDA and NCCL in a scratch directory (the program only: such a
# machine may have no CUnit), then run tests/gpu.sh, which prints the
# figures (ulp histogram, ring-emulation share, NCCL times, digests).
# Takes well under 3 minutes. Exit status: tests/gpu.sh's (77: no GPU).
#   sh tests/gpu-check.sh            build in ./build-gpu
#   BUILD=/tmp/b sh tests/gpu-check.sh
set -e
src=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$src/build-gpu}
echo "# gpu-check $(date -u '+%Y-%m-%d %H:%M UTC') on $(uname -n)"
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
[ -x "$src/configure" ] || (cd "$src" && autoreconf -fi >/dev/null)
# A source tree configured in place cannot host a separate build: build there.
[ -f "$src/config.status" ] && build=$src
mkdir -p "$build"
cd "$build"
"$src/configure" --with-cuda --with-nccl >configure.log 2>&1 || { tail -20 configure.log; exit 1; }
grep -A12 "^ddpsim .* configuration" configure.log || true
make -j"$(nproc 2>/dev/null || echo 4)" sim/ddpsim >make.log 2>&1 || { tail -30 make.log; exit 1; }
set +e
start=$(date +%s)
DDPSIM=$build/sim/ddpsim sh "$src/tests/gpu.sh"
code=$?
echo "# tests/gpu.sh: exit $code in $(( $(date +%s) - start )) s"
exit $code
