"""fairscale's ShardedDataParallel with its OSS optimizer (ZeRO-2-like), as `python3 -m ddpsim_torch --wrap`
drives it (tests/frameworks.sh). The adapter only translates the interface: OSS over the module's parameters
(each rank owns a shard of the optimizer state and the parameters it updates), ShardedDataParallel(module,
oss), no_sync is ShardedDataParallel.no_sync(), zero_grad the model's (ddpsim_zero_grad). By design each gradient is reduced to the rank that owns its
parameter (fairscale/nn/data_parallel/sharded_ddp.py) and a non-owner's .grad is not DDP's:

  sharded             says so (ddpsim_grad_shards: what OSS's _param_to_rank gives this rank) and returns
                      (module, OSS), so each owner's .grad and OSS's step are checked
  sharded_undeclared  the same without saying what each rank holds: a non-owner's .grad is read, and fails
"""
import torch


class Sharded(torch.nn.Module):
    def __init__(self, module, optimizer=(torch.optim.SGD, {"lr": 0.1})):
        super().__init__()
        from fairscale.nn.data_parallel import ShardedDataParallel
        from fairscale.optim import OSS
        self.names = {id(p): n for n, p in module.named_parameters()}
        cls, kwargs = optimizer
        self.oss = OSS(module.parameters(), optim=cls, **kwargs)
        self.model = ShardedDataParallel(module, self.oss)

    def forward(self, *inputs):
        return self.model(*inputs)

    def no_sync(self):
        return self.model.no_sync()

    def ddpsim_zero_grad(self, set_to_none):
        # ShardedDataParallel.zero_grad also resets its reduction state; OSS.zero_grad (or any optimizer's)
        # does not, and the next window's owners then take a wrong reduction (fairscale's README zeroes
        # through the model).
        self.model.zero_grad(set_to_none=set_to_none)

    def ddpsim_grad_shards(self):
        mine = self.oss.rank
        return {self.names[id(p)]: True for p, r in self.oss._param_to_rank.items() if r == mine}


class Undeclared(Sharded):
    ddpsim_grad_shards = None


def sharded(module, momentum=0.0, optimizer=None, **ddp_options):
    # the run's step (the momentum or adamw scenario's), as the front end gives it
    wrapped = Sharded(module, optimizer or (torch.optim.SGD, {"lr": 0.1, "momentum": momentum}))
    return wrapped, wrapped.oss


def sharded_undeclared(module, **ddp_options):
    return Undeclared(module)
