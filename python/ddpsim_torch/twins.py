"""The torch twins of ddpsim's models: the same parameter names, shapes,
order and math as models/mlp.c, models/branchy.c, models/attn.c,
models/bn.c (with BatchNorm's buffers) and models/tied.c (a tied weight under
reentrant checkpointing), and the
batches ddpsim prepared for them turned into (inputs, targets).

The twins do not have to give ddpsim's bits: the check replays the
reference on the gradients the twin's shadow computes (engine/verify/check.c).
They have to be the same model, so that a user's DDP meets what ddpsim's
scenarios were written for (find_unused heads, a tiny tensor, odd sizes,
rounding-noise gradients).
"""
import math
import re

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

FAMILIES = {"mlp": "32-64-64-16", "branchy": "8-16-4", "attn": "32-8-16", "lm": "32-8-16", "lm-equal": "32-8-16",
            "bn": "16-32-8", "tied": "16-32"}
_SPEC = re.compile(r"^(mlp|branchy|attn|lm-equal|lm|bn|tied)(?::([0-9]+(?:-[0-9]+)*))?$")
TOKEN_FAMILIES = ("lm", "lm-equal")  # a token loss: lm's ragged counts, lm-equal's all the same


def is_ddpsim_spec(spec):
    """Whether spec names one of ddpsim's own models (mlp:..., branchy, attn, lm, lm-equal, bn, tied), not
    MODULE:FUNC."""
    return bool(_SPEC.match(spec))


def _dims(spec):
    family, dims = _SPEC.match(spec).groups()
    return family, [int(d) for d in (dims or FAMILIES[family]).split("-")]


class MLP(nn.Sequential):
    """mlp:IN-H1-...-OUT: Linear, ReLU, ..., Linear (parameters "0.weight", "0.bias", "2.weight", ...)."""

    def __init__(self, dims):
        layers = []
        for i in range(len(dims) - 1):
            if i:
                layers.append(nn.ReLU())
            layers.append(nn.Linear(dims[i], dims[i + 1]))
        super().__init__(*layers)


class Branchy(nn.Module):
    """branchy:IN-H-OUT: h = tanh(trunk(x)); out = [branch & 1] head_a(h) + [branch & 2] head_b(h);
    "unused" is registered and never called."""

    def __init__(self, dims):
        super().__init__()
        i, h, o = dims
        self.trunk = nn.Linear(i, h)
        self.head_a = nn.Linear(h, o)
        self.head_b = nn.Linear(h, o)
        self.unused = nn.Linear(h, o)

    def forward(self, x, branch):
        h = torch.tanh(self.trunk(x))
        out = None
        if branch & 1:
            out = self.head_a(h)
        if branch & 2:
            yb = self.head_b(h)
            out = yb if out is None else out + yb
        return out


class _Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.q, self.k, self.v, self.proj = (nn.Linear(c, c) for _ in range(4))
        self.scale = 1.0 / math.sqrt(c)

    def forward(self, x):
        t = x.shape[1]
        q, k, v = self.q(x), self.k(x), self.v(x)
        att = (q @ k.transpose(-2, -1)) * self.scale
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        return self.proj(att @ v)


class _MLPBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.fc = nn.Linear(c, 4 * c)
        self.proj = nn.Linear(4 * c, c)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Attn(nn.Module):
    """attn:V-T-C: one pre-LayerNorm GPT-2 block, a single causal head, a head without bias."""

    def __init__(self, dims):
        super().__init__()
        v, t, c = dims
        self.wte = nn.Embedding(v, c)
        self.wpe = nn.Embedding(t, c)
        self.ln1 = nn.LayerNorm(c)
        self.attn = _Attention(c)
        self.ln2 = nn.LayerNorm(c)
        self.mlp = _MLPBlock(c)
        self.lnf = nn.LayerNorm(c)
        self.head = nn.Linear(c, v, bias=False)

    def forward(self, tokens):
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        x0 = self.wte(tokens) + self.wpe(pos)
        x1 = x0 + self.attn(self.ln1(x0))
        x2 = x1 + self.mlp(self.ln2(x1))
        return self.head(self.lnf(x2))


