#!/bin/sh
# load.sh - the timing-sensitive tests on a loaded machine: two busy loops
# (one per core of CI's 2-core machine) run beside them the whole time. A test
# that rests on wall-clock time (a sleep before a signal, a limit that counts
# process start-up, a CPU-share rule that calls a starved rank deadlocked)
# fails here first. Each test's own verdict is the stage's: nothing here is
# timed.
#
#   tests/load.sh [BUILD_DIR]     (a configured and built tree; default .)
# Tests: $LOAD_TESTS, default the ones that watch processes and time.
build=${1:-.}
tests=${LOAD_TESTS:-tests/cli.sh tests/python.sh tests/nccl-fake.sh tests/mpi.sh tests/gpu-check-fake.sh tests/soak-check.sh tests/test_world tests/test_chaos}
loops=""
for i in 1 2; do
    sh -c 'while :; do :; done' &
    loops="$loops $!"
done
trap 'kill $loops 2>/dev/null' EXIT INT TERM
echo "load.sh: busy loops$loops beside: $tests"
# python.sh's and cli.sh's processes-and-time parts only (their semantics do not depend on timing, and ran in make
# check); tests/check.sh, whose recordings are replayed without a clock, is not among them. Two tests at a time:
# each competes with the other as well as with the loops (more load, not less), and the stage takes half the time.
DDPSIM_PYTHON_TESTS=processes DDPSIM_CLI_TESTS=processes make -C "$build" -j2 check TESTS="$tests"
