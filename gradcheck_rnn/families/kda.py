"""The ``kda`` family: Kimi Delta Attention, the gated delta rule with one decay per key unit.

The shared part (heads, q, k, v, the pre-norm, the state layout, the regimes) is
:mod:`.matrix`. Per head, with q and k L2-normalised over their K units (as :mod:`.gdn`), a decay
per key unit from a rank-R map of x̂ and a scalar write strength:

    q̂ = q / sqrt(|q|² + 1e-6),  k̂ = k / sqrt(|k|² + 1e-6)     fla's l2norm (a zero unit stays 0)
    log α_t = −exp(a_log) ⊙ softplus(W_a2 (W_a1 x̂) + b_a)      w_a1 (R, I_l), w_a2 (NH·K, R),
                                                                b_a (NH·K,), a_log (NH,)
    β_t = sigmoid(w_b x̂ + b_b)                                 w_b (NH, I_l), b_b (NH,)
    S_t = (I − β_t k̂ k̂ᵀ) diag(α_t) S_{t−1} + β_t k̂ v_tᵀ       S (K, V): α_t scales each key row
    o_t = S_tᵀ q̂_t / sqrt(K)

The order of decay and error is flash-linear-attention 0.6.0's (``fla/ops/kda/naive.py``,
``naive_recurrent_kda``; its ``fused_recurrent_kda`` likewise): the decay first, then the error
against the decayed state, S ← diag(α) S; S ← S + β k̂ (v − Sᵀk̂)ᵀ, as gdn with its scalar α. The
gate is fla's KDA gate (``fla/ops/kda/gate.py``, ``naive_kda_gate``: g = −exp(A_log) ·
softplus(g + dt_bias)), with fla's low-rank ``f_proj`` as the map (b_a is fla's ``dt_bias``,
a_log its ``A_log``, one per head); β has a bias b_b here (fla's ``b_proj`` has none) so that a
regime can hold it near 1. ``-nobias`` drops b_a and b_b; a_log is a weight and stays.

Regimes, as case-id tokens (shifts of drawn values, no other draw changes): ``-longmem``
(b_a − 4: softplus ≈ 0.02, a per-step decay of about 0.98 per key unit), ``-strongdecay``
(b_a + 4: log α ≈ −4·exp(a_log) per step) and ``-converged``: β near 1 (b_b + 4, β ≈ 0.98) and
the decay near 1 (a_log − 4: |log α| ≈ 0.01), the gates of a delta state that has learned its keys
(meta-pytorch/attention-gym #465's regime, where S·k ≈ v and the error v − Sᵀk̂ that dβ multiplies
is a cancellation; dβ also passes σ' = β(1 − β) ≈ 0.02 there). A write then replaces the state along
its key (after it Sᵀk̂_t = v_t up to 1 − β), but S·k ≈ v itself needs keys and values that repeat,
and those are data, not parameters: on independent inputs the error stays of the size of v
(``benchmarks/kda_converged.py``, figures in benchmarks/RESULTS.md). With ``-nobias`` only the
decay is held (β has no bias to shift); ``-converged`` is drawn by the family (a fifth of the
cases), the other two by the profile.

Case id: ``kda-L2-uni-I3-H4-NH2-K2-R1[-strongdecay][-converged][-nobias][-longmem]-T7-B3-…``.
"""

from __future__ import annotations

from typing import Any, Mapping

from .base import Option, RNNConfig
from .gdn import L2_EPS
from .matrix import HEAD, HEADS, IN, KEY, KEY_WIDTH, RANK, STRONG_DECAY, MatrixFamily, _up

CONVERGED_SHIFT = 4.0  # -converged: b_b + 4 (β ≈ 0.98) and a_log − 4 (the decay's rate × e^−4)
CONVERGED = Option("converged", "converged", False, "converged (optional: β and the decay near 1)")


