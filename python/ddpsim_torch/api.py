"""check(): the whole check of a DDP wrapper, as one call (the pytest
entry point, and what `python3 -m ddpsim_torch` runs)."""
import os
import shlex
import shutil
import sys
import tempfile
import time

import torch

from . import ci, ddpsim, launch, loading, progress, semantics, torchrun, twins
from .loading import BadInput
from .result import Result, battery_result

__all__ = ["check"]

SCRATCH_MIN_FREE = 4 << 30  # bytes free in /dev/shm before a recording goes there


def _run_args(ranks, seed, batch, lr, model, schedule, scenario, find_unused, bucket_view, bucket_cap, zero,
              comm_hook, static_graph, optimizer=None, clip=None, loss_scale=None, faults=(), loss_norm=None):
    """ddpsim's options for --prepare: the schedule, scenario and DDP options it checks and expands (zero_grad
    too: whether a step may come between a forward and its backward depends on it)."""
    args = ["--ranks", str(ranks), "--seed", str(seed), "--lr", repr(float(lr)),
            "--zero-grad", "none" if zero == "set_to_none" else "zeros"]
    if scenario:
        args += ["--scenario", scenario]
    else:  # the defaults are ddpsim's: its model for a schedule, the classic scenario's schedule for a model
        if model is None or twins.is_ddpsim_spec(model):
            args += (["--model", model] if model else []) + ["--batch", str(batch)]
        else:
            args += ["--model", "mlp:1-1", "--batch", "1"]  # a user model: only the ops and options are used
        if schedule:
            args += ["--schedule", schedule]
    if find_unused:
        args.append("--find-unused")
    if bucket_view:
        args.append("--bucket-view")
    if bucket_cap is not None:
        args += ["--bucket-cap", str(bucket_cap)]
    if comm_hook != "none":
        args += ["--comm-hook", comm_hook]
    if static_graph:
        args.append("--static-graph")
    if optimizer is not None:
        args += ["--optimizer", optimizer]
    if clip is not None:
        args += ["--clip", str(clip)]
    if loss_scale is not None:
        args += ["--loss-scale", str(loss_scale)]
    for f in faults:
        args += ["--fault", f]
    if loss_norm is not None:
        args += ["--loss-norm", loss_norm]
    # This torch's rule, for a scenario that brings static_graph itself (tied) too.
    return args + ["--static-graph-rule", semantics.static_graph_rule()]


