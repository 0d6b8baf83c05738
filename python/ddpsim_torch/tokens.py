"""The token model on the front end's ranks (ddpsim's lm: ragged sequences,
a summed token loss; README "Check your training step"): the batches as a
training step sees them, the windows (zero_grad to zero_grad) the schedule
makes of its backwards, the factor each normalization intends, and the
factor a user's step really applied, read from the gradient it sent into
the model's output.

How that factor is read, exactly: every way of writing the token
cross-entropy (F.cross_entropy or log_softmax with nll_loss, reduction
"sum", "mean" or "none" then summed, ignore_index -100) ends in
log_softmax's backward, which gives each valid position's logit k other
than its target exp(out_k) * f, rounded once, f the number the position's
loss was multiplied by (the trainer's factor, with "mean"'s 1 / count in
it). The gradient of the plain sum (f = 1) gives exp(out_k) itself. So f is
a float32 with fl(g1_k * f) == g_k at every such element: found from their
ratio and confirmed bit for bit, never estimated. Positions of one
micro-batch with different factors (a per-sequence mean) have no single
one; a gradient that is no multiple of the token loss's at all (another
loss) is refused, not judged.
"""
import numpy as np
import torch
import torch.nn.functional as F

IGNORE = -100  # torch's default ignore_index, and ddpsim's padding targets (models/layers.h)


class TokenBatch:
    """One micro-batch of the token model, as a training step gets it.

    inputs: the token ids, a LongTensor [sequences, positions] (the model's argument);
    targets: the next tokens, IGNORE (-100) at padding;
    mask: targets != IGNORE;
    tokens: the valid tokens of this micro-batch (an int);
    rows: each sequence's valid tokens (a list of ints)."""

    def __init__(self, inputs, targets):
        self.inputs, self.targets = inputs, targets
        self.mask = targets != IGNORE
        self.rows = [int(n) for n in self.mask.sum(dim=1).tolist()]
        self.tokens = sum(self.rows)


class Window:
    """The window a micro-step belongs to (zero_grad to zero_grad: what .grad sums before a step), on this rank.

    batches: this rank's micro-batches of the window, in order (prefetched, as a trainer that normalizes by the
      window's tokens does); micro: this micro-step's place in it (0-based); accumulation: the run's longest
      window (a trainer's configured gradient_accumulation_steps; a shorter window is an epoch's tail);
    rank, world_size: torch.distributed's."""

    def __init__(self, batches, micro, accumulation, rank, world_size):
        self.batches, self.micro, self.accumulation = batches, micro, accumulation
        self.rank, self.world_size = rank, world_size
        self.state = {}  # the step's own, kept for the window's later micro-steps (a count gathered once)

    @property
    def micro_steps(self):
        return len(self.batches)

    @property
    def last(self):
        """Whether this is the window's last micro-step (where DDP syncs and the optimizer steps)."""
        return self.micro == len(self.batches) - 1


def windows(ops):
    """For each backward of ops, in order: (window, place in it, forward index); and each window's forward
    indices. A zero_grad right after another opens no window (loss_norm.c's rule)."""
    per_bwd, wins, forwards = [], [[]], 0
    for op in ops:
        if op == "fwd":
            forwards += 1
        elif op == "zero" and wins[-1]:
            wins.append([])
        elif op == "bwd":
            per_bwd.append((len(wins) - 1, len(wins[-1]), forwards - 1))
            wins[-1].append(forwards - 1)
    return per_bwd, wins


def intended(norm, nranks, window_tokens, micro_steps, tokens):
    """The factor norm intends (loss_norm.h), as ddpsim's reference rounds it: float32(num) / float32(den).
    window_tokens: the window's valid tokens on every rank; tokens: this micro-batch's."""
    if norm == "global-tokens":
        num, den = nranks, window_tokens
    elif norm == "micro-batch-mean":
        num, den = 1, micro_steps * tokens
    elif norm == "sum":
        num, den = nranks, 1
    else:
        raise ValueError("loss normalization %r" % norm)
    if den == 0:  # a micro-batch without a valid token: any factor weighs nothing
        return 0.0
    return float(np.float32(num) / np.float32(den))


