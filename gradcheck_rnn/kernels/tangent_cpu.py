"""Forward mode of the cuDNN cells: the tangent recurrence, run beside the forward (fused-cpu's ``jvp``).

Dual numbers written by hand, no autodiff: every value v of the forward carries its tangent v̇
(its derivative along the tangents of x, h0, c0 and the parameters), and each step computes both.
With a = gi + gh the gate pre-activations, gi = W_ih·x + b_ih and gh = W_hh·h + b_hh:

    ġi = Ẇ_ih·x + W_ih·ẋ + ḃ_ih,   ġh = Ẇ_hh·h + W_hh·ḣ + ḃ_hh   (W_hh·ḣ: the recurrent part)
    relu:  ḣ = [a > 0]·ȧ                    tanh:  ḣ = (1 − h²)·ȧ
    LSTM:  i̇ = i(1 − i)·ȧ_i (f, o alike), ġ = (1 − g²)·ȧ_g,
           ċ = ḟ·c_prev + f·ċ_prev + i̇·g + i·ġ,   ḣ = ȯ·tanh c + o(1 − tanh² c)·ċ
    GRU:   ṙ = r(1 − r)(ġi_r + ġh_r), ż alike, ṅ = (1 − n²)(ġi_n + ṙ·gh_n + r·ġh_n),
           ḣ = (1 − z)·ṅ − ż·n + ż·h_prev + z·ḣ_prev
    projection (LSTM with proj_size): h = W_hr·h_cell, ḣ = Ẇ_hr·h_cell + W_hr·ḣ_cell

The batch runs padded, time-major, one layer and direction at a time; sequence b is updated only
at t < len_b (elsewhere its state and its tangent are held and y, ẏ are 0), and the reverse
direction walks t from T−1 down, so each sequence starts at its own last step from h0. It
computes in the case dtype (f64, f32). It shares no code with the packed fused kernel
(:mod:`.fused_cpu`), whose gradients the ``jvp`` check's dot-product test ties it to.

Each stage is a small method, so a mutant overrides one (``recurrent_tangent``: the recurrent
part of the gates' tangent).
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import torch
from torch import Tensor

from ..model.case import Case, Outputs
from ..model.layout import directions, param_key

Unit = dict[str, Tensor]


class TangentKernel:
    """Output tangents of the four cuDNN cells (see the module docstring)."""

    def run(self, case: Case, tangents: Mapping[str, np.ndarray], dtype: torch.dtype) -> Outputs:
        """y, hy, cy's tangents of ``case`` along ``tangents`` (by gradient name; others are zero)."""
        cfg = case.config
        B, D, S, H = cfg.batch_size, cfg.num_directions, cfg.state_size, cfg.hidden_size
        lstm = cfg.has_cell_state

        def tensor(a: np.ndarray) -> Tensor:
            return torch.from_numpy(np.ascontiguousarray(a)).to(dtype)

        def pair(name: str, value: np.ndarray | None, shape: tuple[int, ...]) -> tuple[Tensor, Tensor]:
            primal = torch.zeros(shape, dtype=dtype) if value is None else tensor(value)
            return primal, tensor(tangents[name]) if name in tangents else torch.zeros(shape, dtype=dtype)

        lengths = torch.from_numpy(np.asarray(case.seq_lengths))
        inp, t_inp = pair("x", case.x, case.x.shape)
        h0, t_h0 = pair("h0", case.h0, (cfg.num_layers * D, B, S))
        c0, t_c0 = pair("c0", case.c0, (cfg.num_layers * D, B, H))
        hy, t_hy, cy, t_cy = [], [], [], []
        for layer in range(cfg.num_layers):
            outs, t_outs = [], []
            for d, direction in enumerate(directions(cfg)):
                unit, t_unit = {}, {}
                for kind, shape in cfg.family.unit_shapes(cfg, layer).items():
                    key = param_key(layer, direction, kind)
                    unit[kind], t_unit[kind] = pair(key, case.params[key], shape)
                state = layer * D + d
                y, t_y, h, t_h, c, t_c = self.direction(cfg.mode, unit, t_unit, inp, t_inp, lengths,
                                                        h0[state], t_h0[state], c0[state], t_c0[state],
                                                        reverse=direction == "bwd")
                outs.append(y)
                t_outs.append(t_y)
                hy.append(h)
                t_hy.append(t_h)
                cy.append(c)
                t_cy.append(t_c)
            inp, t_inp = torch.cat(outs, dim=-1), torch.cat(t_outs, dim=-1)
        return Outputs(y=t_inp, hy=torch.stack(t_hy), cy=torch.stack(t_cy) if lstm else None)

    def direction(self, mode: str, unit: Unit, t_unit: Unit, x: Tensor, t_x: Tensor, lengths: Tensor,
                  h: Tensor, t_h: Tensor, c: Tensor, t_c: Tensor, reverse: bool) -> tuple[Tensor, ...]:
        """One layer's direction over the padded batch: y, ẏ (T, B, S) and the final h, ḣ, c, ċ."""
        T = x.shape[0]
        ys, t_ys = [None] * T, [None] * T
        cell = getattr(self, f"{mode}_tangent")
        for t in (range(T - 1, -1, -1) if reverse else range(T)):
            active = (t < lengths)[:, None]
            gi, t_gi = self.input_tangent(unit, t_unit, x[t], t_x[t])
            gh, t_gh = self.recurrent_tangent(unit, t_unit, h, t_h)
            h_new, t_h_new, c_new, t_c_new = cell(gi, t_gi, gh, t_gh, h, t_h, c, t_c)
            if "w_hr" in unit:
                h_new, t_h_new = h_new @ unit["w_hr"].T, t_h_new @ unit["w_hr"].T + h_new @ t_unit["w_hr"].T
            zero = torch.zeros_like(h_new)
            ys[t], t_ys[t] = torch.where(active, h_new, zero), torch.where(active, t_h_new, zero)
            h, t_h = torch.where(active, h_new, h), torch.where(active, t_h_new, t_h)
            c, t_c = torch.where(active, c_new, c), torch.where(active, t_c_new, t_c)
        return torch.stack(ys), torch.stack(t_ys), h, t_h, c, t_c

    @staticmethod
    def input_tangent(unit: Unit, t_unit: Unit, x: Tensor, t_x: Tensor) -> tuple[Tensor, Tensor]:
        """gi = W_ih·x + b_ih and ġi = Ẇ_ih·x + W_ih·ẋ + ḃ_ih."""
        return _affine_tangent(unit, t_unit, "w_ih", "b_ih", x, t_x)

    @staticmethod
    def recurrent_tangent(unit: Unit, t_unit: Unit, h: Tensor, t_h: Tensor) -> tuple[Tensor, Tensor]:
        """gh = W_hh·h + b_hh and ġh = Ẇ_hh·h + W_hh·ḣ + ḃ_hh."""
        return _affine_tangent(unit, t_unit, "w_hh", "b_hh", h, t_h)

    @staticmethod
    def rnn_relu_tangent(gi, t_gi, gh, t_gh, h, t_h, c, t_c) -> tuple[Tensor, ...]:
        a = gi + gh
        return torch.relu(a), (a > 0).to(a.dtype) * (t_gi + t_gh), c, t_c

    @staticmethod
    def rnn_tanh_tangent(gi, t_gi, gh, t_gh, h, t_h, c, t_c) -> tuple[Tensor, ...]:
        h_new = torch.tanh(gi + gh)
        return h_new, (1 - h_new * h_new) * (t_gi + t_gh), c, t_c

    @staticmethod
    def lstm_tangent(gi, t_gi, gh, t_gh, h, t_h, c, t_c) -> tuple[Tensor, ...]:
        a, t_a = (gi + gh).chunk(4, dim=-1), (t_gi + t_gh).chunk(4, dim=-1)
        i, f, g, o = torch.sigmoid(a[0]), torch.sigmoid(a[1]), torch.tanh(a[2]), torch.sigmoid(a[3])
        t_i, t_f, t_g, t_o = i * (1 - i) * t_a[0], f * (1 - f) * t_a[1], (1 - g * g) * t_a[2], o * (1 - o) * t_a[3]
        c_new = f * c + i * g
        t_c_new = t_f * c + f * t_c + t_i * g + i * t_g
        tanh_c = torch.tanh(c_new)
        return o * tanh_c, t_o * tanh_c + o * (1 - tanh_c * tanh_c) * t_c_new, c_new, t_c_new

    @staticmethod
    def gru_tangent(gi, t_gi, gh, t_gh, h, t_h, c, t_c) -> tuple[Tensor, ...]:
        (gi_r, gi_z, gi_n), (gh_r, gh_z, gh_n) = gi.chunk(3, dim=-1), gh.chunk(3, dim=-1)
        (t_gi_r, t_gi_z, t_gi_n), (t_gh_r, t_gh_z, t_gh_n) = t_gi.chunk(3, dim=-1), t_gh.chunk(3, dim=-1)
        r, z = torch.sigmoid(gi_r + gh_r), torch.sigmoid(gi_z + gh_z)
        t_r, t_z = r * (1 - r) * (t_gi_r + t_gh_r), z * (1 - z) * (t_gi_z + t_gh_z)
        n = torch.tanh(gi_n + r * gh_n)
        t_n = (1 - n * n) * (t_gi_n + t_r * gh_n + r * t_gh_n)
        return (1 - z) * n + z * h, (1 - z) * t_n - t_z * n + t_z * h + z * t_h, c, t_c


def _affine_tangent(unit: Unit, t_unit: Unit, weight: str, bias: str, v: Tensor, t_v: Tensor) -> tuple[Tensor, Tensor]:
    """W·v + b and its tangent Ẇ·v + W·v̇ + ḃ (no bias when the unit has none)."""
    out, t_out = v @ unit[weight].T, v @ t_unit[weight].T + t_v @ unit[weight].T
    if bias in unit:
        out, t_out = out + unit[bias], t_out + t_unit[bias]
    return out, t_out
