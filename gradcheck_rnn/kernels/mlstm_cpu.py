"""The project's own fused CPU kernel of the ``mlstm`` family: chunkwise-parallel, with a hand-written chunkwise backward.

Semantics are :mod:`gradcheck_rnn.families.mlstm`. Nothing goes through autograd. Per layer and
head, time is cut into chunks of ``chunk`` steps (every sequence starts at t = 0, so the chunks
are shared by the batch). With F_j the cumulative log forget gate inside a chunk (F_0 = 0) and
a_s = ĩ_s − F_s, the recurrent stabiliser m_t = max(log f_t + m_{t−1}, ĩ_t) has the closed form

    m_j = F_j + M_j,   M_j = max(m_0, max_{s≤j} a_s)        (m_0: the chunk's start state)

so a chunk computes it with one cumulative max, and every weight of the chunk is a pairwise
exponent that is never positive (M_j ≥ m_0 and M_j ≥ a_s for s ≤ j):

    C_j = g_j C_0 + Σ_{s≤j} D_js k_s v_sᵀ,   n_j = g_j n_0 + Σ_{s≤j} D_js k_s
    g_j = exp(m_0 − M_j),   D_js = exp(a_s − M_j)

Nothing forms exp(+F) and divides by it, so neither -strongdecay (log f ≈ −4 a step) nor
-longmem (log f ≈ −0.02) loses digits. A padded step (past a sequence's length) has log f = 0
and a = −∞: it writes nothing, m holds, so every state stays as it was; its output is 0.

* Forward: every row of the layer input RMS-normalised (the family's pre-norm, padded rows
  zeroed first), then one GEMM over all T·B rows gives q, k, v, ĩ and f̃. Each chunk's own
  contribution to its end state, relative to its own largest a, is computed for all chunks at
  once; the only sequential loop (``carry_states``) hands (C, n, m) across the chunk boundaries.
  The outputs then follow for all chunks at once from their start states (``intra_chunk``, the
  parallel form: P = (q̃ kᵀ) ⊙ D, h_j = (g_j C_0ᵀ q̃_j + (P v)_j) / (max(|g_j n_0·q̃_j + Σ_s P_js|,
  exp(−m_j)) + ε)). The forward keeps only the projections and the chunk-boundary states.
* Backward, three stages: (1) every chunk at once, the gradient of its outputs (the intra-chunk
  part is recomputed from the boundary states, as mlstm_kernels' chunkwise backward does) with
  respect to q, k, v, the gates and its start state; (2) one sequential pass over the chunks, in
  reverse, carries the state gradient (dC, dn, dm) from each chunk's end to its start
  (``carry_state_grads``, by ``carry_grad`` at each boundary); (3) every chunk at once, what its
  end-state gradient gives q, k, v and the gates. The derivative of the max goes to its argmax (the true derivative, as the float64
  references differentiate the recurrence): dM_j to a_{argmax} or to m_0. Weight gradients are
  GEMMs over all T·B rows, computed only when a parameter is requested; dx of a layer goes
  through the pre-norm: dx = (dx̂ − x̂·mean(x̂ ⊙ dx̂)) / r.

Each stage a mutant needs is a method (:mod:`gradcheck_rnn.targets.kernel_bugs`):
``boundary_states`` (the chunk-boundary states the backward reads), ``carry_grad`` (the state
gradient across a chunk boundary).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import torch
from torch import Tensor

from ..model.case import RNNConfig
from ..families.matrix import NORM_EPS
from ..families.mlstm import EPS
from .layer_stack import LayerStackKernel, pre_norm, stacked_maps_backward

DEFAULT_CHUNK = 4
# the chunk sizes a sweep draws for it (kernel configuration "chunk"); tolerances measured at each (benchmarks/RESULTS.md)
CHUNK_SIZES = (2, 4, 8)
MAPS = ("w_q", "w_k", "w_v", "w_i", "w_f")  # the layer's maps from x̂, stacked into one GEMM

# Shapes below: B batch, NH heads, NC chunks, c = chunk, K key and V value units per head.


def to_chunks(t: Tensor, chunk: int) -> Tensor:
    """(T, B, NH, *rest) -> (B, NH, NC, chunk, *rest), time zero-padded to a whole number of chunks."""
    T = t.shape[0]
    pad = -T % chunk
    t = torch.cat([t, t.new_zeros((pad,) + t.shape[1:])])
    t = t.reshape(((T + pad) // chunk, chunk) + t.shape[1:])
    return t.permute(2, 3, 0, 1, *range(4, t.dim()))


def from_chunks(t: Tensor, T: int) -> Tensor:
    """(B, NH, NC, chunk, *rest) -> (T, B, NH, *rest): :func:`to_chunks` undone, the padding dropped."""
    t = t.permute(2, 3, 0, 1, *range(4, t.dim()))
    return t.reshape((-1,) + t.shape[2:])[:T]


@dataclass
class States:
    """The states at the chunk boundaries, t = 0, c, 2c, … (NC + 1 of them, the last the final state)."""

    C: Tensor  # (B, NH, NC + 1, K, V)
    n: Tensor  # (B, NH, NC + 1, K)
    m: Tensor  # (B, NH, NC + 1)


@dataclass
class Layer:
    """What the forward of one layer keeps for its backward; per step in chunks, (B, NH, NC, c, ...)."""

    x: Tensor        # (T, B, I_l), normalised, padded steps zeroed
    rms: Tensor      # (T, B, 1), the norm's r
    valid: Tensor    # (B, 1, NC, c) bool: the step is within its sequence
    q: Tensor        # (..., K), scaled by 1/sqrt(K)
    k: Tensor        # (..., K)
    v: Tensor        # (..., V)
    f_pre: Tensor    # f̃, the forget gate's pre-activation
    F: Tensor        # the cumulative log f inside the chunk (0 at padded steps' log f)
    a: Tensor        # ĩ − F, −∞ at padded steps
    a_max: Tensor    # the cumulative max of a inside the chunk
    a_arg: Tensor    # its argmax (int64)
    states: States


@dataclass
class Intra:
    """The parallel form of every chunk from its start state (:meth:`MLSTMCPUKernel.intra_chunk`)."""

    start_wins: Tensor  # (..., c) bool: M_j = m_0 (the start state's m won the max)
    g: Tensor           # (..., c), exp(m_0 − M_j)
    D: Tensor           # (..., c, c), exp(a_s − M_j) for s ≤ j, else 0
    P: Tensor           # (..., c, c), (q̃_j·k_s) D_js
    Cq: Tensor          # (..., c, V), C_0ᵀ q̃_j
    nq: Tensor          # (..., c), n_0·q̃_j
    d: Tensor           # (..., c), n_jᵀ q̃_j
    e: Tensor           # (..., c), exp(−m_j)
    den: Tensor         # (..., c), max(|d|, e) + ε
    h: Tensor           # (..., c, V), the outputs


class MLSTMCPUKernel(LayerStackKernel):
    """The chunkwise mLSTM kernel (see the module docstring); subclass and override one stage to mutate."""

    CHUNK_SIZES = CHUNK_SIZES

    def __init__(self, chunk: int = DEFAULT_CHUNK) -> None:
        if chunk < 1:
            raise ValueError(f"chunk={chunk} must be >= 1")
        self.chunk = chunk

    # ------------------------------------------------------------------ forward
    def carry_states(self, start: States, own_max: Tensor, own_C: Tensor, own_n: Tensor, F_end: Tensor) -> States:
        """The recurrence across chunks, the only sequential loop: each chunk's end state from its
        start and its own contribution (own_C, own_n: Σ_s exp(a_s − own_max) k_s v_sᵀ and k_s, per
        chunk (B, NH, NC, ...)); start holds the initial state (one boundary)."""
        C, n, m = [start.C[:, :, 0]], [start.n[:, :, 0]], [start.m[:, :, 0]]
        for j in range(own_max.shape[-1]):
            M_end = torch.maximum(m[-1], own_max[..., j])
            g, s = torch.exp(m[-1] - M_end), torch.exp(own_max[..., j] - M_end)  # both exponents ≤ 0
            C.append(g[..., None, None] * C[-1] + s[..., None, None] * own_C[:, :, j])
            n.append(g[..., None] * n[-1] + s[..., None] * own_n[:, :, j])
            m.append(F_end[..., j] + M_end)
        return States(torch.stack(C, 2), torch.stack(n, 2), torch.stack(m, 2))

    @staticmethod
    def intra_chunk(layer: Layer, starts: States) -> Intra:
        """Every chunk's steps at once from its start state (the first NC of ``starts``)."""
        C0, n0, m0 = starts.C[:, :, :-1], starts.n[:, :, :-1], starts.m[:, :, :-1, None]
        M = torch.maximum(m0, layer.a_max)
        c = layer.a.shape[-1]
        causal = torch.ones(c, c, dtype=torch.bool, device=M.device).tril()
        D = torch.exp(torch.where(causal, layer.a[..., None, :] - M[..., :, None], -math.inf))
        g = torch.exp(m0 - M)
        P = (layer.q @ layer.k.transpose(-1, -2)) * D
        Cq, nq = layer.q @ C0, (layer.q * n0[..., None, :]).sum(-1)
        d = g * nq + P.sum(-1)
        e = torch.exp(-(layer.F + M))
        den = torch.maximum(d.abs(), e) + EPS
        h = (g[..., None] * Cq + P @ layer.v) / den[..., None]
        return Intra(m0 >= layer.a_max, g, D, P, Cq, nq, d, e, den, h)

    def layer_forward(self, cfg: RNNConfig, p: Mapping[str, Tensor], x: Tensor, mask: Tensor, h0: Tensor,
                      c0: Tensor, index: int) -> tuple[Tensor, Tensor, Tensor, Layer]:
        """y (T, B, H), hy (B, NH·K·V), cy (B, NH·K + NH) and what the backward keeps."""
        NH, K, V = cfg.family.sizes(cfg)
        T, B = x.shape[:2]
        x = x * mask
        x, rms = pre_norm(x, NORM_EPS)
        q, k, v, gate_i, gate_f = (x @ torch.cat([p[kind] for kind in MAPS]).T).split(
            [NH * K, NH * K, NH * V, NH, NH], -1)
        if "b_i" in p:
            gate_i, gate_f = gate_i + p["b_i"], gate_f + p["b_f"]
        chunks = [to_chunks(t.reshape(T, B, NH, -1), self.chunk) for t in (q, k, v)]
        q, k, v = chunks[0] / math.sqrt(K), chunks[1], chunks[2]
        valid = to_chunks(mask.bool(), self.chunk)  # (B, 1, NC, c): the mask (T, B, 1) read as one head
        i_pre, f_pre = to_chunks(gate_i, self.chunk), to_chunks(gate_f, self.chunk)
        F = torch.where(valid, torch.nn.functional.logsigmoid(f_pre), 0.0).cumsum(-1)
        a = torch.where(valid, i_pre - F, -math.inf)
        a_max, a_arg = torch.cummax(a, -1)
        # each chunk's own contribution to its end state, relative to its own largest a (a chunk
        # of padded steps only has none: its own_max is −∞, its weights 0)
        own_max = a_max[..., -1]
        w = torch.exp(a - torch.where(own_max.isfinite(), own_max, 0.0)[..., None])
        own_C = (k * w[..., None]).transpose(-1, -2) @ v
        own_n = (k * w[..., None]).sum(-2)
        start = States(h0.reshape(B, NH, 1, K, V), c0[:, :NH * K].reshape(B, NH, 1, K), c0[:, NH * K:, None])
        states = self.carry_states(start, own_max, own_C, own_n, F[..., -1])
        layer = Layer(x, rms, valid, q, k, v, f_pre, F, a, a_max, a_arg, states)
        y = from_chunks(self.intra_chunk(layer, states).h, T).reshape(T, B, NH * V) * mask
        cy = torch.cat([states.n[:, :, -1].reshape(B, NH * K), states.m[:, :, -1]], -1)
        return y, states.C[:, :, -1].reshape(B, NH * K * V), cy, layer

    # ------------------------------------------------------------------ backward
    def boundary_states(self, layer: Layer) -> States:
        """The chunk-boundary states the backward reads: the ones the forward stored."""
        return layer.states

    def carry_grad(self, starts: States, intra: Intra, j: int, dC: Tensor, dn: Tensor,
                   dm: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The gradient of chunk j's start state from its end state's (dC, dn, dm), through
        C_end = g C_0 + …, n_end = g n_0 + …, m_end = F + M with M = max(m_0, a_max): dm_0 gets
        g's derivative and, where m_0 won the max, dM = dm − dC:C_end − dn·n_end."""
        g, won = intra.g[:, :, j, -1], intra.start_wins[:, :, j, -1]
        C0, n0, C_end, n_end = starts.C[:, :, j], starts.n[:, :, j], starts.C[:, :, j + 1], starts.n[:, :, j + 1]
        dM = dm - (dC * C_end).sum((-2, -1)) - (dn * n_end).sum(-1)
        dm0 = g * ((dC * C0).sum((-2, -1)) + (dn * n0).sum(-1)) + torch.where(won, dM, 0.0)
        return g[..., None, None] * dC, g[..., None] * dn, dm0

    def carry_state_grads(self, starts: States, intra: Intra, through_start: tuple[Tensor, Tensor, Tensor],
                          d_final: tuple[Tensor, Tensor, Tensor]) -> tuple[tuple[Tensor, Tensor, Tensor],
                                                                         tuple[Tensor, Tensor, Tensor]]:
        """The sequential stage of the backward, last chunk first: the gradient (dC, dn, dm) of every
        chunk's end state, each stacked over the chunks (B, NH, NC, ...), and that of the first
        chunk's start. A chunk's start gets its end's gradient through :meth:`carry_grad` plus what
        its own outputs give it (``through_start``, chunked like the result); the last chunk's end
        gets ``d_final``."""
        grad = d_final
        ends: list[tuple[Tensor, Tensor, Tensor]] = [grad] * intra.g.shape[2]
        for j in reversed(range(len(ends))):
            ends[j] = grad
            carried = self.carry_grad(starts, intra, j, *grad)
            grad = (carried[0] + through_start[0][:, :, j], carried[1] + through_start[1][:, :, j],
                    carried[2] + through_start[2][:, :, j])
        dC_end, dn_end, dm_end = (torch.stack(parts, 2) for parts in zip(*ends))
        return (dC_end, dn_end, dm_end), grad

    @staticmethod
    def route_max(da: Tensor, dM: Tensor, won: Tensor, arg: Tensor) -> Tensor:
        """dL/dM (where m_0 did not win) added to da at each max's argmax; returns da."""
        return da.scatter_add_(-1, arg, torch.where(won, 0.0, dM))

    def layer_backward(self, cfg: RNNConfig, p: Mapping[str, Tensor], layer: Layer, mask: Tensor, dy: Tensor,
                       dhy: Tensor, dcy: Tensor, need_weights: bool,
                       need_x: bool) -> tuple[Tensor | None, Tensor, Tensor, dict[str, Tensor]]:
        """dx, dh0, dc0 and (when asked) the layer's parameter gradients from dy, dhy and dcy."""
        NH, K, V = cfg.family.sizes(cfg)
        T, B = dy.shape[:2]
        q, k, v = layer.q, layer.k, layer.v
        starts = self.boundary_states(layer)
        it = self.intra_chunk(layer, starts)
        C0, n0 = starts.C[:, :, :-1], starts.n[:, :, :-1]
        # (1) every chunk at once: its outputs' gradient, its start state's part of it
        dh = to_chunks(dy.reshape(T, B, NH, V), self.chunk) * layer.valid[..., None]
        d_num = dh / it.den[..., None]
        d_den = -(dh * it.h).sum(-1) / it.den
        d_wins = it.d.abs() >= it.e
        dd = torch.where(d_wins, d_den * torch.sign(it.d), 0.0)
        dm = torch.where(d_wins, 0.0, -d_den * it.e)  # dL/dm_j through exp(−m_j)
        dP = d_num @ v.transpose(-1, -2) + dd[..., None]
        dqk, dlogD = dP * it.D, dP * it.P  # 0 above the diagonal, where D = 0
        g_num, g_dd = it.g[..., None] * d_num, it.g * dd
        dq = dqk @ k + g_num @ C0.transpose(-1, -2) + g_dd[..., None] * n0[..., None, :]
        dk = dqk.transpose(-1, -2) @ q
        dv = it.P.transpose(-1, -2) @ d_num
        dlogg = ((d_num * it.Cq).sum(-1) + dd * it.nq) * it.g
        dM = dm - dlogD.sum(-1) - dlogg
        da = self.route_max(dlogD.sum(-2), dM, it.start_wins, layer.a_arg)
        dF = dm
        dC_start = q.transpose(-1, -2) @ g_num
        dn_start = (g_dd[..., None] * q).sum(-2)
        dm_start = dlogg.sum(-1) + torch.where(it.start_wins, dM, 0.0).sum(-1)
        # (2) the state gradient across the chunk boundaries, last chunk first
        d_final = (dhy.reshape(B, NH, K, V), dcy[:, :NH * K].reshape(B, NH, K), dcy[:, NH * K:])
        (dC_end, dn_end, dm_end), grad = self.carry_state_grads(starts, it, (dC_start, dn_start, dm_start), d_final)
        # (3) every chunk at once: what its end-state gradient gives its steps
        D_end = it.D[..., -1, :]                               # D_cs: step s's weight in the end state
        dCv = v @ dC_end.transpose(-1, -2)                     # row s: dC_end v_s
        dk = dk + D_end[..., None] * (dCv + dn_end[..., None, :])
        dv = dv + D_end[..., None] * (k @ dC_end)
        da = da + D_end * (k * (dCv + dn_end[..., None, :])).sum(-1)
        dM_end = dm_end - (dC_end * starts.C[:, :, 1:]).sum((-2, -1)) - (dn_end * starts.n[:, :, 1:]).sum(-1)
        da = self.route_max(da, dM_end[..., None], it.start_wins[..., -1:], layer.a_arg[..., -1:])
        dF = dF + torch.nn.functional.pad(dm_end[..., None], (self.chunk - 1, 0)) - da
        # a = ĩ − F, F the cumulative log f: dlog f_r = Σ_{j≥r} dF_j; padded steps' gates are constants
        d_log_f = dF.flip(-1).cumsum(-1).flip(-1)
        d_i = torch.where(layer.valid, da, 0.0)
        d_f = torch.where(layer.valid, d_log_f * torch.sigmoid(-layer.f_pre), 0.0)
        d_pre = torch.cat([from_chunks(dq, T).reshape(T, B, NH * K) / math.sqrt(K),
                           from_chunks(dk, T).reshape(T, B, NH * K), from_chunks(dv, T).reshape(T, B, NH * V),
                           from_chunks(d_i, T), from_chunks(d_f, T)], -1)
        dx, grads = stacked_maps_backward(layer.x, layer.rms, mask, d_pre, p, MAPS, need_x, need_weights)
        if need_weights and "b_i" in p:
            grads["b_i"], grads["b_f"] = from_chunks(d_i, T).sum((0, 1)), from_chunks(d_f, T).sum((0, 1))
        dc0 = torch.cat([grad[1].reshape(B, NH * K), grad[2]], -1)
        return dx, grad[0].reshape(B, NH * K * V), dc0, grads

