"""DDP wrappers written as their authors wrote them: a correct one in the
functional style of lightning-thunder's (a function that returns a module
with a no_sync() context manager), and the bugs such wrappers really had.
Each is what `python3 -m ddpsim_torch --wrap tests/python/wrappers.py:NAME`
checks; tests/python.sh runs them all and says where each must fail.

The gradients are synchronised the way such wrappers do it: a hook on
every parameter's gradient queues a callback at the end of the backward
(torch.autograd's queue_callback, what DDP's reducer does in C++), and the
callback all-reduces every used parameter's .grad and divides it by the
world size. "Used" follows the torch it runs on, as DDP's
find_unused_parameters does: a gradient in the syncing backward itself
before 2.4, any gradient since zero_grad from 2.4 (PR #124193).
"""
import contextlib
import os
import re
import signal
import subprocess
import sys
import time

import torch
import torch.distributed as dist
from torch import nn

_V = tuple(int(x) for x in re.match(r"(\d+)\.(\d+)", torch.__version__).groups())
USED_IN_WINDOW = _V >= (2, 4)


class HookDDP(nn.Module):
    """The correct wrapper: a forward outside no_sync arms the next backward's sync and a forward inside it
    leaves the arming alone, as PyTorch's DDP (1.13 distributed.py forward calls prepare_for_backward outside
    no_sync only; finalize_backward disarms); a syncing backward averages the accumulated .grad of every
    parameter. no_sync() restores the state it found, so nested contexts work. Buffers (BatchNorm's running
    statistics) come from rank 0 before a forward when the forward before it ran outside no_sync, as DDP's
    broadcast_buffers does (1.13 distributed.py: require_forward_param_sync)."""

    def __init__(self, module):
        super().__init__()
        self.module = module
        self.world = dist.get_world_size()
        self.rank = dist.get_rank()
        self.syncing = False      # no_sync() is not active
        self.sync_this = False    # armed: a forward outside no_sync since the last syncing backward
        self.queued = False
        self.syncs = 0
        self.in_no_sync = False
        self.buffers_next = True  # the next forward takes rank 0's buffers
        self.params = list(self.module.parameters())
        self.seen = set()         # parameters that got a gradient in this backward
        for i, p in enumerate(self.params):
            p.register_hook(self._hook_for(i))

    def _hook_for(self, i):
        def hook(grad):
            self.seen.add(i)
            if self.sync_this and not self.queued:
                self.queued = True
                torch.autograd.Variable._execution_engine.queue_callback(self._after_backward)
            return self.transform(grad)
        return hook

    def transform(self, grad):
        """What a micro-step's gradient becomes before it is accumulated (itself, for a correct wrapper)."""
        return grad

    def _after_backward(self):
        self.queued = False
        self.sync_this = False
        self.sync_grads()

    def used(self):
        """Which parameters this sync reduces: used on some rank (an all-reduce of the flags)."""
        mine = [p.grad is not None if USED_IN_WINDOW else i in self.seen for i, p in enumerate(self.params)]
        flags = torch.tensor(mine, dtype=torch.float32)
        dist.all_reduce(flags)
        return [f > 0 for f in flags.tolist()]

    def sync_grads(self):
        self.syncs += 1
        for p, used in zip(self.params, self.used()):
            if used:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                dist.all_reduce(p.grad)
                self.average(p.grad)

    def average(self, summed):
        summed.div_(self.world)

    def forward(self, *args, **kwargs):
        if self.buffers_next:
            with torch.no_grad():
                for b in self.module.buffers():
                    dist.broadcast(b, 0)
        self.buffers_next = not self.in_no_sync
        self.sync_this = self.sync_this or not self.in_no_sync
        self.seen.clear()
        return self.module(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        outer = self.in_no_sync
        self.in_no_sync = True
        try:
            yield
        finally:
            self.in_no_sync = outer
            self.on_no_sync_exit()

    def on_no_sync_exit(self):
        """Leaving no_sync does nothing more: the next forward outside it decides to sync."""


def ddp_fp16_hook(module, **ddp_options):
    """PyTorch's DDP with its fp16_compress_hook registered by the wrapper itself (the reference must be told:
    --comm-hook fp16)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    ddp = nn.parallel.DistributedDataParallel(module, **ddp_options)
    ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    return ddp


def ddp_bf16_hook(module, **ddp_options):
    """PyTorch's DDP with bf16_compress_hook registered by the wrapper itself (torch 2.x from PyPI takes it on gloo;
    the reference must be told: --comm-hook bf16)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    ddp = nn.parallel.DistributedDataParallel(module, **ddp_options)
    ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
    return ddp


