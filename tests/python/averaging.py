"""Model averaging through the front end's parameters-only mode (--params-only): post-local SGD as torch ships it
(torch.distributed.algorithms: DDP with post_localSGD_hook, PostLocalSGDOptimizer with a PeriodicModelAverager),
correct with period 1, and the ways it goes wrong. Each wrap function returns (module, optimizer) and is marked
ddpsim_params_only. The first WARMUP steps are plain DDP (the hook allreduces the gradients); after them every
rank steps with its own gradients (the hook returns them unreduced) and the averager averages the parameters."""
import torch
import torch.distributed as dist

WARMUP = 2
LR = 0.1  # the front end's default --lr: the optimizer here is the wrapper's own


def _local_sgd(module, period, averager=None, **ddp_options):
    from torch.distributed.algorithms.ddp_comm_hooks.post_localSGD_hook import PostLocalSGDState, post_localSGD_hook
    from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager
    from torch.distributed.optim import PostLocalSGDOptimizer
    ddp = torch.nn.parallel.DistributedDataParallel(module, **ddp_options)
    state = PostLocalSGDState(process_group=None, subgroup=None, start_localSGD_iter=WARMUP,
                              post_local_gradient_allreduce=False)
    ddp.register_comm_hook(state, post_localSGD_hook)
    averager = averager or PeriodicModelAverager(period=period, warmup_steps=WARMUP)
    return ddp, PostLocalSGDOptimizer(optim=torch.optim.SGD(ddp.parameters(), lr=LR), averager=averager)


def local_sgd(module, **ddp_options):
    """Period 1: every step averaged, DDP's parameters (within the averaging's rounding), as long as every step
    follows one syncing backward: the hook counts its warm-up in syncing backwards, the averager in steps."""
    return _local_sgd(module, 1, **ddp_options)


def local_sgd_period_2(module, **ddp_options):
    """Period 2: every other step leaves each rank with its own parameters."""
    return _local_sgd(module, 2, **ddp_options)


class SummingAverager:
    """A model averager that all-reduces the parameters and forgets to divide by the ranks."""

    def __init__(self):
        self.step = 0

    def average_parameters(self, params):
        if self.step >= WARMUP:
            for group in params:
                for p in group["params"]:
                    dist.all_reduce(p.data)
        self.step += 1


def averager_sums(module, **ddp_options):
    return _local_sgd(module, 1, SummingAverager(), **ddp_options)


def ddp_sgd(module, **ddp_options):
    """Plain DDP with its own SGD: its parameters are DDP's, so parameters-only passes it too."""
    ddp = torch.nn.parallel.DistributedDataParallel(module, **ddp_options)
    return ddp, torch.optim.SGD(ddp.parameters(), lr=LR)


for _f in (local_sgd, local_sgd_period_2, averager_sums, ddp_sgd):
    _f.ddpsim_params_only = True
