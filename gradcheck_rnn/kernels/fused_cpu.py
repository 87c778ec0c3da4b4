"""The project's own fused CPU RNN operator: packed forward and hand-written BPTT.

Semantics are exactly torch.nn.RNN/LSTM/GRU (LSTM gates i, f, g, o; GRU r, z, n with the
reset gate applied after the hidden bias), time-major, 1..N layers, uni- or bidirectional,
per-sequence lengths in any order. Nothing here goes through autograd: the forward saves
what the backward needs, and the backward is written out by hand, split like cuDNN into
:meth:`FusedCPUKernel.backward_data` (BPTT: dx, dh0, dc0 and the gate gradients of every
step) and :meth:`FusedCPUKernel.backward_weights` (dW and db as a few large GEMMs).

Layout (the cuDNN / PackedSequence tricks)
------------------------------------------
* Sequences are sorted by length, longest first, and packed time-major: step t holds the
  active prefix of ``bs_t`` sequences ("slots"), so padded steps cost nothing at all. The
  packing is shared by both directions: the reverse direction walks t from its last step
  down, and a sequence joins the active prefix at its own last step starting from h0 — the
  reverse direction never sees padding.
* Hidden and cell states (and their gradients) live in "state buffers" of ``B + N + B`` rows:
  the forward direction's initial states, the N packed steps, the reverse direction's initial
  states. The state feeding step t is then one contiguous row range (two only at the steps
  where the reverse direction admits new sequences), so the per-step GEMM reads it in place,
  and the BPTT hand-off adds dL/dh_prev straight into those rows — the rows of h0 collect dh0.
* Forward, per layer and direction: one GEMM for the input projection of all steps
  (``X @ W_ihᵀ + b``), then per step only the recurrent GEMM and one pointwise pass over the
  gates, written in place into the saved gate buffer (activations are what the backward needs).
  The output buffer of a bidirectional layer holds [fwd | bwd] side by side, so it is the
  next layer's packed input without a copy.
* Backward, per layer from the top: per step the pointwise gate backward and one GEMM
  (``dG_t @ W_hh``) into the previous state's rows; then the layer's dx is one GEMM per
  direction (skipped for layer 0 when x needs no gradient); ``backward_weights`` is
  ``dGᵀ @ X``, ``dGᵀ @ H_prev`` and column sums, over all steps at once, and is skipped
  entirely when no parameter needs a gradient.

Route and measurements
----------------------
Plain torch tensor ops under ``torch.no_grad`` (GEMMs through :mod:`.gemm`: oneDNN for large
float32 products, MKL otherwise; in-place pointwise ops into preallocated buffers; the activation derivatives are autograd's own fused
``aten::{sigmoid,tanh,threshold}_backward`` ops). ``benchmarks/cpu_kernel.py`` measures it
against torch.nn (T=64, B=32, I=H=256, float32, forward + backward; benchmarks/RESULTS.md has the
tables):

* variable lengths: faster than torch.nn in every mode, layer count and direction — no work on
  padded steps, no per-step autograd;
* fixed length, GRU and tanh RNN: about as fast (torch runs its own per-step aten cells there);
* fixed length, LSTM: slower. torch sends a dense LSTM to oneDNN's fused RNN primitive: JIT GEMMs on packed weights and one fused
  pointwise kernel per step. Our GEMMs alone (four T·B-row GEMMs plus 2·T per-step ones), on
  oneDNN too, take about as long as that whole primitive, and each of our gate passes is about
  ten aten ops with the Python dispatch.

Tried and dropped: running independent lanes (the two directions, or halves of the batch)
in Python threads with single-threaded ops — GIL hand-offs made it slower, not faster;
precomputing the gate-derivative factors of all steps at once (estimated to cost as much memory
traffic as the per-step ops it saves; not built). A truly fused gate pass needs a
compiler at run time (TorchScript's CPU fuser needs LLVM, which the torch wheels lack;
inductor and C++ extensions compile on first use) or a new dependency (numba, whose
transcendentals do not vectorise without SVML).

Half precision
--------------
For f16 and bf16 cases every buffer (gates, states, their gradients) is in that dtype, and
torch's CPU kernels supply the float32 accumulation: its GEMMs (``addmm``/``mm``) on half inputs
accumulate in float32 and round once, its reductions (``sum``) accumulate in float32, and its
pointwise ops compute each element in float32 and round the result. So the rounding is per
stored value, never per term of a sum. Their tolerances are calibrated in
:mod:`gradcheck_rnn.model.tolerances`.

First-call cost: none beyond importing torch — no compilation, no warm-up state; the first call
of a case costs about what later ones do (benchmarks/RESULTS.md, "Costs the code is built around").

Where the code lives
--------------------
The layout, the algorithm and its hooks are shared with the Triton kernel and live in
:mod:`gradcheck_rnn.kernels.algorithm`; this module holds the CPU pointwise cells (aten ops),
the autograd entry with this kernel as its default, and the ``fused-cpu`` target.

Hooks for mutants
-----------------
Every stage is a small method of :class:`~gradcheck_rnn.kernels.algorithm.FusedKernel` that a
subclass overrides to inject one bug: the packing (``make_packing``), the walk order
(``step_order``), the recurrent GEMM (``recurrent_projection``), the pointwise cells
(``relu_forward``/``tanh_forward``/``lstm_forward``/``gru_forward`` and their ``*_backward``),
the BPTT hand-off (``handoff``), the final-state gather (``final_state``), the initial-state
gradients (``initial_state_grads``), the layer input gradient (``input_grad``) and the weight
GEMMs (``weight_grads``); for the API surface, the biases of a unit (``unit_biases``: zeros
without bias) and the LSTM projection forward, backward and weight gradient (``project``,
``project_backward``, ``projection_grad``).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Mapping, Sequence

import torch
from torch import Tensor

from ..families import CUDNN_MODES
from ..model.case import RNNConfig
from .packing import add_rows, blocks, HALF_DTYPES, Segment
from .algorithm import FusedKernel, Step
from .autograd import apply_kernel, kernel_function
from .tangent_cpu import TangentKernel
from .target import FusedTarget

# The activations' derivatives from their outputs, each one fused aten op (autograd's own):
_tanh_backward = torch.ops.aten.tanh_backward.grad_input  # grad·(1 − y²)
_sigmoid_backward = torch.ops.aten.sigmoid_backward.grad_input  # grad·y·(1 − y)
_threshold_backward = torch.ops.aten.threshold_backward.grad_input  # grad·[y > 0]

# The Step fields a float32 cell pass reads (upcast, exactly) and those it may write (rounded back
# to the half dtype once, at the end of the pass).
_STEP_TENSORS = ("gates", "h_prev", "c_prev", "h", "c", "aux", "dgates", "dh", "dc", "scratch")
_STEP_WRITES = ("gates", "h", "c", "aux", "dgates", "dc")


def float32_cell(cell: Callable[[Any, Step], None]) -> Callable[[Any, Step], None]:
    """Run a multi-op cell pass on a half step in float32 and round each stored value once.

    Why: the LSTM and GRU passes are chains of aten ops, and on half buffers every op rounds its
    result to the half dtype — ``c = f·c_prev + i·g`` was rounded twice, the LSTM backward's
    ``dc`` three times. A careful half kernel (cuDNN's half math: half storage, float32
    arithmetic) keeps the intermediates in float32 registers and rounds only what it stores.
    The error budget (``python benchmarks/half_error_budget.py --cases 60 [--kernel per-op]``,
    docs/half-precision.md) measured the per-op chains at up to 145 (forward) and 274 (backward)
    half ulps of a stored f16 LSTM value where its terms cancel, and the two-rounding hand-off at
    up to 25; this kernel stays at 0.5 ulp in every stage. The per-op variant lives on as
    ``mutant:half-rounds-per-op``.

    The gradients a cell hands to the previous state directly (``dh_direct``, ``dc_prev``)
    stay float32: :meth:`FusedCPUKernel.handoff` adds them in float32 and rounds once.
    """

    @functools.wraps(cell)
    def run(self: Any, step: Step) -> None:
        if step.gates.dtype not in HALF_DTYPES:
            cell(self, step)
            return
        wide = dataclasses.replace(step, **{name: None if getattr(step, name) is None else getattr(step, name).float()
                                            for name in _STEP_TENSORS})
        cell(self, wide)
        for name in _STEP_WRITES:
            stored = getattr(step, name)
            if stored is not None:
                stored.copy_(getattr(wide, name))
        step.dh_direct, step.dc_prev = wide.dh_direct, wide.dc_prev

    return run


class FusedCPUKernel(FusedKernel):
    """The shared fused algorithm with its pointwise cells as aten ops (a few per cell, in
    place into the preallocated buffers); subclass and override one method to mutate."""

    def relu_forward(self, step: Step) -> None:
        """h = relu(pre)."""
        torch.clamp(step.gates, min=0, out=step.h)

    def tanh_forward(self, step: Step) -> None:
        """h = tanh(pre)."""
        torch.tanh(step.gates, out=step.h)

    @float32_cell
    def lstm_forward(self, step: Step) -> None:
        """i, f, o = σ; g = tanh; c = f·c_prev + i·g; h = o·tanh(c) (tanh(c) saved in aux)."""
        H = step.unit.hidden_size
        i, f, g, o = blocks(step.gates, H)
        step.gates[:, :2 * H].sigmoid_()
        g.tanh_()
        o.sigmoid_()
        torch.mul(f, step.c_prev, out=step.c)
        step.c.addcmul_(i, g)
        torch.tanh(step.c, out=step.aux)
        torch.mul(o, step.aux, out=step.h)

    @float32_cell
    def gru_forward(self, step: Step) -> None:
        """r, z = σ(x-part + h-part); n = tanh(x-part + r·(W_hn h + b_hn)); h = n + z·(h_prev − n)."""
        H = step.unit.hidden_size
        rz, n = step.gates.split([2 * H, H], 1)
        hidden_rz, hidden_n = step.aux.split([2 * H, H], 1)
        r, z, _ = blocks(step.gates, H)
        rz.add_(hidden_rz).sigmoid_()
        n.addcmul_(r, hidden_n).tanh_()
        torch.lerp(n, step.h_prev, z, out=step.h)

    def relu_backward(self, step: Step) -> None:
        """dpre = dh · [h > 0]."""
        _threshold_backward(step.dh, step.h, 0, grad_input=step.dgates)

    def tanh_backward(self, step: Step) -> None:
        """dpre = dh · (1 − h²)."""
        _tanh_backward(step.dh, step.h, grad_input=step.dgates)

    @float32_cell
    def lstm_backward(self, step: Step) -> None:
        """dc += dh·o·(1 − tanh²c); d[i, f, g, o] = [dc·g, dc·c_prev, dc·i, dh·tanh c] times each
        activation's derivative; dc_prev = dc·f."""
        H = step.unit.hidden_size
        a, da, tanh_c, dc, dh = step.gates, step.dgates, step.aux, step.dc, step.dh
        i, f, g, o = blocks(a, H)
        di, df, dg, do = blocks(da, H)
        tmp, dc_prev = blocks(step.scratch, H)
        _tanh_backward(o, tanh_c, grad_input=tmp)
        dc.addcmul_(tmp, dh)
        torch.mul(dc, g, out=di)
        torch.mul(dc, step.c_prev, out=df)
        torch.mul(dc, i, out=dg)
        torch.mul(dh, tanh_c, out=do)
        _sigmoid_backward(da[:, :2 * H], a[:, :2 * H], grad_input=da[:, :2 * H])
        _tanh_backward(dg, g, grad_input=dg)
        _sigmoid_backward(do, o, grad_input=do)
        step.dc_prev = torch.mul(dc, f, out=dc_prev)

    @float32_cell
    def gru_backward(self, step: Step) -> None:
        """dn = dh·(1−z)·(1−n²); dz = dh·(h_prev − n)·z(1−z); dr = dn·(W_hn h + b_hn)·r(1−r);
        the h-part of n gets dn·r; h_prev gets dh·z directly. dgates = [n_x | r | z | n_h]."""
        H = step.unit.hidden_size
        a, da, dh = step.gates, step.dgates, step.dh
        r, z, n = blocks(a, H)
        dn, dr, dz, dn_h = blocks(da, H)
        direct, _ = blocks(step.scratch, H)
        torch.mul(dh, z, out=direct)
        torch.sub(dh, direct, out=dn)
        _tanh_backward(dn, n, grad_input=dn)
        torch.sub(step.h_prev, n, out=dz)
        dz.mul_(dh)
        torch.mul(dn, step.aux[:, 2 * H:], out=dr)
        _sigmoid_backward(da[:, H:3 * H], a[:, :2 * H], grad_input=da[:, H:3 * H])
        torch.mul(dn, r, out=dn_h)
        step.dh_direct = direct

    def handoff(self, step: Step, segments: Sequence[Segment]) -> None:
        """In half precision, dL/dh_prev += dG_t·W_hh + the cell's direct term, summed in float32
        and rounded once into the state-gradient rows (the shared hand-off rounds the direct term's
        sum and the GEMM's separately); float32 and float64 take the shared hand-off unchanged."""
        if step.dgates.dtype not in HALF_DTYPES:
            super().handoff(step, segments)
            return
        unit = step.unit
        a, b = unit.spec.recurrent
        H = unit.hidden_size
        dgates = step.dgates if b - a == unit.spec.grad_width else step.dgates[:, a * H:b * H]
        d_prev = torch.mm(dgates.float(), unit.w_hh.float())  # exact products, float32 sums
        if step.dh_direct is not None:
            d_prev.add_(step.dh_direct)
        add_rows(unit.dh, segments, d_prev)  # half += float32: computed in float32, rounded once
        if step.dc_prev is not None:
            add_rows(unit.dc, segments, step.dc_prev)


