"""The ``mlstm`` family: the mLSTM of xLSTM (Beck et al. 2024), a matrix memory with exponential gating.

The shared part (heads, q, k, v, the pre-norm, the state layout, the regimes) is
:mod:`.matrix`. Per head, with scalar gates and the stabiliser m:

    ĩ = w_i x̂ + b_i,  log f = logsigmoid(w_f x̂ + b_f)    w_i, w_f (NH, I_l), b_i, b_f (NH,)
    m_t = max(log f + m_{t−1}, ĩ)
    i' = exp(ĩ − m_t),  f' = exp(log f + m_{t−1} − m_t)
    C_t = f' C_{t−1} + i' k_t v_tᵀ,   n_t = f' n_{t−1} + i' k_t          C (K, V), n (K,)
    h_t = C_tᵀ q̃ / (max(|n_tᵀ q̃|, exp(−m_t)) + 1e-6),   q̃ = q / sqrt(K)

as NX-AI's mlstm_kernels compute it from q, k, v and the gate pre-activations (ε = 1e-6 there
too). The case's h0 / hy is C (:mod:`.matrix`'s layout); its c0 / cy is [n | m]: n flattened
head-major (NH·K), then m (NH), so c_size = NH·K + NH. The denominator is at least exp(−m) > 0,
so every drawn state is valid as drawn.

The stabiliser makes (C, n, m) nearly redundant: shifting m by δ while C and n scale by e^−δ
changes h only through ε. The default contract is the true derivative of this forward, m
differentiated as computed (through the max).

The convention ``normaliser_gradient = "head_norm"`` (case id ``-headnorm``) is mlstm_kernels'
(its hand-written backwards hold the normaliser's denominator and the stabiliser m constant: the
denominator "cancels out in the following group norm"): every layer's output is normalised per
head, h ← h / sqrt(|h|² + 1e-6) over the head's V units, as the group norm that follows an mLSTM
layer in xLSTM does up to its shift, and the case has no head gradient on the final states
(``-gy``). Both the denominator and m scale a head's h_t by one positive number, which such a norm
removes, so a backward that holds them constant is exact for these losses (up to the norms' ε):
what still fails under it is a real finding, not the convention.

The convention ``stabiliser_start = "minus_infinity"`` (case id ``-minf``) is the xLSTM paper's
parallel form, mlstm_kernels' parallel kernels' (m_t is the row maximum of log D, a maximum over the
contributions there are): an empty memory (C = 0 and n = 0, the zero state of a case without an
initial state) has the stabiliser −∞, so the first step's m is ĩ, not max(log f, ĩ). The default,
``"zero"``, is the recurrent form's m₀ = 0 (the chunkwise kernels'). m cancels out of h only for
ε = 0, so the two forms differ by ~ε·e^m in the first steps. The option changes nothing where the
case has an initial state (a drawn C₀, n₀ is never zero), and a sequence of length 0 keeps its zero
state as it was.

Case id: ``mlstm-L2-uni-I3-H4-NH2-K2[-strongdecay][-headnorm][-minf][-nobias][-longmem]-T7-B3-…``; ``-longmem``
and ``-strongdecay`` shift the forget gate's bias b_f.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from .base import Convention, Option, RNNConfig
from .matrix import HEAD, HEADS, IN, KEY_WIDTH, STRONG_DECAY, MatrixFamily

EPS = 1e-6
HEAD_NORM_EPS = 1e-30  # the per-head norm of -headnorm: only keeps 0 / 0 away; scale invariant to rounding
HEAD_NORM = Option("head_norm", "headnorm", False,
                   "headnorm (optional: each layer's output normalised per head, the mlstm_kernels convention)")
MINUS_INF_START = Option("minus_inf_start", "minf", False,
                         "minf (optional: an empty memory's stabiliser is −∞, the parallel form's start)")


class MLSTMFamily(MatrixFamily):
    """The mLSTM, as described in the module docstring."""

    kernels = {
        "fused-cpu": "gradcheck_rnn.kernels.mlstm_cpu:MLSTMCPUKernel",
        "fused-gpu": "gradcheck_rnn.kernels.fused_gpu.mlstm:MLSTMGPUKernel",
    }
    mutants = {
        "mlstm-chunk-states-wrong-size": ("fused-cpu", "gradcheck_rnn.targets.kernel_bugs:MLSTMChunkStatesWrongSize"),
        "mlstm-normalizer-grad-not-carried":
            ("fused-cpu", "gradcheck_rnn.targets.kernel_bugs:MLSTMNormalizerGradNotCarried"),
        "mlstm-chunk-states-wrong-size-at-chunk-8":
            ("fused-cpu", "gradcheck_rnn.targets.kernel_bugs:MLSTMChunkStatesWrongSizeAtLargestChunk"),
        "gpu-mlstm-stabiliser-reads-next-chunk":
            ("fused-gpu", "gradcheck_rnn.targets.kernel_bugs:GPUMLSTMStabiliserReadsNextChunk"),
    }

    decay_bias = "b_f"
    rounding_sensitive = ("the read h = Cᵀq̃ / max(|nᵀq̃|, e^−m) is a weighted average of the stored values, so "
                          "its derivative in the query, (C − h·nᵀ) / d, cancels where they lie near their average "
                          "(~250x), and the query weights' gradient sums such steps of both signs (~17x): under long "
                          "memory through layers, rounding of the memory C moves it by several float32 rooms")

    def gate_axes(self, config: RNNConfig) -> dict[str, tuple[str, ...]]:
        return {"w_i": (HEAD, IN), "b_i": (HEAD,), "w_f": (HEAD, IN), "b_f": (HEAD,)}

    def c_size(self, config: RNNConfig) -> int:
        NH, K, _ = self.sizes(config)
        return NH * K + NH

    def draw_options(self, rng: Any, hidden_size: int) -> dict[str, Any]:
        """NH uniform among the divisors of H, K in 1..4."""
        divisors = [k for k in range(1, hidden_size + 1) if hidden_size % k == 0]
        return {"heads": divisors[int(rng.integers(len(divisors)))], "key_width": int(rng.integers(1, 5))}

    def step(self, ops: Any, p: Mapping[str, Any], x: Any, h: Any, c: Any, config: RNNConfig) -> tuple[Any, Any, Any]:
        NH, K, _ = self.sizes(config)
        x, q, k, v = self.project(ops, p, x, config)
        gate_i, gate_f = x @ p["w_i"].T, x @ p["w_f"].T
        if "b_i" in p:
            gate_i, gate_f = gate_i + p["b_i"], gate_f + p["b_f"]
        log_f = ops.log_sigmoid(gate_f)
        n_prev, m_prev = c[..., :NH * K].reshape(c.shape[:-1] + (NH, K)), c[..., NH * K:]
        if config.option("minus_inf_start"):  # -minf: the zero state holds no contribution, so no max is taken over it
            empty = (self.matrix(h, config) == 0).all(-1).all(-1) & (n_prev == 0).all(-1)
            m_prev = ops.where(empty, -math.inf, m_prev)  # exp(−∞) = 0 exactly: f' = 0, m = ĩ, no 0·∞ in a gradient
        m = ops.maximum(log_f + m_prev, gate_i)
        i_s, f_s = ops.exp(gate_i - m), ops.exp(log_f + m_prev - m)  # (..., NH)
        memory = f_s[..., None, None] * self.matrix(h, config) + i_s[..., None, None] * k[..., :, None] * v[..., None, :]
        n = f_s[..., None] * n_prev + i_s[..., None] * k
        q = q * self.scale(p, config)
        numerator = (memory * q[..., :, None]).sum(-2)  # (..., NH, V)
        denominator = ops.maximum(ops.abs((n * q).sum(-1)), ops.exp(-m)) + EPS
        out = numerator / denominator[..., None]
        if config.option("head_norm"):  # the per-head norm a hand-written backward's convention assumes
            out = out / ops.sqrt((out * out).sum(-1) + HEAD_NORM_EPS)[..., None]
        return (out.reshape(out.shape[:-2] + (-1,)), memory.reshape(h.shape),
                ops.cat([n.reshape(n.shape[:-2] + (-1,)), m], -1))

    def pad_cell_state(self, config: RNNConfig, padded: RNNConfig, c: np.ndarray) -> np.ndarray:
        """[n (NH·K) | m (NH)] -> the bucket's [n (NHp·Kp) | m (NHp)], each real unit at its head and key."""
        NH, K, _ = self.sizes(config)
        NHp, Kp, _ = self.sizes(padded)
        n = np.zeros(c.shape[:-1] + (NHp, Kp))
        n[..., :NH, :K] = c[..., :NH * K].reshape(c.shape[:-1] + (NH, K))
        m = np.zeros(c.shape[:-1] + (NHp,))
        m[..., :NH] = c[..., NH * K:]
        return np.concatenate([n.reshape(c.shape[:-1] + (NHp * Kp,)), m], axis=-1)

    def unpad_cell_state(self, config: RNNConfig, padded: RNNConfig, c: np.ndarray) -> np.ndarray:
        NH, K, _ = self.sizes(config)
        NHp, Kp, _ = self.sizes(padded)
        n = c[..., :NHp * Kp].reshape(c.shape[:-1] + (NHp, Kp))[..., :NH, :K]
        return np.concatenate([n.reshape(c.shape[:-1] + (NH * K,)), c[..., NHp * Kp:NHp * Kp + NH]], axis=-1)


MLSTM = MLSTMFamily(
    token="mlstm", case_work=5.5, gates=("i", "f"), cell_state=True, bidirectional=False,
    long_memory_needs="it opens the forget gate through its bias b_f, so it needs it (not with -nobias)",
    options=(HEADS, KEY_WIDTH, STRONG_DECAY, HEAD_NORM, MINUS_INF_START),
    conventions=(Convention("normaliser_gradient", "head_norm", {"true": False, "head_norm": True}, heads="y"),
                 Convention("stabiliser_start", "minus_inf_start", {"zero": False, "minus_infinity": True})))
