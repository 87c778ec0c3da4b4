"""What the matrix-memory families share: heads of a K×V state matrix, read and written through q, k, v.

``mlstm`` (:mod:`.mlstm`), ``gla`` (:mod:`.gla`) and ``gdn`` (:mod:`.gdn`) keep, per head, a
matrix S (K rows, one per key unit; V columns, one per value unit) instead of a vector. Per
layer, from its input x_t (I_l wide: I for layer 0, H for deeper layers), with NH heads (case id
``-NH<k>``, dividing H), K key units per head (``-K<k>``) and V = H / NH value units per head:

    x̂ = x_t / sqrt(mean(x_t²) + 1)        the pre-norm, as s6's (:data:`NORM_EPS`; see below)
    q = W_q x̂, k = W_k x̂                  w_q, w_k (NH·K, I_l), rows head-major (row h·K + j)
    v = W_v x̂                             w_v (NH·V, I_l) = (H, I_l), rows head-major
    y_t = [o_1 | … | o_NH]                 each head's output (V wide), H wide in all

and gates that are linear maps of x̂ too (each family names its own, with biases that ``-nobias``
drops). No bias on q, k, v; no output projection (a block's projection is an ordinary GEMM
around the recurrence, where these bugs do not live). The scale of a read is 1/sqrt(K).

The state S of all heads is the case's h0 / hy, flattened head-major, then key, then value:
element (h·K + j)·V + v holds S_h[j, v] (h_size = NH·K·V). A family with more state (mLSTM's
normaliser n and stabiliser m) keeps it in c0 / cy. The families run forward in time only, as
the kernels that implement them do (a bidirectional model runs two layers): ``-bi`` is refused
and never drawn.

Why the pre-norm: a read o = Sᵀq is a polynomial of degree 3 in the layer's input (q·k·v), so a
stack of three layers without normalisation grows like the 27th power of its input and an
ordinary draw overflows float32 — a correct kernel must never fail for values float32 cannot
hold. ε = 1 keeps |x̂| ≤ sqrt(I_l) and the map's derivative ≤ 1, so a float32 rounding in a
near-zero row is not amplified in the next layer (the same reasoning as s6, :mod:`.s6`).

Regimes, as case-id tokens: ``-longmem`` (decay near 1: the decay gate's bias + 4, a per-step
decay of about 0.98, where a wrong carry across chunks cannot hide in a decay) and
``-strongdecay`` (the decay gate's bias − 4, a per-step log decay of about −4: a chunk of 16
steps spans e^−64, the regime of QwenLM/FlashQLA PR #28's cancellation in a fused backward).
Both shift drawn values by a constant: no other draw changes. Chunk edges are a length pattern
of the sweep profiles (``chunk_edges``), not a config token.

Every size and switch of a config is padded into one bucket of the JAX reference
(:meth:`MatrixFamily.bucket`): each parameter kind names the axes of its rows and columns
(:meth:`MatrixFamily.unit_axes`), and the placement of every real index into the bucket follows
from the axis alone, so a family writes no padding code of its own.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import numpy as np

from ..errors import UsageError
from .base import Family, Option, RNNConfig

NORM_EPS = 1.0
# Data a bucketed JAX program passes in each unit's parameters (never drawn, never reported): the
# real input width of the layer (the norm's mean) and the real 1/sqrt(K) (the read's scale).
WIDTH, SCALE = "@width", "@scale"
MEMORY_SHIFT = 4.0  # -longmem: the decay gate's bias + 4 (σ(4 + O(1/sqrt(H))) ≈ 0.98)
STRONG_SHIFT = 4.0  # -strongdecay: the decay gate's bias − 4 (log σ(−4) ≈ −4)

# The axes a parameter's rows or columns run along (:meth:`MatrixFamily.unit_axes`):
IN = "in"        # the layer input: I for layer 0, H = NH·V head-major for deeper layers
KEY = "key"      # NH·K, head-major
VALUE = "value"  # NH·V, head-major
HEAD = "head"    # NH
RANK = "rank"    # a family's low-rank width (gla's decay map)

HEADS = Option("heads", r"NH(\d+)", 1, "NH<heads>, e.g. NH2 (optional; NH divides H)", divides="hidden_size")
KEY_WIDTH = Option("key_width", r"K(\d+)", None, "K<key units per head>, e.g. K2", example=2)
STRONG_DECAY = Option("strong_decay", "strongdecay", False, "strongdecay (optional: decay gate bias − 4)")


# The least padded input width and head count of a bucket: the matrix profile's 3,000 cases need 8
# programs with these, 40 with 4 and 1 (benchmarks/RESULTS.md, "Families' programs").
MIN_BUCKET_INPUT = 8
MIN_BUCKET_HEADS = 8


class MatrixFamily(Family):
    """The shared part of a matrix-memory family (see the module docstring). A subclass gives its
    gate parameters (:meth:`gate_axes`), the decay gate's bias kind (:attr:`decay_bias`), its step,
    and for a cell state its layout; everything else (shapes, buckets, regimes) is here."""

    decay_bias: str = ""  # the parameter kind whose shift sets -longmem / -strongdecay
    home_profile = "matrix"

    # ------------------------------------------------------------------ sizes
    def sizes(self, config: RNNConfig) -> tuple[int, int, int]:
        """(NH, K, V) of a config."""
        heads = config.option("heads")
        return heads, config.option("key_width"), config.hidden_size // heads

    def output_size(self, config: RNNConfig) -> int:
        return config.hidden_size

    def h_size(self, config: RNNConfig) -> int:
        NH, K, V = self.sizes(config)
        return NH * K * V

    def param_bound(self, config: RNNConfig) -> float:
        """Uniform in ±min(1, 2/sqrt(max(I, H))): a read is cubic in its input (q·k·v), so torch's
        ±1/sqrt(H) shrinks each layer's output by about 10× and a third layer's y (and every
        gradient through it) fell to 1e-13 of the first's, below what any tolerance judges. With
        this bound a layer keeps its input's scale within a few times (measured on 2- and 3-layer
        cases of every matrix family, with and without initial states)."""
        return min(1.0, 2.0 / math.sqrt(max(config.input_size, config.hidden_size)))

    def gate_axes(self, config: RNNConfig) -> dict[str, tuple[str, ...]]:
        """The family's gate parameters (biases included, in canonical order) with their axes."""
        raise NotImplementedError  # pragma: no cover - every matrix family defines it

    def unit_axes(self, config: RNNConfig) -> dict[str, tuple[str, ...]]:
        """Every parameter kind of a unit with the axes of its rows (and columns), canonical order;
        without bias, the gates' bias vectors are left out."""
        axes = {"w_q": (KEY, IN), "w_k": (KEY, IN), "w_v": (VALUE, IN), **self.gate_axes(config)}
        return {k: a for k, a in axes.items() if config.bias or not self.is_bias(k)}

    @staticmethod
    def is_bias(kind: str) -> bool:
        return kind.startswith("b_")

    def axis_size(self, config: RNNConfig, layer: int, axis: str) -> int:
        NH, K, V = self.sizes(config)
        return {IN: self.layer_input_size(config, layer), KEY: NH * K, VALUE: NH * V, HEAD: NH,
                RANK: self.rank(config)}[axis]

    def rank(self, config: RNNConfig) -> int:
        """The width of a low-rank map, for a family that has one."""
        return 0

    def unit_shapes(self, config: RNNConfig, layer: int) -> dict[str, tuple[int, ...]]:
        return {kind: tuple(self.axis_size(config, layer, a) for a in axes)
                for kind, axes in self.unit_axes(config).items()}

    def gated_kinds(self) -> frozenset[str]:
        return frozenset()

    def validate(self, config: RNNConfig) -> None:
        super().validate(config)
        if config.option("strong_decay") and config.long_memory:
            raise UsageError(f"strongdecay is not allowed with longmem for {self.token}; "
                             f"the decay is either near 1 or strong")
        if config.option("strong_decay") and not config.bias:
            raise UsageError(f"strongdecay is not allowed for this {self.token} config; it shifts the decay "
                             f"gate's bias, so it needs it (not with -nobias)")

    # ------------------------------------------------------------------ regimes
    def keeps_memory(self, config: RNNConfig) -> bool:
        return config.bias

    def hold_memory(self, config: RNNConfig, params: Mapping[str, Any]) -> dict[str, Any]:
        return self._shift_decay(params, MEMORY_SHIFT)

    def regime_params(self, config: RNNConfig, params: Mapping[str, Any]) -> dict[str, Any]:
        params = super().regime_params(config, params)
        return self._shift_decay(params, -STRONG_SHIFT) if config.option("strong_decay") else dict(params)

    def _shift_decay(self, params: Mapping[str, Any], shift: float) -> dict[str, Any]:
        return {k: v + shift if k.rpartition(".")[2] == self.decay_bias else v for k, v in params.items()}

    # ------------------------------------------------------------------ the step's shared part
    def project(self, ops: Any, p: Mapping[str, Any], x: Any, config: RNNConfig) -> tuple[Any, Any, Any, Any]:
        """x̂ (..., I_l), q and k (..., NH, K), v (..., NH, V): the pre-norm and the three maps.
        In a bucketed program the norm divides by the real width (data in ``p``)."""
        NH, K, V = self.sizes(config)
        width = p.get(WIDTH, x.shape[-1])  # padded columns of x are zero: the sum is the real one
        x = x / ops.sqrt((x * x).sum(-1)[..., None] / width + NORM_EPS)
        lead = x.shape[:-1]
        return (x, (x @ p["w_q"].T).reshape(lead + (NH, K)), (x @ p["w_k"].T).reshape(lead + (NH, K)),
                (x @ p["w_v"].T).reshape(lead + (NH, V)))

    def scale(self, p: Mapping[str, Any], config: RNNConfig) -> Any:
        """1/sqrt(K) of the real config (data in a bucketed program)."""
        return p.get(SCALE, 1.0 / math.sqrt(config.option("key_width")))

    def matrix(self, h: Any, config: RNNConfig) -> Any:
        """The flat state (..., NH·K·V) as (..., NH, K, V)."""
        return h.reshape(h.shape[:-1] + self.sizes(config))

    # ------------------------------------------------------------------ one JAX program for many configs
    def bucket(self, config: RNNConfig) -> RNNConfig:
        """I, NH, K and V (and a rank) padded to powers of two (at least 8 for I and NH, 4 for K, V
        and a rank: a wider program costs microseconds a call, another program a load), bias
        on, no regime token: zero padding is exact. Each head's real outputs sit at the start of its
        Vp columns (:meth:`output_columns`), where the reference reads y and the next layer's maps
        read their input. An extra input column is zero (the norm divides by the real width, passed as
        data); an extra head, key or value unit has zero rows in every map, so its q, k, v are 0,
        its part of the state stays at its zero h0 and its output is 0 (gdn's L2 norm adds 0 for a
        zero unit, mLSTM's denominator is max(0, e^0) + ε for an extra head); an extra rank has
        zero rows and columns. The read's scale is the real 1/sqrt(K), passed as data."""
        NH, K, V = self.sizes(config)
        NHp, Vp = _up(NH, MIN_BUCKET_HEADS), _up(V, 4)
        options = {**self.option_values(config), "heads": NHp, "key_width": _up(K, 4), "strong_decay": False,
                   **self.bucket_options(config)}
        return dataclasses.replace(config, input_size=_up(config.input_size, MIN_BUCKET_INPUT), hidden_size=NHp * Vp,
                                   bias=True, options=options, long_memory=False)  # regimes are in the parameters' values

    def bucket_options(self, config: RNNConfig) -> dict[str, Any]:
        """A family's own options in its bucket (gla's rank padded); none by default."""
        return {}

    def _index(self, config: RNNConfig, padded: RNNConfig, layer: int, axis: str) -> np.ndarray:
        """Where each real index of ``axis`` sits in the bucket's axis."""
        NH, K, _ = self.sizes(config)
        Kp = padded.option("key_width")
        if axis == KEY:
            return (np.arange(NH)[:, None] * Kp + np.arange(K)).ravel()
        if axis == VALUE or (axis == IN and layer > 0):  # a deeper layer reads the heads' outputs
            return self.output_columns(config, padded)
        return np.arange(self.axis_size(config, layer, axis))  # I, heads and ranks keep their indices

    def output_columns(self, config: RNNConfig, padded: RNNConfig) -> np.ndarray:
        """Head h's value unit v (column h·V + v of y) at h·Vp + v in the bucket."""
        NH, _, V = self.sizes(config)
        Vp = self.sizes(padded)[2]
        return (np.arange(NH)[:, None] * Vp + np.arange(V)).ravel()

    def _placement(self, config: RNNConfig, padded: RNNConfig, layer: int, kind: str) -> tuple[np.ndarray, ...]:
        axes = self.unit_axes(padded)[kind]
        return np.ix_(*(self._index(config, padded, layer, a) for a in axes))

    def pad_unit(self, config: RNNConfig, padded: RNNConfig, layer: int,
                 unit: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = {k: np.zeros(s) for k, s in self.unit_shapes(padded, layer).items()}
        for kind, value in unit.items():
            out[kind][self._placement(config, padded, layer, kind)] = value
        out[WIDTH] = np.float64(self.layer_input_size(config, layer))
        out[SCALE] = np.float64(1.0 / math.sqrt(config.option("key_width")))
        return out

    def unpad_unit(self, config: RNNConfig, padded: RNNConfig, layer: int,
                   grads: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {kind: np.array(grads[kind][self._placement(config, padded, layer, kind)])
                for kind in self.unit_shapes(config, layer)}

    def pad_state(self, config: RNNConfig, padded: RNNConfig, h: np.ndarray) -> np.ndarray:
        NH, K, V = self.sizes(config)
        out = np.zeros(h.shape[:-1] + self.sizes(padded))
        out[..., :NH, :K, :V] = h.reshape(h.shape[:-1] + (NH, K, V))
        return out.reshape(h.shape[:-1] + (padded.h_size,))

    def unpad_state(self, config: RNNConfig, padded: RNNConfig, h: np.ndarray) -> np.ndarray:
        NH, K, V = self.sizes(config)
        real = h.reshape(h.shape[:-1] + self.sizes(padded))[..., :NH, :K, :V]
        return np.ascontiguousarray(real).reshape(h.shape[:-1] + (config.h_size,))


def _up(n: int, least: int) -> int:
    return max(least, 1 << (int(n) - 1).bit_length())
