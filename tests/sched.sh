#!/bin/sh
# sched.sh - --sched (engine/impls/interleave.c, sim/interpose.c): a
# plugin's threads one at a time, in the seed's interleaving, on virtual
# clocks. The detectors firing, each on a plugin with a planted race (the
# buckets example built with a window between two of its calls,
# tests/plugin/example_buckets.c), and the same seed giving the same result
# every time:
#   - a bucket launched before its last gradient is copied in, under pct:2,
#     and a bucket counted done before its result is unpacked, under random:
#     some seed of 1..30 fails, and that seed fails again, three times, with
#     the same first divergence and the same scheduler figures; a seed that
#     passed passes again;
#   - a lost wakeup: some seed deadlocks, and the rank fails naming each
#     thread's call instead of hanging; again for the same seed;
#   - a collective decided by a rank's own 5 ms tick: on virtual clocks a
#     seed gives the same mismatch every time;
#   - buckets fused by whatever is ready when the communication thread
#     wakes (Horovod's fusion without its coordinator): ranks call
#     allreduces of different sizes;
#   - a reset handed to the communication thread and never waited for,
#     which loses the launches made before it runs: a deadlock under pct:2;
#   - the correct example passes 30 seeds of each strategy, and so does one
#     that polls a semaphore with a timeout and sleeps (the virtual clock);
#   - the default battery's chaos pass runs a plugin's threads under
#     pct:2: the lost wakeup fails its row, whose replay line fails again.
#   - --trace of a scheduled run replays (--replay) to the same failure and
#     the same interleaving's digest, a deadlock to the same deadlock.
# Refused before any rank starts (exit 2): a scheduler that is not one, a
# built-in, the battery, --race. --json carries each rank's figures.
DDPSIM=${DDPSIM:-./sim/ddpsim}
. "$(dirname "$0")/testlib.sh"
here=$(cd "$(dirname "$0")" && pwd)
plugins=${PLUGIN_DIR:-$here/plugin}
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$out" "$err" "$tmp"' EXIT
run="--ranks 3 --scenario buckets"

# A range's first seed with a verdict other than pass (its "chaos S:" line), and its first passing seed.
first_failing() { sed -n 's/^chaos \([0-9]*\): \(FAIL\|FAULT\).*/\1/p' "$1" | head -1; }
first_passing() { sed -n 's/^chaos \([0-9]*\): pass$/\1/p' "$1" | head -1; }
# What must not change between runs of one seed: the verdict, the first divergence, the scheduler's figures, the
# reason a rank failed (without the supervisor's view of which rank it saw fail first).
outcome() {
    grep -E '^# (verdict|first divergence|sched:|  PCT)' "$1"
    grep -o 'deadlock under --sched[^,]*, every thread of the plugin blocked:[^,]*' "$1" | sort -u
    # the mismatch as every rank sees it (what a rank says after the world aborts depends on when it saw the abort)
    grep -o "ranks disagree on a collective: rank 0 called [^)]*) for [a-z' ]*[a-z], rank [0-9]* called [^)]*) for [a-z' ]*[a-z]" \
        "$1" | sort -u
}

# same_every_time NAME PLUGIN STRATEGY WANT: seeds 1..30; the first failing seed fails three more times, the
# same way (and, when WANT is given, its output holds WANT); the first passing one passes again.
same_every_time() {
    name=$1 lib=$plugins/lib$2.so strategy=$3 want=$4
    "$DDPSIM" $run --impl "$lib" --sched "$strategy" --chaos 1..30 >"$tmp/range" 2>&1
    s=$(first_failing "$tmp/range")
    if [ -z "$s" ]; then
        cp "$tmp/range" "$out"
        : >"$err"
        bad "$name under --sched $strategy: no seed of 1..30 fails"
        return
    fi
    ok "$name under --sched $strategy: seed $s of 1..30 fails ($(grep -c '^chaos [0-9]*: \(FAIL\|FAULT\)' "$tmp/range") of 30)"
    "$DDPSIM" $run --impl "$lib" --sched "$strategy" --chaos "$s" >"$tmp/a" 2>&1
    code=$?
    outcome "$tmp/a" >"$tmp/first"
    same=1
    for i in 2 3 4; do
        "$DDPSIM" $run --impl "$lib" --sched "$strategy" --chaos "$s" >"$tmp/b" 2>&1
        c=$?
        outcome "$tmp/b" >"$tmp/again"
        if [ "$c" != "$code" ] || ! cmp -s "$tmp/first" "$tmp/again"; then
            same=0
            diff "$tmp/first" "$tmp/again" | head -6 | sed 's/^/  /'
        fi
    done
    if [ "$code" -ne 0 ] && [ "$same" = 1 ] && [ -s "$tmp/first" ] && { [ -z "$want" ] || grep -q -- "$want" "$tmp/a"; }; then
        ok "... seed $s fails again 3 times, the same way (exit $code): $(grep -m1 -v '^# verdict' "$tmp/first" | cut -c1-110)"
    else
        cp "$tmp/a" "$out"
        : >"$err"
        bad "... seed $s rerun: exit $code, same=$same"
    fi
    p=$(first_passing "$tmp/range")
    if [ -n "$p" ]; then
        expect 0 "^# verdict: PASS" "... and seed $p, which passed, passes again" -- $run --impl "$lib" --sched "$strategy" \
            --chaos "$p"
    fi
}

