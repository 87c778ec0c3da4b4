"""What the project's fused RNN kernels share: the packed layout, the mode specs, the
algorithm with its hooks, the autograd entry and the target protocol.

A fused kernel here is :class:`FusedKernel` plus eight pointwise cell passes (forward and
backward of relu, tanh, LSTM and GRU). Everything else — sorting and packing the sequences,
the state buffers, the walk order of each direction, the recurrent and input/weight-gradient
GEMMs (torch: MKL on CPU, cuBLAS on CUDA), the BPTT hand-off, the final-state gather — is one
algorithm, written once here and documented with its measurements in
:mod:`gradcheck_rnn.kernels.fused_cpu`. :class:`~gradcheck_rnn.kernels.fused_cpu.FusedCPUKernel`
writes the cells as aten ops, :class:`~gradcheck_rnn.kernels.fused_gpu.FusedGPUKernel` as
Triton kernels; the mutants of both override the same hooks.

Layout, in short: sequences sorted by length (longest first) and packed time-major, so step t
holds the active prefix of ``bs_t`` sequences and padded steps cost nothing; states and their
gradients live in ``B + N + B``-row buffers (forward initial states, the N packed steps, reverse
initial states), so the state feeding a step is one contiguous row range and the reverse
direction starts each sequence at its own last step, never in the padding.

The API surface beyond the four modes rides on the same algorithm. A config without bias runs
with zero bias vectors (:meth:`FusedKernel.unit_biases`) and reports no bias gradient. An LSTM
with projections (``proj_size`` P) keeps the cell's H-wide output ``o ⊙ tanh c`` per packed row
in ``Unit.hraw``; the state buffers, y and the recurrent GEMM are P wide, h_t = W_hr·hraw_t
(:meth:`FusedKernel.project`). In the backward the complete dL/dh_t (P wide, in the state
buffer) becomes dL/dhraw_t = dL/dh_t·W_hr before the cell's pointwise pass
(:meth:`FusedKernel.project_backward`), and dW_hr = Σ_t dL/dh_tᵀ·hraw_t is one GEMM over all
steps (:meth:`FusedKernel.projection_grad`).
"""

from __future__ import annotations

import math
import os
from abc import ABC, abstractmethod
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from itertools import accumulate
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from ..case import Case, Outputs, RNNConfig
from ..layout import DIRECTIONS, GATES, pack, param_key, unpack


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



@dataclass(eq=False)
class Unit:
    """One layer and direction: its weights, packed input, and the buffers its steps use.

    Forward buffers (read-only once the forward is done, so backward can run again):
    ``gates`` (N, G·H) input projection, overwritten per step with the gate activations;
    ``h`` (B + N + B, S) / ``c`` (B + N + B, H) state buffers (S = P with projections, else H);
    ``aux`` per-step extras the backward needs (LSTM tanh(c_t) (N, H); GRU W_hh·h + b_hh (N, 3H));
    with projections ``hraw`` (N, H), the cell output before W_hr. Backward buffers, filled by
    ``backward_data`` and read by ``backward_weights``: ``dgates`` (N, grad_width·H) gate
    pre-activation gradients, ``dh`` (B + N + B, S) / ``dc`` (B + N + B, H) state gradients,
    ``dh_raw`` (N, H) the gradients of ``hraw``. ``steps`` are the forward's steps in walk
    order; the backward reuses them in reverse. Without bias, ``b_ih``/``b_hh`` are zeros and
    ``has_bias`` is False.
    """

    spec: ModeSpec
    layer: int
    reverse: bool
    top: bool
    w_ih: Tensor
    w_hh: Tensor
    b_ih: Tensor
    b_hh: Tensor
    x: Tensor
    gates: Tensor
    h: Tensor
    c: Tensor | None
    aux: Tensor | None
    w_hr: Tensor | None = None
    hraw: Tensor | None = None
    has_bias: bool = True
    dgates: Tensor | None = None
    dh: Tensor | None = None
    dc: Tensor | None = None
    dh_raw: Tensor | None = None
    steps: list[Step] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"l{self.layer}.{DIRECTIONS[int(self.reverse)]}"

    @property
    def hidden_size(self) -> int:
        """H, the width of each gate block (and of c)."""
        return self.w_hh.shape[0] // self.spec.gates

    @property
    def state_size(self) -> int:
        """S, the width of h: P with projections, else H."""
        return self.w_hh.shape[1]

    @property
    def kinds(self) -> tuple[str, ...]:
        """The parameter kinds this unit has (and reports gradients for)."""
        weights = ("w_ih", "w_hh", "w_hr") if self.w_hr is not None else ("w_ih", "w_hh")
        return weights + (("b_ih", "b_hh") if self.has_bias else ())

    @cached_property
    def w_hh_t(self) -> Tensor:
        """W_hhᵀ as a view, made once rather than per step."""
        return self.w_hh.t()


