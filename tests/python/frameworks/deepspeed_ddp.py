"""DeepSpeed's engine with ZeRO stage 0 (data parallel, no sharding) on its CPU accelerator, as
`python3 -m ddpsim_torch --wrap` drives it (tests/frameworks.sh).

The adapter only translates the interface: deepspeed.initialize(model=module, config=...) over the gloo group the
front end made; calling it is engine(...); no_sync is engine.no_sync(); and the backward is engine.backward(loss)
(the wrapper contract's ddpsim_backward): DeepSpeed all-reduces the gradients there, at a gradient-accumulation
boundary outside no_sync, not in autograd hooks. The config says gradient_accumulation_steps=1, so that every
backward outside no_sync is a boundary and engine.backward does not scale the loss: the schedule's nosync{...}
are the accumulation windows. The front end steps its own SGD over the engine's parameters (ZeRO stage 0 keeps
them and their .grad whole on every rank); engine.step() is never called. ZeRO 1 and 2 keep the gradients in partitioned buffers of DeepSpeed's
own optimizer, not in .grad: the sharded layouts are another issue's."""
import os

import torch
import torch.distributed as dist


def _config(stage=0):
    return {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
            "zero_optimization": {"stage": stage}, "steps_per_print": 1 << 30}


class Engine(torch.nn.Module):
    def __init__(self, module, config):
        super().__init__()
        os.environ.update(RANK=str(dist.get_rank()), WORLD_SIZE=str(dist.get_world_size()),
                          LOCAL_RANK=str(dist.get_rank()))
        import deepspeed
        # engine.backward needs an optimizer; this one never steps (the front end's SGD does, over the same
        # parameters), it only lets DeepSpeed run its backward.
        optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
        self.engine, _, _, _ = deepspeed.initialize(model=module, optimizer=optimizer, config=config,
                                                    dist_init_required=False)

    def forward(self, *inputs):
        return self.engine(*inputs)

    def no_sync(self):
        return self.engine.no_sync()

    def ddpsim_backward(self, loss):
        self.engine.backward(loss)


def zero0(module, **ddp_options):
    return Engine(module, _config(0))


def zero0_accumulates_4(module, **ddp_options):
    """A planted bug through the config: DeepSpeed told gradient_accumulation_steps=4 while the schedule's windows
    say which micro-steps sync: DeepSpeed syncs at its own boundaries (and scales the loss by 1/4)."""
    config = _config(0)
    config["gradient_accumulation_steps"] = 4
    return Engine(module, config)
