"""Writing a recorded run, the layout `ddpsim check DIR` reads
(doc/REFERENCE.md, "Recorded runs"; engine/io/record.h):

  DIR/manifest.json                       what was run
  DIR/init/<param>.npy                    the parameters every rank started from
  DIR/rank<r>/micro<m>/used.json          the parameters backward m gave a gradient
  DIR/rank<r>/micro<m>/<param>.npy        that local gradient, micro-step m's alone
  DIR/rank<r>/micro<m>/comm.json          the wrapper's reductions in that backward, and its reduce-scatters
                                          among them (torch 2.x: counted at the dispatcher, as CommDebugMode)
  DIR/<impl>/rank<r>/grab<k>/<param>.npy  the implementation's .grad at grab k (None as zeros)
  DIR/<impl>/rank<r>/grab<k>/none.json    the parameters whose .grad was None there
  DIR/<impl>/rank<r>/grab<k>/held.json    a sharded rank: the elements of each .grad it held there
  DIR/<impl>/rank<r>/step<s>/<param>.npy  its parameters after step s
  DIR/<impl>/rank<r>/end/<param>.npy      its parameters at the end
  DIR/<impl>/rank<r>/clip<k>.json         {"coef": C}: the coefficient its k-th clip applied
  DIR/<impl>/rank<r>/scale<m>.json        {"scale": S}: what its m-th backward multiplied the loss by
  DIR/<impl>/rank<r>/unscale<k>.json      {"found_inf": bool}: what its k-th unscale_ found
  DIR/rank<r>/micro<m>/tokens.json        the token model: each sequence's valid tokens in micro-batch m
  DIR/<impl>/rank<r>/factor<m>.json       {"factor": F}: what its m-th backward multiplied the summed token
                                          loss by (and "mixed": {"sequence": S, "factor": G} when sequence S's
                                          tokens got another)
  DIR/init/<buffer>.npy                   a module with buffers: those every rank started from
  DIR/rank<r>/fwd<k>/seen/<buffer>.npy    the buffers the module held as forward k began (after DDP's
                                          broadcast, if any), and .../after/ as it ended

Every array float32 (an integer buffer such as num_batches_tracked too), C order, its tensor's shape.
"""
import json
import math
import os
import re

import numpy as np
import torch


def safe_name(name):
    """A directory name for the implementation: no '/', not a rank's or init's."""
    name = re.sub(r"[^A-Za-z0-9_.+-]", "_", name).lstrip(".") or "impl"
    return "impl-" + name if re.fullmatch(r"rank[0-9]+|init", name) else name[:120]


MAX_NDIM = 4  # ddpsim's (models/model.h MODEL_MAX_NDIM)


def record_shape(shape):
    """A parameter's shape as recorded: a scalar as [1], dimensions past the fourth folded into it."""
    shape = list(shape) or [1]
    if len(shape) > MAX_NDIM:
        shape = shape[:MAX_NDIM - 1] + [int(np.prod(shape[MAX_NDIM - 1:]))]
    return shape


def _save(path, tensor):
    a = tensor.detach().to("cpu", torch.float32).contiguous().numpy().reshape(record_shape(tensor.shape))
    with open(path, "wb") as f:
        np.save(f, a, allow_pickle=False)


def write_tensors(directory, named):
    """directory/<name>.npy for every (name, tensor or None); None is written as zeros of shape."""
    os.makedirs(directory, exist_ok=True)
    for name, t in named:
        _save(os.path.join(directory, name + ".npy"), t)


