"""The ``s6`` family: Mamba's selective scan (Gu and Dao 2023) without its convolution.

Per layer, from its input x_t (I_l wide; y of the layer below for l > 0), with H channels, N
state dimensions per channel and a rank-R map for Δ:

    x̂ = x_t / sqrt(mean(x_t²) + 1)          the pre-norm (over the I_l features), see below
    [u | z] = W_in x̂                        w_in (2H, I_l), (H, I_l) with -nogate
    [δ | B | C] = W_x u                     w_x (R + 2N, H)
    Δ = softplus(W_dt δ + b_dt)             w_dt (H, R), b_dt (H,) "delta_bias" (absent with -nobias);
                                            with -nosoftplus Δ = (W_dt δ + b_dt)², see below
    A = −exp(a_log)                         a_log (H, N): negative, per channel and state
    h_t = exp(Δ ⊙ A) ⊙ h_{t−1} + (Δ ⊙ u) ⊗ B          h (H, N)
    y_t = (h_t C) + d ⊙ u,  times silu(z) unless -nogate    d (H,)

The state h is the case's h0 / hy, flattened channel-major to H·N (element e·N + n); there is
no c. y is H wide and is the next layer's input. Padding: a step past a sequence's length leaves
h unchanged and outputs 0, which is exactly Δ = 0 there (exp(0·A) = 1, 0·B·u = 0) — what
Mamba's kernels get by zero-padding Δ, and what they get wrong where a delta_bias or the
softplus makes Δ of a zero input non-zero (state-spaces/mamba #368).

Without the softplus, Mamba's kernel takes Δ as given and relies on its caller for Δ ≥ 0. A
random case cannot promise that (a negative Δ makes exp(ΔA) > 1, and three stacked layers
overflowed float64 in a sweep), so this family squares the map instead: Δ ≥ 0 always, and a zero
input without delta_bias still gives Δ = 0, the property #368 turns on.

Every layer's input is RMS-normalised first, as a Mamba block normalises the input of its mixer,
and for the same reason: a layer is a polynomial of degree 4 in its input (u·B·C·z), so a stack
without normalisation grows like the 4^L-th power of its input, and three layers of an ordinary
draw overflowed float32 (a correct kernel must never fail for values float32 cannot hold). The
normaliser is ε = 1, not Mamba's 1e-5: |x̂| ≤ sqrt(I_l) in every element, so a stack stays O(1),
and the map never amplifies an absolute error (its derivative is at most 1/sqrt(1) = 1 in norm),
so a correct float32 kernel's rounding in a near-zero row of y is not blown up to O(1) in the next
layer. No scale weight: it would be a per-column scale of w_in. A padded step's zero input stays 0.

Case id: ``s6-L2-uni-I3-H4-N2-R1[-nosoftplus][-nogate][-nobias]-T7-B3-…``. A selective scan runs
forward in time only: there is no bidirectional s6 (Mamba gets one by running two layers), so
the generator never draws one and ``-bi`` is refused.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np

from .base import Family, Option, RNNConfig

NORM_EPS = 1.0
# Data a bucketed JAX program passes in each unit's parameters (never drawn, never reported):
# the real input width of the layer, and the config's switches as 0/1.
WIDTH, SOFTPLUS_ON, GATED_ON = "@width", "@softplus", "@gated"
MIN_BUCKET = 4
MEMORY_SHIFT = 4.0  # -longmem: a_log − 4


class S6Family(Family):
    """The selective scan, as described in the module docstring."""

    kernels = {
        "fused-cpu": "gradcheck_rnn.kernels.s6_cpu:S6CPUKernel",
        "fused-gpu": "gradcheck_rnn.kernels.fused_gpu.s6:S6GPUKernel",
    }
    mutants = {
        "s6-padded-step-decay": ("fused-cpu", "gradcheck_rnn.targets.kernel_bugs:S6PaddedStepDecay"),
        "s6-reverse-carry-undecayed": ("fused-cpu", "gradcheck_rnn.targets.kernel_bugs:S6ReverseCarryUndecayed"),
        "s6-gate-grad-dropped": ("fused-cpu", "gradcheck_rnn.targets.kernel_bugs:S6GateGradDropped"),
        "s6-lower-layer-dhy-dropped": ("fused-cpu", "gradcheck_rnn.targets.kernel_bugs:S6LowerLayerDhyDropped"),
        "gpu-s6-reverse-carry-undecayed": ("fused-gpu", "gradcheck_rnn.targets.kernel_bugs:S6ReverseCarryUndecayed"),
    }

    def output_size(self, config: RNNConfig) -> int:
        return config.hidden_size

    def h_size(self, config: RNNConfig) -> int:
        return config.hidden_size * config.option("state_dim")

    def unit_shapes(self, config: RNNConfig, layer: int) -> dict[str, tuple[int, ...]]:
        H, N, R = config.hidden_size, config.option("state_dim"), config.option("dt_rank")
        shapes = {"w_in": ((2 if config.option("gated") else 1) * H, self.layer_input_size(config, layer)),
                  "w_x": (R + 2 * N, H), "w_dt": (H, R)}
        if config.bias:
            shapes["b_dt"] = (H,)
        return {**shapes, "a_log": (H, N), "d": (H,)}

    def gated_kinds(self) -> frozenset[str]:
        return frozenset({"w_in"})

    def keeps_memory(self, config: RNNConfig) -> bool:
        return True

    def hold_memory(self, config: RNNConfig, params: Mapping[str, Any]) -> dict[str, Any]:
        """A = −exp(a_log) shrunk by e^4 (≈ 55×): Δ·A near 0, exp(ΔA) near 1, the "hard mode" of
        accelerated-scan PR #15, where a wrong carry across chunks can no longer hide in a decay."""
        return {k: v - MEMORY_SHIFT if k.endswith(".a_log") else v for k, v in params.items()}

    def draw_options(self, rng: Any, hidden_size: int) -> dict[str, Any]:
        """N in 1..4 and R in 1..3 (small, as every drawn size); each switch off a quarter of the time."""
        return {"state_dim": int(rng.integers(1, 5)), "dt_rank": int(rng.integers(1, 4)),
                "softplus": bool(rng.random() >= 0.25), "gated": bool(rng.random() >= 0.25)}

    def step(self, ops: Any, p: Mapping[str, Any], x: Any, h: Any, c: Any, config: RNNConfig) -> tuple[Any, Any, Any]:
        """One step; in a bucketed program (:meth:`bucket`) the switches are 0/1 data in ``p``, and
        ``on·a + (1 − on)·b`` is exactly a or b for finite values, gradients included."""
        H, N, R = config.hidden_size, config.option("state_dim"), config.option("dt_rank")
        width = p.get(WIDTH, x.shape[-1])  # padded columns of x are zero: the sum is the real one
        x = x / ops.sqrt((x * x).sum(-1)[..., None] / width + NORM_EPS)
        uz = x @ p["w_in"].T
        u = uz[..., :H]
        proj = u @ p["w_x"].T
        delta_low, b, cc = proj[..., :R], proj[..., R:R + N], proj[..., R + N:]
        dt = delta_low @ p["w_dt"].T
        if "b_dt" in p:
            dt = dt + p["b_dt"]
        if config.option("softplus"):
            on = p.get(SOFTPLUS_ON, 1.0)
            delta = on * ops.softplus(dt) + (1.0 - on) * (dt * dt)
        else:
            delta = dt * dt
        a = -ops.exp(p["a_log"])
        state = h.reshape(h.shape[:-1] + (H, N))
        state = ops.exp(delta[..., :, None] * a) * state + (delta * u)[..., :, None] * b[..., None, :]
        y = (state * cc[..., None, :]).sum(-1) + p["d"] * u
        if config.option("gated"):
            z, on = uz[..., H:], p.get(GATED_ON, 1.0)
            y = y * (on * (z * ops.sigmoid(z)) + (1.0 - on))
        return y, state.reshape(h.shape), c

    # ------------------------------------------------------------------ one JAX program for many configs
    def bucket(self, config: RNNConfig) -> RNNConfig:
        """I, H, N and R padded to powers of two (at least 4), every switch on: zero padding is exact.

        Extra input columns are zero (the norm divides by the real width, passed as data); an
        extra channel has zero w_in rows, w_x columns, w_dt rows, b_dt and d, so u = z = Δ·u = 0,
        its state stays at its zero h0 and its y is 0; an extra state dimension has zero B and C
        rows of w_x; an extra rank has zero δ rows and w_dt columns. Switches are 0/1 data."""
        return dataclasses.replace(
            config, input_size=_up(config.input_size), hidden_size=_up(config.hidden_size), bias=True,
            options={"state_dim": _up(config.option("state_dim")), "dt_rank": _up(config.option("dt_rank"))},
            long_memory=False)  # -longmem is in the parameters' values only

    def pad_unit(self, config: RNNConfig, padded: RNNConfig, layer: int,
                 unit: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """A unit's parameters placed into the bucket's shapes, with the config's switches as data."""
        H, N, R = config.hidden_size, config.option("state_dim"), config.option("dt_rank")
        Hp, Np, Rp = padded.hidden_size, padded.option("state_dim"), padded.option("dt_rank")
        out = {k: np.zeros(s) for k, s in self.unit_shapes(padded, layer).items()}
        width = unit["w_in"].shape[1]
        out["w_in"][:H, :width] = unit["w_in"][:H]
        if config.option("gated"):
            out["w_in"][Hp:Hp + H, :width] = unit["w_in"][H:]
        for rows, target in zip(_blocks(R, N), _blocks(Rp, Np)):
            out["w_x"][target.start:target.start + rows.stop - rows.start, :H] = unit["w_x"][rows]
        out["w_dt"][:H, :R] = unit["w_dt"]
        if config.bias:
            out["b_dt"][:H] = unit["b_dt"]
        out["a_log"][:H, :N] = unit["a_log"]
        out["d"][:H] = unit["d"]
        out.update({WIDTH: np.float64(width), SOFTPLUS_ON: np.float64(config.option("softplus")),
                    GATED_ON: np.float64(config.option("gated"))})
        return out

    def unpad_unit(self, config: RNNConfig, padded: RNNConfig, layer: int,
                   grads: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The real parameters' gradients from the bucket's (the inverse placement of :meth:`pad_unit`)."""
        H, N, R = config.hidden_size, config.option("state_dim"), config.option("dt_rank")
        Hp, Np, Rp = padded.hidden_size, padded.option("state_dim"), padded.option("dt_rank")
        width = self.layer_input_size(config, layer)
        w_in = grads["w_in"][:, :width]
        out = {"w_in": np.concatenate([w_in[:H], w_in[Hp:Hp + H]]) if config.option("gated") else w_in[:H],
               "w_x": np.concatenate([grads["w_x"][t.start:t.start + r.stop - r.start, :H]
                                      for r, t in zip(_blocks(R, N), _blocks(Rp, Np))]),
               "w_dt": grads["w_dt"][:H, :R], "a_log": grads["a_log"][:H, :N], "d": grads["d"][:H]}
        if config.bias:
            out["b_dt"] = grads["b_dt"][:H]
        return {k: out[k] for k in self.unit_shapes(config, layer)}

    def pad_state(self, config: RNNConfig, padded: RNNConfig, h: np.ndarray) -> np.ndarray:
        """(..., H·N) channel-major -> (..., Hp·Np), the real block at [:H, :N]."""
        H, N, Hp, Np = config.hidden_size, config.option("state_dim"), padded.hidden_size, padded.option("state_dim")
        out = np.zeros(h.shape[:-1] + (Hp, Np))
        out[..., :H, :N] = h.reshape(h.shape[:-1] + (H, N))
        return out.reshape(h.shape[:-1] + (Hp * Np,))

    def unpad_state(self, config: RNNConfig, padded: RNNConfig, h: np.ndarray) -> np.ndarray:
        H, N, Hp, Np = config.hidden_size, config.option("state_dim"), padded.hidden_size, padded.option("state_dim")
        return np.ascontiguousarray(h.reshape(h.shape[:-1] + (Hp, Np))[..., :H, :N]).reshape(h.shape[:-1] + (H * N,))


def _up(n: int) -> int:
    return max(MIN_BUCKET, 1 << (int(n) - 1).bit_length())


def _blocks(R: int, N: int) -> tuple[slice, slice, slice]:
    """The rows of w_x: [δ (R) | B (N) | C (N)]."""
    return slice(0, R), slice(R, R + N), slice(R + N, R + 2 * N)


S6 = S6Family(
    token="s6", case_work=1.5, gates=("u", "z"), bidirectional=False,
    options=(Option("state_dim", r"N(\d+)", None, "N<state size>, e.g. N2", example=2),
             Option("dt_rank", r"R(\d+)", None, "R<rank of the Δ map>, e.g. R1", example=1),
             Option("softplus", "nosoftplus", True, "nosoftplus (optional)"),
             Option("gated", "nogate", True, "nogate (optional)", simpler=False)))