def hook_ddp(module):
    return HookDDP(module)


class SyncOnExit(HookDDP):
    """lightning-thunder before PR #2255 (issue #1670): leaving no_sync all-reduces the gradients accumulated
    inside it, where PyTorch syncs at the next backward outside it."""

    def on_no_sync_exit(self):
        self.sync_grads()


def thunder_sync_on_exit(module):
    return SyncOnExit(module)


class DisarmInNoSync(HookDDP):
    """Each forward decides alone: a forward inside no_sync cancels the sync an earlier forward outside it
    armed (ddpsim's own reference before its issue 16; real DDP syncs `fwd; no_sync{fwd; bwd}`)."""

    def forward(self, *args, **kwargs):
        self.sync_this = not self.in_no_sync
        self.seen.clear()
        return self.module(*args, **kwargs)


def disarm_in_no_sync(module):
    return DisarmInNoSync(module)


class CountsOwnWindow(HookDDP):
    """An engine that counts its own accumulation window, as DeepSpeed's (micro_steps + 1) % gas does, learning
    the window's length from the first one, instead of following no_sync: an epoch's shorter tail window is never
    synced (NVIDIA-NeMo/Automodel PR #2257 dropped that tail)."""

    def __init__(self, module):
        super().__init__(module)
        self.window, self.since_sync = 0, 0

    def forward(self, *args, **kwargs):
        self.seen.clear()
        self.since_sync += 1
        if self.window:
            self.sync_this = self.since_sync >= self.window
        else:
            self.sync_this = self.sync_this or not self.in_no_sync
        return self.module(*args, **kwargs)

    def _after_backward(self):
        if not self.window:
            self.window = self.since_sync
        self.since_sync = 0
        super()._after_backward()


def counts_own_window(module):
    return CountsOwnWindow(module)


class SyncEveryMicrostep(HookDDP):
    """no_sync is accepted and ignored: every backward syncs."""

    def forward(self, *args, **kwargs):
        self.seen.clear()
        self.sync_this = True  # whatever no_sync says
        return self.module(*args, **kwargs)


def sync_every_microstep(module):
    return SyncEveryMicrostep(module)


class SumNotAverage(HookDDP):
    """The all-reduce sums and nobody divides by the world size."""

    def average(self, summed):
        pass


def sum_not_average(module):
    return SumNotAverage(module)


class LastMicrobatchOnly(HookDDP):
    """A syncing backward averages only its own micro-batch's gradient (in the gradient hook, before it is
    accumulated); the micro-batches accumulated under no_sync stay each rank's own."""

    def transform(self, grad):
        if not self.sync_this:
            return grad
        g = grad.clone()
        dist.all_reduce(g)
        return g.div_(self.world)

    def sync_grads(self):
        pass


def last_microbatch_only(module):
    return LastMicrobatchOnly(module)


class SkipsOneAllreduce(HookDDP):
    """Rank 1 skips the all-reduces of its second sync: the others wait for it."""

    def sync_grads(self):
        if self.rank == 1 and self.syncs == 1:
            self.syncs += 1
            return
        super().sync_grads()


def skips_one_allreduce(module):
    return SkipsOneAllreduce(module)


