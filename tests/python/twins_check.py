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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import noise_bounds  # noqa: E402


def compare(binary, spec, extra, d, bend=None):
    """ddpsim's dump of three no_sync micro-steps against the twin on the same inputs; the worst difference and
    the worst fraction of a proven bound. bend(twin), if given, breaks the twin and only the bounded parameters
    are compared, so that the proven bounds are seen to fire."""
    out = os.path.join(d, spec.replace(":", "_"))
    p = subprocess.run([binary, "--ranks", "1", "--model", spec, "--schedule", "3*( nosync{fwd bwd} grab zero )",
                        "--dump", out, "-q"] + extra, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True)
    assert p.returncode == 0, p.stdout
    twin = twins.build(spec)
    twins.load_init(twin, os.path.join(out, "init"))
    if bend:
        bend(twin)
    names = [n for n, _ in twin.named_parameters()]
    manifest = __import__("json").load(open(os.path.join(out, "manifest.json")))
    assert names == [q["name"] for q in manifest["params"]], (names, manifest["params"])
    assert [list(q.shape) for _, q in twin.named_parameters()] == [q["shape"] for q in manifest["params"]]
    worst, worst_bound = 0.0, 0.0
    for k in range(3):
        twin.zero_grad(set_to_none=True)
        inputs, targets = twins.batch(spec, out, 0, k)
        twins.default_loss(twin(*inputs), targets).backward()
        wants = {n: np.load(os.path.join(out, "reference", "rank0", "grab%d" % k, n + ".npy")) for n in names}
        biggest = max(float(np.abs(w).max()) for w in wants.values())
        proven = noise_bounds.bounds(spec, twin, inputs, targets, twins.default_loss)
        for n, q in twin.named_parameters():
            want = wants[n]
            got = q.grad.numpy() if q.grad is not None else np.zeros_like(want)
            diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
            if n in proven:
                # Zero or nearly zero in exact arithmetic: the proven bound of doc/tolerances.md, per element.
                bound = proven[n]
                assert bound.shape == diff.shape and np.all(np.isfinite(bound)), n
                ratio = float((diff / bound).max())
                worst_bound = max(worst_bound, ratio)
                assert ratio <= 1.0, "%s grab %d %s: difference %g at element %d is over the proven bound %g" % (
                    spec, k, n, diff.max(), int(diff.argmax()), bound.flat[int((diff / bound).argmax())])
                # The bound must be able to fail: it is far below the model's gradients, so a gradient that is
                # wrong by a small fraction of them (here 1e-4 of the largest, at its largest element) is caught.
                # Not vacuous: a model bug moves these gradients by O(1) of their size, far over the bound.
                assert float(bound.max()) < 1e-2 * biggest, "%s %s: the bound %g is vacuous" % (spec, n, bound.max())
                continue
            if bend:
                continue
            # Empirical (doc/tolerances.md, "The twins"): the two sides add in other orders, each within
            # gamma_K of the exact value; measured at most 5.1e-7 relative to the tensor's largest element under
            # OpenBLAS's Prescott, Nehalem, Sandybridge, Haswell, SkylakeX and Zen kernels, for every parameter
            # not bounded above; 1e-5 leaves a margin of 19, and a model bug is off by O(1).
            err = float(diff.max()) / float(np.abs(want).max()) if np.abs(want).max() > 0 else float(diff.max())
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
            dd = 2 * (out_ - targets) / out_.numel()
            decoder = h.t() @ dd
            # Proven (doc/tolerances.md, (3)): both are h^T dd over the batch's B rows from the same h, dd within
            # gamma_3 of each other (mse's backward rounds the difference, the factor and the division): each side
            # is within gamma_(B+3) |h|^T |dd| of the exact product.
            bound = 2 * noise_bounds.gamma(h.shape[0] + 3) * (h.double().abs().t() @ dd.double().abs())
        assert len(calls) == 2, len(calls)
        assert bool(((calls[0].double() - decoder.double()).abs() <= bound).all()), "tied: the decoder's piece"
    return worst, worst_bound


def main():
    binary = ddpsim.find()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as d:
        for spec, extra in (("mlp:32-64-64-16", []), ("mlp:13-7-5", []), ("branchy", ["--find-unused"]),
                            ("attn", []), ("bn", []),
                            # tied needs static_graph; its no_sync-first schedule is torch < 2.1's to run
                            ("tied", ["--static-graph", "--static-graph-rule", "first-iteration"])):
            worst, worst_bound = compare(binary, spec, extra, d)
            print("twin %s: names, shapes and gradients match ddpsim's (largest difference %.2g of a tensor's "
                  "largest element%s)" % (spec, worst, ", %.2g of the proven bound where the gradient cancels"
                                          % worst_bound if worst_bound else ""))
    # The proven bounds fire on a twin with a small bug where the gradients cancel: an attention whose scale is
    # 1% off, a BatchNorm whose eps is 1e-4 instead of 1e-5 (its rstd 2% off on these batches).
    def scale(t):
        t.attn.scale *= 1.01

    def eps(t):
        t.bn.eps = 1e-4
    with tempfile.TemporaryDirectory() as d:
        for spec, bend in (("attn", scale), ("bn", eps)):
            try:
                compare(binary, spec, [], d, bend)
            except AssertionError as e:
                assert "over the proven bound" in str(e), e
                print("a %s twin with a small bug fails its proven bound: %s" % (spec, e))
            else:
                raise AssertionError("a %s twin with a small bug passed" % spec)


if __name__ == "__main__":
    sys.exit(main())
