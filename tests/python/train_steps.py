"""Training steps for --train-step (tests/python.sh): one that normalizes as
intended for each --loss-norm, and the mistakes trainers made (the README's
catalogue of normalization bugs), each of which ddpsim must catch and name.
Every step gets the wrapped model, a tokens.TokenBatch and a tokens.Window,
computes its micro-batch's token cross-entropy and calls backward."""
import torch
import torch.distributed as dist
import torch.nn.functional as F


def _token_loss(model, batch, reduction="sum"):
    logits = model(batch.inputs)
    return F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), ignore_index=-100, reduction=reduction)


def _global_tokens(window):
    """The window's valid tokens on every rank, gathered once per window (torchtitan PR #2206's recipe)."""
    if "tokens" not in window.state:
        n = torch.tensor(float(sum(b.tokens for b in window.batches)))
        dist.all_reduce(n)
        window.state["tokens"] = n
    return window.state["tokens"]


def global_tokens(model, batch, window):
    """Right: every token of the window on every rank weighs the same (DDP's average undone by world_size)."""
    (_token_loss(model, batch) * window.world_size / _global_tokens(window)).backward()


def micro_batch_mean(model, batch, window):
    """Each micro-batch's own mean over the window's micro-steps: right under --loss-norm micro-batch-mean, a mean
    of means under global-tokens (torchtitan before PR #2206)."""
    (_token_loss(model, batch, "mean") / window.micro_steps).backward()


def token_sum(model, batch):
    """The plain sum (sum's factor is N: DDP's average undone)."""
    (_token_loss(model, batch) * dist.get_world_size()).backward()


def rank_local(model, batch, window):
    """A rank-local mean, then DDP's average (prime-rl PR #1961)."""
    (_token_loss(model, batch) / sum(b.tokens for b in window.batches)).backward()


def dropped(model, batch):
    """The normalizer dropped (miles PR #3231)."""
    _token_loss(model, batch).backward()


def configured_steps(model, batch, window):
    """A mean of means over the configured accumulation count, in the shorter tail window too (Lightning #19987)."""
    (_token_loss(model, batch, "mean") / window.accumulation).backward()


def empty_counted(model, batch, window):
    """Every sequence counts at least one token (clamp_min(1): miles PR #2796)."""
    if "tokens" not in window.state:
        n = torch.tensor(float(sum(max(1, r) for b in window.batches for r in b.rows)))
        dist.all_reduce(n)
        window.state["tokens"] = n
    (_token_loss(model, batch) * window.world_size / window.state["tokens"]).backward()


def per_sequence_mean(model, batch, window):
    """Each sequence's own mean, averaged: the tokens of a short sequence weigh more than a long one's."""
    logits = model(batch.inputs)
    per = F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), ignore_index=-100, reduction="none")
    per = per.view(batch.targets.shape).sum(dim=1) / batch.mask.sum(dim=1).clamp(min=1)
    (per.sum() / per.numel() / window.micro_steps).backward()


def not_a_token_loss(model, batch):
    """A loss that is not the token cross-entropy at all (squared probabilities): not judged, refused."""
    p = model(batch.inputs).softmax(-1)
    ((p ** 2).sum(-1) * batch.mask).sum().backward()


def two_forwards(model, batch):
    """Two forwards in one step: refused, a step runs one forward and one backward."""
    model(batch.inputs)
    _token_loss(model, batch).backward()
