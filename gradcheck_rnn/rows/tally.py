"""A run's totals, made once as its rows arrive, from each row's stored form (a results.json row).

One source of truth: the console's summary tables, results.json's ``summary``, ``mistrusted``,
``by_mode`` and ``by_wants``, and every report read these tallies, which are made from exactly the
rows written to the run's row log, never recomputed from other objects. A tally keeps counts and,
per target × group × case, a set of statuses: no row is held.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any, Iterable

from ..model.compare import tensor_summary
from .result import document_row, row_field, row_worst
from ..model.statuses import JUDGED, SEVERITY, STATUSES

GROUP_KEYS = ("mode", "wants")


# A case's statuses as the bits of one small int: a set per case × target was most of a large
# run's tally (benchmarks/memory.py).
_BIT = {status: 1 << i for i, status in enumerate(STATUSES)}


# What a case id says beyond the kind of case it is: its sizes, its lengths (but whether one is 0)
# and its seed, each set to one value so that a run's case shapes stay few whatever its size.
_SIZES = ((re.compile(r"-I\d+-H\d+"), "-I0-H0"), (re.compile(r"-T\d+-B\d+"), "-T0-B0"),
          (re.compile(r"-s\d+"), "-s0"))
_LENGTHS = re.compile(r"-len([0-9.]+)")


def case_shape(case_id: str) -> str:
    """The case id with its sizes, lengths and seed set to one value (a zero length kept as one):
    the same grammar, read by the "next:" hint (:func:`gradcheck_rnn.cli.advice.next_step`)."""
    for pattern, fixed in _SIZES:
        case_id = pattern.sub(fixed, case_id, count=1)
    return _LENGTHS.sub(lambda m: "-len0" if "0" in m[1].split(".") else "-len1", case_id, count=1)


def case_status(statuses: int) -> str:
    """One verdict for a case × target from all its check rows (their statuses as the bits of
    :data:`_BIT`): the most serious status wins."""
    for status in (*SEVERITY, "drifted", "pass"):
        if statuses & _BIT[status]:
            return status
    return "skip"


class Tally:
    """Counts of a run's rows, added one stored row (a dict) at a time."""

    def __init__(self) -> None:
        self.statuses: Counter[str] = Counter()
        self.tensors = self.compared = self.mistrusted_rows = 0
        # key -> (target, group value) -> {"cases": {case id: status bits}, "ratio": worst or None}
        self.groups: dict[str, dict[tuple[str, str], dict[str, Any]]] = {key: {} for key in GROUP_KEYS}
        self.per_target: Counter[str] = Counter()
        self.skips: dict[str, Counter[str]] = {}  # target -> skip reason -> rows
        self.checks: dict[str, dict[str, Counter[str]]] = {}  # target -> check -> status -> rows
        # target -> (refused, judged): the case shapes of its reference rows, for a green run's "next:" note
        self.coverage: dict[str, tuple[Counter[str], Counter[str]]] = {}

    @classmethod
    def of(cls, rows: Iterable[dict[str, Any]]) -> "Tally":
        tally = cls()
        for row in rows:
            tally.add(row)
        return tally

    @classmethod
    def of_results(cls, results: Iterable[Any]) -> "Tally":
        """The tally of CaseResult objects, through their stored form (as the row log makes it)."""
        return cls.of(document_row(result) for result in results)

    def add(self, row: dict[str, Any]) -> None:
        """Count one results.json row."""
        status, target = row["status"], row["target"]
        self.statuses[status] += 1
        self.per_target[target] += 1
        if status == "skip":
            self.skips.setdefault(target, Counter())[row.get("message") or "no reason given"] += 1
        self.checks.setdefault(target, {}).setdefault(row.get("check", "reference"), Counter())[status] += 1
        if row.get("check", "reference") == "reference":  # only reference rows say whether it took the case
            refused, judged = self.coverage.setdefault(target, (Counter(), Counter()))
            (refused if status == "skip" else judged)[case_shape(row["case_id"])] += 1
        compared = [t for t in map(tensor_summary, row.get("tensors", ())) if t[1] != "missing"]
        mistrusted = sum(t[3] for t in compared)
        self.compared += len(compared)
        self.tensors += mistrusted
        self.mistrusted_rows += bool(mistrusted)
        # the row's worst ratio counts when it judged the target; a fail without one (a shape,
        # a missing tensor, NaN) is as bad as it gets: inf. Disagreements measure the references.
        ratio = None
        worst, value = row_worst(row)
        if status in JUDGED and worst is not None:
            ratio = value if value == value else (math.inf if status == "fail" else None)
        for key in GROUP_KEYS:
            group = self.groups[key].setdefault((row["target"], row_field(row, key)), {"cases": {}, "ratio": None})
            cases = group["cases"]
            cases[row["case_id"]] = cases.get(row["case_id"], 0) | _BIT.get(status, 0)
            if ratio is not None:
                group["ratio"] = ratio if group["ratio"] is None else max(group["ratio"], ratio)

    @property
    def rows(self) -> int:
        """Rows counted."""
        return sum(self.statuses.values())

    @property
    def cases_judged(self) -> int:
        """Distinct case ids with at least one row."""
        return len(set().union(*(group["cases"] for group in self.groups["mode"].values())))

    def cases_per_target(self) -> Counter[str]:
        """Distinct cases judged per target: a case whose every row of the target is a skip does not count."""
        counts: Counter[str] = Counter()
        for (target, _), group in self.groups["mode"].items():
            counts[target] += sum(case_status(bits) != "skip" for bits in group["cases"].values())
        return counts

    def summary(self) -> dict[str, int]:
        """Row counts per status and the total (the verdict is the run's, stored apart)."""
        return {"total": sum(self.statuses.values()), **{s: self.statuses.get(s, 0) for s in STATUSES}}

    def mistrust(self) -> dict[str, int]:
        """How many compared tensors were mistrusted (zeros would have passed them), out of how
        many, and in how many rows: a run whose comparisons are mostly trivial shows here."""
        return {"tensors": self.tensors, "compared": self.compared, "results": self.mistrusted_rows}

    def breakdown(self, key: str) -> list[dict[str, Any]]:
        """Per target × ``key`` (``mode`` or ``wants``), sorted by both (rows of one run arrive in
        another order with more workers, and the totals must not depend on it): distinct cases, their verdicts over every check, and the worst ratio over every check that judged
        the target (a row that failed ``future`` at 538 must not hide behind a reference ratio
        of 0.0004)."""
        rows = []
        for (target, value), group in sorted(self.groups[key].items(), key=lambda item: item[0]):
            counts = Counter(case_status(statuses) for statuses in group["cases"].values())
            rows.append({"target": target, key: value, "cases": len(group["cases"]),
                         **{s: counts.get(s, 0) for s in STATUSES}, "worst_ratio": group["ratio"]})
        return rows

    def skip_reasons(self, top: int = 3) -> list[dict[str, Any]]:
        """Per target that skipped anything: rows skipped, rows in all, and the ``top`` most
        frequent reasons with their counts."""
        entries = []
        for target, counter in self.skips.items():
            common = counter.most_common(top)
            entries.append({"target": target, "skipped": sum(counter.values()), "total": self.per_target[target],
                            "reasons": [list(pair) for pair in common],
                            "other": sum(counter.values()) - sum(n for _, n in common)})
        return entries

    def by_check(self) -> list[dict[str, Any]]:
        """Per target, for each check: rows per status."""
        return [{"target": target, "checks": {check: dict(counts) for check, counts in checks.items()}}
                for target, checks in self.checks.items()]

    def document_part(self) -> dict[str, Any]:
        """The tallies as results.json stores them."""
        return {"summary": self.summary(), "mistrusted": self.mistrust(), "by_mode": self.breakdown("mode"),
                "by_wants": self.breakdown("wants"), "skips": self.skip_reasons(), "by_check": self.by_check()}

