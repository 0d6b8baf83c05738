#!/bin/sh
# check.sh - `ddpsim check DIR` on recorded runs: a live run recorded with
# --record and then checked gives the live run's verdict and first
# divergence (for correct implementations and catalogued bugs, at 2, 3 and
# 4 ranks, on every model and the options that change the semantics), and
# every kind of bad recording is refused with exit 2 naming the file,
# before any rank starts (or, for a value no header shows, by the rank that
# reads it). Prints "N passed, N failed" and exits non-zero on any failure.
DDPSIM=${DDPSIM:-./sim/ddpsim}
. "$(dirname "$0")/testlib.sh"
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$out" "$err" "$tmp"' EXIT

first() { grep "first divergence" "$1" | sed 's/^# first divergence: //'; }
verdict() { sed -n 's/^# verdict: \([A-Z]*\).*/\1/p' "$1"; }

# same NAME -- LIVE-ARGS: record a live run, check the recording bitwise; same verdict and first divergence
same() {
    what=$1
    shift 2
    rm -rf "$tmp/r"
    "$DDPSIM" "$@" --record "$tmp/r" -q >"$tmp/live" 2>&1
    live=$?
    if [ "$live" -gt 1 ] || [ -z "$(verdict "$tmp/live")" ]; then
        bad "$what: the live run itself did not give a verdict (exit $live)"
        sed 's/^/  live: /' "$tmp/live"
        return
    fi
    "$DDPSIM" check "$tmp/r" --tolerance bitwise -q >"$out" 2>"$err"
    got=$?
    if [ "$got" -ne "$live" ]; then
        bad "$what: check exits $got, the live run $live"
    elif [ "$(verdict "$out")" != "$(verdict "$tmp/live")" ] || [ "$(first "$out")" != "$(first "$tmp/live")" ]; then
        bad "$what: live '$(verdict "$tmp/live") $(first "$tmp/live")', check '$(verdict "$out") $(first "$out")'"
    else
        ok "$what: $(verdict "$out") $(first "$out" | cut -d, -f1)"
    fi
}

for n in 2 3 4; do
    same "bucketed, $n ranks" -- --ranks "$n" --scenario classic --impl bucketed
    same "sync-on-exit (thunder #1670), $n ranks" -- --ranks "$n" --scenario classic --impl sync-on-exit
done
for impl in reference bucketed last-microbatch-only prior-not-current sync-every-microstep never-sync \
    sync-first-not-last first-microbatch-only overwrite-not-accumulate sum-not-average double-average post-divide \
    self-add-each-microstep; do
    same "$impl, 3 ranks" -- --ranks 3 --scenario classic --impl "$impl"
done
for sc in find-unused attention bucket-view nosync-edges sync-after-sync zero-and-step ends-in-window buckets \
    odd-sizes tiny-tensor; do
    same "scenario $sc, bucketed" -- --ranks 3 --scenario "$sc" --impl bucketed
done
same "find_unused decided by the last micro-step only (PyTorch #69031)" -- --ranks 3 --scenario find-unused --impl unused-last-step-only
same "the same on PyTorch < 2.4's rule" -- --ranks 3 --scenario find-unused --impl unused-last-step-only --find-unused-rule syncing-backward
# The rule itself: PyTorch < 2.4's is what unused-last-step-only does (it passes there), and the ranks of a
# correct reference legitimately differ on a parameter used only earlier in the window.
expect 0 "verdict: PASS" "find_unused's rule before PyTorch 2.4: unused-last-step-only is right there" -- \
    --ranks 3 --scenario find-unused --impl unused-last-step-only --find-unused-rule syncing-backward
expect 1 "parameter head_a.weight" "... and bucketed (the window rule) is not" -- \
    --ranks 3 --scenario find-unused --impl bucketed --find-unused-rule syncing-backward -q
expect 2 "find-unused-rule" "an unknown rule" -- --scenario find-unused --find-unused-rule sometimes
same "decided at backward" -- --ranks 3 --scenario nosync-edges --impl decide-at-backward
same "a tiny tensor summed" -- --ranks 3 --scenario tiny-tensor --impl skip-average-tiny-tensor
same "zero_grad(set_to_none=True)" -- --ranks 3 --scenario zero-and-step --impl bucketed --zero-grad none
same "a step's parameters" -- --ranks 2 --schedule "fwd bwd grab step" --impl bucketed --lr 0.5
# The recording says which reduction order the reference used (manifest.h: ddp.algo); before it did, a run with
# --algo ring replayed bitwise under the ordered sum failed at its first sync by 1 ulp.
same "a run with --algo ring" -- --ranks 3 --scenario classic --impl bucketed --algo ring
same "SGD with momentum: a buffer advanced per micro-step (DeepSpeed #8443)" -- --ranks 3 --scenario momentum --impl momentum-per-microstep
same "SGD with momentum: post-divide" -- --ranks 3 --scenario momentum --impl post-divide

