"""Mutants: a fused kernel with one historical RNN gradient bug injected each.

A checker is worth the bugs it catches. Each bug is written once, as a :class:`KernelBug`: a few
lines over one hook of the shared algorithm (:class:`~gradcheck_rnn.kernels.algorithm.FusedKernel`),
re-creating a bug that shipped (its source is in the first line of its docstring) or one a careful
reviewer could miss. :func:`crossed` injects it into a kernel: :data:`MUTANTS` crosses each bug
with the fused CPU kernel, and :data:`GPU_MUTANTS` crosses the bugs that
apply there with the fused GPU kernel (:data:`GPU_MUTANTS`, ``mutant:gpu-…``, run by name since
they need CUDA or the Triton interpreter); :func:`family_mutants` crosses the bugs a family names
(``Family.mutants``: s6, slstm, the matrix families, conv1d, a user's) with that family's kernels. ``gradcheck-rnn mutants`` sweeps every CPU mutant, each on the cases of
its home profile (:func:`home_profile`), and reports which case and which tensor or check caught it.
"""

from __future__ import annotations

import itertools
from typing import Any, Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

from ..model.case import Case, Outputs, RNNConfig
from . import mutant_names
from .mutant_names import check_mutant_name
from ..families import BUILT_IN_MODES, CUDNN_MODES, family, registered
from ..importing import import_object
from ..kernels.packing import add_rows, Packing, Segment, take
from ..kernels.algorithm import ForwardState, FusedKernel, Step, Unit
from ..kernels.fused_cpu import FusedCPUKernel, FusedCPUTarget
from ..kernels.conv1d_cpu import Stream as Conv1dStream
from ..kernels.deltaproduct_cpu import Layer as DeltaProductLayer, SubStepChunks, SubSteps
from ..kernels.gdn_cpu import Layer as GDNLayer
from ..kernels.gla_cpu import Layer as GLALayer
from ..kernels.kda_cpu import Layer as KDALayer
from ..kernels.mlstm_cpu import Intra as MLSTMIntra, Layer as MLSTMLayer, States as MLSTMStates
from ..kernels.rwkv7_cpu import Layer as RWKV7Layer
from ..kernels.s6_cpu import CarryRule, Layer as S6Layer, S6CPUKernel
from ..kernels.tangent_cpu import TangentKernel
from .torch_native import TorchNativeTarget
from ..kernels.slstm_cpu import Unit as SLSTMUnit
from .packed import PackedAdapter
from .protocol import Target


class KernelBug:
    """A bug written over the hooks of the shared fused algorithm; :func:`crossed` injects it into
    a kernel class (the bug first in the MRO, so its hooks call the kernel's through ``super()``)."""


def crossed(bug: type[KernelBug], kernel: type[FusedKernel]) -> type[FusedKernel]:
    """The kernel class with ``bug`` injected, named and documented as the bug."""
    return type(bug.__name__, (bug, kernel), {"__doc__": bug.__doc__, "__module__": bug.__module__})


class TruncatedBPTT(KernelBug):
    """Truncated BPTT: dh from step t+1 never reaches step t (MXNet #21143, native CPU RNN)."""

    def handoff(self, step: Step, segments: Sequence[Segment]) -> None:
        if step.dc_prev is not None:
            add_rows(step.unit.dc, segments, step.dc_prev)


class BidirDyOverwritten(KernelBug):
    """Bidirectional, > 2 layers: a middle layer's dx overwrites instead of adding both directions (MXNet #17898)."""

    def input_grad(self, units: Sequence[Unit], out: Tensor) -> None:
        if len(units) == 2 and units[0].layer > 0 and not units[0].top:
            for unit in units:  # each direction writes with out=, the second clobbers the first
                super().input_grad([unit], out)
            return
        super().input_grad(units, out)


class GruMiddleWih(KernelBug):
    """GRU, > 2 layers: the middle layer's i2h weight gradient uses the h2h part of dn (MXNet #18203)."""

    def weight_grads(self, unit: Unit, packing: Packing, grads) -> None:
        super().weight_grads(unit, packing, grads)
        if unit.spec.cell == "gru" and unit.layer > 0 and not unit.top:
            H = unit.hidden_size
            torch.mm(unit.dgates[:, 3 * H:].t(), unit.x, out=grads["w_ih"][2 * H:])


class TopBhhZero(KernelBug):
    """The top layer's h2h bias gradient is all zeros (MXNet #17818, stacked CPU RNN)."""

    def weight_grads(self, unit: Unit, packing: Packing, grads) -> None:
        super().weight_grads(unit, packing, grads)
        if unit.top:
            grads["b_hh"].zero_()


class LengthsIgnored(KernelBug):
    """Sequence lengths ignored: the reverse direction starts at T−1, in the padding (MXNet #19323).

    Every sequence runs over all T steps in both directions, so padding leaks into the reverse
    direction's outputs and into hy; outputs at padded steps are not zeroed.
    """

    def make_packing(self, seq_lengths: Sequence[int], max_len: int, device: torch.device) -> Packing:
        return Packing([max_len] * len(seq_lengths), max_len, device)


class ReluMaskWrongTensor(KernelBug):
    """rnn_relu backward takes the relu mask from the previous state instead of the output (PyTorch #11662)."""

    def relu_backward(self, step: Step) -> None:
        torch.mul(step.dh, step.h_prev.gt(0), out=step.dgates)


class HyAtLastPaddedStep(KernelBug):
    """hy/cy read at step T−1 for every sequence: zero (the masked output) for sequences shorter than T."""

    def final_state(self, unit: Unit, packing: Packing):
        hy, cy = super().final_state(unit, packing)
        if not unit.reverse:
            short = torch.tensor([length < packing.max_len for length in packing.lengths])
            hy = hy.masked_fill(short[:, None], 0)
            cy = None if cy is None else cy.masked_fill(short[:, None], 0)
        return hy, cy


class PaddedDxLeak(KernelBug):
    """Gradient leaks into padded steps of x: they receive the stale dx of the sequence's last step."""

    def backward_data(self, state, dy, dhy, dcy, need_x: bool = True):
        dx, dh0, dc0 = super().backward_data(state, dy, dhy, dcy, need_x)
        if dx is not None:
            for b, length in enumerate(state.packing.lengths):
                dx[length:, b] = dx[length - 1, b]
        return dx, dh0, dc0


class Dc0Missing(KernelBug):
    """The LSTM initial cell-state gradient dc0 comes back as zeros."""

    def initial_state_grads(self, unit: Unit, packing: Packing):
        dh0, dc0 = super().initial_state_grads(unit, packing)
        return dh0, None if dc0 is None else torch.zeros_like(dc0)


class WeightGradSkipsFirstStep(KernelBug):
    """Weight-gradient accumulation starts at step 1: the first step's dW and db are lost."""

    def weight_grads(self, unit: Unit, packing: Packing, grads) -> None:
        unit.dgates[packing.packed_rows(0)] = 0
        super().weight_grads(unit, packing, grads)


class GruResetBeforeBias(KernelBug):
    """GRU applies r before the h2h bias: n = tanh(W_in x + b_in + b_hn + r·W_hn h) (not torch/cuDNN's form)."""

    def recurrent_projection(self, step: Step) -> None:
        super().recurrent_projection(step)
        unit = step.unit
        if unit.spec.cell == "gru":
            H = unit.hidden_size
            step.aux[:, 2 * H:] -= unit.b_hh[2 * H:]
            step.gates[:, 2 * H:] += unit.b_hh[2 * H:]


