"""The project's own fused CPU kernel of the ``s6`` family: a chunked scan with a hand-written backward.

Semantics are :mod:`gradcheck_rnn.families.s6`. Nothing goes through autograd. Per layer:

* Forward: the padded inputs are zeroed (as Mamba's callers pad with zeros) and every row
  RMS-normalised (x̂ = x / r, r = sqrt(mean(x²) + 1), the family's pre-norm), then every
  projection is one GEMM over all T·B rows (``[u | z]``, ``[δ | B | C]``, Δ); Δ is multiplied by
  the length mask, so a padded step has exp(ΔA) = 1 and ΔBu = 0 and leaves the state as it was.
  The recurrence h_t = a_t ⊙ h_{t−1} + b_t (a = exp(ΔA), b = ΔBu) is a chunked scan: time is
  cut into chunks of ``chunk`` steps; every chunk at once (step j of all chunks in one op)
  composes its affine maps, giving h_t = Ā_t ⊙ h_start + B̄_t; then one sequential pass over
  the chunks carries the state across each chunk boundary (h_start of chunk k+1 = the last h of
  chunk k), and every step's state follows from its chunk's h_start.
* Backward: λ_t = dL/dh_t (all paths) obeys λ_t = g_t + a_{t+1} ⊙ λ_{t+1} with λ after the last
  step = dhy: the same chunked scan run on the time-reversed sequence, whose carry crosses the
  chunk boundaries the other way. Every parameter gradient is then a reduction or a GEMM over
  all T·B rows; dx of the layer is the gradient of the layer below's output, through the norm:
  dx = (dx̂ − x̂·mean(x̂ ⊙ dx̂)) / r.

``chunk`` is small by default so that the short cases of a sweep (T ≤ 8 in ci) already cross
chunk boundaries; tests run other chunk sizes. Each stage is a method, so that a mutant
(:mod:`gradcheck_rnn.targets.kernel_bugs`) overrides one stage: ``scan`` (and its ``carry_rule``, the
arithmetic of the hand-off across a chunk boundary: a plain function of tensors, so that the
Triton scan of :mod:`gradcheck_rnn.kernels.fused_gpu.s6` runs the very same rule, and a bug in it
is written once for both kernels),
``padded_delta`` (the Δ that a padded step sees in the backward's decay), ``gate_backward`` (dz),
``head_state_grad`` (the dhy a layer's reverse scan starts from).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch
from torch import Tensor

from ..model.case import RNNConfig
from ..families.s6 import NORM_EPS
from .layer_stack import LayerStackKernel, pre_norm, pre_norm_backward

DEFAULT_CHUNK = 4


def decayed_carry(a_last, b_last, h_start):  # no annotations: triton.jit reads them as Triton types
    """The state after a chunk: its composed map h -> Ā h + B̄ applied to the chunk's start. Plain
    arithmetic on torch tensors, or on Triton's inside a kernel (fused_gpu/scan.py jits it)."""
    return a_last * h_start + b_last


# (Ā of the chunk's last step, B̄ of it, the chunk's start) -> the next chunk's start
CarryRule = Callable[[Any, Any, Any], Any]


@dataclass
class Layer:
    """What the forward of one layer keeps for its backward."""

    index: int
    x: Tensor          # (T, B, I_l), normalised, padded steps zeroed
    rms: Tensor        # (T, B, 1), the norm's r
    u: Tensor          # (T, B, H)
    z: Tensor | None   # (T, B, H), None without the gate
    delta_low: Tensor  # (T, B, R)
    b: Tensor          # (T, B, N)
    c: Tensor          # (T, B, N)
    dt: Tensor         # (T, B, H), before the softplus
    delta: Tensor      # (T, B, H), masked
    a: Tensor          # (H, N), A = −exp(a_log)
    decay: Tensor      # (T, B, H, N), exp(ΔA)
    h_prev: Tensor     # (T, B, H, N), the state before each step
    h: Tensor          # (T, B, H, N), the state after each step
    y_core: Tensor     # (T, B, H), C h + D u before the gate


