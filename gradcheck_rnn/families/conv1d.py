"""The ``conv1d`` family: the short causal depthwise convolution in front of a recurrence (Mamba's,
GDN's, KDA's ``causal_conv1d``), with its state, as a recurrence of its own.

Per layer, from its input x_t (I_l wide: I for layer 0, H for deeper layers), with H channels and
a window of W steps (case id ``-W<w>``, 2..4 as the libraries use):

    x̂ = x_t / sqrt(mean(x_t²) + 1)               the pre-norm, as s6's and the matrix families'
    u_t = W_in x̂                                  w_in (H, I_l): the layer's input map
    y_t = act(Σ_{j=0}^{W−1} w[:, j] ⊙ u_{t−W+1+j} + b)      w_conv (H, W), b_conv (H,)

act is the identity, or SiLU with ``-silu`` (what causal-conv1d calls ``activation="silu"``);
``-nobias`` drops b_conv. A tap before the sequence's start reads the initial state.

The state is the last W−1 inputs u, what causal-conv1d calls ``initial_states`` /
``final_states`` ((H, W−1) per sample), oldest first as there: the case's h0 / hy flattened
channel-major, element e·(W−1) + j holds channel e's input from W−1−j steps before the next one
(j = W−2 is the newest). Each valid step shifts its u in and the oldest entry out, so the final
state of a sequence of length L is its last W−1 inputs, and where L < W−1 its oldest W−1−L
entries are the newest of h0, passed straight through (the gradient of that pass-through is
fla-org/flash-linear-attention #1140). There is no c. y is H wide and is the next layer's input.

Why the pre-norm, and the parameters' bound: a layer is linear in its input (up to SiLU), so unlike
the matrix families' cubic reads a stack cannot overflow, and the norm is not there for that. It is
there because a block normalises the input of its mixer, so a layer's input map sees what it sees
in a model, and because it makes each layer a bounded map (ε = 1: |x̂| ≤ sqrt(I_l), slope ≤ 1, as in
s6) whose x gradient goes through a non-linear Jacobian a kernel can get wrong. It caps a layer's
input but does not raise a small one, so the scale across layers is set by
:meth:`Conv1dFamily.param_bound`: torch's ±1/sqrt(H) would scale each layer's output by about
sqrt(W/(9H)) of its input's (a third of a GEMM's variance, then W taps of variance 1/(3H)), and a
third layer's outputs and gradients would fall far below the first's, under what a tolerance judges.

Case id: ``conv1d-L2-uni-I3-H4-W3[-silu][-nobias]-T7-B3-…``. A causal convolution runs forward in
time only: ``-bi`` is refused and never drawn; it has no decay, so no ``-longmem``.

Every size and switch of a config is padded into one bucket of the JAX reference
(:meth:`Conv1dFamily.bucket`): I and H to powers of two, W to 4 (the extra taps are the oldest,
with zero weights, and the real state sits at the newest end of the padded one), SiLU and the
real input width as data.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import numpy as np

from ..errors import UsageError
from .base import Family, Option, RNNConfig

NORM_EPS = 1.0
MIN_WIDTH, MAX_WIDTH = 2, 4
# Data a bucketed JAX program passes in each unit's parameters (never drawn, never reported): the
# real input width of the layer (the norm's mean) and the SiLU switch as 0/1.
WIDTH, SILU_ON = "@width", "@silu"
MIN_BUCKET_INPUT, MIN_BUCKET_HIDDEN = 8, 4

CONV_WIDTH = Option("conv_width", r"W(\d+)", None, "W<window>, e.g. W3 (2..4)", example=3, minimum=MIN_WIDTH)
SILU = Option("silu", "silu", False, "silu (optional: SiLU after the convolution)")


class Conv1dFamily(Family):
    """The causal depthwise convolution with its state, as described in the module docstring."""

    kernels = {
        "fused-cpu": "gradcheck_rnn.kernels.conv1d_cpu:Conv1dCPUKernel",
        "fused-gpu": "gradcheck_rnn.kernels.fused_gpu.conv1d:Conv1dGPUKernel",
    }
    mutants = {
        "conv1d-short-sequence-dh0-pass-through-dropped":
            ("fused-cpu", "gradcheck_rnn.targets.kernel_bugs:Conv1dShortSequenceDh0PassThroughDropped"),
        "conv1d-packed-dweight-whole-stream":
            ("fused-cpu", "gradcheck_rnn.targets.kernel_bugs:Conv1dPackedWeightGradWholeStream"),
        "conv1d-initial-state-grad-without-bias":
            ("fused-cpu", "gradcheck_rnn.targets.kernel_bugs:Conv1dInitialStateGradWithoutBias"),
        "conv1d-backward-reads-next-sequence":
            ("fused-cpu", "gradcheck_rnn.targets.kernel_bugs:Conv1dBackwardReadsNextSequence"),
    }

    def width(self, config: RNNConfig) -> int:
        """W, the window."""
        return config.option("conv_width")

    def output_size(self, config: RNNConfig) -> int:
        return config.hidden_size

    def h_size(self, config: RNNConfig) -> int:
        return config.hidden_size * (self.width(config) - 1)

    def unit_shapes(self, config: RNNConfig, layer: int) -> dict[str, tuple[int, ...]]:
        H = config.hidden_size
        shapes = {"w_in": (H, self.layer_input_size(config, layer)), "w_conv": (H, self.width(config))}
        if config.bias:
            shapes["b_conv"] = (H,)
        return shapes

    def param_bound(self, config: RNNConfig) -> float:
        """Uniform in ±min(1, 2/sqrt(max(I, H))): a layer's output then keeps its normalised input's
        order (u with up to 4/3 of x̂'s variance, then W taps of variance 4/(3·max(I, H)) each), where
        torch's ±1/sqrt(H) would shrink each layer (module docstring)."""
        return min(1.0, 2.0 / math.sqrt(max(config.input_size, config.hidden_size)))

    def validate(self, config: RNNConfig) -> None:
        super().validate(config)
        width = self.width(config)
        if not MIN_WIDTH <= width <= MAX_WIDTH:
            raise UsageError(f"conv_width={width} is not allowed for {self.token}; the window W is "
                             f"{MIN_WIDTH}..{MAX_WIDTH}, as causal-conv1d and fla take it")

    def draw_options(self, rng: Any, hidden_size: int) -> dict[str, Any]:
        """W uniform in 2..4, SiLU half the time (the libraries' two activations)."""
        return {"conv_width": int(rng.integers(MIN_WIDTH, MAX_WIDTH + 1)), "silu": bool(rng.random() < 0.5)}

    def step(self, ops: Any, p: Mapping[str, Any], x: Any, h: Any, c: Any, config: RNNConfig) -> tuple[Any, Any, Any]:
        """One step; in a bucketed program the SiLU switch is 0/1 data in ``p``, and
        ``on·a + (1 − on)·b`` is exactly a or b for finite values, gradients included."""
        H = config.hidden_size
        width = p.get(WIDTH, x.shape[-1])  # padded columns of x are zero: the sum is the real one
        x = x / ops.sqrt((x * x).sum(-1)[..., None] / width + NORM_EPS)
        u = x @ p["w_in"].T
        window = ops.cat([h.reshape(h.shape[:-1] + (H, -1)), u[..., None]], -1)  # (..., H, W), oldest first
        pre = (window * p["w_conv"]).sum(-1)
        if "b_conv" in p:
            pre = pre + p["b_conv"]
        if config.option("silu"):
            on = p.get(SILU_ON, 1.0)
            pre = on * (pre * ops.sigmoid(pre)) + (1.0 - on) * pre
        return pre, window[..., 1:].reshape(h.shape), c

    # ------------------------------------------------------------------ one JAX program for many configs
    def bucket(self, config: RNNConfig) -> RNNConfig:
        """I and H padded to powers of two (at least 8 and 4), W to 4, SiLU and bias on: zero padding
        is exact. An extra input column is zero (the norm divides by the real width, passed as
        data); an extra channel has zero w_in rows, taps and bias, so its u and y are 0 and its
        state stays at its zero h0; an extra tap is older than every real one, has zero weight, and
        the real state sits at the newest W−1 of the padded W_p−1 entries, where the shift keeps it.
        The SiLU switch is data."""
        return dataclasses.replace(
            config, input_size=_up(config.input_size, MIN_BUCKET_INPUT),
            hidden_size=_up(config.hidden_size, MIN_BUCKET_HIDDEN), bias=True,
            options={"conv_width": MAX_WIDTH, "silu": True}, long_memory=False)

    def pad_unit(self, config: RNNConfig, padded: RNNConfig, layer: int,
                 unit: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        H, W = config.hidden_size, self.width(config)
        out = {k: np.zeros(s) for k, s in self.unit_shapes(padded, layer).items()}
        width = unit["w_in"].shape[1]
        out["w_in"][:H, :width] = unit["w_in"]
        out["w_conv"][:H, MAX_WIDTH - W:] = unit["w_conv"]
        if config.bias:
            out["b_conv"][:H] = unit["b_conv"]
        out.update({WIDTH: np.float64(width), SILU_ON: np.float64(config.option("silu"))})
        return out

    def unpad_unit(self, config: RNNConfig, padded: RNNConfig, layer: int,
                   grads: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        H, W = config.hidden_size, self.width(config)
        out = {"w_in": grads["w_in"][:H, :self.layer_input_size(config, layer)],
               "w_conv": grads["w_conv"][:H, MAX_WIDTH - W:]}
        if config.bias:
            out["b_conv"] = grads["b_conv"][:H]
        return {k: np.array(v) for k, v in out.items()}

    def pad_state(self, config: RNNConfig, padded: RNNConfig, h: np.ndarray) -> np.ndarray:
        """(..., H·(W−1)) -> (..., Hp·3), each channel's real state at its newest W−1 entries."""
        H, S = config.hidden_size, self.width(config) - 1
        out = np.zeros(h.shape[:-1] + (padded.hidden_size, MAX_WIDTH - 1))
        out[..., :H, MAX_WIDTH - 1 - S:] = h.reshape(h.shape[:-1] + (H, S))
        return out.reshape(h.shape[:-1] + (padded.h_size,))

    def unpad_state(self, config: RNNConfig, padded: RNNConfig, h: np.ndarray) -> np.ndarray:
        H, S = config.hidden_size, self.width(config) - 1
        real = h.reshape(h.shape[:-1] + (padded.hidden_size, MAX_WIDTH - 1))[..., :H, MAX_WIDTH - 1 - S:]
        return np.ascontiguousarray(real).reshape(h.shape[:-1] + (config.h_size,))


def _up(n: int, least: int) -> int:
    return max(least, 1 << (int(n) - 1).bit_length())


CONV1D = Conv1dFamily(token="conv1d", case_work=1.5, gates=("u",), bidirectional=False, options=(CONV_WIDTH, SILU))
