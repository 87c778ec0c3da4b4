"""The fused GPU kernel of the ``deltaproduct`` family: the fused CPU kernel with gdn's chunk hand-off in Triton.

:class:`DeltaProductGPUKernel` is :class:`~gradcheck_rnn.kernels.deltaproduct_cpu.DeltaProductCPUKernel`
(the sub-step sequence, gdn's chunkwise recurrence over it, the recomputing backward, the mutant
hooks) with gdn's two sequential stages taken from :class:`.gdn.GDNGPUKernel`: the state carried
across the chunks of sub-steps, and its gradient carried back, one launch of
:func:`.chunk_states.chunk_carry` each per layer. Everything batched over the chunks stays torch ops.
"""

from __future__ import annotations

from ..deltaproduct_cpu import DeltaProductCPUKernel
from .gdn import GDNGPUKernel


class DeltaProductGPUKernel(GDNGPUKernel, DeltaProductCPUKernel):
    """The fused deltaproduct kernel with its hand-offs in Triton; subclass and override one stage to mutate."""