class SleepsForever(HookDDP):
    """Rank 1 stops in its third forward and never comes back: every rank is stuck, none finishes (the
    watchdog's case, not a deadlock one rank's end shows)."""

    def forward(self, *args, **kwargs):
        self.forwards = getattr(self, "forwards", 0) + 1
        if self.rank == 1 and self.forwards == 3:
            time.sleep(3600)
        return super().forward(*args, **kwargs)


def sleeps_forever(module):
    return SleepsForever(module)


def slow_wrap(module, **ddp_options):
    """Real DDP, after 6 s of setting up (a framework that compiles or shards at wrap time): longer than the
    watchdog's --timeout, which counts from the ranks' first op."""
    time.sleep(6)
    return nn.parallel.DistributedDataParallel(module, **ddp_options)


def no_no_sync(module):
    """Returns the module itself: no no_sync(), so nothing to check accumulation against (bad input)."""
    return module


not_a_function = 42


def ddp_no_broadcast_buffers(module, **ddp_options):
    """PyTorch's DDP with broadcast_buffers=False: each rank's running statistics are its own (the buffers
    scenario must fail it, naming the buffer)."""
    return nn.parallel.DistributedDataParallel(module, broadcast_buffers=False, **ddp_options)


def ddp_static_graph(module, **ddp_options):
    """PyTorch's DDP with static_graph=True."""
    return nn.parallel.DistributedDataParallel(module, static_graph=True, **ddp_options)


class _JoinDividesByRunning(nn.parallel.DistributedDataParallel):
    """PyTorch's DDP whose join() ignores divide_by_initial_world_size and divides by the ranks still running,
    as join's first design did (PR #42577)."""

    def join(self, divide_by_initial_world_size=True, enable=True, throw_on_early_termination=False):
        return super().join(False, enable, throw_on_early_termination)


def ddp_join_divides_by_running(module, **ddp_options):
    return _JoinDividesByRunning(module, **ddp_options)


class DiesOnRank1(nn.parallel.DistributedDataParallel):
    """Real DDP whose rank 1 is killed (SIGKILL) at its third forward: its peers' next allreduce fails
    ("Connection closed by peer"), and the report must name rank 1's death first, then its consequence."""

    def forward(self, *args, **kwargs):
        self.forwards = getattr(self, "forwards", 0) + 1
        if dist.get_rank() == 1 and self.forwards == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().forward(*args, **kwargs)


def dies_on_rank1(module):
    return DiesOnRank1(module)


def forks_a_child(module, **ddp_options):
    """Real DDP, whose wrap() starts a child process that would outlive the run (a framework's helper, a data
    loader worker) and writes its pid to $DDPSIM_TEST_CHILD_PIDS: the launcher must end it with the rank."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(os.environ["DDPSIM_TEST_CHILD_PIDS"], "a") as f:
        f.write("%d\n" % child.pid)
    return nn.parallel.DistributedDataParallel(module, **ddp_options)


def slow_forever_wrap(module, **ddp_options):
    """A wrap() that never returns (sleeping): a run to interrupt while its ranks are up."""
    time.sleep(3600)


def compiled_ddp(module, **ddp_options):
    """torch.compile over PyTorch's DDP (torch 2.x): dynamo's DDPOptimizer splits the graph at bucket boundaries
    so each bucket's allreduce can start inside the compiled backward (torch/_dynamo/backends/distributed.py)."""
    return torch.compile(nn.parallel.DistributedDataParallel(module, **ddp_options))


def compiled_ddp_eager(module, **ddp_options):
    """The same through dynamo and AOTAutograd with eager kernels (backend="aot_eager"): the graph capture and
    DDPOptimizer's split without inductor's generated code."""
    return torch.compile(nn.parallel.DistributedDataParallel(module, **ddp_options), backend="aot_eager")


