"""Lightning Fabric's DDP strategy, as `python3 -m ddpsim_torch --wrap` drives it (tests/frameworks.sh).

The adapter only translates the interface: Fabric(accelerator="cpu", strategy=DDPStrategy(...)) over the gloo
group the front end made (Fabric takes an initialised process group as it is), fabric.setup_module(module)
(torch's DistributedDataParallel inside Fabric's _FabricModule), and no_sync is
fabric.no_backward_sync(model, enabled=True). How gradients are synchronized is Fabric's and torch's.
 - no_backward_sync: the schedule's nosync{...} is fabric.no_backward_sync(model);
 - enabled_inverted: the idiom of Fabric's docs, every micro-step under no_backward_sync(model,
   enabled=is_accumulating), with a bug planted through the public API: the flag inverted, so the window's
   micro-steps sync and the one that should sync does not."""
import contextlib
import os

import torch
import torch.distributed as dist


def _fabric(**ddp_options):
    os.environ.update(RANK=str(dist.get_rank()), WORLD_SIZE=str(dist.get_world_size()),
                      LOCAL_RANK=str(dist.get_rank()), NODE_RANK="0")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "1")  # never dialled: the process group exists
    from lightning.fabric import Fabric
    from lightning.fabric.strategies import DDPStrategy
    strategy = DDPStrategy(process_group_backend="gloo", **{k: v for k, v in ddp_options.items() if k in (
        "find_unused_parameters", "bucket_cap_mb", "gradient_as_bucket_view", "static_graph")})
    fabric = Fabric(accelerator="cpu", devices=dist.get_world_size(), strategy=strategy)
    fabric.launch()  # processes made outside (LOCAL_RANK set): launches nothing, sets up the strategy
    return fabric


class FabricDDP(torch.nn.Module):
    def __init__(self, fabric, module):
        super().__init__()
        self.fabric = fabric
        self.model = fabric.setup_module(module)

    def forward(self, *inputs):
        return self.model(*inputs)

    def no_sync(self):
        return self.fabric.no_backward_sync(self.model, enabled=True)


class Inverted(FabricDDP):
    """enabled= the opposite of accumulating: outside the window's nosync{...}, Fabric is asked not to sync."""

    def __init__(self, fabric, module):
        super().__init__(fabric, module)
        self.accumulating = False

    def forward(self, *inputs):
        ctx = self.fabric.no_backward_sync(self.model, enabled=not self.accumulating)
        with ctx:
            return self.model(*inputs)

    @contextlib.contextmanager
    def no_sync(self):
        self.accumulating = True
        try:
            yield
        finally:
            self.accumulating = False


def no_backward_sync(module, **ddp_options):
    return FabricDDP(_fabric(**ddp_options), module)


def enabled_inverted(module, **ddp_options):
    return Inverted(_fabric(**ddp_options), module)
