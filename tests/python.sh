#!/bin/sh
# python.sh - the Python front end (python/ddpsim_torch) against real
# PyTorch DDP on gloo: torch's own DDP passes (the battery at 2, 3 and 4
# ranks, every twin, a user model with a convolution, a tied embedding, a
# transformer block and a sometimes-unused layer), the wrappers of
# tests/python/wrappers.py fail where their bugs show, model averaging
# (tests/python/averaging.py) is judged by its parameters, a deadlock and a
# hang end with exit 3 and no process left, and bad input is exit 2 naming
# what is wrong. Skips (77) without a Python that has torch and numpy.
DDPSIM=${DDPSIM:-./sim/ddpsim}
. "$(dirname "$0")/testlib.sh"
here=$(cd "$(dirname "$0")" && pwd)
# CI's sanitizer build leaves the front end out (.ci/run says why); every other build runs it.
if [ -n "${DDPSIM_SKIP_PYTHON_TESTS:-}" ]; then
    echo "SKIP: DDPSIM_SKIP_PYTHON_TESTS is set"
    exit 77
fi
py=""
for c in "$PYTHON_TORCH" /usr/bin/python3 python3; do
    if [ -n "$c" ] && [ "$c" != : ] && "$c" -c "import torch, numpy, torch.distributed as d; assert d.is_gloo_available()" 2>/dev/null; then
        py=$c
        break
    fi
done
if [ -z "$py" ]; then
    echo "SKIP: no Python with torch (with gloo) and numpy (Debian: apt-get install python3-torch)"
    exit 77
fi
echo "python: $py, $("$py" -c 'import torch; print("torch", torch.__version__)')"
# The torch's version as MAJOR*100+MINOR (1.13: 113, 2.15: 215): where its DDP's rules differ, so do the expectations.
tv=$("$py" -c 'import re, torch; m = re.match(r"(\d+)\.(\d+)", torch.__version__); print(int(m[1]) * 100 + int(m[2]))')
PYTHONPATH=$here/../python${PYTHONPATH:+:$PYTHONPATH}
DDPSIM=$(cd "$(dirname "$DDPSIM")" && pwd)/$(basename "$DDPSIM")
export PYTHONPATH DDPSIM
tmp=$(mktemp -d) || exit 99
server=""
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$out" "$err" "$tmp"' EXIT
W=$here/python/wrappers.py
M=$here/python/usermodels.py
DDP=torch.nn.parallel:DistributedDataParallel

# front CODE PATTERN DESCRIPTION -- ARGS: python3 -m ddpsim_torch ARGS (through the front server while it runs)
front() {
    code=$1 pattern=$2 what=$3
    shift 4
    if [ -n "$server" ]; then
        expect_cmd "$code" "$pattern" "$what" -- "$py" "$here/python/front_server.py" run "$tmp/front.sock" "$@"
    else
        expect_cmd "$code" "$pattern" "$what" -- "$py" -m ddpsim_torch "$@"
    fi
}
# This test's front-end processes: launchers and their ranks (the command line forks its ranks itself, so a
# rank's command line is its launcher's), fork servers and theirs (check() from Python; launch.py): those that
# carry its scratch directory in their environment (another test run on the machine has its own).
front_end_processes="-m ddpsim_torch|multiprocessing.forkserver"
ranks_left() {
    n=0
    for p in $(pgrep -f -- "$front_end_processes"); do
        grep -q "DDPSIM_TORCH_SCRATCH=$DDPSIM_TORCH_SCRATCH" "/proc/$p/environ" 2>/dev/null && n=$((n + 1))
    done
    echo "$n"
}
# This test's recordings go to a directory of its own, so other runs on the machine cannot blur the count.
DDPSIM_TORCH_SCRATCH=$tmp/scratch
export DDPSIM_TORCH_SCRATCH
scratch() { ls "$DDPSIM_TORCH_SCRATCH" 2>/dev/null | grep -c '^ddpsim_torch-'; }
scratch_before=$(scratch)

# DDPSIM_PYTHON_TESTS=processes runs only what watches processes and time (from "A deadlock and a hang" on, and
# bad input): tests/load.sh's set, beside busy loops; the semantics above do not depend on timing.
if [ "${DDPSIM_PYTHON_TESTS:-all}" != processes ]; then
# The semantics' front-end runs are forks of one server that imported torch once (tests/python/front_server.py:
# each run's interpreter and imports took about 3 s of CPU under torch 2.x, most of this part's time); the
# processes-and-time part below runs the command line itself.
start_front_server "$py" "$tmp/front.sock"
server=$front_server_pid
# What a fork cannot give is refused: a variable torch or OpenBLAS reads at import, not the server's.
expect_cmd 125 "not the server's: OPENBLAS_CORETYPE" "the front server refuses a run whose import-time environment differs" -- \
    env OPENBLAS_CORETYPE=ddpsim-check "$py" "$here/python/front_server.py" run "$tmp/front.sock" --ranks 2
# The twins are ddpsim's models: names, shapes, order and gradients.
expect_cmd 0 "twin attn: names, shapes and gradients match" "the torch twins of mlp, branchy and attn" -- \
    "$py" "$here/python/twins_check.py"

# Real DDP passes.
for n in 2 3 4; do
    front 0 "verdict: PASS (23 of 23 scenarios; not run, the header says why: ragged-tokens)" "torch's DDP passes the battery at $n ranks" -- --ranks "$n" --wrap "$DDP"
done
grep -q "ragged-tokens not run: it checks a training step's loss normalization on ragged tokens: give --train-step" \
    "$out" && ok "... ragged-tokens left out without a training step, said why" ||
    bad "... ragged-tokens left out without a training step, said why"
grep -q "find_unused counts what the syncing backward used (PyTorch < 2.4)\|any micro-step of the window used (PyTorch >= 2.4" "$out" &&
    ok "the header says which torch's semantics" || bad "the header says which torch's semantics"
front 0 "verdict: PASS" "2 ranks: bitwise" -- --ranks 2 --wrap "$DDP" --scenario classic
grep -q "tolerance bitwise" "$out" && ok "... the tolerance is bitwise" || bad "... the tolerance is bitwise"
front 0 "verdict: PASS" "the mlp twin, the default schedule, 4 ranks" -- --ranks 4 --wrap "$DDP" --model mlp:32-64-64-16
front 0 "verdict: PASS" "the branchy twin with find_unused" -- --ranks 3 --wrap "$DDP" --model branchy --find-unused
front 0 "verdict: PASS" "the attn twin" -- --ranks 3 --wrap "$DDP" --model attn
front 0 "verdict: PASS" "zero_grad(set_to_none=True)" -- --ranks 3 --wrap "$DDP" --scenario zero-and-step --zero-grad none
front 0 "verdict: PASS" "gradient_as_bucket_view and small buckets" -- --ranks 3 --wrap "$DDP" --scenario buckets --bucket-view
for n in 2 3; do
    front 0 "verdict: PASS" "a user model (conv, tied embedding, transformer block, a sometimes-unused layer), $n ranks" -- \
        --ranks "$n" --wrap "$DDP" --model "$M:build" --data "$M:batch" --find-unused \
        --schedule "2*( 2*( nosync{fwd bwd} grab ) fwd bwd grab step zero fwd bwd grab step zero )"
done
front 0 "verdict: PASS" "a user model with its own loss, the battery's ops" -- --ranks 2 --wrap "$DDP" \
    --model "$M:build" --data "$M:batch" --loss "$M:mse_loss" --find-unused
grep -q "with find_unused, arming not run: a syncing backward there runs through a later forward" "$out" "$err" &&
    ok "... the arming scenario is left out with find_unused on a user model, and says why" ||
    bad "... the arming scenario is left out with find_unused on a user model, and says why"
front 3 "Expected to have finished reduction in the prior iteration" "... where real DDP itself fails it (--scenario arming)" -- \
    --ranks 2 --wrap "$DDP" --model "$M:build" --data "$M:batch" --find-unused --scenario arming
# The rule the front end picked is the one torch's DDP has: the other one fails on this model.
front 0 "verdict: PASS" "a kept recording" -- --ranks 3 --wrap "$DDP" --model "$M:build" --data "$M:batch" \
    --find-unused --schedule "2*( 2*( nosync{fwd bwd} grab ) fwd bwd grab step zero fwd bwd grab step zero )" --keep "$tmp/k"
rule=$(sed -n 's/.*"find_unused_rule": "\([a-z-]*\)".*/\1/p' "$tmp/k/schedule/record/manifest.json")
other=$([ "$rule" = window ] && echo syncing-backward || echo window)
expect 0 "verdict: PASS" "ddpsim check on the kept recording" -- check "$tmp/k/schedule/record"
sed "s/\"find_unused_rule\": \"$rule\"/\"find_unused_rule\": \"$other\"/" "$tmp/k/schedule/record/manifest.json" >"$tmp/m" &&
    cp "$tmp/m" "$tmp/k/schedule/record/manifest.json"
expect 1 "parameter sometimes.weight" "... and under the other torch's find_unused rule it fails" -- check "$tmp/k/schedule/record"
# The README's smallest wrapper, as printed there: it passes the classic scenario (bitwise at 2 ranks), and the
# same wrapper syncing on no_sync's exit instead (thunder #1670) fails at the first grab.
awk '/<!-- smallest-wrapper/ { on = 1; next } on && /^```python/ { code = 1; next } code && /^```/ { exit } code { print }' \
    "$here/../README.md" >"$tmp/myddp.py"
