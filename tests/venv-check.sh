#!/bin/sh
# venv-check.sh - tests/venv.sh (make venv) refuses what it cannot finish, and says why: bad use (2), a disk too
# short for the environment (1, before anything is made or removed), a pip failure (1, the half-made environment
# removed); an environment made from the same requirements is not made again. Needs no network: the failing pip
# install names a wheel file that does not exist. Prints "N passed, N failed".
DDPSIM=${DDPSIM:-./sim/ddpsim}
. "$(dirname "$0")/testlib.sh"
venv="sh $(dirname "$0")/venv.sh"
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$out" "$err" "$tmp"' EXIT

expect_cmd 2 "usage: venv.sh" "one argument is bad use" -- $venv "$tmp/env"

printf 'torch==2.15.0\n' >"$tmp/req.txt"
mkdir -p "$tmp/old/bin"
echo keep >"$tmp/old/marker"
expect_cmd 1 "asks for 999999999 MB" "a disk too short for the environment is refused" -- \
    env VENV_NEED_MB=999999999 $venv "$tmp/old" "$tmp/req.txt"
if [ "$(cat "$tmp/old/marker" 2>/dev/null)" = keep ]; then ok "the refusal left the old environment as it was"
else bad "the refusal removed the old environment"; fi

# An environment whose record matches the requirements is up to date: no venv, no pip.
mkdir -p "$tmp/made/bin"
printf '#!/bin/sh\n' >"$tmp/made/bin/python" && chmod +x "$tmp/made/bin/python"
printf 'torch==2.15.0\n' >"$tmp/made/.ddpsim-requirements"
expect_cmd 0 "is up to date" "an environment made from the same requirements is not made again" -- \
    env VENV_PYTHON=/nonexistent $venv "$tmp/made" "$tmp/req.txt"
printf 'torch==2.9.0\n' >"$tmp/made/.ddpsim-requirements"
expect_cmd 1 "has no venv support" "changed requirements make it again (here: refused, no such Python)" -- \
    env VENV_PYTHON=/nonexistent $venv "$tmp/made" "$tmp/req.txt"

if /usr/bin/python3 -c 'import ensurepip' 2>/dev/null; then
    printf '%s\n' "$tmp/no-such-package-1.0-py3-none-any.whl" >"$tmp/bad.txt"
    expect_cmd 1 "pip failed on" "a pip failure is an error" -- env VENV_NEED_MB=1 $venv "$tmp/half" "$tmp/bad.txt"
    if [ -e "$tmp/half" ]; then bad "the half-made environment was left behind"
    else ok "the half-made environment was removed"; fi
else
    echo "SKIP: /usr/bin/python3 has no venv support: the pip failure is not tried"
fi
finish
