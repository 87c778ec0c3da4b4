"""Target contracts: the preconditions a target's library documents or its maintainers hold
(docs/contracts.md, "Target contracts").

A target may declare them in an optional attribute ``contracts``: :class:`Contract` objects, or
mappings with the same keys (what a target in another interpreter sends, ``NAME@PYTHON``). Each
names a precondition this module knows (:data:`PRECONDITIONS`, keyed by how it is written, e.g.
``"T == cu_seqlens[-1]"``), quotes the library, says where the quote is and says in one sentence
what the target does outside it.

The tool still probes outside a contract where a case already does (a packed tail, ``-tail<n>``).
On such a case the compared tensors the violated precondition can reach (:attr:`Precondition.reaches`)
are judged as always, but a tensor among them that does not pass is ``out-of-contract`` instead of
``fail``, and so is a row whose only failures are such tensors (:mod:`gradcheck_rnn.model.statuses`):
shown with the sentence and the quote, not a failure of the run unless ``--strict-contracts``.
Every other tensor of the case is judged as before, and fails normally.

A new precondition is one entry of :data:`PRECONDITIONS`: when a case breaks it, and which tensors
that can reach.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any, Callable, Iterable

from ..errors import UsageError
from ..model.case import Case
from ..model.names import INPUTS, OUTPUTS, TAIL

_PARAMETER = re.compile(r"l\d+\.[a-z]+\.[A-Za-z0-9_]+")


@dataclass(frozen=True)
class Precondition:
    """A precondition the tool can test on a case: when it ``holds``, which compared tensors a
    case that breaks it can reach (``reaches``), and what breaking it means (``broken_by``)."""

    holds: Callable[[Case], bool]
    reaches: Callable[[str], bool]
    broken_by: str


def _reached_by_tail(name: str) -> bool:
    """The tail's own gradient rows, and every parameter gradient: a parameter's gradient sums over
    every packed row, the tail's included, so what a kernel leaves there reaches it."""
    return name.endswith(TAIL) or (name not in OUTPUTS + INPUTS and bool(_PARAMETER.fullmatch(name)))


PRECONDITIONS: dict[str, Precondition] = {
    "T == cu_seqlens[-1]": Precondition(
        holds=lambda case: getattr(case, "tail", 0) == 0, reaches=_reached_by_tail,
        broken_by="rows after cu_seqlens[-1]: a -tail<n> case"),
}


@dataclass(frozen=True)
class Contract:
    """One precondition a target's library documents: ``precondition`` (a key of
    :data:`PRECONDITIONS`), the library's own words (``quote``) and where they are (``source``),
    and ``outside``: one sentence of what the target does when a case breaks it."""

    precondition: str
    quote: str
    source: str
    outside: str

    def to_json(self) -> dict[str, str]:
        """The plain form a row stores and another interpreter sends."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @property
    def statement(self) -> str:
        """The sentence an out-of-contract row carries: what happened and the contract quoted."""
        return (f"outside the contract {self.precondition} ({PRECONDITIONS[self.precondition].broken_by}): "
                f"{self.outside}; the library's contract: \"{self.quote}\" ({self.source})")


KEYS = tuple(f.name for f in fields(Contract))


def as_contract(value: Any, target: str = "the target") -> Contract:
    """A declared contract as a :class:`Contract`: one already, or a mapping or object with its
    keys; UsageError (one sentence) for anything else or a precondition the tool does not know."""
    if isinstance(value, Contract):
        contract = value
    else:
        get = value.get if isinstance(value, dict) else (lambda key: getattr(value, key, None))
        missing = [key for key in KEYS if not isinstance(get(key), str)]
        if missing:
            raise UsageError(f"{target} declares a contract without {', '.join(missing)} "
                             f"(each contract needs {', '.join(KEYS)} as strings)")
        contract = Contract(**{key: get(key) for key in KEYS})
    if contract.precondition not in PRECONDITIONS:
        raise UsageError(f"{target} declares the contract {contract.precondition!r}, which gradcheck-rnn cannot "
                         f"test; known: {', '.join(map(repr, PRECONDITIONS))}")
    return contract


def declared_contracts(impl: Any, target: str = "the target") -> tuple[Contract, ...]:
    """The contracts a target object declares (its optional ``contracts``), checked."""
    return tuple(as_contract(value, target) for value in (getattr(impl, "contracts", None) or ()))


def broken(contracts: Iterable[Contract], case: Case) -> tuple[Contract, ...]:
    """The contracts ``case`` breaks."""
    return tuple(c for c in contracts if not PRECONDITIONS[c.precondition].holds(case))


def reached(contracts: Iterable[Contract], name: str) -> Contract | None:
    """The first of ``contracts`` (broken ones) whose violation can reach tensor ``name``, or None."""
    return next((c for c in contracts if PRECONDITIONS[c.precondition].reaches(name)), None)