# The two drivers of the ops (ops.h) cannot drift: every scenario of the battery, live and replayed, gives the
# same records check by check and rank by rank (tests/same_records.py), for a correct implementation and for a
# bug of each kind (to the end: after a failed step both go on from the implementation's parameters; a sharded run's
# to its first failing check).
# records NAME -- LIVE-ARGS
records() { what=$1; shift 2; records_agree "$tmp" "$what" -- "$@"; }
for sc in $("$DDPSIM" --scenarios | awk '/^[a-z]/ {print $1}'); do
    records "records of scenario $sc, bucketed, live and replayed" -- --ranks 3 --scenario "$sc" --impl bucketed
done
for impl in sync-on-exit last-microbatch-only sum-not-average overwrite-not-accumulate no-zero-after-step; do
    records "records of $impl, live and replayed" -- --ranks 3 --scenario classic --impl "$impl"
done
records "records of momentum-per-microstep (wrong steps), live and replayed" -- --ranks 3 --scenario momentum \
    --impl momentum-per-microstep
# Loss scaling (record.h "loss_scale": each backward's scale, each unscale's finding, the planted inf): the
# catalogued scaler bugs, and the sharded modes' own scalers with their bugs.
for impl in found-inf-always unscale-after-update unscale-never-scaled; do
    records "records of $impl, live and replayed" -- --ranks 3 --scenario loss-scale --impl "$impl"
done
for impl in zero2 zero2-found-inf-unreduced; do
    records "records of $impl under loss scaling, live and replayed" -- --ranks 4 --shard zero2 --impl "$impl" --scenario s-loss-scale
done
for impl in fsdp fsdp-found-inf-copied-early; do
    records "records of $impl under loss scaling, live and replayed" -- --ranks 4 --shard fsdp --impl "$impl" --scenario s-loss-scale
done
records "records of hsdp under loss scaling, live and replayed" -- --ranks 4 --shard hsdp --scenario s-loss-scale
expect 0 "verdict: PASS (12 grabs and 6 parameter checks x 4 ranks match, order)" \
    "... and replayed under the order tolerance, the sharded bound carried through the unscale" -- check "$tmp/d" -T order
records "records of no-buffer-broadcast, live and replayed" -- --ranks 3 --scenario buffers --impl no-buffer-broadcast
records "records of join-divides-by-running, live and replayed" -- --ranks 3 --scenario uneven --impl join-divides-by-running
records "records at 4 ranks under join" -- --ranks 4 --scenario uneven --impl bucketed
# ... and the comparison fires: a replay of another run (another seed) differs in its first record.
rm -rf "$tmp/d"
"$DDPSIM" --ranks 3 --scenario classic --impl bucketed --json "$tmp/live.json" -q >/dev/null 2>&1
"$DDPSIM" --ranks 3 --scenario classic --impl bucketed --seed 9 --record "$tmp/d" -q >/dev/null 2>&1
"$DDPSIM" check "$tmp/d" --json "$tmp/check.json" -q >/dev/null 2>&1
if msg=$(/usr/bin/env python3 "$(dirname "$0")/same_records.py" "$tmp/live.json" "$tmp/check.json" 2>&1); then
    bad "same_records.py found nothing between two different runs: $msg"
else
    case $msg in
    "grab 0 rank 0: "*digest*) ok "the records' comparison fires on another run's replay ($(echo "$msg" | cut -c1-60)...)" ;;
    *) bad "same_records.py on two different runs: '$msg'" ;;
    esac
fi

# The two catalogued bugs whose recordings differ from the live run by design (doc/REFERENCE.md).
rm -rf "$tmp/r"
"$DDPSIM" --ranks 3 --scenario classic --impl no-initial-broadcast --record "$tmp/r" -q >/dev/null 2>&1
expect 1 "first divergence: step 0 (parameters after step), rank 1" \
    "no-initial-broadcast: the recording promises one init; caught at the first step" -- check "$tmp/r" -q
rm -rf "$tmp/r"
"$DDPSIM" --ranks 3 --scenario classic --impl rank-never-syncs --record "$tmp/r" -q --timeout 5 >/dev/null 2>&1
expect 2 "rank0/micro2/used.json" "rank-never-syncs: the deadlocked run's recording is cut short" -- check "$tmp/r" -q

