"""The project's own fused CPU kernel of the ``gdn`` family: the chunkwise gated delta rule with a hand-written backward.

Semantics are :mod:`gradcheck_rnn.families.gdn`. Nothing goes through autograd. Per layer, the
padded inputs are zeroed and RMS-normalised (the family's pre-norm), every map is one GEMM over
all T·B rows (``[q | k | v | a | b]``), q and k are L2-normalised per head, and a padded step
gets log α = 0 and β = 0: it leaves the state as it was (its output is masked to 0).

Forward, per head, time cut into chunks of ``chunk`` steps (every sequence starts at t = 0, so
the batch shares them). Inside a chunk with start state S₀, G_r = Σ_{i≤r} log α_i (chunk-local),
Γ_r = exp(G_r) and D_rs = exp(G_r − G_s) for s ≤ r (0 above: never exp of a positive number, so
-strongdecay cannot overflow; each G_r − G_s summed over its own segment, see "Float32 accuracy"),
the delta rule S_r = α_r S_{r−1} + k_r u_rᵀ has the error

    u_r = β_r (v_r − α_r S_{r−1}ᵀ k_r),  i.e. (I + A) U = diag(β)(V − diag(Γ) K S₀),
    A_rs = β_r D_rs (k_r·k_s) for s < r,

the WY/UT form of flash-linear-attention's ``chunk_gated_delta_rule``: one unit-lower-triangular
solve per chunk gives w = (I + A)⁻¹ diag(βΓ) K and u' = (I + A)⁻¹ diag(β) V, so U = u' − w S₀,

    O = scale (diag(Γ) Q S₀ + (D ⊙ QKᵀ) U),    S_end = Φ S₀ + Ekᵀ u',
    Φ = Γ_C I − Ekᵀ w,  Ek_r = exp(G_C − G_r) k_r,

where Φ is the chunk's product of α_t (I − β_t k_t k_tᵀ). The only sequential loop is over
chunks: S₀ of chunk n+1 = Φ_n S₀ + Ekᵀ u'; everything else is batched over all chunks at once.

Backward: with dS_end of each chunk known, every gradient of the chunk follows in parallel. The
state gradient crosses chunks backwards, dS₀ = Φᵀ dS_end + c_n (c_n the part through the chunk's
outputs), so the carry keeps the coefficient I − β k kᵀ (times the decay). The decay gradient
d log α_i collects, without cancellation, the terms that depend on it: those through Γ_r for
r ≥ i (a reverse cumulative sum), through exp(G_C − G_r) for r < i, and through the pairwise
D_rs for s < i ≤ r; a term never enters with both signs, so -strongdecay loses no digits there
(the cancellation of QwenLM/FlashQLA PR #28). The parameter gradients are then GEMMs over all
T·B rows, computed only when a parameter is requested; dx goes back through the norms.

Float32 accuracy (issue 35, docs/findings/soak.md). Measured stage by stage against the same
kernel in float64 on the same float32 data, in the regimes that could cost the chunkwise form
digits (decay near 1 over many chunks, strong decay, β near 1 with parallel keys, so A's entries
near ±1): the UT solve, w, U, Φ and the carried states stay within 4 units of float32 roundoff
of their scale (8 at chunk 16), and y and the final state are as accurate as the family's step
run one step at a time in float32 (RMS error 0.7–1.3× the step's at chunk 4, up to 1.9× on the
final state under strong decay; ``tests/test_gdn_kernel.py``). The one stage that lost digits
was D: as exp(G_r − G_s) its relative error grew with |G_r|, the decay since the chunk's start,
up to 11.7·(1 + |log D_rs|)·eps at chunk 16 under strong decay, and the final state's error
reached 3.7× the step's; summed per segment (:func:`segment_sums`, Mamba2's ``segsum``) it is at
most (1 + |log D_rs|)·eps. Nothing is accumulated in float64. A float32 case can still fail where
the problem itself is ill-conditioned at float32: the L2 norm of a key near 0 (|k| a few times
sqrt(1e-6)) amplifies rounding-level forward errors of any correct float32 evaluation up to
~1000× in the gradients (the soak case of issue 35).

Each stage a mutant needs (:mod:`gradcheck_rnn.targets.kernel_bugs`) is a method:
``state_grad_coefficient`` (the matrix the backward carry multiplies by) and ``gate_grads``
(how the decay and write-strength gradients of padded and first steps are masked).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import torch
from torch import Tensor

from ..model.case import RNNConfig
from ..families.gdn import L2_EPS
from ..families.matrix import NORM_EPS
from .layer_stack import LayerStackKernel, pre_norm, stacked_maps_backward

DEFAULT_CHUNK = 4
# the chunk sizes a sweep draws for it (kernel configuration "chunk"); tolerances measured at each (benchmarks/RESULTS.md)
CHUNK_SIZES = (2, 4, 8)
MAPS = ("w_q", "w_k", "w_v", "w_a", "w_b")  # the rows of the one input GEMM, in this order


def to_chunks(t: Tensor, chunk: int) -> Tensor:
    """(T, B, NH, ...) -> (B, NH, NC, chunk, ...), time padded with zeros to NC·chunk steps (a zero
    log decay, β, q, k, v: a padded step of the scan)."""
    T = t.shape[0]
    count = math.ceil(T / chunk)
    t = torch.cat([t, t.new_zeros((count * chunk - T,) + t.shape[1:])])
    t = t.reshape((count, chunk) + t.shape[1:])
    return t.permute((2, 3, 0, 1) + tuple(range(4, t.dim())))


def from_chunks(t: Tensor, steps: int) -> Tensor:
    """The inverse of :func:`to_chunks`: (B, NH, NC, chunk, ...) -> (steps, B, NH, ...)."""
    t = t.permute((2, 3, 0, 1) + tuple(range(4, t.dim())))
    return t.reshape((-1,) + t.shape[2:])[:steps]


def segment_sums(log_decay: Tensor) -> Tensor:
    """(…, c) -> (…, c, c): log D, entry (r, s) the sum Σ_{s<i≤r} log α_i on and below the diagonal
    (0 on it), −∞ above it. Each entry sums its own segment's terms: the difference G_r − G_s of
    two chunk-local cumulative sums would carry the float32 rounding of G_r, of size |G_r|·eps, into
    every D_rs however close s is to r (|G_r| grows by |log α| every step: tens under -strongdecay)."""
    c = log_decay.shape[-1]
    strict = torch.ones(c, c, dtype=torch.bool, device=log_decay.device).tril(-1)
    terms = log_decay[..., :, None].expand(log_decay.shape + (c,)).masked_fill(~strict, 0)
    return terms.cumsum(-2).masked_fill(mT(strict), -math.inf)


def mT(t: Tensor) -> Tensor:
    """The transpose of the last two dimensions."""
    return t.transpose(-1, -2)


def l2_normalise(t: Tensor) -> tuple[Tensor, Tensor]:
    """fla's l2norm over the last dimension: (t / n, n) with n = sqrt(|t|² + 1e-6)."""
    norm = torch.sqrt((t * t).sum(-1, keepdim=True) + L2_EPS)
    return t / norm, norm


