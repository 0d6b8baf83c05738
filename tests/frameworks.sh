#!/bin/sh
# frameworks.sh - the frameworks people drive DDP through, each through its own API, checked by the Python front
# end (python3 -m ddpsim_torch --wrap) under the torch 2.x environments `make venv` makes (tests/venv.sh):
#  - Hugging Face Accelerate 1.15 (torch 2.15): accelerator.no_sync passes the battery; accelerator.accumulate
#    with gradient_accumulation_steps=4 syncs every 4th micro-step as a window of 4 should; told 3 while the
#    trainer accumulates 4 (a bug planted through the public API) it fails, named;
#  - lightning-thunder 0.2.6 (torch 2.9; the newest release, without PR #2255): thunder.distributed.ddp fails at
#    the first grab after a no_sync window, the sync-on-exit of thunder issue #1670, and plain torch DDP, run
#    beside it without ddpsim (tests/python/frameworks/compare_with_ddp.py), shows the same difference there;
#  - Lightning Fabric 2.6.6, DeepSpeed 0.19.8 (ZeRO stage 0), fairscale 0.4.13 (ShardedDataParallel with OSS)
#    and torch's own FSDP2 (fully_shard, and HSDP on a 2-D mesh), below.
#  - a training step of the user's on the token model (--train-step), its count all-reduce not counted as DDP's;
#  - whole training loops (--train-loop): Accelerate's accumulate(), Lightning's Trainer with
#    accumulate_grad_batches, transformers 5.25.0's Trainer with gradient_accumulation_steps, nanoGPT's loop.
# The adapters of tests/python/frameworks/ only translate the interface. Skips (77) without the environments.
DDPSIM=${DDPSIM:-./sim/ddpsim}
. "$(dirname "$0")/testlib.sh"
here=$(cd "$(dirname "$0")" && pwd)
for v in "${TORCH2_PYTHON:-}" "${THUNDER_PYTHON:-}"; do
    if [ -z "$v" ] || ! [ -x "$v" ]; then
        echo "SKIP: no framework environment (${v:-TORCH2_PYTHON or THUNDER_PYTHON unset}): run 'make venv' first"
        exit 77
    fi
done
PYTHONPATH=$here/../python${PYTHONPATH:+:$PYTHONPATH}
DDPSIM=$(cd "$(dirname "$DDPSIM")" && pwd)/$(basename "$DDPSIM")
DDPSIM_TORCH_SCRATCH=$(mktemp -d) || exit 99
export PYTHONPATH DDPSIM DDPSIM_TORCH_SCRATCH
servers=""
sockets=$(mktemp -d) || exit 99
trap 'kill $servers 2>/dev/null; rm -rf "$out" "$err" "$DDPSIM_TORCH_SCRATCH" "$sockets"' EXIT
F=$here/python/frameworks
# Each environment's front-end runs are forks of a server that imported its torch once (tests/python/front_server.py;
# the framework an adapter names is imported by that run, as the command line would).
start_front_server "$TORCH2_PYTHON" "$sockets/torch2.sock"
servers="$servers $front_server_pid"
start_front_server "$THUNDER_PYTHON" "$sockets/thunder.sock"
servers="$servers $front_server_pid"
# under PYTHON CODE PATTERN DESCRIPTION -- ARGS: PYTHON -m ddpsim_torch ARGS, through PYTHON's front server
under() {
    py=$1 code=$2 pattern=$3 what=$4
    shift 5
    sock=$sockets/torch2.sock
    [ "$py" = "$THUNDER_PYTHON" ] && sock=$sockets/thunder.sock
    expect_cmd "$code" "$pattern" "$what" -- "$py" "$here/python/front_server.py" run "$sock" "$@"
}
for py in "$TORCH2_PYTHON" "$THUNDER_PYTHON"; do
    echo "environment $py: $("$py" -c 'import torch; print("torch", torch.__version__)')"
done

# Accelerate: its DDP is torch's, and its no_sync is DDP's: the battery passes (join is Accelerate's
# join_uneven_inputs, which takes no divide_by_initial_world_size: the adapter leaves it out, and the uneven
# scenarios say so).
A=$F/accelerate_ddp.py
"$TORCH2_PYTHON" -c 'import accelerate; print("accelerate", accelerate.__version__)'
under "$TORCH2_PYTHON" 0 "verdict: PASS (21 of 21 scenarios; not run, the header says why: uneven, uneven-divide, ragged-tokens)" \
    "accelerate: accelerator.no_sync passes the battery, 3 ranks" -- --ranks 3 --wrap "$A:no_sync"
