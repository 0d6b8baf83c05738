#!/bin/sh
# bench-sched.sh [RANKS] [SEEDS] [REPS] - what --sched costs: the buckets example
# (tests/plugin/libexample_buckets.so, two threads per rank) on its scenario, SEEDS chaos seeds in one
# command, REPS times for each of --sched off, random and pct:2; each line the median wall time per seed and
# its ratio to off, measured in the same run. A benchmark, not a test: it asserts nothing about time.
set -e
ranks=${1:-3}
seeds=${2:-20}
reps=${3:-5}
here=$(cd "$(dirname "$0")" && pwd)
DDPSIM=${DDPSIM:-$here/../sim/ddpsim}
plugin=${PLUGIN:-$here/plugin/libexample_buckets.so}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
printf '# %d ranks, --scenario buckets, %s, --chaos 1..%d, median of %d\n' "$ranks" "$(basename "$plugin")" "$seeds" "$reps"
printf '#%-8s %12s %8s\n' sched ms_per_seed ratio
base=
for mode in off random pct:2; do
    : >"$work/t"
    for _ in $(seq "$reps"); do
        t0=$(date +%s%N)
        "$DDPSIM" --ranks "$ranks" --scenario buckets --impl "$plugin" --sched "$mode" --chaos "1..$seeds" \
            >"$work/out" 2>&1 || { tail -5 "$work/out"; exit 1; }
        t1=$(date +%s%N)
        awk -v a="$t0" -v b="$t1" -v n="$seeds" 'BEGIN {print (b - a) / 1e6 / n}' >>"$work/t"
    done
    m=$(median <"$work/t")
    [ -n "$base" ] || base=$m
    awk -v mode="$mode" -v m="$m" -v b="$base" 'BEGIN {printf " %-8s %12.2f %8.2f\n", mode, m, m / b}'
done
