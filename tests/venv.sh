#!/bin/sh
# venv.sh DIR REQUIREMENTS... - a Python virtual environment at DIR, made with Debian's python3 (python3-venv),
# holding exactly the pinned packages of the REQUIREMENTS files, from PyPI. `make venv` makes the test suite's
# (torch 2.x: tests/python/torch2-requirements.txt; the frameworks: tests/python/frameworks/requirements.txt).
# Made again only when the files change: DIR/.ddpsim-requirements holds what it was made from. Prints what it
# took (seconds, size). VENV_NEED_MB (default 12000) is the free space it asks for on DIR's file system before it
# starts: the largest environment (thunder's) is 6.8 GB installed after a 3.9 GB download (doc/MEASUREMENTS.md), and a
# full disk otherwise surfaces as pip's "No space left on device" minutes in. Exit 1 when the disk is short or pip
# fails (the reason above; a half-made DIR is removed), 2 on bad use.
set -eu
[ $# -ge 2 ] || { echo "usage: venv.sh DIR REQUIREMENTS..." >&2; exit 2; }
dir=$1
shift
need_mb=${VENV_NEED_MB:-12000}
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
# The space an old DIR holds comes back when it is remade; a refusal leaves it as it was.
mkdir -p "$(dirname "$dir")"
free_mb=$(df -Pm "$(dirname "$dir")" | awk 'NR == 2 { print $4 }')
old_mb=0
[ -e "$dir" ] && old_mb=$(du -sm "$dir" | cut -f1)
if [ $((free_mb + old_mb)) -lt "$need_mb" ]; then
    echo "venv.sh: $(dirname "$dir") has $free_mb MB free (and $old_mb MB in the old $dir); making it asks for $need_mb MB (VENV_NEED_MB)" >&2
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
    if ! DS_BUILD_OPS=0 "$dir/bin/pip" install --quiet --disable-pip-version-check --no-cache-dir $isolation -r "$r"; then
        echo "venv.sh: pip failed on $r; $(df -Pm "$(dirname "$dir")" | awk 'NR == 2 { print $4 }') MB left free; removing $dir" >&2
        rm -rf "$dir"
        exit 1
    fi
    isolation=--no-build-isolation
done
printf '%s\n' "$want" >"$dir/.ddpsim-requirements"
echo "venv.sh: $dir made in $(($(date +%s) - start)) s, $(du -sh "$dir" | cut -f1): $("$dir/bin/python" -c 'import torch; print("torch", torch.__version__)')"
