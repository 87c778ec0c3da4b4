"""The project's own fused CPU kernel of the ``kda`` family: the chunkwise gated delta rule with a
decay per key unit, with a hand-written backward.

Semantics are :mod:`gradcheck_rnn.families.kda`. Nothing goes through autograd. The chunkwise form
is :mod:`.gdn_cpu`'s (read its docstring first) with the scalar decay of a step replaced by a
vector over the K key units, as flash-linear-attention's ``chunk_kda`` does: inside a chunk with
start state S₀, G_r = Σ_{i≤r} log α_i (a K-vector, chunk-local), Γ_r = exp(G_r) and
D_rs = exp(G_r − G_s) per key unit for s ≤ r (0 above; each summed over its own segment,
:func:`~.gdn_cpu.segment_sums`), so the decay can no longer be taken out of a product over keys:

    P_rs = Σ_j k_rj k_sj D_rsj,  M_rs = Σ_j q_rj k_sj D_rsj         (the decayed Gram matrices)
    A_rs = β_r P_rs (s < r),  (I + A) U = diag(β)(V − (Γ ⊙ K) S₀)
    w = (I + A)⁻¹ diag(β)(Γ ⊙ K),  u' = (I + A)⁻¹ diag(β) V,  U = u' − w S₀
    O = scale ((Γ ⊙ Q) S₀ + M U),  S_end = Φ S₀ + Ekᵀ u',  Ek_r = exp(G_C − G_r) ⊙ k_r
    Φ = diag(Γ_C) − Ekᵀ w            the chunk's product of (I − β_t k_t k_tᵀ) diag(α_t)

The only sequential loops hand S₀ forward across chunks and dS_end backward (the carry keeps the
full K×K coefficient Φᵀ, as gdn's). A padded step gets log α = 0 and β = 0, and leaves the state
as it was.

Backward: every gradient of a chunk follows in parallel once dS_end is known. The decay gradient
of key unit j at step i, d log α_ij, collects without cancellation the terms that depend on it:
through Γ_r (r ≥ i, a reverse cumulative sum over the chunk's steps), through exp(G_C − G_r)
(r < i) and through the pairwise D_rsj (s < i ≤ r) of P and M; then the gate's chain rule,
d z = −exp(a_log) σ(z) d log α and d a_log = Σ log α ⊙ d log α. The parameter gradients are GEMMs
over all T·B rows, computed only when a parameter is requested; dx goes back through the norms.

Cost: P and M hold a (c, c, K) tensor per chunk, K times gdn's (c, c): chunks of 4 keep it small.

Each stage a mutant needs (:mod:`gradcheck_rnn.targets.kernel_bugs`) is a method:
``state_grad_coefficient`` (the matrix the backward carry multiplies by: its diagonal is the
chunk's decay), ``norm_backward`` (the L2 norms' backward of q and k), ``time_suffix_sums`` (the
reverse cumulative sum over a chunk's steps that turns the Γ terms into d log α) and the
inherited ``gate_grads`` (the masking of the gates' gradients at padded steps).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch
from torch import Tensor

from ..families.matrix import NORM_EPS
from ..model.case import RNNConfig
from .gdn_cpu import GDNCPUKernel, from_chunks, l2_normalise, l2_normalise_backward, mT, segment_sums, to_chunks
from .layer_stack import pre_norm, stacked_maps_backward

MAPS = ("w_q", "w_k", "w_v", "w_a1", "w_b")  # the rows of the one input GEMM, in this order


@dataclass
class Layer:
    """What the forward of one layer keeps for its backward. Chunked tensors are (B, NH, NC, c, ...)."""

    index: int
    x: Tensor             # (T, B, I_l), normalised, padded steps zeroed
    rms: Tensor           # (T, B, 1), the norm's r
    q_unit: Tensor        # (T, B, NH, K), L2-normalised q
    q_norm: Tensor        # (T, B, NH, 1)
    k_unit: Tensor        # (T, B, NH, K)
    k_norm: Tensor        # (T, B, NH, 1)
    low: Tensor           # (T, B, R), w_a1 x̂
    gate_pre: Tensor      # (T, B, NH, K), z = w_a2 w_a1 x̂ + b_a
    log_decay_raw: Tensor  # (T, B, NH, K), log α before the length mask
    beta_raw: Tensor      # (T, B, NH), σ(w_b x̂ + b_b) before the length mask
    q: Tensor             # chunked q̂ (…, c, K)
    k: Tensor             # chunked k̂ (…, c, K)
    v: Tensor             # chunked v (…, c, V)
    beta: Tensor          # chunked masked β (…, c)
    gamma: Tensor         # Γ_r = exp(G_r) (…, c, K)
    decay: Tensor         # D (…, c, c, K), exp(G_r − G_s) on and below the diagonal, 0 above
    qk: Tensor            # M (…, c, c), lower with the diagonal
    kk: Tensor            # P (…, c, c)
    solve: Tensor         # I + A
    w: Tensor             # (I + A)⁻¹ diag(β)(Γ ⊙ K) (…, c, K)
    u: Tensor             # U = u' − w S₀ (…, c, V)
    to_end: Tensor        # exp(G_C − G_r) (…, c, K)
    keys_to_end: Tensor   # Ek (…, c, K)
    transition: Tensor    # Φ (…, K, K)
    starts: Tensor        # S₀ of each chunk (…, K, V)


def pair_sum(a: Tensor, b: Tensor, decay: Tensor) -> Tensor:
    """Σ_j a_rj b_sj D_rsj: (…, c, K), (…, c, K), (…, c, c, K) -> (…, c, c)."""
    return (a[..., :, None, :] * b[..., None, :, :] * decay).sum(-1)


class KDACPUKernel(GDNCPUKernel):
    """The fused kda kernel (see the module docstring); subclass and override one stage to mutate.
    It keeps gdn's chunk hand-offs (``carry_states``, ``carry_state_grads``) and ``gate_grads``."""

    # ------------------------------------------------------------------ forward
    def layer_forward(self, cfg: RNNConfig, p: Mapping[str, Tensor], x: Tensor, mask: Tensor, h0: Tensor,
                      index: int) -> tuple[Tensor, Tensor, Layer]:
        """One layer: (y (T, B, H) masked, the final state (B, NH·K·V), what the backward keeps)."""
        fam = cfg.family
        NH, K, V = fam.sizes(cfg)
        T, B = x.shape[:2]
        c = self.chunk
        x = x * mask
        x, rms = pre_norm(x, NORM_EPS)
        proj = x @ torch.cat([p[kind] for kind in MAPS]).T
        q, k, v, low, write = proj.split([NH * K, NH * K, NH * V, fam.rank(cfg), NH], dim=-1)
        gate_pre = low @ p["w_a2"].T
        if "b_a" in p:
            gate_pre, write = gate_pre + p["b_a"], write + p["b_b"]
        gate_pre = gate_pre.reshape(T, B, NH, K)
        q_unit, q_norm = l2_normalise(q.reshape(T, B, NH, K))
        k_unit, k_norm = l2_normalise(k.reshape(T, B, NH, K))
        beta_raw = torch.sigmoid(write)
        log_decay_raw = -p["a_log"].exp()[:, None] * torch.nn.functional.softplus(gate_pre)
        log_decay = log_decay_raw * mask[..., None]                    # a padded step: log α = 0, β = 0
        qc, kc, vc = to_chunks(q_unit, c), to_chunks(k_unit, c), to_chunks(v.reshape(T, B, NH, V), c)
        beta = to_chunks(beta_raw * mask, c)
        chunked_log_decay = to_chunks(log_decay, c)                    # (…, c, K)
        decay = segment_sums(mT(chunked_log_decay)).exp().permute(0, 1, 2, 4, 5, 3)  # (…, c, c, K)
        gamma = chunked_log_decay.cumsum(-2).exp()
        qk, kk = pair_sum(qc, kc, decay), pair_sum(kc, kc, decay)
        strict = torch.ones(c, c, dtype=torch.bool, device=x.device).tril(-1)
        solve = beta[..., None] * kk * strict + torch.eye(c, dtype=x.dtype, device=x.device)
        wy = torch.linalg.solve_triangular(solve, torch.cat([beta[..., None] * gamma * kc, beta[..., None] * vc], -1),
                                           upper=False, unitriangular=True)
        w, u_free = wy[..., :K], wy[..., K:]
        to_end = decay[..., -1, :, :]                                  # exp(G_C − G_r): D's last row
        keys_to_end = to_end * kc
        transition = torch.diag_embed(gamma[..., -1, :]) - mT(keys_to_end) @ w
        starts, final = self.carry_states(transition, mT(keys_to_end) @ u_free, h0.reshape(B, NH, K, V))
        u = u_free - w @ starts
        o = ((gamma * qc) @ starts + qk @ u) * fam.scale(p, cfg)
        y = from_chunks(o, T).reshape(T, B, NH * V) * mask
        layer = Layer(index, x, rms, q_unit, q_norm, k_unit, k_norm, low, gate_pre, log_decay_raw, beta_raw, qc, kc,
                      vc, beta, gamma, decay, qk, kk, solve, w, u, to_end, keys_to_end, transition, starts)
        return y, final.reshape(B, NH * K * V), layer

    # ------------------------------------------------------------------ backward stages
    def state_grad_coefficient(self, layer: Layer) -> Tensor:
        """The matrix whose transpose carries dS_end to dS₀ across a chunk:
        Φ = Π (I − β_t k_t k_tᵀ) diag(α_t)."""
        return layer.transition

    def norm_backward(self, unit: Tensor, norm: Tensor, grad: Tensor) -> Tensor:
        """d/dt of t / n from d/d(t / n), for q and k: from the unit vector of the input itself."""
        return l2_normalise_backward(unit, norm, grad)

    def time_suffix_sums(self, t: Tensor) -> Tensor:
        """Σ_{r≥i} t_r over the steps of each chunk, per key unit: (…, c, K) -> (…, c, K)."""
        return t.flip(-2).cumsum(-2).flip(-2)

    def chunk_backward(self, layer: Layer, d_out: Tensor, d_final: Tensor,
                       scale: float) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
        """dq̂, dk̂, dv, d log α (…, c, K), dβ (chunked) and dS₀ of the first chunk, from dO
        (chunked) and the gradient of the final state (B, NH, K, V)."""
        L = layer
        c = L.qk.shape[-1]
        strict = torch.ones(c, c, dtype=torch.bool, device=d_out.device).tril(-1)
        d_u_out = mT(L.qk) @ d_out * scale                           # dU through the chunk's outputs
        through_out = mT(L.gamma * L.q) @ d_out * scale - mT(L.w) @ d_u_out
        d_ends, d_first = self.carry_state_grads(mT(self.state_grad_coefficient(L)), through_out, d_final)
        d_u = d_u_out + L.keys_to_end @ d_ends
        d_rhs = torch.linalg.solve_triangular(mT(L.solve), d_u, upper=True, unitriangular=True)
        d_kk = -(d_rhs @ mT(L.u)) * strict * L.beta[..., None]      # dP (A = β_r P_rs below the diagonal)
        keys_start = (L.gamma * L.k) @ L.starts                      # row r: S₀ᵀ (Γ_r ⊙ k_r)
        d_v = L.beta[..., None] * d_rhs
        d_beta = (d_rhs * (L.v - keys_start)).sum(-1) - ((d_rhs @ mT(L.u)) * strict * L.kk).sum(-1)
        d_keys_gamma = -L.beta[..., None] * (d_rhs @ mT(L.starts))   # d(Γ ⊙ K)
        d_qk = (d_out @ mT(L.u)) * scale * torch.ones_like(strict).tril()  # dM, lower with the diagonal
        d_ek = L.u @ mT(d_ends)                                       # dEk
        weighted_kk, weighted_qk = d_kk[..., None] * L.decay, d_qk[..., None] * L.decay
        read_start = d_out @ mT(L.starts) * scale                     # row r: S₀ dO_r
        d_q = (weighted_qk * L.k[..., None, :, :]).sum(-2) + L.gamma * read_start
        d_k = ((weighted_kk * L.k[..., None, :, :]).sum(-2) + (weighted_kk * L.k[..., :, None, :]).sum(-3)
               + (weighted_qk * L.q[..., :, None, :]).sum(-3) + L.gamma * d_keys_gamma + L.to_end * d_ek)
        # d log α by what each term depends on (module docstring): Γ_r, exp(G_C − G_r), D_rs
        through_gamma = L.gamma * (L.k * d_keys_gamma + L.q * read_start)
        through_gamma[..., -1, :] += L.gamma[..., -1, :] * (L.starts * d_ends).sum(-1)
        through_to_end = L.keys_to_end * d_ek
        through_pairs = (weighted_kk * L.k[..., :, None, :] * L.k[..., None, :, :]
                         + weighted_qk * L.q[..., :, None, :] * L.k[..., None, :, :]) * strict[..., None]
        d_log_decay = (self.time_suffix_sums(through_gamma) + through_to_end.cumsum(-2) - through_to_end
                       + (through_pairs.flip(-3).cumsum(-3).flip(-3) * strict[..., None]).sum(-2))
        return d_q, d_k, d_v, d_log_decay, d_beta, d_first

    def layer_backward(self, cfg: RNNConfig, p: Mapping[str, Tensor], layer: Layer, mask: Tensor, dy: Tensor,
                       dhy: Tensor, need_weights: bool, need_x: bool) -> tuple[Tensor | None, Tensor, dict[str, Tensor]]:
        """dx, dh0 and (when asked) the layer's parameter gradients from dy and dhy."""
        fam = cfg.family
        NH, K, V = fam.sizes(cfg)
        T, B = dy.shape[:2]
        d_out = to_chunks((dy * mask).reshape(T, B, NH, V), self.chunk)
        d_q, d_k, d_v, d_log_decay, d_beta, dh0 = self.chunk_backward(layer, d_out, dhy.reshape(B, NH, K, V),
                                                                     fam.scale(p, cfg))
        # gdn's masking stage, on (T, B, NH, K) and (T, B, NH, 1)
        d_log_decay, d_beta = self.gate_grads(from_chunks(d_log_decay, T), from_chunks(d_beta, T)[..., None],
                                              mask[..., None])
        d_beta = d_beta[..., 0]
        d_gate = d_log_decay * -p["a_log"].exp()[:, None] * torch.sigmoid(layer.gate_pre)  # dz
        d_gate = d_gate.reshape(T, B, NH * K)
        d_write = d_beta * layer.beta_raw * (1 - layer.beta_raw)
        d_proj = torch.cat([self.norm_backward(layer.q_unit, layer.q_norm, from_chunks(d_q, T)).reshape(T, B, -1),
                            self.norm_backward(layer.k_unit, layer.k_norm, from_chunks(d_k, T)).reshape(T, B, -1),
                            from_chunks(d_v, T).reshape(T, B, -1), d_gate @ p["w_a2"], d_write], dim=-1)
        dx, grads = stacked_maps_backward(layer.x, layer.rms, mask, d_proj, p, MAPS, need_x, need_weights)
        if need_weights:
            rows = T * B
            grads["w_a2"] = d_gate.reshape(rows, -1).T @ layer.low.reshape(rows, -1)
            grads["a_log"] = (d_log_decay * layer.log_decay_raw).sum((0, 1, 3))
            if "b_a" in p:
                grads["b_a"], grads["b_b"] = d_gate.sum((0, 1)), d_write.sum((0, 1))
        return dx, dh0.reshape(B, NH * K * V), grads