@dataclass(eq=False)
class Step:
    """Views of one time step's rows (``bs`` active sequences), handed to the cell methods.

    Forward: ``gates`` holds the pre-activations (input projection + recurrent GEMM) and the
    cell overwrites it with the activations, writing ``h`` (and ``c``, ``aux``). Backward:
    ``dh`` / ``dc`` hold the complete dL/dh_t and dL/dc_t; the cell writes ``dgates`` and the
    gradients that reach the previous state directly, ``dh_direct`` (GRU z·dh) and ``dc_prev``
    (LSTM f·dc), using ``scratch`` (bs, 2H) for temporaries.
    """

    unit: Unit
    rows: StepRows
    gates: Tensor
    h_prev: Tensor
    c_prev: Tensor | None
    h: Tensor
    c: Tensor | None
    aux: Tensor | None
    dgates: Tensor | None = None
    dh: Tensor | None = None
    dc: Tensor | None = None
    scratch: Tensor | None = None
    dh_direct: Tensor | None = None
    dc_prev: Tensor | None = None

    @property
    def t(self) -> int:
        return self.rows.t


@dataclass(eq=False)
class ForwardState:
    """What the forward keeps for the backward (the cuDNN "reserve space")."""

    mode: str
    packing: Packing
    units: list[Unit]
    num_layers: int
    num_directions: int
    input_size: int
    has_h0: bool
    has_c0: bool
    dtype: torch.dtype

