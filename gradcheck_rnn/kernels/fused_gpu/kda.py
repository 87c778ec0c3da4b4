"""The fused GPU kernel of the ``kda`` family: the fused CPU kernel with its chunk hand-off in Triton.

:class:`KDAGPUKernel` is :class:`~gradcheck_rnn.kernels.kda_cpu.KDACPUKernel` (semantics, stages,
hand-written backward, mutant hooks) with gdn's two Triton hand-offs (:class:`.gdn.GDNGPUKernel`):
the chunk's transition Φ = diag(Γ_C) − Ekᵀw is a full K×K matrix as gdn's, so ``carry_states``
and ``carry_state_grads`` are the same launches of :func:`.chunk_states.chunk_carry`. The
per-key decayed Gram matrices, the WY solves and everything batched over the chunks stay torch ops.
"""

from __future__ import annotations

from ..kda_cpu import KDACPUKernel
from .gdn import GDNGPUKernel


class KDAGPUKernel(GDNGPUKernel, KDACPUKernel):
    """The fused kda kernel with its hand-offs in Triton (gdn's, first in the MRO); subclass and
    override one stage to mutate."""
