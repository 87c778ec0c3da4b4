"""Tensor comparison: violation ratio, worst element in logical coordinates, NaN/Inf never pass.

For a target tensor a and a float64 reference b, an element passes when
|a − b| <= atol + rtol·|b|. The reported ratio is max |a − b| / (atol + rtol·|b|) (pass ⇔ <= 1),
in the spirit of MXNet's assert_almost_equal: "Error 3.2 exceeds tolerance rtol=1e-2,
atol=1e-6. Location of maximum error: (26, 4), a=…, b=…".

The reference-free checks compare runs of the target with each other (a run on a changed case
with the base run, one gradient with the sum of two): each run may be off by its own tolerance,
so there the bound is the sum of the runs' bounds, Σ (atol + rtol·|term|) (:func:`term_bound`),
and a precision the reference check accepts fails none of them.

Besides the worst element, each comparison keeps two things the reports need:

* a small *ratio map* (:class:`RatioMap`): the ratio's maxima per (time step, sequence) for y
  and x, per (layer·direction, sequence) for hy, cy, h0, c0, and per (gate block, unit) for
  parameter gradients, max-pooled to at most ``MAP_MAX`` × ``MAP_MAX`` (typical cases stay far
  below: a few dozen numbers a tensor, kept in float32) and stored in results.json for the rows
  that did not pass; the HTML report draws its heatmaps from these maps alone;
* the *mistrusted* flag, after oneDNN benchdnn's guard of the same name: a comparison is
  mistrusted when a target returning all zeros would pass it on at least ``MISTRUST_SHARE`` of
  the elements (the reference is almost all zeros, or the tolerance dwarfs it), so a run whose
  comparisons are mostly trivial is visible instead of looking green.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, fields
from typing import Any, Sequence

import numpy as np

from .numbers import from_json_number, location_text  # re-exported: rows and reports read both

from .case import RNNConfig
from .layout import directions
from .names import TAIL
from .tolerances import Tolerance

# Largest side of a stored ratio map: beyond it, neighbouring steps, sequences or units are
# max-pooled (a 64 × 64 map is 4096 numbers; typical case sizes stay far below and unpooled).
MAP_MAX = 64
# A comparison is mistrusted when zeros would pass it on at least this share of the elements.
MISTRUST_SHARE = 0.99


@dataclass
class RatioMap:
    """Maxima of the tolerance ratio |a − b| / (atol + rtol·|b|) over blocks of one tensor.

    ``ratio[i][j]`` is the maximum over every element whose row index (time step ``t``, state
    ``layer·dir`` index, or gate block) lies in ``i·pool[0] … (i+1)·pool[0] − 1`` and whose
    column index (sequence ``b`` or hidden ``unit``) lies in ``j·pool[1] … (j+1)·pool[1] − 1``;
    the remaining axes (units, weight columns) are reduced by their maximum. Values > 1 fail;
    ``inf`` marks a non-finite target value, ``nan`` a non-finite expected value.
    """

    rows: str  # "t" | "state" | "gate"
    cols: str  # "b" | "unit"
    ratio: np.ndarray  # 2-D float32
    pool: tuple[int, int] = (1, 1)

    def to_json(self) -> dict[str, Any]:
        """Strict-JSON form; values are rounded to 3 significant digits (they only colour pixels)."""
        values = [[_round3(float(v)) for v in row] for row in self.ratio]
        return json_safe({"rows": self.rows, "cols": self.cols, "pool": list(self.pool), "ratio": values})

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "RatioMap":
        """Inverse of :meth:`to_json` (null → nan, "inf" → inf)."""
        ratio = np.array([[from_json_number(v) for v in row] for row in data["ratio"]], dtype=np.float32)
        return cls(data["rows"], data["cols"], ratio.reshape(len(data["ratio"]), -1), tuple(data["pool"]))


def _round3(value: float) -> float:
    return float(f"{value:.3g}") if math.isfinite(value) else value




@dataclass
class TensorError:
    """How one tensor of a target compares with a reference."""

    name: str
    status: str  # pass | fail | missing
    max_abs: float = math.nan
    max_rel: float = math.nan
    ratio: float = math.nan
    location: dict[str, Any] = field(default_factory=dict)
    a: float = math.nan
    b: float = math.nan
    rtol: float = math.nan
    atol: float = math.nan
    message: str = ""
    reference: str = ""
    per_step: list[float] | None = None  # max |a − b| per time step, for tensors with a time axis
    mistrusted: bool = False  # zeros would pass this comparison (see the module docstring)
    ratio_map: RatioMap | None = None
    # The largest elementwise drift allowance added to atol + rtol·|b| (gradcheck_rnn.references.drift);
    # None when the fixed tolerance judged alone (then absent from results.json).
    drift: float | None = None

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    def location_text(self) -> str:
        return location_text(self.location)

    def to_json(self) -> dict[str, Any]:
        """Strict-JSON form, whole (results.json, "tensors" of a row that did not pass)."""
        data = {name: getattr(self, name) for name in _STORED_FIELDS}
        data["ratio_map"] = None if self.ratio_map is None else self.ratio_map.to_json()
        if self.drift is not None:
            data["drift"] = self.drift
        return json_safe(data)

    def compact_json(self) -> str | list[Any]:
        """The short form a row that passed stores (docs/contracts.md, "Row size"):
        ``[name, ratio, max_abs, max_rel, where]``, the ratio to :data:`COMPACT_DIGITS` and the
        errors to :data:`ERROR_DIGITS` significant digits, ``where`` the worst element's
        coordinates without their names (:func:`expand_tensor` puts them back), then ``true`` when
        the comparison is mistrusted; the bare name for a tensor equal to its reference everywhere. a, b, the tolerances, the
        per-step errors, the drift allowance and the ratio map are for reading a failure."""
        if self.status == "pass" and not self.mistrusted and self.ratio == self.max_abs == self.max_rel == 0:
            return self.name
        data = [self.name, _significant(self.ratio), _significant(self.max_abs, ERROR_DIGITS),
                _significant(self.max_rel, ERROR_DIGITS), _location_values(self.name, self.location)]
        return json_safe(data + [True] if self.mistrusted else data)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "TensorError":
        """Rebuild a tensor comparison from results.json, so reports re-render without re-running."""
        data = expand_tensor(data)
        numbers = {k: from_json_number(data.get(k)) for k in ("max_abs", "max_rel", "ratio", "a", "b", "rtol", "atol")}
        per_step = data.get("per_step")
        ratio_map = data.get("ratio_map")
        drift = data.get("drift")
        return cls(data["name"], data["status"], location=dict(data.get("location") or {}),
                   message=data.get("message", ""), reference=data.get("reference", ""),
                   per_step=None if per_step is None else [from_json_number(v) for v in per_step],
                   mistrusted=bool(data.get("mistrusted", False)),
                   ratio_map=None if ratio_map is None else RatioMap.from_json(ratio_map),
                   drift=None if drift is None else from_json_number(drift), **numbers)


# Significant digits of a passing row's stored ratios: enough to see a ratio grow by the drift
# factor (gradcheck_rnn.workflows.baseline); its max abs and rel errors, which nothing compares, keep their
# magnitude (one digit: the ratio already says, to three, where the tensor stands against its
# tolerance). Few digits keep a large green run's results.json small (docs/contracts.md, "Row size").
COMPACT_DIGITS, ERROR_DIGITS = 3, 1
_PARAMETER = re.compile(r"l(\d+)\.([a-z]+)\.[A-Za-z0-9_]+")


def _significant(value: float, digits: int = COMPACT_DIGITS) -> float | int:
    """``value`` to ``digits`` significant digits; 0 as the integer 0; NaN and ±Inf unchanged."""
    if not math.isfinite(value):
        return value
    rounded = float(f"{value:.{digits}g}")
    return 0 if rounded == 0 else rounded


def _location_keys(name: str, values: list[Any]) -> tuple[str, ...] | None:
    """The coordinate names of a stored location of tensor ``name`` (see :func:`logical_location`);
    a parameter's layer and direction are in its name and not stored again. None: not known."""
    if name in ("y", "x"):
        return ("t", "b", "unit")
    if name in ("hy", "cy", "h0", "c0"):
        return ("layer", "dir", "b", "unit")
    if _PARAMETER.fullmatch(name):
        return ("gate", "row", "col") if values and isinstance(values[0], str) else ("row", "col")
    return None