if grep -q "class MyDDP" "$tmp/myddp.py"; then ok "the README's smallest wrapper is found"; else bad "the README's smallest wrapper is not in README.md"; fi
front 0 "verdict: PASS" "the README's smallest wrapper, 2 ranks" -- --ranks 2 --wrap "$tmp/myddp.py:MyDDP" --scenario classic
# ... and over the battery at 3 ranks, what the README says: 16 of the 18 scenarios it can run pass; the verdict
# names every scenario that did not, the FAULT beside the FAIL.
front 1 "verdict: FAIL (19 of 21 scenarios pass; FAIL: buffers; FAULT: find-unused)" \
    "the README's smallest wrapper over the battery, 3 ranks" -- --ranks 3 --wrap "$tmp/myddp.py:MyDDP"
# Each row says how many of its grabs and of its parameter checks held: buffers fails in its grabs (the buffers
# are compared with the gradients), a fault reached none.
grep -Eq '^ buffers +FAIL +[0-9]+/[0-9]+ +[0-9]+/[0-9]+ +first divergence' "$out" && grep -Eq '^ find-unused +FAULT +- +- ' "$out" &&
    ok "... each row with its grabs and parameter checks held" || bad "... each row with its grabs and parameter checks held"
sed 's/            self.syncing = before/            self.syncing = before\n            if before: self._average()/' "$tmp/myddp.py" >"$tmp/myddp_exit.py"
front 1 "first divergence: grab 0 (after no_sync fwd+bwd)" "... and with thunder's sync on exit it fails at the first grab" -- \
    --ranks 2 --wrap "$tmp/myddp_exit.py:MyDDP" --scenario classic
front 0 "verdict: PASS (21 of 21 scenarios; not run, the header says why: uneven, uneven-divide, ragged-tokens)" "a thunder-style functional wrapper (after PR #2255)" -- --ranks 3 --wrap "$W:hook_ddp"
# Buffers: real DDP's broadcast_buffers is the reference's rule (the battery above, bitwise at 2 ranks, has the
# buffers scenario); DDP with broadcast_buffers=False fails it, naming the buffer, live and from its recording.
front 1 "rank 1, buffer bn.running_mean, element 0" "DDP(broadcast_buffers=False) fails the buffers scenario" -- \
    --ranks 3 --wrap "$W:ddp_no_broadcast_buffers" --scenario buffers
front 0 "verdict: PASS" "real DDP passes the buffers scenario at 4 ranks" -- --ranks 4 --wrap "$DDP" --scenario buffers
# Uneven inputs under model.join() (the battery's uneven scenarios pass above): the reference's divisor is
# torch's, and a DDP whose join divides by the ranks still running (join's first design, PR #42577) fails,
# named; a wrapper without join() leaves those scenarios out, saying why (the battery above).
front 0 "verdict: PASS" "real DDP, join(divide_by_initial_world_size=false), rank 0 out early, 3 ranks" -- --ranks 3 \
    --wrap "$DDP" --schedule 'fwd bwd grab step zero join(divide_by_initial_world_size=false){ [3, 0:1, -1:2]*( fwd bwd grab step zero ) } fwd bwd grab'
front 1 "first divergence: grab 4 (after fwd+bwd (2 acc)), rank 0, parameter fc1.weight" "a join that divides by the ranks running fails" -- \
    --ranks 3 --wrap "$W:ddp_join_divides_by_running" --scenario uneven
front 2 "without join(): the wrapped module must be Joinable" "join{...} alone with a wrapper that has no join()" -- \
    --ranks 2 --wrap "$W:hook_ddp" --scenario uneven
front 3 "deadlock: rank 2 finished the schedule while ranks 0, 1 wait" "uneven inputs without join: real DDP waits forever, a named deadlock" -- \
    --ranks 3 --wrap "$DDP" --schedule 'fwd bwd grab step zero [3, -1:1]*( fwd bwd grab step zero )'
# Sharded wrappers (tests/python/sharded.py: each gradient reduced to its owner, fairscale-style, the owner steps
# and broadcasts) say what each rank holds (ddpsim_grad_shards) and bring their optimizer: the owners' .grad and
# the parameters after every step are checked, a non-owner's .grad is not read. Undeclared, the non-owner's None
# fails; each planted bug fails where its mechanism shows (an owner's element).
SH=$here/python/sharded.py
front 0 "verdict: PASS" "a sharded wrapper with its own optimizer, 3 ranks" -- --ranks 3 --wrap "$SH:sharded" --scenario classic
front 0 "verdict: PASS" "... 2 ranks, bitwise, windows of 2" -- --ranks 2 --wrap "$SH:sharded" --scenario window-2
front 1 "grab 2 (after fwd+bwd (3 acc)), rank 0, parameter 0.weight: its .grad is None, where DDP's holds a tensor" \
    "... the same, undeclared: a non-owner's None .grad fails" -- --ranks 3 --wrap "$SH:sharded_undeclared" --scenario classic
front 1 "first divergence: grab 0 (after no_sync fwd+bwd), rank 0, parameter 2.weight" \
    "every backward a boundary, only the last micro-batch kept (open-instruct PR #1498): fails" -- \
    --ranks 3 --wrap "$SH:sharded_every_backward" --scenario classic
front 1 "first divergence: grab 2 (after fwd+bwd (3 acc)), rank 2, parameter 4.bias" \
    "the remainder bucket never reduced (DeepSpeed #4879): fails at its owner" -- \
    --ranks 3 --wrap "$SH:sharded_remainder_unreduced" --scenario classic
# The step's momentum (--optimizer, the momentum scenario): an owner-stepped optimizer keeping torch's buffers passes
# bitwise; one that declares the momentum and never applies it (planted) fails at the second step (the first step's
# buffer is the gradient itself); an own optimizer that cannot follow the momentum is not judged by it.
front 0 "verdict: PASS (8 grabs and 5 parameter checks x 2 ranks match, bitwise)" "momentum: a sharded optimizer with torch's buffers, bitwise" -- \
    --ranks 2 --wrap "$SH:sharded_momentum" --scenario momentum
front 1 "first divergence: step 1 (parameters after step), rank 0, parameter 0.weight" "momentum declared and never applied (planted): fails at the second step" -- \
    --ranks 3 --wrap "$SH:sharded_momentum_dropped" --scenario momentum
grep -q "pattern: its update is -lr times the gradient alone: plain SGD, the momentum buffer not applied" "$out" &&
    ok "... its pattern says so" || bad "... its pattern says so"
front 2 "returned an optimizer whose momentum it does not say" "an own optimizer that cannot follow the momentum is refused, not judged" -- \
    --ranks 2 --wrap "$SH:sharded" --scenario momentum
front 0 "lr 0.1, SGD momentum 0.5" "--optimizer momentum:0.5 on torch's DDP: the front end's SGD and the reference's, bitwise" -- \
    --ranks 2 --wrap "$DDP" --optimizer momentum:0.5 --scenario classic
grep -q "verdict: PASS (8 grabs and 5 parameter checks x 2 ranks match, bitwise)" "$out" && ok "... and it passes bitwise" ||
    bad "... and it passes bitwise"
front 2 "expected sgd, momentum.:M. or adamw" "--optimizer with an unknown name" -- --ranks 2 --wrap "$DDP" --optimizer adam
# AdamW (--optimizer adamw, the adamw scenario): the front end's own optimizer is torch's AdamW, judged by the AdamW
# bound (its roundings are torch's); a wrapper's own optimizer built from its optimizer argument passes bitwise,
# one that declares the weight decay and skips it (planted) fails at the first step, and one that is not AdamW is
# refused, not judged.
front 0 "lr 0.1, AdamW betas (0.8, 0.99), eps 1e-06, weight decay 0.1" "--optimizer adamw on torch's DDP: the front end's AdamW" -- \
    --ranks 3 --wrap "$DDP" --optimizer adamw:beta1=0.8,beta2=0.99,eps=1e-6,wd=0.1 --scenario window-2
grep -q "verdict: PASS (6 grabs and 4 parameter checks x 3 ranks match" "$out" && ok "... and it passes" || bad "... and it passes"
front 0 "verdict: PASS (8 grabs and 5 parameter checks x 2 ranks match, bitwise)" "adamw: ZeroRedundancyOptimizer over the run's AdamW, bitwise" -- \
    --ranks 2 --wrap "$SH:zero_optimizer" --scenario adamw
front 1 "first divergence: step 0 (parameters after step), rank 0, parameter 0.weight" "adamw: the weight decay declared and skipped (planted): fails at the first step" -- \
    --ranks 3 --wrap "$SH:adamw_decay_dropped" --scenario adamw
front 2 "returned an optimizer that is not torch.optim.AdamW" "adamw: an own optimizer that is not AdamW is refused, not judged" -- \
    --ranks 2 --wrap "$SH:sharded_momentum" --scenario adamw
front 2 "returned an optimizer that steps as torch.optim.AdamW: run with --optimizer adamw" \
    "... and an own AdamW under an SGD run is refused, not judged" -- --ranks 2 --wrap "$W:own_adamw" --scenario classic
# A mode other than DDP's (README, "Check a sharded implementation"): a ZeRO-2-style wrapper (every backward reduces
# to the owner's partition) declared zero2 (its wrap function's ddpsim_shard, or --shard) is judged by ZeRO-2's rule,
# the scenarios that rule does not model left out with the reason; judged as DDP it fails where DDP holds the local
# sum; DeepSpeed PR #6550's copy-instead-of-add (planted) fails under its own mode.
front 0 "verdict: PASS (8 grabs and 5 parameter checks x 2 ranks match, bitwise)" "a zero2 wrapper under ZeRO-2's rule, bitwise" -- \
    --ranks 2 --wrap "$SH:zero2" --scenario classic
front 0 "find-unused not run: the sharded reference does not model find_unused" "... its battery, 3 ranks, what the rule does not model left out" -- \
    --ranks 3 --wrap "$SH:zero2"
