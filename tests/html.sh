#!/bin/sh
# html.sh - --html's page (sim/html.c). Its DOM is read (tests/html_dom.py)
# from the file and, when Debian's chromium is installed (CI installs it),
# as a real browser left it after running its script: a heatmap per rank
# with a row per parameter, failing cells marked and one first divergence
# outlined per failing run, none on a passing page, no script error in the
# console (a page with a planted error shows the check firing), and a
# screenshot of each (into $HTML_SHOTS, a CI artifact, when set). The
# timeline drawn from a run's trace, rank by rank (tests/timeline_dom.py),
# a fault's showing where each rank stopped, --html alone leaving no trace
# file behind, the battery's timelines kept within their 2 MiB. Also: the
# battery's page and `ddpsim check`'s, a fault's page, markup in the command
# line escaped, and bad destinations and a page too big refused (exit 2)
# before any rank starts.
DDPSIM=${DDPSIM:-./sim/ddpsim}
. "$(dirname "$0")/testlib.sh"
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$out" "$err" "$tmp"' EXIT
py=$(command -v python3 || echo /usr/bin/python3)
shots=${HTML_SHOTS:-$tmp}

# dom WHAT FILE NPARAMS NRANKS pass|fail [SECTIONS]
dom() {
    what=$1
    shift
    if msg=$("$py" "$here/html_dom.py" "$@" 2>&1); then ok "$what: $msg"; else bad "$what: $msg"; fi
}

# mlp:32-64-64-16 (the scenarios' default model) has 6 parameters
"$DDPSIM" --ranks 3 --scenario classic --html "$tmp/pass.html" -q >"$out" 2>"$err"
[ $? -eq 0 ] && ok "a passing run with --html: exit 0" || bad "a passing run with --html"
dom "the passing page" "$tmp/pass.html" 6 3 pass
"$DDPSIM" --ranks 4 --scenario classic --impl sync-on-exit --html "$tmp/fail.html" -q >"$out" 2>"$err"
[ $? -eq 1 ] && ok "sync-on-exit with --html: exit 1" || bad "sync-on-exit with --html"
dom "the failing page" "$tmp/fail.html" 6 4 fail
# Which windows went wrong, at a glance: after a failed step the reference goes on from the implementation's
# parameters (doc/SEMANTICS.md "After a divergence"), so sync-on-exit's red columns are exactly the checks of the
# windows that accumulate under no_sync (their grabs and their step), the windows of one micro-step green (without
# that, every column from the first on would be red).
if msg=$("$py" - "$tmp/fail.html" <<'EOF'
import re
import sys
cells = re.findall(r'<td class="c ([^"]*)"[^>]*? title="([^"]*)"', open(sys.argv[1]).read())
check = [t.split(" (")[0] for c, t in cells]
red = {k for k, (c, t) in zip(check, cells) if "bad" in c.split()}
order, window, expected = [], [], set()
for k, (c, t) in zip(check, cells):
    if k in order:
        break  # the columns of the first row, in the page's order
    order.append(k)
    window.append(t)
    if k.startswith("step"):  # a step closes its window
        if any("(after no_sync" in w for w in window):
            expected |= {w.split(" (")[0] for w in window}
        window = []
print(f"red: {', '.join(k for k in order if k in red)}")
sys.exit(0 if red and red == expected else 1)
EOF
); then
    ok "sync-on-exit's page: red exactly in the windows that accumulate under no_sync ($msg)"
else
    bad "sync-on-exit's page: $msg"
fi
# every failing check of every rank names its own first divergence (element, values, pattern) in one cell's title
if msg=$("$py" - "$tmp/fail.html" <<'EOF'
import re
import sys
cells = re.findall(r'<td class="c ([^"]*)"[^>]*? title="([^"]*)"', open(sys.argv[1]).read())
failing, named = set(), {}
for c, t in cells:
    where = t.split(", ")[0].split(" (")[0] + " rank " + t.split("), rank ")[1].split(",")[0]
    if "bad" in c.split():
        failing.add(where)
    if "first divergence" in t and "element " in t and "expected " in t and "pattern: " in t:
        named[where] = named.get(where, 0) + 1
print(f"{len(failing)} failing checks x ranks, {len(named)} named")
sys.exit(0 if failing and set(named) == failing and set(named.values()) == {1} else 1)
EOF
); then
    ok "sync-on-exit's page: each failing check of each rank names its first divergence once ($msg)"
