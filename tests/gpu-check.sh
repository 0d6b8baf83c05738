#!/bin/sh
# gpu-check.sh OUTDIR - the first GPU run, in one go, on a machine with CUDA,
# NCCL and a GPU, and without CUnit, libtool or a network:
#   1. configure and build ddpsim with CUDA and NCCL (the program only);
#   2. run the NCCL tests (tests/gpu.sh);
#   3. for 2, 3, 4 and 8 ranks through --backend nccl: the scenario battery
#      with --json; the classic scenario with --json and the CPU ring
#      emulation; --repeat 2 (determinism); one injected hang (a rank stops
#      before its first backward: its peers' NCCL allreduces must be aborted
#      at their deadline, not block); and at 3 ranks --mutants, within a time
#      budget (each of its 720 runs starts NCCL afresh);
#   4. with MPI built and mpirun there: --world mpi --backend nccl at 2
#      ranks (the unique id over MPI), its NCCL result digest against the
#      forked run's;
#   5. print one summary table: per rank count the battery's verdict, the
#      ulp histogram, the share of elements the CPU ring emulation predicts
#      bit for bit, GPU time per allreduce, wall time, determinism, mutants
#      and the hang's abort time.
# Everything goes under OUTDIR (default $OUT, else ./gpu-check-out): logs,
# JSON reports, summary.txt. Exit status: 0 when every check held, 1 when
# one did not, 77 when no GPU is usable (tests/gpu.sh's skip).
#
# Against the test double, on a machine without a GPU (what make check's
# tests/gpu-check-fake.sh does): GPU_CHECK_FAKE=path/to/libfakegpu.so
# preloads it into every ddpsim run. Knobs: BUILD (build directory, default
# $src/build-gpu), GPU_CHECK_RANKS ("2 3 4 8"), GPU_CHECK_MUTANTS_RANKS ("3"),
# GPU_CHECK_MUTANTS_S (the budget of each --mutants run, 120 s),
# GPU_CHECK_BUDGET_S (past this many seconds the remaining --mutants runs are
# skipped, and the table says so: 360, so that the whole fits in 8 minutes),
# GPU_CHECK_DDPSIM (skip the build: use this ddpsim).
set -u
src=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-${OUT:-./gpu-check-out}}
mkdir -p "$out" || exit 99
out=$(cd "$out" && pwd)
ranks=${GPU_CHECK_RANKS:-2 3 4 8}
mutants_s=${GPU_CHECK_MUTANTS_S:-120}
mutants_ranks=${GPU_CHECK_MUTANTS_RANKS:-3}
budget_s=${GPU_CHECK_BUDGET_S:-360}
t_start=$(date +%s)
summary=$out/summary.txt
fail=0

say() { echo "$*" | tee -a "$out/log.txt"; }
elapsed() { echo $(( $(date +%s) - $1 )); }
# ddpsim with the double preloaded when asked (never the build's own tools)
dd() {
    if [ -n "${GPU_CHECK_FAKE:-}" ]; then
        env LD_PRELOAD="$GPU_CHECK_FAKE" ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
            "$ddpsim" "$@"
    else
        "$ddpsim" "$@"
    fi
}
# a JSON member, by the interpreter the machine has (python3 may be missing: then sed)
json_get() {
    if command -v python3 >/dev/null 2>&1; then
        python3 -c 'import json,sys
d=json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."):
    d=d.get(k) if isinstance(d,dict) else None
print("-" if d is None else d)' "$1" "$2" 2>/dev/null || echo "-"
    else
        echo "-"
    fi
}

: >"$out/log.txt"
say "# gpu-check $(date -u '+%Y-%m-%d %H:%M UTC') on $(uname -n), $(nproc 2>/dev/null || echo '?') cores${GPU_CHECK_FAKE:+, against the test double $GPU_CHECK_FAKE}"
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader |
    tee -a "$out/log.txt"

# 1. build
if [ -n "${GPU_CHECK_DDPSIM:-}" ]; then
    ddpsim=$GPU_CHECK_DDPSIM
