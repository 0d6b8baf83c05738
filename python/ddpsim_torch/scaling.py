"""Loss scaling in the front end: torch's GradScaler around the implementation's step, and the inf or NaN a run
plants into a rank's backward (ddpsim --loss-scale, --fault inf|nan; record.h "loss_scale", "planted").

Who scales: a wrapper with its own scaler, `ddpsim_grad_scaler(init_scale, growth_factor, backoff_factor,
growth_interval)` returning a GradScaler-like object (FSDP1's ShardedGradScaler, a framework's own): it is the
implementation's; else torch's `torch.amp.GradScaler("cpu", ...)` (torch 2.3 and later). Torch 1.13's GradScaler
is CUDA-only (on a CPU it disables itself and scales nothing), so there the front end runs GradScaler's arithmetic
itself over the implementation's .grad (below), as ddpsim runs one for a plain DDP plugin: the check is then of
the implementation's gradients under the scale and of its inf reaching every rank through its sync, not of a
scaler of its own. A static scale S (Megatron-LM's ConstantGradScaler) is a GradScaler whose update sets S again.

The recording (record.py): every backward's scale (scale<m>.json), and at the first clip or step since the last
step what its unscale_ found (unscale<k>.json), every rank's, which `ddpsim check` holds against its own
GradScaler's.
"""
import torch

from .loading import Unsupported


def parse(spec):
    """A --loss-scale spec as the manifest writes it ("S" or "dynamic:INIT,GROWTH,BACKOFF,INTERVAL", ddpsim's
    scaler_format) into (dynamic, init, growth, backoff, interval)."""
    if spec.startswith("dynamic:"):
        init, growth, backoff, interval = spec[len("dynamic:"):].split(",")
        return True, float(init), float(growth), float(backoff), int(interval)
    return False, float(spec), 2.0, 0.5, 2000


class CpuGradScaler:
    """GradScaler's arithmetic (torch 2.x torch/amp/grad_scaler.py and aten/src/ATen/native/cpu/
    AmpGradScalerKernels.cpp; ddpsim's engine/ddp/scaler.h) for a torch without a CPU GradScaler: scale, unscale_
    (found_inf over the optimizer's gradients, this rank's), step, update, get_scale; a scaler of a wrapper's own
    may start from it."""

    def __init__(self, init_scale, growth_factor, backoff_factor, growth_interval):
        self._scale = torch.full((), init_scale, dtype=torch.float32)
        self.growth, self.backoff, self.interval = growth_factor, backoff_factor, growth_interval
        self.tracker, self.found = 0, {}

    def get_scale(self):
        return self._scale.item()

    def scale(self, loss):
        return loss * self._scale

    def unscale_(self, optimizer):
        inv = self._scale.double().reciprocal().float()  # "FP32 division can be imprecise": the reciprocal in FP64
        multiply = inv.item() != 1.0  # the kernel leaves the values as they are when inv_scale is 1
        found = False
        with torch.no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    found = found or not bool(torch.isfinite(p.grad).all())
                    if multiply:
                        p.grad.mul_(inv)
        self.found[id(optimizer)] = found

    def _found_inf_per_device(self, optimizer):
        return {"cpu": torch.tensor(float(self.found.get(id(optimizer), False)))}

    def step(self, optimizer):
        if id(optimizer) not in self.found:
            self.unscale_(optimizer)
        if not self.found[id(optimizer)]:
            optimizer.step()

    def update(self, new_scale=None):
        found = any(self.found.values())
        self.found = {}
        if new_scale is not None:
            self._scale.fill_(new_scale)
            return
        if found:
            self._scale.mul_(self.backoff)
            self.tracker = 0
            return
        self.tracker += 1
        if self.tracker == self.interval:
            grown = self._scale * self.growth
            if torch.isfinite(grown):
                self._scale.copy_(grown)
            self.tracker = 0


class Scaler:
    """The implementation's GradScaler, as the schedule's ops use it."""

    def __init__(self, spec, wrapped, sharded=False):
        self.dynamic, init, growth, backoff, interval = parse(spec)
        self.static = init
        if not self.dynamic:  # torch's GradScaler takes no growth of 1: its update sets the scale back instead
            growth, backoff, interval = 2.0, 0.5, 2000
        own = getattr(wrapped, "ddpsim_grad_scaler", None)
        if callable(own):
            self.impl, self.who = own(init_scale=init, growth_factor=growth, backoff_factor=backoff,
                                      growth_interval=interval), "the wrapper's ddpsim_grad_scaler"
        elif sharded:  # torch's GradScaler finds an inf in this rank's gradients alone (FSDP1's ShardedGradScaler
            raise Unsupported(  # all-reduces its finding): a sharded wrapper brings its own, as a plugin must
                "loss scaling of a sharded wrapper needs its own GradScaler, ddpsim_grad_scaler(init_scale=, "
                "growth_factor=, backoff_factor=, growth_interval=), whose unscale_ finds an inf or NaN over every "
                "rank's shards (FSDP1's ShardedGradScaler); torch's GradScaler sees this rank's gradients alone")
        elif has_cpu_grad_scaler():
            self.impl, self.who = torch.amp.GradScaler("cpu", init_scale=init, growth_factor=growth,
                                                       backoff_factor=backoff, growth_interval=interval), \
                "torch.amp.GradScaler"
        else:
            self.impl, self.who = CpuGradScaler(init, growth, backoff, interval), "ddpsim_torch's (torch 1.13)"
        self.unscaled = False

    def get_scale(self):
        return float(self.impl.get_scale())

    def scale(self, loss):
        return self.impl.scale(loss)

    def unscale(self, optimizer):
        """unscale_ unless it ran since the last step: what it found (True: an inf or NaN), or None when it had."""
        if self.unscaled:
            return None
        self.impl.unscale_(optimizer)
        self.unscaled = True
        return sum(float(v.item()) for v in self.impl._found_inf_per_device(optimizer).values()) > 0

    def step(self, optimizer):
        self.impl.step(optimizer)
        self.impl.update(None if self.dynamic else self.static)
        self.unscaled = False


def has_cpu_grad_scaler():
    """torch.amp.GradScaler takes the CPU (torch 2.3 and later); 1.13's is torch.cuda.amp's alone."""
    return hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler")


class Planter:
    """An inf or NaN put into element 0 of the first gradient a backward completes, as ddpsim's --fault inf|nan
    does: a one-shot hook on every parameter, before AccumulateGrad (and so before DDP's reducer takes the
    gradient into its bucket). fired says whether it did: a wrapper whose gradients do not flow through the
    parameters given (FSDP2's unsharded copies) never fires it, which the caller says rather than check a run
    that planted nothing."""

    def __init__(self, params, value):
        self.value, self.fired = value, False
        self.handles = [p.register_hook(self._hook) for p in params if p.requires_grad]

    def _hook(self, g):
        if self.fired or g.numel() == 0:
            return None
        self.fired = True
        g = g.clone()
        g.view(-1)[0] = self.value
        return g

    def remove(self):
        for h in self.handles:
            h.remove()


def planted_value(job, rank, op):
    """The inf or NaN the run plants into `rank`'s backward at op `op`, or None."""
    for p in job.get("planted", ()):
        if p["rank"] == rank and p["op"] == op:
            return float("nan") if p["kind"] == "nan" else float("inf")
    return None
