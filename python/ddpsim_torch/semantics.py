"""What changed between PyTorch versions in the semantics ddpsim's
reference implements, for the torch this runs on (doc/SEMANTICS.md):

 - find_unused_parameters: before 2.4 a parameter counts as used only when
   the syncing backward's own forward used it; from 2.4 (PR #124193) when
   any micro-step of the accumulation window did;
 - Optimizer.zero_grad(): set_to_none=True by default since 2.0.
"""
import inspect
import re

import torch


def torch_version():
    m = re.match(r"(\d+)\.(\d+)", torch.__version__)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def find_unused_rule(version=None):
    return "window" if (version or torch_version()) >= (2, 4) else "syncing-backward"


def zero_grad_default():
    """'set_to_none' or 'fill_zeros': what optimizer.zero_grad() does on this torch."""
    try:
        default = inspect.signature(torch.optim.Optimizer.zero_grad).parameters["set_to_none"].default
    except (KeyError, TypeError, ValueError):
        default = torch_version() >= (2, 0)
    return "set_to_none" if default else "fill_zeros"


def describe(rule, zero_grad):
    return ("find_unused counts what %s; zero_grad() %s" % (
        "the syncing backward used (PyTorch < 2.4)" if rule == "syncing-backward"
        else "any micro-step of the window used (PyTorch >= 2.4, PR #124193)",
        "makes .grad None (set_to_none=True, PyTorch >= 2.0)" if zero_grad == "set_to_none"
        else "fills zeros (set_to_none=False, PyTorch < 2.0)"))


def bf16_hook_runs():
    """Whether DDP takes bf16_compress_hook here: distributed.py's _check_comm_hook refuses it unless torch was
    built with CUDA 11+ and NCCL 2.10+ ("BF16 all reduce communication hook required CUDA 11+ and NCCL 2.10+"),
    whatever the process group, so not on a CPU-only torch with gloo."""
    return torch.version.cuda is not None and torch.cuda.is_available()