# The default tolerance: bitwise at 2 ranks, the order bound above (said in the header).
rm -rf "$tmp/r"
"$DDPSIM" --ranks 2 --scenario classic --record "$tmp/r" -q >/dev/null 2>&1
expect 0 "tolerance bitwise" "2 ranks are checked bitwise" -- check "$tmp/r"
rm -rf "$tmp/r"
"$DDPSIM" --ranks 3 --scenario classic --impl post-divide --record "$tmp/r" -q >/dev/null 2>&1
expect 0 "tolerance order" "above 2 ranks the order bound: post-divide's other bits pass" -- check "$tmp/r"
expect 1 "grab 2 (after fwd+bwd (3 acc)), rank 0, parameter 0.weight, element" "... and fail bitwise" -- check "$tmp/r" -T bitwise
expect 1 '"verdict": "diverges"' "--json" -- check "$tmp/r" -T bitwise --json -
expect 0 "ddpsim check DIR" "--help" -- check --help

# Bad recordings: exit 2, naming the file and what is wrong.
rm -rf "$tmp/g"
"$DDPSIM" --ranks 3 --scenario classic --impl bucketed --record "$tmp/g" -q >/dev/null 2>&1
fresh() { rm -rf "$tmp/b" && cp -r "$tmp/g" "$tmp/b"; }
manifest() { sed "$1" "$tmp/g/manifest.json" >"$tmp/b/manifest.json"; }
expect 2 "ddpsim check: needs DIR" "no directory" -- check
expect 2 "$tmp/missing: not a directory" "a directory that does not exist" -- check "$tmp/missing"
fresh; rm "$tmp/b/manifest.json"
expect 2 "manifest.json" "no manifest" -- check "$tmp/b"
# A FIFO (or a device) where a recording's file should be: refused with exit 2, never opened to block on it
# (timeout only keeps a regression from hanging the suite).
fifo() {
    fresh; rm "$tmp/b/$1" && mkfifo "$tmp/b/$1"
    expect_cmd 2 "$1 is a FIFO, not a regular file" "a FIFO as $1 is refused, not read" -- timeout 120 "$DDPSIM" check "$tmp/b"
}
fifo manifest.json
fifo init/0.weight.npy
fifo "$(cd "$tmp/g" && find rank0 -name '*.npy' | LC_ALL=C sort | head -1)"
# A symbolic link is followed wherever it leads (README: recordings may share a file), to a regular file only.
fresh; mv "$tmp/b/init/0.weight.npy" "$tmp/shared-init.npy" && ln -s "$tmp/shared-init.npy" "$tmp/b/init/0.weight.npy"
expect 0 "verdict: PASS" "an init file linked from outside the recording is read" -- check "$tmp/b" -q
fresh; mkfifo "$tmp/a-fifo"; rm "$tmp/b/init/0.weight.npy" && ln -s "$tmp/a-fifo" "$tmp/b/init/0.weight.npy"
expect_cmd 2 "init/0.weight.npy is a FIFO, not a regular file" "... but a link to a FIFO is refused" -- timeout 120 "$DDPSIM" check "$tmp/b"
rm -f "$tmp/a-fifo" "$tmp/shared-init.npy"
# A local gradient in pieces (reentrant checkpointing): each piece is added on its own, so the pieces are used,
# not the file of their sum; a lone piece or a mis-shaped one is bad input.
d0="$tmp/b/rank0/micro0"
fresh; cp "$d0/0.weight.npy" "$d0/0.weight.part1.npy"; cp "$d0/0.weight.npy" "$d0/0.weight.part2.npy"
expect 1 "first divergence: grab 0 (after no_sync fwd+bwd), rank 0, parameter 0.weight" "pieces are what is added (two copies: twice the gradient)" -- check "$tmp/b"
fresh; cp "$d0/0.weight.npy" "$d0/0.weight.part1.npy"
expect 2 "0.weight.part1.npy: a gradient in pieces needs two or more" "a lone piece" -- check "$tmp/b"
fresh; cp "$d0/0.weight.npy" "$d0/0.weight.part1.npy"; cp "$d0/0.bias.npy" "$d0/0.weight.part2.npy"
expect 2 "0.weight.part2.npy" "a piece of the wrong shape" -- check "$tmp/b"
fresh; rm "$tmp/b/rank2/micro5/2.weight.npy"
expect 2 "rank2/micro5/2.weight.npy" "a missing local gradient" -- check "$tmp/b"
fresh; rm "$tmp/b/bucketed/rank1/grab3/0.bias.npy"
expect 2 "bucketed/rank1/grab3/0.bias.npy" "a missing grab" -- check "$tmp/b"
fresh; rm -r "$tmp/b/bucketed/rank0/end"
expect 2 "bucketed/rank0/end/0.weight.npy" "missing final parameters" -- check "$tmp/b"
fresh; cp "$tmp/b/init/4.bias.npy" "$tmp/b/init/2.bias.npy"
expect 2 "init/2.bias.npy" "a mis-shaped file" -- check "$tmp/b"
fresh; printf 'not an npy file' >"$tmp/b/rank0/micro0/0.weight.npy"
expect 2 "rank0/micro0/0.weight.npy" "a file that is not .npy" -- check "$tmp/b"
fresh; printf '["0.weight", "nope"]\n' >"$tmp/b/rank1/micro1/used.json"
expect 2 "rank1/micro1/used.json: item 1 is not the name of a parameter" "used.json naming no parameter" -- check "$tmp/b"
# A parameter left out of a syncing backward's used.json, without find_unused_parameters: PyTorch's DDP fails
# there, so the recording cannot be replayed; found before any rank starts (it was a rank's failure, exit 3).
# Inside no_sync the same is a fair recording (DDP does not look), judged: its gradient differs.
all='"0.weight", "0.bias", "2.weight", "2.bias", "4.weight"'
fresh; printf '[%s]\n' "$all" >"$tmp/b/rank1/micro2/used.json"
expect 2 "rank1/micro2/used.json: parameter '4.bias' was not used by the forward of a syncing backward (op 11)" \
    "a syncing backward's used.json leaving out a parameter, without find_unused" -- check "$tmp/b"
