"""Hugging Face transformers' Trainer as a whole training loop (--train-loop, python/ddpsim_torch/train_loop.py;
tests/frameworks.sh): Trainer.train() with gradient_accumulation_steps on the token model's ragged batches, its
DDP Accelerate's on the gloo group the front end made.

The adapter only translates the interface: the model returns {"loss": ...} from input_ids and labels, the run's
optimizer is the Trainer's (optimizers=(optimizer, None)), with a constant learning rate and no clipping (the
reference's plain step), and the Trainer iterates this rank's batches as they are (get_train_dataloader, no
sampler: they are this rank's already). How the loss is normalized, when it syncs and steps is the Trainer's
(transformers 5.25.0, trainer.py): it prefetches each update's micro-batches (the shorter last one too), counts
their labels other than -100 (num_items_in_batch), gathers the count over the ranks (average_tokens_across_devices)
and, for a model whose forward takes **kwargs, passes it there and multiplies the loss by the world size;
otherwise it divides each micro-batch's loss by the accumulation steps of the update.
 - sum_over_items: the model sums its token losses over num_items_in_batch: global tokens (transformers PR #34191's
   fix);
 - mean_loss: a model that returns its micro-batch's mean and takes no loss kwargs: the Trainer divides it by the
   accumulation steps, a mean of micro-batch means (the 2024 gradient-accumulation bug's shape)."""
import os
import tempfile

import torch
import torch.distributed as dist
import torch.nn.functional as F


class _SumOverItems(torch.nn.Module):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, input_ids, labels=None, **kwargs):
        logits = self.net(input_ids)
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum")
        return {"loss": loss / kwargs["num_items_in_batch"]}


class _MeanLoss(torch.nn.Module):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, input_ids, labels=None):
        logits = self.net(input_ids)
        return {"loss": F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)}


def _train(model, optimizer, batches, accumulation):
    os.environ.update(RANK=str(dist.get_rank()), WORLD_SIZE=str(dist.get_world_size()),
                      LOCAL_RANK=str(dist.get_rank()), LOCAL_WORLD_SIZE=str(dist.get_world_size()))
    from transformers import Trainer, TrainingArguments
    items = [{"input_ids": b.inputs, "labels": b.targets} for b in batches]

    class Unsharded(Trainer):
        def get_train_dataloader(self):
            return torch.utils.data.DataLoader(items, batch_size=None, collate_fn=lambda b: b)

    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(output_dir=out, gradient_accumulation_steps=accumulation, num_train_epochs=1,
                                 lr_scheduler_type="constant", max_grad_norm=0.0, report_to="none",
                                 save_strategy="no", use_cpu=True, disable_tqdm=True, logging_strategy="no",
                                 average_tokens_across_devices=True, ddp_backend="gloo", dataloader_num_workers=0)
        Unsharded(model=model, args=args, optimizers=(optimizer, None), train_dataset=items).train()


def sum_over_items(model, optimizer, batches, accumulation):
    _train(_SumOverItems(model), optimizer, batches, accumulation)


def mean_loss(model, optimizer, batches, accumulation):
    _train(_MeanLoss(model), optimizer, batches, accumulation)
