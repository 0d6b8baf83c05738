"""Sharded wrappers for the front end's tests, on torch 1.13's gloo (which has reduce and broadcast but no
reduce_scatter): gradients are reduced to the rank that owns each parameter, as fairscale's
ShardedDataParallel with its OSS optimizer does (fairscale/nn/data_parallel/sharded_ddp.py: a reduce to the
owner, the other ranks' .grad freed), and the owner steps it and broadcasts the result. Each wrapped module
says what its rank holds (ddpsim_grad_shards), and wrap returns (module, optimizer).

  sharded                     correct (where every window starts from zero_grad, DDP's values)
  sharded_undeclared          the same without ddpsim_grad_shards(): a non-owner's .grad is None
  sharded_momentum            sharded, its optimizer torch's SGD with the run's momentum (each owner's buffers)
  sharded_momentum_dropped    (planted) the momentum declared in its optimizer's defaults and never applied
  zero_optimizer              DDP with ZeroRedundancyOptimizer over the run's step (its optimizer argument)
  adamw_decay_dropped         (planted) DDP with an AdamW that declares the run's weight decay and skips it
  sharded_every_backward      every backward is a boundary and the owner's accumulator is reset, only the
                              last micro-batch survives (allenai/open-instruct PR #1498: DeepSpeed told
                              gradient_accumulation_steps=1 while the trainer accumulates)
  sharded_remainder_unreduced the last parameter, the remainder bucket, is never reduced (DeepSpeed #4879)
  zero2                       ZeRO-2's accumulation (DeepSpeed stage_1_and_2.py): every backward, synced or
                              not, reduces each gradient to its owner, which adds it to its partition (a copy
                              at the window's first micro-step), and frees .grad; declared as zero2
                              (ddpsim_shard), so ddpsim check judges it by ZeRO-2's rule; its loss scaler
                              (ddpsim_grad_scaler) unscales the partitions and all-reduces its finding
  zero2_undeclared            the same, judged by DDP's rule: the owner holds reduced sums where DDP holds the
                              local one
  zero2_boundary_reset        (planted) the partition is reset at every backward (micro_step_id taken as 0:
                              DeepSpeed PR #6550's copy instead of add): only the last micro-step survives
  zeros_for_none              a correct DDP-style wrapper that writes zeros into every None .grad after a sync
  zero_optimizer              torch's DistributedDataParallel with ZeroRedundancyOptimizer (SGD inside)
  flattened                   one flat parameter in place of the module's (FSDP1's FlatParameter with
                              use_orig_params=False): refused, with the reason
"""
import contextlib

import torch
import torch.distributed as dist

from wrappers import HookDDP


def owners(params, world):
    """Each parameter's owner: the least loaded rank, largest parameters first (OSS's partition, by size)."""
    load, owner = [0] * world, [0] * len(params)
    for i in sorted(range(len(params)), key=lambda i: -params[i].numel()):
        r = min(range(world), key=lambda k: load[k])
        owner[i] = r
        load[r] += params[i].numel()
    return owner


class ShardedDDP(HookDDP):
    declare = True

    def __init__(self, module):
        super().__init__(module)
        self.names = [n for n, _ in module.named_parameters()]
        self.owner = owners(self.params, self.world)

    def reduced(self, i):
        return True

    def sync_grads(self):
        self.syncs += 1
        for i, (p, used) in enumerate(zip(self.params, self.used())):
            if not used or not self.reduced(i):
                continue
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.reduce(p.grad, dst=self.owner[i])
            if self.rank == self.owner[i]:
                p.grad.div_(self.world)
            else:
                p.grad = None  # freed: this rank does not own it

    def ddpsim_grad_shards(self):
        if not self.declare:
            raise AttributeError
        return {n: True for n, r in zip(self.names, self.owner) if r == self.rank}


class ShardedSGD(torch.optim.Optimizer):
    """OSS-style: each rank steps the parameters it owns (SGD, with momentum as torch.optim.SGD keeps it when
    given one), then every parameter comes from its owner. keeps_momentum=False (planted): the momentum is
    declared and never applied."""

    def __init__(self, wrapped, lr, momentum=0.0, keeps_momentum=True):
        super().__init__(wrapped.params, dict(lr=lr, momentum=momentum) if momentum else dict(lr=lr))
        self.wrapped, self.keeps_momentum = wrapped, keeps_momentum

    @torch.no_grad()
    def step(self):
        w = self.wrapped
        momentum = self.defaults.get("momentum", 0.0) if self.keeps_momentum else 0.0
        for i, p in enumerate(w.params):
            if w.owner[i] == w.rank and p.grad is not None:
                d = p.grad
                if momentum:
                    buf = self.state[p].get("momentum_buffer")
                    if buf is None:
                        buf = self.state[p]["momentum_buffer"] = torch.clone(d).detach()
                    else:
                        buf.mul_(momentum).add_(d)
                    d = buf
                p.add_(d, alpha=-self.defaults["lr"])
        for i, p in enumerate(w.params):
            dist.broadcast(p, src=w.owner[i])


