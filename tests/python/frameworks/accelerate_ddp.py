"""Hugging Face Accelerate's DDP, as `python3 -m ddpsim_torch --wrap` drives it (tests/frameworks.sh).

These adapters only translate the interface: they build Accelerate's wrapper with its public API
(Accelerator(cpu=True).prepare(model): torch's DistributedDataParallel on the gloo group the front end made)
and expose what the front end drives (the module call, no_sync). How the gradients are synchronized is
Accelerate's:
 - no_sync: accelerator.no_sync(model), what the schedule's nosync{...} asks for;
 - accumulate_K: accelerator.accumulate(model) around every micro-step, with gradient_accumulation_steps=K:
   Accelerate decides which micro-step syncs (every K-th), and the schedule says which ones should. The
   schedule's own nosync{...} is then not passed on: Accelerate's decision is what is checked.
The front end calls loss.backward() itself, so accelerator.backward's division of the loss by
gradient_accumulation_steps (the trainer's loss normalization) is not part of what is checked here."""
import contextlib
import os

import torch
import torch.distributed as dist


def _accelerator(steps=1, **ddp_options):
    # Accelerate reads the launch from the environment (PartialState); the process group is the front end's.
    os.environ.update(RANK=str(dist.get_rank()), WORLD_SIZE=str(dist.get_world_size()),
                      LOCAL_RANK=str(dist.get_rank()), LOCAL_WORLD_SIZE=str(dist.get_world_size()))
    from accelerate import Accelerator
    from accelerate.utils import DistributedDataParallelKwargs
    kwargs = DistributedDataParallelKwargs(**{k: v for k, v in ddp_options.items() if k in (
        "find_unused_parameters", "bucket_cap_mb", "gradient_as_bucket_view", "static_graph")})
    return Accelerator(cpu=True, gradient_accumulation_steps=steps, kwargs_handlers=[kwargs])


class Prepared(torch.nn.Module):
    """accelerator.prepare(module), called as the module; no_sync is Accelerate's."""

    def __init__(self, accelerator, module):
        super().__init__()
        self.accelerator = accelerator
        self.model = accelerator.prepare(module)
        if not isinstance(self.model, torch.nn.parallel.DistributedDataParallel):
            raise RuntimeError("accelerator.prepare gave a %s, not DDP: distributed_type %s" % (
                type(self.model).__name__, accelerator.distributed_type))

    def forward(self, *inputs):
        return self.model(*inputs)

    def no_sync(self):
        return self.accelerator.no_sync(self.model)


class Accumulating(Prepared):
    """Every forward opens accelerator.accumulate(model) for its micro-step (and closes the last one's): its
    __enter__ counts the step and enters no_sync unless this micro-step is the K-th."""

    def __init__(self, accelerator, module):
        super().__init__(accelerator, module)
        self.step = None

    def forward(self, *inputs):
        if self.step is not None:
            self.step.__exit__(None, None, None)
        self.step = self.accelerator.accumulate(self.model)
        self.step.__enter__()
        return self.model(*inputs)

    def no_sync(self):
        return contextlib.nullcontext()  # Accelerate decides: the schedule's windows are what it should decide


def no_sync(module, **ddp_options):
    return Prepared(_accelerator(**ddp_options), module)


def accumulate_4(module, **ddp_options):
    return Accumulating(_accelerator(4, **ddp_options), module)


def accumulate_3(module, **ddp_options):
    """A planted bug through the public API: the trainer accumulates 4 micro-batches and tells Accelerate 3
    (allenai/open-instruct PR #1498's kind: the framework's count and the trainer's differ)."""
    return Accumulating(_accelerator(3, **ddp_options), module)


# Whole training loops (--train-loop, python/ddpsim_torch/train_loop.py): Accelerate's own recipe for gradient
# accumulation, accelerator.accumulate(model) with accelerator.backward, on the token model's ragged batches
# (token_losses.py). accelerator.backward divides the loss by gradient_accumulation_steps, and accumulate() knows
# a window ends at every accumulation-th batch or at the end of a dataloader it prepared
# (GradientState.end_of_dataloader).
def _loader(batches, prepared):
    """The batches as a DataLoader Accelerate prepared without sharding them (they are this rank's already), or the
    plain list."""
    if not prepared:
        return batches
    from accelerate.data_loader import prepare_data_loader
    from torch.utils.data import DataLoader
    return prepare_data_loader(DataLoader(batches, batch_size=None, collate_fn=lambda b: b), num_processes=1,
                               process_index=0, put_on_device=False)


def _accumulate_loop(model, optimizer, batches, accumulation, loss_of, prepared=True):
    accelerator = _accelerator(accumulation)
    model, optimizer = accelerator.prepare(model, optimizer)
    for i, batch in enumerate(_loader(batches, prepared)):
        with accelerator.accumulate(model):
            accelerator.backward(loss_of(model, batch, i))
            optimizer.step()
            optimizer.zero_grad()


def accumulate_loop(model, optimizer, batches, accumulation):
    """Right: global tokens, the accumulation count multiplied back."""
    import token_losses
    _accumulate_loop(model, optimizer, batches, accumulation, token_losses.global_tokens(batches, accumulation))


def accumulate_loop_mean(model, optimizer, batches, accumulation):
    """The recipe as Accelerate's documentation writes it: each micro-batch's mean loss, accelerator.backward
    dividing by gradient_accumulation_steps: a mean of micro-batch means, and over the configured count in the
    shorter tail (the 2024 gradient-accumulation bug: transformers PR #34191, Lightning #19987)."""
    import token_losses
    _accumulate_loop(model, optimizer, batches, accumulation, lambda m, b, i: token_losses.token_mean(m, b))


def accumulate_loop_unprepared(model, optimizer, batches, accumulation):
    """accumulate_loop over the plain list: Accelerate cannot tell its last batch, so the tail window never syncs
    nor steps."""
    import token_losses
    _accumulate_loop(model, optimizer, batches, accumulation, token_losses.global_tokens(batches, accumulation),
                     prepared=False)
