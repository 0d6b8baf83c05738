"""PyTorch Lightning's own training loop, Trainer.fit with accumulate_grad_batches, checked through the front end's
loop mode (`ddpsim_loop`, python/ddpsim_torch/loop.py): the Trainer decides when it forwards, syncs, steps and
zeroes, and reports what it did through its public hooks (tests/frameworks.sh).

The adapter only translates the interface: a LightningModule whose training_step is the run's loss on the batch
the Trainer hands it, whose optimizer is torch.optim.SGD with the run's lr, and whose hooks on_after_backward and
optimizer_step report to the Loop; Trainer(strategy=DDPStrategy(process_group_backend="gloo")) on the gloo group
the front end made (Lightning takes an initialised process group as it is, and with LOCAL_RANK set launches
nothing); the batches in order, one per rank (use_distributed_sampler=False). How gradients are synchronized,
accumulated and zeroed is Lightning's and torch's. Lightning's automatic optimization, for
accumulate_grad_batches=K (lightning/pytorch/loops/optimization/automatic.py, 2.6.6):
 - each micro-batch's loss is divided by K before its backward (ClosureResult.from_training_step_output): the
   Loop's loss_divisor says so, and the reference sums those;
 - a micro-batch that does not end the window runs its training_step and backward inside
   strategy.block_backward_sync(), DDP's no_sync (_block_parallel_sync_behavior);
 - zero_grad comes in the first micro-batch of each window, after its forward and before its backward
   (_make_zero_grad_fn);
 - the window's last micro-batch runs outside no_sync, inside optimizer.step(closure).
So K = 4 over three windows is the schedule
    3*( nosync{fwd zero bwd grab} 2*( nosync{fwd bwd grab} ) fwd bwd grab step )
 - accumulate_4: that, as Lightning runs it;
 - sync_every_microstep: a bug planted through the public API: a DDPStrategy whose block_backward_sync does
   nothing (NVIDIA/cosmos-framework #161's class: a no_sync that silently did nothing), so every micro-batch
   syncs."""
import contextlib
import os

import torch
import torch.distributed as dist


def _trainer(k, strategy_cls=None):
    os.environ.update(RANK=str(dist.get_rank()), WORLD_SIZE=str(dist.get_world_size()),
                      LOCAL_RANK=str(dist.get_rank()), NODE_RANK="0")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "1")  # never dialled: the process group exists
    import lightning.pytorch as pl
    from lightning.pytorch.strategies import DDPStrategy
    strategy = (strategy_cls or DDPStrategy)(process_group_backend="gloo")
    return pl.Trainer(accelerator="cpu", devices=dist.get_world_size(), num_nodes=1, strategy=strategy,
                      max_epochs=1, accumulate_grad_batches=k, use_distributed_sampler=False, logger=False,
                      enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                      num_sanity_val_steps=0)


def _module(loop):
    import lightning.pytorch as pl

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = loop.module

        def training_step(self, batch, batch_idx):
            inputs, targets = batch
            return loop.loss(self.net(*inputs), targets)

        def on_after_backward(self):
            loop.after_backward()

        def configure_optimizers(self):
            return loop.optimizer(self.net.parameters())

        def optimizer_step(self, *args, **kwargs):
            super().optimizer_step(*args, **kwargs)
            loop.after_step()
    return Module()


class _Batches(torch.utils.data.Dataset):
    def __init__(self, batches):
        self.batches = batches

    def __len__(self):
        return len(self.batches)

    def __getitem__(self, i):
        return self.batches[i]


def _fit(loop, k, strategy_cls=None):
    loop.loss_divisor = k  # Lightning divides each micro-batch's loss by accumulate_grad_batches
    trainer = _trainer(k, strategy_cls)
    data = torch.utils.data.DataLoader(_Batches(loop.batches), batch_size=None, shuffle=False)
    trainer.fit(_module(loop), train_dataloaders=data)


def accumulate_4(loop):
    _fit(loop, 4)


accumulate_4.ddpsim_loop = True


def sync_every_microstep(loop):
    from lightning.pytorch.strategies import DDPStrategy

    class NoBlock(DDPStrategy):
        @contextlib.contextmanager
        def block_backward_sync(self):
            yield  # planted: the window's micro-batches are not kept from syncing

    _fit(loop, 4, NoBlock)


sync_every_microstep.ddpsim_loop = True


# Whole loops (--train-loop, python/ddpsim_torch/train_loop.py): Trainer.fit itself, with accumulate_grad_batches,
# over the token model's ragged batches. Nothing reports to ddpsim: the front end observes the forwards, the
# backwards and the optimizer it gave. Lightning divides every micro-batch's loss by accumulate_grad_batches,
# in the shorter last window of an epoch too, and steps that window at the epoch's end.
def _fit_loop(model, optimizer, batches, accumulation, loss_of):
    import lightning.pytorch as pl

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = model

        def training_step(self, batch, batch_idx):
            return loss_of(self.net, batch, batch_idx)

        def configure_optimizers(self):
            return optimizer
    data = torch.utils.data.DataLoader(_Batches(batches), batch_size=None, shuffle=False, collate_fn=lambda b: b)
    _trainer(accumulation).fit(Module(), train_dataloaders=data)


def accumulate_loop(model, optimizer, batches, accumulation):
    """Right: global tokens (token_losses.py), accumulate_grad_batches multiplied back."""
    import token_losses
    _fit_loop(model, optimizer, batches, accumulation, token_losses.global_tokens(batches, accumulation))


def accumulate_loop_mean(model, optimizer, batches, accumulation):
    """Each micro-batch's mean loss, Lightning dividing it by accumulate_grad_batches, in the tail too
    (Lightning-AI/pytorch-lightning #19987)."""
    import token_losses
    _fit_loop(model, optimizer, batches, accumulation, lambda net, b, i: token_losses.token_mean(net, b))
