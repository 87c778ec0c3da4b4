"""The result model: one row per case × target × check, its stored forms and its one finisher.

The statuses a row can have, and which of them fail a run, are in :mod:`gradcheck_rnn.model.statuses`;
the run's one verdict is :mod:`gradcheck_rnn.rows.store`'s.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from ..model.case import id_facts
from ..model.compare import TensorError, from_json_number, json_safe, tensor_summary
from ..model.numbers import shorten_json_numbers
from ..model.statuses import BAD_STATUSES, is_shown, worst_tensor  # noqa: F401  (BAD_STATUSES: read from here too)


# What a repro line says for a target object that the command line cannot name.
NOT_IMPORTABLE = "not reproducible from the command line: the target is not importable as module:qualname"


@dataclass(frozen=True)
class Repro:
    """How to judge one row again: its case, target and check, the run's options (``--config
    nightly --case-timeout 10``: :func:`finish`'s) and the environment its target needs."""

    case_id: str
    target: str
    check: str = "reference"
    options: str = ""
    env: str = ""

    @property
    def command(self) -> str:
        """``[ENV ]gradcheck-rnn repro <case id> --target T [--check C] [options]``."""
        checks = "" if self.check == "reference" else f" --check {self.check}"
        options = f" {self.options}" if self.options else ""
        environment = f"{self.env} " if self.env else ""
        return f"{environment}gradcheck-rnn repro {self.case_id} --target {self.target}{checks}{options}"