else
    bad "sync-on-exit's page: $msg"
fi
first=$(sed -n 's/^# first divergence: \(grab [0-9]*\) .*rank \([0-9]*\), parameter \([^,]*\),.*/\1 (.*), rank \2, \3:/p' "$out")
if grep -q "id=\"first-1\" title=\"$first" "$tmp/fail.html"; then
    ok "the outlined cell is the report's first divergence ($first)"
else
    bad "the outlined cell is not the report's first divergence ($first)"
fi
nscen=$(($("$DDPSIM" --scenarios | grep -c '^[a-z]') + 1)) # the battery's rows: the scenarios and the chaos pass's
"$DDPSIM" --ranks 3 --impl sync-on-exit --html "$tmp/battery.html" -q >"$out" 2>"$err"
[ $? -eq 1 ] && ok "the battery with --html: exit 1" || bad "the battery with --html"
dom "the battery's page: a section per scenario" "$tmp/battery.html" 6 3 fail "$nscen"
rows=$(grep -c '^<tr><td><a href="#run-[0-9]*">' "$tmp/battery.html")
[ "$rows" = "$nscen" ] && ok "the battery's table: a row per scenario" || bad "the battery's table: $rows rows"
# each failing scenario's section says the command that reruns it alone: the report's replay lines, in its order
sed -n '/^# verdict: /,$ s/^# replay: //p' "$out" >"$tmp/replays.txt"
sed -n 's|^<p class="replay">replay: <code>\(.*\)</code></p>$|\1|p' "$tmp/battery.html" | sed 's/&amp;/\&/g; s/&lt;/</g; s/&gt;/>/g; s/&quot;/"/g; s/&#39;/'"'"'/g' >"$tmp/page-replays.txt"
if [ -s "$tmp/replays.txt" ] && cmp -s "$tmp/replays.txt" "$tmp/page-replays.txt"; then
    ok "the battery's page: each failing scenario's replay line, as the report's ($(wc -l <"$tmp/replays.txt") of them)"
else
    bad "the battery's page: replay lines differ from the report's: $(diff "$tmp/replays.txt" "$tmp/page-replays.txt" | head -3)"
fi
"$DDPSIM" --ranks 2 --scenario classic --impl sync-on-exit --record "$tmp/rec" -q >/dev/null 2>&1
"$DDPSIM" check "$tmp/rec" --html "$tmp/check.html" -q >"$out" 2>"$err"
[ $? -eq 1 ] && ok "ddpsim check with --html: exit 1" || bad "ddpsim check with --html"
dom "ddpsim check's page" "$tmp/check.html" 6 2 fail
"$DDPSIM" --ranks 3 --scenario uneven --impl sync-on-exit --html "$tmp/fault.html" -q >"$out" 2>"$err"
if [ $? -eq 3 ] && grep -q "<h1>ddpsim: <span class=\"v-fail\">fault (exit 3): " "$tmp/fault.html"; then
    ok "a fault's page says the fault"
else
    bad "a fault's page: $(grep '<h1>' "$tmp/fault.html")"
fi
odd="$tmp/<script>alert(1)<"
"$DDPSIM" --ranks 2 --scenario classic --dump "$odd" --html "$tmp/odd.html" -q >"$out" 2>"$err"
if [ "$(grep -c '<script' "$tmp/odd.html")" = 1 ] && grep -q '&lt;script&gt;alert(1)&lt;' "$tmp/odd.html"; then
    ok "markup in the command line is escaped (one script element: the page's own)"
else
    bad "markup in the command line is not escaped"
fi

# the timeline, drawn from the run's trace: what the page draws is what the trace holds, rank by rank
# (tests/timeline_dom.py); a rank that did not finish is said to have stopped
"$DDPSIM" --ranks 3 --scenario classic --impl bucketed --trace "$tmp/traced.jsonl" --html "$tmp/traced.html" -q \
    >"$out" 2>"$err"