def _sharded(cls, module, lr=0.1, momentum=0.0, keeps_momentum=True):
    wrapped = cls(module)
    return wrapped, ShardedSGD(wrapped, lr, momentum, keeps_momentum)


def sharded(module):
    return _sharded(ShardedDDP, module)


def sharded_momentum(module, momentum):
    return _sharded(ShardedDDP, module, momentum=momentum)


def sharded_momentum_dropped(module, momentum):
    return _sharded(ShardedDDP, module, momentum=momentum, keeps_momentum=False)


class Undeclared(ShardedDDP):
    declare = False

    def __getattribute__(self, name):
        if name == "ddpsim_grad_shards":
            raise AttributeError(name)
        return super().__getattribute__(name)


def sharded_undeclared(module):
    return _sharded(Undeclared, module)


class EveryBackward(ShardedDDP):
    """Every backward reduces (the engine's window is one micro-step) and the owner's partition takes the
    reduced micro-batch alone: the accumulator was reset at the "boundary" before it."""

    def __init__(self, module):
        super().__init__(module)
        self.before = {}

    def forward(self, *args, **kwargs):
        self.sync_this = True  # no_sync or not, the engine's boundary is every backward
        with torch.no_grad():
            self.before = {i: None if p.grad is None else p.grad.clone() for i, p in enumerate(self.params)}
        return super().forward(*args, **kwargs)

    def sync_grads(self):
        for i, p in enumerate(self.params):  # the micro-batch's own gradient: reset the accumulation
            if p.grad is not None and self.before.get(i) is not None:
                p.grad.sub_(self.before[i])
        super().sync_grads()


def sharded_every_backward(module):
    return _sharded(EveryBackward, module)


class RemainderUnreduced(ShardedDDP):
    def reduced(self, i):
        return i != len(self.params) - 1


def sharded_remainder_unreduced(module):
    return _sharded(RemainderUnreduced, module)


class Zero2(ShardedDDP):
    """ZeRO-2 on gloo 1.13 (reduce, no reduce_scatter): each backward reduces every gradient to its owner, the
    owner adds it to its partition (averaged_gradients / grads_in_partition) and every rank frees .grad."""
    copy_each_backward = False

    def __init__(self, module):
        super().__init__(module)
        self.partition = {}  # parameter index -> the owner's accumulated, averaged gradient

    def forward(self, *args, **kwargs):
        self.sync_this = True  # ZeRO-2 reduces in every backward; the window only decides when to step
        return super().forward(*args, **kwargs)

    def used(self):
        return [True] * len(self.params)  # every parameter is reduced, an unused one's zeros too (no flags)

    def sync_grads(self):
        for i, p in enumerate(self.params):
            g = p.grad if p.grad is not None else torch.zeros_like(p)
            dist.reduce(g, dst=self.owner[i])
            if self.rank == self.owner[i]:
                g = g.div(self.world)
                self.partition[i] = g if i not in self.partition or self.copy_each_backward else \
                    self.partition[i] + g
            p.grad = None

    def ddpsim_grads(self):
        return {n: self.partition.get(i) for i, n in enumerate(self.names) if self.owner[i] == self.rank}

    def ddpsim_grad_scaler(self, **kw):
        """ZeRO-2's loss scaler (DeepSpeed's over its partitions): unscale_ multiplies each owned partition, and the
        finding is all-reduced (MAX) over the ranks, so every rank skips alike."""
        from ddpsim_torch.scaling import CpuGradScaler
        wrapped = self

        class Scaler(CpuGradScaler):
            def unscale_(self, optimizer):
                inv = self._scale.double().reciprocal().float()
                multiply = inv.item() != 1.0
                found = torch.zeros(())
                with torch.no_grad():
                    for g in wrapped.partition.values():
                        found = torch.maximum(found, (~torch.isfinite(g)).any().float())
                        if multiply:
                            g.mul_(inv)
                dist.all_reduce(found, op=dist.ReduceOp.MAX)
                self.found[id(optimizer)] = bool(found.item())
        return Scaler(**kw)

    def ddpsim_zero_grad(self, set_to_none=True):
        self.partition.clear()
        for p in self.params:
            p.grad = None