def check(wrap, ranks=2, model=None, data=None, loss=None, schedule=None, scenario=None, seed=1, batch=4, lr=0.1,
          tolerance=None, timeout=60.0, find_unused=False, bucket_view=False, bucket_cap=None, zero_grad=None,
          threads=1, keep=None, ddpsim_path=None, comm_hook="none", static_graph=False, find_unused_rule=None,
          allow_unsynced_comm=False, shard=None, params_only=None, optimizer=None, clip=None, loss_scale=None,
          fault=(), html=None, train_step=None, loss_norm=None, train_loop=None, accumulation=3, micro_batches=8):
    """Check the DDP wrapper `wrap` against ddpsim's reference DDP; returns a Result (never raises for the
    verdict: bad input is Result.exit_code 2, a fault 3).

    wrap: a function (or 'MODULE:FUNC', 'path/file.py:FUNC') taking the module (the ranks' gloo process
      group already initialised) and returning the wrapped module, which must have no_sync(); it gets
      find_unused_parameters, bucket_cap_mb and gradient_as_bucket_view when it accepts them.
    model: a ddpsim spec ('mlp:32-64-64-16', 'branchy', 'attn'; the default mlp) or a function returning a
      torch.nn.Module (called after torch.manual_seed(seed) on every rank), with data(rank, index) ->
      (inputs, targets) and optionally loss(output, targets).
    schedule / scenario: ddpsim's schedule grammar or one scenario; neither: the whole scenario battery
      (each scenario's ops and options on a user model).
    tolerance: as `ddpsim check` (default bitwise with 2 ranks, the order bound above).
    zero_grad: None (this torch's optimizer.zero_grad() default), 'zeros' or 'none'.
    comm_hook: 'none', 'allreduce', 'fp16' or 'bf16': PyTorch's built-in communication hook, registered on a
      wrapper that has register_comm_hook (a DDP); a wrapper without it is taken to do the same itself.
    static_graph: DDP's static_graph=True (passed to a wrap function that takes it); the scenarios torch 1.13
      cannot run with it are left out of the battery, and the header says why.
    find_unused_rule: which parameters find_unused syncs: 'window' (used anywhere in the window, PyTorch
      >= 2.4) or 'syncing-backward' (< 2.4); None: this torch's DDP's (a wrapper of its own may follow the
      other rule on any torch).
    wrap may return (module, optimizer): the wrapper's own optimizer (ZeroRedundancyOptimizer, OSS, ZeRO)
      steps and zeroes instead of ddpsim's SGD; its parameters must be SGD's with lr (checked after every
      step). A wrapped module with ddpsim_grad_shards() (a sharded one) says which elements of each .grad this
      rank holds: only those are compared (README, "Check a sharded implementation"). A wrap function marked
      ddpsim_loop = True is a training loop that owns its iteration (a framework's Trainer): it is given a
      loop.Loop instead of the module, runs the schedule's ops itself and reports them (give schedule).
    allow_unsynced_comm: reductions in a backward that does not sync are not a divergence (on torch 2.x the
      front end counts the wrapper's reductions in every backward; PyTorch's DDP makes none there).
    shard: the wrapper's sharded data parallelism, 'zero1', 'zero2', 'fsdp', 'hsdp' or 'hsdp:RxS' (R replicas
      of shard groups of S ranks), when its gradients follow that mode's rule rather than DDP's (ZeRO-2 reduces
      every micro-step, HSDP defers its replica all-reduce): the recording says so and ddpsim check applies it
      (README, "Check a sharded implementation"). Default: the wrap function's attribute ddpsim_shard, if any.
    params_only: the wrapper's optimizer averages the parameters over the ranks after each rank's local SGD
      step (model averaging: PeriodicModelAverager with period 1, post-local SGD) instead of averaging the
      gradients: no .grad is compared (the grabs are left out), every step's parameters are, against DDP's
      step within the proven bound of that averaging (README, "Model averaging"). Default: the wrap function's
      attribute ddpsim_params_only, if any.
    optimizer: 'sgd', 'momentum[:M]' (M 0.9 when not given) or 'adamw[:beta1=B,beta2=B,eps=E,wd=W]' (torch's
      defaults, but weight decay 0.01, when not given; the lr is lr's): the step, torch.optim.SGD plain or with
      momentum M, or torch.optim.AdamW, the front end's own optimizer and the reference's; a wrapper's own
      optimizer must step the same (a wrap function that takes a momentum argument is given the momentum, one
      that takes an optimizer argument the step as (class, kwargs)), or the scenario is not run. Default:
      plain, except where a scenario of the battery asks for momentum (momentum) or AdamW (adamw).
    clip: 'MAX' or 'MAX:inf': clip_grad_norm_ before every step a training loop clips (ddpsim's --clip; a schedule
      may say clip:MAX itself): the wrapper's own clip_grad_norm_ (or ddpsim_clip_grad_norm_) when it has one,
      else torch's over the wrapped module's parameters; every rank's coefficient is checked (README "Clipping").
    loss_scale: 'S' or 'dynamic[:INIT,GROWTH,BACKOFF,INTERVAL]' (ddpsim's --loss-scale): torch's GradScaler around
      the step, the wrapper's own (ddpsim_grad_scaler; a sharded wrapper must have one) or torch.amp.GradScaler
      (torch 1.13: GradScaler's arithmetic by the front end); every backward's scale and every unscale's finding
      are checked (README "Loss scaling and inf/NaN"). The battery's loss-scale scenario brings its own.
    fault: 'inf:rank=R,op=K' or 'nan:rank=R,op=K' (one, or a list): an inf or NaN put into element 0 of the first
      gradient rank R's backward at op K completes, which the scaler must find on every rank (needs loss_scale).
    train_step: a function (or 'MODULE:FUNC') step(model, batch[, window]) that computes a micro-batch's loss
      from the wrapped model's output with the trainer's own normalization and calls backward, on ddpsim's
      token model (ragged sequences: batch is a tokens.TokenBatch, window a tokens.Window); the factor it
      applied is read from the gradient it sent into the output and judged against loss_norm's at every
      backward (README "Check your training step"). The battery then runs the token model's scenarios.
    loss_norm: what the training step or loop intends: 'global-tokens' (default), 'micro-batch-mean' or 'sum'.
    train_loop: a function (or 'MODULE:FUNC') loop(model, optimizer, batches, accumulation), your whole training
      loop (wrap may be None): it wraps the model itself and runs micro_batches ragged batches of the token
      model with its accumulation count, syncing, normalizing, stepping and zeroing as your trainer does; it is
      judged against windows of `accumulation` micro-batches and a shorter tail, each synced and stepped
      (README "Check your training loop").
    keep: a directory to keep the recordings in (default: a temporary one, removed).
    html: a path: the report as one self-contained HTML page there (ddpsim check's heatmaps of every scenario,
      under a table of them; README "A page to look at")."""
    args = dict(wrap=wrap, ranks=ranks, model=model, data=data, loss=loss, schedule=schedule, scenario=scenario,
                seed=seed, batch=batch, lr=lr, tolerance=tolerance, timeout=timeout, find_unused=find_unused,
                bucket_view=bucket_view, bucket_cap=bucket_cap, zero_grad=zero_grad, threads=threads, keep=keep,
                comm_hook=comm_hook, static_graph=static_graph, find_unused_rule=find_unused_rule,
                allow_unsynced_comm=allow_unsynced_comm, ddpsim_path=ddpsim_path, shard=shard,
                params_only=params_only, optimizer=optimizer, clip=clip, loss_scale=loss_scale,
                fault=[fault] if isinstance(fault, str) else list(fault or ()), html=html, train_step=train_step,
                loss_norm=loss_norm, train_loop=train_loop, accumulation=accumulation, micro_batches=micro_batches)
    plan = None
    try:
        plan = Plan(args)
        if torchrun.launched_by_torchrun():
            raise BadInput("check() runs its own ranks; under torchrun run python3 -m ddpsim_torch")
        try:
            outcomes, timing = launch.run(plan.cfg, ranks, timeout, [j["name"] for j in plan.jobs])
        except BadInput as e:
            return _with_command(Result.failed(2, "BAD INPUT", str(e), plan.header, plan.command), plan)
        r = _with_command(plan.finish(outcomes, timing), plan)
        if html:
            try:
                ci.write_html(r, html, r.command)
            except OSError as e:
                return Result.failed(3, "FAULT", "cannot write the HTML page %s: %s" % (html, e.strerror),
                                     r.report, r.command)
        return r
    except BadInput as e:
        return _with_command(Result.failed(2, "BAD INPUT", str(e), plan.header if plan else "",
                                           plan.command if plan else None), plan)
    finally:
        if plan:
            plan.close()