fresh; printf '[%s]\n' "$all" >"$tmp/b/rank1/micro0/used.json"; rm "$tmp/b/rank1/micro0/4.bias.npy"
expect 1 "verdict: FAIL" "... inside no_sync it is judged, not refused" -- check "$tmp/b"
# A name names the recording's files and reaches the terminal: one with a newline, or "..", is refused, and printed
# escaped (the newline reached the terminal raw).
fresh; manifest 's/"0.weight"/"0.w\\neight"/'
expect 2 'name "0.w\\u000aeight" is empty' "a parameter name with a newline: refused, printed escaped" -- check "$tmp/b"
fresh; manifest 's/"0.weight"/".."/'
expect 2 'name ".." is empty' "a parameter named ..: refused" -- check "$tmp/b"
# A message names its file once (an uneven repetition's error named the manifest twice).
rm -rf "$tmp/u"
"$DDPSIM" --ranks 2 --scenario uneven --impl bucketed --record "$tmp/u" -q >/dev/null 2>&1
sed 's/"counts": \[\([0-9]*\), /"counts": [/' "$tmp/u/manifest.json" >"$tmp/u/m" && mv "$tmp/u/m" "$tmp/u/manifest.json"
expect 2 "uneven\[0\].counts has 1 entries for 2 ranks" "a bad uneven repetition names the manifest" -- check "$tmp/u"
if [ "$(grep -o "manifest.json" "$err" | wc -l)" -eq 1 ]; then ok "... once"; else bad "... more than once"; fi
fresh; manifest 's/"ranks": 3/"ranks": 4/'
expect 2 "rank3" "more ranks than recorded" -- check "$tmp/b"
fresh; manifest 's/"ddpsim-record"/"ddpsim-dump"/'
expect 2 "expected \"ddpsim-record\"" "the wrong format" -- check "$tmp/b"
fresh; manifest 's/"version": [0-9]*/"version": 11/'
expect 2 "version 11" "a later version" -- check "$tmp/b"
fresh; manifest 's/"version": [0-9]*/"version": 1/; s/, "algo": "ordered"//'
expect 0 "verdict: PASS" "a version-1 recording (no ddp.algo) is still read" -- check "$tmp/b"
fresh; manifest 's/"version": [0-9]*/"version": 2/'; rm -f "$tmp"/b/bucketed/rank*/grab*/none.json
expect 0 "verdict: PASS" "a version-2 recording (no none.json) is still read" -- check "$tmp/b"
fresh; manifest 's/"algo": "ordered"/"algo": "shuffled"/'
expect 2 "ddp.algo is not an algorithm" "an unknown ddp.algo" -- check "$tmp/b"
fresh; manifest 's/"grab"/"jump"/'
expect 2 "is not one of fwd" "an unknown op" -- check "$tmp/b"
fresh; manifest 's/"enter"/"grab"/'
expect 2 "not inside no_sync" "a schedule error (an exit without its enter)" -- check "$tmp/b"
fresh; manifest 's/"shape": \[64, 32\]/"shape": [32, 64]/'
expect 2 "0.weight.npy" "a shape the files do not have" -- check "$tmp/b"
fresh; manifest 's/"impl": "bucketed"/"impl": "rank0"/'
expect 2 "cannot name its directory" "an implementation named like a rank" -- check "$tmp/b"
fresh; manifest 's/"find_unused_rule": "window"/"find_unused_rule": "sometimes"/'
expect 2 "find_unused_rule" "an unknown find_unused rule" -- check "$tmp/b"
fresh; manifest 's/"lr": 0.1/"lr": "fast"/'
expect 2 "optimizer.lr" "a learning rate that is no number" -- check "$tmp/b"
fresh; manifest 's/"momentum": 0/"momentum": 1.5/'
expect 2 "optimizer.momentum must be a number in \[0, 1)" "a momentum of 1.5" -- check "$tmp/b"
fresh; manifest 's/"momentum": 0/"momentum": 0.9/'
expect 1 "first divergence: step 1 (parameters after step)" "a recording of plain SGD checked as momentum: the second step sees it (the first is the same)" -- check "$tmp/b"
fresh; printf '{"format": "ddpsim-record", ' >"$tmp/b/manifest.json"
expect 2 "manifest.json" "a truncated manifest" -- check "$tmp/b"
fresh
expect 2 "--tolerance" "a bad tolerance" -- check "$tmp/b" --tolerance sloppy
expect 2 "unrecognized\|unknown" "an unknown option" -- check "$tmp/b" --bogus
# A value no header shows: the rank that reads it says which file, still bad input.
fresh
if command -v /usr/bin/python3 >/dev/null 2>&1 && /usr/bin/python3 -c "import numpy" 2>/dev/null; then
    /usr/bin/python3 -c "import numpy as n, sys; p = sys.argv[1]; a = n.load(p); a[3] = n.nan; n.save(p, a)" \
        "$tmp/b/rank1/micro2/2.bias.npy"
    expect 2 "rank 1: .*rank1/micro2/2.bias.npy: element 3 is nan" "a local gradient that is NaN" -- check "$tmp/b"
