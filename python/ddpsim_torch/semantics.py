"""What changed between PyTorch versions in the semantics ddpsim's
reference implements, for the torch this runs on (doc/SEMANTICS.md):

 - find_unused_parameters: before 2.4 a parameter counts as used only when
   the syncing backward's own forward used it; from 2.4 (PR #124193) when
   any micro-step of the accumulation window did;
 - Optimizer.zero_grad(): set_to_none=True by default since 2.0;
 - static_graph=True: before 2.1 every backward through a forward of the
   first iteration queues the delayed allreduce, and must be one a sync
   armed; from 2.1 (PR #103487) only the first backward queues it;
 - bf16_compress_hook: refused unless torch was built with CUDA and NCCL
   2.10+, whatever the process group; 2.x's PyPI build has both, so gloo
   on a CPU takes it.
"""
import inspect
import re

import torch


def torch_version():
    m = re.match(r"(\d+)\.(\d+)", torch.__version__)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def find_unused_rule(version=None):
    return "window" if (version or torch_version()) >= (2, 4) else "syncing-backward"


def static_graph_rule(version=None):
    """ddpsim's --static-graph-rule for this torch (schedule.h, sched_static_graph_conflict)."""
    return "first-backward" if (version or torch_version()) >= (2, 1) else "first-iteration"


def zero_grad_default():
    """'set_to_none' or 'fill_zeros': what optimizer.zero_grad() does on this torch."""
    try:
        default = inspect.signature(torch.optim.Optimizer.zero_grad).parameters["set_to_none"].default
    except (KeyError, TypeError, ValueError):
        default = torch_version() >= (2, 0)
    return "set_to_none" if default else "fill_zeros"


def describe(rule, zero_grad, static_graph=None):
    """The header's line: the rules of this torch the run follows (static_graph's when the run has it)."""
    return ("find_unused counts what %s; zero_grad() %s%s" % (
        "the syncing backward used (PyTorch < 2.4)" if rule == "syncing-backward"
        else "any micro-step of the window used (PyTorch >= 2.4, PR #124193)",
        "makes .grad None (set_to_none=True, PyTorch >= 2.0)" if zero_grad == "set_to_none"
        else "fills zeros (set_to_none=False, PyTorch < 2.0)",
        "" if static_graph is None else "; static_graph needs %s" % (
            "the first backward synced (PyTorch >= 2.1, PR #103487)" if static_graph == "first-backward"
            else "every backward through a first-iteration forward synced (PyTorch < 2.1)")))


def bf16_hook_runs():
    """Whether DDP takes bf16_compress_hook here: distributed.py's _check_comm_hook refuses it unless torch was
    built with CUDA 11+ and NCCL 2.10+ ("BF16 all reduce communication hook required CUDA 11+ and NCCL 2.10+"),
    whatever the process group and whether a GPU is there: not on Debian's CPU-only 1.13, yes on PyPI's 2.x
    (a CUDA build), where gloo reduces the bfloat16 buckets on the CPU."""
    import torch.distributed as dist
    return torch.version.cuda is not None and dist.is_nccl_available() and torch.cuda.nccl.version() >= (2, 10)
