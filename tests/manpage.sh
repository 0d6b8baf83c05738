#!/bin/sh
# manpage.sh - the man page documents exactly the options the program
# takes. For every command, the long options that `ddpsim CMD --help`
# prints (generated from the command's option table) are compared with the
# option entries (.TP lines) of that command's section of sim/ddpsim.1:
# every option must be documented there, and every documented option must
# exist. Prints one line per command and what differs; exits non-zero on
# any difference.
DDPSIM=${DDPSIM:-./sim/ddpsim}
top=${TOP_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
man=$top/sim/ddpsim.1
work=$(mktemp -d) || exit 99
trap 'rm -rf "$work"' EXIT
fail=0

# section title in the man page, and the command's words
commands='OPTIONS|
SELFCHECK OPTIONS|selfcheck
CHECK OPTIONS|check
BENCH ALLREDUCE OPTIONS|bench allreduce
BENCH MODEL OPTIONS|bench model
BENCH RUN OPTIONS|bench run
BENCH BATTERY OPTIONS|bench battery'

echo "$commands" | while IFS='|' read -r section words; do
    # shellcheck disable=SC2086
    if ! "$DDPSIM" $words --help >"$work/help" 2>&1; then
        echo "FAIL: ddpsim $words --help exits non-zero"
        echo x >>"$work/failed"
        continue
    fi
    # Options in --help: lines "  -x, --name ..." or "      --name ...".
    sed -n 's/^  \(-[A-Za-z], \|    \)--\([a-z0-9-]*\).*/\2/p' "$work/help" | sort -u >"$work/from_help"
    # The section: from .SH "<section>" (or .SH <section>) to the next .SH; its .TP entries' first \-\-name.
    awk -v sec="$section" '
        /^\.SH / { t = $0; sub(/^\.SH +/, "", t); gsub(/"/, "", t); inside = (t == sec); next }
        inside && prev == ".TP" { print }
        { prev = $0 }' "$man" |
        sed -n 's/.*\\-\\-\([a-z0-9\\-]*\).*/\1/p' | sed 's/\\-/-/g' | sort -u >"$work/from_man"
    if [ ! -s "$work/from_man" ]; then
        echo "FAIL: ddpsim.1 has no option entries under .SH $section"
        echo x >>"$work/failed"
        continue
    fi
    missing=$(comm -23 "$work/from_help" "$work/from_man" | tr '\n' ' ')
    extra=$(comm -13 "$work/from_help" "$work/from_man" | tr '\n' ' ')
    if [ -z "$missing" ] && [ -z "$extra" ]; then
        echo "PASS: ddpsim $words: $(wc -l <"$work/from_help") options, all in the man page's $section"
    else
        echo "FAIL: ddpsim $words: undocumented in $section: ${missing:-none}; documented but unknown: ${extra:-none}"
        echo x >>"$work/failed"
    fi
done
[ -f "$work/failed" ] && fail=1
exit $fail