class OtherRuleDDP(HookDDP):
    """The correct wrapper, with the other torch's find_unused rule (a wrapper written for 2.4 run on 1.13, or the
    reverse): what --find-unused-rule is for."""

    def used(self):
        mine = [p.grad is not None if not USED_IN_WINDOW else i in self.seen for i, p in enumerate(self.params)]
        flags = torch.tensor(mine, dtype=torch.float32)
        dist.all_reduce(flags)
        return [f > 0 for f in flags.tolist()]


def other_rule_ddp(module):
    return OtherRuleDDP(module)


class ReducesInNoSync(HookDDP):
    """no_sync keeps only the result from being written back: every backward all-reduces (a copy of) the
    gradients and one that does not sync drops the sum. The numbers are DDP's; the traffic is a sync per
    micro-step (NVIDIA/cosmos-framework #161: a no-sync context that did nothing for the communication)."""

    def _hook_for(self, i):
        inner = super()._hook_for(i)

        def hook(grad):
            if not self.sync_this and not self.queued:
                self.queued = True
                torch.autograd.Variable._execution_engine.queue_callback(self._drop_reduction)
            return inner(grad)
        return hook

    def _drop_reduction(self):
        self.queued = False
        for p in self.params:
            if p.grad is not None:
                dist.all_reduce(p.grad.clone())


def reduces_in_no_sync(module):
    return ReducesInNoSync(module)


# Training loops that own their iteration (the front end's loop mode, ddpsim_loop: python/ddpsim_torch/loop.py):
# the README's hand-written accumulation loop over torch's DDP (windows of K micro-batches, the first K - 1 in
# no_sync, then step and zero_grad; for K = 2 over three windows the schedule is
# "3*( nosync{fwd bwd grab} fwd bwd grab step zero )"), with the mistakes such loops make.
def _accumulate(loop, k=2, zero=True, step_every=False, stop_after=None):
    ddp = nn.parallel.DistributedDataParallel(loop.module)
    opt = loop.optimizer(ddp.parameters())
    for i, (inputs, targets) in enumerate(loop.batches):
        if stop_after is not None and i == stop_after:
            return
        boundary = (i + 1) % k == 0
        with contextlib.nullcontext() if boundary else ddp.no_sync():
            loop.loss(ddp(*inputs), targets).backward()
        loop.after_backward()
        if boundary or step_every:
            opt.step()
            loop.after_step()
            if zero:
                opt.zero_grad()


def loop_forgets_zero_grad(loop):
    """A bug: the loop never zeroes, so each window adds onto the last one's gradients."""
    _accumulate(loop, zero=False)


def loop_steps_every_microstep(loop):
    """Not the schedule's loop: it steps after every micro-batch (refused: the events do not fit)."""
    _accumulate(loop, step_every=True)


def loop_stops_early(loop):
    """Not the schedule's loop: it stops after three micro-batches (refused)."""
    _accumulate(loop, stop_after=3)


def loop_grads_misnamed(loop):
    """A loop that hands its gradients by a name the model does not have (refused, naming it)."""
    ddp = nn.parallel.DistributedDataParallel(loop.module)
    for inputs, targets in loop.batches:
        loop.loss(ddp(*inputs), targets).backward()
        loop.after_backward(grads=lambda: {"module." + n: p.grad for n, p in loop.module.named_parameters()})


def loop_hangs(loop):
    """Rank 1's loop stops for good after its third backward: the watchdog names where, in the schedule's ops."""
    ddp = nn.parallel.DistributedDataParallel(loop.module)
    for i, (inputs, targets) in enumerate(loop.batches):
        with ddp.no_sync() if i % 2 == 0 else contextlib.nullcontext():
            loop.loss(ddp(*inputs), targets).backward()
        loop.after_backward()
        if loop.rank == 1 and i == 2:
            time.sleep(3600)


