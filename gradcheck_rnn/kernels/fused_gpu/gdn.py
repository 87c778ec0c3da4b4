"""The fused GPU kernel of the ``gdn`` family: the fused CPU kernel with its chunk hand-off in Triton.

:class:`GDNGPUKernel` is :class:`~gradcheck_rnn.kernels.gdn_cpu.GDNCPUKernel` (semantics, stages,
hand-written backward, mutant hooks) with its two sequential stages replaced, each one launch of
:func:`.chunk_states.chunk_carry` per layer: ``carry_states``, S₀ of chunk n+1 = Φ_n S₀ + W_n
with Φ_n the chunk's K×K transition, and ``carry_state_grads``, dS₀ = Φ_nᵀ dS_end + R_n backwards
(Φᵀ read through the strides of the CPU kernel's transposed view, so ``state_grad_coefficient``
stays a hook). The WY solves and everything batched over the chunks stay torch ops.
"""

from __future__ import annotations

from torch import Tensor

from ..gdn_cpu import GDNCPUKernel
from .hand_off import chunk_states, TritonHandOff


class GDNGPUKernel(TritonHandOff, GDNCPUKernel):
    """The fused gdn kernel with its hand-offs in Triton; subclass and override one stage to mutate."""

    def carry_states(self, transition: Tensor, written: Tensor, h0: Tensor) -> tuple[Tensor, Tensor]:
        """S₀ of every chunk (B, NH, NC, K, V) and the final state, in one launch."""
        states = chunk_states().chunk_carry(transition, written, h0, diagonal=False,
                                            read_shift=self.hand_off_read_shift(False))
        return states[:, :, :-1], states[:, :, -1]

    def carry_state_grads(self, coefficient_t: Tensor, through_out: Tensor, d_final: Tensor) -> tuple[Tensor, Tensor]:
        """dS_end of every chunk and dS₀ of the first, in one launch backwards."""
        grads = chunk_states().chunk_carry(coefficient_t, through_out, d_final, diagonal=False, reverse=True,
                                           read_shift=self.hand_off_read_shift(True))
        return grads[:, :, :-1], grads[:, :, -1]
