"""PyTorch's FSDP2 (`fully_shard`, torch 2.x) as `python3 -m ddpsim_torch --wrap` drives it (tests/frameworks.sh),
on CPU with gloo. The adapter only translates the interface:

  - every child module of an nn.Sequential that has parameters is fully_shard-ed, then the root (FSDP2's usual
    wrapping; another root, one group); its
    parameters become DTensors sharded on dim 0, and so do their .grad after a synchronized backward: the
    front end reads each rank's local shard and checks it against the same rows of DDP's gradient;
  - FSDP2 has no no_sync(): set_requires_gradient_sync(False) is its switch (accelerate PR #3762 had to learn
    that), and leaving the context restores the state it found (the review of NVIDIA/cosmos-framework PR #162);
  - while gradient sync is off FSDP2 keeps each rank's whole local sum on the unsharded parameter, not in
    .grad (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py post_backward): ddpsim_grads() hands that
    to the front end, where DDP's no_sync would hold it in .grad.

  fsdp2         one shard group over every rank (a 1-D mesh)
  hsdp          a 2 x N/2 mesh (replicate x shard): reduce-scatter in the shard group, all-reduce across
                replicas; no_sync turns both off (set_requires_gradient_sync)
  hsdp_deferred the same mesh, accumulating as PyTorch PRs #125484 / #126166 made HSDP do: no_sync is
                set_requires_all_reduce(False) alone, so every micro-step reduce-scatters in its shard group
                and the replica all-reduce waits for the syncing one; declared (ddpsim_shard = "hsdp"), ddpsim
                check judges it by HSDP's rule (shard_ref.h), not DDP's
  fsdp2_clip_local  (planted) clip_grad_norm_ by the norm of each rank's own shards (pytorch #170862, RLinf PR
                #1558): the ranks clip by different coefficients
  fsdp2_sync_ignored  (planted) no_sync does nothing (NVIDIA/cosmos-framework #161: the trainer's context
                only knew DDP): every micro-step reduce-scatters, and the .grad after a no_sync backward is
                already averaged
"""
import contextlib

import torch
import torch.distributed as dist


class FSDP2(torch.nn.Module):
    honours_no_sync = True

    def __init__(self, module, mesh=None):
        super().__init__()
        from torch.distributed.fsdp import fully_shard
        # A root whose forward only calls its children (nn.Sequential) gets a group per child; any other root, whose
        # forward may use a child's parameters directly (a tied weight), one group.
        children = [c for c in module.children() if any(True for _ in c.parameters())] \
            if isinstance(module, torch.nn.Sequential) else []
        owners = {}
        for c in children:
            for p in c.parameters():
                owners.setdefault(id(p), set()).add(id(c))
        for c in children:  # a parameter two children share (tied weights) stays with the root's group
            if all(len(owners[id(p)]) == 1 for p in c.parameters()):
                fully_shard(c, mesh=mesh)
        fully_shard(module, mesh=mesh)
        self.module = module
        self.sync = True

    def forward(self, *inputs):
        return self.module(*inputs)

    def _set_sync(self, on):
        self.sync = on
        if self.honours_no_sync:
            self.module.set_requires_gradient_sync(on)

    @contextlib.contextmanager
    def no_sync(self):
        before = self.sync
        self._set_sync(False)
        try:
            yield
        finally:
            self._set_sync(before)

    def _fsdp_params(self):
        out = {}
        for m in self.module.modules():
            state = getattr(m, "_get_fsdp_state", None)
            group = state()._fsdp_param_group if state else None
            for fp in (group.fsdp_params if group else ()):
                out[id(fp.sharded_param)] = fp
        return out

    def ddpsim_grads(self):
        """What FSDP2 holds where DDP's .grad would hold it, by the module's names: while gradient sync is off, the
        unsharded local sum; when a synced shard is there too (a window after a sync without zero_grad), the shard
        plus its rows of the local sum (what the next sync adds the reduced sum to), as a DTensor of the shard."""
        from torch.distributed.tensor import DTensor
        fps = self._fsdp_params()
        out = {}
        for name, p in self.module.named_parameters():
            fp = fps.get(id(p))
            unsharded = getattr(fp, "_unsharded_param", None) if fp is not None else None
            local = unsharded.grad if unsharded is not None else None
            if local is None:
                continue
            if p.grad is None:
                out[name] = local
                continue
            from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
            shape, offset = compute_local_shape_and_global_offset(p.shape, p.grad.device_mesh, p.grad.placements)
            rows = tuple(slice(o, o + n) for o, n in zip(offset, shape))
            out[name] = DTensor.from_local(p.grad.to_local() + local[rows], p.grad.device_mesh, p.grad.placements,
                                           run_check=False, shape=p.shape, stride=p.stride())
        return out


class SyncIgnored(FSDP2):
    honours_no_sync = False


class HSDPDeferred(FSDP2):
    """no_sync defers only the replica all-reduce (FSDPModule.set_requires_all_reduce): the reduce-scatter of each
    micro-step stays, and its output accumulates in FSDP2's partial until the syncing backward."""

    def _set_sync(self, on):
        self.sync = on
        self.module.set_requires_all_reduce(on)


def fsdp2(module, **ddp_options):
    return FSDP2(module)


def hsdp(module, **ddp_options):
    return FSDP2(module, _mesh_2xn())


def _mesh_2xn():
    from torch.distributed.device_mesh import init_device_mesh
    n = dist.get_world_size()
    if n % 2:
        raise ValueError("hsdp needs an even number of ranks (a 2 x N/2 mesh), not %d" % n)
    return init_device_mesh("cpu", (2, n // 2), mesh_dim_names=("replicate", "shard"))


def hsdp_deferred(module, **ddp_options):
    return HSDPDeferred(module, _mesh_2xn())


hsdp_deferred.ddpsim_shard = "hsdp"  # the front end records it as HSDP's (2 x N/2 is that mode's default mesh)


def hsdp_deferred_undeclared(module, **ddp_options):
    """The same wrapper judged by DDP's rule (no ddpsim_shard): its sums come in another order."""
    return HSDPDeferred(module, _mesh_2xn())


def fsdp2_sync_ignored(module, **ddp_options):
    return SyncIgnored(module)


class ClipLocal(FSDP2):
    """(planted) clip_grad_norm_ over each rank's local shards alone: the norm of partial (local) parameters, as
    pytorch/pytorch #170862 reports of FSDP2 and RLinf PR #1558 found (get_grad_norm skipped its all_reduce), so
    every rank clips by a norm of its own."""

    def ddpsim_clip_grad_norm_(self, max_norm, norm_type=2.0):
        local = [p.grad.to_local() for p in self.module.parameters() if p.grad is not None]
        with torch.no_grad():
            total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g, norm_type) for g in local]),
                                             norm_type)
            coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
            for g in local:
                g.mul_(coef)
        return total


def fsdp2_clip_local(module, **ddp_options):
    return ClipLocal(module)
