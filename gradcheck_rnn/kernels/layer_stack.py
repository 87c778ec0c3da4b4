"""The stack of layers that a family kernel runs: the layers' forwards from the bottom, their
backwards from the top, only the requested gradients.

Shared by the kernels whose family runs forward in time only (``s6``: :mod:`.s6_cpu`, ``gla``:
:mod:`.gla_cpu`, ``gdn``: :mod:`.gdn_cpu`, ``mlstm``: :mod:`.mlstm_cpu`); each gives the two
per-layer stages. A layer's states are h, and c for a family with a cell state (mLSTM's [n | m]):
the stages take and give one tensor per state, in that order."""

from __future__ import annotations

import copy
from typing import Any, Mapping

import numpy as np
import torch
from torch import Tensor

from ..model.case import Case, Outputs, RNNConfig
from ..model.layout import param_key
from .strided import as_tensor


class LayerStackKernel:
    """:meth:`run` over a subclass's ``layer_forward`` and ``layer_backward`` (``c0``, ``cy``, ``dcy``
    and ``dc0`` only for a family with a cell state):

    * ``layer_forward(cfg, p, x, mask, h0[, c0], index) -> (y, hy[, cy], saved)``: the layer's output
      (T, B, ·), masked, its final states (B, h_size[, c_size]), and what its backward needs;
    * ``layer_backward(cfg, p, saved, mask, dy, dhy[, dcy], need_weights, need_x) -> (dx, dh0[, dc0],
      grads)``: dx (None unless ``need_x``), the initial states' gradients and, when
      ``need_weights``, the layer's parameter gradients by kind."""

    # the chunk sizes this kernel offers as its kernel configuration "chunk" (docs/contracts.md,
    # "Kernel configurations"), held in its ``chunk`` attribute; none: it runs its own only
    CHUNK_SIZES: tuple[int, ...] = ()

    def kernel_configs(self) -> dict[str, tuple]:
        """What this kernel can run with: ``{"chunk": CHUNK_SIZES}``, or {} when it offers nothing."""
        return {"chunk": self.CHUNK_SIZES} if self.CHUNK_SIZES else {}

    def under(self, kernel_config: Any) -> "LayerStackKernel":
        """This kernel under a case's kernel configuration (sorted (name, value) pairs): a copy with
        the values of the names it declares set, or itself when the case names none of them."""
        own = {name: value for name, value in kernel_config if name in self.kernel_configs()}
        if not own:
            return self
        configured = copy.copy(self)
        for name, value in own.items():
            setattr(configured, name, value)
        return configured

    def layer_forward(self, cfg: RNNConfig, p: Mapping[str, Tensor], x: Tensor, mask: Tensor,
                      *states_and_index: Any) -> tuple[Any, ...]:
        raise NotImplementedError  # pragma: no cover - every kernel defines it

    def layer_backward(self, cfg: RNNConfig, p: Mapping[str, Tensor], saved: Any, mask: Tensor, dy: Tensor,
                       *heads_and_flags: Any) -> tuple[Any, ...]:
        raise NotImplementedError  # pragma: no cover - every kernel defines it

    def run(self, case: Case, dtype: torch.dtype, device: str = "cpu") -> Outputs:
        """Forward and the requested gradients of a case, computed in ``dtype`` on ``device``."""
        cfg = case.config
        T, B, L = cfg.max_len, cfg.batch_size, cfg.num_layers

        def tensor(a: np.ndarray) -> Tensor:  # in the case's layout (kernels/strided.py)
            return as_tensor(a, dtype, device)

        # (name, initial value, head gradient) of each state tensor: h, and c where the family has one
        names = ("h0", "c0") if cfg.has_cell_state else ("h0",)
        widths = {"h0": cfg.h_size, "c0": cfg.c_size}
        initial = [tensor(getattr(case, n)) if getattr(case, n) is not None
                   else torch.zeros(L, B, widths[n], dtype=dtype, device=device) for n in names]
        heads = [tensor(case.dhy)] + ([tensor(case.dcy)] if cfg.has_cell_state else [])
        lengths = torch.from_numpy(case.seq_lengths).to(device)
        mask = (torch.arange(T, device=device)[:, None] < lengths[None, :]).to(dtype)[..., None]
        units = [{k: tensor(case.params[param_key(layer, "fwd", k)]) for k in cfg.family.unit_shapes(cfg, layer)}
                 for layer in range(L)]
        with torch.no_grad():
            inp, finals, layers = tensor(case.x), [], []
            for layer in range(L):
                inp, *final, state = self.layer_forward(cfg, units[layer], inp, mask,
                                                        *(s[layer] for s in initial), layer)
                finals.append(final)
                layers.append(state)
            need_weights = any(k in case.wants for k in case.params)
            grads: dict[str, Tensor] = {}
            dy, starts = self.incoming_gradient(tensor(case.dy)), []
            for layer in reversed(range(L)):
                need_x = layer > 0 or "x" in case.wants
                dy, *start, unit_grads = self.layer_backward(cfg, units[layer], layers[layer], mask, dy,
                                                             *(h[layer] for h in heads), need_weights, need_x)
                starts.append(start)
                grads.update({param_key(layer, "fwd", k): v for k, v in unit_grads.items()})
        if "x" in case.wants:
            grads["x"] = dy
        for i, name in enumerate(names):
            if name in case.wants:
                grads[name] = torch.stack([start[i] for start in starts[::-1]])
        hy, *cy = (torch.stack([final[i] for final in finals]) for i in range(len(names)))
        return Outputs(y=inp, hy=hy, cy=cy[0] if cy else None,
                       grads={k: v for k, v in grads.items() if k in case.wants})

    def incoming_gradient(self, dy: Tensor) -> Tensor:
        """The top layer's dy as the backward reads it: as handed in, whatever its strides (a hook,
        for a mutant that assumes them)."""
        return dy


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