def _location_values(name: str, location: dict[str, Any]) -> list[Any] | dict[str, Any]:
    """A location as the list of its coordinates when :func:`expand_tensor` names them back
    exactly, else as it is (a tensor of a shape this module does not name)."""
    parameter = _PARAMETER.fullmatch(name)
    values = [v for k, v in location.items() if not (parameter and k in ("layer", "dir"))]
    keys = _location_keys(name, values)
    named = dict(zip(keys, values)) if keys is not None and len(values) <= len(keys) else None
    if named is not None and parameter:
        named = {"layer": int(parameter[1]), "dir": parameter[2], **named}
    return values if named == location else location


def expand_tensor(data: str | list[Any] | dict[str, Any]) -> dict[str, Any]:
    """A stored tensor of either form (:meth:`TensorError.to_json`'s dict or
    :meth:`TensorError.compact_json`'s list or bare name) as the dict form, for every reader."""
    if isinstance(data, dict):
        return data
    if isinstance(data, str):
        return {"name": data, "status": "pass", "ratio": 0, "max_abs": 0, "max_rel": 0, "location": {},
                "mistrusted": False}
    name, ratio, max_abs, max_rel, where, *mistrusted = data
    if isinstance(where, list):
        parameter = _PARAMETER.fullmatch(name)
        where = dict(zip(_location_keys(name, where) or (), where))
        if parameter:
            where = {"layer": int(parameter[1]), "dir": parameter[2], **where}
    return {"name": name, "status": "pass", "ratio": ratio, "max_abs": max_abs, "max_rel": max_rel,
            "location": where, "mistrusted": bool(mistrusted and mistrusted[0])}


