"""What cuDNN's four cells share: the torch/cuDNN parameter layout and the flat packing.

Per layer and direction: w_ih (G·H, I_l), w_hh (G·H, S), w_hr (P, H) for an LSTM with
projections, b_ih and b_hh (G·H,) unless the config has no bias. The flat cudnn/mxnet style
holds all weights (per layer, per direction: w_ih, w_hh, w_hr), then all biases (b_ih, b_hh).

Their math is :meth:`CudnnFamily.step`, torch.nn's equations over the ops namespace
(:mod:`.ops`), which the ``loop`` reference runs like any family's. The ``jax`` reference runs
the bucketed program of the four cells (:mod:`gradcheck_rnn.references.jax_cudnn`, one compiled
program for every mode and shape of a bucket) instead of the generic step program: a family
names its JAX program in :attr:`CudnnFamily.jax_program`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from .base import DIRECTIONS, Family, RNNConfig, open_gate, param_key


GATED_KINDS = frozenset({"w_ih", "w_hh", "b_ih", "b_hh"})
# -longmem adds this to both biases of the gate that keeps the state (LSTM f, GRU z): the gate's
# pre-activation moves by 4 from a draw of ±1/sqrt(H), so it stays open (σ ≈ 0.98) at every step.
MEMORY_BIAS = 2.0


@dataclass(frozen=True)
class CudnnFamily(Family):
    """A cuDNN cell: G gate blocks of H rows over the input and the recurrent state.

    ``memory_gate`` is the gate whose opening keeps the state (LSTM's forget gate, GRU's update
    gate), None for the vanilla cells, which have no long-memory regime."""

    memory_gate: str | None = None
    home_profile = "ci"

    def pre_activations(self, ops: Any, p: Mapping[str, Any], x: Any, h: Any) -> tuple[Any, Any]:
        """The gate pre-activations of the input and of the recurrent state (..., G·H), each with
        its own bias (none without bias): GRU's reset gate needs them apart."""
        gi, gh = ops.linear(x, p["w_ih"]), ops.linear(h, p["w_hh"])
        if "b_ih" in p:
            gi, gh = gi + p["b_ih"], gh + p["b_hh"]
        return gi, gh

    def gate_blocks(self, ops: Any, pre: Any) -> list[Any]:
        """The G gate blocks (..., H) of a pre-activation (..., G·H), in :attr:`gates` order."""
        return ops.split(pre, self.num_gates)

    def cell(self, ops: Any, gi: Any, gh: Any, h: Any, c: Any) -> tuple[Any, Any]:
        """The cell on its pre-activations (:meth:`pre_activations`, (..., G·H)) and states:
        (h' before any projection, c'); c passes through a cell without a cell state. The
        bucketed JAX program calls this on its padded gate blocks."""
        raise NotImplementedError  # pragma: no cover - each cuDNN cell defines it

    def step(self, ops: Any, p: Mapping[str, Any], x: Any, h: Any, c: Any, config: RNNConfig) -> tuple[Any, Any, Any]:
        """torch.nn's step: the cell on the pre-activations, then LSTM's projection h' = W_hr·h'."""
        h_new, c_new = self.cell(ops, *self.pre_activations(ops, p, x, h), h, c)
        if "w_hr" in p:
            h_new = ops.linear(h_new, p["w_hr"])
        return h_new, h_new, c_new

    # the bucketed program of the four cuDNN cells (gradcheck_rnn.references.jax_cudnn): one compiled
    # program serves every cuDNN mode and shape of a bucket, and its programs are kept as artifacts
    # across processes, where the generic step program would compile one per mode and shape
    jax_program = "bucketed"

    def unit_shapes(self, config: RNNConfig, layer: int) -> dict[str, tuple[int, ...]]:
        gh, S = self.num_gates * config.hidden_size, self.output_size(config)
        shapes = {"w_ih": (gh, self.layer_input_size(config, layer)), "w_hh": (gh, S)}
        if config.proj_size:
            shapes["w_hr"] = (config.proj_size, config.hidden_size)
        if config.bias:
            shapes.update(b_ih=(gh,), b_hh=(gh,))
        return shapes

    def gated_kinds(self) -> frozenset[str]:
        return GATED_KINDS

    def keeps_memory(self, config: RNNConfig) -> bool:
        return self.memory_gate is not None and config.bias

    def hold_memory(self, config: RNNConfig, params: Mapping[str, Any]) -> dict[str, Any]:
        return open_gate(params, ("b_ih", "b_hh"), self.gates.index(self.memory_gate), config.hidden_size,
                         MEMORY_BIAS)

    def packed_order(self, config: RNNConfig, style: str) -> list[str]:
        units = [(layer, d) for layer in range(config.num_layers) for d in DIRECTIONS[:config.num_directions]]
        keys = [(layer, d, kind) for layer, d in units for kind in self.unit_shapes(config, layer)]
        weights = [param_key(*k) for k in keys if k[2].startswith("w_")]
        return weights + [param_key(*k) for k in keys if k[2].startswith("b_")]


@dataclass(frozen=True)
class ElmanFamily(CudnnFamily):
    """torch.nn.RNN: h' = nonlinearity(W_ih x + b_ih + W_hh h + b_hh), ``nonlinearity`` tanh or relu."""

    nonlinearity: str = "tanh"

    @property
    def kinked(self) -> bool:  # type: ignore[override]
        """relu has a kink at 0; tanh is smooth."""
        return self.nonlinearity == "relu"

    def cell(self, ops: Any, gi: Any, gh: Any, h: Any, c: Any) -> tuple[Any, Any]:
        return getattr(ops, self.nonlinearity)(gi + gh), c  # relu'(0) = 0 in both namespaces, as cuDNN


@dataclass(frozen=True)
class LSTMFamily(CudnnFamily):
    """torch.nn.LSTM: gates i, f, g, o; c' = σ(f)·c + σ(i)·tanh(g), h' = σ(o)·tanh(c'), and with a
    projection h' = W_hr·(σ(o)·tanh(c'))."""

    def cell(self, ops: Any, gi: Any, gh: Any, h: Any, c: Any) -> tuple[Any, Any]:
        i, f, g, o = self.gate_blocks(ops, gi + gh)
        c_new = ops.sigmoid(f) * c + ops.sigmoid(i) * ops.tanh(g)
        return ops.sigmoid(o) * ops.tanh(c_new), c_new


@dataclass(frozen=True)
class GRUFamily(CudnnFamily):
    """torch.nn.GRU: gates r, z, n, the reset gate applied after the hidden bias:
    n = tanh(W_in x + b_in + r·(W_hn h + b_hn)), h' = (1 − z)·n + z·h."""

    def cell(self, ops: Any, gi: Any, gh: Any, h: Any, c: Any) -> tuple[Any, Any]:
        (ir, iz, i_n), (hr, hz, hn) = self.gate_blocks(ops, gi), self.gate_blocks(ops, gh)
        r, z = ops.sigmoid(ir + hr), ops.sigmoid(iz + hz)
        n = ops.tanh(i_n + r * hn)
        return (1.0 - z) * n + z * h, c
