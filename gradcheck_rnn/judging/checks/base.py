"""What every check shares: its record, how it ends (exceptions the engine turns into statuses) and helpers.

A check is a :class:`Check` record: everything the rest of the tool needs to know about it is a
field there (its name, its place in the judging order, what a report calls its a and b, the
salt of its random stream, the float64 truth it needs), so that adding one is one module.
Its function is ``(context, call, tolerances) -> list[TensorError]``: ``context`` is the
case's :class:`~gradcheck_rnn.judging.context.CaseContext` (the float64 truth, computed once), ``call``
the target's :class:`~gradcheck_rnn.judging.judge.TargetCall` (``call.run(case)`` and the shared
``call.base()`` return validated float64 arrays). Returned rows that do not pass make the row
``fail``; a check ends otherwise by raising :class:`Skip`, :class:`Nondeterministic` or
:class:`ReferenceDisagreement`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ...model.case import Case
from ...model.streams import case_rng as stream
from ...model.streams import claim
from ...model.compare import TensorError, compare_tensor
from ...model.tolerances import Tolerance, Tolerances

# The engine's types (context.CaseContext, judge.TargetCall, context.Arrays) are not imported
# here: the engine imports the checks, and data flows one way.
Arrays = dict[str, np.ndarray]


class Skip(Exception):
    """The check does not apply to this case (e.g. no padded steps to change)."""


class Nondeterministic(Exception):
    """Two runs of the same case returned different finite values (status ``nondeterministic``)."""

    def __init__(self, message: str, rows: list[TensorError]) -> None:
        super().__init__(message)
        self.message, self.rows = message, rows


class ReferenceDisagreement(Exception):
    """The ground truth disagrees with itself (status ``reference-disagreement``, never the target's fault)."""

    def __init__(self, rows: list[TensorError]) -> None:
        self.message = "; ".join(row.message for row in rows[:3])
        super().__init__(self.message)
        self.rows = rows


CheckFunction = Callable[[Any, Any, Tolerances], list[TensorError]]


@dataclass(frozen=True)
class Labels:
    """What a report says a row's values are: ``a`` (always the value under test) and ``b`` at the
    worst element, and ``what`` is compared when it is not the tensor itself (``change of dx``)."""

    a: str
    b: str
    what: str = ""


@dataclass(frozen=True)
class Check:
    """A check, all of it: its name (``--check NAME``), its function, ``order`` (its place in the
    order a case's checks are judged in: lower first), what its values are called in reports
    (``labels``), the salt of its own random stream (``salt``, claimed in
    :mod:`gradcheck_rnn.model.streams`; None for a check that draws nothing of its own) and the
    float64 truth it needs (``truth``: a function of the case's context, computed once per case
    and shared by every target: ``context.truth(check)``)."""

    name: str
    run: CheckFunction
    order: int
    labels: Labels
    salt: int | None = None
    truth: Callable[[Any], Any] | None = None

    def __post_init__(self) -> None:
        if self.salt is not None:
            claim(self.salt, f"the {self.name} check")

    def rng(self, case: Case) -> np.random.Generator:
        """This check's private generator for ``case`` (its ``salt``)."""
        assert self.salt is not None, f"the {self.name} check has no salt"
        return stream(case.seed, self.salt)


def compare_runs(case: Case, actual: Arrays, parts: Sequence[Arrays], tolerances: Tolerances) -> list[TensorError]:
    """Each tensor of ``parts[0]`` (a run of the target) against the same tensor of ``actual``
    (another run), which must equal the sum over ``parts`` (one part for padding and permutation,
    two for linearity). Every run is only as exact as the case's tolerance, so each element is
    judged by the sum of the runs' bounds (:func:`~gradcheck_rnn.model.compare.term_bound`), not by
    atol + rtol·|sum|: a precision the reference check accepts must not fail here."""
    rows = []
    for name in parts[0]:
        values = [part[name] for part in parts]
        got = actual.get(name)
        terms = values if got is None else [got, *values]
        rows.append(compare_tensor(name, got, sum(values[1:], values[0]),
                                   tolerances.for_tensor(case.config.dtype, name), case.config, terms=terms))
    return rows


def differences(case: Case, first: Arrays, second: Arrays) -> list[TensorError]:
    """Bit-identity of two runs, reported with a zero tolerance so the table shows where they differ.

    An element non-finite in either run and finite in the other fails the comparison: two runs
    that differ so are not identical (a packed tail's unwritten rows, NaN in one run and finite in
    the next, are not validated as finite)."""
    return [compare_tensor(name, second.get(name), value, Tolerance(0.0, 0.0), case.config)
            for name, value in first.items()]
