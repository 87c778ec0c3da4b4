"""The rows' stored forms, their normal form and their one finisher.

The row itself (:class:`CaseResult`, :class:`Repro`) is :mod:`gradcheck_rnn.model.result`'s, read
from here too; the statuses a row can have, and which of them fail a run, are in
:mod:`gradcheck_rnn.model.statuses`; the run's one verdict is :mod:`gradcheck_rnn.rows.store`'s.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ..model.compare import from_json_number, tensor_summary
from ..model.numbers import shorten_json_numbers
from ..model.result import NOT_IMPORTABLE, CaseResult, Repro, row_field  # noqa: F401  (read from here too)
from ..model.statuses import BAD_STATUSES, is_shown, worst_tensor  # noqa: F401  (BAD_STATUSES: read from here too)


def finish(row: CaseResult, repro_options: str, case_timeout: float | None) -> CaseResult:
    """What a run adds to each row it judged, in one place (every executor's rows pass here once;
    a merge or a report reads them as they were finished): the run's repro options, and
    ``--case-timeout`` for a row that timed out, so that its repro line stops the hang too."""
    row.repro_options = repro_options
    if row.timed_out and case_timeout is not None:
        row.repro_options = f"{repro_options} --case-timeout {case_timeout:g}".strip()
    return row


def slim(row: CaseResult) -> CaseResult:
    """Drop the ratio maps of a row that passed or was skipped, as soon as it arrives.

    results.json keeps ratio maps only for rows that did not pass (they exist to draw failures,
    :func:`document_row`), and in memory they are about a third
    of a row (benchmarks/RESULTS.md, "Memory").
    """
    if not is_shown(row.status):
        for tensor in row.tensors:
            tensor.ratio_map = None
    return row


# Rows stored short (docs/contracts.md, "Row size"); a drifted row stays whole, as a failure does:
# there are few, and with --fail-on-drift they are the run's failures.
SHORT_STATUSES = ("pass", "skip")


def stored_short(result: CaseResult) -> bool:
    """Whether results.json stores ``result`` in the short form: it passed or was skipped."""
    return result.status in SHORT_STATUSES and all(t.passed for t in result.tensors)


def document_row(result: CaseResult) -> dict[str, Any]:
    """A row as results.json stores it, in strict-JSON form: the short
    :meth:`CaseResult.compact_json` form for a row that passed or was skipped, so that a large
    green run's results.json stays small (docs/contracts.md, "Row size"); whole (ratio maps,
    per-step errors, a and b, the repro line) for every other row, which the reports detail."""
    return result.compact_json() if stored_short(result) else result.to_json()


def row_line(row: dict[str, Any]) -> bytes:
    """A stored row as a line of results.jsonl: strict JSON, every number in its shortest spelling."""
    text = json.dumps(row, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    return shorten_json_numbers(text).encode("utf-8") + b"\n"


def normal_form(result: CaseResult, index: int | None) -> CaseResult:
    """A judged row as a run stores it, in one place: stamped with its sweep ``index``, slimmed
    (:func:`slim`) and, when it is stored short, with its results.jsonl line made now.
    :func:`~gradcheck_rnn.run.judge_run` applies it to every row; a worker process applies it
    before it sends the row (less to send, and the line made on the worker's core instead of the
    one supervisor's: benchmarks/supervisor_capacity.py), which leaves nothing to do here again."""
    if result.stored_line is not None and result.case_index == index:
        return result
    result.case_index = index
    slim(result)
    if stored_short(result):
        result.stored_line = row_line(result.compact_json())
    return result


def _row_of_stored_line(result: CaseResult) -> dict[str, Any] | None:
    """The stored row read from the line its worker made (:func:`normal_form`), while the row is
    still what it was then; None without a line, or for a row the supervisor changed since (a
    baseline marked it drifted: its status, message and index no longer match the line's)."""
    if result.stored_line is None:
        return None
    row = json.loads(result.stored_line)
    unchanged = (row["status"], row.get("message", ""), row["case_index"]) == (result.status, result.message,
                                                                               result.case_index)
    return row if unchanged else None


def stored_row(result: CaseResult) -> dict[str, Any]:
    """:func:`document_row`, read from the worker's line where it still holds (what a tally reads)."""
    row = _row_of_stored_line(result)
    return document_row(result) if row is None else row


def stored_form(result: CaseResult) -> tuple[dict[str, Any], bytes]:
    """The row as results.json stores it and its results.jsonl line: the worker's line as it is
    while it still holds (:func:`_row_of_stored_line`), else both made here (a drifted row whole)."""
    row = _row_of_stored_line(result)
    if row is not None:
        return row, result.stored_line
    row = document_row(result)
    return row, row_line(row)


def row_worst(row: dict[str, Any]) -> tuple[str | None, float]:
    """The worst tensor of a stored row and its ratio (None and NaN when it compared none): as
    stored in a whole row, found among the tensors of a compact one as :attr:`CaseResult.worst`
    finds it."""
    if "worst_tensor" in row:
        return row["worst_tensor"], from_json_number(row.get("worst_ratio"))
    tensors = [(name, status, from_json_number(ratio)) for name, status, ratio, _ in map(tensor_summary, row.get("tensors", ()))]
    worst = worst_tensor(tensors, facts=lambda tensor: tensor[1:])
    return (None, math.nan) if worst is None else (worst[0], worst[2])


def repro_options(config: str | None, rtol: float | None, atol: float | None, families: tuple[str, ...] = ()) -> str:
    """The options a repro command needs to judge as the run did: ``--config nightly --rtol 0.01``
    (the profile whose tolerances applied, the command-line overrides, none at the defaults, and
    each user family the case ids need, ``--family my_cells:MINGRU``)."""
    # per-kind overrides (a dict, from an emitted test) have no command-line form: the profile names them
    given = [(name, value) for name, value in (("config", config), ("rtol", rtol), ("atol", atol))
             if value is not None and not isinstance(value, dict)]
    return " ".join(f"--{name} {value}" for name, value in [*(("family", spec) for spec in families), *given])


# Old places: plural is model/numbers.py's, the verdict, its exit codes and the judged Run are
# rows/store.py's (which reads this module's rows, so it is looked up when first asked for here).
from ..model.numbers import plural  # noqa: E402,F401

_MOVED_TO_VERDICT = {"EXIT_FAIL", "EXIT_INTERRUPTED", "EXIT_NOTHING_CHECKED", "EXIT_PASS", "EXIT_USAGE", "Run",
                     "StopReason", "tally_verdict", "top_skip_reasons"}


def __getattr__(name: str) -> Any:
    if name in _MOVED_TO_VERDICT:
        import importlib

        return getattr(importlib.import_module(f"{__package__}.store"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
