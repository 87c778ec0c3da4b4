"""The ``loop`` reference: one sample at a time, float64, the family's own cell equations.

Each sequence is cut to its own length and run alone through its family's step function
(:meth:`gradcheck_rnn.families.Family.step` on torch tensors: the cuDNN cells' torch.nn
equations, or any other family's), layer by layer and direction by direction — the reverse
direction from the sequence's own last step; gradients come from torch autograd in float64 and
are summed over samples by one backward pass of the summed scalar. Nothing is ever padded, so
this reference cannot share a padding or masking bug with a fused kernel.

A sequence of length 0 runs no step at all: its outputs are the initial states untouched
(hy = h0, cy = c0), so autograd gives dh0 = dhy, dc0 = dcy and nothing else. Without bias a
unit simply has no bias parameters; with projections h = W_hr·(o ⊙ tanh c).

:func:`loop_loss` is the forward alone (no autograd graph): the ``fd`` check
(:mod:`gradcheck_rnn.references.fd`) differences it. :func:`run_loop_jvp` is the same forward in
torch's forward-mode AD (dual numbers), one sample at a time: the ``jvp`` check's loop reference.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np
import torch
import torch.autograd.forward_ad as forward_ad

from ..model.case import Case, Outputs
from ..families.ops import torch_ops
from ..model.layout import directions, param_key

Tensor = torch.Tensor
# (layer, sequence, that layer's output (len, D·S)) -> the output the next layer reads: the drift
# allowance's rounding probe perturbs it (gradcheck_rnn.references.drift); the reference never does
LayerNoise = Callable[[int, int, Tensor], Tensor]


def _run_sequence(case: Case, b: int, params: dict[str, Tensor], x: Tensor, h0: Tensor | None,
                  c0: Tensor | None, layer_noise: LayerNoise | None = None,
                  ops: Any = None) -> tuple[Tensor, list[Tensor], list[Tensor]]:
    """Run sequence b, cut to its length: returns y (len, D·S) and final h, c per layer·direction,
    each step the family's own step function on this one sequence's vectors (``layer_noise``, when
    given, applied to each layer's output but the last before the next layer reads it; ``ops``,
    the torch ops namespace the steps compute with: a mutant's only)."""
    cfg = case.config
    family = cfg.family
    ops = torch_ops() if ops is None else ops
    length = int(case.seq_lengths[b])
    layer_input = x[:length, b]
    finals_h: list[Tensor] = []
    finals_c: list[Tensor] = []
    zeros_h = x.new_zeros(cfg.h_size)  # x's dtype: float64, or the case dtype (run_loop_hvp's dtype)
    zeros_c = x.new_zeros(cfg.c_size)
    for layer in range(cfg.num_layers):
        outputs = []
        for d, direction in enumerate(directions(cfg)):
            state = layer * cfg.num_directions + d
            h = zeros_h if h0 is None else h0[state, b]
            c = (zeros_c if c0 is None else c0[state, b]) if cfg.has_cell_state else None
            unit = {k: params[param_key(layer, direction, k)] for k in family.unit_shapes(cfg, layer)}
            steps = range(length) if direction == "fwd" else range(length - 1, -1, -1)
            ys: list[Tensor | None] = [None] * length
            for t in steps:
                ys[t], h, c = family.step(ops, unit, layer_input[t], h, c, cfg)
            # length 0: no step ran, the final state is the initial one
            outputs.append(torch.stack(ys) if length else zeros_h.new_zeros(0, cfg.state_size))
            finals_h.append(h)
            if c is not None:
                finals_c.append(c)
        layer_input = torch.cat(outputs, dim=-1)
        if layer_noise is not None and layer + 1 < cfg.num_layers:
            layer_input = layer_noise(layer, b, layer_input)
    return layer_input, finals_h, finals_c


def _loss_terms(case: Case, x: Tensor, h0: Tensor | None, c0: Tensor | None, params: dict[str, Tensor],
                base_cy: np.ndarray | None = None, layer_noise: LayerNoise | None = None,
                ops: Any = None) -> tuple[list[Tensor], Tensor, Tensor | None, Tensor]:
    """Every sequence run alone: (y per sequence (len_b, D·S), hy, cy, the scalar loss
    sum(y·dy) + sum(hy·dhy) + sum(cy·dcy)); with ``base_cy``, the loss takes each sequence's cy in
    the form the case's gradient convention differentiates (``Family.reexpressed_cell_state``)."""
    cfg = case.config
    dtype = x.dtype

    def head(a: np.ndarray) -> Tensor:
        return torch.from_numpy(a).to(dtype)

    y_rows, hy_cols, cy_cols = [], [], []
    for b in range(cfg.batch_size):
        y_b, h_b, c_b = _run_sequence(case, b, params, x, h0, c0, layer_noise, ops)
        y_rows.append(y_b)
        hy_cols.append(torch.stack(h_b))
        if c_b:
            cy_b = torch.stack(c_b)
            if base_cy is not None and case.seq_lengths[b] > 0:
                cy_b = cfg.family.reexpressed_cell_state(torch_ops(), cfg, cy_b, head(base_cy[:, b]))
            cy_cols.append(cy_b)
    loss = torch.zeros((), dtype=dtype)
    for b, y_b in enumerate(y_rows):
        loss = loss + (y_b * head(case.dy[: y_b.shape[0], b])).sum()
    hy_all = torch.stack(hy_cols, dim=1)
    loss = loss + (hy_all * head(case.dhy)).sum()
    cy_all = torch.stack(cy_cols, dim=1) if cy_cols else None
    if cy_all is not None:
        loss = loss + (cy_all * head(case.dcy)).sum()
    return y_rows, hy_all, cy_all, loss


def _tensor(a: np.ndarray | None, requires_grad: bool = False, dtype: torch.dtype = torch.float64) -> Tensor | None:
    return None if a is None else torch.tensor(a, dtype=dtype, requires_grad=requires_grad)


def loop_loss(case: Case, base_cy: np.ndarray | None = None) -> float:
    """The scalar the gradients are of, sum(y·dy) + sum(hy·dhy) + sum(cy·dcy), in float64
    without any autograd graph (the ``fd`` check evaluates it at perturbed inputs); ``base_cy``
    (:func:`loop_cell_state` at the unperturbed case) for a case whose gradient convention
    differentiates cy in another form (``Family.reexpresses``, sLSTM's ``-mconst``)."""
    with torch.no_grad():
        params = {k: _tensor(v) for k, v in case.params.items()}
        return float(_loss_terms(case, _tensor(case.x), _tensor(case.h0), _tensor(case.c0), params, base_cy)[3])


def loop_cell_state(case: Case) -> np.ndarray | None:
    """The final cell state cy of the float64 loop forward (None for a family without one)."""
    with torch.no_grad():
        params = {k: _tensor(v) for k, v in case.params.items()}
        cy = _loss_terms(case, _tensor(case.x), _tensor(case.h0), _tensor(case.c0), params)[2]
    return None if cy is None else cy.numpy()


def run_loop_reference(case: Case, layer_noise: LayerNoise | None = None) -> Outputs:
    """Outputs and every gradient of ``case`` in float64, computed one sample at a time
    (``layer_noise``: only the drift allowance's rounding probe gives one)."""
    cfg = case.config
    x, h0, c0 = (_tensor(a, True) for a in (case.x, case.h0, case.c0))
    params = {k: _tensor(v, True) for k, v in case.params.items()}
    T, B, S = cfg.max_len, cfg.batch_size, cfg.state_size
    y = torch.zeros(T, B, cfg.num_directions * S, dtype=torch.float64)
    with torch.enable_grad():
        y_rows, hy_all, cy_all, loss = _loss_terms(case, x, h0, c0, params, layer_noise=layer_noise)
        leaves = {"x": x, **params}
        if h0 is not None:
            leaves["h0"] = h0
            if c0 is not None:
                leaves["c0"] = c0
        # every sequence empty and no initial state: the loss depends on nothing at all
        grads = (torch.autograd.grad(loss, list(leaves.values()), allow_unused=True) if loss.requires_grad
                 else [None] * len(leaves))
    with torch.no_grad():
        for b, y_b in enumerate(y_rows):
            y[: y_b.shape[0], b] = y_b
    grad_arrays = {
        name: (np.zeros(leaf_.shape) if g is None else g.numpy())
        for (name, leaf_), g in zip(leaves.items(), grads)
    }
    return Outputs(y=y.numpy(), hy=hy_all.detach().numpy(),
                   cy=None if cy_all is None else cy_all.detach().numpy(), grads=grad_arrays)


def run_loop_jvp(case: Case, tangents: Mapping[str, np.ndarray]) -> Outputs:
    """The output tangents (y, hy, cy) of ``case`` along ``tangents`` (by gradient name: x, h0, c0,
    parameter keys; a name left out has a zero tangent), in float64 through torch's forward-mode
    AD over the same one-sample-at-a-time forward as :func:`run_loop_reference`."""
    cfg = case.config
    with torch.no_grad(), forward_ad.dual_level():
        def leaf(name: str, a: np.ndarray | None) -> Tensor | None:
            value = _tensor(a)
            if value is None or name not in tangents:
                return value
            return forward_ad.make_dual(value, torch.from_numpy(np.asarray(tangents[name], dtype=np.float64)))

        params = {k: leaf(k, v) for k, v in case.params.items()}
        y_rows, hy_all, cy_all, _ = _loss_terms(case, leaf("x", case.x), leaf("h0", case.h0), leaf("c0", case.c0),
                                                params)

        def tangent(value: Tensor) -> np.ndarray:
            t = forward_ad.unpack_dual(value).tangent
            return np.zeros(tuple(value.shape)) if t is None else t.numpy().copy()

        ty = np.zeros((cfg.max_len, cfg.batch_size, cfg.num_directions * cfg.state_size))
        for b, y_b in enumerate(y_rows):
            ty[: y_b.shape[0], b] = tangent(y_b)
        return Outputs(y=ty, hy=tangent(hy_all), cy=None if cy_all is None else tangent(cy_all))


def run_loop_hvp(case: Case, tangents: Mapping[str, np.ndarray], ops: Any = None,
                 dtype: torch.dtype = torch.float64, layer_noise: LayerNoise | None = None) -> Outputs:
    """The Hessian-vector product of the loss sum(y·dy) + sum(hy·dhy) + sum(cy·dcy) along
    ``tangents`` (by gradient name; a requested input left out has a zero tangent): in ``grads``,
    for every requested name, the derivative of its gradient along the tangents, by double backward
    through the same one-sample-at-a-time forward, in float64 (``ops``: a mutant's only; ``dtype``
    and ``layer_noise``: only the rounding allowance of second order computes it in the case dtype,
    or with noisy layer outputs, :mod:`gradcheck_rnn.references.drift`); returned as float64 arrays."""
    x, h0, c0 = (_tensor(a, True, dtype) for a in (case.x, case.h0, case.c0))
    params = {k: _tensor(v, True, dtype) for k, v in case.params.items()}
    leaves = {"x": x, "h0": h0, "c0": c0, **params}
    wanted = {name: leaves[name] for name in sorted(case.wants)}
    with torch.enable_grad():
        loss = _loss_terms(case, x, h0, c0, params, layer_noise=layer_noise, ops=ops)[3]
        grads = (torch.autograd.grad(loss, list(wanted.values()), create_graph=True, allow_unused=True)
                 if loss.requires_grad else [None] * len(wanted))
        along = sum(((g * torch.from_numpy(np.asarray(tangents[n], dtype=np.float64)).to(dtype)).sum()
                     for n, g in zip(wanted, grads) if g is not None and n in tangents), torch.zeros((), dtype=dtype))
        products = (torch.autograd.grad(along, list(wanted.values()), allow_unused=True) if along.requires_grad
                    else [None] * len(wanted))
    return Outputs(y=None, hy=None, grads={n: np.zeros(leaf.shape) if p is None else p.double().numpy()
                                           for (n, leaf), p in zip(wanted.items(), products)})
