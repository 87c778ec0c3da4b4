"""The ``gla`` family: gated linear attention (Yang et al. 2024) as a recurrence.

The shared part (heads, q, k, v, the pre-norm, the state layout, the regimes) is
:mod:`.matrix`. Per head, with the decay α_t from a rank-R map of x̂:

    log α_t = logsigmoid(W_a2 (W_a1 x̂) + b_a)      w_a1 (R, I_l), w_a2 (NH·K, R), b_a (NH·K,);
                                                   with -headdecay w_a2 (NH, R), b_a (NH,): one
                                                   decay per head, Mamba2's SSD as a special case
    S_t = diag(α_t) S_{t−1} + k_t v_tᵀ              S (K, V): α scales each key row
    o_t = S_tᵀ q_t / sqrt(K)

as flash-linear-attention's ``fused_recurrent_gla`` and ``chunk_gla`` compute it from q, k, v and
the log-space gate g = log α (its layer divides the logsigmoid by a normaliser; here that is a
scale of the drawn map, which the regimes cover). ``-nobias`` drops b_a.

Case id: ``gla-L2-uni-I3-H4-NH2-K2-R1[-headdecay][-strongdecay][-nobias][-longmem]-T7-B3-…``.
"""

from __future__ import annotations

from typing import Any, Mapping

from .base import Option, RNNConfig
from .matrix import HEAD, HEADS, IN, KEY, KEY_WIDTH, RANK, STRONG_DECAY, MatrixFamily, _up


class GLAFamily(MatrixFamily):
    """Gated linear attention, as described in the module docstring."""

    kernels = {
        "fused-cpu": "gradcheck_rnn.kernels.gla_cpu:GLACPUKernel",
        "fused-gpu": "gradcheck_rnn.kernels.fused_gpu.gla:GLAGPUKernel",
    }
    mutants = {
        "gla-key-block-mask": ("fused-cpu", "gradcheck_rnn.targets.kernel_bugs:GLAKeyBlockMask"),
        "gla-decay-grad-overshoot": ("fused-cpu", "gradcheck_rnn.targets.kernel_bugs:GLADecayGradOvershoot"),
        "gla-short-call-dh0-pass-through-dropped":
            ("fused-cpu", "gradcheck_rnn.targets.kernel_bugs:GLAShortCallDh0PassThroughDropped"),
        "gla-decay-grad-ignores-dhy": ("fused-cpu", "gradcheck_rnn.targets.kernel_bugs:GLADecayGradIgnoresDhy"),
        "gla-packed-tail-from-empty": ("fused-cpu", "gradcheck_rnn.targets.kernel_bugs:PackedTailFromEmpty"),
        "gla-dy-strides-assumed-contiguous":
            ("fused-cpu", "gradcheck_rnn.targets.kernel_bugs:GLADyStridesAssumedContiguous"),
        "gla-state-grad-wrong-head": ("fused-cpu", "gradcheck_rnn.targets.kernel_bugs:GLAStateGradWrongHead"),
        "gpu-gla-state-grad-reads-next-chunk":
            ("fused-gpu", "gradcheck_rnn.targets.kernel_bugs:GPUStateGradReadsNextChunk"),
    }

    decay_bias = "b_a"

    def rank(self, config: RNNConfig) -> int:
        return config.option("decay_rank")

    def gate_axes(self, config: RNNConfig) -> dict[str, tuple[str, ...]]:
        decay = HEAD if config.option("head_decay") else KEY
        return {"w_a1": (RANK, IN), "w_a2": (decay, RANK), "b_a": (decay,)}

    def bucket_options(self, config: RNNConfig) -> dict[str, Any]:
        return {"decay_rank": _up(config.option("decay_rank"), 4)}

    def draw_options(self, rng: Any, hidden_size: int) -> dict[str, Any]:
        """NH uniform among the divisors of H, K in 1..4, R in 1..3, one decay per head a quarter of
        the time. ``-strongdecay`` is a profile knob (``strong_decay``), not drawn here."""
        divisors = [k for k in range(1, hidden_size + 1) if hidden_size % k == 0]
        return {"heads": divisors[int(rng.integers(len(divisors)))], "key_width": int(rng.integers(1, 5)),
                "decay_rank": int(rng.integers(1, 4)), "head_decay": bool(rng.random() < 0.25)}

    def step(self, ops: Any, p: Mapping[str, Any], x: Any, h: Any, c: Any, config: RNNConfig) -> tuple[Any, Any, Any]:
        x, q, k, v = self.project(ops, p, x, config)
        gate = (x @ p["w_a1"].T) @ p["w_a2"].T
        if "b_a" in p:
            gate = gate + p["b_a"]
        decay = ops.exp(ops.log_sigmoid(gate)).reshape(q.shape[:-1] + (-1,))  # (..., NH, K) or (..., NH, 1)
        state = decay[..., None] * self.matrix(h, config) + k[..., :, None] * v[..., None, :]
        o = (state * q[..., :, None]).sum(-2) * self.scale(p, config)
        return o.reshape(o.shape[:-2] + (-1,)), state.reshape(h.shape), c


GLA = GLAFamily(
    token="gla", case_work=4, gates=("a",), bidirectional=False,
    long_memory_needs="it holds the decay near 1 through the decay bias b_a, so it needs it (not with -nobias)",
    options=(HEADS, KEY_WIDTH, Option("decay_rank", r"R(\d+)", None, "R<rank of the decay map>, e.g. R1", example=1),
             Option("head_decay", "headdecay", False, "headdecay (optional: one decay per head, SSD)"),
             STRONG_DECAY))
