#!/bin/sh
# kernels.sh - the numerics-sensitive tests under other CPUs' OpenBLAS kernels.
#
# OpenBLAS picks its kernel by CPU (OPENBLAS_CORETYPE overrides it), and each
# kernel adds in its own order: a tolerance tuned on one machine's kernel
# turns another machine's CI red (issue 28: the twins' 1e-5 held on the SSE
# kernels and failed on every AVX2 one). This reruns the tests whose figures
# depend on the kernel (the models against finite differences and the golden
# PyTorch gradients, the order budget, the reference DDP, verification, the
# battery, the torch twins, and --portable-math's digest) under each kernel
# this CPU can run; a kernel it cannot run is skipped, said.
#
#   tests/kernels.sh [BUILD_DIR]      (from the source tree; BUILD_DIR defaults to .)
# Kernels: $KERNELS, default "Prescott Nehalem Sandybridge Haswell SkylakeX Zen".
# Exits 0 when every kernel run passed, 1 otherwise; prints "N passed, N failed".
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-.}" && pwd) || exit 2
DDPSIM=$build/sim/ddpsim
[ -x "$DDPSIM" ] || { echo "kernels.sh: no $DDPSIM: build first" >&2; exit 2; }
. "$here/testlib.sh"
kernels=${KERNELS:-Prescott Nehalem Sandybridge Haswell SkylakeX Zen}
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null)
has() { case " $flags " in *" $1 "*) return 0 ;; esac; return 1; }
# What each kernel executes: a CPU without it would die of SIGILL.
runs_here() {
    case $1 in
    Prescott) has pni ;; # SSE3 is "pni" in /proc/cpuinfo
    Nehalem) has sse4_2 ;;
    Sandybridge) has avx ;;
    Haswell | Zen) has avx2 && has fma ;;
    SkylakeX | Cooperlake) has avx512f && has avx512bw && has avx512vl ;;
    *) return 1 ;;
    esac
}
py=""
for c in "$PYTHON_TORCH" /usr/bin/python3 python3; do
    if [ -n "$c" ] && "$c" -c "import torch, numpy" 2>/dev/null; then py=$c; break; fi
done
ran=0
openblas_digests=
for k in $kernels; do
    if ! runs_here "$k"; then
        echo "SKIP: kernel $k: this CPU lacks its instructions"
        continue
    fi
    # The kernel OpenBLAS really took (it falls back to another for a name it does not know): the header says.
    got=$(OPENBLAS_CORETYPE=$k "$DDPSIM" --ranks 1 --schedule "fwd bwd grab" | sed -n 's/^# math: OpenBLAS [^ ]*, kernel \([^ ,]*\).*/\1/p')
    if [ "$(echo "$got" | tr A-Z a-z)" != "$(echo "$k" | tr A-Z a-z)" ]; then
        bad "kernel $k: OpenBLAS runs kernel '$got' instead"
        continue
    fi
    ran=$((ran + 1))
    for t in test_models test_order test_ddp test_verify test_battery test_pattern; do
        expect_cmd 0 "" "kernel $k: $t" -- env OPENBLAS_CORETYPE="$k" "$build/tests/$t"
    done
    expect_cmd 0 "verdict: PASS (31 of 31 scenarios" "kernel $k: ddpsim --ranks 4" -- \
        env OPENBLAS_CORETYPE="$k" "$DDPSIM" --ranks 4
    expect_cmd 0 "portable math: the reference's bits match the stored digest" "kernel $k: --portable-math's digest" -- \
        env OPENBLAS_CORETYPE="$k" DDPSIM="$DDPSIM" sh "$here/portable.sh"
    openblas_digests="$openblas_digests $(sed -n 's/^openblas digest: \([0-9-]*\).*/\1/p' "$out")"
    # Each catalogued bug's pattern holds to PATTERN_REL (pattern.h), far above any kernel's rounding.
    expect_cmd 0 "0 failed" "kernel $k: every catalogued bug's pattern" -- \
        env OPENBLAS_CORETYPE="$k" DDPSIM="$DDPSIM" sh "$here/patterns.sh"
    if [ -n "$py" ]; then
        expect_cmd 0 "twin attn: names, shapes and gradients match" "kernel $k: the torch twins" -- \
            env OPENBLAS_CORETYPE="$k" PYTHONPATH="$here/../python" DDPSIM="$DDPSIM" "$py" "$here/python/twins_check.py"
    else
        echo "SKIP: kernel $k: the torch twins (no Python with torch)"
    fi
done
[ "$ran" -ge 1 ] || bad "no kernel could run here"
# What portable math is for, and the digest's power to see it: OpenBLAS's own bits differ between kernels.
distinct=$(echo $openblas_digests | tr ' ' '\n' | sort -u | grep -c .)
echo "OpenBLAS's reference bits over the $ran kernels run: $distinct distinct digests ($openblas_digests )"
if [ "$ran" -ge 2 ]; then
    [ "$distinct" -ge 2 ] && ok "the digest tells OpenBLAS's kernels apart (portable math's gave one)" ||
        bad "OpenBLAS's kernels gave the same bits: the digest sees nothing"
fi
finish
