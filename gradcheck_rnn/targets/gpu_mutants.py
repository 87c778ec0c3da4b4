"""Mutants of the fused GPU kernel: :class:`~gradcheck_rnn.kernels.fused_gpu.FusedGPUKernel`
with one gradient bug injected each, a few lines over one hook, as for the CPU mutants.

They are listed apart from :data:`~gradcheck_rnn.targets.mutants.MUTANTS` because they need
CUDA or the Triton interpreter (~4 ms a launch on CPU): the default ``gradcheck-rnn mutants``
run stays CPU-only and fast, and these run by name, e.g. ``TRITON_INTERPRET=1 gradcheck-rnn
mutants -c interp -m gpu-forget-gate-grad-dropped`` (the tests do) or on a GPU through
``benchmarks/gpu.sh``. Importing this module does not import triton.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import torch

from ..kernels.common import Packing, Step, Unit
from ..kernels.fused_gpu import FusedGPUKernel


class ForgetGateGradDropped(FusedGPUKernel):
    """LSTM backward drops the forget-gate gradient dc·c_prev·f(1−f): a hand-fused cell that forgets c_prev's term."""

    def lstm_backward(self, step: Step) -> None:
        super().lstm_backward(step)
        H = step.unit.hidden_size
        step.dgates[:, H:2 * H] = 0


class ReverseStartsInPadding(FusedGPUKernel):
    """Bidirectional var-len: the reverse direction starts at T−1, in the padding (MXNet #19323, on the GPU path).

    The packing ignores the lengths, so every sequence runs all T steps in both directions:
    padded inputs reach the reverse direction's outputs, hy and the gradients.
    """

    def make_packing(self, seq_lengths: Sequence[int], max_len: int, device: torch.device) -> Packing:
        return Packing([max_len] * len(seq_lengths), max_len, device)


class ReverseWeightGradSkipsFirstStep(FusedGPUKernel):
    """The reverse direction's weight-gradient accumulation skips the first step it walks (t = T−1): dW, db lose it."""

    def weight_grads(self, unit: Unit, packing: Packing, grads: Mapping[str, torch.Tensor]) -> None:
        if unit.reverse:
            unit.dgates[packing.packed_rows(packing.steps - 1)] = 0
        super().weight_grads(unit, packing, grads)


GPU_MUTANTS: dict[str, type[FusedGPUKernel]] = {
    "gpu-forget-gate-grad-dropped": ForgetGateGradDropped,
    "gpu-reverse-starts-in-padding": ReverseStartsInPadding,
    "gpu-reverse-weight-grad-skips-step": ReverseWeightGradSkipsFirstStep,
}