grep "^# verdict" "$out"
front 0 "# sharded: zero2, judged by its rule" "... the header says the mode" -- --ranks 2 --wrap "$SH:zero2" --scenario classic
front 1 "first divergence: grab 0 (after no_sync fwd+bwd), rank 0, parameter 2.weight" "... undeclared, judged as DDP: fails" -- \
    --ranks 2 --wrap "$SH:zero2_undeclared" --scenario classic
front 0 "verdict: PASS" "... --shard zero2 declares it" -- --ranks 2 --wrap "$SH:zero2_undeclared" --scenario classic --shard zero2
front 1 "first divergence: grab 1 (after no_sync fwd+bwd (2 acc)), rank 0, parameter 2.weight" \
    "the partition copied at every backward (DeepSpeed PR #6550, planted): fails under its mode" -- \
    --ranks 2 --wrap "$SH:zero2_boundary_reset" --scenario classic
front 2 "--shard zero3: the mode is zero1, zero2, fsdp or hsdp" "an unknown --shard" -- --ranks 2 --wrap "$SH:zero2" --shard zero3
front 2 "--shard zero2:1x2: only hsdp takes a mesh" "a mesh for zero2" -- --ranks 2 --wrap "$SH:zero2" --shard zero2:1x2
front 2 "--shard hsdp:2x2: the mesh is 4 ranks, the run has 3" "a mesh of the wrong size" -- --ranks 3 --wrap "$SH:zero2" --shard hsdp:2x2
front 2 "--find-unused, --bucket-view, --static-graph and --comm-hook are DDP's options" "DDP's options with a sharded mode" -- \
    --ranks 2 --wrap "$SH:zero2" --find-unused --scenario classic
# Flattened parameters (FSDP1's FlatParameter): refused before any check, with the reason and what to do.
front 2 "the wrapper replaced the module's 6 parameters by 1 flat one (flat_param of" \
    "a wrapper that flattens the parameters is refused, saying why" -- --ranks 2 --wrap "$SH:flattened" --scenario classic
# None: a wrapper writing zeros where DDP leaves None (a parameter no rank used) fails, and says so.
front 1 "rank 0, parameter unused.weight: its .grad holds a tensor, where DDP's is None" "zeros where DDP's .grad is None" -- \
    --ranks 2 --wrap "$SH:zeros_for_none" --scenario find-unused --find-unused
# The user's optimizer: torch's ZeroRedundancyOptimizer beside DDP passes where every rank steps on synced
# gradients, and differs where DDP's SGD steps each replica on its own (a step inside a window): ZeRO gives every
# rank the owner's update instead. Its join hook steps once per shadowed forward (zero_redundancy_optimizer.py
# _ZeROJoinHook), so with a rank out of inputs the owner's shard on that rank never moves.
front 0 "verdict: PASS" "DDP with ZeroRedundancyOptimizer, 2 ranks, bitwise" -- --ranks 2 --wrap "$SH:zero_optimizer" --scenario classic
front 0 "verdict: PASS (8 grabs and 5 parameter checks x 2 ranks match, bitwise)" "... over SGD with momentum (its wrap takes the run's): each owner's buffers, bitwise" -- \
    --ranks 2 --wrap "$SH:zero_optimizer" --scenario momentum
front 1 "first divergence: step 1 (parameters after step), rank 0, parameter 0.weight" \
    "... a step on unsynced gradients: the owner's update, not each rank's" -- --ranks 2 --wrap "$SH:zero_optimizer" --scenario ends-in-window
front 1 "first divergence: step 2 (parameters after step), rank 0, parameter 0.weight" \
    "... under join the joined rank's shard does not move" -- --ranks 2 --wrap "$SH:zero_optimizer" --scenario uneven-divide
# Communication conformance: the front end counts the wrapper's reductions in every backward (the c10d ops that
# reach torch's dispatcher: DDP's reducer's, FSDP2's, torch.distributed's); PyTorch's DDP makes none in a backward
# that does not sync, so a wrapper that reduces there and drops the sum (its numbers right; cosmos-framework #161's
# traffic) fails, and real DDP's count there is none.
front 1 "rank 0: 6 reductions in a backward that does not sync (op 2)" \
    "a wrapper that reduces in no_sync and drops the sum fails, its numbers right" -- \
    --ranks 3 --wrap "$W:reduces_in_no_sync" --scenario classic
front 0 "verdict: PASS" "... unless --allow-unsynced-comm" -- --ranks 3 --wrap "$W:reduces_in_no_sync" --scenario classic \
    --allow-unsynced-comm
front 0 "reductions, all ranks: 8, 0 of them in backwards that do not sync" "real DDP's reductions, counted: none in no_sync" -- \
    --ranks 2 --wrap "$DDP" --scenario classic
# --find-unused-rule: a wrapper following the other torch's rule is checked against it on this torch.
other_rule=$("$py" -c 'from ddpsim_torch import semantics; print("syncing-backward" if semantics.find_unused_rule() == "window" else "window")')
front 1 "parameter sometimes.weight" "a wrapper of the other find_unused rule fails under this torch's" -- --ranks 3 \
    --wrap "$W:other_rule_ddp" --model "$M:build" --data "$M:batch" --find-unused --schedule "2*( 2*( nosync{fwd bwd} grab ) fwd bwd grab step zero )"
front 0 "verdict: PASS" "... and passes with --find-unused-rule $other_rule" -- --ranks 3 --find-unused-rule "$other_rule" \
    --wrap "$W:other_rule_ddp" --model "$M:build" --data "$M:batch" --find-unused --schedule "2*( 2*( nosync{fwd bwd} grab ) fwd bwd grab step zero )"
front 2 "--find-unused-rule" "an unknown rule" -- --wrap "$DDP" --find-unused-rule sometimes --scenario classic
front 2 "returned a tuple; it must be (module, optimizer)" "a wrap that returns a bad tuple" -- --wrap "$SH:bad_tuple" --scenario classic
front 2 "ddpsim_grad_shards() names 'nope'" "a shard of a parameter the model does not have" -- --wrap "$SH:names_nope" --scenario classic
front 2 "element 0 of 4.bias is held by no rank" "a layout that leaves an element unchecked" -- --ranks 2 --wrap "$SH:holds_too_little" --scenario classic

# Communication hooks, against torch's own (default_hooks.py): DDP with fp16_compress_hook matches the reference's
# float16 arithmetic bitwise at 2 ranks over the whole battery and within the order bound at 3; allreduce_hook too;
# a wrapper that registers fp16_compress_hook itself fails when the reference is not told (order tolerance).
front 0 "verdict: PASS (21 of 21 scenarios; not run, the header says why: uneven, uneven-divide, ragged-tokens)" "real DDP with fp16_compress_hook, 2 ranks, bitwise" -- --ranks 2 --wrap "$DDP" --comm-hook fp16
front 0 "verdict: PASS" "... 3 ranks, the order bound" -- --ranks 3 --wrap "$DDP" --comm-hook fp16 --scenario classic
front 0 "verdict: PASS" "real DDP with allreduce_hook, 2 ranks, bitwise" -- --ranks 2 --wrap "$DDP" --comm-hook allreduce --scenario bucket-view
front 1 "first divergence: grab 2 (after fwd+bwd (3 acc)), rank 0, parameter 0.weight" "a DDP compressing in float16 unannounced fails" -- \
    --ranks 3 --wrap "$W:ddp_fp16_hook" --scenario classic
grep -q "hint: the wrapper registered the communication hook fp16_compress_hook, and the reference was not told: --comm-hook fp16" "$out" &&
    ok "... with a hint naming --comm-hook fp16" || bad "... with a hint naming --comm-hook fp16"
front 0 "verdict: PASS" "... and passes once --comm-hook fp16 says so" -- --ranks 3 --wrap "$W:ddp_fp16_hook" --scenario classic --comm-hook fp16
if [ "$tv" -ge 200 ] && "$py" -c 'from ddpsim_torch import semantics; assert semantics.bf16_hook_runs()' 2>/dev/null; then
    # torch 2.x from PyPI is a CUDA build: its DDP takes bf16_compress_hook on gloo, with no GPU (_check_comm_hook
    # asks how torch was built), and ddpsim's bfloat16 reference is checked against it.
    front 0 "verdict: PASS (21 of 21 scenarios; not run, the header says why: uneven, uneven-divide, ragged-tokens)" "real DDP with bf16_compress_hook, 2 ranks, bitwise" -- --ranks 2 --wrap "$DDP" --comm-hook bf16
    front 0 "verdict: PASS" "... 3 ranks, the order bound" -- --ranks 3 --wrap "$DDP" --comm-hook bf16 --scenario classic
    front 1 "first divergence: grab 2 (after fwd+bwd (3 acc)), rank 0, parameter 0.weight" "a DDP compressing in bfloat16 unannounced fails" -- \
        --ranks 3 --wrap "$W:ddp_bf16_hook" --scenario classic
    front 1 "first divergence" "... and one compressing in bfloat16 announced as float16 fails" -- \
        --ranks 3 --wrap "$W:ddp_bf16_hook" --scenario classic --comm-hook fp16
else
    front 2 "distributed.py _check_comm_hook" "--comm-hook bf16 where torch's DDP refuses it" -- --ranks 2 --wrap "$DDP" --comm-hook bf16 --scenario classic
fi