def _with_command(r, plan):
    """r, saying the command line that replays it when the plan got that far."""
    if r.command is None and plan is not None:
        r.command = plan.command
    return r


def check_under_torchrun(**args):
    """The same check as the ranks torchrun started (torchrun.py); returns the exit code."""
    holder = []

    def plan(nranks):
        if args["ranks"] not in (None, nranks):
            raise BadInput("--ranks %d, but torchrun started %d ranks" % (args["ranks"], nranks))
        p = Plan(dict(args, ranks=nranks))
        holder.append(p)
        return p.cfg, p.finish
    try:
        return torchrun.run(plan, args["timeout"])
    finally:
        for p in holder:
            p.close()


_REARMING_WHY = ("a syncing backward there runs through a later forward than the one that armed it, and PyTorch's "
                 "DDP requires both to use the same parameters (reducer.cpp prepare_for_backward); --scenario NAME "
                 "runs it anyway")


class Plan:
    """Everything decided before any rank starts: the options checked, the wrap function importable, every
    job's inputs prepared by ddpsim, the header and the command that replays it."""

    def __init__(self, a):
        self.a = a
        self.root = None
        self.header, self.command = "", None
        self.binary = ddpsim.find(a["ddpsim_path"])
        if not isinstance(a["ranks"], int) or a["ranks"] < 1:  # the most ranks: ddpsim --prepare says
            raise BadInput("--ranks %r: at least 1" % (a["ranks"],))
        if not isinstance(a["threads"], int) or a["threads"] < 1:
            raise BadInput("--threads %r: at least 1" % (a["threads"],))
        self.train_loop = loading.as_spec(a.get("train_loop"), "--train-loop")
        if self.train_loop:
            a = self.a = dict(a, schedule=_loop_schedule(self.train_loop, a), model=a.get("model") or "lm")
        elif a["wrap"] is None:
            raise BadInput("--wrap MODULE:FUNC (or --train-loop MODULE:FUNC): nothing to check")
        self.wrap = loading.as_spec(a["wrap"], "--wrap") if a["wrap"] is not None else self.train_loop
        fn = loading.load(self.wrap, "--train-loop" if self.wrap == self.train_loop else "--wrap")  # before any rank
        self.shard = _shard_spec(a.get("shard") or getattr(fn, "ddpsim_shard", None), a["ranks"])
        self.loop = bool(getattr(fn, "ddpsim_loop", False))  # a training loop of its own: loop.py
        self.params_only = bool(a.get("params_only") if a.get("params_only") is not None else
                                getattr(fn, "ddpsim_params_only", False))  # model averaging
        self.train_step = loading.as_spec(a.get("train_step"), "--train-step")
        if self.train_step:
            loading.load(self.train_step, "--train-step")  # importable and callable, before any rank starts
        self._check_train_step(a)
        if self.params_only and self.shard:
            raise BadInput("--params-only with --shard %s: model averaging keeps whole parameters on every rank, "
                           "which the sharded modes do not" % self.shard["mode"])
        if self.loop and (a["schedule"] is None or a["scenario"] is not None):
            raise BadInput("--wrap %s is a training loop (ddpsim_loop): it decides itself when it syncs, steps "
                           "and zeroes, so it runs no battery; give --schedule with the ops it runs" % self.wrap)
        if self.shard and (a["find_unused"] or a["bucket_view"] or a["static_graph"] or a["comm_hook"] != "none"):
            raise BadInput("--shard %s: --find-unused, --bucket-view, --static-graph and --comm-hook are DDP's "
                           "options, which the sharded reference does not model (it reduces every parameter)" %
                           self.shard["mode"])
        bad = [f for f in a.get("fault") or () if not str(f).startswith(("inf:", "nan:"))]
        if bad:
            raise BadInput("--fault %s: the front end plants an inf or a NaN into a rank's backward (inf:rank=R,op=K, "
                           "nan:rank=R,op=K); ddpsim's other faults (crash, hang, flip, ...) strike its own ranks" %
                           bad[0])
        self.model = loading.as_spec(a["model"], "--model")  # None: ddpsim's choice (--prepare's manifest says)
        self.data, self.loss = loading.as_spec(a["data"], "--data"), loading.as_spec(a["loss"], "--loss")
        self.user_model = self.model is not None and not twins.is_ddpsim_spec(self.model)
        self._check_model()
        if a["zero_grad"] not in (None, "zeros", "none"):
            raise BadInput("--zero-grad %s: zeros or none (default: this torch's zero_grad())" % a["zero_grad"])
        if a["comm_hook"] not in ("none", "allreduce", "fp16", "bf16"):
            raise BadInput("--comm-hook %s: none, allreduce, fp16 or bf16" % a["comm_hook"])
        if a["comm_hook"] == "bf16" and not semantics.bf16_hook_runs():
            raise BadInput("--comm-hook bf16: torch %s's DDP takes bf16_compress_hook only when built with CUDA 11+ "
                           "and NCCL 2.10+ (distributed.py _check_comm_hook), so not on gloo here; ddpsim's own "
                           "reference models it: ddpsim --comm-hook bf16" % torch.__version__)
        if a.get("find_unused_rule") not in (None, "window", "syncing-backward"):
            raise BadInput("--find-unused-rule %s: window or syncing-backward (default: this torch's, %s)" % (
                a["find_unused_rule"], semantics.find_unused_rule()))
        self.rule = a.get("find_unused_rule") or semantics.find_unused_rule()
        self.zero = semantics.zero_grad_default() if a["zero_grad"] is None else (
            "set_to_none" if a["zero_grad"] == "none" else "fill_zeros")
        self.command = _command(self.wrap, a)
        self.many = a["schedule"] is None and a["scenario"] is None and (a["model"] is None or self.user_model)
        self.keep = a["keep"]
        if self.keep:
            _check_keep(self.keep)
        else:
            _sweep_stale()
        self.root = os.path.abspath(self.keep) if self.keep else tempfile.mkdtemp(
            prefix="ddpsim_torch-%d-" % os.getpid(), dir=_scratch())
        try:
            self._prepare()
        except BaseException:
            self.close()  # nothing of a plan that failed stays behind
            raise

    def _prepare(self):
        a = self.a
        os.makedirs(self.root, exist_ok=True)
        self.jobs, skipped = [], []
        names = ddpsim.scenarios(self.binary) if self.many else [a["scenario"] or "schedule"]
        self.names = names
        self.rearming, self.impossible = [], []
        for name in names:
            try:
                job = self._job(name)
            except BadInput as e:
                if not self.many:
                    raise  # a single run: the options are wrong for it
                if name == names[0]:
                    self._check_options()  # wrong whatever the scenario: said as bad input, as ddpsim does
                self.impossible.append((name, str(e)))  # as ddpsim's own battery: not run, the reason said
                continue
            if self.user_model and job["ddp"]["static_graph"] and not a["static_graph"]:
                # The scenario brings static_graph=True for ddpsim's tied model; a user model may not allow it.
                self.impossible.append((name, "it sets static_graph=True, for ddpsim's tied model (a gradient in "
                                              "pieces), which your model may not allow; --static-graph runs the "
                                              "battery with it"))
                continue
            why = _not_sharded(job) if self.shard else _not_averaged(job) if self.params_only else None
            if why and self.params_only and not self.many:
                raise BadInput("--params-only: %s" % why)
            if why:
                self.impossible.append((name, ("the sharded reference does not model %s" if self.shard else
                                               "parameters only: %s") % why))
                continue
            if self.params_only:  # model averaging: the .grad are the wrapper's own, only parameters are checked
                job["ops"] = [op for op in job["ops"] if op != "grab"]
                job["params_only"] = True
            if self.user_model and any(j["ops"] == job["ops"] and j["ddp"] == job["ddp"] for j in self.jobs):
                skipped.append(name)  # the same ops and options on the user's model: nothing new
                continue
            if self.user_model and self.many and a["find_unused"] and job["rearms"]:
                self.rearming.append(name)
                continue
            self.jobs.append(job)
        if self.loop and any(j["joins"] or j["uneven"] for j in self.jobs):
            raise BadInput("--wrap %s is a training loop (ddpsim_loop): uneven inputs and join{...} are not driven "
                           "through one" % self.wrap)
        if self.loop and any(j["loss_scale"] for j in self.jobs):
            raise BadInput("--wrap %s is a training loop (ddpsim_loop), and the run scales the loss: a loop of its own "
                           "does not report its GradScaler to the front end (run the scaling with a wrapper)" %
                           self.wrap)
        if self.loop and any(j["clips"] for j in self.jobs):
            raise BadInput("--wrap %s is a training loop (ddpsim_loop), and the schedule clips: a loop of its own does "
                           "not report its clipping to the front end (run the clip with a wrapper)" % self.wrap)
        self.many = self.many or len(self.jobs) > 1
        self.cfg = {"wrap": self.wrap, "impl": self.wrap.rpartition(":")[2], "threads": a["threads"],
                    "jobs": self.jobs, "first_job": 0, "loop": self.loop, "train_step": self.train_step,
                    "train_loop": self.train_loop, "accumulation": a.get("accumulation", 3),
                    "recorded_by": "ddpsim_torch %s, torch %s (gloo)" % (_version(), torch.__version__)}
        self.header = self._header(skipped)

    def _check_train_step(self, a):
        """--train-step, --train-loop and --loss-norm: the token model, with what the token loss's recordings
        model."""
        if a.get("loss_norm") not in (None, "global-tokens", "micro-batch-mean", "sum"):
            raise BadInput("--loss-norm %s: global-tokens, micro-batch-mean or sum" % a["loss_norm"])
        if self.train_loop:
            for on, what in ((self.shard, "--shard"), (self.params_only, "--params-only"),
                             (a.get("loss_scale"), "--loss-scale"), (a.get("clip"), "--clip"),
                             (a.get("fault"), "--fault"), (a["data"] or a["loss"], "--data or --loss")):
                if on:
                    raise BadInput("--train-loop with %s: not modelled (the loop runs ddpsim's token model, its "
                                   "own steps observed)" % what)
        if not self.train_step:
            return
        for on, what in ((self.train_loop, "--train-loop: the loop runs its own steps"),
                         (self.loop, "--wrap %s is a training loop (ddpsim_loop), which runs its own steps" %
                          self.wrap),
                         (self.shard, "--shard: a sharded run's token loss is not modelled"),
                         (self.params_only, "--params-only: model averaging has no .grad to judge"),
                         (a.get("loss_scale"), "--loss-scale: a scaled token loss is not modelled"),
                         (a["model"] is not None and not twins.is_ddpsim_spec(str(a["model"])) or a["data"] or
                          a["loss"], "--model, --data and --loss of your own: the step runs on ddpsim's token model "
                                     "(its ragged batches and their counts)")):
            if on:
                raise BadInput("--train-step with %s" % what)

    def _check_options(self):
        """The options alone, on a schedule no option refuses (as ddpsim's main.c check_run): BadInput when they
        are wrong whatever the scenario (a scenario's own schedule may be what an option refuses: --static-graph
        and a first backward in no_sync on torch 2.1+)."""
        a = self.a
        with tempfile.TemporaryDirectory(dir=self.root) as d:
            ddpsim.prepare(self.binary, os.path.join(d, "inputs"), _run_args(
                a["ranks"], a["seed"], a["batch"], a["lr"], self.model, "fwd bwd grab", None, a["find_unused"],
                a["bucket_view"], a["bucket_cap"], self.zero, a["comm_hook"], a["static_graph"], a["optimizer"],
                a.get("clip"), a.get("loss_scale")))

    def _check_model(self):
        if self.a["scenario"] and self.a["model"] is not None and not self.user_model:
            raise BadInput("--scenario %s chooses ddpsim's model itself: give it without --model %s (a model of "
                           "your own, MODULE:FUNC, runs the scenario's ops)" % (self.a["scenario"], self.model))
        if self.user_model:
            loading.load(self.model, "--model")
            if self.data is None:
                raise BadInput("--model %s is a user model: give --data MODULE:FUNC, batch(rank, index) -> "
                               "(inputs, targets)" % self.model)
            loading.load(self.data, "--data")
            if self.loss is not None:
                loading.load(self.loss, "--loss")
        elif self.data is not None or self.loss is not None:
            raise BadInput("--data and --loss go with a user model (--model MODULE:FUNC); ddpsim's models bring "
                           "their own batches and loss")

    def _job(self, name):
        a = self.a
        d = os.path.join(self.root, name)
        os.mkdir(d)  # ddpsim creates only the last component of an output path (inputs)
        model = self.model
        if self.train_step and model is None and name == "schedule":
            model = "lm"  # a schedule of the user's, for a training step: on the token model
        prep = ddpsim.prepare(self.binary, os.path.join(d, "inputs"), _run_args(
            a["ranks"], a["seed"], a["batch"], a["lr"], model, a["schedule"],
            name if name != "schedule" else None, a["find_unused"], a["bucket_view"], a["bucket_cap"], self.zero,
            a["comm_hook"], a["static_graph"], a["optimizer"], a.get("clip"), a.get("loss_scale"),
            a.get("fault", ()), a.get("loss_norm") if not self.many or name == "ragged-tokens" or
            self.train_step else None))
        if self.train_step and not prep["loss_norm"]:
            raise BadInput("--train-step: %s runs %s, which has no token loss; a training step is checked on "
                           "ddpsim's token model (--scenario ragged-tokens, or --model lm)" % (
                               "scenario " + name if name != "schedule" else "the schedule", prep["model"]))
        if prep["loss_norm"] and self.many and not self.train_step:
            raise BadInput("it checks a training step's loss normalization on ragged tokens: give --train-step "
                           "MODULE:FUNC (--scenario ragged-tokens runs it with the front end's own step)")
        if prep["loss_norm"] and (self.loop or self.shard or self.params_only or self.user_model):
            raise BadInput("the token model (ragged sequences, a normalized token loss) %s" % (
                "is not driven through a training loop of its own (ddpsim_loop)" if self.loop else
                "is not modelled with --shard" if self.shard else
                "is not modelled with --params-only" if self.params_only else "is ddpsim's, not your model's"))
        ddp = {k: prep["ddp"][k] for k in ("bucket_cap", "first_bucket_cap", "find_unused_parameters",
                                           "gradient_as_bucket_view")}
        ddp["comm_hook"] = prep["ddp"].get("comm_hook", "none")
        ddp["static_graph"] = bool(prep["ddp"].get("static_graph", False))
        ddp["broadcast_buffers"] = bool(prep["ddp"].get("broadcast_buffers", True))  # as --prepare wrote it
        ddp["find_unused_rule"] = self.rule
        return {"name": name, "inputs": os.path.join(d, "inputs"), "record": os.path.join(d, "record"),
                "shard": self.shard,
                "model": self.model if self.user_model else prep["model"], "ops": prep["ops"],
                "clips": prep["clips"], "ddp": ddp, "loss_scale": prep["loss_scale"], "planted": prep["planted"],
                "joins": prep["joins"], "uneven": prep["uneven"], "rearms": prep["rearms"],
                "lr": prep["lr"], "momentum": prep["momentum"], "adamw": prep["adamw"], "zero_grad": self.zero,
                "seed": a["seed"], "loss_norm": prep["loss_norm"],
                "data": self.data, "loss": self.loss}

    def finish(self, outcomes, timing=None):
        """ddpsim check on every job's recording (a job a fault stopped keeps its fault): the Result."""
        if len(self.jobs) == 1 and outcomes[0] is not None:
            if isinstance(outcomes[0], launch.Unsupported):
                return Result.failed(2, "BAD INPUT", str(outcomes[0]), self.header, self.command)
            return Result.failed(3, "FAULT", str(outcomes[0]), self.header, self.command)
        results = []
        t0 = time.monotonic()
        unsupported = []
        for k, (job, fault) in enumerate(zip(self.jobs, outcomes)):
            replay = self.command + (" --scenario " + job["name"] if self.many else "")
            if self.many:
                progress.LINE.show("ddpsim check: scenario %d of %d: %s" % (k + 1, len(self.jobs), job["name"]))
            if isinstance(fault, launch.Unsupported):
                unsupported.append((job["name"], str(fault)))
                continue
            if fault is not None:
                r = Result.failed(3, "FAULT", str(fault), "", replay)
                r.name = job["name"]
                results.append(r)
                continue
            junit = os.path.join(os.path.dirname(job["record"]), "junit.xml")
            page = os.path.join(os.path.dirname(job["record"]), "report.html") if self.a.get("html") else None
            code, text, report = ddpsim.check(self.binary, job["record"], self.a["tolerance"], self.a["timeout"],
                                              os.path.join(os.path.dirname(job["record"]), "report.json"),
                                              self.a.get("allow_unsynced_comm", False), junit, page)
            if not self.keep:  # the recording goes with the temporary directory: replay the whole check instead
                text = "".join(line + "\n" if not line.startswith("# replay: ") else "# replay: %s\n" % replay
                               for line in text.splitlines())
            r = Result.from_check(job["name"], code, text + _hook_hint(job, code), report,
                                  job["record"] if self.keep else None)
            r.junit = ci.read_check_junit(junit)  # read now: the temporary directory goes at close()
            r.html = ci.read_text(page) if page else None
            results.append(r)
        progress.LINE.clear()
        timing = dict(timing or {}, check_s=time.monotonic() - t0)
        line = ""
        if "ranks_s" in timing:
            line = ("# ddpsim_torch time: the ranks %.2f s (in the slowest rank the shadow's forwards and backwards "
                    "%.2f s, recording %.2f s), ddpsim check %.2f s\n" % (
                        timing["ranks_s"], timing["shadow_s"], timing["record_s"], timing["check_s"]))
        if not self.many:
            r = results[0]
            r.report = self.header + r.report + line
        else:
            header = self.header + "".join("# %s not run: %s\n" % u for u in unsupported)
            left_out = list(self.impossible) + [(n, _REARMING_WHY) for n in self.rearming] + unsupported
            order = {n: i for i, n in enumerate(self.names)}  # the battery's order, whoever found the reason
            left_out.sort(key=lambda u: order.get(u[0], len(order)))
            r = battery_result(results, header, [n for n, _ in left_out])
            r.left_out = left_out
            r.report += line
        r.timing = timing
        r.command = self.command
        return r

    def close(self):
        if self.root and not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)

    def _header(self, skipped):
        a = self.a
        lines = ["# ddpsim_torch %s (%s): torch %s, %d ranks on gloo, %s %s" % (
            _version(), ddpsim.version(self.binary), torch.__version__, a["ranks"],
            "training loop" if self.wrap == self.train_loop else "wrap", self.wrap)]
        lines.append("# semantics of torch %d.%d: %s" % (
            semantics.torch_version() + (semantics.describe(
                self.rule, self.zero, semantics.static_graph_rule() if a["static_graph"] else None),)))
        from . import rank as _rank
        lines.append("# communication: %s" % (
            "the wrapper's reductions in every backward, counted at torch's dispatcher (none may come in a "
            "backward that does not sync%s)" % (": allowed, --allow-unsynced-comm" if a.get("allow_unsynced_comm")
                                                 else "") if _rank._COUNTER is not None else
            "not counted (torch %s's collectives are no dispatcher ops): a wrapper that reduces in a backward that does not sync "
            "passes when its numbers are right" % torch.__version__))
        if self.params_only:
            lines.append("# parameters only (model averaging): each rank steps with its own gradients and the ranks "
                         "average the parameters; no .grad is compared, every step's parameters are (the grabs are "
                         "left out)")
        if self.train_loop:
            lines.append("# your loop's own syncs, normalization, steps and zero_grads observed over %d ragged "
                         "micro-batches of the token model, judged against windows of %d (%s), each synced and "
                         "stepped; its loss normalization (%s) judged at every backward" % (
                             a["micro_batches"], a["accumulation"],
                             "and a tail of %d" % (a["micro_batches"] % a["accumulation"])
                             if a["micro_batches"] % a["accumulation"] else "no tail",
                             self.jobs[0]["loss_norm"] if self.jobs else "-"))
        if self.train_step:
            norms = sorted({j["loss_norm"] for j in self.jobs if j.get("loss_norm")})
            lines.append("# training step %s on the token model's ragged batches: its loss normalization (%s) "
                         "read from the gradient it sends into the output and judged at every backward" % (
                             self.train_step, ", ".join(norms) or "-"))
        if self.shard:
            lines.append("# sharded: %s%s, judged by its rule (ddpsim check applies the recording's \"shard\")" % (
                self.shard["mode"], " on a %s mesh" % self.shard["mesh"] if "mesh" in self.shard else ""))
        what = ("the scenario battery (%d scenarios)" % len(self.jobs)) if self.many else (
            "scenario %s" % a["scenario"] if a["scenario"] else "schedule %s" % (a["schedule"] or "classic"))
        if self.user_model:
            models = "model %s (yours)" % self.model
        elif self.many:
            models = "each scenario's model (the twins of ddpsim's)"
        else:
            models = "model %s (the twin of ddpsim's)" % self.jobs[0]["model"]
        lines.append("# %s; %s; tolerance %s" % (
            models, what, a["tolerance"] or ("order, the averaging's proven bound (ddpsim check's default for "
                                              "averaged parameters)" if self.params_only else
                                              "bitwise at 2 ranks, order above (ddpsim check's default)")))
        if skipped:
            lines.append("# on your model, %s repeat%s another scenario's ops and options: not run again" % (
                ", ".join(skipped), "" if len(skipped) > 1 else "s"))
        for name, why in self.impossible:
            lines.append("# %s not run: %s" % (name, why))
        if self.rearming:
            lines.append("# on your model with find_unused, %s not run: %s" % (", ".join(self.rearming), _REARMING_WHY))
        if self.keep:
            lines.append("# recordings kept in %s (ddpsim check %s/<scenario>/record)" % (self.root, self.root))
        return "\n".join(lines) + "\n"


