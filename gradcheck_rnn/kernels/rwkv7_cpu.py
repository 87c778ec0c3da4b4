"""The project's own fused CPU kernel of the ``rwkv7`` family: RWKV-7's generalised delta rule, step by step, with a hand-written backward.

Semantics are :mod:`gradcheck_rnn.families.rwkv7` (state layout and pre-norm:
:mod:`..families.matrix`). Nothing goes through autograd. Per layer, the padded inputs are zeroed
and RMS-normalised, every map is one GEMM over all T·B rows (``[r | k | v | d | η]``), the
removal key κ̂ is k L2-normalised per head, and a padded step gets log w = 0 and η = 0 (with its
zero key and value: the identity step, its output masked to 0).

Why step by step, not chunkwise: RWKV-7's chunkwise (DPLR) form needs, per chunk, the WY
representation of a product of diagonal-plus-low-rank matrices with per-channel decays, four
pairwise matrices and their exclusive/inclusive cumulative decays (flash-linear-attention's
``chunk_dplr_delta_rule``, eight kernels); its hand-written backward was out of reach in the time
this kernel had. This kernel is the recurrent form fla's ``fused_recurrent_rwkv7`` computes,
batched over every (batch, head) and over time wherever time does not carry:

* Forward: each step's transition Φ_t = diag(w_t) + b_t a_tᵀ (K×K) and write k_t v_tᵀ are built
  for all steps at once; the only sequential loop (:meth:`RWKV7CPUKernel.carry_states`) is
  S_t = Φ_t S_{t−1} + k_t v_tᵀ, and it stores every state (T·K·V per head and sequence: these
  are small cases, so states are stored, not recomputed). o_t = S_tᵀ r_t / sqrt(K) for all steps.
* Backward: the state gradient runs back through the same recurrence with Φ_tᵀ
  (:meth:`~RWKV7CPUKernel.carry_state_grads`): dS_{t−1} = Φ_tᵀ (dS_t + r_t do_tᵀ / sqrt(K)),
  which ends in dh0; then every per-step gradient at once from the stored S_{t−1}, S_t and the
  total dS_t: dr, dk (the written key), dv, d log w = w ⊙ Σ_v S_{t−1} ⊙ dS_t, and through the
  low-rank term b (aᵀ S_{t−1}) the gradients of a and b, so of κ̂ and η. The parameter gradients
  are GEMMs over all T·B rows, computed only when a parameter is requested; dx goes back through
  the norms. No exponential of a cumulative decay appears anywhere, so no regime overflows.

Each stage a mutant needs (:mod:`gradcheck_rnn.targets.kernel_bugs`) is a method:
``state_grad_coefficient`` (the matrices Φ_t whose transposes carry the state gradient back, the
last of them into dh0), ``decay_grad`` (d log w from the stored states and state gradients) and
``gate_grads`` (how the gate gradients of padded steps are masked). The sequential loops are
``carry_states`` and ``carry_state_grads``, the two stages the Triton twin replaces
(:mod:`.fused_gpu.rwkv7`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch
from torch import Tensor

from ..families.matrix import NORM_EPS
from ..model.case import RNNConfig
from .gdn_cpu import GDNCPUKernel, l2_normalise, l2_normalise_backward, mT
from .layer_stack import LayerStackKernel, pre_norm, stacked_maps_backward

MAPS = ("w_q", "w_k", "w_v", "w_d", "w_a")  # the rows of the one input GEMM, in this order


def heads_first(t: Tensor) -> Tensor:
    """(T, B, NH, X) -> (B, NH, T, X): each (batch, head) a sequence of steps, as the carry reads it."""
    return t.permute(1, 2, 0, 3)


def time_first(t: Tensor) -> Tensor:
    """The inverse of :func:`heads_first`, flattened over the heads: (B, NH, T, X) -> (T, B, NH·X)."""
    return t.permute(2, 0, 1, 3).reshape(t.shape[2], t.shape[0], -1)


@dataclass
class Layer:
    """What the forward of one layer keeps for its backward; per-step tensors are (B, NH, T, ...)."""

    x: Tensor           # (T, B, I_l), normalised, padded steps zeroed
    rms: Tensor         # (T, B, 1), the norm's r
    logits: Tensor      # (T, B, NH·K), the decay logits d
    eta_raw: Tensor     # (T, B, NH·K), η = σ(w_a x̂ + b_a) before the length mask
    k_norm: Tensor      # (T, B, NH, 1), the removal key's norm
    r: Tensor           # (…, K), the receptance
    k: Tensor           # (…, K), the written key
    v: Tensor           # (…, V)
    removal: Tensor     # (…, K), κ̂
    eta: Tensor         # (…, K), masked η
    log_decay: Tensor   # (…, K), log w (0 at a padded step)
    decay: Tensor       # (…, K), w
    transition: Tensor  # (…, K, K), Φ = diag(w) + b aᵀ
    states: Tensor      # (…, K, V), S_{t−1}: the state entering each step
    after: Tensor       # (…, K, V), S_t: the state each step leaves


class RWKV7CPUKernel(LayerStackKernel):
    """The fused rwkv7 kernel (see the module docstring); subclass and override one stage to mutate."""

    # ------------------------------------------------------------------ forward
    def layer_forward(self, cfg: RNNConfig, p: Mapping[str, Tensor], x: Tensor, mask: Tensor, h0: Tensor,
                      index: int) -> tuple[Tensor, Tensor, Layer]:
        """One layer: (y (T, B, H) masked, the final state (B, NH·K·V), what the backward keeps)."""
        fam = cfg.family
        NH, K, V = fam.sizes(cfg)
        T, B = x.shape[:2]
        x = x * mask
        x, rms = pre_norm(x, NORM_EPS)
        proj = x @ torch.cat([p[kind] for kind in MAPS]).T
        r, k, v, logits, rate = proj.split([NH * K, NH * K, NH * V, NH * K, NH * K], dim=-1)
        if "b_d" in p:
            logits, rate = logits + p["b_d"], rate + p["b_a"]
        removal, k_norm = l2_normalise(k.reshape(T, B, NH, K))
        eta_raw = torch.sigmoid(rate)
        log_decay = -torch.exp(logits) * mask                          # a padded step: w = 1, η = 0
        eta = heads_first((eta_raw * mask).reshape(T, B, NH, K))
        log_decay = heads_first(log_decay.reshape(T, B, NH, K))
        decay = torch.exp(log_decay)
        r, k, removal = (heads_first(t.reshape(T, B, NH, K)) for t in (r, k, removal))
        v = heads_first(v.reshape(T, B, NH, V))
        # Φ = diag(w) + b aᵀ with a = −κ̂, b = κ̂ ⊙ η
        transition = torch.diag_embed(decay) - (removal * eta)[..., :, None] * removal[..., None, :]
        states, final = self.carry_states(transition, k[..., :, None] * v[..., None, :], h0.reshape(B, NH, K, V))
        after = torch.cat([states[:, :, 1:], final[:, :, None]], 2)
        o = (r[..., :, None] * after).sum(-2) * fam.scale(p, cfg)
        y = time_first(o) * mask
        layer = Layer(x, rms, logits, eta_raw, k_norm, r, k, v, removal, eta, log_decay, decay, transition, states,
                      after)
        return y, final.reshape(B, NH * K * V), layer

    @staticmethod
    def carry_states(transition: Tensor, written: Tensor, h0: Tensor) -> tuple[Tensor, Tensor]:
        """The sequential loop over steps: the state entering every step (B, NH, T, K, V) and the
        final one, from S_t = Φ_t S_{t−1} + ``written``."""
        return GDNCPUKernel.carry_states(transition, written, h0)  # gdn's chunk carry, one step a chunk

    # ------------------------------------------------------------------ backward stages
    def state_grad_coefficient(self, layer: Layer) -> Tensor:
        """The matrices whose transposes carry dS_t back to dS_{t−1} (the first step's into dh0):
        Φ_t = diag(w_t) + b_t a_tᵀ, (B, NH, T, K, K)."""
        return layer.transition

    def decay_grad(self, layer: Layer, d_states: Tensor) -> Tensor:
        """d log w_t = w_t ⊙ Σ_v S_{t−1} ⊙ dS_t (B, NH, T, K), dS_t the total gradient of S_t."""
        return layer.decay * (layer.states * d_states).sum(-1)

    def gate_grads(self, d_log_decay: Tensor, d_eta: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """The gradients of log w and η (T, B, NH·K) as the gates see them: 0 at a padded step,
        where the kernel forced log w = 0 and η = 0."""
        return d_log_decay * mask, d_eta * mask

    @staticmethod
    def carry_state_grads(coefficient_t: Tensor, through_out: Tensor, d_final: Tensor) -> tuple[Tensor, Tensor]:
        """The sequential loop over steps, backwards: the gradient of every step's state from the
        steps after it (B, NH, T, K, V) and dh0, with dS_{t−1} = ``coefficient_t`` dS_t + ``through_out``."""
        return GDNCPUKernel.carry_state_grads(coefficient_t, through_out, d_final)

    def layer_backward(self, cfg: RNNConfig, p: Mapping[str, Tensor], layer: Layer, mask: Tensor, dy: Tensor,
                       dhy: Tensor, need_weights: bool, need_x: bool) -> tuple[Tensor | None, Tensor, dict[str, Tensor]]:
        """dx, dh0 and (when asked) the layer's parameter gradients from dy and dhy."""
        fam = cfg.family
        NH, K, V = fam.sizes(cfg)
        T, B = dy.shape[:2]
        L, scale = layer, fam.scale(p, cfg)
        d_out = heads_first((dy * mask).reshape(T, B, NH, V))
        read_grad = scale * L.r[..., :, None] * d_out[..., None, :]   # dS_t through o_t
        coefficient_t = mT(self.state_grad_coefficient(L))
        later, dh0 = self.carry_state_grads(coefficient_t, coefficient_t @ read_grad, dhy.reshape(B, NH, K, V))
        d_states = later + read_grad                                   # the total dS_t
        d_r = scale * (L.after * d_out[..., None, :]).sum(-1)
        d_v = (d_states * L.k[..., :, None]).sum(-2)
        d_k = (d_states * L.v[..., None, :]).sum(-1)
        # the low-rank term b (aᵀ S_{t−1}), a = −κ̂, b = κ̂ ⊙ η
        low_read = -(L.removal[..., :, None] * L.states).sum(-2)       # aᵀ S_{t−1} (…, V)
        d_b = (d_states * low_read[..., None, :]).sum(-1)
        d_a = (L.states * (d_states * (L.removal * L.eta)[..., :, None]).sum(-2)[..., None, :]).sum(-1)
        d_removal = d_b * L.eta - d_a
        d_k = time_first(d_k).reshape(T, B, NH, K) + l2_normalise_backward(
            L.removal.permute(2, 0, 1, 3), L.k_norm, d_removal.permute(2, 0, 1, 3))
        d_log_decay, d_eta = self.gate_grads(time_first(self.decay_grad(L, d_states)),
                                             time_first(d_b * L.removal), mask)
        d_logits = -d_log_decay * torch.exp(L.logits)
        d_rate = d_eta * L.eta_raw * (1 - L.eta_raw)
        d_proj = torch.cat([time_first(d_r), d_k.reshape(T, B, -1), time_first(d_v), d_logits, d_rate], dim=-1)
        dx, grads = stacked_maps_backward(L.x, L.rms, mask, d_proj, p, MAPS, need_x, need_weights)
        if need_weights and "b_d" in p:
            grads["b_d"], grads["b_a"] = d_logits.sum((0, 1)), d_rate.sum((0, 1))
        return dx, dh0.reshape(B, NH * K * V), grads
