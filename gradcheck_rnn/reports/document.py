"""The results document (results.json's content) and the text every writer shares.

``document_head`` makes the document's top level (the run's meta, its stored verdict and
tallies), ``results_document`` the whole document of a run's :class:`CaseResult` rows, and
``load_document`` reads it back. Every writer (json, junit, markdown, html, github, the console)
renders the stored run that :func:`gradcheck_rnn.reports.publish` hands it
(:class:`~gradcheck_rnn.reports.StoredRun`: this top level, the rows, the failing rows and their
findings), in its strict-JSON form (NaN as null, ±Inf as "inf"/"-inf"), so ``gradcheck-rnn report
RUN_DIR`` re-renders byte-identical files from results.json alone, with the functions here for
their tensor lines and numbers.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from ..version import __version__
from ..judging.checks import CHECKS
from ..model.compare import expand_tensor, json_safe
from ..errors import UsageError
from ..model.numbers import fmt, from_json_number, location_text
from ..rows.result import CaseResult, document_row
from ..model.statuses import stored_facts, tensors_worst_first
from ..rows.store import Tally

SCHEMA = 1


def document_head(meta: dict[str, Any], totals: dict[str, Any], extra: dict[str, Any] | None = None,
                  results: bool = False) -> dict[str, Any]:
    """The results document's top level, every key but its rows (``"results"``, an empty list in
    its place when ``results``), in strict-JSON form: the tool, the run's ``meta`` with its
    ``"verdict"`` (``{"exit_code", "reason"}``, computed once by the engine: every writer reads it
    and none recomputes it), the tallies (``totals``) and what the run's observers and verdict
    stored beside the rows (``extra``)."""
    verdict = meta.get("verdict")
    if not isinstance(verdict, dict) or not isinstance(verdict.get("exit_code"), int):
        raise ValueError("a results document needs the run's verdict: meta['verdict'] = {'exit_code', 'reason'}")
    return json_safe({
        "tool": "gradcheck-rnn", "version": __version__, "schema": SCHEMA,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **meta, **totals, **({"results": []} if results else {}), **(extra or {}),
    })


def results_document(results: list[CaseResult], meta: dict[str, Any],
                     extra: dict[str, Any] | None = None, rows: Iterable[dict[str, Any]] | None = None,
                     totals: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``results.json`` object (schema: docs/reference/results-json.md), in strict-JSON form.

    ``meta`` must carry the run's ``"verdict"`` (``{"exit_code", "reason"}``), computed once by
    the engine: every writer reads it from the document and none recomputes it. Its ``"results"``
    are ``rows`` when given (the rows of the run's row log, read back one at a time from its
    results.jsonl by :class:`~gradcheck_rnn.rows.store.StoredRows`) and the tallies (summary,
    by_mode, ...) are then ``totals``, the judged run's (:attr:`~gradcheck_rnn.rows.store.Run.totals`,
    its log's tally counted when its verdict was made); without them both are made here from ``results``.
    """
    document = document_head(meta, totals if totals is not None else Tally.of_results(results).document_part(), extra,
                             results=True)
    document["results"] = [document_row(r) for r in results] if rows is None else rows
    return document


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
    if "by_check" not in document:  # written before these tallies were stored: made from its rows
        document.update({key: value for key, value in Tally.of(document["results"]).document_part().items()
                         if key in ("skips", "by_check")})
    return document


def convention_of(case_id: str) -> str | None:
    """The gradient conventions a row's case was judged under, as its target declared them
    (``normaliser_gradient='head_norm'``; several joined by "and"), or None for the family's
    defaults (the true derivative, the stabiliser from 0)."""
    from ..model.case import parse_case_id

    try:
        config = parse_case_id(case_id)["config"]
    except (UsageError, ValueError, KeyError):
        return None
    declared = [f"{c.attribute}={next(name for name, on in c.values.items() if on)!r}"
                for c in config.family.conventions if config.option(c.option)]
    return " and ".join(declared) or None


def strict_contracts(document: dict[str, Any]) -> bool:
    """Whether the run failed on out-of-contract rows (``--strict-contracts``, stored in its spec)."""
    return bool((document.get("spec") or {}).get("strict_contracts"))


def case_lengths(case_id: str) -> tuple[list[int] | None, int | None]:
    """Sequence lengths and number of directions from a case id (None, None when it does not parse)."""
    from ..model.case import parse_case_id
    from ..errors import UsageError

    try:
        values = parse_case_id(case_id)
    except (UsageError, ValueError, KeyError):
        return None, None
    return list(values["seq_lengths"]), values["config"].num_directions