grep -q "# ddpsim_torch .*: torch 2.15" "$out" "$err" && ok "... the header names the torch" || bad "... the header names the torch"
S="3*( 3*( nosync{fwd bwd} grab ) fwd bwd grab step zero )"
under "$TORCH2_PYTHON" 0 "verdict: PASS (12 grabs and 4 parameter checks x 3 ranks match, order)" \
    "accelerate: accelerator.accumulate, gradient_accumulation_steps=4, windows of 4" -- --ranks 3 --wrap "$A:accumulate_4" --schedule "$S"
under "$TORCH2_PYTHON" 1 "first divergence: grab 2 (after no_sync fwd+bwd (3 acc)), rank 0, parameter 0.weight" \
    "accelerate: told 3 accumulation steps while the trainer accumulates 4 (planted)" -- --ranks 3 --wrap "$A:accumulate_3" --schedule "$S"
expect_cmd 0 "grab 1: max |no_sync - torch DDP| = 0$" "accelerate: the same gradients as torch DDP, without ddpsim" -- \
    "$TORCH2_PYTHON" "$F/compare_with_ddp.py" "$A:no_sync"

# thunder 0.2.6: the bug ddpsim began with, in the release people install.
T=$F/thunder_ddp.py
"$THUNDER_PYTHON" -c 'import thunder; print("lightning-thunder", thunder.__version__)' 2>/dev/null
under "$THUNDER_PYTHON" 1 "first divergence: grab 0 (after no_sync fwd+bwd), rank 0, parameter 0.weight" \
    "thunder 0.2.6: thunder.distributed.ddp syncs on no_sync's exit, 2 ranks" -- --ranks 2 --wrap "$T:ddp" --scenario classic
under "$THUNDER_PYTHON" 0 "verdict: PASS" "thunder 0.2.6: ten syncing micro-steps in a row pass (no no_sync)" -- \
    --ranks 2 --wrap "$T:ddp" --scenario window-1
expect_cmd 0 "grab 0: max |ddp - torch DDP| = [0-9.]*[1-9]" \
    "thunder 0.2.6 differs from torch DDP after the no_sync micro-step, without ddpsim" -- \
    "$THUNDER_PYTHON" "$F/compare_with_ddp.py" "$T:ddp"
grep "max |" "$out"

# Lightning Fabric's DDP strategy: fabric.no_backward_sync passes the battery; the flag inverted through the
# public API (planted) syncs inside the window and fails at its first grab.
L=$F/fabric_ddp.py
"$TORCH2_PYTHON" -c 'import lightning; print("lightning", lightning.__version__)'
under "$TORCH2_PYTHON" 0 "verdict: PASS (21 of 21 scenarios; not run, the header says why: uneven, uneven-divide, ragged-tokens)" \
    "fabric: no_backward_sync passes the battery, 3 ranks" -- --ranks 3 --wrap "$L:no_backward_sync"
under "$TORCH2_PYTHON" 1 "first divergence: grab 0 (after no_sync fwd+bwd), rank 0, parameter 0.weight" \
    "fabric: no_backward_sync(enabled=...) inverted (planted)" -- --ranks 3 --wrap "$L:enabled_inverted" --scenario classic

# PyTorch Lightning's own loop, Trainer.fit with accumulate_grad_batches=4 (the front end's loop mode: the Trainer
# decides when it syncs, steps and zeroes; its hooks report). Lightning zeroes in a window's first micro-batch,
# between its forward and its backward, and divides each loss by 4 (lightning_trainer.py says where). It passes,
# bitwise at 2 ranks; a DDPStrategy whose block_backward_sync does nothing (planted) syncs inside the window.
LT=$F/lightning_trainer.py
LS="3*( nosync{fwd zero bwd grab} 2*( nosync{fwd bwd grab} ) fwd bwd grab step )"
under "$TORCH2_PYTHON" 0 "verdict: PASS (12 grabs and 4 parameter checks x 3 ranks match, order)" \
    "lightning: Trainer.fit, accumulate_grad_batches=4, 3 ranks" -- --ranks 3 --wrap "$LT:accumulate_4" --schedule "$LS"
