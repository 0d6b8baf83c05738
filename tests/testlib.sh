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

# wait_until SECONDS COMMAND...: poll COMMAND every 0.05 s until it succeeds (0) or SECONDS pass (1). The
# deadline only keeps a broken run from hanging the suite; no test's verdict rests on how soon it came.
wait_until() {
    tries=$(($1 * 20))
    shift
    while ! "$@"; do
        tries=$((tries - 1))
        [ "$tries" -le 0 ] && return 1
        sleep 0.05
    done
}
# children_at_least PID N: PID has N or more child processes (a ddpsim run's ranks are its children).
children_at_least() { [ "$(pgrep -P "$1" | wc -l)" -ge "$2" ]; }
