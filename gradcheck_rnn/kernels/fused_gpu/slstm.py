"""The fused GPU kernel of the ``slstm`` family: :class:`~gradcheck_rnn.kernels.slstm_cpu.SLSTMCPUKernel`'s
algorithm with each step's pointwise passes as Triton kernels.

Per layer and direction the input GEMM over all T·B rows, the block-diagonal recurrent product
of each step (one batched product over the heads, forward R h, backward R_blockᵀ dG) and the
weight-gradient GEMMs stay torch ops (cuBLAS on CUDA), inherited from the CPU kernel. What fused-cpu
does in ~25 aten ops per step is one launch each way (:mod:`.slstm_cells`): the forward does the
gates, the stabiliser max, c, n, m, h, the length mask's hold and the output; the backward does
the CPU docstring's formulas, the true derivative through the max, and hands dc, dn, dm and the
held part of dh to the step before. Arithmetic in float64 for f64 data, float32 for f32.

The CPU kernel's ``hold`` and ``route_stabilizer`` hooks run inside the Triton kernels here, so
overriding them changes nothing: the hold is fixed, and where δm goes is the compile-time flag
:meth:`SLSTMGPUKernel.stabilizer_route` returns (``hold_stabilizer=True`` holds each step's m
constant, as on CPU). ``recurrent_input`` and ``weight_grads`` are torch code and stay hooks.

Importing this module does not import triton; the first launch does (as for :mod:`.cells`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ...model.case import RNNConfig
from ..slstm_cpu import SLSTMCPUKernel, Unit


def _cells() -> Any:
    """The Triton sLSTM cells, imported on first use."""
    from . import slstm_cells

    return slstm_cells


@dataclass
class GPUUnit(Unit):
    """A :class:`~gradcheck_rnn.kernels.slstm_cpu.Unit` whose per-step fields are planes of one buffer."""

    saved: Tensor        # (len(SAVED), T, B, H): the planes the Triton backward reads


class SLSTMGPUKernel(SLSTMCPUKernel):
    """The fused sLSTM kernel with Triton cells (see the module docstring); subclass and override
    :meth:`stabilizer_route`, ``recurrent_input`` or ``weight_grads`` to mutate."""

    def stabilizer_route(self) -> str:
        """Where the backward sends δm = dL/dm_t (a compile-time flag of its Triton kernel): to the
        max's winner, the true derivative; nowhere (``"held"``) with ``hold_stabilizer``."""
        return "held" if self.hold_stabilizer else "winner"

    def unit_forward(self, cfg: RNNConfig, p: Mapping[str, Tensor], x: Tensor, mask: Tensor, h0: Tensor,
                     c0: Tensor, layer: int, reverse: bool) -> tuple[Tensor, Tensor, Tensor, Unit]:
        """y (T, B, H), hy (B, H), cy (B, 3H) and what the backward keeps."""
        cells = _cells()
        T, B = x.shape[:2]
        H, heads, expf = cfg.hidden_size, cfg.option("heads"), cfg.option("exp_forget")
        pre_x = self.input_projection(p, x)
        saved = x.new_empty(len(cells.SAVED), T, B, H)
        won = torch.empty(T, B, H, dtype=torch.int8, device=x.device)
        y = x.new_empty(T, B, H)
        h, cnm = h0.clone(), c0.clone()  # the states, advanced in place step by step
        for t in (range(T - 1, -1, -1) if reverse else range(T)):
            cells.forward_step(pre_x[t], self._recurrent(p["w_hh"], h, heads), mask[t], h, cnm, y[t], saved[:, t],
                               won[t], expf)
        unit = GPUUnit(layer, layer == cfg.num_layers - 1, reverse, p, x, mask, i_won=won.view(torch.bool),
                       saved=saved, **dict(zip(cells.SAVED, saved)))
        return y, h, cnm, unit

    def unit_backward(self, cfg: RNNConfig, unit: GPUUnit, dy: Tensor, dhy: Tensor,
                      dcy: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """dG (T, B, 4H) of every step (0 at held steps), dh0 (B, H) and dc0 (B, 3H)."""
        cells = _cells()
        T, B, H = dy.shape
        heads, d = cfg.option("heads"), H // cfg.option("heads")
        saved, won = unit.saved, unit.i_won.view(torch.int8)
        w_hh = unit.p["w_hh"].reshape(4, heads, d, d)
        dgates = dy.new_empty(T, B, 4 * H)
        dh_carry, dh_rec, dcnm = dhy.clone(), torch.zeros_like(dhy), dcy.clone()
        route = self.stabilizer_route()
        for t in (range(T) if unit.reverse else range(T - 1, -1, -1)):
            cells.backward_step(saved[:, t], won[t], unit.mask[t], dy[t], dh_carry, dh_rec, dcnm, dgates[t],
                                cfg.option("exp_forget"), route)
            dh_rec = torch.einsum("bgkd,gkdp->bkp", dgates[t].reshape(B, 4, heads, d), w_hh).reshape(B, H)
        return dgates, dh_carry + dh_rec, dcnm
