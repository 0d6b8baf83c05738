"""One rank of a check: build the model, hand it to the user's wrapper, run
the schedule through the wrapper's own forward, no_sync() and backward, and
record (record.py) the wrapper's .grad at every grab and its parameters
after every step, and every micro-step's plain local gradient, computed by
a shadow copy of the module without DDP, with the same parameters and the
same batch. The semantics are not here: `ddpsim check` replays the C
reference on what this records."""
import copy
import datetime
import hashlib
import inspect
import os
import time
import traceback

import torch
import torch.distributed as dist

from . import _rank_process, clipping, ddpsim, loading, loop, record, scaling, tokens, train_loop, twins
from .loading import BadInput, Unsupported
from .optimizer import check_optimizer, step_optimizer

# Shared progress, one row per rank (launch.py reads it).
ROW = 6
OP, STATE, SLOWEST, JOB, SHADOW_S, RECORD_S = range(ROW)
RUNNING, JOB_DONE, FINISHED = 0.0, 1.0, 2.0
STARTING = -2.0  # OP before the rank has joined the process group

# The keyword arguments of DistributedDataParallel a wrap function may take, from the run's options.
DDP_KWARGS = ("find_unused_parameters", "bucket_cap_mb", "gradient_as_bucket_view", "static_graph")


def wrap_kwargs(wrap, ddp, momentum=0.0, optimizer=None):
    """The DDP options the wrap function accepts (by name, or all of them through **kwargs); for a wrapper that
    builds its own optimizer, the step's momentum when it names a momentum argument, and the step itself,
    step_optimizer's (class, kwargs), when it names an optimizer argument."""
    try:
        named = inspect.signature(wrap).parameters
    except (TypeError, ValueError):
        named = {}
    extra = {"momentum": momentum} if "momentum" in named else {}
    if "optimizer" in named and optimizer is not None:
        extra["optimizer"] = optimizer
    values = {"find_unused_parameters": ddp["find_unused_parameters"],
              "bucket_cap_mb": ddp["bucket_cap"] / (1024.0 * 1024.0),
              "gradient_as_bucket_view": ddp["gradient_as_bucket_view"]}
    if ddp.get("static_graph"):
        values["static_graph"] = True  # only when asked: a wrapper that takes **kwargs may not know it
    try:
        sig = inspect.signature(wrap)
    except (TypeError, ValueError):
        return {}
    if any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values()):
        return dict(values, **extra)
    return dict({k: v for k, v in values.items() if k in sig.parameters}, **extra)


def register_comm_hook(wrapped, hook):
    """--comm-hook: PyTorch's built-in hook (ddp_comm_hooks/default_hooks.py) on a wrapper that takes one, as
    DistributedDataParallel.register_comm_hook does; a wrapper without register_comm_hook compresses (or not)
    itself, and the option tells ddpsim's reference what it does."""
    if hook == "none" or not callable(getattr(wrapped, "register_comm_hook", None)):
        return
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    fn = {"allreduce": default_hooks.allreduce_hook, "fp16": default_hooks.fp16_compress_hook,
          "bf16": getattr(default_hooks, "bf16_compress_hook", None)}[hook]
    if fn is None:
        raise BadInput("--comm-hook bf16: this torch has no bf16_compress_hook")
    try:
        wrapped.register_comm_hook(None, fn)
    except RuntimeError as e:
        if "only be called once" not in str(e):
            raise  # else the wrapper registered its own hook, which the option describes


def note_own_hook(wrapped, job):
    """A DDP whose wrap function registered a communication hook itself while the run says none: its name
    (DDP's logging data keeps it, 1.13 and 2.x) beside the recording, for the report's hint (api.py)."""
    logging = getattr(wrapped, "_get_ddp_logging_data", None)
    if job["ddp"].get("comm_hook", "none") != "none" or not callable(logging) or dist.get_rank() != 0:
        return
    name = logging().get("comm_hook")
    if name:
        os.makedirs(job["record"], exist_ok=True)
        with open(os.path.join(job["record"], "comm_hook.txt"), "w") as f:
            f.write(str(name) + "\n")


def _digest(t):
    return hashlib.sha1(t.detach().to("cpu").contiguous().numpy().tobytes()).hexdigest()


