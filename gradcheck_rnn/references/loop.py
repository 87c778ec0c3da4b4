"""The ``loop`` reference: one sample at a time, float64, explicit cell equations.

Each sequence is cut to its own length and run alone through the cell equations written out
below, layer by layer and direction by direction; gradients come from torch autograd in
float64 and are summed over samples by one backward pass of the summed scalar. Nothing is
ever padded, so this reference cannot share a padding or masking bug with a fused kernel.
"""

from __future__ import annotations

import numpy as np
import torch

from ..case import Case, Outputs
from ..layout import directions, param_key

Tensor = torch.Tensor


def _cell(mode: str, x: Tensor, h: Tensor, c: Tensor | None, w_ih: Tensor, w_hh: Tensor,
          b_ih: Tensor, b_hh: Tensor) -> tuple[Tensor, Tensor | None]:
    """One step of one sequence: x (I,), h (H,) -> (h', c')."""
    gi = w_ih @ x + b_ih
    gh = w_hh @ h + b_hh
    if mode == "rnn_tanh":
        return torch.tanh(gi + gh), None
    if mode == "rnn_relu":
        return torch.relu(gi + gh), None
    if mode == "lstm":
        i, f, g, o = (gi + gh).chunk(4)
        c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c_new), c_new
    # gru, linear-before-reset: r multiplies (W_hn h + b_hn)
    ir, iz, in_ = gi.chunk(3)
    hr, hz, hn = gh.chunk(3)
    r = torch.sigmoid(ir + hr)
    z = torch.sigmoid(iz + hz)
    n = torch.tanh(in_ + r * hn)
    return (1 - z) * n + z * h, None


def _run_sequence(case: Case, b: int, params: dict[str, Tensor], x: Tensor, h0: Tensor | None,
                  c0: Tensor | None) -> tuple[Tensor, list[Tensor], list[Tensor]]:
    """Run sequence b, cut to its length: returns y (len, D·H) and final h, c per layer·direction."""
    cfg = case.config
    length = int(case.seq_lengths[b])
    layer_input = x[:length, b]
    finals_h: list[Tensor] = []
    finals_c: list[Tensor] = []
    zeros = torch.zeros(cfg.hidden_size, dtype=torch.float64)
    for layer in range(cfg.num_layers):
        outputs = []
        for d, direction in enumerate(directions(cfg)):
            state = layer * cfg.num_directions + d
            h = zeros if h0 is None else h0[state, b]
            c = (zeros if c0 is None else c0[state, b]) if cfg.mode == "lstm" else None
            w = [params[param_key(layer, direction, k)] for k in ("w_ih", "w_hh", "b_ih", "b_hh")]
            steps = range(length) if direction == "fwd" else range(length - 1, -1, -1)
            hs: list[Tensor | None] = [None] * length
            for t in steps:
                h, c = _cell(cfg.mode, layer_input[t], h, c, *w)
                hs[t] = h
            outputs.append(torch.stack(hs))
            finals_h.append(h)
            if c is not None:
                finals_c.append(c)
        layer_input = torch.cat(outputs, dim=-1)
    return layer_input, finals_h, finals_c


def run_loop_reference(case: Case) -> Outputs:
    """Outputs and every gradient of ``case`` in float64, computed one sample at a time."""
    cfg = case.config

    def leaf(a: np.ndarray | None) -> Tensor | None:
        return None if a is None else torch.tensor(a, dtype=torch.float64, requires_grad=True)

    x, h0, c0 = leaf(case.x), leaf(case.h0), leaf(case.c0)
    params = {k: leaf(v) for k, v in case.params.items()}
    T, B, H = cfg.max_len, cfg.batch_size, cfg.hidden_size
    y = torch.zeros(T, B, cfg.num_directions * H, dtype=torch.float64)
    hy = torch.zeros(cfg.num_layers * cfg.num_directions, B, H, dtype=torch.float64)
    cy = torch.zeros_like(hy) if cfg.mode == "lstm" else None
    with torch.enable_grad():
        y_rows, hy_cols, cy_cols = [], [], []
        for b in range(B):
            y_b, h_b, c_b = _run_sequence(case, b, params, x, h0, c0)
            y_rows.append(y_b)
            hy_cols.append(torch.stack(h_b))
            if cy is not None:
                cy_cols.append(torch.stack(c_b))
        loss = torch.zeros((), dtype=torch.float64)
        for b in range(B):
            loss = loss + (y_rows[b] * torch.from_numpy(case.dy[: y_rows[b].shape[0], b])).sum()
        hy_all = torch.stack(hy_cols, dim=1)
        loss = loss + (hy_all * torch.from_numpy(case.dhy)).sum()
        if cy is not None:
            cy_all = torch.stack(cy_cols, dim=1)
            loss = loss + (cy_all * torch.from_numpy(case.dcy)).sum()
        leaves = {"x": x, **params}
        if h0 is not None:
            leaves["h0"] = h0
            if c0 is not None:
                leaves["c0"] = c0
        grads = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)
    with torch.no_grad():
        for b in range(B):
            y[: y_rows[b].shape[0], b] = y_rows[b]
        hy.copy_(hy_all)
        if cy is not None:
            cy.copy_(cy_all)
    grad_arrays = {
        name: (np.zeros(leaf_.shape) if g is None else g.numpy())
        for (name, leaf_), g in zip(leaves.items(), grads)
    }
    return Outputs(y=y.numpy(), hy=hy.numpy(), cy=None if cy is None else cy.numpy(), grads=grad_arrays)
