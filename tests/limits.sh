#!/bin/sh
# limits.sh - ddpsim under the process's resource limits (issue 29, items 2,
# 7 and 14): an address-space limit (`ulimit -v`) that OpenBLAS's thread pool
# or its 128 MiB work buffer does not fit in must not hang any command (it
# did: `--version` too), and a run that does not fit is refused before any
# rank starts, saying what the limit is; a file-size limit (`ulimit -f`) or a
# full file system is a write error naming the file and the reason, exit 3,
# never a silent death by SIGXFSZ (exit 153).
#
# The limits are set relative to what this build of ddpsim takes at its start
# (found by trying; a build with CUDA maps much more than one without), and
# every command runs under a 120 s guard that only keeps a hang from stopping
# the suite (a hang shows as exit 137). Where no address-space limit lets
# ddpsim start at all (ASan and TSan reserve terabytes), that part skips; the
# full file system needs a private tmpfs (unshare -rm), else that part skips.
DDPSIM=${DDPSIM:-./sim/ddpsim}
DDPSIM=$(cd "$(dirname "$DDPSIM")" && pwd)/$(basename "$DDPSIM") # the file cases run in a scratch folder
. "$(dirname "$0")/testlib.sh"
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$out" "$err" "$tmp"' EXIT

# under_v KIB CMD...: CMD under an address-space limit of KIB KiB; under_f BLOCKS CMD...: a file-size limit.
under_v() { timeout -s KILL 120 sh -c 'ulimit -v "$1"; shift; exec "$@"' sh "$@"; }
under_f() { timeout -s KILL 120 sh -c 'ulimit -f "$1"; shift; exec "$@"' sh "$@"; }

# --- ulimit -v ---
# The smallest limit (in steps of 16 MiB) under which ddpsim starts at all, with no thread pool to feed.
base=""
kib=65536
while [ "$kib" -le 4194304 ]; do
    if OPENBLAS_NUM_THREADS=1 under_v "$kib" "$DDPSIM" --version >/dev/null 2>&1; then
        base=$kib
        break
    fi
    kib=$((kib + 16384))
done
if [ -z "$base" ]; then
    echo "SKIP: ddpsim does not start under any address-space limit up to 4 GiB (a sanitizer build): no ulimit -v cases"
else
    # 48 MiB over that: room for ddpsim, none for a 128 MiB buffer of OpenBLAS's.
    tight=$((base + 49152))
    echo "ddpsim starts under ulimit -v $base; the tight limit is $tight KiB"
    expect_cmd 0 "^ddpsim " "--version under a limit OpenBLAS's thread pool does not fit in" -- \
        under_v "$tight" "$DDPSIM" --version
    expect_cmd 2 "out of range" "--ranks 0 under that limit: the exit-2 message, and an exit" -- \
        under_v "$tight" "$DDPSIM" --ranks 0
    expect_cmd 2 "address-space limit (ulimit -v)" "a run that does not fit the limit is refused before any rank starts" -- \
        under_v "$tight" "$DDPSIM" --ranks 2 --scenario classic
    check_msg() { grep -q "OpenBLAS's 128 MiB work buffer" "$err" && grep -q -- "--portable-math needs no" "$err"; }
    if check_msg; then ok "... naming OpenBLAS's buffer and --portable-math"; else bad "... naming OpenBLAS's buffer and --portable-math"; fi
    expect_cmd 0 "verdict: PASS" "the same run under --portable-math fits (the check counts the buffer, not a blanket margin)" -- \
        under_v "$tight" "$DDPSIM" --ranks 2 --scenario classic --portable-math
    expect_cmd 2 "address-space limit (ulimit -v)" "the battery under the tight limit is refused too" -- \
        under_v "$tight" "$DDPSIM" --ranks 2
    expect_cmd 0 "verdict: PASS" "with 512 MiB more the run passes" -- \
        under_v "$((base + 524288))" "$DDPSIM" --ranks 2 --scenario classic
fi

# --- ulimit -f (blocks of 512 bytes in POSIX sh, of 1024 in bash: dash's -f counts 512-byte blocks) ---
# A coverage build (--enable-coverage) writes gcov's counts as it exits, files of up to 16 KiB each: under a limit
# of 16 blocks that write itself is over it (SIGXFSZ), whatever ddpsim did. The case runs in every other build.
if ls "${BUILD_DIR:-.}"/sim/*.gcno >/dev/null 2>&1; then
    echo "SKIP: a coverage build writes its counts past 16 blocks as it exits: no ulimit -f 16 case"
else
    expect_cmd 2 "file-size limit (ulimit -f)" "a shared segment over the file-size limit is refused before any rank starts" -- \
        under_f 16 "$DDPSIM" --scenario classic --ranks 2
fi
# 5000 blocks (2.4 MiB of 512, 4.9 MiB of 1024 bytes) hold the 2-rank segment of this run, not its 4 MiB weights.
cd "$tmp" || exit 99
seg_ok() { under_f 16000 "$DDPSIM" --ranks 2 --model mlp:1024-1024-16 --schedule "fwd bwd grab" -q >/dev/null 2>&1; }
seg_ok || { echo "FAIL: the small run does not pass under ulimit -f 16000"; fail=$((fail + 1)); }
expect_cmd 3 "rf/.*File too large" "--record over ulimit -f: exit 3 naming the file and EFBIG, not SIGXFSZ" -- \
    under_f 16000 "$DDPSIM" --ranks 2 --model mlp:2048-1024-16 --schedule "fwd bwd grab" --record rf
expect_cmd 3 "uf/.*File too large" "--dump over ulimit -f: the same" -- \
    under_f 16000 "$DDPSIM" --ranks 2 --model mlp:2048-1024-16 --schedule "fwd bwd grab" --dump uf

# --- a full file system: a private 1 MiB tmpfs, where this machine allows one ---
mkdir "$tmp/full"
if unshare -rm sh -c "mount -t tmpfs -o size=1m none '$tmp/full'" 2>/dev/null; then
    expect_cmd 3 "full/rf/.*No space left on device" "--record on a full file system: exit 3 naming the file and ENOSPC" -- \
        unshare -rm sh -c "mount -t tmpfs -o size=1m none '$tmp/full' && exec \"\$0\" --ranks 2 --model mlp:1024-1024-16 \
            --schedule 'fwd bwd grab' --record '$tmp/full/rf'" "$DDPSIM"
    expect_cmd 3 "full/uf/.*No space left on device" "--dump on a full file system: the same" -- \
        unshare -rm sh -c "mount -t tmpfs -o size=1m none '$tmp/full' && exec \"\$0\" --ranks 2 --model mlp:1024-1024-16 \
            --schedule 'fwd bwd grab' --dump '$tmp/full/uf'" "$DDPSIM"
else
    echo "SKIP: no private tmpfs here (unshare -rm): no full-file-system cases"
fi
if [ -c /dev/full ]; then
    expect 2 "No space left on device" "--json on a full device (/dev/full) is refused before any rank starts" -- \
        --scenario classic --json /dev/full
fi
cd - >/dev/null || exit 99
finish
