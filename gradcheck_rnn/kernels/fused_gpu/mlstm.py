"""The fused GPU kernel of the ``mlstm`` family: the fused CPU kernel with its chunk hand-offs in Triton.

:class:`MLSTMGPUKernel` is :class:`~gradcheck_rnn.kernels.mlstm_cpu.MLSTMCPUKernel` (semantics,
stages, hand-written backward, mutant hooks) with its two sequential stages replaced:

* ``carry_states``, the forward hand-off of (C, n, m): one launch of
  :func:`.chunk_states.stabilised_carry`, with n carried as one more column of C ([C | n] is
  K × (V + 1), both rescaled by the same exp(m − top));
* ``carry_state_grads``, the backward one. Through ``carry_grad``'s formulas, dC and dn cross a
  chunk scaled by its g (one value per head): one launch of :func:`.chunk_states.chunk_carry`
  with a diagonal coefficient over [dC | dn]. dm does not feed them back, so once every chunk's
  end gradient is known its own recurrence, dm_start = won·dm_end + (g(dC_end:C₀ + dn_end·n₀)
  − won(dC_end:C_end + dn_end·n_end) + the chunk's own term), is a scalar one: a second launch
  of the same kernel with K = V = 1.

``carry_grad`` is therefore not called here (its formulas are); ``boundary_states`` and the rest
stay hooks. Everything batched over the chunks stays torch ops (cuBLAS on CUDA).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..mlstm_cpu import Intra, MLSTMCPUKernel, States
from .hand_off import chunk_states, TritonHandOff


class MLSTMGPUKernel(TritonHandOff, MLSTMCPUKernel):
    """The fused mLSTM kernel with its hand-offs in Triton; subclass and override one stage to mutate."""

    def carry_states(self, start: States, own_max: Tensor, own_C: Tensor, own_n: Tensor, F_end: Tensor) -> States:
        """The chunk-boundary states (C, n, m) in one launch."""
        V = own_C.shape[-1]
        Cn, m = chunk_states().stabilised_carry(own_max, F_end, torch.cat([own_C, own_n[..., None]], -1),
                                                torch.cat([start.C[:, :, 0], start.n[:, :, 0, :, None]], -1),
                                                start.m[:, :, 0], read_shift=self.hand_off_read_shift(False))
        return States(Cn[..., :V], Cn[..., V], m)

    def carry_state_grads(self, starts: States, intra: Intra, through_start: tuple[Tensor, Tensor, Tensor],
                          d_final: tuple[Tensor, Tensor, Tensor]) -> tuple[tuple[Tensor, Tensor, Tensor],
                                                                         tuple[Tensor, Tensor, Tensor]]:
        """The end-state gradients of every chunk and the first start's, in two launches backwards."""
        kernels, shift = chunk_states(), self.hand_off_read_shift(True)
        (dC_start, dn_start, dm_start), (dC, dn, dm) = through_start, d_final
        K, V = dC.shape[-2:]
        g, won = intra.g[..., -1], intra.start_wins[..., -1]           # (B, NH, NC)
        grads = kernels.chunk_carry(g[..., None].expand(g.shape + (K,)), torch.cat([dC_start, dn_start[..., None]], -1),
                                    torch.cat([dC, dn[..., None]], -1), diagonal=True, reverse=True, read_shift=shift)
        dC_end, dn_end = grads[:, :, :-1, :, :V], grads[:, :, :-1, :, V]
        C0, n0, C1, n1 = starts.C[:, :, :-1], starts.n[:, :, :-1], starts.C[:, :, 1:], starts.n[:, :, 1:]
        own = (g * ((dC_end * C0).sum((-2, -1)) + (dn_end * n0).sum(-1))
               - torch.where(won, (dC_end * C1).sum((-2, -1)) + (dn_end * n1).sum(-1), 0.0) + dm_start)
        dms = kernels.chunk_carry(won.to(own.dtype)[..., None], own[..., None, None], dm[..., None, None],
                                  diagonal=True, reverse=True, read_shift=shift)[..., 0, 0]
        ends = (dC_end, dn_end, dms[:, :, :-1])
        return ends, (grads[:, :, -1, :, :V], grads[:, :, -1, :, V], dms[:, :, -1])
