"""The vocabulary of a fused RNN call: modes, gates, dtypes, request groups, and RNNConfig.

A leaf module: it imports nothing of the package but errors, so every other module (layout,
case, kernels, references) can name a config without import cycles.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import UsageError

GATES = {"rnn_relu": 1, "rnn_tanh": 1, "lstm": 4, "gru": 3}
GATE_NAMES = {"rnn_relu": ("h",), "rnn_tanh": ("h",), "lstm": ("i", "f", "g", "o"), "gru": ("r", "z", "n")}
DIRECTIONS = ("fwd", "bwd")
MODES = tuple(GATES)
DTYPES = ("f64", "f32", "f16", "bf16")
TORCH_DTYPE_NAMES = {"f64": "float64", "f32": "float32", "f16": "float16", "bf16": "bfloat16"}
WANTS_GROUPS = ("all", "inputs", "x", "params")
HEADS = ("all", "y", "states", "last")
MAX_SEED = 2**63 - 1
CONFIG_DIR = Path(__file__).resolve().parent / "configs"  # the shipped sweep profiles


def profile_names() -> list[str]:
    """The names of the shipped profiles (``--config NAME``), the one list every message gives."""
    return [path.stem for path in sorted(CONFIG_DIR.glob("*.toml"))]

# Every check, in the order a case's rows are judged (each is a module of gradcheck_rnn.checks).
# Judging order. determinism comes right after reference, so that the base run is the first of its
# two back-to-back runs (one target run fewer per case; gradcheck_rnn/checks/determinism.py).
CHECK_NAMES = ("reference", "determinism", "padding", "permutation", "future", "linearity", "stateless", "fd")


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

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise UsageError(f"unknown mode {self.mode!r}; allowed: {', '.join(MODES)}")
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
        if not isinstance(self.bias, (bool, np.bool_)):
            raise UsageError(f"bias={self.bias!r} is not allowed; it must be true or false")
        proj = self.proj_size
        if isinstance(proj, bool) or not isinstance(proj, (int, np.integer)) or proj < 0:
            raise UsageError(f"proj_size={proj!r} is not allowed; it must be an integer >= 0 (0 = no projection)")
        if proj and self.mode != "lstm":
            raise UsageError(f"proj_size={proj} is not allowed for {self.mode}; projections are LSTM only")
        if proj and not proj < self.hidden_size:
            raise UsageError(f"proj_size={proj} is not allowed with hidden_size={self.hidden_size}; "
                             f"it must be in 1..H-1")

    @property
    def num_gates(self) -> int:
        return GATES[self.mode]

    @property
    def num_directions(self) -> int:
        return 2 if self.bidirectional else 1

    @property
    def has_cell_state(self) -> bool:
        return self.mode == "lstm"

    @property
    def state_size(self) -> int:
        """S, the width of h (h0, hy, each direction's part of y): P with projections, else H."""
        return self.proj_size or self.hidden_size

    @property
    def prefix(self) -> str:
        """The config part of a case id: ``lstm-L2-bi-I3-H5-T7-B3`` (``-P3``, ``-nobias`` after H)."""
        surface = (f"-P{self.proj_size}" if self.proj_size else "") + ("" if self.bias else "-nobias")
        return (f"{self.mode}-L{self.num_layers}-{'bi' if self.bidirectional else 'uni'}"
                f"-I{self.input_size}-H{self.hidden_size}{surface}-T{self.max_len}-B{self.batch_size}")
