"""A schedule's clip ops in the front end: torch.nn.utils.clip_grad_norm_ as the implementation under test runs it,
and the coefficient it applied, which the recording gives `ddpsim check` (record.h clip<k>.json).

Who clips: a wrapper with its own clipping, `ddpsim_clip_grad_norm_(max_norm, norm_type)` (an adapter's) or
`clip_grad_norm_(max_norm, norm_type)` (FSDP1's FullyShardedDataParallel), returning the total norm; else torch's
`clip_grad_norm_` over the wrapped module's parameters (DTensors under FSDP2: torch reduces their norm itself).
The coefficient is computed from the returned total norm as torch computes it (torch/nn/utils/clip_grad.py:
`max_norm / (total_norm + 1e-6)`, clamped at 1, in float): a wrapper that clips by one norm and returns another
shows as a coefficient the gradients after it do not match, and one whose norm is a rank's own as coefficients
that differ across ranks.
"""
import math

import torch


def norm_type(arg):
    """The manifest's "norm_type" (2 or "inf") as clip_grad_norm_ takes it."""
    return math.inf if arg == "inf" else float(arg)


def coefficient(total_norm, max_norm):
    """torch's clamped coefficient from a total norm (a tensor, a DTensor, or a float), as a Python float."""
    if hasattr(total_norm, "full_tensor"):  # a DTensor: its value, whatever its placement
        total_norm = total_norm.full_tensor()
    t = torch.as_tensor(total_norm).detach().to("cpu", torch.float32)
    return torch.clamp(max_norm / (t + 1e-6), max=1.0).item()


def clip(wrapped, params, max_norm, kind):
    """Clip as the wrapper does (or torch's clip_grad_norm_ over params); the coefficient it applied."""
    nt = norm_type(kind)
    own = getattr(wrapped, "ddpsim_clip_grad_norm_", None) or getattr(wrapped, "clip_grad_norm_", None)
    total = own(max_norm, nt) if callable(own) else torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type=nt)
    return coefficient(total, max_norm)