def _check_keep(keep):
    """--keep DIR: as every output path of ddpsim's, only its last component is created, in a directory that
    exists; an existing one must be an empty directory."""
    if os.path.exists(keep):
        if not os.path.isdir(keep):
            raise BadInput("--keep %s: exists and is not a directory" % keep)
        if os.listdir(keep):
            raise BadInput("--keep %s: not empty (the recordings need a directory of their own)" % keep)
        return
    parent = os.path.dirname(os.path.abspath(keep))
    if not os.path.isdir(parent):
        raise BadInput("--keep %s: %s is not a directory that exists (only the last component is created)" % (
            keep, parent))


def _pid_of(name, prefix):
    """The pid in a name made as prefix + '<pid>-...', or None."""
    if not name.startswith(prefix):
        return None
    head = name[len(prefix):].split("-", 1)[0]
    return int(head) if head.isdigit() else None


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's: not ours to judge
    return True


def _sweep_stale():
    """The recordings and rendezvous stores of runs whose launcher was killed (SIGKILL leaves them: nothing of
    the process runs to remove them) carry its pid in their names: removed at the next start, and said."""
    removed = []
    for where, prefix in ((_scratch() or tempfile.gettempdir(), "ddpsim_torch-"),
                          (tempfile.gettempdir(), "ddpsim_torch-store-")):
        try:
            names = os.listdir(where)
        except OSError:
            continue
        for name in names:
            pid = _pid_of(name, prefix)
            if pid is not None and pid != os.getpid() and not _alive(pid):
                shutil.rmtree(os.path.join(where, name), ignore_errors=True)
                removed.append(os.path.join(where, name))
    if removed:
        sys.stderr.write("ddpsim_torch: removed %d leftover%s of runs whose launcher was killed: %s\n" % (
            len(removed), "" if len(removed) == 1 else "s", ", ".join(removed)))


