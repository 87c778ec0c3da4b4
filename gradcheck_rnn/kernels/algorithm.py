"""The one fused RNN algorithm the project's kernels share, with its hooks.

A fused kernel here is :class:`FusedKernel` plus eight pointwise cell passes (forward and
backward of relu, tanh, LSTM and GRU). Everything else — sorting and packing the sequences,
the state buffers, the walk order of each direction, the recurrent and input/weight-gradient
GEMMs (torch: MKL or oneDNN on CPU, see :mod:`.gemm`; cuBLAS on CUDA), the BPTT hand-off, the final-state gather — is one
algorithm, written once here and documented with its measurements in
:mod:`gradcheck_rnn.kernels.fused_cpu`. :class:`~gradcheck_rnn.kernels.fused_cpu.FusedCPUKernel`
writes the cells as aten ops, :class:`~gradcheck_rnn.kernels.fused_gpu.FusedGPUKernel` as
Triton kernels; the mutants of both override the same hooks.

The layout it works on (sorted, packed, ``B + N + B``-row state buffers) is :mod:`.packing`; the
autograd entry over any kernel is :mod:`.autograd`, the target adapter :mod:`.target`.

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

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from functools import cached_property
from typing import Mapping, Sequence

import torch
from torch import Tensor

from ..model.rnn_config import DIRECTIONS
from ..model.layout import param_key
from .gemm import matmul
from .packing import HALF_DTYPES, MODE_SPECS, ModeSpec, Packing, Segment, StepRows, add_rows, take


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

    @cached_property
    def hidden_size(self) -> int:
        """H, the width of each gate block (and of c); read several times a step, so computed once."""
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
            gates = matmul(x, w_ih.t(), bias=bias)
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
        matmul(step.h, step.unit.w_hr.t(), out)

    def project_backward(self, step: Step, dh: Tensor, out: Tensor) -> None:
        """dL/dhraw_t = dL/dh_t·W_hr: the P-wide state gradient back to the cell's H-wide output."""
        matmul(dh, step.unit.w_hr, out)

    def recurrent_projection(self, step: Step) -> None:
        """The only per-step GEMM: h_prev·W_hhᵀ added to the gates (b_hh already folded
        into the input projection), or for GRU written with b_hh into ``aux``."""
        unit = step.unit
        if unit.spec.fold_hidden_bias:
            matmul(step.h_prev, unit.w_hh_t, step.gates, accumulate=True)
        else:
            matmul(step.h_prev, unit.w_hh_t, step.aux, bias=unit.b_hh)


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
            matmul(dgates, unit.w_hh, target, accumulate=True)
        else:
            d_prev = matmul(dgates, unit.w_hh)
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
                matmul(dgates, weight, out, accumulate=not first)
                first = False

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
        matmul(dh.t(), unit.hraw, out)

    def weight_grads(self, unit: Unit, packing: Packing, grads: Mapping[str, Tensor]) -> None:
        """dW_ih = dG_xᵀ·X, dW_hh = dG_hᵀ·H_prev over all steps at once; db = column sums."""
        H = unit.hidden_size
        a, b = unit.spec.recurrent
        d_hidden = unit.dgates[:, a * H:b * H]
        h_prev = take(unit.h, packing.history_segments(unit.reverse))
        matmul(d_hidden.t(), h_prev, grads["w_hh"])
        torch.sum(d_hidden, 0, out=grads["b_hh"])
        for col, row, width in unit.spec.input_blocks:
            d_input = unit.dgates[:, col * H:(col + width) * H]
            rows = slice(row * H, (row + width) * H)
            matmul(d_input.t(), unit.x, grads["w_ih"][rows])
            if unit.spec.fold_hidden_bias:
                grads["b_ih"][rows] = grads["b_hh"][rows]
            else:
                torch.sum(d_input, 0, out=grads["b_ih"][rows])
