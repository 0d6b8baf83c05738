#!/bin/sh
# bench-vs-pytorch.sh [RANKS] [ROUNDS] - what a framework's CI pays for ddpsim's default verification,
# against the classic schedule checked the way PyTorch's own DDP tests check it
# (tests/bench/pytorch_style.py: spawned gloo ranks, DDP against plain copies of the module on the global
# and on the rank's own batch, every grab compared at torch.testing.assert_close's float32 tolerance), on
# Debian's python3-torch, in one run. The two take turns for ROUNDS rounds, each timed whole (process
# start included); the medians give the ratios: ddpsim's whole battery (21 scenarios, bitwise) and its
# classic scenario alone, each over the PyTorch-style check of the classic schedule. Exit 77 without torch.
set -e
ranks=${1:-4}
rounds=${2:-5}
here=$(cd "$(dirname "$0")" && pwd)
DDPSIM=${DDPSIM:-$here/../sim/ddpsim}
/usr/bin/python3 -c 'import torch.distributed' 2>/dev/null || { echo "bench-vs-pytorch: no python3-torch" >&2; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
now() { date +%s.%N; }

printf '# %d ranks, %d rounds; seconds, each run timed whole (process start included)\n' "$ranks" "$rounds"
printf '# round  ddpsim_battery  ddpsim_classic  pytorch_style_classic\n'
r=1
while [ "$r" -le "$rounds" ]; do
    t0=$(now); "$DDPSIM" --ranks "$ranks" -q >"$work/b.txt"; t1=$(now)
    grep -q "verdict: PASS" "$work/b.txt" || { cat "$work/b.txt"; exit 1; }
    "$DDPSIM" --ranks "$ranks" --scenario classic -q >"$work/c.txt"; t2=$(now)
    grep -q "verdict: PASS" "$work/c.txt" || { cat "$work/c.txt"; exit 1; }
    /usr/bin/python3 "$here/bench/pytorch_style.py" "$ranks" 1 >"$work/p.txt"; t3=$(now)
    grep -q " ok$" "$work/p.txt" || { cat "$work/p.txt"; exit 1; }
    b=$(echo "$t1 - $t0" | bc); c=$(echo "$t2 - $t1" | bc); p=$(echo "$t3 - $t2" | bc)
    printf '%7d %15.3f %15.3f %22.3f\n' "$r" "$b" "$c" "$p"
    echo "$b" >>"$work/b"; echo "$c" >>"$work/c"; echo "$p" >>"$work/p"
    r=$((r + 1))
done
b=$(median <"$work/b"); c=$(median <"$work/c"); p=$(median <"$work/p")
printf '# medians: ddpsim battery %.3f s, ddpsim classic %.3f s, PyTorch-style classic %.3f s\n' "$b" "$c" "$p"
printf '# the PyTorch-style check of one schedule takes %.1fx ddpsim'"'"'s whole battery of 21, and %.0fx its classic scenario\n' \
    "$(echo "$p / $b" | bc -l)" "$(echo "$p / $c" | bc -l)"
