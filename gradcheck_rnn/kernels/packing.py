"""The packed layout of the fused kernels: mode specs, sequence packing and state-buffer rows.

Sequences are sorted by length (longest first) and packed time-major, so step t holds the active
prefix of ``bs_t`` sequences and padded steps cost nothing; states and their gradients live in
``B + N + B``-row buffers (forward initial states, the N packed steps, reverse initial states), so
the state feeding a step is one contiguous row range and the reverse direction starts each
sequence at its own last step, never in the padding. The algorithm over this layout is
:mod:`.algorithm`.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate
from typing import Sequence

import torch
from torch import Tensor


# The half dtypes: stored in half, summed in float32 (cuDNN's half math), rounded once per stored value.
HALF_DTYPES = (torch.float16, torch.bfloat16)

Segment = tuple[int, int]
"""A contiguous row range ``[start, stop)`` of a state buffer."""


@dataclass(frozen=True)
class StepRows:
    """Where one step lives: its packed rows, its state-buffer rows, and the state-buffer
    segments of the states feeding it."""

    t: int
    packed: slice
    state: slice
    prev: list[Segment]

    @property
    def size(self) -> int:
        """The number of active sequences."""
        return self.packed.stop - self.packed.start


@dataclass(frozen=True)
class ModeSpec:
    """How a mode's gates are laid out. Column positions are in units of the hidden size H.

    The gate-gradient buffer ``dgates`` holds, per packed row, the gradients of the gate
    pre-activations: ``recurrent`` are the columns that meet W_hh (and b_hh), ``input_blocks``
    say where the columns that meet W_ih (and b_ih) are, as (first dgates column, first W_ih
    row, width). They differ only for GRU, whose n gate has separate input and hidden parts:
    its dgates are [n_x | r | z | n_h].
    """

    gates: int
    grad_width: int
    recurrent: tuple[int, int]
    input_blocks: tuple[tuple[int, int, int], ...]
    fold_hidden_bias: bool
    cell: str

    @property
    def has_cell_state(self) -> bool:
        return self.cell == "lstm"


MODE_SPECS = {
    "rnn_relu": ModeSpec(1, 1, (0, 1), ((0, 0, 1),), True, "relu"),
    "rnn_tanh": ModeSpec(1, 1, (0, 1), ((0, 0, 1),), True, "tanh"),
    "lstm": ModeSpec(4, 4, (0, 4), ((0, 0, 4),), True, "lstm"),
    "gru": ModeSpec(3, 4, (1, 4), ((1, 0, 2), (0, 2, 1)), False, "gru"),
}


class Packing:
    """Sequences sorted by length (longest first, stable) and packed time-major.

    Slot j is the j-th longest sequence. Step t holds the active prefix, slots
    ``0..bs_t-1``, at packed rows ``offsets[t]..offsets[t]+bs_t``; in a state buffer
    (``B + N + B`` rows) the same step starts at row ``B + offsets[t]``, after the forward
    direction's initial states and before the reverse direction's. Lengths may be 0 (the
    sequence is never active: its final state is its initial state).
    """

    def __init__(self, seq_lengths: Sequence[int], max_len: int, device: torch.device | str = "cpu") -> None:
        lengths = [int(v) for v in seq_lengths]
        if not lengths or any(not 0 <= v <= max_len for v in lengths):
            raise ValueError(f"sequence lengths {lengths} must be one per sequence, each in 0..T={max_len}")
        order = sorted(range(len(lengths)), key=lambda b: -lengths[b])
        self.batch = len(lengths)
        self.max_len = max_len
        self.lengths = lengths
        self.slot_lengths = [lengths[b] for b in order]
        self.steps = self.slot_lengths[0]
        self.batch_sizes = [sum(1 for v in self.slot_lengths if v > t) for t in range(self.steps)]
        self.offsets = list(accumulate(self.batch_sizes, initial=0))[:-1] if self.steps else []
        self.rows = sum(lengths)
        self.height = 2 * self.batch + self.rows
        self.identity = all(v == max_len for v in lengths)
        # index tensors live where the data does: no host-device copy inside a call
        self.device = torch.device(device)
        self.order = torch.tensor(order, device=self.device)
        self._slot_of = [0] * self.batch
        for slot, b in enumerate(order):
            self._slot_of[b] = slot
        self.slot_of = torch.tensor(self._slot_of, device=self.device)
        self.index = torch.tensor([t * self.batch + order[j] for t, bs in enumerate(self.batch_sizes)
                                   for j in range(bs)], dtype=torch.long, device=self.device)
        self._prev = {reverse: [self._prev_segments(t, reverse) for t in range(self.steps)]
                      for reverse in (False, True)}
        self._final = {reverse: self._final_rows(reverse) for reverse in (False, True)}

    def packed_rows(self, t: int) -> slice:
        """Rows of step t in packed (N-row) buffers."""
        return slice(self.offsets[t], self.offsets[t] + self.batch_sizes[t])

    def state_rows(self, t: int) -> slice:
        """Rows of step t in state (B + N + B row) buffers."""
        start = self.batch + self.offsets[t]
        return slice(start, start + self.batch_sizes[t])

    def init_rows(self, reverse: bool) -> slice:
        """Rows of a direction's initial states (slot order) in state buffers."""
        start = self.batch + self.rows if reverse else 0
        return slice(start, start + self.batch)

    def prev_segments(self, t: int, reverse: bool) -> list[Segment]:
        """State-buffer rows holding the states that feed step t, in slot order."""
        return self._prev[reverse][t]

    def _prev_segments(self, t: int, reverse: bool) -> list[Segment]:
        bs = self.batch_sizes[t]
        init = self.init_rows(reverse).start
        if not reverse:
            if t == 0:
                return [(init, init + bs)]
            start = self.state_rows(t - 1).start
            return [(start, start + bs)]
        carried = self.batch_sizes[t + 1] if t + 1 < self.steps else 0
        segments = []
        if carried:
            start = self.state_rows(t + 1).start
            segments.append((start, start + carried))
        if bs > carried:
            segments.append((init + carried, init + bs))
        return segments

    def step_rows(self, t: int, reverse: bool) -> StepRows:
        """Where step t of a direction reads and writes."""
        return StepRows(t, self.packed_rows(t), self.state_rows(t), self.prev_segments(t, reverse))

    def history_segments(self, reverse: bool) -> list[Segment]:
        """State-buffer rows of the state feeding every packed row (all steps), merged."""
        merged: list[Segment] = []
        for t in range(self.steps):
            for start, stop in self.prev_segments(t, reverse):
                if merged and merged[-1][1] == start:
                    merged[-1] = (merged[-1][0], stop)
                else:
                    merged.append((start, stop))
        return merged

    def final_rows(self, reverse: bool) -> Tensor:
        """State-buffer row of each sequence's final state, in batch order.

        The forward direction ends at the sequence's own last step, the reverse direction at
        step 0; a sequence of length 0 ends where it started, at its initial state."""
        return self._final[reverse]

    def _final_rows(self, reverse: bool) -> Tensor:
        rows = []
        for b, length in enumerate(self.lengths):
            slot = self._slot_of[b]
            if length == 0:
                rows.append(self.init_rows(reverse).start + slot)
            else:
                rows.append(self.state_rows(0 if reverse else length - 1).start + slot)
        return torch.tensor(rows, dtype=torch.long, device=self.device)

    def pack(self, padded: Tensor) -> Tensor:
        """(T, B, F) time-major padded -> (N, F) packed."""
        flat = padded.reshape(self.max_len * self.batch, padded.shape[-1])
        return flat if self.identity else flat.index_select(0, self.index)

    def unpack(self, packed: Tensor, copy: bool = True) -> Tensor:
        """(N, F) packed -> (T, B, F), zero at padded steps: new memory, or a view of
        ``packed`` where the layouts agree and ``copy`` is False."""
        width = packed.shape[-1]
        if self.identity:
            padded = packed.view(self.max_len, self.batch, width)
            return padded.clone() if copy else padded
        padded = packed.new_zeros(self.max_len * self.batch, width)
        padded.index_copy_(0, self.index, packed)
        return padded.view(self.max_len, self.batch, width)

    def to_slots(self, state: Tensor) -> Tensor:
        """(B, H) in batch order -> slot order."""
        return state.index_select(0, self.order)

    def from_slots(self, state: Tensor) -> Tensor:
        """(B, H) in slot order -> batch order."""
        return state.index_select(0, self.slot_of)


def blocks(gates: Tensor, hidden_size: int) -> tuple[Tensor, ...]:
    """The H-wide column blocks of a (rows, k·H) tensor, as views (one call, not k slices)."""
    return gates.view(gates.shape[0], -1, hidden_size).unbind(1)


def take(buffer: Tensor, segments: Sequence[Segment]) -> Tensor:
    """The rows of ``segments`` stacked: a view when there is at most one segment."""
    if len(segments) <= 1:
        start, stop = segments[0] if segments else (0, 0)
        return buffer[start:stop]
    return torch.cat([buffer[start:stop] for start, stop in segments])


def add_rows(buffer: Tensor, segments: Sequence[Segment], values: Tensor) -> None:
    """``buffer[segments] += values`` (values stacked in segment order)."""
    offset = 0
    for start, stop in segments:
        buffer[start:stop].add_(values[offset:offset + stop - start])
        offset += stop - start
