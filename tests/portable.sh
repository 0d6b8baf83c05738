#!/bin/sh
# portable.sh - --portable-math: the reference's bits are the same on every
# machine. The reference dumps of every model family, under --portable-math,
# against a digest stored here (the one place a ddpsim bit pattern is stored:
# this mode promises it; kernels.sh runs this under every OpenBLAS kernel the
# CPU can run). The header, the JSON and the dump manifest name what computed
# the products. Prints "N passed, N failed".
#
# A change that moves the portable bits on purpose (a model's math, the
# kernels' order) updates STORED with the digest this test prints, and says so
# in its commit.
DDPSIM=${DDPSIM:-./sim/ddpsim}
. "$(dirname "$0")/testlib.sh"
STORED=4239781133-487360
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$out" "$err" "$tmp"' EXIT
sched="2*( nosync{fwd bwd} grab ) fwd bwd grab step zero fwd bwd grab"

# digest DIR: the bits of every reference gradient the dumps under DIR hold, in a fixed order.
digest() {
    (cd "$1" && find . -path '*/reference/*' -name '*.npy' | LC_ALL=C sort | xargs cat | cksum | awk '{print $1 "-" $2}')
}
dumps() {
    dir=$1
    shift
    mkdir -p "$dir"
    for spec in mlp:32-64-64-16 mlp:13-7-5 attn bn "branchy --find-unused" "tied --static-graph --static-graph-rule first-iteration"; do
        name=$(echo "$spec" | tr ' :' '__')
        # shellcheck disable=SC2086 # spec carries the model's own options
        "$DDPSIM" --ranks 2 --model $spec --schedule "$sched" --dump "$dir/$name" -q "$@" >"$out" 2>"$err" || return 1
    done
}

if dumps "$tmp/p" --portable-math; then
    got=$(digest "$tmp/p")
    if [ "$got" = "$STORED" ]; then
        ok "portable math: the reference's bits match the stored digest ($got) under $(sed -n 's/.*"math": "\([^"]*\)".*/\1/p' "$tmp/p/attn/manifest.json" | head -1)"
    else
        bad "portable math: the reference's bits differ from the stored digest: got $got, stored $STORED"
    fi
else
    bad "portable math: the dumps ran"
fi
grep -q '"math": "portable' "$tmp/p/bn/manifest.json" && ok "the dump's manifest says portable math" ||
    bad "the dump's manifest says portable math"

# Without it, the manifest and the header name OpenBLAS's version and kernel, the one the CPU (or
# OPENBLAS_CORETYPE) picked: a dump made elsewhere compares knowingly.
dumps "$tmp/o" && grep -q '"math": "OpenBLAS [0-9.]*, kernel [A-Za-z0-9]*"' "$tmp/o/attn/manifest.json" &&
    ok "the dump's manifest names OpenBLAS and its kernel" || bad "the dump's manifest names OpenBLAS and its kernel"
echo "openblas digest: $(digest "$tmp/o") ($(sed -n 's/.*"math": "\([^"]*\)".*/\1/p' "$tmp/o/attn/manifest.json" | head -1))"
expect 0 "# math: OpenBLAS [0-9.]*, kernel " "the header names the BLAS and its kernel" -- --ranks 2 --schedule "fwd bwd grab"
expect 0 "# math: portable" "... or portable math" -- --ranks 2 --schedule "fwd bwd grab" --portable-math
"$DDPSIM" --ranks 2 --scenario classic --json "$tmp/r.json" -q >/dev/null 2>&1
grep -q '"math": "OpenBLAS' "$tmp/r.json" && ok "the JSON report names the math" || bad "the JSON report names the math"
"$DDPSIM" --ranks 2 --json "$tmp/b.json" -q --portable-math >/dev/null 2>&1
grep -q '"math": "portable' "$tmp/b.json" && ok "the battery's JSON names the math" || bad "the battery's JSON names the math"
# Portable math is a way of computing, not another semantics: the battery passes, and a bug is still caught.
expect 0 "verdict: PASS (25 of 25" "the battery passes under portable math" -- --ranks 3 --portable-math
expect 1 "first divergence" "a bug fails under portable math" -- --ranks 3 --portable-math --impl post-divide --scenario classic
finish
