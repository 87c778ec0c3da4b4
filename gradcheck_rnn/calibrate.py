"""Tolerance calibration: how close a correct target comes to the references, per dtype and
tensor kind, and what tolerances that supports.

For every compared tensor of a correct target the error ratio under the current tolerances is
collected; the proposal scales the current (rtol, atol) by the worst ratio seen times a safety
margin, rounded up to 1, 2 or 5 times a power of ten. A proposal is only as good as the cases
behind it: calibrate on the nightly profile before changing the defaults.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .runner import CaseResult
from .tolerances import Tolerance, Tolerances, tensor_kind


def round_up_125(value: float) -> float:
    """The smallest 1·10ᵏ, 2·10ᵏ or 5·10ᵏ that is ≥ value."""
    if value <= 0:
        return 0.0
    power = 10.0 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if step * power >= value * (1 - 1e-12):
            return step * power
    return 10 * power


@dataclass
class Calibration:
    """The ratio distribution of one dtype × tensor kind and the tolerance it supports."""

    dtype: str
    kind: str
    count: int
    median: float
    p99: float
    max: float
    current: Tolerance
    proposed: Tolerance


def calibrate(results: list[CaseResult], tolerances: Tolerances, margin: float = 10.0) -> list[Calibration]:
    """Summarise the reference-comparison ratios of passing and failing results alike."""
    ratios: dict[tuple[str, str], list[float]] = {}
    for result in results:
        if result.check != "reference" or result.status not in ("pass", "fail"):
            continue
        for tensor in result.tensors:
            if tensor.ratio == tensor.ratio:
                ratios.setdefault((result.dtype, tensor_kind(tensor.name)), []).append(tensor.ratio)
    rows = []
    for (dtype, kind), values in sorted(ratios.items()):
        current = tolerances.table[dtype][kind]
        worst = max(values)
        scale = worst * margin
        proposed = Tolerance(round_up_125(current.rtol * scale), round_up_125(current.atol * scale))
        rows.append(Calibration(dtype, kind, len(values), float(np.median(values)),
                                float(np.percentile(values, 99)), worst, current, proposed))
    return rows
