"""Parameter names, shapes and flat-vector packing (docs/contracts.md, "Parameters").

Parameters are a dict keyed ``l{layer}.{fwd|bwd}.{w_ih|w_hh|w_hr|b_ih|b_hh}`` with shapes
w_ih (G·H, I_l), w_hh (G·H, S), b_ih and b_hh (G·H,), I_0 = I and I_l = D·S for l > 0, where
S is the state width: H, or P for an LSTM with projections (``proj_size`` P), which adds
w_hr (P, H) — h = W_hr·(o ⊙ tanh c). A config without bias has no b_ih / b_hh keys at all.
The flat cudnn/mxnet style holds all weights (per layer, per direction: w_ih, w_hh, then
w_hr where present, as cuDNN's LSTMP packs it), then all biases in the same order (b_ih, b_hh).
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping

import numpy as np

from .config import DIRECTIONS, GATES, RNNConfig
from .errors import UsageError

PACK_STYLES = ("cudnn", "mxnet")


def directions(config: RNNConfig) -> tuple[str, ...]:
    return DIRECTIONS if config.bidirectional else DIRECTIONS[:1]


def layer_input_size(config: RNNConfig, layer: int) -> int:
    """I_0 = input_size; deeper layers see the [fwd | bwd] concatenation, D·S wide (S = P or H)."""
    return config.input_size if layer == 0 else config.num_directions * config.state_size


def unit_kinds(config: RNNConfig) -> tuple[str, ...]:
    """The parameter kinds of one layer and direction, in canonical order."""
    weights = ("w_ih", "w_hh", "w_hr") if config.proj_size else ("w_ih", "w_hh")
    return weights + (("b_ih", "b_hh") if config.bias else ())


def param_key(layer: int, direction: str, kind: str) -> str:
    return f"l{layer}.{direction}.{kind}"


def _units(config: RNNConfig) -> Iterator[tuple[int, str]]:
    for layer in range(config.num_layers):
        for direction in directions(config):
            yield layer, direction


def param_shapes(config: RNNConfig) -> dict[str, tuple[int, ...]]:
    """Every parameter key with its shape, in canonical order (layer, direction, then
    w_ih, w_hh, w_hr, b_ih, b_hh as far as the config has them)."""
    gh = GATES[config.mode] * config.hidden_size
    shapes: dict[str, tuple[int, ...]] = {}
    for layer, direction in _units(config):
        kind_shapes = {"w_ih": (gh, layer_input_size(config, layer)), "w_hh": (gh, config.state_size),
                       "w_hr": (config.proj_size, config.hidden_size), "b_ih": (gh,), "b_hh": (gh,)}
        for kind in unit_kinds(config):
            shapes[param_key(layer, direction, kind)] = kind_shapes[kind]
    return shapes


def param_names(config: RNNConfig) -> list[str]:
    return list(param_shapes(config))


def _packed_order(config: RNNConfig, style: str) -> list[str]:
    if style not in PACK_STYLES:
        raise UsageError(f"unknown pack style {style!r}; allowed: {', '.join(PACK_STYLES)}")
    units, kinds = list(_units(config)), unit_kinds(config)
    weights = [param_key(l, d, k) for l, d in units for k in kinds if k.startswith("w_")]
    biases = [param_key(l, d, k) for l, d in units for k in kinds if k.startswith("b_")]
    return weights + biases


def pack(params: Mapping[str, Any], config: RNNConfig, style: str = "cudnn") -> Any:
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


def unpack(flat: Any, config: RNNConfig, style: str = "cudnn") -> dict[str, Any]:
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