def check_same_start(named, rank, nranks):
    """Every rank's parameters the same bits before the wrapper sees them: a model built differently per rank
    is bad input (DDP's broadcast would hide it, and the recorded init would be rank 0's alone)."""
    mine = [(n, _digest(p)) for n, p in named]
    every = [None] * nranks
    dist.all_gather_object(every, mine)
    for r in range(1, nranks):
        for (name, d0), (_, dr) in zip(every[0], every[r]):
            if d0 != dr:
                raise BadInput("the model's parameters differ across ranks at the start: %s on rank %d is not rank "
                               "0's (build the model from a seed, or load the same weights on every rank)" % (name, r))
        if len(every[r]) != len(every[0]):
            raise BadInput("the model has %d parameter tensors on rank 0 and %d on rank %d" %
                           (len(every[0]), len(every[r]), r))


def map_params(named, wrapped):
    """The wrapper's parameters in the order of `named` (the module's, taken before wrapping): the module's own
    tensors when the wrapper keeps them (DDP, a thunder-style wrapper), else the wrapper's parameter whose name
    ends with the module's. A wrapper that put flat parameters in their place (FSDP1's FlatParameter with
    use_orig_params=False, DeepSpeed's flat buffers) is refused: ddpsim compares parameter by parameter."""
    own = [p for _, p in named]
    theirs = list(wrapped.parameters()) if hasattr(wrapped, "parameters") else []
    ids = {id(p) for p in theirs}
    if theirs and all(id(p) in ids for p in own):
        return own
    wnamed = list(wrapped.named_parameters()) if hasattr(wrapped, "named_parameters") else []
    out = []
    for n, p in named:
        match = [q for wn, q in wnamed if (wn == n or wn.endswith("." + n)) and q.shape == p.shape]
        if len(match) == 1:
            out.append(match[0])
            continue
        names = [m for m, _ in named]
        if wnamed and len(wnamed) < len(named) and not any(wn == m or wn.endswith("." + m)
                                                            for wn, _ in wnamed for m in names):
            raise BadInput("the wrapper replaced the module's %d parameters by %d flat one%s (%s): a flattened "
                           "layout, as FSDP1's FlatParameter with use_orig_params=False. ddpsim compares parameter "
                           "by parameter, by the module's names, and reads no flat layout (FSDP1 shards one with "
                           "use_orig_params=True too); FSDP1's NO_SHARD, and FSDP2's fully_shard, whose DTensors "
                           "need nothing, are read" %
                           (len(named), len(wnamed), "" if len(wnamed) == 1 else "s",
                            ", ".join("%s of %d elements" % (wn, q.numel()) for wn, q in wnamed[:3])))
        raise BadInput("the wrapped module's parameters cannot be matched to the model's: %s has %d candidates "
                       "among the wrapper's named_parameters()" % (n, len(match)))
    return out


def join_context(wrapped, optimizer, divide_by_initial_world_size):
    """The module's join(); with the wrapper's own optimizer when that is Joinable too (ZeroRedundancyOptimizer:
    its step broadcasts, so a rank that ran out must shadow it), Join over both, as PyTorch's documentation of
    uneven inputs with ZeroRedundancyOptimizer does (torch/distributed/algorithms/join.py)."""
    from torch.distributed.algorithms.join import Join, Joinable
    if optimizer is not None and isinstance(optimizer, Joinable) and isinstance(wrapped, Joinable):
        return Join([wrapped, optimizer], divide_by_initial_world_size=divide_by_initial_world_size)
    return wrapped.join(divide_by_initial_world_size=divide_by_initial_world_size)


class _ReductionCounter:
    """Counts the reductions (all-reduce, reduce-scatter, reduce) that reach torch's dispatcher as c10d ops, as
    torch's CommDebugMode does (torch/distributed/_tools: DDP's reducer, FSDP2 and torch.distributed's own calls
    all go through it from 2.0), without its module tracking (which breaks under reentrant checkpointing)."""

    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        class Mode(TorchDispatchMode):
            n = scatters = 0
            in_backward_only = False

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                name = str(getattr(func, "overloadpacket", func))
                if name.startswith("c10d.") and any(k in name for k in ("allreduce", "reduce_scatter", "reduce_")) \
                        and not (self.in_backward_only and torch._C._current_graph_task_id() == -1):
                    self.n += 1
                    self.scatters += "allreduce" not in name  # a reduce-scatter or a reduce to one rank
                return func(*args, **(kwargs or {}))
        self.mode = Mode

    def __call__(self, backward, loss, in_backward_only=False):
        with self.mode() as m:
            m.in_backward_only = in_backward_only
            backward(loss)
        return m.n, m.scatters