class Recorder:
    """What one rank writes: its micro-steps' local gradients and the implementation's values."""

    def __init__(self, root, rank, impl, shapes):
        self.root, self.rank, self.impl, self.shapes = root, rank, impl, shapes
        self.micro = self.grab = self.step = self.fwd = self.nclip = self.nunscale = 0

    def local(self, names, grads, parts=None, reductions=None):
        """Micro-step m's local gradients (None: the parameter got none). parts[i], when given with two or more
        tensors, are the pieces parameter i's gradient arrived in within the one backward, in order (a second
        backward inside it: reentrant checkpointing), each one AccumulateGrad: written as <name>.part<k>.npy."""
        d = os.path.join(self.root, "rank%d" % self.rank, "micro%d" % self.micro)
        os.makedirs(d, exist_ok=True)
        used = [n for n, g in zip(names, grads) if g is not None]
        with open(os.path.join(d, "used.json"), "w") as f:
            json.dump(used, f)
        if reductions is not None:  # the wrapper's reductions in this backward and how many were reduce-scatters
            with open(os.path.join(d, "comm.json"), "w") as f:  # (or reduces to one rank); bytes are not counted
                json.dump({"reductions": reductions[0], "scatters": reductions[1]}, f)
        write_tensors(d, [(n, g) for n, g in zip(names, grads) if g is not None])
        for n, pieces in zip(names, parts or []):
            if len(pieces) > 1:
                write_tensors(d, [("%s.part%d" % (n, k + 1), t) for k, t in enumerate(pieces)])
        self.micro += 1

    def buffers(self, which, named):
        """The module's buffers as forward k began (which "seen") or ended ("after", then k moves on)."""
        write_tensors(os.path.join(self.root, "rank%d" % self.rank, "fwd%d" % self.fwd, which), named)
        if which == "after":
            self.fwd += 1

    def _impl(self, what, named):
        write_tensors(os.path.join(self.root, self.impl, "rank%d" % self.rank, what), named)

    def skip(self, op):
        """A grab or a step this rank does not reach (it ran out of an uneven repetition): numbers move on."""
        if op == "grab":
            self.grab += 1
        elif op == "step":
            self.step += 1

    def grads(self, names, grads, held=None):
        """The implementation's gradients at a grab (None: the parameter's .grad is None) and, when this rank holds
        only part of them (sharded), what it holds: {name: [[start, count], ...]}."""
        what = "grab%d" % self.grab
        d = os.path.join(self.root, self.impl, "rank%d" % self.rank, what)
        self._impl(what, [(n, g if g is not None else torch.zeros(p_shape)) for n, g, p_shape in
                          zip(names, grads, self.shapes)])
        with open(os.path.join(d, "none.json"), "w") as f:
            json.dump([n for n, g in zip(names, grads) if g is None], f)
        if held is not None:
            with open(os.path.join(d, "held.json"), "w") as f:
                json.dump(held, f)
        self.grab += 1

    def clip(self, coef):
        """The coefficient this rank's next clip applied (a float; NaN and infinities as strings: JSON has none)."""
        self._rank_json("clip%d.json" % self.nclip, {"coef": _json_float(coef)})
        self.nclip += 1

    def scale(self, value):
        """The loss scale of this rank's next backward (the local gradients recorded for it are at that scale)."""
        self._rank_json("scale%d.json" % self.micro, {"scale": value})

    def tokens(self, rows):
        """Each sequence's valid tokens in this rank's next backward's micro-batch."""
        d = os.path.join(self.root, "rank%d" % self.rank, "micro%d" % self.micro)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "tokens.json"), "w") as f:
            json.dump([int(n) for n in rows], f)

    def factor(self, value, mixed=None):
        """The factor of this rank's next backward's summed token loss (None: not known, a micro-batch without a
        valid token); mixed: (sequence, factor) of a sequence whose tokens got another one."""
        out = {"factor": _json_float(value)}
        if mixed is not None:
            out["mixed"] = {"sequence": int(mixed[0]), "factor": _json_float(mixed[1])}
        self._rank_json("factor%d.json" % self.micro, out)

    def unscale(self, found_inf):
        """What this rank's next unscale_ found: True for an inf or NaN among its gradients."""
        self._rank_json("unscale%d.json" % self.nunscale, {"found_inf": bool(found_inf)})
        self.nunscale += 1

    def _rank_json(self, name, value):
        d = os.path.join(self.root, self.impl, "rank%d" % self.rank)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, name), "w") as f:
            json.dump(value, f)

    def params(self, names, params, end=False):
        self._impl("end" if end else "step%d" % self.step, list(zip(names, params)))
        if not end:
            self.step += 1


def _json_float(v):
    """A float as record.h reads one: a number, or "nan", "inf", "-inf" (JSON has none); None as "nan"."""
    if v is None:
        return "nan"
    v = float(v)
    return v if math.isfinite(v) else "nan" if math.isnan(v) else "inf" if v > 0 else "-inf"


def write_manifest(root, ranks, impl, recorded_by, model, named_params, ddp, zero_grad, lr, ops,
                   named_buffers=(), joins=(), uneven=(), shard=None, params_only=False, momentum=0.0, adamw=None,
                   clips=(), loss_scale=None, planted=(), loss_norm=None):
    """root/manifest.json; ddp: bucket_cap, first_bucket_cap, find_unused_parameters,
    gradient_as_bucket_view, find_unused_rule, broadcast_buffers; joins and uneven as ddpsim --prepare
    wrote them (the join blocks, and each uneven repetition with every rank's count); shard: the sharded data
    parallelism whose rule judges the run ({"mode", "mesh"}, version 4), None: DDP's; params_only: the
    optimizer averages the parameters (model averaging, version 5); momentum: the step's SGD momentum (version
    6 when not 0); adamw: the step is torch.optim.AdamW's, {"betas", "eps", "weight_decay"} (version 7); clips:
    the clip ops' [op, max_norm, norm_type] (version 8); loss_scale: the --loss-scale spec of the GradScaler
    around the step, and planted: the infs and NaNs put into backwards ({"kind", "rank", "op"}) (version 9);
    loss_norm: the token model's intended normalization (version 10)."""
    version = (10 if loss_norm else 9 if loss_scale or planted else 8 if clips else 7 if adamw else 6 if momentum else
               5 if params_only else 4 if shard else 3)
    manifest = {
        "format": "ddpsim-record", "version": version,
        "ranks": ranks, "impl": impl,
        "recorded_by": recorded_by,
        "model": model,
        "params": [{"name": n, "shape": record_shape(p.shape)} for n, p in named_params],
        "ddp": ddp, "zero_grad": zero_grad, "optimizer": {"type": "sgd", "lr": lr}, "ops": ops,
    }
    if named_buffers:
        manifest["buffers"] = [{"name": n, "shape": record_shape(b.shape)} for n, b in named_buffers]
    if joins:
        manifest["joins"] = list(joins)
    if uneven:
        manifest["uneven"] = list(uneven)
    if clips:
        manifest["clips"] = [{"op": op, "max_norm": mx, "norm_type": nt} for op, mx, nt in clips]
    if loss_scale:
        manifest["loss_scale"] = loss_scale
    if planted:
        manifest["planted"] = list(planted)
    if loss_norm:
        manifest["loss_norm"] = loss_norm
    if shard:
        manifest["shard"] = dict(shard)
    if params_only:
        manifest["optimizer"]["averages"] = "parameters"
    if momentum:
        manifest["optimizer"]["momentum"] = momentum
    if adamw:
        manifest["optimizer"] = dict(manifest["optimizer"], type="adamw", betas=list(adamw["betas"]),
                                     eps=adamw["eps"], weight_decay=adamw["weight_decay"])
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
