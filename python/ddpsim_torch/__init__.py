"""ddpsim_torch: check a PyTorch DDP implementation against ddpsim's
reference DDP (PyTorch's semantics, in C).

    from ddpsim_torch import check
    result = check("torch.nn.parallel:DistributedDataParallel", ranks=2)
    assert result.passed, result.report

The front end runs the ranks on gloo through the wrapper's own forward,
no_sync() and backward, records what happened (the wrapper's .grad at every
grab, the plain local gradient of every micro-step), and `ddpsim check`
replays the reference on the recording. See README.md, "Check your own DDP
(Python)".
"""
__version__ = "0.1.0"

from . import _rank_process  # noqa: E402,F401  (first: the fork server's start, before torch)
from .api import check  # noqa: E402
from .loading import BadInput  # noqa: E402
from .result import Result  # noqa: E402

__all__ = ["check", "Result", "BadInput", "__version__"]
