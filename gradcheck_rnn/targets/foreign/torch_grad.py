"""What the FlashRNN and mambapy targets share: torch autograd through our map, and length groups.

Neither library takes sequence lengths, so a case is run as a careful user runs a padded batch
through such a library: the sequences of equal length go in together, one call per length, each
call over its own steps only (so no padded step reaches the library). A batch whose sequences all
have the same length is one call with the whole batch, never split: bugs that depend on the batch
size live there. A length-0 sequence makes no call: its outputs are 0 and its final state is its
initial one, as the contract says.

The gradients are torch autograd's derivative of ``sum(y·dy) + sum(hy·dhy) + sum(cy·dcy)`` with
respect to the requested arrays only, through our map (the target's own code) and the library's
forward and backward. Like the targets it imports nothing from gradcheck_rnn and is loaded by file
path, so it works in a foreign interpreter with only numpy, torch and the library.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Mapping

import numpy as np

DTYPES = {"f64": "float64", "f32": "float32", "f16": "float16", "bf16": "bfloat16"}


def length_groups(lengths: Any) -> list[tuple[int, list[int]]]:
    """(length, batch indices in order) for each distinct length, shortest first."""
    lengths = np.asarray(lengths)
    return [(int(n), [int(b) for b in np.flatnonzero(lengths == n)]) for n in np.unique(lengths)]


class TorchGradTarget(ABC):
    """A target whose library runs in torch; subclasses give one call of the library on a group.

    Forward mode is ``torch.func.jvp`` of the same forward along the tangents of the requested
    arrays, second order torch's double backward (``create_graph=True``) of the same loss. Where
    torch refuses either through the library's ops (an ``autograd.Function`` without
    ``setup_context``, as every hand-written backward here), the case is declined with torch's own
    sentence, asked once per :meth:`refusal_key` by running the product on the first such case.
    Where torch does not refuse, the product is judged: a hand-written backward that torch
    differentiates as a constant gives a silent zero, which the ``gradgrad`` check fails. Only a
    target judged under a gradient convention declines second order
    (:meth:`second_order_refusal`): its gradient is not the loss's, so neither is its derivative.

    The products run the length groups of :meth:`outputs` (a subclass with a packed path for its
    run, fla's, is judged there on the padded one)."""

    name = "torch"
    device = "cpu"

    @abstractmethod
    def forward_group(self, case: Any, params: dict[str, Any], x: Any, h0: Any, c0: Any) -> tuple[Any, Any, Any]:
        """The library over one group of equal-length sequences: ``x`` (length, b, I), ``h0``/``c0``
        (L·D, b, ·) or None; returns y (length, b, out), hy and cy (L·D, b, ·; cy None without one)."""

    def _tensors(self, case: Any, requires_grad: bool) -> dict[str, Any]:
        """x, h0, c0 and the parameters in the case dtype (None where absent); ``requires_grad`` on
        the requested ones only when asked."""
        import torch

        dtype = getattr(torch, DTYPES[case.config.dtype])
        arrays = {"x": case.x, "h0": case.h0, "c0": case.c0, **case.params}
        return {k: None if v is None else torch.tensor(np.asarray(v), dtype=dtype, device=self.device)
                .requires_grad_(requires_grad and k in case.wants) for k, v in arrays.items()}

    def outputs(self, case: Any, arrays: dict[str, Any]) -> tuple[Any, Any, Any]:
        """y (T, B, ·), hy and cy (None without a cell state) of the case from ``arrays``
        (:meth:`_tensors`'s names), one library call per length group."""
        import torch

        cfg = case.config
        x, h0, c0 = arrays["x"], arrays["h0"], arrays["c0"]
        params = {k: arrays[k] for k in case.params}
        dtype = x.dtype
        T, B = cfg.max_len, cfg.batch_size
        ys: list[Any] = [None] * B
        hys: list[Any] = [None] * B
        cys: list[Any] = [None] * B
        for length, rows in length_groups(case.seq_lengths):
            if length == 0:  # nothing to run: y = 0, the final state is the initial one
                continue
            picked = [_pick(a, rows, B) for a in (x, h0, c0)]
            y, hy, cy = self.forward_group(case, params, picked[0][:length], picked[1], picked[2])
            for j, b in enumerate(rows):
                ys[b] = torch.cat([y[:, j], y.new_zeros((T - length, y.shape[-1]))])
                hys[b] = hy[:, j]
                cys[b] = None if cy is None else cy[:, j]
        width = next((y.shape[-1] for y in ys if y is not None), cfg.num_directions * cfg.hidden_size)
        for b in range(B):
            if ys[b] is None:  # a length-0 sequence
                ys[b] = torch.zeros((T, width), dtype=dtype, device=self.device)
                hys[b] = h0[:, b] if h0 is not None else torch.zeros(case.dhy.shape[::2], dtype=dtype, device=self.device)
                if case.dcy is not None:
                    cys[b] = c0[:, b] if c0 is not None else torch.zeros(case.dcy.shape[::2], dtype=dtype,
                                                                         device=self.device)
        return torch.stack(ys, 1), torch.stack(hys, 1), torch.stack(cys, 1) if case.dcy is not None else None

    def _loss(self, case: Any, arrays: dict[str, Any]) -> tuple[Any, tuple[Any, Any, Any], list[tuple[str, Any]]]:
        """The scalar a user differentiates, the outputs, and the requested (name, tensor) pairs."""
        import torch

        outputs = self.outputs(case, arrays)
        heads = (case.dy, case.dhy, case.dcy)
        loss = sum((o * torch.tensor(np.asarray(h), dtype=o.dtype, device=self.device)).sum()
                   for o, h in zip(outputs, heads) if o is not None)
        return loss, outputs, [(k, v) for k, v in arrays.items() if k in case.wants and v is not None]

    def run(self, case: Any) -> dict[str, Any]:
        import torch

        loss, (y, hy, cy), requested = self._loss(case, self._tensors(case, requires_grad=True))
        # every sequence of length 0: no library call, and a loss that depends on no requested array
        grads = (torch.autograd.grad(loss, [v for _, v in requested], allow_unused=True) if loss.requires_grad
                 else [None] * len(requested))
        out = {k: np.zeros(v.shape) if g is None else g.detach().cpu().double().numpy()
               for (k, v), g in zip(requested, grads)}
        return {"y": _numpy(y), "hy": _numpy(hy), "cy": _numpy(cy), "grads": out}

    # -- forward mode and second order ------------------------------------------------------------

    def refusal_key(self, case: Any) -> tuple:
        """What decides which library ops a case runs, so whether torch refuses a product through
        them: the cell, the dtype, the biases, and whether initial states are passed."""
        cfg = case.config
        return cfg.mode, cfg.dtype, cfg.bias, case.h0 is not None

    def _refusal(self, case: Any, product: str) -> bool | str:
        """True, or torch's sentence refusing ``product`` through the library's ops: the product run
        once per :meth:`refusal_key` on the first case (zero tangents), what it raises kept. The
        forward runs first, outside the catch: what it raises is the target's error, not a refusal."""
        import torch

        refusals = self.__dict__.setdefault("_refusals", {})  # the subclasses call no __init__ of ours
        key = (product, *self.refusal_key(case))
        if key not in refusals:
            with torch.no_grad():
                self.outputs(case, self._tensors(case, requires_grad=False))
            zeros = {k: np.zeros(np.shape(v)) for k, v in {"x": case.x, "h0": case.h0, "c0": case.c0,
                                                           **case.params}.items() if k in case.wants}
            try:
                getattr(self, product)(case, zeros)
                refusals[key] = True
            except (RuntimeError, NotImplementedError) as exc:  # torch's refusals of a transformation
                what = "forward-mode AD" if product == "jvp" else "double backward"
                refusals[key] = f"torch refuses {what} through {self.name}: {str(exc).strip().splitlines()[0]}"
        return refusals[key]

    def supports_jvp(self, case: Any) -> bool | str:
        """Forward mode wherever torch computes it through the library (:meth:`_refusal`)."""
        return self._refusal(case, "jvp")

    def jvp(self, case: Any, tangents: Mapping[str, Any]) -> dict[str, Any]:
        """``torch.func.jvp`` of the forward along ``tangents``: the tangents of y, hy and cy."""
        from torch.func import jvp

        arrays = self._tensors(case, requires_grad=False)
        primals = {k: v for k, v in arrays.items() if k in case.wants and v is not None}
        directions = {k: torch_like(tangents[k], v) for k, v in primals.items()}

        def forward(requested: dict[str, Any]) -> tuple[Any, ...]:
            return tuple(o for o in self.outputs(case, {**arrays, **requested}) if o is not None)

        _, out = jvp(forward, (primals,), (directions,))
        return {"y": _numpy(out[0]), "hy": _numpy(out[1]), "cy": _numpy(out[2]) if len(out) > 2 else None}

    def second_order_refusal(self, case: Any) -> str | None:
        """Why the case's second order is not judged though torch computes it (a gradient convention:
        the references' Hessian-vector products are the loss's), or None."""
        return None

    def supports_hvp(self, case: Any) -> bool | str:
        """Second order wherever torch computes it through the library (:meth:`_refusal`), outside a
        gradient convention (:meth:`second_order_refusal`)."""
        return self.second_order_refusal(case) or self._refusal(case, "hvp")

    def hvp(self, case: Any, tangents: Mapping[str, Any]) -> dict[str, Any]:
        """torch's double backward: the derivative of each requested gradient along ``tangents``."""
        import torch

        loss, _, requested = self._loss(case, self._tensors(case, requires_grad=True))
        leaves = [v for _, v in requested]
        if not loss.requires_grad:  # every sequence of length 0: the loss depends on no requested array
            return {"grads": {k: np.zeros(v.shape) for k, v in requested}}
        grads = torch.autograd.grad(loss, leaves, create_graph=True, allow_unused=True)
        along = sum((g * torch_like(tangents[k], g)).sum() for (k, _), g in zip(requested, grads) if g is not None)
        products = (torch.autograd.grad(along, leaves, allow_unused=True) if getattr(along, "requires_grad", False)
                    else [None] * len(leaves))
        return {"grads": {k: np.zeros(v.shape) if p is None else _numpy(p) for (k, v), p in zip(requested, products)}}


def torch_like(array: Any, like: Any) -> Any:
    """``array`` as a tensor of ``like``'s dtype and device."""
    import torch

    return torch.tensor(np.asarray(array), dtype=like.dtype, device=like.device)


def _pick(a: Any, rows: list[int], batch: int) -> Any:
    """The batch columns ``rows`` of a (·, B, ·) tensor; the tensor itself when that is all of them."""
    if a is None or len(rows) == batch:
        return a
    import torch

    return a.index_select(1, torch.tensor(rows, device=a.device))


def _numpy(t: Any) -> Any:
    return None if t is None else t.detach().cpu().double().numpy()
