#!/bin/sh
# layering.sh - the layers of the tree are enforced by the build, not by
# good manners. The intended architecture is written down here, as a table
# of which folders each layer may include from; the include paths each
# library is compiled with (Makefile.am, passed in LAYER_FLAGS_<layer>) must
# make exactly that possible:
#   - a header of an allowed folder compiles under the layer's flags;
#   - a header of any other folder fails to compile ("No such file"), which
#     is what a wrong include in that layer's code would do;
#   - a real source file of the layer with one wrong include added fails.
# Also: no source reaches around the include paths with a relative path.
# Prints one line per check and exits non-zero if any fails.
top=${TOP_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
CC=${CC:-cc}
work=$(mktemp -d) || exit 99
trap 'rm -rf "$work"' EXIT
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "PASS: $1"; }
bad() { fail=$((fail + 1)); echo "FAIL: $1"; [ -f "$work/err" ] && sed 's/^/  /' "$work/err" | head -5; }

# layer  folder          may include from (besides base, which everyone may use)
arch='
base     engine/base
models   models          engine/base
world    engine/world    engine/base
nccl     engine/nccl     engine/base engine/world
ddp      engine/ddp      engine/base engine/world models
io       engine/io       engine/base engine/world models engine/ddp
impls    engine/impls    engine/base engine/world models engine/ddp engine/nccl
verify   engine/verify   engine/base engine/world models engine/ddp engine/nccl engine/io engine/impls
bench    engine/bench    engine/base engine/world models engine/ddp engine/nccl engine/io engine/impls engine/verify
'
folders="engine/base models engine/world engine/nccl engine/ddp engine/io engine/impls engine/verify engine/bench sim"

# One header of a folder (the first in name order), to include.
header_of() { (cd "$top/$1" && ls *.h | head -1); }

try_compile() { # FLAGS HEADER -> 0 when it compiles
    printf '#include "%s"\nint layering_probe;\n' "$2" >"$work/probe.c"
    # shellcheck disable=SC2086
    $CC -fsyntax-only -std=gnu11 $1 $EXTRA_CPPFLAGS "$work/probe.c" >"$work/err" 2>&1
}

echo "$arch" | while read -r layer folder allowed; do
    [ -n "$layer" ] || continue
    eval "flags=\${LAYER_FLAGS_$layer-}"
    if [ -z "$flags" ]; then
        echo "FAIL: LAYER_FLAGS_$layer is not set (run through make check)"
        echo x >>"$work/failed"
        continue
    fi
    for f in $folders; do
        h=$(header_of "$f")
        case " $folder $allowed " in
        *" $f "*)
            if try_compile "$flags" "$h"; then echo "PASS: $layer may include $f ($h)"; else
                echo "FAIL: $layer cannot include $f ($h)"; echo x >>"$work/failed"; fi ;;
        *)
            if try_compile "$flags" "$h"; then echo "FAIL: $layer can include $f ($h), which is above it or beside it"
                echo x >>"$work/failed"
            elif grep -q "No such file" "$work/err"; then echo "PASS: $layer cannot include $f ($h)"; else
                echo "FAIL: $layer including $f ($h) failed for another reason:"; sed 's/^/  /' "$work/err" | head -3
                echo x >>"$work/failed"; fi ;;
        esac
    done
done
[ -f "$work/failed" ] && fail=$((fail + $(wc -l <"$work/failed")))
rm -f "$work/failed"

# A deliberate wrong include in real code: the world's own source, asking for the verifier.
eval "flags=\${LAYER_FLAGS_world-}"
{ echo '#include "verify.h"'; cat "$top/engine/world/world.c"; } >"$work/world_wrong.c"
{ cat "$top/engine/world/world.c"; } >"$work/world_right.c"
# shellcheck disable=SC2086
if $CC -fsyntax-only -std=gnu11 $flags $EXTRA_CPPFLAGS -I"$top/engine/world" "$work/world_right.c" >"$work/err" 2>&1; then
    ok "engine/world/world.c compiles under the world's include paths"
else
    bad "engine/world/world.c does not compile under the world's include paths"
fi
# shellcheck disable=SC2086
if $CC -fsyntax-only -std=gnu11 $flags $EXTRA_CPPFLAGS -I"$top/engine/world" "$work/world_wrong.c" >"$work/err" 2>&1; then
    bad "engine/world/world.c with #include \"verify.h\" added still compiles"
elif grep -q "verify.h" "$work/err"; then
    ok "engine/world/world.c with #include \"verify.h\" added fails to compile"
else
    bad "engine/world/world.c with a wrong include failed for another reason"
fi
# And the models, which a program must be able to link with base alone: no engine header but base's.
eval "flags=\${LAYER_FLAGS_models-}"
{ echo '#include "world.h"'; cat "$top/models/model.c"; } >"$work/model_wrong.c"
# shellcheck disable=SC2086
if $CC -fsyntax-only -std=gnu11 $flags $EXTRA_CPPFLAGS "$work/model_wrong.c" >"$work/err" 2>&1; then
    bad "models/model.c with #include \"world.h\" added still compiles"
else
    ok "models/model.c with #include \"world.h\" added fails to compile"
fi

# Nothing reaches around the include paths.
rm -f "$work/err"
around=$(cd "$top" && grep -n '#include "[^"]*/' engine/*/*.[ch] models/*.[ch] sim/*.[ch] 2>/dev/null)
if [ -z "$around" ]; then ok "no include with a path in engine/, models/ or sim/"; else
    echo "$around" >"$work/err"; bad "includes with a path go around the layers"; fi

echo "$pass passed, $fail failed (plus the per-pair lines above)"
[ "$fail" -eq 0 ]
