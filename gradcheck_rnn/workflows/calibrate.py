"""Tolerance calibration: how close a correct target comes to the references, per dtype and
tensor kind, and what tolerances that supports.

For every compared tensor of a correct target the error ratio under the current tolerances is
collected; the proposal scales the current (rtol, atol) by the worst ratio seen times a safety
margin, rounded up to 1, 2 or 5 times a power of ten. A proposal is only as good as the cases
behind it: calibrate on the nightly profile before changing the defaults.

A proposal never goes below a floor a correct kernel of the dtype keeps: ``FLOOR_ROUNDOFFS``
times the dtype's unit roundoff (rounded up to 1, 2 or 5 times a power of ten). Observed
errors of exactly 0 (a float64 target that computes as the reference does) would otherwise
propose rtol 0 / atol 0, which fails every later run on the first rounding difference; the
table marks a floored value with ``*`` and a note says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..rows.result import CaseResult
from ..model.numbers import compact, short_number
from ..model.tolerances import Tolerance, Tolerances, tensor_kind


# Unit roundoff u = 2^-p of each dtype (p = significand bits, the implicit one included).
UNIT_ROUNDOFF = {"f64": 2.0 ** -53, "f32": 2.0 ** -24, "f16": 2.0 ** -11, "bf16": 2.0 ** -8}
# The floor is this many unit roundoffs: f64 1e-15, f32 5e-7, f16 5e-3, bf16 5e-2 — each at or
# below the shipped defaults, so a floor never loosens a dtype past what was measured.
FLOOR_ROUNDOFFS = 8


def tolerance_floor(dtype: str) -> float:
    """The smallest rtol or atol calibrate proposes for ``dtype``: never 0."""
    return round_up_125(FLOOR_ROUNDOFFS * UNIT_ROUNDOFF.get(dtype, UNIT_ROUNDOFF["f32"]))


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
    floored: bool = False  # the proposal was raised to tolerance_floor(dtype)


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
        floor = tolerance_floor(dtype)
        rtol, atol = round_up_125(current.rtol * scale), round_up_125(current.atol * scale)
        proposed = Tolerance(max(rtol, floor), max(atol, floor))
        rows.append(Calibration(dtype, kind, len(values), float(np.median(values)),
                                float(np.percentile(values, 99)), worst, current, proposed,
                                floored=rtol < floor or atol < floor))
    return rows


def calibration_table(rows: list[Calibration], run: Any = None, margin: float = 10.0) -> Any:
    """The calibrate command's table, fitting 80 columns (no number is cut): dtype, tensor kind,
    tensors seen (n), median / p99 / max error ratio, current and proposed rtol/atol; ``*``
    marks a proposal raised to the dtype's floor. The title names the run (``run.spec``) and the
    caption holds :func:`notes`: what the columns mean and whether a floor was applied."""
    from rich import box
    from rich.table import Table

    title = None
    if run is not None and getattr(run, "spec", None) is not None:
        spec = run.spec
        title = (f"Calibration of {spec.targets[0]} on {spec.cases} cases (profile {spec.profile}, "
                 f"seed {spec.seed})")
    # Two spaces between columns (padding on the right only): the eight columns fit 80 uncut.
    from rich.text import Text

    # Text, not markup: a target named "pkg:make[/b]" is printed as it is.
    table = Table(title=None if title is None else Text(title), title_justify="left",
                  caption=Text("\n".join(notes(rows, margin))), caption_justify="left",
                  box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    for column in ("dtype", "kind", "n", "median", "p99", "max", "current", "proposed"):
        table.add_column(column, no_wrap=True, justify="left" if column in ("dtype", "kind") else "right")
    for row in rows:
        mark = "*" if row.floored else ""
        table.add_row(row.dtype, row.kind, str(row.count), compact(row.median), compact(row.p99), compact(row.max),
                      f"{short_number(row.current.rtol)}/{short_number(row.current.atol)}",
                      f"{short_number(row.proposed.rtol)}/{short_number(row.proposed.atol)}{mark}")
    return table


def notes(rows: list[Calibration], margin: float) -> list[str]:
    """What the table's columns mean and, when a floor was applied, which and why."""
    lines = [f"ratio = error / (atol + rtol·|b|) under the current tolerances (rtol/atol); "
             f"proposed = current × max × {margin:g}, rounded up to 1, 2 or 5 × 10^k"]
    floored = sorted({row.dtype for row in rows if row.floored})
    if floored:
        floors = ", ".join(f"{dtype} {short_number(tolerance_floor(dtype))}" for dtype in floored)
        lines.append(f"* floor applied: the observed errors allow less than a correct kernel keeps, so the "
                     f"proposal is raised to {FLOOR_ROUNDOFFS} unit roundoffs ({floors}); never 0")
    return lines