def location_mark(location: dict[str, Any] | None, lengths: list[int] | None) -> str:
    """"padded step" or "empty sequence" when the worst element lies where the sequence has no
    data (a kernel that leaks padding fails exactly there), else ""."""
    if not location or not lengths or not isinstance(location.get("b"), int) or not 0 <= location["b"] < len(lengths):
        return ""
    length = lengths[location["b"]]
    if length == 0:
        return "empty sequence"
    if isinstance(location.get("t"), int) and location["t"] >= length:
        return "padded step"
    return ""


def check_values(check: str) -> tuple[str, str, str]:
    """What check ``check`` compares (when not the tensor itself), what its a is (always the value
    under test) and what its b is: its record's labels. A stored run's check that this version
    does not know (a newer version's, a user's) is said as plain a and b."""
    labels = CHECKS[check].labels if check in CHECKS else None
    return ("", "a", "b") if labels is None else (labels.what, labels.a, labels.b)


def significant_pair(a: float, b: float) -> tuple[str, str]:
    """a and b with just enough significant digits that they differ on paper (plus one more),
    at least 3 and at most 17: ``-0.000809`` twice at ratio 11.5 says nothing."""
    if not (math.isfinite(a) and math.isfinite(b)) or a == b:
        return format(a, ".3g"), format(b, ".3g")
    for digits in range(3, 18):
        if format(a, f".{digits}g") != format(b, f".{digits}g"):
            digits = min(17, digits + 1)
            return format(a, f".{digits}g"), format(b, f".{digits}g")
    return format(a, ".17g"), format(b, ".17g")


def diff_rdiff(a: float, b: float) -> tuple[float, float]:
    """|a − b| and |a − b| / |b| at one element, as oneDNN benchdnn prints them (NaN/Inf stay)."""
    with np.errstate(all="ignore"):
        diff = abs(np.float64(a) - np.float64(b))
        rdiff = diff / abs(np.float64(b)) if b != 0 else (0.0 if diff == 0 else math.inf)
    return float(diff), float(rdiff)


def values_parts(tensor: dict[str, Any], check: str = "reference") -> list[str]:
    """The values at the worst element, saying what they are: ``change of dx: a=-0.0076 (target),``
    ``b=0.126 (reference),``, ``diff 0.134,``, ``rdiff 1.06`` (pieces a narrow console packs)."""
    what, a_is, b_is = check_values(check)
    if check == "reference" and tensor.get("reference"):
        b_is = tensor["reference"]  # which float64 reference: loop, jax, "jax vs loop"
    a, b = from_json_number(tensor.get("a")), from_json_number(tensor.get("b"))
    a_text, b_text = significant_pair(a, b)
    diff, rdiff = diff_rdiff(a, b)
    return [f"{what + ': ' if what else ''}a={a_text} ({a_is}),", f"b={b_text} ({b_is}),",
            f"diff {diff:.3g},", f"rdiff {rdiff:.3g}"]


def failure_in_words(tensor: dict[str, Any]) -> str | None:
    """What a missing tensor, or one failed by its shape or by non-finite values (no ratio, a
    message), is said as instead of numbers; None for a tensor that numbers describe."""
    ratio = from_json_number(tensor.get("ratio"))
    if tensor["status"] == "missing" or (ratio != ratio and tensor.get("message")):
        return tensor.get("message") or f"{tensor['name']}: {tensor['status']}"
    return None


def tensor_line(tensor: dict[str, Any], check: str = "reference", lengths: list[int] | None = None) -> str:
    """One line per non-passing tensor: ratio, errors, where (marked when it is a padded step or an
    empty sequence), a and b with enough digits and what they are, diff and rdiff there, the
    tolerances. Shape, missing and non-finite failures say so in words."""
    name = tensor["name"]
    if (words := failure_in_words(tensor)) is not None:
        return words
    where = location_text(tensor.get("location"))
    mark = location_mark(tensor.get("location"), lengths)
    where = f" at {where}{', ' + mark if mark else ''}" if where else ""
    if tensor["status"] == "out-of-contract":
        where += " (outside the contract)"
    line = (f"{name}: ratio {fmt(tensor.get('ratio'))}, max abs {fmt(tensor.get('max_abs'))}, "
            f"max rel {fmt(tensor.get('max_rel'))}{where}: " + " ".join(values_parts(tensor, check))
            + f" (rtol={fmt(tensor.get('rtol'), 'g')}, atol={fmt(tensor.get('atol'), 'g')})")
    if "non-finite" in tensor.get("message", ""):
        line += f"; {tensor['message'].split(': ', 1)[-1]}"
    return line


