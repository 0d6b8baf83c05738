#!/bin/sh
# junit.sh - what CI reads: --junit's JUnit XML and the GitHub annotations.
# Every document ddpsim writes (the battery passing and failing, a single
# run passing, failing, verifying nothing and faulting, `ddpsim check`, a
# command line with characters XML must escape and a byte that is not
# UTF-8) is validated against tests/junit/xunit2.xsd (the xunit2 layout
# pytest writes) with xmllint, and its counts and facts are read back with
# XPath: the failing testcase names the rank, parameter, element and
# pattern the table names, passing ones carry no failure. Annotations print
# only on GitHub Actions (GITHUB_ACTIONS=true) or when asked, one ::error
# per failing scenario, escaped. Bad destinations are refused (exit 2)
# before any rank starts. Skips (77) without xmllint (Debian's
# libxml2-utils, in the README's install command).
DDPSIM=${DDPSIM:-./sim/ddpsim}
. "$(dirname "$0")/testlib.sh"
command -v xmllint >/dev/null 2>&1 || { echo "SKIP: xmllint (libxml2-utils) is not installed"; exit 77; }
XSD="$(cd "$(dirname "$0")" && pwd)/junit/xunit2.xsd"
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$out" "$err" "$tmp"' EXIT
unset GITHUB_ACTIONS

# valid WHAT FILE: FILE is well-formed and follows the xunit2 layout
valid() {
    if xmllint --noout --schema "$XSD" "$2" >"$tmp/xsd" 2>&1; then
        ok "$1: valid xunit2"
    else
        bad "$1: not valid against tests/junit/xunit2.xsd: $(head -3 "$tmp/xsd")"
    fi
}
# xp FILE XPATH: the string value of XPATH in FILE
xp() { xmllint --xpath "string($2)" "$1" 2>/dev/null; }
# is WHAT GOT WANT
is() {
    if [ "$2" = "$3" ]; then ok "$1: $2"; else bad "$1: '$2', expected '$3'"; fi
}
# has WHAT TEXT PATTERN
has() {
    if printf '%s\n' "$2" | grep -q -- "$3"; then ok "$1"; else bad "$1: '$3' not in '$2'"; fi
}
S=/testsuites/testsuite

# --- the battery, passing: a testcase per scenario, each timed, no failure ---
nscen=$(($("$DDPSIM" --scenarios | grep -c '^[a-z]') + 1)) # the battery's rows: the scenarios and the chaos pass's
"$DDPSIM" --ranks 3 --junit "$tmp/pass.xml" -q >"$out" 2>"$err"
is "battery, correct implementation: exit" "$?" 0
valid "battery, passing" "$tmp/pass.xml"
is "battery, passing: a testcase per scenario" "$(xp "$tmp/pass.xml" "$S/@tests")" "$nscen"
is "battery, passing: failures" "$(xp "$tmp/pass.xml" "$S/@failures")" 0
is "battery, passing: every testcase timed" "$(xp "$tmp/pass.xml" "count($S/testcase[@time])")" "$nscen"
is "battery, passing: the verdict property" \
    "$(xp "$tmp/pass.xml" "$S/properties/property[@name='verdict']/@value" | cut -c1-4)" PASS

# --- at a power of two the scaling-order scenarios' rows at N-1 are testcases too, replayed at their ranks ---
"$DDPSIM" --ranks 4 --impl post-divide --junit "$tmp/pow2.xml" -q >"$out" 2>"$err"
is "battery at 4 ranks, post-divide: exit" "$?" 1
valid "battery at 4 ranks" "$tmp/pow2.xml"
is "battery at 4 ranks: a testcase per row" "$(xp "$tmp/pow2.xml" "$S/@tests")" "$((nscen + 6))"
has "the row 'classic at 3' fails and replays with --ranks 3" \
    "$(xp "$tmp/pow2.xml" "$S/testcase[@name='classic at 3']/system-out")" "--scenario classic --ranks 3$"

