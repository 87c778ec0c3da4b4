"""Tensor comparison: violation ratio, worst element in logical coordinates, NaN/Inf never pass.

For a target tensor a and a float64 reference b, an element passes when
|a − b| <= atol + rtol·|b|. The reported ratio is max |a − b| / (atol + rtol·|b|) (pass ⇔ <= 1),
in the spirit of MXNet's assert_almost_equal: "Error 3.2 exceeds tolerance rtol=1e-2,
atol=1e-6. Location of maximum error: (26, 4), a=…, b=…".
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .case import RNNConfig
from .layout import GATE_NAMES, directions
from .tolerances import Tolerance


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

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    def location_text(self) -> str:
        return "(" + ",".join(f"{k}={v}" for k, v in self.location.items()) + ")" if self.location else ""

    def to_json(self) -> dict[str, Any]:
        return json_safe(asdict(self))


def json_safe(value: Any) -> Any:
    """Strict-JSON copy: NaN becomes null and ±Inf the strings "inf"/"-inf" (never a silent pass)."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else str(value)
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


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
    if name in ("hy", "cy", "h0", "c0"):
        layer, d = divmod(index[0], config.num_directions)
        return {"layer": layer, "dir": directions(config)[d], "b": index[1], "unit": index[2]}
    layer_text, direction, kind = name.split(".")
    gate, row = divmod(index[0], config.hidden_size)
    location = {"layer": int(layer_text[1:]), "dir": direction, "gate": GATE_NAMES[config.mode][gate], "row": row}
    if kind.startswith("w_"):
        location["col"] = index[1]
    return location


def compare_tensor(name: str, actual: Any, expected: np.ndarray, tol: Tolerance,
                   config: RNNConfig) -> TensorError:
    """Compare one target tensor with its reference; NaN or Inf in the target always fails."""
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
    diff = np.abs(a - b)
    finite = np.isfinite(a)
    diff = np.where(finite, diff, np.inf)
    with np.errstate(divide="ignore", invalid="ignore"):
        bound = tol.atol + tol.rtol * np.abs(b)
        ratios = np.where(bound > 0, diff / bound, np.where(diff > 0, np.inf, 0.0))
        rel = np.where(np.abs(b) > 0, diff / np.abs(b), np.where(diff > 0, np.inf, 0.0))
    worst = np.unravel_index(int(np.argmax(ratios)), ratios.shape)
    ratio = float(ratios[worst])
    passed = bool(finite.all()) and ratio <= 1.0
    error = TensorError(
        name, "pass" if passed else "fail", float(diff.max()), float(rel.max()), ratio,
        logical_location(name, tuple(int(i) for i in worst), config), float(a[worst]), float(b[worst]),
        tol.rtol, tol.atol)
    if not finite.all():
        error.message = f"{name}: {int((~finite).sum())} non-finite value(s) in the target"
    elif not passed:
        error.message = (f"{name}: error {ratio:.3g} exceeds tolerance {tol}. Location of maximum error: "
                         f"{error.location_text()}, a={error.a:.9g}, b={error.b:.9g}")
    if name in ("y", "x"):
        error.per_step = [float(v) for v in diff.reshape(diff.shape[0], -1).max(axis=1)]
    return error