def _counter():
    """The counter where collectives are dispatcher ops (torch 2.x), else None: 1.13's process groups are not."""
    ops = getattr(torch.ops, "c10d", None)
    try:
        if ops is None or not hasattr(ops, "allreduce_"):
            return None
    except RuntimeError:
        return None
    return _ReductionCounter()


_COUNTER = _counter()


def counted_backward(backward, loss, in_backward_only=False):
    """The wrapper's backward, and how many reductions it issued, and how many of them were reduce-scatters: what
    ddpsim check holds against DDP's none in a backward that does not sync (a mode's own rule for sharded
    recordings); None where torch cannot count. in_backward_only: only those made while autograd runs a
    backward (a training step's own all-reduce of its token count, before its backward, is not DDP's)."""
    if _COUNTER is None:
        backward(loss)
        return None
    if in_backward_only and not hasattr(torch._C, "_current_graph_task_id"):
        backward(loss)
        return None
    return _COUNTER(backward, loss, in_backward_only)


def _is_dtensor(t):
    return t is not None and type(t).__name__ == "DTensor" and hasattr(t, "to_local")


def full(t):
    """A tensor whole: a DTensor (FSDP2's sharded parameter) gathered from every rank (a collective: every rank
    calls this at the same op), anything else as it is."""
    return t.full_tensor() if _is_dtensor(t) else t


def _runs(index):
    """Flat element indices, sorted, as [[start, count], ...] (one pass of tensor ops: a shard of dim 0 is one
    run, and a tensor of millions of elements is no Python loop)."""
    if index.numel() == 0:
        return []
    breaks = torch.nonzero(index[1:] - index[:-1] != 1).reshape(-1) + 1
    starts = torch.cat([torch.zeros(1, dtype=breaks.dtype), breaks])
    ends = torch.cat([breaks, torch.tensor([index.numel()], dtype=breaks.dtype)])
    return [[int(index[a]), int(b - a)] for a, b in zip(starts.tolist(), ends.tolist())]


def _local_part(g):
    """A DTensor gradient as what this rank holds of it: the full-shape tensor with its local shard in place
    (zeros elsewhere, never read) and the flat element ranges of that shard."""
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
    shape, offset = compute_local_shape_and_global_offset(g.shape, g.device_mesh, g.placements)
    local = g.to_local()
    whole = torch.zeros(g.shape, dtype=local.dtype)
    region = tuple(slice(o, o + n) for o, n in zip(offset, shape))
    if local.numel() == 0:
        return whole, []
    whole[region] = local.detach().to("cpu")
    index = torch.arange(whole.numel()).reshape(g.shape)[region].reshape(-1)
    return whole, _runs(index)


def grab_values(wrapped, names, params):
    """What this rank holds of every .grad at a grab: (values, held). values[i] is parameter i's gradient as a
    full-shape tensor (or None); held maps a parameter to the flat element ranges this rank holds of it, or is
    None when it holds every element of every one (record.h held.json). The gradient is the wrapper's
    ddpsim_grads() {name: tensor or None} where it has one (FSDP2's adapter gives the unsharded local sum while
    gradient sync is off), else .grad; a DTensor holds its local shard; a wrapper's ddpsim_grad_shards()
    {name: True or [(start, count), ...]} says what it holds of each, the parameters it leaves out none."""
    own = getattr(wrapped, "ddpsim_grads", None)
    grads = own() if callable(own) else {}
    values, held, partial = [], {}, False
    for name, p in zip(names, params):
        g = grads[name] if name in grads else p.grad
        if _is_dtensor(g):
            g, ranges = _local_part(g)
            partial = partial or sum(c for _, c in ranges) != g.numel()
        else:
            ranges = [[0, p.numel()]]
        values.append(g)
        held[name] = ranges
    said = getattr(wrapped, "ddpsim_grad_shards", None)
    if callable(said):
        held, partial = _said_shards(said(), {n: p.numel() for n, p in zip(names, params)}), True
    return values, ({n: r for n, r in held.items() if r} if partial else None)


def check_whole(names, shapes, tensors, what):
    """Each tensor (or None) of the model's shape: a flat shard where a parameter was (FSDP1 with
    use_orig_params=True keeps the module's parameters as views of its flat parameter's local shard) is refused,
    saying what ddpsim needs instead."""
    for name, shape, t in zip(names, shapes, tensors):
        if t is not None and tuple(t.shape) != tuple(shape):
            raise BadInput("the wrapper's %s of %s has shape %s where the model's is %s: a flat shard of it, as "
                           "FSDP1 with use_orig_params=True keeps it (each parameter a view of its slice of the "
                           "rank's flat shard). ddpsim compares whole tensors: give the whole gradient by name "
                           "(ddpsim_grads()) and the whole parameters, or use FSDP2's fully_shard, whose DTensors "
                           "need nothing" % (what, name, tuple(t.shape), tuple(shape)))


