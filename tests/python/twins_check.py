"""The torch twins are ddpsim's models: for mlp, branchy, attn, bn and tied, the same
parameter names and shapes in the same order, and, from the same initial
parameters and batches (branchy's branches with them), the gradients
ddpsim's C model computes (the grab after a no_sync micro-step of
ddpsim --dump is that micro-step's local gradient), within float32 rounding
of two different summation orders.

    PYTHONPATH=python DDPSIM=sim/ddpsim python3 tests/python/twins_check.py
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

from ddpsim_torch import ddpsim, twins


def compare(binary, spec, extra, d):
    """ddpsim's dump of three no_sync micro-steps against the twin on the same inputs; the worst difference."""
    out = os.path.join(d, spec.replace(":", "_"))
    p = subprocess.run([binary, "--ranks", "1", "--model", spec, "--schedule", "3*( nosync{fwd bwd} grab zero )",
                        "--dump", out, "-q"] + extra, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True)
    assert p.returncode == 0, p.stdout
    twin = twins.build(spec)
    twins.load_init(twin, os.path.join(out, "init"))
    names = [n for n, _ in twin.named_parameters()]
    manifest = __import__("json").load(open(os.path.join(out, "manifest.json")))
    assert names == [q["name"] for q in manifest["params"]], (names, manifest["params"])
    assert [list(q.shape) for _, q in twin.named_parameters()] == [q["shape"] for q in manifest["params"]]
    worst = 0.0
    for k in range(3):
        twin.zero_grad(set_to_none=True)
        inputs, targets = twins.batch(spec, out, 0, k)
        twins.default_loss(twin(*inputs), targets).backward()
        wants = {n: np.load(os.path.join(out, "reference", "rank0", "grab%d" % k, n + ".npy")) for n in names}
        biggest = max(float(np.abs(w).max()) for w in wants.values())
        for n, q in twin.named_parameters():
            want = wants[n]
            got = q.grad.numpy() if q.grad is not None else np.zeros_like(want)
            # Relative to the tensor's own size, or for a gradient that is rounding noise (attn's k.bias, exactly
            # zero in exact arithmetic: softmax ignores a shift of every key) to the model's largest.
            scale = max(float(np.abs(want).max()), 1e-3 * biggest)
            if spec.startswith("bn") and n == "fc1.bias":
                scale = biggest  # BatchNorm subtracts the batch mean: this gradient is zero but for rounding
            err = float(np.abs(got - want).max()) / scale
            worst = max(worst, err)
            assert err < 1e-5, "%s grab %d %s: relative difference %g" % (spec, k, n, err)
    if spec == "tied":  # its tied weight's gradient comes in two pieces, the decoder's first, as ddpsim's model says
        calls = []
        hook = twin.enc.weight.register_hook(lambda g: calls.append(g.clone()))
        twin.zero_grad(set_to_none=True)
        inputs, targets = twins.batch(spec, out, 0, 0)
        out_ = twin(*inputs)
        twins.default_loss(out_, targets).backward()
        hook.remove()
        with torch.no_grad():
            h = torch.tanh(twin.enc(inputs[0]))
            decoder = h.t() @ (2 * (out_ - targets) / out_.numel())
        assert len(calls) == 2 and torch.allclose(calls[0], decoder, rtol=1e-5, atol=1e-7), len(calls)
    return worst


def main():
    binary = ddpsim.find()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as d:
        for spec, extra in (("mlp:32-64-64-16", []), ("mlp:13-7-5", []), ("branchy", ["--find-unused"]),
                            ("attn", []), ("bn", []), ("tied", ["--static-graph"])):
            worst = compare(binary, spec, extra, d)
            print("twin %s: names, shapes and gradients match ddpsim's (largest difference %.2g of the largest "
                  "gradient)" % (spec, worst))


if __name__ == "__main__":
    sys.exit(main())