class ForgetGateSignFlip(KernelBug):
    """LSTM backward: the forget gate's pre-activation gradient has the wrong sign (one gate only)."""

    def lstm_backward(self, step: Step) -> None:
        super().lstm_backward(step)
        H = step.unit.hidden_size
        step.dgates[:, H:2 * H].neg_()


class TanhDerivativeOfInput(KernelBug):
    """rnn_tanh backward uses 1 − pre² (the pre-activation) instead of 1 − tanh(pre)²."""

    def tanh_backward(self, step: Step) -> None:
        pre = torch.atanh(step.h.clamp(-1 + 1e-12, 1 - 1e-12))
        torch.mul(step.dh, 1 - pre * pre, out=step.dgates)


class CellGradNotCarried(KernelBug):
    """LSTM: dc is not carried to the previous step through the forget gate (only dh is)."""

    def handoff(self, step: Step, segments: Sequence[Segment]) -> None:
        step.dc_prev = None
        super().handoff(step, segments)


class HyInSortedOrder(KernelBug):
    """hy/cy returned in length-sorted order: the sort by length is never undone for the final states."""

    def final_state(self, unit: Unit, packing: Packing):
        hy, cy = super().final_state(unit, packing)
        order = packing.order
        return hy.index_select(0, order), None if cy is None else cy.index_select(0, order)


class NondeterministicWeightGrad(KernelBug):
    """Weight gradients summed in a run-dependent order (atomic adds): bits differ between runs."""

    # Each backward scales w_hh's gradient by 1 + k·eps with k = 1..7 cycling over the process's
    # runs, so two consecutive runs always differ by about one ulp per element. (A random k, as
    # before, repeated itself between two runs about one time in eight: a flaky mutant.)
    _runs = itertools.count()

    def backward_weights(self, state: ForwardState, out: Mapping[str, Tensor] | None = None) -> dict[str, Tensor]:
        self._k = 1 + next(NondeterministicWeightGrad._runs) % 7
        return super().backward_weights(state, out)

    def weight_grads(self, unit: Unit, packing: Packing, grads) -> None:
        super().weight_grads(unit, packing, grads)
        grads["w_hh"].mul_(1 + torch.finfo(grads["w_hh"].dtype).eps * self._k)


class GradientClippedInKernel(KernelBug):
    """The gate gradients are clipped to [−0.25, 0.25] inside the op (a hidden state_clip on the backward)."""

    def handoff(self, step: Step, segments: Sequence[Segment]) -> None:
        step.dgates.clamp_(-0.25, 0.25)
        super().handoff(step, segments)


