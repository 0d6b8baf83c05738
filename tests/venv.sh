#!/bin/sh
# venv.sh DIR REQUIREMENTS... - a Python virtual environment at DIR, made with Debian's python3 (python3-venv),
# holding exactly the pinned packages of the REQUIREMENTS files, from PyPI. `make venv` makes the test suite's
# (torch 2.x: tests/python/torch2-requirements.txt; the frameworks: tests/python/frameworks/requirements.txt).
# Made again only when the files change: DIR/.ddpsim-requirements holds what it was made from. Prints what it
# took (seconds, size). Exit 1 when pip fails (the reason above), 2 on bad use.
set -eu
[ $# -ge 2 ] || { echo "usage: venv.sh DIR REQUIREMENTS..." >&2; exit 2; }
dir=$1
shift
python=${VENV_PYTHON:-/usr/bin/python3}
want=$(cat "$@" | grep -v '^[[:space:]]*#' | sort)
if [ -x "$dir/bin/python" ] && [ "$(cat "$dir/.ddpsim-requirements" 2>/dev/null)" = "$want" ]; then
    echo "venv.sh: $dir is up to date"
    exit 0
fi
if ! "$python" -c 'import ensurepip' 2>/dev/null; then
    echo "venv.sh: $python has no venv support (Debian: apt-get install python3-venv)" >&2
    exit 1
fi
start=$(date +%s)
rm -rf "$dir"
"$python" -m venv "$dir"
# The first file brings torch; a later one may hold packages that come as source and build against it (DeepSpeed,
# fairscale: their setup.py imports torch), so those build in this environment, not an isolated one, and build
# no CUDA op (DS_BUILD_OPS=0).
isolation=
for r in "$@"; do
    DS_BUILD_OPS=0 "$dir/bin/pip" install --quiet --disable-pip-version-check $isolation -r "$r"
    isolation=--no-build-isolation
done
printf '%s\n' "$want" >"$dir/.ddpsim-requirements"
echo "venv.sh: $dir made in $(($(date +%s) - start)) s, $(du -sh "$dir" | cut -f1): $("$dir/bin/python" -c 'import torch; print("torch", torch.__version__)')"
