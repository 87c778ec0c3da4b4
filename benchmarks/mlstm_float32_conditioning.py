"""Which operation of the mLSTM makes a float32 case ill-conditioned? (issue 47)

Usage::

    python benchmarks/mlstm_float32_conditioning.py ID [--element l1.fwd.w_q 13 0] [--draws 8]
        [--roundoffs 2] [--sites C q ...] [--no-sites]

For one mlstm case id (default conventions) it runs the float64 loop reference again with Gaussian
noise of R unit roundoffs of the case dtype times |v| on one operation's values only (the site), in
every layer's steps and then in one layer's steps at a time, and prints how far the element moves
(the largest change over ``--draws`` draws) in units of its room (atol + rtol·|b|, the case's
tolerances; an element of a Hessian-vector product, ``l2.fwd.w_q.u0``, along the gradgrad check's
direction 0, under the product room). Sites: the layer input x, the projections q, k, v, the gate
pre-activations ĩ and f̃, the stabiliser m, the memory C, the normaliser n, the numerator Cᵀq̃, the
denominator max(|nᵀq̃|, e^−m) + ε; then the layer outputs between layers (the rounding probe's
site). It then prints the element's gradient as a sum of its layer's steps' terms (their sizes'
sum over the element: the sum's cancellation) and, for the element's layer and head, per step of
each sequence:

- the cancellation in the read's derivative in the query: h = Cᵀq̃ / d, d = max(|nᵀq̃|, e^−m) + ε, is
  a weighted average of the stored values v_s (weights e^(ĩ_s + Σ log f) (k_s·q̃) / d), and on the
  |nᵀq̃| branch ∂h_j/∂q̃ = (C[:, j] − h_j·sign(nᵀq̃)·n) / d = Σ_s w_s k_s (v_s,j − h_j) / d, small
  where the values lie near their average: rounding of C, n (u·|v| each) moves it by u times
  cond = ‖|C[:, j]| + |h_j|·|n|‖ / ‖C[:, j] − h_j·sign(nᵀq̃)·n‖ (the largest over j; 1 on e^−m's
  branch, where ∂h/∂q̃ = C[:, j] / d);
- the cancellation in the read itself, cond = Σ_k |C[k, j] q̃_k| / |Σ_k C[k, j] q̃_k| (how far a
  rounding of C moves h, in units of u·|h|);
- |nᵀq̃| / e^−m (the max's branch: below 1, e^−m wins);
- the gates: the largest ĩ − m (i' = exp of it) and the range of m.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gradcheck_rnn.families import mlstm as mlstm_module  # noqa: E402
from gradcheck_rnn.families.mlstm import EPS, MLSTMFamily  # noqa: E402
from gradcheck_rnn.model.case import Case, as_mapping  # noqa: E402
from gradcheck_rnn.model.tolerances import Tolerances  # noqa: E402
from gradcheck_rnn.references.drift import UNIT_ROUNDOFF  # noqa: E402
from gradcheck_rnn.references.loop import _loss_terms, _tensor, run_loop_hvp, run_loop_reference  # noqa: E402
from gradcheck_rnn.judging.checks.directions import ProductTolerances  # noqa: E402
from gradcheck_rnn.judging.context import tangent_directions  # noqa: E402

SITES = ("x", "q", "k", "v", "gate_i", "gate_f", "m", "C", "n", "numerator", "denominator")


def noisy_step(site: str, scale: float, rng: np.random.Generator, trace: list | None = None,
               shifts: tuple[str, list] | None = None, only: tuple[list[int], int] | None = None):
    """MLSTMFamily.step (default conventions) with noise of ``scale``·|v| on ``site``'s values; each
    step's quantities appended to ``trace`` when given; with ``shifts`` (a parameter kind, a list),
    each step reads that parameter plus a zero leaf of its own, appended to the list (its gradient
    is the step's term of the parameter's gradient); with ``only`` (the layer of each step call of a
    forward pass, a layer), noise in that layer's steps only."""
    calls = [0]

    def nz(name: str, t):
        if name != site or (only is not None and only[0][(calls[0] - 1) % len(only[0])] != only[1]):
            return t
        return t + scale * t.detach().abs() * torch.from_numpy(rng.standard_normal(tuple(t.shape)))

    def step(self, ops, p, x, h, c, config):
        NH, K, _ = self.sizes(config)
        calls[0] += 1
        if shifts is not None:
            kind, leaves = shifts
            leaves.append(torch.zeros_like(p[kind], requires_grad=True))
            p = {**p, kind: p[kind] + leaves[-1]}
        x = nz("x", x)
        x, q, k, v = self.project(ops, p, x, config)
        q, k, v = nz("q", q), nz("k", k), nz("v", v)
        gate_i, gate_f = x @ p["w_i"].T, x @ p["w_f"].T
        if "b_i" in p:
            gate_i, gate_f = gate_i + p["b_i"], gate_f + p["b_f"]
        gate_i, gate_f = nz("gate_i", gate_i), nz("gate_f", gate_f)
        log_f = ops.log_sigmoid(gate_f)
        n_prev, m_prev = c[..., :NH * K].reshape(c.shape[:-1] + (NH, K)), c[..., NH * K:]
        m = nz("m", ops.maximum(log_f + m_prev, gate_i))
        i_s, f_s = ops.exp(gate_i - m), ops.exp(log_f + m_prev - m)
        written = i_s[..., None, None] * k[..., :, None] * v[..., None, :]
        memory = nz("C", f_s[..., None, None] * self.matrix(h, config) + written)
        n = nz("n", f_s[..., None] * n_prev + i_s[..., None] * k)
        q = q * self.scale(p, config)
        numerator = nz("numerator", (memory * q[..., :, None]).sum(-2))
        denominator = nz("denominator", ops.maximum(ops.abs((n * q).sum(-1)), ops.exp(-m)) + EPS)
        out = numerator / denominator[..., None]
        if trace is not None:
            trace.append({name: value.detach().numpy().copy() for name, value in
                          (("q", q), ("v", v), ("gate_i", gate_i), ("m", m),
                           ("h", out), ("nq", (n * q).sum(-1)), ("C", memory), ("n", n))})
        return (out.reshape(out.shape[:-2] + (-1,)), memory.reshape(h.shape),
                ops.cat([n.reshape(n.shape[:-2] + (-1,)), m], -1))

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case_id", metavar="ID")
    parser.add_argument("--element", nargs="+", default=["l1.fwd.w_q", "13", "0"],
                        help="a parameter gradient's element, lL.fwd.KIND ROW [COL], or a Hessian-vector "
                             "product's, lL.fwd.KIND.uK ROW [COL]")
    parser.add_argument("--draws", type=int, default=8)
    parser.add_argument("--roundoffs", type=float, default=2.0)
    parser.add_argument("--sites", nargs="*", default=list(SITES), choices=SITES)
    parser.add_argument("--no-sites", action="store_true", help="only the forward's quantities")
    args = parser.parse_args()
    case = Case.from_id(args.case_id)
    cfg = case.config
    name, index = args.element[0], tuple(int(i) for i in args.element[1:])
    if not re.fullmatch(r"l\d+\.fwd\.\w+?(\.u\d+)?", name):
        parser.error(f"--element {name}: a layer parameter's gradient (l1.fwd.w_q) or product (l1.fwd.w_q.u0)")
    u = UNIT_ROUNDOFF[cfg.dtype]
    if ".u" in name:  # a Hessian-vector product's element, along the gradgrad check's direction k
        gradient, k = name.rsplit(".u", 1)
        direction = tangent_directions(case)[int(k)]
        tol = ProductTolerances(Tolerances()).for_tensor(cfg.dtype, name)

        def run(noise=None):
            return {name: run_loop_hvp(case, direction, layer_noise=noise).grads[gradient]}
    else:
        tol = Tolerances().for_tensor(cfg.dtype, name)

        def run(noise=None):
            return as_mapping(run_loop_reference(case, noise))
    base = run()
    truth = base[name][index]
    base_first = as_mapping(run_loop_reference(case))
    room = tol.atol + tol.rtol * abs(truth)
    print(f"{name}{list(index)}: b = {truth:.6g}, room {room:.3g}; noise {args.roundoffs:g} roundoffs of |v|, "
          f"max of {args.draws} draws, in rooms:")
    original = MLSTMFamily.step
    rng = np.random.default_rng(0)
    layer_of = [layer for n in case.seq_lengths for layer in range(cfg.num_layers) for _ in range(int(n))]
    print(f"  {'site':12s} {'all layers':>10s} " + " ".join(f"{'layer ' + str(k):>8s}" for k in range(cfg.num_layers)))
    try:
        for site in () if args.no_sites else args.sites:
            row = []
            for only in [None] + [(layer_of, k) for k in range(cfg.num_layers)]:
                mlstm_module.MLSTMFamily.step = noisy_step(site, args.roundoffs * u, rng, only=only)
                row.append(max(abs(run()[name][index] - truth) / room for _ in range(args.draws)))
            print(f"  {site:12s} {row[0]:10.3g} " + " ".join(f"{moved:8.3g}" for moved in row[1:]))
        mlstm_module.MLSTMFamily.step = original

        def between(layer, b, out):
            draw = torch.from_numpy(rng.standard_normal(tuple(out.shape)))
            return out + args.roundoffs * u * out.detach().abs() * draw

        for only in range(0 if args.no_sites else cfg.num_layers - 1):
            def one_layer(layer, b, out, only=only):
                return between(layer, b, out) if layer == only else out
            moved = max(abs(run(one_layer)[name][index] - truth) / room
                        for _ in range(args.draws))
            print(f"  {'layer ' + str(only) + ' out':12s} {moved:8.3g}")

        # the element's layer and head: the cancellation of the numerator's derivative in q̃
        trace: list = []
        mlstm_module.MLSTMFamily.step = noisy_step("", 0.0, rng, trace)
        run_loop_reference(case)  # the forward's quantities
        gradient = name.split(".u")[0]
        kind = gradient.split(".")[-1]
        leaves: list = []
        mlstm_module.MLSTMFamily.step = noisy_step("", 0.0, rng, shifts=(kind, leaves))
        x, h0, c0 = (_tensor(a, True) for a in (case.x, case.h0, case.c0))
        params = {k: _tensor(v, True) for k, v in case.params.items()}
        with torch.enable_grad():
            loss = _loss_terms(case, x, h0, c0, params)[3]
            terms = [g[index[:2]].item() for g in torch.autograd.grad(loss, leaves)]
    finally:
        mlstm_module.MLSTMFamily.step = original
    layer = int(name.split(".")[0][1:])
    NH, K, V = cfg.family.sizes(cfg)
    head = index[0] // K if name.split(".u")[0].endswith(("w_q", "w_k")) else index[0] // V
    steps_per_layer = [int(n) for n in case.seq_lengths]
    at = 0
    print(f"layer {layer}, head {head}: per sequence and step, the cancellation in ∂h/∂q̃ and the max's branch; "
          f"the gates")
    mine = [t for b, length in enumerate(steps_per_layer) for t in
            range(sum(cfg.num_layers * n for n in steps_per_layer[:b]) + layer * length,
                  sum(cfg.num_layers * n for n in steps_per_layer[:b]) + (layer + 1) * length)]
    own = np.array([terms[t] for t in mine])
    print(f"{gradient}{list(index[:2])} as a sum over its layer's steps: {own.sum():.6g} (first-order truth "
          f"{base_first[gradient][index[:2]]:.6g}) from terms of |sum| {np.abs(own).sum():.4g}, the largest "
          f"{np.abs(own).max():.4g}: cancellation {np.abs(own).sum() / abs(own.sum()):.3g}")
    for b, length in enumerate(steps_per_layer):
        steps = trace[at + layer * length: at + (layer + 1) * length]
        at += cfg.num_layers * length
        if not steps:
            continue
        gi = np.array([s["gate_i"][head] for s in steps])
        vs = np.array([s["v"][head] for s in steps])
        conds, reads, branch = [], [], []
        for s in steps:
            memory, n, h = s["C"][head], s["n"][head], s["h"][head]
            numerator_branch = abs(s["nq"][head]) > math.exp(-s["m"][head])
            # ∂h_j/∂q̃ = (C[:, j] − h_j sign(nᵀq̃) n) / d on the |nᵀq̃| branch, C[:, j] / d on e^−m's
            n = np.sign(s["nq"][head]) * n
            grad = memory - h[None, :] * n[:, None] if numerator_branch else memory
            size = np.abs(memory) + (np.abs(h[None, :]) * np.abs(n[:, None]) if numerator_branch else 0)
            conds.append(float(np.max(np.linalg.norm(size, axis=0) / np.linalg.norm(grad, axis=0))))
            branch.append(float(abs(s["nq"][head]) / math.exp(-s["m"][head])))
            # the read itself: Cᵀq̃ = Σ_k C[k, j] q̃_k, whose terms cancel where h is small beside them
            terms = memory * s["q"][head][:, None]
            reads.append(float(np.max(np.abs(terms).sum(0) / np.abs(terms.sum(0)))))
        print(f"  b{b} len {length}: cond ∂h/∂q̃ {np.round(conds, 1).tolist()}")
        print(f"      terms of the gradient {np.round(own[:length], 3).tolist()}")
        own = own[length:]
        print(f"      cond Cᵀq̃ {np.round(reads, 1).tolist()}")
        print(f"      |nᵀq̃|/e^−m {np.round(branch, 2).tolist()}")
        print(f"      max ĩ − m {float(np.max(gi - np.array([s['m'][head] for s in steps]))):.3g}, "
              f"m {float(min(s['m'][head] for s in steps)):.3g}..{float(max(s['m'][head] for s in steps)):.3g}, "
              f"|v| {float(np.abs(vs).max()):.3g}, spread of v {float(np.ptp(vs)):.3g}")


if __name__ == "__main__":
    main()