def _scratch():
    """Where a recording that is not kept goes: $DDPSIM_TORCH_SCRATCH when set (a test watches its own); else
    memory (/dev/shm) when it has room, writing there is several times faster than to a disk's page cache; else
    the temporary directory ($TMPDIR)."""
    mine = os.environ.get("DDPSIM_TORCH_SCRATCH")
    if mine:
        os.makedirs(mine, exist_ok=True)
        return mine
    shm = "/dev/shm"
    try:
        st = os.statvfs(shm)
        if os.access(shm, os.W_OK) and st.f_bavail * st.f_frsize >= SCRATCH_MIN_FREE:
            return shm
    except OSError:
        pass
    return None


_SHARD_MODES = ("zero1", "zero2", "fsdp", "hsdp")


def _shard_spec(text, ranks):
    """'MODE' or 'hsdp:RxS' as the recording's "shard" ({"mode", "mesh"}), None for None; BadInput otherwise (the
    same rules as ddpsim --shard, said before any rank starts)."""
    if text is None:
        return None
    mode, _, mesh = str(text).partition(":")
    if mode not in _SHARD_MODES:
        raise BadInput("--shard %s: the mode is zero1, zero2, fsdp or hsdp (hsdp:RxS for a mesh)" % text)
    if not mesh:
        return {"mode": mode}
    r, x, sh = mesh.partition("x")
    if mode != "hsdp" or not x or not r.isdigit() or not sh.isdigit() or int(r) < 1 or int(sh) < 1:
        raise BadInput("--shard %s: only hsdp takes a mesh, as hsdp:RxS (R replicas x S shards)" % text)
    if int(r) * int(sh) != ranks:
        raise BadInput("--shard %s: the mesh is %d ranks, the run has %d" % (text, int(r) * int(sh), ranks))
    return {"mode": mode, "mesh": "%sx%s" % (int(r), int(sh))}