def loop_own_sgd(loop):
    """A loop that builds torch.optim.SGD itself instead of loop.optimizer(): under AdamW its step is not the run's."""
    ddp = nn.parallel.DistributedDataParallel(loop.module)
    opt = torch.optim.SGD(ddp.parameters(), lr=loop.lr)
    for inputs, targets in loop.batches:
        loop.loss(ddp(*inputs), targets).backward()
        loop.after_backward()
        opt.step()
        loop.after_step()
        opt.zero_grad()


for _f in (loop_hangs, loop_grads_misnamed, loop_forgets_zero_grad, loop_steps_every_microstep, loop_stops_early,
           loop_own_sgd):
    _f.ddpsim_loop = True


class PartitionNormClip(torch.nn.parallel.DistributedDataParallel):
    """torch's DDP whose clip_grad_norm_ takes the norm of this rank's partition of the parameters alone (a ZeRO-1
    optimizer's own slice: parameter i belongs to rank i mod N) and never all-reduces it, then clips every .grad by
    it: RLinf PR #1558's mechanism (get_grad_norm skipped its all_reduce), planted. Each rank clips by its own
    coefficient."""

    def clip_grad_norm_(self, max_norm, norm_type=2.0):
        mine = [p.grad for i, p in enumerate(self.parameters())
                if p.grad is not None and i % dist.get_world_size() == dist.get_rank()]
        with torch.no_grad():
            total = torch.norm(torch.stack([torch.norm(g, norm_type) for g in mine]), norm_type)
            coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
            for p in self.parameters():
                if p.grad is not None:
                    p.grad.mul_(coef)
        return total


def partition_norm_clip(module, **ddp_options):
    return PartitionNormClip(module, **ddp_options)


def own_adamw(module, **ddp_options):
    """torch's DDP with an AdamW of its own, whatever the run's step: under an SGD run it is not run, said why."""
    ddp = torch.nn.parallel.DistributedDataParallel(module, **ddp_options)
    return ddp, torch.optim.AdamW(ddp.parameters(), lr=0.1)


# ---- loss scaling: a wrapper's own GradScaler (ddpsim_grad_scaler), each with a planted bug ----

def _scaler_base():
    from ddpsim_torch.scaling import CpuGradScaler
    return CpuGradScaler


class _FoundInfAlways:
    """A GradScaler whose unscale_ reports an inf or NaN at every step: no step is ever taken, the scale backs off
    each time. Megatron-LM #663's symptom (found_inf_flag always true with --overlap-param-gather and
    --overlap-grad-reduce), planted."""

    def __new__(cls, **kw):
        base = _scaler_base()

        class Scaler(base):
            def unscale_(self, optimizer):
                base.unscale_(self, optimizer)
                self.found[id(optimizer)] = True
        return Scaler(**kw)


class _NeverScaled:
    """A GradScaler whose scale() returns the loss as it is, while its unscale_ divides by the scale it says it
    applied: the gradients end 1/S of DDP's. DeepSpeed PR #7839's bug 1 (unscaled by a scale backward never
    applied), planted."""

    def __new__(cls, **kw):
        base = _scaler_base()

        class Scaler(base):
            def scale(self, loss):
                return loss
        return Scaler(**kw)


class ScaledDDP(nn.parallel.DistributedDataParallel):
    scaler_class = None

    def ddpsim_grad_scaler(self, **kw):
        return self.scaler_class(**kw)


def ddp_found_inf_always(module, **ddp_options):
    w = ScaledDDP(module, **ddp_options)
    w.scaler_class = _FoundInfAlways
    return w


def ddp_never_scaled(module, **ddp_options):
    w = ScaledDDP(module, **ddp_options)
    w.scaler_class = _NeverScaled
    return w


def ddp_cpu_scaler(module, **ddp_options):
    """torch's DDP with the front end's own GradScaler arithmetic as the wrapper's (the control for the two above)."""
    w = ScaledDDP(module, **ddp_options)
    w.scaler_class = _scaler_base()
    return w