same_every_time "a bucket launched before its last gradient is copied in" buckets_launch_before_copy pct:2 \
    "^# first divergence: grab"
same_every_time "a bucket counted done before its result is unpacked" buckets_done_before_unpack random \
    "^# first divergence: grab"
same_every_time "a lost wakeup" buckets_lost_wakeup random \
    "deadlock under --sched, every thread of the plugin blocked: thread 0 (the rank's own) in pthread_cond_wait; thread 1 in pthread_cond_wait"
same_every_time "a collective decided by a rank's own clock" buckets_clock_tick pct:2 "ranks disagree on a collective"
same_every_time "buckets fused as they happen to be ready, with no coordinator" buckets_fuse_ready random \
    "ranks disagree on a collective"
same_every_time "a reset asked of the communication thread and never waited for" buckets_async_reset pct:2 \
    "deadlock under --sched, every thread of the plugin blocked: thread 0 (the rank's own) in pthread_cond_wait"

# The lost wakeup's deadlock is a rank's failure with the documented exit code, not a hang; no segment is left.
"$DDPSIM" $run --impl "$plugins/libbuckets_lost_wakeup.so" --sched random --chaos 1..30 >"$tmp/range" 2>&1
s=$(first_failing "$tmp/range")
expect 3 "deadlock under --sched" "the lost wakeup's seed $s: the rank fails (exit 3) naming the deadlock" -- \
    $run --impl "$plugins/libbuckets_lost_wakeup.so" --sched random --chaos "$s"
left=$(shm_orphans /ddpsim 2>/dev/null)
[ -z "$left" ] && ok "... and leaves no shared memory behind" || bad "... left: $left"

# The correct example: every seed of both strategies passes; the figures and PCT's bound are printed.
for strategy in pct:2 random; do
    expect 0 "^# 30 runs, 0 failing" "the correct buckets example passes 30 seeds of --sched $strategy" -- \
        $run --impl "$plugins/libexample_buckets.so" --sched "$strategy" --chaos 1..30
done
# Semaphores, timed waits and sleeps: the example polling a semaphore with a 2 ms timeout on the wall clock and
# sleeping before each reduction (-DBUCKETS_POLL) is right, so it passes; a sleep the scheduler could not end
# (the virtual clock's jump when only sleepers are left) would be a deadlock. The same seed, the same figures.
for strategy in pct:2 random; do
    expect 0 "^# 20 runs, 0 failing" "a correct example that polls a semaphore and sleeps passes 20 seeds of --sched $strategy" -- \
        $run --impl "$plugins/libbuckets_poll.so" --sched "$strategy" --chaos 1..20
done
"$DDPSIM" $run --impl "$plugins/libbuckets_poll.so" --sched random --chaos 3 2>&1 | grep '^# sched:' >"$tmp/f1"
"$DDPSIM" $run --impl "$plugins/libbuckets_poll.so" --sched random --chaos 3 2>&1 | grep '^# sched:' >"$tmp/f2"
[ -s "$tmp/f1" ] && cmp -s "$tmp/f1" "$tmp/f2" && ok "... a seed twice: the same points, switches and virtual time ($(cut -c9-90 "$tmp/f1"))" ||
    bad "... a seed twice: '$(cat "$tmp/f1")' then '$(cat "$tmp/f2")'"
expect 0 "^#   PCT finds a bug of depth d <= 3 .* d=1 0.5, d=2 " "a single run prints the scheduler's figures and PCT's bound" -- \
    $run --impl "$plugins/libexample_buckets.so" --sched pct:3
grep -q "^# sched: rank [0-9] ran 2 threads through [0-9]* scheduling points" "$out" &&
    ok "... with each rank's threads (2: its own and the communication thread) and points" || bad "... no figures line"