# torch.compile over real DDP (torch 2.x; dynamo's DDPOptimizer splits the graph at the buckets): with eager kernels
# (aot_eager) and with inductor's own, the classic scenario matches bitwise; inductor's kernels on find-unused's
# model compute other bits than the eager shadow's already at grab 0, inside no_sync, before any communication
# (README: torch.compile).
if [ "$tv" -ge 200 ]; then
    front 0 "verdict: PASS (8 grabs and 5 parameter checks x 2 ranks match, bitwise)" "torch.compile(DDP), aot_eager: classic, bitwise" -- \
        --ranks 2 --wrap "$W:compiled_ddp_eager" --scenario classic
    front 0 "verdict: PASS (8 grabs and 5 parameter checks x 2 ranks match, bitwise)" "torch.compile(DDP), inductor: classic, bitwise" -- \
        --ranks 2 --wrap "$W:compiled_ddp" --scenario classic
    front 1 "first divergence: grab 0 (after no_sync fwd+bwd), rank 0, parameter trunk.weight" \
        "torch.compile(DDP), inductor: find-unused's model differs from eager before any sync" -- \
        --ranks 2 --wrap "$W:compiled_ddp" --scenario find-unused
fi

# A parameter whose gradient arrives in two pieces in one backward (an encoder used twice, once under reentrant
# checkpointing): each piece is its own AccumulateGrad, recorded and replayed as such. Real DDP needs static_graph
# for it (and says so without), then matches bitwise; a wrapper that syncs at a parameter's first hook reduces one
# piece and keeps the other local (DeepSpeed #8224's "missing one subgraph's contribution").
TW="--model $M:build_twice --data $M:batch_twice --loss $M:mse_twice"
TS="fwd bwd grab fwd bwd grab 2*( nosync{fwd bwd} grab fwd bwd grab step zero )"
front 3 "Expected to mark a variable ready only once" "twice-used encoder: real DDP without static_graph refuses it" -- --ranks 2 --wrap "$DDP" $TW --schedule "$TS"
front 0 "verdict: PASS (6 grabs and 3 parameter checks x 2 ranks match, bitwise)" "... with static_graph it matches bitwise, piece by piece" -- --ranks 2 --wrap "$DDP" $TW --schedule "$TS" --static-graph
front 0 "verdict: PASS" "... and at 3 ranks within the order bound" -- --ranks 3 --wrap "$DDP" $TW --schedule "$TS" --static-graph
front 1 "first divergence: grab 0 (after fwd+bwd), rank 0, parameter enc.0.weight" "a wrapper syncing at the first hook misses a piece" -- --ranks 2 --wrap "$W:hook_ddp" $TW --schedule "$TS"
# ddpsim's own tied model (tied: an autoencoder whose decoder is the encoder's weight transposed, the encoder
# under reentrant checkpointing; the battery's tied scenario, with static_graph) passed in the battery above on
# real DDP; without static_graph ddpsim refuses it, as DDP would fail.
front 2 "add --static-graph" "the tied model without static_graph is refused before any rank starts" -- \
    --ranks 2 --wrap "$DDP" --model tied

# static_graph=True: ddpsim refuses what this torch's DDP cannot run with it, under the rule the front end picks for
# it (asked of ddpsim, run on torch; the other torch's rule mispredicts), and real DDP with it passes every other
# scenario.
expect_cmd 0 "the other rule (.*) mispredicts [1-9]" "static_graph: ddpsim's refusals are where this torch's DDP fails" -- \
    "$py" "$here/python/static_graph_check.py"
if [ "$tv" -ge 201 ]; then # PR #103487: only the first backward must be armed
    front 0 "verdict: PASS (6 of 6 scenarios; not run, the header says why: classic, window-2" "real DDP with static_graph passes the rest of the battery" -- \
        --ranks 2 --wrap "$DDP" --static-graph
    front 2 "op 2 (bwd), the first backward, is one no sync armed" "... and a refused scenario alone is bad input" -- --ranks 2 --wrap "$DDP" --static-graph --scenario window-2
else
    front 0 "verdict: PASS (10 of 10 scenarios; not run, the header says why: window-2" "real DDP with static_graph passes the rest of the battery" -- \
        --ranks 2 --wrap "$DDP" --static-graph
    front 2 "op 12 (bwd) is a backward no sync armed" "... and a refused scenario alone is bad input" -- --ranks 2 --wrap "$DDP" --static-graph --scenario window-2
fi

# PyTorch's arming (the battery's arming scenario ran above on real DDP): a step between a forward and its
# backward runs when no gradient exists, and a wrapper whose forward inside no_sync disarms fails.
front 0 "verdict: PASS" "real DDP: a step between fwd and bwd after zero_grad(set_to_none)" -- --ranks 2 --wrap "$DDP" \
    --schedule "fwd bwd zero fwd step bwd grab" --zero-grad none
front 2 "op 4 (step) comes between a forward and its backward while gradients exist" "... refused with zeros, as autograd refuses it" -- \
    --ranks 2 --wrap "$DDP" --schedule "fwd bwd zero fwd step bwd grab" --zero-grad zeros
front 1 "first divergence: grab 0 (after no_sync fwd+bwd, armed), rank 0, parameter 0.weight" "a wrapper whose forward inside no_sync disarms" -- \
    --ranks 3 --wrap "$W:disarm_in_no_sync" --scenario arming
front 1 "first divergence: grab 9 (after fwd+bwd (2 acc)), rank 0, parameter 0.weight" "an engine that counts its own window misses the tail's sync" -- \
    --ranks 3 --wrap "$W:counts_own_window" --scenario tail-window

# Known bugs fail at the first grab where they show, naming grab, rank, parameter, element, expected and actual.
div='rank 0, parameter 0.weight, element 0: expected [-0-9.e]*, actual [-0-9.e]*'
front 1 "first divergence: grab 0 (after no_sync fwd+bwd), $div" "thunder's no_sync before PR #2255 (sync on exit)" -- \
    --ranks 3 --wrap "$W:thunder_sync_on_exit" --scenario classic
front 1 "first divergence: grab 0 (after no_sync fwd+bwd), $div" "a wrapper that syncs every micro-step" -- \
    --ranks 3 --wrap "$W:sync_every_microstep" --scenario classic
front 1 "first divergence: grab 2 (after fwd+bwd (3 acc)), $div" "a wrapper that sums without dividing" -- \
    --ranks 3 --wrap "$W:sum_not_average" --scenario classic
front 1 "first divergence: grab 2 (after fwd+bwd (3 acc)), $div" "a wrapper that syncs only the window's last micro-batch" -- \
    --ranks 3 --wrap "$W:last_microbatch_only" --scenario classic
front 1 "thunder_sync_on_exit    *FAIL\|classic  *FAIL" "... and in the battery" -- --ranks 2 --wrap "$W:thunder_sync_on_exit" \
    --junit "$tmp/battery.xml" --html "$tmp/battery.html" --annotations github
# ... and where CI reads it (ddpsim_torch/ci.py): JUnit XML in the xunit2 layout, a testcase per scenario with ddpsim
# check's failure (rank, parameter, element, pattern) and the front end's replay line; an ::error per failing
# scenario at the wrapper's source.
if command -v xmllint >/dev/null 2>&1; then
    xp() { xmllint --xpath "string($2)" "$1" 2>/dev/null; }
    T=/testsuites/testsuite
    nfail=$(grep -c "^ [a-z0-9-]*  *FAIL " "$out")
    if ! xmllint --noout --schema "$here/junit/xunit2.xsd" "$tmp/battery.xml" >"$tmp/xsd" 2>&1; then
        bad "--junit: not valid xunit2: $(head -3 "$tmp/xsd")"
    elif [ "$(xp "$tmp/battery.xml" "$T/@failures")" != "$nfail" ] || [ "$nfail" -lt 1 ]; then
        bad "--junit: $(xp "$tmp/battery.xml" "$T/@failures") failures, the table's FAIL rows $nfail"
    elif ! xp "$tmp/battery.xml" "$T/testcase[@name='classic']/failure" | grep -q "^parameter: 0.weight$" ||
        ! xp "$tmp/battery.xml" "$T/testcase[@name='classic']/failure" | grep -q "^pattern: .*reduced in a backward that does not sync" ||
        ! xp "$tmp/battery.xml" "$T/testcase[@name='classic']/system-out" | grep -q -- "-m ddpsim_torch --ranks 2 --wrap $W:thunder_sync_on_exit .*--scenario classic$"; then
        bad "--junit: classic's testcase lacks its facts or its replay line: $(xp "$tmp/battery.xml" "$T/testcase[@name='classic']")"
    else
        ok "--junit: valid xunit2, a failure per FAIL row ($nfail), classic's with its parameter, pattern and replay line"
    fi
    # SyncOnExit's no_sync, inherited from HookDDP: its first line is its decorator's
    # --html: ddpsim check's heatmaps of every scenario run, under a table of them (tests/html.sh reads C's pages)
    nrun=$(grep -c "^ [a-z0-9-]*  *\(PASS\|FAIL\) " "$out")
    if msg=$("$py" "$here/html_dom.py" "$tmp/battery.html" 6 2 fail "$nrun" 2>&1) &&
        grep -q '<tr><td><a href="#run-1">classic</a></td><td class="verdict v-fail">FAIL</td>' "$tmp/battery.html"; then
        ok "--html: a section per scenario run ($msg), the scenarios' table"
    else
        bad "--html: $msg"
    fi
    line=$(awk '/^class HookDDP/ {c = 1} c && /def no_sync/ {print NR - 1; exit}' "$W")
    if [ "$(grep -c "^::error file=[^,]*tests/python/wrappers.py,line=$line,title=ddpsim%3A scenario [a-z0-9-]* FAIL::grab [0-9]*, rank" "$out")" = "$nfail" ] &&
        grep -q "^::notice title=ddpsim verdict::FAIL" "$out"; then
        ok "--annotations github: an ::error per failing scenario at the wrapper's no_sync ($W:$line), the ::notice"
    else
        bad "--annotations github: not an ::error per failing scenario at $W:$line"
    fi
