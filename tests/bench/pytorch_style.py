"""The classic schedule checked the way PyTorch's own DDP tests check it, for timing against ddpsim
(tests/bench-vs-pytorch.sh): N spawned processes on gloo (MultiProcessTestCase style), each with
DistributedDataParallel over the mlp:32-64-64-16 twin and, beside it, plain copies of the module: one on
the global batch (every rank's micro-batch, as torch's _test_DDP_helper compares DDP with a local model on
the whole batch) and one on the rank's own batch (what no_sync leaves, as test_accumulate_gradients_no_sync
checks). At every grab the DDP gradients are compared with the right copy's by torch.testing.assert_close's
float32 defaults (rtol 1.3e-6, atol 1e-5); steps are SGD on all three.

    /usr/bin/python3 tests/bench/pytorch_style.py [RANKS] [REPEATS]

Prints one line per repeat: the wall time of the whole check (spawning, process group, run, comparisons),
and "ok" or the first failing grab. Exits non-zero when a comparison fails.
"""
import copy
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

# ddpsim's classic scenario, expanded: 2*( 2*( nosync{fwd bwd} grab ) fwd bwd grab step zero fwd bwd grab step zero )
WINDOW = ["nofwdbwd", "grab", "nofwdbwd", "grab", "fwdbwd", "grab", "step", "zero", "fwdbwd", "grab", "step", "zero"]
CLASSIC = WINDOW * 2
BATCH, DIMS, LR = 4, (32, 64, 64, 16), 0.1


def model():
    torch.manual_seed(1)
    layers = []
    for a, b in zip(DIMS, DIMS[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def batch(rank, k):
    g = torch.Generator().manual_seed(1000 * k + rank)
    return torch.randn(BATCH, DIMS[0], generator=g), torch.randn(BATCH, DIMS[-1], generator=g)


def rank_main(rank, nranks, store, failed):
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=nranks)
    torch.set_num_threads(1)
    base = model()
    ddp = nn.parallel.DistributedDataParallel(copy.deepcopy(base))
    whole, mine = copy.deepcopy(base), copy.deepcopy(base)
    opts = [torch.optim.SGD(m.parameters(), lr=LR) for m in (ddp, whole, mine)]
    loss = nn.MSELoss()
    k = synced = 0
    for i, op in enumerate(CLASSIC):
        if op in ("fwdbwd", "nofwdbwd"):
            x, y = batch(rank, k)
            xs = [batch(r, k) for r in range(nranks)]
            k += 1
            if op == "nofwdbwd":
                with ddp.no_sync():
                    loss(ddp(x), y).backward()
            else:
                loss(ddp(x), y).backward()
            loss(whole(torch.cat([a for a, _ in xs])), torch.cat([b for _, b in xs])).backward()
            loss(mine(x), y).backward()
            synced = op == "fwdbwd"
        elif op == "grab":
            ref = whole if synced else mine  # synced: the global batch; under no_sync: this rank's own
            if synced:  # after a sync the window's local part is in the average: re-base the rank's copy on it
                for p, q in zip(mine.parameters(), whole.parameters()):
                    p.grad = q.grad.clone()
            for (name, p), q in zip(ddp.module.named_parameters(), ref.parameters()):
                try:
                    torch.testing.assert_close(p.grad, q.grad)
                except AssertionError as e:
                    failed.value = 1
                    print("rank %d op %d (%s) %s: %s" % (rank, i, op, name, str(e).splitlines()[0]), flush=True)
                    dist.destroy_process_group()
                    return
        elif op == "step":
            for o in opts:
                o.step()
        elif op == "zero":
            for o in opts:
                o.zero_grad(set_to_none=False)
    dist.barrier()
    dist.destroy_process_group()


def once(nranks):
    with tempfile.TemporaryDirectory() as d:
        failed = mp.get_context("spawn").Value("i", 0)
        t0 = time.monotonic()
        mp.spawn(rank_main, args=(nranks, os.path.join(d, "store"), failed), nprocs=nranks, join=True)
        return time.monotonic() - t0, failed.value == 0


def main():
    nranks = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    bad = 0
    for _ in range(repeats):
        t, ok = once(nranks)
        bad += not ok
        print("%.3f %s" % (t, "ok" if ok else "FAIL"), flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