under "$TORCH2_PYTHON" 0 "verdict: PASS (12 grabs and 4 parameter checks x 2 ranks match, bitwise)" \
    "lightning: Trainer.fit, accumulate_grad_batches=4, bitwise at 2 ranks" -- --ranks 2 --wrap "$LT:accumulate_4" --schedule "$LS"
under "$TORCH2_PYTHON" 1 "pattern: its gradient is the average over ranks of the local sum, where DDP's is the local sum" \
    "lightning: a strategy whose block_backward_sync does nothing (planted) syncs in the window" -- \
    --ranks 3 --wrap "$LT:sync_every_microstep" --schedule "$LS"
grep -q "first divergence: grab 0 (after no_sync fwd+bwd), rank 0, parameter 0.weight" "$out" &&
    ok "... named at grab 0" || bad "... named at grab 0"

# DeepSpeed 0.19.8, ZeRO stage 0, on its CPU accelerator with gloo (built from source with no CUDA op): the sync
# runs in engine.backward (ddpsim_backward). It decides at the backward, not at the forward as DDP: a forward
# inside no_sync whose backward runs outside it syncs (DDP does not), shown without ddpsim too; nested no_sync
# is refused (engine.py: "no_sync context manager reentry is unsupported"); buffers are not broadcast before a
# forward; a parameter no rank used gets a zero .grad where DDP's stays None (find-unused, named by the None
# check). gradient_accumulation_steps=4 in its config while the schedule's windows sync (planted): engine.backward
# divides the loss by 4, and the first grab is a quarter of DDP's.
D=$F/deepspeed_ddp.py
"$TORCH2_PYTHON" -c 'import deepspeed; print("deepspeed", deepspeed.__version__)' 2>/dev/null
# DeepSpeed's communication backend on the CPU builds its shared-memory op with ninja at its first use (a
# minute or more on 2 cores, cached under ~/.cache/torch_extensions): built here, before any run's watchdog, and
# given up after 15 minutes (torch's build waits for as long as another process's lock file is there).
timeout 900 "$TORCH2_PYTHON" -c 'from deepspeed.accelerator import get_accelerator
b = get_accelerator().create_op_builder("ShareMemCommBuilder")
b and b.load()' >/dev/null 2>&1 || echo "deepspeed's shared-memory op did not build here: the runs below build it"
under "$TORCH2_PYTHON" 1 "verdict: FAIL (17 of 21 scenarios pass; FAIL: nosync-edges, find-unused, buffers; FAULT: arming)" \
    "deepspeed ZeRO-0: the battery, 3 ranks" -- --ranks 3 --wrap "$D:zero0"
under "$TORCH2_PYTHON" 0 "verdict: PASS (8 grabs and 5 parameter checks x 2 ranks match, bitwise)" \
    "deepspeed ZeRO-0: classic, 2 ranks, bitwise" -- --ranks 2 --wrap "$D:zero0" --scenario classic
under "$TORCH2_PYTHON" 1 "first divergence: grab 0 (after no_sync fwd, bwd outside), rank 0, parameter 0.weight" \
    "deepspeed ZeRO-0: a no_sync forward's backward outside no_sync syncs" -- --ranks 3 --wrap "$D:zero0" --scenario nosync-edges
expect_cmd 0 "grab 0: max |zero0 - torch DDP| = [0-9.]*[1-9]" \
    "... and differs from torch DDP there, without ddpsim" -- "$TORCH2_PYTHON" "$F/compare_with_ddp.py" "$D:zero0" "nosync{fwd} bwd grab fwd bwd grab"
grep "max |" "$out"
under "$TORCH2_PYTHON" 1 "first divergence: grab 0 (after no_sync fwd+bwd), rank 0, parameter 0.weight, element 0: expected 0.00142035296, actual 0.000355088239" \
    "deepspeed ZeRO-0 told 4 accumulation steps (planted): the loss divided by 4" -- --ranks 3 --wrap "$D:zero0_accumulates_4" --schedule "$S"