else
    echo "SKIP: --junit's document is not validated: no xmllint (libxml2-utils)"
fi
front 2 "--junit: .* is a directory" "--junit DIR is refused before any rank starts" -- --ranks 2 --wrap "$DDP" --junit "$tmp"

# The pytest plugin (ddpsim_torch/pytest_plugin.py) under Debian's pytest, read back from pytest's own --junitxml:
# the marker and the fixture pass torch's DDP and a correct wrapper, fail thunder's sync-on-exit with ddpsim's
# report and its facts (testcase properties with junit_family=xunit1), and a marked test returning nothing fails
# saying why; under pytest's default xunit2 the document stays valid (no properties in a testcase).
if "$py" -c "import pytest" 2>/dev/null && command -v xmllint >/dev/null 2>&1; then
    (cd "$tmp" && "$py" -m pytest -p ddpsim_torch.pytest_plugin -p no:cacheprovider -q -o junit_family=xunit1 \
        --junitxml "$tmp/pytest1.xml" "$here/python/pytest_ddpsim.py") >"$out" 2>"$err"
    code=$?
    tc() { xp "$tmp/pytest1.xml" "/testsuites/testsuite/testcase[@name='$1']$2"; }
    if [ "$code" -ne 1 ] || [ "$(xp "$tmp/pytest1.xml" "/testsuites/testsuite/@tests")" != 5 ]; then
        bad "pytest plugin: exit $code, $(xp "$tmp/pytest1.xml" "/testsuites/testsuite/@tests") tests (1 and 5 expected)"
    elif [ "$(tc test_marker_ddp "/failure/@message")$(tc test_fixture_ddp "/failure/@message")" != "" ] ||
        [ "$(tc test_marker_ddp "/@name")" != test_marker_ddp ]; then
        bad "pytest plugin: torch's DDP or a correct wrapper did not pass"
    elif ! tc test_marker_sync_on_exit "/failure" | grep -q "^# first divergence: grab 0 (after no_sync fwd+bwd), rank 0, parameter 0.weight" ||
        ! tc test_fixture_sync_on_exit "/failure" | grep -q "^# first divergence: grab 0 (after no_sync fwd+bwd), rank 0, parameter 0.weight"; then
        bad "pytest plugin: sync-on-exit's failure lacks ddpsim's first divergence: $(tc test_marker_sync_on_exit "/failure" | head -3)"
    elif [ "$(tc test_marker_sync_on_exit "/properties/property[@name='ddpsim_parameter']/@value")" != 0.weight ] ||
        [ "$(tc test_marker_sync_on_exit "/properties/property[@name='ddpsim_check']/@value")" != "grab 0" ]; then
        bad "pytest plugin: no ddpsim_parameter/ddpsim_check properties under xunit1"
    elif ! tc test_marker_returns_nothing "/failure/@message" | grep -q "the test returned nothing"; then
        bad "pytest plugin: a marked test returning nothing did not fail saying so"
    else
        ok "pytest plugin: marker and fixture pass DDP, fail sync-on-exit with ddpsim's report and its properties"
    fi
    (cd "$tmp" && "$py" -m pytest -p ddpsim_torch.pytest_plugin -p no:cacheprovider -q -o junit_family=xunit1 \
        --ddpsim-html-dir "$tmp/pages" --junitxml "$tmp/pytest3.xml" \
        "$here/python/pytest_ddpsim.py::test_marker_sync_on_exit") >"$out" 2>"$err"
    page=$(xp "$tmp/pytest3.xml" "//testcase/properties/property[@name='ddpsim_html']/@value")
    if [ -n "$page" ] && [ -s "$page" ] && xp "$tmp/pytest3.xml" "//testcase/failure" | grep -q "^# html report: $page$"; then
        ok "pytest plugin: --ddpsim-html-dir writes the check's page, its path in the failure and ddpsim_html"
    else
        bad "pytest plugin: --ddpsim-html-dir: page '$page'"
    fi
    (cd "$tmp" && "$py" -m pytest -p ddpsim_torch.pytest_plugin -p no:cacheprovider -q --junitxml "$tmp/pytest2.xml" \
        "$here/python/pytest_ddpsim.py::test_marker_sync_on_exit") >"$out" 2>"$err"
    if xmllint --noout --schema "$here/junit/xunit2.xsd" "$tmp/pytest2.xml" >"$tmp/xsd" 2>&1 &&
        [ "$(xp "$tmp/pytest2.xml" "count(//testcase/properties)")" = 0 ] &&
        [ "$(xp "$tmp/pytest2.xml" "count(//testcase/failure)")" = 1 ]; then
        ok "pytest plugin: under pytest's default xunit2 the document stays valid (the facts in the failure's text)"
    else
        bad "pytest plugin: pytest's xunit2 document: $(head -3 "$tmp/xsd")"
    fi
else
    echo "SKIP: the pytest plugin is not tested: no pytest for $py or no xmllint (Debian: python3-pytest, libxml2-utils)"
fi

# Progress (ddpsim_torch/progress.py): on a terminal (script(1) gives one) the battery rewrites one line of stderr,
# the ranks' scenario then ddpsim check's; in a pipe (every other run here) and with --quiet, no byte of it.
ESC=$(printf '\033')
if command -v script >/dev/null 2>&1; then
    script -q -e -c "$(printf ' %s' "$py" -m ddpsim_torch --ranks 2 --wrap "$DDP")" /dev/null >"$tmp/tty" 2>&1 </dev/null
    code=$?
    script -q -e -c "$(printf ' %s' "$py" -m ddpsim_torch --ranks 2 --wrap "$DDP" -q)" /dev/null >"$tmp/ttyq" 2>&1 </dev/null
    if [ "$code" -eq 0 ] && grep -q "ranks: scenario 1 of [0-9]*: classic (" "$tmp/tty" &&
        grep -q "ddpsim check: scenario [0-9]* of [0-9]*: " "$tmp/tty" && grep -q "$ESC\[K" "$tmp/tty" &&
        ! grep -q "$ESC" "$tmp/ttyq"; then
        ok "progress on a terminal: the ranks' scenario and ddpsim check's, rewritten; none with --quiet"
    else
        bad "progress on a terminal (exit $code): $(tr '\r' '\n' <"$tmp/tty" | grep -a 'scenario' | head -2)"
    fi
fi
front 0 "verdict: PASS" "in a pipe: no progress byte" -- --ranks 2 --wrap "$DDP" --scenario classic
if grep -q "$ESC" "$out" "$err"; then bad "in a pipe: the progress line's bytes were written"; else ok "... none written"; fi

# clip_grad_norm_ (clip:MAX, --clip): torch's own clip on torch's DDP gives the reference's coefficient, the same bits
# on every rank, and its gradients after it; a wrapper that clips by the norm of its own partition (RLinf PR #1558's
# mechanism, planted) is caught at the clip, each rank's coefficient its own.
CS="2*( nosync{fwd bwd} grab fwd bwd clip:0.01 grab step zero ) fwd bwd clip:0.01:inf grab step"
front 0 "# clip: 9 clips over all ranks: every rank's coefficient the same bits, within the bound of the reference's exact norm" \
    "clip: torch's clip_grad_norm_ on torch's DDP, L2 and inf" -- --ranks 3 --wrap "$DDP" --schedule "$CS"
front 0 "verdict: PASS (8 grabs and 5 parameter checks x 3 ranks match" "--clip: before every step the classic scenario clips" -- \
    --ranks 3 --wrap "$DDP" --scenario classic --clip 0.01
front 1 "first divergence: the clip at op 7, before grab 1 .after fwd.bwd .2 acc.., rank 0: coefficient .*, rank 1's .*: the ranks clipped by different norms" \
    "clip: a wrapper clipping by its own partition's norm (planted) is caught at the clip" -- \
    --ranks 3 --wrap "$W:partition_norm_clip" --schedule "$CS"
front 2 "is a training loop (ddpsim_loop), and the schedule clips" "clip: a training loop of its own is refused before any rank starts" -- \
    --ranks 2 --wrap "$W:loop_forgets_zero_grad" --schedule "fwd bwd clip:1 step"

# Loss scaling (--loss-scale; the battery's loss-scale scenario ran above): torch's GradScaler (torch 1.13: its
# arithmetic, by the front end) around torch's DDP, an inf or NaN planted into one rank's backward found on every
# rank; a wrapper's own scaler (ddpsim_grad_scaler) with a planted bug is caught: found_inf always true
# (Megatron-LM #663), a scale its backward never applied (DeepSpeed PR #7839, named by its pattern).
LSS="3*( nosync{fwd bwd} grab fwd bwd clip:0.01 grab step zero )"
front 0 "# loss scale: every rank's scale at 12 backwards and its finding at 6 unscales were the reference's; 2 of the unscales found an inf or NaN" \
    "loss scale: torch's DDP, a static scale, a NaN planted, clipped after the unscale" -- \
    --ranks 2 --wrap "$DDP" --loss-scale 128 --schedule "$LSS" --fault nan:rank=1,op=2
front 0 "verdict: PASS" "loss scale: a wrapper's own GradScaler (ddpsim_grad_scaler)" -- --ranks 3 --wrap "$W:ddp_cpu_scaler" --scenario loss-scale
front 1 "first divergence: the unscale at op 13, before step 0 (parameters after step), rank 0: the implementation found an inf or NaN and skips the step; the reference found none" \
    "loss scale: found_inf always true (Megatron-LM #663, planted) is caught at the first step" -- \
    --ranks 3 --wrap "$W:ddp_found_inf_always" --scenario loss-scale
front 1 "pattern: its gradient is 0.0009766 x the reference's (1/the loss scale: unscaled twice, or never scaled)" \
    "loss scale: a scale never applied (DeepSpeed PR #7839, planted), named by its pattern" -- \
    --ranks 3 --wrap "$W:ddp_never_scaled" --scenario loss-scale
front 2 "--fault crash:rank=0,op=1: the front end plants an inf or a NaN" "loss scale: a --fault other than inf or nan is refused" -- \
    --ranks 2 --wrap "$DDP" --loss-scale 8 --fault crash:rank=0,op=1
front 2 "needs --loss-scale" "loss scale: --fault inf without --loss-scale is refused" -- --ranks 2 --wrap "$DDP" \
    --schedule "fwd bwd grab step" --fault inf:rank=0,op=1
front 2 "is a training loop (ddpsim_loop), and the run scales the loss" "loss scale: a training loop of its own is refused" -- \
    --ranks 2 --wrap "$W:loop_forgets_zero_grad" --schedule "fwd bwd step" --loss-scale 8
# A sharded wrapper brings its own scaler: the zero2 wrapper's unscales its partitions and all-reduces its finding
# (judged by ZeRO-2's rule, under the order tolerance at 3 ranks: the sharded bound carried through the unscale);
# one without it is refused, since torch's GradScaler would see one rank's shards alone (fairscale #180).
front 0 "verdict: PASS (12 grabs and 6 parameter checks x 3 ranks match, order)" "loss scale: a ZeRO-2 wrapper's own scaler, 3 ranks" -- \
    --ranks 3 --wrap "$SH:zero2" --scenario loss-scale
front 2 "loss scaling of a sharded wrapper needs its own GradScaler, ddpsim_grad_scaler" \
    "loss scale: a sharded wrapper without a scaler of its own is refused" -- --ranks 2 --wrap "$SH:sharded" --scenario loss-scale
front 0 "verdict: PASS" "loss scale: a kept recording" -- --ranks 2 --wrap "$DDP" --scenario loss-scale --keep "$tmp/ls"
ls "$tmp/ls/loss-scale/record/"*/rank1/scale0.json "$tmp/ls/loss-scale/record/"*/rank1/unscale0.json >/dev/null 2>&1 &&
    ok "... with every rank's scales and findings" || bad "... with every rank's scales and findings"
expect 0 "verdict: PASS" "... which ddpsim check passes" -- check "$tmp/ls/loss-scale/record"

# A training loop that owns its iteration (ddpsim_loop: loop.py): a hand-written accumulation loop over torch's
# DDP passes; one that never zeroes fails, named; a loop whose events do not fit the schedule (it steps where the
# schedule has a forward, it stops early) is bad input naming the op; a loop runs no battery.
# The first is the README's example, as printed there.
LS="3*( nosync{fwd bwd grab} fwd bwd grab step zero )"
awk '/<!-- loop-example/ { on = 1; next } on && /^```python/ { code = 1; next } code && /^```/ { exit } code { print }' \
    "$here/../README.md" >"$tmp/myloop.py"
front 0 "verdict: PASS (6 grabs and 4 parameter checks x 3 ranks match, order)" \
    "the README's training loop of its own: accumulation over torch DDP, windows of 2" -- \
    --ranks 3 --wrap "$tmp/myloop.py:accumulation_loop" --schedule "$LS"
front 1 "pattern: its gradient is the reference's plus the gradient the last step took: not zeroed after the step" \
    "... a loop that never zeroes fails, its pattern named" -- --ranks 3 --wrap "$W:loop_forgets_zero_grad" --schedule "$LS"
front 2 "loop_steps_every_microstep stepped the optimizer where the schedule has op 5 (fwd): no step comes there" \
    "... a loop that steps where the schedule does not is refused, naming the op" -- \
    --ranks 2 --wrap "$W:loop_steps_every_microstep" --schedule "$LS"
front 2 "loop_stops_early returned where the schedule has op 15 (fwd): 11 more ops to run" \
    "... a loop that stops early is refused, naming the op" -- --ranks 2 --wrap "$W:loop_stops_early" --schedule "$LS"
front 2 "gave after_backward(grads=...) the names \['module.0.bias', 'module.0.weight'" \
    "... gradients handed by names the model does not have are refused" -- \
    --ranks 2 --wrap "$W:loop_grads_misnamed" --schedule "fwd bwd grab"
front 2 "is a training loop (ddpsim_loop): uneven inputs and join{...} are not driven through one" \
    "... nor uneven inputs under join, refused before any rank starts" -- \
    --ranks 2 --wrap "$tmp/myloop.py:accumulation_loop" --schedule "fwd bwd grab join{ [2, -1:1]*( fwd bwd grab ) }"
front 0 "verdict: PASS" "the README's training loop with --optimizer adamw: loop.optimizer() builds the run's AdamW" -- \
    --ranks 2 --wrap "$tmp/myloop.py:accumulation_loop" --schedule "$LS" --optimizer adamw
front 2 "the step is torch.optim.AdamW, and --wrap $W:loop_own_sgd built its optimizer without loop.optimizer" \
    "... a loop that builds its own SGD under AdamW is not run" -- --ranks 2 --wrap "$W:loop_own_sgd" --schedule "$LS" --optimizer adamw
front 2 "is a training loop (ddpsim_loop): it decides itself when it syncs, steps and zeroes, so it runs no battery" \
    "... and runs no battery" -- --ranks 2 --wrap "$tmp/myloop.py:accumulation_loop"


# Model averaging (tests/python/averaging.py, --params-only): torch's post-local SGD (DDP with post_localSGD_hook,
# PostLocalSGDOptimizer, PeriodicModelAverager; two warm-up steps of plain DDP, then local steps and the
# parameters averaged) compares no .grad and every step's parameters, against DDP's within the averaging's proven
# bound. Period 1 passes; period 2, an averager that sums, and a warm-up that ends in the hook before it ends in
# the averager fail at the step where it shows.
AV=$here/python/averaging.py
AVS="4*( nosync{fwd bwd} fwd bwd grab step zero )"
front 0 "verdict: PASS (5 parameter checks x 3 ranks match, order; parameters only" \
    "post-local SGD, period 1: DDP's parameters, no .grad compared" -- --ranks 3 --wrap "$AV:local_sgd" --schedule "$AVS" \
    --keep "$tmp/avg"
grep -q "^# parameters only (model averaging)" "$out" && grep -q "^#   32 ops, 8 forwards, 0 grabs, 4 steps" "$out" &&
    ok "... the header says so, and the grabs are left out" || bad "... the header says so, and the grabs are left out"
# The averaging's rounding is really there (not bitwise DDP's) and inside the bound.
ratio=$(sed -n 's/^# order: the largest |implementation - reference| was \([0-9.e+-]*\) of.*/\1/p' "$out")
awk -v r="$ratio" 'BEGIN { exit !(r > 0 && r <= 1) }' &&
    ok "... its parameters differ from the reference's within the bound (worst $ratio of it)" ||
    bad "... the worst |implementation - reference| over the bound: '$ratio'"
front 1 "first divergence: step 3 (parameters after step), rank 0" "period 2: the step that is not averaged fails" -- \
    --ranks 3 --wrap "$AV:local_sgd_period_2" --schedule "$AVS"
front 1 "first divergence: step 2 (parameters after step), rank 0" "an averager that sums the parameters fails at the first averaged step" -- \
    --ranks 3 --wrap "$AV:averager_sums" --schedule "$AVS"
front 0 "verdict: PASS (5 parameter checks x 3 ranks match" "plain DDP with its own SGD passes parameters-only too" -- \
    --ranks 3 --wrap "$AV:ddp_sgd" --scenario classic
# At 2 ranks too averaged parameters are held to the averaging's bound, not bitwise (nothing proves an average of
# stepped parameters rounds as DDP's step): ddpsim check's default for them, said in the header.
front 0 "verdict: PASS (5 parameter checks x 2 ranks match, order; parameters only" \
    "post-local SGD at 2 ranks: judged within the averaging's bound by default" -- \
    --ranks 2 --wrap "$AV:local_sgd" --schedule "$AVS"
grep -q "tolerance order, the averaging's proven bound" "$out" && ok "... the header says which tolerance and why" ||
    bad "... the header says which tolerance and why: $(grep '^# model' "$out")"
# Three syncing backwards before the first step: the hook's warm-up (2 syncing backwards) is over at the third,
# the averager's (2 steps) is not at the first step, so that step takes each rank's own gradients unaveraged. Shown
# without the reference: the ranks' recorded parameters after step 0 differ, which DDP's never do.
front 1 "first divergence: step 0 (parameters after step), rank 0" \
    "post-local SGD with more syncs than steps: the warm-ups disagree, the first step is local" -- \
    --ranks 3 --wrap "$AV:local_sgd" --scenario sync-after-sync --keep "$tmp/avg2"
if "$py" -c 'import numpy as np, sys; d = sys.argv[1] + "/sync-after-sync/record/local_sgd"
a, b = (np.load("%s/rank%d/step0/0.weight.npy" % (d, r)) for r in (0, 1)); sys.exit(not (a != b).any())' "$tmp/avg2"
then ok "... independently: ranks 0 and 1 hold different parameters after that step"
else bad "... ranks 0 and 1 hold the same parameters after step 0"; fi
front 2 "--params-only: the schedule has no step" "--params-only without a step is refused" -- \
    --ranks 2 --wrap "$AV:ddp_sgd" --schedule "fwd bwd grab"
front 2 "--params-only with --shard zero2" "--params-only with --shard is refused" -- \
    --ranks 2 --wrap "$AV:ddp_sgd" --schedule "fwd bwd step" --shard zero2
# ddpsim check's own refusals, on the kept recording: a grab beside averaged parameters, an unknown averaging.
m=$tmp/avg/schedule/record/manifest.json
cp "$m" "$tmp/m.orig"
sed 's/"averages": "parameters"/"averages": "gradients"/' "$tmp/m.orig" >"$m"
expect 2 'optimizer.averages must be "parameters"' "ddpsim check: an unknown averaging is refused" -- check "$tmp/avg/schedule/record"
"$py" -c 'import json, sys; m = json.load(open(sys.argv[1])); m["ops"].append("grab"); json.dump(m, open(sys.argv[1], "w"))' "$tmp/m.orig" &&
    cp "$tmp/m.orig" "$m"
expect 2 'optimizer.averages "parameters" with a grab' "ddpsim check: a grab beside averaged parameters is refused" -- \
    check "$tmp/avg/schedule/record"

kill "$server" 2>/dev/null
wait "$server" 2>/dev/null
server=""
# A training step of the user's (--train-step, tests/python/train_steps.py) on the token model's ragged batches:
# the factor it applied is read from the gradient it sent into the output (bit for bit) and judged at every
# backward. The right step for each normalization passes; each mistake of the catalogue fails at its first
# backward with its name; a per-sequence mean (no one factor) is named as such; a loss that is not the token
# cross-entropy, and a step of two forwards, are refused.
T=$here/python/train_steps.py
front 0 "verdict: PASS (1 of 1 scenarios; not run, the header says why: classic," \
    "--train-step: the battery runs the token model's scenario, global tokens gathered by the step" -- --ranks 3 \
    --wrap "$DDP" --train-step "$T:global_tokens"
grep -q "classic not run: --train-step: scenario classic runs mlp:32-64-64-16, which has no token loss" "$out" &&
    ok "... the others not run, said why" || bad "... the others not run, said why"
for n in 2 4; do
    front 0 "loss normalization (global-tokens): every rank's factor at $((n * 6)) backwards was the intended one" \
        "--train-step: global tokens at $n ranks" -- --ranks "$n" --wrap "$DDP" --train-step "$T:global_tokens" \
        --scenario ragged-tokens
done
front 0 "verdict: PASS" "--train-step: the mean of micro-batch means where it is intended" -- --ranks 3 --wrap "$DDP" \
    --train-step "$T:micro_batch_mean" --scenario ragged-tokens --loss-norm micro-batch-mean
front 0 "verdict: PASS" "--train-step: the sum where it is intended (a step without a window argument)" -- --ranks 3 \
    --wrap "$DDP" --train-step "$T:token_sum" --scenario ragged-tokens --loss-norm sum
for bug in "micro_batch_mean:each micro-batch's own token mean over the window's micro-steps" \
    "rank_local:1 / this rank's own valid tokens of the window" \
    "dropped:1: the summed loss without its token normalizer" \
    "empty_counted:an empty sequence counted as one token" \
    "configured_steps:1 / (A x this micro-batch's tokens), A the configured accumulation count"; do
    front 1 "pattern: .*${bug#*:}" "--train-step: ${bug%%:*} caught, its mistake named" -- --ranks 3 --wrap "$DDP" \
        --train-step "$T:${bug%%:*}" --scenario ragged-tokens
    grep -q "first divergence: the loss normalization of the backward at op 2, .*rank 0, micro-step 1 of its window's 3" "$out" &&
        ok "... at its first backward" || bad "... not at its first backward"
done
front 1 "first divergence: the loss normalization of the backward at op 13, .* micro-step 1 of its window's 1" \
    "--train-step: the configured count is caught in the shorter window, where it is wrong under micro-batch-mean" -- \
    --ranks 3 --wrap "$DDP" --train-step "$T:configured_steps" --scenario ragged-tokens --loss-norm micro-batch-mean
front 1 "for the first sequence with valid tokens and by .* for sequence 2's, --loss-norm global-tokens intends" \
    "--train-step: a per-sequence mean has no one factor, named" -- --ranks 3 --wrap "$DDP" \
    --train-step "$T:per_sequence_mean" --scenario ragged-tokens
grep -q "pattern: no one factor for the micro-batch" "$out" && ok "... its pattern" || bad "... its pattern"
# On equal counts (lm-equal) the right step passes, and a rank-local mean is the intended factor: it passes too.
RT="nosync{fwd bwd fwd bwd} grab fwd bwd grab step zero fwd bwd grab step zero nosync{fwd bwd} fwd bwd grab step zero"
for st in global_tokens rank_local; do
    front 0 "loss normalization (global-tokens): every rank's factor at 18 backwards was the intended one" \
        "--train-step on equal counts: $st passes" -- --ranks 3 --wrap "$DDP" --train-step "$T:$st" --model lm-equal \
        --schedule "$RT"
done
front 2 "its gradient is not the token cross-entropy's times a number" "--train-step: another loss is refused, not judged" \
    -- --ranks 2 --wrap "$DDP" --train-step "$T:not_a_token_loss" --scenario ragged-tokens
front 2 "ran 2 forwards of the model and 1 backward through its output" "--train-step: a step of two forwards" -- \
    --ranks 2 --wrap "$DDP" --train-step "$T:two_forwards" --scenario ragged-tokens
front 2 "--train-step: scenario classic runs mlp:32-64-64-16, which has no token loss" \
    "--train-step on a scenario without a token loss" -- --ranks 2 --wrap "$DDP" --train-step "$T:global_tokens" \
    --scenario classic
front 2 "--train-step with --shard" "--train-step with --shard" -- --ranks 2 --wrap "$DDP" \
    --train-step "$T:global_tokens" --shard zero1
front 2 "train_steps.py has no attribute nothing_here" "--train-step naming nothing" -- --ranks 2 --wrap "$DDP" --train-step "$T:nothing_here"
front 2 "scenario classic runs mlp:32-64-64-16, which has no token loss" "--loss-norm on a scenario without a token loss" \
    -- --ranks 2 --wrap "$DDP" --scenario classic --loss-norm sum
# Without a step of the user's, the battery leaves ragged-tokens out (said why above); asked for, it runs with the
# front end's own step (the intended factor).
front 0 "loss normalization (global-tokens): every rank's factor at 18 backwards was the intended one" \
    "--scenario ragged-tokens with the front end's own step" -- --ranks 3 --wrap "$DDP" --scenario ragged-tokens

# A whole training loop of the user's (--train-loop, tests/python/train_loops.py): it wraps the model, syncs,
# normalizes, steps and zeroes itself over 8 ragged micro-batches configured to accumulate 3; judged against
# windows of 3, 3 and a tail of 2, each synced and stepped. nanoGPT's require_backward_grad_sync loop and a no_sync
# loop pass; a mean of micro-batch means fails at its first backward; over the configured count it is right in
# full windows under micro-batch-mean and caught in the tail (9 micro-batches of 4: a tail of 1); a loop that never
# steps its tail, or steps every micro-batch, fails at the grab where it shows; running fewer batches than given is
# bad input.
L=$here/python/train_loops.py
for n in 2 3; do
    front 0 "verdict: PASS (3 grabs and 4 parameter checks x $n ranks match" "--train-loop: nanoGPT's loop, $n ranks" -- \
        --ranks "$n" --train-loop "$L:nanogpt"
done
grep -q "judged against windows of 3 (and a tail of 2), each synced and stepped" "$out" && ok "... the header says so" ||
    bad "... the header says so"
front 0 "verdict: PASS" "--train-loop: nanoGPT's loop on equal counts" -- --ranks 3 --train-loop "$L:nanogpt" \
    --model lm-equal
front 0 "verdict: PASS" "--train-loop: a no_sync loop zeroing at each window's start" -- --ranks 3 --train-loop "$L:with_no_sync"
front 1 "pattern: the factor is each micro-batch's own token mean over the window's micro-steps" \
    "--train-loop: a mean of micro-batch means" -- --ranks 3 --train-loop "$L:mean_of_means"
front 1 "first divergence: the loss normalization of the backward at op 27, before grab 2 (after fwd+bwd), rank 0, micro-step 1 of its window's 1" \
    "--train-loop: ... under micro-batch-mean right in full windows, caught in the tail" -- --ranks 3 \
    --train-loop "$L:mean_of_means" --loss-norm micro-batch-mean --accumulation 4 --micro-batches 9
grep -q "pattern: the factor is 1 / (A x this micro-batch's tokens), A the configured accumulation count" "$out" &&
    ok "... named" || bad "... named"
front 1 "first divergence: grab 2 (after fwd+bwd (2 acc)), rank 0, parameter wte.weight, element 0: expected .*, actual 0," \
    "--train-loop: a tail window never synced nor stepped" -- --ranks 3 --train-loop "$L:tail_dropped"
grep -q "pattern: its gradient is this rank's own local sum since zero_grad: never reduced" "$out" && ok "... named" ||
    bad "... named"
front 1 "pattern: its gradient is the average over ranks of the last micro-step alone: the window's earlier micro-steps dropped" \
    "--train-loop: a step after every micro-batch" -- --ranks 3 --train-loop "$L:step_every_micro_batch"
front 2 "returned after 7 forwards of the model; it was given 8 micro-batches" "--train-loop: a batch left out" -- \
    --ranks 2 --train-loop "$L:skips_a_batch"
front 2 "--schedule, --scenario and another --model are not for a loop" "--train-loop with --schedule" -- --ranks 2 \
    --train-loop "$L:nanogpt" --schedule "fwd bwd grab"
front 2 "--accumulation 0: 1 to 64" "--train-loop: --accumulation 0" -- --ranks 2 --train-loop "$L:nanogpt" --accumulation 0
front 2 "--train-step with --train-loop: the loop runs its own steps" "--train-loop with --train-step" -- --ranks 2 \
    --train-loop "$L:nanogpt" --train-step "$T:global_tokens"
front 2 "--wrap MODULE:FUNC (or --train-loop MODULE:FUNC): nothing to check" "neither --wrap nor --train-loop" -- --ranks 2

fi # the semantics
# A deadlock and a hang: exit 3, the rank named, no process left. No wall-clock limit here (a loaded machine
# starts four Pythons slowly): the message says which rule fired, and the watchdog is far away.
before=$(ranks_left)
front 3 "deadlock: rank 1 finished scenario classic while ranks 0, 2 wait" "rank 1 skips one allreduce: a deadlock" -- \
    --ranks 3 --wrap "$W:skips_one_allreduce" --scenario classic --timeout 600
grep -q "watchdog" "$out" "$err" && bad "... the deadlock rule fired, not the watchdog" ||
    ok "... the deadlock rule fired, not the watchdog"
front 3 "watchdog: no rank progressed for 3 s: .*rank 1 op 10 (fwd)" "rank 1 hangs in a forward: the watchdog" -- \
    --ranks 3 --wrap "$W:sleeps_forever" --scenario classic --timeout 3
# A training loop of its own (loop.py) shows the supervisor where it is in the schedule: its hang is named there.
front 3 "watchdog: no rank progressed for 3 s: .*rank 1 op 12 (exit)" "a training loop of its own that hangs: the watchdog names the op" -- \
    --ranks 3 --wrap "$W:loop_hangs" --schedule "3*( nosync{fwd bwd grab} fwd bwd grab )" --timeout 3
# wrap() takes 6 s, over the 3 s timeout, on a schedule whose ops take milliseconds: a watchdog that counted
# the ranks' setup would fire.
front 0 "verdict: PASS" "the watchdog starts after the ranks have set up (a wrap() longer than --timeout)" -- \
    --ranks 2 --wrap "$W:slow_wrap" --schedule "fwd bwd grab" --timeout 3
ranks_gone() { [ "$(ranks_left)" -le "$before" ]; }
wait_until 30 ranks_gone
[ "$(ranks_left)" -le "$before" ] && ok "no rank process left" || bad "rank processes left: $(pgrep -fa -- "$front_end_processes")"

# A rank that dies inside the wrapper is named first, how it died and where; then what that did to its peer.
front 3 "rank 1 was killed by signal 9 (SIGKILL) in op .*; then rank 0 failed" \
    "rank 1 killed inside the wrapper: its death first, then its peer's consequence" -- \
    --ranks 2 --wrap "$W:dies_on_rank1" --scenario classic

# Whatever a wrap() started ends with its rank: each rank leads a process group, ended with the run.
DDPSIM_TEST_CHILD_PIDS=$tmp/children
export DDPSIM_TEST_CHILD_PIDS
: >"$DDPSIM_TEST_CHILD_PIDS"
front 0 "verdict: PASS" "a wrap() that starts a child process passes" -- --ranks 2 --wrap "$W:forks_a_child" --scenario classic
children_gone() { for c in $(cat "$DDPSIM_TEST_CHILD_PIDS"); do kill -0 "$c" 2>/dev/null && return 1; done; return 0; }
if [ "$(wc -l <"$DDPSIM_TEST_CHILD_PIDS")" -eq 2 ] && wait_until 30 children_gone; then
    ok "... and its children end with the run"
else
    bad "... its children outlive the run: $(cat "$DDPSIM_TEST_CHILD_PIDS" | tr '\n' ' ')"
    kill $(cat "$DDPSIM_TEST_CHILD_PIDS") 2>/dev/null
fi

# SIGTERM, SIGINT and SIGKILL to the front end while its ranks are up (starting, or in wrap()): every rank
# stopped; for the first two exit 143/130 with one line and no traceback, and nothing left (recording,
# rendezvous store); after SIGKILL the ranks die with it and the next run removes what it left, saying so.
# A background job starts with SIGINT ignored, which the front end honours (the shell's convention for
# background jobs); the launcher below gives it SIGINT's default, as a terminal's foreground job has it.
ranks_up() { [ "$(ranks_left)" -ge $((before + 3)) ]; }  # the launcher and its two ranks
stores() { ls "$TMPDIR" 2>/dev/null | grep -c '^ddpsim_torch-store-'; }
saved_tmpdir=${TMPDIR-}
TMPDIR=$tmp/tmpdir
export TMPDIR
mkdir -p "$TMPDIR"
for sig in TERM INT KILL; do
    "$py" -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.executable, [sys.executable] + sys.argv[1:])' \
        -m ddpsim_torch --ranks 2 --wrap "$W:slow_forever_wrap" --scenario classic >"$out" 2>"$err" &
    pid=$!
    wait_until 120 ranks_up || echo "python.sh: the ranks did not come up" >&2
    kill -s "$sig" "$pid"
    wait "$pid"
    got=$?
    want=$(case $sig in TERM) echo 143 ;; INT) echo 130 ;; KILL) echo 137 ;; esac)
    wait_until 30 ranks_gone
    if [ "$got" -eq "$want" ] && ranks_gone; then ok "SIG$sig to the front end: exit $got, every rank gone"
    else bad "SIG$sig to the front end: exit $got (want $want), $(ranks_left) rank processes"; fi
    [ "$sig" = KILL ] && break
    if [ "$(grep -c . "$err")" -eq 1 ] && grep -q "interrupted by signal" "$err" && ! grep -q Traceback "$err" &&
        [ "$(scratch)" -eq "$scratch_before" ] && [ "$(stores)" -eq 0 ]; then
        ok "... one line, no traceback, no recording or store left"
    else
        bad "... after SIG$sig: $(scratch) recordings, $(stores) stores left"
    fi