# --- the battery, failing (sync-on-exit: thunder #1670): the table's rows are the failures ---
"$DDPSIM" --ranks 3 --impl sync-on-exit --junit "$tmp/fail.xml" >"$out" 2>"$err"
is "battery, sync-on-exit: exit" "$?" 1
valid "battery, failing" "$tmp/fail.xml"
rows=$(grep -c -E '^ .*[0-9]  (FAIL|FAULT) ' "$out")
is "battery, failing: a failure per FAIL or FAULT row" "$(xp "$tmp/fail.xml" "$S/@failures")" "$rows"
C="$S/testcase[@name='classic']/failure"
is "classic's failure: its type" "$(xp "$tmp/fail.xml" "$C/@type")" divergence
row=$(sed -n 's/^ classic  *[^ ]*  *[0-9]*  *[0-9]*  FAIL  *//p' "$out")
is "classic's failure: its message is the table's first divergence" "$(xp "$tmp/fail.xml" "$C/@message")" "$row"
text=$(xp "$tmp/fail.xml" "$C")
has "classic's failure names the rank" "$text" "^rank: 0$"
has "... the parameter" "$text" "^parameter: 0.weight$"
has "... the element" "$text" "^element: [0-9]"
has "... the ulps" "$text" "^ulps: [1-9]"
has "... the pattern" "$text" "^pattern: .*reduced in a backward that does not sync"
is "classic's replay line in system-out" "$(xp "$tmp/fail.xml" "$S/testcase[@name='classic']/system-out")" \
    "replay: ddpsim --ranks 3 --impl sync-on-exit --junit $tmp/fail.xml --scenario classic"
