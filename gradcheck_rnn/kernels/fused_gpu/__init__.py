"""The project's own fused GPU RNN operator: the fused-cpu algorithm with Triton cells.

Same operator contract and the same algorithm as :mod:`gradcheck_rnn.kernels.fused_cpu`
(both are :class:`~gradcheck_rnn.kernels.algorithm.FusedKernel`): sequences packed by length so
padded steps cost nothing and the reverse direction starts at each sequence's own last step;
per layer and direction one input-projection GEMM for all steps, then per step the recurrent
GEMM and one pointwise pass; hand-written BPTT split into ``backward_data`` (per step one
pointwise pass and one ``dG·W_hh`` GEMM) and ``backward_weights`` (``dGᵀ·X``, ``dGᵀ·H_prev`` and
column sums over all steps at once, skipped when no weight needs a gradient). The GEMMs go
through torch (cuBLAS on CUDA); the pointwise passes are Triton kernels in :mod:`.cells` —
one launch per step, instead of fused-cpu's ~10 aten ops.

Precision: buffers are in the data's dtype (float64, float32, float16, bfloat16 on CUDA);
cuBLAS accumulates half-precision GEMMs in float32 and the Triton cells compute in float32
(float64 for float64 data). TF32 is off while the ``fused-gpu`` target runs, unless
``GRADCHECK_RNN_TF32=1`` (see :func:`~gradcheck_rnn.kernels.target.cuda_matmul_precision`).

Where it runs: on CUDA; or, with ``TRITON_INTERPRET=1`` set before the first import of
:mod:`.cells` (and :mod:`.scan`, :mod:`.chunk_states`, :mod:`.conv_taps`), on CPU tensors through Triton's interpreter, which is how the tests check it on
machines without a GPU. The interpreter is not the compiler (interpreted and compiled results
have differed, triton-lang/triton#5895 and #11153), so ``benchmarks/gpu.sh`` sweeps on a GPU
as well. Importing this module does not import triton; the first cell launch does.

Mutants subclass :class:`FusedGPUKernel` and override one hook, as for fused-cpu
(``GPU_MUTANTS`` in :mod:`gradcheck_rnn.targets.kernel_bugs`).

Families with a GPU kernel of their own run through it (``FusedTarget.family_kernels``): ``s6``
through :class:`.s6.S6GPUKernel`, fused-cpu's s6 kernel with its chunked scans as one Triton
launch each (:mod:`.scan`); ``slstm`` through :class:`.slstm.SLSTMGPUKernel`, fused-cpu's sLSTM
kernel with each step's pointwise passes as one Triton launch each way (:mod:`.slstm_cells`, which
import :mod:`.cells`); ``mlstm``, ``gla``, ``gdn`` and ``kda`` through :class:`.mlstm.MLSTMGPUKernel`,
:class:`.gla.GLAGPUKernel`, :class:`.gdn.GDNGPUKernel` and :class:`.kda.KDAGPUKernel`, fused-cpu's chunkwise kernels with the
hand-off of the state across chunks, forward and backward, as one Triton launch each
(:mod:`.chunk_states`; ``deltaproduct`` through :class:`.deltaproduct.DeltaProductGPUKernel`, gdn's
over its sub-steps; ``rwkv7`` through :class:`.rwkv7.RWKV7GPUKernel`, its step-by-step kernel with
the same hand-off across steps; the hook its mutants override: :class:`.hand_off.TritonHandOff`);
``conv1d`` through :class:`.conv1d.Conv1dGPUKernel`, fused-cpu's conv1d kernel with its convolution
as one Triton launch per layer (:mod:`.conv_taps`). Their mutants are ``GPU_FAMILY_MUTANTS``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any, Mapping

import torch
from torch import Tensor

from ...model.case import Case, Outputs, RNNConfig
from ..algorithm import FusedKernel, Step
from ..autograd import apply_kernel, kernel_function
from ..target import cuda_matmul_precision, FusedTarget

CELLS_MODULE = f"{__name__}.cells"
SCAN_MODULE = f"{__name__}.scan"  # the s6 kernel's chunked scan (.s6)
CHUNK_STATES_MODULE = f"{__name__}.chunk_states"  # the matrix families' chunk hand-off (.gla, .gdn, .mlstm)
CONV_TAPS_MODULE = f"{__name__}.conv_taps"  # the conv1d kernel's convolution (.conv1d)


def _cells() -> Any:
    """The Triton cells, imported on first use (importing triton takes about a second)."""
    from . import cells

    return cells


def interpreting() -> bool:
    """Whether ``TRITON_INTERPRET`` asks for Triton's CPU interpreter now."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "yes", "on")


def unavailable_reason() -> str | None:
    """Why the Triton kernel cannot run in this process, or None when it can."""
    if importlib.util.find_spec("triton") is None:
        return "fused-gpu needs triton: pip install 'gradcheck-rnn[gpu]'"
    cuda = torch.cuda.is_available()
    if not cuda and not interpreting():
        return ("fused-gpu needs a CUDA device (this machine has none), or TRITON_INTERPRET=1 to run its "
                "Triton kernels on CPU through the interpreter")
    for name in (CELLS_MODULE, SCAN_MODULE, CHUNK_STATES_MODULE, CONV_TAPS_MODULE):
        loaded = sys.modules.get(name)
        if loaded is not None and loaded.INTERPRETED != interpreting():
            # triton.jit chose interpreter or compiler at import; that choice holds for the process
            return (f"fused-gpu's Triton kernels were imported {'with' if loaded.INTERPRETED else 'without'} "
                    f"TRITON_INTERPRET=1 and cannot switch now; set it as wanted before the first run in a new "
                    f"process")
    return None


