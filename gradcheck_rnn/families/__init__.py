"""The registry of cell families: the one place that knows which modes exist (docs/contracts.md, "Cell families").

Every module that needs a per-mode fact (gate names, states, parameter shapes, what a family
supports) asks :func:`family` for the config's family instead of comparing mode names. The four
cuDNN cells come first, in the order that the sweep profiles, the JAX program's branches and the
tests have always used (:data:`CUDNN_MODES`); further families follow.

A user family is added three ways (docs/contracts.md, "Cell families"): :func:`register` in the
user's own code; ``--family package.module:NAME`` on the command line (:func:`load`, which each
worker process repeats from the run spec); or an entry point of the group
:data:`ENTRY_POINT_GROUP` in an installed package, named by its mode token and loaded the first
time that token is asked for, in any process.
"""

from __future__ import annotations

import functools
import sys
from importlib.metadata import entry_points

from ..errors import INTERRUPTS, UsageError
from ..importing import import_object
from .base import DIRECTIONS, Convention, Family, Option, param_key, param_shapes
from .conv1d import CONV1D
from .deltaproduct import DELTAPRODUCT
from .gdn import GDN
from .gla import GLA
from .gru import GRU
from .kda import KDA
from .lstm import LSTM
from .mlstm import MLSTM
from .rnn_relu import RNN_RELU
from .rnn_tanh import RNN_TANH
from .rwkv7 import RWKV7
from .s6 import S6
from .slstm import SLSTM

__all__ = ["BUILT_IN_MODES", "CUDNN_MODES", "DIRECTIONS", "ENTRY_POINT_GROUP", "Convention", "Family", "Option", "family", "load",
           "load_all", "known", "modes", "param_key", "param_shapes", "register", "user_families"]

ENTRY_POINT_GROUP = "gradcheck_rnn.families"

CUDNN_MODES: tuple[str, ...] = tuple(f.token for f in (RNN_RELU, RNN_TANH, LSTM, GRU))
"""cuDNN's four cells, in their historical order (what a profile draws when it names no modes)."""
_BUILT_IN = (RNN_RELU, RNN_TANH, LSTM, GRU, S6, SLSTM, CONV1D, MLSTM, GLA, GDN, DELTAPRODUCT, RWKV7, KDA)
BUILT_IN_MODES: tuple[str, ...] = tuple(f.token for f in _BUILT_IN)
_REGISTRY: dict[str, Family] = {f.token: f for f in _BUILT_IN}



@functools.cache
def _installed() -> dict:
    """The entry points of :data:`ENTRY_POINT_GROUP` by name (each name is a mode token); read once
    per process (reading the installed metadata is slow next to a config's work, and every config asks)."""
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def known(token: str) -> bool:
    """Whether ``token`` names a family (registered, or an installed entry point)."""
    return token in _REGISTRY or token in _installed()


def modes() -> tuple[str, ...]:
    """Every family token: registered ones (the cuDNN four first), then installed entry points."""
    return tuple(dict.fromkeys([*_REGISTRY, *_installed()]))


def registered() -> tuple[Family, ...]:
    """Every family registered in this process (the built-ins, then those loaded), without loading
    an installed entry point: what a target asks for the families' kernels and mutants."""
    return tuple(_REGISTRY.values())


def convention_attributes() -> tuple[str, ...]:
    """The target attributes that declare a gradient convention of a registered family
    (``stabilizer_gradient``): what a wrapper around a target passes on for the judge."""
    return tuple(dict.fromkeys(c.attribute for f in _REGISTRY.values() for c in f.conventions))


def family(token: str) -> Family:
    """The family of a mode token, loading an installed entry point of that name the first time;
    KeyError if there is none (RNNConfig turns that into a UsageError)."""
    registered = _REGISTRY.get(token)
    if registered is not None:
        return registered
    entry = _installed().get(token)
    if entry is None:
        raise KeyError(token)
    loaded = _checked(entry.load, f"entry point {token!r} ({entry.value})")
    if loaded.token != token:
        raise UsageError(f"entry point {token!r} ({entry.value}) holds the family {loaded.token!r}; "
                         f"an entry point of {ENTRY_POINT_GROUP} is named by its family's token")
    return register(loaded)


def load(spec: str) -> Family:
    """Import and register the family ``package.module:NAME`` (``--family``); UsageError with one
    sentence when it cannot be imported or is not a :class:`Family`. Loading one twice is a no-op."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UsageError(f"--family {spec!r} is not allowed; give package.module:NAME, e.g. my_cells:MINGRU")
    loaded = _checked(lambda: import_object(spec, "family"), f"family {spec!r}")
    taken = _REGISTRY.get(loaded.token)
    if taken is not None and taken is not loaded:
        raise UsageError(f"family {spec!r} has the token {loaded.token!r}, which another family already has")
    return register(loaded)


def load_all(specs: tuple[str, ...] | list[str]) -> None:
    """:func:`load` each spec: what a process does before it rebuilds a case of a user family."""
    for spec in specs:
        load(spec)


def user_families() -> dict[str, str | None]:
    """Every registered family that is not built in, by token, with the ``module:NAME`` that loads
    it in another process (None when no module attribute holds it: only this process knows it)."""
    found: dict[str, str | None] = {}
    for token, registered in _REGISTRY.items():
        if any(registered is built_in for built_in in _BUILT_IN):
            continue
        module = sys.modules.get(type(registered).__module__)
        names = [name for name, value in vars(module).items() if value is registered] if module else []
        found[token] = f"{module.__name__}:{names[0]}" if names and module.__name__ != "__main__" else None
    return found


def _checked(get, what: str) -> Family:
    """``get()``'s family; anything it raises (SystemExit included) or a non-family is a UsageError."""
    try:
        obj = get()
    except (UsageError, *INTERRUPTS):
        raise
    except BaseException as exc:  # the user's module: its failure is a usage error, not our traceback
        raise UsageError(f"{what} could not be loaded ({type(exc).__name__}: {exc})") from None
    if not isinstance(obj, Family):
        raise UsageError(f"{what} is a {type(obj).__name__}, not a gradcheck_rnn.families.Family")
    return obj


def register(new: Family) -> Family:
    """Add a family (a user's, or a built-in module's); registering the same object twice is a no-op."""
    known = _REGISTRY.get(new.token)
    if known is not None and known is not new:
        raise ValueError(f"a family with token {new.token!r} is already registered")
    _REGISTRY[new.token] = new
    return new