def _said_shards(said, counts):
    if not isinstance(said, dict):
        raise BadInput("ddpsim_grad_shards() returned a %s: it must be a dict {parameter name: True or "
                       "[(start, count), ...]}" % type(said).__name__)
    held = {}
    for name, ranges in said.items():
        if name not in counts:
            raise BadInput("ddpsim_grad_shards() names %r, not a parameter of the model (%s)" %
                           (name, ", ".join(list(counts)[:4]) + (", ..." if len(counts) > 4 else "")))
        if ranges is True:
            ranges = [(0, counts[name])]
        try:
            held[name] = [[int(a), int(c)] for a, c in ranges if int(c) > 0]
        except (TypeError, ValueError):
            raise BadInput("ddpsim_grad_shards()[%r] is %r: True or [(start, count), ...]" % (name, ranges))
    return held


class Shadow:
    """A copy of the module without DDP, with the same parameters, that computes a micro-step's plain local
    gradient on the same batch, and the pieces a parameter's gradient arrives in: one per AccumulateGrad, two or
    more when a backward runs inside the backward (reentrant checkpointing) and the parameter is used on both
    sides of it. Nothing is copied for the usual single piece: .grad starts None each micro-step, so when a
    second piece comes, .grad holds the first one exactly."""

    def __init__(self, module):
        self.module = copy.deepcopy(module)
        self.params = [p for _, p in self.module.named_parameters()]
        self.pieces, self.calls = [[] for _ in self.params], [0] * len(self.params)
        for k, p in enumerate(self.params):
            p.register_hook(self._piece_hook(k, p))

    def _piece_hook(self, k, p):
        def hook(g):
            self.calls[k] += 1
            if self.calls[k] == 2:
                self.pieces[k].append(p.grad.detach().clone())
            if self.calls[k] >= 2:
                self.pieces[k].append(g.detach().clone())
        return hook

    def local(self, inputs, targets, loss_fn, divisor=1, scale=None, plant=None):
        """The local gradients of loss_fn(module(inputs), targets), divided by divisor as the training loop
        divides it before its backward (a tensor divided by a number, as Lightning does), or None where a
        parameter got none; the pieces are in self.pieces. scale: the loss times it first, as GradScaler.scale
        multiplies (a float32 tensor); plant: the inf or NaN the implementation's backward got, put where it
        was (scaling.Planter: the same autograd order, the same first gradient)."""
        for k, p in enumerate(self.params):
            p.grad = None
            self.pieces[k].clear()
            self.calls[k] = 0
        loss = loss_fn(self.module(*inputs), targets)
        if scale is not None:
            loss = loss * torch.full((), scale, dtype=torch.float32)
        planter = scaling.Planter(self.params, plant) if plant is not None else None
        try:
            (loss / divisor if divisor != 1 else loss).backward()
        finally:
            if planter:
                planter.remove()
        return [p.grad for p in self.params]

    def local_at(self, inputs, targets, grad_out):
        """The local gradients of a backward that sent grad_out into the module's output (a training step's own
        loss, whatever it was: the same backward below the output, so the same bits), and the gradient the
        plain token sum sends there (tokens.factor_of reads the step's factor from the two)."""
        for k, p in enumerate(self.params):
            p.grad = None
            self.pieces[k].clear()
            self.calls[k] = 0
        out = self.module(*inputs)
        o = out.detach().requires_grad_(True)
        plain, = torch.autograd.grad(tokens.token_sum(o, targets), o)
        out.backward(grad_out)
        return [p.grad for p in self.params], plain

    def load(self, params, named_buffers=()):
        """The implementation's parameters (and buffers) after a step or a join: the next forwards' too."""
        with torch.no_grad():
            for s, p in zip(self.params, params):
                s.copy_(p)
            for (_, s), (_, b) in zip(self.module.named_buffers(), named_buffers):
                s.copy_(b)


class OutputGrad:
    """The gradient a training step's backward sends into the module's output (its loss's, whatever the step
    computed), caught by a hook on the output of each forward while armed."""

    def __init__(self, module):
        self.grads, self.forwards = [], 0
        module.register_forward_hook(self._forward)

    def _forward(self, module, inputs, out):
        if torch.is_tensor(out) and out.requires_grad:
            self.forwards += 1
            out.register_hook(lambda g: self.grads.append(g.detach().clone()))

    def take(self):
        """(forwards, the gradients caught) since the last take."""
        got = (self.forwards, self.grads)
        self.grads, self.forwards = [], 0
        return got


