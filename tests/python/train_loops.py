"""Training loops for --train-loop (tests/python.sh, tests/frameworks.sh): each gets the model unwrapped, the
run's optimizer, this rank's ragged micro-batches (tokens.TokenBatch) and its accumulation count, wraps the
model and trains as a hand-written trainer does. The right loops pass; each mistake is one trainers made."""
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def _sum_loss(model, batch):
    logits = model(batch.inputs)
    return F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), ignore_index=-100, reduction="sum")


def _windows(batches, accumulation):
    return [batches[i:i + accumulation] for i in range(0, len(batches), accumulation)]


def _global_tokens(window):
    n = torch.tensor(float(sum(b.tokens for b in window)))
    dist.all_reduce(n)
    return n


def nanogpt(model, optimizer, batches, accumulation):
    """nanoGPT's loop: require_backward_grad_sync on at a window's last micro-step only; the window's batches
    prefetched and their tokens all-reduced, each micro-batch's summed loss times world size over them."""
    ddp = DDP(model)
    for window in _windows(batches, accumulation):
        tokens = _global_tokens(window)
        for i, batch in enumerate(window):
            ddp.require_backward_grad_sync = i == len(window) - 1
            (_sum_loss(ddp, batch) * dist.get_world_size() / tokens).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def with_no_sync(model, optimizer, batches, accumulation):
    """The same with DDP's no_sync() around all but the last micro-step, zero_grad at each window's start."""
    ddp = DDP(model)
    for window in _windows(batches, accumulation):
        optimizer.zero_grad()
        tokens = _global_tokens(window)
        for i, batch in enumerate(window):
            loss = _sum_loss
            if i < len(window) - 1:
                with ddp.no_sync():
                    (loss(ddp, batch) * dist.get_world_size() / tokens).backward()
            else:
                (loss(ddp, batch) * dist.get_world_size() / tokens).backward()
        optimizer.step()


def _counted(model, optimizer, batches, accumulation, normalize):
    """A loop over micro-step indices, as trainers count them: sync and step when (i + 1) % accumulation == 0, or
    at the last batch."""
    ddp = DDP(model)
    n = len(batches)
    for i, batch in enumerate(batches):
        boundary = (i + 1) % accumulation == 0 or i == n - 1
        ddp.require_backward_grad_sync = boundary
        normalize(_sum_loss(ddp, batch), batch, i).backward()
        if boundary:
            optimizer.step()
            optimizer.zero_grad()


def mean_of_means(model, optimizer, batches, accumulation):
    """Each micro-batch's token mean over the accumulation count (open-instruct PR #1736, transformers before
    PR #34191): right only when every micro-batch has as many tokens, and its tail divides by the wrong count."""
    _counted(model, optimizer, batches, accumulation, lambda loss, b, i: loss / max(b.tokens, 1) / accumulation)


def tail_dropped(model, optimizer, batches, accumulation):
    """Steps only at full windows: the tail's micro-batches never sync nor step (a loop that counts steps, not
    batches)."""
    windows = _windows(batches, accumulation)
    ddp = DDP(model)
    for window in windows:
        tokens = _global_tokens(window)
        for i, batch in enumerate(window):
            ddp.require_backward_grad_sync = i == accumulation - 1
            (_sum_loss(ddp, batch) * dist.get_world_size() / tokens).backward()
        if len(window) == accumulation:
            optimizer.step()
            optimizer.zero_grad()


def _without_no_sync(model, optimizer, batches, accumulation, step_every):
    ddp = DDP(model)
    for window in _windows(batches, accumulation):
        tokens = _global_tokens(window)
        for batch in window:
            (_sum_loss(ddp, batch) * dist.get_world_size() / tokens).backward()
            if step_every:
                optimizer.step()
                optimizer.zero_grad()
        if not step_every:
            optimizer.step()
            optimizer.zero_grad()


def step_every_micro_batch(model, optimizer, batches, accumulation):
    """Syncs and steps after every micro-batch: no accumulation at all, each normalized by its window's tokens."""
    _without_no_sync(model, optimizer, batches, accumulation, True)


def skips_a_batch(model, optimizer, batches, accumulation):
    """Runs one micro-batch fewer than it was given: refused as bad input, said how many."""
    nanogpt(model, optimizer, batches[:-1], accumulation)


def syncs_every_micro_step(model, optimizer, batches, accumulation):
    """Never uses no_sync: every backward syncs (a no-sync that does nothing: NVIDIA/cosmos-framework #161); the
    numbers are a rounding away, the traffic a sync per micro-step (counted on torch 2.x)."""
    _without_no_sync(model, optimizer, batches, accumulation, False)