class FusedGPUKernel(FusedKernel):
    """The shared fused algorithm with its pointwise cells as Triton kernels (one launch per
    step and direction); subclass and override one method to mutate."""

    def relu_forward(self, step: Step) -> None:
        """h = relu(pre)."""
        _cells().activation_forward(step, relu=True)

    def tanh_forward(self, step: Step) -> None:
        """h = tanh(pre)."""
        _cells().activation_forward(step, relu=False)

    def lstm_forward(self, step: Step) -> None:
        """i, f, o = σ; g = tanh; c = f·c_prev + i·g; h = o·tanh(c) (tanh(c) saved in aux)."""
        _cells().lstm_forward(step)

    def gru_forward(self, step: Step) -> None:
        """r, z = σ(x-part + h-part); n = tanh(x-part + r·(W_hn h + b_hn)); h = n + z·(h_prev − n)."""
        _cells().gru_forward(step)

    def relu_backward(self, step: Step) -> None:
        """dpre = dh · [h > 0]."""
        _cells().activation_backward(step, relu=True)

    def tanh_backward(self, step: Step) -> None:
        """dpre = dh · (1 − h²)."""
        _cells().activation_backward(step, relu=False)

    def lstm_backward(self, step: Step) -> None:
        """dc += dh·o·(1 − tanh²c); d[i, f, g, o] = [dc·g, dc·c_prev, dc·i, dh·tanh c] times each
        activation's derivative; dc_prev = dc·f."""
        _cells().lstm_backward(step)

    def gru_backward(self, step: Step) -> None:
        """dn = dh·(1−z)·(1−n²); dz = dh·(h_prev − n)·z(1−z); dr = dn·(W_hn h + b_hn)·r(1−r);
        the h-part of n gets dn·r; h_prev gets dh·z directly. dgates = [n_x | r | z | n_h]."""
        _cells().gru_backward(step)


# The autograd entry over flat cudnn-style parameters, with FusedGPUKernel as the default kernel.
FusedGPUFunction = kernel_function(FusedGPUKernel, "FusedGPUFunction")


def fused_rnn_gpu(x: Tensor, seq_lengths: Any, h0: Tensor | None, c0: Tensor | None,
                  params: Mapping[str, Tensor], mode: str, num_layers: int, bidirectional: bool,
                  kernel: FusedKernel | None = None) -> tuple[Tensor, Tensor, Tensor | None]:
    """Differentiable fused RNN with Triton cells over a parameter dict (tensors on the GPU,
    or on CPU under ``TRITON_INTERPRET=1``)."""
    return apply_kernel(x, seq_lengths, h0, c0, params, mode, num_layers, bidirectional,
                        kernel if kernel is not None else FusedGPUKernel())


class FusedGPUTarget(FusedTarget):
    """The ``fused-gpu`` target: runs a case through :class:`FusedGPUKernel` (or a subclass) on
    CUDA, or on CPU tensors under ``TRITON_INTERPRET=1``, with TF32 off unless asked for. A family
    with a GPU kernel of its own runs through that one (``family_kernels``; by default each
    family's ``kernels["fused-gpu"]``: :mod:`.s6`, :mod:`.slstm`, :mod:`.mlstm`, :mod:`.gla`,
    :mod:`.gdn`, :mod:`.rwkv7`, :mod:`.kda`, :mod:`.deltaproduct`, :mod:`.conv1d`)."""

    dtypes = {"f64": torch.float64, "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
    kernels_key = "fused-gpu"

    def __init__(self, kernel: FusedKernel | None = None, name: str = "fused-gpu",
                 family_kernels: Mapping[str, Any] | None = None) -> None:
        super().__init__(kernel if kernel is not None else FusedGPUKernel(), name, family_kernels=family_kernels)

    def supports(self, config: RNNConfig) -> bool | str:
        """True where the kernel can run this config; else the reason it is skipped."""
        reason = unavailable_reason()
        if reason is not None:
            return reason.replace("fused-gpu", self.name, 1)
        family = self.family_support(config)
        if family is not True:
            return family
        if interpreting() and config.dtype not in ("f64", "f32"):
            return (f"{self.name} under TRITON_INTERPRET=1 is checked in f64 and f32 only: the interpreter's "
                    f"{config.dtype} arithmetic is numpy's, not the GPU's")
        return True

    @property
    def repro_env(self) -> str:
        """``TRITON_INTERPRET=1`` while the interpreter runs the kernels: a repro line without it would
        skip the case on a machine with no CUDA device, or run the compiled kernels on one."""
        return "TRITON_INTERPRET=1" if interpreting() else ""

    def run(self, case: Case) -> Outputs:
        """The shared fused run on ``cuda`` (or ``cpu`` when interpreting), TF32 per the flag."""
        self.device = "cpu" if interpreting() else "cuda"
        with cuda_matmul_precision():
            return super().run(case)