class FusedKernel(ABC):
    """Fused RNN forward and hand-written BPTT, split like cuDNN into :meth:`backward_data`
    and :meth:`backward_weights`; a subclass supplies the eight pointwise cell passes
    (``{relu,tanh,lstm,gru}_{forward,backward}``), and a mutant overrides one hook.

    The kernel holds no state between calls: everything a call needs lives in its
    :class:`ForwardState`. Buffers live on the device and in the dtype of ``x``.
    """

    # ------------------------------------------------------------------ forward

    @torch.no_grad()
    def forward(self, x: Tensor, seq_lengths: Sequence[int], h0: Tensor | None, c0: Tensor | None,
                params: Mapping[str, Tensor], mode: str, num_layers: int,
                bidirectional: bool) -> tuple[Tensor, Tensor, Tensor | None, ForwardState]:
        """Run all layers and directions; return (y, hy, cy, state for the backward)."""
        spec = MODE_SPECS[mode]
        T, B, I = x.shape
        S = params[param_key(0, "fwd", "w_hh")].shape[1]  # the state width: P with projections, else H
        D = 2 if bidirectional else 1
        packing = self.make_packing(seq_lengths, T, x.device)
        layer_input = packing.pack(x)
        units: list[Unit] = []
        for layer in range(num_layers):
            output = x.new_empty(packing.height, D * S)
            for d in range(D):
                states = [None if s is None else s[layer * D + d] for s in (h0, c0)]
                unit = self.make_unit(spec, packing, layer, d, layer == num_layers - 1, params,
                                      layer_input, output[:, d * S:(d + 1) * S], *states)
                unit.steps = [self.step_forward(unit, rows) for rows in self.walk(unit, packing)]
                units.append(unit)
            layer_input = output[B:B + packing.rows]
        y = packing.unpack(layer_input)
        finals = [self.final_state(unit, packing) for unit in units]
        hy = torch.stack([h for h, _ in finals])
        cy = torch.stack([c for _, c in finals]) if spec.has_cell_state else None
        state = ForwardState(mode, packing, units, num_layers, D, I, h0 is not None, c0 is not None, x.dtype)
        return y, hy, cy, state

    def make_packing(self, seq_lengths: Sequence[int], max_len: int, device: torch.device) -> Packing:
        """The packed layout of this batch (shared by every layer and direction)."""
        return Packing(seq_lengths, max_len, device)

    def step_order(self, packing: Packing, reverse: bool) -> range:
        """The steps a direction walks, in order; the backward walks them in reverse."""
        return range(packing.steps - 1, -1, -1) if reverse else range(packing.steps)

    def walk(self, unit: Unit, packing: Packing) -> list[StepRows]:
        """The rows of each step a unit visits, in walk order."""
        return [packing.step_rows(t, unit.reverse) for t in self.step_order(packing, unit.reverse)]

    def make_unit(self, spec: ModeSpec, packing: Packing, layer: int, d: int, top: bool,
                  params: Mapping[str, Tensor], x: Tensor, h: Tensor, h0: Tensor | None,
                  c0: Tensor | None) -> Unit:
        """Load initial states and run the input projection of all steps as one GEMM."""
        name = DIRECTIONS[d]
        w_ih, w_hh = (params[param_key(layer, name, k)] for k in ("w_ih", "w_hh"))
        w_hr = params.get(param_key(layer, name, "w_hr"))
        b_ih, b_hh = self.unit_biases(params, layer, name, w_ih)
        reverse = d == 1
        H = w_hh.shape[0] // spec.gates
        init = packing.init_rows(reverse)
        if x.dtype in HALF_DTYPES:
            # half: both biases and the products summed in float32, rounded once (the half sum
            # b_ih + b_hh alone cost up to 1500 half ulps of a small pre-activation: issue 21's budget)
            bias = b_ih.float() + b_hh.float() if spec.fold_hidden_bias else b_ih.float()
            gates = torch.addmm(bias, x.float(), w_ih.float().t()).to(x.dtype)
        else:
            bias = b_ih + b_hh if spec.fold_hidden_bias else b_ih
            gates = torch.addmm(bias, x, w_ih.t())
        self._load_initial(h[init], h0, packing)
        c = aux = None
        if spec.has_cell_state:
            c = x.new_empty(packing.height, H)
            self._load_initial(c[init], c0, packing)
            aux = x.new_empty(packing.rows, H)
        elif spec.cell == "gru":
            aux = x.new_empty(packing.rows, 3 * H)
        hraw = None if w_hr is None else x.new_empty(packing.rows, H)
        return Unit(spec, layer, reverse, top, w_ih, w_hh, b_ih, b_hh, x, gates, h, c, aux, w_hr, hraw,
                    param_key(layer, name, "b_ih") in params)

    def unit_biases(self, params: Mapping[str, Tensor], layer: int, direction: str,
                    w_ih: Tensor) -> tuple[Tensor, Tensor]:
        """(b_ih, b_hh) of a unit; zeros when the config has no bias (no b_* keys)."""
        b_ih, b_hh = (params.get(param_key(layer, direction, k)) for k in ("b_ih", "b_hh"))
        if b_ih is None or b_hh is None:
            zeros = w_ih.new_zeros(w_ih.shape[0])
            return zeros, zeros
        return b_ih, b_hh

    @staticmethod
    def _load_initial(rows: Tensor, state: Tensor | None, packing: Packing) -> None:
        if state is None:
            rows.zero_()
        else:
            rows.copy_(packing.to_slots(state))

    def step_forward(self, unit: Unit, rows: StepRows) -> Step:
        """One step: the recurrent GEMM, then the cell's pointwise pass."""
        packed, state, prev = rows.packed, rows.state, rows.prev
        # with projections the cell writes its H-wide output into hraw, and h_t = W_hr·hraw_t
        h_cell = unit.h[state] if unit.w_hr is None else unit.hraw[packed]
        step = Step(unit, rows, unit.gates[packed], take(unit.h, prev),
                    None if unit.c is None else take(unit.c, prev), h_cell,
                    None if unit.c is None else unit.c[state], None if unit.aux is None else unit.aux[packed])
        self.recurrent_projection(step)
        getattr(self, f"{unit.spec.cell}_forward")(step)
        if unit.w_hr is not None:
            self.project(step, unit.h[state])
        return step

    def project(self, step: Step, out: Tensor) -> None:
        """LSTM projection: h_t = hraw_t·W_hrᵀ, written into the state rows ``out`` (bs, P)."""
        torch.mm(step.h, step.unit.w_hr.t(), out=out)

    def project_backward(self, step: Step, dh: Tensor, out: Tensor) -> None:
        """dL/dhraw_t = dL/dh_t·W_hr: the P-wide state gradient back to the cell's H-wide output."""
        torch.mm(dh, step.unit.w_hr, out=out)

    def recurrent_projection(self, step: Step) -> None:
        """The only per-step GEMM: h_prev·W_hhᵀ added to the gates (b_hh already folded
        into the input projection), or for GRU written with b_hh into ``aux``."""
        unit = step.unit
        if unit.spec.fold_hidden_bias:
            step.gates.addmm_(step.h_prev, unit.w_hh_t)
        else:
            torch.addmm(unit.b_hh, step.h_prev, unit.w_hh_t, out=step.aux)


    def final_state(self, unit: Unit, packing: Packing) -> tuple[Tensor, Tensor | None]:
        """(hy, cy) of a unit in batch order: the state after each sequence's final step."""
        rows = packing.final_rows(unit.reverse)
        return unit.h.index_select(0, rows), None if unit.c is None else unit.c.index_select(0, rows)

    # ------------------------------------------------------------------ backward

    @torch.no_grad()
    def backward_data(self, state: ForwardState, dy: Tensor | None, dhy: Tensor | None, dcy: Tensor | None,
                      need_x: bool = True) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
        """BPTT through every layer, top first: return (dx or None, dh0, dc0).

        Fills each unit's ``dgates`` for :meth:`backward_weights`. dh0/dc0 are None when the
        forward had no h0/c0; dx is None unless ``need_x`` (the layer-0 dx GEMM is skipped).
        """
        packing, D = state.packing, state.num_directions
        B, N = packing.batch, packing.rows
        H, S = state.units[0].hidden_size, state.units[0].state_size
        spec = MODE_SPECS[state.mode]
        new = state.units[0].gates.new_empty
        d_out = new(packing.height, D * S)
        self._zero_init_rows(d_out, packing)
        if dy is None:
            d_out[B:B + N].zero_()
        else:
            d_out[B:B + N] = packing.pack(dy.to(state.dtype))
        scratch = new(B, 2 * H)
        dh0 = new(state.num_layers * D, B, S)
        dc0 = new(state.num_layers * D, B, H) if spec.has_cell_state else None
        dx = None
        for layer in reversed(range(state.num_layers)):
            units = state.units[layer * D:(layer + 1) * D]
            for d, unit in enumerate(units):
                final = packing.final_rows(unit.reverse)
                unit.dh = d_out[:, d * S:(d + 1) * S]
                unit.dh_raw = None if unit.w_hr is None else new(N, H)
                if dhy is not None:
                    unit.dh.index_add_(0, final, dhy[layer * D + d].to(state.dtype))
                if spec.has_cell_state:
                    unit.dc = new(packing.height, H).zero_()
                    if dcy is not None:
                        unit.dc.index_add_(0, final, dcy[layer * D + d].to(state.dtype))
                unit.dgates = new(N, spec.grad_width * H)
                for step in reversed(unit.steps):
                    self.step_backward(step, scratch)
                dh0[layer * D + d], dc0_unit = self.initial_state_grads(unit, packing)
                if dc0 is not None:
                    dc0[layer * D + d] = dc0_unit
            if layer > 0:
                d_out = new(packing.height, units[0].x.shape[1])
                self._zero_init_rows(d_out, packing)
                self.input_grad(units, d_out[B:B + N])
            elif need_x:
                dx_packed = new(N, state.input_size)
                self.input_grad(units, dx_packed)
                dx = packing.unpack(dx_packed, copy=False)
        return dx, dh0 if state.has_h0 else None, dc0 if state.has_c0 else None

    @staticmethod
    def _zero_init_rows(buffer: Tensor, packing: Packing) -> None:
        buffer[packing.init_rows(False)].zero_()
        buffer[packing.init_rows(True)].zero_()

    def step_backward(self, step: Step, scratch: Tensor) -> None:
        """One BPTT step: the cell's pointwise backward, then the hand-off to the previous state."""
        unit, rows = step.unit, step.rows
        step.dgates, step.dh = unit.dgates[rows.packed], unit.dh[rows.state]
        if unit.w_hr is not None:  # the cell sees dL/dhraw_t, H wide
            dh_raw = unit.dh_raw[rows.packed]
            self.project_backward(step, step.dh, dh_raw)
            step.dh = dh_raw
        step.dc = None if unit.dc is None else unit.dc[rows.state]
        step.scratch, step.dh_direct, step.dc_prev = scratch[:rows.size], None, None
        getattr(self, f"{unit.spec.cell}_backward")(step)
        self.handoff(step, rows.prev)

    def handoff(self, step: Step, segments: Sequence[Segment]) -> None:
        """The BPTT recurrence: add dL/dh_prev (dG_t·W_hh plus the cell's direct term) and
        dL/dc_prev into the rows the step's state came from — the previous step's, or h0's."""
        unit = step.unit
        a, b = unit.spec.recurrent
        H = unit.hidden_size
        dgates = step.dgates if b - a == unit.spec.grad_width else step.dgates[:, a * H:b * H]
        if len(segments) == 1:
            target = unit.dh[segments[0][0]:segments[0][1]]
            if step.dh_direct is not None:
                target.add_(step.dh_direct)
            target.addmm_(dgates, unit.w_hh)
        else:
            d_prev = torch.mm(dgates, unit.w_hh)
            if step.dh_direct is not None:
                d_prev.add_(step.dh_direct)
            add_rows(unit.dh, segments, d_prev)
        if step.dc_prev is not None:
            add_rows(unit.dc, segments, step.dc_prev)

    # ------------------------------------------------------------------ cells
    # The pointwise passes a kernel implements. Forward: ``step.gates`` holds the
    # pre-activations; write ``step.h`` (and ``c``, ``aux``), activations in place of gates.
    # Backward: read ``step.dh``/``dc``, write ``step.dgates`` and set ``step.dh_direct`` /
    # ``step.dc_prev`` where the cell passes gradient to the previous state directly.

    @abstractmethod
    def relu_forward(self, step: Step) -> None:
        """h = relu(pre)."""

    @abstractmethod
    def tanh_forward(self, step: Step) -> None:
        """h = tanh(pre)."""

    @abstractmethod
    def lstm_forward(self, step: Step) -> None:
        """i, f, o = σ; g = tanh; c = f·c_prev + i·g; h = o·tanh(c) (tanh(c) saved in aux)."""

    @abstractmethod
    def gru_forward(self, step: Step) -> None:
        """r, z = σ(x-part + h-part); n = tanh(x-part + r·(W_hn h + b_hn)); h = n + z·(h_prev − n)."""

    @abstractmethod
    def relu_backward(self, step: Step) -> None:
        """dpre = dh · [h > 0]."""

    @abstractmethod
    def tanh_backward(self, step: Step) -> None:
        """dpre = dh · (1 − h²)."""

    @abstractmethod
    def lstm_backward(self, step: Step) -> None:
        """dc += dh·o·(1 − tanh²c); d[i, f, g, o] = [dc·g, dc·c_prev, dc·i, dh·tanh c] times each
        activation's derivative; dc_prev = dc·f."""

    @abstractmethod
    def gru_backward(self, step: Step) -> None:
        """dn = dh·(1−z)·(1−n²); dz = dh·(h_prev − n)·z(1−z); dr = dn·(W_hn h + b_hn)·r(1−r);
        the h-part of n gets dn·r; h_prev gets dh·z directly. dgates = [n_x | r | z | n_h]."""

    def initial_state_grads(self, unit: Unit, packing: Packing) -> tuple[Tensor, Tensor | None]:
        """(dh0, dc0) of a unit in batch order: what the hand-off left in the initial-state rows."""
        init = packing.init_rows(unit.reverse)
        dh0 = packing.from_slots(unit.dh[init])
        return dh0, None if unit.dc is None else packing.from_slots(unit.dc[init])

    def input_grad(self, units: Sequence[Unit], out: Tensor) -> None:
        """A layer's packed input gradient: Σ over directions of dG_x·W_ih, written into ``out``.

        In half precision the blocks (both directions, GRU's split n gate) are summed in float32
        and rounded once: rounding each partial sum cost up to 400 half ulps of the result where
        the two directions cancel (issue 21's error budget, docs/half-precision.md)."""
        if out.dtype in HALF_DTYPES:
            total = torch.zeros(out.shape, dtype=torch.float32, device=out.device)
            for unit in units:
                H = unit.hidden_size
                for col, row, width in unit.spec.input_blocks:
                    total.addmm_(unit.dgates[:, col * H:(col + width) * H].float(),
                                 unit.w_ih[row * H:(row + width) * H].float())
            out.copy_(total)
            return
        first = True
        for unit in units:
            H = unit.hidden_size
            for col, row, width in unit.spec.input_blocks:
                dgates = unit.dgates[:, col * H:(col + width) * H]
                weight = unit.w_ih[row * H:(row + width) * H]
                if first:
                    torch.mm(dgates, weight, out=out)
                    first = False
                else:
                    out.addmm_(dgates, weight)

    @torch.no_grad()
    def backward_weights(self, state: ForwardState,
                         out: Mapping[str, Tensor] | None = None) -> dict[str, Tensor]:
        """Every weight and bias gradient (after :meth:`backward_data`), written into ``out``
        (views, e.g. into a flat gradient vector) or new tensors; keyed like the parameters."""
        grads: dict[str, Tensor] = {}
        for unit in state.units:
            unit_grads = {}
            for kind in ("w_ih", "w_hh", "w_hr", "b_ih", "b_hh"):
                like = getattr(unit, kind)
                if like is None:
                    continue
                key = f"{unit.name}.{kind}"
                if kind not in unit.kinds:  # bias=False: computed into scratch, not reported
                    unit_grads[kind] = torch.empty_like(like)
                    continue
                grads[key] = unit_grads[kind] = out[key] if out is not None else torch.empty_like(like)
            self.weight_grads(unit, state.packing, unit_grads)
            if unit.w_hr is not None:
                self.projection_grad(unit, state.packing, unit_grads["w_hr"])
        return grads

    def projection_grad(self, unit: Unit, packing: Packing, out: Tensor) -> None:
        """dW_hr = Σ_t dL/dh_tᵀ·hraw_t over all steps at once (the state rows of the packed steps
        hold the complete dL/dh_t once the backward is done)."""
        dh = unit.dh[packing.batch:packing.batch + packing.rows]
        torch.mm(dh.t(), unit.hraw, out=out)

    def weight_grads(self, unit: Unit, packing: Packing, grads: Mapping[str, Tensor]) -> None:
        """dW_ih = dG_xᵀ·X, dW_hh = dG_hᵀ·H_prev over all steps at once; db = column sums."""
        H = unit.hidden_size
        a, b = unit.spec.recurrent
        d_hidden = unit.dgates[:, a * H:b * H]
        h_prev = take(unit.h, packing.history_segments(unit.reverse))
        torch.mm(d_hidden.t(), h_prev, out=grads["w_hh"])
        torch.sum(d_hidden, 0, out=grads["b_hh"])
        for col, row, width in unit.spec.input_blocks:
            d_input = unit.dgates[:, col * H:(col + width) * H]
            rows = slice(row * H, (row + width) * H)
            torch.mm(d_input.t(), unit.x, out=grads["w_ih"][rows])
            if unit.spec.fold_hidden_bias:
                grads["b_ih"][rows] = grads["b_hh"][rows]
            else:
                torch.sum(d_input, 0, out=grads["b_ih"][rows])