[ $? -eq 0 ] && ok "a traced run with --html: exit 0" || bad "a traced run with --html: $(cat "$err")"
if msg=$("$py" "$here/timeline_dom.py" "$tmp/traced.html" "$tmp/traced.jsonl" 3 2>&1); then
    ok "the timeline draws its trace: $msg"
else
    bad "the timeline does not draw its trace: $msg"
fi
"$DDPSIM" --ranks 3 --scenario uneven --impl sync-on-exit --trace "$tmp/fault.jsonl" --html "$tmp/fault-t.html" -q \
    >"$out" 2>"$err"
if [ $? -eq 3 ] && msg=$("$py" "$here/timeline_dom.py" "$tmp/fault-t.html" "$tmp/fault.jsonl" 3 2>&1) &&
    grep -q 'rank [0-9] (stopped: failed)' "$tmp/fault-t.html" && grep -q '<rect class="op [a-z]* stopped"' "$tmp/fault-t.html"; then
    ok "a fault's page draws where each rank stopped: $msg"
else
    bad "a fault's page: $msg"
fi
if "$py" "$here/timeline_dom.py" "$tmp/traced.html" "$tmp/fault.jsonl" 3 >"$out" 2>&1; then
    bad "a page read against another run's trace passed the timeline check"
else
    ok "the timeline check fires on a page drawn from another trace ($(tail -1 "$out" | cut -c1-60)...)"
fi
# --html alone traces the run into a private directory of TMPDIR, gone afterwards
mkdir "$tmp/tmpdir"
TMPDIR="$tmp/tmpdir" "$DDPSIM" --ranks 2 --scenario classic --html "$tmp/auto.html" -q >"$out" 2>"$err"
if [ $? -eq 0 ] && [ "$(grep -c '<svg class="timeline"' "$tmp/auto.html")" = 1 ] && [ -z "$(ls -A "$tmp/tmpdir")" ]; then
    ok "--html without --trace: a timeline, and nothing left in TMPDIR"
else
    bad "--html without --trace: $(grep -c '<svg class="timeline"' "$tmp/auto.html") timelines, TMPDIR holds: $(ls -A "$tmp/tmpdir")"
fi
# the battery: a timeline per scenario at 3 ranks; at 16 ranks the page's 2 MiB for timelines runs out, and the
# scenarios past their share say so instead of growing the page
"$DDPSIM" --ranks 16 --html "$tmp/b16.html" -q >"$out" 2>"$err"
svg=$("$py" -c 'import re,sys; print(sum(len(m) for m in re.findall(r"<div class=\"timeline-svg\">.*?</div></div>",
    open(sys.argv[1]).read(), re.S)))' "$tmp/b16.html")
over=$(grep -c "more than this run&#39;s share" "$tmp/b16.html")
drawn=$(grep -c '<svg class="timeline"' "$tmp/b16.html")
rows=$(grep -c '^<tr><td><a href="#run-[0-9]*">' "$tmp/b16.html") # 16: the scaling-order ones at 15 too
if [ "$over" -ge 1 ] && [ "$drawn" -ge 1 ] && [ "$((drawn + over))" = "$rows" ] && [ "$rows" -gt "$nscen" ] &&
    [ "$svg" -le 2097152 ]; then
    ok "the battery at 16 ranks: $rows rows, $drawn timelines in $svg bytes (at most 2 MiB), $over past their share said"
else
    bad "the battery at 16 ranks: $drawn timelines, $over notes, $svg bytes"
