#!/bin/sh
# progress.sh - the progress line of long commands (sim/progress.c): on a
# terminal (util-linux's script(1) gives the command one) the battery,
# --mutants and a chaos range rewrite one line of stderr ("scenario 3 of
# 23: window-5 (1.2 s)", erased before each row), and the report's lines
# are the same as without it; with --quiet, or when stderr is a pipe, no
# byte of it is written. Skips (77) without script(1).
DDPSIM=${DDPSIM:-./sim/ddpsim}
. "$(dirname "$0")/testlib.sh"
command -v script >/dev/null 2>&1 || { echo "SKIP: no script(1) to give the command a terminal"; exit 77; }
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$out" "$err" "$tmp"' EXIT
ESC=$(printf '\033')

# on_tty FILE -- ARGS: ddpsim ARGS on a terminal, what the terminal showed into FILE (its exit status: ddpsim's)
on_tty() {
    f=$1
    shift 2
    cmd=$(printf ' %s' "$DDPSIM" "$@")
    script -q -e -c "$cmd" /dev/null >"$f" 2>&1 </dev/null
}
# plain FILE: FILE without the progress line's bytes (CR-rewritten text up to each erase) and CR LF line ends
plain() { tr -d '\r' <"$1" | sed "s/[^$ESC]*$ESC\[K//g"; }

# 3 ranks: a row per scenario (at a power of two the scaling-order ones run at N-1 too, as more rows)
on_tty "$tmp/tty" -- --ranks 3
code=$?
n=$(($("$DDPSIM" --scenarios | grep -c '^[a-z]') + 1)) # and the chaos pass's row
if [ "$code" -ne 0 ]; then
    bad "the battery on a terminal: exit $code"
elif ! grep -q "scenario 1 of $n: classic (" "$tmp/tty" || ! grep -q "scenario $n of $n: " "$tmp/tty"; then
    bad "the battery on a terminal: no 'scenario k of $n' line"
elif ! grep -q "$ESC\[K" "$tmp/tty"; then
    bad "the battery on a terminal: the line is never erased"
else
    ok "the battery on a terminal: 'scenario k of $n: NAME (elapsed)', rewritten and erased"
fi
"$DDPSIM" --ranks 3 >"$out" 2>"$err"
if [ -s "$err" ] || grep -q "$ESC" "$out"; then
    bad "the battery in a pipe: progress bytes written"
else
    ok "the battery in a pipe: no progress byte"
fi
# The rows and the verdict are the same with and without the line (the time lines aside).
plain "$tmp/tty" | grep -v '^# time' >"$tmp/a"
grep -v '^# time' "$out" >"$tmp/b"
if cmp -s "$tmp/a" "$tmp/b"; then
    ok "the battery on a terminal: once the line is taken out, the report is the pipe's"
else
    bad "the battery on a terminal: the report differs from the pipe's: $(diff "$tmp/a" "$tmp/b" | head -5)"
fi
on_tty "$tmp/q" -- --ranks 2 -q
if grep -q "scenario 1 of" "$tmp/q" || grep -q "$ESC" "$tmp/q"; then
    bad "--quiet on a terminal: progress shown"
else
    ok "--quiet on a terminal: no progress"
fi
on_tty "$tmp/m" -- --mutants --ranks 2 --shard zero2
if grep -q "implementation 1 of [0-9]*: " "$tmp/m" && grep -q "^# verdict: PASS" "$tmp/m"; then
    ok "--mutants on a terminal: 'implementation k of n: NAME'"
else
    bad "--mutants on a terminal: no 'implementation k of n' line, or no verdict"
fi
on_tty "$tmp/c" -- --ranks 2 --scenario classic --chaos 1..3
if grep -q "\[##########*\] 3/3 seeds, 0 failing (" "$tmp/c"; then
    ok "--chaos 1..3 on a terminal: the seeds' bar, with the elapsed time"
else
    bad "--chaos 1..3 on a terminal: no bar reaching 3/3"
fi
on_tty "$tmp/cq" -- --ranks 2 --scenario classic --chaos 1..3 -q
if grep -q "seeds, " "$tmp/cq"; then
    bad "--chaos 1..3 -q on a terminal: the bar shown"
else
    ok "--chaos 1..3 -q on a terminal: no bar"
fi
finish
