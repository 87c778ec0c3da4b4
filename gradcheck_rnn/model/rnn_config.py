"""The vocabulary of a fused RNN call: modes, gates, dtypes, request groups, and RNNConfig.

A leaf module: it imports nothing of the package but errors and the family registry (itself a
leaf), so every other module (layout, case, kernels, references) can name a config without
import cycles. Per-mode facts come from the config's family (:attr:`RNNConfig.family`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cached_property
from typing import Any, Mapping

import numpy as np

from ..errors import UsageError
from ..families import CUDNN_MODES, DIRECTIONS, Family, family, known, modes  # noqa: F401  (DIRECTIONS re-exported)

# The cuDNN modes and their gates, for the code written for exactly those four (the bucketed JAX
# program, the fused kernels' gate layouts); everything else asks the config's family.
MODES = CUDNN_MODES
GATES = {m: family(m).num_gates for m in MODES}
GATE_NAMES = {m: family(m).gates for m in MODES}
DTYPES = ("f64", "f32", "f16", "bf16")
TORCH_DTYPE_NAMES = {"f64": "float64", "f32": "float32", "f16": "float16", "bf16": "bfloat16"}
WANTS_GROUPS = ("all", "inputs", "x", "params")
HEADS = ("all", "y", "states", "last")
LENGTH_PATTERNS = ("random", "all_full", "all_one", "one_full_rest_short", "unsorted", "descending", "chunk_edges")
# What a profile without a [draw] lengths table draws: every pattern but chunk_edges, which only
# means something with the profile's chunk_sizes (docs/concepts/profiles.md).
DEFAULT_LENGTH_PATTERNS = LENGTH_PATTERNS[:-1]
MAX_SEED = 2**63 - 1


@dataclass(frozen=True)
class RNNConfig:
    """Shape and precision of one fused RNN call (time-major layout, x is (T, B, I))."""

    mode: str
    num_layers: int
    bidirectional: bool
    input_size: int
    hidden_size: int
    max_len: int
    batch_size: int
    dtype: str = "f64"
    proj_size: int = 0
    bias: bool = True
    # The family's own options (docs/contracts.md, "Cell families"), e.g. s6's state size:
    # given as a mapping, stored as sorted (name, value) pairs without the defaults, so equal
    # configs compare and hash equal.
    options: Any = ()
    # -longmem: the family's long-memory regime (gates held open, decay near 1), see Family.hold_memory
    long_memory: bool = False

    def __post_init__(self) -> None:
        if not known(self.mode):
            raise UsageError(f"unknown mode {self.mode!r}; allowed: {', '.join(modes())}")
        given = dict(self.options.items() if isinstance(self.options, Mapping) else self.options)
        defaults = {o.name: o.default for o in self.family.options}
        object.__setattr__(self, "options", tuple(sorted((k, v) for k, v in given.items()
                                                         if k not in defaults or v != defaults[k])))
        if self.dtype not in DTYPES:
            raise UsageError(f"unknown dtype {self.dtype!r}; allowed: {', '.join(DTYPES)}")
        if isinstance(self.batch_size, (int, np.integer)) and not isinstance(self.batch_size, bool) \
                and self.batch_size == 0:  # e.g. check --lengths "": say what is missing, not batch_size=0
            raise UsageError("no sequence lengths were given (batch_size=0); a case needs at least one sequence: "
                             "give one length per sequence, e.g. 7,4,1")
        for name in ("num_layers", "input_size", "hidden_size", "max_len", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise UsageError(f"{name}={value!r} is not allowed; it must be an integer >= 1")
        if not isinstance(self.bidirectional, (bool, np.bool_)):
            raise UsageError(f"bidirectional={self.bidirectional!r} is not allowed; it must be true or false")
        for name in ("bias", "long_memory"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise UsageError(f"{name}={getattr(self, name)!r} is not allowed; it must be true or false")
        proj = self.proj_size
        if isinstance(proj, bool) or not isinstance(proj, (int, np.integer)) or proj < 0:
            raise UsageError(f"proj_size={proj!r} is not allowed; it must be an integer >= 0 (0 = no projection)")
        self.family.validate(self)
        if proj and not proj < self.hidden_size:
            raise UsageError(f"proj_size={proj} is not allowed with hidden_size={self.hidden_size}; "
                             f"it must be in 1..H-1")

    @property
    def family(self) -> Family:
        return family(self.mode)

    def to_wire(self) -> dict[str, Any]:
        """The config for another process or interpreter, as plain JSON values: ``id``, its case-id
        part (:attr:`prefix` and the dtype), and ``attributes``, what a target reads of it for an
        interpreter that has no gradcheck_rnn (docs/contracts.md, "Targets"): every field, the
        family's ``options`` with their defaults, and every property (num_gates, h_size,
        has_cell_state...), all computed here, so a new family or property needs no other copy."""
        values: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update({name: getattr(self, name) for name in _WIRE_PROPERTIES})
        values["options"] = self.family.option_values(self)
        return {"id": f"{self.prefix}-{self.dtype}", "attributes": _plain(values)}

    @classmethod
    def from_wire(cls, wire: Mapping[str, Any]) -> "RNNConfig":
        """The config :meth:`to_wire` made; UsageError when its fields and its id disagree."""
        attributes = wire["attributes"]
        config = cls(**{f.name: attributes[f.name] for f in fields(cls)})
        if f"{config.prefix}-{config.dtype}" != wire["id"]:
            raise UsageError(f"a serialised config does not match its id {wire['id']!r} "
                             f"(its fields make {config.prefix}-{config.dtype})")
        return config

    def option(self, name: str) -> Any:
        """The value of one of the family's options (its default when the config leaves it out)."""
        return self._option_values[name]

    @cached_property
    def _option_values(self) -> dict[str, Any]:
        # Kept on the (frozen) config: a matrix family's shapes ask for options hundreds of
        # thousands of times in a sweep, and each call built the dict anew (a profile of 40
        # matrix cases: 1.9 s of 29).
        return self.family.option_values(self)

    @property
    def num_gates(self) -> int:
        return self.family.num_gates

    @property
    def num_directions(self) -> int:
        return 2 if self.bidirectional else 1

    @property
    def has_cell_state(self) -> bool:
        """Whether the case has c0 / cy / dcy (the family's second state tensor)."""
        return self.c_size > 0

    @property
    def state_size(self) -> int:
        """S, the width of each direction's part of y: P with projections, else H (the family's output width)."""
        return self.family.output_size(self)

    @property
    def h_size(self) -> int:
        """The width of h0 / hy / dhy (S for the cuDNN cells; s6's is H·N)."""
        return self.family.h_size(self)

    @property
    def c_size(self) -> int:
        """The width of c0 / cy / dcy; 0 when the family has none."""
        return self.family.c_size(self)

    @property
    def prefix(self) -> str:
        """The config part of a case id: ``lstm-L2-bi-I3-H5-T7-B3`` (``-P3``, the family's options,
        ``-nobias``, ``-longmem`` after H)."""
        values = self.family.option_values(self)
        surface = (f"-P{self.proj_size}" if self.proj_size else "") \
            + "".join(o.render(values[o.name]) for o in self.family.options) + ("" if self.bias else "-nobias") \
            + ("-longmem" if self.long_memory else "")
        return (f"{self.mode}-L{self.num_layers}-{'bi' if self.bidirectional else 'uni'}"
                f"-I{self.input_size}-H{self.hidden_size}{surface}-T{self.max_len}-B{self.batch_size}")


# The derived attributes a serialised config carries: every property but the family object itself.
_WIRE_PROPERTIES = tuple(name for name, value in vars(RNNConfig).items() if isinstance(value, property) and name != "family")


def _plain(value: Any) -> Any:
    """``value`` with numpy scalars as Python ones and tuples as lists: what JSON writes as it is."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value.item() if isinstance(value, np.generic) else value