def l2_normalise_backward(unit: Tensor, norm: Tensor, grad: Tensor) -> Tensor:
    """d/dt of t / n from d/d(t / n): (g − t̂ (t̂·g)) / n."""
    return (grad - unit * (unit * grad).sum(-1, keepdim=True)) / norm


@dataclass
class Projected:
    """A layer's per-step inputs of the recurrence, (T, B, ·) tensors, as its backward needs them."""

    index: int
    x: Tensor             # (T, B, I_l), normalised, padded steps zeroed
    rms: Tensor           # (T, B, 1), the norm's r
    q_unit: Tensor        # (T, B, NH, K), L2-normalised q
    q_norm: Tensor        # (T, B, NH, 1)
    k_unit: Tensor        # (T, B, NH, K); a key per head and write (a subclass's several)
    k_norm: Tensor        # (T, B, NH, 1)
    values: Tensor        # (T, B, NH, V), v per head and write
    decay_pre: Tensor     # (T, B, NH), w_a x̂ + b_a
    log_decay: Tensor     # (T, B, NH), log α, 0 at a padded step
    beta_raw: Tensor      # (T, B, NH), σ(w_b x̂ + b_b) before the length mask, per head and write
    betas: Tensor         # the same, 0 at a padded step


@dataclass
class Chunks:
    """What the chunkwise recurrence keeps for its backward, (B, NH, NC, c, ...) tensors."""

    q: Tensor             # chunked q̂ (…, c, K)
    k: Tensor             # chunked k̂ (…, c, K)
    v: Tensor             # chunked v (…, c, V)
    beta: Tensor          # chunked masked β (…, c)
    gamma: Tensor         # Γ_r = exp(G_r) (…, c)
    decay: Tensor         # D (…, c, c), exp(G_r − G_s) on and below the diagonal, 0 above
    qk: Tensor            # QKᵀ (…, c, c)
    kk: Tensor            # KKᵀ (…, c, c)
    a: Tensor             # A (…, c, c), strictly lower
    solve: Tensor         # I + A
    w: Tensor             # (I + A)⁻¹ diag(βΓ) K (…, c, K)
    u: Tensor             # U = u' − w S₀ (…, c, V)
    to_end: Tensor        # exp(G_C − G_r) (…, c)
    keys_to_end: Tensor   # Ek (…, c, K)
    transition: Tensor    # Φ (…, K, K)
    starts: Tensor        # S₀ of each chunk (…, K, V)


