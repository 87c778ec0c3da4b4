"""Parameter names, shapes and flat-vector packing (docs/contracts.md, "Parameters").

Parameters are a dict keyed ``l{layer}.{fwd|bwd}.{w_ih|w_hh|b_ih|b_hh}`` with shapes
w_ih (G·H, I_l), w_hh (G·H, H), b_ih and b_hh (G·H,), I_0 = I and I_l = D·H for l > 0.
The flat cudnn/mxnet style holds all weights (per layer, per direction: w_ih, w_hh), then
all biases in the same order (b_ih, b_hh).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator, Mapping

import numpy as np

from .errors import UsageError

if TYPE_CHECKING:
    from .case import RNNConfig

GATES = {"rnn_relu": 1, "rnn_tanh": 1, "lstm": 4, "gru": 3}
GATE_NAMES = {"rnn_relu": ("h",), "rnn_tanh": ("h",), "lstm": ("i", "f", "g", "o"), "gru": ("r", "z", "n")}
DIRECTIONS = ("fwd", "bwd")
PACK_STYLES = ("cudnn", "mxnet")


def directions(config: "RNNConfig") -> tuple[str, ...]:
    return DIRECTIONS if config.bidirectional else DIRECTIONS[:1]


def layer_input_size(config: "RNNConfig", layer: int) -> int:
    """I_0 = input_size; deeper layers see the [fwd | bwd] concatenation, D·H wide."""
    return config.input_size if layer == 0 else config.num_directions * config.hidden_size


def param_key(layer: int, direction: str, kind: str) -> str:
    return f"l{layer}.{direction}.{kind}"


def _units(config: "RNNConfig") -> Iterator[tuple[int, str]]:
    for layer in range(config.num_layers):
        for direction in directions(config):
            yield layer, direction


def param_shapes(config: "RNNConfig") -> dict[str, tuple[int, ...]]:
    """Every parameter key with its shape, in canonical order (layer, direction, w_ih, w_hh, b_ih, b_hh)."""
    gh = GATES[config.mode] * config.hidden_size
    shapes: dict[str, tuple[int, ...]] = {}
    for layer, direction in _units(config):
        shapes[param_key(layer, direction, "w_ih")] = (gh, layer_input_size(config, layer))
        shapes[param_key(layer, direction, "w_hh")] = (gh, config.hidden_size)
        shapes[param_key(layer, direction, "b_ih")] = (gh,)
        shapes[param_key(layer, direction, "b_hh")] = (gh,)
    return shapes


def param_names(config: "RNNConfig") -> list[str]:
    return list(param_shapes(config))


def _packed_order(config: "RNNConfig", style: str) -> list[str]:
    if style not in PACK_STYLES:
        raise UsageError(f"unknown pack style {style!r}; allowed: {', '.join(PACK_STYLES)}")
    units = list(_units(config))
    weights = [param_key(l, d, k) for l, d in units for k in ("w_ih", "w_hh")]
    biases = [param_key(l, d, k) for l, d in units for k in ("b_ih", "b_hh")]
    return weights + biases


def pack(params: Mapping[str, Any], config: "RNNConfig", style: str = "cudnn") -> Any:
    """Flatten a parameter dict into one vector (numpy in, numpy out; torch in, torch out)."""
    order = _packed_order(config, style)
    missing = [k for k in order if k not in params]
    if missing:
        raise UsageError(f"parameter dict lacks {missing[0]!r}; expected keys: {', '.join(order)}")
    parts = [params[k].reshape(-1) for k in order]
    if isinstance(parts[0], np.ndarray):
        return np.concatenate(parts)
    import torch

    return torch.cat(parts)


def unpack(flat: Any, config: "RNNConfig", style: str = "cudnn") -> dict[str, Any]:
    """Inverse of :func:`pack`: views into ``flat`` keyed in canonical order."""
    shapes = param_shapes(config)
    order = _packed_order(config, style)
    total = sum(int(np.prod(shapes[k])) for k in order)
    if flat.shape != (total,):
        raise UsageError(f"flat parameter vector has shape {tuple(flat.shape)}; this config needs ({total},)")
    views: dict[str, Any] = {}
    offset = 0
    for key in order:
        size = int(np.prod(shapes[key]))
        views[key] = flat[offset:offset + size].reshape(shapes[key])
        offset += size
    return {k: views[k] for k in shapes}