def tensor_summary(data: str | list[Any] | dict[str, Any]) -> tuple[str, str, Any, bool]:
    """``(name, status, ratio as stored, mistrusted)`` of a stored tensor of either form, read
    without :func:`expand_tensor`'s dict: the tally and the baseline read these of every row."""
    if isinstance(data, str):
        return data, "pass", 0, False
    if isinstance(data, list):
        return data[0], "pass", data[1], len(data) > 5 and bool(data[5])
    return data["name"], data["status"], data.get("ratio"), bool(data.get("mistrusted"))


_STORED_FIELDS = tuple(f.name for f in fields(TensorError) if f.name not in ("ratio_map", "drift"))
_PLAIN = (str, int, bool, type(None))


def json_safe(value: Any) -> Any:
    """Strict-JSON copy: NaN becomes null and ±Inf the strings "inf"/"-inf" (never a silent pass)."""
    kind = type(value)  # exact types first: every row of a run goes through here
    if kind is float:
        return value if math.isfinite(value) else (None if math.isnan(value) else str(value))
    if kind in _PLAIN:
        return value
    if kind is dict:
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (np.generic, np.ndarray)):
        value = value.tolist()
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else str(value)
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


EXACT = Tolerance(0.0, 0.0)


def tail_name(name: str) -> str:
    """The row name of a gradient's packed tail: ``x[tail]`` (:mod:`gradcheck_rnn.model.packed`)."""
    return name + TAIL


def compare_tails(actual: dict[str, np.ndarray], config: RNNConfig) -> list["TensorError"]:
    """One row per packed tail a target returned: every value there must be exactly 0, whatever
    the dtype (a kernel writes a zero there, or leaves memory unwritten: QwenLM/FlashQLA PR #28)."""
    return [compare_tensor(name, value, np.zeros_like(value), EXACT, config)
            for name, value in actual.items() if name.endswith(TAIL)]


def to_float64(array: Any) -> np.ndarray:
    """numpy or torch (any float dtype, any device) -> float64 numpy."""
    if hasattr(array, "detach"):
        array = array.detach().to("cpu")
        import torch

        array = array.to(torch.float64).numpy()
    return np.asarray(array, dtype=np.float64)