# DeepSpeed ZeRO-1 and ZeRO-2 as a training loop of its own (loop mode; deepspeed_ddp.py says how): DeepSpeed
# decides its accumulation boundary (gradient_accumulation_steps=4), ZeRO-2 reduces every micro-step into its
# partitions; grabbed after each window's last backward through safe_get_full_grad, judged by each stage's
# sharded rule: both pass. Told 1 accumulation step while the trainer accumulates 4 (allenai/open-instruct
# PR #1498, planted through the config): every backward is a boundary, only the window's last micro-batch
# survives, and the pattern says so.
DS="3*( 3*( nosync{fwd bwd} ) fwd bwd grab step zero )"
under "$TORCH2_PYTHON" 0 "verdict: PASS (3 grabs and 4 parameter checks x 3 ranks match, order)" \
    "deepspeed ZeRO-1, its own loop, gradient_accumulation_steps=4, 3 ranks" -- --ranks 3 --wrap "$D:zero1_loop" --schedule "$DS"
under "$TORCH2_PYTHON" 0 "verdict: PASS (3 grabs and 4 parameter checks x 3 ranks match, order)" \
    "deepspeed ZeRO-2, its own loop, gradient_accumulation_steps=4, 3 ranks" -- --ranks 3 --wrap "$D:zero2_loop" --schedule "$DS"
grep -q "sharded: zero2 on a 1x3 mesh" "$out" && ok "... judged by ZeRO-2's rule" || bad "... judged by ZeRO-2's rule"
under "$TORCH2_PYTHON" 1 "pattern: its gradient is the average over ranks of the last micro-step alone: the window's earlier micro-steps dropped" \
    "deepspeed ZeRO-2 told 1 accumulation step while the trainer accumulates 4 (open-instruct PR #1498, planted)" -- \
    --ranks 3 --wrap "$D:zero2_told_1_loop" --schedule "$DS"

# fairscale 0.4.13's ShardedDataParallel with OSS: each gradient is reduced to its owner only. Said so
# (ddpsim_grad_shards: OSS's owner of each parameter) and with OSS as the optimizer, the owners' .grad and OSS's
# steps are checked: half the battery passes, bitwise at 2 ranks; the rest is fairscale's semantics, not DDP's:
# it decides at the backward whether to reduce (nosync-edges, arming; torch DDP beside it shows the same), a
# non-owner's .grad is freed after a sync so a second sync without zero_grad loses the first (sync-after-sync,
# bucket-view), it broadcasts the buffers at every forward (buffers), a parameter a rank did not use gets a zero
# .grad where DDP's is None (find-unused). Undeclared, a non-owner's scratch .grad fails, as any DDP-level check
# sees it. zero_grad is the model's: OSS's alone leaves ShardedDataParallel's reduction state, and every window
# after the first went wrong (ddpsim_zero_grad in the adapter).
Z=$F/fairscale_sdp.py
under "$TORCH2_PYTHON" 1 "verdict: FAIL (11 of 20 scenarios pass; FAIL: nosync-edges, arming, sync-after-sync, zero-and-step, bucket-view, find-unused, buffers, ends-in-window, tied)" \
    "fairscale ShardedDataParallel + OSS, sharded: the battery, 3 ranks" -- --ranks 3 --wrap "$Z:sharded"
under "$TORCH2_PYTHON" 0 "verdict: PASS" "... classic, 2 ranks, bitwise" -- --ranks 2 --wrap "$Z:sharded" --scenario classic
expect_cmd 0 "grab 0: max |sharded_undeclared - torch DDP| = [0-9.]*[1-9]" "... a no_sync forward's backward outside syncs, as torch DDP does not" -- \
    "$TORCH2_PYTHON" "$F/compare_with_ddp.py" "$Z:sharded_undeclared" "nosync{fwd} bwd grab"
under "$TORCH2_PYTHON" 1 "first divergence: grab 2 (after fwd+bwd (3 acc)), rank 0, parameter 2.weight" \
    "... undeclared: rank 0's .grad of a parameter it does not own" -- --ranks 3 --wrap "$Z:sharded_undeclared" --scenario classic