fi
tables=$("$py" -c 'import re,sys; s=open(sys.argv[1]).read(); sec=re.search(r"<h2>classic at 15:.*?</section>", s, re.S)
print(sec.group(0).count("<table class=\"heatmap\"") if sec else -1)' "$tmp/b16.html")
[ "$tables" = 15 ] && ok "... the row 'classic at 15' draws a heatmap per rank of its 15" ||
    bad "... the row 'classic at 15' draws $tables heatmaps"
drawn=$(grep -c '<svg class="timeline"' "$tmp/battery.html")
[ "$drawn" = "$nscen" ] && ok "the battery at 3 ranks: a timeline per scenario" || bad "the battery: $drawn timelines"

# refused before any rank starts
expect 2 "--html: give a file" "--html - is refused" -- --ranks 2 --html -
expect 2 "--html: $tmp is a directory" "--html DIR is refused" -- --ranks 2 --html "$tmp"
expect 2 "more than 200000" "a page too big is refused" -- --ranks 2 --schedule "20000*( fwd bwd grab )" \
    --html "$tmp/big.html"
[ -e "$tmp/big.html" ] && bad "a refused --html left its file" || ok "a refused --html creates no file"

# --mutants: the catch matrix, a row per implementation of the table, an x where a scenario caught it
"$DDPSIM" --mutants --ranks 2 --shard zero2 --html "$tmp/mutants.html" >"$out" 2>"$err"
code=$?
nrows=$(grep -c '^ [a-z0-9-]* *\(caught\|passes\|MISSED\|FAILED\|bitwise\) ' "$out")
ncaught=$(grep -c '^ [a-z0-9-]* *caught ' "$out")
rows=$(grep -c '<tr class="impl">' "$tmp/mutants.html")
withx=$(grep '<tr class="impl">' "$tmp/mutants.html" | grep 'v-pass">caught<' | grep -c 'class="m caught"')
if [ "$code" -eq 0 ] && [ "$rows" = "$nrows" ] && [ "$withx" = "$ncaught" ] && [ "$ncaught" -ge 1 ]; then
    ok "--mutants --html: the catch matrix, $rows rows as the table's, an x in each of the $ncaught caught bugs' rows"
else
    bad "--mutants --html: exit $code, $rows rows (table $nrows), $withx caught rows with an x (table $ncaught)"
fi

# in a real browser
browser=""
for b in chromium chromium-browser google-chrome; do
    command -v "$b" >/dev/null 2>&1 && { browser=$b; break; }
done
if [ -z "$browser" ]; then
    echo "SKIP: no chromium: the pages are not loaded in a browser (Debian: apt-get install chromium)"
    finish
    exit $?
fi
# load FILE NAME [HEIGHT]: the DOM after the page's script ran into $tmp/NAME.dom, the console into $tmp/NAME.log,
# a screenshot (1100 pixels wide, 760 high unless told) into $shots/NAME.png
load() {
    timeout 120 "$browser" --headless --no-sandbox --disable-gpu --enable-logging=stderr --v=0 \
        --dump-dom "file://$1" >"$tmp/$2.dom" 2>"$tmp/$2.log"
    timeout 120 "$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1100,"${3:-760}" \
        --screenshot="$shots/$2.png" "file://$1" >/dev/null 2>&1
}
# quiet_console WHAT NAME: no script error in the console
quiet_console() {
    if grep -q 'CONSOLE' "$tmp/$2.log"; then
        bad "$1: the console says $(grep 'CONSOLE' "$tmp/$2.log" | head -2)"
    else
        ok "$1: no script error in the console"
    fi
}
load "$tmp/pass.html" pass
load "$tmp/fail.html" fail 1000 # tall enough for the heatmap below the timeline (doc/html-report.png)
load "$tmp/battery.html" battery
load "$tmp/traced.html" traced
load "$tmp/fault-t.html" fault-timeline
for n in pass fail battery traced fault-timeline; do
    [ -s "$shots/$n.png" ] && ok "$n page rendered to a screenshot ($shots/$n.png)" || bad "$n page: no screenshot"
    quiet_console "$n page" "$n"
done
dom "the passing page in $browser" "$tmp/pass.dom" 6 3 pass
dom "the failing page in $browser" "$tmp/fail.dom" 6 4 fail
dom "the battery's page in $browser" "$tmp/battery.dom" 6 3 fail "$nscen"
if msg=$("$py" "$here/timeline_dom.py" "$tmp/traced.dom" "$tmp/traced.jsonl" 3 2>&1); then
    ok "the timeline in $browser draws its trace: $msg"
else
    bad "the timeline in $browser: $msg"
fi
# the console check firing: the failing page with a script error planted
sed 's|</body>|<script>ddpsim_planted_error();</script></body>|' "$tmp/fail.html" >"$tmp/planted.html"
load "$tmp/planted.html" planted
if grep -q 'CONSOLE.*ddpsim_planted_error' "$tmp/planted.log"; then
    ok "a planted script error is seen in the console"
else
    bad "a planted script error was not seen: $(head -3 "$tmp/planted.log")"
fi
finish