else
    echo "SKIP: a NaN local gradient (no numpy to write it)"
fi
# An implementation's NaN is its own divergence, not bad input.
fresh
printf '\377\377\377\177' | dd of="$tmp/b/bucketed/rank2/grab1/4.bias.npy" bs=1 seek=128 conv=notrunc 2>/dev/null
expect 1 "grab 1 (after no_sync fwd+bwd (2 acc)), rank 2, parameter 4.bias, element 0: expected" "the implementation's NaN is a FAIL" -- check "$tmp/b"

# Sharded gradients (record.h "grad_shards"): each rank's own slices are checked, nothing else of its .grad is
# read (tests/shard_record.py gives rank r the r-th contiguous slice of every tensor, and writes 1e30 over the
# rest at every grab), and a wrong element a rank holds fails there. Bad layouts are refused before any rank runs.
if /usr/bin/python3 -c "import numpy" 2>/dev/null; then
    shard() { /usr/bin/python3 "$(dirname "$0")/shard_record.py" "$@"; }
    rm -rf "$tmp/s" "$tmp/s0"
    "$DDPSIM" --ranks 3 --scenario find-unused --impl bucketed --record "$tmp/s0" -q >/dev/null 2>&1
    cp -r "$tmp/s0" "$tmp/s" && shard "$tmp/s"
    expect 0 "gradients sharded (grad_shards): each rank's own elements are checked, of 348: rank 0 121, rank 1 121, rank 2 106" \
        "sharded: scratch outside each rank's slices is not read" -- check "$tmp/s"
    expect 0 "agreement: not checked: the ranks hold shards" "... nor the ranks' agreement" -- check "$tmp/s"
    shard "$tmp/s" 2 3 trunk.weight
    expect 1 "grab 3 (after no_sync fwd+bwd), rank 2, parameter trunk.weight, element 86: expected" \
        "... an element a rank holds, wrong, fails there" -- check "$tmp/s"
    rm -rf "$tmp/s" && cp -r "$tmp/s0" "$tmp/s" && shard "$tmp/s"
    /usr/bin/python3 -c "import numpy as n, sys; p = sys.argv[1]; a = n.load(p); a.reshape(-1)[0] = n.nan; n.save(p, a)" \
        "$tmp/s/bucketed/rank1/grab0/trunk.weight.npy"
    expect 0 "verdict: PASS" "... a NaN outside its slices is not read either" -- check "$tmp/s"
    # A catalogued bug, sharded: still caught, on a rank's own elements.
    rm -rf "$tmp/s" && "$DDPSIM" --ranks 3 --scenario classic --impl sync-on-exit --record "$tmp/s" -q >/dev/null 2>&1
    shard "$tmp/s"
    expect 1 "first divergence: grab 0 (after no_sync fwd+bwd), rank 0, parameter 0.weight" \
        "sharded: a catalogued bug (sync-on-exit) still fails" -- check "$tmp/s"
    layout() { # layout PYTHON-EXPR-ON-m: edit the sharded manifest of $tmp/s0
        rm -rf "$tmp/s" && cp -r "$tmp/s0" "$tmp/s" && shard "$tmp/s"
        /usr/bin/python3 -c "import json, sys; p = sys.argv[1]; m = json.load(open(p)); $1; json.dump(m, open(p, 'w'))" \
            "$tmp/s/manifest.json"
    }
    # refused EDIT PATTERN WHAT: the sharded manifest edited so, exit 2 saying PATTERN
    refused() { layout "$1" && expect 2 "$2" "$3" -- check "$tmp/s"; }
    refused 'm["grad_shards"][1]["trunk.weight"] = [[0, 10], [5, 10]]' \
        '"grad_shards"\[1\]: trunk.weight.s ranges overlap at element 5' "a rank's ranges that overlap"
    refused 'm["grad_shards"][2]["trunk.weight"] = [[86, 900]]' \
        '"grad_shards"\[2\].trunk.weight\[0\].s count must be a whole number in 1..42' "a range past the end"
    refused 'm["grad_shards"][0]["nope"] = [[0, 1]]' \
        '"grad_shards"\[0\] names "nope", not a parameter' "an unknown parameter"
    refused 'm["grad_shards"][1]["trunk.weight"] = [[86, 1]]' \
        "element 43 of trunk.weight is held by no rank" "an element no rank holds"
    refused 'm["grad_shards"].pop()' \
        '"grad_shards" must be an array of 3 objects' "not one object per rank"
    refused 'm["grad_shards"][0]["trunk.weight"] = [[0, "x"]]' \
        "count must be a whole number" "a range that is no number"
    # ... said grab by grab (held.json), for a layout that changes: the same checks, and the ranks that reached
    # a grab must hold every element of it between them.
    rm -rf "$tmp/s" && cp -r "$tmp/s0" "$tmp/s" && shard "$tmp/s" --per-grab
    expect 0 "verdict: PASS" "sharded grab by grab (held.json): scratch is not read" -- check "$tmp/s"
    shard "$tmp/s" 1 4 trunk.weight
    expect 1 "grab 4 (after no_sync fwd+bwd (2 acc)), rank 1, parameter trunk.weight, element 43: expected" \
        "... and a held element, wrong, fails" -- check "$tmp/s"
    echo '{"trunk.weight": [[0, 43]]}' >"$tmp/s/bucketed/rank1/grab2/held.json"
    expect 2 "grab 2: element 43 of trunk.weight is held by no rank" "... a grab's hole is refused" -- check "$tmp/s"
    echo '{"trunk.weight": [[0, 43]], "x": []}' >"$tmp/s/bucketed/rank1/grab2/held.json"
    expect 2 'grab2/held.json: held.json names "x"' "... a bad held.json too" -- check "$tmp/s"