"$DDPSIM" $run --impl "$plugins/libexample_buckets.so" --sched pct:2 --chaos 5 --json "$tmp/s.json" -q >"$out" 2>"$err"
if /usr/bin/env python3 - "$tmp/s.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))["sched"]
assert s["strategy"] == "pct:2" and s["seed"] == 5 and len(s["ranks"]) == 3, s
assert all(r["threads"] == 2 and r["points"] > 0 and 0 < r["horizon"] and r["virtual_ns"] > 0 and len(r["digest"]) == 16 for r in s["ranks"]), s
EOF
then ok "--json has each rank's scheduler figures"; else bad "--json's sched"; fi

# --trace and --replay: a scheduled run's trace carries its strategy and seed (the run's key), and replays with them
# to the same failure and the same interleaving (its digest); one cut short by a deadlock deadlocks again; without
# --sched it is another run's trace.
lib=$plugins/libbuckets_launch_before_copy.so
"$DDPSIM" $run --impl "$lib" --sched pct:2 --chaos 1 --trace "$tmp/t.jsonl" >"$tmp/a" 2>&1
expect 1 "^# verdict: FAIL" "a scheduled run's trace replays" -- $run --impl "$lib" --sched pct:2 --chaos 1 --replay "$tmp/t.jsonl"
outcome "$tmp/a" >"$tmp/first"
outcome "$out" >"$tmp/again"
grep -q "^# sched: the interleaving's digest" "$tmp/first" && cmp -s "$tmp/first" "$tmp/again" &&
    ok "... to the same first divergence and the same interleaving's digest" || bad "... not the same: $(diff "$tmp/first" "$tmp/again")"
expect 2 "was recorded for another run.*sched=pct:2 sched_seed=1" "... and without --sched it is another run's" -- \
    $run --impl "$lib" --chaos 1 --replay "$tmp/t.jsonl"
lib=$plugins/libbuckets_lost_wakeup.so
"$DDPSIM" $run --impl "$lib" --sched random --chaos 1 --trace "$tmp/t2.jsonl" >/dev/null 2>&1
expect 3 "the recorded run ended: deadlock under --sched" "a deadlocked scheduled run's trace replays to the same deadlock" -- \
    $run --impl "$lib" --sched random --chaos 1 --replay "$tmp/t2.jsonl"

# The default battery's chaos pass schedules a plugin's threads (pct:2, one interleaving per seed): the lost
# wakeup fails its row, whose replay line fires it again; the correct example passes the pass.
expect 3 "^ buckets, chaos 1-3 .*FAULT .*deadlock under --sched" "the battery's chaos pass finds the lost wakeup" -- \
    --ranks 3 --impl "$plugins/libbuckets_lost_wakeup.so"
replay=$(sed -n 's/^# replay: ddpsim \(.* --scenario buckets --sched pct:2 --chaos [0-9]*\)$/\1/p' "$out")
if [ -n "$replay" ] && grep -q "^#   the chaos pass: buckets .*each seed an interleaving of --sched pct:2" "$out"; then
    ok "... the header says so, and the row's replay line names the strategy and the seed"
else
    bad "... no replay line with --sched pct:2 --chaos"
fi
# shellcheck disable=SC2086
expect 3 "deadlock under --sched" "... which fires it again" -- $replay
expect 0 "^ buckets, chaos 1-3 .*PASS" "the correct example passes the scheduled chaos pass" -- \
    --ranks 3 --impl "$plugins/libexample_buckets.so"

# Refused before any rank starts
expect 2 "'pct:0' is not a scheduler" "a depth of 0" -- $run --impl "$plugins/libexample_buckets.so" --sched pct:0
expect 2 "'pct:2:0' is not a scheduler" "a horizon of 0" -- $run --impl "$plugins/libexample_buckets.so" --sched pct:2:0
expect 2 "'fifo' is not a scheduler" "an unknown strategy" -- $run --impl "$plugins/libexample_buckets.so" --sched fifo
expect 2 "schedules the threads of a plugin's own code" "a built-in" -- $run --impl bucketed --sched random
expect 2 "schedules a single run: add --scenario" "the battery" -- --ranks 3 --impl "$plugins/libexample_buckets.so" \
    --sched random
# (a ddpsim built with a sanitizer, or one without ThreadSanitizer's runtime, refuses --race itself first)
expect 2 "cannot run beside --race\|--race: " "--race" -- $run --impl "$plugins/libexample_buckets.so" --sched random --race
expect 0 "^# verdict: PASS" "--sched off is a plain run" -- $run --impl "$plugins/libexample_buckets.so" --sched off
finish
