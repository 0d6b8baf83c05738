#!/bin/sh
# nccl-fake.sh - the NCCL backend's plumbing on a machine without a GPU:
# ddpsim runs with tests/fakegpu/libfakegpu.so preloaded, a test double for
# the CUDA and NCCL calls (see its header). What this checks is ddpsim's
# side: the GPU probe runs outside the parent, each rank gets the NCCL
# environment it should (and the user's variables win), the implementation's
# reductions really go through the backend (bitwise fails against the
# double's reverse-order sums), ncclAvg, the report, and every failure path:
# exit 3 with the rank and the failing call, nothing left behind.
# Nothing here says anything about NCCL itself: tests/gpu.sh does, on a GPU.
# Skips (77) in builds without NCCL.
DDPSIM=${DDPSIM:-./sim/ddpsim}
FAKE=${FAKEGPU_LIB:-./tests/fakegpu/libfakegpu.so}
[ -f "$FAKE" ] || { echo "SKIP: no $FAKE (ddpsim built without NCCL)"; exit 77; }
# An ASan build wants its runtime first in the library list; the double goes first here.
ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0
export ASAN_OPTIONS
. "$(dirname "$0")/testlib.sh"
rm -f "$out" "$err" # testlib's; this script keeps its files in $dir
dir=$(mktemp -d) || exit 99
trap 'rm -rf "$dir"' EXIT
out=$dir/out err=$dir/err log=$dir/log
# The double's segments carry this script's pid: the leftovers checked at the end are this script's own.
FAKEGPU_SHM_TAG=t$$
export FAKEGPU_SHM_TAG

bad() { fail=$((fail + 1)); echo "FAIL: $1"; sed 's/^/  stdout: /' "$out"; sed 's/^/  stderr: /' "$err"; sed 's/^/  log: /' "$log" 2>/dev/null; }

# run [VAR=VALUE ...] -- ARGS: ddpsim with the double preloaded and a fresh log
run() {
    rm -f "$log"
    env LD_PRELOAD="$FAKE" FAKEGPU_LOG="$log" "$@" >"$out" 2>"$err"
    rc=$?
    cat "$log" >>"$dir/every.log" 2>/dev/null # every run's probe and rank pids, for the last check
    return $rc
}
# expect CODE PATTERN DESCRIPTION [VAR=VALUE ...] -- ARGS
expect() {
    code=$1 pattern=$2 what=$3
    shift 3
    vars=""
    while [ "$1" != "--" ]; do vars="$vars $1"; shift; done
    shift
    # Single runs (the classic scenario unless another is named): the backend's report is a single run's.
    scen="--scenario classic"
    case " $* " in *" --scenario "*) scen="" ;; esac
    # shellcheck disable=SC2086
    run $vars "$DDPSIM" $scen "$@"
    got=$?
    if [ "$got" -ne "$code" ]; then
        bad "$what: exit $got, expected $code"
        return 1
    elif [ -n "$pattern" ] && ! grep -q -- "$pattern" "$out" "$err"; then
        bad "$what: output lacks '$pattern'"
        return 1
    fi
    ok "$what"
}
check() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }
orphans_before=$(shm_orphans ddpsim)

# 4 ranks on one GPU: separate NCCL hosts, the determinism pins, a passing run.
expect 0 "verdict: PASS" "4 ranks on 1 GPU pass with the default tolerance" -- --ranks 4 --backend nccl
check "header says what it set up and that NVIDIA does not support it" \
    'grep -q "own NCCL_HOSTID.*NVIDIA does not support it" "$out" && grep -q "NCCL_ALGO=Ring NCCL_PROTO=Simple" "$out"'
check "... and warns that 4 ranks on one GPU time-slice only above 4" '! grep -q "contexts time-slice" "$out"'
check "default tolerance is order" 'grep -q "tolerance order" "$out"'
check "each rank its own NCCL_HOSTID, over lo, IB off, one ring channel" \
    '[ "$(grep -c "^comm " "$log")" = 4 ] &&
     [ "$(grep -o "NCCL_HOSTID=ddpsim-host[0-9]*" "$log" | sort -u | wc -l)" = 4 ] &&
     [ "$(grep -c "NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 NCCL_ALGO=Ring NCCL_PROTO=Simple NCCL_MIN_NCHANNELS=1 NCCL_MAX_NCHANNELS=1" "$log")" = 4 ]'
check "all ranks on device 0" '[ "$(grep -c "^comm .*device=0 " "$log")" = 4 ]'
probe_pid=$(sed -n 's/^probe pid=\([0-9]*\).*/\1/p' "$log" | head -1)
parent_pid=$(sed -n 's/^comm .* ppid=\([0-9]*\).*/\1/p' "$log" | head -1)
check "the GPU probe ran in a child, not in the parent that forks the ranks" \
    '[ -n "$probe_pid" ] && [ -n "$parent_pid" ] && [ "$probe_pid" != "$parent_pid" ]'
