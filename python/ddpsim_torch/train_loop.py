"""--train-loop MODULE:FUNC: the user's whole training loop on the token
model, judged against what it intends (README "Check your training loop").

FUNC(model, optimizer, batches, accumulation) gets the model unwrapped (it
wraps it itself: torch's DDP, accelerator.prepare, ...), the run's
optimizer over its parameters (the reference's step: the loop may hand it
to its framework, which may wrap it), this rank's micro-batches
(tokens.TokenBatch, in order) and the accumulation count it is configured
with, and trains as the user's trainer does: when it syncs, normalizes,
steps and zeroes is its own. The recording's ops are what it intends:
windows of `accumulation` micro-batches and a shorter tail, each ending in
a sync, a step and a zero_grad (api.py loop_schedule). What the loop did
is observed, never driven:

  a forward of the module    (a forward pre-hook) must take the next batch;
                             the shadow takes the module's parameters then
  its backward               the gradient sent into the output (rank.py
                             OutputGrad): the local gradients and the factor,
                             as --train-step's, and the wrapper's reductions
                             while autograd ran it
  optimizer.step/zero_grad   (wrapped on the instance the loop was given)
                             once a window's last backward is done, the first
                             of them is where its .grad is read: what the
                             step would take
  the next window's forward  the window is over: its .grad read if nothing
  (or the loop's return)     read it yet (a tail the loop never stepped),
                             and the parameters as the step left them (or as
                             they were, if the loop did not step)

So a loop that never steps its tail, steps too often, does not sync where
a window ends or normalizes by the wrong count fails in `ddpsim check`
like any implementation, at the check where it shows.
"""

import torch

from . import tokens
from .loading import BadInput


class _Observer:
    def __init__(self, rank, j, job, module, names, shadow, rec, run, caught, counter):
        self.rank, self.j, self.job, self.module = rank, j, job, module
        self.names, self.shadow, self.rec, self.run, self.caught = names, shadow, rec, run, caught
        self.counter = counter  # the reductions made while autograd ran a backward (None: not counted)
        self.params = [p for _, p in module.named_parameters()]
        self.spec = rank.cfg["train_loop"]
        self.nfwd = 0           # forwards the loop has run
        self.pending = None     # the backward not yet recorded: its forward's index
        self.window = 0         # the window the loop is in (by its forwards)
        self.grabbed = False    # the window's .grad has been read
        self.done_windows = 0   # windows closed (grab and step recorded)
        self.batches = rank_batches(run)

    # ---- the loop's events ----
    def on_forward(self, module, inputs):
        self._close_backward()
        if self.nfwd >= len(self.run.per_bwd):
            raise BadInput("--train-loop %s ran a forward of the model past its %d micro-batches" % (
                self.spec, len(self.run.per_bwd)))
        w = self.run.per_bwd[self.nfwd][0]
        while self.done_windows < w:  # the windows before this forward's are over
            self._close_window()
        given = self.batches[self.nfwd]
        if not inputs or not torch.is_tensor(inputs[0]) or not torch.equal(inputs[0], given.inputs):
            raise BadInput("--train-loop %s: forward %d of the model did not take micro-batch %d's inputs (the "
                           "loop must run the batches it is given, in order, one forward each)" % (
                               self.spec, self.nfwd, self.nfwd))
        with torch.no_grad():  # the shadow computes this micro-step where the implementation does
            self.shadow.load([p.detach() for p in self.params], self.module.named_buffers())
        self.caught.take()
        self.pending = self.nfwd
        self.nfwd += 1
        self.rank.mark(self.j, self._op_of(self.nfwd - 1))
        return None

    def before_step_or_zero(self):
        if self.caught.grads:  # a backward still to come (Lightning zeroes between a forward and its backward)
            self._close_backward()
        if self._window_complete() and not self.grabbed:
            self._grab()

    def finish(self):
        self._close_backward()
        if self.nfwd != len(self.run.per_bwd):
            raise BadInput("--train-loop %s returned after %d forwards of the model; it was given %d micro-batches "
                           "(one forward and one backward each)" % (self.spec, self.nfwd, len(self.run.per_bwd)))
        while self.done_windows < len([w for w in self.run.wins if w]):
            self._close_window()
        self.rec.params(self.names, [p.detach() for p in self.params], end=True)

    # ---- what they mean ----
    def _op_of(self, fwd):
        return [i for i, op in enumerate(self.job["ops"]) if op == "fwd"][fwd]

    def _window_complete(self):
        """The current window's backwards are all recorded."""
        if self.done_windows >= len(self.run.wins):
            return False
        last = self.run.wins[self.done_windows][-1]
        return self.pending is None and self.nfwd > last

    def _close_backward(self):
        if self.pending is None:
            return
        fwd, self.pending = self.pending, None
        forwards, grads = self.caught.take()
        if len(grads) != 1:
            raise BadInput("--train-loop %s: micro-batch %d's forward had %d backward%s through the model's output "
                           "before the loop went on: each micro-batch gets one backward" % (
                               self.spec, fwd, len(grads), "" if len(grads) == 1 else "s"))
        rows = self.run.next_backward()[4]
        batch = self.batches[fwd]
        self.rec.tokens(rows)
        self.rank.record_output_grad(self.shadow, self.rec, self.names, (batch.inputs,), batch.targets, grads[0],
                                     self.counter.take() if self.counter else None,
                                     "--train-loop %s, micro-batch %d" % (self.spec, fwd))

    def _grab(self):
        self.rec.grads(self.names, [p.grad for p in self.params])
        self.grabbed = True

    def _close_window(self):
        """Window done_windows is over: its .grad read if nothing read it, and the parameters after its step."""
        if not self.grabbed:
            self._grab()
        self.rec.params(self.names, [p.detach().clone() for p in self.params])
        self.done_windows += 1
        self.grabbed = False


