#!/bin/sh
# gpu-check-fake.sh - tests/gpu-check.sh end to end against the test double
# (tests/fakegpu), with this build's ddpsim: what the first GPU run will do,
# short of the GPU (2 and 3 ranks, a short --mutants budget). Checks its exit
# status, its summary table and the files it leaves for the README. Skips
# (77) in builds without NCCL.
DDPSIM=${DDPSIM:-./sim/ddpsim}
FAKE=${FAKEGPU_LIB:-./tests/fakegpu/libfakegpu.so}
[ -f "$FAKE" ] || { echo "SKIP: no $FAKE (ddpsim built without NCCL)"; exit 77; }
here=$(cd "$(dirname "$0")" && pwd)
FAKE=$(cd "$(dirname "$FAKE")" && pwd)/$(basename "$FAKE")
DDPSIM=$(cd "$(dirname "$DDPSIM")" && pwd)/$(basename "$DDPSIM")
ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0
export ASAN_OPTIONS
dir=$(mktemp -d) || exit 99
# The double's bootstrap segments carry this script's mark. Rank 0 unlinks one once every rank has met, so a rank
# the hang check kills before that leaves it behind (the double's, not ddpsim's: tests/nccl-fake.sh holds ddpsim's
# own to none): removed on the way out.
FAKEGPU_SHM_TAG=g$$
export FAKEGPU_SHM_TAG
trap 'rm -rf "$dir"; rm -f /dev/shm/fakegpu"$FAKEGPU_SHM_TAG"-*' EXIT
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "PASS: $1"; }
bad() { fail=$((fail + 1)); echo "FAIL: $1"; sed 's/^/  /' "$dir/run.log" | tail -40; }
check() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }

GPU_CHECK_DDPSIM=$DDPSIM GPU_CHECK_FAKE=$FAKE GPU_CHECK_RANKS="2 3" GPU_CHECK_MUTANTS_RANKS=2 GPU_CHECK_MUTANTS_S=5 \
    sh "$here/gpu-check.sh" "$dir/out" >"$dir/run.log" 2>&1
code=$?
check "gpu-check.sh against the double: exit 0 (every check held)" '[ "$code" -eq 0 ]'
s=$dir/out/summary.txt
check "the summary has a row per rank count: battery PASS, repeat same, the hang aborted in seconds" \
    'grep -Eq "^2 +PASS .* same .* [0-9]+ s" "$s" && grep -Eq "^3 +PASS .* same .* [0-9]+ s" "$s"'
check "... with the ulp histogram, the ring emulation share and the GPU time per allreduce" \
    'grep -Eq "^3 +PASS +[0-9]+/[0-9]+/[0-9]+/[0-9]+/[0-9]+ +[0-9.]+ +[0-9.]+ " "$s"'
check "every figure is left in the directory: JSON reports, logs, the NCCL tests' log" \
    'for f in battery-2.json classic-3.json repeat-2.txt hang-3.txt mutants-2.txt gpu-tests.log log.txt; do
         [ -s "$dir/out/$f" ] || exit 1; done'
check "the NCCL tests ran and passed" 'grep -q "passed, 0 failed" "$dir/out/gpu-tests.log"'
if "$DDPSIM" --version | grep -q "^MPI world: built" && command -v mpirun >/dev/null 2>&1; then
    check "NCCL over MPI ran, with the forked run's NCCL digest" \
        'grep -q "^# --world mpi --backend nccl, 2 ranks: PASS in [0-9]* s, NCCL digest [0-9a-f]* as forked" "$dir/out/log.txt"'
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
