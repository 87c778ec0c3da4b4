"""The project's own fused CPU kernel of the ``deltaproduct`` family: gdn's chunkwise delta rule over the sub-steps.

Semantics are :mod:`gradcheck_rnn.families.deltaproduct`. A token with n Householder steps is n
sub-steps of the gated delta rule: the sequence of T tokens is a sequence of n·T sub-steps
(t, j), sub-step j of token t at position t·n + j, with the key k̂_{t,j}, value v_{t,j} and β_{t,j}
of its own, the token's decay on its first sub-step (log α = 0 on the others) and its query on
its last (q = 0 on the others, whose outputs are dropped). That is how flash-linear-attention
0.6.0 runs it (``chunk_gated_delta_product_ref``: ``g_new[:, :, 0] = g``, ``q_new[:, :, -1] = q``,
the output ``o[:, :, -1]``), and how this kernel does: the projections are
:meth:`~gradcheck_rnn.kernels.gdn_cpu.GDNCPUKernel.project` with n-fold key, value and β maps, the
recurrence is gdn's :meth:`~gradcheck_rnn.kernels.gdn_cpu.GDNCPUKernel.chunk_forward` over the
sub-steps (chunks of ``chunk`` sub-steps, so a chunk may end inside a token), and its
hand-written backward is gdn's :meth:`~gradcheck_rnn.kernels.gdn_cpu.GDNCPUKernel.chunk_backward`,
whose gradients are gathered back to the tokens (a padded token: all its sub-steps have
log α = 0 and β = 0, it leaves the state as it was).

The forward keeps only the projections and the start state: the backward recomputes the
sub-step sequence and its chunks from them (:meth:`DeltaProductCPUKernel.recomputed_sub_steps`),
as fla's chunk backward recomputes w, u and the chunk states from q, k, v, g, β.

Each stage a mutant needs (:mod:`gradcheck_rnn.targets.kernel_bugs`) is a method:
``recomputed_sub_steps`` (where the backward's recomputation puts the decay and the read) and
gdn's ``state_grad_coefficient`` (the matrix the state gradient is carried back by across a
chunk; :class:`SubStepChunks` tells it which sub-step each position is).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import torch
from torch import Tensor

from ..model.case import RNNConfig
from .gdn_cpu import Chunks, GDNCPUKernel, Projected, from_chunks, to_chunks


@dataclass
class SubSteps:
    """A layer's n·T sub-steps as gdn's per-step inputs, (n·T, B, NH, ·): position t·n + j is
    sub-step j of token t. ``read`` is the sub-step whose output is the token's, ``decayed`` the
    sub-steps that carry the token's log α."""

    q: Tensor
    k: Tensor
    v: Tensor
    log_decay: Tensor
    beta: Tensor
    read: int
    decayed: tuple[int, ...]


@dataclass
class SubStepChunks(Chunks):
    """gdn's chunks of a sub-step sequence, with n: position i of the sequence is sub-step i mod n."""

    householder: int = 1

    def sub_step(self) -> Tensor:
        """The sub-step index j of each chunked position (NC, c)."""
        NC, c = self.beta.shape[-2:]
        return torch.arange(NC * c, device=self.beta.device).reshape(NC, c) % self.householder


@dataclass
class Layer(Projected):
    """What the forward of one layer keeps: its projections (n·NH keys, values and β per token),
    the start state (B, NH, K, V) and n."""

    h0: Tensor
    householder: int


def tokens(t: Tensor, n: int) -> Tensor:
    """(n·T, B, ...) -> (T, n, B, ...): a sub-step sequence by token and sub-step."""
    return t.reshape((-1, n) + t.shape[1:])


