#!/bin/sh
# patterns.sh - every catalogued bug's first divergence, explained (engine/verify/pattern.h): on the scenario
# that catches it first, the report's "# pattern:" line says what its mechanism predicts, or "none found" where
# no pattern of the reference's own quantities fits (README, "What a FAIL says" lists why for each), or no
# pattern at all where the first divergence is not a tensor's values (a buffer, the communication, a fault).
# Then: the same in --json and in the battery's column, live and replayed alike, and a correct implementation
# never gets one. Prints "N passed, N failed".
DDPSIM=${DDPSIM:-./sim/ddpsim}
. "$(dirname "$0")/testlib.sh"

# bug, mode (- for DDP), scenario, ranks, what the pattern line says (- for no pattern line)
while IFS='|' read -r bug mode sc ranks want; do
    case $bug in ''|'#'*) continue ;; esac
    shard=
    [ "$mode" = - ] || shard="--shard $mode"
    # shellcheck disable=SC2086
    "$DDPSIM" --ranks "$ranks" $shard --impl "$bug" --scenario "$sc" --timeout 10 >"$out" 2>"$err"
    code=$?
    got=$(sed -n 's/^# pattern: //p' "$out")
    if [ "$want" = - ]; then
        if [ -z "$got" ] && [ "$code" -ne 0 ]; then ok "$bug: fails (exit $code) with no pattern line"
        else bad "$bug: expected a failure with no pattern, got exit $code and '$got'"; fi
    else
        case $got in
        *"$want"*) ok "$bug ($sc): $want" ;;
        *) bad "$bug ($sc): expected '$want', got '$got'" ;;
        esac
    fi
done <<'TABLE'
sync-on-exit|-|classic|3|the average over ranks of the local sum, where DDP's is the local sum
last-microbatch-only|-|classic|3|the last micro-step averaged over ranks plus the earlier ones unreduced
prior-not-current|-|classic|3|the earlier micro-steps averaged over ranks plus the last one unreduced
sync-every-microstep|-|classic|3|the average over ranks of the local sum, where DDP's is the local sum
never-sync|-|classic|3|this rank's own local sum since zero_grad: never reduced
decide-at-backward|-|nosync-edges|3|the average over ranks of the local sum, where DDP's is the local sum
disarm-in-no-sync|-|arming|3|this rank's own local sum since zero_grad: never reduced
sync-first-not-last|-|classic|3|the average over ranks of the local sum, where DDP's is the local sum
first-microbatch-only|-|classic|3|none found
overwrite-not-accumulate|-|classic|3|the average over ranks of the last micro-step alone
sum-not-average|-|classic|3|3 x the reference's (N: summed, not averaged)
double-average|-|classic|3|0.3333 x the reference's (1/N
post-divide|-|classic|3|rounded otherwise: the same sums in another order
unused-last-step-only|-|find-unused|3|this rank's own local sum since zero_grad: never reduced
no-initial-broadcast|-|classic|3|none found
rank-never-syncs|-|classic|3|-
skip-average-tiny-tensor|-|tiny-tensor|3|3 x the reference's (N: summed, not averaged)
self-add-each-microstep|-|classic|3|none found
tail-window-dropped|-|classic|3|this rank's own local sum since zero_grad: never reduced
reduced-again|-|arming|3|none found
skip-none-grads|-|find-unused|3|-
rebuild-drops-accumulation|-|arming|3|the average over ranks of the last micro-step alone
stale-bucket|-|classic|3|none found
unscale-never-scaled|-|classic|3|no update: its parameters are as before the step
no-zero-after-step|-|classic|3|the reference's plus the gradient the last step took
boundary-false-in-backward|-|classic|3|this rank's own local sum since zero_grad: never reduced
every-backward-a-boundary|-|classic|3|the average over ranks of the local sum, where DDP's is the local sum
every-backward-overwrites|-|classic|3|the last micro-step's local gradient alone
sync-flag-steps|-|classic|3|its update is 2 x the reference's (2^1)
no-buffer-broadcast|-|buffers|3|-
join-ignores-no-sync|-|uneven|3|-
join-divides-by-running|-|uneven|3|1.5 x the reference's (N over the ranks still running
join-final-sync-skips-buffers|-|uneven|3|-
reduces-in-no-sync|-|classic|3|-
first-hook-reduces|-|tied|3|none found
momentum-per-microstep|-|momentum|3|none found
found-inf-always|-|loss-scale|3|-
unscale-after-update|-|loss-scale|3|its update is 0.5 x the reference's (1/G, the loss scale's growth
norm-micro-batch-mean|-|ragged-tokens|3|a mean of micro-batch means
norm-rank-local|-|ragged-tokens|3|a rank-local mean, then DDP's average
norm-dropped|-|ragged-tokens|3|DDP's average kept
norm-after-backward|-|ragged-tokens|3|DDP's average undone
norm-empty-counted|-|ragged-tokens|3|an empty sequence counted as one token
norm-rescale-each-micro-step|-|ragged-tokens|3|an exponential moving average instead of a sum
norm-local-when-one-step|-|ragged-tokens|3|the rescale skipped when accumulation is 1
norm-tail-configured-steps|-|ragged-tokens|3|A the configured accumulation count
fsdp-no-sync-dropped|fsdp|s-window-3|4|its gradient is zero
hsdp-allreduce-every-microstep|hsdp|s-window-3|4|the average over ranks of the local sum, where DDP's is the local sum
hsdp-partial-not-replicated|hsdp|s-window-3|4|none found
hsdp-divides-by-shard-group|hsdp|s-window-3|4|2 x the reference's (R, the replica groups)
zero2-boundary-every-backward|zero2|s-window-3|4|the average over ranks of the last micro-step alone
zero2-copies-after-first-step|zero2|s-window-3|4|the average over ranks of the last micro-step alone
remainder-unit-unreduced|fsdp|s-units|4|its gradient is zero
exact-bucket-unreduced|fsdp|s-exact-unit|4|its gradient is zero
accumulated-shard-rescaled|zero2|s-window-3|4|4 x the reference's (N: summed, not averaged)
one-rank-group-rescales|hsdp|s-one-rank-groups|4|none found
gather-buffer-not-zeroed|zero1|s-window-3|4|none found
unpadded-shard-offsets|zero2|s-padding|4|none found
padding-not-zero|zero1|s-padding|4|-
unit-reduced-at-first-ready|zero2|s-window-3|4|its gradient is zero
unused-param-unit-skipped|zero1|s-unused|4|its gradient is zero
fsdp-clip-local-norm|fsdp|s-clip|4|x the reference's: no constant of the run
hsdp-clip-norm-over-world|hsdp|s-clip|4|the norm it clipped by is 1.41421 x the reference's (sqrt(R))
zero1-clip-norm-undercounts|zero1|s-clip|4|x the reference's: no constant of the run
zero2-found-inf-unreduced|zero2|s-loss-scale|4|-
fsdp-found-inf-copied-early|fsdp|s-loss-scale|4|-
TABLE

