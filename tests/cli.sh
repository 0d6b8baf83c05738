#!/bin/sh
# cli.sh - the ddpsim program as a user meets it: exit codes, messages,
# the self-check verdict, and cleanup after SIGTERM/SIGINT (no rank process,
# no /dev/shm segment left). Prints "N passed, N failed" and exits non-zero
# on any failure.
DDPSIM=${DDPSIM:-./sim/ddpsim}
pass=0
fail=0
out=$(mktemp) || exit 99
err=$(mktemp) || exit 99
trap 'rm -f "$out" "$err"' EXIT

ok() { pass=$((pass + 1)); echo "PASS: $1"; }
bad() { fail=$((fail + 1)); echo "FAIL: $1"; sed 's/^/  stdout: /' "$out"; sed 's/^/  stderr: /' "$err"; }

# expect CODE PATTERN-IN-OUTPUT DESCRIPTION -- ARGS...
expect() {
    code=$1 pattern=$2 what=$3
    shift 4
    "$DDPSIM" "$@" >"$out" 2>"$err"
    got=$?
    if [ "$got" -ne "$code" ]; then
        bad "$what: exit $got, expected $code"
    elif [ -n "$pattern" ] && ! grep -q -- "$pattern" "$out" "$err"; then
        bad "$what: output lacks '$pattern'"
    else
        ok "$what"
    fi
}

segments() { ls /dev/shm 2>/dev/null | grep -c '^ddpsim-'; }
shm_before=$(segments)

expect 0 "verdict: PASS" "ddpsim --ranks 4 passes" -- --ranks 4
expect 0 "verdict: PASS" "single rank" -- --ranks 1 --count 17
expect 0 "verdict: PASS" "ring, pieces and jitter" -- --ranks 3 --algo ring --count 1000 --slot-bytes 256 --jitter 200 --jitter-seed 5
expect 0 "^# verdict: PASS" "quiet prints the verdict" -- --ranks 2 --quiet --count 100
expect 0 "--slot-bytes" "help lists the options" -- --help
expect 0 "ddpsim " "version" -- --version
expect 2 "out of range 1..256" "--ranks 0" -- --ranks 0
expect 2 "out of range 1..256" "--ranks 257" -- --ranks 257
expect 2 "not an integer" "--ranks four" -- --ranks four
expect 2 "ordered, ring or exact" "unknown algorithm" -- --algo tree
expect 2 "unknown option" "unknown option" -- --bogus
expect 2 "needs a value" "missing value" -- --ranks
expect 2 "between 1 and 2G" "--count 0" -- --count 0
expect 2 "not a size" "--count 1.5M" -- --count 1.5M
expect 2 "not a number of seconds" "--timeout abc" -- --timeout abc
expect 2 "unexpected argument" "stray argument" -- --ranks 2 extra
expect 2 "Try 'ddpsim --help'" "errors point to --help" -- --iters 0

expect 0 "mlp:4-8-3 " "bench model runs" -- bench model --model mlp:4-8-3 --model attn:8-4-8 --iters 2 --warmup 0
expect 2 "unknown model 'resnet'" "bench model: bad spec" -- bench model --model resnet
expect 2 "out of range 1..65536" "bench model: bad batch" -- bench model --batch 0
expect 2 "unknown benchmark" "bench: unknown kind" -- bench nothing
expect 2 "Usage: ddpsim bench" "bench without a kind" -- bench

# Interrupt a long run: exit 128+signal, and nothing left behind. Job control
# (set -m) so the background job does not start with SIGINT ignored.
set -m
for sig in TERM INT; do
    marker=$((900000 + $$ % 1000))
    "$DDPSIM" --ranks 4 --count 4M --iters 10000 --jitter-seed "$marker" >"$out" 2>"$err" &
    pid=$!
    sleep 1
    kill -s "$sig" "$pid"
    wait "$pid"
    got=$?
    want=$([ "$sig" = TERM ] && echo 143 || echo 130)
    sleep 0.2
    left=$(pgrep -f -- "--jitter-seed $marker" | wc -l)
    if [ "$got" -eq "$want" ] && [ "$left" -eq 0 ] && grep -q "interrupted" "$err"; then
        ok "SIG$sig mid-run: exit $got, no rank left"
    else
        bad "SIG$sig mid-run: exit $got (want $want), $left processes left"
    fi
done
set +m

if [ "$(segments)" -eq "$shm_before" ]; then ok "no /dev/shm segment left"; else bad "segments left in /dev/shm"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
