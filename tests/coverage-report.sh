#!/bin/sh
# coverage-report.sh [BUILD] - line coverage of engine/ in a build configured
# with --enable-coverage, after its make check: every source file's lines
# executed (gcov), per layer and in all. The ranks end with _exit and write
# their counts themselves (world.c rank_process); the rank driver, the op
# semantics and the reference DDP run only in ranks, so their figures being
# above zero is what shows the ranks' counts arrived: the script fails if
# engine/verify/ops.c or engine/ddp/ddp_ref.c shows none, or if no counts
# exist at all (not a coverage build, or make check not run).
build=${1:-.}
cd "$build" || exit 2
command -v gcov >/dev/null 2>&1 || { echo "coverage-report.sh: gcov not found"; exit 2; }
if [ -z "$(find engine -name '*.gcda' | head -1)" ]; then
    echo "coverage-report.sh: no counts under $build/engine (configure --enable-coverage, then make check)"
    exit 1
fi
tmp=$(mktemp) || exit 2
trap 'rm -f "$tmp"' EXIT
# An automake object engine/L/libddpsim_L_a-NAME.o is engine/L/NAME.c compiled.
find engine -name '*.gcno' | sort | while read -r gcno; do
    base=$(basename "$gcno" .gcno)
    src=$(dirname "$gcno")/${base#*-}.c
    [ -f "$src" ] || continue
    # gcov -n prints "File 'SRC'" then "Lines executed:P% of N" for the source and each header it inlines.
    gcov -n -o "${gcno%.gcno}.o" "$src" 2>/dev/null |
        awk -v src="$src" '/^File / { f = ($2 == "\x27" src "\x27") }
             f && /^Lines executed:/ { split($2, a, ":"); p = a[2]; sub("%", "", p); n = $4;
                                       printf "%s %d %d\n", src, int(p * n / 100 + 0.5), n; f = 0 }'
done >"$tmp"
awk '{ split($1, d, "/"); layer = d[1] "/" d[2]; hit[layer] += $2; all[layer] += $3; H += $2; N += $3 }
     END { for (l in all) printf "  %-16s %5.1f%% of %6d lines\n", l, 100 * hit[l] / all[l], all[l] | "sort";
           close("sort"); printf "engine/ in all:     %5.1f%% of %6d lines (make check, --enable-coverage)\n", 100 * H / N, N }' "$tmp"
echo "least covered files:"
awk '$3 > 0 { printf "  %-36s %5.1f%% of %5d\n", $1, 100 * $2 / $3, $3 }' "$tmp" | sort -k2 -n | head -8
fail=0
for f in engine/verify/ops.c engine/verify/rank.c engine/ddp/ddp_ref.c; do
    hits=$(awk -v f="$f" '$1 == f { print $2 }' "$tmp")
    if [ -z "$hits" ] || [ "$hits" -eq 0 ]; then
        echo "FAIL: $f shows no line executed: the ranks' counts did not arrive"
        fail=1
    fi
done
exit $fail
