"""The results document: the one object every report writer renders (results.json's content).

``results_document`` builds it from the :class:`CaseResult` rows of a run; every writer
(json, junit, markdown, html, github) then reads only the document, in its strict-JSON form
(NaN as null, ±Inf as "inf"/"-inf"), so ``gradcheck-rnn report RUN_DIR`` re-renders byte-identical
files from results.json alone. ``results_from_document`` goes back to rows for the console tables.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .. import __version__
from ..compare import from_json_number, json_safe
from ..errors import UsageError
from ..runner import STATUSES, CaseResult, exit_code

SCHEMA = 1
# Most serious first: how a case × target × check row sorts among the failures.
SEVERITY = ("fail", "reference-disagreement", "error")


def summary(results: list[CaseResult]) -> dict[str, int]:
    """Row counts per status, the total and the exit code the rows call for."""
    counts = Counter(r.status for r in results)
    return {"total": len(results), **{s: counts.get(s, 0) for s in STATUSES}, "exit_code": exit_code(results)}


def case_status(rows: list[CaseResult]) -> str:
    """One verdict for a case × target from all its check rows: the most serious status wins."""
    statuses = {r.status for r in rows}
    for status in SEVERITY:
        if status in statuses:
            return status
    return "pass" if "pass" in statuses else "skip"


def breakdown(results: list[CaseResult], key: str) -> list[dict[str, Any]]:
    """Per target × ``key`` (``mode`` or ``wants``): distinct cases, their verdicts over every
    check, and the worst reference-comparison ratio of the group."""
    groups: dict[tuple[str, str], dict[str, list[CaseResult]]] = {}
    for r in results:
        groups.setdefault((r.target, getattr(r, key)), {}).setdefault(r.case_id, []).append(r)
    rows = []
    for (target, value), cases in groups.items():
        ratios = [w.ratio for rows_ in cases.values() for r in rows_ if r.check == "reference"
                  and (w := r.worst) is not None and w.ratio == w.ratio]
        counts = Counter(case_status(rows_) for rows_ in cases.values())
        rows.append({"target": target, key: value, "cases": len(cases),
                     **{s: counts.get(s, 0) for s in STATUSES}, "worst_ratio": max(ratios, default=None)})
    return rows


def mistrust(results: list[CaseResult]) -> dict[str, int]:
    """How many compared tensors were mistrusted (zeros would have passed them), out of how many,
    and in how many result rows; a run whose comparisons are mostly trivial shows here."""
    compared = [t for r in results for t in r.tensors if t.status != "missing"]
    return {"tensors": sum(t.mistrusted for t in compared), "compared": len(compared),
            "results": sum(any(t.mistrusted for t in r.tensors) for r in results)}


def results_document(results: list[CaseResult], meta: dict[str, Any],
                     extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``results.json`` object (schema in the README), in strict-JSON form.

    Ratio maps are kept only for rows that did not pass: they exist to draw failures, and
    dropping them elsewhere keeps a large green run's results.json small.
    """
    rows = []
    for r in results:
        row = r.to_json()
        if r.status in ("pass", "skip"):
            for tensor in row["tensors"]:
                tensor["ratio_map"] = None
        rows.append(row)
    document = {
        "tool": "gradcheck-rnn", "version": __version__, "schema": SCHEMA,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **meta,
        "summary": summary(results),
        "mistrusted": mistrust(results),
        "by_mode": breakdown(results, "mode"),
        "by_wants": breakdown(results, "wants"),
        "results": rows,
        **(extra or {}),
    }
    return json_safe(document)