class DeltaProductCPUKernel(GDNCPUKernel):
    """The fused deltaproduct kernel (see the module docstring); subclass and override one stage to mutate."""

    def map_widths(self, cfg: RNNConfig) -> list[int]:
        NH, K, V = cfg.family.sizes(cfg)
        n = cfg.family.householder(cfg)
        return [NH * K, n * NH * K, n * NH * V, NH, n * NH]

    # ------------------------------------------------------------------ the sub-step sequence
    def sub_steps(self, layer: Layer, read: int = -1, decayed: Sequence[int] = (0,)) -> SubSteps:
        """The sub-step sequence of a layer: k̂, v, β of sub-step j from the j-th block of the maps,
        the token's log α on the ``decayed`` sub-steps (the first), its q̂ on sub-step ``read`` (the
        last), zeros elsewhere."""
        n = layer.householder
        read = read % n
        T, B, NH = layer.q_unit.shape[:3]

        def by_sub_step(t: Tensor) -> Tensor:  # (T, B, n·NH, ·) -> (n·T, B, NH, ·)
            t = t.reshape((T, B, n, NH) + t.shape[3:]).transpose(1, 2)
            return t.reshape((T * n, B, NH) + t.shape[4:])

        def on(t: Tensor, where: Sequence[int]) -> Tensor:  # (T, B, NH, ·) on the sub-steps ``where``
            out = t.new_zeros((T, n) + t.shape[1:])
            out[:, list(where)] = t[:, None]
            return out.reshape((T * n,) + t.shape[1:])

        return SubSteps(on(layer.q_unit, [read]), by_sub_step(layer.k_unit), by_sub_step(layer.values),
                        on(layer.log_decay, decayed), by_sub_step(layer.betas[..., None])[..., 0], read,
                        tuple(decayed))

    def recomputed_sub_steps(self, layer: Layer) -> SubSteps:
        """The sub-step sequence the backward recomputes its chunks from: the forward's."""
        return self.sub_steps(layer)

    def run_sub_steps(self, sub: SubSteps, layer: Layer, scale: float) -> tuple[Tensor, Tensor, SubStepChunks]:
        """gdn's chunkwise recurrence over the sub-steps: each token's output (T, B, NH, V), read on
        sub-step ``sub.read``, the final state and the chunks."""
        o, final, chunks = self.chunk_forward(sub.q, sub.k, sub.v, sub.log_decay, sub.beta, layer.h0, scale)
        return (tokens(o, layer.householder)[:, sub.read], final,
                SubStepChunks(**vars(chunks), householder=layer.householder))

    # ------------------------------------------------------------------ forward and backward
    def layer_forward(self, cfg: RNNConfig, p: Mapping[str, Tensor], x: Tensor, mask: Tensor, h0: Tensor,
                      index: int) -> tuple[Tensor, Tensor, Layer]:
        """One layer: (y (T, B, H) masked, the final state (B, NH·K·V), what the backward keeps)."""
        fam = cfg.family
        NH, K, V = fam.sizes(cfg)
        T, B = x.shape[:2]
        layer = Layer(**vars(self.project(cfg, p, x, mask, index)), h0=h0.reshape(B, NH, K, V),
                      householder=fam.householder(cfg))
        o, final, _ = self.run_sub_steps(self.sub_steps(layer), layer, fam.scale(p, cfg))
        return o.reshape(T, B, NH * V) * mask, final.reshape(B, NH * K * V), layer

    def layer_backward(self, cfg: RNNConfig, p: Mapping[str, Tensor], layer: Layer, mask: Tensor, dy: Tensor,
                       dhy: Tensor, need_weights: bool, need_x: bool) -> tuple[Tensor | None, Tensor, dict[str, Tensor]]:
        """dx, dh0 and (when asked) the layer's parameter gradients from dy and dhy: gdn's chunk
        backward over the recomputed sub-steps, its gradients gathered back to the tokens."""
        NH, K, V = cfg.family.sizes(cfg)
        T, B = dy.shape[:2]
        n = layer.householder
        scale = cfg.family.scale(p, cfg)
        sub = self.recomputed_sub_steps(layer)
        _, _, chunks = self.run_sub_steps(sub, layer, scale)
        d_out = dy.new_zeros(T, n, B, NH, V)
        d_out[:, sub.read] = (dy * mask).reshape(T, B, NH, V)
        d_q, d_k, d_v, d_log_decay, d_beta, dh0 = self.chunk_backward(
            chunks, to_chunks(d_out.reshape(T * n, B, NH, V), self.chunk), dhy.reshape(B, NH, K, V), scale)

        def by_token(t: Tensor) -> Tensor:  # chunked sub-step gradients -> (T, B, n·NH, ·), the maps' rows
            t = tokens(from_chunks(t, T * n), n).transpose(1, 2)
            return t.reshape((T, B, n * NH) + t.shape[4:])

        d_log_decay = tokens(from_chunks(d_log_decay, T * n), n)[:, list(sub.decayed)].sum(1) * mask
        d_beta = by_token(d_beta[..., None])[..., 0] * mask
        dx, grads = self.projection_backward(p, layer, mask, tokens(from_chunks(d_q, T * n), n)[:, sub.read],
                                             by_token(d_k), by_token(d_v), d_log_decay, d_beta, need_weights, need_x)
        return dx, dh0.reshape(B, NH * K * V), grads