# FSDP2 (torch 2.15's fully_shard, on CPU with gloo; tests/python/frameworks/fsdp2.py): each rank's .grad is a
# DTensor shard after a sync, and the front end checks it against the same rows of DDP's; while
# set_requires_gradient_sync(False) is on, the whole local sum on the unsharded parameter (ddpsim_grads). Two
# thirds of the battery passes, bitwise at 2 ranks, and HSDP on a 2 x 2 mesh the same; the rest is FSDP2's
# semantics: the sync flag is read at the backward (nosync-edges, arming; torch DDP beside it differs there), a
# step inside a window has no sharded gradient to apply (zero-and-step, ends-in-window), no buffer broadcast
# (buffers), and a parameter some ranks do not use breaks its reduce-scatter (find-unused: gloo aborts).
# no_sync that does nothing (NVIDIA/cosmos-framework #161, planted) is caught at the first micro-step.
G=$F/fsdp2.py
under "$TORCH2_PYTHON" 1 "verdict: FAIL (14 of 20 scenarios pass; FAIL: nosync-edges, arming, zero-and-step, buffers, ends-in-window; FAULT: find-unused)" \
    "FSDP2 fully_shard: the battery, 3 ranks" -- --ranks 3 --wrap "$G:fsdp2" --timeout 30
# Its gradients do not pass through the hooks of the parameters the wrapper gives (the unsharded copies get them),
# so the front end cannot plant loss-scale's inf: that scenario is not run, and the header says why.
grep -q "loss-scale not run: --fault inf: the wrapper's backward computed no gradient through its parameters' hooks" "$out" "$err" &&
    ok "... loss-scale not run, said why" || bad "... loss-scale not run, said why"
under "$TORCH2_PYTHON" 0 "verdict: PASS (8 grabs and 5 parameter checks x 2 ranks match, bitwise)" "... classic, 2 ranks, bitwise" -- \
    --ranks 2 --wrap "$G:fsdp2" --scenario classic
under "$TORCH2_PYTHON" 0 "verdict: PASS" "... HSDP on a 2 x 2 mesh, 4 ranks" -- --ranks 4 --wrap "$G:hsdp" --scenario classic
under "$TORCH2_PYTHON" 0 "verdict: PASS" "... a window after a sync without zero_grad (the shard plus the local sum)" -- \
    --ranks 3 --wrap "$G:fsdp2" --scenario sync-after-sync
expect_cmd 0 "grab 0: max |fsdp2 - torch DDP| = [0-9.]*[1-9]" "... a no_sync forward's backward outside syncs, as torch DDP does not" -- \
    "$TORCH2_PYTHON" "$F/compare_with_ddp.py" "$G:fsdp2" "nosync{fwd} bwd grab"
under "$TORCH2_PYTHON" 1 "first divergence: grab 0 (after no_sync fwd+bwd), rank 0, parameter 0.weight" \
    "FSDP2 whose no_sync does nothing (cosmos-framework #161, planted): fails at the first micro-step" -- \
    --ranks 3 --wrap "$G:fsdp2_sync_ignored" --scenario classic
# Clipping: torch's clip_grad_norm_ over FSDP2's DTensor gradients reduces their norm over the mesh: every rank's
# coefficient the same bits, within the bound of the reference's exact norm; one that takes each rank's own shards
# (pytorch/pytorch #170862, planted) is caught at the clip.
under "$TORCH2_PYTHON" 0 "# clip: 12 clips over all ranks: every rank's coefficient the same bits" \
    "FSDP2 with torch's clip_grad_norm_ before every step (--clip)" -- --ranks 3 --wrap "$G:fsdp2" --scenario classic --clip 0.01
under "$TORCH2_PYTHON" 1 "the ranks clipped by different norms" \
    "FSDP2 clipping by each rank's own shards (pytorch #170862, planted) is caught at the clip" -- \
    --ranks 3 --wrap "$G:fsdp2_clip_local" --scenario classic --clip 0.01
# HSDP accumulating as PyTorch PRs #125484 / #126166 made it (set_requires_all_reduce(False) alone: a reduce-scatter
# in the shard group at every micro-step, the replica all-reduce deferred to the syncing one), declared hsdp: judged
# by HSDP's rule it passes bitwise at 4 ranks (2 x 2), its reduce-scatters inside the window allowed and counted
# apart; judged as DDP, its .grad inside the window (None: the partial is FSDP2's own) fails.
under "$TORCH2_PYTHON" 0 "verdict: PASS (8 grabs and 5 parameter checks x 4 ranks match, bitwise)" \
    "FSDP2 HSDP with the replica all-reduce deferred, judged by HSDP's rule, bitwise" -- \
    --ranks 4 --wrap "$G:hsdp_deferred" --scenario classic -T bitwise
under "$TORCH2_PYTHON" 1 "verdict: FAIL (14 of 17 scenarios pass; FAIL: nosync-edges, arming, buffers)" \
    "... its battery: FSDP2's own rules fail as above (the sync flag read at the backward, no buffer broadcast)" -- \
    --ranks 4 --wrap "$G:hsdp_deferred" --timeout 60