def logical_location(name: str, index: tuple[int, ...], config: RNNConfig) -> dict[str, Any]:
    """Name a flat-array index in the tensor's own terms: (t, b, unit), (layer, dir, b, unit) or
    (layer, dir, gate, row[, col])."""
    if name in ("y", "x"):
        return dict(zip(("t", "b", "unit"), index))
    if name.endswith(TAIL):  # a packed tail: its row past cu_seqlens[-1], and the unit
        return dict(zip(("row", "unit"), index))
    if name in ("hy", "cy", "h0", "c0"):
        layer, d = divmod(index[0], config.num_directions)
        return {"layer": layer, "dir": directions(config)[d], "b": index[1], "unit": index[2]}
    layer_text, direction, kind = name.split(".")
    family = config.family
    if kind not in family.gated_kinds():  # e.g. w_hr (P, H), the LSTM projection, has no gate blocks
        return {"layer": int(layer_text[1:]), "dir": direction, **dict(zip(("row", "col"), index))}
    gate, row = divmod(index[0], config.hidden_size)
    location = {"layer": int(layer_text[1:]), "dir": direction, "gate": family.gates[gate], "row": row}
    if kind.startswith("w_"):
        location["col"] = index[1]
    return location


def term_bound(tol: Tolerance, terms: Sequence[np.ndarray]) -> np.ndarray:
    """Σ (atol + rtol·|term|) over ``terms``, element by element: how far a sum or difference of
    values, each within ``tol`` of its own truth, may lie from the same sum of the truths. It
    follows the size of the terms, never of their sum: 0.2357 − 0.2354 = 3.8e-4 carries the
    rounding of 0.2357. A non-finite term adds nothing (the comparison fails it on its own)."""
    magnitudes = sum(np.nan_to_num(np.abs(np.asarray(t, dtype=np.float64)), nan=0.0, posinf=0.0) for t in terms)
    return len(terms) * tol.atol + tol.rtol * magnitudes


def compare_tensor(name: str, actual: Any, expected: np.ndarray, tol: Tolerance,
                   config: RNNConfig, allowance: np.ndarray | None = None,
                   terms: Sequence[np.ndarray] | None = None) -> TensorError:
    """Compare one target tensor with its reference; NaN or Inf in the target always fails, and
    so does a finite value where the reference is not (no bound can hold there: atol + rtol·|NaN|
    is no number, and a finite value never equals an infinite one).

    ``allowance`` (optional, shaped like the tensor, finite and >= 0) widens each element's bound
    to atol + rtol·|b| + allowance: the drift a correct kernel of the dtype can have there
    (:mod:`gradcheck_rnn.references.drift`). Without it the comparison is the fixed one.
    ``terms`` (optional: the values ``actual`` and ``expected`` are sums or differences of, each
    judged by ``tol`` on its own) makes the bound :func:`term_bound` of them instead of
    atol + rtol·|b|: the reference-free checks compare runs of the target with each other."""
    if actual is None:
        return TensorError(name, "missing", rtol=tol.rtol, atol=tol.atol,
                           message=f"{name}: the target returned no value")
    a = to_float64(actual)
    b = np.asarray(expected, dtype=np.float64)
    if a.shape != b.shape:
        return TensorError(name, "fail", rtol=tol.rtol, atol=tol.atol,
                           message=f"{name}: shape {a.shape}, expected {b.shape}")
    if a.size == 0:
        return TensorError(name, "pass", 0.0, 0.0, 0.0, rtol=tol.rtol, atol=tol.atol)
    # One errstate for all of it: inf − inf, NaN, huge − (−huge) and a huge error over a tiny bound
    # (which overflows to inf, the right ratio) say what they are in the ratio, no warning leaks.
    # Short arrays dominate a sweep, so each step takes the cheap path when every element allows it.
    with np.errstate(all="ignore"):
        diff = np.abs(a - b)
        finite = np.isfinite(a)
        all_finite = bool(finite.all())
        if not all_finite:
            diff[~finite] = np.inf
        abs_b = np.abs(b)
        bound = tol.atol + tol.rtol * abs_b if terms is None else term_bound(tol, terms)
        if allowance is not None:
            extra = np.nan_to_num(np.asarray(allowance, dtype=np.float64), nan=0.0, posinf=0.0, neginf=0.0)
            bound = bound + np.broadcast_to(np.maximum(extra, 0.0), bound.shape)
        ratios = _ratio(diff, bound)
        # a finite value where the expected one is not: no bound holds (atol + rtol·|NaN| is no number)
        expected_finite = np.isfinite(b)
        unbounded = finite & ~expected_finite if not expected_finite.all() else None
        unbound = 0 if unbounded is None else int(np.count_nonzero(unbounded))
        if unbound:
            diff[unbounded] = ratios[unbounded] = np.inf
        rel_max = float(_ratio(diff, abs_b).max())
    worst = np.unravel_index(int(np.argmax(ratios)), ratios.shape)
    ratio = float(ratios[worst])
    passed = all_finite and ratio <= 1.0
    error = TensorError(
        name, "pass" if passed else "fail", float(diff.max()), rel_max, ratio,
        logical_location(name, tuple(int(i) for i in worst), config), float(a[worst]), float(b[worst]),
        tol.rtol, tol.atol)
    if allowance is not None:
        error.drift = float(np.max(extra))
    if not all_finite:
        error.message = f"{name}: {int((~finite).sum())} non-finite value(s) in the target"
    elif unbound:
        error.message = (f"{name}: {unbound} finite value(s) where the values compared against are not. "
                         f"Location of maximum error: {error.location_text()}, a={error.a:.9g}, b={error.b:.9g}")
    elif not passed:
        widened = "" if allowance is None else f" + drift allowance (max {error.drift:.3g})"
        widened += "" if terms is None else f" summed over its {len(terms)} terms"
        error.message = (f"{name}: error {ratio:.3g} exceeds tolerance {tol}{widened}. Location of maximum error: "
                         f"{error.location_text()}, a={error.a:.9g}, b={error.b:.9g}")
    if name in ("y", "x"):
        error.per_step = [float(v) for v in diff.reshape(diff.shape[0], -1).max(axis=1)]
    # Zeros pass an element when |b| <= atol + rtol·|b|: such a comparison proves nothing.
    error.mistrusted = bool(np.count_nonzero(abs_b <= bound) / b.size >= MISTRUST_SHARE)
    error.ratio_map = ratio_map(name, ratios, config)
    return error


