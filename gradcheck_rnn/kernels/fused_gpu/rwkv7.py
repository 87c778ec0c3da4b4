"""The fused GPU kernel of the ``rwkv7`` family: the fused CPU kernel with its state hand-off in Triton.

:class:`RWKV7GPUKernel` is :class:`~gradcheck_rnn.kernels.rwkv7_cpu.RWKV7CPUKernel` (semantics,
stages, hand-written backward, mutant hooks) with its two sequential stages replaced by gdn's
(:mod:`.gdn`), one launch of :func:`.chunk_states.chunk_carry` each way and layer, a "chunk"
being one step here: ``carry_states``, S_t = Φ_t S_{t−1} + k_t v_tᵀ with Φ_t = diag(w_t) +
b_t a_tᵀ (K×K), and ``carry_state_grads``, dS_{t−1} = Φ_tᵀ dS_t + R_t backwards (Φᵀ read through
the strides of the CPU kernel's transposed view, so ``state_grad_coefficient`` stays a hook). As
on CPU the kernel is step by step (no chunkwise DPLR form): only the sequential hand-off is
Triton; everything batched over the steps stays torch ops.
"""

from __future__ import annotations

from ..rwkv7_cpu import RWKV7CPUKernel
from .gdn import GDNGPUKernel
from .hand_off import TritonHandOff


class RWKV7GPUKernel(TritonHandOff, RWKV7CPUKernel):
    """The fused rwkv7 kernel with its hand-offs in Triton; subclass and override one stage to mutate."""

    # the same K×K hand-off as gdn's across a chunk, across a step here (same shapes and contract)
    carry_states = GDNGPUKernel.carry_states
    carry_state_grads = GDNGPUKernel.carry_state_grads
