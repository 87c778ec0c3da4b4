"""The ``deltaproduct`` family: Gated DeltaProduct (Siems et al. 2025), n delta-rule steps per token.

The shared part (heads, q, the pre-norm, the state layout, the regimes) is :mod:`.matrix`; the
gated delta rule itself is :mod:`.gdn`. Each token writes the state n times (n a family option,
``-n<steps>``), each time with its own key, value and write strength, and decays it once. Per
head, with q̂ and every k̂_{t,j} L2-normalised over their K units (fla's l2norm, as gdn):

    log α_t = logsigmoid(w_a x̂ + b_a)              w_a (NH, I_l), b_a (NH,): one decay per token
    k_{t,j} = (W_k x̂)_j, v_{t,j} = (W_v x̂)_j       w_k (n·NH·K, I_l), w_v (n·NH·V, I_l)
    β_{t,j} = σ(w_b x̂ + b_b)_j                     w_b (n·NH, I_l), b_b (n·NH,)
    S ← α_t S_{t−1}                                 the decay, once, before the first write
    S ← S + β_{t,j} k̂_{t,j} (v_{t,j} − Sᵀk̂_{t,j})ᵀ   for j = 0 .. n−1 (a Householder step each)
    S_t = S,  o_t = S_tᵀ q̂_t / sqrt(K)              read after the n-th step

as flash-linear-attention 0.6.0's ``naive_recurrent_gated_delta_product`` and
``chunk_gated_delta_product_ref`` compute it (the gate on the first of a token's n sub-steps, the
output read after the last) and its ``GatedDeltaProduct`` layer lays out the maps: the rows of
w_k, w_v, w_b are sub-step-major, then head-major (``(n h d)``), so sub-step j of head h reads
rows (j·NH + h)·K … of w_k. With n = 1 it is the ``gdn`` family on the same parameters
(tests/test_deltaproduct_family.py). ``-nobias`` drops b_a and b_b.

Case id: ``deltaproduct-L2-uni-I3-H4-NH2-K2-n2[-strongdecay][-nobias][-longmem]-T7-B3-…``.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from .base import Option, RNNConfig
from .gdn import L2_EPS, GDNFamily
from .matrix import HEAD, HEADS, IN, KEY, KEY_WIDTH, NORM_EPS, STRONG_DECAY, VALUE, WIDTH

# Axes of the n-fold maps (:meth:`MatrixFamily.unit_axes`): sub-step-major, then one of the shared axes
STEP_KEY, STEP_VALUE, STEP_HEAD = "step-key", "step-value", "step-head"
_WITHIN = {STEP_KEY: KEY, STEP_VALUE: VALUE, STEP_HEAD: HEAD}

HOUSEHOLDER = Option("householder", r"n(\d+)", None, "n<Householder steps per token>, e.g. n2", example=2)


class DeltaProductFamily(GDNFamily):
    """Gated DeltaProduct, as described in the module docstring: gdn's gates and regimes, with
    n keys, values and write strengths per token."""

    kernels = {
        "fused-cpu": "gradcheck_rnn.kernels.deltaproduct_cpu:DeltaProductCPUKernel",
        "fused-gpu": "gradcheck_rnn.kernels.fused_gpu.deltaproduct:DeltaProductGPUKernel",
    }
    mutants = {
        "deltaproduct-backward-decays-every-sub-step":
            ("fused-cpu", "gradcheck_rnn.targets.kernel_bugs:DeltaProductBackwardDecaysEverySubStep"),
        "deltaproduct-backward-reads-first-sub-step":
            ("fused-cpu", "gradcheck_rnn.targets.kernel_bugs:DeltaProductBackwardReadsFirstSubStep"),
        "deltaproduct-state-grad-drops-second-householder":
            ("fused-cpu", "gradcheck_rnn.targets.kernel_bugs:DeltaProductStateGradDropsSecondHouseholder"),
        "gpu-deltaproduct-state-grad-reads-next-chunk":
            ("fused-gpu", "gradcheck_rnn.targets.kernel_bugs:GPUStateGradReadsNextChunk"),
    }

    def householder(self, config: RNNConfig) -> int:
        """n, the delta-rule steps per token."""
        return config.option("householder")

    def unit_axes(self, config: RNNConfig) -> dict[str, tuple[str, ...]]:
        axes = super().unit_axes(config)
        steps = {"w_k": (STEP_KEY, IN), "w_v": (STEP_VALUE, IN), "w_b": (STEP_HEAD, IN), "b_b": (STEP_HEAD,)}
        return {kind: steps.get(kind, a) for kind, a in axes.items()}

    def axis_size(self, config: RNNConfig, layer: int, axis: str) -> int:
        if axis in _WITHIN:
            return self.householder(config) * super().axis_size(config, layer, _WITHIN[axis])
        return super().axis_size(config, layer, axis)

    def _index(self, config: RNNConfig, padded: RNNConfig, layer: int, axis: str) -> np.ndarray:
        """Sub-step j's block of an n-fold axis at j times the bucket's width of the shared axis."""
        if axis in _WITHIN:
            within = super()._index(config, padded, layer, _WITHIN[axis])
            width = super().axis_size(padded, layer, _WITHIN[axis])
            return (np.arange(self.householder(config))[:, None] * width + within).ravel()
        return super()._index(config, padded, layer, axis)

    def bucket_options(self, config: RNNConfig) -> dict[str, Any]:
        """n stays as it is: each n is a program of its own (1..3 drawn)."""
        return {"householder": self.householder(config)}

    def draw_options(self, rng: Any, hidden_size: int) -> dict[str, Any]:
        """gdn's heads and key width (K ≥ 2, :meth:`GDNFamily.draw_options`), n in 1..3 (fla's
        layer defaults to 2; n = 1 is gdn, drawn so that the reduction is swept too)."""
        return {**super().draw_options(rng, hidden_size), "householder": int(rng.integers(1, 4))}

    def step(self, ops: Any, p: Mapping[str, Any], x: Any, h: Any, c: Any, config: RNNConfig) -> tuple[Any, Any, Any]:
        NH, K, V = self.sizes(config)
        n = self.householder(config)
        width = p.get(WIDTH, x.shape[-1])  # padded columns of x are zero: the sum is the real one
        x = x / ops.sqrt((x * x).sum(-1)[..., None] / width + NORM_EPS)
        lead = x.shape[:-1]
        q = (x @ p["w_q"].T).reshape(lead + (NH, K))
        k = (x @ p["w_k"].T).reshape(lead + (n, NH, K))
        v = (x @ p["w_v"].T).reshape(lead + (n, NH, V))
        q = q / ops.sqrt((q * q).sum(-1)[..., None] + L2_EPS)
        k = k / ops.sqrt((k * k).sum(-1)[..., None] + L2_EPS)
        log_decay, write = x @ p["w_a"].T, x @ p["w_b"].T
        if "b_a" in p:
            log_decay, write = log_decay + p["b_a"], write + p["b_b"]
        beta = ops.sigmoid(write).reshape(lead + (n, NH))
        state = ops.exp(ops.log_sigmoid(log_decay))[..., None, None] * self.matrix(h, config)  # once per token
        for j in range(n):
            key = k[..., j, :, :]
            error = v[..., j, :, :] - (key[..., :, None] * state).sum(-2)  # v − Sᵀk̂ (..., NH, V)
            state = state + (beta[..., j, :, None] * key)[..., :, None] * error[..., None, :]
        o = (state * q[..., :, None]).sum(-2) * self.scale(p, config)  # read after the n-th step
        return o.reshape(o.shape[:-2] + (-1,)), state.reshape(h.shape), c


DELTAPRODUCT = DeltaProductFamily(
    token="deltaproduct", case_work=7, gates=("a", "b"), bidirectional=False,
    long_memory_needs="it holds the decay near 1 through the decay bias b_a, so it needs it (not with -nobias)",
    options=(HEADS, KEY_WIDTH, HOUSEHOLDER, STRONG_DECAY))
