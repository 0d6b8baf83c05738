"""A training loop that owns its iteration, checked: a framework's Trainer
(Lightning's `Trainer.fit` with `accumulate_grad_batches`) decides itself
when it runs forward, backward, no_sync, optimizer.step and zero_grad, so
the front end cannot drive those ops as rank.py does for a wrapper. Instead
the wrap function, marked `ddpsim_loop = True`, is given a Loop and runs
its training on it; the loop reports what it did at two points, and the
recording is made there:

  loop.after_backward()  each backward has finished (Lightning: the
                         on_after_backward hook): the plain local gradient
                         of that micro-step (the shadow's, on the same
                         batch) and the .grad of every grab the schedule
                         has right after that backward
  loop.after_step()      the optimizer stepped: the parameters

The run's --schedule says what PyTorch's DDP semantics expect of that
loop (where no_sync is, where zero_grad is); the loop's events are matched
against it as they come, and one that does not fit (a step where the
schedule has a backward, a backward too many, a run that ends early) is
bad input naming the op. The loop's own no_sync and zero_grad are not
taken on trust: they show in the gradients, which `ddpsim check` judges
against the reference as it judges any recording.
"""
import time

from . import loading
from .loading import BadInput, Unsupported
from .optimizer import step_optimizer


class Loop:
    """What a training loop is given, on each rank (the process group initialised).

    module: the model, ddpsim's twin or the user's (the loop wraps it as it likes);
    batches: this rank's micro-batches in the order the schedule's forwards take them, each
      (inputs tuple, targets): a loop must consume them in that order, one per forward;
    loss(output, targets): the run's loss;
    lr, momentum: the reference's step when it is torch.optim.SGD, with this learning rate and momentum (0.0:
      none), which the loop's optimizer must be;
    optimizer(params): the reference's step built over params, whatever it is (SGD with lr and momentum, or
      torch.optim.AdamW under --optimizer adamw): a loop that builds its optimizer with it follows every
      scenario; under AdamW one that does not is not run (its step would be SGD);
    rank, world_size;
    loss_divisor: set by the loop when it divides each micro-batch's loss before its backward (Lightning's
      automatic optimization divides by accumulate_grad_batches): the shadow's local gradient is then that of
      loss / loss_divisor, computed the same way, and the reference sums those (default 1)."""

    def __init__(self, driver, module, batches, loss, lr, rank, world_size, momentum=0.0, step=None):
        self._driver = driver
        self.module, self.batches, self.loss, self.lr, self.momentum = module, batches, loss, lr, momentum
        self.rank, self.world_size = rank, world_size
        self.loss_divisor = 1
        self._step = step  # (class, kwargs): rank.step_optimizer's

    def optimizer(self, params):
        """The run's step, a torch.optim optimizer over params."""
        self._driver.built_optimizer = True
        cls, kwargs = self._step
        return cls(params, **kwargs)

    def after_backward(self, grads=None):
        """A backward has finished: call it once per backward, after it and before anything else touches .grad.
        grads: where the loop's gradients are not in .grad (DeepSpeed ZeRO keeps them in its partitioned
        buffers), {parameter name: tensor or None}, or a function returning that, called only when the
        schedule has a grab right here (DeepSpeed's safe_get_full_grad is a collective); None: .grad."""
        self._driver.backward_done(self.loss_divisor, grads)

    def after_step(self):
        """The optimizer has stepped: call it once per optimizer step, right after it."""
        if self._driver.adamw and not self._driver.built_optimizer:
            raise Unsupported("the step is torch.optim.AdamW, and --wrap %s built its optimizer without "
                              "loop.optimizer(params)" % self._driver.wrap)
        self._driver.step_done()


