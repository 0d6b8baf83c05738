"""The cost of checking a DDP through the Python front end, against the
same schedule in plain torch DDP, measured in the same run.

    PYTHONPATH=python DDPSIM=sim/ddpsim /usr/bin/python3 tests/bench/ddpsim_torch_overhead.py \\
        [--ranks 2] [--model mlp:1024-2560-2048-1024] [--batch 1024] [--repeat 3]

Each repetition runs, one after the other: (a) plain torch DDP on gloo, the
ranks spawned the same way, through the schedule's forwards, backwards,
no_sync windows, zero_grad and steps on the twin of the model with the same
initial parameters and batches; (b) the whole check, `ddpsim_torch.check`
with torch's DDP: the same ranks and schedule plus the shadow's forward and
backward of every micro-step, the recording, and `ddpsim check`. Both
include starting the ranks. Prints every time, the medians and their ratio
(the issue's target: at most 2.5). The default model has 9.97M parameters,
and the batch makes the compute dominate.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ddpsim_torch import check, ddpsim, twins

SCHEDULE = "2*( 3*( nosync{fwd bwd} ) fwd bwd grab step zero )"


def plain_rank(rank, nranks, store, model, inputs, ops, lr, threads):
    torch.set_num_threads(threads)
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=nranks)
    module = twins.build(model)
    twins.load_init(module, os.path.join(inputs, "init"))
    ddp = torch.nn.parallel.DistributedDataParallel(module)
    opt = torch.optim.SGD(ddp.parameters(), lr=lr)
    ctx, loss, nfwd = None, None, 0
    for op in ops:
        if op == "enter":
            ctx = ddp.no_sync()
            ctx.__enter__()
        elif op == "exit":
            ctx.__exit__(None, None, None)
        elif op == "fwd":
            x, y = twins.batch(model, inputs, rank, nfwd)
            nfwd += 1
            loss = twins.default_loss(ddp(*x), y)
        elif op == "bwd":
            loss.backward()
        elif op == "zero":
            opt.zero_grad()
        elif op == "step":
            opt.step()
    dist.destroy_process_group()


def plain(nranks, model, batch, threads, binary):
    with tempfile.TemporaryDirectory(prefix="ddpsim-bench-") as d:
        prep = ddpsim.prepare(binary, os.path.join(d, "inputs"), ["--ranks", str(nranks), "--model", model,
                                                                   "--batch", str(batch), "--schedule", SCHEDULE])
        t0 = time.monotonic()
        mp.start_processes(plain_rank, args=(nranks, os.path.join(d, "store"), model, os.path.join(d, "inputs"),
                                             prep["ops"], prep["lr"], threads), nprocs=nranks, start_method="spawn")
        return time.monotonic() - t0


def checked(nranks, model, batch, threads):
    t0 = time.monotonic()
    r = check("torch.nn.parallel:DistributedDataParallel", ranks=nranks, model=model, batch=batch,
              schedule=SCHEDULE, threads=threads, timeout=600)
    took = time.monotonic() - t0
    if not r.passed:
        sys.exit("the check did not pass:\n" + r.report)
    return took, r.timing


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--model", default="mlp:1024-2560-2048-1024")
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", help="write the figures here")
    a = p.parse_args()
    binary = ddpsim.find()
    nparams = sum(q.numel() for q in twins.build(a.model).parameters())
    print("# ddpsim_torch overhead: %s (%d parameters), batch %d, %d ranks, %d thread(s) each, schedule %s" % (
        a.model, nparams, a.batch, a.ranks, a.threads, SCHEDULE))
    base, full, parts = [], [], []
    for i in range(a.repeat):
        base.append(plain(a.ranks, a.model, a.batch, a.threads, binary))
        t, timing = checked(a.ranks, a.model, a.batch, a.threads)
        full.append(t)
        parts.append(timing)
        print("run %d: plain DDP %.2f s, the whole check %.2f s (ranks %.2f s: shadow %.2f s, recording %.2f s; "
              "ddpsim check %.2f s)" % (i + 1, base[-1], t, timing["ranks_s"], timing["shadow_s"],
                                        timing["record_s"], timing["check_s"]))
    mb, mf = statistics.median(base), statistics.median(full)
    print("median: plain DDP %.2f s, the whole check %.2f s: ratio %.2f (target <= 2.5)" % (mb, mf, mf / mb))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": a.model, "params": nparams, "batch": a.batch, "ranks": a.ranks, "plain_s": base,
                       "check_s": full, "parts": parts, "ratio": mf / mb}, f, indent=1)


if __name__ == "__main__":
    main()