def _ratio(diff: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """diff / bound per element, where a bound that is not > 0 (zero, or NaN) gives inf for a
    non-zero difference and 0 for none. Call under ``np.errstate(all="ignore")``."""
    positive = bound > 0
    if positive.all():
        return diff / bound
    return np.where(positive, diff / bound, np.where(diff > 0, np.inf, 0.0))


def ratio_map(name: str, ratios: np.ndarray, config: RNNConfig) -> RatioMap | None:
    """The small map of ``ratios`` (same shape as the tensor) that the reports draw, or None for a
    tensor of a shape the map does not know."""
    if name in ("y", "x", "hy", "cy", "h0", "c0"):
        if ratios.ndim != 3:
            return None
        grid, rows = ratios.max(axis=2), ("t" if name in ("y", "x") else "state")
        cols = "b"
    else:
        gates, hidden = config.num_gates, config.hidden_size
        if name.rsplit(".", 1)[-1] not in config.family.gated_kinds() or ratios.ndim not in (1, 2) \
                or ratios.shape[0] != gates * hidden:
            return None
        grid, rows, cols = ratios.reshape(gates, hidden, -1).max(axis=2), "gate", "unit"
    pooled, pool = _pool_max(grid, MAP_MAX)
    with np.errstate(over="ignore"):  # ratios beyond float32 become inf: still "fails by far"
        return RatioMap(rows, cols, pooled.astype(np.float32), pool)


def _pool_max(grid: np.ndarray, limit: int) -> tuple[np.ndarray, tuple[int, int]]:
    """Max-pool a 2-D array so that no side exceeds ``limit``; NaN wins over numbers (it is bad)."""
    steps = tuple(max(1, math.ceil(n / limit)) for n in grid.shape)
    if steps == (1, 1):
        return grid, (1, 1)
    rows, cols = (math.ceil(n / s) for n, s in zip(grid.shape, steps))
    padded = np.full((rows * steps[0], cols * steps[1]), -np.inf)
    padded[:grid.shape[0], :grid.shape[1]] = grid
    blocks = padded.reshape(rows, steps[0], cols, steps[1])
    return blocks.max(axis=(1, 3)), (steps[0], steps[1])
