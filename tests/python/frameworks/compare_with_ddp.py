"""compare_with_ddp.py FILE:FUNC [OPS] - a framework's gradients against plain torch DDP's, without ddpsim: the
independent evidence behind a FAIL of ddpsim's on a framework (tests/frameworks.sh). Two gloo ranks build the
same small model twice, one under FUNC (a --wrap adapter of tests/python/frameworks/) and one under
torch.nn.parallel.DistributedDataParallel, and run OPS on both with the same batches: fwd, bwd, grab and
nosync{...} as in ddpsim's schedules (default "nosync{fwd bwd} grab fwd bwd grab": the classic scenario's first
window). Prints, for rank 0, the largest |framework - DDP| of .grad at each grab; exit 0 (the caller judges the
figures), 1 if a rank failed."""
import importlib.util
import multiprocessing
import os
import socket
import sys

import torch
import torch.distributed as dist
from torch import nn


def load(spec):
    path, _, func = spec.rpartition(":")
    m = importlib.util.spec_from_file_location("adapter", path)
    mod = importlib.util.module_from_spec(m)
    m.loader.exec_module(mod)
    return getattr(mod, func)


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))


def grads(wrapped, ops, batches):
    params = list(wrapped.parameters())  # the wrapper's own tensors (thunder's are not the module's)
    backward = getattr(wrapped, "ddpsim_backward", None) or (lambda loss: loss.backward())
    contexts, pending, out, forwards = [], None, [], 0
    for op in ops.replace("nosync{", " enter ").replace("}", " exit ").split():
        if op == "enter":
            contexts.append(wrapped.no_sync())
            contexts[-1].__enter__()
        elif op == "exit":
            contexts.pop().__exit__(None, None, None)
        elif op == "fwd":
            x, y = batches[forwards]
            forwards += 1
            pending = nn.functional.mse_loss(wrapped(x), y)
        elif op == "bwd":
            backward(pending)
        elif op == "grab":  # a DTensor's (FSDP2's sharded .grad after a sync) whole
            out.append([(p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad).detach().clone()
                        for p in params])
        else:
            raise SystemExit("compare_with_ddp: %r is not fwd, bwd, grab or nosync{...}" % op)
    return out


def rank_main(rank, port, spec, ops, result):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    g = torch.Generator().manual_seed(100 + rank)
    batches = [(torch.randn(4, 6, generator=g), torch.randn(4, 3, generator=g)) for _ in range(ops.count("fwd"))]
    theirs = grads(load(spec)(model()), ops, batches)
    ours = grads(nn.parallel.DistributedDataParallel(model()), ops, batches)
    if rank == 0:
        for k in range(len(theirs)):
            result[k] = max(float((a - b).abs().max()) for a, b in zip(theirs[k], ours[k]))
    dist.barrier()
    os._exit(0)


def main():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ops = sys.argv[2] if len(sys.argv) > 2 else "nosync{fwd bwd} grab fwd bwd grab"
    ctx = multiprocessing.get_context("spawn")
    result = ctx.Array("d", [-1.0] * ops.count("grab"))
    procs = [ctx.Process(target=rank_main, args=(r, port, sys.argv[1], ops, result)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(600)
    if any(p.exitcode != 0 for p in procs) or min(result) < 0:
        print("compare_with_ddp: a rank failed")
        return 1
    print("ops: %s" % ops)
    for k, d in enumerate(result):
        print("grab %d: max |%s - torch DDP| = %.9g" % (k, sys.argv[1].rpartition(":")[2], d))
    return 0


if __name__ == "__main__":
    sys.exit(main())