class TrainStep:
    """--train-step MODULE:FUNC: FUNC(model, batch[, window]) computes the micro-batch's loss from the wrapped
    model's output with the trainer's normalization and calls backward (tokens.TokenBatch, tokens.Window)."""

    def __init__(self, spec):
        self.spec, self.fn = spec, loading.load(spec, "--train-step")
        try:
            positional = [p for p in inspect.signature(self.fn).parameters.values()
                          if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
        except (TypeError, ValueError):
            positional = []
        self.with_window = len(positional) >= 3 or any(p.kind == p.VAR_POSITIONAL for p in positional)

    def __call__(self, model, batch, window):
        return self.fn(model, batch, window) if self.with_window else self.fn(model, batch)


class Rank:
    def __init__(self, rank, nranks, cfg, progress):
        self.rank, self.nranks, self.cfg, self.progress = rank, nranks, cfg, progress
        self.row = rank * ROW

    def note_op_time(self, took):
        """An op's time, for the supervisor's deadlock test (the slowest op so far)."""
        if took > self.progress[self.row + SLOWEST]:
            self.progress[self.row + SLOWEST] = took

    def mark(self, job, op, state=RUNNING):
        self.progress[self.row + JOB] = job
        self.progress[self.row + OP] = op
        self.progress[self.row + STATE] = state

    def build(self, job):
        """The module (twin with ddpsim's init, or the user's), its data and its loss."""
        model = job["model"]
        if twins.is_ddpsim_spec(model):
            module = twins.build(model)
            twins.load_init(module, os.path.join(job["inputs"], "init"))
            return (module, lambda i: twins.batch(model, job["inputs"], self.rank, i), twins.loss_of(model))
        torch.manual_seed(job["seed"])
        module = loading.load(model, "--model")()
        if not isinstance(module, torch.nn.Module):
            raise BadInput("--model %s returned a %s, not a torch.nn.Module" % (model, type(module).__name__))
        data = loading.load(job["data"], "--data")
        loss = loading.load(job["loss"], "--loss") if job["loss"] else twins.default_loss

        def batch(i):
            got = data(self.rank, i)
            if not isinstance(got, (tuple, list)) or len(got) != 2:
                raise BadInput("--data %s: batch(%d, %d) must return (inputs, targets)" % (job["data"], self.rank, i))
            inputs, targets = got
            return (tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)), targets
        return module, batch, loss

    def wrap(self, module, job):
        """The wrapped module, and the wrapper's own optimizer when wrap returned (module, optimizer)."""
        fn = loading.load(self.cfg["wrap"], "--wrap")
        wrapped = fn(module, **wrap_kwargs(fn, job["ddp"], job.get("momentum", 0.0), step_optimizer(job)))
        optimizer = None
        if isinstance(wrapped, tuple):
            if len(wrapped) != 2 or not callable(getattr(wrapped[1], "step", None)):
                raise BadInput("--wrap %s returned a tuple; it must be (module, optimizer), the optimizer with "
                               "step() and zero_grad()" % self.cfg["wrap"])
            wrapped, optimizer = wrapped
        if wrapped is None:
            raise BadInput("--wrap %s returned None; it must return the wrapped module" % self.cfg["wrap"])
        if not callable(getattr(wrapped, "no_sync", None)):
            raise BadInput("--wrap %s returned a %s without no_sync(): the wrapped module must have a no_sync() "
                           "context manager, as DistributedDataParallel has" % (self.cfg["wrap"],
                                                                                 type(wrapped).__name__))
        if not callable(wrapped):
            raise BadInput("--wrap %s returned a %s that cannot be called as the module" %
                           (self.cfg["wrap"], type(wrapped).__name__))
        register_comm_hook(wrapped, job["ddp"].get("comm_hook", "none"))
        note_own_hook(wrapped, job)
        return wrapped, optimizer

    def record_local(self, shadow, rec, names, inputs, targets, loss_fn, reductions, divisor=1, scale=None,
                     plant=None):
        """Micro-step m's plain local gradient, from the shadow, into the recording."""
        t1 = time.monotonic()
        grads = shadow.local(inputs, targets, loss_fn, divisor, scale, plant)
        t2 = time.monotonic()
        rec.local(names, grads, shadow.pieces, reductions)
        self.progress[self.row + SHADOW_S] += t2 - t1
        self.progress[self.row + RECORD_S] += time.monotonic() - t2

    def _backward(self, backward, loss, params, plant):
        """The wrapper's backward, with the run's planted inf or NaN (--fault inf|nan) put into its first gradient:
        counted_backward's reductions. A wrapper whose gradients never pass through its parameters' hooks cannot
        be planted into: said, rather than check a run without its fault."""
        planter = scaling.Planter(params, plant) if plant is not None else None
        try:
            reductions = counted_backward(backward, loss)
        finally:
            if planter:
                planter.remove()
        if planter and not planter.fired:
            raise Unsupported("--fault %s: the wrapper's backward computed no gradient through its parameters' hooks "
                              "(Tensor.register_hook), so the front end cannot plant the inf or NaN into it" %
                              ("nan" if plant != plant else "inf"))
        return reductions

    def _token_backward(self, run, step_fn, caught, wrapped, backward, params, shadow, rec, names, pending, loss_fn,
                        op):
        """A backward of the token model: the user's training step (--train-step: its own forward, loss,
        normalization and backward; its factor read from the gradient it sent into the output), or the front
        end's own step with the intended factor. Recorded: the micro-batch's counts, the factor, the local
        gradients the backward made at it."""
        inputs, targets, loss = pending
        w, micro, fwd, intended, rows = run.next_backward()
        rec.tokens(rows)
        if step_fn is None:
            f = torch.full((), intended, dtype=torch.float32)
            rec.factor(intended)
            reductions = self._backward(backward, loss * f, params, None)
            self.record_local(shadow, rec, names, inputs, targets, loss_fn, reductions, scale=intended)
            return
        window = run.window(w, micro)
        caught.take()
        reductions = counted_backward(lambda _: step_fn(wrapped, window.batches[micro], window), None, True)
        forwards, grads = caught.take()
        if forwards != 1 or len(grads) != 1:
            raise BadInput("--train-step %s at op %d ran %d forward%s of the model and %d backward%s through its "
                           "output: a step runs one of each, for its micro-batch (call backward on every "
                           "micro-batch's loss, an empty one's too)" % (step_fn.spec, op, forwards,
                                                                       "" if forwards == 1 else "s", len(grads),
                                                                       "" if len(grads) == 1 else "s"))
        self.record_output_grad(shadow, rec, names, inputs, targets, grads[0], reductions,
                                "--train-step %s at op %d" % (step_fn.spec, op))

    def record_output_grad(self, shadow, rec, names, inputs, targets, grad, reductions, where):
        """A user's backward of the token loss that sent grad into the model's output (--train-step's, or a
        --train-loop's): its factor read and its local gradients made by the shadow from grad, both recorded.
        A gradient that is no token cross-entropy's is refused, said with where."""
        t1 = time.monotonic()
        local, plain = shadow.local_at(inputs, targets, grad)
        try:
            factor, mixed = tokens.factor_of(grad, plain, targets)
        except tokens.NotATokenLoss as e:
            raise Unsupported("%s: %s. ddpsim reads the factor of a token cross-entropy (F.cross_entropy, or "
                              "log_softmax with nll_loss, with ignore_index -100, any reduction, times numbers); "
                              "another loss is not checked" % (where, e))
        t2 = time.monotonic()
        rec.factor(factor, mixed)
        rec.local(names, local, shadow.pieces, reductions)
        self.progress[self.row + SHADOW_S] += t2 - t1
        self.progress[self.row + RECORD_S] += time.monotonic() - t2

    @staticmethod
    def _unscale(scaler, optimizer, rec):
        """GradScaler.unscale_ at the first clip or step since the last step, and what it found, recorded."""
        found = scaler.unscale(optimizer) if scaler else None
        if found is not None:
            rec.unscale(found)

    def run_job(self, j, job):
        self.mark(j, -1)
        module, batch, loss_fn = self.build(job)
        named = list(module.named_parameters())
        names = [n for n, _ in named]
        check_same_start(named, self.rank, self.nranks)
        shadow = Shadow(module)
        root = job["record"]
        impl = record.safe_name(self.cfg["impl"])
        buffers = list(module.named_buffers())
        if self.rank == 0:
            record.write_tensors(os.path.join(root, "init"), named + buffers)
        rec = record.Recorder(root, self.rank, impl, [p.shape for _, p in named])
        if buffers:
            # What the module held as its forward began, after any broadcast of the wrapper's (DDP's comes in
            # its own forward, before it calls the module), and as it ended: ddpsim check replays
            # broadcast_buffers on them. Hooked after the shadow was copied, so only this module records.
            module.register_forward_pre_hook(lambda m, i: rec.buffers("seen", list(m.named_buffers())))
            module.register_forward_hook(lambda m, i, o: rec.buffers("after", list(m.named_buffers())))
        shapes = [tuple(p.shape) for _, p in named]  # before the wrapper: FSDP1 reshapes the module's own
        if self.rank == 0:
            record.write_manifest(root, self.nranks, impl, self.cfg["recorded_by"], job["model"], named,
                                  job["ddp"], job["zero_grad"], job["lr"], job["ops"], buffers,
                                  job.get("joins", ()), job.get("uneven", ()), job.get("shard"),
                                  job.get("params_only", False), job.get("momentum", 0.0), job.get("adamw"),
                                  job.get("clips", ()), job.get("loss_scale"), job.get("planted", ()),
                                  job.get("loss_norm"))
        token_run = step_fn = caught = None
        if job.get("loss_norm"):  # the token model: each backward's loss normalized (tokens.py)
            token_run = tokens.Run(job["loss_norm"], job["ops"], self.rank, self.nranks,
                                   lambda r, f: twins.row_tokens(job["inputs"], r, f), batch)
            if self.cfg.get("train_step") or self.cfg.get("train_loop"):
                step_fn = TrainStep(self.cfg["train_step"]) if self.cfg.get("train_step") else None
                caught = OutputGrad(module)  # after the shadow's copy: only this module's forwards
        if self.cfg.get("train_loop"):  # the user's whole loop: observed against the intended ops (train_loop.py)
            cls, kwargs = step_optimizer(job)
            counting = _COUNTER.mode if _COUNTER is not None and hasattr(torch._C, "_current_graph_task_id") else None
            train_loop.run(self, j, job, module, names, shadow, rec, token_run, cls(module.parameters(), **kwargs),
                           caught, counting)
            return
        if self.cfg.get("loop"):  # a training loop of its own (a framework's Trainer) runs the ops: loop.py
            loop.run(self, j, job, module, batch, loss_fn, names, shadow, rec)
            return
        wrapped, optimizer = self.wrap(module, job)
        params = map_params(named, wrapped)
        own_optimizer = optimizer is not None
        if optimizer is None:
            cls, kwargs = step_optimizer(job)
            optimizer = cls(params, **kwargs)
        else:
            check_optimizer(optimizer, job, self.cfg["wrap"])
        # A wrapper that synchronizes in its own backward call (DeepSpeed's engine.backward) says so.
        backward = getattr(wrapped, "ddpsim_backward", None) or (lambda loss: loss.backward())
        # ... and one whose zero_grad is the module's (fairscale's ShardedDataParallel resets its reduction state
        # there, and its documentation zeroes through the model) says so too.
        zero_grad = getattr(wrapped, "ddpsim_zero_grad", None) or optimizer.zero_grad
        # A wrapper that holds shards (a mode, or ddpsim_grad_shards) must bring a scaler that sees them all.
        sharded = bool(job.get("shard")) or callable(getattr(wrapped, "ddpsim_grad_shards", None))
        scaler = scaling.Scaler(job["loss_scale"], wrapped, sharded) if job.get("loss_scale") else None
        contexts, pending, nfwd = [], None, 0
        set_to_none = job["zero_grad"] == "set_to_none"
        skipped = ddpsim.skipped_ops(job.get("uneven", ()), self.rank)
        joins = {b["enter"]: b for b in job.get("joins", ())}
        clips = {c[0]: c for c in job.get("clips", ())}
        joined = None
        for i, op in enumerate(job["ops"]):
            self.mark(j, i)
            t0 = time.monotonic()
            if i in skipped:
                # This rank ran out of an uneven repetition: its loop is over. Inside join its with-block's
                # __exit__ shadows its peers (at join_exit). Without join it stops here, as ddpsim's ranks do, and
                # its peers wait for it in their next collective: the launcher names the deadlock.
                if joined is None:
                    del wrapped, optimizer
                    return
                rec.skip(op)
                continue
            if op == "join_enter":
                if not callable(getattr(wrapped, "join", None)):
                    raise Unsupported("the schedule has join{...}, and --wrap %s returned a %s without join(): "
                                      "the wrapped module must be Joinable, as DistributedDataParallel is" %
                                      (self.cfg["wrap"], type(wrapped).__name__))
                joined = join_context(wrapped, own_optimizer and optimizer,
                                      joins[i]["divide_by_initial_world_size"])
                joined.__enter__()
            elif op == "join_exit":
                joined.__exit__(None, None, None)  # the shadowing, then every rank takes the last joiner's model
                joined = None
                with torch.no_grad():
                    whole = [full(p) for p in params]
                shadow.load(whole, module.named_buffers())
            elif op == "enter":
                cm = wrapped.no_sync()
                cm.__enter__()
                contexts.append(cm)
            elif op == "exit":
                contexts.pop().__exit__(None, None, None)
            elif op == "fwd":
                inputs, targets = batch(nfwd)
                nfwd += 1
                # a training step of the user's runs its forward with its backward (at the bwd op that follows)
                pending = (inputs, targets, None if step_fn else loss_fn(wrapped(*inputs), targets))
            elif op == "bwd" and token_run:
                self._token_backward(token_run, step_fn, caught, wrapped, backward, params, shadow, rec, names,
                                     pending, loss_fn, i)
            elif op == "bwd":
                inputs, targets, loss = pending
                scale = scaler.get_scale() if scaler else None
                if scaler:
                    rec.scale(scale)
                plant = scaling.planted_value(job, self.rank, i)
                reductions = self._backward(backward, scaler.scale(loss) if scaler else loss, params, plant)
                self.record_local(shadow, rec, names, inputs, targets, loss_fn, reductions, scale=scale,
                                  plant=plant)
            elif op == "grab":
                t1 = time.monotonic()
                values, held = grab_values(wrapped, names, params)
                check_whole(names, shapes, values, "gradient")
                rec.grads(names, values, held)
                self.progress[self.row + RECORD_S] += time.monotonic() - t1
            elif op == "zero":
                zero_grad(set_to_none=set_to_none)
            elif op == "clip":
                _, max_norm, kind = clips[i]
                self._unscale(scaler, optimizer, rec)  # GradScaler's recipe: unscale_, then clip
                rec.clip(clipping.clip(wrapped, params, max_norm, kind))
            elif op == "step":
                if scaler:
                    self._unscale(scaler, optimizer, rec)
                    scaler.step(optimizer)  # the step unless an inf or NaN was found, then the scale's update
                else:
                    optimizer.step()
                t1 = time.monotonic()
                with torch.no_grad():
                    whole = [full(p) for p in params]
                    check_whole(names, shapes, whole, "parameter")
                shadow.load(whole)
                rec.params(names, whole)
                self.progress[self.row + RECORD_S] += time.monotonic() - t1
            self.note_op_time(time.monotonic() - t0)
        rec.params(names, [full(p) for p in params], end=True)
        del wrapped, optimizer


