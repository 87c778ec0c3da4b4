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
from typing import Any

import numpy as np

DTYPES = {"f64": "float64", "f32": "float32", "f16": "float16", "bf16": "bfloat16"}


def length_groups(lengths: Any) -> list[tuple[int, list[int]]]:
    """(length, batch indices in order) for each distinct length, shortest first."""
    lengths = np.asarray(lengths)
    return [(int(n), [int(b) for b in np.flatnonzero(lengths == n)]) for n in np.unique(lengths)]


class TorchGradTarget(ABC):
    """A target whose library runs in torch; subclasses give one call of the library on a group."""

    name = "torch"
    device = "cpu"

    @abstractmethod
    def forward_group(self, case: Any, params: dict[str, Any], x: Any, h0: Any, c0: Any) -> tuple[Any, Any, Any]:
        """The library over one group of equal-length sequences: ``x`` (length, b, I), ``h0``/``c0``
        (L·D, b, ·) or None; returns y (length, b, out), hy and cy (L·D, b, ·; cy None without one)."""

    def run(self, case: Any) -> dict[str, Any]:
        import torch

        cfg = case.config
        dtype = getattr(torch, DTYPES[cfg.dtype])

        def tensor(array: Any, name: str | None = None) -> Any:
            if array is None:
                return None
            t = torch.tensor(np.asarray(array), dtype=dtype, device=self.device)
            return t.requires_grad_(name in case.wants) if name else t

        x, h0, c0 = tensor(case.x, "x"), tensor(case.h0, "h0"), tensor(case.c0, "c0")
        params = {k: tensor(v, k) for k, v in case.params.items()}
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
        y, hy = torch.stack(ys, 1), torch.stack(hys, 1)
        cy = torch.stack(cys, 1) if case.dcy is not None else None
        loss = (y * tensor(case.dy)).sum() + (hy * tensor(case.dhy)).sum()
        if cy is not None:
            loss = loss + (cy * tensor(case.dcy)).sum()
        leaves = {"x": x, "h0": h0, "c0": c0, **params}
        requested = [(k, v) for k, v in leaves.items() if k in case.wants and v is not None]
        # every sequence of length 0: no library call, and a loss that depends on no requested array
        grads = (torch.autograd.grad(loss, [v for _, v in requested], allow_unused=True) if loss.requires_grad
                 else [None] * len(requested))
        out = {k: np.zeros(v.shape) if g is None else g.detach().cpu().double().numpy()
               for (k, v), g in zip(requested, grads)}
        return {"y": _numpy(y), "hy": _numpy(hy), "cy": _numpy(cy), "grads": out}


def _pick(a: Any, rows: list[int], batch: int) -> Any:
    """The batch columns ``rows`` of a (·, B, ·) tensor; the tensor itself when that is all of them."""
    if a is None or len(rows) == batch:
        return a
    import torch

    return a.index_select(1, torch.tensor(rows, device=a.device))


def _numpy(t: Any) -> Any:
    return None if t is None else t.detach().cpu().double().numpy()
