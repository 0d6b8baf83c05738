#!/bin/sh
# install-check.sh - a plugin author's first steps, from an installed
# prefix only (make installcheck; make distcheck runs it): pkg-config finds
# ddpsim and points at the installed ddpsim_impl.h, the installed example
# plugin compiles with those flags alone, and the installed ddpsim runs it
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
[ -f "$EXAMPLES/example_impl.c" ] && ok "the example plugin's source is installed" || bad "no $EXAMPLES/example_impl.c"
# Only the installed header: no -I into a source tree.
# shellcheck disable=SC2086
if $CC -std=gnu11 -Wall -Werror -shared -fPIC $cflags -o "$work/libexample_impl.so" "$EXAMPLES/example_impl.c" \
    2>"$work/err"; then
    ok "the example plugin compiles with pkg-config's flags"
else
    bad "the example plugin does not compile: $(cat "$work/err")"
fi
if [ -f "$work/libexample_impl.so" ] && "$DDPSIM" --ranks 3 --impl "$work/libexample_impl.so" >"$work/out" 2>&1 &&
    grep -q "verdict: PASS" "$work/out"; then
    ok "the installed ddpsim runs the plugin and it passes"
else
    bad "the installed ddpsim does not pass the example plugin: $(tail -3 "$work/out" 2>/dev/null)"
fi
[ -f "$MANDIR/man1/ddpsim.1" ] && ok "the man page is installed" || bad "no $MANDIR/man1/ddpsim.1"
exit $fail
