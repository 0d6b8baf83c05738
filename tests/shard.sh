#!/bin/sh
# shard.sh - sharded data parallelism as a user meets it (--shard, --mesh):
# each mode's battery passes with its built-in and with the example plugin at
# several world sizes and meshes; every sharded detector fires on a
# deliberately broken implementation (a wrong shard, non-zero padding, a
# layout the mode does not allow, communication in a micro-step that may not
# have it); every input the sharded reference does not model is refused
# before any rank starts, with exit 2; nothing is left behind.
DDPSIM=${DDPSIM:-./sim/ddpsim}
PLUGIN_DIR=${PLUGIN_DIR:-./tests/plugin}
. "$(dirname "$0")/testlib.sh"
out=$(mktemp) && err=$(mktemp) || exit 99
trap 'rm -f "$out" "$err"' EXIT
orphans_before=$(shm_orphans ddpsim)

# ---- the correct ones pass, at several sizes and meshes ----
for n in 1 3 4 5; do
    for m in zero1 zero2 fsdp; do
        expect 0 "verdict: PASS (10 of 10 scenarios" "--shard $m at $n ranks" -- --ranks $n --shard $m -q
    done
done
for mesh in 4:1x4 4:2x2 4:4x1 6:2x3 6:3x2 3:3x1 8:2x4; do
    n=${mesh%%:*} rxs=${mesh#*:}
    expect 0 "verdict: PASS (11 of 11 scenarios" "--shard hsdp on a $rxs mesh" -- --ranks $n --shard hsdp --mesh $rxs -q
done
expect 0 "on a 2x3 mesh" "hsdp:RxS names the mesh, and the header says it" -- --ranks 6 --shard hsdp:2x3
expect 0 "on a 2x2 mesh" "hsdp at 4 ranks defaults to 2 x 2" -- --ranks 4 --shard hsdp --scenario s-window-3
expect 0 "on a 3x1 mesh" "hsdp at 3 ranks defaults to 3 x 1" -- --ranks 3 --shard hsdp --scenario s-window-3
expect 0 "verdict: PASS" "zero_grad(set_to_none) and the exact order" -- --ranks 3 --shard zero2 --zero-grad none --algo exact -q
expect 0 "verdict: PASS" "a chaos seed shakes the communication thread, not the values" -- --ranks 3 --shard fsdp --scenario s-units --chaos 5
expect 0 "verdict: PASS (10 of 10" "the example plugin (interface version 5), 3 ranks" -- --ranks 3 --shard zero2 --impl "$PLUGIN_DIR/libexample_zero2.so" -q
expect 0 "verdict: PASS (10 of 10" "the example plugin, 4 ranks" -- --ranks 4 --shard zero2 --impl "$PLUGIN_DIR/libexample_zero2.so" -q
expect 0 "s-exact-unit" "--scenarios --shard lists the sharded battery" -- --scenarios --shard fsdp
expect 0 "^ padding-not-zero .*Megatron-LM PR #5898.* (--shard zero1)" "--list names each sharded bug's mode" -- --list
grep -q "s-one-rank-groups" "$out" && bad "the one-rank-groups scenario is HSDP's alone" || ok "the one-rank-groups scenario is HSDP's alone"

# ---- each detector fires ----
expect 1 "the padding of flat unit 0, element 131 of the padded unit: 4, where padding is exactly 0" \
    "padding that is not zero is named (unit, element, value)" -- --ranks 4 --shard zero2 \
    --impl "$PLUGIN_DIR/libzero2_dirty_padding.so" --scenario s-padding
expect 3 "its sharded layout (shard_layout), flat unit 0: padded to 131 elements for 131: a unit is padded to a multiple of the shard group's size 4" \
    "a layout the mode does not allow fails the implementation, naming the unit" -- --ranks 4 --shard zero2 \
    --impl "$PLUGIN_DIR/libzero2_unpadded.so" --scenario s-padding
expect 1 "first divergence: grab 2 (after fwd+bwd (3 acc)), rank 0, parameter 0.weight" \
    "HSDP whose replica all-reduce misses the earlier micro-steps fails at the sync" -- --ranks 4 --shard hsdp \
    --impl hsdp-partial-not-replicated --scenario s-window-3
expect 1 "in a backward that does not sync (op 2), where --shard fsdp makes no all-reduce nor reduce-scatter" \
    "FSDP reducing inside no_sync is a communication divergence" -- --ranks 3 --shard fsdp \
    --impl fsdp-no-sync-dropped --scenario s-window-3
expect 1 "where --shard hsdp makes no all-reduce" \
    "HSDP all-reducing in every micro-step is a communication divergence" -- --ranks 4 --shard hsdp \
    --impl hsdp-allreduce-every-microstep --scenario s-window-3
expect 1 "first divergence: grab 0 (after no_sync fwd+bwd), rank 0, parameter 0.weight" \
    "... and with --allow-unsynced-comm its values still fail it (no_sync's .grad is the local sum)" -- --ranks 3 \
    --shard fsdp --impl fsdp-no-sync-dropped --scenario s-window-3 --allow-unsynced-comm
expect 1 "verdict: FAIL" "a parameter exactly the unit cap left unreduced" -- --ranks 3 --shard fsdp \
    --impl exact-bucket-unreduced --scenario s-exact-unit
expect 0 "verdict: PASS" "... which the other scenarios cannot see" -- --ranks 3 --shard fsdp \
    --impl exact-bucket-unreduced --scenario s-window-3
expect 1 "verdict: FAIL" "a shard group of one rank rescaling its partial" -- --ranks 3 --shard hsdp \
    --impl one-rank-group-rescales --scenario s-one-rank-groups
expect 0 "mutation score: 4 of 4 caught" "--mutants --shard hsdp: the HSDP bugs alone, each caught" -- \
    --mutants --shard hsdp --ranks 4
grep -q "^ hsdp  *passes" "$out" && ok "--mutants --shard hsdp: the correct hsdp passes" ||
    bad "--mutants --shard hsdp: the correct hsdp passes"

# ---- --fault flip reaches a sharded implementation's reduce-scatters and group all-reduces too ----
for m in zero1 zero2 hsdp; do
    expect 1 "first divergence: grab" "--fault flip under --shard $m: the flipped contribution is caught" -- \
        --ranks 3 --shard $m --scenario s-window-3 --fault flip:rank=1,op=5 -q
done

# ---- --dump: the reference's files are the sharded reference's; the implementation's hold its slices ----
dump=$(mktemp -d) || exit 99
rmdir "$dump"
expect 0 "verdict: PASS" "--dump of a sharded run" -- --ranks 3 --shard zero2 --scenario s-window-3 --dump "$dump" -q
# 0.weight (2048 elements) is the start of the one unit: rank 0's slice (2438 elements) holds all of it, rank 2's none
if cmp -s "$dump/reference/rank0/grab2/0.weight.npy" "$dump/zero2/rank0/grab2/0.weight.npy" &&
    ! cmp -s "$dump/reference/rank2/grab2/0.weight.npy" "$dump/zero2/rank2/grab2/0.weight.npy"; then
    ok "the dump's reference is what the grab compared with: equal where the rank holds the tensor, not elsewhere"
else
    bad "the dump's reference is what the grab compared with: equal where the rank holds the tensor, not elsewhere"
fi
rm -rf "$dump"

# ---- the order tolerance (zero1, zero2): the bound budget.c proves for any order of the sums ----
expect 1 "verdict: FAIL" "dividing the reduced sum by N instead of scaling each gradient: other bits, bitwise" -- \
    --ranks 3 --shard zero2 --impl "$PLUGIN_DIR/libzero2_divide_after.so" --scenario s-window-3
expect 0 "verdict: PASS (10 of 10 scenarios, 51 grabs x 3 ranks, order)" "... within the proven bound of every order" -- \
    --ranks 3 --shard zero2 --impl "$PLUGIN_DIR/libzero2_divide_after.so" --tolerance order -q
expect 0 "verdict: PASS (10 of 10 scenarios, 51 grabs x 3 ranks, order)" "the built-ins under the order tolerance" -- \
    --ranks 3 --shard zero1 --tolerance order -q
for bug in zero2:accumulated-shard-rescaled zero2:unit-reduced-at-first-ready zero2:zero2-copies-after-first-step \
    zero1:gather-buffer-not-zeroed zero1:unused-param-unit-skipped; do
    expect 1 "verdict: FAIL" "${bug#*:} still fails under the order tolerance" -- --ranks 3 --shard "${bug%%:*}" \
        --impl "${bug#*:}" --tolerance order -q
done

# ---- refused before any rank starts ----
expect 2 "--shard zero2: --find-unused is not modelled" "--find-unused" -- --shard zero2 --find-unused
expect 2 "--shard fsdp: --tolerance (other than bitwise: with sharded parameters) is not modelled" \
    "a tolerance other than bitwise with sharded parameters" -- --shard fsdp --tolerance ulp:2
expect 2 "--shard zero1: --algo ring is not modelled" "the ring order" -- --shard zero1 --algo ring
expect 2 "--shard zero1: --comm-hook is not modelled" "a communication hook" -- --shard zero1 --comm-hook fp16
expect 2 "--shard zero2: --schedule (uneven inputs) is not modelled" "uneven inputs" -- --ranks 2 --shard zero2 \
    --schedule "join{ [2, -1:1]*( fwd bwd grab ) }"
expect 2 "--mesh: needs --shard" "--mesh without --shard" -- --ranks 4 --mesh 2x2
expect 2 "--mesh: 2x2 replicates over 2 groups, which is --shard hsdp" "a replicated mesh for zero1" -- --ranks 4 --shard zero1 --mesh 2x2
expect 2 "--mesh: 3x2 is 6 ranks, the run has 4" "a mesh of the wrong size" -- --ranks 4 --shard hsdp --mesh 3x2
expect 2 "--mesh: '2x' is not RxS" "a mesh that does not parse" -- --ranks 4 --shard hsdp --mesh 2x
expect 2 "--shard: 'zero3': expected zero1, zero2, fsdp or hsdp" "an unknown mode" -- --shard zero3
expect 2 "only hsdp takes a mesh" "a mesh for a mode without one" -- --shard zero2:1x4
expect 2 "'reference' declares no sharded layout" "an implementation that is not sharded" -- --shard zero1 --impl reference
expect 2 "'zero2' is sharded data parallelism: run it with --shard zero2" "a sharded built-in without --shard" -- --impl zero2
expect 2 "'fsdp' is sharded data parallelism: run it with --shard fsdp" "a sharded built-in under another mode" -- --shard zero1 --impl fsdp
expect 2 "was built for interface version 1, which cannot declare a sharded layout" "a plugin older than version 5" -- \
    --shard zero2 --impl "$PLUGIN_DIR/libv1_plugin.so"

left=$(shm_new_orphans ddpsim "$orphans_before")
[ -z "$left" ] && ok "no shared memory left behind" || bad "shared memory left behind: $left"
finish
