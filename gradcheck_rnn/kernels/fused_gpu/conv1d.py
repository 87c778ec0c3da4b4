"""The fused GPU kernel of the ``conv1d`` family: the fused CPU kernel with its convolution in Triton.

:class:`Conv1dGPUKernel` is :class:`~gradcheck_rnn.kernels.conv1d_cpu.Conv1dCPUKernel` (semantics,
the packed batch and its index tables, hand-written backward, mutant hooks) with one stage
replaced: ``convolve``, the forward's gather of every stream row's W taps, the weighted sum, the
bias and SiLU, is one launch of :func:`.conv_taps.convolve` per layer. The GEMMs and the backward
stay torch ops (cuBLAS on CUDA).

Runs on CUDA tensors, or on CPU tensors under ``TRITON_INTERPRET=1``; importing this module does
not import triton, the first convolution does.
"""

from __future__ import annotations

from torch import Tensor

from ..conv1d_cpu import Conv1dCPUKernel


class Conv1dGPUKernel(Conv1dCPUKernel):
    """The fused conv1d kernel with its convolution in Triton; subclass and override one stage to mutate."""

    def convolve(self, buffer: Tensor, taps: Tensor, weight: Tensor, bias: Tensor | None,
                 silu: bool) -> tuple[Tensor, Tensor]:
        """:meth:`Conv1dCPUKernel.convolve <gradcheck_rnn.kernels.conv1d_cpu.Conv1dCPUKernel.convolve>` in one launch."""
        from .conv_taps import convolve

        return convolve(buffer, taps, weight, bias, silu)
