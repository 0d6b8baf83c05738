"""fairscale's ShardedDataParallel with its OSS optimizer (ZeRO-2-like), as `python3 -m ddpsim_torch --wrap`
drives it (tests/frameworks.sh). The adapter only translates the interface: OSS over the module's parameters
(each rank owns a shard of the optimizer state), ShardedDataParallel(module, oss), no_sync is
ShardedDataParallel.no_sync(). By design each gradient is reduced to the rank that owns its parameter and a
non-owner's .grad is not DDP's: what DDP-level checking sees is the first non-owner's .grad, and it says FAIL.
The front end steps its own SGD, not OSS, so parameters after a step are not fairscale's either. Checking what
each rank should hold under sharding is another issue's."""
import torch


class Sharded(torch.nn.Module):
    def __init__(self, module):
        super().__init__()
        from fairscale.nn.data_parallel import ShardedDataParallel
        from fairscale.optim import OSS
        self.oss = OSS(module.parameters(), optim=torch.optim.SGD, lr=0.1)
        self.model = ShardedDataParallel(module, self.oss)

    def forward(self, *inputs):
        return self.model(*inputs)

    def no_sync(self):
        return self.model.no_sync()


def sharded(module, **ddp_options):
    return Sharded(module)