class Zero2SGD(ShardedSGD):
    """The owner steps its partition's parameters with the accumulated gradient, then broadcasts them."""

    @torch.no_grad()
    def step(self):
        w = self.wrapped
        for i, p in enumerate(w.params):
            if w.owner[i] == w.rank and i in w.partition:
                p.add_(w.partition[i], alpha=-self.defaults["lr"])
        for i, p in enumerate(w.params):
            dist.broadcast(p, src=w.owner[i])


def zero2(module):
    wrapped = Zero2(module)
    return wrapped, Zero2SGD(wrapped, 0.1)


zero2.ddpsim_shard = "zero2"


def zero2_undeclared(module):
    return zero2(module)


class Zero2BoundaryReset(Zero2):
    copy_each_backward = True


def zero2_boundary_reset(module):
    wrapped = Zero2BoundaryReset(module)
    return wrapped, Zero2SGD(wrapped, 0.1)


zero2_boundary_reset.ddpsim_shard = "zero2"


class ZerosForNone(HookDDP):
    def sync_grads(self):
        super().sync_grads()
        for p in self.params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)


def zeros_for_none(module):
    return ZerosForNone(module)


def zero_optimizer(module, momentum=0.0, optimizer=None, **ddp_options):
    from torch.distributed.optim import ZeroRedundancyOptimizer
    ddp = torch.nn.parallel.DistributedDataParallel(module, **ddp_options)
    cls, kwargs = optimizer or (torch.optim.SGD, {"lr": 0.1, "momentum": momentum})  # the run's step, when given
    return ddp, ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=cls, **kwargs)


class _AdamWWithoutDecay(torch.optim.AdamW):
    """(planted) torch's AdamW with the run's weight decay in its groups, stepping without it."""

    def step(self, closure=None):
        declared = [g["weight_decay"] for g in self.param_groups]
        for g in self.param_groups:
            g["weight_decay"] = 0.0
        try:
            return super().step(closure)
        finally:
            for g, w in zip(self.param_groups, declared):
                g["weight_decay"] = w


def adamw_decay_dropped(module, optimizer, **ddp_options):
    """DDP with its own AdamW (planted): the run's weight decay declared and never applied."""
    ddp = torch.nn.parallel.DistributedDataParallel(module, **ddp_options)
    cls, kwargs = optimizer
    return ddp, (_AdamWWithoutDecay if cls is torch.optim.AdamW else cls)(ddp.parameters(), **kwargs)


# Bad input, refused with its reason.
def bad_tuple(module):
    return HookDDP(module), "not an optimizer"


class NamesNope(ShardedDDP):
    def ddpsim_grad_shards(self):
        return {"nope": True}


def names_nope(module):
    return _sharded(NamesNope, module)


class HoldsTooLittle(ShardedDDP):
    def ddpsim_grad_shards(self):  # the last parameter's owner forgets it
        held = super().ddpsim_grad_shards()
        held.pop(self.names[-1], None)
        return held


def holds_too_little(module):
    return _sharded(HoldsTooLittle, module)


class Flattened(torch.nn.Module):
    """The module's parameters replaced by views of one flat parameter, re-bound before each forward (FSDP1's
    FlatParameter with use_orig_params=False, torch/distributed/fsdp/_flat_param.py); gradients averaged with one
    allreduce of the flat gradient."""

    def __init__(self, module):
        super().__init__()
        self.module = module
        self.slots = []
        for name, p in list(module.named_parameters()):
            owner = module.get_submodule(name.rpartition(".")[0]) if "." in name else module
            self.slots.append((owner, name.rpartition(".")[2], p.shape, p.numel()))
        self.flat_param = torch.nn.Parameter(torch.cat([p.detach().reshape(-1) for p in module.parameters()]))
        for owner, attr, _, _ in self.slots:
            delattr(owner, attr)

    def forward(self, *args):
        views = self.flat_param.split([n for _, _, _, n in self.slots])
        for (owner, attr, shape, _), v in zip(self.slots, views):
            setattr(owner, attr, v.view(shape))
        return self.module(*args)

    def no_sync(self):
        return contextlib.nullcontext()


def flattened(module):
    return Flattened(module)
