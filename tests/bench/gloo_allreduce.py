"""gloo_allreduce.py - the PyTorch gloo baseline for `ddpsim bench allreduce`.

Times an in-place float32 all_reduce (sum) over the gloo backend on the
loopback interface the way ddpsim times its own (a barrier, then the
allreduce; per iteration the slowest rank; the median after warm-up) and
checks the result. Usage: python3 gloo_allreduce.py RANKS BYTES ITERS
Prints "<bytes> <median_us> <wrong>".
"""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, size, count, iters, port, out):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=size)
    idx = torch.arange(count, dtype=torch.int64)
    times = []
    wrong = 0
    for it in range(-3, iters):
        buf = (((idx * 7 + rank * 13) % 1025) - 512).to(torch.float32)
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(buf, op=dist.ReduceOp.SUM)
        t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        if it >= 0:
            times.append(t.item() * 1e6)
        if it == iters - 1:
            want = sum(((((idx * 7 + r * 13) % 1025) - 512).to(torch.float64)) for r in range(size))
            wrong = int((buf.to(torch.float64) != want).sum())
    if rank == 0:
        times.sort()
        out.put((times[len(times) // 2], wrong))
    dist.destroy_process_group()


def main():
    size, nbytes, iters = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = 29500 + os.getpid() % 1000
    procs = [ctx.Process(target=worker, args=(r, size, nbytes // 4, iters, port, out)) for r in range(size)]
    for p in procs:
        p.start()
    median, wrong = out.get(timeout=600)
    for p in procs:
        p.join()
    print(nbytes, "%.1f" % median, wrong)


if __name__ == "__main__":
    main()