def _lengths_list(seq_lengths: Any) -> list[int]:
    if isinstance(seq_lengths, Tensor):
        return [int(v) for v in seq_lengths.tolist()]
    return [int(v) for v in np.asarray(seq_lengths).reshape(-1)]


def _config_for(x: Tensor, flat_params: Tensor, mode: str, num_layers: int, bidirectional: bool,
                proj_size: int = 0, bias: bool = True) -> RNNConfig:
    """The config of a flat cudnn-style parameter vector; H is solved from its length."""
    G, D, I, n, P, L = GATES[mode], 2 if bidirectional else 1, x.shape[2], flat_params.numel(), proj_size, num_layers
    biases = 2 * G * int(bias)
    if P:
        # n = D·(G·H·I + G·H·P + P·H + 2G·H + (L−1)·(G·H·D·P + G·H·P + P·H + 2G·H)) = b·H
        a, b = 0, D * (G * I + G * P + P + biases + (L - 1) * (G * D * P + G * P + P + biases))
        H = n // b
    else:
        # n = D·G·(H·I + H² + 2H + (L−1)·(D·H² + H² + 2H)) = a·H² + b·H
        a, b = D * G * (1 + (L - 1) * (D + 1)), D * (G * I + biases * L)
        H = round((-b + math.sqrt(b * b + 4 * a * n)) / (2 * a))
    if H < 1 or a * H * H + b * H != n:
        raise ValueError(f"flat parameter vector of {n} values does not fit {mode} with {num_layers} layers, "
                         f"{'bi' if bidirectional else 'uni'}directional, input size {I}")
    return RNNConfig(mode, num_layers, bidirectional, I, H, x.shape[0], x.shape[1], proj_size=P, bias=bias)