done
if [ "$(scratch)" -gt "$scratch_before" ]; then ok "... SIGKILL leaves its recording"; else bad "... SIGKILL left no recording to sweep"; fi
front 0 "removed 2 leftovers of runs whose launcher was killed" "the next run removes the killed run's recording and store, and says so" -- \
    --ranks 2 --wrap "$DDP" --scenario classic
[ "$(scratch)" -eq "$scratch_before" ] && [ "$(stores)" -eq 0 ] && ok "... none left" || bad "... $(scratch) recordings, $(stores) stores left"
if [ -n "$saved_tmpdir" ]; then TMPDIR=$saved_tmpdir; else unset TMPDIR; fi

# The deadlock rule never calls a starved rank (runnable, a few percent of a core) deadlocked.
expect_cmd 0 "idle_check: a starved rank is not idle, a blocked one is" "a rank starved by busy loops is not idle" -- \
    "$py" "$here/python/idle_check.py"

# Bad input: exit 2, naming what is wrong.
front 2 "cannot import nosuch" "a --wrap that cannot be imported" -- --wrap nosuch.module:wrap --scenario classic
front 2 "not_a_function is a int, not callable" "a --wrap that is not callable" -- --wrap "$W:not_a_function" --scenario classic
front 2 "has no attribute nope" "a --wrap that names nothing" -- --wrap "$W:nope" --scenario classic
front 2 "without no_sync()" "a wrapper without no_sync" -- --wrap "$W:no_no_sync" --scenario classic
front 2 "parameters differ across ranks at the start: embed.weight on rank 1" "a user model built differently per rank" -- \
    --ranks 2 --wrap "$DDP" --model "$M:build_per_rank" --data "$M:batch" --scenario classic
