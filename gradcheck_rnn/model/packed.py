"""Packed variable lengths: a case's sequences back to back, as kernels that take ``cu_seqlens`` want them.

Many kernels (flash-linear-attention's, FlashQLA's, varlen attention) take a packed batch instead
of a padded one: the valid steps of every sequence, in the case's sequence order, as one
sequence of ΣL rows, with ``cu_seqlens`` = [0, L_0, L_0 + L_1, …] (int32) saying where each
begins, and sometimes a tail of padding rows after ``cu_seqlens[-1]`` (a batch rounded up to a
block). A sequence of length 0 is an empty segment (a repeated offset).

:class:`PackedBatch` converts a case's time-indexed tensors (x, dy; y and dx coming back) between
the padded (T, B, …) layout and the packed (1, ΣL + tail, …) one, so a target for such a library
is a short map: :func:`packed_inputs` gives x, dy and ``cu_seqlens``; :func:`packed_outputs`
turns what the library returned back into :class:`~gradcheck_rnn.model.case.Outputs`. States (h0, hy,
…) stay one per sequence, as such kernels take them.

The tail (case id ``-tail<n>``, :attr:`~gradcheck_rnn.model.case.Case.tail`) holds random non-zero x
and dy, drawn from a generator of their own (salt :data:`TAIL_SALT`, so the case's other
data is as without a tail). Outputs there are ignored; every gradient there must be exactly 0
(QwenLM/FlashQLA PR #28, closed without merging: a varlen backward left the gradients after
``cu_seqlens[-1]`` unwritten); a target that declares the contract ``T == cu_seqlens[-1]``
(gradcheck_rnn/targets/contracts.py) gets ``out-of-contract`` there instead of ``fail``. :func:`packed_outputs` hands the tail of each gradient to the judge
(:attr:`Outputs.tails`), which fails any value there that is not exactly 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from .case import Case, Outputs, round_to_dtype
from .streams import case_rng, claim
from .compare import to_float64


@dataclass(frozen=True)
class PackedBatch:
    """Where each sequence of a case lies in the packed rows."""

    lengths: tuple[int, ...]
    tail: int

    @classmethod
    def of(cls, case: Case) -> "PackedBatch":
        return cls(tuple(int(n) for n in case.seq_lengths), case.tail)

    @property
    def cu_seqlens(self) -> np.ndarray:
        """[0, L_0, L_0 + L_1, …] as int32 (B + 1 offsets)."""
        return np.concatenate([[0], np.cumsum(self.lengths)]).astype(np.int32)

    @property
    def tokens(self) -> int:
        """ΣL, where the tail begins."""
        return int(sum(self.lengths))

    def pack(self, padded: np.ndarray, tail_rows: np.ndarray | None = None) -> np.ndarray:
        """(T, B, …) -> (1, ΣL + tail, …): each sequence's valid steps in order, then the tail rows
        (zeros when none are given)."""
        rows = [padded[:n, b] for b, n in enumerate(self.lengths)]
        tail = np.zeros((self.tail,) + padded.shape[2:]) if tail_rows is None else tail_rows
        return np.concatenate(rows + [tail], axis=0)[None]

    def unpack(self, packed: Any, max_len: int) -> np.ndarray:
        """(1, ΣL + tail, …) or (ΣL + tail, …) -> (T, B, …) as float64, 0 at every padded step."""
        array = to_float64(packed)
        rows = array.reshape((-1,) + array.shape[-1:])
        out = np.zeros((max_len, len(self.lengths)) + rows.shape[1:])
        for b, (start, end) in enumerate(zip(self.cu_seqlens[:-1], self.cu_seqlens[1:])):
            out[:end - start, b] = rows[start:end]
        return out

    def tail_of(self, packed: Any) -> np.ndarray:
        """The rows past ``cu_seqlens[-1]`` of a packed tensor."""
        array = to_float64(packed)
        return array.reshape((-1,) + array.shape[-1:])[self.tokens:]


TAIL_SALT = claim(1, "the packed tail's rows")


def tail_rows(case: Case) -> tuple[np.ndarray, np.ndarray]:
    """The tail's x (tail, I) and dy (tail, D·S): standard normal from the case's own tail
    generator, rounded to the case dtype like every array of the case."""
    rng = case_rng(case.seed, TAIL_SALT)
    config = case.config
    x = rng.standard_normal((case.tail, config.input_size))
    dy = rng.standard_normal((case.tail, config.num_directions * config.state_size))
    return round_to_dtype(x, config.dtype), round_to_dtype(dy, config.dtype)


def packed_inputs(case: Case) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x (1, ΣL + tail, I), dy (1, ΣL + tail, D·S) and ``cu_seqlens`` (int32) of a case."""
    batch = PackedBatch.of(case)
    x_tail, dy_tail = tail_rows(case)
    return batch.pack(case.x, x_tail), batch.pack(case.dy, dy_tail), batch.cu_seqlens


def packed_outputs(case: Case, y: Any, hy: Any, cy: Any = None, grads: Mapping[str, Any] | None = None) -> Outputs:
    """:class:`Outputs` in the case's padded layout from a packed run: ``y`` and ``grads["x"]``
    packed (1, ΣL + tail, …), every other tensor as the case has it. The tail of each packed
    gradient goes to ``Outputs.tails`` for the judge; the tail of y is ignored."""
    batch, T = PackedBatch.of(case), case.config.max_len
    grads = dict(grads or {})
    tails = {}
    if grads.get("x") is not None:
        tails["x"] = batch.tail_of(grads["x"])
        grads["x"] = batch.unpack(grads["x"], T)
    return Outputs(y=batch.unpack(y, T), hy=hy, cy=cy, grads=grads, tails=tails)
