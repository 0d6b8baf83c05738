# testlib.sh - what the shell tests share (sourced, not run): counting
# passes and failures, showing a failure's output, and running ddpsim
# against an exit code and a pattern. The sourcing script sets DDPSIM and
# calls finish at its end.
pass=0
fail=0
out=$(mktemp) || exit 99
err=$(mktemp) || exit 99
trap 'rm -f "$out" "$err"' EXIT

ok() { pass=$((pass + 1)); echo "PASS: $1"; }
bad() { fail=$((fail + 1)); echo "FAIL: $1"; sed 's/^/  stdout: /' "$out"; sed 's/^/  stderr: /' "$err"; }
# expect_cmd CODE PATTERN-IN-OUTPUT DESCRIPTION -- COMMAND...: COMMAND exits CODE and prints PATTERN
expect_cmd() {
    code=$1 pattern=$2 what=$3
    shift 4
    "$@" >"$out" 2>"$err"
    got=$?
    if [ "$got" -ne "$code" ]; then
        bad "$what: exit $got, expected $code"
    elif [ -n "$pattern" ] && ! grep -q -- "$pattern" "$out" "$err"; then
        bad "$what: output lacks '$pattern'"
    else
        ok "$what"
    fi
}

# expect CODE PATTERN-IN-OUTPUT DESCRIPTION -- ARGS...: ddpsim ARGS exits CODE and prints PATTERN
expect() {
    code=$1 pattern=$2 what=$3
    shift 4
    expect_cmd "$code" "$pattern" "$what" -- "$DDPSIM" "$@"
}

finish() {
    echo "$pass passed, $fail failed"
    [ "$fail" -eq 0 ]
}