is "the suite's first failure" "$(xp "$tmp/fail.xml" "$S/properties/property[@name='first_failure']/@value")" classic
is "the suite's rank property" "$(xp "$tmp/fail.xml" "$S/properties/property[@name='rank']/@value")" 0
is "a passing scenario carries no failure" "$(xp "$tmp/fail.xml" "count($S/testcase[@name='window-1']/*)")" 0
is "a FAULT row is a failure of type fault" "$(xp "$tmp/fail.xml" "$S/testcase[@name='uneven']/failure/@type")" fault

# --- one scenario: a testcase per check, and one for the run's own checks ---
"$DDPSIM" --ranks 2 --scenario classic --junit "$tmp/one.xml" -q >"$out" 2>"$err"
is "one scenario, correct: exit" "$?" 0
valid "one scenario, passing" "$tmp/one.xml"
checks=$("$DDPSIM" --ranks 2 --scenario classic | grep -c -E '^ *(grab|step|end)')
is "one scenario: a testcase per check, and the run's own" "$(xp "$tmp/one.xml" "$S/@tests")" $((checks + 1))
"$DDPSIM" --ranks 2 --scenario classic --impl sync-on-exit --junit "$tmp/one-bad.xml" -q >"$out" 2>"$err"
is "one scenario, sync-on-exit: exit" "$?" 1
valid "one scenario, failing" "$tmp/one-bad.xml"
G="$S/testcase[1]/failure"
has "grab 0's failure names rank, parameter and element" "$(xp "$tmp/one-bad.xml" "$G/@message")" \
    "^grab 0, rank 0, 0.weight\[0\]"
first=$(sed -n 's/^# first divergence: .*expected \([^,]*\), actual \([^,]*\),.*/\1 \2/p' "$out")
is "grab 0's values are the report's" \
    "$(xp "$tmp/one-bad.xml" "$G" | sed -n 's/^expected: //p') $(xp "$tmp/one-bad.xml" "$G" | sed -n 's/^actual: //p')" \
    "$first"
"$DDPSIM" --ranks 2 --schedule "fwd bwd" --junit "$tmp/nothing.xml" -q >"$out" 2>"$err"
is "nothing verified: exit" "$?" 4
valid "nothing verified" "$tmp/nothing.xml"
is "nothing verified: the run's testcase is skipped, not passed" "$(xp "$tmp/nothing.xml" "$S/@skipped")" 1
"$DDPSIM" --ranks 3 --scenario uneven --impl sync-on-exit --junit "$tmp/fault.xml" -q >"$out" 2>"$err"
is "a fault: exit" "$?" 3
valid "a fault" "$tmp/fault.xml"
is "a fault: a failure of type fault" "$(xp "$tmp/fault.xml" "$S/testcase/failure/@type")" fault
has "a fault: the failing rank's own words" "$(xp "$tmp/fault.xml" "$S/testcase/failure/@message")" \
    "rank [0-9]: implementation 'sync-on-exit' failed"

# --- ddpsim check of a recording ---
"$DDPSIM" --ranks 2 --scenario classic --impl sync-on-exit --record "$tmp/rec" -q >/dev/null 2>&1
"$DDPSIM" check "$tmp/rec" --junit "$tmp/check.xml" -q >"$out" 2>"$err"
is "ddpsim check: exit" "$?" 1
valid "ddpsim check" "$tmp/check.xml"
is "ddpsim check: a testcase per check of the live run" "$(xp "$tmp/check.xml" "$S/@tests")" \
    "$(xp "$tmp/one-bad.xml" "$S/@tests")"
is "ddpsim check: the first failure is the live run's" \
    "$(xp "$tmp/check.xml" "$S/testcase[failure][1]/failure/@message")" \
    "$(xp "$tmp/one-bad.xml" "$S/testcase[failure][1]/failure/@message")"

# --- what XML cannot hold as it is: markup characters, and a byte that is not UTF-8, in the command line ---
odd=$(printf '%s/a&b<"c">\377' "$tmp")
"$DDPSIM" --ranks 2 --scenario classic --dump "$odd" --junit "$tmp/odd.xml" -q >"$out" 2>"$err"
is "an odd --dump directory: exit" "$?" 0
valid "markup and a stray byte in the command line" "$tmp/odd.xml"
has "... kept, escaped, the stray byte replaced" \
    "$(xp "$tmp/odd.xml" "$S/properties/property[@name='command']/@value")" 'a&b<"c">?'

# --- annotations ---
GITHUB_ACTIONS=true "$DDPSIM" --ranks 3 --impl sync-on-exit -q >"$out" 2>"$err"
is "GITHUB_ACTIONS=true: an ::error per failing scenario" "$(grep -c '^::error ' "$out")" "$rows"
is "... and one ::notice with the verdict" "$(grep -c '^::notice title=ddpsim verdict::FAIL' "$out")" 1
has "... the title's ':' escaped, the line break in the text too" "$(grep '^::error' "$out" | head -1)" \
    '^::error title=ddpsim%3A scenario classic FAIL::grab 0, rank 0, 0.weight\[0\].*%0Areplay: ddpsim'
"$DDPSIM" --ranks 3 --impl sync-on-exit -q >"$out" 2>"$err"
is "without GITHUB_ACTIONS: no annotation" "$(grep -c '^::' "$out" "$err" | awk -F: '{s += $NF} END {print s}')" 0
GITHUB_ACTIONS=true "$DDPSIM" --ranks 3 --impl sync-on-exit -q --annotations none >"$out" 2>"$err"
is "--annotations none wins over GITHUB_ACTIONS" "$(grep -c '^::' "$out")" 0
"$DDPSIM" --ranks 2 --scenario classic --impl sync-on-exit -q --annotations github >"$out" 2>"$err"
is "--annotations github: one run's first divergence" "$(grep -c '^::error title=ddpsim%3A FAIL at grab 0::' "$out")" 1
GITHUB_ACTIONS=true "$DDPSIM" --ranks 2 -q >"$out" 2>"$err"
is "a pass: only the ::notice" "$(grep -c '^::error' "$out")/$(grep -c '^::notice title=ddpsim verdict::PASS' "$out")" 0/1
GITHUB_ACTIONS=true "$DDPSIM" check "$tmp/rec" -q >"$out" 2>"$err"
is "ddpsim check on GitHub Actions: its first divergence" "$(grep -c '^::error title=ddpsim%3A FAIL at grab 0::' "$out")" 1

# --- bad destinations, refused before any rank starts ---
expect 2 "--junit: give a file" "--junit - is refused" -- --ranks 2 --junit -
expect 2 "--junit: $tmp is a directory" "--junit DIR is refused" -- --ranks 2 --junit "$tmp"
expect 2 "--junit: cannot create" "--junit in a missing directory is refused" -- --ranks 2 --junit "$tmp/no/x.xml"
expect 2 "belong to single runs" "--junit with --mutants is refused" -- --mutants --junit "$tmp/m.xml"
expect 2 "belong to single runs" "--junit with --repeat is refused" -- --ranks 2 --scenario classic --repeat 3 --junit "$tmp/m.xml"
expect 2 "expected one of auto|github|none" "--annotations gitlab is refused" -- --ranks 2 --annotations gitlab
expect 2 "--junit: give a file" "ddpsim check --junit - is refused" -- check "$tmp/rec" --junit -
if [ -c /dev/full ]; then
    expect 2 "No space left on device" "--junit on a full device (/dev/full) is refused before any rank starts" -- \
        --ranks 2 --scenario classic --junit /dev/full
fi
[ -e "$tmp/m.xml" ] && bad "a refused run created its --junit file" || ok "a refused run creates no --junit file"
finish