def _not_sharded(job):
    """What of a scenario the sharded reference does not model (record.h "shard"), or None."""
    d = job["ddp"]
    for key, what in (("find_unused_parameters", "find_unused"), ("gradient_as_bucket_view", "bucket_view"),
                      ("static_graph", "static_graph")):
        if d.get(key):
            return what
    if d.get("comm_hook", "none") != "none":
        return "a communication hook"
    if job.get("uneven") or job.get("joins"):
        return "uneven inputs or join"
    return None


def _not_averaged(job):
    """Why a job cannot be checked with parameters only (None: it can)."""
    if "step" not in job["ops"]:
        return "the schedule has no step, and only the parameters after a step are compared"
    if job["joins"] or job["uneven"]:
        return "uneven inputs and join{...} are DDP's (the averaging of parameters has no join)"
    if job["ddp"]["comm_hook"] != "none":
        return "a compressing communication hook is DDP's, and the averaging bound covers float32 only"
    if job["momentum"]:
        return "SGD with momentum: each rank's own buffer is not what the averaging bound covers"
    if job["adamw"]:
        return "AdamW: each rank's own moments are not what the averaging bound covers"
    if job["loss_scale"]:
        return "loss scaling: each rank's own unsynced gradients would decide its skip"
    return None


def _loop_schedule(spec, a):
    """--train-loop's intended ops: windows of `accumulation` micro-batches over `micro_batches`, the last one
    shorter when they do not divide, each a sync at its last micro-step, then grab, step and zero_grad."""
    k, n = a.get("accumulation", 3), a.get("micro_batches", 8)
    for name, v, top in (("--accumulation", k, 64), ("--micro-batches", n, 256)):
        if not isinstance(v, int) or not 1 <= v <= top:
            raise BadInput("%s %r: 1 to %d" % (name, v, top))
    if a.get("schedule") is not None or a.get("scenario") is not None or a.get("model") not in (None, "lm",
                                                                                                   "lm-equal"):
        raise BadInput("--train-loop %s: its windows come from --accumulation and --micro-batches, on ddpsim's "
                       "token model (--model lm, the default, or lm-equal); --schedule, --scenario and another "
                       "--model are not for a loop" % spec)
    windows, left = [], n
    while left:
        m = min(k, left)
        windows.append(("nosync{%s} " % " ".join(["fwd bwd"] * (m - 1)) if m > 1 else "") + "fwd bwd grab step zero")
        left -= m
    return " ".join(windows)


