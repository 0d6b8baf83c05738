"""The fact ddpsim's --static-graph rules rest on (schedule.h, sched_static_graph_conflict), checked on this
torch's real DDP under the rule the front end picks for it (semantics.static_graph_rule): with static_graph=True,
before 2.1 a backward that no sync armed, through a forward between the first and the second syncing forward,
fails (reducer.cpp's expect_autograd_hooks_ assert) and the same micro-step before the first syncing forward, or
after the second, runs; from 2.1 only a first backward that no sync armed fails. Each schedule gets two fresh gloo
ranks (a failed reducer is not reused). ddpsim's prediction is asked of ddpsim itself ($DDPSIM --static-graph
--static-graph-rule RULE --prepare: accepted, or refused with exit 2). The cases tell the two rules apart: each
rule mispredicts at least one of them on the other torch. Prints one line per schedule; exits 1 when torch does
not do what ddpsim predicts."""
import multiprocessing
import os
import socket
import subprocess
import sys
import tempfile

import torch
import torch.distributed as dist
from torch import nn

from ddpsim_torch import semantics

CASES = ["fwd bwd nosync{fwd bwd}", "fwd bwd enter fwd exit bwd", "nosync{fwd bwd} fwd bwd fwd bwd nosync{fwd bwd}",
         "fwd nosync{fwd bwd} fwd bwd", "fwd bwd nosync{fwd} fwd bwd", "nosync{fwd bwd} fwd bwd", "nosync{fwd} bwd"]


def ddpsim_predicts_it_runs(schedule, rule):
    with tempfile.TemporaryDirectory() as d:
        p = subprocess.run([os.environ.get("DDPSIM", "ddpsim"), "--ranks", "2", "--static-graph",
                            "--static-graph-rule", rule, "--schedule",
                            schedule, "--prepare", os.path.join(d, "in"), "--quiet"], capture_output=True, text=True)
    if p.returncode not in (0, 2) or (p.returncode == 2 and "--static-graph" not in p.stderr):
        raise SystemExit("ddpsim --prepare on %r: exit %d: %s" % (schedule, p.returncode, p.stderr.strip()))
    return p.returncode == 0


def run(schedule, ddp):
    x = torch.randn(4, 6)
    pending, contexts = None, []
    for op in schedule.replace("nosync{", "enter ").replace("}", " exit").split():
        if op == "enter":
            contexts.append(ddp.no_sync())
            contexts[-1].__enter__()
        elif op == "exit":
            contexts.pop().__exit__(None, None, None)
        elif op == "fwd":
            pending = ddp(x).pow(2).sum()
        else:
            pending.backward()


def rank_main(rank, port, schedule, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    ddp = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3)),
                                              static_graph=True)
    try:
        run(schedule, ddp)
        got = 1
    except RuntimeError as e:
        got = 0 if "expect_autograd_hooks_" in str(e) else -1
    if rank == 0:
        out.value = got
    os._exit(0)  # a failed reducer need not shut down cleanly; nothing to flush


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    print("torch %s: --static-graph-rule %s" % (torch.__version__, semantics.static_graph_rule()))
    ctx = multiprocessing.get_context("spawn")
    bad = 0
    rule = semantics.static_graph_rule()
    other = "first-iteration" if rule == "first-backward" else "first-backward"
    other_wrong = 0
    for schedule in CASES:
        runs = ddpsim_predicts_it_runs(schedule, rule)
        out = ctx.Value("i", 9)
        port = free_port()
        procs = [ctx.Process(target=rank_main, args=(r, port, schedule, out)) for r in range(2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
            if p.is_alive():
                p.kill()
        got = out.value
        seen = "runs" if got == 1 else "fails (expect_autograd_hooks_)" if got == 0 else "another outcome"
        expected = (got == 1) if runs else (got == 0)
        bad += not expected
        other_wrong += ddpsim_predicts_it_runs(schedule, other) != (got == 1)
        print("%s %r: %s; ddpsim predicts it %s" % ("ok" if expected else "WRONG", schedule, seen,
                                                   "runs" if runs else "fails"))
    # The check can fail: the other torch's rule, asked the same, mispredicts this torch.
    print("the other rule (%s) mispredicts %d of %d schedules here" % (other, other_wrong, len(CASES)))
    return 1 if bad or not other_wrong else 0


if __name__ == "__main__":
    sys.exit(main())
