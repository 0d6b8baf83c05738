#!/bin/sh
# bench-sched-races.sh [MAX_SEEDS] [CORRECT_SEEDS] - how --sched finds the races planted in the buckets
# example (tests/plugin/example_buckets.c), measured, for doc/MEASUREMENTS.md: for each race, at 2, 3 and 4
# ranks on the buckets scenario, the first seed of 1..MAX_SEEDS (100) that fails under --sched pct:2 and under
# --sched random, and how many of 10 reruns of the pct:2 seed end the same way (its verdict line and first
# divergence, or the mismatch or deadlock every rank reports); then CORRECT_SEEDS (1000) seeds of the correct
# example under each strategy. Two races are built here from the same source: the unlocked counter of buckets
# in flight (-DBUCKETS_UNLOCKED_PENDING, --race's test), whose window lies inside one statement, and the plain
# example for comparison. A benchmark, not a test: it prints what it finds and asserts nothing.
set -e
max=${1:-100}
correct=${2:-1000}
here=$(cd "$(dirname "$0")" && pwd)
DDPSIM=${DDPSIM:-$here/../sim/ddpsim}
plugins=${PLUGIN_DIR:-$here/plugin}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
${CC:-cc} -shared -fPIC -pthread -O2 -I"$here/../engine/impls" -DBUCKETS_UNLOCKED_PENDING \
    -o "$work/libbuckets_unlocked_pending.so" "$here/plugin/example_buckets.c"

# the lines that say how a run ended, whichever rank the supervisor saw fail first
outcome() {
    grep -E '^# (verdict|first divergence)' "$1" || true
    grep -o "deadlock under --sched[^,]*, every thread of the plugin blocked:[^,]*" "$1" | sort -u || true
    grep -o "ranks disagree on a collective: rank 0 called [^)]*) for [a-z' ]*[a-z], rank [0-9]* called [^)]*) for [a-z' ]*[a-z]" "$1" |
        sort -u || true
}
# first_seed RANKS LIB STRATEGY: the first failing seed of 1..max, or "-"
first_seed() {
    "$DDPSIM" --ranks "$1" --scenario buckets --impl "$2" --sched "$3" --chaos "1..$max" --fail-fast --timeout 60 \
        >"$work/range" 2>&1 || true
    s=$(sed -n 's/^chaos \([0-9]*\): \(FAIL\|FAULT\).*/\1/p' "$work/range" | head -1)
    echo "${s:--}"
}
# same_of_10 RANKS LIB SEED: how many of 10 reruns end as the first did
same_of_10() {
    "$DDPSIM" --ranks "$1" --scenario buckets --impl "$2" --sched pct:2 --chaos "$3" >"$work/a" 2>&1 || true
    outcome "$work/a" >"$work/first"
    n=0
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        "$DDPSIM" --ranks "$1" --scenario buckets --impl "$2" --sched pct:2 --chaos "$3" >"$work/b" 2>&1 || true
        outcome "$work/b" >"$work/again"
        cmp -s "$work/first" "$work/again" && n=$((n + 1))
    done
    echo "$n"
}

printf '# the first failing seed of 1..%d, --scenario buckets; same: of 10 reruns of the pct:2 seed, how many end the same way\n' "$max"
printf '#%-22s %5s %6s %6s %6s\n' race ranks pct:2 random same
for race in launch_before_copy done_before_unpack lost_wakeup clock_tick async_reset fuse_ready launch_as_filled \
    unlocked_pending; do
    lib=$plugins/libbuckets_$race.so
    [ -f "$lib" ] || lib=$work/libbuckets_$race.so
    for n in 2 3 4; do
        p=$(first_seed "$n" "$lib" pct:2)
        r=$(first_seed "$n" "$lib" random)
        same=-
        [ "$p" = - ] || same=$(same_of_10 "$n" "$lib" "$p")/10
        printf ' %-22s %5d %6s %6s %6s\n' "$race" "$n" "$p" "$r" "$same"
    done
done
for strategy in pct:2 random; do
    "$DDPSIM" --ranks 3 --scenario buckets --impl "$plugins/libexample_buckets.so" --sched "$strategy" \
        --chaos "1..$correct" >"$work/c" 2>&1 || true
    printf '# the correct example, 3 ranks, --sched %s: %s\n' "$strategy" "$(grep -E '^# [0-9]+ runs' "$work/c")"
done
