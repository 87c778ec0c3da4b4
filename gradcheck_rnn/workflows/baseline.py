"""Precision drift against a stored run: ``sweep --baseline RUN_DIR`` and ``gradcheck-rnn diff``.

A kernel change can make every gradient error 50× larger and still pass every tolerance; only a
comparison with an earlier run shows it. A row that passes is compared, tensor by tensor, with the
baseline's row of the same case id × target × check: a tensor whose ratio grew by more than the
drift factor (``--drift-factor``, default :data:`DRIFT_FACTOR`) *and* ends above :data:`DRIFT_FLOOR`
makes the row ``drifted``. The floor is in ratio units (a fraction of the tolerance), so growth
among errors far below the tolerance (1e-9 → 1e-8 of it) is noise, not news.

The baseline's rows are read once into a compact dict, (case id, target, check) → (status,
{tensor: ratio}), and each row is compared as it arrives (:meth:`Baseline.mark`).

A ratio is an error divided by its tolerance, so ratios judged under two tolerance tables differ
by the tables' quotient, not by any change of the kernel: a baseline judged under another table
(another profile's ``[tolerances]``, other ``--rtol``/``--atol``) is refused before the sweep
starts, as is a baseline that shares no row with it (another profile's draw, seed or targets),
where every row would go uncompared (:meth:`Baseline.refuse_incomparable`). A baseline of another
profile with the same table is compared, with a note. A run that compared no row never passes
``--fail-on-drift``: it exits 5, as a run that checked nothing.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..model.compare import tensor_summary
from ..errors import UsageError
from ..model.numbers import from_json_number
from ..rows.result import CaseResult
from ..model.statuses import PASSED

if TYPE_CHECKING:
    from ..run.spec import RunSpec

DRIFT_FACTOR = 4.0
# A ratio at or below 1% of the tolerance never drifts, however much it grew.
DRIFT_FLOOR = 0.01

Key = tuple[str, str, str]  # (case id, target, check)
Stored = tuple[str, dict[str, float]]  # (status, {tensor: ratio})


def load_rows(run_dir: str | Path) -> tuple[Path, dict[Key, Stored], Any]:
    """A stored run's rows as (case id, target, check) → (status, {tensor: ratio}); the run folder
    (``RUN_DIR``, ``<report dir>/latest`` or a report dir) it was read from, and its stored run
    spec (results.json's ``"spec"``)."""
    from ..reports import load_document, resolve_run_dir

    folder = resolve_run_dir(run_dir)
    rows: dict[Key, Stored] = {}
    document = load_document(folder)
    for row in document["results"]:
        key = (row["case_id"], sys.intern(row["target"]), sys.intern(row.get("check", "reference")))
        rows[key] = (sys.intern(row["status"]),
                     {sys.intern(name): from_json_number(ratio)
                      for name, _, ratio, _ in map(tensor_summary, row.get("tensors", ()))})
    return folder, rows, document.get("spec")


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
    spec: Any = None  # the baseline's stored run spec (results.json's "spec")

    @classmethod
    def load(cls, run_dir: str, factor: float = DRIFT_FACTOR, fail_on_drift: bool = False) -> "Baseline":
        folder, rows, spec = load_rows(run_dir)
        return cls(folder, rows, factor, fail_on_drift, spec=spec)

    def refuse_incomparable(self, spec: RunSpec) -> str | None:
        """Refuse (UsageError, one sentence) a baseline whose ratios cannot be compared with the
        run of ``spec``: judged under another tolerance table, or sharing no row with it. Returns
        a note when the baseline was judged with another profile (its rows are still compared),
        else None."""
        from ..run.spec import RunSpec

        then = RunSpec.from_json(self.spec, where=str(self.run_dir / "results.json"))
        differing = _tolerance_differences(then, spec)
        if differing:
            raise UsageError(f"the baseline {self.run_dir} was judged under other tolerances ({differing}), so every "
                             f"ratio would differ by the tolerances alone; give a baseline judged with this run's "
                             f"profile and --rtol/--atol")
        if not any(key in self.rows for key in spec.row_keys()):
            raise UsageError(f"the baseline {self.run_dir} shares no row (case id × target × check) with this run "
                             f"(it judged profile {then.profile!r}, seed {then.seed}, {then.cases} cases on "
                             f"{', '.join(then.targets)}); give a baseline of this run's profile, seed and targets")
        if (then.profile, then.profile_sha256) != (spec.profile, spec.profile_sha256):
            other = "another version of profile" if then.profile == spec.profile else "profile"
            return (f"note: the baseline {self.run_dir} was judged with {other} {then.profile!r} under the same "
                    f"tolerances; only the rows both runs judged are compared")
        return None

    def on_row(self, row: CaseResult) -> None:
        """Make a passing row ``drifted`` when a tensor's ratio grew past the factor since the
        baseline: an observer of the run (:class:`~gradcheck_rnn.run.RowObserver`), registered
        before its store so that the row is stored as marked."""
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

    def extra(self) -> dict[str, Any]:
        """What the run stores beside its rows, and its verdict reads: ``{"drift": ...}``."""
        return {"drift": self.to_json()}


def _tolerance_differences(then: RunSpec, now: RunSpec) -> str:
    """The tolerances in which two runs' tables differ, as ``f32 output: rtol 1e-09, atol 1e-11 in
    the baseline, rtol 0.0001, atol 1e-05 now``; "" when they judge alike. A run written before
    specs recorded their table is known by its --rtol/--atol only."""
    if not then.tolerance_table:
        return ", ".join(f"--{name} {getattr(then, name)} in the baseline, {getattr(now, name)} now"
                         for name in ("rtol", "atol") if getattr(then, name) != getattr(now, name))
    old = {(dtype, kind): (rtol, atol) for dtype, kind, rtol, atol in then.tolerance_table}
    changes = [f"{dtype} {kind}: rtol {old_rtol:g}, atol {old_atol:g} in the baseline, rtol {rtol:g}, atol {atol:g} now"
               for dtype, kind, rtol, atol in now.tolerance_table
               for old_rtol, old_atol in [old.get((dtype, kind), (math.nan, math.nan))]
               if (old_rtol, old_atol) != (rtol, atol)]
    return "; ".join(changes[:2]) + (f"; {len(changes) - 2} more" if len(changes) > 2 else "")


@dataclass
class Diff:
    """Two stored runs compared (``gradcheck-rnn diff``): drifted rows and rows present in one run only."""

    drift: dict[str, Any]
    only_a: list[Key]
    only_b: list[Key]


def diff_runs(run_a: str, run_b: str, factor: float = DRIFT_FACTOR) -> Diff:
    """Compare run B with run A as ``sweep --baseline A`` compared B's rows as they arrived."""
    folder_a, rows_a, _ = load_rows(run_a)
    folder_b, rows_b, _ = load_rows(run_b)
    baseline = Baseline(folder_a, rows_a, factor)
    for key, (status, ratios) in rows_b.items():
        if key in rows_a and status in PASSED and rows_a[key][0] in PASSED:
            baseline.compared += 1
            if changes := grown(rows_a[key][1], ratios, factor):
                baseline.drifted.append(drift_entry(key, changes))
    return Diff(baseline.to_json(), sorted(rows_a.keys() - rows_b.keys()), sorted(rows_b.keys() - rows_a.keys()))