def rank_batches(run):
    """This rank's micro-batches, in forward order, as the loop gets them."""
    return [tokens.TokenBatch(*run._io(f)) for f in range(len(run.per_bwd))]


class _Counter:
    """The reductions the wrapper makes while autograd runs a backward, over the whole loop (a dispatch mode
    entered around it), taken backward by backward."""

    def __init__(self, mode):
        self.mode = mode
        self.seen = (0, 0)

    def take(self):
        now = (self.mode.n, self.mode.scatters)
        got = (now[0] - self.seen[0], now[1] - self.seen[1])
        self.seen = now
        return got


def _wrap_method(obj, name, before):
    """obj.name, on the instance, calling before() first (the loop's framework may wrap obj: it calls this)."""
    inner = getattr(obj, name)

    def method(*args, **kwargs):
        before()
        return inner(*args, **kwargs)
    setattr(obj, name, method)


def run(rank, j, job, module, names, shadow, rec, token_run, optimizer, caught, counting):
    """One job on one rank: the loop runs; the recording follows what it did against the intended ops.
    counting: a dispatch mode that counts reductions made inside autograd's backward (None: not counted)."""
    from . import loading
    fn = loading.load(rank.cfg["train_loop"], "--train-loop")
    obs = _Observer(rank, j, job, module, names, shadow, rec, token_run, caught, None)
    hook = module.register_forward_pre_hook(obs.on_forward)
    _wrap_method(optimizer, "step", obs.before_step_or_zero)
    _wrap_method(optimizer, "zero_grad", obs.before_step_or_zero)
    try:
        if counting is None:
            fn(module, optimizer, obs.batches, rank.cfg["accumulation"])
        else:
            with counting() as mode:
                mode.in_backward_only = True
                obs.counter = _Counter(mode)
                fn(module, optimizer, obs.batches, rank.cfg["accumulation"])
    finally:
        hook.remove()
    obs.finish()