def load_document(run_dir: str | Path) -> dict[str, Any]:
    """Read ``RUN_DIR/results.json``; UsageError (one sentence) when it is missing or not ours."""
    path = Path(run_dir) / "results.json"
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{path} does not exist; give a run folder written by gradcheck-rnn sweep") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path} cannot be read as JSON ({exc})") from None
    if not isinstance(document, dict) or document.get("tool") != "gradcheck-rnn" \
            or not isinstance(document.get("results"), list):
        raise UsageError(f"{path} is not a gradcheck-rnn results document")
    if document.get("schema") != SCHEMA:
        raise UsageError(f"{path} has schema {document.get('schema')!r}; this version reads schema {SCHEMA}")
    return document


def results_from_document(document: dict[str, Any]) -> list[CaseResult]:
    """The rows of a results document as CaseResult objects (for the console tables)."""
    return [CaseResult.from_json(row) for row in document["results"]]


def badness(row: dict[str, Any]) -> float:
    """Sort key magnitude of a row: its worst ratio, with NaN, Inf and no ratio at all worst."""
    ratio = from_json_number(row.get("worst_ratio"))
    return math.inf if math.isnan(ratio) else ratio


def failures(document: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows that did not pass or skip, worst first: fails by ratio, then disagreements, then errors."""
    bad = [r for r in document["results"] if r["status"] not in ("pass", "skip")]
    return sorted(bad, key=lambda r: (SEVERITY.index(r["status"]) if r["status"] in SEVERITY else len(SEVERITY),
                                      -badness(r), r["case_id"], r["target"], r.get("check", "")))


def fmt(value: Any, spec: str = ".3g") -> str:
    """A stored number for humans: null → "nan", "inf" stays "inf", else formatted with ``spec``."""
    return format(from_json_number(value), spec)


def location_text(location: dict[str, Any] | None) -> str:
    """(t=1,b=0,unit=2) — the worst element in the tensor's own terms."""
    return "(" + ",".join(f"{k}={v}" for k, v in location.items()) + ")" if location else ""


def tensor_line(tensor: dict[str, Any]) -> str:
    """One line per non-passing tensor: ratio, errors, where, a and b, and which reference."""
    name = tensor["name"]
    if tensor["status"] == "missing" or (tensor.get("ratio") is None and tensor.get("message")):
        return tensor.get("message") or f"{name}: {tensor['status']}"
    line = (f"{name}: ratio {fmt(tensor.get('ratio'))}, max abs {fmt(tensor.get('max_abs'))}, "
            f"max rel {fmt(tensor.get('max_rel'))} at {location_text(tensor.get('location'))}: "
            f"a={fmt(tensor.get('a'), '.9g')}, b={fmt(tensor.get('b'), '.9g')} "
            f"(rtol={fmt(tensor.get('rtol'), 'g')}, atol={fmt(tensor.get('atol'), 'g')}"
            + (f", vs {tensor['reference']})" if tensor.get("reference") else ")"))
    if "non-finite" in tensor.get("message", ""):
        line += f"; {tensor['message'].split(': ', 1)[-1]}"
    return line


def failing_tensors(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The tensors of a row that did not pass."""
    return [t for t in row.get("tensors", []) if t["status"] != "pass"]


def mistrust_note(counts: dict[str, int] | None) -> str | None:
    """One sentence about mistrusted comparisons (counts as :func:`mistrust` gives them), or None
    when there were none."""
    if not counts or not counts.get("tensors"):
        return None
    share = counts["tensors"] / max(counts.get("compared", 0), 1)
    return (f"{counts['tensors']} of {counts['compared']} compared tensors ({share:.0%}, in {counts['results']} "
            f"results) were mistrusted: their expected values are almost all zero, so a kernel returning "
            f"zeros would pass them")


def by_check(document: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
    """Per target: for each check, how many rows were judged and how many did not pass."""
    checks: list[str] = []
    table: dict[str, dict[str, Any]] = {}
    for r in document["results"]:
        check = r.get("check", "reference")
        if check not in checks:
            checks.append(check)
        row = table.setdefault(r["target"], {"target": r["target"], "checks": {}})
        cell = row["checks"].setdefault(check, Counter())
        cell[r["status"]] += 1
    return checks, list(table.values())
