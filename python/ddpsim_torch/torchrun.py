"""Running as the ranks torchrun (torch.distributed.run) started: each
process is one rank, the process group comes from the environment (env://),
rank 0 prepares the inputs and, once every rank has recorded, runs
`ddpsim check` and prints the report. The ranks share a filesystem (one
machine, or --keep on a shared directory). Without a supervisor here a
deadlock ends when the process group's timeout (--timeout) fires, and
torchrun stops every rank when one fails."""
import datetime
import os
import sys

import torch.distributed as dist

from . import rank as rank_mod
from .loading import BadInput


def launched_by_torchrun():
    return "TORCHELASTIC_RUN_ID" in os.environ or all(v in os.environ for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR"))


def run(plan, timeout):
    """plan(nranks) on rank 0 -> (cfg, header, finish) where finish(outcomes) -> Result; every rank records.
    Returns the exit code every rank exits with."""
    rank, nranks = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", init_method="env://",
                            timeout=datetime.timedelta(seconds=timeout if timeout > 0 else 1800))
    box = [None]
    finish = None
    if rank == 0:
        try:
            cfg, finish = plan(nranks)
            box = [cfg]
        except BadInput as e:
            box = [{"bad": str(e)}]
    dist.broadcast_object_list(box, src=0)
    cfg = box[0]
    if "bad" in cfg:
        if rank == 0:
            sys.stderr.write("# verdict: BAD INPUT: %s\n" % cfg["bad"])
        return 2
    progress = [0.0] * (nranks * rank_mod.ROW)
    r = rank_mod.Rank(rank, nranks, cfg, progress)
    import torch
    torch.set_num_threads(cfg["threads"])
    try:
        for j, job in enumerate(cfg["jobs"]):
            r.run_job(j, job)
            dist.barrier()
    except BadInput as e:
        sys.stderr.write("# verdict: BAD INPUT: rank %d: %s\n" % (rank, e))
        return 2
    code = [0]
    if rank == 0:
        result = finish([None] * len(cfg["jobs"]))
        sys.stdout.write(result.report)
        code = [result.exit_code]
    dist.broadcast_object_list(code, src=0)
    return code[0]
