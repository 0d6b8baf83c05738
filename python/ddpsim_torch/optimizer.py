"""The run's step on the front end's side: the optimizer the reference steps with (torch.optim.SGD, plain or
with momentum, or torch.optim.AdamW: ddpsim --optimizer), built for the front end's own loop, and the check that a
wrapper's own optimizer steps the same (a scenario whose step it does not follow is not run)."""
import torch

from .loading import Unsupported


def step_optimizer(job):
    """The run's step as (torch.optim class, its keyword arguments but the parameters): torch.optim.SGD with the
    run's lr and momentum, or torch.optim.AdamW with its betas, eps and weight decay (ddpsim --optimizer)."""
    adamw = job.get("adamw")
    if adamw:
        return torch.optim.AdamW, {"lr": job["lr"], "betas": tuple(adamw["betas"]), "eps": adamw["eps"],
                                   "weight_decay": adamw["weight_decay"]}
    return torch.optim.SGD, {"lr": job["lr"], "momentum": job.get("momentum", 0.0)}


def _momentum_of(optimizer):
    """The momentum an optimizer steps with: torch.optim.SGD's param_groups', or those of the optimizer it wraps
    (ZeroRedundancyOptimizer's and OSS's .optim, DeepSpeed's .optimizer); None when no group says."""
    for o in (optimizer, getattr(optimizer, "optim", None), getattr(optimizer, "optimizer", None)):
        groups = [g for g in getattr(o, "param_groups", None) or () if isinstance(g, dict)]
        if isinstance(o, torch.optim.SGD) or any("momentum" in g for g in groups):
            values = {float(g.get("momentum", 0.0)) for g in groups}
            return values.pop() if len(values) == 1 else None
    return None


def _adamw_of(optimizer):
    """(betas, eps, weight_decay) of an optimizer that steps as torch.optim.AdamW does (decoupled weight decay,
    no amsgrad, not maximizing), itself or the one it wraps, when every group agrees; None otherwise."""
    for o in (optimizer, getattr(optimizer, "optim", None), getattr(optimizer, "optimizer", None)):
        groups = [g for g in getattr(o, "param_groups", None) or () if isinstance(g, dict)]
        decoupled = isinstance(o, torch.optim.AdamW) or any(g.get("decoupled_weight_decay") for g in groups)
        if not groups or not decoupled:
            continue
        if any(g.get("amsgrad") or g.get("maximize") for g in groups):
            return None
        values = {(tuple(float(b) for b in g["betas"]), float(g["eps"]), float(g["weight_decay"])) for g in groups}
        return values.pop() if len(values) == 1 else None
    return None


def check_optimizer(optimizer, job, wrap):
    """A wrapper's own optimizer must step as the reference does: a scenario whose step is another is not run
    (Unsupported, said in the header), rather than failed or passed."""
    adamw = job.get("adamw")
    if not adamw and _adamw_of(optimizer) is not None:
        raise Unsupported("the step is torch.optim.SGD with momentum %g, and --wrap %s returned an optimizer that "
                          "steps as torch.optim.AdamW: run with --optimizer adamw (its betas, eps and weight decay), "
                          "or give the wrap function an optimizer argument, (class, kwargs), to build it with"
                          % (job.get("momentum", 0.0), wrap))
    if not adamw:
        return check_momentum(optimizer, job.get("momentum", 0.0), wrap)
    want = (tuple(float(b) for b in adamw["betas"]), float(adamw["eps"]), float(adamw["weight_decay"]))
    mine = _adamw_of(optimizer)
    if mine != want:
        what = ("that is not torch.optim.AdamW (or does not say its betas, eps and weight decay)" if mine is None
                else "with betas %s, eps %g, weight decay %g" % mine)
        raise Unsupported("the step is torch.optim.AdamW with betas %s, eps %g, weight decay %g, and --wrap %s "
                          "returned an optimizer %s: give the wrap function an optimizer argument, (class, "
                          "kwargs), to build it with" % (want + (wrap, what)))


def check_momentum(optimizer, momentum, wrap):
    """check_optimizer for SGD: the same momentum."""
    mine = _momentum_of(optimizer)
    if mine is None and not momentum:
        return  # an optimizer that says nothing of momentum, and a reference without it: the check decides
    if mine is None or torch.tensor(mine, dtype=torch.float32) != torch.tensor(momentum, dtype=torch.float32):
        hint = ("give the wrap function a momentum argument to build it with" if mine is None else
                "run with --optimizer %s, or give the wrap function a momentum argument" % (
                    "momentum:%g" % mine if mine else "sgd"))
        what = "whose momentum it does not say" if mine is None else "with momentum %g" % mine
        raise Unsupported("the step is torch.optim.SGD with momentum %g, and --wrap %s returned an optimizer %s: %s"
                          % (momentum, wrap, what, hint))