class _Driver:
    """The schedule's ops, consumed as the loop's events come."""

    def __init__(self, rank, j, job, module, batches, loss_fn, names, shadow, rec):
        self.rank, self.j, self.ops = rank, j, job["ops"]
        self.batches, self.loss_fn, self.names, self.shadow, self.rec = batches, loss_fn, names, shadow, rec
        self.params = [p for _, p in module.named_parameters()]
        self.at = 0  # the next op of the schedule
        self.nfwd = 0
        self.wrap = rank.cfg["wrap"]
        self.since = None  # when the last event came (the loop's set-up before the first is not an op)
        self.adamw, self.built_optimizer = bool(job.get("adamw")), False

    def _progress(self):
        """The supervisor sees the loop move through the schedule (launch.py: its watchdog and deadlock test count
        from the ops; until the first event the rank is setting up), the time between events as an op's."""
        now = time.monotonic()
        if self.since is not None:
            self.rank.note_op_time(now - self.since)
        self.since = now
        self.rank.mark(self.j, self.at)

    def _mismatch(self, event, why):
        where = "op %d (%s)" % (self.at, self.ops[self.at]) if self.at < len(self.ops) else "its end"
        return BadInput("the training loop of --wrap %s %s where the schedule has %s: %s; the schedule must be the "
                        "one the loop runs (its windows, where it steps and zeroes)" % (self.wrap, event, where, why))

    def backward_done(self, divisor, grads=None):
        """Every op up to this backward (no_sync's enter and exit, the forward, a zero_grad) is the loop's; then
        the local gradient, then the grabs that follow it."""
        fwd = None
        while self.at < len(self.ops) and self.ops[self.at] != "bwd":
            op = self.ops[self.at]
            if op == "fwd":
                fwd = self.nfwd
                self.nfwd += 1
            elif op == "grab":
                raise self._mismatch("ran a backward", "a loop's grabs come right after a backward")
            elif op not in ("enter", "exit", "zero"):
                raise self._mismatch("ran a backward", "no backward comes before it")
            self.at += 1
        if self.at == len(self.ops):
            raise self._mismatch("ran a backward", "no backward is left")
        if fwd is None:
            raise self._mismatch("ran a backward", "that backward has no forward of its own")
        self.at += 1
        inputs, targets = self.batches[fwd]
        self.rank.record_local(self.shadow, self.rec, self.names, inputs, targets, self.loss_fn, None, divisor)
        values = None
        while self.at < len(self.ops) and self.ops[self.at] == "grab":
            if values is None:
                values = self._grads(grads)
            self.rec.grads(self.names, values)
            self.at += 1
        self._progress()

    def _grads(self, grads):
        if grads is None:
            return [p.grad for p in self.params]
        given = grads() if callable(grads) else grads
        if not isinstance(given, dict) or any(n not in self.names for n in given):
            raise BadInput("the training loop of --wrap %s gave after_backward(grads=...) %s: it must be a dict "
                           "{parameter name: tensor or None} over the model's names (%s)" %
                           (self.wrap, type(given).__name__ if not isinstance(given, dict) else
                            "the names %s" % sorted(n for n in given if n not in self.names)[:3],
                            ", ".join(self.names[:4]) + (", ..." if len(self.names) > 4 else "")))
        return [given.get(n) for n in self.names]

    def step_done(self):
        while self.at < len(self.ops) and self.ops[self.at] in ("enter", "exit"):
            self.at += 1
        if self.at == len(self.ops) or self.ops[self.at] != "step":
            raise self._mismatch("stepped the optimizer", "no step comes there")
        self.at += 1
        whole = [p.detach() for p in self.params]
        self.shadow.load(whole)
        self.rec.params(self.names, whole)
        self._progress()

    def finish(self):
        rest = [op for op in self.ops[self.at:] if op not in ("enter", "exit", "zero")]
        if rest:
            while self.ops[self.at] in ("enter", "exit", "zero"):
                self.at += 1
            raise self._mismatch("returned", "%d more ops to run, %s first" % (len(rest), rest[0]))
        self.rec.params(self.names, [p.detach() for p in self.params], end=True)


def run(rank, j, job, module, batch, loss_fn, names, shadow, rec):
    """One job on one rank: the wrap function runs its loop on a Loop, and the recording follows its events (the
    plan refused uneven inputs and join before any rank started)."""
    fn = loading.load(rank.cfg["wrap"], "--wrap")
    batches = [batch(i) for i in range(sum(1 for op in job["ops"] if op == "fwd"))]
    driver = _Driver(rank, j, job, module, batches, loss_fn, names, shadow, rec)
    fn(Loop(driver, module, batches, loss_fn, job["lr"], rank.rank, rank.nranks, job.get("momentum", 0.0),
            step_optimizer(job)))
    driver.finish()