class Run:
    """One job's token windows on one rank: what each backward belongs to, the intended factor of each, and the
    Window a training step gets. rows(rank, forward) gives any rank's sequences' valid tokens (every rank knows
    every rank's, as ddpsim's data is a function of the seed)."""

    def __init__(self, norm, ops, rank, nranks, rows, batch):
        self.norm, self.rank, self.nranks, self.batch = norm, rank, nranks, batch
        self.per_bwd, self.wins = windows(ops)
        self.accumulation = max(len(w) for w in self.wins)
        self.win_tokens = [sum(sum(rows(r, f)) for r in range(nranks) for f in w) for w in self.wins]
        self.rows = rows
        self.nbwd = 0
        self._windows = {}

    def next_backward(self):
        """The next backward's (window index, place in it, forward index, intended factor, its sequences' tokens)."""
        w, micro, fwd = self.per_bwd[self.nbwd]
        self.nbwd += 1
        rows = self.rows(self.rank, fwd)
        return w, micro, fwd, intended(self.norm, self.nranks, self.win_tokens[w], len(self.wins[w]), sum(rows)), rows

    def window(self, w, micro):
        """The Window of micro-step micro of window w, its batches this rank's (one object per window: what a
        step keeps in its state stays for the window's later micro-steps)."""
        if w not in self._windows:
            self._windows = {w: Window([TokenBatch(*self._io(f)) for f in self.wins[w]], micro, self.accumulation,
                                       self.rank, self.nranks)}
        self._windows[w].micro = micro
        return self._windows[w]

    def _io(self, fwd):
        inputs, targets = self.batch(fwd)
        return inputs[0], targets


def token_sum(logits, targets):
    """The plain token loss: the sum over valid positions of their cross-entropies (models/lm's)."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE,
                           reduction="sum")


class NotATokenLoss(Exception):
    """The gradient sent into the model's output is not a multiple of the token cross-entropy's."""


def _confirm(f, g1, g):
    """Whether float32 f gives g from g1 bit for bit: fl(g1 * f) == g at every element."""
    return bool(torch.equal(g1 * torch.tensor(f, dtype=torch.float32), g))


def _float_near(x, n=4):
    """The float32 values within n ulps of x (a double), nearest first."""
    base = np.float32(x)
    out, up, down = [base], base, base
    for _ in range(n):
        up, down = np.nextafter(up, np.float32(np.inf)), np.nextafter(down, np.float32(-np.inf))
        out += [up, down]
    return [float(v) for v in out]


def _nearest(values, x):
    return min(values, key=lambda c: (abs(c - x), c))


def factor_of(g, g1, targets):
    """The factor the trainer's loss applied to a micro-batch of sequences [B, T], from g (the gradient its
    backward sent into the logits [B, T, V]) and g1 (the plain token sum's, on the same logits): (factor, None)
    when one factor gives every valid position's gradient; (the first valid position's, (sequence, its
    factor)) for the first sequence whose positions no common factor gives (a per-sequence mean); (None, None)
    for a micro-batch without a valid token (nothing weighs it). NotATokenLoss when a position's gradient is
    no multiple of the token loss's, or a padding position has one."""
    V, T = g.shape[-1], targets.shape[-1]
    g, g1, targets = g.reshape(-1, V), g1.reshape(-1, V), targets.reshape(-1)
    valid = targets != IGNORE
    if not bool(valid.any()):
        return None, None
    if bool((g[~valid] != 0).any()):
        raise NotATokenLoss("a padding position (target %d) got a gradient: the loss weighs positions the token "
                            "loss ignores" % IGNORE)
    others = torch.ones_like(g, dtype=torch.bool)
    others[torch.arange(g.shape[0]), targets.clamp(min=0)] = False
    sets = []  # (position, the float32 factors that give its gradient bit for bit, the ratio's estimate)
    for i in torch.nonzero(valid).reshape(-1).tolist():
        a, b = g1[i][others[i]], g[i][others[i]]
        k = int(torch.argmax(a))
        if not float(a[k]) > 0:
            raise NotATokenLoss("position %d has no logit to read its factor from" % i)
        est = float(b[k]) / float(a[k])
        found = {c for c in _float_near(est) if _confirm(c, a, b)}
        if not found:
            raise NotATokenLoss("sequence %d, position %d: its gradient is not the token cross-entropy's times a "
                                "number (its largest logit says %.9g, the others do not agree)" % (i // T, i % T,
                                                                                                    est))
        sets.append((i, found, est))
    common = set.intersection(*(s for _, s, _ in sets))
    first = _nearest(sets[0][1], sets[0][2])
    if common:
        return _nearest(common, sets[0][2]), None
    for i, found, est in sets:
        if not found & sets[0][1]:
            return first, (i // T, _nearest(found, est))
    return first, (sets[-1][0] // T, _nearest(sets[-1][1], sets[-1][2]))  # pairwise met, no one value for all