else
    echo "SKIP: sharded recordings (no numpy to write them)"
fi

# None: a grab's none.json says whose .grad was None; DDP's None-ness is part of its semantics (find_unused leaves
# a parameter no rank used as it was, zero_grad(set_to_none) makes every .grad None), and a None .grad reads as
# zeros, so only this tells a wrapper that writes zeros from one that leaves None.
rm -rf "$tmp/n0" && "$DDPSIM" --ranks 2 --scenario find-unused --impl bucketed --record "$tmp/n0" -q >/dev/null 2>&1
if grep -q '"unused.weight"' "$tmp/n0/bucketed/rank0/grab0/none.json"; then ok "--record writes none.json"; else bad "--record writes no none.json"; fi
rm -rf "$tmp/n" && cp -r "$tmp/n0" "$tmp/n" && echo '["unused.bias"]' >"$tmp/n/bucketed/rank1/grab3/none.json"
expect 1 "grab 3 (after no_sync fwd+bwd), rank 1, parameter unused.weight: its .grad holds a tensor, where DDP's is None" \
    "a tensor where DDP's .grad is None fails" -- check "$tmp/n"
expect 1 '"grad_none": "expected"' "... said in --json" -- check "$tmp/n" --json -
echo '["unused.weight", "unused.bias", "trunk.bias"]' >"$tmp/n/bucketed/rank1/grab3/none.json"
expect 1 "rank 1, parameter trunk.bias: its .grad is None, where DDP's holds a tensor" "None where DDP's holds a tensor fails" -- check "$tmp/n"
echo '["trunk.bias", 3]' >"$tmp/n/bucketed/rank1/grab3/none.json"
expect 2 "grab3/none.json: item 1 is not the name of a parameter" "a bad none.json is refused" -- check "$tmp/n"

# Communication conformance: PyTorch's DDP reduces nothing in a backward that does not sync. A DDP that does
# (reduces-in-no-sync: the numbers stay right, the traffic is a sync per micro-step) fails at the next check, live
# and from its recording (--record writes each backward's count, micro<m>/comm.json), unless allowed.
rm -rf "$tmp/c"
expect 1 "first divergence: grab 0 (after no_sync fwd+bwd), rank 0: 1 reduction (29248 bytes) in a backward that does not sync (op 2)" \
    "reductions in a backward that does not sync fail, numbers right" -- --ranks 3 --scenario classic --impl reduces-in-no-sync --record "$tmp/c"