else
    build=${BUILD:-$src/build-gpu}
    [ -x "$src/configure" ] || (cd "$src" && autoreconf -fi >/dev/null)
    # A source tree configured in place cannot host a separate build: build there.
    [ -f "$src/config.status" ] && build=$src
    mkdir -p "$build"
    t=$(date +%s)
    (cd "$build" && "$src/configure" --with-cuda --with-nccl >"$out/configure.log" 2>&1) ||
        { tail -20 "$out/configure.log"; exit 1; }
    (cd "$build" && make -j"$(nproc 2>/dev/null || echo 4)" sim/ddpsim >"$out/make.log" 2>&1) ||
        { tail -30 "$out/make.log"; exit 1; }
    say "# built in $(elapsed "$t") s ($build)"
    ddpsim=$build/sim/ddpsim
fi
dd --version >"$out/version.txt" 2>&1
case $(cat "$out/version.txt") in
*"not built"*) say "FAIL: ddpsim was built without NCCL"; exit 1 ;;
*"GPU(s) visible"*) cat "$out/version.txt" | tee -a "$out/log.txt" ;;
*) say "SKIP: no usable GPU: $(cat "$out/version.txt")"; exit 77 ;;
esac

# 2. the NCCL tests
t=$(date +%s)
if [ -n "${GPU_CHECK_FAKE:-}" ]; then
    LD_PRELOAD="$GPU_CHECK_FAKE" DDPSIM=$ddpsim sh "$src/tests/gpu.sh" >"$out/gpu-tests.log" 2>&1
else
    DDPSIM=$ddpsim sh "$src/tests/gpu.sh" >"$out/gpu-tests.log" 2>&1
fi
code=$?
say "# tests/gpu.sh: exit $code in $(elapsed "$t") s ($(tail -1 "$out/gpu-tests.log"))"
[ "$code" -eq 0 ] || fail=1

# 3. per rank count
printf '%-5s %-8s %-28s %-9s %-10s %-8s %-7s %-11s %-12s %s\n' ranks battery "ulp histogram 0/1/2-4/5-16/>16" \
    ring% "GPU ms/ar" "wall s" repeat mutants "hang abort" "" >"$summary"