# Every catalogued bug is in the table above.
n=$("$DDPSIM" --list | awk '$2 == "bug"' | wc -l)
[ "$n" -eq 66 ] && ok "the table has every catalogued bug (66)" || bad "the catalogue has $n bugs, the table 66"

# --json: the first divergence's and every failing record's "pattern".
expect 1 '"pattern": {"kind": "factor", "of": "gradient", "factor": 3, "name": "N"}' "the pattern in --json" -- \
    --ranks 3 --impl sum-not-average --scenario classic --json -
expect 1 '"pattern": {"kind": "zero", "of": "update"}' "an update's pattern in --json" -- \
    --ranks 3 --impl unscale-never-scaled --scenario classic --json -
expect 1 '"pattern": {"kind": "no_momentum", "of": "update"}' "a momentum step along the gradient alone, in --json" -- \
    --ranks 4 --shard zero2 --optimizer momentum --scenario s-window-3 --impl "${PLUGIN_DIR:-./tests/plugin}/libzero2_plain_sgd.so" --json -
# The battery's first-divergence column.
expect 1 "grab 2, rank 0, 0.weight\[0\]: 3 x the reference's (N)" "the pattern in the battery's column" -- \
    --ranks 3 --impl sum-not-average
# A correct implementation never gets a pattern, under chaos and the order tolerance too.
expect 0 "verdict: PASS" "a correct implementation passes" -- --ranks 3 --impl bucketed --json "$out.json"
grep -q '"pattern"' "$out.json" && bad "... and got a pattern" || ok "... with no pattern anywhere"
expect 0 "verdict: PASS" "... under chaos" -- --ranks 3 --impl bucketed --chaos 3 --tolerance order --json "$out.json"
grep -q '"pattern"' "$out.json" && bad "... and got a pattern" || ok "... with no pattern anywhere"
rm -f "$out.json"
# From a recording: the same words (tests/check.sh and tests/shard.sh compare every record, patterns included).
rec=$(mktemp -d) || exit 99
"$DDPSIM" --ranks 3 --impl last-microbatch-only --scenario classic --record "$rec/d" -q >/dev/null 2>&1
expect 1 "# pattern: its gradient is the last micro-step averaged over ranks plus the earlier ones unreduced" \
    "the pattern from a recording" -- check "$rec/d" -T bitwise
rm -rf "$rec"
finish
