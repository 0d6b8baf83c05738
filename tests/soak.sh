#!/bin/sh
# soak.sh N - N runs of ddpsim, each with one random fault (crash, abort,
# hang, slow or flip on a random rank and op), checking after every run that
# it ended with the documented exit code, within its time, and left no rank
# process and no /dev/shm segment. Prints the counts of hangs, orphans,
# leaks and wrong exits (all must be 0) and "N passed, N failed".
#   tests/soak.sh 20        a quick soak (make check runs this)
#   tests/soak.sh 1000      a long one
N=${1:-20}
DDPSIM=${DDPSIM:-./sim/ddpsim}
seed=${SOAK_SEED:-$$}
hangs=0 orphans=0 leaks=0 wrong=0 pass=0 fail=0
ops=40 # the classic scenario (the schedule every fault is placed in)
# Every run gets a seed no other run uses, not even another soak going on at the same time
# (the seed is in its command line, so pgrep finds exactly this run's processes).
base=$(( ($$ % 100000) * 10000 + 1000000000 ))
segments() { ls /dev/shm 2>/dev/null | grep -c '^ddpsim-'; }
shm0=$(segments)
rand() { seed=$(( (seed * 1103515245 + 12345) % 2147483648 )); echo $(( seed / 65536 % $1 )); }
i=0
while [ "$i" -lt "$N" ]; do
    i=$((i + 1))
    ranks=$(( $(rand 4) + 2 ))
    rank=$(rand "$ranks")
    op=$(rand "$ops")
    case $(rand 5) in
        0) fault="crash:rank=$rank,op=$op"; want=3 ;;
        1) fault="abort:rank=$rank,op=$op"; want=3 ;;
        2) fault="hang:rank=$rank,op=$op"; want=3 ;;
        3) fault="slow:rank=$rank,ms=$(rand 5)"; want=0 ;;
        *) fault="flip:rank=$rank,op=$op"; want=X ;; # 1 if a reduction follows op, else 0
    esac
    timeout 30 "$DDPSIM" --scenario classic --ranks "$ranks" --fault "$fault" --timeout 1 --seed "$((base + i))" -q \
        --json /dev/null >/dev/null 2>&1 &
    pid=$!
    wait "$pid"
    got=$?
    sleep 0.05
    left=$(pgrep -f -- "--seed $((base + i)) " | wc -l)
    ok=1
    if [ "$got" -eq 124 ]; then hangs=$((hangs + 1)); ok=0; fi
    if [ "$left" -ne 0 ]; then orphans=$((orphans + 1)); ok=0; pkill -9 -f -- "--seed $((base + i)) "; fi
    if [ "$(segments)" -ne "$shm0" ]; then leaks=$((leaks + 1)); ok=0; fi
    case $want in
        X) [ "$got" -eq 0 ] || [ "$got" -eq 1 ] || { wrong=$((wrong + 1)); ok=0; } ;;
        *) [ "$got" -eq "$want" ] || { wrong=$((wrong + 1)); ok=0; } ;;
    esac
    if [ "$ok" -eq 1 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: run $i: --ranks $ranks --fault $fault: exit $got (want $want), $left left"; fi
done
echo "soak: $N runs: hangs $hangs, orphans $orphans, leaks $leaks, wrong exits $wrong"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