@dataclass
class CaseResult:
    """The verdict of one check on one case × target, with every compared tensor."""

    case_id: str
    target: str
    status: str
    mode: str
    dtype: str
    wants: str
    message: str = ""
    seconds: float = 0.0
    tensors: list[TensorError] = field(default_factory=list)
    check: str = "reference"  # the check that made this row (gradcheck_rnn.judging.checks.CHECKS)
    repro_options: str = ""  # e.g. "--config nightly --rtol 0.01": what judged it, for the repro line
    traceback: str = ""  # for errors: the target's own frames (file:line), see judge.describe_exception
    case_index: int | None = None  # i of draw_case(profile, seed, i) in a sweep: merge orders shards by it
    importable: bool = True  # False: the target is an object that no command line can name
    repro_env: str = ""  # what the repro line sets before the command: "TRITON_INTERPRET=1" (Target.repro_env)
    timed_out: bool = False  # an error row of a target that ran past --case-timeout (its worker was killed)
    error_type: str = ""  # an error row of a target that raised: the exception's class name ("KeyError")
    # The row's results.jsonl line, made by the worker process that judged it when the row is stored
    # short (:func:`normal_form`), so that the supervisor does not: it writes the line as it
    # is while the row is what it was then (:func:`stored_form`). Not part of the row's value.
    stored_line: bytes | None = field(default=None, repr=False, compare=False)

    @classmethod
    def of_case(cls, case: Any, target: str, status: str, check: str, case_id: str | None = None,
                **fields: Any) -> "CaseResult":
        """The one row factory: a row of ``case`` (a ``Case`` or a ``CaseRef``) on ``target`` for
        ``check``, judged (:mod:`gradcheck_rnn.judging.judge`) or an error the executor saw (a
        worker that died or timed out, a lost Dask chunk). ``case_id``: the id the target's rows
        carry where it is not ``case``'s own (the target's kernel configuration or convention,
        :func:`gradcheck_rnn.judging.judge.judged_case_id`)."""
        config = case.config
        return cls(case_id or case.id, target, status, config.mode, config.dtype, case.wants_group, check=check,
                   **fields)

    @property
    def compared(self) -> list[str]:
        return [t.name for t in self.tensors]

    @property
    def worst(self) -> TensorError | None:
        """The first tensor in the one worst-first order (missing, NaN, largest ratio), :func:`worst_tensor`."""
        return worst_tensor(self.tensors)

    @property
    def failing(self) -> list[TensorError]:
        return [t for t in self.tensors if not t.passed]

    @property
    def reproduction(self) -> Repro | None:
        """How to judge this row again, as a value (None: the target is an object no command line
        can name); finished rows only (:func:`finish` adds the run's options)."""
        if not self.importable:
            return None
        return Repro(self.case_id, self.target, self.check, self.repro_options, self.repro_env)

    @property
    def repro(self) -> str:
        """The command that judges this row again, or why there is none."""
        reproduction = self.reproduction
        if reproduction is None:
            return f"{NOT_IMPORTABLE} ({self.target}); define it at module level to get a repro command"
        return reproduction.command

    def to_json(self) -> dict[str, Any]:
        """Strict-JSON form, whole (a results.json row that did not pass; see :func:`document_row`)."""
        worst = self.worst
        return {
            "case_id": self.case_id, "target": self.target, "check": self.check, "status": self.status, "mode": self.mode,
            "dtype": self.dtype, "wants": self.wants, "message": self.message, "seconds": json_safe(round(self.seconds, 6)),
            "compared": self.compared, "worst_ratio": None if worst is None else json_safe(worst.ratio),
            "worst_tensor": None if worst is None else worst.name, "repro": self.repro, "traceback": self.traceback,
            "tensors": [t.to_json() for t in self.tensors], "case_index": self.case_index,
            "repro_options": self.repro_options, "importable": self.importable,
            **({"repro_env": self.repro_env} if self.repro_env else {}),
            **({"timed_out": True} if self.timed_out else {}),
            **({"error_type": self.error_type} if self.error_type else {}),
        }

    def compact_json(self) -> dict[str, Any]:
        """The short form of a row that passed or was skipped, in results.json
        (docs/contracts.md, "Row size"): what the tallies, the summary tables, junit.xml, merge
        and a later ``--baseline`` read, each tensor in :meth:`TensorError.compact_json` form. Left
        out: what only a failure's reader needs (the repro line, the traceback, the repro options,
        the worst tensor, which :func:`row_worst` finds among the tensors), the mode, dtype and
        wants group where the case id says them (:func:`row_field`), ``seconds`` when 0, a
        message or ``importable`` saying nothing, ``tensors`` when it compared none."""
        said = id_facts(self.case_id)
        row = {"case_id": self.case_id, "target": self.target, "check": self.check, "status": self.status,
               "case_index": self.case_index}
        optional = {"mode": (self.mode, said.get("mode")), "dtype": (self.dtype, said.get("dtype")),
                    "wants": (self.wants, said.get("wants")), "seconds": (round(self.seconds, 3), 0),
                    "message": (self.message, ""), "importable": (self.importable, True)}
        row.update({key: value for key, (value, default) in optional.items() if value != default})
        row = {key: json_safe(value) for key, value in row.items()}  # strict JSON as it is made, field by field
        if self.tensors:  # a skipped row compared none: no empty list on every skip
            row["tensors"] = [t.compact_json() for t in self.tensors]
        return row

    @classmethod
    def from_json(cls, row: dict[str, Any]) -> "CaseResult":
        """Inverse of :meth:`to_json` (a results.json row back to a result, e.g. to merge shards)."""
        check = row.get("check", "reference")
        return cls(row["case_id"], row["target"], row["status"], row_field(row, "mode"), row_field(row, "dtype"),
                   row_field(row, "wants"), message=row.get("message", ""),
                   seconds=from_json_number(row.get("seconds", 0.0)),
                   tensors=[TensorError.from_json(t) for t in row.get("tensors", [])], check=check,
                   repro_options=row.get("repro_options", ""), traceback=row.get("traceback", ""),
                   repro_env=row.get("repro_env", ""), timed_out=row.get("timed_out", False),
                   error_type=row.get("error_type", ""),
                   case_index=row.get("case_index"), importable=row.get("importable", True))


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


def row_field(row: dict[str, Any], key: str) -> str:
    """A stored row's ``mode``, ``dtype`` or ``wants``: as stored, or as its case id says where a
    compact row left it out."""
    value = row.get(key)
    return value if value is not None else id_facts(row["case_id"]).get(key, "")


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
