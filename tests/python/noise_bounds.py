"""Proven per-element bounds for the gradients of the twins that are zero, or
nearly so, in exact arithmetic: attn's q and k (the softmax backward cancels:
a shift of every key changes nothing) and bn's fc1 (BatchNorm subtracts the
batch mean). A relative limit on such a gradient is meaningless: its computed
value is mostly rounding noise, and the noise depends on the BLAS kernel.

Each bound is 2*gamma_m*S per element, with S the sum of the magnitudes of the
terms that cancel, computed beside the value in float64 from the twin's own
intermediates, and gamma_m = m*u/(1 - m*u), u = 2^-24. The derivation, and the
count m of roundings on each path, is in doc/tolerances.md ("Gradients that
cancel"); the functions below follow its numbering.

bounds(spec, twin, inputs, targets, loss) -> {parameter name: float64 array of
the parameter's shape}, for the parameters that have one (an empty dict for a
model without cancelling gradients).
"""
import copy

import numpy as np
import torch

U = 2.0 ** -24  # float32's unit roundoff


def gamma(m):
    """Higham's gamma_m: |prod (1 + d_i)^{+-1} - 1| <= gamma_m for m roundings |d_i| <= u."""
    assert m * U < 1
    return m * U / (1 - m * U)


def _run64(twin, inputs, targets, loss, hooks):
    """The twin's forward and backward in float64, with hooks (module, forward_hook or None, backward_hook or None)."""
    t64 = copy.deepcopy(twin).double()
    mods = dict(t64.named_modules())
    handles = []
    for name, fwd, bwd in hooks:
        if fwd is not None:
            handles.append(mods[name].register_forward_hook(fwd))
        if bwd is not None:
            handles.append(mods[name].register_full_backward_hook(bwd))
    cast = [x.double() if x.is_floating_point() else x for x in inputs if torch.is_tensor(x)]
    targets = targets.double() if targets.is_floating_point() else targets
    loss(t64(*cast), targets).backward()
    for h in handles:
        h.remove()
    return t64


def _attn(twin, inputs, targets, loss):
    """(1) attn.q.* and attn.k.*: the softmax backward dS = P*(dP - r) sums to zero along each row."""
    seen = {}

    def fwd(_m, inp, _out):
        seen["x"] = inp[0].detach()

    def bwd(_m, _gin, gout):
        seen["g"] = gout[0].detach()

    t64 = _run64(twin, inputs, targets, loss, [("attn", fwd, bwd)])
    a = t64.attn
    x, g = seen["x"], seen["g"]  # [B,T,C]: ln1's output, the gradient into the attention's output
    B, T, C = x.shape
    with torch.no_grad():
        q, k, v = a.q(x), a.k(x), a.v(x)
        s = (q @ k.transpose(-2, -1)) * a.scale
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        P = s.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        Wp = a.proj.weight
        dYm = g.abs() @ Wp.abs()  # >= |dY|, dY = g Wp the gradient into att @ v
        dPm = dYm @ v.abs().transpose(-2, -1)  # >= |dP|, dP = dY v^T
        rm = (P * dPm).sum(-1, keepdim=True)  # >= |r|, r_i = sum_j P_ij dP_ij
        Em = P * (dPm + rm)  # >= |dS| and >= the magnitude of the terms of dS's rounding
        EQ = a.scale * (Em @ k.abs())  # [B,T,C] the magnitudes behind dQ = scale dS k
        EK = a.scale * (Em.transpose(-2, -1) @ q.abs())  # behind dK = scale dS^T q
        smag = a.scale * (q.abs() @ k.abs().transpose(-2, -1))  # the logits' rounding magnitudes
    N = B * T
    # m (doc/tolerances.md, (1)): the forward's logits (C) and softmax (T + 4), times the relative error they
    # carry into P, which grows with the logits' magnitude; the backward's dY (C), dP (C), r (T), dS (2),
    # dQ/dK (T), the sum over the N positions of the bias or the weight's product (N + 1), and ln1's output (C + 8).
    kappa = 1.0 + float(smag.max())
    m = int(np.ceil((C + T + 4) * kappa)) + C + C + T + 2 + T + N + 1 + C + 8
    gm = gamma(m)
    xa = x.abs().reshape(N, C)
    out = {}
    for name, E in (("attn.q", EQ), ("attn.k", EK)):
        E2 = E.reshape(N, C)
        out[name + ".bias"] = 2 * gm * E2.sum(0).numpy()
        out[name + ".weight"] = 2 * gm * (E2.t() @ xa).numpy()  # [C_out, C_in]
    return out


def _bn(twin, inputs, targets, loss):
    """(2) bn's fc1.*: BatchNorm's backward subtracts the batch means of dz and dz*xhat; fc1.bias sums to zero."""
    seen = {}

    def fwd_bn(_m, inp, out):
        seen["pre"], seen["z"] = inp[0].detach(), out.detach()

    def bwd_fc2(_m, _gin, gout):
        seen["dout"] = gout[0].detach()

    t64 = _run64(twin, inputs, targets, loss, [("bn", fwd_bn, None), ("fc2", None, bwd_fc2)])
    x = inputs[0].double()
    pre, z, dout = seen["pre"], seen["z"], seen["dout"]
    B, I = x.shape
    O = dout.shape[1]
    with torch.no_grad():
        bn = t64.bn
        rstd = 1.0 / torch.sqrt(pre.var(0, unbiased=False) + bn.eps)
        xh = (pre - pre.mean(0)).abs() * rstd  # |xhat|
        premag = x.abs() @ t64.fc1.weight.abs().t() + t64.fc1.bias.abs()  # >= |pre|, pre's rounding magnitude
        dzm = (1 - torch.tanh(z) ** 2) * (dout.abs() @ t64.fc2.weight.abs())  # >= |dz|, through tanh and fc2
        lam = 1 + 2 * (xh * premag).mean(0) * rstd  # rstd's relative error, in units of eps_f
        xim = (premag + premag.mean(0)) * rstd + xh * lam  # xhat's error, in units of eps_f
        A = dzm + dzm.mean(0) + xh * (dzm * xh).mean(0)  # the terms of dpre's formula in dz
        X = xim * (dzm * xh).mean(0) + xh * (dzm * xim).mean(0)  # dpre's sensitivity to xhat's error
        eps_f = gamma(I + 2 * B + 12)  # (2): pre (I + 1), the mean (B), the variance (B + 3), rstd (2), xhat (3)
        eps_b = gamma(O + 4) + gamma(2 * B + 8) + eps_f * lam  # dz, dpre's formula and the sum, rstd
        Dm = bn.weight.abs() * rstd * (A * eps_b + X * eps_f)  # >= the error of dpre on one side
    return {"fc1.bias": 2 * Dm.sum(0).numpy(), "fc1.weight": 2 * (Dm.t() @ x.abs()).numpy()}


def bounds(spec, twin, inputs, targets, loss):
    family = spec.split(":")[0]
    if family == "attn":
        return _attn(twin, inputs, targets, loss)
    if family == "bn":
        return _bn(twin, inputs, targets, loss)
    return {}