class KDAFamily(MatrixFamily):
    """Kimi Delta Attention, as described in the module docstring."""

    kernels = {
        "fused-cpu": "gradcheck_rnn.kernels.kda_cpu:KDACPUKernel",
        "fused-gpu": "gradcheck_rnn.kernels.fused_gpu.kda:KDAGPUKernel",
    }
    mutants = {
        "kda-state-grad-first-head-decay":
            ("fused-cpu", "gradcheck_rnn.targets.kernel_bugs:KDAStateGradFirstHeadDecay"),
        "kda-norm-backward-from-rounded-output":
            ("fused-cpu", "gradcheck_rnn.targets.kernel_bugs:KDANormBackwardFromRoundedOutput"),
        "kda-decay-grad-wrong-axis": ("fused-cpu", "gradcheck_rnn.targets.kernel_bugs:KDADecayGradWrongAxis"),
        "gpu-kda-state-grad-reads-next-chunk":
            ("fused-gpu", "gradcheck_rnn.targets.kernel_bugs:GPUStateGradReadsNextChunk"),
    }

    decay_bias = "b_a"
    rounding_sensitive = ("a key whose norm is a few sqrt(1e-6) from 0 amplifies a rounding-level change of the "
                          "layer below up to ~1000x in the gradients (the L2 norm's slope is 1/|k|)")

    def rank(self, config: RNNConfig) -> int:
        return config.option("decay_rank")

    def gate_axes(self, config: RNNConfig) -> dict[str, tuple[str, ...]]:
        return {"w_a1": (RANK, IN), "w_a2": (KEY, RANK), "b_a": (KEY,), "a_log": (HEAD,),
                "w_b": (HEAD, IN), "b_b": (HEAD,)}

    def bucket_options(self, config: RNNConfig) -> dict[str, Any]:
        return {"decay_rank": _up(config.option("decay_rank"), 4), "converged": False}

    def draw_options(self, rng: Any, hidden_size: int) -> dict[str, Any]:
        """NH uniform among the divisors of H, K in 2..4 (not 1: gdn's reason, :mod:`.gdn`), R in 1..3,
        ``-converged`` a fifth of the time."""
        divisors = [k for k in range(1, hidden_size + 1) if hidden_size % k == 0]
        return {"heads": divisors[int(rng.integers(len(divisors)))], "key_width": int(rng.integers(2, 5)),
                "decay_rank": int(rng.integers(1, 4)), "converged": bool(rng.random() < 0.2)}

    # ------------------------------------------------------------------ regimes
    def _shift_decay(self, params: Mapping[str, Any], shift: float) -> dict[str, Any]:
        # a larger b_a is a stronger decay here (−softplus), the opposite of logsigmoid's sign
        return super()._shift_decay(params, -shift)

    def regime_params(self, config: RNNConfig, params: Mapping[str, Any]) -> dict[str, Any]:
        params = super().regime_params(config, params)
        if not config.option("converged"):
            return params
        shifts = {"b_b": CONVERGED_SHIFT, "a_log": -CONVERGED_SHIFT}
        return {k: v + shifts.get(k.rpartition(".")[2], 0.0) for k, v in params.items()}

    # ------------------------------------------------------------------ the step
    def step(self, ops: Any, p: Mapping[str, Any], x: Any, h: Any, c: Any, config: RNNConfig) -> tuple[Any, Any, Any]:
        x, q, k, v = self.project(ops, p, x, config)
        q = q / ops.sqrt((q * q).sum(-1)[..., None] + L2_EPS)
        k = k / ops.sqrt((k * k).sum(-1)[..., None] + L2_EPS)
        gate, write = (x @ p["w_a1"].T) @ p["w_a2"].T, x @ p["w_b"].T
        if "b_a" in p:
            gate, write = gate + p["b_a"], write + p["b_b"]
        log_decay = -ops.exp(p["a_log"])[:, None] * ops.softplus(gate.reshape(q.shape))  # (..., NH, K)
        beta = ops.sigmoid(write)                                                        # (..., NH)
        state = ops.exp(log_decay)[..., None] * self.matrix(h, config)
        error = v - (k[..., :, None] * state).sum(-2)  # v − Sᵀk̂ against the decayed state (..., NH, V)
        state = state + (beta[..., None] * k)[..., :, None] * error[..., None, :]
        o = (state * q[..., :, None]).sum(-2) * self.scale(p, config)
        return o.reshape(o.shape[:-2] + (-1,)), state.reshape(h.shape), c


KDA = KDAFamily(
    token="kda", case_work=5, gates=("a", "b"), bidirectional=False,
    long_memory_needs="it holds the decay near 1 through the decay bias b_a, so it needs it (not with -nobias)",
    options=(HEADS, KEY_WIDTH, Option("decay_rank", r"R(\d+)", None, "R<rank of the decay map>, e.g. R1", example=1),
             STRONG_DECAY, CONVERGED))
