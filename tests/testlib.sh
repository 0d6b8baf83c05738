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

# records_agree SCRATCH WHAT -- LIVE-ARGS: ddpsim LIVE-ARGS recorded into SCRATCH/d, then `ddpsim check` of it
# bitwise, give the same records check by check and rank by rank (tests/same_records.py): the live and the
# replay drivers of the ops (engine/verify/ops.h) agree.
records_agree() {
    ra_dir=$1 what=$2
    shift 3
    rm -rf "$ra_dir/d"
    "$DDPSIM" "$@" --record "$ra_dir/d" --json "$ra_dir/live.json" -q >"$ra_dir/live" 2>&1
    live=$?
    if [ "$live" -gt 1 ]; then
        bad "$what: the live run gave no verdict (exit $live)"
        sed 's/^/  live: /' "$ra_dir/live"
        return
    fi
    "$DDPSIM" check "$ra_dir/d" --tolerance bitwise --json "$ra_dir/check.json" -q >"$out" 2>"$err"
    if msg=$(/usr/bin/env python3 "$(dirname "$0")/same_records.py" "$ra_dir/live.json" "$ra_dir/check.json" 2>&1); then
        ok "$what: $msg"
    else
        bad "$what: $msg"
    fi
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

# shm_orphans PREFIX: the /dev/shm segments PREFIX-<pid>-... whose creator <pid> is gone, one name per line. A
# segment of a live process is not a leak: tests running beside this one (make -j) have theirs, so counting
# names before and after is not a test of this script's runs; a name left by a dead process is. (ddpsim unlinks
# its segment as soon as the ranks map it, and names it after the supervisor's pid.)
shm_orphans() {
    ls /dev/shm 2>/dev/null | while read -r name; do
        case $name in "$1"-*) ;; *) continue ;; esac
        pid=${name#"$1"-}
        pid=${pid%%-*}
        case $pid in '' | *[!0-9]*) continue ;; esac
        # gone, and its segment still there after it went (it unlinks before it exits)
        kill -0 "$pid" 2>/dev/null || { [ -e "/dev/shm/$name" ] && echo "$name"; }
    done
}
# shm_new_orphans PREFIX BEFORE: shm_orphans PREFIX less the names in BEFORE (an earlier shm_orphans's output).
shm_new_orphans() { shm_orphans "$1" | grep -vxF -e "$2"; }

# start_front_server PYTHON SOCKET: tests/python/front_server.py serving python3 -m ddpsim_torch for PYTHON at
# SOCKET (torch imported once, each run a fork of it), its log SOCKET.log; its pid in $front_server_pid. Returns
# once it is ready (the deadline only keeps a broken server from hanging the suite: its runs then fail, said).
start_front_server() {
    "$1" "$(dirname "$0")/python/front_server.py" serve "$2" >"$2.log" 2>&1 &
    front_server_pid=$!
    wait_until 300 grep -q "^front_server: ready" "$2.log" ||
        { echo "$(basename "$0"): the front server of $1 did not start:"; cat "$2.log"; }
}