class S6CPUKernel(LayerStackKernel):
    """The fused s6 kernel (see the module docstring); subclass and override one stage to mutate."""

    def __init__(self, chunk: int = DEFAULT_CHUNK) -> None:
        if chunk < 1:
            raise ValueError(f"chunk={chunk} must be >= 1")
        self.chunk = chunk

    # ------------------------------------------------------------------ the scan
    def chunk_scan(self, a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
        """Inclusive scan of the affine maps h -> a_t h + b_t inside each chunk, all chunks at once:
        a, b (C, K, ...) -> (Ā, B̄) with h_t = Ā_t h_start + B̄_t, written over a and b (the
        scan's own padded copies). K − 1 steps, each over one step of every chunk: one pass over
        the data in all (a log-depth doubling scan makes log2(K) passes and a copy per pass, and
        a scan this size is bound by memory, not arithmetic)."""
        for j in range(1, a.shape[1]):
            b[:, j].addcmul_(a[:, j], b[:, j - 1])
            a[:, j].mul_(a[:, j - 1])
        return a, b

    def carry_rule(self, reverse: bool) -> CarryRule:
        """How the state is handed across a chunk boundary (of the forward, or with ``reverse`` of
        the backward's reverse scan): :func:`decayed_carry`."""
        return decayed_carry

    def scan(self, a: Tensor, b: Tensor, h0: Tensor, reverse: bool = False) -> Tensor:
        """h_t = a_t ⊙ h_{t−1} + b_t for t = 0..T−1 from h0: (T, ...) -> (T, ...), chunked;
        ``reverse`` says that the backward runs it on time-reversed sequences."""
        T, K = a.shape[0], self.chunk
        C = math.ceil(T / K)
        pad = C * K - T  # identity maps (a = 1, b = 0) fill the last chunk
        # fresh copies (chunk_scan writes over them), padded with identity maps
        a_c = torch.cat([a, a.new_ones((pad,) + a.shape[1:])]).reshape((C, K) + a.shape[1:])
        b_c = torch.cat([b, b.new_zeros((pad,) + b.shape[1:])]).reshape((C, K) + b.shape[1:])
        a_bar, b_bar = self.chunk_scan(a_c, b_c)
        carry, starts = self.carry_rule(reverse), [h0]
        for k in range(C - 1):
            starts.append(carry(a_bar[k, -1], b_bar[k, -1], starts[-1]))
        h = a_bar * torch.stack(starts)[:, None] + b_bar
        return h.reshape((C * K,) + a.shape[1:])[:T]

    # ------------------------------------------------------------------ forward
    @staticmethod
    def activation(cfg: RNNConfig, dt: Tensor) -> Tensor:
        """Δ from its pre-activation: softplus, or the square with -nosoftplus (families/s6.py)."""
        return torch.nn.functional.softplus(dt, threshold=float("inf")) if cfg.option("softplus") else dt * dt

    def layer_forward(self, cfg: RNNConfig, p: Mapping[str, Tensor], x: Tensor, mask: Tensor, h0: Tensor,
                      index: int) -> tuple[Tensor, Tensor, Layer]:
        H, N, R = cfg.hidden_size, cfg.option("state_dim"), cfg.option("dt_rank")
        T, B = x.shape[:2]
        x = x * mask
        x, rms = pre_norm(x, NORM_EPS)
        uz = x @ p["w_in"].T
        u, z = uz[..., :H], (uz[..., H:] if cfg.option("gated") else None)
        proj = u @ p["w_x"].T
        delta_low, b, c = proj[..., :R], proj[..., R:R + N], proj[..., R + N:]
        dt = delta_low @ p["w_dt"].T
        if "b_dt" in p:
            dt = dt + p["b_dt"]
        delta = self.activation(cfg, dt) * mask
        a = -torch.exp(p["a_log"])
        decay = torch.exp(delta[..., None] * a)
        h = self.scan(decay, (delta * u)[..., None] * b[:, :, None, :], h0.reshape(B, H, N))
        h_prev = torch.cat([h0.reshape(1, B, H, N), h[:-1]])
        y_core = (h * c[:, :, None, :]).sum(-1) + p["d"] * u
        y = y_core * torch.nn.functional.silu(z) if z is not None else y_core
        state = Layer(index, x, rms, u, z, delta_low, b, c, dt, delta, a, decay, h_prev, h, y_core)
        return y * mask, h[-1].reshape(B, H * N) if T else h0, state

    # ------------------------------------------------------------------ backward
    def gate_backward(self, layer: Layer, g: Tensor) -> tuple[Tensor, Tensor | None]:
        """dL/dy_core and dL/dz from dL/dy (y = y_core ⊙ silu(z))."""
        if layer.z is None:
            return g, None
        s = torch.sigmoid(layer.z)
        return g * layer.z * s, g * layer.y_core * s * (1 + layer.z * (1 - s))

    def padded_delta(self, layer: Layer, cfg: RNNConfig, p: Mapping[str, Tensor], mask: Tensor) -> Tensor:
        """The Δ whose decay the reverse scan uses: the masked one (0 at padded steps)."""
        return layer.delta

    def head_state_grad(self, dhy: Tensor, layer: Layer, num_layers: int) -> Tensor:
        """The gradient that the layer's reverse scan starts from: its part of dhy."""
        return dhy

    def layer_backward(self, cfg: RNNConfig, p: Mapping[str, Tensor], layer: Layer, mask: Tensor, dy: Tensor,
                       dhy: Tensor, need_weights: bool, need_x: bool) -> tuple[Tensor | None, Tensor, dict[str, Tensor]]:
        """dx, dh0 and (when asked) the layer's parameter gradients from dy and dhy."""
        H, N = cfg.hidden_size, cfg.option("state_dim")
        T, B = dy.shape[:2]
        dy_core, dz = self.gate_backward(layer, dy * mask)
        g = dy_core[..., None] * layer.c[:, :, None, :]                 # dL/dh_t through y_t
        decay = torch.exp(self.padded_delta(layer, cfg, p, mask)[..., None] * layer.a)
        # λ_t = g_t + a_{t+1} λ_{t+1}, λ after the last step = dhy: a forward scan of reversed time
        shifted = torch.cat([decay[1:], decay.new_ones((1,) + decay.shape[1:])])
        start = self.head_state_grad(dhy, layer, cfg.num_layers).reshape(B, H, N)
        lam = self.scan(shifted.flip(0), g.flip(0), start, reverse=True).flip(0)
        dh0 = (decay[0] * lam[0]).reshape(B, H * N) if T else dhy
        d_arg = lam * layer.h_prev * layer.decay                        # dL/d(ΔA)
        lam_b = (lam * layer.b[:, :, None, :]).sum(-1)                  # Σ_n λ B
        d_delta = ((d_arg * layer.a).sum(-1) + lam_b * layer.u) * mask
        du = lam_b * layer.delta + dy_core * p["d"]
        db = (lam * (layer.delta * layer.u)[..., None]).sum(-2)
        dc = (dy_core[..., None] * layer.h).sum(-2)
        d_dt = d_delta * (torch.sigmoid(layer.dt) if cfg.option("softplus") else 2 * layer.dt)
        d_low = d_dt @ p["w_dt"]
        d_proj = torch.cat([d_low, db, dc], dim=-1)
        du = du + d_proj @ p["w_x"]
        duz = torch.cat([du, dz], dim=-1) if dz is not None else du
        dx = None
        if need_x:
            dx_hat = duz @ p["w_in"]
            dx = pre_norm_backward(layer.x, layer.rms, dx_hat, mask)
        grads: dict[str, Tensor] = {}
        if need_weights:
            rows = T * B
            grads["w_in"] = duz.reshape(rows, -1).T @ layer.x.reshape(rows, -1)
            grads["w_x"] = d_proj.reshape(rows, -1).T @ layer.u.reshape(rows, -1)
            grads["w_dt"] = d_dt.reshape(rows, -1).T @ layer.delta_low.reshape(rows, -1)
            if "b_dt" in p:
                grads["b_dt"] = d_dt.sum((0, 1))
            grads["a_log"] = (d_arg * layer.delta[..., None]).sum((0, 1)) * layer.a
            grads["d"] = (dy_core * layer.u).sum((0, 1))
        return dx, dh0, grads