class KernelFunction(torch.autograd.Function):
    """Autograd entry over any :class:`FusedKernel`: ``apply(x, seq_lengths, h0, c0,
    flat_params, mode, num_layers, bidirectional, kernel[, proj_size, bias]) -> (y, hy, cy)``;
    cy is None unless LSTM.

    ``flat_params`` is the cudnn-style flat vector (:func:`gradcheck_rnn.layout.pack`).
    The backward is the kernel's hand-written BPTT; it computes only what
    ``ctx.needs_input_grad`` asks for (no weight GEMMs when ``flat_params`` needs no gradient,
    no layer-0 dx GEMM when x needs none). Each kernel module makes its own with
    :func:`kernel_function`, where ``kernel`` is optional.
    """

    @staticmethod
    def forward(ctx: Any, x: Tensor, seq_lengths: Any, h0: Tensor | None, c0: Tensor | None,
                flat_params: Tensor, mode: str, num_layers: int, bidirectional: bool,
                kernel: FusedKernel, proj_size: int = 0, bias: bool = True) -> tuple[Tensor, Tensor, Tensor | None]:
        config = _config_for(x, flat_params, mode, num_layers, bidirectional, proj_size, bias)
        params = unpack(flat_params, config)
        y, hy, cy, state = kernel.forward(x, _lengths_list(seq_lengths), h0, c0, params, mode,
                                          num_layers, bidirectional)
        ctx.kernel, ctx.state, ctx.config = kernel, state, config
        ctx.save_for_backward(x, h0, c0, flat_params)
        return y, hy, cy

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, dy: Tensor | None, dhy: Tensor | None, dcy: Tensor | None) -> tuple[Any, ...]:
        _, _, _, flat_params = ctx.saved_tensors  # raises if an input was modified in place
        need_x, _, need_h0, need_c0, need_params = ctx.needs_input_grad[:5]
        dx, dh0, dc0 = ctx.kernel.backward_data(ctx.state, dy, dhy, dcy, need_x)
        d_params = None
        if need_params:
            d_params = torch.empty_like(flat_params)
            ctx.kernel.backward_weights(ctx.state, unpack(d_params, ctx.config))
        # one None for each non-tensor input: mode, layers, directions, kernel (and proj_size, bias)
        return (dx, None, dh0 if need_h0 else None, dc0 if need_c0 else None, d_params,
                *[None] * (len(ctx.needs_input_grad) - 5))


