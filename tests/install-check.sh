#!/bin/sh
# install-check.sh - a plugin author's first steps, from an installed
# prefix only (make installcheck; make distcheck runs it): pkg-config finds
# ddpsim and points at the installed ddpsim_impl.h, every installed example
# plugin compiles with those flags alone, and the installed ddpsim runs each
# and passes. Also the man page is installed, and the Python front end runs
# from the installed package with the installed ddpsim.
set -u
: "${DDPSIM:?}" "${PKG_CONFIG:=pkg-config}" "${CC:=cc}" "${EXAMPLES:?}" "${MANDIR:?}"
work=$(mktemp -d) || exit 99
trap 'rm -rf "$work"' EXIT
fail=0
ok() { echo "PASS: $1"; }
bad() { echo "FAIL: $1"; fail=1; }

cflags=$($PKG_CONFIG --cflags ddpsim 2>"$work/err") && ok "pkg-config --cflags ddpsim: $cflags" ||
    { bad "pkg-config does not find ddpsim: $(cat "$work/err")"; exit 1; }
inc=$(echo "$cflags" | sed -n 's/.*-I\([^ ]*\).*/\1/p')
[ -f "$inc/ddpsim_impl.h" ] && ok "the header is installed as $inc/ddpsim_impl.h" || bad "no ddpsim_impl.h in $inc"
# Every installed example, with the installed header only (no -I into a source tree); each one runs and passes.
for ex in example_impl example_zero1 example_buckets example_zero2; do
    [ -f "$EXAMPLES/$ex.c" ] || { bad "no $EXAMPLES/$ex.c"; continue; }
    # shellcheck disable=SC2086
    if $CC -std=gnu11 -Wall -Werror -shared -fPIC -pthread $cflags -o "$work/lib$ex.so" "$EXAMPLES/$ex.c" \
        2>"$work/err"; then
        ok "$ex compiles with pkg-config's flags"
    else
        bad "$ex does not compile: $(cat "$work/err")"
        continue
    fi
    mode=""
    [ "$ex" = example_zero2 ] && mode="--shard zero2" # interface version 5: a sharded run
    # shellcheck disable=SC2086
    if "$DDPSIM" --ranks 3 --impl "$work/lib$ex.so" --bucket-cap 4K $mode >"$work/out" 2>&1 && grep -q "verdict: PASS" "$work/out"; then
        ok "the installed ddpsim runs $ex and it passes"
    else
        bad "the installed ddpsim does not pass $ex: $(tail -3 "$work/out" 2>/dev/null)"
    fi
done
[ -f "$MANDIR/man1/ddpsim.1" ] && ok "the man page is installed" || bad "no $MANDIR/man1/ddpsim.1"
# The Python front end, from the installed package alone: it finds the installed ddpsim by itself.
PYTHON=${PYTHON:-:}
if [ "$PYTHON" = : ]; then
    echo "SKIP: the Python front end (configured without Python)"
elif [ ! -f "${PYDIR:?}/ddpsim_torch/_install.py" ]; then
    bad "ddpsim_torch is not installed in $PYDIR"
elif ! "$PYTHON" -c "import torch, numpy" 2>/dev/null; then
    ok "ddpsim_torch is installed in $PYDIR (its check skipped: $PYTHON has no torch)"
else
    grep -q "\"$DDPSIM\"" "$PYDIR/ddpsim_torch/_install.py" && ok "ddpsim_torch calls the installed ddpsim" ||
        bad "ddpsim_torch/_install.py does not name $DDPSIM: $(cat "$PYDIR/ddpsim_torch/_install.py")"
    if (cd "$work" && env -u DDPSIM PYTHONPATH="$PYDIR" "$PYTHON" -m ddpsim_torch --ranks 2 \
        --wrap torch.nn.parallel:DistributedDataParallel --scenario classic >"$work/out" 2>&1) &&
        grep -q "verdict: PASS" "$work/out"; then
        ok "the installed python3 -m ddpsim_torch checks torch's DDP"
    else
        bad "the installed python3 -m ddpsim_torch: $(tail -3 "$work/out")"
    fi
fi
exit $fail
