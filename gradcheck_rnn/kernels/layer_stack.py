"""The stack of layers that a family kernel with one state tensor per layer runs: the layers'
forwards from the bottom, their backwards from the top, only the requested gradients.

Shared by the kernels whose family runs forward in time only and keeps its whole state in h0 / hy
(``s6``: :mod:`.s6_cpu`, ``gla``: :mod:`.gla_cpu`,
``gdn``: :mod:`.gdn_cpu`); each gives the two per-layer stages."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch
from torch import Tensor

from ..case import Case, Outputs, RNNConfig
from ..layout import param_key


class LayerStackKernel:
    """:meth:`run` over a subclass's ``layer_forward`` and ``layer_backward``:

    * ``layer_forward(cfg, p, x, mask, h0, index) -> (y, hy, saved)``: the layer's output (T, B, ·),
      masked, its final state (B, h_size), and what its backward needs;
    * ``layer_backward(cfg, p, saved, mask, dy, dhy, need_weights, need_x) -> (dx, dh0, grads)``:
      dx (None unless ``need_x``), dh0 and, when ``need_weights``, the layer's parameter gradients
      by kind."""

    def layer_forward(self, cfg: RNNConfig, p: Mapping[str, Tensor], x: Tensor, mask: Tensor, h0: Tensor,
                      index: int) -> tuple[Tensor, Tensor, Any]:
        raise NotImplementedError  # pragma: no cover - every kernel defines it

    def layer_backward(self, cfg: RNNConfig, p: Mapping[str, Tensor], saved: Any, mask: Tensor, dy: Tensor,
                       dhy: Tensor, need_weights: bool, need_x: bool) -> tuple[Tensor | None, Tensor, dict[str, Tensor]]:
        raise NotImplementedError  # pragma: no cover - every kernel defines it

    def run(self, case: Case, dtype: torch.dtype, device: str = "cpu") -> Outputs:
        """Forward and the requested gradients of a case, computed in ``dtype`` on ``device``."""
        cfg = case.config
        T, B, L = cfg.max_len, cfg.batch_size, cfg.num_layers

        def tensor(a: np.ndarray) -> Tensor:
            return torch.from_numpy(np.ascontiguousarray(a)).to(device=device, dtype=dtype)

        lengths = torch.from_numpy(case.seq_lengths).to(device)
        mask = (torch.arange(T, device=device)[:, None] < lengths[None, :]).to(dtype)[..., None]
        units = [{k: tensor(case.params[param_key(layer, "fwd", k)]) for k in cfg.family.unit_shapes(cfg, layer)}
                 for layer in range(L)]
        h0 = tensor(case.h0) if case.h0 is not None else torch.zeros(L, B, cfg.h_size, dtype=dtype, device=device)
        with torch.no_grad():
            inp, finals, layers = tensor(case.x), [], []
            for layer in range(L):
                inp, hy, state = self.layer_forward(cfg, units[layer], inp, mask, h0[layer], layer)
                finals.append(hy)
                layers.append(state)
            need_weights = any(k in case.wants for k in case.params)
            grads: dict[str, Tensor] = {}
            dy, dhy, dh0 = tensor(case.dy), tensor(case.dhy), []
            for layer in reversed(range(L)):
                need_x = layer > 0 or "x" in case.wants
                dy, dh0_l, unit_grads = self.layer_backward(cfg, units[layer], layers[layer], mask, dy, dhy[layer],
                                                            need_weights, need_x)
                dh0.append(dh0_l)
                grads.update({param_key(layer, "fwd", k): v for k, v in unit_grads.items()})
        if "x" in case.wants:
            grads["x"] = dy
        if "h0" in case.wants:
            grads["h0"] = torch.stack(dh0[::-1])
        return Outputs(y=inp, hy=torch.stack(finals), grads={k: v for k, v in grads.items() if k in case.wants})


def pre_norm(x: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """x̂ = x / r with r = sqrt(mean(x²) + eps) over the features, and r: the RMS pre-norm that
    s6 and the matrix families put before a layer's maps (its ``NORM_EPS``)."""
    rms = torch.sqrt((x * x).mean(-1, keepdim=True) + eps)
    return x / rms, rms


def pre_norm_backward(x_hat: Tensor, rms: Tensor, dx_hat: Tensor, mask: Tensor) -> Tensor:
    """The gradient of the layer input from that of x̂ (:func:`pre_norm`): (dx̂ − x̂·mean(x̂ ⊙ dx̂)) / r,
    0 at padded steps."""
    return (dx_hat - x_hat * (x_hat * dx_hat).mean(-1, keepdim=True)) / rms * mask


def stacked_maps_backward(x_hat: Tensor, rms: Tensor, mask: Tensor, d_proj: Tensor, p: Mapping[str, Tensor],
                          kinds: tuple[str, ...], need_x: bool, need_weights: bool) -> tuple[Tensor | None, dict[str, Tensor]]:
    """The backward of a layer's maps stacked into one GEMM, proj = x̂ @ [W_1; W_2; …]ᵀ after
    :func:`pre_norm`: the layer input's gradient (None unless ``need_x``) and, when
    ``need_weights``, each map's gradient by kind (one GEMM over all T·B rows, split by rows)."""
    dx = pre_norm_backward(x_hat, rms, d_proj @ torch.cat([p[kind] for kind in kinds]), mask) if need_x else None
    grads: dict[str, Tensor] = {}
    if need_weights:
        rows = x_hat.shape[0] * x_hat.shape[1]
        d_maps = d_proj.reshape(rows, -1).T @ x_hat.reshape(rows, -1)
        grads.update(zip(kinds, d_maps.split([p[kind].shape[0] for kind in kinds])))
    return dx, grads
