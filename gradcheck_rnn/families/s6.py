"""The ``s6`` family: Mamba's selective scan (Gu and Dao 2023) without its convolution.

Per layer, from its input x_t (I_l wide; y of the layer below for l > 0), with H channels, N
state dimensions per channel and a rank-R map for Δ:

    [u | z] = W_in x_t                      w_in (2H, I_l), (H, I_l) with -nogate
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

Case id: ``s6-L2-uni-I3-H4-N2-R1[-nosoftplus][-nogate][-nobias]-T7-B3-…``. A selective scan runs
forward in time only: there is no bidirectional s6 (Mamba gets one by running two layers), so
the generator never draws one and ``-bi`` is refused.
"""

from __future__ import annotations

from typing import Any, Mapping

from .base import Family, Option, RNNConfig


class S6Family(Family):
    """The selective scan, as described in the module docstring."""

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

    def draw_options(self, rng: Any) -> dict[str, Any]:
        """N in 1..4 and R in 1..3 (small, as every drawn size); each switch off a quarter of the time."""
        return {"state_dim": int(rng.integers(1, 5)), "dt_rank": int(rng.integers(1, 4)),
                "softplus": bool(rng.random() >= 0.25), "gated": bool(rng.random() >= 0.25)}

    def step(self, ops: Any, p: Mapping[str, Any], x: Any, h: Any, c: Any, config: RNNConfig) -> tuple[Any, Any, Any]:
        H, N, R = config.hidden_size, config.option("state_dim"), config.option("dt_rank")
        uz = x @ p["w_in"].T
        u = uz[..., :H]
        proj = u @ p["w_x"].T
        delta_low, b, cc = proj[..., :R], proj[..., R:R + N], proj[..., R + N:]
        dt = delta_low @ p["w_dt"].T
        if "b_dt" in p:
            dt = dt + p["b_dt"]
        delta = ops.softplus(dt) if config.option("softplus") else dt * dt
        a = -ops.exp(p["a_log"])
        state = h.reshape(h.shape[:-1] + (H, N))
        state = ops.exp(delta[..., :, None] * a) * state + (delta * u)[..., :, None] * b[..., None, :]
        y = (state * cc[..., None, :]).sum(-1) + p["d"] * u
        if config.option("gated"):
            z = uz[..., H:]
            y = y * (z * ops.sigmoid(z))
        return y, state.reshape(h.shape), c


S6 = S6Family(
    token="s6", gates=("u", "z"), bidirectional=False,
    options=(Option("state_dim", r"N(\d+)", None, "N<state size>, e.g. N2"),
             Option("dt_rank", r"R(\d+)", None, "R<rank of the Δ map>, e.g. R1"),
             Option("softplus", "nosoftplus", True, "nosoftplus (optional)"),
             Option("gated", "nogate", True, "nogate (optional)")))