def failing_tensors(tensors: Iterable[Any]) -> list[dict[str, Any]]:
    """The tensors of a row (its stored ``tensors``) that did not pass, worst first (the worst
    must not hide in "… more")."""
    return tensors_worst_first((t for t in map(expand_tensor, tensors) if t["status"] != "pass"), stored_facts)


def stored_verdict(document: dict[str, Any]) -> tuple[int, str]:
    """The run's exit code and one-line reason as the engine stored them in results.json; every
    writer shows this and never recomputes it. A file without one (older versions) reads as
    exit code 1, "unknown verdict": never as a pass."""
    verdict = document.get("verdict")
    if isinstance(verdict, dict) and isinstance(verdict.get("exit_code"), int):
        return verdict["exit_code"], str(verdict.get("reason") or "")
    return 1, "unknown verdict"


def progress_note(document: dict[str, Any]) -> str | None:
    """For a run that did not complete (``"complete": false``), how far it got — "the run stopped
    early (--fail-fast): 2 of 20 cases judged" — from ``cases_judged`` (counted from the rows in
    files without it); None for a complete run."""
    if document.get("complete") is not False:
        return None
    judged = document.get("cases_judged")
    if not isinstance(judged, int):
        judged = len({r["case_id"] for r in document.get("results", [])})
    planned = document.get("cases")
    return stopped_early_text(judged, planned if isinstance(planned, int) else None,
                              str(document.get("interrupted") or "--fail-fast"))


def stopped_early_text(judged: int, planned: int | None, by: str = "--fail-fast") -> str:
    """The one sentence every output gives for a run that stopped before its last case: by
    ``--fail-fast``, or interrupted by a signal (``SIGINT``, ``SIGTERM``)."""
    of = f" of {planned}" if planned is not None else ""
    noun = "case" if judged == 1 and planned is None else "cases"
    how = "stopped early (--fail-fast)" if by == "--fail-fast" else f"was interrupted by {by}"
    return f"the run {how}: {judged}{of} {noun} judged"


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
    """The checks in the order first met, and per target, for each check, rows per status (the
    run's tally, ``"by_check"``)."""
    rows = document.get("by_check", [])
    checks = list(dict.fromkeys(check for row in rows for check in row["checks"]))
    return checks, rows


def drift_rows(entries: Iterable[dict[str, Any]]) -> list[tuple[str, str, str, str, float, float]]:
    """(case id, target, check, tensor, then, now) per drifted tensor, largest growth first."""
    rows = [(e["case_id"], e["target"], e["check"], t["name"], from_json_number(t["then"]),
             from_json_number(t["now"])) for e in entries for t in e["tensors"]]
    return sorted(rows, key=lambda r: (-(r[5] / r[4]) if r[4] > 0 else -math.inf, r[:4]))


@dataclass(frozen=True)
class DriftedTensor:
    """One drifted tensor of a row: its ratio then (the baseline's) and now."""

    case_id: str
    target: str
    check: str
    tensor: str
    then: float
    now: float

    @property
    def growth(self) -> str:
        """``×52.3``, or ``from 0`` when the baseline's ratio was 0."""
        return f"×{self.now / self.then:.3g}" if self.then > 0 else "from 0"


@dataclass(frozen=True)
class DriftView:
    """The one view of a run's drift section (results.json's ``"drift"``, ``sweep --baseline``)
    that the console, report.md and report.html render: the baseline, how many rows were compared
    and drifted, the rule, and every drifted tensor, largest growth first."""

    baseline: str
    compared: int
    drifted: int  # rows
    factor: float
    floor: float
    fail_on_drift: bool
    tensors: tuple[DriftedTensor, ...]

    @classmethod
    def of(cls, drift: dict[str, Any]) -> "DriftView":
        return cls(drift["baseline"], drift["compared"], len(drift["rows"]), drift["factor"], drift["floor"],
                   bool(drift.get("fail_on_drift")), tuple(DriftedTensor(*row) for row in drift_rows(drift["rows"])))