expect 1 "rank 0: 1 reduction (29248 bytes) in a backward that does not sync (op 2)" "... and from its recording" -- check "$tmp/c"
expect 0 "12 of them in backwards that do not sync" "... --allow-unsynced-comm allows them, and the totals say so" -- \
    check "$tmp/c" --allow-unsynced-comm
# Beside them, what PyTorch's DDP moves for the same schedule (the reference's own reductions): half.
grep -q "all ranks: 24 (0.669 MiB), 12 of them .*; PyTorch's DDP (the reference): 12 (0.335 MiB)$" "$out" &&
    ok "... beside PyTorch's DDP's: twice its traffic" || bad "... beside PyTorch's DDP's: twice its traffic"
expect 1 '"kind": "communication", "rank": 0, "unsynced_reductions": 1' "... said in --json" -- check "$tmp/c" --json -
expect 0 "reductions, all ranks: 12 (0.335 MiB), 0 of them in backwards that do not sync (PyTorch's DDP: none); PyTorch's DDP (the reference): 12 (0.335 MiB)" \
    "a correct DDP's totals, PyTorch's DDP's the same" -- --ranks 3 --scenario classic --impl bucketed
# Counted as the implementation's are, in each rank's own backwards: a rank that ran out and shadows its peers'
# syncs under join is not counted on either side (13 = 5 + 5 + 3 syncs), and find_unused's used map is one more
# reduction on both; no figure where it would not compare (a compressing hook: both sides gather).
expect 0 "all ranks: 13 (0.043 MiB), 0 of them .*; PyTorch's DDP (the reference): 13 (0.043 MiB)" \
    "... uneven inputs under join: each rank's own backwards" -- --ranks 3 --scenario uneven --impl bucketed
expect 0 "all ranks: 12 (0.008 MiB), 0 of them .*; PyTorch's DDP (the reference): 12 (0.008 MiB)" \
    "... find_unused" -- --ranks 3 --scenario find-unused --impl bucketed
expect 0 "(PyTorch's DDP: none)$" "... none beside a compressing hook" -- --ranks 3 --scenario classic --comm-hook fp16
echo '{"reductions": 0}' >"$tmp/c/rank1/micro0/comm.json"
expect 1 "first divergence: grab 0 (after no_sync fwd+bwd), rank 0" "... a recorder that counts no bytes is read" -- check "$tmp/c"
echo '{"reductions": -1}' >"$tmp/c/rank1/micro0/comm.json"
expect 2 "rank1/micro0/comm.json: reductions must be a whole number" "a bad comm.json is refused" -- check "$tmp/c"

# The token loss's normalization (record.h "loss_norm": each micro-batch's tokens.json, each backward's
# factor<m>.json): a correct trainer's recording replays record for record, under each normalization (the mean of
# means' factor of a micro-batch without a token is inf: any factor is right there); a recorded mistake fails at
# its first backward, named as live (after it, the reference's gradients are the recorded ones rescaled to the
# intended factor, within a rounding of the live run's, so only the verdict and the first divergence are compared).
plugins=${PLUGIN_DIR:-$(dirname "$0")/plugin}
for n in global-tokens micro-batch-mean sum; do
    records "records of the example plugin's trainer under --loss-norm $n, live and replayed" -- --ranks 4 \
        --scenario ragged-tokens --impl "$plugins/libexample_impl.so" --loss-norm "$n"
done
records "records of the mean of means where it is intended, inf at the empty micro-batch" -- --ranks 3 \
    --scenario ragged-tokens --impl norm-micro-batch-mean --loss-norm micro-batch-mean
for impl in norm-micro-batch-mean norm-rank-local norm-dropped norm-after-backward norm-empty-counted \
    norm-rescale-each-micro-step norm-local-when-one-step norm-tail-configured-steps; do
    same "$impl, 3 ranks" -- --ranks 3 --scenario ragged-tokens --impl "$impl"
done
same "a plugin's own trainer normalizing by its rank's tokens, 4 ranks" -- --ranks 4 --scenario ragged-tokens \
    --impl "$plugins/libexample_local_tokens.so"
grep -q "^# pattern: the factor is 1 / this rank's own valid tokens of the window" "$out" &&
    ok "... its mistake named from the recording" || bad "... its mistake not named from the recording"
rm -rf "$tmp/t0" && "$DDPSIM" --ranks 3 --scenario ragged-tokens --record "$tmp/t0" -q >/dev/null 2>&1
tfresh() { rm -rf "$tmp/t" && cp -r "$tmp/t0" "$tmp/t"; }
tfresh
expect 0 "loss normalization (global-tokens): every rank's factor at 18 backwards was the intended one" \
    "a recording's factors checked against its counts" -- check "$tmp/t"