class BN(nn.Module):
    """bn:IN-H-OUT: fc2(tanh(bn(fc1(x)))), bn a BatchNorm1d in train mode: its running statistics are the
    buffers DDP's broadcast_buffers sends. They start as PyTorch's (0, 1, 0) on every rank."""

    def __init__(self, dims):
        super().__init__()
        i, h, o = dims
        self.fc1 = nn.Linear(i, h)
        self.bn = nn.BatchNorm1d(h)
        self.fc2 = nn.Linear(h, o)

    def forward(self, x):
        return self.fc2(torch.tanh(self.bn(self.fc1(x))))


class Tied(nn.Module):
    """tied:IN-H: an autoencoder whose decoder is its encoder's weight transposed, the encoder under reentrant
    activation checkpointing (1.13's default): enc.weight's gradient comes in two pieces, the decoder's, then
    the encoder's from the checkpoint's own backward (models/tied.c). DDP runs it with static_graph=True."""

    def __init__(self, dims):
        super().__init__()
        i, h = dims
        self.enc = nn.Linear(i, h)
        self.dec_bias = nn.Parameter(torch.zeros(i))

    def _encode(self, x):
        return torch.tanh(self.enc(x))

    def forward(self, x):
        import torch.utils.checkpoint as cp
        # reentrant checkpointing drops the parameters' gradients unless an input requires grad
        h = cp.checkpoint(self._encode, x.detach().requires_grad_(True), use_reentrant=True)
        return F.linear(h, self.enc.weight.t(), self.dec_bias)


def build(spec):
    """The twin of a ddpsim model spec."""
    family, dims = _dims(spec)
    return {"mlp": MLP, "branchy": Branchy, "attn": Attn, "lm": Attn, "lm-equal": Attn, "bn": BN,
            "tied": Tied}[family](dims)


def load_init(module, init_dir):
    """Every parameter from init_dir/<name>.npy (what ddpsim --prepare wrote), shapes checked."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            a = np.load("%s/%s.npy" % (init_dir, name))
            if tuple(a.shape) != tuple(p.shape):
                raise ValueError("%s/%s.npy has shape %s, the twin's parameter %s" % (init_dir, name, a.shape,
                                                                                        tuple(p.shape)))
            p.copy_(torch.from_numpy(a))


def batch(spec, inputs_dir, rank, index):
    """Forward index's (inputs, targets) on rank, from ddpsim's prepared batch files."""
    family, _ = _dims(spec)
    stem = "%s/rank%d/batch%d" % (inputs_dir, rank, index)
    x, y = np.load(stem + ".x.npy"), np.load(stem + ".y.npy")
    if family in ("attn",) + TOKEN_FAMILIES:  # lm: attn's network on ragged sequences, padding's targets -100
        return (torch.from_numpy(x.astype(np.int64)),), torch.from_numpy(y.astype(np.int64))
    if family == "branchy":
        branch = int(np.load(stem + ".branch.npy")[0])
        return (torch.from_numpy(x), branch), torch.from_numpy(y)
    return (torch.from_numpy(x),), torch.from_numpy(y)


def row_tokens(inputs_dir, rank, index):
    """Each sequence's valid tokens (targets other than -100) in forward index's batch of rank: the token model's
    counts, which every rank can read for every rank."""
    y = np.load("%s/rank%d/batch%d.y.npy" % (inputs_dir, rank, index))
    return [int(n) for n in (y != -100).sum(axis=1)]


def loss_of(spec):
    """The loss of ddpsim's model spec: lm's plain token sum (the trainer's factor comes on top, tokens.py), else
    default_loss."""
    if _dims(spec)[0] in TOKEN_FAMILIES:
        from .tokens import token_sum
        return token_sum
    return default_loss


def default_loss(output, targets):
    """The loss of ddpsim's models, and of a user model without --loss: cross-entropy (mean) when the
    targets are integers (logits [..., C] against [...]), mean squared error otherwise."""
    if not targets.is_floating_point():
        return F.cross_entropy(output.reshape(-1, output.shape[-1]), targets.reshape(-1))
    return F.mse_loss(output, targets)
