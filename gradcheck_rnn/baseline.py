"""Precision drift against a stored run: ``sweep --baseline RUN_DIR`` and ``gradcheck-rnn diff``.

A kernel change can make every gradient error 50× larger and still pass every tolerance; only a
comparison with an earlier run shows it. A row that passes is compared, tensor by tensor, with the
baseline's row of the same case id × target × check: a tensor whose ratio grew by more than the
drift factor (``--drift-factor``, default :data:`DRIFT_FACTOR`) *and* ends above :data:`DRIFT_FLOOR`
makes the row ``drifted``. The floor is in ratio units (a fraction of the tolerance), so growth
among errors far below the tolerance (1e-9 → 1e-8 of it) is noise, not news.

The baseline's rows are read once into a compact dict, (case id, target, check) → (status,
{tensor: ratio}), and each row is compared as it arrives (:meth:`Baseline.mark`).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .compare import tensor_summary
from .numbers import from_json_number
from .result import CaseResult
from .statuses import PASSED

DRIFT_FACTOR = 4.0
# A ratio at or below 1% of the tolerance never drifts, however much it grew.
DRIFT_FLOOR = 0.01

Key = tuple[str, str, str]  # (case id, target, check)
Stored = tuple[str, dict[str, float]]  # (status, {tensor: ratio})


def load_rows(run_dir: str | Path) -> tuple[Path, dict[Key, Stored]]:
    """A stored run's rows as (case id, target, check) → (status, {tensor: ratio}); the run folder
    (``RUN_DIR``, ``<report dir>/latest`` or a report dir) it was read from."""
    from .reports import load_document, resolve_run_dir

    folder = resolve_run_dir(run_dir)
    rows: dict[Key, Stored] = {}
    for row in load_document(folder)["results"]:
        key = (row["case_id"], sys.intern(row["target"]), sys.intern(row.get("check", "reference")))
        rows[key] = (sys.intern(row["status"]),
                     {sys.intern(name): from_json_number(ratio)
                      for name, _, ratio, _ in map(tensor_summary, row.get("tensors", ()))})
    return folder, rows


def grown(then: dict[str, float], now: dict[str, float], factor: float,
          floor: float = DRIFT_FLOOR) -> list[tuple[str, float, float]]:
    """(tensor, ratio then, ratio now) for every tensor of both rows whose finite ratio grew by
    more than ``factor`` and ends above ``floor``."""
    return [(name, then[name], ratio) for name, ratio in now.items()
            if name in then and math.isfinite(ratio) and math.isfinite(then[name])
            and ratio > floor and ratio > factor * then[name]]


def drift_entry(key: Key, changes: list[tuple[str, float, float]]) -> dict[str, Any]:
    """One drifted row in results.json's ``"drift"``: its key and, per tensor, ratio then and now."""
    case_id, target, check = key
    return {"case_id": case_id, "target": target, "check": check,
            "tensors": [{"name": name, "then": then, "now": now} for name, then, now in changes]}


def drift_message(changes: list[tuple[str, float, float]], factor: float) -> str:
    """The message of a drifted row: which tensors grew, from what to what."""
    return "ratio grew past ×{:g} the baseline: {}".format(
        factor, ", ".join(f"{name} {then:.3g} → {now:.3g}" for name, then, now in changes))


@dataclass
class Baseline:
    """The baseline of a sweep: its rows, the drift factor, and the rows found drifted so far."""

    run_dir: Path
    rows: dict[Key, Stored]
    factor: float = DRIFT_FACTOR
    fail_on_drift: bool = False
    drifted: list[dict[str, Any]] = field(default_factory=list)
    compared: int = 0  # passing rows that had a row in the baseline

    @classmethod
    def load(cls, run_dir: str, factor: float = DRIFT_FACTOR, fail_on_drift: bool = False) -> "Baseline":
        folder, rows = load_rows(run_dir)
        return cls(folder, rows, factor, fail_on_drift)

    def mark(self, row: CaseResult) -> None:
        """Make a passing row ``drifted`` when a tensor's ratio grew past the factor since the baseline."""
        then = self.rows.get((row.case_id, row.target, row.check))
        if row.status != "pass" or then is None:
            return
        self.compared += 1
        changes = grown(then[1], {t.name: t.ratio for t in row.tensors}, self.factor)
        if changes:
            row.status, row.message = "drifted", drift_message(changes, self.factor)
            self.drifted.append(drift_entry((row.case_id, row.target, row.check), changes))

    def to_json(self) -> dict[str, Any]:
        """results.json's ``"drift"``: what was compared with which run, and the drifted rows."""
        return {"baseline": str(self.run_dir), "factor": self.factor, "floor": DRIFT_FLOOR,
                "fail_on_drift": self.fail_on_drift, "compared": self.compared, "rows": self.drifted}


@dataclass
class Diff:
    """Two stored runs compared (``gradcheck-rnn diff``): drifted rows and rows present in one run only."""

    drift: dict[str, Any]
    only_a: list[Key]
    only_b: list[Key]


def diff_runs(run_a: str, run_b: str, factor: float = DRIFT_FACTOR) -> Diff:
    """Compare run B with run A as ``sweep --baseline A`` compared B's rows as they arrived."""
    folder_a, rows_a = load_rows(run_a)
    folder_b, rows_b = load_rows(run_b)
    baseline = Baseline(folder_a, rows_a, factor)
    for key, (status, ratios) in rows_b.items():
        if key in rows_a and status in PASSED and rows_a[key][0] in PASSED:
            baseline.compared += 1
            if changes := grown(rows_a[key][1], ratios, factor):
                baseline.drifted.append(drift_entry(key, changes))
    return Diff(baseline.to_json(), sorted(rows_a.keys() - rows_b.keys()), sorted(rows_b.keys() - rows_a.keys()))