grep -q "# sharded: hsdp, judged by its rule" "$out" && ok "... the header says so" || bad "... the header says so"
under "$TORCH2_PYTHON" 1 "first divergence: grab 0 (after no_sync fwd+bwd), rank 0, parameter 0.weight: its .grad is None, where DDP's holds a tensor" \
    "... judged as DDP it fails inside the window" -- --ranks 4 --wrap "$G:hsdp_deferred_undeclared" --scenario classic

# FSDP1 (torch 2.15's FullyShardedDataParallel, on CPU with gloo; tests/python/frameworks/fsdp1.py). NO_SHARD keeps
# the module's parameters whole: 16 of the 20 scenarios it runs pass; the others are FSDP1's semantics, not DDP's: its
# no_sync is read at the backward (nosync-edges, arming), a parameter no rank used gets a zero gradient where
# DDP's stays None (find-unused), and it broadcasts no buffers (buffers). Its flat layouts are refused, each
# saying why: the FlatParameter of use_orig_params=False, and with use_orig_params=True the per-rank flat shard.
H=$F/fsdp1.py
under "$TORCH2_PYTHON" 1 "verdict: FAIL (16 of 20 scenarios pass; FAIL: nosync-edges, arming, find-unused, buffers)" \
    "FSDP1 NO_SHARD: the battery, 3 ranks" -- --ranks 3 --wrap "$H:no_shard" --timeout 30
under "$TORCH2_PYTHON" 2 "the wrapper replaced the module's 6 parameters by 1 flat one (_fsdp_wrapped_module._flat_param" \
    "FSDP1's FlatParameter is refused with the reason" -- --ranks 2 --wrap "$H:flat" --scenario classic
under "$TORCH2_PYTHON" 2 "where the model's is ([0-9, ]*): a flat shard of it, as FSDP1 with use_orig_params=True keeps it" \
    "... and with use_orig_params=True its flat shards" -- --ranks 2 --wrap "$H:orig_params" --scenario classic

# A training step of the user's under torch 2.x (--train-step, tests/python/train_steps.py): the step's own
# all_reduce of the window's token count, inside no_sync at the window's first micro-step, is not the wrapper's
# communication (only reductions while autograd runs a backward are counted: counted, it would fail that window);
# a rank-local mean fails at its first backward, named.
T=$here/python/train_steps.py
under "$TORCH2_PYTHON" 0 "all ranks: 9, 0 of them in backwards that do not sync" \
    "--train-step on torch 2.x: global tokens pass, the step's count all-reduce not counted as DDP's" -- \
    --ranks 3 --wrap torch.nn.parallel:DistributedDataParallel --train-step "$T:global_tokens" --scenario ragged-tokens
under "$TORCH2_PYTHON" 1 "rank 0: 42 reductions in a backward that does not sync (op 2)" \
    "... and a wrapper's own reductions in such a backward are still counted (the detector fires)" -- --ranks 3 \
    --wrap "$here/python/wrappers.py:reduces_in_no_sync" --train-step "$T:global_tokens" --scenario ragged-tokens
under "$TORCH2_PYTHON" 1 "pattern: the factor is 1 / this rank's own valid tokens of the window" \
    "--train-step on torch 2.x: a rank-local mean caught, named" -- \
    --ranks 3 --wrap torch.nn.parallel:DistributedDataParallel --train-step "$T:rank_local" --scenario ragged-tokens

# Whole loops (--train-loop): Accelerate's accumulate() recipe over a dataloader it prepared passes (its tail window
# synced and stepped; accelerator.backward's division by the accumulation count multiplied back); the recipe with
# each micro-batch's mean is a mean of means, and under micro-batch-mean right in full windows and caught in the tail
# (the 2024 gradient-accumulation bug); over the plain list Accelerate cannot see the last batch: the tail is never
# stepped. A loop without no_sync syncs every micro-step, counted (torch 2.x).
A=$F/accelerate_ddp.py
L=$here/python/train_loops.py
under "$TORCH2_PYTHON" 0 "verdict: PASS (3 grabs and 4 parameter checks x 3 ranks match" \
    "--train-loop: Accelerate's accumulate() over a prepared dataloader, global tokens" -- --ranks 3 \
    --train-loop "$A:accumulate_loop"
