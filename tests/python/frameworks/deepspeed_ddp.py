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


# ZeRO stages 1 and 2 as a training loop of its own (the front end's loop mode, ddpsim_loop: loop.py): DeepSpeed's
# engine decides the accumulation boundary itself (gradient_accumulation_steps=4 in its config), reduces (stage 2:
# every micro-step, into its gradient partitions; stage 1: at the boundary; deepspeed/runtime/zero/
# stage_1_and_2.py reduce_ready_partitions_and_remove_grads), steps its own ZeRO optimizer over our
# SGD and zeroes in engine.step(). Between micro-steps no public API reads the partitioned gradients, so the
# schedule grabs only after each window's last backward, where deepspeed.utils.safe_get_full_grad gives each
# parameter's whole reduced gradient ("only available immediately after backward and before engine step"), and
# checks the parameters after every step. engine.backward divides each loss by the 4 (loss_divisor).
# The schedule: 3*( 3*( nosync{fwd bwd} ) fwd bwd grab step zero ).
def _zero_engine(loop, stage, gradient_accumulation_steps):
    """The engine over the loop's module, its ZeRO optimizer over SGD with the run's lr; and a function giving every
    parameter's whole reduced gradient by name (safe_get_full_grad, a collective)."""
    config = _config(stage)
    config.update(gradient_accumulation_steps=gradient_accumulation_steps, zero_allow_untested_optimizer=True)
    os.environ.update(RANK=str(dist.get_rank()), WORLD_SIZE=str(dist.get_world_size()),
                      LOCAL_RANK=str(dist.get_rank()))
    import deepspeed
    from deepspeed.utils import safe_get_full_grad
    optimizer = loop.optimizer(loop.module.parameters())
    engine, _, _, _ = deepspeed.initialize(model=loop.module, optimizer=optimizer, config=config,
                                           dist_init_required=False)
    named = list(engine.module.named_parameters())
    return engine, lambda: {n: safe_get_full_grad(p) for n, p in named}


def _zero_loop(loop, stage, k=4):
    engine, full_grads = _zero_engine(loop, stage, k)
    loop.loss_divisor = k  # engine.backward divides each loss by gradient_accumulation_steps
    for inputs, targets in loop.batches:
        engine.backward(loop.loss(engine(*inputs), targets))
        boundary = engine.is_gradient_accumulation_boundary()
        loop.after_backward(grads=full_grads)
        engine.step()
        if boundary:
            loop.after_step()


def zero2_told_1_loop(loop, k=4):
    """allenai/open-instruct PR #1498, planted through the config: DeepSpeed told gradient_accumulation_steps=1
    while the trainer accumulates 4 micro-batches itself (it divides each loss by 4 and calls engine.step() every
    4th): every backward is a boundary to DeepSpeed, and ZeRO-2 starts its gradient partitions afresh at each."""
    engine, full_grads = _zero_engine(loop, 2, 1)
    loop.loss_divisor = k
    for i, (inputs, targets) in enumerate(loop.batches):
        engine.backward(loop.loss(engine(*inputs), targets) / k)
        loop.after_backward(grads=full_grads)
        if (i + 1) % k == 0:
            engine.step()
            loop.after_step()


def zero1_loop(loop):
    _zero_loop(loop, 1)


def zero2_loop(loop):
    _zero_loop(loop, 2)


zero1_loop.ddpsim_loop = zero2_loop.ddpsim_loop = zero2_told_1_loop.ddpsim_loop = True
zero1_loop.ddpsim_shard, zero2_loop.ddpsim_shard, zero2_told_1_loop.ddpsim_shard = "zero1", "zero2", "zero2"
