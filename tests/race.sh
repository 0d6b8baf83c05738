#!/bin/sh
# race.sh - --race (sim/race.c): a plugin built with -fsanitize=thread run
# under ThreadSanitizer. The example bucketed DDP with an unlocked pending
# counter (tests/plugin/example_buckets.c -DBUCKETS_UNLOCKED_PENDING) passes
# every check, since its race rarely fires, and --race fails it (exit 1)
# with the reports: the detector firing; the correct example, built the same
# way, passes with "no data race". Refused before any rank starts (exit 2):
# a plugin not built with -fsanitize=thread, a built-in, --json beside it.
# The reports' directory is gone afterwards. Skips (77) where no
# ThreadSanitizer runtime or no compiler that builds with it is found, and in
# a ddpsim built with a sanitizer of its own.
DDPSIM=${DDPSIM:-./sim/ddpsim}
. "$(dirname "$0")/testlib.sh"
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$out" "$err" "$tmp"' EXIT
cc=${CC:-cc}
inc="$here/../engine/impls"

plugin() { # NAME [DEFINE]: the example built with -fsanitize=thread into $tmp/NAME.so
    $cc -shared -fPIC -pthread -fsanitize=thread -g -O1 -I"$inc" ${2:+-D$2} -o "$tmp/$1.so" \
        "$here/plugin/example_buckets.c" 2>"$tmp/cc.log"
}
if ! plugin ok || ! plugin pending BUCKETS_UNLOCKED_PENDING; then
    echo "SKIP: $cc cannot build a plugin with -fsanitize=thread: $(head -2 "$tmp/cc.log")"
    exit 77
fi
"$DDPSIM" --ranks 3 --scenario buckets --impl "$tmp/ok.so" --race >"$out" 2>"$err"
code=$?
if grep -q "no ThreadSanitizer runtime\|built with a sanitizer of its own" "$err"; then
    echo "SKIP: $(grep -- '--race' "$err" | head -1)"
    exit 77
fi
mkdir "$tmp/tmpdir"

# the correct example: watched, nothing reported, the run's verdict stands
if [ "$code" -eq 0 ] && grep -q "^# race: ThreadSanitizer watched the plugin's threads in every rank and reported no data race" "$out"; then
    ok "the correct bucketed example under --race: no data race, exit 0"
else
    bad "the correct bucketed example under --race: exit $code"
fi
# the unlocked counter: every check passes, and still the race is found in one run (on every rank)
TMPDIR="$tmp/tmpdir" "$DDPSIM" --ranks 3 --scenario buckets --impl "$tmp/pending.so" --race >"$out" 2>"$err"
code=$?
if [ "$code" -eq 1 ] && grep -q "^# verdict: PASS" "$out" &&
    grep -q "^# race: ThreadSanitizer reported 3 data races in 3 processes .*first: data race .*example_buckets.c:[0-9]* in comm_main" "$out" &&
    [ "$(grep -c '^WARNING: ThreadSanitizer: data race' "$err")" = 3 ]; then
    ok "an unlocked pending counter: the gradients match, --race reports its race on each of the 3 ranks, exit 1"
else
    bad "an unlocked pending counter under --race: exit $code, $(grep '^# race' "$out")"
fi
[ -z "$(ls -A "$tmp/tmpdir")" ] && ok "... and its reports' directory is gone" || bad "... left: $(ls -A "$tmp/tmpdir")"
# the same plugin without --race: loading it says what it needs
expect 2 "a plugin built with -fsanitize=thread runs under --race" "a ThreadSanitizer plugin without --race says so" \
    -- --ranks 3 --scenario buckets --impl "$tmp/pending.so"

# refused before any rank starts
plugins=${PLUGIN_DIR:-$here/plugin}
expect 2 "is not built with -fsanitize=thread" "--race with a plugin not built with -fsanitize=thread" -- \
    --ranks 3 --scenario buckets --impl "$plugins/libexample_buckets.so" --race
expect 2 "the built-in implementations are not instrumented" "--race with a built-in" -- --ranks 3 --race
expect 2 "hold the gradients' verdict alone" "--race with --json" -- --ranks 3 --scenario buckets \
    --impl "$tmp/ok.so" --race --json "$tmp/r.json"
[ -e "$tmp/r.json" ] && bad "a refused --race wrote --json" || ok "... and wrote nothing"
finish