check "report: ulp histogram with differences (the double sums in another order)" \
    'grep -q "ulp distance to the reference.*max [1-9]" "$out"'
check "report: NCCL timing, digest agreed by all ranks, ring emulation share" \
    'grep -q "allreduces per rank" "$out" && grep -q "identical on every rank" "$out" && grep -q "ring emulation" "$out"'

# Two runs agree bitwise: --repeat runs the same data under two chaos seeds.
expect 0 "implementation under every chaos seed: bitwise identical" "--repeat 2 through the backend" \
    -- --ranks 3 --backend nccl --repeat 2

# Enough GPUs: one each, no host ids.
expect 0 "verdict: PASS" "4 ranks on 4 GPUs pass" FAKEGPU_NGPUS=4 -- --ranks 4 --backend nccl
check "rank r on GPU r, no NCCL_HOSTID, no socket settings" \
    '[ "$(grep -c "NCCL_HOSTID=- NCCL_SOCKET_IFNAME=- NCCL_IB_DISABLE=-" "$log")" = 4 ] &&
     [ "$(grep -o "^comm rank=[0-9] nranks=4 device=[0-9]" "$log" | awk "{split(\$2,a,\"=\"); split(\$4,b,\"=\"); if (a[2]!=b[2]) bad=1} END {print bad ? \"no\" : \"yes\"}")" = yes ]'
check "header does not claim separate hosts" '! grep -q "own NCCL_HOSTID" "$out"'

# More ranks than GPUs: only the ranks that share a GPU are separate NCCL hosts (blocks of ngpus ranks).
expect 0 "2 NCCL hosts (ranks 0-3, 4-" "6 ranks on 4 GPUs: two host blocks" FAKEGPU_NGPUS=4 -- --ranks 6 --backend nccl
check "ranks 0-3 one host id on GPUs 0-3, ranks 4-5 another on GPUs 0-1" \
    '[ "$(grep -c "^comm rank=[0-3] .*NCCL_HOSTID=ddpsim-host0 " "$log")" = 4 ] &&
     [ "$(grep -c "^comm rank=[45] .*NCCL_HOSTID=ddpsim-host1 " "$log")" = 2 ] &&
     grep -q "^comm rank=4 nranks=6 device=0 " "$log" && grep -q "^comm rank=5 nranks=6 device=1 " "$log"'
expect 0 "warning: 6 ranks share a GPU" "6 ranks on one GPU: the header warns of time-slicing" -- --ranks 6 --backend nccl
# A NCCL_HOSTID the user set cannot go to every rank: NCCL would see one host and refuse the shared GPU
# ("Duplicate GPU detected", which the double does too: shown firing with one id forced on every rank).
expect 0 "NCCL_HOSTID=myhost-0 (per host block, derived from yours: myhost)" \
    "the user's NCCL_HOSTID: one per host block, derived, said" NCCL_HOSTID=myhost -- --ranks 4 --backend nccl
check "the ranks ran with myhost-0 .. myhost-3" '[ "$(grep -o "NCCL_HOSTID=myhost-[0-9]" "$log" | sort -u | wc -l)" = 4 ]'
expect 3 "Duplicate GPU detected" "two ranks of one host id on one GPU are refused, as NCCL does" \
    FAKEGPU_FORCE_HOSTID=one -- --ranks 2 --backend nccl
# A slow initialisation (bootstrapping over sockets, time-sliced contexts) is not a hang.
expect 0 "verdict: PASS" "an init slower than --timeout is waited for, not called a hang" \
    FAKEGPU_INIT_MS=3500 -- --ranks 2 --backend nccl --timeout 2
# The CPU ring emulation runs only when asked.
expect 0 "ring emulation did not run" "the ring emulation is off by default" -- --ranks 2 --backend nccl
expect 0 "ring emulation (--algo ring) reproduces" "--nccl-ring-check runs it" -- --ranks 3 --backend nccl --nccl-ring-check
expect 2 "goes with --backend nccl" "--nccl-ring-check without the backend" -- --nccl-ring-check
# Uneven inputs under join go through the backend too.
expect 0 "verdict: PASS" "join through the backend, bucketed" -- --ranks 3 --backend nccl --impl bucketed --scenario uneven
expect 1 "first divergence: grab 4" "... and a join bug is caught through it" -- --ranks 3 --backend nccl \
    --impl join-divides-by-running --scenario uneven
expect 2 "with --nccl-op avg" "join with ncclAvg is refused" -- --ranks 3 --backend nccl --nccl-op avg --scenario uneven

# The user's NCCL variables win.
expect 0 "NCCL_PROTO=LL (yours)" "a user-set NCCL variable is kept and shown" NCCL_PROTO=LL -- --ranks 2 --backend nccl
check "the ranks ran with the user's value" '[ "$(grep -c "NCCL_PROTO=LL " "$log")" = 2 ]'

# The implementation's reductions really go through the backend.
expect 1 "verdict: FAIL" "bitwise against the backend's other summation order fails" \
    -- --ranks 4 --backend nccl --tolerance bitwise
expect 0 "verdict: PASS" "bucketed through the backend" -- --ranks 4 --backend nccl --impl bucketed
expect 1 "verdict: FAIL" "a catalogued bug is still caught through the backend" \
    -- --ranks 4 --backend nccl --impl sync-on-exit
expect 0 "nccl op: avg" "--nccl-op avg with the reference" -- --ranks 3 --backend nccl --nccl-op avg
expect 0 "verdict: PASS" "--nccl-op avg with bucketed" -- --ranks 3 --backend nccl --nccl-op avg --impl bucketed
expect 2 "only the built-in reference and bucketed" "--nccl-op avg refuses other implementations" \
    -- --backend nccl --nccl-op avg --impl sync-on-exit
expect 2 "goes with --backend nccl" "--nccl-op without the backend" -- --nccl-op sum
expect 2 "expected one of cpu|nccl" "an unknown backend" -- --backend mpi
expect 0 "" "--json carries the backend's figures" -- --ranks 2 --backend nccl --json "$dir/r.json"
check "json: backend, histogram, nccl object" \
    'grep -q "\"backend\": \"nccl\"" "$dir/r.json" && grep -q "\"ulp_histogram\"" "$dir/r.json" && grep -q "\"ranks_agree\": true" "$dir/r.json"'

# Failures: exit 3, the rank and the call named, nothing left behind.
expect 3 "no usable GPU" "no GPU: exit 3 before any rank starts" FAKEGPU_NGPUS=0 -- --ranks 2 --backend nccl
check "no rank reached NCCL" '! grep -q "^comm " "$log"'
expect 3 "ncclCommInitRankConfig" "a failing communicator init: exit 3 with the call" \
    FAKEGPU_FAIL=ncclCommInitRankConfig:2 -- --ranks 4 --backend nccl
check "the failing rank is named" 'grep -q "rank 2" "$err" && grep -q "injected failure" "$err"'
expect 3 "ncclAllReduce" "a failing allreduce: exit 3 with the call" FAKEGPU_FAIL=ncclAllReduce:1 -- --ranks 3 --backend nccl
check "the failing rank aborted its communicator" 'grep -q "^abort rank=1" "$log"'
# The double's copy out of a hung allreduce blocks, as CUDA's into pageable memory does: only a copy through
# page-locked staging returns, so that the wait can see its deadline.
expect 3 "NCCL communicator aborted" "a hanging allreduce is aborted at the timeout" \
    FAKEGPU_HANG=1 -- --ranks 2 --backend nccl --timeout 5
check "a rank waiting on the hung allreduce aborted its communicator" 'grep -q "^abort rank=[01]" "$log"'
# --timeout 5: a peer's NCCL deadline is 0.8 of it (4 s), the watchdog's all of it; the 1 s between them is for a
# loaded machine. (With --timeout 2 a rank descheduled for 0.4 s would let the watchdog speak first.)
# A rank that hangs outside NCCL (a fault): its peers' allreduces never complete, and they abort at the deadline
# instead of blocking (the double's allreduce completes only when every rank has arrived, as NCCL's does).
# The message proves the deadline held (no wall-clock limit here: a loaded machine starts processes slowly).
expect 3 "ncclAllReduce did not finish in 4.0 s; NCCL communicator aborted" "peers of a rank hung outside NCCL abort in time" \
    -- --ranks 3 --backend nccl --fault hang:rank=1,op=1 --timeout 5
# Every run has ended: a segment of the double's left now is a leak, and so is one of ddpsim's whose process is gone.
check "no shared memory segment left behind" \
    '[ -z "$(ls /dev/shm 2>/dev/null | grep "^fakegpu$FAKEGPU_SHM_TAG-")" ] && [ -z "$(shm_new_orphans ddpsim "$orphans_before")" ]'
# Every process the double saw (GPU probes and ranks of every run) is gone.
alive() { for p in $(grep -o " pid=[0-9]*" "$dir/every.log" | cut -d= -f2 | sort -u); do kill -0 "$p" 2>/dev/null && echo "$p"; done; }
check "no rank or probe process left behind" '[ -s "$dir/every.log" ] && [ -z "$(alive)" ]'

finish
