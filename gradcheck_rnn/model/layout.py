"""Parameter names, shapes and flat-vector packing (docs/contracts.md, "Parameters").

Parameters are a dict keyed ``l{layer}.{fwd|bwd}.{kind}`` with the shapes of the config's family
(:mod:`gradcheck_rnn.families`). For the cuDNN cells: w_ih (G·H, I_l), w_hh (G·H, S), b_ih and
b_hh (G·H,), I_0 = I and I_l = D·S for l > 0, where S is the state width: H, or P for an LSTM
with projections (``proj_size`` P), which adds w_hr (P, H) — h = W_hr·(o ⊙ tanh c). A config
without bias has no b_ih / b_hh keys at all. Their flat cudnn/mxnet style holds all weights (per
layer, per direction: w_ih, w_hh, then w_hr where present, as cuDNN's LSTMP packs it), then all
biases in the same order (b_ih, b_hh); other families pack in canonical order.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from .rnn_config import DIRECTIONS, RNNConfig
from ..errors import UsageError
from ..families import param_key, param_shapes as _family_param_shapes  # noqa: F401  (param_key re-exported)

PACK_STYLES = ("cudnn", "mxnet")


def directions(config: RNNConfig) -> tuple[str, ...]:
    return DIRECTIONS if config.bidirectional else DIRECTIONS[:1]


def layer_input_size(config: RNNConfig, layer: int) -> int:
    """I_0 = input_size; deeper layers see the [fwd | bwd] concatenation, D·S wide (S = P or H)."""
    return config.family.layer_input_size(config, layer)


def unit_kinds(config: RNNConfig, layer: int = 0) -> tuple[str, ...]:
    """The parameter kinds of one layer and direction, in canonical order."""
    return tuple(config.family.unit_shapes(config, layer))


def param_shapes(config: RNNConfig) -> dict[str, tuple[int, ...]]:
    """Every parameter key with its shape, in canonical order (layer, direction, then the family's
    kinds: w_ih, w_hh, w_hr, b_ih, b_hh as far as a cuDNN config has them)."""
    return _family_param_shapes(config.family, config)


def param_names(config: RNNConfig) -> list[str]:
    return list(param_shapes(config))


def _packed_order(config: RNNConfig, style: str) -> list[str]:
    if style not in PACK_STYLES:
        raise UsageError(f"unknown pack style {style!r}; allowed: {', '.join(PACK_STYLES)}")
    return config.family.packed_order(config, style)


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