for n in $ranks; do
    t=$(date +%s)
    dd --ranks "$n" --backend nccl --json "$out/battery-$n.json" >"$out/battery-$n.txt" 2>&1
    code=$?
    battery=$(sed -n 's/^# verdict: \([A-Z]*\).*/\1/p' "$out/battery-$n.txt" | tail -1)
    [ "$code" -eq 0 ] || { battery="${battery:-FAULT}"; fail=1; }
    say "# $n ranks: battery exit $code in $(elapsed "$t") s: $(grep '^# verdict' "$out/battery-$n.txt")"

    dd --ranks "$n" --backend nccl --scenario classic --nccl-ring-check --json "$out/classic-$n.json" \
        >"$out/classic-$n.txt" 2>&1 || fail=1
    j=$out/classic-$n.json
    hist="$(json_get "$j" ulp_histogram.0)/$(json_get "$j" ulp_histogram.1)/$(json_get "$j" ulp_histogram.2-4)"
    hist="$hist/$(json_get "$j" ulp_histogram.5-16)/$(($(json_get "$j" ulp_histogram.17-256 | sed 's/-/0/') + \
        $(json_get "$j" ulp_histogram.\>256 | sed 's/-/0/')))"
    ring=$(sed -n 's/^# nccl: the CPU ring emulation.* reproduces \([0-9.]*\)%.*/\1/p' "$out/classic-$n.txt")
    gpu_ms=$(sed -n 's/^# nccl: .* per allreduce \([0-9.]*\) ms on the GPU.*/\1/p' "$out/classic-$n.txt")
    wall=$(json_get "$j" wall_s | awk '{ printf "%.2f", $1 }')

    dd --ranks "$n" --backend nccl --scenario classic --repeat 2 >"$out/repeat-$n.txt" 2>&1
    if grep -q "implementation under every chaos seed: bitwise identical" "$out/repeat-$n.txt"; then repeat=same
    else repeat=DIFFER; fail=1; fi

    mutants=-
    case " $mutants_ranks " in *" $n "*) mutants=skipped ;; esac
    if [ "$mutants" = skipped ] && [ "$(elapsed "$t_start")" -ge "$budget_s" ]; then
        mutants="over budget"
        say "# $n ranks: --mutants skipped: $(elapsed "$t_start") s used of the $budget_s s budget"
    elif [ "$mutants" = skipped ]; then
        t=$(date +%s)
        timeout "$mutants_s" sh -c 'if [ -n "${GPU_CHECK_FAKE:-}" ]; then export LD_PRELOAD="$GPU_CHECK_FAKE"; fi
            exec "$0" --mutants --backend nccl --ranks "$1"' "$ddpsim" "$n" >"$out/mutants-$n.txt" 2>&1
        code=$?
        if [ "$code" -eq 124 ]; then mutants="unfinished"
        else
            mutants=$(sed -n 's/^# mutation score: \([0-9]* of [0-9]*\) caught.*/\1/p' "$out/mutants-$n.txt" | tr -d ' ' |
                sed 's/of/\//')
            [ "$code" -eq 0 ] || { mutants="${mutants:-?} FAIL"; fail=1; }
        fi
        say "# $n ranks: --mutants exit $code in $(elapsed "$t") s (budget $mutants_s s)"
    fi

    t=$(date +%s)
    dd --ranks "$n" --backend nccl --scenario classic --fault hang:rank=1,op=1 --timeout 10 \
        >"$out/hang-$n.txt" 2>&1
    code=$?
    took=$(elapsed "$t")
    # The message proves the abort came at the deadline; the time taken is a figure, not a limit.
    if [ "$code" -eq 3 ] && grep -q "did not finish in .* s; NCCL communicator aborted" "$out/hang-$n.txt"; then
        hang="${took} s"
    else
        hang="FAIL (exit $code, ${took} s)"
        fail=1
    fi
    printf '%-5s %-8s %-28s %-9s %-10s %-8s %-7s %-11s %-12s\n' "$n" "${battery:-?}" "$hist" "${ring:--}" \
        "${gpu_ms:--}" "$wall" "$repeat" "$mutants" "$hang" >>"$summary"
done

# 4. NCCL over MPI: each process one rank, the communicator bootstrapped over MPI; the same NCCL bits as forked.
if grep -q "^MPI world: built" "$out/version.txt" && command -v mpirun >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
    export OMPI_MCA_btl_vader_single_copy_mechanism=none # CMA is not allowed in every container
    t=$(date +%s)
    dd --ranks 2 --backend nccl --scenario classic >"$out/mpi-fork-2.txt" 2>&1
    set -- "$ddpsim"
    [ -n "${GPU_CHECK_FAKE:-}" ] && set -- env LD_PRELOAD="$GPU_CHECK_FAKE" "$ddpsim"
    timeout 300 mpirun --oversubscribe -np 2 "$@" --world mpi --backend nccl --scenario classic \
        --json "$out/mpi-nccl-2.json" >"$out/mpi-nccl-2.txt" 2>&1
    code=$?
    d_fork=$(sed -n 's/^# nccl: result digest \([0-9a-f]*\).*/\1/p' "$out/mpi-fork-2.txt")
    d_mpi=$(sed -n 's/^# nccl: result digest \([0-9a-f]*\).*/\1/p' "$out/mpi-nccl-2.txt")
    if [ "$code" -eq 0 ] && [ -n "$d_mpi" ] && [ "$d_mpi" = "$d_fork" ]; then
        say "# --world mpi --backend nccl, 2 ranks: PASS in $(elapsed "$t") s, NCCL digest $d_mpi as forked"
    else
        say "FAIL: --world mpi --backend nccl, 2 ranks: exit $code, NCCL digest ${d_mpi:-none} (forked: ${d_fork:-none})"
        fail=1
    fi
else
    say "# --world mpi: not built or no mpirun here: NCCL over MPI not run"
fi

echo
cat "$summary" | tee -a "$out/log.txt"
say "# gpu-check: $( [ "$fail" -eq 0 ] && echo 'every check held' || echo 'SOME CHECK FAILED' ) in $(elapsed "$t_start") s; figures in $out"
[ "$fail" -eq 0 ]