def _report(errors, message, code):
    errors.put(message)
    errors.close()
    errors.join_thread()  # the message is in the pipe before the process goes
    os._exit(code)


def main(rank, nranks, cfg, progress, errors, barrier):
    """The rank process: every job in turn, a barrier (not a collective) between jobs; an error goes to the
    launcher as ("bad" | "fault", rank, message) and the rank exits non-zero."""
    _rank_process.become_rank()
    torch.set_num_threads(cfg["threads"])
    r = Rank(rank, nranks, cfg, progress)
    try:
        dist.init_process_group("gloo", init_method="file://" + cfg["store"], rank=rank, world_size=nranks,
                                timeout=datetime.timedelta(seconds=max(cfg["timeout"], 1.0) + 30))
        r.mark(cfg["first_job"], -1)
        for j in range(cfg["first_job"], len(cfg["jobs"])):
            job = cfg["jobs"][j]
            r.run_job(j, job)
            r.mark(j, len(job["ops"]), JOB_DONE)
            barrier.wait()
        r.mark(len(cfg["jobs"]) - 1, 0, FINISHED)
    except Unsupported as e:
        _report(errors, ("unsupported", rank, str(e)), 2)
    except BadInput as e:
        _report(errors, ("bad", rank, str(e)), 2)
    except BaseException as e:  # anything else the user's code or torch raised: a fault, said with where
        tb = traceback.extract_tb(e.__traceback__)
        where = ("%s:%d" % (os.path.basename(tb[-1].filename), tb[-1].lineno)) if tb else "?"
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        _report(errors, ("fault", rank, "%s: %s (at %s)" % (type(e).__name__, first, where)), 3)
    os._exit(0)  # not the interpreter's teardown: the process group is left to the launcher
