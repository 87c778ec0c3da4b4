"""The project's own fused CPU kernel of the ``slstm`` family: BPTT written by hand through the stabilised gates.

Semantics are :mod:`gradcheck_rnn.families.slstm`. Nothing goes through autograd. The padded
batch runs at once (time-major, every sequence at every step, a length mask per step): per
layer and direction, one GEMM gives the input part of every step's gates (W x + b over all T·B
rows); then per step the block-diagonal recurrent product (one batched product over the heads)
and the pointwise cell. A step past a sequence's length (before its last step for the reverse
direction, which walks t = T−1 … 0 and so starts each sequence at its own last step) computes
and then holds every state (h, c, n, m), and its output is 0.

Backward, per step in reverse order, from dL/dh, dL/dc, dL/dn, dL/dm of the state after it:

    ĝ_h = dh + dy_t;  dc̃ = dc + ĝ_h σ(õ)/n;  dñ = dn − ĝ_h h/n;  dõ = ĝ_h (c/n) σ'(õ)
    dz̃ = dc̃ i' tanh'(z̃);  di' = dc̃ tanh(z̃) + dñ;  df' = dc̃ c_{t−1} + dñ n_{t−1}
    δm = dm − di'·i' − df'·f'            (dL/dm_t with m_t free: 0 for every loss but cy's)
    dĩ = di'·i' + [ĩ won the max] δm;  d(log f + m_{t−1}) = df'·f' + [it won] δm
    dm_{t−1} = dlog f = d(log f + m_{t−1});  df̃ = dlog f · σ(−f̃) (1 with -expf)
    dc_{t−1} = dc̃ f',  dn_{t−1} = dñ f',  dh_{t−1} = R_blockᵀ [dĩ | df̃ | dz̃ | dõ]

That is the true derivative, through the max (and m_t = ĩ where n_{t−1} = 0, so there δm goes
to ĩ). With ``hold_stabilizer=True`` the kernel treats each step's m as a constant (δm dropped),
the convention of FlashRNN-style hand-written backwards; a target over it declares
``stabilizer_gradient = "constant"`` and is judged on the ``-mconst`` case (docs/contracts.md).
At a held step the state gradients pass through unchanged and the step's gate gradients are 0.
Weight gradients are then GEMMs over all T·B rows (dW_ih = dGᵀ X, dR per head from dG and the
saved h_{t−1}, db = Σ dG), computed only when a parameter is requested; dx of a layer is dG W_ih
summed over the directions.

Each stage a mutant needs is a method (:mod:`gradcheck_rnn.targets.kernel_bugs`): ``hold`` (how a
masked step keeps a state), ``route_stabilizer`` (where δm goes), ``recurrent_input`` (the h
that dR reads).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..model.case import Case, Outputs, RNNConfig
from ..model.layout import directions, param_key
from .strided import as_tensor


@dataclass
class Unit:
    """What the forward of one layer and direction keeps for its backward; (T, B, H) unless noted."""

    layer: int
    top: bool
    reverse: bool
    p: Mapping[str, Tensor]
    x: Tensor            # (T, B, I_l), the layer's input
    mask: Tensor         # (T, B, 1) bool
    h_prev: Tensor       # the state before each step
    c_prev: Tensor
    n_prev: Tensor
    f_pre: Tensor        # f̃
    i_won: Tensor        # bool: m_t = ĩ
    i_s: Tensor          # i'
    f_s: Tensor          # f'
    z_t: Tensor          # tanh(z̃)
    o_g: Tensor          # σ(õ)
    c: Tensor            # the state after each step
    n: Tensor
    h: Tensor


class SLSTMCPUKernel:
    """The fused sLSTM kernel (see the module docstring); subclass and override one stage to mutate."""

    def __init__(self, hold_stabilizer: bool = False) -> None:
        self.hold_stabilizer = hold_stabilizer

    # ------------------------------------------------------------------ hooks
    def hold(self, mask: Tensor, new: Tensor, old: Tensor, state: str) -> Tensor:
        """The state after a step: the new one where the step is real, else the old one kept."""
        return torch.where(mask, new, old)

    def route_stabilizer(self, unit: Unit, t: int, dm_free: Tensor) -> tuple[Tensor, Tensor]:
        """δm = dL/dm_t split into its share for ĩ and for log f + m_{t−1}: all to the max's winner."""
        if self.hold_stabilizer:
            return torch.zeros_like(dm_free), torch.zeros_like(dm_free)
        won = unit.i_won[t]
        return torch.where(won, dm_free, 0.0), torch.where(won, 0.0, dm_free)

    def recurrent_input(self, unit: Unit) -> Tensor:
        """The h each step's recurrent product read, for dR."""
        return unit.h_prev

    # ------------------------------------------------------------------ one layer and direction
    @staticmethod
    def _recurrent(w_hh: Tensor, h: Tensor, heads: int) -> Tensor:
        """R_block h: (B, H) -> (B, 4H), gate-major, head by head."""
        B, H = h.shape
        d = H // heads
        r = w_hh.reshape(4, heads, d, d)
        return torch.einsum("bkp,gkdp->bgkd", h.reshape(B, heads, d), r).reshape(B, 4 * H)

    @staticmethod
    def input_projection(p: Mapping[str, Tensor], x: Tensor) -> Tensor:
        """W x + b of every step at once: one GEMM over all T·B rows, (T, B, 4H)."""
        T, B = x.shape[:2]
        pre_x = x.reshape(T * B, -1) @ p["w_ih"].T
        if "b" in p:
            pre_x = pre_x + p["b"]
        return pre_x.reshape(T, B, -1)

    def unit_forward(self, cfg: RNNConfig, p: Mapping[str, Tensor], x: Tensor, mask: Tensor, h0: Tensor,
                     c0: Tensor, layer: int, reverse: bool) -> tuple[Tensor, Tensor, Tensor, Unit]:
        """y (T, B, H), hy (B, H), cy (B, 3H) and what the backward keeps."""
        T, B = x.shape[:2]
        H, heads, expf = cfg.hidden_size, cfg.option("heads"), cfg.option("exp_forget")
        pre_x = self.input_projection(p, x)
        saved = {k: x.new_zeros(T, B, H) for k in ("h_prev", "c_prev", "n_prev", "f_pre", "i_s", "f_s", "z_t",
                                                   "o_g", "c", "n", "h")}
        i_won = torch.zeros(T, B, H, dtype=torch.bool, device=x.device)
        y = x.new_zeros(T, B, H)
        h, c, n, m = h0, c0[:, :H], c0[:, H:2 * H], c0[:, 2 * H:]
        for t in (range(T - 1, -1, -1) if reverse else range(T)):
            pre = pre_x[t] + self._recurrent(p["w_hh"], h, heads)
            i, f, z, o = pre.split(H, dim=-1)
            decayed = (f if expf else torch.nn.functional.logsigmoid(f)) + m
            won = (i >= decayed) | (n == 0)
            m_new = torch.where(won, i, decayed)
            i_s, f_s = torch.exp(i - m_new), torch.exp(decayed - m_new)
            z_t, o_g = torch.tanh(z), torch.sigmoid(o)
            c_new = f_s * c + i_s * z_t
            n_new = f_s * n + i_s
            h_new = o_g * c_new / n_new
            for name, value in (("h_prev", h), ("c_prev", c), ("n_prev", n), ("f_pre", f), ("i_s", i_s),
                                ("f_s", f_s), ("z_t", z_t), ("o_g", o_g), ("c", c_new), ("n", n_new), ("h", h_new)):
                saved[name][t] = value
            i_won[t] = won
            valid = mask[t]
            y[t] = torch.where(valid, h_new, 0.0)
            h, c, n, m = (self.hold(valid, new, old, name) for new, old, name in
                          ((h_new, h, "h"), (c_new, c, "c"), (n_new, n, "n"), (m_new, m, "m")))
        unit = Unit(layer, layer == cfg.num_layers - 1, reverse, p, x, mask, i_won=i_won, **saved)
        return y, h, torch.cat([c, n, m], dim=-1), unit

    def unit_backward(self, cfg: RNNConfig, unit: Unit, dy: Tensor, dhy: Tensor,
                      dcy: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """dG (T, B, 4H) of every step (0 at held steps), dh0 (B, H) and dc0 (B, 3H)."""
        T, B, H = dy.shape
        heads, expf = cfg.option("heads"), cfg.option("exp_forget")
        dgates = dy.new_zeros(T, B, 4 * H)
        dh, dc, dn, dm = dhy, dcy[:, :H], dcy[:, H:2 * H], dcy[:, 2 * H:]
        for t in (range(T) if unit.reverse else range(T - 1, -1, -1)):
            valid = unit.mask[t]
            g_h = dh + dy[t]
            o_g, c, n, i_s, f_s, z_t = (unit.o_g[t], unit.c[t], unit.n[t], unit.i_s[t], unit.f_s[t], unit.z_t[t])
            d_o = g_h * (c / n) * o_g * (1 - o_g)
            d_c = dc + g_h * o_g / n
            d_n = dn - g_h * unit.h[t] / n
            d_z = d_c * i_s * (1 - z_t * z_t)
            d_i_s, d_f_s = (d_c * z_t + d_n) * i_s, (d_c * unit.c_prev[t] + d_n * unit.n_prev[t]) * f_s
            to_i, to_decayed = self.route_stabilizer(unit, t, dm - d_i_s - d_f_s)
            d_i, d_decayed = d_i_s + to_i, d_f_s + to_decayed
            d_f = d_decayed if expf else d_decayed * torch.sigmoid(-unit.f_pre[t])
            step = torch.cat([d_i, d_f, d_z, d_o], dim=-1)
            dgates[t] = torch.where(valid, step, 0.0)
            d_h_prev = torch.einsum("bgkd,gkdp->bkp", step.reshape(B, 4, heads, H // heads),
                                    unit.p["w_hh"].reshape(4, heads, H // heads, H // heads)).reshape(B, H)
            dh = torch.where(valid, d_h_prev, dh)
            dc = torch.where(valid, d_c * f_s, dc)
            dn = torch.where(valid, d_n * f_s, dn)
            dm = torch.where(valid, d_decayed, dm)
        return dgates, dh, torch.cat([dc, dn, dm], dim=-1)

    def weight_grads(self, cfg: RNNConfig, unit: Unit, dgates: Tensor) -> dict[str, Tensor]:
        """dW_ih, dR (per head) and db over all T·B rows at once."""
        T, B, G = dgates.shape
        H, heads = cfg.hidden_size, cfg.option("heads")
        d = H // heads
        rows = dgates.reshape(T * B, G)
        grads = {"w_ih": rows.T @ unit.x.reshape(T * B, -1),
                 "w_hh": torch.einsum("tbgkd,tbkp->gkdp", dgates.reshape(T, B, 4, heads, d),
                                      self.recurrent_input(unit).reshape(T, B, heads, d)).reshape(4 * H, d)}
        if "b" in unit.p:
            grads["b"] = rows.sum(0)
        return grads

    # ------------------------------------------------------------------ the whole stack
    def run(self, case: Case, dtype: torch.dtype, device: str = "cpu") -> Outputs:
        """Forward and the requested gradients of a case, computed in ``dtype`` on ``device``."""
        cfg = case.config
        T, B, L, H = cfg.max_len, cfg.batch_size, cfg.num_layers, cfg.hidden_size
        dirs = directions(cfg)
        D = len(dirs)

        def tensor(a: np.ndarray) -> Tensor:  # in the case's layout (kernels/strided.py)
            return as_tensor(a, dtype, device)

        lengths = torch.from_numpy(case.seq_lengths).to(device)
        mask = (torch.arange(T, device=device)[:, None] < lengths[None, :])[..., None]
        h0 = tensor(case.h0) if case.h0 is not None else torch.zeros(L * D, B, H, dtype=dtype, device=device)
        c0 = tensor(case.c0) if case.c0 is not None else torch.zeros(L * D, B, 3 * H, dtype=dtype, device=device)
        with torch.no_grad():
            inp, hy, cy, units = tensor(case.x), [], [], []
            for layer in range(L):
                ys = []
                for d, direction in enumerate(dirs):
                    p = {k: tensor(case.params[param_key(layer, direction, k)]) for k in cfg.family.unit_shapes(cfg, layer)}
                    y, h, c, unit = self.unit_forward(cfg, p, inp, mask, h0[layer * D + d], c0[layer * D + d], layer,
                                                      direction == "bwd")
                    ys.append(y)
                    hy.append(h)
                    cy.append(c)
                    units.append(unit)
                inp = torch.cat(ys, dim=-1)
            need_weights = any(k in case.wants for k in case.params)
            grads: dict[str, Tensor] = {}
            dy, dhy, dcy = tensor(case.dy), tensor(case.dhy), tensor(case.dcy)
            dh0, dc0 = [None] * (L * D), [None] * (L * D)
            for layer in reversed(range(L)):
                dx = None
                for d, direction in enumerate(dirs):
                    unit, state = units[layer * D + d], layer * D + d
                    dgates, dh0[state], dc0[state] = self.unit_backward(cfg, unit, dy[..., d * H:(d + 1) * H],
                                                                        dhy[state], dcy[state])
                    if layer > 0 or "x" in case.wants:
                        part = (dgates.reshape(T * B, -1) @ unit.p["w_ih"]).reshape(T, B, -1)
                        dx = part if dx is None else dx + part
                    if need_weights:
                        grads.update({param_key(layer, direction, k): v
                                      for k, v in self.weight_grads(cfg, unit, dgates).items()})
                dy = dx
        if "x" in case.wants:
            grads["x"] = dy
        if "h0" in case.wants:
            grads["h0"] = torch.stack(dh0)
        if "c0" in case.wants:
            grads["c0"] = torch.stack(dc0)
        return Outputs(y=inp, hy=torch.stack(hy), cy=torch.stack(cy),
                       grads={k: v for k, v in grads.items() if k in case.wants})
