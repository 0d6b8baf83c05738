#!/bin/sh
# install-check.sh - a plugin author's first steps, from an installed
# prefix only (make installcheck; make distcheck runs it): pkg-config finds
# ddpsim and points at the installed ddpsim_impl.h, every installed example
# plugin compiles with those flags alone, and the installed ddpsim runs each
# and passes. Also the man page is installed.
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
for ex in example_impl example_zero1 example_buckets; do
    [ -f "$EXAMPLES/$ex.c" ] || { bad "no $EXAMPLES/$ex.c"; continue; }
    # shellcheck disable=SC2086
    if $CC -std=gnu11 -Wall -Werror -shared -fPIC -pthread $cflags -o "$work/lib$ex.so" "$EXAMPLES/$ex.c" \
        2>"$work/err"; then
        ok "$ex compiles with pkg-config's flags"
    else
        bad "$ex does not compile: $(cat "$work/err")"
        continue
    fi
    if "$DDPSIM" --ranks 3 --impl "$work/lib$ex.so" --bucket-cap 4K >"$work/out" 2>&1 && grep -q "verdict: PASS" "$work/out"; then
        ok "the installed ddpsim runs $ex and it passes"
    else
        bad "the installed ddpsim does not pass $ex: $(tail -3 "$work/out" 2>/dev/null)"
    fi
done
[ -f "$MANDIR/man1/ddpsim.1" ] && ok "the man page is installed" || bad "no $MANDIR/man1/ddpsim.1"
exit $fail