def kernel_function(default_kernel: type[FusedKernel], name: str) -> type[KernelFunction]:
    """A :class:`KernelFunction` whose ``kernel`` argument is optional and defaults to a new
    ``default_kernel()``: ``apply(x, seq_lengths, h0, c0, flat_params, mode, num_layers,
    bidirectional, kernel=None, proj_size=0, bias=True) -> (y, hy, cy)``."""

    class DefaultKernelFunction(KernelFunction):
        @staticmethod
        def forward(ctx: Any, x: Tensor, seq_lengths: Any, h0: Tensor | None, c0: Tensor | None,
                    flat_params: Tensor, mode: str, num_layers: int, bidirectional: bool,
                    kernel: FusedKernel | None = None, proj_size: int = 0,
                    bias: bool = True) -> tuple[Tensor, Tensor, Tensor | None]:
            return KernelFunction.forward(ctx, x, seq_lengths, h0, c0, flat_params, mode, num_layers, bidirectional,
                                          kernel if kernel is not None else default_kernel(), proj_size, bias)

    DefaultKernelFunction.__name__ = DefaultKernelFunction.__qualname__ = name
    DefaultKernelFunction.__module__ = default_kernel.__module__
    DefaultKernelFunction.__doc__ = (f":class:`KernelFunction` with :class:`{default_kernel.__name__}` as the default "
                                     f"kernel.\n\n" + (kernel_function.__doc__ or ""))
    return DefaultKernelFunction