# Each of the two is what the judgement rests on: a factor, or one sequence's count, changed fails.
echo '{"factor": 0.01}' >"$tmp/t/reference/rank2/factor4.json"
expect 1 "first divergence: the loss normalization of the backward at op 19, .*rank 2, micro-step 1 of its window's 2: the implementation multiplied the summed token loss by 0.00999999978" \
    "a recorded factor that is not the intended one fails at its backward" -- check "$tmp/t" -q
tfresh
python_bump() { /usr/bin/env python3 -c "import json,sys; p=sys.argv[1]; t=json.load(open(p)); t[0]+=5; json.dump(t,open(p,'w'))" "$1"; }
python_bump "$tmp/t/rank0/micro0/tokens.json"
expect 1 "first divergence: the loss normalization of the backward at op 2, .* on every rank" \
    "... and so does a count: the window's total moves every factor of it" -- check "$tmp/t" -q
# A recorder that found no one factor for a micro-batch says so ("mixed": a per-sequence normalization): it fails.
tfresh; echo '{"factor": 0.05000000074505806, "mixed": {"sequence": 1, "factor": 0.02}}' >"$tmp/t/reference/rank2/factor4.json"
expect 1 "by 0.0500000007 for the first sequence with valid tokens and by 0.0199999996 for sequence 1's, --loss-norm global-tokens intends 0.0500000007 for every one" \
    "a micro-batch without one factor fails, though its first factor is the intended one" -- check "$tmp/t" -q
grep -q "pattern: no one factor for the micro-batch" "$out" && ok "... named" || bad "... not named"
tfresh; echo '{"factor": 0.05, "mixed": {"sequence": 9, "factor": 0.02}}' >"$tmp/t/reference/rank2/factor4.json"
expect 2 '"mixed".sequence must be a whole number in 0..3' "a mixed factor's sequence outside the micro-batch" -- check "$tmp/t"
tfresh; echo '{"factor": 0.05, "mixed": 3}' >"$tmp/t/reference/rank2/factor4.json"
expect 2 '"mixed" must be {"sequence": S, "factor": F}' "a mixed factor that is not an object" -- check "$tmp/t"
tfresh; rm "$tmp/t/reference/rank1/factor3.json"
expect 2 "reference/rank1/factor3.json: missing: the factor the backward multiplied its summed token loss by" \
    "a missing factor is refused" -- check "$tmp/t"
tfresh; echo '{"factor": "lots"}' >"$tmp/t/reference/rank1/factor3.json"
expect 2 "reference/rank1/factor3.json: \"factor\" must be a number" "a factor that is not a number" -- check "$tmp/t"
tfresh; rm "$tmp/t/rank1/micro2/tokens.json"
expect 2 "rank1/micro2/tokens.json: missing: the manifest's \"loss_norm\" needs every micro-batch's valid tokens" \
    "missing counts are refused" -- check "$tmp/t"
tfresh; echo '[1, 2]' >"$tmp/t/rank1/micro2/tokens.json"
expect 2 "rank1/micro2/tokens.json: 2 sequences, where the recording's first micro-batch has 4" \
    "a micro-batch of another size" -- check "$tmp/t"
tfresh; echo '[1, -2, 0, 1]' >"$tmp/t/rank1/micro2/tokens.json"
expect 2 "rank1/micro2/tokens.json: a sequence's valid tokens must be a whole number" "a negative count" -- check "$tmp/t"
tfresh; sed 's/"loss_norm": "global-tokens"/"loss_norm": "tokens"/' "$tmp/t0/manifest.json" >"$tmp/t/manifest.json"
expect 2 "\"loss_norm\" \"tokens\" is not global-tokens, micro-batch-mean or sum" "an unknown normalization" -- check "$tmp/t"
tfresh; sed 's/"loss_norm": "global-tokens"/"loss_norm": "sum", "loss_scale": "1024"/' "$tmp/t0/manifest.json" >"$tmp/t/manifest.json"
expect 2 "\"loss_norm\" with \"loss_scale\": not modelled" "... nor with a loss scale" -- check "$tmp/t"
tfresh; sed 's/"loss_norm": "global-tokens"/"loss_norm": "sum"/' "$tmp/t0/manifest.json" >"$tmp/t/manifest.json"
expect 1 "--loss-norm sum intends 3" "the manifest's normalization is the one judged" -- check "$tmp/t" -q

# --record's own errors.
expect 2 "belongs to a single run" "the battery with --record" -- --record "$tmp/x"
expect 2 "name the same directory" "--record and --dump in one place" -- --scenario classic --record "$tmp/x" --dump "$tmp/x"
expect 2 "holds an earlier ddpsim" "--record over an earlier recording" -- --scenario classic --record "$tmp/g"
expect 0 "verdict: PASS" "--record --force replaces it" -- --scenario classic --impl bucketed --record "$tmp/g" --force -q

finish