# The autograd entry over flat cudnn-style parameters, with FusedCPUKernel as the default kernel.
FusedRNNFunction = kernel_function(FusedCPUKernel, "FusedRNNFunction")


def fused_rnn(x: Tensor, seq_lengths: Any, h0: Tensor | None, c0: Tensor | None, params: Mapping[str, Tensor],
              mode: str, num_layers: int, bidirectional: bool,
              kernel: FusedKernel | None = None) -> tuple[Tensor, Tensor, Tensor | None]:
    """Differentiable fused RNN over a parameter dict (keys ``l{layer}.{fwd|bwd}.{kind}``)."""
    return apply_kernel(x, seq_lengths, h0, c0, params, mode, num_layers, bidirectional,
                        kernel if kernel is not None else FusedCPUKernel())


class FusedCPUTarget(FusedTarget):
    """The ``fused-cpu`` target: runs a case through :class:`FusedCPUKernel` (or a subclass),
    computing only the requested gradients, the way a framework's fused op would. A family with
    its own fused kernel (its ``kernels["fused-cpu"]``: s6's :mod:`.s6_cpu`, slstm's
    :mod:`.slstm_cpu`, the matrix families' and conv1d's) runs through that one (``family_kernels``). Forward mode (``jvp``, the cuDNN cells in f64 and f32) is the tangent
    recurrence of :mod:`.tangent_cpu` (``tangent``)."""

    def __init__(self, kernel: FusedKernel | None = None, name: str = "fused-cpu",
                 family_kernels: Mapping[str, Any] | None = None, tangent: TangentKernel | None = None) -> None:
        super().__init__(kernel if kernel is not None else FusedCPUKernel(), name, "cpu", family_kernels)
        self.tangent = tangent if tangent is not None else TangentKernel()

    jvp_dtypes = ("f64", "f32")
    kernels_key = "fused-cpu"

    def supports_jvp(self, case: Any) -> bool | str:
        """The cuDNN cells in f64 and f32; the other families' kernels have no forward mode."""
        config = case.config
        if config.mode not in CUDNN_MODES:
            return f"{self.name} offers forward mode for cuDNN's cells only, not {config.mode}"
        if config.dtype not in self.jvp_dtypes:
            return f"{self.name}'s forward mode computes in {' and '.join(self.jvp_dtypes)} only, not {config.dtype}"
        return True

    def supports_hvp(self, case: Any) -> bool | str:
        """A loud refusal of second order: the backward is written by hand, not itself differentiable."""
        return (f"{self.name}'s backward is written by hand and is not itself differentiable: it offers no "
                f"second order (double backward)")

    def jvp(self, case: Any, tangents: Mapping[str, Any]) -> Any:
        """The output tangents along ``tangents`` (:mod:`.tangent_cpu`), in the case dtype."""
        return self.tangent.run(case, tangents, self.dtypes[case.config.dtype])

    dtypes = {"f64": torch.float64, "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}

    def supports(self, config: RNNConfig) -> bool | str:
        """Every case dtype for cuDNN's cells: f64, f32, and f16/bf16 (half buffers, float32
        accumulation); f64 and f32 for the other families that have a kernel here."""
        if config.dtype not in self.dtypes:
            return f"{self.name} computes in {', '.join(self.dtypes)} only, not {config.dtype}"
        return self.family_support(config)
