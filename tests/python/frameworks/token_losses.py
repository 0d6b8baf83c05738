"""The token losses the frameworks' whole loops compute (--train-loop; accelerate_ddp.py, lightning_trainer.py):
the summed token cross-entropy of a micro-batch, and the global-token normalization of it that a framework which
divides by its accumulation count needs (the count multiplied back)."""
import torch
import torch.distributed as dist
import torch.nn.functional as F


def token_sum(net, batch):
    logits = net(batch.inputs)
    return F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), ignore_index=-100, reduction="sum")


def token_mean(net, batch):
    """Each micro-batch's own mean, as the frameworks' documentation writes the loss."""
    logits = net(batch.inputs)
    return F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), ignore_index=-100)


def global_tokens(batches, accumulation):
    """loss(net, batch, i) for micro-batch i: its summed loss times world_size over its window's valid tokens on
    every rank (gathered once per window), times accumulation, which the framework divides back out."""
    counts = {}

    def loss(net, batch, i):
        w = i // accumulation
        if w not in counts:
            n = torch.tensor(float(sum(b.tokens for b in batches[w * accumulation:(w + 1) * accumulation])))
            dist.all_reduce(n)
            counts[w] = n
        return token_sum(net, batch) * dist.get_world_size() / counts[w] * accumulation
    return loss