under "$TORCH2_PYTHON" 1 "pattern: the factor is each micro-batch's own token mean over the window's micro-steps" \
    "--train-loop: Accelerate's recipe with mean losses: a mean of means" -- --ranks 3 --train-loop "$A:accumulate_loop_mean"
under "$TORCH2_PYTHON" 1 "first divergence: the loss normalization of the backward at op 24, before grab 2 (after fwd+bwd (2 acc)), rank 0, micro-step 1 of its window's 2" \
    "--train-loop: ... right in full windows under micro-batch-mean, caught in the tail" -- --ranks 3 \
    --train-loop "$A:accumulate_loop_mean" --loss-norm micro-batch-mean
grep -q "pattern: the factor is 1 / (A x this micro-batch's tokens), A the configured accumulation count" "$out" &&
    ok "... named" || bad "... named"
under "$TORCH2_PYTHON" 1 "first divergence: grab 2 (after fwd+bwd (2 acc)), rank 0, parameter wte.weight" \
    "--train-loop: Accelerate over a plain list never steps the tail" -- --ranks 3 --train-loop "$A:accumulate_loop_unprepared"
# Lightning's Trainer.fit with accumulate_grad_batches=3 (it zeroes between a window's first forward and its
# backward, and runs the window's last micro-batch inside optimizer.step's closure): the compensated global-token
# loss passes; each micro-batch's mean is divided by accumulate_grad_batches in the tail too (#19987), caught there.
LT=$F/lightning_trainer.py
under "$TORCH2_PYTHON" 0 "verdict: PASS (3 grabs and 4 parameter checks x 3 ranks match" \
    "--train-loop: Lightning's Trainer, global tokens" -- --ranks 3 --train-loop "$LT:accumulate_loop"
under "$TORCH2_PYTHON" 1 "first divergence: the loss normalization of the backward at op 24, before grab 2 (after fwd+bwd (2 acc)), rank 0, micro-step 1 of its window's 2" \
    "--train-loop: Lightning's Trainer with mean losses, under micro-batch-mean: caught in the tail (#19987)" -- \
    --ranks 3 --train-loop "$LT:accumulate_loop_mean" --loss-norm micro-batch-mean
grep -q "pattern: the factor is 1 / (A x this micro-batch's tokens), A the configured accumulation count" "$out" &&
    ok "... named" || bad "... named"
# transformers' Trainer (5.25.0) with gradient_accumulation_steps=3: a model whose forward takes the loss kwargs
# sums over num_items_in_batch, which the Trainer counts over each update's micro-batches (the tail's own) and
# gathers over the ranks: global tokens, passes (transformers PR #34191's fix). A model returning its mean is
# divided by the update's accumulation steps: a mean of means, caught; under micro-batch-mean it passes, the tail
# divided by its own count (unlike Lightning's, above).
TT=$F/transformers_trainer.py
"$TORCH2_PYTHON" -c 'import transformers; print("transformers", transformers.__version__)'
under "$TORCH2_PYTHON" 0 "verdict: PASS (3 grabs and 4 parameter checks x 3 ranks match" \
    "--train-loop: transformers' Trainer, num_items_in_batch gathered: global tokens" -- --ranks 3 \
    --train-loop "$TT:sum_over_items"
under "$TORCH2_PYTHON" 1 "pattern: the factor is each micro-batch's own token mean over the window's micro-steps" \
    "--train-loop: transformers' Trainer with a mean loss: a mean of means" -- --ranks 3 --train-loop "$TT:mean_loss"
under "$TORCH2_PYTHON" 0 "loss normalization (micro-batch-mean): every rank's factor at 24 backwards was the intended one" \
    "--train-loop: ... which is micro-batch-mean's, the tail divided by its own count" -- --ranks 3 \
    --train-loop "$TT:mean_loss" --loss-norm micro-batch-mean
under "$TORCH2_PYTHON" 0 "all ranks: 9, 0 of them in backwards that do not sync" \
    "--train-loop: nanoGPT's loop, its reductions counted" -- --ranks 3 --train-loop "$L:nanogpt"
under "$TORCH2_PYTHON" 1 "rank 0: 2 reductions in a backward that does not sync (op 2)" \
    "--train-loop: a loop without no_sync syncs every micro-step, counted" -- --ranks 3 --train-loop "$L:syncs_every_micro_step"
finish
