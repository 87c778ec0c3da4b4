"""The ``gdn`` family: the gated delta rule (Yang et al. 2025, Gated DeltaNet) as a recurrence.

The shared part (heads, q, k, v, the pre-norm, the state layout, the regimes) is
:mod:`.matrix`. Per head, with q and k L2-normalised over their K units and scalar gates:

    q̂ = q / sqrt(|q|² + 1e-6),  k̂ = k / sqrt(|k|² + 1e-6)    fla's l2norm (a zero unit stays 0)
    log α_t = logsigmoid(w_a x̂ + b_a)     w_a (NH, I_l), b_a (NH,)
    β_t = sigmoid(w_b x̂ + b_b)            w_b (NH, I_l), b_b (NH,)
    S_t = α_t (I − β_t k̂ k̂ᵀ) S_{t−1} + β_t k̂ v_tᵀ        S (K, V)
    o_t = S_tᵀ q̂_t / sqrt(K)

The decay is applied before the error, as in the paper and in flash-linear-attention's
``fused_recurrent_gated_delta_rule`` (S ← α S; S ← S + β k̂ (v − Sᵀk̂)ᵀ), with its q, k
normalised in the kernel (``use_qk_l2norm_in_kernel=True``). ``-nobias`` drops b_a and b_b.

Case id: ``gdn-L2-uni-I3-H4-NH2-K2[-strongdecay][-nobias][-longmem]-T7-B3-…``.
"""

from __future__ import annotations

from typing import Any, Mapping

from .base import RNNConfig
from .matrix import HEAD, HEADS, IN, KEY_WIDTH, STRONG_DECAY, MatrixFamily

L2_EPS = 1e-6


class GDNFamily(MatrixFamily):
    """The gated delta rule, as described in the module docstring."""

    kernels = {
        "fused-cpu": "gradcheck_rnn.kernels.gdn_cpu:GDNCPUKernel",
        "fused-gpu": "gradcheck_rnn.kernels.fused_gpu.gdn:GDNGPUKernel",
    }
    mutants = {
        "gdn-packed-tail-unwritten": ("fused-cpu", "gradcheck_rnn.targets.kernel_bugs:PackedTailUnwritten"),
        "gdn-state-grad-no-householder": ("fused-cpu", "gradcheck_rnn.targets.kernel_bugs:GDNStateGradNoHouseholder"),
        "gdn-sequence-start-gate-grad": ("fused-cpu", "gradcheck_rnn.targets.kernel_bugs:GDNSequenceStartGateGrad"),
        "gdn-padded-gate-grad": ("fused-cpu", "gradcheck_rnn.targets.kernel_bugs:GDNPaddedGateGrad"),
        "gpu-gdn-state-grad-reads-next-chunk":
            ("fused-gpu", "gradcheck_rnn.targets.kernel_bugs:GPUStateGradReadsNextChunk"),
    }

    decay_bias = "b_a"
    rounding_sensitive = ("a key whose norm is a few sqrt(1e-6) from 0 amplifies a rounding-level change of the "
                          "layer below up to ~1000x in the gradients (the L2 norm's slope is 1/|k|)")

    def gate_axes(self, config: RNNConfig) -> dict[str, tuple[str, ...]]:
        return {"w_a": (HEAD, IN), "b_a": (HEAD,), "w_b": (HEAD, IN), "b_b": (HEAD,)}

    def draw_options(self, rng: Any, hidden_size: int) -> dict[str, Any]:
        """NH uniform among the divisors of H, K in 2..4. Not K = 1: the L2 norm of a single unit is
        a sign function softened only by the 1e-6, k/sqrt(k² + 1e-6), whose slope reaches
        1/sqrt(1e-6) = 1000 where k is near 0, so a float32 GEMM's rounding of a k near 0 is
        amplified a thousandfold. A soak drew K = 1 cases that the family's own step, run one step
        at a time in float32, fails as the kernel does (docs/findings/soak.md): float32 cannot hold
        them, and no kernel may be failed for that. A case id may still name K1."""
        divisors = [k for k in range(1, hidden_size + 1) if hidden_size % k == 0]
        return {"heads": divisors[int(rng.integers(len(divisors)))], "key_width": int(rng.integers(2, 5))}

    def step(self, ops: Any, p: Mapping[str, Any], x: Any, h: Any, c: Any, config: RNNConfig) -> tuple[Any, Any, Any]:
        x, q, k, v = self.project(ops, p, x, config)
        q = q / ops.sqrt((q * q).sum(-1)[..., None] + L2_EPS)
        k = k / ops.sqrt((k * k).sum(-1)[..., None] + L2_EPS)
        log_decay, write = x @ p["w_a"].T, x @ p["w_b"].T
        if "b_a" in p:
            log_decay, write = log_decay + p["b_a"], write + p["b_b"]
        decay, beta = ops.exp(ops.log_sigmoid(log_decay)), ops.sigmoid(write)  # (..., NH)
        state = decay[..., None, None] * self.matrix(h, config)
        error = v - (k[..., :, None] * state).sum(-2)  # v − Sᵀk̂ (..., NH, V)
        state = state + (beta[..., None] * k)[..., :, None] * error[..., None, :]
        o = (state * q[..., :, None]).sum(-2) * self.scale(p, config)
        return o.reshape(o.shape[:-2] + (-1,)), state.reshape(h.shape), c


GDN = GDNFamily(
    token="gdn", case_work=3.5, gates=("a", "b"), bidirectional=False,
    long_memory_needs="it holds the decay near 1 through the decay bias b_a, so it needs it (not with -nobias)",
    options=(HEADS, KEY_WIDTH, STRONG_DECAY))
