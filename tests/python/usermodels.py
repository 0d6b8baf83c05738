"""User models for the front end's tests: what a framework's model has
that ddpsim's own do not. --model usermodels.py:build --data
usermodels.py:batch."""
import torch
import torch.distributed as dist
from torch import nn

VOCAB, SEQ, WIDTH = 40, 12, 16


class TiedConvNet(nn.Module):
    """An embedding whose weight is tied to the output layer, a convolution over the sequence, a transformer
    block, and a layer only some micro-steps use (find_unused_parameters)."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.conv = nn.Conv1d(WIDTH, WIDTH, kernel_size=3, padding=1)
        self.block = nn.TransformerEncoderLayer(WIDTH, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True)
        self.sometimes = nn.Linear(WIDTH, WIDTH)
        self.out = nn.Linear(WIDTH, VOCAB, bias=False)
        self.out.weight = self.embed.weight  # tied

    def forward(self, tokens, use_sometimes):
        x = self.embed(tokens)
        x = x + torch.relu(self.conv(x.transpose(1, 2))).transpose(1, 2)
        x = self.block(x)
        if use_sometimes:
            x = x + torch.tanh(self.sometimes(x))
        return self.out(x)


def build():
    return TiedConvNet()


def batch(rank, index):
    """Rank- and step-distinct tokens. The layer `sometimes` runs on every rank in micro-steps 0, 4, 8, ...
    and on rank 1 in micro-step 2: with windows of three micro-steps it is used by one rank in a syncing
    backward (0-2), and only earlier in a window (4-6), where PyTorch before 2.4 leaves each rank its own
    gradient and 2.4 averages it."""
    g = torch.Generator().manual_seed(1000 * rank + index)
    tokens = torch.randint(0, VOCAB, (3, SEQ), generator=g)
    targets = torch.roll(tokens, -1, dims=1)
    return (tokens, index % 4 == 0 or (rank == 1 and index == 2)), targets


def build_per_rank():
    """A model built differently on every rank (its own seed): bad input, the ranks do not start equal."""
    torch.manual_seed(dist.get_rank() + 100)
    return TiedConvNet()


def mse_loss(output, targets):
    return ((output.float() - nn.functional.one_hot(targets, VOCAB).float()) ** 2).mean()


class TwiceEncoded(nn.Module):
    """A shared encoder applied twice in one forward: once plainly, once under reentrant activation
    checkpointing (use_reentrant, the 1.13 default), as an auxiliary loss's second input often is. The
    checkpointed use runs its own backward inside the outer one, so the encoder's parameters get their
    gradient in two parts, and a hook on them fires twice in one backward (DeepSpeed #8224's shape). PyTorch's
    DDP runs it only with static_graph=True, which counts the hooks of the first iteration and marks a
    parameter ready at the last one."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh())
        self.head = nn.Linear(WIDTH, 4)

    def forward(self, x, aux):
        import torch.utils.checkpoint as cp
        main = self.head(self.enc(x))
        second = cp.checkpoint(self.enc, aux, use_reentrant=True)
        return main + second.mean(dim=1, keepdim=True)


def build_twice():
    return TwiceEncoded()


def batch_twice(rank, index):
    g = torch.Generator().manual_seed(7000 + 100 * rank + index)
    x = torch.randn(3, WIDTH, generator=g)
    aux = torch.randn(3, WIDTH, generator=g, requires_grad=True)  # reentrant checkpointing needs an input that
    return (x, aux), torch.randn(3, 4, generator=g)                # requires grad, or it drops the gradient


def mse_twice(output, targets):
    return ((output - targets) ** 2).mean()
