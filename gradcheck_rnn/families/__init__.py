"""The registry of cell families: the one place that knows which modes exist (docs/contracts.md, "Cell families").

Every module that needs a per-mode fact (gate names, states, parameter shapes, what a family
supports) asks :func:`family` for the config's family instead of comparing mode names. The four
cuDNN cells come first, in the order that the sweep profiles, the JAX program's branches and the
tests have always used (:data:`CUDNN_MODES`); further families follow. A user family is added
with :func:`register`.
"""

from __future__ import annotations

from .base import DIRECTIONS, Convention, Family, Option, param_key, param_shapes
from .gru import GRU
from .lstm import LSTM
from .rnn_relu import RNN_RELU
from .rnn_tanh import RNN_TANH
from .s6 import S6
from .slstm import SLSTM

__all__ = ["CUDNN_MODES", "DIRECTIONS", "Convention", "Family", "Option", "family", "modes", "param_key", "param_shapes",
           "register"]

CUDNN_MODES: tuple[str, ...] = tuple(f.token for f in (RNN_RELU, RNN_TANH, LSTM, GRU))
_REGISTRY: dict[str, Family] = {f.token: f for f in (RNN_RELU, RNN_TANH, LSTM, GRU, S6, SLSTM)}
"""cuDNN's four cells, in their historical order (what a profile draws when it names no modes)."""



def modes() -> tuple[str, ...]:
    """Every registered family token, the cuDNN four first."""
    return tuple(_REGISTRY)


def family(token: str) -> Family:
    """The family of a mode token; KeyError if none is registered (RNNConfig turns that into a UsageError)."""
    return _REGISTRY[token]


def register(new: Family) -> Family:
    """Add a family (a user's, or a built-in module's); registering the same object twice is a no-op."""
    known = _REGISTRY.get(new.token)
    if known is not None and known is not new:
        raise ValueError(f"a family with token {new.token!r} is already registered")
    _REGISTRY[new.token] = new
    return new
