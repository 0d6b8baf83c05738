#!/bin/sh
# mpi.sh - ddpsim --world mpi under mpirun, on this machine: the same bits as
# the forked world (every check's digests of both sides, at 2, 3 and 4
# ranks, every summation order, both built-in implementations, a model in
# several pieces), the battery's verdict, and the failures: a crashed, an
# aborted, a hung and a killed rank, a deadlock, each ending the job with
# exit 3 and the rank named, and nothing left behind (no process, no shared
# memory segment). Skips (77) where ddpsim was built without MPI or mpirun
# is missing.
DDPSIM=${DDPSIM:-./sim/ddpsim}
. "$(dirname "$0")/testlib.sh"

"$DDPSIM" --version | grep -q "^MPI world: built" || { echo "SKIP: ddpsim built without MPI"; exit 77; }
command -v mpirun >/dev/null 2>&1 || { echo "SKIP: no mpirun"; exit 77; }
# Open MPI refuses root unless told; CMA (single-copy) is not allowed in every container.
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
# Under ASan (CI's sanitizer stage) memory errors still stop a run; what Open MPI leaves allocated at exit, in
# libraries it loads and unloads itself, is not ddpsim's to judge (the forked runs' leaks are checked elsewhere).
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"

tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp" "$out" "$err"' EXIT
orphans_before=$(shm_orphans ddpsim)
# Every run below names a file under $tmp: its processes (and their ranks) are the ones that list it.
left() { pgrep -f "$tmp" | grep -vc "^$$\$"; }
mpi() { np=$1; shift; timeout 300 mpirun --oversubscribe -np "$np" "$DDPSIM" --world mpi "$@"; }
digests() { grep -o '"check": "[^"]*".*"rank": [0-9]*.*"ref_digest": "[0-9a-f]*", "impl_digest": "[0-9a-f]*"' "$1" |
    sed 's/"max_abs_diff.*"ref_digest"/"ref_digest"/'; }

# same_bits NP WHAT -- ARGS...: the forked and the MPI run of ARGS at NP ranks hold the same bits at every check.
same_bits() {
    np=$1 what=$2
    shift 3
    "$DDPSIM" --ranks "$np" "$@" --json "$tmp/fork.json" >"$out" 2>"$err"
    f=$?
    mpi "$np" "$@" --json "$tmp/mpi.json" >"$out" 2>"$err"
    m=$?
    digests "$tmp/fork.json" >"$tmp/fork.digests"
    digests "$tmp/mpi.json" >"$tmp/mpi.digests"
    n=$(wc -l <"$tmp/mpi.digests")
    if [ "$f" -ne 0 ] || [ "$m" -ne 0 ]; then
        bad "$what at $np ranks: exit $f forked, $m under MPI"
    elif [ "$n" -lt "$np" ]; then
        bad "$what at $np ranks: only $n checks to compare"
    elif ! cmp -s "$tmp/fork.digests" "$tmp/mpi.digests"; then
        bad "$what at $np ranks: the digests differ ($n checks)"
        diff "$tmp/fork.digests" "$tmp/mpi.digests" | head -4
    else
        ok "$what at $np ranks: $n checks, the same digests"
    fi
}

for np in 2 3 4; do
    same_bits "$np" "classic, ordered" -- --scenario classic
    same_bits "$np" "classic, ring, bucketed" -- --scenario classic --algo ring --impl bucketed
    same_bits "$np" "uneven under join, exact" -- --scenario uneven --algo exact
done
same_bits 3 "a 1.3M-parameter model: allreduces and reduce-scatters in pieces, ring" -- \
    --model mlp:512-1024-1024-64 --schedule "2*(nosync{fwd bwd} grab) fwd bwd grab step" --algo ring --impl bucketed
same_bits 3 "bucketed under chaos seed 7 (delays, held-back ready events, shuffled launches)" -- \
    --scenario classic --impl bucketed --chaos 7
same_bits 3 "branchy with find_unused" -- --model branchy --find-unused --schedule "fwd bwd grab step fwd bwd grab"

