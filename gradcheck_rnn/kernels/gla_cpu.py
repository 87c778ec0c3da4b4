"""The project's own fused CPU kernel of the ``gla`` family: chunkwise-parallel gated linear attention.

Semantics are :mod:`gradcheck_rnn.families.gla` (state layout and pre-norm: :mod:`..families.matrix`).
Nothing goes through autograd. Per layer, per head, with g_t = log α_t (K wide, or one per head
with -headdecay, broadcast over the K key units):

* Projections: the padded inputs are zeroed and every row pre-normalised (x̂ = x / r,
  r = sqrt(mean(x²) + 1)); q, k, v and the decay gate are GEMMs over all T·B rows. g is
  multiplied by the length mask, so a padded step has α = 1 and (with k = 0) writes nothing:
  it leaves the state as it was.
* Forward, chunkwise (time cut into chunks of ``chunk`` steps; every sequence starts at t = 0,
  so the chunks are shared by the batch). Inside a chunk that starts from S₀, with Λ_t the
  cumulative g from the chunk's first step to t (inclusive):

      o_t = scale·Σ_{s≤t} (q_t·(exp(Λ_t−Λ_s) ⊙ k_s)) v_s + scale·(q_t ⊙ exp(Λ_t))ᵀ S₀
      S_end = exp(Λ_last) ⊙ S₀ + Σ_s (k_s ⊙ exp(Λ_last−Λ_s)) v_sᵀ

  The first term is the parallel (matrix) form over all steps of all chunks at once; the only
  sequential loop hands S_end to the next chunk. Every exponent is a difference Λ_t − Λ_s with
  s ≤ t (a sum of log decays, ≤ 0), masked to −∞ above the diagonal before the exp: never
  exp(+Λ) of a cumulative decay divided out afterwards (flash-linear-attention's secondary
  chunking avoids the same overflow), so -strongdecay (g ≈ −4 a step) stays finite in float32.
* Backward, by hand, chunkwise: the state gradient dS_end is carried backwards across chunks
  (dS_end of chunk i−1 = exp(Λ_last) ⊙ dS_end of chunk i + Σ_t (q_t ⊙ exp(Λ_t)) dõ_tᵀ, and dh0 is
  the same step once more), then every chunk at once: dv, dk, dq and dΛ from the pairwise form,
  the state terms, and dg as the reverse cumulative sum of dΛ inside each chunk. The
  weight-gradient GEMMs run only when a parameter is requested, layer 0's dx only when x is.

Each stage a mutant needs is a method (:mod:`gradcheck_rnn.targets.kernel_bugs`): ``key_blocks``
(the key units dq is computed over, block by block as a fused kernel tiles the head dimension),
``log_decay_grad`` (dΛ → dg, the gradient of the decay), ``state_grad_chain`` (the state
gradient carried back across chunks to dh0) and ``decay_state_grads`` (the state gradients the
decay gradient reads).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import torch
from torch import Tensor

from ..model.case import RNNConfig
from ..families.matrix import NORM_EPS
from .layer_stack import LayerStackKernel, pre_norm, pre_norm_backward

DEFAULT_CHUNK = 4
# the chunk sizes a sweep draws for it (kernel configuration "chunk"); tolerances measured at each (benchmarks/RESULTS.md)
CHUNK_SIZES = (2, 4, 8)
DEFAULT_KEY_BLOCK = 2  # smaller than most drawn K (1..4), so a partial last block is common


@dataclass
class Layer:
    """What the forward of one layer keeps for its backward. Chunked tensors are (B, NH, C, c, ·)."""

    x: Tensor        # (T, B, I_l), normalised, padded steps zeroed
    rms: Tensor      # (T, B, 1), the norm's r
    low: Tensor      # (T, B, R), the decay map's low-rank part
    gate: Tensor     # (T, B, NH·K or NH), before the logsigmoid
    q: Tensor        # chunked (…, K)
    k: Tensor        # chunked (…, K)
    v: Tensor        # chunked (…, V)
    cum: Tensor      # chunked (…, K), Λ: the inclusive cumulative log decay inside each chunk
    pairs: Tensor    # (B, NH, C, c, c, K), exp(Λ_t − Λ_s) for s ≤ t, else 0
    scores: Tensor   # (B, NH, C, c, c), Σ_j q_tj k_sj exp(Λ_tj − Λ_sj)
    states: Tensor   # (B, NH, C + 1, K, V): the state at each chunk's start, then the final one


class GLACPUKernel(LayerStackKernel):
    """The fused gla kernel (see the module docstring); subclass and override one stage to mutate."""

    CHUNK_SIZES = CHUNK_SIZES

    def __init__(self, chunk: int = DEFAULT_CHUNK, key_block: int = DEFAULT_KEY_BLOCK) -> None:
        if chunk < 1 or key_block < 1:
            raise ValueError(f"chunk={chunk} and key_block={key_block} must be >= 1")
        self.chunk = chunk
        self.key_block = key_block

    # ------------------------------------------------------------------ chunk layout
    def chunked(self, t: Tensor) -> Tensor:
        """(T, B, NH, X) -> (B, NH, C, c, X), the time padded with zeros to whole chunks (a zero
        log decay and a zero key are the identity step)."""
        T, c = t.shape[0], self.chunk
        C = math.ceil(T / c)
        t = torch.cat([t, t.new_zeros((C * c - T,) + t.shape[1:])])
        return t.permute(1, 2, 0, 3).reshape(t.shape[1:3] + (C, c, t.shape[-1]))

    @staticmethod
    def unchunked(t: Tensor, T: int) -> Tensor:
        """(B, NH, C, c, X) -> (T, B, NH, X), the padding of the last chunk dropped."""
        B, NH, C, c, X = t.shape
        return t.reshape(B, NH, C * c, X)[:, :, :T].permute(2, 0, 1, 3)

    # ------------------------------------------------------------------ forward
    def layer_forward(self, cfg: RNNConfig, p: Mapping[str, Tensor], x: Tensor, mask: Tensor, h0: Tensor,
                      index: int) -> tuple[Tensor, Tensor, Layer]:
        """y (T, B, H) masked, the final state (B, NH·K·V) and what the backward needs (every
        layer alike: ``index`` is not used)."""
        NH, K, V = cfg.family.sizes(cfg)
        T, B = x.shape[:2]
        x = x * mask
        x, rms = pre_norm(x, NORM_EPS)
        q, k, v = ((x @ p[w].T).reshape(T, B, NH, -1) for w in ("w_q", "w_k", "w_v"))
        low = x @ p["w_a1"].T
        gate = low @ p["w_a2"].T
        if "b_a" in p:
            gate = gate + p["b_a"]
        log_decay = torch.nn.functional.logsigmoid(gate).reshape(T, B, NH, -1) * mask[..., None]
        q, k, v = self.chunked(q), self.chunked(k), self.chunked(v)
        cum = self.chunked(log_decay).cumsum(-2).expand(q.shape)
        causal = torch.ones(self.chunk, self.chunk, dtype=torch.bool, device=x.device).tril()[..., None]
        diff = cum[..., :, None, :] - cum[..., None, :, :]
        pairs = torch.exp(diff.masked_fill(~causal, -math.inf))
        scores = (q[..., :, None, :] * k[..., None, :, :] * pairs).sum(-1)
        states = self.chunk_states(cum, k, v, h0.reshape(B, NH, K, V))
        o = scores @ v + (q * torch.exp(cum)) @ states[:, :, :-1]
        y = self.unchunked(o * cfg.family.scale({}, cfg), T).reshape(T, B, NH * V) * mask
        layer = Layer(x, rms, low, gate, q, k, v, cum, pairs, scores, states)
        return y, states[:, :, -1].reshape(B, NH * K * V), layer

    def chunk_states(self, cum: Tensor, k: Tensor, v: Tensor, s0: Tensor) -> Tensor:
        """The state at every chunk's start and after the last chunk, (B, NH, C + 1, K, V): what
        each chunk writes is one product for all chunks; the hand-off is the only loop."""
        last = cum[..., -1:, :]
        written = (k * torch.exp(last - cum)).transpose(-1, -2) @ v  # (B, NH, C, K, V)
        return self.hand_off(torch.exp(last[..., 0, :]), written, s0)

    @staticmethod
    def hand_off(decay: Tensor, written: Tensor, start: Tensor, reverse: bool = False) -> Tensor:
        """The only sequential stage, forward (the state) and with ``reverse`` backward (its
        gradient): X_out = decay_i ⊙ X_in + written_i across chunk i, decay (B, NH, C, K) per key
        unit; slot i of the result (B, NH, C + 1, K, V) is what enters chunk i's hand-off, slot C
        what leaves the last one, X entering the first as ``start``."""
        chunks = range(decay.shape[2] - 1, -1, -1) if reverse else range(decay.shape[2])
        carry = decay[..., None]                                      # (B, NH, C, K, 1)
        entering, state = [], start
        for i in chunks:
            entering.append(state)
            state = carry[:, :, i] * state + written[:, :, i]
        return torch.stack((entering[::-1] if reverse else entering) + [state], dim=2)

    # ------------------------------------------------------------------ backward stages
    def key_blocks(self, key_width: int) -> list[slice]:
        """The key units of each block dq is computed in, ``key_block`` at a time; the last
        block is partial when K is not a multiple of the block."""
        return [slice(start, min(start + self.key_block, key_width)) for start in range(0, key_width, self.key_block)]

    def query_grad(self, weighted: Tensor, k: Tensor, inter: Tensor) -> Tensor:
        """dq_t = Σ_s dA_ts exp(Λ_t−Λ_s) ⊙ k_s (``weighted`` is dA ⊙ exp(Λ_t−Λ_s)) plus the
        term through the chunk's start state (``inter``), in key blocks."""
        dq = torch.zeros_like(inter)
        for units in self.key_blocks(k.shape[-1]):
            dq[..., units] = (weighted[..., units] * k[..., None, :, units]).sum(-2) + inter[..., units]
        return dq

    def log_decay_grad(self, d_cum: Tensor) -> Tensor:
        """dL/dg from dL/dΛ: Λ_t = Σ_{s≤t} g_s inside a chunk, so dg_s = Σ_{t≥s} dΛ_t of its chunk."""
        return d_cum.flip(-2).cumsum(-2).flip(-2)

    def layer_backward(self, cfg: RNNConfig, p: Mapping[str, Tensor], layer: Layer, mask: Tensor, dy: Tensor,
                       dhy: Tensor, need_weights: bool, need_x: bool) -> tuple[Tensor | None, Tensor, dict[str, Tensor]]:
        """dx (when asked), dh0 and (when asked) the layer's parameter gradients from dy and dhy."""
        NH, K, V = cfg.family.sizes(cfg)
        T, B = dy.shape[:2]
        do = self.chunked((dy * mask).reshape(T, B, NH, V)) * cfg.family.scale({}, cfg)
        decay_to_end = torch.exp(layer.cum[..., -1:, :] - layer.cum)     # exp(Λ_last − Λ_s)
        q_start = layer.q * torch.exp(layer.cum)                          # what reads the chunk's start
        read, d_final = q_start.transpose(-1, -2) @ do, dhy.reshape(B, NH, K, V)
        d_ends, dh0 = self.state_grad_chain(layer, read, d_final)
        dh0 = dh0.reshape(B, NH * K * V)
        d_scores = do @ layer.v.transpose(-1, -2)
        weighted = d_scores[..., None] * layer.pairs                      # dA_ts exp(Λ_t − Λ_s)
        k_end = layer.k * decay_to_end
        dv = layer.scores.transpose(-1, -2) @ do + k_end @ d_ends
        inter = torch.exp(layer.cum) * (do @ layer.states[:, :, :-1].transpose(-1, -2))
        dq = self.query_grad(weighted, layer.k, inter)
        into_end = layer.v @ d_ends.transpose(-1, -2)                    # dS_end v_s, (…, c, K)
        dk = (weighted * layer.q[..., :, None, :]).sum(-3) + decay_to_end * into_end
        # dΛ: +Σ_s at t and −Σ_t at s of the pairwise terms; the start read; the state written
        pair_terms = weighted * layer.q[..., :, None, :] * layer.k[..., None, :, :]
        gate_ends = self.decay_state_grads(layer, read, d_final, d_ends)
        into_gate = into_end if gate_ends is d_ends else layer.v @ gate_ends.transpose(-1, -2)
        d_cum = pair_terms.sum(-2) - pair_terms.sum(-3) + layer.q * inter - k_end * into_gate
        d_cum[..., -1, :] += (gate_ends * layer.states[:, :, 1:]).sum(-1)
        d_log = self.unchunked(self.log_decay_grad(d_cum), T)            # (T, B, NH, K)
        if cfg.option("head_decay"):
            d_log = d_log.sum(-1, keepdim=True)
        d_gate = d_log.reshape(T, B, -1) * mask * torch.sigmoid(-layer.gate)
        d_low = d_gate @ p["w_a2"]
        d_maps = {w: self.unchunked(d, T).reshape(T, B, -1) for w, d in (("w_q", dq), ("w_k", dk), ("w_v", dv))}
        # only what is requested: no dx GEMMs for a frozen x, no weight-gradient GEMMs for frozen weights
        dx: Tensor | None = None
        grads: dict[str, Tensor] = {}
        if need_x:
            dx_hat = sum(d @ p[w] for w, d in d_maps.items()) + d_low @ p["w_a1"]
            dx = pre_norm_backward(layer.x, layer.rms, dx_hat, mask)
        if need_weights:
            rows = T * B
            x = layer.x.reshape(rows, -1)
            grads = {w: d.reshape(rows, -1).T @ x for w, d in d_maps.items()}
            grads["w_a1"] = d_low.reshape(rows, -1).T @ x
            grads["w_a2"] = d_gate.reshape(rows, -1).T @ layer.low.reshape(rows, -1)
            if "b_a" in p:
                grads["b_a"] = d_gate.sum((0, 1))
        return dx, dh0, grads

    def decay_state_grads(self, layer: Layer, read: Tensor, dhy: Tensor, d_ends: Tensor) -> Tensor:
        """The state gradients dL/dS_end the decay gradient is computed from: those of
        :meth:`state_grad_chain`, the final-state gradient dhy included."""
        return d_ends

    def state_grad_chain(self, layer: Layer, read: Tensor, dhy: Tensor) -> tuple[Tensor, Tensor]:
        """dL/dS_end of every chunk, (B, NH, C, K, V), and dL/dh0, carried backwards from dhy: the
        start of chunk i (the end of chunk i−1, or h0) is read by its steps (``read``:
        Σ_t (q_t ⊙ exp(Λ_t)) dõ_tᵀ) and decayed into its end by exp(Λ_last)."""
        d_ends = self.hand_off(torch.exp(layer.cum[..., -1, :]), read, dhy, reverse=True)
        return d_ends[:, :, :-1], d_ends[:, :, -1]
