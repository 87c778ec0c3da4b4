"""The ``rwkv7`` family: RWKV-7's generalised delta rule (Peng et al. 2025, "Goose") as a recurrence.

The shared part (heads, the receptance r (the q map), k, v, the pre-norm, the state layout, the
regimes) is :mod:`.matrix`. RWKV-7 writes its state in (V, K) orientation,
S_t = S_{t−1} (diag(w_t) + a_t b_tᵀ) + v_t k_tᵀ; the package keeps each head's state as K×V
(key rows, value columns), its transpose, where the same step reads, per head:

    κ̂ = k / sqrt(|k|² + 1e-6)                 the removal key (fla's l2norm, as gdn's)
    d_t = w_d x̂ + b_d                          the decay logits, w_d (NH·K, I_l), b_d (NH·K,)
    log w_t = −exp(d_t)                        one decay per key unit: w_t = exp(−exp(d_t))
    η_t = sigmoid(w_a x̂ + b_a)                 the in-context learning rate (iclr), w_a (NH·K, I_l)
    a_t = −κ̂,  b_t = κ̂ ⊙ η_t
    S_t = (diag(w_t) + b_t a_tᵀ) S_{t−1} + k_t v_tᵀ            S (K, V)
    o_t = S_tᵀ r_t / sqrt(K)

In flash-linear-attention 0.6.0's arguments (``fused_recurrent_rwkv7``, ``chunk_rwkv7`` and the
generalised delta rule's ``dplr_recurrence`` in ``fla/ops/generalized_delta_rule/dplr/naive.py``,
whose state is K×V as here): ``r`` = r, ``w`` = log w_t = −exp(d_t) (the log decay, fla's
``gk``), ``k`` = k, ``v`` = v, ``a`` = −κ̂ (fla's ``alpha``), ``b`` = κ̂ ⊙ η (``beta``),
``scale`` = 1/sqrt(K), ``initial_state`` = S (B, NH, K, V). fla's step there is
S ← exp(gk) ⊙ S + k vᵀ + b (aᵀ S): the low-rank term reads the state before the decay, as here.

What is left out of fla's ``RWKV7Attention`` layer, on purpose (each an ordinary map around the
recurrence, where these gradient bugs do not live): the token shift (x is not mixed with x_{t−1}),
the LoRAs (d, η and r, k, v are single linear maps of x̂), the soft clamp of the decay logits
(RWKV-7's layer uses d = logsigmoid(z) − ½, i.e. log w = −e^{−½} σ(z) ≥ −0.607 a step: fla's
``-0.6065306597126334 * sigmoid(...)``; here d is unclamped, as the op takes any log decay, so
the strong-decay regime exists), the key's scaling k ⊙ (1 + (η − 1) k_a) and κ̂'s k_k (k_a = 0,
k_k = 1), the value residual, the group norm, the output gate and its bonus term, the output
projection. ``-nobias`` drops b_d and b_a.

Regimes (the matrix families' tokens; the decay logit enters with the opposite sign of gla's
and gdn's gate, so the shifts are this family's own): ``-longmem`` moves b_d by −4 (log w ≈
−e^{−4} ≈ −0.018 a step, w ≈ 0.98) and ``-strongdecay`` by +log 4 (log w ≈ −4 a step, as the
other families' strong decay). Not K = 1 in draws: κ̂ of one unit is a sign function (see gdn).

Case id: ``rwkv7-L2-uni-I3-H4-NH2-K2[-strongdecay][-nobias][-longmem]-T7-B3-…``.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from .base import Family, RNNConfig
from .gdn import L2_EPS
from .matrix import HEADS, IN, KEY, KEY_WIDTH, MEMORY_SHIFT, STRONG_DECAY, MatrixFamily

STRONG_LOGIT_SHIFT = math.log(4.0)  # -strongdecay: b_d + log 4, log w ≈ −4 a step


class RWKV7Family(MatrixFamily):
    """RWKV-7's generalised delta rule, as described in the module docstring."""

    kernels = {
        "fused-cpu": "gradcheck_rnn.kernels.rwkv7_cpu:RWKV7CPUKernel",
        "fused-gpu": "gradcheck_rnn.kernels.fused_gpu.rwkv7:RWKV7GPUKernel",
    }
    mutants = {
        "rwkv7-h0-grad-low-rank-dropped":
            ("fused-cpu", "gradcheck_rnn.targets.kernel_bugs:RWKV7InitialStateGradLowRankDropped"),
        "rwkv7-state-grad-no-low-rank": ("fused-cpu", "gradcheck_rnn.targets.kernel_bugs:RWKV7StateGradNoLowRank"),
        "rwkv7-decay-grad-exclusive-cumsum":
            ("fused-cpu", "gradcheck_rnn.targets.kernel_bugs:RWKV7DecayGradExclusiveCumulative"),
        "gpu-rwkv7-state-grad-reads-next-step":
            ("fused-gpu", "gradcheck_rnn.targets.kernel_bugs:GPUStateGradReadsNextChunk"),
    }

    decay_bias = "b_d"
    rounding_sensitive = ("a key whose norm is a few sqrt(1e-6) from 0 amplifies a rounding-level change of the "
                          "layer below up to ~1000x in the gradients (the removal key's L2 norm has slope 1/|k|)")

    def gate_axes(self, config: RNNConfig) -> dict[str, tuple[str, ...]]:
        return {"w_d": (KEY, IN), "b_d": (KEY,), "w_a": (KEY, IN), "b_a": (KEY,)}

    def draw_options(self, rng: Any, hidden_size: int) -> dict[str, Any]:
        """NH uniform among the divisors of H, K in 2..4 (not 1: the removal key's L2 norm, as gdn's)."""
        divisors = [k for k in range(1, hidden_size + 1) if hidden_size % k == 0]
        return {"heads": divisors[int(rng.integers(len(divisors)))], "key_width": int(rng.integers(2, 5))}

    def hold_memory(self, config: RNNConfig, params: Mapping[str, Any]) -> dict[str, Any]:
        """-longmem: b_d − 4 (a larger logit decays faster here: log w = −exp(d))."""
        return self._shift_decay(params, -MEMORY_SHIFT)

    def regime_params(self, config: RNNConfig, params: Mapping[str, Any]) -> dict[str, Any]:
        # Family's own (-longmem through hold_memory), not the matrix families' −4 for -strongdecay
        params = Family.regime_params(self, config, params)
        return self._shift_decay(params, STRONG_LOGIT_SHIFT) if config.option("strong_decay") else dict(params)

    def step(self, ops: Any, p: Mapping[str, Any], x: Any, h: Any, c: Any, config: RNNConfig) -> tuple[Any, Any, Any]:
        x, r, k, v = self.project(ops, p, x, config)
        removal = k / ops.sqrt((k * k).sum(-1)[..., None] + L2_EPS)           # κ̂ (..., NH, K)
        logits, rate = x @ p["w_d"].T, x @ p["w_a"].T
        if "b_d" in p:
            logits, rate = logits + p["b_d"], rate + p["b_a"]
        decay = ops.exp(-ops.exp(logits)).reshape(k.shape)                    # w (..., NH, K)
        b = removal * ops.sigmoid(rate).reshape(k.shape)                       # κ̂ ⊙ η
        state = self.matrix(h, config)
        read = (-removal[..., :, None] * state).sum(-2)                       # aᵀ S (..., NH, V)
        state = (decay[..., None] * state + b[..., :, None] * read[..., None, :]
                 + k[..., :, None] * v[..., None, :])
        o = (state * r[..., :, None]).sum(-2) * self.scale(p, config)
        return o.reshape(o.shape[:-2] + (-1,)), state.reshape(h.shape), c


RWKV7 = RWKV7Family(
    token="rwkv7", case_work=3, gates=("d", "a"), bidirectional=False,
    long_memory_needs="it holds the decay near 1 through the decay logits' bias b_d, so it needs it (not with -nobias)",
    options=(HEADS, KEY_WIDTH, STRONG_DECAY))
