#!/bin/sh
# fuzz-replay.sh - every fuzz harness over its seed corpus and over every
# input a fuzzer ever crashed on (tests/fuzz/regressions/<target>/), built
# without libFuzzer. A crash or a sanitizer report fails make check.
here=$(dirname "$0")
build=${BUILD_DIR:-.}
pass=0 fail=0
for t in schedule npy options manifest; do
    dirs="$here/fuzz/corpus/$t"
    [ -d "$here/fuzz/regressions/$t" ] && dirs="$dirs $here/fuzz/regressions/$t"
    if "$build/tests/fuzz/replay_$t" $dirs >/dev/null 2>&1; then
        pass=$((pass + 1)); echo "PASS: $t corpus and regressions"
    else
        fail=$((fail + 1)); echo "FAIL: $t"; "$build/tests/fuzz/replay_$t" $dirs
    fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