front 2 "give --data" "a user model without --data" -- --wrap "$DDP" --model "$M:build"
front 2 "unbalanced bracket" "a schedule error" -- --wrap "$DDP" --schedule "fwd grab bwd )"
front 2 "no scenario 'nope'" "an unknown scenario" -- --wrap "$DDP" --scenario nope
front 2 "go with a user model" "--data with ddpsim's model" -- --wrap "$DDP" --model attn --data "$M:batch"
front 2 "cannot find the ddpsim program" "no ddpsim" -- --wrap "$DDP" --ddpsim "$tmp/missing/ddpsim" --scenario classic
: >"$tmp/afile"
front 2 "--keep $tmp/afile: exists and is not a directory" "--keep naming a file" -- --wrap "$DDP" --scenario classic --keep "$tmp/afile"
front 2 "only the last component is created" "--keep under a missing directory" -- --wrap "$DDP" --scenario classic --keep "$tmp/missing/k"
[ ! -e "$tmp/missing" ] && ok "... nothing created" || bad "--keep created $tmp/missing"
front 2 "chooses ddpsim's model itself: give it without --model mlp:0-1" "--model with --scenario is refused, not ignored" -- \
    --wrap "$DDP" --model mlp:0-1 --scenario classic

[ "$(scratch)" -eq "$scratch_before" ] && ok "no recording left behind (in the scratch directory)" ||
    bad "recordings left behind: $(ls "$DDPSIM_TORCH_SCRATCH")"

# The pytest entry point, and the ranks torchrun would give (RANK, WORLD_SIZE, MASTER_ADDR: env://).
if (cd "$here/python" && "$py" api_check.py) >"$out" 2>"$err"; then ok "check() from a test: Result fields"; else bad "check() from a test: Result fields"; fi
# A free port from the kernel; taken by someone else before rank 0 binds it, the trio runs again on another.
for attempt in 1 2 3; do
    port=$("$py" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
    for r in 0 1 2; do
        RANK=$r LOCAL_RANK=$r WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
            "$py" -m ddpsim_torch --wrap "$W:thunder_sync_on_exit" --scenario classic >"$tmp/tr$r" 2>&1 &
    done
    wait
    grep -qi "address already in use" "$tmp/tr0" "$tmp/tr1" "$tmp/tr2" || break
done
if grep -q "first divergence: grab 0 (after no_sync fwd+bwd)" "$tmp/tr0"; then ok "as torchrun's ranks (env://)"; else
    bad "as torchrun's ranks (env://)"; sed 's/^/  rank 0: /' "$tmp/tr0"; fi

finish
