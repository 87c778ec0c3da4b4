"""The packed adapter: a padded target behind the packed (``cu_seqlens``) interface.

A target, so it lives with the targets; the conversions it calls are the case's
(:mod:`gradcheck_rnn.model.packed`). It checks the packed path itself (the conversions, the tail)
against kernels the padded path has judged, and its one hook is where the mutants of a packed
path (``gdn-packed-tail-unwritten``) put their bug.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..model.case import Case, Outputs, with_changes
from ..model.compare import to_float64
from ..model.packed import PackedBatch, packed_inputs, packed_outputs
from .protocol import as_target


class PackedAdapter:
    """A padded target behind the packed interface, as a library's varlen kernel is called: the
    case goes in packed (:func:`~gradcheck_rnn.model.packed.packed_inputs`), is unpacked for ``padded`` (any target), and
    its y and dx are packed again into the buffers a varlen kernel would write, then handed back
    through :func:`~gradcheck_rnn.model.packed.packed_outputs`. It checks the packed path itself (the conversions, the tail)
    against kernels the padded path has judged; :meth:`input_grad_buffer` is the one hook, the
    buffer the backward writes dx into (zeros: the tail is written as 0)."""

    def __init__(self, padded: Any, name: str = "packed") -> None:
        self.padded, self.name = as_target(padded), name

    def supports(self, config: Any) -> bool | str:
        return self.padded.supports(config)

    def supports_case(self, case: Case) -> bool | str:
        return self.padded.supports_case(case)

    def kernel_configs(self, config: Any) -> dict[str, tuple]:
        """The padded target's kernel configurations (the case it is handed carries the chosen one)."""
        return self.padded.kernel_configs(config)

    def input_grad_buffer(self, x_packed: np.ndarray) -> np.ndarray:
        return np.zeros_like(x_packed)

    def run(self, case: Case) -> Outputs:
        x, dy, _ = packed_inputs(case)
        batch, T = PackedBatch.of(case), case.config.max_len
        out = self.padded.run(with_changes(case, x=batch.unpack(x, T), dy=batch.unpack(dy, T)))
        grads = dict(out.grads)
        if grads.get("x") is not None:
            dx = self.input_grad_buffer(x)
            dx[0, :batch.tokens] = batch.pack(to_float64(grads["x"]))[0, :batch.tokens]
            grads["x"] = dx
        return packed_outputs(case, batch.pack(to_float64(out.y)), out.hy, out.cy, grads)
