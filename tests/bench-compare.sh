#!/bin/sh
# bench-compare.sh [RANKS] [BYTES] [ITERS] [ROUNDS] - ddpsim's allreduce side
# by side with Open MPI's MPI_Allreduce (built here with mpicc, run with
# mpirun --oversubscribe) and, where Debian's python3-torch is installed,
# PyTorch's gloo allreduce, all timed the same way (the slowest rank of each
# iteration, median after warm-up) on the same machine in one run. The three
# take turns for ROUNDS rounds (so a noisy moment hits all of them), and the
# medians over the rounds give the ratios. It also prints ddpsim's
# memory-traffic bound from the same runs, and Open MPI's time over it: how
# far ahead of Open MPI an allreduce that moves the bytes it must can get on
# this machine. Needs openmpi-bin and libopenmpi-dev; exit 77 without mpicc.
set -e
ranks=${1:-4}
bytes=${2:-16777216}
iters=${3:-20}
rounds=${4:-3}
here=$(cd "$(dirname "$0")" && pwd)
DDPSIM=${DDPSIM:-$here/../sim/ddpsim}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
command -v mpicc >/dev/null || { echo "bench-compare: mpicc not found (apt-get install openmpi-bin libopenmpi-dev)" >&2; exit 77; }
mpicc -O2 -o "$work/mpi_allreduce" "$here/bench/mpi_allreduce.c"
have_gloo=0
/usr/bin/python3 -c 'import torch.distributed' 2>/dev/null && have_gloo=1

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

printf '# %d ranks, %d bytes of float32, medians of %d (the slowest rank of each iteration), %d rounds\n' \
    "$ranks" "$bytes" "$iters" "$rounds"
printf '# round   ddpsim_us      mpi_us     gloo_us\n'
r=1
while [ "$r" -le "$rounds" ]; do
    # time_us, bound_us (the memory-traffic bound: the bytes every rank must read and write at the
    # machine's measured copy rate, same run) and #wrong
    row=$("$DDPSIM" bench allreduce --ranks "$ranks" --bytes "$bytes" --iters "$iters" | awk '$1 == '"$bytes"' {print $4, $7, $NF}')
    [ "${row##* }" = 0 ] || { echo "bench-compare: ddpsim got wrong elements" >&2; exit 1; }
    ddp=${row% *}
    echo "${ddp#* }" >>"$work/bounds"
    ddp=${ddp% *}
    mpi=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none \
        mpirun --oversubscribe -np "$ranks" "$work/mpi_allreduce" "$bytes" "$iters")
    [ "$(echo "$mpi" | awk '{print $3}')" = 0 ] || { echo "bench-compare: MPI got wrong elements" >&2; exit 1; }
    gloo_us=-
    if [ "$have_gloo" = 1 ]; then
        gloo_us=$(/usr/bin/python3 "$here/bench/gloo_allreduce.py" "$ranks" "$bytes" "$iters" | awk '{print $2}')
    fi
    printf '%7d %11.1f %11.1f %11s\n' "$r" "$ddp" "$(echo "$mpi" | awk '{print $2}')" "$gloo_us"
    echo "$ddp $(echo "$mpi" | awk '{print $2}') $gloo_us" >>"$work/times"
    r=$((r + 1))
done
ddp_us=$(awk '{print $1}' "$work/times" | median)
mpi_us=$(awk '{print $2}' "$work/times" | median)
printf 'ddpsim ordered     %12.1f us\n' "$ddp_us"
printf 'Open MPI allreduce %12.1f us   ddpsim is %.2fx faster\n' "$mpi_us" "$(echo "$mpi_us $ddp_us" | awk '{print $1 / $2}')"
bound_us=$(median <"$work/bounds")
printf 'memory-traffic bound %10.1f us   ddpsim takes %.2fx of it; Open MPI %.2fx (beyond that ratio, only by beating the bound)\n' \
    "$bound_us" "$(echo "$ddp_us $bound_us" | awk '{print $1 / $2}')" "$(echo "$mpi_us $bound_us" | awk '{print $1 / $2}')"
if [ "$have_gloo" = 1 ]; then
    gloo_us=$(awk '{print $3}' "$work/times" | median)
    printf 'PyTorch gloo       %12.1f us   ddpsim is %.2fx faster\n' "$gloo_us" "$(echo "$gloo_us $ddp_us" | awk '{print $1 / $2}')"
else
    echo "PyTorch gloo       (python3-torch not installed: skipped)"
fi