def apply_kernel(x: Tensor, seq_lengths: Any, h0: Tensor | None, c0: Tensor | None,
                 params: Mapping[str, Tensor], mode: str, num_layers: int, bidirectional: bool,
                 kernel: FusedKernel) -> tuple[Tensor, Tensor, Tensor | None]:
    """Differentiable fused RNN over a parameter dict (keys ``l{layer}.{fwd|bwd}.{kind}``)."""
    T, B, I = x.shape
    w_hh, w_hr = params[param_key(0, "fwd", "w_hh")], params.get(param_key(0, "fwd", "w_hr"))
    H = w_hh.shape[0] // GATES[mode]
    P, bias = (0 if w_hr is None else w_hr.shape[0]), param_key(0, "fwd", "b_ih") in params
    config = RNNConfig(mode, num_layers, bidirectional, I, H, T, B, proj_size=P, bias=bias)
    return KernelFunction.apply(x, seq_lengths, h0, c0, pack(params, config), mode, num_layers,
                                bidirectional, kernel, P, bias)


class FusedTarget:
    """A target over a :class:`FusedKernel`: runs a case on ``device`` in the case's dtype,
    computing only the requested gradients, the way a framework's fused op would (no
    weight-gradient GEMMs for frozen weights, no layer-0 dx GEMM when x is frozen)."""

    dtypes: Mapping[str, torch.dtype] = {"f64": torch.float64, "f32": torch.float32}

    def __init__(self, kernel: FusedKernel, name: str, device: str = "cpu") -> None:
        self.kernel = kernel
        self.name = name
        self.device = device

    def run(self, case: Case) -> Outputs:
        """Forward, backward_data and (when any parameter is requested) backward_weights."""
        config = case.config
        dtype, device = self.dtypes[config.dtype], self.device

        def tensor(a: np.ndarray | None) -> Tensor | None:
            return None if a is None else torch.from_numpy(np.ascontiguousarray(a)).to(device=device, dtype=dtype)

        params = {k: tensor(v) for k, v in case.params.items()}
        y, hy, cy, state = self.kernel.forward(tensor(case.x), case.seq_lengths.tolist(), tensor(case.h0),
                                               tensor(case.c0), params, config.mode, config.num_layers,
                                               config.bidirectional)
        dx, dh0, dc0 = self.kernel.backward_data(state, tensor(case.dy), tensor(case.dhy), tensor(case.dcy),
                                                 need_x="x" in case.wants)
        grads = {name: value for name, value in (("x", dx), ("h0", dh0), ("c0", dc0))
                 if name in case.wants and value is not None}
        if any(name in params for name in case.wants):
            grads.update(self.kernel.backward_weights(state))
        return Outputs(y=y, hy=hy, cy=cy, grads=grads)


TF32_ENV = "GRADCHECK_RNN_TF32"


@contextmanager
def cuda_matmul_precision() -> Iterator[bool]:
    """TF32 off for cuBLAS and cuDNN while a CUDA target runs (restored afterwards), unless
    ``GRADCHECK_RNN_TF32=1``; yields whether TF32 is on.

    TF32 rounds GEMM inputs to a 10-bit mantissa (~5e-4 relative): a float32 target with it on
    needs float16-like tolerances, so a check of float32 kernels runs without it by default
    (torch's own default leaves TF32 on for cuDNN convolutions and RNNs)."""
    wanted = os.environ.get(TF32_ENV, "0").strip().lower() in ("1", "true", "yes", "on")
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = wanted
    try:
        yield wanted
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
