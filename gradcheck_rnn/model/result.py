"""One row: the verdict of one check on one case × target (:class:`CaseResult`), and how to judge
it again (:class:`Repro`).

The row's stored forms, its normal form and its one finisher are :mod:`gradcheck_rnn.rows.result`'s;
the statuses and which of them fail a run, :mod:`.statuses`'. Here, below the judging stage that
makes rows, so that every stage can hold one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .case import id_facts
from .compare import TensorError, from_json_number, json_safe
from .statuses import worst_tensor


# What a repro line says for a target object that the command line cannot name.
NOT_IMPORTABLE = "not reproducible from the command line: the target is not importable as module:qualname"


@dataclass(frozen=True)
class Repro:
    """How to judge one row again: its case, target and check, the run's options (``--config
    nightly --case-timeout 10``: :func:`~gradcheck_rnn.rows.result.finish`'s) and the environment its target needs."""

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
    # short (:func:`~gradcheck_rnn.rows.result.normal_form`), so that the supervisor does not: it writes the line as it
    # is while the row is what it was then (:func:`~gradcheck_rnn.rows.result.stored_form`). Not part of the row's value.
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
        can name); finished rows only (:func:`~gradcheck_rnn.rows.result.finish` adds the run's options)."""
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
        """Strict-JSON form, whole (a results.json row that did not pass; see :func:`~gradcheck_rnn.rows.result.document_row`)."""
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
        the worst tensor, which :func:`~gradcheck_rnn.rows.result.row_worst` finds among the tensors), the mode, dtype and
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


def row_field(row: dict[str, Any], key: str) -> str:
    """A stored row's ``mode``, ``dtype`` or ``wants``: as stored, or as its case id says where a
    compact row left it out."""
    value = row.get(key)
    return value if value is not None else id_facts(row["case_id"]).get(key, "")
