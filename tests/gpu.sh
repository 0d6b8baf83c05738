#!/bin/sh
# gpu.sh - the NCCL backend on a real GPU: 4 ranks on however many GPUs there
# are (several ranks per GPU through separate NCCL host ids when there are
# fewer), the attention model, bucketed, ncclAvg, a catalogued bug still
# caught, and determinism (two identical runs give the same result digest).
# Prints the figures the README quotes. Skips (77) where ddpsim was built
# without NCCL or no GPU is usable; it never passes without running.
DDPSIM=${DDPSIM:-./sim/ddpsim}
version=$("$DDPSIM" --version 2>&1) || { echo "FAIL: ddpsim --version"; exit 1; }
case $version in
*"not built"*) echo "SKIP: ddpsim was built without NCCL"; exit 77 ;;
*"GPU(s) visible"*) ;;
*) echo "SKIP: no usable GPU ($version)"; exit 77 ;;
esac
echo "$version"
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
pass=0
fail=0
dir=$(mktemp -d) || exit 99
trap 'rm -rf "$dir"' EXIT
out=$dir/out err=$dir/err

ok() { pass=$((pass + 1)); echo "PASS: $1"; }
bad() { fail=$((fail + 1)); echo "FAIL: $1"; sed 's/^/  stdout: /' "$out"; sed 's/^/  stderr: /' "$err"; }
# expect CODE DESCRIPTION -- ARGS: run, check the exit code, show the backend's figures
expect() {
    code=$1 what=$2
    shift 3
    start=$(date +%s.%N)
    "$DDPSIM" "$@" >"$out" 2>"$err"
    got=$?
    secs=$(echo "$(date +%s.%N) - $start" | bc 2>/dev/null || echo "?")
    if [ "$got" -ne "$code" ]; then
        bad "$what: exit $got, expected $code"
        return 1
    fi
    ok "$what (${secs} s)"
    grep -e "^#   environment" -e "own NCCL_HOSTID" -e "^# ulp distance" -e "^# nccl:" -e "every chaos seed" \
        -e "^# verdict" "$out" | sed 's/^/    /'
}
digest() { sed -n 's/^# nccl: result digest \([0-9a-f]*\).*/\1/p' "$out"; }

expect 0 "the scenario battery through NCCL" -- --ranks 4 --backend nccl
expect 0 "ddpsim --ranks 4 --backend nccl --scenario classic" -- --ranks 4 --backend nccl --scenario classic
d1=$(digest)
expect 0 "the same run again" -- --ranks 4 --backend nccl --scenario classic
d2=$(digest)
if [ -n "$d1" ] && [ "$d1" = "$d2" ]; then ok "two identical runs agree bitwise (digest $d1)"; else bad "digests differ: '$d1' vs '$d2'"; fi
expect 0 "--repeat 2: the implementation's gradients identical in both runs" -- --ranks 4 --backend nccl --scenario classic --repeat 2
if grep -q "implementation under every chaos seed: bitwise identical" "$out"; then ok "repeat says bitwise identical"; else bad "repeat did not say bitwise identical"; fi
expect 0 "ddpsim --ranks 2 --backend nccl --model attn" -- --ranks 2 --backend nccl --model attn
expect 0 "bucketed through NCCL" -- --ranks 4 --backend nccl --impl bucketed
expect 0 "ncclAvg" -- --ranks 3 --backend nccl --nccl-op avg --scenario classic
expect 1 "a catalogued bug is caught through NCCL" -- --ranks 4 --backend nccl --impl sync-on-exit --scenario classic
expect 0 "a larger model, one 4 MiB bucket per sync" -- --ranks 4 --backend nccl --model mlp:256-1024-1024-256 \
    --bucket-cap 4M --schedule '2*(nosync{fwd bwd} fwd bwd grab step zero)'
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