class StaleDh0Buffer(KernelBug):
    """dh0 accumulates into a buffer kept across calls (ONNX Runtime #3797 stale buffers)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._dh0: dict[tuple[int, ...], Tensor] = {}

    def initial_state_grads(self, unit: Unit, packing: Packing):
        dh0, dc0 = super().initial_state_grads(unit, packing)
        key = (unit.layer, int(unit.reverse), *dh0.shape)
        buffer = self._dh0.setdefault(key, torch.zeros_like(dh0))
        buffer += dh0
        return buffer.clone(), dc0


class ProjectionGradTransposed(KernelBug):
    """LSTM projections: dW_hr written in the transposed layout (oneDNN LSTMP's ldio/ldoi mix-up, oneDNN PR #2571).

    The gradient is computed as hrawᵀ·dh, (H, P), and stored into the (P, H) buffer as it lies in
    memory: every value is there, in the wrong places.
    """

    def projection_grad(self, unit: Unit, packing: Packing, out: Tensor) -> None:
        dh = unit.dh[packing.batch:packing.batch + packing.rows]
        out.copy_(torch.mm(unit.hraw.t(), dh).reshape(out.shape))


class BiasAssumedPresent(KernelBug):
    """bias=False still adds biases, read where a layout with biases keeps them (cuDNN CUDNN_RNN_NO_BIAS path).

    Without b_* keys the kernel takes G·H values from the unit's flat weights, as a kernel that
    assumes every flat vector ends in biases would read past the weights.
    """

    def unit_biases(self, params, layer: int, direction: str, w_ih: Tensor) -> tuple[Tensor, Tensor]:
        b_ih, b_hh = super().unit_biases(params, layer, direction, w_ih)
        if f"l{layer}.{direction}.b_ih" in params:
            return b_ih, b_hh
        flat = w_ih.reshape(-1)
        return flat[:w_ih.shape[0]], flat[-w_ih.shape[0]:]


class ZeroLengthRunsOneStep(KernelBug):
    """Zero-length sequences run one step (lengths clamped to >= 1): y, hy and dh0 leak a phantom step (JAX #17966).

    The clamp is the usual workaround for kernels that cannot take a length of 0 (ONNX Runtime
    #1660); it turns "no step" into "one step on the padding".
    """

    def make_packing(self, seq_lengths: Sequence[int], max_len: int, device: torch.device) -> Packing:
        return Packing([max(int(v), 1) for v in seq_lengths], max_len, device)


class ZeroLengthDh0Dropped(KernelBug):
    """Zero-length sequences get dh0 = dc0 = 0 instead of dhy, dcy: hy = h0 is not differentiated."""

    def initial_state_grads(self, unit: Unit, packing: Packing):
        dh0, dc0 = super().initial_state_grads(unit, packing)
        empty = torch.tensor([length == 0 for length in packing.lengths], device=dh0.device)[:, None]
        return dh0.masked_fill(empty, 0), None if dc0 is None else dc0.masked_fill(empty, 0)


class HalfAccumulatedInHalf(KernelBug):
    """Half precision: dW_hh and db_hh summed row by row in the half dtype instead of float32.

    A known blind spot (docs/concepts/tolerances.md): on the half profile's sizes the extra rounding stays
    far inside the calibrated f16/bf16 tolerances, so no check catches it.
    """

    def weight_grads(self, unit: Unit, packing: Packing, grads) -> None:
        super().weight_grads(unit, packing, grads)
        if unit.dgates.dtype not in (torch.float16, torch.bfloat16):
            return
        H = unit.hidden_size
        a, b = unit.spec.recurrent
        d_hidden = unit.dgates[:, a * H:b * H]
        h_prev = take(unit.h, packing.history_segments(unit.reverse))
        weight, bias = torch.zeros_like(grads["w_hh"]), torch.zeros_like(grads["b_hh"])
        for row in range(d_hidden.shape[0]):  # each += rounds to the half dtype
            weight += torch.outer(d_hidden[row], h_prev[row])
            bias += d_hidden[row]
        grads["w_hh"].copy_(weight)
        grads["b_hh"].copy_(bias)


class HalfRoundsPerOp(KernelBug):
    """Half precision: every op's result rounded to the half dtype, as fused-cpu was before issue 21 (lossy, not wrong).

    Four places round more than once: ``b_ih + b_hh`` summed in half before the input projection;
    the LSTM/GRU cells as chains of half ops (c = f·c_prev + i·g rounded twice, the LSTM
    backward's dc three times); the hand-off rounding dG·W_hh and its sum with dL/dh_prev (and
    GRU's direct term) separately; a layer's input gradient rounding each direction's partial sum.
    ``benchmarks/half_error_budget.py --kernel per-op`` measures up to 1533 half ulps (bias sum,
    of a small pre-activation), 145 / 274 (cell forward / backward), 25 (hand-off) and 384
    (input gradient) where terms cancel; the careful kernel has 0.5 in every stage
    (docs/half-precision.md). A measured blind spot: its outputs stay within the half tolerances.
    """

    lstm_forward = FusedCPUKernel.lstm_forward.__wrapped__
    gru_forward = FusedCPUKernel.gru_forward.__wrapped__
    lstm_backward = FusedCPUKernel.lstm_backward.__wrapped__
    gru_backward = FusedCPUKernel.gru_backward.__wrapped__

    def handoff(self, step: Step, segments: Sequence[Segment]) -> None:
        FusedKernel.handoff(self, step, segments)

    def unit_biases(self, params, layer: int, direction: str, w_ih: Tensor) -> tuple[Tensor, Tensor]:
        b_ih, b_hh = super().unit_biases(params, layer, direction, w_ih)
        w_hh = params[f"l{layer}.{direction}.w_hh"]
        if w_ih.dtype in (torch.float16, torch.bfloat16) and w_hh.shape[0] != 3 * w_hh.shape[1]:
            return b_ih + b_hh, torch.zeros_like(b_hh)  # not GRU: both biases folded, summed in half
        return b_ih, b_hh

    def input_grad(self, units: Sequence[Unit], out: Tensor) -> None:
        first = True
        for unit in units:
            H = unit.hidden_size
            for col, row, width in unit.spec.input_blocks:
                dgates, weight = unit.dgates[:, col * H:(col + width) * H], unit.w_ih[row * H:(row + width) * H]
                if first:
                    torch.mm(dgates, weight, out=out)  # half out: each partial sum rounded
                    first = False
                else:
                    out.addmm_(dgates, weight)


class ForgetGateGradDropped(KernelBug):
    """LSTM backward drops the forget-gate gradient dc·c_prev·f(1−f): a hand-fused cell that forgets c_prev's term."""

    def lstm_backward(self, step: Step) -> None:
        super().lstm_backward(step)
        H = step.unit.hidden_size
        step.dgates[:, H:2 * H] = 0


class ReverseWeightGradSkipsFirstStep(KernelBug):
    """The reverse direction's weight-gradient accumulation skips the first step it walks (t = T−1): dW, db lose it."""

    def weight_grads(self, unit: Unit, packing: Packing, grads: Mapping[str, Tensor]) -> None:
        if unit.reverse:
            unit.dgates[packing.packed_rows(packing.steps - 1)] = 0
        super().weight_grads(unit, packing, grads)


class BpttSkippedWhenFrozen:
    """Truncated BPTT exactly when no weight gradient is requested (MXNet 1.9.1 native CPU RNN, req=null)."""

    def __init__(self) -> None:
        self.correct = FusedCPUTarget()
        self.truncated = FusedCPUTarget(crossed(TruncatedBPTT, FusedCPUKernel)())

    def supports(self, config: RNNConfig) -> bool | str:
        return self.correct.supports(config)

    def run(self, case: Case) -> Outputs:
        weights_requested = any(name in case.params for name in case.wants)
        return (self.correct if weights_requested else self.truncated).run(case)


class RecurrentTangentDropped(TangentKernel):
    """A forward-mode formula with one wrong term: the first gate's tangent misses its recurrent part W_hh·ḣ (issue 47)."""

    @staticmethod
    def recurrent_tangent(unit, t_unit, h, t_h):
        gh, t_gh = TangentKernel.recurrent_tangent(unit, t_unit, h, t_h)
        H = unit["w_hr"].shape[1] if "w_hr" in unit else unit["w_hh"].shape[1]  # the gates' width
        dropped = t_gh.clone()
        dropped[:, :H] -= (t_h @ unit["w_hh"].T)[:, :H]
        return gh, dropped


class JvpRecurrentTangentDropped(FusedCPUTarget):
    """A forward-mode formula with one wrong term: the first gate's tangent misses its recurrent part W_hh·ḣ (issue 47)."""

    def __init__(self) -> None:
        super().__init__(name="mutant:jvp-recurrent-tangent-dropped", tangent=RecurrentTangentDropped())


class _FirstOrderSigmoid(torch.autograd.Function):
    """σ whose backward is not itself differentiated: the derivative σ(1 − σ) is taken as a constant."""

    @staticmethod
    def forward(ctx: Any, a: Tensor) -> Tensor:
        s = torch.sigmoid(a)
        ctx.save_for_backward(s)
        return s

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        s = ctx.saved_tensors[0].detach()
        return grad * s * (1 - s)


class HvpGateSecondOrderDropped(TorchNativeTarget):
    """A double backward that drops the second-order term of a saturating gate: σ'' never enters H·u (issue 47)."""

    def __init__(self) -> None:
        super().__init__()
        self.name = "mutant:hvp-gate-second-order-dropped"

    def supports(self, config: RNNConfig) -> bool | str:
        if config.mode not in ("lstm", "gru"):
            return "the bug is in a gated cell's sigmoid (lstm, gru)"
        return super().supports(config)

    def hvp(self, case: Case, tangents: Mapping[str, np.ndarray]) -> Outputs:
        from types import SimpleNamespace

        from ..families.ops import torch_ops
        from ..references.loop import run_loop_hvp

        ops = SimpleNamespace(**{**vars(torch_ops()), "sigmoid": _FirstOrderSigmoid.apply})
        return run_loop_hvp(case, tangents, ops=ops)


class HvpSilentZeros(TorchNativeTarget):
    """A double backward that silently returns zeros where it cannot differentiate (pytorch/rl #4154's danger)."""

    def __init__(self) -> None:
        super().__init__()
        self.name = "mutant:hvp-silent-zeros"

    def hvp(self, case: Case, tangents: Mapping[str, np.ndarray]) -> Outputs:
        out = super().hvp(case, tangents)
        return Outputs(y=None, hy=None, grads={name: torch.zeros_like(g) for name, g in out.grads.items()})


class S6PaddedStepDecay:
    """s6: the backward decays the state at padded steps with exp(softplus(delta_bias)·A) instead of 1 (state-spaces/mamba #368).

    The padded inputs are zero, so Δ of a padded step is 0 only without delta_bias and without
    the softplus; with either, the reverse scan's decay there is not 1 and dhy reaches the real
    steps shrunk. As in #368, the bug is invisible on -nosoftplus-nobias cases."""

    def padded_delta(self, layer: S6Layer, cfg: RNNConfig, p: Mapping[str, Tensor], mask: Tensor) -> Tensor:
        return S6CPUKernel.activation(cfg, layer.dt)


def undecayed_carry(a_last, b_last, h_start):  # a carry rule: plain arithmetic, jitted for Triton
    """The carry of proger/accelerated-scan #15: the chunk's B̄ added to its start without the decay Ā."""
    return b_last + h_start


class S6ReverseCarryUndecayed:
    """s6: the backward's reverse scan hands its carry across a chunk boundary without the chunk's decay (proger/accelerated-scan #15).

    Only cases longer than a chunk cross a boundary; with a small decay the carried gradient is
    tiny anyway, which is how the original hid from its tests. The rule is the kernel's
    ``carry_rule``: the CPU kernel applies it in torch, the GPU kernel inside its Triton scan."""

    def carry_rule(self, reverse: bool) -> CarryRule:
        return undecayed_carry if reverse else super().carry_rule(reverse)


class S6GateGradDropped:
    """s6: the gradient of the gate z is computed and then dropped, dz = 0 (state-spaces/mamba #342, the fast path)."""

    def gate_backward(self, layer: S6Layer, g: Tensor) -> tuple[Tensor, Tensor | None]:
        dy_core, dz = super().gate_backward(layer, g)
        return dy_core, None if dz is None else torch.zeros_like(dz)


class S6LowerLayerDhyDropped:
    """s6, stacked: every layer but the last starts its reverse scan from 0 instead of its dhy (the non-trailing-layer class of pytorch/pytorch #153679)."""

    def head_state_grad(self, dhy: Tensor, layer: S6Layer, num_layers: int) -> Tensor:
        return dhy if layer.index == num_layers - 1 else torch.zeros_like(dhy)


class SLSTMStabilizerGradToForget:
    """slstm: dL/dm_t always goes to the forget branch log f + m_{t−1}, never to ĩ where the input gate won the max (a wrong stabiliser gradient).

    Exact for every loss through y and hy (there dL/dm_t is 0, see families/slstm.py), so only a
    head gradient on the final c, n, m shows it: the bug of a backward written for losses on h."""

    def route_stabilizer(self, unit: SLSTMUnit, t: int, dm_free: Tensor) -> tuple[Tensor, Tensor]:
        if self.hold_stabilizer:
            return super().route_stabilizer(unit, t, dm_free)
        return torch.zeros_like(dm_free), dm_free


class SLSTMLowerLayerRecurrentGrad:
    """slstm, stacked: every layer but the last computes dR from the state after each step instead of before it (the non-trailing-layer class of pytorch/pytorch #153679)."""

    def recurrent_input(self, unit: SLSTMUnit) -> Tensor:
        return unit.h_prev if unit.top else unit.h


class SLSTMPaddedStepUpdatesNormalizer:
    """slstm: the normaliser n is updated at padded steps too (n' = f'·n + i' past a sequence's end), the padded-step class of state-spaces/mamba #368."""

    def hold(self, mask: Tensor, new: Tensor, old: Tensor, state: str) -> Tensor:
        return new if state == "n" else super().hold(mask, new, old, state)


class GLAKeyBlockMask:
    """gla: dq is computed in key blocks and the last partial block is masked out, so dq of its units is 0 (fla-org/flash-linear-attention #836).

    In #836 the head-dimension mask was wrong when K was not a multiple of the block (dq 82 %
    off at head dim 100, right at 64). Here the kernel tiles K in blocks of ``key_block`` units
    (:meth:`~gradcheck_rnn.kernels.gla_cpu.GLACPUKernel.key_blocks`) and the bug keeps only the full blocks: every case whose K
    is not a multiple of the block and that asks for a gradient through q is wrong."""

    def key_blocks(self, key_width: int) -> list[slice]:
        return [units for units in super().key_blocks(key_width) if units.stop - units.start == self.key_block]


class GLADecayGradOvershoot:
    """gla: the decay gradient dg of each chunk's last step is zeroed by a block overshoot (state-spaces/mamba PR #537).

    In #537 a block of the SSD backward ran past its chunk and corrupted dA; here the overshoot
    writes zeros over the last step of every chunk after the reverse cumulative sum of dΛ
    (:meth:`~gradcheck_rnn.kernels.gla_cpu.GLACPUKernel.log_decay_grad`), so the gate's weights and x get a wrong gradient
    wherever a chunk's last step is a valid step."""

    def log_decay_grad(self, d_cum: Tensor) -> Tensor:
        d_log = super().log_decay_grad(d_cum)
        d_log[..., -1, :] = 0
        return d_log


class GLAShortCallDh0PassThroughDropped:
    """gla: a call shorter than one chunk drops dhy's pass-through term from dh0 (fla-org/flash-linear-attention #1140, a chained state's gradient lost when a segment is shorter than the kernel's window).

    In #1140 causal_conv1d's backward clamped the final-state gradient slot when a segment was
    shorter than the conv width, so dh0 lost the gradient that passes straight through from the
    next segment. Here, in a call of fewer steps than a chunk, dh0 keeps only what the steps read
    from h0 and loses exp(Λ_last) ⊙ dhy (:meth:`~gradcheck_rnn.kernels.gla_cpu.GLACPUKernel.state_grad_chain`):
    a case longer than a chunk, or one without a head gradient on hy (``-gy``), hides it; a
    segmented run, whose inner segments are short and always get a state gradient, shows it."""

    def state_grad_chain(self, layer: GLALayer, read: Tensor, dhy: Tensor) -> tuple[Tensor, Tensor]:
        d_ends, dh0 = super().state_grad_chain(layer, read, dhy)
        if layer.x.shape[0] < self.chunk:
            dh0 = dh0 - torch.exp(layer.cum[..., -1, -1, :])[..., None] * dhy
        return d_ends, dh0


class GLADecayGradIgnoresDhy:
    """gla: the decay gradient dg ignores the final-state gradient dhy (fla-org/flash-linear-attention #459, open-lm-engine/accelerated-model-architectures #445).

    Simple GLA's dg, and M2RNN's backward, were computed as if the loss never read the final
    state; dq, dk, dv and dh0 keep dhy. So the gate's weights (and x through them) are wrong
    exactly when a head gradient reaches hy: a sweep of ``-gy`` cases (dhy = 0) never sees it, a
    segmented run, whose inner segments always get one, does
    (:meth:`~gradcheck_rnn.kernels.gla_cpu.GLACPUKernel.decay_state_grads`)."""

    def decay_state_grads(self, layer: GLALayer, read: Tensor, dhy: Tensor, d_ends: Tensor) -> Tensor:
        return self.state_grad_chain(layer, read, torch.zeros_like(dhy))[0]


class GLADyStridesAssumedContiguous:
    """gla: the backward reads dy's storage as if dy were contiguous, its strides hard-coded (fla-org/flash-linear-attention #871, causal_conv1d; state-spaces/mamba #1036 hid the same behind a dout.contiguous()).

    A contiguous dy, the only one a case handed dy as a fresh array ever had, reads right. A
    transposed one (``-dyT``) reads its elements in another order, a strided one (``-dyS``) reads
    the NaN between them, and an expanded one (``-dyE``, stride 0, as ``loss.sum()`` hands it down)
    has fewer elements in its storage than the read needs, which torch refuses (a C kernel would
    read past it). Only a case with a non-contiguous head gradient shows it
    (:meth:`~gradcheck_rnn.kernels.layer_stack.LayerStackKernel.incoming_gradient`)."""

    def incoming_gradient(self, dy: Tensor) -> Tensor:
        contiguous = torch.empty(dy.shape, device="meta").stride()
        return dy.as_strided(dy.shape, contiguous, dy.storage_offset())


class GLAStateGradWrongHead:
    """gla: the final-state gradient handed back from the later segment is carried through the chunks with head 0's decay on every head (fla-org/flash-linear-attention #1115: KDA's context-parallel backward loads the gates without the head offset on every rank but the last).

    A call handed no final-state gradient (the last segment of a training loss, a ``-gy`` case)
    is exact, and so is one head (``-NH1``); every segment but the last of a segmented run gets
    one, so the ``segments`` check shows it on a ``-gy`` case that the reference check passes
    (:meth:`~gradcheck_rnn.kernels.gla_cpu.GLACPUKernel.state_grad_chain`, split as the hand-off
    is linear: the term from dhy carried with the wrong head's decay)."""

    def state_grad_chain(self, layer: GLALayer, read: Tensor, dhy: Tensor) -> tuple[Tensor, Tensor]:
        d_ends, dh0 = super().state_grad_chain(layer, read, torch.zeros_like(dhy))
        decay = torch.exp(layer.cum[..., -1, :])               # (B, NH, C, K)
        carried = self.hand_off(decay[:, :1].expand_as(decay), torch.zeros_like(read), dhy, reverse=True)
        return d_ends + carried[:, :, :-1], dh0 + carried[:, :, -1]


class GPUSLSTMStabilizerGradToForget:
    """slstm, Triton backward: dL/dm_t always goes to the forget branch log f + m_{t−1}, never to ĩ where the input gate won the max (slstm-stabilizer-grad-to-forget on the GPU).

    In the Triton kernel δm's route is a compile-time flag (:meth:`SLSTMGPUKernel.stabilizer_route`),
    so the bug is that flag; like the CPU one, only a head gradient on the final c, n, m shows it."""

    def stabilizer_route(self) -> str:
        return "held" if self.hold_stabilizer else "forget"


class GPUStateGradReadsNextChunk:
    """gla, gdn, kda, deltaproduct, rwkv7 (Triton backward; rwkv7 hands off per step): the state gradient handed back across chunk n is carried by chunk n+1's coefficient, not chunk n's (states across chunks read from the wrong chunk, NX-AI/mlstm_kernels PR #10).

    Which chunk the Triton hand-off reads is a compile-time offset
    (:meth:`~gradcheck_rnn.kernels.fused_gpu.hand_off.TritonHandOff.hand_off_read_shift`), clamped
    to the last chunk: the gradient handed back out of chunk n is wrong for n < NC − 1, which
    reaches dh0 and the end-state gradients of chunks 0 .. NC − 3. A case of one chunk hides it, one
    of two shows it in dh0 only, and chunks of padding only (coefficient I, decay 1) agree."""

    def hand_off_read_shift(self, reverse: bool) -> int:
        return 1 if reverse else super().hand_off_read_shift(reverse)


class GPUMLSTMStabiliserReadsNextChunk:
    """mlstm (Triton forward): the stabilised hand-off out of chunk n reads chunk n+1's own max and forget-gate sum, not chunk n's (states across chunks read from the wrong chunk, NX-AI/mlstm_kernels PR #10).

    The offset is the Triton kernel's compile-time ``READ_SHIFT``
    (:meth:`~gradcheck_rnn.kernels.fused_gpu.hand_off.TritonHandOff.hand_off_read_shift`): every
    chunk-boundary state from the second on is rescaled by the wrong exponents, so the outputs
    and the final states of any case of two chunks or more are wrong."""

    def hand_off_read_shift(self, reverse: bool) -> int:
        return super().hand_off_read_shift(reverse) if reverse else 1


class PackedTailUnwritten(PackedAdapter):
    """gdn, packed varlen: the backward leaves the input gradient past cu_seqlens[-1] unwritten, so the tail keeps what its reused buffer held (QwenLM/FlashQLA PR #28).

    fused-cpu's gdn kernel behind the packed interface (:class:`~gradcheck_rnn.targets.packed.PackedAdapter`),
    whose dx buffer is the packed x's own buffer, written only for the valid rows; only a case with
    a packed tail (``-tail<n>``) shows it, in the row ``x[tail]``."""

    def __init__(self) -> None:
        super().__init__(FusedCPUTarget(name="fused-cpu"), name="mutant:gdn-packed-tail-unwritten")

    def input_grad_buffer(self, x_packed: np.ndarray) -> np.ndarray:
        return x_packed.copy()


class PackedTailFromEmpty(PackedAdapter):
    """gla, packed varlen: the input gradient's buffer comes from torch.empty and its rows past cu_seqlens[-1] are never written (fla-org/flash-linear-attention #892).

    In #892 those rows held NaN, or whatever the allocator had there: zeros on a fresh
    allocation (no bug seen), finite garbage (a wrong tail, or two runs that differ). fused-cpu's
    gla kernel behind the packed interface (:class:`~gradcheck_rnn.targets.packed.PackedAdapter`),
    its dx buffer ``torch.empty``: only a case with a packed tail (``-tail<n>``) shows it, and the
    ``poisoned`` check every time, in words ("reads memory it never wrote: x[tail] rows …")."""

    def __init__(self) -> None:
        super().__init__(FusedCPUTarget(name="fused-cpu"), name="mutant:gla-packed-tail-from-empty")

    def input_grad_buffer(self, x_packed: np.ndarray) -> np.ndarray:
        return torch.empty(x_packed.shape, dtype=torch.float64).numpy()


class GDNStateGradNoHouseholder:
    """gdn: the backward carries the state gradient across a chunk by the decay alone, the coefficient I − β k kᵀ taken as I (tile-ai/TileOPs #632).

    The forward and every gradient inside a chunk stay right; the state gradient handed back
    across each chunk's start (to the chunk before, and to h0) keeps the decay and loses the
    delta rule's projection, so it hides only where β k kᵀ is small against the identity."""

    def state_grad_coefficient(self, layer: GDNLayer) -> Tensor:
        eye = torch.eye(layer.transition.shape[-1], dtype=layer.gamma.dtype, device=layer.gamma.device)
        return layer.gamma[..., -1, None, None] * eye


class GDNSequenceStartGateGrad:
    """gdn: the decay gradient at each sequence's first step is zeroed, right only without an initial state (QwenLM/FlashQLA PR #28, "zero true sequence-start gate gradients").

    α at t = 0 scales h0 alone, so its gradient is 0 exactly when h0 is 0: a kernel tested only
    from a zero state passes. With h0 the gate's weights, bias and x at t = 0 get the error."""

    def gate_grads(self, d_log_decay: Tensor, d_beta: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        d_log_decay, d_beta = super().gate_grads(d_log_decay, d_beta, mask)
        return torch.cat([torch.zeros_like(d_log_decay[:1]), d_log_decay[1:]]), d_beta


class GDNPaddedGateGrad:
    """gdn: the decay gradient past a sequence's end keeps what the chunk-local cumulative sum put there (QwenLM/FlashQLA PR #36, "dG zero padding").

    A padded step's decay is forced to 1, so its gate gradient must be 0; the reverse cumulative
    sum spreads the chunk's later terms over it. Only b_a shows it: a padded step's input is zero."""

    def gate_grads(self, d_log_decay: Tensor, d_beta: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        return d_log_decay, d_beta * mask


class Conv1dShortSequenceDh0PassThroughDropped:
    """conv1d: a sequence shorter than W−1 drops dh0's pass-through term (fla-org/flash-linear-attention #1140).

    A sequence of L < W−1 steps leaves the newest W−1−L slots of its initial state in its final
    state; the gradient of those slots is dhy's, passed straight back to dh0. In #1140
    ``compute_dh0_kernel`` dropped that term (and the final-state gradient was routed to inputs
    shifted by W−1−L slots). Here dhy reaches the inputs but never h0
    (:meth:`~gradcheck_rnn.kernels.conv1d_cpu.Conv1dCPUKernel.final_state_backward`): only a
    sequence shorter than W−1 with a head gradient on hy and a requested h0 shows it."""

    def final_state_backward(self, d_buffer: Tensor, stream: Conv1dStream, d_final: Tensor) -> None:
        from_inputs = stream.finals.flatten() < stream.tokens
        d_buffer.index_add_(0, stream.finals.flatten()[from_inputs],
                            d_final.reshape(-1, d_final.shape[-1])[from_inputs])


class Conv1dPackedWeightGradWholeStream:
    """conv1d, packed varlen: with several sequences, each sequence's block accumulates dweight over the whole packed batch, not its own rows (fla-org/flash-linear-attention PR #955: dweight ~16× too large with cu_seqlens and B > 1).

    The kernel sums each tap's column of dw_conv per sequence over its rows of the packed batch,
    then over the sequences (:meth:`~gradcheck_rnn.kernels.conv1d_cpu.Conv1dCPUKernel.conv_weight_grad`); here
    every sequence's range is [0, cu_seqlens[-1]), so dw_conv is B times too large. A batch of one
    sequence, or a case that requests no weight gradient, hides it."""

    def conv_weight_grad(self, products: Tensor, stream: Conv1dStream) -> Tensor:
        return torch.stack([products.sum(0) for _ in stream.lengths]).sum(0)


class Conv1dInitialStateGradWithoutBias:
    """conv1d: the initial state's gradient takes SiLU's derivative at a pre-activation recomputed without the bias (fla-org/flash-linear-attention PR #714, the backward with an initial state; its dh0 pass recomputes the forward output, #1138).

    dh0 is a pass of its own that recomputes the pre-activation of the outputs whose taps read the
    initial state (:meth:`~gradcheck_rnn.kernels.conv1d_cpu.Conv1dCPUKernel.state_tap_pre`) and
    leaves out b_conv there: dx, the weights and the bias stay right. Without SiLU, without a bias
    (-nobias) or without an initial state (-z) it hides."""

    def state_tap_pre(self, pre: Tensor, bias: Tensor | None) -> Tensor:
        return pre if bias is None else pre - bias


class Conv1dBackwardReadsNextSequence:
    """conv1d, packed varlen: the backward's bounds test on a packed position is dropped where its taps cross a block of rows, so a sequence's tail collects the next sequence's first output gradients (Dao-AILab/causal-conv1d PR #117: seq_idx read past the end at lengths 63–65, 127–129, 256/257).

    #117 guarded ``l_idx >= 0`` but not ``l_idx < seqlen`` where a kernel chunk ended past the
    sequence. Here the backward walks the packed rows in blocks of :attr:`BLOCK` and tests that an
    output row is still in the sequence it reads only inside a block
    (:meth:`~gradcheck_rnn.kernels.conv1d_cpu.Conv1dCPUKernel.backward_readers`): a sequence that
    ends within W−1 rows before a block boundary, followed by a non-empty one, gets a wrong dx
    and W_in gradient; a batch of one sequence hides it."""

    BLOCK = 4

    def backward_readers(self, stream: Conv1dStream) -> Tensor:
        readers = super().backward_readers(stream)
        s = torch.arange(stream.tokens, device=readers.device)[:, None]
        reader = s + torch.arange(stream.width, device=readers.device)
        unchecked = (reader // self.BLOCK != s // self.BLOCK) & (reader < stream.tokens)
        return torch.where(unchecked, reader, readers)
class DeltaProductBackwardDecaysEverySubStep:
    """deltaproduct: the backward's recomputation applies the token's decay on each of its n sub-steps, the forward on the first only (a backward recomputation that is not the forward's: fla-org/flash-linear-attention PR #1071; the gate expanded by repeat where fla's ``chunk_gated_delta_product_ref`` writes ``g_new[:, :, 0] = g``).

    The forward, y and hy, stay right; every gradient is taken at a state decayed α^n a token, and
    the decay's gradient is summed over the n sub-steps. n = 1 and a decay of 1 hide it."""

    def recomputed_sub_steps(self, layer: DeltaProductLayer) -> SubSteps:
        return self.sub_steps(layer, decayed=range(layer.householder))


class DeltaProductBackwardReadsFirstSubStep:
    """deltaproduct: the backward's recomputation reads each token's output after its first sub-step, the forward after the n-th (a backward recomputation that is not the forward's: fla-org/flash-linear-attention PR #1071; fla reads ``o[:, :, -1]``, after the last Householder step).

    The forward stays right; dy reaches the state before the token's other n − 1 writes, so dq,
    and through the state every other gradient, are wrong wherever n ≥ 2."""

    def recomputed_sub_steps(self, layer: DeltaProductLayer) -> SubSteps:
        return self.sub_steps(layer, read=0)


class DeltaProductStateGradDropsSecondHouseholder:
    """deltaproduct: the state gradient is carried back across a chunk without the second sub-step's coefficient I − β k kᵀ (a Householder factor dropped from the carried product: tile-ai/TileOPs #632's bug on one of a token's n steps; the multi-step state backward of fla-org/flash-linear-attention PR #526).

    Everything inside a chunk stays right; the gradient handed back across each chunk start (to
    the chunk before, and to h0) is the product with sub-step 1's factor taken as I. n = 1 hides
    it, and so does a key with small β."""

    def state_grad_coefficient(self, layer: SubStepChunks) -> Tensor:
        beta = layer.beta * (layer.sub_step() != 1)
        c, K = layer.k.shape[-2:]
        strict = torch.ones(c, c, dtype=torch.bool, device=beta.device).tril(-1)
        solve = beta[..., None] * layer.decay * layer.kk * strict + torch.eye(c, dtype=beta.dtype, device=beta.device)
        w = torch.linalg.solve_triangular(solve, (beta * layer.gamma)[..., None] * layer.k, upper=False,
                                          unitriangular=True)
        eye = torch.eye(K, dtype=beta.dtype, device=beta.device)
        return layer.gamma[..., -1, None, None] * eye - layer.keys_to_end.transpose(-1, -2) @ w
class RWKV7InitialStateGradLowRankDropped:
    """rwkv7: the initial state's gradient misses the low-rank part of the first step's transition, dh0 = diag(w_0) dS_0 without a_0 (b_0ᵀ dS_0) (fla-org/flash-linear-attention #351: chunk_rwkv7 and the recurrent form disagree only when an initial state is given).

    Every other gradient is right, the outputs too: the bug lives in the one term only a case with
    an initial state weighs, so a -z case (no h0) and a kernel tested from a zero state pass; a
    segmented run, whose inner segments hand their dh0 back, sees it in every parameter."""

    def state_grad_coefficient(self, layer: RWKV7Layer) -> Tensor:
        coefficient = super().state_grad_coefficient(layer).clone()
        coefficient[:, :, 0] = torch.diag_embed(layer.decay[:, :, 0])
        return coefficient


class RWKV7StateGradNoLowRank:
    """rwkv7: the backward carries the state gradient across each step by the decay alone, the transition diag(w) + b aᵀ taken as diag(w) (the class of tile-ai/TileOPs #632, the gated delta rule's carry without its projection, in RWKV-7's transition).

    The forward and every gradient of a step from its own state gradient stay right; what reaches
    earlier steps and h0 loses the in-context learning rate's removal, so it hides only where
    η κ̂ κ̂ᵀ is small against the decay (η near 0), or in a single step without an initial state."""

    def state_grad_coefficient(self, layer: RWKV7Layer) -> Tensor:
        return torch.diag_embed(layer.decay)


class RWKV7DecayGradExclusiveCumulative:
    """rwkv7: the decay gradient is formed from exp(−G) of the exclusive cumulative log decay and exp(G) of the inclusive one, each step's log decay clamped to [−5, 0) so that exp(−G) cannot overflow float32: the gradient of a step decaying faster than e^−5 is lost (fla-org/flash-linear-attention #77, RWKV-6's exclusive cumulative decay overflowing exp).

    RWKV-6's chunk form rescales the state by exp(−G) of the exclusive cumulative decay, which
    overflowed under strong decay in #77 (NaN gradients); bounding each step's log decay below at
    −5 (the range fla 0.6.0's ``safe_gate`` assumes, e^80 over 16 steps) keeps it finite, and is
    exact only while no step decays faster: exp(G_t − G_{t−1}) = w_t becomes e^−5 at a step with
    log w_t < −5, and its d log w (then the decay map's weights and x) is wrong by e^−5 / w_t.
    A decay near 1 hides it; strong decay, and the default regime's fastest channels, show it."""

    def decay_grad(self, layer: RWKV7Layer, d_states: Tensor) -> Tensor:
        inclusive = layer.log_decay.clamp(min=-5.0).cumsum(2)
        exclusive = inclusive - layer.log_decay.clamp(min=-5.0)
        return ((layer.states * torch.exp(-exclusive)[..., None]) * (d_states * torch.exp(inclusive)[..., None])).sum(-1)
class KDAStateGradFirstHeadDecay:
    """kda: the backward's state-gradient carry reads the per-key decay of the first head for every head, its gate loads missing the head offset (fla-org/flash-linear-attention #1115: ``gk`` loaded without ``(bos * H + i_h) * K`` in the context-parallel dh pre-process).

    In #1115 the forward was exact and the ranks whose state gradient arrives from a later rank
    got wrong dk, dv, dg, dβ. Here the carry of dS_end back across each chunk (to the chunk before,
    and to dh0) scales key row j by the first head's exp(G_C) instead of its own: the forward and
    everything inside a chunk stay right, and a case of one head, or whose heads share a decay, hides it."""

    def state_grad_coefficient(self, layer: KDALayer) -> Tensor:
        own = layer.gamma[..., -1, :]
        return super().state_grad_coefficient(layer) + torch.diag_embed(own[:, :1].expand_as(own) - own)


class KDANormBackwardFromRoundedOutput:
    """kda: the L2 norms' backward of q and k is evaluated from the forward's output rounded to bfloat16, not from the input (meta-pytorch/attention-gym PR #463, "Evaluate the KDA L2-norm backward from the exact input").

    dx = (dy − ŷ⟨dy, ŷ⟩) / n is the right formula, fed a ŷ with bfloat16's 3 significant digits: the
    bracket cancels where dy is nearly along ŷ, and the rounding of ŷ is left over. In #463 it hid
    under bfloat16's own rounding; in float32 and float64 it is an error of ~1e-3 of dq̂ and dk̂."""

    def norm_backward(self, unit: Tensor, norm: Tensor, grad: Tensor) -> Tensor:
        return super().norm_backward(unit.to(torch.bfloat16).to(unit.dtype), norm, grad)


class KDADecayGradWrongAxis:
    """kda: the reverse cumulative sum that turns the Γ terms into the per-key decay gradient runs over the key axis instead of the chunk's steps (a layout slip of a per-channel gate a careful reviewer could miss: (…, c, K) read as (…, K, c)).

    The decay gradient through Γ_r must reach every step i ≤ r of its key unit; summed over key
    units instead it lands on the wrong units and misses the earlier steps, so dg, and through it
    w_a1, w_a2, b_a, a_log and x, are wrong wherever a chunk holds more than one step."""

    def time_suffix_sums(self, t: Tensor) -> Tensor:
        return t.flip(-1).cumsum(-1).flip(-1)


class MLSTMChunkStatesWrongSize:
    """mlstm: the backward reads the chunk-boundary states as if the forward had stored one every 2c steps, not every c (NX-AI/mlstm_kernels PR #10: chunk_size_inter ≠ chunk_size_intra).

    The backward of chunk j (time j·c) reads stored state j·c / c' = j // 2: from the second
    chunk on it recomputes its outputs, and carries its state gradient, from states the forward
    never had there, so dq, dk, dv, the gates' and the state gradients are all wrong. A case of
    one chunk reads its end state at boundary 0, which only a head gradient on hy or cy weighs:
    without one (``-gy``) it hides."""

    def boundary_states(self, layer: MLSTMLayer) -> MLSTMStates:
        states = super().boundary_states(layer)
        read = torch.arange(states.m.shape[2], device=states.m.device) // 2
        return MLSTMStates(states.C[:, :, read], states.n[:, :, read], states.m[:, :, read])


class MLSTMNormalizerGradNotCarried:
    """mlstm: the normaliser's gradient dn is not carried across a chunk boundary, dC and dm are (a carry dropped in a hand-written chunkwise backward, the class of proger/accelerated-scan #15).

    n reaches a loss through h only where |nᵀq̃| wins the denominator over exp(−m), and through a
    head gradient on cy; inside a chunk the gradient is right, so a case of one chunk shows it
    only in dc0 (cy's dn never reaches n0) and, without a head gradient on cy, hides; under
    -strongdecay the dropped carry is e^−4 smaller each step and can hide too."""

    def carry_grad(self, starts: MLSTMStates, intra: MLSTMIntra, j: int, dC: Tensor, dn: Tensor,
                   dm: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        dC0, dn0, dm0 = super().carry_grad(starts, intra, j, dC, dn, dm)
        return dC0, torch.zeros_like(dn0), dm0


class MLSTMChunkStatesWrongSizeAtLargestChunk(MLSTMChunkStatesWrongSize):
    """mlstm: under its largest chunk size (8) alone, the backward reads the chunk-boundary states as if the forward had stored one every 2c steps (NX-AI/mlstm_kernels #10: wrong only with chunk_size > 128).

    :class:`MLSTMChunkStatesWrongSize` under one kernel configuration: chunks of 2 and 4 (the
    default) are exact, so a sweep that runs the kernel's default configuration never sees it;
    only a case drawn under ``-kc.chunk.8`` (docs/contracts.md, "Kernel configurations") does."""

    def boundary_states(self, layer: MLSTMLayer) -> MLSTMStates:
        if self.chunk == max(self.CHUNK_SIZES):
            return super().boundary_states(layer)
        return super(MLSTMChunkStatesWrongSize, self).boundary_states(layer)  # the kernel's own


class ScopedMutant:
    """A mutant judged only on the cases of the families its bug lives in: on any other case it is
    a skip with ``reason``, at no kernel run (a kernel bug of cuDNN's cells says nothing about an
    s6 case, where the target would only run the correct s6 kernel)."""

    def __init__(self, target: Any, modes: Sequence[str], reason: str) -> None:
        self.target, self.modes, self.reason = target, tuple(modes), reason

    def supports(self, config: RNNConfig) -> bool | str:
        if config.mode not in self.modes:
            return self.reason
        return self.target.supports(config)

    def supports_case(self, case: Case) -> bool | str:
        check = getattr(self.target, "supports_case", None)
        return True if check is None else check(case)

    def run(self, case: Case) -> Outputs:
        return self.target.run(case)

    def kernel_configs(self, config: RNNConfig) -> dict[str, tuple]:
        """The wrapped target's kernel configurations, where it declares any."""
        return Target(self.reason, self.target).kernel_configs(config)

    def supports_jvp(self, case: Case) -> bool | str:
        """The wrapped target's forward mode, where it has one."""
        return Target(self.reason, self.target).supports_jvp(case)

    def jvp(self, case: Case, tangents: Mapping[str, np.ndarray]) -> Outputs:
        return self.target.jvp(case, tangents)

    def supports_hvp(self, case: Case) -> bool | str:
        """The wrapped target's second order, where it has one."""
        return Target(self.reason, self.target).supports_hvp(case)

    def hvp(self, case: Case, tangents: Mapping[str, np.ndarray]) -> Outputs:
        return self.target.hvp(case, tangents)

    @property
    def repro_env(self) -> str:
        """The wrapped target's (a GPU mutant's ``TRITON_INTERPRET=1``)."""
        return getattr(self.target, "repro_env", "")


def family_mutant(family: str, bug: type, name: str, target_class: type = FusedCPUTarget) -> ScopedMutant:
    """``target_class``'s kernel of ``family`` with one bug (fused-cpu's, or fused-gpu's for a GPU
    mutant): judged on that family's cases, skipped (with the reason) on others. A bug of the
    packed path is a target of its own (a :class:`~gradcheck_rnn.targets.packed.PackedAdapter`)."""
    if issubclass(bug, PackedAdapter):
        return ScopedMutant(bug(), (family,), f"the bug is in the {family} packed path")
    kernel = target_class.family_kernel_classes()[family]
    target = target_class(name=name, family_kernels={family: type(bug.__name__, (bug, kernel), {})()})
    return ScopedMutant(target, (family,), f"the bug is in the {family} kernel")


def family_mutants(kernels_key: str, families: Sequence[str] | None = None) -> dict[str, tuple[str, type]]:
    """The bugs of the registered families' kernels (or of ``families``, tokens) that are crossed with ``kernels_key``'s
    ("fused-cpu", "fused-gpu"): name -> (family token, bug), as each family names them
    (``Family.mutants``: a family's mutants register with it). The default ``gradcheck-rnn
    mutants`` judges a family's on the cases of its home profile (``Family.home_profile``:
    configs/families.toml for s6, slstm and conv1d, configs/matrix.toml for the matrix families)
    and the cuDNN mutants on the ci profile's, in one run (gradcheck_rnn/workflows/detection.py);
    with ``-c PROFILE`` every mutant is judged on that profile's cases and skipped, at no kernel
    run, on a case of a family its bug is not in."""
    chosen = registered() if families is None else [family(token) for token in families]
    return {name: (f.token, import_object(bug, f"mutant {name!r}"))
            for f in chosen for name, (key, bug) in f.mutants.items() if key == kernels_key}


CUDNN_REASON = "the bug is in cuDNN's cells"

# name -> the bug (crossed with the CPU kernel when judged), or a target class of its own
MUTANTS: dict[str, type] = {
    "truncated-bptt": TruncatedBPTT,
    "bptt-skipped-when-frozen": BpttSkippedWhenFrozen,
    "bidir-dy-overwritten": BidirDyOverwritten,
    "gru-middle-w_ih": GruMiddleWih,
    "top-b_hh-zero": TopBhhZero,
    "lengths-ignored": LengthsIgnored,
    "relu-mask-wrong-tensor": ReluMaskWrongTensor,
    "hy-at-T-1": HyAtLastPaddedStep,
    "padded-dx-leak": PaddedDxLeak,
    "dc0-missing": Dc0Missing,
    "weight-grad-skips-first-step": WeightGradSkipsFirstStep,
    "gru-reset-before-bias": GruResetBeforeBias,
    "forget-gate-sign-flip": ForgetGateSignFlip,
    "tanh-derivative-of-input": TanhDerivativeOfInput,
    "cell-grad-not-carried": CellGradNotCarried,
    "hy-in-sorted-order": HyInSortedOrder,
    "nondeterministic-weight-grad": NondeterministicWeightGrad,
    "gradient-clipped-in-kernel": GradientClippedInKernel,
    "stale-dh0-buffer": StaleDh0Buffer,
    "projection-grad-transposed": ProjectionGradTransposed,
    "bias-assumed-present": BiasAssumedPresent,
    "zero-length-runs-one-step": ZeroLengthRunsOneStep,
    "zero-length-dh0-dropped": ZeroLengthDh0Dropped,
    "forget-gate-grad-dropped": ForgetGateGradDropped,
    "reverse-weight-grad-skips-step": ReverseWeightGradSkipsFirstStep,
}

# The bugs that apply to the fused GPU kernel, crossed with it when judged. They need CUDA or the
# Triton interpreter (~4 ms a launch on CPU), so they run by name (``-m gpu-…``; the tests and
# benchmarks/gpu.sh do) and the default ``gradcheck-rnn mutants`` stays CPU-only and fast.
GPU_MUTANTS: dict[str, type[KernelBug]] = {
    "gpu-forget-gate-grad-dropped": ForgetGateGradDropped,
    # MXNet #19323 on the GPU path: the packing ignores the lengths, the reverse direction starts at T−1
    "gpu-reverse-starts-in-padding": LengthsIgnored,
    "gpu-reverse-weight-grad-skips-step": ReverseWeightGradSkipsFirstStep,
}

# Bugs of a forward mode or a second order (the ``jvp`` and ``gradgrad`` checks, off in the ci
# profile whose checks the default ``gradcheck-rnn mutants`` runs under): run by name with the
# check on, ``gradcheck-rnn mutants -m jvp-recurrent-tangent-dropped --check jvp``.
PRODUCT_MUTANTS: dict[str, type] = {
    "jvp-recurrent-tangent-dropped": JvpRecurrentTangentDropped,
    "hvp-gate-second-order-dropped": HvpGateSecondOrderDropped,
    "hvp-silent-zeros": HvpSilentZeros,
}

# Mutants the checks are measured not to catch: resolvable by name (``mutant:<name>``), left out of
# the default ``gradcheck-rnn mutants`` so that its verdict stays about what must be caught.
BLIND_SPOTS: dict[str, type] = {
    "half-accumulated-in-half": HalfAccumulatedInHalf,
    "half-rounds-per-op": HalfRoundsPerOp,
}


# The built-in families' mutants (a family loaded later adds its own: family_mutants). Bugs of a
# family's GPU kernel are beside GPU_MUTANTS but apart from them: judged on their family's cases,
# where the cuDNN-cell GPU mutants are skips; run by name like them (``-m gpu-s6-…``).
FAMILY_MUTANTS = family_mutants("fused-cpu", BUILT_IN_MODES)
GPU_FAMILY_MUTANTS = family_mutants("fused-gpu", BUILT_IN_MODES)

# the names a command checks before importing torch are these, group by group
assert (tuple(MUTANTS), tuple(GPU_MUTANTS), tuple(BLIND_SPOTS), tuple(PRODUCT_MUTANTS)) == \
    (mutant_names.CUDNN, mutant_names.GPU, mutant_names.BLIND_SPOTS, mutant_names.PRODUCT), \
    "gradcheck_rnn/targets/mutant_names.py must list the mutants registered here"


def mutant_doc(name: str) -> str:
    """The first line of a CPU or GPU mutant's docstring: the bug and its source."""
    cls = (MUTANTS.get(name) or BLIND_SPOTS.get(name) or PRODUCT_MUTANTS.get(name) or GPU_MUTANTS.get(name)
           or {**family_mutants("fused-cpu"), **family_mutants("fused-gpu")}[name][1])
    return (cls.__doc__ or "").strip().splitlines()[0]


def home_profile(name: str) -> str:
    """The profile whose cases the default ``gradcheck-rnn mutants`` judges mutant ``name`` on:
    the home profile of the family its bug is in (the cuDNN cells' for theirs)."""
    scoped = family_mutants("fused-cpu").get(name) or family_mutants("fused-gpu").get(name)
    return family(scoped[0] if scoped else CUDNN_MODES[0]).home_profile


def mutant_target(name: str) -> Target:
    """The target ``mutant:<name>``, a CPU mutant or a GPU one (``gpu-…``, see
    :data:`GPU_MUTANTS`, :data:`GPU_FAMILY_MUTANTS`); UsageError, with the closest name, for another. A mutant
    is a skip on a case of a family its bug is not in (:class:`ScopedMutant`)."""
    from ..kernels.fused_gpu import FusedGPUKernel, FusedGPUTarget

    full = f"mutant:{name}"
    if name in GPU_MUTANTS:
        kernel = crossed(GPU_MUTANTS[name], FusedGPUKernel)
        return Target(full, ScopedMutant(FusedGPUTarget(kernel(), name=full), CUDNN_MODES, CUDNN_REASON))
    for target_class in (FusedGPUTarget, FusedCPUTarget):
        scoped = family_mutants(target_class.kernels_key).get(name)
        if scoped is not None:
            return Target(full, family_mutant(*scoped, full, target_class))
    check_mutant_name(name)
    bug = MUTANTS.get(name) or BLIND_SPOTS.get(name) or PRODUCT_MUTANTS[name]
    if not issubclass(bug, KernelBug):  # a wrapper around correct kernels (bptt-skipped-when-frozen)
        return Target(full, ScopedMutant(bug(), CUDNN_MODES, CUDNN_REASON))
    return Target(full, ScopedMutant(FusedCPUTarget(crossed(bug, FusedCPUKernel)(), name=full), CUDNN_MODES,
                                     CUDNN_REASON))
