"""The fused GPU kernel of the ``s6`` family: the fused CPU kernel with its scans in Triton.

:class:`S6GPUKernel` is :class:`~gradcheck_rnn.kernels.s6_cpu.S6CPUKernel` (semantics, stages,
hand-written backward, mutant hooks) with one stage replaced: ``scan``, the forward recurrence and
the backward's reverse scan, is one launch of :func:`.scan.chunked_scan` per scan and layer, with
the same chunked structure (in-chunk scan, carry across chunk boundaries by the kernel's
``carry_rule``). The GEMMs and the pointwise rest stay torch ops (cuBLAS on CUDA).

Runs on CUDA tensors, or on CPU tensors under ``TRITON_INTERPRET=1``; importing this module does
not import triton, the first scan does.
"""

from __future__ import annotations

from torch import Tensor

from ..s6_cpu import S6CPUKernel


class S6GPUKernel(S6CPUKernel):
    """The fused s6 kernel with Triton scans; subclass and override one stage to mutate."""

    def scan(self, a: Tensor, b: Tensor, h0: Tensor, reverse: bool = False) -> Tensor:
        """h_t = a_t ⊙ h_{t−1} + b_t for t = 0..T−1 from h0, chunked, in one Triton launch."""
        from .scan import chunked_scan

        return chunked_scan(a, b, h0, self.chunk, self.carry_rule(reverse))