@dataclass
class Layer(Chunks, Projected):
    """What the forward of one gdn layer keeps for its backward: its per-step inputs and chunks."""


class GDNCPUKernel(LayerStackKernel):
    """The fused gdn kernel (see the module docstring); subclass and override one stage to mutate."""

    CHUNK_SIZES = CHUNK_SIZES

    def __init__(self, chunk: int = DEFAULT_CHUNK) -> None:
        if chunk < 1:
            raise ValueError(f"chunk={chunk} must be >= 1")
        self.chunk = chunk

    # ------------------------------------------------------------------ forward
    def map_widths(self, cfg: RNNConfig) -> list[int]:
        """The rows of each map of :data:`MAPS` (q, k, v, the decay, β), in that order."""
        NH, K, V = cfg.family.sizes(cfg)
        return [NH * K, NH * K, NH * V, NH, NH]

    def project(self, cfg: RNNConfig, p: Mapping[str, Tensor], x: Tensor, mask: Tensor, index: int) -> Projected:
        """The pre-norm, the one GEMM of every map, the L2 norms and the gates, masked at padded steps."""
        _, K, V = cfg.family.sizes(cfg)
        T, B = x.shape[:2]
        x = x * mask
        x, rms = pre_norm(x, NORM_EPS)
        proj = x @ torch.cat([p[kind] for kind in MAPS]).T
        q, k, v, decay_pre, write = proj.split(self.map_widths(cfg), dim=-1)
        if "b_a" in p:
            decay_pre, write = decay_pre + p["b_a"], write + p["b_b"]
        q_unit, q_norm = l2_normalise(q.reshape(T, B, -1, K))
        k_unit, k_norm = l2_normalise(k.reshape(T, B, -1, K))
        beta_raw = torch.sigmoid(write)
        log_decay = torch.nn.functional.logsigmoid(decay_pre) * mask  # a padded step: log α = 0, β = 0
        return Projected(index, x, rms, q_unit, q_norm, k_unit, k_norm, v.reshape(T, B, -1, V), decay_pre, log_decay,
                         beta_raw, beta_raw * mask)

    def layer_forward(self, cfg: RNNConfig, p: Mapping[str, Tensor], x: Tensor, mask: Tensor, h0: Tensor,
                      index: int) -> tuple[Tensor, Tensor, Layer]:
        """One layer: (y (T, B, H) masked, the final state (B, NH·K·V), what the backward keeps)."""
        NH, K, V = cfg.family.sizes(cfg)
        T, B = x.shape[:2]
        proj = self.project(cfg, p, x, mask, index)
        o, final, chunks = self.chunk_forward(proj.q_unit, proj.k_unit, proj.values, proj.log_decay, proj.betas,
                                              h0.reshape(B, NH, K, V), cfg.family.scale(p, cfg))
        return o.reshape(T, B, NH * V) * mask, final.reshape(B, NH * K * V), Layer(**vars(chunks), **vars(proj))

    def chunk_forward(self, q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, beta: Tensor, h0: Tensor,
                      scale: float) -> tuple[Tensor, Tensor, Chunks]:
        """The chunkwise gated delta rule over per-step inputs (T, B, NH, ·) (q̂, k̂, v; log α and β
        (T, B, NH), 0 at a padded step) from S₀ = ``h0`` (B, NH, K, V): the outputs o (T, B, NH, V)
        times ``scale``, the final state (B, NH, K, V) and what the backward keeps."""
        T, K = q.shape[0], q.shape[-1]
        c = self.chunk
        qc, kc, vc, beta = to_chunks(q, c), to_chunks(k, c), to_chunks(v, c), to_chunks(beta, c)
        chunked_log_decay = to_chunks(log_decay, c)
        strict = torch.ones(c, c, dtype=torch.bool, device=q.device).tril(-1)
        decay = segment_sums(chunked_log_decay).exp()
        gamma = chunked_log_decay.cumsum(-1).exp()                   # Γ = exp(G)
        qk, kk = qc @ mT(kc), kc @ mT(kc)
        a = beta[..., None] * decay * kk * strict
        solve = a + torch.eye(c, dtype=q.dtype, device=q.device)
        wy = torch.linalg.solve_triangular(solve, torch.cat([(beta * gamma)[..., None] * kc, beta[..., None] * vc], -1),
                                           upper=False, unitriangular=True)
        w, u_free = wy[..., :K], wy[..., K:]                         # w and u' of the module docstring
        to_end = decay[..., -1, :]                                   # exp(G_C − G_r): D's last row
        keys_to_end = to_end[..., None] * kc
        eye_k = torch.eye(K, dtype=q.dtype, device=q.device)
        transition = gamma[..., -1, None, None] * eye_k - mT(keys_to_end) @ w
        starts, final = self.carry_states(transition, mT(keys_to_end) @ u_free, h0)
        u = u_free - w @ starts
        o = (gamma[..., None] * (qc @ starts) + (decay * qk) @ u) * scale
        chunks = Chunks(qc, kc, vc, beta, gamma, decay, qk, kk, a, solve, w, u, to_end, keys_to_end, transition, starts)
        return from_chunks(o, T), final, chunks

    @staticmethod
    def carry_states(transition: Tensor, written: Tensor, h0: Tensor) -> tuple[Tensor, Tensor]:
        """The sequential loop over chunks: S₀ of every chunk (B, NH, NC, K, V) and the final state,
        from each chunk's S_end = Φ S₀ + ``written``."""
        state, starts = h0, []
        for n in range(transition.shape[2]):
            starts.append(state)
            state = transition[:, :, n] @ state + written[:, :, n]
        return torch.stack(starts, 2), state

    # ------------------------------------------------------------------ backward stages
    def state_grad_coefficient(self, layer: Chunks) -> Tensor:
        """The matrix whose transpose carries dS_end to dS₀ across a chunk: Φ = Π α_t (I − β_t k_t k_tᵀ)."""
        return layer.transition

    def gate_grads(self, d_log_decay: Tensor, d_beta: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """The gradients of log α and β (T, B, NH) as the layer's gates see them: 0 at a padded
        step, where the kernel forced log α = 0 and β = 0."""
        return d_log_decay * mask, d_beta * mask

    def chunk_backward(self, layer: Chunks, d_out: Tensor, d_final: Tensor,
                       scale: float) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
        """dq̂, dk̂, dv, d log α, dβ (chunked) and dS₀ of the first chunk, from dO (chunked) and
        the gradient of the final state (B, NH, K, V)."""
        L = layer
        c = L.decay.shape[-1]
        strict = torch.ones(c, c, dtype=torch.bool, device=d_out.device).tril(-1)
        pairs = L.decay * L.qk                                       # D ⊙ QKᵀ
        d_u_out = mT(pairs) @ d_out * scale                          # dU through the chunk's outputs
        through_out = mT(L.gamma[..., None] * L.q) @ d_out * scale - mT(L.w) @ d_u_out
        d_ends, d_first = self.carry_state_grads(mT(self.state_grad_coefficient(L)), through_out, d_final)
        d_u = d_u_out + L.keys_to_end @ d_ends
        d_rhs = torch.linalg.solve_triangular(mT(L.solve), d_u, upper=True, unitriangular=True)
        d_a = -(d_rhs @ mT(L.u)) * strict
        keys_start = L.k @ L.starts                                  # row r: S₀ᵀ k_r
        d_v = L.beta[..., None] * d_rhs
        d_beta = (d_rhs * (L.v - L.gamma[..., None] * keys_start)).sum(-1) + (d_a * L.decay * L.kk).sum(-1)
        d_w = -L.beta[..., None] * d_rhs
        d_gram = d_a * L.decay * L.beta[..., None]                   # d(KKᵀ)
        d_qk = (d_out @ mT(L.u)) * L.decay * scale                   # d(QKᵀ), lower with the diagonal
        d_state_end = L.u @ mT(d_ends)                               # dEk
        d_q = d_qk @ L.k + scale * L.gamma[..., None] * (d_out @ mT(L.starts))
        d_k = (L.gamma[..., None] * (d_w @ mT(L.starts)) + (d_gram + mT(d_gram)) @ L.k + mT(d_qk) @ L.q
               + L.to_end[..., None] * d_state_end)
        # the decay gradient by what each term depends on (module docstring): Γ_r, exp(G_C − G_r), D_rs
        through_gamma = L.gamma * ((keys_start * d_w).sum(-1) + scale * (d_out * (L.q @ L.starts)).sum(-1))
        through_gamma[..., -1] += L.gamma[..., -1] * (L.starts * d_ends).sum((-1, -2))
        through_to_end = (L.keys_to_end * d_state_end).sum(-1)
        through_pairs = (d_a * L.a + d_qk * L.qk) * strict
        d_log_decay = (through_gamma.flip(-1).cumsum(-1).flip(-1)
                       + through_to_end.cumsum(-1) - through_to_end
                       + (through_pairs.flip(-2).cumsum(-2).flip(-2) * strict).sum(-1))
        return d_q, d_k, d_v, d_log_decay, d_beta, d_first

    @staticmethod
    def carry_state_grads(coefficient_t: Tensor, through_out: Tensor, d_final: Tensor) -> tuple[Tensor, Tensor]:
        """The sequential loop over chunks, backwards: dS_end of every chunk and dS₀ of the first,
        with dS₀ = ``coefficient_t`` dS_end + ``through_out`` and dS_end of chunk n = dS₀ of n + 1."""
        grad, ends = d_final, []
        for n in reversed(range(coefficient_t.shape[2])):
            ends.append(grad)
            grad = coefficient_t[:, :, n] @ grad + through_out[:, :, n]
        return torch.stack(ends[::-1], 2), grad

    def layer_backward(self, cfg: RNNConfig, p: Mapping[str, Tensor], layer: Layer, mask: Tensor, dy: Tensor,
                       dhy: Tensor, need_weights: bool, need_x: bool) -> tuple[Tensor | None, Tensor, dict[str, Tensor]]:
        """dx, dh0 and (when asked) the layer's parameter gradients from dy and dhy."""
        NH, K, V = cfg.family.sizes(cfg)
        T, B = dy.shape[:2]
        d_out = to_chunks((dy * mask).reshape(T, B, NH, V), self.chunk)
        d_q, d_k, d_v, d_log_decay, d_beta, dh0 = self.chunk_backward(layer, d_out, dhy.reshape(B, NH, K, V),
                                                                     cfg.family.scale(p, cfg))
        d_log_decay, d_beta = self.gate_grads(from_chunks(d_log_decay, T), from_chunks(d_beta, T), mask)
        dx, grads = self.projection_backward(p, layer, mask, from_chunks(d_q, T), from_chunks(d_k, T),
                                             from_chunks(d_v, T), d_log_decay, d_beta, need_weights, need_x)
        return dx, dh0.reshape(B, NH * K * V), grads

    @staticmethod
    def projection_backward(p: Mapping[str, Tensor], proj: Projected, mask: Tensor, d_q: Tensor, d_k: Tensor,
                            d_v: Tensor, d_log_decay: Tensor, d_beta: Tensor, need_weights: bool,
                            need_x: bool) -> tuple[Tensor | None, dict[str, Tensor]]:
        """dx (when asked) and the parameter gradients (when asked) from the gradients of the per-step
        inputs of :meth:`project` (shaped as its fields; log α's and β's already masked)."""
        T, B = d_q.shape[:2]
        d_decay_pre = d_log_decay * torch.sigmoid(-proj.decay_pre)
        d_write = d_beta * proj.beta_raw * (1 - proj.beta_raw)
        d_proj = torch.cat([l2_normalise_backward(proj.q_unit, proj.q_norm, d_q).reshape(T, B, -1),
                            l2_normalise_backward(proj.k_unit, proj.k_norm, d_k).reshape(T, B, -1),
                            d_v.reshape(T, B, -1), d_decay_pre, d_write], dim=-1)
        dx, grads = stacked_maps_backward(proj.x, proj.rms, mask, d_proj, p, MAPS, need_x, need_weights)
        if need_weights and "b_a" in p:
            grads["b_a"], grads["b_b"] = d_decay_pre.sum((0, 1)), d_write.sum((0, 1))
        return dx, grads