expect_cmd 0 "verdict: PASS (25 of 25 scenarios: 24 at 4 ranks, 1 under chaos (3 runs)" "the battery under mpirun -np 4" -- \
    mpi 4 --json "$tmp/battery.json"
# Every process judges alike (only rank 0's prints): with every process's output kept, the battery's rows and
# verdict are the same on each.
rm -rf "$tmp/procs"
expect_cmd 0 "verdict: PASS (25 of 25 scenarios" "the battery with every process's output kept" -- \
    env DDPSIM_MPI_ALL_OUTPUT=1 timeout 300 mpirun --oversubscribe -np 3 \
    --output-filename "$tmp/procs" "$DDPSIM" --world mpi --json "$tmp/late.json"
rows() { grep -E '^ [a-z]|^# verdict' "$1"; }
same=0
for r in 0 1 2; do
    f=$(ls "$tmp"/procs/*/rank.$r/stdout 2>/dev/null | head -1)
    [ -n "$f" ] && rows "$f" >"$tmp/rows.$r" && [ "$(wc -l <"$tmp/rows.$r")" -ge 21 ] &&
        cmp -s "$tmp/rows.0" "$tmp/rows.$r" && same=$((same + 1))
done
[ "$same" -eq 3 ] && ok "... every process printed the same rows and verdict" ||
    { bad "... $same of 3 processes printed rank 0's rows and verdict"; diff "$tmp/rows.0" "$tmp/rows.1" | head; }
expect_cmd 1 "first divergence" "a bug is caught under MPI too" -- mpi 3 --scenario classic --impl sync-on-exit \
    --json "$tmp/bug.json"
rm -rf "$tmp/rec" && "$DDPSIM" --ranks 3 --scenario classic --record "$tmp/rec" -q >/dev/null 2>&1
expect_cmd 0 "verdict: PASS" "ddpsim check of a recorded run under MPI" -- \
    timeout 120 mpirun --oversubscribe -np 3 "$DDPSIM" check "$tmp/rec" --world mpi
expect_cmd 0 "ring / MPI_Allreduce at 65536 bytes" "bench allreduce over MPI, MPI_Allreduce beside it" -- \
    timeout 120 mpirun --oversubscribe -np 3 "$DDPSIM" bench allreduce --world mpi --bytes 64K --iters 3 --algo ring \
    --json "$tmp/bench.json"
grep -q "verdict: PASS (0 wrong elements)" "$out" && ok "... every result right" || bad "... every result right"
expect_cmd 2 "3 ranks, but the MPI job has 2 processes" "--ranks against the job's size" -- mpi 2 --ranks 3
expect_cmd 2 "they belong to --world fork" "--trace is refused" -- mpi 2 --scenario classic --trace "$tmp/t.jsonl"
expect_cmd 2 "a fault ends an MPI job" "--mutants is refused" -- mpi 2 --mutants

# --backend nccl over MPI, against the CUDA/NCCL test double (tests/nccl-fake.sh says what it is): rank 0's unique
# id reaches the others by the world's broadcast, now over MPI; each process probes its own host's GPUs and each
# rank takes its host-local GPU.
FAKE=./tests/fakegpu/libfakegpu.so
if [ -f "$FAKE" ]; then
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
    for gpus in 1 4; do
        rm -f "$tmp/fake.log"
        expect_cmd 0 "verdict: PASS" "--backend nccl under MPI on $gpus GPU(s) (the test double)" -- \
            timeout 120 mpirun --oversubscribe -np 3 env LD_PRELOAD="$FAKE" FAKEGPU_LOG="$tmp/fake.log" \
            FAKEGPU_NGPUS=$gpus "$DDPSIM" --world mpi --scenario classic --backend nccl --json "$tmp/nccl.json"
        comms=$(grep -c "^comm rank=[0-2] nranks=3 " "$tmp/fake.log")
        devices=$(grep -o "^comm rank=[0-2] nranks=3 device=[0-9]" "$tmp/fake.log" | sed 's/.*device=//' | sort | tr -d '\n')
        want=000
        [ "$gpus" = 4 ] && want=012
        [ "$comms" = 3 ] && [ "$devices" = "$want" ] && ok "... 3 communicators, ranks on GPUs $want" ||
            bad "... $comms communicators, ranks on GPUs $devices (expected $want)"
    done
else
    echo "(no NCCL in this build: the NCCL-over-MPI checks are not run)"
fi

expect_cmd 1 "first divergence: grab 2" "a flipped bit in rank 1's contribution is caught" -- \
    mpi 3 --scenario classic --fault flip:rank=1,op=10 --json "$tmp/flip.json"

# Failures: exit 3 from the job, the rank named, nothing left behind (waited for, with a deadline).
none_left() { [ "$(left)" -eq 0 ]; }
failure() {
    what=$1 pattern=$2
    shift 3
    expect_cmd 3 "$pattern" "$what" -- mpi 3 --scenario classic --json "$tmp/fail.json" "$@"
    wait_until 30 none_left
    n=$(left)
    if [ "$n" -eq 0 ]; then ok "$what: no process left"; else bad "$what: $n processes left"; pgrep -af "$tmp"; fi
}
failure "a crashed rank" "rank 1 was killed by signal 9 (Killed) on" -- --fault crash:rank=1,op=5
grep -q "rank 1 (pid [0-9]* on [^)]*): killed by signal 9" "$err" && ok "the crashed rank's line names its host" ||
    bad "the crashed rank's line names its host"
[ -f ./tests/plugin/libmismatch.so ] && failure "ranks calling different collectives (a plugin)" \
    "ranks disagree on a collective: rank 0 called allreduce of 7312 float (sum, ordered) for the implementation, rank 1 called allreduce of 7311" \
    -- --impl ./tests/plugin/libmismatch.so
failure "an aborting rank" "rank 0 was killed by signal 6 (Aborted)" -- --fault abort:rank=0,op=9
failure "a hung rank" "no rank made progress for" -- --fault hang:rank=2,op=7 --timeout 2
grep -q "rank 2 (pid [0-9]* on [^)]*): stopped by the supervisor, in op 7 (bwd), not in a collective \[stuck\]" "$err" &&
    ok "the hung rank is the one not in a collective" || bad "the hung rank is the one not in a collective"
expect_cmd 3 "deadlock: rank 2 has finished, and every other rank waits" "a rank that ran out outside join" -- \
    mpi 3 --schedule "fwd bwd grab step zero [3, -1:1]*( fwd bwd grab step zero ) fwd bwd grab" --json "$tmp/d.json"

# A rank process killed from outside, mid-run.
mpi 3 --model mlp:256-512-512-64 --schedule "3000*(fwd bwd grab step zero)" -q --json "$tmp/long.json" \
    >"$out" 2>"$err" &
job=$!
victim=
for i in $(seq 1 100); do
    for p in $(pgrep -f "$tmp/long.json"); do
        parent=$(ps -o ppid= -p "$p" | tr -d ' ')
        [ -n "$parent" ] && ps -o args= -p "$parent" 2>/dev/null | grep -q -- "--world mpi" &&
            ps -o args= -p "$parent" | grep -qv mpirun && victim=$p && break
    done
    [ -n "$victim" ] && break
    sleep 0.1
done
sleep 0.5
if [ -z "$victim" ]; then
    bad "a rank killed from outside: no rank process found"
else
    kill -9 "$victim"
    wait "$job"
    got=$?
    if [ "$got" -eq 3 ] && grep -q "(pid $victim on [^)]*): killed by signal 9" "$err"; then
        ok "a rank killed from outside: exit 3, named"
    else
        bad "a rank killed from outside: exit $got"
    fi
fi
wait_until 30 none_left
n=$(left)
[ "$n" -eq 0 ] && ok "a rank killed from outside: no process left" || bad "a rank killed from outside: $n processes left"

left=$(shm_new_orphans ddpsim "$orphans_before")
[ -z "$left" ] && ok "no shared-memory segment left" || bad "shared-memory segments left behind: $left"
finish
