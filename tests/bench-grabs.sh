#!/bin/sh
# bench-grabs.sh [RANKS] [MAX_GRABS] - memory against the number of grabs (issue 18, item 2): the same
# schedule shape, windows of 999 no_sync micro-steps each grabbed and a syncing one grabbed before a
# zero_grad, run with 10,000, 100,000 and MAX_GRABS (1,000,000) grabs in one go. Each line: the grabs, the
# wall time, the parent's peak RSS, the largest rank's peak RSS and the ranks' PSS at their end (every shared
# page counted once), as the report's "# time" line gives them. The records stream from the ranks to the
# parent through a fixed ring (engine/verify/stream.h) and the report's lines go to temporary files, so the
# columns stay flat; what still grows is the schedule itself, one byte per op (5 ops a grab here).
set -e
ranks=${1:-4}
max=${2:-1000000}
here=$(cd "$(dirname "$0")" && pwd)
DDPSIM=${DDPSIM:-$here/../sim/ddpsim}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '# %d ranks; schedule: W*( 999*(nosync{fwd bwd} grab) fwd bwd grab zero ), 1000 grabs per window\n' "$ranks"
printf '#%9s %9s %12s %14s %13s\n' grabs wall_s parent_MiB rank_peak_MiB ranks_pss_MiB
for grabs in 10000 100000 "$max"; do
    w=$((grabs / 1000))
    "$DDPSIM" --ranks "$ranks" --schedule "$w*( 999*(nosync{fwd bwd} grab) fwd bwd grab zero )" >"$work/out.txt" \
        || { tail -5 "$work/out.txt"; exit 1; }
    grep -q "verdict: PASS ($grabs grabs" "$work/out.txt" || { tail -5 "$work/out.txt"; exit 1; }
    # "# time T s; memory: R MiB peak in the largest rank; at their end the N ranks held P MiB together, ...; M MiB peak in the parent"
    grep '^# time' "$work/out.txt" | sed -e 's/^# time \([0-9.]*\) s; memory: \([0-9.]*\) MiB peak in the largest rank; at their end the [0-9]* ranks held \([0-9.]*\) MiB together.*; \([0-9.]*\) MiB peak in the parent$/\1 \4 \2 \3/' |
        awk -v g="$grabs" '{printf " %9d %9.1f %12.1f %14.1f %13.1f\n", g, $1, $2, $3, $4}'
done