def _command(wrap, a):
    """The command line that runs this check again."""
    args = ["python3", "-m", "ddpsim_torch", "--ranks", str(a["ranks"])]
    if a.get("train_loop"):
        a = dict(a, schedule=None, model=None if a.get("model") == "lm" else a.get("model"))  # the loop's options
        args += ["--train-loop", loading.as_spec(a["train_loop"], "--train-loop")]
        args += [x for flag, key in (("--accumulation", "accumulation"), ("--micro-batches", "micro_batches"))
                 if a.get(key) not in (None, {"accumulation": 3, "micro_batches": 8}[key])
                 for x in (flag, str(a[key]))]
    else:
        args += ["--wrap", wrap]
    for flag, key, default in (("--model", "model", None), ("--data", "data", None), ("--loss", "loss", None),
                               ("--schedule", "schedule", None), ("--scenario", "scenario", None),
                               ("--seed", "seed", 1), ("--batch", "batch", 4), ("--lr", "lr", 0.1),
                               ("--timeout", "timeout", 60.0), ("--threads", "threads", 1),
                               ("--tolerance", "tolerance", None), ("--bucket-cap", "bucket_cap", None),
                               ("--zero-grad", "zero_grad", None), ("--comm-hook", "comm_hook", "none"),
                               ("--find-unused-rule", "find_unused_rule", None), ("--shard", "shard", None),
                               ("--optimizer", "optimizer", None), ("--clip", "clip", None),
                               ("--loss-scale", "loss_scale", None), ("--train-step", "train_step", None),
                               ("--loss-norm", "loss_norm", None)):
        value = a.get(key, default)
        if key in ("model", "data", "loss", "train_step"):
            value = loading.as_spec(value, "--" + key)
        if value is not None and value != default:
            args += [flag, str(value)]
    for f in a.get("fault") or ():
        args += ["--fault", f]
    args += [f for f, on in (("--find-unused", a["find_unused"]), ("--bucket-view", a["bucket_view"]),
                             ("--static-graph", a["static_graph"]),
                             ("--allow-unsynced-comm", a.get("allow_unsynced_comm")),
                             ("--params-only", a.get("params_only"))) if on]
    return " ".join(shlex.quote(x) for x in args)


# The built-in hooks by the name DDP's logging data gives them, and the option that tells the reference.
_HOOK_OPTIONS = {"allreduce_hook": "allreduce", "fp16_compress_hook": "fp16", "bf16_compress_hook": "bf16"}


def _hook_hint(job, code):
    """A wrapper that registered a communication hook the run was not told of (rank.py records its name): a
    failing check says which option describes it."""
    path = os.path.join(job["record"], "comm_hook.txt")
    if code != 1 or not os.path.exists(path):
        return ""
    with open(path) as f:
        name = f.read().strip()
    option = _HOOK_OPTIONS.get(name)
    return "# hint: the wrapper registered the communication hook %s, and the reference was not told: %s\n" % (
        name, "--comm-hook %s makes it do the same arithmetic" % option if option else
        "ddpsim models PyTorch's built-in hooks only (--comm-hook allreduce, fp16, bf16)")


def _version():
    from . import __version__
    return __version__
