"""What cuDNN's four cells share: the torch/cuDNN parameter layout and the flat packing.

Per layer and direction: w_ih (G·H, I_l), w_hh (G·H, S), w_hr (P, H) for an LSTM with
projections, b_ih and b_hh (G·H,) unless the config has no bias. The flat cudnn/mxnet style
holds all weights (per layer, per direction: w_ih, w_hh, w_hr), then all biases (b_ih, b_hh).
Their math is written out in :mod:`gradcheck_rnn.references.loop`, the bucketed JAX program and
the fused kernels, which predate families.
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
