"""The fused GPU kernel of the ``gla`` family: the fused CPU kernel with its chunk hand-off in Triton.

:class:`GLAGPUKernel` is :class:`~gradcheck_rnn.kernels.gla_cpu.GLACPUKernel` (semantics, stages,
hand-written backward, mutant hooks) with one stage replaced: ``hand_off``, the state carried
across the chunks (forward) and its gradient carried back (backward), X_out = exp(Λ_last) ⊙ X_in
+ W per chunk, is one launch of :func:`.chunk_states.chunk_carry` each way and layer, with the
diagonal decay read per key unit (no K×K matrix is built). Everything batched over the chunks
stays torch ops (cuBLAS on CUDA).
"""

from __future__ import annotations

from torch import Tensor

from ..gla_cpu import GLACPUKernel
from .hand_off import chunk_states, TritonHandOff


class GLAGPUKernel(TritonHandOff, GLACPUKernel):
    """The fused gla kernel with its hand-off in Triton; subclass and override one stage to mutate."""

    def hand_off(self, decay: Tensor, written: Tensor, start: Tensor, reverse: bool = False) -> Tensor:
        """:meth:`GLACPUKernel.hand_off <gradcheck_rnn.kernels.gla_cpu.GLACPUKernel.hand_off>` in one launch."""
        return chunk_states().chunk_carry(decay, written, start, diagonal=True, reverse=reverse,
                                          read_shift=self.hand_off_read_shift(reverse))
